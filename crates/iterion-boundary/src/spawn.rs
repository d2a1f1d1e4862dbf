//! [`HostCommand`]: the one way iterion starts a program on the host.
//!
//! A host command starts from an [`Env`] the caller built (nothing of iterion's own environment leaks in), its
//! program is an absolute path or a bare name found in an absolute, trusted directory of that environment's `PATH`
//! (never an empty or relative entry, which the working directory would resolve, never a directory a repository
//! or a sandbox controls), it runs in its own process group so a limit can end everything it started, and it can
//! carry resource limits (address space for data, CPU time, file size) set between fork and exec.
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use crate::env::Env;
use crate::error::{Error, Result};

/// What a standard stream of the program is connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pipe {
    /// `/dev/null`.
    Null,
    /// A pipe to iterion.
    Piped,
    /// iterion's own stream (for programs the operator watches, such as an editor).
    Inherit,
}

impl Pipe {
    fn stdio(self) -> Stdio {
        match self {
            Pipe::Null => Stdio::null(),
            Pipe::Piped => Stdio::piped(),
            Pipe::Inherit => Stdio::inherit(),
        }
    }
}

/// Resource limits set in the child between fork and exec (`setrlimit`, soft and hard).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// `RLIMIT_DATA`: heap and private writable mappings, in bytes (file mappings such as git's pack files do
    /// not count).
    pub data_bytes: Option<u64>,
    /// `RLIMIT_CPU`, in seconds.
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_FSIZE`: the largest file the program may write, in bytes.
    pub file_bytes: Option<u64>,
}

impl Limits {
    /// No limits.
    pub fn none() -> Limits {
        Limits::default()
    }

    /// Limits for a program that reads data a sandbox wrote: 2 GiB of data, 10 minutes of CPU.
    pub fn for_untrusted_input() -> Limits {
        Limits {
            data_bytes: Some(2 << 30),
            cpu_seconds: Some(600),
            file_bytes: None,
        }
    }

    fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

/// Bounds of [`HostCommand::run_bounded`]: the wall-clock limit and the most bytes kept of each stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bounds {
    /// Past this the process group is killed and the run is [`Error::TimedOut`].
    pub timeout: Duration,
    /// More stdout than this kills the process group: [`Error::OutputTooLarge`].
    pub max_stdout: usize,
    /// More stderr than this is dropped (the tail is not kept; the program is not killed for it).
    pub max_stderr: usize,
}

impl Bounds {
    /// `timeout`, 16 MiB of stdout, 64 KiB of stderr.
    pub fn new(timeout: Duration) -> Bounds {
        Bounds {
            timeout,
            max_stdout: 16 << 20,
            max_stderr: 64 << 10,
        }
    }

    /// The same with another stdout limit.
    #[must_use]
    pub fn max_stdout(mut self, bytes: usize) -> Bounds {
        self.max_stdout = bytes;
        self
    }
}

/// What a bounded run produced.
#[derive(Debug)]
pub struct Captured {
    /// How the program ended.
    pub status: ExitStatus,
    /// Everything it wrote on stdout.
    pub stdout: Vec<u8>,
    /// The first [`Bounds::max_stderr`] bytes of its stderr.
    pub stderr: Vec<u8>,
}

/// A program to start on the host, from an explicit environment. See the module documentation.
#[derive(Debug)]
pub struct HostCommand {
    program: OsString,
    args: Vec<OsString>,
    env: Env,
    cwd: Option<PathBuf>,
    untrusted: Vec<PathBuf>,
    stdin: Pipe,
    stdout: Pipe,
    stderr: Pipe,
    own_group: bool,
    ids: Option<(u32, u32)>,
    limits: Limits,
}

impl HostCommand {
    /// `program` (an absolute path, or a bare name looked up in `env`'s `PATH`) with exactly `env`. Standard
    /// streams default to `/dev/null`; the program gets its own process group.
    pub fn new(program: impl AsRef<OsStr>, env: Env) -> HostCommand {
        HostCommand {
            program: program.as_ref().to_os_string(),
            args: Vec::new(),
            env,
            cwd: None,
            untrusted: Vec::new(),
            stdin: Pipe::Null,
            stdout: Pipe::Null,
            stderr: Pipe::Null,
            own_group: true,
            ids: None,
            limits: Limits::none(),
        }
    }

    /// Adds an argument.
    #[must_use]
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> HostCommand {
        self.args.push(a.as_ref().to_os_string());
        self
    }

    /// Adds arguments.
    #[must_use]
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> HostCommand {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// The working directory.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> HostCommand {
        self.cwd = Some(dir.into());
        self
    }

    /// A directory a repository or a sandbox controls: no program is looked up in a `PATH` entry inside it.
    #[must_use]
    pub fn untrusted_dir(mut self, dir: impl Into<PathBuf>) -> HostCommand {
        self.untrusted.push(dir.into());
        self
    }

    /// Where stdin comes from.
    #[must_use]
    pub fn stdin(mut self, p: Pipe) -> HostCommand {
        self.stdin = p;
        self
    }

    /// Where stdout goes.
    #[must_use]
    pub fn stdout(mut self, p: Pipe) -> HostCommand {
        self.stdout = p;
        self
    }

    /// Where stderr goes.
    #[must_use]
    pub fn stderr(mut self, p: Pipe) -> HostCommand {
        self.stderr = p;
        self
    }

    /// Whether the program gets its own process group (the default): a limit then kills what it started too.
    #[must_use]
    pub fn own_process_group(mut self, yes: bool) -> HostCommand {
        self.own_group = yes;
        self
    }

    /// Runs the program as `uid`:`gid` (iterion must be allowed to switch).
    #[must_use]
    pub fn user(mut self, uid: u32, gid: u32) -> HostCommand {
        self.ids = Some((uid, gid));
        self
    }

    /// Resource limits of the program.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> HostCommand {
        self.limits = limits;
        self
    }

    /// The environment the program will get.
    pub fn env(&self) -> &Env {
        &self.env
    }

    /// The file that will run: `program` itself when absolute, else its match in `PATH`.
    pub fn resolve(&self) -> Result<PathBuf> {
        find_program(&self.program, self.env.get("PATH"), &self.untrusted)
    }

    /// A `std::process::Command` with every setting applied (the environment cleared first).
    pub fn into_std(self) -> Result<std::process::Command> {
        let program = self.resolve()?;
        let mut cmd = std::process::Command::new(&program);
        // the program sees the name it was asked for as argv[0] (`$0` of a shell), as an exec by name gives it
        cmd.arg0(&self.program)
            .args(&self.args)
            .env_clear()
            .envs(self.env.iter())
            .stdin(self.stdin.stdio())
            .stdout(self.stdout.stdio())
            .stderr(self.stderr.stdio());
        if let Some(d) = &self.cwd {
            cmd.current_dir(d);
        }
        if self.own_group {
            cmd.process_group(0);
        }
        if let Some((uid, gid)) = self.ids {
            cmd.uid(uid).gid(gid);
        }
        if !self.limits.is_empty() {
            let limits = self.limits;
            #[allow(unsafe_code)]
            // SAFETY: the closure only calls setrlimit(2), which is async-signal-safe, and allocates nothing.
            unsafe {
                cmd.pre_exec(move || apply_limits(limits));
            }
        }
        Ok(cmd)
    }

    /// A `tokio::process::Command` with every setting applied (the environment cleared first).
    pub fn into_tokio(self) -> Result<tokio::process::Command> {
        Ok(tokio::process::Command::from(self.into_std()?))
    }

    /// Runs the program to its end within `bounds`, writing `input` to its stdin (closed after), and returns
    /// what it wrote. Past the timeout, or past the stdout limit, the whole process group is killed and the run
    /// is an error. Blocking: call it off the async threads.
    pub fn run_bounded(mut self, input: Option<Vec<u8>>, bounds: Bounds) -> Result<Captured> {
        self.stdin = if input.is_some() { Pipe::Piped } else { Pipe::Null };
        self.stdout = Pipe::Piped;
        self.stderr = Pipe::Piped;
        self.own_group = true;
        let program = self.resolve()?;
        let mut child = self.into_std()?.spawn().map_err(|source| Error::Spawn {
            program: program.clone(),
            source,
        })?;
        let pid = child.id();
        let group = nix::unistd::Pid::from_raw(pid as i32);
        let kill = move || {
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        };
        let writer = match (child.stdin.take(), input) {
            (Some(mut stdin), Some(bytes)) => Some(std::thread::spawn(move || {
                // a program that exits without reading is judged by its status
                let _ = stdin.write_all(&bytes);
            })),
            _ => None,
        };
        let out = child
            .stdout
            .take()
            .map(|s| reader(s, bounds.max_stdout, Some(Box::new(kill))));
        let err = child.stderr.take().map(|s| reader(s, bounds.max_stderr, None));
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = match rx.recv_timeout(bounds.timeout) {
            Ok(s) => s,
            Err(_) => {
                kill();
                let _ = waiter.join();
                drain(out, err, writer);
                return Err(Error::TimedOut {
                    program,
                    after: bounds.timeout,
                });
            }
        };
        let _ = waiter.join();
        let status = status.map_err(|source| Error::Wait {
            program: program.clone(),
            source,
        })?;
        // the group may live on (a daemon the program started): its pipes would keep the readers waiting
        kill();
        let (stdout, stderr) = drain(out, err, writer);
        let (stdout, overflow) = stdout;
        if overflow {
            return Err(Error::OutputTooLarge {
                program,
                stream: "stdout",
                limit: bounds.max_stdout,
            });
        }
        Ok(Captured {
            status,
            stdout,
            stderr: stderr.0,
        })
    }
}

type Reader = std::thread::JoinHandle<(Vec<u8>, bool)>;

/// Reads `stream` to its end, keeping at most `cap` bytes; past `cap` it calls `on_overflow` (when given) and
/// keeps reading into nothing so the writer never blocks. Returns the bytes and whether there were more.
fn reader(
    mut stream: impl Read + Send + 'static,
    cap: usize,
    on_overflow: Option<Box<dyn Fn() + Send>>,
) -> Reader {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        let mut over = false;
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = cap.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                    if n > room && !over {
                        over = true;
                        if let Some(f) = &on_overflow {
                            f();
                        }
                    }
                }
            }
        }
        (kept, over)
    })
}

fn drain(
    out: Option<Reader>,
    err: Option<Reader>,
    writer: Option<std::thread::JoinHandle<()>>,
) -> ((Vec<u8>, bool), (Vec<u8>, bool)) {
    if let Some(w) = writer {
        let _ = w.join();
    }
    let join = |r: Option<Reader>| r.and_then(|h| h.join().ok()).unwrap_or_default();
    (join(out), join(err))
}

fn apply_limits(l: Limits) -> std::io::Result<()> {
    use nix::sys::resource::{Resource, setrlimit};
    let set = |r: Resource, v: Option<u64>| match v {
        Some(v) => setrlimit(r, v, v).map_err(std::io::Error::from),
        None => Ok(()),
    };
    set(Resource::RLIMIT_DATA, l.data_bytes)?;
    set(Resource::RLIMIT_CPU, l.cpu_seconds)?;
    set(Resource::RLIMIT_FSIZE, l.file_bytes)
}

/// The file `program` names on the host: an absolute path as it is; a bare name (no `/`) in the first absolute
/// directory of `path` that holds an executable file of that name, skipping empty and relative entries (the
/// working directory would resolve them) and every entry inside one of `untrusted` (compared as written and
/// with symbolic links resolved). A relative path with a `/` is refused.
pub fn find_program(program: &OsStr, path: Option<&OsStr>, untrusted: &[PathBuf]) -> Result<PathBuf> {
    let shown = || program.to_string_lossy().into_owned();
    let p = Path::new(program);
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    if program.is_empty() || p.components().count() != 1 || program.to_string_lossy().contains('/') {
        return Err(Error::RelativeProgram { program: shown() });
    }
    for dir in trusted_path_dirs(path, untrusted) {
        let candidate = dir.join(p);
        if is_executable_file(&candidate) {
            return Ok(candidate);
        }
    }
    Err(Error::NotFound { program: shown() })
}

/// The search path of a program whose environment has no `PATH` (the C library's `_CS_PATH`).
pub const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// The absolute entries of `path` (without one, [`DEFAULT_PATH`]) that are not inside one of `untrusted`, in
/// order.
pub fn trusted_path_dirs(path: Option<&OsStr>, untrusted: &[PathBuf]) -> Vec<PathBuf> {
    // no PATH at all: the C library's default search path, as an exec by name would use it
    let path = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    let untrusted: Vec<PathBuf> = untrusted
        .iter()
        .flat_map(|u| [u.clone(), std::fs::canonicalize(u).unwrap_or_else(|_| u.clone())])
        .collect();
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .filter(|d| {
            let real = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
            !untrusted.iter().any(|u| d.starts_with(u) || real.starts_with(u))
        })
        .collect()
}

/// `PATH` with only the entries [`trusted_path_dirs`] keeps, joined again; `None` when nothing is left.
pub fn trusted_path(path: Option<&OsStr>, untrusted: &[PathBuf]) -> Option<OsString> {
    let dirs = trusted_path_dirs(path, untrusted);
    if dirs.is_empty() {
        return None;
    }
    std::env::join_paths(dirs).ok()
}

fn is_executable_file(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn exe(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn sh_env() -> Env {
        Env::new().with("PATH", "/usr/bin:/bin")
    }

    #[test]
    fn relative_and_untrusted_path_entries_are_never_used() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path().join("repo");
        let trusted = t.path().join("trusted");
        std::fs::create_dir_all(repo.join("bin")).unwrap();
        std::fs::create_dir_all(&trusted).unwrap();
        exe(&repo.join("bin"), "tool", "#!/bin/sh\necho planted\n");
        let good = exe(&trusted, "tool", "#!/bin/sh\necho good\n");
        let path = std::env::join_paths([
            PathBuf::from(""),
            PathBuf::from("bin"),
            repo.join("bin"),
            trusted.clone(),
        ])
        .unwrap();
        let found = find_program(OsStr::new("tool"), Some(&path), std::slice::from_ref(&repo)).unwrap();
        assert_eq!(found, good);
        let only_bad = std::env::join_paths([PathBuf::from("."), repo.join("bin")]).unwrap();
        let e = find_program(OsStr::new("tool"), Some(&only_bad), std::slice::from_ref(&repo)).unwrap_err();
        assert!(matches!(e, Error::NotFound { .. }), "{e}");
        let e = find_program(OsStr::new("bin/tool"), Some(&path), &[]).unwrap_err();
        assert!(matches!(e, Error::RelativeProgram { .. }), "{e}");
        // a symlinked PATH entry that leads into the repository is the repository's
        let alias = t.path().join("alias");
        std::os::unix::fs::symlink(repo.join("bin"), &alias).unwrap();
        let aliased = std::env::join_paths([alias]).unwrap();
        assert!(find_program(OsStr::new("tool"), Some(&aliased), &[repo]).is_err());
    }

    #[test]
    fn the_environment_is_exactly_the_one_given() {
        let c = HostCommand::new("env", sh_env().with("ONLY", "this"))
            .run_bounded(None, Bounds::new(Duration::from_secs(30)))
            .unwrap();
        assert!(c.status.success());
        let mut seen: Vec<String> = String::from_utf8(c.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        seen.sort();
        assert_eq!(seen, ["ONLY=this", "PATH=/usr/bin:/bin"]);
    }

    #[test]
    fn input_reaches_stdin_and_output_is_returned() {
        let c = HostCommand::new("cat", sh_env())
            .run_bounded(Some(b"hello".to_vec()), Bounds::new(Duration::from_secs(30)))
            .unwrap();
        assert_eq!(c.stdout, b"hello");
    }

    #[test]
    fn a_program_past_its_time_is_killed_with_its_group() {
        let t = tempfile::tempdir().unwrap();
        let marker = t.path().join("late");
        let script = format!("(sleep 3; touch {}) & sleep 30", marker.display());
        let e = HostCommand::new("sh", sh_env())
            .args(["-c", &script])
            .run_bounded(None, Bounds::new(Duration::from_millis(300)))
            .unwrap_err();
        assert!(matches!(e, Error::TimedOut { .. }), "{e}");
        std::thread::sleep(Duration::from_secs(4));
        assert!(!marker.exists(), "a process of the killed group lived on");
    }

    #[test]
    fn endless_output_is_cut_and_killed() {
        let e = HostCommand::new("sh", sh_env())
            .args(["-c", "cat /dev/zero"])
            .run_bounded(None, Bounds::new(Duration::from_secs(60)).max_stdout(1 << 20))
            .unwrap_err();
        assert!(
            matches!(e, Error::OutputTooLarge { stream: "stdout", limit, .. } if limit == 1 << 20),
            "{e}"
        );
    }

    #[test]
    fn the_data_limit_stops_a_growing_program() {
        // `head -c` of /dev/zero into a shell variable grows the heap past the limit
        let c = HostCommand::new("sh", sh_env())
            .args(["-c", "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}"])
            .limits(Limits {
                data_bytes: Some(64 << 20),
                ..Limits::none()
            })
            .run_bounded(None, Bounds::new(Duration::from_secs(120)))
            .unwrap();
        assert_ne!(String::from_utf8_lossy(&c.stdout).trim(), "300000000");
    }
}
