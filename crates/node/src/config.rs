//! `config.toml`: every setting of a node, written out in full (with comments) by `skillbox init`
//! so a human can see and change each default. Parsing is strict: an unknown key is an error that
//! names it, because a misspelt setting silently falling back to its default is worse.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{NodeError, Result};

/// Default API listen address: loopback only; the port is the node's well-known one.
pub const DEFAULT_API_ADDR: &str = "127.0.0.1:7420";
/// Default libp2p listen address: every interface, an OS-chosen port.
pub const DEFAULT_P2P_LISTEN: &str = "/ip4/0.0.0.0/tcp/0";
/// QUIC beside TCP: the same, over UDP.
pub const DEFAULT_P2P_LISTEN_QUIC: &str = "/ip4/0.0.0.0/udp/0/quic-v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub api: ApiConfig,
    pub p2p: P2pConfig,
    pub boxes: BoxesConfig,
    pub schedules: Schedules,
    pub agents: AgentsConfig,
    pub limits: Limits,
    #[serde(default)]
    pub calls: CallsConfig,
    #[serde(default)]
    pub ceilings: CeilingsConfig,
    #[serde(default)]
    pub guard: GuardConfig,
    #[serde(default)]
    pub policy: PolicyConfig,
    #[serde(default)]
    pub tenants: TenantsConfig,
    #[serde(default)]
    pub index: IndexConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Where the HTTP API listens. Loopback unless the human says otherwise.
    pub listen: SocketAddr,
    /// DNS names the API is reached by besides its bound address (and `localhost` on
    /// loopback): any other `Host` is refused (DNS rebinding), any other `Origin` too.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Serve the API beyond loopback in plain HTTP. Off, the default: a non-loopback `listen`
    /// (or `--api`) is refused at start, since the operator token, the dashboard's session and
    /// every answer would cross the network in clear. On: the operator says the network is
    /// trusted, or a TLS-terminating proxy in front of it is.
    #[serde(default)]
    pub plain_http_beyond_loopback: bool,
    /// Take the operator's token (`api.token`) over the TCP port too. Off, the default: it is
    /// taken only over `<data dir>/api.sock` (the CLI, `skillbox mcp`), since any local user
    /// may hold the port while the node is down and collect what a client sends there; over TCP
    /// every route answers it 403. On: for a node managed from another host (with
    /// `plain_http_beyond_loopback` behind a TLS proxy) or a test harness.
    #[serde(default)]
    pub operator_token_over_tcp: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct P2pConfig {
    /// libp2p listen multiaddrs.
    pub listen: Vec<String>,
    /// Peers dialled at start; `/p2p/<peer id>` may be omitted.
    pub bootstrap: Vec<String>,
    /// Local-network discovery by multicast; off by default (and in tests). On, LAN addresses
    /// peers give are dialed (mDNS finds only LAN peers); loopback ones still not.
    pub mdns: bool,
    /// Dial the LAN and loopback addresses peers give (identify, the DHT, AutoNAT dial-backs,
    /// hole punching). Off, the default: only globally routable ones, so a hostile peer cannot
    /// make this node connect to services on its machine or LAN; bootstrap peers, relays and
    /// `skillbox peer add` are dialed whatever they are. For a LAN or test deployment.
    #[serde(default)]
    pub dial_private_addresses: bool,
    /// Kademlia server mode forced on. Off (the default), the node becomes a DHT server once
    /// AutoNAT v2 confirmed a direct address of it (or one is declared in external_addresses).
    #[serde(default)]
    pub kad_server: bool,
    /// Addresses reachable from outside, declared: confirmed without AutoNAT.
    #[serde(default)]
    pub external_addresses: Vec<String>,
    /// Relay nodes to hold a reservation on (`.../p2p/<relay peer id>`): reachable through them
    /// behind any NAT; DCUtR then tries a direct connection, the relay carries the call if not.
    #[serde(default)]
    pub relays: Vec<String>,
    /// Serve as a Circuit Relay v2 server while this node has a confirmed direct address.
    #[serde(default)]
    pub relay_server: bool,
    /// Answer other nodes' AutoNAT v2 probes (dial back the address they ask about).
    #[serde(default = "default_true")]
    pub autonat_server: bool,
    /// A connection no protocol uses is closed after this many seconds.
    #[serde(default = "default_idle_timeout_secs")]
    pub idle_timeout_secs: u64,
    /// Call payloads accepted from one peer: sustained per second, and burst.
    #[serde(default = "default_payload_rate")]
    pub payload_rate_per_sec: f64,
    #[serde(default = "default_payload_burst")]
    pub payload_burst: u32,
    /// Connections established in total and per peer, and pending in each direction; past
    /// these a new connection is denied (a peer cannot exhaust this node's sockets).
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    #[serde(default = "default_max_connections_per_peer")]
    pub max_connections_per_peer: u32,
    #[serde(default = "default_max_pending")]
    pub max_pending_incoming: u32,
    #[serde(default = "default_max_pending")]
    pub max_pending_outgoing: u32,
    /// Peers the board holds at most; a newcomer beyond this evicts the oldest advert.
    #[serde(default = "default_board_max_entries")]
    pub board_max_entries: usize,
    /// MiB the board's entries hold at most (adverts as received, parsed and rendered), under
    /// the same rules as `board_max_entries`: the count alone let adverts of 128 KiB, signed by
    /// keys that cost nothing, hold tens of GB.
    #[serde(default = "default_board_max_mib")]
    pub board_max_mib: u64,
    /// Of `max_connections`, those other peers may open at most: the rest stay for this node's
    /// own dials (payload delivery, search, bootstrap), which strangers connecting in would
    /// otherwise lock out.
    #[serde(default = "default_max_connections_incoming")]
    pub max_connections_incoming: u32,
    /// Payloads waiting to be sent to one peer at most (past its window of requests in
    /// flight); one more is refused at once.
    #[serde(default = "default_send_queue_per_peer")]
    pub send_queue_per_peer: usize,
}

fn default_max_connections() -> u32 {
    256
}
fn default_true() -> bool {
    true
}
fn default_idle_timeout_secs() -> u64 {
    300
}
fn default_max_connections_per_peer() -> u32 {
    3
}
fn default_max_pending() -> u32 {
    64
}
fn default_board_max_entries() -> usize {
    100_000
}
fn default_max_connections_incoming() -> u32 {
    default_max_connections() / 4 * 3
}
fn default_send_queue_per_peer() -> usize {
    skillbox_peers::network::DEFAULT_SEND_QUEUE_PER_PEER
}
fn default_board_max_mib() -> u64 {
    (skillbox_peers::board::DEFAULT_MAX_TOTAL_BYTES >> 20) as u64
}
/// The board's budget at most: 1 TiB, far past any machine's memory, so the bytes always fit.
const MAX_BOARD_MIB: u64 = 1 << 20;

fn default_payload_rate() -> f64 {
    20.0
}
fn default_payload_burst() -> u32 {
    100
}

/// `[index]`: the skill index on Kademlia provider records (issue 18) and the bounded gossip
/// groups beside it. Each default is `skillbox_peers::PeersConfig`'s, so a config without the
/// table behaves as before it existed. The shard counts and the lookups per search are not
/// here: every node must derive the same keys for a term, so they are the index's protocol
/// (`skillbox_peers::index`), not one node's setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IndexConfig {
    /// How long a provider record lives on a DHT server: a node that left stops being found
    /// after this long.
    pub ttl_secs: u64,
    /// How often this node provides its keys again (shorter than `ttl_secs`).
    pub republish_secs: u64,
    /// As a DHT server: new provider records one provider may add, per second sustained, and
    /// burst (a flooder is refused past it; honest records are kept).
    pub rate_per_sec: f64,
    pub burst: u32,
    /// As a DHT server: index keys one provider may hold, and providers held at most.
    pub max_keys_per_provider: usize,
    pub max_providers: usize,
    /// A search fetches at most this many providers' adverts, and takes at most this long.
    pub search_max_fetches: usize,
    pub search_timeout_secs: u64,
    /// What a search for a request may tell DHT peers (`board`, `category` or `terms`): every
    /// key looked up reaches the DHT servers on the lookup path with this node's id and
    /// address, and a word's key is reversible by dictionary. `board`: nothing, requests are
    /// ranked against the board alone. `category` (default): the board first, and only when it
    /// holds no candidate the request's category key. `terms`: the request's rarest words'
    /// keys on every search (finds most, tells DHT peers those words).
    pub search: skillbox_peers::index::SearchScope,
    /// Categories whose live topic this node listens on (their adverts reach the board as they
    /// are published). Empty: the board holds only what searches fetched.
    pub live_categories: Vec<String>,
    /// Ask each newly connected peer for the adverts it holds (a bounded group's shortcut to a
    /// full board; off on a large network, where searches are the way in).
    pub board_sync: bool,
    /// Adverts taken from one node on the live topics: per second sustained, and burst.
    pub advert_rate_per_sec: f64,
    pub advert_burst: u32,
}

impl Default for IndexConfig {
    fn default() -> Self {
        let p = skillbox_peers::PeersConfig::default();
        IndexConfig {
            ttl_secs: p.index_ttl.as_secs(),
            republish_secs: p.index_republish.as_secs(),
            rate_per_sec: p.index_rate_per_sec,
            burst: p.index_burst,
            max_keys_per_provider: p.index_max_keys_per_provider,
            max_providers: p.index_max_providers,
            search_max_fetches: p.search_max_fetches,
            search_timeout_secs: p.search_timeout.as_secs(),
            search: p.search_scope,
            live_categories: p.live_categories,
            board_sync: p.board_sync,
            advert_rate_per_sec: p.advert_rate_per_sec,
            advert_burst: p.advert_burst,
        }
    }
}

/// The longest duration a setting may name: ten years. Beyond it a timer's deadline can
/// overflow the clock (`Instant + Duration` panics), in this node or in libp2p's Kademlia jobs,
/// which would take the node down at its first search or a peer's provider record instead of
/// refusing the file.
const MAX_SETTING_SECS: u64 = 10 * 365 * 24 * 3600;

/// The first of `values` (seconds) longer than [`MAX_SETTING_SECS`], named by its key.
fn at_most_ten_years(values: &[(&str, u64)]) -> std::result::Result<(), String> {
    match values.iter().find(|(_, v)| *v > MAX_SETTING_SECS) {
        Some((name, v)) => Err(format!(
            "{name} ({v}) must be at most {MAX_SETTING_SECS} seconds (ten years)"
        )),
        None => Ok(()),
    }
}

/// The first of `values` that is 0, named by its key: each must be at least 1.
fn at_least_one<T: Default + PartialEq>(values: &[(&str, T)]) -> std::result::Result<(), String> {
    match values.iter().find(|(_, v)| *v == T::default()) {
        Some((name, _)) => Err(format!("{name} must be at least 1")),
        None => Ok(()),
    }
}

impl IndexConfig {
    /// The first bad value, named by its key.
    fn check(&self) -> std::result::Result<(), String> {
        at_least_one(&[
            ("index.ttl_secs", self.ttl_secs as usize),
            ("index.republish_secs", self.republish_secs as usize),
            ("index.burst", self.burst as usize),
            ("index.max_keys_per_provider", self.max_keys_per_provider),
            ("index.max_providers", self.max_providers),
            ("index.search_max_fetches", self.search_max_fetches),
            (
                "index.search_timeout_secs",
                self.search_timeout_secs as usize,
            ),
            ("index.advert_burst", self.advert_burst as usize),
        ])?;
        for (name, v) in [
            ("index.rate_per_sec", self.rate_per_sec),
            ("index.advert_rate_per_sec", self.advert_rate_per_sec),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name} must be a number above 0"));
            }
        }
        at_most_ten_years(&[
            ("index.ttl_secs", self.ttl_secs),
            ("index.republish_secs", self.republish_secs),
            ("index.search_timeout_secs", self.search_timeout_secs),
        ])?;
        if self.ttl_secs <= self.republish_secs {
            return Err(format!(
                "index.ttl_secs ({}) must be longer than index.republish_secs ({}): a record \
                 would expire before it is provided again",
                self.ttl_secs, self.republish_secs
            ));
        }
        let known = |c: &String| {
            skillbox_calls::vocabulary::CATEGORIES
                .iter()
                .any(|(k, _)| k == c)
        };
        if let Some(c) = self.live_categories.iter().find(|c| !known(c)) {
            return Err(format!(
                "index.live_categories: {c:?} is not a category (one of {})",
                skillbox_calls::vocabulary::CATEGORIES
                    .iter()
                    .map(|(k, _)| *k)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxesConfig {
    /// Base URLs of the boxes this node accepts to run its calls.
    pub accept: Vec<String>,
    /// Accept a box's `insecure-dev` attestation (a software key: no hardware isolation).
    pub allow_insecure_dev: bool,
    /// The identity each accepted box must prove: its platform, measurements and (insecure-dev)
    /// evidence key. Required for a box off loopback; a loopback box without one is trusted
    /// on first contact (development).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<BoxPin>,
    /// Provider base URLs this node lets a box reach, per provider id, besides the official
    /// endpoints (`openai = ["https://llm.example/v1"]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provider_hosts: BTreeMap<String, Vec<String>>,
}

/// One pinned box: what its attestation must show (`skillbox box --show-identity` prints it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxPin {
    pub url: String,
    pub platform: String,
    /// Accepted measurements (any one of them): SEV-SNP MEASUREMENT, the TDX box identity
    /// (SHA-384 of a domain tag, MRTD, RTMR0, RTMR1 and RTMR2: `skillbox_attest::tdx::identity`; an
    /// MRTD, the firmware alone, is refused naming the identity), Nitro PCR0, or the
    /// insecure-dev executable's SHA-384. Empty with a `release_log`, which names them.
    #[serde(default)]
    pub measurements: Vec<String>,
    /// The evidence key (insecure-dev: required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A hardware platform's verification policy, as `skillbox-attest` reads it (`sev-snp`: its
    /// TCB floor `min_tcb`, the pin's measurements unless it names its own; `tdx`: `accepted`
    /// TDs, the pin's identities unless it names its own, the collateral floor
    /// `min_tcb_eval_data_number`, TCB statuses; `nitro`: `accepted` PCR0–2 sets, freshness). A
    /// floor is required: `skillbox box --show-identity` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<toml::Value>,
    /// Instead of `measurements`: the release log whose signed and logged release manifests
    /// name the accepted measurements (`crate::pins` resolves them when the node starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_log: Option<ReleaseLogPin>,
    /// The golden values this node pins for the box's GPUs (a box whose model runs on a GPU binds
    /// their evidence into its statement): `measurements = [{ index, values }]` from NVIDIA's
    /// RIMs, optional `devices`. Absent: each GPU's report is verified (NVIDIA's root, signature,
    /// nonce, binding) and its measurements only shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<toml::Value>,
}

/// A release-log identity a box pin may name (issue 31 item 3): who signs the box releases and
/// which transparency log they are logged in. A manifest counts only when its Sigstore bundle
/// verifies offline with an inclusion proof and a checkpoint signed by a pinned log key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseLogPin {
    /// The directory of release manifests, each `<name>` beside its bundle
    /// `<name>.sigstore.json` (what `cosign sign-blob --bundle` writes).
    pub releases: String,
    /// Keyless signer: the signing certificate's identity (its SAN: the release workflow's
    /// URI, or an e-mail address), exactly, with `issuer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The OIDC issuer that vouched for `identity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Managed-key signer instead: the public key, base64 SubjectPublicKeyInfo DER (the body
    /// of `cosign.pub` without its PEM lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A Sigstore `trusted_root.json` naming the log keys; by default the public-good root
    /// compiled into the node (Rekor's key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_root: Option<String>,
}

impl ReleaseLogPin {
    /// Exactly one signer: an identity with its issuer, or a key.
    fn validate(&self) -> std::result::Result<(), String> {
        if self.releases.is_empty() {
            return Err("releases (a directory) is required".into());
        }
        match (&self.identity, &self.issuer, &self.key) {
            (Some(i), Some(o), None) if !i.is_empty() && !o.is_empty() => Ok(()),
            // Decoded (and refused if it is no key) when the node starts: `crate::pins`.
            (None, None, Some(k))
                if !k.is_empty()
                    && k.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=')) =>
            {
                Ok(())
            }
            _ => Err("name the signer: identity and issuer, or key".into()),
        }
    }

    fn render(&self) -> String {
        use toml_text::s;
        let mut fields = vec![format!("releases = {}", s(&self.releases))];
        for (name, v) in [
            ("identity", &self.identity),
            ("issuer", &self.issuer),
            ("key", &self.key),
            ("trusted_root", &self.trusted_root),
        ] {
            if let Some(v) = v {
                fields.push(format!("{name} = {}", s(v)));
            }
        }
        format!("{{ {} }}", fields.join(", "))
    }
}

impl BoxPin {
    /// The pin as a `[[boxes.pins]]` table of `config.toml` (what `skillbox box
    /// --show-identity` prints and `skillbox init` writes).
    pub fn render(&self) -> String {
        use toml_text::{list, s};
        let mut out = format!(
            "[[boxes.pins]]\nurl = {}\nplatform = {}\nmeasurements = {}\n",
            s(&self.url),
            s(&self.platform),
            list(&self.measurements)
        );
        if let Some(k) = &self.key {
            out.push_str(&format!("key = {}\n", s(k)));
        }
        if let Some(policy) = &self.policy {
            out.push_str(&format!("policy = {policy}\n"));
        }
        if let Some(log) = &self.release_log {
            out.push_str(&format!("release_log = {}\n", log.render()));
        }
        if let Some(gpu) = &self.gpu {
            out.push_str(&format!("gpu = {gpu}\n"));
        }
        out
    }

    /// The GPU policy of this pin, as `skillbox-attest` reads it (`None`: GPUs unpinned).
    pub fn gpu_policy(
        &self,
    ) -> std::result::Result<Option<skillbox_attest::nvidia::Policy>, String> {
        let Some(gpu) = &self.gpu else {
            return Ok(None);
        };
        let value = serde_json::to_value(gpu).map_err(|e| format!("gpu: {e}"))?;
        serde_json::from_value(value)
            .map(Some)
            .map_err(|e| format!("gpu: {e}"))
    }

    /// The hardware policy of this pin (`None` for insecure-dev).
    pub fn hardware_policy(
        &self,
    ) -> std::result::Result<Option<skillbox_jc::hardware::HardwarePolicy>, String> {
        if self.platform == skillbox_jc::program::INSECURE_DEV {
            return Ok(None);
        }
        let policy = self
            .policy
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| format!("policy: {e}"))?;
        skillbox_jc::hardware::HardwarePolicy::from_value(
            &self.platform,
            policy,
            &self.measurements,
        )
        .map(Some)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedules {
    pub advertise_secs: u64,
    pub advance_secs: u64,
    pub sweep_secs: u64,
    pub stall_limit_secs: u64,
    pub board_ttl_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    /// OpenWOP agentId namespace: a skill `x` becomes `<namespace>.x`.
    pub namespace: String,
    /// Org charts may nest departments (`parentDepartmentId`); advertised as
    /// `agents.orgChart.departmentNesting`, and a parent is refused when off.
    #[serde(default = "yes")]
    pub department_nesting: bool,
    /// Roster entries one tenant may hold, across all its workspaces: a tenant token writes
    /// rows into the operator's store, and without a ceiling one tenant fills its disk.
    #[serde(default = "default_max_roster_entries")]
    pub max_roster_entries: usize,
    /// Departments one org chart may hold: a tenant writes the chart, and each check of it and
    /// each view of a department walks its departments, so their number is bounded here rather
    /// than by the body limit (1 MiB holds ~13,600).
    #[serde(default = "default_max_departments")]
    pub max_departments: usize,
}

/// The default of `agents.max_roster_entries`.
pub const DEFAULT_MAX_ROSTER_ENTRIES: usize = 1_000;

fn default_max_roster_entries() -> usize {
    DEFAULT_MAX_ROSTER_ENTRIES
}

/// The default of `agents.max_departments`: as many departments as a tenant may hold roster
/// entries.
pub const DEFAULT_MAX_DEPARTMENTS: usize = 1_000;

fn default_max_departments() -> usize {
    DEFAULT_MAX_DEPARTMENTS
}

fn yes() -> bool {
    true
}

/// The tenant the operator's `api.token` belongs to.
pub const DEFAULT_OPERATOR_TENANT: &str = "local";

/// Tenants: who the API's callers are. The operator's token (`api.token`) belongs to the tenant
/// `operator`; each tenant token maps to an owner `{tenantId, workspaceId?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantsConfig {
    /// The tenantId of the node operator's token.
    pub operator: String,
    /// Tenant tokens, by digest (the token itself is never stored).
    #[serde(default)]
    pub tokens: Vec<TenantToken>,
}

impl Default for TenantsConfig {
    fn default() -> Self {
        TenantsConfig {
            operator: DEFAULT_OPERATOR_TENANT.to_owned(),
            tokens: Vec::new(),
        }
    }
}

/// One tenant token as config keeps it: the owner it stands for and `sha256:<hex>` of the token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantToken {
    pub tenant: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    pub digest: String,
}

impl TenantToken {
    /// The `[[tenants.tokens]]` block for this token (what `skillbox token add` appends).
    pub fn render(&self) -> String {
        let s = |v: &str| toml::Value::String(v.to_owned()).to_string();
        let mut out = format!("\n[[tenants.tokens]]\ntenant = {}\n", s(&self.tenant));
        if let Some(w) = &self.workspace {
            out.push_str(&format!("workspace = {}\n", s(w)));
        }
        out.push_str(&format!("digest = {}\n", s(&self.digest)));
        out
    }
}

/// A tenantId or workspaceId: 1 to 256 characters (the OpenWOP owner schema), no control
/// characters. `None` when fine, else what is wrong.
pub fn owner_id_problem(id: &str) -> Option<&'static str> {
    let n = id.chars().count();
    if n == 0 || n > 256 {
        Some("must be 1 to 256 characters")
    } else if id.chars().any(char::is_control) {
        Some("must not contain control characters")
    } else if id.trim() != id {
        Some("must not start or end with whitespace")
    } else {
        None
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest SKILL.md accepted by `POST /skills` (the document grammar caps it at 1 MiB too).
    pub max_skill_bytes: usize,
    /// Largest source accepted by `PUT /sources/{name}`.
    pub max_source_bytes: usize,
}

/// What a call this node starts asks of the box and the owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallsConfig {
    /// Largest request text `POST /calls` accepts (bytes).
    pub max_request_bytes: usize,
    /// The answer's cap in the program (bytes; the box pads to it).
    pub output_max_bytes: u64,
    /// How long a program stays valid after the caller signs it.
    pub expiry_secs: u64,
    /// Finished calls (and a caller's stored answer) are pruned after this many days. The
    /// records a human audits of what left the node are not pruned with them.
    #[serde(default = "default_retention_days")]
    pub retention_days: u64,
    /// Whether an MCP client's elicitation may answer a consent question (recorded as
    /// `agent:elicitation`). Off (the default): parked calls wait for the dashboard or
    /// `skillbox approve`. The node cannot tell a human's form from a program's: any client that
    /// declares elicitation (a headless harness, a script, a handler that is itself a model)
    /// could fill it, so on, an elicitation may deny any call but approve only one that stakes
    /// no source, and never remembers.
    #[serde(default = "default_elicitation_consent")]
    pub elicitation_consent: bool,
    /// Owner: how many admitted calls of one peer may wait to reach their run at once (the
    /// daily ceilings count only calls that reached it). One more is refused `pending_limit`.
    #[serde(default = "default_max_unstarted_per_peer")]
    pub max_unstarted_per_peer: u64,
    /// Owner: check the run attestation the caller forwards in `call.session` (the one its
    /// open got for both sides' joint nonce) instead of asking the box for another: a round
    /// trip and a step fewer per call. Off: always ask the box — for an https box the stricter
    /// check, the report's TLS key compared with the very connection it came over (on, the
    /// stake's connection must show that key, so nothing of the owner reaches a front).
    #[serde(default = "default_forwarded_attestations")]
    pub forwarded_attestations: bool,
}

fn default_forwarded_attestations() -> bool {
    true
}

fn default_max_unstarted_per_peer() -> u64 {
    8
}

/// The longest a program may stay valid: the box's default horizon (`max_program_ttl_secs`,
/// 1 h; a later `expires_at` is refused `expires_too_far` at open) less 5 minutes for a node
/// clock ahead of the box's.
pub const MAX_CALL_EXPIRY_SECS: u64 = 3300;

fn default_elicitation_consent() -> bool {
    false
}

fn default_retention_days() -> u64 {
    30
}

/// The owner's ceilings for every skill this node offers, unless `skillbox skill set` says
/// otherwise for one, or a skill's `limits:` asks for less (an import holds what it asks above
/// these to them, `Skills::import_pack`): what a caller may spend of the owner's key and box.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CeilingsConfig {
    pub max_request_bytes: u64,
    pub max_source_bytes: u64,
    pub max_output_bytes: u64,
    pub calls_per_peer_per_day: u64,
    pub calls_per_day: u64,
}

/// The output guard this owner binds into its skills' programs (advertised with each skill).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardConfig {
    pub enabled: bool,
    /// `auto` (regenerate for the embedded model, withhold for a remote one), `withhold` or
    /// `regenerate`.
    pub action: String,
    pub ngram: u32,
    pub threshold_permille: u32,
    /// 0: no passage cap.
    pub max_copied_words: u32,
    pub canaries: bool,
    pub auto_canaries: bool,
    /// Coverage across calls (issue 32 item 4): a peer whose released answers of one skill have
    /// covered this many per mille of the body's regions in a UTC day is refused further calls
    /// of it that day (`coverage_exceeded`). The box keeps the tally: the owner's stake gives it
    /// this limit (`day_limits`), and the owner learns only that the box refused a run. 0: not
    /// counted.
    #[serde(default = "default_coverage_permille")]
    pub coverage_permille: u32,
    /// The same for the characters of any one secret (a marked or automatic canary).
    #[serde(default = "default_canary_coverage_permille")]
    pub canary_coverage_permille: u32,
    /// How many box instances besides the one a peer's day of a skill is pinned to (that of its
    /// first run) its runs of the skill may go to that day (`calls::coverage::pin_box`, review
    /// 22 F1/F2): each box keeps its own day book, and a hardware box's book is lost at every
    /// restart, so runs spread over boxes or restarts would each get a fresh day. A call on one
    /// more instance is refused `coverage_exceeded`. 0: a day stays on one instance.
    #[serde(default = "default_day_box_moves")]
    pub day_box_moves: u32,
}

/// As the per-answer threshold: what one answer may not carry, several may not add up to.
pub const DEFAULT_COVERAGE_PERMILLE: u32 = skillbox_guard::DEFAULT_THRESHOLD_PERMILLE;
/// Half of a secret: the first half of an access code asked for in two calls ends the day.
pub const DEFAULT_CANARY_COVERAGE_PERMILLE: u32 = 500;

fn default_coverage_permille() -> u32 {
    DEFAULT_COVERAGE_PERMILLE
}

fn default_canary_coverage_permille() -> u32 {
    DEFAULT_CANARY_COVERAGE_PERMILLE
}

/// One move: an honest day survives one box restart or one hand-over to another box.
pub const DEFAULT_DAY_BOX_MOVES: u32 = 1;

fn default_day_box_moves() -> u32 {
    DEFAULT_DAY_BOX_MOVES
}

impl Default for GuardConfig {
    fn default() -> Self {
        let d = skillbox_guard::GuardSpec::default_for(false);
        GuardConfig {
            enabled: d.enabled,
            action: "auto".into(),
            ngram: d.ngram,
            threshold_permille: d.threshold_permille,
            max_copied_words: d.max_copied_words,
            canaries: d.canaries,
            auto_canaries: d.auto_canaries,
            coverage_permille: DEFAULT_COVERAGE_PERMILLE,
            canary_coverage_permille: DEFAULT_CANARY_COVERAGE_PERMILLE,
            day_box_moves: DEFAULT_DAY_BOX_MOVES,
        }
    }
}

impl GuardConfig {
    /// The spec for a skill on `provider` (`auto` decides the action by provider).
    pub fn spec_for(&self, provider: &skillbox_skill::ProviderId) -> skillbox_guard::GuardSpec {
        use skillbox_guard::Action;
        let local = *provider == skillbox_skill::ProviderId::Local;
        skillbox_guard::GuardSpec {
            enabled: self.enabled,
            ngram: self.ngram,
            threshold_permille: self.threshold_permille,
            max_copied_words: self.max_copied_words,
            action: match self.action.as_str() {
                "withhold" => Action::Withhold,
                "regenerate" => Action::Regenerate,
                _ if local => Action::Regenerate,
                _ => Action::Withhold,
            },
            canaries: self.canaries,
            auto_canaries: self.auto_canaries,
        }
    }
}

impl Default for CeilingsConfig {
    fn default() -> Self {
        CeilingsConfig {
            max_request_bytes: 64 * 1024,
            max_source_bytes: 1024 * 1024,
            max_output_bytes: 16 * 1024,
            calls_per_peer_per_day: 100,
            calls_per_day: 1000,
        }
    }
}

impl CeilingsConfig {
    /// As a skill's limits, every field set.
    pub fn limits(&self) -> skillbox_skill::Limits {
        skillbox_skill::Limits {
            max_request_bytes: Some(self.max_request_bytes),
            max_source_bytes: Some(self.max_source_bytes),
            max_output_bytes: Some(self.max_output_bytes),
            calls_per_peer_per_day: Some(self.calls_per_peer_per_day),
            calls_per_day: Some(self.calls_per_day),
        }
    }
}

impl Default for CallsConfig {
    fn default() -> Self {
        CallsConfig {
            max_request_bytes: 64 * 1024,
            output_max_bytes: 4096,
            expiry_secs: 900,
            retention_days: default_retention_days(),
            elicitation_consent: default_elicitation_consent(),
            max_unstarted_per_peer: default_max_unstarted_per_peer(),
            forwarded_attestations: default_forwarded_attestations(),
        }
    }
}

/// Consent (§9) and admission, as the config file states them. The API can replace them at run
/// time (`PUT /policy`, kept in the store); this is what a node starts from otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// When no rule matches.
    #[serde(default = "allow")]
    pub default: skillbox_calls::Decision,
    #[serde(default)]
    pub admission: skillbox_calls::policy::Admission,
    #[serde(default)]
    pub rules: Vec<skillbox_calls::policy::Rule>,
}

fn allow() -> skillbox_calls::Decision {
    skillbox_calls::Decision::Allow
}

impl Default for PolicyConfig {
    /// The shipped consent: a call that would disclose sources asks this node's human first
    /// (`skillbox approve ID [--remember]`), and so does a call an agent started (MCP, A2A),
    /// showing its request; any other call is allowed.
    fn default() -> Self {
        PolicyConfig {
            default: allow(),
            admission: Default::default(),
            rules: vec![
                skillbox_calls::policy::Rule::ask_before_disclosure(),
                skillbox_calls::policy::Rule::ask_from_agent(),
            ],
        }
    }
}

impl PolicyConfig {
    /// Allow every submit, no rule (tests and the demo, which set their own).
    pub fn allow_all() -> PolicyConfig {
        PolicyConfig {
            rules: Vec::new(),
            ..PolicyConfig::default()
        }
    }

    /// The consent rules as the policy engine takes them.
    pub fn consent(&self) -> skillbox_calls::Policy {
        skillbox_calls::Policy {
            rules: self.rules.clone(),
            default: self.default,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            api: ApiConfig {
                listen: DEFAULT_API_ADDR.parse().expect("constant address parses"),
                hosts: Vec::new(),
                plain_http_beyond_loopback: false,
                operator_token_over_tcp: false,
            },
            p2p: P2pConfig {
                listen: vec![
                    DEFAULT_P2P_LISTEN.to_owned(),
                    DEFAULT_P2P_LISTEN_QUIC.to_owned(),
                ],
                bootstrap: Vec::new(),
                mdns: false,
                dial_private_addresses: false,
                kad_server: false,
                external_addresses: Vec::new(),
                relays: Vec::new(),
                relay_server: false,
                autonat_server: true,
                idle_timeout_secs: default_idle_timeout_secs(),
                payload_rate_per_sec: default_payload_rate(),
                payload_burst: default_payload_burst(),
                max_connections: default_max_connections(),
                max_connections_per_peer: default_max_connections_per_peer(),
                max_pending_incoming: default_max_pending(),
                max_pending_outgoing: default_max_pending(),
                board_max_entries: default_board_max_entries(),
                board_max_mib: default_board_max_mib(),
                max_connections_incoming: default_max_connections_incoming(),
                send_queue_per_peer: default_send_queue_per_peer(),
            },
            boxes: BoxesConfig {
                accept: Vec::new(),
                allow_insecure_dev: false,
                pins: Vec::new(),
                provider_hosts: BTreeMap::new(),
            },
            schedules: Schedules {
                advertise_secs: 60,
                advance_secs: 2,
                sweep_secs: 30,
                stall_limit_secs: 120,
                board_ttl_secs: 180,
            },
            agents: AgentsConfig {
                namespace: skillbox_skill::openwop::DEFAULT_NAMESPACE.to_owned(),
                department_nesting: true,
                max_roster_entries: DEFAULT_MAX_ROSTER_ENTRIES,
                max_departments: DEFAULT_MAX_DEPARTMENTS,
            },
            limits: Limits {
                max_skill_bytes: skillbox_skill::document::MAX_DOCUMENT,
                max_source_bytes: 16 * 1024 * 1024,
            },
            calls: CallsConfig::default(),
            ceilings: CeilingsConfig::default(),
            guard: GuardConfig::default(),
            policy: PolicyConfig::default(),
            tenants: TenantsConfig::default(),
            index: IndexConfig::default(),
        }
    }
}

impl Config {
    /// A node on this machine only: its API and p2p on loopback (any free port), calling
    /// through `box_url`, a development box without hardware attestation — what the demo and
    /// the tests run. Never a shipped default: `allow_insecure_dev` is set here on purpose.
    pub fn on_loopback(box_url: &str, bootstrap: Vec<String>) -> Config {
        let mut config = Config::default();
        config.api.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        config.p2p.listen = vec!["/ip4/127.0.0.1/tcp/0".into()];
        config.p2p.bootstrap = bootstrap;
        // Every peer is on this machine: a test deployment dials loopback addresses.
        config.p2p.dial_private_addresses = true;
        config.boxes.accept = vec![box_url.to_owned()];
        config.boxes.allow_insecure_dev = true;
        config
    }

    /// Parse and check a config text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config> {
        let config: Config = toml::from_str(text).map_err(|e| NodeError::Config {
            path: path.to_owned(),
            problem: e.to_string(),
        })?;
        config.check().map_err(|problem| NodeError::Config {
            path: path.to_owned(),
            problem,
        })?;
        Ok(config)
    }

    /// Read `config.toml`.
    pub fn load(path: &Path) -> Result<Config> {
        Config::parse(&crate::datadir::read_text(path, "config.toml")?, path)
    }

    fn check(&self) -> std::result::Result<(), String> {
        let s = &self.schedules;
        at_least_one(&[
            ("schedules.advertise_secs", s.advertise_secs),
            ("schedules.advance_secs", s.advance_secs),
            ("schedules.sweep_secs", s.sweep_secs),
            ("schedules.stall_limit_secs", s.stall_limit_secs),
            ("schedules.board_ttl_secs", s.board_ttl_secs),
        ])?;
        let rate = self.p2p.payload_rate_per_sec;
        if rate.is_nan() || rate <= 0.0 || self.p2p.payload_burst == 0 {
            return Err("p2p.payload_rate_per_sec and p2p.payload_burst must be above 0".into());
        }
        at_least_one(&[
            ("p2p.max_connections", self.p2p.max_connections as usize),
            (
                "p2p.max_connections_per_peer",
                self.p2p.max_connections_per_peer as usize,
            ),
            (
                "p2p.max_pending_incoming",
                self.p2p.max_pending_incoming as usize,
            ),
            (
                "p2p.max_pending_outgoing",
                self.p2p.max_pending_outgoing as usize,
            ),
            ("p2p.board_max_entries", self.p2p.board_max_entries),
            ("p2p.board_max_mib", self.p2p.board_max_mib as usize),
            (
                "p2p.max_connections_incoming",
                self.p2p.max_connections_incoming as usize,
            ),
            ("p2p.send_queue_per_peer", self.p2p.send_queue_per_peer),
            ("p2p.idle_timeout_secs", self.p2p.idle_timeout_secs as usize),
        ])?;
        if self.p2p.max_connections_incoming > self.p2p.max_connections {
            return Err(format!(
                "p2p.max_connections_incoming ({}) must be at most p2p.max_connections ({})",
                self.p2p.max_connections_incoming, self.p2p.max_connections
            ));
        }
        if self.p2p.board_max_mib > MAX_BOARD_MIB {
            return Err(format!(
                "p2p.board_max_mib ({}) must be at most {MAX_BOARD_MIB}",
                self.p2p.board_max_mib
            ));
        }
        at_most_ten_years(&[
            ("schedules.advertise_secs", s.advertise_secs),
            ("schedules.advance_secs", s.advance_secs),
            ("schedules.sweep_secs", s.sweep_secs),
            ("schedules.stall_limit_secs", s.stall_limit_secs),
            ("schedules.board_ttl_secs", s.board_ttl_secs),
            ("p2p.idle_timeout_secs", self.p2p.idle_timeout_secs),
        ])?;
        self.index.check()?;
        let ns = &self.agents.namespace;
        let ns_ok = !ns.is_empty()
            && ns.split('.').all(|seg| {
                !seg.is_empty()
                    && seg
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            });
        if !ns_ok {
            return Err(format!(
                "agents.namespace {ns:?} must be dot-separated segments of [a-z0-9-] (like \"local.skillbox\")"
            ));
        }
        if self.agents.max_roster_entries == 0 {
            return Err("agents.max_roster_entries must be at least 1".to_owned());
        }
        if self.agents.max_departments == 0 {
            return Err("agents.max_departments must be at least 1".to_owned());
        }
        let c = &self.calls;
        if c.max_request_bytes == 0
            || c.expiry_secs == 0
            || c.retention_days == 0
            || c.max_unstarted_per_peer == 0
        {
            return Err(
                "calls.max_request_bytes, calls.expiry_secs, calls.retention_days and calls.max_unstarted_per_peer must be at least 1"
                    .into(),
            );
        }
        if c.expiry_secs > MAX_CALL_EXPIRY_SECS {
            return Err(format!(
                "calls.expiry_secs must be at most {MAX_CALL_EXPIRY_SECS} (a box refuses a program valid for longer than 1 h)"
            ));
        }
        // What a box takes at most (a stake, an output) and what a declaration may say (its
        // limits): a ceiling above it would promise what no call can get.
        use skillbox_jc::program::{MAX_OUTPUT_BYTES, MAX_STAKE_BYTES};
        use skillbox_skill::Limits;
        let cl = &self.ceilings;
        #[rustfmt::skip] // a table: a row a ceiling
        let ceilings = [
            ("ceilings.max_request_bytes", cl.max_request_bytes, MAX_STAKE_BYTES),
            ("ceilings.max_source_bytes", cl.max_source_bytes, MAX_STAKE_BYTES),
            ("ceilings.max_output_bytes", cl.max_output_bytes, MAX_OUTPUT_BYTES),
            ("ceilings.calls_per_peer_per_day", cl.calls_per_peer_per_day, Limits::MAX),
            ("ceilings.calls_per_day", cl.calls_per_day, Limits::MAX),
        ];
        for (name, v, max) in ceilings {
            if v > max {
                return Err(format!("{name} must be at most {max}"));
            }
        }
        for h in &self.api.hosts {
            if h.is_empty()
                || !h
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
            {
                return Err(format!("api.hosts entry {h:?} is not a host name"));
            }
        }
        if c.output_max_bytes == 0 || c.output_max_bytes > skillbox_jc::program::MAX_OUTPUT_BYTES {
            return Err(format!(
                "calls.output_max_bytes must be 1 to {}",
                skillbox_jc::program::MAX_OUTPUT_BYTES
            ));
        }
        if self.limits.max_skill_bytes == 0 || self.limits.max_source_bytes == 0 {
            return Err(
                "limits.max_skill_bytes and limits.max_source_bytes must be at least 1".into(),
            );
        }
        for (i, addr) in self
            .p2p
            .listen
            .iter()
            .chain(&self.p2p.bootstrap)
            .chain(&self.p2p.external_addresses)
            .chain(&self.p2p.relays)
            .enumerate()
        {
            if !addr.starts_with('/') {
                return Err(format!(
                    "p2p address #{i} {addr:?} is not a multiaddr (it must start with '/')"
                ));
            }
        }
        if let Some(p) = owner_id_problem(&self.tenants.operator) {
            return Err(format!("tenants.operator {:?} {p}", self.tenants.operator));
        }
        let mut digests = std::collections::HashSet::new();
        for (i, t) in self.tenants.tokens.iter().enumerate() {
            if let Some(p) = owner_id_problem(&t.tenant) {
                return Err(format!("tenants.tokens #{i}: tenant {:?} {p}", t.tenant));
            }
            // The operator's roster and org chart are kept under its tenant id: a tenant token
            // of that id would read and rewrite them.
            if t.tenant == self.tenants.operator {
                return Err(format!(
                    "tenants.tokens #{i}: tenant {:?} is the operator's own (tenants.operator)",
                    t.tenant
                ));
            }
            if let Some(p) = t.workspace.as_deref().and_then(owner_id_problem) {
                return Err(format!("tenants.tokens #{i}: workspace {p}"));
            }
            let hex_ok = t.digest.strip_prefix("sha256:").is_some_and(|h| {
                h.len() == 64
                    && h.bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            });
            if !hex_ok {
                return Err(format!(
                    "tenants.tokens #{i}: digest must be \"sha256:\" and 64 lowercase hex digits"
                ));
            }
            if !digests.insert(t.digest.as_str()) {
                return Err(format!(
                    "tenants.tokens #{i}: the same token digest is listed twice"
                ));
            }
        }
        if !["auto", "withhold", "regenerate"].contains(&self.guard.action.as_str()) {
            return Err(format!(
                "guard.action {:?} must be \"auto\", \"withhold\" or \"regenerate\"",
                self.guard.action
            ));
        }
        self.guard
            .spec_for(&skillbox_skill::ProviderId::Local)
            .validate()
            .map_err(|e| e.to_string())?;
        for (name, v) in [
            ("coverage_permille", self.guard.coverage_permille),
            (
                "canary_coverage_permille",
                self.guard.canary_coverage_permille,
            ),
        ] {
            if v > 1000 {
                return Err(format!("guard.{name}: {v} is out of range (0..=1000)"));
            }
        }
        self.validate_boxes()
    }

    fn validate_boxes(&self) -> std::result::Result<(), String> {
        use crate::calls::boxes::{is_loopback_url, normalize_url};
        let b = &self.boxes;
        let hex_ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|c| c.is_ascii_hexdigit());
        for (i, p) in b.pins.iter().enumerate() {
            if !b
                .accept
                .iter()
                .any(|u| normalize_url(u) == normalize_url(&p.url))
            {
                return Err(format!(
                    "boxes.pins #{i}: url {:?} is not in boxes.accept",
                    p.url
                ));
            }
            if let Some(log) = &p.release_log {
                if p.platform.is_empty() || !p.measurements.is_empty() {
                    return Err(format!(
                        "boxes.pins #{i}: a release_log pin names its platform and no \
                         measurements (the log names them)"
                    ));
                }
                log.validate()
                    .map_err(|e| format!("boxes.pins #{i}: release_log: {e}"))?;
            } else if p.platform.is_empty() || p.measurements.is_empty() {
                return Err(format!(
                    "boxes.pins #{i}: platform and at least one measurement are required"
                ));
            }
            if p.platform == skillbox_jc::program::INSECURE_DEV
                && !p.key.as_deref().is_some_and(|k| hex_ok(k, 64))
            {
                return Err(format!(
                    "boxes.pins #{i}: an insecure-dev box is pinned by its key (64 hex digits)"
                ));
            }
            // A release-log pin's policy is checked as if its log named one measurement.
            let mut probe = p.clone();
            if probe.release_log.is_some() {
                probe.measurements = vec!["0".repeat(96)];
            }
            probe
                .hardware_policy()
                .map_err(|e| format!("boxes.pins #{i} ({}): {e}", p.platform))?;
            p.gpu_policy()
                .map_err(|e| format!("boxes.pins #{i} ({}): {e}", p.platform))?;
        }
        for url in &b.accept {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("boxes.accept entry {url:?} is not an http(s) URL"));
            }
            // `localhost` resolves to `::1` first, a port another user of the machine may hold
            // while the box listens on 127.0.0.1: an unpinned box is trusted on first contact.
            if crate::calls::boxes::url_host(url)
                .is_some_and(|h| h.trim_end_matches('.').eq_ignore_ascii_case("localhost"))
            {
                return Err(format!(
                    "boxes.accept entry {url:?}: name the loopback address (127.0.0.1 or [::1]), \
                     not localhost, which may reach another user's port first"
                ));
            }
            if is_loopback_url(url) {
                continue;
            }
            if url.starts_with("http://") {
                return Err(format!(
                    "boxes.accept entry {url:?}: a box off loopback is reached over https only"
                ));
            }
            if !b
                .pins
                .iter()
                .any(|p| normalize_url(&p.url) == normalize_url(url))
            {
                return Err(format!(
                    "boxes.accept entry {url:?} is off loopback and has no [[boxes.pins]] entry: \
                     pin its identity (`skillbox box --show-identity` prints one)"
                ));
            }
        }
        for (id, hosts) in &b.provider_hosts {
            if id.parse::<skillbox_skill::ProviderId>().is_err() {
                return Err(format!("boxes.provider_hosts: {id:?} is not a provider id"));
            }
            if let Some(h) = hosts
                .iter()
                .find(|h| !(h.starts_with("http://") || h.starts_with("https://")))
            {
                return Err(format!(
                    "boxes.provider_hosts.{id}: {h:?} is not an http(s) URL"
                ));
            }
        }
        Ok(())
    }

    /// The `[[boxes.pins]]` and `[boxes.provider_hosts]` tables as TOML (after `[boxes]`).
    fn render_box_pins(&self) -> String {
        use toml_text::{list, s};
        let mut out = String::new();
        for p in &self.boxes.pins {
            out.push('\n');
            out.push_str(&p.render());
        }
        if !self.boxes.provider_hosts.is_empty() {
            out.push_str("\n[boxes.provider_hosts]\n");
            for (id, hosts) in &self.boxes.provider_hosts {
                out.push_str(&format!("{} = {}\n", s(id), list(hosts)));
            }
        }
        out
    }

    /// The full commented `config.toml` for these values: what `skillbox init` writes.
    pub fn render(&self) -> String {
        use toml_text::{list, s};
        let sch = &self.schedules;
        format!(
            r#"# skillbox node configuration. Every setting is written out with its default;
# edit and restart `skillbox node` to change one. Unknown keys are refused.

[api]
# HTTP API listen address. Loopback by default: the API is for this node's human, with the
# bearer token in api.token. Use port 0 for an OS-chosen port (the bound address is written to
# api.addr on start).
listen = {api}
# DNS names the API is reached by besides its address (and `localhost` on loopback). Requests
# with any other Host header, or from another site's Origin, are refused (DNS rebinding, CSRF).
hosts = {api_hosts}
# Listening beyond loopback serves the token, the dashboard and every answer in plain HTTP:
# refused unless this says the network (or a TLS proxy in front) is trusted.
plain_http_beyond_loopback = {api_plain}
# The operator's token (api.token) is taken only over <data dir>/api.sock, where the CLI and
# `skillbox mcp` send it: any local user can hold this port while the node is down and catch
# what a client sends to it. True also takes it over TCP (a node managed from another host).
operator_token_over_tcp = {api_operator_tcp}

[p2p]
# libp2p listen multiaddrs.
listen = {p2p_listen}
# Peers to dial at start (a multiaddr; the trailing /p2p/<peer id> may be omitted).
bootstrap = {bootstrap}
# Local-network discovery by multicast DNS. Off unless you want it. On, LAN addresses peers
# give are dialed too (mDNS finds only LAN peers); loopback ones still not.
mdns = {mdns}
# Dial LAN and loopback addresses that peers give (their listen addresses, the DHT, AutoNAT
# dial-backs, hole punching): for a LAN or test deployment. Off, only public addresses are
# dialed, so a peer cannot make this node connect to services on its machine or LAN;
# bootstrap peers, relays and `skillbox peer add` are dialed whatever they are.
dial_private_addresses = {dial_private}
# Kademlia (DHT) server mode forced on. Off, the node turns DHT server by itself once AutoNAT
# confirmed a direct address of it; until then it is a client and publishes no address.
kad_server = {kad_server}
# Addresses others reach this node at directly (e.g. a public IP's port forward): confirmed
# without AutoNAT.
external_addresses = {external_addresses}
# Relays to hold a reservation on ("/ip4/.../tcp/4001/p2p/<relay peer id>"): a node behind NAT
# is reachable through them; calls try a hole-punched direct connection and fall back to the relay.
relays = {relays}
# Relay for others (Circuit Relay v2) while this node has a confirmed direct address.
relay_server = {relay_server}
# Answer other nodes' reachability probes (AutoNAT v2: dial their address back).
autonat_server = {autonat_server}
# Close a connection no protocol has used for this many seconds.
idle_timeout_secs = {idle_timeout_secs}
# Call payloads accepted from one peer: sustained per second, and burst (more are refused and
# the sender retries with back-off).
payload_rate_per_sec = {payload_rate}
payload_burst = {payload_burst}
# Connections held at most: in total, per peer, and pending in each direction. Past these a
# new connection is denied at once.
max_connections = {max_conn}
max_connections_per_peer = {max_conn_peer}
max_pending_incoming = {max_pend_in}
max_pending_outgoing = {max_pend_out}
# Of max_connections, those other peers may open at most (the rest stay for this node's own
# dials: delivering payloads, searching); and payloads waiting to be sent to one peer at most.
max_connections_incoming = {max_conn_in}
send_queue_per_peer = {send_queue}
# Peers the board (verified adverts) holds at most, and the memory their adverts take (MiB);
# past either a newcomer evicts the oldest advert.
board_max_entries = {board_max}
board_max_mib = {board_max_mib}

[index]
# The skill index on Kademlia (DHT) provider records: a node provides each offered skill under
# a few of its words and its category; a search looks some of the request's words up and fetches
# the providers' signed adverts. How long a provider record lives on a DHT server (a node that
# left stops being found after it), and how often this node provides its keys again.
ttl_secs = {ix_ttl}
republish_secs = {ix_republish}
# As a DHT server: new provider records one node may add, per second sustained and burst; index
# keys one node may hold; nodes held at most. Past them a flooder is refused, not honest nodes.
rate_per_sec = {ix_rate}
burst = {ix_burst}
max_keys_per_provider = {ix_keys}
max_providers = {ix_providers}
# A search fetches at most this many providers' adverts and takes at most this many seconds.
search_max_fetches = {ix_fetches}
search_timeout_secs = {ix_timeout}
# What a search for a request tells DHT peers: every key looked up reaches the DHT servers on
# the lookup path with this node's id and address, and a word's key is reversible by
# dictionary. "board": nothing, a request is ranked against the board (gossip, board syncs)
# alone. "category": the board first, and only when it holds no candidate the request's
# category key. "terms": the request's rarest words on every search (finds the most, and tells
# DHT peers those words).
search = "{ix_search}"
# Categories whose live gossip topic this node listens on (their adverts reach the board as
# published). [] on a large network: the board then holds only what searches found.
live_categories = {ix_live}
# Ask each newly connected peer for the adverts it holds (a small federation's full board).
board_sync = {ix_sync}
# Adverts taken from one node on the live topics: per second sustained, and burst.
advert_rate_per_sec = {ix_advert_rate}
advert_burst = {ix_advert_burst}

[boxes]
# Base URLs of the boxes (joint-compute services) this node accepts for its calls.
accept = {boxes}
# Accept a box's `insecure-dev` attestation: a software key, NO hardware isolation. Development only.
allow_insecure_dev = {insecure}
# Pins (required for a box off loopback, which is reached over https): what each box's
# attestation must show. `skillbox box --show-identity` prints the entry for a box:
# [[boxes.pins]]
# url = "https://box.example:7480"
# platform = "insecure-dev"
# measurements = ["<sha384 hex>"]
# key = "<ed25519 hex>"
# A box may send a provider's plaintext only to that provider's official endpoint, to a host
# listed here ([boxes.provider_hosts] openai = ["https://llm.example/v1"]), or — when the box
# itself is on loopback — to a loopback host.
{box_pins}

[schedules]
# Presence: publish this node's signed advert every N seconds.
advertise_secs = {advertise}
# Advance calls (poll the box, retry what is due) every N seconds.
advance_secs = {advance}
# Sweep: look for stalled calls every N seconds.
sweep_secs = {sweep}
# A call with no progress for this long is failed as `stalled`.
stall_limit_secs = {stall}
# A peer's advert leaves the board after this long without a newer one (3 missed adverts).
board_ttl_secs = {ttl}

[agents]
# OpenWOP agentId namespace: skill `x` is served as agent `<namespace>.x`.
namespace = {namespace}
# Org charts may nest departments (parentDepartmentId). When false, a parent is refused.
department_nesting = {nesting}
# Roster entries one tenant may hold across its workspaces (a tenant's writes land in this
# node's store; this is their ceiling).
max_roster_entries = {max_roster}
# Departments one org chart may hold; a chart with more is refused (too_many_departments).
max_departments = {max_departments}

[limits]
# Largest SKILL.md accepted (bytes).
max_skill_bytes = {max_skill}
# Largest source accepted by PUT /sources/{{name}} (bytes).
max_source_bytes = {max_source}

[calls]
# Largest request text a call of this node carries (bytes).
max_request_bytes = {max_request}
# The answer's cap (bytes); the box pads every answer to it.
output_max_bytes = {output_max}
# A program (and so a call) is valid this long after the caller signs it.
expiry_secs = {expiry}
# Finished calls, and a caller's stored answer, are pruned after this many days.
retention_days = {retention}
# Whether an MCP client may answer a consent question through elicitation (the ledger records
# it as agent:elicitation). false: parked calls wait for the dashboard or `skillbox approve`.
# true: any client that declares elicitation may answer (the node cannot tell a human from a
# program there); it may deny any call, approve only one that stakes no source.
elicitation_consent = false
# Owner: admitted calls of one peer that may wait at once to reach their run (only calls that
# reach it count against a skill's calls per day).
max_unstarted_per_peer = {max_unstarted}
# Owner: check the run attestation the caller forwards (its open's, for a nonce both sides
# chose) instead of asking the box again. false: always ask the box (for an https box, the
# report's TLS key is then compared with the connection it came over).
forwarded_attestations = {forwarded}

[ceilings]
# The owner's ceilings for every skill this node offers (`skillbox skill set NAME
# maxRequestBytes=…` overrides each for one skill; a skill's `limits:` front matter may only ask
# for less: an import holds it to these, with a warning): what a caller may spend of the
# owner's key and box. A program above them is refused `over_owner_limit`; a skill past its
# daily calls `daily_limit`.
max_request_bytes = {c_request}
# Each caller source, at most.
max_source_bytes = {c_source}
max_output_bytes = {c_output}
calls_per_peer_per_day = {c_peer_day}
calls_per_day = {c_day}

[guard]
# The output guard the box applies to every answer of this node's skills before the caller gets
# it (advertised with each skill and bound into its programs). action: "auto" (regenerate for the
# embedded model, withhold for a remote one), "withhold" or "regenerate". An answer is caught when
# it covers threshold_permille of the body's words in ngram-word runs (ngram 3..16, threshold
# 50..1000), copies max_copied_words body words in a row (0: no cap), or shows a secret (the
# body's [[secret:…]] / <!-- secret --> marks; auto_canaries adds passwords, codes and keys).
enabled = {g_enabled}
action = {g_action}
ngram = {g_ngram}
threshold_permille = {g_threshold}
max_copied_words = {g_copied}
canaries = {g_canaries}
auto_canaries = {g_auto}
# Coverage across calls: this node stakes these day limits with each run; the box keeps the
# day's tally of the body words and secret characters the released answers carried, per peer,
# skill and UTC day, and refuses the run that would start past coverage_permille of the body's
# words or canary_coverage_permille of any one secret's characters (code coverage_exceeded).
# This node learns only that refusal (never which words an answer carried) and refuses that
# peer the skill until the day ends. 0: off.
coverage_permille = {g_coverage}
canary_coverage_permille = {g_canary_coverage}
# Each box keeps its own day's tally, and a hardware box loses it when it restarts: a peer's day
# of a skill is pinned to the box instance (its attested TLS key; a plain-HTTP loopback box: its
# URL) its first run of the day went to, and its runs may go to at most day_box_moves other
# instances that day (0: none); a call on one more is refused coverage_exceeded. A caller whose
# box restarts more often than that in a day is refused that skill for the rest of the day.
day_box_moves = {g_day_box_moves}

# Consent (design §9): asked once at each side's jc.submit. Rules are tried in order; the first
# whose side ("caller" | "owner" | "any"), peer and skill patterns ("*", "prefix*", exact),
# sources (the call stakes any source matching one of these patterns; "*" = any source),
# sources_within (every staked source is in this list) and surface ("agent": an agent started the
# call through MCP or A2A; "human": the CLI, dashboard or API) match decides "allow" | "deny" |
# "ask".
# `ask` parks the call until `skillbox approve|deny ID` (`approve --remember` adds an allow rule
# for that peer, skill and source set). No rule matching: `default`. The shipped rules ask before
# any call discloses this node's sources, and before any call an agent started (showing its
# request). Example:
# [[policy.rules]]
# side = "owner"
# peer = "*"
# skill = "*"
# decision = "ask"
{policy}
[tenants]
# The tenant the operator's token (api.token) belongs to: roster entries and the org chart the
# operator writes are owned by {{tenantId = operator}}. The operator's token reaches every route.
operator = {operator}
# Tenant tokens, added by `skillbox token add --tenant ID [--workspace ID]` (appended below as
# [[tenants.tokens]] blocks; a running node picks them up). Only the sha256 digest of a token is
# kept; the token itself is printed once. A tenant token reaches the OpenWOP agent surfaces
# (/v1/agents, the roster, the org chart) for its own owner {{tenantId, workspaceId?}} only.
{tokens}"#,
            api = s(&self.api.listen.to_string()),
            api_hosts = list(&self.api.hosts),
            api_plain = self.api.plain_http_beyond_loopback,
            api_operator_tcp = self.api.operator_token_over_tcp,
            retention = self.calls.retention_days,
            max_unstarted = self.calls.max_unstarted_per_peer,
            forwarded = self.calls.forwarded_attestations,
            c_request = self.ceilings.max_request_bytes,
            c_source = self.ceilings.max_source_bytes,
            c_output = self.ceilings.max_output_bytes,
            c_peer_day = self.ceilings.calls_per_peer_per_day,
            c_day = self.ceilings.calls_per_day,
            g_enabled = self.guard.enabled,
            g_action = s(&self.guard.action),
            g_ngram = self.guard.ngram,
            g_threshold = self.guard.threshold_permille,
            g_copied = self.guard.max_copied_words,
            g_canaries = self.guard.canaries,
            g_auto = self.guard.auto_canaries,
            g_coverage = self.guard.coverage_permille,
            g_canary_coverage = self.guard.canary_coverage_permille,
            g_day_box_moves = self.guard.day_box_moves,
            p2p_listen = list(&self.p2p.listen),
            bootstrap = list(&self.p2p.bootstrap),
            mdns = self.p2p.mdns,
            dial_private = self.p2p.dial_private_addresses,
            kad_server = self.p2p.kad_server,
            external_addresses = list(&self.p2p.external_addresses),
            relays = list(&self.p2p.relays),
            relay_server = self.p2p.relay_server,
            autonat_server = self.p2p.autonat_server,
            idle_timeout_secs = self.p2p.idle_timeout_secs,
            payload_rate = toml::Value::Float(self.p2p.payload_rate_per_sec),
            payload_burst = self.p2p.payload_burst,
            max_conn = self.p2p.max_connections,
            max_conn_peer = self.p2p.max_connections_per_peer,
            max_pend_in = self.p2p.max_pending_incoming,
            max_pend_out = self.p2p.max_pending_outgoing,
            board_max = self.p2p.board_max_entries,
            board_max_mib = self.p2p.board_max_mib,
            max_conn_in = self.p2p.max_connections_incoming,
            send_queue = self.p2p.send_queue_per_peer,
            ix_ttl = self.index.ttl_secs,
            ix_republish = self.index.republish_secs,
            ix_rate = toml::Value::Float(self.index.rate_per_sec),
            ix_burst = self.index.burst,
            ix_keys = self.index.max_keys_per_provider,
            ix_providers = self.index.max_providers,
            ix_fetches = self.index.search_max_fetches,
            ix_timeout = self.index.search_timeout_secs,
            ix_search = match self.index.search {
                skillbox_peers::index::SearchScope::Board => "board",
                skillbox_peers::index::SearchScope::Category => "category",
                skillbox_peers::index::SearchScope::Terms => "terms",
            },
            ix_live = list(&self.index.live_categories),
            ix_sync = self.index.board_sync,
            ix_advert_rate = toml::Value::Float(self.index.advert_rate_per_sec),
            ix_advert_burst = self.index.advert_burst,
            boxes = list(&self.boxes.accept),
            insecure = self.boxes.allow_insecure_dev,
            box_pins = self.render_box_pins(),
            advertise = sch.advertise_secs,
            advance = sch.advance_secs,
            sweep = sch.sweep_secs,
            stall = sch.stall_limit_secs,
            ttl = sch.board_ttl_secs,
            namespace = s(&self.agents.namespace),
            max_skill = self.limits.max_skill_bytes,
            max_source = self.limits.max_source_bytes,
            max_request = self.calls.max_request_bytes,
            output_max = self.calls.output_max_bytes,
            expiry = self.calls.expiry_secs,
            policy = self.render_policy(),
            nesting = self.agents.department_nesting,
            max_roster = self.agents.max_roster_entries,
            max_departments = self.agents.max_departments,
            operator = s(&self.tenants.operator),
            tokens = self
                .tenants
                .tokens
                .iter()
                .map(TenantToken::render)
                .collect::<String>(),
        )
    }
}

impl Config {
    /// The `[policy]` tables as TOML (rules, default, admission), through serde so what is
    /// written is exactly what parses back.
    fn render_policy(&self) -> String {
        #[derive(Serialize)]
        struct Wrap<'a> {
            policy: &'a PolicyConfig,
        }
        let mut text = toml::to_string(&Wrap {
            policy: &self.policy,
        })
        .unwrap_or_else(|e| format!("# policy could not be rendered: {e}\n"));
        text.push_str(
            "# admission: calls_per_minute is per calling peer; allow_peers (when set) and\n\
             # deny_peers list peer ids.\n",
        );
        text
    }
}

/// TOML literals for [`Config::render`]: a string, a list of strings (escaped by `toml`).
mod toml_text {
    pub(super) fn s(v: &str) -> String {
        toml::Value::String(v.to_owned()).to_string()
    }
    pub(super) fn list(v: &[String]) -> String {
        let items: Vec<String> = v.iter().map(|x| s(x)).collect();
        format!("[{}]", items.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default config with `from` replaced by `to`, which must be refused: the refusal's words.
    fn refusal(from: &str, to: &str) -> String {
        let text = Config::default().render().replace(from, to);
        match Config::parse(&text, Path::new("c.toml")) {
            Ok(_) => panic!("{to:?} in place of {from:?} was accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn rendered_default_parses_back_to_itself() {
        let mut c = Config::default();
        c.p2p.bootstrap = vec!["/ip4/127.0.0.1/tcp/4001".into()];
        c.boxes.accept = vec!["http://127.0.0.1:7430".into()];
        c.boxes.allow_insecure_dev = true;
        c.policy.rules.push(skillbox_calls::policy::Rule {
            side: skillbox_calls::policy::Side::Owner,
            peer: skillbox_calls::policy::Pattern("12D3*".into()),
            skill: skillbox_calls::policy::Pattern::any(),
            sources: Some(vec!["notes".into()]),
            sources_within: Some(vec!["notes".into(), "diary".into()]),
            decision: skillbox_calls::Decision::Ask,
            surface: None,
            told: None,
        });
        c.policy.admission.deny_peers.push("12D3KooWbad".into());
        c.agents.department_nesting = false;
        c.p2p.max_connections = 9;
        c.p2p.board_max_entries = 1234;
        c.p2p.board_max_mib = 99;
        c.p2p.max_connections_incoming = 5;
        c.p2p.send_queue_per_peer = 77;
        c.p2p.dial_private_addresses = true;
        c.tenants.operator = "ops \"team\"".into();
        c.tenants.tokens = vec![
            TenantToken {
                tenant: "acme".into(),
                workspace: Some("sales".into()),
                digest: format!("sha256:{}", "ab".repeat(32)),
            },
            TenantToken {
                tenant: "globex".into(),
                workspace: None,
                digest: format!("sha256:{}", "cd".repeat(32)),
            },
        ];
        let text = c.render();
        let back = Config::parse(&text, Path::new("config.toml")).expect("rendered config parses");
        assert_eq!(back, c);
    }

    /// `p2p.dial_private_addresses`: written out off, read back as written, off when a config
    /// from before it leaves it out, and a value that is not a boolean refused by name.
    #[test]
    fn dial_private_addresses_is_off_unless_set_and_must_be_a_boolean() {
        let shipped = Config::default().render();
        assert!(
            shipped.contains("\ndial_private_addresses = false\n"),
            "{shipped}"
        );
        let on = shipped.replace(
            "dial_private_addresses = false",
            "dial_private_addresses = true",
        );
        let c = Config::parse(&on, Path::new("c.toml")).expect("parses");
        assert!(c.p2p.dial_private_addresses);
        let older = shipped.replace("dial_private_addresses = false\n", "");
        let c = Config::parse(&older, Path::new("c.toml")).expect("parses");
        assert!(!c.p2p.dial_private_addresses);
        let err = refusal(
            "dial_private_addresses = false",
            "dial_private_addresses = 1",
        );
        assert!(err.contains("dial_private_addresses"), "{err}");
    }

    #[test]
    fn boxes_off_loopback_need_https_and_a_pin() {
        let key = "cd".repeat(32);
        let mut c = Config::default();
        for by_name in ["http://localhost:7480", "http://LocalHost.:7480/"] {
            c.boxes.accept = vec![by_name.into()];
            let err = c.check().expect_err("a box named localhost");
            assert!(err.contains("not localhost"), "{err}");
        }
        c.boxes.accept = vec!["http://10.0.0.5:7480".into()];
        let err = c.check().expect_err("http off loopback");
        assert!(err.contains("https"), "{err}");
        c.boxes.accept = vec!["https://box.example:7480".into()];
        let err = c.check().expect_err("no pin");
        assert!(err.contains("[[boxes.pins]]"), "{err}");
        c.boxes.pins = vec![BoxPin {
            url: "https://box.example:7480/".into(),
            platform: "insecure-dev".into(),
            measurements: vec!["ab".repeat(48)],
            key: None,
            policy: None,
            release_log: None,
            gpu: None,
        }];
        let err = c.check().expect_err("dev pin without key");
        assert!(err.contains("key"), "{err}");
        c.boxes.pins[0].key = Some(key.clone());
        c.check().expect("pinned");
        c.boxes.pins[0].url = "https://other.example".into();
        let err = c.check().expect_err("pin of a box not accepted");
        assert!(err.contains("not in boxes.accept"), "{err}");
        c.boxes.pins[0].url = "https://box.example:7480".into();
        c.boxes
            .provider_hosts
            .insert("openai".into(), vec!["https://llm.example/v1".into()]);
        c.check().expect("valid");
        // A hardware box: its measurements, or a policy table the attest crate reads.
        c.boxes.accept.push("https://snp.example".into());
        c.boxes.pins.push(BoxPin {
            url: "https://snp.example".into(),
            platform: "sev-snp".into(),
            measurements: vec!["7a".repeat(48)],
            key: None,
            policy: None,
            release_log: None,
            gpu: None,
        });
        // By its measurement alone it names no TCB floor: refused, naming the field.
        let err = c.check().expect_err("an SEV-SNP pin without its floor");
        assert!(err.contains("policy.min_tcb is required"), "{err}");
        c.boxes.pins[1].policy = Some(
            toml::from_str("min_tcb = { bootloader = 3, tee = 0, snp = 8, microcode = 115 }")
                .expect("toml"),
        );
        c.check()
            .expect("snp pinned by measurement, with its floor");
        // GPU golden values: read by the attest crate; a table pinning nothing, or an unknown
        // key, is refused naming the pin and `gpu`, and the pin renders back as it was read.
        c.boxes.pins[1].gpu = Some(
            toml::from_str(&format!(
                "measurements = [{{ index = 2, values = [\"{}\"] }}]",
                "5e".repeat(48)
            ))
            .expect("toml"),
        );
        c.check().expect("gpu pinned");
        assert!(c.boxes.pins[1].render().contains("gpu = "));
        let again = Config::parse(&c.render(), Path::new("config.toml")).expect("round trip");
        assert_eq!(again.boxes.pins[1].gpu, c.boxes.pins[1].gpu);
        for bad in [
            "measurements = []",
            "measurements = [{ index = 2, values = [\"zz\"] }]",
            "golden = 1",
        ] {
            c.boxes.pins[1].gpu = Some(toml::from_str(bad).expect("toml"));
            let err = c.check().expect_err(bad);
            assert!(
                err.contains("boxes.pins #1 (sev-snp): gpu:"),
                "{bad}: {err}"
            );
        }
        c.boxes.pins[1].gpu = None;
        c.boxes.pins[1].measurements = vec!["7a".into()];
        let err = c.check().expect_err("short measurement");
        assert!(err.contains("boxes.pins #1 (sev-snp)"), "{err}");
        let floor = "min_tcb = { bootloader = 3, tee = 0, snp = 8, microcode = 115 }";
        c.boxes.pins[1].policy = Some(
            toml::from_str::<toml::Value>(&format!(
                "measurements = [\"{}\"]\nallow_vlek = false\n{floor}",
                "7a".repeat(48)
            ))
            .expect("toml"),
        );
        c.check().expect("snp pinned by policy");
        c.boxes.pins[1].policy =
            Some(toml::from_str(&format!("measurements = []\n{floor}")).expect("toml"));
        assert!(c.check().is_err(), "a policy pinning nothing is refused");
        c.boxes.pins[1].policy = Some(
            toml::from_str::<toml::Value>(&format!(
                "measurements = [\"{}\"]\nallow_vlek = false\n{floor}",
                "7a".repeat(48)
            ))
            .expect("toml"),
        );
        // And it renders and parses back.
        let back = Config::parse(&c.render(), Path::new("c.toml")).expect("parses");
        assert_eq!(back, c);
        c.boxes.provider_hosts.insert("nope!".into(), vec![]);
        assert!(c.check().expect_err("bad id").contains("provider id"));
        // Loopback boxes need neither (development), and `http://127.0.0.1@evil` is not loopback.
        let mut d = Config::default();
        d.boxes.accept = vec!["http://127.0.0.1:7480".into(), "http://[::1]:7480".into()];
        d.check().expect("loopback");
        d.boxes.accept = vec!["http://127.0.0.1@evil.example".into()];
        assert!(d.check().is_err());
    }

    /// A TDX pin naming the firmware (MRTD) alone accepted any kernel, initrd and box binary
    /// its host booted under that firmware: the node's config check refuses it, naming the
    /// entry and the field, and takes it once RTMR1 and RTMR2 are pinned.
    #[test]
    fn a_tdx_pin_of_the_firmware_alone_is_refused_naming_the_field() {
        use skillbox_testkit::floors::{
            DCAPQVL_TDX_EVAL, DCAPQVL_TDX_IDENTITY, DCAPQVL_TDX_MR_TD, DCAPQVL_TDX_RTMR0,
            DCAPQVL_TDX_RTMR1, DCAPQVL_TDX_RTMR2,
        };
        let mut c = Config::default();
        c.boxes.accept = vec!["https://tdx.example".into()];
        c.boxes
            .provider_hosts
            .insert("openai".into(), vec!["https://llm.example/v1".into()]);
        let floor = format!("min_tcb_eval_data_number = {DCAPQVL_TDX_EVAL}\n");
        let firmware = format!("[[accepted]]\nmr_td = \"{DCAPQVL_TDX_MR_TD}\"\n");
        let pin = |policy: &str| BoxPin {
            url: "https://tdx.example".into(),
            platform: "tdx".into(),
            measurements: vec![DCAPQVL_TDX_IDENTITY.into()],
            key: None,
            policy: Some(toml::from_str(policy).expect("toml")),
            release_log: None,
            gpu: None,
        };
        c.boxes.pins = vec![pin(&format!("{floor}{firmware}"))];
        let err = c.check().expect_err("a TDX pin of MRTD alone");
        assert!(err.contains("boxes.pins #0 (tdx)"), "{err}");
        assert!(err.contains("accepted[0].rtmr1 is required"), "{err}");
        c.boxes.pins = vec![pin(&format!(
            "{floor}{firmware}rtmr1 = \"{DCAPQVL_TDX_RTMR1}\"\n"
        ))];
        let err = c.check().expect_err("a TDX pin without RTMR2");
        assert!(err.contains("accepted[0].rtmr2 is required"), "{err}");
        let boot_chain =
            format!("rtmr1 = \"{DCAPQVL_TDX_RTMR1}\"\nrtmr2 = \"{DCAPQVL_TDX_RTMR2}\"\n");
        c.boxes.pins = vec![pin(&format!("{floor}{firmware}{boot_chain}"))];
        // Review 26 V2: the ACPI tables the host hands the box (RTMR0) too.
        let err = c.check().expect_err("a TDX pin without RTMR0");
        assert!(err.contains("accepted[0].rtmr0 is required"), "{err}");
        c.boxes.pins = vec![pin(&format!(
            "{floor}{firmware}rtmr0 = \"{DCAPQVL_TDX_RTMR0}\"\n{boot_chain}"
        ))];
        c.check().expect("a TDX pin of its boot chain");
    }

    #[test]
    fn guard_settings_are_checked_and_give_the_spec() {
        let mut c = Config::default();
        let openai: skillbox_skill::ProviderId = "openai".parse().expect("id");
        assert_eq!(
            c.guard.spec_for(&openai),
            skillbox_guard::GuardSpec::default_for(false)
        );
        assert_eq!(
            c.guard.spec_for(&skillbox_skill::ProviderId::Local),
            skillbox_guard::GuardSpec::default_for(true)
        );
        c.guard.action = "regenerate".into();
        assert_eq!(
            c.guard.spec_for(&openai).action,
            skillbox_guard::Action::Regenerate
        );
        c.guard.action = "shred".into();
        assert!(c.check().expect_err("action").contains("guard.action"));
        c.guard.action = "auto".into();
        c.guard.ngram = 99;
        assert!(c.check().expect_err("ngram").contains("guard.ngram"));
    }

    /// A duration long enough to overflow a timer's deadline is refused by name when the
    /// file is read, not met as a panic at the first search (`index.search_timeout_secs`), a
    /// peer's provider record (`index.ttl_secs`) or start (`index.republish_secs`).
    #[test]
    fn durations_past_ten_years_are_refused_by_name() {
        let huge = "9223372036854775807";
        for (shipped, key) in [
            ("search_timeout_secs = 10", "index.search_timeout_secs"),
            ("ttl_secs = 10800", "index.ttl_secs"),
            ("idle_timeout_secs = 300", "p2p.idle_timeout_secs"),
            ("board_ttl_secs = 180", "schedules.board_ttl_secs"),
        ] {
            let name = shipped.split(" = ").next().expect("name");
            let err = refusal(shipped, &format!("{name} = {huge}"));
            assert!(err.contains(key) && err.contains("ten years"), "{err}");
        }
        let republish = refusal(
            "republish_secs = 3600",
            &format!("republish_secs = {}", MAX_SETTING_SECS + 1),
        );
        assert!(republish.contains("index.republish_secs"), "{republish}");
    }

    #[test]
    fn zero_connection_limits_are_refused_by_name() {
        let err = refusal(
            "max_connections_per_peer = 3",
            "max_connections_per_peer = 0",
        );
        assert!(err.contains("p2p.max_connections_per_peer"), "{err}");
        let err = refusal("board_max_entries = 100000", "board_max_entries = 0");
        assert!(err.contains("p2p.board_max_entries"), "{err}");
        let err = refusal(
            "max_connections_incoming = 192",
            "max_connections_incoming = 257",
        );
        assert!(err.contains("p2p.max_connections_incoming"), "{err}");
        let err = refusal("send_queue_per_peer = 4096", "send_queue_per_peer = 0");
        assert!(err.contains("p2p.send_queue_per_peer"), "{err}");
        let err = refusal("board_max_mib = 256", "board_max_mib = 0");
        assert!(err.contains("p2p.board_max_mib"), "{err}");
        let err = refusal(
            "board_max_mib = 256",
            "board_max_mib = 18446744073709551615",
        );
        assert!(err.contains("p2p.board_max_mib"), "{err}");
    }

    #[test]
    fn index_settings_round_trip_and_bad_ones_are_refused_by_name() {
        let shipped = Config::default().render();
        assert!(
            shipped.contains("\n[index]\n") && shipped.contains("\nttl_secs = 10800\n"),
            "{shipped}"
        );
        let set = shipped
            .replace("ttl_secs = 10800", "ttl_secs = 900")
            .replace("republish_secs = 3600", "republish_secs = 300")
            .replace("board_sync = true", "board_sync = false")
            .replace("search = \"category\"", "search = \"terms\"");
        let c = Config::parse(&set, Path::new("c.toml")).expect("set values parse");
        assert_eq!((c.index.ttl_secs, c.index.republish_secs), (900, 300));
        assert!(!c.index.board_sync);
        assert_eq!(c.index.search, skillbox_peers::index::SearchScope::Terms);
        assert_eq!(
            Config::parse(&c.render(), Path::new("c.toml")).expect("again"),
            c
        );
        // A config written before the table existed still parses, to the peers defaults.
        let start = shipped.find("\n[index]\n").expect("index table");
        let end = shipped[start + 1..].find("\n[").expect("next table") + start + 1;
        let old = format!("{}{}", &shipped[..start], &shipped[end..]);
        let c = Config::parse(&old, Path::new("c.toml")).expect("no [index]");
        assert_eq!(c.index, IndexConfig::default());
        for (from, to, key) in [
            ("ttl_secs = 10800", "ttl_secs = 0", "index.ttl_secs"),
            ("ttl_secs = 10800", "ttl_secs = 3600", "index.ttl_secs"),
            (
                "republish_secs = 3600",
                "republish_secs = 0",
                "index.republish_secs",
            ),
            ("\nburst = 256", "\nburst = 0", "index.burst"),
            (
                "\nrate_per_sec = 1.0",
                "\nrate_per_sec = -1.0",
                "index.rate_per_sec",
            ),
            (
                "\nrate_per_sec = 1.0",
                "\nrate_per_sec = nan",
                "index.rate_per_sec",
            ),
            (
                "advert_rate_per_sec = 0.5",
                "advert_rate_per_sec = 0.0",
                "index.advert_rate_per_sec",
            ),
            (
                "search_max_fetches = 32",
                "search_max_fetches = 0",
                "index.search_max_fetches",
            ),
            (
                "search_timeout_secs = 10",
                "search_timeout_secs = 0",
                "index.search_timeout_secs",
            ),
            (
                "live_categories = [\"",
                "live_categories = [\"gossip\", \"",
                "index.live_categories",
            ),
            ("board_sync = true", "board_sync = 1", "board_sync"),
            ("search = \"category\"", "search = \"words\"", "search"),
            (
                "board_sync = true",
                "board_sync = true\nshards = 4",
                "shards",
            ),
        ] {
            assert!(shipped.contains(from), "{from}");
            let text = shipped.replacen(from, to, 1);
            let err = Config::parse(&text, Path::new("c.toml")).expect_err(key);
            assert!(err.to_string().contains(key), "{key}: {err}");
        }
    }

    #[test]
    fn bad_tenant_tokens_are_refused_by_name() {
        let good = format!("sha256:{}", "ab".repeat(32));
        for (block, needle) in [
            (
                format!("[[tenants.tokens]]\ntenant = \"\"\ndigest = \"{good}\"\n"),
                "tenant",
            ),
            (
                "[[tenants.tokens]]\ntenant = \"a\"\ndigest = \"sha256:xyz\"\n".to_owned(),
                "digest",
            ),
            (
                format!(
                    "[[tenants.tokens]]\ntenant = \"a\"\ndigest = \"{good}\"\n[[tenants.tokens]]\ntenant = \"b\"\ndigest = \"{good}\"\n"
                ),
                "twice",
            ),
            (
                format!("[[tenants.tokens]]\ntenant = \"a\"\ntoken = \"x\"\ndigest = \"{good}\"\n"),
                "token",
            ),
            // The operator's tenant id (default `local`): its token would own the operator's
            // roster and org chart.
            (
                format!("[[tenants.tokens]]\ntenant = \"local\"\ndigest = \"{good}\"\n"),
                "operator's own",
            ),
        ] {
            let text = format!("{}\n{block}", Config::default().render());
            let err = Config::parse(&text, Path::new("c.toml")).expect_err(needle);
            assert!(err.to_string().contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let err = refusal("mdns = false", "mdns = false\nmdsn = true");
        assert!(err.contains("mdsn"), "{err}");
    }

    #[test]
    fn zero_interval_and_bad_namespace_refused() {
        let err = refusal("sweep_secs = 30", "sweep_secs = 0");
        assert!(err.contains("schedules.sweep_secs"), "{err}");
        let err = refusal("\"local.skillbox\"", "\"Local..x\"");
        assert!(err.contains("agents.namespace"), "{err}");
    }

    /// A program valid past the box's default horizon (1 h) is refused at open
    /// (`expires_too_far`), so the node never builds one: and the rendered default parses.
    #[test]
    fn call_expiry_stays_within_the_boxs_horizon() {
        let d = Config::default();
        assert!(d.calls.expiry_secs <= MAX_CALL_EXPIRY_SECS);
        assert!(MAX_CALL_EXPIRY_SECS < skillbox_jc::run::BoxConfig::default().max_program_ttl_secs);
        let err = refusal("expiry_secs = 900", "expiry_secs = 3600");
        assert!(err.contains("calls.expiry_secs"), "{err}");
        let text = d
            .render()
            .replace("expiry_secs = 900", "expiry_secs = 3300");
        Config::parse(&text, Path::new("c.toml")).expect("within it");
    }
}
