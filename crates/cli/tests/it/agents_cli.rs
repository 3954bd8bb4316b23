//! The real binary for tenants and packs: `token add` (the token printed once, only its digest
//! in config.toml, picked up by a running node), `skill add PACK.json` and `skill set`.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::procs::{BIN, LOOPBACK_INIT, cli as skillbox, text};

/// A running `skillbox node`, killed when dropped.
struct NodeProc {
    child: Child,
    addr: String,
}

impl NodeProc {
    fn start(dir: &Path) -> NodeProc {
        let log = dir.parent().expect("parent").join("node.log");
        let out = fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("clone");
        let mut child = Command::new(BIN)
            .arg("--data-dir")
            .arg(dir)
            .arg("node")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("spawn node");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(a) = fs::read_to_string(dir.join("api.addr")) {
                let addr = a.trim().to_owned();
                if TcpStream::connect(&addr).is_ok() {
                    return NodeProc { child, addr };
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "node exited early ({status}): {}",
                    fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "node did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One GET over a plain socket; returns the status.
fn get_status(addr: &str, path: &str, token: &str) -> u16 {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    String::from_utf8_lossy(&raw)
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn token_add(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["token", "add"];
    all.extend_from_slice(args);
    let o = skillbox(dir, &all);
    assert!(o.status.success(), "token add: {}", text(&o));
    let token = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    assert!(token.starts_with("sbx_t_") && token.len() == 70, "{token}");
    token
}

#[test]
fn tenant_tokens_and_pack_import_through_the_cli() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("node");
    let o = skillbox(&dir, &LOOPBACK_INIT);
    assert!(o.status.success(), "init: {}", text(&o));

    let acme = token_add(&dir, &["--tenant", "acme", "--workspace", "growth"]);
    let config = fs::read_to_string(dir.join("config.toml")).expect("config");
    assert!(
        !config.contains(&acme),
        "the token itself is in config.toml"
    );
    assert!(config.contains("tenant = \"acme\"") && config.contains("workspace = \"growth\""));
    let o = skillbox(&dir, &["token", "add", "--tenant", ""]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("tenant"), "{}", text(&o));
    assert_eq!(
        fs::read_to_string(dir.join("config.toml")).expect("config"),
        config,
        "a refused token add leaves config.toml as it was"
    );

    let node = NodeProc::start(&dir);
    assert_eq!(get_status(&node.addr, "/v1/agents/roster", &acme), 200);
    assert_eq!(get_status(&node.addr, "/skills", &acme), 403);
    // Added while the node runs: accepted without a restart.
    let late = token_add(&dir, &["--tenant", "late"]);
    assert_eq!(get_status(&node.addr, "/v1/agents/org-chart", &late), 200);
    assert_eq!(
        get_status(&node.addr, "/v1/agents/org-chart", "sbx_t_wrong"),
        401
    );

    let pack = serde_json::json!({
        "name": "core.openwop.agents", "version": "1.0.0", "engines": {"openwop": ">=1.0 <2.0.0"},
        "runtime": {"language": "remote", "entry": "https://example.invalid/agents"},
        "agents": [
            {"agentId": "core.openwop.agents.reviewer", "role": "skill", "persona": "Reviewer",
             "modelClass": "general", "systemPrompt": "Review it.", "toolAllowlist": [],
             "handoff": {"taskSchemaRef": "schemas/task.json", "returnSchemaRef": "schemas/return.json"}},
            {"agentId": "core.openwop.agents.planner", "role": "assistant", "persona": "Planner",
             "modelClass": "general", "systemPrompt": "Plan it."}
        ]
    });
    let pack_path = root.path().join("pack.json");
    fs::write(&pack_path, pack.to_string()).expect("write pack");
    let o = skillbox(
        &dir,
        &["skill", "add", pack_path.to_str().expect("utf-8 path")],
    );
    assert!(o.status.success(), "skill add pack: {}", text(&o));
    let out = text(&o);
    assert!(out.contains("added skill reviewer"), "{out}");
    assert!(out.contains("not offered: no provider declared"), "{out}");
    assert!(
        out.contains("added agent core.openwop.agents.planner"),
        "{out}"
    );

    let o = skillbox(&dir, &["skill", "set", "reviewer", "provider=local"]);
    assert!(o.status.success(), "skill set: {}", text(&o));
    assert!(text(&o).contains("  offered"), "{}", text(&o));
    let o = skillbox(&dir, &["skill", "set", "reviewer", "colour=red"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = skillbox(&dir, &["skill", "set", "reviewer", "provider=nope"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("provider"), "{}", text(&o));
    let o = skillbox(&dir, &["skill", "list"]);
    assert!(text(&o).contains("reviewer"), "{}", text(&o));
    assert!(text(&o).contains("local"), "{}", text(&o));
}
