//! `devcontainer.json`: location, JSONC reading, field mapping, variable expansion and validation
//! (specification 01 §7).
//!
//! The module reads files only through a [`SourceReader`], so tests and library callers can inject files.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::path::Path;
//! use iterion_spec::devcontainer::{load, LoadContext, MemReader};
//! let reader = MemReader::new().with_file("/repo/.devcontainer.json", r#"{"image": "node:22", // c
//! }"#);
//! let env = BTreeMap::new();
//! let ctx = LoadContext { repo_root: Path::new("/repo"), env: &env, host_workspace: "/repo", reader: &reader };
//! let out = load(&ctx);
//! let spec = out.spec.unwrap();
//! assert_eq!(spec.image.as_deref(), Some("node:22"));
//! assert!(out.diagnostics.is_empty());
//! ```

mod jsonc;
pub(crate) mod vars;

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::diag::Diagnostic;
use crate::resolved::{BuildSpec, DevcontainerRef};
use crate::values::{self, Mount, csv_quote, parse_mount};

pub use jsonc::{Json, JsoncError, Member, Node, Parsed, Pos, parse as parse_jsonc};
pub use vars::{
    ExpandContext, Expanded, LOCAL_ENV_ALLOWLIST, VarWarning, check_vars, expand_local_vars, is_allowlisted,
};

pub use crate::source::{FileRead, FsReader, MemReader, SourceReader};

// ---------------------------------------------------------------------------------------------------------
// Location (§7.1)
// ---------------------------------------------------------------------------------------------------------

/// The two candidate paths, relative to the repository root, in order of preference.
pub const CANDIDATES: [&str; 2] = [".devcontainer/devcontainer.json", ".devcontainer.json"];

/// A located `devcontainer.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Path relative to the repository root (the file label in diagnostics).
    pub rel_path: String,
    /// Absolute path.
    pub abs_path: PathBuf,
    /// The raw bytes.
    pub bytes: Vec<u8>,
}

/// Finds the configuration of the repository at `repo_root` (01 §7.1): `Ok(None)` when there is none (a
/// normal outcome), plus `D016` when both candidates exist and `D015` when the chosen file cannot be read.
pub fn locate(repo_root: &Path, reader: &dyn SourceReader) -> (Option<Located>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    for (i, rel) in CANDIDATES.iter().enumerate() {
        let abs = repo_root.join(rel);
        match reader.read(&abs) {
            // A directory is not a candidate ("the first existing regular file wins").
            FileRead::NotFound | FileRead::NotRegular("a directory") => continue,
            // A FIFO, device or socket, an oversized file, an I/O error: refused, never read.
            e @ (FileRead::NotRegular(_) | FileRead::TooLarge(_) | FileRead::Failed(_)) => {
                diags.push(Diagnostic::error(
                    "D015",
                    *rel,
                    1,
                    1,
                    format!("cannot read devcontainer.json: {e}"),
                ));
                return (None, diags);
            }
            FileRead::Found(bytes) => {
                if i == 0
                    && !matches!(
                        reader.read(&repo_root.join(CANDIDATES[1])),
                        FileRead::NotFound | FileRead::NotRegular("a directory")
                    )
                {
                    diags.push(Diagnostic::warning(
                        "D016",
                        *rel,
                        1,
                        1,
                        "both .devcontainer/devcontainer.json and .devcontainer.json exist; using the first",
                    ));
                }
                return (
                    Some(Located {
                        rel_path: (*rel).to_owned(),
                        abs_path: abs,
                        bytes,
                    }),
                    diags,
                );
            }
        }
    }
    (None, diags)
}

// ---------------------------------------------------------------------------------------------------------
// The raw file (§7.2, §7.3)
// ---------------------------------------------------------------------------------------------------------

/// A string value with its position in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Str {
    /// The text (unexpanded).
    pub value: String,
    /// Where it is written.
    pub pos: Pos,
}

/// The `build` object as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawBuild {
    /// Position of the `build` value.
    pub pos: Pos,
    /// `build.dockerfile`.
    pub dockerfile: Option<Str>,
    /// `build.context`.
    pub context: Option<Str>,
    /// `build.target`.
    pub target: Option<Str>,
    /// `build.args` (key, value).
    pub args: Vec<(Str, Str)>,
}

/// One `mounts` entry as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawMount {
    /// Mount text.
    Text(Str),
    /// `{type, source, target, readonly?}`.
    Object {
        /// Position of the object.
        pos: Pos,
        /// `type`.
        kind: Option<Str>,
        /// `source`.
        source: Option<Str>,
        /// `target`.
        target: Option<Str>,
        /// `readonly`.
        read_only: bool,
    },
}

/// One lifecycle command as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawCommand {
    /// A shell snippet.
    Shell(Str),
    /// An argv, quoted into one snippet after expansion.
    Argv(Vec<Str>),
}

/// A parsed, unexpanded `devcontainer.json` (01 §7.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevcontainerFile {
    /// The file label (path relative to the repository root).
    pub path: String,
    /// Lower-case hex SHA-256 of the raw bytes.
    pub sha256: String,
    /// Position of the top-level `{`.
    pub root_pos: Pos,
    /// `image`.
    pub image: Option<Str>,
    /// `build`.
    pub build: Option<RawBuild>,
    /// `containerEnv` in file order.
    pub container_env: Vec<(Str, Str)>,
    /// `remoteEnv` in file order; `None` values remove the key.
    pub remote_env: Vec<(Str, Option<Str>)>,
    /// `mounts` in order.
    pub mounts: Vec<RawMount>,
    /// `runArgs`.
    pub run_args: Vec<Str>,
    /// `remoteUser`.
    pub remote_user: Option<Str>,
    /// `containerUser`.
    pub container_user: Option<Str>,
    /// `workspaceFolder`.
    pub workspace_folder: Option<Str>,
    /// Whether the file has an `image` or `build` key, even one of the wrong type (no second `D003` then).
    pub image_or_build_key: bool,
    /// Whether the file uses `dockerComposeFile` (already reported as `D003`).
    pub compose: bool,
    /// Lifecycle commands: `onCreateCommand`, `updateContentCommand`, `postCreateCommand`, `postStartCommand`,
    /// objects flattened in key order.
    pub lifecycle: Vec<RawCommand>,
}

struct Ctx<'a> {
    file: &'a str,
    diags: Vec<Diagnostic>,
}

impl Ctx<'_> {
    fn err(&mut self, code: &'static str, pos: Pos, msg: impl Into<String>) {
        self.diags
            .push(Diagnostic::error(code, self.file, pos.line, pos.col, msg));
    }
    fn warn(&mut self, code: &'static str, pos: Pos, msg: impl Into<String>) {
        self.diags
            .push(Diagnostic::warning(code, self.file, pos.line, pos.col, msg));
    }
    fn type_err(&mut self, path: &str, pos: Pos, want: &str) {
        self.err("D002", pos, format!("field '{path}' must be {want}"));
    }
    fn string(&mut self, path: &str, n: &Node) -> Option<Str> {
        match &n.value {
            Json::String(s) => Some(Str {
                value: s.clone(),
                pos: n.pos,
            }),
            _ => {
                self.type_err(path, n.pos, "a string");
                None
            }
        }
    }
    fn string_map(&mut self, path: &str, n: &Node) -> Vec<(Str, Str)> {
        let mut out = Vec::new();
        match &n.value {
            Json::Object(members) => {
                for m in members {
                    if let Some(v) = self.string(&format!("{path}.{}", m.key), &m.value) {
                        out.push((key_str(m), v));
                    }
                }
            }
            _ => self.type_err(path, n.pos, "an object of strings"),
        }
        out
    }
    fn string_array(&mut self, path: &str, n: &Node) -> Option<Vec<Str>> {
        match &n.value {
            Json::Array(items) => {
                let mut out = Vec::new();
                let mut ok = true;
                for (i, it) in items.iter().enumerate() {
                    match self.string(&format!("{path}[{i}]"), it) {
                        Some(s) => out.push(s),
                        None => ok = false,
                    }
                }
                ok.then_some(out)
            }
            _ => {
                self.type_err(path, n.pos, "an array of strings");
                None
            }
        }
    }
    fn command(&mut self, path: &str, n: &Node) -> Vec<RawCommand> {
        match &n.value {
            Json::String(s) => vec![RawCommand::Shell(Str {
                value: s.clone(),
                pos: n.pos,
            })],
            Json::Array(_) => self
                .string_array(path, n)
                .map(|v| vec![RawCommand::Argv(v)])
                .unwrap_or_default(),
            Json::Object(members) => {
                let mut sorted: Vec<&Member> = members.iter().collect();
                sorted.sort_by(|a, b| a.key.cmp(&b.key));
                let mut out = Vec::new();
                for m in sorted {
                    let sub = format!("{path}.{}", m.key);
                    match &m.value.value {
                        Json::String(_) | Json::Array(_) => out.extend(self.command(&sub, &m.value)),
                        _ => self.type_err(&sub, m.value.pos, "a string or an array of strings"),
                    }
                }
                out
            }
            _ => {
                self.type_err(path, n.pos, "a string, an array of strings or an object");
                Vec::new()
            }
        }
    }
}

fn key_str(m: &Member) -> Str {
    Str {
        value: m.key.clone(),
        pos: m.key_pos,
    }
}

fn non_empty(v: &Json) -> bool {
    match v {
        Json::Null => false,
        Json::Bool(b) => *b,
        Json::Array(a) => !a.is_empty(),
        Json::Object(o) => !o.is_empty(),
        Json::String(s) => !s.is_empty(),
        Json::Number(_) => true,
    }
}

/// Hex SHA-256 of bytes.
fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Reads `devcontainer.json` bytes (01 §7.2–7.3): the raw, unexpanded file plus every `D001`, `D002`, `D003`
/// (compose), `D006` (`privileged`, `capAdd`, `securityOpt`), `D009` and `D014` diagnostic. `None` when the
/// text is not a JSONC object.
pub fn parse(bytes: &[u8], path: &str) -> (Option<DevcontainerFile>, Vec<Diagnostic>) {
    let mut cx = Ctx {
        file: path,
        diags: Vec::new(),
    };
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let prefix = &bytes[..e.valid_up_to()];
            let line = prefix.iter().filter(|b| **b == b'\n').count() as u32 + 1;
            let last = prefix.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let col = String::from_utf8_lossy(&prefix[last..]).chars().count() as u32 + 1;
            cx.err("D001", Pos { line, col }, "invalid JSONC: not valid UTF-8");
            return (None, cx.diags);
        }
    };
    let parsed = match jsonc::parse(text) {
        Ok(p) => p,
        Err(e) => {
            cx.err("D001", e.pos, format!("invalid JSONC: {}", e.message));
            return (None, cx.diags);
        }
    };
    for (k, pos) in &parsed.duplicates {
        cx.warn(
            "D014",
            *pos,
            format!("duplicate key '{k}' (the last value is used)"),
        );
    }
    let Json::Object(members) = &parsed.root.value else {
        cx.err(
            "D001",
            parsed.root.pos,
            format!(
                "invalid JSONC: the top level must be an object, found {}",
                parsed.root.value.type_name()
            ),
        );
        return (None, cx.diags);
    };
    let mut f = DevcontainerFile {
        path: path.to_owned(),
        sha256: sha256_hex(bytes),
        root_pos: parsed.root.pos,
        image: None,
        build: None,
        container_env: Vec::new(),
        remote_env: Vec::new(),
        mounts: Vec::new(),
        run_args: Vec::new(),
        remote_user: None,
        container_user: None,
        workspace_folder: None,
        image_or_build_key: members.iter().any(|m| m.key == "image" || m.key == "build"),
        compose: members.iter().any(|m| m.key == "dockerComposeFile"),
        lifecycle: Vec::new(),
    };
    let mut lifecycle: [Vec<RawCommand>; 4] = Default::default();
    for m in members {
        let v = &m.value;
        match m.key.as_str() {
            "image" => f.image = cx.string("image", v),
            "build" => f.build = parse_build(&mut cx, v),
            "containerEnv" => f.container_env = cx.string_map("containerEnv", v),
            "remoteEnv" => match &v.value {
                Json::Object(env) => {
                    for e in env {
                        match &e.value.value {
                            Json::Null => f.remote_env.push((key_str(e), None)),
                            _ => {
                                if let Some(s) = cx.string(&format!("remoteEnv.{}", e.key), &e.value) {
                                    f.remote_env.push((key_str(e), Some(s)));
                                }
                            }
                        }
                    }
                }
                _ => cx.type_err("remoteEnv", v.pos, "an object of strings or nulls"),
            },
            "mounts" => match &v.value {
                Json::Array(items) => {
                    for (i, it) in items.iter().enumerate() {
                        if let Some(rm) = parse_mount_entry(&mut cx, i, it) {
                            f.mounts.push(rm);
                        }
                    }
                }
                _ => cx.type_err("mounts", v.pos, "an array of strings or mount objects"),
            },
            "runArgs" => f.run_args = cx.string_array("runArgs", v).unwrap_or_default(),
            "remoteUser" => f.remote_user = cx.string("remoteUser", v),
            "containerUser" => f.container_user = cx.string("containerUser", v),
            "workspaceFolder" => f.workspace_folder = cx.string("workspaceFolder", v),
            "onCreateCommand" => lifecycle[0] = cx.command("onCreateCommand", v),
            "updateContentCommand" => lifecycle[1] = cx.command("updateContentCommand", v),
            "postCreateCommand" => lifecycle[2] = cx.command("postCreateCommand", v),
            "postStartCommand" => lifecycle[3] = cx.command("postStartCommand", v),
            "privileged" => match &v.value {
                Json::Bool(true) => cx.err(
                    "D006",
                    m.key_pos,
                    "'privileged' would weaken sandbox isolation and is refused",
                ),
                Json::Bool(false) | Json::Null => {}
                _ => cx.type_err("privileged", v.pos, "a boolean"),
            },
            key @ ("capAdd" | "securityOpt") if non_empty(&v.value) => cx.err(
                "D006",
                m.key_pos,
                format!("'{key}' would weaken sandbox isolation and is refused"),
            ),
            "dockerComposeFile" => cx.err(
                "D003",
                m.key_pos,
                "compose-based devcontainer configurations are not supported",
            ),
            key @ ("workspaceMount" | "initializeCommand" | "postAttachCommand") => cx.warn(
                "D009",
                m.key_pos,
                format!("'{key}' is not supported by iterion and is ignored"),
            ),
            "features" if non_empty(&v.value) => cx.warn(
                "D009",
                m.key_pos,
                "'features' is not supported by iterion and is ignored",
            ),
            _ => {}
        }
    }
    f.lifecycle = lifecycle.into_iter().flatten().collect();
    (Some(f), cx.diags)
}

fn parse_build(cx: &mut Ctx<'_>, v: &Node) -> Option<RawBuild> {
    let Json::Object(members) = &v.value else {
        cx.type_err("build", v.pos, "an object");
        return None;
    };
    let mut b = RawBuild {
        pos: v.pos,
        ..RawBuild::default()
    };
    for m in members {
        match m.key.as_str() {
            "dockerfile" => b.dockerfile = cx.string("build.dockerfile", &m.value),
            "context" => b.context = cx.string("build.context", &m.value),
            "target" => b.target = cx.string("build.target", &m.value),
            "args" => b.args = cx.string_map("build.args", &m.value),
            key @ ("options" | "cacheFrom") => cx.warn(
                "D009",
                m.key_pos,
                format!("'build.{key}' is not supported by iterion and is ignored"),
            ),
            _ => {}
        }
    }
    Some(b)
}

fn parse_mount_entry(cx: &mut Ctx<'_>, i: usize, it: &Node) -> Option<RawMount> {
    match &it.value {
        Json::String(s) => Some(RawMount::Text(Str {
            value: s.clone(),
            pos: it.pos,
        })),
        Json::Object(members) => {
            let mut kind = None;
            let mut source = None;
            let mut target = None;
            let mut read_only = false;
            let mut ok = true;
            for m in members {
                let p = format!("mounts[{i}].{}", m.key);
                match m.key.as_str() {
                    "type" => kind = cx.string(&p, &m.value),
                    "source" => source = cx.string(&p, &m.value),
                    "target" => target = cx.string(&p, &m.value),
                    "readonly" => match m.value.value {
                        Json::Bool(b) => read_only = b,
                        _ => {
                            cx.type_err(&p, m.value.pos, "a boolean");
                            ok = false;
                        }
                    },
                    _ => {
                        cx.err(
                            "D012",
                            m.key_pos,
                            format!("invalid mount 'mounts[{i}]': unknown key '{}'", m.key),
                        );
                        ok = false;
                    }
                }
            }
            ok.then_some(RawMount::Object {
                pos: it.pos,
                kind,
                source,
                target,
                read_only,
            })
        }
        _ => {
            cx.type_err(&format!("mounts[{i}]"), it.pos, "a string or a mount object");
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Expansion, validation and mapping (§7.4, §7.5)
// ---------------------------------------------------------------------------------------------------------

/// The repository's sandbox configuration after expansion and validation: what auto mode layers the workflow
/// block onto (01 §6.5, §8.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevcontainerSpec {
    /// Which file, and the hash of its bytes.
    pub source: DevcontainerRef,
    /// `image`.
    pub image: Option<String>,
    /// `build` with absolute host paths.
    pub build: Option<BuildSpec>,
    /// `remoteUser`, else `containerUser`.
    pub user: Option<String>,
    /// `workspaceFolder` after expansion.
    pub workspace_folder: Option<String>,
    /// Lifecycle command snippets, in order.
    pub post_create: Vec<String>,
    /// The repository env layer (`remoteEnv`, then `containerEnv`, then `runArgs -e`).
    pub env: BTreeMap<String, String>,
    /// `mounts`, then `runArgs` mounts.
    pub mounts: Vec<Mount>,
}

/// Everything [`DevcontainerFile::resolve`] and [`load`] need besides the file.
#[derive(Clone, Copy)]
pub struct LoadContext<'a> {
    /// Absolute repository root.
    pub repo_root: &'a Path,
    /// Host environment (only the localEnv allowlist is read).
    pub env: &'a BTreeMap<String, String>,
    /// Absolute host workspace path: the container workspace folder when `workspaceFolder` is unset.
    pub host_workspace: &'a str,
    /// Reads files and resolves symlinks.
    pub reader: &'a dyn SourceReader,
}

impl std::fmt::Debug for LoadContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadContext")
            .field("repo_root", &self.repo_root)
            .field("env_names", &self.env.keys().collect::<Vec<_>>())
            .field("host_workspace", &self.host_workspace)
            .finish_non_exhaustive()
    }
}

/// POSIX-quotes one argv element (01 §7.3).
pub fn shell_quote(arg: &str) -> String {
    if arg.is_empty() {
        return "''".to_owned();
    }
    let bare = arg
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./:@,+=".contains(c));
    if bare {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// Removes `.` and folds `..` lexically (`..` at the root stays at the root).
pub fn clean_path(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn path_string(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

struct Expander<'a> {
    cx: Ctx<'a>,
    env: &'a BTreeMap<String, String>,
    root: Option<String>,
    container_folder: Option<String>,
}

impl Expander<'_> {
    fn expand(&mut self, s: &Str) -> String {
        let ctx = ExpandContext {
            env: self.env,
            local_workspace_folder: self.root.as_deref(),
            container_workspace_folder: self.container_folder.as_deref(),
        };
        let e = expand_local_vars(&s.value, &ctx);
        for w in e.warnings {
            match w {
                VarWarning::NotAllowlisted { .. } => self.cx.warn("D010", s.pos, w.message()),
                VarWarning::DevcontainerId => self.cx.warn(
                    "D009",
                    s.pos,
                    "'${devcontainerId}' is not supported by iterion and is ignored",
                ),
                VarWarning::Unsupported { .. } => {}
            }
        }
        e.text
    }
}

impl DevcontainerFile {
    /// Expands variables (01 §7.4), validates (§7.5) and maps the fields (§7.3). Returns `None` when any
    /// error-severity diagnostic was found: an invalid file is never silently replaced by the default image.
    pub fn resolve(&self, lc: &LoadContext<'_>) -> (Option<DevcontainerSpec>, Vec<Diagnostic>) {
        let root_s = path_string(lc.repo_root);
        let mut x = Expander {
            cx: Ctx {
                file: &self.path,
                diags: Vec::new(),
            },
            env: lc.env,
            root: Some(root_s),
            container_folder: None,
        };

        // workspaceFolder first: ${containerWorkspaceFolder} depends on it.
        let workspace_folder = self.resolve_workspace_folder(&mut x);
        x.container_folder = Some(
            workspace_folder
                .clone()
                .unwrap_or_else(|| lc.host_workspace.to_owned()),
        );

        // image / build (D003, D004, D005, D011).
        let image = self.resolve_image(&mut x);
        let build = self
            .build
            .as_ref()
            .and_then(|b| self.resolve_build(&mut x, lc, b));

        // Environment layer.
        let (mut env, mut env_pos) = self.resolve_env(&mut x);

        // Mounts.
        let mut mounts = self.resolve_mounts(&mut x);

        // runArgs.
        let args: Vec<(String, Pos)> = self.run_args.iter().map(|a| (x.expand(a), a.pos)).collect();
        apply_run_args(&mut x.cx, &args, &mut mounts, &mut env, &mut env_pos);

        // Env validation (D013), after every layer is known.
        for (k, v) in &env {
            let pos = env_pos.get(k).copied().unwrap_or(self.root_pos);
            if let Err(r) = values::validate_env_entry(k, v) {
                x.cx.err("D013", pos, format!("invalid env entry '{k}': {r}"));
            }
        }

        // User (not expanded).
        let user = self.remote_user.as_ref().or(self.container_user.as_ref());
        if let Some(u) = user
            && values::validate_user(&u.value).is_err()
        {
            x.cx.err("C101", u.pos, format!("invalid sandbox user '{}'", u.value));
        }

        // Lifecycle commands.
        let post_create = self.resolve_post_create(&mut x);

        let diags = x.cx.diags;
        if crate::diag::has_errors(&diags) {
            return (None, diags);
        }
        let spec = DevcontainerSpec {
            source: DevcontainerRef {
                path: self.path.clone(),
                sha256: self.sha256.clone(),
            },
            image: image.map(|(i, _)| i),
            build,
            user: user.map(|u| u.value.clone()),
            workspace_folder,
            post_create,
            env,
            mounts,
        };
        (Some(spec), diags)
    }

    /// `workspaceFolder`, expanded (it cannot use `${containerWorkspaceFolder}`) and absolute (`D008`).
    fn resolve_workspace_folder(&self, x: &mut Expander<'_>) -> Option<String> {
        let mut workspace_folder = None;
        if let Some(wf) = &self.workspace_folder {
            if wf.value.contains("${containerWorkspaceFolder") {
                x.cx.err(
                    "D008",
                    wf.pos,
                    "workspaceFolder cannot use ${containerWorkspaceFolder}",
                );
            } else {
                let v = x.expand(wf);
                match values::validate_workspace_folder(&v) {
                    Ok(()) => workspace_folder = Some(v),
                    Err(_) if !v.starts_with('/') => x.cx.err(
                        "D008",
                        wf.pos,
                        format!("workspaceFolder '{v}' must be an absolute path after expansion"),
                    ),
                    Err(r) => x.cx.err("D008", wf.pos, format!("workspaceFolder '{v}' {r}")),
                }
            }
        }
        workspace_folder
    }

    /// `image`, expanded and valid (`D002`); `D003` when neither image nor build is set, `D004` when both are.
    fn resolve_image(&self, x: &mut Expander<'_>) -> Option<(String, Pos)> {
        let image = self.image.as_ref().map(|s| (x.expand(s), s.pos));
        if let Some((img, pos)) = &image
            && let Err(r) = values::validate_image(img)
        {
            x.cx.err(
                "D002",
                *pos,
                format!("field 'image' must be an image reference: {r}"),
            );
        }
        match (&image, &self.build) {
            (None, None) if !self.image_or_build_key && !self.compose => {
                x.cx.err("D003", self.root_pos, "must set either image or build")
            }
            (Some(_), Some(b)) => x.cx.err("D004", b.pos, "image and build are mutually exclusive"),
            _ => {}
        }
        image
    }

    /// The environment layer: `remoteEnv` (a `null` value removes the name), then `containerEnv`; with the
    /// position each name was set at.
    fn resolve_env(&self, x: &mut Expander<'_>) -> (BTreeMap<String, String>, BTreeMap<String, Pos>) {
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in &self.remote_env {
            match v {
                None => {
                    env.remove(&k.value);
                }
                Some(v) => {
                    let v = x.expand(v);
                    env.insert(k.value.clone(), v);
                }
            }
        }
        let mut env_pos: BTreeMap<String, Pos> = self
            .remote_env
            .iter()
            .map(|(k, _)| (k.value.clone(), k.pos))
            .collect();
        for (k, v) in &self.container_env {
            let v = x.expand(v);
            env.insert(k.value.clone(), v);
            env_pos.insert(k.value.clone(), k.pos);
        }
        (env, env_pos)
    }

    /// `mounts`, each a mount string or an object turned into one, parsed (`D012`).
    fn resolve_mounts(&self, x: &mut Expander<'_>) -> Vec<Mount> {
        let mut mounts = Vec::new();
        for (i, m) in self.mounts.iter().enumerate() {
            let (text, pos) = match m {
                RawMount::Text(s) => (x.expand(s), s.pos),
                RawMount::Object {
                    pos,
                    kind,
                    source,
                    target,
                    read_only,
                } => {
                    let mut fields = Vec::new();
                    match kind {
                        Some(k) => fields.push(format!("type={}", x.expand(k))),
                        None => {
                            x.cx.err("D012", *pos, format!("invalid mount 'mounts[{i}]': missing type"));
                            continue;
                        }
                    }
                    if let Some(s) = source {
                        fields.push(format!("source={}", x.expand(s)));
                    }
                    if let Some(t) = target {
                        fields.push(format!("target={}", x.expand(t)));
                    }
                    if *read_only {
                        fields.push("readonly".to_owned());
                    }
                    let text: Vec<String> = fields.iter().map(|f| csv_quote(f)).collect();
                    (text.join(","), *pos)
                }
            };
            match parse_mount(&text) {
                Ok(m) => mounts.push(m),
                Err(r) => x.cx.err("D012", pos, format!("invalid mount '{text}': {r}")),
            }
        }
        mounts
    }

    /// The lifecycle commands as shell snippets (an argv is quoted word by word); empty ones are dropped.
    fn resolve_post_create(&self, x: &mut Expander<'_>) -> Vec<String> {
        let mut post_create = Vec::new();
        for c in &self.lifecycle {
            let snippet = match c {
                RawCommand::Shell(s) => x.expand(s),
                RawCommand::Argv(v) => v
                    .iter()
                    .map(|a| shell_quote(&x.expand(a)))
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            let t = snippet.trim();
            if !t.is_empty() {
                post_create.push(t.to_owned());
            }
        }
        post_create
    }

    fn resolve_build(&self, x: &mut Expander<'_>, lc: &LoadContext<'_>, b: &RawBuild) -> Option<BuildSpec> {
        let config_dir = lc
            .repo_root
            .join(&self.path)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| lc.repo_root.to_path_buf());
        let Some(df) = &b.dockerfile else {
            x.cx.err("D005", b.pos, "build.dockerfile is required when build is set");
            return None;
        };
        let root = clean_path(lc.repo_root);
        let inside = |field: &str, s: &Str, x: &mut Expander<'_>| -> Option<String> {
            let v = x.expand(s);
            let joined = clean_path(&config_dir.join(&v));
            let canon_ok = match (lc.reader.canonicalize(&joined), lc.reader.canonicalize(&root)) {
                (Some(c), Some(r)) => c.starts_with(&r),
                _ => true,
            };
            if v.is_empty() || !joined.starts_with(&root) || !canon_ok {
                x.cx.err(
                    "D011",
                    s.pos,
                    format!("build {field} '{v}' resolves outside the repository"),
                );
                return None;
            }
            Some(path_string(&joined))
        };
        let dockerfile = inside("dockerfile", df, x);
        let default_ctx = Str {
            value: ".".to_owned(),
            pos: b.pos,
        };
        let context = inside("context", b.context.as_ref().unwrap_or(&default_ctx), x);
        let target = b.target.as_ref().map(|t| x.expand(t));
        let mut args = BTreeMap::new();
        for (k, v) in &b.args {
            if let Err(r) = values::validate_build_arg_name(&k.value) {
                x.cx.err(
                    "D002",
                    k.pos,
                    format!("field 'build.args.{}' must be a valid name: {r}", k.value),
                );
            }
            args.insert(k.value.clone(), x.expand(v));
        }
        Some(BuildSpec {
            dockerfile: dockerfile?,
            context: context?,
            target,
            args,
        })
    }
}

/// Flags of `runArgs` that weaken isolation (`D006`), with or without `=value`.
const REFUSED_FLAGS: &[&str] = &[
    "--privileged",
    "--cap-add",
    "--security-opt",
    "--network",
    "--net",
    "--pid",
    "--ipc",
    "--uts",
    "--userns",
    "--device",
    "--cgroupns",
    "--volumes-from",
];

fn volume_to_mount(spec: &str) -> Result<String, String> {
    let parts: Vec<&str> = spec.split(':').collect();
    let (src, dst, opts) = match parts.as_slice() {
        [s, d] => (*s, *d, ""),
        [s, d, o] => (*s, *d, *o),
        _ => return Err("want SRC:DST[:ro]".to_owned()),
    };
    let mut fields = vec![
        "type=bind".to_owned(),
        format!("source={src}"),
        format!("target={dst}"),
    ];
    for o in opts.split(',').filter(|o| !o.is_empty()) {
        match o {
            "ro" => fields.push("readonly".to_owned()),
            "rw" => {}
            other => return Err(format!("unsupported volume option '{other}'")),
        }
    }
    Ok(fields.iter().map(|f| csv_quote(f)).collect::<Vec<_>>().join(","))
}

fn apply_run_args(
    cx: &mut Ctx<'_>,
    args: &[(String, Pos)],
    mounts: &mut Vec<Mount>,
    env: &mut BTreeMap<String, String>,
    env_pos: &mut BTreeMap<String, Pos>,
) {
    let mut i = 0;
    while i < args.len() {
        let (arg, pos) = (&args[i].0, args[i].1);
        i += 1;
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        let value = |i: &mut usize| -> Option<String> {
            if inline.is_some() {
                return inline.clone();
            }
            let v = args.get(*i).map(|a| a.0.clone());
            if v.is_some() {
                *i += 1;
            }
            v
        };
        if REFUSED_FLAGS.contains(&flag) {
            if flag != "--privileged" {
                value(&mut i);
            }
            cx.err(
                "D006",
                pos,
                format!("'{arg}' would weaken sandbox isolation and is refused"),
            );
            continue;
        }
        match flag {
            "-v" | "--volume" => match value(&mut i) {
                Some(v) => match volume_to_mount(&v).and_then(|t| parse_mount(&t)) {
                    Ok(m) => mounts.push(m),
                    Err(r) => cx.err("D012", pos, format!("invalid mount '{v}': {r}")),
                },
                None => cx.err("D012", pos, format!("invalid mount '{arg}': missing value")),
            },
            "--mount" => match value(&mut i) {
                Some(v) => match parse_mount(&v) {
                    Ok(m) => mounts.push(m),
                    Err(r) => cx.err("D012", pos, format!("invalid mount '{v}': {r}")),
                },
                None => cx.err("D012", pos, format!("invalid mount '{arg}': missing value")),
            },
            "-e" | "--env" => match value(&mut i) {
                Some(kv) => match kv.split_once('=') {
                    Some((k, v)) => {
                        env.insert(k.to_owned(), v.to_owned());
                        env_pos.insert(k.to_owned(), pos);
                    }
                    None => cx.warn(
                        "D007",
                        pos,
                        format!("runArgs entry '{arg} {kv}' is not supported and is ignored"),
                    ),
                },
                None => cx.err("D013", pos, format!("invalid env entry '{arg}': missing value")),
            },
            _ => cx.warn(
                "D007",
                pos,
                format!("runArgs entry '{arg}' is not supported and is ignored"),
            ),
        }
    }
}

/// The outcome of [`load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOutcome {
    /// Whether a configuration file was found (even if invalid or unreadable).
    pub found: bool,
    /// The validated configuration; `None` when not found or when `diagnostics` holds an error.
    pub spec: Option<DevcontainerSpec>,
    /// Every diagnostic, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
}

/// Locates, reads, expands and validates the repository's `devcontainer.json` in one call.
pub fn load(lc: &LoadContext<'_>) -> LoadOutcome {
    let (located, mut diagnostics) = locate(lc.repo_root, lc.reader);
    let Some(loc) = located else {
        let found = crate::diag::has_errors(&diagnostics);
        return LoadOutcome {
            found,
            spec: None,
            diagnostics,
        };
    };
    let (file, d) = parse(&loc.bytes, &loc.rel_path);
    diagnostics.extend(d);
    let mut spec = None;
    if let Some(f) = file {
        let (s, d) = f.resolve(lc);
        diagnostics.extend(d);
        spec = s;
    }
    if crate::diag::has_errors(&diagnostics) {
        spec = None;
    }
    crate::diag::sort(&mut diagnostics);
    LoadOutcome {
        found: true,
        spec,
        diagnostics,
    }
}
