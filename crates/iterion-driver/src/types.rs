//! Value types of the driver API: inputs (03 §3.2), capabilities (§3.7), reports and events (§3.8), cleanup
//! and reaper values (§9), the network lease (§7.1).

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::kind::DriverKind;
pub use crate::labels::OwnerInfo;
use iterion_spec::resolved::ResolvedSandbox;
use tokio::io::AsyncRead;

/// How egress can be enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub enum EgressSupport {
    /// The sandbox cannot bypass the proxy (relay placement, NetworkPolicy).
    Enforced,
    /// The proxy is offered through environment variables only.
    Advisory,
    /// No egress control.
    #[default]
    None,
}

/// What a driver can do (03 §3.7). The runtime consults these before using a feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// Runs images.
    pub image: bool,
    /// Builds images.
    pub build: bool,
    /// Host bind mounts.
    pub host_binds: bool,
    /// Named volumes.
    pub named_volumes: bool,
    /// tmpfs mounts.
    pub tmpfs: bool,
    /// pvc, configmap, secret volumes.
    pub cluster_volumes: bool,
    /// Post-create commands.
    pub post_create: bool,
    /// A user other than the image default.
    pub remote_user: bool,
    /// Only numeric users.
    pub numeric_user_only: bool,
    /// Remapping the container user to the host uid.
    pub uid_remap: bool,
    /// Egress enforcement the driver expects (the lease placement is authoritative for a run).
    pub egress: EgressSupport,
    /// Copy in and out.
    pub copy: bool,
    /// Killing an exec.
    pub exec_kill: bool,
    /// An init process as PID 1.
    pub init: bool,
    /// The hardening profile.
    pub hardening: bool,
}

impl Capabilities {
    /// Every capability false, egress `None`.
    pub fn none() -> Self {
        Self::default()
    }

    /// The capabilities of `NoopDriver`: only `copy` and `exec_kill`.
    pub fn noop() -> Self {
        Capabilities {
            copy: true,
            exec_kill: true,
            ..Self::default()
        }
    }

    /// Docker or Podman on Linux (rootful or rootless); `uid_remap` as given.
    pub fn linux_engine(uid_remap: bool) -> Self {
        Capabilities {
            image: true,
            build: true,
            host_binds: true,
            named_volumes: true,
            tmpfs: true,
            cluster_volumes: false,
            post_create: true,
            remote_user: true,
            numeric_user_only: false,
            uid_remap,
            egress: EgressSupport::Enforced,
            copy: true,
            exec_kill: true,
            init: true,
            hardening: true,
        }
    }

    /// Docker Desktop: as a Linux engine without uid remap and with advisory egress.
    pub fn desktop_engine() -> Self {
        Capabilities {
            uid_remap: false,
            egress: EgressSupport::Advisory,
            ..Self::linux_engine(false)
        }
    }

    /// The doctor's historical `mounts` key.
    pub fn mounts(&self) -> bool {
        self.host_binds || self.named_volumes || self.cluster_volumes
    }

    /// The doctor's historical `network_policy` key.
    pub fn network_policy(&self) -> bool {
        self.egress == EgressSupport::Enforced
    }
}

/// Identity of the engine behind a driver.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[non_exhaustive]
pub struct EngineInfo {
    /// The driver name reported for this engine (a Podman service on the Docker socket is `podman`).
    pub driver: Option<DriverKind>,
    /// Product name and version, e.g. `Docker Engine 20.10.24`.
    pub engine: String,
    /// Engine API version.
    pub api_version: String,
    /// Operating system of the engine.
    pub os: String,
    /// CPU architecture of the engine.
    pub arch: String,
    /// Rootless engine.
    pub rootless: bool,
    /// The engine runs inside a virtual machine (Docker Desktop, Podman machine).
    pub desktop: bool,
    /// The endpoint reached (socket path or URL), for diagnostics.
    pub endpoint: Option<String>,
    /// The OCI runtimes the engine lists (Docker and Podman `/info` `Runtimes`), sorted; empty when it lists
    /// none or the driver cannot tell (kubernetes runtime classes are not listed).
    pub runtimes: Vec<String>,
    /// The engine's default runtime (`/info` `DefaultRuntime`), when it says.
    pub default_runtime: Option<String>,
}

impl EngineInfo {
    /// Info with a driver and an engine description; other fields default.
    pub fn new(driver: DriverKind, engine: impl Into<String>) -> Self {
        EngineInfo {
            driver: Some(driver),
            engine: engine.into(),
            ..Self::default()
        }
    }
}

/// Image pull policy (05 §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PullPolicy {
    /// Pull when missing, and also refresh `edge` / `latest` / untagged references (contacts the registry
    /// on every run of such an image).
    Auto,
    /// Pull only when missing: a present image is used as is, without contacting a registry (the default).
    #[default]
    Missing,
    /// Always pull.
    Always,
    /// Never pull; a missing image is `ImageAbsent`.
    Never,
}

/// Level of a driver log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogLevel {
    /// Debug.
    Debug,
    /// Info.
    Info,
    /// Warning.
    Warn,
}

/// Progress a driver reports while it works; the runtime turns these into run events (05 §6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DriverEvent {
    /// The image is present (`sandbox_image_ready`).
    ImageReady {
        /// Reference.
        image: String,
        /// Content digest, when known.
        digest: Option<String>,
        /// Whether it was pulled now.
        pulled: bool,
        /// Time taken.
        duration_ms: u64,
    },
    /// A build started (`sandbox_build_started`).
    BuildStarted {
        /// Driver.
        driver: DriverKind,
        /// Dockerfile path.
        dockerfile: String,
        /// Context path.
        context: String,
        /// The tag being built.
        target: String,
        /// The network the build gets.
        network: BuildNetwork,
        /// Whether an image built earlier from the same inputs is reused.
        cache: BuildCache,
        /// The builder the engine uses, and why when it is not the one asked for.
        builder: BuilderChoice,
    },
    /// A build finished (`sandbox_build_finished`).
    BuildFinished {
        /// Driver.
        driver: DriverKind,
        /// The built reference.
        target: String,
        /// Time taken.
        duration_ms: u64,
        /// The network the build had.
        network: BuildNetwork,
        /// Whether an image built earlier from the same inputs was reused.
        cache: BuildCache,
        /// The builder the engine used.
        builder: BuilderChoice,
    },
    /// A build failed (`sandbox_build_failed`).
    BuildFailed {
        /// Driver.
        driver: DriverKind,
        /// Message including the 4 KiB output tail.
        error: String,
        /// The builder the engine used (`None` when the build failed before one was chosen).
        builder: Option<BuilderChoice>,
    },
    /// A human log line (never environment values).
    Log {
        /// Level.
        level: LogLevel,
        /// Text.
        message: String,
    },
}

/// Where drivers send [`DriverEvent`]s. Must not block; called from driver tasks.
#[derive(Clone)]
pub struct EventSink(Arc<dyn Fn(DriverEvent) + Send + Sync>);

impl EventSink {
    /// A sink calling `f` for each event.
    pub fn new(f: impl Fn(DriverEvent) + Send + Sync + 'static) -> Self {
        EventSink(Arc::new(f))
    }

    /// A sink that drops every event.
    pub fn discard() -> Self {
        EventSink::new(|_| {})
    }

    /// Sends one event.
    pub fn emit(&self, event: DriverEvent) {
        (self.0)(event)
    }

    /// Sends a log line.
    pub fn log(&self, level: LogLevel, message: impl Into<String>) {
        self.emit(DriverEvent::Log {
            level,
            message: message.into(),
        })
    }
}

impl Default for EventSink {
    fn default() -> Self {
        EventSink::discard()
    }
}

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventSink")
    }
}

/// Input of [`crate::Driver::prepare`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PrepareRequest {
    /// The resolved sandbox (01 §8.9).
    pub sandbox: ResolvedSandbox,
    /// Pull policy.
    pub pull_policy: PullPolicy,
    /// Bound of one pull (default 10 m).
    pub pull_timeout: Duration,
    /// Event sink.
    pub events: EventSink,
}

impl PrepareRequest {
    /// A request with the default policy and bound.
    pub fn new(sandbox: ResolvedSandbox) -> Self {
        PrepareRequest {
            sandbox,
            pull_policy: PullPolicy::Missing,
            pull_timeout: Duration::from_secs(600),
            events: EventSink::discard(),
        }
    }
}

/// Input of [`crate::Driver::build`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BuildRequest {
    /// The run id.
    pub run_id: String,
    /// The spec key of a node's own container.
    pub spec_key: Option<String>,
    /// Bound of the build (default 30 m).
    pub build_timeout: Duration,
    /// Pull policy for base images (only with [`BuildNetwork::Open`]).
    pub pull_policy: PullPolicy,
    /// Whether the build may use the network.
    pub network: BuildNetwork,
    /// The process the built image is labelled with (`iterion sandbox prune` reads it).
    pub owner: Option<OwnerInfo>,
    /// Build even when an image built from the same inputs is present (`ITERION_SANDBOX_REBUILD`).
    pub rebuild: bool,
    /// Secrets the operator makes available to `RUN --mount=type=secret` steps (`--sandbox-build-secret`);
    /// never from the repository.
    pub secrets: Vec<BuildSecret>,
    /// Event sink.
    pub events: EventSink,
}

impl BuildRequest {
    /// A request with the default bound and no network.
    pub fn new(run_id: impl Into<String>) -> Self {
        BuildRequest {
            run_id: run_id.into(),
            spec_key: None,
            build_timeout: Duration::from_secs(1800),
            pull_policy: PullPolicy::Missing,
            network: BuildNetwork::None,
            owner: None,
            rebuild: false,
            secrets: Vec::new(),
            events: EventSink::discard(),
        }
    }
}

/// The builder of an image build: BuildKit (`version=2` of the engine's build endpoint) or the classic builder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BuilderKind {
    /// BuildKit through the engine API (multi-stage pruning, `RUN --mount`, build secrets).
    BuildKit,
    /// The classic builder (`version=1`; Podman's compatibility endpoint builds with its own builder).
    Classic,
}

impl BuilderKind {
    /// The word used in events and settings: `buildkit` or `classic`.
    pub fn as_str(self) -> &'static str {
        match self {
            BuilderKind::BuildKit => "buildkit",
            BuilderKind::Classic => "classic",
        }
    }
}

impl fmt::Display for BuilderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The builder a build uses and why (`builder` and `builder_reason` of `sandbox_build_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuilderChoice {
    /// The builder.
    pub kind: BuilderKind,
    /// Why this builder: set when it is not the one asked for (a fallback) or when `auto` chose BuildKit on
    /// an engine that does not advertise it.
    pub reason: Option<String>,
}

/// The bytes of a build secret: redacted in `Debug`, never displayed.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretBytes(Vec<u8>);

impl SecretBytes {
    /// Wraps `bytes`.
    pub fn new(bytes: Vec<u8>) -> Self {
        SecretBytes(bytes)
    }

    /// The bytes.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<redacted, {} bytes>", self.0.len())
    }
}

/// Where the value of a build secret comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildSecretSource {
    /// The value of an environment variable of the launching process, read by the caller (`env=VAR`).
    Env {
        /// The variable's name.
        var: String,
        /// Its value.
        value: SecretBytes,
    },
    /// A host file, read by the driver when it builds (`src=PATH`).
    File(std::path::PathBuf),
}

/// A secret the operator gives to a build (`--sandbox-build-secret id=NAME,env=VAR|src=PATH`): served to
/// `RUN --mount=type=secret,id=NAME` steps through the BuildKit session, never written to an image, an
/// event or a log (only its id is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildSecret {
    /// The id a `RUN --mount=type=secret,id=…` names.
    pub id: String,
    /// The value's source.
    pub source: BuildSecretSource,
}

/// The network an image build gets.
///
/// Under a filtering policy (`allowlist`, `denylist`) nothing a Dockerfile does may leave the host except through
/// the run's proxy, and a build has no proxy: it gets [`BuildNetwork::None`]. Its `RUN` steps have no network,
/// and the driver refuses, before the build, whatever the engine would fetch itself (a remote `ADD`, a base
/// image it would pull).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BuildNetwork {
    /// No network; nothing pulled or downloaded by the engine.
    #[default]
    None,
    /// The engine's default build network, and base images pulled as the pull policy says (policy `open`).
    Open,
}

impl BuildNetwork {
    /// The word used in events: `none` or `open`.
    pub fn as_str(self) -> &'static str {
        match self {
            BuildNetwork::None => "none",
            BuildNetwork::Open => "open",
        }
    }
}

impl fmt::Display for BuildNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a build reused an image built earlier from the same inputs (`cache` of `sandbox_build_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BuildCache {
    /// An image with the same build inputs was present and is used; nothing was built.
    Hit,
    /// No such image (or a rebuild was asked for): the engine builds.
    Miss,
}

impl BuildCache {
    /// The word used in events: `hit` or `miss`.
    pub fn as_str(self) -> &'static str {
        match self {
            BuildCache::Hit => "hit",
            BuildCache::Miss => "miss",
        }
    }
}

/// Input of [`crate::Driver::network`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NetworkRequest {
    /// The run id.
    pub run_id: String,
    /// Host path of the run directory.
    pub run_dir: PathBuf,
    /// `ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS`.
    pub require_enforced: bool,
}

impl NetworkRequest {
    /// A request.
    pub fn new(run_id: impl Into<String>, run_dir: impl Into<PathBuf>, require_enforced: bool) -> Self {
        NetworkRequest {
            run_id: run_id.into(),
            run_dir: run_dir.into(),
            require_enforced,
        }
    }
}

/// The proxy address seen from inside the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyEndpoint {
    /// Host (`127.0.0.1` for the relay, `host.docker.internal` for advisory).
    pub host: String,
    /// Port.
    pub port: u16,
}

/// Kind of a runtime-owned auxiliary mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuxMountKind {
    /// Node attachments.
    Attachments,
    /// The run-files directory.
    RunFiles,
    /// A bundle.
    Bundle,
    /// The iterion binary (claw runner).
    IterionBinary,
    /// The git common directory of a worktree.
    GitCommonDir,
    /// The operator's object directory, read-only, that a run's private repository borrows objects from.
    GitObjects,
    /// The TLS trust bundle.
    TlsBundle,
    /// The doctor's probe binary.
    ProbeBinary,
    /// A file secret, read-only.
    SecretFile,
}

/// A runtime-owned bind mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuxMount {
    /// What it is.
    pub kind: AuxMountKind,
    /// Host path.
    pub host_path: PathBuf,
    /// Container path.
    pub container_path: String,
    /// Read-only.
    pub read_only: bool,
}

/// Host state sharing plan (05 §4.6).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct HostStatePlan {
    /// Whether host state is mounted.
    pub enabled: bool,
    /// Label of the rule that decided it.
    pub source: String,
    /// The host home, when known.
    pub home: Option<PathBuf>,
    /// iterion's data directory.
    pub data_dir: PathBuf,
    /// The host `~/.claude`.
    pub claude_dir: PathBuf,
    /// Host uid (Linux).
    pub host_uid: Option<u32>,
    /// Host gid (Linux).
    pub host_gid: Option<u32>,
    /// Host operating system (`linux`, `macos`, `windows`).
    pub host_os: String,
}

impl HostStatePlan {
    /// Host state disabled.
    pub fn disabled() -> Self {
        Self::default()
    }
}

/// Resource limits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceLimits {
    /// Max processes.
    pub pids: Option<u64>,
    /// Memory bytes.
    pub memory_bytes: Option<u64>,
    /// CPU in billionths.
    pub nano_cpus: Option<u64>,
}

/// Hardening profile (03 §8.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HardeningProfile {
    /// Default.
    #[default]
    Strict,
    /// Relaxed for images that need it.
    Compat,
}

/// Input of [`crate::Driver::start`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StartRequest {
    /// The run id.
    pub run_id: String,
    /// The friendly run name.
    pub run_name: Option<String>,
    /// `run` or a node spec key.
    pub sandbox_key: String,
    /// Absolute canonical host path of the workspace.
    pub workspace_host_path: PathBuf,
    /// Repository root, when any.
    pub repo_root: Option<PathBuf>,
    /// The workspace's `.git` is a private repository the runtime made for this run (`worktree: auto`): it
    /// stays writable inside the sandbox. Otherwise the workspace's git metadata is the operator's repository
    /// and is mounted read-only (the work tree stays writable).
    pub private_git: bool,
    /// Container scope, sorted (from iterion-envdeny).
    pub container_env: Vec<(String, String)>,
    /// Runtime-owned mounts.
    pub aux_mounts: Vec<AuxMount>,
    /// Host state plan.
    pub host_state: HostStatePlan,
    /// Proxy address seen from the container, when the proxy is active.
    pub proxy: Option<ProxyEndpoint>,
    /// The owning process.
    pub owner: OwnerInfo,
    /// Limits.
    pub limits: ResourceLimits,
    /// Hardening profile.
    pub hardening: HardeningProfile,
    /// Bound of the start phase (default 5 m).
    pub start_timeout: Duration,
    /// The `iterion.io/component` label; `None` derives it (`run`, or `node` for a node's own spec). The
    /// doctor's throwaway sandbox sets `doctor-probe`.
    pub component: Option<crate::labels::Component>,
    /// Event sink.
    pub events: EventSink,
}

impl StartRequest {
    /// A request for the run container with defaults for the rest.
    pub fn new(run_id: impl Into<String>, workspace_host_path: impl Into<PathBuf>, owner: OwnerInfo) -> Self {
        StartRequest {
            run_id: run_id.into(),
            run_name: None,
            sandbox_key: "run".into(),
            workspace_host_path: workspace_host_path.into(),
            repo_root: None,
            private_git: false,
            container_env: Vec::new(),
            aux_mounts: Vec::new(),
            host_state: HostStatePlan::disabled(),
            proxy: None,
            owner,
            limits: ResourceLimits::default(),
            hardening: HardeningProfile::Strict,
            start_timeout: Duration::from_secs(300),
            component: None,
            events: EventSink::discard(),
        }
    }
}

/// The resolved image of a prepared spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageRef {
    /// Reference as declared (or the build tag).
    pub reference: String,
    /// Content digest, when known.
    pub digest: Option<String>,
    /// Engine image id, when known.
    pub id: Option<String>,
}

/// The result of `prepare`: a validated spec owned by one driver.
#[derive(Clone)]
pub struct Prepared {
    /// The driver that produced it.
    pub kind: DriverKind,
    /// The resolved sandbox.
    pub sandbox: ResolvedSandbox,
    /// The resolved image, when the driver runs images.
    pub image: Option<ImageRef>,
    /// Why the spec runs on the host instead (noop).
    pub skipped_reason: Option<String>,
    payload: Option<Arc<dyn Any + Send + Sync>>,
}

impl Prepared {
    /// A prepared spec without a driver payload.
    pub fn new(kind: DriverKind, sandbox: ResolvedSandbox) -> Self {
        Prepared {
            kind,
            sandbox,
            image: None,
            skipped_reason: None,
            payload: None,
        }
    }

    /// Attaches a driver-private payload.
    pub fn with_payload<T: Any + Send + Sync>(mut self, payload: T) -> Self {
        self.payload = Some(Arc::new(payload));
        self
    }

    /// The driver-private payload, when it has type `T`.
    pub fn payload<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.payload.as_deref().and_then(|p| p.downcast_ref::<T>())
    }

    /// `Err(ForeignPrepared)` unless produced by `expected`.
    pub fn check_kind(&self, expected: DriverKind) -> crate::Result<()> {
        if self.kind == expected {
            Ok(())
        } else {
            Err(crate::Error::ForeignPrepared {
                expected,
                got: self.kind,
            })
        }
    }
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("kind", &self.kind)
            .field("key", &self.sandbox.key)
            .field("image", &self.image)
            .field("skipped_reason", &self.skipped_reason)
            .field("payload", &self.payload.is_some())
            .finish()
    }
}

/// Egress placement of a run (03 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EgressPlacement {
    /// No proxy; the engine default network.
    #[default]
    Open,
    /// Enforced: no network, a relay to the proxy socket.
    Relay,
    /// Proxy offered through environment variables only.
    Advisory,
}

/// Where the runtime binds the egress proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyListen {
    /// A Unix socket (relay placement).
    Unix(PathBuf),
    /// A TCP address (advisory placement; port 0 means any).
    Tcp(SocketAddr),
}

type ReleaseHook = Box<dyn FnOnce() -> Vec<String> + Send>;

/// Where the egress proxy listens and how the container reaches it (03 §7.1).
///
/// [`NetworkLease::release`] is idempotent: the release hook (for example removing `<run dir>/net/`) runs once.
pub struct NetworkLease {
    /// The driver that produced it.
    pub kind: DriverKind,
    /// Relay or advisory.
    pub placement: EgressPlacement,
    /// Where the runtime binds the proxy.
    pub proxy_listen: ProxyListen,
    /// Proxy host seen from the container.
    pub container_proxy_host: String,
    /// Proxy port seen from the container.
    pub container_proxy_port: u16,
    /// The relay binary mounted into the container (relay placement).
    pub relay_binary: Option<PathBuf>,
    /// Whether the sandbox cannot reach anything but the proxy: the relay placement, or an advisory proxy
    /// with an egress NetworkPolicy around the pod (kubernetes; as enforced as the cluster's network plugin).
    pub enforced: bool,
    release: Mutex<Option<ReleaseHook>>,
    released: Mutex<Option<Vec<String>>>,
}

impl NetworkLease {
    /// A lease without release work.
    pub fn new(
        kind: DriverKind,
        placement: EgressPlacement,
        proxy_listen: ProxyListen,
        container_proxy_host: impl Into<String>,
        container_proxy_port: u16,
    ) -> Self {
        NetworkLease {
            kind,
            placement,
            proxy_listen,
            container_proxy_host: container_proxy_host.into(),
            container_proxy_port,
            relay_binary: None,
            enforced: placement == EgressPlacement::Relay,
            release: Mutex::new(None),
            released: Mutex::new(None),
        }
    }

    /// Marks the lease enforced by something besides the placement (a NetworkPolicy around the pod).
    pub fn enforced_by_policy(mut self) -> Self {
        self.enforced = true;
        self
    }

    /// Sets the relay binary.
    pub fn with_relay_binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.relay_binary = Some(path.into());
        self
    }

    /// Sets the work [`NetworkLease::release`] does once; it returns error descriptions (never raised).
    pub fn on_release(self, hook: impl FnOnce() -> Vec<String> + Send + 'static) -> Self {
        *self.release.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(hook));
        self
    }

    /// Removes a directory (recursively) on release; a missing directory is fine.
    pub fn remove_dir_on_release(self, dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        self.on_release(move || match std::fs::remove_dir_all(&dir) {
            Ok(()) => Vec::new(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => vec![format!("remove {}: {e}", dir.display())],
        })
    }

    /// The proxy endpoint seen from the container.
    pub fn endpoint(&self) -> ProxyEndpoint {
        ProxyEndpoint {
            host: self.container_proxy_host.clone(),
            port: self.container_proxy_port,
        }
    }

    /// Releases what the lease holds. Idempotent and safe to call concurrently: the hook runs once and every
    /// call returns the errors of that single run.
    pub fn release(&self) -> Vec<String> {
        let mut done = self.released.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(errors) = done.as_ref() {
            return errors.clone();
        }
        let hook = self.release.lock().unwrap_or_else(|e| e.into_inner()).take();
        let errors = hook.map(|h| h()).unwrap_or_default();
        *done = Some(errors.clone());
        errors
    }

    /// Whether [`NetworkLease::release`] has run.
    pub fn is_released(&self) -> bool {
        self.released.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// `Err(ForeignPrepared)` unless produced by `expected`.
    pub fn check_kind(&self, expected: DriverKind) -> crate::Result<()> {
        if self.kind == expected {
            Ok(())
        } else {
            Err(crate::Error::ForeignPrepared {
                expected,
                got: self.kind,
            })
        }
    }
}

impl fmt::Debug for NetworkLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetworkLease")
            .field("kind", &self.kind)
            .field("placement", &self.placement)
            .field("proxy_listen", &self.proxy_listen)
            .field("container_proxy_host", &self.container_proxy_host)
            .field("container_proxy_port", &self.container_proxy_port)
            .field("relay_binary", &self.relay_binary)
            .field("enforced", &self.enforced)
            .field("released", &self.is_released())
            .finish()
    }
}

/// Where a reported mount comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MountOrigin {
    /// The workspace bind.
    Workspace,
    /// The git common directory.
    Git,
    /// A runtime-owned auxiliary mount.
    Aux,
    /// Host state.
    HostState,
    /// A warm package cache.
    Cache,
    /// A protected read-only overlay.
    Protected,
    /// devcontainer.json.
    Devcontainer,
    /// The workflow block.
    Workflow,
    /// A node block.
    Node,
}

/// One mount of a started sandbox.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MountReport {
    /// Host path or volume name.
    pub source: String,
    /// Container path.
    pub target: String,
    /// `bind`, `volume`, `tmpfs`.
    pub kind: String,
    /// Read-only.
    pub read_only: bool,
    /// Origin.
    pub origin: MountOrigin,
}

/// A host-state path that was not mounted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SkippedPath {
    /// The path.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// Where `HOME` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HomeSource {
    /// The host home (tmpfs layering).
    Host,
    /// The image's home.
    #[default]
    Image,
}

/// The container user was remapped to the host uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct UserRemap {
    /// uid.
    pub uid: u32,
    /// gid.
    pub gid: u32,
}

/// The spec pins a user whose uid differs from the host uid.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UidMismatch {
    /// The spec user.
    pub spec_user: String,
    /// The host uid.
    pub host_uid: u32,
}

/// The hardening applied.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct HardeningReport {
    /// `strict` or `compat`.
    pub profile: String,
    /// Capabilities added.
    pub cap_add: Vec<String>,
    /// `no-new-privileges`.
    pub no_new_privileges: bool,
    /// Pids limit.
    pub pids_limit: Option<u64>,
    /// Memory limit.
    pub memory_bytes: Option<u64>,
    /// The OCI runtime the container runs under, as the engine names it (`runsc`, a runtime class);
    /// `None` for the engine's default.
    pub oci_runtime: Option<String>,
}

/// What `start` did (03 §3.8).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[non_exhaustive]
pub struct StartReport {
    /// Container id or pod name.
    pub container_id: String,
    /// Container name.
    pub name: String,
    /// Image reference and digest.
    pub image: ImageReport,
    /// Effective user.
    pub user: Option<String>,
    /// Workspace path inside the sandbox.
    pub workspace: String,
    /// Mounts.
    pub mounts: Vec<MountReport>,
    /// tmpfs targets.
    pub tmpfs: Vec<String>,
    /// Host-state paths not mounted.
    pub host_state_skipped: Vec<SkippedPath>,
    /// Protected files created before start.
    pub protected_created: Vec<String>,
    /// Where `HOME` comes from.
    pub home: HomeSource,
    /// Remap of the container user.
    pub user_remap: Option<UserRemap>,
    /// A pinned user differs from the host uid.
    pub uid_mismatch: Option<UidMismatch>,
    /// Egress placement.
    pub placement: EgressPlacement,
    /// `placement == Relay` (or an enforced NetworkPolicy).
    pub enforced_egress: bool,
    /// Hardening applied.
    pub hardening: HardeningReport,
    /// Limits the engine refused.
    pub limits_ignored: Vec<String>,
    /// Host binds dropped (kubernetes).
    pub host_binds_dropped: Vec<String>,
    /// Whether `bash` is on the shell's `PATH` in the started container, when the driver's own shell probe
    /// found out (`None`: not probed; the runtime probes itself).
    pub bash: Option<bool>,
    /// The start checks' results came from the driver's cache for this image (an earlier start of the same
    /// image id, user, `PATH` and mounts): no check ran at this start, and the sandbox's own processes are
    /// recorded by its first exec instead (docker and podman).
    pub start_checks_cached: bool,
    /// The work dir copied into a sandbox without a host file system (kubernetes).
    #[serde(skip)]
    pub workspace_copy: Option<WorkspaceCopy>,
}

/// One path of a workspace copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopiedEntry {
    /// Relative to the work dir.
    pub path: PathBuf,
    /// SHA-256 of a regular file's content as copied in; `None` for directories and links.
    pub digest: Option<[u8; 32]>,
}

impl CopiedEntry {
    /// A directory or a link.
    pub fn other(path: impl Into<PathBuf>) -> Self {
        CopiedEntry {
            path: path.into(),
            digest: None,
        }
    }

    /// A regular file with the SHA-256 of its content.
    pub fn file(path: impl Into<PathBuf>, digest: [u8; 32]) -> Self {
        CopiedEntry {
            path: path.into(),
            digest: Some(digest),
        }
    }
}

/// A copy of the work dir into the sandbox, which the runtime copies back at cleanup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkspaceCopy {
    /// Regular files copied.
    pub files: u64,
    /// Bytes of regular files copied.
    pub bytes: u64,
    /// Time taken (the archive, the transfer and the git fixup).
    pub duration: Duration,
    /// Every path copied, relative to the work dir, outside `.git` and the run store: what a copy back may
    /// delete when the sandbox deleted it, and leaves alone when the sandbox did not change it.
    pub listing: Arc<Vec<CopiedEntry>>,
    /// Paths relative to the work dir that a copy back never writes (the run store, when inside it).
    pub protect: Vec<PathBuf>,
}

/// Image of a start report.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct ImageReport {
    /// Reference.
    pub reference: String,
    /// Digest, when known.
    pub digest: Option<String>,
}

impl StartReport {
    /// An empty report (drivers fill the fields).
    pub fn new(container_id: impl Into<String>, workspace: impl Into<String>) -> Self {
        StartReport {
            container_id: container_id.into(),
            workspace: workspace.into(),
            ..Self::default()
        }
    }
}

/// State of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxStatus {
    /// Running.
    Running,
    /// The main process ended.
    Exited {
        /// Exit code.
        code: i64,
        /// Killed by the OOM killer.
        oom_killed: bool,
    },
    /// Removed.
    Gone,
}

/// What `Run::cleanup` did. Errors are descriptions, logged at warn level, never raised.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[non_exhaustive]
pub struct CleanupReport {
    /// Container id or pod name.
    pub container_id: String,
    /// Whether the container is gone after cleanup.
    pub container_removed: bool,
    /// Execs still running that were terminated.
    pub execs_terminated: usize,
    /// Problems met.
    pub errors: Vec<String>,
}

impl CleanupReport {
    /// A report for `container_id`.
    pub fn new(container_id: impl Into<String>, container_removed: bool) -> Self {
        CleanupReport {
            container_id: container_id.into(),
            container_removed,
            ..Self::default()
        }
    }
}

/// Kind of a managed engine resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// A container or pod.
    Container,
    /// A network.
    Network,
    /// An image.
    Image,
}

/// A resource labelled `iterion.io/managed=true` (03 §9.2).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ManagedResource {
    /// Kind.
    pub kind: ResourceKind,
    /// Engine id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Creation time, Unix seconds, when known.
    pub created: Option<i64>,
}

/// Whether a resource's owner process is alive (03 §8.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// The owner runs.
    Alive,
    /// The owner is provably dead.
    Dead,
    /// Owned by another host.
    Foreign,
    /// Owner labels missing: never reaped.
    Unknown,
}

/// Outcome of `remove_managed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoveOutcome {
    /// Removed.
    Removed,
    /// Was already gone.
    AlreadyGone,
    /// Refused (the owner is alive or foreign, or a network still has containers).
    Refused {
        /// Why.
        reason: String,
    },
}

/// A tar archive stream given to `copy_in`.
pub type TarSource = Pin<Box<dyn AsyncRead + Send>>;
/// A tar archive stream returned by `copy_out`.
pub type TarStream = Pin<Box<dyn AsyncRead + Send>>;
