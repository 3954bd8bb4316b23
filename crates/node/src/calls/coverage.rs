//! Coverage across calls, the owner's side (issue 32 item 4).
//!
//! The box's note sealed to this owner says, for each answer it released, which body words and
//! canary characters the answer carried (`skillbox_guard::Coverage`). Per (peer, skill, UTC day)
//! the owner keeps their union; a peer whose union passes the `[guard]` thresholds is refused
//! further calls of that skill until the day ends, with the closed code `coverage_exceeded` and
//! its fixed words — never how much it took. So a body asked for a third per call, or an access
//! code three characters at a time, adds up to what one answer may not carry.

use std::collections::HashMap;

use rusqlite::{OptionalExtension, params};
use skillbox_calls::machine::FailureCode;
use skillbox_guard::Coverage;

use super::records::CallRow;

use crate::config::GuardConfig;
use crate::error::Result;
use crate::store::{Tx, now_secs};

/// The UTC day `secs` (unix seconds) falls in.
pub fn day_of(secs: i64) -> i64 {
    secs.div_euclid(86_400)
}

/// Whether a union passes the owner's thresholds (a threshold of 0 is off).
pub fn exceeds(c: &Coverage, guard: &GuardConfig) -> bool {
    let over = |pm: u32, limit: u32| limit > 0 && pm >= limit;
    over(c.words_permille(), guard.coverage_permille)
        || over(c.canary_permille(), guard.canary_coverage_permille)
}

/// The union kept for `peer` and `skill` on `day`, if any (a row that does not parse counts as
/// none: it was written by this node, and a new note replaces it).
pub fn union_of(tx: &Tx<'_>, peer: &str, skill: &str, day: i64) -> Result<Option<Coverage>> {
    let bytes: Option<Vec<u8>> = tx
        .query_row(
            "SELECT coverage FROM guard_coverage WHERE peer = ?1 AND skill = ?2 AND day = ?3",
            params![peer, skill, day],
            |r| r.get(0),
        )
        .optional()?;
    Ok(bytes.and_then(|b| Coverage::from_bytes(&b).ok()))
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
    Ok(union_of(tx, peer, skill, day)?.is_some_and(|c| exceeds(&c, guard)))
}

/// Which owner call of each (peer, skill) holds the turn: a call submitted and not yet counted.
/// Every call is checked against the union from before it, so calls of one peer and skill run
/// side by side would each pass against the same union and together take what none may alone;
/// while the thresholds are on, the owner submits them one at a time instead, each checked
/// against every answer before it. Taken just before the owner submits (its stake is in, and
/// the box runs nothing until both sides submit) and kept once the box accepts the submit,
/// given back when the submit is not accepted (the caller has not staked yet), when the answer
/// is counted, or when the call ends. In memory: a restarted node starts with no holder.
#[derive(Default)]
pub struct Turns(std::sync::Mutex<HashMap<(String, String), String>>);

impl Turns {
    fn holder(&self, key: &(String, String)) -> Option<String> {
        super::lock(&self.0).get(key).cloned()
    }

    /// Take the turn for `me` if `expected` still holds it.
    fn swap(&self, key: &(String, String), expected: Option<&str>, me: &str) -> bool {
        let mut map = super::lock(&self.0);
        if map.get(key).map(String::as_str) != expected {
            return false;
        }
        map.insert(key.clone(), me.to_owned());
        true
    }

    fn give_back(&self, key: &(String, String), me: &str) {
        let mut map = super::lock(&self.0);
        if map.get(key).is_some_and(|h| h == me) {
            map.remove(key);
        }
    }
}

/// The longest an owner asks the box to hold its submit while it holds the turn: a call whose
/// caller has not staked (its human is asked first) gives the turn back between asks.
pub const TURN_ASK: std::time::Duration = std::time::Duration::from_secs(1);

/// The pause before an owner whose submit was not accepted asks again: longer than a waiting
/// call's pause between looks (200 ms), so a call parked at its caller leaves the turn free.
pub const TURN_GAP: std::time::Duration = std::time::Duration::from_millis(250);

impl super::Calls {
    /// Whether calls take turns: the coverage thresholds are on.
    pub(super) fn turns_on(&self) -> bool {
        self.0.guard.coverage_permille > 0 || self.0.guard.canary_coverage_permille > 0
    }

    /// Owner, before it submits: wait for this call's turn among the peer's calls of the skill
    /// (see [`Turns`]) and check the union again once it has it. `Some(coverage_exceeded)`:
    /// refused — the union passed the thresholds while it waited, or the call expired waiting.
    pub(super) async fn take_turn(&self, row: &CallRow) -> Result<Option<FailureCode>> {
        let guard = self.0.guard.clone();
        if !self.turns_on() {
            return Ok(None);
        }
        let key = (row.call.peer.clone(), row.call.skill.clone());
        let me = row.call.id.clone();
        let mut pause = std::time::Duration::from_millis(10);
        loop {
            let holder = self.0.turns.holder(&key);
            let store = self.0.store.clone();
            let (k, h, g) = (key.clone(), holder.clone(), guard.clone());
            let me2 = me.clone();
            let (free, refused_now) = super::blocking(move || {
                store.write(|tx| {
                    // A holder whose call ended (counted, or failed without an answer) holds
                    // nothing.
                    let free = match &h {
                        None => true,
                        Some(h) if *h == me2 => true,
                        Some(h) => tx
                            .query_row(
                                "SELECT state FROM calls WHERE id = ?1 AND role = 'owner'",
                                params![h],
                                |r| r.get::<_, String>(0),
                            )
                            .optional()?
                            .is_none_or(|s| ["answered", "ran", "failed"].contains(&s.as_str())),
                    };
                    let refused_now = free && refused(tx, &k.0, &k.1, day_of(now_secs()), &g)?;
                    Ok((free, refused_now))
                })
            })
            .await?;
            if refused_now {
                return Ok(Some(FailureCode::CoverageExceeded));
            }
            if free && self.0.turns.swap(&key, holder.as_deref(), &me) {
                return Ok(None);
            }
            if !free && super::now_ms() >= row.call.expires_at_ms {
                return Ok(Some(FailureCode::CoverageExceeded));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(200));
        }
    }

    /// Owner: this call's answer is counted (or it has none); the next call may go.
    pub(super) fn end_turn(&self, row: &CallRow) {
        let key = (row.call.peer.clone(), row.call.skill.clone());
        self.0.turns.give_back(&key, &row.call.id);
    }
}

/// Add one released answer's coverage to the day's union for `peer` and `skill`; returns the
/// union. A coverage of another shape (the owner changed the body since) starts the union over:
/// positions in one body mean nothing in another. Adding the same note twice changes nothing,
/// so a retried outcome is harmless. Rows of days before `day` are dropped.
pub fn add(tx: &Tx<'_>, peer: &str, skill: &str, day: i64, c: &Coverage) -> Result<Coverage> {
    let union = match union_of(tx, peer, skill, day)? {
        Some(mut u) => {
            if u.add(c) {
                u
            } else {
                c.clone()
            }
        }
        None => c.clone(),
    };
    tx.execute(
        "INSERT INTO guard_coverage (peer, skill, day, coverage, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (peer, skill, day) DO UPDATE SET coverage = ?4, updated_at = ?5",
        params![peer, skill, day, union.to_bytes(), crate::store::now_secs()],
    )?;
    tx.execute("DELETE FROM guard_coverage WHERE day < ?1", params![day])?;
    Ok(union)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use skillbox_guard::{GuardSpec, prepare, released_coverage};

    #[test]
    fn unions_add_up_per_peer_skill_and_day_and_pass_the_thresholds() {
        let body = "Open the shed first. The door code is [[secret:K7PM2Q]] for today.";
        let p = prepare(body, &GuardSpec::default_for(false)).expect("prepare");
        let store = Store::open_in_memory().expect("store");
        let guard = GuardConfig::default();
        let first = released_coverage(&p, "It starts with K7P.");
        let second = released_coverage(&p, "It ends with M2Q.");
        let day = day_of(1_800_000_000);
        store
            .write(|tx| {
                assert!(!refused(tx, "peer-a", "taste", day, &guard)?);
                let u = add(tx, "peer-a", "taste", day, &first)?;
                assert_eq!(u.canary_permille(), 500);
                // Half a code: refused from now on, for this peer and skill and day only.
                assert!(refused(tx, "peer-a", "taste", day, &guard)?);
                assert!(!refused(tx, "peer-b", "taste", day, &guard)?);
                assert!(!refused(tx, "peer-a", "other", day, &guard)?);
                let u = add(tx, "peer-a", "taste", day, &second)?;
                assert_eq!(u.canary_permille(), 1000, "the union is kept");
                // Thresholds off: nothing refused.
                let off = GuardConfig {
                    coverage_permille: 0,
                    canary_coverage_permille: 0,
                    ..GuardConfig::default()
                };
                assert!(!refused(tx, "peer-a", "taste", day, &off)?);
                // The next day starts from nothing, and yesterday's row goes.
                add(tx, "peer-a", "taste", day + 1, &Coverage::none(&p))?;
                assert!(!refused(tx, "peer-a", "taste", day + 1, &guard)?);
                assert!(union_of(tx, "peer-a", "taste", day)?.is_none());
                Ok(())
            })
            .expect("write");
    }
}
