//! Proxy benchmark (spec 04 §17): one run measures a direct loopback baseline, iterion-netproxy, and squid /
//! tinyproxy when their binaries are installed, then prints a table.
//!
//! - bulk: one tunnel, `BULK_MIB` MiB sent upstream → client, MiB/s, the best of `BULK_RUNS` runs for every
//!   subject alike (a shared 2-core machine is noisy), with the CPU time the proxy process and this process
//!   (source + client) spent per GiB over all runs (`/proc/<pid>/stat`), which load from other work disturbs
//!   far less than the rate;
//! - rate: 32 concurrent clients, each looping `RATE_ITERATIONS` times connect + CONNECT + 64-byte echo + close;
//!   tunnels/s, and the CPU time the proxy process and this process (clients + echo server) spent per tunnel;
//! - idle RSS: `IDLE_TUNNELS` established idle tunnels; (VmRSS with them − VmRSS before) / count, read from
//!   `/proc/<pid>/status` of the proxy process. The proxy runs in a child process (this binary re-executed with
//!   `--proxy-child`) so the client sockets never count in its RSS.
//!
//! `ITERION_BENCH_REFERENCE_PROXY` adds the reference proxy as one more subject (see `start_reference` for how
//! it is started). After the table the bench prints each §17 target as met, missed or not measured.
//!
//! - inspect (with the `tls-inspection` feature): the latency of an HTTPS request through an inspected tunnel
//!   with a secret substitution against an opaque CONNECT tunnel, new connection per request and keep-alive,
//!   interleaved (see `inspect/mod.rs`).
//!
//! Everything is on loopback and bounded. Run with `cargo xtask bench proxy`; `cargo xtask bench proxy bulk`
//! (or `rate`, `idle`, `inspect`, several allowed) runs only those measurements, e.g. under `perf`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[cfg(feature = "tls-inspection")]
mod inspect;

const BULK_MIB: usize = 1024;
const BULK_RUNS: usize = 3;
const CLIENTS: usize = 32;
const RATE_ITERATIONS: usize = 100;
const IDLE_TUNNELS: usize = 1000;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--proxy-child") {
        return proxy_child();
    }
    let only: Vec<&str> = args
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|a| ["bulk", "rate", "idle", "inspect"].contains(a))
        .collect();
    let phases = Phases {
        bulk: only.is_empty() || only.contains(&"bulk"),
        rate: only.is_empty() || only.contains(&"rate"),
        idle: only.is_empty() || only.contains(&"idle"),
        inspect: only.is_empty() || only.contains(&"inspect"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run(phases))
}

/// Which measurements to run.
#[derive(Debug, Clone, Copy)]
struct Phases {
    bulk: bool,
    rate: bool,
    idle: bool,
    inspect: bool,
}

/// The child: serve iterion-netproxy without authentication, allowing loopback explicitly.
fn proxy_child() -> anyhow::Result<()> {
    use iterion_netpolicy::{Mode, Policy};
    use iterion_netproxy::{Listen, Proxy, ProxyConfig};
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let policy =
            Policy::compile(Mode::Allowlist, &[], &["127.0.0.1"]).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let config = ProxyConfig::builder()
            .listen(Listen::Tcp("127.0.0.1:0".parse()?))
            .no_auth(Arc::new(policy))
            .with_limits(|l| l.max_tunnels = 4 * IDLE_TUNNELS)
            .build()?;
        let proxy = Proxy::start(config).await?;
        println!("listening on {}", proxy.listening());
        // Serve until the parent closes our stdin.
        let mut stdin = tokio::io::stdin();
        let mut b = [0u8; 1];
        let _ = stdin.read(&mut b).await;
        proxy.shutdown(Duration::ZERO).await;
        Ok(())
    })
}

/// A proxy under test: its address, how it answers CONNECT, its process.
struct Subject {
    name: String,
    addr: Option<SocketAddr>,
    child: Option<Child>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Subject {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[derive(Default)]
struct Row {
    name: String,
    bulk_mib_s: Option<f64>,
    /// CPU milliseconds per GiB: the proxy process, this process (source + client).
    cpu_ms_gib: (Option<f64>, Option<f64>),
    rate: Option<f64>,
    /// CPU microseconds per tunnel in the rate measurement: the proxy process, this process (clients + echo
    /// server). Their sum bounds the rate on a machine whose cores they share: cores × 10^6 / sum.
    cpu_us_tunnel: (Option<f64>, Option<f64>),
    rss_per_tunnel: Option<f64>,
    note: String,
}

async fn run(phases: Phases) -> anyhow::Result<()> {
    if phases.inspect {
        #[cfg(feature = "tls-inspection")]
        inspect::run().await?;
        #[cfg(not(feature = "tls-inspection"))]
        println!("inspect: not measured (built without the tls-inspection feature)");
    }
    if !(phases.bulk || phases.rate || phases.idle) {
        return Ok(());
    }
    let source = start_source(BULK_MIB * 1024 * 1024).await?;
    let echo = start_echo().await?;
    let mut rows = Vec::new();

    let direct = Subject {
        name: "direct loopback".into(),
        addr: None,
        child: None,
        _dir: None,
    };
    rows.push(measure(&direct, source, echo, phases, false).await);

    match start_iterion() {
        Ok(s) => rows.push(measure(&s, source, echo, phases, true).await),
        Err(e) => rows.push(Row {
            name: "iterion-netproxy".into(),
            note: format!("not measured: {e}"),
            ..Row::default()
        }),
    }
    for (name, start) in [
        ("squid", start_squid as fn() -> anyhow::Result<Subject>),
        ("tinyproxy", start_tinyproxy),
    ] {
        match start() {
            Ok(s) => {
                let mut row = measure(&s, source, echo, phases, false).await;
                row.note = "RSS not measured (multi-process or thread-per-connection)".into();
                rows.push(row);
            }
            Err(e) => rows.push(Row {
                name: name.into(),
                note: format!("not measured: {e}"),
                ..Row::default()
            }),
        }
    }
    if let Ok(command) = std::env::var("ITERION_BENCH_REFERENCE_PROXY") {
        match start_reference(&command) {
            Ok(s) => {
                let mut row = measure(&s, source, echo, phases, true).await;
                if row.note.is_empty() {
                    row.note = "RSS counts its main process only".into();
                }
                rows.push(row);
            }
            Err(e) => rows.push(Row {
                name: "reference".into(),
                note: format!("not measured: {e}"),
                ..Row::default()
            }),
        }
    }
    print_table(&rows);
    print_goals(&rows);
    Ok(())
}

/// The spec's targets (04 §17) against this run's rows: met, missed, or not measured.
fn print_goals(rows: &[Row]) {
    let row = |name: &str| rows.iter().find(|r| r.name == name);
    let Some(ours) = row("iterion-netproxy") else {
        return;
    };
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    println!();
    match (ours.bulk_mib_s, rows.first().and_then(|r| r.bulk_mib_s)) {
        (Some(v), Some(d)) if d > 0.0 => {
            println!(
                "bulk: {:.0} % of direct (target >= 90 %): {}",
                100.0 * v / d,
                verdict(v >= 0.9 * d)
            )
        }
        _ => println!("bulk: not measured"),
    }
    for other in ["squid", "reference"] {
        match (ours.rate, row(other).and_then(|r| r.rate)) {
            (Some(v), Some(o)) if o > 0.0 => {
                println!(
                    "tunnels/s: {:.2}x {other} (target >= 2x): {}",
                    v / o,
                    verdict(v >= 2.0 * o)
                )
            }
            _ => println!("tunnels/s vs {other}: not measured"),
        }
    }
    match ours.rss_per_tunnel {
        Some(b) => println!(
            "RSS per idle tunnel: {:.2} KiB (target <= 8 KiB): {}",
            b / 1024.0,
            verdict(b <= 8.0 * 1024.0)
        ),
        None => println!("RSS per idle tunnel: not measured"),
    }
}

/// Start the reference proxy named by `ITERION_BENCH_REFERENCE_PROXY` on a free loopback port. A command that
/// contains `{port}` runs through `sh -c` with the port put in its place (e.g. `ref-proxy --listen
/// 127.0.0.1:{port}`); otherwise the value is a program, run as `PROGRAM PORT`. Either way `PORT` is also in its
/// environment, and it must accept CONNECT on `127.0.0.1:PORT` without authentication, allowing loopback targets.
fn start_reference(command: &str) -> anyhow::Result<Subject> {
    anyhow::ensure!(
        !command.trim().is_empty(),
        "ITERION_BENCH_REFERENCE_PROXY is empty"
    );
    let port = free_port()?;
    let mut cmd = if command.contains("{port}") {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("exec {}", command.replace("{port}", &port.to_string())));
        c
    } else {
        let mut c = Command::new(command);
        c.arg(port.to_string());
        c
    };
    let child = cmd
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start '{command}': {e}"))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let subject = Subject {
        name: "reference".into(),
        addr: Some(addr),
        child: Some(child),
        _dir: None,
    };
    wait_port(addr)?;
    Ok(subject)
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}")).unwrap_or_else(|| "-".into())
}

fn print_table(rows: &[Row]) {
    let base = rows.first().and_then(|r| r.bulk_mib_s);
    println!();
    println!(
        "| subject | bulk MiB/s ({BULK_MIB} MiB, best of {BULK_RUNS}) | % of direct | CPU ms/GiB proxy | CPU ms/GiB source+client | tunnels/s ({CLIENTS} clients) | CPU µs/tunnel proxy | CPU µs/tunnel clients+echo | RSS/idle tunnel ({IDLE_TUNNELS}) | note |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let pct = match (r.bulk_mib_s, base) {
            (Some(v), Some(b)) if b > 0.0 => format!("{:.0} %", 100.0 * v / b),
            _ => "-".into(),
        };
        let rss = r
            .rss_per_tunnel
            .map(|b| format!("{:.2} KiB", b / 1024.0))
            .unwrap_or_else(|| "-".into());
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            fmt(r.bulk_mib_s, 0),
            pct,
            fmt(r.cpu_ms_gib.0, 0),
            fmt(r.cpu_ms_gib.1, 0),
            fmt(r.rate, 0),
            fmt(r.cpu_us_tunnel.0, 0),
            fmt(r.cpu_us_tunnel.1, 0),
            rss,
            r.note
        );
    }
}

async fn measure(s: &Subject, source: SocketAddr, echo: SocketAddr, phases: Phases, rss: bool) -> Row {
    let mut row = Row {
        name: s.name.clone(),
        ..Row::default()
    };
    let mut notes = Vec::new();
    let pid = s.child.as_ref().map(Child::id);
    let cpu_before = (pid.map(cpu_ms), cpu_ms(std::process::id()));
    for _ in 0..if phases.bulk { BULK_RUNS } else { 0 } {
        match bulk(s.addr, source).await {
            Ok(v) => row.bulk_mib_s = Some(row.bulk_mib_s.map_or(v, |b: f64| b.max(v))),
            Err(e) => {
                notes.push(format!("bulk failed: {e}"));
                break;
            }
        }
    }
    if row.bulk_mib_s.is_some() {
        let gib = (BULK_RUNS * BULK_MIB) as f64 / 1024.0;
        let per_gib = |before: Option<f64>, after: Option<f64>| match (before, after) {
            (Some(b), Some(a)) => Some((a - b) / gib),
            _ => None,
        };
        row.cpu_ms_gib = (
            per_gib(cpu_before.0.flatten(), pid.and_then(cpu_ms)),
            per_gib(cpu_before.1, cpu_ms(std::process::id())),
        );
    }
    if phases.rate {
        let before = (pid.and_then(cpu_ms), cpu_ms(std::process::id()));
        match rate(s.addr, echo).await {
            Ok(v) => {
                row.rate = Some(v);
                let per_tunnel = |before: Option<f64>, after: Option<f64>| {
                    Some((after? - before?) * 1000.0 / (CLIENTS * RATE_ITERATIONS) as f64)
                };
                row.cpu_us_tunnel = (
                    per_tunnel(before.0, pid.and_then(cpu_ms)),
                    per_tunnel(before.1, cpu_ms(std::process::id())),
                );
            }
            Err(e) => notes.push(format!("rate failed: {e}")),
        }
    }
    if rss
        && phases.idle
        && let Some(pid) = s.child.as_ref().map(Child::id)
    {
        match idle_rss(s.addr, echo, pid).await {
            Ok(v) => row.rss_per_tunnel = Some(v),
            Err(e) => notes.push(format!("rss failed: {e}")),
        }
    }
    row.note = notes.join("; ");
    row
}

/// A server that writes `bytes` zero bytes to each connection, then closes it.
async fn start_source(bytes: usize) -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let chunk = vec![0u8; 64 * 1024];
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    Ok(addr)
}

/// An echo server.
async fn start_echo() -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Ok(addr)
}

/// Open a stream to `target`, directly or through a CONNECT proxy; returns the stream and any bytes read past
/// the proxy's response head.
async fn open(proxy: Option<SocketAddr>, target: SocketAddr) -> anyhow::Result<(TcpStream, usize)> {
    let Some(proxy) = proxy else {
        let s = TcpStream::connect(target).await?;
        s.set_nodelay(true)?;
        return Ok((s, 0));
    };
    let mut s = TcpStream::connect(proxy).await?;
    s.set_nodelay(true)?;
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await?;
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await?;
        anyhow::ensure!(n > 0, "proxy closed before answering CONNECT");
        head.extend_from_slice(&buf[..n]);
        if let Some(p) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            anyhow::ensure!(
                head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"),
                "CONNECT refused: {}",
                String::from_utf8_lossy(&head[..p])
            );
            return Ok((s, head.len() - p - 4));
        }
        anyhow::ensure!(head.len() < 16 * 1024, "CONNECT response head too large");
    }
}

/// MiB/s for one tunnel carrying the source's bytes to the client.
async fn bulk(proxy: Option<SocketAddr>, source: SocketAddr) -> anyhow::Result<f64> {
    let start = Instant::now();
    let (mut s, mut total) = open(proxy, source).await?;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        total += n;
    }
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(total == BULK_MIB * 1024 * 1024, "received {total} bytes");
    Ok(BULK_MIB as f64 / secs)
}

/// Tunnels per second with `CLIENTS` concurrent clients.
async fn rate(proxy: Option<SocketAddr>, echo: SocketAddr) -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        tasks.push(tokio::spawn(async move {
            let msg = [42u8; 64];
            let mut back = [0u8; 64];
            for _ in 0..RATE_ITERATIONS {
                let (mut s, extra) = open(proxy, echo).await?;
                anyhow::ensure!(extra == 0, "unexpected bytes before the echo");
                s.write_all(&msg).await?;
                s.read_exact(&mut back).await?;
                anyhow::ensure!(back == msg, "echo mismatch");
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok((CLIENTS * RATE_ITERATIONS) as f64 / start.elapsed().as_secs_f64())
}

/// User + system CPU time of process `pid` (all its threads) in milliseconds; `None` when unreadable.
fn cpu_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces: state is the first.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // /proc reports clock ticks of USER_HZ, which is 100 on Linux.
    Some(ticks as f64 * 10.0)
}

fn vm_rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or_else(|| anyhow::anyhow!("no VmRSS"))?;
    let kib: u64 = line.split_whitespace().nth(1).unwrap_or("0").parse()?;
    Ok(kib * 1024)
}

/// Bytes of proxy RSS per established idle tunnel.
async fn idle_rss(proxy: Option<SocketAddr>, echo: SocketAddr, pid: u32) -> anyhow::Result<f64> {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = vm_rss(pid)?;
    let mut open_tunnels = Vec::with_capacity(IDLE_TUNNELS);
    for _ in 0..IDLE_TUNNELS {
        let (mut s, _) = open(proxy, echo).await?;
        // One round trip so the upstream side is fully established too.
        s.write_all(b"x").await?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        open_tunnels.push(s);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = vm_rss(pid)?;
    drop(open_tunnels);
    Ok(after.saturating_sub(before) as f64 / IDLE_TUNNELS as f64)
}

/// Read the child's first stdout line `listening on ADDR`.
fn wait_listening(child: &mut Child) -> anyhow::Result<SocketAddr> {
    let out = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| anyhow::anyhow!("unexpected '{line}'"))?;
    Ok(addr.parse()?)
}

fn start_iterion() -> anyhow::Result<Subject> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("--proxy-child")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let addr = wait_listening(&mut child)?;
    Ok(Subject {
        name: "iterion-netproxy".into(),
        addr: Some(addr),
        child: Some(child),
        _dir: None,
    })
}

fn find_binary(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.exists())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Wait until something accepts on `addr` (bounded).
fn wait_port(addr: SocketAddr) -> anyhow::Result<()> {
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    anyhow::bail!("nothing listens on {addr} after 10 s")
}

fn start_squid() -> anyhow::Result<Subject> {
    let bin = find_binary("squid").ok_or_else(|| anyhow::anyhow!("squid is not installed"))?;
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let d = dir.path().display();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
    let conf = format!(
        "http_port 127.0.0.1:{port}\nhttp_access allow all\ncache deny all\ncache_mem 8 MB\nmax_filedescriptors 8192\n\
         pid_filename {d}/squid.pid\naccess_log none\ncache_log {d}/cache.log\ncoredump_dir {d}\nshutdown_lifetime 0 seconds\n"
    );
    let path = dir.path().join("squid.conf");
    std::fs::write(&path, conf)?;
    let child = Command::new(bin)
        .arg("-N")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let subject = Subject {
        name: "squid".into(),
        addr: Some(addr),
        child: Some(child),
        _dir: Some(dir),
    };
    wait_port(addr)?;
    Ok(subject)
}

fn start_tinyproxy() -> anyhow::Result<Subject> {
    let bin = find_binary("tinyproxy").ok_or_else(|| anyhow::anyhow!("tinyproxy is not installed"))?;
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
    let d = dir.path().display();
    let conf = format!(
        "User nobody\nGroup nogroup\nPort {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 4096\n\
         LogFile \"{d}/tinyproxy.log\"\nLogLevel Critical\nPidFile \"{d}/tinyproxy.pid\"\n"
    );
    let path = dir.path().join("tinyproxy.conf");
    std::fs::write(&path, conf)?;
    let child = Command::new(bin)
        .arg("-d")
        .arg("-c")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let subject = Subject {
        name: "tinyproxy".into(),
        addr: Some(addr),
        child: Some(child),
        _dir: Some(dir),
    };
    wait_port(addr)?;
    Ok(subject)
}
