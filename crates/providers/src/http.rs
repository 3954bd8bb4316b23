//! The HTTP plumbing both remote adapters share: one client per provider that talks only to the
//! configured base URL's host, never follows redirects, ignores proxy environment variables, has
//! timeouts, and retries what is worth retrying a bounded number of times, honouring
//! `Retry-After`. Nothing here logs or reports request bodies, answers or keys.

use std::future::Future;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};

use crate::ProviderError;

/// Timeouts and retry policy of a remote provider.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// The whole request, body included. A slow model answering a long prompt needs minutes.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Retries after the first attempt (so at most `max_retries + 1` requests).
    pub max_retries: u32,
    /// A `Retry-After` longer than this is not waited for: the run fails as rate limited.
    pub max_retry_wait: Duration,
    /// First pause when the provider gave no `Retry-After`; doubled on every retry.
    pub backoff: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            timeout: Duration::from_secs(180),
            connect_timeout: Duration::from_secs(10),
            max_retries: 3,
            max_retry_wait: Duration::from_secs(60),
            backoff: Duration::from_millis(500),
        }
    }
}

/// The TLS roots of every provider client: Mozilla's, as compiled in (`webpki-root-certs`),
/// plus the PEM certificates a test passes.
fn roots(extra_pem: &[u8]) -> Result<Vec<reqwest::Certificate>, ProviderError> {
    let mut out = Vec::with_capacity(webpki_root_certs::TLS_SERVER_ROOT_CERTS.len() + 1);
    for der in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        out.push(
            reqwest::Certificate::from_der(der.as_ref())
                .map_err(|_| ProviderError::Config("a compiled-in TLS root is malformed".into()))?,
        );
    }
    if !extra_pem.is_empty() {
        out.extend(
            reqwest::Certificate::from_pem_bundle(extra_pem)
                .map_err(|_| ProviderError::Config("the extra TLS roots are not PEM".into()))?,
        );
    }
    Ok(out)
}

/// Whether `url` names this machine (`localhost`, `*.localhost`, 127/8, `::1`): the one place
/// plain `http://` is allowed, for a provider here and for a box in `skillbox-jc`.
pub fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// A provider's base URL plus a client locked to it.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    client: reqwest::Client,
    base: Url,
    pub(crate) options: HttpOptions,
    /// The provider's id, for the one log line of a refused loopback port (never a request).
    provider: String,
}

impl Endpoint {
    pub(crate) fn new(base_url: &str, options: HttpOptions) -> Result<Self, ProviderError> {
        Endpoint::trusting(base_url, options, &[])
    }

    /// [`Endpoint::new`] that also trusts `extra_roots_pem` (PEM certificates): only for tests
    /// against an https double with its own root. The box never calls it.
    pub(crate) fn trusting(
        base_url: &str,
        options: HttpOptions,
        extra_roots_pem: &[u8],
    ) -> Result<Self, ProviderError> {
        let mut base = Url::parse(base_url).map_err(|e| {
            ProviderError::Config(format!("base URL {base_url:?} is not a URL: {e}"))
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(ProviderError::Config(format!(
                "base URL {base_url:?} must be http or https"
            )));
        }
        if base.host_str().is_none_or(str::is_empty) {
            return Err(ProviderError::Config(format!(
                "base URL {base_url:?} has no host"
            )));
        }
        // Plain HTTP carries the owner's key and the prompt readable to every hop on the way:
        // only to a provider on this machine (a local model server, a test double).
        if base.scheme() == "http" && !is_loopback(&base) {
            return Err(ProviderError::Config(format!(
                "base URL {base_url:?}: plain http is for a provider on loopback only; use https"
            )));
        }
        // Credentials in a URL end up in logs and error messages; the key belongs in a header.
        if !base.username().is_empty() || base.password().is_some() {
            return Err(ProviderError::Config(
                "base URL must not carry credentials; the API key is staked separately".into(),
            ));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(ProviderError::Config(format!(
                "base URL {base_url:?} must not have a query or fragment"
            )));
        }
        // `Url::join` treats a base without a trailing slash as a file and drops its last segment.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // A proxy from the environment would be egress to another host.
            .no_proxy()
            // The roots compiled into this binary and nothing else: the OS store,
            // `SSL_CERT_FILE` and `SSL_CERT_DIR` belong to the box's operator, who could add a
            // root of their own and read the owner's key and the skill body on the way out.
            .tls_certs_only(roots(extra_roots_pem)?)
            .timeout(options.timeout)
            .connect_timeout(options.connect_timeout)
            .user_agent(concat!("skillbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderError::Config(format!("HTTP client: {e}")))?;
        Ok(Endpoint {
            client,
            base,
            options,
            provider: "unnamed".into(),
        })
    }

    /// Names the provider this endpoint is for, in what a refusal logs.
    pub(crate) fn set_provider(&mut self, id: &crate::ProviderId) {
        self.provider = id.to_string();
    }

    /// `path` under the base URL, refused if it would leave the base URL's origin.
    pub(crate) fn url(&self, path: &str) -> Result<Url, ProviderError> {
        self.within_origin(&self.base, path)
    }

    /// `path` joined to `under`, refused if the result leaves the base URL's origin.
    fn within_origin(&self, under: &Url, path: &str) -> Result<Url, ProviderError> {
        let url = under
            .join(path.trim_start_matches('/'))
            .map_err(|e| ProviderError::Config(format!("request path {path:?}: {e}")))?;
        if url.origin() != self.base.origin() {
            return Err(ProviderError::Config(format!(
                "request path {path:?} leaves the provider's host"
            )));
        }
        Ok(url)
    }

    /// A POST to `path` under the base URL (see [`Self::url`]).
    pub(crate) fn post(&self, path: &str) -> Result<reqwest::RequestBuilder, ProviderError> {
        Ok(self.client.post(self.url(path)?))
    }

    /// A GET of `path` under the base URL (see [`Self::url`]).
    pub(crate) fn get(&self, path: &str) -> Result<reqwest::RequestBuilder, ProviderError> {
        Ok(self.client.get(self.url(path)?))
    }

    /// The base URL as configured (with its trailing slash).
    pub(crate) fn base(&self) -> &Url {
        &self.base
    }

    /// `path` under the server's root: the base URL without a last `v1/` segment (Ollama's
    /// `/api/show` and llama.cpp's `/props` sit beside the OpenAI-compatible `/v1`), else the
    /// base URL itself. Same origin, like [`Self::url`].
    pub(crate) fn root_url(&self, path: &str) -> Result<Url, ProviderError> {
        let mut root = self.base.clone();
        if let Some(stripped) = root.path().strip_suffix("v1/") {
            let stripped = stripped.to_owned();
            root.set_path(&stripped);
        }
        self.within_origin(&root, path)
    }

    /// A GET of `path` under the server's root (see [`Self::root_url`]).
    pub(crate) fn get_at_root(&self, path: &str) -> Result<reqwest::RequestBuilder, ProviderError> {
        Ok(self.client.get(self.root_url(path)?))
    }

    /// A POST to `path` under the server's root (see [`Self::root_url`]).
    pub(crate) fn post_at_root(
        &self,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, ProviderError> {
        Ok(self.client.post(self.root_url(path)?))
    }

    /// Sends `request`: a transport failure or a status other than 2xx is its error kind, so
    /// every adapter reads only a successful answer.
    pub(crate) async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ProviderError> {
        // A loopback port may be another local user's (A32-2): only to ours, or nothing leaves.
        crate::loopback_owner::check(&self.provider, &self.base)?;
        let response = request
            .send()
            .await
            .map_err(|e| transport_error(e, self.timeout_secs()))?;
        check_status(response.status(), response.headers())?;
        Ok(response)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the retries are spent.
    pub(crate) async fn with_retries<T, F, Fut>(&self, mut attempt: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        let mut backoff = self.options.backoff;
        let mut retries = 0u32;
        loop {
            let err = match attempt().await {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            if !err.is_retryable() || retries >= self.options.max_retries {
                return Err(err);
            }
            let wait = match &err {
                ProviderError::RateLimited {
                    retry_after_secs: Some(secs),
                } => {
                    let wait = Duration::from_secs(*secs);
                    if wait > self.options.max_retry_wait {
                        return Err(err);
                    }
                    wait
                }
                _ => {
                    let wait = backoff;
                    backoff = backoff.saturating_mul(2).min(self.options.max_retry_wait);
                    wait
                }
            };
            retries += 1;
            tracing::debug!(retry = retries, wait_ms = wait.as_millis() as u64, kind = %err, "provider retry");
            tokio::time::sleep(wait).await;
        }
    }

    pub(crate) fn timeout_secs(&self) -> u64 {
        self.options.timeout.as_secs().max(1)
    }
}

/// The most a provider answer may take in memory. Far above any real completion; a server that
/// sends more is broken or hostile.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 << 20;

/// A whole response body, refused beyond [`MAX_ANSWER_BYTES`].
pub(crate) async fn read_capped(
    response: reqwest::Response,
    timeout_secs: u64,
) -> Result<Vec<u8>, ProviderError> {
    read_capped_to(response, MAX_ANSWER_BYTES, timeout_secs).await
}

/// A whole response body, refused beyond `cap` bytes (a whole number of MiB).
pub(crate) async fn read_capped_to(
    mut response: reqwest::Response,
    cap: usize,
    timeout_secs: u64,
) -> Result<Vec<u8>, ProviderError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| transport_error(e, timeout_secs))?
    {
        if body.len() + chunk.len() > cap {
            return Err(ProviderError::Protocol(format!(
                "answer larger than {} MiB",
                cap >> 20
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The key as a header value marked sensitive, so it never shows in a `Debug` of the request.
pub(crate) fn secret_header(prefix: &str, key: &str) -> Result<HeaderValue, ProviderError> {
    let mut value = HeaderValue::from_str(&format!("{prefix}{key}")).map_err(|_| {
        ProviderError::InvalidRequest("the API key is not a valid HTTP header value".into())
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// Maps a non-success status to an error kind; `Ok` for 2xx.
pub(crate) fn check_status(status: StatusCode, headers: &HeaderMap) -> Result<(), ProviderError> {
    if status.is_success() {
        return Ok(());
    }
    if status.is_redirection() {
        return Err(ProviderError::Redirect);
    }
    Err(status_error(status.as_u16(), retry_after(headers)))
}

/// The error kind of a non-success, non-redirect HTTP status (also a provider's numeric error
/// code in an answer's body).
pub(crate) fn status_error(status: u16, retry_after_secs: Option<u64>) -> ProviderError {
    match status {
        401 | 403 => ProviderError::Unauthorized { status },
        429 => ProviderError::RateLimited { retry_after_secs },
        other => ProviderError::Upstream { status: other },
    }
}

/// `Retry-After` in seconds (the delta form; an HTTP date falls back to our own backoff).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let secs: f64 = value.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| secs.ceil() as u64)
}

/// A transport failure as an error kind, without the URL and without anything of the request.
pub(crate) fn transport_error(err: reqwest::Error, timeout_secs: u64) -> ProviderError {
    if err.is_timeout() {
        return ProviderError::Timeout { secs: timeout_secs };
    }
    if err.is_redirect() {
        return ProviderError::Redirect;
    }
    let err = err.without_url();
    let mut message = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(inner) = source {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        source = inner.source();
    }
    ProviderError::Transport(message)
}

/// A JSON error as a message that never quotes the document (it may hold the answer).
pub(crate) fn json_error(what: &str, err: &serde_json::Error) -> ProviderError {
    let kind = match err.classify() {
        serde_json::error::Category::Io => "I/O error",
        serde_json::error::Category::Syntax => "invalid JSON",
        serde_json::error::Category::Data => "unexpected JSON shape",
        serde_json::error::Category::Eof => "truncated JSON",
    };
    ProviderError::Protocol(format!(
        "{what}: {kind} at line {} column {}",
        err.line(),
        err.column()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_to_a_provider_on_loopback() {
        let o = HttpOptions::default();
        for url in [
            "http://10.0.0.5:8000/v1",
            "http://llm.example/v1",
            "http://127.0.0.1.evil.example/v1",
            "http://localhost.evil.example/v1",
        ] {
            assert!(
                matches!(Endpoint::new(url, o.clone()), Err(ProviderError::Config(_))),
                "{url}"
            );
        }
        for url in [
            "http://127.0.0.1:8000/v1",
            "http://localhost:11434/v1",
            "http://[::1]:9/v1",
            "https://api.openai.com/v1",
            "https://llm.example/v1",
        ] {
            Endpoint::new(url, o.clone()).expect(url);
        }
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(3));
        h.insert(RETRY_AFTER, HeaderValue::from_static("0.2"));
        assert_eq!(retry_after(&h), Some(1));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("-4"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn base_url_rules() {
        let opts = HttpOptions::default();
        assert!(matches!(
            Endpoint::new("ftp://x/", opts.clone()),
            Err(ProviderError::Config(_))
        ));
        assert!(matches!(
            Endpoint::new("https://user:pw@x/v1", opts.clone()),
            Err(ProviderError::Config(_))
        ));
        assert!(matches!(
            Endpoint::new("not a url", opts.clone()),
            Err(ProviderError::Config(_))
        ));
        let e = Endpoint::new("https://openrouter.ai/api/v1", opts).unwrap();
        assert_eq!(
            e.url("chat/completions").unwrap().as_str(),
            "https://openrouter.ai/api/v1/chat/completions"
        );
        // A scheme-relative path is kept under the base, never taken as another host.
        assert_eq!(
            e.url("//evil.example/x").unwrap().host_str(),
            Some("openrouter.ai")
        );
        assert!(e.url("https://evil.example/x").is_err());
        // The server's root: beside `/v1`, never another host.
        let o = Endpoint::new("http://127.0.0.1:11434/v1", HttpOptions::default()).unwrap();
        assert_eq!(
            o.root_url("api/show").unwrap().as_str(),
            "http://127.0.0.1:11434/api/show"
        );
        assert_eq!(
            e.root_url("props").unwrap().as_str(),
            "https://openrouter.ai/api/props"
        );
        let plain = Endpoint::new("http://127.0.0.1:8080", HttpOptions::default()).unwrap();
        assert_eq!(
            plain.root_url("props").unwrap().as_str(),
            "http://127.0.0.1:8080/props"
        );
        assert!(o.root_url("https://evil.example/x").is_err());
        assert_eq!(
            o.root_url("//evil.example/x").unwrap().host_str(),
            Some("127.0.0.1")
        );
    }

    #[test]
    fn status_kinds() {
        let h = HeaderMap::new();
        assert!(check_status(StatusCode::OK, &h).is_ok());
        assert!(matches!(
            check_status(StatusCode::FOUND, &h),
            Err(ProviderError::Redirect)
        ));
        assert!(matches!(
            check_status(StatusCode::UNAUTHORIZED, &h),
            Err(ProviderError::Unauthorized { status: 401 })
        ));
        assert!(matches!(
            check_status(StatusCode::BAD_GATEWAY, &h),
            Err(ProviderError::Upstream { status: 502 })
        ));
    }
}
