//! Mount safety (03 §10): which host paths a bind mount may expose, and which container targets it may use.
//!
//! The checks are pure over injected facts: [`HostFacts`] (home, `XDG_RUNTIME_DIR`, engine socket, operating
//! system) and a [`HostFs`] (canonicalisation, existence, listing of `/home` and `/Users`), so every vector is
//! testable on any machine. [`RealFs`] is the real file system. The mount text is parsed by
//! `iterion_spec::values::parse_mount`.

use std::io;
use std::path::{Component, Path, PathBuf};

use iterion_spec::values::{Mount, MountKind, parse_mount, split_csv_record};

use crate::error::{Error, Result};
use crate::types::DriverKind;

/// Operating system of the host (comparisons are case-insensitive on macOS and Windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostOs {
    /// Linux.
    Linux,
    /// macOS.
    MacOs,
    /// Windows.
    Windows,
}

/// Facts about the host that the rules depend on (the CLI reads them once; libraries never read `std::env`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// Operating system.
    pub os: HostOs,
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// `XDG_RUNTIME_DIR`.
    pub xdg_runtime_dir: Option<PathBuf>,
    /// The socket path of the engine the driver is connected to.
    pub engine_socket: Option<PathBuf>,
}

/// The file-system queries the rules need.
pub trait HostFs: Send + Sync {
    /// Every symlink resolved; `NotFound` when the path does not exist.
    fn canonicalize(&self, p: &Path) -> io::Result<PathBuf>;
    /// Whether the path exists (following symlinks).
    fn exists(&self, p: &Path) -> bool;
    /// Sub-directories of `p` (empty when `p` is missing).
    fn subdirs(&self, p: &Path) -> Vec<PathBuf>;
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl HostFs for RealFs {
    fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(p)
    }
    fn exists(&self, p: &Path) -> bool {
        p.exists()
    }
    fn subdirs(&self, p: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(p)
            .map(|it| {
                it.filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// Engine and cluster paths (§10.4.1), without the `$XDG_RUNTIME_DIR` / `$HOME` ones.
pub const ENGINE_PATHS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/var/run/docker",
    "/run/docker",
    "/var/lib/docker",
    "/run/containerd",
    "/var/run/containerd",
    "/var/lib/containerd",
    "/run/podman",
    "/var/run/podman",
    "/var/lib/containers",
    "/run/crio",
    "/var/run/crio",
    "/run/buildkit",
    "/var/lib/kubelet",
    "/etc/kubernetes",
    "/run/secrets",
    "/var/run/secrets",
];
/// Engine paths under `$XDG_RUNTIME_DIR`.
pub const XDG_ENGINE_PATHS: &[&str] = &["docker.sock", "podman", "containers", "buildkit"];
/// Engine paths under `$HOME`.
pub const HOME_ENGINE_PATHS: &[&str] = &[".docker/run", ".local/share/containers"];
/// System paths (§10.4.2).
pub const SYSTEM_PATHS: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/pki/tls/private",
    "/etc/krb5.keytab",
    "/etc/docker",
    "/etc/containers",
];
/// Credential locations: single components and file names (§10.4.3).
pub const CREDENTIAL_NAMES: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".password-store",
    ".codex",
    ".oci",
    ".terraform.d",
    ".mozilla",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".vault-token",
];
/// Credential locations: component pairs (§10.4.3).
pub const CREDENTIAL_PAIRS: &[(&str, &str)] = &[
    (".config", "gcloud"),
    (".config", "gh"),
    (".config", "hub"),
    (".config", "containers"),
    (".config", "op"),
    (".config", "doctl"),
    (".config", "google-chrome"),
    (".config", "chromium"),
    (".local/share", "keyrings"),
    (".cargo", "credentials"),
    (".cargo", "credentials.toml"),
    (".gem", "credentials"),
    ("Library", "Keychains"),
    ("Library/Application Support/Google", "Chrome"),
];
/// Container targets a user mount may not use (equal or inside).
pub const RESERVED_TARGETS: &[&str] = &[
    "/run/iterion",
    "/iterion/artifact-files",
    "/usr/local/bin/iterion",
    "/.iterion-claw",
    "/.iterion-reap",
];

/// Lexically cleaned absolute path (`.` and `..` resolved as text); `None` for a relative path.
pub fn clean(p: &Path) -> Option<PathBuf> {
    if !p.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

/// Everything the checks need.
pub struct MountPolicy<'a> {
    /// Host facts.
    pub host: &'a HostFacts,
    /// File system.
    pub fs: &'a dyn HostFs,
    /// The driver (pvc, configmap and secret mounts are `Unsupported` except on kubernetes).
    pub driver: DriverKind,
    /// Workspace target inside the container.
    pub workspace_target: Option<&'a str>,
    /// Canonical host workspace.
    pub workspace_host: Option<&'a Path>,
    /// Targets of the runtime's own mounts (aux, host state, …).
    pub runtime_targets: &'a [String],
}

impl std::fmt::Debug for MountPolicy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountPolicy")
            .field("host", self.host)
            .field("driver", &self.driver)
            .field("workspace_target", &self.workspace_target)
            .finish_non_exhaustive()
    }
}

enum What {
    Engine,
    System,
    Credential,
}

impl MountPolicy<'_> {
    fn ci(&self) -> bool {
        self.host.os != HostOs::Linux
    }

    fn eq_comp(&self, a: &str, b: &str) -> bool {
        if self.ci() {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    }

    /// `a` equal to or inside `b`, component-wise.
    fn within(&self, a: &Path, b: &Path) -> bool {
        let (a, b): (Vec<_>, Vec<_>) = (a.components().collect(), b.components().collect());
        b.len() <= a.len()
            && a.iter().zip(&b).all(|(x, y)| {
                self.eq_comp(&x.as_os_str().to_string_lossy(), &y.as_os_str().to_string_lossy())
            })
    }

    fn homes(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = Vec::new();
        if let Some(h) = &self.host.home {
            v.push(h.clone());
        }
        v.push("/root".into());
        v.push("/var/root".into());
        v.extend(self.fs.subdirs(Path::new("/home")));
        v.extend(self.fs.subdirs(Path::new("/Users")));
        v.dedup();
        v
    }

    /// Home roots (§10.5) that exist.
    fn home_roots(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = ["/", "/home", "/Users", "/root", "/var/root"]
            .iter()
            .map(PathBuf::from)
            .collect();
        if let Some(h) = &self.host.home {
            v.push(h.clone());
        }
        v.extend(self.fs.subdirs(Path::new("/home")));
        v.extend(self.fs.subdirs(Path::new("/Users")));
        v.into_iter().filter(|p| self.fs.exists(p)).collect()
    }

    fn sensitive(&self, with_credentials: bool) -> Vec<(PathBuf, What)> {
        let mut v: Vec<(PathBuf, What)> = SYSTEM_PATHS
            .iter()
            .map(|p| (PathBuf::from(p), What::System))
            .collect();
        v.extend(ENGINE_PATHS.iter().map(|p| (PathBuf::from(p), What::Engine)));
        if let Some(x) = &self.host.xdg_runtime_dir {
            v.extend(XDG_ENGINE_PATHS.iter().map(|p| (x.join(p), What::Engine)));
        }
        if let Some(h) = &self.host.home {
            v.extend(HOME_ENGINE_PATHS.iter().map(|p| (h.join(p), What::Engine)));
        }
        if let Some(s) = &self.host.engine_socket {
            v.push((s.clone(), What::Engine));
        }
        if with_credentials {
            for h in self.homes() {
                v.extend(CREDENTIAL_NAMES.iter().map(|c| (h.join(c), What::Credential)));
                v.extend(
                    CREDENTIAL_PAIRS
                        .iter()
                        .map(|(a, b)| (h.join(a).join(b), What::Credential)),
                );
            }
        }
        v
    }

    /// The credential component of `p`, if any (single names anywhere, pairs as adjacent components).
    fn credential_component(&self, p: &Path) -> Option<String> {
        let comps: Vec<String> = p
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        for c in &comps {
            if let Some(hit) = CREDENTIAL_NAMES.iter().find(|n| self.eq_comp(c, n)) {
                return Some((*hit).to_string());
            }
        }
        for (a, b) in CREDENTIAL_PAIRS {
            let pat: Vec<&str> = a.split('/').chain(std::iter::once(*b)).collect();
            if comps
                .windows(pat.len())
                .any(|w| w.iter().zip(&pat).all(|(x, y)| self.eq_comp(x, y)))
            {
                return Some(format!("{a}/{b}"));
            }
        }
        None
    }

    /// The reason `p` may not be a bind source, if any (§10.3 step 4).
    fn refusal(&self, p: &Path) -> Option<String> {
        for (s, what) in self.sensitive(false) {
            if self.within(p, &s) {
                let kind = match what {
                    What::Engine => "container engine",
                    _ => "system",
                };
                return Some(if p == s {
                    format!("is a sensitive path ({kind}: {})", s.display())
                } else {
                    format!("is inside the sensitive path {} ({kind})", s.display())
                });
            }
        }
        if let Some(c) = self.credential_component(p) {
            return Some(format!("is a credential location ({c})"));
        }
        for h in self.home_roots() {
            if self.within(&h, p) {
                return Some(format!("contains home directory {}", h.display()));
            }
        }
        for (s, _) in self.sensitive(true) {
            if self.within(&s, p) {
                return Some(format!("contains the sensitive path {}", s.display()));
            }
        }
        None
    }

    /// Checks a bind source (§10.3); the error is the reason text after `source `.
    pub fn check_bind_source(&self, source: &str) -> std::result::Result<PathBuf, String> {
        let raw = Path::new(source);
        let Some(l) = clean(raw) else {
            return Err(format!(
                "{source} must be an absolute path (use ${{localWorkspaceFolder}}/… or ${{localEnv:HOME}}/…)"
            ));
        };
        if let Some(r) = self.refusal(&l) {
            return Err(format!("{} {r}", l.display()));
        }
        let c = match self.fs.canonicalize(&l) {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(format!("{} does not exist", l.display()));
            }
            Err(e) => return Err(format!("{} cannot be resolved: {e}", l.display())),
        };
        if c != l
            && let Some(r) = self.refusal(&c)
        {
            return Err(format!("{} resolves to {}, which {r}", l.display(), c.display()));
        }
        Ok(c)
    }

    /// Checks a user mount's target (§10.6, §8.2).
    pub fn check_target(&self, target: &str) -> std::result::Result<(), String> {
        if target.len() > 4096 {
            return Err("target is longer than 4096 bytes".into());
        }
        let t = Path::new(target);
        if !t.is_absolute() {
            return Err(format!("target {target} must be an absolute path"));
        }
        if t.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(format!("target {target} must not contain '..'"));
        }
        let t = clean(t).unwrap_or_default();
        if t == Path::new("/") {
            return Err("target / is not allowed".into());
        }
        for sys in ["/proc", "/sys", "/dev"] {
            if t.starts_with(sys) {
                return Err(format!("target {target} is inside {sys}"));
            }
        }
        for r in RESERVED_TARGETS.iter().map(PathBuf::from) {
            if t.starts_with(&r) {
                return Err(format!("target {target} is reserved"));
            }
        }
        if self.runtime_targets.iter().any(|r| Path::new(r) == t) {
            return Err(format!("target {target} is reserved"));
        }
        if let Some(ws) = self.workspace_target {
            let ws = Path::new(ws);
            if t == ws {
                return Err(format!("target {target} is reserved (the workspace)"));
            }
            if let (Ok(rel), Some(host)) = (t.strip_prefix(ws), self.workspace_host)
                && !self.fs.exists(&host.join(rel))
            {
                return Err(format!(
                    "target {target} does not exist in the workspace; create it first"
                ));
            }
        }
        Ok(())
    }

    /// Parses and checks a mount text; returns the parsed mount. Every refusal is `UnsafeMount` naming the
    /// original text, except cluster volume types on a driver without them (`Unsupported`).
    pub fn check_mount(&self, text: &str) -> Result<Mount> {
        let unsafe_mount = |reason: String| Error::UnsafeMount {
            mount: text.to_string(),
            reason,
        };
        if let Ok(fields) = split_csv_record(text) {
            for f in fields {
                if let Some((k, v)) = f.split_once('=')
                    && k.eq_ignore_ascii_case("type")
                    && matches!(v.to_ascii_lowercase().as_str(), "pvc" | "configmap" | "secret")
                    && self.driver != DriverKind::Kubernetes
                {
                    return Err(Error::Unsupported {
                        driver: self.driver,
                        feature: format!("{} mounts", v.to_ascii_lowercase()),
                    });
                }
            }
        }
        let m = parse_mount(text).map_err(unsafe_mount)?;
        self.check_target(&m.target).map_err(unsafe_mount)?;
        if m.kind == MountKind::Bind {
            let source = m.source.as_deref().unwrap_or_default();
            self.check_bind_source(source)
                .map_err(|r| unsafe_mount(format!("source {r}")))?;
        }
        Ok(m)
    }

    /// Checks the workspace bind: running iterion from a home directory is refused.
    pub fn check_workspace(&self, workspace: &Path) -> Result<()> {
        let refuse = |what: String| Error::UnsafeMount {
            mount: format!(
                "type=bind,source={},target={}",
                workspace.display(),
                workspace.display()
            ),
            reason: format!(
                "the workspace {} {what}; run iterion from a project directory",
                workspace.display()
            ),
        };
        let Some(l) = clean(workspace) else {
            return Err(refuse("is not an absolute path".into()));
        };
        let c = self.fs.canonicalize(&l).unwrap_or_else(|_| l.clone());
        for p in [&l, &c] {
            for (s, what) in self.sensitive(true) {
                if matches!(what, What::Credential) && self.within(&s, p) {
                    return Err(refuse(format!("contains {}", s.display())));
                }
            }
            if let Some(r) = self.refusal(p) {
                return Err(refuse(r));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// A file system of listed paths (ancestors implied) and symlinks.
    struct FakeFs {
        paths: BTreeSet<PathBuf>,
        links: BTreeMap<PathBuf, PathBuf>,
    }

    impl FakeFs {
        fn new(paths: &[&str], links: &[(&str, &str)]) -> Self {
            let mut set = BTreeSet::new();
            for p in paths.iter().chain(links.iter().map(|(l, _)| l)) {
                let mut cur = PathBuf::from(p);
                loop {
                    set.insert(cur.clone());
                    if !cur.pop() {
                        break;
                    }
                }
            }
            FakeFs {
                paths: set,
                links: links
                    .iter()
                    .map(|(a, b)| (PathBuf::from(a), PathBuf::from(b)))
                    .collect(),
            }
        }
    }

    impl HostFs for FakeFs {
        fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
            let mut out = PathBuf::from("/");
            for c in p.components().skip(1) {
                out.push(c);
                if let Some(t) = self.links.get(&out) {
                    out = t.clone();
                }
                if !self.paths.contains(&out) {
                    return Err(io::ErrorKind::NotFound.into());
                }
            }
            Ok(out)
        }
        fn exists(&self, p: &Path) -> bool {
            self.canonicalize(p).is_ok()
        }
        fn subdirs(&self, p: &Path) -> Vec<PathBuf> {
            self.paths
                .iter()
                .filter(|x| x.parent() == Some(p))
                .cloned()
                .collect()
        }
    }

    fn fs() -> FakeFs {
        FakeFs::new(
            &[
                "/home/jo/src/app/data",
                "/home/jo/.claude",
                "/home/jo/.ssh",
                "/home/ann",
                "/tmp/x",
                "/tmp/a,b",
                "/etc/localtime",
                "/var/run/docker.sock",
                "/run/user/1000/docker.sock",
                "/var/lib/docker/volumes",
                "/proc",
                "/sys/fs",
                "/root/.claude",
                "/data/backup/.aws",
                "/Users/Jo/.SSH",
            ],
            &[
                ("/home/jo/src/app/link", "/var/run/docker.sock"),
                ("/tmp/proc-link", "/proc"),
            ],
        )
    }

    fn facts(os: HostOs) -> HostFacts {
        HostFacts {
            os,
            home: Some(if os == HostOs::Linux {
                "/home/jo".into()
            } else {
                "/Users/Jo".into()
            }),
            xdg_runtime_dir: Some("/run/user/1000".into()),
            engine_socket: Some("/var/run/docker.sock".into()),
        }
    }

    fn verdict(os: HostOs, text: &str) -> String {
        let (f, h) = (fs(), facts(os));
        let ws = Path::new("/home/jo/src/app");
        let p = MountPolicy {
            host: &h,
            fs: &f,
            driver: DriverKind::Docker,
            workspace_target: Some("/home/jo/src/app"),
            workspace_host: Some(ws),
            runtime_targets: &[],
        };
        match p.check_mount(text) {
            Ok(_) => "allowed".into(),
            Err(Error::UnsafeMount { reason, mount }) => {
                assert_eq!(mount, text);
                format!("refused: {reason}")
            }
            Err(e) => format!("error: {e:?}"),
        }
    }

    fn check(text: &str, expect: &str) {
        let got = verdict(HostOs::Linux, text);
        if expect == "allowed" {
            assert_eq!(got, "allowed", "{text}");
        } else {
            assert!(
                got.contains(expect),
                "{text}: got {got:?}, want it to contain {expect:?}"
            );
        }
    }

    #[test]
    fn vectors_16_1() {
        check("type=bind,source=/home/jo/src/app/data,target=/data", "allowed");
        check("type=bind,source=/tmp/x,target=/x", "allowed");
        check(
            "type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock",
            "refused: source /var/run/docker.sock is a sensitive path (container engine",
        );
        check(
            "type=bind,source=/run/user/1000/docker.sock,target=/s",
            "is a sensitive path (container engine: /run/user/1000/docker.sock)",
        );
        check(
            "type=bind,src=/var/lib/docker/volumes,dst=/v",
            "is inside the sensitive path /var/lib/docker",
        );
        check(
            "type=bind,source=/run,target=/r",
            "source /run contains the sensitive path /run/docker.sock",
        );
        check(
            "type=bind,source=/var,target=/v",
            "source /var contains the sensitive path /var/run/docker.sock",
        );
        check(
            "type=bind,source=/,target=/host",
            "source / contains home directory /",
        );
        check(
            "type=bind,source=/home,target=/h",
            "contains home directory /home",
        );
        check(
            "type=bind,source=/home/jo,target=/h",
            "contains home directory /home/jo",
        );
        check(
            "type=bind,source=/home/ann,target=/h",
            "contains home directory /home/ann",
        );
        check(
            "type=bind,source=/etc,target=/e",
            "contains the sensitive path /etc/shadow",
        );
        check(
            "type=bind,source=/etc/localtime,target=/etc/localtime,readonly",
            "allowed",
        );
        check(
            "type=BIND,source=/proc,target=/p",
            "is a sensitive path (system: /proc)",
        );
        check(
            "Type=bind,SOURCE=/sys/fs,target=/s",
            "is inside the sensitive path /sys",
        );
        check(
            "\"type=bind\",\"source=/var/run/docker.sock\",target=/s",
            "is a sensitive path",
        );
        check("type=bind,\"source=/tmp/a,b\",target=/ab", "allowed");
        check("type=bind,source=\"/tmp/x\",target=/x", "refused: ");
        check(
            "type=bind,source=/home/jo/src/app/link,target=/s",
            "resolves to /var/run/docker.sock",
        );
        check("type=bind,source=/tmp/proc-link,target=/p", "resolves to /proc");
        check(
            "type=bind,source=/home/jo/src/app/../../.ssh,target=/k",
            "source /home/jo/.ssh is a credential location (.ssh)",
        );
        check(
            "type=bind,source=/home/jo/.ssh,target=/k",
            "is a credential location (.ssh)",
        );
        check(
            "type=bind,source=/data/backup/.aws,target=/a",
            "is a credential location (.aws)",
        );
        check(
            "type=bind,source=/home/jo/.claude,target=/home/devbox/.claude",
            "allowed",
        );
        check("type=bind,source=/root/.claude,target=/root/.claude", "allowed");
        check(
            "type=bind,source=/root,target=/r",
            "contains home directory /root",
        );
        check(
            "type=bind,source=relative/path,target=/x",
            "must be an absolute path",
        );
        check("type=bind,source=~/x,target=/x", "must be an absolute path");
        check(
            "type=bind,source=/nonexistent,target=/x",
            "source /nonexistent does not exist",
        );
        check(
            "type=bind,source=/tmp/x,target=relative",
            "must be an absolute path",
        );
        check(
            "type=bind,source=/tmp/x,target=/proc/x",
            "target /proc/x is inside /proc",
        );
        check(
            "type=bind,source=/tmp/x,target=/run/iterion/exec",
            "target /run/iterion/exec is reserved",
        );
        check(
            "type=bind,source=/tmp/x,target=/home/jo/src/app",
            "is reserved (the workspace)",
        );
        check(
            "type=bind,source=/tmp/x,target=/home/jo/src/app/newdir",
            "does not exist in the workspace; create it first",
        );
        check("type=bind,source=/tmp/x,target=/home/jo/src/app/data", "allowed");
        check(
            "type=bind,source=/tmp/x,target=/x,bind-propagation=rshared",
            "bind-propagation 'rshared'",
        );
        check(
            "type=bind,source=/tmp/x,target=/x,src=/etc",
            "duplicate key 'source'",
        );
        check("type=bind,source=/tmp/x,target=/x,foo=bar", "unknown key 'foo'");
        check("type=bind,source=/tmp/x ,target=/x", "whitespace");
        check("type=bind,source=/tmp/x,target=/x,ro", "allowed");
        check("type=bind,source=/tmp/x,target=/x,readonly=false", "allowed");
        check("type=bind,source=/tmp/x,target=/x,readonly=maybe", "refused: ");
        check("type=volume,source=cache,target=/cache", "allowed");
        check("type=volume,target=/anon", "allowed");
        check("source=/tmp/x,target=/x", "volume source must be a name");
        check(
            "type=volume,source=x,target=/y,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/var/run",
            "host",
        );
        check("type=volume,source=x,target=/y,volume-driver=local", "allowed");
        check("type=volume,source=x,target=/y,volume-driver=sshfs", "only local");
        check("type=tmpfs,target=/scratch,tmpfs-size=64m", "allowed");
        check("type=tmpfs,source=/x,target=/y", "no source");
        check("type=npipe,source=x,target=/y", "unknown mount type 'npipe'");
        check(
            "type=pvc,source=claim,target=/y",
            "error: Unsupported { driver: Docker, feature: \"pvc mounts\" }",
        );
    }

    #[test]
    fn macos_is_case_insensitive() {
        let got = verdict(HostOs::MacOs, "type=bind,source=/Users/Jo/.SSH,target=/k");
        assert!(got.contains("is a credential location (.ssh)"), "{got}");
        let got = verdict(HostOs::Linux, "type=bind,source=/Users/Jo/.SSH,target=/k");
        assert_eq!(got, "allowed");
    }

    #[test]
    fn workspace_in_the_home_directory_is_refused() {
        let (f, h) = (fs(), facts(HostOs::Linux));
        let p = MountPolicy {
            host: &h,
            fs: &f,
            driver: DriverKind::Docker,
            workspace_target: None,
            workspace_host: None,
            runtime_targets: &[],
        };
        let e = p.check_workspace(Path::new("/home/jo")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mount 'type=bind,source=/home/jo,target=/home/jo' is refused: the workspace /home/jo contains \
/home/jo/.ssh; run iterion from a project directory"
        );
        assert_eq!(p.check_workspace(Path::new("/home/jo/src/app")), Ok(()));
    }

    #[test]
    fn runtime_targets_are_reserved() {
        let (f, h) = (fs(), facts(HostOs::Linux));
        let rt = vec!["/home/jo/.claude".to_string()];
        let p = MountPolicy {
            host: &h,
            fs: &f,
            driver: DriverKind::Docker,
            workspace_target: None,
            workspace_host: None,
            runtime_targets: &rt,
        };
        assert_eq!(
            p.check_target("/home/jo/.claude"),
            Err("target /home/jo/.claude is reserved".into())
        );
        assert_eq!(p.check_target("/"), Err("target / is not allowed".into()));
        assert_eq!(
            p.check_target("/a/../b"),
            Err("target /a/../b must not contain '..'".into())
        );
    }
}
