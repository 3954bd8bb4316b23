//! Shared fixture: a real box server on loopback (axum over TCP) with an in-process provider
//! double, two parties with their own node keys, and a caller result key: the box crate's
//! tests' and benches' fixture.

use std::sync::Arc;

use skillbox_jc::attest::{Attestation, Attester, InsecureDevAttester, VerifiedRun, VerifyPolicy};
use skillbox_jc::client::{BoxClient, StakeInput, seal_stake};
use skillbox_jc::dsse::{ApprovedProgram, Envelope, approved_program, key_hex, sign_program};
use skillbox_jc::ed25519_dalek::SigningKey;
use skillbox_jc::program::*;
use skillbox_jc::registry::ProviderRegistry;
use skillbox_jc::run::{BoxConfig, BoxCore, ResultView, now_secs};
use skillbox_jc::seal::HpkeKeyPair;
use skillbox_jc::server::{Staked, TlsListener};
use skillbox_jc::tls::BoxTls;
use skillbox_providers::{
    ChatRequest, Completion, FinishReason, Provider, ProviderId, Reply, Usage,
};

/// How long a test waits for a run's result.
pub const WAIT: std::time::Duration = std::time::Duration::from_secs(20);

pub const MEASUREMENT: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

/// Answers with the prompt it was given (so tests can see what the box built), or with a fixed
/// text when one is set. The model id is written in hex: the box refuses an answer that carries
/// the owner's model id as written (a provider echoing its request, audit B1).
pub struct EchoProvider {
    pub fixed: Option<String>,
}

impl Provider for EchoProvider {
    fn complete<'a>(&'a self, request: ChatRequest, api_key: Option<&'a str>) -> Reply<'a> {
        Box::pin(async move {
            let text = match &self.fixed {
                Some(t) => t.clone(),
                None => format!(
                    "SYSTEM[{}] USER[{}] MODEL[hex:{}] KEY[{}]",
                    request.system,
                    request.user,
                    request
                        .model
                        .bytes()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>(),
                    api_key.is_some()
                ),
            };
            Ok(Completion {
                text,
                finish: FinishReason::Stop,
                usage: Usage::default(),
            })
        })
    }
}

/// A provider answering `text` to everything.
pub fn answering(text: &str) -> Arc<dyn Provider> {
    Arc::new(EchoProvider {
        fixed: Some(text.to_owned()),
    })
}

/// An opened run's attestation with what it answers to ([`Fixture::open_attested`]).
pub struct Attested {
    pub approved: ApprovedProgram,
    pub run_id: String,
    pub nonce: String,
    pub attestation: Attestation,
}

pub struct Fixture {
    pub url: String,
    pub client: BoxClient,
    pub caller: SigningKey,
    pub owner: SigningKey,
    pub result_key: HpkeKeyPair,
    pub policy: VerifyPolicy,
}

pub fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

/// Start a box with `answer` as the provider double's fixed answer (None: echo the prompt).
pub async fn start(answer: Option<&str>) -> Fixture {
    start_with(
        Arc::new(EchoProvider {
            fixed: answer.map(str::to_owned),
        }),
        BoxConfig::default(),
    )
    .await
}

/// A box core (no server) whose `local` provider is `provider`, with `config`.
pub fn core_with(provider: Arc<dyn Provider>, config: BoxConfig) -> BoxCore {
    core_attested_by(dev_attester(), provider, config)
}

/// The insecure-dev attester of [`MEASUREMENT`] with a fresh key.
pub fn dev_attester() -> Arc<dyn Attester> {
    Arc::new(InsecureDevAttester::with_measurement(MEASUREMENT.into()))
}

/// [`core_with`], attested by `attester`.
pub fn core_attested_by(
    attester: Arc<dyn Attester>,
    provider: Arc<dyn Provider>,
    config: BoxConfig,
) -> BoxCore {
    let mut providers = ProviderRegistry::new();
    providers.register(ProviderId::Local, None, provider);
    BoxCore::new(attester, providers, config)
}

/// Serve `core` over TLS with `tls` on an ephemeral loopback port: its `https://` URL.
pub async fn serve_tls_loopback(core: Arc<BoxCore>, tls: BoxTls) -> String {
    serve_tls_named(core, tls, Vec::new()).await
}

/// [`serve_tls_loopback`], answering also to the `Host` names `names` (a pass-through's).
pub async fn serve_tls_named(core: Arc<BoxCore>, tls: BoxTls, names: Vec<String>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let url = format!("https://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { skillbox_jc::server::serve_tls(listener, core, &names, &tls).await });
    url
}

/// A box serving HTTPS with a key it made at start, answering `answer` (None: echo). With
/// `bound`, its attestations bind that key (an honest box); without, they bind none. Also
/// answers the key's hash.
pub async fn start_tls(answer: Option<&str>, bound: bool) -> (Fixture, String) {
    start_tls_named(answer, bound, &[]).await
}

/// [`start_tls`], the box answering also to the `Host` names `names` (the address of a
/// [`PathSwitch`] in front of it).
pub async fn start_tls_named(
    answer: Option<&str>,
    bound: bool,
    names: &[String],
) -> (Fixture, String) {
    let tls = BoxTls::generate(&[]).expect("box TLS key");
    let spki = tls.spki_sha256().to_owned();
    let attester = if bound {
        tls.bind(dev_attester())
    } else {
        dev_attester()
    };
    let provider = Arc::new(EchoProvider {
        fixed: answer.map(str::to_owned),
    });
    let core = Arc::new(core_attested_by(attester, provider, BoxConfig::default()));
    let url = serve_tls_named(core, tls, names.to_vec()).await;
    (Fixture::at(&url), spki)
}

/// What a TLS front ([`start_tls_front_capturing`]) read in clear: the path of each request it
/// relayed, and every byte of their paths and bodies.
#[derive(Clone, Default)]
pub struct FrontCapture {
    pub paths: Arc<std::sync::Mutex<Vec<String>>>,
    pub bytes: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl FrontCapture {
    /// Whether the front read `needle` anywhere (a path, a body).
    pub fn read(&self, needle: &str) -> bool {
        let bytes = self.bytes.lock().expect("capture");
        bytes
            .windows(needle.len().max(1))
            .any(|w| w == needle.as_bytes())
    }
}

/// A TLS front (a TLS-terminating proxy) with a key of its own on loopback, relaying every
/// request to the box at `target` (whatever key that shows): the man in the middle a pinned
/// TLS key keeps out. Answers its `https://` URL and the paths it relayed.
pub async fn start_tls_front(target: &str) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let (url, capture) = start_tls_front_capturing(target).await;
    (url, capture.paths)
}

/// [`start_tls_front`], answering all it read in clear ([`FrontCapture`]).
pub async fn start_tls_front_capturing(target: &str) -> (String, FrontCapture) {
    start_tls_front_forging(target, None).await
}

/// [`start_tls_front_capturing`] that answers `/healthz` itself with `healthz` when given (the
/// figures a man in the middle would have a node act on) and relays everything else.
pub async fn start_tls_front_forging(
    target: &str,
    healthz: Option<serde_json::Value>,
) -> (String, FrontCapture) {
    use axum::extract::State;
    use axum::response::IntoResponse;
    #[derive(Clone)]
    struct Front {
        target: String,
        http: reqwest::Client,
        seen: FrontCapture,
        healthz: Option<Arc<serde_json::Value>>,
    }
    async fn relay(
        State(f): State<Front>,
        req: axum::extract::Request,
    ) -> axum::response::Response {
        let path = crate::node::path_of(&req);
        let (parts, body) = req.into_parts();
        let body = axum::body::to_bytes(body, 1 << 26)
            .await
            .unwrap_or_default();
        {
            let mut read = f.seen.bytes.lock().expect("capture");
            read.extend_from_slice(path.as_bytes());
            read.extend_from_slice(&body);
        }
        f.seen.paths.lock().expect("log").push(path.clone());
        if let (Some(forged), "/healthz") = (&f.healthz, path.as_str()) {
            return axum::Json(forged.as_ref().clone()).into_response();
        }
        let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(body));
        let Some(answer) = crate::node::forward(&f.http, &f.target, req).await else {
            return axum::http::StatusCode::BAD_GATEWAY.into_response();
        };
        let status = axum::http::StatusCode::from_u16(answer.status().as_u16())
            .unwrap_or(axum::http::StatusCode::BAD_GATEWAY);
        let ctype = answer.headers().get("content-type").cloned();
        let bytes = answer.bytes().await.unwrap_or_default();
        let mut out = (status, bytes).into_response();
        if let Some(c) = ctype {
            out.headers_mut().insert("content-type", c);
        }
        out
    }
    let seen = FrontCapture::default();
    let front = Front {
        target: target.to_owned(),
        http: reqwest::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .no_proxy()
            .build()
            .expect("front's client"),
        seen: seen.clone(),
        healthz: healthz.map(Arc::new),
    };
    let tls = BoxTls::generate(&[]).expect("front's own TLS key");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let url = format!("https://{}", listener.local_addr().expect("addr"));
    let listener = TlsListener::new(listener, tls.acceptor()).expect("front listener");
    let app = axum::Router::new().fallback(relay).with_state(front);
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// A TCP pass-through on the path to `https://` boxes — a load balancer that does not terminate
/// TLS, or a man in the middle choosing where each connection goes: every new connection is
/// relayed, bytes untouched, to the target chosen at that moment ([`Self::send_to`]), so each
/// shows its own target's key under one URL. Counts what each target received from clients.
pub struct PathSwitch {
    /// The one URL the targets answer at (`https://127.0.0.1:P`).
    pub url: String,
    /// Its `Host` name (`127.0.0.1:P`), which a box behind it must answer to.
    pub host: String,
    /// The targets' addresses (`127.0.0.1:P`), set by [`Self::relay_to`].
    targets: Arc<std::sync::Mutex<Vec<String>>>,
    to: Arc<std::sync::atomic::AtomicUsize>,
    received: Arc<[std::sync::atomic::AtomicU64; 4]>,
    live: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl PathSwitch {
    /// A pass-through listening now, relaying nowhere until [`Self::relay_to`].
    pub async fn start() -> PathSwitch {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let host = listener.local_addr().expect("addr").to_string();
        let to = Arc::new(AtomicUsize::new(0));
        let received: Arc<[std::sync::atomic::AtomicU64; 4]> = Arc::default();
        let live = Arc::new(std::sync::Mutex::new(Vec::new()));
        let targets = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let (to2, received2, live2, targets2) = (
            to.clone(),
            Arc::clone(&received),
            live.clone(),
            targets.clone(),
        );
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let i = to2.load(Ordering::SeqCst);
                let Some(addr) = targets2.lock().expect("targets").get(i).cloned() else {
                    continue;
                };
                let received = received2.clone();
                let relayed = tokio::spawn(async move {
                    let Ok(target) = tokio::net::TcpStream::connect(&addr).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut tr, mut tw) = target.into_split();
                    let up = async {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match tokio::io::AsyncReadExt::read(&mut cr, &mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            received[i].fetch_add(n as u64, Ordering::SeqCst);
                            if tokio::io::AsyncWriteExt::write_all(&mut tw, &buf[..n])
                                .await
                                .is_err()
                            {
                                break;
                            }
                        }
                        let _ = tokio::io::AsyncWriteExt::shutdown(&mut tw).await;
                    };
                    let down = async {
                        let _ = tokio::io::copy(&mut tr, &mut cw).await;
                        let _ = tokio::io::AsyncWriteExt::shutdown(&mut cw).await;
                    };
                    tokio::join!(up, down);
                });
                live2.lock().expect("live").push(relayed.abort_handle());
            }
        });
        PathSwitch {
            url: format!("https://{host}"),
            host,
            targets,
            to,
            received,
            live,
        }
    }

    /// Relay to `targets` (at most 4 `https://` URLs on loopback), the first one first.
    pub fn relay_to(&self, targets: &[&str]) {
        assert!(targets.len() <= 4, "at most 4 targets");
        *self.targets.lock().expect("targets") = targets
            .iter()
            .map(|t| {
                t.trim_start_matches("https://")
                    .trim_end_matches('/')
                    .to_owned()
            })
            .collect();
    }

    /// New connections go to target `i` from now; those relayed so far are cut (a balancer
    /// draining its back ends), and the clients' pools have a moment to see them closed.
    pub async fn send_to(&self, i: usize) {
        use std::sync::atomic::Ordering;
        self.to.store(i, Ordering::SeqCst);
        for relayed in self.live.lock().expect("live").drain(..) {
            relayed.abort();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    /// The bytes target `i` received from clients so far (handshakes included).
    pub fn received(&self, i: usize) -> u64 {
        self.received[i].load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Start a box whose `local` provider is `provider`, with `config`.
pub async fn start_with(provider: Arc<dyn Provider>, config: BoxConfig) -> Fixture {
    serve_box_loopback(Arc::new(core_with(provider, config))).await
}

/// Serve `core` over plain HTTP on an ephemeral loopback port: the fixture of that box.
pub async fn serve_box_loopback(core: Arc<BoxCore>) -> Fixture {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(skillbox_jc::server::serve(listener, core));
    Fixture::at(&url)
}

impl Fixture {
    /// The parties, their keys and a client of the box at `url`.
    pub fn at(url: &str) -> Fixture {
        Fixture {
            client: BoxClient::new(url).expect("client"),
            url: url.to_owned(),
            caller: key(1),
            owner: key(2),
            result_key: HpkeKeyPair::generate(),
            policy: VerifyPolicy::new(true),
        }
    }

    pub fn program(&self) -> Program {
        program_between(
            &self.caller,
            &self.owner,
            &self.result_key,
            MEASUREMENT,
            "song-picker",
        )
    }

    /// Signed by both parties.
    pub fn approve(&self, p: &Program) -> Envelope {
        let mut env = sign_program(p, &self.caller).expect("caller signs");
        env.sign(&self.owner).expect("owner signs");
        env
    }

    /// For an https box, its own attestation checked and its key admitted: what a client does
    /// before a program goes to it (a plain-HTTP box on loopback needs none).
    pub async fn admit_box(&self) {
        if self.client.is_tls() {
            self.client
                .attest_box(&self.policy)
                .await
                .expect("the box's own attestation");
        }
    }

    /// Open and verify a run of `p`.
    pub async fn open(&self, p: &Program) -> (ApprovedProgram, VerifiedRun) {
        let env = self.approve(p);
        let approved = approved_program(&env).expect("approved");
        self.admit_box().await;
        let opened = self.client.open(&env).await.expect("open");
        let run = self
            .client
            .attest(&approved, &opened.run_id, &self.policy)
            .await
            .expect("attest and verify");
        (approved, run)
    }

    pub fn caller_stake(&self, run: &VerifiedRun, request: &str, songs: &[u8]) -> Vec<u8> {
        seal_stake(
            run,
            Role::Caller,
            vec![
                StakeInput::bytes("request", request.as_bytes()),
                StakeInput::bytes("spotify_songs", songs),
            ],
        )
        .expect("seal")
    }

    /// The node key of the party in `role`.
    pub fn key(&self, role: Role) -> &SigningKey {
        match role {
            Role::Caller => &self.caller,
            Role::Owner => &self.owner,
        }
    }

    /// The party in `role` submits `run`, signed with its own key: the box's answer (whether
    /// this submit started the run).
    pub async fn submit_as(&self, run: &VerifiedRun, role: Role) -> skillbox_jc::Result<bool> {
        let key = self.key(role);
        self.client
            .submit(&run.run_id, &run.program_hash, role, key)
            .await
    }

    /// The party in `role` stakes `sealed` in `run` with its go in the same request, signed with
    /// its own key: the box's answer.
    pub async fn stake_and_submit_as(
        &self,
        run: &VerifiedRun,
        role: Role,
        sealed: Vec<u8>,
    ) -> skillbox_jc::Result<Staked> {
        self.client
            .stake_and_submit(run, role, sealed, self.key(role))
            .await
    }

    /// The caller's stake of `request` and `songs` in `run`, signed with `key` (the caller's own,
    /// or another party's to see the box refuse it): the box's answer.
    pub async fn stake_as_caller(
        &self,
        run: &VerifiedRun,
        request: &str,
        songs: &[u8],
        key: &SigningKey,
    ) -> skillbox_jc::Result<Role> {
        let sealed = self.caller_stake(run, request, songs);
        self.client.stake(run, Role::Caller, sealed, key).await
    }

    pub fn owner_stake(&self, run: &VerifiedRun, body: &str) -> Vec<u8> {
        self.owner_stake_with(run, body, None)
    }

    /// [`Self::owner_stake`], with a `day_limits` entry of `day_limits` when set (the owner's
    /// day thresholds the box keeps, `skillbox_jc::day::DayLimits::to_bytes`, or any bytes to
    /// see the box refuse them).
    pub fn owner_stake_with(
        &self,
        run: &VerifiedRun,
        body: &str,
        day_limits: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut entries = vec![
            StakeInput::bytes("body", body.as_bytes()),
            StakeInput::bytes("model", b"smollm2"),
        ];
        if let Some(limits) = day_limits {
            entries.push(StakeInput::bytes(
                skillbox_jc::day::DAY_LIMITS_ENTRY,
                limits,
            ));
        }
        seal_stake(run, Role::Owner, entries).expect("seal")
    }

    /// The owner's stake of `body` in `run`, signed with its own key: the box's answer.
    pub async fn stake_as_owner(&self, run: &VerifiedRun, body: &str) -> skillbox_jc::Result<Role> {
        let sealed = self.owner_stake(run, body);
        self.client
            .stake(run, Role::Owner, sealed, &self.owner)
            .await
    }

    /// Open a run of `p` (not verified) and ask for its attestation under a fresh nonce: what a
    /// client then checks.
    pub async fn open_attested(&self, p: &Program) -> Attested {
        let env = self.approve(p);
        let approved = approved_program(&env).expect("approved");
        self.admit_box().await;
        let run_id = self.client.open(&env).await.expect("open").run_id;
        let nonce = skillbox_jc::client::new_nonce();
        let attestation = self
            .client
            .attestation(&run_id, &nonce)
            .await
            .expect("attestation");
        Attested {
            approved,
            run_id,
            nonce,
            attestation,
        }
    }

    /// The run's result once the box has one (the test fails after [`WAIT`]).
    pub async fn result(&self, run: &VerifiedRun) -> ResultView {
        self.client
            .wait_result(&run.run_id, WAIT)
            .await
            .expect("result")
    }

    /// Both stakes as sealed (the caller's `caller`, the owner's `owner`), both submits, and
    /// the run's result once the box has one (the test fails after `wait`): a whole call as its
    /// two parties make it, for tests that seal stakes of their own.
    pub async fn stake_both_and_wait(
        &self,
        run: &VerifiedRun,
        caller: Vec<u8>,
        owner: Vec<u8>,
        wait: std::time::Duration,
    ) -> ResultView {
        self.client
            .stake(run, Role::Caller, caller, &self.caller)
            .await
            .expect("caller stakes");
        self.client
            .stake(run, Role::Owner, owner, &self.owner)
            .await
            .expect("owner stakes");
        self.submit_as(run, Role::Caller)
            .await
            .expect("caller submits");
        self.submit_as(run, Role::Owner)
            .await
            .expect("owner submits");
        self.client
            .wait_result(&run.run_id, wait)
            .await
            .expect("result")
    }

    /// Both stakes, both submits.
    pub async fn run_all(&self, run: &VerifiedRun, request: &str, body: &str) {
        self.run_all_with(run, request, b"song a\nsong b", body, None)
            .await
    }

    /// [`Self::run_all`] with the caller's `songs` and the owner's `day_limits` entry when set
    /// ([`Self::owner_stake_with`]).
    pub async fn run_all_with(
        &self,
        run: &VerifiedRun,
        request: &str,
        songs: &[u8],
        body: &str,
        day_limits: Option<&[u8]>,
    ) {
        self.stake_as_caller(run, request, songs, &self.caller)
            .await
            .expect("caller stakes");
        let sealed = self.owner_stake_with(run, body, day_limits);
        self.client
            .stake(run, Role::Owner, sealed, &self.owner)
            .await
            .expect("owner stakes");
        assert!(
            !self
                .submit_as(run, Role::Caller)
                .await
                .expect("caller submits")
        );
        assert!(
            self.submit_as(run, Role::Owner)
                .await
                .expect("owner submits")
        );
    }
}

/// A program between `caller` and `owner` (the caller's result sealed to `result_key`) for an
/// insecure-dev box of `measurement` and the `local` provider: a request of up to 1 KiB and one
/// `spotify_songs` source of up to 4 KiB, a body of 4 KiB, a model name of 64 bytes, 4 KiB of
/// output to the caller, receipts to both, ten minutes to run. Tests and benches change what
/// they measure with struct update (`Program { output: …, ..program_between(…) }`).
pub fn program_between(
    caller: &SigningKey,
    owner: &SigningKey,
    result_key: &HpkeKeyPair,
    measurement: &str,
    skill: &str,
) -> Program {
    Program {
        version: PROGRAM_VERSION,
        call_id: format!("call-{}", skillbox_jc::client::new_nonce()),
        parties: Parties {
            caller: CallerParty {
                node_key: key_hex(&caller.verifying_key()),
                result_key: result_key.public_hex(),
            },
            owner: OwnerParty {
                node_key: key_hex(&owner.verifying_key()),
            },
        },
        boxes: vec![BoxIdentity {
            platform: INSECURE_DEV.into(),
            measurement: measurement.into(),
        }],
        skill: SkillRef {
            name: skill.into(),
            declaration_digest: format!("sha256:{}", "ab".repeat(32)),
        },
        provider: ProviderGrant {
            id: ProviderId::Local,
            host: None,
        },
        caller_inputs: CallerInputs {
            request_max_bytes: 1024,
            sources: vec![SourceLimit {
                name: "spotify_songs".into(),
                max_bytes: 4096,
            }],
        },
        owner_inputs: OwnerInputs {
            body_max_bytes: 4096,
            model_max_bytes: 64,
            key_max_bytes: 0,
            body_max_tokens: None,
            model_context_tokens: None,
        },
        output: OutputSpec::to_caller(4096),
        receipt: ReceiptSpec::to_both(),
        prompt_template: PROMPT_TEMPLATE_V2.into(),
        expires_at: now_secs() + 600,
        guard: None,
    }
}

/// The error code a box answered with.
pub fn remote_code(e: &skillbox_jc::JcError) -> &str {
    match e {
        skillbox_jc::JcError::Remote { code, .. } => code,
        other => panic!("expected an error from the box, got {other:?}"),
    }
}
