//! Interception of one CONNECT tunnel (spec §14.3): peek, ClientHello and SNI check, leaf, TLS both ways.

use super::context::{Outcome, TunnelCtx};
use super::inspector::Inspector;
use super::{http, raw};
use crate::Error;
use crate::net::BoxIo;
use crate::response::{ErrorContext, error_response};
use crate::shared::Shared;
use iterion_netpolicy::Host;
use rustls::pki_types::ServerName;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::{Duration, Instant};
use tokio_rustls::{LazyConfigAcceptor, TlsConnector};

/// How long the first client bytes (the ClientHello) may take.
const PEEK_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes read before the ClientHello must be complete.
const PEEK_LIMIT: usize = 16 * 1024;

/// What the first client bytes are.
#[derive(Debug, PartialEq, Eq)]
enum Peek {
    Tls,
    NotTls,
    NeedMore,
}

/// A TLS handshake record: content type 0x16, version 0x0301–0x0304.
fn classify(b: &[u8]) -> Peek {
    match b {
        [] => Peek::NeedMore,
        [0x16] | [0x16, 0x03] => Peek::NeedMore,
        [0x16, 0x03, v, ..] if (1..=4).contains(v) => Peek::Tls,
        _ => Peek::NotTls,
    }
}

/// Whether the SNI presented is acceptable for the CONNECT host (canonical comparison; an IP target expects
/// none).
pub(crate) fn sni_matches(target: &Host, sni: Option<&str>) -> bool {
    match (target, sni) {
        (Host::Name(_), None) => false,
        (Host::Ip(_), None) => true,
        (t, Some(s)) => Host::parse(s).is_ok_and(|h| &h == t),
    }
}

/// The client stream during the handshake: bytes already read first, then the socket, with a read budget
/// until the ClientHello was accepted.
pub(crate) struct Prefixed<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
    budget: usize,
    /// Cleared by the owner once the ClientHello was read (the stream itself is then owned by rustls).
    limited: Arc<AtomicBool>,
}

impl<S> Prefixed<S> {
    fn new(prefix: Vec<u8>, inner: S, budget: usize, limited: Arc<AtomicBool>) -> Self {
        Self {
            budget: budget.saturating_sub(prefix.len()),
            prefix,
            pos: 0,
            inner,
            limited,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.prefix.len() {
            let n = (this.prefix.len() - this.pos).min(buf.remaining());
            buf.put_slice(&this.prefix[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.prefix.len() {
                this.prefix = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && this.limited.load(Ordering::Relaxed) {
            let n = buf.filled().len() - before;
            if n > this.budget {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "client hello too large",
                )));
            }
            this.budget -= n;
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Run one tunnel under inspection (the target is not bypassed): TLS is intercepted, anything else is scanned.
pub(crate) async fn tunnel<S>(
    sh: &Shared,
    insp: &Inspector,
    client: &mut S,
    mut upstream: BoxIo,
    early: Vec<u8>,
    ctx: TunnelCtx,
) -> Outcome
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let mut first = early;
    let mut down_first: Vec<u8> = Vec::new();
    let deadline = Instant::now() + PEEK_TIMEOUT;
    let kind = loop {
        match classify(&first) {
            Peek::NeedMore => {}
            k => break k,
        }
        if first.len() >= PEEK_LIMIT {
            break Peek::NotTls;
        }
        first.reserve(4096);
        down_first.reserve(4096);
        tokio::select! {
            r = client.read_buf(&mut first) => match r {
                Ok(0) | Err(_) => break Peek::NotTls,
                Ok(_) => {}
            },
            // The upstream speaking first: not TLS (TLS clients speak first).
            r = upstream.read_buf(&mut down_first) => match r {
                Ok(0) | Err(_) => break Peek::NotTls,
                Ok(_) => break Peek::NotTls,
            },
            () = tokio::time::sleep_until(deadline) => break Peek::NotTls,
            () = sh.hard.cancelled() => return Outcome { reason: "shutdown", ..Outcome::default() },
        }
    };
    if kind == Peek::NotTls {
        return raw::scanned_relay(sh, insp, client, &mut upstream, first, down_first, &ctx).await;
    }
    let mut outcome = Outcome::default();
    // The ClientHello.
    let limited = Arc::new(AtomicBool::new(true));
    let acceptor = LazyConfigAcceptor::new(
        rustls::server::Acceptor::default(),
        Prefixed::new(first, &mut *client, PEEK_LIMIT, limited.clone()),
    );
    let start = tokio::select! {
        r = tokio::time::timeout_at(deadline, acceptor) => match r {
            Ok(Ok(s)) => s,
            _ => return Outcome { reason: "error", ..outcome },
        },
        () = sh.hard.cancelled() => return Outcome { reason: "shutdown", ..outcome },
    };
    limited.store(false, Ordering::Relaxed);
    let sni = start.client_hello().server_name().map(str::to_owned);
    if !sni_matches(&ctx.target.host, sni.as_deref()) {
        tracing::info!(host = %ctx.host, sni = ?sni, "sni does not match the CONNECT host; tunnel closed");
        ctx.deny(
            &sh.events,
            &sh.counters,
            &ctx.decision_id,
            "CONNECT",
            "policy denial",
            "sni mismatch",
            None,
        );
        return Outcome {
            reason: "sni mismatch",
            ..outcome
        };
    }
    let config = match insp.leaves.get(&insp.ca, &ctx.target.host) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(host = %ctx.host, error = %e, "cannot mint a leaf certificate");
            return Outcome {
                reason: "error",
                ..outcome
            };
        }
    };
    let mut tls_client = tokio::select! {
        r = tokio::time::timeout_at(deadline, start.into_stream(config)) => match r {
            Ok(Ok(s)) => s,
            _ => return Outcome { reason: "error", ..outcome },
        },
        () = sh.hard.cancelled() => return Outcome { reason: "shutdown", ..outcome },
    };
    // TLS to the pinned upstream, verified for the CONNECT host.
    let server_name = match &ctx.target.host {
        Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
        Host::Name(n) => match ServerName::try_from(n.clone()) {
            Ok(s) => s,
            Err(_) => {
                return Outcome {
                    reason: "error",
                    ..outcome
                };
            }
        },
    };
    let connect = TlsConnector::from(insp.upstream.clone()).connect(server_name, upstream);
    let connected = tokio::select! {
        r = tokio::time::timeout(sh.limits.connect_timeout, connect) => r,
        () = sh.hard.cancelled() => return Outcome { reason: "shutdown", ..outcome },
    };
    let mut tls_up = match connected {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let err = if is_certificate_error(&e) {
                tracing::info!(host = %ctx.host, error = %e, "upstream certificate invalid");
                Error::upstream(
                    502,
                    "upstream_certificate_invalid",
                    "upstream certificate invalid",
                )
            } else {
                Error::upstream(502, "upstream_failed", "upstream tls handshake failed")
            };
            outcome.bytes_down = answer_first_request(sh, &mut tls_client, &err, &ctx).await;
            return Outcome {
                reason: "error",
                ..outcome
            };
        }
        Err(_) => {
            let err = Error::upstream(504, "upstream_timeout", "upstream tls handshake timeout");
            outcome.bytes_down = answer_first_request(sh, &mut tls_client, &err, &ctx).await;
            return Outcome {
                reason: "error",
                ..outcome
            };
        }
    };
    let outcome = http::relay(sh, insp, &mut tls_client, &mut tls_up, &ctx).await;
    let _ = tls_up.shutdown().await;
    let _ = tls_client.shutdown().await;
    outcome
}

/// Whether a handshake error is the upstream certificate failing verification.
fn is_certificate_error(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)))
}

/// Read the client's first request head (so the answer is not lost to a reset) and answer it with `err`.
async fn answer_first_request<C>(sh: &Shared, client: &mut C, err: &Error, ctx: &TunnelCtx) -> u64
where
    C: AsyncRead + AsyncWrite + Unpin + Send,
{
    let mut buf = Vec::new();
    let _ = http::read_head(sh, client, &mut buf, sh.limits.head_timeout).await;
    let ectx = ErrorContext {
        host: Some(&ctx.host),
        port: Some(ctx.target.port),
        decision_id: Some(&ctx.decision_id),
    };
    let bytes = error_response(err, &ectx);
    let _ = client.write_all(&bytes).await;
    let _ = client.flush().await;
    bytes.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes() {
        assert_eq!(classify(b""), Peek::NeedMore);
        assert_eq!(classify(b"\x16"), Peek::NeedMore);
        assert_eq!(classify(b"\x16\x03"), Peek::NeedMore);
        assert_eq!(classify(b"\x16\x03\x01\x02\x00"), Peek::Tls);
        assert_eq!(classify(b"\x16\x03\x04"), Peek::Tls);
        assert_eq!(classify(b"\x16\x03\x05"), Peek::NotTls);
        assert_eq!(classify(b"\x16\x02\x01"), Peek::NotTls);
        assert_eq!(classify(b"GET / HTTP/1.1\r\n"), Peek::NotTls);
        assert_eq!(classify(b"SSH-2.0"), Peek::NotTls);
    }

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap_or(Host::Name(String::new()))
    }

    #[test]
    fn sni_comparison_is_canonical() {
        assert!(sni_matches(&host("api.github.com"), Some("api.github.com")));
        assert!(sni_matches(&host("api.github.com"), Some("API.GitHub.com.")));
        assert!(!sni_matches(&host("api.github.com"), Some("evil.example")));
        assert!(!sni_matches(&host("api.github.com"), None));
        assert!(sni_matches(&host("127.0.0.1"), None));
        assert!(!sni_matches(&host("127.0.0.1"), Some("evil.example")));
    }
}
