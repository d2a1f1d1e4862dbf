//! HTTP/1.1 inside an intercepted tunnel (spec §14.3 step 6, §14.5, §14.7): requests relayed one by one,
//! placeholders substituted for bound hosts and refused elsewhere, real values refused where they are not bound,
//! responses from bound hosts scrubbed. Plain-HTTP forward requests to hosts of a binding that allows plain HTTP
//! ([`forward_plain`]) go through the same steps.

use super::context::{Outcome, TunnelCtx};
use super::inspector::Inspector;
use super::scan::{Detector, Hit, Replacer, replace_all};
use crate::Error;
use crate::event::{DecisionId, ProxyEvent};
use crate::forward::{
    chunk_size, client_keep_alive, connection_tokens, copy_body_from, host_header, is_hop, read_line,
    upstream_keep_alive,
};
use crate::head::{
    Framing, HeadError, HeadLimits, Headers, RequestHead, ResponseHead, Version, find_head_end,
    parse_request_head, parse_response_head, request_framing, response_framing,
};
use crate::response::{ErrorContext, Refusal, error_response, forbidden_response, head_error};
use crate::shared::{Next, Shared, dial};
use iterion_netpolicy::Target;
use std::io;
use std::net::IpAddr;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Duration, Instant};
use zeroize::Zeroizing;

/// The largest body buffered for substitution, scanning or scrubbing.
pub(crate) const MAX_BODY: u64 = 1024 * 1024;

/// Read one request head into `buf` within `timeout`. `Ok(None)`: the client closed or stayed silent.
pub(crate) async fn read_head<C>(
    sh: &Shared,
    client: &mut C,
    buf: &mut Vec<u8>,
    timeout: Duration,
) -> Result<Option<RequestHead>, Error>
where
    C: AsyncRead + Unpin + ?Sized,
{
    let limits = HeadLimits {
        max_head_bytes: sh.limits.max_head_bytes,
        max_headers: sh.limits.max_headers,
    };
    let mut deadline = Instant::now() + timeout;
    let mut started = !buf.is_empty();
    loop {
        if let Some(end) = find_head_end(buf) {
            let parsed = parse_request_head(&buf[..end], &limits);
            buf.drain(..end);
            return parsed.map(Some).map_err(head_error);
        }
        if buf.len() > limits.max_head_bytes {
            return Err(head_error(HeadError::TooLarge));
        }
        buf.reserve(4096);
        tokio::select! {
            r = client.read_buf(buf) => match r {
                Ok(0) | Err(_) => return Ok(None),
                Ok(_) => {
                    if !started {
                        started = true;
                        deadline = Instant::now() + sh.limits.head_timeout;
                    }
                }
            },
            () = tokio::time::sleep_until(deadline) => {
                return if started {
                    Err(Error::client(408, "request_timeout", "request head not received in time"))
                } else {
                    Ok(None)
                };
            }
        }
    }
}

/// Reads a chunked body piece by piece (chunk extensions and trailers are dropped).
#[derive(Debug, Default)]
struct Chunked {
    done: bool,
}

impl Chunked {
    /// The next piece of data; `None` after the last chunk and the trailers.
    async fn next<R>(&mut self, r: &mut R, rbuf: &mut Vec<u8>) -> io::Result<Option<Vec<u8>>>
    where
        R: AsyncRead + Unpin + ?Sized,
    {
        let invalid = || io::Error::new(io::ErrorKind::InvalidData, "malformed chunked body");
        if self.done {
            return Ok(None);
        }
        let size = chunk_size(&read_line(r, rbuf).await?)?;
        if size == 0 {
            loop {
                if read_line(r, rbuf).await? == b"\r\n" {
                    self.done = true;
                    return Ok(None);
                }
            }
        }
        let data = read_exact(r, rbuf, size.min(MAX_BODY))
            .await
            .and_then(|d| if size > MAX_BODY { Err(invalid()) } else { Ok(d) })?;
        if read_line(r, rbuf).await? != b"\r\n" {
            return Err(invalid());
        }
        Ok(Some(data))
    }
}

/// Exactly `n` bytes, buffered bytes first.
async fn read_exact<R>(r: &mut R, rbuf: &mut Vec<u8>, n: u64) -> io::Result<Vec<u8>>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let n = n as usize;
    while rbuf.len() < n {
        rbuf.reserve((n - rbuf.len()).min(64 * 1024));
        if r.read_buf(rbuf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(rbuf.drain(..n).collect())
}

fn chunk(data: &[u8]) -> Vec<u8> {
    if data.is_empty() {
        return Vec::new();
    }
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// A request body as the relay holds it.
enum Body {
    None,
    /// Complete and small enough to substitute in (at most [`MAX_BODY`]).
    Full(Vec<u8>),
    /// Too large: `pending` was read already (decoded), the rest is streamed through a detector.
    Stream {
        pending: Vec<u8>,
        source: Source,
    },
}

enum Source {
    Length(u64),
    Chunked(Chunked),
}

/// What to do after one request.
enum Step {
    Continue,
    Close(&'static str),
    Upgrade,
}

/// Where a request goes: inside an intercepted TLS tunnel, or forwarded from an absolute-form plain-HTTP request
/// (`path`: its origin-form target).
#[derive(Debug, Clone, Copy)]
enum Channel<'a> {
    Tls,
    Plain { path: &'a str },
}

/// A refusal of a placeholder or a value: the binding and the rule.
struct Leak {
    binding: usize,
    rule: String,
}

/// Whether a body of these headers can have placeholders substituted (§14.5): identity encoding and a JSON,
/// form or text type. (Size and framing are checked by the caller.)
fn substitutable(headers: &[(String, String)]) -> bool {
    let identity = headers
        .values("content-encoding")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .all(|c| c.is_empty() || c.eq_ignore_ascii_case("identity"));
    let ty = headers
        .header("content-type")
        .and_then(|t| t.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase());
    let text_type = matches!(
        ty.as_deref(),
        Some("application/json" | "application/x-www-form-urlencoded")
    ) || ty.as_deref().is_some_and(|t| t.starts_with("text/"));
    identity && text_type
}

/// Relay requests until one side closes, an error, a refusal, the idle timeout or shutdown.
pub(crate) async fn relay<C, U>(
    sh: &Shared,
    insp: &Inspector,
    client: &mut C,
    up: &mut U,
    ctx: &TunnelCtx,
) -> Outcome
where
    C: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
    U: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
{
    let mut out = Outcome::default();
    let mut cbuf = Vec::new();
    let mut ubuf = Vec::new();
    let end_of_life = sh.limits.tunnel_max_lifetime.map(|l| Instant::now() + l);
    loop {
        let lifetime = async {
            match end_of_life {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        let step = tokio::select! {
            s = one_request(sh, insp, client, up, &mut cbuf, &mut ubuf, ctx, &mut out) => s,
            () = lifetime => Step::Close("lifetime"),
            () = sh.hard.cancelled() => Step::Close("shutdown"),
        };
        match step {
            Step::Continue => continue,
            Step::Close(reason) => return Outcome { reason, ..out },
            Step::Upgrade => break,
        }
    }
    // After a 101 the connection is another protocol (WebSocket): relayed as is, frames not inspected.
    if !ubuf.is_empty() {
        if client.write_all(&ubuf).await.is_err() {
            return Outcome {
                reason: "error",
                ..out
            };
        }
        out.bytes_down += ubuf.len() as u64;
    }
    if !cbuf.is_empty() {
        if up.write_all(&cbuf).await.is_err() {
            return Outcome {
                reason: "error",
                ..out
            };
        }
        out.bytes_up += cbuf.len() as u64;
    }
    let copied = tokio::select! {
        r = tokio::io::copy_bidirectional(client, up) => r,
        () = sh.hard.cancelled() => return Outcome { reason: "shutdown", ..out },
    };
    match copied {
        Ok((a, b)) => Outcome {
            bytes_up: out.bytes_up + a,
            bytes_down: out.bytes_down + b,
            reason: "eof",
        },
        Err(_) => Outcome {
            reason: "error",
            ..out
        },
    }
}

/// One request read from the client, with the placeholders found in it.
struct Request {
    head: RequestHead,
    framing: Framing,
    /// `Expect: 100-continue` was answered here (and is not passed on).
    expect: bool,
    /// The bindings whose hosts match the target (under plain HTTP: those that allow it): their requests ask
    /// for identity encoding and their responses are scrubbed.
    bound: Vec<usize>,
    /// Placeholders and values in the target and the header values.
    found: Vec<Hit>,
    body: Body,
    /// Placeholders and values in the body (what was buffered of it).
    body_found: Vec<Hit>,
    /// Whether a body placeholder can be substituted there.
    body_safe: bool,
}

/// Decides whether a placeholder may be substituted, or a value passed, in this request (§14.5): its binding is
/// bound to the target's host (and allows plain HTTP when the request is plain), the `Host` header names that
/// host, and a placeholder's place is safe to rewrite.
struct Verdict<'a> {
    insp: &'a Inspector,
    ctx: &'a TunnelCtx,
    /// Whether the request is a plain-HTTP forward.
    plain: bool,
    /// The `Host` header, when it parses.
    authority: Option<Target>,
    /// Whether the `Host` header names the target's host and port (a plain request may omit it: the proxy
    /// writes the authority there).
    authority_ok: bool,
}

impl<'a> Verdict<'a> {
    fn new(insp: &'a Inspector, ctx: &'a TunnelCtx, head: &RequestHead, channel: Channel<'_>) -> Self {
        let plain = matches!(channel, Channel::Plain { .. });
        let host = head.headers.header("host");
        let authority = host.and_then(|h| Target::parse(h, Some(if plain { 80 } else { 443 })).ok());
        let authority_ok = match &authority {
            Some(t) => t.host == ctx.target.host && t.port == ctx.target.port,
            None => plain && host.is_none(),
        };
        Self {
            insp,
            ctx,
            plain,
            authority,
            authority_ok,
        }
    }

    /// The refusal of `hit` found at a place that is (`unsafe_place`) or is not safe to rewrite. A value needs
    /// no rewriting: only where it goes matters.
    fn leak(&self, hit: Hit, unsafe_place: bool) -> Option<Leak> {
        let idx = hit.binding();
        let b = &self.insp.bindings[idx];
        let rule = if !b.bound_to(&self.ctx.target) {
            format!("secret {} is not bound to {}", b.name, self.ctx.host)
        } else if self.plain && !b.plain_http {
            format!("secret {} requires TLS", b.name)
        } else if !self.authority_ok {
            match &self.authority {
                Some(t) if !b.bound_to(t) => format!("secret {} is not bound to {}", b.name, t.host),
                _ => format!("secret {} could not be substituted safely", b.name),
            }
        } else if unsafe_place && matches!(hit, Hit::Placeholder(_)) {
            format!("secret {} could not be substituted safely", b.name)
        } else {
            return None;
        };
        Some(Leak { binding: idx, rule })
    }

    /// The first refusal among the placeholders of the request.
    fn first_leak(&self, req: &Request) -> Option<Leak> {
        req.found
            .iter()
            .map(|&h| self.leak(h, false))
            .chain(req.body_found.iter().map(|&h| self.leak(h, !req.body_safe)))
            .flatten()
            .next()
    }
}

#[allow(clippy::too_many_arguments)]
async fn one_request<C, U>(
    sh: &Shared,
    insp: &Inspector,
    client: &mut C,
    up: &mut U,
    cbuf: &mut Vec<u8>,
    ubuf: &mut Vec<u8>,
    ctx: &TunnelCtx,
    out: &mut Outcome,
) -> Step
where
    C: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
    U: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
{
    let ectx = ErrorContext {
        host: Some(&ctx.host),
        port: Some(ctx.target.port),
        decision_id: Some(&ctx.decision_id),
    };
    let head = match read_head(sh, client, cbuf, sh.limits.tunnel_idle_timeout).await {
        Ok(Some(h)) => h,
        Ok(None) => return Step::Close("eof"),
        Err(e) => {
            let _ = client.write_all(&error_response(&e, &ectx)).await;
            return Step::Close("error");
        }
    };
    let req = match read_request(insp, client, cbuf, head, ctx, &ectx, Channel::Tls).await {
        Ok(r) => r,
        Err(step) => return step,
    };
    let verdict = Verdict::new(insp, ctx, &req.head, Channel::Tls);
    if let Some(leak) = verdict.first_leak(&req) {
        refuse(sh, insp, client, ctx, &req.head.method, &leak, DecisionId::new()).await;
        return Step::Close("secret leak");
    }
    send(
        sh,
        insp,
        client,
        up,
        cbuf,
        ubuf,
        ctx,
        out,
        req,
        &verdict,
        Channel::Tls,
    )
    .await
}

/// One plain-HTTP forward request to a host bound by a binding that allows plain HTTP: the policy allowed it,
/// `head` was read (bytes after it are in `cbuf`).
pub(crate) struct PlainForward<'a> {
    pub(crate) head: RequestHead,
    /// The origin-form target sent upstream.
    pub(crate) path: &'a str,
    /// The checked addresses to dial.
    pub(crate) addresses: &'a [IpAddr],
    /// The decision (the request's decision id, target and client).
    pub(crate) ctx: TunnelCtx,
}

/// Forward a plain-HTTP request with the steps of an intercepted one: placeholders substituted, values and
/// placeholders refused where they may not go (`403 secret leak` under the request's decision id), the
/// response scrubbed. `allowed` runs once the request is not refused, before the upstream is dialled (a fresh
/// connection; it is not pooled).
pub(crate) async fn forward_plain<C>(
    sh: &Shared,
    insp: &Inspector,
    client: &mut C,
    cbuf: &mut Vec<u8>,
    fwd: PlainForward<'_>,
    allowed: impl FnOnce(),
) -> Next
where
    C: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
{
    let PlainForward {
        head,
        path,
        addresses,
        ctx,
    } = fwd;
    let channel = Channel::Plain { path };
    let ectx = ErrorContext {
        host: Some(&ctx.host),
        port: Some(ctx.target.port),
        decision_id: Some(&ctx.decision_id),
    };
    let Ok(req) = read_request(insp, client, cbuf, head, &ctx, &ectx, channel).await else {
        return Next::Close;
    };
    let verdict = Verdict::new(insp, &ctx, &req.head, channel);
    if let Some(leak) = verdict.first_leak(&req) {
        let id = ctx.decision_id.clone();
        refuse(sh, insp, client, &ctx, &req.head.method, &leak, id).await;
        return Next::Close;
    }
    allowed();
    let mut up = match dial(sh, addresses, ctx.target.port).await {
        Ok((io, _)) => io,
        Err(e) => {
            let _ = client.write_all(&error_response(&e, &ectx)).await;
            return Next::Close;
        }
    };
    let mut ubuf = Vec::new();
    let mut out = Outcome::default();
    let step = tokio::select! {
        s = send(sh, insp, client, &mut up, cbuf, &mut ubuf, &ctx, &mut out, req, &verdict, channel) => s,
        () = sh.hard.cancelled() => Step::Close("shutdown"),
    };
    match step {
        Step::Continue => Next::KeepAlive,
        Step::Close(_) | Step::Upgrade => Next::Close,
    }
}

/// Send an accepted request upstream (placeholders substituted; a large body streamed through a detector) and
/// relay its response.
#[allow(clippy::too_many_arguments)]
async fn send<C, U>(
    sh: &Shared,
    insp: &Inspector,
    client: &mut C,
    up: &mut U,
    cbuf: &mut Vec<u8>,
    ubuf: &mut Vec<u8>,
    ctx: &TunnelCtx,
    out: &mut Outcome,
    req: Request,
    verdict: &Verdict<'_>,
    channel: Channel<'_>,
) -> Step
where
    C: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
    U: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
{
    let ectx = ErrorContext {
        host: Some(&ctx.host),
        port: Some(ctx.target.port),
        decision_id: Some(&ctx.decision_id),
    };
    // Substitute (every placeholder found here belongs to a binding bound to this host).
    let mut used: Vec<usize> = req
        .found
        .iter()
        .chain(req.body_found.iter())
        .filter_map(|h| match h {
            Hit::Placeholder(i) => Some(*i),
            Hit::Value(_) => None,
        })
        .collect();
    used.sort_unstable();
    used.dedup();
    let (bytes, counts) = substituted_request(insp, &req, &used, channel, &ctx.target);
    if up.write_all(&bytes).await.is_err() {
        return fail(client, &ectx).await;
    }
    out.bytes_up += bytes.len() as u64;
    drop(bytes);
    let Request {
        head, body, bound, ..
    } = req;
    // A large body: streamed through the detector; a placeholder, or a value that may not go there, aborts the
    // request before it is complete.
    if let Body::Stream { pending, source } = body {
        let needles = insp.needles(|i| verdict.leak(Hit::Value(i), false).is_some());
        match stream_request_body(Detector::new(needles), client, cbuf, up, pending, source, out).await {
            Ok(None) => {}
            Ok(Some(hit)) => {
                let leak = verdict.leak(hit, true).unwrap_or(Leak {
                    binding: hit.binding(),
                    rule: format!(
                        "secret {} could not be substituted safely",
                        insp.bindings[hit.binding()].name
                    ),
                });
                let id = match channel {
                    Channel::Tls => DecisionId::new(),
                    Channel::Plain { .. } => ctx.decision_id.clone(),
                };
                refuse(sh, insp, client, ctx, &head.method, &leak, id).await;
                return Step::Close("secret leak");
            }
            Err(_) => return fail(client, &ectx).await,
        }
    }
    if up.flush().await.is_err() {
        return fail(client, &ectx).await;
    }
    let origin_form = match channel {
        Channel::Tls => head.target.as_str(),
        Channel::Plain { path } => path,
    };
    report_substitutions(sh, insp, ctx, &head.method, origin_form, &used, &counts);
    relay_response(sh, insp, client, up, ubuf, &head, !bound.is_empty(), &ectx, out).await
}

/// Read the body of a request whose head was read and find its placeholders and values. `Err`: the step to
/// take instead (an error was answered).
#[allow(clippy::too_many_arguments)]
async fn read_request<C>(
    insp: &Inspector,
    client: &mut C,
    cbuf: &mut Vec<u8>,
    head: RequestHead,
    ctx: &TunnelCtx,
    ectx: &ErrorContext<'_>,
    channel: Channel<'_>,
) -> Result<Request, Step>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
{
    let framing = match request_framing(&head.headers) {
        Ok(f) => f,
        Err(e) => {
            let _ = client.write_all(&error_response(&head_error(e), ectx)).await;
            return Err(Step::Close("error"));
        }
    };
    // The body is read before anything goes upstream: answer `Expect: 100-continue` here (and do not pass it on).
    let expect = framing != Framing::Empty && head.headers.as_slice().has_token("expect", "100-continue");
    if expect && client.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err() {
        return Err(Step::Close("error"));
    }
    let bound = match channel {
        Channel::Tls => insp.bound(&ctx.target),
        Channel::Plain { .. } => insp.plain_bound(&ctx.target),
    };
    let needles = insp.needles(|_| true);
    // Placeholders and values in the target and the header values.
    let mut found = needles.hits(head.target.as_bytes());
    for (_, v) in &head.headers {
        found.extend(needles.hits(v.as_bytes()));
    }
    let body = read_body(client, cbuf, framing, ectx).await?;
    let (body_found, body_safe) = match &body {
        Body::None => (Vec::new(), true),
        Body::Full(b) => (needles.hits(b), substitutable(&head.headers)),
        Body::Stream { pending, .. } => (needles.hits(pending), false),
    };
    Ok(Request {
        head,
        framing,
        expect,
        bound,
        found,
        body,
        body_found,
        body_safe,
    })
}

/// The request body: complete when it is at most [`MAX_BODY`], else what was read of it and the rest to stream.
async fn read_body<C>(
    client: &mut C,
    cbuf: &mut Vec<u8>,
    framing: Framing,
    ectx: &ErrorContext<'_>,
) -> Result<Body, Step>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
{
    match framing {
        Framing::Empty | Framing::UntilClose => Ok(Body::None),
        Framing::Length(n) if n <= MAX_BODY => match read_exact(client, cbuf, n).await {
            Ok(b) => Ok(Body::Full(b)),
            Err(_) => Err(Step::Close("error")),
        },
        Framing::Length(n) => Ok(Body::Stream {
            pending: Vec::new(),
            source: Source::Length(n),
        }),
        Framing::Chunked => {
            let mut dec = Chunked::default();
            let mut acc = Vec::new();
            loop {
                match dec.next(client, cbuf).await {
                    Ok(Some(piece)) => {
                        acc.extend_from_slice(&piece);
                        if acc.len() as u64 > MAX_BODY {
                            return Ok(Body::Stream {
                                pending: acc,
                                source: Source::Chunked(dec),
                            });
                        }
                    }
                    Ok(None) => return Ok(Body::Full(acc)),
                    Err(_) => {
                        let e = Error::client(400, "bad_request", "malformed chunked body");
                        let _ = client.write_all(&error_response(&e, ectx)).await;
                        return Err(Step::Close("error"));
                    }
                }
            }
        }
    }
}

/// The request as sent upstream, placeholders of the `used` bindings replaced by their values (zeroised when
/// dropped), and the number of substitutions per used binding. A plain-HTTP request is sent in origin form with
/// `Host` naming `target` and its hop-by-hop headers removed.
fn substituted_request(
    insp: &Inspector,
    req: &Request,
    used: &[usize],
    channel: Channel<'_>,
    target: &Target,
) -> (Zeroizing<Vec<u8>>, Vec<usize>) {
    let head = &req.head;
    let (line_target, plain) = match channel {
        Channel::Tls => (head.target.as_str(), false),
        Channel::Plain { path } => (path, true),
    };
    let listed = if plain {
        connection_tokens(&head.headers)
    } else {
        Vec::new()
    };
    let pairs: Vec<(&[u8], &[u8])> = used
        .iter()
        .map(|&i| {
            let b = &insp.bindings[i];
            (b.placeholder.as_bytes(), b.value.as_bytes())
        })
        .collect();
    let mut counts = vec![0usize; used.len()];
    let mut add = |c: Vec<usize>| {
        for (k, n) in c.into_iter().enumerate() {
            counts[k] += n;
        }
    };
    let (line, c) = replace_all(line_target.as_bytes(), &pairs);
    let line = Zeroizing::new(line);
    add(c);
    // The request now holds real values: zeroised when dropped.
    let mut bytes = Zeroizing::new(
        format!(
            "{} {} {}\r\n",
            head.method,
            String::from_utf8_lossy(&line),
            Version::Http11
        )
        .into_bytes(),
    );
    if plain {
        bytes.extend_from_slice(format!("Host: {}\r\n", host_header(target)).as_bytes());
    }
    let full = matches!(req.body, Body::Full(_));
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if (plain && (lower == "host" || is_hop(&lower, &listed)))
            || (full && (lower == "content-length" || lower == "transfer-encoding"))
            || (!req.bound.is_empty() && lower == "accept-encoding")
            || (req.expect && lower == "expect")
        {
            continue;
        }
        let (v, c) = replace_all(value.as_bytes(), &pairs);
        let v = Zeroizing::new(v);
        add(c);
        bytes.extend_from_slice(name.as_bytes());
        bytes.extend_from_slice(b": ");
        bytes.extend_from_slice(&v);
        bytes.extend_from_slice(b"\r\n");
    }
    if !req.bound.is_empty() {
        bytes.extend_from_slice(b"Accept-Encoding: identity\r\n");
    }
    // `Transfer-Encoding` is hop-by-hop: a streamed chunked body is re-chunked, so say so again.
    if plain && !full && req.framing == Framing::Chunked {
        bytes.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    let body_bytes = match &req.body {
        Body::Full(b) if !req.body_found.is_empty() => {
            let (v, c) = replace_all(b, &pairs);
            add(c);
            Some(Zeroizing::new(v))
        }
        Body::Full(b) => Some(Zeroizing::new(b.clone())),
        _ => None,
    };
    if let Some(b) = &body_bytes
        && (!b.is_empty() || req.framing != Framing::Empty)
    {
        bytes.extend_from_slice(format!("Content-Length: {}\r\n", b.len()).as_bytes());
    }
    bytes.extend_from_slice(b"\r\n");
    if let Some(b) = &body_bytes {
        bytes.extend_from_slice(b);
    }
    (bytes, counts)
}

/// One `SecretSubstituted` event per binding substituted at least once (the path of `origin_form`, no query).
fn report_substitutions(
    sh: &Shared,
    insp: &Inspector,
    ctx: &TunnelCtx,
    method: &str,
    origin_form: &str,
    used: &[usize],
    counts: &[usize],
) {
    for (k, &i) in used.iter().enumerate() {
        if counts[k] > 0 {
            sh.events.emit(ProxyEvent::SecretSubstituted {
                secret: insp.bindings[i].name.clone(),
                host: ctx.host.clone(),
                port: ctx.target.port,
                method: method.to_owned(),
                path: origin_form.split('?').next().unwrap_or_default().to_owned(),
                node_id: ctx.node_id.clone(),
                decision_id: ctx.decision_id.clone(),
                count: counts[k] as u64,
            });
        }
    }
}

/// Relay the response: interim `1xx` heads, then the final head and body (scrubbed when the host is bound).
#[allow(clippy::too_many_arguments)]
async fn relay_response<C, U>(
    sh: &Shared,
    insp: &Inspector,
    client: &mut C,
    up: &mut U,
    ubuf: &mut Vec<u8>,
    head: &RequestHead,
    bound: bool,
    ectx: &ErrorContext<'_>,
    out: &mut Outcome,
) -> Step
where
    C: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
    U: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
{
    let scrub_pairs: Vec<(&[u8], &[u8])> = if bound {
        insp.bindings
            .iter()
            .map(|b| (b.value.as_bytes(), b.placeholder.as_bytes()))
            .collect()
    } else {
        Vec::new()
    };
    let (resp, rframing) = loop {
        let resp = match read_response_head(up, ubuf, sh.limits.upstream_response_timeout).await {
            Ok(r) => r,
            Err(e) => {
                let _ = client.write_all(&error_response(&e, ectx)).await;
                return Step::Close("error");
            }
        };
        if resp.status / 100 == 1 {
            let bytes = response_head_bytes(&resp, &scrub_pairs, None);
            if client.write_all(&bytes).await.is_err() {
                return Step::Close("error");
            }
            out.bytes_down += bytes.len() as u64;
            if resp.status == 101 {
                return Step::Upgrade;
            }
            continue;
        }
        match response_framing(&head.method, &resp) {
            Ok(f) => break (resp, f),
            Err(_) => {
                let e = Error::upstream(502, "upstream_failed", "upstream request failed");
                let _ = client.write_all(&error_response(&e, ectx)).await;
                return Step::Close("error");
            }
        }
    };
    let keep = client_keep_alive(head) && upstream_keep_alive(&resp) && rframing != Framing::UntilClose;
    let relayed = if scrub_pairs.is_empty() {
        let bytes = response_head_bytes(&resp, &[], None);
        let mut counted = Counting { inner: client, n: 0 };
        let r = match counted.write_all(&bytes).await {
            Ok(()) => copy_body_from(up, ubuf, &mut counted, rframing).await,
            Err(e) => Err(e),
        };
        out.bytes_down += counted.n;
        r
    } else {
        scrub_response(up, ubuf, client, &resp, rframing, &scrub_pairs, head.version, out).await
    };
    if relayed.is_err() || client.flush().await.is_err() {
        return Step::Close("error");
    }
    if keep { Step::Continue } else { Step::Close("eof") }
}

async fn fail<C>(client: &mut C, ectx: &ErrorContext<'_>) -> Step
where
    C: AsyncWrite + Unpin + ?Sized,
{
    let e = Error::upstream(502, "upstream_failed", "upstream request failed");
    let _ = client.write_all(&error_response(&e, ectx)).await;
    Step::Close("error")
}

/// Answer 403 `secret leak` inside the tunnel and report it.
async fn refuse<C>(
    sh: &Shared,
    insp: &Inspector,
    client: &mut C,
    ctx: &TunnelCtx,
    method: &str,
    leak: &Leak,
    id: DecisionId,
) where
    C: AsyncWrite + Unpin + ?Sized,
{
    let name = &insp.bindings[leak.binding].name;
    tracing::info!(host = %ctx.host, rule = %leak.rule, "secret leak refused");
    ctx.deny(
        &sh.events,
        &sh.counters,
        &id,
        method,
        "secret leak",
        &leak.rule,
        Some(name),
    );
    let refusal = Refusal {
        decision_id: &id,
        host: &ctx.host,
        port: ctx.target.port,
        reason: "secret leak",
        rule: &leak.rule,
        address: None,
        rules_hint: &sh.rules_hint,
    };
    let _ = client.write_all(&forbidden_response(&refusal)).await;
    let _ = client.flush().await;
}

/// Stream a large request body upstream through the detector. `Ok(Some(hit))`: a needle was found; the body was
/// cut short upstream before it, and the rest of it was read and discarded so the client sees the refusal
/// rather than a reset.
async fn stream_request_body<C, U>(
    mut det: Detector<'_>,
    client: &mut C,
    cbuf: &mut Vec<u8>,
    up: &mut U,
    pending: Vec<u8>,
    source: Source,
    out: &mut Outcome,
) -> io::Result<Option<Hit>>
where
    C: AsyncRead + Unpin + ?Sized,
    U: AsyncWrite + Unpin + ?Sized,
{
    let chunked = matches!(source, Source::Chunked(_));
    let mut found = None;
    let mut pass = async |piece: &[u8], found: &mut Option<Hit>, out: &mut Outcome| -> io::Result<()> {
        if found.is_some() {
            return Ok(());
        }
        match det.feed(piece) {
            Err(i) => *found = Some(i),
            Ok(b) => {
                let b = if chunked { chunk(&b) } else { b };
                up.write_all(&b).await?;
                out.bytes_up += b.len() as u64;
            }
        }
        Ok(())
    };
    pass(&pending, &mut found, out).await?;
    match source {
        Source::Length(n) => {
            let mut left = n;
            while left > 0 {
                let piece = read_some(client, cbuf, left).await?;
                if piece.is_empty() {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                left -= piece.len() as u64;
                pass(&piece, &mut found, out).await?;
            }
        }
        Source::Chunked(mut dec) => {
            while let Some(piece) = dec.next(client, cbuf).await? {
                pass(&piece, &mut found, out).await?;
            }
        }
    }
    if found.is_some() {
        return Ok(found);
    }
    let mut rest = det.flush();
    if chunked {
        rest = chunk(&rest);
        rest.extend_from_slice(b"0\r\n\r\n");
    }
    up.write_all(&rest).await?;
    out.bytes_up += rest.len() as u64;
    Ok(None)
}

async fn read_response_head<U>(
    up: &mut U,
    ubuf: &mut Vec<u8>,
    timeout: Duration,
) -> Result<ResponseHead, Error>
where
    U: AsyncRead + Unpin + ?Sized,
{
    let failed = || Error::upstream(502, "upstream_failed", "upstream request failed");
    let limits = HeadLimits {
        max_head_bytes: 64 * 1024,
        max_headers: 256,
    };
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(end) = find_head_end(ubuf) {
            let head = parse_response_head(&ubuf[..end], &limits).map_err(|_| failed())?;
            ubuf.drain(..end);
            return Ok(head);
        }
        if ubuf.len() > limits.max_head_bytes {
            return Err(failed());
        }
        ubuf.reserve(4096);
        tokio::select! {
            r = up.read_buf(ubuf) => match r {
                Ok(0) | Err(_) => return Err(failed()),
                Ok(_) => {}
            },
            () = tokio::time::sleep_until(deadline) => {
                return Err(Error::upstream(504, "upstream_timeout", "upstream response timeout"));
            }
        }
    }
}

/// The response head with values scrubbed; `reframe`: `Some(None)` → chunked, `Some(Some(n))` →
/// `Content-Length: n`, `None` → framing headers unchanged.
fn response_head_bytes(
    resp: &ResponseHead,
    scrub: &[(&[u8], &[u8])],
    reframe: Option<Option<usize>>,
) -> Vec<u8> {
    let mut out = format!("{} {} {}\r\n", Version::Http11, resp.status, resp.reason).into_bytes();
    for (name, value) in &resp.headers {
        let lower = name.to_ascii_lowercase();
        if reframe.is_some() && (lower == "content-length" || lower == "transfer-encoding") {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&replace_all(value.as_bytes(), scrub).0);
        out.extend_from_slice(b"\r\n");
    }
    match reframe {
        Some(Some(n)) => out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes()),
        Some(None) => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        None => {}
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Relay a response from a bound host with every real value replaced by its placeholder: small bodies with a
/// length are rewritten whole (length recomputed); others are streamed and re-framed as chunked.
#[allow(clippy::too_many_arguments)]
async fn scrub_response<U, C>(
    up: &mut U,
    ubuf: &mut Vec<u8>,
    client: &mut C,
    resp: &ResponseHead,
    framing: Framing,
    pairs: &[(&[u8], &[u8])],
    client_version: Version,
    out: &mut Outcome,
) -> io::Result<()>
where
    U: AsyncRead + Unpin + ?Sized,
    C: AsyncWrite + Unpin + ?Sized,
{
    match framing {
        Framing::Empty => {
            let head = response_head_bytes(resp, pairs, None);
            out.bytes_down += head.len() as u64;
            client.write_all(&head).await
        }
        Framing::Length(n) if n <= MAX_BODY => {
            let body = read_exact(up, ubuf, n).await?;
            let (body, counts) = replace_all(&body, pairs);
            let changed = counts.iter().any(|&c| c > 0);
            let head = response_head_bytes(resp, pairs, changed.then_some(Some(body.len())));
            out.bytes_down += (head.len() + body.len()) as u64;
            client.write_all(&head).await?;
            client.write_all(&body).await
        }
        _ => {
            // HTTP/1.0 clients cannot take chunked: the body then ends with the connection.
            let chunked = client_version == Version::Http11;
            let head = if chunked {
                response_head_bytes(resp, pairs, Some(None))
            } else {
                strip_framing(resp, pairs)
            };
            out.bytes_down += head.len() as u64;
            client.write_all(&head).await?;
            let mut rep = Replacer::new(pairs);
            match framing {
                Framing::Length(mut left) => {
                    while left > 0 {
                        let piece = read_some(up, ubuf, left).await?;
                        if piece.is_empty() {
                            return Err(io::ErrorKind::UnexpectedEof.into());
                        }
                        left -= piece.len() as u64;
                        emit(client, out, rep.feed(&piece), chunked).await?;
                    }
                }
                Framing::Chunked => {
                    let mut dec = Chunked::default();
                    while let Some(piece) = dec.next(up, ubuf).await? {
                        emit(client, out, rep.feed(&piece), chunked).await?;
                    }
                }
                _ => loop {
                    let piece = read_some(up, ubuf, 64 * 1024).await?;
                    if piece.is_empty() {
                        break;
                    }
                    emit(client, out, rep.feed(&piece), chunked).await?;
                },
            }
            emit(client, out, rep.finish(), chunked).await?;
            if chunked {
                client.write_all(b"0\r\n\r\n").await?;
                out.bytes_down += 5;
            }
            Ok(())
        }
    }
}

/// A writer counting the bytes it passes on.
struct Counting<'a, W: ?Sized> {
    inner: &'a mut W,
    n: u64,
}

impl<W: AsyncWrite + Unpin + ?Sized> AsyncWrite for Counting<'_, W> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = std::pin::Pin::new(&mut *this.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(k)) = &r {
            this.n += *k as u64;
        }
        r
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut *self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut *self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Write one piece of a re-framed body.
async fn emit<C>(client: &mut C, out: &mut Outcome, bytes: Vec<u8>, chunked: bool) -> io::Result<()>
where
    C: AsyncWrite + Unpin + ?Sized,
{
    let b = if chunked { chunk(&bytes) } else { bytes };
    out.bytes_down += b.len() as u64;
    client.write_all(&b).await?;
    client.flush().await
}

/// The head without any framing header (the body then ends with the connection).
fn strip_framing(resp: &ResponseHead, pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut out = format!("{} {} {}\r\n", Version::Http10, resp.status, resp.reason).into_bytes();
    for (name, value) in &resp.headers {
        let lower = name.to_ascii_lowercase();
        if lower == "content-length" || lower == "transfer-encoding" || lower == "connection" {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&replace_all(value.as_bytes(), pairs).0);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// Up to `max` bytes: buffered ones first, otherwise one read (empty at end of stream).
async fn read_some<R>(r: &mut R, rbuf: &mut Vec<u8>, max: u64) -> io::Result<Vec<u8>>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let max = max.min(64 * 1024) as usize;
    if !rbuf.is_empty() {
        let k = max.min(rbuf.len());
        return Ok(rbuf.drain(..k).collect());
    }
    let mut tmp = vec![0u8; max];
    let n = r.read(&mut tmp).await?;
    tmp.truncate(n);
    Ok(tmp)
}
