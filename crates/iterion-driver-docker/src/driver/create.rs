//! Start, second step: the container's create options (labels, hardening, limits, mounts) and the create
//! itself, resolving a name conflict once and retrying once without rejected limits (03 §8.1, §8.7, §8.8).

use super::plan::{MountPlan, RELAY_BIN_TARGET, RELAY_LISTEN, RELAY_SOCK_TARGET, UserPlan};
use crate::container::engine_error;
use crate::engine::EngineFacts;
use crate::error::status_of;
use crate::mounts::{MountKind, Origin, Planned};
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount as BMount, MountBindOptions, MountBindOptionsPropagationEnum,
    MountTmpfsOptions, MountType, MountVolumeOptions, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use iterion_driver::labels::{self, Component, LabelInput};
use iterion_driver::owner::{HostProcesses, owner_liveness};
use iterion_driver::{EgressPlacement, Error as DError, HardeningProfile, Liveness, LogLevel, StartRequest};
use std::collections::{BTreeMap, HashMap};

const CAPS_STRICT: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "NET_BIND_SERVICE",
];
const CAPS_COMPAT_EXTRA: &[&str] = &["AUDIT_WRITE", "SETPCAP", "SYS_CHROOT"];

/// The hardening of 03 §8.7 and the resource limits as the engine takes them.
#[derive(Debug, Clone)]
pub(super) struct Hardening {
    /// The strict profile.
    pub(super) strict: bool,
    /// Capabilities added after dropping all.
    pub(super) cap_add: Vec<String>,
    security_opt: Option<Vec<String>>,
    pids: Option<i64>,
    memory: Option<i64>,
    nano_cpus: Option<i64>,
}

impl Hardening {
    /// The hardening of `req` on this engine.
    pub(super) fn of(req: &StartRequest, facts: &EngineFacts) -> Self {
        let mut cap_add: Vec<String> = CAPS_STRICT.iter().map(|s| s.to_string()).collect();
        let strict = req.hardening == HardeningProfile::Strict;
        if !strict {
            cap_add.extend(CAPS_COMPAT_EXTRA.iter().map(|s| s.to_string()));
        }
        let security_opt = if strict {
            Some(vec![if facts.podman {
                "no-new-privileges".to_string()
            } else {
                "no-new-privileges:true".to_string()
            }])
        } else {
            None
        };
        let limits = &req.limits;
        Self {
            strict,
            cap_add,
            security_opt,
            pids: limits.pids.filter(|p| *p > 0).and_then(|p| i64::try_from(p).ok()),
            memory: limits.memory_bytes.and_then(|m| i64::try_from(m).ok()),
            nano_cpus: limits.nano_cpus.and_then(|n| i64::try_from(n).ok()),
        }
    }

    fn any_limit(&self) -> bool {
        self.pids.is_some() || self.memory.is_some() || self.nano_cpus.is_some()
    }

    /// The names of the limits set (`pids`, `memory`, `cpus`).
    fn limit_names(&self) -> Vec<String> {
        [
            (self.pids.is_some(), "pids"),
            (self.memory.is_some(), "memory"),
            (self.nano_cpus.is_some(), "cpus"),
        ]
        .into_iter()
        .filter(|(set, _)| *set)
        .map(|(_, n)| n.to_string())
        .collect()
    }
}

/// Everything the create request is made of.
#[derive(Debug)]
pub(super) struct CreateSpec<'a> {
    /// The container name.
    pub(super) name: &'a str,
    /// The image id (or reference when the engine gave no id).
    pub(super) image: &'a str,
    /// The egress placement.
    pub(super) placement: EgressPlacement,
    /// The mounts.
    pub(super) mounts: &'a MountPlan,
    /// User, environment, tmpfs.
    pub(super) user: &'a UserPlan,
    /// The labels of 03 §8.1.1.
    pub(super) labels: BTreeMap<String, String>,
    /// Hardening and limits.
    pub(super) hardening: &'a Hardening,
    /// The OCI runtime, when the spec names one.
    pub(super) oci_runtime: Option<String>,
}

/// The labels of 03 §8.1.1 of the sandbox of `req`.
pub(super) fn sandbox_labels(
    req: &StartRequest,
    node: bool,
    image: &str,
    iterion_version: &str,
) -> BTreeMap<String, String> {
    labels::sandbox_labels(&LabelInput {
        component: req
            .component
            .unwrap_or(if node { Component::Node } else { Component::Run }),
        run_id: &req.run_id,
        run_name: req.run_name.as_deref(),
        owner: &req.owner,
        sandbox_key: &req.sandbox_key,
        image: Some(image),
        version: iterion_version,
    })
}

impl CreateSpec<'_> {
    fn host_config(&self, with_limits: bool) -> HostConfig {
        let h = self.hardening;
        let limit = |v: Option<i64>| if with_limits { v } else { None };
        HostConfig {
            mounts: Some(self.mounts.planned.iter().map(to_engine_mount).collect()),
            tmpfs: Some(self.user.tmpfs.clone()),
            network_mode: (self.placement == EgressPlacement::Relay).then(|| "none".to_string()),
            init: Some(true),
            auto_remove: Some(false),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            privileged: Some(false),
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(h.cap_add.clone()),
            security_opt: h.security_opt.clone(),
            pids_limit: limit(h.pids),
            memory: limit(h.memory),
            memory_swap: limit(h.memory),
            nano_cpus: limit(h.nano_cpus),
            shm_size: Some(256 * 1024 * 1024),
            ipc_mode: Some("private".into()),
            readonly_rootfs: Some(false),
            runtime: self.oci_runtime.clone(),
            userns_mode: self.user.remap.keep_id.then(|| "keep-id".to_string()),
            ..Default::default()
        }
    }

    fn body(&self, with_limits: bool) -> ContainerCreateBody {
        let (entrypoint, cmd) = if self.placement == EgressPlacement::Relay {
            (
                vec![RELAY_BIN_TARGET.to_string()],
                vec![
                    "--listen".into(),
                    RELAY_LISTEN.into(),
                    "--connect".into(),
                    RELAY_SOCK_TARGET.into(),
                ],
            )
        } else {
            (vec!["sleep".to_string()], vec!["infinity".to_string()])
        };
        ContainerCreateBody {
            image: Some(self.image.to_string()),
            entrypoint: Some(entrypoint),
            cmd: Some(cmd),
            env: Some(self.user.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: Some(self.mounts.workspace.clone()),
            user: self.user.remap.user.clone(),
            labels: Some(self.labels.clone().into_iter().collect::<HashMap<_, _>>()),
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            tty: Some(false),
            open_stdin: Some(false),
            stop_signal: Some("SIGTERM".into()),
            stop_timeout: Some(5),
            host_config: Some(self.host_config(with_limits)),
            ..Default::default()
        }
    }
}

/// Creates the container: a name conflict is resolved once ([`resolve_conflict`]), limits the engine rejects
/// are dropped once with a warning. Returns the container id and the names of the limits left out.
pub(super) async fn create_container(
    docker: &Docker,
    spec: &CreateSpec<'_>,
    req: &StartRequest,
    this_host: &str,
) -> Result<(String, Vec<String>), DError> {
    let name = spec.name;
    let opts = || CreateContainerOptions {
        name: Some(name.to_string()),
        platform: String::new(),
    };
    let mut limits_ignored = Vec::new();
    let mut conflict_resolved = false;
    let mut with_limits = true;
    loop {
        match docker
            .create_container(Some(opts()), spec.body(with_limits))
            .await
        {
            Ok(r) => return Ok((r.id, limits_ignored)),
            Err(e) if status_of(&e) == Some(409) && !conflict_resolved => {
                conflict_resolved = true;
                resolve_conflict(docker, name, req, this_host).await?;
            }
            Err(e) if with_limits && spec.hardening.any_limit() && limit_rejected(&e.to_string()) => {
                with_limits = false;
                limits_ignored = spec.hardening.limit_names();
                req.events.log(
                    LogLevel::Warn,
                    format!(
                        "the engine rejected resource limits ({e}); retrying without {}",
                        limits_ignored.join(", ")
                    ),
                );
            }
            Err(e) => {
                return Err(DError::StartFailed {
                    reason: format!("create {name}: {}", engine_error(e)),
                    hint: None,
                });
            }
        }
    }
}

/// Force-removes a container, ignoring the answer.
pub(super) async fn remove_container_quiet(docker: &Docker, id: &str) {
    let _ = docker
        .remove_container(
            id,
            Some(RemoveContainerOptions {
                v: true,
                force: true,
                link: false,
            }),
        )
        .await;
}

fn is_self(labels: &BTreeMap<String, String>, owner: &iterion_driver::OwnerInfo) -> bool {
    labels.get(labels::OWNER_HOST) == Some(&owner.host_name)
        && labels.get(labels::OWNER_PID) == Some(&owner.pid.to_string())
        && labels.get(labels::OWNER_START) == Some(&owner.start_time.to_string())
}

/// 03 §8.8 step 2: what to do with an existing container of the same name.
async fn resolve_conflict(
    docker: &Docker,
    name: &str,
    req: &StartRequest,
    this_host: &str,
) -> Result<(), DError> {
    let existing = docker.inspect_container(name, None).await.map_err(engine_error)?;
    let labels: BTreeMap<String, String> = existing
        .config
        .and_then(|c| c.labels)
        .unwrap_or_default()
        .into_iter()
        .collect();
    let id = existing.id.unwrap_or_else(|| name.to_string());
    if labels.get(labels::MANAGED).map(String::as_str) != Some("true") {
        return Err(DError::StartFailed {
            reason: format!("a container named {name} exists and is not managed by iterion"),
            hint: Some("remove it or use another run id".into()),
        });
    }
    // The runtime runs crash recovery before start, so a dead owner's run is terminal by now (05 §8.5).
    if is_self(&labels, &req.owner) || owner_liveness(&labels, this_host, &HostProcesses) == Liveness::Dead {
        remove_container_quiet(docker, &id).await;
        return Ok(());
    }
    Err(DError::SandboxInUse {
        run_id: labels
            .get(labels::RUN_ID)
            .cloned()
            .unwrap_or_else(|| req.run_id.clone()),
        owner_host: labels.get(labels::OWNER_HOST).cloned().unwrap_or_default(),
        owner_pid: labels
            .get(labels::OWNER_PID)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0),
    })
}

fn limit_rejected(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    ["pids", "memory", "cpu", "cgroup"].iter().any(|w| m.contains(w))
}

fn to_engine_mount(m: &Planned) -> BMount {
    match m.kind {
        MountKind::Bind => BMount {
            typ: Some(MountType::BIND),
            source: m.source.clone(),
            target: Some(m.target.clone()),
            read_only: Some(m.read_only),
            bind_options: (m.origin == Origin::Workspace).then(|| MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                ..Default::default()
            }),
            ..Default::default()
        },
        MountKind::Volume => BMount {
            typ: Some(MountType::VOLUME),
            source: m.source.clone(),
            target: Some(m.target.clone()),
            read_only: Some(m.read_only),
            volume_options: Some(MountVolumeOptions::default()),
            ..Default::default()
        },
        MountKind::Tmpfs => BMount {
            typ: Some(MountType::TMPFS),
            target: Some(m.target.clone()),
            read_only: Some(m.read_only),
            tmpfs_options: Some(MountTmpfsOptions {
                size_bytes: m.tmpfs_size.and_then(|s| i64::try_from(s).ok()),
                mode: m.tmpfs_mode.map(i64::from),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}
