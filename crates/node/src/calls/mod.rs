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
//! [`crate::sources::Sources::apply`] into the HPKE sealer, and the answer goes straight from
//! the opened result into the caller's source store.

pub mod boxes;
pub mod program;
pub mod records;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::Serialize;
use serde_json::{Value, json};
use skillbox_calls::machine::{
    self, Action, Call, Event, FailureCode, NewCall, Role, State, Timing,
};
use skillbox_calls::{Decision, RateBuckets, SelectionError, SubmitQuestion, select_sources};
use skillbox_jc::JcError;
use skillbox_jc::attest::VerifiedRun;
use skillbox_jc::client::{BoxClient, StakeInput, open_result, seal_stake, verify_receipt};
use skillbox_jc::dsse::{Envelope, EnvelopeSignature, approved_program, key_hex};
use skillbox_jc::program::{BoxIdentity, PROGRAM_PAYLOAD_TYPE, Program, ProgramHash, decode_hex32};
use skillbox_jc::seal::HpkeKeyPair;
use skillbox_peers::{
    AcceptedBox, IncomingPayload, OfferedSkill, Payload, PayloadKind, PayloadReceiver,
    PayloadTransport, PeerId, PeersHandle,
};
use zeroize::Zeroizing;

use crate::config::{CallsConfig, PolicyConfig};
use crate::error::{NodeError, Result};
use crate::skills::Skills;
use crate::sources::{self, SourceKind, Sources};
use crate::store::Store;
use boxes::Boxes;
use records::{CallRow, Filter, Patch};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
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
    /// Every offered skill on the board right now (the intent's candidates).
    fn rows(&self) -> Vec<skillbox_peers::BoardRow>;
}

impl Directory for PeersHandle {
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
}

/// Why a call could not be started or acted on. Each has a stable code and an HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Selection(#[from] SelectionError),
    #[error("peer {peer} does not offer a skill {skill:?} on the board right now")]
    NotOnBoard { peer: String, skill: String },
    #[error("no box both sides accept: this node accepts {ours}, peer {peer} advertises {theirs}")]
    NoCommonBox {
        peer: String,
        ours: String,
        theirs: String,
    },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("call {0:?} not found")]
    NotFound(String),
    #[error("call {id} is {state}, not awaiting consent")]
    NotAwaitingConsent { id: String, state: &'static str },
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
            CallError::NoCommonBox { .. } => "no_common_box",
            CallError::Invalid { .. } => "validation_error",
            CallError::NotFound(_) => "not_found",
            CallError::NotAwaitingConsent { .. } => "not_awaiting_consent",
            CallError::Program(_) => "program_invalid",
            CallError::NoPick(_) => "no_offered_skill",
            CallError::Node(_) => "internal",
        }
    }
    pub fn status(&self) -> u16 {
        match self {
            CallError::Selection(e) => e.http_status(),
            CallError::NotOnBoard { .. }
            | CallError::NoCommonBox { .. }
            | CallError::NotAwaitingConsent { .. }
            | CallError::NoPick(_) => 409,
            CallError::Invalid { .. } | CallError::Program(_) => 400,
            CallError::NotFound(_) => 404,
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
    /// `None`: the skill's requiredSources this node holds. `Some([])`: none.
    pub sources: Option<Vec<String>>,
}

/// A call as the API shows it. The answer only on the caller's side, only when asked for one.
#[derive(Debug, Clone, Serialize)]
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
    pub policy: PolicyConfig,
}

/// What an event brings beside the machine's event.
#[derive(Default)]
struct Change {
    patch: Patch,
    answer: Option<Zeroizing<Vec<u8>>>,
}

impl Change {
    fn none() -> Change {
        Change::default()
    }
    fn has_patch(&self) -> bool {
        self.patch.verified.is_some()
            || self.patch.program.is_some()
            || self.patch.box_url.is_some()
            || self.patch.receipt.is_some()
            || self.answer.is_some()
    }
}

/// The result of executing one action: feed this event (with its change), or nothing.
type Outcome = Option<(Event, Change)>;

struct Inner {
    store: Arc<Store>,
    sources: Sources,
    skills: Skills,
    signing: SigningKey,
    node_key_hex: String,
    node_id: String,
    transport: Arc<dyn PayloadTransport>,
    directory: Arc<dyn Directory>,
    boxes: Arc<Boxes>,
    timing: Timing,
    settings: CallsConfig,
    policy: RwLock<PolicyConfig>,
    buckets: Mutex<RateBuckets>,
    locks: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    inflight: Mutex<HashSet<(Key, &'static str)>>,
    verified: Mutex<HashMap<Key, VerifiedRun>>,
    /// Failpoint for the crash tests: abort the process right after persisting this state.
    crash_at: Option<(Role, State)>,
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

fn action_name(a: &Action) -> &'static str {
    match a {
        Action::SendRequest => "send_request",
        Action::Admit => "admit",
        Action::SendAccepted => "send_accepted",
        Action::OpenRun => "open_run",
        Action::VerifyRun { .. } => "verify_run",
        Action::SendSession => "send_session",
        Action::Stake => "stake",
        Action::CheckPolicy => "check_policy",
        Action::RequestConsent => "request_consent",
        Action::Submit => "submit",
        Action::FetchOutcome => "fetch_outcome",
        Action::CancelRun => "cancel_run",
        Action::SendFailed { .. } => "send_failed",
    }
}

/// A box error that may pass (retry later) rather than one that ends the call.
fn transient(e: &JcError) -> bool {
    match e {
        JcError::Transport(_) | JcError::NotReady(_) | JcError::Busy(_) => true,
        JcError::Remote { status, code, .. } => {
            *status >= 500
                || *status == 429
                || matches!(code.as_str(), "not_ready" | "busy" | "stakes_missing")
        }
        _ => false,
    }
}

fn box_failure(e: &JcError) -> Event {
    let code = match e {
        JcError::PlatformNotAllowed(_)
        | JcError::DevAttestationNotAllowed
        | JcError::BoxNotListed { .. }
        | JcError::NonceMismatch
        | JcError::StatementProgramMismatch { .. }
        | JcError::StatementRunMismatch { .. }
        | JcError::AttestationExpired { .. }
        | JcError::ReportDataMismatch
        | JcError::Evidence(_) => FailureCode::AttestationRejected,
        _ => FailureCode::BoxFailed,
    };
    Event::BoxFailed {
        code,
        message: format!("box: {e}"),
    }
}

/// Keep a peer's message short and printable: it is shown to this node's human.
fn clip(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(300).collect()
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
            signing,
            node_key_hex,
            node_id: deps.node_id,
            transport: deps.transport,
            directory: deps.directory,
            boxes: deps.boxes,
            timing: deps.timing,
            settings: deps.settings,
            policy: RwLock::new(deps.policy),
            buckets: Mutex::new(RateBuckets::default()),
            locks: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashSet::new()),
            verified: Mutex::new(HashMap::new()),
            crash_at: crash_point(),
        }))
    }

    pub fn boxes(&self) -> &Arc<Boxes> {
        &self.0.boxes
    }

    /// Resume every open call, then serve payloads and the two schedules until aborted.
    pub fn spawn(
        &self,
        mut payloads: PayloadReceiver,
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
                        this.feed(key, Event::Resume, Change::none());
                    }
                }
                Err(e) => tracing::error!(error = %e, "cannot list open calls to resume"),
            }
        });
        let this = self.clone();
        let inbound = tokio::spawn(async move {
            while let Some(p) = payloads.recv().await {
                let this = this.clone();
                tokio::spawn(async move { this.on_payload(p).await });
            }
        });
        let this = self.clone();
        let schedules = tokio::spawn(async move {
            let mut adv = tokio::time::interval(advance);
            let mut swp = tokio::time::interval(sweep);
            adv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            swp.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = adv.tick() => {}
                    _ = swp.tick() => {}
                }
                // Both schedules step every open call with Tick: the machine retries what is
                // due, and fails what stalled or expired (the sweep's job), in one pure rule.
                match this.open_keys().await {
                    Ok(keys) => {
                        for key in keys {
                            this.feed(key, Event::Tick, Change::none());
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot list open calls"),
                }
            }
        });
        vec![resume, inbound, schedules]
    }

    async fn open_keys(&self) -> Result<Vec<Key>> {
        let store = self.0.store.clone();
        blocking(move || records::open_calls(&store)).await
    }

    // ---- the one rule

    fn feed(&self, key: Key, event: Event, change: Change) {
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.apply(key.clone(), event, change).await {
                tracing::warn!(call = %key.0, error = %e, "call event not applied");
            }
        });
    }

    /// The crash tests' failpoint: abort (no cleanup, like kill -9) right after a transition
    /// into the configured state was persisted.
    fn crash_point(&self, role: Role, state: State) {
        if self.0.crash_at == Some((role, state)) {
            tracing::error!(
                state = state.as_str(),
                "SKILLBOX_CRASH_AT reached: aborting"
            );
            std::process::abort();
        }
    }

    fn call_lock(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.0.locks).entry(key.clone()).or_default().clone()
    }

    /// Step the call with `event`, persist, then execute the actions.
    fn apply(&self, key: Key, event: Event, change: Change) -> BoxFuture<Result<Option<Call>>> {
        let this = self.clone();
        Box::pin(async move {
            let guard = this.call_lock(&key);
            let held = guard.lock().await;
            let store = this.0.store.clone();
            let data_key = this.0.sources.key().clone();
            let timing = this.0.timing;
            let k = key.clone();
            let stepped = blocking(move || {
                let Some(row) = records::load(&store, &k.0, k.1)? else {
                    return Ok(None);
                };
                let t = machine::step(&row.call, event, now_ms(), &timing);
                if t.changed || (!t.actions.is_empty() && change.has_patch()) {
                    store.write(|tx| {
                        records::update(tx, &t.call, &change.patch)?;
                        if let Some(answer) = &change.answer
                            && t.call.state == State::Answered
                        {
                            sources::put_in(
                                tx,
                                &data_key,
                                &records::answer_source(&k.0),
                                SourceKind::Text,
                                answer,
                            )?;
                        }
                        if t.call.state.is_terminal() && k.1 == Role::Caller {
                            // The request and the result key served their one call.
                            for name in [
                                records::request_source(&k.0),
                                records::result_key_source(&k.0),
                            ] {
                                tx.execute(
                                    "DELETE FROM sources WHERE name = ?1",
                                    rusqlite::params![name],
                                )?;
                            }
                        }
                        Ok(())
                    })?;
                }
                Ok(Some(t))
            })
            .await?;
            drop(held);
            let Some(t) = stepped else {
                return Ok(None);
            };
            if t.changed {
                tracing::debug!(call = %key.0, role = records::role_str(key.1), state = t.call.state.as_str(), "call stepped");
                this.crash_point(key.1, t.call.state);
                if t.call.state.is_terminal() {
                    // A finished call needs neither its lock nor its verified run any more.
                    lock(&this.0.locks).remove(&key);
                    lock(&this.0.verified).remove(&key);
                    if t.call.state == State::Failed {
                        if let Some(f) = &t.call.failure {
                            tracing::info!(call = %key.0, code = f.code.as_str(), reason = %f.message, "call failed");
                        }
                    } else {
                        tracing::info!(call = %key.0, state = t.call.state.as_str(), "call finished");
                    }
                }
            }
            for action in t.actions {
                this.dispatch(key.clone(), action);
            }
            Ok(Some(t.call))
        })
    }

    /// Run an action as its own task, unless one of its kind is already running for this call.
    fn dispatch(&self, key: Key, action: Action) {
        let name = action_name(&action);
        if !lock(&self.0.inflight).insert((key.clone(), name)) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let outcome = this.execute(&key, action).await;
            lock(&this.0.inflight).remove(&(key.clone(), name));
            if let Some((event, change)) = outcome
                && let Err(e) = this.apply(key.clone(), event, change).await
            {
                tracing::warn!(call = %key.0, error = %e, "call event not applied");
            }
        });
    }

    async fn load(&self, key: &Key) -> Option<CallRow> {
        let store = self.0.store.clone();
        let k = key.clone();
        match blocking(move || records::load(&store, &k.0, k.1)).await {
            Ok(row) => row,
            Err(e) => {
                tracing::warn!(call = %key.0, error = %e, "cannot load call");
                None
            }
        }
    }

    async fn execute(&self, key: &Key, action: Action) -> Outcome {
        let row = self.load(key).await?;
        if row.call.state.is_terminal()
            && !matches!(action, Action::CancelRun | Action::SendFailed { .. })
        {
            return None;
        }
        let result = match action {
            Action::SendRequest => self.send_request(&row).await,
            Action::Admit => self.admit(&row).await,
            Action::SendAccepted => self.send_accepted(&row).await,
            Action::OpenRun => self.open_run(&row).await,
            Action::VerifyRun { run_id } => self.verify_run(&row, &run_id).await,
            Action::SendSession => self.send_session(&row).await,
            Action::Stake => self.stake(&row).await,
            Action::CheckPolicy => Ok(Some((Event::Policy(self.decide(&row)), Change::none()))),
            Action::RequestConsent => {
                tracing::info!(call = %row.call.id, role = records::role_str(row.call.role), skill = %row.call.skill, "call awaits consent: skillbox approve|deny");
                Ok(None)
            }
            Action::Submit => self.submit(&row).await,
            Action::FetchOutcome => self.fetch_outcome(&row).await,
            Action::CancelRun => self.cancel_run(&row).await,
            Action::SendFailed { code, message } => {
                self.send(
                    &row,
                    PayloadKind::CallFailed,
                    json!({"code": code.as_str(), "message": message}),
                )
                .await;
                Ok(None)
            }
        };
        match result {
            Ok(outcome) => outcome,
            Err(e) if transient(&e) => {
                tracing::debug!(call = %row.call.id, error = %e, "box busy or unreachable; retrying later");
                None
            }
            Err(e) => Some((box_failure(&e), Change::none())),
        }
    }

    // ---- payloads out

    async fn send(&self, row: &CallRow, kind: PayloadKind, body: Value) -> bool {
        let Ok(peer) = row.call.peer.parse::<PeerId>() else {
            tracing::warn!(call = %row.call.id, "stored peer id does not parse");
            return false;
        };
        let payload = Payload {
            kind,
            call_id: row.call.id.clone(),
            body,
        };
        match self.0.transport.send(peer, payload).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(call = %row.call.id, kind = kind.as_str(), error = %e, "payload not delivered; retrying later");
                false
            }
        }
    }

    fn envelope(row: &CallRow) -> skillbox_jc::Result<Envelope> {
        let text = row
            .program
            .as_deref()
            .ok_or_else(|| JcError::Internal("call has no program".into()))?;
        Envelope::from_json(text.as_bytes())
    }

    async fn send_request(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let env: Value = serde_json::from_str(row.program.as_deref().unwrap_or("null"))
            .map_err(|e| JcError::Internal(format!("stored program: {e}")))?;
        self.send(
            row,
            PayloadKind::CallRequest,
            json!({"skill": row.call.skill, "program": env}),
        )
        .await;
        Ok(None)
    }

    async fn send_accepted(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let env = Self::envelope(row)?;
        let ours = env
            .signatures
            .iter()
            .find(|s| s.keyid == self.0.node_key_hex)
            .ok_or_else(|| JcError::Internal("accepted program lacks our signature".into()))?;
        self.send(
            row,
            PayloadKind::CallAccepted,
            json!({"signature": {"keyid": ours.keyid, "sig": ours.sig}}),
        )
        .await;
        Ok(None)
    }

    async fn send_session(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let (Some(url), Some(run_id)) = (&row.box_url, &row.call.run_id) else {
            return Ok(None);
        };
        let sent = self
            .send(
                row,
                PayloadKind::CallSession,
                json!({"box": url, "runId": run_id}),
            )
            .await;
        Ok(sent.then(|| (Event::SessionDelivered, Change::none())))
    }

    // ---- the owner's admission

    async fn admit(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let not = |code: FailureCode, message: String| {
            Ok(Some((Event::NotAdmitted { code, message }, Change::none())))
        };
        let admission = self
            .0
            .policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .admission
            .clone();
        if let Err(refusal) = admission.admit(&mut lock(&self.0.buckets), &row.call.peer, now_ms())
        {
            return not(FailureCode::NotAdmitted, refusal.to_string());
        }
        let mut env = Self::envelope(row)?;
        let program = Program::from_canonical(&env.payload_bytes()?)?;
        let skills = self.0.skills.clone();
        let srcs = self.0.sources.clone();
        let name = program.skill.name.clone();
        let found = blocking(move || {
            let Some(rec) = skills.record(&name)? else {
                return Ok(None);
            };
            let state = skills.offer_state(&rec.declaration)?;
            let size = |n: &str| -> Result<u64> { Ok(srcs.meta(n)?.map_or(0, |m| m.size)) };
            let body_len = size(&rec.declaration.body_source_name())?;
            let model_len = match size(&rec.declaration.model_source_name())? {
                0 => rec.declaration.model.as_ref().map_or(0, |m| m.len() as u64),
                n => n,
            };
            let key_len = match &rec.declaration.key {
                Some(k) => size(k)?,
                None => 0,
            };
            Ok(Some((rec, state.offered, body_len, model_len, key_len)))
        })
        .await
        .map_err(|e| JcError::Internal(e.to_string()))?;
        let sender_key = match row.call.peer.parse::<PeerId>() {
            Ok(p) => skillbox_peers::advert::public_key_hex_of_peer(&p),
            Err(_) => None,
        }
        .unwrap_or_default();
        let boxes = self.0.boxes.clone();
        let accepts = move |b: &BoxIdentity| boxes.accepts_identity(&b.platform, &b.measurement);
        let (decl, offered, digest, body_len, model_len, key_len) = match &found {
            Some((rec, offered, b, m, k)) => (
                Some(&rec.declaration),
                *offered,
                rec.digest.as_str(),
                *b,
                *m,
                *k,
            ),
            None => (None, false, "", 0, 0, 0),
        };
        let facts = program::OwnerFacts {
            call_id: &row.call.id,
            owner_key: &self.0.node_key_hex,
            sender_key: &sender_key,
            declaration: decl,
            offered,
            digest,
            body_len,
            model_len,
            key_len,
            accepts_box: &accepts,
            now_secs: now_ms() / 1000,
            max_expiry_secs: self.0.settings.expiry_secs.max(3600),
        };
        if let Err((code, message)) = program::check(&program, &facts) {
            return not(code, message);
        }
        env.sign(&self.0.signing)?;
        approved_program(&env)?;
        let text = String::from_utf8(env.to_json())
            .map_err(|_| JcError::Internal("envelope JSON is not UTF-8".into()))?;
        Ok(Some((
            Event::Admitted,
            Change {
                patch: Patch {
                    program: Some(text),
                    ..Patch::default()
                },
                answer: None,
            },
        )))
    }

    // ---- the box

    fn client(&self, row: &CallRow) -> skillbox_jc::Result<BoxClient> {
        let url = row
            .box_url
            .as_deref()
            .ok_or_else(|| JcError::BadRequest("the call names no box".into()))?;
        self.0
            .boxes
            .client(url)
            .cloned()
            .ok_or_else(|| JcError::BadRequest(format!("box {url} is not one this node accepts")))
    }

    fn role(row: &CallRow) -> skillbox_jc::Role {
        match row.call.role {
            Role::Caller => skillbox_jc::Role::Caller,
            Role::Owner => skillbox_jc::Role::Owner,
        }
    }

    async fn open_run(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let env = Self::envelope(row)?;
        let approved = approved_program(&env)?;
        let client = self.client(row)?;
        let opened = client.open(&env).await?;
        let verified = client
            .attest(&approved, &opened.run_id, &self.0.boxes.verify_policy())
            .await?;
        let change = self.remember(row, verified);
        Ok(Some((
            Event::RunOpened {
                run_id: opened.run_id,
            },
            change,
        )))
    }

    async fn verify_run(&self, row: &CallRow, run_id: &str) -> skillbox_jc::Result<Outcome> {
        let env = Self::envelope(row)?;
        let approved = approved_program(&env)?;
        let client = self.client(row)?;
        let verified = client
            .attest(&approved, run_id, &self.0.boxes.verify_policy())
            .await?;
        let change = self.remember(row, verified);
        Ok(Some((
            Event::RunOpened {
                run_id: run_id.to_owned(),
            },
            change,
        )))
    }

    /// Keep the verified run in memory, and return the change that stores its public facts
    /// with the `RunOpened` transition.
    fn remember(&self, row: &CallRow, v: VerifiedRun) -> Change {
        let record = serde_json::to_value(v.to_record()).ok();
        lock(&self.0.verified).insert((row.call.id.clone(), row.call.role), v);
        Change {
            patch: Patch {
                verified: record,
                ..Patch::default()
            },
            answer: None,
        }
    }

    /// The verified run of this call: remembered, or attested again (after a restart).
    async fn verified(&self, row: &CallRow) -> skillbox_jc::Result<VerifiedRun> {
        if let Some(v) = lock(&self.0.verified).get(&(row.call.id.clone(), row.call.role)) {
            return Ok(v.clone());
        }
        // After a restart: the stored facts of the attestation this side checked.
        if let Some(stored) = &row.verified {
            let record: skillbox_jc::attest::VerifiedRunRecord =
                serde_json::from_value(stored.clone())
                    .map_err(|e| JcError::Internal(format!("stored verified run: {e}")))?;
            let v = VerifiedRun::from_record(&record)?;
            if Some(&v.run_id) == row.call.run_id.as_ref() {
                lock(&self.0.verified).insert((row.call.id.clone(), row.call.role), v.clone());
                return Ok(v);
            }
        }
        let run_id = row
            .call
            .run_id
            .clone()
            .ok_or_else(|| JcError::Internal("no run yet".into()))?;
        let env = Self::envelope(row)?;
        let approved = approved_program(&env)?;
        let v = self
            .client(row)?
            .attest(&approved, &run_id, &self.0.boxes.verify_policy())
            .await?;
        self.remember(row, v.clone());
        Ok(v)
    }

    async fn stake(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let verified = self.verified(row).await?;
        let role = Self::role(row);
        let srcs = self.0.sources.clone();
        let skills = self.0.skills.clone();
        let r = row.clone();
        let v = verified.clone();
        // Material goes from the source store into the sealer on this blocking thread, and
        // leaves it only as HPKE ciphertext for this run.
        let sealed = tokio::task::spawn_blocking(move || -> skillbox_jc::Result<Vec<u8>> {
            let apply = |name: &str| -> skillbox_jc::Result<Zeroizing<Vec<u8>>> {
                let mut buf = Zeroizing::new(Vec::new());
                srcs.apply(name, &mut *buf)
                    .map_err(|e| JcError::BadRequest(format!("cannot apply a source: {e}")))?;
                Ok(buf)
            };
            let mut held: Vec<(String, Zeroizing<Vec<u8>>)> = Vec::new();
            match r.call.role {
                Role::Caller => {
                    held.push((
                        "request".into(),
                        apply(&records::request_source(&r.call.id))?,
                    ));
                    for s in &r.sources {
                        held.push((s.clone(), apply(s)?));
                    }
                }
                Role::Owner => {
                    let rec = skills
                        .record(&r.call.skill)
                        .map_err(|e| JcError::Internal(e.to_string()))?
                        .ok_or_else(|| {
                            JcError::BadRequest(format!("skill {:?} was removed", r.call.skill))
                        })?;
                    let d = &rec.declaration;
                    held.push(("body".into(), apply(&d.body_source_name())?));
                    // The model id from the source store (imports put it there); a declaration
                    // row that still carries one (written before) is used as it is.
                    match srcs.meta(&d.model_source_name()) {
                        Ok(Some(_)) => held.push(("model".into(), apply(&d.model_source_name())?)),
                        _ => {
                            if let Some(m) = &d.model {
                                held.push(("model".into(), Zeroizing::new(m.as_bytes().to_vec())));
                            }
                        }
                    }
                    if d.provider.as_ref().is_some_and(|p| p.needs_key())
                        && let Some(k) = &d.key
                    {
                        held.push(("key".into(), apply(k)?));
                    }
                }
            }
            let inputs = held.iter().map(|(n, d)| StakeInput::bytes(n, d)).collect();
            seal_stake(&v, role, inputs)
        })
        .await
        .map_err(|e| JcError::Internal(format!("sealing worker: {e}")))??;
        match self
            .client(row)?
            .stake(&verified, role, sealed, &self.0.signing)
            .await
        {
            Ok(_) => {}
            Err(JcError::Remote { code, .. }) if code == "already_staked" => {}
            Err(e) => return Err(e),
        }
        Ok(Some((Event::Staked, Change::none())))
    }

    fn decide(&self, row: &CallRow) -> Decision {
        let policy = self.0.policy.read().unwrap_or_else(|p| p.into_inner());
        let no_sources: Vec<String> = Vec::new();
        policy.consent().decide(&SubmitQuestion {
            role: row.call.role,
            peer: &row.call.peer,
            skill: &row.call.skill,
            sources: match row.call.role {
                Role::Caller => &row.sources,
                Role::Owner => &no_sources,
            },
        })
    }

    async fn submit(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let run_id = row
            .call
            .run_id
            .clone()
            .ok_or_else(|| JcError::Internal("no run yet".into()))?;
        let hash = self.program_hash(row)?;
        let client = self.client(row)?;
        // The other side may not have staked yet: keep asking briefly rather than waiting for
        // the next tick, so a healthy call never waits on the schedule.
        let mut pause = Duration::from_millis(2);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match client
                .submit(&run_id, &hash, Self::role(row), &self.0.signing)
                .await
            {
                Ok(_) => break,
                // Both submitted already (a retry after the run started): that is our submit.
                Err(JcError::Remote { code, .. }) if code == "wrong_state" => break,
                Err(JcError::Remote { code, .. })
                    if code == "stakes_missing" && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Some((Event::Submitted, Change::none())))
    }

    fn program_hash(&self, row: &CallRow) -> skillbox_jc::Result<ProgramHash> {
        let env = Self::envelope(row)?;
        Ok(ProgramHash::of(&env.payload_bytes()?))
    }

    async fn fetch_outcome(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let run_id = row
            .call
            .run_id
            .clone()
            .ok_or_else(|| JcError::Internal("no run yet".into()))?;
        let verified = self.verified(row).await?;
        let until_expiry = Duration::from_millis(row.call.expires_at_ms.saturating_sub(now_ms()));
        let view = self
            .client(row)?
            .wait_result(&run_id, until_expiry.max(Duration::from_secs(1)))
            .await?;
        let receipt = verify_receipt(&view, &verified)?;
        let mut receipt_json = serde_json::to_value(&receipt)
            .map_err(|e| JcError::Internal(format!("receipt: {e}")))?;
        if let Some(o) = receipt_json.as_object_mut() {
            o.insert(
                "noHardwareIsolation".into(),
                Value::Bool(verified.no_hardware_isolation),
            );
        }
        if view.sealed_output.is_none() {
            let message = view
                .error
                .clone()
                .unwrap_or_else(|| "the run failed at the box".into());
            return Ok(Some((
                Event::RunFailed {
                    message: clip(&message),
                },
                Change {
                    patch: Patch {
                        receipt: Some(receipt_json),
                        ..Patch::default()
                    },
                    answer: None,
                },
            )));
        }
        let patch = Patch {
            receipt: Some(receipt_json),
            ..Patch::default()
        };
        match row.call.role {
            Role::Owner => Ok(Some((
                Event::ReceiptStored,
                Change {
                    patch,
                    answer: None,
                },
            ))),
            Role::Caller => {
                let srcs = self.0.sources.clone();
                let name = records::result_key_source(&row.call.id);
                let key = tokio::task::spawn_blocking(move || {
                    let mut buf = Zeroizing::new(Vec::new());
                    srcs.apply(&name, &mut *buf).map(|_| buf)
                })
                .await
                .map_err(|e| JcError::Internal(format!("key worker: {e}")))?
                .map_err(|e| JcError::Internal(format!("result key: {e}")))?;
                let pair = HpkeKeyPair::from_secret_bytes(&key)?;
                let out = open_result(&view, &pair, &verified)?;
                let answer = Zeroizing::new(out.answer.into_bytes());
                Ok(Some((
                    Event::Answered,
                    Change {
                        patch,
                        answer: Some(answer),
                    },
                )))
            }
        }
    }

    async fn cancel_run(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let Some(run_id) = row.call.run_id.clone() else {
            return Ok(None);
        };
        let hash = self.program_hash(row)?;
        if let Err(e) = self
            .client(row)?
            .delete(&run_id, &hash, Self::role(row), &self.0.signing)
            .await
        {
            tracing::debug!(call = %row.call.id, error = %e, "cancelling the run at the box");
        }
        Ok(None)
    }

    // ---- payloads in

    async fn on_payload(&self, p: IncomingPayload) {
        let from = p.from.to_base58();
        let id = p.payload.call_id.clone();
        let body = p.payload.body;
        match p.payload.kind {
            PayloadKind::CallRequest => self.on_request(&from, &id, body).await,
            PayloadKind::CallAccepted => {
                let key = (id, Role::Caller);
                let Some(row) = self.load(&key).await.filter(|r| r.call.peer == from) else {
                    return;
                };
                match Self::cosigned(&row, &body) {
                    Ok(text) => {
                        let change = Change {
                            patch: Patch {
                                program: Some(text),
                                ..Patch::default()
                            },
                            answer: None,
                        };
                        let _ = self.apply(key, Event::PeerAccepted, change).await;
                    }
                    Err(e) => {
                        tracing::warn!(call = %row.call.id, error = %e, "call.accepted refused: bad co-signature")
                    }
                }
            }
            PayloadKind::CallSession => {
                let key = (id, Role::Owner);
                let Some(row) = self.load(&key).await.filter(|r| r.call.peer == from) else {
                    return;
                };
                let url = body
                    .get("box")
                    .and_then(Value::as_str)
                    .map(boxes::normalize_url);
                let run_id = body.get("runId").and_then(Value::as_str);
                let (Some(url), Some(run_id)) = (url, run_id) else {
                    tracing::warn!(call = %row.call.id, "call.session without box or runId");
                    return;
                };
                if self.0.boxes.client(&url).is_none() {
                    let event = Event::BoxFailed {
                        code: FailureCode::BoxUnavailable,
                        message: format!("the caller's box {url} is not one this node accepts"),
                    };
                    let _ = self.apply(key, event, Change::none()).await;
                    return;
                }
                let change = Change {
                    patch: Patch {
                        box_url: Some(url),
                        ..Patch::default()
                    },
                    answer: None,
                };
                let event = Event::PeerSession {
                    run_id: run_id.to_owned(),
                };
                let _ = self.apply(key, event, change).await;
            }
            PayloadKind::CallFailed => {
                let code = body
                    .get("code")
                    .and_then(Value::as_str)
                    .map(clip)
                    .unwrap_or_else(|| "unknown".into());
                let message = body
                    .get("message")
                    .and_then(Value::as_str)
                    .map(clip)
                    .unwrap_or_default();
                for role in [Role::Caller, Role::Owner] {
                    let key = (id.clone(), role);
                    if self.load(&key).await.is_some_and(|r| r.call.peer == from) {
                        let event = Event::PeerFailed {
                            code: code.clone(),
                            message: message.clone(),
                        };
                        let _ = self.apply(key, event, Change::none()).await;
                    }
                }
            }
        }
    }

    /// Add the owner's signature from `call.accepted` and check the program is now approved.
    fn cosigned(row: &CallRow, body: &Value) -> skillbox_jc::Result<String> {
        let sig: EnvelopeSignature =
            serde_json::from_value(body.get("signature").cloned().unwrap_or(Value::Null))
                .map_err(|e| JcError::Envelope(format!("signature: {e}")))?;
        let mut env = Self::envelope(row)?;
        env.signatures.retain(|s| s.keyid != sig.keyid);
        env.signatures.push(sig);
        approved_program(&env)?;
        String::from_utf8(env.to_json()).map_err(|_| JcError::Internal("envelope JSON".into()))
    }

    async fn refuse(&self, to: &str, id: &str, code: &str, message: String) {
        let Ok(peer) = to.parse::<PeerId>() else {
            return;
        };
        let payload = Payload {
            kind: PayloadKind::CallFailed,
            call_id: id.to_owned(),
            body: json!({"code": code, "message": message}),
        };
        if let Err(e) = self.0.transport.send(peer, payload).await {
            tracing::debug!(call = %id, error = %e, "call.failed not delivered");
        }
    }

    async fn on_request(&self, from: &str, id: &str, body: Value) {
        let key = (id.to_owned(), Role::Owner);
        if let Some(row) = self.load(&key).await {
            // A retried request: re-send what the call owes (call.accepted), nothing new.
            if row.call.peer == from {
                let _ = self.apply(key, Event::Resume, Change::none()).await;
            }
            return;
        }
        let parsed = (|| -> skillbox_jc::Result<(Envelope, Program, String)> {
            let env: Envelope =
                serde_json::from_value(body.get("program").cloned().unwrap_or(Value::Null))
                    .map_err(|e| JcError::Envelope(e.to_string()))?;
            env.check_type(PROGRAM_PAYLOAD_TYPE)?;
            let bytes = env.payload_bytes()?;
            let program = Program::from_canonical(&bytes)?;
            let caller = decode_hex32(&program.parties.caller.node_key)
                .and_then(|b| VerifyingKey::from_bytes(&b).ok())
                .ok_or_else(|| JcError::BadRequest("caller key".into()))?;
            env.verified_payload(PROGRAM_PAYLOAD_TYPE, &caller, "caller")?;
            let text = String::from_utf8(env.to_json())
                .map_err(|_| JcError::Internal("envelope JSON".into()))?;
            Ok((env, program, text))
        })();
        let (_, program, text) = match parsed {
            Ok(p) => p,
            Err(e) => {
                self.refuse(from, id, e.code(), format!("call.request refused: {e}"))
                    .await;
                return;
            }
        };
        let skill = body
            .get("skill")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if skill != program.skill.name || program.call_id != id {
            self.refuse(
                from,
                id,
                "program_mismatch",
                "the request's skill or call id is not the program's".into(),
            )
            .await;
            return;
        }
        let hash = ProgramHash::of(&program.to_canonical().unwrap_or_default());
        let t = machine::start(
            Role::Owner,
            NewCall {
                id: id.to_owned(),
                peer: from.to_owned(),
                skill: program.skill.name.clone(),
                program_hash: format!("sha256:{}", hash.to_hex()),
                expires_at_ms: program.expires_at.saturating_mul(1000),
            },
            now_ms(),
            &self.0.timing,
        );
        let row = CallRow {
            call: t.call.clone(),
            program: Some(text),
            box_url: None,
            verified: None,
            sources: Vec::new(),
            receipt: None,
        };
        let store = self.0.store.clone();
        let inserted = blocking(move || store.write(|tx| records::insert(tx, &row))).await;
        if let Err(e) = inserted {
            // A concurrent duplicate lost the race: the first one carries on.
            tracing::debug!(call = %id, error = %e, "call.request not recorded");
            return;
        }
        tracing::info!(call = %id, peer = %from, skill = %program.skill.name, "call received");
        self.crash_point(Role::Owner, State::Received);
        for action in t.actions {
            self.dispatch(key.clone(), action);
        }
    }

    // ---- the API's side

    /// Start a call as caller (`POST /calls`).
    pub async fn start(&self, req: StartCall) -> std::result::Result<CallView, CallError> {
        if req.request.len() > self.0.settings.max_request_bytes {
            return Err(CallError::Invalid {
                field: "request".into(),
                message: format!(
                    "{} bytes exceeds calls.max_request_bytes ({})",
                    req.request.len(),
                    self.0.settings.max_request_bytes
                ),
            });
        }
        let offered = self
            .0
            .directory
            .offered(&req.peer, &req.skill)
            .ok_or_else(|| CallError::NotOnBoard {
                peer: req.peer.clone(),
                skill: req.skill.clone(),
            })?;
        let srcs = self.0.sources.clone();
        let required = offered.skill.required_sources.clone();
        let requested = req.sources.clone();
        let chosen: Vec<(String, u64)> = blocking(move || {
            let mut sizes = HashMap::new();
            for m in srcs.list()? {
                sizes.insert(m.name, m.size);
            }
            let chosen = select_sources(&required, |n| sizes.contains_key(n), requested.as_deref());
            Ok(chosen.map(|list| {
                list.into_iter()
                    .map(|n| {
                        let size = sizes.get(&n).copied().unwrap_or(0);
                        (n, size)
                    })
                    .collect()
            }))
        })
        .await??;
        // A box both sides accept: ours by URL, theirs by identity from their advert.
        let ours = self.0.boxes.known();
        let common: Vec<&boxes::KnownBox> = ours
            .iter()
            .filter(|k| {
                offered
                    .boxes
                    .iter()
                    .any(|b| b.platform == k.platform && b.measurement == k.measurement)
            })
            .collect();
        let Some(chosen_box) = common.first() else {
            let ours = ours
                .iter()
                .map(|k| {
                    format!(
                        "{} {}",
                        k.platform,
                        &k.measurement[..k.measurement.len().min(12)]
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            let theirs = offered
                .boxes
                .iter()
                .map(|b| {
                    format!(
                        "{} {}",
                        b.platform,
                        &b.measurement[..b.measurement.len().min(12)]
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            return Err(CallError::NoCommonBox {
                peer: req.peer.clone(),
                ours: if ours.is_empty() { "none".into() } else { ours },
                theirs: if theirs.is_empty() {
                    "none".into()
                } else {
                    theirs
                },
            });
        };
        let provider: skillbox_skill::ProviderId =
            offered
                .skill
                .provider
                .parse()
                .map_err(|_| CallError::NotOnBoard {
                    peer: req.peer.clone(),
                    skill: req.skill.clone(),
                })?;
        let provider_host = chosen_box
            .providers
            .iter()
            .find(|p| p.id == provider.to_string())
            .and_then(|p| p.host.clone());
        let id = new_call_id();
        let result_key = HpkeKeyPair::generate();
        let expires_at = now_ms() / 1000 + self.0.settings.expiry_secs;
        let program = program::build(program::CallerFacts {
            call_id: id.clone(),
            caller_key: self.0.node_key_hex.clone(),
            result_key: result_key.public_hex(),
            owner_key: offered.public_key.clone(),
            boxes: common.iter().map(|k| k.identity()).collect(),
            skill: offered.skill.name.clone(),
            declaration_digest: offered.skill.declaration_digest.clone(),
            provider,
            provider_host,
            request_len: req.request.len() as u64,
            sources: chosen.clone(),
            output_max_bytes: self.0.settings.output_max_bytes,
            expires_at,
        })
        .map_err(CallError::Program)?;
        let env = skillbox_jc::dsse::sign_program(&program, &self.0.signing)
            .map_err(CallError::Program)?;
        let hash = ProgramHash::of(&env.payload_bytes().map_err(CallError::Program)?);
        let t = machine::start(
            Role::Caller,
            NewCall {
                id: id.clone(),
                peer: req.peer.clone(),
                skill: req.skill.clone(),
                program_hash: format!("sha256:{}", hash.to_hex()),
                expires_at_ms: expires_at * 1000,
            },
            now_ms(),
            &self.0.timing,
        );
        let row = CallRow {
            call: t.call.clone(),
            program: Some(String::from_utf8_lossy(&env.to_json()).into_owned()),
            box_url: Some(chosen_box.url.clone()),
            verified: None,
            sources: chosen.into_iter().map(|(n, _)| n).collect(),
            receipt: None,
        };
        let store = self.0.store.clone();
        let data_key = self.0.sources.key().clone();
        let request = req.request.clone();
        let secret = result_key.secret_bytes();
        let r = row.clone();
        blocking(move || {
            store.write(|tx| {
                records::insert(tx, &r)?;
                sources::put_in(
                    tx,
                    &data_key,
                    &records::request_source(&r.call.id),
                    SourceKind::Text,
                    request.as_bytes(),
                )?;
                sources::put_in(
                    tx,
                    &data_key,
                    &records::result_key_source(&r.call.id),
                    SourceKind::Secret,
                    &secret,
                )?;
                Ok(())
            })
        })
        .await?;
        tracing::info!(call = %id, peer = %req.peer, skill = %req.skill, "call requested");
        self.crash_point(Role::Caller, State::Requested);
        let key = (id, Role::Caller);
        for action in t.actions {
            self.dispatch(key.clone(), action);
        }
        Ok(CallView::of(&row))
    }

    /// The `skill` intent (`POST /intents/skill`): rank the skills the board offers right now
    /// that this node could call (no required sources, or at least one of them held) against
    /// `text`, and start a call on the best with sources omitted. Below the score threshold
    /// nothing is picked and no call starts.
    pub async fn intent(
        &self,
        text: Zeroizing<String>,
    ) -> std::result::Result<(skillbox_calls::intent::Pick, CallView), CallError> {
        let rows = self.0.directory.rows();
        let srcs = self.0.sources.clone();
        let held: HashSet<String> =
            blocking(move || Ok(srcs.list()?.into_iter().map(|m| m.name).collect())).await?;
        let callable: Vec<&skillbox_peers::BoardRow> = rows
            .iter()
            .filter(|r| r.peer != self.0.node_id)
            .filter(|r| {
                r.required_sources.is_empty() || r.required_sources.iter().any(|s| held.contains(s))
            })
            .collect();
        let candidates: Vec<skillbox_calls::intent::Candidate<'_>> = callable
            .iter()
            .map(|r| skillbox_calls::intent::Candidate {
                peer: &r.peer,
                skill: &r.skill,
                description: &r.description,
            })
            .collect();
        let pick = skillbox_calls::intent::pick(&text, &candidates)?;
        let view = self
            .start(StartCall {
                peer: pick.peer.clone(),
                skill: pick.skill.clone(),
                request: text,
                sources: None,
            })
            .await?;
        Ok((pick, view))
    }

    pub async fn list(&self, filter: Filter) -> std::result::Result<Vec<CallView>, CallError> {
        let store = self.0.store.clone();
        let rows = blocking(move || records::list(&store, &filter)).await?;
        Ok(rows.iter().map(CallView::of).collect())
    }

    /// One call by id (both sides' rows when a node called itself), the answer included.
    pub async fn get(&self, id: &str) -> std::result::Result<Vec<CallView>, CallError> {
        let store = self.0.store.clone();
        let srcs = self.0.sources.clone();
        let id2 = id.to_owned();
        let views = blocking(move || {
            let rows = records::by_id(&store, &id2)?;
            let mut out = Vec::new();
            for row in rows {
                let mut v = CallView::of(&row);
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
                    Change::none(),
                )
                .await?;
            }
        }
        self.get(id).await
    }

    /// Calls parked on `ask` (`GET /approvals`).
    pub async fn approvals(&self) -> std::result::Result<Vec<CallView>, CallError> {
        self.list(Filter {
            state: Some(State::AwaitingConsent),
            ..Filter::default()
        })
        .await
    }

    /// The human's answer to `ask` (`POST /approvals/{id}`).
    pub async fn consent(
        &self,
        id: &str,
        allow: bool,
    ) -> std::result::Result<Vec<CallView>, CallError> {
        let rows = self.open_rows(id).await?;
        let Some(row) = rows.iter().find(|r| r.call.state == State::AwaitingConsent) else {
            return Err(CallError::NotAwaitingConsent {
                id: id.to_owned(),
                state: rows[0].call.state.as_str(),
            });
        };
        self.apply(
            (row.call.id.clone(), row.call.role),
            Event::Consent { allow },
            Change::none(),
        )
        .await?;
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
}

impl From<NodeError> for JcError {
    fn from(e: NodeError) -> JcError {
        JcError::Internal(e.to_string())
    }
}

/// A fresh call id: 128 random bits, hex.
fn new_call_id() -> String {
    skillbox_jc::client::new_nonce()
}

const POLICY_KEY: &str = "policy";

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
        serde_json::from_slice(&b).map_err(|e| NodeError::StoredRow {
            what: "policy",
            name: POLICY_KEY.into(),
            problem: e.to_string(),
        })
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
