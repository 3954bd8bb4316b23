//! A box under flood (issue 30 item 3), printed as figures: `cargo bench --bench box_flood`.
//!
//! The box runs as a child process (this binary again, with `--child-box`) with the default
//! config, so its peak RSS (`VmHWM`) is its own. An honest client on 127.0.0.1 runs whole calls
//! (open, attest, both stakes, both submits, result) with 4 workers, first alone, then while an
//! attacker on 127.0.0.2 floods the box at full speed: signed opens between fresh keys with the
//! largest stake limits (2 x 64 MiB), and parallel uploads of real 64 MiB sealed stakes into
//! runs it opened. Printed: honest calls answered in each phase, what the attacker got in and
//! what it was refused (by code), and the box's peak RSS.
//!
//! `SKILLBOX_FLOOD_SECS` sets each phase's length (default 15).

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use ed25519_dalek::SigningKey;
use sha2::{Digest, Sha256};
use skillbox_jc::attest::VerifyPolicy;
use skillbox_jc::client::{BoxClient, StakeInput, open_result, seal_stake};
use skillbox_jc::dsse::{Envelope, PartyAction, approved_program, sign_action, sign_program};
use skillbox_jc::program::*;
use skillbox_jc::run::BoxConfig;
use skillbox_jc::seal::HpkeKeyPair;
use skillbox_jc::server::STAKE_ACTION_HEADER;
use skillbox_testkit::box_fixture::{self, MEASUREMENT, answering, program_between};

const CHILD_FLAG: &str = "--child-box";

/// The box: default config, a zero-latency provider double; prints its URL, serves until its
/// stdin closes (the parent gone).
fn child() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let core = Arc::new(box_fixture::core_with(
            answering("answer"),
            BoxConfig::default(),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(skillbox_jc::server::serve(listener, core));
        tokio::task::spawn_blocking(|| {
            let mut sink = [0u8; 64];
            while std::io::stdin()
                .read(&mut sink)
                .map(|n| n > 0)
                .unwrap_or(false)
            {}
        })
        .await
        .expect("stdin watcher");
    });
}

/// The largest body limit a valid program has: the owner's stake also makes room for its day
/// limits (`day::DAY_LIMITS_ENTRY`).
const LARGEST_BODY: u64 = MAX_STAKE_BYTES - 43 - skillbox_jc::day::DayLimits::FRAMED;

fn fresh_key() -> SigningKey {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("random");
    SigningKey::from_bytes(&seed)
}

fn program(
    caller: &SigningKey,
    owner: &SigningKey,
    result: &HpkeKeyPair,
    largest: bool,
) -> Program {
    let (request, sources, body, model) = if largest {
        (MAX_STAKE_BYTES - 18, vec![], LARGEST_BODY, 0)
    } else {
        (
            1024,
            vec![SourceLimit {
                name: "data".into(),
                max_bytes: 4096,
            }],
            4096,
            64,
        )
    };
    let base = program_between(caller, owner, result, MEASUREMENT, "flood");
    Program {
        call_id: format!("flood-{}", skillbox_jc::client::new_nonce()),
        caller_inputs: CallerInputs {
            request_max_bytes: request,
            sources,
        },
        owner_inputs: OwnerInputs {
            body_max_bytes: body,
            model_max_bytes: model,
            key_max_bytes: 0,
            body_max_tokens: None,
            model_context_tokens: None,
        },
        output: OutputSpec::to_caller(1024),
        ..base
    }
}

fn signed(p: &Program, caller: &SigningKey, owner: &SigningKey) -> Envelope {
    let mut env = sign_program(p, caller).expect("sign");
    env.sign(owner).expect("sign");
    env
}

/// One whole honest call; the box's code when it was refused.
async fn honest_call(
    client: &BoxClient,
    caller: &SigningKey,
    owner: &SigningKey,
) -> Result<(), String> {
    let code = |e: skillbox_jc::JcError| match e {
        skillbox_jc::JcError::Remote { code, .. } => code,
        other => other.code().to_owned(),
    };
    let result_key = HpkeKeyPair::generate();
    let env = signed(&program(caller, owner, &result_key, false), caller, owner);
    let approved = approved_program(&env).map_err(code)?;
    let opened = client.open(&env).await.map_err(code)?;
    let run = client
        .attest(&approved, &opened.run_id, &VerifyPolicy::new(true))
        .await
        .map_err(code)?;
    let parties = [
        (
            Role::Caller,
            caller,
            [("request", &b"pick one"[..]), ("data", b"a\nb")],
        ),
        (Role::Owner, owner, [("body", b"be brief"), ("model", b"m")]),
    ];
    for (role, key, inputs) in &parties {
        let inputs = inputs
            .iter()
            .map(|(name, value)| StakeInput::bytes(name, value))
            .collect();
        let sealed = seal_stake(&run, *role, inputs).map_err(code)?;
        client.stake(&run, *role, sealed, key).await.map_err(code)?;
    }
    for (role, key, _) in &parties {
        client
            .submit(&opened.run_id, &approved.hash, *role, key)
            .await
            .map_err(code)?;
    }
    let view = client
        .wait_result(&opened.run_id, Duration::from_secs(30))
        .await
        .map_err(code)?;
    open_result(&view, &result_key, &run).map_err(code)?;
    Ok(())
}

#[derive(Default)]
struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    fn add(&self, what: &str) {
        *self
            .0
            .lock()
            .expect("tally")
            .entry(what.to_owned())
            .or_default() += 1;
    }
    fn show(&self) -> String {
        format!("{:?}", self.0.lock().expect("tally"))
    }
}

/// Honest workers for `secs`: answered calls, refusals by code.
async fn honest(url: &str, secs: Duration) -> (u64, Tally, Duration) {
    let answered = Arc::new(AtomicU64::new(0));
    let tally = Arc::new(Tally::default());
    let worst = Arc::new(Mutex::new(Duration::ZERO));
    let end = Instant::now() + secs;
    let mut workers = Vec::new();
    for w in 0..4u8 {
        let client = BoxClient::new(url).expect("client");
        let (answered, tally, worst) = (answered.clone(), tally.clone(), worst.clone());
        workers.push(tokio::spawn(async move {
            let caller = SigningKey::from_bytes(&[10 + w; 32]);
            let owner = SigningKey::from_bytes(&[20 + w; 32]);
            while Instant::now() < end {
                let t = Instant::now();
                match honest_call(&client, &caller, &owner).await {
                    Ok(()) => {
                        answered.fetch_add(1, Ordering::Relaxed);
                        let took = t.elapsed();
                        let mut worst = worst.lock().expect("worst");
                        *worst = (*worst).max(took);
                    }
                    Err(code) => {
                        tally.add(&code);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    let worst = *worst.lock().expect("worst");
    let tally = Arc::try_unwrap(tally).unwrap_or_default();
    (answered.load(Ordering::Relaxed), tally, worst)
}

/// The attacker's client, from 127.0.0.`n` (the honest client is 127.0.0.1).
fn attacker_http(n: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, n]))
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client")
}

async fn attacker_open(
    http: &reqwest::Client,
    url: &str,
    tally: &Tally,
) -> Option<(Program, String, SigningKey, SigningKey)> {
    let (c, o) = (fresh_key(), fresh_key());
    let p = program(&c, &o, &HpkeKeyPair::generate(), true);
    let env = signed(&p, &c, &o);
    let r = http
        .post(format!("{url}/v1/runs"))
        .header("content-type", "application/json")
        .body(env.to_json())
        .send()
        .await
        .ok()?;
    let status = r.status();
    let v: serde_json::Value = r.json().await.ok()?;
    if status == 201 {
        tally.add("opened");
        Some((p, v["run_id"].as_str()?.to_owned(), c, o))
    } else {
        tally.add(v["error"].as_str().unwrap_or("?"));
        None
    }
}

/// Post `body` as `role`'s stake to `run_id`, signed by `key` over its digest.
#[allow(clippy::too_many_arguments)]
async fn post_stake(
    http: &reqwest::Client,
    url: &str,
    run_id: &str,
    program_hash: &str,
    role: Role,
    key: &SigningKey,
    body: axum::body::Bytes,
    digest: &[u8],
    tally: &Tally,
    sent: &AtomicU64,
) {
    let action = sign_action(
        &PartyAction {
            action: "stake".into(),
            role,
            run_id: run_id.into(),
            program_hash: program_hash.into(),
            stake_sha256: Some(hex::encode(digest)),
        },
        key,
    )
    .expect("sign");
    let len = body.len() as u64;
    let r = http
        .post(format!("{url}/v1/runs/{run_id}/stakes"))
        .header("content-type", "application/octet-stream")
        .header(
            STAKE_ACTION_HEADER,
            base64::engine::general_purpose::STANDARD.encode(action.to_json()),
        )
        .body(body)
        .send()
        .await;
    match r {
        Ok(r) => {
            let status = r.status();
            let v: serde_json::Value = r.json().await.unwrap_or_default();
            let code = v["error"].as_str().unwrap_or("?");
            // Staked, or read whole and then found not to be a seal: the box took the bytes.
            if status == 200 || code == "sealed_invalid" {
                sent.fetch_add(len, Ordering::Relaxed);
            }
            tally.add(if status == 200 { "staked" } else { code });
        }
        // Refused before its body was read: the box answered and closed while it was sent.
        Err(_) => tally.add("closed before the body was read"),
    }
}

/// 64 MiB bodies with a valid signature over their digest, into a run of the attacker's own,
/// as fast as the box takes them: each is read whole before it fails to open as a seal.
async fn attacker_garbage(
    http: &reqwest::Client,
    url: &str,
    garbage: &(axum::body::Bytes, Vec<u8>),
    tally: &Tally,
    sent: &AtomicU64,
    stop: &AtomicBool,
) {
    let Some((p, run_id, c, _)) = attacker_open(http, url, tally).await else {
        tokio::time::sleep(Duration::from_millis(10)).await;
        return;
    };
    let hash = p.hash().expect("hash").to_hex();
    while !stop.load(Ordering::Relaxed) {
        post_stake(
            http,
            url,
            &run_id,
            &hash,
            Role::Caller,
            &c,
            garbage.0.clone(),
            &garbage.1,
            tally,
            sent,
        )
        .await;
    }
}

/// Open with the largest limits and post a real 64 MiB sealed stake for each role: these are
/// held until the run expires.
async fn attacker_sealed(http: &reqwest::Client, url: &str, tally: &Tally, sent: &AtomicU64) {
    let Some((p, run_id, c, o)) = attacker_open(http, url, tally).await else {
        tokio::time::sleep(Duration::from_millis(10)).await;
        return;
    };
    let client = BoxClient::new(url).expect("client");
    let approved = approved_program(&signed(&p, &c, &o)).expect("approved");
    let Ok(run) = client
        .attest(&approved, &run_id, &VerifyPolicy::new(true))
        .await
    else {
        tally.add("attest failed");
        return;
    };
    for (role, key, name, len) in [
        (Role::Caller, &c, "request", MAX_STAKE_BYTES - 18),
        (Role::Owner, &o, "body", LARGEST_BODY),
    ] {
        let run = run.clone();
        let sealed = tokio::task::spawn_blocking(move || {
            let filler = std::io::Read::take(std::io::repeat(b'x'), len);
            seal_stake(
                &run,
                role,
                vec![StakeInput {
                    name: name.into(),
                    len,
                    reader: Box::new(filler),
                }],
            )
            .expect("seal")
        })
        .await
        .expect("seal task");
        let digest = Sha256::digest(&sealed).to_vec();
        let hash = approved.hash.to_hex();
        post_stake(
            http,
            url,
            &run_id,
            &hash,
            role,
            key,
            sealed.into(),
            &digest,
            tally,
            sent,
        )
        .await;
    }
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    if std::env::args().any(|a| a == CHILD_FLAG) {
        return child();
    }
    // `cargo test --benches` runs bench targets with no work to do; only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let secs = Duration::from_secs(
        std::env::var("SKILLBOX_FLOOD_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(15),
    );
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .arg(CHILD_FLAG)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("box child");
    let pid = child.id();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("box url");
    let url = line.trim().to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        println!("box under flood: default BoxConfig (1 GiB stake budget, a quarter per client), zero-latency provider, {} s per phase", secs.as_secs());
        let (alone, refused, worst) = honest(&url, secs).await;
        println!(
            "  honest alone:        {alone} calls answered ({:.1}/s), refused {}, slowest {:?}; box RSS peak so far {} KiB",
            alone as f64 / secs.as_secs_f64(),
            refused.show(),
            worst,
            status_kib(pid, "VmHWM:")
        );
        let stop = Arc::new(AtomicBool::new(false));
        let opens = Arc::new(Tally::default());
        let uploads = Arc::new(Tally::default());
        let sent = Arc::new(AtomicU64::new(0));
        let sealed = Arc::new(Tally::default());
        let sealed_sent = Arc::new(AtomicU64::new(0));
        let mut attackers = Vec::new();
        for _ in 0..2 {
            let (stop, opens, url) = (stop.clone(), opens.clone(), url.clone());
            attackers.push(tokio::spawn(async move {
                let http = attacker_http(2);
                while !stop.load(Ordering::Relaxed) {
                    attacker_open(&http, &url, &opens).await;
                }
            }));
        }
        let garbage = {
            let body = vec![0x41u8; 64 << 20];
            let digest = Sha256::digest(&body).to_vec();
            Arc::new((axum::body::Bytes::from(body), digest))
        };
        for _ in 0..4 {
            let (stop, uploads, url, sent, garbage) = (
                stop.clone(),
                uploads.clone(),
                url.clone(),
                sent.clone(),
                garbage.clone(),
            );
            attackers.push(tokio::spawn(async move {
                let http = attacker_http(3);
                while !stop.load(Ordering::Relaxed) {
                    attacker_garbage(&http, &url, &garbage, &uploads, &sent, &stop).await;
                }
            }));
        }
        {
            let (stop, sealed, url, sent) =
                (stop.clone(), sealed.clone(), url.clone(), sealed_sent.clone());
            attackers.push(tokio::spawn(async move {
                let http = attacker_http(3);
                while !stop.load(Ordering::Relaxed) {
                    attacker_sealed(&http, &url, &sealed, &sent).await;
                }
            }));
        }
        // Let the flood take hold before the honest client starts.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (flooded, refused, worst) = honest(&url, secs).await;
        stop.store(true, Ordering::Relaxed);
        println!(
            "  honest under flood:  {flooded} calls answered ({:.1}/s), refused {}, slowest {:?}",
            flooded as f64 / secs.as_secs_f64(),
            refused.show(),
            worst
        );
        println!(
            "  attacker on 127.0.0.2, signed opens (2 loops, fresh keys, 2 x 64 MiB limits): {}",
            opens.show()
        );
        println!(
            "  attacker on 127.0.0.3, 64 MiB bodies with a valid signature over them (4 loops): {}; {} MiB read by the box",
            uploads.show(),
            sent.load(Ordering::Relaxed) >> 20
        );
        println!(
            "  attacker on 127.0.0.3, real 64 MiB sealed stakes held until expiry (1 loop): {}; {} MiB held",
            sealed.show(),
            sealed_sent.load(Ordering::Relaxed) >> 20
        );
        println!(
            "  box peak RSS (VmHWM) {} KiB; RSS now {} KiB",
            status_kib(pid, "VmHWM:"),
            status_kib(pid, "VmRSS:")
        );
        for a in attackers {
            a.abort();
        }
    });
    // Closing its stdin ends the box; kill it if it lingers.
    drop(child.stdin.take());
    std::thread::sleep(Duration::from_millis(200));
    let _ = child.kill();
    let _ = child.wait();
}
