//! The event catalogue (section 6) and the `events.jsonl` line format (section 1.3).
//!
//! Every event is a typed data struct whose fields are exactly the `data` keys of the specification; the
//! [`Event`] enum wraps them so the lifecycle can only emit well-formed events. [`encode_line`] produces the
//! stored line (keys `seq`, `timestamp`, `type`, `run_id`, `node_id?`, `data`), applying the size limits.
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::failure::{FailureCode, FailurePhase};
use crate::status::RunStatus;

/// A `data` value whose compact JSON exceeds this many bytes is replaced by `{"_truncated": true, "bytes": n}`.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;

/// A stored line must stay below this many bytes.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Formats a time as RFC 3339 in UTC with `Z`, up to 9 fractional digits, trailing zeros of the fraction
/// removed (`2026-01-14T09:31:07.52Z`, `2026-01-14T09:31:07Z`). Times before 1970 are clamped to the epoch.
pub fn format_timestamp(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    let (y, m, day) = civil_from_days(days);
    let mut out = format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// The current time in the format of [`format_timestamp`].
pub fn now_timestamp() -> String {
    format_timestamp(SystemTime::now())
}

/// Parses an RFC 3339 time (any offset) as written in `run.json` and `events.jsonl`; `None` when invalid.
pub fn parse_timestamp(s: &str) -> Option<SystemTime> {
    let t: jiff::Timestamp = s.parse().ok()?;
    Some(SystemTime::from(t))
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Where a node executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// On the host, in the work dir.
    Host,
    /// In the run container.
    Run,
    /// In a node container of its own.
    Own,
}

/// Scope of a floor application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FloorScope {
    /// The run scope.
    Run,
    /// A node scope.
    Node,
}

/// What the env merge did to a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvAction {
    /// A deny-class name was removed.
    Removed,
    /// A reserved name's lower-layer value was overridden.
    Overridden,
}

/// Egress placement of the run network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkPlacement {
    /// Relay inside a `NetworkMode: none` container, proxy on a Unix socket.
    Relay,
    /// Proxy on host loopback, not enforced.
    Advisory,
    /// Kubernetes NetworkPolicy.
    K8s,
}

/// Where the claw runner binary comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerBinary {
    /// Host binary bound read-only.
    Mounted,
    /// `iterion` on the image's PATH.
    Image,
}

/// Whose `HOME` the container uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HomeSource {
    /// `HOME=<host home>`.
    Host,
    /// Left to the image.
    Image,
}

/// Kind of an executing node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// Agent node.
    Agent,
    /// Judge node.
    Judge,
    /// Tool node.
    Tool,
}

/// How an agent backend is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelegateVia {
    /// Through `iterion __claw-runner` envelopes.
    Runner,
    /// Through the agent CLI.
    Cli,
}

/// Why the proxy refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlockReason {
    /// No rule allowed the target.
    #[serde(rename = "policy denial")]
    PolicyDenial,
    /// The target resolved to a non-global address.
    #[serde(rename = "non-global address")]
    NonGlobalAddress,
    /// TLS inspection found a secret in the request.
    #[serde(rename = "secret leak")]
    SecretLeak,
}

/// A budget amount: an integer (tokens, iterations, milliseconds) or a cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BudgetValue {
    /// Integer dimensions.
    Int(u64),
    /// `max_cost_usd`.
    Float(f64),
}

fn short_container_id<S: Serializer>(id: &str, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&id.chars().take(12).collect::<String>())
}

/// One `data` payload of the catalogue.
pub trait EventData: Serialize {
    /// The event `type`.
    const TYPE: &'static str;
    /// The top-level `node_id` of the line, when the event is node-scoped.
    fn node_id(&self) -> Option<&str> {
        None
    }
}

macro_rules! data_node_id {
    ($t:ty) => {
        fn node_id(&self) -> Option<&str> {
            self.node_id.as_deref()
        }
    };
}

macro_rules! scoped_node_id {
    () => {
        fn node_id(&self) -> Option<&str> {
            Some(&self.node_id)
        }
    };
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
    pub placements: BTreeMap<String, Placement>,
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
    /// Duration in milliseconds.
    pub duration_ms: u64,
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
    /// Images removed.
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

/// `run_started` (4.13).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunStarted {
    /// Workflow name.
    pub workflow: String,
    /// Workflow file.
    pub file: String,
    /// Whether the run scope is sandboxed.
    pub sandboxed: bool,
    /// Driver name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}
impl EventData for RunStarted {
    const TYPE: &'static str = "run_started";
}

/// `run_resumed` (section 9), before `run_started` of the resumed invocation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResumed {
    /// Previous status.
    pub resumed_from: RunStatus,
    /// Node executed again.
    pub restart_node: String,
    /// Code of the previous failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<FailureCode>,
}
impl EventData for RunResumed {
    const TYPE: &'static str = "run_resumed";
}

/// `run_finished`: `done` reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFinished {
    /// Duration in milliseconds.
    pub duration_ms: u64,
}
impl EventData for RunFinished {
    const TYPE: &'static str = "run_finished";
}

/// `run_failed`: any failure. Build it with [`RunFailed::new`] so `resumable` follows the code's class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFailed {
    /// Human-readable error.
    pub error: String,
    /// Failure code.
    pub code: FailureCode,
    /// Whether the code is of class resumable.
    pub resumable: bool,
    /// Setup phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<FailurePhase>,
    /// The bound that expired (`SANDBOX_SETUP_TIMEOUT`), e.g. `100ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// The offending field (`SANDBOX_SPEC_INVALID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Node involved (for `FAIL_NODE_REACHED`: the source node of the edge to `fail`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}
impl EventData for RunFailed {
    const TYPE: &'static str = "run_failed";
}

impl RunFailed {
    /// A failure with `resumable` derived from the code's class.
    pub fn new(code: FailureCode, error: impl Into<String>) -> RunFailed {
        RunFailed {
            error: error.into(),
            code,
            resumable: code.is_resumable(),
            phase: None,
            timeout: None,
            detail: None,
            hint: None,
            node_id: None,
        }
    }

    /// Sets `phase`.
    pub fn phase(mut self, phase: FailurePhase) -> Self {
        self.phase = Some(phase);
        self
    }

    /// Sets `timeout`.
    pub fn timeout(mut self, timeout: impl Into<String>) -> Self {
        self.timeout = Some(timeout.into());
        self
    }

    /// Sets `detail`.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Sets `hint`.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Sets `node_id`.
    pub fn node(mut self, node_id: impl Into<String>) -> Self {
        self.node_id = Some(node_id.into());
        self
    }
}

/// `run_cancelled`: cancellation (`code` is always `CANCELLED`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunCancelled {
    /// Why (`signal SIGINT`).
    pub reason: String,
    /// Always [`FailureCode::Cancelled`].
    pub code: FailureCode,
}
impl EventData for RunCancelled {
    const TYPE: &'static str = "run_cancelled";
}

impl RunCancelled {
    /// A cancellation with code `CANCELLED`.
    pub fn new(reason: impl Into<String>) -> RunCancelled {
        RunCancelled {
            reason: reason.into(),
            code: FailureCode::Cancelled,
        }
    }
}

/// `node_started`: before each node (for `done`/`fail` only `iteration`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeStarted {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Kind (absent for `done`/`fail`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<NodeKind>,
    /// Execution count of this node in the run, from 0.
    pub iteration: u64,
    /// Placement (absent for `done`/`fail`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}
impl EventData for NodeStarted {
    const TYPE: &'static str = "node_started";
    scoped_node_id!();
}

impl NodeStarted {
    /// An executing node.
    pub fn new(node_id: impl Into<String>, kind: NodeKind, iteration: u64, placement: Placement) -> Self {
        NodeStarted {
            node_id: node_id.into(),
            kind: Some(kind),
            iteration,
            placement: Some(placement),
        }
    }

    /// The `done` or `fail` node.
    pub fn terminal(node_id: impl Into<String>, iteration: u64) -> Self {
        NodeStarted {
            node_id: node_id.into(),
            kind: None,
            iteration,
            placement: None,
        }
    }
}

/// `node_finished`: after each successful node (terminal nodes: empty `data`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeFinished {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Output (absent for `done`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Duration in milliseconds (absent for `done`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Tokens reported by an agent.
    #[serde(rename = "_tokens", skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost reported by an agent.
    #[serde(rename = "_cost_usd", skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}
impl EventData for NodeFinished {
    const TYPE: &'static str = "node_finished";
    scoped_node_id!();
}

impl NodeFinished {
    /// An executing node's success.
    pub fn new(node_id: impl Into<String>, output: Value, duration_ms: u64) -> Self {
        NodeFinished {
            node_id: node_id.into(),
            output: Some(output),
            duration_ms: Some(duration_ms),
            tokens: None,
            cost_usd: None,
        }
    }

    /// The `done` node (empty `data`).
    pub fn terminal(node_id: impl Into<String>) -> Self {
        NodeFinished {
            node_id: node_id.into(),
            output: None,
            duration_ms: None,
            tokens: None,
            cost_usd: None,
        }
    }
}

/// `edge_selected`: after edge selection (run-scoped).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeSelected {
    /// Source node.
    pub from: String,
    /// Target node.
    pub to: String,
    /// `when` field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// `when not`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub negated: Option<bool>,
    /// `when "EXPR"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    /// Loop name.
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
    /// Loop counter after taking the edge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u64>,
}
impl EventData for EdgeSelected {
    const TYPE: &'static str = "edge_selected";
}

/// `node_recovery`: before each retry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRecovery {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Error code being retried.
    pub code: FailureCode,
    /// Why the retry happens.
    pub reason: String,
    /// Retry number, from 1.
    pub attempt: u32,
    /// Delay before the retry.
    pub delay_ms: u64,
    /// The error.
    pub error: String,
}
impl EventData for NodeRecovery {
    const TYPE: &'static str = "node_recovery";
    scoped_node_id!();
}

/// `tool_started`: tool node (and builtin tools reported by the runner).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolStarted {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// `shell:<id>` or `script:<language>:<id>`.
    pub tool: String,
    /// Byte length of the rendered command or script.
    pub input_size: u64,
}
impl EventData for ToolStarted {
    const TYPE: &'static str = "tool_started";
    scoped_node_id!();
}

/// `tool_called`: success (exactly one per tool-node execution).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCalled {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Tool name.
    pub tool: String,
    /// Input size in bytes.
    pub input_size: u64,
    /// Duration in milliseconds.
    pub duration_ms: u64,
    /// Exit code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}
impl EventData for ToolCalled {
    const TYPE: &'static str = "tool_called";
    scoped_node_id!();
}

/// `tool_error`: failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolError {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Tool name.
    pub tool: String,
    /// The error.
    pub error: String,
    /// Exit code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Duration in milliseconds.
    pub duration_ms: u64,
}
impl EventData for ToolError {
    const TYPE: &'static str = "tool_error";
    scoped_node_id!();
}

/// `delegate_started`: agent/judge start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DelegateStarted {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Backend (`claw`, `claude_code`).
    pub backend: String,
    /// Placement.
    pub placement: Placement,
    /// How the backend is driven.
    pub via: DelegateVia,
}
impl EventData for DelegateStarted {
    const TYPE: &'static str = "delegate_started";
    scoped_node_id!();
}

/// `delegate_finished`: agent/judge success.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DelegateFinished {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Backend.
    pub backend: String,
    /// Tokens used.
    pub tokens: u64,
    /// Cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Duration in milliseconds.
    pub duration_ms: u64,
}
impl EventData for DelegateFinished {
    const TYPE: &'static str = "delegate_finished";
    scoped_node_id!();
}

/// `delegate_error`: agent/judge failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DelegateError {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Backend.
    pub backend: String,
    /// The error.
    pub error: String,
}
impl EventData for DelegateError {
    const TYPE: &'static str = "delegate_error";
    scoped_node_id!();
}

/// `budget_warning` (10.8): a dimension reached 80 % of its limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetWarning {
    /// `max_duration`, `max_tokens`, `max_cost_usd` or `max_iterations`.
    pub dimension: String,
    /// Amount used.
    pub used: BudgetValue,
    /// The limit.
    pub limit: BudgetValue,
}
impl EventData for BudgetWarning {
    const TYPE: &'static str = "budget_warning";
}

/// `budget_exceeded` (10.8): a dimension reached its limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetExceeded {
    /// Dimension.
    pub dimension: String,
    /// Amount used.
    pub used: BudgetValue,
    /// The limit.
    pub limit: BudgetValue,
}
impl EventData for BudgetExceeded {
    const TYPE: &'static str = "budget_exceeded";
}

/// `artifact_written`: a node with `publish:`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArtifactWritten {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Artifact name.
    pub publish: String,
    /// Version written.
    pub version: u64,
}
impl EventData for ArtifactWritten {
    const TYPE: &'static str = "artifact_written";
    scoped_node_id!();
}

/// Inner event types the claw runner may forward (10.5.3); any other type is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardedType {
    /// `llm_request`.
    LlmRequest,
    /// `llm_step_finished`.
    LlmStepFinished,
    /// `llm_retry`.
    LlmRetry,
    /// `llm_compacted`.
    LlmCompacted,
    /// `tool_started` of a runner builtin tool.
    ToolStarted,
    /// `tool_called` of a runner builtin tool.
    ToolCalled,
    /// `tool_error` of a runner builtin tool.
    ToolError,
}

impl ForwardedType {
    /// The allowed type named `s`, or `None` (the container must not forge run or sandbox events).
    pub fn parse(s: &str) -> Option<ForwardedType> {
        Some(match s {
            "llm_request" => ForwardedType::LlmRequest,
            "llm_step_finished" => ForwardedType::LlmStepFinished,
            "llm_retry" => ForwardedType::LlmRetry,
            "llm_compacted" => ForwardedType::LlmCompacted,
            "tool_started" => ForwardedType::ToolStarted,
            "tool_called" => ForwardedType::ToolCalled,
            "tool_error" => ForwardedType::ToolError,
            _ => return None,
        })
    }

    /// The event type.
    pub fn as_str(self) -> &'static str {
        match self {
            ForwardedType::LlmRequest => "llm_request",
            ForwardedType::LlmStepFinished => "llm_step_finished",
            ForwardedType::LlmRetry => "llm_retry",
            ForwardedType::LlmCompacted => "llm_compacted",
            ForwardedType::ToolStarted => "tool_started",
            ForwardedType::ToolCalled => "tool_called",
            ForwardedType::ToolError => "tool_error",
        }
    }
}

/// An event forwarded from the claw runner: opaque data, node-scoped.
#[derive(Debug, Clone, PartialEq)]
pub struct Forwarded {
    /// The node the runner serves.
    pub node_id: String,
    /// Allowed inner type.
    pub kind: ForwardedType,
    /// Data as sent by the runner.
    pub data: Map<String, Value>,
}

impl Forwarded {
    /// A forwarded event, or `None` when `inner_type` is not one the runner may send (e.g. `run_finished`).
    pub fn new(node_id: impl Into<String>, inner_type: &str, data: Map<String, Value>) -> Option<Forwarded> {
        Some(Forwarded {
            node_id: node_id.into(),
            kind: ForwardedType::parse(inner_type)?,
            data,
        })
    }
}

macro_rules! catalogue {
    ($( $variant:ident ),* $(,)?) => {
        /// Every event of the catalogue (section 6).
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum Event {
            $(
                #[doc = concat!("See [`", stringify!($variant), "`].")]
                $variant($variant),
            )*
            /// An event forwarded from the claw runner.
            Forwarded(Forwarded),
        }

        $(
            impl From<$variant> for Event {
                fn from(d: $variant) -> Event {
                    Event::$variant(d)
                }
            }
        )*

        impl From<Forwarded> for Event {
            fn from(f: Forwarded) -> Event {
                Event::Forwarded(f)
            }
        }

        impl Event {
            /// The event `type`.
            pub fn event_type(&self) -> &'static str {
                match self {
                    $(Event::$variant(_) => <$variant as EventData>::TYPE,)*
                    Event::Forwarded(f) => f.kind.as_str(),
                }
            }

            /// The top-level `node_id` of the stored line, for node-scoped events.
            pub fn node_id(&self) -> Option<&str> {
                match self {
                    $(Event::$variant(d) => d.node_id(),)*
                    Event::Forwarded(f) => Some(f.node_id.as_str()),
                }
                .filter(|n| !n.is_empty())
            }

            /// The `data` object.
            pub fn data(&self) -> Result<Map<String, Value>> {
                let value = match self {
                    $(Event::$variant(d) => serde_json::to_value(d),)*
                    Event::Forwarded(f) => return Ok(f.data.clone()),
                }
                .map_err(|source| Error::Encode { what: "event data", source })?;
                match value {
                    Value::Object(m) => Ok(m),
                    _ => Ok(Map::new()),
                }
            }
        }

        /// The event types of the catalogue, forwarded runner types included.
        pub const EVENT_TYPES: &[&str] = &[
            $(<$variant as EventData>::TYPE,)*
            "llm_request", "llm_step_finished", "llm_retry", "llm_compacted",
        ];
    };
}

catalogue!(
    SandboxFloorApplied,
    SandboxNetworkDefaulted,
    SandboxResolved,
    SandboxSkipped,
    SandboxEnvDenied,
    SandboxHostBindsDropped,
    SandboxUserRemap,
    SandboxUidMismatchWarning,
    SandboxHostStateMounted,
    SandboxNetworkStarted,
    SandboxNetworkAdvisory,
    SandboxImageReady,
    SandboxClawRoutedViaRunner,
    SandboxBuildStarted,
    SandboxBuildFinished,
    SandboxBuildFailed,
    SandboxWorkspaceCopied,
    SandboxPostCreateStarted,
    SandboxPostCreateFinished,
    SandboxStarted,
    SandboxNodeContainerStarted,
    SandboxStopped,
    NetworkBlocked,
    SecretSubstituted,
    RunStarted,
    RunResumed,
    RunFinished,
    RunFailed,
    RunCancelled,
    NodeStarted,
    NodeFinished,
    EdgeSelected,
    NodeRecovery,
    ToolStarted,
    ToolCalled,
    ToolError,
    DelegateStarted,
    DelegateFinished,
    DelegateError,
    BudgetWarning,
    BudgetExceeded,
    ArtifactWritten,
);

fn truncated(bytes: usize) -> Value {
    serde_json::json!({"_truncated": true, "bytes": bytes})
}

fn json_len(v: &Value) -> usize {
    serde_json::to_string(v).map(|s| s.len()).unwrap_or(usize::MAX)
}

/// Applies the size rules of 1.3 to a `data` object: each value whose compact JSON exceeds
/// [`MAX_VALUE_BYTES`] becomes `{"_truncated": true, "bytes": <size>}`; if the object is still too large for
/// a line, the largest remaining values are truncated the same way until it fits.
pub fn limit_data(data: &mut Map<String, Value>) {
    let mut sizes: Vec<(String, usize)> = Vec::new();
    for (k, v) in data.iter_mut() {
        let n = json_len(v);
        if n > MAX_VALUE_BYTES {
            *v = truncated(n);
        } else {
            sizes.push((k.clone(), n));
        }
    }
    // Leave room for the envelope keys (seq, timestamp, type, ids).
    let budget = MAX_LINE_BYTES - 4096;
    let mut total: usize = data.iter().map(|(k, v)| k.len() + 4 + json_len(v)).sum();
    sizes.sort_by_key(|s| std::cmp::Reverse(s.1));
    for (k, n) in sizes {
        if total < budget {
            break;
        }
        if let Some(v) = data.get_mut(&k) {
            let t = truncated(n);
            total = total - n + json_len(&t);
            *v = t;
        }
    }
}

/// Encodes one `events.jsonl` line (without the trailing LF): keys in the order `seq`, `timestamp`, `type`,
/// `run_id`, `node_id` (when node-scoped), `data`, with the size rules of [`limit_data`] applied.
pub fn encode_line(seq: u64, timestamp: &str, run_id: &str, event: &Event) -> Result<String> {
    let mut data = event.data()?;
    limit_data(&mut data);
    let mut line = Map::new();
    line.insert("seq".into(), Value::from(seq));
    line.insert("timestamp".into(), Value::from(timestamp));
    line.insert("type".into(), Value::from(event.event_type()));
    line.insert("run_id".into(), Value::from(run_id));
    if let Some(node) = event.node_id() {
        line.insert("node_id".into(), Value::from(node));
    }
    line.insert("data".into(), Value::Object(data));
    serde_json::to_string(&line).map_err(|source| Error::Encode {
        what: "event line",
        source,
    })
}

/// One decoded `events.jsonl` line. Unknown event types and unknown `data` keys are kept as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Sequence number.
    pub seq: u64,
    /// RFC 3339 UTC time.
    pub timestamp: String,
    /// Event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Run id.
    pub run_id: String,
    /// Node of a node-scoped event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Reserved (no fan-out in this version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_id: Option<String>,
    /// Event data.
    #[serde(default)]
    pub data: Map<String, Value>,
}

impl EventRecord {
    /// Decodes one line; `None` for blank or undecodable lines (readers skip them).
    pub fn decode(line: &str) -> Option<EventRecord> {
        let t = line.trim();
        if t.is_empty() {
            return None;
        }
        serde_json::from_str(t).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    fn check_ts(secs: u64, nanos: u32, expect: &str) {
        assert_eq!(format_timestamp(at(secs, nanos)), expect);
    }

    #[test]
    fn timestamps() {
        // ST7: 2026-01-14T09:31:07 UTC is 1768383067.
        check_ts(1_768_383_067, 520_000_000, "2026-01-14T09:31:07.52Z");
        check_ts(1_768_383_067, 0, "2026-01-14T09:31:07Z");
        check_ts(1_768_383_067, 1, "2026-01-14T09:31:07.000000001Z");
        check_ts(1_768_383_067, 123_456_789, "2026-01-14T09:31:07.123456789Z");
        check_ts(0, 0, "1970-01-01T00:00:00Z");
        check_ts(951_782_400, 0, "2000-02-29T00:00:00Z");
        check_ts(4_107_542_399, 0, "2100-02-28T23:59:59Z");
    }

    #[test]
    fn timestamp_matches_jiff() {
        for secs in [0u64, 86_399, 1_000_000_000, 1_768_383_067, 4_102_444_800] {
            let ours = format_timestamp(at(secs, 0));
            let theirs = jiff::Timestamp::from_second(i64::try_from(secs).unwrap())
                .unwrap()
                .to_string();
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn timestamps_parse_back() {
        for (secs, nanos) in [(1_768_383_067u64, 520_000_000u32), (0, 0), (1_768_383_067, 1)] {
            let t = at(secs, nanos);
            assert_eq!(parse_timestamp(&format_timestamp(t)), Some(t));
        }
        assert_eq!(
            parse_timestamp("2026-01-14T10:31:07+01:00"),
            Some(at(1_768_383_067, 0))
        );
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn forged_runner_events_are_dropped() {
        assert!(Forwarded::new("n", "run_finished", Map::new()).is_none());
        assert!(Forwarded::new("n", "sandbox_started", Map::new()).is_none());
        let f = Forwarded::new("n", "llm_request", Map::new()).unwrap();
        assert_eq!(Event::from(f).event_type(), "llm_request");
    }

    #[test]
    fn oversized_values_are_truncated() {
        // ST11: a 300 KiB output.
        let mut data = Map::new();
        let filler = "x".repeat(307_200 - "{\"k\":\"\"}".len());
        data.insert("output".into(), serde_json::json!({ "k": filler }));
        data.insert("duration_ms".into(), Value::from(5));
        limit_data(&mut data);
        assert_eq!(
            data["output"],
            serde_json::json!({"_truncated": true, "bytes": 307_200})
        );
        assert_eq!(data["duration_ms"], Value::from(5));
    }

    #[test]
    fn many_large_values_keep_the_line_below_one_mebibyte() {
        let mut data = Map::new();
        for i in 0..6 {
            data.insert(format!("v{i}"), Value::from("y".repeat(200 * 1024)));
        }
        limit_data(&mut data);
        let len = serde_json::to_string(&data).unwrap().len();
        assert!(len < MAX_LINE_BYTES, "{len}");
        assert!(data.values().any(|v| v.get("_truncated").is_some()));
    }

    #[test]
    fn decode_skips_blank_and_broken_lines() {
        assert!(EventRecord::decode("").is_none());
        assert!(EventRecord::decode("   ").is_none());
        assert!(EventRecord::decode("{\"seq\":5,\"timestamp\":\"2026").is_none());
        let r = EventRecord::decode(
            r#"{"seq":1,"timestamp":"t","type":"future_event","run_id":"r","data":{"new_key":1}}"#,
        )
        .unwrap();
        assert_eq!(r.event_type, "future_event");
        assert_eq!(r.data["new_key"], Value::from(1));
    }
}
