//! Vars, attachments and presets: the workflow's vars over the file's (a workflow var replaces a top-level
//! one of the same name), attachments (`C050`–`C052`), preset values (`C070`, `C071`).

use super::compiler::Compiler;
use crate::ast::{AttachmentsBlock, VarsBlock};
use crate::model::{Attachment, Preset, Var, VarType};

/// The file's vars, each replaced by the workflow's var of the same name; the workflow's other vars follow.
pub(super) fn merge_vars(top: Vec<Var>, workflow: Option<VarsBlock>) -> Vec<Var> {
    let mut vars = top;
    for v in workflow.into_iter().flat_map(|b| b.vars) {
        if let Some(slot) = vars.iter_mut().find(|x| x.name.value == v.name.value) {
            *slot = v;
        } else {
            vars.push(v);
        }
    }
    vars
}

impl Compiler<'_> {
    /// The file's attachments then the workflow's: `C050` for a repeated name (the later one is dropped),
    /// `C051` for a name that is also a var, `C052` for an invalid `accept_mime`.
    pub(super) fn attachments(
        &mut self,
        vars: &[Var],
        top: Vec<Attachment>,
        workflow: Option<AttachmentsBlock>,
    ) -> Vec<Attachment> {
        let mut attachments: Vec<Attachment> = Vec::new();
        let all = top
            .into_iter()
            .chain(workflow.into_iter().flat_map(|a| a.attachments));
        for a in all {
            if attachments.iter().any(|x| x.name.value == a.name.value) {
                self.err(
                    "C050",
                    a.name.span,
                    format!("duplicate attachment '{}'", a.name.value),
                );
                continue;
            }
            if vars.iter().any(|v| v.name.value == a.name.value) {
                self.err(
                    "C051",
                    a.name.span,
                    format!("attachment '{}' has the same name as a var", a.name.value),
                );
            }
            for m in &a.accept_mime {
                if !valid_mime(m) {
                    self.err("C052", a.name.span, format!("invalid accept_mime '{m}'"));
                }
            }
            attachments.push(a);
        }
        attachments
    }

    /// `C070` for a preset value of an undeclared var, `C071` for one that does not fit the var's type.
    pub(super) fn presets(&mut self, vars: &[Var], presets: &[Preset]) {
        for p in presets {
            for (var, val) in &p.values {
                match vars.iter().find(|v| v.name.value == var.value) {
                    None => {
                        self.err(
                            "C070",
                            var.span,
                            format!("preset '{}' sets undeclared var '{}'", p.name.value, var.value),
                        );
                    }
                    Some(v) if !preset_fits(v.ty, val) => {
                        self.err(
                            "C071",
                            var.span,
                            format!(
                                "preset '{}': value of '{}' does not match type '{}'",
                                p.name.value,
                                var.value,
                                v.ty.as_str()
                            ),
                        );
                    }
                    Some(_) => {}
                }
            }
        }
    }
}

/// An `accept_mime` entry: some text, a `/`, some text (`image/*`; nothing else is checked).
fn valid_mime(m: &str) -> bool {
    m.split_once('/')
        .is_some_and(|(t, s)| !t.is_empty() && !s.is_empty())
}

/// Whether a JSON value fits a var type (used for presets, `C071`).
pub fn value_fits(ty: VarType, v: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match ty {
        VarType::String => v.is_string(),
        VarType::Bool => v.is_boolean(),
        VarType::Int => v.is_i64() || v.is_u64(),
        VarType::Float => v.is_number(),
        VarType::Json => true,
        VarType::StringList => match v {
            V::Array(a) => a.iter().all(V::is_string),
            V::String(_) => true,
            _ => false,
        },
    }
}

/// Whether a preset value fits its var's type (`C071`): a `string`, `json` or `string[]` var takes a string
/// literal, a `float` an int or a float.
fn preset_fits(ty: VarType, v: &serde_json::Value) -> bool {
    match ty {
        VarType::String | VarType::Json | VarType::StringList => v.is_string(),
        VarType::Bool => v.is_boolean(),
        VarType::Int => v.is_i64() || v.is_u64(),
        VarType::Float => v.is_number(),
    }
}
