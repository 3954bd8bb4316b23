//! The embedded model's speed: load time, prompt (prefill) tokens/s and decode tokens/s.
//! `cargo bench -p skillbox-providers --bench local_model` (model from SKILLBOX_MODEL or the
//! default data dir; run `skillbox model fetch` first).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use skillbox_providers::ChatRequest;
use skillbox_providers::local::{LocalModel, MODEL_FILE};

fn main() -> ExitCode {
    let path = match std::env::var_os("SKILLBOX_MODEL").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".local/share/skillbox/models")
            .join(MODEL_FILE),
    };
    let started = Instant::now();
    let model = match LocalModel::load(&path) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let load = started.elapsed();
    println!("local model: {}", path.display());
    println!("load: {:.3} s", load.as_secs_f64());

    let request = ChatRequest {
        system: "You are a helpful assistant.".into(),
        user: "Explain in a few sentences why the sky is blue.".into(),
        model: String::new(),
        max_tokens: 128,
        temperature: 0.7,
        seed: Some(1),
    };
    let runs = 3;
    let (mut prompt_tokens, mut prompt_secs, mut decoded, mut decode_secs) =
        (0u64, 0f64, 0usize, 0f64);
    for run in 0..runs {
        let mut r = request.clone();
        r.seed = Some(run);
        match model.generate_timed(&r) {
            Ok((completion, timing)) => {
                if run == 0 {
                    // A look at the answer, to see the model and tokenizer are sane.
                    let text: String = completion.text.chars().take(200).collect();
                    println!("answer (seed 0): {text:?}");
                }
                prompt_tokens += completion.usage.prompt_tokens;
                prompt_secs += timing.prompt.as_secs_f64();
                decoded += timing.decoded_tokens;
                decode_secs += timing.decode.as_secs_f64();
            }
            Err(e) => {
                eprintln!("generation failed: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "prefill: {:.1} tokens/s ({} prompt tokens over {runs} runs)",
        prompt_tokens as f64 / prompt_secs,
        prompt_tokens
    );
    println!(
        "decode: {:.1} tokens/s ({} tokens over {runs} runs, max 128 each)",
        decoded as f64 / decode_secs,
        decoded
    );
    ExitCode::SUCCESS
}
