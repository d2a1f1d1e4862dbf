//! Registry credentials from a Docker `config.json`: `auths.<registry>.auth` (base64 `user:password`),
//! `identitytoken`, and the credential helpers of `credHelpers` / `credsStore`, run with the helper protocol
//! ([`run_helper`]: `docker-credential-<name> get`, the server on stdin, `{ServerURL, Username, Secret}` on
//! stdout, bounded by [`HELPER_TIMEOUT`], found on the `PATH` the caller gives). Credentials stay in memory,
//! are redacted in `Debug`, are never logged, and are sent only to the engine: in `X-Registry-Auth` for a pull,
//! in `X-Registry-Config` for a classic build that pulls, through the build session for BuildKit.

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

/// Decodes standard or URL-safe base64, padding optional; `None` on a character outside both alphabets.
pub(crate) fn b64_decode(s: &str) -> Option<Vec<u8>> {
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

/// Bound of one credential helper run.
pub const HELPER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What a credential helper answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelperOutcome {
    /// Its credentials.
    Found(RegistryAuth),
    /// It has none for this server (`credentials not found`): anonymous, without a warning.
    NotFound,
    /// It could not be run or failed: anonymous, with this warning (never the helper's output).
    Failed(String),
}

/// The server a helper is asked about: Docker Hub's historical URL, else the registry host.
pub fn helper_server(registry: &str) -> String {
    let r = normalize_registry(registry);
    if r == "docker.io" {
        "https://index.docker.io/v1/".to_owned()
    } else {
        r
    }
}

/// Finds `docker-credential-<name>` in the absolute directories of `path` (a `PATH` value; empty and relative
/// entries are skipped, the working directory would resolve them).
pub fn find_helper(name: &str, path: Option<&str>) -> Option<std::path::PathBuf> {
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let file = format!("docker-credential-{name}");
    iterion_boundary::find_program(file.as_ref(), path.map(std::ffi::OsStr::new), &[]).ok()
}

/// Parses a helper's answer.
pub fn parse_helper_answer(stdout: &[u8]) -> Option<RegistryAuth> {
    let v: serde_json::Value = serde_json::from_slice(stdout).ok()?;
    let user = v.get("Username").and_then(|u| u.as_str()).unwrap_or_default();
    let secret = v.get("Secret").and_then(|u| u.as_str()).unwrap_or_default();
    if secret.is_empty() {
        return None;
    }
    Some(if user == "<token>" {
        RegistryAuth {
            username: None,
            password: None,
            identity_token: Some(secret.to_owned()),
        }
    } else {
        RegistryAuth {
            username: Some(user.to_owned()),
            password: Some(secret.to_owned()),
            identity_token: None,
        }
    })
}

/// Runs `docker-credential-<name> get` for `registry`, the helper looked up in `path`, bounded by `timeout`
/// (killed past it). Blocking: call it off the async threads.
pub fn run_helper(
    name: &str,
    registry: &str,
    path: Option<&str>,
    timeout: std::time::Duration,
) -> HelperOutcome {
    let helper = format!("docker-credential-{name}");
    let Some(bin) = find_helper(name, path) else {
        return HelperOutcome::Failed(format!("credential helper {helper} is not on the PATH"));
    };
    // the helper gets the PATH it was found in and nothing else of the environment
    let env = iterion_boundary::Env::new().with("PATH", path.unwrap_or_default());
    let bounds = iterion_boundary::Bounds::new(timeout).max_stdout(1024 * 1024);
    let out = iterion_boundary::HostCommand::new(&bin, env)
        .arg("get")
        .run_bounded(Some(helper_server(registry).into_bytes()), bounds);
    match out {
        Err(iterion_boundary::Error::TimedOut { .. }) => HelperOutcome::Failed(format!(
            "credential helper {helper} did not answer within {}s",
            timeout.as_secs()
        )),
        Err(iterion_boundary::Error::OutputTooLarge { .. }) => {
            HelperOutcome::Failed(format!("credential helper {helper} gave an unreadable answer"))
        }
        Err(e) => HelperOutcome::Failed(format!("credential helper {helper} could not be run: {e}")),
        Ok(c) if c.status.success() => match parse_helper_answer(&c.stdout) {
            Some(a) => HelperOutcome::Found(a),
            None => HelperOutcome::Failed(format!("credential helper {helper} gave an unreadable answer")),
        },
        Ok(c) if String::from_utf8_lossy(&c.stdout).contains("credentials not found") => {
            HelperOutcome::NotFound
        }
        Ok(c) => HelperOutcome::Failed(format!("credential helper {helper} failed ({})", c.status)),
    }
}

/// Where the driver finds registry credentials: a `config.json` and the `PATH` its helpers are looked up in.
/// Warnings (a failing helper) go to the sink given with [`Credentials::with_warnings`].
#[derive(Clone)]
pub struct Credentials {
    config: Option<std::path::PathBuf>,
    helper_path: Option<String>,
    timeout: std::time::Duration,
    warn: std::sync::Arc<dyn Fn(String) + Send + Sync>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for Credentials {
    fn default() -> Self {
        Self::none()
    }
}

impl Credentials {
    /// No configuration: every registry is anonymous.
    pub fn none() -> Self {
        Self::new(None, None)
    }

    /// Credentials from `config` (a `config.json`), helpers looked up in `helper_path` (a `PATH` value).
    pub fn new(config: Option<std::path::PathBuf>, helper_path: Option<String>) -> Self {
        Self {
            config,
            helper_path,
            timeout: HELPER_TIMEOUT,
            warn: std::sync::Arc::new(|_| {}),
        }
    }

    /// The same, sending warnings to `warn`.
    pub fn with_warnings(mut self, warn: impl Fn(String) + Send + Sync + 'static) -> Self {
        self.warn = std::sync::Arc::new(warn);
        self
    }

    /// The same, with another helper bound.
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The credentials of `registry` (a host or reference domain); runs a helper when one is configured.
    /// Blocking.
    pub fn lookup_blocking(&self, registry: &str) -> Option<RegistryAuth> {
        let path = self.config.as_ref()?;
        let text = std::fs::read_to_string(path).ok()?;
        match lookup(&text, registry) {
            Lookup::Found(a) => Some(a),
            Lookup::Anonymous => None,
            Lookup::Helper(h) => match run_helper(&h, registry, self.helper_path.as_deref(), self.timeout) {
                HelperOutcome::Found(a) => Some(a),
                HelperOutcome::NotFound => None,
                HelperOutcome::Failed(why) => {
                    (self.warn)(format!(
                        "{why}; pulling from {} anonymously",
                        normalize_registry(registry)
                    ));
                    None
                }
            },
        }
    }

    /// [`Credentials::lookup_blocking`] on a blocking thread.
    pub async fn lookup(&self, registry: &str) -> Option<RegistryAuth> {
        self.config.as_ref()?;
        let me = self.clone();
        let registry = registry.to_owned();
        tokio::task::spawn_blocking(move || me.lookup_blocking(&registry))
            .await
            .ok()
            .flatten()
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

    fn helper_dir(script: &str) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("docker-credential-fake");
        std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        d
    }

    fn run(script: &str, registry: &str) -> HelperOutcome {
        let d = helper_dir(script);
        let path = format!("/nonexistent:{}:/bin:/usr/bin", d.path().display());
        run_helper("fake", registry, Some(&path), std::time::Duration::from_secs(2))
    }

    #[test]
    fn helpers_answer_with_the_protocol() {
        let ok = r#"read s; [ "$1" = get ] || exit 3; printf '{"ServerURL":"%s","Username":"jo","Secret":"pw-%s"}' "$s" "$s""#;
        assert_eq!(
            run(ok, "registry.example:5000"),
            HelperOutcome::Found(RegistryAuth {
                username: Some("jo".into()),
                password: Some("pw-registry.example:5000".into()),
                identity_token: None,
            })
        );
        match run(ok, "docker.io") {
            HelperOutcome::Found(a) => {
                assert_eq!(a.password.as_deref(), Some("pw-https://index.docker.io/v1/"))
            }
            o => panic!("{o:?}"),
        }
        let token = r#"printf '{"Username":"<token>","Secret":"idt"}'"#;
        match run(token, "ghcr.io") {
            HelperOutcome::Found(a) => {
                assert_eq!((a.username, a.identity_token.as_deref()), (None, Some("idt")));
            }
            o => panic!("{o:?}"),
        }
        assert_eq!(
            run(
                "echo 'credentials not found in native keychain'; exit 1",
                "ghcr.io"
            ),
            HelperOutcome::NotFound
        );
        match run("echo 'secret-ish output' >&2; exit 2", "ghcr.io") {
            HelperOutcome::Failed(w) => {
                assert!(
                    w.contains("docker-credential-fake failed") && !w.contains("secret-ish"),
                    "{w}"
                );
            }
            o => panic!("{o:?}"),
        }
        match run("echo not json", "ghcr.io") {
            HelperOutcome::Failed(w) => assert!(w.contains("unreadable"), "{w}"),
            o => panic!("{o:?}"),
        }
        match run_helper("absent", "ghcr.io", Some("/nonexistent"), HELPER_TIMEOUT) {
            HelperOutcome::Failed(w) => {
                assert!(w.contains("docker-credential-absent is not on the PATH"), "{w}")
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn a_hanging_helper_is_killed_at_the_bound() {
        let d = helper_dir("exec sleep 30");
        let path = format!("{}:/bin:/usr/bin", d.path().display());
        let r = run_helper(
            "fake",
            "ghcr.io",
            Some(&path),
            std::time::Duration::from_millis(300),
        );
        // "did not answer" is the bound's verdict: a helper left to finish would end with no output instead
        assert!(
            matches!(&r, HelperOutcome::Failed(w) if w.contains("did not answer")),
            "{r:?}"
        );
    }

    #[test]
    fn credentials_run_the_configured_helper_and_warn_on_failure() {
        let d = helper_dir(
            r#"read s; case "$s" in ghcr.io) printf '{"Username":"u","Secret":"p"}';; *) exit 7;; esac"#,
        );
        let cfg = d.path().join("config.json");
        std::fs::write(&cfg, r#"{"credHelpers":{"ghcr.io":"fake","quay.io":"fake"}}"#).expect("write");
        let warnings = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let w = warnings.clone();
        let c = Credentials::new(Some(cfg), Some(format!("{}:/bin:/usr/bin", d.path().display())))
            .with_warnings(move |m| w.lock().expect("lock").push(m));
        assert_eq!(
            c.lookup_blocking("ghcr.io").and_then(|a| a.password).as_deref(),
            Some("p")
        );
        assert_eq!(c.lookup_blocking("quay.io"), None);
        assert_eq!(c.lookup_blocking("docker.io"), None, "no helper, no auths");
        let w = warnings.lock().expect("lock").clone();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("docker-credential-fake failed") && w[0].contains("quay.io"),
            "{w:?}"
        );
        assert!(format!("{c:?}").starts_with("Credentials"));
    }
}
