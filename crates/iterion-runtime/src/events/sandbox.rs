//! Payloads of the sandbox setup, egress and cleanup events.
use serde::{Deserialize, Serialize, Serializer};
use std::collections::BTreeMap;

use super::data::EventData;
use super::kinds::*;

fn short_container_id<S: Serializer>(id: &str, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&id.chars().take(12).collect::<String>())
}

/// `sandbox_floor_applied` (4.3): one per floor application.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxFloorApplied {
    /// `ITERION_SANDBOX_FLOOR` or `ITERION_SANDBOX_HOST_STATE_GUARD`.
    pub floor: String,
    /// The floor's value.
    pub value: String,
    /// Scope the floor raised.
    pub scope: FloorScope,
    /// Node of a node scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Value before.
    pub from: String,
    /// Value after.
    pub to: String,
    /// Source of the shadowed value.
    pub shadowed_source: String,
}
impl EventData for SandboxFloorApplied {
    const TYPE: &'static str = "sandbox_floor_applied";
    data_node_id!(Self);
}

/// `sandbox_network_defaulted` (4.3): a repository-defined sandbox without a network base.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxNetworkDefaulted {
    /// `allowlist`.
    pub mode: String,
    /// `iterion-default`.
    pub preset: String,
    /// Count of the workflow's extra rules.
    pub rules: u64,
    /// Path of the devcontainer.json.
    pub devcontainer: String,
    /// Why.
    pub reason: String,
}
impl EventData for SandboxNetworkDefaulted {
    const TYPE: &'static str = "sandbox_network_defaulted";
}

/// `sandbox_resolved` (4.3, always).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxResolved {
    /// Whether any scope is sandboxed.
    pub active: bool,
    /// Run-scope mode.
    pub mode: String,
    /// Tier that produced the mode.
    pub source: String,
    /// Origin of the spec (`devcontainer`, `image`, `build`, `default_image`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Image reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Whether the spec builds an image.
    pub build: bool,
    /// devcontainer.json path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devcontainer: Option<String>,
    /// `auto` or `none`.
    pub host_state: String,
    /// Tier that produced host_state.
    pub host_state_source: String,
    /// Run-scope network mode.
    pub network_mode: String,
    /// Run-scope network preset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_preset: Option<String>,
    /// Node id → placement.
    pub placements: BTreeMap<String, PlacementKind>,
    /// Count of resolution warnings.
    pub warnings: u64,
}
impl EventData for SandboxResolved {
    const TYPE: &'static str = "sandbox_resolved";
}

/// `sandbox_skipped` (4.4): a scope degraded to unsandboxed, or a node override ignored on the host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxSkipped {
    /// `none` or `noop`.
    pub driver: String,
    /// Mode of the scope.
    pub mode: String,
    /// Tier of the mode.
    pub source: String,
    /// Why.
    pub reason: String,
    /// Node of a node scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Reserved for file-delivered secrets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_secrets_dropped: Option<bool>,
}
impl EventData for SandboxSkipped {
    const TYPE: &'static str = "sandbox_skipped";
    data_node_id!(Self);
}

/// One entry of the env merge report (names and rules only, never values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvDeniedEntry {
    /// Variable name.
    pub name: String,
    /// Layer it came from (`devcontainer.containerEnv`, `workflow`, …).
    pub source: String,
    /// What happened.
    pub action: EnvAction,
    /// Rule (`suffix:_TOKEN`, `reserved:proxy`).
    pub reason: String,
    /// Deny category.
    pub category: String,
}

/// `sandbox_env_denied` (4.5): a non-empty merge report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxEnvDenied {
    /// `run` or a node id.
    pub sandbox: String,
    /// Sorted, de-duplicated names (sorted again on serialisation).
    #[serde(serialize_with = "sorted_unique")]
    pub names: Vec<String>,
    /// Report entries.
    pub entries: Vec<EnvDeniedEntry>,
    /// `DENY_CLASS_VERSION` of the env deny list.
    pub deny_class_version: u32,
}
impl EventData for SandboxEnvDenied {
    const TYPE: &'static str = "sandbox_env_denied";
}

fn sorted_unique<S: Serializer>(names: &[String], s: S) -> std::result::Result<S::Ok, S::Error> {
    let mut v: Vec<&String> = names.iter().collect();
    v.sort();
    v.dedup();
    s.collect_seq(v)
}

/// `sandbox_host_binds_dropped` (4.6 step 1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxHostBindsDropped {
    /// Driver name.
    pub driver: String,
    /// Container paths of the dropped binds.
    pub binds: Vec<String>,
    /// Why.
    pub reason: String,
}
impl EventData for SandboxHostBindsDropped {
    const TYPE: &'static str = "sandbox_host_binds_dropped";
}

/// `sandbox_user_remap` (4.6 step 6).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxUserRemap {
    /// Host uid.
    pub uid: u32,
    /// Host gid.
    pub gid: u32,
    /// Why.
    pub reason: String,
}
impl EventData for SandboxUserRemap {
    const TYPE: &'static str = "sandbox_user_remap";
}

/// `sandbox_uid_mismatch_warning` (4.6 step 6).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxUidMismatchWarning {
    /// The spec's user.
    pub spec_user: String,
    /// Host uid.
    pub host_uid: u32,
}
impl EventData for SandboxUidMismatchWarning {
    const TYPE: &'static str = "sandbox_uid_mismatch_warning";
}

/// A host-state path that was not mounted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedPath {
    /// Host path.
    pub path: String,
    /// Why (`overlaps the workspace`, …).
    pub reason: String,
}

/// `sandbox_host_state_mounted` (4.6 step 9); only `enabled` and `source` when host_state is `none`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxHostStateMounted {
    /// Whether host state is mounted.
    pub enabled: bool,
    /// Tier of host_state.
    pub source: String,
    /// Workspace folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace_folder: Option<String>,
    /// `<host>:<container>[:ro]` entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mounts: Option<Vec<String>>,
    /// Warm caches bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caches: Option<Vec<String>>,
    /// Protected (read-only) paths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protected: Option<Vec<String>>,
    /// Files and directories created for protection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<Vec<String>>,
    /// Paths not mounted, with reasons.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Vec<SkippedPath>>,
    /// Whose HOME the container uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home: Option<HomeSource>,
    /// Whether HOME is layered with tmpfs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home_tmpfs: Option<bool>,
}
impl EventData for SandboxHostStateMounted {
    const TYPE: &'static str = "sandbox_host_state_mounted";
}

/// `sandbox_network_started` (4.7): any policy other than `open` (never the token).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxNetworkStarted {
    /// Driver name.
    pub driver: String,
    /// Policy mode.
    pub mode: String,
    /// Policy preset.
    pub preset: Option<String>,
    /// Count of rules.
    pub rules: u64,
    /// Egress placement.
    pub placement: NetworkPlacement,
    /// Proxy address without credentials (socket path or `addr:port`).
    pub proxy: String,
    /// Whether egress is enforced.
    pub enforced: bool,
    /// Node ids with their own policy.
    pub node_overrides: Vec<String>,
    /// Whether the proxy inspects TLS (the run has secret bindings); its CA is in the containers' trust.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls_inspection: bool,
    /// The run's secret bindings: names, hosts, delivery and who bound them (never a value or placeholder).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<crate::lifecycle::secrets::SecretInfo>,
}
impl EventData for SandboxNetworkStarted {
    const TYPE: &'static str = "sandbox_network_started";
}

/// `sandbox_network_advisory` (4.7): advisory placement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxNetworkAdvisory {
    /// Driver name.
    pub driver: String,
    /// Engine description.
    pub engine: String,
    /// Why egress cannot be enforced.
    pub reason: String,
}
impl EventData for SandboxNetworkAdvisory {
    const TYPE: &'static str = "sandbox_network_advisory";
}

/// `sandbox_image_ready` (4.8).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxImageReady {
    /// Image reference.
    pub image: String,
    /// Image digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Whether it was pulled.
    pub pulled: bool,
    /// Duration in milliseconds.
    pub duration_ms: u64,
    /// Node of a node container spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}
impl EventData for SandboxImageReady {
    const TYPE: &'static str = "sandbox_image_ready";
    data_node_id!(Self);
}

/// `sandbox_claw_routed_via_runner` (after 4.8).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxClawRoutedViaRunner {
    /// Why.
    pub reason: String,
    /// Claw node ids.
    pub nodes: Vec<String>,
    /// Where the binary comes from.
    pub binary: RunnerBinary,
    /// Host path of a mounted binary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
}
impl EventData for SandboxClawRoutedViaRunner {
    const TYPE: &'static str = "sandbox_claw_routed_via_runner";
}

/// `sandbox_build_started` (4.9).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxBuildStarted {
    /// Driver name.
    pub driver: String,
    /// Dockerfile path.
    pub dockerfile: String,
    /// Build context.
    pub context: String,
    /// Build target stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The network of the build: `none` under `allowlist`/`denylist`, `open` under `open`.
    pub network: String,
    /// `hit` when an image built earlier from the same inputs is reused, `miss` when the engine builds.
    pub cache: String,
    /// `buildkit` or `classic`.
    pub builder: String,
    /// Why this builder, when it was not asked for explicitly (a fallback, or `auto`'s reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub builder_reason: Option<String>,
    /// Node of a node container spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}
impl EventData for SandboxBuildStarted {
    const TYPE: &'static str = "sandbox_build_started";
    data_node_id!(Self);
}

/// `sandbox_build_finished` (4.9).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxBuildFinished {
    /// Driver name.
    pub driver: String,
    /// Built image reference.
    pub target: String,
    /// Duration in milliseconds.
    pub duration_ms: u64,
    /// The network the build had (`none` or `open`).
    pub network: String,
    /// `hit` when an image built earlier from the same inputs was reused, `miss` when the engine built.
    pub cache: String,
    /// `buildkit` or `classic`.
    pub builder: String,
    /// Node of a node container spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}
impl EventData for SandboxBuildFinished {
    const TYPE: &'static str = "sandbox_build_finished";
    data_node_id!(Self);
}

/// `sandbox_build_failed` (4.9).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxBuildFailed {
    /// Driver name.
    pub driver: String,
    /// Message with the last 4 KiB of build output.
    pub error: String,
    /// `buildkit` or `classic`; absent when the build failed before a builder was chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub builder: Option<String>,
    /// Node of a node container spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}
impl EventData for SandboxBuildFailed {
    const TYPE: &'static str = "sandbox_build_failed";
    data_node_id!(Self);
}

/// `sandbox_workspace_copied` (4.10, kubernetes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxWorkspaceCopied {
    /// Files copied.
    pub files: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Duration in milliseconds.
    pub duration_ms: u64,
}
impl EventData for SandboxWorkspaceCopied {
    const TYPE: &'static str = "sandbox_workspace_copied";
}

/// `sandbox_post_create_started` (4.11).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxPostCreateStarted {
    /// Number of commands.
    pub commands: u64,
    /// Node of a node container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}
impl EventData for SandboxPostCreateStarted {
    const TYPE: &'static str = "sandbox_post_create_started";
    data_node_id!(Self);
}

/// `sandbox_post_create_finished` (4.11).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxPostCreateFinished {
    /// Exit code of the last command run.
    pub exit_code: i64,
    /// Duration in milliseconds.
    pub duration_ms: u64,
    /// Node of a node container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}
impl EventData for SandboxPostCreateFinished {
    const TYPE: &'static str = "sandbox_post_create_finished";
    data_node_id!(Self);
}

/// `sandbox_started` (4.12).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxStarted {
    /// Driver name.
    pub driver: String,
    /// Mode.
    pub mode: String,
    /// Tier of the mode.
    pub source: String,
    /// Origin of the spec.
    pub origin: String,
    /// Image reference.
    pub image: String,
    /// Container id (serialised as its first 12 characters).
    #[serde(serialize_with = "short_container_id")]
    pub container: String,
    /// Workspace folder.
    pub workspace_folder: String,
    /// Effective user.
    pub user: String,
    /// Whether post-create commands ran.
    pub has_post_create: bool,
    /// Network mode.
    pub network_mode: String,
    /// Whether egress is enforced.
    pub enforced_egress: bool,
    /// `bash` or `sh`.
    pub shell: String,
    /// The OCI runtime the container runs under.
    pub runtime: RuntimeRecord,
    /// Duration in milliseconds.
    pub duration_ms: u64,
}

/// The OCI runtime of a started sandbox: what was asked, by which rule, and the engine's name for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuntimeRecord {
    /// `default`, `gvisor`, `kata` or a runtime name (`sandbox.runtime`).
    pub name: String,
    /// The rule that chose it (`workflow sandbox.runtime`, `ITERION_SANDBOX_RUNTIME_FLOOR`, `default`, …).
    pub source: String,
    /// The engine's name of the runtime (`runsc`, a runtime class), `default` for the engine's default.
    pub engine: String,
}

impl RuntimeRecord {
    /// The record of a sandbox's runtime choice and the name the driver reported.
    pub fn of(choice: &iterion_spec::resolved::RuntimeChoice, engine: Option<&str>) -> Self {
        RuntimeRecord {
            name: choice.name.to_string(),
            source: choice.source.clone(),
            engine: engine.unwrap_or("default").to_owned(),
        }
    }
}
impl EventData for SandboxStarted {
    const TYPE: &'static str = "sandbox_started";
}

/// `sandbox_node_container_started` (5.2); node-scoped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxNodeContainerStarted {
    /// Node whose first execution started the container.
    pub node_id: String,
    /// Spec key.
    pub key: String,
    /// Image reference.
    pub image: String,
    /// Container id (first 12 characters).
    #[serde(serialize_with = "short_container_id")]
    pub container: String,
    /// Duration in milliseconds.
    pub duration_ms: u64,
}
impl EventData for SandboxNodeContainerStarted {
    const TYPE: &'static str = "sandbox_node_container_started";
    scoped_node_id!();
}

/// `sandbox_stopped` (4.14, section 8): the last event of an invocation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxStopped {
    /// Driver name.
    pub driver: String,
    /// Containers removed.
    pub containers: u64,
    /// Whether the network lease was released.
    pub network_removed: bool,
    /// Whether the proxy was stopped.
    pub proxy_stopped: bool,
    /// Images removed: 0, since built images are the build cache, kept across runs.
    pub images_removed: u64,
    /// Duration in milliseconds.
    pub duration_ms: u64,
    /// Cleanup failures.
    pub errors: Vec<String>,
}
impl EventData for SandboxStopped {
    const TYPE: &'static str = "sandbox_stopped";
}

/// `network_blocked` (4.7): a proxy denial, de-duplicated; node-scoped when the node is known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkBlocked {
    /// Requested host.
    pub host: String,
    /// Requested port.
    pub port: u16,
    /// Why.
    pub reason: BlockReason,
    /// The deciding rule, `no rule matched`, `non-global address` or the secret rule text.
    pub rule: String,
    /// Proxy decision id.
    pub decision_id: String,
    /// Run id.
    pub run_id: String,
    /// Node of the credential.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Identical denials suppressed since the previous event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<u64>,
    /// The refused address (`non-global address`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Secret name (`secret leak`), never its value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}
impl EventData for NetworkBlocked {
    const TYPE: &'static str = "network_blocked";
    data_node_id!(Self);
}

/// `secret_substituted` (4.7): TLS inspection substituted a secret binding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SecretSubstituted {
    /// Secret name only.
    pub secret: String,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Node of the credential.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Proxy decision id.
    pub decision_id: String,
    /// Substitutions made.
    pub count: u64,
}
impl EventData for SecretSubstituted {
    const TYPE: &'static str = "secret_substituted";
    data_node_id!(Self);
}
