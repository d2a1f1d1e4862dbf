//! Layers and merge (§5): the container-scope and exec-scope environments of a sandbox.

use std::collections::BTreeMap;
use std::fmt;

use crate::class::{Category, Classification, DenyClass};
use crate::error::Result;
use crate::validate::{Layer, validate_entry, validate_total};

/// Value of `NO_PROXY` / `no_proxy` while the egress proxy is active.
pub const NO_PROXY_VALUE: &str = "localhost,127.0.0.1,::1";
/// Names set to the proxy URL while the egress proxy is active.
pub const PROXY_URL_NAMES: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];
/// Names set to [`NO_PROXY_VALUE`] while the egress proxy is active.
pub const NO_PROXY_NAMES: &[&str] = &["NO_PROXY", "no_proxy"];
/// Set to `1` while the egress proxy is active.
pub const NODE_USE_ENV_PROXY: &str = "NODE_USE_ENV_PROXY";
/// Reserved while the run-files mount is present.
pub const ARTIFACT_FILES_DIR_NAME: &str = "ITERION_ARTIFACT_FILES_DIR";
/// Value of [`ARTIFACT_FILES_DIR_NAME`].
pub const ARTIFACT_FILES_DIR_VALUE: &str = "/iterion/artifact-files";

/// Where an entry came from, as reported (`source` of a report entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Source {
    /// devcontainer `remoteEnv`.
    #[serde(rename = "devcontainer.remoteEnv")]
    RemoteEnv,
    /// devcontainer `containerEnv`.
    #[serde(rename = "devcontainer.containerEnv")]
    ContainerEnv,
    /// devcontainer `runArgs -e`.
    #[serde(rename = "devcontainer.runArgs")]
    RunArgs,
    /// Runtime defaults.
    #[serde(rename = "defaults")]
    Defaults,
    /// Workflow (and node) `env:`.
    #[serde(rename = "workflow")]
    Workflow,
    /// Operator launch env (container scope).
    #[serde(rename = "operator")]
    Operator,
}

impl Source {
    /// The reported string, e.g. `devcontainer.containerEnv`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::RemoteEnv => "devcontainer.remoteEnv",
            Source::ContainerEnv => "devcontainer.containerEnv",
            Source::RunArgs => "devcontainer.runArgs",
            Source::Defaults => "defaults",
            Source::Workflow => "workflow",
            Source::Operator => "operator",
        }
    }
}

/// What happened to a reported name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The entry was dropped.
    Removed,
    /// The entry was replaced by a reserved value.
    Overridden,
}

/// A feature that reserves names (§5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// The egress proxy (network mode allowlist or denylist).
    Proxy,
    /// TLS inspection trust variables.
    Tls,
    /// The run-files mount.
    ArtifactFiles,
    /// Secret substitution.
    Secret,
}

impl Feature {
    /// `reserved:<feature>`.
    pub fn code(self) -> &'static str {
        match self {
            Feature::Proxy => "reserved:proxy",
            Feature::Tls => "reserved:tls",
            Feature::ArtifactFiles => "reserved:artifact_files",
            Feature::Secret => "reserved:secret",
        }
    }

    fn category(self) -> Category {
        match self {
            Feature::Proxy => Category::Proxy,
            Feature::Tls => Category::TlsTrust,
            Feature::ArtifactFiles => Category::Iterion,
            Feature::Secret => Category::Credential,
        }
    }
}

/// One entry of the merge report: names and rule codes only, never values.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EnvReportEntry {
    /// The variable name.
    pub name: String,
    /// Where the removed or overridden value came from.
    pub source: Source,
    /// Removed or overridden.
    pub action: Action,
    /// Rule code (`suffix:_TOKEN`) or reserved feature (`reserved:proxy`).
    pub reason: String,
    /// Category of the rule.
    pub category: Category,
}

/// Writes `{NAME(len), …}` for a list of entries: names and value lengths, never values.
fn debug_names<'a>(
    f: &mut fmt::Formatter<'_>,
    entries: impl Iterator<Item = (&'a str, Option<usize>)>,
) -> fmt::Result {
    let mut l = f.debug_list();
    for (n, len) in entries {
        match len {
            Some(len) => l.entry(&format_args!("{n}=<redacted, {len} bytes>")),
            None => l.entry(&format_args!("{n}=null")),
        };
    }
    l.finish()
}

fn map_debug(m: &BTreeMap<String, String>) -> impl fmt::Debug + '_ {
    Redacted(m)
}

struct Redacted<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_names(f, self.0.iter().map(|(k, v)| (k.as_str(), Some(v.len()))))
    }
}

/// The repository layer (layer 1) with its sub-sources.
///
/// Within the layer, `container_env` overlays `remote_env`, and `run_args` overlays both. A `remote_env` value
/// of `None` (JSON `null`) means `remoteEnv` contributes nothing for that name.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RepoEnv {
    /// devcontainer `remoteEnv` (after `${localEnv:…}` expansion).
    pub remote_env: BTreeMap<String, Option<String>>,
    /// devcontainer `containerEnv`.
    pub container_env: BTreeMap<String, String>,
    /// `runArgs -e NAME=VALUE` entries.
    pub run_args: BTreeMap<String, String>,
}

impl RepoEnv {
    /// An empty repository layer.
    pub fn new() -> Self {
        Self::default()
    }
}

impl fmt::Debug for RepoEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct R<'a>(&'a BTreeMap<String, Option<String>>);
        impl fmt::Debug for R<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                debug_names(
                    f,
                    self.0
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_ref().map(String::len))),
                )
            }
        }
        f.debug_struct("RepoEnv")
            .field("remote_env", &R(&self.remote_env))
            .field("container_env", &map_debug(&self.container_env))
            .field("run_args", &map_debug(&self.run_args))
            .finish()
    }
}

/// The layers of a container environment (§5.1), lowest to highest precedence (reserved values separately).
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnvLayers {
    /// Layer 1: the repository (deny class applied).
    pub repo: RepoEnv,
    /// Layer 2: runtime defaults (`HOME`).
    pub defaults: BTreeMap<String, String>,
    /// Layer 3: workflow then node `env:` (already overlaid by the caller).
    pub workflow: BTreeMap<String, String>,
    /// Layer 4a: operator container scope (`--sandbox-env`, the library's `operator_env`).
    pub operator: BTreeMap<String, String>,
}

impl EnvLayers {
    /// Empty layers.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The names each layer contributed (what the run record keeps, 02 §5.5): never values.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct LayerNames {
    /// Repository layer names (all sub-sources, `null` removals excluded), sorted.
    pub repo: Vec<String>,
    /// Workflow layer names, sorted.
    pub workflow: Vec<String>,
    /// Operator layer names, sorted.
    pub operator: Vec<String>,
}

impl EnvLayers {
    /// The names per layer, for the run record.
    pub fn names(&self) -> LayerNames {
        let mut repo: Vec<String> = self
            .repo
            .remote_env
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k.clone())
            .chain(self.repo.container_env.keys().cloned())
            .chain(self.repo.run_args.keys().cloned())
            .collect();
        repo.sort();
        repo.dedup();
        LayerNames {
            repo,
            workflow: self.workflow.keys().cloned().collect(),
            operator: self.operator.keys().cloned().collect(),
        }
    }
}

impl fmt::Debug for EnvLayers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnvLayers")
            .field("repo", &self.repo)
            .field("defaults", &map_debug(&self.defaults))
            .field("workflow", &map_debug(&self.workflow))
            .field("operator", &map_debug(&self.operator))
            .finish()
    }
}

/// What the runtime reserves for this sandbox (§5.3).
///
/// The proxy URL embeds the run's proxy token. The merge report does not depend on the URL's value (any
/// workflow or operator value of a proxy name is reported as overridden), so the runtime may merge with a
/// provisional URL to emit the event before the proxy is bound, and merge again with the final one.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reserved {
    /// Container-scope proxy URL when the egress proxy is active (network mode allowlist or denylist).
    pub proxy_url: Option<String>,
    /// TLS inspection trust variables and their paths.
    pub tls: Vec<(String, String)>,
    /// Whether the run-files mount is present.
    pub artifact_files: bool,
    /// Substituted secrets: env name → placeholder, for names the operator layer put in this scope.
    pub secrets: Vec<(String, String)>,
}

impl Reserved {
    /// Nothing reserved (network mode open, no TLS inspection, no run-files mount).
    pub fn none() -> Self {
        Self::default()
    }

    /// With the egress proxy active: the container-scope proxy URL.
    pub fn with_proxy(mut self, url: impl Into<String>) -> Self {
        self.proxy_url = Some(url.into());
        self
    }

    /// With TLS inspection: the trust variables and their paths.
    pub fn with_tls(mut self, vars: Vec<(String, String)>) -> Self {
        self.tls = vars;
        self
    }

    /// With the run-files mount present.
    pub fn with_artifact_files(mut self) -> Self {
        self.artifact_files = true;
        self
    }

    /// With substituted secrets (env name → placeholder).
    pub fn with_secrets(mut self, secrets: Vec<(String, String)>) -> Self {
        self.secrets = secrets;
        self
    }

    /// Whether `name` is a proxy name iterion controls (any name ending in `_PROXY`, any case) while the proxy
    /// is active.
    pub fn reserves_proxy_name(&self, name: &str) -> bool {
        self.proxy_url.is_some() && is_proxy_name(name)
    }
}

impl fmt::Debug for Reserved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |v: &[(String, String)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        f.debug_struct("Reserved")
            .field("proxy", &self.proxy_url.is_some())
            .field("tls", &names(&self.tls))
            .field("artifact_files", &self.artifact_files)
            .field("secrets", &names(&self.secrets))
            .finish()
    }
}

/// Whether a name ends in `_PROXY` in any letter case.
pub fn is_proxy_name(name: &str) -> bool {
    let n = name.as_bytes();
    n.len() >= 6 && n[n.len() - 6..].eq_ignore_ascii_case(b"_PROXY")
}

/// The merged container environment and the report of what was removed or overridden.
#[derive(Clone, PartialEq, Eq)]
pub struct MergedEnv {
    /// Container scope, sorted by name (byte order).
    pub container: Vec<(String, String)>,
    /// Report entries, sorted by `(name, source)`.
    pub report: Vec<EnvReportEntry>,
}

impl fmt::Debug for MergedEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct C<'a>(&'a [(String, String)]);
        impl fmt::Debug for C<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                debug_names(f, self.0.iter().map(|(k, v)| (k.as_str(), Some(v.len()))))
            }
        }
        f.debug_struct("MergedEnv")
            .field("container", &C(&self.container))
            .field("report", &self.report)
            .finish()
    }
}

impl MergedEnv {
    /// The container-scope value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.container
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.container[i].1.as_str())
    }

    /// Sorted, de-duplicated names that were removed or overridden.
    pub fn reported_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.report.iter().map(|e| e.name.clone()).collect();
        v.dedup();
        v
    }
}

/// Merges the layers with the built-in deny class. See [`merge_with`].
pub fn merge(layers: &EnvLayers, reserved: &Reserved) -> Result<MergedEnv> {
    merge_with(&DenyClass::builtin(), layers, reserved)
}

fn validate_map<'a>(layer: Layer, it: impl Iterator<Item = (&'a String, &'a String)>) -> Result<()> {
    for (n, v) in it {
        validate_entry(layer, n, v)?;
    }
    Ok(())
}

/// Merges the layers (§5.4) with a given deny class: validation, repository filtering, precedence, reserved
/// names. Any invalid entry aborts the merge.
pub fn merge_with(class: &DenyClass, layers: &EnvLayers, reserved: &Reserved) -> Result<MergedEnv> {
    // 1. validate
    let repo = &layers.repo;
    for (n, v) in &repo.remote_env {
        validate_entry(Layer::Repository, n, v.as_deref().unwrap_or(""))?;
    }
    validate_map(Layer::Repository, repo.container_env.iter())?;
    validate_map(Layer::Repository, repo.run_args.iter())?;
    validate_map(Layer::Defaults, layers.defaults.iter())?;
    validate_map(Layer::Workflow, layers.workflow.iter())?;
    validate_map(Layer::Operator, layers.operator.iter())?;

    let mut report = Vec::new();
    let mut env: BTreeMap<String, (String, Source)> = BTreeMap::new();

    // 2. repository layer: remoteEnv < containerEnv < runArgs, deny-class names removed per sub-source
    let subs = repo
        .remote_env
        .iter()
        .filter_map(|(n, v)| v.as_ref().map(|v| (n, v, Source::RemoteEnv)))
        .chain(
            repo.container_env
                .iter()
                .map(|(n, v)| (n, v, Source::ContainerEnv)),
        )
        .chain(repo.run_args.iter().map(|(n, v)| (n, v, Source::RunArgs)));
    for (name, value, source) in subs {
        match class.classify(name) {
            Classification::Deny(r) => report.push(EnvReportEntry {
                name: name.clone(),
                source,
                action: Action::Removed,
                reason: r.code(),
                category: r.category,
            }),
            Classification::Pass => {
                env.insert(name.clone(), (value.clone(), source));
            }
        }
    }

    // 3. defaults, workflow, operator
    for (map, source) in [
        (&layers.defaults, Source::Defaults),
        (&layers.workflow, Source::Workflow),
        (&layers.operator, Source::Operator),
    ] {
        for (n, v) in map {
            env.insert(n.clone(), (v.clone(), source));
        }
    }

    // 4. reserved layer
    let set_reserved = |env: &mut BTreeMap<String, (String, Source)>,
                        report: &mut Vec<EnvReportEntry>,
                        name: &str,
                        value: &str,
                        feature: Feature| {
        if let Some((old, source)) = env.get(name)
            && old != value
            && !(feature == Feature::Secret && *source == Source::Operator)
        {
            report.push(EnvReportEntry {
                name: name.to_string(),
                source: *source,
                action: Action::Overridden,
                reason: feature.code().to_string(),
                category: feature.category(),
            });
        }
        env.insert(name.to_string(), (value.to_string(), Source::Operator));
    };
    if let Some(url) = &reserved.proxy_url {
        let reserved_names: Vec<&str> = PROXY_URL_NAMES
            .iter()
            .chain(NO_PROXY_NAMES)
            .chain(std::iter::once(&NODE_USE_ENV_PROXY))
            .copied()
            .collect();
        let others: Vec<String> = env
            .keys()
            .filter(|n| is_proxy_name(n) && !reserved_names.contains(&n.as_str()))
            .cloned()
            .collect();
        for n in others {
            if let Some((_, source)) = env.remove(&n) {
                report.push(EnvReportEntry {
                    name: n,
                    source,
                    action: Action::Removed,
                    reason: Feature::Proxy.code().to_string(),
                    category: Category::Proxy,
                });
            }
        }
        for n in PROXY_URL_NAMES {
            set_reserved(&mut env, &mut report, n, url, Feature::Proxy);
        }
        for n in NO_PROXY_NAMES {
            set_reserved(&mut env, &mut report, n, NO_PROXY_VALUE, Feature::Proxy);
        }
        set_reserved(&mut env, &mut report, NODE_USE_ENV_PROXY, "1", Feature::Proxy);
    }
    for (n, v) in &reserved.tls {
        set_reserved(&mut env, &mut report, n, v, Feature::Tls);
    }
    if reserved.artifact_files {
        set_reserved(
            &mut env,
            &mut report,
            ARTIFACT_FILES_DIR_NAME,
            ARTIFACT_FILES_DIR_VALUE,
            Feature::ArtifactFiles,
        );
    }
    for (n, placeholder) in &reserved.secrets {
        if env.contains_key(n) {
            set_reserved(&mut env, &mut report, n, placeholder, Feature::Secret);
        }
    }

    // 5. sorted output
    let container: Vec<(String, String)> = env.into_iter().map(|(k, (v, _))| (k, v)).collect();
    validate_total(container.iter().map(|(a, b)| (a.as_str(), b.as_str())))?;
    report.sort_by(|a, b| (a.name.as_str(), a.source.as_str()).cmp(&(b.name.as_str(), b.source.as_str())));
    Ok(MergedEnv { container, report })
}

/// The exec-scope environment of one process (§5.2, §5.4 step 6).
#[derive(Clone, PartialEq, Eq)]
pub struct ExecEnv {
    /// Exec-scope entries, sorted by name.
    pub env: Vec<(String, String)>,
    /// Names of exec entries dropped because they are reserved (for a debug log line; never values).
    pub dropped: Vec<String>,
}

impl fmt::Debug for ExecEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct C<'a>(&'a [(String, String)]);
        impl fmt::Debug for C<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                debug_names(f, self.0.iter().map(|(k, v)| (k.as_str(), Some(v.len()))))
            }
        }
        f.debug_struct("ExecEnv")
            .field("env", &C(&self.env))
            .field("dropped", &self.dropped)
            .finish()
    }
}

/// Builds the exec scope: the exec entries (validated, layer `exec`) minus reserved names, plus the reserved
/// exec values (`exec_proxy_url`: the per-node proxy URL, set on every proxy name while the proxy is active).
///
/// Exec scope overrides container scope for that process only; reserved names win in both scopes.
pub fn merge_exec(
    exec: &[(String, String)],
    reserved: &Reserved,
    exec_proxy_url: Option<&str>,
) -> Result<ExecEnv> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut dropped = Vec::new();
    let is_reserved = |n: &str| {
        reserved.reserves_proxy_name(n)
            || n == NODE_USE_ENV_PROXY && reserved.proxy_url.is_some()
            || reserved.tls.iter().any(|(t, _)| t == n)
            || reserved.artifact_files && n == ARTIFACT_FILES_DIR_NAME
    };
    for (n, v) in exec {
        validate_entry(Layer::Exec, n, v)?;
        if is_reserved(n) {
            dropped.push(n.clone());
        } else {
            env.insert(n.clone(), v.clone());
        }
    }
    for (n, placeholder) in &reserved.secrets {
        if let Some(v) = env.get_mut(n) {
            v.clone_from(placeholder);
        }
    }
    if reserved.proxy_url.is_some()
        && let Some(url) = exec_proxy_url
    {
        for n in PROXY_URL_NAMES {
            env.insert((*n).to_string(), url.to_string());
        }
    }
    dropped.sort();
    dropped.dedup();
    Ok(ExecEnv {
        env: env.into_iter().collect(),
        dropped,
    })
}
