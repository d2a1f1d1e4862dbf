//! The syntax tree produced by [`crate::parser::parse`]: every top-level declaration as written, with spans.
//!
//! Declarations whose shape is already final reuse the model types of [`crate::model`] (nodes, prompts,
//! schemas, edges, sandbox declarations); `compile` resolves references, merges vars and attachments and
//! derives sandbox kinds.

use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

use crate::model::{
    Attachment, Budget, Compaction, Edge, McpBlock, McpServer, Node, Preset, Prompt, SandboxDecl, Schema,
    Span, Spanned, Var,
};

/// A parsed file.
///
/// Serialises as `{"file", "strict_escape", "decls": [...]}` with every node written in place of its index.
#[derive(Debug, Clone, PartialEq)]
pub struct Ast {
    /// The file label.
    pub file: String,
    /// Whether the strict-escape directive was on.
    pub strict_escape: bool,
    /// Top-level declarations in file order.
    pub decls: Vec<Decl>,
    /// The node declarations in file order; [`Decl::Node`] holds an index into this table. Nodes are large,
    /// so they live in one table that `compile` moves into the model as a whole.
    pub nodes: Vec<Node>,
}

impl Ast {
    /// The node a [`Decl::Node`] refers to.
    pub fn node(&self, index: usize) -> Option<&Node> {
        self.nodes.get(index)
    }
}

/// A declaration as serialised: [`Decl`] with the node looked up.
#[derive(Serialize)]
#[serde(rename_all = "snake_case", tag = "decl")]
enum DeclView<'a> {
    Vars(&'a VarsBlock),
    Presets(&'a PresetsBlock),
    Attachments(&'a AttachmentsBlock),
    McpServer(&'a McpServer),
    Prompt(&'a Prompt),
    Schema(&'a Schema),
    Cursor(&'a CursorDecl),
    Node(&'a Node),
    Workflow(&'a WorkflowDecl),
}

/// The declarations of a tree as serialised.
struct DeclsView<'a>(&'a Ast);

impl Serialize for DeclsView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let ast = self.0;
        serializer.collect_seq(ast.decls.iter().filter_map(|d| {
            Some(match d {
                Decl::Vars(x) => DeclView::Vars(x),
                Decl::Presets(x) => DeclView::Presets(x),
                Decl::Attachments(x) => DeclView::Attachments(x),
                Decl::McpServer(x) => DeclView::McpServer(x),
                Decl::Prompt(x) => DeclView::Prompt(x),
                Decl::Schema(x) => DeclView::Schema(x),
                Decl::Cursor(x) => DeclView::Cursor(x),
                Decl::Node(i) => DeclView::Node(ast.node(*i)?),
                Decl::Workflow(x) => DeclView::Workflow(x),
            })
        }))
    }
}

impl Serialize for Ast {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut st = serializer.serialize_struct("Ast", 3)?;
        st.serialize_field("file", &self.file)?;
        st.serialize_field("strict_escape", &self.strict_escape)?;
        st.serialize_field("decls", &DeclsView(self))?;
        st.end()
    }
}

/// A top-level declaration.
#[derive(Debug, Clone, PartialEq)]
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
    /// `agent|judge|router|human|tool|compute NAME:`: the index of the node in [`Ast::nodes`].
    Node(usize),
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
