//! The libp2p side: one task owns the Swarm; a cloneable [`PeersHandle`] talks to it over a
//! channel. Pure parts (board, inbox) live in their own modules; this file is the I/O around them.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use libp2p::core::ConnectedPoint;
use libp2p::kad::store::RecordStore;
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, OutboundRequestId, ProtocolSupport};
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{ConnectionId, DialError, NetworkBehaviour, SwarmEvent};
use libp2p::{
    Multiaddr, PeerId, StreamProtocol, Swarm, autonat, connection_limits, dcutr, gossipsub,
    identify, identity::Keypair, kad, mdns, noise, relay, tcp, yamux,
};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;

use crate::PeersError;
use crate::advert::{DEFAULT_MAX_ADVERT_BYTES, Offer, sign_advert};
use crate::announce::{Announcements, Request};
use crate::board::{Board, BoardConfig, BoardRow, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_TOTAL_BYTES};
use crate::dial::{DialGate, DialPolicy};
use crate::index::{
    AddressGroup, Draw, KEY_LEN, KeySlot, MAX_PROVIDERS_PER_KEY, Named, ProviderGate,
    ProviderLimits, ProviderRefusal, SearchScope, key_slot, offer_keys, record_addresses,
    search_keys,
};
use crate::mdns_found::{Discovery, MdnsFound};
use crate::payload::{
    Ack, DEFAULT_MAX_PAYLOAD_BYTES, Inbox, InboxConfig, IncomingPayload, MIN_PADDED_BYTES,
    PadElided, Payload, Received, SeqClock, SignedPayload,
};
use crate::rate::Buckets;
use crate::reach::{self, Reachability};
use crate::time::unix_ms;
use crate::transport::{BoxFuture, PayloadReceiver, PayloadTransport};
use crate::wire::{
    SYNC_MAX_ADVERTS, SYNC_MAX_BYTES, SyncAdverts, WireCodec, WireRequest, WireResponse,
};

/// The prefix of the per-category live topics adverts travel on (`<prefix>/<category>`).
/// There is no global presence topic: a node publishes on the topics of its skills'
/// categories and listens on the ones in [`PeersConfig::live_categories`].
pub const PRESENCE_TOPIC_PREFIX: &str = "skillbox/presence/1";

/// The live topic of one category (see [`skillbox_calls::vocabulary::CATEGORIES`]).
pub fn presence_topic(category: &str) -> gossipsub::IdentTopic {
    gossipsub::IdentTopic::new(format!("{PRESENCE_TOPIC_PREFIX}/{category}"))
}

/// Every category: the default of [`PeersConfig::live_categories`], right for a bounded
/// federation; a node on a large network lists a few or none and finds skills by search.
pub fn all_categories() -> Vec<String> {
    skillbox_calls::vocabulary::CATEGORIES
        .iter()
        .map(|(c, _)| (*c).to_string())
        .collect()
}
const PAYLOAD_PROTOCOL: &str = "/skillbox/payload/1";
const KAD_PROTOCOL: &str = "/skillbox/kad/1.0.0";
const IDENTIFY_PROTOCOL: &str = "/skillbox/id/1.0.0";
const SYNC_MIN_INTERVAL: Duration = Duration::from_secs(10);
/// Full board-sync answers given in one `SYNC_MIN_INTERVAL`, to all peers together.
const SYNC_ANSWERS_PER_INTERVAL: u32 = 16;

/// Which board-sync requests get a full answer (up to 8 MiB for a request of a few bytes): one
/// per peer per interval — remembered across its reconnections, which used to start it over —
/// and [`SYNC_ANSWERS_PER_INTERVAL`] in all, so fresh peer ids (they cost nothing) cannot make
/// this node build and hold answers without bound. Others get an empty list; the board also
/// spreads by gossip and the index. Pure: `now` is passed in.
#[derive(Default)]
struct SyncAnswers {
    last: HashMap<PeerId, Instant>,
    window: Option<(Instant, u32)>,
}

impl SyncAnswers {
    /// Whether `peer` gets a full answer now (and it is counted).
    fn take(&mut self, peer: PeerId, now: Instant) -> bool {
        let fresh = |t: &Instant| now.saturating_duration_since(*t) < SYNC_MIN_INTERVAL;
        if self.last.get(&peer).is_some_and(fresh) {
            return false;
        }
        let (start, given) = match self.window {
            Some((start, given)) if fresh(&start) => (start, given),
            _ => (now, 0),
        };
        if given >= SYNC_ANSWERS_PER_INTERVAL {
            self.window = Some((start, given));
            return false;
        }
        self.window = Some((start, given + 1));
        // Entries past the interval say nothing: dropped as new ones come, so the map holds at
        // most the peers answered in the last interval.
        self.last.retain(|_, t| fresh(t));
        self.last.insert(peer, now);
        true
    }
}
/// A peer's self-reported listen addresses kept (identify input is the peer's to choose).
const MAX_LISTEN_ADDRS: usize = 16;
/// How many peers this node dialed kad/mDNS discovery tries to keep connected. Only connections
/// this node dialed count: peers connecting in choose themselves (their ids cost nothing), and
/// when they counted, eight of them stopped discovery and made the node's mesh and board syncs
/// theirs.
const DISCOVERY_TARGET: usize = 8;

/// How long a TCP dial or an inbound TCP connection may take to connect and finish its noise
/// and yamux handshakes. Without it a dial to an address that drops SYNs stayed pending until
/// the kernel gave up (about two minutes), holding one of `max_pending_outgoing`'s slots all
/// that time, and a peer that accepted and never answered held one for ever (review 27 F3).
/// An honest handshake takes a few round trips; ten seconds also covers a lost SYN or two.
const TCP_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything the peer network needs from the node's config.
#[derive(Clone, Debug)]
pub struct PeersConfig {
    /// Addresses to listen on, e.g. `/ip4/0.0.0.0/tcp/4001`.
    pub listen: Vec<Multiaddr>,
    /// Peers to dial at start (and again while this node has no connection); `/p2p/<id>` optional.
    pub bootstrap: Vec<Multiaddr>,
    /// How often the advert is re-published (design: 60 s).
    pub advert_interval: Duration,
    /// A peer's entry leaves the board after this long without a fresh advert (3 intervals).
    pub board_ttl: Duration,
    /// How far in the future an advert or payload time may be.
    pub max_clock_skew: Duration,
    /// Multicast discovery on the local network; off unless asked for. On, LAN addresses
    /// peers give are dialed too (mDNS discovers only the LAN), loopback ones still not.
    pub mdns: bool,
    /// Dial LAN and loopback addresses that peers give (identify, Kademlia, AutoNAT v2
    /// dial-backs, DCUtR, relayed addresses' relays): for a LAN or test deployment. Off, the
    /// default, only globally routable ones are dialed, and the operator's own (bootstrap,
    /// relays, explicit dials) whatever they are: a hostile peer cannot make this node connect
    /// to services on its machine or LAN (see `dial`).
    pub dial_private_addresses: bool,
    /// Kademlia server mode (answer DHT queries, hold provider records). `None`, the default:
    /// decided by reachability — server once a direct address is confirmed (AutoNAT v2, or
    /// declared in `external_addresses`), client until then. `Some(true)` forces server (the
    /// listen addresses then count as confirmed unless `external_addresses` names others);
    /// `Some(false)` forces client.
    pub kad_server: Option<bool>,
    /// Addresses the operator declares reachable from outside: confirmed without AutoNAT.
    pub external_addresses: Vec<Multiaddr>,
    /// Relay nodes to hold a Circuit Relay v2 reservation on (`.../p2p/<relay id>`): this node
    /// is reachable through them (`<relay>/p2p-circuit/p2p/<us>`) whatever its NAT does.
    pub relays: Vec<Multiaddr>,
    /// Be a Circuit Relay v2 server while this node has a confirmed direct address.
    pub relay_server: bool,
    /// The relay server's limits: reservations and circuits held, one circuit's life and bytes
    /// (a relayed call carries its payloads; DCUtR usually replaces the circuit at once).
    pub relay_max_reservations: usize,
    pub relay_max_circuits: usize,
    pub relay_max_circuit_duration: Duration,
    pub relay_max_circuit_bytes: u64,
    /// Answer other nodes' AutoNAT v2 probes: dial the address they ask about back.
    pub autonat_server: bool,
    /// A connection no protocol uses is closed after this long.
    pub idle_connection_timeout: Duration,
    pub gossip_heartbeat: Duration,
    pub max_advert_bytes: usize,
    pub max_payload_bytes: usize,
    /// Per-peer payload rate: sustained per second, and burst.
    pub payload_rate_per_sec: f64,
    pub payload_burst: u32,
    /// How long an envelope is valid, and remembered for de-duplication.
    pub replay_window: Duration,
    /// Envelopes remembered for de-duplication at most, all senders together; when full, the
    /// heaviest sender's oldest is forgotten (see [`crate::payload::InboxConfig::max_remembered`]).
    pub replay_memory_max: usize,
    /// Delivery attempts of one payload before `send` gives up, and the first back-off.
    pub send_attempts: u32,
    pub send_backoff: Duration,
    pub request_timeout: Duration,
    /// Payloads waiting for the calls logic; when full, senders are told to retry.
    pub payload_queue: usize,
    /// Payloads to one peer waiting for a slot of its send window at most; past this a send
    /// is answered at once (`Unreachable`, "send queue full": its caller backs off as from a
    /// peer that does not answer). A peer that took its window's requests and never answered
    /// held every later payload to it without bound, and each send its caller had given up on
    /// went out in turn (now dropped unsent).
    pub send_queue_per_peer: usize,
    /// Connections established in total and per peer, and pending in each direction: past
    /// these a new connection is denied at once, so a peer cannot exhaust this node's sockets.
    pub max_connections: u32,
    pub max_connections_per_peer: u32,
    pub max_pending_incoming: u32,
    pub max_pending_outgoing: u32,
    /// Of `max_connections`, how many inbound ones are established at most; `None`: three
    /// quarters ([`PeersConfig::incoming_limit`]). The rest is this node's own room: with one
    /// total, strangers connecting in (peer ids cost nothing, 3 connections each) took every
    /// slot and the node could dial nobody — no payload out, no search, no bootstrap.
    pub max_connections_incoming: Option<u32>,
    /// Peers the board holds at most; a newcomer beyond this evicts the oldest advert.
    pub board_max_entries: usize,
    /// Bytes the board's entries hold at most, under the same rules as `board_max_entries`.
    pub board_max_bytes: usize,
    /// The skill index: how long a provider record lives on a DHT server, and how often this
    /// node re-provides its keys (a node that leaves stops being found after the TTL).
    pub index_ttl: Duration,
    pub index_republish: Duration,
    /// What a DHT server allows one provider: new records per second sustained, and burst.
    pub index_rate_per_sec: f64,
    pub index_burst: u32,
    /// Index keys one provider may hold on this server (a node offering 16 skills uses ~112).
    pub index_max_keys_per_provider: usize,
    /// Providers a DHT server keeps records for at most.
    pub index_max_providers: usize,
    /// Categories whose live topic this node listens on (adverts of their skills reach the
    /// board as they are published). Empty: the board holds only what searches fetched.
    pub live_categories: Vec<String>,
    /// Ask each newly connected peer for the adverts it holds (a bounded group's shortcut to a
    /// full board; off on a large network, where the index is the way in).
    pub board_sync: bool,
    /// Adverts a search fetches point to point at most, and how long a search may take.
    pub search_max_fetches: usize,
    pub search_timeout: Duration,
    /// What a search may tell DHT peers of the request: nothing, its category, or its rarest
    /// words (see [`SearchScope`]). Default: its category.
    pub search_scope: SearchScope,
    /// Adverts taken from one node on the live topics: per second sustained, and burst. Past
    /// it a node's adverts are dropped and not forwarded (an honest node publishes one an
    /// interval, a few more when its offer changes or peers join).
    pub advert_rate_per_sec: f64,
    pub advert_burst: u32,
}

impl Default for PeersConfig {
    fn default() -> Self {
        PeersConfig {
            listen: vec![
                "/ip4/0.0.0.0/tcp/0"
                    .parse()
                    .expect("a valid literal multiaddr"),
                "/ip4/0.0.0.0/udp/0/quic-v1"
                    .parse()
                    .expect("a valid literal multiaddr"),
            ],
            bootstrap: Vec::new(),
            advert_interval: Duration::from_secs(60),
            board_ttl: Duration::from_secs(180),
            max_clock_skew: Duration::from_secs(30),
            mdns: false,
            dial_private_addresses: false,
            kad_server: None,
            external_addresses: Vec::new(),
            relays: Vec::new(),
            relay_server: false,
            relay_max_reservations: 128,
            relay_max_circuits: 64,
            relay_max_circuit_duration: Duration::from_secs(600),
            relay_max_circuit_bytes: 4 * DEFAULT_MAX_PAYLOAD_BYTES as u64,
            autonat_server: true,
            idle_connection_timeout: Duration::from_secs(300),
            gossip_heartbeat: Duration::from_secs(1),
            max_advert_bytes: DEFAULT_MAX_ADVERT_BYTES,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            payload_rate_per_sec: 20.0,
            payload_burst: 100,
            replay_window: Duration::from_secs(600),
            replay_memory_max: crate::payload::DEFAULT_MAX_REMEMBERED,
            send_attempts: 6,
            send_backoff: Duration::from_millis(250),
            request_timeout: Duration::from_secs(10),
            payload_queue: 1024,
            max_connections: 256,
            max_connections_per_peer: 3,
            max_pending_incoming: 64,
            max_pending_outgoing: 64,
            max_connections_incoming: None,
            send_queue_per_peer: DEFAULT_SEND_QUEUE_PER_PEER,
            board_max_entries: DEFAULT_MAX_ENTRIES,
            board_max_bytes: DEFAULT_MAX_TOTAL_BYTES,
            index_ttl: Duration::from_secs(3 * 3600),
            index_republish: Duration::from_secs(3600),
            index_rate_per_sec: 1.0,
            index_burst: 256,
            index_max_keys_per_provider: 256,
            index_max_providers: 100_000,
            live_categories: all_categories(),
            board_sync: true,
            search_max_fetches: 32,
            search_timeout: Duration::from_secs(10),
            search_scope: SearchScope::default(),
            advert_rate_per_sec: 0.5,
            advert_burst: 20,
        }
    }
}

impl PeersConfig {
    fn validate(&self) -> Result<(), PeersError> {
        let bad = |m: &str| Err(PeersError::InvalidConfig(m.to_string()));
        if self.advert_interval.is_zero() {
            return bad("advert_interval must be > 0");
        }
        if self.board_ttl <= self.advert_interval {
            return bad("board_ttl must be longer than advert_interval");
        }
        if self.gossip_heartbeat.is_zero() {
            return bad("gossip_heartbeat must be > 0");
        }
        if self.max_advert_bytes < 1024 {
            return bad("max_advert_bytes must be at least 1024");
        }
        // Every payload is padded to at least the smallest bucket: below it every send fails.
        if self.max_payload_bytes < MIN_PADDED_BYTES {
            return bad("max_payload_bytes must be at least 16384 (the smallest padded payload)");
        }
        if self.payload_rate_per_sec <= 0.0 || self.payload_burst == 0 {
            return bad("payload rate and burst must be > 0");
        }
        if self.send_attempts == 0 {
            return bad("send_attempts must be >= 1");
        }
        if self.payload_queue == 0 {
            return bad("payload_queue must be >= 1");
        }
        if self.replay_memory_max == 0 {
            return bad("replay_memory_max must be >= 1");
        }
        if self.max_connections == 0
            || self.max_connections_per_peer == 0
            || self.max_pending_incoming == 0
            || self.max_pending_outgoing == 0
        {
            return bad("connection limits must be >= 1");
        }
        if self.send_queue_per_peer == 0 {
            return bad("send_queue_per_peer must be >= 1");
        }
        if self.max_connections_incoming == Some(0) {
            return bad("max_connections_incoming must be >= 1");
        }
        if self.board_max_entries == 0 {
            return bad("board_max_entries must be >= 1");
        }
        if self.board_max_bytes < self.max_advert_bytes {
            return bad("board_max_bytes must hold at least one advert (max_advert_bytes)");
        }
        if self.index_republish.is_zero() || self.index_ttl <= self.index_republish {
            return bad("index_ttl must be longer than index_republish, which must be > 0");
        }
        if self.index_rate_per_sec <= 0.0
            || self.index_burst == 0
            || self.index_max_keys_per_provider == 0
            || self.index_max_providers == 0
        {
            return bad("index rate, burst and limits must be > 0");
        }
        if let Some(c) = self.live_categories.iter().find(|c| {
            !skillbox_calls::vocabulary::CATEGORIES
                .iter()
                .any(|(known, _)| known == c)
        }) {
            return Err(PeersError::InvalidConfig(format!(
                "live_categories: unknown category {c:?}"
            )));
        }
        if self.search_max_fetches == 0 || self.search_timeout.is_zero() {
            return bad("search_max_fetches and search_timeout must be > 0");
        }
        if self.advert_rate_per_sec <= 0.0 || self.advert_burst == 0 {
            return bad("advert rate and burst must be > 0");
        }
        if self.idle_connection_timeout.is_zero() {
            return bad("idle_connection_timeout must be > 0");
        }
        if self.relay_max_reservations == 0
            || self.relay_max_circuits == 0
            || self.relay_max_circuit_duration.is_zero()
            || self.relay_max_circuit_bytes == 0
        {
            return bad("relay limits must be > 0");
        }
        for relay in &self.relays {
            if let Some(problem) = reach::relay_addr_problem(relay) {
                return Err(PeersError::InvalidConfig(format!(
                    "relays: {relay}: {problem}"
                )));
            }
        }
        if self.external_addresses.iter().any(reach::is_relayed) {
            return bad("external_addresses must be direct (a relay reservation adds its own)");
        }
        Ok(())
    }

    /// Inbound connections established at most: `max_connections_incoming`, else three
    /// quarters of `max_connections`; never more than `max_connections`, at least 1.
    pub fn incoming_limit(&self) -> u32 {
        self.max_connections_incoming
            .unwrap_or((u64::from(self.max_connections) * 3 / 4) as u32)
            .min(self.max_connections)
            .max(1)
    }

    fn board_config(&self) -> BoardConfig {
        BoardConfig {
            ttl_ms: self.board_ttl.as_millis() as u64,
            max_skew_ms: self.max_clock_skew.as_millis() as u64,
            max_advert_bytes: self.max_advert_bytes,
            max_entries: self.board_max_entries,
            max_total_bytes: self.board_max_bytes,
        }
    }

    fn provider_gate(&self) -> ProviderGate {
        ProviderGate::new(
            ProviderLimits {
                rate_per_sec: self.index_rate_per_sec,
                burst: f64::from(self.index_burst),
                max_keys_per_provider: self.index_max_keys_per_provider,
            },
            self.index_max_providers,
        )
    }

    fn inbox_config(&self) -> InboxConfig {
        InboxConfig {
            max_payload_bytes: self.max_payload_bytes,
            replay_window_ms: self.replay_window.as_millis() as u64,
            max_remembered: self.replay_memory_max,
            max_skew_ms: self.max_clock_skew.as_millis() as u64,
            rate_per_sec: self.payload_rate_per_sec,
            burst: f64::from(self.payload_burst),
        }
    }
}

/// A connected peer, as `GET /peers` shows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerInfo {
    pub peer: String,
    /// Remote addresses of the open connections.
    pub addresses: Vec<String>,
    /// What the peer says it listens on (identify).
    pub listen_addrs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
}

/// What happened in the network, for logs, metrics and tests. Best effort: a slow subscriber
/// misses events rather than slowing the network. Payloads do not come this way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkEvent {
    Listening(Multiaddr),
    PeerConnected {
        peer: PeerId,
        address: Multiaddr,
    },
    PeerDisconnected {
        peer: PeerId,
    },
    AdvertAccepted {
        peer: PeerId,
        seq: u64,
        new_peer: bool,
    },
    /// `from` is the peer that forwarded it.
    AdvertRefused {
        from: PeerId,
        reason: String,
    },
    LeftBoard {
        peer: String,
    },
    PayloadRefused {
        from: PeerId,
        reason: String,
    },
    /// Every index key of the offer set last has been announced to the servers closest to it
    /// (`failed` of them reached none in time; Kademlia tries again at its republish).
    Indexed {
        keys: usize,
        failed: usize,
    },
    /// This (DHT server) node did not keep a provider record a peer sent.
    ProviderRecordRefused {
        provider: PeerId,
        reason: ProviderRefusal,
    },
    /// An address of this node is confirmed reachable (AutoNAT v2 dial-back, declared in the
    /// config, or a relay's circuit): it goes into the DHT from now on.
    AddressConfirmed {
        address: Multiaddr,
    },
    /// An AutoNAT v2 server could not dial this address back: it stays out of the DHT.
    AddressUnreachable {
        address: Multiaddr,
        server: PeerId,
    },
    /// Kademlia server mode switched on or off (see [`PeersConfig::kad_server`]).
    DhtServer(bool),
    /// A relay accepted this node's reservation: reachable through it.
    RelayReservation {
        relay: PeerId,
    },
    /// A DCUtR hole punch to `peer` ended: a direct connection, or the relayed one stays.
    HolePunch {
        peer: PeerId,
        direct: bool,
    },
}

/// What a search of the skill index found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchOutcome {
    /// Index keys looked up.
    pub lookups: usize,
    /// Distinct providers the index named (this node included if it offers a match), in the
    /// order they were named.
    pub named: Vec<PeerId>,
    /// Adverts fetched point to point, and of those, refused by the board's checks.
    pub fetched: usize,
    pub refused: usize,
    /// Providers whose verified advert is on the board now: the candidates to rank.
    pub peers: Vec<PeerId>,
}

/// How a payload send ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    Delivered,
    /// The receiver had it already (a retry or a replay): nothing changed there.
    Duplicate,
}

#[derive(NetworkBehaviour)]
struct Behaviour {
    // First, so a connection over the limits is denied before any other behaviour sees it.
    limits: connection_limits::Behaviour,
    gossipsub: gossipsub::Behaviour,
    rr: request_response::Behaviour<WireCodec>,
    identify: identify::Behaviour,
    kad: kad::Behaviour<kad::store::MemoryStore>,
    mdns: Toggle<mdns::tokio::Behaviour>,
    // Reachability (see `reach`): a relay client always, a relay server if configured (serving
    // only while a direct address is confirmed), hole punching over relayed connections, and
    // AutoNAT v2 both ways.
    relay_client: relay::client::Behaviour,
    relay: Toggle<relay::Behaviour>,
    dcutr: dcutr::Behaviour,
    autonat: autonat::v2::client::Behaviour,
    autonat_server: Toggle<autonat::v2::server::Behaviour>,
}

enum Command {
    ListenAddrs(oneshot::Sender<Vec<Multiaddr>>),
    Dial(Multiaddr, oneshot::Sender<Result<PeerId, PeersError>>),
    Peers(oneshot::Sender<Vec<PeerInfo>>),
    SetOffer(Offer, oneshot::Sender<Result<(), PeersError>>),
    Send {
        to: PeerId,
        signed: SignedPayload,
        reply: oneshot::Sender<Result<Delivery, PeersError>>,
    },
    PublishRaw(Vec<u8>, oneshot::Sender<Result<(), PeersError>>),
    Search(String, oneshot::Sender<SearchOutcome>),
    ProvideRaw(Vec<Vec<u8>>, oneshot::Sender<()>),
    Reachability(oneshot::Sender<Reachability>),
    SendsHeld(oneshot::Sender<SendsHeld>),
    MdnsDiscovered(Vec<(PeerId, Multiaddr)>, oneshot::Sender<()>),
    Shutdown(oneshot::Sender<()>),
}

/// The payloads this node holds to send (waiting for a slot, or in flight awaiting an answer)
/// and the bytes they hold: what a peer that never answers makes this node keep.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendsHeld {
    pub payloads: usize,
    pub bytes: usize,
}

/// Payload requests in flight to one peer at a time; the rest wait, in order. libp2p's
/// request-response handler drops an inbound stream past its `max_concurrent_streams` (100,
/// inbound and outbound together, per connection): a burst of calls sent unwindowed had its
/// tail dropped, retried with back-off (seconds of delay) and, after the last attempt, lost.
/// Under half of 100 per direction leaves room for the peer's own requests and board syncs.
const SEND_WINDOW: usize = 32;

/// Default of [`PeersConfig::send_queue_per_peer`]: as many as the calls logic handles at once
/// (`calls::MAX_INBOUND_AT_ONCE`), so an honest burst to one peer (a test sends 400 each way)
/// never meets it.
pub const DEFAULT_SEND_QUEUE_PER_PEER: usize = 4_096;

/// A search of the skill index in progress: its key lookups, then its advert fetches.
struct Search {
    outcome: SearchOutcome,
    lookups_left: usize,
    fetches_left: usize,
    /// The category's keys, looked up only if the keywords named nobody.
    fallback: Vec<kad::RecordKey>,
    /// Who the lookups named, and how many answers named each: fetched once they ended.
    named: Named,
    /// The fetches are chosen ([`Named::plan`]); lookups from now on are to reach them.
    fetching: bool,
    /// Chosen providers this node cannot dial without the addresses an answer carries: fetched
    /// when a second lookup of their key names them again (Kademlia keeps an answer's
    /// addresses only while its lookup runs).
    awaiting: HashSet<PeerId>,
    /// When the fetches are chosen even if a lookup still runs (half the search's time): a
    /// lookup held up by unresponsive servers must not leave no time to fetch.
    choose_at: Instant,
    deadline: Instant,
    reply: oneshot::Sender<SearchOutcome>,
}

struct PendingSend {
    to: PeerId,
    /// Held without its padding's zeros, padded again only onto the stream (see
    /// [`PadElided`]): thousands may wait for a peer that never answers.
    signed: PadElided,
    attempt: u32,
    reply: oneshot::Sender<Result<Delivery, PeersError>>,
}

#[derive(Default)]
struct PeerState {
    connections: HashMap<ConnectionId, Multiaddr>,
    /// The connections of `connections` this node dialed.
    dialed: HashSet<ConnectionId>,
    listen_addrs: Vec<Multiaddr>,
    agent_version: Option<String>,
}

/// The cloneable handle to a running peer network. Dropping every clone stops it.
#[derive(Clone)]
pub struct PeersHandle {
    local: PeerId,
    keypair: Arc<Keypair>,
    commands: mpsc::Sender<Command>,
    board: Arc<Mutex<Board>>,
    events: broadcast::Sender<NetworkEvent>,
    seq: Arc<Mutex<SeqClock>>,
    max_payload_bytes: usize,
    search_scope: SearchScope,
}

/// Start the peer network with the node key; returns once every listen address is bound.
pub async fn start(
    config: PeersConfig,
    keypair: Keypair,
) -> Result<(PeersHandle, PayloadReceiver), PeersError> {
    config.validate()?;
    if keypair.clone().try_into_ed25519().is_err() {
        return Err(PeersError::InvalidKey(
            "the node key must be Ed25519".into(),
        ));
    }
    let local = keypair.public().to_peer_id();
    let dial_policy = Arc::new(DialPolicy::new(
        config.dial_private_addresses,
        config.mdns,
        config.bootstrap.iter().chain(&config.relays).cloned(),
    ));
    let mut swarm = build_swarm(&config, keypair.clone(), dial_policy.clone())?;
    for category in &config.live_categories {
        swarm
            .behaviour_mut()
            .gossipsub
            .subscribe(&presence_topic(category))
            .map_err(|e| PeersError::InvalidConfig(format!("cannot subscribe to presence: {e}")))?;
    }
    // Client until reachability says otherwise (kad's own automatic mode would count a relay's
    // circuit address as reachable).
    let dht_server = config.kad_server == Some(true);
    swarm.behaviour_mut().kad.set_mode(Some(if dht_server {
        kad::Mode::Server
    } else {
        kad::Mode::Client
    }));
    if let Some(relay) = swarm.behaviour_mut().relay.as_mut() {
        relay.set_status(Some(relay::Status::Disable));
    }

    let (events, _) = broadcast::channel(1024);
    let listen_addrs = bind(&mut swarm, &config.listen, &events).await?;
    let declared = if config.external_addresses.is_empty() && dht_server {
        // A forced server says its listen addresses are reachable.
        listen_addrs.clone()
    } else {
        config.external_addresses.clone()
    };
    for addr in declared {
        swarm.add_external_address(addr);
    }
    for relay in &config.relays {
        // Connect first; the reservation is asked for on that connection once it is up
        // (`listen_on_relay`): a circuit listener that dials the relay itself lost the race
        // with any other dial to it (bootstrap, Kademlia) and never listened.
        if let Err(e) = swarm.dial(dial_opts(relay)) {
            tracing::warn!(%relay, error = %e, "cannot dial relay");
        }
    }

    let (cmd_tx, cmd_rx) = mpsc::channel(256);
    let (payload_tx, payload_rx) = mpsc::channel(config.payload_queue);
    let (retry_tx, retry_rx) = mpsc::unbounded_channel();
    let board = Arc::new(Mutex::new(Board::new(config.board_config())));
    let handle = PeersHandle {
        local,
        keypair: Arc::new(keypair.clone()),
        commands: cmd_tx,
        board: board.clone(),
        events: events.clone(),
        seq: Arc::new(Mutex::new(SeqClock::default())),
        max_payload_bytes: config.max_payload_bytes,
        search_scope: config.search_scope,
    };
    let mut task = Task {
        inbox: Inbox::new(local, config.inbox_config()),
        swarm,
        keypair,
        local,
        topics: Vec::new(),
        board,
        offer: Offer::default(),
        advert_seq: 0,
        publish_at: None,
        retry_tx,
        pending: HashMap::new(),
        sending: HashMap::new(),
        waiting: HashMap::new(),
        syncing: HashSet::new(),
        dialing: HashMap::new(),
        payload_tx,
        events,
        peers: HashMap::new(),
        listen_addrs,
        last_kad_bootstrap: None,
        mdns_found: MdnsFound::new(Draw::unpredictable()),
        sync_answered: SyncAnswers::default(),
        provided: BTreeSet::new(),
        announcing: HashSet::new(),
        announcements: Announcements::new(config.index_republish),
        announce_failed: 0,
        announced_early: false,
        reprovided: false,
        gate: config.provider_gate(),
        draw: Draw::unpredictable(),
        advert_rate: Buckets::new(config.advert_rate_per_sec, f64::from(config.advert_burst)),
        newer_formats: Buckets::new(NEWER_FORMATS_PER_SEC, NEWER_FORMATS_BURST),
        new_signers: Buckets::new(NEW_SIGNERS_PER_SEC, NEW_SIGNERS_BURST),
        searches: HashMap::new(),
        next_search: 0,
        lookups: HashMap::new(),
        fetches: HashMap::new(),
        dht_server,
        relay_serving: false,
        relay_listening: HashSet::new(),
        dial_policy,
        config,
    };
    task.update_reachability();
    for addr in task.config.bootstrap.clone() {
        task.dial_bootstrap(&addr);
    }
    tokio::spawn(task.run(cmd_rx, retry_rx));
    Ok((handle, payload_rx))
}

fn build_swarm(
    config: &PeersConfig,
    keypair: Keypair,
    dial_policy: Arc<DialPolicy>,
) -> Result<Swarm<Behaviour>, PeersError> {
    let gossip_config = gossipsub::ConfigBuilder::default()
        .heartbeat_interval(config.gossip_heartbeat)
        .validation_mode(gossipsub::ValidationMode::Strict)
        // We judge every advert before gossipsub forwards it: a forged one goes no further.
        .validate_messages()
        // Let an oversized advert reach our check (a clear refusal) up to a hard ceiling.
        .max_transmit_size(config.max_advert_bytes * 2 + 16 * 1024)
        .build()
        .map_err(|e| PeersError::InvalidConfig(format!("gossipsub: {e}")))?;
    let request_limit = (config.max_payload_bytes as u64) * 2 + 64 * 1024;
    let max_advert_bytes = config.max_advert_bytes;
    let mdns_on = config.mdns;
    let idle = config.idle_connection_timeout;
    let request_timeout = config.request_timeout;
    let index_ttl = config.index_ttl;
    let search_timeout = config.search_timeout;
    let relay_server = config.relay_server;
    let relay_config = relay::Config {
        max_reservations: config.relay_max_reservations,
        max_circuits: config.relay_max_circuits,
        max_circuit_duration: config.relay_max_circuit_duration,
        max_circuit_bytes: config.relay_max_circuit_bytes,
        ..relay::Config::default()
    };
    let autonat_server_on = config.autonat_server;
    let limits = connection_limits::ConnectionLimits::default()
        .with_max_established(Some(config.max_connections))
        // Inbound ones have a lower limit of their own, so outbound room remains.
        .with_max_established_incoming(Some(config.incoming_limit()))
        .with_max_established_per_peer(Some(config.max_connections_per_peer))
        .with_max_pending_incoming(Some(config.max_pending_incoming))
        .with_max_pending_outgoing(Some(config.max_pending_outgoing));
    let swarm = libp2p::SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        // TCP, QUIC and in-process `/memory/<n>` addresses (tests of many nodes without
        // sockets), behind one dial gate: every dial of every behaviour passes it (`dial`).
        .with_other_transport(|key| {
            use libp2p::Transport;
            use libp2p::core::muxing::StreamMuxerBox;
            let tcp = tcp::tokio::Transport::new(tcp::Config::default().nodelay(true))
                .upgrade(libp2p::core::upgrade::Version::V1)
                .authenticate(noise::Config::new(key)?)
                .multiplex(yamux::Config::default())
                .timeout(TCP_HANDSHAKE_TIMEOUT)
                .map(|(peer, muxer), _| (peer, StreamMuxerBox::new(muxer)));
            let quic = libp2p::quic::tokio::Transport::new(libp2p::quic::Config::new(key))
                .map(|(peer, muxer), _| (peer, StreamMuxerBox::new(muxer)));
            let memory = libp2p::core::transport::MemoryTransport::default()
                .upgrade(libp2p::core::upgrade::Version::V1)
                .authenticate(noise::Config::new(key)?)
                .multiplex(yamux::Config::default())
                .map(|(peer, muxer), _| (peer, StreamMuxerBox::new(muxer)));
            let all = tcp
                .or_transport(quic)
                .map(|either, _| either.into_inner())
                .or_transport(memory)
                .map(|either, _| either.into_inner());
            Ok(DialGate::new(all, dial_policy))
        })
        .map_err(|e| PeersError::InvalidConfig(format!("transport: {e}")))?
        .with_relay_client(noise::Config::new, yamux::Config::default)
        .map_err(|e| PeersError::InvalidConfig(format!("relay client: {e}")))?
        .with_behaviour(|key, relay_client| {
            let local = key.public().to_peer_id();
            let mut gossipsub = gossipsub::Behaviour::new(
                gossipsub::MessageAuthenticity::Signed(key.clone()),
                gossip_config,
            )?;
            let (params, thresholds) = gossip_scoring();
            gossipsub.with_peer_score(params, thresholds)?;
            // Each answer is read under its own limit: an ack 4 KiB, an advert fetch one
            // advert's, a board sync 8 MiB and 2,000 adverts (`wire`).
            let codec = WireCodec::new(request_limit, max_advert_bytes);
            let rr = request_response::Behaviour::with_codec(
                codec,
                [(StreamProtocol::new(PAYLOAD_PROTOCOL), ProtocolSupport::Full)],
                request_response::Config::default().with_request_timeout(request_timeout),
            );
            let identify = identify::Behaviour::new(
                identify::Config::new(IDENTIFY_PROTOCOL.to_string(), key.public())
                    .with_agent_version(format!("skillbox/{}", env!("CARGO_PKG_VERSION")))
                    // A connected peer learns our listen addresses (to redial us, e.g. after
                    // a restart) and each newly confirmed one at once; what enters its DHT
                    // routing table is filtered on its side (`reach::routable_for_dht`).
                    .with_push_listen_addr_updates(true),
            );
            let mut kad_config = kad::Config::new(StreamProtocol::new(KAD_PROTOCOL));
            kad_config
                // Provider records are judged by this node's gate before they are stored, and
                // value records (which nothing here uses) are never stored.
                .set_record_filtering(kad::StoreInserts::FilterBoth)
                .set_provider_record_ttl(Some(index_ttl))
                // This node republishes its keys itself (`announce::Announcements`): libp2p's
                // job re-announced keys announced seconds before and, when its lookups outlasted
                // the period, started the next round beside them.
                .set_provider_publication_interval(None)
                .set_query_timeout(search_timeout);
            let store = kad::store::MemoryStore::with_config(
                local,
                kad::store::MemoryStoreConfig {
                    max_records: 0,
                    max_value_bytes: 0,
                    max_providers_per_key: MAX_PROVIDERS_PER_KEY,
                    max_provided_keys: 1 << 20,
                },
            );
            let kad = kad::Behaviour::with_config(local, store, kad_config);
            let mdns = if mdns_on {
                Some(mdns::tokio::Behaviour::new(mdns::Config::default(), local)?)
            } else {
                None
            };
            let relay = relay_server.then(|| relay::Behaviour::new(local, relay_config));
            let autonat_server = autonat_server_on.then(autonat::v2::server::Behaviour::default);
            Ok(Behaviour {
                limits: connection_limits::Behaviour::new(limits),
                gossipsub,
                rr,
                identify,
                kad,
                mdns: Toggle::from(mdns),
                relay_client,
                relay: Toggle::from(relay),
                dcutr: dcutr::Behaviour::new(local),
                // libp2p's defaults: a candidate tested every 5 s, up to 10 candidates.
                autonat: autonat::v2::client::Behaviour::default(),
                autonat_server: Toggle::from(autonat_server),
            })
        })
        .map_err(|e| PeersError::InvalidConfig(format!("behaviour: {e}")))?
        .with_swarm_config(|c| {
            // 0-RTT protocol negotiation on the substreams this node opens: a stream that
            // proposes one protocol (a payload, a kad or identify query) carries its data with
            // the proposal instead of waiting a round trip for the confirmation (issue 33: each
            // payload opens a stream, so each cost a round trip more). The wire is multistream
            // V1 as before; a listener that refuses the protocol refuses the stream as before.
            c.with_idle_connection_timeout(idle)
                .with_substream_upgrade_protocol_override(libp2p::core::upgrade::Version::V1Lazy)
        })
        .build();
    Ok(swarm)
}

/// Adverts of a newer format (another version, a field, variant or provider kind this version
/// does not know) one forwarder may deliver before the rest count as invalid: a burst, and per
/// second after it. An honest newer node forwards each newer node's advert (one an interval,
/// 60 s) to us first only for its share of the mesh: 2 a second is a forwarder first for 120
/// newer publishers, about 700 on our topics at mesh degree 6. A flooder is graylisted after
/// the burst and [`GRAYLIST_AT_INVALID`] more.
const NEWER_FORMATS_BURST: f64 = 120.0;
const NEWER_FORMATS_PER_SEC: f64 = 2.0;

/// Adverts of signers not on the board that one forwarder may deliver: a burst, and per second
/// after it; past them such adverts are ignored and not forwarded. A signer's identity costs
/// nothing, so its own advert rate never bounded one peer publishing as 100,000 of them and
/// filling every board of the mesh (a full board then refused every newcomer). A forwarder
/// pays for the room it fills; signers already held, re-signing, cost it nothing. Honest
/// newcomers are few a second, and each is delivered first by one of several forwarders.
const NEW_SIGNERS_BURST: f64 = 120.0;
const NEW_SIGNERS_PER_SEC: f64 = 2.0;

/// Signers not on the board one board-sync answer may bring: half an answer, so an answering
/// peer that made up its board cannot fill this one in a sync; the answers come longest-held
/// first ([`Board::signed_adverts`]), so an honest peer's cut keeps its long-standing entries.
const SYNC_NEW_SIGNERS_MAX: usize = SYNC_MAX_ADVERTS / 2;

/// Invalid adverts a peer may deliver, taken together, before it is graylisted: the score
/// penalty is the square of the count (decaying), so [`GRAYLIST_AT_INVALID`] of them cross
/// gossipsub's default graylist threshold (-80).
const GRAYLIST_AT_INVALID: f64 = 9.0;

/// Gossipsub peer scoring on the live topics: a peer whose deliveries our check rejects (forged,
/// malformed, oversized, a signer that is not the publisher — not a stale or rate-limited one,
/// nor one of another version or with a field or provider kind this version does not know,
/// which are ignored up to [`NEWER_FORMATS_BURST`] per forwarder) loses score, and past [`GRAYLIST_AT_INVALID`] of them it is graylisted:
/// everything it sends on gossip is dropped unread until the count decays (about a minute and
/// a half for 20). Before, a peer could publish invalid adverts without end and each cost a
/// signature check. Only this penalty counts: no credit for time in the mesh or first
/// deliveries (a Sybil would build it up to spend), no mesh delivery quota (adverts come once
/// a minute), and no IP colocation penalty (many honest nodes share an address behind NAT).
fn gossip_scoring() -> (gossipsub::PeerScoreParams, gossipsub::PeerScoreThresholds) {
    let topic = gossipsub::TopicScoreParams {
        topic_weight: 1.0,
        time_in_mesh_weight: 0.0,
        first_message_deliveries_weight: 0.0,
        mesh_message_deliveries_weight: 0.0,
        mesh_failure_penalty_weight: 0.0,
        invalid_message_deliveries_weight: -1.0,
        // Per decay interval (1 s): a count halves in about 70 s.
        invalid_message_deliveries_decay: 0.99,
        ..gossipsub::TopicScoreParams::default()
    };
    let topics = all_categories()
        .iter()
        .map(|c| (presence_topic(c).hash(), topic.clone()))
        .collect();
    let params = gossipsub::PeerScoreParams {
        topics,
        ip_colocation_factor_weight: 0.0,
        ..gossipsub::PeerScoreParams::default()
    };
    let thresholds = gossipsub::PeerScoreThresholds::default();
    debug_assert!(
        -GRAYLIST_AT_INVALID * GRAYLIST_AT_INVALID < thresholds.graylist_threshold
            && -(GRAYLIST_AT_INVALID - 1.0) * (GRAYLIST_AT_INVALID - 1.0)
                > thresholds.graylist_threshold
    );
    (params, thresholds)
}

/// Listen on every address and wait until each is bound, so errors surface from `start`.
async fn bind(
    swarm: &mut Swarm<Behaviour>,
    listen: &[Multiaddr],
    events: &broadcast::Sender<NetworkEvent>,
) -> Result<Vec<Multiaddr>, PeersError> {
    let mut waiting = HashMap::new();
    for addr in listen {
        probe_port_free(addr)?;
        let id = swarm
            .listen_on(addr.clone())
            .map_err(|e| PeersError::Listen {
                addr: addr.clone(),
                reason: e.to_string(),
            })?;
        waiting.insert(id, addr.clone());
    }
    let mut bound = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !waiting.is_empty() {
        let event = tokio::time::timeout_at(deadline, swarm.select_next_some())
            .await
            .map_err(|_| PeersError::Listen {
                addr: waiting
                    .values()
                    .next()
                    .cloned()
                    .unwrap_or_else(Multiaddr::empty),
                reason: "no listen address after 10 s".into(),
            })?;
        match event {
            SwarmEvent::NewListenAddr {
                listener_id,
                address,
            } => {
                waiting.remove(&listener_id);
                let _ = events.send(NetworkEvent::Listening(address.clone()));
                bound.push(address);
            }
            SwarmEvent::ListenerError { listener_id, error } => {
                if let Some(addr) = waiting.remove(&listener_id) {
                    return Err(PeersError::Listen {
                        addr,
                        reason: error.to_string(),
                    });
                }
            }
            SwarmEvent::ListenerClosed {
                listener_id,
                reason,
                ..
            } => {
                if let Some(addr) = waiting.remove(&listener_id) {
                    return Err(PeersError::Listen {
                        addr,
                        reason: match reason {
                            Ok(()) => "listener closed".into(),
                            Err(e) => e.to_string(),
                        },
                    });
                }
            }
            _ => {}
        }
    }
    Ok(bound)
}

/// libp2p listens with SO_REUSEPORT, so a second node on a taken port would silently share it
/// with the first. A plain bind first turns that into a clear "address in use".
fn probe_port_free(addr: &Multiaddr) -> Result<(), PeersError> {
    let mut ip = None;
    let mut port = None;
    for p in addr.iter() {
        match p {
            Protocol::Ip4(a) => ip = Some(std::net::IpAddr::V4(a)),
            Protocol::Ip6(a) => ip = Some(std::net::IpAddr::V6(a)),
            Protocol::Tcp(p) => port = Some(p),
            _ => {}
        }
    }
    if let (Some(ip), Some(port)) = (ip, port)
        && port != 0
    {
        std::net::TcpListener::bind((ip, port)).map_err(|e| PeersError::Listen {
            addr: addr.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(())
}

struct Task {
    swarm: Swarm<Behaviour>,
    config: PeersConfig,
    keypair: Keypair,
    local: PeerId,
    /// The live topics of the offered skills' categories: where the advert is published.
    topics: Vec<gossipsub::IdentTopic>,
    board: Arc<Mutex<Board>>,
    offer: Offer,
    advert_seq: u64,
    /// A coalesced re-publish: many peers subscribing at once cause one advert.
    publish_at: Option<Instant>,
    retry_tx: mpsc::UnboundedSender<PendingSend>,
    pending: HashMap<OutboundRequestId, PendingSend>,
    /// Payload requests in flight to each peer, and those waiting for a free slot (see
    /// [`SEND_WINDOW`]).
    sending: HashMap<PeerId, usize>,
    waiting: HashMap<PeerId, VecDeque<PendingSend>>,
    syncing: HashSet<OutboundRequestId>,
    dialing: HashMap<ConnectionId, (Multiaddr, oneshot::Sender<Result<PeerId, PeersError>>)>,
    inbox: Inbox,
    payload_tx: mpsc::Sender<IncomingPayload>,
    events: broadcast::Sender<NetworkEvent>,
    peers: HashMap<PeerId, PeerState>,
    listen_addrs: Vec<Multiaddr>,
    last_kad_bootstrap: Option<Instant>,
    /// LAN peers mDNS found and has not expired, with the LAN addresses it named: dialed at
    /// discovery and re-dialed from [`Task::prune`] while not connected, so one dial that failed
    /// (a busy peer, a lost SYN) does not leave a LAN peer unreached until mDNS's next query
    /// minutes later; within budgets any LAN host's answers cannot exhaust ([`MdnsFound`]).
    mdns_found: MdnsFound,
    sync_answered: SyncAnswers,
    /// The skill index: what this node provides, what it lets others provide on it (as a DHT
    /// server), and the searches in flight with their lookups and fetches.
    provided: BTreeSet<Vec<u8>>,
    /// The announcements of the keys the offer set last added, still under way.
    announcing: HashSet<kad::QueryId>,
    /// When each provided key was last announced, and whether that is under way: what
    /// [`Task::republish`] announces again.
    announcements: Announcements<kad::QueryId>,
    announce_failed: usize,
    /// Keys were announced while the routing table held fewer than K peers (e.g. an offer set
    /// before the first connection): they are announced again when the first bootstrap ends.
    announced_early: bool,
    reprovided: bool,
    gate: ProviderGate,
    /// The index rules' random choices: which held provider a newcomer's record replaces.
    draw: Draw,
    /// Adverts taken per publisher on the live topics.
    advert_rate: Buckets,
    /// Adverts of a newer format (ignored by gossip scoring) each forwarder has delivered: past
    /// [`NEWER_FORMATS_BURST`] and [`NEWER_FORMATS_PER_SEC`] they count as rejected.
    newer_formats: Buckets,
    /// Adverts of signers not on the board each forwarder has delivered (see
    /// [`NEW_SIGNERS_BURST`]).
    new_signers: Buckets,
    searches: HashMap<u64, Search>,
    next_search: u64,
    lookups: HashMap<kad::QueryId, u64>,
    fetches: HashMap<OutboundRequestId, u64>,
    /// Kademlia server mode and relay serving, as last set from the confirmed addresses.
    dht_server: bool,
    relay_serving: bool,
    /// Configured relays a circuit reservation was asked of on the current connection.
    relay_listening: HashSet<PeerId>,
    /// What the transport dials; the operator's explicit dials are added to it.
    dial_policy: Arc<DialPolicy>,
}

impl Task {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut retries: mpsc::UnboundedReceiver<PendingSend>,
    ) {
        let mut advert_tick = tokio::time::interval(self.config.advert_interval);
        let prune_every =
            (self.config.board_ttl / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
        let mut prune_tick = tokio::time::interval(prune_every);
        // A key is republished at most this late (its records live `index_ttl` on the servers).
        let republish_every = (self.config.index_republish / 16)
            .clamp(Duration::from_millis(100), Duration::from_secs(5));
        let mut republish_tick = tokio::time::interval(republish_every);
        loop {
            let publish_at = self.publish_at;
            tokio::select! {
                event = self.swarm.select_next_some() => self.on_swarm_event(event),
                command = commands.recv() => match command {
                    Some(Command::Shutdown(done)) => {
                        let _ = done.send(());
                        break;
                    }
                    Some(c) => self.on_command(c),
                    None => break,
                },
                Some(retry) = retries.recv() => self.try_send(retry),
                _ = advert_tick.tick() => self.on_advert_tick(),
                _ = prune_tick.tick() => self.prune(),
                _ = republish_tick.tick() => self.republish(),
                _ = async {
                    match publish_at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {
                    self.publish_at = None;
                    if let Err(e) = self.publish_advert() {
                        tracing::warn!(error = %e, "cannot publish advert");
                    }
                }
            }
        }
        tracing::debug!(peer = %self.local, "peer network stopped");
    }

    fn emit(&self, event: NetworkEvent) {
        let _ = self.events.send(event);
    }

    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::ListenAddrs(reply) => {
                let _ = reply.send(self.listen_addrs.clone());
            }
            Command::Dial(addr, reply) => {
                if let Some(peer) = peer_of_addr(&addr)
                    && self.swarm.is_connected(&peer)
                {
                    let _ = reply.send(Ok(peer));
                    return;
                }
                // The operator asked for this address: dialed whatever it is (`dial`).
                self.dial_policy.allow_operator(&addr);
                let opts = dial_opts(&addr);
                let id = opts.connection_id();
                match self.swarm.dial(opts) {
                    Ok(()) => {
                        self.dialing.insert(id, (addr, reply));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(PeersError::Dial {
                            addr,
                            reason: e.to_string(),
                        }));
                    }
                }
            }
            Command::Peers(reply) => {
                let _ = reply.send(self.peer_infos());
            }
            Command::SetOffer(offer, reply) => {
                let changed = offer != self.offer;
                self.offer = offer;
                let result = if changed {
                    self.reindex();
                    self.topics = offer_topics(&self.offer);
                    self.publish_advert()
                } else {
                    Ok(())
                };
                let _ = reply.send(result);
            }
            Command::Send { to, signed, reply } => self.try_send(PendingSend {
                to,
                signed: PadElided::new(signed),
                attempt: 0,
                reply,
            }),
            Command::PublishRaw(bytes, reply) => {
                let result = self
                    .swarm
                    .behaviour_mut()
                    .gossipsub
                    .publish(presence_topic(skillbox_calls::vocabulary::GENERAL), bytes)
                    .map(|_| ())
                    .map_err(|e| PeersError::Publish(e.to_string()));
                let _ = reply.send(result);
            }
            Command::Search(text, reply) => self.search(&text, reply),
            Command::ProvideRaw(keys, reply) => {
                for key in keys {
                    let _ = self.announce(&key);
                }
                let _ = reply.send(());
            }
            Command::Reachability(reply) => {
                let _ = reply.send(Reachability {
                    dht_server: self.dht_server,
                    relay_serving: self.relay_serving,
                    confirmed: self.swarm.external_addresses().cloned().collect(),
                });
            }
            Command::SendsHeld(reply) => {
                let held = self
                    .waiting
                    .values()
                    .flatten()
                    .chain(self.pending.values())
                    .map(|p| p.signed.held_bytes());
                let _ = reply.send(SendsHeld {
                    payloads: held.clone().count(),
                    bytes: held.sum(),
                });
            }
            Command::MdnsDiscovered(found, reply) => {
                self.on_mdns_discovered(found);
                let _ = reply.send(());
            }
            Command::Shutdown(_) => {}
        }
    }

    /// Set the DHT mode and relay serving from the confirmed external addresses (see `reach`).
    fn update_reachability(&mut self) {
        let confirmed: Vec<Multiaddr> = self.swarm.external_addresses().cloned().collect();
        let server = reach::dht_server(self.config.kad_server, &confirmed);
        if server != self.dht_server {
            self.dht_server = server;
            self.swarm.behaviour_mut().kad.set_mode(Some(if server {
                kad::Mode::Server
            } else {
                kad::Mode::Client
            }));
            tracing::info!(server, "DHT mode");
            self.emit(NetworkEvent::DhtServer(server));
        }
        let serving = reach::relay_serves(self.config.relay_server, &confirmed);
        if let Some(relay) = self.swarm.behaviour_mut().relay.as_mut()
            && serving != self.relay_serving
        {
            relay.set_status(Some(if serving {
                relay::Status::Enable
            } else {
                relay::Status::Disable
            }));
            self.relay_serving = serving;
        }
    }

    /// Provide exactly the index keys of what this node offers now: stop the ones no longer
    /// offered, start the new ones ([`Task::republish`] announces them again every
    /// `index_republish`).
    fn reindex(&mut self) {
        let keys = offer_keys(
            &self.local,
            self.offer
                .skills
                .iter()
                .map(|s| (s.name.as_str(), s.description.as_str())),
        );
        let kad = &mut self.swarm.behaviour_mut().kad;
        for gone in self.provided.difference(&keys) {
            kad.stop_providing(&kad::RecordKey::new(gone));
            self.announcements.forget(gone);
        }
        let known: usize = kad.kbuckets().map(|b| b.num_entries()).sum();
        if known < kad::K_VALUE.get() && keys.difference(&self.provided).next().is_some() {
            self.announced_early = true;
        }
        let new: Vec<Vec<u8>> = keys.difference(&self.provided).cloned().collect();
        for new in new {
            match self.announce(&new) {
                Ok(query) => {
                    self.announcing.insert(query);
                }
                Err(e) => tracing::warn!(error = ?e, "cannot provide an index key"),
            }
        }
        self.provided = keys;
        self.announce_failed = 0;
        self.announced_done();
    }

    /// Once the last announcement of the offer's keys finished, say so.
    fn announced_done(&mut self) {
        if self.announcing.is_empty() {
            self.emit(NetworkEvent::Indexed {
                keys: self.provided.len(),
                failed: self.announce_failed,
            });
        }
    }

    /// Announce every provided key again: once the routing table is filled, if some went out
    /// before (records sent while this node knew only its bootstrap peer went to the wrong
    /// servers), and whenever an external address is confirmed (records carry the addresses).
    /// A key whose announcement is under way is announced when that one ends, not beside it
    /// (review 29 R29-11: relay churn confirmed addresses faster than the walks ended).
    fn reprovide(&mut self) {
        for key in self.provided.clone() {
            if let Err(e) = self.announce(&key) {
                tracing::warn!(error = ?e, "cannot provide an index key");
            }
        }
    }

    /// Announce `key` now or, while its last announcement is under way, once that one ends
    /// ([`Announcements::request`]). The query returned is the one whose end tells: the new
    /// one, or the one under way (whose end starts the next, see `on_kad`).
    fn announce(&mut self, key: &[u8]) -> Result<kad::QueryId, kad::store::Error> {
        match self.announcements.request(key) {
            Request::Waits(query) => Ok(query),
            Request::Start => self.start_announcement(key),
        }
    }

    /// Start announcing `key` (store this node's provider record, then send it to the servers
    /// closest to the key), noting when, so it is republished a period from now.
    fn start_announcement(&mut self, key: &[u8]) -> Result<kad::QueryId, kad::store::Error> {
        let query = self
            .swarm
            .behaviour_mut()
            .kad
            .start_providing(kad::RecordKey::new(&key))?;
        self.announcements
            .started(key, query, Instant::now().into_std());
        Ok(query)
    }

    /// Announce again each key this node provides (the offer's and any other it stores its
    /// own record of) whose last announcement started `index_republish` ago (or was asked for
    /// again) and has ended.
    fn republish(&mut self) {
        let now = Instant::now().into_std();
        let due = {
            let store = self.swarm.behaviour_mut().kad.store_mut();
            let provided: Vec<Vec<u8>> = store.provided().map(|r| r.key.to_vec()).collect();
            self.announcements
                .due(provided.iter().map(Vec::as_slice), now)
        };
        for key in due {
            if let Err(e) = self.start_announcement(&key) {
                tracing::warn!(error = ?e, "cannot republish an index key");
            }
        }
    }

    fn search(&mut self, text: &str, reply: oneshot::Sender<SearchOutcome>) {
        let vocab = skillbox_calls::vocabulary::query_vocabulary(text);
        let keys = search_keys(self.config.search_scope, &vocab);
        if keys.all().next().is_none() {
            // `board`: nothing of the request leaves this node.
            let _ = reply.send(SearchOutcome::default());
            return;
        }
        let (first, fallback) = if keys.keywords.is_empty() {
            (keys.category, Vec::new())
        } else {
            (keys.keywords, keys.category)
        };
        let id = self.next_search;
        self.next_search += 1;
        let search = Search {
            outcome: SearchOutcome::default(),
            lookups_left: 0,
            fetches_left: 0,
            fallback,
            named: Named::default(),
            fetching: false,
            awaiting: HashSet::new(),
            choose_at: Instant::now() + self.config.search_timeout / 2,
            deadline: Instant::now() + self.config.search_timeout,
            reply,
        };
        self.searches.insert(id, search);
        self.look_up(id, first);
    }

    /// Start search `id`'s lookups of `keys`, in parallel. Kademlia answers from our own store
    /// first (this node may provide the key or serve it), then from the servers closest to it.
    fn look_up(&mut self, id: u64, keys: Vec<kad::RecordKey>) {
        let Some(search) = self.searches.get_mut(&id) else {
            return;
        };
        search.outcome.lookups += keys.len();
        search.lookups_left += keys.len();
        for key in keys {
            let query = self.swarm.behaviour_mut().kad.get_providers(key);
            self.lookups.insert(query, id);
        }
    }

    /// One answer of search `id`'s lookup of `key` named `providers`. Before the fetches are
    /// chosen, the names are only counted; after, a chosen provider the answer names is fetched
    /// now, while the lookup holds its addresses.
    fn search_named(&mut self, id: u64, key: &kad::RecordKey, providers: HashSet<PeerId>) {
        let now = unix_ms();
        let Some(search) = self.searches.get_mut(&id) else {
            return;
        };
        let new = search.named.answer(key, providers.iter().copied());
        let cached: Vec<bool> = {
            let board = self.board.lock().unwrap_or_else(|p| p.into_inner());
            new.iter()
                .map(|p| *p == self.local || board.advert(p, now).is_some())
                .collect()
        };
        for (peer, cached) in new.into_iter().zip(cached) {
            search.outcome.named.push(peer);
            if cached {
                search.outcome.peers.push(peer);
            }
        }
        if !search.fetching {
            return;
        }
        let due: Vec<PeerId> = providers
            .into_iter()
            .filter(|p| search.awaiting.remove(p))
            .collect();
        for peer in due {
            self.search_fetch(id, peer);
        }
    }

    /// Search `id`'s lookups ended (or half its time passed): choose what to fetch ([`Named::plan`], up to the cap, not
    /// the providers whose advert the board holds) and fetch those this node can dial now; look
    /// the keys of the others up again to reach them.
    fn search_choose(&mut self, id: u64) {
        let now = unix_ms();
        let max_fetches = self.config.search_max_fetches;
        let Some(search) = self.searches.get_mut(&id) else {
            return;
        };
        search.fetching = true;
        let ranked = search.named.plan(&mut self.draw);
        let chosen: Vec<PeerId> = {
            let board = self.board.lock().unwrap_or_else(|p| p.into_inner());
            ranked
                .into_iter()
                .filter(|p| *p != self.local && board.advert(p, now).is_none())
                .take(max_fetches)
                .collect()
        };
        let known: HashSet<PeerId> = self
            .swarm
            .behaviour_mut()
            .kad
            .kbuckets()
            .flat_map(|b| b.iter().map(|e| *e.node.key.preimage()).collect::<Vec<_>>())
            .collect();
        let mut again: Vec<kad::RecordKey> = Vec::new();
        let mut now_due = Vec::new();
        for peer in chosen {
            if self.swarm.is_connected(&peer) || known.contains(&peer) {
                now_due.push(peer);
            } else if let Some(search) = self.searches.get_mut(&id) {
                search.awaiting.insert(peer);
                if let Some(key) = search.named.key_of(&peer)
                    && !again.contains(key)
                {
                    again.push(key.clone());
                }
            }
        }
        for peer in now_due {
            self.search_fetch(id, peer);
        }
        if !again.is_empty() {
            self.look_up(id, again);
        }
    }

    /// Fetch `peer`'s advert for search `id`.
    fn search_fetch(&mut self, id: u64, peer: PeerId) {
        let Some(search) = self.searches.get_mut(&id) else {
            return;
        };
        search.outcome.fetched += 1;
        search.fetches_left += 1;
        // Dial now, while the routing table or a lookup that named the provider holds its
        // addresses.
        let _ = self.swarm.dial(
            DialOpts::peer_id(peer)
                .condition(PeerCondition::DisconnectedAndNotDialing)
                .build(),
        );
        let request = self
            .swarm
            .behaviour_mut()
            .rr
            .send_request(&peer, WireRequest::Advert);
        self.fetches.insert(request, id);
    }

    /// A fetched advert (or its failure) for search `id`.
    fn search_fetched(&mut self, id: u64, peer: PeerId, advert: Option<String>) {
        let now = unix_ms();
        let verdict = advert.map(|raw| self.board().ingest(raw.as_bytes(), Some(&peer), now));
        let Some(search) = self.searches.get_mut(&id) else {
            return;
        };
        search.fetches_left = search.fetches_left.saturating_sub(1);
        match verdict {
            Some(Ok(ingested)) => {
                search.outcome.peers.push(peer);
                self.emit(NetworkEvent::AdvertAccepted {
                    peer: ingested.peer,
                    seq: ingested.seq,
                    new_peer: ingested.new_peer,
                });
            }
            // We hold a newer one already: still a candidate.
            Some(Err(crate::AdvertRefusal::Stale { .. })) => search.outcome.peers.push(peer),
            Some(Err(reason)) => {
                search.outcome.refused += 1;
                self.emit(NetworkEvent::AdvertRefused {
                    from: peer,
                    reason: reason.to_string(),
                });
            }
            None => {}
        }
        self.search_maybe_done(id);
    }

    fn search_maybe_done(&mut self, id: u64) {
        let fall_back = self.searches.get_mut(&id).and_then(|s| {
            (s.lookups_left == 0 && s.outcome.named.is_empty() && Instant::now() < s.deadline)
                .then(|| std::mem::take(&mut s.fallback))
                .filter(|keys| !keys.is_empty())
        });
        if let Some(keys) = fall_back {
            self.look_up(id, keys);
            return;
        }
        let choose = self.searches.get(&id).is_some_and(|s| {
            let now = Instant::now();
            (s.lookups_left == 0 || now >= s.choose_at)
                && !s.fetching
                && !s.named.is_empty()
                && now < s.deadline
        });
        if choose {
            self.search_choose(id);
        }
        if let Some(s) = self.searches.get_mut(&id)
            && s.fetching
            && s.lookups_left == 0
        {
            // The second lookups ended: a chosen provider they did not name again is not
            // reachable from here.
            s.awaiting.clear();
        }
        let done = self.searches.get(&id).is_some_and(|s| {
            (s.lookups_left == 0 && s.fetches_left == 0) || Instant::now() >= s.deadline
        });
        if !done {
            return;
        }
        if let Some(search) = self.searches.remove(&id) {
            let mut outcome = search.outcome;
            outcome.peers.sort();
            outcome.peers.dedup();
            let _ = search.reply.send(outcome);
        }
        let kad = &mut self.swarm.behaviour_mut().kad;
        self.lookups.retain(|query, s| {
            if *s == id {
                if let Some(mut q) = kad.query_mut(query) {
                    q.finish();
                }
                false
            } else {
                true
            }
        });
        self.fetches.retain(|_, s| *s != id);
    }

    fn on_kad(&mut self, event: kad::Event) {
        match event {
            kad::Event::OutboundQueryProgressed {
                id,
                result: kad::QueryResult::GetProviders(result),
                step,
                ..
            } => {
                let Some(&search) = self.lookups.get(&id) else {
                    return;
                };
                if let Ok(kad::GetProvidersOk::FoundProviders { key, providers }) = result {
                    self.search_named(search, &key, providers);
                }
                if step.last {
                    self.lookups.remove(&id);
                    if let Some(s) = self.searches.get_mut(&search) {
                        s.lookups_left = s.lookups_left.saturating_sub(1);
                    }
                    self.search_maybe_done(search);
                }
            }
            kad::Event::OutboundQueryProgressed {
                id,
                result: kad::QueryResult::StartProviding(result),
                step,
                ..
            } if step.last => {
                let indexing = self.announcing.remove(&id);
                // Asked for again while this one ran (a confirmed address, the offer set anew):
                // its turn now, and the offer's announcement is done when that one is.
                let mut next = None;
                if let Some(key) = self.announcements.ended(id) {
                    match self.start_announcement(&key) {
                        Ok(query) => next = Some(query),
                        Err(e) => tracing::warn!(error = ?e, "cannot provide an index key"),
                    }
                }
                match next {
                    Some(query) if indexing => {
                        self.announcing.insert(query);
                    }
                    Some(_) => {}
                    None if indexing => {
                        if result.is_err() {
                            self.announce_failed += 1;
                        }
                        self.announced_done();
                    }
                    None => {}
                }
            }
            kad::Event::OutboundQueryProgressed {
                result: kad::QueryResult::Bootstrap(Ok(_)),
                step,
                ..
            } if step.last && !self.reprovided => {
                self.reprovided = true;
                // Keys announced with a filled table went to the right servers: not sent twice
                // (on a network starting at once, most nodes' first bootstrap ends after their
                // offer's announcement: re-announcing then doubled the start's lookups, 18 a
                // node in the index test).
                if self.announced_early {
                    self.reprovide();
                }
            }
            kad::Event::InboundRequest {
                request:
                    kad::InboundRequest::AddProvider {
                        record: Some(record),
                    },
            } => self.provider_record(record),
            kad::Event::RoutingUpdated {
                peer,
                is_new_peer: true,
                addresses,
                ..
            } if !self.swarm.is_connected(&peer) && self.outbound_count() < DISCOVERY_TARGET => {
                // Kademlia found a peer: connect, so it joins the presence mesh too.
                let opts = DialOpts::peer_id(peer)
                    .addresses(addresses.iter().cloned().collect())
                    .build();
                let _ = self.swarm.dial(opts);
            }
            _ => {}
        }
    }

    /// A provider record a peer sent (Kademlia checked that the provider is the sender). Kept
    /// only under an index key's length, with a few of its addresses, in the slot
    /// [`key_slot`] gives it (a full key's newcomer replaces a held provider of the address
    /// group holding the most), and charged to the provider's share in the gate only when the
    /// store takes it: a record the store refuses costs the sender nothing held.
    fn provider_record(&mut self, mut record: kad::ProviderRecord) {
        let refused = |this: &mut Self, provider: PeerId, reason: ProviderRefusal| {
            tracing::debug!(%provider, ?reason, "provider record refused");
            this.emit(NetworkEvent::ProviderRecordRefused { provider, reason });
        };
        if record.key.as_ref().len() != KEY_LEN {
            return refused(self, record.provider, ProviderRefusal::MalformedKey);
        }
        record.addresses = record_addresses(std::mem::take(&mut record.addresses));
        let group = self.observed_group(&record.provider);
        let store = self.swarm.behaviour_mut().kad.store_mut();
        // The store keeps the first MAX_PROVIDERS_PER_KEY providers of a key and ignores a
        // newcomer past them without saying so: room is made here, expired ones first.
        let instant = std::time::Instant::now();
        let mut held = Vec::new();
        for p in store.providers(&record.key) {
            if p.is_expired(instant) {
                store.remove_provider(&record.key, &p.provider);
            } else if p.provider == self.local {
                // This node's own record (it provides the key too) never gives up its slot.
                held.push((p.provider, None));
            } else {
                let g = self.gate.group(&p.provider, record.key.as_ref());
                held.push((p.provider, Some(g.unwrap_or(AddressGroup::Unknown))));
            }
        }
        let slot = match key_slot(&held, &record.provider, group, &mut self.draw) {
            Ok(slot) => slot,
            Err(reason) => return refused(self, record.provider, reason),
        };
        let now = unix_ms();
        let expires = now.saturating_add(self.config.index_ttl.as_millis() as u64);
        let (provider, key) = (record.provider, record.key.clone());
        if let Err(reason) = self.gate.admit(provider, key.as_ref(), group, expires, now) {
            return refused(self, provider, reason);
        }
        let store = self.swarm.behaviour_mut().kad.store_mut();
        if let KeySlot::Replace(victim) = slot {
            // The key keeps its other holders (a replaced slot is one of several), so the
            // store's entry for it stays and the add below cannot fail for a new key.
            store.remove_provider(&key, &victim);
            self.gate.forget(&victim, key.as_ref());
            tracing::debug!(%provider, %victim, "provider record replaced a held one");
        }
        if let Err(e) = store.add_provider(record) {
            tracing::debug!(error = ?e, "provider record not stored");
            self.gate.forget(&provider, key.as_ref());
            refused(self, provider, ProviderRefusal::StoreFull);
        }
    }

    /// The address group `peer`'s connection comes from, as this node sees it (not what the
    /// peer says of itself): the lowest of its connections' if it has several.
    fn observed_group(&self, peer: &PeerId) -> AddressGroup {
        self.peers
            .get(peer)
            .and_then(|s| s.connections.values().map(AddressGroup::of).min())
            .unwrap_or(AddressGroup::Unknown)
    }

    fn peer_infos(&self) -> Vec<PeerInfo> {
        let mut out: Vec<PeerInfo> = self
            .peers
            .iter()
            .filter(|(_, s)| !s.connections.is_empty())
            .map(|(p, s)| {
                let mut addresses: Vec<String> =
                    s.connections.values().map(|a| a.to_string()).collect();
                addresses.sort();
                addresses.dedup();
                PeerInfo {
                    peer: p.to_base58(),
                    addresses,
                    listen_addrs: s.listen_addrs.iter().map(|a| a.to_string()).collect(),
                    agent_version: s.agent_version.clone(),
                }
            })
            .collect();
        out.sort_by(|a, b| a.peer.cmp(&b.peer));
        out
    }

    /// Ask a configured relay for a reservation (listen on its circuit), once per connection.
    fn listen_on_relay(&mut self, peer: PeerId) {
        if self.relay_listening.contains(&peer) {
            return;
        }
        let Some(relay) = self
            .config
            .relays
            .iter()
            .find(|r| peer_of_addr(r) == Some(peer))
            .cloned()
        else {
            return;
        };
        match self.swarm.listen_on(relay.with(Protocol::P2pCircuit)) {
            Ok(_) => {
                self.relay_listening.insert(peer);
            }
            Err(e) => tracing::warn!(%peer, error = %e, "cannot listen on the relay's circuit"),
        }
    }

    fn dial_bootstrap(&mut self, addr: &Multiaddr) {
        if let Some(peer) = peer_of_addr(addr) {
            if peer == self.local {
                return;
            }
            self.swarm
                .behaviour_mut()
                .kad
                .add_address(&peer, addr.clone());
        }
        if let Err(e) = self.swarm.dial(dial_opts(addr)) {
            tracing::warn!(%addr, error = %e, "cannot dial bootstrap peer");
        }
    }

    fn on_advert_tick(&mut self) {
        if let Err(e) = self.publish_advert() {
            tracing::warn!(error = %e, "cannot publish advert");
        }
        if self.outbound_count() == 0 {
            // No peer of this node's choosing left (alone, or only peers that connected in,
            // which may all be one party's): the bootstrap peers and relays may be back.
            for addr in self.config.bootstrap.clone() {
                self.dial_bootstrap(&addr);
            }
            for relay in self.config.relays.clone() {
                let _ = self.swarm.dial(dial_opts(&relay));
            }
        }
        let due = self
            .last_kad_bootstrap
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(300));
        if due && self.swarm.connected_peers().next().is_some() {
            self.last_kad_bootstrap = Some(Instant::now());
            let _ = self.swarm.behaviour_mut().kad.bootstrap();
        }
    }

    fn prune(&mut self) {
        let late: Vec<u64> = self
            .searches
            .iter()
            .filter(|(_, s)| {
                let now = Instant::now();
                now >= s.deadline || (!s.fetching && now >= s.choose_at)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            self.search_maybe_done(id);
        }
        let now = unix_ms();
        let gone = self.board().expire(now);
        for peer in gone {
            self.emit(NetworkEvent::LeftBoard { peer });
        }
        self.dial_mdns_found();
    }

    /// Dials the LAN peers mDNS found that are due and not connected (found just now, or their
    /// last dial failed, or the connection closed). The room is what the discovery target leaves
    /// once this node's outbound peers are counted, connected *and* pending: a dial that has not
    /// failed yet counts too, or failing dials never braked (review 27 F3). [`MdnsFound`] keeps
    /// its own dials under way to a small budget on top. Only the addresses mDNS named are
    /// dialed (not those other behaviours hold for the peer), and a dial already under way to
    /// the peer is not doubled (the swarm's default condition is "disconnected and not dialing").
    fn dial_mdns_found(&mut self) {
        let now = Instant::now();
        let pending = self
            .swarm
            .network_info()
            .connection_counters()
            .num_pending_outgoing() as usize;
        let room = DISCOVERY_TARGET.saturating_sub(self.outbound_count() + pending);
        let swarm = &self.swarm;
        let due = self
            .mdns_found
            .due(now, room, |peer| swarm.is_connected(peer));
        // Before the dials: the swarm hands them to the gate at once.
        self.sync_mdns_gate();
        for (peer, addrs) in due {
            let opts = DialOpts::peer_id(peer).addresses(addrs).build();
            let connection = opts.connection_id();
            match self.swarm.dial(opts) {
                Ok(()) => self.mdns_found.dialing(peer, connection, now),
                Err(e) => tracing::debug!(%peer, error = %e, "mDNS-found peer not dialed"),
            }
        }
    }

    /// mDNS found peers at addresses (a LAN host's answer: any host on the LAN can send one).
    /// A LAN address [`MdnsFound`] keeps is dialed (and admitted by the dial gate); any other is ignored:
    /// mDNS is a LAN mechanism, and a public or loopback address in an answer is not a LAN
    /// peer's but a host the answer wants this node to dial.
    fn on_mdns_discovered(&mut self, found: Vec<(PeerId, Multiaddr)>) {
        let now = Instant::now();
        for (peer, addr) in found {
            match self.mdns_found.discovered(peer, &addr, now) {
                Discovery::Kept => self.swarm.add_peer_address(peer, addr),
                Discovery::NotLan => {
                    tracing::debug!(%peer, "mDNS named an address outside the LAN: ignored");
                }
                Discovery::NotKept => tracing::debug!(%peer, "mDNS-found address not kept"),
            }
        }
        self.dial_mdns_found();
    }

    /// With mDNS on, the dial gate admits the LAN addresses mDNS found, not every LAN address
    /// some peer names (review 23b P5), and exactly those [`MdnsFound`] keeps: none it refused,
    /// and none it dropped (review 28 R28-4); only what changed travels (review 29 R29-10).
    fn sync_mdns_gate(&mut self) {
        let changes = self.mdns_found.take_changes();
        if !changes.is_empty() {
            self.dial_policy.update_discovered(changes);
        }
    }

    /// Sign and publish this node's advert, and put it on our own board (a node may call its
    /// own skills: they go through a box like any other).
    fn publish_advert(&mut self) -> Result<(), PeersError> {
        let now = unix_ms();
        self.advert_seq = now.max(self.advert_seq + 1);
        let bytes = sign_advert(&self.keypair, now, self.advert_seq, &self.offer)?;
        if let Err(e) = self.board().ingest(&bytes, Some(&self.local), now) {
            return Err(PeersError::Publish(format!("own advert refused: {e}")));
        }
        if self.topics.is_empty() {
            self.topics = offer_topics(&self.offer);
        }
        for topic in self.topics.clone() {
            match self
                .swarm
                .behaviour_mut()
                .gossipsub
                .publish(topic, bytes.clone())
            {
                Ok(_) => {}
                // Nobody subscribed yet: they get the advert when they subscribe.
                Err(gossipsub::PublishError::NoPeersSubscribedToTopic) => {}
                Err(gossipsub::PublishError::AllQueuesFull(n)) => {
                    tracing::warn!(peers = n, "advert not sent: all peer queues full");
                }
                Err(e) => return Err(PeersError::Publish(e.to_string())),
            }
        }
        Ok(())
    }

    fn schedule_publish(&mut self) {
        if self.publish_at.is_none() {
            self.publish_at = Some(Instant::now() + Duration::from_millis(50));
        }
    }

    fn try_send(&mut self, mut pending: PendingSend) {
        if pending.reply.is_closed() {
            // Its caller gave up (timed out, cancelled): nobody would hear how it ended.
            return;
        }
        if pending.to == self.local {
            // To ourselves: same checks, no socket.
            pending.attempt += 1;
            let ack = self.receive_payload(self.local, &pending.signed.padded());
            self.finish_send(pending, ack);
            return;
        }
        let in_flight = self.sending.entry(pending.to).or_default();
        if *in_flight >= SEND_WINDOW {
            let cap = self.config.send_queue_per_peer;
            let waiting = self.waiting.entry(pending.to).or_default();
            if waiting.len() >= cap {
                waiting.retain(|w| !w.reply.is_closed());
            }
            if waiting.len() >= cap {
                let _ = pending.reply.send(Err(PeersError::Unreachable {
                    peer: pending.to,
                    attempts: pending.attempt,
                    last_error: format!("send queue full ({cap} waiting)"),
                }));
                return;
            }
            waiting.push_back(pending);
            return;
        }
        *in_flight += 1;
        pending.attempt += 1;
        let addrs = self.known_addrs(&pending.to);
        let id = self.swarm.behaviour_mut().rr.send_request_with_addresses(
            &pending.to,
            WireRequest::Payload(pending.signed.padded()),
            addrs,
        );
        self.pending.insert(id, pending);
    }

    /// A payload request to `peer` ended (answered or failed): its slot goes to the next one
    /// waiting, in order.
    fn slot_freed(&mut self, peer: PeerId) {
        if let Some(n) = self.sending.get_mut(&peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.sending.remove(&peer);
            }
        }
        // The first whose caller still waits; those given up on are dropped unsent.
        let next = self.waiting.get_mut(&peer).and_then(|waiting| {
            std::iter::from_fn(|| waiting.pop_front()).find(|w| !w.reply.is_closed())
        });
        if self.waiting.get(&peer).is_some_and(VecDeque::is_empty) {
            self.waiting.remove(&peer);
        }
        if let Some(next) = next {
            self.try_send(next);
        }
    }

    fn known_addrs(&self, peer: &PeerId) -> Vec<Multiaddr> {
        let Some(state) = self.peers.get(peer) else {
            return Vec::new();
        };
        let mut addrs = state.listen_addrs.clone();
        addrs.extend(state.connections.values().cloned());
        addrs.dedup();
        addrs
    }

    fn finish_send(&mut self, pending: PendingSend, ack: Ack) {
        match ack {
            Ack::Delivered => {
                let _ = pending.reply.send(Ok(Delivery::Delivered));
            }
            Ack::Duplicate => {
                let _ = pending.reply.send(Ok(Delivery::Duplicate));
            }
            Ack::Refused { reason } => {
                let _ = pending.reply.send(Err(PeersError::Refused {
                    peer: pending.to,
                    reason: crate::payload::refusal_code(&reason).to_owned(),
                }));
            }
            Ack::RateLimited => self.retry_later(pending, "rate limited".into()),
            Ack::Busy => self.retry_later(pending, "receiver busy".into()),
        }
    }

    /// Back off exponentially (capped) and try again, or give up after the last attempt.
    fn retry_later(&mut self, pending: PendingSend, error: String) {
        if pending.attempt >= self.config.send_attempts || pending.reply.is_closed() {
            let _ = pending.reply.send(Err(PeersError::Unreachable {
                peer: pending.to,
                attempts: pending.attempt,
                last_error: error,
            }));
            return;
        }
        let factor = 1u32 << (pending.attempt - 1).min(5);
        let delay = (self.config.send_backoff * factor).min(Duration::from_secs(10));
        tracing::debug!(peer = %pending.to, attempt = pending.attempt, ?delay, %error, "payload send retry");
        let tx = self.retry_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(pending);
        });
    }

    fn receive_payload(&mut self, from: PeerId, signed: &SignedPayload) -> Ack {
        receive_into(
            &mut self.inbox,
            &self.payload_tx,
            &self.events,
            from,
            signed,
        )
    }

    fn on_advert(
        &mut self,
        propagation_source: PeerId,
        message_id: gossipsub::MessageId,
        message: gossipsub::Message,
    ) {
        let now = unix_ms();
        let result = match message.source {
            Some(source) => ingest_gossip(
                &mut self.board.lock().unwrap_or_else(|p| p.into_inner()),
                &mut self.advert_rate,
                &mut self.new_signers,
                &propagation_source,
                &source,
                &message.data,
                now,
            ),
            None => Err(crate::AdvertRefusal::Malformed(
                "unsigned gossip message".into(),
            )),
        };
        let acceptance = match &result {
            Ok(ingested) => {
                self.emit(NetworkEvent::AdvertAccepted {
                    peer: ingested.peer,
                    seq: ingested.seq,
                    new_peer: ingested.new_peer,
                });
                gossipsub::MessageAcceptance::Accept
            }
            // The same advert again (it went to several of our live topics): nothing to say.
            Err(crate::AdvertRefusal::Stale { seq, newest }) if seq == newest => {
                gossipsub::MessageAcceptance::Ignore
            }
            Err(reason) => {
                tracing::debug!(from = %propagation_source, %reason, "advert refused");
                self.emit(NetworkEvent::AdvertRefused {
                    from: propagation_source,
                    reason: reason.to_string(),
                });
                match reason {
                    // Late or duplicate delivery of a genuine advert: not the forwarder's fault.
                    // Too many from its signer, or no room here: a forwarder is not to blame.
                    // Ahead of our clock: the forwarder's clock took it (a rejection costs the
                    // forwarder score, `gossip_scoring`; a skewed clock is no attack).
                    crate::AdvertRefusal::Stale { .. }
                    | crate::AdvertRefusal::Expired { .. }
                    | crate::AdvertRefusal::FromTheFuture { .. }
                    | crate::AdvertRefusal::TooFrequent
                    | crate::AdvertRefusal::BoardFull => gossipsub::MessageAcceptance::Ignore,
                    // Another version, or a field, variant or provider kind this one does not
                    // know: what an honest node of a newer version forwards, valid to it;
                    // rejecting it got that node graylisted by every older one after 9,
                    // splitting the mesh by version during an upgrade. Ignored, but within a
                    // budget per forwarder: nothing else bounds them (no signer's advert rate
                    // applies to what is refused before it), so a peer making up formats
                    // forever cost a parse each and was never graylisted.
                    crate::AdvertRefusal::Version(_) | crate::AdvertRefusal::UnknownFormat(_) => {
                        if self.newer_formats.take(&propagation_source, now) {
                            gossipsub::MessageAcceptance::Ignore
                        } else {
                            gossipsub::MessageAcceptance::Reject
                        }
                    }
                    _ => gossipsub::MessageAcceptance::Reject,
                }
            }
        };
        self.swarm
            .behaviour_mut()
            .gossipsub
            .report_message_validation_result(&message_id, &propagation_source, acceptance);
    }

    fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(e)) => self.on_gossip(e),
            SwarmEvent::Behaviour(BehaviourEvent::Rr(e)) => self.on_rr(e),
            SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received {
                peer_id,
                info,
                ..
            })) => {
                let mut info = info;
                info.listen_addrs.truncate(MAX_LISTEN_ADDRS);
                let speaks_kad = info.protocols.iter().any(|p| p.as_ref() == KAD_PROTOCOL);
                // Only a DHT server's addresses that mean something to other peers enter the
                // routing table: public ones, or ones in the scope of our connection to it.
                let via = self
                    .peers
                    .get(&peer_id)
                    .and_then(|s| s.connections.values().next().cloned());
                for addr in &info.listen_addrs {
                    self.swarm.add_peer_address(peer_id, addr.clone());
                    if speaks_kad
                        && via
                            .as_ref()
                            .is_some_and(|via| reach::routable_for_dht(addr, via))
                    {
                        self.swarm
                            .behaviour_mut()
                            .kad
                            .add_address(&peer_id, addr.clone());
                    }
                }
                let state = self.peers.entry(peer_id).or_default();
                state.listen_addrs = info.listen_addrs;
                state.agent_version = Some(info.agent_version);
            }
            SwarmEvent::Behaviour(BehaviourEvent::Kad(e)) => self.on_kad(e),
            SwarmEvent::Behaviour(BehaviourEvent::Mdns(mdns::Event::Discovered(found))) => {
                self.on_mdns_discovered(found);
            }
            SwarmEvent::Behaviour(BehaviourEvent::Mdns(mdns::Event::Expired(gone))) => {
                for (peer, addr) in gone {
                    self.mdns_found.expired(&peer, &addr);
                }
                self.sync_mdns_gate();
            }
            SwarmEvent::Behaviour(BehaviourEvent::Autonat(autonat::v2::client::Event {
                tested_addr,
                server,
                result,
                ..
            })) => match result {
                // A success arrives as `ExternalAddrConfirmed` too.
                Ok(()) => tracing::debug!(%tested_addr, %server, "AutoNAT confirmed"),
                Err(e) => {
                    tracing::debug!(%tested_addr, %server, error = %e, "AutoNAT: not reachable");
                    self.emit(NetworkEvent::AddressUnreachable {
                        address: tested_addr,
                        server,
                    });
                }
            },
            SwarmEvent::Behaviour(BehaviourEvent::RelayClient(
                relay::client::Event::ReservationReqAccepted {
                    relay_peer_id,
                    renewal: false,
                    ..
                },
            )) => self.emit(NetworkEvent::RelayReservation {
                relay: relay_peer_id,
            }),
            SwarmEvent::Behaviour(BehaviourEvent::Dcutr(dcutr::Event {
                remote_peer_id,
                result,
            })) => {
                tracing::debug!(peer = %remote_peer_id, ok = result.is_ok(), "hole punch");
                self.emit(NetworkEvent::HolePunch {
                    peer: remote_peer_id,
                    direct: result.is_ok(),
                });
            }
            SwarmEvent::Behaviour(_) => {}
            SwarmEvent::ExternalAddrConfirmed { address } => {
                self.emit(NetworkEvent::AddressConfirmed { address });
                self.update_reachability();
                // Provider records carry the addresses confirmed when they are sent: announce
                // again so searchers can reach this node by the new one (a relay's circuit
                // usually arrives after the offer was first indexed).
                self.reprovide();
            }
            SwarmEvent::ExternalAddrExpired { .. } => self.update_reachability(),
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                endpoint,
                num_established,
                ..
            } => {
                let address = endpoint.get_remote_address().clone();
                self.mdns_found.connected(
                    &peer_id,
                    connection_id,
                    endpoint.is_dialer().then_some(&address),
                    Instant::now(),
                );
                if let ConnectedPoint::Dialer { address, .. } = &endpoint {
                    self.swarm.add_peer_address(peer_id, address.clone());
                }
                let state = self.peers.entry(peer_id).or_default();
                state.connections.insert(connection_id, address.clone());
                if endpoint.is_dialer() {
                    state.dialed.insert(connection_id);
                }
                if let Some((_, reply)) = self.dialing.remove(&connection_id) {
                    let _ = reply.send(Ok(peer_id));
                }
                self.listen_on_relay(peer_id);
                if self.last_kad_bootstrap.is_none() {
                    // The first peer: fill the routing table now, not at the next tick (the
                    // index keys are re-provided once that bootstrap completes).
                    self.last_kad_bootstrap = Some(Instant::now());
                    let _ = self.swarm.behaviour_mut().kad.bootstrap();
                }
                if num_established.get() == 1 {
                    self.emit(NetworkEvent::PeerConnected {
                        peer: peer_id,
                        address,
                    });
                    // Not over a relay: a board is megabytes, a circuit's byte limit is small.
                    // Only of a peer this node dialed (a bootstrap peer, one it chose): a
                    // stranger connecting in is not asked, so it cannot answer with its list.
                    if self.config.board_sync && endpoint.is_dialer() && !endpoint.is_relayed() {
                        let id = self
                            .swarm
                            .behaviour_mut()
                            .rr
                            .send_request(&peer_id, WireRequest::BoardSync);
                        self.syncing.insert(id);
                    }
                }
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                num_established,
                ..
            } => {
                if let Some(state) = self.peers.get_mut(&peer_id) {
                    state.connections.remove(&connection_id);
                    state.dialed.remove(&connection_id);
                }
                if num_established == 0 {
                    // The reservation went with the connection: ask again when reconnected.
                    self.relay_listening.remove(&peer_id);
                    self.peers.remove(&peer_id);
                    self.emit(NetworkEvent::PeerDisconnected { peer: peer_id });
                }
            }
            SwarmEvent::OutgoingConnectionError {
                connection_id,
                error,
                ..
            } => {
                // Which addresses failed, so that one a LAN host squats a peer's slots with
                // gives way to the peer's real one (review 29 R29-8).
                let failed: Vec<&Multiaddr> = match &error {
                    DialError::Transport(tried) => tried.iter().map(|(a, _)| a).collect(),
                    DialError::WrongPeerId { address, .. } | DialError::LocalPeerId { address } => {
                        vec![address]
                    }
                    _ => Vec::new(),
                };
                self.mdns_found.dial_failed(connection_id, failed);
                self.sync_mdns_gate();
                if let Some((addr, reply)) = self.dialing.remove(&connection_id) {
                    let _ = reply.send(Err(PeersError::Dial {
                        addr,
                        reason: error.to_string(),
                    }));
                }
            }
            SwarmEvent::NewListenAddr { address, .. } => {
                if !self.listen_addrs.contains(&address) {
                    self.listen_addrs.push(address.clone());
                }
                self.emit(NetworkEvent::Listening(address));
            }
            SwarmEvent::ExpiredListenAddr { address, .. } => {
                self.listen_addrs.retain(|a| a != &address);
            }
            _ => {}
        }
    }

    /// Peers connected by a connection this node dialed.
    fn outbound_count(&self) -> usize {
        self.peers.values().filter(|p| !p.dialed.is_empty()).count()
    }

    fn on_gossip(&mut self, event: gossipsub::Event) {
        match event {
            gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            } => self.on_advert(propagation_source, message_id, message),
            gossipsub::Event::Subscribed { topic, .. }
                if self.topics.iter().any(|t| t.hash() == topic) =>
            {
                // Gossipsub keeps no history: a new subscriber has seen nothing, so it gets our
                // advert now rather than at the next interval.
                self.schedule_publish();
            }
            _ => {}
        }
    }

    fn on_rr(&mut self, event: request_response::Event<WireRequest, WireResponse>) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    let response = match request {
                        WireRequest::Payload(signed) => {
                            WireResponse::Ack(self.receive_payload(peer, &signed))
                        }
                        WireRequest::Advert => WireResponse::Advert(
                            self.board()
                                .signed_advert(&self.local, unix_ms())
                                .and_then(|raw| String::from_utf8(raw.to_vec()).ok()),
                        ),
                        WireRequest::BoardSync => {
                            // A sync is megabytes at scale: full answers are budgeted.
                            let adverts = if !self.sync_answered.take(peer, Instant::now()) {
                                Vec::new()
                            } else {
                                self.board().signed_adverts(
                                    unix_ms(),
                                    SYNC_MAX_BYTES,
                                    SYNC_MAX_ADVERTS,
                                )
                            };
                            WireResponse::Adverts(SyncAdverts(
                                adverts
                                    .iter()
                                    .filter_map(|raw| String::from_utf8(raw.to_vec()).ok())
                                    .collect(),
                            ))
                        }
                    };
                    // The channel is gone only if the peer went away: nothing to do then.
                    let _ = self
                        .swarm
                        .behaviour_mut()
                        .rr
                        .send_response(channel, response);
                }
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(search) = self.fetches.remove(&request_id) {
                        let advert = match response {
                            WireResponse::Advert(advert) => advert,
                            _ => None,
                        };
                        self.search_fetched(search, peer, advert);
                    } else if self.syncing.remove(&request_id) {
                        if let WireResponse::Adverts(SyncAdverts(adverts)) = response {
                            self.on_sync(peer, adverts);
                        }
                    } else if let Some(pending) = self.pending.remove(&request_id) {
                        self.slot_freed(peer);
                        match response {
                            WireResponse::Ack(ack) => self.finish_send(pending, ack),
                            WireResponse::Adverts(_) | WireResponse::Advert(_) => {
                                let _ = pending.reply.send(Err(PeersError::Refused {
                                    peer,
                                    reason: "peer answered a payload with adverts".into(),
                                }));
                            }
                        }
                    }
                }
            },
            request_response::Event::OutboundFailure {
                peer,
                request_id,
                error,
                ..
            } => {
                if let Some(search) = self.fetches.remove(&request_id) {
                    tracing::debug!(%peer, %error, "advert fetch failed");
                    self.search_fetched(search, peer, None);
                } else if self.syncing.remove(&request_id) {
                    tracing::debug!(%peer, %error, "board sync failed");
                } else if let Some(pending) = self.pending.remove(&request_id) {
                    self.slot_freed(peer);
                    if matches!(
                        error,
                        request_response::OutboundFailure::UnsupportedProtocols
                    ) {
                        let _ = pending.reply.send(Err(PeersError::Refused {
                            peer,
                            reason: "the peer does not speak skillbox payloads".into(),
                        }));
                    } else {
                        self.retry_later(pending, error.to_string());
                    }
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, %error, "inbound request failed");
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }

    fn on_sync(&mut self, from: PeerId, adverts: Vec<String>) {
        let now = unix_ms();
        let accepted = ingest_sync(
            &mut self.board.lock().unwrap_or_else(|p| p.into_inner()),
            &mut self.advert_rate,
            &adverts,
            now,
        );
        tracing::debug!(%from, received = adverts.len(), accepted = accepted.len(), "board sync");
        for i in accepted {
            self.emit(NetworkEvent::AdvertAccepted {
                peer: i.peer,
                seq: i.seq,
                new_peer: i.new_peer,
            });
        }
    }
}

/// Take a board sync's adverts (at most [`SYNC_MAX_ADVERTS`], the codec saw to that). The
/// relaying peer is not the signer: the signature alone vouches, and a relayed advert never
/// evicts one (a flood of fresh identities cannot push the honest entries out). Each signer is
/// held to the advert rate gossip has (`rate`, shared with it), and an advert not newer than the
/// one held is refused before its signature is checked: 25,000 copies of one valid advert cost
/// one signature check, not 25,000 on the network task.
/// Check one payload `from` sent and hand it on: [`Task::receive_payload`]'s work, apart from
/// the task so that what it logs can be read back in a test.
fn receive_into(
    inbox: &mut Inbox,
    payload_tx: &mpsc::Sender<IncomingPayload>,
    events: &broadcast::Sender<NetworkEvent>,
    from: PeerId,
    signed: &SignedPayload,
) -> Ack {
    if payload_tx.capacity() == 0 {
        return Ack::Busy;
    }
    let received = inbox.receive(&from, signed, unix_ms());
    let ack = received.ack();
    match received {
        Received::New(incoming) => {
            // Capacity was checked above and only this task sends: this cannot be full.
            if payload_tx.try_send(*incoming).is_err() {
                return Ack::Busy;
            }
        }
        Received::Refused(reason) => {
            // The refusal's details quote the envelope (its sender, checked before the
            // signature, its recipient, the parser's message): peer-chosen text of any bytes,
            // up to a payload's size. At info, where the operator's terminal reads, only the
            // closed code; the details at debug, escaped by Debug and cut short.
            tracing::info!(%from, code = reason.code(), "payload refused");
            tracing::debug!(%from, reason = %LogCut(&format!("{reason:?}")), "payload refused");
            let _ = events.send(NetworkEvent::PayloadRefused {
                from,
                reason: reason.to_string(),
            });
        }
        Received::Duplicate | Received::RateLimited => {}
    }
    ack
}

/// Peer-derived text already escaped (by Debug), cut to [`LOG_DETAIL_MAX`] characters: a
/// peer's 1 MiB of text is not a 1 MiB log line.
struct LogCut<'a>(&'a str);

/// The most characters of a peer-derived detail a log line carries.
const LOG_DETAIL_MAX: usize = 256;

impl std::fmt::Display for LogCut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.char_indices().nth(LOG_DETAIL_MAX) {
            Some((at, _)) => write!(f, "{}...", &self.0[..at]),
            None => f.write_str(self.0),
        }
    }
}

fn ingest_sync(
    board: &mut Board,
    rate: &mut Buckets,
    adverts: &[String],
    now: u64,
) -> Vec<crate::board::Ingested> {
    let mut new_signers = 0usize;
    adverts
        .iter()
        .take(SYNC_MAX_ADVERTS)
        .filter_map(|raw| {
            board
                .ingest_unasked(raw.as_bytes(), None, now, |signer, new| {
                    if new && new_signers >= SYNC_NEW_SIGNERS_MAX {
                        return false;
                    }
                    let taken = rate.take(signer, now);
                    new_signers += usize::from(taken && new);
                    taken
                })
                .ok()
        })
        .collect()
}

/// Take an advert gossip delivered: `source` signed the gossip message, `forwarder` handed it
/// to this node. A signer new to the board costs the forwarder one of its
/// [`NEW_SIGNERS_BURST`] first (past it the advert is refused `TooFrequent`: ignored, not
/// forwarded), then the signer one of its advert rate.
fn ingest_gossip(
    board: &mut Board,
    advert_rate: &mut Buckets,
    new_signers: &mut Buckets,
    forwarder: &PeerId,
    source: &PeerId,
    data: &[u8],
    now: u64,
) -> Result<crate::board::Ingested, crate::AdvertRefusal> {
    board.ingest_unasked(data, Some(source), now, |signer, new| {
        (!new || new_signers.take(forwarder, now)) && advert_rate.take(signer, now)
    })
}

/// The live topics an offer's advert goes to: its skills' categories (an offer without
/// skills, e.g. a caller's with only its accepted boxes, goes to `general`).
fn offer_topics(offer: &Offer) -> Vec<gossipsub::IdentTopic> {
    let mut categories: Vec<&'static str> = offer
        .skills
        .iter()
        .map(|s| skillbox_calls::vocabulary::skill_vocabulary(&s.name, &s.description).category)
        .collect();
    if categories.is_empty() {
        categories.push(skillbox_calls::vocabulary::GENERAL);
    }
    categories.sort_unstable();
    categories.dedup();
    categories.into_iter().map(presence_topic).collect()
}

/// The peer an address leads to: its last `/p2p/<id>` (a relayed address names the relay
/// first, `<relay>/p2p/<relay id>/p2p-circuit/p2p/<peer id>`).
fn peer_of_addr(addr: &Multiaddr) -> Option<PeerId> {
    addr.iter()
        .filter_map(|p| match p {
            Protocol::P2p(peer) => Some(peer),
            _ => None,
        })
        .last()
}

fn dial_opts(addr: &Multiaddr) -> DialOpts {
    match peer_of_addr(addr) {
        Some(peer) => DialOpts::peer_id(peer)
            .addresses(vec![addr.clone()])
            .build(),
        // A bootstrap address may omit /p2p/<id>: noise tells us who answered.
        None => DialOpts::unknown_peer_id().address(addr.clone()).build(),
    }
}

impl PeersHandle {
    /// This node's id.
    pub fn local_peer_id(&self) -> PeerId {
        self.local
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, PeersError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .await
            .map_err(|_| PeersError::Stopped)?;
        rx.await.map_err(|_| PeersError::Stopped)
    }

    /// The addresses this node listens on (with the actual ports).
    pub async fn listen_addrs(&self) -> Result<Vec<Multiaddr>, PeersError> {
        self.ask(Command::ListenAddrs).await
    }

    /// Connect to a peer (`skillbox peer add`); `/p2p/<id>` optional. Returns its id once
    /// connected.
    pub async fn dial(&self, addr: Multiaddr) -> Result<PeerId, PeersError> {
        self.ask(|tx| Command::Dial(addr, tx)).await?
    }

    /// Connected peers with their addresses (`GET /peers`).
    pub async fn peers(&self) -> Result<Vec<PeerInfo>, PeersError> {
        self.ask(Command::Peers).await
    }

    /// Set what this node offers. A changed set is advertised at once.
    pub async fn set_offer(&self, offer: Offer) -> Result<(), PeersError> {
        let offer = offer.normalized()?;
        self.ask(|tx| Command::SetOffer(offer, tx)).await?
    }

    /// The board right now, one row per offered skill (`GET /board`).
    pub fn board(&self) -> Vec<BoardRow> {
        self.lock_board().snapshot(unix_ms())
    }

    /// The same rows as JSON, rendered from cached row text (the fast path for `GET /board`).
    pub fn board_json(&self) -> String {
        self.lock_board().snapshot_json(unix_ms())
    }

    /// Read the board under its lock (e.g. the calls layer checking a skill is offered now).
    pub fn with_board<T>(&self, f: impl FnOnce(&Board, u64) -> T) -> T {
        f(&self.lock_board(), unix_ms())
    }

    fn lock_board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Network events (best effort; see [`NetworkEvent`]).
    pub fn subscribe(&self) -> broadcast::Receiver<NetworkEvent> {
        self.events.subscribe()
    }

    /// Sign a payload for `to` with the node key, as [`PeersHandle::send`] does.
    pub fn sign(&self, to: &PeerId, payload: &Payload) -> Result<SignedPayload, PeersError> {
        SeqClock::sign_next(&self.seq, &self.keypair, to, payload)
    }

    /// Deliver a signed payload as it is, with retry and back-off. Sending the same signed
    /// payload twice is a replay: the second answer is [`Delivery::Duplicate`].
    pub async fn send_signed(
        &self,
        to: PeerId,
        signed: SignedPayload,
    ) -> Result<Delivery, PeersError> {
        let size = signed.size();
        if size > self.max_payload_bytes {
            return Err(PeersError::PayloadTooLarge {
                size,
                max: self.max_payload_bytes,
            });
        }
        self.ask(|reply| Command::Send { to, signed, reply })
            .await?
    }

    /// Sign and deliver a payload to `to` with retry and back-off.
    pub async fn send(&self, to: PeerId, payload: Payload) -> Result<(), PeersError> {
        let signed = self.sign(&to, &payload)?;
        self.send_signed(to, signed).await.map(|_| ())
    }

    /// Publish bytes on the presence topic as they are. Exists so tests can show that peers
    /// refuse forged or replayed adverts on the wire; a node never needs it.
    #[doc(hidden)]
    pub async fn publish_raw_advert(&self, bytes: Vec<u8>) -> Result<(), PeersError> {
        self.ask(|tx| Command::PublishRaw(bytes, tx)).await?
    }

    /// The signed advert bytes the board holds for `peer` (e.g. to relay or inspect it).
    pub fn signed_advert(&self, peer: &PeerId) -> Option<Vec<u8>> {
        self.lock_board()
            .signed_advert(peer, unix_ms())
            .map(|raw| raw.to_vec())
    }

    /// Search the skill index for `text` as [`PeersConfig::search_scope`] allows: look up its
    /// keys in parallel (under `terms` a few of its rarest words' first, its category's if
    /// they named nobody; under `category` its category's alone; under `board` none, and the
    /// outcome is empty), fetch each named provider's signed advert point to point, verify it
    /// with the board's checks and keep it on the board (the board is a cache of verified
    /// adverts). The outcome names the providers now on the board; rank them with the intent's
    /// scoring.
    pub async fn search(&self, text: &str) -> Result<SearchOutcome, PeersError> {
        if self.search_scope == SearchScope::Board {
            return Ok(SearchOutcome::default());
        }
        self.ask(|tx| Command::Search(text.to_owned(), tx)).await
    }

    /// What this node's searches may tell DHT peers of a request (`index.search`).
    pub fn search_scope(&self) -> SearchScope {
        self.search_scope
    }

    /// Provide arbitrary index keys. Exists so tests can show that DHT servers rate-limit a
    /// node flooding provider records; a node never needs it.
    #[doc(hidden)]
    pub async fn provide_raw_keys(&self, keys: Vec<Vec<u8>>) -> Result<(), PeersError> {
        self.ask(|tx| Command::ProvideRaw(keys, tx)).await
    }

    /// Whether this node is a DHT server now, and its confirmed addresses.
    pub async fn reachability(&self) -> Result<Reachability, PeersError> {
        self.ask(Command::Reachability).await
    }

    /// The payloads held to send and their bytes (tests measure a stuck peer's cost with it).
    #[doc(hidden)]
    pub async fn sends_held(&self) -> Result<SendsHeld, PeersError> {
        self.ask(Command::SendsHeld).await
    }

    /// Handle `found` as an mDNS discovery from the LAN. Exists so tests can show what one
    /// hostile mDNS answer costs a node without a multicast responder; a node never needs it.
    #[doc(hidden)]
    pub async fn mdns_discovered(&self, found: Vec<(PeerId, Multiaddr)>) -> Result<(), PeersError> {
        self.ask(|tx| Command::MdnsDiscovered(found, tx)).await
    }

    /// Stop the network: connections close, `send` and the other calls answer `Stopped`.
    pub async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Shutdown(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

impl PayloadTransport for PeersHandle {
    fn local_peer_id(&self) -> PeerId {
        self.local
    }

    fn send(&self, to: PeerId, payload: Payload) -> BoxFuture<'_, Result<(), PeersError>> {
        Box::pin(PeersHandle::send(self, to, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A subscriber that writes each event as the fmt layer does (`name=value` through the
    /// value's Debug, which for a `%` field is its Display), into a buffer.
    struct Captured(Arc<Mutex<String>>);

    struct Line<'a>(&'a mut String);

    impl tracing::field::Visit for Line<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            use std::fmt::Write as _;
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    impl tracing::Subscriber for Captured {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut line = format!("{}", event.metadata().level());
            event.record(&mut Line(&mut line));
            let mut out = self.0.lock().unwrap_or_else(|p| p.into_inner());
            out.push_str(&line);
            out.push('\n');
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// P3: a connected peer's envelope names a `sender` of terminal control sequences and a
    /// line break. Refused `sender_mismatch` before its signature is checked, its text was
    /// logged at info as is: raw ESC into the operator's terminal and a forged line of the
    /// node's own. Now only the closed code is logged at info, the details escaped at debug.
    #[test]
    fn a_refused_payload_writes_no_peer_text_raw_into_the_log() {
        let a = crate::keypair_from_seed(&[91; 32]).expect("key");
        let pa = a.public().to_peer_id();
        let me = crate::keypair_from_seed(&[92; 32])
            .expect("key")
            .public()
            .to_peer_id();
        let payload = Payload {
            kind: crate::PayloadKind::CallFailed,
            call_id: "c-1".into(),
            body: serde_json::json!({}),
        };
        let mut signed = SignedPayload::sign(&a, &me, &payload, 1, unix_ms()).expect("signs");
        // The sender swapped for the hostile text, in canonical JSON, and the pad grown by the
        // bytes it is shorter: the envelope stays well-formed and padded to its bucket.
        let honest = format!("\"sender\":\"{pa}\"");
        let hostile = "\"sender\":\"B\\u001b[2K\\nFAKE\"";
        assert!(signed.envelope.contains(&honest));
        let grown = "0".repeat(honest.len() - hostile.len());
        signed.envelope = signed.envelope.replacen(&honest, hostile, 1).replacen(
            "\"pad\":\"",
            &format!("\"pad\":\"{grown}"),
            1,
        );
        let mut inbox = Inbox::new(me, InboxConfig::default());
        let (payload_tx, _payload_rx) = mpsc::channel(4);
        let (events, _) = broadcast::channel(4);
        let log = Arc::new(Mutex::new(String::new()));
        let ack = tracing::subscriber::with_default(Captured(log.clone()), || {
            receive_into(&mut inbox, &payload_tx, &events, pa, &signed)
        });
        assert_eq!(
            ack,
            Ack::Refused {
                reason: "sender_mismatch".into()
            }
        );
        let log = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert!(!log.contains('\u{1b}'), "raw ESC in the log: {log:?}");
        assert!(
            !log.lines().any(|l| l.starts_with("FAKE")),
            "a line of the peer's: {log:?}"
        );
        assert!(log.contains("sender_mismatch"), "no code: {log:?}");
    }

    /// A peer that reconnects asks again at once, and fresh peer ids ask one each: before, a
    /// reconnection started a peer's interval over and any number of ids got full answers (a
    /// request of a few bytes, an answer of up to 8 MiB built on the network task each).
    #[test]
    fn board_sync_answers_are_budgeted_per_peer_and_in_all() {
        let mut answers = SyncAnswers::default();
        let t0 = Instant::now();
        let one = PeerId::random();
        assert!(answers.take(one, t0));
        // The same peer, reconnected: nothing new within the interval.
        assert!(!answers.take(one, t0 + Duration::from_secs(1)));
        // Fresh ids: the interval's budget, then empty answers.
        let given = (0..100)
            .filter(|_| answers.take(PeerId::random(), t0 + Duration::from_secs(2)))
            .count();
        assert_eq!(given as u32, SYNC_ANSWERS_PER_INTERVAL - 1);
        // The next interval: the peer and new ones are answered again; old entries are gone.
        let later = t0 + SYNC_MIN_INTERVAL + Duration::from_secs(3);
        assert!(answers.take(one, later));
        assert!(answers.take(PeerId::random(), later));
        assert_eq!(answers.last.len(), 2);
    }

    /// A node speaking `/skillbox/payload/1` that takes every request and never answers it.
    fn silent_peer() -> Swarm<request_response::Behaviour<WireCodec>> {
        libp2p::SwarmBuilder::with_new_identity()
            .with_tokio()
            .with_tcp(
                tcp::Config::default(),
                noise::Config::new,
                yamux::Config::default,
            )
            .expect("tcp")
            .with_behaviour(|_| {
                request_response::Behaviour::with_codec(
                    WireCodec::new(1 << 20, DEFAULT_MAX_ADVERT_BYTES),
                    [(StreamProtocol::new(PAYLOAD_PROTOCOL), ProtocolSupport::Full)],
                    request_response::Config::default()
                        .with_request_timeout(Duration::from_secs(60)),
                )
            })
            .expect("behaviour")
            .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
            .build()
    }

    /// A node started with `config` (key seed `seed`) and a connected peer that takes payload
    /// requests, counts them and never answers: the node, the peer's id, the count, its task.
    async fn with_a_silent_peer(
        config: PeersConfig,
        seed: u8,
    ) -> (
        PeersHandle,
        PeerId,
        Arc<AtomicUsize>,
        tokio::task::JoinHandle<()>,
    ) {
        let key = crate::keypair_from_seed(&[seed; 32]).expect("key");
        let (a, payloads) = start(config, key).await.expect("starts");
        let mut silent = silent_peer();
        let sp = *silent.local_peer_id();
        let target = a.listen_addrs().await.expect("addrs")[0].clone();
        silent.dial(target).expect("dial");
        let received = Arc::new(AtomicUsize::new(0));
        let runner = {
            let received = received.clone();
            tokio::spawn(async move {
                // The node's payload receiver lives as long as the peer.
                let _payloads = payloads;
                let mut held = Vec::new();
                loop {
                    if let SwarmEvent::Behaviour(request_response::Event::Message {
                        message: request_response::Message::Request { channel, .. },
                        ..
                    }) = silent.select_next_some().await
                    {
                        received.fetch_add(1, Ordering::SeqCst);
                        held.push(channel);
                    }
                }
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !a
            .peers()
            .await
            .expect("peers")
            .iter()
            .any(|p| p.peer == sp.to_base58())
        {
            assert!(Instant::now() < deadline, "the silent peer never connected");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (a, sp, received, runner)
    }

    /// A send of the smallest call message (`call.failed`, empty body, call id `c-{i}`) to `to`.
    fn minimal_send(
        a: &PeersHandle,
        to: PeerId,
        i: usize,
    ) -> tokio::task::JoinHandle<Result<(), PeersError>> {
        let a = a.clone();
        tokio::spawn(async move {
            let payload = crate::Payload {
                kind: crate::PayloadKind::CallFailed,
                call_id: format!("c-{i}"),
                body: serde_json::json!({}),
            };
            a.send(to, payload).await
        })
    }

    /// A peer that takes its window of payload requests and never answers: past the window, at
    /// most `send_queue_per_peer` sends wait (the rest are answered at once), and a send whose
    /// caller gave up is never sent when a slot frees. Before, every send waited, without bound,
    /// and each went out in turn, callers gone or not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_that_never_answers_holds_a_bounded_queue_and_no_abandoned_send() {
        let config = PeersConfig {
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")],
            request_timeout: Duration::from_secs(3),
            dial_private_addresses: true,
            send_attempts: 1,
            send_queue_per_peer: 256,
            ..PeersConfig::default()
        };
        let (a, sp, received, runner) = with_a_silent_peer(config, 81).await;
        let total = 400;
        let sends: Vec<_> = (0..total).map(|i| minimal_send(&a, sp, i)).collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let answered = sends.iter().filter(|h| h.is_finished()).count();
        assert_eq!(received.load(Ordering::SeqCst), SEND_WINDOW);
        assert_eq!(
            answered,
            total - SEND_WINDOW - 256,
            "sends answered at once past the queue"
        );
        // Every caller gives up; when the window's requests time out, nothing more is sent.
        for h in &sends {
            h.abort();
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(
            received.load(Ordering::SeqCst),
            SEND_WINDOW,
            "sends their callers gave up on went out"
        );
        runner.abort();
        a.shutdown().await;
    }

    /// F5: every payload is padded to at least 16 KiB, so the 4,096 sends a peer that never
    /// answers makes this node keep (its window's 32 in flight and a full queue) held
    /// 4,128 x 16 KiB = 66 MiB for messages of ~600 bytes. Held without their zeros they stay
    /// under 1 KiB each, 4 MiB for the lot; a send past the queue is answered at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_that_never_answers_holds_its_queue_without_the_padding() {
        const CAP: usize = 4 * 1024 * 1024;
        let config = PeersConfig {
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")],
            request_timeout: Duration::from_secs(60),
            dial_private_addresses: true,
            send_attempts: 1,
            ..PeersConfig::default()
        };
        let queue = config.send_queue_per_peer;
        let (a, sp, received, runner) = with_a_silent_peer(config, 83).await;
        let send = |i: usize| minimal_send(&a, sp, i);
        let sends: Vec<_> = (0..SEND_WINDOW + queue).map(send).collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        let held = loop {
            let held = a.sends_held().await.expect("held");
            if held.payloads == SEND_WINDOW + queue {
                break held;
            }
            assert!(Instant::now() < deadline, "sends never all held: {held:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(received.load(Ordering::SeqCst), SEND_WINDOW);
        assert!(
            held.bytes < CAP,
            "{} payloads held {} bytes (cap {CAP})",
            held.payloads,
            held.bytes
        );
        let past = send(usize::MAX).await.expect("joins");
        assert!(
            matches!(&past, Err(PeersError::Unreachable { last_error, .. }) if last_error.starts_with("send queue full")),
            "{past:?}"
        );
        for h in &sends {
            h.abort();
        }
        runner.abort();
        a.shutdown().await;
    }

    /// The `i`th of many fresh signers and its advert number `seq`, signed at `now`.
    fn fresh_advert(i: u32, seq: u64, now: u64) -> (PeerId, Vec<u8>) {
        let mut seed = [7u8; 32];
        seed[..4].copy_from_slice(&i.to_be_bytes());
        let key = crate::keypair_from_seed(&seed).expect("key");
        let advert = sign_advert(&key, now, seq, &Offer::default()).expect("signs");
        (key.public().to_peer_id(), advert)
    }

    /// P1 (a): one connected peer forwards adverts of 200 fresh signers (free identities, each
    /// within its own advert rate) to a board of 200. Charged per signer only, it filled the
    /// board and the next honest newcomer, from another forwarder, was refused `BoardFull` (and
    /// so forwarded by nobody). Now the forwarder pays for each new signer: past its budget
    /// they are refused, and the newcomer is taken.
    #[test]
    fn one_forwarders_fresh_signers_leave_room_for_an_honest_newcomer() {
        let config = PeersConfig::default();
        let mut board = Board::new(BoardConfig {
            max_entries: 200,
            ..config.board_config()
        });
        let mut rate = Buckets::new(config.advert_rate_per_sec, f64::from(config.advert_burst));
        let mut new_signers = Buckets::new(NEW_SIGNERS_PER_SEC, NEW_SIGNERS_BURST);
        let now = unix_ms();
        let flooder = PeerId::random();
        let mut taken = 0;
        for i in 0..200 {
            let (signer, advert) = fresh_advert(i, 1, now);
            let got = ingest_gossip(
                &mut board,
                &mut rate,
                &mut new_signers,
                &flooder,
                &signer,
                &advert,
                now,
            );
            match got {
                Ok(_) => taken += 1,
                Err(crate::AdvertRefusal::TooFrequent) => {}
                Err(other) => panic!("flood advert {i}: {other}"),
            }
        }
        assert_eq!(taken, NEW_SIGNERS_BURST as usize, "the flood's share");
        // A signer already held re-signs through the same forwarder: no charge for it.
        let (held, again) = fresh_advert(0, 2, now);
        ingest_gossip(
            &mut board,
            &mut rate,
            &mut new_signers,
            &flooder,
            &held,
            &again,
            now,
        )
        .expect("a held signer's newer advert");
        let (honest, advert) = fresh_advert(1_000_000, 1, now);
        let got = ingest_gossip(
            &mut board,
            &mut rate,
            &mut new_signers,
            &PeerId::random(),
            &honest,
            &advert,
            now,
        );
        assert!(got.is_ok(), "the honest newcomer: {got:?}");
    }

    /// P1 (a), board sync: an answer of 2,000 fresh signers brings at most half an answer.
    #[test]
    fn a_board_sync_brings_at_most_its_share_of_new_signers() {
        let config = PeersConfig::default();
        let mut board = Board::new(config.board_config());
        let mut rate = Buckets::new(config.advert_rate_per_sec, f64::from(config.advert_burst));
        let now = unix_ms();
        let answer: Vec<String> = (0..SYNC_MAX_ADVERTS as u32)
            .map(|i| String::from_utf8(fresh_advert(i, 1, now).1).expect("json"))
            .collect();
        let taken = ingest_sync(&mut board, &mut rate, &answer, now);
        assert_eq!(taken.len(), SYNC_NEW_SIGNERS_MAX);
    }

    /// A board sync answer is one signer's adverts at rising sequence numbers (each newer than
    /// the last, so each would be taken and its signature checked): the signer's advert rate
    /// holds, as on gossip; the sync used to take them all.
    #[test]
    fn a_board_sync_holds_each_signer_to_the_advert_rate() {
        let config = PeersConfig::default();
        let mut board = Board::new(config.board_config());
        let mut rate = Buckets::new(config.advert_rate_per_sec, f64::from(config.advert_burst));
        let key = crate::keypair_from_seed(&[71; 32]).expect("key");
        let now = unix_ms();
        let adverts: Vec<String> = (1..=200u64)
            .map(|seq| {
                let raw = sign_advert(&key, now, seq, &Offer::default()).expect("signs");
                String::from_utf8(raw).expect("json")
            })
            .collect();
        let taken = ingest_sync(&mut board, &mut rate, &adverts, now);
        assert_eq!(
            taken.len(),
            config.advert_burst as usize,
            "took {} of 200",
            taken.len()
        );
        // Another signer in the same answer is untouched by the first one's rate.
        let other = crate::keypair_from_seed(&[72; 32]).expect("key");
        let raw = sign_advert(&other, now, 1, &Offer::default()).expect("signs");
        let taken = ingest_sync(
            &mut board,
            &mut rate,
            &[String::from_utf8(raw).expect("json")],
            now,
        );
        assert_eq!(taken.len(), 1);
    }
}
