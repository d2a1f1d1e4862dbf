//! Host git: the one way iterion runs git on the host.
//!
//! Every git process iterion starts is built here, over [`HostCommand::run_bounded`]:
//!
//! - the program is `git` found once in the operator's trusted `PATH` (never a directory a repository
//!   controls);
//! - the environment is built from scratch: no system or global configuration (`GIT_CONFIG_NOSYSTEM`,
//!   `GIT_CONFIG_GLOBAL=/dev/null`, no system attributes), a `HOME` with nothing in it, no prompt, no replace
//!   objects, only the `file` transport, `LC_ALL=C`, and `GIT_DIR` / `GIT_WORK_TREE` / `GIT_INDEX_FILE` pinned
//!   by the caller ([`Pinned`]) so that git never discovers a repository from a `.git` file, a `commondir` or a
//!   `core.worktree`; with a work tree, attributes come from the empty tree (no `.gitattributes` names a
//!   filter), and the configuration git reads is one iterion wrote;
//! - every call carries [`HARDENED`] as `-c` options (command-line configuration wins over any file): no
//!   hooks, no fsmonitor, no untracked cache, no submodule recursion or submodule status, no alternate-refs
//!   command, no credential helper, no automatic gc or maintenance, no signing;
//! - it is bounded in time, output and memory ([`Limits::for_untrusted_input`]), and a failure is an
//!   [`Error::Git`] naming the git command, its status and its stderr.
//!
//! The one call that reads configuration of the operator's own is [`HostGit::operator_identity`]: a separate,
//! read-only `git config --global --get` for `user.name` and `user.email`, passed to commits explicitly.
//!
//! [`dirs`] finds a checkout's git directories without asking git, and [`sandbox`] reads a sandbox's `.git`
//! as data (its `HEAD`, its object files) so that the host never runs git in a directory a sandbox wrote.
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::env::Env;
use crate::error::{Error, Result};
use crate::spawn::{Bounds, Captured, HostCommand, Limits, find_program, trusted_path};

pub mod dirs;
pub mod sandbox;

pub use dirs::{GitDirs, GitRefusal, find_repository, verify_git_dirs};
pub use sandbox::{CopiedObjects, CopyLimits, copy_objects, is_object_name, sandbox_head};

/// Configuration given to every git call with `-c`: nothing that names a program the repository, a sandbox
/// or the operator's configuration chose runs.
pub const HARDENED: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    // empty: git finds no command and advertises no alternate refs (it never runs for-each-ref elsewhere)
    "core.alternateRefsCommand=",
    "core.askPass=",
    "core.attributesFile=/dev/null",
    "core.pager=cat",
    "core.sparseCheckout=false",
    "credential.helper=",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "gc.auto=0",
    "maintenance.auto=false",
    "fetch.writeCommitGraph=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
];

/// A `HOME` with nothing in it: git finds no `~/.gitconfig`, no `~/.config/git/attributes`.
const EMPTY_HOME: &str = "/nonexistent/iterion-host-git";

/// How long one git command may run unless the caller says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// A repository's object format: SHA-1 or SHA-256 object names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectFormat {
    /// 40 hex digits.
    Sha1,
    /// 64 hex digits.
    Sha256,
}

impl ObjectFormat {
    /// `sha1` / `sha256` (what `git rev-parse --show-object-format` prints).
    pub fn parse(s: &str) -> Option<ObjectFormat> {
        match s.trim() {
            "sha1" => Some(ObjectFormat::Sha1),
            "sha256" => Some(ObjectFormat::Sha256),
            _ => None,
        }
    }

    /// The name git uses.
    pub fn name(self) -> &'static str {
        match self {
            ObjectFormat::Sha1 => "sha1",
            ObjectFormat::Sha256 => "sha256",
        }
    }

    /// How many hex digits an object name has.
    pub fn hex_len(self) -> usize {
        match self {
            ObjectFormat::Sha1 => 40,
            ObjectFormat::Sha256 => 64,
        }
    }

    /// The empty tree's name.
    pub fn empty_tree(self) -> &'static str {
        match self {
            ObjectFormat::Sha1 => "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
            ObjectFormat::Sha256 => "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321",
        }
    }
}

/// The repository a git command works on, every location explicit.
#[derive(Debug, Clone, Copy)]
pub struct Pinned<'a> {
    git_dir: &'a Path,
    work_tree: Option<&'a Path>,
    index: Option<&'a Path>,
    attributes_from: Option<&'static str>,
}

impl<'a> Pinned<'a> {
    /// `GIT_DIR=git_dir`, no work tree: a bare repository iterion created (its configuration is iterion's).
    pub fn bare(git_dir: &'a Path) -> Pinned<'a> {
        Pinned {
            git_dir,
            work_tree: None,
            index: None,
            attributes_from: None,
        }
    }

    /// A repository whose configuration iterion did not write (the operator's), for commands that need no work
    /// tree (`rev-parse`, `fetch`, `update-ref`, `bundle`): `GIT_WORK_TREE` is pinned to `scratch`, a directory
    /// of iterion's own that the command never reads, so that git never follows the repository's
    /// `core.worktree` (which could name any directory of the host, or one that does not exist).
    pub fn foreign(git_dir: &'a Path, scratch: &'a Path) -> Pinned<'a> {
        Pinned {
            git_dir,
            work_tree: Some(scratch),
            index: None,
            attributes_from: None,
        }
    }

    /// A repository iterion created, with a work tree and an index: `GIT_DIR`, `GIT_WORK_TREE` and
    /// `GIT_INDEX_FILE` pinned, and attributes read from the empty tree (`GIT_ATTR_SOURCE`), so that no
    /// `.gitattributes` of the work tree names a filter, an end-of-line conversion or an encoding.
    pub fn checkout(
        git_dir: &'a Path,
        work_tree: &'a Path,
        index: &'a Path,
        format: ObjectFormat,
    ) -> Pinned<'a> {
        Pinned {
            git_dir,
            work_tree: Some(work_tree),
            index: Some(index),
            attributes_from: Some(format.empty_tree()),
        }
    }

    /// The git directory.
    pub fn git_dir(&self) -> &Path {
        self.git_dir
    }
}

/// The author and committer of iterion's commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `user.name`.
    pub name: String,
    /// `user.email`.
    pub email: String,
}

impl Identity {
    /// `iterion <iterion@localhost>`, when the operator configured none.
    pub fn fallback() -> Identity {
        Identity {
            name: "iterion".into(),
            email: "iterion@localhost".into(),
        }
    }

    /// The `GIT_AUTHOR_*` and `GIT_COMMITTER_*` variables of a commit by this identity.
    pub fn vars(&self) -> [(&'static str, &str); 4] {
        [
            ("GIT_AUTHOR_NAME", &self.name),
            ("GIT_AUTHOR_EMAIL", &self.email),
            ("GIT_COMMITTER_NAME", &self.name),
            ("GIT_COMMITTER_EMAIL", &self.email),
        ]
    }
}

/// The hardened git runner. See the module documentation.
#[derive(Debug, Clone)]
pub struct HostGit {
    program: PathBuf,
    path: OsString,
}

impl HostGit {
    /// `git` from the trusted directories of the operator's `PATH` (the `PATH` entry of `env`).
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<HostGit> {
        let path = env.get("PATH").map(OsStr::new);
        let program = find_program(OsStr::new("git"), path, &[])?;
        let path = trusted_path(path, &[]).unwrap_or_default();
        Ok(HostGit { program, path })
    }

    /// The git program that runs.
    pub fn program(&self) -> &Path {
        &self.program
    }

    fn base_env(&self) -> Env {
        Env::new()
            .with("PATH", &self.path)
            .with("HOME", EMPTY_HOME)
            .with("LC_ALL", "C")
            .with("GIT_CONFIG_NOSYSTEM", "1")
            .with("GIT_CONFIG_SYSTEM", "/dev/null")
            .with("GIT_CONFIG_GLOBAL", "/dev/null")
            .with("GIT_ATTR_NOSYSTEM", "1")
            .with("GIT_TERMINAL_PROMPT", "0")
            .with("GIT_NO_REPLACE_OBJECTS", "1")
            .with("GIT_ALLOW_PROTOCOL", "file")
            .with("GIT_PAGER", "cat")
            .with("GIT_ADVICE", "0")
    }

    /// A call of git on `at` (call [`GitCall::run`]).
    pub fn at<'g>(&'g self, at: Pinned<'_>) -> GitCall<'g> {
        let mut env = self.base_env();
        env.set("GIT_DIR", at.git_dir);
        if let Some(w) = at.work_tree {
            env.set("GIT_WORK_TREE", w);
        }
        if let Some(i) = at.index {
            env.set("GIT_INDEX_FILE", i);
        }
        if let Some(tree) = at.attributes_from {
            env.set("GIT_ATTR_SOURCE", tree);
        }
        let mut paths = vec![at.git_dir];
        paths.extend(at.work_tree);
        paths.extend(at.index);
        let relative = paths.iter().find(|p| !p.is_absolute()).map(|p| p.to_path_buf());
        GitCall {
            git: self,
            env,
            cwd: at.git_dir.to_path_buf(),
            config: Vec::new(),
            args: Vec::new(),
            input: None,
            bounds: Bounds::new(DEFAULT_TIMEOUT),
            relative,
        }
    }

    /// A call of git on no repository, run in `cwd` (`git init`): `GIT_DIR` is not set.
    pub fn outside<'g>(&'g self, cwd: &Path) -> GitCall<'g> {
        GitCall {
            git: self,
            env: self.base_env(),
            cwd: cwd.to_path_buf(),
            config: Vec::new(),
            args: Vec::new(),
            input: None,
            bounds: Bounds::new(DEFAULT_TIMEOUT),
            relative: (!cwd.is_absolute()).then(|| cwd.to_path_buf()),
        }
    }

    /// `user.name` and `user.email` of the operator's own global configuration (through `HOME`,
    /// `XDG_CONFIG_HOME` or `GIT_CONFIG_GLOBAL` of `operator`, with its includes; `includeIf "gitdir:…"`
    /// evaluated against `repo` when given), else [`Identity::fallback`] for each. Read-only: `git config
    /// --global --get` reads no repository configuration and runs nothing a configuration names.
    pub fn operator_identity(
        &self,
        operator: &BTreeMap<String, String>,
        repo: Option<Pinned<'_>>,
    ) -> Identity {
        let fallback = Identity::fallback();
        let get = |key: &str| {
            let mut env = Env::new()
                .with("PATH", &self.path)
                .with("LC_ALL", "C")
                .with("GIT_CONFIG_NOSYSTEM", "1")
                .with("GIT_TERMINAL_PROMPT", "0");
            for name in ["HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL"] {
                if let Some(v) = operator.get(name) {
                    env.set(name, v);
                }
            }
            match repo {
                Some(at) => {
                    env.set("GIT_DIR", at.git_dir);
                    if let Some(w) = at.work_tree {
                        env.set("GIT_WORK_TREE", w);
                    }
                }
                None => {
                    env.set("GIT_DIR", "/nonexistent/iterion-no-repository");
                }
            }
            let out = HostCommand::new(&self.program, env)
                .current_dir("/")
                .args(["config", "--global", "--includes", "--get", key])
                .limits(Limits::for_untrusted_input())
                .run_bounded(None, Bounds::new(Duration::from_secs(30)).max_stdout(4096))
                .ok()?;
            let v = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (out.status.success() && !v.is_empty() && !v.contains(['<', '>', '\n'])).then_some(v)
        };
        Identity {
            name: get("user.name").unwrap_or(fallback.name),
            email: get("user.email").unwrap_or(fallback.email),
        }
    }
}

/// One git command being built; see [`HostGit::at`].
#[derive(Debug)]
pub struct GitCall<'g> {
    git: &'g HostGit,
    env: Env,
    cwd: PathBuf,
    config: Vec<String>,
    args: Vec<OsString>,
    input: Option<Vec<u8>>,
    bounds: Bounds,
    relative: Option<PathBuf>,
}

impl GitCall<'_> {
    /// One more `-c name=value` for this call, such as `fetch.fsckObjects=true`. A name that [`HARDENED`] sets
    /// is refused when the call is built: nothing can weaken it.
    #[must_use]
    pub fn config(mut self, name_value: &str) -> Self {
        self.config.push(name_value.to_owned());
        self
    }

    /// Adds an argument.
    #[must_use]
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.args.push(a.as_ref().to_os_string());
        self
    }

    /// Adds arguments.
    #[must_use]
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Sets a variable of this call (an identity: `GIT_AUTHOR_NAME`, …).
    #[must_use]
    pub fn env(mut self, name: &str, value: impl AsRef<OsStr>) -> Self {
        self.env.set(name, value);
        self
    }

    /// Bytes written to git's stdin.
    #[must_use]
    pub fn input(mut self, bytes: Vec<u8>) -> Self {
        self.input = Some(bytes);
        self
    }

    /// Another time limit.
    #[must_use]
    pub fn timeout(mut self, d: Duration) -> Self {
        self.bounds.timeout = d;
        self
    }

    /// The git subcommand (the first argument), for messages.
    fn verb(&self) -> String {
        self.args
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The command as a [`HostCommand`] (for a caller that streams its output): the same program,
    /// environment, `-c` options, working directory and limits. Standard streams are the caller's to set.
    pub fn into_command(self) -> Result<HostCommand> {
        if let Some(p) = &self.relative {
            return Err(Error::Git {
                verb: self.verb(),
                status: "not run".into(),
                stderr: format!("{} is not an absolute path", p.display()),
            });
        }
        let key = |kv: &str| kv.split('=').next().unwrap_or_default().to_ascii_lowercase();
        if let Some(c) = self
            .config
            .iter()
            .find(|c| HARDENED.iter().any(|h| key(h) == key(c)))
        {
            return Err(Error::Git {
                verb: self.verb(),
                status: "not run".into(),
                stderr: format!("-c {c} would override the hardened configuration"),
            });
        }
        let mut cmd = HostCommand::new(&self.git.program, self.env)
            .current_dir(self.cwd)
            .limits(Limits::for_untrusted_input());
        for c in HARDENED
            .iter()
            .copied()
            .chain(self.config.iter().map(String::as_str))
        {
            cmd = cmd.arg("-c").arg(c);
        }
        Ok(cmd.args(self.args))
    }

    /// Runs the command to its end: stdout (trimmed) on success, else [`Error::Git`].
    pub fn run(self) -> Result<String> {
        let c = self.run_captured()?;
        Ok(String::from_utf8_lossy(&c.stdout).trim().to_owned())
    }

    /// Runs the command to its end and returns what it wrote; a non-zero exit is [`Error::Git`].
    pub fn run_captured(self) -> Result<Captured> {
        let verb = self.verb();
        let (input, bounds) = (self.input.clone(), self.bounds);
        let c = self.into_command()?.run_bounded(input, bounds)?;
        if !c.status.success() {
            return Err(Error::Git {
                verb,
                status: c
                    .status
                    .code()
                    .map_or("killed by a signal".to_owned(), |n| format!("exit status {n}")),
                stderr: String::from_utf8_lossy(&c.stderr).trim().to_owned(),
            });
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests;
