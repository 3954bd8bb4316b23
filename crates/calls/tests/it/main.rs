//! skillbox-calls' integration tests, one binary (`cargo test --test it`; a module's tests with
//! `-- <module>::`): the intent over real skills and its background frequencies, every machine
//! transition and the machine's invariants under any events, source selection and policy.

mod intent;
mod intent_background;
mod machine;
mod machine_props;
mod selection_policy;
