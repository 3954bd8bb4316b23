//! skillbox-skill's integration tests, one binary (`cargo test --test it`; a module's tests with
//! `-- <module>::`): the grammar, the OpenWOP projection and fixtures, the roster rules, the real
//! corpus, and the property tests.

mod agents;
mod corpus;
mod grammar;
mod openwop;
mod properties;
