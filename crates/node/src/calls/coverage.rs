//! Coverage across calls, the owner's side (issue 32 item 4).
//!
//! The box's note sealed to this owner says, for each answer it released, which of the body's
//! 16 regions of equal word count it touched and its most covered secret's share rounded up to
//! a level (`skillbox_guard::CoverageLevels`) — never which words or characters, which a
//! hostile owner's body could make spell out the caller's sources. Per (peer, skill, UTC day)
//! the owner keeps the UNION of the region masks and the SUM of the secret levels; a peer past
//! the `[guard]` thresholds (covered regions / 16 against `coverage_permille`, the summed
//! secret share against `canary_coverage_permille`) is refused further calls of that skill
//! until the day ends, with the closed code `coverage_exceeded` and its fixed words — never
//! how much it took. So a body asked for a third per call (each call new regions), or an
//! access code three characters at a time, adds up to what one answer may not carry, while a
//! passage every answer repeats (a disclaimer the body asks for) counts once: summed, it
//! refused an honest caller's 4th call of the day.

use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::{OptionalExtension, params};
use skillbox_calls::machine::FailureCode;
use skillbox_guard::{CoverageLevels, REGIONS, WHOLE};
use tokio::sync::Notify;

use super::records::CallRow;

use crate::config::GuardConfig;
use crate::error::Result;
use crate::store::{Tx, now_secs};

/// The UTC day `secs` (unix seconds) falls in.
pub fn day_of(secs: i64) -> i64 {
    secs.div_euclid(86_400)
}

/// A day of what the notes told: the body's regions covered, and the secret levels summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// The union of the answers' region masks (bit `r` for region `r` of
    /// `skillbox_guard::REGIONS`).
    pub regions: i64,
    /// Each answer's most covered secret's share in 64ths (`skillbox_guard::LEVELS`), summed:
    /// past the whole once more than a secret was carried in all.
    /// At least any one secret's share over the day (every answer's most covered secret covers
    /// at least as much as that one).
    pub canary: i64,
}

/// One released answer's levels to count, and the run that released it (a run is counted
/// once, however often its outcome is stepped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counted {
    pub run_id: String,
    pub levels: CoverageLevels,
}

/// Whether a day passes the owner's thresholds (a threshold of 0 is off): `parts` of `whole`
/// reach `limit` per mille, compared exactly — covered regions of 16 for the words, summed
/// 64ths for the secret.
pub fn exceeds(t: &Tally, guard: &GuardConfig) -> bool {
    let over = |parts: i64, whole: u32, limit: u32| {
        limit > 0 && parts * 1000 >= i64::from(limit) * i64::from(whole)
    };
    over(
        i64::from(t.regions.count_ones()),
        REGIONS,
        guard.coverage_permille,
    ) || over(t.canary, WHOLE, guard.canary_coverage_permille)
}

/// The sums kept for `peer` and `skill` on `day`, if any.
pub fn tally_of(tx: &Tx<'_>, peer: &str, skill: &str, day: i64) -> Result<Option<Tally>> {
    let tally = tx
        .query_row(
            "SELECT regions, canary FROM guard_coverage
             WHERE peer = ?1 AND skill = ?2 AND day = ?3",
            params![peer, skill, day],
            |r| {
                Ok(Tally {
                    regions: r.get(0)?,
                    canary: r.get(1)?,
                })
            },
        )
        .optional()?;
    Ok(tally)
}

/// Whether `peer` is past the thresholds for `skill` on `day`.
pub fn refused(
    tx: &Tx<'_>,
    peer: &str,
    skill: &str,
    day: i64,
    guard: &GuardConfig,
) -> Result<bool> {
    if guard.coverage_permille == 0 && guard.canary_coverage_permille == 0 {
        return Ok(false);
    }
    Ok(tally_of(tx, peer, skill, day)?.is_some_and(|t| exceeds(&t, guard)))
}

/// Which owner call of each (peer, skill) holds the turn: a call submitted and not yet counted.
/// Every call is checked against the union from before it, so calls of one peer and skill run
/// side by side would each pass against the same union and together take what none may alone;
/// while the thresholds are on, the owner submits them one at a time instead, each checked
/// against every answer before it. Taken just before the owner submits (its stake is in, and
/// the box runs nothing until both sides submit) and kept once the box accepts the submit,
/// given back when the submit is not accepted (the caller has not staked yet), when the answer
/// is counted, or when the call ends.
///
/// The holder is a row of the store (`guard_turns`), taken in the same transaction that checks
/// the union, so it outlives a restart: a call submitted before the restart still runs at the
/// box, and the next call waits for its answer to be counted. Only a call submitting or
/// submitted holds it: a row naming a call that ended, moved back to another run or is gone
/// (the restart lost it) holds nothing, and the next call takes the turn. Waiting calls sleep
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
    /// Free, but the union is past the thresholds: refused.
    Refused,
}

/// In one transaction: take the turn for `me` (with `token`) unless a live call holds it, and
/// check the union once it is free. A holder is live while its owner call is submitting or
/// submitted.
pub fn try_take(
    tx: &Tx<'_>,
    key: &(String, String),
    me: &str,
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
    let held = match holder.as_deref() {
        None => false,
        Some(h) if h == me => false,
        Some(h) => tx
            .query_row(
                "SELECT state FROM calls WHERE id = ?1 AND role = 'owner'",
                params![h],
                |r| r.get::<_, String>(0),
            )
            .optional()?
            .is_some_and(|s| s == "submitting" || s == "submitted"),
    };
    if held {
        return Ok(Turn::Held);
    }
    if refused(tx, &key.0, &key.1, day_of(now_secs()), guard)? {
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

impl super::Calls {
    /// Whether calls take turns: the coverage thresholds are on.
    pub(super) fn turns_on(&self) -> bool {
        self.0.guard.coverage_permille > 0 || self.0.guard.canary_coverage_permille > 0
    }

    /// Owner, before it submits: wait for this call's turn among the peer's calls of the skill
    /// (see [`Turns`]) and check the union again once it has it. `Some(coverage_exceeded)`:
    /// refused — the union passed the thresholds while it waited, or the call expired waiting.
    pub(super) async fn take_turn(&self, row: &CallRow) -> Result<Option<FailureCode>> {
        if !self.turns_on() {
            return Ok(None);
        }
        let key = (row.call.peer.clone(), row.call.skill.clone());
        let me = row.call.id.clone();
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
                let turn =
                    super::blocking(move || store.write(|tx| try_take(tx, &k, &m, token, &g)))
                        .await?;
                match turn {
                    Turn::Taken => {
                        super::lock(&self.0.turns.taken).insert(me.clone(), token);
                        return Ok(None);
                    }
                    Turn::Refused => return Ok(Some(FailureCode::CoverageExceeded)),
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

    /// Owner: this call's answer is counted (or it has none); the next call may go. The row
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

/// Add one released answer's levels to the day of `peer` and `skill` (its regions to the
/// union, its secret level to the sum); returns the day. A run already counted adds nothing (`guard_counted`), so a retried outcome is
/// harmless. Rows of days before `day` are dropped.
pub fn add(tx: &Tx<'_>, peer: &str, skill: &str, day: i64, c: &Counted) -> Result<Tally> {
    tx.execute("DELETE FROM guard_coverage WHERE day < ?1", params![day])?;
    tx.execute("DELETE FROM guard_counted WHERE day < ?1", params![day])?;
    let new = tx.execute(
        "INSERT INTO guard_counted (run_id, day) VALUES (?1, ?2) ON CONFLICT (run_id) DO NOTHING",
        params![c.run_id, day],
    )?;
    if new == 1 {
        tx.execute(
            "INSERT INTO guard_coverage (peer, skill, day, regions, canary, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (peer, skill, day)
             DO UPDATE SET regions = regions | ?4, canary = canary + ?5, updated_at = ?6",
            params![
                peer,
                skill,
                day,
                c.levels.regions(),
                c.levels.canary_parts(),
                crate::store::now_secs()
            ],
        )?;
    }
    Ok(tally_of(tx, peer, skill, day)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use skillbox_guard::{GuardSpec, prepare, released_levels};

    fn counted(run_id: &str, levels: CoverageLevels) -> Counted {
        Counted {
            run_id: run_id.into(),
            levels,
        }
    }

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
            .write(|tx| try_take(tx, &key, me, token, &GuardConfig::default()))
            .expect("take")
    }

    /// The turn is a row of the store: a call submitted before a restart still holds it after
    /// (its run goes on at the box and its answer is counted later), and a row naming a call
    /// that is gone, ended or back before its submit holds nothing — the next call takes it
    /// instead of waiting out its expiry.
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
        // call-a ended while the node was down (failed, answered): the turn is free.
        for state in ["failed", "answered", "opened"] {
            owner_call(&store, "call-a", state);
            assert_eq!(take(&store, "call-b", 9), Turn::Taken, "{state}");
            store
                .write(|tx| {
                    give_back(tx, &key, "call-b", None)?;
                    try_take(tx, &key, "call-a", 10, &GuardConfig::default())
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
        // Free but the sums are past the thresholds: refused, and the turn not taken.
        store
            .write(|tx| give_back(tx, &key, "call-b", None))
            .expect("given back");
        let p = prepare(
            "The shed code is [[secret:K7PM2Q]].",
            &GuardSpec::default_for(false),
        )
        .expect("prepare");
        store
            .write(|tx| {
                add(
                    tx,
                    "peer-a",
                    "taste",
                    day_of(now_secs()),
                    &counted("run-1", released_levels(&p, "K7PM")),
                )?;
                Ok(())
            })
            .expect("coverage");
        assert_eq!(take(&store, "call-b", 12), Turn::Refused);
    }

    #[test]
    fn levels_add_up_per_peer_skill_and_day_and_pass_the_thresholds() {
        let body = "Open the shed first. The door code is [[secret:K7PM2Q]] for today.";
        let p = prepare(body, &GuardSpec::default_for(false)).expect("prepare");
        let store = Store::open_in_memory().expect("store");
        let guard = GuardConfig::default();
        let first = counted("run-1", released_levels(&p, "It starts with K7P."));
        let second = counted("run-2", released_levels(&p, "It ends with M2Q."));
        let day = day_of(1_800_000_000);
        store
            .write(|tx| {
                assert!(!refused(tx, "peer-a", "taste", day, &guard)?);
                let t = add(tx, "peer-a", "taste", day, &first)?;
                assert_eq!(t.canary, i64::from(WHOLE / 2));
                // Half a code: refused from now on, for this peer and skill and day only.
                assert!(refused(tx, "peer-a", "taste", day, &guard)?);
                assert!(!refused(tx, "peer-b", "taste", day, &guard)?);
                assert!(!refused(tx, "peer-a", "other", day, &guard)?);
                // A run's outcome stepped again counts once.
                assert_eq!(add(tx, "peer-a", "taste", day, &first)?, t);
                let t = add(tx, "peer-a", "taste", day, &second)?;
                assert_eq!(t.canary, i64::from(WHOLE), "the sum is kept");
                // Below the limit, close to it: 5 regions of 16 are 312 per mille, 6 are 375.
                let under = Tally {
                    regions: 0b1000_0000_0000_1111,
                    canary: 0,
                };
                let at = Tally {
                    regions: 0b1100_0000_0000_1111,
                    canary: 0,
                };
                assert!(!exceeds(&under, &guard) && exceeds(&at, &guard));
                // Thresholds off: nothing refused.
                let off = GuardConfig {
                    coverage_permille: 0,
                    canary_coverage_permille: 0,
                    ..GuardConfig::default()
                };
                assert!(!refused(tx, "peer-a", "taste", day, &off)?);
                // The next day starts from nothing, and yesterday's rows go.
                add(
                    tx,
                    "peer-a",
                    "taste",
                    day + 1,
                    &counted("run-3", CoverageLevels::NONE),
                )?;
                assert!(!refused(tx, "peer-a", "taste", day + 1, &guard)?);
                assert!(tally_of(tx, "peer-a", "taste", day)?.is_none());
                let kept: i64 =
                    tx.query_row("SELECT count(*) FROM guard_counted", [], |r| r.get(0))?;
                assert_eq!(kept, 1, "yesterday's counted runs are forgotten");
                Ok(())
            })
            .expect("write");
    }
}
