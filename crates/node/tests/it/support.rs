//! The calls tests' world (a box, a provider double, nodes on loopback libp2p), from the
//! test-support crate (`skillbox_testkit::node`).
#![allow(unused_imports)]

pub use skillbox_testkit::node::*;

/// A config edit for the caller's node: its human is asked before any of `sources` leaves in a
/// call (`None`: before anything does), ahead of the other rules.
pub fn caller_asks(sources: Option<&[&str]>) -> impl FnOnce(&mut skillbox_node::Config) {
    let sources = sources.map(|s| s.iter().map(|&n| n.to_owned()).collect());
    move |c| {
        c.policy.rules.insert(
            0,
            skillbox_calls::Rule {
                side: skillbox_calls::Side::Caller,
                sources,
                ..skillbox_calls::Rule::ask_before_disclosure()
            },
        )
    }
}
