//! The calls driver (§7): runs the pure state machines of `skillbox-calls` against the world.
//!
//! One rule for every event, whatever its source (a payload, an API request, a box answer, the
//! schedules): under the call's lock, load the row, [`skillbox_calls::step`], **persist** the new
//! record (with what the event brought: a co-signed program, a box URL, a receipt, the answer)
//! in one transaction, release the lock, then execute the actions. Each action runs as its own
//! task, at most one of a kind per call at a time, and feeds its outcome back as an event. An
//! action that fails for a passing reason (a box not answering) feeds nothing: the `advance`
//! schedule re-emits it with back-off; one that fails for good becomes a failure event.
//!
//! Material never passes through here: stakes are sealed on a blocking thread straight from
//! [`crate::sources::Sources::apply_for_stake`] (caller) or [`crate::sources::Sources::apply`]
//! (owner) into the HPKE sealer, and the answer goes straight from the opened result into the
//! caller's source store. Only closed codes cross to the peer (`call.failed {code, message}`
//! with the code's fixed words), never local detail.
//!
//! Where things are:
//! - `driver.rs` — the one rule (step, persist, act), dispatch, the schedules' pass;
//! - `start.rs` — a call's start as caller: selection, the box, the program; the intent;
//! - `inbound.rs` — payloads from peers, and the owner's admission (after which alone an owner
//!   row is written);
//! - `actions.rs` — the action executors (payloads out, the box, stakes, submit, outcome);
//! - `consent.rs` — approvals, what they disclose, `--remember`;
//! - `program.rs` (pure), `boxes.rs`, `records.rs`.

mod actions;
pub mod boxes;
mod consent;
pub mod coverage;
mod driver;
mod inbound;
mod ledger;
pub mod program;
pub mod records;
mod start;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ed25519_dalek::SigningKey;
use serde::Serialize;
use serde_json::Value;
use skillbox_calls::machine::{self, Event, Role, State, Timing};
use skillbox_calls::{RateBuckets, SelectionError};
use skillbox_jc::JcError;
use skillbox_jc::attest::{VerifiedRun, VerifiedRunRecord};
use skillbox_jc::dsse::key_hex;
use skillbox_peers::index::SearchScope;
use skillbox_peers::{AcceptedBox, OfferedSkill, PayloadReceiver, PayloadTransport, PeerId};
use zeroize::Zeroizing;

use crate::config::{CallsConfig, CeilingsConfig, PolicyConfig};
use crate::error::{NodeError, Result};
use crate::skills::Skills;
use crate::sources::Sources;
use crate::store::Store;
use boxes::Boxes;
pub use consent::{DecidedBy, Disclosure};
use records::{CallRow, Filter};
pub use start::StartedBy;

/// A call on one side.
type Key = (String, Role);

/// What a peer offers right now, as the caller needs it to build a program.
#[derive(Debug, Clone)]
pub struct Offered {
    pub skill: OfferedSkill,
    pub boxes: Vec<AcceptedBox>,
    /// The owner's node key (hex), from its signed advert.
    pub public_key: String,
}

/// Where the caller looks up the board (the network's, or a fixed one in tests).
pub trait Directory: Send + Sync {
    fn offered(&self, peer: &str, skill: &str) -> Option<Offered>;
    /// Every offered skill on the board right now.
    fn rows(&self) -> Vec<skillbox_peers::BoardRow>;
    /// Every offered skill on the board right now, lent to `f` with its required sources (the
    /// intent's candidates): the network's board is read under its lock a stretch at a time,
    /// not copied; a fixed board lends its rows.
    fn each_row(&self, f: &mut dyn FnMut(&skillbox_calls::intent::Candidate<'_>, &[String])) {
        for r in self.rows() {
            f(&(&r).into(), &r.required_sources);
        }
    }
    /// Search the skill index for `text`, caching the verified adverts of the providers it
    /// names on the board (a fixed board has nothing to search).
    fn search<'a>(
        &'a self,
        _text: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(std::future::ready(()))
    }
    /// What a search may tell DHT peers of a request (`index.search`); a fixed board searches
    /// nothing.
    fn search_scope(&self) -> SearchScope {
        SearchScope::Board
    }
}

/// What the board is asked before the skill index, under a search scope ([`before_the_index`]).
#[derive(Debug)]
pub enum BeforeTheIndex {
    /// Search the index, then rank the board (which the search may have added to).
    Search,
    /// Rank the board; no search.
    Rank,
    /// The board's pick, made while deciding (`category`): nothing is searched, so the board
    /// is as it was ranked, and ranking it again would only read it twice more for the same.
    Picked(skillbox_calls::intent::Pick),
}

/// Whether a request goes to the skill index under `scope`, given what the board offers for it
/// now. `terms`: always (the index may name a better provider than the board holds, and the
/// operator chose to tell DHT peers the request's words). `category`: only when the board has
/// no candidate above the intent's threshold, so a request the board answers sends nothing
/// anywhere, and one it cannot sends its category key alone; when it has one, that pick is
/// handed back. `board`: never. The candidates are what `each` hands out (the board lent a
/// stretch at a time under its lock, never copied; [`skillbox_calls::intent::pick_over`]),
/// read only under `category`.
pub fn before_the_index(
    scope: SearchScope,
    text: &str,
    each: impl FnMut(&mut dyn FnMut(&skillbox_calls::intent::Candidate<'_>)),
) -> BeforeTheIndex {
    match scope {
        SearchScope::Board => BeforeTheIndex::Rank,
        SearchScope::Category => match skillbox_calls::intent::pick_over(text, each) {
            Ok(pick) => BeforeTheIndex::Picked(pick),
            Err(_) => BeforeTheIndex::Search,
        },
        SearchScope::Terms => BeforeTheIndex::Search,
    }
}

/// Whether [`before_the_index`] searches the index (`GET /board?q=`, which lists rows, not a
/// pick).
pub fn index_needed(
    scope: SearchScope,
    text: &str,
    each: impl FnMut(&mut dyn FnMut(&skillbox_calls::intent::Candidate<'_>)),
) -> bool {
    matches!(before_the_index(scope, text, each), BeforeTheIndex::Search)
}

impl Directory for skillbox_peers::PeersHandle {
    fn offered(&self, peer: &str, skill: &str) -> Option<Offered> {
        let peer: PeerId = peer.parse().ok()?;
        self.with_board(|b, now| {
            let advert = b.advert(&peer, now)?;
            let s = advert.skills.iter().find(|s| s.name == skill)?.clone();
            Some(Offered {
                skill: s,
                boxes: advert.boxes.clone(),
                public_key: advert.public_key.clone(),
            })
        })
    }
    fn rows(&self) -> Vec<skillbox_peers::BoardRow> {
        self.board()
    }
    fn each_row(&self, f: &mut dyn FnMut(&skillbox_calls::intent::Candidate<'_>, &[String])) {
        crate::peering::walk(self, None, usize::MAX, |r| {
            f(&r.into(), &r.skill.required_sources);
            true
        });
    }
    fn search<'a>(
        &'a self,
        text: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            // A failed search leaves the board as it was: the intent ranks what it holds.
            if let Err(e) = skillbox_peers::PeersHandle::search(self, text).await {
                tracing::debug!(error = %e, "skill index search failed");
            }
        })
    }
    fn search_scope(&self) -> SearchScope {
        skillbox_peers::PeersHandle::search_scope(self)
    }
}

/// Why a call could not be started or acted on. Each has a stable code and an HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Selection(#[from] SelectionError),
    #[error("peer {peer} does not offer a skill {skill:?} on the board right now")]
    NotOnBoard { peer: String, skill: String },
    /// Defence in depth: the board refuses such adverts, but a directory is only a trait.
    #[error("peer {peer}'s skill {skill:?} asks for a source no call may stake: refused")]
    HostileAdvert { peer: String, skill: String },
    #[error("no box both sides accept: this node accepts {ours}, peer {peer} advertises {theirs}")]
    NoCommonBox {
        peer: String,
        ours: String,
        theirs: String,
    },
    #[error(
        "no box both sides accept offers provider {provider} (boxes {boxes}): start one that has it, or accept one"
    )]
    NoBoxForProvider { provider: String, boxes: String },
    // The name as every surface shows it: an older node's source may be named by a pasted key.
    #[error("source {:?} cannot be staked: {why}", crate::sources::shown_name(.name))]
    NotShareable { name: String, why: &'static str },
    #[error("{field}: {size} is over the owner's limit of {limit} for this skill")]
    OverOwnerLimit {
        field: &'static str,
        size: u64,
        limit: u64,
    },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("call {0:?} not found")]
    NotFound(String),
    #[error("call {id} is {state}, not awaiting consent")]
    NotAwaitingConsent { id: String, state: &'static str },
    /// The decision answers a question the call no longer asks (`consent_by`).
    #[error(
        "the call asks another question now (its box, provider, sources or request changed since the one decided on): nothing was decided; read the question again and decide on it"
    )]
    QuestionChanged,
    /// `calls.elicitation_consent = false`: an agent's client may not answer consent.
    #[error(
        "this node takes consent only from its human (dashboard or terminal), not from an agent's client"
    )]
    ElicitationOff,
    #[error("the program cannot be built: {0}")]
    Program(JcError),
    #[error("{0}")]
    NoPick(#[from] skillbox_calls::intent::NoPick),
    #[error(transparent)]
    Node(#[from] NodeError),
}

impl CallError {
    pub fn code(&self) -> &'static str {
        match self {
            CallError::Selection(e) => e.code(),
            CallError::NotOnBoard { .. } => "skill_not_offered",
            CallError::HostileAdvert { .. } => "advert_refused",
            CallError::NoCommonBox { .. } => "no_common_box",
            CallError::NoBoxForProvider { .. } => "no_box_for_provider",
            CallError::NotShareable { .. } => "source_not_shareable",
            CallError::OverOwnerLimit { .. } => "over_owner_limit",
            CallError::Invalid { .. } => "validation_error",
            CallError::NotFound(_) => "not_found",
            CallError::NotAwaitingConsent { .. } => "not_awaiting_consent",
            CallError::QuestionChanged => "question_changed",
            CallError::ElicitationOff => "elicitation_consent_off",
            CallError::Program(_) => "program_invalid",
            CallError::NoPick(_) => "no_offered_skill",
            CallError::Node(_) => "internal",
        }
    }
    pub fn status(&self) -> u16 {
        match self {
            CallError::Selection(e) => e.http_status(),
            CallError::NotOnBoard { .. }
            | CallError::HostileAdvert { .. }
            | CallError::NoCommonBox { .. }
            | CallError::NoBoxForProvider { .. }
            | CallError::NotAwaitingConsent { .. }
            | CallError::QuestionChanged
            | CallError::NoPick(_) => 409,
            CallError::OverOwnerLimit { .. } => 422,
            CallError::Invalid { .. } | CallError::Program(_) | CallError::NotShareable { .. } => {
                400
            }
            CallError::NotFound(_) => 404,
            CallError::ElicitationOff => 403,
            CallError::Node(_) => 500,
        }
    }
}

/// `POST /calls`.
#[derive(Debug, Clone)]
pub struct StartCall {
    pub peer: String,
    pub skill: String,
    pub request: Zeroizing<String>,
    /// `None`: the skill's requiredSources this node holds as shareable. `Some([])`: none.
    pub sources: Option<Vec<String>>,
}

/// A call as the API shows it. The answer only on the caller's side, only when asked for one.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallView {
    pub id: String,
    pub role: &'static str,
    pub peer: String,
    pub skill: String,
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(rename = "box", skip_serializing_if = "Option::is_none")]
    pub box_url: Option<String>,
    /// The sources the call applies, each serialized as `sources::shown_name` shows it (a name
    /// an older node took from a pasted provider key is masked: this view is read at a
    /// terminal, by an agent's client, and kept); in process the stored names, which the
    /// dashboard masks as it shows them.
    #[serde(serialize_with = "crate::sources::serialize_shown_names")]
    pub sources: Vec<String>,
    pub created_at: u64,
    pub progressed_at: u64,
    pub expires_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<machine::Failure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// For a call awaiting consent: exactly what approving it discloses, to whom, through what.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disclosure: Option<Disclosure>,
    /// For a call awaiting consent: the digest of the question it asks (`sha256:` and 64 hex
    /// digits, over everything `disclosure` shows, the call, its side and its run). A decision
    /// (`POST /approvals/{id}`) names the one it answers and is refused `question_changed`
    /// once the call asks another.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub question: Option<String>,
    /// The box as this side verified it (once the run's attestation passed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attested: Option<Attested>,
    /// The call's history of box moves: each time its run went to another box than the one
    /// chosen, or to a new run after its box was lost before the caller's stake was taken
    /// (`run`: the run left), and why (`box_unreachable`, `box_busy`, `box_refused`; the
    /// owner's `caller_moved`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<machine::BoxMove>,
}

/// What this side verified of the call's box: the platform, the measurement it pinned, and
/// whether the platform isolates the run from the box's operator.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attested {
    pub platform: String,
    pub measurement: String,
    pub hardware_isolation: bool,
    /// The platform's TCB verdict as this side's verifier put it (TDX status, SEV-SNP reported
    /// TCB); absent where the platform has none (insecure-dev, Nitro).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcb_status: Option<String>,
}

impl CallView {
    fn of(row: &CallRow) -> CallView {
        let c = &row.call;
        CallView {
            id: c.id.clone(),
            role: records::role_str(c.role),
            peer: c.peer.clone(),
            skill: c.skill.clone(),
            state: c.state.as_str(),
            program_hash: c.program_hash.clone(),
            run_id: c.run_id.clone(),
            box_url: row.box_url.clone(),
            sources: row.sources.clone(),
            created_at: c.created_at_ms,
            progressed_at: c.progressed_at_ms,
            expires_at: c.expires_at_ms,
            failure: c.failure.clone(),
            receipt: row.receipt.clone(),
            answer: None,
            moves: c.moves.clone(),
            // Filled in by `view_of`, which reads the request an agent's question shows.
            disclosure: None,
            question: None,
            attested: row
                .verified
                .clone()
                .and_then(|v| serde_json::from_value::<VerifiedRunRecord>(v).ok())
                .map(|v| Attested {
                    platform: v.platform,
                    measurement: v.measurement,
                    hardware_isolation: !v.no_hardware_isolation,
                    tcb_status: v.tcb_status,
                }),
        }
    }
}

/// Everything the driver needs from the node.
pub struct CallsDeps {
    pub store: Arc<Store>,
    pub sources: Sources,
    pub skills: Skills,
    /// The node key's 32-byte seed (Ed25519).
    pub node_seed: [u8; 32],
    pub node_id: String,
    pub transport: Arc<dyn PayloadTransport>,
    pub directory: Arc<dyn Directory>,
    pub boxes: Arc<Boxes>,
    pub timing: Timing,
    pub settings: CallsConfig,
    pub ceilings: CeilingsConfig,
    /// The guard this owner binds into its skills' programs.
    pub guard: crate::config::GuardConfig,
    pub policy: PolicyConfig,
    /// Where call and box figures go (`GET /metrics`).
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// A run attestation the caller holds for `call.session`: the run, the caller's half of the
/// joint nonce the box attested, and the attestation (public: what any asker of the box gets).
struct Forward {
    run_id: String,
    caller_half: String,
    attestation: skillbox_jc::attest::Attestation,
}

struct Inner {
    store: Arc<Store>,
    sources: Sources,
    skills: Skills,
    signing: SigningKey,
    /// The node key as the X25519 pair a box seals this owner's notes to, derived once rather
    /// than for every note opened (a scalar multiplication each). `None` only if the key's
    /// scalar were not an X25519 secret, which every 32 bytes are.
    note_key: Option<skillbox_jc::seal::HpkeKeyPair>,
    node_key_hex: String,
    node_id: String,
    transport: Arc<dyn PayloadTransport>,
    directory: Arc<dyn Directory>,
    boxes: Arc<Boxes>,
    timing: Timing,
    settings: CallsConfig,
    ceilings: CeilingsConfig,
    guard: crate::config::GuardConfig,
    policy: RwLock<PolicyConfig>,
    buckets: Mutex<RateBuckets>,
    locks: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// The actions running now, by call, kind and the run they act on (an action for a run the
    /// call left does not hold up the same action for its new run).
    inflight: Mutex<HashSet<(Key, &'static str, Option<String>)>>,
    verified: Mutex<HashMap<Key, VerifiedRun>>,
    /// Halves of the joint attestation nonce (`jc::client::joint_nonce`), in memory only: the
    /// owner's own half of each call it accepted (sent in `call.accepted`), and on the caller's
    /// side the owner's half it received. Lost in a restart, the optimisation is lost with it:
    /// the caller opens with a nonce of its own and the owner asks the box itself, as before.
    nonce_halves: Mutex<HashMap<Key, String>>,
    /// The caller's run attestation for the joint nonce, with its half, kept for `call.session`
    /// so the owner can check it without asking the box again (issue 33).
    forwards: Mutex<HashMap<Key, Forward>>,
    /// The rows of open calls as their last step committed them: a step reads its call from
    /// here, not from the store (parsing the stored record was ~5 % of a node's CPU per call,
    /// issue 33). Only the driver changes a call's row, under the call's lock, and it replaces
    /// the entry after each commit; a terminal call's row leaves, as does any row whose step
    /// failed (the next step loads it again).
    rows: Mutex<HashMap<Key, Arc<CallRow>>>,
    /// The ledger entry the head file is known to name at least (see
    /// `Calls::publish_head_through`).
    head_published: std::sync::atomic::AtomicU64,
    /// The newest entry a step asked to have in the head file, and whether a publisher is
    /// bringing the file there (see `Calls::publish_head`).
    head_wanted: std::sync::atomic::AtomicU64,
    head_publishing: std::sync::atomic::AtomicBool,
    /// When each open call's next `Tick` can act (`machine::tick_due_ms` of its record as last
    /// stepped): the advance schedule skips calls not yet due, so its cost follows the calls
    /// that owe something rather than every open call every 2 s. A call missing here is due.
    tick_due: Mutex<HashMap<Key, u64>>,
    /// Owner: which call of each (peer, skill) may run now (see `coverage::Turns`).
    turns: coverage::Turns,
    /// The calls whose peer's `coverage_exceeded` is being checked with the box now
    /// (`inbound::box_word_first`): one question per call however often the peer repeats it,
    /// and at most [`inbound::MAX_ASKING_BOX`] at once.
    asking_box: Mutex<HashSet<Key>>,
    /// Deletes of runs left at a box being retried now (`actions::delete_left_run`): past
    /// [`actions::MAX_PENDING_DELETES`] a delete is tried once, as before.
    pending_deletes: std::sync::atomic::AtomicUsize,
    metrics: Arc<crate::metrics::Metrics>,
    /// Failpoint for the crash tests: abort the process right after persisting this state.
    crash_at: Option<(Role, State)>,
}

/// The request of a call an agent started (caller side), which its consent question shows;
/// `None` for any other call, or once the request is gone (the call ended).
fn agent_request(row: &CallRow, srcs: &Sources) -> Result<Option<Zeroizing<String>>> {
    if !(row.call.from_agent && row.call.role == Role::Caller) {
        return Ok(None);
    }
    let mut buf = Zeroizing::new(Vec::new());
    match srcs.apply(&records::request_source(&row.call.id), &mut *buf) {
        Ok(_) => Ok(Some(Zeroizing::new(
            String::from_utf8_lossy(&buf).into_owned(),
        ))),
        Err(NodeError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A call as the API shows it; one waiting for consent with its question and the question's
/// digest ([`consent::question_of`]).
fn view_of(row: &CallRow, srcs: &Sources) -> Result<CallView> {
    let mut v = CallView::of(row);
    if row.call.state == State::AwaitingConsent {
        let request = agent_request(row, srcs)?;
        let (d, digest) = consent::question_of(row, request.as_deref().map(String::as_str));
        v.disclosure = Some(d);
        v.question = Some(digest);
    }
    Ok(v)
}

/// The calls driver. Cheap to clone.
#[derive(Clone)]
pub struct Calls(Arc<Inner>);

impl std::fmt::Debug for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calls")
            .field("node", &self.0.node_id)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_ms() -> u64 {
    skillbox_peers::now_ms()
}

/// `SKILLBOX_CRASH_AT=caller:opened` (tests only): see [`Inner::crash_at`].
fn crash_point() -> Option<(Role, State)> {
    let v = std::env::var("SKILLBOX_CRASH_AT").ok()?;
    let (role, state) = v.split_once(':')?;
    Some((records::parse_role(role)?, State::parse(state)?))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| NodeError::invalid("calls", format!("worker failed: {e}")))?
}

impl Calls {
    pub fn new(deps: CallsDeps) -> Calls {
        let signing = SigningKey::from_bytes(&deps.node_seed);
        let node_key_hex = key_hex(&signing.verifying_key());
        Calls(Arc::new(Inner {
            store: deps.store,
            sources: deps.sources,
            skills: deps.skills,
            note_key: skillbox_jc::seal::HpkeKeyPair::from_node_key(&signing).ok(),
            signing,
            node_key_hex,
            node_id: deps.node_id,
            transport: deps.transport,
            directory: deps.directory,
            boxes: deps.boxes,
            timing: deps.timing,
            settings: deps.settings,
            ceilings: deps.ceilings,
            guard: deps.guard,
            policy: RwLock::new(deps.policy),
            buckets: Mutex::new(RateBuckets::default()),
            locks: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashSet::new()),
            rows: Mutex::new(HashMap::new()),
            head_published: std::sync::atomic::AtomicU64::new(0),
            head_wanted: std::sync::atomic::AtomicU64::new(0),
            head_publishing: std::sync::atomic::AtomicBool::new(false),
            verified: Mutex::new(HashMap::new()),
            nonce_halves: Mutex::new(HashMap::new()),
            forwards: Mutex::new(HashMap::new()),
            tick_due: Mutex::new(HashMap::new()),
            turns: coverage::Turns::default(),
            asking_box: Mutex::new(HashSet::new()),
            pending_deletes: std::sync::atomic::AtomicUsize::new(0),
            metrics: deps.metrics,
            crash_at: crash_point(),
        }))
    }

    /// The store this driver keeps its calls in.
    pub fn store(&self) -> &Arc<Store> {
        &self.0.store
    }

    pub fn boxes(&self) -> &Arc<Boxes> {
        &self.0.boxes
    }

    /// Handle `payloads` until their sender goes, at most `at_once` at a time. At the limit
    /// no payload is taken from the queue: it fills, and the transport answers the senders
    /// `busy` (they retry with back-off), so what peers send waits in bounded places only.
    async fn serve_inbound(self, mut payloads: PayloadReceiver, at_once: usize) {
        let permits = Arc::new(tokio::sync::Semaphore::new(at_once));
        loop {
            // The permit first: a payload is taken only when it can be handled now.
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let Some(p) = payloads.recv().await else {
                return;
            };
            let this = self.clone();
            this.0.metrics.inbound(true);
            tokio::spawn(async move {
                this.on_payload(p).await;
                this.0.metrics.inbound(false);
                drop(permit);
            });
        }
    }

    /// Resume every open call, then serve payloads and the two schedules until aborted.
    pub fn spawn(
        &self,
        payloads: PayloadReceiver,
        advance: Duration,
        sweep: Duration,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let this = self.clone();
        let resume = tokio::spawn(async move {
            match this.open_keys().await {
                Ok(keys) => {
                    if !keys.is_empty() {
                        tracing::info!(calls = keys.len(), "resuming open calls");
                    }
                    for key in keys {
                        this.feed(key, Event::Resume, driver::Change::none());
                    }
                }
                Err(e) => tracing::error!(error = %e, "cannot list open calls to resume"),
            }
            this.settle_turns_left().await;
        });
        let inbound = tokio::spawn(self.clone().serve_inbound(payloads, MAX_INBOUND_AT_ONCE));
        let this = self.clone();
        let schedules = tokio::spawn(async move {
            let mut adv = tokio::time::interval(advance);
            let mut swp = tokio::time::interval(sweep);
            adv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            swp.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                let swept = tokio::select! {
                    _ = adv.tick() => false,
                    _ = swp.tick() => true,
                };
                // The sweep ticks every open call (and re-learns what is due); the advance
                // schedule only those whose tick can act now.
                this.tick_open_calls(swept).await;
                if swept {
                    this.prune().await;
                }
            }
        });
        vec![resume, inbound, schedules]
    }

    pub async fn list(&self, filter: Filter) -> std::result::Result<Vec<CallView>, CallError> {
        let store = self.0.store.clone();
        let srcs = self.0.sources.clone();
        blocking(move || {
            let rows = records::list(&store, &filter)?;
            let mut out = Vec::with_capacity(rows.len());
            for row in &rows {
                out.push(view_of(row, &srcs)?);
            }
            Ok(out)
        })
        .await
        .map_err(CallError::from)
    }

    /// One call by id, the answer included: its rows by side (one: a `call.request` reusing an
    /// id of this node's own calls, its own call to itself included, is refused `not_admitted`
    /// in `inbound::on_request`, so an id never names both a caller and an owner row).
    pub async fn get(&self, id: &str) -> std::result::Result<Vec<CallView>, CallError> {
        let store = self.0.store.clone();
        let srcs = self.0.sources.clone();
        let id2 = id.to_owned();
        let views = blocking(move || {
            let rows = records::by_id(&store, &id2)?;
            let mut out = Vec::new();
            for row in rows {
                let mut v = view_of(&row, &srcs)?;
                if row.call.state == State::Answered {
                    let mut buf = Zeroizing::new(Vec::new());
                    match srcs.apply(&records::answer_source(&row.call.id), &mut *buf) {
                        Ok(_) => v.answer = Some(String::from_utf8_lossy(&buf).into_owned()),
                        Err(NodeError::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                out.push(v);
            }
            Ok(out)
        })
        .await?;
        if views.is_empty() {
            return Err(CallError::NotFound(id.to_owned()));
        }
        Ok(views)
    }

    async fn open_rows(&self, id: &str) -> std::result::Result<Vec<CallRow>, CallError> {
        let store = self.0.store.clone();
        let id2 = id.to_owned();
        let rows = blocking(move || records::by_id(&store, &id2)).await?;
        if rows.is_empty() {
            return Err(CallError::NotFound(id.to_owned()));
        }
        Ok(rows)
    }

    /// `POST /calls/{id}/cancel`: fail the call here, cancel its run, tell the peer.
    pub async fn cancel(&self, id: &str) -> std::result::Result<Vec<CallView>, CallError> {
        for row in self.open_rows(id).await? {
            if !row.call.state.is_terminal() {
                self.apply(
                    (row.call.id.clone(), row.call.role),
                    Event::Cancel,
                    driver::Change::none(),
                )
                .await?;
            }
        }
        self.get(id).await
    }

    pub fn policy(&self) -> PolicyConfig {
        self.0
            .policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_policy(&self, policy: PolicyConfig) {
        *self.0.policy.write().unwrap_or_else(|p| p.into_inner()) = policy;
    }

    /// Prune calls that finished longer ago than `calls.retention_days` (the sweep schedule).
    async fn prune(&self) {
        let store = self.0.store.clone();
        let days = self.0.settings.retention_days;
        let before = crate::store::now_secs() - (days.min(1 << 40) as i64).saturating_mul(86_400);
        match blocking(move || records::prune_finished(&store, before)).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(calls = n, "finished calls pruned (retention)"),
            Err(e) => tracing::warn!(error = %e, "pruning finished calls failed"),
        }
    }
}

impl From<NodeError> for JcError {
    fn from(e: NodeError) -> JcError {
        JcError::Internal(e.to_string())
    }
}

const POLICY_KEY: &str = "policy";

/// Peer payloads handled at once. The transport already bounds them (256 connections, each
/// peer's rate, a refusal's delivery given up after 5 s: about 25,600), a number too large to
/// be a limit; 4,096 is far above what an honest load keeps in handling (a payload's handling
/// is a step of a few milliseconds) and bounds the tasks and their memory on its own.
const MAX_INBOUND_AT_ONCE: usize = 4_096;

/// The policy set through the API, if any (it wins over config.toml).
pub fn load_policy(store: &Store) -> Result<Option<PolicyConfig>> {
    let raw: Option<Vec<u8>> = store.read(|c| {
        Ok(rusqlite::OptionalExtension::optional(c.query_row(
            "SELECT value FROM meta WHERE key = ?1",
            rusqlite::params![POLICY_KEY],
            |r| r.get(0),
        ))?)
    })?;
    raw.map(|b| {
        let mut policy: PolicyConfig = serde_json::from_slice(&b)
            .map_err(|e| NodeError::stored_row("policy", POLICY_KEY, e))?;
        // Rules remembered before a remembered answer was held to its source set and surface
        // are read as narrow as the answers were (`Rule::narrow_as_remembered`).
        let narrowed = policy
            .rules
            .iter_mut()
            .map(skillbox_calls::policy::Rule::narrow_as_remembered)
            .filter(|changed| *changed)
            .count();
        if narrowed > 0 {
            tracing::info!(
                rules = narrowed,
                "remembered consent rules narrowed to their answers"
            );
        }
        Ok(policy)
    })
    .transpose()
}

pub fn save_policy(store: &Store, policy: &PolicyConfig) -> Result<()> {
    let bytes = serde_json::to_vec(policy)
        .map_err(|e| NodeError::invalid("policy", format!("does not serialize: {e}")))?;
    store.write(|tx| {
        tx.execute(
            "INSERT INTO meta (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            rusqlite::params![POLICY_KEY, bytes],
        )?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review logs: a call's view — what `GET /calls`, `GET /calls/{id}`, `POST /calls` and
    /// `GET /approvals` answer, and the agent surfaces serialize — printed the call's sources as
    /// stored, the key itself for a source an older node stored under a pasted one, where every
    /// other surface shows `sources::shown_name`. The serialized view holds no 8-byte run of
    /// either key and names each by its label; in process the stored names stay (the dashboard
    /// masks as it shows them, the driver stakes by them).
    #[test]
    fn a_calls_view_shows_a_key_named_source_masked() {
        for key in skillbox_testkit::old_node::PASTED_KEYS {
            let row = CallRow {
                call: records::tests::started(Role::Caller),
                program: None,
                box_url: None,
                verified: None,
                sources: vec![key.to_owned(), "songs".to_owned()],
                receipt: None,
            };
            let view = CallView::of(&row);
            let json = serde_json::to_string(&view).expect("json");
            skillbox_testkit::leak::assert_no_part_of("the call's view", &json, key);
            assert!(json.contains(crate::sources::KEY_NAMED), "{json}");
            assert!(json.contains("\"songs\""), "{json}");
            assert_eq!(view.sources, row.sources, "in process, the stored names");
        }
    }
}
