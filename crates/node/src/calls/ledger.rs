//! The calls' side of the disclosure ledger: the entry a transition appends (the consent
//! text's facts, so the ledger says what the human was told), appending a stake's entry ahead
//! of its bytes and keeping the head file beside the store up with the steps' own entries, and
//! reading and verifying the ledger through [`Calls`]. The ledger itself is [`crate::ledger`].

use super::consent::Disclosure;
use super::records::CallRow;
use super::{CallError, Calls, blocking};
use crate::error::Result;
use crate::ledger::{Entry, EntryKind, Item};

/// How long a step's own ledger entries may wait for the head file ([`Calls::publish_head`]):
/// the most the file lags the database by, outside a crash, for entries no stake waits on.
const HEAD_LAG: std::time::Duration = std::time::Duration::from_millis(50);

/// The disclosure-ledger entry for this call as it stands: the decision (`allow`/`deny`), who
/// made it, and what was sealed (none for a decision). The box, platform, measurement and
/// provider are the consent text's facts, so the ledger says what the human was told.
pub(super) fn ledger_entry(
    row: &CallRow,
    decision: &str,
    decided_by: &str,
    items: Vec<Item>,
) -> Entry {
    let d = Disclosure::facts(row);
    Entry {
        seq: 0,
        at: super::now_ms(),
        kind: if items.is_empty() {
            EntryKind::Decision
        } else {
            EntryKind::Stake
        },
        call: row.call.id.clone(),
        role: super::records::role_str(row.call.role).to_owned(),
        peer: d.peer,
        skill: d.skill,
        box_url: d.box_url,
        run: row.call.run_id.clone(),
        platform: d.platform,
        measurement: d.measurement,
        hardware_isolation: d.hardware_isolation,
        provider: d.provider,
        provider_host: d.provider_host,
        decision: decision.to_owned(),
        decided_by: decided_by.to_owned(),
        sources: d.sources,
        items,
        answers: None,
        box_code: None,
        prev: String::new(),
    }
}

/// The box's answer to the stake written ahead as entry `stake_seq`: `stake_taken` or
/// `stake_refused` with the box's code. It names the call, the box and the decision like the
/// stake, but no source: the stake entry it answers does, so a per-source view lists each time
/// a source left once.
pub(super) fn stake_answer_entry(
    row: &CallRow,
    stake_seq: u64,
    kind: EntryKind,
    box_code: Option<String>,
    decision: &str,
    decided_by: &str,
) -> Entry {
    let mut e = ledger_entry(row, decision, decided_by, vec![]);
    e.kind = kind;
    e.sources = Vec::new();
    e.answers = Some(stake_seq);
    e.box_code = box_code;
    e
}

impl Calls {
    /// The disclosure ledger, filtered (`GET /ledger`).
    pub async fn ledger(
        &self,
        filter: crate::ledger::Filter,
    ) -> Result<Vec<crate::ledger::Line>, CallError> {
        let store = self.0.store.clone();
        Ok(blocking(move || crate::ledger::list(&store, &filter)).await?)
    }

    /// The disclosure ledger as `GET /ledger` shows and exports it, filtered: each line as
    /// [`crate::ledger::shown`] shows it — a source name that reads as a pasted key masked, and
    /// such a line redacted and signed as shown with the node key, so an export read offline
    /// tells the node's redaction from an edit.
    pub async fn ledger_shown(
        &self,
        filter: crate::ledger::Filter,
    ) -> Result<Vec<crate::ledger::Line>, CallError> {
        let store = self.0.store.clone();
        let signing = self.0.signing.clone();
        Ok(blocking(move || {
            let mut lines = crate::ledger::list(&store, &filter)?;
            for l in &mut lines {
                crate::ledger::shown(l, &signing)?;
            }
            Ok(lines)
        })
        .await?)
    }

    /// The whole ledger checked against this node's key and its signed head; when it verifies,
    /// with the head to save off the machine (version 2: it pins what each redacted line up to
    /// it shows, `ledger::verify_store_to_save`).
    pub async fn verify_ledger(&self) -> Result<crate::ledger::Verdict, CallError> {
        let store = self.0.store.clone();
        let signing = self.0.signing.clone();
        Ok(blocking(move || crate::ledger::verify_store_to_save(&store, &signing)).await?)
    }

    /// The node's public key (hex): what the ledger's signatures verify under.
    pub fn node_key_hex(&self) -> &str {
        &self.0.node_key_hex
    }

    /// Append `entry` to the disclosure ledger: on disk, in the database and the head file
    /// beside it, when this returns (`ledger::append_now`, without a blocking thread for the
    /// write).
    pub(super) async fn append_ledger(
        &self,
        entry: crate::ledger::Entry,
    ) -> Result<crate::ledger::Line> {
        let signing = self.0.signing.clone();
        let line = self
            .0
            .store
            .write_owned(move |tx| crate::ledger::append(tx, &signing, entry))
            .await?;
        self.publish_head_through(line.entry.seq).await?;
        Ok(line)
    }

    /// Bring the ledger's head file to entry `seq` at least (`ledger::publish_head_through`).
    /// The appenders of one batch are answered together, and the first to publish writes the
    /// database's head, which covers the batch: an appender that finds its entry published
    /// already costs no blocking thread and no read of the file (issue 33).
    async fn publish_head_through(&self, seq: u64) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.0.head_published.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        let store = self.0.store.clone();
        let through = blocking(move || crate::ledger::publish_head_through(&store, seq)).await?;
        self.0.head_published.fetch_max(through, Ordering::AcqRel);
        Ok(())
    }

    /// After a step that appended entry `seq` (a decision, a stake's answer): the head file is
    /// brought there soon, not before the step returns. Nothing waits on it — the file only has
    /// to be ahead of the database before bytes leave, and every stake's own entry is published
    /// before its bytes are sent ([`Calls::append_ledger`]), which covers each entry before it
    /// (issue 33: a head-file write is a create, two fsyncs and a rename, on a blocking thread;
    /// a sequential call paid three per side). One publisher at a time writes the newest entry
    /// asked for, [`HEAD_LAG`] after the first ask, so the asks of many steps cost one write or
    /// none (a stake's entry published meanwhile covers them). A file left behind by a crash in
    /// between is only behind (never `rolled_back`), and the node's start brings it up. Failing
    /// to write it does not undo the transition (it is on disk); the next append or `ledger
    /// verify` (`head_file_missing`, `rolled_back`) shows it.
    pub(super) fn publish_head(&self, seq: u64) {
        use std::sync::atomic::Ordering;
        self.0.head_wanted.fetch_max(seq, Ordering::AcqRel);
        if self.0.head_published.load(Ordering::Acquire) >= seq
            || self.0.head_publishing.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                // A stake's entry written ahead soon after usually covers what was asked: then
                // nothing is written here. Otherwise one write covers whatever was asked
                // meanwhile. (Each head-file write is ~0.4-0.7 ms of fsyncs, and the disk's
                // journal serialises it with the commits of calls that wait.)
                tokio::time::sleep(HEAD_LAG).await;
                let want = this.0.head_wanted.load(Ordering::Acquire);
                if this.0.head_published.load(Ordering::Acquire) >= want {
                    this.0.head_publishing.store(false, Ordering::Release);
                    // An ask between the look and the store found a publisher running and left
                    // its entry to it: look again, unless another publisher took over.
                    if this.0.head_wanted.load(Ordering::Acquire)
                        > this.0.head_published.load(Ordering::Acquire)
                        && !this.0.head_publishing.swap(true, Ordering::AcqRel)
                    {
                        continue;
                    }
                    return;
                }
                if let Err(e) = this.publish_head_through(want).await {
                    tracing::warn!(error = %e, "ledger head file not written");
                    this.0.head_publishing.store(false, Ordering::Release);
                    return;
                }
            }
        });
    }
}
