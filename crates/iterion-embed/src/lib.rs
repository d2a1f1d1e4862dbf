//! Embedding the std-only helper programs (the egress relay, the boundary probe) into the crates that use
//! them, standard library only:
//!
//! - [`build`]: the build-script side. A build script compiles a std-only program statically (a bare `rustc`
//!   with `-C target-feature=+crt-static`) into `OUT_DIR`, and the crate embeds the bytes with
//!   `include_bytes!`. On targets that cannot build it (non-Linux) an empty file is written instead.
//! - [`install`]: the run-time side, the one "install an embedded binary by content hash": the bytes are
//!   written once to `<dir>/<stem>-<first 12 hex of their SHA-256>` (mode 0755, through a temporary name and a
//!   rename, read back and verified), and an existing file is re-verified by hash.
//! - [`elf_facts`] / [`check_static_executable`]: whether bytes or a file are a statically linked ELF
//!   executable for an engine architecture, before one is mounted into a sandbox.
//!
//! ```no_run
//! // build.rs
//! use iterion_embed::build::{Program, Toolchain};
//! let tc = Toolchain::from_cargo(|k| std::env::var_os(k)).expect("cargo sets RUSTC, TARGET and OUT_DIR");
//! let src = std::path::Path::new("../my-helper/src/main.rs");
//! tc.static_program(&Program::bin("my_helper", src, "my-helper")).expect("build my-helper");
//! ```
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! // at run time: const BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/my-helper"));
//! # const BYTES: &[u8] = b"\x7fELF...";
//! let path = iterion_embed::install(BYTES, dir.path(), "my-helper").expect("install");
//! assert!(path.file_name().unwrap().to_str().unwrap().starts_with("my-helper-"));
//! ```
#![deny(missing_docs)]

pub mod build;
mod elf;
mod error;
mod install;
mod sha256;

pub use elf::{ElfFacts, check_static_executable, elf_facts, machine_of};
pub use error::{Error, Result};
pub use install::{install, install_with_digest};
pub use sha256::{sha256, to_hex};

/// First 12 hex characters of the SHA-256 of `bytes`: the suffix of an installed binary's name.
pub fn short_hash(bytes: &[u8]) -> String {
    to_hex(&sha256(bytes))[..12].to_string()
}
