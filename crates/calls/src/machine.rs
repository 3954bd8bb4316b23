//! The call state machines, caller and owner, as one pure function:
//! `step(&Call, Event, now) -> Transition { call, actions }`.
//!
//! The driver (in the node) owns all I/O: it persists the new record *before* executing the
//! actions, executes them (payloads, box operations, policy questions), and feeds what comes back
//! in as events. Every action is something the driver may do again safely, so recovery after a
//! crash is one rule: load each non-terminal call and step it with [`Event::Resume`], which
//! re-emits the actions its state still owes. Events that do not apply to the current state
//! (a replayed payload, a late box answer) change nothing and emit nothing.

use serde::{Deserialize, Serialize};

/// Which side of the call this record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Caller,
    Owner,
}

/// Where a call is. Caller path: requested → accepted → opened → (awaiting_consent → opened) →
/// submitting → submitted → answered. Owner path: received → accepted → opened →
/// (awaiting_consent → opened) → submitting → submitted → ran. Each side's policy (and human) is
/// asked between the verified box and its stake, so nothing of the request and sources (caller)
/// or of the skill's body, model and key (owner) leaves before it says yes. A caller whose
/// submit went with its stake ([`submits_with_stake`]) goes from `opened` to `submitted`. An
/// owner record from before its consent moved ahead of its stake may still be in `staked`
/// (policy asked there, as it was). Either may end `failed`, with a [`Failure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Caller: program signed, `call.request` sent; waiting for `call.accepted`.
    Requested,
    /// Owner: `call.request` arrived; admission (policy, offered skill, program match) pending.
    Received,
    /// Both signatures on the program. Caller: open the run. Owner: wait for `call.session`.
    Accepted,
    /// Run opened at the box and its attestation verified by this side: ask its policy (and
    /// human) first, then stake.
    Opened,
    /// A record from before consent was asked ahead of the stake: its stake is in and its
    /// submit waits on policy. Neither side enters it now (each goes from `opened` to
    /// `submitting`), but a stored one still finishes.
    Staked,
    /// Policy said `ask`: parked until the human decides (`GET /approvals`), before this side
    /// staked; it returns to `opened` to stake once allowed.
    AwaitingConsent,
    /// Policy allowed (or the human consented): the submit is owed.
    Submitting,
    /// This side submitted; waiting for the box to finish.
    Submitted,
    /// Caller, terminal: the answer was opened and stored.
    Answered,
    /// Owner, terminal: the receipt was fetched and stored.
    Ran,
    /// Terminal, with a reason.
    Failed,
}

impl State {
    pub fn is_terminal(self) -> bool {
        matches!(self, State::Answered | State::Ran | State::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            State::Requested => "requested",
            State::Received => "received",
            State::Accepted => "accepted",
            State::Opened => "opened",
            State::Staked => "staked",
            State::AwaitingConsent => "awaiting_consent",
            State::Submitting => "submitting",
            State::Submitted => "submitted",
            State::Answered => "answered",
            State::Ran => "ran",
            State::Failed => "failed",
        }
    }

    /// The state a stored or queried name stands for: serde's own names (those [`State::as_str`]
    /// gives), so the wire and the store cannot drift apart through a second list.
    pub fn parse(s: &str) -> Option<State> {
        use serde::de::value::{Error, StrDeserializer};
        State::deserialize(StrDeserializer::<Error>::new(s)).ok()
    }
}

/// Why a call failed. `code` is stable (clients match on it); `message` is for people and never
/// carries material.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub code: FailureCode,
    pub message: String,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// The owner's admission refused the caller (deny list, rate limit).
    NotAdmitted,
    /// The skill is not offered (any more), or the program does not match it.
    NotOffered,
    ProgramMismatch,
    /// The box could not be opened, attested or verified.
    BoxUnavailable,
    AttestationRejected,
    /// Staking, submitting or fetching at the box failed for good.
    BoxFailed,
    /// The run itself failed at the box (provider error, expired program, ...).
    RunFailed,
    /// Policy denied the submit, or the human denied consent.
    PolicyDenied,
    ConsentDenied,
    /// No progress for longer than the stall limit.
    Stalled,
    /// The program's expiry passed before the run finished.
    Expired,
    /// A human cancelled it.
    Cancelled,
    /// The peer sent `call.failed` (its code is in the message).
    PeerFailed,
    /// The program asks for more than the owner's ceilings for the skill allow (request,
    /// source or answer size).
    OverOwnerLimit,
    /// The skill's calls-per-day ceiling (for this peer, or in total) is reached.
    DailyLimit,
    /// The call's run moved off a lost box more than [`MAX_MOVES`] times: the owner stakes its
    /// body into at most `MAX_MOVES + 1` runs of one call, and the caller gives up as well.
    TooManyMoves,
    /// The peer already holds as many admitted calls that have not reached their run as the
    /// owner takes (`calls.max_unstarted_per_peer`).
    PendingLimit,
    /// The peer's answers of this skill today already carried the owner's limit of the body or
    /// of one of its secrets, added up across calls (the owner's `[guard]` coverage thresholds).
    CoverageExceeded,
}

impl FailureCode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::NotAdmitted => "not_admitted",
            FailureCode::NotOffered => "not_offered",
            FailureCode::ProgramMismatch => "program_mismatch",
            FailureCode::BoxUnavailable => "box_unavailable",
            FailureCode::AttestationRejected => "attestation_rejected",
            FailureCode::BoxFailed => "box_failed",
            FailureCode::RunFailed => "run_failed",
            FailureCode::PolicyDenied => "policy_denied",
            FailureCode::ConsentDenied => "consent_denied",
            FailureCode::Stalled => "stalled",
            FailureCode::Expired => "expired",
            FailureCode::Cancelled => "cancelled",
            FailureCode::PeerFailed => "peer_failed",
            FailureCode::OverOwnerLimit => "over_owner_limit",
            FailureCode::DailyLimit => "daily_limit",
            FailureCode::TooManyMoves => "too_many_moves",
            FailureCode::PendingLimit => "pending_limit",
            FailureCode::CoverageExceeded => "coverage_exceeded",
        }
    }

    pub const ALL: [FailureCode; 18] = [
        FailureCode::NotAdmitted,
        FailureCode::NotOffered,
        FailureCode::ProgramMismatch,
        FailureCode::BoxUnavailable,
        FailureCode::AttestationRejected,
        FailureCode::BoxFailed,
        FailureCode::RunFailed,
        FailureCode::PolicyDenied,
        FailureCode::ConsentDenied,
        FailureCode::Stalled,
        FailureCode::Expired,
        FailureCode::Cancelled,
        FailureCode::PeerFailed,
        FailureCode::OverOwnerLimit,
        FailureCode::DailyLimit,
        FailureCode::TooManyMoves,
        FailureCode::PendingLimit,
        FailureCode::CoverageExceeded,
    ];

    /// The code `call.failed` carries for a failure of this code: every refusal this side
    /// decided — its policy's, its human's, a cancel — is `policy_denied`, so the peer cannot
    /// tell a rule from a person who read the question (nor, with its timing, when that person
    /// was at the terminal). The precise code stays in this node's record. `policy_denied` is
    /// one of the first codes, so every older node parses it (an unknown code would still end
    /// its call, as "an unknown code").
    pub fn toward_peer(self) -> FailureCode {
        match self {
            FailureCode::ConsentDenied | FailureCode::Cancelled => FailureCode::PolicyDenied,
            other => other,
        }
    }

    pub fn parse(s: &str) -> Option<FailureCode> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The words that travel with the code in `call.failed`: fixed per code, so nothing of
    /// this side (a key's source name, a provider's error, a local path) reaches the peer.
    pub fn fixed_message(self) -> &'static str {
        match self {
            FailureCode::NotAdmitted => "the owner does not take this call now",
            FailureCode::NotOffered => "the skill is not offered",
            FailureCode::ProgramMismatch => "the program does not match the skill as offered",
            FailureCode::BoxUnavailable => "the box could not be used",
            FailureCode::AttestationRejected => "the box's attestation was refused",
            FailureCode::BoxFailed => "the box failed the call",
            FailureCode::RunFailed => "the run failed at the box",
            // The words a peer reads for any refusal of this side (`toward_peer`).
            FailureCode::PolicyDenied => "the call was declined",
            FailureCode::ConsentDenied => "consent was denied",
            FailureCode::Stalled => "the call made no progress",
            FailureCode::Expired => "the program expired",
            FailureCode::Cancelled => "the call was cancelled",
            FailureCode::PeerFailed => "the peer failed the call",
            FailureCode::OverOwnerLimit => "the call asks for more than the owner's limits",
            FailureCode::DailyLimit => "the skill's daily call limit is reached",
            FailureCode::TooManyMoves => "the run moved to another box too often",
            FailureCode::PendingLimit => "too many of this peer's calls wait to start",
            FailureCode::CoverageExceeded => {
                "the owner takes no more calls of this skill from this peer today"
            }
        }
    }
}

/// What policy said at `jc.submit`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Deny,
    Ask,
}

/// Timing rules (from config). Milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// First retry delay of an owed action; doubles per attempt up to `max_backoff_ms`.
    pub retry_ms: u64,
    pub max_backoff_ms: u64,
    /// A call with no progress for this long is failed as `stalled`.
    pub stall_limit_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            retry_ms: 2_000,
            max_backoff_ms: 30_000,
            stall_limit_ms: 120_000,
        }
    }
}

/// The durable record of one call on one side. Holds no material: no request, no sources, no
/// body, no answer (the driver stores the answer beside it on the caller's side).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    pub id: String,
    pub role: Role,
    /// The other node's id.
    pub peer: String,
    pub skill: String,
    pub state: State,
    /// `sha256:` of the program's JCS bytes, once known.
    pub program_hash: Option<String>,
    /// The box run, once opened.
    pub run_id: Option<String>,
    /// The program's expiry (unix ms).
    pub expires_at_ms: u64,
    pub created_at_ms: u64,
    /// Last change of state: the stall clock.
    pub progressed_at_ms: u64,
    /// When owed actions are due again, and how many times they were tried in this state.
    pub retry_at_ms: u64,
    pub attempts: u32,
    /// Caller: the owner acknowledged `call.session`.
    pub session_delivered: bool,
    /// This node's policy (or its human) allowed the call, once the box was verified and before
    /// anything was staked: the caller's request and sources, the owner's body, model and key
    /// leave only after this.
    /// A record written before the field existed reads as not consented: before its stake it
    /// is asked now, after it the older rules (policy at `staked`) still apply to it.
    #[serde(default)]
    pub consented: bool,
    /// Caller: started from an agent surface (MCP, A2A), so an agent wrote its request; policy
    /// rules with `surface = "agent"` match it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_agent: bool,
    /// Caller: started by an HTTP agent client holding the agent token (`agent.token`), not
    /// through this user's own channel; rules with `surface = "agent_token"` match it, those
    /// with `"agent_local"` do not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub agent_token: bool,
    pub failure: Option<Failure>,
    /// The call's history of box moves: each time its run was opened on another box than the
    /// one chosen, before anything was staked. Written by the driver, never read by `step`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<BoxMove>,
    /// The runs this call left, oldest first: a box lost after the open and before this side's
    /// (caller) or the caller's (owner) stake was taken. A left run is never entered again, and
    /// at most [`MAX_MOVES`] are left; each run is staked into at most once per side.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_runs: Vec<String>,
    /// Owner: the run and box the caller's `call.session` named, not verified yet — a claim,
    /// not the call's run. Kept so that a verification that failed for a moment (its box
    /// restarting) is tried again at the next retry: the caller sends a session once it is
    /// delivered, and a lost claim left the call waiting for one until it stalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_claim: Option<SessionClaim>,
}

/// What a `call.session` claims: the run the caller opened and the box it is on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionClaim {
    pub run_id: String,
    pub box_url: String,
}

/// How many runs one call may leave for a new one (see [`Call::left_runs`]): a lost box is
/// rare, and each move costs the owner a stake of its body into one more run, so a caller
/// cannot use moves to spread the body over many boxes.
pub const MAX_MOVES: usize = 3;

/// A run moved off a box before anything was staked: the box it left, the box that opened it,
/// and why, as a closed code ([`BoxMove::REASONS`]).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoxMove {
    /// Unix milliseconds.
    pub at_ms: u64,
    pub from: String,
    pub to: String,
    pub reason: String,
    /// The run left behind, when the box was lost after it opened one (`None`: the open
    /// itself failed there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

impl BoxMove {
    /// The box did not answer (refused, reset, timed out, or a 5xx) — at the open, or after
    /// it opened the run and before this side's stake was taken; it was at its run limit; it
    /// will not take this program (its allow-list, its expiry horizon).
    /// And on the owner's side, `caller_moved`: the caller named a new run on another box
    /// (by its word, its box was lost); the owner cannot tell why, only that it may follow.
    pub const REASONS: [&'static str; 4] =
        ["box_unreachable", "box_busy", "box_refused", "caller_moved"];
}

/// Something that happened to a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Re-emit what the current state owes (after a restart). Counts as no progress.
    Resume,
    /// The `advance` schedule: retry what is due; fail what stalled or expired.
    Tick,
    // --- payloads from the peer
    /// Caller: the owner co-signed the program.
    PeerAccepted,
    /// Owner: the caller opened the run and says where (`box_url`: one this node accepts,
    /// checked by the driver). A session naming another run than the call's is a move.
    PeerSession {
        run_id: String,
        box_url: String,
    },
    /// Either: the peer failed the call. Terminal on both sides. Only its code is taken (an
    /// unknown one is `None`); the peer's words never are.
    PeerFailed {
        code: Option<FailureCode>,
    },
    /// Caller: the owner acknowledged `call.session`.
    SessionDelivered,
    // --- results of this side's own actions
    /// Owner: admission passed (policy, offered skill, program matches): co-sign and accept.
    Admitted,
    /// Owner: admission refused.
    NotAdmitted {
        code: FailureCode,
        message: String,
    },
    /// Caller: run opened and attestation verified. Owner: attestation of the named run verified.
    RunOpened {
        run_id: String,
    },
    /// Caller: the box of the call's run stopped answering after the open and before this
    /// side's stake was taken (the driver's bounded retries): the run is left for a new one.
    BoxLost,
    /// A box operation failed for good (after the driver's own bounded retries).
    BoxFailed {
        code: FailureCode,
        message: String,
    },
    Staked,
    Policy(Decision),
    /// The human's answer to `ask`.
    Consent {
        allow: bool,
    },
    Submitted,
    /// Caller: the answer was fetched, opened and stored.
    Answered,
    /// Owner: the receipt was fetched, verified and stored.
    ReceiptStored,
    /// The box reports the run failed.
    RunFailed {
        message: String,
    },
    /// A human cancelled the call.
    Cancel,
}

/// What the driver must do. Each is safe to do again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Caller: send `call.request {callId, skill, program}` to the owner.
    SendRequest,
    /// Owner: run admission (peer lists, rate limit, offered skill, program match).
    Admit,
    /// Owner: co-sign the program and send `call.accepted`.
    SendAccepted,
    /// Caller: open the run at the box, attest with a fresh nonce, verify; then `RunOpened`.
    OpenRun,
    /// Owner: attest the run the caller named at `box_url` with its own nonce, verify; then
    /// `RunOpened` (which records that box as the call's).
    VerifyRun {
        run_id: String,
        box_url: String,
    },
    /// Caller: send `call.session {callId, box, runId}`.
    SendSession,
    /// Seal this side's material from the source store straight into the box (apply).
    Stake,
    /// Ask policy whether this side may submit.
    CheckPolicy,
    /// List the call at `GET /approvals` (and tell the human).
    RequestConsent,
    Submit,
    /// Caller: fetch and open the result. Owner: fetch and verify the receipt.
    FetchOutcome,
    /// Cancel the run at the box (best effort).
    CancelRun,
    /// Tell the peer the call failed (`call.failed`): the code and its fixed words only.
    SendFailed {
        code: FailureCode,
    },
}

/// The new record and what to do about it. `changed` is false when the event did not apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub call: Call,
    pub actions: Vec<Action>,
    pub changed: bool,
}

/// What a new call record starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCall {
    pub id: String,
    /// The other node's id.
    pub peer: String,
    pub skill: String,
    pub program_hash: String,
    pub expires_at_ms: u64,
}

/// Start a call. Caller: the program is built and signed, send the request. Owner: a
/// `call.request` arrived, run admission first.
pub fn start(role: Role, new: NewCall, now_ms: u64, timing: &Timing) -> Transition {
    let call = Call {
        id: new.id,
        role,
        peer: new.peer,
        skill: new.skill,
        state: match role {
            Role::Caller => State::Requested,
            Role::Owner => State::Received,
        },
        program_hash: Some(new.program_hash),
        run_id: None,
        expires_at_ms: new.expires_at_ms,
        created_at_ms: now_ms,
        progressed_at_ms: now_ms,
        retry_at_ms: now_ms + timing.retry_ms,
        attempts: 1,
        session_delivered: false,
        consented: false,
        from_agent: false,
        agent_token: false,
        failure: None,
        moves: Vec::new(),
        left_runs: Vec::new(),
        session_claim: None,
    };
    let actions = owed(&call);
    Transition {
        call,
        actions,
        changed: true,
    }
}

/// The actions a state owes until the event that moves it on arrives.
fn owed(call: &Call) -> Vec<Action> {
    // The owner's check of a run a `call.session` named (the first, or one the caller moved
    // to) is owed until it succeeds: the caller sends a session only once.
    let verify = call
        .session_claim
        .as_ref()
        .filter(|c| {
            call.role == Role::Owner
                && (call.state == State::Accepted || owner_may_move(call.state))
                && is_new_run(call, &c.run_id)
        })
        .map(|c| Action::VerifyRun {
            run_id: c.run_id.clone(),
            box_url: c.box_url.clone(),
        });
    let mut owed = match (call.role, call.state) {
        (Role::Caller, State::Requested) => vec![Action::SendRequest],
        (Role::Owner, State::Received) => vec![Action::Admit],
        (Role::Caller, State::Accepted) => vec![Action::OpenRun],
        // The owner waits for call.session; re-sending call.accepted covers a lost payload.
        // Once a session came, there is nothing to re-send: its run is verified (below).
        (Role::Owner, State::Accepted) if verify.is_some() => Vec::new(),
        (Role::Owner, State::Accepted) => vec![Action::SendAccepted],
        // Each side asks its policy (and its human) once the box is attested, so the question
        // names the verified box, and before staking, so a "no" leaves nothing anywhere: on a
        // box without hardware isolation, a stake is in its operator's hands once sent.
        (role, State::Opened) => {
            let mut a = if call.consented {
                vec![Action::Stake]
            } else {
                vec![Action::CheckPolicy]
            };
            if role == Role::Caller && !call.session_delivered {
                a.insert(0, Action::SendSession);
            }
            a
        }
        // Only a stored record from before consent moved ahead of the stake is here.
        (_, State::Staked) => vec![Action::CheckPolicy],
        (_, State::AwaitingConsent) => vec![Action::RequestConsent],
        (_, State::Submitting) => vec![Action::Submit],
        (_, State::Submitted) => vec![Action::FetchOutcome],
        // The caller keeps re-sending call.session while the owner has not acknowledged it.
        _ => Vec::new(),
    };
    if let Some(v) = verify {
        owed.insert(0, v);
    }
    owed
}

/// One step of the machine. Pure: the same inputs give the same outputs.
pub fn step(call: &Call, event: Event, now_ms: u64, timing: &Timing) -> Transition {
    let unchanged = || Transition {
        call: call.clone(),
        actions: Vec::new(),
        changed: false,
    };
    if call.state.is_terminal() {
        return unchanged();
    }
    let to_with = |state: State, extra: Vec<Action>, consented: bool| {
        let mut next = call.clone();
        next.state = state;
        next.consented = consented;
        next.progressed_at_ms = now_ms;
        next.retry_at_ms = now_ms + timing.retry_ms;
        next.attempts = 1;
        let mut actions = extra;
        actions.extend(owed(&next));
        Transition {
            call: next,
            actions,
            changed: true,
        }
    };
    let to = |state: State, extra: Vec<Action>| to_with(state, extra, call.consented);
    let fail = |code: FailureCode, message: String, tell_peer: bool| {
        let mut next = call.clone();
        next.state = State::Failed;
        next.progressed_at_ms = now_ms;
        next.failure = Some(Failure {
            code,
            message: message.clone(),
        });
        let mut actions = Vec::new();
        // Cancel a run that may still be open. Once both submitted it runs or ran: deleting it
        // then would only take the result from the peer, which may not have fetched it yet.
        if next.run_id.is_some() && call.state != State::Submitted {
            actions.push(Action::CancelRun);
        }
        if tell_peer {
            actions.push(Action::SendFailed {
                code: code.toward_peer(),
            });
        }
        Transition {
            call: next,
            actions,
            changed: true,
        }
    };
    use Role::{Caller, Owner};
    match (call.role, call.state, event) {
        (_, _, Event::Resume) => Transition {
            call: call.clone(),
            actions: owed(call),
            changed: false,
        },
        (_, _, Event::Tick) => tick(call, now_ms, timing, fail),
        (_, _, Event::Cancel) => fail(
            FailureCode::Cancelled,
            "cancelled by this node's human".into(),
            true,
        ),
        (_, _, Event::PeerFailed { code }) => {
            // Terminal on both sides; never answered with another call.failed.
            let message = match code {
                Some(c) => format!(
                    "the peer failed the call: {} ({})",
                    c.as_str(),
                    c.fixed_message()
                ),
                None => "the peer failed the call (an unknown code)".to_owned(),
            };
            fail(FailureCode::PeerFailed, message, false)
        }
        (Caller, State::Requested, Event::PeerAccepted) => to(State::Accepted, vec![]),
        (Owner, State::Received, Event::Admitted) => to(State::Accepted, vec![]),
        (Owner, State::Received, Event::NotAdmitted { code, message }) => fail(code, message, true),
        // A fresh run: never one this call left (a box's run ids are random; a replayed
        // answer of the left run's open is not the new run).
        (Caller, State::Accepted, Event::RunOpened { run_id })
            if !call.left_runs.contains(&run_id) =>
        {
            let mut t = to(State::Opened, vec![]);
            t.call.run_id = Some(run_id);
            t
        }
        (Owner, State::Accepted, Event::PeerSession { run_id, box_url })
            if !call.left_runs.contains(&run_id) =>
        {
            // Verify before recording: the run is the caller's claim until our own attestation.
            claimed(call, run_id, box_url)
        }
        // The caller moved the run (its box was lost before the caller's stake was taken): a
        // run this call never had, verified like the first. Never once this side submitted —
        // the box took that submit only with both stakes in, so the run may be running — and
        // never past the bound: a caller cannot spread the owner's body over many boxes.
        (Owner, s, Event::PeerSession { run_id, box_url })
            if owner_may_move(s) && is_new_run(call, &run_id) =>
        {
            if call.left_runs.len() >= MAX_MOVES {
                return too_many_moves(fail);
            }
            claimed(call, run_id, box_url)
        }
        (Owner, s, Event::RunOpened { run_id })
            if owner_may_move(s) && is_new_run(call, &run_id) =>
        {
            if call.left_runs.len() >= MAX_MOVES {
                return too_many_moves(fail);
            }
            moved_to(call, Some(run_id), to_with)
        }
        // Caller: the run's box stopped answering before this side's stake was taken: open a
        // new run (fresh keys) on another box; the owner follows the new `call.session`. The
        // policy is asked again, so the question names the box the stake will go to.
        (Caller, State::Opened | State::AwaitingConsent, Event::BoxLost)
            if call.run_id.is_some() =>
        {
            if call.left_runs.len() >= MAX_MOVES {
                return too_many_moves(fail);
            }
            moved_to(call, None, to_with)
        }
        (Owner, State::Accepted, Event::RunOpened { run_id })
            if !call.left_runs.contains(&run_id) =>
        {
            let mut t = to(State::Opened, vec![]);
            t.call.run_id = Some(run_id);
            t.call.session_claim = None;
            t.actions = owed(&t.call);
            t
        }
        (Caller, State::Opened, Event::SessionDelivered) if !call.session_delivered => {
            let mut next = call.clone();
            next.session_delivered = true;
            Transition {
                call: next,
                actions: Vec::new(),
                changed: true,
            }
        }
        // Each side's policy is asked before it stakes: a yes owes the stake, then the submit.
        (_, State::Opened, Event::Policy(Decision::Allow)) if !call.consented => {
            to_with(State::Opened, vec![], true)
        }
        (_, State::Opened, Event::Policy(Decision::Ask)) if !call.consented => {
            to(State::AwaitingConsent, vec![])
        }
        (_, State::Opened, Event::Policy(Decision::Deny)) if !call.consented => fail(
            FailureCode::PolicyDenied,
            "this node's policy denied the call".into(),
            true,
        ),
        // An owner record parked here by the older order (after its stake) comes back to
        // `opened` too: its stake is owed again, and the ledger's entry for it, answered by
        // the box, makes that `Staked` without sending anything (`actions::stake`).
        (_, State::AwaitingConsent, Event::Consent { allow: true }) if !call.consented => {
            to_with(State::Opened, vec![], true)
        }
        (_, State::Opened, Event::Staked) if call.consented => {
            let mut t = to(State::Submitting, vec![]);
            if call.role == Caller && !call.session_delivered {
                t.actions.insert(0, Action::SendSession);
            }
            t
        }
        // The box took the caller's submit with its stake (`submits_with_stake`): its go went
        // with its material, so `submitting` is passed by.
        (Caller, State::Opened, Event::Submitted) if submits_with_stake(call) => {
            let mut t = to(State::Submitted, vec![]);
            if !call.session_delivered {
                t.actions.insert(0, Action::SendSession);
            }
            t
        }
        (_, State::Opened, Event::Staked) => {
            let mut t = to(State::Staked, vec![]);
            // The caller still owes the session payload if it was never acknowledged.
            if call.role == Caller && !call.session_delivered {
                t.actions.insert(0, Action::SendSession);
            }
            t
        }
        // A side reaches `staked` only on the older path (a record from before consent was
        // asked ahead of the stake): the policy's yes here is its consent, so the record says
        // so — "submitting" is never unconsented.
        (_, State::Staked, Event::Policy(Decision::Allow)) => {
            to_with(State::Submitting, vec![], true)
        }
        (_, State::Staked, Event::Policy(Decision::Deny)) => fail(
            FailureCode::PolicyDenied,
            "this node's policy denied the submit".into(),
            true,
        ),
        (_, State::Staked, Event::Policy(Decision::Ask)) => to(State::AwaitingConsent, vec![]),
        (_, State::AwaitingConsent, Event::Consent { allow: true }) => {
            to(State::Submitting, vec![])
        }
        (_, State::AwaitingConsent, Event::Consent { allow: false }) => fail(
            FailureCode::ConsentDenied,
            "this node's human denied consent".into(),
            true,
        ),
        (_, State::Submitting, Event::Submitted) => to(State::Submitted, vec![]),
        (Caller, State::Submitted, Event::Answered) => to(State::Answered, vec![]),
        (Owner, State::Submitted, Event::ReceiptStored) => to(State::Ran, vec![]),
        (_, State::Submitted, Event::RunFailed { message }) => {
            fail(FailureCode::RunFailed, message, true)
        }
        (_, s, Event::BoxFailed { code, message })
            if s != State::Requested && s != State::Received =>
        {
            fail(code, message, true)
        }
        _ => unchanged(),
    }
}

/// Whether this side's `Stake` may carry its submit: a caller whose policy (or human) allowed
/// the call before it staked — nothing is left to decide between its stake and its submit, so
/// its go goes with its material in one request, and the box's word that it took both
/// (`Event::Submitted` in `opened`) moves the call to `submitted`. The owner submits on its
/// own: its submit waits on its coverage turn (the node's `coverage::Turns`), taken just before
/// it, never with the stake.
pub fn submits_with_stake(call: &Call) -> bool {
    call.role == Role::Caller && call.state == State::Opened && call.consented
}

/// The owner's states from which it follows the caller to a new run: it holds a run and has
/// not submitted it.
fn owner_may_move(s: State) -> bool {
    matches!(
        s,
        State::Opened | State::Staked | State::AwaitingConsent | State::Submitting
    )
}

/// Whether the owner's call would take `run_id` as its run once verified (a `call.session`
/// for it is acted on, and its `RunOpened` moves the call): in `accepted`, any run it never
/// left; in a state it may move from, a new one. The same conditions as the arms of [`step`];
/// a driver asks before verifying a run the caller vouches for, so a session repeated for the
/// run it holds costs no verification.
pub fn owner_takes_run(call: &Call, run_id: &str) -> bool {
    call.role == Role::Owner
        && match call.state {
            State::Accepted => !call.left_runs.iter().any(|r| r == run_id),
            s => owner_may_move(s) && is_new_run(call, run_id),
        }
}

/// A run id the call has neither now nor left before.
fn is_new_run(call: &Call, run_id: &str) -> bool {
    call.run_id.as_deref() != Some(run_id) && !call.left_runs.iter().any(|r| r == run_id)
}

/// The owner keeps the run a `call.session` named as a claim (not as the call's run) and owes
/// its verification: one that fails for a moment is owed again at the next retry.
fn claimed(call: &Call, run_id: String, box_url: String) -> Transition {
    let mut next = call.clone();
    next.session_claim = Some(SessionClaim {
        run_id: run_id.clone(),
        box_url: box_url.clone(),
    });
    let changed = next != *call;
    Transition {
        call: next,
        actions: vec![Action::VerifyRun { run_id, box_url }],
        changed,
    }
}

fn too_many_moves(fail: impl Fn(FailureCode, String, bool) -> Transition) -> Transition {
    fail(
        FailureCode::TooManyMoves,
        format!("the run moved more than {MAX_MOVES} times"),
        true,
    )
}

/// Leave the call's run for `next` (owner: the verified new run, `opened`; caller: none yet,
/// back to `accepted` to open one). Consent is asked again for the new box, and the caller's
/// new session is owed to the owner.
fn moved_to(
    call: &Call,
    next: Option<String>,
    to_with: impl Fn(State, Vec<Action>, bool) -> Transition,
) -> Transition {
    let state = if next.is_some() {
        State::Opened
    } else {
        State::Accepted
    };
    let mut t = to_with(state, vec![], false);
    if let Some(left) = call.run_id.clone() {
        t.call.left_runs.push(left);
    }
    t.call.run_id = next;
    t.call.session_claim = None;
    t.call.session_delivered = false;
    t.actions = owed(&t.call);
    t
}

/// The earliest time a [`Event::Tick`] can change `call` or owe an action: before it, [`step`]
/// with `Tick` returns the call unchanged and no actions (the rule is [`tick`]'s, read the other
/// way), so a driver may skip the tick until then. Expiry, the stall limit and the retry time
/// are all in the record, so the answer holds until the call is stepped again.
pub fn tick_due_ms(call: &Call, timing: &Timing) -> u64 {
    let mut due = call.expires_at_ms;
    if !matches!(call.state, State::AwaitingConsent | State::Submitted) {
        // `tick` fails a call once `now - progressed_at > stall_limit`, i.e. one ms past it.
        let stall = call
            .progressed_at_ms
            .saturating_add(timing.stall_limit_ms)
            .saturating_add(1);
        due = due.min(stall);
    }
    if call.state != State::AwaitingConsent {
        due = due.min(call.retry_at_ms);
    }
    due
}

fn tick(
    call: &Call,
    now_ms: u64,
    timing: &Timing,
    fail: impl Fn(FailureCode, String, bool) -> Transition,
) -> Transition {
    if now_ms >= call.expires_at_ms {
        return fail(
            FailureCode::Expired,
            "the program expired before the run finished".into(),
            true,
        );
    }
    // A call waiting on its human is not stalled: consent has no deadline but the program's.
    // Nor is one whose run is at the box: a model on a loaded CPU can take minutes, the
    // outcome fetch keeps asking, and a box that lost the run says so (a lasting failure).
    if !matches!(call.state, State::AwaitingConsent | State::Submitted)
        && now_ms.saturating_sub(call.progressed_at_ms) > timing.stall_limit_ms
    {
        let secs = timing.stall_limit_ms / 1000;
        return fail(
            FailureCode::Stalled,
            format!("no progress for {secs} s in state {}", call.state.as_str()),
            true,
        );
    }
    // Consent is asked once (and again on Resume), not on every retry.
    if now_ms < call.retry_at_ms || call.state == State::AwaitingConsent {
        return Transition {
            call: call.clone(),
            actions: Vec::new(),
            changed: false,
        };
    }
    let mut next = call.clone();
    let backoff = timing
        .retry_ms
        .saturating_mul(1u64 << call.attempts.min(16))
        .min(timing.max_backoff_ms);
    next.retry_at_ms = now_ms + backoff;
    next.attempts = call.attempts.saturating_add(1);
    let actions = owed(&next);
    Transition {
        call: next,
        actions,
        changed: true,
    }
}
