//! The encoders an obedient model hides its system prompt with, from the test-support crate
//! (`skillbox_testkit::guard`); also included by `crates/cli/benches/extraction.rs`.
#![allow(unused_imports)]

pub use skillbox_testkit::guard::*;
