//! The declared context made true (review 29 R29-3, R29-4): before a box sends a request it
//! judged against the owner's declared model context ([`ChatRequest::remote_admission`]), it
//! asks the server, where the server's API tells it, how much context the model really has, and
//! fails `unavailable` with one fixed message when the declaration is above it.
//!
//! Why: the box's admission keeps the caller's refusal edge off the body's length only while the
//! declared context is no more than the model's. Declared above it, the model refuses (or, worse,
//! cuts silently: OpenRouter's middle-out, Ollama's and older llama-server's truncation) at its own
//! edge, which sits at its context less the real body — the body's length by bisection. The
//! answer here depends on the program and the server only, never on the body or the request, so
//! every request under an over-declared context fails the same way.
//!
//! Where the context comes from, by server:
//! - OpenRouter: `GET {base}/models` (public), the owner's model's `context_length` and
//!   `top_provider.context_length`, the smaller;
//! - Ollama: `POST /api/show` — the Modelfile's `num_ctx` (what the OpenAI-compatible `/v1` the
//!   adapter talks runs with: `/v1` takes no context option) and the model's trained
//!   `*.context_length`, the smaller; without a `num_ctx` the server's default applies, which its
//!   API does not tell, so only the trained context (an upper bound) is held against;
//! - a self-hosted OpenAI-compatible server: vLLM's `GET {base}/models` `max_model_len` of the
//!   model, llama.cpp's `GET /props` `default_generation_settings.n_ctx` (one slot's), the
//!   smaller of those that answer;
//! - OpenAI and Anthropic: no API tells it; a small table of the models known to take less than
//!   the providers' default declaration.
//!
//! A probe carries nothing secret (no key, no prompt; Ollama's is the model's id, which the chat
//! request names anyway), goes only to the adapter's base URL's host (the same locked client), is
//! read with a size limit, and a hostile answer (huge, wrong types, negative or zero numbers)
//! says nothing. A probe that fails (transport, status, not JSON) also says nothing — the call
//! runs as it would without the probe — and is asked again after [`FAILED_TTL`]; an answer is
//! kept [`CACHE_TTL`], at most [`CACHE_ENTRIES`] of them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http::{Endpoint, read_capped_to};
use crate::{ChatRequest, ProviderError};

/// Which API tells a server's real context (see the module's list).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContextSource {
    /// Nothing asked: the declaration is trusted as before.
    #[default]
    Unknown,
    OpenRouter,
    /// The table of known smaller-context OpenAI models.
    OpenAi,
    /// The table of known smaller-context Anthropic models.
    Anthropic,
    Ollama,
    /// vLLM's `/v1/models`, llama.cpp's `/props`.
    SelfHosted,
}

/// The words for a declared context above the one the server reports: fixed, the owner's to
/// fix, the same whatever the body and the request.
pub(crate) const REMOTE_OVER_REAL_CONTEXT: &str = "remote model: the declared model context (the \
     owner's model_context_tokens) is more than the provider says the model takes";

/// The most bytes a probe's answer may take (OpenRouter's whole model list is some hundreds of
/// KiB; a server sending more is broken or hostile).
pub const PROBE_MAX_BYTES: usize = 8 << 20;
/// How long a probe may take: a call waits for it once per [`CACHE_TTL`].
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a probe's answer is believed.
pub const CACHE_TTL: Duration = Duration::from_secs(10 * 60);
/// How long a failed probe is not asked again (calls run as without it meanwhile).
pub const FAILED_TTL: Duration = Duration::from_secs(60);
/// The most (base URL, model) answers kept; past it the oldest goes.
pub const CACHE_ENTRIES: usize = 256;

#[derive(Clone, Copy, Debug)]
struct Known {
    context: Option<u64>,
    until: Instant,
}

/// One adapter's probe of its server and the answers it keeps.
#[derive(Debug, Default)]
pub(crate) struct ContextProbe {
    source: ContextSource,
    known: Mutex<HashMap<(String, String), Known>>,
    /// One probe at a time per adapter: calls arriving together wait for the first one's answer
    /// instead of each asking the server.
    probing: tokio::sync::Mutex<()>,
}

impl ContextProbe {
    pub(crate) fn new(source: ContextSource) -> Self {
        ContextProbe {
            source,
            ..ContextProbe::default()
        }
    }

    /// For a request [`ChatRequest::remote_admission`] judged: `unavailable` when its declared
    /// context is above the model's real one as the server tells it; `Ok` when it is within it
    /// or the server does not say.
    pub(crate) async fn check(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
    ) -> Result<(), ProviderError> {
        let Some(declared) = request.context_tokens else {
            return Ok(());
        };
        let real = match self.source {
            ContextSource::Unknown => None,
            ContextSource::OpenAi => openai_known_context(&request.model),
            ContextSource::Anthropic => anthropic_known_context(&request.model),
            _ => self.real_context(endpoint, &request.model).await,
        };
        match real {
            Some(real) if declared as u64 > real => {
                Err(ProviderError::Unavailable(REMOTE_OVER_REAL_CONTEXT.into()))
            }
            _ => Ok(()),
        }
    }

    /// The model's real context as the server tells it, cached; `None`: it does not say (or the
    /// probe failed).
    async fn real_context(&self, endpoint: &Endpoint, model: &str) -> Option<u64> {
        let key = (endpoint.base().as_str().to_owned(), model.to_owned());
        if let Some(known) = self.cached(&key) {
            return known;
        }
        let _one = self.probing.lock().await;
        if let Some(known) = self.cached(&key) {
            return known;
        }
        let (context, ttl) = match probe(self.source, endpoint, model).await {
            Ok(context) => (context, CACHE_TTL),
            Err(err) => {
                // The probe's failure fails no call: the declaration stands, as before the
                // probe existed. Its kind only (no server text travels in these errors).
                tracing::debug!(kind = %err.failure(), "model context probe failed");
                (None, FAILED_TTL)
            }
        };
        self.remember(key, context, ttl);
        context
    }

    fn cached(&self, key: &(String, String)) -> Option<Option<u64>> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known
            .get(key)
            .filter(|k| k.until > Instant::now())
            .map(|k| k.context)
    }

    fn remember(&self, key: (String, String), context: Option<u64>, ttl: Duration) {
        let now = Instant::now();
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= CACHE_ENTRIES && !known.contains_key(&key) {
            known.retain(|_, k| k.until > now);
            if known.len() >= CACHE_ENTRIES {
                let oldest = known
                    .iter()
                    .min_by_key(|(_, k)| k.until)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    known.remove(&oldest);
                }
            }
        }
        known.insert(
            key,
            Known {
                context,
                until: now + ttl,
            },
        );
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.known.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Asks the server (see the module's list). `Ok(None)`: it answered and does not say.
async fn probe(
    source: ContextSource,
    endpoint: &Endpoint,
    model: &str,
) -> Result<Option<u64>, ProviderError> {
    match source {
        ContextSource::OpenRouter => {
            let models = get_json(endpoint, endpoint.get("models")?).await?;
            Ok(models.and_then(|m| openrouter_context(&m, model)))
        }
        ContextSource::Ollama => {
            let request = endpoint
                .post_at_root("api/show")?
                .json(&json!({"model": model, "name": model}));
            Ok(get_json(endpoint, request)
                .await?
                .and_then(|m| ollama_context(&m)))
        }
        ContextSource::SelfHosted => {
            let vllm = match get_json(endpoint, endpoint.get("models")?).await {
                Ok(m) => Ok(m.and_then(|m| vllm_context(&m, model))),
                Err(e) => Err(e),
            };
            let llama = match get_json(endpoint, endpoint.get_at_root("props")?).await {
                Ok(m) => Ok(m.and_then(|m| llama_server_context(&m))),
                Err(e) => Err(e),
            };
            match (vllm, llama) {
                (Ok(Some(a)), Ok(Some(b))) => Ok(Some(a.min(b))),
                (Ok(Some(a)), _) | (_, Ok(Some(a))) => Ok(Some(a)),
                (Err(e), _) | (_, Err(e)) => Err(e),
                (Ok(None), Ok(None)) => Ok(None),
            }
        }
        ContextSource::Unknown | ContextSource::OpenAi | ContextSource::Anthropic => Ok(None),
    }
}

/// Sends a probe and reads its JSON answer within [`PROBE_MAX_BYTES`]. `Ok(None)`: the server
/// has no such endpoint (404, 405, 501), which says nothing.
async fn get_json(
    endpoint: &Endpoint,
    request: reqwest::RequestBuilder,
) -> Result<Option<Value>, ProviderError> {
    let request = request.timeout(PROBE_TIMEOUT.min(endpoint.options.timeout));
    let secs = PROBE_TIMEOUT.as_secs().max(1);
    let response = match endpoint.send(request).await {
        Ok(r) => r,
        Err(ProviderError::Upstream {
            status: 404 | 405 | 501,
        }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let bytes = read_capped_to(response, PROBE_MAX_BYTES, secs).await?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| crate::http::json_error("model context probe", &e))
}

/// A positive whole number, else nothing (a string, a float, a negative, zero, an object).
fn count(value: Option<&Value>) -> Option<u64> {
    value.and_then(Value::as_u64).filter(|n| *n > 0)
}

/// The smaller of two counts that are there.
fn smaller(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// OpenRouter's `GET /models`: the entry whose `id` is `model` (else, for a routing variant
/// such as `:nitro` that the list does not name, the id without it), the smaller of its
/// `context_length` and `top_provider.context_length`.
pub fn openrouter_context(models: &Value, model: &str) -> Option<u64> {
    let data = models.get("data")?.as_array()?;
    let find = |id: &str| {
        data.iter()
            .find(|m| m.get("id").and_then(Value::as_str) == Some(id))
    };
    let entry = find(model).or_else(|| find(model.rsplit_once(':')?.0))?;
    smaller(
        count(entry.get("context_length")),
        count(entry.pointer("/top_provider/context_length")),
    )
}

/// vLLM's `GET /v1/models`: the entry whose `id` is `model`, its `max_model_len`.
pub fn vllm_context(models: &Value, model: &str) -> Option<u64> {
    let entry = models
        .get("data")?
        .as_array()?
        .iter()
        .find(|m| m.get("id").and_then(Value::as_str) == Some(model))?;
    count(entry.get("max_model_len"))
}

/// llama.cpp's `GET /props`: `default_generation_settings.n_ctx`, one slot's context (a server
/// started `-c 4096 -np 4` without a unified KV cache gives each request 1,024).
pub fn llama_server_context(props: &Value) -> Option<u64> {
    count(props.pointer("/default_generation_settings/n_ctx"))
}

/// Ollama's `POST /api/show`: the Modelfile's `num_ctx` (its `parameters` text, one
/// `name value` a line) and the trained `<arch>.context_length` of `model_info`, the smaller.
pub fn ollama_context(show: &Value) -> Option<u64> {
    let num_ctx = show
        .get("parameters")
        .and_then(Value::as_str)
        .and_then(|text| {
            text.lines().find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("num_ctx"))
                    .then(|| words.next()?.parse::<u64>().ok())
                    .flatten()
                    .filter(|n| *n > 0)
            })
        });
    let trained = show
        .get("model_info")
        .and_then(Value::as_object)
        .and_then(|info| {
            info.iter()
                .filter(|(k, _)| k.ends_with(".context_length"))
                .filter_map(|(_, v)| count(Some(v)))
                .min()
        });
    smaller(num_ctx, trained)
}

/// OpenAI models known to take less than the default declaration (128,000): their context.
/// A fine-tune (`ft:<base>:...`) is its base model's.
pub fn openai_known_context(model: &str) -> Option<u64> {
    let base = match model.strip_prefix("ft:") {
        Some(rest) => rest.split(':').next().unwrap_or(rest),
        None => model,
    };
    match base {
        "gpt-4" | "gpt-4-0613" | "gpt-4-0314" => Some(8_192),
        "gpt-4-32k" | "gpt-4-32k-0613" | "gpt-4-32k-0314" => Some(32_768),
        "gpt-3.5-turbo"
        | "gpt-3.5-turbo-0125"
        | "gpt-3.5-turbo-1106"
        | "gpt-3.5-turbo-16k"
        | "gpt-3.5-turbo-16k-0613" => Some(16_385),
        // The older snapshots and the instruct model, and any other of the family: the smallest.
        m if m.starts_with("gpt-3.5-turbo") => Some(4_096),
        _ => None,
    }
}

/// Anthropic models known to take less than the default declaration (128,000): their context.
pub fn anthropic_known_context(model: &str) -> Option<u64> {
    match model {
        "claude-2.0" | "claude-instant-1.2" | "claude-instant-1.1" | "claude-instant-1.0" => {
            Some(100_000)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openrouter_reads_the_owners_model_and_the_smaller_context() {
        let models = json!({"data": [
            {"id": "meta-llama/llama-3-8b-instruct", "context_length": 8192,
             "top_provider": {"context_length": 8192}},
            {"id": "big/model", "context_length": 131072,
             "top_provider": {"context_length": 32768}},
            {"id": "only/top", "top_provider": {"context_length": 4096}},
        ]});
        assert_eq!(
            openrouter_context(&models, "meta-llama/llama-3-8b-instruct"),
            Some(8192)
        );
        assert_eq!(openrouter_context(&models, "big/model"), Some(32_768));
        assert_eq!(openrouter_context(&models, "big/model:nitro"), Some(32_768));
        assert_eq!(openrouter_context(&models, "only/top"), Some(4096));
        assert_eq!(openrouter_context(&models, "not/listed"), None);
    }

    #[test]
    fn hostile_answers_say_nothing_and_never_panic() {
        for value in [
            json!(null),
            json!([1, 2]),
            json!({"data": "x"}),
            json!({"data": [{"id": 5, "context_length": 8192}]}),
            json!({"data": [{"id": "m", "context_length": -8192}]}),
            json!({"data": [{"id": "m", "context_length": "8192"}]}),
            json!({"data": [{"id": "m", "context_length": 8192.5}]}),
            json!({"data": [{"id": "m", "context_length": 0}]}),
            json!({"data": [{"id": "m", "context_length": {"n": 1}, "top_provider": []}]}),
            json!({"data": [{"id": "m", "context_length": 1e300}]}),
        ] {
            assert_eq!(openrouter_context(&value, "m"), None, "{value}");
            assert_eq!(vllm_context(&value, "m"), None, "{value}");
            assert_eq!(llama_server_context(&value), None, "{value}");
            assert_eq!(ollama_context(&value), None, "{value}");
        }
        assert_eq!(
            llama_server_context(&json!({"default_generation_settings": {"n_ctx": -1}})),
            None
        );
        assert_eq!(
            ollama_context(
                &json!({"parameters": "num_ctx -5\nnum_ctx x", "model_info": {"llama.context_length": "8192"}})
            ),
            None
        );
    }

    #[test]
    fn self_hosted_and_ollama_answers() {
        let vllm = json!({"object": "list", "data": [
            {"id": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": 32768},
            {"id": "other", "max_model_len": 4096},
        ]});
        assert_eq!(
            vllm_context(&vllm, "Qwen/Qwen2.5-7B-Instruct"),
            Some(32_768)
        );
        assert_eq!(vllm_context(&vllm, "missing"), None);
        let props = json!({"default_generation_settings": {"n_ctx": 1024, "params": {}},
                           "total_slots": 4});
        assert_eq!(llama_server_context(&props), Some(1024));
        let show = json!({
            "parameters": "stop \"<|eot_id|>\"\nnum_ctx                        8192",
            "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
        });
        assert_eq!(ollama_context(&show), Some(8192));
        // No Modelfile num_ctx: the trained context is the bound held against.
        let show = json!({"model_info": {"llama.context_length": 131072}});
        assert_eq!(ollama_context(&show), Some(131_072));
        // A num_ctx above the trained context: the server clamps it.
        let show = json!({"parameters": "num_ctx 262144",
                          "model_info": {"qwen2.context_length": 32768}});
        assert_eq!(ollama_context(&show), Some(32_768));
    }

    #[test]
    fn known_smaller_models() {
        for (model, want) in [
            ("gpt-4", Some(8_192)),
            ("gpt-4-0613", Some(8_192)),
            ("gpt-4-0314", Some(8_192)),
            ("gpt-3.5-turbo", Some(16_385)),
            ("gpt-3.5-turbo-0613", Some(4_096)),
            ("gpt-3.5-turbo-instruct", Some(4_096)),
            ("ft:gpt-3.5-turbo-0125:acme::abc", Some(16_385)),
            ("ft:gpt-4-0613:acme::abc", Some(8_192)),
            ("gpt-4o", None),
            ("gpt-4-turbo", None),
            ("gpt-4.1", None),
        ] {
            assert_eq!(openai_known_context(model), want, "{model}");
        }
        assert_eq!(anthropic_known_context("claude-2.0"), Some(100_000));
        assert_eq!(anthropic_known_context("claude-sonnet-4-5"), None);
    }

    #[test]
    fn the_cache_is_bounded_and_forgets() {
        let p = ContextProbe::new(ContextSource::OpenRouter);
        for i in 0..CACHE_ENTRIES + 10 {
            p.remember(("b".into(), format!("m{i}")), Some(i as u64), CACHE_TTL);
        }
        assert_eq!(p.len(), CACHE_ENTRIES);
        // The newest stays, the oldest went.
        let last = format!("m{}", CACHE_ENTRIES + 9);
        assert_eq!(
            p.cached(&("b".into(), last)),
            Some(Some((CACHE_ENTRIES + 9) as u64))
        );
        assert_eq!(p.cached(&("b".into(), "m0".into())), None);
        // An expired answer is asked again.
        p.remember(("b".into(), "gone".into()), Some(1), Duration::ZERO);
        assert_eq!(p.cached(&("b".into(), "gone".into())), None);
    }
}
