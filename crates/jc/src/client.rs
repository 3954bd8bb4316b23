//! The jc client the nodes use: open a run, attest with the client's own nonce, verify (every
//! check of §8), stake from a byte stream, submit, fetch the result and the receipt.
//!
//! Sealing and opening are plain functions ([`seal_stake`], [`open_result`]) so a node can run
//! them on a blocking thread next to its source store; [`BoxClient`] only moves bytes.
//!
//! An https box is trusted by the TLS key its attestation binds, never by a CA
//! ([`crate::tls`]): the attestation must come over a connection showing the key its verified
//! report binds; a program (the open), the `/healthz` a node acts on and a run's attestation go
//! only over connections showing an attested key — before the first of them, the box's own
//! attestation ([`BoxClient::attest_box`]) admits its key —, and a verified run's stakes,
//! submits, status, results and delete only over connections showing the one key that run's
//! attestation bound. `http://` is for a box on loopback only.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::SigningKey;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::attest::{
    Attestation, VerifiedBox, VerifiedRun, VerifyPolicy, verify_attestation, verify_box_attestation,
};
use crate::dsse::{ApprovedProgram, Envelope, PartyAction, sign_action};
use crate::error::{JcError, Result};
use crate::program::{ProgramHash, Role};
use crate::receipt::{self, OwnerNote, Receipt};
use crate::run::{Opened, ResultView, RunFailure, RunView};
use crate::seal::{self, HpkeKeyPair, Purpose, Sealer};
use crate::server::{
    ErrorBody, Health, OpenedReply, STAKE_ACTION_HEADER, SUBMIT_ACTION_HEADER, Staked, Submitted,
};
use crate::tls::{AttestedKeys, KeyVerifier};

/// One named piece of material to stake, read as a stream of exactly `len` bytes.
pub struct StakeInput<'a> {
    pub name: String,
    pub len: u64,
    pub reader: Box<dyn Read + Send + 'a>,
}

impl<'a> StakeInput<'a> {
    pub fn bytes(name: &str, data: &'a [u8]) -> StakeInput<'a> {
        StakeInput {
            name: name.into(),
            len: data.len() as u64,
            reader: Box::new(data),
        }
    }
}

/// Seal a party's stake to a verified run (HPKE to the run key, info = role, run id, program).
pub fn seal_stake(run: &VerifiedRun, role: Role, inputs: Vec<StakeInput<'_>>) -> Result<Vec<u8>> {
    let mut sealer = Sealer::new(
        &run.hpke_public_key,
        &seal::info(Purpose::Stake(role), &run.run_id, &run.program_hash),
    )?;
    for mut input in inputs {
        sealer.entry(&input.name, input.len, &mut input.reader)?;
    }
    sealer.finish()
}

/// Keep only characters that need no escaping in a URL (nonces are hex; run ids too).
fn url_safe(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect()
}

/// A fresh 128-bit nonce for an attestation request, hex.
pub fn new_nonce() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source is available");
    hex::encode(b)
}

/// Whether `s` has the form of a [`new_nonce`]: 32 lowercase hex digits. A peer's half of a
/// [`joint_nonce`] is taken only in this form.
pub fn is_nonce_half(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The nonce both parties of a call ask a run's attestation for, from a fresh half of each: the
/// caller opens the run asking for it and forwards the attestation with its half in
/// `call.session`; the owner, holding its own half (sent in `call.accepted`), checks the
/// attestation against this without asking the box again. Fresh for either side: neither half
/// was known before its side chose it, so no attestation made before that can carry the hash.
/// Domain-separated and length-framed, so no other pair of halves gives the same nonce.
pub fn joint_nonce(caller_half: &str, owner_half: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"skillbox joint attestation nonce v1\0");
    for half in [caller_half, owner_half] {
        h.update((half.len() as u64).to_be_bytes());
        h.update(half.as_bytes());
    }
    hex::encode(h.finalize())
}

/// The caller's answer, opened.
#[derive(Clone, PartialEq, Eq)]
pub struct Output {
    pub answer: String,
    pub truncated: bool,
    /// Carried from the verified attestation: the run had no hardware isolation.
    pub no_hardware_isolation: bool,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Output({} bytes, truncated: {})",
            self.answer.len(),
            self.truncated
        )
    }
}

/// The body of an open: the twice-signed program's JSON, padded with trailing spaces (JSON
/// allows them) to its size bucket, the next power of two of at least 1 KiB, as stakes are.
/// The path sees an open's size; unpadded, it told apart skills, prompt templates and how many
/// sources a caller chose.
pub fn open_body(program: &Envelope) -> Vec<u8> {
    let mut body = program.to_json();
    let padded = usize::try_from(crate::seal::bucket(body.len() as u64)).unwrap_or(body.len());
    body.resize(padded.max(body.len()), b' ');
    body
}

/// Open the sealed answer with the caller's result key.
pub fn open_result(
    view: &ResultView,
    result_key: &HpkeKeyPair,
    run: &VerifiedRun,
) -> Result<Output> {
    let sealed_b64 = view.sealed_output.as_ref().ok_or_else(|| {
        JcError::NotReady(format!(
            "run failed: {}",
            view.error.map_or("unknown", RunFailure::as_str)
        ))
    })?;
    let sealed = STANDARD
        .decode(sealed_b64)
        .map_err(|_| JcError::Sealed("sealed output is not base64".into()))?;
    let info = seal::info(Purpose::Result, &run.run_id, &run.program_hash);
    let entries = seal::open(&sealed, result_key, &info, || JcError::ResultNotForThisKey)?;
    let answer = entries
        .iter()
        .find(|e| e.name == seal::ANSWER_ENTRY)
        .ok_or_else(|| JcError::Sealed("no answer entry".into()))?;
    let truncated = entries
        .iter()
        .find(|e| e.name == seal::TRUNCATED_ENTRY)
        .map(|e| e.data.first() == Some(&1))
        .unwrap_or(false);
    let answer = String::from_utf8(answer.data.to_vec())
        .map_err(|_| JcError::Sealed("answer is not UTF-8".into()))?;
    Ok(Output {
        answer,
        truncated,
        no_hardware_isolation: run.no_hardware_isolation,
    })
}

/// Check the receipt with the run key bound by the attestation.
pub fn verify_receipt(view: &ResultView, run: &VerifiedRun) -> Result<Receipt> {
    receipt::verify(&view.receipt, run)
}

/// The owner opens a guarded run's note with its node key as an X25519 pair (`note_key`:
/// [`HpkeKeyPair::from_node_key`], derived once, not for every note): `None` when the verified
/// receipt names no note (an unguarded program). A note that is missing, is not the one the receipt
/// signs, or does not open for this run, program and key is refused: the owner then does not
/// know whether the guard acted, and says so rather than guess.
pub fn open_owner_note(
    view: &ResultView,
    receipt: &Receipt,
    note_key: &HpkeKeyPair,
    run: &VerifiedRun,
) -> Result<Option<OwnerNote>> {
    let Some(digest) = &receipt.owner_note_sha256 else {
        return Ok(None);
    };
    let sealed_b64 = view
        .owner_note
        .as_ref()
        .ok_or_else(|| JcError::Sealed("a guarded run's result has no owner note".into()))?;
    let sealed = STANDARD
        .decode(sealed_b64)
        .map_err(|_| JcError::Sealed("owner note is not base64".into()))?;
    if hex::encode(Sha256::digest(&sealed)) != *digest {
        return Err(JcError::Sealed(
            "owner note is not the one the receipt signs".into(),
        ));
    }
    let info = seal::info(Purpose::OwnerNote, &run.run_id, &run.program_hash);
    // Its padding is framed and checked like any entry, but not copied out.
    let entries = seal::open_named(
        &sealed,
        note_key,
        &info,
        || JcError::Sealed("owner note is not for this owner, run and program".into()),
        |name| name == OwnerNote::ENTRY || name == OwnerNote::COVERAGE_ENTRY,
    )?;
    let acted = entries
        .iter()
        .find(|e| e.name == OwnerNote::ENTRY)
        .ok_or_else(|| JcError::Sealed("owner note has no entry".into()))?;
    let coverage = match entries.iter().find(|e| e.name == OwnerNote::COVERAGE_ENTRY) {
        Some(e) => Some(
            skillbox_guard::CoverageLevels::from_bytes(&e.data)
                .map_err(|_| JcError::Sealed("owner note coverage is malformed".into()))?,
        ),
        None => None,
    };
    Ok(Some(OwnerNote {
        guard_acted: acted.data.first() == Some(&1),
        coverage,
    }))
}

/// The most a box's answer may be, read before it is parsed: the largest honest one is a result
/// (an answer of at most [`crate::program::MAX_OUTPUT_BYTES`], sealed and in base64, and its
/// receipt), then an attestation with its certificate chains. A box that sends more is refused
/// with [`JcError::ResponseTooLarge`] before the rest is read: a hostile box cannot make the
/// node hold an unbounded answer in memory.
pub const MAX_RESPONSE_BYTES: usize = 4 * crate::program::MAX_OUTPUT_BYTES as usize;
/// A refusal's body: only its code is read.
const MAX_ERROR_RESPONSE_BYTES: usize = 64 * 1024;

/// The body of `resp`, at most `limit` bytes (a longer one, announced or streamed, is refused
/// as soon as it passes the limit).
async fn read_capped(mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>> {
    let announced = resp.content_length();
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(JcError::ResponseTooLarge { limit });
    }
    // Sized once from the announced length (within the limit): a guarded run's result is
    // ~350 KiB, which a growing buffer copied about twice over on its way in.
    let mut out = Vec::with_capacity(announced.map_or(0, |n| n as usize));
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| JcError::Transport(e.to_string()))?
    {
        if out.len().saturating_add(chunk.len()) > limit {
            return Err(JcError::ResponseTooLarge { limit });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Whether `url` names this machine (the providers' rule, so a box and a provider agree).
fn is_loopback_url(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| skillbox_providers::is_loopback(&u))
}

/// A run [`BoxClient::open_attesting`] opened: what the box answered, and the attestation it
/// answered with, for the nonce this node sent, over a connection that showed that TLS key.
#[derive(Debug)]
pub struct OpenedRun {
    pub opened: Opened,
    attestation: Option<(Attestation, String, Option<String>)>,
}

impl OpenedRun {
    /// Whether the box answered the open with the run's attestation (a box of an older
    /// version does not: [`BoxClient::attest_opened`] then asks for it).
    pub fn attested(&self) -> bool {
        self.attestation.is_some()
    }

    /// The attestation the box answered the open with, and the nonce it was asked for.
    pub fn attestation(&self) -> Option<(&Attestation, &str)> {
        self.attestation.as_ref().map(|(a, n, _)| (a, n.as_str()))
    }
}

/// The hash of the TLS key the connection `resp` came over showed (`None` over plain HTTP).
fn seen_key(resp: &reqwest::Response) -> Option<String> {
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .and_then(|der| crate::tls::spki_sha256(&der.to_vec().into()))
}

/// How an attestation reached this node: over a connection of its own to the box (the hash of
/// the TLS key it showed; `None` over plain HTTP), or forwarded by another party.
enum Came {
    Over(Option<String>),
    Forwarded,
}

/// At most this many per-key clients of one box are kept ([`BoxClient::run_client`]); one
/// dropped is built again when its key's run asks.
const MAX_RUN_CLIENTS: usize = 8;

/// A reqwest client builder for a box on loopback or not (see [`BoxClient::new`]).
fn client_builder(loopback: bool) -> reqwest::ClientBuilder {
    let b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(120));
    // A proxy from the environment would carry loopback traffic (this node's stakes, the box's
    // answers) to whoever runs it; a remote box may sit behind the operator's proxy (a CONNECT
    // tunnel: the box's key still shows end to end).
    if loopback { b.no_proxy() } else { b }
}

/// A reqwest client whose TLS connections accept what `verifier` does, each answer saying which
/// key it saw.
fn tls_client(loopback: bool, verifier: KeyVerifier) -> Result<reqwest::Client> {
    client_builder(loopback)
        .tls_info(true)
        .tls_backend_preconfigured(verifier.client_config()?)
        .build()
        .map_err(|e| JcError::Transport(e.to_string()))
}

/// HTTP client of one box.
#[derive(Clone)]
pub struct BoxClient {
    base: String,
    loopback: bool,
    /// The box's own attestation and a first contact's `/healthz`: nothing of a call, no figure
    /// a node acts on. For an https box, any TLS key (an attestation's is compared with its
    /// report's), and each answer says which it saw.
    http: reqwest::Client,
    /// The open, `/healthz` and a run's attestation: for an https box, attested keys only.
    pinned: reqwest::Client,
    /// The TLS keys attestations of this https box bound; `None` for plain HTTP (loopback).
    tls: Option<Arc<AttestedKeys>>,
    /// For an https box, a client per run key (the last [`MAX_RUN_CLIENTS`] used, newest
    /// last): a verified run's requests go to its own key only.
    run_clients: Arc<std::sync::Mutex<Vec<(String, reqwest::Client)>>>,
    /// Held while the box's own attestation is asked for: calls opening at once on a box
    /// whose key is not yet admitted wait for one attestation rather than each making one.
    attesting_box: Arc<tokio::sync::Mutex<()>>,
}

impl BoxClient {
    /// A client of the box at `base_url`: `https://`, or `http://` on loopback only (a
    /// `BadRequest` otherwise).
    pub fn new(base_url: &str) -> Result<BoxClient> {
        let loopback = is_loopback_url(base_url);
        let scheme = reqwest::Url::parse(base_url)
            .map(|u| u.scheme().to_owned())
            .map_err(|_| JcError::BadRequest("the box URL does not parse".into()))?;
        let (http, pinned, tls) = match scheme.as_str() {
            "https" => {
                let keys = Arc::new(AttestedKeys::default());
                let observing = tls_client(loopback, KeyVerifier::observing())?;
                // The open's answer carries the run's attestation: its connection's key too is
                // compared with the one the run binds.
                let pinned = tls_client(loopback, KeyVerifier::pinned(keys.clone()))?;
                (observing, pinned, Some(keys))
            }
            "http" if loopback => {
                let http = client_builder(loopback)
                    .build()
                    .map_err(|e| JcError::Transport(e.to_string()))?;
                (http.clone(), http, None)
            }
            "http" => {
                return Err(JcError::BadRequest(
                    "a box off loopback is reached over https only".into(),
                ));
            }
            _ => return Err(JcError::BadRequest("a box URL is http(s)".into())),
        };
        Ok(BoxClient {
            base: base_url.trim_end_matches('/').to_owned(),
            loopback,
            http,
            pinned,
            tls,
            run_clients: Arc::default(),
            attesting_box: Arc::default(),
        })
    }

    /// The client for run `run_id`'s requests: for an https box, one whose connections accept
    /// only the key the run's verified attestation bound ([`AttestedKeys::bind_run`]), so no
    /// other key of this URL — a box's earlier start, a second box behind a TCP pass-through
    /// balancer — receives them; `tls_key_not_attested` for a run this client verified none of,
    /// before a byte leaves. For plain HTTP (loopback), the one client.
    fn run_client(&self, run_id: &str) -> Result<reqwest::Client> {
        let Some(keys) = &self.tls else {
            return Ok(self.pinned.clone());
        };
        let key = keys.run_key(run_id).ok_or(JcError::TlsKeyNotAttested)?;
        let mut clients = self.run_clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = clients.iter().position(|(k, _)| *k == key) {
            let kept = clients.remove(at);
            let client = kept.1.clone();
            clients.push(kept);
            return Ok(client);
        }
        let client = tls_client(self.loopback, KeyVerifier::only(&key, keys.clone()))?;
        clients.push((key, client.clone()));
        if clients.len() > MAX_RUN_CLIENTS {
            clients.remove(0);
        }
        Ok(client)
    }

    /// For an https box, `run`'s requests go to the key its attestation bound, and only to it.
    fn bind_run(&self, run: &VerifiedRun) -> Result<()> {
        if let Some(keys) = &self.tls {
            let bound = run
                .tls_spki_sha256
                .as_deref()
                .ok_or(JcError::TlsKeyNotAttested)?;
            keys.bind_run(&run.run_id, bound, run.expires_at);
        }
        Ok(())
    }

    /// Whether this box is reached over TLS (and its key pinned by attestation).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Accept the TLS key `run` binds for that run's requests: a run this node verified before
    /// it restarted (its stored record), whose stake, submit or result comes next. A record
    /// binding no key gets none (its requests then fail `tls_key_not_attested`).
    pub fn admit_verified(&self, run: &VerifiedRun) {
        let _ = self.bind_run(run);
    }

    /// A failed request's error: `tls_key_not_attested` when a pinned handshake was refused
    /// since `before` (this client's refusal count when the request started).
    fn transport_error(&self, before: u64, e: reqwest::Error) -> JcError {
        match &self.tls {
            Some(keys) if keys.refusals() > before => JcError::TlsKeyNotAttested,
            _ => JcError::Transport(e.to_string()),
        }
    }

    fn refusals(&self) -> u64 {
        self.tls.as_ref().map_or(0, |k| k.refusals())
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `<base>/v1/runs/<id><tail>`, for a well-formed run id only (an id from a box or a peer
    /// never goes into a URL unchecked).
    fn run_url(&self, run_id: &str, tail: &str) -> Result<String> {
        if !crate::error::is_run_id(run_id) {
            return Err(JcError::BadRunId);
        }
        Ok(format!("{}/v1/runs/{run_id}{tail}", self.base))
    }

    async fn parse<T: DeserializeOwned>(resp: reqwest::Response) -> Result<T> {
        let status = resp.status();
        let limit = if status.is_success() {
            MAX_RESPONSE_BYTES
        } else {
            MAX_ERROR_RESPONSE_BYTES
        };
        let bytes = read_capped(resp, limit).await?;
        if !status.is_success() {
            // Only a well-formed code crosses; the box's message is not read at all.
            let code = serde_json::from_slice::<ErrorBody>(&bytes)
                .ok()
                .map(|b| b.error)
                .filter(|c| {
                    !c.is_empty()
                        && c.len() <= 64
                        && c.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                })
                .unwrap_or_else(|| "http".into());
            return Err(JcError::Remote {
                status: status.as_u16(),
                code,
            });
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| JcError::Transport(format!("box answer not understood: {e}")))
    }

    /// Send a request built on [`Self::http`] or [`Self::pinned`] and read its answer.
    async fn send<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> Result<T> {
        let before = self.refusals();
        let resp = req
            .send()
            .await
            .map_err(|e| self.transport_error(before, e))?;
        Self::parse(resp).await
    }

    /// `/healthz` as anyone on the path may answer it: for an https box, over a connection
    /// showing any key. A node takes from it only a first contact's identity (the platform and
    /// key an unpinned loopback box is then trusted on, each later answer and attestation
    /// compared with), never a figure it acts on: those come from [`Self::attested_health`].
    pub async fn health(&self) -> Result<Health> {
        self.send(self.http.get(format!("{}/healthz", self.base)))
            .await
    }

    /// `/healthz` of the box `policy` attests: for an https box, over a connection showing a key
    /// its attestation bound (the box attested first when no key is admitted, once per key, as
    /// before an open), so the providers, load and identity a node acts on are the attested
    /// box's words; a man in the middle can make the request fail, not answer it.
    pub async fn attested_health(&self, policy: &VerifyPolicy) -> Result<Health> {
        let url = format!("{}/healthz", self.base);
        self.attested(policy, || self.send(self.pinned.get(url.as_str())))
            .await
    }

    /// `request` (made over [`Self::pinned`]) at a box `policy` attests: for an https box, the
    /// box is attested first unless a key of it is admitted already (once per key, not per
    /// request), and again when the pinned handshake is refused because the box came back with
    /// another key (a hardware box makes a fresh one at every start), then `request` once more.
    async fn attested<T, F, Fut>(&self, policy: &VerifyPolicy, request: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let Some(keys) = &self.tls else {
            return request().await;
        };
        if keys.admissions() == 0 {
            self.attest_box_once(policy, 0).await?;
        }
        let admitted = keys.admissions();
        match request().await {
            Err(JcError::TlsKeyNotAttested) => {
                self.attest_box_once(policy, admitted).await?;
                request().await
            }
            other => other,
        }
    }

    /// jc.open with the twice-signed program, over a connection showing an attested key only
    /// (for an https box: [`Self::attest_box`] first, or `tls_key_not_attested` before a byte of
    /// the program leaves; [`Self::open_attested`] does both).
    pub async fn open(&self, program: &Envelope) -> Result<Opened> {
        let opened: Opened = self
            .send(
                self.pinned
                    .post(format!("{}/v1/runs", self.base))
                    .header("content-type", "application/json")
                    .body(open_body(program)),
            )
            .await?;
        if !crate::error::is_run_id(&opened.run_id) {
            return Err(JcError::BadRunId);
        }
        Ok(opened)
    }

    /// jc.open with a fresh nonce of this node's own, asking for the new run's attestation in
    /// the same answer; [`BoxClient::attest_opened`] checks it (or, from a box that sent none,
    /// asks for one).
    pub async fn open_attesting(&self, program: &Envelope) -> Result<OpenedRun> {
        self.open_attesting_for(program, new_nonce()).await
    }

    /// [`BoxClient::open_attesting`] asking for the attestation for `nonce` (a [`joint_nonce`]
    /// whose caller half is this node's fresh one), over a connection showing an attested key
    /// only (see [`Self::open`]).
    pub async fn open_attesting_for(&self, program: &Envelope, nonce: String) -> Result<OpenedRun> {
        let before = self.refusals();
        let resp = self
            .pinned
            .post(format!("{}/v1/runs?nonce={}", self.base, url_safe(&nonce)))
            .header("content-type", "application/json")
            .body(open_body(program))
            .send()
            .await
            .map_err(|e| self.transport_error(before, e))?;
        let seen = seen_key(&resp);
        let reply: OpenedReply = Self::parse(resp).await?;
        if !crate::error::is_run_id(&reply.opened.run_id) {
            return Err(JcError::BadRunId);
        }
        Ok(OpenedRun {
            opened: reply.opened,
            attestation: reply.attestation.map(|a| (a, nonce, seen)),
        })
    }

    /// [`Self::open_attesting_for`] at a box whose own attestation `policy` accepts: for an https
    /// box, the box is attested first unless a key of it is admitted already (once per key, not
    /// per call), and again when the open's pinned handshake is refused because the box came
    /// back with another key (a hardware box makes a fresh one at every start). The program
    /// goes over a connection showing an attested key only: a man in the middle on the path,
    /// whose key no box attestation binds, receives none of it.
    pub async fn open_attested(
        &self,
        program: &Envelope,
        nonce: String,
        policy: &VerifyPolicy,
    ) -> Result<OpenedRun> {
        self.attested(policy, || self.open_attesting_for(program, nonce.clone()))
            .await
    }

    /// [`Self::attest_box`] unless another request admitted a key since `admitted` (this
    /// client's admissions when the caller last looked): one attestation per key change.
    async fn attest_box_once(&self, policy: &VerifyPolicy, admitted: u64) -> Result<()> {
        let _one = self.attesting_box.lock().await;
        if self.tls.as_ref().map_or(0, |k| k.admissions()) != admitted {
            return Ok(());
        }
        self.attest_box(policy).await.map(|_| ())
    }

    /// The box's own attestation (`GET /v1/attestation`) for a fresh nonce of this node's,
    /// checked with `policy` as a run's is ([`verify_box_attestation`]); for an https box, the
    /// key it binds must be the one its connection showed, and is admitted for the pinned
    /// connections (the open's among them).
    pub async fn attest_box(&self, policy: &VerifyPolicy) -> Result<VerifiedBox> {
        let nonce = new_nonce();
        let (att, seen) = self
            .attestation_at(&self.http, self.box_attestation_url(&nonce))
            .await?;
        let verified = verify_box_attestation(&att, &nonce, policy, crate::run::now_secs())?;
        self.admit_bound(verified.tls_spki_sha256.as_deref(), Came::Over(seen))?;
        Ok(verified)
    }

    /// The attestation of a run [`BoxClient::open_attesting`] opened, with every client-side
    /// check [`BoxClient::attest`] makes: the one its open answered with, or, when it came
    /// without one, a fresh one asked for.
    pub async fn attest_opened(
        &self,
        program: &ApprovedProgram,
        run: OpenedRun,
        policy: &VerifyPolicy,
    ) -> Result<VerifiedRun> {
        match run.attestation {
            Some((att, nonce, seen)) => self.check_attestation(
                &att,
                Came::Over(seen),
                program,
                &run.opened.run_id,
                &nonce,
                policy,
            ),
            None => self.attest(program, &run.opened.run_id, policy).await,
        }
    }

    /// The run's attestation for `nonce`, unchecked, over a connection showing an attested key
    /// (for an https box: `tls_key_not_attested` while none is admitted; [`Self::attest`]
    /// attests the box first).
    pub async fn attestation(&self, run_id: &str, nonce: &str) -> Result<Attestation> {
        Ok(self.attestation_seen(run_id, nonce).await?.0)
    }

    /// The box's own attestation for `nonce`, unchecked (see [`Self::attest_box`]).
    pub async fn box_attestation(&self, nonce: &str) -> Result<Attestation> {
        Ok(self
            .attestation_at(&self.http, self.box_attestation_url(nonce))
            .await?
            .0)
    }

    fn box_attestation_url(&self, nonce: &str) -> String {
        format!("{}/v1/attestation?nonce={}", self.base, url_safe(nonce))
    }

    /// The run's attestation, and the hash of the TLS key the connection it came over showed
    /// (`None` over plain HTTP). Over the pinned client: the request names the run, which a
    /// man in the middle on the path, whose key no attestation binds, does not read.
    async fn attestation_seen(
        &self,
        run_id: &str,
        nonce: &str,
    ) -> Result<(Attestation, Option<String>)> {
        let url = self.run_url(run_id, &format!("/attestation?nonce={}", url_safe(nonce)))?;
        self.attestation_at(&self.pinned, url).await
    }

    /// The attestation at `url`, asked over `client` (the observing one: only the box's own,
    /// which names nothing of a call), and the hash of the TLS key its connection showed
    /// (`None` over plain HTTP).
    async fn attestation_at(
        &self,
        client: &reqwest::Client,
        url: String,
    ) -> Result<(Attestation, Option<String>)> {
        let before = self.refusals();
        let resp = client
            .get(url)
            .send()
            .await
            .map_err(|e| self.transport_error(before, e))?;
        let seen = seen_key(&resp);
        Ok((Self::parse(resp).await?, seen))
    }

    /// jc.attest with a fresh nonce of our own, then every client-side check.
    pub async fn attest(
        &self,
        program: &ApprovedProgram,
        run_id: &str,
        policy: &VerifyPolicy,
    ) -> Result<VerifiedRun> {
        let nonce = new_nonce();
        let (att, seen) = self
            .attested(policy, || self.attestation_seen(run_id, &nonce))
            .await?;
        self.check_attestation(&att, Came::Over(seen), program, run_id, &nonce, policy)
    }

    /// Every client-side check of an attestation answered for `nonce`, as it came: over a
    /// connection that showed the TLS key `seen`, or forwarded by another party.
    fn check_attestation(
        &self,
        att: &Attestation,
        came: Came,
        program: &ApprovedProgram,
        run_id: &str,
        nonce: &str,
        policy: &VerifyPolicy,
    ) -> Result<VerifiedRun> {
        let run = verify_attestation(att, program, run_id, nonce, policy, crate::run::now_secs())?;
        self.admit_bound(run.tls_spki_sha256.as_deref(), came)?;
        self.bind_run(&run)?;
        Ok(run)
    }

    /// For an https box, admit `bound`, the TLS key a verified report binds, as it `came`.
    fn admit_bound(&self, bound: Option<&str>, came: Came) -> Result<()> {
        if let Some(keys) = &self.tls {
            let bound = bound.ok_or(JcError::TlsKeyNotAttested)?;
            // The verified report binds a TLS key, and it is the key of the very connection
            // its answer came over: a TLS front relaying a real box's report shows its own.
            // A forwarded report came over no connection of ours: its key is admitted, and the
            // stake goes over no connection showing another.
            if let Came::Over(seen) = came
                && seen.as_deref() != Some(bound)
            {
                return Err(JcError::TlsKeyNotAttested);
            }
            keys.admit(bound);
        }
        Ok(())
    }

    /// Every check of an attestation another party forwarded (the caller's, from its open),
    /// asked for `nonce` (the [`joint_nonce`] with this node's half): the report, the statement,
    /// the pin, the program, the run and the nonce, as [`BoxClient::attest`] checks them. For an
    /// https box the connection it came over is not this node's to see; its bound TLS key is
    /// admitted, and this node's stake goes over no connection showing another (as after any
    /// attestation), so a front relaying a real box's report still receives nothing.
    pub fn check_forwarded(
        &self,
        att: &Attestation,
        program: &ApprovedProgram,
        run_id: &str,
        nonce: &str,
        policy: &VerifyPolicy,
    ) -> Result<VerifiedRun> {
        self.check_attestation(att, Came::Forwarded, program, run_id, nonce, policy)
    }

    /// jc.stake: post sealed bytes with this party's signature over them.
    pub async fn stake(
        &self,
        run: &VerifiedRun,
        role: Role,
        sealed: Vec<u8>,
        node_key: &SigningKey,
    ) -> Result<Role> {
        Ok(self
            .stake_with(run, role, sealed, node_key, false)
            .await?
            .role)
    }

    /// jc.stake with this party's jc.submit in the same request, for a party that has nothing
    /// left to decide between the two (its policy was asked before the stake). `submitted` in
    /// the answer says whether the box took the submit: a box that does not take one with a
    /// stake answers the stake alone, and the party then submits on its own.
    pub async fn stake_and_submit(
        &self,
        run: &VerifiedRun,
        role: Role,
        sealed: Vec<u8>,
        node_key: &SigningKey,
    ) -> Result<Staked> {
        self.stake_with(run, role, sealed, node_key, true).await
    }

    async fn stake_with(
        &self,
        run: &VerifiedRun,
        role: Role,
        sealed: Vec<u8>,
        node_key: &SigningKey,
        submit: bool,
    ) -> Result<Staked> {
        let action = PartyAction {
            action: "stake".into(),
            role,
            run_id: run.run_id.clone(),
            program_hash: run.program_hash.to_hex(),
            stake_sha256: Some(hex::encode(Sha256::digest(&sealed))),
        };
        let env = sign_action(&action, node_key)?;
        // The run's key, as this node verified it (kept across its restarts): the stake goes
        // over no connection showing another.
        self.bind_run(run)?;
        let mut request = self
            .run_client(&run.run_id)?
            .post(self.run_url(&run.run_id, "/stakes")?)
            .header(STAKE_ACTION_HEADER, STANDARD.encode(env.to_json()));
        if submit {
            let go = Self::action("submit", &run.run_id, &run.program_hash, role, node_key)?;
            request = request.header(SUBMIT_ACTION_HEADER, STANDARD.encode(go.to_json()));
        }
        let staked: Staked = self
            .send(
                request
                    .header("content-type", "application/octet-stream")
                    .body(sealed),
            )
            .await?;
        Ok(staked)
    }

    fn action(
        action: &str,
        run_id: &str,
        program_hash: &ProgramHash,
        role: Role,
        key: &SigningKey,
    ) -> Result<Envelope> {
        sign_action(
            &PartyAction {
                action: action.into(),
                role,
                run_id: run_id.into(),
                program_hash: program_hash.to_hex(),
                stake_sha256: None,
            },
            key,
        )
    }

    /// jc.submit: this party's go. True when it started the run.
    pub async fn submit(
        &self,
        run_id: &str,
        program_hash: &ProgramHash,
        role: Role,
        node_key: &SigningKey,
    ) -> Result<bool> {
        self.submit_waiting(run_id, program_hash, role, node_key, Duration::ZERO)
            .await
    }

    /// [`Self::submit`], the box holding it up to `wait` for the other party's stake (at most
    /// [`crate::server::MAX_WAIT_MS`]) instead of answering `stakes_missing` at once.
    pub async fn submit_waiting(
        &self,
        run_id: &str,
        program_hash: &ProgramHash,
        role: Role,
        node_key: &SigningKey,
        wait: Duration,
    ) -> Result<bool> {
        let env = Self::action("submit", run_id, program_hash, role, node_key)?;
        let url = format!(
            "{}?wait_ms={}",
            self.run_url(run_id, "/submit")?,
            wait.as_millis()
        );
        let s: Submitted = self
            .send(
                self.run_client(run_id)?
                    .post(url)
                    .header("content-type", "application/json")
                    .body(env.to_json()),
            )
            .await?;
        Ok(s.started)
    }

    pub async fn status(&self, run_id: &str) -> Result<RunView> {
        self.send(self.run_client(run_id)?.get(self.run_url(run_id, "")?))
            .await
    }

    /// jc.result as it stands (409 `not_ready` while running).
    pub async fn result(&self, run_id: &str) -> Result<ResultView> {
        self.send(
            self.run_client(run_id)?
                .get(self.run_url(run_id, "/result")?),
        )
        .await
    }

    /// One result request, held by the box up to `wait` (at most
    /// [`crate::server::MAX_WAIT_MS`]) while the run has not finished.
    pub async fn send_result_once(&self, run_id: &str, wait: Duration) -> Result<ResultView> {
        self.send_result_as(run_id, wait, Role::Owner).await
    }

    /// [`Self::send_result_once`] as `role` fetches it: a caller leaves out the owner note it
    /// cannot open (a guarded run's note is padded to the program's size).
    async fn send_result_as(&self, run_id: &str, wait: Duration, role: Role) -> Result<ResultView> {
        let omit_note = matches!(role, Role::Caller);
        let url = format!(
            "{}?wait_ms={}&omit_note={omit_note}",
            self.run_url(run_id, "/result")?,
            wait.as_millis()
        );
        self.send(self.run_client(run_id)?.get(url)).await
    }

    /// Wait until the run finished or `timeout` passed: each request is held by the box until
    /// the result is there (up to [`crate::server::MAX_WAIT_MS`]); the short pause between
    /// requests only matters for a box that answers at once.
    pub async fn wait_result(&self, run_id: &str, timeout: Duration) -> Result<ResultView> {
        self.wait_result_as(run_id, timeout, Role::Owner).await
    }

    /// [`Self::wait_result`] as `role` fetches it (see [`Self::send_result_as`]).
    pub async fn wait_result_as(
        &self,
        run_id: &str,
        timeout: Duration,
        role: Role,
    ) -> Result<ResultView> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(2);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.send_result_as(run_id, left, role).await {
                Err(JcError::Remote { code, .. })
                    if code == "not_ready" && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
                other => return other,
            }
        }
    }

    /// End the run at the box (cancel, or done with it): its id is spent.
    pub async fn delete(
        &self,
        run_id: &str,
        program_hash: &ProgramHash,
        role: Role,
        node_key: &SigningKey,
    ) -> Result<()> {
        let env = Self::action("delete", run_id, program_hash, role, node_key)?;
        let before = self.refusals();
        let resp = self
            .run_client(run_id)?
            .delete(self.run_url(run_id, "")?)
            .header("content-type", "application/json")
            .body(env.to_json())
            .send()
            .await
            .map_err(|e| self.transport_error(before, e))?;
        if resp.status().is_success() {
            return Ok(());
        }
        Self::parse::<serde_json::Value>(resp).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joint_nonce_changes_with_either_half_and_is_one_a_box_takes() {
        let (c, o) = (new_nonce(), new_nonce());
        assert!(is_nonce_half(&c) && is_nonce_half(&o));
        let j = joint_nonce(&c, &o);
        // What the box asks of a nonce: 16 to 128 hex digits.
        assert_eq!(j.len(), 64);
        assert!(j.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(j, joint_nonce(&c, &o));
        assert_ne!(j, joint_nonce(&o, &c), "the halves are not interchangeable");
        assert_ne!(j, joint_nonce(&c, &new_nonce()), "the owner's half counts");
        assert_ne!(j, joint_nonce(&new_nonce(), &o), "the caller's half counts");
        // Framed: moving a digit from one half to the other is another nonce.
        assert_ne!(joint_nonce("ab", "cd"), joint_nonce("abc", "d"));
        // Neither half alone, nor the caller's own nonce, is the joint one.
        assert_ne!(j, c);
        assert_ne!(j, o);
    }

    #[test]
    fn a_peers_half_is_taken_only_in_the_form_of_a_fresh_one() {
        assert!(is_nonce_half(&new_nonce()));
        for bad in [
            "",
            "00",
            &"0".repeat(31),
            &"0".repeat(33),
            &"A".repeat(32),
            &"g".repeat(32),
            "0123456789abcdef0123456789abcde\u{e9}",
        ] {
            assert!(!is_nonce_half(bad), "{bad:?}");
        }
    }
}
