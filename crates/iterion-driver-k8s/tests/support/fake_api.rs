//! A scripted fake Kubernetes API server on `127.0.0.1:0` (07 §14.1), plain HTTP/1.1 with keep-alive, enough
//! for `GET /version` and `SelfSubjectAccessReview` creation. Unknown requests get `500` and are recorded;
//! [`FakeApi::finish`] returns them as an error.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use iterion_test_support::k8s_fake::wire::{self, status_body};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

const SSAR_PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

/// What the fake answers.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// The `/version` body; `None` answers 404.
    pub version: Option<Value>,
    /// Reviews answered `allowed: false`, as `verb resource[/subresource]` (e.g. `create pods/exec`).
    pub denied: BTreeSet<String>,
    /// Reviews answered `403 Forbidden` (a `Status`), same keys as `denied`.
    pub forbidden: BTreeSet<String>,
    /// Accept connections and never answer.
    pub silent: bool,
}

impl Script {
    /// A server of `major.minor` (as served, e.g. `"30+"`) that allows every review.
    pub fn version(major: &str, minor: &str) -> Script {
        Script {
            version: Some(json!({
                "major": major,
                "minor": minor,
                "gitVersion": format!("v{major}.{}.0", minor.trim_end_matches('+')),
                "platform": "linux/amd64",
            })),
            ..Script::default()
        }
    }

    /// Denies `key` (`verb resource[/subresource]`).
    pub fn deny(mut self, key: &str) -> Script {
        self.denied.insert(key.to_string());
        self
    }

    /// Answers `403` for `key`.
    pub fn forbid(mut self, key: &str) -> Script {
        self.forbidden.insert(key.to_string());
        self
    }
}

/// One request as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// For reviews: `verb resource[/subresource] group namespace`.
    pub review: Option<String>,
}

#[derive(Default)]
struct Log {
    requests: Vec<Recorded>,
    unexpected: Vec<String>,
}

/// The running fake.
pub struct FakeApi {
    scheme: &'static str,
    addr: SocketAddr,
    log: Arc<Mutex<Log>>,
    task: JoinHandle<()>,
}

impl FakeApi {
    /// Starts the fake on a fresh loopback port, plain HTTP.
    pub async fn start(script: Script) -> FakeApi {
        FakeApi::spawn(script, None).await
    }

    /// Starts the fake over TLS with a fresh self-signed certificate for `127.0.0.1`; returns the fake and
    /// the certificate in PEM (the CA a client must trust).
    pub async fn start_tls(script: Script) -> (FakeApi, String) {
        let key = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("rcgen");
        let pem = key.cert.pem();
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()));
        let config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![key.cert.der().clone()], der)
            .expect("server config");
        let fake = FakeApi::spawn(script, Some(TlsAcceptor::from(Arc::new(config)))).await;
        (fake, pem)
    }

    async fn spawn(script: Script, tls: Option<TlsAcceptor>) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let log = Arc::new(Mutex::new(Log::default()));
        let script = Arc::new(script);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let task = {
            let log = log.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    let (log, script, tls) = (log.clone(), script.clone(), tls.clone());
                    tokio::spawn(async move {
                        match tls {
                            None => serve(stream, &script, &log).await,
                            Some(tls) => match tls.accept(stream).await {
                                Ok(stream) => serve(stream, &script, &log).await,
                                Err(e) => log.lock().expect("log").unexpected.push(format!("TLS: {e}")),
                            },
                        }
                    });
                }
            })
        };
        FakeApi {
            scheme,
            addr,
            log,
            task,
        }
    }

    /// The port the fake listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http[s]://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Stops the fake; every request received, or an error listing the unexpected ones.
    pub fn finish(self) -> Result<Vec<Recorded>, String> {
        self.task.abort();
        let log = self.log.lock().expect("log");
        if log.unexpected.is_empty() {
            Ok(log.requests.clone())
        } else {
            Err(format!("unexpected requests: {:?}", log.unexpected))
        }
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(stream: S, script: &Script, log: &Mutex<Log>) {
    let mut stream = BufReader::new(stream);
    loop {
        let Some((method, target, headers, body)) = read_request(&mut stream).await else {
            return;
        };
        if script.silent {
            // Hold the connection open without answering until the client gives up.
            let mut sink = Vec::new();
            let _ = stream.read_to_end(&mut sink).await;
            return;
        }
        let path = target.split('?').next().unwrap_or_default().to_string();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let mut recorded = Recorded {
            method: method.clone(),
            path: path.clone(),
            authorization: header("authorization"),
            review: None,
        };
        let (status, reply) = match (method.as_str(), path.as_str()) {
            ("GET", "/version") => match &script.version {
                Some(v) => (200, v.clone()),
                None => (
                    404,
                    status_body(
                        404,
                        "NotFound",
                        "the server could not find the requested resource",
                    ),
                ),
            },
            ("POST", SSAR_PATH) => match review(&body) {
                Some((key, record, mut object)) => {
                    recorded.review = Some(record);
                    if script.forbidden.contains(&key) {
                        (
                            403,
                            status_body(403, "Forbidden", "selfsubjectaccessreviews is forbidden"),
                        )
                    } else {
                        let allowed = !script.denied.contains(&key);
                        object["status"] = json!({ "allowed": allowed });
                        (201, object)
                    }
                }
                None => {
                    log.lock()
                        .expect("log")
                        .unexpected
                        .push(format!("malformed review body: {body}"));
                    (500, status_body(500, "InternalError", "malformed review"))
                }
            },
            _ => {
                log.lock()
                    .expect("log")
                    .unexpected
                    .push(format!("{method} {target}"));
                (
                    500,
                    status_body(500, "InternalError", &format!("unexpected {method} {target}")),
                )
            }
        };
        log.lock().expect("log").requests.push(recorded);
        if wire::write_json(stream.get_mut(), status, &reply).await.is_err() {
            return;
        }
    }
}

type Request = (String, String, Vec<(String, String)>, String);

/// Reads one request (the wire plumbing shared with the engine-backed fake); `None` at end of stream.
async fn read_request<S: AsyncRead + Unpin>(stream: &mut BufReader<S>) -> Option<Request> {
    let w = wire::read_request(stream).await?;
    let target = match w.raw_query.as_str() {
        "" => w.path.clone(),
        q => format!("{}?{q}", w.path),
    };
    Some((w.method, target, w.headers, String::from_utf8(w.body).ok()?))
}

/// The review key (`verb resource[/sub]`), its record (`… group namespace`) and the object to echo.
fn review(body: &str) -> Option<(String, String, Value)> {
    let object: Value = serde_json::from_str(body).ok()?;
    if object["kind"] != "SelfSubjectAccessReview" || object["apiVersion"] != "authorization.k8s.io/v1" {
        return None;
    }
    let attrs = &object["spec"]["resourceAttributes"];
    let field = |name: &str| attrs[name].as_str().unwrap_or_default().to_string();
    let mut resource = field("resource");
    if !field("subresource").is_empty() {
        resource = format!("{resource}/{}", field("subresource"));
    }
    let key = format!("{} {resource}", field("verb"));
    let record = format!("{key} {} {}", field("group"), field("namespace"));
    Some((key, record, object))
}
