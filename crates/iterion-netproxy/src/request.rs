//! One client connection (spec §9): the request loop, authentication, the target, the two-stage decision, then
//! a CONNECT tunnel (§10.1; opaque or inspected) or plain forwarding (§10.2).

use crate::auth::AuthOutcome;
use crate::decide::{DecideOptions, decide};
use crate::event::{Counters, DecisionEvent, DecisionId, ProxyEvent};
use crate::head::{
    Framing, HeadError, Headers, ProxyTarget, RequestHead, TargetFormError, find_head_end,
    parse_request_head, proxy_target, request_framing,
};
use crate::net::AsyncIo;
use crate::response::{
    CONNECT_ESTABLISHED, ErrorContext, Refusal, error_response, forbidden_response, head_error,
};
use crate::shared::{Next, Shared, Tunnel, dial};
#[cfg(feature = "tls-inspection")]
use crate::tls::{
    Inspector,
    context::TunnelCtx,
    http::{PlainForward, forward_plain},
    intercept::tunnel as inspected_tunnel,
    scan::Hit,
};
use crate::tunnel::{CloseReason, TunnelLimits, relay};
use crate::{Credential, Error, Result, forward};
use iterion_netpolicy::{Decision, Target};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// The per-connection loop: read a head, handle the request, repeat while kept alive.
pub(crate) async fn serve_connection<S: AsyncIo>(sh: Arc<Shared>, mut client: S) {
    let mut buf: Vec<u8> = Vec::new();
    let mut first = true;
    // Whether the client's write side still needs a half-close (a tunnel that ended by end of file did it).
    let mut client_open = true;
    loop {
        let head = match read_head(&sh, &mut client, &mut buf, first).await {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(e) => {
                let _ = client
                    .write_all(&error_response(&e, &ErrorContext::default()))
                    .await;
                break;
            }
        };
        first = false;
        match handle_request(&sh, &mut client, &mut buf, head).await {
            Next::KeepAlive => continue,
            Next::Close => break,
            Next::Tunnel(tunnel) => {
                let early = std::mem::take(&mut buf);
                client_open = run_tunnel(&sh, &mut client, early, tunnel).await;
                break;
            }
        }
    }
    if client_open {
        let _ = client.shutdown().await;
    }
}

/// Relay an established tunnel until it ends and report it (`TunnelClosed`); returns whether the client's write
/// side still needs a half-close.
#[cfg_attr(not(feature = "tls-inspection"), allow(unused_mut))]
async fn run_tunnel<S: AsyncIo>(sh: &Shared, client: &mut S, early: Vec<u8>, mut t: Tunnel) -> bool {
    #[cfg(feature = "tls-inspection")]
    if let Some(ctx) = t.inspect.take() {
        if let Some(insp) = sh.tls.clone() {
            inspected(sh, &insp, client, early, t, *ctx).await;
        }
        return true;
    }
    opaque(sh, client, early, t).await
}

/// An intercepted tunnel (TLS inspection).
#[cfg(feature = "tls-inspection")]
async fn inspected<S: AsyncIo>(
    sh: &Shared,
    insp: &Inspector,
    client: &mut S,
    early: Vec<u8>,
    t: Tunnel,
    ctx: TunnelCtx,
) {
    let start = Instant::now();
    // Boxed: the interception state (TLS sessions, buffers) must not enlarge every connection's future, so
    // opaque tunnels keep their size when inspection is off.
    let tunnel = Box::pin(inspected_tunnel(sh, insp, client, t.upstream, early, ctx));
    // A revoked credential ends the tunnel at once (both sides are dropped with the future).
    let (bytes_up, bytes_down, reason) = tokio::select! {
        report = tunnel => (report.bytes_up, report.bytes_down, report.reason),
        () = t.revoked.cancelled() => (0, 0, "revoked"),
    };
    drop(t.permit);
    Counters::add(&sh.counters.bytes_up, bytes_up);
    Counters::add(&sh.counters.bytes_down, bytes_down);
    sh.events.emit(ProxyEvent::TunnelClosed {
        decision_id: t.decision_id,
        bytes_up,
        bytes_down,
        duration_ms: start.elapsed().as_millis() as u64,
        close_reason: reason.to_owned(),
    });
}

/// An opaque tunnel: bytes relayed both ways (spliced where possible); returns whether the client still needs a
/// half-close.
async fn opaque<S: AsyncIo>(sh: &Shared, client: &mut S, early: Vec<u8>, t: Tunnel) -> bool {
    let Tunnel {
        mut upstream,
        decision_id,
        permit,
        revoked,
        ..
    } = t;
    let limits = TunnelLimits {
        idle: sh.limits.tunnel_idle_timeout,
        lifetime: sh.limits.tunnel_max_lifetime,
    };
    let start = Instant::now();
    // The relay stops at shutdown or when the tunnel's credential is removed.
    let stop = sh.hard.child_token();
    let watch = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = revoked.cancelled() => stop.cancel(),
                () = stop.cancelled() => {}
            }
        })
    };
    let mut report = relay(client, &mut upstream, early, limits, &stop).await;
    stop.cancel();
    let _ = watch.await;
    if report.reason == CloseReason::Shutdown && !sh.hard.is_cancelled() {
        report.reason = CloseReason::Revoked;
    }
    drop(permit);
    // After end of file both write sides are shut already; otherwise half-close upstream before the socket is
    // dropped.
    let client_open = report.reason != CloseReason::Eof;
    if client_open {
        let _ = upstream.shutdown().await;
    }
    Counters::add(&sh.counters.bytes_up, report.bytes_up);
    Counters::add(&sh.counters.bytes_down, report.bytes_down);
    sh.events.emit(ProxyEvent::TunnelClosed {
        decision_id,
        bytes_up: report.bytes_up,
        bytes_down: report.bytes_down,
        duration_ms: start.elapsed().as_millis() as u64,
        close_reason: report.reason.as_str().to_owned(),
    });
    client_open
}

/// Read one request head into `buf` (bytes past the head stay in `buf`). `Ok(None)`: the client closed or stayed
/// idle between requests.
async fn read_head<S: AsyncIo>(
    sh: &Shared,
    client: &mut S,
    buf: &mut Vec<u8>,
    first: bool,
) -> Result<Option<RequestHead>> {
    let limits = sh.head_limits();
    let mut deadline = if first || !buf.is_empty() {
        Some(Instant::now() + sh.limits.head_timeout)
    } else {
        None
    };
    let idle_deadline = Instant::now() + sh.limits.client_idle_timeout;
    loop {
        if let Some(end) = find_head_end(buf) {
            let parsed = parse_request_head(&buf[..end], &limits);
            buf.drain(..end);
            return parsed.map(Some).map_err(head_error);
        }
        if buf.len() > limits.max_head_bytes {
            return Err(head_error(HeadError::TooLarge));
        }
        if buf.capacity() - buf.len() < 512 {
            buf.reserve(if buf.is_empty() { 1024 } else { buf.len() });
        }
        let wait_until = deadline.unwrap_or(idle_deadline);
        let n = tokio::select! {
            r = client.read_buf(buf) => r,
            () = tokio::time::sleep_until(wait_until) => {
                return if deadline.is_some() {
                    Err(Error::client(408, "request_timeout", "request head not received in time"))
                } else {
                    Ok(None)
                };
            }
            () = sh.draining.cancelled() => {
                return if first || !buf.is_empty() { Err(Error::unavailable()) } else { Ok(None) };
            }
        };
        match n {
            Ok(0) | Err(_) => return Ok(None),
            Ok(_) => {
                if deadline.is_none() {
                    deadline = Some(Instant::now() + sh.limits.head_timeout);
                }
            }
        }
    }
}

fn target_form_error(e: TargetFormError, scheme: &str) -> Error {
    match e {
        TargetFormError::ConnectNotAuthority => {
            Error::client(400, "invalid_target", "connect target must be host:port")
        }
        TargetFormError::HttpsAbsolute => Error::client(
            400,
            "https_absolute_form",
            "https absolute-form is not supported; use CONNECT",
        ),
        TargetFormError::NotAProxyRequest => Error::client(
            400,
            "not_a_proxy_request",
            "not a proxy request: use absolute-form or CONNECT",
        ),
        TargetFormError::UnsupportedScheme => Error::client(
            400,
            "unsupported_scheme",
            format!("unsupported scheme '{scheme}'"),
        ),
        TargetFormError::Userinfo => {
            Error::client(400, "bad_request", "credentials in the URL are not accepted")
        }
        TargetFormError::Malformed => Error::client(400, "invalid_target", "invalid target"),
    }
}

async fn reply<S: AsyncIo>(client: &mut S, err: &Error, ctx: &ErrorContext<'_>) -> Next {
    let _ = client.write_all(&error_response(err, ctx)).await;
    Next::Close
}

/// A request the policy decided: everything its events and answers name.
struct Decided<'a> {
    head: &'a RequestHead,
    cred: &'a Credential,
    target: &'a Target,
    host: &'a str,
    decision: &'a Decision,
    decision_id: &'a DecisionId,
}

impl Decided<'_> {
    /// The decision event of this request.
    fn event(&self, reason: Option<String>) -> DecisionEvent {
        DecisionEvent {
            decision_id: self.decision_id.clone(),
            host: self.host.to_owned(),
            port: self.target.port,
            reason,
            rule: Some(self.decision.rule.as_str().to_owned()),
            address: self.decision.address.map(|a| a.to_string()),
            node_id: self.cred.node_id.clone(),
            username: self.cred.username.clone(),
            method: self.head.method.clone(),
            mode: self.decision.mode.as_str().to_owned(),
            secret: None,
        }
    }

    /// Answer `403` with the refusal's reason and rule.
    async fn forbid<S: AsyncIo>(
        &self,
        sh: &Shared,
        client: &mut S,
        reason: &str,
        rule: &str,
        address: Option<&str>,
    ) -> Next {
        let refusal = Refusal {
            decision_id: self.decision_id,
            host: self.host,
            port: self.target.port,
            reason,
            rule,
            address,
            rules_hint: &sh.rules_hint,
        };
        let _ = client.write_all(&forbidden_response(&refusal)).await;
        Next::Close
    }
}

/// Handle one request whose head was read (spec §9).
async fn handle_request<S: AsyncIo>(
    sh: &Shared,
    client: &mut S,
    buf: &mut Vec<u8>,
    head: RequestHead,
) -> Next {
    // 2. Authenticate.
    let cred = match authenticate(sh, &head) {
        Ok(c) => c,
        Err(e) => return reply(client, &e, &ErrorContext::default()).await,
    };
    // 3. Parse the target.
    let (form, framing, target) = match parse_target(&head) {
        Ok(t) => t,
        Err(e) => return reply(client, &e, &ErrorContext::default()).await,
    };
    let host = target.host.to_string();
    // 4–5. Name stage, resolution, address stage.
    let options = DecideOptions {
        dns_timeout: sh.limits.dns_timeout,
        own_listen: sh.own_listen.clone(),
    };
    let decision = match decide(&cred.policy, &target, Some(sh.resolver.as_ref()), &options).await {
        Ok(d) => d,
        Err(e) => {
            if matches!(e.code(), "dns_failed" | "dns_timeout") {
                Counters::add(&sh.counters.dns_failures, 1);
                tracing::info!(host = %host, port = target.port, code = e.code(), "dns failed");
                sh.events.emit(ProxyEvent::DnsFailed {
                    host: host.clone(),
                    port: target.port,
                    code: e.code().to_owned(),
                    node_id: cred.node_id.clone(),
                });
            }
            let ctx = ErrorContext {
                host: Some(&host),
                port: Some(target.port),
                decision_id: None,
            };
            return reply(client, &e, &ctx).await;
        }
    };
    let decision_id = DecisionId::new();
    let req = Decided {
        head: &head,
        cred: &cred,
        target: &target,
        host: &host,
        decision: &decision,
        decision_id: &decision_id,
    };
    if !decision.allowed {
        return denied(sh, client, &req).await;
    }
    let addresses = dial_addresses(&decision);
    #[cfg(feature = "tls-inspection")]
    if let (Some(insp), ProxyTarget::Http { path, .. }) = (&sh.tls, &form) {
        // A host bound by a binding that allows plain HTTP: substituted and scrubbed as inside TLS.
        if !insp.plain_bound(&target).is_empty() {
            let fwd = PlainForward {
                head: head.clone(),
                path,
                addresses: &addresses,
                ctx: tunnel_ctx(&req),
            };
            return forward_plain(sh, insp, client, buf, fwd, || allowed(sh, &req)).await;
        }
        // Otherwise a placeholder or a secret value in a plain forward request is never sent (spec §14.5
        // condition 1, §14.7).
        if let Some(hit) = plain_secret(sh, insp, &head, framing, client, buf).await {
            return plain_leak(sh, client, &req, insp, hit).await;
        }
    }
    allowed(sh, &req);
    let ctx = ErrorContext {
        host: Some(&host),
        port: Some(target.port),
        decision_id: Some(&decision_id),
    };
    match form {
        ProxyTarget::Authority(_) => open_tunnel(sh, client, &req, &addresses, &ctx).await,
        ProxyTarget::Http { authority: _, path } => {
            let fwd = forward::ForwardRequest {
                head: &head,
                path: &path,
                target: &target,
                framing,
                addresses: &addresses,
            };
            forward::forward(sh, client, buf, fwd, &ctx).await
        }
    }
}

/// Step 2: the credential of the request; a failure is counted, reported and answered `407`.
fn authenticate(sh: &Shared, head: &RequestHead) -> Result<Arc<Credential>> {
    let outcome = sh
        .creds
        .read()
        .map(|store| store.check(head.headers.values("proxy-authorization")))
        .map_err(|_| Error::unavailable())?;
    match outcome {
        AuthOutcome::Ok(c) => Ok(c),
        AuthOutcome::Failed { scheme, username } => {
            Counters::add(&sh.counters.auth_failures, 1);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            if sh.last_auth_log.swap(now, Ordering::Relaxed) != now {
                tracing::info!(scheme = %scheme, "proxy authentication failed");
            }
            sh.events.emit(ProxyEvent::AuthFailed { scheme, username });
            Err(Error::client(
                407,
                "proxy_auth_required",
                "proxy authentication required",
            ))
        }
    }
}

/// Step 3: the target form, the body framing and the target of the request.
fn parse_target(head: &RequestHead) -> Result<(ProxyTarget, Framing, Target)> {
    let form =
        proxy_target(&head.method, &head.target).map_err(|(e, scheme)| target_form_error(e, &scheme))?;
    let framing = request_framing(&head.headers).map_err(head_error)?;
    let (authority, default_port) = match &form {
        ProxyTarget::Authority(a) => {
            if framing != Framing::Empty {
                return Err(Error::client(
                    400,
                    "bad_request",
                    "a CONNECT request cannot have a body",
                ));
            }
            (a.as_str(), None)
        }
        ProxyTarget::Http { authority, .. } => {
            if head.headers.header("upgrade").is_some() {
                return Err(Error::client(
                    501,
                    "upgrade_not_supported",
                    "upgrade through the forward proxy is not supported; use CONNECT",
                ));
            }
            (authority.as_str(), Some(80))
        }
    };
    let target = Target::parse(authority, default_port).map_err(|e| {
        let msg = match e {
            iterion_netpolicy::TargetError::PortRequired => "connect target must be host:port".to_owned(),
            other => other.to_string(),
        };
        Error::client(400, "invalid_target", msg)
    })?;
    Ok((form, framing, target))
}

/// A policy denial: counted, reported (or silent), answered `403`.
async fn denied<S: AsyncIo>(sh: &Shared, client: &mut S, req: &Decided<'_>) -> Next {
    let (target, host) = (req.target, req.host);
    let reason = req.decision.reason.map(|r| r.as_str()).unwrap_or("policy denial");
    Counters::bump(&sh.counters.denied, reason);
    if sh.silent.is_silent(target) {
        Counters::bump(&sh.counters.silent_denied, host);
        tracing::debug!(host = %host, port = target.port, "silent denial");
        sh.events.emit(ProxyEvent::SilentDenied {
            host: host.to_owned(),
            port: target.port,
            node_id: req.cred.node_id.clone(),
        });
    } else {
        tracing::info!(host = %host, port = target.port, reason = %reason, "denied");
        sh.events
            .emit(ProxyEvent::Denied(req.event(Some(reason.to_owned()))));
    }
    let address = req.decision.address.map(|a| a.to_string());
    req.forbid(sh, client, reason, req.decision.rule.as_str(), address.as_deref())
        .await
}

/// Count and report an allowed request.
fn allowed(sh: &Shared, req: &Decided<'_>) {
    Counters::add(&sh.counters.allowed, 1);
    if sh.report_allowed {
        sh.events.emit(ProxyEvent::Allowed(req.event(None)));
    }
}

/// A placeholder or a secret value in a plain forward request to a host no binding allowing plain HTTP is bound
/// to: refused `403 secret leak`, never sent.
#[cfg(feature = "tls-inspection")]
async fn plain_leak<S: AsyncIo>(
    sh: &Shared,
    client: &mut S,
    req: &Decided<'_>,
    insp: &Inspector,
    hit: Hit,
) -> Next {
    let b = &insp.bindings[hit.binding()];
    let rule = if b.bound_to(req.target) {
        format!("secret {} requires TLS", b.name)
    } else {
        format!("secret {} is not bound to {}", b.name, req.host)
    };
    tracing::info!(host = %req.host, rule = %rule, "secret leak refused");
    Counters::bump(&sh.counters.denied, "secret leak");
    let mut ev = req.event(Some("secret leak".to_owned()));
    ev.rule = Some(rule.clone());
    ev.address = None;
    ev.secret = Some(b.name.clone());
    sh.events.emit(ProxyEvent::Denied(ev));
    req.forbid(sh, client, "secret leak", &rule, None).await
}

/// Step 6 of CONNECT: take a tunnel slot, dial the pinned addresses, answer `200`; the tunnel is relayed by the
/// connection loop.
async fn open_tunnel<S: AsyncIo>(
    sh: &Shared,
    client: &mut S,
    req: &Decided<'_>,
    addresses: &[IpAddr],
    ctx: &ErrorContext<'_>,
) -> Next {
    let Ok(permit) = sh.tunnels.clone().try_acquire_owned() else {
        let e = Error::client(429, "too_many_tunnels", "too many concurrent tunnels");
        return reply(client, &e, ctx).await;
    };
    let upstream = match dial(sh, addresses, req.target.port).await {
        Ok((io, _)) => io,
        Err(e) => return reply(client, &e, ctx).await,
    };
    if client.write_all(CONNECT_ESTABLISHED).await.is_err() {
        return Next::Close;
    }
    Counters::add(&sh.counters.tunnels, 1);
    Next::Tunnel(Tunnel {
        upstream,
        decision_id: req.decision_id.clone(),
        permit,
        #[cfg(feature = "tls-inspection")]
        inspect: inspection(sh, req),
        revoked: req.cred.revoked().clone(),
    })
}

/// The interception context of a tunnel, when TLS inspection applies to it (active and not bypassed).
#[cfg(feature = "tls-inspection")]
fn inspection(sh: &Shared, req: &Decided<'_>) -> Option<Box<TunnelCtx>> {
    match &sh.tls {
        Some(insp) if !insp.bypassed(req.target) => Some(Box::new(tunnel_ctx(req))),
        _ => None,
    }
}

/// What inspection needs to know about a decided request.
#[cfg(feature = "tls-inspection")]
fn tunnel_ctx(req: &Decided<'_>) -> TunnelCtx {
    TunnelCtx {
        target: req.target.clone(),
        host: req.host.to_owned(),
        decision_id: req.decision_id.clone(),
        node_id: req.cred.node_id.clone(),
        username: req.cred.username.clone(),
        mode: req.decision.mode.as_str().to_owned(),
    }
}

/// The first placeholder or secret value (of at least 8 bytes) in a plain forward request: in its target, its
/// header values, and its body when it has a `Content-Length` of at most 1 MiB and no `Expect: 100-continue`
/// (the body is read into `buf`, from where forwarding sends it).
#[cfg(feature = "tls-inspection")]
async fn plain_secret<S: AsyncIo>(
    sh: &Shared,
    insp: &Inspector,
    head: &RequestHead,
    framing: Framing,
    client: &mut S,
    buf: &mut Vec<u8>,
) -> Option<Hit> {
    let needles = insp.needles(|_| true);
    let first = |bytes: &[u8]| needles.hits(bytes).first().copied();
    if let Some(i) = first(head.target.as_bytes()) {
        return Some(i);
    }
    if let Some(i) = head.headers.iter().find_map(|(_, v)| first(v.as_bytes())) {
        return Some(i);
    }
    let Framing::Length(n) = framing else { return None };
    if n > crate::tls::http::MAX_BODY || head.headers.as_slice().has_token("expect", "100-continue") {
        return None;
    }
    let deadline = Instant::now() + sh.limits.head_timeout;
    while (buf.len() as u64) < n {
        buf.reserve(n as usize - buf.len());
        match tokio::time::timeout_at(deadline, client.read_buf(buf)).await {
            Ok(Ok(k)) if k > 0 => {}
            _ => break,
        }
    }
    first(&buf[..buf.len().min(n as usize)])
}

/// The addresses to dial: the checked addresses of the decision (an IP literal's own address).
fn dial_addresses(d: &Decision) -> Vec<IpAddr> {
    if !d.addresses.is_empty() {
        return d.addresses.clone();
    }
    match &d.target.host {
        iterion_netpolicy::Host::Ip(ip) => vec![*ip],
        iterion_netpolicy::Host::Name(_) => Vec::new(),
    }
}
