//! The Linux pump: `splice(2)` between two kernel sockets through a kernel pipe, driven by tokio readiness.
//!
//! Per direction the cycle is: splice what the source socket holds into an **empty** pipe (at most the pipe's
//! capacity), then splice the pipe into the destination socket until it is empty again, then repeat. Filling
//! only an empty pipe keeps `EAGAIN` unambiguous: it can only mean the source socket has nothing, so the read
//! readiness tokio caches is cleared only when it should be.
//!
//! Pipes cost two descriptors and kernel memory, so a direction holds one only while bytes are in flight: it
//! takes a pipe from a small per-thread pool when the source turns readable and gives it back, empty, as soon as
//! the source would block. An idle tunnel therefore holds no pipe, and a busy one reuses the same pipe without
//! a syscall to create it. A pipe still holding bytes when the tunnel ends is closed, never pooled.
//!
//! Fallbacks: when no pipe can be had (descriptor limit) the direction copies that round through a buffer on
//! the stack; when the kernel refuses to splice these descriptors (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`) the
//! direction copies from then on. Bytes the client sent past its request head are written before anything is
//! spliced.

use super::Pump;
use crate::net::Socket;
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncWrite, Interest};
use tokio::time::Instant;

/// Requested pipe capacity (`F_SETPIPE_SZ`). The kernel may refuse it (above `/proc/sys/fs/pipe-max-size`, or
/// once the user's pipes together pass `/proc/sys/fs/pipe-user-pages-soft`, e.g. with many busy tunnels); the pipe
/// then keeps its default size, which only means more cycles. On loopback (`cargo xtask bench proxy bulk`) the
/// proxy spent about 280 ms of CPU per GiB with 1 MiB, 335 ms with 256 KiB and 550 ms with 64 KiB, where the
/// copy loop spends about 630 ms.
const PIPE_SIZE: usize = 1024 * 1024;
/// Empty pipes kept per worker thread.
const POOL_MAX: usize = 4;
/// Bytes per read when copying instead of splicing; on the poll function's stack.
const CHUNK: usize = 64 * 1024;

/// A kernel pipe: read end, write end, and how many buffers (slots) it has.
#[derive(Debug)]
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    slots: usize,
}

thread_local! {
    /// Empty pipes ready for the next direction that has bytes to move.
    static POOL: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

/// An empty pipe: pooled, or new.
fn take_pipe() -> io::Result<Pipe> {
    if let Some(p) = POOL.with_borrow_mut(Vec::pop) {
        return Ok(p);
    }
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    // Best effort: a smaller pipe still works. F_SETPIPE_SZ answers the capacity the pipe got; a refusal leaves
    // the default, which is at least one page per slot of the kernel's 16.
    let bytes = fcntl(&w, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE as i32))
        .ok()
        .and_then(|b| usize::try_from(b).ok())
        .unwrap_or(16 * PAGE);
    Ok(Pipe {
        r,
        w,
        slots: (bytes / PAGE).max(1),
    })
}

/// The unit of pipe capacity: one slot holds at most a page and at least one byte.
const PAGE: usize = 4096;

/// Return an empty pipe to the pool (closed when the pool is full).
fn give_back(p: Pipe) {
    POOL.with_borrow_mut(|pool| {
        if pool.len() < POOL_MAX {
            pool.push(p);
        }
    });
}

#[cfg(test)]
thread_local! {
    /// Splice calls that tried to fill a pipe from a socket, on this thread.
    static FILLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many empty pipes this thread's pool holds.
#[cfg(test)]
fn pooled() -> usize {
    POOL.with_borrow(Vec::len)
}

const FLAGS: SpliceFFlags = SpliceFFlags::SPLICE_F_NONBLOCK.union(SpliceFFlags::SPLICE_F_MOVE);

impl Socket<'_> {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Socket::Tcp(s) => s.as_fd(),
            Socket::Unix(s) => s.as_fd(),
        }
    }

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Socket::Tcp(s) => s.poll_read_ready(cx),
            Socket::Unix(s) => s.poll_read_ready(cx),
        }
    }

    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Socket::Tcp(s) => s.poll_write_ready(cx),
            Socket::Unix(s) => s.poll_write_ready(cx),
        }
    }

    /// Run `f` if tokio believes the socket ready for `interest`; a `WouldBlock` from `f` clears that belief.
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            Socket::Tcp(s) => s.try_io(interest, f),
            Socket::Unix(s) => s.try_io(interest, f),
        }
    }

    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.try_read(buf),
            Socket::Unix(s) => s.try_read(buf),
        }
    }

    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.try_write(buf),
            Socket::Unix(s) => s.try_write(buf),
        }
    }

    /// Half-close: shut down the write side.
    fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Socket::Tcp(s) => Pin::new(&mut **s).poll_shutdown(cx),
            Socket::Unix(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

/// One direction.
#[derive(Debug, Default)]
struct Dir {
    /// The pipe, held only while `in_pipe > 0` (and within one poll).
    pipe: Option<Pipe>,
    /// Bytes spliced into `pipe` and not yet out of it.
    in_pipe: usize,
    /// User-space bytes to write before anything else (early bytes, the rest of a copied chunk).
    pending: Vec<u8>,
    pos: usize,
    /// The kernel refused to splice these descriptors: copy.
    copy: bool,
    read_done: bool,
    shut: bool,
    bytes: u64,
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// Errors meaning "splice does not work for these descriptors" rather than "the connection failed".
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP)
    )
}

/// Move one direction until it would block; `Ready(Ok)` once the source ended and the destination was shut down.
fn poll_dir(
    cx: &mut Context<'_>,
    src: &Socket<'_>,
    dst: &mut Socket<'_>,
    d: &mut Dir,
    active: &mut bool,
) -> Poll<io::Result<()>> {
    loop {
        while d.pos < d.pending.len() {
            match dst.try_write(&d.pending[d.pos..]) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    d.pos += n;
                    d.bytes += n as u64;
                    *active = true;
                }
                Err(e) if would_block(&e) => ready!(dst.poll_write_ready(cx))?,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        if !d.pending.is_empty() {
            d.pending = Vec::new();
            d.pos = 0;
        }
        while d.in_pipe > 0
            && let Some(pipe) = &d.pipe
        {
            let out = dst.try_io(Interest::WRITABLE, || {
                Ok(splice(&pipe.r, None, dst.fd(), None, d.in_pipe, FLAGS)?)
            });
            match out {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    d.in_pipe -= n;
                    d.bytes += n as u64;
                    *active = true;
                }
                Err(e) if would_block(&e) => ready!(dst.poll_write_ready(cx))?,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        if d.read_done {
            if !d.shut {
                // The peer may already be gone; a failed half-close still ends this direction.
                let _ = ready!(dst.poll_shutdown(cx));
                d.shut = true;
            }
            return Poll::Ready(Ok(()));
        }
        if d.copy {
            ready!(copy_once(cx, src, dst, d, active))?;
            continue;
        }
        // The pipe is empty here: fill it.
        let pipe = match d.pipe.take() {
            Some(p) => p,
            None => match take_pipe() {
                Ok(p) => p,
                // Out of descriptors (or pipe memory): copy this round, try a pipe again next round.
                Err(_) => {
                    ready!(copy_once(cx, src, dst, d, active))?;
                    continue;
                }
            },
        };
        // A fill that stopped short of both the pipe's bytes and its slots stopped because the socket had
        // nothing more: report it as `WouldBlock` so tokio clears the read readiness now (the bytes moved are
        // kept in `short`), instead of learning it from one more splice answering EAGAIN. tokio's own
        // `poll_read` does the same for short reads; with edge-triggered readiness a byte arriving later wakes
        // the task again, and one arriving during the call is not lost because tokio clears only the readiness
        // it saw before the call. The slot bound matters: bytes that came as many tiny segments can fill every
        // slot of the pipe with a few bytes each while the socket still holds more.
        let mut short = 0;
        let filled = src.try_io(Interest::READABLE, || {
            #[cfg(test)]
            FILLS.set(FILLS.get() + 1);
            let n = splice(src.fd(), None, &pipe.w, None, PIPE_SIZE, FLAGS)?;
            if n > 0 && n < pipe.slots && n < PIPE_SIZE {
                short = n;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let filled = match filled {
            Err(e) if would_block(&e) && short > 0 => Ok(short),
            other => other,
        };
        match filled {
            Ok(0) => {
                give_back(pipe);
                d.read_done = true;
            }
            Ok(n) => {
                d.in_pipe = n;
                d.pipe = Some(pipe);
                *active = true;
            }
            Err(e) if would_block(&e) => {
                give_back(pipe);
                ready!(src.poll_read_ready(cx))?;
            }
            Err(e) if unsupported(&e) => {
                give_back(pipe);
                d.copy = true;
            }
            // The pipe may hold nothing, but an error ends the tunnel anyway: let it close.
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// One read through the stack, written straight on; what the destination does not take goes to `pending`.
/// `Ready(Ok)` after a read (or end of file), `Pending` while the source has nothing.
fn copy_once(
    cx: &mut Context<'_>,
    src: &Socket<'_>,
    dst: &Socket<'_>,
    d: &mut Dir,
    active: &mut bool,
) -> Poll<io::Result<()>> {
    let mut buf = [0u8; CHUNK];
    let n = loop {
        match src.try_read(&mut buf) {
            Ok(n) => break n,
            Err(e) if would_block(&e) => ready!(src.poll_read_ready(cx))?,
            Err(e) => return Poll::Ready(Err(e)),
        }
    };
    if n == 0 {
        d.read_done = true;
        return Poll::Ready(Ok(()));
    }
    *active = true;
    let mut off = 0;
    while off < n {
        match dst.try_write(&buf[off..n]) {
            Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            Ok(w) => {
                off += w;
                d.bytes += w as u64;
            }
            Err(e) if would_block(&e) => {
                d.pending = buf[off..n].to_vec();
                d.pos = 0;
                break;
            }
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
    Poll::Ready(Ok(()))
}

/// Both directions of a tunnel between two kernel sockets.
#[derive(Debug)]
pub(super) struct Relay<'a> {
    client: Socket<'a>,
    upstream: Socket<'a>,
    up: Dir,
    down: Dir,
    up_done: bool,
    down_done: bool,
    last_activity: Instant,
}

impl<'a> Relay<'a> {
    /// `early`: client bytes that go upstream first.
    pub(super) fn new(client: Socket<'a>, upstream: Socket<'a>, early: Vec<u8>, start: Instant) -> Self {
        Self {
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
        }
    }
}

impl Future for Relay<'_> {
    type Output = io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let mut active = false;
        if !this.up_done {
            match poll_dir(cx, &this.client, &mut this.upstream, &mut this.up, &mut active) {
                Poll::Ready(Ok(())) => this.up_done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        if !this.down_done {
            match poll_dir(cx, &this.upstream, &mut this.client, &mut this.down, &mut active) {
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

impl Pump for Relay<'_> {
    fn last_activity(&self) -> Instant {
        self.last_activity
    }

    fn bytes(&self) -> (u64, u64) {
        (self.up.bytes, self.down.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::socket_of;
    use crate::tunnel::{CloseReason, TunnelLimits, relay};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream, UnixStream};
    use tokio::time::Duration;
    use tokio_util::sync::CancellationToken;

    /// A connected loopback TCP pair.
    async fn tcp_pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let a = TcpStream::connect(l.local_addr().expect("addr"));
        let (a, b) = tokio::join!(a, l.accept());
        (a.expect("connect"), b.expect("accept").0)
    }

    fn pattern(len: usize, seed: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(seed) % 251) as u8)
            .collect()
    }

    fn limits() -> TunnelLimits {
        TunnelLimits {
            idle: Duration::from_secs(600),
            lifetime: None,
        }
    }

    /// Send `up` from the client peer and `down` from the upstream peer at the same time, each half-closing
    /// when done; return what each peer received.
    async fn exchange<C, U>(client: C, upstream: U, up: Vec<u8>, down: Vec<u8>) -> (Vec<u8>, Vec<u8>)
    where
        C: AsyncRead + AsyncWrite + Send + 'static,
        U: AsyncRead + AsyncWrite + Send + 'static,
    {
        let c = tokio::spawn(async move {
            let (mut r, mut w) = tokio::io::split(client);
            let send = async {
                w.write_all(&up).await.expect("client write");
                w.shutdown().await.expect("client half-close");
            };
            let mut got = Vec::new();
            let recv = r.read_to_end(&mut got);
            let ((), n) = tokio::join!(send, recv);
            n.expect("client read");
            got
        });
        let u = tokio::spawn(async move {
            let (mut r, mut w) = tokio::io::split(upstream);
            let send = async {
                w.write_all(&down).await.expect("upstream write");
                w.shutdown().await.expect("upstream half-close");
            };
            let mut got = Vec::new();
            let recv = r.read_to_end(&mut got);
            let ((), n) = tokio::join!(send, recv);
            n.expect("upstream read");
            got
        });
        (c.await.expect("client task"), u.await.expect("upstream task"))
    }

    #[test]
    fn kernel_sockets_are_recognised_through_boxes() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (a, _b) = tcp_pair().await;
            let mut boxed: crate::BoxIo = Box::new(Box::new(a) as crate::BoxIo);
            assert!(matches!(socket_of(&mut boxed), Some(Socket::Tcp(_))));
            let (u, _v) = UnixStream::pair().expect("pair");
            let mut u: crate::BoxIo = Box::new(u);
            assert!(matches!(socket_of(&mut u), Some(Socket::Unix(_))));
            let (mem, _other) = tokio::io::duplex(64);
            let mut mem: crate::BoxIo = Box::new(mem);
            assert!(socket_of(&mut mem).is_none());
        });
    }

    #[tokio::test]
    async fn both_directions_half_close_and_early_bytes_through_the_pipe() {
        let (client_peer, mut client) = UnixStream::pair().expect("pair");
        let (upstream_peer, mut upstream) = tcp_pair().await;
        let up = pattern(3 << 20, 7);
        let down = pattern(5 << 20, 13);
        let peers = tokio::spawn(exchange(client_peer, upstream_peer, up.clone(), down.clone()));
        let cancel = CancellationToken::new();
        let report = relay(&mut client, &mut upstream, b"early".to_vec(), limits(), &cancel).await;
        let (client_got, upstream_got) = peers.await.expect("peers");
        let mut expect_up = b"early".to_vec();
        expect_up.extend_from_slice(&up);
        assert!(
            upstream_got == expect_up,
            "upstream got {} bytes",
            upstream_got.len()
        );
        assert!(client_got == down, "client got {} bytes", client_got.len());
        assert_eq!(
            (report.bytes_up, report.bytes_down, report.reason),
            (expect_up.len() as u64, down.len() as u64, CloseReason::Eof)
        );
        // Both directions spliced, and gave their pipes back empty.
        assert!(pooled() >= 1, "no pipe was returned to the pool");
    }

    #[tokio::test]
    async fn an_idle_tunnel_holds_no_pipe() {
        let (mut client_peer, client) = tcp_pair().await;
        let (mut upstream_peer, upstream) = tcp_pair().await;
        let (mut client, mut upstream) = (client, upstream);
        let mut relay = Relay::new(
            Socket::Tcp(&mut client),
            Socket::Tcp(&mut upstream),
            Vec::new(),
            Instant::now(),
        );
        client_peer.write_all(b"ping").await.expect("write");
        let mut b = [0u8; 4];
        tokio::select! {
            r = &mut relay => panic!("relay ended: {r:?}"),
            r = upstream_peer.read_exact(&mut b) => { r.expect("read"); }
        }
        assert_eq!(&b, b"ping");
        upstream_peer.write_all(b"pong").await.expect("write");
        tokio::select! {
            r = &mut relay => panic!("relay ended: {r:?}"),
            r = client_peer.read_exact(&mut b) => { r.expect("read"); }
        }
        assert_eq!(&b, b"pong");
        // The relay splices and then tries the next read within one poll, so by the time a peer has the
        // bytes the direction would block and its pipe is back in the pool.
        assert!(relay.up.pipe.is_none() && relay.down.pipe.is_none());
        assert_eq!((relay.up.in_pipe, relay.down.in_pipe), (0, 0));
        assert_eq!((relay.up.bytes, relay.down.bytes), (4, 4));
        assert!(pooled() >= 1);
    }

    #[tokio::test]
    async fn a_short_fill_clears_readiness_without_a_failed_splice_and_later_bytes_still_flow() {
        let (mut client_peer, mut client) = tcp_pair().await;
        let (mut upstream_peer, mut upstream) = tcp_pair().await;
        let mut relay = Relay::new(
            Socket::Tcp(&mut client),
            Socket::Tcp(&mut upstream),
            Vec::new(),
            Instant::now(),
        );
        let mut before = FILLS.get();
        let mut b = [0u8; 64];
        for round in 0..4u8 {
            // Each round's bytes arrive after the previous fill cleared the readiness: only a new edge from
            // the kernel can wake the relay.
            tokio::time::sleep(Duration::from_millis(20)).await;
            client_peer.write_all(&[round; 64]).await.expect("write");
            tokio::select! {
                r = &mut relay => panic!("relay ended: {r:?}"),
                r = upstream_peer.read_exact(&mut b) => { r.expect("read"); }
            }
            assert_eq!(b, [round; 64]);
            if round == 0 {
                // The first round may also meet an edge the kernel raised before the relay ever polled.
                before = FILLS.get();
            }
        }
        // One fill per round: the short fill itself told that the socket was drained. Without that, every
        // round costs a second splice that answers EAGAIN.
        assert_eq!(FILLS.get() - before, 3);
        assert_eq!(relay.up.bytes, 256);
        // End of file still arrives after a short fill.
        drop(client_peer);
        let upstream_end = async {
            let mut rest = Vec::new();
            let n = upstream_peer.read_to_end(&mut rest).await;
            upstream_peer.shutdown().await.expect("upstream half-close");
            n
        };
        let (r, n) = tokio::join!(&mut relay, upstream_end);
        r.expect("relay");
        assert_eq!(n.expect("read"), 0);
    }

    #[tokio::test]
    async fn copy_fallback_keeps_every_byte_under_backpressure() {
        let (client_peer, mut client) = tcp_pair().await;
        let (upstream_peer, mut upstream) = UnixStream::pair().expect("pair");
        let up = pattern(1 << 20, 3);
        let down = pattern(6 << 20, 5);
        let mut relay = Relay::new(
            Socket::Tcp(&mut client),
            Socket::Unix(&mut upstream),
            b"first".to_vec(),
            Instant::now(),
        );
        relay.up.copy = true;
        relay.down.copy = true;
        let peers = tokio::spawn(exchange(client_peer, upstream_peer, up.clone(), down.clone()));
        relay.await.expect("relay");
        let (client_got, upstream_got) = peers.await.expect("peers");
        let mut expect_up = b"first".to_vec();
        expect_up.extend_from_slice(&up);
        assert!(
            upstream_got == expect_up,
            "upstream got {} bytes",
            upstream_got.len()
        );
        assert!(client_got == down, "client got {} bytes", client_got.len());
    }

    #[tokio::test]
    async fn a_reset_peer_ends_the_tunnel_with_an_error() {
        let (client_peer, mut client) = tcp_pair().await;
        let (upstream_peer, mut upstream) = tcp_pair().await;
        // Linger 0: closing sends RST, so the relay's next write fails.
        client_peer.set_zero_linger().expect("linger");
        drop(client_peer);
        let writer = tokio::spawn(async move {
            let mut upstream_peer = upstream_peer;
            let chunk = vec![1u8; 64 * 1024];
            for _ in 0..256 {
                if upstream_peer.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            upstream_peer
        });
        let report = relay(
            &mut client,
            &mut upstream,
            Vec::new(),
            limits(),
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(report.reason, CloseReason::Error);
        // Closing the proxy side unblocks the writer.
        drop(upstream);
        drop(writer.await);
    }
}
