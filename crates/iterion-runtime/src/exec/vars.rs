//! Vars (10.2): declared defaults, the preset, `--var NAME=VALUE`, coercion to the declared type and
//! environment expansion of string values.
//!
//! ```
//! use iterion_runtime::exec::parse_var;
//! assert_eq!(parse_var("tags=a,b").unwrap(), ("tags".to_string(), "a,b".to_string()));
//! assert!(parse_var("=1").is_err());
//! ```
use std::collections::BTreeMap;

use iterion_spec::model::{VarType, Workflow};
use iterion_spec::template::{EnvContext, expand_env};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// Splits one `--var` argument at the first `=`; no `=` or an empty name is a usage error.
pub fn parse_var(arg: &str) -> Result<(String, String)> {
    match arg.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        Some(_) => Err(Error::InvalidVar {
            name: arg.to_string(),
            reason: "the name before '=' is empty".into(),
        }),
        None => Err(Error::InvalidVar {
            name: arg.to_string(),
            reason: "expected NAME=VALUE".into(),
        }),
    }
}

/// Launch inputs of [`resolve_vars`].
#[derive(Debug, Clone, Copy)]
pub struct VarInputs<'a> {
    /// `--preset`.
    pub preset: Option<&'a str>,
    /// `--var` arguments already split by [`parse_var`], in command-line order.
    pub vars: &'a [(String, String)],
    /// The launching environment (for `$NAME`, `${NAME}`, `${NAME:-DEFAULT}`).
    pub env: &'a BTreeMap<String, String>,
    /// What `PROJECT_DIR` expands to: the run container's workspace folder when the run scope is sandboxed,
    /// else the host work dir.
    pub project_dir: &'a str,
}

/// Resolves the typed vars of a run (10.2). A var without a value is absent from the result.
pub fn resolve_vars(workflow: &Workflow, inputs: VarInputs<'_>) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    for v in &workflow.vars {
        if let Some(d) = &v.default {
            out.insert(v.name.value.clone(), d.clone());
        }
    }
    if let Some(name) = inputs.preset {
        let preset = workflow
            .presets
            .iter()
            .find(|p| p.name.value == name)
            .ok_or_else(|| Error::UnknownPreset {
                name: name.to_string(),
            })?;
        for (k, value) in &preset.values {
            let decl = workflow.var(&k.value).ok_or_else(|| Error::UnknownVar {
                name: k.value.clone(),
            })?;
            let typed = match value {
                Value::String(s) => coerce(&k.value, decl.ty, s)?,
                other => other.clone(),
            };
            out.insert(k.value.clone(), typed);
        }
    }
    for (name, raw) in inputs.vars {
        let decl = workflow
            .var(name)
            .ok_or_else(|| Error::UnknownVar { name: name.clone() })?;
        out.insert(name.clone(), coerce(name, decl.ty, raw)?);
    }
    let lookup = |n: &str| -> Option<String> {
        if n == "PROJECT_DIR" {
            Some(inputs.project_dir.to_string())
        } else {
            inputs.env.get(n).cloned()
        }
    };
    for v in out.values_mut() {
        expand_strings(v, &lookup);
    }
    Ok(out)
}

fn expand_strings(v: &mut Value, lookup: &dyn Fn(&str) -> Option<String>) {
    match v {
        Value::String(s) => *s = expand_env(s, EnvContext::VarValue, lookup),
        Value::Array(items) => {
            for i in items {
                if let Value::String(s) = i {
                    *s = expand_env(s, EnvContext::VarValue, lookup);
                }
            }
        }
        _ => {}
    }
}

/// Coerces a supplied string to the declared type (10.2 step 3).
pub fn coerce(name: &str, ty: VarType, raw: &str) -> Result<Value> {
    let invalid = |reason: String| Error::InvalidVar {
        name: name.to_string(),
        reason,
    };
    Ok(match ty {
        VarType::String => Value::String(raw.to_string()),
        VarType::Bool => match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Value::Bool(true),
            "false" | "0" | "no" | "off" | "" => Value::Bool(false),
            _ => {
                return Err(invalid(format!(
                    "'{raw}' is not a bool (true/false, yes/no, on/off, 1/0)"
                )));
            }
        },
        VarType::Int => {
            let digits = raw.strip_prefix(['+', '-']).unwrap_or(raw);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid(format!("'{raw}' is not an int")));
            }
            let n: i64 = raw
                .strip_prefix('+')
                .unwrap_or(raw)
                .parse()
                .map_err(|_| invalid(format!("'{raw}' is out of the int range")))?;
            Value::from(n)
        }
        VarType::Float => {
            let ok_chars = !raw.is_empty()
                && raw
                    .bytes()
                    .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'));
            let f: f64 = raw
                .parse()
                .ok()
                .filter(|f: &f64| ok_chars && f.is_finite())
                .ok_or_else(|| invalid(format!("'{raw}' is not a float")))?;
            serde_json::Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| invalid(format!("'{raw}' is not a float")))?
        }
        VarType::Json => serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string())),
        VarType::StringList => match serde_json::from_str::<Vec<String>>(raw) {
            Ok(list) => Value::from(list),
            Err(_) => Value::from(
                raw.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(ty: VarType, raw: &str, expect: &str) {
        let got = match coerce("v", ty, raw) {
            Ok(v) => v.to_string(),
            Err(e) => format!("error: {e}"),
        };
        assert_eq!(got, expect, "{ty:?} {raw:?}");
    }

    #[test]
    fn coercion() {
        check(VarType::Bool, "yes", "true");
        check(VarType::Bool, "ON", "true");
        check(VarType::Bool, "", "false");
        check(
            VarType::Bool,
            "maybe",
            "error: invalid var 'v': 'maybe' is not a bool (true/false, yes/no, on/off, 1/0)",
        );
        check(VarType::Int, "-42", "-42");
        check(VarType::Int, "+7", "7");
        check(VarType::Int, "abc", "error: invalid var 'v': 'abc' is not an int");
        check(
            VarType::Int,
            "99999999999999999999",
            "error: invalid var 'v': '99999999999999999999' is out of the int range",
        );
        check(VarType::Float, "2.5", "2.5");
        check(
            VarType::Float,
            "inf",
            "error: invalid var 'v': 'inf' is not a float",
        );
        check(VarType::Json, "{\"a\":1}", "{\"a\":1}");
        check(VarType::Json, "{bad", "\"{bad\"");
        check(VarType::StringList, "a,b, c", "[\"a\",\"b\",\"c\"]");
        check(VarType::StringList, "a,,b,", "[\"a\",\"b\"]");
        check(VarType::StringList, "[\"x\"]", "[\"x\"]");
        check(VarType::String, "x=y", "\"x=y\"");
    }

    #[test]
    fn var_arguments() {
        assert_eq!(parse_var("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert_eq!(parse_var("a=").unwrap(), ("a".into(), String::new()));
        assert_eq!(
            parse_var("ab").unwrap_err().to_string(),
            "invalid var 'ab': expected NAME=VALUE"
        );
    }
}
