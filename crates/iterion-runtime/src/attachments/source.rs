//! Where an attachment is read from: the operator names a path, iterion resolves it one component at a time
//! and opens the file only when the resolution stayed on the operator's side of the boundary.
//!
//! - A symbolic link that is an entry of a directory the repository or a sandbox controls ([`AttachmentBounds`]: the
//!   work dir, the repository root, the store's worktrees) is never followed: the attachment is refused,
//!   naming the link. Links elsewhere (the operator's own, `~/docs -> /mnt/disk/docs`) are followed, at most
//!   40 in a row.
//! - A step into `/proc`, `/sys` or `/dev`, or onto a process, kernel or device file system mounted anywhere
//!   else (procfs, sysfs, devpts, cgroup, debugfs, tracefs, securityfs, …), is refused when it is made, so no
//!   spelling reaches them: `/proc/self/../self/environ`, `//proc`, `/dev/fd/3`, `/dev/stdin`,
//!   `/proc/<pid>/root/…`, a link that leads there, a bind-mounted alias.
//! - The file is opened without following a link and without blocking; what was opened is checked on the
//!   descriptor: a regular file, not on a pseudo file system, at the path the resolution reached (the
//!   kernel's own name for the descriptor, `/proc/self/fd/<n>`), which is neither a system, engine or
//!   credential location (the list of the mount checks, [`iterion_driver::mount_safety`]) nor inside
//!   iterion's data directory or the agent home, by name and by device and inode (a bind-mounted alias of
//!   one of them under another name keeps its identity).
use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use iterion_driver::mount_safety::{HostFacts, HostOs, MountPolicy, RealFs, clean};

/// The most symbolic links followed while resolving one path (the kernel's limit).
const MAX_LINKS: usize = 40;

/// The host places no attachment may come from, whatever the path that leads there.
const SYSTEM_DIRS: &[&str] = &["/proc", "/sys", "/dev"];

/// What an attachment path is checked against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttachmentBounds {
    /// Directories whose content the repository or a sandbox controls (the work dir, the repository root,
    /// the store's `worktrees/`): a symbolic link inside one is never followed.
    pub repository: Vec<PathBuf>,
    /// The operator's home: credential locations are looked up under it and the other home roots.
    pub home: Option<PathBuf>,
    /// iterion's data directory (run store, keys, binaries).
    pub data_dir: Option<PathBuf>,
    /// The agent home (`~/.claude`).
    pub agent_home: Option<PathBuf>,
}

impl AttachmentBounds {
    /// No repository, no home, no data dir: only the system places and the credential locations of the
    /// home roots that exist are refused.
    pub fn new() -> AttachmentBounds {
        AttachmentBounds::default()
    }

    /// The bounds of a launch from `work_dir` in the repository at `repo_root`, with its store at
    /// `store_dir`, the operator's `home` and iterion's `data_dir`; the agent home is `home/.claude`.
    pub fn of_launch(
        work_dir: &Path,
        repo_root: Option<&Path>,
        store_dir: &Path,
        home: Option<&Path>,
        data_dir: &Path,
    ) -> AttachmentBounds {
        let mut repository = vec![work_dir.to_path_buf()];
        repository.extend(repo_root.map(Path::to_path_buf));
        // where the store keeps the runs' worktrees (`Store::worktree_dir`), written by their sandboxes
        repository.push(store_dir.join("worktrees"));
        AttachmentBounds {
            repository,
            home: home.map(Path::to_path_buf),
            data_dir: Some(data_dir.to_path_buf()),
            agent_home: home.map(|h| h.join(".claude")),
        }
    }

    /// Each path as given (lexically cleaned) and resolved, when it can be.
    fn both_forms(paths: &[PathBuf]) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for p in paths {
            if let Some(l) = clean(p) {
                out.push(l);
            }
            if let Ok(c) = std::fs::canonicalize(p) {
                out.push(c);
            }
        }
        out.dedup();
        out
    }
}

/// A path that resolved on the operator's side, and its metadata (the link not followed).
#[derive(Debug)]
pub(super) struct Resolved {
    /// The file, every link resolved.
    pub(super) path: PathBuf,
    /// `lstat` of `path`.
    pub(super) meta: Metadata,
}

/// The system directory `p` is, or is inside, if any.
fn system_dir(p: &Path) -> Option<&'static str> {
    SYSTEM_DIRS.iter().copied().find(|d| p.starts_with(d))
}

/// The kind of pseudo file system (process, kernel or device state) `fs` is, if it is one.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn pseudo_kind(fs: nix::sys::statfs::FsType) -> Option<&'static str> {
    use nix::sys::statfs as s;
    let known = [
        (s::PROC_SUPER_MAGIC, "procfs"),
        (s::SYSFS_MAGIC, "sysfs"),
        (s::DEVPTS_SUPER_MAGIC, "devpts"),
        (s::CGROUP_SUPER_MAGIC, "cgroup"),
        (s::CGROUP2_SUPER_MAGIC, "cgroup2"),
        (s::DEBUGFS_MAGIC, "debugfs"),
        (s::TRACEFS_MAGIC, "tracefs"),
        (s::SECURITYFS_MAGIC, "securityfs"),
        (s::SELINUX_MAGIC, "selinuxfs"),
        (s::SMACK_MAGIC, "smackfs"),
        (s::BPF_FS_MAGIC, "bpf"),
        (s::NSFS_MAGIC, "nsfs"),
        (s::USBDEVICE_SUPER_MAGIC, "usbdevfs"),
    ];
    known.iter().find(|(m, _)| *m == fs).map(|(_, k)| *k)
}

/// The pseudo file system `p` lives on, if any (`p` is not followed when it is a link).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn pseudo_fs_at(p: &Path) -> Option<&'static str> {
    nix::sys::statfs::statfs(p)
        .ok()
        .and_then(|s| pseudo_kind(s.filesystem_type()))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn pseudo_fs_at(_p: &Path) -> Option<&'static str> {
    None
}

/// The pseudo file system the open file `f` lives on, if any.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn pseudo_fs_of(f: &File) -> Option<&'static str> {
    nix::sys::statfs::fstatfs(f)
        .ok()
        .and_then(|s| pseudo_kind(s.filesystem_type()))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn pseudo_fs_of(_f: &File) -> Option<&'static str> {
    None
}

/// Resolves `abs` (absolute) as the kernel would, one component at a time, following only the symbolic
/// links outside every directory of `bounds.repository`, and refusing every step into a system directory
/// or a pseudo file system. The reason is the text after `attachment 'NAME': `.
pub(super) fn resolve(abs: &Path, bounds: &AttachmentBounds) -> Result<Resolved, String> {
    let shown = abs.display();
    let repository = AttachmentBounds::both_forms(&bounds.repository);
    let mut done = PathBuf::from("/");
    // what is left to walk, last component first
    let mut todo: Vec<OsString> = Vec::new();
    push_components(&mut todo, abs);
    let mut links = 0;
    let mut meta = None;
    while let Some(c) = todo.pop() {
        if c == ".." {
            done.pop();
            meta = None;
            continue;
        }
        let next = done.join(&c);
        if let Some(d) = system_dir(&next) {
            return Err(format!(
                "{shown} leads into {d}, which attachments may not come from"
            ));
        }
        let m = std::fs::symlink_metadata(&next).map_err(|e| format!("cannot read {shown}: {e}"))?;
        if m.file_type().is_symlink() {
            if let Some(root) = repository.iter().find(|r| done.starts_with(r)) {
                return Err(format!(
                    "{shown}: {} is a symbolic link inside the repository ({}); links the repository controls are never followed: attach the file by its own path",
                    next.display(),
                    root.display()
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(format!("{shown}: too many levels of symbolic links"));
            }
            let target = std::fs::read_link(&next).map_err(|e| format!("cannot read {shown}: {e}"))?;
            if target.is_absolute() {
                done = PathBuf::from("/");
            }
            push_components(&mut todo, &target);
            continue;
        }
        if let Some(kind) = pseudo_fs_at(&next) {
            return Err(format!(
                "{shown} leads onto a {kind} file system ({}), which attachments may not come from",
                next.display()
            ));
        }
        done = next;
        meta = Some(m);
    }
    match meta {
        Some(meta) => Ok(Resolved { path: done, meta }),
        None => Err(format!("{shown} is a directory")),
    }
}

/// Pushes the components of `p` onto `todo` so that the first one is popped first (`.` and the root dropped).
fn push_components(todo: &mut Vec<OsString>, p: &Path) {
    let mut parts: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    parts.reverse();
    todo.extend(parts);
}

/// Checks what was opened at `resolved`: not on a pseudo file system, the same file (the kernel's name for
/// the descriptor, else its device and inode), and not a protected place. The reason when not.
pub(super) fn check_opened(
    f: &File,
    opened: &Metadata,
    resolved: &Path,
    bounds: &AttachmentBounds,
) -> Result<(), String> {
    let shown = resolved.display();
    if let Some(kind) = pseudo_fs_of(f) {
        return Err(format!(
            "{shown} is on a {kind} file system, which attachments may not come from"
        ));
    }
    match descriptor_path(f) {
        Some(real) if real != resolved => {
            return Err(format!(
                "{shown} changed while it was checked (it is now {})",
                real.display()
            ));
        }
        Some(_) => {}
        None => {
            let now = std::fs::symlink_metadata(resolved).map_err(|e| format!("cannot read {shown}: {e}"))?;
            if (now.dev(), now.ino()) != (opened.dev(), opened.ino()) {
                return Err(format!("{shown} changed while it was checked"));
            }
        }
    }
    protected(resolved, bounds)
}

/// The kernel's name for the open file `f`, when the process file system can tell.
fn descriptor_path(f: &File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .ok()
        .filter(|p| p.is_absolute())
}

/// Why `p` (resolved) may not be attached: a system, engine or credential location of the mount checks, or
/// inside the data dir or the agent home.
fn protected(p: &Path, bounds: &AttachmentBounds) -> Result<(), String> {
    if let Some(d) = system_dir(p) {
        return Err(format!(
            "{} is inside {d}, which attachments may not come from",
            p.display()
        ));
    }
    let named = [
        (&bounds.data_dir, "iterion's data directory"),
        (&bounds.agent_home, "the agent home"),
    ];
    for (dir, what) in named {
        let Some(dir) = dir else { continue };
        if AttachmentBounds::both_forms(std::slice::from_ref(dir))
            .iter()
            .any(|d| p.starts_with(d))
        {
            return Err(format!(
                "{} is inside {what} {}, which attachments may not come from",
                p.display(),
                dir.display()
            ));
        }
    }
    let facts = HostFacts {
        os: if cfg!(target_os = "macos") {
            HostOs::MacOs
        } else {
            HostOs::Linux
        },
        home: bounds.home.clone(),
        xdg_runtime_dir: None,
        engine_socket: None,
    };
    let policy = MountPolicy {
        host: &facts,
        fs: &RealFs,
        driver: iterion_driver::DriverKind::Docker,
        workspace_target: None,
        workspace_host: None,
        runtime_targets: &[],
    };
    policy
        .check_bind_source(&p.to_string_lossy())
        .map_err(|r| format!("{r}, which attachments may not come from"))?;
    // the same places under another name (a bind mount keeps the device and inode of what it shows)
    let places = protected_places(bounds);
    for a in p.ancestors() {
        let Ok(m) = std::fs::symlink_metadata(a) else {
            continue;
        };
        if let Some((place, what)) = places
            .iter()
            .find(|(id, _, _)| *id == (m.dev(), m.ino()))
            .map(|(_, p, w)| (p, w))
        {
            return Err(format!(
                "{} is {what} {} (reached as {}), which attachments may not come from",
                p.display(),
                place.display(),
                a.display()
            ));
        }
    }
    Ok(())
}

/// The device and inode of every protected place that exists, with its path and what it is: the data dir,
/// the agent home, the credential locations under each home root, and the system and engine paths of the
/// mount checks.
fn protected_places(bounds: &AttachmentBounds) -> Vec<((u64, u64), PathBuf, &'static str)> {
    use iterion_driver::mount_safety::{CREDENTIAL_NAMES, CREDENTIAL_PAIRS, ENGINE_PATHS, SYSTEM_PATHS};
    let mut named: Vec<(PathBuf, &'static str)> = Vec::new();
    named.extend(
        bounds
            .data_dir
            .iter()
            .map(|d| (d.clone(), "inside iterion's data directory")),
    );
    named.extend(
        bounds
            .agent_home
            .iter()
            .map(|d| (d.clone(), "inside the agent home")),
    );
    let mut homes: Vec<PathBuf> = bounds.home.iter().cloned().collect();
    homes.push(PathBuf::from("/root"));
    for root in ["/home", "/Users"] {
        if let Ok(rd) = std::fs::read_dir(root) {
            homes.extend(rd.flatten().map(|e| e.path()));
        }
    }
    for h in &homes {
        named.extend(
            CREDENTIAL_NAMES
                .iter()
                .map(|c| (h.join(c), "inside the credential location")),
        );
        named.extend(
            CREDENTIAL_PAIRS
                .iter()
                .map(|(a, b)| (h.join(a).join(b), "inside the credential location")),
        );
    }
    named.extend(
        SYSTEM_PATHS
            .iter()
            .chain(ENGINE_PATHS)
            .map(|p| (PathBuf::from(p), "inside the sensitive path")),
    );
    named
        .into_iter()
        .filter_map(|(p, what)| {
            let m = std::fs::metadata(&p).ok()?;
            Some(((m.dev(), m.ino()), p, what))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A repository `repo` with a file, next to an operator directory `mine` and a home `home`.
    struct Fx {
        dir: tempfile::TempDir,
    }

    impl Fx {
        fn new() -> Fx {
            let dir = tempfile::tempdir().unwrap();
            for d in ["repo/docs", "mine", "home/.aws", "home/.claude", "data"] {
                std::fs::create_dir_all(dir.path().join(d)).unwrap();
            }
            std::fs::write(dir.path().join("repo/docs/spec.pdf"), b"%PDF-1.7\n").unwrap();
            std::fs::write(dir.path().join("mine/report.pdf"), b"%PDF-1.7\n").unwrap();
            std::fs::write(dir.path().join("home/.aws/credentials"), b"[default]\n").unwrap();
            std::fs::write(dir.path().join("home/.claude/settings.json"), b"{}").unwrap();
            std::fs::write(dir.path().join("data/run-record.key"), b"00").unwrap();
            Fx { dir }
        }
        fn p(&self, rel: &str) -> PathBuf {
            self.dir.path().join(rel)
        }
        fn bounds(&self) -> AttachmentBounds {
            let mut b = AttachmentBounds::of_launch(
                &self.p("repo"),
                Some(&self.p("repo")),
                &self.p("repo/.iterion"),
                Some(&self.p("home")),
                &self.p("data"),
            );
            b.repository.push(self.p("worktree"));
            b
        }
        /// The resolved file, or the reason, of `path`.
        fn check(&self, path: &Path) -> Result<PathBuf, String> {
            let b = self.bounds();
            let r = resolve(path, &b)?;
            let f = File::open(&r.path).map_err(|e| e.to_string())?;
            let meta = f.metadata().map_err(|e| e.to_string())?;
            check_opened(&f, &meta, &r.path, &b)?;
            Ok(r.path)
        }
    }

    fn real(p: &Path) -> PathBuf {
        std::fs::canonicalize(p).unwrap()
    }

    #[test]
    fn ordinary_files_and_operator_links_resolve() {
        let fx = Fx::new();
        let spec = real(&fx.p("repo/docs/spec.pdf"));
        assert_eq!(fx.check(&fx.p("repo/docs/spec.pdf")), Ok(spec.clone()));
        assert_eq!(fx.check(&fx.p("repo/docs/../docs/./spec.pdf")), Ok(spec));
        // the operator's own links outside the repository are followed, chains and directories too
        symlink(fx.p("mine"), fx.p("home/docs")).unwrap();
        symlink("report.pdf", fx.p("mine/latest.pdf")).unwrap();
        symlink(fx.p("mine/latest.pdf"), fx.p("home/latest")).unwrap();
        let report = real(&fx.p("mine/report.pdf"));
        assert_eq!(fx.check(&fx.p("home/docs/report.pdf")), Ok(report.clone()));
        assert_eq!(fx.check(&fx.p("home/latest")), Ok(report.clone()));
        // `..` after a link is the link target's parent, as the kernel resolves it
        std::fs::create_dir(fx.p("mine/sub")).unwrap();
        symlink(fx.p("mine/sub"), fx.p("home/sub")).unwrap();
        assert_eq!(fx.check(&fx.p("home/sub/../report.pdf")), Ok(report));
    }

    #[test]
    fn links_inside_the_repository_are_never_followed() {
        let fx = Fx::new();
        let cases = [
            ("repo/environ.pdf", PathBuf::from("/proc/self/environ")),
            ("repo/creds", PathBuf::from("../home/.aws/credentials")),
            ("repo/docs/mine", fx.p("mine/report.pdf")),
            ("repo/inner", PathBuf::from("docs/spec.pdf")),
            ("repo/dir", fx.p("mine")),
            ("worktree/report.pdf", fx.p("mine/report.pdf")),
        ];
        std::fs::create_dir_all(fx.p("worktree")).unwrap();
        for (link, target) in &cases {
            symlink(target, fx.p(link)).unwrap();
        }
        for (link, path) in [
            ("repo/environ.pdf", "repo/environ.pdf"),
            ("repo/creds", "repo/creds"),
            ("repo/docs/mine", "repo/docs/mine"),
            ("repo/inner", "repo/inner"),
            ("repo/dir", "repo/dir/report.pdf"),
            ("worktree/report.pdf", "worktree/report.pdf"),
        ] {
            let e = fx.check(&fx.p(path)).unwrap_err();
            let link = real(fx.dir.path()).join(link);
            assert!(
                e.contains(&format!(
                    "{} is a symbolic link inside the repository",
                    link.display()
                )),
                "{path}: {e}"
            );
        }
        // an operator link that leads into the repository, then through one of its links
        symlink(fx.p("repo"), fx.p("home/proj")).unwrap();
        let e = fx.check(&fx.p("home/proj/creds")).unwrap_err();
        assert!(e.contains("is a symbolic link inside the repository"), "{e}");
        // the repository's own files stay reachable through the operator's link
        assert!(fx.check(&fx.p("home/proj/docs/spec.pdf")).is_ok());
    }

    #[test]
    fn system_places_are_refused_whatever_the_spelling() {
        let fx = Fx::new();
        symlink("/proc/self/environ", fx.p("mine/env")).unwrap();
        symlink("/proc/self", fx.p("mine/me")).unwrap();
        symlink(
            "../../../../../../../../../../../../proc/self/environ",
            fx.p("mine/deep"),
        )
        .unwrap();
        for p in [
            "/proc/self/environ".into(),
            "/proc/self/../self/environ".into(),
            "//proc/self/environ".into(),
            "/proc/1/root/etc/hostname".into(),
            format!("/proc/{}/root/etc/hostname", std::process::id()),
            "/dev/fd/0".into(),
            "/dev/stdin".into(),
            "/sys/kernel/hostname".into(),
            fx.p("mine/env").to_string_lossy().into_owned(),
            fx.p("mine/me/environ").to_string_lossy().into_owned(),
            fx.p("mine/deep").to_string_lossy().into_owned(),
        ] {
            let e = fx.check(Path::new(&p)).unwrap_err();
            assert!(e.contains("which attachments may not come from"), "{p}: {e}");
        }
    }

    #[test]
    fn credentials_the_data_dir_and_the_agent_home_are_refused() {
        let fx = Fx::new();
        symlink(fx.p("home/.aws"), fx.p("mine/aws")).unwrap();
        for (p, want) in [
            ("home/.aws/credentials", "is a credential location (.aws)"),
            ("mine/aws/credentials", "is a credential location (.aws)"),
            ("data/run-record.key", "is inside iterion's data directory"),
            ("home/.claude/settings.json", "is inside the agent home"),
        ] {
            let e = fx.check(&fx.p(p)).unwrap_err();
            assert!(e.contains(want), "{p}: {e}");
        }
    }

    #[test]
    fn a_protected_place_under_another_name_is_known_by_its_inode() {
        let fx = Fx::new();
        // a hard link keeps the inode, as a bind mount keeps the directory's: `.netrc` under another name
        std::fs::write(fx.p("home/.netrc"), b"machine x password p\n").unwrap();
        std::fs::hard_link(fx.p("home/.netrc"), fx.p("mine/notes.txt")).unwrap();
        let e = fx.check(&fx.p("mine/notes.txt")).unwrap_err();
        assert!(
            e.contains("is inside the credential location") && e.contains(".netrc (reached as "),
            "{e}"
        );
        assert!(e.ends_with("which attachments may not come from"), "{e}");
    }

    #[test]
    fn loops_and_missing_files_are_reasons_not_hangs() {
        let fx = Fx::new();
        symlink(fx.p("mine/b"), fx.p("mine/a")).unwrap();
        symlink(fx.p("mine/a"), fx.p("mine/b")).unwrap();
        let e = fx.check(&fx.p("mine/a")).unwrap_err();
        assert!(e.ends_with("too many levels of symbolic links"), "{e}");
        let e = fx.check(&fx.p("mine/none.pdf")).unwrap_err();
        assert!(e.starts_with("cannot read"), "{e}");
        let e = fx.check(&fx.p("mine/report.pdf/x")).unwrap_err();
        assert!(e.starts_with("cannot read"), "{e}");
    }

    #[test]
    fn the_opened_file_must_be_the_resolved_one() {
        let fx = Fx::new();
        let b = fx.bounds();
        let f = File::open(fx.p("mine/report.pdf")).unwrap();
        let meta = f.metadata().unwrap();
        // a path swapped between the walk and the open: the descriptor names another file
        let e = check_opened(&f, &meta, &real(&fx.p("repo/docs/spec.pdf")), &b).unwrap_err();
        assert!(e.contains("changed while it was checked (it is now "), "{e}");
        assert_eq!(
            check_opened(&f, &meta, &real(&fx.p("mine/report.pdf")), &b),
            Ok(())
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pseudo_file_system_mounted_elsewhere_is_refused() {
        // a procfs or sysfs reached under another name (a bind-mounted alias) is known by its file system
        // type, on the way and on the opened descriptor
        let b = AttachmentBounds::new();
        assert_eq!(pseudo_fs_at(Path::new("/proc/self")), Some("procfs"));
        assert_eq!(pseudo_fs_at(Path::new("/sys/kernel")), Some("sysfs"));
        assert_eq!(pseudo_fs_at(Path::new("/")), None);
        let f = File::open("/proc/self/status").unwrap();
        let meta = f.metadata().unwrap();
        let e = check_opened(&f, &meta, Path::new("/elsewhere/status"), &b).unwrap_err();
        assert!(e.contains("is on a procfs file system"), "{e}");
    }
}
