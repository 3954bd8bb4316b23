//! The node's SQLite store: one file, WAL, versioned migrations embedded in the binary.
//!
//! One connection behind one mutex is the single writer path: every change goes through
//! [`Store::write`], which runs the closure inside one `IMMEDIATE` transaction, so a multi-row
//! change (a skill's declaration and its body source) lands whole or not at all. Reads share the
//! same connection; the node's read load (a human and a few peers) does not need a pool.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, Transaction, TransactionBehavior};

use crate::error::{NodeError, Result};

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
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub struct Store {
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store(..)")
    }
}

impl Store {
    /// Open (creating if needed) and migrate the store at `path`.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path)?;
        Store::setup(conn)
    }

    /// An in-memory store (unit tests).
    pub fn open_in_memory() -> Result<Store> {
        Store::setup(Connection::open_in_memory()?)
    }

    fn setup(mut conn: Connection) -> Result<Store> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // WAL: readers never block the writer; FULL: a committed call survives power loss too.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Freed pages are zeroed: a deleted row's (already encrypted) bytes do not linger.
        conn.pragma_update(None, "secure_delete", "ON")?;
        migrate(&mut conn)?;
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a transaction open (it rolls back on drop),
        // so the connection is still consistent: carry on with it.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Run `f` in one write transaction; commit when it returns `Ok`, roll back otherwise.
    pub fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Run a read.
    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.lock();
        f(&conn)
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

    #[test]
    fn migrates_once_and_reopens() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("node.db");
        let store = Store::open(&path).expect("open");
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
        store
            .write(|tx| {
                tx.execute("INSERT INTO meta (key, value) VALUES ('k', x'01')", [])?;
                Ok(())
            })
            .expect("write");
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
            tx.execute("INSERT INTO meta (key, value) VALUES ('a', x'01')", [])?;
            Err::<(), _>(NodeError::invalid("x", "boom"))
        });
        assert!(err.is_err());
        let n: i64 = store
            .read(|c| Ok(c.query_row("SELECT count(*) FROM meta", [], |r| r.get(0))?))
            .expect("read");
        assert_eq!(n, 0);
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
}
