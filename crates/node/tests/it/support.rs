//! The calls tests' world (a box, a provider double, nodes on loopback libp2p), from the
//! test-support crate (`skillbox_testkit::node`).
#![allow(unused_imports)]

pub use skillbox_testkit::node::*;
