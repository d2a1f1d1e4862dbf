//! Listeners, the per-connection request loop (spec §9), CONNECT (§10.1) and shutdown (§12.3).

use crate::auth::{AuthOutcome, CredentialStore};
use crate::config::{Limits, Listen, ProxyConfig};
use crate::decide::{DecideOptions, decide};
use crate::event::{Counters, DecisionEvent, DecisionId, EventSink, ProxyEvent, Stats};
use crate::head::{
    Framing, HeadError, HeadLimits, Headers, ProxyTarget, RequestHead, TargetFormError, find_head_end,
    parse_request_head, proxy_target, request_framing,
};
use crate::net::{AsyncIo, BoxIo, Connector, Resolver};
use crate::response::{CONNECT_ESTABLISHED, ErrorContext, Refusal, error_response, forbidden_response};
use crate::tls::intercept::{TunnelCtx, tunnel as inspected_tunnel};
use crate::tls::{Inspector, TrustBundle};
use crate::tunnel::{CloseReason, TunnelLimits, relay};
use crate::{Credential, Error, Result, forward};
use iterion_netpolicy::{Decision, SilentDeny, Target};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{OnceCell, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// State shared by the accept loop and every connection.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) limits: Limits,
    creds: RwLock<CredentialStore>,
    resolver: Arc<dyn Resolver>,
    pub(crate) connector: Arc<dyn Connector>,
    pub(crate) events: EventSink,
    pub(crate) counters: Arc<Counters>,
    silent: SilentDeny,
    report_allowed: bool,
    own_listen: Vec<SocketAddr>,
    /// Stop accepting; head readers answer 503.
    draining: CancellationToken,
    /// Close everything now.
    pub(crate) hard: CancellationToken,
    tunnels: Arc<Semaphore>,
    connections: Arc<Semaphore>,
    pub(crate) pool: forward::Pool,
    last_auth_log: AtomicU64,
    /// TLS inspection, when at least one secret binding is configured.
    pub(crate) tls: Option<Arc<Inspector>>,
}

impl Shared {
    pub(crate) fn new(config: ProxyConfig, own_listen: Vec<SocketAddr>) -> Result<Arc<Self>> {
        let counters = Arc::new(Counters::default());
        let mut creds = CredentialStore::default();
        if let Some(policy) = config.anonymous {
            creds.anonymous = Some(Arc::new(Credential::new(
                "anonymous",
                String::new(),
                None,
                policy,
            )));
        }
        for c in config.credentials {
            let name = c.username.clone();
            creds.insert(c).map_err(|_| Error::Config {
                problems: vec![format!("duplicate credential '{name}'")],
            })?;
        }
        Ok(Arc::new(Self {
            limits: config.limits,
            creds: RwLock::new(creds),
            resolver: config.resolver,
            connector: config.connector,
            events: EventSink::new(config.on_event, config.limits.event_queue, counters.clone()),
            counters,
            silent: config.silent_deny,
            report_allowed: config.report_allowed,
            own_listen,
            draining: CancellationToken::new(),
            hard: CancellationToken::new(),
            tunnels: Arc::new(Semaphore::new(config.limits.max_tunnels)),
            connections: Arc::new(Semaphore::new(config.limits.max_connections)),
            pool: forward::Pool::default(),
            last_auth_log: AtomicU64::new(0),
            tls: config.tls,
        }))
    }

    fn head_limits(&self) -> HeadLimits {
        HeadLimits {
            max_head_bytes: self.limits.max_head_bytes,
            max_headers: self.limits.max_headers,
        }
    }
}

/// The proxy: [`Proxy::start`] binds and serves.
#[derive(Debug, Clone, Copy)]
pub struct Proxy;

impl Proxy {
    /// Bind the configured listener and start serving; returns once listening.
    ///
    /// # Errors
    ///
    /// [`Error::Bind`] when the listener cannot be created.
    pub async fn start(config: ProxyConfig) -> Result<RunningProxy> {
        let listen = config.listen.clone();
        let bind_err = |source| Error::Bind {
            listen: listen.to_string(),
            source,
        };
        let (listener, bound) = match &config.listen {
            Listen::Tcp(addr) => {
                let l = bind_tcp(*addr).map_err(bind_err)?;
                let local = l.local_addr().map_err(bind_err)?;
                (Listener::Tcp(l), Listen::Tcp(local))
            }
            Listen::Unix(path) => {
                use std::os::unix::fs::{FileTypeExt, PermissionsExt};
                if let Ok(meta) = std::fs::symlink_metadata(path)
                    && meta.file_type().is_socket()
                {
                    std::fs::remove_file(path).map_err(bind_err)?;
                }
                let l = tokio::net::UnixListener::bind(path).map_err(bind_err)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(bind_err)?;
                (Listener::Unix(l, path.clone()), Listen::Unix(path.clone()))
            }
        };
        let own = match &bound {
            Listen::Tcp(a) => vec![*a],
            Listen::Unix(_) => Vec::new(),
        };
        let shared = Shared::new(config, own)?;
        let tracker = TaskTracker::new();
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), tracker.clone()));
        Ok(RunningProxy {
            shared,
            bound,
            tracker,
            accept: std::sync::Mutex::new(Some(accept)),
            stats: OnceCell::new(),
        })
    }
}

/// A TCP listener whose accepted sockets start with `TCP_NODELAY`: Linux copies the option from the listening
/// socket to every connection it accepts, which saves one `setsockopt` per connection.
fn bind_tcp(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // What `TcpListener::bind` does: a restarted proxy can take its port back while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Whether accepted sockets already carry the listener's `TCP_NODELAY` (see [`bind_tcp`]).
const NODELAY_INHERITED: bool = cfg!(target_os = "linux");

enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, std::path::PathBuf),
}

async fn accept_loop(listener: Listener, sh: Arc<Shared>, tracker: TaskTracker) {
    loop {
        let accepted: std::io::Result<BoxIo> = tokio::select! {
            () = sh.draining.cancelled() => break,
            r = async {
                match &listener {
                    Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
                        if !NODELAY_INHERITED {
                            let _ = s.set_nodelay(true);
                        }
                        Box::new(s) as BoxIo
                    }),
                    Listener::Unix(l, _) => l.accept().await.map(|(s, _)| Box::new(s) as BoxIo),
                }
            } => r,
        };
        match accepted {
            Ok(io) => spawn_connection(&sh, &tracker, io),
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                // Out of descriptors and similar: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    if let Listener::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
}

/// Serve one accepted connection in the background (connection limit applied).
pub(crate) fn spawn_connection<S: AsyncIo>(sh: &Arc<Shared>, tracker: &TaskTracker, mut io: S) {
    Counters::add(&sh.counters.connections, 1);
    match sh.connections.clone().try_acquire_owned() {
        Ok(permit) => {
            let sh = sh.clone();
            tracker.spawn(async move {
                serve_connection(sh, io).await;
                drop(permit);
            });
        }
        Err(_) => {
            tracker.spawn(async move {
                let _ = io
                    .write_all(&error_response(&Error::unavailable(), &ErrorContext::default()))
                    .await;
                let _ = io.shutdown().await;
            });
        }
    }
}

/// What to do after one request.
pub(crate) enum Next {
    KeepAlive,
    Close,
    Tunnel {
        upstream: BoxIo,
        decision_id: DecisionId,
        permit: tokio::sync::OwnedSemaphorePermit,
        /// Set only when TLS inspection applies to this tunnel.
        inspect: Option<Box<TunnelCtx>>,
        /// Cancelled when the tunnel's credential is removed: the tunnel closes.
        revoked: CancellationToken,
    },
}

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
            Next::Tunnel {
                upstream,
                decision_id,
                permit,
                inspect: Some(ctx),
                revoked,
            } => {
                let early = std::mem::take(&mut buf);
                let Some(insp) = sh.tls.clone() else { break };
                let start = Instant::now();
                // Boxed: the interception state (TLS sessions, buffers) must not enlarge every connection's
                // future, so opaque tunnels keep their size when inspection is off.
                let tunnel = Box::pin(inspected_tunnel(&sh, &insp, &mut client, upstream, early, *ctx));
                // A revoked credential ends the tunnel at once (both sides are dropped with the future).
                let (bytes_up, bytes_down, reason) = tokio::select! {
                    report = tunnel => (report.bytes_up, report.bytes_down, report.reason),
                    () = revoked.cancelled() => (0, 0, "revoked"),
                };
                drop(permit);
                Counters::add(&sh.counters.bytes_up, bytes_up);
                Counters::add(&sh.counters.bytes_down, bytes_down);
                sh.events.emit(ProxyEvent::TunnelClosed {
                    decision_id,
                    bytes_up,
                    bytes_down,
                    duration_ms: start.elapsed().as_millis() as u64,
                    close_reason: reason.to_owned(),
                });
                break;
            }
            Next::Tunnel {
                mut upstream,
                decision_id,
                permit,
                inspect: None,
                revoked,
            } => {
                let early = std::mem::take(&mut buf);
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
                let mut report = relay(&mut client, &mut upstream, early, limits, &stop).await;
                stop.cancel();
                let _ = watch.await;
                if report.reason == CloseReason::Shutdown && !sh.hard.is_cancelled() {
                    report.reason = CloseReason::Revoked;
                }
                drop(permit);
                // After end of file both write sides are shut already; otherwise half-close upstream before
                // the socket is dropped.
                if report.reason == CloseReason::Eof {
                    client_open = false;
                } else {
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
                break;
            }
        }
    }
    if client_open {
        let _ = client.shutdown().await;
    }
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

pub(crate) fn head_error(e: HeadError) -> Error {
    match e {
        HeadError::TooLarge | HeadError::TooManyHeaders => {
            Error::client(431, "head_too_large", "request head too large")
        }
        HeadError::Malformed(m) => Error::client(400, "bad_request", m),
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

/// Handle one request whose head was read (spec §9).
async fn handle_request<S: AsyncIo>(
    sh: &Shared,
    client: &mut S,
    buf: &mut Vec<u8>,
    head: RequestHead,
) -> Next {
    // 2. Authenticate.
    let outcome = sh
        .creds
        .read()
        .map(|store| store.check(head.headers.values("proxy-authorization")))
        .map_err(|_| ());
    let Ok(outcome) = outcome else {
        return reply(client, &Error::unavailable(), &ErrorContext::default()).await;
    };
    let cred = match outcome {
        AuthOutcome::Ok(c) => c,
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
            let e = Error::client(407, "proxy_auth_required", "proxy authentication required");
            return reply(client, &e, &ErrorContext::default()).await;
        }
    };
    // 3. Parse the target.
    let form = match proxy_target(&head.method, &head.target) {
        Ok(f) => f,
        Err((e, scheme)) => {
            return reply(client, &target_form_error(e, &scheme), &ErrorContext::default()).await;
        }
    };
    let framing = match request_framing(&head.headers) {
        Ok(f) => f,
        Err(e) => return reply(client, &head_error(e), &ErrorContext::default()).await,
    };
    let (authority, default_port) = match &form {
        ProxyTarget::Authority(a) => {
            if framing != Framing::Empty {
                let e = Error::client(400, "bad_request", "a CONNECT request cannot have a body");
                return reply(client, &e, &ErrorContext::default()).await;
            }
            (a.as_str(), None)
        }
        ProxyTarget::Http { authority, .. } => {
            if head.headers.header("upgrade").is_some() {
                let e = Error::client(
                    501,
                    "upgrade_not_supported",
                    "upgrade through the forward proxy is not supported; use CONNECT",
                );
                return reply(client, &e, &ErrorContext::default()).await;
            }
            (authority.as_str(), Some(80))
        }
    };
    let target = match Target::parse(authority, default_port) {
        Ok(t) => t,
        Err(e) => {
            let msg = match e {
                iterion_netpolicy::TargetError::PortRequired => "connect target must be host:port".to_owned(),
                other => other.to_string(),
            };
            return reply(
                client,
                &Error::client(400, "invalid_target", msg),
                &ErrorContext::default(),
            )
            .await;
        }
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
            let ctx = ErrorContext {
                host: Some(&host),
                port: Some(target.port),
                decision_id: None,
            };
            return reply(client, &e, &ctx).await;
        }
    };
    let decision_id = DecisionId::new();
    let event = |reason: Option<String>| DecisionEvent {
        decision_id: decision_id.clone(),
        host: host.clone(),
        port: target.port,
        reason,
        rule: Some(decision.rule.as_str().to_owned()),
        address: decision.address.map(|a| a.to_string()),
        node_id: cred.node_id.clone(),
        username: cred.username.clone(),
        method: head.method.clone(),
        mode: decision.mode.as_str().to_owned(),
        secret: None,
    };
    if !decision.allowed {
        let reason = decision.reason.map(|r| r.as_str()).unwrap_or("policy denial");
        Counters::bump(&sh.counters.denied, reason);
        if sh.silent.is_silent(&target) {
            Counters::bump(&sh.counters.silent_denied, &host);
            tracing::debug!(host = %host, port = target.port, "silent denial");
            sh.events.emit(ProxyEvent::SilentDenied {
                host: host.clone(),
                port: target.port,
                node_id: cred.node_id.clone(),
            });
        } else {
            sh.events.emit(ProxyEvent::Denied(event(Some(reason.to_owned()))));
        }
        let address = decision.address.map(|a| a.to_string());
        let refusal = Refusal {
            decision_id: &decision_id,
            host: &host,
            port: target.port,
            reason,
            rule: decision.rule.as_str(),
            address: address.as_deref(),
        };
        let _ = client.write_all(&forbidden_response(&refusal)).await;
        return Next::Close;
    }
    // A placeholder in a plain forward request is never sent (spec §14.5 condition 1, §14.7).
    if let (Some(insp), ProxyTarget::Http { .. }) = (&sh.tls, &form)
        && let Some(idx) = plain_placeholder(sh, insp, &head, framing, client, buf).await
    {
        let b = &insp.bindings[idx];
        let rule = if b.bound_to(&target) {
            format!("secret {} requires TLS", b.name)
        } else {
            format!("secret {} is not bound to {host}", b.name)
        };
        tracing::info!(host = %host, rule = %rule, "secret leak refused");
        Counters::bump(&sh.counters.denied, "secret leak");
        let mut ev = event(Some("secret leak".to_owned()));
        ev.rule = Some(rule.clone());
        ev.address = None;
        ev.secret = Some(b.name.clone());
        sh.events.emit(ProxyEvent::Denied(ev));
        let refusal = Refusal {
            decision_id: &decision_id,
            host: &host,
            port: target.port,
            reason: "secret leak",
            rule: &rule,
            address: None,
        };
        let _ = client.write_all(&forbidden_response(&refusal)).await;
        return Next::Close;
    }
    Counters::add(&sh.counters.allowed, 1);
    if sh.report_allowed {
        sh.events.emit(ProxyEvent::Allowed(event(None)));
    }
    let addresses = dial_addresses(&decision);
    let ctx = ErrorContext {
        host: Some(&host),
        port: Some(target.port),
        decision_id: Some(&decision_id),
    };
    match form {
        ProxyTarget::Authority(_) => {
            let Ok(permit) = sh.tunnels.clone().try_acquire_owned() else {
                let e = Error::client(429, "too_many_tunnels", "too many concurrent tunnels");
                return reply(client, &e, &ctx).await;
            };
            // 6. Dial the pinned addresses.
            let upstream = match dial(sh, &addresses, target.port).await {
                Ok((io, _)) => io,
                Err(e) => return reply(client, &e, &ctx).await,
            };
            if client.write_all(CONNECT_ESTABLISHED).await.is_err() {
                return Next::Close;
            }
            Counters::add(&sh.counters.tunnels, 1);
            let inspect = match &sh.tls {
                Some(insp) if !insp.bypassed(&target) => Some(Box::new(TunnelCtx {
                    target: target.clone(),
                    host: host.clone(),
                    decision_id: decision_id.clone(),
                    node_id: cred.node_id.clone(),
                    username: cred.username.clone(),
                    mode: decision.mode.as_str().to_owned(),
                })),
                _ => None,
            };
            Next::Tunnel {
                upstream,
                decision_id,
                permit,
                inspect,
                revoked: cred.revoked().clone(),
            }
        }
        ProxyTarget::Http { authority: _, path } => {
            let req = forward::ForwardRequest {
                head: &head,
                path: &path,
                target: &target,
                framing,
                addresses: &addresses,
            };
            forward::forward(sh, client, buf, req, &ctx).await
        }
    }
}

/// The binding of the first known placeholder in a plain forward request: its target, its header values, and
/// its body when it has a `Content-Length` of at most 1 MiB and no `Expect: 100-continue` (the body is read into
/// `buf`, from where forwarding sends it).
async fn plain_placeholder<S: AsyncIo>(
    sh: &Shared,
    insp: &Inspector,
    head: &RequestHead,
    framing: Framing,
    client: &mut S,
    buf: &mut Vec<u8>,
) -> Option<usize> {
    use crate::tls::scan::find_placeholders;
    let first = |bytes: &[u8]| find_placeholders(bytes, &insp.by_suffix).first().map(|(_, i)| *i);
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

/// Dial the pinned addresses in order within the connect budget; the first success wins (spec §8.5).
pub(crate) async fn dial(sh: &Shared, addresses: &[IpAddr], port: u16) -> Result<(BoxIo, SocketAddr)> {
    let deadline = Instant::now() + sh.limits.connect_timeout;
    let mut last = None;
    for ip in addresses {
        let addr = SocketAddr::new(*ip, port);
        match tokio::time::timeout_at(deadline, sh.connector.connect(addr)).await {
            Ok(Ok(io)) => return Ok((io, addr)),
            Ok(Err(e)) => last = Some(e),
            Err(_) => {
                return Err(Error::upstream(
                    504,
                    "upstream_connect_timeout",
                    "upstream connect timeout",
                ));
            }
        }
    }
    let detail = last.map(|e| format!(": {e}")).unwrap_or_default();
    Err(Error::upstream(
        502,
        "upstream_connect_failed",
        format!("upstream connect failed{detail}"),
    ))
}

/// A running proxy; dropping it closes everything (`shutdown(0)` in the background).
#[derive(Debug)]
pub struct RunningProxy {
    shared: Arc<Shared>,
    bound: Listen,
    tracker: TaskTracker,
    accept: std::sync::Mutex<Option<JoinHandle<()>>>,
    stats: OnceCell<Stats>,
}

impl RunningProxy {
    /// The bound TCP address (`None` for a Unix socket).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.bound {
            Listen::Tcp(a) => Some(*a),
            Listen::Unix(_) => None,
        }
    }

    /// Where the proxy listens (with the actual port for `:0`).
    pub fn listening(&self) -> &Listen {
        &self.bound
    }

    /// The proxy URL for a credential: `http://<username>:<token>@<host>:<port>` (IPv6 bracketed, username
    /// percent-encoded). For a Unix socket the host is `localhost` without port: whatever relays a TCP port to the
    /// socket supplies the port.
    pub fn endpoint(&self, username: &str, token: &str) -> String {
        let user = crate::auth::percent_encode_userinfo(username);
        match &self.bound {
            Listen::Tcp(a) => format!("http://{user}:{token}@{a}"),
            Listen::Unix(_) => format!("http://{user}:{token}@localhost"),
        }
    }

    /// Register a credential while running.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the username or the token is already registered.
    pub fn add_credential(&self, credential: Credential) -> Result<()> {
        let name = credential.username.clone();
        let mut store = self.shared.creds.write().map_err(|_| Error::unavailable())?;
        if store.anonymous.is_some() {
            return Err(Error::Config {
                problems: vec!["authentication is disabled".into()],
            });
        }
        store.insert(credential).map_err(|c| Error::Config {
            problems: vec![match c {
                crate::auth::Conflict::Username => format!("duplicate username '{name}'"),
                crate::auth::Conflict::Token => {
                    format!("token of '{name}' is already used by another credential")
                }
            }],
        })
    }

    /// Remove a credential; `true` when it existed. Later requests with it get 407, and tunnels opened with it
    /// are closed (`TunnelClosed` with reason `revoked`); a plain request already being forwarded completes.
    pub fn remove_credential(&self, username: &str) -> bool {
        self.shared
            .creds
            .write()
            .map(|mut s| s.remove(username))
            .unwrap_or(false)
    }

    /// Whether any credential is registered (always `true` with authentication disabled).
    pub fn has_credentials(&self) -> bool {
        self.shared
            .creds
            .read()
            .map(|s| s.anonymous.is_some() || !s.is_empty())
            .unwrap_or(false)
    }

    /// Whether TLS inspection is active (at least one secret binding; a CA exists).
    pub fn tls_inspection_active(&self) -> bool {
        self.shared.tls.is_some()
    }

    /// The trust files of the inspection CA (`ca.pem` and `ca-bundle.pem` contents); `None` when inspection is
    /// not active. Write them with [`TrustBundle::write_to`].
    pub fn trust_bundle(&self) -> Option<TrustBundle> {
        self.shared.tls.as_ref().map(|i| i.trust_bundle())
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Stop accepting, let in-flight work finish within `grace`, then close every remaining tunnel and
    /// connection (both sides), deliver the events already queued (waiting one second at most for the consumer),
    /// and return the final counters. Idempotent: a second call waits for the first and
    /// returns the same `Stats`.
    pub async fn shutdown(&self, grace: Duration) -> Stats {
        self.stats
            .get_or_init(|| async {
                self.shared.draining.cancel();
                let accept = self.accept.lock().ok().and_then(|mut a| a.take());
                if let Some(accept) = accept {
                    let _ = accept.await;
                }
                self.tracker.close();
                if tokio::time::timeout(grace, self.tracker.wait()).await.is_err() {
                    self.shared.hard.cancel();
                    self.tracker.wait().await;
                }
                self.shared.hard.cancel();
                self.shared.pool.clear();
                // Deliver what was already queued (a blocked consumer delays shutdown by one second at most).
                self.shared.events.drain(Duration::from_secs(1)).await;
                self.shared.counters.snapshot()
            })
            .await
            .clone()
    }

    /// Serve one already-accepted stream (for embedders that accept connections themselves, and for tests).
    pub fn serve_stream<S: AsyncIo>(&self, io: S) {
        spawn_connection(&self.shared, &self.tracker, io);
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        self.shared.draining.cancel();
        self.shared.hard.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_start_with_nodelay_on_both_families() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = bind_tcp(addr.parse().expect("addr")) else {
                // No IPv6 loopback in this environment.
                assert!(addr.starts_with('['), "binding {addr} failed");
                continue;
            };
            let local = l.local_addr().expect("local addr");
            let (c, a) = tokio::join!(tokio::net::TcpStream::connect(local), l.accept());
            let (_c, (s, _)) = (c.expect("connect"), a.expect("accept"));
            // What the accept loop relies on when it skips its own setsockopt.
            assert_eq!(s.nodelay().ok(), Some(true), "{addr}");
        }
    }
}
