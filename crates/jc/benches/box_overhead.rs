//! Box overhead, printed as figures: `cargo bench -p skillbox-jc --bench box_overhead`.
//!
//! 1. Per run, open → result, through the HTTP API on loopback with a zero-latency provider
//!    double: open, attest + verify (both parties), seal + post both stakes, both submits,
//!    fetch, open the answer, verify the receipt.
//! 2. Memory per in-flight run: RSS growth while N runs sit open with both stakes in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use skillbox_jc::attest::{VerifiedRun, VerifyPolicy};
use skillbox_jc::client::{BoxClient, StakeInput, open_result, seal_stake, verify_receipt};
use skillbox_jc::dsse::{ApprovedProgram, Envelope, approved_program, sign_program};
use skillbox_jc::program::*;
use skillbox_jc::run::{BoxConfig, now_secs};
use skillbox_jc::seal::HpkeKeyPair;
use skillbox_testkit::box_fixture::{self, MEASUREMENT, answering, program_between};

fn program(caller: &SigningKey, owner: &SigningKey, result: &HpkeKeyPair, i: usize) -> Program {
    let base = program_between(caller, owner, result, MEASUREMENT, "bench");
    Program {
        call_id: format!("bench-{i}-{}", skillbox_jc::client::new_nonce()),
        caller_inputs: CallerInputs {
            sources: vec![SourceLimit {
                name: "data".into(),
                max_bytes: 4096,
            }],
            ..base.caller_inputs
        },
        output: OutputSpec::to_caller(1024),
        expires_at: now_secs() + 3600,
        ..base
    }
}

/// A fresh program between `caller` and `owner` (`i` in its call id), signed by both: the
/// caller's result key, the envelope and its approval.
fn signed_program(
    caller: &SigningKey,
    owner: &SigningKey,
    i: usize,
) -> (HpkeKeyPair, Envelope, ApprovedProgram) {
    let result_key = HpkeKeyPair::generate();
    let p = program(caller, owner, &result_key, i);
    let mut env = sign_program(&p, caller).expect("sign");
    env.sign(owner).expect("sign");
    let approved = approved_program(&env).expect("approved");
    (result_key, env, approved)
}

/// Both stakes: the caller's request and source sealed to its verified run, the owner's body
/// to its own.
fn stakes(
    caller_run: &VerifiedRun,
    owner_run: &VerifiedRun,
    request: &[u8],
    data: &[u8],
    body: &[u8],
) -> (Vec<u8>, Vec<u8>) {
    let caller = vec![
        StakeInput::bytes("request", request),
        StakeInput::bytes("data", data),
    ];
    let owner = vec![StakeInput::bytes("body", body)];
    (
        seal_stake(caller_run, Role::Caller, caller).expect("seal"),
        seal_stake(owner_run, Role::Owner, owner).expect("seal"),
    )
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    // `cargo test --benches` runs bench targets with no work to do; only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // The box keeps its core: the memory phase reads how many runs are in flight.
        let config = BoxConfig { max_runs: 100_000, ..BoxConfig::default() };
        let core = Arc::new(box_fixture::core_with(answering("answer"), config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(skillbox_jc::server::serve(listener, core.clone()));
        let client = BoxClient::new(&url).expect("client");
        let (caller, owner) = (box_fixture::key(1), box_fixture::key(2));
        let policy = VerifyPolicy::new(true);
        let request = vec![b'r'; 512];
        let data = vec![b'd'; 2048];
        let body = vec![b'b'; 2048];

        let n = 300;
        let mut times = Vec::with_capacity(n);
        for i in 0..n {
            let (result_key, env, approved) = signed_program(&caller, &owner, i);
            let t = Instant::now();
            let opened = client.open(&env).await.expect("open");
            let c_run = client.attest(&approved, &opened.run_id, &policy).await.expect("attest");
            let o_run = client.attest(&approved, &opened.run_id, &policy).await.expect("attest");
            let (cs, os) = stakes(&c_run, &o_run, &request, &data, &body);
            client.stake(&c_run, Role::Caller, cs, &caller).await.expect("stake");
            client.stake(&o_run, Role::Owner, os, &owner).await.expect("stake");
            client.submit(&opened.run_id, &approved.hash, Role::Caller, &caller).await.expect("submit");
            client.submit(&opened.run_id, &approved.hash, Role::Owner, &owner).await.expect("submit");
            let view = client.wait_result(&opened.run_id, Duration::from_secs(10)).await.expect("result");
            open_result(&view, &result_key, &c_run).expect("open result");
            verify_receipt(&view, &o_run).expect("receipt");
            times.push(t.elapsed());
            client.delete(&opened.run_id, &approved.hash, Role::Caller, &caller).await.expect("delete");
        }
        times.sort();
        let mean = times.iter().sum::<Duration>() / n as u32;
        println!("box overhead per run (open -> result, zero-latency provider, loopback HTTP, {n} runs):");
        println!("  p50 {:?}  p99 {:?}  mean {:?}  max {:?}", pct(&times, 0.5), pct(&times, 0.99), mean, times[n - 1]);

        let m = 1000;
        let before = rss_kib();
        let mut keep = Vec::with_capacity(m);
        for i in 0..m {
            let (_, env, approved) = signed_program(&caller, &owner, i);
            let opened = client.open(&env).await.expect("open");
            let run = client.attest(&approved, &opened.run_id, &policy).await.expect("attest");
            let (cs, os) = stakes(&run, &run, &request, &data, &body);
            client.stake(&run, Role::Caller, cs, &caller).await.expect("stake");
            client.stake(&run, Role::Owner, os, &owner).await.expect("stake");
            keep.push(opened.run_id);
        }
        let after = rss_kib();
        println!("memory per in-flight run (open, both stakes in: 512 B request + 2 KiB source + 2 KiB body), {m} runs:");
        println!(
            "  RSS {before} KiB -> {after} KiB, {:.1} KiB per run; runs in flight at the box: {}",
            (after.saturating_sub(before)) as f64 / m as f64,
            core.in_flight()
        );
    });
}
