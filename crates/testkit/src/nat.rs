//! The NAT tests' world (issue 18): Linux network namespaces built by `scripts/nat-netns` (two
//! hosts, each behind its own masquerading router, and a public segment; documentation
//! addresses, no route out), and processes started inside them with `ip netns exec`. Used by
//! the peers test (libp2p nodes as children of the test binary) and the command line's call
//! test (`skillbox box` and `skillbox node` processes). Needs root, iproute2 and nftables:
//! [`missing_capability`] says what is missing, [`skipped`] says so loudly.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The public segment's address: the relay's (and the call test's box's).
pub const PUBLIC_IP: &str = "203.0.113.1";
/// The first host's router's public address: a connection hole-punched to that host comes
/// from here.
pub const NAT1_PUBLIC_IP: &str = "203.0.113.11";

/// What this machine lacks for the namespace tests, if anything (probed once a process: the
/// tests of one binary run at once and would share the probe's namespace name).
pub fn missing_capability() -> Option<String> {
    static PROBED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PROBED.get_or_init(probe).clone()
}

fn probe() -> Option<String> {
    // Root, by the real uid the kernel shows (no libc call needed).
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false);
    if !root {
        return Some("not root".into());
    }
    for tool in ["ip", "nft"] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Some(format!("`{tool}` is not installed (iproute2 / nftables)"));
        }
    }
    let probe = format!("sbx-probe-{}", std::process::id());
    let ok = |c: &mut Command| {
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let made = ok(Command::new("ip").args(["netns", "add", &probe]));
    // The routers' masquerade needs nf_tables inside a namespace (a container may allow the
    // namespace but not the table).
    let tables = made && ok(in_namespace(&probe, "nft").args(["add", "table", "ip", "probe"]));
    let _ = Command::new("ip").args(["netns", "del", &probe]).status();
    if !made {
        return Some("cannot create a network namespace".into());
    }
    if !tables {
        return Some("nftables cannot make a table in a network namespace".into());
    }
    None
}

/// The banner a NAT test prints instead of running: impossible to miss in a CI log.
pub fn skipped(test: &str, missing: &str) {
    eprintln!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED: {test} (network namespaces) cannot run here: {missing}.\n\
         !!! It needs root, iproute2 and nftables (scripts/nat-tools installs them).\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    );
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/nat-netns")
}

/// One set of namespaces (`<prefix>-pub`, `-nat1`, `-h1`, `-nat2`, `-h2`) while a test runs;
/// removed when dropped, on a failed assertion too. Each test has its own prefix, so two test
/// binaries running at once do not share a network.
pub struct Namespaces {
    prefix: String,
}

/// What the routers' NAT does with a host's source port (`scripts/nat-netns` KIND).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatKind {
    /// Keeps it where it can (most home routers): a hole punch can work.
    Cone,
    /// A random public port per connection: no hole punch can work, calls take the relay.
    Symmetric,
}

impl Namespaces {
    /// Cone NATs.
    pub fn up(prefix: &str) -> Namespaces {
        Namespaces::up_as(prefix, NatKind::Cone)
    }

    pub fn up_as(prefix: &str, kind: NatKind) -> Namespaces {
        let kind = match kind {
            NatKind::Cone => "cone",
            NatKind::Symmetric => "symmetric",
        };
        // A run killed earlier may have left them.
        let _ = Command::new(script()).args(["down", prefix]).status();
        let status = Command::new(script())
            .args(["up", prefix, kind])
            .status()
            .expect("run scripts/nat-netns");
        assert!(
            status.success(),
            "scripts/nat-netns up {prefix} {kind} failed"
        );
        Namespaces {
            prefix: prefix.to_owned(),
        }
    }

    /// The public segment's namespace.
    pub fn public(&self) -> String {
        format!("{}-pub", self.prefix)
    }

    /// Host 1 or 2's namespace (each behind its own NAT).
    pub fn host(&self, n: u8) -> String {
        format!("{}-h{n}", self.prefix)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["down", &self.prefix]).status();
    }
}

/// `program` run inside `namespace` (`ip netns exec` execs it: the child's pid is the
/// program's, so killing the child kills it).
pub fn in_namespace(namespace: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", namespace]).arg(program);
    c
}

/// A process in a namespace, killed (SIGKILL) when dropped; its stdout lines, printed with its
/// label, arrive on `lines`. Its stdin is a pipe held open until then: a role process of a test
/// binary ([`exit_with_parent`]) ends when the test does, however the test ended.
pub struct NsProc {
    child: Child,
    _stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    label: String,
}

impl NsProc {
    /// Start `cmd` (stdout piped here, stdin a pipe; stderr as the command set it, else
    /// inherited).
    pub fn spawn(mut cmd: Command, label: &str) -> NsProc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {label}: {e}"));
        let out = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        let tag = label.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                println!("[{tag}] {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        NsProc {
            child,
            _stdin: stdin,
            lines,
            label: label.to_owned(),
        }
    }

    /// This test binary run again inside `namespace` as one role: only the test `test` (an
    /// `--exact` name), with `env_key=role` set.
    pub fn role(namespace: &str, test: &str, env_key: &str, role: &str) -> NsProc {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = in_namespace(namespace, exe);
        cmd.args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(env_key, role)
            .stderr(Stdio::inherit());
        NsProc::spawn(cmd, role)
    }

    /// What follows `prefix` on the first line holding it, within `within` (libtest may print
    /// "test <name> ... " before a role's first line).
    pub fn wait_line(&self, prefix: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(at) = line.find(prefix) {
                        return line[at + prefix.len()..].trim().to_owned();
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{}: no `{prefix}` line within {within:?}", self.label)
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("{}: exited before a `{prefix}` line", self.label)
                }
            }
        }
    }
}

impl Drop for NsProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// In a role process: end this process when the test that started it ends (its stdin, a pipe
/// the test holds, reaches end of file), so no role outlives a failed or killed test.
pub fn exit_with_parent() {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
}

/// `skillbox --data-dir DIR node` inside `namespace` (its log in `DIR/node.log`), once it
/// serves; with its peer id. The command line reaches it from anywhere through `DIR/api.sock`
/// (a Unix socket is a file, not bound to a network namespace).
pub fn start_node(namespace: &str, dir: &Path, label: &str) -> (NsProc, String) {
    let log = std::fs::File::create(dir.join("node.log")).expect("node log");
    let mut cmd = in_namespace(namespace, crate::procs::bin());
    cmd.arg("--data-dir")
        .arg(dir)
        .arg("node")
        .env("SKILLBOX_LOG", "debug")
        .stderr(log);
    let node = NsProc::spawn(cmd, label);
    let peer = node.wait_line("peer id:", Duration::from_secs(60));
    node.wait_line("data dir:", Duration::from_secs(60));
    (node, peer)
}

/// `skillbox --data-dir DATA box --insecure-dev --listen LISTEN` inside `namespace` with its
/// `openai` provider at `provider_url` (no embedded model; its log in `DATA.log`), once it
/// listens; with the URL it printed (https off loopback).
pub fn start_box(
    namespace: &str,
    data: &Path,
    listen: &str,
    provider_url: &str,
) -> (NsProc, String) {
    let log = std::fs::File::create(data.with_extension("log")).expect("box log");
    let mut cmd = in_namespace(namespace, crate::procs::bin());
    cmd.arg("--data-dir")
        .arg(data)
        .args(["box", "--insecure-dev", "--listen", listen])
        .arg("--provider-url")
        .arg(format!("openai={provider_url}"))
        .env("SKILLBOX_MODEL", "/nonexistent/model.gguf")
        .stderr(log);
    let bx = NsProc::spawn(cmd, "box");
    let url = bx.wait_line("box listening on", Duration::from_secs(60));
    (bx, url)
}
