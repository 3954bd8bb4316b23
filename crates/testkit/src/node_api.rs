//! A real node in-process: a temp data dir made by `init`, the store on disk, the API on an
//! ephemeral loopback port. No network, no box: the API tests' node.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use skillbox_node::api::{AppState, Mounts};
use skillbox_node::{Config, DataDir, Node};

pub struct TestNode {
    pub dir: tempfile::TempDir,
    pub base: String,
    pub token: String,
    /// The agent token (`agent.token`): what `/mcp` and `/a2a` take over TCP.
    pub agent_token: String,
    pub http: reqwest::Client,
    serving: Serving,
}

/// A node's API served in this runtime on the listener it binds, until stopped.
pub struct Serving {
    pub base: String,
    pub token: String,
    /// The agent token (`agent.token`): what `/mcp` and `/a2a` take over TCP.
    pub agent_token: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Serving {
    /// Bind `node`'s API (its configured address) and serve it; `dir` is its data dir (the
    /// API token).
    pub async fn start(node: Node, dir: &Path) -> Serving {
        Serving::start_with(node, dir, |_, _| Mounts::default()).await
    }

    /// [`Serving::start`] with a surface crate's routes beside the node's own, as `skillbox
    /// node` mounts them: `mounts` is given the node's state and the address the API bound
    /// (the surfaces' Host checks take it).
    pub async fn start_with(
        node: Node,
        dir: &Path,
        mounts: impl FnOnce(AppState, SocketAddr) -> Mounts,
    ) -> Serving {
        let listener = node.bind(None).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mounts = mounts(node.state(), addr);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            node.serve_with(listener, mounts, async move {
                let _ = rx.await;
            })
            .await
            .expect("serve");
        });
        Serving {
            base: format!("http://{addr}"),
            token: DataDir::new(dir).load_api_token().expect("token"),
            agent_token: DataDir::new(dir).load_agent_token().expect("agent token"),
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Shut the server down; whether it ended cleanly (no serve error).
    pub async fn stop(&mut self) -> bool {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => task.await.is_ok(),
            None => true,
        }
    }
}

/// A board holding one advert per offer, signed now, peer `i` ([`crate::bench::peer_key`])
/// signing the `i`-th: rows ordered by peer id, then skill. A board of any size or content
/// without a network of peers, for [`TestNode::start_with_board`] or a dashboard's node.
pub fn board_of(offers: Vec<Vec<skillbox_peers::OfferedSkill>>) -> skillbox_peers::Board {
    let now = skillbox_peers::now_ms();
    let mut board = skillbox_peers::Board::new(skillbox_peers::BoardConfig::default());
    for (i, skills) in offers.into_iter().enumerate() {
        let offer = skillbox_peers::Offer {
            skills,
            boxes: vec![],
        };
        let key = crate::bench::peer_key(i);
        let bytes = skillbox_peers::advert::sign_advert(&key, now, 1, &offer).expect("sign");
        board.ingest(&bytes, None, now).expect("a valid advert");
    }
    board
}

/// [`board_of`] `peers` peers offering `skills` skills each, `skill-<peer>-<n>` (n from 0, in
/// three digits so a peer's rows sort as numbered): `peers × skills` rows.
pub fn board_of_rows(peers: usize, skills: usize) -> skillbox_peers::Board {
    board_of(
        (0..peers)
            .map(|p| {
                (0..skills)
                    .map(|n| {
                        crate::skills::offered_skill(
                            &format!("skill-{p}-{n:03}"),
                            "Synthetic skill of a long board.",
                            "openrouter",
                            &[],
                        )
                    })
                    .collect()
            })
            .collect(),
    )
}

pub fn init_dir() -> tempfile::TempDir {
    // The tests' clients send the operator's token to the port; `init_dir_as_shipped` does not.
    init_dir_with(|c| c.api.operator_token_over_tcp = true)
}

/// [`init_dir`] with the API's shipped token rule: the operator's token over the socket only.
pub fn init_dir_as_shipped() -> tempfile::TempDir {
    init_dir_with(|_| {})
}

fn init_dir_with(tune: impl FnOnce(&mut Config)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.api.listen = "127.0.0.1:0".parse().expect("addr");
    tune(&mut config);
    DataDir::new(dir.path()).init(&config).expect("init");
    dir
}

impl TestNode {
    pub async fn start() -> TestNode {
        TestNode::start_in(init_dir()).await
    }

    pub async fn start_in(dir: tempfile::TempDir) -> TestNode {
        let node = Node::open(dir.path()).expect("open node");
        TestNode::serve(node, dir).await
    }

    /// A node without a peer network whose `GET /board` reads `board`, fed in-process: a board
    /// of any size or content without a network of peers.
    pub async fn start_with_board(board: skillbox_node::peering::SharedBoard) -> TestNode {
        let dir = init_dir();
        let node = Node::open(dir.path()).expect("open node");
        node.attach_board(board).expect("attach the board");
        TestNode::serve(node, dir).await
    }

    async fn serve(node: Node, dir: tempfile::TempDir) -> TestNode {
        let serving = Serving::start(node, dir.path()).await;
        TestNode {
            base: serving.base.clone(),
            token: serving.token.clone(),
            agent_token: serving.agent_token.clone(),
            dir,
            http: reqwest::Client::new(),
            serving,
        }
    }

    /// Stop the server and hand back the data dir (for a restart).
    pub async fn stop(mut self) -> tempfile::TempDir {
        assert!(self.serving.stop().await, "server task");
        let dir = tempfile::tempdir().expect("placeholder");
        std::mem::replace(&mut self.dir, dir)
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.url(path))
            .bearer_auth(&self.token)
    }

    /// Send and return status + JSON body (Null when empty). Every answer is checked against
    /// the OpenAPI document: its route, status and body schema.
    pub async fn call(&self, rb: reqwest::RequestBuilder) -> (u16, Value, String) {
        let (status, text) = crate::answer::send_checked(rb).await;
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::Null)
        };
        (status, json, text)
    }

    pub async fn get(&self, path: &str) -> (u16, Value, String) {
        let rb = self.req(reqwest::Method::GET, path).await;
        self.call(rb).await
    }

    /// `GET /sources` lists exactly the sources named `names`, in that order; the listing's text.
    pub async fn assert_sources_listed(&self, names: &[&str]) -> String {
        let (_, sources, text) = self.get("/sources").await;
        assert_eq!(crate::answer::names(&sources, "sources"), names, "{text}");
        text
    }

    /// Each of `paths` answers 200 and shows none of `hidden` (prompts, bodies: what a skill's
    /// or an agent's listing and detail never carry).
    pub async fn assert_routes_hide(&self, paths: &[&str], hidden: &[&str]) {
        for path in paths {
            let (status, _, text) = self.get(path).await;
            assert_eq!(status, 200, "{path}");
            for h in hidden {
                assert!(!text.contains(h), "{path} leaks {h}: {text}");
            }
        }
    }

    pub async fn post_skill(&self, doc: &str, name: Option<&str>) -> (u16, Value, String) {
        let path = match name {
            Some(n) => format!("/skills?name={n}"),
            None => "/skills".into(),
        };
        let rb = self
            .req(reqwest::Method::POST, &path)
            .await
            .header("content-type", "text/markdown")
            .body(doc.to_owned());
        self.call(rb).await
    }

    pub async fn put_source(&self, name: &str, kind: &str, content: &[u8]) -> (u16, Value, String) {
        let rb = self
            .req(
                reqwest::Method::PUT,
                &format!("/sources/{name}?kind={kind}"),
            )
            .await
            .body(content.to_vec());
        self.call(rb).await
    }
}

/// Assert `v` is an OpenWOP error envelope with this code.
pub fn assert_envelope(v: &Value, code: &str) {
    skillbox_skill::openwop::validate(skillbox_skill::Schema::ErrorEnvelope, v)
        .unwrap_or_else(|e| panic!("not an error envelope: {v}: {e:?}"));
    assert_eq!(v["error"], Value::String(code.into()), "{v}");
}

/// An answer (status, body, text) refused with `status` and an OpenWOP error envelope of
/// `code`; its body.
pub fn assert_refused(answer: (u16, Value, String), status: u16, code: &str) -> Value {
    let (got, body, _) = answer;
    assert_eq!(got, status, "{body}");
    assert_envelope(&body, code);
    body
}

pub const TASTE: &str = "---\nname: taste\ndescription: Builds a music-taste profile from listening history.\nprovider: openrouter\nmodel: anthropic/claude-sonnet-4.5\nkey: openrouter-key\nrequiredSources: spotify_songs\n---\nYou are a music critic. Read the listening history and describe the taste.\n";

pub const LOCAL: &str = "---\nname: haiku\ndescription: Writes a haiku about the request.\nprovider: local\n---\nWrite a haiku.\n";
