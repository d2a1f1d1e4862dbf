//! The crate's one error type.
use std::path::PathBuf;
use std::time::Duration;

/// What can go wrong on the host side of the boundary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bare program name was not found in any trusted directory of the program's `PATH`.
    #[error("{program}: command not found in the trusted directories of PATH")]
    NotFound {
        /// The name as asked for.
        program: String,
    },
    /// A program was named by a relative path, which the working directory would resolve.
    #[error("{program}: a host program must be named by an absolute path or a bare name")]
    RelativeProgram {
        /// The name as asked for.
        program: String,
    },
    /// The program could not be started.
    #[error("cannot run {program}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The program ran past its time limit and was killed with its process group.
    #[error("{program} did not finish within {}s and was killed", after.as_secs())]
    TimedOut {
        /// The program.
        program: PathBuf,
        /// The limit.
        after: Duration,
    },
    /// The program wrote more than its limit on a stream and was killed with its process group.
    #[error("{program} wrote more than {limit} bytes on {stream} and was killed")]
    OutputTooLarge {
        /// The program.
        program: PathBuf,
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The limit in bytes.
        limit: usize,
    },
    /// Reading the program's output or waiting for it failed.
    #[error("lost track of {program}")]
    Wait {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A host git command exited with an error (or was not run: a relative path was given).
    #[error("git {verb} failed ({status}): {stderr}")]
    Git {
        /// The git subcommand.
        verb: String,
        /// How it ended (`exit status 128`, `killed by a signal`, `not run`).
        status: String,
        /// What git said on stderr (bounded).
        stderr: String,
    },
    /// A file of a sandbox's `.git` that the host will not read (a link, a FIFO, past a size limit).
    #[error("{path} {reason}")]
    SandboxGit {
        /// The file.
        path: PathBuf,
        /// Why, as a clause after the path.
        reason: String,
    },
    /// A store file that is refused: a link, not a regular file, over its size or line limit, not a single
    /// path component.
    #[error("{path} {reason}")]
    StoreFile {
        /// The file.
        path: PathBuf,
        /// Why, as a clause after the path.
        reason: String,
    },
    /// A store file or directory could not be opened, created, read or written.
    #[error("cannot {op} {path}")]
    StoreIo {
        /// What was being done (`open`, `read`, `create`, `rename`, …).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
