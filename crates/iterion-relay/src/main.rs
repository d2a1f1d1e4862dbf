//! `iterion-relay`: the egress relay of the relay placement.
//!
//! Runs inside a `NetworkMode: none` sandbox as its long-lived process. It listens on TCP `127.0.0.1:3128`
//! (and `[::1]:3128` when IPv6 loopback exists) and, for every accepted connection, opens a new connection to
//! the host proxy's Unix socket (bind-mounted read-only into the container) and copies bytes both ways with
//! half-close propagation. No parsing, no authentication (the proxy authenticates), at most 1024 concurrent
//! connections, errors on stderr at most once per second, SIGTERM/SIGINT exit 0.
//!
//! `iterion-relay reap <pid>...` is the driver's leftover kill in the same sandbox: it SIGKILLs every process
//! but the listed ones, so the kill needs no program of the image (a node can replace `/bin/sh`).
//!
//! Standard library only, one file, compiled by `iterion-driver-docker`'s build script (through
//! `iterion-embed`) with `+crt-static` so it runs in any image, including images without a C library. The
//! only `unsafe` is the signal installation and `kill(2)` through the C library that std already links (std
//! has no signal API).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MAX_CONNECTIONS: usize = 1024;
const BUF: usize = 16 * 1024;
const USAGE: &str = "usage: iterion-relay --listen <ip:port> --connect <unix socket path>";

static ACTIVE: AtomicUsize = AtomicUsize::new(0);

struct Log {
    last: Mutex<Option<Instant>>,
}

impl Log {
    /// Writes one line to stderr unless a line was written less than a second ago.
    fn line(&self, msg: &str) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
            return;
        }
        *last = Some(now);
        let _ = writeln!(std::io::stderr(), "iterion-relay: {msg}");
    }
}

static LOG: Log = Log {
    last: Mutex::new(None),
};

#[allow(unsafe_code)] // the one unsafe site, see the crate docs
mod signals {
    unsafe extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
        fn _exit(code: i32) -> !;
        fn kill(pid: i32, sig: i32) -> i32;
    }
    /// Sends SIGKILL to `pid`; whether it was delivered.
    pub fn sigkill(pid: u32) -> bool {
        let Ok(pid) = i32::try_from(pid) else {
            return false;
        };
        // SAFETY: kill(2) takes two integers and touches no memory of ours; pid is positive.
        pid > 0 && unsafe { kill(pid, 9) } == 0
    }
    extern "C" fn on_term(_: i32) {
        // SAFETY: `_exit` is async-signal-safe.
        unsafe { _exit(0) }
    }
    /// SIGTERM (15) and SIGINT (2) end the relay with status 0; SIGPIPE (13) is ignored.
    pub fn install() {
        let handler = on_term as extern "C" fn(i32) as usize;
        // SAFETY: installing a handler that only calls `_exit`; `1` is SIG_IGN.
        unsafe {
            signal(15, handler);
            signal(2, handler);
            signal(13, 1);
        }
    }
}

fn parse_args(args: &[String]) -> Result<(SocketAddr, String), String> {
    let mut listen = None;
    let mut connect = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--listen" => listen = it.next().cloned(),
            "--connect" => connect = it.next().cloned(),
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument '{other}'; {USAGE}")),
        }
    }
    let listen = listen.ok_or_else(|| USAGE.to_string())?;
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| format!("--listen '{listen}' is not ip:port"))?;
    let connect = connect.ok_or_else(|| USAGE.to_string())?;
    Ok((addr, connect))
}

/// Copies `from` → `to` until end-of-file, then half-closes `to`'s write side.
fn pump(mut from: impl Read, mut to: impl Write, close: impl FnOnce()) {
    let mut buf = vec![0u8; BUF];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    close();
}

fn serve(tcp: TcpStream, socket: &str) {
    let unix = match UnixStream::connect(socket) {
        Ok(u) => u,
        Err(e) => {
            LOG.line(&format!("connect {socket}: {e}"));
            let _ = tcp.shutdown(Shutdown::Both);
            return;
        }
    };
    let (tcp_r, unix_w, unix_r, tcp_w) = match (tcp.try_clone(), unix.try_clone()) {
        (Ok(t2), Ok(u2)) => (tcp, u2, unix, t2),
        _ => {
            LOG.line("cannot duplicate a connection handle");
            return;
        }
    };
    let up_close = unix_w.try_clone().ok();
    let upstream = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || {
        pump(tcp_r, unix_w, move || {
            if let Some(u) = up_close {
                let _ = u.shutdown(Shutdown::Write);
            }
        })
    });
    let down_close = tcp_w.try_clone().ok();
    pump(unix_r, tcp_w, move || {
        if let Some(t) = down_close {
            let _ = t.shutdown(Shutdown::Write);
        }
    });
    if let Ok(h) = upstream {
        let _ = h.join();
    }
}

fn accept_loop(listener: TcpListener, socket: Arc<String>) {
    for conn in listener.incoming() {
        let tcp = match conn {
            Ok(t) => t,
            Err(e) => {
                LOG.line(&format!("accept: {e}"));
                continue;
            }
        };
        if ACTIVE.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            ACTIVE.fetch_sub(1, Ordering::SeqCst);
            LOG.line("too many connections; closing a new one");
            drop(tcp);
            continue;
        }
        let socket = Arc::clone(&socket);
        let spawned = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || {
            serve(tcp, &socket);
            ACTIVE.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            ACTIVE.fetch_sub(1, Ordering::SeqCst);
            LOG.line("cannot start a connection thread");
        }
    }
}

/// Whether a `/proc/<pid>/stat` line is of a process that can still run (not a zombie, not dead).
fn alive(stat: &str) -> bool {
    // the command name in parentheses may hold anything, ") " included: the state follows the last one
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .is_some_and(|state| !matches!(state, 'Z' | 'X' | 'x'))
}

/// The pids `/proc` lists that are neither `me` nor in `keep`.
fn others(keep: &[u32], me: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| *p != me && !keep.contains(p))
        .collect()
}

/// `iterion-relay reap <pid>...`: the leftover kill of a sandbox, with no program of the image involved (a
/// node may have replaced its shell). SIGKILLs every process but the listed ones and itself, in passes until a
/// pass finds none (at most 10, so processes forked during a pass are caught by the next); zombies are
/// skipped. Prints how many signals were sent.
fn reap(args: &[String]) -> i32 {
    let keep: Result<Vec<u32>, _> = args.iter().map(|a| a.parse::<u32>()).collect();
    let Ok(keep) = keep else {
        eprintln!("iterion-relay: usage: iterion-relay reap <pid to spare>...");
        return 2;
    };
    if std::fs::read_dir("/proc").is_err() {
        eprintln!("iterion-relay: reap: /proc cannot be read");
        return 1;
    }
    let me = std::process::id();
    let mut sent = 0u64;
    for _ in 0..10 {
        let mut found = 0u64;
        for pid in others(&keep, me) {
            let live = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| alive(&s));
            if live && signals::sigkill(pid) {
                found += 1;
            }
        }
        if found == 0 {
            break;
        }
        sent += found;
    }
    let _ = writeln!(std::io::stdout(), "{sent}");
    0
}

fn main() {
    signals::install();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "reap") {
        std::process::exit(reap(&args[1..]));
    }
    let (addr, socket) = match parse_args(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("iterion-relay: {e}");
            std::process::exit(2);
        }
    };
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("iterion-relay: listen {addr}: {e}");
            std::process::exit(1);
        }
    };
    let socket = Arc::new(socket);
    // The IPv6 loopback twin of a 127.0.0.1 listener, when the sandbox has IPv6 loopback.
    if addr.ip() == std::net::Ipv4Addr::LOCALHOST
        && let Ok(l6) = TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port())))
    {
        let s = Arc::clone(&socket);
        let _ = std::thread::Builder::new().spawn(move || accept_loop(l6, s));
    }
    accept_loop(listener, socket);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_process_that_can_run_is_alive() {
        assert!(alive("12 (sleep) S 1 12 12 0"));
        assert!(alive("12 (a) Z) (b) R 1"));
        assert!(!alive("12 (sleep) Z 1 12 12 0"));
        assert!(!alive("12 (x) S) Z 1"));
        assert!(!alive("12 (sleep) X 1"));
        assert!(!alive("garbage"));
    }

    #[test]
    fn the_reaper_spares_itself_and_the_listed_pids() {
        let me = std::process::id();
        let all = others(&[], u32::MAX);
        assert!(all.contains(&me), "/proc lists this process");
        assert!(!others(&[1], me).contains(&me));
        assert!(!others(&[1, me], 0).contains(&1));
        assert_eq!(reap(&["x".into()]), 2);
    }
}
