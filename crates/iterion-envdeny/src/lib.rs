//! `iterion-envdeny`: which environment variable names may never reach a sandbox, and how the container and
//! exec environments are layered.
//!
//! Layer L0: pure functions over injected maps; never reads the process environment.
//!
//! - [`DenyClass::builtin`] and [`DenyClass::classify`]: the deny class (version [`DENY_CLASS_VERSION`]),
//!   case-insensitive, reporting one deterministic rule (`exact` beats `prefix` beats `suffix`, longest wins).
//! - [`merge`]: the container scope from the repository, defaults, workflow and operator layers plus the
//!   reserved names; [`merge_exec`]: the exec scope of one process.
//! - [`SandboxEnvDenied`]: the data of the `sandbox_env_denied` event (names, never values).
//! - [`parse_sandbox_env`]: the `--sandbox-env` rules.
//!
//! ```
//! use iterion_envdeny::{DenyClass, EnvLayers, Reserved, merge};
//!
//! let class = DenyClass::builtin();
//! assert_eq!(class.classify("github_token").to_string(), "deny suffix:_TOKEN");
//! assert!(!class.is_denied("LANG"));
//!
//! let mut layers = EnvLayers::new();
//! layers.repo.container_env.insert("FOO".into(), "1".into());
//! layers.repo.container_env.insert("ANTHROPIC_BASE_URL".into(), "https://evil.example".into());
//! let merged = merge(&layers, &Reserved::none()).unwrap();
//! assert_eq!(merged.container, vec![("FOO".to_string(), "1".to_string())]);
//! assert_eq!(merged.report[0].reason, "prefix:ANTHROPIC_");
//! ```
#![deny(missing_docs)]

mod class;
mod error;
mod event;
mod merge;
mod sandbox_env;
mod validate;

pub use class::{
    Category, Classification, DENY_CLASS_VERSION, DenyClass, DenyReason, EXACT, PREFIXES, Rule, RuleKind,
    SUFFIXES, render_markdown,
};
pub use error::{Error, Result};
pub use event::SandboxEnvDenied;
pub use merge::{
    ARTIFACT_FILES_DIR_NAME, ARTIFACT_FILES_DIR_VALUE, Action, EnvLayers, EnvReportEntry, ExecEnv, Feature,
    LayerNames, MergedEnv, NO_PROXY_NAMES, NO_PROXY_VALUE, NODE_USE_ENV_PROXY, PROXY_URL_NAMES, RepoEnv,
    Reserved, Source, is_proxy_name, merge, merge_exec, merge_with,
};
pub use sandbox_env::{
    RecordedSandboxEnv, SandboxEnvEntry, operator_layer, parse_sandbox_env, resume_sandbox_env,
};
pub use validate::{
    Layer, MAX_ENTRY_LEN, MAX_ENV_BYTES, MAX_ENV_ENTRIES, MAX_NAME_LEN, escape_name, is_valid_name,
    validate_entry, validate_name, validate_total, validate_value, validate_value_bytes,
};

/// Classifies `name` with the built-in class.
pub fn classify(name: &str) -> Classification {
    DenyClass::builtin().classify(name)
}

/// Whether `name` is in the built-in class (the rule the runtime uses to leave `${NAME}` unexpanded in
/// sandboxed tool commands).
pub fn is_denied(name: &str) -> bool {
    DenyClass::builtin().is_denied(name)
}
