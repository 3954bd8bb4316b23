//! The MCP and A2A tests' world, from the test-support crate (`skillbox_testkit::reach`).
#![allow(unused_imports)]

pub use skillbox_testkit::reach::*;
