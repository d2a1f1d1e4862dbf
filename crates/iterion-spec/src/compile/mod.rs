//! Compilation (01 §3–§6, §9.3): resolves references, checks the graph rules, templates, expressions and
//! sandbox declarations, and builds the [`Workflow`](crate::model::Workflow) model.
//!
//! One concern a file, each using only the files listed before it:
//! - `compiler`: the diagnostic sink every pass writes to;
//! - `hash`: the hasher of the name lookups;
//! - `graph`: name lookups and the node graph (reachability, back edges, availability);
//! - `refs`: templates, expressions and the references they make;
//! - `graph_rules`: the rules over edges and the graph;
//! - `sandbox`, `cursors`, `vars`, `mcp`, `capabilities`: the checks of one kind of declaration;
//! - `node`: the checks of one node;
//! - `workflow`: the workflow pass (builds the model, then runs the checks above in order);
//! - `decls`: the file pass (duplicate declarations), which hands the survivors to the workflow pass;
//! - `check`: the entry points ([`compile`], [`check`], [`check_bytes`]);
//! - `project`: a workflow file with the project's `.mcp.json`.

mod capabilities;
mod check;
mod compiler;
mod cursors;
mod decls;
mod graph;
mod graph_rules;
mod hash;
mod mcp;
mod node;
mod project;
mod refs;
mod sandbox;
mod vars;
mod workflow;

pub use check::{Checked, check, check_bytes, compile};
pub use project::{ProjectMcpServer, check_project, project_mcp_refs, read_mcp_json};
pub use sandbox::sandbox_variable_warnings;
pub use vars::value_fits;

/// The `localEnv` allowlist of 01 §7.4 (every `LC_*` name is allowed too); kept here for compatibility.
pub use crate::devcontainer::vars::LOCAL_ENV_ALLOWLIST;
