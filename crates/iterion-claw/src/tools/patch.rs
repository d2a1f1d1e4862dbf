//! `patch`: a unified diff (as `diff -u` or `git diff` write it) applied to files of the work directory,
//! all or nothing. Every file of the diff is confined, read and patched in memory first; a hunk whose context
//! is not in the file fails the whole call, naming the hunk, and nothing is written. Then the new contents
//! are staged next to their files and renamed over them (deleted files last).
//!
//! A hunk applies where its header says, or else at the nearest place after the previous hunk where its
//! context and removed lines are found exactly (no whitespace fuzz). `a/` and `b/` prefixes are stripped;
//! `/dev/null` creates or deletes a file. Renames and binary patches are refused.

use super::confine::Root;
use super::tool_err;
use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Largest file `patch` reads.
pub const MAX_PATCHED_FILE: u64 = 16 << 20;

const TOOL: &str = "patch";

fn err(message: impl Into<String>) -> Error {
    tool_err(TOOL, message)
}

/// One hunk: its header and its lines (`' '`, `'-'` or `'+'` and the text).
#[derive(Debug, Clone, PartialEq)]
struct Hunk {
    header: String,
    old_start: usize,
    lines: Vec<(char, String)>,
    /// `\ No newline at end of file` after the old side's last line.
    old_no_eol: bool,
    /// The same after the new side's last line.
    new_no_eol: bool,
}

impl Hunk {
    fn old_side(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|(k, _)| *k != '+')
            .map(|(_, l)| l.as_str())
            .collect()
    }
    /// A `\\ No newline at end of file` line: the line before it (of one side, or of both for context)
    /// ends its file without a newline.
    fn no_eol_after_last(&mut self) {
        match self.lines.last().map(|(k, _)| *k) {
            Some('+') => self.new_no_eol = true,
            Some('-') => self.old_no_eol = true,
            _ => {
                self.old_no_eol = true;
                self.new_no_eol = true;
            }
        }
    }
    fn new_side(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|(k, _)| *k != '-')
            .map(|(_, l)| l.as_str())
            .collect()
    }
}

/// The patch of one file: its old and new names (`None` for `/dev/null`) and its hunks.
#[derive(Debug, Clone, PartialEq)]
struct FilePatch {
    old: Option<String>,
    new: Option<String>,
    hunks: Vec<Hunk>,
}

impl FilePatch {
    fn name(&self) -> &str {
        self.new.as_deref().or(self.old.as_deref()).unwrap_or_default()
    }
}

/// A file name of a `---`/`+++` line: the timestamp after a tab dropped, `a/`/`b/` stripped.
fn file_name(rest: &str, prefix: &str) -> Option<String> {
    let name = rest.split('\t').next().unwrap_or_default().trim_end();
    let name = name
        .strip_prefix('"')
        .and_then(|n| n.strip_suffix('"'))
        .unwrap_or(name);
    if name == "/dev/null" {
        return None;
    }
    Some(name.strip_prefix(prefix).unwrap_or(name).to_string())
}

/// `start[,count]` of a hunk header side.
fn range(s: &str) -> Option<(usize, usize)> {
    let (start, count) = s.split_once(',').unwrap_or((s, "1"));
    Some((start.parse().ok()?, count.parse().ok()?))
}

/// `@@ -a,b +c,d @@`: the old start, old count and new count.
fn hunk_header(line: &str) -> Option<(usize, usize, usize)> {
    let body = line.strip_prefix("@@ -")?;
    let (old, rest) = body.split_once(" +")?;
    let (new, _) = rest.split_once(" @@")?;
    let (old_start, old_count) = range(old)?;
    let (_, new_count) = range(new)?;
    Some((old_start, old_count, new_count))
}

/// Parses a unified diff into its file patches.
fn parse(text: &str) -> Result<Vec<FilePatch>> {
    let lines = split_lines(text);
    let mut files = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with("rename from ") || line.starts_with("copy from ") {
            return Err(err(
                "renames and copies are not supported: write the new file and delete the old one",
            ));
        }
        if line.starts_with("Binary files ") || line == "GIT binary patch" {
            return Err(err("binary patches are not supported"));
        }
        let Some(old) = line.strip_prefix("--- ") else {
            i += 1;
            continue;
        };
        let new = lines
            .get(i + 1)
            .and_then(|l| l.strip_prefix("+++ "))
            .ok_or_else(|| err(format!("line {}: '---' without a '+++' line", i + 1)))?;
        let mut fp = FilePatch {
            old: file_name(old, "a/"),
            new: file_name(new, "b/"),
            hunks: Vec::new(),
        };
        if fp.old.is_none() && fp.new.is_none() {
            return Err(err(format!("line {}: both sides are /dev/null", i + 1)));
        }
        i += 2;
        while i < lines.len() && lines[i].starts_with("@@") {
            let (hunk, next) = parse_hunk(&lines, i, fp.name())?;
            fp.hunks.push(hunk);
            i = next;
        }
        if fp.hunks.is_empty() {
            return Err(err(format!("{}: no hunk", fp.name())));
        }
        files.push(fp);
    }
    if files.is_empty() {
        return Err(err(
            "no file patch found (expected '--- old', '+++ new' and '@@' hunks)",
        ));
    }
    Ok(files)
}

/// The hunk whose header is `lines[at]`, and the index of the line after it.
fn parse_hunk(lines: &[&str], at: usize, name: &str) -> Result<(Hunk, usize)> {
    let header = lines[at];
    let (old_start, mut old_left, mut new_left) = hunk_header(header)
        .ok_or_else(|| err(format!("{name}: line {}: bad hunk header '{header}'", at + 1)))?;
    let mut hunk = Hunk {
        header: header.to_string(),
        old_start,
        lines: Vec::new(),
        old_no_eol: false,
        new_no_eol: false,
    };
    let mut i = at + 1;
    while old_left > 0 || new_left > 0 {
        let Some(&line) = lines.get(i) else {
            return Err(err(format!("{name}: hunk '{header}' ends early")));
        };
        // an empty line is an empty context line (editors strip the trailing space)
        let (kind, text) = match line.chars().next() {
            None => (' ', ""),
            Some('\r') if line == "\r" => (' ', line),
            Some(c @ (' ' | '-' | '+')) => (c, &line[1..]),
            Some('\\') => {
                hunk.no_eol_after_last();
                i += 1;
                continue;
            }
            Some(_) => {
                return Err(err(format!(
                    "{name}: hunk '{header}' ends early (line {})",
                    i + 1
                )));
            }
        };
        let left = match kind {
            '-' => &mut old_left,
            '+' => &mut new_left,
            _ => {
                if old_left == 0 || new_left == 0 {
                    return Err(err(format!(
                        "{name}: hunk '{header}' has more lines than its header says"
                    )));
                }
                new_left -= 1;
                &mut old_left
            }
        };
        if *left == 0 {
            return Err(err(format!(
                "{name}: hunk '{header}' has more lines than its header says"
            )));
        }
        *left -= 1;
        hunk.lines.push((kind, text.to_string()));
        i += 1;
    }
    while lines.get(i).is_some_and(|l| l.starts_with('\\')) {
        hunk.no_eol_after_last();
        i += 1;
    }
    // a hunk line past the counts means a miscounted header: applying less than written would be wrong
    let next_file =
        |j: usize| lines[j].starts_with("--- ") && lines.get(j + 1).is_some_and(|l| l.starts_with("+++ "));
    if let Some(l) = lines.get(i)
        && (l.starts_with(' ') || l.starts_with('+') || (l.starts_with('-') && !next_file(i)))
    {
        return Err(err(format!(
            "{name}: hunk '{header}' has more lines than its header says (line {})",
            i + 1
        )));
    }
    Ok((hunk, i))
}

/// A file's text as lines, and whether it ends with a newline.
#[derive(Debug, Clone, PartialEq)]
struct Text {
    lines: Vec<String>,
    final_newline: bool,
}

/// `s` split at `\n` only (a `\r` stays with its line, so CRLF files keep their endings), without the empty
/// piece after a final newline.
fn split_lines(s: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = s.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

/// Lines equal but for a carriage return at the end (a diff written with LF for a CRLF file, or back).
fn same(a: &str, b: &str) -> bool {
    a.strip_suffix('\r').unwrap_or(a) == b.strip_suffix('\r').unwrap_or(b)
}

impl Text {
    fn of(s: &str) -> Text {
        Text {
            lines: split_lines(s).into_iter().map(str::to_string).collect(),
            final_newline: s.is_empty() || s.ends_with('\n'),
        }
    }

    /// A new line with the file's line ending: CRLF when its first line has one.
    fn ending(&self, line: &str) -> String {
        let bare = line.strip_suffix('\r').unwrap_or(line);
        match self.lines.first() {
            Some(first) if first.ends_with('\r') => format!("{bare}\r"),
            Some(_) => bare.to_string(),
            None => line.to_string(),
        }
    }
    fn render(&self) -> String {
        let mut s = self.lines.join("\n");
        if self.final_newline && !self.lines.is_empty() {
            s.push('\n');
        }
        s
    }
}

/// Applies `fp`'s hunks to `text` (`None`: the file does not exist); `None` back deletes the file.
fn apply(fp: &FilePatch, text: Option<Text>) -> Result<Option<Text>> {
    let name = fp.name();
    let mut text = match (text, &fp.old) {
        (Some(_), None) => return Err(err(format!("{name}: the patch creates it, but it exists"))),
        (None, Some(_)) => return Err(err(format!("{name}: no such file"))),
        (Some(t), Some(_)) => t,
        (None, None) => Text::of(""),
    };
    let mut min = 0usize; // first line the next hunk may touch
    let mut delta = 0isize; // lines added so far minus lines removed
    for (n, h) in fp.hunks.iter().enumerate() {
        let old = h.old_side();
        let expected = (h.old_start.saturating_sub(1) as isize + delta).max(0) as usize;
        let expected = if old.is_empty() && h.old_start > 0 {
            expected + 1
        } else {
            expected
        };
        let at = locate(&text.lines, &old, expected, min).ok_or_else(|| {
            err(format!(
                "hunk {} of {name} ({}) does not apply: {}",
                n + 1,
                h.header,
                mismatch(&text.lines, &old, expected)
            ))
        })?;
        let new: Vec<String> = h.new_side().into_iter().map(|l| text.ending(l)).collect();
        let added = new.len();
        text.lines.splice(at..at + old.len(), new);
        min = at + added;
        delta += added as isize - old.len() as isize;
        let touches_end = min == text.lines.len();
        if touches_end {
            if h.new_no_eol {
                text.final_newline = false;
            } else if h.old_no_eol {
                text.final_newline = true;
            }
        }
    }
    if fp.new.is_none() {
        if !text.lines.is_empty() {
            return Err(err(format!(
                "{name}: the patch deletes it, but lines would remain"
            )));
        }
        return Ok(None);
    }
    Ok(Some(text))
}

/// Where `old` occurs in `lines` at or after `min`: at `expected` when it does, else the nearest place.
fn locate(lines: &[String], old: &[&str], expected: usize, min: usize) -> Option<usize> {
    let fits = |at: usize| {
        at >= min
            && at + old.len() <= lines.len()
            && lines[at..at + old.len()].iter().zip(old).all(|(a, b)| same(a, b))
    };
    if fits(expected) {
        return Some(expected);
    }
    let last = lines.len().checked_sub(old.len())?;
    (min..=last)
        .filter(|&at| fits(at))
        .min_by_key(|&at| at.abs_diff(expected))
}

/// Why `old` does not match at `expected`, for the error.
fn mismatch(lines: &[String], old: &[&str], expected: usize) -> String {
    for (k, want) in old.iter().enumerate() {
        match lines.get(expected + k) {
            None => {
                return format!(
                    "the file has {} lines, the hunk expects '{want}' at line {}",
                    lines.len(),
                    expected + k + 1
                );
            }
            Some(got) if !same(got, want) => {
                return format!(
                    "line {} is '{got}', the hunk expects '{want}' (and its context is nowhere else)",
                    expected + k + 1
                );
            }
            Some(_) => {}
        }
    }
    "its context is not in the file".into()
}

/// What the patch does to one path.
enum Change {
    Write(String),
    Delete,
}

/// `patch`: applies `input["patch"]` to the work directory.
pub(super) fn patch(root: &Root, input: &Value) -> Result<String> {
    let text = super::str_arg(TOOL, input, "patch")?;
    let files = parse(&text)?;
    // in memory first: every path confined, every hunk applied
    let mut state: BTreeMap<PathBuf, Option<Text>> = BTreeMap::new();
    let mut summary = Vec::new();
    for fp in &files {
        let name = fp.name();
        let path = root.confine(TOOL, name)?;
        if path == root.path() {
            return Err(err(format!("'{name}' is the work directory, not a file")));
        }
        if let (Some(o), Some(n)) = (&fp.old, &fp.new)
            && root.confine(TOOL, o)? != path
        {
            return Err(err(format!(
                "'{o}' -> '{n}': renames are not supported: write the new file and delete the old one"
            )));
        }
        let current = match state.get(&path) {
            Some(t) => t.clone(),
            None => read(root, &path)?,
        };
        let next = apply(fp, current)?;
        summary.push(match (&fp.old, &next) {
            (None, _) => format!("created {}", root.shown(&path)),
            (_, None) => format!("deleted {}", root.shown(&path)),
            _ => format!("patched {} ({} hunk(s))", root.shown(&path), fp.hunks.len()),
        });
        state.insert(path, next);
    }
    let changes: Vec<(PathBuf, Change)> = state
        .into_iter()
        .map(|(p, t)| (p, t.map_or(Change::Delete, |t| Change::Write(t.render()))))
        .collect();
    commit(root, &changes)?;
    Ok(summary.join("\n"))
}

/// The file at `path` (confined) as text, `None` when it does not exist.
fn read(root: &Root, path: &Path) -> Result<Option<Text>> {
    match path.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(format!("{}: {e}", root.shown(path)))),
        Ok(m) if !m.is_file() => Err(err(format!("{} is not a regular file", root.shown(path)))),
        Ok(m) if m.len() > MAX_PATCHED_FILE => Err(err(format!(
            "{} is larger than {MAX_PATCHED_FILE} bytes",
            root.shown(path)
        ))),
        Ok(_) => {
            let s = std::fs::read_to_string(path).map_err(|e| err(format!("{}: {e}", root.shown(path))))?;
            Ok(Some(Text::of(&s)))
        }
    }
}

/// Stages every new content next to its file, then renames them over and deletes: a failure while staging
/// leaves every file as it was.
fn commit(root: &Root, changes: &[(PathBuf, Change)]) -> Result<()> {
    let mut staged: Vec<(PathBuf, PathBuf)> = Vec::new();
    let cleanup = |staged: &[(PathBuf, PathBuf)]| {
        for (tmp, _) in staged {
            let _ = std::fs::remove_file(tmp);
        }
    };
    for (path, change) in changes {
        let Change::Write(content) = change else { continue };
        match stage(path, content) {
            Ok(tmp) => staged.push((tmp, path.clone())),
            Err(e) => {
                cleanup(&staged);
                return Err(err(format!("{}: {e}", root.shown(path))));
            }
        }
    }
    for (tmp, path) in &staged {
        std::fs::rename(tmp, path).map_err(|e| err(format!("{}: {e}", root.shown(path))))?;
    }
    for (path, change) in changes {
        if matches!(change, Change::Delete) {
            std::fs::remove_file(path).map_err(|e| err(format!("{}: {e}", root.shown(path))))?;
        }
    }
    Ok(())
}

/// Writes `content` to a new file beside `path` (its parents created, its mode copied) and returns it.
fn stage(path: &Path, content: &str) -> std::io::Result<PathBuf> {
    use std::io::Write;
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(format!(".{name}.iterion-patch-{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    let written = f.write_all(content.as_bytes()).and_then(|()| {
        if let Ok(m) = path.metadata() {
            f.set_permissions(m.permissions())?;
        }
        f.sync_all()
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(tmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(before: &str, diff: &str, after: Result<&str, &str>) {
        let fps = parse(diff).unwrap();
        let got = apply(&fps[0], Some(Text::of(before))).map(|t| t.map(|t| t.render()).unwrap_or_default());
        match (got, after) {
            (Ok(g), Ok(want)) => assert_eq!(g, want),
            (Err(e), Err(want)) => assert!(e.to_string().contains(want), "{e}"),
            (g, want) => panic!("{g:?} vs {want:?}"),
        }
    }

    #[test]
    fn hunks_apply_at_their_place_or_nearby() {
        let d = "--- a/f\n+++ b/f\n@@ -2,2 +2,2 @@\n b\n-c\n+C\n";
        check("a\nb\nc\nd\n", d, Ok("a\nb\nC\nd\n"));
        // shifted by two lines: found nearby
        check("x\ny\na\nb\nc\nd\n", d, Ok("x\ny\na\nb\nC\nd\n"));
        // two hunks, the second after the first's growth
        let two = "--- f\n+++ f\n@@ -1,1 +1,2 @@\n a\n+a2\n@@ -3,1 +4,1 @@\n-c\n+C\n";
        check("a\nb\nc\n", two, Ok("a\na2\nb\nC\n"));
        // empty context line written without its space
        check(
            "a\n\nb\n",
            "--- f\n+++ f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n",
            Ok("a\n\nB\n"),
        );
    }

    #[test]
    fn crlf_files_keep_their_line_endings() {
        let d = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n";
        check("a\r\nb\r\n", d, Ok("a\r\nB\r\n"));
        check("a\r\nb\r\n", &d.replace('\n', "\r\n"), Ok("a\r\nB\r\n"));
        check("a\nb\n", &d.replace('\n', "\r\n"), Ok("a\nB\n"));
        // an empty context line of a CRLF diff, its space stripped
        check(
            "a\r\n\r\nb\r\n",
            "--- f\r\n+++ f\r\n@@ -1,3 +1,3 @@\r\n a\r\n\r\n-b\r\n+c\r\n",
            Ok("a\r\n\r\nc\r\n"),
        );
    }

    #[test]
    fn end_of_file_newlines() {
        check(
            "a\nb",
            "--- f\n+++ f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n",
            Ok("a\nb\n"),
        );
        check(
            "a\nb\n",
            "--- f\n+++ f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n\\ No newline at end of file\n",
            Ok("a\nc"),
        );
    }

    #[test]
    fn a_hunk_that_does_not_apply_is_named() {
        check(
            "a\nb\nc\n",
            "--- a/f\n+++ b/f\n@@ -1,1 +1,1 @@\n-a\n+A\n@@ -3,1 +3,1 @@\n-zzz\n+c\n",
            Err("hunk 2 of f (@@ -3,1 +3,1 @@) does not apply: line 3 is 'c', the hunk expects 'zzz'"),
        );
        check(
            "a\n",
            "--- f\n+++ f\n@@ -1,2 +1,1 @@\n a\n-b\n",
            Err("the file has 1 lines"),
        );
    }

    #[test]
    fn malformed_diffs_are_refused() {
        let e = |d: &str| parse(d).unwrap_err().to_string();
        assert!(e("hello").contains("no file patch found"));
        assert!(e("--- a\n@@ -1 +1 @@\n").contains("without a '+++'"));
        assert!(e("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n").contains("ends early"));
        assert!(e("--- a/f\n+++ b/f\n@@ -1,1 +1,1 @@\n a\n b\n-c\n").contains("more lines than its header"));
        assert!(e("--- a/f\n+++ b/f\n@@ bad @@\n").contains("bad hunk header"));
        assert!(e("diff --git a/x b/y\nrename from x\nrename to y\n").contains("renames"));
        assert!(e("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+x\n").contains("both sides"));
    }

    #[test]
    fn names_and_headers() {
        assert_eq!(file_name("a/src/x.rs\t2024-01-01", "a/"), Some("src/x.rs".into()));
        assert_eq!(file_name("/dev/null", "a/"), None);
        assert_eq!(file_name("plain.txt", "b/"), Some("plain.txt".into()));
        assert_eq!(hunk_header("@@ -3 +4,2 @@ fn x()"), Some((3, 1, 2)));
        assert_eq!(hunk_header("@@ -0,0 +1 @@"), Some((0, 0, 1)));
    }
}
