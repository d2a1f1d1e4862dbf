//! The secrets of a run, and what reaches a sandbox instead of them.
//!
//! Three sources, one rule — a secret's value stays on the host:
//! - the workflow *asks* (`sandbox.secrets`): a declaration names the secret, how it is delivered and the hosts
//!   it may be sent to, but grants nothing — a workflow comes with the repository it runs on;
//! - the operator *grants* (`--secret NAME` for a declared secret, `--secret NAME=HOST[,HOST…]` for any): the
//!   value is read from the operator's environment variable `NAME`;
//! - the provider keys of the model backends placed in a container (the claw runner's key, the agent CLI's
//!   `ANTHROPIC_API_KEY`), bound to their provider's endpoint, unless the operator sets
//!   `ITERION_SANDBOX_PROVIDER_KEYS=direct`.
//!
//! An `env` secret becomes a binding of the run's egress proxy: the sandbox sees a random placeholder, the
//! proxy swaps in the value only in requests to the bound hosts. A `file` secret is a read-only file in the
//! container, bound from a private host directory that is removed with the run.
use std::collections::BTreeMap;
use std::path::PathBuf;

use iterion_netproxy::SecretBinding;
use iterion_spec::model::{SecretDecl, Workflow};
use serde::Serialize;
use zeroize::Zeroizing;

/// Where file secrets appear in a container.
pub const SECRET_FILES_DIR: &str = "/run/iterion/secrets";

/// The operator's switch for provider keys: `proxy` (default) or `direct`.
pub const ENV_PROVIDER_KEYS: &str = "ITERION_SANDBOX_PROVIDER_KEYS";

/// PEM certificates the run's proxy trusts for upstream connections besides the Mozilla set and the host's
/// roots (a private CA of the operator's, a test server's).
pub const ENV_UPSTREAM_CA: &str = "ITERION_SANDBOX_TLS_UPSTREAM_CA";

/// Who decided a binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantSource {
    /// Declared by the workflow, granted by the operator's `--secret NAME`.
    Workflow,
    /// Bound by the operator's `--secret NAME=HOSTS`.
    Operator,
    /// A model backend's provider key.
    Provider,
}

/// How a granted secret reaches the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// A placeholder in the environment, substituted by the proxy.
    Env,
    /// A read-only file under [`SECRET_FILES_DIR`]; the variable holds its path.
    File,
}

/// One `--secret` flag as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFlag {
    /// The secret's name (its host variable).
    pub name: String,
    /// `None`: the workflow's declaration decides the hosts.
    pub hosts: Option<Vec<String>>,
    /// A host was written `http://HOST`: plain HTTP may carry the value too.
    pub plain_http: bool,
}

/// Parses `NAME` or `NAME=HOST[,HOST…]` (a host written `http://HOST` also allows plain HTTP).
///
/// # Errors
///
/// A message naming the flag's problem (never a value: the flag holds none).
pub fn parse_secret_flag(text: &str) -> Result<SecretFlag, String> {
    let (name, hosts) = match text.split_once('=') {
        None => (text, None),
        Some((n, h)) => (n, Some(h)),
    };
    iterion_spec::values::validate_secret_name(name)
        .map_err(|why| format!("--secret {text}: invalid secret name '{name}': {why}"))?;
    let Some(hosts) = hosts else {
        return Ok(SecretFlag {
            name: name.to_owned(),
            hosts: None,
            plain_http: false,
        });
    };
    let mut out = Vec::new();
    let mut plain_http = false;
    for h in hosts.split(',').map(str::trim) {
        let h = match h.strip_prefix("http://") {
            Some(rest) => {
                plain_http = true;
                rest.trim_end_matches('/')
            }
            None => h,
        };
        if h.is_empty() {
            return Err(format!(
                "--secret {text}: an empty host (want NAME=HOST[,HOST...])"
            ));
        }
        iterion_spec::values::validate_secret_host(h)
            .map_err(|why| format!("--secret {text}: invalid host '{h}': {why}"))?;
        out.push(h.to_owned());
    }
    Ok(SecretFlag {
        name: name.to_owned(),
        hosts: Some(out),
        plain_http,
    })
}

/// A model backend's key, placed in a container: the variable and the endpoint it authenticates to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProviderKey {
    /// The key's variable (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`, …).
    pub(crate) name: String,
    /// The provider's base URL.
    pub(crate) base_url: String,
}

/// A granted secret with its value.
pub(crate) struct Grant {
    pub(crate) name: String,
    pub(crate) hosts: Vec<String>,
    pub(crate) plain_http: bool,
    pub(crate) delivery: Delivery,
    pub(crate) source: GrantSource,
    value: Zeroizing<String>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("delivery", &self.delivery)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// What the run records of a binding (names and hosts, never a value or a placeholder).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretInfo {
    /// The secret's name.
    pub name: String,
    /// The hosts its value may be sent to (empty for a file).
    pub hosts: Vec<String>,
    /// `env` or `file`.
    pub delivery: Delivery,
    /// Who bound it.
    pub source: GrantSource,
    /// Plain HTTP may carry it too.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub plain_http: bool,
}

/// The run's secrets: what was granted, and what the workflow asked for without a grant.
#[derive(Debug, Default)]
pub(crate) struct Secrets {
    pub(crate) grants: Vec<Grant>,
    /// Declared by the workflow, not granted by the operator.
    pub(crate) ungranted: Vec<String>,
}

impl Secrets {
    /// Whether a proxy binding exists (an `env` grant).
    pub(crate) fn has_bindings(&self) -> bool {
        self.grants.iter().any(|g| g.delivery == Delivery::Env)
    }

    /// Whether a file secret exists.
    pub(crate) fn has_files(&self) -> bool {
        self.grants.iter().any(|g| g.delivery == Delivery::File)
    }

    /// Names and hosts of every grant (for events and the doctor).
    pub(crate) fn infos(&self) -> Vec<SecretInfo> {
        self.grants
            .iter()
            .map(|g| SecretInfo {
                name: g.name.clone(),
                hosts: g.hosts.clone(),
                delivery: g.delivery,
                source: g.source,
                plain_http: g.plain_http,
            })
            .collect()
    }

    /// The proxy bindings of the `env` grants, each with a fresh placeholder.
    pub(crate) fn bindings(&self) -> Vec<SecretBinding> {
        self.grants
            .iter()
            .filter(|g| g.delivery == Delivery::Env)
            .map(|g| SecretBinding::new(&g.name, g.value.as_str(), &g.hosts).plain_http(g.plain_http))
            .collect()
    }

    /// Writes each file secret into a new private directory (0700, files 0444: the container's user reads them
    /// through the bind, nobody else on the host reaches them). `None` without file secrets.
    pub(crate) fn write_files(
        &self,
        host_env: &BTreeMap<String, String>,
    ) -> Result<Option<SecretDir>, String> {
        if !self.has_files() {
            return Ok(None);
        }
        use std::io::Write as _;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let base = host_env
            .get("TMPDIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        sweep_stale(&base);
        let dir = base.join(format!(
            "{SECRET_DIR_PREFIX}{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| {
            format!(
                "cannot create a private directory for file secrets ({}): {e}",
                dir.display()
            )
        })?;
        let guard = SecretDir { dir };
        for g in self.grants.iter().filter(|g| g.delivery == Delivery::File) {
            let path = guard.dir.join(&g.name);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o444)
                .custom_flags(libc_nofollow())
                .open(&path)
                .map_err(|e| format!("cannot write the file secret {}: {e}", g.name))?;
            f.write_all(g.value.as_bytes())
                .map_err(|e| format!("cannot write the file secret {}: {e}", g.name))?;
        }
        Ok(Some(guard))
    }
}

/// The name prefix of a run's file-secret directory: `iterion-secrets-<pid>-<random>`.
const SECRET_DIR_PREFIX: &str = "iterion-secrets-";

/// Removes the file-secret directories in `base` that a process of this user left when it died without its
/// cleanup (SIGKILL, a crash): the pid in the name answers no signal and the directory is ours. A live pid (the
/// owner, or a process that reused its number) keeps its directory.
fn sweep_stale(base: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let me = nix::unistd::geteuid().as_raw();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(SECRET_DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me || pid <= 0 {
            continue;
        }
        let dead = matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        );
        if dead {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn libc_nofollow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

/// The private host directory of a run's file secrets, removed when dropped.
#[derive(Debug)]
pub(crate) struct SecretDir {
    dir: PathBuf,
}

impl SecretDir {
    /// The host path of secret `name`'s file.
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for SecretDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The workflow's `sandbox.secrets` declarations.
pub(crate) fn declared(workflow: &Workflow) -> &[SecretDecl] {
    workflow
        .sandbox
        .as_ref()
        .and_then(|s| s.secrets.as_deref())
        .unwrap_or_default()
}

/// The host (and port) a key for `base_url` may be sent to, and whether that is plain HTTP.
fn endpoint_of(base_url: &str) -> Option<(String, bool)> {
    let (scheme, rest) = base_url.split_once("://")?;
    let plain = match scheme.to_ascii_lowercase().as_str() {
        "http" => true,
        "https" => false,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    if authority.is_empty() {
        return None;
    }
    let has_port = match authority.rfind(':') {
        Some(i) => !authority[i..].contains(']'),
        None => false,
    };
    let host = if has_port {
        authority.to_owned()
    } else if plain {
        format!("{authority}:80")
    } else {
        format!("{authority}:443")
    };
    Some((host, plain))
}

/// Resolves the run's grants: the operator's flags against the workflow's declarations, then the provider keys
/// (a name the operator or the workflow already binds keeps that binding).
///
/// # Errors
///
/// Every problem, one per line: a flag naming an undeclared secret without hosts, a variable that is not set.
pub(crate) fn resolve(
    decls: &[SecretDecl],
    flags: &[SecretFlag],
    providers: &[ProviderKey],
    host_env: &BTreeMap<String, String>,
) -> Result<Secrets, Vec<String>> {
    let mut out = Secrets::default();
    let mut problems = Vec::new();
    let value_of = |name: &str, problems: &mut Vec<String>| match host_env.get(name).filter(|v| !v.is_empty())
    {
        Some(v) => Some(Zeroizing::new(v.clone())),
        None => {
            problems.push(format!(
                "--secret {name}: the environment variable {name} is not set (the value is read from it)"
            ));
            None
        }
    };
    for f in flags {
        if out.grants.iter().any(|g| g.name == f.name) {
            problems.push(format!("--secret {}: given twice", f.name));
            continue;
        }
        let decl = decls.iter().find(|d| d.name.value == f.name);
        let file = decl
            .and_then(|d| d.delivery.as_ref())
            .is_some_and(|d| d.value == "file");
        let (hosts, plain_http, source) = match (&f.hosts, decl) {
            (Some(h), _) if file => {
                let _ = h;
                problems.push(format!(
                    "--secret {}: the workflow declares it as a file, which takes no hosts (pass --secret {})",
                    f.name, f.name
                ));
                continue;
            }
            (Some(h), _) => (h.clone(), f.plain_http, GrantSource::Operator),
            (None, Some(d)) => (
                d.hosts.iter().flatten().map(|h| h.value.clone()).collect(),
                d.plain_http.unwrap_or(false),
                GrantSource::Workflow,
            ),
            (None, None) => {
                problems.push(format!(
                    "--secret {}: the workflow declares no secret {}; bind it to the hosts that may receive it: --secret {}=HOST[,HOST...]",
                    f.name, f.name, f.name
                ));
                continue;
            }
        };
        let Some(value) = value_of(&f.name, &mut problems) else {
            continue;
        };
        out.grants.push(Grant {
            name: f.name.clone(),
            hosts,
            plain_http,
            delivery: if file { Delivery::File } else { Delivery::Env },
            source,
            value,
        });
    }
    for d in decls {
        if !out.grants.iter().any(|g| g.name == d.name.value) {
            out.ungranted.push(d.name.value.clone());
        }
    }
    for p in providers {
        let Some(value) = host_env.get(&p.name).filter(|v| !v.is_empty()) else {
            continue;
        };
        let Some((host, plain)) = endpoint_of(&p.base_url) else {
            continue;
        };
        match out.grants.iter_mut().find(|g| g.name == p.name) {
            Some(g) if g.source == GrantSource::Provider => {
                if !g.hosts.contains(&host) {
                    g.hosts.push(host);
                }
                g.plain_http |= plain;
            }
            Some(_) => {}
            None => out.grants.push(Grant {
                name: p.name.clone(),
                hosts: vec![host],
                plain_http: plain,
                delivery: Delivery::Env,
                source: GrantSource::Provider,
                value: Zeroizing::new(value.clone()),
            }),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// The provider keys of the model nodes of `workflow` (claw and the agent CLI), unless the operator keeps keys
/// direct (`ITERION_SANDBOX_PROVIDER_KEYS=direct`).
pub(crate) fn provider_keys(workflow: &Workflow, host_env: &BTreeMap<String, String>) -> Vec<ProviderKey> {
    if provider_keys_direct(host_env) {
        return Vec::new();
    }
    let mut out: Vec<ProviderKey> = Vec::new();
    let mut push = |name: &str, base_url: String| {
        if !out.iter().any(|p| p.name == name && p.base_url == base_url) {
            out.push(ProviderKey {
                name: name.to_owned(),
                base_url,
            });
        }
    };
    for node in workflow.nodes.iter().filter(|n| workflow.calls_model(n)) {
        match crate::exec::check::node_backend(workflow, node, host_env)
            .0
            .as_str()
        {
            "claw" => {
                if let Some((key, base)) = crate::exec::check::claw_key(node, host_env) {
                    push(key, base);
                }
            }
            "claude_code" => {
                let base = host_env
                    .get("ANTHROPIC_BASE_URL")
                    .filter(|u| !u.is_empty())
                    .cloned()
                    .unwrap_or_else(|| "https://api.anthropic.com".to_owned());
                for key in crate::exec::agent::CLAUDE_KEYS {
                    push(key, base.clone());
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether the operator keeps provider keys in the sandbox (`ITERION_SANDBOX_PROVIDER_KEYS=direct`).
pub(crate) fn provider_keys_direct(host_env: &BTreeMap<String, String>) -> bool {
    host_env
        .get(ENV_PROVIDER_KEYS)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("direct"))
}

/// The PEM text of [`ENV_UPSTREAM_CA`], when set.
///
/// # Errors
///
/// The file cannot be read, is over 1 MiB or holds no certificate.
pub(crate) fn upstream_ca(host_env: &BTreeMap<String, String>) -> Result<Option<String>, String> {
    let Some(path) = host_env.get(ENV_UPSTREAM_CA).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    // an operator's CA file is often a link (`/etc/ssl/certs/…`): its target is read, bounded, never a FIFO
    let real =
        std::fs::canonicalize(path).map_err(|e| format!("{ENV_UPSTREAM_CA}: cannot read {path}: {e}"))?;
    let text = iterion_boundary::fs::read_file(&real, 1 << 20)
        .map_err(|e| format!("{ENV_UPSTREAM_CA}: cannot read {path}: {e}"))?;
    let text = String::from_utf8(text).map_err(|_| format!("{ENV_UPSTREAM_CA}: {path} is not PEM text"))?;
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(format!("{ENV_UPSTREAM_CA}: {path} holds no PEM certificate"));
    }
    Ok(Some(text))
}

/// A binding a run of `workflow` would make, as the doctor reports it before any run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedSecret {
    /// Names, hosts, delivery, source.
    #[serde(flatten)]
    pub info: SecretInfo,
    /// Whether the host variable holding the value is set (never the value).
    pub value_set: bool,
}

/// The secrets a run of `workflow` would bind with the operator granting every one it declares: the
/// declarations, then the provider keys of its model nodes (those whose key is set).
pub fn planned(workflow: &Workflow, host_env: &BTreeMap<String, String>) -> Vec<PlannedSecret> {
    let set = |n: &str| host_env.get(n).is_some_and(|v| !v.is_empty());
    let mut out: Vec<PlannedSecret> = declared(workflow)
        .iter()
        .map(|d| {
            let file = d.delivery.as_ref().is_some_and(|x| x.value == "file");
            PlannedSecret {
                info: SecretInfo {
                    name: d.name.value.clone(),
                    hosts: d.hosts.iter().flatten().map(|h| h.value.clone()).collect(),
                    delivery: if file { Delivery::File } else { Delivery::Env },
                    source: GrantSource::Workflow,
                    plain_http: d.plain_http.unwrap_or(false),
                },
                value_set: set(&d.name.value),
            }
        })
        .collect();
    let providers = provider_keys(workflow, host_env);
    if let Ok(s) = resolve(&[], &[], &providers, host_env) {
        for g in s.grants {
            if !out.iter().any(|p| p.info.name == g.name) {
                out.push(PlannedSecret {
                    info: SecretInfo {
                        name: g.name.clone(),
                        hosts: g.hosts.clone(),
                        delivery: g.delivery,
                        source: g.source,
                        plain_http: g.plain_http,
                    },
                    value_set: true,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn flags_parse_names_hosts_and_plain_http() {
        let f = parse_secret_flag("GH_TOKEN").unwrap();
        assert_eq!(
            (f.name.as_str(), f.hosts, f.plain_http),
            ("GH_TOKEN", None, false)
        );
        let f = parse_secret_flag("GH_TOKEN=api.github.com,http://127.0.0.1:8080").unwrap();
        assert_eq!(
            f.hosts.unwrap(),
            vec!["api.github.com".to_owned(), "127.0.0.1:8080".to_owned()]
        );
        assert!(f.plain_http);
        for bad in [
            "1X",
            "ITERION_KEY",
            "HTTPS_PROXY",
            "X=",
            "X=!evil.example",
            "X=10.0.0.0/8",
            "PATH",
        ] {
            assert!(parse_secret_flag(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_declaration_is_granted_only_by_the_operator() {
        let decl = SecretDecl {
            name: iterion_spec::model::Spanned::new("GH_TOKEN".into(), Default::default()),
            hosts: Some(vec![iterion_spec::model::Spanned::new(
                "api.github.com".into(),
                Default::default(),
            )]),
            delivery: None,
            plain_http: None,
        };
        let host = env(&[("GH_TOKEN", "ghp_real")]);
        let s = resolve(std::slice::from_ref(&decl), &[], &[], &host).unwrap();
        assert!(s.grants.is_empty());
        assert_eq!(s.ungranted, vec!["GH_TOKEN".to_owned()]);
        let flag = parse_secret_flag("GH_TOKEN").unwrap();
        let s = resolve(std::slice::from_ref(&decl), &[flag], &[], &host).unwrap();
        assert_eq!(s.grants[0].hosts, vec!["api.github.com".to_owned()]);
        assert_eq!(s.grants[0].source, GrantSource::Workflow);
        // an undeclared name needs the operator's hosts; a missing variable is named, never valued
        let e = resolve(&[], &[parse_secret_flag("NPM_TOKEN").unwrap()], &[], &host).unwrap_err();
        assert!(e[0].contains("declares no secret NPM_TOKEN"), "{e:?}");
        let e = resolve(
            &[],
            &[parse_secret_flag("X_TOKEN=a.example").unwrap()],
            &[],
            &host,
        )
        .unwrap_err();
        assert!(e[0].contains("X_TOKEN is not set"), "{e:?}");
    }

    #[test]
    fn a_dead_run_s_file_secrets_are_swept_and_a_live_one_s_kept() {
        let base = tempfile::tempdir().unwrap();
        let dead = base
            .path()
            .join(format!("{SECRET_DIR_PREFIX}{}-00", i32::MAX - 1));
        let live = base
            .path()
            .join(format!("{SECRET_DIR_PREFIX}{}-00", std::process::id()));
        let other = base.path().join("iterion-secrets-notapid");
        for d in [&dead, &live, &other] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("K"), "v").unwrap();
        }
        sweep_stale(base.path());
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
    }

    #[test]
    fn provider_keys_bind_to_their_endpoint() {
        let host = env(&[("ANTHROPIC_API_KEY", "sk-real")]);
        let p = |base: &str| ProviderKey {
            name: "ANTHROPIC_API_KEY".into(),
            base_url: base.into(),
        };
        let s = resolve(
            &[],
            &[],
            &[p("http://127.0.0.1:8080/v1"), p("https://api.anthropic.com")],
            &host,
        )
        .unwrap();
        assert_eq!(s.grants.len(), 1);
        assert_eq!(
            s.grants[0].hosts,
            vec!["127.0.0.1:8080".to_owned(), "api.anthropic.com:443".to_owned()]
        );
        assert!(s.grants[0].plain_http);
        // no key set: nothing to bind
        assert!(
            resolve(&[], &[], &[p("https://x.example")], &env(&[]))
                .unwrap()
                .grants
                .is_empty()
        );
    }
}
