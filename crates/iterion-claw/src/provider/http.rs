//! The one HTTP client of the crate: sends a [`Request`] to a [`Provider`], streaming or not, with bounded
//! retries on 429 and 5xx, and maps failures to [`Error`].

use super::sse::SseParser;
use super::{Provider, Request, Turn, Wire, anthropic, openai};
use crate::error::{Error, Result, preview};
use futures::StreamExt;
use serde_json::Value;
use std::time::Duration;

/// Retry policy for 429 and 5xx answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Delay before the first retry; doubled for each further one.
    pub base_delay: Duration,
    /// Upper bound of any delay, including a provider's `retry-after`.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// A policy with the given retry count and base delay (max delay 60 s).
    pub fn new(max_retries: u32, base_delay: Duration) -> Self {
        RetryPolicy {
            max_retries,
            base_delay,
            ..RetryPolicy::default()
        }
    }

    /// The delay before retry number `attempt` (1-based), honouring the provider's `retry-after`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = self
            .base_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        retry_after.unwrap_or(backoff).min(self.max_delay)
    }
}

/// A retry about to happen, reported to the caller (the `llm_retry` event).
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    /// 1-based retry number.
    pub attempt: u32,
    /// The delay waited before it.
    pub delay: Duration,
    /// The failure that caused it.
    pub error: String,
    /// Its error code.
    pub code: &'static str,
}

/// The certificates of the PEM file named by `SSL_CERT_FILE` in `env` (at most 4 MiB; an unreadable or
/// unparsable file adds none): in a sandbox whose proxy inspects TLS, the run's bundle, so the runner trusts the
/// proxy's CA the way every other client of the container does.
pub fn trust_file_roots(env: &std::collections::BTreeMap<String, String>) -> Vec<reqwest::Certificate> {
    let Some(path) = env.get("SSL_CERT_FILE").filter(|p| !p.is_empty()) else {
        return Vec::new();
    };
    match iterion_boundary::fs::read_file(std::path::Path::new(path), 4 << 20) {
        Ok(pem) => reqwest::Certificate::from_pem_bundle(&pem).unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// HTTP client for the providers.
///
/// Built on `reqwest` (rustls, no default features): a well-kept client with HTTP proxy support including
/// credentials in the proxy URL, and a streaming body. It never reads proxy variables from the process
/// environment: the proxy is the one given to [`Client::new`], or none.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    retry: RetryPolicy,
}

impl Client {
    /// A client sending every request through `proxy` when given (e.g. `http://user:pass@proxy:3128`).
    pub fn new(proxy: Option<&str>, retry: RetryPolicy) -> Result<Self> {
        Self::with_roots(proxy, retry, &[])
    }

    /// [`Client::new`] trusting `roots` besides the built-in Mozilla set (a run's TLS-inspection CA, see
    /// [`trust_file_roots`]).
    pub fn with_roots(
        proxy: Option<&str>,
        retry: RetryPolicy,
        roots: &[reqwest::Certificate],
    ) -> Result<Self> {
        let mut b = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(30));
        for r in roots {
            b = b.add_root_certificate(r.clone());
        }
        if let Some(p) = proxy.filter(|p| !p.is_empty()) {
            let proxy = reqwest::Proxy::all(p).map_err(|e| Error::Client {
                message: format!("proxy url: {e}"),
            })?;
            b = b.proxy(proxy);
        }
        let http = b.build().map_err(|e| Error::Client {
            message: e.to_string(),
        })?;
        Ok(Client { http, retry })
    }

    /// Sends `req`, retrying 429 and 5xx answers by the policy; `on_retry` hears of each retry.
    pub async fn send(
        &self,
        p: &Provider,
        req: &Request,
        on_retry: &mut (dyn FnMut(&Retry) + Send),
    ) -> Result<Turn> {
        let mut attempt = 0;
        loop {
            match self.send_once(p, req).await {
                Err(e) if e.retryable() && attempt < self.retry.max_retries => {
                    attempt += 1;
                    let delay = self.retry.delay(attempt, e.retry_after());
                    on_retry(&Retry {
                        attempt,
                        delay,
                        error: e.to_string(),
                        code: e.code(),
                    });
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }

    async fn send_once(&self, p: &Provider, req: &Request) -> Result<Turn> {
        let (url, body) = match p.wire {
            Wire::Anthropic => (anthropic::url(&p.base_url), anthropic::body(&p.model, req)),
            Wire::OpenAi => (openai::url(&p.base_url), openai::body(&p.model, req)),
        };
        let mut rb = self.http.post(url).json(&body);
        rb = match p.wire {
            Wire::Anthropic => rb
                .header("x-api-key", &p.api_key)
                .header("anthropic-version", anthropic::VERSION),
            Wire::OpenAi => rb.bearer_auth(&p.api_key),
        };
        let resp = rb.send().await.map_err(|e| network(p, &e))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let retry_after = retry_after(resp.headers());
            let text = resp.text().await.unwrap_or_default();
            return Err(status_error(p, status, &text, retry_after));
        }
        if req.stream {
            self.read_stream(p, resp).await
        } else {
            let text = resp.text().await.map_err(|e| network(p, &e))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| Error::Malformed {
                provider: p.name.clone(),
                message: format!("body is not JSON: {e}"),
            })?;
            match p.wire {
                Wire::Anthropic => anthropic::parse(&p.name, &v),
                Wire::OpenAi => openai::parse(&p.name, &v),
            }
        }
    }

    async fn read_stream(&self, p: &Provider, resp: reqwest::Response) -> Result<Turn> {
        let mut parser = SseParser::default();
        let mut a = anthropic::Stream::default();
        let mut o = openai::Stream::default();
        let mut feed = |ev: &super::sse::SseEvent| match p.wire {
            Wire::Anthropic => a.event(&p.name, ev),
            Wire::OpenAi => o.event(&p.name, ev),
        };
        let mut body = resp.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| network(p, &e))?;
            for ev in parser.feed(&chunk) {
                feed(&ev)?;
            }
        }
        if let Some(ev) = parser.finish() {
            feed(&ev)?;
        }
        match p.wire {
            Wire::Anthropic => a.finish(&p.name),
            Wire::OpenAi => o.finish(&p.name),
        }
    }
}

fn network(p: &Provider, e: &reqwest::Error) -> Error {
    // the error chain carries the useful part (connection refused, reset, timed out)
    let mut message = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        message = format!("{message}: {s}");
        src = s.source();
    }
    Error::Network {
        provider: p.name.clone(),
        message,
    }
}

fn retry_after(h: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = h.get("retry-after")?.to_str().ok()?.trim();
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// Phrases providers use for an oversized prompt.
const CONTEXT_MARKERS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "context window",
    "too many tokens",
];

fn status_error(p: &Provider, status: u16, body: &str, retry_after: Option<Duration>) -> Error {
    let provider = p.name.clone();
    let lower = body.to_ascii_lowercase();
    if status == 429 {
        Error::RateLimited {
            provider,
            body: preview(body),
            retry_after,
        }
    } else if (status == 400 || status == 413) && CONTEXT_MARKERS.iter().any(|m| lower.contains(m)) {
        Error::ContextLengthExceeded {
            provider,
            body: preview(body),
        }
    } else {
        Error::Status {
            provider,
            status,
            body: preview(body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_honours_retry_after() {
        let p = RetryPolicy::new(3, Duration::from_millis(100));
        assert_eq!(p.delay(1, None), Duration::from_millis(100));
        assert_eq!(p.delay(3, None), Duration::from_millis(400));
        assert_eq!(p.delay(1, Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(900))),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn status_mapping() {
        let p = Provider {
            name: "openai".into(),
            wire: Wire::OpenAi,
            model: "m".into(),
            base_url: "http://x".into(),
            api_key: "k".into(),
        };
        assert_eq!(status_error(&p, 429, "slow down", None).code(), "RATE_LIMITED");
        let ctx = r#"{"error":{"code":"context_length_exceeded"}}"#;
        assert_eq!(status_error(&p, 400, ctx, None).code(), "CONTEXT_LENGTH_EXCEEDED");
        assert_eq!(status_error(&p, 400, "bad", None).code(), "EXECUTION_FAILED");
        assert!(status_error(&p, 503, "", None).retryable());
        assert!(!status_error(&p, 400, "", None).retryable());
    }
}
