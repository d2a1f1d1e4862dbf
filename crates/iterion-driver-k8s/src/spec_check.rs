//! What the kubernetes driver refuses before creating anything (07 §3), and the parsing of the settings it
//! takes from the spec: the numeric user, the kubernetes mount forms (`type=pvc|configmap|secret|tmpfs`) and
//! the pod overrides. Pure functions; every refusal is a [`Refusal`] whose message is the user-facing text
//! (the driver reports it as `SANDBOX_SPEC_INVALID`).

use iterion_spec::resolved::{HostState, ResolvedSandbox};
use iterion_spec::values::{Mount, MountKind};
use std::collections::BTreeMap;

/// A spec the kubernetes driver cannot honour, with the reason in the user's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// The message (it names the setting and the way out).
    pub message: String,
}

fn refuse(message: impl Into<String>) -> Refusal {
    Refusal {
        message: message.into(),
    }
}

/// The pod's numeric user (07 §5.2, §15.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodUser {
    /// `runAsUser`.
    pub uid: i64,
    /// `runAsGroup`, when the spec gives one.
    pub gid: Option<i64>,
}

impl PodUser {
    /// `fsGroup`: the gid when given and above 0, else the uid.
    pub fn fs_group(&self) -> i64 {
        match self.gid {
            Some(g) if g > 0 => g,
            _ => self.uid,
        }
    }
}

/// Parses `sandbox.user`: empty → `None` (the image's user, which the kubelet must find numeric and non-root);
/// `uid` or `uid:gid`, both decimal; uid 0 is refused (pods run with `runAsNonRoot`).
pub fn parse_user(user: Option<&str>) -> Result<Option<PodUser>, Refusal> {
    let Some(u) = user.map(str::trim).filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let numeric = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let not_numeric = || {
        refuse(format!(
            "kubernetes: sandbox.user \"{u}\" must be numeric (\"uid\" or \"uid:gid\")"
        ))
    };
    let (uid, gid) = match u.split_once(':') {
        Some((a, b)) => (
            numeric(a).ok_or_else(not_numeric)?,
            Some(numeric(b).ok_or_else(not_numeric)?),
        ),
        None => (numeric(u).ok_or_else(not_numeric)?, None),
    };
    if uid == 0 {
        return Err(refuse(format!(
            "kubernetes: sandbox.user \"{u}\" runs as root; pods run with runAsNonRoot, use a non-zero uid"
        )));
    }
    Ok(Some(PodUser { uid, gid }))
}

/// A volume of the kubernetes mount forms (07 §5.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeKind {
    /// A `PersistentVolumeClaim` by name.
    Pvc {
        /// The claim.
        claim: String,
    },
    /// A `ConfigMap` by name, optionally one key.
    ConfigMap {
        /// The config map.
        name: String,
        /// One key, mounted with `subPath`.
        key: Option<String>,
    },
    /// A `Secret` by name, optionally one key; always read-only, mode 0400.
    Secret {
        /// The secret.
        name: String,
        /// One key, mounted with `subPath`.
        key: Option<String>,
    },
    /// A memory-backed `emptyDir`.
    Tmpfs {
        /// `sizeLimit`, when given (`tmpfs-size`).
        size: Option<String>,
    },
}

/// One mount of the pod, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodMount {
    /// What is mounted.
    pub kind: VolumeKind,
    /// Absolute path in the container.
    pub target: String,
    /// Mounted read-only (always for secrets).
    pub read_only: bool,
    /// The volume name: `m<i>-<sanitised source>`.
    pub volume: String,
}

/// The volume name of mount `i`: `m<i>-<source>` with the source reduced to `[a-z0-9-]` (other characters
/// become `-`), trimmed of `-`, at most 50 characters; `m<i>` when nothing is left.
pub fn volume_name(i: usize, source: &str) -> String {
    let s: String = source
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s: String = s.trim_matches('-').chars().take(50).collect();
    let s = s.trim_matches('-');
    if s.is_empty() {
        format!("m{i}")
    } else {
        format!("m{i}-{s}")
    }
}

/// Parses one mount in the kubernetes forms: comma-separated `key=value` with the keys `type`,
/// `source`/`src`, `target`/`dst`/`destination`, `key`, `readonly`/`ro` (and `tmpfs-size` for tmpfs).
/// `type=bind` and `type=volume` are refused (no host file system, no engine volumes); the target must be
/// absolute and must not be the workspace or lie under `/run/iterion`.
pub fn parse_mount(i: usize, text: &str, workspace: &str) -> Result<PodMount, Refusal> {
    let bad = |why: &str| refuse(format!("kubernetes: mount '{text}': {why}"));
    let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
    let mut read_only = false;
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = match part.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None if matches!(part, "readonly" | "ro") => {
                read_only = true;
                continue;
            }
            None => return Err(bad(&format!("'{part}' is not key=value"))),
        };
        let k = match k {
            "type" | "key" | "tmpfs-size" => k,
            "source" | "src" => "source",
            "target" | "dst" | "destination" => "target",
            "readonly" | "ro" => {
                read_only = match v {
                    "true" | "1" | "" => true,
                    "false" | "0" => false,
                    other => return Err(bad(&format!("readonly '{other}' is not true or false"))),
                };
                continue;
            }
            other => return Err(bad(&format!("unknown key '{other}'"))),
        };
        if fields.insert(k, v).is_some() {
            return Err(bad(&format!("key '{k}' is given twice")));
        }
    }
    let kind = fields.get("type").copied().unwrap_or("");
    match kind {
        "bind" => {
            return Err(bad(
                "type=bind is not supported (pods have no host file system); use type=pvc, configmap or secret",
            ));
        }
        "volume" | "" => return Err(bad("engine volumes do not exist on kubernetes; use type=pvc")),
        "pvc" | "configmap" | "secret" | "tmpfs" => {}
        other => {
            return Err(bad(&format!(
                "type '{other}' is not one of pvc, configmap, secret, tmpfs"
            )));
        }
    }
    let target = fields.get("target").copied().unwrap_or("");
    if target.is_empty() {
        return Err(bad("target is required"));
    }
    if !target.starts_with('/') {
        return Err(bad("target must be absolute"));
    }
    let t = target.trim_end_matches('/');
    let ws = workspace.trim_end_matches('/');
    if t == ws || t == "/run/iterion" || t.starts_with("/run/iterion/") || t.is_empty() {
        return Err(bad(
            "target must not be the workspace, / or lie under /run/iterion",
        ));
    }
    let source = fields.get("source").copied().unwrap_or("");
    let key = fields.get("key").map(|k| k.to_string()).filter(|k| !k.is_empty());
    if kind != "tmpfs" && source.is_empty() {
        return Err(bad("source is required"));
    }
    if key.is_some() && !matches!(kind, "configmap" | "secret") {
        return Err(bad("key applies to configmap and secret only"));
    }
    let kind = match kind {
        "pvc" => VolumeKind::Pvc {
            claim: source.to_string(),
        },
        "configmap" => VolumeKind::ConfigMap {
            name: source.to_string(),
            key,
        },
        "secret" => {
            read_only = true;
            VolumeKind::Secret {
                name: source.to_string(),
                key,
            }
        }
        _ => VolumeKind::Tmpfs {
            size: fields.get("tmpfs-size").map(|s| s.to_string()),
        },
    };
    Ok(PodMount {
        kind,
        target: target.to_string(),
        read_only,
        volume: volume_name(i, source),
    })
}

/// A spec mount of the engine forms, translated: tmpfs becomes a memory `emptyDir`; binds and engine volumes
/// are refused with the text of the mount.
pub fn engine_mount(i: usize, m: &Mount, workspace: &str) -> Result<PodMount, Refusal> {
    let text = m.to_string();
    match m.kind {
        MountKind::Bind => Err(refuse(format!(
            "kubernetes: mount '{text}': type=bind is not supported (pods have no host file system); use type=pvc, configmap or secret"
        ))),
        MountKind::Volume => Err(refuse(format!(
            "kubernetes: mount '{text}': engine volumes do not exist on kubernetes; use type=pvc"
        ))),
        MountKind::Tmpfs => parse_mount(i, &format!("type=tmpfs,target={}", m.target), workspace),
    }
}

/// Whether a `host_state` label names an explicit choice (CLI, workflow, node, environment) rather than the
/// built-in default, which the driver may drop silently (with an event) instead of refusing.
pub fn host_state_is_explicit(source: &str) -> bool {
    !(source.is_empty() || source == "default" || source.starts_with("default"))
}

/// Every refusal of 07 §3 that depends on the spec alone, in order: build (or no image), an explicit
/// `host_state: auto`, the user, each mount. The driver stops at the first; the doctor lists them all.
pub fn refusals(sb: &ResolvedSandbox) -> Vec<Refusal> {
    let mut out = Vec::new();
    if sb.build.is_some() {
        out.push(refuse(
            "kubernetes: sandbox.build is local-only; build the image in CI and reference it with sandbox.image (pin a digest)",
        ));
    } else if sb.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
        out.push(refuse("kubernetes: sandbox.image is required"));
    }
    if sb.host_state == HostState::Auto && host_state_is_explicit(&sb.host_state_source) {
        out.push(refuse(
            "host_state auto cannot be honoured by the kubernetes driver; set host_state: none",
        ));
    }
    if let Err(e) = parse_user(sb.user.as_deref()) {
        out.push(e);
    }
    for (i, m) in sb.mounts.iter().enumerate() {
        if let Err(e) = engine_mount(i, m, &sb.workspace_folder) {
            out.push(e);
        }
    }
    out
}

/// The refusals of 07 §3 that depend on the spec alone ([`refusals`]), the first one; otherwise the parsed
/// user and mounts.
pub fn check(sb: &ResolvedSandbox) -> Result<(Option<PodUser>, Vec<PodMount>), Refusal> {
    if let Some(first) = refusals(sb).into_iter().next() {
        return Err(first);
    }
    let user = parse_user(sb.user.as_deref())?;
    let mounts = sb
        .mounts
        .iter()
        .enumerate()
        .map(|(i, m)| engine_mount(i, m, &sb.workspace_folder))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((user, mounts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users() {
        let ok = |u: &str, uid: i64, gid: Option<i64>, fs: i64| {
            let p = parse_user(Some(u)).expect(u).expect(u);
            assert_eq!((p.uid, p.gid, p.fs_group()), (uid, gid, fs), "{u}");
        };
        assert_eq!(parse_user(None), Ok(None));
        assert_eq!(parse_user(Some("")), Ok(None));
        ok("1000", 1000, None, 1000);
        ok("1000:2000", 1000, Some(2000), 2000);
        ok("10001:10001", 10001, Some(10001), 10001);
        ok("1000:0", 1000, Some(0), 1000);
        for root in ["0", "0:0", "0:1000"] {
            let e = parse_user(Some(root)).expect_err(root);
            assert!(e.message.contains("runs as root"), "{e}");
        }
        for bad in ["node", "root", "1000:staff", "-1", "1000:"] {
            let e = parse_user(Some(bad)).expect_err(bad);
            assert_eq!(
                e.message,
                format!("kubernetes: sandbox.user \"{bad}\" must be numeric (\"uid\" or \"uid:gid\")")
            );
        }
    }

    fn refused(text: &str) -> String {
        parse_mount(0, text, "/workspace").expect_err(text).message
    }

    #[test]
    fn mount_forms() {
        assert_eq!(
            refused("type=bind,source=/data,target=/data"),
            "kubernetes: mount 'type=bind,source=/data,target=/data': type=bind is not supported (pods have no host file system); use type=pvc, configmap or secret"
        );
        assert!(refused("type=pvc,source=cache,target=relative").ends_with("target must be absolute"));
        assert!(refused("type=pvc,target=/x").ends_with("source is required"));
        assert!(refused("type=pvc,source=c,target=/x,color=red").ends_with("unknown key 'color'"));
        assert!(refused("type=pvc,source=c,target=/workspace").contains("must not be the workspace"));
        assert!(refused("type=pvc,source=c,target=/run/iterion/exec").contains("/run/iterion"));
        assert!(refused("source=c,target=/x").contains("engine volumes"));
        let m = parse_mount(2, "type=secret,src=Api Keys,dst=/etc/k,key=token", "/workspace").unwrap();
        assert_eq!(
            m,
            PodMount {
                kind: VolumeKind::Secret {
                    name: "Api Keys".into(),
                    key: Some("token".into())
                },
                target: "/etc/k".into(),
                read_only: true,
                volume: "m2-api-keys".into(),
            }
        );
        let m = parse_mount(0, "type=pvc,source=cache,target=/cache,ro", "/workspace").unwrap();
        assert!(m.read_only);
        assert_eq!(volume_name(3, "..."), "m3");
        assert_eq!(volume_name(1, &"x".repeat(80)).len(), 53);
    }

    #[test]
    fn host_state_sources() {
        assert!(!host_state_is_explicit("default"));
        assert!(!host_state_is_explicit(""));
        assert!(host_state_is_explicit("cli"));
        assert!(host_state_is_explicit("workflow"));
        assert!(host_state_is_explicit("ITERION_SANDBOX_HOST_STATE"));
    }
}
