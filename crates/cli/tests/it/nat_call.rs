//! The NAT test through a box (issue 18, Must show): real `skillbox` processes in Linux network
//! namespaces (`scripts/nat-netns up sbxc`: documentation addresses, no route out). An owner
//! behind one masquerading NAT and a caller behind another; on the public segment a relay node
//! (forced DHT server, relay server: the only DHT server), a box serving HTTPS that both nodes
//! pin, and an OpenAI-compatible provider double the box reaches on its loopback. The caller
//! finds the owner's skill through the Kademlia skill index — its live topics and board sync are
//! off, so the index is the only way the owner's advert can reach it — starts the call with
//! `skillbox ask`, its human consents with `skillbox approve` at a terminal, and the call ends
//! answered by the provider on the caller and ran on the owner. The test prints whether the
//! caller's connection to the owner was hole-punched (direct) or relayed, and how long it took.
//!
//! The test process drives both nodes with the command line from outside the namespaces: the
//! CLI talks to a node through `<data dir>/api.sock`, a file, which no network namespace hides.
//! Needs root, `ip` and `nft`: without them it prints a loud SKIPPED banner and passes.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use skillbox_testkit::nat::{
    NAT1_PUBLIC_IP, Namespaces, NatKind, NsProc, PUBLIC_IP, exit_with_parent, missing_capability,
    skipped, start_box, start_node,
};

use crate::support::procs::{self, cli, cli_ok, skillbox_with};

const ROLE_ENV: &str = "SKILLBOX_NAT_CALL_ROLE";
const SKILL: &str = "nat-haiku";
const DESCRIPTION: &str = "Writes a haiku about network address translation and hole punching.";
const REQUEST: &str = "write me a haiku about network address translation";
/// What only the provider double answers: the caller's answer must carry it.
const PROVIDER_MARK: &str = "NAT-PROVIDER-DOUBLE";
/// Every wait is for a condition, with room for a loaded CI machine.
const LIMIT: Duration = Duration::from_secs(180);

fn skill_doc() -> String {
    format!(
        "---\nname: {SKILL}\ndescription: {DESCRIPTION}\nprovider: openai\nmodel: gpt-test\n\
         key: openai-key\nrequiredSources: [notes]\n---\nYou are a poet. Write the haiku asked for.\n"
    )
}

/// The provider double's answer: its mark and the request's size (what it was sent).
fn provider_answer(_system: &str, user: &str) -> String {
    format!(
        "{PROVIDER_MARK}: a haiku for {} bytes of request",
        user.len()
    )
}

/// Change the line `key = …` of a config text (exactly one must exist) to `key = value`.
fn set(text: &str, key: &str, value: &str) -> String {
    let prefix = format!("{key} = ");
    assert_eq!(
        text.lines().filter(|l| l.starts_with(&prefix)).count(),
        1,
        "one `{key}` line in config.toml"
    );
    text.lines()
        .map(|l| {
            if l.starts_with(&prefix) {
                format!("{prefix}{value}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

fn edit_config(dir: &Path, edit: impl FnOnce(String) -> String) {
    let path = dir.join("config.toml");
    let text = std::fs::read_to_string(&path).expect("config");
    std::fs::write(&path, edit(text)).expect("write config");
}

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", procs::text(out)))
}

/// The caller's record of call `id` once its state is one of `states`.
fn wait_state(dir: &Path, id: &str, states: &[&str]) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let rec = json_of(&cli(dir, &["call", "show", id, "--json"]));
        if states.contains(&rec["state"].as_str().unwrap_or("")) {
            return rec;
        }
        assert!(
            Instant::now() < deadline,
            "call {id} not {states:?} within {LIMIT:?}: {rec}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The node's debug log lines that report a DCUtR attempt.
fn hole_punches(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("node.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("hole punch"))
        .map(str::to_owned)
        .collect()
}

/// Behind cone NATs (most home routers) DCUtR can punch a hole; whether it did, the call is
/// answered. On this machine it went direct.
#[test]
fn a_call_between_two_nodes_behind_their_own_nats_runs_through_a_box() {
    if let Some(missing) = missing_capability() {
        skipped("the NAT call test", &missing);
        return;
    }
    let direct = call_through_nats("sbxc", NatKind::Cone);
    println!(
        "NAT call test (cone NATs): {}",
        if direct {
            "hole-punched"
        } else {
            "relayed: the punch failed"
        }
    );
}

/// Behind symmetric NATs no hole punch can work (a new connection gets a new public port): the
/// call falls back to the relay and is answered all the same.
#[test]
fn behind_symmetric_nats_the_call_falls_back_to_the_relay() {
    if let Some(missing) = missing_capability() {
        skipped("the NAT call test (symmetric)", &missing);
        return;
    }
    assert!(
        !call_through_nats("sbxs", NatKind::Symmetric),
        "a hole punched through two symmetric NATs"
    );
}

/// The NAT world in namespaces `<prefix>-*` with routers of `kind`, one call from the caller to
/// the owner's skill found through the index: whether the caller's connection to the owner was
/// direct (hole-punched) when the call had ended, else relayed.
fn call_through_nats(prefix: &str, kind: NatKind) -> bool {
    let started = Instant::now();
    let ns = Namespaces::up_as(prefix, kind);
    let root = tempfile::tempdir().expect("tempdir");
    let root = root.path();

    // The public segment: the provider double (on the segment's loopback), the box, the relay.
    let provider = NsProc::role(
        &ns.public(),
        "nat_call::nat_call_role_process",
        ROLE_ENV,
        "provider",
    );
    let provider_url = provider.wait_line("PROVIDER", Duration::from_secs(60));
    let box_listen = format!("{PUBLIC_IP}:7480");
    let box_data = root.join("box");
    let shown = cli_ok(
        &box_data,
        &[
            "box",
            "--insecure-dev",
            "--listen",
            &box_listen,
            "--show-identity",
        ],
    );
    let box_url = format!("https://{box_listen}");
    // Off loopback a box serves https only; the pin names the URL the nodes accept.
    let pin = shown.replace(
        &format!("\"http://{box_listen}\""),
        &format!("\"{box_url}\""),
    );
    assert!(pin.contains(&box_url), "{shown}");
    let (_box, listening) = start_box(&ns.public(), &box_data, &box_listen, &provider_url);
    assert_eq!(listening, box_url);

    let relay_dir = root.join("relay");
    cli_ok(
        &relay_dir,
        &[
            "init",
            "--api",
            "127.0.0.1:0",
            "--p2p",
            &format!("/ip4/{PUBLIC_IP}/tcp/4001"),
            "--p2p",
            &format!("/ip4/{PUBLIC_IP}/udp/4001/quic-v1"),
        ],
    );
    edit_config(&relay_dir, |t| {
        set(&set(&t, "kad_server", "true"), "relay_server", "true")
    });
    let (_relay, relay_id) = start_node(&ns.public(), &relay_dir, "relay");
    let relay_addr = format!("/ip4/{PUBLIC_IP}/tcp/4001/p2p/{relay_id}");

    // A node behind NAT: dials the relay (bootstrap) and holds a reservation on it, accepts
    // the pinned box, lets it reach the provider double, and hears of skills only by search.
    let behind_nat = |name: &str, host: u8| {
        let dir = root.join(name);
        cli_ok(
            &dir,
            &[
                "init",
                "--api",
                "127.0.0.1:0",
                "--p2p",
                "/ip4/0.0.0.0/tcp/4001",
                "--p2p",
                "/ip4/0.0.0.0/udp/4001/quic-v1",
                "--bootstrap",
                &relay_addr,
            ],
        );
        edit_config(&dir, |t| {
            let t = set(&t, "relays", &format!("[{relay_addr:?}]"));
            let t = set(&t, "accept", &format!("[{box_url:?}]"));
            let t = set(&t, "allow_insecure_dev", "true");
            let t = set(&t, "live_categories", "[]");
            let t = set(&t, "board_sync", "false");
            // The test's "public" addresses are documentation ranges, which the shipped dial
            // policy counts as private: without this the calls could only go relayed.
            let t = set(&t, "dial_private_addresses", "true");
            format!("{t}\n{pin}\n[boxes.provider_hosts]\nopenai = [{provider_url:?}]\n")
        });
        let (node, peer) = start_node(&ns.host(host), &dir, name);
        (dir, node, peer)
    };
    let (owner, _owner_node, owner_id) = behind_nat("owner", 1);
    let (caller, _caller_node, _) = behind_nat("caller", 2);

    let key = skillbox_with(
        &owner,
        &["source", "add", "openai-key", "--secret"],
        &[],
        Some(b"sk-nat-owner\n"),
    );
    assert!(key.status.success(), "{}", procs::text(&key));
    // A skill folder is named as its skill.
    let doc = root.join(SKILL);
    std::fs::create_dir(&doc).expect("skill folder");
    std::fs::write(doc.join("SKILL.md"), skill_doc()).expect("skill doc");
    cli_ok(&owner, &["skill", "add", doc.to_str().expect("utf-8 path")]);
    cli_ok(
        &caller,
        &[
            "source",
            "add",
            "notes",
            "--text",
            "likes short poems",
            "--share",
        ],
    );
    // Nothing has brought the owner's advert to the caller: no live topic, no board sync.
    let board = json_of(&cli(&caller, &["board", "--json"]));
    assert!(
        !board.to_string().contains(&owner_id),
        "the owner reached the caller's board without a search: {board}"
    );

    // The intent searches the index first; the owner's records reach the relay (the only DHT
    // server) once its reservation gave it an address, so ask until the index names it.
    let ready = Instant::now();
    let pick = loop {
        let out = cli(&caller, &["ask", REQUEST, "--json"]);
        if out.status.success() {
            break json_of(&out);
        }
        let said = procs::text(&out);
        assert!(said.contains("no_offered_skill"), "{said}");
        assert!(
            ready.elapsed() < LIMIT,
            "the index never named the owner's skill: {said}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    let found_after = ready.elapsed();
    assert_eq!(pick["skill"], SKILL, "{pick}");
    assert_eq!(pick["peer"], owner_id.as_str(), "{pick}");
    let id = pick["callId"].as_str().expect("callId").to_owned();

    // The shipped policy asks before `notes` leaves: the human says yes at a terminal.
    let parked = wait_state(&caller, &id, &["awaiting_consent", "failed"]);
    assert_eq!(parked["state"], "awaiting_consent", "{parked}");
    let approved = procs::approve_at_terminal(&caller, &id, "", "yes");
    assert!(approved.status.success(), "{}", procs::text(&approved));
    let done = wait_state(&caller, &id, &["answered", "failed"]);
    assert_eq!(done["state"], "answered", "{done}");
    let answer = done["answer"].as_str().unwrap_or("");
    assert!(
        answer.contains(PROVIDER_MARK),
        "not the provider's answer: {done}"
    );
    assert_eq!(done["box"], box_url.as_str(), "{done}");
    let deadline = Instant::now() + LIMIT;
    loop {
        let calls = json_of(&cli(&owner, &["calls", "--json"]));
        let ran = calls["calls"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["role"] == "owner" && c["state"] == "ran");
        if ran {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the owner's call never ran: {calls}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    // The path: the caller's open connections to the owner.
    let peers = json_of(&cli(&caller, &["peers", "--json"]));
    let addrs: Vec<String> = peers["peers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["peer"] == owner_id.as_str())
        .flat_map(|p| p["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    assert!(
        !addrs.is_empty(),
        "the caller is not connected to the owner: {peers}"
    );
    let direct = addrs.iter().find(|a| !a.contains("/p2p-circuit"));
    let path = match direct {
        Some(a) => {
            assert!(
                a.contains(NAT1_PUBLIC_IP),
                "a direct connection reaches the owner at its NAT's public address: {a}"
            );
            format!("direct (hole-punched) over {a}")
        }
        None => format!("relayed over {}", addrs[0]),
    };
    println!(
        "NAT call test ({kind:?}): caller-owner connection after the call: {path}; found through \
         the index after {:.1} s; whole test {:.1} s",
        found_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    for (side, dir) in [("owner", &owner), ("caller", &caller)] {
        for line in hole_punches(dir) {
            println!("NAT call test ({kind:?}): {side}'s DCUtR: {line}");
        }
    }
    direct.is_some()
}

/// The entry point of the role processes the NAT call test starts inside a namespace (with
/// `SKILLBOX_NAT_CALL_ROLE` set); without that variable it has nothing to do.
#[test]
fn nat_call_role_process() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    exit_with_parent();
    match role.as_str() {
        "provider" => {
            let (url, _log) = procs::provider_double_by(provider_answer);
            println!("PROVIDER {url}");
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        other => panic!("unknown role {other}"),
    }
}
