//! The objects the driver creates, built from plain inputs (07 §5, §7.1): the sibling pod with its security
//! defaults, volumes and overrides, and the per-pod NetworkPolicy that confines it to the runner's egress
//! proxy. Pure: no client, no I/O. The objects are returned as JSON (the wire form the API server receives),
//! so no kube or k8s-openapi type crosses this crate's boundary.

use crate::names::{CONTAINER_NAME, Identity, Owner};
use crate::spec_check::{PodMount, PodUser, Refusal, VolumeKind};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, KeyToPath,
    LocalObjectReference, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext, Toleration, Volume,
    VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Where the exec scripts and pid files live: a memory-backed volume.
pub const EXEC_DIR: &str = "/run/iterion/exec";
/// Where the TLS trust files are copied when TLS inspection is active.
pub const TLS_DIR: &str = "/run/iterion/tls";

/// The keys `ITERION_SANDBOX_K8S_POD_OVERRIDES` may set (security settings are never overridable).
pub const OVERRIDE_KEYS: &[&str] = &[
    "nodeSelector",
    "tolerations",
    "affinity",
    "priorityClassName",
    "runtimeClassName",
    "imagePullSecrets",
    "resources",
    "workspaceSizeLimit",
];

/// Scheduling and resource settings of `ITERION_SANDBOX_K8S_POD_OVERRIDES` (07 §5.4), parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    node_selector: Option<BTreeMap<String, String>>,
    tolerations: Option<Vec<Toleration>>,
    affinity: Option<Affinity>,
    priority_class_name: Option<String>,
    runtime_class_name: Option<String>,
    image_pull_secrets: Option<Vec<LocalObjectReference>>,
    resources: Option<ResourceRequirements>,
    workspace_size_limit: Option<String>,
}

/// The runtime class of a sandbox's runtime: `gvisor` and `kata` are the names their installers and the
/// managed offerings (GKE Sandbox, Kata's Helm chart) give the classes; any other name is taken as the class.
/// `None`: the cluster's default runtime.
pub fn runtime_class(rt: &iterion_spec::resolved::OciRuntime) -> Option<String> {
    (!rt.is_default()).then(|| rt.as_str().to_owned())
}

impl Overrides {
    /// Puts the sandbox's runtime class on the pod. An override naming another class is a [`Refusal`]: the
    /// operator and the workflow disagree on what the pod runs under, and neither may silently win.
    pub fn with_runtime(mut self, rt: &iterion_spec::resolved::OciRuntime) -> Result<Overrides, Refusal> {
        let Some(class) = runtime_class(rt) else {
            return Ok(self);
        };
        match &self.runtime_class_name {
            Some(other) if *other != class => Err(Refusal {
                message: format!(
                    "kubernetes: the sandbox runtime '{rt}' needs runtimeClassName '{class}', but ITERION_SANDBOX_K8S_POD_OVERRIDES sets '{other}'"
                ),
            }),
            _ => {
                self.runtime_class_name = Some(class);
                Ok(self)
            }
        }
    }

    /// The pod's `runtimeClassName`, when one is set.
    pub fn runtime_class_name(&self) -> Option<&str> {
        self.runtime_class_name.as_deref()
    }

    /// Parses the variable's value (empty → no overrides). A key outside [`OVERRIDE_KEYS`] or a value of the
    /// wrong shape is a [`Refusal`] naming the variable.
    pub fn parse(text: &str) -> Result<Overrides, Refusal> {
        let bad = |why: String| Refusal {
            message: format!("kubernetes: ITERION_SANDBOX_K8S_POD_OVERRIDES: {why}"),
        };
        if text.trim().is_empty() {
            return Ok(Overrides::default());
        }
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let serde_json::Value::Object(map) = v else {
            return Err(bad("must be a JSON object".into()));
        };
        let mut o = Overrides::default();
        for (k, v) in map {
            fn take<T: serde::de::DeserializeOwned>(k: &str, v: serde_json::Value) -> Result<T, String> {
                serde_json::from_value(v).map_err(|e| format!("key '{k}': {e}"))
            }
            let r = match k.as_str() {
                "nodeSelector" => take(&k, v).map(|x| o.node_selector = Some(x)),
                "tolerations" => take(&k, v).map(|x| o.tolerations = Some(x)),
                "affinity" => take(&k, v).map(|x| o.affinity = Some(x)),
                "priorityClassName" => take(&k, v).map(|x| o.priority_class_name = Some(x)),
                "runtimeClassName" => take(&k, v).map(|x| o.runtime_class_name = Some(x)),
                "imagePullSecrets" => take(&k, v).map(|x| o.image_pull_secrets = Some(x)),
                "resources" => take(&k, v).map(|x| o.resources = Some(x)),
                "workspaceSizeLimit" => take::<String>(&k, v).map(|x| o.workspace_size_limit = Some(x)),
                other => Err(format!(
                    "key '{other}' is not allowed (allowed: {})",
                    OVERRIDE_KEYS.join(", ")
                )),
            };
            r.map_err(bad)?;
        }
        Ok(o)
    }
}

/// `imagePullPolicy` from `ITERION_SANDBOX_PULL_POLICY` (07 §5.3): `auto` pulls `edge`, `latest` and untagged
/// references always and others if not present; `missing` (the default) if not present; `always`; `never`.
pub fn pull_policy(policy: &str, image: &str) -> &'static str {
    match policy.trim().to_ascii_lowercase().as_str() {
        "always" => "Always",
        "never" => "Never",
        "auto" => {
            let name = image.rsplit('/').next().unwrap_or(image);
            let tag = if image.contains('@') {
                Some("digest")
            } else {
                name.split_once(':').map(|(_, t)| t)
            };
            match tag {
                None | Some("latest") | Some("edge") => "Always",
                Some(_) => "IfNotPresent",
            }
        }
        _ => "IfNotPresent",
    }
}

/// The proxy URL a sandbox pod is given: `http://<user>:<token>@<ip>:<port>`, an IPv6 address in brackets.
pub fn proxy_url(user: &str, token: &str, ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("http://{user}:{token}@{v4}:{port}"),
        IpAddr::V6(v6) => format!("http://{user}:{token}@[{v6}]:{port}"),
    }
}

/// Everything the pod manifest is made of.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PodPlan {
    /// Name, labels, annotations.
    pub identity: Identity,
    /// The namespace.
    pub namespace: String,
    /// The image reference.
    pub image: String,
    /// `ITERION_SANDBOX_PULL_POLICY` (empty: `missing`).
    pub pull_policy: String,
    /// Absolute workspace folder in the container.
    pub workspace: String,
    /// The container scope of the environment (with the reserved proxy variables when a policy is not open).
    pub env: Vec<(String, String)>,
    /// The numeric user, when the spec names one.
    pub user: Option<PodUser>,
    /// The mounts.
    pub mounts: Vec<PodMount>,
    /// TLS inspection is active: a `tls` volume at [`TLS_DIR`].
    pub tls: bool,
    /// `ITERION_SANDBOX_MEMORY_LIMIT`.
    pub memory: Option<String>,
    /// `ITERION_SANDBOX_CPUS`.
    pub cpus: Option<String>,
    /// The overrides.
    pub overrides: Overrides,
    /// The runner (owner references when its pod name and uid are known).
    pub owner: Owner,
}

impl PodPlan {
    /// A plan for `image` with the workspace at `workspace`; the rest empty.
    pub fn new(
        identity: Identity,
        namespace: impl Into<String>,
        image: impl Into<String>,
        workspace: impl Into<String>,
    ) -> Self {
        PodPlan {
            identity,
            namespace: namespace.into(),
            image: image.into(),
            pull_policy: String::new(),
            workspace: workspace.into(),
            env: Vec::new(),
            user: None,
            mounts: Vec::new(),
            tls: false,
            memory: None,
            cpus: None,
            overrides: Overrides::default(),
            owner: Owner::default(),
        }
    }
}

fn meta(identity: &Identity, namespace: &str, owner: &Owner) -> ObjectMeta {
    ObjectMeta {
        name: Some(identity.name.clone()),
        namespace: Some(namespace.to_string()),
        labels: Some(identity.labels.clone()),
        annotations: Some(identity.annotations.clone()),
        owner_references: owner_references(owner),
        ..ObjectMeta::default()
    }
}

fn owner_references(owner: &Owner) -> Option<Vec<OwnerReference>> {
    match (&owner.pod_name, &owner.pod_uid) {
        (Some(name), Some(uid)) if !name.is_empty() && !uid.is_empty() => Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: name.clone(),
            uid: uid.clone(),
            controller: Some(false),
            block_owner_deletion: Some(false),
        }]),
        _ => None,
    }
}

fn seccomp() -> Option<SeccompProfile> {
    Some(SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    })
}

fn memory_dir(size: &str) -> EmptyDirVolumeSource {
    EmptyDirVolumeSource {
        medium: Some("Memory".into()),
        size_limit: Some(Quantity(size.into())),
        ..EmptyDirVolumeSource::default()
    }
}

/// The volumes and the container's mounts, in manifest order.
fn volumes(p: &PodPlan) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mount = |name: &str, path: &str, read_only: bool, sub_path: Option<String>| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        sub_path,
        ..VolumeMount::default()
    };
    let mut vols = vec![
        Volume {
            name: "workspace".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: p.overrides.workspace_size_limit.clone().map(Quantity),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "exec".into(),
            empty_dir: Some(memory_dir("64Mi")),
            ..Volume::default()
        },
    ];
    let mut mounts = vec![
        mount("workspace", &p.workspace, false, None),
        mount("exec", EXEC_DIR, false, None),
    ];
    if p.tls {
        vols.push(Volume {
            name: "tls".into(),
            empty_dir: Some(memory_dir("1Mi")),
            ..Volume::default()
        });
        mounts.push(mount("tls", TLS_DIR, false, None));
    }
    let items = |key: &Option<String>| {
        key.as_ref().map(|k| {
            vec![KeyToPath {
                key: k.clone(),
                path: k.clone(),
                ..KeyToPath::default()
            }]
        })
    };
    for m in &p.mounts {
        let mut v = Volume {
            name: m.volume.clone(),
            ..Volume::default()
        };
        let sub = match &m.kind {
            VolumeKind::Pvc { claim } => {
                v.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.clone(),
                    read_only: m.read_only.then_some(true),
                });
                None
            }
            VolumeKind::ConfigMap { name, key } => {
                v.config_map = Some(ConfigMapVolumeSource {
                    name: name.clone(),
                    items: items(key),
                    ..ConfigMapVolumeSource::default()
                });
                key.clone()
            }
            VolumeKind::Secret { name, key } => {
                v.secret = Some(SecretVolumeSource {
                    secret_name: Some(name.clone()),
                    default_mode: Some(0o400),
                    items: items(key),
                    ..SecretVolumeSource::default()
                });
                key.clone()
            }
            VolumeKind::Tmpfs { size } => {
                v.empty_dir = Some(EmptyDirVolumeSource {
                    medium: Some("Memory".into()),
                    size_limit: size.clone().map(Quantity),
                    ..EmptyDirVolumeSource::default()
                });
                None
            }
        };
        vols.push(v);
        mounts.push(mount(&m.volume, &m.target, m.read_only, sub));
    }
    (vols, mounts)
}

fn resources(p: &PodPlan) -> Option<ResourceRequirements> {
    if let Some(r) = &p.overrides.resources {
        return Some(r.clone());
    }
    let mut limits = BTreeMap::new();
    if let Some(m) = &p.memory {
        limits.insert("memory".to_string(), Quantity(m.clone()));
    }
    if let Some(c) = &p.cpus {
        limits.insert("cpu".to_string(), Quantity(c.clone()));
    }
    (!limits.is_empty()).then(|| ResourceRequirements {
        requests: Some(limits.clone()),
        limits: Some(limits),
        ..ResourceRequirements::default()
    })
}

fn container(p: &PodPlan, mounts: Vec<VolumeMount>) -> Container {
    let mut env: Vec<(String, String)> = p.env.clone();
    env.sort();
    let mut env: Vec<EnvVar> = env
        .into_iter()
        .map(|(name, value)| EnvVar {
            name,
            value: Some(value),
            value_from: None,
        })
        .collect();
    // Runtime-reserved: the copied workspace is safe for git whatever the owner of its files.
    for (n, v) in [
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "safe.directory"),
        ("GIT_CONFIG_VALUE_0", p.workspace.as_str()),
    ] {
        env.retain(|e| e.name != n);
        env.push(EnvVar {
            name: n.into(),
            value: Some(v.into()),
            value_from: None,
        });
    }
    Container {
        name: CONTAINER_NAME.into(),
        image: Some(p.image.clone()),
        image_pull_policy: Some(pull_policy(&p.pull_policy, &p.image).into()),
        command: Some(vec!["sleep".into(), "infinity".into()]),
        working_dir: Some(p.workspace.clone()),
        env: Some(env),
        volume_mounts: Some(mounts),
        resources: resources(p),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                add: None,
                drop: Some(vec!["ALL".into()]),
            }),
            privileged: Some(false),
            run_as_non_root: Some(true),
            read_only_root_filesystem: Some(false),
            seccomp_profile: seccomp(),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

/// The sibling pod (07 §5).
pub fn pod(p: &PodPlan) -> Pod {
    let (volumes, mounts) = volumes(p);
    let o = &p.overrides;
    Pod {
        metadata: meta(&p.identity, &p.namespace, &p.owner),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            host_network: Some(false),
            host_pid: Some(false),
            host_ipc: Some(false),
            share_process_namespace: Some(true),
            termination_grace_period_seconds: Some(5),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: p.user.map(|u| u.uid),
                run_as_group: p.user.and_then(|u| u.gid),
                fs_group: p.user.map(|u| u.fs_group()),
                fs_group_change_policy: Some("OnRootMismatch".into()),
                seccomp_profile: seccomp(),
                ..PodSecurityContext::default()
            }),
            containers: vec![container(p, mounts)],
            volumes: Some(volumes),
            node_selector: o.node_selector.clone(),
            tolerations: o.tolerations.clone(),
            affinity: o.affinity.clone(),
            priority_class_name: o.priority_class_name.clone(),
            runtime_class_name: o.runtime_class_name.clone(),
            image_pull_secrets: o.image_pull_secrets.clone(),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// The pod as the JSON the API server receives.
pub fn pod_json(p: &PodPlan) -> serde_json::Value {
    serde_json::to_value(pod(p)).unwrap_or(serde_json::Value::Null)
}

/// The runner's proxy addresses (`ITERION_POD_IP`, `ITERION_POD_IPS`), parsed and de-duplicated; an empty
/// list when none is set. A value that is not an IP address is an error naming the variable.
pub fn proxy_addresses(pod_ip: Option<&str>, pod_ips: Option<&str>) -> Result<Vec<IpAddr>, Refusal> {
    let mut out: Vec<IpAddr> = Vec::new();
    for (var, text) in [("ITERION_POD_IP", pod_ip), ("ITERION_POD_IPS", pod_ips)] {
        for part in text
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let ip: IpAddr = part.parse().map_err(|_| Refusal {
                message: format!("{var}: '{part}' is not an IP address"),
            })?;
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
    }
    Ok(out)
}

/// The NetworkPolicy that confines the pod named by `identity` (07 §7.1): no ingress; egress only to the
/// runner's proxy (`addresses`, TCP `port`) and to cluster DNS.
pub fn network_policy(
    identity: &Identity,
    namespace: &str,
    owner: &Owner,
    addresses: &[IpAddr],
    port: u16,
) -> NetworkPolicy {
    let selector = |pairs: &[(&str, &str)]| LabelSelector {
        match_labels: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        match_expressions: None,
    };
    let port_of = |proto: &str, n: i32| NetworkPolicyPort {
        protocol: Some(proto.into()),
        port: Some(IntOrString::Int(n)),
        end_port: None,
    };
    let proxy = NetworkPolicyEgressRule {
        to: Some(
            addresses
                .iter()
                .map(|ip| NetworkPolicyPeer {
                    ip_block: Some(IPBlock {
                        cidr: match ip {
                            IpAddr::V4(_) => format!("{ip}/32"),
                            IpAddr::V6(_) => format!("{ip}/128"),
                        },
                        except: None,
                    }),
                    ..NetworkPolicyPeer::default()
                })
                .collect(),
        ),
        ports: Some(vec![port_of("TCP", i32::from(port))]),
    };
    let dns = NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(selector(&[("kubernetes.io/metadata.name", "kube-system")])),
            pod_selector: Some(selector(&[("k8s-app", "kube-dns")])),
            ip_block: None,
        }]),
        ports: Some(vec![port_of("UDP", 53), port_of("TCP", 53)]),
    };
    NetworkPolicy {
        metadata: meta(identity, namespace, owner),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(&[("iterion.io/pod", identity.name.as_str())])),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(Vec::new()),
            egress: Some(vec![proxy, dns]),
        }),
    }
}

/// The NetworkPolicy as the JSON the API server receives.
pub fn network_policy_json(
    identity: &Identity,
    namespace: &str,
    owner: &Owner,
    addresses: &[IpAddr],
    port: u16,
) -> serde_json::Value {
    serde_json::to_value(network_policy(identity, namespace, owner, addresses, port))
        .unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policies() {
        for (policy, image, expect) in [
            ("", "img:1.2", "IfNotPresent"),
            ("missing", "img", "IfNotPresent"),
            ("always", "img:1.2", "Always"),
            ("never", "img", "Never"),
            ("auto", "img", "Always"),
            ("auto", "img:latest", "Always"),
            ("auto", "reg:5000/img:edge", "Always"),
            ("auto", "reg:5000/img", "Always"),
            ("auto", "img:1.2", "IfNotPresent"),
            ("auto", "img@sha256:abc", "IfNotPresent"),
        ] {
            assert_eq!(pull_policy(policy, image), expect, "{policy} {image}");
        }
    }

    #[test]
    fn overrides_allow_only_scheduling_and_resources() {
        let e = Overrides::parse(r#"{"securityContext": {}}"#).expect_err("refused");
        assert!(
            e.message.starts_with(
                "kubernetes: ITERION_SANDBOX_K8S_POD_OVERRIDES: key 'securityContext' is not allowed"
            ),
            "{e}"
        );
        assert!(Overrides::parse("[1]").is_err());
        assert!(Overrides::parse(r#"{"tolerations": 3}"#).is_err());
        let o = Overrides::parse(r#"{"runtimeClassName": "gvisor", "nodeSelector": {"pool": "sandbox"}}"#)
            .unwrap();
        assert_eq!(o.runtime_class_name.as_deref(), Some("gvisor"));
        // the sandbox's runtime agrees with the override, or sets the class itself, or is refused
        use iterion_spec::resolved::OciRuntime;
        let same = o.clone().with_runtime(&OciRuntime::Gvisor).unwrap();
        assert_eq!(same.runtime_class_name(), Some("gvisor"));
        let e = o.clone().with_runtime(&OciRuntime::Kata).unwrap_err();
        assert_eq!(
            e.message,
            "kubernetes: the sandbox runtime 'kata' needs runtimeClassName 'kata', but ITERION_SANDBOX_K8S_POD_OVERRIDES sets 'gvisor'"
        );
        let set = Overrides::default()
            .with_runtime(&OciRuntime::Named("kata-fc".into()))
            .unwrap();
        assert_eq!(set.runtime_class_name(), Some("kata-fc"));
        assert_eq!(
            Overrides::default()
                .with_runtime(&OciRuntime::Default)
                .unwrap()
                .runtime_class_name(),
            None
        );
        assert_eq!(Overrides::parse(" ").unwrap(), Overrides::default());
    }

    #[test]
    fn proxy_urls_and_addresses() {
        assert_eq!(
            proxy_url("run", "t0k", "10.42.0.7".parse().unwrap(), 41237),
            "http://run:t0k@10.42.0.7:41237"
        );
        assert_eq!(
            proxy_url("run", "t0k", "fd00:10:42::7".parse().unwrap(), 41237),
            "http://run:t0k@[fd00:10:42::7]:41237"
        );
        let a = proxy_addresses(Some("10.42.0.7"), Some("10.42.0.7,fd00:10:42::7")).unwrap();
        assert_eq!(a.len(), 2);
        assert!(proxy_addresses(None, None).unwrap().is_empty());
        assert_eq!(
            proxy_addresses(Some("pod-a"), None).unwrap_err().message,
            "ITERION_POD_IP: 'pod-a' is not an IP address"
        );
    }
}
