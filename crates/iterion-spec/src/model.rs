//! The compiled workflow model: what `compile` produces and the sandbox resolver consumes.
//!
//! Every value written by the user keeps its [`Span`] so later phases (resolution, the CLI) can blame the
//! exact place in the file. The model is produced on a best-effort basis even when compile diagnostics
//! contain errors; callers must check the diagnostics (`diag::has_errors`) before running a workflow.
//!
//! [`SandboxDecl`] serialises to the JSON shape used by `iterion validate --json`:
//! `{"mode","image","build":{"dockerfile","context","target","args"},"user","workspace_folder","host_state",
//! "post_create","env":{},"mounts":[],"network":{"mode","preset","rules":[],"inherit"}}`, absent fields omitted.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

/// A region of the source file.
///
/// Lines and columns are 1-based; columns count Unicode scalar values. `end_col` is exclusive.
/// `start` / `end` are byte offsets into the normalised source (BOM removed, CR LF turned into LF).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub struct Span {
    /// Byte offset of the first byte.
    pub start: usize,
    /// Byte offset one past the last byte.
    pub end: usize,
    /// Start line (1-based).
    pub line: u32,
    /// Start column (1-based).
    pub col: u32,
    /// End line (1-based).
    pub end_line: u32,
    /// End column (1-based, exclusive).
    pub end_col: u32,
}

impl Span {
    /// The smallest span covering `self` and `other`.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
            line: self.line,
            col: self.col,
            end_line: other.end_line,
            end_col: other.end_col,
        }
    }
}

/// A value together with the span of the text it was read from.
///
/// Serialises as the bare value (the span is not part of the JSON form).
#[derive(Debug, Clone, PartialEq)]
pub struct Spanned<T> {
    /// The value.
    pub value: T,
    /// Where it was written.
    pub span: Span,
}

impl<T> Spanned<T> {
    /// Wraps a value with its span.
    pub fn new(value: T, span: Span) -> Self {
        Spanned { value, span }
    }
}

impl Spanned<String> {
    /// The text as a `&str`.
    pub fn as_str(&self) -> &str {
        &self.value
    }
}

impl<T: Serialize> Serialize for Spanned<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

/// One `KEY: value` entry of a string map (`env:`, `build.args:`, `with { }`).
#[derive(Debug, Clone, PartialEq)]
pub struct MapEntry {
    /// The key as written.
    pub key: Spanned<String>,
    /// The value rendered as text (names, numbers and booleans become their spelling).
    pub value: Spanned<String>,
}

/// An ordered string map with unique keys (duplicates were reported as `E010`; the first is kept).
///
/// Serialises as a JSON object in declaration order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TextMap {
    /// Entries in declaration order.
    pub entries: Vec<MapEntry>,
}

impl TextMap {
    /// The value for `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.key.value == key)
            .map(|e| e.value.value.as_str())
    }

    /// Whether the map has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `(key, value)` pairs in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|e| (e.key.value.as_str(), e.value.value.as_str()))
    }
}

impl Serialize for TextMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for e in &self.entries {
            map.serialize_entry(&e.key.value, &e.value.value)?;
        }
        map.end()
    }
}

// ---------------------------------------------------------------------------------------------------------
// Sandbox declaration (01 §6)
// ---------------------------------------------------------------------------------------------------------

/// Where a `sandbox:` declaration was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxScope {
    /// On the `workflow` block.
    Workflow,
    /// On an agent, judge or tool node.
    Node,
}

/// What a `sandbox:` declaration means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxKind {
    /// `sandbox: none` or `mode: none`: explicitly unsandboxed.
    Off,
    /// `sandbox: auto` or `mode: auto`: devcontainer.json, else the default image.
    Auto,
    /// `mode: inline`, or a mode-less block with `image:` or `build:`.
    Inline,
    /// A mode-less block carrying only `network` (and, at workflow level, `host_state` and `runtime`): contributes no
    /// mode, only overrides applied on top of the mode chosen elsewhere.
    Override,
    /// The declaration has a shape error (`C044`, `C094`, `E002`); compile reported it and the declaration
    /// must not be resolved.
    Invalid,
}

impl SandboxKind {
    /// The lower-case word (`off`, `auto`, `inline`, `override`, `invalid`).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxKind::Off => "off",
            SandboxKind::Auto => "auto",
            SandboxKind::Inline => "inline",
            SandboxKind::Override => "override",
            SandboxKind::Invalid => "invalid",
        }
    }
}

/// The `build:` sub-block of a sandbox declaration, as written.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct BuildDecl {
    /// Span of the `build` key.
    #[serde(skip)]
    pub span: Span,
    /// `dockerfile:` (relative to the run workspace root).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dockerfile: Option<Spanned<String>>,
    /// `context:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<Spanned<String>>,
    /// `target:` (build stage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Spanned<String>>,
    /// `args:` build arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<TextMap>,
}

/// The `network:` sub-block of a sandbox declaration, as written.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct NetworkDecl {
    /// Span of the `network` key.
    #[serde(skip)]
    pub span: Span,
    /// `mode:` as written (`allowlist`, `denylist`, `open`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Spanned<String>>,
    /// `preset:` as written (`iterion-default`, `none`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<Spanned<String>>,
    /// `rules:` as written (not canonicalised).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<Spanned<String>>>,
    /// `inherit:` as written (`merge`, `append`, `replace`; node level only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inherit: Option<Spanned<String>>,
}

impl NetworkDecl {
    /// Whether the block names a base policy (sets `mode` or `preset`, 01 §8.5).
    pub fn names_base(&self) -> bool {
        self.mode.is_some() || self.preset.is_some()
    }
}

/// A `sandbox:` declaration exactly as written (short form or block form), plus its derived kind.
///
/// Serialises to the `iterion validate --json` shape; `kind`, `scope`, `short` and spans are not part of it
/// (the short form `sandbox: auto` serialises as `{"mode":"auto"}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxDecl {
    /// Span of the `sandbox` key.
    #[serde(skip)]
    pub span: Span,
    /// Workflow or node level.
    #[serde(skip)]
    pub scope: SandboxScope,
    /// Whether the short form (`sandbox: WORD`) was used.
    #[serde(skip)]
    pub short: bool,
    /// The derived block kind, computed by `compile`.
    #[serde(skip)]
    pub kind: SandboxKind,
    /// The mode as written: the short-form word, or the block's `mode:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Spanned<String>>,
    /// `image:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<Spanned<String>>,
    /// `build:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildDecl>,
    /// `user:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<Spanned<String>>,
    /// `workspace_folder:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace_folder: Option<Spanned<String>>,
    /// `host_state:` as written (`auto`, `none`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_state: Option<Spanned<String>>,
    /// `post_create:` shell snippet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_create: Option<Spanned<String>>,
    /// `env:` (workflow env layer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<TextMap>,
    /// `mounts:` in the engine's `--mount` syntax, unparsed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mounts: Option<Vec<Spanned<String>>>,
    /// `network:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkDecl>,
    /// `secrets:` (workflow level only): the secrets the workflow asks the operator for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<SecretDecl>>,
    /// `runtime:` as written (`default`, `gvisor`, `kata` or a runtime name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Spanned<String>>,
}

/// One entry of `sandbox.secrets:`, as written: a secret the workflow asks for, by name.
///
/// A declaration is a request, never a grant: the value comes from the operator's environment, and only when
/// the operator names the secret at launch (`iterion run --secret NAME`). An `env` secret reaches the sandbox
/// as a placeholder the run's egress proxy replaces with the value in requests to `hosts` only; a `file`
/// secret is a read-only file in the container.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SecretDecl {
    /// The secret's name: the environment variable that holds its value on the host and its placeholder
    /// (or, for `as: file`, its file's path) in the sandbox.
    pub name: Spanned<String>,
    /// `hosts:` host patterns the value may be sent to (`env` secrets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<Spanned<String>>>,
    /// `as:` (`env`, the default, or `file`).
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Spanned<String>>,
    /// `plain_http:`: also substitute in plain-HTTP requests to the bound hosts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plain_http: Option<bool>,
}

impl SandboxDecl {
    /// An empty declaration (no property set) at `span`; its kind is [`SandboxKind::Invalid`] until
    /// [`SandboxDecl::derive_kind`] is applied.
    pub fn empty(span: Span, scope: SandboxScope) -> Self {
        SandboxDecl {
            span,
            scope,
            short: false,
            kind: SandboxKind::Invalid,
            mode: None,
            image: None,
            build: None,
            user: None,
            workspace_folder: None,
            host_state: None,
            post_create: None,
            env: None,
            mounts: None,
            network: None,
            secrets: None,
            runtime: None,
        }
    }

    /// The mode word as written, if any.
    pub fn mode_str(&self) -> Option<&str> {
        self.mode.as_ref().map(|m| m.value.as_str())
    }

    /// Names of the properties that are set, in the order of 01 §6.3 (`mode` excluded).
    pub fn properties_set(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.image.is_some() {
            v.push("image");
        }
        if self.build.is_some() {
            v.push("build");
        }
        if self.user.is_some() {
            v.push("user");
        }
        if self.workspace_folder.is_some() {
            v.push("workspace_folder");
        }
        if self.host_state.is_some() {
            v.push("host_state");
        }
        if self.post_create.is_some() {
            v.push("post_create");
        }
        if self.env.is_some() {
            v.push("env");
        }
        if self.mounts.is_some() {
            v.push("mounts");
        }
        if self.network.is_some() {
            v.push("network");
        }
        if self.runtime.is_some() {
            v.push("runtime");
        }
        v
    }

    /// The block kind of 01 §6.4, computed from the fields alone (shape errors give
    /// [`SandboxKind::Invalid`]; `compile` reports the matching diagnostic).
    pub fn derive_kind(&self) -> SandboxKind {
        let has_image_or_build = self.image.is_some() || self.build.is_some();
        match self.mode_str() {
            Some("none") => SandboxKind::Off,
            Some("auto") if self.short => SandboxKind::Auto,
            Some("auto") if has_image_or_build => SandboxKind::Invalid,
            Some("auto") => SandboxKind::Auto,
            Some("inline") if self.short => SandboxKind::Invalid,
            Some("inline") if self.image.is_some() != self.build.is_some() => SandboxKind::Inline,
            Some(_) => SandboxKind::Invalid,
            None if self.image.is_some() && self.build.is_some() => SandboxKind::Invalid,
            None if has_image_or_build => SandboxKind::Inline,
            None => {
                let only_override = self.user.is_none()
                    && self.workspace_folder.is_none()
                    && self.post_create.is_none()
                    && self.env.is_none()
                    && self.mounts.is_none();
                let has_any = self.network.is_some() || self.host_state.is_some() || self.runtime.is_some();
                let node_host_state =
                    self.scope == SandboxScope::Node && (self.host_state.is_some() || self.runtime.is_some());
                if only_override && has_any && !node_host_state {
                    SandboxKind::Override
                } else {
                    SandboxKind::Invalid
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Declarations
// ---------------------------------------------------------------------------------------------------------

/// A var / schema field type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum VarType {
    /// `string`.
    #[serde(rename = "string")]
    String,
    /// `bool`.
    #[serde(rename = "bool")]
    Bool,
    /// `int`.
    #[serde(rename = "int")]
    Int,
    /// `float`.
    #[serde(rename = "float")]
    Float,
    /// `json`.
    #[serde(rename = "json")]
    Json,
    /// `string[]`.
    #[serde(rename = "string[]")]
    StringList,
}

impl VarType {
    /// The type as spelled in the language.
    pub fn as_str(self) -> &'static str {
        match self {
            VarType::String => "string",
            VarType::Bool => "bool",
            VarType::Int => "int",
            VarType::Float => "float",
            VarType::Json => "json",
            VarType::StringList => "string[]",
        }
    }

    /// Reads a type spelling.
    pub fn from_word(word: &str) -> Option<VarType> {
        Some(match word {
            "string" => VarType::String,
            "bool" => VarType::Bool,
            "int" => VarType::Int,
            "float" => VarType::Float,
            "json" => VarType::Json,
            "string[]" => VarType::StringList,
            _ => return None,
        })
    }
}

/// A declared var (top-level and workflow-level merged).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Var {
    /// The var name.
    pub name: Spanned<String>,
    /// Its type.
    #[serde(rename = "type")]
    pub ty: VarType,
    /// The default, as a JSON value (strings keep `$NAME` references unexpanded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
}

/// A named set of var values selected with `--preset`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preset {
    /// The preset name.
    pub name: Spanned<String>,
    /// `(var, value)` pairs in declaration order.
    pub values: Vec<(Spanned<String>, serde_json::Value)>,
}

/// Attachment kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachmentKind {
    /// `file`.
    File,
    /// `image`.
    Image,
}

/// A declared attachment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attachment {
    /// The attachment name.
    pub name: Spanned<String>,
    /// `file` or `image`.
    pub kind: AttachmentKind,
    /// `description:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `accept_mime:`.
    pub accept_mime: Vec<String>,
    /// `required:`.
    pub required: bool,
}

/// Transport of an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum McpTransport {
    /// A local process speaking on stdin/stdout.
    Stdio,
    /// Streamable HTTP.
    Http,
    /// Server-sent events.
    Sse,
}

/// An `mcp_server` declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpServer {
    /// Server name.
    pub name: Spanned<String>,
    /// Transport (absent when not written or invalid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<McpTransport>,
    /// `command:` (stdio).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// `args:` (stdio).
    pub args: Vec<String>,
    /// `url:` (http / sse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `auth:` entries (`type`, `auth_url`, … as text; `scopes` joined by nothing: see `auth_scopes`).
    pub auth: Vec<(String, String)>,
    /// `auth.scopes`.
    pub auth_scopes: Vec<String>,
}

/// One server of a project `.mcp.json` (`{"mcpServers": {NAME: {…}}}`), as the runtime uses it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProjectMcpServer {
    /// The server name.
    pub name: String,
    /// `type` (`stdio`, `http`, `sse`); inferred from `command` / `url` when absent.
    pub transport: Option<String>,
    /// `command`.
    pub command: Option<String>,
    /// `url`.
    pub url: Option<String>,
    /// `args`.
    pub args: Vec<String>,
    /// `env` (string values; stdio servers).
    pub env: std::collections::BTreeMap<String, String>,
    /// `headers` (string values; http and sse servers).
    pub headers: std::collections::BTreeMap<String, String>,
    /// Whether the entry has an `auth` block.
    pub auth: bool,
}

/// A `prompt` declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prompt {
    /// Prompt name.
    pub name: Spanned<String>,
    /// Raw body (templates unexpanded).
    pub body: String,
    /// Where the body starts (its first character); the header's end for an empty body.
    #[serde(skip)]
    pub body_span: Span,
}

/// One field of a schema.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchemaField {
    /// Field name.
    pub name: Spanned<String>,
    /// Field type.
    #[serde(rename = "type")]
    pub ty: VarType,
    /// `enum` values (string fields only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enum_values: Option<Vec<String>>,
}

/// A `schema` declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schema {
    /// Schema name.
    pub name: Spanned<String>,
    /// Fields in declaration order.
    pub fields: Vec<SchemaField>,
}

impl Schema {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&SchemaField> {
        self.fields.iter().find(|f| f.name.value == name)
    }

    /// The JSON Schema object of 01 §3.6.
    pub fn to_json_schema(&self) -> serde_json::Value {
        let mut props = serde_json::Map::new();
        for f in &self.fields {
            let v = match f.ty {
                VarType::String => {
                    let mut o = serde_json::json!({"type": "string"});
                    if let Some(e) = &f.enum_values {
                        o["enum"] = serde_json::json!(e);
                    }
                    o
                }
                VarType::Bool => serde_json::json!({"type": "boolean"}),
                VarType::Int => serde_json::json!({"type": "integer"}),
                VarType::Float => serde_json::json!({"type": "number"}),
                VarType::Json => serde_json::json!({}),
                VarType::StringList => {
                    serde_json::json!({"type": "array", "items": {"type": "string"}})
                }
            };
            props.insert(f.name.value.clone(), v);
        }
        let required: Vec<&str> = self.fields.iter().map(|f| f.name.value.as_str()).collect();
        serde_json::json!({"type": "object", "properties": props, "required": required})
    }
}

/// How a cursor's levels are declared.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CursorLevels {
    /// Named levels: `NAME: "description"`.
    Values(Vec<(String, String)>),
    /// Numeric bands: `"LO..HI": "description"`, parsed.
    Bands(Vec<(f64, f64, String)>),
}

/// A `cursor` declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cursor {
    /// Cursor name.
    pub name: Spanned<String>,
    /// `description:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Levels (absent when the declaration was invalid, `C085`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub levels: Option<CursorLevels>,
}

// ---------------------------------------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------------------------------------

/// The kind of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// An LLM agent.
    Agent,
    /// An agent whose output is a verdict.
    Judge,
    /// A router choosing outgoing edges.
    Router,
    /// A human step.
    Human,
    /// A shell command or script.
    Tool,
    /// Pure expression evaluation.
    Compute,
}

impl NodeKind {
    /// The keyword spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Agent => "agent",
            NodeKind::Judge => "judge",
            NodeKind::Router => "router",
            NodeKind::Human => "human",
            NodeKind::Tool => "tool",
            NodeKind::Compute => "compute",
        }
    }

    /// Whether nodes of this kind may carry a `sandbox:` declaration (agent, judge, tool).
    pub fn allows_sandbox(self) -> bool {
        matches!(self, NodeKind::Agent | NodeKind::Judge | NodeKind::Tool)
    }
}

/// `mcp:` sub-block (workflow, agent, judge).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct McpBlock {
    /// `autoload_project:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoload_project: Option<bool>,
    /// `inherit:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inherit: Option<bool>,
    /// `servers:` (mcp_server names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<Spanned<String>>>,
    /// `disable:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable: Option<Vec<String>>,
}

/// `compaction:` sub-block.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Compaction {
    /// `threshold:` (0 < t ≤ 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// `preserve_recent:` (≥ 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserve_recent: Option<i64>,
}

/// `memory:` sub-block (agent, judge).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Memory {
    /// `enabled:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `scope:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// `autoload:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoload: Option<Vec<String>>,
    /// `read:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<bool>,
    /// `write:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write: Option<bool>,
    /// `pre_compact_inject:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_compact_inject: Option<bool>,
}

/// `cursors:` sub-block (agent, judge).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CursorSettings {
    /// `enabled:` (an explicit block defaults to enabled).
    pub enabled: bool,
    /// `CURSOR: value` entries, values rendered as text.
    pub values: Vec<(Spanned<String>, Spanned<String>)>,
}

/// A node of any kind. Properties that do not apply to the kind are always `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    /// Node name.
    pub name: Spanned<String>,
    /// Node kind.
    pub kind: NodeKind,
    /// `model:` (may contain `${…}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Spanned<String>>,
    /// `backend:` as written (may contain `${…}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<Spanned<String>>,
    /// `provider:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<Spanned<String>>,
    /// `input:` schema name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Spanned<String>>,
    /// `output:` schema name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Spanned<String>>,
    /// `publish:` artifact name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish: Option<Spanned<String>>,
    /// `system:` prompt name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<Spanned<String>>,
    /// `user:` prompt name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<Spanned<String>>,
    /// `instructions:` prompt name (human).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<Spanned<String>>,
    /// `session:` (`fresh`, `inherit`, `inherit_if_available`, `artifacts_only`, `fork`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<Spanned<String>>,
    /// `tools:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Spanned<String>>>,
    /// `tool_policy:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_policy: Option<Vec<Spanned<String>>>,
    /// `capabilities:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<Spanned<String>>>,
    /// `tool_max_steps:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_max_steps: Option<i64>,
    /// `max_tokens:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// `reasoning_effort:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<Spanned<String>>,
    /// `readonly:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readonly: Option<bool>,
    /// `interaction:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interaction: Option<Spanned<String>>,
    /// `interaction_prompt:` prompt name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interaction_prompt: Option<Spanned<String>>,
    /// `interaction_model:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interaction_model: Option<Spanned<String>>,
    /// `await:` (`wait_all`, `best_effort`).
    #[serde(rename = "await", skip_serializing_if = "Option::is_none")]
    pub await_mode: Option<Spanned<String>>,
    /// Router `mode:` (`fan_out_all`, `condition`, `round_robin`, `llm`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router_mode: Option<Spanned<String>>,
    /// Router `multi:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi: Option<bool>,
    /// Human `min_answers:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_answers: Option<i64>,
    /// Tool `command:` (raw template text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Spanned<String>>,
    /// Tool `script:` (raw template text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<Spanned<String>>,
    /// Tool `language:` (with `script`; default `sh`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<Spanned<String>>,
    /// Compute `expr:` entries `(key, expression text)` in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub expr: Vec<(Spanned<String>, Spanned<String>)>,
    /// `mcp:` block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpBlock>,
    /// `compaction:` block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
    /// `memory:` block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// `cursors:` block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursors: Option<CursorSettings>,
    /// `sandbox:` declaration (agent, judge, tool only). Boxed: most nodes have none, and a declaration is
    /// large.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Box<SandboxDecl>>,
}

impl Node {
    /// A node with no property set.
    pub fn new(name: Spanned<String>, kind: NodeKind) -> Self {
        Node {
            name,
            kind,
            model: None,
            backend: None,
            provider: None,
            input: None,
            output: None,
            publish: None,
            system: None,
            user: None,
            instructions: None,
            session: None,
            tools: None,
            tool_policy: None,
            capabilities: None,
            tool_max_steps: None,
            max_tokens: None,
            reasoning_effort: None,
            readonly: None,
            interaction: None,
            interaction_prompt: None,
            interaction_model: None,
            await_mode: None,
            router_mode: None,
            multi: None,
            min_answers: None,
            command: None,
            script: None,
            language: None,
            expr: Vec::new(),
            mcp: None,
            compaction: None,
            memory: None,
            cursors: None,
            sandbox: None,
        }
    }

    /// A router's mode: its `mode:`, else `fan_out_all`.
    pub fn router_mode_name(&self) -> &str {
        self.router_mode
            .as_ref()
            .map_or("fan_out_all", |m| m.value.as_str())
    }
}

// ---------------------------------------------------------------------------------------------------------
// Edges and the workflow
// ---------------------------------------------------------------------------------------------------------

/// The condition of an edge.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Condition {
    /// `when FIELD` / `when not FIELD`.
    Field {
        /// The bool field of the source node's output.
        field: Spanned<String>,
        /// `when not`.
        negated: bool,
    },
    /// `when "EXPR"`.
    Expr {
        /// Expression text (parsed and checked by compile, `C040`).
        text: Spanned<String>,
    },
}

/// The cap of a loop edge.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopCap {
    /// A literal number of iterations.
    Literal(i64),
    /// A single-placeholder template such as `"{{outputs.plan.attempts}}"`, resolved at run time.
    Template(String),
}

/// `as LOOP(CAP)` on an edge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopSpec {
    /// Loop name.
    pub name: Spanned<String>,
    /// Cap.
    pub cap: Spanned<LoopCap>,
}

/// An edge of the workflow graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Edge {
    /// Span of the `->` arrow.
    #[serde(skip)]
    pub span: Span,
    /// Source node.
    pub from: Spanned<String>,
    /// Target node (`done` / `fail` allowed).
    pub to: Spanned<String>,
    /// `when …`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<Condition>,
    /// `as LOOP(CAP)`.
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    pub loop_spec: Option<LoopSpec>,
    /// `with { … }` mapping into the target's input (values are templates).
    #[serde(skip_serializing_if = "TextMap::is_empty")]
    pub with: TextMap,
}

impl Edge {
    /// An edge without condition, loop or mapping is unconditional.
    pub fn is_unconditional(&self) -> bool {
        self.condition.is_none() && self.loop_spec.is_none()
    }
}

/// `budget:` block.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Budget {
    /// `max_parallel_branches:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parallel_branches: Option<i64>,
    /// `max_duration:` as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_duration: Option<Spanned<String>>,
    /// `max_duration` parsed, in nanoseconds (absent when unparseable, `C091`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_duration_ns: Option<u128>,
    /// `max_cost_usd:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// `max_tokens:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// `max_iterations:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<i64>,
}

/// `worktree:` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Worktree {
    /// Run in place (default; also any unknown word, `C090`).
    #[default]
    None,
    /// Run in a fresh git worktree.
    Auto,
}

/// A compiled workflow: the `workflow` block plus every top-level declaration of its file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workflow {
    /// The file label the workflow was read from.
    pub file: String,
    /// Workflow name.
    pub name: Spanned<String>,
    /// `entry:` node (absent when missing, `C008`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<Spanned<String>>,
    /// Vars: top-level merged with workflow-level (a workflow var replaces a top-level one).
    pub vars: Vec<Var>,
    /// Presets.
    pub presets: Vec<Preset>,
    /// Attachments: top-level then workflow-level.
    pub attachments: Vec<Attachment>,
    /// MCP servers.
    pub mcp_servers: Vec<McpServer>,
    /// Prompts.
    pub prompts: Vec<Prompt>,
    /// Schemas.
    pub schemas: Vec<Schema>,
    /// Cursors.
    pub cursors: Vec<Cursor>,
    /// Nodes in declaration order (names are unique; use [`Workflow::node`] to look one up).
    pub nodes: Vec<Node>,
    /// Edges in declaration order.
    pub edges: Vec<Edge>,
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
    /// `mcp:` block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpBlock>,
    /// `compaction:` block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
    /// `budget:` block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// `worktree:`.
    pub worktree: Worktree,
    /// Where `worktree:` is written (`None` when absent), for diagnostics about it.
    #[serde(skip)]
    pub worktree_span: Option<Span>,
    /// The workflow-level `sandbox:` declaration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxDecl>,
    /// Servers of the project's `.mcp.json`, filled by the caller that read it (empty otherwise): the
    /// runtime's MCP catalog starts from them.
    #[serde(skip)]
    pub project_mcp_servers: Vec<ProjectMcpServer>,
}

impl Workflow {
    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name.value == name)
    }

    /// The schema called `name`.
    pub fn schema(&self, name: &str) -> Option<&Schema> {
        self.schemas.iter().find(|s| s.name.value == name)
    }

    /// The prompt called `name`.
    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|p| p.name.value == name)
    }

    /// The var called `name`.
    pub fn var(&self, name: &str) -> Option<&Var> {
        self.vars.iter().find(|v| v.name.value == name)
    }

    /// Edges leaving `node`, in declaration order.
    pub fn edges_from<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Edge> + 'a {
        self.edges.iter().filter(move |e| e.from.value == node)
    }

    /// Nodes that may carry a sandbox (agent, judge, tool), with their declaration if any.
    pub fn sandboxable_nodes(&self) -> impl Iterator<Item = (&Node, Option<&SandboxDecl>)> {
        self.nodes
            .iter()
            .filter(|n| n.kind.allows_sandbox())
            .map(|n| (n, n.sandbox.as_deref()))
    }

    /// The interaction mode of a human node: its own, else the workflow's when not `none`, else `human`.
    pub fn human_mode<'w>(&'w self, node: &'w Node) -> &'w str {
        if let Some(i) = &node.interaction {
            return &i.value;
        }
        match &self.interaction {
            Some(i) if i.value != "none" => &i.value,
            _ => "human",
        }
    }

    /// Whether `node` calls a model through a backend: agents and judges, `llm` routers, and human nodes that a
    /// model answers (`interaction: llm` or `llm_or_human`). The backend runs where the node is placed, so
    /// each of them is placed like an agent ([`Workflow::placed_nodes`]).
    pub fn calls_model(&self, node: &Node) -> bool {
        match node.kind {
            NodeKind::Agent | NodeKind::Judge => true,
            NodeKind::Router => node.router_mode_name() == "llm",
            NodeKind::Human => matches!(self.human_mode(node), "llm" | "llm_or_human"),
            NodeKind::Tool | NodeKind::Compute => false,
        }
    }

    /// The nodes the sandbox resolution places, with their declaration if any: agent, judge and tool nodes,
    /// and the other nodes that call a model ([`Workflow::calls_model`]: `llm` routers, human nodes a model
    /// answers). Those carry no declaration and run where an agent without one would: in the run container
    /// when the run is sandboxed, else on the host. Condition, round-robin and fan-out routers, compute nodes
    /// and human pauses run nothing anywhere and have no placement.
    pub fn placed_nodes(&self) -> impl Iterator<Item = (&Node, Option<&SandboxDecl>)> {
        self.nodes
            .iter()
            .filter(|n| n.kind.allows_sandbox() || self.calls_model(n))
            .map(|n| (n, n.sandbox.as_deref()))
    }
}

/// What `iterion validate` prints for one workflow: name, entry, the workflow sandbox declaration and, per
/// node, its kind and sandbox declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkflowSummary<'a> {
    /// Workflow name.
    pub name: &'a str,
    /// Entry node, when declared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<&'a str>,
    /// The workflow `sandbox:` declaration as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<&'a SandboxDecl>,
    /// Its derived kind (`off`, `auto`, `inline`, `override`, `invalid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_kind: Option<SandboxKind>,
    /// Nodes in declaration order.
    pub nodes: Vec<NodeSummary<'a>>,
}

/// One node of a [`WorkflowSummary`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeSummary<'a> {
    /// Node name.
    pub name: &'a str,
    /// Node kind.
    pub kind: NodeKind,
    /// The node `sandbox:` declaration as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<&'a SandboxDecl>,
    /// Its derived kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_kind: Option<SandboxKind>,
}

impl Workflow {
    /// The summary printed by `iterion validate` (serialisable for `--json`).
    pub fn summary(&self) -> WorkflowSummary<'_> {
        WorkflowSummary {
            name: &self.name.value,
            entry: self.entry.as_ref().map(|e| e.value.as_str()),
            sandbox: self.sandbox.as_ref(),
            sandbox_kind: self.sandbox.as_ref().map(|s| s.kind),
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeSummary {
                    name: &n.name.value,
                    kind: n.kind,
                    sandbox: n.sandbox.as_deref(),
                    sandbox_kind: n.sandbox.as_ref().map(|s| s.kind),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Spanned<String> {
        Spanned::new(v.to_string(), Span::default())
    }

    #[test]
    fn short_form_serialises_as_mode_only() {
        let mut d = SandboxDecl::empty(Span::default(), SandboxScope::Workflow);
        d.short = true;
        d.mode = Some(s("auto"));
        d.kind = d.derive_kind();
        assert_eq!(d.kind, SandboxKind::Auto);
        assert_eq!(serde_json::to_string(&d).unwrap(), r#"{"mode":"auto"}"#);
    }

    #[test]
    fn block_serialises_in_documented_order() {
        let mut d = SandboxDecl::empty(Span::default(), SandboxScope::Workflow);
        d.image = Some(s("alpine:3.20"));
        d.build = Some(BuildDecl {
            dockerfile: Some(s("Dockerfile")),
            args: Some(TextMap {
                entries: vec![MapEntry {
                    key: s("A"),
                    value: s("1"),
                }],
            }),
            ..BuildDecl::default()
        });
        d.env = Some(TextMap::default());
        d.mounts = Some(vec![s("type=volume,source=v,target=/v")]);
        d.network = Some(NetworkDecl {
            mode: Some(s("allowlist")),
            rules: Some(vec![s("github.com")]),
            ..NetworkDecl::default()
        });
        assert_eq!(d.derive_kind(), SandboxKind::Invalid);
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            r#"{"image":"alpine:3.20","build":{"dockerfile":"Dockerfile","args":{"A":"1"}},"env":{},"mounts":["type=volume,source=v,target=/v"],"network":{"mode":"allowlist","rules":["github.com"]}}"#
        );
    }

    #[test]
    fn derives_override_and_node_host_state_error() {
        let mut d = SandboxDecl::empty(Span::default(), SandboxScope::Workflow);
        d.host_state = Some(s("none"));
        assert_eq!(d.derive_kind(), SandboxKind::Override);
        d.scope = SandboxScope::Node;
        assert_eq!(d.derive_kind(), SandboxKind::Invalid);
        d.host_state = None;
        d.network = Some(NetworkDecl::default());
        assert_eq!(d.derive_kind(), SandboxKind::Override);
        // the runtime, like host_state: a workflow override, never on a node sharing the run's container
        d.runtime = Some(s("gvisor"));
        assert_eq!(d.derive_kind(), SandboxKind::Invalid);
        d.scope = SandboxScope::Workflow;
        d.network = None;
        assert_eq!(d.derive_kind(), SandboxKind::Override);
        assert_eq!(d.properties_set(), vec!["runtime"]);
    }
}
