//! The build-script side: compiling a std-only program statically into `OUT_DIR`.
//!
//! A build script reads the variables cargo gives it ([`Toolchain::from_cargo`]) and compiles each program
//! with the same `rustc` for the same target, as `-C opt-level=s -C panic=abort -C strip=symbols
//! -C target-feature=+crt-static`. A program is a `main` file, optionally with a library crate of its own
//! (compiled first to an rlib and passed with `--extern`); neither may have dependencies. It prints the
//! `cargo:rerun-if-changed` lines for the sources and, on targets that cannot build it (non-Linux), writes an
//! empty file and a `cargo:warning` instead: the feature that needs the program is then unavailable.

use crate::error::{Error, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes the SHA-256 of the file at `program` (64 lowercase hex characters, no newline) to
/// `<program>.sha256` and returns that path: the crate embedding the program compiles it in with
/// `include_str!` and hands it to [`crate::install_with_digest`], so no process start hashes the bytes.
pub fn write_digest(program: &Path) -> Result<PathBuf> {
    let bytes = std::fs::read(program).map_err(|source| Error::Io {
        what: "read",
        path: program.to_path_buf(),
        source,
    })?;
    let mut name = program.as_os_str().to_owned();
    name.push(".sha256");
    let dest = PathBuf::from(name);
    std::fs::write(&dest, crate::to_hex(&crate::sha256(&bytes))).map_err(|source| Error::Io {
        what: "write",
        path: dest.clone(),
        source,
    })?;
    Ok(dest)
}

/// The compiler, target and output directory of a build script.
#[derive(Debug, Clone)]
pub struct Toolchain {
    rustc: OsString,
    target: String,
    out_dir: PathBuf,
}

/// One std-only program to build.
#[derive(Debug, Clone)]
pub struct Program<'a> {
    crate_name: &'a str,
    main: &'a Path,
    lib: Option<&'a Path>,
    output: &'a str,
}

impl<'a> Program<'a> {
    /// A single-file (or `mod`-tree) binary crate `crate_name` rooted at `main`, written to
    /// `OUT_DIR/<output>`.
    pub fn bin(crate_name: &'a str, main: &'a Path, output: &'a str) -> Self {
        Self {
            crate_name,
            main,
            lib: None,
            output,
        }
    }

    /// With a library crate of the same name rooted at `lib`, which `main` uses as an external crate.
    pub fn with_lib(mut self, lib: &'a Path) -> Self {
        self.lib = Some(lib);
        self
    }
}

impl Toolchain {
    /// From `RUSTC` (default `rustc`), `TARGET` and `OUT_DIR`; `var` looks a variable up (a build script
    /// passes `|k| std::env::var_os(k)`).
    pub fn from_cargo(var: impl Fn(&str) -> Option<OsString>) -> Result<Self> {
        let need = |name: &'static str| var(name).ok_or(Error::MissingVar { name });
        Ok(Self {
            rustc: var("RUSTC").unwrap_or_else(|| "rustc".into()),
            target: need("TARGET")?.to_string_lossy().into_owned(),
            out_dir: PathBuf::from(need("OUT_DIR")?),
        })
    }

    /// Whether this target can build (and run) the static programs.
    pub fn can_build_static(&self) -> bool {
        self.target.contains("linux")
    }

    /// Builds `p` into `OUT_DIR/<output>` and returns that path (an empty file when the target cannot build
    /// it, see the module docs).
    pub fn static_program(&self, p: &Program<'_>) -> Result<PathBuf> {
        let dest = self.out_dir.join(p.output);
        for src in [Some(p.main), p.lib].into_iter().flatten() {
            // A directory is watched recursively: the crate's other source files count too.
            let watched = src.parent().unwrap_or(src);
            println!("cargo:rerun-if-changed={}", watched.display());
        }
        if !self.can_build_static() {
            std::fs::write(&dest, b"").map_err(|source| Error::Io {
                what: "write",
                path: dest.clone(),
                source,
            })?;
            println!(
                "cargo:warning={} is not built for {}; the feature that needs it is unavailable",
                p.crate_name, self.target
            );
            write_digest(&dest)?;
            return Ok(dest);
        }
        let mut bin = self.rustc(p.crate_name, "bin");
        if let Some(lib) = p.lib {
            let rlib = self.out_dir.join(format!("lib{}.rlib", p.crate_name));
            let mut c = self.rustc(p.crate_name, "rlib");
            c.arg("-o").arg(&rlib).arg(lib);
            self.run(c, p.crate_name)?;
            let mut ext = OsString::from(format!("{}=", p.crate_name));
            ext.push(&rlib);
            bin.arg("--extern").arg(ext);
        }
        bin.args(["-C", "strip=symbols"]).arg("-o").arg(&dest).arg(p.main);
        self.run(bin, p.crate_name)?;
        write_digest(&dest)?;
        Ok(dest)
    }

    fn rustc(&self, krate: &str, crate_type: &str) -> Command {
        let mut c = Command::new(&self.rustc);
        c.args([
            "--edition",
            "2024",
            "--crate-name",
            krate,
            "--crate-type",
            crate_type,
        ])
        .args(["-C", "opt-level=s", "-C", "panic=abort"])
        .args(["-C", "target-feature=+crt-static"])
        .args(["--target", &self.target]);
        c
    }

    fn run(&self, mut c: Command, krate: &str) -> Result<()> {
        let status = c.status().map_err(|source| Error::Spawn {
            krate: krate.into(),
            source,
        })?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Compile {
                krate: krate.into(),
                status,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_cargo_needs_target_and_out_dir() {
        let vars = |k: &str| match k {
            "TARGET" => Some(OsString::from("x86_64-apple-darwin")),
            "OUT_DIR" => Some(OsString::from("/tmp/out")),
            _ => None,
        };
        let tc = Toolchain::from_cargo(vars).expect("toolchain");
        assert_eq!(tc.rustc, "rustc");
        assert!(!tc.can_build_static());
        let err = Toolchain::from_cargo(|_| None).expect_err("no TARGET");
        assert!(matches!(err, Error::MissingVar { name: "TARGET" }), "{err:?}");
    }

    #[test]
    fn a_target_without_static_programs_gets_an_empty_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tc = Toolchain {
            rustc: "rustc".into(),
            target: "x86_64-pc-windows-msvc".into(),
            out_dir: dir.path().to_path_buf(),
        };
        let main = dir.path().join("main.rs");
        let out = tc
            .static_program(&Program::bin("helper", &main, "helper"))
            .expect("placeholder");
        assert_eq!(std::fs::read(out).expect("read"), b"");
    }
}
