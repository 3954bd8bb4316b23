//! The process starters, the blocking provider double, skill documents and the leak scan, from
//! the test-support crate (`skillbox_testkit`); a re-export so `crate::support::procs::…` and
//! the benches that include this file keep their paths.
#![allow(dead_code, unused_imports)]

pub use skillbox_testkit::leak::assert_no_markers;
pub use skillbox_testkit::procs::*;
pub use skillbox_testkit::provider::blocking::*;
pub use skillbox_testkit::skills::skill_doc;

/// The `skillbox` binary cargo built for these tests (the same file as `procs::bin()`).
pub const BIN: &str = env!("CARGO_BIN_EXE_skillbox");
