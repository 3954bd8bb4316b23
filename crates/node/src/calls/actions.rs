//! The action executors: payloads out, the box (open, attest, stake, submit, outcome, cancel).
//! Each may run again safely; each returns the event its outcome is, or nothing.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use skillbox_calls::Decision;
use skillbox_calls::machine::{Event, FailureCode, Role, submits_with_stake};
use skillbox_calls::policy::SubmitQuestion;
use skillbox_jc::JcError;
use skillbox_jc::attest::VerifiedRun;
use skillbox_jc::client::{
    BoxClient, OpenedRun, StakeInput, open_owner_note, open_result, seal_stake, verify_receipt,
};
use skillbox_jc::day::{DAY_LIMITS_ENTRY, DayLimits};
use skillbox_jc::dsse::{Envelope, approved_program};
use skillbox_jc::program::ProgramHash;
use skillbox_jc::run::RunFailure;
use skillbox_jc::seal::HpkeKeyPair;
use skillbox_peers::{Payload, PayloadKind, PeerId};
use zeroize::Zeroizing;

use super::driver::{self, Change, Outcome};
use super::ledger::{ledger_entry, stake_answer_entry};
use super::records::{self, CallRow, Patch};
use super::{Calls, Forward, lock, now_ms};
use crate::ledger::{Decided, EntryKind, Item};

/// How long an open waits, retrying, while every box it may use is busy (the machine's stall
/// limit is 120 s).
const BUSY_PATIENCE: Duration = Duration::from_secs(60);
/// How long one submit waits for the other side's stake: the longest the box holds a submit.
const SUBMIT_HOLD: Duration = Duration::from_millis(skillbox_jc::server::MAX_WAIT_MS);

/// How many times a run left at its box is asked to be deleted when the box does not take the
/// delete for a passing reason (`Calls::delete_run`), and the pause before the first retry,
/// doubled each time: 1 + 2 + 4 s, over a box's restart, well inside any program's expiry.
const DELETE_ATTEMPTS: u32 = 4;
const DELETE_PAUSE: Duration = Duration::from_secs(1);
/// Deletes retried at once, at most; past it a delete is tried once.
pub(super) const MAX_PENDING_DELETES: usize = 256;

/// A box at its run limit (or stake budget): it has room again as soon as a run ends.
fn is_busy(e: &JcError) -> bool {
    match e {
        JcError::Busy(_) | JcError::OverBudget { .. } => true,
        JcError::Remote { code, .. } => code == "busy",
        _ => false,
    }
}

/// The run remembered for this call, only if it is the call's run now: a run of the same call
/// verified before (another box, another session) is never what a stake is sealed to.
fn remembered(
    verified: &std::collections::HashMap<super::Key, VerifiedRun>,
    row: &CallRow,
) -> Option<VerifiedRun> {
    verified
        .get(&(row.call.id.clone(), row.call.role))
        .filter(|v| row.call.run_id.as_deref() == Some(v.run_id.as_str()))
        .cloned()
}

/// The pause before the `attempt`th retry: 200 ms growing by half each time to 2 s, with up to
/// as much again of jitter, so the calls waiting on a full box neither hammer it nor all come
/// back in the same instant.
fn busy_pause(attempt: u32) -> Duration {
    let base = (200.0 * 1.5f64.powi(attempt.min(16) as i32)).min(2000.0) as u64;
    let mut b = [0u8; 2];
    let jitter = match getrandom::fill(&mut b) {
        Ok(()) => u64::from(u16::from_le_bytes(b)) % base.max(1),
        Err(_) => base / 2,
    };
    Duration::from_millis(base + jitter)
}

impl Calls {
    async fn send(&self, row: &CallRow, kind: PayloadKind, body: Value) -> bool {
        let Ok(peer) = row.call.peer.parse::<PeerId>() else {
            tracing::warn!(call = %row.call.id, "stored peer id does not parse");
            return false;
        };
        let payload = Payload {
            kind,
            call_id: row.call.id.clone(),
            body,
        };
        match self.0.transport.send(peer, payload).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(call = %row.call.id, kind = kind.as_str(), error = %e, "payload not delivered; retrying later");
                false
            }
        }
    }

    pub(super) fn envelope(row: &CallRow) -> skillbox_jc::Result<Envelope> {
        let text = row
            .program
            .as_deref()
            .ok_or_else(|| JcError::Internal("call has no program".into()))?;
        Envelope::from_json(text.as_bytes())
    }

    pub(super) async fn send_request(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let env: Value = serde_json::from_str(row.program.as_deref().unwrap_or("null"))
            .map_err(|e| JcError::Internal(format!("stored program: {e}")))?;
        self.send(
            row,
            PayloadKind::CallRequest,
            json!({"skill": row.call.skill, "program": env}),
        )
        .await;
        Ok(None)
    }

    pub(super) async fn send_accepted(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let env = Self::envelope(row)?;
        let ours = env
            .signatures
            .iter()
            .find(|s| s.keyid == self.0.node_key_hex)
            .ok_or_else(|| JcError::Internal("accepted program lacks our signature".into()))?;
        // This side's half of the nonce the caller's open will ask the box's attestation for
        // (the same half when `call.accepted` is sent again).
        let mut body = json!({"signature": {"keyid": ours.keyid, "sig": ours.sig}});
        if self.0.settings.forwarded_attestations {
            body["nonce"] = json!(
                lock(&self.0.nonce_halves)
                    .entry((row.call.id.clone(), row.call.role))
                    .or_insert_with(skillbox_jc::client::new_nonce)
                    .clone()
            );
        }
        self.send(row, PayloadKind::CallAccepted, body).await;
        Ok(None)
    }

    pub(super) async fn send_session(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let (Some(url), Some(run_id)) = (&row.box_url, &row.call.run_id) else {
            return Ok(None);
        };
        let key = (row.call.id.clone(), row.call.role);
        let mut body = json!({"box": url, "runId": run_id});
        // The run's attestation for the joint nonce, with this side's half: the owner checks it
        // without asking the box (public: what the box answers anyone who asks).
        if let Some(f) = lock(&self.0.forwards)
            .get(&key)
            .filter(|f| &f.run_id == run_id)
        {
            body["attestation"] = json!(f.attestation);
            body["nonce"] = json!(f.caller_half);
        }
        let sent = self.send(row, PayloadKind::CallSession, body).await;
        if sent {
            lock(&self.0.forwards).remove(&key);
        }
        Ok(sent.then(|| (Event::SessionDelivered, Change::none())))
    }

    /// `call.failed`: the code and its fixed words, nothing of this side.
    pub(super) async fn send_failed(&self, row: &CallRow, code: FailureCode) {
        self.send(row, PayloadKind::CallFailed, failed_body(code))
            .await;
    }

    // ---- the box

    /// The X25519 pair this owner's notes are sealed to (see `Inner::note_key`).
    fn note_key(&self) -> skillbox_jc::Result<&HpkeKeyPair> {
        self.0
            .note_key
            .as_ref()
            .ok_or_else(|| JcError::Internal("the node key has no X25519 pair".into()))
    }

    fn client(&self, row: &CallRow) -> skillbox_jc::Result<BoxClient> {
        let url = row
            .box_url
            .as_deref()
            .ok_or_else(|| JcError::BadRequest("the call names no box".into()))?;
        self.0
            .boxes
            .client(url)
            .cloned()
            .ok_or_else(|| JcError::BadRequest(format!("box {url} is not one this node accepts")))
    }

    /// How the attestation of this call's box is checked: its pin and this node's provider
    /// hosts.
    fn attest_policy(&self, row: &CallRow) -> skillbox_jc::attest::VerifyPolicy {
        self.0
            .boxes
            .verify_policy(row.box_url.as_deref().unwrap_or_default())
    }

    /// Run one box request, recording its latency (`skillbox_box_request_duration_seconds`).
    async fn timed<T>(&self, op: &'static str, request: impl std::future::Future<Output = T>) -> T {
        let started = std::time::Instant::now();
        let out = request.await;
        self.0.metrics.box_request(op, started.elapsed());
        out
    }

    fn role(row: &CallRow) -> skillbox_jc::Role {
        match row.call.role {
            Role::Caller => skillbox_jc::Role::Caller,
            Role::Owner => skillbox_jc::Role::Owner,
        }
    }

    /// Open the run on the call's box — or, when that box is busy or does not answer, on the
    /// next the program lists that this node accepts (least loaded first); the box that opened
    /// it becomes the call's. Nothing has been staked yet, so moving costs nothing.
    pub(super) async fn open_run(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let env = Self::envelope(row)?;
        let approved = approved_program(&env)?;
        let first = row.box_url.clone().unwrap_or_default();
        let key = (row.call.id.clone(), row.call.role);
        // With the owner's half of the nonce (from `call.accepted`), the open asks for the joint
        // nonce's attestation, which the owner can check when it is forwarded; without it, for a
        // nonce of this side's own, as before.
        let owner_half = lock(&self.0.nonce_halves).get(&key).cloned();
        let caller_half = skillbox_jc::client::new_nonce();
        let nonce = match &owner_half {
            Some(o) => skillbox_jc::client::joint_nonce(&caller_half, o),
            None => caller_half.clone(),
        };
        let (url, client, opened, left) = self
            .open_somewhere(row, &first, &env, &approved, &nonce)
            .await?;
        let policy = self.0.boxes.verify_policy(&url);
        let run_id = opened.opened.run_id.clone();
        let forward = opened
            .attestation()
            .filter(|(_, asked)| owner_half.is_some() && *asked == nonce)
            .map(|(att, _)| Forward {
                run_id: run_id.clone(),
                caller_half: caller_half.clone(),
                attestation: att.clone(),
            });
        // The box answered the open with the run's attestation for this node's nonce (one
        // round trip less, issue 33); from a box that did not, it is asked for.
        let verified = if opened.attested() {
            client.attest_opened(&approved, opened, &policy).await?
        } else {
            self.timed("attest", client.attest_opened(&approved, opened, &policy))
                .await?
        };
        if let Some(f) = forward {
            lock(&self.0.forwards).insert(key, f);
        }
        let mut change = self.remember(row, verified);
        // A run the call left for this open (its box lost after it opened) is a move even when
        // the same box, back again, opened the new run.
        let lost = row
            .call
            .left_runs
            .last()
            .filter(|r| !row.call.moves.iter().any(|m| m.run.as_ref() == Some(*r)));
        if let Some(run) = lost {
            let why = left.unwrap_or("box_unreachable");
            change.patch.moved = Some(super::boxes::moved(&first, &url, why, Some(run)));
        } else if url != first {
            change.patch.moved = left.map(|why| super::boxes::moved(&first, &url, why, None));
        }
        if url != first {
            change.patch.box_url = Some(url);
        }
        Ok(Some((Event::RunOpened { run_id }, change)))
    }

    /// Try the call's box, then the alternatives; while every one of them answers `busy` (a
    /// box at its `--max-runs`: runs end every moment), try again after a short jittered pause
    /// for up to [`BUSY_PATIENCE`] before leaving the retry to the machine's backoff — which
    /// grows to 30 s and would leave a full box idle long after it has room.
    async fn open_somewhere(
        &self,
        row: &CallRow,
        first: &str,
        env: &Envelope,
        approved: &skillbox_jc::dsse::ApprovedProgram,
        nonce: &str,
    ) -> skillbox_jc::Result<(String, BoxClient, OpenedRun, Option<&'static str>)> {
        let client = self.client(row)?;
        let started = std::time::Instant::now();
        let mut attempt = 0u32;
        loop {
            // A box holds one run per program: one that was lost and came back with the run this
            // call left answers with that run, which the call does not enter again.
            let is_left = |o: &OpenedRun| row.call.left_runs.contains(&o.opened.run_id);
            let run_left = || JcError::Remote {
                status: 409,
                code: "run_left".into(),
            };
            let mut last = match self
                .timed(
                    "open",
                    client.open_attested(env, nonce.to_owned(), &self.0.boxes.verify_policy(first)),
                )
                .await
            {
                Ok(opened) if is_left(&opened) => run_left(),
                Ok(opened) => {
                    self.0.boxes.answered(first);
                    return Ok((first.to_owned(), client, opened, None));
                }
                Err(e) if driver::transient(&e) || driver::box_refuses(&e) => e,
                Err(e) => return Err(e),
            };
            self.0.boxes.failed(first, super::boxes::move_reason(&last));
            let mut all_busy = is_busy(&last);
            let left = super::boxes::move_reason(&last);
            let day_of = (row.call.peer.as_str(), row.call.skill.as_str());
            for other in self.0.boxes.alternatives(first, &approved.program, day_of) {
                let Some(c) = self.0.boxes.client(&other.url).cloned() else {
                    continue;
                };
                match self
                    .timed(
                        "open",
                        c.open_attested(
                            env,
                            nonce.to_owned(),
                            &self.0.boxes.verify_policy(&other.url),
                        ),
                    )
                    .await
                {
                    Ok(opened) if is_left(&opened) => {
                        all_busy = false;
                        if !driver::transient(&last) {
                            last = run_left();
                        }
                    }
                    Ok(opened) => {
                        self.0.boxes.claim(&other.url);
                        self.0.boxes.answered(&other.url);
                        self.0.boxes.used_today(day_of.0, day_of.1, &other.url);
                        tracing::info!(call = %row.call.id, from = %first, to = %other.url, code = last.code(), "box busy or unreachable; run opened on another");
                        return Ok((other.url, c, opened, Some(left)));
                    }
                    Err(e) if driver::transient(&e) || driver::box_refuses(&e) => {
                        self.0
                            .boxes
                            .failed(&other.url, super::boxes::move_reason(&e));
                        all_busy &= is_busy(&e);
                        // A box that may take the call later outranks one that never will.
                        if driver::transient(&e) || !driver::transient(&last) {
                            last = e;
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            if !all_busy || started.elapsed() >= BUSY_PATIENCE {
                return Err(last);
            }
            tokio::time::sleep(busy_pause(attempt)).await;
            attempt = attempt.saturating_add(1);
        }
    }

    /// Owner: attest the run the caller named at `box_url` (one this node accepts, checked
    /// when the session arrived) and, verified, make it the call's run and box — the first, or
    /// the one the caller moved to (the machine decides whether it may).
    pub(super) async fn verify_run(
        &self,
        row: &CallRow,
        run_id: &str,
        box_url: &str,
    ) -> skillbox_jc::Result<Outcome> {
        let env = Self::envelope(row)?;
        let approved = approved_program(&env)?;
        let box_url = super::boxes::normalize_url(box_url);
        let client = self.0.boxes.client(&box_url).cloned().ok_or_else(|| {
            JcError::BadRequest(format!("box {box_url} is not one this node accepts"))
        })?;
        let policy = self.0.boxes.verify_policy(&box_url);
        let verified = self
            .timed("attest", client.attest(&approved, run_id, &policy))
            .await?;
        Ok(Some(self.run_verified(row, verified, box_url)))
    }

    /// The owner's check of the run a `call.session` named, from the attestation the caller
    /// forwarded (the one its open got for their joint nonce): every check [`Self::verify_run`]
    /// makes, without asking the box (issue 33: a round trip and a commit fewer on the call's
    /// path). `None` when there is nothing to check it against (no forward, no half of this
    /// node's: a restart lost it) or it does not verify: the caller's word is then worth
    /// nothing, and the owner asks the box itself.
    pub(super) fn verify_forwarded(
        &self,
        row: &CallRow,
        run_id: &str,
        box_url: &str,
        forwarded: (&skillbox_jc::attest::Attestation, &str),
    ) -> Option<(Event, Change)> {
        if !self.0.settings.forwarded_attestations {
            return None;
        }
        let key = (row.call.id.clone(), row.call.role);
        let own_half = lock(&self.0.nonce_halves).get(&key).cloned()?;
        let (att, caller_half) = forwarded;
        let nonce = skillbox_jc::client::joint_nonce(caller_half, &own_half);
        let checked = Self::envelope(row)
            .and_then(|env| approved_program(&env))
            .and_then(|approved| {
                let client = self.0.boxes.client(box_url).ok_or_else(|| {
                    JcError::BadRequest(format!("box {box_url} is not one this node accepts"))
                })?;
                let policy = self.0.boxes.verify_policy(box_url);
                client.check_forwarded(att, &approved, run_id, &nonce, &policy)
            });
        match checked {
            Ok(verified) => Some(self.run_verified(row, verified, box_url.to_owned())),
            Err(e) => {
                tracing::debug!(call = %row.call.id, code = e.code(), "forwarded attestation refused; asking the box");
                None
            }
        }
    }

    /// The owner's `RunOpened` for a run it verified at `box_url`, with what its step stores.
    fn run_verified(
        &self,
        row: &CallRow,
        verified: VerifiedRun,
        box_url: String,
    ) -> (Event, Change) {
        let run_id = verified.run_id.clone();
        let mut change = self.remember(row, verified);
        // The call reached a verified run: only now does it count against the daily ceilings
        // (and the coverage thresholds are looked at again: another call may have passed them),
        // in the step that takes the run (`inbound::charged_in`).
        change.charge = row.call.role == Role::Owner;
        // A second run of the call: the caller moved it. The owner's history says so (from the
        // box of the run it leaves), applied only if the machine takes the move.
        if row.call.run_id.is_some() {
            let from = row.box_url.clone().unwrap_or_default();
            change.patch.moved = Some(super::boxes::moved(
                &from,
                &box_url,
                "caller_moved",
                row.call.run_id.as_ref(),
            ));
        }
        change.patch.box_url = Some(box_url);
        (Event::RunOpened { run_id }, change)
    }

    /// Keep the verified run in memory, and return the change that stores its public facts
    /// with the `RunOpened` transition.
    fn remember(&self, row: &CallRow, v: VerifiedRun) -> Change {
        let record = serde_json::to_value(v.to_record()).ok();
        lock(&self.0.verified).insert((row.call.id.clone(), row.call.role), v);
        Change::patch(Patch {
            verified: record,
            ..Patch::default()
        })
    }

    /// The verified run of this call: remembered, or attested again (after a restart).
    async fn verified(&self, row: &CallRow) -> skillbox_jc::Result<VerifiedRun> {
        if let Some(v) = remembered(&lock(&self.0.verified), row) {
            return Ok(v);
        }
        // After a restart: the stored facts of the attestation this side checked.
        if let Some(stored) = &row.verified {
            let record: skillbox_jc::attest::VerifiedRunRecord =
                serde_json::from_value(stored.clone())
                    .map_err(|e| JcError::Internal(format!("stored verified run: {e}")))?;
            let v = VerifiedRun::from_record(&record)?;
            if Some(&v.run_id) == row.call.run_id.as_ref() {
                lock(&self.0.verified).insert((row.call.id.clone(), row.call.role), v.clone());
                return Ok(v);
            }
        }
        let run_id = Self::run_id(row)?;
        let env = Self::envelope(row)?;
        let approved = approved_program(&env)?;
        let v = self
            .client(row)?
            .attest(&approved, &run_id, &self.attest_policy(row))
            .await?;
        self.remember(row, v.clone());
        Ok(v)
    }

    /// Stake this side's material. **Written ahead**: the ledger entry naming exactly the
    /// buffers sealed (their keyed digests) is on disk — in the database and the head beside it
    /// — before a byte is sent; the box's answer follows as its own entry (`stake_taken`,
    /// `stake_refused`). A box that stalls, hangs up or loses the run, and a crash in between,
    /// leave the stake entry standing unanswered: the bytes may have left, and the record says
    /// so. A retry first asks the box whether it holds the stake already (then nothing is sent
    /// again); bytes sent again are recorded again only if they differ from what the entry
    /// names.
    ///
    /// A caller's submit goes with its stake (its policy and human were asked before it, so
    /// nothing is left to decide between them): one request to the box and one step fewer
    /// (`submitting`). A box that does not take the submit with the stake leaves the call in
    /// `submitting`, as before.
    pub(super) async fn stake(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let verified = self.verified(row).await?;
        let role = Self::role(row);
        let with_submit = submits_with_stake(&row.call);
        let client = self.client(row)?;
        let run = Self::run_id(row)?;
        let (id, side) = (row.call.id.clone(), records::role_str(row.call.role));
        let store = self.0.store.clone();
        let v = verified.clone();
        let r = row.clone();
        let srcs = self.0.sources.clone();
        let skills = self.0.skills.clone();
        let limits = self.day_limits(row);
        // One blocking thread reads this call's stake into its run as the ledger has it on
        // this side (a run the call left is another run) with the decision the stake follows,
        // and seals the material: one hand-over rather than two (issue 33). The sealed bytes
        // are used only when the ledger shows no answer from the box yet; a sealing error, too,
        // counts only then.
        let (facts, sealing) = tokio::task::spawn_blocking(move || {
            let facts = crate::ledger::stake_facts(&store, &id, side, &run);
            (
                facts,
                seal_for_stake(&v, role, &r, (&srcs, &skills), limits),
            )
        })
        .await
        .map_err(|e| JcError::Internal(format!("sealing worker: {e}")))?;
        let (prior, decided) = facts.map_err(|e| JcError::Internal(format!("ledger: {e}")))?;
        let (decision, decided_by) = decided_or_default(decided);
        if let Some(p) = &prior {
            match &p.answer {
                Some((EntryKind::StakeTaken, _)) => {
                    return Ok(Some((Event::Staked, Change::none())));
                }
                Some((_, code)) => {
                    return Err(JcError::Remote {
                        status: 409,
                        code: code.clone().unwrap_or_else(|| "http".into()),
                    });
                }
                None => {}
            }
            // Written ahead, never answered (a stall, a crash): does the box hold it?
            match self.timed("status", client.status(&verified.run_id)).await {
                // A party's submit is taken only with its stake in, and the run gives its
                // stakes to the provider as it starts: a run that ran with this side's submit
                // (one that went with the stake) no longer lists the stake, and still took it.
                Ok(view) if view.staked.contains(&role) || view.submitted.contains(&role) => {
                    let code = Some("already_staked".into());
                    let decided = (decision, decided_by);
                    let submitted = with_submit && view.submitted.contains(&role);
                    return Ok(self.staked(row, p.seq, code, decided, submitted));
                }
                Ok(_) => {}
                Err(e) if driver::transient(&e) => return Err(e),
                Err(e) => {
                    self.stake_answered(row, p.seq, Err(&e), (decision, decided_by))
                        .await?;
                    return Err(e);
                }
            }
        }
        let (sealed, items) = sealing?;
        // Write ahead: the entry for exactly these bytes is on disk before they leave. The same
        // bytes sent again to the same run are the entry already written.
        let seq = match prior {
            Some(p) if p.items == items => p.seq,
            _ => {
                let entry = ledger_entry(row, &decision, &decided_by, items);
                self.append_ledger(entry)
                    .await
                    .map_err(|e| JcError::Internal(format!("ledger: {e}")))?
                    .entry
                    .seq
            }
        };
        let sent = if with_submit {
            let staked = client.stake_and_submit(&verified, role, sealed, &self.0.signing);
            self.timed("stake", staked).await.map(|s| s.submitted)
        } else {
            let staked = client.stake(&verified, role, sealed, &self.0.signing);
            self.timed("stake", staked).await.map(|_| false)
        };
        if sent.is_ok() {
            crash_after_stake(row);
        }
        // The box's code (`already_staked` when a retry found it there) and whether it took the
        // submit with the stake.
        let answer = match sent {
            Ok(submitted) => Ok((None, submitted)),
            Err(JcError::Remote { code, .. }) if code == "already_staked" => {
                Ok((Some(code), false))
            }
            // No answer, or "later": the bytes may have left; the entry stands unanswered and
            // the retry asks the box.
            Err(e) if driver::transient(&e) => return Err(e),
            Err(e) => Err(e),
        };
        match answer {
            // The answer repeats the decision the stake followed (read above, not again).
            Ok((code, submitted)) => {
                Ok(self.staked(row, seq, code, (decision, decided_by), submitted))
            }
            Err(e) => {
                self.stake_answered(row, seq, Err(&e), (decision, decided_by))
                    .await?;
                Err(e)
            }
        }
    }

    /// Record the box's answer to the stake of entry `seq`: taken (with `already_staked` when a
    /// retry found it there) or refused with the box's code.
    async fn stake_answered(
        &self,
        row: &CallRow,
        seq: u64,
        answer: Result<Option<String>, &JcError>,
        decided: Decided,
    ) -> skillbox_jc::Result<()> {
        let entry = self.stake_answer(row, seq, answer, decided);
        self.append_ledger(entry)
            .await
            .map(|_| ())
            .map_err(|e| JcError::Internal(format!("ledger: {e}")))
    }

    /// The box took the stake of entry `seq`: its answer is recorded with the `Staked` step, in
    /// that step's transaction (the `Submitted` step when the box took the submit with it).
    fn staked(
        &self,
        row: &CallRow,
        seq: u64,
        code: Option<String>,
        decided: Decided,
        submitted: bool,
    ) -> Outcome {
        let entry = self.stake_answer(row, seq, Ok(code), decided);
        Some((
            if submitted {
                Event::Submitted
            } else {
                Event::Staked
            },
            Change {
                recorded: Some(entry),
                ..Change::none()
            },
        ))
    }

    /// The ledger entry of the box's answer to the stake of entry `seq`; it repeats the
    /// decision the stake followed (`decided`, read with the stake's state).
    fn stake_answer(
        &self,
        row: &CallRow,
        seq: u64,
        answer: Result<Option<String>, &JcError>,
        (decision, decided_by): Decided,
    ) -> crate::ledger::Entry {
        let (kind, code) = match answer {
            Ok(code) => (EntryKind::StakeTaken, code),
            Err(e) => (
                EntryKind::StakeRefused,
                Some(match e {
                    JcError::Remote { code, .. } => code.clone(),
                    other => other.code().to_owned(),
                }),
            ),
        };
        stake_answer_entry(row, seq, kind, code, &decision, &decided_by)
    }

    /// The policy's answer for this call, and (unless it asks the human) the ledger entry
    /// naming the rule that decided.
    pub(super) fn check_policy(&self, row: &CallRow) -> (Event, Change) {
        let policy = self.0.policy.read().unwrap_or_else(|p| p.into_inner());
        let no_sources: Vec<String> = Vec::new();
        let told = super::consent::told_of(row);
        let (decision, rule) = policy.consent().decide_with_rule(&SubmitQuestion {
            role: row.call.role,
            peer: &row.call.peer,
            skill: &row.call.skill,
            sources: match row.call.role {
                Role::Caller => &row.sources,
                Role::Owner => &no_sources,
            },
            from_agent: row.call.role == Role::Caller && row.call.from_agent,
            agent_token: row.call.role == Role::Caller && row.call.agent_token,
            told: told.as_ref(),
        });
        let decided_by = match rule {
            Some(i) => format!("rule:{}", i + 1),
            None => "default".to_owned(),
        };
        let change = match decision {
            Decision::Allow => Change::ledger(ledger_entry(row, "allow", &decided_by, vec![])),
            Decision::Deny => Change::ledger(ledger_entry(row, "deny", &decided_by, vec![])),
            Decision::Ask => Change::none(),
        };
        (Event::Policy(decision), change)
    }

    pub(super) async fn submit(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let run_id = Self::run_id(row)?;
        let hash = Self::program_hash(row)?;
        let client = self.client(row)?;
        // The other side may not have staked yet: the box holds the submit until it has (a
        // long poll), and one that answers at once is asked again briefly, so a healthy call
        // never waits on the schedule. An owner submits one call of a peer and skill at a time
        // while the coverage thresholds are on, holding the turn only while it asks and from an
        // accepted submit on (see `coverage::Turns`).
        let turns = row.call.role == Role::Owner && self.turns_on();
        let mut pause = Duration::from_millis(2);
        // As long as the box holds one submit: a shorter deadline ended a held submit early and
        // the call's retry asked again (issue 33: 1.72 submits per call at 5,000 in flight).
        let deadline = tokio::time::Instant::now() + SUBMIT_HOLD;
        loop {
            if turns
                && let Some(code) = self
                    .take_turn(row)
                    .await
                    .map_err(|e| JcError::Internal(format!("turn: {e}")))?
            {
                let message = format!("refused before this run: {}", code.fixed_message());
                return Ok(Some((Event::BoxFailed { code, message }, Change::none())));
            }
            let mut left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if turns {
                left = left.min(super::coverage::TURN_ASK);
            }
            match self
                .timed(
                    "submit",
                    client.submit_waiting(&run_id, &hash, Self::role(row), &self.0.signing, left),
                )
                .await
            {
                // Accepted (or, `wrong_state`, both submitted already: a retry after the run
                // started, our submit): only now is the run on that box, and the day's pin
                // counts it.
                Ok(_) => break,
                Err(JcError::Remote { code, .. }) if code == "wrong_state" => break,
                Err(JcError::Remote { code, .. })
                    if code == "stakes_missing" && tokio::time::Instant::now() < deadline =>
                {
                    self.end_turn(row);
                    // Long enough between asks for a waiting call to take the turn.
                    let gap = if turns {
                        super::coverage::TURN_GAP
                    } else {
                        pause
                    };
                    tokio::time::sleep(pause.max(gap)).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err(e) => {
                    self.end_turn(row);
                    return Err(e);
                }
            }
        }
        if turns {
            self.pin_day(row)
                .await
                .map_err(|e| JcError::Internal(format!("day pin: {e}")))?;
        }
        Ok(Some((Event::Submitted, Change::none())))
    }

    /// The call's run, for the steps that act on it (attest, stake, submit, fetch): one the
    /// machine reached such a step without is a bug here, never a peer's doing.
    fn run_id(row: &CallRow) -> skillbox_jc::Result<String> {
        row.call
            .run_id
            .clone()
            .ok_or_else(|| JcError::Internal("no run yet".into()))
    }

    fn program_hash(row: &CallRow) -> skillbox_jc::Result<ProgramHash> {
        let env = Self::envelope(row)?;
        Ok(ProgramHash::of(&env.payload_bytes()?))
    }

    /// The run's outcome, waiting for it until the call's expiry.
    pub(super) async fn fetch_outcome(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        self.fetch_outcome_within(row, Duration::MAX).await
    }

    /// [`Self::fetch_outcome`], waiting for the run's end at most `wait` (or until the call's
    /// expiry, if sooner): a box whose run has not ended by then answers `not_ready`, so the
    /// asker learns the box still has the run (an ended call's turn is settled this way).
    pub(super) async fn fetch_outcome_within(
        &self,
        row: &CallRow,
        wait: Duration,
    ) -> skillbox_jc::Result<Outcome> {
        let run_id = Self::run_id(row)?;
        let verified = self.verified(row).await?;
        let until_expiry = Duration::from_millis(row.call.expires_at_ms.saturating_sub(now_ms()));
        let client = self.client(row)?;
        let asked = std::time::Instant::now();
        let view = client
            .wait_result_as(
                &run_id,
                until_expiry.min(wait).max(Duration::from_secs(1)),
                Self::role(row),
            )
            .await?;
        self.0
            .metrics
            .run(records::role_str(row.call.role), asked.elapsed());
        let receipt = verify_receipt(&view, &verified)?;
        // Whether the guard acted is the owner's alone, in a note sealed to this node's key; the
        // caller's record never holds it (a caller told of each catch has an oracle).
        let note = match row.call.role {
            Role::Owner => open_owner_note(&view, &receipt, self.note_key()?, &verified)?,
            Role::Caller => None,
        };
        // Only whether the guard acted: the box keeps what the answer carried to itself (a
        // note's region mask gave a hostile owner's body 16 bits of the caller's sources a
        // call), and an older box's note that still says it is not read.
        let acted = note.as_ref().map(|n| n.guard_acted);
        // The box refused the run at its start because the peer's day of the skill is used up
        // (the owner's `day_limits`): the one thing the owner learns of the tally.
        let day_used_up = day_used_up(&receipt, &view);
        let run_end = (row.call.role == Role::Owner).then_some(if day_used_up {
            driver::RunEnd::DayUsedUp
        } else {
            driver::RunEnd::Ran
        });
        let mut receipt_json = serde_json::to_value(&receipt)
            .map_err(|e| JcError::Internal(format!("receipt: {e}")))?;
        if let Some(o) = receipt_json.as_object_mut() {
            // The box's signed form too, not only its fields: with the run's key (kept in the
            // row's `verified`) anyone can check later that the box signed it, where the fields
            // alone read the same as an edited row.
            o.insert(
                "signed".into(),
                serde_json::to_value(&view.receipt)
                    .map_err(|e| JcError::Internal(format!("receipt envelope: {e}")))?,
            );
            o.insert(
                "noHardwareIsolation".into(),
                Value::Bool(verified.no_hardware_isolation),
            );
            if let Some(acted) = acted {
                o.insert("guard_acted".into(), Value::Bool(acted));
            }
        }
        let patch = Patch {
            // A caught extraction attempt counts once, as any call: counted double, the day's
            // ceiling told the caller whether the guard acted (one probe, then calls until
            // `daily_limit`: refused one call earlier if it was caught), which a `regenerate`
            // answer is made not to tell. What answers carry of the body the box counts, against
            // the owner's day limits (`run_end`).
            receipt: Some(receipt_json),
            ..Patch::default()
        };
        if day_used_up {
            // Both sides end with the owner's closed code and its fixed words: nothing of how
            // much was carried.
            let code = FailureCode::CoverageExceeded;
            let message = format!(
                "the box refused the run: {} ({})",
                code.as_str(),
                code.fixed_message()
            );
            return Ok(Some((
                Event::BoxFailed { code, message },
                Change {
                    patch,
                    run_end,
                    ..Change::none()
                },
            )));
        }
        if view.sealed_output.is_none() {
            // The box's closed code only (see `RunFailure`): never words from the provider.
            let message = match view.error {
                Some(f) => format!(
                    "the run failed at the box: {} ({})",
                    f.as_str(),
                    f.message()
                ),
                None => "the run failed at the box".into(),
            };
            return Ok(Some((
                Event::RunFailed { message },
                Change {
                    patch,
                    run_end,
                    ..Change::none()
                },
            )));
        }
        match row.call.role {
            Role::Owner => Ok(Some((
                Event::ReceiptStored,
                Change {
                    patch,
                    run_end,
                    ..Change::none()
                },
            ))),
            Role::Caller => {
                let srcs = self.0.sources.clone();
                let name = records::result_key_source(&row.call.id);
                let key = tokio::task::spawn_blocking(move || {
                    let mut buf = Zeroizing::new(Vec::new());
                    srcs.apply(&name, &mut *buf).map(|_| buf)
                })
                .await
                .map_err(|e| JcError::Internal(format!("key worker: {e}")))?
                .map_err(|e| JcError::Internal(format!("result key: {e}")))?;
                let pair = HpkeKeyPair::from_secret_bytes(&key)?;
                let out = open_result(&view, &pair, &verified)?;
                let answer = Zeroizing::new(out.answer.into_bytes());
                Ok(Some((
                    Event::Answered,
                    Change {
                        patch,
                        answer: Some(answer),
                        ..Change::none()
                    },
                )))
            }
        }
    }

    /// Ask the box of a run the call left to delete it, best effort ([`Calls::delete_run`]):
    /// it may hold this side's stake, and neither side will submit it. The box was not
    /// answering; one that comes back with the run (or never really died — the owner cannot
    /// tell) drops it now rather than at its expiry.
    pub(super) async fn cancel_left(&self, row: &CallRow, box_url: &str, run_id: &str) {
        if let Some(client) = self.0.boxes.client(box_url) {
            self.delete_run(row, client, run_id).await;
        }
    }

    /// The call failed before both sides submitted: its run, which may hold this side's stake
    /// (a caller's sources), is deleted at the box ([`Calls::delete_run`]). Runs as the call's
    /// action task, never under the call's lock.
    pub(super) async fn cancel_run(&self, row: &CallRow) -> skillbox_jc::Result<Outcome> {
        let Some(run_id) = row.call.run_id.clone() else {
            return Ok(None);
        };
        let client = self.client(row)?;
        self.delete_run(row, &client, &run_id).await;
        Ok(None)
    }

    /// Delete `run_id` of `row`'s call at `client`'s box. A delete the box did not take for a
    /// passing reason (not answering, a 5xx, busy, its rate) is asked again a few times with
    /// growing pauses, while the program lasts: tried once, a box restarting for a moment kept
    /// the run — and a caller's staked sources in it — until the program expired. A lasting
    /// answer ends it (the run gone already, or running: deleting it then would only take the
    /// result from a peer that may not have fetched it). At most [`MAX_PENDING_DELETES`] are
    /// retried at once; past that a delete is tried once, so a box that never answers costs a
    /// bounded number of waiting tasks.
    async fn delete_run(&self, row: &CallRow, client: &BoxClient, run_id: &str) {
        let Ok(hash) = Self::program_hash(row) else {
            return;
        };
        let pending = &self.0.pending_deletes;
        let retrying = pending.fetch_add(1, Ordering::AcqRel) < MAX_PENDING_DELETES;
        let attempts = if retrying { DELETE_ATTEMPTS } else { 1 };
        let mut pause = DELETE_PAUSE;
        for attempt in 1..=attempts {
            let Err(e) = client
                .delete(run_id, &hash, Self::role(row), &self.0.signing)
                .await
            else {
                break;
            };
            let in_time =
                now_ms().saturating_add(pause.as_millis() as u64) < row.call.expires_at_ms;
            if !(driver::transient(&e) && attempt < attempts && in_time) {
                tracing::debug!(call = %row.call.id, code = e.code(), attempt, "deleting the run at its box: given up");
                break;
            }
            tracing::debug!(call = %row.call.id, code = e.code(), attempt, "deleting the run at its box: asking again");
            tokio::time::sleep(pause).await;
            pause = pause.saturating_mul(2);
        }
        pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The decision the stake follows, as the ledger recorded it. Either side stakes only once its
/// policy or human allowed the call (the machine owes `Stake` only to a call `consented`, and
/// the decision's entry is written in the step that consents), so a stake with none recorded
/// is one of a call allowed before this node kept a ledger: `unrecorded`, on either side. The
/// owner's stake was labelled `admission` here, from when it staked on admission and decided
/// the submit after (before 87be2fc): a stake made now never follows admission alone, and
/// entries older versions wrote keep that label.
fn decided_or_default(decided: Option<Decided>) -> Decided {
    decided.unwrap_or_else(|| ("allow".to_owned(), "unrecorded".to_owned()))
}

/// The crash tests' failpoint inside the stake window: `SKILLBOX_CRASH_AT=<role>:stake_sent`
/// aborts (like kill -9) after the box took the stake and before its answer is recorded — the
/// window a write-ahead entry must cover. Nothing sets it otherwise.
fn crash_after_stake(row: &CallRow) {
    let point = format!("{}:stake_sent", records::role_str(row.call.role));
    if std::env::var("SKILLBOX_CRASH_AT").is_ok_and(|v| v == point) {
        tracing::error!("SKILLBOX_CRASH_AT reached: aborting");
        std::process::abort();
    }
}

/// The body of `call.failed`: a closed code and its fixed words.
pub(super) fn failed_body(code: FailureCode) -> Value {
    json!({"code": code.as_str(), "message": code.fixed_message()})
}

impl Calls {
    /// Owner, with its guard on: the day limits its stake gives the box (its `[guard]`
    /// thresholds; 0 keeps one off), which the box keeps the peer's day of the skill under.
    /// They go to the box only, sealed in the stake: the caller never sees them.
    fn day_limits(&self, row: &CallRow) -> Option<DayLimits> {
        (row.call.role == Role::Owner && self.0.guard.enabled)
            .then(|| super::coverage::day_limits(&self.0.guard))
    }
}

/// This side's material for its stake into the run `v`, read from the source store and sealed
/// to the run on the calling (blocking) thread: it leaves the store only as HPKE ciphertext for
/// this run; the ledger keeps the keyed digests (`items`). An owner's `limits` go as the
/// `day_limits` entry: no source, so its ledger item is named `day_limits` and names none.
fn seal_for_stake(
    v: &VerifiedRun,
    role: skillbox_jc::Role,
    r: &CallRow,
    (srcs, skills): (&crate::sources::Sources, &crate::skills::Skills),
    limits: Option<DayLimits>,
) -> skillbox_jc::Result<(Vec<u8>, Vec<Item>)> {
    let apply = |name: &str, stake: bool| -> skillbox_jc::Result<Zeroizing<Vec<u8>>> {
        let mut buf = Zeroizing::new(Vec::new());
        let applied = if stake {
            srcs.apply_for_stake(name, &mut *buf)
        } else {
            srcs.apply(name, &mut *buf)
        };
        applied.map_err(|e| JcError::Read(e.to_string()))?;
        Ok(buf)
    };
    // Each entry: its name in the stake, whether it is a source of that name (a caller's data
    // only: the owner's items and the caller's request are named stake items, whatever a
    // caller's source is called), and its bytes.
    let mut held: Vec<(String, bool, Zeroizing<Vec<u8>>)> = Vec::new();
    match r.call.role {
        Role::Caller => {
            held.push((
                "request".into(),
                false,
                apply(&records::request_source(&r.call.id), false)?,
            ));
            // The caller's data: only what its human marked shareable, checked by the
            // source layer itself whatever the program names.
            for s in &r.sources {
                held.push((s.clone(), true, apply(s, true)?));
            }
        }
        Role::Owner => {
            let (declaration, _) = skills
                .declared(&r.call.skill)
                .map_err(|e| JcError::Internal(e.to_string()))?
                .ok_or_else(|| {
                    JcError::BadRequest(format!("skill {:?} was removed", r.call.skill))
                })?;
            let d = &declaration;
            held.push(("body".into(), false, apply(&d.body_source_name(), false)?));
            // The model id from the source store (imports put it there); a declaration
            // row that still carries one (written before) is used as it is.
            match srcs.meta(&d.model_source_name()) {
                Ok(Some(_)) => {
                    held.push(("model".into(), false, apply(&d.model_source_name(), false)?))
                }
                _ => {
                    if let Some(m) = &d.model {
                        held.push(("model".into(), false, Zeroizing::new(m.as_bytes().to_vec())));
                    }
                }
            }
            if d.provider.as_ref().is_some_and(|p| p.needs_key())
                && let Some(k) = &d.key
            {
                held.push(("key".into(), false, apply(k, false)?));
            }
            if let Some(l) = limits {
                held.push((
                    DAY_LIMITS_ENTRY.into(),
                    false,
                    Zeroizing::new(l.to_bytes().to_vec()),
                ));
            }
        }
    }
    let items = held
        .iter()
        .map(|(n, source, d)| Item {
            stake: if *source { "source".into() } else { n.clone() },
            source: source.then(|| n.clone()),
            size_bucket: skillbox_jc::seal::bucket(d.len() as u64),
            digest: srcs.key().digest(d),
        })
        .collect();
    let inputs = held
        .iter()
        .map(|(n, _, d)| StakeInput::bytes(n, d))
        .collect();
    Ok((seal_stake(v, role, inputs)?, items))
}

/// Whether the box refused this run because the peer's day of the skill is used up. The code in
/// the box's answer is not under the receipt's signature, so it is believed only where the
/// signed receipt agrees that the run failed and no answer came: whoever could rewrite a plain
/// loopback box's answer cannot turn an answered run into a day's refusal.
fn day_used_up(
    receipt: &skillbox_jc::receipt::Receipt,
    view: &skillbox_jc::run::ResultView,
) -> bool {
    receipt.status == skillbox_jc::receipt::RunStatus::Failed
        && view.sealed_output.is_none()
        && view.error == Some(RunFailure::CoverageExceeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stake follows the decision the ledger recorded; one with none recorded is of a call
    /// allowed before the ledger, on either side — never `admission`, which no stake follows
    /// alone any more.
    #[test]
    fn a_stake_with_no_recorded_decision_is_labelled_unrecorded() {
        let rule = ("allow".to_owned(), "rule:1".to_owned());
        assert_eq!(decided_or_default(Some(rule.clone())), rule);
        assert_eq!(
            decided_or_default(None),
            ("allow".to_owned(), "unrecorded".to_owned())
        );
    }

    #[test]
    fn only_a_failed_signed_receipt_without_an_answer_makes_the_boxs_code_a_days_refusal() {
        use skillbox_jc::receipt::{Receipt, RunStatus};
        let receipt = |status| Receipt {
            run_id: "r".into(),
            program_hash: "h".into(),
            status,
            finished_at: 0,
            output_bucket: 0,
            owner_note_sha256: None,
        };
        let view = |sealed_output: Option<&str>, error| skillbox_jc::run::ResultView {
            run_id: "r".into(),
            status: RunStatus::Failed,
            sealed_output: sealed_output.map(str::to_owned),
            receipt: skillbox_jc::dsse::Envelope::new("t", b"{}"),
            owner_note: None,
            error,
            no_hardware_isolation: true,
        };
        let exceeded = Some(RunFailure::CoverageExceeded);
        assert!(day_used_up(
            &receipt(RunStatus::Failed),
            &view(None, exceeded)
        ));
        // An answered run whose unsigned code was rewritten: the receipt says it ran.
        assert!(!day_used_up(&receipt(RunStatus::Ok), &view(None, exceeded)));
        assert!(!day_used_up(
            &receipt(RunStatus::Failed),
            &view(Some("AAAA"), exceeded)
        ));
        assert!(!day_used_up(
            &receipt(RunStatus::Failed),
            &view(None, Some(RunFailure::Internal))
        ));
    }

    #[test]
    fn a_busy_box_is_asked_again_soon_then_less_often_never_past_four_seconds() {
        for attempt in 0..40 {
            let p = busy_pause(attempt);
            let base = (200.0 * 1.5f64.powi(attempt.min(16) as i32)).min(2000.0) as u64;
            assert!(
                p >= Duration::from_millis(base) && p < Duration::from_millis(2 * base),
                "attempt {attempt}: {p:?}"
            );
        }
        assert!(busy_pause(0) < Duration::from_millis(400));
        assert!(busy_pause(u32::MAX) < Duration::from_secs(4));
    }

    #[test]
    fn only_a_full_box_counts_as_busy() {
        assert!(is_busy(&JcError::Busy(3)));
        assert!(is_busy(&JcError::Remote {
            status: 503,
            code: "busy".into()
        }));
        assert!(!is_busy(&JcError::Transport("refused".into())));
        assert!(!is_busy(&JcError::Remote {
            status: 503,
            code: "provider_unavailable".into()
        }));
    }

    /// A verified insecure-dev run `run_id` whose stakes are sealed to `hpke_public_key`.
    fn dev_run(run_id: &str, hpke_public_key: [u8; 32]) -> VerifiedRun {
        VerifiedRun {
            run_id: run_id.into(),
            program_hash: ProgramHash([0; 32]),
            platform: "insecure-dev".into(),
            measurement: "ab".repeat(48),
            hpke_public_key,
            receipt_key: ed25519_dalek::SigningKey::from_bytes(&[1; 32]).verifying_key(),
            expires_at: 1,
            no_hardware_isolation: true,
            tcb_status: None,
            tls_spki_sha256: None,
        }
    }

    /// The owner's stake carries its `[guard]` thresholds to the box as the `day_limits` entry
    /// (opened here with the run's key, as the box opens it), and its ledger names the item
    /// `day_limits` with no source: it is the owner's configuration, not data of its. A caller
    /// stakes none, and a caller source of any name is ledgered as the source it is.
    #[test]
    fn an_owners_stake_carries_its_day_limits_and_the_ledger_names_them_no_source() {
        use crate::calls::records::tests::started;
        use crate::sources::{SourceKind, Sources};
        use skillbox_jc::seal::{self, Purpose};
        let store = std::sync::Arc::new(crate::store::Store::open_in_memory().expect("store"));
        let key = std::sync::Arc::new(crate::crypto::DataKey::from_bytes(&[9u8; 32]));
        let sources = Sources::new(store.clone(), key.clone());
        let skills = crate::skills::Skills::new(store.clone(), key.clone(), "local.test");
        skills
            .import(
                b"---\nname: taste\ndescription: Tastes.\nprovider: local\n---\nThe body.\n",
                None,
            )
            .expect("skill");
        let pair = HpkeKeyPair::generate();
        let run = dev_run(&"a".repeat(32), pair.public());
        let limits = DayLimits {
            coverage_permille: 420,
            canary_coverage_permille: 0,
        };
        let row = |role: Role, sources: Vec<String>| {
            let mut call = started(role);
            call.skill = "taste".into();
            CallRow {
                call,
                program: None,
                box_url: None,
                verified: None,
                sources,
                receipt: None,
            }
        };
        let (sealed, items) = seal_for_stake(
            &run,
            skillbox_jc::Role::Owner,
            &row(Role::Owner, vec![]),
            (&sources, &skills),
            Some(limits),
        )
        .expect("sealed");
        let info = seal::info(
            Purpose::Stake(skillbox_jc::Role::Owner),
            &run.run_id,
            &run.program_hash,
        );
        let entries =
            seal::open(&sealed, &pair, &info, || JcError::Internal("info".into())).expect("open");
        let day = entries
            .iter()
            .find(|e| e.name == DAY_LIMITS_ENTRY)
            .expect("the stake carries the day limits");
        assert_eq!(day.data.as_slice(), limits.to_bytes().as_slice());
        let item = items
            .iter()
            .find(|i| i.stake == DAY_LIMITS_ENTRY)
            .expect("the ledger names the day limits");
        assert_eq!(item.source, None, "the day limits are no source");
        assert!(items.iter().all(|i| i.source.is_none()), "{items:?}");

        // A caller's source called `day_limits` is a source, and the caller stakes no limits.
        sources
            .put(DAY_LIMITS_ENTRY, SourceKind::Text, b"my notes")
            .expect("source");
        sources
            .set_shareable(DAY_LIMITS_ENTRY, true)
            .expect("shareable");
        store
            .write(|tx| {
                crate::sources::put_in(
                    tx,
                    &key,
                    &records::request_source(&started(Role::Caller).id),
                    SourceKind::Text,
                    b"a question",
                )
            })
            .expect("request");
        let (_, items) = seal_for_stake(
            &run,
            skillbox_jc::Role::Caller,
            &row(Role::Caller, vec![DAY_LIMITS_ENTRY.into()]),
            (&sources, &skills),
            None,
        )
        .expect("sealed");
        let stakes: Vec<(&str, Option<&str>)> = items
            .iter()
            .map(|i| (i.stake.as_str(), i.source.as_deref()))
            .collect();
        assert_eq!(
            stakes,
            [("request", None), ("source", Some(DAY_LIMITS_ENTRY))]
        );
    }

    #[test]
    fn a_remembered_run_is_used_only_while_it_is_the_calls_run() {
        let mut row = CallRow {
            call: records::tests::started(Role::Owner),
            program: None,
            box_url: None,
            verified: None,
            sources: vec![],
            receipt: None,
        };
        let run = |id: &str| dev_run(id, [7; 32]);
        let mut map = std::collections::HashMap::new();
        map.insert(("c1".to_owned(), Role::Owner), run(&"a".repeat(32)));
        assert!(remembered(&map, &row).is_none(), "the call has no run yet");
        row.call.run_id = Some("a".repeat(32));
        assert_eq!(
            remembered(&map, &row).map(|v| v.run_id),
            Some("a".repeat(32))
        );
        // The call's run is another now (a second session, another box): the remembered one,
        // whose keys the stake would be sealed to, is not used.
        row.call.run_id = Some("b".repeat(32));
        assert!(remembered(&map, &row).is_none());
    }
}
