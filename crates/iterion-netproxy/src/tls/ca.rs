//! The per-run CA and the leaf certificates it signs (spec §14.2, §14.3 step 3).
//!
//! The CA's private key is kept only as PKCS#8 bytes in a zeroising buffer; a signing key is rebuilt from it
//! for each leaf minted (leaves are cached, so this is rare) and dropped right after signing.

use iterion_netpolicy::Host;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zeroize::Zeroizing;

/// Why the CA or a leaf could not be created.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CaError {
    /// rcgen refused the parameters or the key.
    #[error("cannot create a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("cannot configure tls: {0}")]
    Rustls(#[from] rustls::Error),
    /// The operator CA certificate is not PEM.
    #[error("the CA certificate is not a PEM certificate")]
    CertPem,
    /// The operator CA key is not a PEM private key.
    #[error("the CA key is not a PEM private key")]
    KeyPem,
    /// The operator CA key does not belong to the certificate.
    #[error("the CA key does not match the CA certificate")]
    KeyMismatch,
}

/// The crypto provider used everywhere (ring), named explicitly so a process with several providers compiled in
/// never depends on a process-wide default.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// PEM text of one DER object.
pub(crate) fn pem(label: &str, der: &[u8]) -> String {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len() * 4 / 3 + 4);
    for chunk in der.chunks(3) {
        let n = chunk.len();
        let v = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= n {
                b64.push(B64[((v >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Set the validity to `now + before .. now + after` (seconds; `before` is negative for the skew allowance).
fn validity(params: &mut CertificateParams, before: i64, after: i64) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + Duration::from_secs(unix_now().saturating_add_signed(before));
    params.not_after = epoch + Duration::from_secs(unix_now().saturating_add_signed(after));
}

fn random_serial() -> SerialNumber {
    let mut b: [u8; 16] = rand::random();
    // A positive DER integer without a leading zero byte, still 16 bytes of which 127 bits are random.
    b[0] = (b[0] & 0x7f) | 0x01;
    SerialNumber::from_slice(&b)
}

/// The inspection CA.
pub(crate) struct Ca {
    pub(crate) cert_der: CertificateDer<'static>,
    pub(crate) cert_pem: String,
    /// PKCS#8 of the private key; zeroised on drop.
    key_der: Zeroizing<Vec<u8>>,
}

impl Ca {
    /// Mint a CA: ECDSA P-256, CN `iterion sandbox CA <run id>` or `iterion netproxy CA <8 hex>`, path length 0,
    /// `keyCertSign` and `cRLSign`, valid from now − 1 h to now + 30 days, random 16-byte serial.
    pub(crate) fn mint(run_id: Option<&str>) -> Result<Self, CaError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let cn = match run_id {
            Some(id) => format!("iterion sandbox CA {id}"),
            None => {
                let b: [u8; 4] = rand::random();
                format!("iterion netproxy CA {}", crate::auth::hex(&b))
            }
        };
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        validity(&mut params, -3600, 30 * 24 * 3600);
        params.serial_number = Some(random_serial());
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_der: cert.der().clone(),
            cert_pem: cert.pem(),
            key_der: Zeroizing::new(key.serialize_der()),
        })
    }

    /// An operator-supplied CA (PEM certificate and PEM private key, any algorithm rcgen can sign with).
    pub(crate) fn operator(cert_pem: &str, key_pem: &str) -> Result<Self, CaError> {
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|_| CaError::CertPem)?;
        let key_der = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| CaError::KeyPem)?;
        let key = KeyPair::try_from(&key_der).map_err(|_| CaError::KeyPem)?;
        // rcgen must be able to sign with it as this certificate's issuer, and the key must be the certificate's.
        Issuer::from_ca_cert_der(&cert_der, &key)?;
        if spki_of(&cert_der) != Some(rcgen::PublicKeyData::subject_public_key_info(&key)) {
            return Err(CaError::KeyMismatch);
        }
        let pem_text = pem("CERTIFICATE", &cert_der);
        Ok(Self {
            cert_der,
            cert_pem: pem_text,
            key_der: Zeroizing::new(key.serialize_der()),
        })
    }

    /// Mint a leaf for `host`: ECDSA P-256, SAN = the name (or an IP SAN), valid now − 1 h to now + 24 h.
    pub(crate) fn leaf(&self, host: &Host) -> Result<Arc<rustls::ServerConfig>, CaError> {
        let ca_key = KeyPair::try_from(self.key_der.as_slice())?;
        let issuer = Issuer::from_ca_cert_der(&self.cert_der, ca_key)?;
        let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host.to_string());
        params.distinguished_name = dn;
        params.subject_alt_names = vec![match host {
            Host::Ip(ip) => SanType::IpAddress(*ip),
            Host::Name(n) => SanType::DnsName(n.clone().try_into()?),
        }];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, -3600, 24 * 3600);
        params.serial_number = Some(random_serial());
        let cert = params.signed_by(&leaf_key, &issuer)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The `SubjectPublicKeyInfo` DER of a certificate (minimal DER walk: Certificate → TBSCertificate → field 7,
/// or 6 without the explicit version).
fn spki_of(cert: &[u8]) -> Option<Vec<u8>> {
    fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let tag = *b.first()?;
        let first = *b.get(1)?;
        let (len, hdr) = if first < 0x80 {
            (first as usize, 2)
        } else {
            let n = (first & 0x7f) as usize;
            if n == 0 || n > 4 {
                return None;
            }
            let mut len = 0usize;
            for i in 0..n {
                len = (len << 8) | *b.get(2 + i)? as usize;
            }
            (len, 2 + n)
        };
        let end = hdr.checked_add(len)?;
        Some((tag, b.get(..end)?, b.get(end..)?))
    }
    fn inner(t: &[u8]) -> Option<&[u8]> {
        let first = *t.get(1)?;
        let hdr = if first < 0x80 {
            2
        } else {
            2 + (first & 0x7f) as usize
        };
        t.get(hdr..)
    }
    let (_, certificate, _) = tlv(cert)?;
    let (_, tbs, _) = tlv(inner(certificate)?)?;
    let mut rest = inner(tbs)?;
    let mut fields = Vec::new();
    while !rest.is_empty() {
        let (tag, whole, next) = tlv(rest)?;
        fields.push((tag, whole));
        rest = next;
    }
    let skip = usize::from(fields.first()?.0 == 0xa0);
    // version?, serial, signature, issuer, validity, subject, subjectPublicKeyInfo
    fields.get(skip + 5).map(|(_, w)| w.to_vec())
}

/// A cached leaf configuration and when it was last used.
type Entry = (Arc<rustls::ServerConfig>, u64);

/// Leaf configurations per host, least recently used evicted beyond the capacity.
pub(crate) struct LeafCache {
    capacity: usize,
    /// The use counter and the entries.
    inner: Mutex<(u64, HashMap<Host, Entry>)>,
}

impl LeafCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::new((0, HashMap::new())),
        }
    }

    /// The cached configuration for `host`, or a new leaf from `ca`.
    pub(crate) fn get(&self, ca: &Ca, host: &Host) -> Result<Arc<rustls::ServerConfig>, CaError> {
        if let Ok(mut guard) = self.inner.lock() {
            let (tick, map) = &mut *guard;
            *tick += 1;
            if let Some((cfg, used)) = map.get_mut(host) {
                *used = *tick;
                return Ok(cfg.clone());
            }
        }
        let cfg = ca.leaf(host)?;
        if let Ok(mut guard) = self.inner.lock() {
            let (tick, map) = &mut *guard;
            *tick += 1;
            if map.len() >= self.capacity
                && !map.contains_key(host)
                && let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, (_, used))| *used)
                    .map(|(h, _)| h.clone())
            {
                map.remove(&oldest);
            }
            map.insert(host.clone(), (cfg.clone(), *tick));
        }
        Ok(cfg)
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, host: &Host) -> bool {
        self.inner.lock().map(|g| g.1.contains_key(host)).unwrap_or(false)
    }
}

/// The upstream client configuration: the given roots, ALPN `http/1.1`.
pub(crate) fn client_config(roots: rustls::RootCertStore) -> Result<Arc<rustls::ClientConfig>, CaError> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
