//! Three real nodes in one process on 127.0.0.1 (mDNS off, 1 s adverts, 3 s board TTL), each
//! with its store, HTTP API and peer network, bootstrapped in a line A <- B <- C so C hears of
//! A only through B. Every wait has a deadline.

use crate::common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillbox_node::{Config, DataDir, Node};
use skillbox_peers::{PeerId, PeersHandle};

const BODY_MARKER: &str = "BODYMARKER-7f3a";
const KEY_MARKER: &str = "sk-or-v1-KEYMARKER-91c2";
const MODEL_MARKER: &str = "anthropic/claude-sonnet-4.5";

fn skill_doc() -> String {
    format!(
        "---\nname: taste\ndescription: Builds a music-taste profile from listening history.\nprovider: openrouter\nmodel: {MODEL_MARKER}\nkey: openrouter-key\nrequiredSources: spotify_songs\n---\nYou are a music critic ({BODY_MARKER}). Describe the taste.\n"
    )
}

struct Running {
    _dir: tempfile::TempDir,
    base: String,
    token: String,
    http: reqwest::Client,
    peers: PeersHandle,
    p2p: String,
    serving: common::Serving,
}

impl Running {
    async fn start(bootstrap: Vec<String>) -> Running {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::default();
        config.api.listen = "127.0.0.1:0".parse().expect("addr");
        config.p2p.listen = vec!["/ip4/127.0.0.1/tcp/0".into()];
        config.p2p.bootstrap = bootstrap;
        config.schedules.advertise_secs = 1;
        config.schedules.board_ttl_secs = 3;
        DataDir::new(dir.path()).init(&config).expect("init");
        let mut node = Node::open(dir.path()).expect("open");
        let started = node.start_peers().await.expect("peers start");
        assert_eq!(started.peer_id, node.node_id(), "one id for API and libp2p");
        let peers = node.peers().expect("running");
        let serving = common::Serving::start(node, dir.path()).await;
        Running {
            _dir: dir,
            base: serving.base.clone(),
            token: serving.token.clone(),
            http: reqwest::Client::new(),
            peers,
            p2p: started.listen_addrs[0].clone(),
            serving,
        }
    }

    fn id(&self) -> PeerId {
        self.peers.local_peer_id()
    }

    async fn stop(mut self) {
        assert!(self.serving.stop().await, "server task");
    }

    async fn req(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> (u16, String) {
        // Checked against the OpenAPI document, as every answer a test reads.
        let node = (self.base.as_str(), self.token.as_str());
        skillbox_testkit::answer::request_checked(&self.http, node, method, path, body).await
    }

    /// Store the provider key (`KEY_MARKER`) as a secret: what makes A's skill offered.
    async fn put_key(&self) {
        let key = Some(("application/octet-stream", KEY_MARKER.as_bytes().to_vec()));
        let (status, t) = self
            .req(
                reqwest::Method::PUT,
                "/sources/openrouter-key?kind=secret",
                key,
            )
            .await;
        assert_eq!(status, 201, "{t}");
    }

    /// `POST /peers` with `body`.
    async fn post_peers(&self, body: Vec<u8>) -> (u16, String) {
        let json = Some(("application/json", body));
        self.req(reqwest::Method::POST, "/peers", json).await
    }

    /// `GET /board` as text and parsed.
    async fn board(&self) -> (String, Value) {
        let (status, text) = self.req(reqwest::Method::GET, "/board", None).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).expect("board JSON");
        (text, v)
    }

    async fn skills_of(&self, peer: &PeerId) -> Vec<Value> {
        let (_, v) = self.board().await;
        v["board"]
            .as_array()
            .expect("rows")
            .iter()
            .filter(|r| r["peer"] == json!(peer.to_base58()))
            .cloned()
            .collect()
    }
}

async fn wait_for<F, Fut>(what: &str, within: Duration, mut cond: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if cond().await {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offered_skill_reaches_peers_boards_and_leaves_them() {
    tokio::time::timeout(Duration::from_secs(90), async {
        let a = Running::start(vec![]).await;
        let b = Running::start(vec![a.p2p.clone()]).await;
        let c = Running::start(vec![b.p2p.clone()]).await;
        let pa = a.id();

        // GET /peers: B is connected to A; C to B only.
        wait_for(
            "B lists A among its peers",
            Duration::from_secs(10),
            || async {
                let (_, t) = b.req(reqwest::Method::GET, "/peers", None).await;
                t.contains(&pa.to_base58())
            },
        )
        .await;
        let (_, peers_c) = c.req(reqwest::Method::GET, "/peers", None).await;
        let peers_c: Value = serde_json::from_str(&peers_c).expect("peers JSON");
        assert_eq!(peers_c["peerId"], json!(c.id().to_base58()));
        assert!(
            peers_c["peers"]
                .as_array()
                .expect("peers")
                .iter()
                .all(|p| p["peer"] != json!(pa.to_base58())),
            "C must not be connected to A directly: {peers_c}"
        );

        // Declared but not offered (no key yet): never on a board.
        let (status, t) = a
            .req(
                reqwest::Method::POST,
                "/skills",
                Some(("text/markdown", skill_doc().into_bytes())),
            )
            .await;
        assert_eq!(status, 201, "{t}");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            b.skills_of(&pa).await.is_empty(),
            "an unoffered skill was advertised"
        );

        // The key makes it offered: it reaches B, and C through B, within 5 s.
        a.put_key().await;
        for (name, n) in [("B", &b), ("C", &c)] {
            let took = wait_for(
                &format!("{name} sees A's taste"),
                Duration::from_secs(5),
                || async { n.skills_of(&pa).await.len() == 1 },
            )
            .await;
            assert!(took < Duration::from_secs(5), "{name} took {took:?}");
        }
        let rows = c.skills_of(&pa).await;
        let row = &rows[0];
        assert_eq!(row["skill"], json!("taste"));
        assert_eq!(
            row["description"],
            json!("Builds a music-taste profile from listening history.")
        );
        assert_eq!(row["provider"], json!("openrouter"));
        assert_eq!(row["requiredSources"], json!(["spotify_songs"]));
        assert!(row["age"].as_u64().is_some_and(|age| age < 10), "{row}");
        let (_, own) = a.req(reqwest::Method::GET, "/skills/taste", None).await;
        let own: Value = serde_json::from_str(&own).expect("skill JSON");
        let digest = own["digest"].as_str().expect("digest").to_owned();

        // Leak check: no body, key or model on any other node's board or in A's signed advert.
        for n in [&b, &c] {
            let (text, _) = n.board().await;
            let advert = n.peers.signed_advert(&pa).expect("A's advert is held");
            let advert = String::from_utf8_lossy(&advert).into_owned();
            for marker in [BODY_MARKER, KEY_MARKER, MODEL_MARKER] {
                assert!(!text.contains(marker), "{marker} on a board: {text}");
                assert!(!advert.contains(marker), "{marker} in an advert: {advert}");
            }
            assert!(
                advert.contains(&digest),
                "the advert is the one with the skill"
            );
        }

        // The key source goes: the skill leaves both boards (A itself stays, offering nothing).
        let (status, t) = a
            .req(reqwest::Method::DELETE, "/sources/openrouter-key", None)
            .await;
        assert_eq!(status, 204, "{t}");
        for (name, n) in [("B", &b), ("C", &c)] {
            wait_for(
                &format!("taste leaves {name}'s board"),
                Duration::from_secs(5),
                || async { n.skills_of(&pa).await.is_empty() },
            )
            .await;
        }
        assert!(
            b.peers.with_board(|bd, now| bd.advert(&pa, now).is_some()),
            "A still advertises"
        );

        // Offered again, then A stops: it leaves the boards after the 3 s TTL.
        a.put_key().await;
        wait_for(
            "taste back on C's board",
            Duration::from_secs(5),
            || async { c.skills_of(&pa).await.len() == 1 },
        )
        .await;
        a.stop().await;
        let gone = wait_for("A leaves C's board", Duration::from_secs(10), || async {
            c.skills_of(&pa).await.is_empty()
        })
        .await;
        assert!(gone <= Duration::from_secs(3 + 2), "A left after {gone:?}");
        assert!(
            !b.peers.with_board(|bd, now| bd.advert(&pa, now).is_some()),
            "A's entry is gone from B's board"
        );
        // B keeps advertising, so it stays on C's board past one TTL.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(
            c.peers
                .with_board(|bd, now| bd.advert(&b.id(), now).is_some())
        );
        b.stop().await;
        c.stop().await;
    })
    .await
    .expect("test finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_peers_dials_and_bad_addresses_are_refused() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let a = Running::start(vec![]).await;
        let b = Running::start(vec![]).await;
        let body = serde_json::to_vec(&json!({ "addr": a.p2p })).expect("json");
        let (status, t) = b.post_peers(body).await;
        assert_eq!(status, 200, "{t}");
        let v: Value = serde_json::from_str(&t).expect("json");
        assert_eq!(v["peer"], json!(a.id().to_base58()));
        wait_for(
            "B sees A's (empty) advert",
            Duration::from_secs(5),
            || async {
                b.peers
                    .with_board(|bd, now| bd.advert(&a.id(), now).is_some())
            },
        )
        .await;

        let refused: [(&[u8], u16, &[&str]); 3] = [
            (
                br#"{"addr":"not-a-multiaddr"}"#,
                400,
                &["addr", "not a multiaddr"],
            ),
            (b"{}", 400, &[]),
            // Nobody listens there: a clear dial failure, not a hang.
            (br#"{"addr":"/ip4/127.0.0.1/tcp/1"}"#, 502, &["dial_failed"]),
        ];
        for (body, status, says) in refused {
            let (got, t) = b.post_peers(body.to_vec()).await;
            assert_eq!(got, status, "{t}");
            assert!(says.iter().all(|s| t.contains(s)), "{t}");
        }
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("test finished in time");
}

#[tokio::test]
async fn without_the_peer_network_board_and_peers_say_so() {
    let node = common::TestNode::start().await;
    let resp = node
        .http
        .get(format!("{}/board", node.base))
        .bearer_auth(&node.token)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 503);
    let v: Value = resp.json().await.expect("envelope");
    assert_eq!(v["error"], json!("peers_unavailable"));
    node.stop().await;
}
