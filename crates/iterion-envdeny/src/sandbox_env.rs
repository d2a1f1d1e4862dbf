//! `--sandbox-env` entries (§7.3): parsing, the operator layer and what the run record keeps.

use std::collections::BTreeMap;
use std::fmt;

use crate::class::{Classification, DenyClass};
use crate::error::{Error, Result};
use crate::merge::is_proxy_name;
use crate::validate::{Layer, escape_name, is_valid_name, validate_value};

/// One `--sandbox-env` entry after parsing.
#[derive(Clone, PartialEq, Eq)]
pub enum SandboxEnvEntry {
    /// `--sandbox-env NAME`: the value was copied from iterion's environment; the record keeps the name only.
    Copy {
        /// The variable name.
        name: String,
        /// The value read from iterion's environment (may be a secret; redacted in `Debug`).
        value: String,
    },
    /// `--sandbox-env NAME=VALUE` for a pass-class name; recorded with its value.
    Value {
        /// The variable name.
        name: String,
        /// The literal value.
        value: String,
    },
}

impl SandboxEnvEntry {
    /// The variable name.
    pub fn name(&self) -> &str {
        match self {
            SandboxEnvEntry::Copy { name, .. } | SandboxEnvEntry::Value { name, .. } => name,
        }
    }

    /// The value given to the sandbox.
    pub fn value(&self) -> &str {
        match self {
            SandboxEnvEntry::Copy { value, .. } | SandboxEnvEntry::Value { value, .. } => value,
        }
    }

    /// What the run record keeps for this entry.
    pub fn recorded(&self) -> RecordedSandboxEnv {
        match self {
            SandboxEnvEntry::Copy { name, .. } => RecordedSandboxEnv::Copy { name: name.clone() },
            SandboxEnvEntry::Value { name, value } => RecordedSandboxEnv::Value {
                name: name.clone(),
                value: value.clone(),
            },
        }
    }
}

impl fmt::Debug for SandboxEnvEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxEnvEntry::Copy { name, value } => {
                write!(f, "Copy({name}=<redacted, {} bytes>)", value.len())
            }
            SandboxEnvEntry::Value { name, value } => write!(f, "Value({name}=<{} bytes>)", value.len()),
        }
    }
}

/// A `--sandbox-env` entry as stored in the run record (05 §1.7 `operator_env`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "form", rename_all = "snake_case")]
pub enum RecordedSandboxEnv {
    /// Name only; re-read from the environment on resume.
    Copy {
        /// The variable name.
        name: String,
    },
    /// Pass-class name with its literal value (never a secret by classification).
    Value {
        /// The variable name.
        name: String,
        /// The literal value.
        value: String,
    },
}

/// Parses `--sandbox-env` arguments in order (the last occurrence of a name wins).
///
/// `lookup` reads iterion's own environment (the CLI passes its snapshot); `proxy_reserved` is true when the
/// run's effective network mode reserves the proxy names (allowlist or denylist).
pub fn parse_sandbox_env(
    class: &DenyClass,
    args: &[String],
    lookup: impl Fn(&str) -> Option<String>,
    proxy_reserved: bool,
) -> Result<Vec<SandboxEnvEntry>> {
    let mut out: Vec<SandboxEnvEntry> = Vec::new();
    for arg in args {
        let entry = match arg.split_once('=') {
            None => {
                check_name(arg, proxy_reserved)?;
                let value = lookup(arg).ok_or_else(|| Error::NotSetInEnvironment { name: arg.clone() })?;
                validate_value(Layer::Operator, arg, &value)?;
                SandboxEnvEntry::Copy {
                    name: arg.clone(),
                    value,
                }
            }
            Some((name, value)) => {
                check_name(name, proxy_reserved)?;
                if let Classification::Deny(r) = class.classify(name) {
                    return Err(Error::LooksLikeSecret {
                        name: name.to_string(),
                        reason: r.code(),
                    });
                }
                validate_value(Layer::Operator, name, value)?;
                SandboxEnvEntry::Value {
                    name: name.to_string(),
                    value: value.to_string(),
                }
            }
        };
        out.retain(|e| e.name() != entry.name());
        out.push(entry);
    }
    Ok(out)
}

fn check_name(name: &str, proxy_reserved: bool) -> Result<()> {
    if !is_valid_name(name.as_bytes()) {
        return Err(Error::InvalidName {
            layer: Layer::Operator,
            name_escaped: escape_name(name.as_bytes()),
        });
    }
    if proxy_reserved && is_proxy_name(name) {
        return Err(Error::ReservedInOperatorLayer {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Re-applies recorded entries on resume: `Copy` names are read again through `lookup` (a missing one is
/// [`Error::NotSetInEnvironment`]); `Value` entries keep their recorded value.
pub fn resume_sandbox_env(
    recorded: &[RecordedSandboxEnv],
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<SandboxEnvEntry>> {
    recorded
        .iter()
        .map(|r| match r {
            RecordedSandboxEnv::Copy { name } => {
                let value = lookup(name).ok_or_else(|| Error::NotSetInEnvironment { name: name.clone() })?;
                validate_value(Layer::Operator, name, &value)?;
                Ok(SandboxEnvEntry::Copy {
                    name: name.clone(),
                    value,
                })
            }
            RecordedSandboxEnv::Value { name, value } => Ok(SandboxEnvEntry::Value {
                name: name.clone(),
                value: value.clone(),
            }),
        })
        .collect()
}

/// The operator layer (container scope) for a list of entries; later entries win.
pub fn operator_layer(entries: &[SandboxEnvEntry]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|e| (e.name().to_string(), e.value().to_string()))
        .collect()
}
