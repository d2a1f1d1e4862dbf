//! The boundary probes of `iterion sandbox doctor --strict --probe`, standard library only.
//!
//! This library is used by two programs:
//! - the `iterion-probe` binary (`src/main.rs`), compiled by its embedder's build script (through
//!   `iterion-embed`) with `+crt-static`: the program the doctor bind-mounts read-only into its throwaway
//!   sandbox (at /run/iterion/bin/iterion-probe);
//! - the hidden `iterion __sandbox-probe` command of the CLI.
//!
//! Why a separate static program: the spec's probe program is the iterion binary itself, but iterion is linked
//! dynamically against the host's C library and cannot start in images without one (the BusyBox test image,
//! distroless, Alpine). A static std-only program runs in any image of the engine's architecture, exactly like
//! the egress relay. Consequences of std only: SHA-256 is the one hand-written copy of `iterion-embed` (taken
//! by `#[path]`, tested here against the `sha2` crate), Base64 is written here, DNS is probed with a hand-built
//! UDP query to the resolvers of /etc/resolv.conf (a static glibc `getaddrinfo` needs NSS modules the image may
//! not have, which would make a resolver look absent), and the JSON is written by hand.
//!
//! Protocol: `<probe> [--json] [options]`; the program prints exactly one JSON object (one line) for the probe
//! and exits 0; a usage error prints `{"probe":…,"error":…}` and exits 2. It never prints the value of an
//! environment variable: names, booleans and SHA-256 digests only.
//!
//! ```
//! let (code, line) = iterion_probe::run_probe(&["start".to_string(), "--json".to_string()], &[]);
//! assert_eq!(code, 0);
//! assert!(line.contains("\"ok\":true"));
//! ```
#![deny(missing_docs)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

/// The probes, in the order the doctor runs them.
pub const PROBE_NAMES: &[&str] = &[
    "start",
    "direct-egress",
    "host-services",
    "dns",
    "metadata",
    "denied-host",
    "proxy-env",
    "secret-env",
    "hardening",
];

/// Default targets of the direct egress probe.
pub const DIRECT_TARGETS: &[&str] = &["1.1.1.1:443", "[2606:4700:4700::1111]:443"];

/// The metadata service spellings CONNECTed through the proxy.
pub const METADATA_TARGETS: &[&str] = &[
    "169.254.169.254:80",
    "[::ffff:169.254.169.254]:80",
    "0xa9fea9fe:80",
    "[64:ff9b::a9fe:a9fe]:80",
];

/// Engine sockets that must not be visible inside a sandbox.
pub const ENGINE_SOCKETS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/podman/podman.sock",
    "/run/containerd/containerd.sock",
];

const USAGE: &str = "usage: iterion-probe <start|direct-egress|host-services|dns|metadata|denied-host|proxy-env|secret-env|hardening> [--json] [options]";

// ------------------------------------------------------------------------------------------------------------
// Base64 (RFC 4648); SHA-256 comes from the shared file.

#[path = "../../iterion-embed/src/sha256.rs"]
mod sha256;
pub use sha256::{sha256, to_hex};

/// Standard Base64 with padding.
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        s.push(T[(n >> 18) as usize & 63] as char);
        s.push(T[(n >> 12) as usize & 63] as char);
        s.push(if chunk.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        s.push(if chunk.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    s
}

// ------------------------------------------------------------------------------------------------------------
// JSON output.

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_opt(s: Option<&str>) -> String {
    s.map_or_else(|| "null".to_string(), json_str)
}

/// An object from `(key, already encoded value)` pairs, keys in the given order.
fn obj(fields: &[(&str, String)]) -> String {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", json_str(k)))
        .collect();
    format!("{{{}}}", body.join(","))
}

fn arr(items: &[String]) -> String {
    format!("[{}]", items.join(","))
}

// ------------------------------------------------------------------------------------------------------------
// Arguments and environment.

/// The process environment as given (read once by `main`).
struct Env<'a>(&'a [(String, String)]);

impl<'a> Env<'a> {
    fn get(&self, k: &str) -> Option<&'a str> {
        self.0.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
struct Args {
    targets: Vec<String>,
    addrs: Vec<String>,
    port: Option<u16>,
    name: Option<String>,
    rules: Vec<(String, String)>,
    workspace: Option<String>,
    claude: Option<String>,
    timeout: Duration,
}

fn parse_args(rest: &[String]) -> Result<Args, String> {
    let mut a = Args {
        timeout: Duration::from_millis(1500),
        ..Args::default()
    };
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--json" => {}
            "--target" => a.targets.push(value()?),
            "--addr" => a.addrs.push(value()?),
            "--port" => {
                let v = value()?;
                a.port = Some(v.parse().map_err(|_| format!("--port '{v}' is not a port"))?);
            }
            "--name" => a.name = Some(value()?),
            "--rule" => {
                let v = value()?;
                let (k, p) = v
                    .split_once(':')
                    .filter(|(k, p)| matches!(*k, "exact" | "prefix" | "suffix") && !p.is_empty())
                    .ok_or_else(|| format!("--rule '{v}' is not exact:|prefix:|suffix:PATTERN"))?;
                a.rules.push((k.to_string(), p.to_ascii_uppercase()));
            }
            "--workspace" => a.workspace = Some(value()?),
            "--claude" => a.claude = Some(value()?),
            "--timeout-ms" => {
                let v = value()?;
                let ms: u64 = v
                    .parse()
                    .ok()
                    .filter(|m| *m > 0)
                    .ok_or_else(|| format!("--timeout-ms '{v}' is not a positive number"))?;
                a.timeout = Duration::from_millis(ms);
            }
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(a)
}

/// Runs one probe: `args[0]` is the probe name, the rest its options; `env` is the process environment.
/// Returns the exit code and the JSON line (without the newline).
pub fn run_probe(args: &[String], env: &[(String, String)]) -> (i32, String) {
    let Some(name) = args.first() else {
        return (2, obj(&[("probe", "null".into()), ("error", json_str(USAGE))]));
    };
    let usage_err = |m: String| (2, obj(&[("probe", json_str(name)), ("error", json_str(&m))]));
    let a = match parse_args(&args[1..]) {
        Ok(a) => a,
        Err(m) => return usage_err(m),
    };
    let getenv = Env(env);
    let body = match name.as_str() {
        "start" => vec![("ok", "true".to_string())],
        "direct-egress" => direct_egress(&a),
        "host-services" => match a.port {
            Some(p) => host_services(&a, p),
            None => return usage_err("host-services needs --port".into()),
        },
        "dns" => dns(&a),
        "metadata" => metadata(&a, &getenv),
        "denied-host" => match a.targets.first() {
            Some(t) => {
                let r = through_proxy(&getenv, t, a.timeout);
                vec![("target", json_str(t)), ("result", r)]
            }
            None => return usage_err("denied-host needs --target".into()),
        },
        "proxy-env" => proxy_env(&getenv),
        "secret-env" => secret_env(&a, env),
        "hardening" => hardening(&a, &getenv),
        other => return usage_err(format!("unknown probe '{other}'; {USAGE}")),
    };
    let mut fields = vec![("probe", json_str(name))];
    fields.extend(body);
    (0, obj(&fields))
}

// ------------------------------------------------------------------------------------------------------------
// Network probes.

fn connect_result(target: &str, timeout: Duration) -> String {
    let addr = match target.to_socket_addrs().ok().and_then(|mut a| a.next()) {
        Some(a) => a,
        None => {
            return obj(&[
                ("target", json_str(target)),
                ("connected", "false".into()),
                ("error", json_str("not an ip:port address")),
            ]);
        }
    };
    let started = Instant::now();
    let r = TcpStream::connect_timeout(&addr, timeout);
    let ms = started.elapsed().as_millis().to_string();
    match r {
        Ok(_) => obj(&[
            ("target", json_str(target)),
            ("connected", "true".into()),
            ("error", "null".into()),
            ("ms", ms),
        ]),
        Err(e) => obj(&[
            ("target", json_str(target)),
            ("connected", "false".into()),
            ("error", json_str(&e.to_string())),
            ("ms", ms),
        ]),
    }
}

/// Connects to every target concurrently (one thread each), results in the targets' order.
fn connect_all(targets: &[String], timeout: Duration) -> Vec<String> {
    let handles: Vec<_> = targets
        .iter()
        .map(|t| {
            let t = t.clone();
            std::thread::spawn(move || connect_result(&t, timeout))
        })
        .collect();
    handles
        .into_iter()
        .zip(targets)
        .map(|(h, t)| {
            h.join().unwrap_or_else(|_| {
                obj(&[
                    ("target", json_str(t)),
                    ("connected", "false".into()),
                    ("error", json_str("probe thread failed")),
                ])
            })
        })
        .collect()
}

/// Routes of `/proc/net/route` and `/proc/net/ipv6_route` outside the loopback interface, and their gateways.
fn routes() -> (Vec<String>, Vec<IpAddr>) {
    let mut ifaces = Vec::new();
    let mut gateways = Vec::new();
    if let Ok(t) = std::fs::read_to_string("/proc/net/route") {
        for line in t.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 3 || f[0] == "lo" {
                continue;
            }
            ifaces.push(format!("ipv4 {} via {}", f[0], f[2]));
            if let Ok(g) = u32::from_str_radix(f[2], 16)
                && g != 0
            {
                gateways.push(IpAddr::V4(Ipv4Addr::from(g.to_ne_bytes())));
            }
        }
    }
    if let Ok(t) = std::fs::read_to_string("/proc/net/ipv6_route") {
        for line in t.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[9] == "lo" {
                continue;
            }
            ifaces.push(format!("ipv6 {} via {}", f[9], f[4]));
            if let Ok(g) = u128::from_str_radix(f[4], 16)
                && g != 0
            {
                gateways.push(IpAddr::V6(Ipv6Addr::from(g)));
            }
        }
    }
    (ifaces, gateways)
}

fn direct_egress(a: &Args) -> Vec<(&'static str, String)> {
    let targets: Vec<String> = if a.targets.is_empty() {
        DIRECT_TARGETS.iter().map(|s| s.to_string()).collect()
    } else {
        a.targets.clone()
    };
    let (r, _) = routes();
    vec![
        ("routes", arr(&r.iter().map(|s| json_str(s)).collect::<Vec<_>>())),
        ("connects", arr(&connect_all(&targets, a.timeout))),
    ]
}

fn sock_text(ip: IpAddr, port: u16) -> String {
    SocketAddr::new(ip, port).to_string()
}

fn host_services(a: &Args, port: u16) -> Vec<(&'static str, String)> {
    let (_, gateways) = routes();
    let mut targets: Vec<String> = Vec::new();
    let mut push = |t: String| {
        if !targets.contains(&t) {
            targets.push(t);
        }
    };
    for g in gateways {
        push(sock_text(g, port));
    }
    for addr in &a.addrs {
        if let Ok(ip) = addr.parse::<IpAddr>() {
            push(sock_text(ip, port));
        }
    }
    vec![("connects", arr(&connect_all(&targets, a.timeout)))]
}

/// Name servers of `/etc/resolv.conf` (at most three, as the C library uses).
fn nameservers() -> Vec<IpAddr> {
    std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("nameserver"))
                .then(|| w.next())
                .flatten()
                .and_then(|ip| ip.split('%').next()?.parse().ok())
        })
        .take(3)
        .collect()
}

/// A DNS query (RFC 1035) for the A record of `name`.
pub fn dns_query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(name.len() + 18);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len().min(63) as u8);
        q.extend_from_slice(&label.as_bytes()[..label.len().min(63)]);
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

fn dns(a: &Args) -> Vec<(&'static str, String)> {
    let name = a.name.clone().unwrap_or_else(|| "example.com".into());
    let servers = nameservers();
    let mut results = Vec::new();
    for (i, ns) in servers.iter().enumerate() {
        let id = 0x5a00 | (i as u16);
        let bind: SocketAddr = match ns {
            IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let server = SocketAddr::new(*ns, 53);
        let outcome = (|| -> Result<(u16, u16), String> {
            let s = UdpSocket::bind(bind).map_err(|e| format!("bind: {e}"))?;
            s.set_read_timeout(Some(a.timeout)).map_err(|e| e.to_string())?;
            s.connect(server).map_err(|e| format!("connect: {e}"))?;
            s.send(&dns_query(id, &name)).map_err(|e| format!("send: {e}"))?;
            let mut buf = [0u8; 1500];
            let deadline = Instant::now() + a.timeout;
            loop {
                let n = s.recv(&mut buf).map_err(|e| format!("receive: {e}"))?;
                if n >= 12 && u16::from_be_bytes([buf[0], buf[1]]) == id {
                    let rcode = u16::from(buf[3] & 0x0f);
                    let answers = u16::from_be_bytes([buf[6], buf[7]]);
                    return Ok((rcode, answers));
                }
                if Instant::now() >= deadline {
                    return Err("no matching answer".into());
                }
            }
        })();
        results.push(match outcome {
            Ok((rcode, answers)) => obj(&[
                ("server", json_str(&ns.to_string())),
                ("answered", "true".into()),
                ("rcode", rcode.to_string()),
                ("answers", answers.to_string()),
                ("error", "null".into()),
            ]),
            Err(e) => obj(&[
                ("server", json_str(&ns.to_string())),
                ("answered", "false".into()),
                ("error", json_str(&e)),
            ]),
        });
    }
    vec![("name", json_str(&name)), ("servers", arr(&results))]
}

/// The proxy of the exec environment: `(host:port, Basic credentials)` from `HTTPS_PROXY` (else
/// `HTTP_PROXY`, then the lower-case forms). The credentials never leave the process.
fn proxy_of(getenv: &Env<'_>) -> Option<(String, Option<String>)> {
    let url = ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"]
        .iter()
        .find_map(|k| getenv.get(k).filter(|v| !v.is_empty()))?;
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let hostport = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    Some((hostport, userinfo.map(|u| base64(u.as_bytes()))))
}

/// The `"decision_id":"…"` member of a JSON body, if any.
fn decision_id_of(body: &str) -> Option<String> {
    let at = body.find("\"decision_id\"")?;
    let rest = body[at + "\"decision_id\"".len()..]
        .trim_start()
        .strip_prefix(':')?;
    let rest = rest.trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

/// CONNECT `target` through the proxy of the environment; the answer's status and decision id.
fn through_proxy(getenv: &Env<'_>, target: &str, timeout: Duration) -> String {
    let fail = |e: &str| {
        obj(&[
            ("status", "null".into()),
            ("decision_id", "null".into()),
            ("error", json_str(e)),
        ])
    };
    let Some((proxy, auth)) = proxy_of(getenv) else {
        return fail("no proxy variable in the environment");
    };
    let Some(addr) = proxy.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return fail("the proxy address is not ip:port");
    };
    let mut s = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) => return fail(&format!("connect to the proxy: {e}")),
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(a) = auth {
        req.push_str(&format!("Proxy-Authorization: Basic {a}\r\n"));
    }
    req.push_str("\r\n");
    if let Err(e) = s.write_all(req.as_bytes()) {
        return fail(&format!("write to the proxy: {e}"));
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > 65536 {
            return fail("the proxy answer head is too large");
        }
        match s.read(&mut chunk) {
            Ok(0) => return fail("the proxy closed the connection without an answer"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return fail(&format!("read from the proxy: {e}")),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status: Option<u16> = head.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    let Some(status) = status else {
        return fail("the proxy answer has no status code");
    };
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    if !(200..300).contains(&status) {
        while body.len() < length.min(65536) {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
    }
    let id = decision_id_of(&String::from_utf8_lossy(&body));
    obj(&[
        ("status", status.to_string()),
        ("decision_id", json_opt(id.as_deref())),
        ("error", "null".into()),
    ])
}

fn metadata(a: &Args, getenv: &Env<'_>) -> Vec<(&'static str, String)> {
    let direct = connect_result("169.254.169.254:80", a.timeout);
    let connects: Vec<String> = METADATA_TARGETS
        .iter()
        .map(|t| {
            let r = through_proxy(getenv, t, a.timeout);
            obj(&[("target", json_str(t)), ("result", r)])
        })
        .collect();
    vec![("direct", direct), ("connects", arr(&connects))]
}

// ------------------------------------------------------------------------------------------------------------
// Environment probes.

/// The proxy URL variables (upper and lower case).
pub const PROXY_URL_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

fn proxy_env(getenv: &Env<'_>) -> Vec<(&'static str, String)> {
    let set: Vec<String> = PROXY_URL_VARS
        .iter()
        .map(|k| format!("{}:{}", json_str(k), getenv.get(k).is_some_and(|v| !v.is_empty())))
        .collect();
    let values: Vec<&str> = PROXY_URL_VARS.iter().filter_map(|k| getenv.get(k)).collect();
    let equal = !values.is_empty() && values.iter().all(|v| *v == values[0]);
    let no_proxy = |k: &str| {
        obj(&[
            ("set", getenv.get(k).is_some_and(|v| !v.is_empty()).to_string()),
            (
                "has_star",
                getenv
                    .get(k)
                    .is_some_and(|v| v.split(',').any(|p| p.trim() == "*"))
                    .to_string(),
            ),
        ])
    };
    vec![
        ("set", format!("{{{}}}", set.join(","))),
        ("equal", equal.to_string()),
        ("NO_PROXY", no_proxy("NO_PROXY")),
        ("no_proxy", no_proxy("no_proxy")),
        (
            "node_use_env_proxy",
            (getenv.get("NODE_USE_ENV_PROXY") == Some("1")).to_string(),
        ),
    ]
}

fn rule_matches(kind: &str, pattern: &str, upper: &str) -> bool {
    match kind {
        "exact" => upper == pattern,
        "prefix" => upper.starts_with(pattern),
        _ => upper.ends_with(pattern),
    }
}

fn secret_env(a: &Args, env: &[(String, String)]) -> Vec<(&'static str, String)> {
    let mut hits: Vec<(&str, String)> = env
        .iter()
        .filter(|(n, _)| {
            let upper = n.to_ascii_uppercase();
            a.rules.iter().any(|(k, p)| rule_matches(k, p, &upper))
        })
        .map(|(n, v)| (n.as_str(), to_hex(&sha256(v.as_bytes()))))
        .collect();
    hits.sort();
    let items: Vec<String> = hits
        .iter()
        .map(|(n, d)| obj(&[("name", json_str(n)), ("sha256", json_str(d))]))
        .collect();
    vec![("visible", arr(&items))]
}

// ------------------------------------------------------------------------------------------------------------
// Hardening.

fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(str::trim))
}

/// Creates and removes a file in `dir`: whether the directory is writable.
fn dir_writable(dir: &str) -> String {
    let p = std::path::Path::new(dir).join(format!(".iterion-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&p) {
        Ok(_) => {
            let _ = std::fs::remove_file(&p);
            obj(&[
                ("path", json_str(dir)),
                ("writable", "true".into()),
                ("error", "null".into()),
            ])
        }
        Err(e) => obj(&[
            ("path", json_str(dir)),
            ("writable", "false".into()),
            ("error", json_str(&e.to_string())),
        ]),
    }
}

/// Opens an existing file for appending without writing anything: whether it is writable.
fn file_writable(path: &str) -> String {
    match std::fs::OpenOptions::new().append(true).open(path) {
        Ok(_) => obj(&[
            ("path", json_str(path)),
            ("writable", "true".into()),
            ("error", "null".into()),
        ]),
        Err(e) => obj(&[
            ("path", json_str(path)),
            ("writable", "false".into()),
            ("exists", std::path::Path::new(path).exists().to_string()),
            ("error", json_str(&e.to_string())),
        ]),
    }
}

fn hardening(a: &Args, getenv: &Env<'_>) -> Vec<(&'static str, String)> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let second = |key: &str| {
        status_field(&status, key)
            .and_then(|v| v.split_whitespace().nth(1))
            .map_or("null".to_string(), |v| v.to_string())
    };
    let pid1 = std::fs::read("/proc/1/cmdline").unwrap_or_default();
    let pid1_argv0 = String::from_utf8_lossy(pid1.split(|b| *b == 0).next().unwrap_or(&[])).into_owned();
    let sockets: Vec<String> = ENGINE_SOCKETS
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .map(|p| json_str(p))
        .collect();
    let mut writes = Vec::new();
    let home = getenv.get("HOME").filter(|h| !h.is_empty());
    writes.push(("home", home.map_or_else(|| "null".to_string(), dir_writable)));
    let ws = a.workspace.as_deref();
    writes.push(("workspace", ws.map_or_else(|| "null".to_string(), dir_writable)));
    writes.push((
        "git_hooks",
        ws.map_or_else(
            || "null".to_string(),
            |w| dir_writable(&format!("{w}/.git/hooks")),
        ),
    ));
    writes.push((
        "claude_settings",
        a.claude.as_deref().map_or_else(
            || "null".to_string(),
            |c| file_writable(&format!("{c}/settings.json")),
        ),
    ));
    let mut out = vec![
        ("no_new_privs", json_opt(status_field(&status, "NoNewPrivs"))),
        ("cap_eff", json_opt(status_field(&status, "CapEff"))),
        ("uid", second("Uid")),
        ("gid", second("Gid")),
        ("pid1", json_str(&pid1_argv0)),
        ("engine_sockets", arr(&sockets)),
    ];
    out.extend(writes);
    out
}

#[cfg(test)]
mod tests;
