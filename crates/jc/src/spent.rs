//! The programs a box has opened, on disk, so that a box restarted (or killed) still refuses a
//! replayed program: a program runs at most once per box, across restarts too.
//!
//! One line per opened program, `<program hash hex> <expires_at>\n`, appended before `open`
//! answers. Appends are written under the box's state lock (a `write(2)`, no sync) and made
//! durable outside it by [`SpentLog::sync_to`], which batches: whoever syncs covers every line
//! written before it started, so concurrent opens share one `fdatasync`. A torn last line (a
//! crash mid-append, whose `open` never answered) is cut at start; any other malformed line is
//! an error naming the file and line — the box does not start on a list it cannot read, since
//! forgetting entries would let a replay through. [`SpentLog::compact`] rewrites the file with
//! the unexpired entries (write, sync, rename, sync the directory).
//!
//! One box per list: `<path>.lock` is held (`flock`) while the box runs, so a second box on the
//! same data dir is refused at start rather than allowed to rewrite the first one's list.
//!
//! Program hashes are public (both parties and the box see them), so the file holds nothing
//! secret and is not sealed.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{JcError, Result};
use crate::program::ProgramHash;

pub struct SpentLog {
    path: PathBuf,
    /// Held for the box's life (the lock is on this file, which compaction never replaces).
    _lock: File,
    file: Mutex<Appender>,
    /// The highest sequence number known to be on disk.
    synced: Mutex<u64>,
    /// Set when a write or sync failed: what is on disk is unknown, so nothing more is promised.
    failed: AtomicBool,
}

struct Appender {
    file: File,
    /// Sequence number of the last line written.
    written: u64,
    /// Lines in the file (compaction is worth it when most are expired).
    lines: usize,
}

impl std::fmt::Debug for SpentLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpentLog")
            .field("path", &self.path)
            .finish()
    }
}

fn storage(path: &Path, what: &str, e: impl std::fmt::Display) -> JcError {
    JcError::Storage(format!("{}: {what}: {e}", path.display()))
}

/// Parse the file's text: its entries, and the length of its well-formed prefix.
fn parse(path: &Path, text: &[u8]) -> Result<(Vec<(ProgramHash, u64)>, usize)> {
    let mut entries = Vec::new();
    let mut good = 0;
    for (n, line) in text.split_inclusive(|&b| b == b'\n').enumerate() {
        let Some(line) = line.strip_suffix(b"\n") else {
            // The last append, torn by a crash: its `open` never answered.
            break;
        };
        let bad = || {
            JcError::Storage(format!(
                "{}: line {} is not `<program hash> <expires_at>`",
                path.display(),
                n + 1
            ))
        };
        let line = std::str::from_utf8(line).map_err(|_| bad())?;
        let (hash, exp) = line.split_once(' ').ok_or_else(bad)?;
        let hash = ProgramHash::from_hex(hash).map_err(|_| bad())?;
        let exp: u64 = exp.parse().map_err(|_| bad())?;
        entries.push((hash, exp));
        good += line.len() + 1;
    }
    Ok((entries, good))
}

impl SpentLog {
    /// Open (or create) the list at `path`; answers it with the entries not expired at `now`.
    pub fn open(path: &Path, now: u64) -> Result<(SpentLog, Vec<(ProgramHash, u64)>)> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| storage(dir, "create", e))?;
        }
        let lock_path = path.with_extension("lock");
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| storage(&lock_path, "open", e))?;
        lock.try_lock().map_err(|e| match e {
            std::fs::TryLockError::WouldBlock => JcError::Storage(format!(
                "{} is in use by another box (one box per data dir: give each its own --data-dir)",
                path.display()
            )),
            std::fs::TryLockError::Error(e) => storage(&lock_path, "lock", e),
        })?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| storage(path, "open", e))?;
        let mut text = Vec::new();
        file.read_to_end(&mut text)
            .map_err(|e| storage(path, "read", e))?;
        let (entries, good) = parse(path, &text)?;
        if good < text.len() {
            file.set_len(good as u64)
                .and_then(|()| file.sync_data())
                .map_err(|e| storage(path, "cut the torn last line", e))?;
        }
        let lines = entries.len();
        let live = entries.into_iter().filter(|(_, exp)| *exp > now).collect();
        Ok((
            SpentLog {
                path: path.to_owned(),
                _lock: lock,
                file: Mutex::new(Appender {
                    file,
                    written: 0,
                    lines,
                }),
                synced: Mutex::new(0),
                failed: AtomicBool::new(false),
            },
            live,
        ))
    }

    fn check(&self) -> Result<()> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(JcError::Storage(format!(
                "{}: an earlier write failed; restart the box",
                self.path.display()
            )));
        }
        Ok(())
    }

    fn fail(&self, what: &str, e: std::io::Error) -> JcError {
        self.failed.store(true, Ordering::SeqCst);
        storage(&self.path, what, e)
    }

    /// Append one opened program (not yet durable: [`Self::sync_to`] the answered number).
    pub fn append(&self, hash: &ProgramHash, expires_at: u64) -> Result<u64> {
        self.check()?;
        let mut a = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let line = format!("{} {expires_at}\n", hash.to_hex());
        a.file
            .write_all(line.as_bytes())
            .map_err(|e| self.fail("append", e))?;
        a.written += 1;
        a.lines += 1;
        Ok(a.written)
    }

    /// Return once line `seq` (and every line before it) is on disk.
    pub fn sync_to(&self, seq: u64) -> Result<()> {
        let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        self.check()?;
        if *synced >= seq {
            return Ok(());
        }
        // Everything written so far is covered by this sync.
        let (upto, file) = {
            let a = self.file.lock().unwrap_or_else(|p| p.into_inner());
            let f = a.file.try_clone().map_err(|e| self.fail("sync", e))?;
            (a.written, f)
        };
        file.sync_data().map_err(|e| self.fail("sync", e))?;
        *synced = upto;
        Ok(())
    }

    /// Lines in the file, expired ones included.
    pub fn lines(&self) -> usize {
        self.file.lock().unwrap_or_else(|p| p.into_inner()).lines
    }

    /// Rewrite the file with `live` alone. The caller holds whatever orders appends (the box's
    /// state lock), so `live` is every entry that must survive.
    pub fn compact(&self, live: &[(ProgramHash, u64)]) -> Result<()> {
        self.check()?;
        let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        let mut a = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let tmp = self.path.with_extension("compact");
        let mut text = String::with_capacity(live.len() * 80);
        for (hash, exp) in live {
            text.push_str(&hash.to_hex());
            text.push(' ');
            text.push_str(&exp.to_string());
            text.push('\n');
        }
        let written = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            if let Some(dir) = self.path.parent() {
                File::open(dir)?.sync_all()?;
            }
            OpenOptions::new().append(true).open(&self.path)
        })();
        let file = written.map_err(|e| self.fail("compact", e))?;
        a.file = file;
        a.lines = live.len();
        // The new file holds every entry written so far, synced.
        *synced = a.written;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(n: u8) -> ProgramHash {
        ProgramHash::from_hex(&format!("{n:02x}").repeat(32)).expect("hash")
    }

    #[test]
    fn entries_survive_a_reopen_and_expired_ones_are_dropped() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("box").join("spent-programs");
        let (log, live) = SpentLog::open(&path, 100).expect("open");
        assert!(live.is_empty());
        let a = log.append(&hash(1), 500).expect("append");
        let b = log.append(&hash(2), 150).expect("append");
        log.sync_to(a).expect("sync");
        log.sync_to(b).expect("sync");
        drop(log);
        let (log, live) = SpentLog::open(&path, 200).expect("reopen");
        assert_eq!(live, [(hash(1), 500)]);
        assert_eq!(log.lines(), 2);
        log.compact(&live).expect("compact");
        assert_eq!(log.lines(), 1);
        let c = log.append(&hash(3), 900).expect("append after compaction");
        log.sync_to(c).expect("sync");
        drop(log);
        let (_, live) = SpentLog::open(&path, 200).expect("reopen");
        assert_eq!(live, [(hash(1), 500), (hash(3), 900)]);
    }

    #[test]
    fn a_torn_last_line_is_cut_and_appends_go_on_after_it() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("spent-programs");
        let good = format!("{} 500\n", hash(1).to_hex());
        std::fs::write(&path, format!("{good}{}", &hash(2).to_hex()[..17])).expect("write");
        let (log, live) = SpentLog::open(&path, 0).expect("open");
        assert_eq!(live, [(hash(1), 500)]);
        let s = log.append(&hash(3), 700).expect("append");
        log.sync_to(s).expect("sync");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, format!("{good}{} 700\n", hash(3).to_hex()));
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_it_not_a_forgotten_entry() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("spent-programs");
        for bad in [
            format!("{} 500\nnot a line\n", hash(1).to_hex()),
            format!("{} soon\n", hash(1).to_hex()),
            "zz 5\n".to_owned(),
            "\u{0}\u{1}\n".to_owned(),
        ] {
            std::fs::write(&path, &bad).expect("write");
            let e = SpentLog::open(&path, 0).expect_err("refused");
            assert_eq!(e.code(), "storage_failed", "{bad:?}");
            assert!(e.to_string().contains("line "), "{e}");
        }
    }

    #[test]
    fn a_second_box_on_the_same_list_is_refused_until_the_first_is_gone() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("spent-programs");
        let (first, _) = SpentLog::open(&path, 0).expect("open");
        let e = SpentLog::open(&path, 0).expect_err("in use");
        assert_eq!(e.code(), "storage_failed");
        assert!(e.to_string().contains("another box"), "{e}");
        // Compaction replaces the list's file, not the lock's.
        first.compact(&[]).expect("compact");
        assert!(
            SpentLog::open(&path, 0).is_err(),
            "still held after compaction"
        );
        drop(first);
        SpentLog::open(&path, 0).expect("free again");
    }

    #[test]
    fn concurrent_appends_are_all_durable_when_each_sync_returns() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("spent-programs");
        let (log, _) = SpentLog::open(&path, 0).expect("open");
        let log = std::sync::Arc::new(log);
        let threads: Vec<_> = (0..8u8)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..16u8 {
                        let s = log.append(&hash(t * 16 + i), 1000).expect("append");
                        log.sync_to(s).expect("sync");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        drop(log);
        let (_, live) = SpentLog::open(&path, 0).expect("reopen");
        assert_eq!(live.len(), 128);
    }
}
