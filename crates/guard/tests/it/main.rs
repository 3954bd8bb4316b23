//! skillbox-guard's integration tests, one binary (`cargo test --test it`; a module's tests with
//! `-- <module>::`): the check decoder by decoder, the prompt-extraction measurement, and the
//! property tests, the new forms of an adaptive caller (`views`). `support` holds the encoders an obedient model hides a prompt with; `coverage`, short secrets taken in pieces across answers.

mod check;
mod coverage;
mod escapes;
mod extraction;
mod games;
mod gaps;
mod levels;
mod properties;
mod support;
mod views;
