//! A small world for calls tests, all in this process and all real: a box (HTTP, insecure-dev
//! attestation) whose `openai` provider is a loopback double speaking the chat-completions wire
//! protocol, and nodes with their stores, APIs and libp2p networks on 127.0.0.1. Payloads that
//! leave a node are recorded so tests can scan them.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use skillbox_jc::attest::InsecureDevAttester;
use skillbox_jc::ed25519_dalek::SigningKey;
use skillbox_jc::program::Program;
use skillbox_jc::registry::ProviderRegistry;
use skillbox_jc::run::{BoxConfig, BoxCore};
use skillbox_node::{Config, DataDir, Node};
use skillbox_peers::{
    Advert, Payload, PayloadKind, PayloadReceiver, PayloadTransport, PeerId, PeersConfig,
    PeersError, PeersHandle,
};
use skillbox_providers::{ProviderId, ProviderSettings};

pub use crate::provider::serve::{
    Answering, ProviderLog, provider_double, provider_double_answering,
};
pub use crate::skills::skill_doc;

/// Start a box whose `openai` provider is at `provider_url`.
pub async fn start_box(provider_url: &str) -> String {
    start_box_at(0, provider_url).await
}

/// [`start_box`] on a given loopback port (0: any).
pub async fn start_box_at(port: u16, provider_url: &str) -> String {
    start_box_bound(port, provider_url, BoxConfig::default())
        .await
        .0
}

/// [`start_box`] on `127.0.0.2` (loopback too): its URL sorts after every box on `127.0.0.1`,
/// for tests that need a box tried after the others (a node tries boxes equally loaded in the
/// order of their URLs).
pub async fn start_box_sorting_last(provider_url: &str) -> String {
    start_box_on([127, 0, 0, 2], 0, provider_url, BoxConfig::default())
        .await
        .0
}

/// [`start_box`], also answering the box's identity key (what a node pins).
pub async fn start_box_keyed(provider_url: &str) -> (String, String) {
    start_box_bound(0, provider_url, BoxConfig::default()).await
}

/// [`start_box`] with its own limits.
pub async fn start_box_configured(provider_url: &str, config: BoxConfig) -> String {
    start_box_bound(0, provider_url, config).await.0
}

/// A box on `port` (0: any) with `openai` at `provider_url`: its URL and identity key.
async fn start_box_bound(port: u16, provider_url: &str, config: BoxConfig) -> (String, String) {
    start_box_on([127, 0, 0, 1], port, provider_url, config).await
}

/// A box on `ip`:`port` (0: any) with `openai` at `provider_url`: its URL and identity key.
async fn start_box_on(
    ip: [u8; 4],
    port: u16,
    provider_url: &str,
    config: BoxConfig,
) -> (String, String) {
    let attester = dev_attester();
    let key = attester.public_key_hex();
    let core = openai_box_core(attester, provider_url, config);
    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::from(ip), port))
        .await
        .expect("bind box");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = skillbox_jc::server::serve(listener, core).await;
    });
    (format!("http://{addr}"), key)
}

/// A box whose `provider` (a remote one: `ollama`, `openai-compatible:<id>`) is the real
/// OpenAI-compatible adapter at `provider_url`, as is its `openai`: its URL. For a skill on a
/// self-hosted model server (a loopback one is beside this loopback box, so nodes let the box
/// reach it).
pub async fn start_box_serving(provider: ProviderId, provider_url: &str) -> String {
    let settings = ProviderSettings::new(std::path::PathBuf::from("/nonexistent/model.gguf"))
        .with_base_url(ProviderId::OpenAi, provider_url)
        .with_base_url(provider, provider_url);
    let core = Arc::new(BoxCore::new(
        dev_attester(),
        ProviderRegistry::from_settings(&settings),
        BoxConfig::default(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind box");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = skillbox_jc::server::serve(listener, core).await;
    });
    format!("http://{addr}")
}

/// [`start_box`] answering also to the `Host` name `name` (its guard), as a box reached through
/// a relay of that name is: its address (`127.0.0.1:P`, no scheme).
pub async fn start_box_named(provider_url: &str, name: &str) -> String {
    let core = openai_box_core(dev_attester(), provider_url, BoxConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind box");
    let addr = listener.local_addr().expect("addr").to_string();
    let names = vec![name.to_owned()];
    tokio::spawn(async move {
        let _ = skillbox_jc::server::serve_named(listener, core, &names).await;
    });
    addr
}

/// [`start_box`] serving HTTPS with a key made now and bound into its attestations: its
/// `https://` URL.
pub async fn start_tls_box(provider_url: &str) -> String {
    let tls = skillbox_jc::tls::BoxTls::generate(&[]).expect("box TLS key");
    let attester = tls.bind(dev_attester());
    let core = openai_box_core(attester, provider_url, BoxConfig::default());
    crate::box_fixture::serve_tls_loopback(core, tls).await
}

/// A box serving HTTPS behind a pass-through ([`crate::box_fixture::PathSwitch`]) whose `Host`
/// name is `host`, attested by `attester` (see [`dev_attester`]), with a TLS key made now: its
/// own `https://` URL, for the switch to relay to. Boxes sharing one attester behind one switch
/// are, as a node sees them, one box started again: the same URL and evidence key, a TLS key
/// made afresh at each start — a box with hardware isolation, which keeps no run store.
pub async fn start_tls_box_behind(
    provider_url: &str,
    host: &str,
    attester: Arc<InsecureDevAttester>,
) -> String {
    let tls = skillbox_jc::tls::BoxTls::generate(&[]).expect("box TLS key");
    let core = openai_box_core(tls.bind(attester), provider_url, BoxConfig::default());
    crate::box_fixture::serve_tls_named(core, tls, vec![host.to_owned()]).await
}

/// The attester of the node tests' boxes: insecure-dev, measurement `ab`×48 (what the nodes'
/// pins name), a fresh key.
pub fn dev_attester() -> Arc<InsecureDevAttester> {
    Arc::new(InsecureDevAttester::with_measurement("ab".repeat(48)))
}

/// The core of the node tests' boxes: `attester`'s evidence, `openai` at `provider_url` (the
/// local model a file that is not there), `config`'s limits.
fn openai_box_core(
    attester: Arc<dyn skillbox_jc::attest::Attester>,
    provider_url: &str,
    config: BoxConfig,
) -> Arc<BoxCore> {
    let settings = ProviderSettings::new(std::path::PathBuf::from("/nonexistent/model.gguf"))
        .with_base_url(ProviderId::OpenAi, provider_url);
    Arc::new(BoxCore::new(
        attester,
        ProviderRegistry::from_settings(&settings),
        config,
    ))
}

/// Serve `app` on an ephemeral loopback port in this runtime; its URL (`http://127.0.0.1:P`).
pub async fn serve_loopback(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

/// The path and query a request asks for.
pub fn path_of(req: &axum::extract::Request) -> String {
    req.uri()
        .path_and_query()
        .map_or("/".to_owned(), |pq| pq.as_str().to_owned())
}

/// Forward `req` to the same path at `target`: its method, headers (but Host and
/// Content-Length, which the client sets) and body. The answer; None when `target` is not
/// reachable.
pub async fn forward(
    http: &reqwest::Client,
    target: &str,
    req: axum::extract::Request,
) -> Option<reqwest::Response> {
    let path = path_of(&req);
    let mut out = http.request(req.method().clone(), format!("{target}{path}"));
    for (name, value) in req.headers() {
        if name != "host" && name != "content-length" {
            out = out.header(name, value);
        }
    }
    let body = axum::body::to_bytes(req.into_body(), 1 << 26)
        .await
        .unwrap_or_default();
    out.body(body).send().await.ok()
}

/// A forwarded answer's status, content type and body, to answer with again.
async fn parts_of(answer: reqwest::Response) -> (StatusCode, String, Vec<u8>) {
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let ctype = answer
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    (
        status,
        ctype,
        answer.bytes().await.unwrap_or_default().to_vec(),
    )
}

/// A box that falters for a moment (restarting behind its address): forwards every request to
/// `target`, but answers the first `times` requests whose path holds `part` with 503. Answers
/// its URL and the paths it saw.
pub async fn start_faltering_proxy(
    target: &str,
    part: &'static str,
    times: usize,
) -> (String, Arc<Mutex<Vec<String>>>) {
    #[derive(Clone)]
    struct Proxy {
        target: String,
        part: &'static str,
        left: Arc<std::sync::atomic::AtomicUsize>,
        http: reqwest::Client,
        seen: Arc<Mutex<Vec<String>>>,
    }
    async fn relay(State(p): State<Proxy>, req: axum::extract::Request) -> Response {
        use std::sync::atomic::Ordering::SeqCst;
        let path = path_of(&req);
        p.seen.lock().expect("log").push(path.clone());
        if path.contains(p.part)
            && p.left
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        let Some(answer) = forward(&p.http, &p.target, req).await else {
            return StatusCode::BAD_GATEWAY.into_response();
        };
        let (status, ctype, bytes) = parts_of(answer).await;
        (status, [("content-type", ctype)], bytes).into_response()
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let proxy = Proxy {
        target: target.to_owned(),
        part,
        left: Arc::new(times.into()),
        http: reqwest::Client::new(),
        seen: seen.clone(),
    };
    let url = serve_loopback(axum::Router::new().fallback(relay).with_state(proxy)).await;
    (url, seen)
}

/// The box's path stalling some requests: [`start_holding_proxy`]'s handle.
pub struct Holding {
    phase: tokio::sync::watch::Sender<Phase>,
    held: Arc<std::sync::atomic::AtomicUsize>,
}

/// What a [`start_holding_proxy`] does with the requests it stalls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Passing,
    Holding,
    Keeping,
    Failing,
    Released,
}

impl Holding {
    /// Hold the requests it stalls from now on.
    pub fn hold(&self) {
        let _ = self.phase.send(Phase::Holding);
    }

    /// How many requests it has held.
    pub fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Keep the requests held so far held, and forward the later ones (a box answering again
    /// that keeps the connections it held open), until [`Self::release`] or [`Self::fail`].
    pub fn keep(&self) {
        let _ = self.phase.send(Phase::Keeping);
    }

    /// Answer every request held, and each it stalls from now on, 503 at once (the box up but
    /// saying nothing of the run), until [`Self::release`].
    pub fn fail(&self) {
        let _ = self.phase.send(Phase::Failing);
    }

    /// Answer every request held 503 (the box stalled, then failed them); later ones pass.
    pub fn release(&self) {
        let _ = self.phase.send(Phase::Released);
    }
}

/// A box whose answers to some requests stall: forwards every request to `target`, but once
/// [`Holding::hold`] is called holds one whose path and query contain `part` until
/// [`Holding::release`] (or [`Holding::fail`]), then answers it 503; while failing, answers
/// each such request 503 at once. Requests before the hold, after the release and while
/// [`Holding::keep`] keeps the held ones are forwarded.
pub async fn start_holding_proxy(target: &str, part: &'static str) -> (String, Holding) {
    #[derive(Clone)]
    struct Proxy {
        target: String,
        part: &'static str,
        phase: tokio::sync::watch::Receiver<Phase>,
        held: Arc<std::sync::atomic::AtomicUsize>,
        http: reqwest::Client,
    }
    async fn relay(State(mut p): State<Proxy>, req: axum::extract::Request) -> Response {
        let stalls = matches!(*p.phase.borrow(), Phase::Holding | Phase::Failing);
        if stalls && path_of(&req).contains(p.part) {
            p.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = p
                .phase
                .wait_for(|f| !matches!(f, Phase::Holding | Phase::Keeping))
                .await;
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        let Some(answer) = forward(&p.http, &p.target, req).await else {
            return StatusCode::BAD_GATEWAY.into_response();
        };
        let (status, ctype, bytes) = parts_of(answer).await;
        (status, [("content-type", ctype)], bytes).into_response()
    }
    let (phase, watching) = tokio::sync::watch::channel(Phase::Passing);
    let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let proxy = Proxy {
        target: target.to_owned(),
        part,
        phase: watching,
        held: held.clone(),
        http: reqwest::Client::new(),
    };
    let url = serve_loopback(axum::Router::new().fallback(relay).with_state(proxy)).await;
    (url, Holding { phase, held })
}

/// How a proxy changes a box's `/healthz` answer.
pub type Rewrite = Arc<dyn Fn(&mut Value) + Send + Sync>;

/// A box's operator (or a man in the middle) on a URL of its own: forwards every request to
/// the box at `target` (which the test may switch), rewriting the `/healthz` answer with
/// `rewrite`. Answers its URL, the paths it forwarded and the target.
pub async fn start_rewriting_proxy(
    target: &str,
    rewrite: impl Fn(&mut Value) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<String>>>, Arc<Mutex<String>>) {
    #[derive(Clone)]
    struct Proxy {
        target: Arc<Mutex<String>>,
        rewrite: Rewrite,
        http: reqwest::Client,
        seen: Arc<Mutex<Vec<String>>>,
    }
    async fn relay(State(p): State<Proxy>, req: axum::extract::Request) -> Response {
        let path = path_of(&req);
        p.seen.lock().expect("log").push(path.clone());
        let target = p.target.lock().expect("target").clone();
        let Some(answer) = forward(&p.http, &target, req).await else {
            return StatusCode::BAD_GATEWAY.into_response();
        };
        let (status, ctype, mut bytes) = parts_of(answer).await;
        if path == "/healthz"
            && let Ok(mut v) = serde_json::from_slice::<Value>(&bytes)
        {
            (p.rewrite)(&mut v);
            bytes = serde_json::to_vec(&v).unwrap_or_default();
        }
        (status, [("content-type", ctype)], bytes).into_response()
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let target = Arc::new(Mutex::new(target.to_owned()));
    let proxy = Proxy {
        target: target.clone(),
        rewrite: Arc::new(rewrite),
        http: reqwest::Client::new(),
        seen: seen.clone(),
    };
    let url = serve_loopback(axum::Router::new().fallback(relay).with_state(proxy)).await;
    (url, seen, target)
}

/// A man in the middle on the box's path: forwards every request to `target`, but its
/// `/healthz` claims `claimed_key` (someone else's box). Answers its URL and the paths it
/// forwarded.
pub async fn start_lying_proxy(
    target: &str,
    claimed_key: &str,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let key = Value::String(claimed_key.to_owned());
    let (url, seen, _) = start_rewriting_proxy(target, move |v| v["key"] = key.clone()).await;
    (url, seen)
}

/// What a call refused at a box in the middle leaves: the caller asked that box for its
/// attestation (`seen`, the paths it forwarded), staked nothing through it, and no prompt
/// reached the provider double (`provider`).
#[track_caller]
pub fn assert_refused_before_any_stake(seen: &Mutex<Vec<String>>, provider: &ProviderLog) {
    let paths = seen.lock().expect("log").clone();
    // An attestation asked for: on its own, or with the open (`?nonce=`).
    assert!(
        paths
            .iter()
            .any(|p| p.contains("/attestation") || p.contains("/v1/runs?nonce=")),
        "the caller did not use the box in the middle: {paths:?}"
    );
    assert!(!paths.iter().any(|p| p.contains("/stakes")), "{paths:?}");
    assert!(provider.0.lock().expect("log").is_empty());
}

/// Records every payload a node sends.
pub struct Recording {
    inner: PeersHandle,
    pub sent: Arc<Mutex<Vec<String>>>,
}

impl PayloadTransport for Recording {
    fn local_peer_id(&self) -> PeerId {
        self.inner.local_peer_id()
    }
    fn send(
        &self,
        to: PeerId,
        payload: Payload,
    ) -> Pin<Box<dyn Future<Output = Result<(), PeersError>> + Send + '_>> {
        if let Ok(text) = serde_json::to_string(&payload) {
            self.sent.lock().expect("log").push(text);
        }
        PayloadTransport::send(&self.inner, to, payload)
    }
}

pub struct TestNode {
    pub dir: tempfile::TempDir,
    pub base: String,
    pub token: String,
    /// The agent token (`agent.token`): what `/mcp` and `/a2a` take over TCP.
    pub agent_token: String,
    pub peer_id: String,
    pub p2p: String,
    pub sent: Arc<Mutex<Vec<String>>>,
    pub peers: PeersHandle,
    http: reqwest::Client,
    serving: crate::node_api::Serving,
}

pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    /// A write that took: 201 (created) or 200 (replaced).
    #[track_caller]
    pub fn assert_written(&self, what: &str) {
        assert!(
            self.status == 201 || self.status == 200,
            "{what}: {} {}",
            self.status,
            self.body
        );
    }

    /// Assert the answer is the refusal `status` with error code `code`.
    #[track_caller]
    pub fn assert_refused(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.body["error"].as_str()),
            (status, Some(code)),
            "{}",
            self.body
        );
    }
}

impl TestNode {
    pub async fn start(
        box_url: &str,
        bootstrap: Vec<String>,
        tune: impl FnOnce(&mut Config),
    ) -> TestNode {
        TestNode::start_with_directory(box_url, bootstrap, tune, |h| Arc::new(h)).await
    }

    /// [`TestNode::start`] with the board its calls read wrapped by `directory`.
    pub async fn start_with_directory(
        box_url: &str,
        bootstrap: Vec<String>,
        tune: impl FnOnce(&mut Config),
        directory: impl FnOnce(PeersHandle) -> Arc<dyn skillbox_node::calls::Directory>,
    ) -> TestNode {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::on_loopback(box_url, bootstrap);
        config.schedules.advertise_secs = 1;
        config.schedules.board_ttl_secs = 4;
        // Flow tests do not play the human: every submit allowed unless a test says otherwise.
        config.policy = skillbox_node::config::PolicyConfig::allow_all();
        // The tests' clients send the operator's token to the port (the default refuses it
        // there: node it `api` tests that).
        config.api.operator_token_over_tcp = true;
        tune(&mut config);
        DataDir::new(dir.path()).init(&config).expect("init");
        TestNode::started_in(dir, directory).await
    }

    /// This node stopped and started again on its data directory, its `config.toml` first
    /// rewritten by `edit`: the owner edited the config and ran `skillbox node` again. Its keys,
    /// store and peer id stay; its addresses are new.
    pub async fn restarted(self, edit: impl FnOnce(String) -> String) -> TestNode {
        let TestNode {
            dir,
            mut serving,
            peers,
            ..
        } = self;
        let _ = serving.stop().await;
        peers.shutdown().await;
        let path = DataDir::new(dir.path()).config();
        let text = std::fs::read_to_string(&path).expect("read config.toml");
        std::fs::write(&path, edit(text)).expect("write config.toml");
        TestNode::started_in(dir, |h| Arc::new(h)).await
    }

    /// The node of data directory `dir` (made already) opened and started: peers, calls (the
    /// board read through `directory`) and its API.
    async fn started_in(
        dir: tempfile::TempDir,
        directory: impl FnOnce(PeersHandle) -> Arc<dyn skillbox_node::calls::Directory>,
    ) -> TestNode {
        let mut node = Node::open(dir.path()).expect("open");
        let started = node.start_peers().await.expect("peers");
        let sent = Arc::new(Mutex::new(Vec::new()));
        let rec = sent.clone();
        node.start_calls_with_parts(
            move |h| {
                Arc::new(Recording {
                    inner: h,
                    sent: rec,
                })
            },
            directory,
        )
        .expect("calls");
        let peers = node.peers().expect("peers running");
        let serving = crate::node_api::Serving::start(node, dir.path()).await;
        TestNode {
            base: serving.base.clone(),
            token: serving.token.clone(),
            agent_token: serving.agent_token.clone(),
            dir,
            peer_id: started.peer_id.clone(),
            p2p: format!("{}/p2p/{}", started.listen_addrs[0], started.peer_id),
            sent,
            peers,
            http: reqwest::Client::new(),
            serving,
        }
    }

    pub async fn req(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Answer {
        // Every answer a test sees matches what the OpenAPI document says of it.
        let node = (self.base.as_str(), self.token.as_str());
        let (status, text) =
            crate::answer::request_checked(&self.http, node, method, path, body).await;
        let body = crate::answer::json_body(text.as_bytes());
        Answer { status, body }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.req(reqwest::Method::GET, path, None).await
    }

    /// `method path` with `v` as its `application/json` body.
    pub async fn send_json(&self, method: reqwest::Method, path: &str, v: &Value) -> Answer {
        let body = serde_json::to_vec(v).expect("json");
        self.req(method, path, Some(("application/json", body)))
            .await
    }

    pub async fn post_json(&self, path: &str, v: Value) -> Answer {
        self.send_json(reqwest::Method::POST, path, &v).await
    }

    pub async fn put_json(&self, path: &str, v: &Value) -> Answer {
        self.send_json(reqwest::Method::PUT, path, v).await
    }

    pub async fn patch_json(&self, path: &str, v: Value) -> Answer {
        self.send_json(reqwest::Method::PATCH, path, &v).await
    }

    pub async fn add_skill(&self, doc: &str) {
        let a = self
            .req(
                reqwest::Method::POST,
                "/skills",
                Some(("text/markdown", doc.as_bytes().to_vec())),
            )
            .await;
        a.assert_written("skill import");
    }

    /// This node holds the `openai-key` `key` and offers `taste` (`body_marker` its body,
    /// `required` the caller's sources it asks for): the owner of [`pair_at`] and of the tests
    /// that start their owner themselves.
    pub async fn offer_taste(&self, body_marker: &str, key: &str, required: &[&str]) {
        self.put_source("openai-key", "secret", key).await;
        self.add_skill(&skill_doc("taste", body_marker, required))
            .await;
    }

    /// Store a source; user data (not a secret) is marked shareable, as its human would for
    /// data a skill asks for. See [`TestNode::put_private_source`].
    pub async fn put_source(&self, name: &str, kind: &str, content: &str) {
        self.put_source_as(name, kind, content, kind != "secret")
            .await
    }

    /// Store a source its human did not mark shareable.
    pub async fn put_private_source(&self, name: &str, kind: &str, content: &str) {
        self.put_source_as(name, kind, content, false).await
    }

    async fn put_source_as(&self, name: &str, kind: &str, content: &str, shareable: bool) {
        let a = self
            .req(
                reqwest::Method::PUT,
                &format!("/sources/{name}?kind={kind}&shareable={shareable}"),
                Some(("text/plain", content.as_bytes().to_vec())),
            )
            .await;
        a.assert_written("source put");
    }

    /// Wait until `skill` of `peer` is on this node's board.
    pub async fn wait_board(&self, peer: &str, skill: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let b = self.get("/board").await.body;
            if crate::answer::board_has(&b, peer, skill) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{skill} of {peer} never reached the board: {b}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Wait until this node's board shows `skill` of `peer` as `shown` wants it (an advert that
    /// carries a changed ceiling or provider arrives on the next advertise interval).
    pub async fn wait_offer(
        &self,
        peer: &str,
        skill: &str,
        what: &str,
        shown: impl Fn(&skillbox_peers::OfferedSkill) -> bool,
    ) {
        let peer: PeerId = peer.parse().expect("peer id");
        let skill_shown = |a: &Advert| a.skills.iter().any(|s| s.name == skill && shown(s));
        advert_until(
            &self.peers,
            &peer,
            what,
            Duration::from_secs(30),
            skill_shown,
        )
        .await;
    }

    /// Ask for a call (`POST /calls`, sources omitted): the answer, whatever it is.
    pub async fn ask_call(&self, peer: &str, skill: &str, request: &str) -> Answer {
        self.post_json(
            "/calls",
            serde_json::json!({"peer": peer, "skill": skill, "request": request}),
        )
        .await
    }

    /// Start a call (`POST /calls`, sources omitted) and return its id.
    pub async fn start_call(&self, peer: &str, skill: &str, request: &str) -> String {
        let a = self.ask_call(peer, skill, request).await;
        assert_eq!(a.status, 201, "{}", a.body);
        a.body["id"].as_str().expect("call id").to_owned()
    }

    /// Decide the parked call `id` as its human (`POST /approvals/{id}` with `decision`, e.g.
    /// `{"decision": "allow", "remember": true}`), which must be taken: the call's view. A
    /// decision naming no `question` answers the one the call asks now (the human read it).
    pub async fn decide(&self, id: &str, decision: Value) -> Value {
        let mut decision = decision;
        if decision.get("question").is_none() {
            decision["question"] = self.question(id).await.into();
        }
        let a = self.post_json(&format!("/approvals/{id}"), decision).await;
        assert_eq!(a.status, 200, "{}", a.body);
        a.body
    }

    /// The digest of the question the parked call `id` asks now, as `GET /approvals` shows it.
    pub async fn question(&self, id: &str) -> String {
        let a = self.get("/approvals").await;
        assert_eq!(a.status, 200, "{}", a.body);
        a.body["approvals"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["id"] == id)
            .and_then(|c| c["question"].as_str())
            .unwrap_or_else(|| panic!("call {id} asks no question: {}", a.body))
            .to_owned()
    }

    /// Wait until call `id` reaches a terminal state here; returns its record.
    pub async fn wait_call(&self, id: &str, limit: Duration) -> Value {
        self.wait_state(id, &["answered", "ran", "failed"], limit)
            .await
    }

    pub async fn wait_state(&self, id: &str, states: &[&str], limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let a = self.get(&format!("/calls/{id}")).await;
            if a.status == 200 && states.contains(&a.body["state"].as_str().unwrap_or("")) {
                self.assert_staked_once(&a.body).await;
                return a.body;
            }
            assert!(
                Instant::now() < deadline,
                "call {id} never reached {states:?}: {} {}",
                a.status,
                a.body
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A call that ended here left exactly one stake entry in this node's ledger when it ran
    /// (`answered`, `ran`), at most one when it failed: every call test checks the ledger.
    pub async fn assert_staked_once(&self, view: &Value) {
        if let Some(query) = crate::stake::ledger_query(view) {
            let a = self.get(&query).await;
            crate::stake::assert_once(view, a.status, &a.body);
        }
    }

    pub async fn stop(mut self) {
        // A node whose server failed on the way down has still stopped: tests that care
        // check the node's state, not its shutdown.
        let _ = self.serving.stop().await;
    }
}

/// Each of `nodes` stopped, in order.
pub async fn stop_all<const N: usize>(nodes: [TestNode; N]) {
    for node in nodes {
        node.stop().await;
    }
}

/// The call record `c` ended `failed`, its failure's message naming `code` (the closed code of
/// the side that refused it).
#[track_caller]
pub fn assert_failed_naming(c: &Value, code: &str) {
    assert_eq!(c["state"], "failed", "{c}");
    assert!(
        c["failure"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(code)),
        "{c}"
    );
}

/// Wait until `peers`' board holds an advert of `peer` that `ready` takes (within `limit`): it.
pub async fn advert_until(
    peers: &PeersHandle,
    peer: &PeerId,
    what: &str,
    limit: Duration,
    ready: impl Fn(&Advert) -> bool,
) -> Advert {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(a) =
            peers.with_board(|b, now| b.advert(peer, now).filter(|a| ready(a)).cloned())
        {
            return a;
        }
        assert!(Instant::now() < deadline, "{what} never advertised");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A peer that is not a node, only the transport: it signs what the test says within the
/// protocol (an advert of any skills and boxes), its advert re-sent every second. Its key comes
/// from `seed`; it bootstraps from the node at `bootstrap` (`/ip4/…/tcp/…/p2p/<id>`). What it
/// receives is dropped.
pub async fn hostile_peer(seed: u8, bootstrap: &str) -> PeersHandle {
    let keypair = skillbox_peers::keypair_from_seed(&[seed; 32]).expect("key");
    let config = PeersConfig {
        listen: vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")],
        bootstrap: vec![bootstrap.parse().expect("node addr")],
        advert_interval: Duration::from_secs(1),
        ..PeersConfig::default()
    };
    skillbox_peers::start(config, keypair)
        .await
        .expect("hostile peer")
        .0
}

/// A peer that is not a node: a hostile caller speaking the protocol itself (no UI, no policy,
/// programs it builds and signs as it likes) to the one node it bootstrapped from.
pub struct RawPeer {
    pub handle: PeersHandle,
    pub inbox: PayloadReceiver,
    /// Its signing key (the node key a program names), from the same seed as its peer id.
    pub key: SigningKey,
    /// The node it speaks to.
    pub node: PeerId,
}

impl RawPeer {
    /// A peer whose keys come from `seed`, bootstrapped from `node`.
    pub async fn start(seed: u8, node: &TestNode) -> RawPeer {
        let keypair = skillbox_peers::keypair_from_seed(&[seed; 32]).expect("key");
        let config = PeersConfig {
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")],
            bootstrap: vec![node.p2p.parse().expect("node addr")],
            ..PeersConfig::default()
        };
        let (handle, inbox) = skillbox_peers::start(config, keypair).await.expect("peer");
        RawPeer {
            handle,
            inbox,
            key: SigningKey::from_bytes(&[seed; 32]),
            node: node.peer_id.parse().expect("peer id"),
        }
    }

    /// The node's advert once `ready` takes it (within `limit`).
    pub async fn advert(&self, limit: Duration, ready: impl Fn(&Advert) -> bool) -> Advert {
        advert_until(&self.handle, &self.node, "the node's advert", limit, ready).await
    }

    /// `program` signed by this peer, as a call request carries it.
    pub fn signed(&self, program: &Program) -> Value {
        let env = skillbox_jc::dsse::sign_program(program, &self.key).expect("sign");
        serde_json::from_slice(&env.to_json()).expect("json")
    }

    /// Send `body` as a `kind` payload of call `id` to the node.
    pub async fn send(&self, kind: PayloadKind, id: &str, body: Value) {
        let payload = Payload {
            kind,
            call_id: id.into(),
            body,
        };
        self.handle.send(self.node, payload).await.expect("sent");
    }

    /// The next payload the node sends this peer (within `limit`).
    pub async fn next(&mut self, limit: Duration) -> Payload {
        tokio::time::timeout(limit, self.inbox.recv())
            .await
            .expect("an answer in time")
            .expect("a payload")
            .payload
    }

    /// Ask the node to admit call `id` (`body`: the skill and the signed program, or whatever a
    /// hostile caller sends instead), and its first answer.
    pub async fn request(&mut self, id: &str, body: Value, limit: Duration) -> Payload {
        self.send(PayloadKind::CallRequest, id, body).await;
        self.next(limit).await
    }
}

/// Owner (with the skill and its key) and caller (bootstrapped from it) around one box.
pub struct World {
    pub owner: TestNode,
    pub caller: TestNode,
    pub provider: ProviderLog,
    pub box_url: String,
}

impl World {
    /// A call of the owner's `taste` on `request`, run to its end on both sides within `limit`:
    /// answered for the caller, ran for the owner. Its id.
    pub async fn call_answered(&self, request: &str, limit: Duration) -> String {
        let id = self
            .caller
            .start_call(&self.owner.peer_id, "taste", request)
            .await;
        let c = self.caller.wait_call(&id, limit).await;
        assert_eq!(c["state"], "answered", "{c}");
        let o = self.owner.wait_call(&id, limit).await;
        assert_eq!(o["state"], "ran", "{o}");
        id
    }
}

pub async fn world(
    body_marker: &str,
    key: &str,
    required: &[&str],
    tune_owner: impl FnOnce(&mut Config),
    tune_caller: impl FnOnce(&mut Config),
) -> World {
    world_answering(
        body_marker,
        key,
        required,
        Answering::Normally,
        tune_owner,
        tune_caller,
    )
    .await
}

/// [`world`] with the provider double answering as `answering` says.
pub async fn world_answering(
    body_marker: &str,
    key: &str,
    required: &[&str],
    answering: Answering,
    tune_owner: impl FnOnce(&mut Config),
    tune_caller: impl FnOnce(&mut Config),
) -> World {
    let (provider_url, provider) = provider_double_answering(Duration::ZERO, answering).await;
    let box_url = start_box(&provider_url).await;
    world_at(
        box_url,
        provider,
        (body_marker, key, required),
        tune_owner,
        tune_caller,
    )
    .await
}

/// [`world`] around the box at `box_url` (a proxy in front of one, say) whose provider
/// double's log is `provider`; `skill` is the body marker, the key and the required sources.
pub async fn world_at(
    box_url: String,
    provider: ProviderLog,
    skill: (&str, &str, &[&str]),
    tune_owner: impl FnOnce(&mut Config),
    tune_caller: impl FnOnce(&mut Config),
) -> World {
    let (owner, caller) = pair_at(&box_url, skill, tune_owner, tune_caller).await;
    World {
        owner,
        caller,
        provider,
        box_url,
    }
}

/// An owner offering `taste` (`body_marker` its body, `key` its provider key, `required` the
/// caller's sources it asks for) and a caller bootstrapped from it that has the offer on its
/// board, both pointed at `box_url`.
pub async fn pair_at(
    box_url: &str,
    (body_marker, key, required): (&str, &str, &[&str]),
    tune_owner: impl FnOnce(&mut Config),
    tune_caller: impl FnOnce(&mut Config),
) -> (TestNode, TestNode) {
    let owner = TestNode::start(box_url, vec![], tune_owner).await;
    owner.offer_taste(body_marker, key, required).await;
    let caller = TestNode::start(box_url, vec![owner.p2p.clone()], tune_caller).await;
    caller.wait_board(&owner.peer_id, "taste").await;
    (owner, caller)
}

/// [`pair_at`] for a test tagged `tag` (body `BODY-{tag}`, key `sk-{tag}`, no sources asked
/// for), both nodes tuned by `tune`.
pub async fn tagged_pair(
    box_url: &str,
    tag: &str,
    tune: impl Fn(&mut Config) + Copy,
) -> (TestNode, TestNode) {
    let (body, key) = (format!("BODY-{tag}"), format!("sk-{tag}"));
    pair_at(box_url, (&body, &key, &[]), tune, tune).await
}
