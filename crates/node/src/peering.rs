//! The node's side of the peer network (§6): the `PeersConfig` from `config.toml`, the offered
//! set projected from the skills registry into the advert, and the board as the API reads it.
//!
//! The projection ([`offer_from`]) is pure: it takes the skill list and returns the advert's
//! skills, so what leaves the node is decided in one place and can be tested without sockets.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use skillbox_peers::{
    AcceptedBox, Board, Multiaddr, Offer, OfferedSkill, PeersConfig, PeersHandle,
};

use crate::config::Config;
use crate::error::{NodeError, Result};
use crate::skills::SkillSummary;

/// Where `GET /board` reads from: the running network's board, or (for benches and tests) a
/// board fed in-process. The route reads it under its lock, borrowed, a bounded stretch at a
/// time ([`read_board`]): the board is peer-controlled and up to `p2p.board_max_mib` large, so
/// no request copies it whole.
pub trait BoardView: Send + Sync {
    /// Run `f` on the board under its lock, with the time now (ms since the epoch).
    fn read(&self, f: &mut dyn FnMut(&Board, u64));
}

impl BoardView for PeersHandle {
    fn read(&self, f: &mut dyn FnMut(&Board, u64)) {
        self.with_board(|b, now| f(b, now))
    }
}

impl BoardView for Mutex<Board> {
    fn read(&self, f: &mut dyn FnMut(&Board, u64)) {
        let now = skillbox_peers::now_ms();
        f(&self.lock().unwrap_or_else(|p| p.into_inner()), now)
    }
}

/// What `f` answers of the board, read under its lock (`None` from a view that never ran it).
pub fn read_board<T>(view: &dyn BoardView, f: impl FnOnce(&Board, u64) -> T) -> Option<T> {
    let (mut f, mut out) = (Some(f), None);
    view.read(&mut |b, now| out = f.take().map(|f| f(b, now)));
    out
}

/// A row of the board by its place, (peer, skill): where a walk stopped and a page goes on.
pub struct RowKey {
    pub peer: String,
    pub skill: String,
}

impl RowKey {
    pub fn of(peer: &str, skill: &str) -> RowKey {
        RowKey {
            peer: peer.to_owned(),
            skill: skill.to_owned(),
        }
    }

    /// Where a page after this row starts, as `GET /board`'s `next` and the dashboard's next
    /// link carry it: the peer id and the skill name in hex, so the cursor holds no word of the
    /// peer's and needs no escaping in JSON, a URL or HTML.
    pub fn cursor(&self) -> String {
        format!("{}.{}", self.peer, hex::encode(&self.skill))
    }

    /// The row a [`RowKey::cursor`] names; `None` for text no cursor is (a peer id that is not
    /// one, or not in its one base58 spelling; a skill that is not hex of a valid name).
    pub fn from_cursor(text: &str) -> Option<RowKey> {
        let (peer, skill) = text.split_once('.')?;
        let id: skillbox_peers::PeerId = peer.parse().ok()?;
        let skill = hex::decode(skill)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .filter(|s| skillbox_skill::document::name_problem(s).is_none())?;
        (id.to_base58() == peer).then(|| RowKey::of(peer, &skill))
    }
}

/// Where a walk of the board stopped.
pub struct Walked {
    /// After the last row read (`None`: none was read).
    pub last: Option<RowKey>,
    /// The board had no more rows.
    pub ended: bool,
}

/// Rows read per hold of the board's lock: the network task takes the same lock for every
/// advert it takes, so a long read gives it back between stretches.
pub const ROWS_PER_LOCK: usize = 1_000;

/// Rows one request reads at most where it may skip rows (a search of `GET /board`, the
/// dashboard's filters, a page of the skills an agent can call): a rare word, or a board of
/// rows this node cannot call, would otherwise have one request read a full board. Past this
/// the page ends with what it found and its cursor goes on from there. The one figure of every
/// such read.
pub const MAX_ROWS_READ: usize = 20_000;

/// Why a stretch of a walk ended.
#[derive(PartialEq)]
enum Stretch {
    /// The board has no more rows.
    End,
    /// It read its [`ROWS_PER_LOCK`] rows: the next stretch goes on after them.
    Read,
    /// The walk's budget was spent, or `f` stopped it.
    Stopped,
}

/// Read the board's rows after `after`, borrowed, [`ROWS_PER_LOCK`] per hold of its lock and
/// `budget` in all: `f` sees each row and answers whether to go on (the row is read) or stop
/// before it. The board may change between stretches; each row is read at most once.
pub fn walk(
    view: &dyn BoardView,
    after: Option<&RowKey>,
    budget: usize,
    mut f: impl FnMut(skillbox_peers::RowRef<'_>) -> bool,
) -> Walked {
    walk_lent(view, after, budget, |_, _, r| f(r))
}

/// [`walk`] whose `f` also sees the board lent and the time (a row's peer's boxes, as the
/// dashboard filters by platform, are read under the same hold).
pub fn walk_lent(
    view: &dyn BoardView,
    after: Option<&RowKey>,
    budget: usize,
    mut f: impl for<'b> FnMut(&'b Board, u64, skillbox_peers::RowRef<'b>) -> bool,
) -> Walked {
    let (mut last, mut read) = (None::<RowKey>, 0usize);
    loop {
        let from = last.as_ref().or(after);
        let stretch = read_board(view, |b, now| {
            let from = from.map(|k| (k.peer.as_str(), k.skill.as_str()));
            let mut stretch_last = None;
            for (n, r) in b.rows_after(now, from).enumerate() {
                if n == ROWS_PER_LOCK {
                    return (stretch_last, Stretch::Read);
                }
                if read == budget || !f(b, now, r) {
                    return (stretch_last, Stretch::Stopped);
                }
                read += 1;
                stretch_last = Some(RowKey::of(r.peer, &r.skill.name));
            }
            (stretch_last, Stretch::End)
        });
        let (stretch_last, how) = stretch.unwrap_or((None, Stretch::End));
        last = stretch_last.or(last);
        if how != Stretch::Read {
            return Walked {
                last,
                ended: how == Stretch::End,
            };
        }
    }
}

/// A shared board view.
pub type SharedBoard = Arc<dyn BoardView>;

fn multiaddr(what: &str, i: usize, text: &str, path: &std::path::Path) -> Result<Multiaddr> {
    text.parse::<Multiaddr>().map_err(|e| NodeError::Config {
        path: path.to_owned(),
        problem: format!("p2p.{what} entry #{i} {text:?} is not a multiaddr: {e}"),
    })
}

fn multiaddrs(what: &str, texts: &[String], path: &std::path::Path) -> Result<Vec<Multiaddr>> {
    texts
        .iter()
        .enumerate()
        .map(|(i, a)| multiaddr(what, i, a, path))
        .collect()
}

/// The peer network's settings from the node's config (`path` only names the file in errors).
pub fn peers_config(config: &Config, path: &std::path::Path) -> Result<PeersConfig> {
    let listen = multiaddrs("listen", &config.p2p.listen, path)?;
    let bootstrap = multiaddrs("bootstrap", &config.p2p.bootstrap, path)?;
    let external_addresses =
        multiaddrs("external_addresses", &config.p2p.external_addresses, path)?;
    let relays = multiaddrs("relays", &config.p2p.relays, path)?;
    let advert_interval = Duration::from_secs(config.schedules.advertise_secs);
    let board_ttl = Duration::from_secs(config.schedules.board_ttl_secs);
    if board_ttl <= advert_interval {
        return Err(NodeError::Config {
            path: path.to_owned(),
            problem: format!(
                "schedules.board_ttl_secs ({}) must be longer than schedules.advertise_secs ({})",
                config.schedules.board_ttl_secs, config.schedules.advertise_secs
            ),
        });
    }
    let ix = &config.index;
    Ok(PeersConfig {
        listen,
        bootstrap,
        advert_interval,
        board_ttl,
        mdns: config.p2p.mdns,
        dial_private_addresses: config.p2p.dial_private_addresses,
        // On: forced server. Off: AutoNAT decides (never forced client from the node's config).
        kad_server: config.p2p.kad_server.then_some(true),
        external_addresses,
        relays,
        relay_server: config.p2p.relay_server,
        autonat_server: config.p2p.autonat_server,
        idle_connection_timeout: Duration::from_secs(config.p2p.idle_timeout_secs),
        payload_rate_per_sec: config.p2p.payload_rate_per_sec,
        payload_burst: config.p2p.payload_burst,
        max_connections: config.p2p.max_connections,
        max_connections_per_peer: config.p2p.max_connections_per_peer,
        max_pending_incoming: config.p2p.max_pending_incoming,
        max_pending_outgoing: config.p2p.max_pending_outgoing,
        board_max_entries: config.p2p.board_max_entries,
        // At most 1 TiB (the config's check), so the shift neither overflows nor truncates.
        board_max_bytes: usize::try_from(config.p2p.board_max_mib << 20).unwrap_or(usize::MAX),
        max_connections_incoming: Some(config.p2p.max_connections_incoming),
        send_queue_per_peer: config.p2p.send_queue_per_peer,
        index_ttl: Duration::from_secs(ix.ttl_secs),
        index_republish: Duration::from_secs(ix.republish_secs),
        index_rate_per_sec: ix.rate_per_sec,
        index_burst: ix.burst,
        index_max_keys_per_provider: ix.max_keys_per_provider,
        index_max_providers: ix.max_providers,
        search_max_fetches: ix.search_max_fetches,
        search_timeout: Duration::from_secs(ix.search_timeout_secs),
        search_scope: ix.search,
        live_categories: ix.live_categories.clone(),
        board_sync: ix.board_sync,
        advert_rate_per_sec: ix.advert_rate_per_sec,
        advert_burst: ix.advert_burst,
        ..PeersConfig::default()
    })
}

/// The advert's skills: every offered skill's name, description, provider, requiredSources and
/// declaration digest. Nothing else of a skill is read here, so model, key and body cannot leave.
pub fn offer_from(
    skills: &[SkillSummary],
    boxes: Vec<AcceptedBox>,
    guard: &crate::config::GuardConfig,
) -> Offer {
    Offer {
        skills: skills
            .iter()
            .filter(|s| s.offered)
            .filter_map(|s| {
                let provider = s
                    .provider
                    .as_deref()
                    .and_then(|p| p.parse::<skillbox_skill::ProviderId>().ok());
                // The owner's body allowance and model context in force, defaults too: the
                // caller's program states them and the owner co-signs no other (review 29).
                let tokens = provider
                    .as_ref()
                    .map(|p| s.tokens.advertised(p))
                    .unwrap_or_default();
                Some(OfferedSkill {
                    name: s.name.clone(),
                    description: s.description.clone(),
                    // An offered skill has a provider (offer_state requires one).
                    provider: s.provider.clone()?,
                    required_sources: s.required_sources.clone(),
                    limits: s.limits,
                    declaration_digest: s.digest.clone(),
                    guard: provider.as_ref().map(|p| guard.spec_for(p)),
                    body_max_tokens: tokens.body_max_tokens,
                    model_context_tokens: tokens.model_context_tokens,
                })
            })
            .collect(),
        boxes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(name: &str, offered: bool) -> SkillSummary {
        SkillSummary {
            name: name.into(),
            agent_id: format!("local.skillbox.{name}"),
            description: format!("the {name} skill"),
            provider: Some("openrouter".into()),
            required_sources: vec!["spotify_songs".into()],
            limits: Default::default(),
            tokens: Default::default(),
            digest: format!("sha256:{}", "ab".repeat(32)),
            offered,
            reason: None,
            reasons: vec![],
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn only_offered_skills_enter_the_offer() {
        let offer = offer_from(
            &[summary("taste", true), summary("memo", false)],
            vec![],
            &crate::config::GuardConfig::default(),
        );
        assert_eq!(offer.skills.len(), 1);
        let s = &offer.skills[0];
        assert_eq!(s.name, "taste");
        assert_eq!(s.provider, "openrouter");
        assert_eq!(s.required_sources, ["spotify_songs"]);
        assert!(s.declaration_digest.starts_with("sha256:"));
    }

    #[test]
    fn config_maps_to_peers_config_and_bad_addresses_are_named() {
        let mut c = Config::default();
        c.schedules.advertise_secs = 2;
        c.schedules.board_ttl_secs = 6;
        c.p2p.bootstrap = vec!["/ip4/127.0.0.1/tcp/4001".into()];
        let p = peers_config(&c, std::path::Path::new("config.toml")).expect("maps");
        assert_eq!(p.advert_interval, Duration::from_secs(2));
        assert_eq!(p.board_ttl, Duration::from_secs(6));
        assert!(!p.mdns);
        assert!(
            !p.dial_private_addresses,
            "peers' private addresses are not dialed by default"
        );
        assert_eq!(p.kad_server, None, "AutoNAT decides unless configured");
        assert!(p.autonat_server && !p.relay_server && p.relays.is_empty());
        assert_eq!(p.bootstrap.len(), 1);
        c.p2p.kad_server = true;
        c.p2p.payload_rate_per_sec = 500.0;
        c.p2p.payload_burst = 2000;
        let q = peers_config(&c, std::path::Path::new("config.toml")).expect("maps");
        assert_eq!(q.kad_server, Some(true));
        assert_eq!((q.payload_rate_per_sec, q.payload_burst), (500.0, 2000));
        assert_eq!((q.max_connections, q.board_max_entries), (256, 100_000));
        assert_eq!(q.board_max_bytes, 256 << 20);
        assert_eq!(
            (q.max_connections_incoming, q.send_queue_per_peer),
            (Some(192), 4_096)
        );
        c.p2p.max_connections = 7;
        c.p2p.max_connections_per_peer = 2;
        c.p2p.board_max_entries = 50;
        c.p2p.board_max_mib = 3;
        let r = peers_config(&c, std::path::Path::new("config.toml")).expect("maps");
        assert_eq!(
            (
                r.max_connections,
                r.max_connections_per_peer,
                r.board_max_entries,
                r.board_max_bytes,
            ),
            (7, 2, 50, 3 << 20)
        );
        c.p2p.max_connections = 256;
        let d = PeersConfig::default();
        assert_eq!(
            (r.index_ttl, r.index_republish, r.live_categories.len()),
            (d.index_ttl, d.index_republish, d.live_categories.len()),
            "no [index] table: the peers defaults"
        );
        c.index.ttl_secs = 600;
        c.index.republish_secs = 120;
        c.index.burst = 9;
        c.index.search_timeout_secs = 3;
        c.index.live_categories = vec![];
        c.index.board_sync = false;
        let ix = peers_config(&c, std::path::Path::new("config.toml")).expect("maps");
        assert_eq!(
            (
                ix.index_ttl,
                ix.index_republish,
                ix.index_burst,
                ix.search_timeout
            ),
            (
                Duration::from_secs(600),
                Duration::from_secs(120),
                9,
                Duration::from_secs(3)
            )
        );
        assert!(ix.live_categories.is_empty() && !ix.board_sync);
        c.p2p.bootstrap = vec!["/ip4/nope/tcp/1".into()];
        let err = peers_config(&c, std::path::Path::new("config.toml")).expect_err("bad addr");
        assert!(err.to_string().contains("p2p.bootstrap entry #0"), "{err}");
        c.p2p.bootstrap.clear();
        c.schedules.board_ttl_secs = 2;
        let err = peers_config(&c, std::path::Path::new("config.toml")).expect_err("ttl");
        assert!(err.to_string().contains("board_ttl_secs"), "{err}");
    }

    #[test]
    fn node_key_peer_id_is_libp2ps() {
        for seed in [[0u8; 32], [7u8; 32], [0xffu8; 32]] {
            let ours = crate::crypto::NodeKey::from_seed(&seed).peer_id();
            let theirs = skillbox_peers::keypair_from_seed(&seed)
                .expect("a 32-byte seed is a valid key")
                .public()
                .to_peer_id()
                .to_base58();
            assert_eq!(ours, theirs);
        }
    }
}
