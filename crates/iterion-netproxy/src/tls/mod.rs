//! TLS inspection and secret substitution (spec §14).
//!
//! Active only when at least one [`SecretBinding`] is configured: a per-run CA is minted ([`ca`]), CONNECT
//! tunnels whose first bytes are a TLS ClientHello are terminated with a leaf certificate for the SNI and
//! re-encrypted towards the pinned upstream ([`intercept`]), HTTP/1.1 requests are relayed one by one with
//! placeholders replaced by the real values for bound hosts and refused elsewhere ([`http`]), responses from
//! bound hosts are scrubbed ([`scan`]), and tunnels that are not TLS are scanned for placeholders ([`raw`]).

pub(crate) mod ca;
pub(crate) mod http;
pub(crate) mod intercept;
pub(crate) mod raw;
pub(crate) mod scan;

#[cfg(test)]
mod tests;

use crate::{Error, Result};
use iterion_netpolicy::{Rule, Target};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zeroize::Zeroizing;

/// The prefix every placeholder starts with.
pub const PLACEHOLDER_PREFIX: &str = "iterion-ph-";

/// One secret binding: the real value is only ever sent to the bound hosts, inside intercepted TLS.
///
/// The sandbox sees [`SecretBinding::placeholder`] instead of the value; the value is zeroised on drop and
/// never printed (`Debug` shows the name, the hosts and the placeholder only).
#[derive(Clone)]
pub struct SecretBinding {
    name: String,
    value: Zeroizing<String>,
    hosts: Vec<String>,
    placeholder: String,
}

impl fmt::Debug for SecretBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretBinding")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("placeholder", &self.placeholder)
            .finish_non_exhaustive()
    }
}

impl SecretBinding {
    /// A binding of secret `name` with `value` to host patterns (spec §3 host-name patterns, e.g.
    /// `api.github.com` or `**.github.com`). A fresh placeholder (`iterion-ph-` + 32 random lower-case hex) is
    /// drawn now; [`crate::ProxyConfigBuilder::build`] validates the name, the value and the patterns.
    pub fn new<S: AsRef<str>>(name: impl Into<String>, value: impl Into<String>, hosts: &[S]) -> Self {
        let bytes: [u8; 16] = rand::random();
        Self {
            name: name.into(),
            value: Zeroizing::new(value.into()),
            hosts: hosts.iter().map(|h| h.as_ref().to_owned()).collect(),
            placeholder: format!("{PLACEHOLDER_PREFIX}{}", crate::auth::hex(&bytes)),
        }
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
enum CaSource {
    /// Minted at start; the common name carries the run id when one is given.
    Mint { run_id: Option<String> },
    /// Supplied by the operator (PEM certificate and PEM private key).
    Operator {
        cert_pem: String,
        key_pem: Zeroizing<String>,
    },
}

/// TLS inspection settings (spec §14), passed to [`crate::ProxyConfigBuilder::tls_inspection`].
///
/// Inspection is active only with at least one binding; without one no CA is minted and every tunnel stays
/// opaque.
#[derive(Clone)]
#[non_exhaustive]
pub struct TlsInspection {
    bindings: Vec<SecretBinding>,
    bypass: Vec<String>,
    ca: CaSource,
    upstream_roots_pem: Vec<String>,
    native_roots: bool,
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

/// The files clients need to trust the inspection CA (spec §14.6).
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

/// Why inspection settings could not be turned into a running inspector.
#[derive(Debug)]
pub(crate) enum BuildError {
    /// The settings are invalid; every problem is listed.
    Config(Vec<String>),
    /// Minting the CA or configuring TLS failed.
    Setup(ca::CaError),
}

/// One compiled binding.
pub(crate) struct Binding {
    pub(crate) name: String,
    pub(crate) value: Zeroizing<String>,
    pub(crate) placeholder: String,
    hosts: Vec<Rule>,
}

impl Binding {
    /// Whether `target` matches one of the binding's host patterns.
    pub(crate) fn bound_to(&self, target: &Target) -> bool {
        self.hosts.iter().any(|r| r.matches(target))
    }
}

/// The running inspection state shared by every connection.
pub(crate) struct Inspector {
    pub(crate) bindings: Vec<Binding>,
    /// The 32 hex characters after the prefix → index into `bindings`.
    pub(crate) by_suffix: HashMap<String, usize>,
    bypass: Vec<Rule>,
    pub(crate) ca: ca::Ca,
    pub(crate) leaves: ca::LeafCache,
    pub(crate) upstream: Arc<rustls::ClientConfig>,
}

impl fmt::Debug for Inspector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inspector")
            .field(
                "bindings",
                &self.bindings.iter().map(|b| &b.name).collect::<Vec<_>>(),
            )
            .field("bypass", &self.bypass.len())
            .finish_non_exhaustive()
    }
}

/// Whether `name` is a valid secret name: an environment variable name.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_pattern(what: &str, text: &str, names_only: bool, problems: &mut Vec<String>) -> Option<Rule> {
    match Rule::parse(text) {
        Ok(r) if r.negated() => {
            problems.push(format!("{what} '{text}': a negated pattern is not allowed here"));
            None
        }
        Ok(r) if names_only && r.is_ip_rule() => {
            problems.push(format!("{what} '{text}': only host-name patterns are allowed"));
            None
        }
        Ok(r) => Some(r),
        Err(e) => {
            problems.push(format!("{what} '{text}': {e}"));
            None
        }
    }
}

impl Inspector {
    /// Validate the settings and, when at least one binding is configured, create the CA and the upstream TLS
    /// configuration. `Ok(None)`: inspection is not active (no binding; no CA exists).
    pub(crate) fn build(cfg: TlsInspection) -> Result<Option<Inspector>, BuildError> {
        let mut problems = Vec::new();
        let mut bindings = Vec::new();
        let mut by_suffix = HashMap::new();
        for b in &cfg.bindings {
            if !valid_name(&b.name) {
                problems.push(format!(
                    "invalid secret name '{}' (want letters, digits and '_', not starting with a digit)",
                    b.name
                ));
            }
            if b.value.is_empty() {
                problems.push(format!("secret {} has an empty value", b.name));
            }
            if b.value.contains(PLACEHOLDER_PREFIX) {
                problems.push(format!("the value of secret {} contains a placeholder", b.name));
            }
            if b.hosts.is_empty() {
                problems.push(format!("secret {} is bound to no host", b.name));
            }
            if bindings.iter().any(|x: &Binding| x.name == b.name) {
                problems.push(format!("duplicate secret '{}'", b.name));
            }
            let what = format!("host of secret {}", b.name);
            let hosts: Vec<Rule> = b
                .hosts
                .iter()
                .filter_map(|h| parse_pattern(&what, h, true, &mut problems))
                .collect();
            let suffix = b.placeholder[PLACEHOLDER_PREFIX.len()..].to_owned();
            by_suffix.insert(suffix, bindings.len());
            bindings.push(Binding {
                name: b.name.clone(),
                value: b.value.clone(),
                placeholder: b.placeholder.clone(),
                hosts,
            });
        }
        let bypass: Vec<Rule> = cfg
            .bypass
            .iter()
            .filter_map(|p| parse_pattern("tls bypass pattern", p, false, &mut problems))
            .collect();
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if cfg.native_roots {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
        for (i, pem) in cfg.upstream_roots_pem.iter().enumerate() {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
                .filter_map(|c| c.ok())
                .collect();
            if certs.is_empty() {
                problems.push(format!("upstream root #{} contains no PEM certificate", i + 1));
            }
            for c in certs {
                if roots.add(c).is_err() {
                    problems.push(format!("upstream root #{} is not a valid certificate", i + 1));
                }
            }
        }
        let ca_source = cfg.ca.clone();
        if let CaSource::Operator { cert_pem, key_pem } = &ca_source
            && let Err(e) = ca::Ca::operator(cert_pem, key_pem)
        {
            problems.push(e.to_string());
        }
        if !problems.is_empty() {
            return Err(BuildError::Config(problems));
        }
        if bindings.is_empty() {
            return Ok(None);
        }
        let ca = match ca_source {
            CaSource::Mint { run_id } => ca::Ca::mint(run_id.as_deref()).map_err(BuildError::Setup)?,
            CaSource::Operator { cert_pem, key_pem } => {
                ca::Ca::operator(&cert_pem, &key_pem).map_err(|e| BuildError::Config(vec![e.to_string()]))?
            }
        };
        let upstream = ca::client_config(roots).map_err(BuildError::Setup)?;
        Ok(Some(Inspector {
            bindings,
            by_suffix,
            bypass,
            ca,
            leaves: ca::LeafCache::new(256),
            upstream,
        }))
    }

    /// Whether a target is on the bypass list (opaque tunnel, no interception, no scan).
    pub(crate) fn bypassed(&self, target: &Target) -> bool {
        self.bypass.iter().any(|r| r.matches(target))
    }

    /// The bindings whose host patterns match `target`.
    pub(crate) fn bound(&self, target: &Target) -> Vec<usize> {
        (0..self.bindings.len())
            .filter(|&i| self.bindings[i].bound_to(target))
            .collect()
    }

    /// The trust files: the CA, and the Mozilla root set (the certificates of `webpki-root-certs`, the same set
    /// as the `webpki-roots` anchors used upstream) followed by the CA.
    pub(crate) fn trust_bundle(&self) -> TrustBundle {
        let ca_pem = self.ca.cert_pem.clone();
        let mut bundle_pem = String::with_capacity(webpki_root_certs::TLS_SERVER_ROOT_CERTS.len() * 2048);
        for cert in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
            bundle_pem.push_str(&ca::pem("CERTIFICATE", cert));
        }
        bundle_pem.push_str(&ca_pem);
        TrustBundle { ca_pem, bundle_pem }
    }
}

impl From<ca::CaError> for Error {
    fn from(e: ca::CaError) -> Self {
        Error::TlsSetup {
            reason: e.to_string(),
        }
    }
}
