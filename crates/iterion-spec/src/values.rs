//! Value formats shared by the workflow compiler, the `devcontainer.json` reader and sandbox resolution
//! (specification 01 §8.10, and the mount parser requirements of 03 §10.1–10.2).
//!
//! Every function here is pure and returns either a typed value or a human-readable reason (lower case, no
//! trailing period). Callers wrap the reason in their own diagnostic: `C100`–`C104` at compile time, `D008` and
//! `D011`–`D013` in `devcontainer.json`, or a resolution error after variable expansion.
//!
//! Reasons never quote an environment value, only names (01 §9.1).
//!
//! ```
//! use iterion_spec::values::{parse_mount, MountKind};
//! let m = parse_mount("type=BIND,src=/a,dst=/b,ro").unwrap();
//! assert_eq!(m.kind, MountKind::Bind);
//! assert_eq!(m.source.as_deref(), Some("/a"));
//! assert!(m.read_only);
//! assert_eq!(m.to_string(), "type=bind,source=/a,target=/b,readonly");
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The kind of a container mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MountKind {
    /// A host path bound into the container.
    Bind,
    /// A named or anonymous engine volume (the engine default when `type` is absent).
    Volume,
    /// A memory-backed file system.
    Tmpfs,
}

impl MountKind {
    /// The lower-case word used in the mount syntax.
    pub fn as_str(self) -> &'static str {
        match self {
            MountKind::Bind => "bind",
            MountKind::Volume => "volume",
            MountKind::Tmpfs => "tmpfs",
        }
    }
}

/// A parsed mount (01 §8.10).
///
/// Produced by [`parse_mount`]; the text form is restored by `Display` (canonical key order, lower-case keys,
/// CSV quoting where needed), so `parse_mount(&m.to_string()) == Ok(m)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mount {
    /// `bind`, `volume` or `tmpfs`.
    #[serde(rename = "type")]
    pub kind: MountKind,
    /// Host path (bind) or volume name (volume); absent for anonymous volumes and tmpfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Absolute path inside the container.
    pub target: String,
    /// Mounted read-only.
    #[serde(rename = "readonly", default, skip_serializing_if = "is_false")]
    pub read_only: bool,
    /// `bind-propagation` (bind only; `private` or `rprivate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_propagation: Option<String>,
    /// `volume-driver` (volume only; `local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_driver: Option<String>,
    /// `volume-subpath` (volume only; relative, no `..`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_subpath: Option<String>,
    /// `volume-nocopy` (volume only).
    #[serde(default, skip_serializing_if = "is_false")]
    pub volume_nocopy: bool,
    /// `volume-opt` entries by option key (volume only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volume_opts: BTreeMap<String, String>,
    /// `tmpfs-size` in bytes (tmpfs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmpfs_size: Option<u64>,
    /// `tmpfs-mode` permission bits (tmpfs only, at most `0o1777`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmpfs_mode: Option<u32>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Mount {
    /// A bind mount of `source` at `target`, not yet validated (use [`parse_mount`] on its text to check it).
    pub fn bind(source: impl Into<String>, target: impl Into<String>, read_only: bool) -> Self {
        Mount {
            kind: MountKind::Bind,
            source: Some(source.into()),
            target: target.into(),
            read_only,
            bind_propagation: None,
            volume_driver: None,
            volume_subpath: None,
            volume_nocopy: false,
            volume_opts: BTreeMap::new(),
            tmpfs_size: None,
            tmpfs_mode: None,
        }
    }
}

impl fmt::Display for Mount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut fields: Vec<String> = vec![format!("type={}", self.kind.as_str())];
        if let Some(s) = &self.source {
            fields.push(format!("source={s}"));
        }
        fields.push(format!("target={}", self.target));
        if self.read_only {
            fields.push("readonly".to_owned());
        }
        if let Some(p) = &self.bind_propagation {
            fields.push(format!("bind-propagation={p}"));
        }
        if let Some(d) = &self.volume_driver {
            fields.push(format!("volume-driver={d}"));
        }
        if let Some(s) = &self.volume_subpath {
            fields.push(format!("volume-subpath={s}"));
        }
        if self.volume_nocopy {
            fields.push("volume-nocopy".to_owned());
        }
        for (k, v) in &self.volume_opts {
            fields.push(format!("volume-opt={k}={v}"));
        }
        if let Some(s) = self.tmpfs_size {
            fields.push(format!("tmpfs-size={s}"));
        }
        if let Some(m) = self.tmpfs_mode {
            fields.push(format!("tmpfs-mode={m:o}"));
        }
        let quoted: Vec<String> = fields.iter().map(|x| csv_quote(x)).collect();
        f.write_str(&quoted.join(","))
    }
}

/// Quotes one CSV field when it contains a comma or a double quote (`"` doubled inside).
pub fn csv_quote(field: &str) -> String {
    if field.contains(',') || field.contains('"') {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}

/// How strictly [`parse_mount_with`] checks values that may still hold `${…}` variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VarPolicy {
    /// Values are final (after expansion): every check applies.
    #[default]
    Expanded,
    /// Values may still contain `${…}` (compile time): path and name checks are skipped for values that
    /// contain `${`, every other check applies.
    Unexpanded,
}

/// Parses mount text after variable expansion (every check applies).
pub fn parse_mount(text: &str) -> Result<Mount, String> {
    parse_mount_with(text, VarPolicy::Expanded)
}

/// Splits one CSV record (03 §10.1): `,` separates fields; a field starting with `"` is quoted, `""` inside it
/// is a literal quote and the closing quote must be followed by `,` or the end; a `"` inside an unquoted field is
/// an error.
pub fn split_csv_record(text: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                if c == '"' {
                    if chars.peek() == Some(&'"') {
                        chars.next();
                        field.push('"');
                    } else {
                        closed = true;
                        break;
                    }
                } else {
                    field.push(c);
                }
            }
            if !closed {
                return Err("unterminated quoted field".to_owned());
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(_) => return Err("a closing quote must be followed by ',' or the end".to_owned()),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some('"') => return Err("a '\"' inside an unquoted field".to_owned()),
                    Some(c) => field.push(c),
                }
            }
            fields.push(field);
        }
    }
}

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

fn has_var(s: &str) -> bool {
    s.contains("${")
}

fn parse_bool(key: &str, v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("invalid value for '{key}' (want true, false, 1 or 0)")),
    }
}

/// `tmpfs-size`: a byte count with an optional `k`, `m` or `g` suffix (case-insensitive).
fn parse_size(v: &str) -> Result<u64, String> {
    let bad = || format!("invalid tmpfs-size '{v}' (want bytes with an optional k, m or g suffix)");
    let (digits, mul) = match v.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&v[..v.len() - 1], 1u64 << 10),
        Some('m') => (&v[..v.len() - 1], 1u64 << 20),
        Some('g') => (&v[..v.len() - 1], 1u64 << 30),
        _ => (v, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(bad)
}

fn parse_mode(v: &str) -> Result<u32, String> {
    let bad = || format!("invalid tmpfs-mode '{v}' (want octal permission bits up to 1777)");
    if v.is_empty() || !v.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(bad());
    }
    match u32::from_str_radix(v, 8) {
        Ok(m) if m <= 0o1777 => Ok(m),
        _ => Err(bad()),
    }
}

/// The canonical key for a mount key or alias, or `None` when the key is unknown.
fn canonical_key(key: &str) -> Option<&'static str> {
    Some(match key {
        "type" => "type",
        "source" | "src" => "source",
        "target" | "dst" | "destination" => "target",
        "readonly" | "ro" => "readonly",
        "consistency" => "consistency",
        "bind-propagation" => "bind-propagation",
        "volume-driver" => "volume-driver",
        "volume-subpath" => "volume-subpath",
        "volume-nocopy" => "volume-nocopy",
        "volume-opt" => "volume-opt",
        "tmpfs-size" => "tmpfs-size",
        "tmpfs-mode" => "tmpfs-mode",
        _ => return None,
    })
}

fn is_volume_name(s: &str) -> bool {
    let mut it = s.chars();
    matches!(it.next(), Some(c) if c.is_ascii_alphanumeric())
        && it.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Parses mount text (01 §8.10, 03 §10.1–10.2) with the given variable policy.
///
/// Checks: CSV syntax; `key=value` fields or the bare booleans `readonly`, `ro`, `volume-nocopy`; no surrounding
/// whitespace in keys or values; known keys only (case-insensitive, aliases folded); no key given twice (aliases
/// count); no control character; no leading `-`; a required absolute target; the type rules (a bind needs a
/// source, a volume source is a name, tmpfs has no source, options only for their own type,
/// `bind-propagation` `private`/`rprivate`, `volume-driver=local`, a relative `volume-subpath` without `..`,
/// no `volume-opt` that turns a volume into a host bind: `o` containing `bind`/`rbind`, `device` or `type`).
/// Host-path safety (sensitive paths, symlinks) is the driver's job.
pub fn parse_mount_with(text: &str, vars: VarPolicy) -> Result<Mount, String> {
    if text.is_empty() {
        return Err("empty mount".to_owned());
    }
    if text.starts_with('-') {
        return Err("must not start with '-' (write type=…,source=…,target=…)".to_owned());
    }
    if has_control(text) {
        return Err("contains a control character".to_owned());
    }
    let mut seen: Vec<&'static str> = Vec::new();
    let mut st = MountFields {
        kind: None,
        source: None,
        target: None,
        m: Mount::bind("", "", false),
    };
    st.m.source = None;
    for field in split_csv_record(text)? {
        if field.is_empty() {
            return Err("empty field".to_owned());
        }
        let (raw_key, value) = match field.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (field.as_str(), None),
        };
        if raw_key.trim() != raw_key || value.is_some_and(|v| v.trim() != v) {
            return Err(format!("whitespace around field '{field}'"));
        }
        let lower = raw_key.to_ascii_lowercase();
        let key = canonical_key(&lower).ok_or_else(|| format!("unknown key '{raw_key}'"))?;
        if key != "volume-opt" {
            if seen.contains(&key) {
                return Err(format!("duplicate key '{key}'"));
            }
            seen.push(key);
        }
        let value = match value {
            Some(v) => v,
            None if matches!(key, "readonly" | "volume-nocopy") => "true",
            None => return Err(format!("key '{lower}' needs a value")),
        };
        set_mount_field(&mut st, (key, &lower, raw_key), value, vars)?;
    }
    let MountFields {
        kind,
        source,
        target,
        mut m,
    } = st;
    let kind = kind.unwrap_or(MountKind::Volume);
    let target = target.ok_or_else(|| "missing target".to_owned())?;
    if target.is_empty() {
        return Err("empty target".to_owned());
    }
    if !lenient(vars, &target) && !target.starts_with('/') {
        return Err(format!("target '{target}' must be an absolute path"));
    }
    check_mount_kind(kind, source.as_deref(), &m, vars)?;
    m.kind = kind;
    m.source = source;
    m.target = target;
    Ok(m)
}

/// A mount being parsed: what the fields set so far.
struct MountFields {
    kind: Option<MountKind>,
    source: Option<String>,
    target: Option<String>,
    m: Mount,
}

/// Whether a value is left unchecked: it holds a variable that is expanded later.
fn lenient(vars: VarPolicy, v: &str) -> bool {
    vars == VarPolicy::Unexpanded && has_var(v)
}

/// Applies one `key=value` field; `key` is `(canonical, lowercase, as written)`.
fn set_mount_field(
    st: &mut MountFields,
    (key, lower, raw_key): (&str, &str, &str),
    value: &str,
    vars: VarPolicy,
) -> Result<(), String> {
    match key {
        "type" => {
            st.kind = Some(match value.to_ascii_lowercase().as_str() {
                "bind" => MountKind::Bind,
                "volume" => MountKind::Volume,
                "tmpfs" => MountKind::Tmpfs,
                _ => {
                    return Err(format!(
                        "unknown mount type '{value}' (want bind, volume or tmpfs)"
                    ));
                }
            })
        }
        "source" => {
            if value.is_empty() {
                return Err("empty source".to_owned());
            }
            st.source = Some(value.to_owned());
        }
        "target" => st.target = Some(value.to_owned()),
        "readonly" => st.m.read_only = parse_bool(lower, value)?,
        "consistency" => {}
        "bind-propagation" => {
            if !matches!(value, "private" | "rprivate") {
                return Err(format!(
                    "bind-propagation '{value}' is not allowed (want private or rprivate)"
                ));
            }
            st.m.bind_propagation = Some(value.to_owned());
        }
        "volume-driver" => {
            if value != "local" {
                return Err(format!("volume-driver '{value}' is not allowed (only local)"));
            }
            st.m.volume_driver = Some(value.to_owned());
        }
        "volume-subpath" => {
            if !lenient(vars, value) {
                check_relative_inside(value).map_err(|r| format!("volume-subpath {r}"))?;
            }
            st.m.volume_subpath = Some(value.to_owned());
        }
        "volume-nocopy" => st.m.volume_nocopy = parse_bool(lower, value)?,
        "volume-opt" => set_volume_opt(&mut st.m, value)?,
        "tmpfs-size" => st.m.tmpfs_size = Some(parse_size(value)?),
        "tmpfs-mode" => st.m.tmpfs_mode = Some(parse_mode(value)?),
        _ => return Err(format!("unknown key '{raw_key}'")),
    }
    Ok(())
}

/// A `volume-opt=KEY=VALUE` field: no option that turns the volume into a host mount, no key given twice.
fn set_volume_opt(m: &mut Mount, value: &str) -> Result<(), String> {
    let (ok, ov) = value
        .split_once('=')
        .ok_or_else(|| format!("volume-opt '{value}' must be key=value"))?;
    if ok.is_empty() {
        return Err(format!("volume-opt '{value}' has an empty key"));
    }
    let okl = ok.to_ascii_lowercase();
    if okl == "device" || okl == "type" {
        return Err(format!(
            "volume-opt '{ok}' would turn the volume into a host mount"
        ));
    }
    if okl == "o"
        && ov
            .split(',')
            .any(|p| matches!(p.trim().to_ascii_lowercase().as_str(), "bind" | "rbind"))
    {
        return Err("volume-opt o=bind would turn the volume into a host bind".to_owned());
    }
    if m.volume_opts.contains_key(&okl) {
        return Err(format!("duplicate key 'volume-opt={okl}'"));
    }
    m.volume_opts.insert(okl, ov.to_owned());
    Ok(())
}

/// The type rules: a bind needs a source, a volume source is a name, tmpfs has no source, and each option
/// only for its own type.
fn check_mount_kind(kind: MountKind, source: Option<&str>, m: &Mount, vars: VarPolicy) -> Result<(), String> {
    let wrong = |opt: &str| {
        Err(format!(
            "option '{opt}' does not apply to a {} mount",
            kind.as_str()
        ))
    };
    match kind {
        MountKind::Bind => {
            if source.is_none() {
                return Err("a bind mount needs a source".to_owned());
            }
            for (set, opt) in [
                (m.volume_driver.is_some(), "volume-driver"),
                (m.volume_subpath.is_some(), "volume-subpath"),
                (m.volume_nocopy, "volume-nocopy"),
                (!m.volume_opts.is_empty(), "volume-opt"),
                (m.tmpfs_size.is_some(), "tmpfs-size"),
                (m.tmpfs_mode.is_some(), "tmpfs-mode"),
            ] {
                if set {
                    return wrong(opt);
                }
            }
        }
        MountKind::Volume => {
            if let Some(s) = source
                && !lenient(vars, s)
                && !is_volume_name(s)
            {
                if s.contains('/') || s.starts_with('.') || s.starts_with('~') {
                    return Err("volume source must be a name; did you mean type=bind?".to_owned());
                }
                return Err(format!("invalid volume name '{s}'"));
            }
            for (set, opt) in [
                (m.bind_propagation.is_some(), "bind-propagation"),
                (m.tmpfs_size.is_some(), "tmpfs-size"),
                (m.tmpfs_mode.is_some(), "tmpfs-mode"),
            ] {
                if set {
                    return wrong(opt);
                }
            }
        }
        MountKind::Tmpfs => {
            if source.is_some() {
                return Err("a tmpfs mount has no source".to_owned());
            }
            for (set, opt) in [
                (m.bind_propagation.is_some(), "bind-propagation"),
                (m.volume_driver.is_some(), "volume-driver"),
                (m.volume_subpath.is_some(), "volume-subpath"),
                (m.volume_nocopy, "volume-nocopy"),
                (!m.volume_opts.is_empty(), "volume-opt"),
            ] {
                if set {
                    return wrong(opt);
                }
            }
        }
    }
    Ok(())
}

/// Checks that `p` is relative and that no `..` component leaves the base directory.
fn check_relative_inside(p: &str) -> Result<(), String> {
    if p.starts_with('/') {
        return Err(format!("'{p}' must be a relative path"));
    }
    let mut depth: i64 = 0;
    for comp in p.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("'{p}' leaves its base directory"));
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// Validates a sandbox user (01 §8.10): `uid`, `uid:gid`, `name` or `name:group`, each part matching
/// `[A-Za-z0-9_][A-Za-z0-9_.-]*`.
pub fn validate_user(user: &str) -> Result<(), String> {
    fn part(s: &str) -> bool {
        let mut it = s.chars();
        matches!(it.next(), Some(c) if c.is_ascii_alphanumeric() || c == '_')
            && it.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    }
    let ok = match user.split_once(':') {
        Some((u, g)) => part(u) && part(g),
        None => part(user),
    };
    if ok {
        Ok(())
    } else if user.is_empty() {
        Err("empty user".to_owned())
    } else {
        Err(
            "want uid, uid:gid, name or name:group (letters, digits, '_', '.', '-'; no leading '-')"
                .to_owned(),
        )
    }
}

/// Validates an environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn validate_env_name(name: &str) -> Result<(), String> {
    let mut it = name.chars();
    if matches!(it.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && it.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        Ok(())
    } else {
        Err("the name must match [A-Za-z_][A-Za-z0-9_]*".to_owned())
    }
}

/// Names a secret may not take: the run sets them itself (trust files, the proxy), or a placeholder in them would
/// break every process (the search path, the loader).
const RESERVED_SECRET_NAMES: &[&str] = &[
    "PATH",
    "HOME",
    "SHELL",
    "USER",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "SSL_CERT_FILE",
    "NIX_SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "PIP_CERT",
    "AWS_CA_BUNDLE",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
    "NODE_EXTRA_CA_CERTS",
    "DENO_CERT",
];

/// Validates a secret's name (a `sandbox.secrets` key or an operator's `--secret NAME`): an environment
/// variable name of at most 128 characters, outside the `ITERION_` namespace, not a proxy variable and not one
/// of the names the run reserves.
pub fn validate_secret_name(name: &str) -> Result<(), String> {
    validate_env_name(name)?;
    if name.len() > 128 {
        return Err("longer than 128 characters".to_owned());
    }
    let upper = name.to_ascii_uppercase();
    if upper.starts_with("ITERION_") {
        return Err("the ITERION_ namespace is iterion's own".to_owned());
    }
    if upper.ends_with("_PROXY") {
        return Err("proxy variables are set by the run".to_owned());
    }
    if RESERVED_SECRET_NAMES.contains(&upper.as_str()) {
        return Err("the run sets this variable itself".to_owned());
    }
    Ok(())
}

/// Validates a host a secret is bound to: a host-name pattern of the network rules (`api.github.com`,
/// `**.github.com`, with an optional `:port`) or one IP address (with an optional `:port`); never a negation,
/// an address range, a scheme or a path.
pub fn validate_secret_host(text: &str) -> Result<(), String> {
    if text.contains("://") || text.contains('/') {
        return Err("a host pattern, not a URL or an address range (no scheme, no '/')".to_owned());
    }
    match iterion_netpolicy::Rule::parse(text) {
        Ok(r) if r.negated() => Err("a negated pattern cannot receive a secret".to_owned()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Validates an environment value: no NUL, CR or LF. The reason never quotes the value.
pub fn validate_env_value(value: &str) -> Result<(), String> {
    if value.contains('\0') {
        Err("the value contains a NUL character".to_owned())
    } else if value.contains('\r') || value.contains('\n') {
        Err("the value contains a line break".to_owned())
    } else {
        Ok(())
    }
}

/// Validates one environment entry (name, then value).
pub fn validate_env_entry(name: &str, value: &str) -> Result<(), String> {
    validate_env_name(name)?;
    validate_env_value(value)
}

/// Validates a build path (`dockerfile` or `context`, 01 §8.10): relative, no `..` that leaves the base
/// directory, no leading `-`, no control character. Returns the path with `.` components and duplicate
/// slashes removed and `..` folded (`"."` for the base itself).
pub fn validate_build_path(p: &str) -> Result<String, String> {
    if p.is_empty() {
        return Err("empty path".to_owned());
    }
    if p.starts_with('-') {
        return Err("must not start with '-'".to_owned());
    }
    if has_control(p) {
        return Err("contains a control character".to_owned());
    }
    if p.starts_with('/') {
        return Err("must be a relative path".to_owned());
    }
    let mut parts: Vec<&str> = Vec::new();
    for comp in p.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err("leaves the base directory".to_owned());
                }
            }
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        Ok(".".to_owned())
    } else {
        Ok(parts.join("/"))
    }
}

/// Validates a container workspace folder: absolute, no control character, no `,`.
pub fn validate_workspace_folder(p: &str) -> Result<(), String> {
    if !p.starts_with('/') {
        Err("must be an absolute path".to_owned())
    } else if has_control(p) {
        Err("contains a control character".to_owned())
    } else if p.contains(',') {
        Err("must not contain ','".to_owned())
    } else {
        Ok(())
    }
}

/// Validates an OCI image reference as far as 01 §6.3 asks: non-empty, no leading `-`, no whitespace or
/// control character.
pub fn validate_image(image: &str) -> Result<(), String> {
    if image.is_empty() {
        Err("empty image reference".to_owned())
    } else if image.starts_with('-') {
        Err("must not start with '-'".to_owned())
    } else if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Err("contains whitespace or a control character".to_owned())
    } else {
        Ok(())
    }
}

/// Validates a build argument name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn validate_build_arg_name(name: &str) -> Result<(), String> {
    validate_env_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_round_trips() {
        for text in [
            "type=bind,source=/a,target=/b,readonly",
            "type=volume,source=cargo,target=/c,volume-nocopy,volume-opt=size=1",
            "type=tmpfs,target=/t,tmpfs-size=1024,tmpfs-mode=1777",
            "type=bind,\"source=/a,b\",target=/c",
        ] {
            let m = parse_mount(text).unwrap();
            assert_eq!(m.to_string(), text);
            assert_eq!(parse_mount(&m.to_string()), Ok(m));
        }
    }
}
