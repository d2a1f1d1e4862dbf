//! The resolved sandbox model (specification 01 §8.9): what sandbox resolution hands to the runtime and, through
//! `PrepareRequest`, to the drivers.
//!
//! [`ResolvedSandbox`] is also the JSON form persisted in the run record. Its environment layers serialize as
//! **names only** (values are never persisted, 02 §5.5); a deserialized sandbox therefore carries empty values
//! and is meant for reporting, not for re-creating a container (resume re-resolves from the recorded inputs).
//!
//! ```
//! use iterion_spec::resolved::{HostState, NetworkMode, NetworkPolicySpec};
//! let open = NetworkPolicySpec::open("default");
//! assert_eq!(open.mode, NetworkMode::Open);
//! assert_eq!(HostState::parse("NONE"), Some(HostState::None));
//! let json = serde_json::to_string(&open).unwrap();
//! assert_eq!(json, r#"{"mode":"open","preset":null,"rules":[],"defaulted":false,"source":"default"}"#);
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::diag::Diagnostic;
use crate::values::Mount;

/// The mode of an active (sandboxed) scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResolvedMode {
    /// "Isolate if you can": devcontainer.json or the default image.
    Auto,
    /// The workflow (or node) names its own image or build.
    Inline,
}

impl ResolvedMode {
    /// The lower-case word.
    pub fn as_str(self) -> &'static str {
        match self {
            ResolvedMode::Auto => "auto",
            ResolvedMode::Inline => "inline",
        }
    }
}

/// Where the container specification of a resolved sandbox comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The repository's `devcontainer.json`.
    Devcontainer,
    /// The workflow's inline `sandbox:` block.
    Workflow,
    /// A node's own inline `sandbox:` block.
    Node,
    /// The default image chain (01 §8.7).
    DefaultImage,
}

/// Whether the run store and agent state directories are mounted into the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostState {
    /// Mount the host state directories.
    Auto,
    /// Do not mount them.
    None,
}

impl HostState {
    /// Parses `auto` / `none` (trimmed, case-insensitive).
    pub fn parse(s: &str) -> Option<HostState> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(HostState::Auto),
            "none" => Some(HostState::None),
            _ => None,
        }
    }

    /// The lower-case word.
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Auto => "auto",
            HostState::None => "none",
        }
    }
}

/// How egress is filtered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Deny unless a rule allows (through the egress proxy).
    Allowlist,
    /// Allow unless a rule denies (through the egress proxy).
    Denylist,
    /// No proxy, the engine's default network.
    Open,
}

impl NetworkMode {
    /// Parses `allowlist` / `denylist` / `open` (exact, case-sensitive as in the DSL).
    pub fn parse(s: &str) -> Option<NetworkMode> {
        match s {
            "allowlist" => Some(NetworkMode::Allowlist),
            "denylist" => Some(NetworkMode::Denylist),
            "open" => Some(NetworkMode::Open),
            _ => None,
        }
    }

    /// The lower-case word.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Allowlist => "allowlist",
            NetworkMode::Denylist => "denylist",
            NetworkMode::Open => "open",
        }
    }
}

/// A named set of built-in rules placed before the policy's own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum NetworkPreset {
    /// The built-in list of LLM endpoints, registries, forges and mirrors (04).
    #[serde(rename = "iterion-default")]
    IterionDefault,
}

impl NetworkPreset {
    /// Parses a preset name: `Ok(Some(..))` for a preset, `Ok(None)` for the explicit `none`, `Err` otherwise.
    pub fn parse(s: &str) -> Result<Option<NetworkPreset>, String> {
        match s {
            "iterion-default" => Ok(Some(NetworkPreset::IterionDefault)),
            "none" => Ok(None),
            _ => Err(format!(
                "unknown network preset '{s}' (want iterion-default or none)"
            )),
        }
    }

    /// The preset's name.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkPreset::IterionDefault => "iterion-default",
        }
    }
}

/// An effective egress policy (01 §8.5): `{mode, preset, rules, defaulted, source}`.
///
/// `rules` are the policy's own rules in order (canonical text); the preset's rules are not expanded here, the
/// enforcing side expands the preset before them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NetworkPolicySpec {
    /// Allowlist, denylist or open.
    pub mode: NetworkMode,
    /// The preset, `None` for no preset.
    pub preset: Option<NetworkPreset>,
    /// Rules in evaluation order (`[!]PATTERN[:PORT]`).
    pub rules: Vec<String>,
    /// True when the policy was defaulted for a repository-defined sandbox (event `sandbox_network_defaulted`).
    pub defaulted: bool,
    /// Which declaration produced the policy.
    pub source: String,
}

impl NetworkPolicySpec {
    /// The open policy (no proxy).
    pub fn open(source: impl Into<String>) -> Self {
        NetworkPolicySpec {
            mode: NetworkMode::Open,
            preset: None,
            rules: Vec::new(),
            defaulted: false,
            source: source.into(),
        }
    }

    /// Whether the policy needs the egress proxy (anything but `open`).
    pub fn needs_proxy(&self) -> bool {
        self.mode != NetworkMode::Open
    }
}

/// The OCI runtime a sandbox's container runs under (`sandbox.runtime`, `--sandbox-runtime`,
/// `ITERION_SANDBOX_OCI_RUNTIME`, floor `ITERION_SANDBOX_RUNTIME_FLOOR`). JSON: the word (`default`, `gvisor`,
/// `kata`) or the runtime's own name.
///
/// The names are logical: each driver maps them onto what its engine calls them (Docker and Podman: a runtime
/// the engine lists, `runsc` for gVisor; Kubernetes: a `runtimeClassName`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum OciRuntime {
    /// The engine's default runtime (runc or crun, in practice).
    #[default]
    Default,
    /// gVisor (`runsc`), a user-space kernel between the container and the host.
    Gvisor,
    /// Kata Containers, a lightweight virtual machine per container.
    Kata,
    /// A runtime the engine knows by this name (`runsc`, `crun`, `youki`, a runtime class).
    Named(String),
}

impl OciRuntime {
    /// Parses a runtime setting: `default`, `gvisor`, `kata` (trimmed, case-insensitive) or a name of letters,
    /// digits, `.`, `_`, `+` and `-` that does not start with `-` (at most 128 bytes). `Err` says what is wrong.
    pub fn parse(s: &str) -> Result<OciRuntime, String> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "default" => return Ok(OciRuntime::Default),
            "gvisor" => return Ok(OciRuntime::Gvisor),
            "kata" => return Ok(OciRuntime::Kata),
            _ => {}
        }
        let ok_byte = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-');
        if t.is_empty() {
            return Err("empty runtime name (want default, gvisor, kata or a runtime name)".into());
        }
        if t.len() > 128 || t.starts_with('-') || !t.bytes().all(ok_byte) {
            return Err(format!(
                "invalid runtime '{t}' (want default, gvisor, kata or a runtime name of letters, digits, '.', '_', '+' and '-')"
            ));
        }
        Ok(OciRuntime::Named(t.to_owned()))
    }

    /// The word or the name.
    pub fn as_str(&self) -> &str {
        match self {
            OciRuntime::Default => "default",
            OciRuntime::Gvisor => "gvisor",
            OciRuntime::Kata => "kata",
            OciRuntime::Named(n) => n,
        }
    }

    /// Whether this is the engine's default runtime.
    pub fn is_default(&self) -> bool {
        *self == OciRuntime::Default
    }

    /// Whether this is gVisor, by its logical name or by the names engines register it under.
    pub fn is_gvisor(&self) -> bool {
        match self {
            OciRuntime::Gvisor => true,
            OciRuntime::Named(n) => n == "runsc" || n == "gvisor",
            _ => false,
        }
    }
}

impl fmt::Display for OciRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for OciRuntime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OciRuntime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        OciRuntime::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The runtime of a resolved sandbox and the rule that chose it. A run record written before the setting
/// existed reads back as the default runtime.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RuntimeChoice {
    /// The runtime.
    pub name: OciRuntime,
    /// `cli flag --sandbox-runtime`, `workflow sandbox.runtime`, `node sandbox.runtime`,
    /// `ITERION_SANDBOX_OCI_RUNTIME`, `ITERION_SANDBOX_RUNTIME_FLOOR` or `default`.
    pub source: String,
}

impl Default for RuntimeChoice {
    fn default() -> Self {
        RuntimeChoice {
            name: OciRuntime::Default,
            source: "default".to_owned(),
        }
    }
}

/// The `devcontainer.json` a sandbox was built from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DevcontainerRef {
    /// Path relative to the repository root (`.devcontainer/devcontainer.json` or `.devcontainer.json`).
    pub path: String,
    /// Lower-case hex SHA-256 of the raw file bytes.
    pub sha256: String,
}

/// An image to build before the run (absolute host paths after resolution).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BuildSpec {
    /// Absolute host path of the Dockerfile.
    pub dockerfile: String,
    /// Absolute host path of the build context.
    pub context: String,
    /// Build stage, when one is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Build arguments.
    #[serde(default)]
    pub args: BTreeMap<String, String>,
}

/// The two environment layers a sandbox contributes (02: `repo` below `workflow`).
///
/// Serializes as **names only**: `{"repo": ["A"], "workflow": ["CI"]}`. Deserializes from that form (values
/// become empty) or from maps of values. `Debug` prints names only.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct EnvLayers {
    /// From `devcontainer.json` (`remoteEnv`, then `containerEnv`, then `runArgs -e`).
    pub repo: BTreeMap<String, String>,
    /// From the workflow's (and, for an own container, the node's) `env:`.
    pub workflow: BTreeMap<String, String>,
}

impl fmt::Debug for EnvLayers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnvLayers")
            .field("repo", &self.repo.keys().collect::<Vec<_>>())
            .field("workflow", &self.workflow.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[derive(Serialize)]
struct EnvNames<'a> {
    repo: Vec<&'a str>,
    workflow: Vec<&'a str>,
}

impl Serialize for EnvLayers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        EnvNames {
            repo: self.repo.keys().map(String::as_str).collect(),
            workflow: self.workflow.keys().map(String::as_str).collect(),
        }
        .serialize(s)
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum LayerForm {
    Names(Vec<String>),
    Values(BTreeMap<String, String>),
}

impl LayerForm {
    fn into_map(self) -> BTreeMap<String, String> {
        match self {
            LayerForm::Names(n) => n.into_iter().map(|k| (k, String::new())).collect(),
            LayerForm::Values(m) => m,
        }
    }
}

#[derive(Deserialize)]
struct EnvLayersForm {
    #[serde(default)]
    repo: Option<LayerForm>,
    #[serde(default)]
    workflow: Option<LayerForm>,
}

impl<'de> Deserialize<'de> for EnvLayers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = EnvLayersForm::deserialize(d)?;
        Ok(EnvLayers {
            repo: f.repo.map(LayerForm::into_map).unwrap_or_default(),
            workflow: f.workflow.map(LayerForm::into_map).unwrap_or_default(),
        })
    }
}

/// One resolved sandbox (01 §8.9): the run container or a node's own container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedSandbox {
    /// `auto` or `inline`.
    pub mode: ResolvedMode,
    /// Label of the rule that chose the mode (01 §8.2), possibly with ` (default image: <ref>)`.
    pub source: String,
    /// Where the container specification comes from.
    pub origin: Origin,
    /// The devcontainer.json used, when `origin` is `devcontainer`.
    pub devcontainer: Option<DevcontainerRef>,
    /// Image reference (exclusive with `build`).
    pub image: Option<String>,
    /// Image build (exclusive with `image`).
    pub build: Option<BuildSpec>,
    /// Container user as declared; `None` lets the runtime remap to the host uid.
    pub user: Option<String>,
    /// Absolute container path of the workspace.
    pub workspace_folder: String,
    /// Shell snippets run once after start: devcontainer lifecycle commands, then the DSL `post_create`.
    pub post_create: Vec<String>,
    /// Environment layers (names only in JSON).
    #[serde(default)]
    pub env_layers: EnvLayers,
    /// Extra mounts: devcontainer and `runArgs` mounts, then the DSL mounts.
    pub mounts: Vec<Mount>,
    /// Host state mounting.
    pub host_state: HostState,
    /// Label of the rule that chose `host_state` (01 §8.3, §8.6).
    pub host_state_source: String,
    /// Effective egress policy.
    pub network: NetworkPolicySpec,
    /// The OCI runtime of the container.
    #[serde(default)]
    pub runtime: RuntimeChoice,
    /// Whether a missing container runtime may degrade this scope to unsandboxed.
    pub degrade_allowed: bool,
    /// Stable hash of the container-relevant fields (see [`ResolvedSandbox::compute_key`]).
    pub key: String,
}

#[derive(Serialize)]
struct KeyView<'a> {
    mode: ResolvedMode,
    origin: Origin,
    devcontainer: &'a Option<DevcontainerRef>,
    image: &'a Option<String>,
    build: &'a Option<BuildSpec>,
    user: &'a Option<String>,
    workspace_folder: &'a str,
    post_create: &'a [String],
    env_repo: &'a BTreeMap<String, String>,
    env_workflow: &'a BTreeMap<String, String>,
    mounts: &'a [Mount],
    host_state: HostState,
    network_mode: NetworkMode,
    network_preset: Option<NetworkPreset>,
    network_rules: &'a [String],
    degrade_allowed: bool,
    #[serde(skip_serializing_if = "OciRuntime::is_default")]
    runtime: &'a OciRuntime,
}

impl ResolvedSandbox {
    /// The stable key: lower-case hex SHA-256 over a canonical JSON of every field that shapes the container
    /// (mode, origin, devcontainer, image, build, user, workspace folder, post-create, env layers **with values**,
    /// mounts, host state, network mode/preset/rules, degrade flag, runtime when not the default). Labels (`source`, `host_state_source`,
    /// `network.source`, `network.defaulted`) are left out, so two scopes that would create the same container
    /// share a key whoever declared them.
    pub fn compute_key(&self) -> String {
        let view = KeyView {
            mode: self.mode,
            origin: match self.origin {
                // A node's inline block and the workflow's inline block build the same container.
                Origin::Node => Origin::Workflow,
                o => o,
            },
            devcontainer: &self.devcontainer,
            image: &self.image,
            build: &self.build,
            user: &self.user,
            workspace_folder: &self.workspace_folder,
            post_create: &self.post_create,
            env_repo: &self.env_layers.repo,
            env_workflow: &self.env_layers.workflow,
            mounts: &self.mounts,
            host_state: self.host_state,
            network_mode: self.network.mode,
            network_preset: self.network.preset,
            network_rules: &self.network.rules,
            degrade_allowed: self.degrade_allowed,
            runtime: &self.runtime.name,
        };
        // Serializing plain data to a Vec cannot fail.
        let bytes = serde_json::to_vec(&view).unwrap_or_default();
        hex::encode(Sha256::digest(&bytes))
    }

    /// Recomputes and stores [`ResolvedSandbox::compute_key`].
    pub fn refresh_key(&mut self) {
        self.key = self.compute_key();
    }
}

/// Where a node runs (01 §8.8). JSON: `{"placement": "host" | "run" | "own", …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "placement", rename_all = "snake_case")]
pub enum NodePlacement {
    /// On the host, unsandboxed.
    Host {
        /// Why (e.g. `node sandbox: none`, `cli flag --sandbox none`, `run is unsandboxed`).
        reason: String,
        /// Text of the `sandbox_skipped` event the runtime emits for this node, when one is due.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        skip_notice: Option<String>,
    },
    /// In the run container.
    Run {
        /// The node's own egress policy when it overrides the run's (an override block).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        network: Option<NetworkPolicySpec>,
    },
    /// In a container of its own; nodes with the same `key` share one.
    Own {
        /// The sandbox key (equal to `sandbox.key`).
        key: String,
        /// The node's sandbox.
        sandbox: Box<ResolvedSandbox>,
    },
}

/// Which floor variable changed a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Floor {
    /// `ITERION_SANDBOX_FLOOR`.
    #[serde(rename = "ITERION_SANDBOX_FLOOR")]
    SandboxFloor,
    /// `ITERION_SANDBOX_HOST_STATE_GUARD`.
    #[serde(rename = "ITERION_SANDBOX_HOST_STATE_GUARD")]
    HostStateGuard,
    /// `ITERION_SANDBOX_RUNTIME_FLOOR`.
    #[serde(rename = "ITERION_SANDBOX_RUNTIME_FLOOR")]
    RuntimeFloor,
}

impl Floor {
    /// The environment variable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Floor::SandboxFloor => "ITERION_SANDBOX_FLOOR",
            Floor::HostStateGuard => "ITERION_SANDBOX_HOST_STATE_GUARD",
            Floor::RuntimeFloor => "ITERION_SANDBOX_RUNTIME_FLOOR",
        }
    }
}

/// The scope a floor changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The run scope.
    Run,
    /// A node scope (`node_id` names it).
    Node,
}

/// One change made by a floor (01 §8.6); the runtime emits each as `sandbox_floor_applied`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloorApplication {
    /// The floor variable.
    pub floor: Floor,
    /// Its (normalised) value, e.g. `auto`, `inline`, `1`.
    pub value: String,
    /// Run or node.
    pub scope: Scope,
    /// The node, for a node scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Value before the floor (`none`, `auto`, …; `degradable` / `no degrade` for the inline floor on auto).
    pub from: String,
    /// Value after the floor.
    pub to: String,
    /// The label of the rule the floor shadowed.
    pub shadowed_source: String,
}

/// The raw resolution inputs persisted for resume (01 §8.9 `requested`). Floors are not recorded: they are
/// read from the current environment on every launch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RequestedInputs {
    /// `--sandbox`.
    pub cli_mode: Option<String>,
    /// `--sandbox-host-state`.
    pub cli_host_state: Option<String>,
    /// `--sandbox-default-image`.
    pub cli_default_image: Option<String>,
    /// `--sandbox-runtime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_runtime: Option<String>,
    /// `ITERION_SANDBOX_DEFAULT`, `ITERION_SANDBOX_HOST_STATE`, `ITERION_SANDBOX_DEFAULT_IMAGE` as seen (empty
    /// when unset).
    pub env: BTreeMap<String, String>,
    /// `auto` or `none`.
    pub builtin_default_mode: String,
}

/// The mode of the run scope after the mode chain and floors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunMode {
    /// Unsandboxed.
    None,
    /// Isolate if you can (see [`SandboxPlan::run_skippable`]).
    Auto,
    /// The workflow's own image or build.
    Inline,
}

/// The result of sandbox resolution (01 §8.9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxPlan {
    /// The run scope's mode (also when it is `none`, which has no [`ResolvedSandbox`]).
    pub run_mode: RunMode,
    /// Label of the rule that chose `run_mode` (01 §8.2, or `ITERION_SANDBOX_FLOOR`).
    pub run_source: String,
    /// The run-scope sandbox; `None` = unsandboxed.
    pub run: Option<ResolvedSandbox>,
    /// Set when auto could not produce a spec (01 §8.4 step 3): the reason for `sandbox_skipped`.
    pub run_skippable: Option<String>,
    /// NodePlacement of every agent, judge and tool node, by node id.
    pub nodes: BTreeMap<String, NodePlacement>,
    /// Changes made by floors.
    pub floors: Vec<FloorApplication>,
    /// The raw inputs.
    pub requested: RequestedInputs,
    /// Warnings found during resolution (`D…` from devcontainer.json, `C105`/`D010` from expansion).
    pub warnings: Vec<Diagnostic>,
}

impl SandboxPlan {
    /// Whether any scope (run or node) runs in a container.
    pub fn any_active(&self) -> bool {
        self.run.is_some()
            || self
                .nodes
                .values()
                .any(|p| matches!(p, NodePlacement::Own { .. }))
    }

    /// Every distinct effective network policy of the run (run scope, run-container node overrides, own
    /// containers), in a stable order.
    pub fn network_policies(&self) -> Vec<&NetworkPolicySpec> {
        let mut all: Vec<&NetworkPolicySpec> = Vec::new();
        if let Some(r) = &self.run {
            all.push(&r.network);
        }
        for p in self.nodes.values() {
            match p {
                NodePlacement::Run { network: Some(n) } => all.push(n),
                NodePlacement::Own { sandbox, .. } => all.push(&sandbox.network),
                _ => {}
            }
        }
        let mut out: Vec<&NetworkPolicySpec> = Vec::new();
        for p in all {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }
}
