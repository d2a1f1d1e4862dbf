//! Absolute-form `http://` forwarding (spec §10.2, §10.3): origin-form upstream, hop-by-hop headers removed,
//! bodies streamed with their framing checked, upstream connections pooled per (pinned address, port, host).

use crate::Error;
use crate::head::{
    Framing, HeadLimits, Headers, RequestHead, ResponseHead, Version, find_head_end, parse_response_head,
    response_framing,
};
use crate::net::{AsyncIo, BoxIo};
use crate::response::{ErrorContext, error_response};
use crate::shared::{Next, Shared, dial};
use iterion_netpolicy::{Host, Target};
use std::io;
use std::net::{IpAddr, SocketAddr};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Duration, Instant};

/// Longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 8 * 1024;

/// Hop-by-hop headers (spec §10.3); `Content-Length` is end-to-end and kept.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// An upstream connection with the bytes read past the last message.
struct Upstream {
    io: BoxIo,
    buf: Vec<u8>,
    addr: SocketAddr,
}

/// One allowed forward request.
pub(crate) struct ForwardRequest<'a> {
    pub(crate) head: &'a RequestHead,
    pub(crate) path: &'a str,
    pub(crate) target: &'a Target,
    pub(crate) framing: Framing,
    pub(crate) addresses: &'a [IpAddr],
}

/// The `Host` header value for the upstream: the authority, with `:port` unless it is 80.
pub(crate) fn host_header(t: &Target) -> String {
    let host = match &t.host {
        Host::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
        h => h.to_string(),
    };
    if t.port == 80 {
        host
    } else {
        format!("{host}:{}", t.port)
    }
}

/// Header names listed in `Connection` headers (also hop-by-hop).
pub(crate) fn connection_tokens(headers: &[(String, String)]) -> Vec<String> {
    headers
        .values("connection")
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .collect()
}

/// Whether `name` is dropped when relaying: a hop-by-hop header, or one named in `Connection`. `Content-Length`
/// stays whatever `Connection` says: the proxy relays the body by it, so dropping it would let the next hop read
/// the body as another message (request smuggling, or an undelimited response).
pub(crate) fn is_hop(name: &str, listed: &[String]) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
        || (!name.eq_ignore_ascii_case("content-length")
            && listed.iter().any(|l| name.eq_ignore_ascii_case(l)))
}

fn request_bytes(req: &ForwardRequest<'_>) -> Vec<u8> {
    let listed = connection_tokens(&req.head.headers);
    let mut out = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\n",
        req.head.method,
        req.path,
        host_header(req.target)
    );
    for (name, value) in &req.head.headers {
        if name.eq_ignore_ascii_case("host") || is_hop(name, &listed) {
            continue;
        }
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if req.framing == Framing::Chunked {
        out.push_str("Transfer-Encoding: chunked\r\n");
    }
    out.push_str("\r\n");
    out.into_bytes()
}

/// The response head relayed to a client speaking `client`. `close`: the proxy closes the client connection after
/// this response. An HTTP/1.0 client kept alive is told so (it assumes a close otherwise).
fn response_bytes(head: &ResponseHead, framing: Framing, close: bool, client: Version) -> Vec<u8> {
    let listed = connection_tokens(&head.headers);
    let mut out = format!("HTTP/1.1 {} {}\r\n", head.status, head.reason);
    for (name, value) in &head.headers {
        if is_hop(name, &listed) {
            continue;
        }
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if framing == Framing::Chunked {
        out.push_str("Transfer-Encoding: chunked\r\n");
    }
    if close && head.status >= 200 {
        out.push_str("Connection: close\r\n");
    } else if client == Version::Http10 && head.status >= 200 {
        out.push_str("Connection: keep-alive\r\n");
    }
    out.push_str("\r\n");
    out.into_bytes()
}

/// Whether the client asked to keep the connection open after this request.
pub(crate) fn client_keep_alive(head: &RequestHead) -> bool {
    let h = head.headers.as_slice();
    match head.version {
        Version::Http11 => !h.has_token("connection", "close") && !h.has_token("proxy-connection", "close"),
        Version::Http10 => {
            h.has_token("connection", "keep-alive") || h.has_token("proxy-connection", "keep-alive")
        }
    }
}

pub(crate) fn upstream_keep_alive(head: &ResponseHead) -> bool {
    let h = head.headers.as_slice();
    match head.version {
        Version::Http11 => !h.has_token("connection", "close"),
        Version::Http10 => h.has_token("connection", "keep-alive"),
    }
}

/// Forward one request and relay its response. Errors before a response head reached the client become a
/// generated response; errors after it close the connection.
pub(crate) async fn forward<S: AsyncIo>(
    sh: &Shared,
    client: &mut S,
    cbuf: &mut Vec<u8>,
    req: ForwardRequest<'_>,
    ctx: &ErrorContext<'_>,
) -> Next {
    let host_key = req.target.host.to_string();
    let request = request_bytes(&req);
    let expect_continue = req.head.headers.as_slice().has_token("expect", "100-continue");
    let mut pooled = true;
    let mut up = match take_pooled(sh, &req, &host_key) {
        Some(u) => u,
        None => {
            pooled = false;
            match dial(sh, req.addresses, req.target.port).await {
                Ok((io, addr)) => Upstream {
                    io,
                    buf: Vec::new(),
                    addr,
                },
                Err(e) => return reply(client, &e, ctx).await,
            }
        }
    };
    // A pooled connection the upstream closed meanwhile fails at once: retry once on a fresh one when the request
    // has no body (nothing of the client's was consumed yet).
    let mut sent = send_head(&mut up, &request).await;
    if sent.is_err() && pooled && req.framing == Framing::Empty {
        match dial(sh, req.addresses, req.target.port).await {
            Ok((io, addr)) => {
                up = Upstream {
                    io,
                    buf: Vec::new(),
                    addr,
                };
                sent = send_head(&mut up, &request).await;
            }
            Err(e) => return reply(client, &e, ctx).await,
        }
    }
    if sent.is_err() {
        return reply(
            client,
            &Error::upstream(502, "upstream_failed", "upstream request failed"),
            ctx,
        )
        .await;
    }
    let limits = sh.head_limits_for_responses();
    let mut body_sent = false;
    if !expect_continue {
        if let Err(e) = copy_body(client, cbuf, &mut up.io, req.framing).await {
            return reply(client, &body_error(&e), ctx).await;
        }
        body_sent = true;
    }
    // Response heads: relay interim 1xx heads, then the final one.
    let (head, framing) = loop {
        let head =
            match read_response_head(&mut up, &limits, sh.limits.upstream_response_timeout, &sh.hard).await {
                Ok(h) => h,
                Err(e) => return reply(client, &e, ctx).await,
            };
        if head.status == 101 {
            return reply(
                client,
                &Error::upstream(502, "upstream_failed", "upstream request failed"),
                ctx,
            )
            .await;
        }
        if head.status / 100 == 1 {
            // No interim responses to an HTTP/1.0 client (RFC 9110 §15.2).
            if req.head.version == Version::Http11
                && client
                    .write_all(&response_bytes(&head, Framing::Empty, false, Version::Http11))
                    .await
                    .is_err()
            {
                return Next::Close;
            }
            if head.status == 100 && !body_sent {
                if let Err(e) = copy_body(client, cbuf, &mut up.io, req.framing).await {
                    return reply(client, &body_error(&e), ctx).await;
                }
                body_sent = true;
            }
            continue;
        }
        match response_framing(&req.head.method, &head) {
            Ok(f) => break (head, f),
            Err(_) => {
                return reply(
                    client,
                    &Error::upstream(502, "upstream_failed", "upstream request failed"),
                    ctx,
                )
                .await;
            }
        }
    };
    // An HTTP/1.0 client cannot read a chunked body (RFC 9112 §6.1): it gets the decoded bytes, ended by the
    // close.
    let dechunk = framing == Framing::Chunked && req.head.version == Version::Http10;
    let client_framing = if dechunk { Framing::UntilClose } else { framing };
    // A final response before the body was sent (`Expect` refused): the client's body is unread, so close.
    let keep_client = client_keep_alive(req.head) && body_sent && client_framing != Framing::UntilClose;
    let keep_upstream = upstream_keep_alive(&head) && body_sent && framing != Framing::UntilClose;
    if client
        .write_all(&response_bytes(
            &head,
            client_framing,
            !keep_client,
            req.head.version,
        ))
        .await
        .is_err()
    {
        return Next::Close;
    }
    let copied = tokio::select! {
        r = async {
            if dechunk {
                copy_dechunked(&mut up.io, &mut up.buf, client).await
            } else {
                copy_body_from(&mut up.io, &mut up.buf, client, framing).await
            }
        } => r,
        () = sh.hard.cancelled() => Err(io::ErrorKind::Interrupted.into()),
    };
    if copied.is_err() {
        return Next::Close;
    }
    if keep_upstream && up.buf.is_empty() {
        sh.pool.put((up.addr, host_key), up.io);
    }
    if keep_client { Next::KeepAlive } else { Next::Close }
}

fn take_pooled(sh: &Shared, req: &ForwardRequest<'_>, host: &str) -> Option<Upstream> {
    req.addresses.iter().find_map(|ip| {
        let addr = SocketAddr::new(*ip, req.target.port);
        sh.pool.take(&(addr, host.to_owned())).map(|io| Upstream {
            io,
            buf: Vec::new(),
            addr,
        })
    })
}

async fn send_head(up: &mut Upstream, request: &[u8]) -> io::Result<()> {
    up.io.write_all(request).await?;
    up.io.flush().await
}

/// The answer when the request body could not be relayed: a malformed chunked body is the client's error (400);
/// anything else failed on the way upstream (502).
fn body_error(e: &io::Error) -> Error {
    if e.kind() == io::ErrorKind::InvalidData {
        Error::client(400, "bad_request", "malformed chunked body")
    } else {
        Error::upstream(502, "upstream_failed", "upstream request failed")
    }
}

async fn reply<S: AsyncIo>(client: &mut S, e: &Error, ctx: &ErrorContext<'_>) -> Next {
    let _ = client.write_all(&error_response(e, ctx)).await;
    Next::Close
}

impl Shared {
    fn head_limits_for_responses(&self) -> HeadLimits {
        // Responses get a larger head budget than requests: the upstream is not the party being limited.
        HeadLimits {
            max_head_bytes: 64 * 1024,
            max_headers: 256,
        }
    }
}

async fn read_response_head(
    up: &mut Upstream,
    limits: &HeadLimits,
    timeout: Duration,
    hard: &tokio_util::sync::CancellationToken,
) -> Result<ResponseHead, Error> {
    let failed = || Error::upstream(502, "upstream_failed", "upstream request failed");
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(end) = find_head_end(&up.buf) {
            let head = parse_response_head(&up.buf[..end], limits).map_err(|_| failed())?;
            up.buf.drain(..end);
            return Ok(head);
        }
        if up.buf.len() > limits.max_head_bytes {
            return Err(failed());
        }
        up.buf.reserve(4096);
        tokio::select! {
            r = up.io.read_buf(&mut up.buf) => match r {
                Ok(0) | Err(_) => return Err(failed()),
                Ok(_) => {}
            },
            () = tokio::time::sleep_until(deadline) => {
                return Err(Error::upstream(504, "upstream_timeout", "upstream response timeout"));
            }
            () = hard.cancelled() => return Err(Error::unavailable()),
        }
    }
}

/// Copy the client's request body (already-buffered bytes first) to the upstream.
async fn copy_body<S: AsyncIo>(
    client: &mut S,
    cbuf: &mut Vec<u8>,
    up: &mut BoxIo,
    framing: Framing,
) -> io::Result<()> {
    copy_body_from(client, cbuf, up, framing).await
}

/// Copy one message body of `framing` from `r` (with `rbuf` holding bytes already read) to `w`.
pub(crate) async fn copy_body_from<R, W>(
    r: &mut R,
    rbuf: &mut Vec<u8>,
    w: &mut W,
    framing: Framing,
) -> io::Result<()>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    match framing {
        Framing::Empty => Ok(()),
        Framing::Length(n) => copy_exact(r, rbuf, w, n).await,
        Framing::Chunked => copy_chunked(r, rbuf, w).await,
        Framing::UntilClose => {
            w.write_all(rbuf).await?;
            rbuf.clear();
            tokio::io::copy(r, w).await?;
            w.flush().await
        }
    }
}

async fn copy_exact<R, W>(r: &mut R, rbuf: &mut Vec<u8>, w: &mut W, n: u64) -> io::Result<()>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let take = (n.min(rbuf.len() as u64)) as usize;
    w.write_all(&rbuf[..take]).await?;
    rbuf.drain(..take);
    let mut left = n - take as u64;
    let mut chunk = vec![0u8; (left.min(16 * 1024)) as usize];
    while left > 0 {
        let want = (left.min(chunk.len() as u64)) as usize;
        let got = r.read(&mut chunk[..want]).await?;
        if got == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        w.write_all(&chunk[..got]).await?;
        left -= got as u64;
    }
    w.flush().await
}

/// Read one CRLF-terminated line (including the CRLF) from `rbuf`, reading more from `r` as needed.
pub(crate) async fn read_line<R>(r: &mut R, rbuf: &mut Vec<u8>) -> io::Result<Vec<u8>>
where
    R: AsyncRead + Unpin + ?Sized,
{
    loop {
        if let Some(p) = rbuf.windows(2).position(|w| w == b"\r\n") {
            return Ok(rbuf.drain(..p + 2).collect());
        }
        if rbuf.len() > MAX_LINE {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "chunk line too long"));
        }
        rbuf.reserve(1024);
        if r.read_buf(rbuf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// The size of a chunk from its size line (`1a;ext=v\r\n`, as `read_line` returns it); extensions are ignored.
///
/// Strict, because the line is relayed verbatim and the next parser must not read it differently (RFC 9112
/// §7.1): the size is hexadecimal digits only (no sign, no leading white space), white space is allowed only
/// before a `;`, and the line holds no control character.
pub(crate) fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, "malformed chunked body");
    let text = line.strip_suffix(b"\r\n").ok_or_else(invalid)?;
    if text.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(invalid());
    }
    let size_text = match text.iter().position(|&b| b == b';') {
        Some(p) => text[..p].trim_ascii_end(),
        None => text,
    };
    if size_text.is_empty() || size_text.len() > 15 || !size_text.iter().all(u8::is_ascii_hexdigit) {
        return Err(invalid());
    }
    let size_text = std::str::from_utf8(size_text).map_err(|_| invalid())?;
    u64::from_str_radix(size_text, 16).map_err(|_| invalid())
}

/// Relay a chunked body verbatim while parsing it to find where it ends.
async fn copy_chunked<R, W>(r: &mut R, rbuf: &mut Vec<u8>, w: &mut W) -> io::Result<()>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, "malformed chunked body");
    loop {
        let line = read_line(r, rbuf).await?;
        let size = chunk_size(&line)?;
        w.write_all(&line).await?;
        if size == 0 {
            loop {
                let trailer = read_line(r, rbuf).await?;
                w.write_all(&trailer).await?;
                if trailer == b"\r\n" {
                    return w.flush().await;
                }
            }
        }
        copy_exact(r, rbuf, w, size).await?;
        let crlf = read_line(r, rbuf).await?;
        if crlf != b"\r\n" {
            return Err(invalid());
        }
        w.write_all(&crlf).await?;
    }
}

/// Decode a chunked body from `r` (with `rbuf` holding bytes already read) and write only its data to `w`;
/// extensions and trailers are dropped.
async fn copy_dechunked<R, W>(r: &mut R, rbuf: &mut Vec<u8>, w: &mut W) -> io::Result<()>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, "malformed chunked body");
    loop {
        let size = chunk_size(&read_line(r, rbuf).await?)?;
        if size == 0 {
            while read_line(r, rbuf).await? != b"\r\n" {}
            return w.flush().await;
        }
        copy_exact(r, rbuf, w, size).await?;
        if read_line(r, rbuf).await? != b"\r\n" {
            return Err(invalid());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_lines() {
        let size = |l: &str| chunk_size(l.as_bytes()).ok();
        assert_eq!(size("1a\r\n"), Some(26));
        assert_eq!(size("0\r\n"), Some(0));
        assert_eq!(size("5;ext=v\r\n"), Some(5));
        assert_eq!(size("5 ;ext\r\n"), Some(5));
        for bad in [
            "+5\r\n",
            " 5\r\n",
            "5 \r\n",
            "-5\r\n",
            "0x5\r\n",
            "\r\n",
            "5",
            "5\n\r\n",
            "1234567890abcdef\r\n",
        ] {
            assert_eq!(size(bad), None, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn dechunked_bodies() {
        let input = b"3;x\r\nabc\r\n4\r\ndefg\r\n0\r\nT: 1\r\n\r\nNEXT";
        let mut rbuf = input[..2].to_vec();
        let mut r = &input[2..];
        let mut out = Vec::new();
        assert!(copy_dechunked(&mut r, &mut rbuf, &mut out).await.is_ok());
        assert_eq!(out, b"abcdefg");
        assert_eq!(
            [rbuf.as_slice(), r].concat(),
            b"NEXT",
            "the bytes after the body are left unread"
        );
        let mut rbuf = Vec::new();
        let mut out = Vec::new();
        assert!(
            copy_dechunked(&mut &b"3\r\nabcX"[..], &mut rbuf, &mut out)
                .await
                .is_err()
        );
    }

    async fn chunked(input: &[u8], expect: Result<&[u8], ()>) {
        let mut rbuf = input[..input.len().min(3)].to_vec();
        let mut r = &input[rbuf.len()..];
        let mut out = Vec::new();
        let got = copy_chunked(&mut r, &mut rbuf, &mut out)
            .await
            .map(|()| out)
            .map_err(|_| ());
        assert_eq!(
            got.as_deref().map_err(|_| ()),
            expect,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }

    #[tokio::test]
    async fn chunked_bodies() {
        chunked(b"5\r\nhello\r\n0\r\n\r\nNEXT", Ok(b"5\r\nhello\r\n0\r\n\r\n")).await;
        chunked(
            b"5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\n",
            Ok(b"5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\n"),
        )
        .await;
        chunked(b"5\r\nhelloXX0\r\n\r\n", Err(())).await;
        chunked(b"zz\r\n", Err(())).await;
        chunked(b"5\r\nhel", Err(())).await;
    }

    fn check_rewrite(raw: &str, expect: &str) {
        let head = crate::head::parse_request_head(raw.as_bytes(), &HeadLimits::default());
        let Ok(head) = head else {
            panic!("head did not parse: {raw}")
        };
        let target = Target::parse("allowed.test:8080", None);
        let Ok(target) = target else { panic!("target") };
        let framing = crate::head::request_framing(&head.headers).unwrap_or(Framing::Empty);
        let req = ForwardRequest {
            head: &head,
            path: "/x",
            target: &target,
            framing,
            addresses: &[],
        };
        assert_eq!(String::from_utf8_lossy(&request_bytes(&req)), expect);
    }

    #[test]
    fn connection_cannot_remove_content_length() {
        check_rewrite(
            "POST http://allowed.test:8080/x HTTP/1.1\r\nConnection: content-length, x-a\r\nContent-Length: 3\r\nX-A: 1\r\n\r\n",
            "POST /x HTTP/1.1\r\nHost: allowed.test:8080\r\nContent-Length: 3\r\n\r\n",
        );
    }

    #[test]
    fn request_rewrite() {
        check_rewrite(
            "GET http://allowed.test:8080/x HTTP/1.1\r\nHost: other\r\nProxy-Authorization: Bearer t\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nAccept: */*\r\n\r\n",
            "GET /x HTTP/1.1\r\nHost: allowed.test:8080\r\nAccept: */*\r\n\r\n",
        );
        check_rewrite(
            "POST http://allowed.test:8080/x HTTP/1.0\r\nTransfer-Encoding: chunked\r\nTE: trailers\r\n\r\n",
            "POST /x HTTP/1.1\r\nHost: allowed.test:8080\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
    }
}
