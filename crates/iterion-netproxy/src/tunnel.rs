//! The CONNECT relay: both directions in one task, no per-direction heap buffers while idle.
//!
//! Two pumps move the bytes; [`relay`] picks one and applies the limits (idle deadline, lifetime, shutdown).
//!
//! - Linux, both ends kernel sockets (TCP or Unix): `splice(2)` through a kernel pipe borrowed from a small
//!   per-thread pool only while bytes are in flight (the `splice` module). The bytes never enter user space.
//! - Anything else (in-memory streams, TLS sessions): each direction reads into a buffer on the poll function's
//!   stack and writes it straight to the other side. Only when the writer cannot take everything is the
//!   remainder copied to a heap `Vec`, which is freed as soon as it drains.
//!
//! Either way an idle tunnel owns two sockets, a few counters and one timer.

#[cfg(target_os = "linux")]
mod splice;

use crate::net::AsyncIo;
use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Bytes read per poll; lives on the stack of the poll call only.
const CHUNK: usize = 64 * 1024;

#[derive(Debug, Default)]
struct Dir {
    pending: Vec<u8>,
    pos: usize,
    read_done: bool,
    shut: bool,
    bytes: u64,
}

/// How a tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloseReason {
    Eof,
    Idle,
    Lifetime,
    Shutdown,
    /// The credential the tunnel was opened with was removed.
    Revoked,
    Error,
}

impl CloseReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CloseReason::Eof => "eof",
            CloseReason::Idle => "idle",
            CloseReason::Lifetime => "lifetime",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Revoked => "revoked",
            CloseReason::Error => "error",
        }
    }
}

/// What a finished tunnel reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TunnelReport {
    pub(crate) bytes_up: u64,
    pub(crate) bytes_down: u64,
    pub(crate) reason: CloseReason,
}

/// Copy one direction until it would block; `Ready(Ok)` once the reader ended and the writer was shut down.
fn poll_dir<R, W>(
    cx: &mut Context<'_>,
    r: &mut R,
    w: &mut W,
    d: &mut Dir,
    active: &mut bool,
) -> Poll<io::Result<()>>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    loop {
        while d.pos < d.pending.len() {
            let n = ready!(Pin::new(&mut *w).poll_write(cx, &d.pending[d.pos..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            d.pos += n;
            d.bytes += n as u64;
            *active = true;
        }
        if !d.pending.is_empty() {
            d.pending = Vec::new();
            d.pos = 0;
        }
        ready!(Pin::new(&mut *w).poll_flush(cx))?;
        if d.read_done {
            if !d.shut {
                // The peer may already be gone; a failed half-close still ends this direction.
                let _ = ready!(Pin::new(&mut *w).poll_shutdown(cx));
                d.shut = true;
            }
            return Poll::Ready(Ok(()));
        }
        let mut storage = [MaybeUninit::<u8>::uninit(); CHUNK];
        let mut rb = ReadBuf::uninit(&mut storage);
        ready!(Pin::new(&mut *r).poll_read(cx, &mut rb))?;
        let data = rb.filled();
        if data.is_empty() {
            d.read_done = true;
            continue;
        }
        *active = true;
        let mut off = 0;
        while off < data.len() {
            match Pin::new(&mut *w).poll_write(cx, &data[off..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    off += n;
                    d.bytes += n as u64;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    d.pending = data[off..].to_vec();
                    d.pos = 0;
                    return Poll::Pending;
                }
            }
        }
    }
}

/// Both directions of a tunnel.
struct Relay<'a, A: ?Sized, B: ?Sized> {
    client: &'a mut A,
    upstream: &'a mut B,
    up: Dir,
    down: Dir,
    up_done: bool,
    down_done: bool,
    last_activity: Instant,
}

/// A future moving the bytes of both directions; `Ready(Ok)` once both ended.
trait Pump: Future<Output = io::Result<()>> + Unpin {
    /// When a byte last moved in either direction.
    fn last_activity(&self) -> Instant;
    /// Bytes delivered upstream and to the client so far.
    fn bytes(&self) -> (u64, u64);
}

impl<A, B> Pump for Relay<'_, A, B>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    fn last_activity(&self) -> Instant {
        self.last_activity
    }

    fn bytes(&self) -> (u64, u64) {
        (self.up.bytes, self.down.bytes)
    }
}

impl<A, B> Future for Relay<'_, A, B>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    type Output = io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let mut active = false;
        if !this.up_done {
            match poll_dir(cx, this.client, this.upstream, &mut this.up, &mut active) {
                Poll::Ready(Ok(())) => this.up_done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        if !this.down_done {
            match poll_dir(cx, this.upstream, this.client, &mut this.down, &mut active) {
                Poll::Ready(Ok(())) => this.down_done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        if active {
            this.last_activity = Instant::now();
        }
        if this.up_done && this.down_done {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }
}

/// Limits of one tunnel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TunnelLimits {
    pub(crate) idle: Duration,
    pub(crate) lifetime: Option<Duration>,
}

/// Relay between `client` and `upstream` until both directions end, an error, the idle timeout, the lifetime,
/// or `cancel`. `early` holds client bytes read past the request head; they go upstream first.
///
/// When both are kernel sockets (directly or boxed as [`crate::BoxIo`]) on Linux the bytes are spliced,
/// otherwise copied through the poll function's stack.
pub(crate) async fn relay<A, B>(
    client: &mut A,
    upstream: &mut B,
    early: Vec<u8>,
    limits: TunnelLimits,
    cancel: &CancellationToken,
) -> TunnelReport
where
    A: AsyncIo,
    B: AsyncIo,
{
    let start = Instant::now();
    #[cfg(target_os = "linux")]
    if let (Some(c), Some(u)) = (crate::net::socket_of(client), crate::net::socket_of(upstream)) {
        return drive(splice::Relay::new(c, u, early, start), start, limits, cancel).await;
    }
    let relay = Relay {
        client,
        upstream,
        up: Dir {
            pending: early,
            ..Dir::default()
        },
        down: Dir::default(),
        up_done: false,
        down_done: false,
        last_activity: start,
    };
    drive(relay, start, limits, cancel).await
}

/// Run `pump` under the limits; the one timer is the nearer of the idle deadline and the end of life.
async fn drive<P: Pump>(
    mut pump: P,
    start: Instant,
    limits: TunnelLimits,
    cancel: &CancellationToken,
) -> TunnelReport {
    let end_of_life = limits.lifetime.map(|l| start + l);
    let next_deadline = |last: Instant| match end_of_life {
        Some(e) => e.min(last + limits.idle),
        None => last + limits.idle,
    };
    let sleep = tokio::time::sleep_until(next_deadline(start));
    tokio::pin!(sleep);
    let reason = loop {
        tokio::select! {
            r = &mut pump => break if r.is_ok() { CloseReason::Eof } else { CloseReason::Error },
            () = &mut sleep => {
                let now = Instant::now();
                if end_of_life.is_some_and(|e| now >= e) {
                    break CloseReason::Lifetime;
                }
                let deadline = next_deadline(pump.last_activity());
                if deadline <= now {
                    break CloseReason::Idle;
                }
                sleep.as_mut().reset(deadline);
            }
            () = cancel.cancelled() => break CloseReason::Shutdown,
        }
    };
    let (bytes_up, bytes_down) = pump.bytes();
    TunnelReport {
        bytes_up,
        bytes_down,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    fn limits() -> TunnelLimits {
        TunnelLimits {
            idle: Duration::from_secs(600),
            lifetime: None,
        }
    }

    #[tokio::test]
    async fn half_close_is_propagated() {
        let (mut client, mut client_side) = duplex(1024);
        let (mut upstream, mut upstream_side) = duplex(1024);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(async move {
            relay(
                &mut client_side,
                &mut upstream_side,
                b"early".to_vec(),
                limits(),
                &cancel,
            )
            .await
        });
        client.write_all(b"ping").await.unwrap_or(());
        client.shutdown().await.unwrap_or(());
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).await.unwrap_or(0);
        assert_eq!(got, b"earlyping");
        upstream.write_all(b"pong").await.unwrap_or(());
        upstream.shutdown().await.unwrap_or(());
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap_or(0);
        assert_eq!(back, b"pong");
        let report = task.await.ok().map(|r| (r.bytes_up, r.bytes_down, r.reason));
        assert_eq!(report, Some((9, 4, CloseReason::Eof)));
    }

    #[tokio::test]
    async fn backpressure_keeps_every_byte() {
        let (mut client, mut client_side) = duplex(64);
        let (mut upstream, mut upstream_side) = duplex(64);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(async move {
            relay(
                &mut client_side,
                &mut upstream_side,
                Vec::new(),
                limits(),
                &cancel,
            )
            .await
        });
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let expect = data.clone();
        let writer = tokio::spawn(async move {
            upstream.write_all(&data).await.unwrap_or(());
            upstream.shutdown().await.unwrap_or(());
            upstream
        });
        client.shutdown().await.unwrap_or(());
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap_or(0);
        assert!(
            got == expect,
            "relayed bytes differ ({} of {})",
            got.len(),
            expect.len()
        );
        drop(writer.await);
        assert_eq!(task.await.ok().map(|r| r.bytes_down), Some(200_000));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_tunnel_is_closed() {
        let (_client, mut client_side) = duplex(64);
        let (_upstream, mut upstream_side) = duplex(64);
        let cancel = CancellationToken::new();
        let r = relay(
            &mut client_side,
            &mut upstream_side,
            Vec::new(),
            limits(),
            &cancel,
        )
        .await;
        assert_eq!(r.reason, CloseReason::Idle);
    }

    #[tokio::test(start_paused = true)]
    async fn lifetime_ends_a_busy_tunnel() {
        let (mut client, mut client_side) = duplex(64);
        let (_upstream, mut upstream_side) = duplex(1 << 20);
        let cancel = CancellationToken::new();
        let lim = TunnelLimits {
            idle: Duration::from_secs(60),
            lifetime: Some(Duration::from_secs(100)),
        };
        let feeder = tokio::spawn(async move {
            for _ in 0..1000 {
                tokio::time::sleep(Duration::from_secs(30)).await;
                if client.write_all(b"x").await.is_err() {
                    break;
                }
            }
        });
        let r = relay(&mut client_side, &mut upstream_side, Vec::new(), lim, &cancel).await;
        assert_eq!((r.reason, r.bytes_up), (CloseReason::Lifetime, 3));
        feeder.abort();
    }
}
