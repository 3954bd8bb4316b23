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
//! - OpenRouter: `GET {base}/models/{author}/{slug}/endpoints` (public), the **smallest** of the
//!   model's endpoints' `context_length` (and `max_prompt_tokens`): OpenRouter load-balances a
//!   model across its endpoints, whose contexts differ, and `allow_fallbacks: false` does not
//!   stop that (review 30 R30-3), so a declaration is held against every endpoint a request may
//!   be drawn to;
//! - Ollama: `POST /api/show` — the Modelfile's `num_ctx` (what the OpenAI-compatible `/v1` the
//!   adapter talks runs with: `/v1` takes no context option) and the model's trained
//!   `*.context_length` — and `GET /api/ps`, the loaded model's `context_length` (newer servers:
//!   without a `num_ctx` the context is the one the server picks when it loads the model,
//!   which only a loaded model shows), the smallest. Without a `num_ctx` the probe first loads
//!   the model as the chat would (`POST /api/generate` with the model's name only: no prompt,
//!   no options, no keep-alive), so `/api/ps` shows the context the chat is about to run with,
//!   whether the model was unloaded (its keep-alive passed, the box just started) or loaded
//!   with other options (review 32 R32-10). When even then no context shows (the load failed,
//!   a server before 0.9.7, `OLLAMA_KEEP_ALIVE=0`), the trained context is only an upper bound:
//!   believed [`ProbeTimes::retry`], never taken for the context `/api/ps` told before, which
//!   stands against it for [`ProbeTimes::stale`] (review 31 R31-8), and alone it fails every
//!   judged call with [`REMOTE_CONTEXT_UNSHOWN`];
//! - a self-hosted OpenAI-compatible server: vLLM's `GET {base}/models` `max_model_len` of the
//!   model, llama.cpp's `GET /props` `default_generation_settings.n_ctx` (one slot's), the
//!   smaller of those that answer; a vLLM run with `--api-key` guards `/v1` only, so when
//!   `/models` refuses the keyless probe its `POST /tokenize` (outside `/v1`) is read for
//!   `max_model_len`;
//! - OpenAI and Anthropic: no API tells it; a small table of the models known to take less than
//!   the providers' default declaration.
//!
//! A probe carries nothing secret (no key, no prompt; Ollama's and vLLM's name the model's id,
//! which the chat request names anyway, and vLLM's `/tokenize` a fixed one-letter text; the
//! only work it asks of a server is Ollama's load, which the chat would do), goes
//! only to the adapter's base URL's host (the same locked client), is read with a size limit,
//! and a hostile answer (huge, wrong types, negative or zero numbers) says nothing.
//!
//! What a probe that does not tell a context means (review 30 R30-4):
//! - the last context a server told stands through later probes that fail, do not say or tell
//!   only an upper bound, for [`ProbeTimes::stale`] (24 h) after it was read (stale-if-error):
//!   a caller who waits for a failed probe, or for an Ollama model to unload, does not get the
//!   bare declaration;
//! - never told (or longer ago than that): Ollama's trained context alone (an upper bound)
//!   fails every judged call `unavailable` with [`REMOTE_CONTEXT_UNSHOWN`] (review 32 R32-10:
//!   held against it, a caller calling only after each keep-alive unload met the bound a day
//!   after the last context told, and from the box's start); a server that refuses the
//!   keyless probe (HTTP 401/403) fails every judged call `unavailable` with
//!   [`REMOTE_CONTEXT_REFUSED`] (the box never sends the key there; the owner opens the read
//!   or serves without a key; a hosted
//!   OpenAI-compatible API behind a key — Groq, Together, DeepSeek — is never checked, so it
//!   serves no judged call: review 31 R31-12), and a failed read of OpenRouter's (public, and
//!   up whenever its chat is) fails it with [`REMOTE_CONTEXT_UNREAD`]; a list that does not
//!   name the model (a model OpenRouter does not route, whose chat fails anyway), and a
//!   self-hosted server or Ollama that fails or does not say, leave the owner's declaration as
//!   the only word, as before.
//!
//! Findings are kept per (base URL, model): a context [`ProbeTimes::fresh`] (10 min), anything
//! else [`ProbeTimes::retry`] (60 s), at most [`CACHE_ENTRIES`] of them.

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
    /// vLLM's `/v1/models` (or `/tokenize`), llama.cpp's `/props`: every `openai-compatible:<id>`,
    /// a hosted API behind a key too (Groq, Together, DeepSeek, …), which refuses these reads
    /// (review 31 R31-12: see [`REMOTE_CONTEXT_REFUSED`]).
    SelfHosted,
}

/// The words for a declared context above the one the server reports: fixed, the owner's to
/// fix, the same whatever the body and the request.
pub(crate) const REMOTE_OVER_REAL_CONTEXT: &str = "remote model: the declared model context (the \
     owner's model_context_tokens) is more than the provider says the model takes";

/// The words for a server that refuses the keyless context probe (HTTP 401/403) and never told
/// a context: fixed, the owner's to fix, naming what each kind of server's owner can do (review
/// 31 R31-12). A hosted OpenAI-compatible API behind a key reads nothing without it, and no
/// declaration of the owner's — the model's documented context included — runs unchecked: the
/// box cannot tell a true one from one above the model's, which reopens the body's length to a
/// caller bisecting its request (R29-3). Only the box's log carries these words (the caller and
/// the owner get the closed code `unavailable`); the module's warning says them once per
/// refusal.
pub(crate) const REMOTE_CONTEXT_REFUSED: &str = "remote model: the server refuses the box's \
     keyless read of the model's context (HTTP 401/403; the box never sends the owner's key \
     there), so the declared model context cannot be checked and every judged call fails \
     unavailable: a self-hosted server's owner opens that read (vLLM /tokenize, llama.cpp \
     /props) or serves the model without a key; a hosted API that reads nothing without a key \
     (Groq, Together, DeepSeek, ...) cannot be checked at all, whatever model context is \
     declared: reach the model through openrouter, whose model contexts the box reads, or \
     serve it on a server of the owner's";

/// The words for OpenRouter's context read failing before it ever told one: fixed, the same
/// for every request, and gone when the read answers.
pub(crate) const REMOTE_CONTEXT_UNREAD: &str = "remote model: the provider's list of the \
     model's endpoints could not be read, so the declared model context (the owner's \
     model_context_tokens) cannot be checked; try again later";

/// The words for an Ollama model without a Modelfile `num_ctx` whose loaded context `/api/ps`
/// does not show even after the probe loaded it, and that told none within the stale time:
/// fixed, the owner's to fix (review 32 R32-10). The trained context is only an upper bound of
/// the one the server runs the model with, which the server decides at load, so no declaration
/// can be shown to fit it.
pub(crate) const REMOTE_CONTEXT_UNSHOWN: &str = "remote model: Ollama does not show the \
     context it runs the model with (no num_ctx in the model's Modelfile, and /api/ps lists no \
     context for it after the box loaded it), so the declared model context cannot be checked \
     and every judged call fails unavailable: set num_ctx in the model's Modelfile (ollama \
     create), or run Ollama 0.9.7 or later with a keep-alive above 0; a model that failed to \
     load is tried again within a minute";

/// The most bytes a probe's answer may take (OpenRouter's whole model list is some hundreds of
/// KiB; a server sending more is broken or hostile).
pub const PROBE_MAX_BYTES: usize = 8 << 20;
/// How long a probe may take: a call waits for it once per [`ProbeTimes::fresh`].
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The most (base URL, model) findings kept; past it the oldest goes.
pub const CACHE_ENTRIES: usize = 256;

/// How long a probe's findings are believed: the adapter's constructor takes them
/// (`OpenAiOptions::context_times`), [`ProbeTimes::default`] the box's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeTimes {
    /// A context the server told is believed this long before it is asked again (10 min).
    pub fresh: Duration,
    /// Any other finding — does not say, refused, failed, or an upper bound only — is believed
    /// this long before it is asked again (60 s).
    pub retry: Duration,
    /// The last context the server told stands this long after it was read through later
    /// probes that do not tell one (24 h).
    pub stale: Duration,
}

impl Default for ProbeTimes {
    fn default() -> Self {
        ProbeTimes {
            fresh: Duration::from_secs(10 * 60),
            retry: Duration::from_secs(60),
            stale: Duration::from_secs(24 * 60 * 60),
        }
    }
}

/// What one probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finding {
    /// The model's context as the server tells it, believed for the given time.
    Context(u64, Duration),
    /// A number the model's context is at most, not the context itself: Ollama's trained
    /// context when no Modelfile `num_ctx` sets it and no loaded model shows the one the server
    /// runs it with (review 31 R31-8). It bounds a context told but never replaces one, and
    /// alone it shows no declaration fits (review 32 R32-10).
    UpperBound(u64),
    /// The server answered and does not say (no such route, the model not listed, no usable
    /// number).
    Silent,
    /// The server refused the keyless probe (HTTP 401/403).
    Refused,
    /// The probe failed (transport, timeout, another status, not JSON, too large).
    Failed,
}

/// What a judged request meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// The model's context: a declaration above it fails.
    Holds(u64),
    /// Nothing read that a declaration can be held against, and the call fails with these
    /// words.
    Closed(&'static str),
    /// Nothing read: the declaration stands.
    Open,
}

#[derive(Clone, Copy, Debug)]
struct Known {
    finding: Finding,
    /// Not asked again before.
    until: Instant,
    /// The last context told, and when it was read.
    told: Option<(u64, Instant)>,
}

impl Known {
    fn verdict(&self, source: ContextSource, times: &ProbeTimes, now: Instant) -> Verdict {
        let told = self
            .told
            .filter(|(_, at)| now.saturating_duration_since(*at) < times.stale)
            .map(|(n, _)| n);
        match (self.finding, told) {
            (Finding::Context(n, _), _) => Verdict::Holds(n),
            // An upper bound is below what a told context says only when the server's model
            // changed (a smaller one pulled under the name): the smaller of the two holds.
            (Finding::UpperBound(bound), Some(n)) => Verdict::Holds(n.min(bound)),
            // The trained context alone says nothing of the one the model runs with (a
            // server's default may be 2,048 under a trained 131,072): held against it, a
            // declaration above the real context passed (review 32 R32-10).
            (Finding::UpperBound(_), None) => Verdict::Closed(REMOTE_CONTEXT_UNSHOWN),
            (_, Some(n)) => Verdict::Holds(n),
            (Finding::Refused, None) => Verdict::Closed(REMOTE_CONTEXT_REFUSED),
            (Finding::Failed, None) if source == ContextSource::OpenRouter => {
                Verdict::Closed(REMOTE_CONTEXT_UNREAD)
            }
            _ => Verdict::Open,
        }
    }
}

/// One adapter's probe of its server and the findings it keeps.
#[derive(Debug, Default)]
pub(crate) struct ContextProbe {
    source: ContextSource,
    times: ProbeTimes,
    known: Mutex<HashMap<(String, String), Known>>,
    /// One probe at a time per adapter: calls arriving together wait for the first one's answer
    /// instead of each asking the server.
    probing: tokio::sync::Mutex<()>,
}

impl ContextProbe {
    pub(crate) fn new(source: ContextSource, times: ProbeTimes) -> Self {
        ContextProbe {
            source,
            times,
            ..ContextProbe::default()
        }
    }

    /// For a request [`ChatRequest::remote_admission`] judged: `unavailable` when its declared
    /// context is above the model's real one as the server tells it (or told it within
    /// [`ProbeTimes::stale`]), or when the server is one that must tell and did not (see the
    /// module's doc); `Ok` when it is within it or the server does not say.
    pub(crate) async fn check(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
    ) -> Result<(), ProviderError> {
        let Some(declared) = request.context_tokens else {
            return Ok(());
        };
        let known = |n: Option<u64>| n.map_or(Verdict::Open, Verdict::Holds);
        let verdict = match self.source {
            ContextSource::Unknown => Verdict::Open,
            ContextSource::OpenAi => known(openai_known_context(&request.model)),
            ContextSource::Anthropic => known(anthropic_known_context(&request.model)),
            _ => self.real_context(endpoint, &request.model).await,
        };
        match verdict {
            Verdict::Holds(real) if declared as u64 > real => {
                Err(ProviderError::Unavailable(REMOTE_OVER_REAL_CONTEXT.into()))
            }
            Verdict::Closed(words) => Err(ProviderError::Unavailable(words.into())),
            _ => Ok(()),
        }
    }

    /// What the server tells of the model's context, from the findings kept or a new probe.
    async fn real_context(&self, endpoint: &Endpoint, model: &str) -> Verdict {
        let key = (endpoint.base().as_str().to_owned(), model.to_owned());
        if let Some(known) = self.believed(&key) {
            return known.verdict(self.source, &self.times, Instant::now());
        }
        let _one = self.probing.lock().await;
        if let Some(known) = self.believed(&key) {
            return known.verdict(self.source, &self.times, Instant::now());
        }
        let finding = probe(self.source, endpoint, model, &self.times).await;
        self.remember(key, finding)
            .verdict(self.source, &self.times, Instant::now())
    }

    /// The findings for `key` while they are believed.
    fn believed(&self, key: &(String, String)) -> Option<Known> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.get(key).filter(|k| k.until > Instant::now()).copied()
    }

    /// Keeps `finding` for `key`, with the last context told before it unless it tells a new
    /// one.
    fn remember(&self, key: (String, String), finding: Finding) -> Known {
        let now = Instant::now();
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let before = known.get(&key).copied();
        if finding == Finding::Refused && before.is_none_or(|k| k.finding != Finding::Refused) {
            // Once per refusal, not per call: the owner's to fix, and judged calls fail
            // `unavailable` meanwhile unless a context was told within the stale time.
            tracing::warn!("{REMOTE_CONTEXT_REFUSED}");
        } else if matches!(finding, Finding::UpperBound(_))
            && before.is_none_or(|k| !matches!(k.finding, Finding::UpperBound(_)))
            && before
                .and_then(|k| k.told)
                .is_none_or(|(_, at)| now.saturating_duration_since(at) >= self.times.stale)
        {
            // Once per spell, as for a refusal: judged calls fail `unavailable` until the
            // model shows its context.
            tracing::warn!("{REMOTE_CONTEXT_UNSHOWN}");
        } else if finding == Finding::Failed {
            // Its kind only was read; no server text travels in these findings.
            tracing::debug!("model context probe failed");
        }
        // Only a context told replaces the one told before: an upper bound (R31-8), a silence,
        // a refusal or a failure keeps it, and it stands for the stale time after it was read.
        let (told, ttl) = match finding {
            Finding::Context(n, ttl) => (Some((n, now)), ttl),
            _ => (before.and_then(|k| k.told), self.times.retry),
        };
        if known.len() >= CACHE_ENTRIES && before.is_none() {
            let oldest = known
                .iter()
                .min_by_key(|(_, k)| k.until)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                known.remove(&oldest);
            }
        }
        // A time too large for the clock (an option set to `Duration::MAX`) is a year.
        let year = Duration::from_secs(365 * 24 * 60 * 60);
        let entry = Known {
            finding,
            until: now.checked_add(ttl).unwrap_or(now + year),
            told,
        };
        known.insert(key, entry);
        entry
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.known.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// What one read found: a context from `read` of the answer, else why not.
fn finding(
    answer: Result<Option<Value>, ProviderError>,
    read: impl FnOnce(&Value) -> Option<u64>,
    fresh: Duration,
) -> Finding {
    match answer {
        Ok(Some(value)) => read(&value).map_or(Finding::Silent, |n| Finding::Context(n, fresh)),
        Ok(None) => Finding::Silent,
        Err(ProviderError::Unauthorized { .. }) => Finding::Refused,
        Err(_) => Finding::Failed,
    }
}

/// Several reads of one server: the smallest context told (believed the shortest time), else a
/// refusal, else a failure, else silence.
fn combine(findings: &[Finding]) -> Finding {
    let told = findings
        .iter()
        .filter_map(|f| match f {
            Finding::Context(n, ttl) => Some((*n, *ttl)),
            _ => None,
        })
        .reduce(|(a, at), (b, bt)| (a.min(b), at.min(bt)));
    if let Some((n, ttl)) = told {
        Finding::Context(n, ttl)
    } else if findings.contains(&Finding::Refused) {
        Finding::Refused
    } else if findings.contains(&Finding::Failed) {
        Finding::Failed
    } else {
        Finding::Silent
    }
}

/// Asks the server (see the module's list).
async fn probe(
    source: ContextSource,
    endpoint: &Endpoint,
    model: &str,
    times: &ProbeTimes,
) -> Finding {
    let fresh = times.fresh;
    match source {
        ContextSource::OpenRouter => {
            let mut found = Finding::Silent;
            // The id as named, then a routing variant (`:nitro`) without its suffix.
            let ids = std::iter::once(model).chain(model.rsplit_once(':').map(|(id, _)| id));
            for id in ids {
                let Some(path) = openrouter_endpoints_path(id) else {
                    continue;
                };
                found = finding(
                    get_json(endpoint, endpoint.get(&path), PROBE_TIMEOUT).await,
                    openrouter_endpoints_context,
                    fresh,
                );
                if found != Finding::Silent {
                    break;
                }
            }
            found
        }
        ContextSource::Ollama => {
            let show = endpoint
                .post_at_root("api/show")
                .map(|r| r.json(&json!({"model": model, "name": model})));
            let show = get_json(endpoint, show, PROBE_TIMEOUT).await;
            // Without a Modelfile `num_ctx` the context the chat runs with is decided when the
            // model loads (`OLLAMA_CONTEXT_LENGTH`, else the server's default: 2,048 or 4,096,
            // or on newer servers a tier of the GPU's memory, lowered when the load runs out
            // of it), and only `/api/ps` of the loaded model shows it. So the probe loads the
            // model as the chat about to follow would — no prompt, no options, no keep-alive:
            // the runner the chat will use, an already loaded one's keep-alive untouched — and
            // reads `/api/ps` after it (review 32 R32-10: else a caller calling only after the
            // keep-alive unloaded the model met the trained context alone, once no context
            // had been told for a day, or from the box's start).
            let has_num_ctx = matches!(&show, Ok(Some(s)) if ollama_num_ctx(s).is_some());
            if !has_num_ctx && matches!(&show, Ok(Some(_))) {
                let load = endpoint
                    .post_at_root("api/generate")
                    .map(|r| r.json(&json!({"model": model, "stream": false})));
                // A load takes as long as the chat's would (the chat's time limit); a failed
                // one shows in `/api/ps`, which then lists no context.
                if get_json(endpoint, load, endpoint.options.timeout)
                    .await
                    .is_err()
                {
                    tracing::debug!("model load for the context probe failed");
                }
            }
            let show = finding(show, ollama_context, fresh);
            let ps = finding(
                get_json(endpoint, endpoint.get_at_root("api/ps"), PROBE_TIMEOUT).await,
                |ps| ollama_loaded_context(ps, model),
                fresh,
            );
            match combine(&[show, ps]) {
                // The trained context only (the load failed, the server is older than 0.9.7
                // and lists no context, or unloads at once: `OLLAMA_KEEP_ALIVE=0`): an upper
                // bound of the context the model runs with, never taken for one (review 31
                // R31-8, review 32 R32-10).
                Finding::Context(n, _) if !has_num_ctx && !matches!(ps, Finding::Context(..)) => {
                    Finding::UpperBound(n)
                }
                other => other,
            }
        }
        ContextSource::SelfHosted => {
            let vllm = finding(
                get_json(endpoint, endpoint.get("models"), PROBE_TIMEOUT).await,
                |m| vllm_context(m, model),
                fresh,
            );
            let llama = finding(
                get_json(endpoint, endpoint.get_at_root("props"), PROBE_TIMEOUT).await,
                llama_server_context,
                fresh,
            );
            // vLLM's `--api-key` guards `/v1` only: its `/tokenize` tells `max_model_len`.
            let tokenize = if vllm == Finding::Refused {
                let request = endpoint
                    .post_at_root("tokenize")
                    .map(|r| r.json(&json!({"model": model, "prompt": "a"})));
                finding(
                    get_json(endpoint, request, PROBE_TIMEOUT).await,
                    vllm_tokenize_context,
                    fresh,
                )
            } else {
                Finding::Silent
            };
            combine(&[vllm, llama, tokenize])
        }
        ContextSource::Unknown | ContextSource::OpenAi | ContextSource::Anthropic => {
            Finding::Silent
        }
    }
}

/// Sends a probe and reads its JSON answer within [`PROBE_MAX_BYTES`] and `timeout` (at most
/// the endpoint's). `Ok(None)`: the server has no such endpoint (404, 405, 501), which says
/// nothing.
async fn get_json(
    endpoint: &Endpoint,
    request: Result<reqwest::RequestBuilder, ProviderError>,
    timeout: Duration,
) -> Result<Option<Value>, ProviderError> {
    let timeout = timeout.min(endpoint.options.timeout);
    let request = request?.timeout(timeout);
    let secs = timeout.as_secs().max(1);
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

/// The path of OpenRouter's endpoint list for the model `id` (`models/{author}/{slug}/endpoints`
/// under the base URL), or `None` for an id that is not one or two plain path segments (a `..`,
/// a `?`, a `%`: never sent).
pub fn openrouter_endpoints_path(id: &str) -> Option<String> {
    let segments: Vec<&str> = id.split('/').collect();
    let plain = |s: &&str| {
        !s.is_empty()
            && *s != "."
            && *s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:~".contains(&b))
    };
    ((1..=2).contains(&segments.len()) && segments.iter().all(plain))
        .then(|| format!("models/{id}/endpoints"))
}

/// OpenRouter's `GET /models/{author}/{slug}/endpoints`: the smallest context of the model's
/// endpoints (each endpoint's `context_length`, or its `max_prompt_tokens` when smaller), since a
/// request may be drawn to any of them. An endpoint whose context cannot be read makes the
/// answer say nothing: no bound can be shown for a request drawn to it.
pub fn openrouter_endpoints_context(answer: &Value) -> Option<u64> {
    let endpoints = answer.pointer("/data/endpoints")?.as_array()?;
    endpoints.iter().try_fold(None, |least, e| {
        let one = smaller(
            count(e.get("context_length")),
            count(e.get("max_prompt_tokens")),
        );
        Some(smaller(least, Some(one?)))
    })?
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

/// vLLM's `POST /tokenize` (outside `/v1`, so open on a server run with `--api-key`): its
/// `max_model_len`.
pub fn vllm_tokenize_context(answer: &Value) -> Option<u64> {
    count(answer.get("max_model_len"))
}

/// Ollama's `POST /api/show`: the Modelfile's `num_ctx` (its `parameters` text, one
/// `name value` a line) and the trained `<arch>.context_length` of `model_info`, the smaller.
pub fn ollama_context(show: &Value) -> Option<u64> {
    let trained = show
        .get("model_info")
        .and_then(Value::as_object)
        .and_then(|info| {
            info.iter()
                .filter(|(k, _)| k.ends_with(".context_length"))
                .filter_map(|(_, v)| count(Some(v)))
                .min()
        });
    smaller(ollama_num_ctx(show), trained)
}

/// The Modelfile's `num_ctx` in Ollama's `POST /api/show` answer.
fn ollama_num_ctx(show: &Value) -> Option<u64> {
    show.get("parameters")
        .and_then(Value::as_str)
        .and_then(|text| {
            text.lines().find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("num_ctx"))
                    .then(|| words.next()?.parse::<u64>().ok())
                    .flatten()
                    .filter(|n| *n > 0)
            })
        })
}

/// Ollama's `GET /api/ps`: the `context_length` the model `model` is loaded with (a name
/// without a tag is `:latest`), when it is loaded and the server says.
pub fn ollama_loaded_context(ps: &Value, model: &str) -> Option<u64> {
    let tagged = match model.rsplit('/').next() {
        Some(last) if !last.contains(':') => format!("{model}:latest"),
        _ => model.to_owned(),
    };
    ps.get("models")?
        .as_array()?
        .iter()
        .filter(|m| {
            ["name", "model"].iter().any(|field| {
                m.get(*field)
                    .and_then(Value::as_str)
                    .is_some_and(|n| n == model || n == tagged)
            })
        })
        .filter_map(|m| count(m.get("context_length")))
        .min()
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
    fn openrouter_holds_the_smallest_endpoint() {
        let endpoints = json!({"data": {"id": "big/model", "endpoints": [
            {"provider_name": "A", "tag": "a", "context_length": 131072},
            {"provider_name": "B", "tag": "b/fp8", "context_length": 32768},
            {"provider_name": "C", "tag": "c", "context_length": 131072,
             "max_prompt_tokens": 8192},
        ]}});
        assert_eq!(openrouter_endpoints_context(&endpoints), Some(8_192));
        let one = json!({"data": {"endpoints": [{"context_length": 32768}]}});
        assert_eq!(openrouter_endpoints_context(&one), Some(32_768));
        // An endpoint whose context cannot be read: no bound for a request drawn to it.
        let unread = json!({"data": {"endpoints": [
            {"context_length": 32768}, {"context_length": "8192"}]}});
        assert_eq!(openrouter_endpoints_context(&unread), None);
        assert_eq!(
            openrouter_endpoints_context(&json!({"data": {"endpoints": []}})),
            None
        );
        assert_eq!(
            openrouter_endpoints_path("meta-llama/llama-3-8b-instruct:nitro").as_deref(),
            Some("models/meta-llama/llama-3-8b-instruct:nitro/endpoints")
        );
        for id in [
            "", "a/../b", "a/b/c", "a//b", "a/b?x", "a/b#x", "a/%2e%2e", "/a", "a b",
        ] {
            assert_eq!(openrouter_endpoints_path(id), None, "{id}");
        }
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
            assert_eq!(openrouter_endpoints_context(&value), None, "{value}");
            assert_eq!(vllm_tokenize_context(&value), None, "{value}");
            assert_eq!(ollama_loaded_context(&value, "m"), None, "{value}");
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
    fn ollama_reads_the_loaded_models_context() {
        let ps = json!({"models": [
            {"name": "llama3:latest", "model": "llama3:latest", "context_length": 2048},
            {"name": "qwen2:7b", "model": "qwen2:7b", "context_length": 32768},
        ]});
        assert_eq!(ollama_loaded_context(&ps, "llama3"), Some(2_048));
        assert_eq!(ollama_loaded_context(&ps, "llama3:latest"), Some(2_048));
        assert_eq!(ollama_loaded_context(&ps, "qwen2:7b"), Some(32_768));
        assert_eq!(ollama_loaded_context(&ps, "qwen2"), None);
        assert_eq!(
            ollama_loaded_context(&json!({"models": []}), "llama3"),
            None
        );
        let tokenize = json!({"count": 1, "max_model_len": 32768, "tokens": [64]});
        assert_eq!(vllm_tokenize_context(&tokenize), Some(32_768));
    }

    #[test]
    fn the_cache_is_bounded_and_forgets() {
        let p = ContextProbe::new(ContextSource::OpenRouter, ProbeTimes::default());
        let fresh = ProbeTimes::default().fresh;
        for i in 0..CACHE_ENTRIES + 10 {
            p.remember(
                ("b".into(), format!("m{i}")),
                Finding::Context(i as u64, fresh),
            );
        }
        assert_eq!(p.len(), CACHE_ENTRIES);
        // The newest stays, the oldest went.
        let last = format!("m{}", CACHE_ENTRIES + 9);
        assert_eq!(
            p.believed(&("b".into(), last)).map(|k| k.finding),
            Some(Finding::Context((CACHE_ENTRIES + 9) as u64, fresh))
        );
        assert!(p.believed(&("b".into(), "m0".into())).is_none());
        // An expired answer is asked again.
        p.remember(
            ("b".into(), "gone".into()),
            Finding::Context(1, Duration::ZERO),
        );
        assert!(p.believed(&("b".into(), "gone".into())).is_none());
    }

    /// R31-8: an upper bound (Ollama's trained context, no loaded context shown) never
    /// replaces a context told: within the stale time the smaller of the two holds; a context
    /// told later replaces the old one. R32-10: past the stale time, or never told, the bound
    /// alone holds nothing — every judged call fails with the owner's words (held against the
    /// bound, a declaration over the server's default passed a day after the last context
    /// told, and from the box's start).
    #[test]
    fn an_upper_bound_never_replaces_a_told_context() {
        let times = ProbeTimes::default();
        let now = Instant::now();
        let later = now + times.stale + Duration::from_secs(1);
        let key = || ("b".to_owned(), "m".to_owned());
        let p = ContextProbe::new(ContextSource::Ollama, times);
        let never = p.remember(key(), Finding::UpperBound(131_072));
        assert_eq!(
            never.verdict(ContextSource::Ollama, &times, now),
            Verdict::Closed(REMOTE_CONTEXT_UNSHOWN)
        );
        p.remember(key(), Finding::Context(4_096, times.fresh));
        let k = p.remember(key(), Finding::UpperBound(131_072));
        assert_eq!(k.told.map(|(n, _)| n), Some(4_096));
        assert_eq!(
            k.verdict(ContextSource::Ollama, &times, now),
            Verdict::Holds(4_096)
        );
        assert_eq!(
            k.verdict(ContextSource::Ollama, &times, later),
            Verdict::Closed(REMOTE_CONTEXT_UNSHOWN)
        );
        let smaller = p.remember(key(), Finding::UpperBound(2_048));
        assert_eq!(
            smaller.verdict(ContextSource::Ollama, &times, now),
            Verdict::Holds(2_048)
        );
        let k = p.remember(key(), Finding::Context(8_192, times.fresh));
        assert_eq!(
            k.verdict(ContextSource::Ollama, &times, now),
            Verdict::Holds(8_192)
        );
    }

    /// R30-4: a context told stands through later findings that tell none, for the stale time;
    /// past it, or never told, a refusal and an OpenRouter failure close; a self-hosted server's
    /// failure and any silence leave the declaration.
    #[test]
    fn a_told_context_stands_through_failures_for_the_stale_time() {
        let times = ProbeTimes::default();
        let now = Instant::now();
        let key = || ("b".to_owned(), "m".to_owned());
        for source in [ContextSource::OpenRouter, ContextSource::SelfHosted] {
            let p = ContextProbe::new(source, times);
            p.remember(key(), Finding::Context(8_192, times.fresh));
            for after in [Finding::Failed, Finding::Silent, Finding::Refused] {
                let k = p.remember(key(), after);
                assert_eq!(k.verdict(source, &times, now), Verdict::Holds(8_192));
                let later = now + times.stale + Duration::from_secs(1);
                let want = match (after, source) {
                    (Finding::Refused, _) => Verdict::Closed(REMOTE_CONTEXT_REFUSED),
                    (Finding::Failed, ContextSource::OpenRouter) => {
                        Verdict::Closed(REMOTE_CONTEXT_UNREAD)
                    }
                    _ => Verdict::Open,
                };
                assert_eq!(
                    k.verdict(source, &times, later),
                    want,
                    "{source:?} {after:?}"
                );
            }
            // A new context replaces the old one, smaller or larger.
            let k = p.remember(key(), Finding::Context(32_768, times.fresh));
            assert_eq!(k.verdict(source, &times, now), Verdict::Holds(32_768));
        }
        assert_eq!(
            combine(&[Finding::Refused, Finding::Silent, Finding::Failed]),
            Finding::Refused
        );
        assert_eq!(
            combine(&[
                Finding::Refused,
                Finding::Context(4096, times.retry),
                Finding::Context(2048, times.fresh)
            ]),
            Finding::Context(2048, times.retry)
        );
        assert_eq!(
            combine(&[Finding::Silent, Finding::Failed]),
            Finding::Failed
        );
    }
}
