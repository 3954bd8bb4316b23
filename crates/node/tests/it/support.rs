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

/// [`world`] with both configs as shipped and the caller holding `songs` (a text source with
/// `songs` in it) for the owner's skill, which requires `required`.
pub async fn world_holding_songs(
    body_marker: &str,
    key: &str,
    required: &[&str],
    songs: &str,
) -> World {
    let w = world(body_marker, key, required, |_| {}, |_| {}).await;
    w.caller.put_source("songs", "text", songs).await;
    w
}
