//! The TLS inspection settings (spec §14): secret bindings and their placeholders, bypass patterns, the CA
//! source, and the trust files a running inspector hands out. Plain data, compiled with or without the
//! `tls-inspection` feature (the engine that uses them, `tls/`, is compiled only with it).

use std::fmt;
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// The prefix every placeholder starts with.
pub const PLACEHOLDER_PREFIX: &str = "iterion-ph-";

/// One secret binding: the real value is only ever sent to the bound hosts, inside intercepted TLS (and, with
/// [`SecretBinding::plain_http`], in plain-HTTP forward requests to them).
///
/// The sandbox sees [`SecretBinding::placeholder`] instead of the value; the value is zeroised on drop and
/// never printed (`Debug` shows the name, the hosts, the placeholder and the plain-HTTP switch only).
#[derive(Clone)]
#[cfg_attr(not(feature = "tls-inspection"), allow(dead_code))] // the value is read only by the inspector
pub struct SecretBinding {
    pub(crate) name: String,
    pub(crate) value: Zeroizing<String>,
    pub(crate) hosts: Vec<String>,
    pub(crate) placeholder: String,
    pub(crate) plain_http: bool,
}

impl fmt::Debug for SecretBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretBinding")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("placeholder", &self.placeholder)
            .field("plain_http", &self.plain_http)
            .finish_non_exhaustive()
    }
}

impl SecretBinding {
    /// A binding of secret `name` with `value` to hosts: host-name patterns as in network rules (e.g.
    /// `api.github.com`, `**.github.com`, `api.example:8443`) or a single IP address (`127.0.0.1:8080`,
    /// `[::1]:8080`); CIDR ranges and negations are refused. A fresh placeholder (`iterion-ph-` + 32 random
    /// lower-case hex) is drawn now; [`crate::ProxyConfigBuilder::build`] validates the name, the value and the
    /// patterns.
    pub fn new<S: AsRef<str>>(name: impl Into<String>, value: impl Into<String>, hosts: &[S]) -> Self {
        let bytes: [u8; 16] = rand::random();
        Self {
            name: name.into(),
            value: Zeroizing::new(value.into()),
            hosts: hosts.iter().map(|h| h.as_ref().to_owned()).collect(),
            placeholder: format!("{PLACEHOLDER_PREFIX}{}", crate::auth::hex(&bytes)),
            plain_http: false,
        }
    }

    /// Also substitute the placeholder in plain-HTTP forward requests (absolute-form `http://` through the
    /// proxy) to the bound hosts, e.g. a local model server at `http://127.0.0.1:8080` (default off: such a
    /// request is refused with `secret <NAME> requires TLS`). The same rules as inside TLS apply: the `Host`
    /// header must name the request's authority, bodies are rewritten only when small and identity-encoded,
    /// responses are scrubbed. The value then crosses the network in clear text; raw (non-TLS) `CONNECT`
    /// tunnels still get no substitution.
    pub fn plain_http(mut self, on: bool) -> Self {
        self.plain_http = on;
        self
    }

    /// The secret's name (also the environment variable the sandbox sees).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host patterns the secret is bound to.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The placeholder the sandbox uses instead of the value.
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }
}

/// Where the inspection CA comes from.
#[derive(Clone)]
#[cfg_attr(not(feature = "tls-inspection"), allow(dead_code))] // read only by the inspector
pub(crate) enum CaSource {
    /// Minted at start; the common name carries the run id when one is given.
    Mint { run_id: Option<String> },
    /// Supplied by the operator (PEM certificate and PEM private key).
    Operator {
        cert_pem: String,
        key_pem: Zeroizing<String>,
    },
}

/// TLS inspection settings, passed to [`crate::ProxyConfigBuilder::tls_inspection`].
///
/// Inspection is active only with at least one binding; without one no CA is minted and every tunnel stays
/// opaque. Settings with a binding need the `tls-inspection` feature: without it
/// [`crate::ProxyConfigBuilder::build`] refuses them with [`crate::Error::TlsInspectionUnavailable`].
#[derive(Clone)]
#[non_exhaustive]
#[cfg_attr(not(feature = "tls-inspection"), allow(dead_code))] // read only by the inspector
pub struct TlsInspection {
    pub(crate) bindings: Vec<SecretBinding>,
    pub(crate) bypass: Vec<String>,
    pub(crate) ca: CaSource,
    pub(crate) upstream_roots_pem: Vec<String>,
    pub(crate) native_roots: bool,
}

impl fmt::Debug for TlsInspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsInspection")
            .field("bindings", &self.bindings)
            .field("bypass", &self.bypass)
            .field("operator_ca", &matches!(self.ca, CaSource::Operator { .. }))
            .field("upstream_roots", &self.upstream_roots_pem.len())
            .field("native_roots", &self.native_roots)
            .finish_non_exhaustive()
    }
}

impl Default for TlsInspection {
    fn default() -> Self {
        Self::new()
    }
}

impl TlsInspection {
    /// No binding, no bypass, a CA minted at start, upstream roots: the Mozilla set plus the host's native roots.
    pub fn new() -> Self {
        Self {
            bindings: Vec::new(),
            bypass: Vec::new(),
            ca: CaSource::Mint { run_id: None },
            upstream_roots_pem: Vec::new(),
            native_roots: true,
        }
    }

    /// Add a secret binding.
    pub fn binding(mut self, binding: SecretBinding) -> Self {
        self.bindings.push(binding);
        self
    }

    /// Never intercept targets matching this host pattern (certificate pinning, mutual TLS, HTTP/2-only
    /// clients); such tunnels stay opaque and cannot be scanned.
    pub fn bypass(mut self, pattern: impl Into<String>) -> Self {
        self.bypass.push(pattern.into());
        self
    }

    /// Name the minted CA after a run: `iterion sandbox CA <run id>` (standalone: `iterion netproxy CA <hex>`).
    pub fn run_id(mut self, run_id: impl Into<String>) -> Self {
        if let CaSource::Mint { run_id: r } = &mut self.ca {
            *r = Some(run_id.into());
        }
        self
    }

    /// Use an operator-supplied CA (PEM certificate, PEM private key) instead of minting one.
    pub fn operator_ca(mut self, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        self.ca = CaSource::Operator {
            cert_pem: cert_pem.into(),
            key_pem: Zeroizing::new(key_pem.into()),
        };
        self
    }

    /// Also trust these PEM certificates for upstream connections (tests, private CAs).
    pub fn upstream_root_pem(mut self, pem: impl Into<String>) -> Self {
        self.upstream_roots_pem.push(pem.into());
        self
    }

    /// Whether the host's native roots are trusted for upstream connections (default on).
    pub fn native_roots(mut self, on: bool) -> Self {
        self.native_roots = on;
        self
    }

    /// The configured bindings (with their placeholders).
    pub fn bindings(&self) -> &[SecretBinding] {
        &self.bindings
    }
}

/// The files clients need to trust the inspection CA.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrustBundle {
    /// The CA certificate alone (`ca.pem`).
    pub ca_pem: String,
    /// The root set followed by the CA certificate (`ca-bundle.pem`).
    pub bundle_pem: String,
}

impl TrustBundle {
    /// Write `ca.pem` and `ca-bundle.pem` into `dir` (created if missing); returns both paths.
    ///
    /// # Errors
    ///
    /// The I/O error of creating the directory or writing a file.
    pub fn write_to(&self, dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let ca = dir.join("ca.pem");
        let bundle = dir.join("ca-bundle.pem");
        std::fs::write(&ca, &self.ca_pem)?;
        std::fs::write(&bundle, &self.bundle_pem)?;
        Ok((ca, bundle))
    }
}
