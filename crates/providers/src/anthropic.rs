//! Anthropic Messages (`POST {base}/v1/messages`), not streamed: `x-api-key`,
//! `anthropic-version`, and the required `max_tokens`.

use serde_json::{Value, json};

use crate::context::{ContextProbe, ContextSource, ProbeTimes};
use crate::http::{Endpoint, HttpOptions, json_error, read_capped, secret_header};
use crate::{
    ChatRequest, Completion, FinishReason, Provider, ProviderError, ProviderFailure, Reply, Usage,
};

/// The Messages API version this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The Anthropic Messages endpoint.
#[derive(Debug)]
pub struct Anthropic {
    endpoint: Endpoint,
    /// Anthropic's API does not tell a model's context: the table of known smaller ones.
    context: ContextProbe,
}

impl Anthropic {
    /// This provider named `id` in what a refused loopback port logs (the registry names
    /// every provider it builds).
    pub fn for_provider(mut self, id: &crate::ProviderId) -> Self {
        self.endpoint.set_provider(id);
        self
    }

    /// `base_url` is the API root, e.g. `https://api.anthropic.com`; requests go to
    /// `{base_url}/v1/messages` and nowhere else.
    pub fn new(base_url: &str, http: HttpOptions) -> Result<Self, ProviderError> {
        Ok(Anthropic {
            endpoint: Endpoint::new(base_url, http)?,
            context: ContextProbe::new(ContextSource::Anthropic, ProbeTimes::default()),
        })
    }

    async fn attempt(
        &self,
        body: &Value,
        api_key: Option<&str>,
    ) -> Result<Completion, ProviderError> {
        let mut request = self
            .endpoint
            .post("v1/messages")?
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(body);
        if let Some(key) = api_key {
            request = request.header("x-api-key", secret_header("", key)?);
        }
        let response = self.endpoint.send(request).await?;
        let bytes = read_capped(response, self.endpoint.timeout_secs()).await?;
        parse_message(&bytes)
    }
}

/// The request body. Anthropic takes temperature in 0..=1 and has no seed.
pub fn request_body(request: &ChatRequest) -> Value {
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": [{"role": "user", "content": request.user}],
        "temperature": request.temperature.clamp(0.0, 1.0),
    });
    if !request.system.is_empty() {
        body["system"] = json!(request.system);
    }
    body
}

/// A Messages answer: the text blocks joined, the stop reason, the token counts.
pub fn parse_message(bytes: &[u8]) -> Result<Completion, ProviderError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| json_error("message", &e))?;
    if value.get("type").and_then(Value::as_str) == Some("error")
        || value.get("error").is_some_and(|e| !e.is_null())
    {
        // Its kind from its `type` only, never its message (which may quote the prompt; see
        // `ProviderFailure::classify`).
        let error = value.get("error").unwrap_or(&Value::Null);
        let kind = error.get("type").and_then(Value::as_str).unwrap_or("");
        return Err(match kind {
            "overloaded_error" | "api_error" => ProviderError::Upstream { status: 529 },
            "rate_limit_error" => ProviderError::RateLimited {
                retry_after_secs: None,
            },
            "authentication_error" => ProviderError::Unauthorized { status: 401 },
            "permission_error" => ProviderError::Unauthorized { status: 403 },
            "not_found_error" => ProviderError::Reported(ProviderFailure::ModelRejected),
            "request_too_large" => ProviderError::Reported(ProviderFailure::ContextTooLong),
            // `invalid_request_error` says nothing more; neither does anything else.
            _ => ProviderError::Reported(ProviderFailure::UpstreamError),
        });
    }
    let blocks = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderError::Protocol("message without content".into()))?;
    let text: String = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    let finish = match value.get("stop_reason").and_then(Value::as_str) {
        Some("end_turn") | Some("stop_sequence") => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        _ => FinishReason::Other,
    };
    let usage = value.get("usage");
    let count = |field: &str| {
        usage
            .and_then(|u| u.get(field))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Ok(Completion {
        text,
        finish,
        usage: Usage {
            prompt_tokens: count("input_tokens"),
            completion_tokens: count("output_tokens"),
            cost: None,
        },
    })
}

impl Provider for Anthropic {
    fn complete<'a>(&'a self, request: ChatRequest, api_key: Option<&'a str>) -> Reply<'a> {
        Box::pin(async move {
            // Judged before sending, from public values only (N5): see `remote_admission`.
            let judged = request.remote_admission()?;
            if judged {
                self.context.check(&self.endpoint, &request).await?;
            }
            let body = request_body(&request);
            self.endpoint
                .with_retries(|| self.attempt(&body, api_key))
                .await
                .map_err(|e| ChatRequest::after_admission(judged, e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_text_stop_and_usage() {
        let c = parse_message(
            br#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hi"},{"type":"text","text":" there"}],"stop_reason":"max_tokens","usage":{"input_tokens":12,"output_tokens":4}}"#,
        )
        .unwrap();
        assert_eq!(c.text, "Hi there");
        assert_eq!(c.finish, FinishReason::Length);
        assert_eq!(c.usage.prompt_tokens, 12);
        assert_eq!(c.usage.completion_tokens, 4);
    }

    #[test]
    fn error_documents() {
        let e = parse_message(
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )
        .unwrap_err();
        assert!(e.is_retryable());
        let e = parse_message(
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"bad key sk-ant-x"}}"#,
        )
        .unwrap_err();
        assert!(!format!("{e} {e:?}").contains("sk-ant-x"), "{e}");
        assert!(!format!("{e} {e:?}").contains("bad key"), "{e}");
        let e = parse_message(
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        )
        .unwrap_err();
        // Its words quote the prompt: they pick no kind.
        assert_eq!(e.failure(), ProviderFailure::UpstreamError);
        let e = parse_message(
            br#"{"type":"error","error":{"type":"request_too_large","message":"x"}}"#,
        )
        .unwrap_err();
        assert_eq!(e.failure(), ProviderFailure::ContextTooLong);
    }

    #[test]
    fn body_has_max_tokens_and_system() {
        let req = ChatRequest {
            system: "be brief".into(),
            user: "u".into(),
            model: "claude".into(),
            max_tokens: 5,
            temperature: 1.7,
            seed: None,
            system_allowance: None,
            context_tokens: None,
        };
        let b = request_body(&req);
        assert_eq!(b["max_tokens"], 5);
        assert_eq!(b["system"], "be brief");
        assert_eq!(b["temperature"], 1.0);
    }
}
