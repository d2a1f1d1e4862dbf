//! Attachments: files supplied at launch under a name the workflow declares (`attachments:`).
//!
//! 1. [`check_supplied`] — before the run record exists: every supplied name is declared, no name is given
//!    twice, every `required: true` attachment is supplied, every path is a readable regular file of at most
//!    [`MAX_BYTES`], whose sniffed MIME type ([`sniff_mime`]) the declaration's `accept_mime` accepts. The path
//!    is resolved one component at a time without following a symbolic link the repository controls, never
//!    into `/proc`, `/sys`, `/dev` or a pseudo file system, then opened with `O_NOFOLLOW | O_NONBLOCK` and
//!    checked on the open descriptor: its type, its file system, the kernel's name for it, and that name is no
//!    system, credential, data-dir or agent-home location ([`AttachmentBounds`]).
//! 2. [`stage`] then [`Staged::commit`] — at run creation: each file is copied (streamed, SHA-256 computed
//!    while copying) to `<run dir>/attachments/<name>/<file name>` next to a `meta.json`; files 0600,
//!    directories 0700. The copy is staged next to `runs/` first, so a source that changed since the check
//!    refuses the launch before the record exists; the commit is one rename into the new run directory.
//! 3. [`AttachmentValues`] — what `{{attachments.NAME[.path|.mime|.size|.sha256|.url]}}` renders to: the host
//!    path for host nodes, `/run/iterion/attachments/<name>/<file>` for nodes in a container (where the
//!    directory is bind-mounted read-only). `.url` is always empty (no server mints URLs), and a declared
//!    attachment that was not supplied renders empty; [`template_warnings`] says so once per run.
//!
//! ```
//! use iterion_runtime::attachments::{mime_accepted, sniff_mime};
//! assert_eq!(sniff_mime(b"%PDF-1.7\n"), "application/pdf");
//! assert_eq!(sniff_mime(b"hello\n"), "text/plain");
//! assert!(mime_accepted("image/png", &["image/*".to_string()]));
//! assert!(!mime_accepted("text/plain", &["application/pdf".to_string()]));
//! ```
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use iterion_spec::model::{LoopCap, Workflow};
use iterion_spec::template::placeholders;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::store::{AttachmentRecord, create_private_dir, names, validate_component, write_atomic};

mod source;

pub use source::AttachmentBounds;

/// Where the run's attachments directory is mounted (read-only) in containers.
pub const CONTAINER_DIR: &str = "/run/iterion/attachments";

/// The largest attachment accepted (1 GiB).
pub const MAX_BYTES: u64 = 1 << 30;

/// The sidecar file next to each stored attachment.
pub const META_JSON: &str = "meta.json";

/// Bytes the MIME sniffer reads.
const SNIFF_LEN: usize = 512;

fn invalid(name: &str, reason: impl Into<String>) -> Error {
    Error::InvalidAttachment {
        name: name.to_owned(),
        reason: reason.into(),
    }
}

/// Splits one `NAME=PATH` argument at its first `=`.
pub fn parse_attach(arg: &str) -> Result<(String, PathBuf)> {
    match arg.split_once('=') {
        Some((n, p)) if !n.is_empty() && !p.is_empty() => Ok((n.to_owned(), PathBuf::from(p))),
        _ => Err(invalid(arg, "expected NAME=PATH")),
    }
}

/// A supplied attachment that passed [`check_supplied`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedAttachment {
    /// The declared name.
    pub name: String,
    /// The base name of the path as given (the stored file's name).
    pub original_filename: String,
    /// The file, every symlink resolved.
    pub source: PathBuf,
    /// The sniffed MIME type.
    pub mime: String,
    /// Size when checked.
    pub size: u64,
    /// Device and inode of the checked file: the copy refuses another file at the same path.
    identity: (u64, u64),
}

/// The declared names, for messages.
fn declared_list(workflow: &Workflow) -> String {
    if workflow.attachments.is_empty() {
        format!("workflow '{}' declares no attachments", workflow.name.value)
    } else {
        let names: Vec<&str> = workflow
            .attachments
            .iter()
            .map(|a| a.name.value.as_str())
            .collect();
        format!(
            "workflow '{}' declares: {}",
            workflow.name.value,
            names.join(", ")
        )
    }
}

/// Checks the supplied `(NAME, PATH)` pairs against the workflow's declarations (relative paths are taken
/// from `base`), each path resolved within `bounds`. Every refusal is [`Error::InvalidAttachment`]; nothing
/// is created.
pub fn check_supplied(
    workflow: &Workflow,
    supplied: &[(String, PathBuf)],
    base: &Path,
    bounds: &AttachmentBounds,
) -> Result<Vec<CheckedAttachment>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (name, path) in supplied {
        let Some(decl) = workflow.attachments.iter().find(|a| a.name.value == *name) else {
            return Err(invalid(
                name,
                format!("not declared ({})", declared_list(workflow)),
            ));
        };
        if !seen.insert(name.as_str()) {
            return Err(invalid(name, "supplied more than once"));
        }
        // joined, not cleaned: `..` after a link is the link target's parent, as the kernel has it
        let abs = if path.is_absolute() {
            path.clone()
        } else {
            base.join(path)
        };
        let c = check_file(name, &abs, bounds)?;
        if !decl.accept_mime.is_empty() && !mime_accepted(&c.mime, &decl.accept_mime) {
            return Err(invalid(
                name,
                format!(
                    "{} is {}, which is not accepted (accept_mime: {})",
                    abs.display(),
                    c.mime,
                    decl.accept_mime.join(", ")
                ),
            ));
        }
        out.push(c);
    }
    check_complete(workflow, &out)?;
    Ok(out)
}

/// Checks a set of checked attachments against the workflow as a whole (a [`crate::lifecycle::Launch`] built
/// by hand): each name declared and given once, every `required: true` attachment present.
pub fn check_complete(workflow: &Workflow, checked: &[CheckedAttachment]) -> Result<()> {
    let mut seen = BTreeSet::new();
    for c in checked {
        if !workflow.attachments.iter().any(|a| a.name.value == c.name) {
            return Err(invalid(
                &c.name,
                format!("not declared ({})", declared_list(workflow)),
            ));
        }
        if !seen.insert(c.name.as_str()) {
            return Err(invalid(&c.name, "supplied more than once"));
        }
    }
    if let Some(missing) = workflow
        .attachments
        .iter()
        .find(|a| a.required && !seen.contains(a.name.value.as_str()))
    {
        let n = &missing.name.value;
        return Err(invalid(
            n,
            format!("required and not supplied (--attach {n}=PATH)"),
        ));
    }
    Ok(())
}

/// Opens a regular file without following a symlink and without blocking (a FIFO swapped in), and checks the
/// type of what was opened.
fn open_regular_nofollow(path: &Path) -> std::io::Result<(File, std::fs::Metadata)> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)?;
    let meta = f.metadata()?;
    Ok((f, meta))
}

fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// Reads up to [`SNIFF_LEN`] bytes from the start of `f`.
fn head(f: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(SNIFF_LEN);
    f.take(SNIFF_LEN as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

fn check_file(name: &str, abs: &Path, bounds: &AttachmentBounds) -> Result<CheckedAttachment> {
    let shown = abs.display();
    let original_filename = abs
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| invalid(name, format!("{shown} has no usable file name")))?
        .to_owned();
    validate_component("attachment file name", &original_filename)
        .map_err(|_| invalid(name, format!("{shown}: unusable file name '{original_filename}'")))?;
    let resolved = source::resolve(abs, bounds).map_err(|r| invalid(name, r))?;
    let source = resolved.path;
    // The type before opening (never open a device or a FIFO), and again on the descriptor.
    if !resolved.meta.is_file() {
        return Err(invalid(
            name,
            format!("{shown} is {}", kind_of(resolved.meta.file_type())),
        ));
    }
    let (mut f, meta) =
        open_regular_nofollow(&source).map_err(|e| invalid(name, format!("cannot read {shown}: {e}")))?;
    if !meta.is_file() {
        return Err(invalid(name, format!("{shown} is {}", kind_of(meta.file_type()))));
    }
    source::check_opened(&f, &meta, &source, bounds).map_err(|r| invalid(name, r))?;
    if meta.len() > MAX_BYTES {
        return Err(invalid(
            name,
            format!("{shown} is larger than 1 GiB ({} bytes)", meta.len()),
        ));
    }
    let bytes = head(&mut f).map_err(|e| invalid(name, format!("cannot read {shown}: {e}")))?;
    Ok(CheckedAttachment {
        name: name.to_owned(),
        original_filename,
        source,
        mime: sniff_mime(&bytes).to_owned(),
        size: meta.len(),
        identity: (meta.dev(), meta.ino()),
    })
}

/// The MIME type of content from its first bytes. Knows PDF, PNG, JPEG, GIF, WebP, TIFF, BMP, ICO, HEIC, AVIF,
/// MP4, ZIP, gzip, bzip2, xz, 7z, tar, ELF, WebAssembly, MP3, Ogg, FLAC, WAV, PostScript, RTF, SVG, HTML,
/// XML and JSON; other text (UTF-8 without NUL or control bytes besides tab, newlines, form feed and escape)
/// is `text/plain`; anything else `application/octet-stream`. An empty file is `text/plain`.
pub fn sniff_mime(b: &[u8]) -> &'static str {
    const MAGIC: &[(&[u8], &str)] = &[
        (b"%PDF-", "application/pdf"),
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
        (b"II*\x00", "image/tiff"),
        (b"MM\x00*", "image/tiff"),
        (b"\x00\x00\x01\x00", "image/x-icon"),
        (b"PK\x03\x04", "application/zip"),
        (b"PK\x05\x06", "application/zip"),
        (b"\x1f\x8b", "application/gzip"),
        (b"BZh", "application/x-bzip2"),
        (b"\xfd7zXZ\x00", "application/x-xz"),
        (b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed"),
        (b"\x7fELF", "application/x-executable"),
        (b"\x00asm", "application/wasm"),
        (b"ID3", "audio/mpeg"),
        (b"OggS", "application/ogg"),
        (b"fLaC", "audio/flac"),
        (b"%!PS", "application/postscript"),
        (b"{\\rtf", "application/rtf"),
    ];
    if let Some((_, m)) = MAGIC.iter().find(|(p, _)| b.starts_with(p)) {
        return m;
    }
    if b.len() >= 12 && &b[..4] == b"RIFF" {
        match &b[8..12] {
            b"WEBP" => return "image/webp",
            b"WAVE" => return "audio/wav",
            _ => {}
        }
    }
    if b.len() >= 12 && &b[4..8] == b"ftyp" {
        return match &b[8..12] {
            b"heic" | b"heix" | b"mif1" => "image/heic",
            b"avif" => "image/avif",
            _ => "video/mp4",
        };
    }
    if b.len() >= 2 && &b[..2] == b"BM" && b.len() >= 14 && b[6..10] == [0, 0, 0, 0] {
        return "image/bmp";
    }
    if b.len() > 262 && &b[257..262] == b"ustar" {
        return "application/x-tar";
    }
    if !is_text(b) {
        return "application/octet-stream";
    }
    let text = String::from_utf8_lossy(b.strip_prefix(b"\xef\xbb\xbf").unwrap_or(b));
    let t = text.trim_start();
    let lower = t.chars().take(256).collect::<String>().to_ascii_lowercase();
    if lower.starts_with("<svg") || (lower.starts_with("<?xml") && lower.contains("<svg")) {
        "image/svg+xml"
    } else if lower.starts_with("<!doctype html") || lower.starts_with("<html") {
        "text/html"
    } else if lower.starts_with("<?xml") {
        "application/xml"
    } else if (t.starts_with('{') || t.starts_with('[')) && serde_json::from_str::<Value>(&text).is_ok() {
        "application/json"
    } else {
        "text/plain"
    }
}

/// UTF-8 (a sequence cut at the end of the sample allowed) without NUL or control bytes other than tab,
/// newlines, form feed and escape.
fn is_text(b: &[u8]) -> bool {
    let valid = match std::str::from_utf8(b) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none() && b.len() - e.valid_up_to() < 4,
    };
    valid
        && !b
            .iter()
            .any(|&c| c < 0x20 && !matches!(c, b'\t' | b'\n' | b'\r' | 0x0c | 0x1b))
}

/// Whether `mime` matches one of the `accept_mime` patterns (`type/subtype`, either part may be `*`;
/// case-insensitive).
pub fn mime_accepted(mime: &str, patterns: &[String]) -> bool {
    let (t, s) = mime.split_once('/').unwrap_or((mime, ""));
    patterns.iter().any(|p| {
        let p = p.trim();
        if p == "*" {
            return true;
        }
        let (pt, ps) = p.split_once('/').unwrap_or((p, "*"));
        (pt == "*" || pt.eq_ignore_ascii_case(t)) && (ps == "*" || ps.eq_ignore_ascii_case(s))
    })
}

/// Attachments copied next to the store's `runs/` directory, not yet part of a run.
#[derive(Debug)]
pub struct Staged {
    dir: Option<PathBuf>,
    records: Vec<AttachmentRecord>,
}

impl Staged {
    /// Nothing staged (the launch supplied no attachment).
    pub fn none() -> Staged {
        Staged {
            dir: None,
            records: Vec::new(),
        }
    }

    /// The records, as `run.json.attachments` will hold them.
    pub fn records(&self) -> &[AttachmentRecord] {
        &self.records
    }

    /// Moves the staged files into `<run_dir>/attachments` (one rename) and returns the records.
    pub fn commit(mut self, run_dir: &Path) -> Result<Vec<AttachmentRecord>> {
        if let Some(dir) = self.dir.take() {
            let to = run_dir.join(names::ATTACHMENTS);
            if let Err(e) = std::fs::rename(&dir, &to) {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(Error::io("rename", &dir, e));
            }
        }
        Ok(std::mem::take(&mut self.records))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Copies the checked attachments of run `run_id` into a private staging directory of the store at
/// `store_dir` (which exists). A file that is no longer the one checked (another inode, grown over the
/// limit, another MIME type) is [`Error::InvalidAttachment`]; store I/O is [`Error::Io`].
pub fn stage(store_dir: &Path, run_id: &str, checked: &[CheckedAttachment], now: &str) -> Result<Staged> {
    if checked.is_empty() {
        return Ok(Staged::none());
    }
    let run_id = validate_component("run id", run_id)?;
    let dir = store_dir.join(format!(
        ".{}-{run_id}.tmp-{:016x}",
        names::ATTACHMENTS,
        rand::random::<u64>()
    ));
    create_private_dir(&dir)?;
    let mut staged = Staged {
        dir: Some(dir.clone()),
        records: Vec::new(),
    };
    for c in checked {
        let name = validate_component("attachment name", &c.name)?;
        let file = validate_component("attachment file name", &c.original_filename)?;
        let sub = dir.join(name);
        create_private_dir(&sub)?;
        let (size, sha256) = copy_one(c, &sub.join(file))?;
        let record = AttachmentRecord {
            name: c.name.clone(),
            original_filename: c.original_filename.clone(),
            mime: c.mime.clone(),
            size,
            sha256,
            created_at: now.to_owned(),
            storage_ref: format!("runs/{run_id}/{}/{name}/{file}", names::ATTACHMENTS),
        };
        let mut meta = serde_json::to_string_pretty(&record).map_err(|source| Error::Encode {
            what: "attachment meta",
            source,
        })?;
        meta.push('\n');
        write_atomic(&sub.join(META_JSON), meta.as_bytes())?;
        staged.records.push(record);
    }
    Ok(staged)
}

/// Streams one checked file to `to` (created 0600, never through a symlink), hashing while copying.
fn copy_one(c: &CheckedAttachment, to: &Path) -> Result<(u64, String)> {
    let changed = |why: &str| {
        invalid(
            &c.name,
            format!("{} {why} since it was checked", c.source.display()),
        )
    };
    let (mut src, meta) = open_regular_nofollow(&c.source).map_err(|_| changed("changed"))?;
    if !meta.is_file() || (meta.dev(), meta.ino()) != c.identity {
        return Err(changed("was replaced"));
    }
    let mut dst = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(to)
        .map_err(|e| Error::io("create", to, e))?;
    let mut hasher = Sha256::new();
    let mut size: u64 = 0;
    let mut first: Vec<u8> = Vec::with_capacity(SNIFF_LEN);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(invalid(
                    &c.name,
                    format!("cannot read {}: {e}", c.source.display()),
                ));
            }
        };
        size += n as u64;
        if size > MAX_BYTES {
            return Err(changed("grew over the size limit"));
        }
        if first.len() < SNIFF_LEN {
            let take = (SNIFF_LEN - first.len()).min(n);
            first.extend_from_slice(&buf[..take]);
        }
        hasher.update(&buf[..n]);
        dst.write_all(&buf[..n]).map_err(|e| Error::io("write", to, e))?;
    }
    dst.sync_all().map_err(|e| Error::io("sync", to, e))?;
    if sniff_mime(&first) != c.mime {
        return Err(changed("changed type"));
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// Checks that the stored copies under `<run_dir>/attachments` are still what `records` says (regular files,
/// never through a symlink, same size and SHA-256): a resume uses them as the launch did. The reason when not.
pub fn verify_stored(run_dir: &Path, records: &[AttachmentRecord]) -> std::result::Result<(), String> {
    for r in records {
        let (name, file) = match (
            validate_component("attachment name", &r.name),
            validate_component("attachment file name", &r.original_filename),
        ) {
            (Ok(n), Ok(f)) => (n, f),
            _ => return Err(format!("attachment '{}' has an unusable recorded name", r.name)),
        };
        let path = run_dir.join(names::ATTACHMENTS).join(name).join(file);
        let changed = |why: String| format!("attachment '{}' ({}) {why}", r.name, path.display());
        let (mut f, meta) =
            open_regular_nofollow(&path).map_err(|e| changed(format!("cannot be read: {e}")))?;
        if !meta.is_file() {
            return Err(changed(format!("is {}", kind_of(meta.file_type()))));
        }
        if meta.len() != r.size {
            return Err(changed("changed since the run started".into()));
        }
        let mut hasher = Sha256::new();
        std::io::copy(&mut f, &mut hasher).map_err(|e| changed(format!("cannot be read: {e}")))?;
        if hex::encode(hasher.finalize()) != r.sha256 {
            return Err(changed("changed since the run started".into()));
        }
    }
    Ok(())
}

/// The value of one attachment as templates see it.
fn value_of(path: String, r: Option<&AttachmentRecord>) -> Value {
    let mut m = Map::new();
    m.insert("path".into(), Value::String(path));
    m.insert(
        "mime".into(),
        Value::String(r.map(|r| r.mime.clone()).unwrap_or_default()),
    );
    m.insert(
        "size".into(),
        Value::String(r.map(|r| r.size.to_string()).unwrap_or_default()),
    );
    m.insert(
        "sha256".into(),
        Value::String(r.map(|r| r.sha256.clone()).unwrap_or_default()),
    );
    m.insert("url".into(), Value::String(String::new()));
    Value::Object(m)
}

/// What `{{attachments.…}}` renders to, for host nodes and for nodes in a container.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttachmentValues {
    host: Map<String, Value>,
    container: Map<String, Value>,
    container_nodes: BTreeSet<String>,
}

impl AttachmentValues {
    /// The values of every attachment `workflow` declares, from the run's records (the stored files are under
    /// `<run_dir>/attachments`). A declared attachment without a record has empty values.
    pub fn new(workflow: &Workflow, records: &[AttachmentRecord], run_dir: &Path) -> AttachmentValues {
        let mut v = AttachmentValues::default();
        let dir = run_dir.join(names::ATTACHMENTS);
        for a in &workflow.attachments {
            let name = &a.name.value;
            let r = records.iter().find(|r| r.name == *name);
            let (host, container) = match r {
                Some(r) => (
                    dir.join(&r.name)
                        .join(&r.original_filename)
                        .to_string_lossy()
                        .into_owned(),
                    format!("{CONTAINER_DIR}/{}/{}", r.name, r.original_filename),
                ),
                None => (String::new(), String::new()),
            };
            v.host.insert(name.clone(), value_of(host, r));
            v.container.insert(name.clone(), value_of(container, r));
        }
        v
    }

    /// Sets the nodes that run in a container (they see the container paths).
    pub fn in_containers(mut self, nodes: impl IntoIterator<Item = String>) -> AttachmentValues {
        self.container_nodes = nodes.into_iter().collect();
        self
    }

    /// The values as node `node` sees them (an unknown node, or none, sees the host values).
    pub fn seen_by(&self, node: &str) -> &Map<String, Value> {
        if self.container_nodes.contains(node) {
            &self.container
        } else {
            &self.host
        }
    }
}

/// Every template text of a workflow (prompt bodies, tool commands and scripts, `with` values, templated
/// loop caps).
fn templates(workflow: &Workflow) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    out.extend(workflow.prompts.iter().map(|p| p.body.as_str()));
    for n in &workflow.nodes {
        out.extend(
            [&n.command, &n.script]
                .into_iter()
                .flatten()
                .map(|t| t.value.as_str()),
        );
    }
    for e in &workflow.edges {
        out.extend(e.with.entries.iter().map(|w| w.value.value.as_str()));
        if let Some(l) = &e.loop_spec
            && let LoopCap::Template(t) = &l.cap.value
        {
            out.push(t);
        }
    }
    out
}

/// The run's warnings about attachment placeholders, one per attachment and kind: a referenced attachment
/// that was not supplied (renders empty), a referenced `.url` (always empty here).
pub fn template_warnings(workflow: &Workflow, records: &[AttachmentRecord]) -> Vec<String> {
    let mut unsupplied: BTreeSet<String> = BTreeSet::new();
    let mut urls: BTreeSet<String> = BTreeSet::new();
    for t in templates(workflow) {
        for p in placeholders(t) {
            if p.namespace() != "attachments" {
                continue;
            }
            let Some(name) = p.path.get(1) else { continue };
            if !records.iter().any(|r| r.name == *name) {
                unsupplied.insert(name.clone());
            }
            if p.path.get(2).map(String::as_str) == Some("url") {
                urls.insert(name.clone());
            }
        }
    }
    let mut out: Vec<String> = unsupplied
        .into_iter()
        .map(|n| format!("attachment '{n}' was not supplied: {{{{attachments.{n}…}}}} renders as empty text"))
        .collect();
    out.extend(urls.into_iter().map(|n| {
        format!("{{{{attachments.{n}.url}}}} renders as empty text: this runtime has no server to serve attachment URLs; use .path")
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wf(src: &str) -> Workflow {
        let c = iterion_spec::check(src, "w.bot");
        assert!(!c.has_errors(), "{:#?}", c.diagnostics);
        c.workflows.into_iter().next().unwrap()
    }

    const DECL: &str = "attachments:\n  spec: file\n    accept_mime: [\"application/pdf\", \"text/*\"]\n  logo: image\n    required: false\n\ntool t:\n  command: `wc -c {{attachments.spec}}`\n\nworkflow w:\n  entry: t\n  t -> done\n";

    #[test]
    fn sniffing() {
        let check = |b: &[u8], m: &str| assert_eq!(sniff_mime(b), m, "{b:?}");
        check(b"%PDF-1.4", "application/pdf");
        check(b"\x89PNG\r\n\x1a\n\0\0", "image/png");
        check(b"\xff\xd8\xff\xe0", "image/jpeg");
        check(b"GIF89a..", "image/gif");
        check(b"RIFF\0\0\0\0WEBPVP8 ", "image/webp");
        check(b"\0\0\0\x18ftypavif", "image/avif");
        check(b"PK\x03\x04rest", "application/zip");
        check(b"", "text/plain");
        check("héllo wörld\n".as_bytes(), "text/plain");
        check(b"{\"a\": 1}", "application/json");
        check(b"{not json", "text/plain");
        check(b"<?xml version=\"1.0\"?><svg xmlns=\"x\"/>", "image/svg+xml");
        check(b"<!DOCTYPE html><html>", "text/html");
        check(b"a\0b", "application/octet-stream");
        check(b"\x80\x81\x82", "application/octet-stream");
        // a multi-byte character cut by the sample is still text
        check(&"aé".as_bytes()[..2], "text/plain");
    }

    #[test]
    fn mime_patterns() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(mime_accepted("application/pdf", &p(&["application/pdf"])));
        assert!(mime_accepted("Application/PDF", &p(&["application/pdf"])));
        assert!(mime_accepted("text/plain", &p(&["text/*"])));
        assert!(mime_accepted("text/plain", &p(&["*/*"])));
        assert!(mime_accepted("image/svg+xml", &p(&["*/svg+xml"])));
        assert!(!mime_accepted("image/png", &p(&["text/*", "application/pdf"])));
        assert!(!mime_accepted("text/plain", &p(&[])));
    }

    #[test]
    fn parse_arguments() {
        assert_eq!(
            parse_attach("spec=./a=b.pdf").unwrap(),
            ("spec".to_string(), PathBuf::from("./a=b.pdf"))
        );
        for bad in ["spec", "=x", "spec="] {
            let e = parse_attach(bad).unwrap_err();
            assert!(e.to_string().contains("expected NAME=PATH"), "{e}");
        }
    }

    /// [`check_supplied`] with no repository and no home.
    fn check_any(
        w: &Workflow,
        supplied: &[(String, PathBuf)],
        base: &Path,
    ) -> Result<Vec<CheckedAttachment>> {
        check_supplied(w, supplied, base, &AttachmentBounds::new())
    }

    fn reason(r: Result<Vec<CheckedAttachment>>) -> String {
        match r {
            Err(Error::InvalidAttachment { name, reason }) => format!("{name}: {reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn supplied_attachments_are_checked() {
        let w = wf(DECL);
        let d = tempfile::tempdir().unwrap();
        let base = d.path();
        std::fs::write(base.join("a.pdf"), b"%PDF-1.7\nbody").unwrap();
        std::fs::write(base.join("a.png"), b"\x89PNG\r\n\x1a\nxxxx").unwrap();
        std::os::unix::fs::symlink(base.join("a.pdf"), base.join("link.pdf")).unwrap();
        std::fs::create_dir(base.join("dir")).unwrap();
        let s = |n: &str, p: &str| (n.to_string(), PathBuf::from(p));

        let ok = check_any(&w, &[s("spec", "link.pdf")], base).unwrap();
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].original_filename, "link.pdf");
        assert_eq!(ok[0].source, std::fs::canonicalize(base.join("a.pdf")).unwrap());
        assert_eq!((ok[0].mime.as_str(), ok[0].size), ("application/pdf", 13));

        assert_eq!(
            reason(check_any(&w, &[s("nope", "a.pdf")], base)),
            "nope: not declared (workflow 'w' declares: spec, logo)"
        );
        assert_eq!(
            reason(check_any(&w, &[s("spec", "a.pdf"), s("spec", "a.pdf")], base)),
            "spec: supplied more than once"
        );
        let r = reason(check_any(&w, &[s("spec", "a.png")], base));
        assert!(
            r.ends_with("a.png is image/png, which is not accepted (accept_mime: application/pdf, text/*)"),
            "{r}"
        );
        let r = reason(check_any(&w, &[s("spec", "dir")], base));
        assert!(r.ends_with("dir is a directory"), "{r}");
        let r = reason(check_any(&w, &[s("spec", "missing.pdf")], base));
        assert!(r.contains("cannot read"), "{r}");
        let r = reason(check_any(&w, &[s("logo", "/dev/null")], base));
        assert!(
            r.ends_with("/dev/null leads into /dev, which attachments may not come from"),
            "{r}"
        );
        // over the size limit (a sparse file: nothing is written)
        let big = std::fs::File::create(base.join("big.pdf")).unwrap();
        big.set_len(MAX_BYTES + 1).unwrap();
        let r = reason(check_any(&w, &[s("logo", "big.pdf")], base));
        assert!(
            r.ends_with("big.pdf is larger than 1 GiB (1073741825 bytes)"),
            "{r}"
        );
        // no accept_mime: anything regular goes
        assert_eq!(check_any(&w, &[s("logo", "a.pdf")], base).unwrap().len(), 1);
    }

    /// A repository that ships `spec.pdf -> /proc/self/environ` and `creds -> ../home/.aws/credentials`:
    /// both refused, naming the attachment and why; the operator's own link outside it still works.
    #[test]
    fn repository_links_are_refused_and_operator_links_followed() {
        let w = wf(DECL);
        let d = tempfile::tempdir().unwrap();
        let (repo, home) = (d.path().join("repo"), d.path().join("home"));
        std::fs::create_dir_all(repo.join("docs")).unwrap();
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".aws/credentials"), b"[default]\n").unwrap();
        std::fs::write(d.path().join("a.pdf"), b"%PDF-1.7\n").unwrap();
        std::os::unix::fs::symlink("/proc/self/environ", repo.join("spec.pdf")).unwrap();
        std::os::unix::fs::symlink("../home/.aws/credentials", repo.join("creds")).unwrap();
        std::os::unix::fs::symlink(d.path().join("a.pdf"), home.join("doc.pdf")).unwrap();
        let bounds = AttachmentBounds::of_launch(
            &repo,
            Some(&repo),
            &d.path().join("store"),
            Some(&home),
            &d.path().join("data"),
        );
        let check =
            |n: &str, p: &str| check_supplied(&w, &[(n.to_string(), PathBuf::from(p))], &repo, &bounds);
        let r = reason(check("spec", "spec.pdf"));
        assert!(r.starts_with("spec: "), "{r}");
        assert!(
            r.contains("spec.pdf is a symbolic link inside the repository"),
            "{r}"
        );
        let r = reason(check("logo", "creds"));
        assert!(
            r.contains("creds is a symbolic link inside the repository"),
            "{r}"
        );
        // named by its own path, the credential file is refused for what it is
        let r = reason(check("logo", &home.join(".aws/credentials").to_string_lossy()));
        assert!(r.contains("is a credential location (.aws)"), "{r}");
        let ok = check("spec", &home.join("doc.pdf").to_string_lossy()).unwrap();
        assert_eq!(
            ok[0].source,
            std::fs::canonicalize(d.path().join("a.pdf")).unwrap()
        );
        assert_eq!(ok[0].original_filename, "doc.pdf");
    }

    #[test]
    fn fifos_are_refused_without_blocking() {
        let w = wf(DECL);
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("f.pdf");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let r = reason(check_any(&w, &[("spec".into(), fifo.clone())], d.path()));
        assert!(r.ends_with("f.pdf is a FIFO"), "{r}");
    }

    #[test]
    fn required_attachments_must_be_supplied() {
        let w = wf(
            "attachments:\n  spec: file\n    required: true\n\ntool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  t -> done\n",
        );
        assert_eq!(
            reason(check_any(&w, &[], Path::new("/"))),
            "spec: required and not supplied (--attach spec=PATH)"
        );
        let none = wf("tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  t -> done\n");
        assert_eq!(
            reason(check_any(
                &none,
                &[("x".into(), "/etc/hostname".into())],
                Path::new("/")
            )),
            "x: not declared (workflow 'w' declares no attachments)"
        );
    }

    #[test]
    fn staging_copies_hashes_and_commits_with_private_modes() {
        use std::os::unix::fs::PermissionsExt;
        let w = wf(DECL);
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("a.pdf");
        let body = b"%PDF-1.7\nhello attachment\n".repeat(5000);
        std::fs::write(&src, &body).unwrap();
        let checked = check_any(&w, &[("spec".into(), src.clone())], d.path()).unwrap();
        let store = d.path().join("store");
        std::fs::create_dir_all(store.join("runs/r1")).unwrap();
        let staged = stage(&store, "r1", &checked, "2026-01-01T00:00:00Z").unwrap();
        let records = staged.commit(&store.join("runs/r1")).unwrap();
        let expect_sha = hex::encode(Sha256::digest(&body));
        assert_eq!(
            records,
            vec![AttachmentRecord {
                name: "spec".into(),
                original_filename: "a.pdf".into(),
                mime: "application/pdf".into(),
                size: body.len() as u64,
                sha256: expect_sha,
                created_at: "2026-01-01T00:00:00Z".into(),
                storage_ref: "runs/r1/attachments/spec/a.pdf".into(),
            }]
        );
        let dir = store.join("runs/r1/attachments");
        assert_eq!(std::fs::read(dir.join("spec/a.pdf")).unwrap(), body);
        let meta: AttachmentRecord =
            serde_json::from_slice(&std::fs::read(dir.join("spec/meta.json")).unwrap()).unwrap();
        assert_eq!(meta, records[0]);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("spec")), 0o700);
        assert_eq!(mode(&dir.join("spec/a.pdf")), 0o600);
        assert_eq!(mode(&dir.join("spec/meta.json")), 0o600);
        // nothing staged is left next to runs/
        let left: Vec<_> = std::fs::read_dir(&store)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("runs")]);
    }

    #[test]
    fn a_file_replaced_after_the_check_is_refused_and_nothing_stays() {
        let w = wf(DECL);
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("a.pdf");
        std::fs::write(&src, b"%PDF-1.7\n").unwrap();
        let checked = check_any(&w, &[("spec".into(), src.clone())], d.path()).unwrap();
        // another file renamed over it (the original kept alive by a link, so its inode is not reused)
        std::fs::hard_link(&src, d.path().join("keep")).unwrap();
        std::fs::write(d.path().join("b.pdf"), b"%PDF-1.7\nother").unwrap();
        std::fs::rename(d.path().join("b.pdf"), &src).unwrap();
        let store = d.path().join("store");
        std::fs::create_dir_all(&store).unwrap();
        let e = stage(&store, "r1", &checked, "t").unwrap_err();
        assert!(e.to_string().contains("was replaced since it was checked"), "{e}");
        assert_eq!(std::fs::read_dir(&store).unwrap().count(), 0);
        // same file, new type
        let checked = check_any(&w, &[("spec".into(), src.clone())], d.path()).unwrap();
        std::fs::write(&src, b"plain text now").unwrap();
        let e = stage(&store, "r1", &checked, "t").unwrap_err();
        assert!(e.to_string().contains("changed type since it was checked"), "{e}");
        assert_eq!(std::fs::read_dir(&store).unwrap().count(), 0);
    }

    #[test]
    fn stored_copies_are_verified() {
        let w = wf(DECL);
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("a.pdf");
        std::fs::write(&src, b"%PDF-1.7\nv1").unwrap();
        let checked = check_any(&w, &[("spec".into(), src)], d.path()).unwrap();
        let run_dir = d.path().join("store/runs/r1");
        std::fs::create_dir_all(&run_dir).unwrap();
        let records = stage(&d.path().join("store"), "r1", &checked, "t")
            .unwrap()
            .commit(&run_dir)
            .unwrap();
        assert_eq!(verify_stored(&run_dir, &records), Ok(()));
        let stored = run_dir.join("attachments/spec/a.pdf");
        // same size, other bytes
        std::fs::write(&stored, b"%PDF-1.7\nv2").unwrap();
        let e = verify_stored(&run_dir, &records).unwrap_err();
        assert!(e.ends_with("changed since the run started"), "{e}");
        // a symlink is never followed
        std::fs::remove_file(&stored).unwrap();
        std::fs::write(d.path().join("elsewhere"), b"%PDF-1.7\nv1").unwrap();
        std::os::unix::fs::symlink(d.path().join("elsewhere"), &stored).unwrap();
        let e = verify_stored(&run_dir, &records).unwrap_err();
        assert!(e.contains("cannot be read"), "{e}");
        std::fs::remove_file(&stored).unwrap();
        let e = verify_stored(&run_dir, &records).unwrap_err();
        assert!(e.contains("cannot be read"), "{e}");
    }

    #[test]
    fn values_for_host_and_container_nodes() {
        let w = wf(DECL);
        let rec = AttachmentRecord {
            name: "spec".into(),
            original_filename: "a.pdf".into(),
            mime: "application/pdf".into(),
            size: 12,
            sha256: "ab".into(),
            created_at: "t".into(),
            storage_ref: "runs/r/attachments/spec/a.pdf".into(),
        };
        let v = AttachmentValues::new(&w, std::slice::from_ref(&rec), Path::new("/s/runs/r"))
            .in_containers(["c".to_string()]);
        assert_eq!(
            v.seen_by("h")["spec"],
            serde_json::json!({"path": "/s/runs/r/attachments/spec/a.pdf", "mime": "application/pdf",
                "size": "12", "sha256": "ab", "url": ""})
        );
        assert_eq!(
            v.seen_by("c")["spec"]["path"],
            "/run/iterion/attachments/spec/a.pdf"
        );
        assert_eq!(
            v.seen_by("c")["logo"],
            serde_json::json!({"path": "", "mime": "", "size": "", "sha256": "", "url": ""})
        );
    }

    #[test]
    fn warnings_once_per_attachment() {
        let w = wf(
            "attachments:\n  spec: file\n  logo: image\n\nprompt p:\n  {{attachments.logo}} {{attachments.logo.mime}} {{attachments.spec.url}} {{attachments.spec.url}}\n\ntool t:\n  command: `echo {{attachments.logo.size}}`\n\nworkflow w:\n  entry: t\n  t -> done\n",
        );
        let rec = AttachmentRecord {
            name: "spec".into(),
            original_filename: "a".into(),
            mime: "text/plain".into(),
            size: 1,
            sha256: "x".into(),
            created_at: "t".into(),
            storage_ref: "r".into(),
        };
        assert_eq!(
            template_warnings(&w, &[rec]),
            vec![
                "attachment 'logo' was not supplied: {{attachments.logo…}} renders as empty text".to_string(),
                "{{attachments.spec.url}} renders as empty text: this runtime has no server to serve attachment URLs; use .path".to_string(),
            ]
        );
    }
}
