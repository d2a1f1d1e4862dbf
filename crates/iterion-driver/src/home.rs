//! Writable `HOME` by tmpfs layering (03 §8.5, §16.6). Pure.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The tmpfs targets to lay for home `home` when the UID remap applied (`remap_applied`: Linux host, host uid
/// not 0, host state enabled, no spec user): `home` itself, then every ancestor strictly between `home` and a
/// bind target strictly inside it, unless that ancestor is itself a mount target. Sorted, shallow first.
pub fn home_tmpfs(home: &Path, remap_applied: bool, bind_targets: &[PathBuf]) -> Vec<PathBuf> {
    if !remap_applied || !home.is_absolute() || home == Path::new("/") {
        return Vec::new();
    }
    let targets: BTreeSet<&Path> = bind_targets.iter().map(PathBuf::as_path).collect();
    let mut out: BTreeSet<PathBuf> = BTreeSet::new();
    out.insert(home.to_path_buf());
    for t in &targets {
        if !t.starts_with(home) || *t == home {
            continue;
        }
        let mut a = t.parent();
        while let Some(anc) = a {
            if anc == home || !anc.starts_with(home) {
                break;
            }
            if !targets.contains(anc) {
                out.insert(anc.to_path_buf());
            }
            a = anc.parent();
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(remap: bool, targets: &[&str], expect: &[&str]) {
        let t: Vec<PathBuf> = targets.iter().map(PathBuf::from).collect();
        let got = home_tmpfs(Path::new("/home/jo"), remap, &t);
        let want: Vec<PathBuf> = expect.iter().map(PathBuf::from).collect();
        assert_eq!(got, want, "{targets:?}");
    }

    #[test]
    fn vectors_16_6() {
        let base = ["/home/jo/.claude", "/home/jo/.iterion"];
        check(true, &base, &["/home/jo"]);
        let mut t = base.to_vec();
        t.push("/home/jo/.cache/go-build");
        check(true, &t, &["/home/jo", "/home/jo/.cache"]);
        t.push("/home/jo/go/pkg/mod");
        check(
            true,
            &t,
            &["/home/jo", "/home/jo/.cache", "/home/jo/go", "/home/jo/go/pkg"],
        );
        t.push("/home/jo/.local/share/pnpm");
        let with_local = [
            "/home/jo",
            "/home/jo/.cache",
            "/home/jo/.local",
            "/home/jo/.local/share",
            "/home/jo/go",
            "/home/jo/go/pkg",
        ];
        check(true, &t, &with_local);
        t.push("/home/jo/src/app");
        let mut with_src = with_local.to_vec();
        with_src.push("/home/jo/src");
        check(true, &t, &with_src);
        t.push("/home/jo/src");
        check(true, &t, &with_local);
        // spec pins a user (no remap) or host uid 0: no tmpfs at all
        check(false, &t, &[]);
        assert!(home_tmpfs(Path::new("/"), true, &[]).is_empty());
    }
}
