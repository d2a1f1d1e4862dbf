//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong building, installing or checking an embedded program.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// There are no bytes to install: the program was not built for this target.
    Empty {
        /// The program's name stem.
        stem: String,
    },
    /// A file system operation failed.
    Io {
        /// What was being done (`create directory`, `write`, …).
        what: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The installed file does not have the embedded bytes after writing it.
    Mismatch {
        /// The installed file.
        path: PathBuf,
    },
    /// A file is not a statically linked executable for the wanted architecture.
    NotStaticExecutable {
        /// The file.
        path: PathBuf,
        /// Why (`not executable`, `dynamically linked: …`, the OS error, …).
        why: String,
    },
    /// A variable cargo sets for build scripts is missing.
    MissingVar {
        /// The variable.
        name: &'static str,
    },
    /// The compiler could not be started.
    Spawn {
        /// The crate being compiled.
        krate: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The compiler failed.
    Compile {
        /// The crate being compiled.
        krate: String,
        /// The compiler's exit status.
        status: std::process::ExitStatus,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Empty { stem } => write!(f, "no {stem} is embedded in this build"),
            Error::Io { what, path, .. } => write!(f, "{what} {}", path.display()),
            Error::Mismatch { path } => {
                write!(
                    f,
                    "the installed {} does not match the embedded bytes",
                    path.display()
                )
            }
            Error::NotStaticExecutable { path, why } => {
                write!(f, "{} is not a static executable ({why})", path.display())
            }
            Error::MissingVar { name } => write!(f, "cargo did not set {name}"),
            Error::Spawn { krate, .. } => write!(f, "spawn rustc for {krate}"),
            Error::Compile { krate, status } => write!(f, "building {krate} failed: {status}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::Spawn { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
