//! One node in-process, API only, from the test-support crate (`skillbox_testkit::node_api`).
#![allow(unused_imports)]

pub use skillbox_testkit::node_api::*;
