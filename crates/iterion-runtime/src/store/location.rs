//! Where run stores live (section 1.1).
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Name of the sentinel file that marks a `.iterion` directory as a managed store.
pub const STORE_SENTINEL: &str = ".iterion-store";

/// Name of the per-project store directory next to a workflow file.
pub const LOCAL_STORE_DIR: &str = ".iterion";

/// Makes `path` absolute against `cwd` and removes `.` components, redundant and trailing separators;
/// `..` components are resolved lexically (never through the file system).
pub fn absolutize(path: &Path, cwd: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(c);
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The global data dir: `$ITERION_HOME` when set and non-empty (made absolute against `cwd`), else
/// `<home>/.iterion`, else `<temp_dir>/iterion-data`. `env` is the process environment read once by the caller.
pub fn data_dir(env: &BTreeMap<String, String>, home: Option<&Path>, cwd: &Path, temp_dir: &Path) -> PathBuf {
    if let Some(h) = env.get("ITERION_HOME").filter(|v| !v.is_empty()) {
        return absolutize(Path::new(h), cwd);
    }
    match home.filter(|h| !h.as_os_str().is_empty()) {
        Some(h) => absolutize(&h.join(".iterion"), cwd),
        None => absolutize(&temp_dir.join("iterion-data"), cwd),
    }
}

/// The project key of a directory: every `/`, `\` and `:` replaced by `-`, prefixed with one more `-` when
/// it does not start with one (`/home/jo/app` → `-home-jo-app`, `C:\Users\jo\app` → `-C--Users-jo-app`).
pub fn project_key(dir: &str) -> String {
    let replaced: String = dir
        .chars()
        .map(|c| if matches!(c, '/' | '\\' | ':') { '-' } else { c })
        .collect();
    if replaced.starts_with('-') {
        replaced
    } else {
        format!("-{replaced}")
    }
}

/// `true` when `dir` is a managed store: it contains `runs/` or the sentinel file `.iterion-store`.
pub fn is_managed_store(dir: &Path) -> bool {
    dir.join("runs").is_dir() || dir.join(STORE_SENTINEL).is_file()
}

/// Inputs of the store dir decision of section 1.1.
#[derive(Debug, Clone, Copy)]
pub struct StoreDirRequest<'a> {
    /// `--store-dir`, when given.
    pub store_dir: Option<&'a Path>,
    /// The directory the run belongs to: the directory of the workflow file (commands without a workflow
    /// file use the current directory).
    pub project_dir: &'a Path,
    /// The current directory, to make relative paths absolute.
    pub cwd: &'a Path,
    /// The data dir ([`data_dir`]).
    pub data_dir: &'a Path,
}

/// The store dir, first match wins: `--store-dir` (made absolute); `<project dir>/.iterion` when it is a
/// managed store; `<data dir>/projects/<key>`. Reads the file system only to test for a managed store.
pub fn store_dir(req: StoreDirRequest<'_>) -> PathBuf {
    if let Some(s) = req.store_dir {
        return absolutize(s, req.cwd);
    }
    let project = absolutize(req.project_dir, req.cwd);
    let local = project.join(LOCAL_STORE_DIR);
    if is_managed_store(&local) {
        return local;
    }
    req.data_dir
        .join("projects")
        .join(project_key(&project.to_string_lossy()))
}

/// The project dir of a workflow file: its parent directory, made absolute against `cwd`.
pub fn workflow_project_dir(workflow_file: &Path, cwd: &Path) -> PathBuf {
    let abs = absolutize(workflow_file, cwd);
    abs.parent().map(Path::to_path_buf).unwrap_or(abs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_key(input: &str, expect: &str) {
        assert_eq!(project_key(input), expect, "{input}");
    }

    #[test]
    fn project_keys() {
        check_key("/home/jo/app", "-home-jo-app");
        check_key("C:\\Users\\jo\\app", "-C--Users-jo-app");
        check_key("/w/app", "-w-app");
        check_key("-already", "-already");
    }

    fn check_data_dir(env: &[(&str, &str)], home: Option<&str>, expect: &str) {
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let got = data_dir(&env, home.map(Path::new), Path::new("/x"), Path::new("/tmp"));
        assert_eq!(got, PathBuf::from(expect), "{env:?} {home:?}");
    }

    #[test]
    fn data_dirs() {
        // ST4
        check_data_dir(&[("ITERION_HOME", "rel/dir")], Some("/home/jo"), "/x/rel/dir");
        check_data_dir(&[("ITERION_HOME", "/d/")], Some("/home/jo"), "/d");
        check_data_dir(&[("ITERION_HOME", "/d//")], None, "/d");
        check_data_dir(&[("ITERION_HOME", "./a/../b")], None, "/x/b");
        check_data_dir(&[("ITERION_HOME", "")], Some("/home/jo"), "/home/jo/.iterion");
        check_data_dir(&[], Some("/home/jo"), "/home/jo/.iterion");
        check_data_dir(&[], None, "/tmp/iterion-data");
        check_data_dir(&[], Some(""), "/tmp/iterion-data");
    }

    #[test]
    fn workflow_project_dir_is_the_absolute_parent() {
        assert_eq!(
            workflow_project_dir(Path::new("flows/a.bot"), Path::new("/x")),
            PathBuf::from("/x/flows")
        );
    }
}
