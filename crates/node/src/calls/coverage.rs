//! Coverage across calls, the owner's side (issue 32 item 4).
//!
//! The box keeps the day's tally itself: per (owner, caller, skill, box's UTC day) it unions
//! which of the body's 16 regions the released answers touched and sums their secret levels,
//! against the limits this owner put in its sealed stake (`skillbox_jc::day`, entry
//! `day_limits`, from the `[guard]` thresholds). The owner's node learns of it one thing only:
//! the box failed a run at its start `coverage_exceeded` — the peer's day of that skill is used
//! up. It once read each released answer's region mask and secret level from its note, and a
//! hostile owner's body with a phrase per region ("write phrase i iff bit i of the user's
//! source is 1") read 16 bits of the caller's sources per call off it; now nothing of an answer
//! reaches the owner but the outcome and whether its guard acted.
//!
//! What the node keeps is the box's refusal, per (peer, skill, UTC day) in `guard_coverage`:
//! from then on that day, admission and the charge refuse the peer's calls of the skill at once
//! with the closed code `coverage_exceeded` and its fixed words (no run, no stake), and a call
//! waiting for its turn is refused when it gets it.

use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::{OptionalExtension, params};
use skillbox_calls::machine::FailureCode;
use tokio::sync::Notify;

use super::records::CallRow;

use crate::config::GuardConfig;
use crate::error::Result;
use crate::store::{Tx, now_secs};

/// The UTC day `secs` (unix seconds) falls in.
pub fn day_of(secs: i64) -> i64 {
    secs.div_euclid(86_400)
}

/// This node's UTC day now: the day its refusals and pins are kept for, and the day a caller
/// keeps its boxes for (the owner's is at most a day apart).
pub fn today() -> i64 {
    day_of(now_secs())
}

/// Whether the owner's thresholds are on: its guard on and a threshold above 0. Otherwise the
/// box is told to keep no tally (no `day_limits` goes with a guard that is off, nor a default:
/// the program's guard is off), so nothing here may act on one either — no turns, no day pin,
/// no refusal.
pub fn thresholds_on(guard: &GuardConfig) -> bool {
    guard.enabled && (guard.coverage_permille > 0 || guard.canary_coverage_permille > 0)
}

/// The limits the owner's stake gives the box (`skillbox_jc::day`): its `[guard]` thresholds
/// as configured, 0 keeping a limit off.
pub fn day_limits(guard: &GuardConfig) -> skillbox_jc::day::DayLimits {
    skillbox_jc::day::DayLimits {
        coverage_permille: guard.coverage_permille,
        canary_coverage_permille: guard.canary_coverage_permille,
    }
}

/// Whether the box refused `peer` a run of `skill` on `day` (its day used up), while the
/// thresholds are on.
pub fn refused(
    tx: &Tx<'_>,
    peer: &str,
    skill: &str,
    day: i64,
    guard: &GuardConfig,
) -> Result<bool> {
    if !thresholds_on(guard) {
        return Ok(false);
    }
    let found = tx
        .query_row(
            "SELECT 1 FROM guard_coverage WHERE peer = ?1 AND skill = ?2 AND day = ?3",
            params![peer, skill, day],
            |_| Ok(()),
        )
        .optional()?;
    Ok(found.is_some())
}

/// The box failed a run of `peer`'s call of `skill` `coverage_exceeded`: refuse the peer that
/// skill for the rest of `day`. Marking twice is marking once; rows of days before `day` go.
pub fn refuse(tx: &Tx<'_>, peer: &str, skill: &str, day: i64) -> Result<()> {
    tx.execute("DELETE FROM guard_coverage WHERE day < ?1", params![day])?;
    tx.execute(
        "INSERT INTO guard_coverage (peer, skill, day, refused_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (peer, skill, day) DO NOTHING",
        params![peer, skill, day, now_secs()],
    )?;
    Ok(())
}

/// The box instance a run went to, as the owner's verified attestation of it names it: the TLS
/// key the attestation binds where there is one, else the box's URL. A hardware box makes its
/// TLS key afresh at every start and keeps its day book in memory only; an insecure-dev box
/// derives it from its storage key and keeps its book in its run store: either way, the same
/// key is the same day book, and a new key is a box whose book may have been lost (or another
/// box). A plain-HTTP box (loopback only) binds no key: its URL is all this node can tell, so
/// its restarts are not seen.
pub fn box_instance(box_url: Option<&str>, verified: Option<&serde_json::Value>) -> String {
    let key = verified
        .and_then(|v| {
            serde_json::from_value::<skillbox_jc::attest::VerifiedRunRecord>(v.clone()).ok()
        })
        .and_then(|r| r.tls_spki_sha256);
    match key {
        Some(k) => format!("tls:{k}"),
        None => format!("url:{}", box_url.unwrap_or_default()),
    }
}

/// A run of `peer`'s call of `skill` on box `instance` ([`box_instance`]) on UTC `day`: what
/// the day's pin looks at.
pub struct DayRun<'a> {
    pub peer: &'a str,
    pub skill: &'a str,
    pub day: i64,
    pub instance: &'a str,
}

impl DayRun<'_> {
    /// Of the box instances the peer's runs of the skill went to that day: whether this run's
    /// is one, and how many there are.
    fn pinned(&self, tx: &Tx<'_>) -> Result<Pinned> {
        Ok(tx.query_row(
            "SELECT coalesce(max(instance = ?4), 0), count(*) FROM guard_box_days
             WHERE peer = ?1 AND skill = ?2 AND day = ?3",
            params![self.peer, self.skill, self.day, self.instance],
            |r| {
                Ok(Pinned {
                    known: r.get(0)?,
                    used: r.get(1)?,
                })
            },
        )?)
    }
}

/// What the day's pin holds of a run's instance ([`DayRun::pinned`]).
struct Pinned {
    /// The day's runs went to this instance already: no move.
    known: bool,
    /// How many instances the day's runs went to.
    used: u32,
}

impl Pinned {
    /// The move rule: a run on an instance the day has not used, once the day used
    /// `1 + day_box_moves` of them, is one move too many.
    fn past_moves(&self, guard: &GuardConfig) -> bool {
        !self.known && self.used > guard.day_box_moves
    }
}

/// Whether `run` would be one move too many (review 22 F1, F2): the day's runs went to other
/// instances only, and already to `1 + [guard] day_box_moves` of them. Reads only: the charge
/// refuses such a call before the owner stakes, and [`pin_box`] counts the move when the run is
/// submitted.
pub fn moved_past(tx: &Tx<'_>, run: &DayRun<'_>, guard: &GuardConfig) -> Result<bool> {
    if !thresholds_on(guard) {
        return Ok(false);
    }
    Ok(run.pinned(tx)?.past_moves(guard))
}

/// Whether the peer's day of the skill is closed to `run`: the box refused the peer the skill
/// that day ([`refused`]), or `run` would be one box move too many ([`moved_past`]). The one
/// gate of the charge (`inbound::charged_in`) and the turn ([`try_take`]).
pub fn day_closed(tx: &Tx<'_>, run: &DayRun<'_>, guard: &GuardConfig) -> Result<bool> {
    Ok(refused(tx, run.peer, run.skill, run.day, guard)? || moved_past(tx, run, guard)?)
}

/// Once the box accepted the owner's submit (the run starts there, see
/// [`super::Calls::pin_day`]): add `run`'s instance to the box instances the peer's runs
/// of the skill went to that day. The first pins the day; each other one is a move, at most
/// `[guard] day_box_moves` a day. `false`: refused, one move too many, and nothing written.
/// Each box keeps its own day book, so without the pin a caller's runs spread over the owner's
/// boxes, or over restarts of a box that keeps its book in memory, would each start from a
/// fresh tally; with it, a day's runs reach at most `1 + day_box_moves` books. Going back to
/// an instance the day used already is no move: that book holds its part of the day.
pub fn pin_box(tx: &Tx<'_>, run: &DayRun<'_>, guard: &GuardConfig) -> Result<bool> {
    let pinned = run.pinned(tx)?;
    if pinned.past_moves(guard) {
        return Ok(false);
    }
    if pinned.known {
        return Ok(true);
    }
    if pinned.used == 0 {
        tx.execute(
            "DELETE FROM guard_box_days WHERE day < ?1",
            params![run.day],
        )?;
    }
    tx.execute(
        "INSERT INTO guard_box_days (peer, skill, day, instance, pinned_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![run.peer, run.skill, run.day, run.instance, now_secs()],
    )?;
    Ok(true)
}

/// Which owner call of each (peer, skill) holds the turn: a call submitted whose outcome the
/// owner has not fetched yet. The box checks a run against the day's tally at the run's start,
/// and adds an answer to it when it releases the answer: runs of one peer and skill started
/// side by side would each pass against the same tally and together take what none may alone.
/// While the thresholds are on, the owner submits them one at a time instead (the box starts a
/// run only once both sides submitted), so each run starts after every answer before it was
/// added. Taken just before the owner submits (its stake is in) and kept once the box accepts
/// the submit, given back when the submit is not accepted (the caller has not staked yet), when
/// the run's outcome is in, or when the call ends.
///
/// A call that ends while it holds the turn — its peer's `call.failed`, a stall while
/// submitting, its expiry, `box_word_first`'s bound — keeps it: its run may still be at the box
/// (a caller failing the call once both submitted goes on with the run, and fetches the answer
/// itself), and a next run started meanwhile would pass against a tally without that run's
/// answer. This node keeps asking the box for the run's outcome
/// ([`super::Calls::settle_turn`]): the call stays failed, a `coverage_exceeded` outcome still
/// refuses the peer's day, and the turn is given back once the outcome is in, the box no longer
/// has the run, the box has said nothing of it for a while ([`Silence`]: a dead box's turn
/// stalled the caller's next calls of the skill until the program expired; the run is still
/// asked after without the turn, so a `coverage_exceeded` the box answers late is kept), or
/// the program expired.
///
/// The holder is a row of the store (`guard_turns`), taken in the same transaction that checks
/// the day's refusal, so it outlives a restart: a call submitted before the restart still runs
/// at the box, and the next call waits for its outcome. A call submitting or submitted holds
/// it, and so does a failed one until its program expires; a row naming a call that ran, moved
/// back to another run or is gone (the restart lost it) holds nothing, and the next call takes
/// the turn. Waiting calls sleep
/// on a [`Notify`] per (peer, skill) that a call giving the turn back wakes, with a fallback
/// look every [`TURN_LOOK`] (a holder that ends without giving the turn back, or another
/// process's store).
#[derive(Default)]
pub struct Turns {
    wake: std::sync::Mutex<HashMap<(String, String), Arc<Notify>>>,
    /// The token of each turn this process took, by call id: a give-back deletes the row of its
    /// own take only, never a newer take by the same call.
    taken: std::sync::Mutex<HashMap<String, i64>>,
    next_token: std::sync::atomic::AtomicI64,
    /// The ended calls whose turn is being settled (their run's outcome asked for), by call id:
    /// one task each, at most [`MAX_SETTLING`].
    settling: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The ended calls whose turn was given back for their box's silence and whose run's late
    /// word is still listened for ([`super::Calls::settle_turn`]), by call id: one task each,
    /// at most [`MAX_LATE`]. Apart from `settling`, so calls given back for silence never keep
    /// another call's turn from being settled.
    late: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Turns {
    fn notifier(&self, key: &(String, String)) -> Arc<Notify> {
        super::lock(&self.wake)
            .entry(key.clone())
            .or_default()
            .clone()
    }

    /// Let go of a (peer, skill)'s notifier: the entry goes once nobody holds it, so the map
    /// keeps only pairs with a call at its turn (peer ids cost a peer nothing to make).
    fn forget(&self, key: &(String, String), notify: Arc<Notify>) {
        drop(notify);
        let mut wake = super::lock(&self.wake);
        if wake.get(key).is_some_and(|n| Arc::strong_count(n) == 1) {
            wake.remove(key);
        }
    }

    fn token(&self) -> i64 {
        self.next_token
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// How a call's try for the turn went.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    /// Taken (or held already): the call may submit.
    Taken,
    /// Another call submitting or submitted holds it.
    Held,
    /// Free, but the box refused this peer the skill today, or the run is on a box instance
    /// one move past the day's pin ([`moved_past`]): refused.
    Refused,
    /// The taker's own call ended already (a stall, its peer's `call.failed`, expiry) while its
    /// submit action still waited: nothing taken. A turn taken by an ended call would be held,
    /// with no settling task, until its program expires (review 22b R2).
    Ended,
}

/// In one transaction: take the turn for `me` (with `token`) unless a live call holds it, and
/// check the day's refusal once it is free. A holder is live while its owner call is submitting or
/// submitted, or failed with its program not yet expired (its run may still be at the box, see
/// [`Turns`]; a failed call whose outcome came or whose submit was not taken gave its row back).
/// Refused too when `instance`, the box instance `me`'s run is on, is one move past the day's
/// pin ([`moved_past`]); the pin itself is written only once the box accepted the submit.
pub fn try_take(
    tx: &Tx<'_>,
    key: &(String, String),
    (me, instance): (&str, &str),
    token: i64,
    guard: &GuardConfig,
) -> Result<Turn> {
    let holder: Option<String> = tx
        .query_row(
            "SELECT call_id FROM guard_turns WHERE peer = ?1 AND skill = ?2",
            params![key.0, key.1],
            |r| r.get(0),
        )
        .optional()?;
    let mine: Option<String> = tx
        .query_row(
            "SELECT state FROM calls WHERE id = ?1 AND role = 'owner'",
            params![me],
            |r| r.get(0),
        )
        .optional()?;
    if mine
        .as_deref()
        .and_then(skillbox_calls::machine::State::parse)
        .is_some_and(|s| s.is_terminal())
    {
        return Ok(Turn::Ended);
    }
    let now_ms = i64::try_from(super::now_ms()).unwrap_or(i64::MAX);
    let held = match holder.as_deref() {
        None => false,
        Some(h) if h == me => false,
        Some(h) => tx
            .query_row(
                "SELECT state, json_extract(record, '$.expires_at_ms') FROM calls
                 WHERE id = ?1 AND role = 'owner'",
                params![h],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<i64>>(1)?)),
            )
            .optional()?
            .is_some_and(|(state, expires)| match state.as_str() {
                "submitting" | "submitted" => true,
                "failed" => expires.is_some_and(|e| e > now_ms),
                _ => false,
            }),
    };
    if held {
        return Ok(Turn::Held);
    }
    let run = DayRun {
        peer: &key.0,
        skill: &key.1,
        day: today(),
        instance,
    };
    // Only checked here: the pin is written once the box accepts the submit
    // ([`super::Calls::pin_day`]), so a run that never starts (a submit the box refuses, a box
    // that dies first) spends none of the day's moves (review 22b R6).
    if day_closed(tx, &run, guard)? {
        return Ok(Turn::Refused);
    }
    tx.execute(
        "INSERT INTO guard_turns (peer, skill, call_id, token, taken_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (peer, skill) DO UPDATE SET call_id = ?3, token = ?4, taken_at = ?5",
        params![key.0, key.1, me, token, now_secs()],
    )?;
    Ok(Turn::Taken)
}

/// Give back `me`'s turn: its row, if it is still `me`'s (and of `token`, when this process
/// took it).
pub fn give_back(tx: &Tx<'_>, key: &(String, String), me: &str, token: Option<i64>) -> Result<()> {
    tx.execute(
        "DELETE FROM guard_turns WHERE peer = ?1 AND skill = ?2 AND call_id = ?3
         AND (?4 IS NULL OR token = ?4)",
        params![key.0, key.1, me, token],
    )?;
    Ok(())
}

/// The longest an owner asks the box to hold its submit while it holds the turn: a call whose
/// caller has not staked (its human is asked first) gives the turn back between asks.
pub const TURN_ASK: std::time::Duration = std::time::Duration::from_secs(1);

/// The pause before an owner whose submit was not accepted asks again: long enough for a
/// waiting call, woken when the turn is given back, to take it; so a call parked at its caller
/// leaves the turn free.
pub const TURN_GAP: std::time::Duration = std::time::Duration::from_millis(250);

/// A waiting call looks at the turn again after this long even if nothing woke it.
pub const TURN_LOOK: std::time::Duration = std::time::Duration::from_secs(1);

/// Ended calls whose turn is settled at once, at most (one task each). Past it an ended
/// call's turn is not asked after: it stays held until the call's program expires, which
/// [`try_take`] reads from the store — later calls of that peer and skill wait, never pass.
pub const MAX_SETTLING: usize = 1_024;

/// Ended calls given back for their box's silence whose run's late word is listened for at
/// once, at most (one task each, until the call's program expires). Past it such a call's run
/// is not asked after any more: a `coverage_exceeded` its box answers later is not kept here
/// (that box's own book still refuses the caller there), as before the late word was kept.
pub const MAX_LATE: usize = 1_024;

/// How long one ask for an ended call's outcome waits before the settling task looks again
/// whether the turn is still the call's (a submit not taken gives it back meanwhile).
const SETTLE_LOOK: std::time::Duration = std::time::Duration::from_secs(30);

/// The pause of a settling task whose outcome is being fetched by the call's own action, or
/// after a passing failure (doubled up to [`SETTLE_LOOK`]).
const SETTLE_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long one ask of a settling task has the box wait for the run's end: under
/// [`SETTLE_LOOK`], so a box that still has the run says so (`not_ready`) within the look, and
/// a look that ends with no word at all is the box's silence, not a long run.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// How long a settling task leaves the asking to the call's own `fetch_outcome`, still
/// running, before it asks the box alongside it: longer than an honest box holds one result
/// request (`skillbox_jc::server::MAX_WAIT_MS`, 25 s), so a fetch out this long is either a
/// box answering `not_ready` to each of its requests (which the ask alongside hears too) or a
/// request held by a box that stopped answering — which, trusted, held the turn the 120 s of
/// the client's request timeout before the silence was counted at all.
const OWN_FETCH_TRUSTED: std::time::Duration = SETTLE_LOOK;

/// A settling task gives the turn back once the box said nothing of the run for this long…
const SILENT_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// …over at least this many asks in a row (review 22b R2; see [`Silence`]).
const SILENT_ASKS: u32 = 3;

/// The settling task's asks in a row that got no word of the run from its box: no outcome,
/// no `not_ready` — a connection refused or cut, a look that ran out, a 5xx or a `busy`.
/// Once there were [`SILENT_ASKS`] of them over at least [`SILENT_FOR`], the box is taken as
/// dead (killed, or a hostile operator that stopped answering) and the turn is given back:
/// held until the program's expiry (15 min by default), it stalled the same caller's next
/// calls of the skill even at another box, at the box operator's will. Giving it back opens
/// no overlap the turn closes: a next run at the same box instance waits there until this one
/// is counted (the box holds a run of a key already in flight, `skillbox_jc::day::InFlight`),
/// and one at another instance reads another day book, a move [`moved_past`] bounds by
/// `[guard] day_box_moves`. Three asks over 30 s, not one: a pooled connection the box closed
/// or a restart behind its address (seconds) is not a dead box. A word of the run (`not_ready`)
/// starts the count afresh: the box is alive and holds the run. So does the call's own fetch
/// still running, for its first [`OWN_FETCH_TRUSTED`] only: a request held open is no word.
#[derive(Debug, Default)]
struct Silence {
    asks: u32,
    since: Option<std::time::Instant>,
}

impl Silence {
    /// The box answered that it still has the run.
    fn heard(&mut self) {
        *self = Silence::default();
    }

    /// An ask sent at `asked` got no word of the run by `now`: whether the box has been silent
    /// long enough for the turn to be given back.
    fn unanswered(&mut self, asked: std::time::Instant, now: std::time::Instant) -> bool {
        self.asks = self.asks.saturating_add(1);
        let since = *self.since.get_or_insert(asked);
        self.asks >= SILENT_ASKS && now.saturating_duration_since(since) >= SILENT_FOR
    }
}

/// What one ask after an ended call's run heard of it ([`super::Calls::ask`]).
enum Word {
    /// Its outcome, stepped as any outcome (the call stays ended; a `coverage_exceeded` refuses
    /// the peer's day) — which also gave back a turn the call still held.
    Outcome,
    /// `not_ready`: the box is alive and still has the run.
    Running,
    /// No word of the run: a passing failure (a connection refused or cut, a 5xx, `busy`), or
    /// none within the look.
    Silent,
    /// The box has no such run (deleted, expired) or will not say: nothing of it can be
    /// counted any more.
    Gone,
}

/// The box's answer that it has the run and it has not ended (`not_ready`).
fn still_running(e: &skillbox_jc::JcError) -> bool {
    match e {
        skillbox_jc::JcError::NotReady(_) => true,
        skillbox_jc::JcError::Remote { code, .. } => code == "not_ready",
        _ => false,
    }
}

impl super::Calls {
    /// Whether calls take turns: the coverage thresholds are on.
    pub(super) fn turns_on(&self) -> bool {
        thresholds_on(&self.0.guard)
    }

    /// Owner, before it submits: wait for this call's turn among the peer's calls of the skill
    /// (see [`Turns`]) and check the day's refusal again once it has it.
    /// `Some(coverage_exceeded)`: refused — the box refused the peer's run of the skill while
    /// it waited, or the call expired waiting.
    pub(super) async fn take_turn(&self, row: &CallRow) -> Result<Option<FailureCode>> {
        if !self.turns_on() {
            return Ok(None);
        }
        let key = (row.call.peer.clone(), row.call.skill.clone());
        let me = row.call.id.clone();
        let instance = box_instance(row.box_url.as_deref(), row.verified.as_ref());
        let notify = self.0.turns.notifier(&key);
        let taken = async {
            loop {
                // Registered before the look, so a give-back between the look and the wait is
                // not missed.
                let woken = notify.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                let token = self.0.turns.token();
                let store = self.0.store.clone();
                let (k, m, g) = (key.clone(), me.clone(), self.0.guard.clone());
                let i = instance.clone();
                let turn = super::blocking(move || {
                    store.write(|tx| try_take(tx, &k, (&m, &i), token, &g))
                })
                .await?;
                match turn {
                    Turn::Taken => {
                        super::lock(&self.0.turns.taken).insert(me.clone(), token);
                        return Ok(None);
                    }
                    Turn::Refused => return Ok(Some(FailureCode::CoverageExceeded)),
                    // The call is terminal: the machine ignores this event, the action just
                    // stops.
                    Turn::Ended => return Ok(Some(FailureCode::Stalled)),
                    Turn::Held if super::now_ms() >= row.call.expires_at_ms => {
                        return Ok(Some(FailureCode::CoverageExceeded));
                    }
                    Turn::Held => {
                        let _ = tokio::time::timeout(TURN_LOOK, woken).await;
                    }
                }
            }
        }
        .await;
        self.0.turns.forget(&key, notify);
        taken
    }

    /// Owner, once the box accepted this call's submit (still holding the turn): pin the peer's
    /// day of the skill to the run's box instance ([`pin_box`]). Written here rather than at
    /// the turn, so a run the box never started spends none of the day's moves; the turn is held
    /// from the accepted submit until the run's outcome, so the next call's check
    /// ([`try_take`]) reads this pin.
    pub(super) async fn pin_day(&self, row: &CallRow) -> Result<()> {
        if !self.turns_on() {
            return Ok(());
        }
        let instance = box_instance(row.box_url.as_deref(), row.verified.as_ref());
        let (peer, skill) = (row.call.peer.clone(), row.call.skill.clone());
        let (store, guard) = (self.0.store.clone(), self.0.guard.clone());
        let pinned = super::blocking(move || {
            store.write(|tx| {
                let run = DayRun {
                    peer: &peer,
                    skill: &skill,
                    day: today(),
                    instance: &instance,
                };
                pin_box(tx, &run, &guard)
            })
        })
        .await?;
        if !pinned {
            // The turn checked this move before the submit and no other call of the pair
            // submits meanwhile, so this is not expected; the run started anyway.
            tracing::warn!(call = %row.call.id, "a run started one box move past the day's pin");
        }
        Ok(())
    }

    /// Owner: whether this process holds call `id`'s turn (taken, not given back).
    fn holds_turn(&self, id: &str) -> bool {
        super::lock(&self.0.turns.taken).contains_key(id)
    }

    /// Owner: call `key` (its row as its last step left it) ended while it held the turn, and
    /// its run may still be at the box (see [`Turns`]). In the background, ask the box for the
    /// run's outcome until it comes (stepped as any outcome: the call stays ended, a
    /// `coverage_exceeded` refuses the peer's day, and the turn is given back), the box answers
    /// it has no such run, the turn was given back otherwise, or the program expires. While
    /// the call's own `fetch_outcome` action still runs (it outlives the call's end) this
    /// leaves the asking to it, for [`OWN_FETCH_TRUSTED`]; past that it asks alongside it
    /// (the box serves a result to every fetch alike), so a fetch the box holds open is not
    /// taken for the box's word.
    ///
    /// A turn given back for the box's silence ([`Silence`]) is not the run's end: the box may
    /// only have been slow, and a `coverage_exceeded` it answers later is still the peer's day
    /// used up. So the task goes on asking ([`Self::heard_late`]) without the turn, and keeps
    /// that refusal once.
    pub(super) fn settle_turn(&self, key: super::Key, row: Arc<CallRow>) {
        if !self.turns_on() || row.call.run_id.is_none() || !self.holds_turn(&row.call.id) {
            return;
        }
        {
            let mut settling = super::lock(&self.0.turns.settling);
            if settling.len() >= MAX_SETTLING || !settling.insert(row.call.id.clone()) {
                return;
            }
        }
        let this = self.clone();
        tokio::spawn(async move {
            let silent = this.settled(&key, &row).await;
            super::lock(&this.0.turns.settling).remove(&row.call.id);
            if !silent {
                return;
            }
            {
                let mut late = super::lock(&this.0.turns.late);
                if late.len() >= MAX_LATE || !late.insert(row.call.id.clone()) {
                    return;
                }
            }
            this.heard_late(&key, &row).await;
            super::lock(&this.0.turns.late).remove(&row.call.id);
        });
    }

    /// The settling of [`Self::settle_turn`] while the call holds the turn. Whether the turn
    /// was given back for the box's silence (the run's late word is then still listened for).
    async fn settled(&self, key: &super::Key, row: &Arc<CallRow>) -> bool {
        let mut pause = SETTLE_PAUSE;
        let mut silence = Silence::default();
        // Since when the call's own fetch has been seen running, without a break.
        let mut own_fetch: Option<std::time::Instant> = None;
        while self.holds_turn(&row.call.id) {
            if super::now_ms() >= row.call.expires_at_ms {
                self.end_turn(row);
                return false;
            }
            let asked = std::time::Instant::now();
            let word = match self.ask_after(key, row).await {
                Some(word) => {
                    own_fetch = None;
                    word
                }
                None => {
                    let since = *own_fetch.get_or_insert(asked);
                    if asked.saturating_duration_since(since) < OWN_FETCH_TRUSTED {
                        // The call's own fetch still runs: its outcome gives the turn back.
                        // What the box told it meanwhile is not known here, so the silence
                        // counts afresh.
                        silence.heard();
                        tokio::time::sleep(SETTLE_PAUSE).await;
                        continue;
                    }
                    // Out longer than a box holds one request: held, perhaps, by a box that
                    // stopped answering (it was the turn for the 120 s of the client's
                    // timeout, then the silence's count). Ask alongside it; only the box's
                    // own word counts as heard.
                    self.ask(key, row).await
                }
            };
            match word {
                // An outcome applied gave the turn back in its step (`Change::run_end`).
                Word::Outcome => return false,
                Word::Gone => {
                    self.end_turn(row);
                    return false;
                }
                Word::Running => silence.heard(),
                Word::Silent => {
                    if self.silent(row, &mut silence, asked) {
                        return true;
                    }
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(SETTLE_LOOK);
        }
        false
    }

    /// Owner: call `key`'s turn was given back for its box's silence, but the box may come
    /// back: ask after the run, without the turn, until its outcome (stepped once: a
    /// `coverage_exceeded` marks the peer's day refused, the call stays ended and nothing is
    /// taken back), the box says it has no such run, or the program expires. Before, nothing
    /// asked any more, and a box that was only slow refused the run with the owner's record of
    /// the peer's day missing it — the next decisions for that peer (admission, the charge,
    /// the turn's day gate) made on a day that looked open.
    async fn heard_late(&self, key: &super::Key, row: &Arc<CallRow>) {
        let mut pause = SETTLE_PAUSE;
        while super::now_ms() < row.call.expires_at_ms {
            // The call's own fetch (`None`), if it still runs, steps the outcome it gets.
            if let Some(Word::Outcome | Word::Gone) = self.ask_after(key, row).await {
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(SETTLE_LOOK);
        }
    }

    /// [`Self::ask`] as the run's one fetch, unless the call's own `fetch_outcome` still runs
    /// (`None`, nothing asked).
    async fn ask_after(&self, key: &super::Key, row: &Arc<CallRow>) -> Option<Word> {
        let mark = (key.clone(), "fetch_outcome", row.call.run_id.clone());
        if !super::lock(&self.0.inflight).insert(mark.clone()) {
            return None;
        }
        let word = self.ask(key, row).await;
        super::lock(&self.0.inflight).remove(&mark);
        Some(word)
    }

    /// One ask after ended call `key`'s run: the box waits at most [`SETTLE_WAIT`] for the
    /// run's end, under a look of [`SETTLE_LOOK`]. An outcome is stepped here (the machine
    /// ignores it on the ended call; a `coverage_exceeded` marks the day, once however often
    /// it is stepped).
    async fn ask(&self, key: &super::Key, row: &Arc<CallRow>) -> Word {
        let fetched =
            tokio::time::timeout(SETTLE_LOOK, self.fetch_outcome_within(row, SETTLE_WAIT)).await;
        match fetched {
            Ok(Ok(Some((event, change)))) => {
                if let Err(e) = self.apply(key.clone(), event, change).await {
                    tracing::warn!(call = %key.0, error = %e, "an ended call's outcome not applied");
                }
                Word::Outcome
            }
            Ok(Err(e)) if still_running(&e) => Word::Running,
            Ok(Err(e)) if super::driver::transient(&e) => Word::Silent,
            Err(_) => Word::Silent,
            Ok(Ok(None)) | Ok(Err(_)) => Word::Gone,
        }
    }

    /// A settling ask sent at `asked` got no word of the run: give the turn back if the box has
    /// been silent long enough ([`Silence`]). Whether the turn was given back.
    fn silent(&self, row: &CallRow, silence: &mut Silence, asked: std::time::Instant) -> bool {
        if !silence.unanswered(asked, std::time::Instant::now()) {
            return false;
        }
        tracing::info!(call = %row.call.id, "the box of an ended call's run is silent; its coverage turn is given back, its run's late word still listened for");
        self.end_turn(row);
        true
    }

    /// Owner, at start: settle the turns that ended calls held when the node stopped (their
    /// settling tasks were lost with it), so they are given back when their run's outcome is
    /// in rather than at their expiry.
    pub(super) async fn settle_turns_left(&self) {
        if !self.turns_on() {
            return;
        }
        let store = self.0.store.clone();
        let held = super::blocking(move || {
            store.read(|c| {
                let mut q = c.prepare(
                    "SELECT t.call_id, t.token FROM guard_turns t
                     JOIN calls c ON c.id = t.call_id AND c.role = 'owner'
                     WHERE c.state = 'failed'",
                )?;
                let rows = q
                    .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(rows)
            })
        })
        .await;
        let held = match held {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the turns ended calls hold");
                return;
            }
        };
        for (id, token) in held {
            let key = (id.clone(), skillbox_calls::machine::Role::Owner);
            let Some(row) = self.load(&key).await else {
                continue;
            };
            super::lock(&self.0.turns.taken).entry(id).or_insert(token);
            self.settle_turn(key, Arc::new(row));
        }
    }

    /// Owner: this call's run's outcome is in (the box added its answer to the day's tally
    /// before it gave it out), or it has none; the next call may go. The row
    /// goes in the background and the waiting calls are woken once it has: a later take by
    /// this same call has another token and stays.
    pub(super) fn end_turn(&self, row: &CallRow) {
        if !self.turns_on() {
            return;
        }
        let key = (row.call.peer.clone(), row.call.skill.clone());
        let me = row.call.id.clone();
        let token = super::lock(&self.0.turns.taken).remove(&me);
        let notify = self.0.turns.notifier(&key);
        let store = self.0.store.clone();
        let this = self.clone();
        tokio::spawn(async move {
            let k = key.clone();
            let gone = super::blocking(move || store.write(|tx| give_back(tx, &k, &me, token)));
            if let Err(e) = gone.await {
                tracing::warn!(error = %e, "giving back a coverage turn");
            }
            notify.notify_waiters();
            this.0.turns.forget(&key, notify);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    /// An owner call row in `state` (what the turns read of it).
    fn owner_call(store: &Store, id: &str, state: &str) {
        store
            .write(|tx| {
                tx.execute(
                    "INSERT INTO calls (id, role, peer, skill, state, record, created_at, updated_at)
                     VALUES (?1, 'owner', 'peer-a', 'taste', ?2, '{}', 0, 0)
                     ON CONFLICT (id, role) DO UPDATE SET state = ?2",
                    params![id, state],
                )?;
                Ok(())
            })
            .expect("call row");
    }

    fn take(store: &Store, me: &str, token: i64) -> Turn {
        let key = ("peer-a".to_owned(), "taste".to_owned());
        store
            .write(|tx| try_take(tx, &key, (me, "url:box"), token, &GuardConfig::default()))
            .expect("take")
    }

    /// The notifier map keeps only pairs someone holds: a peer making up ids cannot grow it.
    #[test]
    fn a_notifier_nobody_holds_is_forgotten() {
        let turns = Turns::default();
        let key = ("peer".to_owned(), "skill".to_owned());
        let (a, b) = (turns.notifier(&key), turns.notifier(&key));
        assert!(Arc::ptr_eq(&a, &b), "one notifier per pair");
        turns.forget(&key, a);
        assert_eq!(crate::calls::lock(&turns.wake).len(), 1, "still held");
        turns.forget(&key, b);
        assert!(crate::calls::lock(&turns.wake).is_empty());
    }

    /// The turn is a row of the store: a call submitted before a restart still holds it after
    /// (its run goes on at the box and its outcome is fetched later), and a row naming a call
    /// that is gone, ended or back before its submit holds nothing — the next call takes it
    /// instead of waiting out its expiry.
    #[test]
    fn a_turn_outlives_a_restart_and_a_holder_gone_since_holds_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("node.db");
        {
            let store = Store::open(&path).expect("store");
            owner_call(&store, "call-a", "submitting");
            owner_call(&store, "call-b", "submitting");
            assert_eq!(take(&store, "call-a", 1), Turn::Taken);
            assert_eq!(take(&store, "call-b", 1), Turn::Held);
            owner_call(&store, "call-a", "submitted");
        }
        // The node starts again: nothing in memory, the store as it was.
        let store = Store::open(&path).expect("store again");
        assert_eq!(take(&store, "call-b", 7), Turn::Held, "call-a still runs");
        assert_eq!(take(&store, "call-a", 7), Turn::Taken, "its own turn");
        // A give-back of an older take leaves the newer one.
        let key = ("peer-a".to_owned(), "taste".to_owned());
        store
            .write(|tx| give_back(tx, &key, "call-a", Some(1)))
            .expect("stale give-back");
        assert_eq!(take(&store, "call-b", 8), Turn::Held);
        // call-a ended or went back while the node was down (answered, opened, or failed with
        // its program expired — this record names no expiry): the turn is free.
        for state in ["failed", "answered", "opened"] {
            owner_call(&store, "call-a", state);
            assert_eq!(take(&store, "call-b", 9), Turn::Taken, "{state}");
            store
                .write(|tx| {
                    give_back(tx, &key, "call-b", None)?;
                    try_take(tx, &key, ("call-a", "url:box"), 10, &GuardConfig::default())
                })
                .expect("back to call-a");
        }
        // A holder the store no longer knows at all.
        store
            .write(|tx| {
                tx.execute("DELETE FROM calls WHERE id = 'call-a'", [])?;
                Ok(())
            })
            .expect("gone");
        assert_eq!(take(&store, "call-b", 11), Turn::Taken);
        // Free but the box refused the peer the skill today: refused, and the turn not taken.
        store
            .write(|tx| give_back(tx, &key, "call-b", None))
            .expect("given back");
        store
            .write(|tx| refuse(tx, "peer-a", "taste", day_of(now_secs())))
            .expect("refused");
        assert_eq!(take(&store, "call-b", 12), Turn::Refused);
    }

    /// A dead box's silence gives the turn back only after [`SILENT_ASKS`] asks over at least
    /// [`SILENT_FOR`]; a word of the run (`not_ready`) starts the count afresh.
    #[test]
    fn a_box_silent_for_three_asks_over_thirty_seconds_gives_the_turn_back() {
        let t0 = std::time::Instant::now();
        let at = |s: u64| t0 + std::time::Duration::from_secs(s);
        let mut silence = Silence::default();
        assert!(!silence.unanswered(at(0), at(0)), "one refused connection");
        assert!(!silence.unanswered(at(1), at(1)));
        assert!(
            !silence.unanswered(at(3), at(3)),
            "three asks in 3 s: a restart"
        );
        assert!(
            silence.unanswered(at(31), at(31)),
            "silent 31 s over four asks"
        );
        // Three looks that each ran out (a box holding its connections): 90 s.
        let mut held = Silence::default();
        assert!(!held.unanswered(at(0), at(30)));
        assert!(!held.unanswered(at(31), at(61)));
        assert!(held.unanswered(at(62), at(92)));
        // The box said it still has the run: the count starts again.
        let mut alive = Silence::default();
        assert!(!alive.unanswered(at(0), at(0)));
        assert!(!alive.unanswered(at(20), at(20)));
        alive.heard();
        assert!(!alive.unanswered(at(40), at(40)));
        assert!(!alive.unanswered(at(50), at(50)));
        assert!(!alive.unanswered(at(60), at(60)), "20 s since the word");
        assert!(alive.unanswered(at(70), at(70)));
    }

    /// A call that failed holding the turn keeps it while its program lasts (its run may still
    /// be at the box), and holds nothing once it expired.
    #[test]
    fn a_failed_holder_keeps_the_turn_until_its_program_expires() {
        let store = Store::open_in_memory().expect("store");
        owner_call(&store, "call-a", "submitted");
        owner_call(&store, "call-b", "submitting");
        assert_eq!(take(&store, "call-a", 1), Turn::Taken);
        let failed = |expires_at_ms: u64| {
            store
                .write(|tx| {
                    tx.execute(
                        "UPDATE calls SET state = 'failed', record = ?1 WHERE id = 'call-a'",
                        params![format!("{{\"expires_at_ms\":{expires_at_ms}}}")],
                    )?;
                    Ok(())
                })
                .expect("failed");
        };
        failed(crate::calls::now_ms() + 60_000);
        assert_eq!(
            take(&store, "call-b", 2),
            Turn::Held,
            "its run may still run"
        );
        failed(crate::calls::now_ms().saturating_sub(1));
        assert_eq!(
            take(&store, "call-b", 3),
            Turn::Taken,
            "its program expired"
        );
    }

    /// The box's refusal holds for its peer, skill and day only, as long as the thresholds are
    /// on; yesterday's rows go as today's are written.
    #[test]
    fn a_days_refusal_is_per_peer_skill_and_day() {
        let store = Store::open_in_memory().expect("store");
        let guard = GuardConfig::default();
        let off = GuardConfig {
            coverage_permille: 0,
            canary_coverage_permille: 0,
            ..GuardConfig::default()
        };
        let day = day_of(1_800_000_000);
        store
            .write(|tx| {
                assert!(!refused(tx, "peer-a", "taste", day, &guard)?);
                refuse(tx, "peer-a", "taste", day)?;
                refuse(tx, "peer-a", "taste", day)?;
                assert!(refused(tx, "peer-a", "taste", day, &guard)?);
                assert!(!refused(tx, "peer-b", "taste", day, &guard)?);
                assert!(!refused(tx, "peer-a", "other", day, &guard)?);
                assert!(
                    !refused(tx, "peer-a", "taste", day, &off)?,
                    "thresholds off"
                );
                // The next day starts from nothing, and yesterday's row goes.
                refuse(tx, "peer-b", "taste", day + 1)?;
                assert!(!refused(tx, "peer-a", "taste", day + 1, &guard)?);
                let kept: i64 =
                    tx.query_row("SELECT count(*) FROM guard_coverage", [], |r| r.get(0))?;
                assert_eq!(kept, 1, "yesterday's refusals are forgotten");
                Ok(())
            })
            .expect("write");
    }

    /// A day is pinned to the instance of its first run: the same instance passes all day, a
    /// move to another is counted (going back to one the day used is not) and the one past
    /// `day_box_moves` refused (nothing written); another peer or skill has its own pin, and
    /// the next day starts unpinned.
    #[test]
    fn a_days_box_pin_counts_moves_per_peer_skill_and_day() {
        let store = Store::open_in_memory().expect("store");
        let guard = GuardConfig::default();
        let day = day_of(1_800_000_000);
        let a = ("peer-a", "taste");
        let at = |(peer, skill): (&'static str, &'static str), day, instance| DayRun {
            peer,
            skill,
            day,
            instance,
        };
        store
            .write(|tx| {
                assert!(pin_box(tx, &at(a, day, "tls:1"), &guard)?, "first run pins");
                assert!(pin_box(tx, &at(a, day, "tls:1"), &guard)?, "same instance");
                assert!(
                    !moved_past(tx, &at(a, day, "tls:2"), &guard)?,
                    "one move left"
                );
                assert!(pin_box(tx, &at(a, day, "tls:2"), &guard)?, "the one move");
                assert!(pin_box(tx, &at(a, day, "tls:1"), &guard)?, "back: no move");
                assert!(moved_past(tx, &at(a, day, "tls:3"), &guard)?);
                assert!(
                    !pin_box(tx, &at(a, day, "tls:3"), &guard)?,
                    "a move too many"
                );
                assert!(
                    moved_past(tx, &at(a, day, "tls:3"), &guard)?,
                    "nothing written"
                );
                assert!(pin_box(tx, &at(a, day, "tls:2"), &guard)?);
                // Another peer, another skill: their own pins.
                assert!(pin_box(tx, &at(("peer-b", "taste"), day, "tls:1"), &guard)?);
                assert!(pin_box(tx, &at(("peer-a", "other"), day, "tls:1"), &guard)?);
                // The next day starts from nothing, and yesterday's rows go.
                assert!(!moved_past(tx, &at(a, day + 1, "tls:1"), &guard)?);
                assert!(pin_box(tx, &at(a, day + 1, "tls:1"), &guard)?);
                let kept: i64 =
                    tx.query_row("SELECT count(*) FROM guard_box_days", [], |r| r.get(0))?;
                assert_eq!(kept, 1, "yesterday's pins are forgotten");
                // No move at all: a day stays on one instance.
                let still = GuardConfig {
                    day_box_moves: 0,
                    ..GuardConfig::default()
                };
                assert!(moved_past(tx, &at(a, day + 1, "tls:2"), &still)?);
                assert!(!pin_box(tx, &at(a, day + 1, "tls:2"), &still)?);
                // With the thresholds off there is no day book to move away from.
                let off = GuardConfig {
                    coverage_permille: 0,
                    canary_coverage_permille: 0,
                    ..still
                };
                assert!(!moved_past(tx, &at(a, day + 1, "tls:2"), &off)?);
                Ok(())
            })
            .expect("write");
    }

    /// A run whose submit the box never took (refused, or the box died first) spends none of
    /// the day's moves: the turn taken on a second instance and given back without an
    /// accepted submit leaves the day's one move for a third (review 22b R6). The move past
    /// the pin is still refused at the turn.
    #[test]
    fn a_turn_given_back_without_an_accepted_submit_spends_no_box_move() {
        let store = Store::open_in_memory().expect("store");
        let guard = GuardConfig::default();
        let key = ("peer-a".to_owned(), "taste".to_owned());
        let day = day_of(now_secs());
        let at = |instance| DayRun {
            peer: "peer-a",
            skill: "taste",
            day,
            instance,
        };
        store
            .write(|tx| {
                // The day's first run was submitted at instance 1.
                assert!(pin_box(tx, &at("tls:1"), &guard)?);
                // A call moves to instance 2; the box there refuses the submit.
                let turn = try_take(tx, &key, ("c2", "tls:2"), 1, &guard)?;
                assert_eq!(turn, Turn::Taken);
                give_back(tx, &key, "c2", Some(1))?;
                assert!(
                    !moved_past(tx, &at("tls:3"), &guard)?,
                    "a run that never started used up the day's box move"
                );
                let turn = try_take(tx, &key, ("c3", "tls:3"), 2, &guard)?;
                assert_eq!(turn, Turn::Taken);
                // Its submit accepted, the move is spent: a fourth instance is refused.
                assert!(pin_box(tx, &at("tls:3"), &guard)?);
                give_back(tx, &key, "c3", Some(2))?;
                let turn = try_take(tx, &key, ("c4", "tls:4"), 3, &guard)?;
                assert_eq!(turn, Turn::Refused);
                Ok(())
            })
            .expect("write");
    }

    /// A submit action that outlived its call (the call failed while it waited for the turn)
    /// takes nothing, so the turn it would hold unsettled until the program's expiry stays free
    /// for the peer's next call (review 22b R2).
    #[test]
    fn an_ended_call_takes_no_turn() {
        let store = Store::open_in_memory().expect("store");
        owner_call(&store, "stale", "failed");
        assert_eq!(take(&store, "stale", 1), Turn::Ended);
        let rows: i64 = store
            .read(|c| Ok(c.query_row("SELECT count(*) FROM guard_turns", [], |r| r.get(0))?))
            .expect("read");
        assert_eq!(rows, 0, "an ended call holds no turn");
        owner_call(&store, "next", "submitting");
        assert_eq!(take(&store, "next", 2), Turn::Taken);
    }

    /// The instance is the TLS key the verified attestation binds, else the box's URL.
    #[test]
    fn a_box_instance_is_its_attested_tls_key_else_its_url() {
        let with_key = serde_json::json!({
            "runId": "r", "programHash": "00", "platform": "insecure-dev", "measurement": "ab",
            "hpkePublicKey": "00", "receiptKey": "00", "expiresAt": 1,
            "noHardwareIsolation": true, "tlsSpkiSha256": "k1",
        });
        let mut without = with_key.clone();
        without
            .as_object_mut()
            .expect("object")
            .remove("tlsSpkiSha256");
        assert_eq!(box_instance(Some("https://b"), Some(&with_key)), "tls:k1");
        assert_eq!(
            box_instance(Some("http://b"), Some(&without)),
            "url:http://b"
        );
        assert_eq!(box_instance(Some("http://b"), None), "url:http://b");
    }

    /// The stake's `day_limits` are the `[guard]` thresholds as configured, 0 still off.
    #[test]
    fn the_day_limits_are_the_configured_thresholds() {
        let guard = GuardConfig {
            coverage_permille: 420,
            canary_coverage_permille: 0,
            ..GuardConfig::default()
        };
        let limits = day_limits(&guard);
        assert_eq!(
            (limits.coverage_permille, limits.canary_coverage_permille),
            (420, 0)
        );
        assert!(thresholds_on(&guard) && !day_limits(&GuardConfig::default()).off());
    }

    /// A guard switched off sends the box no day limits, so the node takes no turns, pins no
    /// box and refuses nothing for coverage, whatever thresholds stand in its config.
    #[test]
    fn a_guard_switched_off_keeps_no_day_of_its_own() {
        let off = GuardConfig {
            enabled: false,
            ..GuardConfig::default()
        };
        assert!(thresholds_on(&GuardConfig::default()));
        assert!(!thresholds_on(&off));
    }
}
