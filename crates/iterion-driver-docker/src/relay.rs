//! The egress relay binary (03 §7.2): installation of the bytes the CLI embeds, and the check that a relay
//! file is a statically linked executable for the engine's architecture.

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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

/// Checks that `path` is a regular, executable, statically linked ELF file for `arch`; otherwise
/// `StartFailed` (`the egress relay <path> is not a static <arch> executable`), never a silent downgrade.
pub fn check_relay_binary(path: &Path, arch: &str) -> Result<()> {
    let fail = |why: &str| Error::StartFailed {
        reason: format!(
            "the egress relay {} is not a static {arch} executable ({why})",
            path.display()
        ),
        hint: Some("rebuild iterion, or point ITERION_RELAY_BIN at a statically linked relay".into()),
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(&e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("not a regular file"));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(fail("not executable"));
    }
    let bytes = std::fs::read(path).map_err(|e| fail(&e.to_string()))?;
    let facts = elf_facts(&bytes).ok_or_else(|| fail("not an ELF file"))?;
    if !facts.is_static {
        return Err(fail("dynamically linked: it has a program interpreter"));
    }
    if let Some(m) = machine_of(arch)
        && m != facts.machine
    {
        return Err(fail(&format!("built for ELF machine {}", facts.machine)));
    }
    Ok(())
}

/// First 12 hex characters of the SHA-256 of `bytes`.
pub fn short_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))[..12].to_string()
}

/// Writes the embedded relay `bytes` once to `<data_dir>/bin/iterion-relay-<first 12 hex of SHA-256>` (mode
/// 0755, through a temporary name and a rename) and returns the path; an existing file is re-verified by
/// hash and rewritten when it differs.
pub fn install(bytes: &[u8], data_dir: &Path) -> Result<PathBuf> {
    if bytes.is_empty() {
        return Err(Error::StartFailed {
            reason: "this build of iterion embeds no egress relay (it was built for a non-Linux target)"
                .into(),
            hint: Some("set ITERION_RELAY_BIN to a statically linked relay".into()),
        });
    }
    let io = |what: &'static str, p: &Path| {
        let path = p.display().to_string();
        move |source| Error::Io { what, path, source }
    };
    let digest = hex::encode(Sha256::digest(bytes));
    let dir = data_dir.join("bin");
    std::fs::create_dir_all(&dir).map_err(io("create directory", &dir))?;
    let dest = dir.join(format!("iterion-relay-{}", &digest[..12]));
    if let Ok(existing) = std::fs::read(&dest)
        && hex::encode(Sha256::digest(&existing)) == digest
    {
        return Ok(dest);
    }
    let tmp = dir.join(format!(".iterion-relay-{}.{}", &digest[..12], std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
        f.write_all(bytes).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("sync", &tmp))?;
    }
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).map_err(io("chmod", &tmp))?;
    std::fs::rename(&tmp, &dest).map_err(io("rename to", &dest))?;
    let written = std::fs::read(&dest).map_err(io("read back", &dest))?;
    if hex::encode(Sha256::digest(&written)) != digest {
        return Err(Error::StartFailed {
            reason: format!(
                "the installed egress relay {} does not match the embedded one",
                dest.display()
            ),
            hint: None,
        });
    }
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf64(machine: u16, interp: bool) -> Vec<u8> {
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

    fn check(bytes: &[u8], mode: u32, arch: &str, expect: Result<(), &str>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("relay");
        std::fs::write(&p, bytes).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let got = check_relay_binary(&p, arch).map_err(|e| e.to_string());
        match (got, expect) {
            (Ok(()), Ok(())) => {}
            (Err(e), Err(want)) => {
                assert!(e.contains(want), "{e} should contain {want}");
                assert!(e.contains(&p.display().to_string()), "{e} names the file");
            }
            (g, w) => panic!("got {g:?}, want {w:?}"),
        }
    }

    #[test]
    fn relay_binary_checks() {
        check(&elf64(62, false), 0o755, "x86_64", Ok(()));
        check(&elf64(183, false), 0o755, "aarch64", Ok(()));
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

    #[test]
    fn install_is_idempotent_and_verified() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = elf64(62, false);
        let p = install(&bytes, dir.path()).expect("install");
        assert_eq!(
            p.file_name().and_then(|n| n.to_str()),
            Some(format!("iterion-relay-{}", short_hash(&bytes)).as_str())
        );
        assert_eq!(
            std::fs::metadata(&p).expect("meta").permissions().mode() & 0o777,
            0o755
        );
        std::fs::write(&p, b"tampered").expect("tamper");
        let again = install(&bytes, dir.path()).expect("reinstall");
        assert_eq!(std::fs::read(&again).expect("read"), bytes);
        assert!(matches!(install(b"", dir.path()), Err(Error::StartFailed { .. })));
    }
}
