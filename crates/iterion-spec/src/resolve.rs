//! Sandbox resolution (specification 01 §8): from a compiled [`Workflow`] and the launch inputs to the
//! [`SandboxPlan`] the runtime executes.
//!
//! Pure apart from reading `devcontainer.json` through the injected [`SourceReader`]: the process environment
//! arrives as a map, nothing talks to a container engine.
//!
//! Decisions where the specification is silent (also listed in the crate docs):
//!
//! - A node `sandbox: auto` inherits the workflow's `mode: auto` block fields it does not set itself (user,
//!   workspace folder, post-create, mounts; env overlaid per key), so a node that does not customise the
//!   automatic sandbox shares the run container (01 §8.8 "same key").
//! - The parent policy of a node's own container is the run's effective policy; when the run is unsandboxed it
//!   is the workflow block's network resolved with the run-scope table for the node's origin.
//! - Policies derived for nodes never carry `defaulted = true` (the `sandbox_network_defaulted` event is a
//!   run-scope event).
//! - A node network block without a base (`mode` / `preset`) under a parent that is `open` only by default
//!   (nothing declared) is resolved with the run-scope table, so `rules: ["b.com"]` means an allowlist rather
//!   than rules silently ignored under `open`.
//! - The inline floor records a floor application for every auto scope whose degrade path it removes
//!   (`from: "auto"`, `to: "auto (no degrade)"`).
//!
//! ```
//! use iterion_spec::resolve::{ModeChoice, default_image};
//! assert_eq!(default_image(None, None, Some("1.2.3")), "ghcr.io/socialgouv/iterion-sandbox-slim:v1.2.3");
//! assert_eq!(default_image(Some(" img:1 "), Some("img:2"), Some("1.2.3")), "img:1");
//! assert_eq!(ModeChoice::parse(" AUTO "), Some(ModeChoice::Auto));
//! ```
//!
//! [`resolve_sandbox`] takes a compiled workflow and [`ResolveInputs`]; see the crate's `res_*` tests for
//! complete examples.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::devcontainer::{self, ExpandContext, LoadContext, SourceReader, expand_local_vars};
use crate::diag::Diagnostic;
use crate::model::{NetworkDecl, SandboxDecl, SandboxKind, Spanned, TextMap, Workflow};
use crate::resolved::{
    BuildSpec, EnvLayers, Floor, FloorApplication, HostState, NetworkMode, NetworkPolicySpec, NetworkPreset,
    NodePlacement, OciRuntime, Origin, RequestedInputs, ResolvedMode, ResolvedSandbox, RunMode,
    RuntimeChoice, SandboxPlan, Scope,
};
use crate::values;

/// `auto` or `none`: the values of `--sandbox`, `ITERION_SANDBOX_DEFAULT` and the built-in default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeChoice {
    /// Isolate if you can.
    Auto,
    /// No sandbox.
    None,
}

impl ModeChoice {
    /// Parses `auto` / `none` (trimmed, case-insensitive).
    pub fn parse(s: &str) -> Option<ModeChoice> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(ModeChoice::Auto),
            "none" => Some(ModeChoice::None),
            _ => None,
        }
    }

    /// The lower-case word.
    pub fn as_str(self) -> &'static str {
        match self {
            ModeChoice::Auto => "auto",
            ModeChoice::None => "none",
        }
    }
}

/// The environment variables of 01 §8.1 that resolution reads.
pub const ENV_DEFAULT: &str = "ITERION_SANDBOX_DEFAULT";
/// See [`ENV_DEFAULT`].
pub const ENV_HOST_STATE: &str = "ITERION_SANDBOX_HOST_STATE";
/// See [`ENV_DEFAULT`].
pub const ENV_DEFAULT_IMAGE: &str = "ITERION_SANDBOX_DEFAULT_IMAGE";
/// See [`ENV_DEFAULT`].
pub const ENV_FLOOR: &str = "ITERION_SANDBOX_FLOOR";
/// See [`ENV_DEFAULT`].
pub const ENV_HOST_STATE_GUARD: &str = "ITERION_SANDBOX_HOST_STATE_GUARD";
/// The operator's OCI runtime (`default`, `gvisor`, `kata` or a runtime name), below the workflow's
/// `sandbox.runtime`. Read on every launch and resume, never recorded.
pub const ENV_OCI_RUNTIME: &str = "ITERION_SANDBOX_OCI_RUNTIME";
/// The runtime floor: every container runs under this runtime, whatever the workflow or the flag asks.
pub const ENV_RUNTIME_FLOOR: &str = "ITERION_SANDBOX_RUNTIME_FLOOR";

/// The default image repository (01 §8.7).
pub const DEFAULT_IMAGE_REPO: &str = "ghcr.io/socialgouv/iterion-sandbox-slim";

/// Everything resolution needs besides the workflow (01 §8.1).
#[non_exhaustive]
pub struct ResolveInputs<'a> {
    /// `--sandbox`.
    pub cli_mode: Option<ModeChoice>,
    /// `--sandbox-host-state`.
    pub cli_host_state: Option<HostState>,
    /// `--sandbox-default-image` (trimmed; empty counts as unset).
    pub cli_default_image: Option<String>,
    /// `--sandbox-runtime`.
    pub cli_runtime: Option<OciRuntime>,
    /// The launching process environment (only the `ITERION_SANDBOX_*` names of 01 §8.1 and the localEnv
    /// allowlist are read).
    pub env: BTreeMap<String, String>,
    /// `auto` for `iterion run` / `resume`; library callers choose (`none` by default).
    pub builtin_default_mode: ModeChoice,
    /// The binary's version for the default image tag; `None` disables the built-in default image (the last
    /// step of 01 §8.7), as a library caller without a published image wants.
    pub binary_version: Option<String>,
    /// Git top-level of the source repository, when there is one.
    pub repo_root: Option<PathBuf>,
    /// Absolute host directory bound as the workspace.
    pub workspace_path: PathBuf,
    /// Reads `devcontainer.json`.
    pub reader: &'a dyn SourceReader,
}

impl std::fmt::Debug for ResolveInputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolveInputs")
            .field("cli_mode", &self.cli_mode)
            .field("cli_host_state", &self.cli_host_state)
            .field("cli_default_image", &self.cli_default_image)
            .field("cli_runtime", &self.cli_runtime)
            .field("env_names", &self.env.keys().collect::<Vec<_>>())
            .field("builtin_default_mode", &self.builtin_default_mode)
            .field("binary_version", &self.binary_version)
            .field("repo_root", &self.repo_root)
            .field("workspace_path", &self.workspace_path)
            .finish_non_exhaustive()
    }
}

impl<'a> ResolveInputs<'a> {
    /// Library defaults: no CLI values, empty environment, built-in mode `none`, no default image, no
    /// repository root.
    pub fn new(workspace_path: impl Into<PathBuf>, reader: &'a dyn SourceReader) -> Self {
        ResolveInputs {
            cli_mode: None,
            cli_host_state: None,
            cli_default_image: None,
            cli_runtime: None,
            env: BTreeMap::new(),
            builtin_default_mode: ModeChoice::None,
            binary_version: None,
            repo_root: None,
            workspace_path: workspace_path.into(),
            reader,
        }
    }
}

/// Why resolution failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// An `ITERION_SANDBOX_*` variable has a value outside its set (the CLI exits with a usage error).
    #[error("invalid value '{value}' for {name} (want {expected})")]
    InvalidEnv {
        /// The variable.
        name: &'static str,
        /// Its value (these variables never hold secrets).
        value: String,
        /// The accepted values.
        expected: &'static str,
    },
    /// The repository's `devcontainer.json` exists but is invalid or unreadable; auto mode does not fall back.
    #[error("{}", render_devcontainer(.file, .diagnostics))]
    Devcontainer {
        /// Path relative to the repository root.
        file: String,
        /// Every diagnostic (errors and warnings).
        diagnostics: Vec<Diagnostic>,
    },
    /// A value failed its check after variable expansion.
    #[error("{scope}: {message}")]
    InvalidValue {
        /// The code of the failed check (`C044`, `C095`–`C098`, `C100`–`C104`).
        code: &'static str,
        /// `workflow 'w'` or `node 'n'`.
        scope: String,
        /// What is wrong.
        message: String,
    },
    /// A `sandbox:` declaration has a shape error that `compile` reported; the workflow must not be run.
    #[error("the sandbox declaration of {scope} is invalid (see the compile diagnostics)")]
    InvalidDeclaration {
        /// `workflow 'w'` or `node 'n'`.
        scope: String,
    },
    /// The `inline` floor is active and a scope cannot be sandboxed (no repository root and no default
    /// image); the runtime reports `SANDBOX_DRIVER_UNAVAILABLE`.
    #[error(
        "{scope} cannot be sandboxed (no repository root and no default image) and ITERION_SANDBOX_FLOOR=inline forbids running it unsandboxed"
    )]
    Unsandboxable {
        /// `workflow 'w'` or `node 'n'`.
        scope: String,
    },
}

/// Every error of the devcontainer file at once (one fix per run is a slow way to learn them), in file order.
fn render_devcontainer(file: &str, diags: &[Diagnostic]) -> String {
    let errors: Vec<String> = diags
        .iter()
        .filter(|d| d.is_error())
        .map(Diagnostic::render_header)
        .collect();
    match errors.as_slice() {
        [] => format!("invalid devcontainer configuration {file}"),
        [one] => format!("invalid devcontainer configuration: {one}"),
        all => format!(
            "invalid devcontainer configuration ({} errors): {}",
            all.len(),
            all.join("; ")
        ),
    }
}

/// A `Result` of resolution.
pub type Result<T, E = ResolveError> = std::result::Result<T, E>;

/// The floor requested by `ITERION_SANDBOX_FLOOR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FloorLevel {
    Auto,
    Inline,
}

impl FloorLevel {
    fn as_str(self) -> &'static str {
        match self {
            FloorLevel::Auto => "auto",
            FloorLevel::Inline => "inline",
        }
    }
}

/// Environment values of 01 §8.1, parsed.
#[derive(Debug)]
struct EnvInputs {
    default_mode: Option<ModeChoice>,
    host_state: Option<HostState>,
    default_image: Option<String>,
    floor: Option<FloorLevel>,
    guard: Option<String>,
    runtime: Option<OciRuntime>,
    runtime_floor: Option<OciRuntime>,
}

fn env_value<'e>(env: &'e BTreeMap<String, String>, name: &str) -> &'e str {
    env.get(name).map(|v| v.trim()).unwrap_or("")
}

fn read_env(env: &BTreeMap<String, String>) -> Result<EnvInputs> {
    let bad = |name: &'static str, expected: &'static str| ResolveError::InvalidEnv {
        name,
        value: env_value(env, name).to_owned(),
        expected,
    };
    let default_mode = match env_value(env, ENV_DEFAULT) {
        "" => None,
        v => Some(ModeChoice::parse(v).ok_or_else(|| bad(ENV_DEFAULT, "auto, none or empty"))?),
    };
    let host_state = match env_value(env, ENV_HOST_STATE) {
        "" => None,
        v => Some(HostState::parse(v).ok_or_else(|| bad(ENV_HOST_STATE, "auto, none or empty"))?),
    };
    let default_image = Some(env_value(env, ENV_DEFAULT_IMAGE).to_owned()).filter(|s| !s.is_empty());
    let floor = match env_value(env, ENV_FLOOR).to_ascii_lowercase().as_str() {
        "" | "none" => None,
        "auto" => Some(FloorLevel::Auto),
        "inline" => Some(FloorLevel::Inline),
        _ => return Err(bad(ENV_FLOOR, "auto, inline, none or empty")),
    };
    let guard_raw = env_value(env, ENV_HOST_STATE_GUARD).to_ascii_lowercase();
    let guard = match guard_raw.as_str() {
        "1" | "true" | "yes" | "on" => Some(guard_raw.clone()),
        "" | "0" | "false" | "no" | "off" => None,
        _ => {
            return Err(bad(
                ENV_HOST_STATE_GUARD,
                "1, true, yes, on, 0, false, no, off or empty",
            ));
        }
    };
    let runtime_of = |name: &'static str| match env_value(env, name) {
        "" => Ok(None),
        v => OciRuntime::parse(v)
            .map(Some)
            .map_err(|_| bad(name, "default, gvisor, kata, a runtime name or empty")),
    };
    let runtime = runtime_of(ENV_OCI_RUNTIME)?;
    let runtime_floor = runtime_of(ENV_RUNTIME_FLOOR)?.filter(|r| !r.is_default());
    Ok(EnvInputs {
        default_mode,
        host_state,
        default_image,
        floor,
        guard,
        runtime,
        runtime_floor,
    })
}

/// The default image chain (01 §8.7): the flag, the environment, then the published image for `version`
/// (`v<version>` for a plain `MAJOR.MINOR.PATCH`, `edge` otherwise). Empty when nothing applies.
pub fn default_image(cli: Option<&str>, env: Option<&str>, version: Option<&str>) -> String {
    if let Some(c) = cli.map(str::trim).filter(|s| !s.is_empty()) {
        return c.to_owned();
    }
    if let Some(e) = env.map(str::trim).filter(|s| !s.is_empty()) {
        return e.to_owned();
    }
    match version {
        Some(v) => {
            let plain = {
                let parts: Vec<&str> = v.split('.').collect();
                parts.len() == 3
                    && parts
                        .iter()
                        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            };
            if plain {
                format!("{DEFAULT_IMAGE_REPO}:v{v}")
            } else {
                format!("{DEFAULT_IMAGE_REPO}:edge")
            }
        }
        None => String::new(),
    }
}

const SRC_CLI: &str = "cli flag --sandbox";
const SRC_CLI_INLINE: &str = "workflow sandbox: block (overrides --sandbox=auto)";
const SRC_WORKFLOW: &str = "workflow sandbox: block";
const SRC_NODE: &str = "node sandbox: block";
const SKIP_REASON: &str = "no repository root and no default image";
const OVERRIDE_NOTICE: &str = "node network override ignored: the node runs on the host";

/// The mode of a scope before spec construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScopeMode {
    None,
    Auto,
    Inline,
}

impl ScopeMode {
    fn run_mode(self) -> RunMode {
        match self {
            ScopeMode::None => RunMode::None,
            ScopeMode::Auto => RunMode::Auto,
            ScopeMode::Inline => RunMode::Inline,
        }
    }
}

/// Shared state of one resolution.
struct Resolver<'w, 'i> {
    wf: &'w Workflow,
    inputs: &'i ResolveInputs<'i>,
    env: EnvInputs,
    default_image: String,
    warnings: Vec<Diagnostic>,
    floors: Vec<FloorApplication>,
    /// The devcontainer outcome, loaded at most once.
    devcontainer: Option<Option<devcontainer::DevcontainerSpec>>,
    /// The run scope's runtime before the floor (what a node's own container inherits).
    run_runtime: RuntimeChoice,
}

/// The fields a sandbox block contributes to a container spec.
#[derive(Debug, Clone, Default)]
struct BlockFields<'d> {
    user: Option<&'d Spanned<String>>,
    workspace_folder: Option<&'d Spanned<String>>,
    post_create: Vec<&'d Spanned<String>>,
    env: Vec<(&'d Spanned<String>, &'d Spanned<String>)>,
    mounts: Vec<&'d Spanned<String>>,
}

fn text_map(m: &Option<TextMap>) -> Vec<(&Spanned<String>, &Spanned<String>)> {
    m.as_ref()
        .map(|m| m.entries.iter().map(|e| (&e.key, &e.value)).collect())
        .unwrap_or_default()
}

impl<'d> BlockFields<'d> {
    fn of(d: Option<&'d SandboxDecl>) -> Self {
        let Some(d) = d else { return Self::default() };
        if matches!(d.kind, SandboxKind::Off | SandboxKind::Override) {
            return Self::default();
        }
        BlockFields {
            user: d.user.as_ref(),
            workspace_folder: d.workspace_folder.as_ref(),
            post_create: d.post_create.iter().collect(),
            env: text_map(&d.env),
            mounts: d.mounts.iter().flatten().collect(),
        }
    }

    /// `self` (a node block) over `base` (the workflow block): fields the node does not set are inherited; env
    /// is overlaid per key.
    fn over(self, base: BlockFields<'d>) -> Self {
        let mut env = base.env;
        for (k, v) in self.env {
            env.retain(|(bk, _)| bk.value != k.value);
            env.push((k, v));
        }
        BlockFields {
            user: self.user.or(base.user),
            workspace_folder: self.workspace_folder.or(base.workspace_folder),
            post_create: if self.post_create.is_empty() {
                base.post_create
            } else {
                self.post_create
            },
            env,
            mounts: if self.mounts.is_empty() {
                base.mounts
            } else {
                self.mounts
            },
        }
    }
}

/// A node or workflow `network:` block, checked and canonicalised.
struct DeclNet {
    mode: Option<NetworkMode>,
    /// `Some(None)` is the explicit `preset: none`.
    preset: Option<Option<NetworkPreset>>,
    rules: Vec<String>,
}

/// The outcome of building one scope.
enum Built {
    Sandbox(Box<ResolvedSandbox>),
    Skippable,
}

fn scope_label(wf: &Workflow, node: Option<&str>) -> String {
    match node {
        Some(n) => format!("node '{n}'"),
        None => format!("workflow '{}'", wf.name.value),
    }
}

impl<'w, 'i> Resolver<'w, 'i> {
    fn invalid(&self, code: &'static str, node: Option<&str>, message: String) -> ResolveError {
        ResolveError::InvalidValue {
            code,
            scope: scope_label(self.wf, node),
            message,
        }
    }

    /// Expands one DSL sandbox string, turning variable warnings into `C105`.
    fn expand(&mut self, s: &Spanned<String>, container_folder: Option<&str>) -> String {
        let root = self
            .inputs
            .repo_root
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        let ctx = ExpandContext {
            env: &self.inputs.env,
            local_workspace_folder: root.as_deref(),
            container_workspace_folder: container_folder,
        };
        let e = expand_local_vars(&s.value, &ctx);
        for w in &e.warnings {
            let d = Diagnostic::warning("C105", &self.wf.file, s.span.line, s.span.col, w.message());
            if !self.warnings.contains(&d) {
                self.warnings.push(d);
            }
        }
        e.text
    }

    fn workspace_str(&self) -> String {
        self.inputs.workspace_path.to_string_lossy().into_owned()
    }

    /// Applies the block fields (expanded, validated) to `sb`. `layer_dc` says a devcontainer already set
    /// `user` / `workspace_folder` (the block only fills what it leaves unset).
    fn apply_block(
        &mut self,
        sb: &mut ResolvedSandbox,
        f: &BlockFields<'_>,
        node: Option<&str>,
        dc_user: bool,
        dc_ws: bool,
    ) -> Result<()> {
        if !dc_ws && let Some(ws) = f.workspace_folder {
            let v = self.expand(ws, None);
            values::validate_workspace_folder(&v)
                .map_err(|r| self.invalid("C100", node, format!("workspace_folder '{v}' {r}")))?;
            sb.workspace_folder = v;
        }
        let cwf = sb.workspace_folder.clone();
        if !dc_user && let Some(u) = f.user {
            let v = self.expand(u, Some(&cwf));
            values::validate_user(&v)
                .map_err(|_| self.invalid("C101", node, format!("invalid sandbox user '{v}'")))?;
            sb.user = Some(v);
        }
        for p in &f.post_create {
            let v = self.expand(p, Some(&cwf));
            let t = v.trim();
            if !t.is_empty() {
                sb.post_create.push(t.to_owned());
            }
        }
        for (k, v) in &f.env {
            let val = self.expand(v, Some(&cwf));
            values::validate_env_entry(&k.value, &val).map_err(|r| {
                self.invalid(
                    "C103",
                    node,
                    format!("invalid sandbox env entry '{}': {r}", k.value),
                )
            })?;
            sb.env_layers.workflow.insert(k.value.clone(), val);
        }
        for m in &f.mounts {
            let text = self.expand(m, Some(&cwf));
            let mount = values::parse_mount(&text)
                .map_err(|r| self.invalid("C102", node, format!("invalid mount '{text}': {r}")))?;
            sb.mounts.push(mount);
        }
        Ok(())
    }

    fn empty_sandbox(&self, mode: ResolvedMode, source: String, origin: Origin) -> ResolvedSandbox {
        ResolvedSandbox {
            mode,
            source,
            origin,
            devcontainer: None,
            image: None,
            build: None,
            user: None,
            workspace_folder: self.workspace_str(),
            post_create: Vec::new(),
            env_layers: EnvLayers::default(),
            mounts: Vec::new(),
            host_state: HostState::Auto,
            host_state_source: "default".to_owned(),
            network: NetworkPolicySpec::open("default"),
            runtime: RuntimeChoice::default(),
            degrade_allowed: false,
            key: String::new(),
        }
    }

    /// An inline scope: the block's own image or build (01 §8.4).
    fn build_inline(
        &mut self,
        d: &SandboxDecl,
        source: String,
        origin: Origin,
        node: Option<&str>,
        env_base: Option<&SandboxDecl>,
    ) -> Result<ResolvedSandbox> {
        let mut sb = self.empty_sandbox(ResolvedMode::Inline, source, origin);
        let mut fields = BlockFields::of(Some(d));
        if let Some(base) = env_base {
            // Own placement: the workflow env layer is the workflow block's env overlaid by the node's.
            let env_only = BlockFields {
                env: BlockFields::of(Some(base)).env,
                ..BlockFields::default()
            };
            let node_env = std::mem::take(&mut fields.env);
            let merged = BlockFields {
                env: node_env,
                ..BlockFields::default()
            }
            .over(env_only);
            fields.env = merged.env;
        }
        self.apply_block(&mut sb, &fields, node, false, false)?;
        let cwf = sb.workspace_folder.clone();
        if let Some(img) = &d.image {
            let v = self.expand(img, Some(&cwf));
            values::validate_image(&v)
                .map_err(|r| self.invalid("C044", node, format!("invalid image '{v}': {r}")))?;
            sb.image = Some(v);
        }
        if let Some(b) = &d.build {
            let ws = self.inputs.workspace_path.clone();
            let df_raw = match &b.dockerfile {
                Some(s) => self.expand(s, Some(&cwf)),
                None => "Dockerfile".to_owned(),
            };
            let df = values::validate_build_path(&df_raw).map_err(|r| {
                self.invalid("C104", node, format!("invalid build dockerfile '{df_raw}': {r}"))
            })?;
            let ctx = match &b.context {
                Some(s) => {
                    let raw = self.expand(s, Some(&cwf));
                    values::validate_build_path(&raw).map_err(|r| {
                        self.invalid("C104", node, format!("invalid build context '{raw}': {r}"))
                    })?
                }
                None => Path::new(&df)
                    .parent()
                    .map(|p| p.to_string_lossy().into_owned())
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| ".".to_owned()),
            };
            let join = |rel: &str| -> String {
                if rel == "." {
                    ws.to_string_lossy().into_owned()
                } else {
                    ws.join(rel).to_string_lossy().into_owned()
                }
            };
            let target = b.target.as_ref().map(|t| self.expand(t, Some(&cwf)));
            let mut args = BTreeMap::new();
            for (k, v) in text_map(&b.args) {
                let val = self.expand(v, Some(&cwf));
                args.insert(k.value.clone(), val);
            }
            sb.build = Some(BuildSpec {
                dockerfile: join(&df),
                context: join(&ctx),
                target,
                args,
            });
        }
        if sb.image.is_some() == sb.build.is_some() {
            return Err(ResolveError::InvalidDeclaration {
                scope: scope_label(self.wf, node),
            });
        }
        Ok(sb)
    }

    fn load_devcontainer(&mut self) -> Result<Option<devcontainer::DevcontainerSpec>> {
        if let Some(done) = &self.devcontainer {
            return Ok(done.clone());
        }
        let Some(root) = self.inputs.repo_root.clone() else {
            self.devcontainer = Some(None);
            return Ok(None);
        };
        let ws = self.workspace_str();
        let out = devcontainer::load(&LoadContext {
            repo_root: &root,
            env: &self.inputs.env,
            host_workspace: &ws,
            reader: self.inputs.reader,
        });
        if crate::diag::has_errors(&out.diagnostics) || (out.found && out.spec.is_none()) {
            let file = out
                .diagnostics
                .first()
                .map(|d| d.file.clone())
                .unwrap_or_else(|| devcontainer::CANDIDATES[0].to_owned());
            return Err(ResolveError::Devcontainer {
                file,
                diagnostics: out.diagnostics,
            });
        }
        self.warnings.extend(out.diagnostics);
        self.devcontainer = Some(out.spec.clone());
        Ok(out.spec)
    }

    /// An auto scope: devcontainer.json, else the default image, else skippable (01 §8.4).
    fn build_auto(&mut self, fields: &BlockFields<'_>, source: String, node: Option<&str>) -> Result<Built> {
        if let Some(dc) = self.load_devcontainer()? {
            let mut sb = self.empty_sandbox(ResolvedMode::Auto, source, Origin::Devcontainer);
            sb.devcontainer = Some(dc.source.clone());
            sb.image = dc.image.clone();
            sb.build = dc.build.clone();
            sb.user = dc.user.clone();
            if let Some(ws) = &dc.workspace_folder {
                sb.workspace_folder = ws.clone();
            }
            sb.post_create = dc.post_create.clone();
            sb.env_layers.repo = dc.env.clone();
            sb.mounts = dc.mounts.clone();
            self.apply_block(
                &mut sb,
                fields,
                node,
                dc.user.is_some(),
                dc.workspace_folder.is_some(),
            )?;
            return Ok(Built::Sandbox(Box::new(sb)));
        }
        if !self.default_image.is_empty() {
            let image = self.default_image.clone();
            let mut sb = self.empty_sandbox(
                ResolvedMode::Auto,
                format!("{source} (default image: {image})"),
                Origin::DefaultImage,
            );
            sb.image = Some(image);
            self.apply_block(&mut sb, fields, node, false, false)?;
            return Ok(Built::Sandbox(Box::new(sb)));
        }
        if self.env.floor == Some(FloorLevel::Inline) {
            return Err(ResolveError::Unsandboxable {
                scope: scope_label(self.wf, node),
            });
        }
        Ok(Built::Skippable)
    }

    fn network_decl_policy(&self, n: &NetworkDecl, node: Option<&str>) -> Result<DeclNet> {
        let mode = match &n.mode {
            Some(m) => Some(NetworkMode::parse(&m.value).ok_or_else(|| {
                self.invalid(
                    "C095",
                    node,
                    format!(
                        "invalid network mode '{}' (want allowlist, denylist or open)",
                        m.value
                    ),
                )
            })?),
            None => None,
        };
        let preset = match &n.preset {
            Some(p) => Some(NetworkPreset::parse(&p.value).map_err(|r| self.invalid("C096", node, r))?),
            None => None,
        };
        let mut rules = Vec::new();
        for r in n.rules.iter().flatten() {
            let rule = iterion_netpolicy::Rule::parse(&r.value).map_err(|e| {
                self.invalid("C097", node, format!("invalid network rule '{}': {e}", r.value))
            })?;
            rules.push(rule.canonical());
        }
        Ok(DeclNet { mode, preset, rules })
    }

    /// The run-scope table of 01 §8.5.
    fn run_network(
        &self,
        n: Option<&NetworkDecl>,
        devcontainer_origin: bool,
        node: Option<&str>,
        label: &str,
    ) -> Result<NetworkPolicySpec> {
        let (mode, preset, rules, base) = match n {
            Some(n) => {
                let d = self.network_decl_policy(n, node)?;
                (d.mode, d.preset, d.rules, n.names_base())
            }
            None => (None, None, Vec::new(), false),
        };
        Ok(if base {
            NetworkPolicySpec {
                mode: mode.unwrap_or(NetworkMode::Allowlist),
                preset: preset.flatten(),
                rules,
                defaulted: false,
                source: label.to_owned(),
            }
        } else if devcontainer_origin {
            NetworkPolicySpec {
                mode: NetworkMode::Allowlist,
                preset: Some(NetworkPreset::IterionDefault),
                rules,
                defaulted: true,
                source: "default (repository devcontainer)".to_owned(),
            }
        } else if !rules.is_empty() {
            NetworkPolicySpec {
                mode: NetworkMode::Allowlist,
                preset: None,
                rules,
                defaulted: false,
                source: label.to_owned(),
            }
        } else {
            NetworkPolicySpec::open("default")
        })
    }

    /// The node-scope table of 01 §8.5 (`inherit`).
    fn node_network(
        &self,
        parent: &NetworkPolicySpec,
        n: &NetworkDecl,
        node: &str,
    ) -> Result<NetworkPolicySpec> {
        let inherit = n.inherit.as_ref().map(|i| i.value.as_str()).unwrap_or("merge");
        let label = "node sandbox.network";
        let DeclNet { mode, preset, rules } = self.network_decl_policy(n, Some(node))?;
        let mut all = parent.rules.clone();
        all.extend(rules);
        let parent_undeclared = parent.mode == NetworkMode::Open && parent.source == "default";
        match inherit {
            // Nothing declared above: the node's rules must not be silently ignored under a default `open`.
            "merge" | "append" if parent_undeclared && !n.names_base() => {
                self.run_network(Some(n), false, Some(node), label)
            }
            // `append` behaves as `merge` (the reference reserves it for a later nuance)
            "merge" | "append" => Ok(NetworkPolicySpec {
                mode: mode.unwrap_or(parent.mode),
                preset: preset.unwrap_or(parent.preset),
                rules: all,
                defaulted: false,
                source: label.to_owned(),
            }),
            "replace" => self.run_network(Some(n), false, Some(node), label),
            other => Err(self.invalid(
                "C098",
                Some(node),
                format!("network.inherit '{other}' is invalid (want merge, append or replace)"),
            )),
        }
    }

    fn host_state_for(
        &mut self,
        sb: &mut ResolvedSandbox,
        hs: HostState,
        source: String,
        node: Option<&str>,
    ) {
        sb.host_state = hs;
        sb.host_state_source = source;
        if let Some(v) = &self.env.guard
            && sb.host_state == HostState::Auto
        {
            self.floors.push(FloorApplication {
                floor: Floor::HostStateGuard,
                value: v.clone(),
                scope: if node.is_some() { Scope::Node } else { Scope::Run },
                node_id: node.map(str::to_owned),
                from: "auto".to_owned(),
                to: "none".to_owned(),
                shadowed_source: sb.host_state_source.clone(),
            });
            sb.host_state = HostState::None;
            sb.host_state_source = ENV_HOST_STATE_GUARD.to_owned();
        }
    }

    /// Sets the scope's runtime, then applies `ITERION_SANDBOX_RUNTIME_FLOOR` (recorded when it changes it).
    fn runtime_for(&mut self, sb: &mut ResolvedSandbox, chosen: RuntimeChoice, node: Option<&str>) {
        sb.runtime = chosen;
        if let Some(floor) = &self.env.runtime_floor
            && sb.runtime.name != *floor
        {
            self.floors.push(FloorApplication {
                floor: Floor::RuntimeFloor,
                value: floor.as_str().to_owned(),
                scope: if node.is_some() { Scope::Node } else { Scope::Run },
                node_id: node.map(str::to_owned),
                from: sb.runtime.name.as_str().to_owned(),
                to: floor.as_str().to_owned(),
                shadowed_source: sb.runtime.source.clone(),
            });
            sb.runtime = RuntimeChoice {
                name: floor.clone(),
                source: ENV_RUNTIME_FLOOR.to_owned(),
            };
        }
    }

    fn mode_floor(&mut self, mode: ScopeMode, source: &mut String, node: Option<&str>) -> ScopeMode {
        let Some(floor) = self.env.floor else { return mode };
        let scope = if node.is_some() { Scope::Node } else { Scope::Run };
        match mode {
            ScopeMode::None => {
                self.floors.push(FloorApplication {
                    floor: Floor::SandboxFloor,
                    value: floor.as_str().to_owned(),
                    scope,
                    node_id: node.map(str::to_owned),
                    from: "none".to_owned(),
                    to: "auto".to_owned(),
                    shadowed_source: source.clone(),
                });
                *source = ENV_FLOOR.to_owned();
                ScopeMode::Auto
            }
            ScopeMode::Auto if floor == FloorLevel::Inline => {
                self.floors.push(FloorApplication {
                    floor: Floor::SandboxFloor,
                    value: floor.as_str().to_owned(),
                    scope,
                    node_id: node.map(str::to_owned),
                    from: "auto".to_owned(),
                    to: "auto (no degrade)".to_owned(),
                    shadowed_source: source.clone(),
                });
                ScopeMode::Auto
            }
            m => m,
        }
    }

    fn degrade_allowed(&self, mode: ResolvedMode) -> bool {
        mode == ResolvedMode::Auto && self.env.floor != Some(FloorLevel::Inline)
    }
}

fn decl_mode(d: &SandboxDecl) -> Option<ScopeMode> {
    match d.kind {
        SandboxKind::Off => Some(ScopeMode::None),
        SandboxKind::Auto => Some(ScopeMode::Auto),
        SandboxKind::Inline => Some(ScopeMode::Inline),
        SandboxKind::Override | SandboxKind::Invalid => None,
    }
}

/// Resolves the sandbox of a run and the placement of every agent, judge and tool node (01 §8), and of every
/// other node that calls a model (an `llm` router, a human node a model answers: placed like an agent without
/// a declaration, 09 §8).
///
/// `wf` must come from a compile without errors: a declaration of kind [`SandboxKind::Invalid`] is refused
/// with [`ResolveError::InvalidDeclaration`].
pub fn resolve_sandbox(wf: &Workflow, inputs: &ResolveInputs<'_>) -> Result<SandboxPlan> {
    let env = read_env(&inputs.env)?;
    if !inputs.workspace_path.is_absolute() {
        return Err(ResolveError::InvalidValue {
            code: "C100",
            scope: scope_label(wf, None),
            message: format!(
                "the host workspace path '{}' must be absolute",
                inputs.workspace_path.display()
            ),
        });
    }
    let requested = requested_inputs(inputs);
    let default_image = default_image(
        inputs.cli_default_image.as_deref(),
        env.default_image.as_deref(),
        inputs.binary_version.as_deref(),
    );
    let mut r = Resolver {
        wf,
        inputs,
        env,
        default_image,
        warnings: Vec::new(),
        floors: Vec::new(),
        devcontainer: None,
        run_runtime: RuntimeChoice::default(),
    };
    refuse_invalid(wf)?;
    let wdecl = wf.sandbox.as_ref();
    r.run_runtime = run_runtime(&mut r, wdecl)?;
    let cli_off = inputs.cli_mode == Some(ModeChoice::None);
    let (mode, source) = run_mode(&mut r, wdecl);
    let (run_hs, run_hs_source) = run_host_state(&mut r, wdecl)?;
    let (run, run_skippable) = run_scope(&mut r, wdecl, mode, &source, (run_hs, &run_hs_source))?;

    // Nodes (01 §8.8).
    let mut nodes = BTreeMap::new();
    for (n, decl) in wf.placed_nodes() {
        let id = n.name.value.as_str();
        let placement = place_node(
            &mut r,
            id,
            decl,
            cli_off,
            run.as_ref(),
            wdecl,
            (run_hs, &run_hs_source),
        )?;
        nodes.insert(id.to_owned(), placement);
    }

    let mut warnings = r.warnings;
    crate::diag::sort(&mut warnings);
    Ok(SandboxPlan {
        run_mode: mode.run_mode(),
        run_source: source,
        run,
        run_skippable,
        nodes,
        floors: r.floors,
        requested,
        warnings,
    })
}

/// What the caller asked for, as recorded in the plan.
fn requested_inputs(inputs: &ResolveInputs<'_>) -> RequestedInputs {
    RequestedInputs {
        cli_mode: inputs.cli_mode.map(|m| m.as_str().to_owned()),
        cli_host_state: inputs.cli_host_state.map(|h| h.as_str().to_owned()),
        cli_default_image: inputs.cli_default_image.clone(),
        cli_runtime: inputs.cli_runtime.as_ref().map(|r| r.as_str().to_owned()),
        env: [ENV_DEFAULT, ENV_HOST_STATE, ENV_DEFAULT_IMAGE]
            .iter()
            .map(|k| ((*k).to_owned(), inputs.env.get(*k).cloned().unwrap_or_default()))
            .collect(),
        builtin_default_mode: inputs.builtin_default_mode.as_str().to_owned(),
    }
}

/// Refuses a workflow whose sandbox declaration, or a node's, is of kind [`SandboxKind::Invalid`].
fn refuse_invalid(wf: &Workflow) -> Result<()> {
    if let Some(d) = wf.sandbox.as_ref()
        && d.kind == SandboxKind::Invalid
    {
        return Err(ResolveError::InvalidDeclaration {
            scope: scope_label(wf, None),
        });
    }
    for (n, d) in wf.sandboxable_nodes() {
        if d.is_some_and(|d| d.kind == SandboxKind::Invalid) {
            return Err(ResolveError::InvalidDeclaration {
                scope: scope_label(wf, Some(&n.name.value)),
            });
        }
    }
    Ok(())
}

/// The run's mode and where it came from (01 §8.2): the CLI flag, the workflow, the environment, the
/// built-in default; then the floor.
fn run_mode(r: &mut Resolver<'_, '_>, wdecl: Option<&SandboxDecl>) -> (ScopeMode, String) {
    let wmode = wdecl.and_then(decl_mode);
    let (mode, mut source) = match (r.inputs.cli_mode, wmode) {
        (Some(ModeChoice::None), _) => (ScopeMode::None, SRC_CLI.to_owned()),
        (Some(ModeChoice::Auto), Some(ScopeMode::Inline)) => (ScopeMode::Inline, SRC_CLI_INLINE.to_owned()),
        (Some(ModeChoice::Auto), _) => (ScopeMode::Auto, SRC_CLI.to_owned()),
        (None, Some(m)) => (m, SRC_WORKFLOW.to_owned()),
        (None, None) => match r.env.default_mode {
            Some(m) => (choice_mode(m), ENV_DEFAULT.to_owned()),
            None => (choice_mode(r.inputs.builtin_default_mode), "default".to_owned()),
        },
    };
    let mode = r.mode_floor(mode, &mut source, None);
    (mode, source)
}

/// The run's `host_state` and where it came from (01 §8.3).
fn run_host_state(r: &mut Resolver<'_, '_>, wdecl: Option<&SandboxDecl>) -> Result<(HostState, String)> {
    let wf_host_state = wdecl
        .filter(|d| d.kind != SandboxKind::Off)
        .and_then(|d| d.host_state.as_ref());
    let chosen = if let Some(h) = r.inputs.cli_host_state {
        (h, "cli flag --sandbox-host-state".to_owned())
    } else if let Some(h) = wf_host_state {
        let hs = HostState::parse(&h.value).ok_or_else(|| {
            r.invalid(
                "C044",
                None,
                format!("invalid host_state '{}' (want auto or none)", h.value),
            )
        })?;
        (hs, "workflow sandbox.host_state".to_owned())
    } else if let Some(h) = r.env.host_state {
        (h, ENV_HOST_STATE.to_owned())
    } else {
        (HostState::Auto, "default".to_owned())
    };
    Ok(chosen)
}

/// The run's OCI runtime and where it came from: the flag, the workflow, the operator's variable, the engine's
/// default (the floor is applied per scope, [`Resolver::runtime_for`]).
fn run_runtime(r: &mut Resolver<'_, '_>, wdecl: Option<&SandboxDecl>) -> Result<RuntimeChoice> {
    if let Some(rt) = &r.inputs.cli_runtime {
        return Ok(RuntimeChoice {
            name: rt.clone(),
            source: "cli flag --sandbox-runtime".to_owned(),
        });
    }
    let declared = wdecl
        .filter(|d| d.kind != SandboxKind::Off)
        .and_then(|d| d.runtime.as_ref());
    if let Some(rt) = declared {
        let name = OciRuntime::parse(&rt.value).map_err(|m| r.invalid("C044", None, m))?;
        return Ok(RuntimeChoice {
            name,
            source: "workflow sandbox.runtime".to_owned(),
        });
    }
    Ok(match &r.env.runtime {
        Some(rt) => RuntimeChoice {
            name: rt.clone(),
            source: ENV_OCI_RUNTIME.to_owned(),
        },
        None => RuntimeChoice::default(),
    })
}

/// A node's own container: the flag, the node's `sandbox.runtime`, else the run's choice.
fn node_runtime(r: &mut Resolver<'_, '_>, d: &SandboxDecl, id: &str) -> Result<RuntimeChoice> {
    let declared = d.runtime.as_ref().filter(|_| d.kind != SandboxKind::Off);
    match declared {
        Some(rt) if r.inputs.cli_runtime.is_none() => {
            let name = OciRuntime::parse(&rt.value).map_err(|m| r.invalid("C044", Some(id), m))?;
            Ok(RuntimeChoice {
                name,
                source: "node sandbox.runtime".to_owned(),
            })
        }
        _ => Ok(r.run_runtime.clone()),
    }
}

/// The run-scope sandbox (01 §8.4) with its network (01 §8.5), or why there is none that can be skipped.
fn run_scope(
    r: &mut Resolver<'_, '_>,
    wdecl: Option<&SandboxDecl>,
    mode: ScopeMode,
    source: &str,
    run_hs: (HostState, &str),
) -> Result<(Option<ResolvedSandbox>, Option<String>)> {
    let wnet = wdecl
        .filter(|d| d.kind != SandboxKind::Off)
        .and_then(|d| d.network.as_ref());
    let wfields = BlockFields::of(wdecl);
    let mut run_skippable = None;
    let mut run: Option<ResolvedSandbox> = match mode {
        ScopeMode::None => None,
        ScopeMode::Inline => {
            let d = wdecl.ok_or_else(|| ResolveError::InvalidDeclaration {
                scope: scope_label(r.wf, None),
            })?;
            Some(r.build_inline(d, source.to_owned(), Origin::Workflow, None, None)?)
        }
        ScopeMode::Auto => match r.build_auto(&wfields, source.to_owned(), None)? {
            Built::Sandbox(sb) => Some(*sb),
            Built::Skippable => {
                run_skippable = Some(SKIP_REASON.to_owned());
                None
            }
        },
    };
    if let Some(sb) = run.as_mut() {
        sb.network = r.run_network(
            wnet,
            sb.origin == Origin::Devcontainer,
            None,
            "workflow sandbox.network",
        )?;
        sb.degrade_allowed = r.degrade_allowed(sb.mode);
        r.host_state_for(sb, run_hs.0, run_hs.1.to_owned(), None);
        let rt = r.run_runtime.clone();
        r.runtime_for(sb, rt, None);
        sb.refresh_key();
    }
    Ok((run, run_skippable))
}

fn choice_mode(m: ModeChoice) -> ScopeMode {
    match m {
        ModeChoice::Auto => ScopeMode::Auto,
        ModeChoice::None => ScopeMode::None,
    }
}

fn place_node(
    r: &mut Resolver<'_, '_>,
    id: &str,
    decl: Option<&SandboxDecl>,
    cli_off: bool,
    run: Option<&ResolvedSandbox>,
    wdecl: Option<&SandboxDecl>,
    run_hs: (HostState, &str),
) -> Result<NodePlacement> {
    let host = |reason: &str| NodePlacement::Host {
        reason: reason.to_owned(),
        skip_notice: None,
    };
    // The node's own mode before floors.
    let (mode, mut source) = match decl.map(|d| d.kind) {
        None => {
            return Ok(match run {
                Some(_) => NodePlacement::Run { network: None },
                None => host("run is unsandboxed"),
            });
        }
        Some(k) if cli_off && k != SandboxKind::Override => (ScopeMode::None, SRC_CLI.to_owned()),
        Some(SandboxKind::Off) => (ScopeMode::None, SRC_NODE.to_owned()),
        Some(SandboxKind::Auto) => (ScopeMode::Auto, SRC_NODE.to_owned()),
        Some(SandboxKind::Inline) => (ScopeMode::Inline, SRC_NODE.to_owned()),
        Some(SandboxKind::Override) => {
            let d = decl.and_then(|d| d.network.as_ref());
            return Ok(match (run, d) {
                (Some(sb), Some(net)) => NodePlacement::Run {
                    network: Some(r.node_network(&sb.network, net, id)?),
                },
                (Some(_), None) => NodePlacement::Run { network: None },
                (None, _) => NodePlacement::Host {
                    reason: "run is unsandboxed".to_owned(),
                    skip_notice: Some(OVERRIDE_NOTICE.to_owned()),
                },
            });
        }
        Some(SandboxKind::Invalid) => {
            return Err(ResolveError::InvalidDeclaration {
                scope: scope_label(r.wf, Some(id)),
            });
        }
    };
    let mode = r.mode_floor(mode, &mut source, Some(id));
    let d = decl.ok_or_else(|| ResolveError::InvalidDeclaration {
        scope: scope_label(r.wf, Some(id)),
    })?;
    let own_hs = d.host_state.as_ref().filter(|_| d.kind != SandboxKind::Off);
    let (hs, hs_source) = match own_hs {
        Some(h) => (
            HostState::parse(&h.value).ok_or_else(|| {
                r.invalid(
                    "C044",
                    Some(id),
                    format!("invalid host_state '{}' (want auto or none)", h.value),
                )
            })?,
            "node sandbox.host_state".to_owned(),
        ),
        None => (run_hs.0, run_hs.1.to_owned()),
    };
    let mut sb = match mode {
        ScopeMode::None => {
            return Ok(host(if cli_off {
                "cli flag --sandbox none"
            } else {
                "node sandbox: none"
            }));
        }
        ScopeMode::Inline => r.build_inline(d, source, Origin::Node, Some(id), wdecl)?,
        ScopeMode::Auto => {
            // A node raised by a floor keeps its own fields (an off block has none).
            let own = BlockFields::of(Some(d));
            // The workflow's auto block fields are inherited; its env layer is inherited from any block kind.
            let base = match wdecl {
                Some(w) if w.kind == SandboxKind::Auto => BlockFields::of(Some(w)),
                w => BlockFields {
                    env: BlockFields::of(w).env,
                    ..BlockFields::default()
                },
            };
            match r.build_auto(&own.over(base), source, Some(id))? {
                Built::Sandbox(sb) => *sb,
                Built::Skippable => {
                    return Ok(NodePlacement::Host {
                        reason: SKIP_REASON.to_owned(),
                        skip_notice: Some(SKIP_REASON.to_owned()),
                    });
                }
            }
        }
    };
    // Network: relative to the run's policy, or the workflow table when the run is unsandboxed.
    let parent = match run {
        Some(rsb) => rsb.network.clone(),
        None => {
            let wnet = wdecl
                .filter(|w| w.kind != SandboxKind::Off)
                .and_then(|w| w.network.as_ref());
            r.run_network(
                wnet,
                sb.origin == Origin::Devcontainer,
                None,
                "workflow sandbox.network",
            )?
        }
    };
    sb.network = match d.network.as_ref().filter(|_| d.kind != SandboxKind::Off) {
        Some(net) => r.node_network(&parent, net, id)?,
        None => NetworkPolicySpec {
            defaulted: false,
            ..parent
        },
    };
    sb.degrade_allowed = r.degrade_allowed(sb.mode);
    let floors_before = r.floors.len();
    r.host_state_for(&mut sb, hs, hs_source, Some(id));
    let rt = node_runtime(r, d, id)?;
    r.runtime_for(&mut sb, rt, Some(id));
    sb.refresh_key();
    if let Some(rsb) = run
        && sb.mode == ResolvedMode::Auto
        && rsb.mode == ResolvedMode::Auto
        && rsb.key == sb.key
    {
        // The guard and runtime floor applications recorded for this node duplicate the run's; drop them.
        r.floors.truncate(floors_before);
        return Ok(NodePlacement::Run { network: None });
    }
    Ok(NodePlacement::Own {
        key: sb.key.clone(),
        sandbox: Box::new(sb),
    })
}
