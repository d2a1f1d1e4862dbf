//! The request-building steps a run's sandbox shares with any other sandbox started the same way (the
//! doctor's throwaway sandbox of `--probe`): the container environment from the spec's layers, the host-state
//! plan, and the proxy listener a network lease asks for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iterion_driver::{HostStatePlan, ProxyListen};
use iterion_envdeny::{EnvLayers, MergedEnv, RepoEnv, Reserved};
use iterion_netproxy::Listen;
use iterion_spec::resolved::{HostState, ResolvedSandbox};

/// The container environment of a spec (05 §4.5): its repository and workflow layers and the operator's
/// entries, merged under the reserved values (the proxy URL when egress goes through a proxy, the artifact
/// file variables when the run mounts its artifact directory).
pub fn container_env(
    spec: &ResolvedSandbox,
    operator: &BTreeMap<String, String>,
    proxy_url: Option<&str>,
    artifact_files: bool,
) -> iterion_envdeny::Result<MergedEnv> {
    container_env_with(spec, operator, proxy_url, artifact_files, Vec::new())
}

/// Where the run's CA files are in a container.
pub const TLS_DIR: &str = "/run/iterion/tls";

/// The system trust store's usual path (Debian, Ubuntu, Alpine, Arch): the run's bundle is bound over it, so
/// clients that read only the system store trust the run's CA too.
pub const SYSTEM_TRUST_STORE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The trust variables of TLS inspection and their values: the bundle (the Mozilla roots and the run's CA)
/// for the clients that replace their roots with a file, the CA alone for those that add it to theirs.
pub fn tls_trust_env() -> Vec<(String, String)> {
    let bundle = format!("{TLS_DIR}/ca-bundle.pem");
    let ca = format!("{TLS_DIR}/ca.pem");
    let mut v: Vec<(String, String)> = [
        "SSL_CERT_FILE",
        "NIX_SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "CARGO_HTTP_CAINFO",
        "PIP_CERT",
        "AWS_CA_BUNDLE",
        "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
    ]
    .iter()
    .map(|n| ((*n).to_owned(), bundle.clone()))
    .collect();
    v.push(("NODE_EXTRA_CA_CERTS".into(), ca.clone()));
    v.push(("DENO_CERT".into(), ca));
    v
}

/// [`container_env`] with the trust variables of TLS inspection (`tls`, see [`tls_trust_env`]).
pub fn container_env_with(
    spec: &ResolvedSandbox,
    operator: &BTreeMap<String, String>,
    proxy_url: Option<&str>,
    artifact_files: bool,
    tls: Vec<(String, String)>,
) -> iterion_envdeny::Result<MergedEnv> {
    let mut repo = RepoEnv::new();
    repo.container_env = spec.env_layers.repo.clone();
    let mut layers = EnvLayers::new();
    layers.repo = repo;
    layers.workflow = spec.env_layers.workflow.clone();
    layers.operator = operator.clone();
    let mut reserved = Reserved::none();
    if let Some(u) = proxy_url {
        reserved = reserved.with_proxy(u);
    }
    if artifact_files {
        reserved = reserved.with_artifact_files();
    }
    if !tls.is_empty() {
        reserved = reserved.with_tls(tls);
    }
    iterion_envdeny::merge(&layers, &reserved)
}

/// The host facts a host-state plan is built from.
#[derive(Debug, Clone, Copy)]
pub struct HostStateFacts<'a> {
    /// iterion's data directory.
    pub data_dir: &'a Path,
    /// The host home.
    pub home: Option<&'a Path>,
    /// Host uid (Unix).
    pub uid: Option<u32>,
    /// Host gid (Unix).
    pub gid: Option<u32>,
    /// `linux`, `macos`, `windows`.
    pub os: &'a str,
}

impl<'a> HostStateFacts<'a> {
    /// The facts of the host the runtime was built with.
    pub fn of(h: &'a super::host::HostFacts) -> Self {
        HostStateFacts {
            data_dir: &h.data_dir,
            home: h.home.as_deref(),
            uid: h.uid,
            gid: h.gid,
            os: &h.os,
        }
    }
}

/// The host-state plan of a spec (05 §5): enabled when the spec's host state is `auto`, the Claude directory
/// under the host home.
pub fn host_state_plan(spec: &ResolvedSandbox, host: HostStateFacts<'_>) -> HostStatePlan {
    let home: Option<PathBuf> = host.home.map(Path::to_path_buf);
    let mut hs = HostStatePlan::disabled();
    hs.source = spec.host_state_source.clone();
    hs.data_dir = host.data_dir.to_path_buf();
    hs.claude_dir = home.clone().unwrap_or_default().join(".claude");
    hs.home = home;
    hs.host_uid = host.uid;
    hs.host_gid = host.gid;
    hs.host_os = host.os.to_owned();
    hs.enabled = spec.host_state == HostState::Auto;
    hs
}

/// Why a driver without a host file system drops host binds (05 §4.6 step 1).
pub const NO_HOST_FS: &str = "driver has no host file system";

/// `host_state: auto` on a driver without a host file system (kubernetes, 05 §4.6 step 1): `Ok(None)` when the
/// driver has one or host state is off; `Ok(Some(binds))` when the auto came from the default, with the
/// container paths (identical to the host paths) of the host binds that are dropped — the state directories and
/// the warm caches that exist; `Err(message)` when an explicit source (CLI, workflow, node, environment) asked
/// for it: the run is refused with `SANDBOX_SPEC_INVALID`.
pub fn host_binds_dropped(
    spec: &ResolvedSandbox,
    host_binds: bool,
    driver: &str,
    host: &HostStateFacts<'_>,
) -> Result<Option<Vec<String>>, String> {
    if host_binds || spec.host_state != HostState::Auto {
        return Ok(None);
    }
    if spec.host_state_source != "default" {
        return Err(format!(
            "host_state auto cannot be honoured by the {driver} driver; set host_state: none"
        ));
    }
    let mut candidates = vec![host.data_dir.to_path_buf()];
    if let Some(home) = host.home {
        candidates.push(home.join(".claude"));
        for c in [
            ".cache/go-build",
            "go/pkg/mod",
            ".npm",
            ".local/share/pnpm",
            ".cache/yarn",
        ] {
            candidates.push(home.join(c));
        }
    }
    Ok(Some(
        candidates
            .into_iter()
            .filter(|p| p.is_dir())
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
    ))
}

/// Where the egress proxy listens for a lease's listener.
pub fn proxy_listen(l: &ProxyListen) -> Listen {
    match l {
        ProxyListen::Unix(p) => Listen::Unix(p.clone()),
        ProxyListen::Tcp(a) => Listen::Tcp(*a),
    }
}
