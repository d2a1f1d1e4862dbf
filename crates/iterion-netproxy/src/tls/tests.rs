//! Unit tests of the CA, the leaf cache and the configuration checks (spec §14.2–§14.4).

use super::Inspector;
use super::ca::{Ca, LeafCache};
use crate::{SecretBinding, TlsInspection};
use iterion_netpolicy::{Host, Target};

/// A minimal DER reader for the checks below: (tag, content, rest).
fn tlv(b: &[u8]) -> (u8, &[u8], &[u8]) {
    let first = b[1];
    let (len, hdr) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        (
            b[2..2 + n].iter().fold(0usize, |a, x| (a << 8) | *x as usize),
            2 + n,
        )
    };
    (b[0], &b[hdr..hdr + len], &b[hdr + len..])
}

/// The TBSCertificate fields (tag, content) of a certificate.
fn tbs_fields(cert: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let (_, certificate, _) = tlv(cert);
    let (_, tbs, _) = tlv(certificate);
    let mut rest = tbs;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (tag, content, next) = tlv(rest);
        out.push((tag, content.to_vec()));
        rest = next;
    }
    out
}

/// A UTCTime (`YYMMDDHHMMSSZ`) as Unix seconds.
fn utc_time(t: &[u8]) -> i64 {
    let n = |i: usize| i64::from(t[i] - b'0') * 10 + i64::from(t[i + 1] - b'0');
    let (y, m, d) = (2000 + n(0), n(2), n(4));
    // Days from civil (Howard Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86400 + n(6) * 3600 + n(8) * 60 + n(10)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[test]
fn minted_ca_has_the_documented_shape() {
    let ca = Ca::mint(Some("run-42")).expect("mint");
    let der = ca.cert_der.as_ref();
    let f = tbs_fields(der);
    // [0] version, serial, signature, issuer, validity, subject, spki, [3] extensions
    assert_eq!(f[0].0, 0xa0);
    assert_eq!(f[1].1.len(), 16, "16-byte serial");
    assert!(contains(&f[5].1, b"iterion sandbox CA run-42"));
    let (_, nb, rest) = tlv(&f[4].1);
    let (_, na, _) = tlv(rest);
    let now = unix_now();
    assert!((now - 3600 - 5..=now - 3600 + 5).contains(&utc_time(nb)));
    assert!((now + 30 * 86400 - 5..=now + 30 * 86400 + 5).contains(&utc_time(na)));
    // Basic constraints: CA, path length 0; key usage keyCertSign + cRLSign; an ECDSA P-256 key.
    assert!(contains(der, &[0x30, 0x06, 0x01, 0x01, 0xff, 0x02, 0x01, 0x00]));
    assert!(contains(der, &[0x03, 0x02, 0x01, 0x06]));
    assert!(contains(
        &f[6].1,
        &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]
    ));
    assert!(ca.cert_pem.starts_with("-----BEGIN CERTIFICATE-----\n"));

    let standalone = Ca::mint(None).expect("mint");
    let subject = &tbs_fields(standalone.cert_der.as_ref())[5].1;
    let at = subject
        .windows(20)
        .position(|w| w == b"iterion netproxy CA ")
        .expect("standalone common name");
    let hex = &subject[at + 20..];
    assert_eq!(hex.len(), 8);
    assert!(hex.iter().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn operator_ca_is_checked() {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let cert = params.self_signed(&key).expect("self signed");
    assert!(Ca::operator(&cert.pem(), &key.serialize_pem()).is_ok());
    let other = rcgen::KeyPair::generate().expect("key");
    let e = Ca::operator(&cert.pem(), &other.serialize_pem())
        .err()
        .map(|e| e.to_string());
    assert_eq!(e.as_deref(), Some("the CA key does not match the CA certificate"));
    let e = Ca::operator("nope", &key.serialize_pem())
        .err()
        .map(|e| e.to_string());
    assert_eq!(e.as_deref(), Some("the CA certificate is not a PEM certificate"));
}

#[test]
fn leaf_cache_evicts_the_least_recently_used() {
    let ca = Ca::mint(None).expect("mint");
    let cache = LeafCache::new(2);
    let h = |s: &str| Host::parse(s).expect("host");
    cache.get(&ca, &h("a.example")).expect("a");
    cache.get(&ca, &h("b.example")).expect("b");
    cache.get(&ca, &h("a.example")).expect("a again");
    cache.get(&ca, &h("c.example")).expect("c");
    assert!(cache.contains(&h("a.example")));
    assert!(!cache.contains(&h("b.example")));
    assert!(cache.contains(&h("c.example")));
    cache.get(&ca, &h("127.0.0.1")).expect("an IP SAN leaf");
    assert!(cache.contains(&h("127.0.0.1")));
}

#[test]
fn placeholders_have_the_documented_shape() {
    let a = SecretBinding::new("GH_TOKEN", "v", &["api.github.com"]);
    let b = SecretBinding::new("GH_TOKEN", "v", &["api.github.com"]);
    for p in [a.placeholder(), b.placeholder()] {
        assert_eq!(p.len(), 43);
        assert!(p.starts_with("iterion-ph-"));
        assert!(
            p[11..]
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)),
            "{p}"
        );
    }
    assert_ne!(a.placeholder(), b.placeholder());
    let secret = SecretBinding::new("GH_TOKEN", "ghp_realvalue", &["api.github.com"]);
    assert!(!format!("{secret:?}").contains("ghp_realvalue"));
}

fn problems(t: TlsInspection) -> Vec<String> {
    match Inspector::build(t) {
        Ok(_) => Vec::new(),
        Err(super::BuildError::Config(p)) => p,
        Err(super::BuildError::Setup(e)) => vec![format!("setup: {e}")],
    }
}

#[test]
fn configuration_problems_are_all_listed() {
    let t = TlsInspection::new()
        .native_roots(false)
        .binding(SecretBinding::new("1BAD", "x", &["api.github.com"]))
        .binding(SecretBinding::new("EMPTY", "", &["a.example"]))
        .binding(SecretBinding::new("NOHOST", "x", &[] as &[&str]))
        .binding(SecretBinding::new("IP", "x", &["10.0.0.0/8"]))
        .binding(SecretBinding::new("NEG", "x", &["!a.example"]))
        .bypass("a*b.example")
        .bypass("10.0.0.0/8");
    let p = problems(t);
    assert_eq!(p.len(), 6, "{p:#?}");
    assert!(p[0].starts_with("invalid secret name '1BAD'"), "{p:#?}");
    assert!(p.iter().any(|x| x == "secret EMPTY has an empty value"));
    assert!(p.iter().any(|x| x == "secret NOHOST is bound to no host"));
    assert!(
        p.iter()
            .any(|x| x == "host of secret IP '10.0.0.0/8': a CIDR range is not allowed here; bind host names or single IP addresses")
    );
    assert!(p.iter().any(|x| x.contains("'!a.example': a negated pattern")));
    assert!(
        p.iter()
            .any(|x| x.starts_with("tls bypass pattern 'a*b.example'"))
    );
}

#[test]
fn single_ip_addresses_can_be_bound() {
    let t = TlsInspection::new()
        .native_roots(false)
        .binding(SecretBinding::new(
            "LOCAL",
            "sk-local-value",
            &["127.0.0.1:8080", "10.1.2.3", "[::1]:8080", "[fd00::1]"],
        ));
    let insp = match Inspector::build(t) {
        Ok(Some(i)) => i,
        Ok(None) => panic!("inspection inactive"),
        Err(super::BuildError::Config(p)) => panic!("{p:#?}"),
        Err(super::BuildError::Setup(e)) => panic!("{e}"),
    };
    let target = |s: &str| Target::parse(s, None).expect("target");
    let b = &insp.bindings[0];
    assert!(b.bound_to(&target("127.0.0.1:8080")));
    assert!(
        !b.bound_to(&target("127.0.0.1:8081")),
        "the port is part of the binding"
    );
    assert!(b.bound_to(&target("10.1.2.3:443")));
    assert!(b.bound_to(&target("[::1]:8080")));
    assert!(b.bound_to(&target("[fd00::1]:443")));
    assert!(!b.bound_to(&target("10.1.2.4:443")));
    let p = problems(
        TlsInspection::new()
            .native_roots(false)
            .binding(SecretBinding::new("R", "x", &["[fd00::/64]:8080", "!127.0.0.1"])),
    );
    assert_eq!(
        p,
        vec![
            "host of secret R '[fd00::/64]:8080': a CIDR range is not allowed here; bind host names or single IP addresses",
            "host of secret R '!127.0.0.1': a negated pattern is not allowed here",
        ]
    );
}

#[test]
fn no_binding_means_no_ca() {
    assert!(matches!(
        Inspector::build(TlsInspection::new().native_roots(false)),
        Ok(None)
    ));
    let on = Inspector::build(
        TlsInspection::new()
            .native_roots(false)
            .binding(SecretBinding::new("GH_TOKEN", "ghp_x", &["api.github.com"])),
    );
    assert!(matches!(on, Ok(Some(_))));
}
