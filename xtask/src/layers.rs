//! `cargo xtask check-layers`: the layer DAG of the workspace and the confinement of heavy dependencies,
//! checked mechanically from `cargo metadata`.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Every library crate with its layer and the workspace crates it may depend on (normal and build deps).
const ALLOWED: &[(&str, u8, &[&str])] = &[
    // std-only: no dependencies at all (see STD_ONLY)
    ("iterion-embed", 0, &[]),
    ("iterion-relay", 0, &[]),
    ("iterion-probe", 0, &[]),
    ("iterion-netpolicy", 0, &[]),
    ("iterion-envdeny", 0, &[]),
    ("iterion-envelope", 0, &[]),
    // the host side of the boundary: spawning, host git, store files (impure, no workspace dependency)
    ("iterion-boundary", 0, &[]),
    // the one L0 → L0 edge: compile-time rule validation uses the enforcing compiler
    ("iterion-spec", 0, &["iterion-netpolicy"]),
    (
        "iterion-driver",
        1,
        &[
            "iterion-boundary",
            "iterion-spec",
            "iterion-envdeny",
            "iterion-netpolicy",
        ],
    ),
    ("iterion-netproxy", 1, &["iterion-netpolicy", "iterion-spec"]),
    ("iterion-claw", 1, &["iterion-boundary", "iterion-envelope"]),
    // the runner program, built statically by iterion-host's build script and mounted into sandboxes
    ("iterion-claw-runner", 2, &["iterion-claw"]),
    (
        "iterion-driver-docker",
        2,
        &[
            "iterion-boundary",
            "iterion-embed",
            "iterion-driver",
            "iterion-spec",
            "iterion-envdeny",
            "iterion-netpolicy",
        ],
    ),
    (
        "iterion-driver-k8s",
        2,
        &[
            "iterion-boundary",
            "iterion-driver",
            "iterion-spec",
            "iterion-envdeny",
            "iterion-netpolicy",
        ],
    ),
    (
        "iterion-host",
        3,
        &[
            "iterion-boundary",
            "iterion-spec",
            "iterion-embed",
            "iterion-driver",
            "iterion-driver-docker",
            "iterion-driver-k8s",
        ],
    ),
    (
        "iterion-runtime",
        4,
        &[
            "iterion-boundary",
            "iterion-spec",
            "iterion-envdeny",
            "iterion-envelope",
            "iterion-claw",
            "iterion-netpolicy",
            "iterion-driver",
            "iterion-netproxy",
            "iterion-host",
        ],
    ),
    (
        "iterion-doctor",
        5,
        &[
            "iterion-boundary",
            "iterion-embed",
            "iterion-probe",
            "iterion-host",
            "iterion-spec",
            "iterion-envdeny",
            "iterion-netpolicy",
            "iterion-driver",
            "iterion-netproxy",
            "iterion-driver-docker",
            "iterion-driver-k8s",
            "iterion-runtime",
        ],
    ),
    (
        "iterion-cli",
        6,
        &[
            "iterion-boundary",
            "iterion-probe",
            "iterion-claw",
            "iterion-doctor",
            "iterion-host",
            "iterion-spec",
            "iterion-envdeny",
            "iterion-envelope",
            "iterion-netpolicy",
            "iterion-driver",
            "iterion-netproxy",
            "iterion-driver-docker",
            "iterion-driver-k8s",
            "iterion-runtime",
        ],
    ),
    // tooling above the product: tests may exercise any library crate; xtask shares the test-image builder and
    // runs git through the boundary's hardened runner
    (
        "iterion-test-support",
        9,
        &[
            "iterion-boundary",
            "iterion-spec",
            "iterion-envdeny",
            "iterion-netpolicy",
            "iterion-driver",
            "iterion-driver-docker",
            "iterion-netproxy",
            "iterion-envelope",
        ],
    ),
    ("xtask", 9, &["iterion-boundary", "iterion-test-support"]),
];

/// Foreign crates confined to the listed workspace crates (normal deps; dev-deps are free).
const CONFINED: &[(&str, &[&str])] = &[
    ("bollard", &["iterion-driver-docker"]),
    ("kube", &["iterion-driver-k8s"]),
    ("kube-client", &["iterion-driver-k8s"]),
    ("k8s-openapi", &["iterion-driver-k8s"]),
    // the test-support crate: the engine-backed fake Kubernetes API server serves exec over WebSocket
    (
        "tokio-tungstenite",
        &["iterion-driver-k8s", "iterion-test-support"],
    ),
    ("anyhow", &["iterion-cli", "xtask", "iterion-test-support"]),
    // iterion-driver-docker: the streamed BuildKit build request, over the hyper bollard is built on
    ("hyper", &["iterion-netproxy", "iterion-driver-docker"]),
    // the BuildKit session's HTTP/2 server
    ("h2", &["iterion-driver-docker"]),
    // the test-support crate: a loopback TLS front with a CA of its own for egress tests
    ("tokio-rustls", &["iterion-netproxy", "iterion-test-support"]),
    ("rcgen", &["iterion-netproxy", "iterion-test-support"]),
    ("clap", &["iterion-cli", "iterion-netproxy"]),
    ("reqwest", &["iterion-claw"]),
];

/// Foreign crates a library may name only as an optional dependency carried by one non-default feature:
/// (dependency, crate, feature). iterion-netproxy's command line (`cli`) brings clap; its default build does not.
const OPTIONAL_BEHIND: &[(&str, &str, &str)] = &[("clap", "iterion-netproxy", "cli")];

/// Crates of the standard library only: no normal or build dependency at all (dev-dependencies are free).
/// The relay and the probe are compiled by a bare `rustc` with no `--extern`; iterion-embed runs in build
/// scripts.
const STD_ONLY: &[&str] = &["iterion-embed", "iterion-relay", "iterion-probe"];
/// Crates that must stay pure: no async runtime, no sockets.
const PURE: &[&str] = &["iterion-spec", "iterion-envdeny", "iterion-netpolicy"];
/// L0 crates that are pure in their default build: an impure dependency must be optional and enabled only by
/// a non-default feature (iterion-envelope's `tokio` feature carries the multiplexer and the runner channel).
const PURE_BY_DEFAULT: &[&str] = &["iterion-envelope"];
const IMPURE_DEPS: &[&str] = &[
    "tokio",
    "hyper",
    "bollard",
    "kube",
    "reqwest",
    "hickory-resolver",
    "mio",
];

pub fn check(root: &Path) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(root)
        .output()
        .context("run cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let meta: Value = serde_json::from_slice(&out.stdout).context("parse cargo metadata")?;
    let problems = check_metadata(&meta)?;
    if problems.is_empty() {
        eprintln!("xtask: check-layers: ok ({} crates)", ALLOWED.len());
        Ok(())
    } else {
        for p in &problems {
            eprintln!("xtask: check-layers: {p}");
        }
        bail!("{} layer violation(s)", problems.len())
    }
}

fn check_metadata(meta: &Value) -> Result<Vec<String>> {
    let allowed: BTreeMap<&str, (u8, &[&str])> = ALLOWED.iter().map(|(n, l, a)| (*n, (*l, *a))).collect();
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .context("workspace_members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut problems = Vec::new();
    for pkg in meta["packages"].as_array().context("packages")? {
        let id = pkg["id"].as_str().unwrap_or_default();
        if !members.contains(&id) {
            continue;
        }
        let name = pkg["name"].as_str().unwrap_or_default();
        let Some((layer, ok_deps)) = allowed.get(name) else {
            problems.push(format!(
                "{name}: not in the layer table of xtask/src/layers.rs; give it a layer"
            ));
            continue;
        };
        for dep in pkg["dependencies"].as_array().into_iter().flatten() {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            let kind = dep["kind"].as_str(); // null = normal, "dev", "build"
            if kind == Some("dev") {
                continue;
            }
            if STD_ONLY.contains(&name) {
                problems.push(format!(
                    "{name} is standard library only but depends on {dep_name}"
                ));
                continue;
            }
            if dep_name.starts_with("iterion-") {
                if !ok_deps.contains(&dep_name) {
                    let dep_layer = allowed.get(dep_name).map(|(l, _)| *l);
                    problems.push(format!(
                        "{name} (L{layer}) depends on {dep_name} (L{}), which its layer does not allow",
                        dep_layer.map_or("?".to_string(), |l| l.to_string())
                    ));
                }
                continue;
            }
            for (foreign, owners) in CONFINED {
                if dep_name == *foreign && !owners.contains(&name) {
                    problems.push(format!(
                        "{name} depends on {foreign}, which only {} may name",
                        owners.join(", ")
                    ));
                }
            }
            for (foreign, owner, feature) in OPTIONAL_BEHIND {
                if dep_name == *foreign && name == *owner {
                    let optional = dep["optional"].as_bool().unwrap_or(false);
                    if !optional
                        || feature_enables(pkg, "default", dep_name)
                        || !feature_enables(pkg, feature, dep_name)
                    {
                        problems.push(format!(
                            "{name} may name {foreign} only as an optional dependency of its non-default `{feature}` feature"
                        ));
                    }
                }
            }
            if PURE.contains(&name) && IMPURE_DEPS.contains(&dep_name) {
                problems.push(format!("{name} is a pure L0 crate but depends on {dep_name}"));
            }
            if PURE_BY_DEFAULT.contains(&name) && IMPURE_DEPS.contains(&dep_name) {
                let optional = dep["optional"].as_bool().unwrap_or(false);
                if !optional || feature_enables(pkg, "default", dep_name) {
                    problems.push(format!(
                        "{name} must be pure in its default build but its default features pull in {dep_name}"
                    ));
                }
            }
        }
    }
    Ok(problems)
}

/// Whether `feature` of `pkg`, followed through the features it enables, turns on the optional dependency `dep`
/// (`dep:x`, `x` or `x/feature`).
fn feature_enables(pkg: &Value, feature: &str, dep: &str) -> bool {
    let features = &pkg["features"];
    let mut todo = vec![feature.to_string()];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(feature) = todo.pop() {
        if !seen.insert(feature.clone()) {
            continue;
        }
        for item in features[&feature].as_array().into_iter().flatten() {
            let item = item.as_str().unwrap_or_default();
            let named = item.strip_prefix("dep:").unwrap_or(item);
            let named = named.split(['/', '?']).next().unwrap_or_default();
            if named == dep {
                return true;
            }
            if features.get(named).is_some() {
                todo.push(named.to_string());
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(pkgs: Value) -> Value {
        let ids: Vec<Value> = pkgs.as_array().unwrap().iter().map(|p| p["id"].clone()).collect();
        json!({"workspace_members": ids, "packages": pkgs})
    }

    #[test]
    fn flags_upward_and_confined_edges() {
        let m = meta(json!([
            {"id": "a", "name": "iterion-runtime", "dependencies": [
                {"name": "iterion-driver-docker", "kind": null},
                {"name": "bollard", "kind": null},
                {"name": "anyhow", "kind": "dev"}
            ]},
            {"id": "b", "name": "iterion-spec", "dependencies": [{"name": "tokio", "kind": null}]},
            {"id": "c", "name": "iterion-cli", "dependencies": [{"name": "iterion-runtime", "kind": null}]}
        ]));
        let p = check_metadata(&m).unwrap();
        assert_eq!(p.len(), 3, "{p:#?}");
        assert!(p[0].contains("iterion-runtime (L4) depends on iterion-driver-docker (L2)"));
        assert!(p[1].contains("bollard"));
        assert!(p[2].contains("pure L0 crate but depends on tokio"));
    }

    #[test]
    fn envelope_may_name_tokio_only_behind_a_non_default_feature() {
        let envelope = |features: Value, optional: bool| {
            meta(
                json!([{"id": "e", "name": "iterion-envelope", "features": features,
                "dependencies": [{"name": "tokio", "kind": null, "optional": optional}]}]),
            )
        };
        let ok = envelope(json!({"default": [], "tokio": ["dep:tokio"]}), true);
        assert!(check_metadata(&ok).unwrap().is_empty());
        let by_default = envelope(
            json!({"default": ["async"], "async": ["tokio"], "tokio": ["dep:tokio"]}),
            true,
        );
        let p = check_metadata(&by_default).unwrap();
        assert!(
            p.len() == 1 && p[0].contains("default features pull in tokio"),
            "{p:#?}"
        );
        let always = envelope(json!({"default": []}), false);
        assert_eq!(check_metadata(&always).unwrap().len(), 1);
    }

    #[test]
    fn netproxy_may_name_clap_only_behind_its_cli_feature() {
        let netproxy = |features: Value, optional: bool| {
            meta(
                json!([{"id": "n", "name": "iterion-netproxy", "features": features,
                "dependencies": [{"name": "clap", "kind": null, "optional": optional}]}]),
            )
        };
        let ok = netproxy(
            json!({"default": ["tls-inspection"], "tls-inspection": [], "cli": ["dep:clap"]}),
            true,
        );
        assert!(check_metadata(&ok).unwrap().is_empty());
        for bad in [
            netproxy(json!({"default": ["cli"], "cli": ["dep:clap"]}), true),
            netproxy(json!({"default": [], "cli": []}), true),
            netproxy(json!({"default": [], "cli": ["dep:clap"]}), false),
        ] {
            let p = check_metadata(&bad).unwrap();
            assert!(
                p.len() == 1 && p[0].contains("non-default `cli` feature"),
                "{p:#?}"
            );
        }
        // Every other library still may not name clap at all.
        let runtime = meta(json!([{"id": "r", "name": "iterion-runtime",
            "dependencies": [{"name": "clap", "kind": null, "optional": true}]}]));
        assert_eq!(check_metadata(&runtime).unwrap().len(), 1);
    }

    #[test]
    fn std_only_crates_have_no_dependencies() {
        let m = meta(json!([
            {"id": "r", "name": "iterion-relay", "dependencies": [{"name": "libc", "kind": null}]},
            {"id": "e", "name": "iterion-embed", "dependencies": [{"name": "iterion-spec", "kind": "build"}]},
            {"id": "p", "name": "iterion-probe", "dependencies": [{"name": "sha2", "kind": "dev"}]}
        ]));
        let p = check_metadata(&m).unwrap();
        assert_eq!(p.len(), 2, "{p:#?}");
        assert!(p[0].contains("iterion-relay is standard library only but depends on libc"));
        assert!(p[1].contains("iterion-embed is standard library only but depends on iterion-spec"));
    }

    #[test]
    fn unknown_member_needs_a_layer() {
        let m = meta(json!([{"id": "z", "name": "iterion-new", "dependencies": []}]));
        assert_eq!(check_metadata(&m).unwrap().len(), 1);
    }
}
