//! The architecture of a claw runner binary, read from its ELF header, checked against the architecture of the
//! engine that will run it: a runner built for another machine (or a file that is no ELF program at all) is
//! refused before the container starts instead of failing its `--version` probe with an exec format error.
use std::io::Read;
use std::path::Path;

/// Bytes of the ELF header this module reads (`e_ident` and `e_machine`).
const HEADER: usize = 20;

/// What the first bytes of an ELF file say about its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfTarget {
    /// `ELFCLASS64` (else 32-bit).
    pub bits64: bool,
    /// `ELFDATA2LSB` (else big-endian).
    pub little_endian: bool,
    /// `e_machine`.
    pub machine: u16,
}

impl ElfTarget {
    /// A readable name of the target: `x86_64`, `aarch64`, … (`32-bit` prefixed for a 32-bit file, the raw
    /// machine number when unknown).
    pub fn describe(&self) -> String {
        let name = machine_name(self.machine)
            .map_or_else(|| format!("ELF machine {}", self.machine), str::to_string);
        if self.bits64 {
            name
        } else {
            format!("32-bit {name}")
        }
    }
}

/// Why a file is not an ELF program this module can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// The magic number is missing (a script, text, another format).
    #[error("not an ELF executable")]
    NotElf,
    /// Fewer bytes than the header needs.
    #[error("truncated ELF header ({0} bytes)")]
    Truncated(usize),
    /// `EI_CLASS` or `EI_DATA` hold an invalid value.
    #[error("invalid ELF header ({0})")]
    Invalid(&'static str),
}

/// Reads the target of an ELF header from the start of a file.
pub fn elf_target(b: &[u8]) -> Result<ElfTarget, ElfError> {
    if b.len() < 4 || &b[..4] != b"\x7fELF" {
        return Err(if b.len() < 4 && b"\x7fELF".starts_with(b) && !b.is_empty() {
            ElfError::Truncated(b.len())
        } else {
            ElfError::NotElf
        });
    }
    if b.len() < HEADER {
        return Err(ElfError::Truncated(b.len()));
    }
    let bits64 = match b[4] {
        1 => false,
        2 => true,
        _ => return Err(ElfError::Invalid("class")),
    };
    let little_endian = match b[5] {
        1 => true,
        2 => false,
        _ => return Err(ElfError::Invalid("data encoding")),
    };
    let m = [b[18], b[19]];
    let machine = if little_endian {
        u16::from_le_bytes(m)
    } else {
        u16::from_be_bytes(m)
    };
    Ok(ElfTarget {
        bits64,
        little_endian,
        machine,
    })
}

/// The 64-bit ELF machine of an engine or host architecture name (`x86_64`/`amd64` → 62,
/// `aarch64`/`arm64` → 183, …); `None` when unknown (nothing is checked then).
pub fn machine_of(arch: &str) -> Option<u16> {
    match arch.trim().to_ascii_lowercase().as_str() {
        "x86_64" | "amd64" => Some(62),
        "aarch64" | "arm64" => Some(183),
        "riscv64" => Some(243),
        "s390x" => Some(22),
        "ppc64le" | "ppc64" => Some(21),
        _ => None,
    }
}

fn machine_name(m: u16) -> Option<&'static str> {
    Some(match m {
        3 => "x86",
        8 => "mips",
        20 => "powerpc",
        21 => "ppc64",
        22 => "s390x",
        40 => "arm",
        62 => "x86_64",
        183 => "aarch64",
        243 => "riscv",
        _ => return None,
    })
}

/// Checks that the file at `path` is a 64-bit ELF program for the architecture `arch` (an engine's or the
/// host's name for it). An unknown `arch` only requires an ELF file. The error text names what the file is
/// and what was wanted.
pub fn check_runner_arch(path: &Path, arch: &str) -> Result<(), String> {
    let mut head = Vec::with_capacity(HEADER);
    std::fs::File::open(path)
        .and_then(|f| f.take(HEADER as u64).read_to_end(&mut head))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let t = elf_target(&head).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(want) = machine_of(arch) else {
        return Ok(());
    };
    if t.bits64 && t.machine == want {
        return Ok(());
    }
    Err(format!(
        "{} is built for {}, the engine runs {arch}",
        path.display(),
        t.describe()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(class: u8, data: u8, machine: u16) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = class;
        b[5] = data;
        b[6] = 1;
        let m = if data == 2 {
            machine.to_be_bytes()
        } else {
            machine.to_le_bytes()
        };
        b[18..20].copy_from_slice(&m);
        b
    }

    #[test]
    fn targets_of_headers() {
        let t = elf_target(&header(2, 1, 62)).unwrap();
        assert_eq!((t.bits64, t.little_endian, t.machine), (true, true, 62));
        assert_eq!(t.describe(), "x86_64");
        let t = elf_target(&header(2, 1, 183)).unwrap();
        assert_eq!(t.describe(), "aarch64");
        let t = elf_target(&header(1, 1, 3)).unwrap();
        assert_eq!((t.bits64, t.describe().as_str()), (false, "32-bit x86"));
        let t = elf_target(&header(2, 2, 22)).unwrap();
        assert_eq!((t.little_endian, t.machine), (false, 22));
        assert_eq!(
            elf_target(&header(2, 1, 9999)).unwrap().describe(),
            "ELF machine 9999"
        );
    }

    #[test]
    fn what_is_not_a_readable_elf_header() {
        assert_eq!(elf_target(b"#!/bin/sh\necho hi\n"), Err(ElfError::NotElf));
        assert_eq!(elf_target(b""), Err(ElfError::NotElf));
        assert_eq!(elf_target(b"\x7fEL"), Err(ElfError::Truncated(3)));
        assert_eq!(elf_target(&header(2, 1, 62)[..10]), Err(ElfError::Truncated(10)));
        assert_eq!(elf_target(&header(7, 1, 62)), Err(ElfError::Invalid("class")));
        assert_eq!(
            elf_target(&header(2, 0, 62)),
            Err(ElfError::Invalid("data encoding"))
        );
    }

    #[test]
    fn engine_architecture_names() {
        assert_eq!(machine_of("x86_64"), Some(62));
        assert_eq!(machine_of("amd64"), Some(62));
        assert_eq!(machine_of("arm64"), Some(183));
        assert_eq!(machine_of("AARCH64"), Some(183));
        assert_eq!(machine_of("mips"), None);
    }

    #[test]
    fn files_checked_against_an_architecture() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let x86 = write("x86", &header(2, 1, 62));
        let arm = write("arm", &header(2, 1, 183));
        let i386 = write("i386", &header(1, 1, 3));
        let script = write("script", b"#!/bin/sh\nexec iterion \"$@\"\n");
        let short = write("short", &header(2, 1, 62)[..8]);
        assert_eq!(check_runner_arch(&x86, "x86_64"), Ok(()));
        assert_eq!(check_runner_arch(&arm, "arm64"), Ok(()));
        let e = check_runner_arch(&arm, "x86_64").unwrap_err();
        assert!(
            e.ends_with("arm is built for aarch64, the engine runs x86_64"),
            "{e}"
        );
        let e = check_runner_arch(&i386, "amd64").unwrap_err();
        assert!(
            e.ends_with("is built for 32-bit x86, the engine runs amd64"),
            "{e}"
        );
        let e = check_runner_arch(&script, "x86_64").unwrap_err();
        assert!(e.ends_with("script: not an ELF executable"), "{e}");
        let e = check_runner_arch(&short, "x86_64").unwrap_err();
        assert!(e.ends_with("short: truncated ELF header (8 bytes)"), "{e}");
        // an unknown engine architecture only needs an ELF file
        assert_eq!(check_runner_arch(&arm, "mips"), Ok(()));
        assert!(check_runner_arch(&script, "mips").is_err());
        let e = check_runner_arch(&dir.path().join("missing"), "x86_64").unwrap_err();
        assert!(e.starts_with("cannot read "), "{e}");
    }
}
