//! A small world for calls tests, all in this process and all real: a box (HTTP, insecure-dev
//! attestation) whose `openai` provider is a loopback double speaking the chat-completions wire
//! protocol, and nodes with their stores, APIs and libp2p networks on 127.0.0.1. Payloads that
//! leave a node are recorded so tests can scan them.

#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::{Value, json};
use skillbox_jc::attest::InsecureDevAttester;
use skillbox_jc::registry::ProviderRegistry;
use skillbox_jc::run::{BoxConfig, BoxCore};
use skillbox_node::{Config, DataDir, Node};
use skillbox_peers::{Payload, PayloadTransport, PeerId, PeersError, PeersHandle};
use skillbox_providers::{ProviderId, ProviderSettings};

/// What the provider double saw: the Authorization header and the request body.
#[derive(Clone, Default)]
pub struct ProviderLog(pub Arc<Mutex<Vec<(String, Value)>>>);

/// How the provider double answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answering {
    /// A chat completion saying how many prompt bytes it read.
    Normally,
    /// A hostile or careless provider: an error whose text quotes its whole input (system
    /// prompt, user text, the key it was given) — as an HTTP 400 error body.
    EchoingErrors,
    /// The same, as an `error` object in a 200 answer.
    EchoingInBand,
    /// An obedient model: answers every request with its system prompt (the skill body) —
    /// the stand-in for a strong remote model asked for its instructions.
    Obedient,
}

async fn chat(
    State((log, delay, answering)): State<(ProviderLog, Duration, Answering)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let prompt_len: usize = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["content"].as_str().map_or(0, str::len))
        .sum();
    let echo = format!("bad request (key {auth}): {body}");
    let system = body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    log.0.lock().expect("log").push((auth, body));
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    match answering {
        Answering::Normally => {}
        Answering::EchoingErrors => {
            return (
                axum::http::StatusCode::BAD_REQUEST,
                Json(json!({ "error": { "code": "invalid_request", "message": echo } })),
            )
                .into_response();
        }
        Answering::EchoingInBand => {
            return Json(json!({ "error": { "code": "moderation", "message": echo } }))
                .into_response();
        }
        Answering::Obedient => {
            return Json(json!({
                "id": "chatcmpl-double",
                "object": "chat.completion",
                "choices": [{ "index": 0, "finish_reason": "stop",
                    "message": { "role": "assistant", "content": system } }],
                "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 }
            }))
            .into_response();
        }
    }
    Json(json!({
        "id": "chatcmpl-double",
        "object": "chat.completion",
        "choices": [{ "index": 0, "finish_reason": "stop",
            "message": { "role": "assistant", "content": format!("The double read {prompt_len} bytes of prompt.") } }],
        "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 }
    }))
    .into_response()
}

/// Start the provider double; answers after `delay`.
pub async fn provider_double(delay: Duration) -> (String, ProviderLog) {
    provider_double_answering(delay, Answering::Normally).await
}

/// Start the provider double answering as `answering` says.
pub async fn provider_double_answering(
    delay: Duration,
    answering: Answering,
) -> (String, ProviderLog) {
    let log = ProviderLog::default();
    let app = axum::Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .with_state((log.clone(), delay, answering));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind provider");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), log)
}

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
    let attester = Arc::new(InsecureDevAttester::with_measurement("ab".repeat(48)));
    let key = attester.public_key_hex();
    let settings = ProviderSettings::new(std::path::PathBuf::from("/nonexistent/model.gguf"))
        .with_base_url(ProviderId::OpenAi, provider_url);
    let core = Arc::new(BoxCore::new(
        attester,
        ProviderRegistry::from_settings(&settings),
        config,
    ));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind box");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = skillbox_jc::server::serve(listener, core).await;
    });
    (format!("http://{addr}"), key)
}

/// A man in the middle on the box's path: forwards every request to `target`, but its
/// `/healthz` claims `claimed_key` (someone else's box). Answers its URL and the paths it
/// forwarded.
pub async fn start_lying_proxy(
    target: &str,
    claimed_key: &str,
) -> (String, Arc<Mutex<Vec<String>>>) {
    #[derive(Clone)]
    struct Proxy {
        target: String,
        key: String,
        http: reqwest::Client,
        seen: Arc<Mutex<Vec<String>>>,
    }
    async fn forward(
        State(p): State<Proxy>,
        req: axum::extract::Request,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let path = req
            .uri()
            .path_and_query()
            .map_or("/".to_owned(), |pq| pq.as_str().to_owned());
        p.seen.lock().expect("log").push(path.clone());
        let method = req.method().clone();
        let mut out = p.http.request(method, format!("{}{path}", p.target));
        for (name, value) in req.headers() {
            if name != "host" && name != "content-length" {
                out = out.header(name, value);
            }
        }
        let body = axum::body::to_bytes(req.into_body(), 1 << 26)
            .await
            .unwrap_or_default();
        let Ok(answer) = out.body(body).send().await else {
            return axum::http::StatusCode::BAD_GATEWAY.into_response();
        };
        let status = answer.status().as_u16();
        let ctype = answer
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_owned();
        let mut bytes = answer.bytes().await.unwrap_or_default().to_vec();
        if path == "/healthz"
            && let Ok(mut v) = serde_json::from_slice::<Value>(&bytes)
        {
            v["key"] = Value::String(p.key.clone());
            bytes = serde_json::to_vec(&v).unwrap_or_default();
        }
        (
            axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::BAD_GATEWAY),
            [("content-type", ctype)],
            bytes,
        )
            .into_response()
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let proxy = Proxy {
        target: target.to_owned(),
        key: claimed_key.to_owned(),
        http: reqwest::Client::new(),
        seen: seen.clone(),
    };
    let app = axum::Router::new().fallback(forward).with_state(proxy);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind proxy");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), seen)
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
    pub peer_id: String,
    pub p2p: String,
    pub sent: Arc<Mutex<Vec<String>>>,
    pub peers: PeersHandle,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

pub struct Answer {
    pub status: u16,
    pub body: Value,
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
        let mut config = Config::default();
        config.api.listen = "127.0.0.1:0".parse().expect("addr");
        config.p2p.listen = vec!["/ip4/127.0.0.1/tcp/0".into()];
        config.p2p.bootstrap = bootstrap;
        config.boxes.accept = vec![box_url.to_owned()];
        config.boxes.allow_insecure_dev = true;
        config.schedules.advertise_secs = 1;
        config.schedules.board_ttl_secs = 4;
        // Flow tests do not play the human: every submit allowed unless a test says otherwise.
        config.policy = skillbox_node::config::PolicyConfig::allow_all();
        tune(&mut config);
        DataDir::new(dir.path()).init(&config).expect("init");
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
        let listener = node.bind(None).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = node
                .serve(listener, async move {
                    let _ = rx.await;
                })
                .await;
        });
        let token = DataDir::new(dir.path()).load_api_token().expect("token");
        TestNode {
            dir,
            base: format!("http://{addr}"),
            token,
            peer_id: started.peer_id.clone(),
            p2p: format!("{}/p2p/{}", started.listen_addrs[0], started.peer_id),
            sent,
            peers,
            http: reqwest::Client::new(),
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub async fn req(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Answer {
        let method_name = method.to_string();
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some((ct, bytes)) = body {
            r = r.header("content-type", ct).body(bytes);
        }
        let resp = r.send().await.expect("request");
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = resp.bytes().await.expect("body");
        // Every answer a test sees matches what the OpenAPI document says of it.
        if let Err(e) = skillbox_node::openapi::check_response(
            method_name.as_str(),
            path.split('?').next().unwrap_or(path),
            status,
            ct.as_deref(),
            &bytes,
        ) {
            panic!(
                "the answer does not match /openapi.json: {e}\n{}",
                String::from_utf8_lossy(&bytes)
            );
        }
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Answer { status, body }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.req(reqwest::Method::GET, path, None).await
    }

    pub async fn post_json(&self, path: &str, v: Value) -> Answer {
        self.req(
            reqwest::Method::POST,
            path,
            Some(("application/json", serde_json::to_vec(&v).expect("json"))),
        )
        .await
    }

    pub async fn put_json(&self, path: &str, v: &Value) -> Answer {
        self.req(
            reqwest::Method::PUT,
            path,
            Some(("application/json", serde_json::to_vec(v).expect("json"))),
        )
        .await
    }

    pub async fn add_skill(&self, doc: &str) {
        let a = self
            .req(
                reqwest::Method::POST,
                "/skills",
                Some(("text/markdown", doc.as_bytes().to_vec())),
            )
            .await;
        assert!(
            a.status == 201 || a.status == 200,
            "skill import: {} {}",
            a.status,
            a.body
        );
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
        assert!(
            a.status == 201 || a.status == 200,
            "source put: {} {}",
            a.status,
            a.body
        );
    }

    /// Wait until `skill` of `peer` is on this node's board.
    pub async fn wait_board(&self, peer: &str, skill: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let b = self.get("/board").await.body;
            if b["board"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["peer"].as_str() == Some(peer) && r["skill"].as_str() == Some(skill))
            {
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
        let peer: skillbox_peers::PeerId = peer.parse().expect("peer id");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self
            .peers
            .with_board(|b, now| b.offered(&peer, skill, now).is_some_and(&shown))
        {
            assert!(Instant::now() < deadline, "{what} never advertised");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Start a call (`POST /calls`, sources omitted) and return its id.
    pub async fn start_call(&self, peer: &str, skill: &str, request: &str) -> String {
        let a = self
            .post_json(
                "/calls",
                serde_json::json!({"peer": peer, "skill": skill, "request": request}),
            )
            .await;
        assert_eq!(a.status, 201, "{}", a.body);
        a.body["id"].as_str().expect("call id").to_owned()
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
        let state = view["state"].as_str().unwrap_or("");
        if !["answered", "ran", "failed"].contains(&state) {
            return;
        }
        let (id, role) = (
            view["id"].as_str().unwrap_or(""),
            view["role"].as_str().unwrap_or(""),
        );
        let a = self.get(&format!("/ledger?call={id}")).await;
        assert_eq!(a.status, 200, "{}", a.body);
        let stakes = a.body["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["kind"] == "stake" && e["role"] == role)
            .count();
        if state == "failed" {
            assert!(
                stakes <= 1,
                "call {id} ({role}, {state}) staked {stakes} times"
            );
        } else {
            assert_eq!(
                stakes, 1,
                "call {id} ({role}, {state}) staked {stakes} times"
            );
        }
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

/// A skill spending the owner's key through the `openai` provider double.
pub fn skill_doc(name: &str, body_marker: &str, required: &[&str]) -> String {
    let req = if required.is_empty() {
        String::new()
    } else {
        format!("requiredSources: [{}]\n", required.join(", "))
    };
    format!(
        "---\nname: {name}\ndescription: Builds a music-taste profile from listening history.\nprovider: openai\nmodel: gpt-test\nkey: openai-key\n{req}---\nYou are a music critic ({body_marker}). Describe the taste.\n"
    )
}

/// Owner (with the skill and its key) and caller (bootstrapped from it) around one box.
pub struct World {
    pub owner: TestNode,
    pub caller: TestNode,
    pub provider: ProviderLog,
    pub box_url: String,
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
    let owner = TestNode::start(&box_url, vec![], tune_owner).await;
    owner.put_source("openai-key", "secret", key).await;
    owner
        .add_skill(&skill_doc("taste", body_marker, required))
        .await;
    let caller = TestNode::start(&box_url, vec![owner.p2p.clone()], tune_caller).await;
    caller.wait_board(&owner.peer_id, "taste").await;
    World {
        owner,
        caller,
        provider,
        box_url,
    }
}
