//! Responses the proxy generates itself (spec §13.1, §13.2): byte-exact, JSON bodies, `Connection: close`.

use crate::Error;
use crate::event::DecisionId;
use crate::head::HeadError;
use serde_json::{Map, Value, json};

/// The realm of the `Proxy-Authenticate` challenge.
pub const AUTH_REALM: &str = "iterion-sandbox";

/// The exact bytes of a successful CONNECT answer.
pub const CONNECT_ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

fn phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// The body's `message` for an https absolute-form request (spec §10.2); its `X-Iterion-Reason` is the error's
/// own shorter text.
const HTTPS_ABSOLUTE_MESSAGE: &str = "this proxy does not fetch https:// URLs for clients; configure the client to tunnel with CONNECT (HTTPS_PROXY)";

/// The `X-Iterion-Reason` for an error: the fixed phrases of §13.1, otherwise the message.
fn reason_header(err: &Error) -> String {
    match err.status() {
        407 => "proxy authentication required".into(),
        408 => "request head not received in time".into(),
        429 => "too many concurrent tunnels".into(),
        431 => "request head too large".into(),
        503 => "proxy unavailable".into(),
        _ => err.to_string(),
    }
}

/// The body's `message` for an error: the error's text, except where §10.2 gives the body a longer advice than
/// the reason header.
fn message(err: &Error) -> String {
    match err.code() {
        "https_absolute_form" => HTTPS_ABSOLUTE_MESSAGE.into(),
        _ => err.to_string(),
    }
}

fn render(status: u16, headers: &[(&str, &str)], body: &Value) -> Vec<u8> {
    let body = body.to_string();
    let mut out = format!("HTTP/1.1 {status} {}\r\n", phrase(status));
    out.push_str("Content-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\n");
    for (k, v) in headers {
        // Header values come from the proxy's own texts; strip anything that could end the line.
        let v: String = v.chars().filter(|c| !c.is_control()).collect();
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    // No Content-Length: the bytes of spec §13.2 have none, and `Connection: close` ends the body.
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}

/// Context added to an error body when the target is known.
#[derive(Debug, Default, Clone)]
pub(crate) struct ErrorContext<'a> {
    pub(crate) host: Option<&'a str>,
    pub(crate) port: Option<u16>,
    pub(crate) decision_id: Option<&'a DecisionId>,
}

/// The bytes of the response for a request-level error.
pub(crate) fn error_response(err: &Error, ctx: &ErrorContext<'_>) -> Vec<u8> {
    let status = err.status();
    let reason = reason_header(err);
    let mut headers: Vec<(&str, &str)> = vec![("X-Iterion-Reason", &reason)];
    let auth = format!("Basic realm=\"{AUTH_REALM}\"");
    if status == 407 {
        headers.insert(0, ("Proxy-Authenticate", &auth));
    }
    if status == 429 {
        headers.push(("Retry-After", "1"));
    }
    let id = ctx.decision_id.map(|d| d.to_string());
    if let Some(id) = &id {
        headers.push(("X-Iterion-Decision-Id", id));
    }
    let mut body = Map::new();
    body.insert("error".into(), json!(err.code()));
    body.insert("message".into(), json!(message(err)));
    if let Some(h) = ctx.host {
        body.insert("host".into(), json!(h));
    }
    if let Some(p) = ctx.port {
        body.insert("port".into(), json!(p));
    }
    if let Some(id) = &id {
        body.insert("decision_id".into(), json!(id));
    }
    render(status, &headers, &Value::Object(body))
}

/// A refusal as shown to the client.
#[derive(Debug, Clone)]
pub(crate) struct Refusal<'a> {
    pub(crate) decision_id: &'a DecisionId,
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    pub(crate) reason: &'a str,
    pub(crate) rule: &'a str,
    pub(crate) address: Option<&'a str>,
    /// Where to add a rule: `sandbox.network.rules`, or `--rule` for the standalone proxy.
    pub(crate) rules_hint: &'a str,
}

/// The sentence an agent can act on.
fn denial_message(r: &Refusal<'_>) -> String {
    match r.address {
        Some(a) => format!(
            "host '{}' (port {}) resolves to the non-global address {a}, which the sandbox refuses; if the workflow needs it, add an explicit IP or CIDR rule for it to {}",
            r.host, r.port, r.rules_hint
        ),
        None => format!(
            "host '{}' (port {}) is blocked by the sandbox network policy ({}); if the workflow needs it, add it to {}",
            r.host, r.port, r.rule, r.rules_hint
        ),
    }
}

/// The bytes of a 403 (spec §13.2).
pub(crate) fn forbidden_response(r: &Refusal<'_>) -> Vec<u8> {
    let id = r.decision_id.to_string();
    let headers = [
        ("X-Iterion-Reason", r.reason),
        ("X-Iterion-Decision-Id", id.as_str()),
    ];
    let mut body = Map::new();
    body.insert("decision_id".into(), json!(id));
    body.insert("host".into(), json!(r.host));
    body.insert("port".into(), json!(r.port));
    body.insert("reason".into(), json!(r.reason));
    body.insert("rule".into(), json!(r.rule));
    if let Some(a) = r.address {
        body.insert("address".into(), json!(a));
    }
    body.insert("message".into(), json!(denial_message(r)));
    render(403, &headers, &Value::Object(body))
}

/// The answer to a request head the parser refused.
pub(crate) fn head_error(e: HeadError) -> Error {
    match e {
        HeadError::TooLarge | HeadError::TooManyHeaders => {
            Error::client(431, "head_too_large", "request head too large")
        }
        HeadError::Malformed(m) => Error::client(400, "bad_request", m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap_or_default()
    }

    #[test]
    fn auth_required_is_byte_exact() {
        let e = Error::client(407, "proxy_auth_required", "proxy authentication required");
        insta::assert_snapshot!(text(error_response(&e, &ErrorContext::default())));
    }

    #[test]
    fn too_many_tunnels_has_retry_after() {
        let e = Error::client(429, "too_many_tunnels", "too many concurrent tunnels");
        insta::assert_snapshot!(text(error_response(&e, &ErrorContext::default())));
    }

    #[test]
    fn https_absolute_form_has_a_short_reason_and_a_longer_message() {
        let e = Error::client(
            400,
            "https_absolute_form",
            "https absolute-form is not supported; use CONNECT",
        );
        insta::assert_snapshot!(text(error_response(&e, &ErrorContext::default())));
    }

    #[test]
    fn forbidden_is_byte_exact() {
        let id = DecisionId::fixed("0194f7e2-9a3b-7c41-8d20-5e6f7a8b9c0d");
        let r = Refusal {
            decision_id: &id,
            host: "evil.example",
            port: 443,
            reason: "policy denial",
            rule: "no rule matched",
            address: None,
            rules_hint: "sandbox.network.rules",
        };
        insta::assert_snapshot!(text(forbidden_response(&r)));
    }

    #[test]
    fn non_global_names_the_address() {
        let id = DecisionId::fixed("0194f7e2-9a3b-7c41-8d20-5e6f7a8b9c0d");
        let r = Refusal {
            decision_id: &id,
            host: "rebind.example",
            port: 443,
            reason: "non-global address",
            rule: "non-global address",
            address: Some("127.0.0.1"),
            rules_hint: "sandbox.network.rules",
        };
        insta::assert_snapshot!(text(forbidden_response(&r)));
    }
}
