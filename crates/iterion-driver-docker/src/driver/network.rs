//! The directory of a run's proxy socket (03 §7.2 step 2): short enough for a Unix socket path, private to
//! this user.

use crate::names;
use iterion_driver::Error as DError;
use std::path::{Path, PathBuf};

/// Directory of the proxy socket for a run (03 §7.2 step 2).
pub fn socket_dir(run_dir: &Path, run_id: &str, xdg_runtime_dir: Option<&Path>, uid: u32) -> PathBuf {
    let natural = run_dir.join("net");
    if natural.join("proxy.sock").as_os_str().len() <= 100 {
        return natural;
    }
    let leaf = format!("net-{}", names::sha_prefix(run_id, 12));
    match xdg_runtime_dir {
        Some(x) => x.join("iterion").join(leaf),
        None => PathBuf::from(format!("/tmp/iterion-{uid}")).join(leaf),
    }
}

pub(super) fn make_private_dir(dir: &Path, uid: u32) -> Result<(), DError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let io = |e: std::io::Error| DError::StartFailed {
        reason: format!("create {}: {e}", dir.display()),
        hint: None,
    };
    // The `/tmp/iterion-<uid>` fallback must be ours and private (03 §7.2 step 2).
    if let Some(parent) = dir.parent()
        && parent.parent() == Some(Path::new("/tmp"))
        && parent.file_name().and_then(|n| n.to_str()) == Some(format!("iterion-{uid}").as_str())
    {
        match std::fs::symlink_metadata(parent) {
            Ok(md) => {
                if md.uid() != uid || md.permissions().mode() & 0o077 != 0 || !md.is_dir() {
                    return Err(DError::StartFailed {
                        reason: format!(
                            "{} exists with another owner or wider permissions",
                            parent.display()
                        ),
                        hint: Some("remove it, or set XDG_RUNTIME_DIR".into()),
                    });
                }
            }
            Err(_) => std::fs::DirBuilder::new()
                .mode(0o700)
                .create(parent)
                .map_err(io)?,
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_dir_falls_back_for_long_paths() {
        let short_dir = socket_dir(Path::new("/home/jo/.iterion/runs/r1"), "r1", None, 1000);
        assert_eq!(short_dir, Path::new("/home/jo/.iterion/runs/r1/net"));
        let long = format!("/home/jo/{}", "x".repeat(100));
        let d = socket_dir(Path::new(&long), "r1", Some(Path::new("/run/user/1000")), 1000);
        assert_eq!(
            d,
            Path::new(&format!(
                "/run/user/1000/iterion/net-{}",
                names::sha_prefix("r1", 12)
            ))
        );
        let t = socket_dir(Path::new(&long), "r1", None, 1000);
        assert!(t.starts_with("/tmp/iterion-1000"), "{}", t.display());
    }
}
