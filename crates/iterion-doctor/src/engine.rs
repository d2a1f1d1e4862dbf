//! The few engine requests the doctor makes itself (06 §4.5, §4.8): `_ping`, `version`, `images/{ref}/json`
//! and `distribution/{ref}/json`, each bounded by `ITERION_SANDBOX_DOCTOR_TIMEOUT`.
//!
//! They are plain HTTP/1.1 requests (`Connection: close`) over the engine's Unix socket, so every failure keeps its distinct kind
//! (missing socket, refused, permission denied, no answer in time), and tests point the doctor at a loopback
//! fake engine. The driver crate owns everything that creates resources; the doctor never does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the engine said about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineAnswer {
    /// `docker` or `podman`.
    pub kind: String,
    /// Engine version.
    pub version: String,
    /// Server API version.
    pub api_version: String,
    /// Rootless engine.
    pub rootless: bool,
    /// Docker Desktop.
    pub desktop: bool,
    /// `unix:///…`.
    pub endpoint: String,
    /// Engine architecture (`x86_64`, `aarch64`).
    pub arch: String,
}

/// Why the engine did not answer (one hint each, 06 §4.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineFailure {
    /// No socket, or the connection was refused.
    NotRunning(String),
    /// Permission denied on the socket.
    Permission(String),
    /// No answer within the bound.
    Timeout {
        /// The endpoint.
        endpoint: String,
        /// The bound.
        after: Duration,
    },
    /// API older than 1.41.
    TooOld(String),
    /// Anything else (a malformed answer).
    Other(String),
}

/// What a registry said about a reference (through the engine's distribution endpoint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryAnswer {
    /// The manifest exists.
    Found,
    /// `manifest unknown`, `name unknown`, 404.
    NotFound(String),
    /// Authentication required or access denied.
    Auth(String),
    /// Unreachable or timed out.
    Unreachable(String),
}

/// The engine-facing queries of the battery (a fake in tests).
#[async_trait]
pub trait EngineProbe: Send + Sync + std::fmt::Debug {
    /// `_ping` then `version`.
    async fn ping(&self) -> Result<EngineAnswer, EngineFailure>;
    /// Whether the image is present locally (`Err`: the engine did not answer).
    async fn image_present(&self, reference: &str) -> Result<bool, String>;
    /// A manifest request for the reference.
    async fn registry(&self, reference: &str) -> RegistryAnswer;
    /// The gateway of the engine's default bridge network (`probe_host_services`), when known.
    async fn bridge_gateway(&self) -> Option<String> {
        None
    }
    /// `/info` `Runtimes` (sorted) and `DefaultRuntime`, when the engine answers.
    async fn runtimes(&self) -> Option<EngineRuntimes> {
        None
    }
}

/// The OCI runtimes an engine offers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineRuntimes {
    /// Every runtime the engine lists, sorted.
    pub names: Vec<String>,
    /// The one it uses when none is named.
    pub default: Option<String>,
}

/// The real engine at a Unix socket.
#[derive(Debug, Clone)]
pub struct UnixEngine {
    /// Socket path.
    pub socket: PathBuf,
    /// Bound of each request.
    pub timeout: Duration,
}

/// One HTTP answer: status and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Percent-encodes an image reference for a path segment (`/` and `:` are kept, as the engine expects).
fn encode(reference: &str) -> String {
    reference
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' | b':' | b'@' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl UnixEngine {
    fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    async fn get(&self, path: &str) -> Result<Answer, EngineFailure> {
        let endpoint = self.endpoint();
        let work = request(&self.socket, path);
        match tokio::time::timeout(self.timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(EngineFailure::Timeout {
                endpoint,
                after: self.timeout,
            }),
        }
    }
}

async fn request(socket: &Path, path: &str) -> Result<Answer, EngineFailure> {
    let p = socket.display();
    let mut s = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => EngineFailure::NotRunning(format!("no engine socket at {p}")),
            std::io::ErrorKind::ConnectionRefused => {
                EngineFailure::NotRunning(format!("engine at {p} refused the connection"))
            }
            std::io::ErrorKind::PermissionDenied => {
                EngineFailure::Permission(format!("permission denied on {p}"))
            }
            _ => EngineFailure::Other(format!("engine at {p} could not be reached: {e}")),
        })?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| EngineFailure::Other(format!("engine at {p}: {e}")))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)
        .await
        .map_err(|e| EngineFailure::Other(format!("engine at {p}: {e}")))?;
    parse_answer(&buf).ok_or_else(|| EngineFailure::Other(format!("engine at {p} sent a malformed answer")))
}

fn parse_answer(buf: &[u8]) -> Option<Answer> {
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buf[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = buf[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body)?;
    }
    Some(Answer {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

fn message_of(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string())
}

/// `major.minor` ordering.
fn api_at_least(v: &str, min: (u32, u32)) -> bool {
    let mut it = v.trim().split('.').map(|p| p.parse::<u32>().ok());
    match (it.next().flatten(), it.next().flatten()) {
        (Some(a), Some(b)) => (a, b) >= min,
        _ => false,
    }
}

/// Classifies a distribution answer (status and message).
pub fn classify_registry(status: u16, message: &str) -> RegistryAnswer {
    let m = message.to_ascii_lowercase();
    if (200..300).contains(&status) {
        RegistryAnswer::Found
    } else if m.contains("manifest unknown")
        || m.contains("name unknown")
        || (status == 404 && (m.contains("manifest") || m.contains("repository")))
    {
        RegistryAnswer::NotFound(message.to_string())
    } else if status == 404 {
        // The engine itself has no distribution endpoint (Podman): nothing was asked of the registry.
        RegistryAnswer::Unreachable(format!("the engine cannot query registries ({message})"))
    } else if status == 401
        || status == 403
        || m.contains("unauthorized")
        || m.contains("denied")
        || m.contains("authentication required")
    {
        RegistryAnswer::Auth(message.to_string())
    } else {
        RegistryAnswer::Unreachable(message.to_string())
    }
}

#[async_trait]
impl EngineProbe for UnixEngine {
    async fn ping(&self) -> Result<EngineAnswer, EngineFailure> {
        let ping = self.get("/_ping").await?;
        if ping.status != 200 {
            return Err(EngineFailure::Other(format!(
                "engine at {} answered {} to _ping",
                self.endpoint(),
                ping.status
            )));
        }
        let podman_header = ping.headers.iter().any(|(k, _)| k == "libpod-api-version");
        let v = self.get("/version").await?;
        let json: serde_json::Value = serde_json::from_slice(&v.body).map_err(|e| {
            EngineFailure::Other(format!("engine at {}: bad version answer: {e}", self.endpoint()))
        })?;
        let s = |k: &str| {
            json.get(k)
                .and_then(|x| x.as_str())
                .unwrap_or_default()
                .to_string()
        };
        let api = s("ApiVersion");
        if !api_at_least(&api, (1, 41)) {
            return Err(EngineFailure::TooOld(format!(
                "engine API {api} at {} is older than 1.41",
                self.endpoint()
            )));
        }
        let components: Vec<String> = json
            .get("Components")
            .and_then(|c| c.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.get("Name").and_then(|n| n.as_str()).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let podman = podman_header
            || components
                .iter()
                .any(|c| c.to_ascii_lowercase().contains("podman"));
        let platform = json
            .get("Platform")
            .and_then(|p| p.get("Name"))
            .and_then(|n| n.as_str())
            .unwrap_or_default();
        let kernel = s("KernelVersion");
        Ok(EngineAnswer {
            kind: if podman { "podman" } else { "docker" }.to_string(),
            version: s("Version"),
            api_version: api,
            rootless: components
                .iter()
                .any(|c| c.to_ascii_lowercase().contains("rootless")),
            desktop: platform.contains("Docker Desktop") || kernel.contains("linuxkit"),
            endpoint: self.endpoint(),
            arch: match s("Arch").as_str() {
                "amd64" => "x86_64".to_string(),
                "arm64" => "aarch64".to_string(),
                other => other.to_string(),
            },
        })
    }

    async fn runtimes(&self) -> Option<EngineRuntimes> {
        let a = self.get("/info").await.ok().filter(|a| a.status == 200)?;
        let json: serde_json::Value = serde_json::from_slice(&a.body).ok()?;
        let mut names: Vec<String> = json
            .get("Runtimes")
            .and_then(|r| r.as_object())
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        names.sort();
        let default = json
            .get("DefaultRuntime")
            .and_then(|d| d.as_str())
            .filter(|d| !d.is_empty())
            .map(str::to_owned);
        Some(EngineRuntimes { names, default })
    }

    async fn image_present(&self, reference: &str) -> Result<bool, String> {
        match self.get(&format!("/images/{}/json", encode(reference))).await {
            Ok(a) if a.status == 200 => Ok(true),
            Ok(a) if a.status == 404 => Ok(false),
            Ok(a) => Err(format!("engine answered {}: {}", a.status, message_of(&a.body))),
            Err(e) => Err(describe(&e)),
        }
    }

    async fn registry(&self, reference: &str) -> RegistryAnswer {
        match self
            .get(&format!("/distribution/{}/json", encode(reference)))
            .await
        {
            Ok(a) => classify_registry(a.status, &message_of(&a.body)),
            Err(e) => RegistryAnswer::Unreachable(describe(&e)),
        }
    }

    async fn bridge_gateway(&self) -> Option<String> {
        let a = self.get("/networks/bridge").await.ok()?;
        if a.status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&a.body).ok()?;
        v["IPAM"]["Config"]
            .as_array()?
            .iter()
            .find_map(|c| c["Gateway"].as_str().map(str::to_string))
    }
}

/// One sentence for a failure.
pub fn describe(e: &EngineFailure) -> String {
    match e {
        EngineFailure::NotRunning(m)
        | EngineFailure::Permission(m)
        | EngineFailure::TooOld(m)
        | EngineFailure::Other(m) => m.clone(),
        EngineFailure::Timeout { endpoint, after } => format!(
            "the engine at {endpoint} did not answer within {}",
            iterion_driver::fmt_duration(*after)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_plain_and_chunked() {
        let a = parse_answer(b"HTTP/1.0 200 OK\r\nApi-Version: 1.47\r\n\r\nOK").unwrap();
        assert_eq!((a.status, a.body.as_slice()), (200, b"OK".as_slice()));
        let c = parse_answer(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((c.status, c.body.as_slice()), (404, b"abcde".as_slice()));
        assert!(parse_answer(b"garbage").is_none());
    }

    #[test]
    fn registry_answers_are_classified() {
        assert_eq!(classify_registry(200, ""), RegistryAnswer::Found);
        assert!(matches!(
            classify_registry(500, "manifest unknown"),
            RegistryAnswer::NotFound(_)
        ));
        assert!(matches!(
            classify_registry(404, "manifest for ghcr.io/acme/absent:1 not found"),
            RegistryAnswer::NotFound(_)
        ));
        assert!(matches!(
            classify_registry(404, "Not Found"),
            RegistryAnswer::Unreachable(_)
        ));
        assert!(matches!(
            classify_registry(401, "unauthorized"),
            RegistryAnswer::Auth(_)
        ));
        assert!(matches!(
            classify_registry(
                500,
                "Get \"https://ghcr.io/v2/\": dial tcp: lookup ghcr.io: no such host"
            ),
            RegistryAnswer::Unreachable(_)
        ));
    }

    #[test]
    fn api_versions_compare() {
        assert!(api_at_least("1.47", (1, 41)));
        assert!(api_at_least("1.41", (1, 41)));
        assert!(!api_at_least("1.40", (1, 41)));
        assert!(!api_at_least("x", (1, 41)));
        assert_eq!(encode("a/b:1@sha256:ff"), "a/b:1@sha256:ff");
        assert_eq!(encode("a b"), "a%20b");
    }
}
