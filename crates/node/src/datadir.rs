//! The data dir: where a node keeps its keys, token, config and store.
//!
//! ```text
//! <data_dir>/node.key     32 raw bytes, the Ed25519 seed (mode 0600)
//! <data_dir>/data.key     32 raw bytes, the at-rest key for sources (mode 0600)
//! <data_dir>/api.token    the operator's bearer token of the HTTP API (mode 0600)
//! <data_dir>/agent.token  the agent surfaces' bearer token over TCP (mode 0600)
//! <data_dir>/config.toml  every setting, with comments
//! <data_dir>/node.db      SQLite store (+ -wal, -shm)
//! <data_dir>/api.addr     the API's bound address, written by `skillbox node` on start
//! <data_dir>/api.sock     the API on a Unix socket, for the CLI and `skillbox mcp` (mode 0600)
//! ```

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::crypto::{self, DataKey, KEY_LEN, NodeKey};
use crate::error::{NodeError, Result};

/// The data dir's files, a row each (the table in this module's doc): the file's name as a
/// constant and its path in a [`DataDir`], so no path is spelled apart from its name.
macro_rules! files {
    ($($(#[$doc:meta])* $path:ident: $name:ident = $file:literal;)*) => {
        $(pub const $name: &str = $file;)*

        impl DataDir {
            $(
                $(#[$doc])*
                pub fn $path(&self) -> PathBuf {
                    self.root.join($name)
                }
            )*
        }
    };
}

files! {
    node_key: NODE_KEY = "node.key";
    data_key: DATA_KEY = "data.key";
    api_token: API_TOKEN = "api.token";
    /// The token HTTP agent clients (Claude Code, Cursor, A2A) send over TCP: it reaches only
    /// the agent surfaces (`/mcp`, `/a2a`, the card, the catalog), which ask the human before
    /// any disclosure. The TCP port may be another local user's while the node is down, so what
    /// an agent client sends there must not be the operator's token.
    agent_token: AGENT_TOKEN = "agent.token";
    config: CONFIG = "config.toml";
    store: STORE = "node.db";
    api_addr: API_ADDR = "api.addr";
    /// The API's Unix socket: what the CLI and `skillbox mcp` send the token to. Only this user
    /// can reach it (the dir is 0700), while a TCP port named in a stale `api.addr` may belong to
    /// anyone after a crash.
    api_socket: API_SOCKET = "api.sock";
}

/// Paths inside one data dir.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    pub fn new(root: impl Into<PathBuf>) -> DataDir {
        DataDir { root: root.into() }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Create the data dir with fresh keys, a token and the full config. Refuses a dir that
    /// already holds any of the node's files; on failure removes what it wrote (no half-made dir).
    pub fn init(&self, config: &Config) -> Result<InitReport> {
        for (name, path) in [
            (NODE_KEY, self.node_key()),
            (DATA_KEY, self.data_key()),
            (API_TOKEN, self.api_token()),
            (AGENT_TOKEN, self.agent_token()),
            (CONFIG, self.config()),
            (STORE, self.store()),
        ] {
            if path.exists() {
                return Err(NodeError::AlreadyInitialised(self.root.clone(), name));
            }
        }
        // Every dir made on the way is private whatever the umask (under `umask 002` a plain
        // `create_dir_all` leaves `~/.local/share` group-writable, which the own-dir rule then
        // refuses on every later start).
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(|e| NodeError::io(format!("creating data dir {}", self.root.display()), e))?;
        // The dir holds keys: only its owner may list it (an existing dir keeps its mode above).
        fs::set_permissions(&self.root, fs::Permissions::from_mode(0o700))
            .map_err(|e| NodeError::io(format!("setting mode of {}", self.root.display()), e))?;

        let mut written: Vec<PathBuf> = Vec::new();
        let result = (|| -> Result<InitReport> {
            let rnd = |what: &str| {
                crypto::random_bytes::<KEY_LEN>()
                    .map_err(|e| NodeError::io(format!("generating {what}"), e))
            };
            let node_seed = zeroize::Zeroizing::new(rnd("node key")?);
            let data_key = zeroize::Zeroizing::new(rnd("data key")?);
            let token = format!("sbx_{}", hex::encode(rnd("API token")?));
            let agent = new_agent_token()?;
            write_new(&self.node_key(), node_seed.as_ref(), &mut written)?;
            write_new(&self.data_key(), data_key.as_ref(), &mut written)?;
            write_new(&self.api_token(), token.as_bytes(), &mut written)?;
            write_new(&self.agent_token(), agent.as_bytes(), &mut written)?;
            write_new(&self.config(), config.render().as_bytes(), &mut written)?;
            let node_key = NodeKey::from_seed(&node_seed);
            Ok(InitReport {
                data_dir: self.root.clone(),
                peer_id: node_key.peer_id(),
            })
        })();
        if result.is_err() {
            for path in written {
                let _ = fs::remove_file(path);
            }
        }
        result
    }

    pub fn load_config(&self) -> Result<Config> {
        Config::load(&self.config())
    }

    pub fn load_node_key(&self) -> Result<NodeKey> {
        let raw = read_key(&self.node_key(), "node key")?;
        Ok(NodeKey::from_seed(&raw))
    }

    pub fn load_data_key(&self) -> Result<DataKey> {
        let raw = read_key(&self.data_key(), "data key")?;
        Ok(DataKey::from_bytes(&raw))
    }

    /// The API token (what clients send as `Authorization: Bearer <token>`).
    pub fn load_api_token(&self) -> Result<String> {
        read_api_token(&self.api_token())
    }

    /// The agent token (what HTTP agent clients send to `/mcp` and `/a2a` over TCP).
    pub fn load_agent_token(&self) -> Result<String> {
        read_api_token(&self.agent_token())
    }

    /// Make `agent.token` if it is missing (a data dir made before it existed): written to a
    /// private temporary file and linked into place, so two starts racing make one token and a
    /// reader never sees half of it. Whether one was made.
    pub fn ensure_agent_token(&self) -> Result<bool> {
        let path = self.agent_token();
        if path.exists() {
            return Ok(false);
        }
        let token = new_agent_token()?;
        let tmp = self.temporary(AGENT_TOKEN)?;
        let mut written = Vec::new();
        let linked = write_new(&tmp, token.as_bytes(), &mut written).and_then(|()| {
            match fs::hard_link(&tmp, &path) {
                Ok(()) => Ok(true),
                // Another start made it first: theirs stands.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(NodeError::io(format!("creating {}", path.display()), e)),
            }
        });
        let _ = fs::remove_file(&tmp);
        let made = linked?;
        self.sync_root()?;
        Ok(made)
    }

    /// Replace `api.token` with a fresh one (`skillbox token rotate`): written to a private
    /// temporary file (0600), synced, renamed over the old one, the dir synced — a reader sees
    /// the old token or the new one, never half of either. A running node re-checks the file on
    /// every request (`Shared::authorize`), so the old token stops working at once and every
    /// dashboard session ends.
    pub fn rotate_api_token(&self) -> Result<()> {
        let raw = zeroize::Zeroizing::new(
            crypto::random_bytes::<KEY_LEN>()
                .map_err(|e| NodeError::io("generating an API token", e))?,
        );
        let token = zeroize::Zeroizing::new(format!("sbx_{}", hex::encode(raw.as_ref())));
        self.replace_token(API_TOKEN, &self.api_token(), &token)
    }

    /// Replace `agent.token` with a fresh one (`skillbox token rotate --agent`), as
    /// [`DataDir::rotate_api_token`] replaces `api.token`: a running node takes only the new one
    /// from the next request on. Dashboard sessions stay (they are the operator's).
    pub fn rotate_agent_token(&self) -> Result<()> {
        let token = new_agent_token()?;
        self.replace_token(AGENT_TOKEN, &self.agent_token(), &token)
    }

    fn replace_token(&self, name: &str, path: &Path, token: &str) -> Result<()> {
        // Only an initialised dir (a node key): rotating must not make a token where no node
        // is. An unreadable or damaged token is replaced all the same — that is one way out.
        if !self.node_key().exists() {
            return Err(NodeError::Missing {
                what: "node key (not an initialised data dir)",
                path: self.node_key(),
            });
        }
        let tmp = self.temporary(name)?;
        let mut written = Vec::new();
        let result = write_new(&tmp, token.as_bytes(), &mut written).and_then(|()| {
            fs::rename(&tmp, path)
                .map_err(|e| NodeError::io(format!("replacing {}", path.display()), e))
        });
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
            return result;
        }
        self.sync_root()
    }

    /// A fresh name for a temporary file beside `name` in the data dir.
    fn temporary(&self, name: &str) -> Result<PathBuf> {
        let suffix = crypto::random_bytes::<8>()
            .map_err(|e| NodeError::io(format!("naming a temporary {name}"), e))?;
        Ok(self
            .root
            .join(format!(".{name}.{}.tmp", hex::encode(suffix))))
    }

    fn sync_root(&self) -> Result<()> {
        fs::File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(|e| NodeError::io(format!("syncing {}", self.root.display()), e))
    }

    /// The running node's API address, as it wrote it on start.
    pub fn load_api_addr(&self) -> Result<std::net::SocketAddr> {
        let path = self.api_addr();
        let text = read_text(&path, "api.addr (is `skillbox node` running?)")?;
        text.trim().parse().map_err(|_| NodeError::Corrupted {
            what: "api.addr",
            path,
            problem: format!("{:?} is not a socket address", text.trim()),
        })
    }

    /// Record the bound API address (replaced atomically so a reader never sees half of it).
    pub fn write_api_addr(&self, addr: std::net::SocketAddr) -> Result<()> {
        let tmp = self.root.join(".api.addr.tmp");
        fs::write(&tmp, format!("{addr}\n"))
            .map_err(|e| NodeError::io(format!("writing {}", tmp.display()), e))?;
        fs::rename(&tmp, self.api_addr())
            .map_err(|e| NodeError::io(format!("writing {}", self.api_addr().display()), e))
    }
}

/// What `init` made.
#[derive(Debug, Clone)]
pub struct InitReport {
    pub data_dir: PathBuf,
    pub peer_id: String,
}

/// A fresh agent token: `sbx_a_` and 64 hex digits (32 random bytes); the prefix tells it
/// from the operator's `sbx_` and a tenant's `sbx_t_` at a glance.
fn new_agent_token() -> Result<zeroize::Zeroizing<String>> {
    let raw = zeroize::Zeroizing::new(
        crypto::random_bytes::<KEY_LEN>()
            .map_err(|e| NodeError::io("generating the agent token", e))?,
    );
    Ok(zeroize::Zeroizing::new(format!(
        "sbx_a_{}",
        hex::encode(raw.as_ref())
    )))
}

/// The API token in the file at `path` (trimmed; at least 16 printable ASCII characters).
pub fn read_api_token(path: &Path) -> Result<String> {
    let raw = read_secret_file(path, "API token")?;
    let token = std::str::from_utf8(&raw)
        .map(str::trim)
        .map_err(|_| NodeError::Corrupted {
            what: "API token",
            path: path.to_owned(),
            problem: "not UTF-8".into(),
        })?
        .to_owned();
    if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(NodeError::Corrupted {
            what: "API token",
            path: path.to_owned(),
            problem: "expected at least 16 printable ASCII characters".into(),
        });
    }
    Ok(token)
}

fn write_new(path: &Path, bytes: &[u8], written: &mut Vec<PathBuf>) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| NodeError::io(format!("creating {}", path.display()), e))?;
    written.push(path.to_owned());
    file.write_all(bytes)
        .and_then(|_| file.sync_all())
        .map_err(|e| NodeError::io(format!("writing {}", path.display()), e))
}

/// The text of the file at `path`; one that is not there is `Missing` `what` (a data dir never
/// initialised, a node not running), any other failure the I/O error.
pub(crate) fn read_text(path: &Path, what: &'static str) -> Result<String> {
    fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            NodeError::Missing {
                what,
                path: path.to_owned(),
            }
        } else {
            NodeError::io(format!("reading {}", path.display()), e)
        }
    })
}

fn read_secret_file(path: &Path, what: &'static str) -> Result<zeroize::Zeroizing<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(zeroize::Zeroizing::new(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(NodeError::Missing {
            what,
            path: path.to_owned(),
        }),
        Err(e) => Err(NodeError::io(
            format!("reading {what} {}", path.display()),
            e,
        )),
    }
}

fn read_key(path: &Path, what: &'static str) -> Result<[u8; KEY_LEN]> {
    let raw = read_secret_file(path, what)?;
    raw.as_slice().try_into().map_err(|_| NodeError::Corrupted {
        what,
        path: path.to_owned(),
        problem: format!("expected exactly {KEY_LEN} bytes, found {}", raw.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_writes_private_files_and_refuses_twice() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::new(tmp.path().join("node"));
        let report = dir.init(&Config::default()).expect("init");
        assert!(report.peer_id.starts_with("12D3KooW"));
        for p in [
            dir.node_key(),
            dir.data_key(),
            dir.api_token(),
            dir.agent_token(),
            dir.config(),
        ] {
            let mode = fs::metadata(&p).expect("exists").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", p.display());
        }
        assert_eq!(fs::read(dir.node_key()).expect("read").len(), 32);
        assert_eq!(fs::read(dir.data_key()).expect("read").len(), 32);
        assert!(dir.load_api_token().expect("token").starts_with("sbx_"));
        let agent = dir.load_agent_token().expect("agent token");
        assert!(agent.starts_with("sbx_a_"), "{agent}");
        assert_ne!(agent, dir.load_api_token().expect("token"));
        assert!(!dir.ensure_agent_token().expect("ensure"), "kept");
        assert_eq!(dir.load_agent_token().expect("agent token"), agent);
        assert_eq!(dir.load_config().expect("config"), Config::default());
        let before = fs::read(dir.data_key()).expect("read");
        let err = dir
            .init(&Config::default())
            .expect_err("second init refused");
        assert!(matches!(err, NodeError::AlreadyInitialised(..)), "{err}");
        assert_eq!(
            fs::read(dir.data_key()).expect("read"),
            before,
            "keys untouched"
        );
    }

    /// A data dir made before `agent.token` existed gets one (0600) at the next start; a
    /// rotation replaces it and leaves `api.token` alone.
    #[test]
    fn an_older_data_dir_gets_an_agent_token_and_it_rotates_alone() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::new(tmp.path().join("node"));
        dir.init(&Config::default()).expect("init");
        fs::remove_file(dir.agent_token()).expect("as an older release left it");
        assert!(dir.ensure_agent_token().expect("ensure"), "made");
        let mode = fs::metadata(dir.agent_token())
            .expect("exists")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let (agent, operator) = (
            dir.load_agent_token().expect("agent"),
            dir.load_api_token().expect("operator"),
        );
        dir.rotate_agent_token().expect("rotate");
        assert_ne!(dir.load_agent_token().expect("agent"), agent);
        assert_eq!(dir.load_api_token().expect("operator"), operator);
        let leftovers: Vec<_> = fs::read_dir(dir.root())
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn short_or_missing_key_is_a_clear_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::new(tmp.path());
        let err = dir.load_data_key().expect_err("missing");
        assert!(err.to_string().contains("data key missing"), "{err}");
        fs::write(dir.data_key(), b"short").expect("write");
        let err = dir.load_data_key().expect_err("short");
        assert!(
            err.to_string()
                .contains("expected exactly 32 bytes, found 5"),
            "{err}"
        );
    }
}
