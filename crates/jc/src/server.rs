//! The box's HTTP API (design §10), a thin axum layer over [`BoxCore`]. Errors are
//! `{error, message, details?}`; bodies are size-limited per route (stakes by the program).
//!
//! A box's URL is public and opening a run needs only two fresh keys, so every request that
//! costs the box (open, stake, the box's own attestation) is charged to its client address first, and a stake's signed
//! action is checked in full (signature, run, role not yet staked nor uploading, declared
//! length, memory) before a byte of its body is read; the body is then read up to the length
//! the action was admitted for, within `stake_upload_secs`.
//!
//! Off loopback a box serves HTTPS itself ([`serve_tls`]) with a key made inside it at start,
//! which its attestations bind ([`crate::tls`]); plain HTTP ([`serve`]) is for loopback only.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{
    ConnectInfo, DefaultBodyLimit, FromRequest, FromRequestParts, Path, Query, Request, State,
};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::dsse::Envelope;
use crate::error::JcError;
use crate::registry::ProviderView;
use crate::run::{BoxCore, Client, StakeSlot, StakeTaken, now_secs};

/// Header carrying the party's signed stake action (base64 of the DSSE envelope JSON).
pub const STAKE_ACTION_HEADER: &str = "skillbox-stake-action";
/// Optional header on a stake: the same party's signed submit action (base64 of the DSSE
/// envelope JSON), its go taken with the stake — one request where a party has nothing left to
/// decide between its stake and its submit (issue 33). A box that does not know it answers the
/// stake alone (`submitted` false), and the party submits as before.
pub const SUBMIT_ACTION_HEADER: &str = "skillbox-submit-action";
/// Programs and action envelopes are small.
const SMALL_BODY: usize = 256 * 1024;

pub struct ApiError(pub JcError);

impl From<JcError> for ApiError {
    fn from(e: JcError) -> Self {
        ApiError(e)
    }
}

#[derive(Serialize, Deserialize, Debug)]
pub struct ErrorBody {
    pub error: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // The code and its fixed words only: the detail stays in this process.
        tracing::debug!(code = self.0.code(), "request refused");
        let body = ErrorBody {
            error: self.0.code().into(),
            message: self.0.fixed_message().into(),
            details: None,
        };
        (status, Json(body)).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Health {
    pub status: String,
    pub platform: String,
    pub measurement: String,
    pub no_hardware_isolation: bool,
    /// The key the box's evidence is signed with (insecure-dev): what a node pins. Informational
    /// here; a node checks it in every attestation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub providers: Vec<ProviderView>,
    pub runs_in_flight: usize,
}

/// Who the box answers: the `Host` names it is reached by. Any other `Host` is refused 421 (a
/// DNS-rebinding page resolves its own name to the box's address), and any `Origin` other than
/// the box's own 403 (a web page in the user's browser posting to a loopback box).
#[derive(Clone, Debug, Default)]
pub struct HostGuard {
    /// `host[:port]`, lowercase.
    allowed: Vec<String>,
}

impl HostGuard {
    /// The bound address, `localhost` on the same port when it is loopback, and `names` (a
    /// configured DNS name, with or without a port).
    pub fn for_addr(addr: std::net::SocketAddr, names: &[String]) -> HostGuard {
        let mut allowed = vec![addr.to_string()];
        if addr.ip().is_loopback() {
            allowed.push(format!("localhost:{}", addr.port()));
        }
        for n in names {
            let n = n.trim().to_ascii_lowercase();
            if n.is_empty() {
                continue;
            }
            if n.contains(':') && !n.starts_with('[') {
                allowed.push(n);
            } else {
                allowed.push(format!("{n}:{}", addr.port()));
                allowed.push(n);
            }
        }
        HostGuard { allowed }
    }

    /// Check a request's `Host` and `Origin` headers.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), JcError> {
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
            .ok_or(JcError::HostNotAllowed)?;
        if !self.allowed.contains(&host) {
            return Err(JcError::HostNotAllowed);
        }
        if let Some(origin) = headers.get(axum::http::header::ORIGIN) {
            let origin = origin
                .to_str()
                .map_err(|_| JcError::OriginNotAllowed)?
                .to_ascii_lowercase();
            let same = ["http://", "https://"]
                .iter()
                .any(|scheme| origin.strip_prefix(scheme) == Some(host.as_str()));
            if !same {
                return Err(JcError::OriginNotAllowed);
            }
        }
        Ok(())
    }
}

async fn guard(
    State(g): State<Arc<HostGuard>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Err(e) = g.check(req.headers()) {
        return ApiError(e).into_response();
    }
    next.run(req).await
}

/// The media type of a request body, without parameters and lowercased
/// (`text/markdown; charset=utf-8` → `text/markdown`). Public so the node's API reads the
/// header the same way the box does.
pub fn media_type(headers: &HeaderMap) -> Option<String> {
    headers.get(axum::http::header::CONTENT_TYPE).map(|v| {
        String::from_utf8_lossy(v.as_bytes())
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
    })
}

/// Bodies are JSON (programs, signed actions) or, for stakes, sealed bytes: both are media types
/// a browser cannot send cross-site without a preflight the box never answers.
fn expect_media(headers: &HeaderMap, expected: &'static str) -> Result<(), JcError> {
    if media_type(headers).as_deref() == Some(expected) {
        Ok(())
    } else {
        Err(JcError::MediaType { expected })
    }
}

/// The `{id}` of a run's routes, checked as a run id (`bad_run_id`) before anything else of the
/// request is read; a path that does not decode is axum's own refusal, as it was.
struct RunId(String);

impl<S: Send + Sync> FromRequestParts<S> for RunId {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Response> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        if crate::error::is_run_id(&id) {
            Ok(RunId(id))
        } else {
            Err(ApiError(JcError::BadRunId).into_response())
        }
    }
}

/// The router for a box, answering only to `guard`'s hosts.
pub fn router_with(core: Arc<BoxCore>, guard_hosts: HostGuard) -> Router {
    router(core).layer(axum::middleware::from_fn_with_state(
        Arc::new(guard_hosts),
        guard,
    ))
}

/// The router for a box, without the `Host` check (tests that speak to it in-process).
pub fn router(core: Arc<BoxCore>) -> Router {
    Router::new()
        .route("/healthz", get(health))
        .route("/v1/attestation", get(box_attestation))
        .route("/v1/runs", post(open))
        .route("/v1/runs/{id}", get(status).delete(delete))
        .route("/v1/runs/{id}/attestation", get(attestation))
        .route("/v1/runs/{id}/stakes", post(stake))
        .route("/v1/runs/{id}/submit", post(submit))
        .route("/v1/runs/{id}/result", get(result))
        // Stakes read their own body with the run's limit; everything else is small.
        .layer(DefaultBodyLimit::max(SMALL_BODY))
        .with_state(core)
}

/// Serve until the listener fails; sweeps expired runs every 30 s. Answers only to the bound
/// address (and `localhost` on loopback); see [`serve_named`] for a configured name.
pub async fn serve(listener: tokio::net::TcpListener, core: Arc<BoxCore>) -> std::io::Result<()> {
    serve_named(listener, core, &[]).await
}

fn sweep_every_5s(core: Arc<BoxCore>) {
    tokio::spawn(async move {
        // Often enough that an idle run (`unstaked_ttl_secs`) is dropped near its time.
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            tick.tick().await;
            core.sweep(now_secs());
        }
    });
}

/// [`serve`], also answering to the `Host` names in `names`.
pub async fn serve_named(
    listener: tokio::net::TcpListener,
    core: Arc<BoxCore>,
    names: &[String],
) -> std::io::Result<()> {
    let hosts = HostGuard::for_addr(listener.local_addr()?, names);
    sweep_every_5s(core.clone());
    // The peer's address is what rate limits and the per-client stake share count.
    axum::serve(
        listener,
        router_with(core, hosts).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
}

/// [`serve_named`] over TLS with `tls`, the key the box made at start. `core`'s attester must
/// be `tls.bind(..)`: a node refuses an https box whose attestation binds another key or none
/// (`tls_key_not_attested`), so a box wired otherwise is refused, never trusted.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    core: Arc<BoxCore>,
    names: &[String],
    tls: &crate::tls::BoxTls,
) -> std::io::Result<()> {
    let hosts = HostGuard::for_addr(listener.local_addr()?, names);
    sweep_every_5s(core.clone());
    axum::serve(
        TlsListener::new(listener, tls.acceptor())?,
        router_with(core, hosts).into_make_service_with_connect_info::<TlsPeer>(),
    )
    .await
}

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_SECS: u64 = 10;

/// A TCP listener whose connections axum gets once their TLS handshake finished. Each
/// handshake runs on its own task, at most [`HANDSHAKE_SECS`]: a client that connects and says
/// nothing holds only its own task, never the accept loop.
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        SocketAddr,
    )>,
    local: SocketAddr,
}

impl TlsListener {
    pub fn new(
        listener: tokio::net::TcpListener,
        acceptor: tokio_rustls::TlsAcceptor,
    ) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    // Nobody serves this listener any more.
                    _ = tx.closed() => return,
                    accepted = listener.accept() => accepted,
                };
                let (tcp, addr) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: pause rather than spin.
                        tracing::debug!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (tx, acceptor) = (tx.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let within = std::time::Duration::from_secs(HANDSHAKE_SECS);
                    if let Ok(Ok(tls)) = tokio::time::timeout(within, acceptor.accept(tcp)).await {
                        let _ = tx.send((tls, addr)).await;
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task ended: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// The client address of a connection served by [`TlsListener`] (axum's connect info).
#[derive(Clone, Copy, Debug)]
pub struct TlsPeer(pub SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>>
    for TlsPeer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        TlsPeer(*stream.remote_addr())
    }
}

/// The client a request came from (`None` when served without connect info: in-process).
struct Peer(Client);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let plain = parts.extensions.get::<ConnectInfo<SocketAddr>>();
        let tls = parts.extensions.get::<ConnectInfo<TlsPeer>>();
        Ok(Peer(
            plain.map(|c| c.0.ip()).or_else(|| tls.map(|c| c.0.0.ip())),
        ))
    }
}

async fn health(State(core): State<Arc<BoxCore>>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        platform: core.platform().into(),
        measurement: core.measurement().into(),
        key: core.identity_key(),
        no_hardware_isolation: core.no_hardware_isolation(),
        providers: core.providers().views(),
        runs_in_flight: core.in_flight(),
    })
}

fn envelope(body: &Bytes) -> Result<Envelope, ApiError> {
    Ok(Envelope::from_json(body)?)
}

/// A party's signed action on a run (submit, delete): the envelope in a JSON body, read as the
/// handlers read it (the body within its limit, then its media type, then the envelope). Its
/// signature is checked by the run, against the program's keys.
struct SignedAction(Envelope);

impl<S: Send + Sync> FromRequest<S> for SignedAction {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let headers = req.headers().clone();
        let body = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        expect_media(&headers, "application/json").map_err(|e| ApiError(e).into_response())?;
        envelope(&body)
            .map(SignedAction)
            .map_err(IntoResponse::into_response)
    }
}

/// What the routes that cost the box work (open, stake) check before anything else: the media
/// type, then the client's budget.
fn charged(
    core: &BoxCore,
    client: Client,
    headers: &HeaderMap,
    media: &'static str,
) -> Result<(), JcError> {
    expect_media(headers, media)?;
    core.charge_client(client)
}

/// What `POST /v1/runs` answers: the run opened and, when the opener sent a nonce
/// (`?nonce=`), the run's attestation for it — what `GET .../attestation?nonce=` would answer,
/// one round trip sooner (issue 33). A box that cannot attest the run still answers the open,
/// without one: the opener then asks for it, and is told why.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OpenedReply {
    #[serde(flatten)]
    pub opened: crate::run::Opened,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<crate::attest::Attestation>,
}

async fn open(
    State(core): State<Arc<BoxCore>>,
    Peer(client): Peer,
    Query(q): Query<NonceQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    charged(&core, client, &headers, "application/json")?;
    let env = envelope(&body)?;
    let now = now_secs();
    let opened = core.open_from(&env, now, client)?;
    let attestation = q
        .nonce
        .and_then(|nonce| core.attest(&opened.run_id, &nonce, now).ok());
    let reply = OpenedReply {
        opened,
        attestation,
    };
    Ok((StatusCode::CREATED, Json(reply)).into_response())
}

#[derive(Deserialize)]
struct NonceQuery {
    nonce: Option<String>,
}

async fn attestation(
    State(core): State<Arc<BoxCore>>,
    RunId(id): RunId,
    Query(q): Query<NonceQuery>,
) -> ApiResult<Response> {
    let nonce = q
        .nonce
        .ok_or_else(|| JcError::BadRequest("query parameter nonce is required".into()))?;
    Ok(Json(core.attest(&id, &nonce, now_secs())?).into_response())
}

/// `GET /v1/attestation?nonce=`: the box's own attestation ([`BoxCore::attest_box`]), asked
/// before a node sends a program to the TLS key it binds. It makes a platform report, so it is
/// charged to the client's budget like an open.
async fn box_attestation(
    State(core): State<Arc<BoxCore>>,
    Peer(client): Peer,
    Query(q): Query<NonceQuery>,
) -> ApiResult<Response> {
    core.charge_client(client)?;
    let nonce = q
        .nonce
        .ok_or_else(|| JcError::BadRequest("query parameter nonce is required".into()))?;
    Ok(Json(core.attest_box(&nonce, now_secs())?).into_response())
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Staked {
    pub role: crate::program::Role,
    /// The party's submit sent with the stake was taken too (absent from a box that does not
    /// take one: false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub submitted: bool,
}

/// A signed action from a header: base64 of the envelope's JSON.
fn header_action(headers: &HeaderMap, name: &str) -> Result<Option<Envelope>, JcError> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let raw = value
        .to_str()
        .map_err(|_| JcError::BadRequest(format!("header {name} is not base64")))?;
    let json = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .map_err(|_| JcError::BadRequest(format!("header {name} is not base64")))?;
    Envelope::from_json(&json).map(Some)
}

/// Run a run whose last submit just came in, off the request.
fn start_run(core: Arc<BoxCore>, id: String) {
    tokio::spawn(async move {
        if let Err(e) = core.execute(&id).await {
            tracing::warn!(error = %e, "run could not finish");
        }
    });
}

async fn stake(
    State(core): State<Arc<BoxCore>>,
    RunId(id): RunId,
    Peer(client): Peer,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    charged(&core, client, &headers, "application/octet-stream")?;
    let env = header_action(&headers, STAKE_ACTION_HEADER)?
        .ok_or_else(|| JcError::BadRequest(format!("header {STAKE_ACTION_HEADER} is required")))?;
    let submit = header_action(&headers, SUBMIT_ACTION_HEADER)?;
    let declared = match headers.get(axum::http::header::CONTENT_LENGTH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| JcError::BadRequest("Content-Length".into()))?,
        ),
    };
    let now = now_secs();
    // Everything about the action is checked before the body is touched; the slot holds the
    // role and the memory until the stake is committed, and is given back on any other way out
    // (a refusal, a cut connection, a timeout).
    let slot = Slot {
        core: core.clone(),
        slot: Some(core.begin_stake(&id, &env, submit.as_ref(), declared, client, now)?),
    };
    let limit = slot.limit();
    let within = std::time::Duration::from_secs(core.config().stake_upload_secs.max(1));
    let bytes = tokio::time::timeout(within, read_capped(body, limit))
        .await
        .map_err(|_| JcError::UploadTimedOut)??;
    // Opening a large stake is CPU work: keep it off the async threads. The run this stake's
    // go starts is started by the same task: a handler dropped while it waits (the client
    // hung up) would otherwise leave a run that is `running` with nobody to run it.
    let taken = tokio::task::spawn_blocking(move || {
        let taken = slot.commit(&bytes, now)?;
        if taken.started {
            start_run(core, id);
        }
        Ok::<_, JcError>(taken)
    })
    .await
    .map_err(|e| JcError::Internal(format!("stake task: {e}")))??;
    Ok(Json(Staked {
        role: taken.role,
        submitted: taken.submitted,
    })
    .into_response())
}

/// A stake slot given back when dropped uncommitted.
struct Slot {
    core: Arc<BoxCore>,
    slot: Option<StakeSlot>,
}

impl Slot {
    fn limit(&self) -> usize {
        self.slot.as_ref().map_or(0, |s| s.limit)
    }

    fn commit(mut self, bytes: &[u8], now: u64) -> Result<StakeTaken, JcError> {
        let slot = self
            .slot
            .take()
            .ok_or_else(|| JcError::Internal("stake slot used twice".into()))?;
        let committed = self.core.commit_stake(&slot, bytes, now);
        if committed.is_err() {
            self.core.release_stake(&slot);
        }
        committed
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.core.release_stake(&slot);
        }
    }
}

/// Read a body of at most `limit` bytes into one buffer sized once (no doubling copies), and
/// stop at the first byte past it.
async fn read_capped(mut body: Body, limit: usize) -> Result<Vec<u8>, JcError> {
    use axum::body::HttpBody as _;
    let mut buf = Vec::with_capacity(limit);
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let frame = frame.map_err(|_| JcError::BadRequest("the stake body was cut".into()))?;
        if let Ok(data) = frame.into_data() {
            if data.len() > limit - buf.len() {
                return Err(JcError::BodyTooLarge { limit });
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}

#[derive(Serialize, Deserialize)]
pub struct Submitted {
    pub started: bool,
}

/// `?wait_ms=N` on `submit` and `result`: hold the request until it can be answered (the other
/// stake arrived, the run finished) or N ms passed, at most [`MAX_WAIT_MS`] — one request per
/// step instead of a node polling.
#[derive(Deserialize)]
struct WaitQuery {
    wait_ms: Option<u64>,
    /// `result` only: leave out the owner note, which only the owner can open (a caller's
    /// fetch of a guarded run is then the answer and receipt, not the note's padded bytes).
    #[serde(default)]
    omit_note: bool,
}

/// The longest a request is held (below any client's request timeout).
pub const MAX_WAIT_MS: u64 = 25_000;

impl WaitQuery {
    fn wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.wait_ms.unwrap_or(0).min(MAX_WAIT_MS))
    }
}

async fn submit(
    State(core): State<Arc<BoxCore>>,
    RunId(id): RunId,
    Query(q): Query<WaitQuery>,
    SignedAction(env): SignedAction,
) -> ApiResult<Response> {
    let start = core.submit_within(&id, &env, q.wait()).await?;
    if start {
        start_run(core, id);
    }
    Ok((StatusCode::ACCEPTED, Json(Submitted { started: start })).into_response())
}

async fn status(State(core): State<Arc<BoxCore>>, RunId(id): RunId) -> ApiResult<Response> {
    Ok(Json(core.status(&id)?).into_response())
}

async fn result(
    State(core): State<Arc<BoxCore>>,
    RunId(id): RunId,
    Query(q): Query<WaitQuery>,
) -> ApiResult<Response> {
    // The bytes made when the run ended: every fetch serves them as they are.
    let json = core.result_json_within(&id, q.wait(), q.omit_note).await?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json,
    )
        .into_response())
}

async fn delete(
    State(core): State<Arc<BoxCore>>,
    RunId(id): RunId,
    SignedAction(env): SignedAction,
) -> ApiResult<Response> {
    core.delete(&id, &env, now_secs())?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
