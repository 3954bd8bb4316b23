//! What an older node left in its data dir, written the way it wrote it — past the checks this
//! node now makes: sources stored under a provider's key pasted as their name (before
//! `sources::check_name` refused such names), and the ledger entries of a call that staked them.

use std::path::Path;
use std::sync::Arc;

use skillbox_node::ledger::{self, Entry, EntryKind, Item};
use skillbox_node::store::Store;
use skillbox_node::{DataDir, SourceKind, Sources};

/// Keys as pasted where a source's name goes. Each passes the plain name rule, so a node before
/// the key test kept it as a name: an Anthropic key and a bare hex one.
pub const PASTED_KEYS: [&str; 2] = [
    "sk-ant-api03-Xq7PASTEDnAmE9kLw2Rt5Vb8Zc",
    "1fa036b5a9fa7baa4f1260e831e989a4",
];

/// The content of each source [`sources_named_by`] writes.
pub const CONTENT: &[u8] = b"the owner's notes";

/// In the data dir `dir` (initialised, no node running on it): each of `keys` as the name of a
/// shareable text source, as a node before the key test stored it — the row written under an
/// ordinary name, then renamed to the key.
pub fn sources_named_by(dir: &Path, keys: &[&str]) {
    let (store, sources) = open(dir);
    for (i, key) in keys.iter().enumerate() {
        let old = format!("old-name-{i}");
        sources
            .put_with(&old, SourceKind::Text, CONTENT, true)
            .expect("put");
        let renamed = store
            .write(
                |tx| Ok(tx.execute("UPDATE sources SET name = ?1 WHERE name = ?2", (key, &old))?),
            )
            .expect("rename the row");
        assert_eq!(renamed, 1, "one row renamed");
    }
}

/// In the data dir `dir` (no node running on it): the ledger entries an older node wrote for a
/// call that staked `sources` — the decision that allowed it, naming them, and the stake, one
/// item each — signed with the node's key like every entry.
pub fn ledger_a_stake_of(dir: &Path, sources: &[&str]) {
    let (store, _) = open(dir);
    ledger_a_stake_into(&store, &node_key_of(dir), sources);
}

/// The node key of the data dir `dir`: what signs its ledger.
pub fn node_key_of(dir: &Path) -> skillbox_jc::ed25519_dalek::SigningKey {
    let data = DataDir::new(dir);
    skillbox_jc::ed25519_dalek::SigningKey::from_bytes(
        data.load_node_key().expect("node key").seed(),
    )
}

/// [`ledger_a_stake_of`] into an open `store` (a running node's too: the entries land after
/// the ones it holds), signed with `key`.
pub fn ledger_a_stake_into(
    store: &Store,
    key: &skillbox_jc::ed25519_dalek::SigningKey,
    sources: &[&str],
) {
    let call = "7e57ca11000000000000000000000001";
    let names: Vec<String> = sources.iter().map(|&s| s.to_owned()).collect();
    let facts = |kind| Entry {
        at: 1_700_000_000_000,
        skill: "taste".into(),
        box_url: Some("http://127.0.0.1:9".into()),
        decision: "allow".into(),
        decided_by: "rule:1".into(),
        sources: names.clone(),
        ..Entry::naming(kind, call, "caller", "12D3KooWPeerOfAnOlderCall")
    };
    ledger::append_now(store, key, facts(EntryKind::Decision)).expect("the decision");
    let stake = Entry {
        items: names
            .iter()
            .map(|n| Item {
                stake: "source".into(),
                source: Some(n.clone()),
                size_bucket: 1024,
                digest: "hmac-sha256:00".into(),
            })
            .collect(),
        ..facts(EntryKind::Stake)
    };
    ledger::append_now(store, key, stake).expect("the stake");
}

/// The data dir's store and sources, after one open of the node (its ledger begun).
fn open(dir: &Path) -> (Arc<Store>, Sources) {
    drop(skillbox_node::Node::open(dir).expect("open the node once"));
    let data = DataDir::new(dir);
    let store = Arc::new(Store::open(&data.store()).expect("store"));
    let key = Arc::new(data.load_data_key().expect("data key"));
    (store.clone(), Sources::new(store, key))
}
