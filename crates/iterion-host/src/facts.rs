//! Host facts and the data dir, from the environment map.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Facts about the host the lifecycle needs for host state (05 §4.6), gathered by the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostFacts {
    /// The host home.
    pub home: Option<PathBuf>,
    /// Host uid (Unix).
    pub uid: Option<u32>,
    /// Host gid (Unix).
    pub gid: Option<u32>,
    /// `linux`, `macos`, `windows`.
    pub os: String,
    /// iterion's data directory (05 §1.1).
    pub data_dir: PathBuf,
}

impl HostFacts {
    /// Facts with the given home, ids, OS and data dir.
    pub fn new(
        home: Option<PathBuf>,
        uid: Option<u32>,
        gid: Option<u32>,
        os: &str,
        data_dir: PathBuf,
    ) -> Self {
        HostFacts {
            home,
            uid,
            gid,
            os: os.to_owned(),
            data_dir,
        }
    }

    /// The facts of this process: `HOME` (when not empty) and the data dir from `env`, the real uid and gid,
    /// the OS this was built for.
    pub fn of_process(env: &BTreeMap<String, String>, cwd: &Path) -> Self {
        HostFacts::new(
            home(env),
            Some(nix::unistd::getuid().as_raw()),
            Some(nix::unistd::getgid().as_raw()),
            std::env::consts::OS,
            data_dir(env, cwd),
        )
    }
}

fn home(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    env.get("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// iterion's global data dir (05 §1.1), the one place it is worked out: `$ITERION_HOME` when set and not
/// empty, else `$HOME/.iterion`, else `$TMPDIR/iterion-data` (`/tmp` when `TMPDIR` is unset or empty); made
/// absolute against `cwd` with `.` and `..` resolved lexically.
pub fn data_dir(env: &BTreeMap<String, String>, cwd: &Path) -> PathBuf {
    if let Some(h) = env.get("ITERION_HOME").filter(|v| !v.is_empty()) {
        return absolutize(Path::new(h), cwd);
    }
    match home(env) {
        Some(h) => absolutize(&h.join(".iterion"), cwd),
        None => {
            let temp = env
                .get("TMPDIR")
                .filter(|t| !t.is_empty())
                .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
            absolutize(&temp.join("iterion-data"), cwd)
        }
    }
}

/// The working directory an environment map describes: `PWD` when it is absolute, else `/`. For callers
/// that are handed an environment but no directory (`Runtime::from_env`).
pub fn cwd_of(env: &BTreeMap<String, String>) -> PathBuf {
    env.get("PWD")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/"))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn check_data_dir(env: &[(&str, &str)], expect: &str) {
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(data_dir(&env, Path::new("/x")), PathBuf::from(expect), "{env:?}");
    }

    #[test]
    fn data_dirs() {
        let jo = ("HOME", "/home/jo");
        check_data_dir(&[("ITERION_HOME", "rel/dir"), jo], "/x/rel/dir");
        check_data_dir(&[("ITERION_HOME", "/d/"), jo], "/d");
        check_data_dir(&[("ITERION_HOME", "/d//")], "/d");
        check_data_dir(&[("ITERION_HOME", "./a/../b")], "/x/b");
        check_data_dir(&[("ITERION_HOME", ""), jo], "/home/jo/.iterion");
        check_data_dir(&[jo], "/home/jo/.iterion");
        check_data_dir(&[], "/tmp/iterion-data");
        check_data_dir(&[("HOME", "")], "/tmp/iterion-data");
        check_data_dir(&[("TMPDIR", "/var/t/")], "/var/t/iterion-data");
        check_data_dir(&[("TMPDIR", "")], "/tmp/iterion-data");
    }

    #[test]
    fn process_facts_and_cwd() {
        let env = BTreeMap::from([("HOME".to_string(), "/home/jo".to_string())]);
        let f = HostFacts::of_process(&env, Path::new("/w"));
        assert_eq!(f.home, Some(PathBuf::from("/home/jo")));
        assert_eq!(f.data_dir, PathBuf::from("/home/jo/.iterion"));
        assert_eq!(f.uid, Some(nix::unistd::getuid().as_raw()));
        assert_eq!(f.os, std::env::consts::OS);
        let pwd = |v: &str| BTreeMap::from([("PWD".to_string(), v.to_string())]);
        assert_eq!(cwd_of(&pwd("/src/app")), PathBuf::from("/src/app"));
        assert_eq!(cwd_of(&pwd("rel")), PathBuf::from("/"));
        assert_eq!(cwd_of(&BTreeMap::new()), PathBuf::from("/"));
    }
}
