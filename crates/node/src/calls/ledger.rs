//! The calls' side of the disclosure ledger: the entry a transition appends (the consent
//! text's facts, so the ledger says what the human was told), and reading and verifying the
//! ledger through [`Calls`]. The ledger itself is [`crate::ledger`].

use super::consent::Disclosure;
use super::records::CallRow;
use super::{CallError, Calls, blocking};
use crate::ledger::{Entry, EntryKind, Item};

/// The disclosure-ledger entry for this call as it stands: the decision (`allow`/`deny`), who
/// made it, and what was sealed (none for a decision). The box, platform, measurement and
/// provider are the consent text's facts, so the ledger says what the human was told.
pub(super) fn ledger_entry(
    row: &CallRow,
    decision: &str,
    decided_by: &str,
    items: Vec<Item>,
) -> Entry {
    let d = Disclosure::of(row);
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

    /// The whole ledger checked against this node's key and its signed head.
    pub async fn verify_ledger(&self) -> Result<crate::ledger::Verdict, CallError> {
        let store = self.0.store.clone();
        let key = self.0.signing.verifying_key();
        Ok(blocking(move || crate::ledger::verify_store(&store, &key)).await?)
    }

    /// The node's public key (hex): what the ledger's signatures verify under.
    pub fn node_key_hex(&self) -> &str {
        &self.0.node_key_hex
    }
}
