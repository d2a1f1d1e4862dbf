//! The syntax tree produced by [`crate::parser::parse`]: every top-level declaration as written, with spans.
//!
//! Declarations whose shape is already final reuse the model types of [`crate::model`] (nodes, prompts,
//! schemas, edges, sandbox declarations); `compile` resolves references, merges vars and attachments and
//! derives sandbox kinds.

use serde::Serialize;

use crate::model::{
    Attachment, Budget, Compaction, Edge, McpBlock, McpServer, Node, Preset, Prompt, SandboxDecl, Schema,
    Span, Spanned, Var,
};

/// A parsed file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ast {
    /// The file label.
    pub file: String,
    /// Whether the strict-escape directive was on.
    pub strict_escape: bool,
    /// Top-level declarations in file order.
    pub decls: Vec<Decl>,
}

/// A top-level declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "decl")]
pub enum Decl {
    /// `vars:`.
    Vars(VarsBlock),
    /// `presets:`.
    Presets(PresetsBlock),
    /// `attachments:`.
    Attachments(AttachmentsBlock),
    /// `mcp_server NAME:`.
    McpServer(Box<McpServer>),
    /// `prompt NAME:`.
    Prompt(Prompt),
    /// `schema NAME:`.
    Schema(Schema),
    /// `cursor NAME:`.
    Cursor(CursorDecl),
    /// `agent|judge|router|human|tool|compute NAME:`.
    Node(Box<Node>),
    /// `workflow NAME:`.
    Workflow(Box<WorkflowDecl>),
}

/// A `vars:` block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VarsBlock {
    /// Span of the `vars` keyword.
    #[serde(skip)]
    pub span: Span,
    /// Declared vars (duplicates removed, `E010`).
    pub vars: Vec<Var>,
}

/// A `presets:` block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PresetsBlock {
    /// Span of the `presets` keyword.
    #[serde(skip)]
    pub span: Span,
    /// Presets in order (duplicate names are kept for `C072`).
    pub presets: Vec<Preset>,
}

/// An `attachments:` block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttachmentsBlock {
    /// Span of the `attachments` keyword.
    #[serde(skip)]
    pub span: Span,
    /// Attachments in order.
    pub attachments: Vec<Attachment>,
}

/// A `cursor NAME:` declaration as written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CursorDecl {
    /// Cursor name.
    pub name: Spanned<String>,
    /// `description:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `values:` entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<(Spanned<String>, Spanned<String>)>>,
    /// `bands:` entries (keys unparsed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bands: Option<Vec<(Spanned<String>, Spanned<String>)>>,
}

/// A `workflow NAME:` block as written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkflowDecl {
    /// Workflow name.
    pub name: Spanned<String>,
    /// `entry:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<Spanned<String>>,
    /// Workflow-level `vars:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vars: Option<VarsBlock>,
    /// Workflow-level `attachments:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<AttachmentsBlock>,
    /// `default_backend:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_backend: Option<Spanned<String>>,
    /// `tool_policy:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_policy: Option<Vec<Spanned<String>>>,
    /// `capabilities:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<Spanned<String>>>,
    /// `interaction:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interaction: Option<Spanned<String>>,
    /// `mcp:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpBlock>,
    /// `compaction:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Spanned<Compaction>>,
    /// `budget:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Spanned<Budget>>,
    /// `worktree:` as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<Spanned<String>>,
    /// `sandbox:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxDecl>,
    /// Edges in order.
    pub edges: Vec<Edge>,
}
