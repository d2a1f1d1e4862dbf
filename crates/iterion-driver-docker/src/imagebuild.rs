//! Build from a Dockerfile through the engine API (03 §6): containment, a deterministic context archive
//! streamed to the engine (`.dockerignore` honoured, symlinks never followed), the classic builder request or
//! the BuildKit one (with its session, [`crate::buildkit`]), a 4 KiB output tail and a bound.

use crate::auth::Credentials;
use crate::buildkit;
use crate::dockerfile::{self, BaseImage, Refusal};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::image;
use bollard::query_parameters::{BuildImageOptionsBuilder, BuilderVersion};
use bytes::Bytes;
use futures::StreamExt;
pub use iterion_driver::BuildNetwork;
use iterion_driver::{BuilderKind, SecretBytes};
use iterion_spec::source::{FileRead, MAX_FILE_BYTES, read_regular};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Bytes of build output kept for the error message.
pub const TAIL_BYTES: usize = 4096;

/// One `.dockerignore` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    negate: bool,
    pattern: Vec<u8>,
}

/// `.dockerignore` rules with the engine's semantics (03 §6 step 2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DockerIgnore {
    rules: Vec<Rule>,
}

fn clean(p: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out.join("/")
}

impl DockerIgnore {
    /// Parses the text of a `.dockerignore` file.
    pub fn parse(text: &str) -> Self {
        let mut rules = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (negate, pat) = match line.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, line),
            };
            let pat = clean(pat.trim_start_matches('/'));
            if pat.is_empty() {
                continue;
            }
            rules.push(Rule {
                negate,
                pattern: pat.into_bytes(),
            });
        }
        Self { rules }
    }

    /// Whether the relative path `rel` (components separated by `/`) is excluded. A rule matches a path
    /// when it matches the path itself or one of its parent directories; the last matching rule wins.
    pub fn excluded(&self, rel: &str) -> bool {
        let mut excluded = false;
        for r in &self.rules {
            let mut matched = false;
            let mut end = 0;
            let bytes = rel.as_bytes();
            loop {
                let next = bytes[end..].iter().position(|b| *b == b'/').map(|i| end + i);
                let prefix = &bytes[..next.unwrap_or(bytes.len())];
                if glob(&r.pattern, prefix) {
                    matched = true;
                    break;
                }
                match next {
                    Some(i) => end = i + 1,
                    None => break,
                }
            }
            if matched {
                excluded = !r.negate;
            }
        }
        excluded
    }
}

/// Glob match of `p` against `s`: `*` and `?` stay within one component, `**` spans directories, `[...]`
/// classes (`^` or `!` negates), `\` escapes.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    if p.is_empty() {
        return s.is_empty();
    }
    if p.starts_with(b"**") {
        let mut rest = &p[2..];
        if rest.first() == Some(&b'/') {
            rest = &rest[1..];
            // `**/x` matches `x` at any depth, including zero.
            if glob(rest, s) {
                return true;
            }
            for (i, b) in s.iter().enumerate() {
                if *b == b'/' && glob(rest, &s[i + 1..]) {
                    return true;
                }
            }
            return false;
        }
        return (0..=s.len()).any(|i| glob(rest, &s[i..]));
    }
    match p[0] {
        b'*' => {
            let rest = &p[1..];
            for i in 0..=s.len() {
                if glob(rest, &s[i..]) {
                    return true;
                }
                if i < s.len() && s[i] == b'/' {
                    break;
                }
            }
            false
        }
        b'?' => !s.is_empty() && s[0] != b'/' && glob(&p[1..], &s[1..]),
        b'[' => {
            let Some(c) = s.first().copied() else { return false };
            if c == b'/' {
                return false;
            }
            let mut i = 1;
            let neg = matches!(p.get(1), Some(b'^' | b'!'));
            if neg {
                i += 1;
            }
            let mut hit = false;
            let mut first = true;
            while i < p.len() && (first || p[i] != b']') {
                first = false;
                let lo = p[i];
                if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|b| *b != b']') {
                    let hi = p[i + 2];
                    hit |= lo <= c && c <= hi;
                    i += 3;
                } else {
                    hit |= lo == c;
                    i += 1;
                }
            }
            if i >= p.len() {
                return false; // unterminated class matches nothing
            }
            hit != neg && glob(&p[i + 1..], &s[1..])
        }
        b'\\' if p.len() > 1 => !s.is_empty() && s[0] == p[1] && glob(&p[2..], &s[1..]),
        c => !s.is_empty() && s[0] == c && glob(&p[1..], &s[1..]),
    }
}

/// One entry of the context archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextEntry {
    /// A directory.
    Dir {
        /// Archive name.
        name: String,
        /// Permission bits.
        mode: u32,
        /// Modification time (Unix seconds).
        mtime: u64,
    },
    /// A regular file (hard links are stored as regular files).
    File {
        /// Archive name.
        name: String,
        /// Host path to read.
        source: PathBuf,
        /// Permission bits.
        mode: u32,
        /// Modification time.
        mtime: u64,
        /// Size.
        size: u64,
    },
    /// A symbolic link, stored as a link (never followed).
    Symlink {
        /// Archive name.
        name: String,
        /// Link target as stored.
        target: Vec<u8>,
        /// Modification time.
        mtime: u64,
    },
}

impl ContextEntry {
    /// The archive name.
    pub fn name(&self) -> &str {
        match self {
            Self::Dir { name, .. } | Self::File { name, .. } | Self::Symlink { name, .. } => name,
        }
    }
}

fn io_err(what: &'static str, p: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = p.display().to_string();
    move |source| Error::Io { what, path, source }
}

/// Lists the context: sorted by path bytes, `.dockerignore` applied (the Dockerfile and `.dockerignore`
/// always kept), sockets, FIFOs and devices skipped. `dockerfile_rel` is the Dockerfile's name inside the
/// context when it lies there.
pub fn context_entries(context: &Path, dockerfile_rel: Option<&str>) -> Result<Vec<ContextEntry>> {
    context_entries_excluding(context, dockerfile_rel, &[])
}

/// [`context_entries`] without the subtrees `excluded` (paths relative to the context, `/`-separated): the run
/// store when it lies inside the context, whose records are never sent to the engine (they change on every
/// run, and a `COPY .` would put them in the image).
pub fn context_entries_excluding(
    context: &Path,
    dockerfile_rel: Option<&str>,
    excluded: &[String],
) -> Result<Vec<ContextEntry>> {
    let ignore_path = context.join(".dockerignore");
    let ignore = match read_regular(&ignore_path, MAX_FILE_BYTES) {
        FileRead::Found(t) => DockerIgnore::parse(&String::from_utf8_lossy(&t)),
        FileRead::NotFound => DockerIgnore::default(),
        other => {
            return Err(io_err("read", &ignore_path)(std::io::Error::other(
                other.to_string(),
            )));
        }
    };
    let mut out = Vec::new();
    let mut stack = vec![(context.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let rd = std::fs::read_dir(&dir).map_err(io_err("read directory", &dir))?;
        for e in rd {
            let e = e.map_err(io_err("read directory", &dir))?;
            let name = e.file_name();
            let Some(name) = name.to_str() else {
                continue; // non-UTF-8 names cannot be named in a Dockerfile either
            };
            let child_rel = if rel.is_empty() {
                name.to_string()
            } else {
                format!("{rel}/{name}")
            };
            if excluded.contains(&child_rel) {
                continue;
            }
            let path = e.path();
            let md = std::fs::symlink_metadata(&path).map_err(io_err("stat", &path))?;
            let always = child_rel == ".dockerignore" || Some(child_rel.as_str()) == dockerfile_rel;
            let excluded = !always && ignore.excluded(&child_rel);
            let ft = md.file_type();
            let mtime = u64::try_from(md.mtime()).unwrap_or(0);
            let mode = md.permissions().mode() & 0o7777;
            if ft.is_dir() {
                // Walk excluded directories too: a later `!` rule may re-include something inside.
                stack.push((path.clone(), child_rel.clone()));
                if !excluded {
                    out.push(ContextEntry::Dir {
                        name: child_rel,
                        mode,
                        mtime,
                    });
                }
            } else if excluded {
                continue;
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&path).map_err(io_err("read link", &path))?;
                out.push(ContextEntry::Symlink {
                    name: child_rel,
                    target: target.as_os_str().as_bytes().to_vec(),
                    mtime,
                });
            } else if ft.is_file() {
                out.push(ContextEntry::File {
                    name: child_rel,
                    source: path,
                    mode,
                    mtime,
                    size: md.len(),
                });
            }
        }
    }
    out.sort_by(|a, b| a.name().as_bytes().cmp(b.name().as_bytes()));
    Ok(out)
}

fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body_len = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut n = body_len + 1;
    loop {
        let total = body_len + n.to_string().len();
        if total == n {
            break;
        }
        n = total;
    }
    let mut rec = format!("{n} {key}=").into_bytes();
    rec.extend_from_slice(value);
    rec.push(b'\n');
    rec
}

fn set_raw_name(h: &mut tar::Header, name: &[u8]) {
    let field = &mut h.as_old_mut().name;
    field.fill(0);
    let n = name.len().min(field.len());
    field[..n].copy_from_slice(&name[..n]);
}

fn append_entry<W: Write>(b: &mut tar::Builder<W>, entry: &ContextEntry) -> std::io::Result<()> {
    let mut h = tar::Header::new_ustar();
    h.set_uid(0);
    h.set_gid(0);
    let (name, link): (Vec<u8>, Option<&[u8]>) = match entry {
        ContextEntry::Dir { name, mode, mtime } => {
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(*mode);
            h.set_mtime(*mtime);
            h.set_size(0);
            (format!("{name}/").into_bytes(), None)
        }
        ContextEntry::File {
            name,
            mode,
            mtime,
            size,
            ..
        } => {
            h.set_entry_type(tar::EntryType::Regular);
            h.set_mode(*mode);
            h.set_mtime(*mtime);
            h.set_size(*size);
            (name.clone().into_bytes(), None)
        }
        ContextEntry::Symlink { name, target, mtime } => {
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_mode(0o777);
            h.set_mtime(*mtime);
            h.set_size(0);
            (name.clone().into_bytes(), Some(target.as_slice()))
        }
    };
    let mut pax = Vec::new();
    if name.len() > 100 {
        pax.extend(pax_record("path", &name));
    }
    if let Some(l) = link {
        if l.len() > 100 {
            pax.extend(pax_record("linkpath", l));
        }
        let field = &mut h.as_old_mut().linkname;
        field.fill(0);
        let n = l.len().min(field.len());
        field[..n].copy_from_slice(&l[..n]);
    }
    if !pax.is_empty() {
        let mut ph = tar::Header::new_ustar();
        ph.set_entry_type(tar::EntryType::XHeader);
        set_raw_name(&mut ph, b"././@PaxHeader");
        ph.set_mode(0o644);
        ph.set_size(pax.len() as u64);
        ph.set_mtime(0);
        ph.set_cksum();
        b.append(&ph, pax.as_slice())?;
    }
    set_raw_name(&mut h, &name);
    h.set_cksum();
    match entry {
        ContextEntry::File { source, size, .. } => {
            // Never blocks: a context file swapped for a FIFO after listing is refused, not waited on.
            let (f, _) = iterion_spec::source::open_regular(source)
                .map_err(|e| std::io::Error::other(format!("{}: {e}", source.display())))?;
            // A file that changed size while archiving: read exactly the recorded size (padded by tar).
            let mut r = std::io::Read::take(f, *size);
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut r, &mut buf)?;
            buf.resize(usize::try_from(*size).unwrap_or(buf.len()), 0);
            b.append(&h, buf.as_slice())
        }
        _ => b.append(&h, std::io::empty()),
    }
}

/// Writes the context archive for `entries` (plus an extra Dockerfile entry) to `w`.
pub fn write_context<W: Write>(
    w: W,
    entries: &[ContextEntry],
    extra: Option<(&str, &[u8])>,
) -> std::io::Result<W> {
    write_context_with(w, entries, extra.as_slice())
}

/// [`write_context`] with any number of extra files (name, bytes), written after the entries.
fn write_context_with<W: Write>(
    w: W,
    entries: &[ContextEntry],
    extras: &[(&str, &[u8])],
) -> std::io::Result<W> {
    let mut b = tar::Builder::new(w);
    for e in entries {
        append_entry(&mut b, e)?;
    }
    for &(name, data) in extras {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(data.len() as u64);
        set_raw_name(&mut h, name.as_bytes());
        h.set_cksum();
        b.append(&h, data)?;
    }
    b.into_inner()
}

/// Canonicalises `p` and checks it lies inside `root` (already canonical).
pub fn contained(p: &Path, root: &Path, field: &str) -> Result<PathBuf> {
    let c = std::fs::canonicalize(p).map_err(|e| Error::InvalidSpec {
        field: field.to_string(),
        reason: format!("{}: {e}", p.display()),
    })?;
    if !c.starts_with(root) {
        return Err(Error::InvalidSpec {
            field: field.to_string(),
            reason: format!("resolves outside {}", root.display()),
        });
    }
    Ok(c)
}

/// What to build.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BuildInput {
    /// Absolute host path of the Dockerfile.
    pub dockerfile: PathBuf,
    /// Absolute host path of the context directory.
    pub context: PathBuf,
    /// Root both must lie in (repository root or run workspace root).
    pub root: PathBuf,
    /// Build target stage.
    pub target: Option<String>,
    /// Build arguments.
    pub args: BTreeMap<String, String>,
    /// Tag to give the image.
    pub tag: String,
    /// Labels of the image besides iterion's build labels (owner, cache key).
    pub labels: BTreeMap<String, String>,
    /// Host directories never sent to the engine when they lie inside the context (the run store).
    pub exclude: Vec<PathBuf>,
    /// Run id (label).
    pub run_id: String,
    /// `pull=1` (pull policy always); never sent with [`BuildNetwork::None`].
    pub pull: bool,
    /// The network of the build: with [`BuildNetwork::None`] the Dockerfile is checked first (nothing the
    /// engine would fetch itself, every base image present) and its `RUN` steps get `networkmode=none`.
    pub network: BuildNetwork,
    /// Bound of the whole build.
    pub timeout: Duration,
    /// The builder.
    pub builder: BuilderKind,
    /// Build secrets by id (BuildKit only; served through the build session).
    pub secrets: BTreeMap<String, SecretBytes>,
    /// Registry credentials of the base images the build pulls.
    pub credentials: Credentials,
}

impl BuildInput {
    /// A build of `dockerfile` in `context`, contained in `root`, tagged `tag`.
    pub fn new(dockerfile: PathBuf, context: PathBuf, root: PathBuf, tag: String, run_id: String) -> Self {
        Self {
            dockerfile,
            context,
            root,
            target: None,
            args: BTreeMap::new(),
            tag,
            labels: BTreeMap::new(),
            exclude: Vec::new(),
            run_id,
            pull: false,
            network: BuildNetwork::None,
            timeout: Duration::from_secs(30 * 60),
            builder: BuilderKind::Classic,
            secrets: BTreeMap::new(),
            credentials: Credentials::none(),
        }
    }
}

/// A ring of the last [`TAIL_BYTES`] bytes of output.
#[derive(Debug, Default)]
struct Tail {
    buf: VecDeque<u8>,
    truncated: bool,
}

impl Tail {
    fn push(&mut self, s: &str) {
        self.buf.extend(s.as_bytes());
        while self.buf.len() > TAIL_BYTES {
            self.buf.pop_front();
            self.truncated = true;
        }
    }
    fn text(&self) -> String {
        let v: Vec<u8> = self.buf.iter().copied().collect();
        let s = String::from_utf8_lossy(&v).into_owned();
        if self.truncated { format!("...{s}") } else { s }
    }
}

struct ChanWriter(tokio::sync::mpsc::Sender<Bytes>);

impl Write for ChanWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.blocking_send(Bytes::copy_from_slice(buf)).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the engine stopped reading the build context",
            )
        })?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes of Dockerfile the check before a build without network reads; a larger Dockerfile is refused.
pub const MAX_DOCKERFILE_BYTES: u64 = 1024 * 1024;

/// Before a build without network: refuses the Dockerfile when a line would make the engine fetch something
/// itself (a remote `ADD`, a base image it would pull because it is absent), naming the line.
pub async fn check_offline(
    engine: &Engine,
    dockerfile: &Path,
    display: &str,
    args: &BTreeMap<String, String>,
) -> Result<()> {
    let refuse = |r: Refusal| Error::BuildRefused {
        dockerfile: display.to_owned(),
        line: r.line,
        reason: r.reason,
    };
    let f = std::fs::File::open(dockerfile).map_err(io_err("read", dockerfile))?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_DOCKERFILE_BYTES + 1), &mut bytes)
        .map_err(io_err("read", dockerfile))?;
    if bytes.len() as u64 > MAX_DOCKERFILE_BYTES {
        return Err(refuse(Refusal {
            line: 1,
            reason: format!(
                "the Dockerfile is larger than {MAX_DOCKERFILE_BYTES} bytes and cannot be checked before a build \
                 without network"
            ),
        }));
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut bases = HashMap::new();
    for img in dockerfile::from_images(&text, args) {
        if let Some(l) = image::inspect(engine, &img.reference).await? {
            bases.insert(
                img.reference,
                BaseImage {
                    env: l.env,
                    onbuild: l.onbuild,
                    os: l.os,
                    arch: l.arch,
                },
            );
        }
    }
    let copies = dockerfile::offline_plan(&text, args, &bases).map_err(refuse)?;
    for c in copies {
        if image::inspect(engine, &c.reference).await?.is_none() {
            return Err(refuse(Refusal {
                line: c.line,
                reason: format!(
                    "COPY --from={}: the image is not present on this host, and the build has no network to \
                     pull it; a pull would leave outside the run's network policy (make the image present on this \
                     host first, or run with network mode open)",
                    c.reference
                ),
            }));
        }
    }
    Ok(())
}

/// A build whose paths were checked (and, without network, whose Dockerfile was), with its context listed:
/// what the engine will receive, so the cache key can be computed from the same entries.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The canonical context directory.
    pub context: PathBuf,
    /// The Dockerfile as the request names it.
    pub display: String,
    /// The Dockerfile's name inside the archive.
    pub dockerfile_name: String,
    /// The Dockerfile added to the archive when it lies outside the context (name, bytes).
    pub extra: Option<(String, Vec<u8>)>,
    /// The context entries, sorted, `.dockerignore` applied.
    pub entries: Vec<ContextEntry>,
}

/// Checks containment, then (for a build without network) the Dockerfile, and lists the context. Every check
/// of a build runs here, before any cache lookup.
pub async fn plan(engine: &Engine, input: &BuildInput) -> Result<Planned> {
    let root = std::fs::canonicalize(&input.root).map_err(io_err("canonicalize", &input.root))?;
    let context = contained(&input.context, &root, "build.context")?;
    let dockerfile = contained(&input.dockerfile, &root, "build.dockerfile")?;
    let display = input.dockerfile.display().to_string();
    let (dockerfile_name, extra) = match dockerfile.strip_prefix(&context) {
        Ok(rel) => (rel.to_string_lossy().into_owned(), None),
        Err(_) => {
            let data = read_regular(&dockerfile, MAX_FILE_BYTES)
                .into_bytes()
                .map_err(|e| io_err("read", &dockerfile)(std::io::Error::other(e)))?;
            let name = format!(
                ".iterion/Dockerfile.{}",
                &hex::encode(Sha256::digest(&data))[..16]
            );
            (name.clone(), Some((name, data)))
        }
    };
    if input.network == BuildNetwork::None {
        check_offline(engine, &dockerfile, &display, &input.args).await?;
        if input.builder == BuilderKind::BuildKit {
            let text = read_regular(&dockerfile, MAX_FILE_BYTES)
                .into_bytes()
                .map_err(|e| io_err("read", &dockerfile)(std::io::Error::other(e)))?;
            if let Some(r) = buildkit::offline_refusal(&String::from_utf8_lossy(&text)) {
                return Err(Error::BuildRefused {
                    dockerfile: display,
                    line: r.line,
                    reason: r.reason,
                });
            }
        }
    }
    let excluded: Vec<String> = input
        .exclude
        .iter()
        .filter_map(|x| std::fs::canonicalize(x).ok())
        .filter_map(|x| {
            x.strip_prefix(&context)
                .ok()
                .map(|r| r.to_string_lossy().into_owned())
        })
        .filter(|r| !r.is_empty())
        .collect();
    let entries = context_entries_excluding(
        &context,
        extra.is_none().then_some(dockerfile_name.as_str()),
        &excluded,
    )?;
    Ok(Planned {
        context,
        display,
        dockerfile_name,
        extra,
        entries,
    })
}

/// Builds the image and returns its tag. Progress lines go to `progress`.
pub async fn build(
    engine: &Engine,
    input: &BuildInput,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<String> {
    let planned = plan(engine, input).await?;
    build_planned(engine, input, planned, progress).await
}

/// Sends a planned build to the engine, tagged `input.tag` and labelled with `input.labels` plus iterion's
/// build labels.
pub async fn build_planned(
    engine: &Engine,
    input: &BuildInput,
    planned: Planned,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<String> {
    if input.builder == BuilderKind::BuildKit {
        return build_buildkit(engine, input, planned, progress).await;
    }
    if !input.secrets.is_empty() {
        return Err(Error::Unsupported {
            driver: engine.facts().driver_name(),
            feature: "build secrets with the classic builder (they need BuildKit)".into(),
        });
    }
    let registry_config = registry_config(engine, input, &planned).await?;
    let Planned {
        context,
        display: df_display,
        dockerfile_name: df_name,
        extra,
        entries,
    } = planned;
    // The classic builder turns every `labels` entry into a step of its own (an intermediate container each):
    // the labels go in as one LABEL line appended to a copy of the Dockerfile instead, where that is exact.
    // The copy is named by the archive's `.dockerignore`, so the engine drops it from the context once it has
    // read it (as it does with an excluded Dockerfile): a `COPY .` never puts it in the image.
    let (df_name, extras, entries, labels) = match one_label_step(&context, &df_name, extra.as_ref(), input) {
        Some((name, text)) => match ignore_naming(&context, &entries, &name) {
            Some(ignore) => {
                let entries: Vec<ContextEntry> = entries
                    .into_iter()
                    .filter(|e| e.name() != ".dockerignore")
                    .collect();
                let extras = vec![(name.clone(), text), (".dockerignore".to_owned(), ignore)];
                (name, extras, entries, HashMap::new())
            }
            None => (df_name, extra.into_iter().collect(), entries, build_labels(input)),
        },
        None => (df_name, extra.into_iter().collect(), entries, build_labels(input)),
    };
    let offline = input.network == BuildNetwork::None;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let producer = tokio::task::spawn_blocking(move || {
        let w = ChanWriter(tx);
        let extras: Vec<(&str, &[u8])> = extras.iter().map(|(n, d)| (n.as_str(), d.as_slice())).collect();
        write_context_with(w, &entries, &extras).map(|_| ())
    });
    let body = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));

    let buildargs: HashMap<String, String> = input.args.clone().into_iter().collect();
    let mut opts = BuildImageOptionsBuilder::default()
        .t(&input.tag)
        .dockerfile(&df_name)
        .buildargs(&buildargs)
        .labels(&labels)
        .rm(true)
        .forcerm(true)
        .pull(if input.pull && !offline { "1" } else { "" })
        .version(BuilderVersion::BuilderV1);
    if offline {
        opts = opts.networkmode("none");
    }
    if let Some(t) = &input.target {
        opts = opts.target(t);
    }
    let opts = opts.build();
    let work = async {
        let mut tail = Tail::default();
        let mut stream = engine
            .docker
            .build_image(opts, registry_config, Some(bollard::body_stream(body)));
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(s) = info.stream.as_deref().or(info.status.as_deref()) {
                        tail.push(s);
                        for line in s.lines().filter(|l| !l.trim().is_empty()) {
                            progress(line);
                        }
                    }
                }
                Err(e) => {
                    let message = match e {
                        bollard::errors::Error::DockerStreamError { error } => error,
                        bollard::errors::Error::DockerResponseServerError { message, .. } => message,
                        other => other.to_string(),
                    };
                    return Err(Error::BuildFailed {
                        dockerfile: df_display.clone(),
                        message,
                        tail: tail.text(),
                    });
                }
            }
        }
        Ok(())
    };
    let res = match tokio::time::timeout(input.timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(Error::SetupTimeout {
            phase: "build",
            after: input.timeout,
        }),
    };
    match producer.await {
        Ok(Err(e)) if res.is_ok() => return Err(io_err("archive build context", &context)(e)),
        _ => {}
    }
    res.map(|()| input.tag.clone())
}

/// `X-Registry-Config` of a classic build: the credentials of the registries the Dockerfile's `FROM` lines
/// name, only when the build would pull (with network, and `pull=1` or a base image absent here).
async fn registry_config(
    engine: &Engine,
    input: &BuildInput,
    planned: &Planned,
) -> Result<Option<HashMap<String, bollard::auth::DockerCredentials>>> {
    if input.network == BuildNetwork::None {
        return Ok(None);
    }
    let text = match &planned.extra {
        Some((_, data)) => String::from_utf8_lossy(data).into_owned(),
        None => match read_regular(&planned.context.join(&planned.dockerfile_name), MAX_FILE_BYTES) {
            FileRead::Found(b) => String::from_utf8_lossy(&b).into_owned(),
            _ => return Ok(None),
        },
    };
    let mut registries: Vec<String> = Vec::new();
    for img in dockerfile::from_images(&text, &input.args) {
        if input.pull || image::inspect(engine, &img.reference).await?.is_none() {
            let r = image::ImageRef::parse(&img.reference).domain;
            if !registries.contains(&r) {
                registries.push(r);
            }
        }
    }
    let mut out = HashMap::new();
    for r in registries {
        if let Some(a) = input.credentials.lookup(&r).await {
            let server = crate::auth::helper_server(&r);
            out.insert(
                server.clone(),
                bollard::auth::DockerCredentials {
                    username: a.username.clone(),
                    password: a.password.clone(),
                    identitytoken: a.identity_token.clone(),
                    serveraddress: Some(server),
                    ..Default::default()
                },
            );
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// A copy of the Dockerfile with `labels` as one `LABEL` line at its end (its name in the archive, at its root so
/// that no directory is left behind once the engine drops it, and its bytes),
/// for the classic builder, which makes one step per label it is given. `None` where the copy would not mean
/// the same: a `target` (the labels belong to that stage, not to the last), an `escape` parser directive (the
/// quoting below assumes `\`), or a Dockerfile that cannot be read.
fn one_label_step(
    context: &Path,
    dockerfile_name: &str,
    extra: Option<&(String, Vec<u8>)>,
    input: &BuildInput,
) -> Option<(String, Vec<u8>)> {
    if input.target.is_some() {
        return None;
    }
    let mut text = match extra {
        Some((_, data)) => data.clone(),
        None => read_regular(&context.join(dockerfile_name), MAX_FILE_BYTES)
            .into_bytes()
            .ok()?,
    };
    if has_escape_directive(&text) {
        return None;
    }
    let labels: BTreeMap<String, String> = build_labels(input).into_iter().collect();
    if !text.ends_with(b"\n") {
        text.push(b'\n');
    }
    text.extend_from_slice(b"LABEL");
    for (k, v) in &labels {
        text.extend_from_slice(format!(" \"{}\"=\"{}\"", label_quote(k), label_quote(v)).as_bytes());
    }
    text.push(b'\n');
    let name = format!(
        ".iterion.Dockerfile.{}",
        &hex::encode(Sha256::digest(&text))[..16]
    );
    Some((name, text))
}

/// The `.dockerignore` the archive carries with the Dockerfile copy `copy`: the context's own (when the archive
/// holds it) with a last line naming the copy, or, without one, a file naming the copy and itself (so that
/// neither reaches the image, as no `.dockerignore` would). `None` when the context's cannot be read, or does
/// not exclude itself (a `COPY .` would then put the added line in the image).
fn ignore_naming(context: &Path, entries: &[ContextEntry], copy: &str) -> Option<Vec<u8>> {
    if entries.iter().any(|e| e.name() == ".dockerignore") {
        let mut text = read_regular(&context.join(".dockerignore"), MAX_FILE_BYTES)
            .into_bytes()
            .ok()?;
        if !DockerIgnore::parse(&String::from_utf8_lossy(&text)).excluded(".dockerignore") {
            return None;
        }
        if !text.is_empty() && !text.ends_with(b"\n") {
            text.push(b'\n');
        }
        text.extend_from_slice(format!("{copy}\n").as_bytes());
        Some(text)
    } else {
        Some(format!("{copy}\n.dockerignore\n").into_bytes())
    }
}

/// `s` inside a double-quoted Dockerfile word: `\`, `"` and `$` escaped (no variable is expanded), a line break
/// as a space.
fn label_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '"' | '$' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Whether the Dockerfile's parser directives (comment lines at its top) set `escape`.
fn has_escape_directive(text: &[u8]) -> bool {
    String::from_utf8_lossy(text)
        .lines()
        .map(str::trim)
        .take_while(|l| l.starts_with('#'))
        .any(|l| {
            l.trim_start_matches('#')
                .split('=')
                .next()
                .is_some_and(|k| k.trim().eq_ignore_ascii_case("escape"))
        })
}

/// The labels of a built image: the caller's plus iterion's build labels.
fn build_labels(input: &BuildInput) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = input.labels.clone().into_iter().collect();
    labels.insert("iterion.io/managed".into(), "true".into());
    labels.insert("iterion.io/component".into(), "build".into());
    labels.insert(
        "iterion.io/run-id".into(),
        crate::names::label_value(&input.run_id),
    );
    labels
}

/// The query of a BuildKit build request.
fn buildkit_query(input: &BuildInput, dockerfile_name: &str, session: &str) -> String {
    let to_json = |m: &HashMap<String, String>| serde_json::to_string(m).unwrap_or_else(|_| "{}".into());
    let args: HashMap<String, String> = input.args.clone().into_iter().collect();
    let offline = input.network == BuildNetwork::None;
    let mut q = vec![
        ("t", input.tag.clone()),
        ("dockerfile", dockerfile_name.to_owned()),
        ("buildargs", to_json(&args)),
        ("labels", to_json(&build_labels(input))),
        ("rm", "1".into()),
        ("forcerm", "1".into()),
        ("pull", if input.pull && !offline { "1" } else { "0" }.into()),
        ("version", "2".into()),
        ("session", session.to_owned()),
    ];
    if offline {
        q.push(("networkmode", "none".into()));
    }
    if let Some(t) = &input.target {
        q.push(("target", t.clone()));
    }
    buildkit::request::query(&q)
}

/// Builds with BuildKit: opens the build session (secrets, registry credentials), sends `version=2` with the
/// streamed context, and reads the progress, the image id and the error from the answer.
async fn build_buildkit(
    engine: &Engine,
    input: &BuildInput,
    planned: Planned,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<String> {
    let Planned {
        context,
        display,
        dockerfile_name,
        extra,
        entries,
    } = planned;
    let failed = |message: String, tail: &Tail| Error::BuildFailed {
        dockerfile: display.clone(),
        message,
        tail: tail.text(),
    };
    let facts = engine.facts();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let work = async {
        let mut tail = Tail::default();
        // without network nothing is pulled: no registry credentials are served
        let credentials = match input.network {
            BuildNetwork::None => Credentials::none(),
            BuildNetwork::Open => input.credentials.clone(),
        };
        let served = buildkit::session::Served {
            secrets: input.secrets.clone(),
            credentials,
        };
        let session = buildkit::session::open(
            &facts.endpoint,
            &facts.api_version,
            served,
            Duration::from_secs(30),
        )
        .await
        .map_err(|e| failed(e.to_string(), &tail))?;
        let producer = tokio::task::spawn_blocking(move || {
            write_context(
                ChanWriter(tx),
                &entries,
                extra.as_ref().map(|(n, d)| (n.as_str(), d.as_slice())),
            )
            .map(|_| ())
        });
        let body = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let query = buildkit_query(input, &dockerfile_name, &session.id);
        let mut lines = buildkit::request::send(&facts.endpoint, &facts.api_version, &query, body)
            .await
            .map_err(|e| failed(e.to_string(), &tail))?;
        let mut parser = buildkit::stream::Parser::default();
        while let Some(line) = lines.next().await.map_err(|e| failed(e.to_string(), &tail))? {
            for item in parser.line(&line) {
                match item {
                    buildkit::stream::Item::Progress(p) => {
                        tail.push(&p);
                        tail.push("\n");
                        progress(&p);
                    }
                    buildkit::stream::Item::ImageId(_) => {}
                    buildkit::stream::Item::Error(m) => return Err(failed(m, &tail)),
                }
            }
        }
        drop(session);
        match producer.await {
            Ok(Err(e)) => Err(io_err("archive build context", &context)(e)),
            _ => Ok(()),
        }
    };
    match tokio::time::timeout(input.timeout, work).await {
        Ok(r) => r.map(|()| input.tag.clone()),
        Err(_) => Err(Error::SetupTimeout {
            phase: "build",
            after: input.timeout,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_quoted_for_one_label_line() {
        assert_eq!(label_quote(r#"a "b" \ $HOME"#), r#"a \"b\" \\ \$HOME"#);
        assert_eq!(label_quote("x\ny"), "x y");
        assert!(has_escape_directive(b"# escape=`\nFROM x\n"));
        assert!(has_escape_directive(b"# syntax=a\n#  ESCAPE = `\nFROM x\n"));
        assert!(!has_escape_directive(b"FROM x\n# escape=`\n"));
        assert!(!has_escape_directive(b"# a comment\nFROM x\n"));
    }

    fn check(ignore: &str, path: &str, excluded: bool) {
        assert_eq!(
            DockerIgnore::parse(ignore).excluded(path),
            excluded,
            "{ignore:?} vs {path}"
        );
    }

    #[test]
    fn dockerignore_semantics() {
        check("node_modules", "node_modules/x/y.js", true);
        check("*.log", "a.log", true);
        check("*.log", "dir/a.log", false);
        check("**/*.log", "dir/sub/a.log", true);
        check("**/*.log", "a.log", true);
        check("/build", "build/out", true);
        check("# comment\n\nsecret", "secret", true);
        check("*.md\n!README.md", "README.md", false);
        check("*.md\n!README.md", "CHANGES.md", true);
        check("docs/**", "docs/a/b", true);
        check("te?t", "test", true);
        check("te?t", "te/t", false);
        check("[a-c]x", "bx", true);
        check("[!a-c]x", "bx", false);
        check("./tmp/../cache", "cache/x", true);
        check("", "anything", false);
    }

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path();
        std::fs::create_dir_all(p.join("src/deep")).expect("mkdir");
        std::fs::create_dir_all(p.join("node_modules/m")).expect("mkdir");
        std::fs::write(p.join("Dockerfile"), "FROM x\n").expect("write");
        std::fs::write(p.join(".dockerignore"), "node_modules\n*.log\nDockerfile\n").expect("write");
        std::fs::write(p.join("src/deep/a.txt"), "a").expect("write");
        std::fs::write(p.join("b.log"), "b").expect("write");
        std::fs::write(p.join("node_modules/m/i.js"), "i").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", p.join("link")).expect("symlink");
        d
    }

    #[test]
    fn context_is_sorted_filtered_and_keeps_links() {
        let d = tree();
        let names: Vec<String> = context_entries(d.path(), Some("Dockerfile"))
            .expect("entries")
            .iter()
            .map(|e| e.name().to_string())
            .collect();
        assert_eq!(
            names,
            [
                ".dockerignore",
                "Dockerfile",
                "link",
                "src",
                "src/deep",
                "src/deep/a.txt"
            ]
        );
        let entries = context_entries(d.path(), Some("Dockerfile")).expect("entries");
        let a = write_context(Vec::new(), &entries, None).expect("tar");
        let b = write_context(Vec::new(), &entries, None).expect("tar");
        assert_eq!(a, b, "deterministic");
        let mut ar = tar::Archive::new(a.as_slice());
        for e in ar.entries().expect("entries") {
            let e = e.expect("entry");
            assert_eq!(e.header().uid().expect("uid"), 0);
            if e.path().expect("path").to_str() == Some("link") {
                assert_eq!(e.header().entry_type(), tar::EntryType::Symlink);
                assert_eq!(
                    e.link_name().expect("link").expect("some").to_str(),
                    Some("/etc/passwd")
                );
            }
        }
    }

    #[test]
    fn an_excluded_subtree_is_not_listed() {
        let d = tree();
        std::fs::create_dir_all(d.path().join(".iterion/runs/r1")).expect("mkdir");
        std::fs::write(d.path().join(".iterion/runs/r1/run.json"), "{}").expect("write");
        let names = |x: &[String]| -> Vec<String> {
            context_entries_excluding(d.path(), Some("Dockerfile"), x)
                .expect("entries")
                .iter()
                .map(|e| e.name().to_string())
                .collect()
        };
        assert!(names(&[]).contains(&".iterion/runs/r1/run.json".to_string()));
        let without = names(&[".iterion".to_string()]);
        assert!(!without.iter().any(|n| n.starts_with(".iterion")), "{without:?}");
        assert!(without.contains(&"src/deep/a.txt".to_string()));
    }

    #[test]
    fn long_names_use_pax_headers() {
        let d = tempfile::tempdir().expect("tempdir");
        let long = "d".repeat(120);
        std::fs::write(d.path().join(&long), "x").expect("write");
        let entries = context_entries(d.path(), None).expect("entries");
        let bytes = write_context(
            Vec::new(),
            &entries,
            Some((".iterion/Dockerfile.0123456789abcdef", b"FROM x\n")),
        )
        .expect("tar");
        let mut ar = tar::Archive::new(bytes.as_slice());
        let names: Vec<String> = ar
            .entries()
            .expect("entries")
            .map(|e| {
                e.expect("entry")
                    .path()
                    .expect("path")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, [long, ".iterion/Dockerfile.0123456789abcdef".to_string()]);
    }

    #[test]
    fn containment_refuses_symlinked_context_outside_root() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(d.path()).expect("canon");
        std::os::unix::fs::symlink("/etc", root.join("ctx")).expect("symlink");
        let e = contained(&root.join("ctx"), &root, "build.context").expect_err("outside");
        assert!(
            matches!(&e, Error::InvalidSpec { field, reason } if field == "build.context" && reason.starts_with("resolves outside")),
            "{e}"
        );
        std::fs::create_dir(root.join("in")).expect("mkdir");
        assert!(contained(&root.join("in"), &root, "build.context").is_ok());
    }

    #[test]
    fn pax_record_lengths_are_self_consistent() {
        for v in [1usize, 5, 89, 90, 95, 200, 995] {
            let r = pax_record("path", "x".repeat(v).as_bytes());
            let n: usize = String::from_utf8_lossy(&r)
                .split(' ')
                .next()
                .expect("len")
                .parse()
                .expect("num");
            assert_eq!(n, r.len());
        }
    }
}
