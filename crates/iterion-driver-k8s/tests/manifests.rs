//! The objects the kubernetes driver creates, as the API server receives them (insta snapshots), and the
//! shipped manifests of `deploy/kubernetes/` read into Kubernetes types and checked against the driver's own
//! rules. `cargo insta review` updates the snapshots after an intended change.

use iterion_driver_k8s::cluster::REQUIRED_RBAC;
use iterion_driver_k8s::manifest::{
    Overrides, PodPlan, network_policy_json, pod_json, proxy_addresses, proxy_url,
};
use iterion_driver_k8s::names::{Component, Owner, identity};
use iterion_driver_k8s::script::script;
use iterion_driver_k8s::spec_check::{parse_mount, parse_user};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::Role;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

const RUN: &str = "0190f5c2-7d1e-7abc-9def-0123456789ab";

fn owner() -> Owner {
    let mut o = Owner::new("runner-host", 4242, 1_764_633_600);
    o.store = "/var/lib/iterion/store".into();
    o
}

fn plan(run_id: &str, node_key: Option<&str>) -> PodPlan {
    let component = if node_key.is_some() {
        Component::Node
    } else {
        Component::Run
    };
    let id = identity(run_id, Some("bold-fox"), node_key, component, &owner());
    PodPlan::new(
        id,
        "iterion",
        "registry.example/sandbox@sha256:0123",
        "/workspace",
    )
}

#[test]
fn pod_minimal() {
    insta::assert_json_snapshot!("pod_minimal", pod_json(&plan(RUN, None)));
}

#[test]
fn pod_user_proxy() {
    let mut p = plan(RUN, None);
    p.user = parse_user(Some("1000:1000")).unwrap();
    let url = proxy_url("run", "TOKEN", "10.42.0.7".parse().unwrap(), 41237);
    for n in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        p.env.push((n.into(), url.clone()));
    }
    p.env.push(("NO_PROXY".into(), "localhost,127.0.0.1,::1".into()));
    p.env.push(("PLAIN".into(), "kept".into()));
    insta::assert_json_snapshot!("pod_user_proxy", pod_json(&p));
}

#[test]
fn pod_node_container() {
    insta::assert_json_snapshot!(
        "pod_node_container",
        pod_json(&plan(RUN, Some("3f2a9c81e0d4b5a6")))
    );
}

#[test]
fn pod_mounts() {
    let mut p = plan(RUN, None);
    p.mounts = [
        "type=pvc,source=cache,target=/cache",
        "type=configmap,source=settings,target=/etc/app/config.toml,key=config.toml",
        "type=secret,source=api-keys,target=/run/secrets/token,key=token",
        "type=tmpfs,target=/scratch,tmpfs-size=64Mi",
    ]
    .iter()
    .enumerate()
    .map(|(i, m)| parse_mount(i, m, "/workspace").unwrap())
    .collect();
    insta::assert_json_snapshot!("pod_mounts", pod_json(&p));
}

#[test]
fn pod_overrides() {
    let mut p = plan(RUN, None);
    p.overrides = Overrides::parse(
        r#"{"runtimeClassName": "gvisor",
            "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"pool": "sandboxes"},
            "resources": {"limits": {"memory": "2Gi", "cpu": "1"}},
            "workspaceSizeLimit": "10Gi"}"#,
    )
    .unwrap();
    p.memory = Some("512Mi".into()); // the overrides' resources win
    insta::assert_json_snapshot!("pod_overrides", pod_json(&p));
}

#[test]
fn pod_long_run_id() {
    let long = "R".repeat(200);
    let v = pod_json(&plan(&long, None));
    assert!(v["metadata"]["name"].as_str().unwrap().len() <= 63);
    insta::assert_json_snapshot!("pod_long_run_id", v);
}

#[test]
fn pod_owner_refs() {
    let mut p = plan(RUN, None);
    p.owner.pod_name = Some("iterion-runner-7d9f8-xk2lp".into());
    p.owner.pod_uid = Some("5b1c2f4e-1111-4222-8333-944445555666".into());
    insta::assert_json_snapshot!("pod_owner_refs", pod_json(&p));
}

fn netpol(ip: Option<&str>, ips: Option<&str>) -> serde_json::Value {
    let id = identity(RUN, None, None, Component::Network, &owner());
    let addrs = proxy_addresses(ip, ips).unwrap();
    network_policy_json(&id, "iterion", &owner(), &addrs, 41237)
}

#[test]
fn netpol_ipv4() {
    insta::assert_json_snapshot!("netpol_ipv4", netpol(Some("10.42.0.7"), None));
}

#[test]
fn netpol_ipv6() {
    insta::assert_json_snapshot!("netpol_ipv6", netpol(Some("fd00:10:42::7"), None));
}

#[test]
fn netpol_dual_stack() {
    let v = netpol(Some("10.42.0.7"), Some("10.42.0.7,fd00:10:42::7"));
    assert_eq!(v["spec"]["egress"][0]["to"].as_array().unwrap().len(), 2);
    insta::assert_json_snapshot!("netpol_dual_stack", v);
}

#[test]
fn exec_script() {
    let env = vec![
        ("GREETING".to_string(), "it's $HOME".to_string()),
        ("EMPTY".to_string(), String::new()),
    ];
    let argv: Vec<String> = ["sh", "-c", "echo \"$GREETING\" 'and' $((1+1))", "two words"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    insta::assert_snapshot!(
        "exec_script",
        script("0a1b2c3d", "/work space/repo", &env, &argv).unwrap()
    );
}

// ---- the shipped manifests ----

fn deploy(file: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/kubernetes")
        .join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_shipped_role_grants_exactly_what_the_driver_needs() {
    let role: Role = serde_yaml::from_str(&deploy("role.yaml")).unwrap();
    let mut granted = BTreeSet::new();
    for rule in role.rules.unwrap_or_default() {
        for group in rule.api_groups.clone().unwrap_or_default() {
            for res in rule.resources.clone().unwrap_or_default() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), res.clone(), verb.clone()));
                }
            }
        }
    }
    let needed: BTreeSet<(String, String, String)> = REQUIRED_RBAC
        .iter()
        .map(|p| {
            let res = match p.subresource {
                Some(s) => format!("{}/{s}", p.resource),
                None => p.resource.to_string(),
            };
            (p.group.to_string(), res, p.verb.to_string())
        })
        .collect();
    assert_eq!(granted, needed);
}

#[test]
fn the_runner_deployment_sets_cloud_mode_and_the_downward_api_variables() {
    let d: Deployment = serde_yaml::from_str(&deploy("runner-deployment.yaml")).unwrap();
    let pod = d.spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("iterion-runner"));
    let env = pod.containers[0].env.clone().unwrap_or_default();
    let value = |n: &str| env.iter().find(|e| e.name == n).and_then(|e| e.value.clone());
    let field = |n: &str| {
        env.iter()
            .find(|e| e.name == n)
            .and_then(|e| e.value_from.clone())
            .and_then(|f| f.field_ref)
            .map(|f| f.field_path)
    };
    assert_eq!(value("ITERION_MODE").as_deref(), Some("cloud"));
    assert_eq!(value("ITERION_SANDBOX_HOST_STATE").as_deref(), Some("none"));
    for (n, path) in [
        ("ITERION_POD_IP", "status.podIP"),
        ("ITERION_POD_IPS", "status.podIPs"),
        ("ITERION_POD_NAME", "metadata.name"),
        ("ITERION_POD_UID", "metadata.uid"),
    ] {
        assert_eq!(field(n).as_deref(), Some(path), "{n}");
    }
}

#[test]
fn the_runner_network_policy_never_selects_a_sandbox_pod() {
    let np: NetworkPolicy = serde_yaml::from_str(&deploy("runner-networkpolicy.yaml")).unwrap();
    let spec = np.spec.unwrap();
    let selector: BTreeMap<String, String> =
        spec.pod_selector.and_then(|s| s.match_labels).unwrap_or_default();
    assert!(!selector.is_empty(), "an empty selector selects every pod");
    for component in [Component::Run, Component::Node] {
        let sandbox = identity(RUN, None, Some("k"), component, &owner()).labels;
        let selected = selector.iter().all(|(k, v)| sandbox.get(k) == Some(v));
        assert!(!selected, "the runner policy selects a {component:?} sandbox pod");
    }
    // and it admits the sandbox pods
    let from = &spec.ingress.unwrap()[0].from.clone().unwrap()[0];
    let admits = from.pod_selector.clone().unwrap().match_labels.unwrap();
    let sandbox = identity(RUN, None, None, Component::Run, &owner()).labels;
    assert!(admits.iter().all(|(k, v)| sandbox.get(k) == Some(v)));
}

#[test]
fn every_shipped_manifest_is_listed_by_the_kustomization() {
    let k: serde_yaml::Value = serde_yaml::from_str(&deploy("kustomization.yaml")).unwrap();
    let listed: BTreeSet<String> = k["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes");
    let files: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(listed, files);
}
