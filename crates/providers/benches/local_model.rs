//! The embedded model's speed against llama.cpp's on the same GGUF, in the same run, printed as
//! ratios: `cargo bench -p skillbox-providers --bench local_model` (model from SKILLBOX_MODEL or
//! the default data dir; run `skillbox model fetch` first).
//!
//! 1. llama.cpp's `llama-bench -t 2 -p 93 -n 128` (built from the llama-cpp-python 0.3.36
//!    source package on first use, cached under target/llama-bench/; see `skillbox_testkit::llama_bench`).
//! 2. Our engine on the same file with 2 threads: a 93-token chat prompt (prefill) and up to 128
//!    sampled tokens (decode: temperature, top-p, repeat penalty, as the box runs it), measured
//!    twice around the llama-bench run so drift on a shared machine hits both.
//! 3. Four generations at once, batched: their combined decode rate.
//!
//! `SKILLBOX_BENCH_THREADS` changes the thread count of both.
//!
//! `cargo bench -p skillbox-providers --bench local_model -- body` measures only what the owner's
//! body length does to a run's time (review 27 F1): bodies of about 60 and 900 tokens, with and
//! without the box's allowance, the median wall time, prompt time and time per decode step.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use skillbox_providers::ChatRequest;
use skillbox_providers::local::{LocalModel, LocalOptions, MODEL_FILE};
use skillbox_testkit::llama_bench;

const PROMPT_TOKENS: usize = 93;
const GEN_TOKENS: u32 = 128;
const RUNS: u64 = 4;

fn request(user: String, seed: u64) -> ChatRequest {
    ChatRequest {
        system: "You are a helpful assistant.".into(),
        user,
        model: String::new(),
        max_tokens: GEN_TOKENS,
        temperature: 0.7,
        seed: Some(seed),
        system_allowance: None,
        context_tokens: None,
    }
}

/// A story request padded with words until the chat prompt is `want` tokens (or just under).
fn prompt_of(model: &LocalModel, want: usize) -> Result<(String, usize), String> {
    let words = "the sea and a small boat with an old sailor who sings about stars wind rain \
                 fish birds islands and the long road home"
        .split(' ')
        .cycle();
    let mut user = String::from("Write a long story about the sea.");
    let mut best = (user.clone(), 0);
    for word in words.take(200) {
        let len = model
            .prompt_ids("You are a helpful assistant.", &user)
            .map_err(|e| e.to_string())?
            .len();
        if len > want {
            break;
        }
        best = (user.clone(), len);
        if len == want {
            break;
        }
        user.push(' ');
        user.push_str(word);
    }
    Ok(best)
}

#[derive(Default)]
struct Totals {
    prompt_tokens: u64,
    prompt: Duration,
    decoded: usize,
    decode: Duration,
}

fn ours(
    model: &LocalModel,
    user: &str,
    first_seed: u64,
    totals: &mut Totals,
) -> Result<(), String> {
    for seed in first_seed..first_seed + RUNS {
        let (completion, timing) = model
            .generate_timed(&request(user.to_owned(), seed))
            .map_err(|e| e.to_string())?;
        totals.prompt_tokens += completion.usage.prompt_tokens;
        totals.prompt += timing.prompt;
        totals.decoded += timing.decoded_tokens;
        totals.decode += timing.decode;
    }
    Ok(())
}

fn main() -> ExitCode {
    // `cargo test --benches` runs bench targets with no work to do; only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return ExitCode::SUCCESS;
    }
    match bench() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn bench() -> Result<(), String> {
    let path = match std::env::var_os("SKILLBOX_MODEL").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".local/share/skillbox/models")
            .join(MODEL_FILE),
    };
    let threads = std::env::var("SKILLBOX_BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2usize);
    // Built first, so its minutes of compiling do not fall between the measurements.
    if std::env::args().any(|a| a == "body") {
        return body_length(&path, threads);
    }
    llama_bench::binary()?;

    let started = Instant::now();
    let options = LocalOptions {
        threads: Some(threads),
        parallel: 4,
        context: None,
        ..LocalOptions::default()
    };
    let model = LocalModel::load_with(&path, &options).map_err(|e| e.to_string())?;
    println!("local model: {}", path.display());
    println!(
        "load: {:.3} s ({} threads, {} sequences of {} tokens)",
        started.elapsed().as_secs_f64(),
        model.threads(),
        model.parallel(),
        model.context_tokens()
    );
    let (user, prompt_len) = prompt_of(&model, PROMPT_TOKENS)?;
    // Warm-up (page cache, first allocations).
    model
        .generate(&request(user.clone(), 99))
        .map_err(|e| e.to_string())?;
    let sample = model
        .generate(&request(user.clone(), 0))
        .map_err(|e| e.to_string())?;
    let text: String = sample.text.chars().take(160).collect();
    println!("answer (seed 0): {text:?}");

    let mut totals = Totals::default();
    ours(&model, &user, 0, &mut totals)?;
    let llama = llama_bench::measure(&path, threads, prompt_len, GEN_TOKENS as usize)?;
    ours(&model, &user, RUNS, &mut totals)?;
    let prefill = totals.prompt_tokens as f64 / totals.prompt.as_secs_f64();
    let decode = totals.decoded as f64 / totals.decode.as_secs_f64();

    println!();
    println!(
        "same file, {threads} threads, {prompt_len}-token prompt, up to {GEN_TOKENS} tokens decoded:"
    );
    println!(
        "  llama.cpp  llama-bench -t {threads} -p {prompt_len} -n {GEN_TOKENS}: prefill {:7.1} tok/s  decode {:6.1} tok/s",
        llama.prefill_tps, llama.decode_tps
    );
    println!(
        "  skillbox   local provider engine ({} runs):   prefill {prefill:7.1} tok/s  decode {decode:6.1} tok/s ({} tokens)",
        2 * RUNS,
        totals.decoded
    );
    println!(
        "  ratio (skillbox / llama.cpp):                prefill {:7.2}x       decode {:6.2}x",
        prefill / llama.prefill_tps,
        decode / llama.decode_tps
    );

    // Batched: four generations handed over together decode in shared steps.
    let batch: Vec<ChatRequest> = (0..4).map(|s| request(user.clone(), 100 + s)).collect();
    let started = Instant::now();
    let answers = model.generate_many(&batch, &Arc::new(AtomicBool::new(false)));
    let wall = started.elapsed().as_secs_f64();
    let mut tokens = 0;
    for answer in answers {
        tokens += answer.map_err(|e| e.to_string())?.0.usage.completion_tokens;
    }
    println!(
        "  4 generations batched: {tokens} tokens in {wall:.2} s = {:.1} tok/s combined ({:.2}x one stream's decode)",
        tokens as f64 / wall,
        tokens as f64 / wall / decode
    );
    println!("  engine: {:?}", model.stats());
    Ok(())
}

/// The box's allowance: `body_max_tokens` 1024 plus the notice's bytes.
const BOX_ALLOWANCE: usize = 1024 + 300;
const BODY_RUNS: usize = 7;

/// An owner's body of about `tokens` tokens, in plain sentences.
fn body_of(model: &LocalModel, tokens: usize) -> Result<String, String> {
    let mut body = String::from("You are the harbour office's assistant. Answer briefly.");
    while model
        .tokenizer()
        .encode_plain(&body)
        .map_err(|e| e.to_string())?
        .len()
        < tokens
    {
        body.push_str(" The lighthouse keeper writes the tides and the ships in the log.");
    }
    Ok(body)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Review 27 F1: the run's wall time, prompt time and decode-step time for a short and a long
/// body, without an allowance (the prompt as it is) and under the box's (padded to it), runs
/// interleaved so drift on a shared machine hits every row alike.
fn body_length(path: &std::path::Path, threads: usize) -> Result<(), String> {
    let options = LocalOptions {
        threads: Some(threads),
        parallel: 1,
        context: None,
        ..LocalOptions::default()
    };
    let model = LocalModel::load_with(path, &options).map_err(|e| e.to_string())?;
    let bodies = [body_of(&model, 60)?, body_of(&model, 900)?];
    let mut cases = Vec::new();
    for allowance in [None, Some(BOX_ALLOWANCE)] {
        for body in &bodies {
            let request = ChatRequest {
                system: body.clone(),
                user: "Write a long story about the sea.".into(),
                model: String::new(),
                max_tokens: 32,
                temperature: 0.0,
                seed: None,
                system_allowance: allowance,
                context_tokens: None,
            };
            cases.push((
                request,
                Vec::new(),
                Vec::new(),
                Vec::new(),
                Vec::new(),
                0u64,
            ));
        }
    }
    model.generate(&cases[0].0).map_err(|e| e.to_string())?;
    for _ in 0..BODY_RUNS {
        for (request, wall, prompt, step, released, fed) in &mut cases {
            let before = model.stats().prompt_tokens_fed;
            let started = Instant::now();
            let (_, timing) = model.generate_timed(request).map_err(|e| e.to_string())?;
            let took = started.elapsed();
            wall.push(took.as_secs_f64() * 1e3);
            // What a caller sees of the decode: the answer's time after the prompt's work, a
            // step (held under an allowance: R28-1).
            let after_prompt = took.saturating_sub(timing.reference_after.unwrap_or(timing.prompt));
            released.push(after_prompt.as_secs_f64() * 1e3 / timing.decoded_tokens.max(1) as f64);
            prompt.push(timing.prompt.as_secs_f64() * 1e3);
            step.push(timing.decode.as_secs_f64() * 1e3 / timing.decoded_tokens.max(1) as f64);
            *fed = model.stats().prompt_tokens_fed - before;
        }
    }
    println!("body length and run time, {threads} threads, {BODY_RUNS} runs each, medians (ms):");
    for (request, wall, prompt, step, released, fed) in cases {
        let body = model
            .tokenizer()
            .encode_plain(&request.system)
            .map_err(|e| e.to_string())?
            .len();
        println!(
            "  allowance {:>5}  body {body:>4} tokens  fed {fed:>5}  wall {:8.1}  prompt {:8.1}  decode step {:6.2}  released step {:6.2}",
            request
                .system_allowance
                .map_or_else(|| "none".into(), |a| a.to_string()),
            median(wall),
            median(prompt),
            median(step),
            median(released),
        );
    }
    Ok(())
}
