//! A node opened from its data dir: config, keys, store, and the HTTP API over them.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use crate::agents::Agents;
use crate::api::{self, Access, AppState, Shared};
use crate::calls::boxes::Boxes;
use crate::calls::{Calls, CallsDeps};
use crate::config::Config;
use crate::crypto::NodeKey;
use crate::datadir::DataDir;
use crate::error::{NodeError, Result};
use crate::peering::{self, SharedBoard};
use crate::skills::Skills;
use crate::sources::{self, Sources};
use crate::store::Store;
use skillbox_peers::{PayloadReceiver, PeersHandle};

/// The running peer network and the task keeping its advert in step with the registry.
struct PeersRunning {
    handle: PeersHandle,
    offer_task: tokio::task::JoinHandle<()>,
    payloads: Option<PayloadReceiver>,
    calls_tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What `start_peers` reports: this node's peer id and where it listens.
#[derive(Debug, Clone)]
pub struct PeersStarted {
    pub peer_id: String,
    pub listen_addrs: Vec<String>,
}

/// Keep the advert equal to the offered set: recompute it when the API says something changed
/// and on every advert interval (a change made behind the API's back still goes out). The
/// network only re-publishes when the set really differs.
async fn keep_offer(
    state: AppState,
    handle: PeersHandle,
    boxes: Arc<Boxes>,
    guard: crate::config::GuardConfig,
    every: std::time::Duration,
) {
    // How many stored skills the last offer left out, so the warning is said once per change
    // rather than on every advert interval.
    let mut left_out = 0usize;
    loop {
        // Who the accepted boxes are (platform, measurement) goes into the advert too.
        boxes.refresh().await;
        let skills = state.skills.clone();
        match tokio::task::spawn_blocking(move || skills.list()).await {
            Ok(Ok(list)) => match handle
                .set_offer(advertisable_offer(
                    &list,
                    boxes.advertised(),
                    &guard,
                    &mut left_out,
                ))
                .await
            {
                Ok(()) => {}
                Err(skillbox_peers::PeersError::Stopped) => return,
                Err(e) => tracing::warn!(error = %e, "cannot set the advert's offer"),
            },
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot list skills for the advert"),
            Err(e) => tracing::warn!(error = %e, "skill listing task failed"),
        }
        tokio::select! {
            _ = state.offer_changed.notified() => {}
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// The offer of the stored skills an advert can carry. A skill imported before the import held
/// [`skillbox_skill::MAX_REQUIRED_SOURCES`] (more sources, or one named twice) would make the
/// whole offer invalid (`Offer::normalized` refuses what every board refuses), so the node would
/// advertise none of its skills; it is left out instead. Said by a closed code and a count, not
/// the skill's name, once each time the number left out changes.
fn advertisable_offer(
    list: &[crate::skills::SkillSummary],
    boxes: Vec<skillbox_peers::AcceptedBox>,
    guard: &crate::config::GuardConfig,
    left_out: &mut usize,
) -> skillbox_peers::Offer {
    let fits = |s: &&crate::skills::SkillSummary| {
        skillbox_skill::required_sources_advertisable(&s.required_sources)
    };
    let fit: Vec<_> = list.iter().filter(fits).cloned().collect();
    let now_out = list.iter().filter(|s| s.offered && !fits(s)).count();
    if now_out != *left_out {
        *left_out = now_out;
        if now_out > 0 {
            tracing::warn!(
                code = "skill_sources_over_advert_cap",
                skills = now_out,
                limit = skillbox_skill::MAX_REQUIRED_SOURCES,
                "offered skills left out of the advert: their requiredSources are over the limit or name a source twice; re-import them"
            );
        }
    }
    peering::offer_from(&fit, boxes, guard)
}

/// An open node.
pub struct Node {
    data_dir: DataDir,
    config: Config,
    node_key: NodeKey,
    sources: Sources,
    skills: Skills,
    state: AppState,
    store: Arc<Store>,
    boxes: Arc<Boxes>,
    peers: Option<PeersRunning>,
    /// `<data_dir>/api.sock`, bound by [`Node::bind`] beside the TCP listener so it accepts
    /// (queues) connections from the moment the port does; [`Node::serve_with`] serves it.
    api_socket: std::sync::Mutex<Option<std::os::unix::net::UnixListener>>,
    /// The other loopback family's address on the API's port, bound by [`Node::bind`] when the
    /// API is on loopback ([`bind_loopback_twin`]); served like the API's own.
    api_twin: std::sync::Mutex<Option<std::net::TcpListener>>,
    /// Held for the node's life: one node per data dir (two would both answer on api.addr and
    /// both write the store).
    _lock: std::fs::File,
}

/// On loopback, the API's port in the other family too (`[::1]` beside `127.0.0.1`, and back).
/// A browser resolves the dashboard's name (`sbx-….localhost`, `localhost`) to both and tries
/// `::1` first: left free, another user of the machine binds `[::1]:port` while this node runs,
/// and the human's browser shows that user's login page (the token typed in, the session cookie
/// sent). Taken by someone already, the node does not start. A machine with no address of that
/// family (IPv6 off) has nothing to squat: `None`.
fn bind_loopback_twin(addr: SocketAddr) -> Result<Option<std::net::TcpListener>> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let twin_ip: IpAddr = match addr.ip() {
        IpAddr::V4(v4) if v4.is_loopback() => Ipv6Addr::LOCALHOST.into(),
        IpAddr::V6(v6) if v6.is_loopback() => Ipv4Addr::LOCALHOST.into(),
        _ => return Ok(None),
    };
    let twin = SocketAddr::new(twin_ip, addr.port());
    match std::net::TcpListener::bind(twin) {
        Ok(listener) => {
            listener
                .set_nonblocking(true)
                .map_err(|e| NodeError::io(format!("serving the API on {twin}"), e))?;
            Ok(Some(listener))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(NodeError::io(
            format!(
                "binding the API's other loopback address {twin}: something else holds it, and a \
                 browser opening this node's dashboard may reach it first; stop it or choose \
                 another port (api.listen)"
            ),
            e,
        )),
        Err(e) => {
            tracing::debug!(%twin, error = %e, "no loopback address of the other family");
            Ok(None)
        }
    }
}

/// Bind `<data_dir>/api.sock` for the CLI and `skillbox mcp`, which send the operator token:
/// only this user can reach a socket in the 0700 data dir (and the file is 0600), where a TCP
/// port named by a stale `api.addr` can be bound by any local user once this node is gone. A file
/// left by a crash is removed first (this node holds the data dir's lock).
fn bind_api_socket(dir: &DataDir) -> Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.api_socket();
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(NodeError::io(format!("removing {}", path.display()), e)),
    }
    let listener = std::os::unix::net::UnixListener::bind(&path).map_err(|e| {
        NodeError::io(
            format!(
                "binding the API socket {} (a socket path is at most 107 bytes: a shorter \
                 --data-dir helps if it is longer)",
                path.display()
            ),
            e,
        )
    })?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| listener.set_nonblocking(true))
        .map_err(|e| NodeError::io(format!("preparing {}", path.display()), e))?;
    Ok(listener)
}

fn lock_data_dir(dir: &DataDir) -> Result<std::fs::File> {
    let path = dir.root().join("node.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| NodeError::io(format!("opening {}", path.display()), e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(NodeError::Conflict(format!(
            "another skillbox node is already running on {}",
            dir.root().display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(NodeError::io(format!("locking {}", path.display()), e))
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("data_dir", &self.data_dir)
            .field("node_key", &self.node_key)
            .finish()
    }
}

impl Node {
    /// Open the node in `data_dir`: read the config, the keys and the token (each a clear error
    /// when missing or malformed), open and migrate the store, and check that the data key is
    /// the one the store was written with. A data dir another user owns, may write to or may
    /// swap is refused first, naming it: its keys, config and socket could be theirs.
    pub fn open(data_dir: &Path) -> Result<Node> {
        skillbox_jc::own_dir::check("data dir", data_dir)?;
        if skillbox_jc::own_dir::close_to_others(data_dir)
            .map_err(|e| NodeError::io(format!("setting mode of {}", data_dir.display()), e))?
        {
            tracing::info!(path = %data_dir.display(), "data dir was open to other users' listing: made 0700");
        }
        let dir = DataDir::new(data_dir);
        let config = dir.load_config()?;
        let lock = lock_data_dir(&dir)?;
        let node_key = dir.load_node_key()?;
        let data_key = Arc::new(dir.load_data_key()?);
        let token = dir.load_api_token()?;
        // A data dir made before the agent token existed gets one now (under the lock).
        if dir.ensure_agent_token()? {
            tracing::info!(path = %dir.agent_token().display(), "agent token made: HTTP agent clients send it (never api.token) to /mcp and /a2a");
        }
        let store = Arc::new(Store::open(&dir.store())?);
        if !sources::verify_data_key(&store, &data_key)? {
            return Err(NodeError::DataKeyMismatch(dir.data_key()));
        }
        // The disclosure ledger's genesis (once per store) and its head outside the database.
        crate::ledger::open(
            &store,
            &ed25519_dalek::SigningKey::from_bytes(node_key.seed()),
            &node_key.peer_id(),
        )?;
        let sources = Sources::new(store.clone(), data_key.clone());
        let agents = Agents::new(
            store.clone(),
            config.agents.department_nesting,
            config.agents.max_roster_entries,
            config.agents.max_departments,
        );
        let skills = Skills::new(store.clone(), data_key, config.agents.namespace.clone())
            .with_ceilings(&config.ceilings);
        let boxes = Arc::new(
            Boxes::new(
                &config.boxes.accept,
                config.boxes.allow_insecure_dev,
                &config.boxes.pins,
                &config.boxes.provider_hosts,
            )
            .remembering(store.clone())?,
        );
        let mut shared = Shared::new(
            sources.clone(),
            skills.clone(),
            agents.clone(),
            config.limits.clone(),
            node_key.peer_id(),
            node_key.public_key_hex(),
            Access {
                operator_token: &token,
                tenants: &config.tenants,
                config_path: Some(dir.config()),
                token_path: Some(dir.api_token()),
                agent_token_path: Some(dir.agent_token()),
            },
        );
        shared.calls_max_request = config.calls.max_request_bytes;
        shared.operator_token_over_tcp = config.api.operator_token_over_tcp;
        let state = Arc::new(shared);
        Ok(Node {
            data_dir: dir,
            config,
            node_key,
            sources,
            skills,
            state,
            store,
            boxes,
            peers: None,
            api_socket: std::sync::Mutex::new(None),
            api_twin: std::sync::Mutex::new(None),
            _lock: lock,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }
    pub fn data_dir(&self) -> &DataDir {
        &self.data_dir
    }
    pub fn node_key(&self) -> &NodeKey {
        &self.node_key
    }
    /// The node id (libp2p PeerId of the node key).
    pub fn node_id(&self) -> String {
        self.node_key.peer_id()
    }
    pub fn sources(&self) -> &Sources {
        &self.sources
    }
    pub fn skills(&self) -> &Skills {
        &self.skills
    }
    /// Pack agents, roster entries and org charts.
    pub fn agents(&self) -> &Agents {
        &self.state.agents
    }

    /// Start the peer network with the node key and the config's listen and bootstrap
    /// addresses, and keep its advert equal to the offered set. Returns once every listen
    /// address is bound. Needs a Tokio runtime.
    pub async fn start_peers(&mut self) -> Result<PeersStarted> {
        if self.peers.is_some() {
            return Err(NodeError::Conflict(
                "the peer network is already running".into(),
            ));
        }
        let config = peering::peers_config(&self.config, &self.data_dir.config())?;
        let every = config.advert_interval;
        let keypair = skillbox_peers::keypair_from_seed(self.node_key.seed())?;
        let (handle, payloads) = skillbox_peers::start(config, keypair).await?;
        let listen_addrs = handle
            .listen_addrs()
            .await?
            .iter()
            .map(ToString::to_string)
            .collect();
        let peer_id = handle.local_peer_id().to_base58();
        // The same id everywhere: the API's node id is the libp2p one.
        debug_assert_eq!(peer_id, self.node_id());
        let _ = self.state.peers.set(handle.clone());
        let view: SharedBoard = Arc::new(handle.clone());
        let _ = self.state.board.set(view);
        // The accepted boxes' identities before the first advert and the first call.
        self.boxes.refresh().await;
        let offer_task = tokio::spawn(keep_offer(
            self.state.clone(),
            handle.clone(),
            self.boxes.clone(),
            self.config.guard.clone(),
            every,
        ));
        tracing::info!(%peer_id, ?listen_addrs, "peer network started");
        self.peers = Some(PeersRunning {
            handle,
            offer_task,
            payloads: Some(payloads),
            calls_tasks: Vec::new(),
        });
        Ok(PeersStarted {
            peer_id,
            listen_addrs,
        })
    }

    /// Start the calls driver over the running peer network: it takes the incoming payloads,
    /// resumes every open call, and runs the `advance` and `sweep` schedules. The API's
    /// `/calls`, `/approvals` and `/policy` answer from then on.
    pub fn start_calls(&mut self) -> Result<Calls> {
        self.start_calls_with(|h| Arc::new(h))
    }

    /// [`Node::start_calls`] with the payload transport wrapped (tests record every payload
    /// that leaves the node).
    pub fn start_calls_with(
        &mut self,
        transport: impl FnOnce(PeersHandle) -> Arc<dyn skillbox_peers::PayloadTransport>,
    ) -> Result<Calls> {
        self.start_calls_with_parts(transport, |h| Arc::new(h))
    }

    /// [`Node::start_calls_with`] with the board the caller reads wrapped too (tests show what
    /// call start does with an advert no board would take).
    pub fn start_calls_with_parts(
        &mut self,
        transport: impl FnOnce(PeersHandle) -> Arc<dyn skillbox_peers::PayloadTransport>,
        directory: impl FnOnce(PeersHandle) -> Arc<dyn crate::calls::Directory>,
    ) -> Result<Calls> {
        let node_id = self.node_id();
        let Some(running) = self.peers.as_mut() else {
            return Err(NodeError::Conflict(
                "calls need the peer network: start it first".into(),
            ));
        };
        let Some(payloads) = running.payloads.take() else {
            return Err(NodeError::Conflict(
                "the calls driver is already running (or the payloads were taken)".into(),
            ));
        };
        let policy =
            crate::calls::load_policy(&self.store)?.unwrap_or_else(|| self.config.policy.clone());
        let s = &self.config.schedules;
        let calls = Calls::new(CallsDeps {
            store: self.store.clone(),
            sources: self.sources.clone(),
            skills: self.skills.clone(),
            node_seed: *self.node_key.seed(),
            node_id,
            transport: transport(running.handle.clone()),
            directory: directory(running.handle.clone()),
            boxes: self.boxes.clone(),
            timing: skillbox_calls::Timing {
                stall_limit_ms: s.stall_limit_secs.saturating_mul(1000),
                ..skillbox_calls::Timing::default()
            },
            settings: self.config.calls.clone(),
            ceilings: self.config.ceilings.clone(),
            guard: self.config.guard.clone(),
            policy,
            metrics: self.state.metrics.clone(),
        });
        running.calls_tasks = calls.spawn(
            payloads,
            std::time::Duration::from_secs(s.advance_secs),
            std::time::Duration::from_secs(s.sweep_secs),
        );
        let _ = self.state.calls.set(calls.clone());
        Ok(calls)
    }

    /// The running peer network, if started.
    pub fn peers(&self) -> Option<PeersHandle> {
        self.peers.as_ref().map(|p| p.handle.clone())
    }

    /// The incoming payloads (for the calls logic); `None` before `start_peers` or once taken.
    pub fn take_payloads(&mut self) -> Option<PayloadReceiver> {
        self.peers.as_mut().and_then(|p| p.payloads.take())
    }

    /// Serve `GET /board` from this view instead of a network (benches feed a board directly).
    /// Refused when a board is already attached.
    pub fn attach_board(&self, view: SharedBoard) -> Result<()> {
        self.state
            .board
            .set(view)
            .map_err(|_| NodeError::Conflict("a board is already attached".into()))
    }

    /// The HTTP API router.
    pub fn router(&self) -> axum::Router {
        api::router(self.state.clone())
    }

    /// What every handler shares: the library API surface crates build their routes over.
    pub fn state(&self) -> AppState {
        self.state.clone()
    }

    /// Bind the API listener: `addr`, or the configured one. A non-loopback address is refused
    /// unless `api.plain_http_beyond_loopback` says so (the API is plain HTTP: the token, the
    /// dashboard's session and every answer would cross the network in clear), and then
    /// logged as a warning.
    pub async fn bind(&self, addr: Option<SocketAddr>) -> Result<tokio::net::TcpListener> {
        let addr = addr.unwrap_or(self.config.api.listen);
        if !addr.ip().is_loopback() {
            if !self.config.api.plain_http_beyond_loopback {
                return Err(NodeError::invalid(
                    "api.listen",
                    format!(
                        "{addr} is beyond loopback, where the API's plain HTTP carries the operator token and every answer in clear; listen on loopback (put a TLS proxy in front for other machines), or set api.plain_http_beyond_loopback = true if the network is trusted"
                    ),
                ));
            }
            tracing::warn!(%addr, "the API listens beyond loopback in plain HTTP: anyone on the path sees the token, and anyone who holds it controls this node");
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| NodeError::io(format!("binding the API to {addr}"), e))?;
        let bound = listener
            .local_addr()
            .map_err(|e| NodeError::io("reading the API's bound address", e))?;
        let twin = bind_loopback_twin(bound)?;
        if let Ok(mut slot) = self.api_twin.lock() {
            *slot = twin;
        }
        let socket = bind_api_socket(&self.data_dir)?;
        if let Ok(mut slot) = self.api_socket.lock() {
            *slot = Some(socket);
        }
        Ok(listener)
    }

    /// Serve the API on `listener` until `shutdown` resolves. Writes the bound address to
    /// `<data_dir>/api.addr` first so the CLI and tests can find the node.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        self.serve_with(listener, api::Mounts::default(), shutdown)
            .await
    }

    /// [`Node::serve`] with surface crates' routes mounted beside the node's own.
    pub async fn serve_with(
        self,
        listener: tokio::net::TcpListener,
        mounts: api::Mounts,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let addr = listener
            .local_addr()
            .map_err(|e| NodeError::io("reading the API's bound address", e))?;
        let socket = match self.api_socket.lock().ok().and_then(|mut s| s.take()) {
            Some(s) => s,
            None => bind_api_socket(&self.data_dir)?,
        };
        let socket = tokio::net::UnixListener::from_std(socket)
            .map_err(|e| NodeError::io("serving the API socket", e))?;
        self.data_dir.write_api_addr(addr)?;
        tracing::info!(%addr, node_id = %self.node_id(), "API listening");
        // Only requests naming this API (its address, `localhost` on loopback, `api.hosts`) and
        // from no other site's page: DNS rebinding and cross-site posts from a browser.
        let hosts = Arc::new(api::HostGuardState {
            hosts: skillbox_jc::server::HostGuard::for_addr(addr, &self.config.api.hosts),
            json_rpc: mounts.json_rpc.clone(),
        });
        let router = api::router_with(self.state.clone(), mounts);
        // No browser reaches a Unix socket (no DNS rebinding, no cross-site page), so the socket
        // answers without the Host check; only this user can connect to it.
        // Marked as the socket's, so the agent surfaces take the operator's token there (only
        // this user reaches it) and only the agent token over TCP.
        let on_socket = router
            .clone()
            .layer(axum::middleware::from_fn(api::mark_api_socket));
        let router = router.layer(axum::middleware::from_fn_with_state(hosts, api::host_guard));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let twin = match self.api_twin.lock().ok().and_then(|mut t| t.take()) {
            Some(t) => Some(
                tokio::net::TcpListener::from_std(t)
                    .map_err(|e| NodeError::io("serving the API's other loopback address", e))?,
            ),
            None => None,
        };
        let on_twin =
            twin.map(|t| axum::serve(t, router.clone()).with_graceful_shutdown(stopped()));
        let on_tcp = axum::serve(listener, router).with_graceful_shutdown(stopped());
        let on_unix = axum::serve(socket, on_socket).with_graceful_shutdown(stopped());
        let signal = async move {
            shutdown.await;
            let _ = stop_tx.send(true);
            Ok::<(), std::io::Error>(())
        };
        let served = tokio::try_join!(
            async move { on_tcp.await },
            async move { on_unix.await },
            async move {
                match on_twin {
                    Some(t) => t.await,
                    None => Ok(()),
                }
            },
            signal
        );
        let _ = std::fs::remove_file(self.data_dir.api_addr());
        let _ = std::fs::remove_file(self.data_dir.api_socket());
        served.map_err(|e| NodeError::io("serving the API", e))?;
        if let Some(p) = &self.peers {
            for t in &p.calls_tasks {
                t.abort();
            }
            p.offer_task.abort();
            p.handle.shutdown().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(name: &str, sources: Vec<String>) -> crate::skills::SkillSummary {
        crate::skills::SkillSummary {
            name: name.into(),
            agent_id: format!("local.skillbox.{name}"),
            description: format!("the {name} skill"),
            provider: Some("openrouter".into()),
            required_sources: sources,
            limits: Default::default(),
            tokens: Default::default(),
            digest: format!("sha256:{}", "ab".repeat(32)),
            offered: true,
            reason: None,
            reasons: vec![],
            created_at: 0,
            updated_at: 0,
        }
    }

    /// A node whose store holds one skill naming 33 sources (stored the way an older node,
    /// before the import held the cap, stored it) and one naming a source twice, beside an
    /// ordinary one: the offer the network is handed passes `Offer::normalized` and carries
    /// the ordinary skill. Before, the whole offer was refused and the node advertised none.
    #[test]
    fn a_stored_skill_over_the_source_cap_leaves_only_itself_out_of_the_offer() {
        let hoard = (0..=skillbox_skill::MAX_REQUIRED_SOURCES)
            .map(|i| format!("notes{i}"))
            .collect();
        let twice = vec!["notes".to_owned(), "notes".to_owned()];
        let list = [
            stored("hoard", hoard),
            stored("twice", twice),
            stored("taste", vec!["spotify_songs".into()]),
        ];
        let mut left_out = 0;
        let offer = advertisable_offer(
            &list,
            vec![],
            &crate::config::GuardConfig::default(),
            &mut left_out,
        )
        .normalized()
        .expect("the offer of the advertisable skills is valid");
        let names: Vec<&str> = offer.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["taste"]);
        assert_eq!(left_out, 2);
    }
}
