//! `iterion-boundary`: the host side of the sandbox boundary, in one place.
//!
//! Everything iterion does on the host with data a repository or a sandboxed process controls goes through
//! this crate, so that one set of rules decides what the host trusts:
//!
//! - [`spawn`]: [`HostCommand`], the one way to start a host program. It starts from an explicitly built
//!   [`Env`] (nothing of iterion's own environment is inherited), finds a bare program name only in absolute,
//!   trusted `PATH` directories (never the working directory, never a directory a repository controls), runs it
//!   in its own process group, and can bound it in time, output and memory. `cargo xtask tidy` fails on any
//!   `Command::new` (std or tokio) outside this crate.
//! - [`git`]: [`HostGit`], the one way to run git on the host: no system or global configuration, hooks,
//!   filters, fsmonitor or submodule recursion, every repository location pinned, bounded; with the discovery
//!   of a checkout's git directories that never trusts a pointer on its own, and the reading of a sandbox's
//!   `.git` as data.
//! - [`fs`]: store file access: reads bounded in type, size and line length that never follow a link, and
//!   writes relative to an open directory handle ([`fs::Dir`]), so a replaced file or a renamed parent
//!   directory never redirects them. `cargo xtask tidy` fails on direct file access in the run store's code.
//!
//! The crate names no container library and reads no process environment: callers hand it every value.
//!
//! ```
//! use iterion_boundary::{Bounds, Env, HostCommand};
//! use std::time::Duration;
//!
//! let env = Env::new().with("PATH", "/usr/bin:/bin");
//! let out = HostCommand::new("echo", env)
//!     .arg("hello")
//!     .run_bounded(None, Bounds::new(Duration::from_secs(10)))
//!     .unwrap();
//! assert_eq!(out.stdout, b"hello\n");
//! ```
#![deny(missing_docs)]

mod env;
mod error;
pub mod fs;
pub mod git;
pub mod spawn;

pub use env::Env;
pub use error::{Error, Result};
pub use git::HostGit;
pub use spawn::{Bounds, Captured, HostCommand, Limits, Pipe, find_program, trusted_path, trusted_path_dirs};
