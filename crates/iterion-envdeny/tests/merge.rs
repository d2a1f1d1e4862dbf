//! §10.2 layering vectors, exec scope, redaction and merge properties.

use std::collections::BTreeMap;

use iterion_envdeny::{EnvLayers, Error, Layer, Reserved, merge, merge_exec};
use proptest::prelude::*;

const P: &str = "http://run:tok@127.0.0.1:3128";

fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Input in a compact notation: `R.c` containerEnv, `R.r` remoteEnv (value `null` = JSON null), `R.a` runArgs,
/// `D` defaults, `W` workflow, `O` operator. `proxy` activates the reserved proxy names; `files` the run-files mount.
fn layers(spec: &[(&str, &str, &str)]) -> EnvLayers {
    let mut l = EnvLayers::new();
    for (layer, k, v) in spec {
        let (k, v) = (k.to_string(), v.to_string());
        match *layer {
            "R.c" => {
                l.repo.container_env.insert(k, v);
            }
            "R.r" => {
                l.repo.remote_env.insert(k, (v != "null").then_some(v));
            }
            "R.a" => {
                l.repo.run_args.insert(k, v);
            }
            "D" => {
                l.defaults.insert(k, v);
            }
            "W" => {
                l.workflow.insert(k, v);
            }
            "O" => {
                l.operator.insert(k, v);
            }
            other => panic!("unknown layer {other}"),
        }
    }
    l
}

/// Renders the result as `container: A=1 B=2 | report: NAME source action reason category; …`.
fn render(l: &EnvLayers, r: &Reserved) -> String {
    match merge(l, r) {
        Err(e) => format!("error: {e}"),
        Ok(out) => {
            let c: Vec<String> = out.container.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let rep: Vec<String> = out
                .report
                .iter()
                .map(|e| {
                    format!(
                        "{} {} {:?} {} {}",
                        e.name,
                        e.source.as_str(),
                        e.action,
                        e.reason,
                        e.category.as_str()
                    )
                })
                .collect();
            format!("container: {} | report: {}", c.join(" "), rep.join("; "))
        }
    }
}

fn check(spec: &[(&str, &str, &str)], proxy: bool, files: bool, expect: &str) {
    let mut r = Reserved::none();
    if proxy {
        r.proxy_url = Some(P.to_string());
    }
    r.artifact_files = files;
    assert_eq!(render(&layers(spec), &r), expect, "{spec:?}");
}

const PROXY_SET: &str = "ALL_PROXY=http://run:tok@127.0.0.1:3128 HTTPS_PROXY=http://run:tok@127.0.0.1:3128 \
HTTP_PROXY=http://run:tok@127.0.0.1:3128 NODE_USE_ENV_PROXY=1 NO_PROXY=localhost,127.0.0.1,::1 \
all_proxy=http://run:tok@127.0.0.1:3128 http_proxy=http://run:tok@127.0.0.1:3128 \
https_proxy=http://run:tok@127.0.0.1:3128 no_proxy=localhost,127.0.0.1,::1";

#[test]
fn vectors_10_2() {
    // L1
    check(
        &[
            ("R.c", "FOO", "1"),
            ("R.c", "ANTHROPIC_BASE_URL", "x"),
            ("R.r", "PATH", "/evil"),
        ],
        false,
        false,
        "container: FOO=1 | report: ANTHROPIC_BASE_URL devcontainer.containerEnv Removed prefix:ANTHROPIC_ agent_namespace; \
PATH devcontainer.remoteEnv Removed exact:PATH path_and_shells",
    );
    // L2
    check(
        &[("R.r", "A", "r"), ("R.c", "A", "c")],
        false,
        false,
        "container: A=c | report: ",
    );
    // L3
    check(
        &[("R.r", "A", "r"), ("R.r", "B", "null")],
        false,
        false,
        "container: A=r | report: ",
    );
    // L4
    check(
        &[("R.c", "A", "1"), ("W", "A", "2")],
        false,
        false,
        "container: A=2 | report: ",
    );
    // L5
    check(
        &[("R.c", "GITHUB_TOKEN", "x"), ("W", "GITHUB_TOKEN", "y")],
        false,
        false,
        "container: GITHUB_TOKEN=y | report: GITHUB_TOKEN devcontainer.containerEnv Removed suffix:_TOKEN credential",
    );
    // L6
    check(
        &[("W", "A", "2"), ("O", "A", "3")],
        false,
        false,
        "container: A=3 | report: ",
    );
    // L7
    check(
        &[("W", "https_proxy", "http://corp:3128")],
        true,
        false,
        &format!("container: {PROXY_SET} | report: https_proxy workflow Overridden reserved:proxy proxy"),
    );
    // L8
    check(
        &[("W", "HTTPS_PROXY", "http://corp:3128")],
        false,
        false,
        "container: HTTPS_PROXY=http://corp:3128 | report: ",
    );
    // L9
    check(
        &[("R.c", "http_proxy", "http://x")],
        false,
        false,
        "container:  | report: http_proxy devcontainer.containerEnv Removed suffix:_PROXY proxy",
    );
    // L10
    check(
        &[("W", "FTP_PROXY", "ftp://x")],
        true,
        false,
        &format!("container: {PROXY_SET} | report: FTP_PROXY workflow Removed reserved:proxy proxy"),
    );
    // L11
    check(
        &[("D", "HOME", "/home/jo"), ("W", "HOME", "/home/devbox")],
        false,
        false,
        "container: HOME=/home/devbox | report: ",
    );
    // L12
    check(
        &[("D", "HOME", "/home/jo")],
        false,
        false,
        "container: HOME=/home/jo | report: ",
    );
    // L13
    check(
        &[("R.c", "HOME", "/workspace"), ("D", "HOME", "/home/jo")],
        false,
        false,
        "container: HOME=/home/jo | report: HOME devcontainer.containerEnv Removed exact:HOME path_and_shells",
    );
    // L14
    check(
        &[("W", "1BAD", "x")],
        false,
        false,
        "error: invalid environment variable name '1BAD' in workflow layer",
    );
    // L15 (the message names A only, never the value)
    check(
        &[("O", "A", "x\ny")],
        false,
        false,
        "error: value of 'A' in operator layer contains NUL, CR or LF or is not UTF-8",
    );
    // L16
    check(
        &[("W", "CLAUDE_CONFIG_DIR", "/home/devbox/.claude")],
        false,
        false,
        "container: CLAUDE_CONFIG_DIR=/home/devbox/.claude | report: ",
    );
    // L19
    check(
        &[("W", "ITERION_ARTIFACT_FILES_DIR", "/x")],
        false,
        true,
        "container: ITERION_ARTIFACT_FILES_DIR=/iterion/artifact-files | report: \
ITERION_ARTIFACT_FILES_DIR workflow Overridden reserved:artifact_files iterion",
    );
    // L20
    check(
        &[("R.c", "Path", "/x"), ("R.c", "path", "/y")],
        false,
        false,
        "container:  | report: Path devcontainer.containerEnv Removed exact:PATH path_and_shells; \
path devcontainer.containerEnv Removed exact:PATH path_and_shells",
    );
}

#[test]
fn one_record_per_sub_source() {
    check(
        &[
            ("R.r", "GH_TOKEN", "a"),
            ("R.c", "GH_TOKEN", "b"),
            ("R.a", "GH_TOKEN", "c"),
        ],
        false,
        false,
        "container:  | report: GH_TOKEN devcontainer.containerEnv Removed prefix:GH_ git; \
GH_TOKEN devcontainer.remoteEnv Removed prefix:GH_ git; GH_TOKEN devcontainer.runArgs Removed prefix:GH_ git",
    );
    check(
        &[("R.c", "A", "c"), ("R.a", "A", "a")],
        false,
        false,
        "container: A=a | report: ",
    );
}

#[test]
fn l15_error_is_typed() {
    let l = layers(&[("O", "A", "x\ny")]);
    assert_eq!(
        merge(&l, &Reserved::none()).unwrap_err(),
        Error::InvalidValue {
            layer: Layer::Operator,
            name: "A".into()
        }
    );
}

#[test]
fn l17_exec_scope_overrides_container_for_one_process() {
    let merged = merge(&layers(&[("W", "ANTHROPIC_API_KEY", "w")]), &Reserved::none()).unwrap();
    assert_eq!(merged.get("ANTHROPIC_API_KEY"), Some("w"));
    let exec = merge_exec(
        &[("ANTHROPIC_API_KEY".into(), "k".into())],
        &Reserved::none(),
        None,
    )
    .unwrap();
    assert_eq!(exec.env, vec![("ANTHROPIC_API_KEY".to_string(), "k".to_string())]);
    assert!(exec.dropped.is_empty());
}

#[test]
fn l18_reserved_proxy_wins_in_exec_scope() {
    let r = Reserved::none().with_proxy(P);
    let exec = merge_exec(
        &[("HTTPS_PROXY".into(), "x".into()), ("B".into(), "2".into())],
        &r,
        Some("http://node-a:t@127.0.0.1:3128"),
    )
    .unwrap();
    assert_eq!(exec.dropped, vec!["HTTPS_PROXY".to_string()]);
    let get = |n: &str| exec.env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    assert_eq!(get("HTTPS_PROXY"), Some("http://node-a:t@127.0.0.1:3128"));
    assert_eq!(get("http_proxy"), Some("http://node-a:t@127.0.0.1:3128"));
    assert_eq!(get("B"), Some("2"));
}

#[test]
fn exec_entries_are_validated_as_exec_layer() {
    let e = merge_exec(&[("A".into(), "x\0".into())], &Reserved::none(), None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "value of 'A' in exec layer contains NUL, CR or LF or is not UTF-8"
    );
}

#[test]
fn secret_substitution_and_tls() {
    let mut r = Reserved::none();
    r.secrets = vec![("DB_PASS".into(), "iterion-secret-placeholder-1".into())];
    r.tls = vec![("SSL_CERT_FILE".into(), "/iterion/tls/ca.pem".into())];
    let l = layers(&[("O", "DB_PASS", "hunter2"), ("W", "SSL_CERT_FILE", "/etc/x")]);
    assert_eq!(
        render(&l, &r),
        "container: DB_PASS=iterion-secret-placeholder-1 SSL_CERT_FILE=/iterion/tls/ca.pem | report: \
SSL_CERT_FILE workflow Overridden reserved:tls tls_trust"
    );
}

#[test]
fn debug_never_shows_values() {
    const SENTINEL: &str = "s3ntinel-value-0xdeadbeef";
    let l = layers(&[
        ("R.c", "A", SENTINEL),
        ("R.r", "B", SENTINEL),
        ("R.a", "C", SENTINEL),
        ("D", "HOME", SENTINEL),
        ("W", "D", SENTINEL),
        ("O", "E", SENTINEL),
    ]);
    let r = Reserved::none()
        .with_proxy(format!("http://run:{SENTINEL}@127.0.0.1:3128"))
        .with_secrets(vec![("E".into(), SENTINEL.into())]);
    let merged = merge(&l, &r).unwrap();
    let exec = merge_exec(&[("X".into(), SENTINEL.into())], &r, Some(SENTINEL)).unwrap();
    for text in [
        format!("{l:?}"),
        format!("{r:?}"),
        format!("{merged:?}"),
        format!("{exec:?}"),
        format!("{l:#?}"),
    ] {
        assert!(!text.contains(SENTINEL), "value leaked in {text}");
        assert!(text.contains("redacted") || text.contains("Reserved"), "{text}");
    }
}

#[test]
fn environment_too_large() {
    let big = "x".repeat(100_000);
    let pairs: Vec<(String, String)> = (0..11).map(|i| (format!("V{i}"), big.clone())).collect();
    let mut l = EnvLayers::new();
    l.workflow = pairs.into_iter().collect();
    assert!(matches!(
        merge(&l, &Reserved::none()),
        Err(Error::EnvironmentTooLarge { entries: 11, .. })
    ));
    assert_eq!(m(&[("A", "1")]).len(), 1);
}

proptest! {
    #[test]
    fn merge_is_order_independent_and_sorted(
        entries in proptest::collection::vec(("[A-Za-z_][A-Za-z0-9_]{0,6}", "[a-z0-9]{0,4}", 0usize..5), 0..40),
        seed in any::<u64>(),
    ) {
        let build = |items: &[(String, String, usize)]| {
            let mut l = EnvLayers::new();
            for (k, v, layer) in items {
                let (k, v) = (k.clone(), v.clone());
                match layer {
                    0 => { l.repo.container_env.insert(k, v); }
                    1 => { l.repo.remote_env.insert(k, Some(v)); }
                    2 => { l.workflow.insert(k, v); }
                    3 => { l.operator.insert(k, v); }
                    _ => { l.defaults.insert(k, v); }
                }
            }
            l
        };
        // de-duplicate (name, layer) so both orders describe the same layers
        let mut uniq: Vec<(String, String, usize)> = Vec::new();
        for e in entries {
            if !uniq.iter().any(|u| u.0 == e.0 && u.2 == e.2) { uniq.push(e); }
        }
        let mut shuffled = uniq.clone();
        let n = shuffled.len();
        if n > 1 {
            for i in 0..n { shuffled.swap(i, (seed as usize).wrapping_add(i * 7) % n); }
        }
        let r = Reserved::none().with_proxy(P);
        let a = merge(&build(&uniq), &r).unwrap();
        let b = merge(&build(&shuffled), &r).unwrap();
        prop_assert_eq!(&a, &b);
        prop_assert!(a.container.windows(2).all(|w| w[0].0 < w[1].0));
        prop_assert!(a.report.windows(2).all(|w| (w[0].name.as_str(), w[0].source.as_str()) <= (w[1].name.as_str(), w[1].source.as_str())));
    }
}

#[test]
fn layer_names_for_the_run_record() {
    let l = layers(&[
        ("R.r", "B", "null"),
        ("R.r", "A", "1"),
        ("R.c", "A", "2"),
        ("R.a", "C", "3"),
        ("W", "W1", "x"),
        ("O", "O1", "y"),
    ]);
    let n = l.names();
    assert_eq!(n.repo, ["A", "C"]);
    assert_eq!(n.workflow, ["W1"]);
    assert_eq!(n.operator, ["O1"]);
    assert!(!serde_json::to_string(&n).unwrap().contains("\"1\""));
}
