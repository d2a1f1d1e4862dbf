//! HTTP/1.x message-head parsing: pure functions over bytes (no I/O), shared by the proxy and the fuzz target.
//!
//! The parser is deliberately strict: lines end in CRLF, header names are RFC 9110 tokens, obsolete line
//! folding is refused, and only HTTP/1.0 and HTTP/1.1 are accepted. Everything it refuses becomes a 400 (or a
//! 431 for the size limits) before the proxy decides anything.

use std::fmt;

/// Size limits applied to one request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadLimits {
    /// Maximum bytes of request line plus header fields (including the final empty line).
    pub max_head_bytes: usize,
    /// Maximum number of header fields.
    pub max_headers: usize,
}

impl Default for HeadLimits {
    fn default() -> Self {
        Self {
            max_head_bytes: 32 * 1024,
            max_headers: 100,
        }
    }
}

/// The HTTP version of a message head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `HTTP/1.0`.
    Http10,
    /// `HTTP/1.1`.
    Http11,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        })
    }
}

/// Why a head was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadError {
    /// The head is larger than [`HeadLimits::max_head_bytes`] (431).
    TooLarge,
    /// The head has more fields than [`HeadLimits::max_headers`] (431).
    TooManyHeaders,
    /// The head is malformed (400); the text says how.
    Malformed(&'static str),
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadError::TooLarge => f.write_str("request head too large"),
            HeadError::TooManyHeaders => f.write_str("too many header fields"),
            HeadError::Malformed(m) => f.write_str(m),
        }
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method, case preserved (methods are case-sensitive).
    pub method: String,
    /// The request target exactly as sent.
    pub target: String,
    /// The protocol version.
    pub version: Version,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The protocol version.
    pub version: Version,
    /// The status code.
    pub status: u16,
    /// The reason phrase (may be empty).
    pub reason: String,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the connection closes (responses only).
    UntilClose,
}

/// Case-insensitive lookup helpers over a header list.
pub trait Headers {
    /// Every value of header `name` (case-insensitive), in order.
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a;
    /// The first value of header `name`.
    fn header<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        self.values(name).next()
    }
    /// Whether any `name` header contains the comma-separated token `token` (case-insensitive).
    fn has_token(&self, name: &str, token: &str) -> bool {
        self.values(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }
}

impl Headers for [(String, String)] {
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The position just after the `\r\n\r\n` that ends a head, if `buf` contains one.
///
/// Leading empty lines (`\r\n`) before the start line are part of the head and are ignored by the parsers.
pub fn find_head_end(buf: &[u8]) -> Option<usize> {
    let mut start = 0;
    while buf[start..].starts_with(b"\r\n") {
        start += 2;
    }
    buf[start..]
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| start + p + 4)
}

/// Whether `b` is an RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn parse_version(v: &str) -> Result<Version, HeadError> {
    match v {
        "HTTP/1.1" => Ok(Version::Http11),
        "HTTP/1.0" => Ok(Version::Http10),
        _ => Err(HeadError::Malformed("unsupported protocol version")),
    }
}

/// Split a complete head (as delimited by [`find_head_end`]) into its start line and field lines.
fn split_lines(head: &[u8], limits: &HeadLimits) -> Result<(String, Vec<(String, String)>), HeadError> {
    if head.len() > limits.max_head_bytes {
        return Err(HeadError::TooLarge);
    }
    let mut rest = head;
    while rest.starts_with(b"\r\n") {
        rest = &rest[2..];
    }
    let Some(body) = rest.strip_suffix(b"\r\n\r\n") else {
        return Err(HeadError::Malformed("incomplete request head"));
    };
    let text =
        std::str::from_utf8(body).map_err(|_| HeadError::Malformed("request head is not valid UTF-8"))?;
    let mut lines = text.split("\r\n");
    let start = lines.next().unwrap_or_default();
    if start.contains('\n') || start.contains('\r') {
        return Err(HeadError::Malformed("bare line feed in request head"));
    }
    let mut headers = Vec::new();
    for line in lines {
        if headers.len() == limits.max_headers {
            return Err(HeadError::TooManyHeaders);
        }
        if line.starts_with([' ', '\t']) {
            return Err(HeadError::Malformed("obsolete line folding is not accepted"));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(HeadError::Malformed("header field without a colon"));
        };
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(HeadError::Malformed("malformed header name"));
        }
        let value = value.trim_matches([' ', '\t']);
        if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(HeadError::Malformed("control character in header value"));
        }
        headers.push((name.to_owned(), value.to_owned()));
    }
    Ok((start.to_owned(), headers))
}

/// Parse a complete request head (`head` ends with `\r\n\r\n`).
pub fn parse_request_head(head: &[u8], limits: &HeadLimits) -> Result<RequestHead, HeadError> {
    let (start, headers) = split_lines(head, limits)?;
    let mut parts = start.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed("malformed request line"));
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(HeadError::Malformed("malformed method"));
    }
    if target.is_empty() || target.bytes().any(|b| b <= 0x20 || b == 0x7f) {
        return Err(HeadError::Malformed("malformed request target"));
    }
    let version = parse_version(version)?;
    Ok(RequestHead {
        method: method.to_owned(),
        target: target.to_owned(),
        version,
        headers,
    })
}

/// Parse a complete response head (`head` ends with `\r\n\r\n`).
pub fn parse_response_head(head: &[u8], limits: &HeadLimits) -> Result<ResponseHead, HeadError> {
    let (start, headers) = split_lines(head, limits)?;
    let mut parts = start.splitn(3, ' ');
    let version = parse_version(parts.next().unwrap_or_default())?;
    let code = parts.next().unwrap_or_default();
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HeadError::Malformed("malformed status code"));
    }
    let status = code
        .parse()
        .map_err(|_| HeadError::Malformed("malformed status code"))?;
    let reason = parts.next().unwrap_or_default().to_owned();
    Ok(ResponseHead {
        version,
        status,
        reason,
        headers,
    })
}

/// The framing of a request body, with the smuggling guards of spec §10.2: both `Content-Length` and
/// `Transfer-Encoding`, differing `Content-Length` values, or a final coding other than `chunked` are refused.
pub fn request_framing(headers: &[(String, String)]) -> Result<Framing, HeadError> {
    match message_framing(headers)? {
        Some(f) => Ok(f),
        None => Ok(Framing::Empty),
    }
}

/// The framing of a response body to a request with method `method`.
pub fn response_framing(method: &str, head: &ResponseHead) -> Result<Framing, HeadError> {
    if method == "HEAD" || head.status / 100 == 1 || head.status == 204 || head.status == 304 {
        return Ok(Framing::Empty);
    }
    Ok(message_framing(&head.headers)?.unwrap_or(Framing::UntilClose))
}

fn message_framing(headers: &[(String, String)]) -> Result<Option<Framing>, HeadError> {
    let te: Vec<&str> = headers
        .values("transfer-encoding")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let has_cl = headers.values("content-length").next().is_some();
    if !te.is_empty() {
        if has_cl {
            return Err(HeadError::Malformed("both content-length and transfer-encoding"));
        }
        return match te.last() {
            Some(last) if last.eq_ignore_ascii_case("chunked") => Ok(Some(Framing::Chunked)),
            _ => Err(HeadError::Malformed("transfer-encoding must end in chunked")),
        };
    }
    let mut length: Option<u64> = None;
    for v in headers.values("content-length").flat_map(|v| v.split(',')) {
        let v = v.trim();
        if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(HeadError::Malformed("malformed content-length"));
        }
        let n: u64 = v
            .parse()
            .map_err(|_| HeadError::Malformed("malformed content-length"))?;
        if length.is_some_and(|l| l != n) {
            return Err(HeadError::Malformed("differing content-length values"));
        }
        length = Some(n);
    }
    Ok(length.map(|n| {
        if n == 0 {
            Framing::Empty
        } else {
            Framing::Length(n)
        }
    }))
}

/// The parsed form of a request target the proxy accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyTarget {
    /// `CONNECT host:port` (authority form; the text is the authority).
    Authority(String),
    /// `http://authority/path?query`: the authority text and the origin-form path (at least `/`).
    Http {
        /// The authority, as sent (no userinfo).
        authority: String,
        /// The origin-form target sent upstream (`/` when the URI has no path).
        path: String,
    },
}

/// Why a request target is not one the proxy serves; each maps to a 400 error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetFormError {
    /// CONNECT target not `host:port` (`invalid_target`).
    ConnectNotAuthority,
    /// `https://` absolute form (`https_absolute_form`).
    HttpsAbsolute,
    /// Origin form or `*` (`not_a_proxy_request`).
    NotAProxyRequest,
    /// Another URI scheme (`unsupported_scheme`).
    UnsupportedScheme,
    /// Userinfo in the URI (`bad_request`).
    Userinfo,
    /// Malformed absolute URI (`invalid_target`).
    Malformed,
}

/// Classify a request target by method (spec §10).
pub fn proxy_target(method: &str, target: &str) -> Result<ProxyTarget, (TargetFormError, String)> {
    if method == "CONNECT" {
        if target.contains('/') || target.contains('@') || !has_port(target) {
            return Err((TargetFormError::ConnectNotAuthority, String::new()));
        }
        return Ok(ProxyTarget::Authority(target.to_owned()));
    }
    if target.starts_with('/') || target == "*" {
        return Err((TargetFormError::NotAProxyRequest, String::new()));
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err((TargetFormError::NotAProxyRequest, String::new()));
    };
    if scheme.eq_ignore_ascii_case("https") {
        return Err((TargetFormError::HttpsAbsolute, String::new()));
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err((TargetFormError::UnsupportedScheme, scheme.to_ascii_lowercase()));
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err((TargetFormError::Userinfo, String::new()));
    }
    if authority.is_empty() {
        return Err((TargetFormError::Malformed, String::new()));
    }
    let tail = tail.split('#').next().unwrap_or_default();
    let path = if tail.starts_with('/') {
        tail.to_owned()
    } else {
        format!("/{tail}")
    };
    Ok(ProxyTarget::Http {
        authority: authority.to_owned(),
        path,
    })
}

/// Whether an authority carries an explicit `:port` (bracketed IPv6 aware).
fn has_port(authority: &str) -> bool {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest
            .split_once(']')
            .is_some_and(|(_, after)| after.starts_with(':'));
    }
    authority.matches(':').count() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_req(input: &str, expect: &str) {
        let got = match parse_request_head(
            input.as_bytes(),
            &HeadLimits {
                max_head_bytes: 200,
                max_headers: 3,
            },
        ) {
            Ok(h) => format!("{} {} {} {:?}", h.method, h.target, h.version, h.headers),
            Err(e) => format!("error: {e}"),
        };
        assert_eq!(got, expect, "input {input:?}");
    }

    #[test]
    fn request_heads() {
        check_req("GET / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1 []");
        check_req(
            "\r\nGET / HTTP/1.0\r\nA:  b \r\n\r\n",
            r#"GET / HTTP/1.0 [("A", "b")]"#,
        );
        check_req("PRI * HTTP/2.0\r\n\r\n", "error: unsupported protocol version");
        check_req("GET  / HTTP/1.1\r\n\r\n", "error: malformed request line");
        check_req(
            "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
            "error: obsolete line folding is not accepted",
        );
        check_req("GET / HTTP/1.1\r\nA b: c\r\n\r\n", "error: malformed header name");
        check_req(
            "GET / HTTP/1.1\r\nA\r\n\r\n",
            "error: header field without a colon",
        );
        check_req(
            "GET / HTTP/1.1\nA: b\r\n\r\n",
            "error: bare line feed in request head",
        );
        check_req(
            "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n",
            "error: too many header fields",
        );
        check_req(
            &format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(200)),
            "error: request head too large",
        );
        check_req("G(T / HTTP/1.1\r\n\r\n", "error: malformed method");
    }

    fn check_framing(headers: &[(&str, &str)], expect: &str) {
        let h: Vec<(String, String)> = headers
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let got = match request_framing(&h) {
            Ok(f) => format!("{f:?}"),
            Err(e) => format!("error: {e}"),
        };
        assert_eq!(got, expect, "headers {headers:?}");
    }

    #[test]
    fn framing() {
        check_framing(&[], "Empty");
        check_framing(&[("Content-Length", "5")], "Length(5)");
        check_framing(&[("Content-Length", "5"), ("content-length", "5")], "Length(5)");
        check_framing(
            &[("Content-Length", "5, 6")],
            "error: differing content-length values",
        );
        check_framing(&[("Content-Length", "+5")], "error: malformed content-length");
        check_framing(&[("Transfer-Encoding", "gzip, chunked")], "Chunked");
        check_framing(
            &[("Transfer-Encoding", "chunked, gzip")],
            "error: transfer-encoding must end in chunked",
        );
        check_framing(
            &[("Content-Length", "5"), ("Transfer-Encoding", "chunked")],
            "error: both content-length and transfer-encoding",
        );
    }

    fn check_target(method: &str, target: &str, expect: &str) {
        let got = match proxy_target(method, target) {
            Ok(t) => format!("{t:?}"),
            Err((e, s)) => format!("error: {e:?} {s}"),
        };
        assert_eq!(got, expect, "{method} {target}");
    }

    #[test]
    fn targets() {
        check_target("CONNECT", "a.test:443", r#"Authority("a.test:443")"#);
        check_target("CONNECT", "[::1]:443", r#"Authority("[::1]:443")"#);
        check_target("CONNECT", "a.test", "error: ConnectNotAuthority ");
        check_target("CONNECT", "[::1]", "error: ConnectNotAuthority ");
        check_target(
            "GET",
            "http://a.test/x?y#z",
            r#"Http { authority: "a.test", path: "/x?y" }"#,
        );
        check_target(
            "GET",
            "http://a.test",
            r#"Http { authority: "a.test", path: "/" }"#,
        );
        check_target(
            "GET",
            "http://a.test?q",
            r#"Http { authority: "a.test", path: "/?q" }"#,
        );
        check_target("GET", "HTTPS://a.test/", "error: HttpsAbsolute ");
        check_target("GET", "ftp://a.test/", "error: UnsupportedScheme ftp");
        check_target("GET", "/x", "error: NotAProxyRequest ");
        check_target("OPTIONS", "*", "error: NotAProxyRequest ");
        check_target("GET", "http://u:p@a.test/", "error: Userinfo ");
        check_target("GET", "http:///x", "error: Malformed ");
    }

    #[test]
    fn head_end() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(find_head_end(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"), Some(22));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n"), None);
    }

    #[test]
    fn response_heads() {
        let h = parse_response_head(b"HTTP/1.1 204 No Content\r\nX: y\r\n\r\n", &HeadLimits::default());
        assert_eq!(
            h.as_ref()
                .map(|h| (h.status, h.reason.as_str(), response_framing("GET", h))),
            Ok((204, "No Content", Ok(Framing::Empty)))
        );
        let h = parse_response_head(b"HTTP/1.1 200\r\n\r\n", &HeadLimits::default());
        assert_eq!(
            h.as_ref().map(|h| response_framing("GET", h)),
            Ok(Ok(Framing::UntilClose))
        );
        let h = parse_response_head(b"HTTP/1.1 2000 x\r\n\r\n", &HeadLimits::default());
        assert_eq!(h, Err(HeadError::Malformed("malformed status code")));
    }
}
