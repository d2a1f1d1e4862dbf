//! Cluster access: how this process reaches the Kubernetes API (07 §2), and the two checks the doctor runs
//! with it — `k8s_context` (06 §4.11) and `k8s_rbac` (06 §4.12).
//!
//! [`ClusterAccess::discover`] decides in-cluster versus off-cluster from an injected environment map (never
//! the process environment) and prepares the client configuration without any network traffic. It never
//! fails: a configuration that cannot be built is kept as the [`Error`] the checks report.
//! [`check_context`] and [`check_rbac`] are the only functions that talk to the API server; each request is
//! bounded by the caller's timeout and the permission reviews run concurrently.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use iterion_driver::fmt_duration;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::config::{AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};
use kube::{Client, Config};

/// The service-account directory mounted into every pod that has `automountServiceAccountToken`.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Overrides the namespace of the service account or of the kubeconfig context (07 §2.3).
pub const NAMESPACE_VAR: &str = "ITERION_SANDBOX_K8S_NAMESPACE";

/// The oldest API server the driver supports: exec needs the `v5.channel.k8s.io` subprotocol (07 §1).
pub const MIN_SERVER_VERSION: ServerVersion = ServerVersion { major: 1, minor: 30 };

/// Hint of the `k8s_context` row "API server older than 1.30" (06 §4.11).
pub const TOO_OLD_HINT: &str = "exec needs the v5 stream protocol (Kubernetes 1.30 or newer)";

/// Hint of the off-cluster `k8s_context` warn row (06 §4.11).
pub const OFF_CLUSTER_HINT: &str = "this host is not a runner; cluster access not verified";

/// Hint of the `k8s_rbac` row "a missing permission" (06 §4.12).
pub const RBAC_HINT: &str = "apply deploy/kubernetes/role.yaml and rolebinding.yaml";

/// Hint of `k8s_rbac` when some reviews could not be performed at all (no permission was reported missing).
pub const RBAC_UNVERIFIED_HINT: &str =
    "the API server did not answer every SelfSubjectAccessReview; check its health and retry";

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the cluster could not be reached or checked. Foreign (kube) errors are translated into text at this
/// boundary; no kube type appears here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// In-cluster: a service variable is missing (07 §2.2).
    #[error("not running in a kubernetes pod ({name} is not set)")]
    ServiceEnvMissing {
        /// `KUBERNETES_SERVICE_HOST` or `KUBERNETES_SERVICE_PORT`.
        name: &'static str,
    },
    /// In-cluster: the service-account token cannot be read (07 §2.2).
    #[error(
        "no service-account token at {} (is automountServiceAccountToken disabled on the runner?)",
        path.display()
    )]
    ServiceAccountToken {
        /// The token file that was looked for.
        path: PathBuf,
    },
    /// In-cluster: the service-account CA cannot be read (07 §2.2).
    #[error("no service-account CA at {}", path.display())]
    ServiceAccountCa {
        /// The CA file that was looked for.
        path: PathBuf,
    },
    /// In-cluster: the namespace file is unreadable or empty and no override is set (07 §2.2).
    #[error("empty namespace at {}", path.display())]
    EmptyNamespace {
        /// The namespace file that was looked for.
        path: PathBuf,
    },
    /// Off-cluster: no kubeconfig file exists where one was looked for.
    #[error("no kubeconfig (looked for {})", display_paths(searched))]
    NoKubeconfig {
        /// Every path looked at, in order; empty when neither `KUBECONFIG` nor `HOME` is set.
        searched: Vec<PathBuf>,
    },
    /// Off-cluster: a kubeconfig file exists but cannot be read, parsed or merged.
    #[error("invalid kubeconfig {}: {detail}", path.display())]
    InvalidKubeconfig {
        /// The offending file.
        path: PathBuf,
        /// The parser's explanation.
        detail: String,
    },
    /// Off-cluster: the kubeconfig names no current context.
    #[error("the kubeconfig sets no current-context")]
    NoCurrentContext,
    /// Off-cluster: the current context authenticates through a credential plugin, which iterion never runs
    /// (it spawns no process, 07 §1).
    #[error(
        "context {context} authenticates through the {plugin} credential plugin, which iterion does not run"
    )]
    CredentialPlugin {
        /// The current context.
        context: String,
        /// The plugin (exec command or auth-provider name).
        plugin: String,
    },
    /// The client configuration cannot be built from the kubeconfig or the service-account files; the text
    /// is the client's (07 §2.2, last row).
    #[error("cannot configure the kubernetes client: {detail}")]
    ClientConfig {
        /// The client's explanation.
        detail: String,
    },
    /// A request got no answer within the bound (06 §3.3).
    #[error("{request}: no answer within {}", fmt_duration(*after))]
    Timeout {
        /// The request, e.g. `GET /version`.
        request: String,
        /// The bound that elapsed.
        after: Duration,
    },
    /// A request failed before an HTTP answer (connection refused, TLS, DNS, …).
    #[error("{request}: {detail}")]
    Transport {
        /// The request, e.g. `GET /version`.
        request: String,
        /// The transport error chain.
        detail: String,
    },
    /// The API server answered with an error status.
    #[error("{request}: the API server answered {code}: {message}")]
    Api {
        /// The request, e.g. `GET /version`.
        request: String,
        /// The HTTP status code.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// The API server answered something that is not the expected object.
    #[error("{request}: unexpected answer: {detail}")]
    InvalidResponse {
        /// The request, e.g. `GET /version`.
        request: String,
        /// What was wrong with it.
        detail: String,
    },
    /// `GET /version` answered without a recognisable major/minor version.
    #[error(
        "GET /version: unrecognised version (major {major:?}, minor {minor:?}, gitVersion {git_version:?})"
    )]
    UnrecognisedVersion {
        /// The `major` field as served.
        major: String,
        /// The `minor` field as served.
        minor: String,
        /// The `gitVersion` field as served.
        git_version: String,
    },
}

fn display_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "nothing: neither KUBECONFIG nor HOME is set".to_string();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where this process runs relative to the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// `KUBERNETES_SERVICE_HOST` is set: a runner pod using its service account.
    InCluster,
    /// Anywhere else: the kubeconfig's current context.
    OffCluster,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Location::InCluster => "in-cluster",
            Location::OffCluster => "off-cluster",
        })
    }
}

/// A check status, in the doctor's vocabulary (06 §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Verified.
    Pass,
    /// A risk, or something that cannot be verified from here.
    Warn,
    /// The run would fail.
    Fail,
    /// Not applicable (the message says why).
    Skip,
}

/// What discovery reads: the environment map handed down by the CLI and the service-account directory.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DiscoveryInputs {
    /// The process environment as read once by the CLI.
    pub env: BTreeMap<String, String>,
    /// The service-account directory; [`SERVICE_ACCOUNT_DIR`] unless a test injects another.
    pub service_account_dir: PathBuf,
}

impl DiscoveryInputs {
    /// Inputs over `env` with the standard service-account directory.
    pub fn new(env: BTreeMap<String, String>) -> Self {
        DiscoveryInputs {
            env,
            service_account_dir: PathBuf::from(SERVICE_ACCOUNT_DIR),
        }
    }

    /// Replaces the service-account directory (tests).
    pub fn with_service_account_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.service_account_dir = dir.into();
        self
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.env
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }
}

/// How to reach the API server, as discovered; holds the client configuration or the reason there is none.
#[derive(Clone)]
pub struct ClusterAccess {
    location: Location,
    context: Option<String>,
    server: Option<String>,
    namespace: Option<String>,
    config: Result<Config>,
}

impl fmt::Debug for ClusterAccess {
    // The kube configuration is left out: it may carry credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterAccess")
            .field("location", &self.location)
            .field("context", &self.context)
            .field("server", &self.server)
            .field("namespace", &self.namespace)
            .field("error", &self.config.as_ref().err())
            .finish()
    }
}

impl ClusterAccess {
    /// Discovers cluster access (07 §2): in-cluster when `KUBERNETES_SERVICE_HOST` is non-empty (service
    /// variables and service-account files, checked in the order of 07 §2.2), otherwise off-cluster through
    /// the kubeconfig (`KUBECONFIG`, a path list whose missing entries are ignored, or `$HOME/.kube/config`)
    /// and its current context. Reads only local files; no network traffic.
    pub fn discover(inputs: &DiscoveryInputs) -> ClusterAccess {
        if inputs.var("KUBERNETES_SERVICE_HOST").is_some() {
            in_cluster(inputs)
        } else {
            off_cluster(inputs)
        }
    }

    /// In-cluster or off-cluster.
    pub fn location(&self) -> Location {
        self.location
    }

    /// The kubeconfig context in use (off-cluster, when one was found).
    pub fn context_name(&self) -> Option<&str> {
        self.context.as_deref()
    }

    /// The API server URL, when known.
    pub fn server(&self) -> Option<&str> {
        self.server.as_deref()
    }

    /// The namespace sandbox pods would use: `ITERION_SANDBOX_K8S_NAMESPACE`, else the service account's or
    /// the context's (`default` when the context names none).
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// Why the API cannot be used, when discovery failed.
    pub fn error(&self) -> Option<&Error> {
        self.config.as_ref().err()
    }

    /// A client for the driver: connections bounded by `connect`, no read timeout (watches and exec sessions
    /// stay open as long as they need; the driver bounds each call itself). Needs a tokio runtime.
    pub(crate) fn driver_client(&self, connect: Duration) -> Result<Client> {
        let mut config = self.config.clone()?;
        config.connect_timeout = Some(connect);
        config.read_timeout = None;
        config.write_timeout = None;
        Client::try_from(config).map_err(|e| Error::ClientConfig {
            detail: error_chain(&e),
        })
    }

    /// A client for bounded requests. Needs a tokio runtime (the client spawns its connection tasks).
    fn client(&self) -> Result<Client> {
        let mut config = self.config.clone()?;
        // Every request is bounded as a whole by `bounded` (connect, TLS, write, answer); kube's own
        // timeouts would only race with it and blur the error.
        config.connect_timeout = None;
        config.read_timeout = None;
        config.write_timeout = None;
        // One request, one answer: a retry loop would hide what the server said within the bound.
        config.default_retry = false;
        Client::try_from(config).map_err(|e| Error::ClientConfig {
            detail: error_chain(&e),
        })
    }
}

fn in_cluster(inputs: &DiscoveryInputs) -> ClusterAccess {
    let override_ns = inputs.var(NAMESPACE_VAR).map(str::to_string);
    let mut access = ClusterAccess {
        location: Location::InCluster,
        context: None,
        server: None,
        namespace: override_ns.clone(),
        config: Err(Error::ServiceEnvMissing {
            name: "KUBERNETES_SERVICE_HOST",
        }),
    };
    let Some(host) = inputs.var("KUBERNETES_SERVICE_HOST") else {
        return access;
    };
    let Some(port) = inputs.var("KUBERNETES_SERVICE_PORT") else {
        access.config = Err(Error::ServiceEnvMissing {
            name: "KUBERNETES_SERVICE_PORT",
        });
        return access;
    };
    let host = host.trim();
    let server = if host.contains(':') && !host.starts_with('[') {
        format!("https://[{host}]:{}", port.trim())
    } else {
        format!("https://{host}:{}", port.trim())
    };
    access.server = Some(server.clone());

    let dir = &inputs.service_account_dir;
    let token = dir.join("token");
    if !readable(&token) {
        access.config = Err(Error::ServiceAccountToken { path: token });
        return access;
    }
    let ca = dir.join("ca.crt");
    if !readable(&ca) {
        access.config = Err(Error::ServiceAccountCa { path: ca });
        return access;
    }
    let namespace = match override_ns {
        Some(ns) => ns,
        None => {
            let ns_file = dir.join("namespace");
            match std::fs::read_to_string(&ns_file) {
                Ok(ns) if !ns.trim().is_empty() => ns.trim().to_string(),
                _ => {
                    access.config = Err(Error::EmptyNamespace { path: ns_file });
                    return access;
                }
            }
        }
    };
    access.namespace = Some(namespace.clone());

    // The service account expressed as a one-context kubeconfig, so that kube loads the CA bundle and
    // re-reads the token file when it rotates (07 §2.2).
    let kubeconfig = Kubeconfig {
        clusters: vec![NamedCluster {
            name: "in-cluster".into(),
            cluster: Some(Cluster {
                server: Some(server),
                certificate_authority: Some(ca.display().to_string()),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "service-account".into(),
            auth_info: Some(AuthInfo {
                token_file: Some(token.display().to_string()),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: "in-cluster".into(),
            context: Some(Context {
                cluster: "in-cluster".into(),
                user: Some("service-account".into()),
                namespace: Some(namespace),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some("in-cluster".into()),
        ..Kubeconfig::default()
    };
    access.config = config_from(kubeconfig, None).and_then(|mut c| {
        if c.root_cert.as_ref().is_none_or(Vec::is_empty) {
            return Err(Error::ClientConfig {
                detail: format!("no PEM certificate in {}", ca.display()),
            });
        }
        c.root_cert_file = Some(ca);
        Ok(c)
    });
    access
}

fn off_cluster(inputs: &DiscoveryInputs) -> ClusterAccess {
    let override_ns = inputs.var(NAMESPACE_VAR).map(str::to_string);
    let mut access = ClusterAccess {
        location: Location::OffCluster,
        context: None,
        server: None,
        namespace: override_ns.clone(),
        config: Err(Error::NoKubeconfig { searched: Vec::new() }),
    };
    let kubeconfig = match load_kubeconfig(inputs) {
        Ok(k) => k,
        Err(e) => {
            access.config = Err(e);
            return access;
        }
    };
    let Some(current) = kubeconfig.current_context.clone().filter(|c| !c.is_empty()) else {
        access.config = Err(Error::NoCurrentContext);
        return access;
    };
    access.context = Some(current.clone());
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.clone());
    if let Some(context) = &context {
        access.server = kubeconfig
            .clusters
            .iter()
            .find(|c| c.name == context.cluster)
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.server.clone());
        let user = context.user.as_ref().and_then(|u| {
            kubeconfig
                .auth_infos
                .iter()
                .find(|a| &a.name == u)
                .and_then(|a| a.auth_info.as_ref())
        });
        if let Some(plugin) = user.and_then(credential_plugin) {
            access.config = Err(Error::CredentialPlugin {
                context: current,
                plugin,
            });
            return access;
        }
    }
    // kube fills the proxy from the process's HTTPS_PROXY; only the kubeconfig's own proxy-url counts here.
    let proxy = context
        .as_ref()
        .and_then(|ctx| kubeconfig.clusters.iter().find(|c| c.name == ctx.cluster))
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.proxy_url.clone())
        .filter(|p| !p.is_empty());
    access.config = config_from(kubeconfig, proxy);
    if let Ok(config) = &access.config {
        access.namespace = Some(override_ns.unwrap_or_else(|| config.default_namespace.clone()));
    }
    access
}

fn credential_plugin(user: &AuthInfo) -> Option<String> {
    if let Some(exec) = &user.exec {
        return Some(format!(
            "exec ({})",
            exec.command.as_deref().unwrap_or("no command")
        ));
    }
    user.auth_provider
        .as_ref()
        .map(|p| format!("auth-provider ({})", p.name))
}

/// The kubeconfig files of `KUBECONFIG` (missing entries skipped, like kubectl) or `$HOME/.kube/config`,
/// merged by kube's rules (the first file to set a value wins).
fn load_kubeconfig(inputs: &DiscoveryInputs) -> Result<Kubeconfig> {
    let candidates: Vec<PathBuf> = match inputs.var("KUBECONFIG") {
        Some(list) => std::env::split_paths(list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect(),
        None => inputs
            .var("HOME")
            .map(|home| Path::new(home).join(".kube").join("config"))
            .into_iter()
            .collect(),
    };
    let mut merged: Option<Kubeconfig> = None;
    for path in &candidates {
        if !path.exists() {
            continue;
        }
        let invalid = |e: &dyn std::error::Error| Error::InvalidKubeconfig {
            path: path.clone(),
            detail: error_chain(e),
        };
        let next = Kubeconfig::read_from(path).map_err(|e| invalid(&e))?;
        merged = Some(match merged {
            None => next,
            Some(m) => m.merge(next).map_err(|e| invalid(&e))?,
        });
    }
    merged.ok_or(Error::NoKubeconfig { searched: candidates })
}

fn config_from(kubeconfig: Kubeconfig, proxy: Option<String>) -> Result<Config> {
    let mut config = Config::try_from(kubeconfig).map_err(|e| Error::ClientConfig {
        detail: error_chain(&e),
    })?;
    config.proxy_url = match proxy {
        None => None,
        Some(p) => Some(p.parse::<http::Uri>().map_err(|e| Error::ClientConfig {
            detail: format!("invalid proxy-url {p:?}: {e}"),
        })?),
    };
    Ok(config)
}

fn readable(path: &Path) -> bool {
    std::fs::File::open(path).is_ok_and(|f| f.metadata().is_ok_and(|m| m.is_file()))
}

/// The error and its sources joined with `: `, skipping a level whose text already contains the next one
/// (kube's errors repeat their source).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut texts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        texts.push(s.to_string());
        cur = s.source();
    }
    let mut kept: Vec<&str> = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        let repeats_next = texts
            .get(i + 1)
            .is_some_and(|n| !n.is_empty() && t.contains(n.as_str()));
        if !repeats_next && !t.is_empty() {
            kept.push(t);
        }
    }
    kept.join(": ")
}

/// Translates a kube error for `request`.
fn api_error(request: &str, e: kube::Error) -> Error {
    match e {
        kube::Error::Api(status) => Error::Api {
            request: request.to_string(),
            code: status.code,
            message: if status.message.is_empty() {
                status.reason.clone()
            } else {
                status.message.clone()
            },
        },
        kube::Error::SerdeError(e) => Error::InvalidResponse {
            request: request.to_string(),
            detail: e.to_string(),
        },
        other => Error::Transport {
            request: request.to_string(),
            detail: error_chain(&other),
        },
    }
}

/// Runs `fut` for `request` within `timeout`.
async fn bounded<T>(
    request: &str,
    timeout: Duration,
    fut: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(api_error(request, e)),
        Err(_) => Err(Error::Timeout {
            request: request.to_string(),
            after: timeout,
        }),
    }
}

/// A Kubernetes `major.minor` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl ServerVersion {
    /// Parses the `/version` fields. Tolerates provider suffixes (`"30+"`) and falls back on `gitVersion`
    /// (`v1.31.2-gke.1`) when `major`/`minor` are empty or unparsable.
    pub fn parse(major: &str, minor: &str, git_version: &str) -> Option<ServerVersion> {
        if let (Some(major), Some(minor)) = (leading_number(major), leading_number(minor)) {
            return Some(ServerVersion { major, minor });
        }
        let git = git_version.trim().strip_prefix('v').unwrap_or(git_version.trim());
        let mut parts = git.split('.');
        let major = leading_number(parts.next()?)?;
        let minor = leading_number(parts.next()?)?;
        Some(ServerVersion { major, minor })
    }
}

fn leading_number(s: &str) -> Option<u32> {
    let s = s.trim();
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What `k8s_context` found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextOutcome {
    /// `GET /version` answered with a supported version.
    Reachable {
        /// The server's version.
        version: ServerVersion,
    },
    /// `GET /version` answered with a version older than [`MIN_SERVER_VERSION`].
    TooOld {
        /// The server's version.
        version: ServerVersion,
    },
    /// No usable configuration: service-account files, kubeconfig, context or client (discovery).
    Unavailable(Error),
    /// The configuration exists but the API server did not answer `GET /version` usefully.
    Unreachable(Error),
}

/// The `k8s_context` check (06 §4.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextReport {
    /// In-cluster or off-cluster.
    pub location: Location,
    /// The kubeconfig context (off-cluster).
    pub context: Option<String>,
    /// The API server URL, when known.
    pub server: Option<String>,
    /// The namespace in use, when known.
    pub namespace: Option<String>,
    /// What was found.
    pub outcome: ContextOutcome,
}

impl ContextReport {
    /// The row of 06 §4.11: pass; fail (in-cluster failure, or a server older than 1.30); warn (off-cluster
    /// without kubeconfig or with an unreachable context).
    pub fn status(&self) -> Status {
        match (&self.outcome, self.location) {
            (ContextOutcome::Reachable { .. }, _) => Status::Pass,
            (ContextOutcome::TooOld { .. }, _) => Status::Fail,
            (_, Location::InCluster) => Status::Fail,
            (_, Location::OffCluster) => Status::Warn,
        }
    }

    /// Whether `k8s_rbac` should run (06 §4.12: "when `k8s_context` passed").
    pub fn passed(&self) -> bool {
        self.status() == Status::Pass
    }

    /// The one-line message of the check.
    pub fn message(&self) -> String {
        let place = match (self.location, &self.context) {
            (Location::OffCluster, Some(ctx)) => format!("off-cluster, context {ctx}"),
            (loc, _) => loc.to_string(),
        };
        let server = self.server.as_deref().unwrap_or("(unknown server)");
        let ns = self.namespace.as_deref().unwrap_or("default");
        match (&self.outcome, self.location) {
            (ContextOutcome::Reachable { version }, _) => {
                format!("{place}: API server {server} answered, Kubernetes {version} (namespace {ns})")
            }
            (ContextOutcome::TooOld { version }, _) => format!(
                "{place}: API server {server} runs Kubernetes {version}; iterion needs {MIN_SERVER_VERSION} or newer"
            ),
            (ContextOutcome::Unavailable(e), Location::InCluster) => format!("{place}: {e}"),
            (ContextOutcome::Unreachable(e), Location::InCluster) => {
                format!("{place}: API server {server}: {e}")
            }
            (ContextOutcome::Unavailable(e), Location::OffCluster) => {
                format!("{place}: {e}; cluster access not verified")
            }
            (ContextOutcome::Unreachable(e), Location::OffCluster) => {
                format!("{place}: API server {server}: {e}; cluster access not verified")
            }
        }
    }

    /// The remediation hint, `None` on pass.
    pub fn hint(&self) -> Option<String> {
        match (&self.outcome, self.location) {
            (ContextOutcome::Reachable { .. }, _) => None,
            (ContextOutcome::TooOld { .. }, _) => Some(TOO_OLD_HINT.to_string()),
            // 07 §2.2: the reason itself is the remediation on a runner.
            (ContextOutcome::Unavailable(e) | ContextOutcome::Unreachable(e), Location::InCluster) => {
                Some(e.to_string())
            }
            (_, Location::OffCluster) => Some(OFF_CLUSTER_HINT.to_string()),
        }
    }
}

/// `k8s_context` (06 §4.11): `GET /version` within `timeout` and a comparison with [`MIN_SERVER_VERSION`].
/// Needs a tokio runtime; the future is `Send`.
pub async fn check_context(access: &ClusterAccess, timeout: Duration) -> ContextReport {
    let outcome = match access.client() {
        Err(e) => ContextOutcome::Unavailable(e),
        Ok(client) => match bounded("GET /version", timeout, client.apiserver_version()).await {
            Err(e) => ContextOutcome::Unreachable(e),
            Ok(info) => match ServerVersion::parse(&info.major, &info.minor, &info.git_version) {
                None => ContextOutcome::Unreachable(Error::UnrecognisedVersion {
                    major: info.major,
                    minor: info.minor,
                    git_version: info.git_version,
                }),
                Some(version) if version < MIN_SERVER_VERSION => ContextOutcome::TooOld { version },
                Some(version) => ContextOutcome::Reachable { version },
            },
        },
    };
    ContextReport {
        location: access.location,
        context: access.context.clone(),
        server: access.server.clone(),
        namespace: access.namespace.clone(),
        outcome,
    }
}

/// One (API group, resource, verb) the runner needs (07 §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permission {
    /// API group; `""` is the core group.
    pub group: &'static str,
    /// Resource, e.g. `pods`.
    pub resource: &'static str,
    /// Subresource, e.g. `exec` for `pods/exec`.
    pub subresource: Option<&'static str>,
    /// Verb, e.g. `create`.
    pub verb: &'static str,
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(sub) = self.subresource {
            write!(f, "/{sub}")?;
        }
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        Ok(())
    }
}

const fn perm(
    group: &'static str,
    resource: &'static str,
    subresource: Option<&'static str>,
    verb: &'static str,
) -> Permission {
    Permission {
        group,
        resource,
        subresource,
        verb,
    }
}

/// The namespaced Role the runner's service account needs (07 §7.2), one entry per (resource, verb).
pub const REQUIRED_RBAC: &[Permission] = &[
    perm("", "pods", None, "get"),
    perm("", "pods", None, "list"),
    perm("", "pods", None, "watch"),
    perm("", "pods", None, "create"),
    perm("", "pods", None, "delete"),
    perm("", "pods", Some("exec"), "create"),
    perm("", "pods", Some("exec"), "get"),
    perm("", "pods", Some("log"), "get"),
    perm("networking.k8s.io", "networkpolicies", None, "get"),
    perm("networking.k8s.io", "networkpolicies", None, "list"),
    perm("networking.k8s.io", "networkpolicies", None, "create"),
    perm("networking.k8s.io", "networkpolicies", None, "delete"),
];

/// What `k8s_rbac` found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RbacOutcome {
    /// Every permission of [`REQUIRED_RBAC`] is allowed.
    AllAllowed {
        /// How many reviews were answered.
        checked: usize,
    },
    /// Some permissions are denied, or some reviews could not be performed.
    Missing {
        /// Permissions the API server did not allow, in [`REQUIRED_RBAC`] order.
        denied: Vec<Permission>,
        /// Reviews that got no answer, with the reason, in [`REQUIRED_RBAC`] order.
        failed: Vec<(Permission, Error)>,
    },
    /// No usable configuration (see `k8s_context`); nothing was asked.
    Unavailable(Error),
}

/// The `k8s_rbac` check (06 §4.12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbacReport {
    /// In-cluster or off-cluster.
    pub location: Location,
    /// The kubeconfig context (off-cluster).
    pub context: Option<String>,
    /// The namespace the reviews asked about.
    pub namespace: String,
    /// What was found.
    pub outcome: RbacOutcome,
}

impl RbacReport {
    /// The row of 06 §4.12: pass; fail in-cluster / warn off-cluster for a missing permission; skip when there
    /// is no cluster access at all.
    pub fn status(&self) -> Status {
        match (&self.outcome, self.location) {
            (RbacOutcome::AllAllowed { .. }, _) => Status::Pass,
            (RbacOutcome::Missing { .. }, Location::InCluster) => Status::Fail,
            (RbacOutcome::Missing { .. }, Location::OffCluster) => Status::Warn,
            (RbacOutcome::Unavailable(_), _) => Status::Skip,
        }
    }

    /// The one-line message, listing every missing permission.
    pub fn message(&self) -> String {
        let ns = &self.namespace;
        let who = match (self.location, &self.context) {
            (Location::InCluster, _) => "the runner's service account".to_string(),
            (Location::OffCluster, Some(ctx)) => format!("the user of context {ctx}"),
            (Location::OffCluster, None) => "the kubeconfig user".to_string(),
        };
        match &self.outcome {
            RbacOutcome::AllAllowed { checked } => {
                format!("{who} has all {checked} permissions of the iterion Role in namespace {ns}")
            }
            RbacOutcome::Missing { denied, failed } => {
                let mut parts = Vec::new();
                if !denied.is_empty() {
                    let list: Vec<String> = denied.iter().map(Permission::to_string).collect();
                    parts.push(format!("{who} lacks {} in namespace {ns}", list.join(", ")));
                }
                if !failed.is_empty() {
                    let list: Vec<String> = failed.iter().map(|(p, e)| format!("{p} ({e})")).collect();
                    parts.push(format!("not verified in namespace {ns}: {}", list.join("; ")));
                }
                parts.join("; ")
            }
            RbacOutcome::Unavailable(e) => format!("permissions not checked: {e}"),
        }
    }

    /// The remediation hint, `None` on pass and skip.
    pub fn hint(&self) -> Option<String> {
        match &self.outcome {
            RbacOutcome::Missing { denied, .. } if !denied.is_empty() => Some(RBAC_HINT.to_string()),
            RbacOutcome::Missing { .. } => Some(RBAC_UNVERIFIED_HINT.to_string()),
            RbacOutcome::AllAllowed { .. } | RbacOutcome::Unavailable(_) => None,
        }
    }
}

/// `k8s_rbac` (06 §4.12, 07 §7.3): one `SelfSubjectAccessReview` per entry of [`REQUIRED_RBAC`], all
/// concurrently, each bounded by `timeout`. `namespace` defaults to [`ClusterAccess::namespace`] (then
/// `default`). Needs a tokio runtime; the future is `Send`.
pub async fn check_rbac(access: &ClusterAccess, namespace: Option<&str>, timeout: Duration) -> RbacReport {
    let namespace = namespace.or(access.namespace()).unwrap_or("default").to_string();
    let outcome = match access.client() {
        Err(e) => RbacOutcome::Unavailable(e),
        Ok(client) => {
            let api: Api<SelfSubjectAccessReview> = Api::all(client);
            let reviews = REQUIRED_RBAC
                .iter()
                .map(|p| review(&api, *p, &namespace, timeout));
            let answers = futures::future::join_all(reviews).await;
            let mut denied = Vec::new();
            let mut failed = Vec::new();
            for (p, answer) in REQUIRED_RBAC.iter().zip(answers) {
                match answer {
                    Ok(true) => {}
                    Ok(false) => denied.push(*p),
                    Err(e) => failed.push((*p, e)),
                }
            }
            if denied.is_empty() && failed.is_empty() {
                RbacOutcome::AllAllowed {
                    checked: REQUIRED_RBAC.len(),
                }
            } else {
                RbacOutcome::Missing { denied, failed }
            }
        }
    };
    RbacReport {
        location: access.location,
        context: access.context.clone(),
        namespace,
        outcome,
    }
}

async fn review(
    api: &Api<SelfSubjectAccessReview>,
    p: Permission,
    namespace: &str,
    timeout: Duration,
) -> Result<bool> {
    let request = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(p.group.to_string()),
                resource: Some(p.resource.to_string()),
                subresource: p.subresource.map(str::to_string),
                verb: Some(p.verb.to_string()),
                namespace: Some(namespace.to_string()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let label = format!("SelfSubjectAccessReview for {p}");
    let answer = bounded(&label, timeout, api.create(&PostParams::default(), &request)).await?;
    match answer.status {
        Some(status) => Ok(status.allowed),
        None => Err(Error::InvalidResponse {
            request: label,
            detail: "no status in the review".to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn kubeconfig(context: &str, server: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: {context}\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
             contexts:\n- name: {context}\n  context:\n    cluster: c\n    user: u\n\
             users:\n- name: u\n  user:\n{user}\n"
        )
    }

    #[test]
    fn versions() {
        let check = |major, minor, git, expect: Option<(u32, u32)>| {
            let got = ServerVersion::parse(major, minor, git).map(|v| (v.major, v.minor));
            assert_eq!(got, expect, "{major:?} {minor:?} {git:?}");
        };
        check("1", "31", "v1.31.0", Some((1, 31)));
        check("1", "30+", "v1.30.4-eks-1", Some((1, 30)));
        check(" 1 ", "29", "", Some((1, 29)));
        check("", "", "v1.32.1-gke.100", Some((1, 32)));
        check("1", "x", "1.28.0", Some((1, 28)));
        check("", "", "", None);
        check("", "", "vX.Y", None);
        assert!(ServerVersion { major: 1, minor: 29 } < MIN_SERVER_VERSION);
        assert!(ServerVersion { major: 2, minor: 0 } > MIN_SERVER_VERSION);
        assert_eq!(MIN_SERVER_VERSION.to_string(), "1.30");
    }

    #[test]
    fn in_cluster_reasons_follow_the_order_of_07_2_2() {
        let sa = tempfile::tempdir().unwrap();
        let d = sa.path();
        let discover = |vars: &[(&str, &str)]| {
            ClusterAccess::discover(&DiscoveryInputs::new(env(vars)).with_service_account_dir(d))
        };
        let host = [
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ];

        let a = discover(&host[..1]);
        assert_eq!(a.location(), Location::InCluster);
        assert_eq!(
            a.error().unwrap().to_string(),
            "not running in a kubernetes pod (KUBERNETES_SERVICE_PORT is not set)"
        );
        assert_eq!(
            discover(&host).error(),
            Some(&Error::ServiceAccountToken {
                path: d.join("token")
            })
        );
        write(d, "token", "t0ken");
        assert_eq!(
            discover(&host).error().unwrap().to_string(),
            format!("no service-account CA at {}", d.join("ca.crt").display())
        );
        write(d, "ca.crt", "not a certificate");
        assert_eq!(
            discover(&host).error().unwrap().to_string(),
            format!("empty namespace at {}", d.join("namespace").display())
        );
        write(d, "namespace", " \n");
        assert_eq!(
            discover(&host).error(),
            Some(&Error::EmptyNamespace {
                path: d.join("namespace")
            })
        );
        write(d, "namespace", "runners\n");
        // every file is there; the CA itself is rejected by the client configuration
        let a = discover(&host);
        assert_eq!(
            a.error().unwrap().to_string(),
            format!(
                "cannot configure the kubernetes client: no PEM certificate in {}",
                d.join("ca.crt").display()
            )
        );
        assert_eq!(a.namespace(), Some("runners"));
        assert_eq!(a.server(), Some("https://10.0.0.1:443"));
    }

    #[test]
    fn in_cluster_namespace_override_and_ipv6_host() {
        let sa = tempfile::tempdir().unwrap();
        let d = sa.path();
        write(d, "token", "t0ken");
        let ca = rcgen::generate_simple_self_signed(vec!["fd00::1".to_string()]).unwrap();
        write(d, "ca.crt", &ca.cert.pem());
        let inputs = DiscoveryInputs::new(env(&[
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            (NAMESPACE_VAR, "ci"),
        ]))
        .with_service_account_dir(d);
        let a = ClusterAccess::discover(&inputs);
        // no namespace file is needed with the override
        assert_eq!(a.error(), None, "{a:?}");
        assert_eq!(a.namespace(), Some("ci"));
        assert_eq!(a.server(), Some("https://[fd00::1]:443"));
    }

    #[test]
    fn kubeconfig_list_skips_missing_files_and_merges() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let first = write(
            d,
            "first",
            &kubeconfig("one", "http://127.0.0.1:1", "    token: a"),
        );
        // the second file's current-context does not win (the first file to set it does)
        let second = write(
            d,
            "second",
            &kubeconfig("two", "http://127.0.0.1:2", "    token: b"),
        );
        let list = std::env::join_paths([d.join("absent"), first, second]).unwrap();
        let a = ClusterAccess::discover(&DiscoveryInputs::new(env(&[(
            "KUBECONFIG",
            list.to_str().unwrap(),
        )])));
        assert_eq!(a.error(), None, "{a:?}");
        assert_eq!(a.location(), Location::OffCluster);
        assert_eq!(a.context_name(), Some("one"));
        assert_eq!(a.server(), Some("http://127.0.0.1:1"));
        assert_eq!(a.namespace(), Some("default"));
    }

    #[test]
    fn kubeconfig_from_home_and_its_failures() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        let discover = |vars: &[(&str, &str)]| ClusterAccess::discover(&DiscoveryInputs::new(env(vars)));
        let home_env = [("HOME", h.to_str().unwrap())];

        assert_eq!(
            discover(&[]).error().unwrap().to_string(),
            "no kubeconfig (looked for nothing: neither KUBECONFIG nor HOME is set)"
        );
        // an empty KUBECONFIG is unset: HOME is used
        let a = discover(&[("KUBECONFIG", ""), home_env[0]]);
        assert_eq!(
            a.error(),
            Some(&Error::NoKubeconfig {
                searched: vec![h.join(".kube/config")]
            })
        );

        std::fs::create_dir(h.join(".kube")).unwrap();
        let path = write(&h.join(".kube"), "config", "clusters: [unterminated");
        assert!(
            matches!(discover(&home_env).error(), Some(Error::InvalidKubeconfig { path: p, .. }) if *p == path),
            "{:?}",
            discover(&home_env)
        );

        write(
            &h.join(".kube"),
            "config",
            "apiVersion: v1\nkind: Config\nclusters: []\n",
        );
        assert_eq!(discover(&home_env).error(), Some(&Error::NoCurrentContext));

        let exec = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: gke-gcloud-auth-plugin";
        write(
            &h.join(".kube"),
            "config",
            &kubeconfig("gke", "https://203.0.113.1", exec),
        );
        assert_eq!(
            discover(&home_env).error().unwrap().to_string(),
            "context gke authenticates through the exec (gke-gcloud-auth-plugin) credential plugin, which iterion does not run"
        );

        write(
            &h.join(".kube"),
            "config",
            &kubeconfig("kind", "http://bad host", "    token: t"),
        );
        assert!(matches!(
            discover(&home_env).error(),
            Some(Error::ClientConfig { .. })
        ));

        write(
            &h.join(".kube"),
            "config",
            &kubeconfig("kind", "https://127.0.0.1:6443", "    token: t"),
        );
        assert_eq!(discover(&home_env).namespace(), Some("default"));
        let ok = discover(&[home_env[0], (NAMESPACE_VAR, "ci")]);
        assert_eq!(ok.error(), None, "{ok:?}");
        assert_eq!(ok.namespace(), Some("ci"));
        assert_eq!(ok.server(), Some("https://127.0.0.1:6443"));
    }

    #[test]
    fn error_chains_drop_repeated_text() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer: {0}")]
        struct Outer(#[source] Inner);
        #[derive(Debug, thiserror::Error)]
        #[error("inner")]
        struct Inner(#[source] std::io::Error);
        let e = Outer(Inner(std::io::Error::other("refused")));
        assert_eq!(error_chain(&e), "inner: refused");
    }

    fn context_report(location: Location, outcome: ContextOutcome) -> ContextReport {
        ContextReport {
            location,
            context: None,
            server: Some("https://10.0.0.1:443".into()),
            namespace: Some("ns".into()),
            outcome,
        }
    }

    #[test]
    fn context_rows_of_06_4_11() {
        use ContextOutcome::*;
        use Location::*;
        let v = |minor| ServerVersion { major: 1, minor };
        let down = || Error::Transport {
            request: "GET /version".into(),
            detail: "connection refused".into(),
        };
        let check = |loc, outcome, status, hint: Option<&str>| {
            let r = context_report(loc, outcome);
            assert_eq!((r.status(), r.hint().as_deref()), (status, hint), "{r:?}");
        };
        check(InCluster, Reachable { version: v(31) }, Status::Pass, None);
        check(OffCluster, Reachable { version: v(30) }, Status::Pass, None);
        check(
            InCluster,
            TooOld { version: v(29) },
            Status::Fail,
            Some(TOO_OLD_HINT),
        );
        check(
            OffCluster,
            TooOld { version: v(29) },
            Status::Fail,
            Some(TOO_OLD_HINT),
        );
        check(
            InCluster,
            Unreachable(down()),
            Status::Fail,
            Some("GET /version: connection refused"),
        );
        check(
            OffCluster,
            Unreachable(down()),
            Status::Warn,
            Some(OFF_CLUSTER_HINT),
        );
        check(
            OffCluster,
            Unavailable(Error::NoCurrentContext),
            Status::Warn,
            Some(OFF_CLUSTER_HINT),
        );
        let reason = Error::ServiceEnvMissing {
            name: "KUBERNETES_SERVICE_HOST",
        };
        check(
            InCluster,
            Unavailable(reason),
            Status::Fail,
            Some("not running in a kubernetes pod (KUBERNETES_SERVICE_HOST is not set)"),
        );
        assert_eq!(
            context_report(InCluster, Unreachable(down())).message(),
            "in-cluster: API server https://10.0.0.1:443: GET /version: connection refused"
        );
    }

    #[test]
    fn rbac_rows_of_06_4_12() {
        let p = REQUIRED_RBAC[3];
        let report = |location, outcome| RbacReport {
            location,
            context: None,
            namespace: "ns".into(),
            outcome,
        };
        let missing = || RbacOutcome::Missing {
            denied: vec![p],
            failed: vec![],
        };
        let r = report(Location::InCluster, missing());
        assert_eq!((r.status(), r.hint().as_deref()), (Status::Fail, Some(RBAC_HINT)));
        assert_eq!(
            r.message(),
            "the runner's service account lacks create pods in namespace ns"
        );
        let r = report(Location::OffCluster, missing());
        assert_eq!((r.status(), r.hint().as_deref()), (Status::Warn, Some(RBAC_HINT)));
        let r = report(Location::InCluster, RbacOutcome::AllAllowed { checked: 12 });
        assert_eq!((r.status(), r.hint()), (Status::Pass, None));
        assert_eq!(
            r.message(),
            "the runner's service account has all 12 permissions of the iterion Role in namespace ns"
        );
    }

    #[test]
    fn required_rbac_is_the_role_of_07_7_2() {
        let rendered: Vec<String> = REQUIRED_RBAC.iter().map(Permission::to_string).collect();
        assert_eq!(
            rendered,
            [
                "get pods",
                "list pods",
                "watch pods",
                "create pods",
                "delete pods",
                "create pods/exec",
                "get pods/exec",
                "get pods/log",
                "get networkpolicies.networking.k8s.io",
                "list networkpolicies.networking.k8s.io",
                "create networkpolicies.networking.k8s.io",
                "delete networkpolicies.networking.k8s.io",
            ]
        );
    }
}
