//! ELF header facts: statically linked or not, and for which machine.

use crate::error::{Error, Result};
use std::path::Path;

/// Facts read from an ELF header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfFacts {
    /// No `PT_INTERP` program header: statically linked.
    pub is_static: bool,
    /// `e_machine`.
    pub machine: u16,
}

/// Reads the ELF facts of `b`; `None` when it is not an ELF file (or is truncated).
pub fn elf_facts(b: &[u8]) -> Option<ElfFacts> {
    if b.get(0..4)? != b"\x7fELF" {
        return None;
    }
    let is64 = *b.get(4)? == 2;
    let le = *b.get(5)? == 1;
    let rd = |o: usize, n: usize| -> Option<u64> {
        let s = b.get(o..o + n)?;
        let mut v = 0u64;
        for i in 0..n {
            let byte = if le { s[n - 1 - i] } else { s[i] };
            v = (v << 8) | u64::from(byte);
        }
        Some(v)
    };
    let machine = u16::try_from(rd(0x12, 2)?).ok()?;
    let (phoff, phentsize, phnum) = if is64 {
        (rd(0x20, 8)?, rd(0x36, 2)?, rd(0x38, 2)?)
    } else {
        (rd(0x1c, 4)?, rd(0x2a, 2)?, rd(0x2c, 2)?)
    };
    let mut is_static = true;
    for i in 0..phnum {
        let off = usize::try_from(phoff.checked_add(i.checked_mul(phentsize)?)?).ok()?;
        if rd(off, 4)? == 3 {
            is_static = false;
        }
    }
    Some(ElfFacts { is_static, machine })
}

/// The ELF `e_machine` of an engine architecture (`x86_64`/`amd64` → 62, `aarch64`/`arm64` → 183).
pub fn machine_of(arch: &str) -> Option<u16> {
    match arch {
        "x86_64" | "amd64" => Some(62),
        "aarch64" | "arm64" => Some(183),
        "riscv64" => Some(243),
        "s390x" => Some(22),
        "ppc64le" | "ppc64" => Some(21),
        _ => None,
    }
}

/// Checks that `path` is a regular, executable, statically linked ELF file for the engine architecture
/// `arch` (an unknown architecture is not checked); otherwise [`Error::NotStaticExecutable`] saying why.
pub fn check_static_executable(path: &Path, arch: &str) -> Result<()> {
    let fail = |why: String| Error::NotStaticExecutable {
        path: path.to_path_buf(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".into()));
    }
    if !is_executable(&meta) {
        return Err(fail("not executable".into()));
    }
    let bytes = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let facts = elf_facts(&bytes).ok_or_else(|| fail("not an ELF file".into()))?;
    if !facts.is_static {
        return Err(fail("dynamically linked: it has a program interpreter".into()));
    }
    if let Some(m) = machine_of(arch)
        && m != facts.machine
    {
        return Err(fail(format!("built for ELF machine {}", facts.machine)));
    }
    Ok(())
}

#[cfg(unix)]
fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_: &std::fs::Metadata) -> bool {
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal 64-bit little-endian ELF header with two program headers; the second is `PT_INTERP` when
    /// `interp`.
    pub(crate) fn elf64(machine: u16, interp: bool) -> Vec<u8> {
        let mut b = vec![0u8; 0x40 + 2 * 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x12..0x14].copy_from_slice(&machine.to_le_bytes());
        b[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        b[0x40..0x44].copy_from_slice(&1u32.to_le_bytes());
        let second: u32 = if interp { 3 } else { 1 };
        b[0x40 + 56..0x40 + 60].copy_from_slice(&second.to_le_bytes());
        b
    }

    #[test]
    fn facts_of_static_and_dynamic_headers() {
        let facts = |b: &[u8]| elf_facts(b);
        assert_eq!(
            facts(&elf64(62, false)),
            Some(ElfFacts {
                is_static: true,
                machine: 62
            })
        );
        assert_eq!(
            facts(&elf64(183, true)),
            Some(ElfFacts {
                is_static: false,
                machine: 183
            })
        );
        assert_eq!(facts(b"#!/bin/sh\n"), None);
        assert_eq!(facts(&elf64(62, false)[..0x30]), None, "truncated");
        assert_eq!(machine_of("amd64"), Some(62));
        assert_eq!(machine_of("arm64"), Some(183));
        assert_eq!(machine_of("mips"), None);
    }

    fn check(bytes: &[u8], mode: u32, arch: &str, expect: std::result::Result<(), &str>) {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("prog");
        std::fs::write(&p, bytes).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        match (check_static_executable(&p, arch), expect) {
            (Ok(()), Ok(())) => {}
            (Err(Error::NotStaticExecutable { path, why }), Err(want)) => {
                assert!(why.contains(want), "{why} should contain {want}");
                assert_eq!(path, p);
            }
            (g, w) => panic!("got {g:?}, want {w:?}"),
        }
    }

    #[test]
    fn static_executable_checks() {
        check(&elf64(62, false), 0o755, "x86_64", Ok(()));
        check(&elf64(183, false), 0o755, "aarch64", Ok(()));
        check(&elf64(62, false), 0o755, "mips", Ok(()));
        check(&elf64(62, true), 0o755, "x86_64", Err("dynamically linked"));
        check(&elf64(62, false), 0o644, "x86_64", Err("not executable"));
        check(
            &elf64(183, false),
            0o755,
            "x86_64",
            Err("built for ELF machine 183"),
        );
        check(b"#!/bin/sh\n", 0o755, "x86_64", Err("not an ELF file"));
    }
}
