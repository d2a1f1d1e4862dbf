//! Variable expansion for `devcontainer.json` values and DSL sandbox strings (01 §6.7, §7.4).

use std::collections::BTreeMap;

/// Host environment names `${localEnv:NAME}` may read (plus every name starting with `LC_`).
pub const LOCAL_ENV_ALLOWLIST: &[&str] = &[
    "HOME",
    "USER",
    "USERNAME",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "PWD",
    "OLDPWD",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "PUID",
    "PGID",
    "VARIANT",
];

/// Whether `${localEnv:NAME}` may read `name`.
pub fn is_allowlisted(name: &str) -> bool {
    LOCAL_ENV_ALLOWLIST.contains(&name) || name.starts_with("LC_")
}

/// What the expander knows about the surroundings.
#[derive(Debug, Clone, Copy)]
pub struct ExpandContext<'a> {
    /// The host environment (only allowlisted names are read).
    pub env: &'a BTreeMap<String, String>,
    /// Absolute path of the repository root (`${localWorkspaceFolder}`), when known.
    pub local_workspace_folder: Option<&'a str>,
    /// The resolved container workspace folder (`${containerWorkspaceFolder}`), when known. Leave it `None` while
    /// expanding the workspace folder itself.
    pub container_workspace_folder: Option<&'a str>,
}

/// Something the caller should warn about (never carries an environment value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VarWarning {
    /// `${localEnv:NAME}` (or `${env:NAME}`) with NAME outside the allowlist: expanded as unset
    /// (`D010` / `C105`).
    NotAllowlisted {
        /// The variable name.
        name: String,
    },
    /// `${devcontainerId}`: kept verbatim (`D009` / `C105`).
    DevcontainerId,
    /// Another `${…}` form iterion does not know, kept verbatim (`C105` in the DSL, silent in devcontainer.json).
    Unsupported {
        /// The whole reference, e.g. `${foo}`.
        text: String,
    },
}

impl VarWarning {
    /// The message of the matching diagnostic (`C105` wording; `D010` uses the same for `NotAllowlisted`).
    pub fn message(&self) -> String {
        match self {
            VarWarning::NotAllowlisted { name } => {
                format!("localEnv:{name} is not on the allowlist and expands as unset")
            }
            VarWarning::DevcontainerId => {
                "sandbox variable '${devcontainerId}' is not supported and is kept verbatim".to_owned()
            }
            VarWarning::Unsupported { text } => {
                format!("sandbox variable '{text}' is not supported and is kept verbatim")
            }
        }
    }
}

/// The result of [`expand_local_vars`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    /// The expanded text.
    pub text: String,
    /// Warnings, in order of appearance.
    pub warnings: Vec<VarWarning>,
    /// Whether `${containerWorkspaceFolder}` or `${containerWorkspaceFolderBasename}` was met while the container
    /// workspace folder was unknown (kept verbatim).
    pub container_folder_unresolved: bool,
}

fn valid_name(name: &str) -> bool {
    let mut it = name.chars();
    matches!(it.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && it.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn basename(p: &str) -> &str {
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return p;
    }
    t.rsplit('/').next().unwrap_or(t)
}

/// Expands the devcontainer variables of 01 §7.4 in one left-to-right pass (inserted text is never rescanned).
///
/// ```
/// use std::collections::BTreeMap;
/// use iterion_spec::devcontainer::{expand_local_vars, ExpandContext};
/// let env = BTreeMap::from([("HOME".to_owned(), "/home/jo".to_owned())]);
/// let ctx = ExpandContext { env: &env, local_workspace_folder: Some("/repo/proj"), container_workspace_folder: None };
/// assert_eq!(expand_local_vars("${localEnv:HOME}/.claude", &ctx).text, "/home/jo/.claude");
/// assert_eq!(expand_local_vars("${localWorkspaceFolderBasename}", &ctx).text, "proj");
/// ```
pub fn expand_local_vars(s: &str, ctx: &ExpandContext<'_>) -> Expanded {
    let mut out = String::with_capacity(s.len());
    let mut warnings = Vec::new();
    let mut unresolved = false;
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let inner = &after[..end];
        let whole = &rest[start..start + 2 + end + 1];
        match expand_one(inner, ctx, &mut warnings, &mut unresolved) {
            Some(v) => out.push_str(&v),
            None => out.push_str(whole),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Expanded {
        text: out,
        warnings,
        container_folder_unresolved: unresolved,
    }
}

/// The replacement for one `${inner}`, or `None` to keep it verbatim.
fn expand_one(
    inner: &str,
    ctx: &ExpandContext<'_>,
    warnings: &mut Vec<VarWarning>,
    unresolved: &mut bool,
) -> Option<String> {
    match inner {
        "localWorkspaceFolder" => return ctx.local_workspace_folder.map(str::to_owned),
        "localWorkspaceFolderBasename" => return ctx.local_workspace_folder.map(|p| basename(p).to_owned()),
        "containerWorkspaceFolder" | "containerWorkspaceFolderBasename" => {
            let Some(p) = ctx.container_workspace_folder else {
                *unresolved = true;
                return None;
            };
            return Some(if inner == "containerWorkspaceFolder" {
                p.to_owned()
            } else {
                basename(p).to_owned()
            });
        }
        "devcontainerId" => {
            warnings.push(VarWarning::DevcontainerId);
            return None;
        }
        _ => {}
    }
    let (prefix, rest) = inner.split_once(':').unwrap_or((inner, ""));
    match prefix {
        "localEnv" | "env" if inner.contains(':') => {
            let (name, default) = match rest.split_once(':') {
                Some((n, d)) => (n, Some(d)),
                None => (rest, None),
            };
            if !valid_name(name) {
                return None;
            }
            let value = if is_allowlisted(name) {
                ctx.env.get(name).cloned()
            } else {
                warnings.push(VarWarning::NotAllowlisted {
                    name: name.to_owned(),
                });
                None
            };
            Some(value.unwrap_or_else(|| default.unwrap_or("").to_owned()))
        }
        "containerEnv" if inner.contains(':') => None,
        _ => {
            warnings.push(VarWarning::Unsupported {
                text: format!("${{{inner}}}"),
            });
            None
        }
    }
}

/// Compile-time check of a sandbox string (01 §6.7): the warnings expansion would produce, without any
/// environment or folder known.
pub fn check_vars(s: &str) -> Vec<VarWarning> {
    let env = BTreeMap::new();
    let ctx = ExpandContext {
        env: &env,
        local_workspace_folder: None,
        container_workspace_folder: None,
    };
    expand_local_vars(s, &ctx).warnings
}
