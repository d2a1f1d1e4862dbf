//! The running inspection state: compiled bindings and bypass patterns, the CA, the leaf cache and the upstream
//! TLS configuration, built from the [`TlsInspection`] settings.

use super::ca;
use super::scan::{Hit, Needles};
use crate::secret::{CaSource, PLACEHOLDER_PREFIX, TlsInspection, TrustBundle};
use crate::{Error, Result};
use iterion_netpolicy::{Pattern, Rule, Target};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::fmt;
use std::sync::Arc;
use zeroize::Zeroizing;

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
    /// Substituted in plain-HTTP forward requests too.
    pub(crate) plain_http: bool,
    hosts: Vec<Rule>,
}

/// Secret values shorter than this are not looked for in traffic: short strings occur by chance too often.
pub(crate) const MIN_SCANNED_VALUE: usize = 8;

impl Binding {
    /// Whether `target` matches one of the binding's host patterns.
    pub(crate) fn bound_to(&self, target: &Target) -> bool {
        self.hosts.iter().any(|r| r.matches(target))
    }
}

/// The running inspection state shared by every connection.
pub(crate) struct Inspector {
    pub(crate) bindings: Vec<Binding>,
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

/// Parse a binding host or bypass pattern; `single_ip`: an IP pattern must be one address, not a range.
fn parse_pattern(what: &str, text: &str, single_ip: bool, problems: &mut Vec<String>) -> Option<Rule> {
    match Rule::parse(text) {
        Ok(r) if r.negated() => {
            problems.push(format!("{what} '{text}': a negated pattern is not allowed here"));
            None
        }
        Ok(r) if single_ip && matches!(r.pattern(), Pattern::Cidr(_)) => {
            problems.push(format!(
                "{what} '{text}': a CIDR range is not allowed here; bind host names or single IP addresses"
            ));
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
            bindings.push(Binding {
                name: b.name.clone(),
                value: b.value.clone(),
                placeholder: b.placeholder.clone(),
                plain_http: b.plain_http,
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

    /// The bindings whose host patterns match `target` and that are substituted in plain HTTP.
    pub(crate) fn plain_bound(&self, target: &Target) -> Vec<usize> {
        (0..self.bindings.len())
            .filter(|&i| self.bindings[i].plain_http && self.bindings[i].bound_to(target))
            .collect()
    }

    /// Every placeholder, and the values (of at least [`MIN_SCANNED_VALUE`] bytes) of the bindings for which
    /// `value` says yes.
    pub(crate) fn needles(&self, value: impl Fn(usize) -> bool) -> Needles<'_> {
        let mut list: Vec<(&[u8], Hit)> = Vec::with_capacity(2 * self.bindings.len());
        for (i, b) in self.bindings.iter().enumerate() {
            list.push((b.placeholder.as_bytes(), Hit::Placeholder(i)));
            if b.value.len() >= MIN_SCANNED_VALUE && value(i) {
                list.push((b.value.as_bytes(), Hit::Value(i)));
            }
        }
        Needles::new(list)
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
