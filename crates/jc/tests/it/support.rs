//! The box fixture (a box server on loopback with an in-process provider, two parties' keys),
//! from the test-support crate (`skillbox_testkit::box_fixture`).
#![allow(unused_imports)]

pub use skillbox_testkit::box_fixture::*;
