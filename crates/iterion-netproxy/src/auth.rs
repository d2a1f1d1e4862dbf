//! Credentials and `Proxy-Authorization` checking (spec §11).

use crate::Policy;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A credential registered with the proxy: who may use it and which policy applies to its requests.
#[derive(Debug, Clone)]
pub struct Credential {
    /// Unique username (`run`, a node id, or `iterion` in standalone mode).
    pub username: String,
    token: String,
    /// The node this credential attributes decisions to (`None` for the run credential).
    pub node_id: Option<String>,
    /// The policy applied to requests authenticated with this credential.
    pub policy: Arc<Policy>,
    /// Accept any username with the right token in Basic authentication (standalone convenience, §11).
    pub any_username: bool,
    /// Cancelled when the credential is removed: tunnels opened with it close.
    revoked: CancellationToken,
}

impl Credential {
    /// A credential for `username` with `token`, optionally attributed to `node_id`, enforcing `policy`.
    pub fn new(
        username: impl Into<String>,
        token: impl Into<String>,
        node_id: Option<String>,
        policy: Arc<Policy>,
    ) -> Self {
        Self {
            username: username.into(),
            token: token.into(),
            node_id,
            policy,
            any_username: false,
            revoked: CancellationToken::new(),
        }
    }

    /// Accept this credential's token with any Basic username (standalone mode).
    #[must_use]
    pub fn accept_any_username(mut self) -> Self {
        self.any_username = true;
        self
    }

    /// The token (never logged; needed to build endpoint URLs).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Cancelled once the credential is removed from the proxy (shared by every clone).
    pub(crate) fn revoked(&self) -> &CancellationToken {
        &self.revoked
    }
}

/// A fresh token: 32 bytes from the operating system's random source, lower-case hex (64 characters).
pub fn new_token() -> String {
    use rand::TryRngCore;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng
        .unwrap_err()
        .try_fill_bytes(&mut bytes)
        .unwrap_or(());
    hex(&bytes)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Constant-time comparison of two fixed-size digests.
fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The outcome of checking a request's `Proxy-Authorization` headers.
#[derive(Debug, Clone)]
pub(crate) enum AuthOutcome {
    /// Authenticated as this credential.
    Ok(Arc<Credential>),
    /// Refused; the scheme and username seen (never the token).
    Failed {
        scheme: String,
        username: Option<String>,
    },
}

/// The registered credentials, looked up by token digest.
#[derive(Debug, Default)]
pub(crate) struct CredentialStore {
    by_user: HashMap<String, (Arc<Credential>, [u8; 32])>,
    /// `None` when authentication is disabled and this credential applies to every request.
    pub(crate) anonymous: Option<Arc<Credential>>,
}

/// Why a credential could not be registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Conflict {
    Username,
    Token,
}

impl CredentialStore {
    pub(crate) fn insert(&mut self, c: Credential) -> Result<(), Conflict> {
        let d = digest(&c.token);
        if self.by_user.contains_key(&c.username) {
            return Err(Conflict::Username);
        }
        if self.by_user.values().any(|(_, other)| ct_eq(other, &d)) {
            return Err(Conflict::Token);
        }
        self.by_user.insert(c.username.clone(), (Arc::new(c), d));
        Ok(())
    }

    /// Removes a credential and revokes it: tunnels opened with it are closed.
    pub(crate) fn remove(&mut self, username: &str) -> bool {
        match self.by_user.remove(username) {
            Some((c, _)) => {
                c.revoked.cancel();
                true
            }
            None => false,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_user.is_empty()
    }

    fn by_token(&self, token: &str) -> Option<Arc<Credential>> {
        let d = digest(token);
        // Visit every credential so the time taken does not depend on which one matched.
        let mut found = None;
        for (c, cd) in self.by_user.values() {
            if ct_eq(cd, &d) {
                found = Some(c.clone());
            }
        }
        found
    }

    /// Check the `Proxy-Authorization` values of one request.
    ///
    /// A failure reports the scheme and the Basic username, never anything that could be a token: a scheme that
    /// is not a registered HTTP authentication scheme is reported as `other` (a client that sends a bare token
    /// would otherwise have it recorded as the scheme), and a username that is a registered token is withheld.
    pub(crate) fn check<'a>(&self, mut values: impl Iterator<Item = &'a str>) -> AuthOutcome {
        if let Some(c) = &self.anonymous {
            return AuthOutcome::Ok(c.clone());
        }
        let fail = |scheme: &str, username: Option<String>| AuthOutcome::Failed {
            scheme: scheme.to_owned(),
            username,
        };
        let (Some(value), None) = (values.next(), values.next()) else {
            return fail("", None);
        };
        let value = value.trim();
        let (scheme, rest) = value.split_once([' ', '\t']).unwrap_or((value, ""));
        let rest = rest.trim();
        let scheme_lc = scheme.to_ascii_lowercase();
        match scheme_lc.as_str() {
            "bearer" => match self.by_token(rest) {
                Some(c) if !rest.is_empty() => AuthOutcome::Ok(c),
                _ => fail("bearer", None),
            },
            "basic" => {
                let Some(decoded) = base64_decode(rest).and_then(|b| String::from_utf8(b).ok()) else {
                    return fail("basic", None);
                };
                let Some((user, token)) = decoded.split_once(':') else {
                    return fail("basic", None);
                };
                match self.by_token(token) {
                    Some(c) if c.username == user => AuthOutcome::Ok(c),
                    Some(c) if c.any_username => AuthOutcome::Ok(named_node(&c, user)),
                    _ if self.by_token(user).is_some() => fail("basic", None),
                    _ => fail("basic", Some(user.to_owned())),
                }
            }
            known if AUTH_SCHEMES.contains(&known) => fail(known, None),
            _ => fail("other", None),
        }
    }
}

/// The HTTP authentication schemes of the IANA registry: reported by name when they fail; anything else is
/// `other`.
const AUTH_SCHEMES: &[&str] = &[
    "basic",
    "bearer",
    "concealed",
    "digest",
    "dpop",
    "gnap",
    "hoba",
    "mutual",
    "negotiate",
    "ntlm",
    "oauth",
    "privatetoken",
    "scram-sha-1",
    "scram-sha-256",
    "vapid",
];

/// A credential that accepts any Basic username, as used by the node that username names (spec §11: the Basic
/// username names the node). The credential's own username, or an empty one, is the credential itself.
fn named_node(c: &Arc<Credential>, user: &str) -> Arc<Credential> {
    if user.is_empty() {
        return c.clone();
    }
    Arc::new(Credential {
        username: user.to_owned(),
        node_id: Some(user.to_owned()),
        ..Credential::clone(c)
    })
}

/// Decode standard base64 (with or without padding); `None` on any invalid character.
pub(crate) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if bits >= 6 {
        return None;
    }
    Some(out)
}

/// Encode standard base64 with padding (used by tests and endpoint helpers).
pub fn base64_encode(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Percent-encode a username for the userinfo part of an endpoint URL.
pub(crate) fn percent_encode_userinfo(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip() {
        for s in ["", "f", "fo", "foo", "foob", "fooba", "foobar", "fetch:abc"] {
            assert_eq!(
                base64_decode(&base64_encode(s.as_bytes())).as_deref(),
                Some(s.as_bytes()),
                "{s}"
            );
        }
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_decode("Zm9v!"), None);
    }

    #[test]
    fn tokens_are_64_hex() {
        let t = new_token();
        assert_eq!(t.len(), 64);
        assert!(
            t.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(t, new_token());
    }

    fn store(any_username: bool) -> CredentialStore {
        let policy = Arc::new(
            Policy::compile(iterion_netpolicy::Mode::Allowlist, &[], &[] as &[&str]).expect("empty policy"),
        );
        let mut c = Credential::new("iterion", "t0ken-0123456789abcdef", None, policy);
        if any_username {
            c = c.accept_any_username();
        }
        let mut s = CredentialStore::default();
        s.insert(c).expect("insert");
        s
    }

    /// `Ok username node_id` or `Failed scheme username`.
    fn check(s: &CredentialStore, header: &str, expect: &str) {
        let got = match s.check(std::iter::once(header)) {
            AuthOutcome::Ok(c) => format!("Ok {} {:?}", c.username, c.node_id),
            AuthOutcome::Failed { scheme, username } => format!("Failed {scheme} {username:?}"),
        };
        assert_eq!(got, expect, "{header}");
    }

    fn basic(s: &str) -> String {
        format!("Basic {}", base64_encode(s.as_bytes()))
    }

    #[test]
    fn any_username_names_the_node() {
        let s = store(true);
        check(&s, "Bearer t0ken-0123456789abcdef", "Ok iterion None");
        check(&s, &basic("iterion:t0ken-0123456789abcdef"), "Ok iterion None");
        check(&s, &basic(":t0ken-0123456789abcdef"), "Ok iterion None");
        check(
            &s,
            &basic("fetch:t0ken-0123456789abcdef"),
            r#"Ok fetch Some("fetch")"#,
        );
        let strict = store(false);
        check(
            &strict,
            &basic("fetch:t0ken-0123456789abcdef"),
            r#"Failed basic Some("fetch")"#,
        );
    }

    #[test]
    fn failures_never_report_a_token() {
        let s = store(false);
        check(&s, "t0ken-0123456789abcdef", "Failed other None");
        check(&s, "t0ken-0123456789abcdef x", "Failed other None");
        check(&s, "Digest abc", "Failed digest None");
        check(&s, &basic("t0ken-0123456789abcdef:iterion"), "Failed basic None");
        check(&s, &basic("fetch:nope"), r#"Failed basic Some("fetch")"#);
        check(&s, "Bearer nope", "Failed bearer None");
    }

    #[test]
    fn userinfo_encoding() {
        assert_eq!(percent_encode_userinfo("a b@c"), "a%20b%40c");
    }
}
