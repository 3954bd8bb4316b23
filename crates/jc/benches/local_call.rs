//! One call end to end through the real box with the embedded model, against llama.cpp's speed
//! for the same token counts: `cargo bench -p skillbox-jc --bench local_call`.
//!
//! The box (its HTTP API on loopback) runs the call with the real `local` provider, open →
//! attest (both parties) → stakes → submits → sealed answer opened → receipt verified. The
//! provider is observed (not replaced) to learn the call's prompt and answer token counts; then
//! `llama-bench` runs on the same file with those counts, and the bench prints how long llama.cpp
//! alone needs for that much work against the whole call. Model from SKILLBOX_MODEL.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use skillbox_jc::client::{StakeInput, open_result, seal_stake, verify_receipt};
use skillbox_jc::dsse::approved_program;
use skillbox_jc::program::*;
use skillbox_jc::run::{BoxConfig, now_secs};
use skillbox_jc::seal::HpkeKeyPair;
use skillbox_providers::local::{LocalOptions, LocalProvider};
use skillbox_providers::{ChatRequest, Provider, Reply, Usage};
use skillbox_testkit::box_fixture::{self, MEASUREMENT, program_between};
use skillbox_testkit::llama_bench;

const THREADS: usize = 2;
/// The box asks for max_bytes / 3 tokens: 128.
const OUTPUT_BYTES: u64 = 384;

/// The real local provider, with the usage of its last answer noted.
struct Observed {
    local: Arc<LocalProvider>,
    last: Mutex<Option<Usage>>,
}

impl Provider for Observed {
    fn complete<'a>(&'a self, request: ChatRequest, key: Option<&'a str>) -> Reply<'a> {
        Box::pin(async move {
            let completion = self.local.complete(request, key).await?;
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(completion.usage.clone());
            Ok(completion)
        })
    }
}

fn program(caller: &SigningKey, owner: &SigningKey, result: &HpkeKeyPair, i: usize) -> Program {
    let base = program_between(caller, owner, result, MEASUREMENT, "bench");
    Program {
        call_id: format!("local-{i}-{}", skillbox_jc::client::new_nonce()),
        caller_inputs: CallerInputs {
            sources: vec![],
            ..base.caller_inputs
        },
        output: OutputSpec::to_caller(OUTPUT_BYTES),
        expires_at: now_secs() + 3600,
        ..base
    }
}

fn main() {
    // `cargo test --benches` runs bench targets with no work to do; only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let Some(model) = std::env::var_os("SKILLBOX_MODEL").map(PathBuf::from) else {
        eprintln!("set SKILLBOX_MODEL to the GGUF (run `skillbox model fetch` first)");
        std::process::exit(1);
    };
    if let Err(e) = llama_bench::binary() {
        eprintln!("{e}");
        std::process::exit(1);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (calls, usage) = rt.block_on(async {
        let local = Arc::new(LocalProvider::with_options(
            model.clone(),
            LocalOptions {
                threads: Some(THREADS),
                ..LocalOptions::default()
            },
        ));
        // Loaded before the clock starts: a box loads it once, at its first local call.
        let started = Instant::now();
        local.model().await.expect("the local model loads");
        println!(
            "local model loaded in {:.2} s",
            started.elapsed().as_secs_f64()
        );
        let observed = Arc::new(Observed {
            local,
            last: Mutex::new(None),
        });
        let f = box_fixture::start_with(observed.clone(), BoxConfig::default()).await;
        let box_fixture::Fixture {
            client,
            caller,
            owner,
            policy,
            ..
        } = &f;
        let request = b"Write a long story about the sea and an old sailor.".to_vec();
        let body = b"You are a storyteller. Answer with a story.".to_vec();

        let mut calls = Vec::new();
        let mut usage = Vec::new();
        for i in 0..3 {
            let result_key = HpkeKeyPair::generate();
            let env = f.approve(&program(caller, owner, &result_key, i));
            let approved = approved_program(&env).expect("approved");
            let t = Instant::now();
            let opened = client.open(&env).await.expect("open");
            // Each party attests the run for itself, then seals its stake to it and submits.
            let attest = async || {
                client
                    .attest(&approved, &opened.run_id, policy)
                    .await
                    .expect("attest")
            };
            let (c_run, o_run) = (attest().await, attest().await);
            for (run, role, key, name, value) in [
                (&c_run, Role::Caller, caller, "request", &request),
                (&o_run, Role::Owner, owner, "body", &body),
            ] {
                let sealed =
                    seal_stake(run, role, vec![StakeInput::bytes(name, value)]).expect("seal");
                client.stake(run, role, sealed, key).await.expect("stake");
            }
            for (role, key) in [(Role::Caller, caller), (Role::Owner, owner)] {
                client
                    .submit(&opened.run_id, &approved.hash, role, key)
                    .await
                    .expect("submit");
            }
            let view = client
                .wait_result(&opened.run_id, Duration::from_secs(600))
                .await
                .expect("result");
            let output = open_result(&view, &result_key, &c_run).expect("open result");
            verify_receipt(&view, &o_run).expect("receipt");
            let elapsed = t.elapsed();
            let u = observed
                .last
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .expect("the provider answered");
            println!(
                "call {i}: {:.3} s end to end, {} prompt + {} answer tokens, {} answer bytes",
                elapsed.as_secs_f64(),
                u.prompt_tokens,
                u.completion_tokens,
                output.answer.len()
            );
            client
                .delete(&opened.run_id, &approved.hash, Role::Caller, caller)
                .await
                .expect("delete");
            calls.push(elapsed);
            usage.push(u);
        }
        (calls, usage)
    });
    // The median call, and llama.cpp on the same file for the same token counts.
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by_key(|&i| calls[i]);
    let mid = order[order.len() / 2];
    let (prompt, answer) = (usage[mid].prompt_tokens, usage[mid].completion_tokens);
    let speeds =
        match llama_bench::measure(&model, THREADS, prompt as usize, answer.max(1) as usize) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        };
    let llama_secs = prompt as f64 / speeds.prefill_tps + answer as f64 / speeds.decode_tps;
    let call_secs = calls[mid].as_secs_f64();
    println!();
    println!(
        "one call through the box, local provider, {THREADS} threads (median of {}):",
        calls.len()
    );
    println!(
        "  box call end to end: {call_secs:.3} s for {prompt} prompt + {answer} answer tokens ({:.1} answer tok/s overall)",
        answer as f64 / call_secs
    );
    println!(
        "  llama.cpp for the same work: {llama_secs:.3} s (llama-bench -t {THREADS} -p {prompt} -n {answer}: prefill {:.1} tok/s, decode {:.1} tok/s)",
        speeds.prefill_tps, speeds.decode_tps
    );
    println!(
        "  ratio (llama.cpp time / box call time): {:.2}x",
        llama_secs / call_secs
    );
}
