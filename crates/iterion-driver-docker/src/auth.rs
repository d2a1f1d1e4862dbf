//! Registry credentials from a Docker `config.json` (03 §5.3): `auths.<registry>.auth` (base64
//! `user:password`) and `identitytoken`. Credentials stay in memory, are redacted in `Debug`, and are sent only
//! in `X-Registry-Auth`. Credential helpers (`credHelpers`, `credsStore`) are not run by this crate: a registry
//! served by a helper is pulled anonymously with a warning naming the helper.

/// Credentials of one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryAuth {
    /// User name.
    pub username: Option<String>,
    /// Password.
    pub password: Option<String>,
    /// Identity token.
    pub identity_token: Option<String>,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let red = |v: &Option<String>| v.as_ref().map(|s| format!("<redacted, {} bytes>", s.len()));
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &red(&self.password))
            .field("identity_token", &red(&self.identity_token))
            .finish()
    }
}

/// What the configuration says about a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Inline credentials.
    Found(RegistryAuth),
    /// A credential helper is configured (`docker-credential-<name>`); not run here.
    Helper(String),
    /// Nothing: anonymous.
    Anonymous,
}

/// Normalises a registry key: `docker.io`, `index.docker.io`, `registry-1.docker.io` and
/// `https://index.docker.io/v1/` are one registry (`docker.io`); schemes and paths are dropped.
pub fn normalize_registry(key: &str) -> String {
    let k = key.trim();
    let k = k
        .strip_prefix("https://")
        .or_else(|| k.strip_prefix("http://"))
        .unwrap_or(k);
    let host = k.split('/').next().unwrap_or(k).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "docker.io" => "docker.io".to_string(),
        _ => host,
    }
}

fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = 0u32;
    let mut bits = 0;
    for c in s.trim().bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => break,
            _ => return None,
        };
        buf = (buf << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((buf >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

/// Looks `registry` up in the text of a `config.json`.
pub fn lookup(config_json: &str, registry: &str) -> Lookup {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(config_json) else {
        return Lookup::Anonymous;
    };
    let want = normalize_registry(registry);
    if let Some(helpers) = v.get("credHelpers").and_then(|h| h.as_object()) {
        for (k, name) in helpers {
            if normalize_registry(k) == want
                && let Some(n) = name.as_str()
            {
                return Lookup::Helper(n.to_string());
            }
        }
    }
    if let Some(auths) = v.get("auths").and_then(|a| a.as_object()) {
        for (k, entry) in auths {
            if normalize_registry(k) != want {
                continue;
            }
            let token = entry
                .get("identitytoken")
                .and_then(|t| t.as_str())
                .filter(|t| !t.is_empty());
            let pair = entry
                .get("auth")
                .and_then(|a| a.as_str())
                .and_then(b64_decode)
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|s| s.split_once(':').map(|(u, p)| (u.to_string(), p.to_string())));
            if token.is_some() || pair.is_some() {
                return Lookup::Found(RegistryAuth {
                    username: pair.as_ref().map(|p| p.0.clone()),
                    password: pair.map(|p| p.1),
                    identity_token: token.map(str::to_string),
                });
            }
        }
    }
    match v
        .get("credsStore")
        .and_then(|s| s.as_str())
        .filter(|s| !s.is_empty())
    {
        Some(store) => Lookup::Helper(store.to_string()),
        None => Lookup::Anonymous,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(config: &str, registry: &str, expect: &str) {
        let got = match lookup(config, registry) {
            Lookup::Found(a) => format!(
                "found {}:{} token={}",
                a.username.unwrap_or_default(),
                a.password.unwrap_or_default(),
                a.identity_token.unwrap_or_default()
            ),
            Lookup::Helper(h) => format!("helper {h}"),
            Lookup::Anonymous => "anonymous".into(),
        };
        assert_eq!(got, expect, "{registry} in {config}");
    }

    #[test]
    fn credentials_5_3() {
        // "am86czNjcjN0" is base64 of "jo:s3cr3t".
        let hub = r#"{"auths":{"https://index.docker.io/v1/":{"auth":"am86czNjcjN0"}}}"#;
        check(hub, "docker.io", "found jo:s3cr3t token=");
        check(hub, "registry-1.docker.io", "found jo:s3cr3t token=");
        check(hub, "ghcr.io", "anonymous");
        check(
            r#"{"auths":{"ghcr.io":{"identitytoken":"tok"}}}"#,
            "ghcr.io",
            "found : token=tok",
        );
        check(
            r#"{"credHelpers":{"ghcr.io":"gh"},"auths":{"ghcr.io":{"auth":"am86czNjcjN0"}}}"#,
            "ghcr.io",
            "helper gh",
        );
        check(r#"{"credsStore":"desktop"}"#, "docker.io", "helper desktop");
        check("not json", "docker.io", "anonymous");
    }

    #[test]
    fn debug_redacts_secrets() {
        let a = RegistryAuth {
            username: Some("jo".into()),
            password: Some("s3cr3t".into()),
            identity_token: None,
        };
        let d = format!("{a:?}");
        assert!(!d.contains("s3cr3t") && d.contains("<redacted, 6 bytes>"), "{d}");
    }
}
