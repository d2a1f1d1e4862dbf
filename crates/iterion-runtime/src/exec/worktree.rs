//! `worktree: auto`: the run works in a workspace of its own under the store, and what it produced becomes the
//! branch `iterion/run/<friendly name>` of the operator's repository when the run finishes.
//!
//! The sandbox never sees the operator's git directory writable, and host git never runs in a directory a
//! sandbox wrote. For run `<id>` of store `<store>`:
//!
//! - `<store>/gitdirs/<id>` is the **host git dir**: a bare repository iterion creates, never mounted into a
//!   sandbox, whose `objects/info/alternates` names the operator's object directory (only read). Its index
//!   describes the workspace; a marker file names the run (checked on resume). Every git command on it goes
//!   through [`HostGit`] with its locations pinned and attributes from the empty tree, and its configuration
//!   is the one `git init` wrote: no filter, hook or fsmonitor exists in it.
//! - `<store>/worktrees/<id>` is the **workspace**, the run's work dir: the base commit checked out from the
//!   host git dir with plumbing (`read-tree -u`), and a private `.git` — a standalone repository at the base
//!   commit whose objects come from the operator's object directory, bound read-only into the sandbox at
//!   [`OBJECTS_TARGET`] (its alternates file names that container path, never a host path). Agents can
//!   commit there; nothing they write there reaches the operator's repository except through the import
//!   below.
//! - When the run finishes and its sandbox is gone, the sandbox's `.git` is read as data: its `HEAD`
//!   ([`sandbox_head`]) and its object files ([`copy_objects`]) go into a quarantine repository of iterion's
//!   own, and from there into the host git dir by a local fetch that checks every object (`fsck`). What the
//!   work tree holds beyond that commit is committed in the host git dir with its own index. The result is
//!   fetched into the operator's repository (again with `fsck`) and `refs/heads/iterion/run/<name>` is
//!   created by `update-ref` — create only, never through `HEAD`, never moving an existing branch.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iterion_boundary::git::{
    CopyLimits, GitDirs, HostGit, ObjectFormat, Pinned, copy_objects, find_repository, sandbox_head,
};

use crate::error::{Error, Result};

/// Where the operator's object directory is bound (read-only) in a sandbox whose workspace has a private
/// `.git`; that repository's `objects/info/alternates` names this path.
pub const OBJECTS_TARGET: &str = "/run/iterion/git/objects";

/// The marker file of a host git dir: the run id, written when iterion created it.
const MARKER: &str = "iterion-run";
/// An empty directory of the host git dir: the work tree of commands on the operator's repository that need
/// none, so that its `core.worktree` is never read.
const SCRATCH: &str = "scratch";
/// The quarantine repository inside the host git dir that a sandbox's objects are copied into.
const QUARANTINE: &str = "import.git";

/// The repository that holds a work dir: its top level and its verified git directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRepo {
    /// The top level: the directory with the `.git`.
    pub root: PathBuf,
    /// Its git directories.
    pub dirs: GitDirs,
}

/// A run's workspace and the host git dir behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// `<store>/worktrees/<run id>`: the run's work dir.
    pub path: PathBuf,
    /// HEAD of the operator's repository when the workspace was created.
    pub base_commit: String,
    /// `<store>/gitdirs/<run id>`: the host git dir.
    pub git_dir: PathBuf,
    /// The operator's git directories.
    pub repo: GitDirs,
    /// The operator's object format.
    pub format: ObjectFormat,
}

impl Worktree {
    /// The operator's object directory, bound read-only at [`OBJECTS_TARGET`].
    pub fn objects_dir(&self) -> PathBuf {
        self.repo.objects_dir()
    }

    fn scratch(&self) -> PathBuf {
        self.git_dir.join(SCRATCH)
    }

    fn index(&self) -> PathBuf {
        self.git_dir.join("index")
    }
}

/// What [`finish_worktree`] recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedWorktree {
    /// The run's result: the last commit (the base commit when nothing changed).
    pub final_commit: String,
    /// `iterion/run/<friendly name>` when the result differs from the base commit.
    pub final_branch: Option<String>,
    /// Whether changes of the work tree were committed by iterion.
    pub committed: bool,
    /// Whether commits made inside the sandbox were taken over.
    pub imported: bool,
    /// Things worth a warning (a sandbox `HEAD` that named nothing usable).
    pub notes: Vec<String>,
}

fn fail(op: &'static str) -> impl Fn(iterion_boundary::Error) -> Error {
    move |e| Error::Worktree {
        op,
        reason: e.to_string(),
    }
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl Fn(std::io::Error) -> Error + 'a {
    move |e| Error::Worktree {
        op,
        reason: format!("{}: {e}", path.display()),
    }
}

/// `<store>/gitdirs/<run id>`.
pub fn host_git_dir(store_dir: &Path, run_id: &str) -> PathBuf {
    store_dir.join("gitdirs").join(run_id)
}

/// The repository that holds `work_dir`: the nearest directory at or above it with a `.git` (never what the
/// repository's `core.worktree` says), its pointers verified. `Ok(None)` outside any repository; a pointer
/// that does not verify is an [`Error::Worktree`] naming it and the remedy.
pub fn source_repo(work_dir: &Path) -> Result<Option<SourceRepo>> {
    match find_repository(work_dir) {
        Ok(found) => Ok(found.map(|(root, dirs)| SourceRepo { root, dirs })),
        Err(r) => Err(Error::Worktree {
            op: "find the repository",
            reason: format!("{r} ({})", r.remedy),
        }),
    }
}

/// The hardened git of `env`'s `PATH`.
fn host_git(env: &BTreeMap<String, String>, op: &'static str) -> Result<HostGit> {
    HostGit::from_env(env).map_err(fail(op))
}

/// Creates the host git dir `git_dir` and the workspace `path` of run `run_id` at HEAD of `repo` (see the
/// module documentation). Both must not exist yet. A repository without a commit, or any git error, is an
/// [`Error::Worktree`] (`WORKTREE_FAILED`); what was created is removed again.
pub fn create_worktree(
    repo: &SourceRepo,
    path: &Path,
    git_dir: &Path,
    run_id: &str,
    env: &BTreeMap<String, String>,
) -> Result<Worktree> {
    let git = host_git(env, "create the workspace")?;
    for dir in [git_dir, path] {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(io("create the workspace", parent))?;
        }
    }
    std::fs::create_dir(git_dir).map_err(io("create the host git dir", git_dir))?;
    let made = populate(&git, repo, path, git_dir, run_id);
    if made.is_err() {
        let _ = std::fs::remove_dir_all(git_dir);
        let _ = std::fs::remove_dir_all(path);
    }
    made
}

fn populate(git: &HostGit, repo: &SourceRepo, path: &Path, git_dir: &Path, run_id: &str) -> Result<Worktree> {
    let scratch = git_dir.join(SCRATCH);
    std::fs::create_dir(&scratch).map_err(io("create the host git dir", &scratch))?;
    let operator = Pinned::foreign(&repo.dirs.git_dir, &scratch);
    let format = git
        .at(operator)
        .args(["rev-parse", "--show-object-format"])
        .run()
        .map_err(fail("read the repository"))?;
    let format = ObjectFormat::parse(&format).ok_or_else(|| Error::Worktree {
        op: "read the repository",
        reason: format!("unknown object format {format:?}"),
    })?;
    let base_commit = git
        .at(operator)
        .args(["rev-parse", "--verify", "HEAD^{commit}"])
        .run()
        .map_err(fail("rev-parse HEAD"))?;
    init_bare(git, git_dir, format, &repo.dirs.objects_dir())?;
    std::fs::write(git_dir.join(MARKER), format!("{run_id}\n"))
        .map_err(io("create the host git dir", git_dir))?;
    let host = Pinned::bare(git_dir);
    git.at(host)
        .args(["update-ref", "--no-deref", "HEAD", &base_commit])
        .run()
        .map_err(fail("create the host git dir"))?;
    std::fs::create_dir(path).map_err(io("create the workspace", path))?;
    let wt = Worktree {
        path: path.to_path_buf(),
        base_commit,
        git_dir: git_dir.to_path_buf(),
        repo: repo.dirs.clone(),
        format,
    };
    let index = wt.index();
    git.at(Pinned::checkout(git_dir, path, &index, format))
        .args(["read-tree", "--reset", "-u", &wt.base_commit])
        .run()
        .map_err(fail("check out the base commit"))?;
    private_repository(&wt)?;
    Ok(wt)
}

/// The uncommitted and untracked changes of the operator's checkout at `root` (the repository of `wt`) (`git status` paths, at most `limit`
/// of them, and how many there are in all): a `worktree: auto` run works on a fresh checkout of HEAD and does
/// not see them. Read with the hardened git: the index is not rewritten (`--no-optional-locks`), attributes
/// come from the empty tree (no filter runs), submodules are not entered.
pub fn checkout_changes(
    wt: &Worktree,
    root: &Path,
    env: &BTreeMap<String, String>,
    limit: usize,
) -> Result<(Vec<String>, usize)> {
    let git = host_git(env, "read the checkout")?;
    let index = wt.repo.git_dir.join("index");
    let out = git
        .at(Pinned::checkout(&wt.repo.git_dir, root, &index, wt.format))
        .args([
            "--no-optional-locks",
            "status",
            "--porcelain=v1",
            "-z",
            "--no-renames",
            "--ignore-submodules=all",
            "--untracked-files=normal",
        ])
        .run_captured()
        .map_err(fail("read the checkout"))?;
    let entries: Vec<&[u8]> = out.stdout.split(|b| *b == 0).filter(|e| e.len() > 3).collect();
    let shown = entries
        .iter()
        .take(limit)
        .map(|e| String::from_utf8_lossy(&e[3..]).into_owned())
        .collect();
    Ok((shown, entries.len()))
}

/// `git init --bare` at `dir` (no template: no sample hooks) borrowing objects from `objects`.
fn init_bare(git: &HostGit, dir: &Path, format: ObjectFormat, objects: &Path) -> Result<()> {
    let parent = dir.parent().unwrap_or(Path::new("/"));
    git.outside(parent)
        .args(["init", "-q", "--bare", "--template="])
        .arg(format!("--object-format={}", format.name()))
        .arg(dir)
        .run()
        .map_err(fail("create a host git dir"))?;
    let info = dir.join("objects/info");
    std::fs::create_dir_all(&info).map_err(io("create a host git dir", &info))?;
    std::fs::write(info.join("alternates"), format!("{}\n", objects.display()))
        .map_err(io("create a host git dir", &info))
}

/// The workspace's private `.git`: HEAD at the base commit (detached), objects borrowed from
/// [`OBJECTS_TARGET`], the index of the checkout (so `git status` inside starts clean).
fn private_repository(wt: &Worktree) -> Result<()> {
    let dot = wt.path.join(".git");
    let op = "create the workspace's repository";
    for d in [
        "objects/info",
        "objects/pack",
        "refs/heads",
        "refs/tags",
        "hooks",
        "info",
    ] {
        std::fs::create_dir_all(dot.join(d)).map_err(io(op, &dot))?;
    }
    let (version, extension) = match wt.format {
        ObjectFormat::Sha1 => (0, String::new()),
        ObjectFormat::Sha256 => (1, "[extensions]\n\tobjectformat = sha256\n".to_owned()),
    };
    let config = format!(
        "[core]\n\trepositoryformatversion = {version}\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n{extension}"
    );
    let write = |rel: &str, text: String| std::fs::write(dot.join(rel), text).map_err(io(op, &dot));
    write("config", config)?;
    write("HEAD", format!("{}\n", wt.base_commit))?;
    write("objects/info/alternates", format!("{OBJECTS_TARGET}\n"))?;
    write("description", "iterion run workspace\n".to_owned())?;
    std::fs::copy(wt.index(), dot.join("index")).map_err(io(op, &dot))?;
    Ok(())
}

/// The workspace of a run being resumed: `git_dir` must still be the host git dir iterion created for
/// `run_id` (a real directory, its marker naming the run) and `path` a real directory; the repository is
/// found again from `repo_root`. Nothing in the workspace is read. Anything else is an [`Error::Worktree`].
pub fn reopen_worktree(
    repo_root: &Path,
    path: &Path,
    git_dir: &Path,
    run_id: &str,
    base_commit: &str,
    env: &BTreeMap<String, String>,
) -> Result<Worktree> {
    let gone = |reason: String| Error::Worktree {
        op: "reopen the workspace",
        reason,
    };
    let real_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    if !real_dir(path) {
        return Err(gone(format!("{} no longer exists", path.display())));
    }
    let marker = iterion_boundary::git::dirs::read_small_file(&git_dir.join(MARKER), 4096);
    let ours =
        real_dir(git_dir) && matches!(&marker, Ok(Some(m)) if String::from_utf8_lossy(m).trim() == run_id);
    if !ours {
        return Err(gone(format!(
            "{} is not the host git dir iterion created for run {run_id}",
            git_dir.display()
        )));
    }
    let repo = source_repo(repo_root)?
        .ok_or_else(|| gone(format!("{} is no longer a git repository", repo_root.display())))?;
    let git = host_git(env, "reopen the workspace")?;
    let format = git
        .at(Pinned::bare(git_dir))
        .args(["rev-parse", "--show-object-format"])
        .run()
        .map_err(fail("reopen the workspace"))?;
    let format =
        ObjectFormat::parse(&format).ok_or_else(|| gone(format!("unknown object format {format:?}")))?;
    Ok(Worktree {
        path: path.to_path_buf(),
        base_commit: base_commit.to_owned(),
        git_dir: git_dir.to_path_buf(),
        repo: repo.dirs,
        format,
    })
}

/// Removes the workspace and the host git dir (symbolic links inside are removed, never followed).
pub fn remove_worktree(path: &Path, git_dir: &Path) -> Result<()> {
    for dir in [path, git_dir] {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io("remove the workspace", dir)(e));
            }
            _ => {}
        }
    }
    Ok(())
}

/// On `finished`, with the sandbox gone: takes over the commits made in the workspace's `.git`, commits what
/// the work tree holds beyond them as `iterion: <workflow> run <friendly name>` (identity from the operator's
/// global git config, else `iterion <iterion@localhost>`), and when the result differs from the base commit
/// creates `iterion/run/<friendly name>` in the operator's repository; then removes the workspace and the host
/// git dir. On any error both are kept (nothing is lost) and the caller says so.
pub fn finish_worktree(
    wt: &Worktree,
    workflow: &str,
    friendly_name: &str,
    env: &BTreeMap<String, String>,
) -> Result<FinishedWorktree> {
    let git = host_git(env, "commit the run")?;
    let mut notes = Vec::new();
    let parent = import_sandbox_commits(&git, wt, &mut notes)?;
    let (final_commit, committed) = commit_work_tree(&git, wt, &parent, workflow, friendly_name, env)?;
    let final_branch = if final_commit != wt.base_commit {
        let branch = format!("iterion/run/{friendly_name}");
        publish(&git, wt, &final_commit, &branch)?;
        Some(branch)
    } else {
        None
    };
    remove_worktree(&wt.path, &wt.git_dir)?;
    Ok(FinishedWorktree {
        final_commit,
        final_branch,
        committed,
        imported: parent != wt.base_commit,
        notes,
    })
}

/// The commit the sandbox's `.git` has at `HEAD`, taken into the host git dir (its objects read as files,
/// checked by `fsck` on the way); the base commit when the sandbox made none or its `HEAD` names nothing usable
/// (then a note says why).
fn import_sandbox_commits(git: &HostGit, wt: &Worktree, notes: &mut Vec<String>) -> Result<String> {
    let dot = wt.path.join(".git");
    let head = match sandbox_head(&dot, wt.format.hex_len()) {
        Ok(h) => h,
        Err(why) => {
            notes.push(format!(
                "the workspace's repository names no commit ({why}); only its files are committed"
            ));
            return Ok(wt.base_commit.clone());
        }
    };
    if head == wt.base_commit {
        return Ok(head);
    }
    let q = wt.git_dir.join(QUARANTINE);
    let _ = std::fs::remove_dir_all(&q);
    init_bare(git, &q, wt.format, &wt.objects_dir())?;
    let copied = copy_objects(
        &dot,
        &q.join("objects"),
        wt.format.hex_len(),
        CopyLimits::default(),
    )
    .map_err(fail("read the sandbox's commits"))?;
    let quarantine = Pinned::bare(&q);
    for pack in &copied.packs {
        git.at(quarantine)
            .arg("index-pack")
            .arg(pack)
            .run()
            .map_err(fail("read the sandbox's commits"))?;
    }
    git.at(quarantine)
        .args(["update-ref", "refs/heads/import", &head])
        .run()
        .map_err(fail("read the sandbox's commits"))?;
    git.at(Pinned::bare(&wt.git_dir))
        .config("fetch.fsckObjects=true")
        .args([
            "fetch",
            "-q",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
        ])
        .arg(&q)
        .arg("+refs/heads/import:refs/iterion/sandbox")
        .run()
        .map_err(fail("take over the sandbox's commits"))?;
    let _ = std::fs::remove_dir_all(&q);
    Ok(head)
}

/// Commits the work tree on `parent` in the host git dir (its own index; `.git` of the workspace is never
/// read). Returns the result and whether a commit was made.
fn commit_work_tree(
    git: &HostGit,
    wt: &Worktree,
    parent: &str,
    workflow: &str,
    friendly_name: &str,
    env: &BTreeMap<String, String>,
) -> Result<(String, bool)> {
    let index = wt.index();
    let at = Pinned::checkout(&wt.git_dir, &wt.path, &index, wt.format);
    if parent != wt.base_commit {
        git.at(at)
            .args(["read-tree", parent])
            .run()
            .map_err(fail("commit the run"))?;
    }
    git.at(at).args(["add", "-A"]).run().map_err(fail("add"))?;
    let tree = git.at(at).args(["write-tree"]).run().map_err(fail("add"))?;
    let parent_tree = git
        .at(at)
        .args(["rev-parse", &format!("{parent}^{{tree}}")])
        .run()
        .map_err(fail("commit the run"))?;
    if tree == parent_tree {
        return Ok((parent.to_owned(), false));
    }
    let scratch = wt.scratch();
    let who = git.operator_identity(env, Some(Pinned::foreign(&wt.repo.git_dir, &scratch)));
    let message = format!("iterion: {workflow} run {friendly_name}");
    let mut call =
        git.at(Pinned::bare(&wt.git_dir))
            .args(["commit-tree", &tree, "-p", parent, "-m", &message]);
    for (k, v) in who.vars() {
        call = call.env(k, v);
    }
    let commit = call.run().map_err(fail("commit"))?;
    Ok((commit, true))
}

/// Fetches `commit` from the host git dir into the operator's repository and creates `refs/heads/<branch>` at
/// it (create only: an existing branch is an error, never moved).
fn publish(git: &HostGit, wt: &Worktree, commit: &str, branch: &str) -> Result<()> {
    git.at(Pinned::bare(&wt.git_dir))
        .args(["update-ref", "refs/iterion/result", commit])
        .run()
        .map_err(fail("branch"))?;
    let scratch = wt.scratch();
    let operator = Pinned::foreign(&wt.repo.common_dir, &scratch);
    git.at(operator)
        .config("fetch.fsckObjects=true")
        .args([
            "fetch",
            "-q",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
        ])
        .arg(&wt.git_dir)
        .arg("refs/iterion/result")
        .run()
        .map_err(fail("fetch the result into the repository"))?;
    git.at(operator)
        .args(["update-ref", &format!("refs/heads/{branch}"), commit, ""])
        .run()
        .map_err(fail("branch"))?;
    Ok(())
}

/// `git bundle create - HEAD` of the work dir's repository, for the git fixup of a pod (which cannot see the
/// host's git directories): the host git dir of a `worktree: auto` run, else the verified git dir of the
/// work dir (a linked worktree of the operator's). stdout (the bundle) and stderr piped, stdin closed; the
/// caller turns it into a process it streams from ([`iterion_boundary::HostCommand::into_tokio`]).
pub(crate) fn bundle_head_command(
    work_dir: &Path,
    worktree: Option<&Worktree>,
    env: &BTreeMap<String, String>,
) -> std::result::Result<iterion_boundary::HostCommand, String> {
    use iterion_boundary::Pipe;
    let git = HostGit::from_env(env).map_err(|e| e.to_string())?;
    let dirs;
    let at = match worktree {
        Some(wt) => Pinned::bare(&wt.git_dir),
        None => {
            dirs = iterion_boundary::git::verify_git_dirs(work_dir)
                .map_err(|r| r.to_string())?
                .ok_or_else(|| format!("{} is not a git checkout", work_dir.display()))?;
            // the operator's checkout is the work tree; bundle reads none of it
            Pinned::foreign(&dirs.git_dir, work_dir)
        }
    };
    Ok(git
        .at(at)
        .args(["bundle", "create", "-", "HEAD"])
        .into_command()
        .map_err(|e| e.to_string())?
        .stdin(Pipe::Null)
        .stdout(Pipe::Piped)
        .stderr(Pipe::Piped))
}

#[cfg(test)]
mod tests;
