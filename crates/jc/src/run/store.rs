//! The box's runs on disk, so a restarted box finishes what it had open (issue 33 item 3).
//!
//! One SQLite file, `<data dir>/box/runs.sqlite` (WAL, `synchronous=NORMAL`): a committed write
//! survives the box process being killed at any instant — what a restart of the box is — while
//! a power loss may lose the last transitions (then a run repeats a step: a stake is asked for
//! again, the provider is asked again; nothing is answered twice from a lost write). Three
//! tables: `runs` (one row per run: the twice-signed program, the run's own keys, its phase and
//! its result), `stakes` (one row per opened stake) and `day_book` (the box's day book,
//! `crate::day`: one row per (owner, caller, skill, day) with a released answer counted, named
//! by a keyed hash of those, so the file says how many and never whose). Every row's content is sealed with
//! XChaCha20-Poly1305 under the box storage key, a fresh random nonce per write, the AAD binding
//! the row to its run id (and role), so a row moved to another run or role, flipped or cut does
//! not open: that run is refused `store_tampered` at start, never half-used. Nothing secret is
//! ever written unsealed; the run id and a write counter (`version`, so a late write of an older
//! snapshot never replaces a newer one) are the only plain columns.
//!
//! The storage key comes through [`StorageKey`]: [`KeyFile`] (insecure-dev, 32 random bytes in
//! a 0600 file beside the database) is the one built. A platform sealing key (SEV-SNP's
//! `MSG_KEY_REQ` derived key bound to the launch measurement, a Nitro KMS key released to the
//! enclave's attestation) would be another implementation of the same trait
//! ([`StorageKey::sealed_by_platform`]); none is built, so a box with hardware isolation keeps
//! its runs in memory only ([`crate::run::BoxCore::with_run_store`] refuses a key its host can
//! read): a key file on the host's disk would give the host every stake. Not built either:
//! rollback protection (a host that can write the data dir can put back an older sealed row of
//! the same run, e.g. make a finished run run again).

use std::path::Path;
use std::sync::Mutex;

use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::day::{DayChange, DayKey, Tally};
use crate::error::{JcError, Result};
use crate::program::Role;

const NONCE_LEN: usize = 24;
const KEY_CHECK: &[u8] = b"skillbox box run store key check";
const KEY_CHECK_AAD: &[u8] = b"skillbox/box-store/key-check/v1";

/// Where the run store's sealing key comes from.
pub trait StorageKey: Send + Sync {
    /// The 32 key bytes (derived further before use, so the same bytes seal nothing else).
    fn key_bytes(&self) -> Result<Zeroizing<[u8; 32]>>;
    /// Whether only the measured box can have these bytes (a key the platform derives from its
    /// launch measurement), not its host: what a box with hardware isolation requires.
    fn sealed_by_platform(&self) -> bool {
        false
    }
}

/// The insecure-dev storage key: 32 random bytes in a file made 0600 on first start. Whoever
/// reads the file (the host, root) reads every persisted stake: it is for development, as is
/// the insecure-dev attester beside it.
pub struct KeyFile {
    key: Zeroizing<[u8; 32]>,
}

impl KeyFile {
    /// Read the key at `path`, or make it (random, written 0600 to a new file of a random name
    /// and renamed, so a crash leaves no half key: `attest::write_private`). A file of another length is an error, never
    /// replaced: the runs sealed under it would be lost.
    pub fn load_or_create(path: &Path) -> Result<KeyFile> {
        let fail = |what: &str, e: std::io::Error| {
            JcError::Storage(format!("store key {}: {what}: {e}", path.display()))
        };
        match std::fs::read(path) {
            Ok(bytes) => {
                let bytes = Zeroizing::new(bytes);
                let key: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
                    JcError::Storage(format!(
                        "store key {} is not 32 bytes; the runs sealed under it cannot be read",
                        path.display()
                    ))
                })?;
                Ok(KeyFile {
                    key: Zeroizing::new(key),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = Zeroizing::new([0u8; 32]);
                getrandom::fill(&mut key[..])
                    .map_err(|e| JcError::Storage(format!("no OS randomness: {e}")))?;
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| fail("creating its folder", e))?;
                }
                crate::attest::write_private(path, &key[..]).map_err(|e| fail("writing", e))?;
                Ok(KeyFile { key })
            }
            Err(e) => Err(fail("reading", e)),
        }
    }
}

impl StorageKey for KeyFile {
    fn key_bytes(&self) -> Result<Zeroizing<[u8; 32]>> {
        Ok(self.key.clone())
    }
}

/// A run's row as read back: its id and its opened content, or `store_tampered`.
pub struct LoadedRun {
    pub id: String,
    pub record: Result<Zeroizing<Vec<u8>>>,
    pub stakes: Vec<(Role, Result<Zeroizing<Vec<u8>>>)>,
}

pub struct RunStore {
    /// The writing connection; its checkpointer thread holds it weakly, and stops once it is
    /// gone.
    conn: std::sync::Arc<Mutex<Connection>>,
    cipher: XChaCha20Poly1305,
    /// Keys the day book's row names ([`Self::day_row`]), derived from the storage key apart
    /// from the cipher's.
    day_row_key: Zeroizing<[u8; 32]>,
}

/// A day book row as read back: its tally, or `store_tampered` (the row is then dropped).
pub type LoadedDay = Result<(DayKey, Tally, u64)>;

/// A run's row, written only over an older version. Statements on the write path are prepared
/// once per connection (`prepare_cached`): parsing them on every write was ~3 % of the box's
/// CPU per run.
const PUT_RUN: &str = "INSERT INTO runs (id, version, sealed) VALUES (?1, ?2, ?3)
     ON CONFLICT (id) DO UPDATE SET version = excluded.version, sealed = excluded.sealed
     WHERE excluded.version > runs.version";
const DELETE_STAKES: &str = "DELETE FROM stakes WHERE run_id = ?1";
const PUT_DAY: &str = "INSERT OR REPLACE INTO day_book (row, sealed) VALUES (?1, ?2)";
const DELETE_DAY: &str = "DELETE FROM day_book WHERE row = ?1";

/// How often the WAL is folded into the database, off the write path.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Checkpoint the WAL from a connection of its own, on a thread of its own: SQLite's automatic
/// checkpoint runs inside the write that crosses 1,000 pages and syncs the database file there,
/// under the store's lock (p99 31 ms, mean 1.1 ms a run in `benches/run_store.rs` with it). A
/// passive checkpoint does not block the writer — and so, under writes that never pause, it
/// never catches up with the last frame, and a WAL is started over only when one did: the WAL
/// grew by every byte written (150 MB after 2,000 calls in flight, `crates/cli/benches`; a box
/// under steady load would fill its disk), and each write into a new part of the file had the
/// kernel zero its pages first (a tenth of the box's CPU). So each round has a second pass
/// with the writer held off: only the frames written during the first pass are left, and once
/// they are in the database the next write starts the WAL over, in the file's pages as they
/// are.
fn spawn_checkpointer(path: &Path, writer: std::sync::Weak<Mutex<Connection>>) -> Result<()> {
    let conn = Connection::open(path).map_err(db)?;
    let checkpoint = move || {
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(code = "storage_failed", error = %e, "run store checkpoint");
        }
    };
    std::thread::Builder::new()
        .name("run-store-checkpoint".into())
        .spawn(move || {
            loop {
                std::thread::sleep(CHECKPOINT_EVERY);
                let Some(writer) = writer.upgrade() else {
                    break;
                };
                checkpoint();
                let _held = writer.lock().unwrap_or_else(|p| p.into_inner());
                checkpoint();
            }
        })
        .map_err(|e| JcError::Storage(format!("run store checkpointer: {e}")))?;
    Ok(())
}

fn db(e: rusqlite::Error) -> JcError {
    JcError::Storage(format!("run store: {e}"))
}

fn run_aad(id: &str) -> Vec<u8> {
    let mut aad = b"skillbox/box-run/v1\0".to_vec();
    aad.extend_from_slice(id.as_bytes());
    aad
}

fn stake_aad(id: &str, role: Role) -> Vec<u8> {
    let mut aad = b"skillbox/box-stake/v1\0".to_vec();
    aad.extend_from_slice(id.as_bytes());
    aad.push(0);
    aad.extend_from_slice(role.as_str().as_bytes());
    aad
}

fn day_aad(row: &[u8]) -> Vec<u8> {
    let mut aad = b"skillbox/box-day/v1\0".to_vec();
    aad.extend_from_slice(row);
    aad
}

fn role_of(s: &str) -> Option<Role> {
    [Role::Caller, Role::Owner]
        .into_iter()
        .find(|r| r.as_str() == s)
}

impl RunStore {
    /// Open (or make) the store at `path`, sealed under `key`. A store sealed under another
    /// key is refused whole (`storage_failed`): every run in it would read as tampered.
    pub fn open(path: &Path, key: &dyn StorageKey) -> Result<RunStore> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| JcError::Storage(format!("run store folder: {e}")))?;
        }
        let raw = key.key_bytes()?;
        // One storage key, a key per use, domain-separated by label.
        let derive = |label: &[u8]| {
            let mut h = Sha256::new();
            h.update(label);
            h.update(&raw[..]);
            Zeroizing::new(<[u8; 32]>::from(h.finalize()))
        };
        let derived = derive(b"skillbox/box-store/seal/v1\0");
        let cipher = XChaCha20Poly1305::new_from_slice(&derived[..])
            .map_err(|_| JcError::Storage("run store key".into()))?;
        let conn = Connection::open(path).map_err(db)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=NORMAL;
             PRAGMA wal_autocheckpoint=0;
             CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS runs (
                 id TEXT PRIMARY KEY, version INTEGER NOT NULL, sealed BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS stakes (
                 run_id TEXT NOT NULL, role TEXT NOT NULL, sealed BLOB NOT NULL,
                 PRIMARY KEY (run_id, role));
             CREATE TABLE IF NOT EXISTS day_book (row BLOB PRIMARY KEY, sealed BLOB NOT NULL);",
        )
        .map_err(db)?;
        let conn = std::sync::Arc::new(Mutex::new(conn));
        spawn_checkpointer(path, std::sync::Arc::downgrade(&conn))?;
        let day_row_key = derive(b"skillbox/box-store/day-row/v1\0");
        let store = RunStore {
            conn,
            cipher,
            day_row_key,
        };
        let check: Option<Vec<u8>> = store
            .conn()
            .query_row("SELECT v FROM meta WHERE k = 'key_check'", [], |r| r.get(0))
            .optional()
            .map_err(db)?;
        match check {
            Some(sealed) => {
                let opened = store.open_sealed(KEY_CHECK_AAD, &sealed);
                if !opened.is_ok_and(|p| p.as_slice() == KEY_CHECK) {
                    return Err(JcError::Storage(
                        "the run store was sealed under another storage key".into(),
                    ));
                }
            }
            None => {
                let sealed = store.seal(KEY_CHECK_AAD, KEY_CHECK)?;
                store
                    .conn()
                    .execute(
                        "INSERT INTO meta (k, v) VALUES ('key_check', ?1)",
                        params![sealed],
                    )
                    .map_err(db)?;
            }
        }
        Ok(store)
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// nonce ‖ ciphertext.
    fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| JcError::Storage(format!("no randomness: {e}")))?;
        let ct = self
            .cipher
            .encrypt(
                &chacha20poly1305::XNonce::from(nonce),
                Payload { msg: plain, aad },
            )
            .map_err(|_| JcError::Storage("sealing a run failed".into()))?;
        let mut out = Vec::with_capacity(NONCE_LEN + ct.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    fn open_sealed(&self, aad: &[u8], sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        if sealed.len() < NONCE_LEN {
            return Err(JcError::StoreTampered);
        }
        let (nonce, ct) = sealed.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| JcError::StoreTampered)?;
        self.cipher
            .decrypt(
                &chacha20poly1305::XNonce::from(nonce),
                Payload { msg: ct, aad },
            )
            .map(Zeroizing::new)
            .map_err(|_| JcError::StoreTampered)
    }

    /// Write a run's record unless a newer one (`version`) is already there.
    pub fn put_run(&self, id: &str, version: u64, record: &[u8]) -> Result<()> {
        let sealed = self.seal(&run_aad(id), record)?;
        self.conn()
            .prepare_cached(PUT_RUN)
            .and_then(|mut q| q.execute(params![id, version as i64, sealed]))
            .map_err(db)?;
        Ok(())
    }

    /// Write a role's opened stake (framed entries) of a run.
    pub fn put_stake(&self, id: &str, role: Role, entries: &[u8]) -> Result<()> {
        let sealed = self.seal(&stake_aad(id, role), entries)?;
        self.conn()
            .prepare_cached(
                "INSERT OR REPLACE INTO stakes (run_id, role, sealed) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut q| q.execute(params![id, role.as_str(), sealed]))
            .map_err(db)?;
        Ok(())
    }

    pub fn delete_stake(&self, id: &str, role: Role) -> Result<()> {
        self.conn()
            .execute(
                "DELETE FROM stakes WHERE run_id = ?1 AND role = ?2",
                params![id, role.as_str()],
            )
            .map_err(db)?;
        Ok(())
    }

    /// A finished run: its record (the result, no keys) and no stakes, in one transaction.
    pub fn finish(&self, id: &str, version: u64, record: &[u8]) -> Result<()> {
        self.finish_counted(id, version, record, None)
    }

    /// [`Self::finish`], with what its released answer added to the day book in the same
    /// transaction: a box killed after the result is on disk has the answer counted too (and
    /// one killed before has neither, and runs it again).
    pub fn finish_counted(
        &self,
        id: &str,
        version: u64,
        record: &[u8],
        day: Option<&DayChange>,
    ) -> Result<()> {
        let sealed = self.seal(&run_aad(id), record)?;
        let day_row = day.map(|c| self.seal_day(c)).transpose()?;
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db)?;
        tx.prepare_cached(PUT_RUN)
            .and_then(|mut q| q.execute(params![id, version as i64, sealed]))
            .map_err(db)?;
        tx.prepare_cached(DELETE_STAKES)
            .and_then(|mut q| q.execute(params![id]))
            .map_err(db)?;
        if let (Some(change), Some((row, sealed))) = (day, day_row) {
            tx.prepare_cached(PUT_DAY)
                .and_then(|mut q| q.execute(params![&row[..], sealed]))
                .map_err(db)?;
            for key in &change.dropped {
                tx.prepare_cached(DELETE_DAY)
                    .and_then(|mut q| q.execute(params![&self.day_row(key)[..]]))
                    .map_err(db)?;
            }
        }
        tx.commit().map_err(db)
    }

    /// A day book row's name: a keyed hash of its (owner, caller, skill, day), so the file
    /// tells whoever reads it (the host, the box operator) how many entries there are and when
    /// each was written — never whose. SHA-256 of the derived key then the key's fixed-width
    /// form: a pseudorandom name to anyone without the storage key (no MAC is needed, only
    /// that the name be neither guessed nor inverted).
    fn day_row(&self, key: &DayKey) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(&self.day_row_key[..]);
        h.update(key.to_bytes());
        h.finalize().into()
    }

    /// The row's name and its sealed content: stamp (u64), tally, key; the AAD binds it to
    /// its name, so a row moved under another name does not open.
    fn seal_day(&self, c: &DayChange) -> Result<([u8; 32], Vec<u8>)> {
        let row = self.day_row(&c.key);
        let mut plain = Zeroizing::new(Vec::with_capacity(8 + Tally::LEN + 80));
        plain.extend_from_slice(&c.stamp.to_be_bytes());
        plain.extend_from_slice(&c.tally.to_bytes());
        plain.extend_from_slice(&c.key.to_bytes());
        Ok((row, self.seal(&day_aad(&row), &plain)?))
    }

    /// Every day book row, opened: a row that does not open, or opens under a name that is not
    /// its key's, is `store_tampered` (dropped by [`Self::delete_days`] with its name).
    pub fn load_day_book(&self) -> Result<Vec<(Vec<u8>, LoadedDay)>> {
        let conn = self.conn();
        let mut q = conn
            .prepare("SELECT row, sealed FROM day_book")
            .map_err(db)?;
        let rows = q
            .query_map([], |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(db)?;
        let mut out = Vec::new();
        for row in rows {
            let (name, sealed) = row.map_err(db)?;
            let opened = self.open_sealed(&day_aad(&name), &sealed).and_then(|p| {
                let stamp = p
                    .get(..8)
                    .and_then(|s| s.try_into().ok())
                    .map(u64::from_be_bytes)
                    .ok_or(JcError::StoreTampered)?;
                let tally =
                    Tally::from_bytes(p.get(8..8 + Tally::LEN).ok_or(JcError::StoreTampered)?)?;
                let key = DayKey::from_bytes(&p[8 + Tally::LEN..])?;
                if self.day_row(&key)[..] != name[..] {
                    return Err(JcError::StoreTampered);
                }
                Ok((key, tally, stamp))
            });
            out.push((name, opened));
        }
        Ok(out)
    }

    /// Drop day book rows by name (refused at load) and by key (let go by the book).
    pub fn delete_days(&self, names: &[Vec<u8>], keys: &[DayKey]) -> Result<()> {
        if names.is_empty() && keys.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db)?;
        let rows = names
            .iter()
            .cloned()
            .chain(keys.iter().map(|k| self.day_row(k).to_vec()));
        for row in rows {
            tx.prepare_cached(DELETE_DAY)
                .and_then(|mut q| q.execute(params![row]))
                .map_err(db)?;
        }
        tx.commit().map_err(db)
    }

    /// Forget runs (deleted, expired, fetched and done with).
    pub fn delete(&self, ids: &[String]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db)?;
        for id in ids {
            tx.execute("DELETE FROM runs WHERE id = ?1", params![id])
                .map_err(db)?;
            tx.execute("DELETE FROM stakes WHERE run_id = ?1", params![id])
                .map_err(db)?;
        }
        tx.commit().map_err(db)
    }

    /// Every run on disk, opened (a row that does not open is `store_tampered`, its run id
    /// kept so the box can refuse it). Stakes of no run are dropped.
    pub fn load(&self) -> Result<Vec<LoadedRun>> {
        let conn = self.conn();
        let mut runs: Vec<LoadedRun> = {
            let mut q = conn
                .prepare("SELECT id, sealed FROM runs ORDER BY id")
                .map_err(db)?;
            let rows = q
                .query_map([], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
                })
                .map_err(db)?;
            let mut out = Vec::new();
            for row in rows {
                let (id, sealed) = row.map_err(db)?;
                let record = self.open_sealed(&run_aad(&id), &sealed);
                out.push(LoadedRun {
                    id,
                    record,
                    stakes: Vec::new(),
                });
            }
            out
        };
        let mut q = conn
            .prepare("SELECT run_id, role, sealed FROM stakes")
            .map_err(db)?;
        let rows = q
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                ))
            })
            .map_err(db)?;
        for row in rows {
            let (id, role, sealed) = row.map_err(db)?;
            let Some(run) = runs.iter_mut().find(|r| r.id == id) else {
                continue;
            };
            match role_of(&role) {
                Some(role) => {
                    let opened = self.open_sealed(&stake_aad(&id, role), &sealed);
                    run.stakes.push((role, opened));
                }
                None => run.record = Err(JcError::StoreTampered),
            }
        }
        Ok(runs)
    }
}

/// Frame opened stake entries for the store: per entry, u16 name length, name, u64 data
/// length, data.
pub fn encode_entries(entries: &[crate::seal::Entry]) -> Zeroizing<Vec<u8>> {
    let len = entries
        .iter()
        .map(|e| 10 + e.name.len() + e.data.len())
        .sum();
    let mut out = Zeroizing::new(Vec::with_capacity(len));
    for e in entries {
        out.extend_from_slice(&(e.name.len() as u16).to_be_bytes());
        out.extend_from_slice(e.name.as_bytes());
        out.extend_from_slice(&(e.data.len() as u64).to_be_bytes());
        out.extend_from_slice(&e.data);
    }
    out
}

/// [`encode_entries`] back; anything malformed is `store_tampered` (the seal held, so only a
/// bug writes such a thing, but it is read as outside input all the same).
pub fn decode_entries(mut bytes: &[u8]) -> Result<Vec<crate::seal::Entry>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
        if b.len() < n {
            return Err(JcError::StoreTampered);
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Ok(head)
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let n = u16::from_be_bytes(
            take(&mut bytes, 2)?
                .try_into()
                .map_err(|_| JcError::StoreTampered)?,
        ) as usize;
        let name = std::str::from_utf8(take(&mut bytes, n)?)
            .map_err(|_| JcError::StoreTampered)?
            .to_owned();
        let len = u64::from_be_bytes(
            take(&mut bytes, 8)?
                .try_into()
                .map_err(|_| JcError::StoreTampered)?,
        );
        let len = usize::try_from(len).map_err(|_| JcError::StoreTampered)?;
        let data = Zeroizing::new(take(&mut bytes, len)?.to_vec());
        out.push(crate::seal::Entry { name, data });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TestKey;

    impl StorageKey for TestKey {
        fn key_bytes(&self) -> Result<Zeroizing<[u8; 32]>> {
            Ok(Zeroizing::new([7; 32]))
        }
    }

    /// Two writers that never leave the store alone for long (a box under load): a passive
    /// checkpoint alone never caught up with them, so the WAL was never started over and grew
    /// by every frame written. With the second pass, each round starts it over: after six
    /// rounds it is as large as after the first, not six times.
    #[test]
    fn the_wal_starts_over_under_writes_that_never_pause() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("runs.sqlite");
        let wal_path = path.with_extension("sqlite-wal");
        let store = std::sync::Arc::new(RunStore::open(&path, &TestKey).expect("store"));
        let wal = || std::fs::metadata(&wal_path).map(|m| m.len()).unwrap_or(0);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let (store, stop) = (store.clone(), stop.clone());
                std::thread::spawn(move || {
                    let record = vec![0x5a; 2 * 1024];
                    let mut n = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        store
                            .put_run(&format!("run-{w}-{n}"), 1, &record)
                            .expect("write");
                        n += 1;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                })
            })
            .collect();
        std::thread::sleep(CHECKPOINT_EVERY + CHECKPOINT_EVERY / 2);
        let early = wal();
        std::thread::sleep(CHECKPOINT_EVERY * 5);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in writers {
            w.join().expect("writer");
        }
        let late = wal();
        assert!(early > 0, "nothing was written");
        assert!(
            late < early * 5 / 2,
            "the WAL grew from {early} to {late} bytes: never started over"
        );
    }

    #[test]
    fn entries_round_trip_and_a_cut_frame_is_tampered() {
        let entries = vec![
            crate::seal::Entry {
                name: "body".into(),
                data: Zeroizing::new(b"secret body".to_vec()),
            },
            crate::seal::Entry {
                name: "model".into(),
                data: Zeroizing::new(Vec::new()),
            },
        ];
        let bytes = encode_entries(&entries);
        let back = decode_entries(&bytes).expect("round trip");
        assert_eq!(back.len(), 2);
        assert_eq!(&back[0].data[..], b"secret body");
        assert_eq!(back[1].name, "model");
        for cut in 1..bytes.len() {
            if let Ok(e) = decode_entries(&bytes[..cut]) {
                // Only a cut exactly between entries parses, as fewer entries.
                assert_eq!(e.len(), 1, "cut at {cut}");
            }
        }
    }
}
