//! The cluster-access API against a scripted fake API server (06 §4.11, §4.12; 07 §14.1).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use iterion_driver_k8s::cluster::{
    ClusterAccess, ContextOutcome, DiscoveryInputs, Error, Location, OFF_CLUSTER_HINT, Permission, RBAC_HINT,
    RBAC_UNVERIFIED_HINT, REQUIRED_RBAC, RbacOutcome, ServerVersion, Status, TOO_OLD_HINT, check_context,
    check_rbac,
};
use support::fake_api::{FakeApi, Script};

const TIMEOUT: Duration = Duration::from_secs(5);

fn kubeconfig(dir: &Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n\
         contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: ns1\n\
         users:\n- name: fake\n  user:\n    token: test-token\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Off-cluster access through a kubeconfig pointing at `server`, plus extra variables.
fn off_cluster(dir: &Path, server: &str, extra: &[(&str, &str)]) -> ClusterAccess {
    let path = kubeconfig(dir, server);
    let mut vars = env(&[
        ("KUBECONFIG", path.to_str().unwrap()),
        ("HOME", dir.to_str().unwrap()),
    ]);
    vars.extend(env(extra));
    let access = ClusterAccess::discover(&DiscoveryInputs::new(vars));
    assert_eq!(access.error(), None, "{access:?}");
    access
}

#[tokio::test]
async fn version_1_31_passes_and_sends_the_token() {
    let fake = FakeApi::start(Script::version("1", "31")).await;
    let dir = tempfile::tempdir().unwrap();
    let access = off_cluster(dir.path(), &fake.url(), &[]);
    assert_eq!(access.location(), Location::OffCluster);
    assert_eq!(access.context_name(), Some("fake"));
    assert_eq!(access.namespace(), Some("ns1"));

    let report = check_context(&access, TIMEOUT).await;
    assert_eq!(
        report.outcome,
        ContextOutcome::Reachable {
            version: ServerVersion { major: 1, minor: 31 }
        }
    );
    assert_eq!(report.status(), Status::Pass);
    assert!(report.passed());
    assert_eq!(report.hint(), None);
    assert_eq!(
        report.message(),
        format!(
            "off-cluster, context fake: API server {} answered, Kubernetes 1.31 (namespace ns1)",
            fake.url()
        )
    );
    let requests = fake.finish().unwrap();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("GET", "/version")
    );
    assert_eq!(requests[0].authorization.as_deref(), Some("Bearer test-token"));
}

#[tokio::test]
async fn version_1_29_is_too_old() {
    let fake = FakeApi::start(Script::version("1", "29")).await;
    let dir = tempfile::tempdir().unwrap();
    let report = check_context(&off_cluster(dir.path(), &fake.url(), &[]), TIMEOUT).await;
    assert_eq!(
        report.outcome,
        ContextOutcome::TooOld {
            version: ServerVersion { major: 1, minor: 29 }
        }
    );
    assert_eq!(report.status(), Status::Fail);
    assert_eq!(report.hint().as_deref(), Some(TOO_OLD_HINT));
    assert!(
        report
            .message()
            .contains("runs Kubernetes 1.29; iterion needs 1.30 or newer"),
        "{}",
        report.message()
    );
    fake.finish().unwrap();
}

#[tokio::test]
async fn minor_with_a_plus_suffix_is_tolerated() {
    let fake = FakeApi::start(Script::version("1", "30+")).await;
    let dir = tempfile::tempdir().unwrap();
    let report = check_context(&off_cluster(dir.path(), &fake.url(), &[]), TIMEOUT).await;
    assert_eq!(
        report.outcome,
        ContextOutcome::Reachable {
            version: ServerVersion { major: 1, minor: 30 }
        }
    );
    assert_eq!(report.status(), Status::Pass);
    fake.finish().unwrap();
}

#[tokio::test]
async fn a_version_without_numbers_is_not_a_pass() {
    let mut script = Script::version("", "");
    script.version = Some(serde_json::json!({"major": "", "minor": "", "gitVersion": "unknown"}));
    let fake = FakeApi::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let report = check_context(&off_cluster(dir.path(), &fake.url(), &[]), TIMEOUT).await;
    assert!(
        matches!(&report.outcome, ContextOutcome::Unreachable(Error::UnrecognisedVersion { git_version, .. }) if git_version == "unknown"),
        "{report:?}"
    );
    assert_eq!(report.status(), Status::Warn);
    fake.finish().unwrap();
}

#[tokio::test]
async fn an_unreachable_context_warns_off_cluster() {
    // A port that was just free: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let access = off_cluster(dir.path(), &format!("http://127.0.0.1:{port}"), &[]);
    let report = check_context(&access, TIMEOUT).await;
    assert!(
        matches!(&report.outcome, ContextOutcome::Unreachable(Error::Transport { request, .. }) if request == "GET /version"),
        "{report:?}"
    );
    assert_eq!(report.status(), Status::Warn);
    assert_eq!(report.hint().as_deref(), Some(OFF_CLUSTER_HINT));
    assert!(
        report.message().ends_with("; cluster access not verified"),
        "{}",
        report.message()
    );
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let fake = FakeApi::start(Script {
        silent: true,
        ..Script::version("1", "31")
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let bound = Duration::from_millis(300);
    let report = check_context(&off_cluster(dir.path(), &fake.url(), &[]), bound).await;
    assert_eq!(
        report.outcome,
        ContextOutcome::Unreachable(Error::Timeout {
            request: "GET /version".into(),
            after: bound
        })
    );
    assert!(
        report.message().contains("GET /version: no answer within 300ms"),
        "{}",
        report.message()
    );
    assert_eq!(report.status(), Status::Warn);
    fake.finish().unwrap();
}

#[tokio::test]
async fn no_kubeconfig_warns_off_cluster() {
    let home = tempfile::tempdir().unwrap();
    let access = ClusterAccess::discover(&DiscoveryInputs::new(env(&[(
        "HOME",
        home.path().to_str().unwrap(),
    )])));
    let report = check_context(&access, TIMEOUT).await;
    assert_eq!(
        report.outcome,
        ContextOutcome::Unavailable(Error::NoKubeconfig {
            searched: vec![home.path().join(".kube").join("config")]
        })
    );
    assert_eq!(report.status(), Status::Warn);
    assert_eq!(report.hint().as_deref(), Some(OFF_CLUSTER_HINT));
    assert_eq!(
        report.message(),
        format!(
            "off-cluster: no kubeconfig (looked for {}); cluster access not verified",
            home.path().join(".kube/config").display()
        )
    );
}

#[tokio::test]
async fn in_cluster_without_service_account_files_fails_with_the_reason() {
    let sa = tempfile::tempdir().unwrap();
    let inputs = DiscoveryInputs::new(env(&[
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", "6443"),
    ]))
    .with_service_account_dir(sa.path());
    let access = ClusterAccess::discover(&inputs);
    assert_eq!(access.location(), Location::InCluster);
    let report = check_context(&access, TIMEOUT).await;
    let reason = format!(
        "no service-account token at {} (is automountServiceAccountToken disabled on the runner?)",
        sa.path().join("token").display()
    );
    assert_eq!(
        report.outcome,
        ContextOutcome::Unavailable(Error::ServiceAccountToken {
            path: sa.path().join("token")
        })
    );
    assert_eq!(report.status(), Status::Fail);
    assert_eq!(report.hint(), Some(reason.clone()));
    assert_eq!(report.message(), format!("in-cluster: {reason}"));

    // nothing was asked, and the permission check says why it was skipped
    let rbac = check_rbac(&access, None, TIMEOUT).await;
    assert!(matches!(
        rbac.outcome,
        RbacOutcome::Unavailable(Error::ServiceAccountToken { .. })
    ));
    assert_eq!(rbac.status(), Status::Skip);
}

#[tokio::test]
async fn rbac_all_allowed_passes_with_one_review_per_permission() {
    let fake = FakeApi::start(Script::version("1", "31")).await;
    let dir = tempfile::tempdir().unwrap();
    let access = off_cluster(dir.path(), &fake.url(), &[]);
    let report = check_rbac(&access, None, TIMEOUT).await;
    assert_eq!(
        report.outcome,
        RbacOutcome::AllAllowed {
            checked: REQUIRED_RBAC.len()
        }
    );
    assert_eq!(report.status(), Status::Pass);
    assert_eq!(report.hint(), None);
    assert_eq!(report.namespace, "ns1");

    let mut reviews: Vec<String> = fake
        .finish()
        .unwrap()
        .into_iter()
        .filter_map(|r| r.review)
        .collect();
    reviews.sort();
    let mut expected: Vec<String> = REQUIRED_RBAC
        .iter()
        .map(|p| {
            let resource = match p.subresource {
                Some(s) => format!("{}/{s}", p.resource),
                None => p.resource.to_string(),
            };
            format!("{} {resource} {} ns1", p.verb, p.group)
        })
        .collect();
    expected.sort();
    assert_eq!(reviews, expected);
}

#[tokio::test]
async fn rbac_lists_the_denied_permissions() {
    let fake = FakeApi::start(
        Script::version("1", "31")
            .deny("create pods/exec")
            .deny("delete networkpolicies"),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let access = off_cluster(
        dir.path(),
        &fake.url(),
        &[("ITERION_SANDBOX_K8S_NAMESPACE", "runners")],
    );
    let report = check_rbac(&access, None, TIMEOUT).await;
    let denied = vec![
        Permission {
            group: "",
            resource: "pods",
            subresource: Some("exec"),
            verb: "create",
        },
        Permission {
            group: "networking.k8s.io",
            resource: "networkpolicies",
            subresource: None,
            verb: "delete",
        },
    ];
    assert_eq!(
        report.outcome,
        RbacOutcome::Missing {
            denied,
            failed: vec![]
        }
    );
    assert_eq!(
        report.status(),
        Status::Warn,
        "off-cluster: a missing permission warns"
    );
    assert_eq!(report.hint().as_deref(), Some(RBAC_HINT));
    assert_eq!(
        report.message(),
        "the user of context fake lacks create pods/exec, delete networkpolicies.networking.k8s.io in namespace runners"
    );
    let requests = fake.finish().unwrap();
    assert!(
        requests
            .iter()
            .filter_map(|r| r.review.as_deref())
            .all(|r| r.ends_with(" runners"))
    );
}

#[tokio::test]
async fn rbac_reports_reviews_that_were_refused() {
    let fake = FakeApi::start(Script::version("1", "31").forbid("get pods/log")).await;
    let dir = tempfile::tempdir().unwrap();
    let access = off_cluster(dir.path(), &fake.url(), &[]);
    let report = check_rbac(&access, Some("other"), TIMEOUT).await;
    let RbacOutcome::Missing { denied, failed } = &report.outcome else {
        panic!("{report:?}");
    };
    assert!(denied.is_empty());
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0.to_string(), "get pods/log");
    assert!(
        matches!(&failed[0].1, Error::Api { code: 403, .. }),
        "{:?}",
        failed[0].1
    );
    assert_eq!(report.namespace, "other");
    assert_eq!(report.hint().as_deref(), Some(RBAC_UNVERIFIED_HINT));
    fake.finish().unwrap();
}

#[test]
fn the_check_futures_are_send() {
    fn send<T: Send>(_: T) {}
    let access = ClusterAccess::discover(&DiscoveryInputs::new(BTreeMap::new()));
    send(check_context(&access, TIMEOUT));
    send(check_rbac(&access, None, TIMEOUT));
}

/// A runner pod: service-account files, service variables, TLS with the service-account CA.
fn in_cluster(fake: &FakeApi, ca_pem: &str, sa: &Path) -> ClusterAccess {
    std::fs::write(sa.join("token"), "sa-token").unwrap();
    std::fs::write(sa.join("ca.crt"), ca_pem).unwrap();
    std::fs::write(sa.join("namespace"), "runners\n").unwrap();
    let port = fake.port().to_string();
    let inputs = DiscoveryInputs::new(env(&[
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", &port),
    ]))
    .with_service_account_dir(sa);
    let access = ClusterAccess::discover(&inputs);
    assert_eq!(access.error(), None, "{access:?}");
    assert_eq!(access.location(), Location::InCluster);
    assert_eq!(access.server(), Some(fake.url().as_str()));
    access
}

#[tokio::test]
async fn in_cluster_over_tls_with_the_service_account() {
    let (fake, ca) = FakeApi::start_tls(Script::version("1", "32").deny("watch pods")).await;
    let sa = tempfile::tempdir().unwrap();
    let access = in_cluster(&fake, &ca, sa.path());

    let context = check_context(&access, TIMEOUT).await;
    assert_eq!(
        context.outcome,
        ContextOutcome::Reachable {
            version: ServerVersion { major: 1, minor: 32 }
        }
    );
    assert_eq!(context.status(), Status::Pass);
    assert_eq!(
        context.message(),
        format!(
            "in-cluster: API server {} answered, Kubernetes 1.32 (namespace runners)",
            fake.url()
        )
    );

    let rbac = check_rbac(&access, None, TIMEOUT).await;
    assert_eq!(
        rbac.status(),
        Status::Fail,
        "in-cluster: a missing permission fails"
    );
    assert_eq!(rbac.hint().as_deref(), Some(RBAC_HINT));
    assert_eq!(
        rbac.message(),
        "the runner's service account lacks watch pods in namespace runners"
    );

    let requests = fake.finish().unwrap();
    assert_eq!(requests.len(), 1 + REQUIRED_RBAC.len());
    assert!(
        requests
            .iter()
            .all(|r| r.authorization.as_deref() == Some("Bearer sa-token")),
        "{requests:?}"
    );
}

#[tokio::test]
async fn in_cluster_with_a_foreign_ca_fails_with_the_tls_error() {
    let (fake, _ca) = FakeApi::start_tls(Script::version("1", "31")).await;
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let sa = tempfile::tempdir().unwrap();
    let access = in_cluster(&fake, &other.cert.pem(), sa.path());
    let report = check_context(&access, TIMEOUT).await;
    let ContextOutcome::Unreachable(e @ Error::Transport { .. }) = &report.outcome else {
        panic!("{report:?}");
    };
    assert_eq!(report.status(), Status::Fail);
    assert_eq!(report.hint(), Some(e.to_string()));
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
}
