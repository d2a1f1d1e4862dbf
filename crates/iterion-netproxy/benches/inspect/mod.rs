//! The `inspect` case of the proxy bench: the latency of one HTTPS request through an inspected tunnel with a
//! secret substitution against the same request through an opaque CONNECT tunnel, both through one proxy (the
//! opaque host is on the bypass list) to one loopback HTTPS upstream whose certificate comes from a test CA.
//!
//! Two variants: a new connection per request (TCP to the proxy, CONNECT, TLS handshake, one request, close)
//! and keep-alive (one established TLS session per case, one request per sample). Samples of the two cases are
//! interleaved (the order alternates each pair) so load from other work hits both alike; the table gives the
//! median and p99 of each and their ratios. The upstream checks every request carries the real value, and the
//! substitutions reported by the proxy are counted.

use async_trait::async_trait;
use iterion_netpolicy::{Mode, Policy};
use iterion_netproxy::{
    Listen, Proxy, ProxyConfig, ProxyEvent, ResolveError, Resolver, RunningProxy, SecretBinding,
    TlsInspection,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::client::TlsStream;

/// Samples per case: new connection per request, keep-alive.
const NEW_CONNECTION_SAMPLES: usize = 400;
const KEEP_ALIVE_SAMPLES: usize = 4000;
const WARM_UP: usize = 20;

const INSPECTED: &str = "inspected.bench";
const OPAQUE: &str = "opaque.bench";
const VALUE: &str = "sk-bench-0123456789abcdefghijklmnopqrstuvwxyz";

/// Every name resolves to 127.0.0.1.
#[derive(Debug)]
struct Loopback;

#[async_trait]
impl Resolver for Loopback {
    async fn lookup(&self, _host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        Ok(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)])
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The upstream: HTTPS on loopback for both names; every request must carry `Authorization: Bearer VALUE`
/// (counted in `bad` otherwise) and is answered `200` with a 2-byte body, keep-alive.
async fn start_upstream(bad: Arc<AtomicU64>) -> anyhow::Result<(SocketAddr, String)> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca_pem = ca_params.self_signed(&ca_key)?.pem();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec![INSPECTED.to_owned(), OPAQUE.to_owned()])?
        .signed_by(&key, &issuer)?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let bad = bad.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    serve(tls, bad).await;
                }
            });
        }
    });
    Ok((addr, ca_pem))
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, bad: Arc<AtomicU64>) {
    let expected = format!("Authorization: Bearer {VALUE}\r\n");
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        let head: Vec<u8> = buf.drain(..end).collect();
        if !head.windows(expected.len()).any(|w| w == expected.as_bytes()) {
            bad.fetch_add(1, Ordering::Relaxed);
        }
        if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .is_err()
        {
            return;
        }
    }
}

fn roots(pem: &str) -> anyhow::Result<rustls::RootCertStore> {
    let mut r = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        r.add(c?)?;
    }
    Ok(r)
}

fn client_config(roots: rustls::RootCertStore) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    Ok(Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

/// One case: the CONNECT host, the client's trust, the credential it sends.
struct Case {
    host: &'static str,
    config: Arc<rustls::ClientConfig>,
    authorization: String,
}

impl Case {
    /// TCP to the proxy, CONNECT, TLS.
    async fn open(&self, proxy: SocketAddr, port: u16) -> anyhow::Result<TlsStream<TcpStream>> {
        let mut tcp = TcpStream::connect(proxy).await?;
        tcp.set_nodelay(true)?;
        let target = format!("{}:{port}", self.host);
        tcp.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .await?;
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if tcp.read(&mut b).await? == 0 {
                anyhow::bail!("proxy closed during CONNECT");
            }
            head.push(b[0]);
        }
        anyhow::ensure!(head.starts_with(b"HTTP/1.1 200"), "CONNECT refused");
        let name = ServerName::try_from(self.host)?;
        Ok(tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await?)
    }

    /// One request and its `200` answer on an open session.
    async fn request(
        &self,
        s: &mut TlsStream<TcpStream>,
        port: u16,
        buf: &mut Vec<u8>,
    ) -> anyhow::Result<()> {
        let req = format!(
            "GET /v1/models HTTP/1.1\r\nHost: {}:{port}\r\nAuthorization: Bearer {}\r\n\r\n",
            self.host, self.authorization
        );
        s.write_all(req.as_bytes()).await?;
        s.flush().await?;
        buf.clear();
        let mut tmp = [0u8; 1024];
        while !buf.ends_with(b"\r\n\r\nok") {
            let n = s.read(&mut tmp).await?;
            anyhow::ensure!(n > 0, "closed before the answer");
            buf.extend_from_slice(&tmp[..n]);
        }
        anyhow::ensure!(buf.starts_with(b"HTTP/1.1 200 "), "not a 200");
        Ok(())
    }
}

/// Median and p99 of microsecond samples.
fn stats(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Run the case and print its table.
pub(crate) async fn run() -> anyhow::Result<()> {
    let bad = Arc::new(AtomicU64::new(0));
    let (upstream, ca_pem) = start_upstream(bad.clone()).await?;
    let port = upstream.port();
    let binding = SecretBinding::new("BENCH_KEY", VALUE, &[INSPECTED]);
    let placeholder = binding.placeholder().to_owned();
    let tls = TlsInspection::new()
        .native_roots(false)
        .upstream_root_pem(ca_pem.clone())
        .binding(binding)
        .bypass(OPAQUE);
    let substituted = Arc::new(AtomicU64::new(0));
    let counted = substituted.clone();
    let policy = Policy::compile(Mode::Allowlist, &[], &[INSPECTED, OPAQUE, "127.0.0.1"])
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let config = ProxyConfig::builder()
        .listen(Listen::Tcp("127.0.0.1:0".parse()?))
        .no_auth(Arc::new(policy))
        .resolver(Arc::new(Loopback))
        .tls_inspection(tls)
        .on_event(move |e| {
            if matches!(e, ProxyEvent::SecretSubstituted { .. }) {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        })
        .build()?;
    let proxy: RunningProxy = Proxy::start(config).await?;
    let proxy_addr = proxy
        .local_addr()
        .ok_or_else(|| anyhow::anyhow!("no tcp address"))?;
    let run_ca = proxy
        .trust_bundle()
        .ok_or_else(|| anyhow::anyhow!("inspection is not active"))?
        .ca_pem;
    let inspected = Case {
        host: INSPECTED,
        config: client_config(roots(&run_ca)?)?,
        authorization: placeholder,
    };
    let opaque = Case {
        host: OPAQUE,
        config: client_config(roots(&ca_pem)?)?,
        authorization: VALUE.to_owned(),
    };
    let cases = [&inspected, &opaque];
    let mut buf = Vec::new();

    // New connection per request.
    let mut fresh: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for i in 0..WARM_UP + NEW_CONNECTION_SAMPLES {
        for k in [i % 2, 1 - i % 2] {
            let t = Instant::now();
            let mut s = cases[k].open(proxy_addr, port).await?;
            cases[k].request(&mut s, port, &mut buf).await?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            let _ = s.shutdown().await;
            if i >= WARM_UP {
                fresh[k].push(us);
            }
        }
    }
    // Keep-alive: one session per case, opened beforehand.
    let mut sessions = [
        inspected.open(proxy_addr, port).await?,
        opaque.open(proxy_addr, port).await?,
    ];
    let mut kept: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for i in 0..WARM_UP + KEEP_ALIVE_SAMPLES {
        for k in [i % 2, 1 - i % 2] {
            let t = Instant::now();
            cases[k].request(&mut sessions[k], port, &mut buf).await?;
            if i >= WARM_UP {
                kept[k].push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    drop(sessions);
    let requests = 2 * (WARM_UP as u64) + NEW_CONNECTION_SAMPLES as u64 + KEEP_ALIVE_SAMPLES as u64;
    let wrong = bad.load(Ordering::Relaxed);
    anyhow::ensure!(
        wrong == 0,
        "{wrong} requests reached the upstream without the real value"
    );
    // Events are delivered on their own thread: give the last ones a moment.
    let deadline = Instant::now() + Duration::from_secs(2);
    while substituted.load(Ordering::Relaxed) < requests && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let subs = substituted.load(Ordering::Relaxed);
    anyhow::ensure!(
        subs == requests,
        "{subs} substitutions reported for {requests} inspected requests"
    );
    proxy.shutdown(Duration::from_secs(1)).await;

    println!();
    println!(
        "HTTPS request latency, inspected tunnel with a substitution vs opaque CONNECT tunnel (µs; {NEW_CONNECTION_SAMPLES} \
         new-connection and {KEEP_ALIVE_SAMPLES} keep-alive samples per case, interleaved; {subs} substitutions \
         checked upstream)"
    );
    println!();
    println!(
        "| variant | inspected median | inspected p99 | opaque median | opaque p99 | ratio median | ratio p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, [a, b]) in [
        ("new connection per request", &mut fresh),
        ("keep-alive", &mut kept),
    ] {
        let (am, ap) = stats(a);
        let (bm, bp) = stats(b);
        println!(
            "| {name} | {am:.0} | {ap:.0} | {bm:.0} | {bp:.0} | {:.2}× | {:.2}× |",
            am / bm,
            ap / bp
        );
    }
    Ok(())
}
