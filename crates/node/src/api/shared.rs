//! Who may call the API: the state every handler shares, the operator's token (followed across
//! `skillbox token rotate`) and the tenants' tokens (re-read when `config.toml` changes).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::agents::Agents;
use crate::config::{Limits, TenantsConfig};
use crate::metrics::Metrics;
use crate::peering::SharedBoard;
use crate::skills::Skills;
use crate::sources::Sources;
use crate::tenants::{Principal, Tokens};

/// What every handler shares.
pub struct Shared {
    pub sources: Sources,
    pub skills: Skills,
    pub agents: Agents,
    pub limits: Limits,
    pub node_id: String,
    pub public_key: String,
    pub metrics: Arc<Metrics>,
    /// The running peer network, once started (`GET /peers`, `POST /peers`).
    pub peers: OnceLock<skillbox_peers::PeersHandle>,
    /// What `GET /board` reads: the network's board, or one fed in-process (benches).
    pub board: OnceLock<SharedBoard>,
    /// Poked after anything that can change the offered set (skills, sources), so the advert
    /// goes out at once rather than at the next interval.
    pub offer_changed: tokio::sync::Notify,
    /// The calls driver, once the peer network runs.
    pub calls: OnceLock<crate::calls::Calls>,
    /// `calls.max_request_bytes`, for the body limit of `POST /calls`.
    pub calls_max_request: usize,
    /// `api.operator_token_over_tcp`: the operator's token is taken over TCP too.
    pub operator_token_over_tcp: bool,
    tokens: RwLock<Tokens>,
    /// `config.toml`, re-read for tenant tokens when an unknown token arrives and the file
    /// changed since (so `skillbox token add` works against a running node).
    config_path: Option<PathBuf>,
    config_stamp: Mutex<Option<TokenStamp>>,
    /// `api.token`, whose identity (inode, size, times) is checked on every authorization:
    /// `skillbox token rotate` renames a new file over it, and from the next request on only the
    /// new token is the operator's (a stat per request; no API call carries the new token).
    token_path: Option<PathBuf>,
    /// The identity of `api.token` when last read (`None`: not read yet).
    token_seen: Mutex<Option<Option<TokenStamp>>>,
    /// `agent.token`, followed like `api.token` (`skillbox token rotate --agent`); `None`: no
    /// agent token is accepted.
    agent_token_path: Option<PathBuf>,
    /// The identity of `agent.token` when last read (`None`: not read yet).
    agent_seen: Mutex<Option<Option<TokenStamp>>>,
    /// Bumped each time the operator's token changes: what a dashboard session is bound to.
    operator_epoch: std::sync::atomic::AtomicU64,
    /// The dashboard's single-use sign-in codes (`POST /dashboard/codes`), which its sign-in
    /// page takes instead of the token.
    pub signin_codes: super::SigninCodes,
}

/// What following a token file found: whether the token changed, and whether the file loaded.
struct Followed {
    changed: bool,
    loaded: bool,
}

/// How [`Shared`] learns who may call: the operator's token and the config's tenants.
pub struct Access<'a> {
    pub operator_token: &'a str,
    pub tenants: &'a TenantsConfig,
    /// Where the tenants came from, to pick up tokens added while the node runs.
    pub config_path: Option<PathBuf>,
    /// Where the operator's token lives, to follow `skillbox token rotate` while the node runs
    /// (`None`: the token given is the operator's for good).
    pub token_path: Option<PathBuf>,
    /// Where the agent token lives (`agent.token`), read on the first request and whenever it
    /// changes (`None`: no agent token is accepted).
    pub agent_token_path: Option<PathBuf>,
}

impl Shared {
    pub fn new(
        sources: Sources,
        skills: Skills,
        agents: Agents,
        limits: Limits,
        node_id: String,
        public_key: String,
        access: Access<'_>,
    ) -> Self {
        let stamp = access.config_path.as_deref().and_then(token_stamp);
        Shared {
            sources,
            skills,
            agents,
            limits,
            node_id,
            public_key,
            metrics: Arc::new(Metrics::default()),
            peers: OnceLock::new(),
            board: OnceLock::new(),
            offer_changed: tokio::sync::Notify::new(),
            calls: OnceLock::new(),
            calls_max_request: 64 * 1024,
            operator_token_over_tcp: false,
            tokens: RwLock::new(Tokens::new(access.operator_token, access.tenants)),
            config_path: access.config_path,
            config_stamp: Mutex::new(stamp),
            token_path: access.token_path,
            token_seen: Mutex::new(None),
            agent_token_path: access.agent_token_path,
            agent_seen: Mutex::new(None),
            operator_epoch: std::sync::atomic::AtomicU64::new(0),
            signin_codes: super::SigninCodes::default(),
        }
    }

    /// Which generation of the operator's token is current: a number that changes whenever
    /// `api.token` is replaced (checked now). A dashboard session started under one generation
    /// ends when it changes.
    pub fn operator_epoch(&self) -> u64 {
        self.follow_token_file();
        self.operator_epoch
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Re-read `api.token` if it is not the file last read. A file that changed and does not
    /// load leaves no operator token at all (fail closed: the old one was meant to end).
    fn follow_token_file(&self) {
        self.follow_file(
            self.token_path.as_deref(),
            &self.token_seen,
            Tokens::set_operator,
            |followed| {
                // A file touched or rewritten with the same token signs nobody out.
                if followed.changed {
                    tracing::info!(
                        "api.token replaced: the old operator token and every dashboard session end"
                    );
                    self.operator_epoch
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            },
        );
    }

    /// Re-read `agent.token` if it is not the file last read. One that is gone or does not
    /// load leaves no agent token (fail closed, as for `api.token`).
    fn follow_agent_file(&self) {
        self.follow_file(
            self.agent_token_path.as_deref(),
            &self.agent_seen,
            Tokens::set_agent,
            |followed| {
                if followed.changed && followed.loaded {
                    tracing::info!("agent.token read: the agent surfaces take this one over TCP");
                }
            },
        );
    }

    /// The one way a token file is followed: re-read `path` when its identity is not `seen`'s,
    /// `set` what it holds, or no token when it does not load (fail closed), and tell `then`
    /// what was found — still under `seen`'s lock, so a request racing the change waits for
    /// all of it (a session's epoch bumped too). Nothing when no file is kept or it is the
    /// same one.
    fn follow_file(
        &self,
        path: Option<&std::path::Path>,
        seen: &Mutex<Option<Option<TokenStamp>>>,
        set: fn(&mut Tokens, Option<&str>) -> bool,
        then: impl FnOnce(Followed),
    ) {
        let Some(path) = path else {
            return;
        };
        // Held across the stat and the reload, so a request racing a rotation waits for it
        // rather than passing on the old token (or reloading from a stale stat).
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        let now = token_stamp(path);
        if *seen == Some(now) {
            return;
        }
        *seen = Some(now);
        let loaded = crate::datadir::read_api_token(path);
        let mut tokens = self.tokens.write().unwrap_or_else(|p| p.into_inner());
        let changed = match &loaded {
            Ok(token) => set(&mut tokens, Some(token)),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "the token file changed and does not load: no such token is accepted until it does");
                set(&mut tokens, None)
            }
        };
        drop(tokens);
        then(Followed {
            changed,
            loaded: loaded.is_ok(),
        });
    }

    /// Who a presented bearer token stands for (`None`: nobody). Surfaces that authenticate on
    /// their own (a dashboard's cookie) call this with the token they hold.
    pub fn authorize(&self, presented: &str) -> Option<Principal> {
        self.principal(presented)
    }

    /// Who a presented token stands for. The config's tenants are followed on every request,
    /// as `api.token` is: a token added by `skillbox token add` works at once, and one removed
    /// from `config.toml` (or moved to another tenant) stops at once — it used to stay in force
    /// until the node restarted or someone presented an unknown token.
    pub(super) fn principal(&self, presented: &str) -> Option<Principal> {
        self.follow_token_file();
        self.follow_agent_file();
        self.follow_config();
        self.tokens
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .principal(presented)
    }

    /// Re-read the config's tenant tokens once `config.toml` has changed (one `stat` a
    /// request). A config that does not load keeps the tokens in force, and says so.
    fn follow_config(&self) {
        let Some(path) = self.config_path.as_deref() else {
            return;
        };
        let now = token_stamp(path);
        {
            let mut stamp = self.config_stamp.lock().unwrap_or_else(|p| p.into_inner());
            if now.is_none() || *stamp == now {
                return;
            }
            *stamp = now;
        }
        match crate::config::Config::load(path) {
            Ok(config) => {
                let mut tokens = self.tokens.write().unwrap_or_else(|p| p.into_inner());
                tokens.set_tenants(&config.tenants);
                tracing::info!(
                    tokens = config.tenants.tokens.len(),
                    "tenant tokens reloaded"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "config changed but does not load; tenant tokens kept");
            }
        }
    }
}

/// What tells one version of a file (`api.token`, `config.toml`) from another: a rename gives a
/// new inode, an edit in place
/// new times or size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TokenStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn token_stamp(path: &std::path::Path) -> Option<TokenStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(TokenStamp {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}
