//! Loopback upstreams for egress tests: an HTTP server that records every request it receives, and a TLS front
//! with a CA of its own that terminates HTTPS on loopback and forwards the plain bytes to another server (the
//! recorder, or the fake model provider).
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One request as the recorder received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request line and headers, CR LF separated.
    pub head: String,
    /// The body (by `Content-Length`).
    pub body: Vec<u8>,
}

impl Received {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.split("\r\n").find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// An HTTP/1.1 server on 127.0.0.1 answering every request `200 ok` and keeping what it received.
#[derive(Debug)]
pub struct Recorder {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    /// Starts the server on an ephemeral loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let l = TcpListener::bind("127.0.0.1:0").await?;
        let addr = l.local_addr()?;
        let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
        let s = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 8192];
                    loop {
                        let Ok(n) = c.read(&mut chunk).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        let r = Received {
                            head,
                            body: Vec::new(),
                        };
                        let len: usize = r
                            .header("content-length")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        if buf.len() < end + 4 + len {
                            continue;
                        }
                        let r = Received {
                            body: buf[end + 4..end + 4 + len].to_vec(),
                            ..r
                        };
                        s.lock().unwrap_or_else(|p| p.into_inner()).push(r);
                        let _ = c
                            .write_all(
                                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
                            )
                            .await;
                        return;
                    }
                });
            }
        });
        Ok(Recorder { addr, seen, task })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Received> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A test CA and a TLS listener on 127.0.0.1 with a leaf for `localhost` and `127.0.0.1`, forwarding each
/// decrypted connection to `backend`.
#[derive(Debug)]
pub struct TlsFront {
    addr: SocketAddr,
    ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsFront {
    /// Starts the front for `backend`.
    ///
    /// # Panics
    ///
    /// When the certificates cannot be made (a test setup error).
    pub async fn start(backend: SocketAddr) -> std::io::Result<Self> {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let ca_cert = params.self_signed(&ca_key).expect("ca");
        let ca_pem = ca_cert.pem();
        let issuer = rcgen::Issuer::new(params, ca_key);
        let key = rcgen::KeyPair::generate().expect("key");
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("leaf");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let l = TcpListener::bind("127.0.0.1:0").await?;
        let addr = l.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((c, _)) = l.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(c).await else {
                        return;
                    };
                    let Ok(mut up) = tokio::net::TcpStream::connect(backend).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
        Ok(TlsFront { addr, ca_pem, task })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The PEM certificate of the front's CA.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
}
