//! The box fixture (a box server on loopback with an in-process provider, two parties' keys),
//! from the test-support crate (`skillbox_testkit::box_fixture`).
#![allow(unused_imports)]

pub use skillbox_testkit::box_fixture::*;

use skillbox_jc::run::{BoxConfig, BoxCore};
use std::sync::Arc;

/// A box whose provider double echoes the prompt, with `config`.
pub async fn start_echo(config: BoxConfig) -> Fixture {
    start_with(Arc::new(EchoProvider { fixed: None }), config).await
}

/// A box core (no server) whose provider double echoes the prompt, with `config`.
pub fn echo_core(config: BoxConfig) -> BoxCore {
    core_with(Arc::new(EchoProvider { fixed: None }), config)
}
