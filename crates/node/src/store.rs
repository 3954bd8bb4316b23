//! The node's SQLite store: one file, WAL, versioned migrations embedded in the binary.
//!
//! **Writes are group-committed.** One connection is the single writer. Every change goes through
//! [`Store::write`], which runs the closure in a savepoint of the open *batch* transaction, so a
//! multi-row change (a skill's declaration and its body source) lands whole or not at all, and a
//! closure that fails rolls back only its own rows. Writers that arrive while a batch commits
//! (its fsync) queue for the writer and form the next batch; the last writer of a batch (no one
//! else queued, or the batch full) commits it, and every member returns only after that commit
//! is on disk — a change is acknowledged only once it is durable, and N concurrent transitions
//! cost one fsync instead of N.
//!
//! **Owned writes** ([`Store::write_owned`], for async tasks: the call driver's steps and the
//! ledger's appends) join the same batches without a blocking thread each: they queue, and one
//! drainer thread (its own, started when writes come and ended when none came for a moment)
//! runs every queued write as a member of one batch, commits, then answers each. Under load the
//! drainer stays on its thread, so a step costs no thread hand-over and no turn in the writer
//! lock's queue of its own.
//!
//! **Reads** run on a small pool of WAL reader connections (`query_only`), so they never wait for
//! the writer and see only committed batches. An in-memory store (unit tests) has no readers and
//! no batching: each write is its own transaction on the one connection, as reads are.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::error::{NodeError, Result};

/// Writers in one batch at most (bounds a batch's size under constant load).
const MAX_BATCH: usize = 256;
/// WAL reader connections of a file store.
const READERS: usize = 4;

/// Statements each connection keeps prepared (rusqlite's default is 16; a node runs ~40
/// distinct ones on its hot paths).
const STATEMENT_CACHE: usize = 128;

/// The connection a write closure runs on: inside the batch transaction, in a savepoint of its
/// own. (Functions that take a `Tx` say by their type that they must run inside a write.)
pub struct Tx<'a>(&'a Connection, &'a AtCommit);

/// Work a write leaves for the end of its transaction (see [`Tx::at_commit`]), by name.
#[derive(Default)]
struct AtCommit(std::cell::RefCell<Vec<(&'static str, CommitWork)>>);

type CommitWork = Box<dyn FnOnce(&Tx<'_>) -> Result<()> + Send>;

impl AtCommit {
    /// Keep `work` under `name`, in place of any work kept under that name before.
    fn keep(&self, name: &'static str, work: CommitWork) {
        let mut kept = self.0.borrow_mut();
        kept.retain(|(n, _)| *n != name);
        kept.push((name, work));
    }

    /// Take `other`'s work into this (a member's, once its savepoint is released).
    fn absorb(&self, other: AtCommit) {
        for (name, work) in other.0.into_inner() {
            self.keep(name, work);
        }
    }

    fn clear(&self) {
        self.0.borrow_mut().clear();
    }

    /// Run the kept work inside the transaction, just before it commits: the first failure
    /// fails the commit (the caller rolls the whole transaction back).
    fn run(&self, conn: &Connection) -> Result<()> {
        let work = std::mem::take(&mut *self.0.borrow_mut());
        let none = AtCommit::default();
        for (_, w) in work {
            w(&Tx(conn, &none))?;
        }
        Ok(())
    }
}

impl Tx<'_> {
    /// Leave `work` for the end of this write's transaction: it runs once, after every member
    /// of the batch, just before the commit, and fails the commit if it fails. Work kept under
    /// one name by several writes of a batch runs once, the last write's (issue 33: the
    /// ledger's head is signed once per commit, not once per entry). Work left by a write that
    /// fails goes with its rows.
    pub fn at_commit(
        &self,
        name: &'static str,
        work: impl FnOnce(&Tx<'_>) -> Result<()> + Send + 'static,
    ) {
        self.1.keep(name, Box::new(work));
    }
}

/// The connection a read closure runs on: a WAL reader (or, in memory, the one connection).
pub struct Rx<'a>(&'a Connection);

/// `execute`, `query_row` and `prepare` on a store connection go through the connection's
/// statement cache: SQLite parses and plans each statement once per connection instead of on
/// every call (issue 33: parsing was ~10 % of a node's CPU per call). Same signatures as
/// rusqlite's, so the code that runs on a `Tx` or an `Rx` reads as plain rusqlite.
macro_rules! cached_statements {
    ($t:ident) => {
        impl std::ops::Deref for $t<'_> {
            type Target = Connection;
            fn deref(&self) -> &Connection {
                self.0
            }
        }

        impl<'a> $t<'a> {
            pub fn execute<P: rusqlite::Params>(
                &self,
                sql: &str,
                params: P,
            ) -> rusqlite::Result<usize> {
                self.0.prepare_cached(sql)?.execute(params)
            }

            pub fn query_row<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
            where
                P: rusqlite::Params,
                F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
            {
                self.0.prepare_cached(sql)?.query_row(params, f)
            }

            pub fn prepare(&self, sql: &str) -> rusqlite::Result<rusqlite::CachedStatement<'a>> {
                self.0.prepare_cached(sql)
            }
        }
    };
}
cached_statements!(Tx);
cached_statements!(Rx);

/// Run one statement that returns no rows (transaction control) from the statement cache.
fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Run `f` as a member of the open transaction, in its own savepoint (by cached statements:
/// rusqlite's `savepoint()` parses its SAVEPOINT and RELEASE anew each time). A member that
/// fails or panics takes back its own rows: ROLLBACK TO then RELEASE, as rusqlite's savepoint
/// does on drop.
fn as_member<T>(
    conn: &Connection,
    batch: &AtCommit,
    f: impl FnOnce(&Tx<'_>) -> Result<T>,
) -> Answer<T> {
    let out = catch_unwind(AssertUnwindSafe(|| -> Result<T> {
        run(conn, "SAVEPOINT member")?;
        let mine = AtCommit::default();
        let v = f(&Tx(conn, &mine))?;
        run(conn, "RELEASE member")?;
        batch.absorb(mine);
        Ok(v)
    }));
    if !matches!(out, Ok(Ok(_))) && !conn.is_autocommit() {
        let _ = run(conn, "ROLLBACK TO member").and_then(|()| run(conn, "RELEASE member"));
    }
    out
}

/// Migrations in order; migration `i` moves the store to `user_version = i + 1`. Append only:
/// a shipped migration is never edited (calls, approvals and the board get their own later).
const MIGRATIONS: &[&str] = &[
    // 1: meta, sources, skills.
    r#"
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value BLOB NOT NULL
    ) STRICT;
    CREATE TABLE sources (
        name       TEXT PRIMARY KEY,
        kind       TEXT NOT NULL CHECK (kind IN ('text', 'secret', 'file')),
        size       INTEGER NOT NULL CHECK (size >= 0),
        digest     TEXT NOT NULL,
        nonce      BLOB NOT NULL,
        ciphertext BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE skills (
        name        TEXT PRIMARY KEY,
        agent_id    TEXT NOT NULL UNIQUE,
        declaration TEXT NOT NULL,
        manifest    TEXT NOT NULL,
        digest      TEXT NOT NULL,
        warnings    TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL
    ) STRICT;
    "#,
    // 2: calls (one row per call and side) and the policy set through the API.
    r#"
    CREATE TABLE calls (
        id         TEXT NOT NULL,
        role       TEXT NOT NULL CHECK (role IN ('caller', 'owner')),
        peer       TEXT NOT NULL,
        skill      TEXT NOT NULL,
        state      TEXT NOT NULL,
        record     TEXT NOT NULL,
        program    TEXT,
        box_url    TEXT,
        verified   TEXT,
        sources    TEXT NOT NULL DEFAULT '[]',
        receipt    TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (id, role)
    ) STRICT;
    CREATE INDEX calls_by_state ON calls (state);
    CREATE INDEX calls_by_created ON calls (created_at);
    "#,
    // 3: agents: roster and org chart
    r#"
    CREATE TABLE pack_agents (
        agent_id     TEXT PRIMARY KEY,
        role         TEXT CHECK (role IS NULL OR role <> 'skill'),
        manifest     TEXT NOT NULL,
        pack_name    TEXT NOT NULL,
        pack_version TEXT NOT NULL,
        created_at   INTEGER NOT NULL,
        updated_at   INTEGER NOT NULL
    ) STRICT;
    -- Owner keys: workspace_id '' stands for "no workspace" (a real one has at least 1 char).
    -- A rosterId is unique per owner, so two tenants never collide (nor learn of each other).
    CREATE TABLE roster (
        tenant_id    TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        roster_id    TEXT NOT NULL,
        agent_id     TEXT NOT NULL,
        entry        TEXT NOT NULL,
        created_at   INTEGER NOT NULL,
        updated_at   INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, workspace_id, roster_id)
    ) STRICT;
    CREATE INDEX roster_by_agent ON roster (agent_id);
    CREATE TABLE org_charts (
        tenant_id    TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        chart        TEXT NOT NULL,
        updated_at   INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, workspace_id)
    ) STRICT;
    "#,
    // 4: hostile peers. A source is stakeable by a caller only when its human marked it
    // shareable; owner calls are counted per skill and peer for the daily ceilings (`charge`:
    // what a call costs against them).
    r#"
    ALTER TABLE sources ADD COLUMN shareable INTEGER NOT NULL DEFAULT 0 CHECK (shareable IN (0, 1));
    ALTER TABLE calls ADD COLUMN charge INTEGER NOT NULL DEFAULT 1;
    CREATE INDEX calls_by_skill ON calls (role, skill, created_at);
    CREATE INDEX calls_by_updated ON calls (updated_at);
    "#,
    // 5: the disclosure ledger (see `ledger`): append only, never pruned with the calls.
    r#"
    CREATE TABLE ledger (
        seq     INTEGER PRIMARY KEY,
        at      INTEGER NOT NULL,
        call_id TEXT NOT NULL,
        role    TEXT NOT NULL,
        peer    TEXT NOT NULL,
        kind    TEXT NOT NULL CHECK (kind IN ('decision', 'stake')),
        entry   TEXT NOT NULL,
        hash    TEXT NOT NULL,
        sig     TEXT NOT NULL
    ) STRICT;
    CREATE INDEX ledger_by_call ON ledger (call_id, role);
    CREATE INDEX ledger_by_peer ON ledger (peer);
    CREATE INDEX ledger_by_at ON ledger (at);
    CREATE TABLE ledger_sources (
        name TEXT NOT NULL,
        seq  INTEGER NOT NULL,
        PRIMARY KEY (name, seq)
    ) STRICT;
    CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
        BEGIN SELECT RAISE(ABORT, 'the disclosure ledger is append-only'); END;
    CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
        BEGIN SELECT RAISE(ABORT, 'the disclosure ledger is append-only'); END;
    "#,
    // 6: trust on first use of an unpinned (loopback) box survives a restart: the platform and
    // evidence key each accepted box URL first showed (see `calls::boxes`). Never updated: a
    // box that shows another is refused until its human removes the row or pins it.
    r#"
    CREATE TABLE box_identities (
        url        TEXT PRIMARY KEY,
        platform   TEXT NOT NULL,
        key        TEXT,
        first_seen INTEGER NOT NULL
    ) STRICT;
    "#,
    // 7: the disclosure ledger writes a stake ahead of its bytes and then the box's answer to
    // it, and begins with a genesis entry (see `ledger`): the kind check widened (the table
    // rebuilt, its rows kept as they are), the per-source index append-only like the table,
    // and the genesis due — `ledger::open` writes it (into an empty ledger) once.
    r#"
    CREATE TABLE ledger_v7 (
        seq     INTEGER PRIMARY KEY,
        at      INTEGER NOT NULL,
        call_id TEXT NOT NULL,
        role    TEXT NOT NULL,
        peer    TEXT NOT NULL,
        kind    TEXT NOT NULL
            CHECK (kind IN ('genesis', 'decision', 'stake', 'stake_taken', 'stake_refused')),
        entry   TEXT NOT NULL,
        hash    TEXT NOT NULL,
        sig     TEXT NOT NULL
    ) STRICT;
    INSERT INTO ledger_v7 (seq, at, call_id, role, peer, kind, entry, hash, sig)
        SELECT seq, at, call_id, role, peer, kind, entry, hash, sig FROM ledger ORDER BY seq;
    DROP TABLE ledger;
    ALTER TABLE ledger_v7 RENAME TO ledger;
    CREATE INDEX ledger_by_call ON ledger (call_id, role);
    CREATE INDEX ledger_by_peer ON ledger (peer);
    CREATE INDEX ledger_by_at ON ledger (at);
    CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
        BEGIN SELECT RAISE(ABORT, 'the disclosure ledger is append-only'); END;
    CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
        BEGIN SELECT RAISE(ABORT, 'the disclosure ledger is append-only'); END;
    CREATE TRIGGER ledger_sources_no_update BEFORE UPDATE ON ledger_sources
        BEGIN SELECT RAISE(ABORT, 'the disclosure ledger is append-only'); END;
    CREATE TRIGGER ledger_sources_no_delete BEFORE DELETE ON ledger_sources
        BEGIN SELECT RAISE(ABORT, 'the disclosure ledger is append-only'); END;
    CREATE TABLE ledger_genesis_due (due INTEGER NOT NULL) STRICT;
    INSERT INTO ledger_genesis_due (due) VALUES (1);
    "#,
    // 8: admission counts a peer's admitted calls that have not reached their run
    // (`records::unstarted_of`) inside the write transaction of every request: by peer, not
    // by a scan of every call kept (100k rows: 24 ms a request, 0.1 ms with the index).
    r#"
    CREATE INDEX calls_by_peer ON calls (peer, role);
    "#,
    // 9: coverage across calls (issue 32 item 4): per peer, skill and UTC day, the union of what
    // the answers the box released carried of the body (`skillbox_guard::Coverage` bytes, from
    // the notes sealed to this owner); `calls::coverage` refuses a peer past the owner's
    // thresholds. Rows of past days are dropped as new ones are written.
    r#"
    CREATE TABLE guard_coverage (
        peer       TEXT NOT NULL,
        skill      TEXT NOT NULL,
        day        INTEGER NOT NULL,
        coverage   BLOB NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (peer, skill, day)
    ) STRICT;
    "#,
    // 10: the owner's coverage turns (`calls::coverage`): which call of a (peer, skill) holds
    // the turn to submit, kept across a restart (a call submitted before it still runs at the
    // box, and its answer is counted after it); `token` tells one take from the next.
    r#"
    CREATE TABLE guard_turns (
        peer     TEXT NOT NULL,
        skill    TEXT NOT NULL,
        call_id  TEXT NOT NULL,
        token    INTEGER NOT NULL,
        taken_at INTEGER NOT NULL,
        PRIMARY KEY (peer, skill)
    ) STRICT;
    "#,
    // 11: the owner's two counts in the write transaction of every call (issue 33:
    // `records::charged_since` at admission and at the run's charge, `records::unstarted_of` at
    // admission) read only an index: by `calls_by_skill` and `calls_by_peer` they read every
    // call row of the skill's last 24 h, and of the peer ever kept, to see its charge and state
    // — ~3 KiB a row, thousands of rows per call under load, under the writer's lock.
    r#"
    CREATE INDEX calls_charged ON calls (role, skill, created_at, peer, charge) WHERE charge > 0;
    CREATE INDEX calls_unstarted ON calls (peer, role, charge, state)
        WHERE charge = 0 AND state NOT IN ('answered', 'ran', 'failed');
    "#,
    // 12: a call's start reads the sources its stake may carry (`Sources::shareable`): by this
    // index, not by a scan of every source — a caller holds two of its own per call in flight
    // (`call/<id>/request`, `…/result-key`), so a scan made each start O(calls in flight)
    // (issue 33: 3 % of the caller's CPU at 2,000 in flight, more at 5,000).
    r#"
    CREATE INDEX sources_shareable ON sources (name) WHERE shareable = 1;
    "#,
    // 13: the owner's charged calls of a skill, tallied per (skill, hour made, peer), kept by
    // triggers on every insert, change of charge and delete of an owner's row — so the day's
    // count (`records::charged_since`, at admission and at each run's charge) sums at most 25
    // hours' tallies and scans the index only for the one hour the window cuts, not every
    // charged call of the day (issue 33: O(calls of the day) per call; 4.5 % of the owner's CPU
    // at 2,000 in flight, growing with the day's calls).
    r#"
    CREATE TABLE charge_tally (
        skill  TEXT NOT NULL,
        hour   INTEGER NOT NULL,
        peer   TEXT NOT NULL,
        charge INTEGER NOT NULL,
        PRIMARY KEY (skill, hour, peer)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO charge_tally (skill, hour, peer, charge)
        SELECT skill, created_at / 3600, peer, SUM(charge) FROM calls
        WHERE role = 'owner' AND charge > 0 GROUP BY skill, created_at / 3600, peer;
    CREATE TRIGGER charge_tally_insert AFTER INSERT ON calls
        WHEN NEW.role = 'owner' AND NEW.charge != 0 BEGIN
        INSERT OR IGNORE INTO charge_tally (skill, hour, peer, charge)
            VALUES (NEW.skill, NEW.created_at / 3600, NEW.peer, 0);
        UPDATE charge_tally SET charge = charge + NEW.charge
            WHERE skill = NEW.skill AND hour = NEW.created_at / 3600 AND peer = NEW.peer;
    END;
    CREATE TRIGGER charge_tally_charge AFTER UPDATE OF charge ON calls
        WHEN NEW.role = 'owner' AND NEW.charge != OLD.charge BEGIN
        INSERT OR IGNORE INTO charge_tally (skill, hour, peer, charge)
            VALUES (NEW.skill, NEW.created_at / 3600, NEW.peer, 0);
        UPDATE charge_tally SET charge = charge + NEW.charge - OLD.charge
            WHERE skill = NEW.skill AND hour = NEW.created_at / 3600 AND peer = NEW.peer;
    END;
    CREATE TRIGGER charge_tally_delete AFTER DELETE ON calls
        WHEN OLD.role = 'owner' AND OLD.charge != 0 BEGIN
        UPDATE charge_tally SET charge = charge - OLD.charge
            WHERE skill = OLD.skill AND hour = OLD.created_at / 3600 AND peer = OLD.peer;
    END;
    "#,
    // 14: a peer's admitted calls that have not reached their run (`records::unstarted_of`, at
    // admission), tallied per peer by triggers on every insert, change and delete of an owner's
    // row — a read of one row, not a count over the partial index, which held every such call
    // of the peer (issue 33: thousands of entries per admission under load, ~2 % of the owner's
    // CPU at 2,000 in flight, growing with the calls in flight). The index, read by nothing
    // else, goes: one index less to keep at every step.
    r#"
    CREATE TABLE unstarted_tally (
        peer TEXT PRIMARY KEY,
        n    INTEGER NOT NULL CHECK (n > 0)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO unstarted_tally (peer, n)
        SELECT peer, count(*) FROM calls
        WHERE role = 'owner' AND charge = 0 AND state NOT IN ('answered', 'ran', 'failed')
        GROUP BY peer;
    DROP INDEX calls_unstarted;
    CREATE TRIGGER unstarted_tally_insert AFTER INSERT ON calls
        WHEN NEW.role = 'owner' AND NEW.charge = 0
            AND NEW.state NOT IN ('answered', 'ran', 'failed') BEGIN
        INSERT INTO unstarted_tally (peer, n) VALUES (NEW.peer, 1)
            ON CONFLICT (peer) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER unstarted_tally_update AFTER UPDATE OF role, peer, charge, state ON calls
        WHEN (OLD.role = 'owner' AND OLD.charge = 0
                AND OLD.state NOT IN ('answered', 'ran', 'failed'))
            IS NOT (NEW.role = 'owner' AND NEW.charge = 0
                AND NEW.state NOT IN ('answered', 'ran', 'failed'))
            OR (OLD.peer IS NOT NEW.peer AND OLD.role = 'owner' AND OLD.charge = 0
                AND OLD.state NOT IN ('answered', 'ran', 'failed')) BEGIN
        DELETE FROM unstarted_tally
            WHERE peer = OLD.peer AND OLD.role = 'owner' AND OLD.charge = 0
                AND OLD.state NOT IN ('answered', 'ran', 'failed') AND n = 1;
        UPDATE unstarted_tally SET n = n - 1
            WHERE peer = OLD.peer AND OLD.role = 'owner' AND OLD.charge = 0
                AND OLD.state NOT IN ('answered', 'ran', 'failed') AND n > 1;
        INSERT INTO unstarted_tally (peer, n)
            SELECT NEW.peer, 1 WHERE NEW.role = 'owner' AND NEW.charge = 0
                AND NEW.state NOT IN ('answered', 'ran', 'failed')
            ON CONFLICT (peer) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER unstarted_tally_delete AFTER DELETE ON calls
        WHEN OLD.role = 'owner' AND OLD.charge = 0
            AND OLD.state NOT IN ('answered', 'ran', 'failed') BEGIN
        DELETE FROM unstarted_tally WHERE peer = OLD.peer AND n = 1;
        UPDATE unstarted_tally SET n = n - 1 WHERE peer = OLD.peer AND n > 1;
    END;
    "#,
    // 15: coverage across calls counts amounts, not positions (`calls::coverage`): the box's
    // note tells how much of the body an answer carried (levels: which body words it covered
    // could spell out the caller's sources), and the owner keeps per (peer, skill, UTC day) the
    // sums of those levels, in 64ths of the whole. `guard_counted` holds the runs counted that
    // day, so an outcome stepped twice counts once. The unions of positions cannot become sums:
    // they are dropped, and each (peer, skill) starts the day of the upgrade from nothing.
    r#"
    DROP TABLE guard_coverage;
    CREATE TABLE guard_coverage (
        peer       TEXT NOT NULL,
        skill      TEXT NOT NULL,
        day        INTEGER NOT NULL,
        words      INTEGER NOT NULL,
        canary     INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (peer, skill, day)
    ) STRICT;
    CREATE TABLE guard_counted (
        run_id TEXT PRIMARY KEY,
        day    INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;
    "#,
    // 16: the words side of coverage across calls is a union of regions, not a sum of shares
    // (`calls::coverage`): a sum counted a passage every answer repeats (a disclaimer the body
    // asks for) once per answer and refused an honest caller's 4th call of the day. The note
    // says which of 16 regions of the body an answer touched, and the owner ORs the masks. A
    // day's summed share `words` (64ths) becomes a mask of as many low regions as it rounds
    // up to (4/64 a region, at most all 16): a peer past the limit stays past it, and one
    // under it keeps what it spent. Later regions of those low ones count nothing new that
    // day, a day's looseness the upgrade costs once.
    r#"
    ALTER TABLE guard_coverage RENAME COLUMN words TO regions;
    UPDATE guard_coverage SET regions = (1 << min(16, (regions + 3) / 4)) - 1;
    "#,
    // 17: the box keeps the day's coverage tally (`skillbox_jc::day`) against the limits the
    // owner puts in its stake; the owner's notes carry no coverage any more (a region mask a
    // call read 16 bits of the caller's sources to a hostile owner's body). `guard_coverage`
    // now holds only the days the box refused a peer's run of a skill (`coverage_exceeded`),
    // which admission refuses at once. The masks and sums read before are dropped, not kept
    // for what they told; each (peer, skill) starts the day of the upgrade from nothing, as
    // does the box's tally.
    r#"
    DROP TABLE guard_counted;
    DROP TABLE guard_coverage;
    CREATE TABLE guard_coverage (
        peer       TEXT NOT NULL,
        skill      TEXT NOT NULL,
        day        INTEGER NOT NULL,
        refused_at INTEGER NOT NULL,
        PRIMARY KEY (peer, skill, day)
    ) STRICT;
    "#,
    // 18: each box keeps its own day book, and a hardware box loses its book when it restarts
    // (review 22 F1, F2): a peer's day of a skill is pinned to the box instance its first run of
    // the day was submitted to (`calls::coverage::pin_box`), and each other instance its runs
    // go to that day is a move, at most `[guard] day_box_moves`. One row per instance a (peer,
    // skill, day) used (so at most 1 + day_box_moves); rows of past days go as a day's first is
    // written.
    r#"
    CREATE TABLE guard_box_days (
        peer      TEXT NOT NULL,
        skill     TEXT NOT NULL,
        day       INTEGER NOT NULL,
        instance  TEXT NOT NULL,
        pinned_at INTEGER NOT NULL,
        PRIMARY KEY (peer, skill, day, instance)
    ) STRICT;
    "#,
    // 19: the `skillbox_calls` gauge (`records::counts_by_state`, every `GET /metrics`) counts
    // the calls by (role, state) from an index that holds both (issue 33: no index held `role`,
    // so it read every call row kept — record, program envelope, facts, ~3.3 KiB each — at
    // every scrape, O(bytes of the calls kept)). `role` never changes, so the wider index costs a
    // step's write nothing more than the one it replaces; `WHERE state ...` still uses it.
    r#"
    DROP INDEX calls_by_state;
    CREATE INDEX calls_by_state_role ON calls (state, role);
    "#,
    // 20: which of a skill's ceilings the owner set (review 26 V3). A SKILL.md's `limits:` was
    // held to `[ceilings]` only at import, so a row stored before that (2^53-1 calls a day) or
    // one asking exactly today's ceilings kept them after the owner lowered `[ceilings]`. A
    // field the owner set (`skill set`, `PATCH /skills/{name}`) is kept here, as the owner set
    // it, and applies as it is; every other field is held to the `[ceilings]` of the day at each
    // call (`skills::in_force`). Rows stored before start with no field the owner's: from then,
    // a ceiling an owner raised past `[ceilings]` before this holds at `[ceilings]` until set
    // again — an owner cannot be told from a file, and the safe side is the node's ceilings.
    r#"
    ALTER TABLE skills ADD COLUMN owner_limits TEXT NOT NULL DEFAULT '{}';
    "#,
    // 21: the owner's body allowance and remote model context for a skill, in tokens
    // (`skill set NAME bodyMaxTokens=N modelContextTokens=N`), carried in the advert so the
    // caller's program names them and checked by the owner against these. NULL: the provider's
    // default (`skillbox_jc::program::default_body_max_tokens` / `default_model_context_tokens`),
    // which is what every row stored before means.
    r#"
    ALTER TABLE skills ADD COLUMN body_max_tokens INTEGER;
    ALTER TABLE skills ADD COLUMN model_context_tokens INTEGER;
    "#,
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub struct Store {
    /// The database file (none in memory): the ledger keeps its outside head beside it.
    path: Option<std::path::PathBuf>,
    writer: Mutex<Writer>,
    /// Which batches ended, apart from the writer's lock: members wait on it without holding
    /// up the writers of the next batch.
    ended: Mutex<Ended>,
    /// Signalled when a batch ends (committed or failed).
    batch_done: Condvar,
    /// Writers between "wants the writer" and "has it": the last writer of a batch commits only
    /// when this is zero, so a queued writer always finds its batch still open or commits it.
    queued: AtomicUsize,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    /// Writes acknowledged and transactions committed (group commit's effect: commits ≤ writes).
    writes: AtomicU64,
    commits: AtomicU64,
    /// The writes of [`Store::write_owned`] waiting for the drainer, and whether one runs.
    owned: Mutex<Owned>,
    /// Signalled when an owned write is queued while the drainer lingers for more.
    owned_queued: Condvar,
}

/// How long the drainer's thread waits for another owned write before it ends: under load it
/// never ends, and a quiet node holds no thread.
const DRAINER_LINGER: std::time::Duration = std::time::Duration::from_millis(200);

/// The queue of owned writes: one drainer at a time takes them, a batch at a time.
#[derive(Default)]
struct Owned {
    jobs: Vec<Box<dyn Job>>,
    draining: bool,
}

/// One write of [`Store::write_owned`]: run by the drainer inside a batch, answered when that
/// batch has ended.
trait Job: Send {
    /// Run as a member of the open transaction ([`as_member`]); `true` when it succeeded, so
    /// its rows stay and its answer waits for the commit.
    fn run(&mut self, conn: &Connection, at_commit: &AtCommit) -> bool;
    /// Send the answer: its value if it succeeded and its batch is on disk (`committed`), else
    /// its own error (or panic), or `CommitFailed`.
    fn answer(self: Box<Self>, committed: bool);
}

type Answer<T> = std::thread::Result<Result<T>>;

struct OwnedWrite<T, F> {
    f: Option<F>,
    out: Option<Answer<T>>,
    reply: tokio::sync::oneshot::Sender<Answer<T>>,
}

impl<T, F> Job for OwnedWrite<T, F>
where
    T: Send,
    F: FnOnce(&Tx<'_>) -> Result<T> + Send,
{
    fn run(&mut self, conn: &Connection, at_commit: &AtCommit) -> bool {
        let Some(f) = self.f.take() else {
            return false;
        };
        let out = as_member(conn, at_commit, f);
        let ok = matches!(out, Ok(Ok(_)));
        self.out = Some(out);
        ok
    }

    fn answer(self: Box<Self>, committed: bool) {
        let answer = match self.out {
            Some(Ok(Ok(_))) if !committed => Ok(Err(NodeError::CommitFailed)),
            Some(out) => out,
            None => Ok(Err(NodeError::CommitFailed)),
        };
        // The asker may have gone (its task cancelled): the write stands either way.
        let _ = self.reply.send(answer);
    }
}

/// How many writes the store acknowledged and in how many commits (fsyncs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteStats {
    pub writes: u64,
    pub commits: u64,
}

struct Writer {
    conn: Connection,
    /// Group commit on (file stores).
    batching: bool,
    /// The batch transaction is open.
    open: bool,
    /// The open (or last) batch's number and its member count.
    batch: u64,
    members: usize,
    /// What the open batch's members left for its commit.
    at_commit: AtCommit,
}

impl Writer {
    /// Join the open batch as a member, beginning one if none is open; its number.
    fn join(&mut self) -> Result<u64> {
        if !self.open {
            self.at_commit.clear();
            run(&self.conn, "BEGIN IMMEDIATE")?;
            self.open = true;
            self.batch += 1;
            self.members = 0;
        }
        self.members += 1;
        Ok(self.batch)
    }
}

#[derive(Default)]
struct Ended {
    /// The last batch that ended.
    last: u64,
    /// Batches whose commit failed (their members' changes are not on disk), most recent few.
    failed: BTreeSet<u64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store(..)")
    }
}

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // A panic while holding a lock cannot leave a savepoint open (`write` rolls it back) and the
    // batch is ended before the panic resumes, so the state is consistent: carry on with it.
    r.unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Store {
    /// Open (creating if needed) and migrate the store at `path`.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path)?;
        let mut store = Store::setup(conn, true)?;
        store.path = Some(path.to_owned());
        for _ in 0..READERS {
            let r = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            r.busy_timeout(std::time::Duration::from_secs(5))?;
            r.pragma_update(None, "query_only", "ON")?;
            r.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
            // As on the writer (see `setup`): cached statements are not planned again.
            r.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
            store.readers.push(Mutex::new(r));
        }
        Ok(store)
    }

    /// An in-memory store (unit tests).
    pub fn open_in_memory() -> Result<Store> {
        Store::setup(Connection::open_in_memory()?, false)
    }

    fn setup(mut conn: Connection, batching: bool) -> Result<Store> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // The query planner stability guarantee: a plan never depends on a bound value. Without
        // it the bundled SQLite (STAT4) lets the planner read a parameter's value and marks the
        // statement to be planned again whenever that parameter is bound anew, so a cached
        // statement was re-prepared inside every `sqlite3_step` (issue 33: `sqlite3Reprepare`
        // 7.7 % of the caller's CPU). The hot statements' plans do not need the values: the
        // partial indexes' queries name the index's terms as literals.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        // WAL: readers never block the writer; FULL: a committed call survives power loss too.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Freed pages are zeroed: a deleted row's (already encrypted) bytes do not linger.
        conn.pragma_update(None, "secure_delete", "ON")?;
        migrate(&mut conn)?;
        Ok(Store {
            path: None,
            writer: Mutex::new(Writer {
                conn,
                batching,
                open: false,
                batch: 0,
                members: 0,
                at_commit: AtCommit::default(),
            }),
            ended: Mutex::default(),
            batch_done: Condvar::new(),
            queued: AtomicUsize::new(0),
            readers: Vec::new(),
            next_reader: AtomicUsize::new(0),
            writes: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            owned: Mutex::default(),
            owned_queued: Condvar::new(),
        })
    }

    /// Run `f` as one atomic change: it lands whole (committed with its batch) when it returns
    /// `Ok` — and this returns only once it is on disk — and not at all otherwise.
    pub fn write<T>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        self.queued.fetch_add(1, Ordering::SeqCst);
        let mut w = relock(self.writer.lock());
        self.queued.fetch_sub(1, Ordering::SeqCst);
        if !w.batching {
            let tx = w
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let at_commit = AtCommit::default();
            let out = f(&Tx(&tx, &at_commit))?;
            at_commit.run(&tx)?;
            tx.commit()?;
            self.commits.fetch_add(1, Ordering::Relaxed);
            self.writes.fetch_add(1, Ordering::Relaxed);
            return Ok(out);
        }
        let batch = w.join()?;
        let out = as_member(&w.conn, &w.at_commit, f);
        // On some errors (SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM, an interrupt) SQLite rolls
        // the whole transaction back, not just the member's savepoint; a member may also have
        // ended it itself. The earlier members' rows are gone then, and the next member's
        // savepoint would run in autocommit, outside any batch (committed alone, yet told the
        // batch failed): the batch ends here, failed, and the next member begins a new one.
        let lost = w.conn.is_autocommit();
        if self.queued.load(Ordering::SeqCst) == 0 || w.members >= MAX_BATCH || out.is_err() || lost
        {
            let committed = self.end_batch(&mut w, lost);
            drop(w);
            return match out {
                Err(panic) => resume_unwind(panic),
                Ok(Err(e)) => Err(e),
                Ok(Ok(v)) => {
                    committed?;
                    self.writes.fetch_add(1, Ordering::Relaxed);
                    Ok(v)
                }
            };
        }
        let v = match out {
            Ok(Ok(v)) => v,
            // Its own rows are rolled back; the batch goes on without them.
            Ok(Err(e)) => return Err(e),
            Err(panic) => resume_unwind(panic),
        };
        drop(w);
        let mut ended = relock(self.ended.lock());
        while ended.last < batch {
            ended = relock(self.batch_done.wait(ended));
        }
        if ended.failed.contains(&batch) {
            return Err(NodeError::CommitFailed);
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(v)
    }

    /// End the open batch: commit it — or, `lost` (SQLite rolled it back under its members),
    /// record it failed — and wake its members waiting for it. Published before the writer lock
    /// is released, so batches end in order (lock order: writer, then ended; members take only
    /// ended).
    fn end_batch(&self, w: &mut Writer, lost: bool) -> Result<()> {
        let committed: Result<()> = if lost {
            w.at_commit.clear();
            Err(NodeError::CommitFailed)
        } else {
            w.at_commit
                .run(&w.conn)
                .and_then(|()| run(&w.conn, "COMMIT").map_err(NodeError::from))
        };
        if committed.is_err() {
            if !w.conn.is_autocommit() {
                let _ = run(&w.conn, "ROLLBACK");
            }
        } else {
            self.commits.fetch_add(1, Ordering::Relaxed);
        }
        w.open = false;
        let mut ended = relock(self.ended.lock());
        if committed.is_err() {
            // The batch is not on disk: no member may report success.
            ended.failed.insert(w.batch);
            while ended.failed.len() > 64 {
                ended.failed.pop_first();
            }
        }
        ended.last = w.batch;
        drop(ended);
        self.batch_done.notify_all();
        committed
    }

    /// [`Store::write`] for an async task, without a blocking thread per write: `f` is queued,
    /// and one drainer thread runs every queued write in a batch of its own
    /// (each in its savepoint, as a member of the group commit), commits, then answers each.
    /// Same promise: `Ok` only once the change is on disk, and a failing `f` takes back only
    /// its own rows. Under load a step costs no thread hand-over of its own: the drainer
    /// stays on its thread while writes keep coming (issue 33: the writer lock's convoy and the
    /// hop onto the blocking pool per write were ~15 % of a node's CPU).
    pub async fn write_owned<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx<'_>) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Box::new(OwnedWrite {
            f: Some(f),
            out: None,
            reply,
        });
        let start = {
            let mut q = relock(self.owned.lock());
            q.jobs.push(job);
            !std::mem::replace(&mut q.draining, true)
        };
        if start {
            // A thread of its own, not the blocking pool's: queued behind a backlog of
            // blocking tasks (a few thousand stakes being sealed), a drainer that had ended
            // and starts again held up every write for seconds (issue 33: p99 at 5,000 in
            // flight 30 -> 44 s).
            let store = self.clone();
            let spawned = std::thread::Builder::new()
                .name("store-writer".into())
                .spawn(move || store.drain());
            if spawned.is_err() {
                let store = self.clone();
                tokio::task::spawn_blocking(move || store.drain());
            }
        } else {
            self.owned_queued.notify_one();
        }
        match answer.await {
            Ok(Ok(out)) => out,
            Ok(Err(panic)) => resume_unwind(panic),
            // The drainer dropped the write unanswered: it did not land.
            Err(_) => Err(NodeError::CommitFailed),
        }
    }

    /// Run the queued owned writes until none is left.
    fn drain(&self) {
        // Should the drainer itself panic (a bug: its writes' own panics are caught), the next
        // owned write starts another instead of queueing behind none.
        struct Gone<'a>(&'a Store);
        impl Drop for Gone<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    relock(self.0.owned.lock()).draining = false;
                }
            }
        }
        let _gone = Gone(self);
        loop {
            let jobs: Vec<Box<dyn Job>> = {
                let mut q = relock(self.owned.lock());
                if q.jobs.is_empty() {
                    q = relock(self.owned_queued.wait_timeout(q, DRAINER_LINGER)).0;
                }
                if q.jobs.is_empty() {
                    q.draining = false;
                    return;
                }
                let n = q.jobs.len().min(MAX_BATCH);
                q.jobs.drain(..n).collect()
            };
            self.run_jobs(jobs);
        }
    }

    /// One batch of owned writes (joining a batch the blocking writers left open), committed
    /// at its end; each answered after.
    fn run_jobs(&self, jobs: Vec<Box<dyn Job>>) {
        self.queued.fetch_add(1, Ordering::SeqCst);
        let mut w = relock(self.writer.lock());
        self.queued.fetch_sub(1, Ordering::SeqCst);
        // Written and waiting for their batch's commit; answered after the writer is free.
        let mut waiting: Vec<Box<dyn Job>> = Vec::new();
        let mut answered: Vec<(Box<dyn Job>, bool)> = Vec::new();
        for mut job in jobs {
            if !w.batching {
                w.at_commit.clear();
                let ok = run(&w.conn, "BEGIN IMMEDIATE").is_ok() && job.run(&w.conn, &w.at_commit);
                let committed = if ok {
                    w.at_commit.run(&w.conn).is_ok() && run(&w.conn, "COMMIT").is_ok()
                } else {
                    false
                };
                if !committed && !w.conn.is_autocommit() {
                    let _ = run(&w.conn, "ROLLBACK");
                }
                if committed {
                    self.commits.fetch_add(1, Ordering::Relaxed);
                }
                answered.push((job, committed));
                continue;
            }
            if w.join().is_err() {
                answered.push((job, false));
                continue;
            }
            let ok = job.run(&w.conn, &w.at_commit);
            // As in `write`: a batch SQLite rolled back under its members ends here, failed;
            // the next write begins a new one.
            let lost = w.conn.is_autocommit();
            if ok {
                waiting.push(job);
            } else {
                answered.push((job, false));
            }
            if lost || w.members >= MAX_BATCH {
                let committed = self.end_batch(&mut w, lost).is_ok();
                answered.extend(waiting.drain(..).map(|j| (j, committed)));
            }
        }
        if w.open {
            let committed = self.end_batch(&mut w, false).is_ok();
            answered.extend(waiting.drain(..).map(|j| (j, committed)));
        }
        drop(w);
        for (job, committed) in answered {
            if committed {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            job.answer(committed);
        }
    }

    /// Writes acknowledged and commits made since the store was opened.
    pub fn write_stats(&self) -> WriteStats {
        WriteStats {
            writes: self.writes.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
        }
    }

    /// Run a read on a reader connection: it sees every acknowledged write.
    pub fn read<T>(&self, f: impl FnOnce(&Rx<'_>) -> Result<T>) -> Result<T> {
        if self.readers.is_empty() {
            let w = relock(self.writer.lock());
            return f(&Rx(&w.conn));
        }
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.readers.len() {
            if let Ok(r) = self.readers[(start + i) % self.readers.len()].try_lock() {
                return f(&Rx(&r));
            }
        }
        let r: MutexGuard<'_, Connection> = relock(self.readers[start % self.readers.len()].lock());
        f(&Rx(&r))
    }

    /// The database file, for a store opened from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The schema version of the open store.
    pub fn schema_version(&self) -> Result<i64> {
        self.read(|c| Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?))
    }
}

fn migrate(conn: &mut Connection) -> Result<()> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(NodeError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
        tracing::info!(version = i + 1, "store migrated");
    }
    Ok(())
}

/// Seconds since the Unix epoch (timestamps in rows).
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Unix ms as `YYYY-MM-DDTHH:MM:SSZ` (UTC), without a date crate.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_735_689_600_000), "2025-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_665_651_482_136), "2022-10-13T08:58:02Z");
        assert_eq!(rfc3339(253_402_300_799_000), "9999-12-31T23:59:59Z");
    }

    /// A store on a file in a fresh temp dir (a file store batches its writes; an in-memory one
    /// does not), with the dir that must outlive it.
    fn on_disk() -> (tempfile::TempDir, Store) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&tmp.path().join("node.db")).expect("open");
        (tmp, store)
    }

    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
    }

    /// One meta row, `key`.
    fn insert(c: &Connection, key: &str) -> Result<()> {
        c.execute("INSERT INTO meta (key, value) VALUES (?1, x'01')", [key])?;
        Ok(())
    }

    /// Two meta rows, `key` and `key-b`: a write that is whole only if both land.
    fn insert_pair(c: &Connection, key: &str) -> Result<()> {
        insert(c, key)?;
        c.execute(
            "INSERT INTO meta (key, value) VALUES (?1, x'02')",
            [format!("{key}-b")],
        )?;
        Ok(())
    }

    /// One meta row, `key`, in a write of its own.
    fn put(store: &Store, key: &str) -> Result<()> {
        store.write(|tx| insert(tx, key))
    }

    fn meta_keys(store: &Store) -> Vec<String> {
        store
            .read(|c| {
                let mut st = c.prepare("SELECT key FROM meta ORDER BY key")?;
                let keys = st
                    .query_map([], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(keys)
            })
            .expect("read")
    }

    /// Writers racing on a file store: every acknowledged write is there, a failing one is not
    /// (and does not take its batch peers with it), and the writes shared commits.
    #[test]
    fn concurrent_writes_are_group_committed_each_whole_or_not_at_all() {
        let (_tmp, store) = on_disk();
        let threads = 16;
        let per = 40;
        let barrier = std::sync::Barrier::new(threads);
        let acked = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..threads {
                let (store, barrier, acked) = (&store, &barrier, &acked);
                s.spawn(move || {
                    barrier.wait();
                    for i in 0..per {
                        let key = format!("k{t:02}-{i:03}");
                        // Every seventh write inserts two rows, then fails: neither may land.
                        let fails = (t * per + i) % 7 == 0;
                        let r = store.write(|tx| {
                            insert_pair(tx, &key)?;
                            if fails {
                                return Err(NodeError::CommitFailed);
                            }
                            Ok(())
                        });
                        assert_eq!(r.is_err(), fails, "{key}");
                        if r.is_ok() {
                            relock(acked.lock()).extend([key.clone(), format!("{key}-b")]);
                        }
                    }
                });
            }
        });
        let mut want = relock(acked.into_inner());
        want.sort();
        assert_eq!(meta_keys(&store), want);
        let stats = store.write_stats();
        assert_eq!(stats.writes as usize, want.len() / 2);
        assert!(
            stats.commits < stats.writes,
            "{} writes took {} commits",
            stats.writes,
            stats.commits
        );
    }

    /// Work left for the commit runs once per commit, after every member, under one name the
    /// last member's; a failing member's work goes with its rows.
    #[test]
    fn work_left_for_the_commit_runs_once_per_commit_after_its_members() {
        let (_tmp, store) = on_disk();
        let runs = Arc::new(AtomicUsize::new(0));
        let failed_work_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (threads, per) = (8, 30);
        let barrier = std::sync::Barrier::new(threads);
        let acked = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..threads {
                let (store, barrier, runs, failed_work_ran, acked) =
                    (&store, &barrier, &runs, &failed_work_ran, &acked);
                s.spawn(move || {
                    barrier.wait();
                    for i in 0..per {
                        let fails = (t * per + i) % 5 == 0;
                        let key = format!("k{t}-{i}");
                        let r = store.write(|tx| {
                            insert(tx, &key)?;
                            // Counts the rows as the commit will hold them.
                            let runs = runs.clone();
                            tx.at_commit("count", move |tx| {
                                runs.fetch_add(1, Ordering::SeqCst);
                                let n: i64 = tx.query_row(
                                    "SELECT count(*) FROM meta WHERE key LIKE 'k%'",
                                    [],
                                    |r| r.get(0),
                                )?;
                                tx.execute(
                                    "INSERT INTO meta (key, value) VALUES ('rows', ?1)
                                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                                    [n.to_string().into_bytes()],
                                )?;
                                Ok(())
                            });
                            if fails {
                                let flag = failed_work_ran.clone();
                                tx.at_commit("failed", move |_| {
                                    flag.store(true, Ordering::SeqCst);
                                    Ok(())
                                });
                                return Err(NodeError::CommitFailed);
                            }
                            Ok(())
                        });
                        assert_eq!(r.is_err(), fails);
                        if r.is_ok() {
                            acked.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        let acked = acked.load(Ordering::SeqCst);
        let rows: Vec<u8> = store
            .read(|c| {
                Ok(
                    c.query_row("SELECT value FROM meta WHERE key = 'rows'", [], |r| {
                        r.get(0)
                    })?,
                )
            })
            .expect("rows");
        assert_eq!(
            String::from_utf8_lossy(&rows),
            acked.to_string(),
            "the work ran after the last member"
        );
        assert!(!failed_work_ran.load(Ordering::SeqCst));
        let runs = runs.load(Ordering::SeqCst);
        let stats = store.write_stats();
        assert!(
            runs as u64 <= stats.commits,
            "{runs} runs, {} commits",
            stats.commits
        );
        assert!(
            runs < acked,
            "{runs} runs for {acked} writes: once per commit"
        );
    }

    /// Work left for the commit that fails fails the commit: nothing of the write lands, on
    /// either kind of write.
    #[test]
    fn failing_work_at_commit_fails_the_commit() {
        let (_tmp, store) = on_disk();
        let store = Arc::new(store);
        let r = store.write(|tx| {
            insert(tx, "blocking")?;
            tx.at_commit("refuse", |_| Err(NodeError::CommitFailed));
            Ok(())
        });
        assert!(r.is_err());
        let rt = current_thread();
        let owned = rt.block_on(store.write_owned(|tx| {
            insert(tx, "owned")?;
            tx.at_commit("refuse", |_| Err(NodeError::CommitFailed));
            Ok(())
        }));
        assert!(owned.is_err());
        assert!(meta_keys(&store).is_empty(), "{:?}", meta_keys(&store));
        // And the next write is whole.
        put(&store, "next").expect("next");
        assert_eq!(meta_keys(&store), ["next"]);
    }

    /// Issue 30 item 13: a member that makes SQLite roll back the whole batch transaction (here
    /// it issues `ROLLBACK` itself, as SQLITE_FULL or SQLITE_IOERR would) ends its batch: the
    /// members before it are told it failed, and the one after it runs in a batch of its own —
    /// before, its savepoint ran in autocommit, landed alone, and it was told it failed.
    #[test]
    fn a_batch_rolled_back_under_its_members_fails_whole_and_the_next_write_is_atomic() {
        let (_tmp, store) = on_disk();
        // Each member holds its batch open until the next one queues for the writer.
        let wait_for_next = |store: &Store| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while store.queued.load(Ordering::SeqCst) == 0 {
                assert!(std::time::Instant::now() < deadline, "no writer queued");
                std::thread::yield_now();
            }
        };
        let (inside_tx, inside) = std::sync::mpsc::channel::<()>();
        let (first, rolling, after) = std::thread::scope(|s| {
            let (store, wait_for_next) = (&store, &wait_for_next);
            // A member that writes `key`, says it is inside its batch, holds the batch open
            // until the next writer queues, and rolls the whole transaction back if `roll_back`.
            let member = |key: &'static str, roll_back: bool| {
                let inside_tx = inside_tx.clone();
                move || {
                    store.write(|tx| {
                        insert(tx, key)?;
                        let _ = inside_tx.send(());
                        wait_for_next(store);
                        if roll_back {
                            tx.execute_batch("ROLLBACK")?;
                        }
                        Ok(())
                    })
                }
            };
            let first = s.spawn(member("first", false));
            inside.recv().expect("first inside");
            let rolling = s.spawn(member("rolling", true));
            inside.recv().expect("rolling inside");
            let after = s.spawn(move || {
                store.write(|tx| {
                    insert(tx, "after-a")?;
                    insert(tx, "after-b")
                })
            });
            (
                first.join().expect("first"),
                rolling.join().expect("rolling"),
                after.join().expect("after"),
            )
        });
        assert!(matches!(first, Err(NodeError::CommitFailed)), "{first:?}");
        assert!(rolling.is_err());
        assert!(after.is_ok(), "{after:?}");
        // What each writer was told is what is on disk.
        assert_eq!(meta_keys(&store), ["after-a", "after-b"]);
        // And the store goes on batching.
        store.write(|tx| insert(tx, "later")).expect("later");
        assert_eq!(meta_keys(&store), ["after-a", "after-b", "later"]);
    }

    /// Owned writes from many tasks, racing blocking writers on the same file store: each lands
    /// whole or not at all (a failing one, and one that panics, take back only their own rows,
    /// and the panic reaches the task that asked), every acknowledged write is there, and the
    /// owned writes share commits with each other and with the blocking ones.
    #[test]
    fn owned_writes_are_group_committed_each_whole_or_not_at_all() {
        let (_tmp, store) = on_disk();
        let store = Arc::new(store);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("runtime");
        let mut want: Vec<String> = Vec::new();
        let (tasks, blocking) = std::thread::scope(|s| {
            // Blocking writers beside the owned ones, in the same batches.
            let blocking = s.spawn(|| {
                let mut acked = Vec::new();
                for i in 0..100 {
                    let k = format!("sync-{i:03}");
                    if store.write(|tx| insert_pair(tx, &k)).is_ok() {
                        acked.extend([k.clone(), format!("{k}-b")]);
                    }
                }
                acked
            });
            let tasks: Vec<(String, std::thread::Result<Result<()>>)> = rt.block_on(async {
                let mut handles = Vec::new();
                for i in 0..400usize {
                    let store = store.clone();
                    let k = format!("own-{i:03}");
                    handles.push((
                        k.clone(),
                        tokio::spawn(async move {
                            store
                                .write_owned(move |tx| {
                                    insert_pair(tx, &k)?;
                                    match i % 13 {
                                        0 => Err(NodeError::CommitFailed),
                                        5 => panic!("a bug in an owned write"),
                                        _ => Ok(()),
                                    }
                                })
                                .await
                        }),
                    ));
                }
                let mut out = Vec::new();
                for (k, h) in handles {
                    out.push((
                        k,
                        h.await
                            .map_err(|e| Box::new(e) as Box<dyn std::any::Any + Send>),
                    ));
                }
                out
            });
            (tasks, blocking.join().expect("blocking writer"))
        });
        let mut owned_acked = 0;
        for (i, (k, r)) in tasks.iter().enumerate() {
            match i % 13 {
                0 => assert!(matches!(r, Ok(Err(NodeError::CommitFailed))), "{k}: {r:?}"),
                5 => assert!(r.is_err(), "{k}: the panic did not reach its task"),
                _ => {
                    assert!(matches!(r, Ok(Ok(()))), "{k}: {r:?}");
                    want.extend([k.clone(), format!("{k}-b")]);
                    owned_acked += 1;
                }
            }
        }
        assert_eq!(blocking.len(), 200, "every blocking write acknowledged");
        want.extend(blocking);
        want.sort();
        assert_eq!(meta_keys(&store), want);
        let stats = store.write_stats();
        assert_eq!(stats.writes as usize, owned_acked + 100);
        assert!(
            stats.commits * 2 < stats.writes,
            "{} writes took {} commits",
            stats.writes,
            stats.commits
        );
    }

    /// An in-memory store (no batching) runs each owned write as its own transaction, with the
    /// same answers.
    #[test]
    fn owned_writes_on_an_in_memory_store_are_each_atomic() {
        let store = Arc::new(Store::open_in_memory().expect("open"));
        let rt = current_thread();
        rt.block_on(async {
            let ok = store
                .write_owned(|tx| {
                    insert(tx, "kept")?;
                    Ok(7)
                })
                .await;
            assert!(matches!(ok, Ok(7)), "{ok:?}");
            let failed: Result<()> = store
                .write_owned(|tx| {
                    insert(tx, "gone")?;
                    Err(NodeError::CommitFailed)
                })
                .await;
            assert!(failed.is_err());
        });
        assert_eq!(meta_keys(&store), ["kept"]);
    }

    /// A write that panics rolls back its own rows and leaves the store usable.
    #[test]
    fn a_panicking_write_leaves_nothing_and_the_store_goes_on() {
        let (_tmp, store) = on_disk();
        let panicked = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let _: Result<()> = store.write(|tx| {
                insert(tx, "gone")?;
                panic!("a bug in a write");
            });
        }));
        assert!(panicked.is_err());
        put(&store, "kept").expect("write after the panic");
        assert_eq!(meta_keys(&store), ["kept"]);
    }

    /// Readers are read-only: a write through `read` is refused, not silently outside a batch.
    #[test]
    fn reads_cannot_write() {
        let (_tmp, store) = on_disk();
        let r = store.read(|c| {
            insert(c, "x")?;
            Ok(())
        });
        assert!(r.is_err());
        assert!(meta_keys(&store).is_empty());
    }

    #[test]
    fn migrates_once_and_reopens() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("node.db");
        let store = Store::open(&path).expect("open");
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
        put(&store, "k").expect("write");
        drop(store);
        let store = Store::open(&path).expect("reopen");
        let n: i64 = store
            .read(|c| Ok(c.query_row("SELECT count(*) FROM meta", [], |r| r.get(0))?))
            .expect("read");
        assert_eq!(n, 1);
    }

    #[test]
    fn failed_write_rolls_back_every_row() {
        let store = Store::open_in_memory().expect("open");
        let err = store.write(|tx| {
            insert(tx, "a")?;
            Err::<(), _>(NodeError::invalid("x", "boom"))
        });
        assert!(err.is_err());
        let n: i64 = store
            .read(|c| Ok(c.query_row("SELECT count(*) FROM meta", [], |r| r.get(0))?))
            .expect("read");
        assert_eq!(n, 0);
    }

    /// Migration 13 tallies the charged calls a store already holds: the day's count after it
    /// is what the rows say, and the triggers keep it from there.
    /// A store file at `path` taken through the first `n` migrations only (an older binary's).
    fn migrated_to(path: &std::path::Path, n: usize) -> Connection {
        let mut c = Connection::open(path).expect("open");
        for (i, sql) in MIGRATIONS.iter().enumerate().take(n) {
            let tx = c.transaction().expect("tx");
            tx.execute_batch(sql).expect("migration");
            tx.pragma_update(None, "user_version", (i + 1) as i64)
                .expect("version");
            tx.commit().expect("commit");
        }
        c
    }

    /// Migration 16 turns a day's summed words share (64ths) into a mask of as many regions
    /// as it rounds up to: a peer past the words limit stays past it, one under it keeps what
    /// it spent, and the secret sums are kept.
    #[test]
    fn summed_words_become_as_many_regions() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("node.db");
        let mut c = migrated_to(&path, 15);
        for (peer, words, canary) in [("p0", 0, 0), ("p1", 11, 3), ("p2", 33, 32), ("p3", 90, 0)] {
            c.execute(
                "INSERT INTO guard_coverage (peer, skill, day, words, canary, updated_at)
                 VALUES (?1, 's', 1, ?2, ?3, 1)",
                rusqlite::params![peer, words, canary],
            )
            .expect("row");
        }
        // Migration 16 alone: 17 drops the table's sums altogether.
        let tx = c.transaction().expect("tx");
        tx.execute_batch(MIGRATIONS[15]).expect("migration 16");
        tx.commit().expect("commit");
        let row = |peer: &str| {
            c.query_row(
                "SELECT regions, canary FROM guard_coverage WHERE peer = ?1",
                [peer],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )
            .expect("row")
        };
        assert_eq!(row("p0"), (0, 0));
        assert_eq!(row("p1"), (0b111, 3), "11/64 rounds up to 3 regions");
        assert_eq!(
            row("p2"),
            (0x1ff, 32),
            "33/64 to 9 regions, past 350 per mille"
        );
        assert_eq!(row("p3"), (0xffff, 0), "at most all 16");
    }

    /// Migration 17 keeps nothing of what the notes told (region masks, secret sums, counted
    /// runs): the table holds the box's refusals only, from nothing.
    #[test]
    fn the_masks_read_from_notes_are_dropped() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("node.db");
        {
            let c = migrated_to(&path, 16);
            c.execute(
                "INSERT INTO guard_coverage (peer, skill, day, regions, canary, updated_at)
                 VALUES ('p', 's', 1, 43690, 12, 1)",
                [],
            )
            .expect("row");
            c.execute(
                "INSERT INTO guard_counted (run_id, day) VALUES ('r', 1)",
                [],
            )
            .expect("counted");
        }
        let store = Store::open(&path).expect("migrated");
        let (rows, columns, counted) = store
            .read(|c| {
                let rows: i64 =
                    c.query_row("SELECT count(*) FROM guard_coverage", [], |r| r.get(0))?;
                let columns: Vec<String> = c
                    .prepare("SELECT name FROM pragma_table_info('guard_coverage')")?
                    .query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                let counted: i64 = c.query_row(
                    "SELECT count(*) FROM sqlite_master WHERE name = 'guard_counted'",
                    [],
                    |r| r.get(0),
                )?;
                Ok((rows, columns, counted))
            })
            .expect("read");
        assert_eq!(rows, 0);
        assert_eq!(columns, ["peer", "skill", "day", "refused_at"]);
        assert_eq!(counted, 0);
    }

    /// The unstarted tally starts from the calls a store holds when it is made (migration 14).
    #[test]
    fn the_unstarted_tally_starts_from_the_rows_a_store_holds() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("node.db");
        {
            let c = migrated_to(&path, 13);
            for (i, (role, peer, state, charge)) in [
                ("owner", "p0", "accepted", 0),
                ("owner", "p0", "opened", 0),
                ("owner", "p0", "ran", 0),
                ("owner", "p0", "opened", 1),
                ("caller", "p0", "opened", 0),
                ("owner", "p1", "submitting", 0),
            ]
            .into_iter()
            .enumerate()
            {
                c.execute(
                    "INSERT INTO calls (id, role, peer, skill, state, record, created_at,
                       updated_at, charge) VALUES (?1, ?2, ?3, 's', ?4, '{}', 1, 1, ?5)",
                    rusqlite::params![format!("c{i}"), role, peer, state, charge],
                )
                .expect("row");
            }
        }
        let store = Store::open(&path).expect("migrated");
        let count = |peer: &str| {
            store
                .write(|tx| crate::calls::records::unstarted_of(tx, peer))
                .expect("count")
        };
        assert_eq!((count("p0"), count("p1"), count("p2")), (2, 1, 0));
        // And the triggers keep it from there: p0's accepted call runs.
        store
            .write(|tx| Ok(tx.execute("UPDATE calls SET state = 'ran' WHERE id = 'c0'", [])?))
            .expect("ran");
        assert_eq!(count("p0"), 1);
    }

    #[test]
    fn the_charge_tally_starts_from_the_rows_a_store_holds() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("node.db");
        let now = now_secs();
        {
            let c = migrated_to(&path, 12);
            for (id, peer, charge, ago) in [
                ("a", "p1", 1, 60),
                ("b", "p1", 2, 7_200),
                ("c", "p2", 1, 90_000),
                ("d", "p2", 0, 60),
                ("e", "p2", 1, 3_000),
            ] {
                c.execute(
                    "INSERT INTO calls (id, role, peer, skill, state, record, created_at,
                       updated_at, charge)
                     VALUES (?1, 'owner', ?2, 'taste', 'ran', '{}', ?3, ?3, ?4)",
                    rusqlite::params![id, peer, now - ago, charge],
                )
                .expect("row");
            }
        }
        let store = Store::open(&path).expect("migrated");
        let count = |peer: &str| {
            store
                .write(|tx| crate::calls::records::charged_since(tx, "taste", peer, now - 86_400))
                .expect("count")
        };
        // `c` is older than a day, `d` was never charged.
        assert_eq!(count("p1"), (4, 3));
        assert_eq!(count("p2"), (4, 1));
        store
            .write(|tx| Ok(tx.execute("DELETE FROM calls WHERE id = 'b'", [])?))
            .expect("prune");
        assert_eq!(count("p1"), (2, 1));
    }

    /// The bundled SQLite is built to sync its WAL with fdatasync() (`.cargo/config.toml`), as
    /// distribution builds are: the flag reaches libsqlite3-sys's build through the same
    /// environment as this crate's compilation. Losing it costs every commit an inode flush.
    #[test]
    #[cfg(target_os = "linux")]
    fn the_bundled_sqlite_syncs_with_fdatasync() {
        let flags = option_env!("LIBSQLITE3_FLAGS").unwrap_or_default();
        assert!(
            flags.split_whitespace().any(|f| f == "-DHAVE_FDATASYNC=1"),
            "LIBSQLITE3_FLAGS is {flags:?}: SQLite would sync with fsync()"
        );
    }

    #[test]
    fn newer_schema_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("node.db");
        {
            let c = Connection::open(&path).expect("open");
            c.pragma_update(None, "user_version", 99).expect("set");
        }
        let err = Store::open(&path).expect_err("too new");
        assert!(
            matches!(err, NodeError::SchemaTooNew { found: 99, .. }),
            "{err}"
        );
    }

    /// A cached statement bound to new values is not planned again (issue 33: the caller's
    /// `GET /calls/{id}` and the ledger's per-call read were re-prepared on every step), on the
    /// writer and on a reader.
    #[test]
    fn cached_statements_are_not_prepared_again_when_rebound() {
        use rusqlite::StatementStatus;
        let (_tmp, store) = on_disk();
        let hot = [
            "SELECT record, program FROM calls WHERE id = ?1 ORDER BY role",
            "SELECT entry FROM ledger WHERE call_id = ?1 ORDER BY seq",
        ];
        let reprepared = |c: &Connection| -> rusqlite::Result<Vec<i32>> {
            let mut counts = Vec::new();
            for sql in hot {
                for value in ["call-a", "call-b", "call-c"] {
                    let mut st = c.prepare_cached(sql)?;
                    let mut rows = st.query([value])?;
                    while rows.next()?.is_some() {}
                    drop(rows);
                    if value == "call-c" {
                        counts.push(st.get_status(StatementStatus::RePrepare));
                    }
                }
            }
            Ok(counts)
        };
        let writer = reprepared(&relock(store.writer.lock()).conn).expect("writer");
        let reader_conn = relock(store.readers[0].lock());
        let reader = reprepared(&reader_conn).expect("reader");
        assert_eq!(writer, [0, 0], "writer");
        assert_eq!(reader, [0, 0], "reader");
    }
}
