//! The box's run logic, free of HTTP: jc.open, jc.attest, jc.stake, jc.submit, the run itself and
//! jc.result. The server in [`crate::server`] is a thin layer over [`BoxCore`].
//!
//! Invariants: a run's X25519 and Ed25519 keys are made fresh at open and dropped (zeroized) when
//! the run ends, is cancelled or expires; a run id is never reused and a spent one is refused; a
//! program runs at most once per box (across restarts too when the box keeps a spent-program
//! list, [`BoxCore::with_spent_log`]); nothing runs before both parties staked and submitted;
//! opened stakes live in zeroizing buffers and are dropped as soon as the provider answered.
//!
//! With a run store ([`BoxCore::with_run_store`], [`store`]) every run, its keys, its opened
//! stakes and its result are also on disk, sealed under the box storage key, before the step
//! that made them is answered; a restarted box reads them back and [`BoxCore::resume`] finishes
//! the runs that were running. The run's keys then live on disk (sealed) until the run ends.
//! Split by job: [`limits`] (token buckets), [`failure`] (closed run failures), [`store`].

pub mod failure;
pub mod limits;
pub mod store;

pub use failure::RunFailure;
use limits::Limiter;
pub use limits::{Client, Rate, client_of};

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use skillbox_providers::{ChatRequest, FinishReason, ProviderFailure};

use store::RunStore;
use zeroize::Zeroizing;

use crate::attest::{Attestation, Attester, Statement};
use crate::day::{
    Allowance, Caught, DayBook, DayChange, DayKey, DayLimits, InFlight, InFlightMark,
    Tally as DayTally,
};
use crate::dsse::{
    ApprovedProgram, Envelope, approved_program, key_hex, stored_program, verify_action,
};
use crate::error::{JcError, Result};
use crate::program::{INSECURE_DEV, Program, ProgramHash, Role};
use crate::receipt::{self, Receipt, RunStatus};
use crate::registry::ProviderRegistry;
use crate::seal::{self, Entry, HpkeKeyPair, Purpose, Sealer};

/// Unix seconds now.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[derive(Clone, Debug)]
pub struct BoxConfig {
    /// Longest a run may stay open (capped further by the program's expiry).
    pub run_ttl_secs: u64,
    /// How long a finished run's sealed result and receipt wait to be fetched.
    pub result_ttl_secs: u64,
    pub max_runs: usize,
    /// Memory the box sets aside for stakes. Reserved when a stake is posted (three times its
    /// declared size while it is read and opened, its size once held), not at open: opening is
    /// free for anyone with two fresh keys, so a reservation there let eight opens with 64 MiB
    /// limits hold the whole budget. `open` still answers `busy` when the program's limits do not
    /// fit beside what is held, so a node moves before it stakes anything.
    pub stake_budget_bytes: u64,
    /// The part of the budget one client address may hold (uploads and held stakes), so one
    /// sender cannot take all of it: an upload past it is refused `busy`.
    pub stake_budget_per_client_bytes: u64,
    /// Runs one client address may have opened that no party has begun staking in yet (at
    /// most half of `max_runs`): an open is free, so this is what keeps one sender from taking
    /// every run slot. A node stakes right after it opens, so its own count stays low.
    pub max_unstaked_per_client: usize,
    /// Latest `expires_at` a program may carry, from now: a program is remembered as spent (in
    /// memory and in the spent-program list) until it expires, so an unbounded expiry let
    /// open-then-delete grow both forever. Beyond it, `open` answers `expires_too_far`.
    pub max_program_ttl_secs: u64,
    /// A run no party has begun staking in within this many seconds of its open is dropped
    /// (its run id and program spent): an open costs the asker nothing, so an idle run must
    /// not hold a run slot for the whole `run_ttl_secs`.
    pub unstaked_ttl_secs: u64,
    /// Longest a stake upload may take; a slower one is cut and its reservation released.
    pub stake_upload_secs: u64,
    /// Requests that cost the box (open, stake, its own attestation) per client address: a
    /// token bucket.
    pub client_rate: Rate,
    /// Opens per program key (either party's node key): a token bucket.
    pub key_rate: Rate,
    /// When set, a program is opened only if one of its parties' node keys (lowercase hex) is
    /// listed: the box serves its operator's nodes, not anyone who finds its URL.
    pub allowed_keys: Option<Vec<String>>,
    /// Sampling for the prompt; the seed is derived from the program hash, so one prompt gets one
    /// answer. The prompt's tag suffix is drawn per run (`prompt::build`), so two runs of a
    /// program send different prompts.
    pub temperature: f32,
    /// Runs the box keeps at once, open, running or finished and waiting to be fetched (at
    /// least twice `max_runs`): each is a row on disk with a run store, and memory without.
    /// At the limit an open drops the oldest finished run already fetched twice; with none,
    /// it is refused `busy`.
    pub max_kept_runs: usize,
}

impl Default for BoxConfig {
    fn default() -> Self {
        BoxConfig {
            run_ttl_secs: 600,
            result_ttl_secs: 3600,
            max_runs: 1000,
            stake_budget_bytes: 1 << 30,
            stake_budget_per_client_bytes: 1 << 28,
            max_unstaked_per_client: 256,
            max_program_ttl_secs: 3600,
            unstaked_ttl_secs: 120,
            stake_upload_secs: 120,
            // Room for a node's burst of hundreds of calls at once (an open and two stakes
            // each); an operator on a public address lowers them.
            client_rate: Rate {
                burst: 2048.0,
                per_sec: 512.0,
            },
            key_rate: Rate {
                burst: 1024.0,
                per_sec: 256.0,
            },
            allowed_keys: None,
            temperature: 0.7,
            max_kept_runs: 20_000,
        }
    }
}

/// The run's own keys: made at open, gone when the run ends.
struct RunKeys {
    hpke: HpkeKeyPair,
    receipt: SigningKey,
}

impl RunKeys {
    /// The HPKE secret, then the receipt key's seed (for the run store, sealed).
    fn to_bytes(&self) -> Zeroizing<[u8; 64]> {
        let mut out = Zeroizing::new([0u8; 64]);
        out[..32].copy_from_slice(&self.hpke.secret_bytes());
        out[32..].copy_from_slice(&self.receipt.to_bytes());
        out
    }

    fn from_bytes(b: &[u8]) -> Result<RunKeys> {
        let seed: Zeroizing<[u8; 32]> = Zeroizing::new(
            b.get(32..64)
                .and_then(|s| s.try_into().ok())
                .ok_or(JcError::StoreTampered)?,
        );
        Ok(RunKeys {
            hpke: HpkeKeyPair::from_secret_bytes(b.get(..32).ok_or(JcError::StoreTampered)?)
                .map_err(|_| JcError::StoreTampered)?,
            receipt: SigningKey::from_bytes(&seed),
        })
    }

    fn generate() -> RunKeys {
        let mut seed = Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut seed[..]).expect("the OS random source is available");
        RunKeys {
            hpke: HpkeKeyPair::generate(),
            receipt: SigningKey::from_bytes(&seed),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Open,
    Running,
    Done,
    Failed,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Open => "open",
            Phase::Running => "running",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }
}

/// The fixed answer a caller gets when the output guard withholds one, and what stands in for
/// the skill body when it regenerates one.
pub use skillbox_guard::{NEUTRAL_INSTRUCTION, WITHHELD_ANSWER};

/// The provider's answer as the box will seal it.
struct Answered {
    answer: Zeroizing<String>,
    truncated: bool,
    /// The output guard withheld or regenerated it.
    guard_acted: bool,
    /// How much the answer released carries of the body, never where (a guarded run only): for
    /// the box's day book, never the owner.
    coverage: Option<skillbox_guard::CoverageLevels>,
    /// What the answer the guard caught carried, charged to the day book too (a guarded run
    /// whose guard acted): a catch is no free guess.
    caught: Option<Caught>,
}

/// A finished run's result as both parties fetch it: the `ResultView` JSON without the owner
/// note, made once when the run ends (the sealed answer's base64 written straight in), the
/// note, and the failure for `status`.
struct Served {
    json: axum::body::Bytes,
    /// A guarded run's owner note: its sealed bytes until the first fetch that takes it (the
    /// owner's), then only what makes it again (a caller, who cannot open it, fetches without
    /// it; a note is up to 257 KiB, for a body near a 1 MiB limit, and a finished run is kept
    /// an hour).
    note: Option<NoteSlot>,
    error: Option<RunFailure>,
}

#[derive(Clone)]
enum NoteSlot {
    /// A record of the older forms has no [`NoteSpec`]: its bytes stay.
    Sealed {
        bytes: Arc<Vec<u8>>,
        spec: Option<Arc<NoteSpec>>,
    },
    Spec(Arc<NoteSpec>),
}

/// `json` (an object) with the owner note's member in front.
fn with_note(json: &[u8], note: &[u8]) -> axum::body::Bytes {
    let mut out = Vec::with_capacity(json.len() + note.len().div_ceil(3) * 4 + 32);
    out.extend_from_slice(b"{\"owner_note\":\"");
    push_base64(&mut out, note);
    out.extend_from_slice(b"\",");
    out.extend_from_slice(json.get(1..).unwrap_or_default());
    axum::body::Bytes::from(out)
}

/// Append `data` in standard base64, encoded straight into `out` (the crate's `encode_string`
/// goes through a 1 KiB buffer and checks each piece is UTF-8: for a 257 KiB owner note that
/// was a third of the encoding's cost).
fn push_base64(out: &mut Vec<u8>, data: &[u8]) {
    use base64::Engine as _;
    let at = out.len();
    out.resize(at + data.len().div_ceil(3) * 4, 0);
    let n = base64::engine::general_purpose::STANDARD
        .encode_slice(data, &mut out[at..])
        .unwrap_or(0);
    out.truncate(at + n);
}

/// The result's JSON without the owner note: the sealed answer's base64 written straight into
/// the buffer (it needs no escaping), then the small fields as serde writes them.
fn served(
    run_id: &str,
    f: &Finished,
    note: Option<NoteSlot>,
    no_hardware_isolation: bool,
) -> Result<Served> {
    let small = ResultView {
        run_id: run_id.into(),
        status: if f.error.is_none() {
            RunStatus::Ok
        } else {
            RunStatus::Failed
        },
        sealed_output: None,
        receipt: f.receipt.clone(),
        owner_note: None,
        error: f.error,
        no_hardware_isolation,
    };
    let small = serde_json::to_string(&small)
        .map_err(|e| JcError::Internal(format!("result view: {e}")))?;
    let room = f
        .sealed_output
        .as_ref()
        .map_or(0, |b| b.len().div_ceil(3) * 4 + 32);
    let mut json = Vec::with_capacity(room + small.len());
    json.push(b'{');
    if let Some(blob) = &f.sealed_output {
        json.extend_from_slice(b"\"sealed_output\":\"");
        push_base64(&mut json, blob);
        json.extend_from_slice(b"\",");
    }
    // `small` is an object with at least `run_id`: its members follow the blob.
    json.extend_from_slice(small.strip_prefix('{').unwrap_or(&small).as_bytes());
    Ok(Served {
        json: axum::body::Bytes::from(json),
        note,
        error: f.error,
    })
}

struct Finished {
    sealed_output: Option<Vec<u8>>,
    /// A guarded run's [`crate::receipt::OwnerNote`], sealed to the owner.
    owner_note: Option<SealedNote>,
    receipt: Envelope,
    error: Option<RunFailure>,
}

/// A sealed owner note and what makes it again.
struct SealedNote {
    sealed: Vec<u8>,
    spec: NoteSpec,
}

/// What makes a guarded run's sealed owner note again byte for byte ([`Sealer::seeded`]): the
/// seed of its seal and what it says; the run store keeps this (~80 bytes) instead of the
/// note. `sha256` is the digest the receipt signs, checked whenever the note is made again.
struct NoteSpec {
    seed: Zeroizing<[u8; 32]>,
    acted: bool,
    /// The coverage entry's bytes: [`skillbox_guard::CoverageLevels`], or in a record written
    /// before them (`levels` false) the positions bitmap a note then carried.
    coverage: Option<Vec<u8>>,
    /// `coverage` is levels, sealed as [`OwnerNote::COVERAGE_ENTRY`]; a record written before
    /// sealed positions as [`OwnerNote::POSITIONS_ENTRY`], and is made again as it was.
    ///
    /// [`OwnerNote::COVERAGE_ENTRY`]: crate::receipt::OwnerNote::COVERAGE_ENTRY
    /// [`OwnerNote::POSITIONS_ENTRY`]: crate::receipt::OwnerNote::POSITIONS_ENTRY
    levels: bool,
    sha256: [u8; 32],
    /// The plaintext length the note was padded to ([`OWNER_NOTE_PADDED`]; in a record written
    /// before levels, [`OwnerNote::padded_len_for`] of the body); `None` in a record written
    /// before it was kept, whose note was padded to the program's body limit
    /// ([`OwnerNote::padded_len`]).
    ///
    /// [`OwnerNote::padded_len_for`]: crate::receipt::OwnerNote::padded_len_for
    /// [`OwnerNote::padded_len`]: crate::receipt::OwnerNote::padded_len
    padded: Option<u64>,
}

/// In [`NoteSpec`]'s form byte: a positions bitmap follows (records written before levels).
const NOTE_HAS_COVERAGE: u8 = 1;
/// In [`NoteSpec`]'s form byte: the padded length follows (8 bytes, big-endian) before any
/// coverage. Records written before it have 0 or 1 there.
const NOTE_HAS_PADDED: u8 = 2;
/// In [`NoteSpec`]'s form byte: coverage levels follow (never with [`NOTE_HAS_COVERAGE`]).
const NOTE_HAS_LEVELS: u8 = 4;

impl NoteSpec {
    /// seed, sha256, acted, the form byte, the padded length, the coverage.
    fn to_bytes(&self) -> Zeroizing<Vec<u8>> {
        let cov = self.coverage.as_deref();
        let mut out = Zeroizing::new(Vec::with_capacity(74 + cov.map_or(0, <[u8]>::len)));
        out.extend_from_slice(&self.seed[..]);
        out.extend_from_slice(&self.sha256);
        out.push(self.acted as u8);
        let has = if self.levels {
            NOTE_HAS_LEVELS
        } else {
            NOTE_HAS_COVERAGE
        };
        out.push((cov.is_some() as u8 * has) | (self.padded.is_some() as u8 * NOTE_HAS_PADDED));
        if let Some(padded) = self.padded {
            out.extend_from_slice(&padded.to_be_bytes());
        }
        out.extend_from_slice(cov.unwrap_or_default());
        out
    }

    fn from_bytes(b: &[u8]) -> Result<NoteSpec> {
        let seed: [u8; 32] = b
            .get(..32)
            .and_then(|s| s.try_into().ok())
            .ok_or(JcError::StoreTampered)?;
        let sha256: [u8; 32] = b
            .get(32..64)
            .and_then(|s| s.try_into().ok())
            .ok_or(JcError::StoreTampered)?;
        let flag = |i: usize| match b.get(i) {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(JcError::StoreTampered),
        };
        let acted = flag(64)?;
        let form = *b.get(65).ok_or(JcError::StoreTampered)?;
        if form & !(NOTE_HAS_COVERAGE | NOTE_HAS_PADDED | NOTE_HAS_LEVELS) != 0
            || form & (NOTE_HAS_COVERAGE | NOTE_HAS_LEVELS) == NOTE_HAS_COVERAGE | NOTE_HAS_LEVELS
        {
            return Err(JcError::StoreTampered);
        }
        let levels = form & NOTE_HAS_LEVELS != 0;
        let has_coverage = levels || form & NOTE_HAS_COVERAGE != 0;
        let (padded, rest) = if form & NOTE_HAS_PADDED != 0 {
            let len: [u8; 8] = b
                .get(66..74)
                .and_then(|s| s.try_into().ok())
                .ok_or(JcError::StoreTampered)?;
            (Some(u64::from_be_bytes(len)), &b[74..])
        } else {
            (None, &b[66..])
        };
        if !has_coverage && !rest.is_empty() {
            return Err(JcError::StoreTampered);
        }
        Ok(NoteSpec {
            seed: Zeroizing::new(seed),
            acted,
            coverage: has_coverage.then(|| rest.to_vec()),
            levels,
            sha256,
            padded,
        })
    }

    /// The note again, exactly as first sealed (its digest checked against the receipt's).
    fn reseal(&self, program: &ApprovedProgram, run_id: &str) -> Result<Vec<u8>> {
        let padded = self.padded.unwrap_or_else(|| {
            crate::receipt::OwnerNote::padded_len(program.program.owner_inputs.body_max_bytes)
        });
        let sealed = seal_note(
            program,
            run_id,
            &self.seed,
            self.acted,
            self.coverage.as_deref().map(|c| (c, self.levels)),
            padded,
        )?;
        if <[u8; 32]>::from(Sha256::digest(&sealed)) != self.sha256 {
            return Err(JcError::Internal("owner note not made again".into()));
        }
        Ok(sealed)
    }
}

/// Stake memory held for one role of a run, and who sent it.
#[derive(Clone, Copy)]
struct Hold {
    client: Client,
    bytes: u64,
}

struct Run {
    program: Arc<ApprovedProgram>,
    /// The twice-signed program as opened: what the run store keeps (and checks again on load).
    envelope: Arc<Envelope>,
    /// Times the run went to the provider (counted before each request, on disk with a store):
    /// a restarted box asks again only while this is below [`MAX_PROVIDER_ATTEMPTS`].
    attempts: u32,
    /// Its program names a prompt template this build does not run: a run the box opened
    /// before an upgrade and read back from its store. It never reaches a provider; it fails
    /// `prompt_template_unknown` with a signed receipt ([`BoxCore::execute`]).
    template_unknown: bool,
    /// Bumped at every write to the run store, so an older snapshot never replaces a newer one.
    version: u64,
    /// [`BoxCore::execute`] has taken the run (in this process): it runs once.
    taken: bool,
    /// Times its result was served (in this process): a finished run served twice may make
    /// room at the kept-run limit.
    fetched: u32,
    /// Attestations made for it (in this process), at most [`MAX_ATTESTATIONS_PER_RUN`].
    attested: u32,
    /// Stake memory held for this run, by role: an upload being read, then the opened stake.
    /// Counted against the budget while the run is open or running.
    held: HashMap<Role, Hold>,
    /// Roles whose upload is being read now: one upload per (run, role) at a time.
    uploading: Vec<Role>,
    /// Who opened it (unstaked runs per client).
    opened_by: Client,
    opened_at: u64,
    keys: Option<Arc<RunKeys>>,
    expires_at: u64,
    stakes: HashMap<Role, Vec<Entry>>,
    submitted: HashMap<Role, bool>,
    phase: Phase,
    /// The result once the run ended (only its served form is kept in memory).
    finished: Option<Served>,
    /// When a finished run's result is dropped.
    keep_until: u64,
    /// Its program's line in the spent-program list (0: no list).
    logged: u64,
    /// Woken at every change a waiting request may be waiting for (a stake, a submit, the
    /// result, the end): `result_within` and `submit_within` sleep on it instead of being
    /// polled.
    changed: Arc<tokio::sync::Notify>,
    /// What this run counts for in [`Tally`], as last counted ([`State::retally`]).
    counted: Share,
}

impl Run {
    /// Whether the run holds memory and a run slot.
    fn live(&self) -> bool {
        matches!(self.phase, Phase::Open | Phase::Running)
    }

    /// What the run counts for now (see [`Share`]).
    fn share(&self) -> Share {
        let live = self.live();
        // An upload being read counts until its slot is given back, whatever became of the
        // run meanwhile: its buffer keeps filling.
        let hold = |role| match self.held.get(&role) {
            Some(h) if live || self.uploading.contains(&role) => (h.client, h.bytes),
            _ => (None, 0),
        };
        Share {
            live,
            holds: [hold(Role::Caller), hold(Role::Owner)],
            unstaked: if self.phase == Phase::Open
                && self.stakes.is_empty()
                && self.uploading.is_empty()
            {
                self.opened_by
            } else {
                None
            },
            evictable: (!live && self.fetched >= 2).then_some(self.keep_until),
        }
    }

    /// Refuse an operation the run's phase does not allow.
    fn expect_phase(&self, phase: Phase, action: &str) -> Result<()> {
        if self.phase == phase {
            return Ok(());
        }
        Err(JcError::WrongState {
            state: self.phase.as_str().into(),
            action: action.into(),
        })
    }
}

#[derive(Default)]
struct State {
    /// Every run the box keeps; changed only through [`State::insert_run`],
    /// [`State::remove_run`] and, after a change of a run in place, [`State::retally`].
    runs: HashMap<String, Run>,
    /// Spent run ids and when they may be forgotten (random 128-bit ids never come back).
    spent_runs: HashMap<String, u64>,
    /// Programs opened here, with their run id; kept until the program expires.
    programs: HashMap<ProgramHash, (String, u64)>,
    /// Uploads still being read whose run was removed (deleted, swept): their reservation
    /// stays in the tally until their slot is given back ([`BoxCore::release_stake`]), so a
    /// run deleted mid-upload does not free memory the upload goes on filling.
    orphaned: HashMap<(String, Role), Hold>,
    tally: Tally,
}

/// What one run counts for in the [`Tally`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Share {
    /// Open or running: it holds a run slot.
    live: bool,
    /// Stake bytes it holds (caller, owner) and the client each came from, while live.
    holds: [(Client, u64); 2],
    /// The client that opened it, while it is open and nobody has begun staking in it.
    unstaked: Client,
    /// Its `keep_until`, once it is finished and was fetched twice: it may make room at the
    /// kept-run limit.
    evictable: Option<u64>,
}

impl Share {
    /// What an upload whose run is gone counts for: its bytes, nothing else.
    fn orphan(h: Hold) -> Share {
        Share {
            holds: [(h.client, h.bytes), (None, 0)],
            ..Share::default()
        }
    }
}

/// What `open`, `begin_stake` and `/healthz` ask of all runs, kept up to date as runs change:
/// the box keeps up to `max_kept_runs` (20,000) runs, and counting them on every request under
/// the state lock made each run's cost grow with the runs kept.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    live: u64,
    held: u64,
    held_by: HashMap<IpAddr, u64>,
    unstaked_by: HashMap<IpAddr, u64>,
    /// (keep_until, run id) of the evictable runs, oldest first.
    evictable: BTreeSet<(u64, String)>,
}

impl Tally {
    /// Count `s` in (`add`) or out.
    fn count(&mut self, id: &str, s: &Share, add: bool) {
        fn adjust(v: u64, by: u64, add: bool) -> u64 {
            if add { v + by } else { v.saturating_sub(by) }
        }
        fn step(m: &mut HashMap<IpAddr, u64>, ip: IpAddr, by: u64, add: bool) {
            let v = m.entry(ip).or_default();
            *v = adjust(*v, by, add);
            if *v == 0 {
                m.remove(&ip);
            }
        }
        self.live = adjust(self.live, s.live as u64, add);
        for (client, bytes) in s.holds {
            self.held = adjust(self.held, bytes, add);
            if let Some(ip) = client
                && bytes > 0
            {
                step(&mut self.held_by, ip, bytes, add);
            }
        }
        if let Some(ip) = s.unstaked {
            step(&mut self.unstaked_by, ip, 1, add);
        }
        if let Some(until) = s.evictable {
            if add {
                self.evictable.insert((until, id.to_owned()));
            } else {
                self.evictable.remove(&(until, id.to_owned()));
            }
        }
    }
}

fn not_found(run_id: &str) -> JcError {
    JcError::RunNotFound(short(run_id))
}

impl State {
    /// A kept run by id: a spent id and an unknown one refused with their own errors (what
    /// every route that names a run answers first).
    fn kept(&self, run_id: &str) -> Result<&Run> {
        self.unspent(run_id)?;
        self.runs.get(run_id).ok_or_else(|| not_found(run_id))
    }

    /// [`Self::kept`], to change the run.
    fn kept_mut(&mut self, run_id: &str) -> Result<&mut Run> {
        self.unspent(run_id)?;
        self.runs.get_mut(run_id).ok_or_else(|| not_found(run_id))
    }

    fn unspent(&self, run_id: &str) -> Result<()> {
        match self.spent_runs.contains_key(run_id) {
            true => Err(JcError::RunSpent(short(run_id))),
            false => Ok(()),
        }
    }

    /// Count a run's change in place: what it counted for before out, what it counts for now in.
    fn retally(&mut self, id: &str) {
        let Some(run) = self.runs.get_mut(id) else {
            return;
        };
        let now = run.share();
        if now != run.counted {
            let before = std::mem::replace(&mut run.counted, now);
            self.tally.count(id, &before, false);
            self.tally.count(id, &run.counted, true);
        }
        self.check_tally();
    }

    fn insert_run(&mut self, id: String, mut run: Run) {
        run.counted = Share::default();
        if let Some(old) = self.runs.insert(id.clone(), run) {
            self.tally.count(&id, &old.counted, false);
        }
        self.retally(&id);
    }

    fn remove_run(&mut self, id: &str) -> Option<Run> {
        let run = self.runs.remove(id)?;
        self.tally.count(id, &run.counted, false);
        for role in &run.uploading {
            if let Some(h) = run.held.get(role) {
                self.orphaned.insert((id.to_owned(), *role), *h);
                self.tally.count(id, &Share::orphan(*h), true);
            }
        }
        self.check_tally();
        Some(run)
    }

    /// Give back the reservation of an upload whose run was removed while it was read.
    fn release_orphan(&mut self, id: &str, role: Role) {
        if let Some(h) = self.orphaned.remove(&(id.to_owned(), role)) {
            self.tally.count(id, &Share::orphan(h), false);
            self.check_tally();
        }
    }

    /// Tests (debug builds): the tally is what counting every run gives.
    fn check_tally(&self) {
        #[cfg(debug_assertions)]
        {
            let mut scratch = Tally::default();
            for (id, run) in &self.runs {
                scratch.count(id, &run.share(), true);
            }
            for ((id, _), h) in &self.orphaned {
                scratch.count(id, &Share::orphan(*h), true);
            }
            debug_assert_eq!(scratch, self.tally, "the run tally drifted");
        }
    }
}

/// What the box holds in memory ([`BoxCore::memory`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Memory {
    pub runs: usize,
    pub spent_runs: usize,
    pub programs: usize,
    /// Stake bytes held (uploads being read and opened stakes) by open and running runs.
    pub held_bytes: u64,
    /// Lines of the spent-program list on disk (0 without one).
    pub spent_list_lines: usize,
}

/// What `POST /v1/runs` answers.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Opened {
    pub run_id: String,
    pub program_hash: String,
    pub expires_at: u64,
}

/// What `GET /v1/runs/{id}` answers: state only, never material.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunView {
    pub run_id: String,
    pub program_hash: String,
    pub state: Phase,
    pub staked: Vec<Role>,
    pub submitted: Vec<Role>,
    pub expires_at: u64,
    pub platform: String,
    pub no_hardware_isolation: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunFailure>,
}

/// What `GET /v1/runs/{id}/result` answers: the answer sealed to the caller, and the receipt.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResultView {
    pub run_id: String,
    pub status: RunStatus,
    /// base64 of the sealed answer (absent when the run failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_output: Option<String>,
    pub receipt: Envelope,
    /// base64 of a guarded run's note to the owner (whether the guard acted), sealed to the
    /// owner's node key: the caller fetches it too and cannot open it, and it is the same size
    /// whatever it says. Absent for an unguarded program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_note: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunFailure>,
    pub no_hardware_isolation: bool,
}

pub struct BoxCore {
    attester: Arc<dyn Attester>,
    providers: ProviderRegistry,
    config: BoxConfig,
    state: Mutex<State>,
    limits: Mutex<Limits>,
    /// The opened programs on disk (a restarted box still refuses a replay); `None` in memory.
    spent: Option<crate::spent::SpentLog>,
    /// Runs on disk, sealed (a restarted box finishes them); `None` in memory.
    store: Option<RunStore>,
    /// What each caller's released answers carried of each owner's skill today
    /// ([`crate::day`]): the box refuses a run past the owner's day limits. In the run store
    /// when there is one (written with each run's finished record); without one, in memory
    /// only, so a restart resets partial tallies — the owner's node still remembers the days
    /// the box refused.
    day_book: Mutex<DayBook>,
    /// The (owner, caller, skill) with a run between its day check and its count: a second
    /// run of them waits for the first's answer to be counted before it is checked.
    in_flight: InFlight,
    /// A failpoint for the crash harness: abort (as kill -9 would) right after this step is on
    /// disk. `opened`, `staked`, `at_provider`, `result`.
    crash_at: Option<String>,
}

/// How often a run goes to the provider: a box killed while the run was there asks again on
/// restart, up to this many requests in all; then the run fails `interrupted` (a run that kills
/// the box every time must not keep it restarting).
pub const MAX_PROVIDER_ATTEMPTS: u32 = 3;

/// Attestations one run is made: the caller's (with its open, or asked after), the owner's
/// when it asks for its own, and retries. A hardware report is made by the platform one at a
/// time, so without a ceiling whoever opened one run could keep every other run's attestation
/// waiting behind a flood of its own.
pub const MAX_ATTESTATIONS_PER_RUN: u32 = 8;

/// How long a box-level attestation is good for: the asker checks it at once (its nonce is
/// fresh), so this only bounds a statement's life if it leaks.
pub const BOX_ATTESTATION_TTL_SECS: u64 = 300;

/// What the box asks of an asker's nonce: 16 to 128 hex digits.
fn check_nonce(nonce: &str) -> Result<()> {
    if nonce.len() < 16 || nonce.len() > 128 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(JcError::BadRequest(
            "nonce must be 16-128 hex digits".into(),
        ));
    }
    Ok(())
}

/// A run as the run store keeps it (sealed): the run's keys (while it has them) in front, then
/// this as JSON. Stakes are rows of their own.
#[derive(Serialize, Deserialize)]
struct Record {
    envelope: Envelope,
    phase: Phase,
    submitted: Vec<Role>,
    opened_at: u64,
    expires_at: u64,
    keep_until: u64,
    attempts: u32,
    version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finished: Option<StoredFinished>,
}

#[derive(Serialize, Deserialize)]
struct StoredFinished {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed_output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner_note: Option<String>,
    receipt: Envelope,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<RunFailure>,
}

/// Form 3: the keys' 66 bytes, the JSON's u32 length, the JSON, then the sealed answer raw and
/// the owner note's [`NoteSpec`] (each a presence byte, a u64 length and the bytes). Form 2
/// (still read) had the sealed note itself where the spec is: a guarded run's 257 KiB, sealed
/// again under the storage key, copied into SQLite's pages and WAL and checkpointed, per run.
/// Form 1 (still read) had both in base64 inside the JSON.
const RECORD_FORMAT: u8 = 3;
const RECORD_FORMAT_RAW_NOTE: u8 = 2;
const RECORD_FORMAT_BASE64: u8 = 1;

/// The two blobs after the JSON (forms 2 and 3); anything else is `store_tampered`.
fn record_blobs(mut rest: &[u8]) -> Result<[Option<Vec<u8>>; 2]> {
    let mut blob = || -> Result<Option<Vec<u8>>> {
        let (&present, tail) = rest.split_first().ok_or(JcError::StoreTampered)?;
        let len: [u8; 8] = tail
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or(JcError::StoreTampered)?;
        let len = usize::try_from(u64::from_be_bytes(len)).map_err(|_| JcError::StoreTampered)?;
        let bytes = tail
            .get(8..8usize.saturating_add(len))
            .ok_or(JcError::StoreTampered)?;
        rest = &tail[8 + len..];
        match (present, len) {
            (1, _) => Ok(Some(bytes.to_vec())),
            (0, 0) => Ok(None),
            _ => Err(JcError::StoreTampered),
        }
    };
    let blobs = [blob()?, blob()?];
    if !rest.is_empty() {
        return Err(JcError::StoreTampered);
    }
    Ok(blobs)
}

/// What a record says that the run in memory does not (yet): a result is on disk before it is
/// published.
struct Ending<'a> {
    phase: Phase,
    keep_until: u64,
    finished: &'a Finished,
}

impl Run {
    /// The record the run store keeps for this run now, or as `ending` ends it (bumps the
    /// version).
    fn record(&mut self, ending: Option<Ending<'_>>) -> Result<(u64, Zeroizing<Vec<u8>>)> {
        self.version += 1;
        let mut submitted: Vec<Role> = self.submitted.keys().copied().collect();
        submitted.sort_by_key(|r| r.as_str());
        // A run is written while it is open or running, and once as it ends (`ending`): a
        // finished run's record is never rewritten.
        let (phase, keep_until, finished, keys) = match &ending {
            Some(e) => (e.phase, e.keep_until, Some(e.finished), None),
            None => (self.phase, self.keep_until, None, self.keys.as_deref()),
        };
        let record = Record {
            envelope: (*self.envelope).clone(),
            phase,
            submitted,
            opened_at: self.opened_at,
            expires_at: self.expires_at,
            keep_until,
            attempts: self.attempts,
            version: self.version,
            finished: finished.map(|f| StoredFinished {
                sealed_output: None,
                owner_note: None,
                receipt: f.receipt.clone(),
                error: f.error,
            }),
        };
        let json = serde_json::to_vec(&record)
            .map_err(|e| JcError::Internal(format!("run record: {e}")))?;
        let spec = finished
            .and_then(|f| f.owner_note.as_ref())
            .map(|n| n.spec.to_bytes());
        let blobs = [
            finished.and_then(|f| f.sealed_output.as_deref()),
            spec.as_ref().map(|s| s.as_slice()),
        ];
        let blob_len: usize = blobs.iter().map(|b| 9 + b.map_or(0, <[u8]>::len)).sum();
        let mut out = Zeroizing::new(Vec::with_capacity(2 + 64 + 4 + json.len() + blob_len));
        out.push(RECORD_FORMAT);
        match keys {
            Some(k) => {
                out.push(1);
                out.extend_from_slice(&k.to_bytes()[..]);
            }
            None => {
                out.push(0);
                out.extend_from_slice(&[0u8; 64]);
            }
        }
        let json_len = u32::try_from(json.len())
            .map_err(|_| JcError::Internal("run record too large".into()))?;
        out.extend_from_slice(&json_len.to_be_bytes());
        out.extend_from_slice(&json);
        for blob in blobs {
            match blob {
                Some(b) => {
                    out.push(1);
                    out.extend_from_slice(&(b.len() as u64).to_be_bytes());
                    out.extend_from_slice(b);
                }
                None => {
                    out.push(0);
                    out.extend_from_slice(&0u64.to_be_bytes());
                }
            }
        }
        Ok((self.version, out))
    }
}

/// A record read back: the program checked again (both signatures), the keys, the result.
fn restore_run(run_id: &str, bytes: &[u8], no_hardware_isolation: bool) -> Result<Run> {
    use base64::Engine as _;
    let unb64 = |s: &String| {
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|_| JcError::StoreTampered)
    };
    let forms = [RECORD_FORMAT, RECORD_FORMAT_RAW_NOTE, RECORD_FORMAT_BASE64];
    if bytes.len() < 66 || !forms.contains(&bytes[0]) {
        return Err(JcError::StoreTampered);
    }
    let keys = match bytes[1] {
        0 => None,
        1 => Some(Arc::new(RunKeys::from_bytes(&bytes[2..66])?)),
        _ => return Err(JcError::StoreTampered),
    };
    let (json, [output, note]) = if bytes[0] == RECORD_FORMAT_BASE64 {
        (&bytes[66..], [None, None])
    } else {
        let len: [u8; 4] = bytes
            .get(66..70)
            .and_then(|b| b.try_into().ok())
            .ok_or(JcError::StoreTampered)?;
        let end = 70usize.saturating_add(u32::from_be_bytes(len) as usize);
        let json = bytes.get(70..end).ok_or(JcError::StoreTampered)?;
        (json, record_blobs(&bytes[end..])?)
    };
    let r: Record = serde_json::from_slice(json).map_err(|_| JcError::StoreTampered)?;
    // The row opened under the storage key, so its program is one this box approved: a
    // template this build no longer runs is an upgrade's doing, not the host's (the run then
    // fails, below); anything else wrong with it is still tampering.
    let program = stored_program(&r.envelope).map_err(|_| JcError::StoreTampered)?;
    let template_unknown = program.program.check_template().is_err();
    let finished = match r.finished {
        Some(f) => {
            let note = match (bytes[0], note) {
                (RECORD_FORMAT, Some(spec)) => {
                    Some(NoteSlot::Spec(Arc::new(NoteSpec::from_bytes(&spec)?)))
                }
                (_, note) => f
                    .owner_note
                    .as_ref()
                    .map(unb64)
                    .transpose()?
                    .or(note)
                    .map(|bytes| NoteSlot::Sealed {
                        bytes: Arc::new(bytes),
                        spec: None,
                    }),
            };
            let f = Finished {
                sealed_output: f.sealed_output.as_ref().map(unb64).transpose()?.or(output),
                owner_note: None,
                receipt: f.receipt,
                error: f.error,
            };
            Some(served(run_id, &f, note, no_hardware_isolation)?)
        }
        None if output.is_some() || note.is_some() => return Err(JcError::StoreTampered),
        None => None,
    };
    // A run is finished exactly when it has a result, and has keys exactly while it has none.
    let ended = matches!(r.phase, Phase::Done | Phase::Failed);
    if ended != finished.is_some() || ended == keys.is_some() {
        return Err(JcError::StoreTampered);
    }
    // A finished run is served as it is (its result was made before the upgrade); an open or
    // running one cannot go on under a template its parties did not sign: it fails with a
    // signed receipt at [`BoxCore::resume`], as a run whose stake did not open does, and takes
    // no more stakes or submits meanwhile.
    if template_unknown && !ended {
        tracing::warn!(
            code = "prompt_template_unknown",
            "a persisted run names a prompt template this build does not run: it fails"
        );
    }
    let phase = match r.phase {
        Phase::Open if template_unknown => Phase::Running,
        phase => phase,
    };
    Ok(Run {
        program: Arc::new(program),
        envelope: Arc::new(r.envelope),
        attempts: r.attempts,
        template_unknown,
        version: r.version,
        taken: false,
        fetched: 0,
        attested: 0,
        held: HashMap::new(),
        uploading: Vec::new(),
        opened_by: None,
        opened_at: r.opened_at,
        keys,
        expires_at: r.expires_at,
        stakes: HashMap::new(),
        submitted: r.submitted.into_iter().map(|role| (role, true)).collect(),
        phase,
        finished,
        keep_until: r.keep_until,
        logged: 0,
        changed: Arc::new(tokio::sync::Notify::new()),
        counted: Share::default(),
    })
}

struct Limits {
    clients: Limiter<std::net::IpAddr>,
    keys: Limiter<String>,
}

/// A stake being read: its role's slot and memory are held until [`BoxCore::commit_stake`]
/// turns it into the run's stake or [`BoxCore::release_stake`] gives it back.
#[derive(Debug)]
pub struct StakeSlot {
    run_id: String,
    role: Role,
    /// sha256 of the sealed bytes, as the verified action signs it.
    digest: String,
    /// The most the body may be (the declared length, else the role's sealed limit).
    pub limit: usize,
    /// The party's submit came with its stake (verified with the stake's action): its go,
    /// taken with the stake, for the run to start once both stakes are in.
    submit: bool,
}

/// What a committed stake did: the role it was, whether its party's submit was taken with it,
/// and whether that made the run start (both stakes in, both submitted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StakeTaken {
    pub role: Role,
    pub submitted: bool,
    pub started: bool,
}

/// Reserved while a stake is read and opened: the body, the opened plaintext, the entries.
const READING_FACTOR: u64 = 3;

/// The run id a program opened before a restart is remembered under: no run has it.
const OPENED_BEFORE_RESTART: &str = "";

fn random_id() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source is available");
    hex::encode(b)
}

impl BoxCore {
    pub fn new(
        attester: Arc<dyn Attester>,
        providers: ProviderRegistry,
        config: BoxConfig,
    ) -> BoxCore {
        BoxCore {
            attester,
            providers,
            limits: Mutex::new(Limits {
                clients: Limiter::new(config.client_rate),
                keys: Limiter::new(config.key_rate),
            }),
            config,
            state: Mutex::new(State::default()),
            spent: None,
            store: None,
            day_book: Mutex::new(DayBook::default()),
            in_flight: InFlight::default(),
            crash_at: None,
        }
    }

    /// The crash harness's failpoint (see `crash_at`); production boxes never set it.
    pub fn with_failpoint(mut self, point: Option<String>) -> BoxCore {
        self.crash_at = point;
        self
    }

    /// Abort the process here when the failpoint names this step: no unwinding, no cleanup,
    /// as a kill -9 right after the step's write.
    fn failpoint(&self, point: &str) {
        if self.crash_at.as_deref() == Some(point) {
            tracing::error!(point, "box failpoint reached: aborting");
            std::process::abort();
        }
    }

    /// Keep runs in the run store at `path`, sealed under `key`, and take back the runs it
    /// holds: open ones wait for their stakes and submits again, running ones for
    /// [`Self::resume`], finished ones for their fetch. A run whose rows do not open (tampered,
    /// another key, cut) is refused: logged `store_tampered`, its run id spent, its rows
    /// removed; a running run whose stakes do not open fails `interrupted`. A run whose program
    /// names a prompt template this build does not run (opened before an upgrade) opens all the
    /// same and is not tampered with: an open or running one fails `prompt_template_unknown`
    /// with a signed receipt, a finished one is served as it was. Call after
    /// [`Self::with_spent_log`] (its programs are the same list's).
    ///
    /// A box with hardware isolation takes only a key its platform seals
    /// ([`store::StorageKey::sealed_by_platform`]): the store holds opened stakes and run keys,
    /// and a key its host can read (a [`store::KeyFile`] on the host's disk) would give the
    /// host every stake — the one party the hardware keeps out.
    pub fn with_run_store(
        mut self,
        path: &std::path::Path,
        key: &dyn store::StorageKey,
        now: u64,
    ) -> Result<BoxCore> {
        if !self.no_hardware_isolation() && !key.sealed_by_platform() {
            return Err(JcError::Storage(format!(
                "a {} box keeps no run store under a key its host can read",
                self.attester.platform()
            )));
        }
        let store = RunStore::open(path, key)?;
        let loaded = store.load()?;
        let until = self.spent_until(now);
        let mut refused = Vec::new();
        {
            let mut st = self.lock();
            for l in loaded {
                let no_hw = self.no_hardware_isolation();
                let mut run = match l.record.and_then(|b| restore_run(&l.id, &b, no_hw)) {
                    Ok(run) => run,
                    Err(e) => {
                        tracing::error!(code = e.code(), "a persisted run is refused");
                        st.spent_runs.insert(l.id.clone(), until);
                        refused.push(l.id);
                        continue;
                    }
                };
                for (role, entries) in l.stakes {
                    match entries.and_then(|b| store::decode_entries(&b)) {
                        Ok(entries) if run.keys.is_some() => {
                            let bytes: u64 = entries.iter().map(|e| e.data.len() as u64).sum();
                            run.held.insert(
                                role,
                                Hold {
                                    client: None,
                                    bytes,
                                },
                            );
                            run.stakes.insert(role, entries);
                        }
                        Ok(_) => {}
                        Err(e) => {
                            // The run cannot go on without it: fail it with a signed receipt.
                            tracing::error!(code = e.code(), "a persisted stake is refused");
                            run.attempts = u32::MAX;
                            if run.phase == Phase::Open {
                                run.phase = Phase::Running;
                            }
                        }
                    }
                }
                st.programs.insert(
                    run.program.hash,
                    (l.id.clone(), run.program.program.expires_at),
                );
                st.insert_run(l.id, run);
            }
        }
        store.delete(&refused)?;
        self.restore_day_book(&store, now)?;
        self.store = Some(store);
        Ok(self)
    }

    /// The day book as the store kept it: rows that do not open are refused and dropped (that
    /// caller's partial tally resets — a host able to flip a row could delete it as well, see
    /// the store's rollback note), as are days before yesterday and rows past the cap.
    fn restore_day_book(&self, store: &RunStore, now: u64) -> Result<()> {
        let today = crate::day::day_of(now);
        let mut refused = Vec::new();
        let mut dropped = Vec::new();
        let mut book = self.day_book.lock().unwrap_or_else(|p| p.into_inner());
        for (row, opened) in store.load_day_book()? {
            match opened {
                Ok((key, tally, stamp)) => dropped.extend(book.restore(key, tally, stamp, today)),
                Err(e) => {
                    tracing::error!(code = e.code(), "a persisted day book row is refused");
                    refused.push(row);
                }
            }
        }
        drop(book);
        store.delete_days(&refused, &dropped)
    }

    /// Finish the runs a restart found running (both parties had submitted): each goes to the
    /// provider again only if it had not come back from there ([`Self::execute`]). Started
    /// oldest first, so runs of one (owner, caller, skill) take their in-flight marks (memory
    /// only, none survived the restart) about in the order they were opened.
    pub fn resume(self: &Arc<Self>) {
        let mut running: Vec<(u64, String)> = self
            .lock()
            .runs
            .iter()
            .filter(|(_, r)| r.phase == Phase::Running)
            .map(|(id, r)| (r.opened_at, id.clone()))
            .collect();
        running.sort();
        for (_, id) in running {
            let core = self.clone();
            tokio::spawn(async move {
                if let Err(e) = core.execute(&id).await {
                    tracing::warn!(code = e.code(), "resumed run could not finish");
                }
            });
        }
    }

    /// Write a run's record (outside the state lock; the version keeps the newest).
    fn persist(&self, run_id: &str, snapshot: Option<(u64, Zeroizing<Vec<u8>>)>) -> Result<()> {
        match (&self.store, snapshot) {
            (Some(store), Some((version, record))) => store.put_run(run_id, version, &record),
            _ => Ok(()),
        }
    }

    /// A run's record to write, when the box has a store.
    fn snapshot(&self, run: &mut Run) -> Result<Option<(u64, Zeroizing<Vec<u8>>)>> {
        if self.store.is_none() {
            return Ok(None);
        }
        run.record(None).map(Some)
    }

    /// Forget runs on disk; a failure is logged (the rows come back at restart and are
    /// dropped then as expired).
    fn forget(&self, ids: &[String]) {
        if let Some(store) = &self.store
            && let Err(e) = store.delete(ids)
        {
            tracing::error!(code = e.code(), "run store: runs not removed");
        }
    }

    /// Keep the opened programs at `path` (made if missing): the programs listed there are
    /// refused as spent, and every program opened from now on is on disk before `open`
    /// answers. An unreadable list is an error, never an empty one.
    pub fn with_spent_log(mut self, path: &std::path::Path, now: u64) -> Result<BoxCore> {
        let (log, live) = crate::spent::SpentLog::open(path, now)?;
        {
            let mut st = self.lock();
            for (hash, exp) in live {
                st.programs
                    .insert(hash, (OPENED_BEFORE_RESTART.to_owned(), exp));
            }
        }
        self.spent = Some(log);
        Ok(self)
    }

    pub fn platform(&self) -> &str {
        self.attester.platform()
    }
    pub fn measurement(&self) -> &str {
        self.attester.measurement()
    }
    /// The key a node pins for this box (insecure-dev), if its identity is a key.
    pub fn identity_key(&self) -> Option<String> {
        self.attester.identity_key()
    }
    pub fn providers(&self) -> &ProviderRegistry {
        &self.providers
    }
    pub fn no_hardware_isolation(&self) -> bool {
        self.attester.platform() == INSECURE_DEV
    }

    /// A run's verdict or failure code, logged only by a box without hardware isolation, whose
    /// operator reads its memory anyway. A hardware box's host reads the guest's log: a line
    /// per caught answer, refused day or echo undid what the owner's padded note, the day
    /// book's row for every answer and Regenerate's two rounds were built to keep from it.
    fn per_run_log(&self, code: &'static str, what: &'static str) {
        if self.no_hardware_isolation() {
            tracing::info!(code, "{what}");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs open or running (what memory is spent on).
    pub fn in_flight(&self) -> usize {
        usize::try_from(self.lock().tally.live).unwrap_or(usize::MAX)
    }

    pub fn config(&self) -> &BoxConfig {
        &self.config
    }

    fn limits(&self) -> std::sync::MutexGuard<'_, Limits> {
        self.limits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take a token from the client's bucket (every open and stake request, before its body is
    /// looked at): `rate_limited` when it has none. In-process callers (`None`) are not counted.
    pub fn charge_client(&self, client: Client) -> Result<()> {
        let Some(ip) = client else {
            return Ok(());
        };
        if self
            .limits()
            .clients
            .take(&[client_of(ip)], std::time::Instant::now())
        {
            Ok(())
        } else {
            Err(JcError::RateLimited)
        }
    }

    /// What the box remembers: runs, spent run ids and opened programs (each bounded by a
    /// program's expiry, itself at most `max_program_ttl_secs` ahead), and stake bytes held.
    pub fn memory(&self) -> Memory {
        let st = self.lock();
        Memory {
            runs: st.runs.len(),
            spent_runs: st.spent_runs.len(),
            programs: st.programs.len(),
            held_bytes: st.tally.held,
            spent_list_lines: self.spent.as_ref().map_or(0, |l| l.lines()),
        }
    }

    /// Until when a spent run id is remembered (for `run_spent` rather than `run_not_found`).
    fn spent_until(&self, now: u64) -> u64 {
        now.saturating_add(
            self.config
                .max_program_ttl_secs
                .max(self.config.run_ttl_secs),
        )
    }

    /// jc.open: a twice-signed program in, a fresh run out (in-process: no client counted).
    pub fn open(&self, envelope: &Envelope, now: u64) -> Result<Opened> {
        self.open_from(envelope, now, None)
    }

    /// jc.open for `client`. Opening reserves no stake memory (that is taken when a stake is
    /// posted); it is refused `busy` when the program's limits do not fit beside what is held,
    /// when the box or this client has its most runs, `rate_limited` when either party's key
    /// has opened too often, `expires_too_far` past the box's horizon and `key_not_allowed`
    /// when the box has an allow-list naming neither party.
    pub fn open_from(&self, envelope: &Envelope, now: u64, client: Client) -> Result<Opened> {
        let client = client.map(client_of);
        let approved = approved_program(envelope)?;
        approved.program.check_expiry(now)?;
        let latest = now.saturating_add(self.config.max_program_ttl_secs);
        if approved.program.expires_at > latest {
            return Err(JcError::ExpiresTooFar { latest });
        }
        let parties = &approved.program.parties;
        if let Some(allowed) = &self.config.allowed_keys {
            let listed = |k: &str| allowed.iter().any(|a| a.eq_ignore_ascii_case(k));
            if !listed(&parties.caller.node_key) && !listed(&parties.owner.node_key) {
                return Err(JcError::KeyNotAllowed);
            }
        }
        let (platform, measurement) = (self.attester.platform(), self.attester.measurement());
        if !approved.program.lists_box(platform, measurement) {
            return Err(JcError::BoxNotListed {
                platform: platform.into(),
                measurement: measurement.into(),
            });
        }
        self.providers.get(
            &approved.program.provider.id,
            approved.program.provider.host.as_deref(),
        )?;
        let keys = [
            parties.caller.node_key.to_ascii_lowercase(),
            parties.owner.node_key.to_ascii_lowercase(),
        ];
        if !self.limits().keys.take(&keys, std::time::Instant::now()) {
            return Err(JcError::RateLimited);
        }
        let mut st = self.lock();
        if let Some((run_id, _)) = st.programs.get(&approved.hash) {
            // Opening the same program again while its run is open is a retry: same run.
            if let Some(run) = st.runs.get(run_id)
                && run.phase == Phase::Open
            {
                let opened = Opened {
                    run_id: run_id.clone(),
                    program_hash: approved.hash.to_hex(),
                    expires_at: run.expires_at,
                };
                let logged = run.logged;
                drop(st);
                // Not answered before the first open is durable.
                if let Some(log) = &self.spent {
                    log.sync_to(logged)?;
                }
                return Ok(opened);
            }
            return Err(JcError::ProgramSpent(approved.hash.to_hex()));
        }
        let (live, held) = (st.tally.live, st.tally.held);
        let mine = client.map_or(0, |ip| st.tally.unstaked_by.get(&ip).copied().unwrap_or(0));
        if live >= self.config.max_runs as u64 {
            return Err(JcError::Busy(self.config.max_runs));
        }
        // Finished runs waiting to be fetched count too: each is a row on disk. At the limit the
        // oldest finished run already fetched twice (both parties, as nodes do at once) makes
        // room; with none, the open is refused.
        let kept = self
            .config
            .max_kept_runs
            .max(self.config.max_runs.saturating_mul(2));
        if st.runs.len() >= kept {
            let picked_up = st.tally.evictable.first().map(|(_, id)| id.clone());
            let Some(id) = picked_up else {
                return Err(JcError::Busy(kept));
            };
            st.remove_run(&id);
            let until = self.spent_until(now);
            st.spent_runs.insert(id.clone(), until);
            // Under the state lock, but only at the limit.
            self.forget(&[id]);
        }
        let unstaked_cap = self
            .config
            .max_unstaked_per_client
            .min((self.config.max_runs / 2).max(1));
        if mine >= unstaked_cap as u64 {
            return Err(JcError::Busy(unstaked_cap));
        }
        let wants = [Role::Caller, Role::Owner]
            .into_iter()
            .map(|r| seal::sealed_limit(approved.program.stake_limit(r)))
            .sum::<u64>();
        if held.saturating_add(wants) > self.config.stake_budget_bytes {
            return Err(JcError::OverBudget {
                budget: self.config.stake_budget_bytes,
            });
        }
        let run_id = random_id();
        let expires_at = approved
            .program
            .expires_at
            .min(now + self.config.run_ttl_secs);
        let hash = approved.hash;
        let logged = match &self.spent {
            Some(log) => log.append(&hash, approved.program.expires_at)?,
            None => 0,
        };
        st.programs
            .insert(hash, (run_id.clone(), approved.program.expires_at));
        let mut run = Run {
            program: Arc::new(approved),
            envelope: Arc::new(envelope.clone()),
            attempts: 0,
            template_unknown: false,
            version: 0,
            taken: false,
            fetched: 0,
            attested: 0,
            held: HashMap::new(),
            uploading: Vec::new(),
            opened_by: client,
            opened_at: now,
            keys: Some(Arc::new(RunKeys::generate())),
            expires_at,
            stakes: HashMap::new(),
            submitted: HashMap::new(),
            phase: Phase::Open,
            finished: None,
            keep_until: expires_at + self.config.result_ttl_secs,
            logged,
            changed: Arc::new(tokio::sync::Notify::new()),
            counted: Share::default(),
        };
        // On an error the program stays spent (its line is in the list): a retry is refused.
        let snapshot = self.snapshot(&mut run)?;
        st.insert_run(run_id.clone(), run);
        drop(st);
        // Durable before it is answered (outside the state lock: concurrent opens share one
        // sync). If it cannot be made durable the run is dropped; the program stays spent.
        let durable = match &self.spent {
            Some(log) => log.sync_to(logged),
            None => Ok(()),
        }
        .and_then(|()| self.persist(&run_id, snapshot));
        if let Err(e) = durable {
            self.lock().remove_run(&run_id);
            self.forget(std::slice::from_ref(&run_id));
            return Err(e);
        }
        self.failpoint("opened");
        Ok(Opened {
            run_id,
            program_hash: hash.to_hex(),
            expires_at,
        })
    }

    /// Look up a live run, refusing spent and expired ones with their own errors.
    fn live<'a>(&self, st: &'a mut State, run_id: &str, now: u64) -> Result<&'a mut Run> {
        let run = st.kept_mut(run_id)?;
        if run.phase == Phase::Open && now >= run.expires_at {
            return Err(JcError::RunExpired(run.expires_at));
        }
        Ok(run)
    }

    /// jc.attest: the statement for this run and the asker's nonce, with the platform's evidence.
    pub fn attest(&self, run_id: &str, nonce: &str, now: u64) -> Result<Attestation> {
        check_nonce(nonce)?;
        let statement = {
            let mut st = self.lock();
            let run = self.live(&mut st, run_id, now)?;
            let keys = run.keys.as_ref().ok_or_else(|| JcError::WrongState {
                state: run.phase.as_str().into(),
                action: "attest".into(),
            })?;
            if run.attested >= MAX_ATTESTATIONS_PER_RUN {
                return Err(JcError::RateLimited);
            }
            run.attested += 1;
            Statement {
                program_hash: run.program.hash.to_hex(),
                run_id: run_id.into(),
                hpke_public_key: keys.hpke.public_hex(),
                receipt_public_key: key_hex(&keys.receipt.verifying_key()),
                nonce: nonce.into(),
                expires_at: run.expires_at,
                ..Statement::default()
            }
        };
        let made = self.attested(statement);
        if made.is_err() {
            // Only attestations made count: a platform's transient failure uses none up.
            let mut st = self.lock();
            if let Ok(run) = st.kept_mut(run_id) {
                run.attested = run.attested.saturating_sub(1);
            }
        }
        made
    }

    /// The box's own attestation for the asker's nonce (`GET /v1/attestation`): its platform,
    /// measurement, provider table, configuration, GPUs and TLS key, bound to no run — no run
    /// id, program or run keys, so it never passes as a run's, and a run's never as it. What a
    /// node checks before the first byte of a program goes to the key it binds.
    pub fn attest_box(&self, nonce: &str, now: u64) -> Result<Attestation> {
        check_nonce(nonce)?;
        self.attested(Statement {
            nonce: nonce.into(),
            expires_at: now.saturating_add(BOX_ATTESTATION_TTL_SECS),
            ..Statement::default()
        })
    }

    /// `statement` completed with what every statement of this box binds (platform,
    /// measurement, provider table; the attester adds its TLS key, configuration and GPUs),
    /// with the platform's evidence.
    fn attested(&self, statement: Statement) -> Result<Attestation> {
        let providers = self.providers.table();
        let statement = Statement {
            platform: self.attester.platform().into(),
            measurement: self.attester.measurement().into(),
            providers: crate::attest::provider_table_hash(&providers)?,
            tls_spki_sha256: self.attester.tls_spki_sha256(),
            ..statement
        };
        let mut attestation = self.attester.attest(&statement)?;
        attestation.providers = providers;
        Ok(attestation)
    }

    /// Begin a stake, before a byte of its body is read: the run is live and open, the action
    /// is signed by the party of the role it names, for this run and program, with the digest
    /// of the bytes to come; that role has neither staked nor an upload under way; the declared
    /// length is within the role's limit; and the memory to read and open it fits the budget
    /// and the client's share. The slot holds the role and the memory until it is committed or
    /// released. A `submit` sent with the stake (the party's go, signed apart, by the same
    /// role for the same run) is checked here too, and taken when the stake is committed.
    pub fn begin_stake(
        &self,
        run_id: &str,
        action: &Envelope,
        submit: Option<&Envelope>,
        declared: Option<u64>,
        client: Client,
        now: u64,
    ) -> Result<StakeSlot> {
        let client = client.map(client_of);
        let program = {
            let mut st = self.lock();
            let run = self.live(&mut st, run_id, now)?;
            run.expect_phase(Phase::Open, "stake")?;
            run.program.clone()
        };
        // The signature is checked outside the state lock.
        let act = verify_action(action, &program, run_id, "stake")?;
        let role = act.role;
        if let Some(go) = submit
            && verify_action(go, &program, run_id, "submit")?.role != role
        {
            return Err(JcError::Envelope(
                "the submit sent with a stake is signed for another role".into(),
            ));
        }
        let digest = act
            .stake_sha256
            .ok_or_else(|| JcError::Envelope("a stake action names its bytes' digest".into()))?;
        let max = seal::sealed_limit(program.program.stake_limit(role));
        if let Some(size) = declared
            && size > max
        {
            return Err(JcError::StakeTooLarge {
                role: role.as_str().into(),
                size,
                limit: max,
            });
        }
        let limit = declared.unwrap_or(max);
        let wants = limit.saturating_mul(READING_FACTOR);
        let mut st = self.lock();
        let held = st.tally.held;
        let mine = client.map_or(0, |ip| st.tally.held_by.get(&ip).copied().unwrap_or(0));
        let run = self.live(&mut st, run_id, now)?;
        run.expect_phase(Phase::Open, "stake")?;
        if run.stakes.contains_key(&role) {
            return Err(JcError::AlreadyStaked {
                role: role.as_str().into(),
            });
        }
        if run.uploading.contains(&role) {
            return Err(JcError::UploadInProgress {
                role: role.as_str().into(),
            });
        }
        let budget = self.config.stake_budget_bytes;
        if held.saturating_add(wants) > budget
            || (client.is_some()
                && mine.saturating_add(wants) > self.config.stake_budget_per_client_bytes)
        {
            return Err(JcError::OverBudget { budget });
        }
        run.uploading.push(role);
        run.held.insert(
            role,
            Hold {
                client,
                bytes: wants,
            },
        );
        st.retally(run_id);
        Ok(StakeSlot {
            run_id: run_id.into(),
            role,
            digest,
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            submit: submit.is_some(),
        })
    }

    /// Give back a slot whose stake was not committed (refused, cut, timed out).
    pub fn release_stake(&self, slot: &StakeSlot) {
        let mut st = self.lock();
        if let Some(run) = st.runs.get_mut(&slot.run_id)
            && run.uploading.contains(&slot.role)
        {
            run.uploading.retain(|r| *r != slot.role);
            run.held.remove(&slot.role);
            run.changed.notify_waiters();
            st.retally(&slot.run_id);
        } else {
            st.release_orphan(&slot.run_id, slot.role);
        }
    }

    /// Finish a stake begun with [`Self::begin_stake`]: the bytes are the ones the action
    /// signed, they open with this run's key and info, and their entries are the program's.
    /// On an error the caller releases the slot. A submit begun with the stake is taken in the
    /// same step, and is on disk before the answer: the run starts when both stakes are in and
    /// both parties submitted (the returned `started`: the caller of this runs it).
    pub fn commit_stake(&self, slot: &StakeSlot, sealed: &[u8], now: u64) -> Result<StakeTaken> {
        let role = slot.role;
        if hex::encode(Sha256::digest(sealed)) != slot.digest {
            return Err(JcError::Envelope(
                "stake signature covers other bytes".into(),
            ));
        }
        if sealed.len() > slot.limit {
            return Err(JcError::StakeTooLarge {
                role: role.as_str().into(),
                size: sealed.len() as u64,
                limit: slot.limit as u64,
            });
        }
        let (program, keys) = {
            let mut st = self.lock();
            let run = self.live(&mut st, &slot.run_id, now)?;
            run.expect_phase(Phase::Open, "stake")?;
            let keys = run
                .keys
                .clone()
                .ok_or_else(|| JcError::Internal("open run without keys".into()))?;
            (run.program.clone(), keys)
        };
        let info = seal::info(Purpose::Stake(role), &slot.run_id, &program.hash);
        let entries = seal::open(sealed, &keys.hpke, &info, || JcError::StakeWrongInfo {
            role: role.as_str().into(),
        })?;
        drop(keys);
        seal::check_stake(&program.program, role, &entries)?;
        // On disk before the run holds it (the slot keeps the role to this upload): a stake the
        // box answered is one a restarted box still has.
        if let Some(store) = &self.store {
            store.put_stake(&slot.run_id, role, &store::encode_entries(&entries))?;
        }
        let mut st = self.lock();
        let run = match self.live(&mut st, &slot.run_id, now).and_then(|run| {
            run.expect_phase(Phase::Open, "stake")?;
            if run.stakes.contains_key(&role) || !run.uploading.contains(&role) {
                return Err(JcError::AlreadyStaked {
                    role: role.as_str().into(),
                });
            }
            Ok(run)
        }) {
            Ok(run) => run,
            Err(e) => {
                // Not taken: its row goes, or is the stake the run does hold (a slot given
                // back and taken again while this one was opening).
                let kept = st
                    .runs
                    .get(&slot.run_id)
                    .and_then(|r| r.stakes.get(&role))
                    .map(|entries| store::encode_entries(entries));
                drop(st);
                if let Some(store) = &self.store {
                    let fixed = match kept {
                        Some(bytes) => store.put_stake(&slot.run_id, role, &bytes),
                        None => store.delete_stake(&slot.run_id, role),
                    };
                    if let Err(d) = fixed {
                        tracing::error!(code = d.code(), "run store: a refused stake not removed");
                    }
                }
                return Err(e);
            }
        };
        let bytes: u64 = entries.iter().map(|e| e.data.len() as u64).sum();
        run.stakes.insert(role, entries);
        run.uploading.retain(|r| *r != role);
        if let Some(h) = run.held.get_mut(&role) {
            // From what reading and opening needed to what is kept.
            h.bytes = bytes;
        }
        // The go sent with the stake: the party's submit, held by the run until the other
        // stake is in (a submit of its own is refused until then, and waits for it).
        let mut started = false;
        let snapshot = if slot.submit {
            run.submitted.insert(role, true);
            started = run.stakes.len() == 2 && run.submitted.len() == 2;
            if started {
                run.phase = Phase::Running;
            }
            self.snapshot(run)?
        } else {
            None
        };
        run.changed.notify_waiters();
        st.retally(&slot.run_id);
        drop(st);
        if let Err(e) = self.persist(&slot.run_id, snapshot) {
            // The stake's row is on disk and the run keeps it; the go is not, so the run
            // does not hold it either (the party hears an error and sends it again).
            self.take_back_go(&slot.run_id, role, started);
            return Err(e);
        }
        self.failpoint("staked");
        Ok(StakeTaken {
            role,
            submitted: slot.submit,
            started,
        })
    }

    /// jc.stake in one step (in-process): [`Self::begin_stake`] then [`Self::commit_stake`].
    pub fn stake(&self, run_id: &str, action: &Envelope, sealed: &[u8], now: u64) -> Result<Role> {
        let slot = self.begin_stake(run_id, action, None, Some(sealed.len() as u64), None, now)?;
        let committed = self.commit_stake(&slot, sealed, now);
        if committed.is_err() {
            self.release_stake(&slot);
        }
        committed.map(|t| t.role)
    }

    /// jc.submit: a party's go. Refused before both stakes are in. Returns true when this submit
    /// was the second one, i.e. the run should start now.
    pub fn submit(&self, run_id: &str, action: &Envelope, now: u64) -> Result<bool> {
        let role = self.verify_submit(run_id, action, now)?;
        self.submit_verified(run_id, role, now)
    }

    /// A submit's signed action checked against the run's program, outside the state lock (an
    /// Ed25519 verification every other request would wait on), and once per request: a held
    /// submit ([`Self::submit_within`]) tries again at every change of its run.
    fn verify_submit(&self, run_id: &str, action: &Envelope, now: u64) -> Result<Role> {
        let program = {
            let mut st = self.lock();
            self.live(&mut st, run_id, now)?.program.clone()
        };
        Ok(verify_action(action, &program, run_id, "submit")?.role)
    }

    /// [`Self::submit`] of a verified action by `role`.
    fn submit_verified(&self, run_id: &str, role: Role, now: u64) -> Result<bool> {
        let mut st = self.lock();
        let run = self.live(&mut st, run_id, now)?;
        run.expect_phase(Phase::Open, "submit")?;
        let missing: Vec<&str> = [Role::Caller, Role::Owner]
            .into_iter()
            .filter(|r| !run.stakes.contains_key(r))
            .map(Role::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(JcError::StakesMissing {
                missing: missing.join(" and "),
            });
        }
        run.submitted.insert(role, true);
        let start = run.submitted.len() == 2;
        if start {
            run.phase = Phase::Running;
        }
        let snapshot = self.snapshot(run)?;
        run.changed.notify_waiters();
        st.retally(run_id);
        drop(st);
        // A submit the box answered is one a restarted box still has (and a second one starts
        // the run there too).
        if let Err(e) = self.persist(run_id, snapshot) {
            self.take_back_go(run_id, role, start);
            return Err(e);
        }
        Ok(start)
    }

    /// Undo a go whose record did not reach the disk, so the run holds only what a restarted
    /// box would: a run this go started goes back to open (nothing else runs it: only the
    /// request that starts a run executes it, and this one fails), and the go is dropped while
    /// the run is still open. A run another party's go started since (its record, with this
    /// go in it, written or about to be) is left as it is.
    fn take_back_go(&self, run_id: &str, role: Role, started: bool) {
        let mut st = self.lock();
        let Some(run) = st.runs.get_mut(run_id) else {
            return;
        };
        if started && run.phase == Phase::Running && !run.taken {
            run.phase = Phase::Open;
        }
        if run.phase == Phase::Open {
            run.submitted.remove(&role);
            run.changed.notify_waiters();
            st.retally(run_id);
        }
    }

    /// The run itself: prompt, provider, cap, seal to the caller, receipt. Called once, after the
    /// second submit, or by [`Self::resume`] after a restart. With a run store, "at the provider"
    /// (the attempt counted) is on disk before the request and the result before it can be
    /// fetched, so a restarted box asks the provider again only when it died while the request
    /// was out.
    pub async fn execute(&self, run_id: &str) -> Result<()> {
        let (program, keys, stakes, give_up, snapshot) = {
            let mut st = self.lock();
            let run = st.runs.get_mut(run_id).ok_or_else(|| not_found(run_id))?;
            run.expect_phase(Phase::Running, "run")?;
            if run.taken {
                return Err(JcError::WrongState {
                    state: run.phase.as_str().into(),
                    action: "run".into(),
                });
            }
            run.taken = true;
            let keys = run
                .keys
                .clone()
                .ok_or_else(|| JcError::Internal("running run without keys".into()))?;
            // Why the run ends here without a provider request, if it does.
            let give_up = if run.template_unknown {
                Some(JcError::PromptTemplateUnknown)
            } else if run.attempts >= MAX_PROVIDER_ATTEMPTS {
                Some(JcError::RunInterrupted)
            } else {
                run.attempts += 1;
                None
            };
            let snapshot = self.snapshot(run);
            (
                run.program.clone(),
                keys,
                std::mem::take(&mut run.stakes),
                give_up,
                snapshot,
            )
        };
        // The owner's day limits for this (owner, caller, skill): its stake's, or the default
        // for a guarded program whose owner staked none. Checked at stake, so never
        // unreadable here; if they were, the run fails rather than run without them.
        let day_limits = day_limits_of(&program, &stakes);
        let limits = day_limits.as_ref().ok().copied().flatten();
        // Held from the day check until the answer's count is on disk (dropped on every way
        // out of this function, a panic included).
        let mut in_flight = None;
        let outcome = match (snapshot.and_then(|s| self.persist(run_id, s)), give_up) {
            (Err(e), _) | (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => {
                self.failpoint("at_provider");
                match day_limits.map(|l| self.day_turn(&program, l)) {
                    Err(e) => Err(e),
                    Ok(turn) => match turn.await {
                        Err(e) => Err(e),
                        Ok(turn) => {
                            let (mark, allowance) = turn.unzip();
                            in_flight = mark;
                            self.call_provider(&program, stakes, allowance).await
                        }
                    },
                }
            }
        };
        let now = now_secs();
        // What a released answer carried goes to the box's day book, never to the owner: the
        // owner's body decides which of its regions the model repeats, so levels sealed to it
        // were a channel from the caller's sources to the owner (16 bits a call).
        // A caught answer goes there too (review 24b G4): what it carried as the guard measured
        // it, a caught secret at least `DayLimits::catch_floor`, so a caller guessing through
        // the guard's verdict spends its day as one reading the secret does.
        let counted = match (&outcome, limits) {
            (Ok(a), Some(limits)) if !limits.off() => a
                .coverage
                .map(|released| DayTally::of_run(&released, a.caught.as_ref(), &limits)),
            _ => None,
        };
        // Whether the guard acted goes to the owner alone, sealed (see `OwnerNote`); a failed
        // run's note says it did not (a regeneration that failed is reported as the failure).
        let acted = outcome.as_ref().is_ok_and(|a| a.guard_acted);
        let finished = match (seal_owner_note(&program, run_id, acted), outcome) {
            (Ok(note), Ok(answered)) => {
                self.seal_answer(&program, &keys, run_id, &answered, note, now)
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let mut finished = match finished {
            Ok(f) => f,
            Err(e) => {
                // Only the closed code is kept: nothing of the provider's answer, the run's
                // material or the error's words leaves the box.
                let error = RunFailure::from(&e);
                self.per_run_log(error.as_str(), "run failed");
                let note = seal_owner_note(&program, run_id, false)?;
                let receipt = Receipt {
                    run_id: run_id.into(),
                    program_hash: program.hash.to_hex(),
                    status: RunStatus::Failed,
                    finished_at: receipt::coarse(now),
                    output_bucket: 0,
                    owner_note_sha256: note_digest(note.as_ref()),
                };
                Finished {
                    sealed_output: None,
                    owner_note: note,
                    receipt: receipt::sign(&receipt, &keys.receipt)?,
                    error: Some(error),
                }
            }
        };
        let phase = if finished.error.is_none() {
            Phase::Done
        } else {
            Phase::Failed
        };
        let keep_until = now + self.config.result_ttl_secs;
        // Counted in the book before the result can be fetched, and on disk with it.
        let day_change = match counted {
            Some(run) if finished.error.is_none() => self.count_released(&program, &run, now),
            _ => None,
        };
        // On disk (without the keys, without the stakes) before anyone can fetch it.
        let ending = match &self.store {
            Some(_) => {
                let mut st = self.lock();
                st.runs.get_mut(run_id).map(|run| {
                    run.record(Some(Ending {
                        phase,
                        keep_until,
                        finished: &finished,
                    }))
                })
            }
            None => None,
        };
        if let (Some(store), Some(ending)) = (&self.store, ending) {
            // Not on disk: served from memory all the same (a restart would run it again).
            let day = day_change.as_ref();
            let finish = |(v, record): (u64, Zeroizing<Vec<u8>>)| {
                store.finish_counted(run_id, v, &record, day)
            };
            if let Err(e) = ending.and_then(finish) {
                tracing::error!(code = e.code(), "run store: a result not kept");
            }
            self.failpoint("result");
        }
        // Counted in memory and on disk: the next run of these parties may be checked. Their
        // day rows are written one run at a time, so the last row written is the newest tally.
        drop(in_flight);
        let note = finished.owner_note.take().map(|n| NoteSlot::Sealed {
            bytes: Arc::new(n.sealed),
            spec: Some(Arc::new(n.spec)),
        });
        let served = served(run_id, &finished, note, self.no_hardware_isolation())?;
        drop(finished);
        let mut st = self.lock();
        if let Some(run) = st.runs.get_mut(run_id) {
            run.phase = phase;
            run.finished = Some(served);
            run.keep_until = keep_until;
            run.keys = None;
            run.changed.notify_waiters();
        }
        st.retally(run_id);
        drop(st);
        // The run's keys go now: the last Arc drops here and the secrets are zeroized.
        drop(keys);
        Ok(())
    }

    /// Try `attempt` until it gives something other than an error `pending` accepts, or `wait`
    /// passed: between tries, sleep on the run's change signal, armed before each try (so no
    /// change between the try and the sleep is missed). A run not held here is tried once.
    async fn when_ready<T>(
        &self,
        run_id: &str,
        wait: std::time::Duration,
        pending: impl Fn(&JcError) -> bool,
        attempt: impl Fn() -> Result<T>,
    ) -> Result<T> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let Some(changed) = self.lock().runs.get(run_id).map(|r| r.changed.clone()) else {
                return attempt();
            };
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match attempt() {
                Err(e) if pending(&e) && tokio::time::Instant::now() < deadline => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return attempt();
                    }
                }
                other => return other,
            }
        }
    }

    /// [`Self::result`], waiting up to `wait` for a run that has not finished (a long poll: a
    /// node asks once per run instead of polling).
    pub async fn result_within(
        &self,
        run_id: &str,
        wait: std::time::Duration,
    ) -> Result<ResultView> {
        parse_result(&self.result_json_within(run_id, wait, false).await?)
    }

    /// [`Self::result_within`] as the JSON the box serves: the same bytes for every fetch
    /// (without the owner note when `omit_note`).
    pub async fn result_json_within(
        &self,
        run_id: &str,
        wait: std::time::Duration,
        omit_note: bool,
    ) -> Result<axum::body::Bytes> {
        let not_ready = |e: &JcError| matches!(e, JcError::NotReady(_));
        self.when_ready(run_id, wait, not_ready, || {
            self.result_json_served(run_id, omit_note)
        })
        .await
    }

    /// [`Self::submit`], waiting up to `wait` for the other party's stake when it is missing.
    pub async fn submit_within(
        &self,
        run_id: &str,
        action: &Envelope,
        wait: std::time::Duration,
    ) -> Result<bool> {
        let role = self.verify_submit(run_id, action, now_secs())?;
        let missing = |e: &JcError| matches!(e, JcError::StakesMissing { .. });
        self.when_ready(run_id, wait, missing, || {
            self.submit_verified(run_id, role, now_secs())
        })
        .await
    }

    /// Wait until no other run of this (owner, caller, skill) is in flight at the box, then
    /// refuse the run if the caller's answers today already passed the owner's day limits
    /// (`coverage_exceeded`), before any provider request: the mark to hold until this run's
    /// answer is counted, and what the run may still release ([`Allowance`]: the tally the
    /// mark keeps unchanged until then). The owner's node submits a key's runs one at a time,
    /// but a caller that fails the call on its side once both submitted frees that turn while
    /// the run goes on here; so the box serialises them itself, and each is checked against every answer
    /// before it. The wait is bounded by the box's run limit (the provider's timeout, so an
    /// earlier run ends within about that) and the program's expiry.
    async fn day_turn(
        &self,
        program: &ApprovedProgram,
        limits: Option<DayLimits>,
    ) -> Result<Option<(InFlightMark<'_>, Allowance)>> {
        let Some(limits) = limits.filter(|l| !l.off()) else {
            return Ok(None);
        };
        let now = now_secs();
        let wait = self
            .config
            .run_ttl_secs
            .min(program.program.expires_at.saturating_sub(now));
        let mut key = DayKey::of(&program.program, now)?;
        let mark = self
            .in_flight
            .mark(&key, std::time::Duration::from_secs(wait))
            .await?;
        // The day on the clock after the wait: the one the answers before were counted on.
        key.day = crate::day::day_of(now_secs());
        let tally = self
            .day_book
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tally(&key);
        if tally.exceeds(&limits) {
            self.per_run_log("coverage_exceeded", "a run past the owner's day limits");
            return Err(JcError::CoverageExceeded);
        }
        Ok(Some((mark, Allowance { tally, limits })))
    }

    /// Add what a finished run counts for (its released answer's levels and its catch) to the
    /// day book (the day it was released on): what the run store writes with the run's
    /// finished record. A run that counted nothing is written all the same: a row written only
    /// when an answer carried something would tell whoever watches the file (the host) that it
    /// did.
    fn count_released(
        &self,
        program: &ApprovedProgram,
        run: &DayTally,
        now: u64,
    ) -> Option<DayChange> {
        let key = match DayKey::of(&program.program, now) {
            Ok(key) => key,
            Err(e) => {
                tracing::error!(code = e.code(), "day book: a run's parties unread");
                return None;
            }
        };
        let mut book = self.day_book.lock().unwrap_or_else(|p| p.into_inner());
        Some(book.add(key, run, crate::day::day_of(now)))
    }

    async fn call_provider(
        &self,
        program: &ApprovedProgram,
        stakes: HashMap<Role, Vec<Entry>>,
        allowance: Option<Allowance>,
    ) -> Result<Answered> {
        let p = &program.program;
        let provider = self
            .providers
            .get(&p.provider.id, p.provider.host.as_deref())?;
        let text = |e: &Entry| String::from_utf8_lossy(&e.data).into_owned();
        let caller = stakes
            .get(&Role::Caller)
            .ok_or_else(|| JcError::Internal("caller stake gone".into()))?;
        let owner = stakes
            .get(&Role::Owner)
            .ok_or_else(|| JcError::Internal("owner stake gone".into()))?;
        let find =
            |entries: &[Entry], name: &str| entries.iter().find(|e| e.name == name).map(text);
        let request = Zeroizing::new(find(caller, "request").unwrap_or_default());
        // Sources in the program's order, so the prompt does not depend on how they were staked.
        let sources: Vec<(String, Zeroizing<String>)> = p
            .caller_inputs
            .sources
            .iter()
            .filter_map(|s| find(caller, &s.name).map(|t| (s.name.clone(), Zeroizing::new(t))))
            .collect();
        let body = Zeroizing::new(find(owner, "body").unwrap_or_default());
        // The guard strips the owner's secret markers (the model sees the bare tokens) and
        // indexes the body; a body it cannot prepare fails the run rather than go unguarded.
        let guard = match &p.guard {
            Some(spec) if spec.enabled => {
                Some(skillbox_guard::prepare(&body, spec).map_err(|_| JcError::GuardBody)?)
            }
            _ => None,
        };
        let model = find(owner, "model").unwrap_or_default();
        // Kept to look for in the answers; the request takes its own copy.
        let model_id = model.clone();
        let key = find(owner, "key").map(Zeroizing::new);
        drop(stakes);
        let refs: Vec<(&str, &str)> = sources
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        let model_body = guard.as_ref().map_or(body.as_str(), |g| g.model_body());
        let (system, user) = crate::prompt::build(model_body, &request, &refs)?;
        let max_tokens = (p.output.max_bytes.div_ceil(3)).clamp(16, 4096) as u32;
        let seed = u64::from_be_bytes(
            program.hash.0[..8]
                .try_into()
                .expect("8 bytes of a 32-byte hash"),
        );
        // The system text's allowance is the owner's body allowance (from the program) plus the
        // box's notice, never the body's length: the local model judges the prompt and sets the
        // answer's budget from it, so the caller learns nothing of how long the body is from a
        // refusal or the answer's length (review 26 V1). The neutral round takes the same.
        let system_allowance = usize::try_from(p.owner_inputs.body_allowance(&p.provider.id))
            .unwrap_or(usize::MAX)
            .saturating_add(crate::prompt::notice_bytes());
        let req = ChatRequest {
            system,
            user,
            model,
            max_tokens,
            temperature: self.config.temperature,
            seed: Some(seed),
            system_allowance: Some(system_allowance),
            // A remote provider judges the request against the owner's declared context before
            // sending it, in bytes, from public values only (N5 for remote providers).
            // `local` has none: its context is the box's model's.
            context_tokens: p
                .owner_inputs
                .model_context(&p.provider.id)
                .map(|c| usize::try_from(c).unwrap_or(usize::MAX)),
        };
        let timeout = std::time::Duration::from_secs(self.config.run_ttl_secs.max(1));
        let key = key.as_ref().map(|k| k.as_str());
        let max = p.output.max_bytes as usize;
        // Neither the key nor the model id reaches the model: an answer carrying one is the
        // provider echoing its request (see `echo`).
        let owner_secrets = skillbox_guard::echo::OwnerSecrets::new(key, &model_id);
        let complete = |req: ChatRequest| async {
            let completion = match tokio::time::timeout(timeout, provider.complete(req, key)).await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(JcError::ProviderFailed(e.failure())),
                Err(_) => return Err(JcError::ProviderFailed(ProviderFailure::Timeout)),
            };
            let (answer, cut) = cap(completion.text, max);
            let answer = Zeroizing::new(answer);
            if owner_secrets.carried_by(&answer) {
                self.per_run_log(
                    "provider_echo",
                    "an answer carried the owner's key or model id",
                );
                return Err(JcError::ProviderFailed(ProviderFailure::Protocol));
            }
            Ok(Answered {
                answer,
                truncated: cut || completion.finish == FinishReason::Length,
                guard_acted: false,
                coverage: None,
                caught: None,
            })
        };
        let Some(prepared) = guard else {
            return complete(req).await;
        };
        // How much a released answer carries of the body goes to the box's day book (coverage
        // across calls, `crate::day`), never to the owner: the owner's body decides which of
        // its phrases the model repeats, so even which regions an answer touched would carry
        // the caller's sources to the owner. A caught answer releases nothing, but what it
        // carried goes to the day book all the same (`Caught`): the verdict is otherwise a free
        // oracle for guesses the caller has the model repeat. The verdict and a released
        // answer's levels come from one walk of the answer (`check_released`). An answer the
        // guard passes whose levels would take the caller's day to the owner's limits is
        // caught all the same (`checked`): no one answer carries the day's limit.
        let released = |a: Answered, levels, caught: Option<Caught>| Answered {
            coverage: Some(levels),
            guard_acted: caught.is_some(),
            caught,
            ..a
        };
        let withheld = |caught: Caught| Answered {
            answer: Zeroizing::new(WITHHELD_ANSWER.to_owned()),
            truncated: false,
            guard_acted: true,
            coverage: Some(skillbox_guard::CoverageLevels::NONE),
            caught: Some(caught),
        };
        match prepared.spec().action {
            skillbox_guard::Action::Withhold => {
                // The fixed answer says it was withheld: there is no catch to hide in time.
                let first = complete(req).await?;
                match checked(&prepared, &first.answer, allowance.as_ref()) {
                    Ok(levels) => Ok(released(first, levels, None)),
                    Err(caught) => {
                        self.per_run_log("guard_acted", "the output guard acted on an answer");
                        Ok(withheld(caught))
                    }
                }
            }
            skillbox_guard::Action::Regenerate => {
                // Both rounds on every run, whatever the guard finds: the answer with the body
                // and the same request without it (PromptKeeper), side by side. A caught answer
                // is then replaced by one that took no extra time — the caller's clock tells a
                // catch from an ordinary answer no better than its receipt does. Either round
                // failing fails the run, caught or not, so a failure is no oracle either. The
                // neutral answer is checked all the same: it cannot contain what the model never
                // saw, but an obedient model may still repeat the caller's request.
                // Its own prompt with its own tag suffix: the suffix is per prompt, never shared.
                let (system, user) = crate::prompt::build(NEUTRAL_INSTRUCTION, &request, &refs)?;
                let neutral = ChatRequest {
                    system,
                    user,
                    ..req.clone()
                };
                let (first, again) = tokio::join!(complete(req), complete(neutral));
                let (first, again) = (first?, again?);
                // Both checked and measured whatever the first verdict (`checked` measures a
                // caught answer too, when there are day limits to charge), so the time taken
                // says nothing more.
                let (first_checked, again_checked) = (
                    checked(&prepared, &first.answer, allowance.as_ref()),
                    checked(&prepared, &again.answer, allowance.as_ref()),
                );
                let caught = match first_checked {
                    Ok(levels) => return Ok(released(first, levels, None)),
                    Err(caught) => caught,
                };
                // Caught. Nothing of the verdict leaves the box but the owner's sealed note and
                // the day book's charge.
                self.per_run_log("guard_acted", "the output guard acted on an answer");
                match again_checked {
                    Err(too) => Ok(withheld(caught.and(too))),
                    Ok(levels) => Ok(released(again, levels, Some(caught))),
                }
            }
        }
    }

    fn seal_answer(
        &self,
        program: &ApprovedProgram,
        keys: &RunKeys,
        run_id: &str,
        answered: &Answered,
        owner_note: Option<SealedNote>,
        now: u64,
    ) -> Result<Finished> {
        let (answer, truncated) = (answered.answer.as_str(), answered.truncated);
        let result_key = program.program.result_key()?;
        let mut sealer = Sealer::new(
            &result_key,
            &seal::info(Purpose::Result, run_id, &program.hash),
        )?;
        // Every answer of this program seals to one size, the program's bound, whatever the
        // owner's body had the model write (see `seal::answer_padded_len`); the caller reads the
        // real length inside, in the answer entry's framing.
        let padded = answer_padded_len(&program.program);
        // One allocation of the sealed size; the padding is written as zeros chunk by chunk
        // into it, never as a buffer of its own.
        sealer.reserve(padded);
        sealer.entry_bytes(seal::ANSWER_ENTRY, answer.as_bytes())?;
        sealer.entry_bytes(seal::TRUNCATED_ENTRY, &[truncated as u8])?;
        let sealed = sealer.finish_padded_to(padded)?;
        let receipt = Receipt {
            run_id: run_id.into(),
            program_hash: program.hash.to_hex(),
            status: RunStatus::Ok,
            finished_at: receipt::coarse(now),
            output_bucket: padded,
            owner_note_sha256: note_digest(owner_note.as_ref()),
        };
        Ok(Finished {
            sealed_output: Some(sealed),
            owner_note,
            receipt: receipt::sign(&receipt, &keys.receipt)?,
            error: None,
        })
    }

    pub fn status(&self, run_id: &str) -> Result<RunView> {
        let st = self.lock();
        let run = st.kept(run_id)?;
        let mut staked: Vec<Role> = run.stakes.keys().copied().collect();
        staked.sort_by_key(|r| r.as_str());
        let mut submitted: Vec<Role> = run.submitted.keys().copied().collect();
        submitted.sort_by_key(|r| r.as_str());
        Ok(RunView {
            run_id: run_id.into(),
            program_hash: run.program.hash.to_hex(),
            state: run.phase,
            staked,
            submitted,
            expires_at: run.expires_at,
            platform: self.attester.platform().into(),
            no_hardware_isolation: self.no_hardware_isolation(),
            error: run.finished.as_ref().and_then(|f| f.error),
        })
    }

    /// jc.result: the sealed answer and the receipt, once the run finished.
    pub fn result(&self, run_id: &str) -> Result<ResultView> {
        parse_result(&self.result_json(run_id)?)
    }

    /// [`Self::result`] as the JSON the box serves (made once, when the run ended).
    pub fn result_json(&self, run_id: &str) -> Result<axum::body::Bytes> {
        self.result_json_served(run_id, false)
    }

    /// [`Self::result_json`], without the owner note when `omit_note` (what a caller fetches).
    fn result_json_served(&self, run_id: &str, omit_note: bool) -> Result<axum::body::Bytes> {
        let mut st = self.lock();
        let run = st.kept_mut(run_id)?;
        if run.finished.is_some() {
            run.fetched = run.fetched.saturating_add(1);
        }
        let program = run.program.clone();
        let phase = run.phase;
        let f = run
            .finished
            .as_mut()
            .ok_or_else(|| JcError::NotReady(phase.as_str().into()))?;
        let json = f.json.clone();
        let note = match &f.note {
            _ if omit_note => None,
            Some(NoteSlot::Sealed { bytes, spec }) => {
                let bytes = bytes.clone();
                // The first fetch with the note takes it (the owner's); later ones make it
                // again.
                if let Some(spec) = spec {
                    f.note = Some(NoteSlot::Spec(spec.clone()));
                }
                Some(Ok(bytes))
            }
            Some(NoteSlot::Spec(spec)) => Some(Err(spec.clone())),
            None => None,
        };
        st.retally(run_id);
        drop(st);
        // The note's copy (or its seal) is made after the lock is let go.
        Ok(match note {
            None => json,
            Some(Ok(bytes)) => with_note(&json, &bytes),
            Some(Err(spec)) => with_note(&json, &spec.reseal(&program, run_id)?),
        })
    }

    /// DELETE: a party ends the run (cancel, or done with its result). Keys and stakes are
    /// dropped and the run id is spent. Not while the run is running, and not the caller's once
    /// a guarded run has finished: the owner's fetch of its receipt and note (whether the guard
    /// acted, and a `coverage_exceeded` that frees its turn) would meet `run_spent`, and the
    /// fetch is anyone's, so "fetched" proves nothing. (What the answer carried of the body is
    /// counted in the box's day book at release, whatever happens to the run after.) The run
    /// goes at its `keep_until` as any finished run; an honest caller's node deletes only runs
    /// it cancels.
    pub fn delete(&self, run_id: &str, action: &Envelope, now: u64) -> Result<()> {
        let mut st = self.lock();
        let run = st.kept(run_id)?;
        let by = verify_action(action, &run.program, run_id, "delete")?.role;
        if run.phase == Phase::Running {
            return Err(JcError::WrongState {
                state: "running".into(),
                action: "delete".into(),
            });
        }
        let noted = run.finished.as_ref().is_some_and(|f| f.note.is_some());
        if by == Role::Caller && noted {
            return Err(JcError::WrongState {
                state: run.phase.as_str().into(),
                action: "delete".into(),
            });
        }
        if let Some(run) = st.remove_run(run_id) {
            run.changed.notify_waiters();
        }
        let until = self.spent_until(now);
        st.spent_runs.insert(run_id.into(), until);
        drop(st);
        self.forget(&[run_id.to_owned()]);
        Ok(())
    }

    /// Drop expired open runs and stale results; forget old spent ids and expired programs.
    pub fn sweep(&self, now: u64) {
        {
            let mut limits = self.limits();
            let instant = std::time::Instant::now();
            limits.clients.prune(instant);
            limits.keys.prune(instant);
        }
        let idle = self.config.unstaked_ttl_secs;
        let until = self.spent_until(now);
        let mut st = self.lock();
        let dead: Vec<String> = st
            .runs
            .iter()
            .filter(|(_, r)| {
                (r.phase == Phase::Open && now >= r.expires_at)
                    // Opened and never staked in: it only holds a run slot.
                    || (r.phase == Phase::Open
                        && r.stakes.is_empty()
                        && r.uploading.is_empty()
                        && now >= r.opened_at.saturating_add(idle))
                    || (matches!(r.phase, Phase::Done | Phase::Failed) && now >= r.keep_until)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &dead {
            if let Some(run) = st.remove_run(id) {
                run.changed.notify_waiters();
            }
            st.spent_runs.insert(id.clone(), until);
        }
        st.spent_runs.retain(|_, until| *until > now);
        st.programs.retain(|_, (_, exp)| *exp > now);
        // Rewrite the list once most of it has expired (under the state lock: no open appends
        // meanwhile, so `programs` is every entry that must stay).
        if let Some(log) = &self.spent
            && log.lines() > 2 * st.programs.len() + 64
        {
            let live: Vec<(ProgramHash, u64)> =
                st.programs.iter().map(|(h, (_, exp))| (*h, *exp)).collect();
            if let Err(e) = log.compact(&live) {
                tracing::error!(code = e.code(), error = %e, "spent-program list not compacted");
            }
        }
        drop(st);
        self.forget(&dead);
    }
}

/// The plaintext length every owner note sealed since coverage levels is padded to, whatever
/// the program, the body, the answer or the outcome: a note holds whether the guard acted and
/// at most 4 bytes of coverage (a 16-region mask and a secret level; 68 bytes framed), so one
/// small length fits all. A positions
/// bitmap's length followed the body's, and the note was padded to the body's size bucket to
/// hide it; levels have no such length, and a fixed size now tells the path, the box operator
/// and anyone who sees the sealed result not even the body's bucket (nor costs the box and the
/// owner a body-sized run of zeros per run). Notes stored before keep the length they were
/// sealed with ([`NoteSpec::padded`]); readers never relied on a length.
pub const OWNER_NOTE_PADDED: u64 = 128;

/// One answer of a guarded run through the guard: its levels if the box releases it, else its
/// catch as the day book charges it. Released: the guard passes it (`check_released`) and,
/// with day limits, its levels added to the caller's day stay under them (`allowance`). Caught
/// by the guard: measured as if released (`released_levels`), and whether what was caught is a
/// secret. Past the day's limits: charged all it carried (`Caught::past_limits`).
///
/// The day's limits are checked here, at release, not only before the run (review 24b G0):
/// the levels count more forms than the check catches (a secret's slices, its parts far apart),
/// so one answer the guard passed could carry the whole secret, released once and refused only
/// the next run. Such an answer gets what a catch gets — `WITHHELD_ANSWER`, or under
/// `regenerate` the neutral round, and `guard_acted` in the owner's note — rather than a
/// `coverage_exceeded` failure: that code means "refused before the provider was asked" (the
/// owner's node reads it as the day spent, the caller as no answer), while this answer was
/// asked for and came back; and under `regenerate` a failure would tell the caller the very
/// thing the neutral round hides. The caller learns what the next run's `coverage_exceeded`
/// told it before, one call earlier; the owner, one `guard_acted` bit, as for any catch.
///
/// Without day limits (the owner staked 0/0) nothing is counted: a caught answer is not
/// measured, its charge would go nowhere.
fn checked(
    prepared: &skillbox_guard::Prepared,
    answer: &str,
    allowance: Option<&Allowance>,
) -> std::result::Result<skillbox_guard::CoverageLevels, Caught> {
    match skillbox_guard::check_released(prepared, answer) {
        (_, Some(levels)) => match allowance {
            Some(day) if day.reached_by(&levels) => Err(Caught::past_limits(&levels)),
            _ => Ok(levels),
        },
        (verdict, None) => {
            let secret = matches!(
                verdict,
                skillbox_guard::Verdict::Caught(skillbox_guard::Catch {
                    reason: skillbox_guard::Reason::Canary(_) | skillbox_guard::Reason::SecretLine,
                    ..
                })
            );
            let measured = match allowance {
                Some(_) => skillbox_guard::released_levels(prepared, answer),
                None => skillbox_guard::CoverageLevels::NONE,
            };
            Err(Caught::of(&measured, secret))
        }
    }
}

/// The owner's day limits its stake carries (checked at stake: exactly 8 bytes). A program
/// with its guard on whose owner stake has none (an owner node from before `day_limits`) gets
/// [`DayLimits::DEFAULT`], its node's own defaults, rather than no limit at all; a program
/// without a guard, or with it off, has none (its answers carry no levels).
fn day_limits_of(
    program: &ApprovedProgram,
    stakes: &HashMap<Role, Vec<Entry>>,
) -> Result<Option<DayLimits>> {
    let staked = stakes
        .get(&Role::Owner)
        .and_then(|owner| {
            owner
                .iter()
                .find(|e| e.name == crate::day::DAY_LIMITS_ENTRY)
        })
        .map(|e| DayLimits::from_bytes(&e.data))
        .transpose()?;
    Ok(match staked {
        // `enabled: false` is how an owner turns its guard off (its node then stakes no
        // limits either): its answers carry no levels, and nothing is imposed on it.
        None if program.program.guard.as_ref().is_some_and(|g| g.enabled) => {
            Some(DayLimits::DEFAULT)
        }
        staked => staked,
    })
}

/// A guarded program's note to the owner (see [`crate::receipt::OwnerNote`]), sealed to the
/// owner's node key from a fresh seed, padded to [`OWNER_NOTE_PADDED`]; `None` for an unguarded
/// one. Whether the guard acted, and nothing of what the answer covered: the box keeps that
/// in its day book ([`crate::day`]).
fn seal_owner_note(
    program: &ApprovedProgram,
    run_id: &str,
    acted: bool,
) -> Result<Option<SealedNote>> {
    if program.program.guard.is_none() {
        return Ok(None);
    }
    let mut seed = Zeroizing::new([0u8; 32]);
    getrandom::fill(&mut seed[..]).map_err(|e| JcError::Internal(format!("randomness: {e}")))?;
    let coverage = None;
    let padded = OWNER_NOTE_PADDED;
    let sealed = seal_note(program, run_id, &seed, acted, None, padded)?;
    let sha256 = Sha256::digest(&sealed).into();
    Ok(Some(SealedNote {
        sealed,
        spec: NoteSpec {
            seed,
            acted,
            coverage,
            levels: true,
            sha256,
            padded: Some(padded),
        },
    }))
}

/// The sealed note: whether the guard acted, the released answer's coverage (`(bytes, true)`:
/// levels; `false`: a positions bitmap of a run stored before levels), and zeros up to
/// `padded` ([`OWNER_NOTE_PADDED`]; a run stored before levels: [`OwnerNote::padded_len_for`]
/// of the body's bucket) — the same sealed size for every run, acted or not, failed or not,
/// whatever the answer covered — sealed from `seed`.
///
/// [`OwnerNote::padded_len_for`]: crate::receipt::OwnerNote::padded_len_for
fn seal_note(
    program: &ApprovedProgram,
    run_id: &str,
    seed: &[u8; 32],
    acted: bool,
    coverage: Option<(&[u8], bool)>,
    padded: u64,
) -> Result<Vec<u8>> {
    use crate::receipt::OwnerNote;
    let to = seal::owner_note_key(&program.program.owner_node_key()?)?;
    let info = seal::info(Purpose::OwnerNote, run_id, &program.hash);
    let mut sealer = Sealer::seeded(&to, &info, seed)?;
    let entry = |name: &str, len: u64| seal::ENTRY_OVERHEAD + name.len() as u64 + len;
    let mut written = entry(OwnerNote::ENTRY, 1) + entry(OwnerNote::PADDING_ENTRY, 0);
    sealer.entry_bytes(OwnerNote::ENTRY, &[acted as u8])?;
    if let Some((bytes, levels)) = coverage {
        let name = if levels {
            OwnerNote::COVERAGE_ENTRY
        } else {
            OwnerNote::POSITIONS_ENTRY
        };
        written += entry(name, bytes.len() as u64);
        sealer.entry_bytes(name, bytes)?;
    }
    // A body whose fold lengthens its canaries past the bound gets no padding: its size then
    // says so (the owner's own doing; no ordinary body comes near).
    sealer.reserve(padded.max(written) + 1);
    sealer.entry_zeros(OwnerNote::PADDING_ENTRY, padded.saturating_sub(written))?;
    // The padding entry already brings every note of the run to `padded`: no bucket on top.
    sealer.finish_unpadded()
}

/// The plaintext size every sealed answer of `program` has ([`seal::answer_padded_len`]): its
/// output bound, or the withheld answer where a bound is shorter than that (the fixed answer
/// is not cut, so it must fit the same size).
pub fn answer_padded_len(program: &Program) -> u64 {
    seal::answer_padded_len(program.output.max_bytes.max(WITHHELD_ANSWER.len() as u64))
}

/// A served result's JSON read back (in-process callers; the box's own bytes).
fn parse_result(json: &[u8]) -> Result<ResultView> {
    serde_json::from_slice(json).map_err(|e| JcError::Internal(format!("result view: {e}")))
}

/// The receipt's binding of the owner's note: SHA-256 of its sealed bytes.
fn note_digest(note: Option<&SealedNote>) -> Option<String> {
    note.map(|n| hex::encode(n.spec.sha256))
}

/// Cut `text` to at most `max` bytes on a character boundary. Returns (text, was_cut).
pub fn cap(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

fn short(id: &str) -> String {
    id.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guard's verdict through `checked`: a caught PIN is measured for the day book only
    /// when there are day limits to charge (without, its charge went nowhere: the walk is
    /// skipped, the verdict the same); an answer the guard passes is released with its levels
    /// unless they reach the day's limits, then caught and charged all it carried.
    #[test]
    fn checked_measures_a_catch_only_for_a_day_book_and_catches_an_answer_past_the_limits() {
        let spec = skillbox_guard::GuardSpec::default_for(false);
        let prepared =
            skillbox_guard::prepare("The door code is [[secret:4821]].", &spec).expect("body");
        let half = DayLimits {
            coverage_permille: 0,
            canary_coverage_permille: 500,
        };
        let day = |canary| Allowance {
            tally: DayTally { regions: 0, canary },
            limits: half,
        };
        let caught = checked(&prepared, "The code is 4821.", Some(&day(0)));
        assert_eq!(caught.map_err(|c| (c.canary, c.secret)), Err((64, true)));
        let unmeasured = checked(&prepared, "The code is 4821.", None);
        assert_eq!(unmeasured.map_err(|c| (c.canary, c.secret)), Err((0, true)));
        // Three of its digits: under the check's fragments, 48/64 to the levels.
        let slice = "The first digits are 482.";
        let levels = checked(&prepared, slice, None).expect("released without limits");
        assert_eq!(levels.canary_parts(), 48);
        let past = checked(&prepared, slice, Some(&day(0))).expect_err("past half a secret");
        assert_eq!(past, Caught::past_limits(&levels));
        assert_eq!(
            checked(&prepared, "Sunny all day.", Some(&day(31))).map(|l| l.canary_parts()),
            Ok(0),
            "nothing carried, the day still under"
        );
    }

    /// A note's spec reads back as written, its padded length with it; a spec written before
    /// the padded length was kept (form byte 0 or 1) reads with none (the note was padded to
    /// the program's body limit); any other form, or a padded length cut short, is tampering.
    /// Whether the coverage is levels or a positions bitmap (a run stored before levels) reads
    /// back too, so the note is made again under its own entry.
    #[test]
    fn a_note_spec_reads_back_with_its_padded_length_and_the_older_form_without() {
        let spec = |coverage: Option<Vec<u8>>, padded: Option<u64>, levels: bool| NoteSpec {
            seed: Zeroizing::new([7; 32]),
            acted: true,
            coverage,
            levels,
            sha256: [9; 32],
            padded,
        };
        for (coverage, padded, levels) in [
            (Some(vec![1, 2, 3]), Some(1280), true),
            (Some(vec![1, 2, 3]), Some(1280), false),
            (None, Some(1280), false),
            (Some(vec![4]), None, false),
            (None, None, false),
        ] {
            let bytes = spec(coverage.clone(), padded, levels).to_bytes();
            let back = NoteSpec::from_bytes(&bytes).expect("reads back");
            assert_eq!(
                (
                    back.coverage,
                    back.levels,
                    back.padded,
                    back.acted,
                    back.sha256,
                    *back.seed
                ),
                (coverage, levels, padded, true, [9; 32], [7; 32])
            );
        }
        // The older form: byte 65 says only whether a coverage follows.
        let mut old = vec![7u8; 32];
        old.extend_from_slice(&[9; 32]);
        old.extend_from_slice(&[1, 1, 0xAB]);
        let back = NoteSpec::from_bytes(&old).expect("the older form reads");
        assert_eq!(
            (back.coverage, back.levels, back.padded),
            (Some(vec![0xAB]), false, None)
        );
        // An unknown form bit, positions and levels at once, and a padded length cut short.
        for form in [8, NOTE_HAS_COVERAGE | NOTE_HAS_LEVELS] {
            let mut bad = old.clone();
            bad[65] = form;
            assert!(matches!(
                NoteSpec::from_bytes(&bad),
                Err(JcError::StoreTampered)
            ));
        }
        let written = spec(None, Some(1280), true).to_bytes();
        assert!(matches!(
            NoteSpec::from_bytes(&written[..70]),
            Err(JcError::StoreTampered)
        ));
    }

    #[test]
    fn cap_never_exceeds_and_keeps_utf8() {
        assert_eq!(cap("hello".into(), 10), ("hello".into(), false));
        assert_eq!(cap("hello".into(), 3), ("hel".into(), true));
        let (t, cut) = cap("aé€".into(), 4);
        assert!(cut && t.len() <= 4 && t == "aé");
        let (t, cut) = cap("€€".into(), 2);
        assert!(cut && t.is_empty());
    }
}
