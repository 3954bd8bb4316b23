//! Call rows in the store: the machine's record (JSON, so a new field never needs a migration)
//! beside the columns queries filter on, and what each side keeps of a call: the program, the box
//! URL, the caller's chosen source *names*, the receipt. Material never lands here: the caller's
//! request, result key and answer are sources (`call/<id>/...`), encrypted like every source.

use crate::store::Tx;
use rusqlite::{OptionalExtension, params};
use serde_json::Value;
use skillbox_calls::{Call, Role, State};

use crate::error::{NodeError, Result};
use crate::store::{Store, now_secs};

/// The source holding a caller's request text for call `id`.
pub fn request_source(id: &str) -> String {
    format!("{}{id}/request", crate::sources::CALL_PREFIX)
}
/// The source holding a caller's HPKE result key for call `id`.
pub fn result_key_source(id: &str) -> String {
    format!("{}{id}/result-key", crate::sources::CALL_PREFIX)
}
/// The source holding the opened answer of call `id` (caller side).
pub fn answer_source(id: &str) -> String {
    format!("{}{id}/answer", crate::sources::CALL_PREFIX)
}

pub fn role_str(role: Role) -> &'static str {
    match role {
        Role::Caller => "caller",
        Role::Owner => "owner",
    }
}

pub fn parse_role(s: &str) -> Option<Role> {
    match s {
        "caller" => Some(Role::Caller),
        "owner" => Some(Role::Owner),
        _ => None,
    }
}

/// One side's row of a call.
#[derive(Debug, Clone)]
pub struct CallRow {
    pub call: Call,
    /// The DSSE envelope of the program (JSON): the caller's signature, then both.
    pub program: Option<String>,
    pub box_url: Option<String>,
    /// The public facts of this side's verified attestation of the run (so a restart mid-run
    /// needs no new attestation, which the box cannot give once the run started).
    pub verified: Option<Value>,
    /// Caller: the sources this call applies (names only).
    pub sources: Vec<String>,
    pub receipt: Option<Value>,
}

impl CallRow {
    /// The row as [`update`] with `call` and `patch` leaves it (what a transition hands its
    /// actions, so they need not read it back).
    pub fn updated(mut self, call: Call, patch: &Patch) -> CallRow {
        self.call = call;
        if let Some(p) = &patch.program {
            self.program = Some(p.clone());
        }
        if let Some(b) = &patch.box_url {
            self.box_url = Some(b.clone());
        }
        if let Some(r) = &patch.receipt {
            self.receipt = Some(r.clone());
        }
        if let Some(v) = &patch.verified {
            self.verified = Some(v.clone());
        }
        self
    }
}

/// Filters of `GET /calls`.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub state: Option<State>,
    pub role: Option<Role>,
    pub peer: Option<String>,
    pub limit: Option<usize>,
}

const COLUMNS: &str = "record, program, box_url, sources, receipt, id, verified";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<CallRow>> {
    let record: String = r.get(0)?;
    let program: Option<String> = r.get(1)?;
    let box_url: Option<String> = r.get(2)?;
    let sources: String = r.get(3)?;
    let receipt: Option<String> = r.get(4)?;
    let id: String = r.get(5)?;
    let verified: Option<String> = r.get(6)?;
    let bad = |problem: String| NodeError::StoredRow {
        what: "call",
        name: id.clone(),
        problem,
    };
    Ok((|| {
        let call: Call = serde_json::from_str(&record).map_err(|e| bad(e.to_string()))?;
        let sources: Vec<String> =
            serde_json::from_str(&sources).map_err(|e| bad(e.to_string()))?;
        let receipt = receipt
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| bad(e.to_string()))?;
        let verified = verified
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| bad(e.to_string()))?;
        Ok(CallRow {
            call,
            program,
            box_url,
            verified,
            sources,
            receipt,
        })
    })())
}

pub fn load(store: &Store, id: &str, role: Role) -> Result<Option<CallRow>> {
    store.read(|c| {
        let row = c
            .query_row(
                &format!("SELECT {COLUMNS} FROM calls WHERE id = ?1 AND role = ?2"),
                params![id, role_str(role)],
                from_row,
            )
            .optional()?;
        row.transpose()
    })
}

/// Every row with this id: at most one, since a request reusing one of this node's own call ids
/// is refused (`inbound::on_request`).
pub fn by_id(store: &Store, id: &str) -> Result<Vec<CallRow>> {
    store.read(|c| {
        let mut stmt = c.prepare(&format!(
            "SELECT {COLUMNS} FROM calls WHERE id = ?1 ORDER BY role"
        ))?;
        let rows = stmt.query_map(params![id], from_row)?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r??);
        }
        Ok(out)
    })
}

pub fn list(store: &Store, f: &Filter) -> Result<Vec<CallRow>> {
    store.read(|c| {
        let mut sql = format!("SELECT {COLUMNS} FROM calls WHERE 1 = 1");
        let mut args: Vec<String> = Vec::new();
        if let Some(s) = f.state {
            args.push(s.as_str().to_owned());
            sql.push_str(&format!(" AND state = ?{}", args.len()));
        }
        if let Some(r) = f.role {
            args.push(role_str(r).to_owned());
            sql.push_str(&format!(" AND role = ?{}", args.len()));
        }
        if let Some(p) = &f.peer {
            args.push(p.clone());
            sql.push_str(&format!(" AND peer = ?{}", args.len()));
        }
        sql.push_str(" ORDER BY created_at DESC, id");
        if let Some(n) = f.limit {
            sql.push_str(&format!(" LIMIT {n}"));
        }
        let mut stmt = c.prepare(&sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(args.iter()), from_row)?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r??);
        }
        Ok(out)
    })
}

/// `(id, role)` of every call not yet answered, ran or failed.
pub fn open_calls(store: &Store) -> Result<Vec<(String, Role)>> {
    store.read(|c| {
        let mut stmt = c.prepare(
            "SELECT id, role FROM calls WHERE state NOT IN ('answered', 'ran', 'failed') ORDER BY created_at",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for r in rows {
            let (id, role) = r?;
            if let Some(role) = parse_role(&role) {
                out.push((id, role));
            }
        }
        Ok(out)
    })
}

/// Insert a new row. Refuses an existing `(id, role)`: a call id is never reused.
pub fn insert(tx: &Tx<'_>, row: &CallRow) -> Result<()> {
    let record = serde_json::to_string(&row.call)
        .map_err(|e| NodeError::invalid("call", format!("record does not serialize: {e}")))?;
    let sources = serde_json::to_string(&row.sources)
        .map_err(|e| NodeError::invalid("sources", e.to_string()))?;
    let now = now_secs();
    let n = tx.execute(
        "INSERT OR IGNORE INTO calls (id, role, peer, skill, state, record, program, box_url, sources, receipt, created_at, updated_at, charge)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL, ?10, ?10, 0)",
        params![
            row.call.id,
            role_str(row.call.role),
            row.call.peer,
            row.call.skill,
            row.call.state.as_str(),
            record,
            row.program,
            row.box_url,
            sources,
            now,
        ],
    )?;
    if n == 0 {
        return Err(NodeError::Conflict(format!(
            "call {} ({}) already exists",
            row.call.id,
            role_str(row.call.role)
        )));
    }
    Ok(())
}

/// What an event changes beside the machine's record.
#[derive(Debug, Clone, Default)]
pub struct Patch {
    pub program: Option<String>,
    pub box_url: Option<String>,
    pub receipt: Option<Value>,
    pub verified: Option<Value>,
    /// A box move for the call's history (its record's `moves`), added by the driver when the
    /// machine takes the event.
    pub moved: Option<skillbox_calls::machine::BoxMove>,
}

/// Write the new record (and the patch) of an existing row.
pub fn update(tx: &Tx<'_>, call: &Call, patch: &Patch) -> Result<()> {
    let record = serde_json::to_string(call)
        .map_err(|e| NodeError::invalid("call", format!("record does not serialize: {e}")))?;
    let receipt = patch
        .receipt
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| NodeError::invalid("receipt", e.to_string()))?;
    let verified = patch
        .verified
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| NodeError::invalid("verified", e.to_string()))?;
    let n = tx.execute(
        "UPDATE calls SET state = ?3, record = ?4,
            program = COALESCE(?5, program), box_url = COALESCE(?6, box_url),
            receipt = COALESCE(?7, receipt), updated_at = ?8,
            verified = COALESCE(?9, verified)
         WHERE id = ?1 AND role = ?2",
        params![
            call.id,
            role_str(call.role),
            call.state.as_str(),
            record,
            patch.program,
            patch.box_url,
            receipt,
            now_secs(),
            verified,
        ],
    )?;
    if n == 0 {
        return Err(NodeError::NotFound {
            kind: "call",
            name: call.id.clone(),
        });
    }
    Ok(())
}

/// The owner's calls of `skill` since `since` (unix seconds), by their charge: `(in total, from
/// peer)`. A row is written with charge 0 and charged only when its run is verified (see
/// [`charge_run`]), so this counts calls that reached a run, not every admitted one. Exact:
/// the hours after `since`'s own from their tallies (`charge_tally`, migration 13), that one
/// hour from the index, by the second — a sum of at most 25 hours' tallies and one hour's
/// calls, not every call of the day.
pub fn charged_since(tx: &Tx<'_>, skill: &str, peer: &str, since: i64) -> Result<(u64, u64)> {
    let hour = since.div_euclid(3600);
    let both = |r: &rusqlite::Row<'_>| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?));
    let (whole, whole_mine) = tx.query_row(CHARGED_HOURS, params![skill, peer, hour], both)?;
    let end = (hour + 1) * 3600;
    let (cut, cut_mine) = tx.query_row(CHARGED_SINCE, params![skill, peer, since, end], both)?;
    Ok((
        (whole + cut).max(0) as u64,
        (whole_mine + cut_mine).max(0) as u64,
    ))
}

/// The tallies of the hours after `?3` (a `WITHOUT ROWID` table: its key is its only index).
const CHARGED_HOURS: &str =
    "SELECT COALESCE(SUM(charge), 0), COALESCE(SUM(CASE WHEN peer = ?2 THEN charge ELSE 0 END), 0)
     FROM charge_tally WHERE skill = ?1 AND hour > ?3";

/// Read from the partial index `calls_charged` alone (migration 11): a row charged 0 adds
/// nothing to a sum, and the index holds only charged rows. Bounded above by `?4`: the end of
/// the hour `since` falls in (later hours come from their tallies).
const CHARGED_SINCE: &str =
    "SELECT COALESCE(SUM(charge), 0), COALESCE(SUM(CASE WHEN peer = ?2 THEN charge ELSE 0 END), 0)
     FROM calls WHERE role = 'owner' AND skill = ?1 AND created_at >= ?3 AND created_at < ?4
       AND charge > 0";

/// One row of the tally the triggers keep (migration 14); no row is none.
const UNSTARTED_OF: &str = "SELECT COALESCE((SELECT n FROM unstarted_tally WHERE peer = ?1), 0)";

/// The owner's admitted calls of `peer` (any skill) that have not reached their run and are not
/// finished: what one peer holds without having been charged.
pub fn unstarted_of(tx: &Tx<'_>, peer: &str) -> Result<u64> {
    let n: i64 = tx.query_row(UNSTARTED_OF, params![peer], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// Charge the owner's call `id` against its skill's daily ceilings, once: `Ok(true)` when it is
/// (or already was) charged, `Ok(false)` when the ceilings are full — the count and the charge
/// in one transaction, so concurrent runs cannot both take the last place.
pub fn charge_run(
    tx: &Tx<'_>,
    id: &str,
    (per_peer, per_day): (u64, u64),
    since: i64,
) -> Result<bool> {
    let row: Option<(String, String, i64)> = tx
        .query_row(
            "SELECT skill, peer, charge FROM calls WHERE id = ?1 AND role = 'owner'",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((skill, peer, charge)) = row else {
        return Err(NodeError::NotFound {
            kind: "call",
            name: id.to_owned(),
        });
    };
    if charge > 0 {
        return Ok(true);
    }
    let (total, mine) = charged_since(tx, &skill, &peer, since)?;
    if mine >= per_peer || total >= per_day {
        return Ok(false);
    }
    tx.execute(
        "UPDATE calls SET charge = 1 WHERE id = ?1 AND role = 'owner'",
        params![id],
    )?;
    Ok(true)
}

/// The `skillbox_calls` gauge's counts: grouped in the order of `calls_by_state_role`
/// (migration 19), so SQLite counts that index's entries and reads no call row.
const COUNTS_BY_STATE: &str =
    "SELECT role, state, count(*) FROM calls GROUP BY state, role ORDER BY 1, 2";

/// How many calls the store holds, by (role, state): the `skillbox_calls` gauge.
pub fn counts_by_state(store: &Store) -> Result<Vec<(String, String, u64)>> {
    store.read(|c| {
        let mut stmt = c.prepare(COUNTS_BY_STATE)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows
            .into_iter()
            .map(|(role, state, n)| (role, state, n.max(0) as u64))
            .collect())
    })
}

/// Remove finished calls last changed before `before` (unix seconds), with what is kept beside
/// them (a caller's answer, and anything else under `call/<id>/`). Returns how many rows went.
pub fn prune_finished(store: &Store, before: i64) -> Result<usize> {
    store.write(|tx| {
        let ids: Vec<String> = {
            let mut stmt = tx.prepare(
                "SELECT DISTINCT id FROM calls
                 WHERE state IN ('answered', 'ran', 'failed') AND updated_at < ?1",
            )?;
            stmt.query_map(params![before], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?
        };
        let mut n = 0;
        for id in &ids {
            // A call id is 32 hex digits (or a peer's id of our own form): no LIKE wildcard in it
            // can reach another call's sources, but escape anyway.
            let prefix = format!("{}{}/", crate::sources::CALL_PREFIX, id)
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            tx.execute(
                "DELETE FROM sources WHERE name LIKE ?1 || '%' ESCAPE '\\'",
                params![prefix],
            )?;
            n += tx.execute(
                "DELETE FROM calls WHERE id = ?1 AND state IN ('answered', 'ran', 'failed') AND updated_at < ?2",
                params![id, before],
            )?;
        }
        // The tallies of hours no day's count reaches any more (`charged_since` reads 25).
        tx.execute(
            "DELETE FROM charge_tally WHERE hour < ?1",
            params![(now_secs() - 2 * 86_400).div_euclid(3600)],
        )?;
        Ok(n)
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use skillbox_calls::machine::{self, Call, Event, NewCall, Timing};

    /// The tests' one call: `c1` of `peer` for `taste`, just started on `role`'s side.
    pub(in crate::calls) fn started(role: Role) -> Call {
        let call = NewCall {
            id: "c1".into(),
            peer: "peer".into(),
            skill: "taste".into(),
            program_hash: format!("sha256:{}", "0".repeat(64)),
            expires_at_ms: u64::MAX / 2,
        };
        machine::start(role, call, 1_000, &Timing::default()).call
    }

    pub(in crate::calls) fn same(a: &CallRow, b: &CallRow) -> bool {
        a.call == b.call
            && a.program == b.program
            && a.box_url == b.box_url
            && a.verified == b.verified
            && a.sources == b.sources
            && a.receipt == b.receipt
    }

    /// SQLite's plan for `sql`, its `args` parameters bound to NULL: one line a step.
    fn plan_of(store: &Store, sql: &str, args: usize) -> Vec<String> {
        store
            .read(|c| {
                let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                let params = vec![rusqlite::types::Value::Null; args];
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(params), |r| r.get(3))?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(rows)
            })
            .expect("plan")
    }

    /// The owner's counts in every call's write transaction read an index, never the call rows
    /// (issue 33: by the older indexes they read every row of the skill's day and of the peer,
    /// thousands per call under load, under the writer's lock).
    #[test]
    fn the_owners_counts_read_only_an_index() {
        let store = Store::open_in_memory().expect("store");
        for (sql, args) in [(CHARGED_SINCE, 4), (CHARGED_HOURS, 3)] {
            let plan = plan_of(&store, sql, args);
            assert!(
                plan.len() == 1
                    && (plan[0].contains("USING COVERING INDEX")
                        || plan[0].contains("charge_tally USING PRIMARY KEY")),
                "{sql}: {plan:?}"
            );
        }
        // A peer's calls not yet run: one row of their tally.
        let plan = plan_of(&store, UNSTARTED_OF, 1);
        assert!(
            plan.iter().all(|l| !l.contains("calls"))
                && plan
                    .iter()
                    .any(|l| l.contains("unstarted_tally USING PRIMARY KEY")),
            "{plan:?}"
        );
    }

    /// A `GET /metrics` counts the calls without reading their rows (issue 33: the bench's
    /// scrape twice a second read every kept row; so does an operator's, whatever the calls
    /// kept).
    #[test]
    fn the_calls_gauge_reads_only_an_index() {
        let store = Store::open_in_memory().expect("store");
        let plan = plan_of(&store, COUNTS_BY_STATE, 0);
        assert!(
            plan.iter()
                .any(|l| l == "SCAN calls USING COVERING INDEX calls_by_state_role")
                && plan
                    .iter()
                    .all(|l| !l.starts_with("SCAN calls") || l.contains("COVERING INDEX")),
            "{plan:?}"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// The day's count read from the hourly tallies (kept by triggers) is the count of the
        /// charged rows themselves, by the second, whatever rows were made, charged, charged
        /// again (the guard acted) or pruned, and wherever the window's start falls.
        #[test]
        fn the_days_count_from_tallies_is_the_rows_own(
            ops in proptest::collection::vec(
                (0u8..4, 0usize..10, 0i64..40 * 3600, 0usize..2, 0usize..2),
                1..60,
            ),
            sinces in proptest::collection::vec(0i64..42 * 3600, 1..6),
        ) {
            let store = Store::open_in_memory().expect("store");
            let base = 1_700_000_000 - 1_700_000_000 % 3600 + 1234;
            store
                .write(|tx| {
                    for &(op, i, at, peer, skill) in &ops {
                        let id = format!("c{i}");
                        match op {
                            0 => {
                                tx.execute(
                                    "INSERT OR IGNORE INTO calls (id, role, peer, skill, state,
                                       record, created_at, updated_at, charge)
                                     VALUES (?1, 'owner', ?2, ?3, 'accepted', '{}', ?4, ?4, 0)",
                                    params![id, format!("p{peer}"), format!("s{skill}"), base + at],
                                )?;
                            }
                            1 | 2 => {
                                tx.execute(
                                    "UPDATE calls SET charge = ?2 WHERE id = ?1",
                                    params![id, op as i64],
                                )?;
                            }
                            _ => {
                                tx.execute("DELETE FROM calls WHERE id = ?1", params![id])?;
                            }
                        }
                    }
                    for since in &sinces {
                        let since = base + since;
                        for (skill, peer) in [("s0", "p0"), ("s0", "p1"), ("s1", "p0")] {
                            let rows: (i64, i64) = tx.query_row(
                                "SELECT COALESCE(SUM(charge), 0),
                                        COALESCE(SUM(CASE WHEN peer = ?2 THEN charge END), 0)
                                 FROM calls WHERE skill = ?1 AND created_at >= ?3",
                                params![skill, peer, since],
                                |r| Ok((r.get(0)?, r.get(1)?)),
                            )?;
                            let counted = charged_since(tx, skill, peer, since)?;
                            assert_eq!(
                                counted,
                                (rows.0 as u64, rows.1 as u64),
                                "{skill} {peer} since {since}"
                            );
                        }
                    }
                    Ok(())
                })
                .expect("ops");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// A peer's calls not yet run, read from the tally the triggers keep, are the count of
        /// the rows themselves, whatever rows of either role were made, moved through states,
        /// charged, given to another peer or pruned.
        #[test]
        fn a_peers_unstarted_calls_from_the_tally_are_the_rows_own(
            ops in proptest::collection::vec((0u8..5, 0usize..12, 0usize..6, 0usize..3), 1..80),
        ) {
            const STATES: [&str; 6] = ["accepted", "opened", "submitting", "answered", "ran", "failed"];
            let store = Store::open_in_memory().expect("store");
            store
                .write(|tx| {
                    for &(op, i, x, peer) in &ops {
                        let id = format!("c{i}");
                        let peer = format!("p{peer}");
                        match op {
                            0 => {
                                let role = if x % 3 == 0 { "caller" } else { "owner" };
                                tx.execute(
                                    "INSERT OR IGNORE INTO calls (id, role, peer, skill, state,
                                       record, created_at, updated_at, charge)
                                     VALUES (?1, ?2, ?3, 's', ?4, '{}', 1, 1, 0)",
                                    params![id, role, peer, STATES[x]],
                                )?;
                            }
                            1 => {
                                tx.execute(
                                    "UPDATE calls SET state = ?2 WHERE id = ?1",
                                    params![id, STATES[x]],
                                )?;
                            }
                            2 => {
                                tx.execute(
                                    "UPDATE calls SET charge = ?2 WHERE id = ?1",
                                    params![id, (x % 3) as i64],
                                )?;
                            }
                            3 => {
                                tx.execute(
                                    "UPDATE calls SET peer = ?2 WHERE id = ?1",
                                    params![id, peer],
                                )?;
                            }
                            _ => {
                                tx.execute("DELETE FROM calls WHERE id = ?1", params![id])?;
                            }
                        }
                        for p in ["p0", "p1", "p2", "p9"] {
                            let rows: i64 = tx.query_row(
                                "SELECT count(*) FROM calls WHERE role = 'owner' AND peer = ?1
                                   AND charge = 0 AND state NOT IN ('answered', 'ran', 'failed')",
                                params![p],
                                |r| r.get(0),
                            )?;
                            assert_eq!(unstarted_of(tx, p)?, rows as u64, "{p} after {op} {i} {x}");
                        }
                    }
                    Ok(())
                })
                .expect("ops");
        }
    }

    /// Pruning drops the tallies of hours no day's count reads, and keeps the rest.
    #[test]
    fn pruning_drops_the_tallies_no_count_reads() {
        let store = Store::open_in_memory().expect("store");
        let hour = now_secs().div_euclid(3600);
        let tallies = || -> Vec<i64> {
            store
                .read(|c| {
                    let mut stmt = c.prepare("SELECT hour FROM charge_tally ORDER BY hour")?;
                    let rows = stmt.query_map([], |r| r.get(0))?;
                    Ok(rows.collect::<rusqlite::Result<_>>()?)
                })
                .expect("tallies")
        };
        store
            .write(|tx| {
                for h in [hour - 60, hour - 30, hour] {
                    tx.execute(
                        "INSERT INTO charge_tally (skill, hour, peer, charge) VALUES ('s', ?1, 'p', 1)",
                        params![h],
                    )?;
                }
                Ok(())
            })
            .expect("tallies");
        prune_finished(&store, 0).expect("prune");
        assert_eq!(tallies(), [hour - 30, hour]);
    }

    /// The row a transition hands its actions is the row a fresh read returns, for every
    /// shape of patch (a field it leaves out keeps its stored value).
    #[test]
    fn the_row_handed_to_actions_is_the_row_persisted() {
        let store = Store::open_in_memory().expect("store");
        let timing = Timing::default();
        let mut row = CallRow {
            call: started(Role::Caller),
            program: Some("{\"payload\":1}".into()),
            box_url: Some("http://127.0.0.1:1".into()),
            verified: None,
            sources: vec!["songs".into()],
            receipt: None,
        };
        store.write(|tx| insert(tx, &row)).expect("insert");
        let patches = [
            Patch::default(),
            Patch {
                box_url: Some("http://127.0.0.1:2".into()),
                ..Patch::default()
            },
            Patch {
                verified: Some(serde_json::json!({"runId": "r"})),
                ..Patch::default()
            },
            Patch {
                program: Some("{\"payload\":2}".into()),
                receipt: Some(serde_json::json!({"ran": true})),
                ..Patch::default()
            },
        ];
        for (i, patch) in patches.iter().enumerate() {
            let next = machine::step(&row.call, Event::Tick, 2_000 + i as u64, &timing).call;
            store.write(|tx| update(tx, &next, patch)).expect("update");
            row = row.updated(next, patch);
            let read = load(&store, "c1", Role::Caller)
                .expect("load")
                .expect("row");
            assert!(same(&row, &read), "patch {i}: {row:?} != {read:?}");
        }
        assert_eq!(row.box_url.as_deref(), Some("http://127.0.0.1:2"));
        assert!(row.verified.is_some() && row.receipt.is_some());
    }
}
