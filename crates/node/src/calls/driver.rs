//! The one rule: under the call's lock, load, step, persist, release, act. Actions run as their
//! own tasks (at most one of a kind per call) and feed their outcome back as events.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use skillbox_calls::machine::{self, Action, Call, Event, FailureCode, Role, State};
use skillbox_jc::JcError;
use zeroize::Zeroizing;

use super::records::{self, CallRow, Patch};
use super::{Calls, Key, blocking, lock, now_ms};
use crate::error::Result;
use crate::sources::{self, SourceKind};

pub(super) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What an event brings beside the machine's event.
#[derive(Default)]
pub(super) struct Change {
    pub(super) patch: Patch,
    pub(super) answer: Option<Zeroizing<Vec<u8>>>,
    /// The disclosure-ledger entry this transition records (a decision, a stake): appended in
    /// the transition's own transaction, only when the machine took the event.
    pub(super) ledger: Option<crate::ledger::Entry>,
    /// A ledger entry that stands whether or not the machine takes the event: the box's answer
    /// to a stake written ahead (the bytes left either way). Appended in this step's transaction
    /// — one commit and one head file write for the answer and the transition it brings, not
    /// two (issue 33) — and written even when the step changes nothing else.
    pub(super) recorded: Option<crate::ledger::Entry>,
    /// Owner: the step brings its run's outcome ([`RunEnd`]). The call's coverage turn is given
    /// back once the step is on disk; a run the box refused for the day marks the peer's day of
    /// the skill refused (`coverage::refuse`) in this step's transaction — with the failure it
    /// comes with, and one commit fewer per call than a write of its own (issue 33). Like
    /// `recorded`, it stands whether or not the machine takes the event: the box's day is
    /// used up either way.
    pub(super) run_end: Option<RunEnd>,
    /// Owner: the event is its verified run — charge the call against the skill's daily
    /// ceilings in this step's transaction, first, when the machine takes it
    /// (`inbound::charged_in`): the check, the charge and the run in one commit (issue 33: it
    /// was a commit of its own on a blocking thread, with a whole skill record read, before
    /// this one). Refused, the step writes nothing and the call fails with the code instead.
    pub(super) charge: bool,
    /// The event is taken only if this holds of the call's row as the step finds it, under
    /// the call's lock; otherwise the step changes and writes nothing. A human's decision is
    /// taken only while the call still asks the question it answers (`consent_by`): a check
    /// before the lock could pass and the call move before the step.
    pub(super) only_if: Option<Condition>,
}

/// Owner: how its run ended at the box, as far as the owner may know it ([`Change::run_end`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RunEnd {
    /// The box ran it (answered, withheld or failed otherwise): the box added what the answer
    /// carried to the day's tally, which the owner never sees.
    Ran,
    /// The box refused it at its start, `coverage_exceeded`: the peer's answers of the skill
    /// today already carried the owner's day limits.
    DayUsedUp,
}

/// A condition on the row a step finds ([`Change::only_if`]).
pub(super) type Condition = Box<dyn FnOnce(&CallRow) -> bool + Send>;

impl Change {
    pub(super) fn none() -> Change {
        Change::default()
    }
    pub(super) fn patch(patch: Patch) -> Change {
        Change {
            patch,
            ..Change::default()
        }
    }
    pub(super) fn ledger(entry: crate::ledger::Entry) -> Change {
        Change {
            ledger: Some(entry),
            ..Change::default()
        }
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
pub(super) type Outcome = Option<(Event, Change)>;

/// A step taken: the transition, the row it leaves (what its actions act on), and the run and
/// box the call left, if it moved.
type Stepped = (
    machine::Transition,
    Arc<CallRow>,
    Option<(Option<String>, Option<String>)>,
);

/// An action whose outcome is being stepped: its kind and the run it acted on. It is marked
/// running (`inflight`) until that step is on disk, not only until it returns: a tick in
/// between would find the action owed and not running, and start it again on the record
/// before the outcome — a second stake that reads no answer to the first in the ledger and is
/// sent to a run that has moved on (`wrong_state`: the call failed, 1 to 2 calls in 2,000
/// under load, issue 33).
struct Finished {
    action: &'static str,
    run: Option<String>,
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

/// A box error that may pass (retry later, with the machine's backoff) rather than one that
/// ends the call. Passing: the box full or out of stake memory (`busy`, at open and now also at
/// stake), its per-client or per-key rate (`rate_limited`, 429), this side's own earlier upload
/// of the stake still being read (`upload_in_progress`) or cut off by the box's upload deadline
/// (`upload_timed_out`: the slot is free again, and the written-ahead stake entry stands
/// unanswered until the retry asks the box), and any 5xx. Lasting, by their code:
/// `expires_too_far` and `key_not_allowed` (the same program gets the same answer from that box
/// however often it asks) and every other 4xx.
pub(super) fn transient(e: &JcError) -> bool {
    match e {
        JcError::Transport(_)
        | JcError::NotReady(_)
        | JcError::Busy(_)
        | JcError::OverBudget { .. }
        | JcError::RateLimited
        | JcError::UploadInProgress { .. }
        | JcError::UploadTimedOut => true,
        JcError::Remote { status, code } => {
            *status >= 500
                || *status == 429
                || matches!(
                    code.as_str(),
                    "not_ready"
                        | "busy"
                        | "stakes_missing"
                        | "rate_limited"
                        | "upload_in_progress"
                        | "upload_timed_out"
                )
        }
        _ => false,
    }
}

/// A box that will not take this program at all (its allow-list of node keys, its expiry
/// horizon): lasting at that box, but another the program lists may take it, so an open moves
/// on rather than failing the call.
pub(super) fn box_refuses(e: &JcError) -> bool {
    matches!(e, JcError::Remote { code, .. } if matches!(code.as_str(), "key_not_allowed" | "expires_too_far"))
}

/// How many times in a row a caller's stake finds its box not answering before the run is left
/// for another (the machine's retries: about 2 + 4 s apart). A box that blinks is not left;
/// one that stays away is, well inside the 120 s stall limit.
const LOST_AFTER_ATTEMPTS: u32 = 3;

/// Whether the caller's stake failed because the run's box is lost: it does not answer
/// (refused, reset, timed out, a 5xx other than a full box), for the
/// [`LOST_AFTER_ATTEMPTS`]th time, with this side's stake into the run not taken (a taken
/// stake ends the stake action with `Staked`, never with an error). The owner never moves on
/// its own: it follows the caller's next `call.session`.
fn stake_lost(row: &CallRow, e: &JcError) -> bool {
    row.call.role == Role::Caller
        && row.call.state == State::Opened
        && row.call.attempts >= LOST_AFTER_ATTEMPTS
        && transient(e)
        && super::boxes::move_reason(e) == "box_unreachable"
}

/// A lasting box failure as an event. Its message is the error's code and fixed words: nothing
/// the box (or anyone) sent is kept.
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
        | JcError::BoxKeyNotPinned
        | JcError::TlsKeyNotAttested
        | JcError::HardwareRefused(_)
        | JcError::ProviderHostNotAttested
        | JcError::ProviderHostNotPinned
        | JcError::Evidence(_) => FailureCode::AttestationRejected,
        // The box will not take this program at all (its allow-list, its expiry horizon).
        e if box_refuses(e) => FailureCode::BoxUnavailable,
        _ => FailureCode::BoxFailed,
    };
    let what = match e {
        JcError::Remote { code, .. } => code.clone(),
        other => other.code().to_owned(),
    };
    Event::BoxFailed {
        code,
        message: format!("box: {what} ({})", e.fixed_message()),
    }
}

impl Calls {
    pub(super) async fn open_keys(&self) -> Result<Vec<Key>> {
        let store = self.0.store.clone();
        blocking(move || records::open_calls(&store)).await
    }

    /// Both schedules step open calls with `Tick`: the machine retries what is due and fails
    /// what stalled or expired, in one pure rule. The advance schedule (`all == false`) skips a
    /// call whose record says its tick cannot act yet ([`machine::tick_due_ms`], exact by the
    /// machine's property test); the sweep steps every open call.
    pub(super) async fn tick_open_calls(&self, all: bool) {
        match self.open_keys().await {
            Ok(keys) => {
                let now = now_ms();
                let due = lock(&self.0.tick_due);
                let keys: Vec<Key> = keys
                    .into_iter()
                    .filter(|k| all || due.get(k).is_none_or(|&at| at <= now))
                    .collect();
                drop(due);
                for key in keys {
                    self.feed(key, Event::Tick, Change::none());
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot list open calls"),
        }
    }

    pub(super) fn feed(&self, key: Key, event: Event, change: Change) {
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.apply(key.clone(), event, change).await {
                tracing::warn!(call = %key.0, error = %e, "call event not applied");
            }
        });
    }

    /// The crash tests' failpoint: abort (no cleanup, like kill -9) right after a transition
    /// into the configured state was persisted.
    pub(super) fn crash_point(&self, role: Role, state: State) {
        if self.0.crash_at == Some((role, state)) {
            tracing::error!(
                state = state.as_str(),
                "SKILLBOX_CRASH_AT reached: aborting"
            );
            std::process::abort();
        }
    }

    pub(super) fn call_lock(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.0.locks).entry(key.clone()).or_default().clone()
    }

    /// Insert a new call's row (`write`: its transaction, which inserts `row` and answers
    /// whether it did) and put the row in the cache, so the call's first step does not read back
    /// what was just written: a blocking thread and a parse fewer per call on each side
    /// (issue 33). The call's lock is taken before the insert and held until the row is
    /// cached, so no step can change the row in between and be overwritten by the one inserted.
    /// Only what [`records::insert`] stores is cached: a row with a verified run or a receipt
    /// (never one at insert) is left for the first step to load.
    pub(super) async fn insert_row<T, F>(&self, key: &Key, row: Arc<CallRow>, write: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&crate::store::Tx<'_>) -> Result<(T, bool)> + Send + 'static,
    {
        let guard = self.call_lock(key);
        let held = guard.lock().await;
        let written = self.0.store.write_owned(write).await;
        let cacheable =
            row.verified.is_none() && row.receipt.is_none() && !row.call.state.is_terminal();
        let (out, inserted) = match written {
            Ok((out, true)) => {
                if cacheable {
                    lock(&self.0.rows).insert(key.clone(), row);
                }
                (Ok(out), true)
            }
            Ok((out, false)) => (Ok(out), false),
            Err(e) => (Err(e), false),
        };
        drop(held);
        if !inserted {
            // A request refused or repeated must not leave a lock behind for a call that was
            // never made: a peer sending refused requests would grow the map without end. Only
            // when nobody else holds it (the map's and this one are the only handles).
            let mut locks = lock(&self.0.locks);
            if locks.get(key).is_some_and(|l| Arc::ptr_eq(l, &guard))
                && Arc::strong_count(&guard) == 2
            {
                locks.remove(key);
            }
        }
        out
    }

    /// Step the call with `event`, persist, then execute the actions.
    pub(super) fn apply(
        &self,
        key: Key,
        event: Event,
        change: Change,
    ) -> BoxFuture<Result<Option<Call>>> {
        self.apply_to_run(key, event, change, None)
    }

    /// [`Calls::apply`] for the outcome of an action `finished` (`Some`) for its run: taken
    /// only while that is still the call's run. A box lost after the open moves the call to a
    /// new run, and what an action of the run it left reports — a stake taken, a session
    /// delivered, a policy's answer about that box — is not about the new one.
    ///
    /// The action stays marked running until its outcome is stepped and on disk (see
    /// [`Finished`]).
    fn apply_to_run(
        &self,
        key: Key,
        event: Event,
        change: Change,
        finished: Option<Finished>,
    ) -> BoxFuture<Result<Option<Call>>> {
        let this = self.clone();
        Box::pin(async move {
            let guard = this.call_lock(&key);
            let held = guard.lock().await;
            let for_run = finished.as_ref().map(|f| f.run.clone());
            let stepped = this.step(&key, event, change, for_run).await;
            // The outcome is stepped (or failed to be): the action is no longer running. Still
            // under the call's lock, so a tick's step sees either the action running or its
            // outcome on disk, never neither.
            if let Some(f) = &finished {
                lock(&this.0.inflight).remove(&(key.clone(), f.action, f.run.clone()));
            }
            // A failed step left the row out of the cache (`step` takes it out before it
            // writes): the next step loads it as the store has it.
            let stepped = stepped?;
            // Under the call's lock, so a later step's due time is never overwritten by this
            // one's.
            match &stepped {
                Some((t, _, _)) if !t.call.state.is_terminal() => {
                    let at = machine::tick_due_ms(&t.call, &this.0.timing);
                    lock(&this.0.tick_due).insert(key.clone(), at);
                }
                _ => {
                    lock(&this.0.tick_due).remove(&key);
                }
            }
            drop(held);
            let Some((t, row, left)) = stepped else {
                return Ok(None);
            };
            if let Some((Some(box_url), Some(run_id))) = left {
                let (this, row) = (this.clone(), row.clone());
                tokio::spawn(async move { this.cancel_left(&row, &box_url, &run_id).await });
            }
            if t.changed {
                tracing::debug!(call = %key.0, role = records::role_str(key.1), state = t.call.state.as_str(), "call stepped");
                this.crash_point(key.1, t.call.state);
                if t.call.state.is_terminal() {
                    this.0.metrics.call_finished(
                        records::role_str(key.1),
                        t.call.state.as_str(),
                        t.call.failure.as_ref().map(|f| f.code.as_str()),
                        std::time::Duration::from_millis(
                            now_ms().saturating_sub(t.call.created_at_ms),
                        ),
                    );
                    // A finished call needs neither its lock, its verified run nor its row any
                    // more.
                    lock(&this.0.locks).remove(&key);
                    lock(&this.0.verified).remove(&key);
                    lock(&this.0.rows).remove(&key);
                    lock(&this.0.nonce_halves).remove(&key);
                    lock(&this.0.forwards).remove(&key);
                    // An owner call that ended holding its coverage turn keeps it until its
                    // run's outcome is in (see `coverage::Turns`).
                    if key.1 == Role::Owner {
                        this.settle_turn(key.clone(), row.clone());
                    }
                    // Codes only at INFO: a failure's message may hold local detail.
                    match &t.call.failure {
                        Some(f) if t.call.state == State::Failed => {
                            tracing::info!(call = %key.0, code = f.code.as_str(), "call failed");
                            tracing::debug!(call = %key.0, reason = %f.message, "call failure detail");
                        }
                        _ => {
                            tracing::info!(call = %key.0, state = t.call.state.as_str(), "call finished")
                        }
                    }
                }
            }
            for action in t.actions {
                this.dispatch(key.clone(), action, row.clone());
            }
            Ok(Some(t.call))
        })
    }

    /// One step of the call under its lock (held by the caller): its row (as the last step
    /// left it, or loaded), the machine's transition, and — when it changes anything — the
    /// write, committed before this returns. `None`: no such call. A run whose charge is
    /// refused ([`Change::charge`]) fails the call with the code instead, in a step of its own.
    async fn step(
        &self,
        key: &Key,
        event: Event,
        change: Change,
        for_run: Option<Option<String>>,
    ) -> Result<Option<Stepped>> {
        let (mut event, mut change) = (event, change);
        loop {
            match self.step_once(key, event, change, for_run.clone()).await? {
                Ok(stepped) => return Ok(stepped),
                // Once at most: the failure's step charges nothing.
                Err(code) => {
                    event = Event::BoxFailed {
                        code,
                        message: format!("refused before this run: {}", code.fixed_message()),
                    };
                    change = Change::none();
                }
            }
        }
    }

    /// [`Calls::step`] once: `Err(code)` when the step's charge was refused (nothing written;
    /// the row stays as it was).
    async fn step_once(
        &self,
        key: &Key,
        event: Event,
        mut change: Change,
        for_run: Option<Option<String>>,
    ) -> Result<std::result::Result<Option<Stepped>, FailureCode>> {
        let Some(row) = self.row(key).await? else {
            if let Some(entry) = change.recorded {
                self.append_ledger(entry).await?;
            }
            return Ok(Ok(None));
        };
        let stale = for_run.as_ref().is_some_and(|r| *r != row.call.run_id);
        let unmet = !stale && change.only_if.take().is_some_and(|holds| !holds(&row));
        let tick = matches!(event, Event::Tick);
        let mut t = if stale || unmet {
            if stale {
                tracing::debug!(call = %key.0, "outcome of a run the call left; dropped");
            }
            machine::Transition {
                call: row.call.clone(),
                actions: Vec::new(),
                changed: false,
            }
        } else {
            machine::step(&row.call, event, now_ms(), &self.0.timing)
        };
        if t.changed
            && let Some(m) = &change.patch.moved
        {
            t.call.moves.push(m.clone());
        }
        if tick && self.only_retries_running(key, &row.call, &t) {
            // Nothing to write or do: the schedule moves on in memory (`tick_due`, from `t`).
            t.actions.clear();
            t.changed = false;
            return Ok(Ok(Some((t, row, None))));
        }
        // The policy the new state asks first is answered in this step, not in one of its own.
        let (decided, seen) = match self.decided_in_step(&row, &mut t, &change.patch) {
            Some((entry, seen)) => (entry, Some(seen)),
            None => (None, None),
        };
        let write = t.changed || (!t.actions.is_empty() && change.has_patch());
        // The run (and its box) the call just left, if this step moved it.
        let left = (t.changed && t.call.left_runs.len() > row.call.left_runs.len())
            .then(|| (row.box_url.clone(), row.call.run_id.clone()));
        // Whose day the box refused, only when it did.
        let refusing = (change.run_end == Some(RunEnd::DayUsedUp))
            .then(|| (row.call.peer.clone(), row.call.skill.clone()));
        let ends_turn = change.run_end.is_some();
        if !write && change.recorded.is_none() && refusing.is_none() {
            if ends_turn {
                self.end_turn(&row);
            }
            return Ok(Ok(Some((t, row, left))));
        }
        // The owner's charge, only for a run the machine takes.
        let charging = (change.charge && t.changed && key.1 == Role::Owner).then(|| {
            // The box instance of the run this step takes (its verified attestation comes with
            // it), for the day's pin.
            let instance = super::coverage::box_instance(
                change.patch.box_url.as_deref().or(row.box_url.as_deref()),
                change.patch.verified.as_ref().or(row.verified.as_ref()),
            );
            (
                (row.call.peer.clone(), row.call.skill.clone(), instance),
                self.0.ceilings.limits(),
                self.0.guard.clone(),
            )
        });
        // Out of the cache until the write is known to have committed: a step whose future is
        // dropped while its write is queued (an API request cancelled) must not leave the row
        // from before that write for the next step.
        lock(&self.0.rows).remove(key);
        let data_key = self.0.sources.key().clone();
        let signing = self.0.signing.clone();
        let (k, call, changed) = (key.clone(), t.call, t.changed);
        let written = self
            .0
            .store
            .write_owned(move |tx| {
                if let Some(((peer, skill, instance), defaults, guard)) = &charging
                    && let Some(code) = super::inbound::charged_in(
                        tx,
                        (&k.0, peer, skill, instance),
                        *defaults,
                        guard,
                    )?
                {
                    return Ok(Err(code));
                }
                let mut seq = None;
                if let Some(entry) = change.recorded {
                    seq = Some(crate::ledger::append(tx, &signing, entry)?.entry.seq);
                }
                if let Some((peer, skill)) = &refusing {
                    super::coverage::refuse(tx, peer, skill, super::coverage::today())?;
                }
                if !write {
                    return Ok(Ok((call, change.patch, seq)));
                }
                records::update(tx, &call, &change.patch)?;
                if let Some(entry) = change.ledger
                    && changed
                {
                    seq = Some(crate::ledger::append(tx, &signing, entry)?.entry.seq);
                }
                if let Some(entry) = decided {
                    seq = Some(crate::ledger::append(tx, &signing, entry)?.entry.seq);
                }
                if let Some(answer) = &change.answer
                    && call.state == State::Answered
                {
                    sources::put_in(
                        tx,
                        &data_key,
                        &records::answer_source(&k.0),
                        SourceKind::Text,
                        answer,
                    )?;
                }
                if call.state.is_terminal() && k.1 == Role::Caller {
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
                Ok(Ok((call, change.patch, seq)))
            })
            .await?;
        let (call, patch, appended) = match written {
            Ok(written) => written,
            Err(code) => {
                // Nothing was written: the row is still as it was.
                lock(&self.0.rows).insert(key.clone(), row);
                return Ok(Err(code));
            }
        };
        t.call = call;
        if ends_turn {
            self.end_turn(&row);
        }
        // The head outside the database follows the committed entry. Failing to write it does
        // not undo the transition (it is on disk); the next append or `ledger verify`
        // (`head_file_missing`, `rolled_back`) shows it.
        if let Some(seq) = appended {
            self.publish_head(seq);
        }
        // What the actions act on, and the next step starts from: the row as just persisted.
        let row = if write {
            // A step that asked the policy built the row it showed it (the patch applied, the
            // same again here): only its call moves on. Otherwise the row itself, not a copy,
            // when no running action still holds it (it left the cache above): a row carries the
            // program envelope, the verified facts and the receipt, and copying it at every
            // written step was ~2 % of a node's CPU at 2,000 in flight (issue 33).
            let before = seen.unwrap_or_else(|| Arc::unwrap_or_clone(row));
            Arc::new(before.updated(t.call.clone(), &patch))
        } else {
            row
        };
        if !t.call.state.is_terminal() {
            lock(&self.0.rows).insert(key.clone(), row.clone());
        }
        Ok(Ok(Some((t, row, left))))
    }

    /// Whether tick transition `t` from `before` is only a retry of owed actions that are all
    /// still running for its run: then dispatching them again does nothing (one of a kind runs
    /// at a time), and persisting the retry's count and next time would be the step's only
    /// effect — a commit per call per retry while a loaded node's actions wait their turn
    /// (issue 33: at 5,000 in flight, calls sit for seconds in states whose action is under
    /// way). A stall or an expiry changes the state and is never skipped; the retry's schedule
    /// still moves on, in memory (`tick_due` is taken from `t`), at the spacing of the last
    /// retry written (the skipped ones do not double it: a look every few seconds, no write).
    /// An action that ends without an outcome leaves `inflight`, and the next tick retries it
    /// as before.
    fn only_retries_running(&self, key: &Key, before: &Call, t: &machine::Transition) -> bool {
        if !t.changed
            || t.actions.is_empty()
            || t.call.state != before.state
            || t.call.run_id != before.run_id
        {
            return false;
        }
        let inflight = lock(&self.0.inflight);
        t.actions
            .iter()
            .all(|a| inflight.contains(&(key.clone(), action_name(a), t.call.run_id.clone())))
    }

    /// When transition `t` (from `row`, with `patch`) owes the policy's answer
    /// (`Action::CheckPolicy`: either side's run opened and verified), ask it now and
    /// take its event in the same step: `t` becomes the two transitions' end, with the actions
    /// of both (each is safe to do again, and the first's were dispatched with the second's
    /// before); returned are the decision's ledger entry, to be appended in this step's
    /// transaction, and the row the policy was shown (the step's new row but for its call). The policy is pure and local (no I/O): asking it as its own action cost
    /// each side a step and a commit per call, on the call's path (issue 33). An `ask` is still
    /// a step to `awaiting_consent`, where the human decides; nothing is staked before that.
    fn decided_in_step(
        &self,
        row: &CallRow,
        t: &mut machine::Transition,
        patch: &Patch,
    ) -> Option<(Option<crate::ledger::Entry>, CallRow)> {
        if !t.changed || !t.actions.contains(&Action::CheckPolicy) {
            return None;
        }
        // What the policy sees, and its ledger entry names: the row as this step leaves it.
        let seen = row.clone().updated(t.call.clone(), patch);
        let (event, decision) = self.check_policy(&seen);
        let then = machine::step(&t.call, event, now_ms(), &self.0.timing);
        if !then.changed {
            return None;
        }
        let mut actions: Vec<Action> = std::mem::take(&mut t.actions)
            .into_iter()
            .filter(|a| *a != Action::CheckPolicy)
            .collect();
        for a in then.actions {
            if !actions.contains(&a) {
                actions.push(a);
            }
        }
        t.call = then.call;
        t.actions = actions;
        Some((decision.ledger, seen))
    }

    /// The call's row as its last step left it, or as the store has it (then kept, while the
    /// call is open).
    pub(super) async fn row(&self, key: &Key) -> Result<Option<Arc<CallRow>>> {
        if let Some(row) = lock(&self.0.rows).get(key) {
            return Ok(Some(row.clone()));
        }
        let store = self.0.store.clone();
        let k = key.clone();
        let Some(row) = blocking(move || records::load(&store, &k.0, k.1)).await? else {
            return Ok(None);
        };
        let row = Arc::new(row);
        if !row.call.state.is_terminal() {
            lock(&self.0.rows).insert(key.clone(), row.clone());
        }
        Ok(Some(row))
    }

    /// Run an action as its own task, unless one of its kind is already running for this call.
    /// `row` is the call's row as the transition that owes the action persisted it (so the
    /// action does not read it back).
    pub(super) fn dispatch(&self, key: Key, action: Action, row: Arc<CallRow>) {
        let name = action_name(&action);
        let run = row.call.run_id.clone();
        if !lock(&self.0.inflight).insert((key.clone(), name, run.clone())) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let Some((event, change)) = this.execute(action, row).await else {
                lock(&this.0.inflight).remove(&(key, name, run));
                return;
            };
            let finished = Finished { action: name, run };
            if let Err(e) = this
                .apply_to_run(key.clone(), event, change, Some(finished))
                .await
            {
                tracing::warn!(call = %key.0, error = %e, "call event not applied");
            }
        });
    }

    pub(super) async fn load(&self, key: &Key) -> Option<CallRow> {
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

    async fn execute(&self, action: Action, row: Arc<CallRow>) -> Outcome {
        if row.call.state.is_terminal()
            && !matches!(action, Action::CancelRun | Action::SendFailed { .. })
        {
            return None;
        }
        let staking = action == Action::Stake;
        let result = match action {
            Action::SendRequest => self.send_request(&row).await,
            // Admission runs before an owner row exists (inbound.rs); a row stored `received` by
            // an older version is refused rather than admitted late.
            Action::Admit => Ok(Some((
                Event::NotAdmitted {
                    code: FailureCode::NotAdmitted,
                    message: "admission is decided before a call is recorded".into(),
                },
                Change::none(),
            ))),
            Action::SendAccepted => self.send_accepted(&row).await,
            Action::OpenRun => self.open_run(&row).await,
            Action::VerifyRun { run_id, box_url } => self.verify_run(&row, &run_id, &box_url).await,
            Action::SendSession => self.send_session(&row).await,
            Action::Stake => self.stake(&row).await,
            Action::CheckPolicy => Ok(Some(self.check_policy(&row))),
            Action::RequestConsent => {
                tracing::info!(call = %row.call.id, role = records::role_str(row.call.role), skill = %row.call.skill, "call awaits consent: skillbox approve|deny");
                Ok(None)
            }
            Action::Submit => self.submit(&row).await,
            Action::FetchOutcome => self.fetch_outcome(&row).await,
            Action::CancelRun => self.cancel_run(&row).await,
            Action::SendFailed { code } => {
                self.send_failed(&row, code).await;
                Ok(None)
            }
        };
        match result {
            Ok(outcome) => outcome,
            Err(e) if staking && stake_lost(&row, &e) => {
                tracing::info!(call = %row.call.id, code = e.code(), "box lost before this side's stake was taken; moving the run");
                if let Some(url) = &row.box_url {
                    self.0.boxes.failed(url, "box_unreachable");
                }
                Some((Event::BoxLost, Change::none()))
            }
            Err(e) if transient(&e) => {
                // The box's own code for a refusal it answered (`busy`, `rate_limited`, ...).
                let answered = match &e {
                    JcError::Remote { code, .. } => code.as_str(),
                    _ => "",
                };
                tracing::debug!(call = %row.call.id, code = e.code(), answered, "box busy or unreachable; retrying later");
                None
            }
            Err(e) => Some((box_failure(&e), Change::none())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use skillbox_peers::{IncomingPayload, Payload, PayloadTransport, PeerId, PeersError};

    use super::*;
    use crate::calls::{CallError, CallsDeps, Directory, Offered};
    use crate::crypto::DataKey;
    use crate::store::Store;

    /// A transport that sends nothing: each send is acknowledged at once (`Quiet(_, true)`), or
    /// never (`false`: a peer that took its requests' stream and never answers, or one gone
    /// while the retries go on).
    struct Quiet(PeerId, bool);
    impl PayloadTransport for Quiet {
        fn local_peer_id(&self) -> PeerId {
            self.0
        }
        fn send(
            &self,
            _to: PeerId,
            _payload: Payload,
        ) -> skillbox_peers::transport::BoxFuture<'_, std::result::Result<(), PeersError>> {
            if self.1 {
                Box::pin(std::future::ready(Ok(())))
            } else {
                Box::pin(std::future::pending())
            }
        }
    }
    struct Empty;
    impl Directory for Empty {
        fn offered(&self, _peer: &str, _skill: &str) -> Option<Offered> {
            None
        }
        fn rows(&self) -> Vec<skillbox_peers::BoardRow> {
            Vec::new()
        }
    }

    fn calls(store: Arc<Store>) -> Calls {
        calls_of(store, |_| {})
    }

    /// The calls of a test node, its deps as `edit` leaves them.
    fn calls_of(store: Arc<Store>, edit: impl FnOnce(&mut CallsDeps)) -> Calls {
        let key = Arc::new(DataKey::from_bytes(&[9u8; 32]));
        let mut deps = CallsDeps {
            store: store.clone(),
            sources: crate::sources::Sources::new(store.clone(), key.clone()),
            skills: crate::skills::Skills::new(store, key, "test"),
            node_seed: [7u8; 32],
            node_id: "node".into(),
            transport: Arc::new(Quiet(PeerId::random(), true)),
            directory: Arc::new(Empty),
            boxes: Arc::new(super::super::boxes::Boxes::new(
                &[],
                true,
                &[],
                &BTreeMap::new(),
            )),
            timing: machine::Timing::default(),
            settings: Default::default(),
            ceilings: Default::default(),
            guard: Default::default(),
            policy: Default::default(),
            metrics: Arc::default(),
        };
        edit(&mut deps);
        Calls::new(deps)
    }

    /// An owner's call as `shape` leaves `c1` (made today), stored: its row and key.
    fn owner_call(store: &Store, shape: impl FnOnce(&mut Call)) -> (CallRow, Key) {
        stored_call(store, Role::Owner, shape)
    }

    /// A call of `role` as `shape` leaves `c1` (made today), stored: its row and key.
    fn stored_call(store: &Store, role: Role, shape: impl FnOnce(&mut Call)) -> (CallRow, Key) {
        let mut call = records::tests::started(role);
        call.created_at_ms = now_ms();
        shape(&mut call);
        let key = (call.id.clone(), role);
        let row = CallRow {
            call,
            program: None,
            box_url: None,
            verified: None,
            sources: vec![],
            receipt: None,
        };
        store.write(|tx| records::insert(tx, &row)).expect("insert");
        (row, key)
    }

    /// An owner's call `c1` in `state` on run `rrr…`, stored: its row and key.
    fn owner_call_on_run(store: &Store, state: State) -> (CallRow, Key) {
        owner_call(store, |call| {
            call.state = state;
            call.run_id = Some("r".repeat(32));
        })
    }

    /// An owner's call `id` of peer `peer`, accepted (not yet charged), stored.
    fn accepted_owner_call(store: &Store, id: &str, peer: &str) -> Key {
        owner_call(store, |call| {
            call.id = id.into();
            call.peer = peer.into();
            call.state = State::Accepted;
        })
        .1
    }

    fn charge_of(store: &Store, id: &str) -> i64 {
        store
            .read(|c| {
                Ok(c.query_row(
                    "SELECT charge FROM calls WHERE id = ?1 AND role = 'owner'",
                    [id],
                    |r| r.get(0),
                )?)
            })
            .expect("charge")
    }

    /// The owner's verified run `run` of call `key`, stepped with its charge: the call after.
    async fn opened(calls: &Calls, key: &Key, run: &str) -> Call {
        let change = Change {
            charge: true,
            ..Change::default()
        };
        let event = Event::RunOpened {
            run_id: run.to_owned(),
        };
        calls
            .apply(key.clone(), event, change)
            .await
            .expect("step")
            .expect("call")
    }

    /// Issue 33: the owner's verified run is charged in the one commit that takes it — the
    /// charge and the run together, no write of its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_is_charged_in_the_commit_that_takes_it() {
        let (_dir, store, calls) = file_node(|_| {});
        let key = accepted_owner_call(&store, "c1", "peer");
        let before = store.write_stats().commits;
        let call = opened(&calls, &key, &"r".repeat(32)).await;
        assert_eq!(call.state, State::Opened);
        assert_eq!(store.write_stats().commits - before, 1, "one commit");
        assert_eq!(charge_of(&store, "c1"), 1);
        assert_eq!(stored(&store).call.run_id, Some("r".repeat(32)));
    }

    /// A run past the skill's daily ceiling (another call of the day charged first) is
    /// refused in that step: nothing of the run is written, the call is not charged, and it
    /// fails with `daily_limit`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_past_the_ceiling_is_refused_with_nothing_of_it_written() {
        let (_dir, store, calls) = file_node(|deps| deps.ceilings.calls_per_day = 1);
        let first = accepted_owner_call(&store, "c0", "other");
        let key = accepted_owner_call(&store, "c1", "peer");
        let call = opened(&calls, &first, &"q".repeat(32)).await;
        assert_eq!(call.state, State::Opened);
        let call = opened(&calls, &key, &"r".repeat(32)).await;
        assert_eq!(call.state, State::Failed);
        let failure = call.failure.expect("failure");
        assert_eq!(failure.code, FailureCode::DailyLimit);
        assert_eq!(charge_of(&store, "c1"), 0);
        let stored = stored(&store);
        assert_eq!(stored.call.state, State::Failed);
        assert_eq!(stored.call.run_id, None, "the refused run was written");
    }

    /// The decisions the ledger holds for call `c1`.
    fn decisions(store: &Store) -> Vec<String> {
        let filter = crate::ledger::Filter {
            call: Some("c1".into()),
            ..Default::default()
        };
        crate::ledger::list(store, &filter)
            .expect("ledger")
            .into_iter()
            .filter(|l| l.entry.kind == crate::ledger::EntryKind::Decision)
            .map(|l| l.entry.decision)
            .collect()
    }

    /// Issue 33: the policy a new state asks first is answered in the step that reaches it —
    /// the owner's stake taken and its submit allowed, the caller's run opened and its stake
    /// allowed — each with its decision in the ledger, in one step. On a current-thread
    /// runtime nothing dispatched has run when `apply` returns: before, the step ended in
    /// `staked` (the caller's unconsented) with no decision yet.
    #[tokio::test]
    async fn the_policy_a_step_owes_is_answered_in_that_step() {
        let (_dir, store, node) = file_node(|_| {});
        let (_, key) = owner_call_on_run(&store, State::Opened);
        let call = stepped(&node, key.clone(), Event::Staked).await;
        assert_eq!(call.state, State::Submitting);
        assert_eq!(stored_state(&store), State::Submitting);
        assert_eq!(decisions(&store), ["allow"]);
        // The row the next step starts from is the row the store has.
        let cached = lock(&node.0.rows).get(&key).cloned().expect("cached");
        assert!(records::tests::same(&cached, &stored(&store)), "{cached:?}");

        let (_dir, store, node) = file_node(|_| {});
        let (_, key) = stored_call(&store, Role::Caller, |call| call.state = State::Accepted);
        let event = Event::RunOpened {
            run_id: "r".repeat(32),
        };
        let call = stepped(&node, key, event).await;
        assert_eq!((call.state, call.consented), (State::Opened, true));
        assert_eq!(decisions(&store), ["allow"]);
    }

    /// A policy that asks still stops at `awaiting_consent`, in the same step, with no decision
    /// in the ledger: the human decides.
    #[tokio::test]
    async fn a_policy_that_asks_leaves_the_call_to_the_human() {
        let (_dir, store, node) = file_node(|deps| {
            deps.policy.default = skillbox_calls::Decision::Ask;
        });
        let (_, key) = owner_call_on_run(&store, State::Opened);
        let call = stepped(&node, key, Event::Staked).await;
        assert_eq!(call.state, State::AwaitingConsent);
        assert!(decisions(&store).is_empty());
    }

    /// A decision taken only while the call still asks the question it answers
    /// (`Change::only_if`, checked under the call's lock): when it no longer holds, the step
    /// takes nothing and writes nothing — the call stays parked, no decision in the ledger —;
    /// when it holds, the decision is taken with its entry.
    #[tokio::test]
    async fn a_decision_whose_condition_no_longer_holds_writes_nothing() {
        let (_dir, store, node) = file_node(|_| {});
        let (row, key) = owner_call_on_run(&store, State::AwaitingConsent);
        let decide = |holds: bool| Change {
            only_if: Some(Box::new(move |_: &CallRow| holds)),
            ..Change::ledger(super::super::ledger::ledger_entry(
                &row,
                "allow",
                "human:api",
                vec![],
            ))
        };
        let before = store.write_stats().commits;
        let call = node
            .apply(key.clone(), Event::Consent { allow: true }, decide(false))
            .await
            .expect("step")
            .expect("call");
        assert_eq!(call.state, State::AwaitingConsent);
        assert_eq!(stored_state(&store), State::AwaitingConsent);
        assert!(decisions(&store).is_empty());
        assert_eq!(store.write_stats().commits, before, "nothing written");
        let call = node
            .apply(key, Event::Consent { allow: true }, decide(true))
            .await
            .expect("step")
            .expect("call");
        // Parked before its stake (review 23 F4): the yes owes the stake, then the submit.
        assert_eq!((call.state, call.consented), (State::Opened, true));
        assert_eq!(decisions(&store), ["allow"]);
    }

    /// The owner's call `c1` parked for consent on its verified run `rrr…` of a signed
    /// program: a question whose facts a remembered decision is bound to. Stored.
    fn parked_owner_call(store: &Store) -> Key {
        let provider: skillbox_skill::ProviderId = "local".parse().expect("provider");
        let program = super::super::program::build(super::super::program::CallerFacts {
            call_id: "c1".into(),
            caller_key: "11".repeat(32),
            result_key: "22".repeat(32),
            owner_key: "33".repeat(32),
            boxes: vec![skillbox_jc::program::BoxIdentity {
                platform: "insecure-dev".into(),
                measurement: "ab".repeat(48),
            }],
            skill: "taste".into(),
            declaration_digest: format!("sha256:{}", "cd".repeat(32)),
            guard: super::super::program::guard_for(&provider),
            body_max_tokens: None,
            model_context_tokens: None,
            provider,
            provider_host: None,
            request_len: 100,
            sources: vec![],
            output_max_bytes: 4096,
            limits: Default::default(),
            expires_at: 2_000_000_000,
        })
        .expect("program");
        let signing = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]);
        let env = skillbox_jc::dsse::sign_program(&program, &signing).expect("signed");
        let run = "r".repeat(32);
        let verified = skillbox_jc::attest::VerifiedRunRecord {
            run_id: run.clone(),
            program_hash: "0".repeat(64),
            platform: "insecure-dev".into(),
            measurement: "ab".repeat(48),
            hpke_public_key: "44".repeat(32),
            receipt_key: "55".repeat(32),
            expires_at: 2_000_000_000,
            no_hardware_isolation: true,
            tcb_status: None,
            tls_spki_sha256: None,
        };
        let mut call = records::tests::started(Role::Owner);
        call.created_at_ms = now_ms();
        call.state = State::AwaitingConsent;
        call.run_id = Some(run);
        let row = CallRow {
            program: Some(String::from_utf8_lossy(&env.to_json()).into_owned()),
            box_url: None,
            verified: Some(serde_json::to_value(&verified).expect("verified")),
            sources: vec![],
            receipt: None,
            call,
        };
        assert!(
            super::super::consent::told_of(&row).is_some(),
            "a question with its facts"
        );
        // The verified run is written as its step writes it: a patch of the stored row.
        let patch = records::Patch {
            verified: row.verified.clone(),
            ..records::Patch::default()
        };
        store
            .write(|tx| {
                records::insert(tx, &row)?;
                records::update(tx, &row.call, &patch)
            })
            .expect("insert");
        (row.call.id.clone(), Role::Owner)
    }

    /// Waits until `n` handles of the call's lock are out (the map's, the test's, and one per
    /// decision queued on it).
    async fn queued_on(lock: &Arc<tokio::sync::Mutex<()>>, n: usize) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while Arc::strong_count(lock) < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the decision reached the call's lock");
    }

    /// Two decisions race on one parked call, both having read it parked (two tabs): the first
    /// to take the lock allows it; the second, "deny and remember" with the same question,
    /// finds the call no longer parked. It is refused `not_awaiting_consent` and leaves
    /// nothing: no rule (before, a Deny rule was saved ahead of every other and the answer was
    /// 200, though the call ran), one decision in the ledger.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_decision_that_lost_the_race_saves_no_rule() {
        let (_dir, store, node) = file_node(|_| {});
        let key = parked_owner_call(&store);
        let rules_before = node.policy().rules.len();
        let question = node.get("c1").await.expect("call")[0]
            .question
            .clone()
            .expect("question");
        // Both decisions pass the read before the lock, then queue on it in order.
        let lock = node.call_lock(&key);
        let held = lock.lock().await;
        let decide = |allow: bool, remember: bool| {
            let (node, question) = (node.clone(), question.clone());
            tokio::spawn(async move {
                node.consent_by(
                    "c1",
                    allow,
                    remember,
                    super::super::consent::DecidedBy::Ui,
                    Some(&question),
                )
                .await
            })
        };
        let tab_a = decide(true, false);
        queued_on(&lock, 3).await;
        let tab_b = decide(false, true);
        queued_on(&lock, 4).await;
        drop(held);
        let a = tab_a.await.expect("tab A");
        let b = tab_b.await.expect("tab B");
        assert_eq!(node.policy().rules.len(), rules_before, "a rule was saved");
        // Tab A's yes took the call back to `opened`, its stake owed (review 23 F4).
        assert_eq!(a.expect("tab A's decision")[0].state, "opened");
        match b {
            Err(CallError::NotAwaitingConsent { state, .. }) => assert_eq!(state, "opened"),
            other => panic!("tab B's decision, never taken, answered {other:?}"),
        }
        assert_eq!(decisions(&store), ["allow"]);
    }

    /// A request the owner refuses, from a peer that never takes the refusal: handling it ends
    /// once the refusal's delivery is given up (`REFUSAL_DELIVERY`), not when the transport's
    /// retries end (about a minute for a peer that takes the stream and never answers) — a
    /// task, and the request it held, per request at the peer's rate, for that long.
    #[tokio::test]
    async fn a_refusal_nobody_takes_is_given_up() {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let node = calls_of(store, |d| {
            d.transport = Arc::new(Quiet(PeerId::random(), false))
        });
        tokio::time::timeout(Duration::from_secs(30), node.on_payload(refused_request(1)))
            .await
            .expect("the refusal's delivery was given up");
    }

    /// A `call.request` the owner refuses (no such skill, a program that is not one).
    fn refused_request(n: u64) -> IncomingPayload {
        IncomingPayload {
            from: PeerId::random(),
            payload: Payload {
                kind: skillbox_peers::PayloadKind::CallRequest,
                call_id: format!("c{n}"),
                body: serde_json::json!({"skill": "taste", "program": "x".repeat(4096)}),
            },
            seq: n,
            sent_at: now_ms(),
            signed: skillbox_peers::SignedPayload {
                envelope: String::new(),
                signature: String::new(),
            },
        }
    }

    /// Payloads handled at once are bounded: at the limit none is taken from the queue, which
    /// fills, and the transport answers the next sender `busy`. Without the limit the queue
    /// was drained into a task per payload however many were held (here by refusals nobody
    /// takes, each for up to 5 s).
    #[tokio::test]
    async fn payloads_past_the_limit_wait_in_the_queue() {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let node = calls_of(store, |d| {
            d.transport = Arc::new(Quiet(PeerId::random(), false))
        });
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let serving = tokio::spawn(node.clone().serve_inbound(rx, 2));
        for n in 1..=3 {
            // Each waits for room: the third finds it once the second is taken.
            tokio::time::timeout(Duration::from_secs(3), tx.send(refused_request(n)))
                .await
                .expect("room in the queue")
                .expect("queue open");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            matches!(
                tx.try_send(refused_request(4)),
                Err(tokio::sync::mpsc::error::TrySendError::Full(_))
            ),
            "a payload past the limit was taken from the queue"
        );
        // The refusals given up (5 s), the held payloads go on.
        tokio::time::timeout(Duration::from_secs(20), tx.send(refused_request(5)))
            .await
            .expect("the queue moves again once handling ends")
            .expect("queue open");
        drop(tx);
        tokio::time::timeout(Duration::from_secs(30), serving)
            .await
            .expect("serving ends with its sender")
            .expect("no panic");
    }

    /// A consent rule remembered in the older form (no source set, no surface) is read from the
    /// store as narrow as the answer it recorded (`Rule::narrow_as_remembered`).
    #[test]
    fn a_stored_remembered_rule_of_the_older_form_is_read_narrow() {
        let store = Store::open_in_memory().expect("store");
        let rule: skillbox_calls::policy::Rule = serde_json::from_value(serde_json::json!({
            "side": "caller", "peer": "P", "skill": "taste", "decision": "allow",
            "told": {
                "declaration_digest": format!("sha256:{}", "ab".repeat(32)),
                "provider": "openai", "provider_host": null,
                "platform": "tdx", "hardware_isolation": true
            }
        }))
        .expect("the older form parses");
        let policy = crate::config::PolicyConfig {
            rules: vec![rule],
            ..crate::config::PolicyConfig::default()
        };
        super::super::save_policy(&store, &policy).expect("saved");
        let read = super::super::load_policy(&store)
            .expect("read")
            .expect("a policy");
        assert_eq!(read.rules[0].sources_within, Some(Vec::new()));
        assert_eq!(
            read.rules[0].surface,
            Some(skillbox_calls::policy::Surface::Human)
        );
    }

    /// A file-backed node, its deps as `edit` leaves them: its dir (kept while it lives), its
    /// store, its calls.
    fn file_node(edit: impl FnOnce(&mut CallsDeps)) -> (tempfile::TempDir, Arc<Store>, Calls) {
        let dir = tempfile::tempdir().expect("dir");
        let store = Arc::new(Store::open(&dir.path().join("node.db")).expect("store"));
        let node = calls_of(store.clone(), edit);
        (dir, store, node)
    }

    /// A node on an in-memory store holding the staked owner call `c1`: the store, the
    /// calls, the call's row and key.
    fn staked_node() -> (Arc<Store>, Calls, CallRow, Key) {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let node = calls(store.clone());
        let (row, key) = owner_call_on_run(&store, State::Staked);
        (store, node, row, key)
    }

    /// Step call `key` with `event` and nothing beside it: the call after.
    async fn stepped(node: &Calls, key: Key, event: Event) -> Call {
        node.apply(key, event, Change::none())
            .await
            .expect("step")
            .expect("call")
    }

    /// Issue 33: a retry due while every owed action is still running writes nothing — the
    /// schedule moves on in memory — and one due while an owed action is not running is
    /// persisted and dispatched as before.
    #[tokio::test]
    async fn a_retry_of_actions_still_running_writes_nothing() {
        let (_dir, store, node) = file_node(|_| {});
        let run = "r".repeat(32);
        let (_, key) = owner_call(&store, |call| {
            // Allowed: its stake is what `opened` owes (review 23 F4).
            call.state = State::Opened;
            call.consented = true;
            call.run_id = Some(run.clone());
            call.retry_at_ms = 0;
            call.progressed_at_ms = now_ms();
        });
        let running = (key.clone(), "stake", Some(run.clone()));
        lock(&node.0.inflight).insert(running.clone());
        let before = store.write_stats().commits;
        let call = stepped(&node, key.clone(), Event::Tick).await;
        assert_eq!(
            store.write_stats().commits,
            before,
            "a retry of a running stake was written"
        );
        assert!(
            call.retry_at_ms > now_ms(),
            "the retry's schedule did not move on"
        );
        let due = lock(&node.0.tick_due).get(&key).copied();
        assert_eq!(due, Some(machine::tick_due_ms(&call, &node.0.timing)));
        assert_eq!(stored(&store).call.attempts, 1);
        // The stake ended without an outcome: the next retry is persisted as before.
        lock(&node.0.inflight).remove(&running);
        stepped(&node, key, Event::Tick).await;
        assert_eq!(store.write_stats().commits, before + 1);
        assert_eq!(stored(&store).call.attempts, 2);
    }

    /// Call `c1`'s row as the store has it.
    fn stored(store: &Store) -> CallRow {
        records::load(store, "c1", Role::Owner)
            .expect("load")
            .expect("row")
    }

    /// Wait (10 s at most) until `done` holds; `what` names what never happened.
    async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The store's writer, held by a blocking write on a thread of its own until released:
    /// every write queued meanwhile waits for it, whatever the machine's load.
    struct HeldWriter {
        release: std::sync::mpsc::Sender<()>,
        holder: std::thread::JoinHandle<()>,
    }

    impl HeldWriter {
        fn hold(store: &Arc<Store>) -> HeldWriter {
            let (held_tx, held) = std::sync::mpsc::channel();
            let (release, released) = std::sync::mpsc::channel::<()>();
            let store = store.clone();
            let holder = std::thread::spawn(move || {
                store
                    .write(|_tx| {
                        let _ = held_tx.send(());
                        // Until released, or until the test is gone (the sender dropped).
                        let _ = released.recv();
                        Ok(())
                    })
                    .expect("the holding write");
            });
            held.recv().expect("the writer was never held");
            HeldWriter { release, holder }
        }

        /// Let the writer go, once the holding write has committed.
        fn release(self) {
            let _ = self.release.send(());
            self.holder.join().expect("the holding write");
        }
    }

    /// The stored state of the staked owner call `c1`.
    fn stored_state(store: &Store) -> State {
        stored(store).call.state
    }

    /// A new call's row is cached as its insert stored it, so its first step reads nothing
    /// back; an insert that finds the call there already (a repeated request) caches nothing.
    #[tokio::test]
    async fn a_row_inserted_is_cached_as_the_store_has_it() {
        let (_dir, store, calls) = file_node(|_| {});
        let mut call = records::tests::started(Role::Caller);
        call.state = State::Requested;
        let row = Arc::new(CallRow {
            call,
            program: Some("{}".into()),
            box_url: Some("https://box.example".into()),
            verified: None,
            sources: vec!["history".into()],
            receipt: None,
        });
        let key = ("c1".to_owned(), Role::Caller);
        let r = row.clone();
        calls
            .insert_row(&key, row.clone(), move |tx| {
                records::insert(tx, &r)?;
                Ok(((), true))
            })
            .await
            .expect("inserted");
        let cached = lock(&calls.0.rows).get(&key).cloned().expect("cached");
        let stored = records::load(&store, "c1", Role::Caller)
            .expect("load")
            .expect("row");
        assert!(
            records::tests::same(&cached, &stored),
            "the cached row differs from the stored one: {cached:?} against {stored:?}"
        );

        // Found there already: nothing is cached, whatever the row says.
        lock(&calls.0.rows).remove(&key);
        let again = row.clone();
        let inserted = calls
            .insert_row(&key, row.clone(), move |tx| {
                Ok(((), records::insert(tx, &again).is_ok()))
            })
            .await;
        assert!(inserted.is_ok());
        assert!(
            lock(&calls.0.rows).get(&key).is_none(),
            "a row not inserted was cached"
        );

        // Refused (or failed): no lock is left behind for a call that was never made.
        let never = ("c2".to_owned(), Role::Owner);
        for refused in [true, false] {
            let done = calls
                .insert_row(&never, row.clone(), move |_tx| {
                    if refused {
                        Ok(((), false))
                    } else {
                        Err(crate::error::NodeError::invalid("call", "refused"))
                    }
                })
                .await;
            assert_eq!(done.is_ok(), refused);
            assert!(
                !lock(&calls.0.locks).contains_key(&never),
                "a lock was left for a call never made"
            );
        }
    }

    /// The box's refusal of a run for the day is kept in the step's own transaction, also when
    /// the machine does not take the event (the box's day is used up either way): here an
    /// outcome for a run the call already left. An outcome it ran writes nothing of coverage.
    #[tokio::test]
    async fn a_days_refusal_is_kept_with_its_step_taken_or_not() {
        use super::super::coverage::{day_of, refused};
        let (store, calls, row, key) = staked_node();
        let guard = crate::config::GuardConfig::default();
        let refused_today = || {
            store
                .write(|tx| {
                    let today = day_of(crate::store::now_secs());
                    refused(tx, &row.call.peer, &row.call.skill, today, &guard)
                })
                .expect("refused")
        };
        for (run_end, refusing) in [(RunEnd::Ran, false), (RunEnd::DayUsedUp, true)] {
            let stepped = calls
                .apply_to_run(
                    key.clone(),
                    Event::ReceiptStored,
                    Change {
                        run_end: Some(run_end),
                        ..Change::none()
                    },
                    Some(Finished {
                        action: "fetch_outcome",
                        run: Some("another run".into()),
                    }),
                )
                .await
                .expect("stepped")
                .expect("the call");
            assert_eq!(
                stepped.state,
                State::Staked,
                "the stale outcome changed the call"
            );
            assert_eq!(refused_today(), refusing, "{run_end:?}");
        }
    }

    /// A step's ledger entry reaches the head file outside the database soon after the step,
    /// without the step waiting for it; entries asked for while a write of the file is under
    /// way are covered by the next one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_steps_entries_reach_the_head_file_after_it() {
        use crate::ledger::{self, Entry, EntryKind};
        let (_dir, store, calls) = file_node(|_| {});
        let (_, key) = owner_call_on_run(&store, State::Staked);
        let file_seq = || {
            ledger::read_head_file(&ledger::head_file(&store).expect("a file-backed store"))
                .ok()
                .flatten()
                .map_or(0, |h| h.seq)
        };
        assert_eq!(file_seq(), 0, "no head file before any entry");
        let mut steps = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let (calls, key) = (calls.clone(), key.clone());
            steps.spawn(async move {
                calls
                    .apply(
                        key,
                        Event::Tick,
                        Change {
                            recorded: Some(Entry {
                                at: 1,
                                ..Entry::naming(EntryKind::StakeTaken, "c1", "owner", "peer")
                            }),
                            ..Change::none()
                        },
                    )
                    .await
            });
        }
        while let Some(stepped) = steps.join_next().await {
            stepped.expect("joined").expect("stepped");
        }
        let last = ledger::head(&store).expect("head").expect("entries").seq;
        assert_eq!(last, 20);
        eventually("the head file never reached the last entry", || {
            file_seq() >= last
        })
        .await;
    }

    /// A step whose future is dropped while its write is queued (an API request cancelled):
    /// the write still lands, and the next step must start from it, not from the row the
    /// dropped step read — the cache gives that row up before it writes.
    #[tokio::test]
    async fn a_step_dropped_while_its_write_is_queued_leaves_no_stale_row() {
        let (store, calls, _, key) = staked_node();
        // The row is cached, as any step leaves it.
        let cached = calls.row(&key).await.expect("row").expect("there");
        assert_eq!(cached.call.state, State::Staked);
        // The writer is held, so the queued write cannot be answered before the drop: the
        // store's drainer is a thread of its own, and on a loaded machine it committed and
        // answered between the step's queueing and its first wait.
        let writer = HeldWriter::hold(&store);
        // One poll: the step reads the cached row, steps and queues its write; then it is
        // dropped before the write is answered.
        let mut step = calls.apply(
            key.clone(),
            Event::Policy(skillbox_calls::machine::Decision::Allow),
            Change::none(),
        );
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(
            step.as_mut().poll(&mut cx).is_pending(),
            "the step finished in one poll"
        );
        drop(step);
        writer.release();
        eventually("the queued write never landed", || {
            stored_state(&store) != State::Staked
        })
        .await;
        let next = calls.row(&key).await.expect("row").expect("there");
        assert_eq!(
            next.call.state,
            State::Submitting,
            "the next step starts from the row before the write that landed"
        );
    }

    /// The window a loaded node opened (issue 33): an action returned, its outcome waiting for
    /// the call's lock, and the action no longer marked running — a tick then started it again
    /// on the record before the outcome. It stays marked until its outcome is stepped.
    #[tokio::test]
    async fn an_action_is_running_until_its_outcome_is_stepped() {
        let (store, calls, row, key) = staked_node();
        let running = || {
            lock(&calls.0.inflight).contains(&(key.clone(), "check_policy", Some("r".repeat(32))))
        };

        let call_lock = calls.call_lock(&key);
        let held = call_lock.lock().await;
        calls.dispatch(key.clone(), Action::CheckPolicy, Arc::new(row));
        // The policy answers at once; its outcome then waits for the lock held here.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            running(),
            "an action whose outcome is not stepped yet is no longer marked running"
        );
        drop(held);
        eventually("the outcome was never stepped", || {
            stored_state(&store) != State::Staked
        })
        .await;
        // The mark goes once the step's write has returned, a moment after its commit shows.
        eventually(
            "the action is still marked running after its outcome",
            || !running(),
        )
        .await;
    }

    /// A box double that counts what it is asked: every request is logged as `METHOD path`;
    /// a result is held (as a run still at its provider is); the first `refused` deletes are
    /// answered 503 (a box restarting), the others taken.
    struct CountingBox {
        url: String,
        seen: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl CountingBox {
        async fn start(refused: usize) -> CountingBox {
            use axum::http::{Method, StatusCode};
            use axum::response::IntoResponse;
            let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
            let left = Arc::new(std::sync::atomic::AtomicUsize::new(refused));
            let log = seen.clone();
            let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
                let (log, left) = (log.clone(), left.clone());
                async move {
                    use std::sync::atomic::Ordering::SeqCst;
                    lock(&log).push(format!("{} {}", req.method(), req.uri().path()));
                    if req.method() == Method::DELETE {
                        if left
                            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                            .is_ok()
                        {
                            return StatusCode::SERVICE_UNAVAILABLE.into_response();
                        }
                        return (StatusCode::OK, "{}").into_response();
                    }
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    StatusCode::SERVICE_UNAVAILABLE.into_response()
                }
            });
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let url = format!("http://{}", listener.local_addr().expect("addr"));
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            CountingBox { url, seen }
        }

        /// How many `method` requests it was asked.
        fn asked(&self, method: &str) -> usize {
            lock(&self.seen)
                .iter()
                .filter(|l| l.starts_with(&format!("{method} ")))
                .count()
        }
    }

    /// A node whose one accepted box is `url` (insecure-dev), holding owner call `c1` of `peer`
    /// in `state` on a run at that box, its verified run stored: the store, the calls,
    /// the row and key.
    fn node_with_call_at(url: &str, peer: &str, state: State) -> (Arc<Store>, Calls, CallRow, Key) {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let boxes = Arc::new(super::super::boxes::Boxes::new(
            &[url.to_owned()],
            true,
            &[],
            &BTreeMap::new(),
        ));
        let node = calls_of(store.clone(), |d| d.boxes = boxes);
        let key = parked_owner_call(&store);
        let mut row = stored(&store);
        row.call.state = state;
        row.call.peer = peer.to_owned();
        row.box_url = Some(super::super::boxes::normalize_url(url));
        // A run id of the box's form (the client asks nothing of a run id that is not one).
        let run = "5a".repeat(16);
        row.call.run_id = Some(run.clone());
        let mut verified = row.verified.clone().expect("verified");
        verified["runId"] = serde_json::Value::String(run);
        let patch = records::Patch {
            box_url: row.box_url.clone(),
            verified: Some(verified),
            ..records::Patch::default()
        };
        store
            .write(|tx| records::update(tx, &row.call, &patch))
            .expect("moved to the box");
        let row = stored(&store);
        (store, node, row, key)
    }

    /// F6: a peer repeating `call.failed coverage_exceeded` for one submitted call (at its
    /// payload rate) made this node ask the box for the run's outcome once per payload — a
    /// task and a box request each, counted against its own rate at the box. One question per
    /// call now; the repeats are dropped while it is under way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_repeated_coverage_exceeded_asks_the_box_once() {
        let boxy = CountingBox::start(0).await;
        let peer = PeerId::random();
        let (_store, node, _row, _key) =
            node_with_call_at(&boxy.url, &peer.to_base58(), State::Submitted);
        for n in 0..10 {
            node.on_payload(IncomingPayload {
                from: peer,
                payload: Payload {
                    kind: skillbox_peers::PayloadKind::CallFailed,
                    call_id: "c1".into(),
                    body: serde_json::json!({"code": "coverage_exceeded"}),
                },
                seq: n,
                sent_at: now_ms(),
                signed: skillbox_peers::SignedPayload {
                    envelope: String::new(),
                    signature: String::new(),
                },
            })
            .await;
        }
        eventually("the box was never asked", || boxy.asked("GET") >= 1).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            boxy.asked("GET"),
            1,
            "the box was asked per repeated payload: {:?}",
            lock(&boxy.seen)
        );
    }

    /// A run left at a box that did not take the delete (a restart, a 5xx) stayed there, with
    /// the stakes in it, until the program expired: the delete was tried once. It is asked
    /// again with growing pauses until the box takes it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_delete_the_box_refused_is_asked_again_until_taken() {
        let boxy = CountingBox::start(2).await;
        let (_store, node, row, _key) = node_with_call_at(&boxy.url, "peer", State::Failed);
        let run = row.call.run_id.clone().expect("run");
        tokio::time::timeout(
            Duration::from_secs(30),
            node.cancel_left(&row, &boxy.url, &run),
        )
        .await
        .expect("the deletes end");
        assert_eq!(
            boxy.asked("DELETE"),
            3,
            "the run was not deleted after the box refused: {:?}",
            lock(&boxy.seen)
        );
        assert_eq!(
            node.0
                .pending_deletes
                .load(std::sync::atomic::Ordering::SeqCst),
            0
        );
    }
}
