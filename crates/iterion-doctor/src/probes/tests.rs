use super::*;
use serde_json::json;

fn facts(egress: Egress) -> Facts {
    Facts {
        egress,
        hardening: HardeningProfile::Strict,
        uid: Some(0),
        gid: Some(0),
        workflow_names: BTreeSet::from(["GH_TOKEN".to_string()]),
        operator_names: BTreeSet::from(["OPENAI_API_KEY".to_string()]),
        host_env: BTreeMap::from([
            ("OPENAI_API_KEY".to_string(), "sk-host".to_string()),
            ("ANTHROPIC_API_KEY".to_string(), "sk-ant-host".to_string()),
            ("AWS_SECRET_ACCESS_KEY".to_string(), "host-aws".to_string()),
        ]),
        claude_mounted: false,
    }
}

fn digest(v: &str) -> String {
    hex::encode(Sha256::digest(v.as_bytes()))
}

fn check(c: Check, status: Status, needle: &str) {
    assert_eq!(c.status, status, "{}: {}", c.id, c.message);
    assert!(
        c.message.contains(needle),
        "{}: '{}' lacks '{needle}'",
        c.id,
        c.message
    );
    assert_eq!(
        c.hint.is_some(),
        matches!(status, Status::Warn | Status::Fail),
        "{}",
        c.id
    );
}

fn conn(target: &str, ok: bool) -> Value {
    json!({"target": target, "connected": ok, "error": if ok { Value::Null } else { json!("Network is unreachable") }})
}

#[test]
fn direct_egress_mapping() {
    let none = Ok(
        json!({"routes": [], "connects": [conn("1.1.1.1:443", false), conn("[2606:4700:4700::1111]:443", false)]}),
    );
    let route = Ok(json!({"routes": ["ipv4 eth0 via 010011AC"], "connects": [conn("1.1.1.1:443", false)]}));
    let open = Ok(json!({"routes": [], "connects": [conn("1.1.1.1:443", true)]}));
    check(
        direct_egress(&facts(Egress::Relay), &none),
        Status::Pass,
        "no route",
    );
    check(
        direct_egress(&facts(Egress::Relay), &route),
        Status::Fail,
        "routes: ipv4 eth0",
    );
    check(
        direct_egress(&facts(Egress::Relay), &open),
        Status::Fail,
        "connected: 1.1.1.1:443",
    );
    assert_eq!(
        direct_egress(&facts(Egress::Relay), &open).details["connected"],
        json!(["1.1.1.1:443"])
    );
    check(
        direct_egress(&facts(Egress::Advisory), &open),
        Status::Warn,
        "advisory placement",
    );
    check(
        direct_egress(&facts(Egress::Advisory), &none),
        Status::Pass,
        "every direct connect failed",
    );
    check(
        direct_egress(&facts(Egress::Open), &open),
        Status::Skip,
        "network mode open",
    );
    check(
        direct_egress(&facts(Egress::Relay), &Err("timed out after 5s".into())),
        Status::Fail,
        "timed out after 5s",
    );
}

#[test]
fn host_services_mapping() {
    let none = Ok(json!({"connects": [conn("172.17.0.1:4000", false)]}));
    let some = Ok(json!({"connects": [conn("172.17.0.1:4000", true), conn("192.0.2.2:4000", false)]}));
    check(
        host_services(&facts(Egress::Relay), &none),
        Status::Pass,
        "1 tried: 172.17.0.1:4000",
    );
    check(
        host_services(&facts(Egress::Relay), &some),
        Status::Fail,
        "172.17.0.1:4000",
    );
    check(
        host_services(&facts(Egress::Advisory), &some),
        Status::Warn,
        "172.17.0.1:4000",
    );
    check(
        host_services(&facts(Egress::Open), &some),
        Status::Warn,
        "network mode open",
    );
}

#[test]
fn dns_mapping() {
    let no = Ok(json!({"name": "example.com", "servers": [{"server": "10.0.0.2", "answered": false}]}));
    let yes = Ok(
        json!({"name": "example.com", "servers": [{"server": "10.0.0.2", "answered": true, "rcode": 0, "answers": 1}]}),
    );
    let nx = Ok(
        json!({"name": "example.com", "servers": [{"server": "10.0.0.2", "answered": true, "rcode": 3, "answers": 0}]}),
    );
    check(dns(&nx), Status::Warn, "resolver 10.0.0.2 answered");
    check(dns(&no), Status::Pass, "does not resolve");
    check(dns(&yes), Status::Warn, "resolves through 10.0.0.2");
    check(dns(&Err("timed out".into())), Status::Warn, "did not complete");
}

fn refused(t: &str) -> Value {
    json!({"target": t, "result": {"status": 403, "decision_id": "d1", "error": null}})
}

#[test]
fn metadata_mapping() {
    let all: Vec<Value> = METADATA_TARGETS.iter().map(|t| refused(t)).collect();
    let fine = Ok(json!({"direct": conn("169.254.169.254:80", false), "connects": all}));
    check(metadata(&facts(Egress::Relay), &fine), Status::Pass, "4 CONNECTs");
    let direct = Ok(json!({"direct": conn("169.254.169.254:80", true), "connects": all}));
    check(
        metadata(&facts(Egress::Relay), &direct),
        Status::Fail,
        "direct connect",
    );
    let mut one = all.clone();
    one[2] =
        json!({"target": "0xa9fea9fe:80", "result": {"status": 200, "decision_id": null, "error": null}});
    let tunnel = Ok(json!({"direct": conn("169.254.169.254:80", false), "connects": one}));
    check(
        metadata(&facts(Egress::Relay), &tunnel),
        Status::Fail,
        "CONNECT 0xa9fea9fe:80 succeeded",
    );
    let mut bad = all.clone();
    bad[1] = json!({"target": "[::ffff:169.254.169.254]:80", "result": {"status": 400, "decision_id": null, "error": null}});
    let other = Ok(json!({"direct": conn("169.254.169.254:80", false), "connects": bad}));
    check(
        metadata(&facts(Egress::Relay), &other),
        Status::Fail,
        "answered 400, not 403",
    );
    check(
        metadata(&facts(Egress::Open), &fine),
        Status::Pass,
        "no proxy to try",
    );
    let c = metadata(&facts(Egress::Open), &direct);
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.hint.as_deref().is_some_and(|h| h.contains("network mode open")),
        "{c:?}"
    );
}

#[test]
fn denied_host_mapping() {
    let f = facts(Egress::Relay);
    let t = Some(ALLOWLIST_DENIED);
    let answer = |status: u64, id: Value| {
        Ok(
            json!({"target": ALLOWLIST_DENIED, "result": {"status": status, "decision_id": id, "error": null}}),
        )
    };
    let events = vec!["d-1".to_string()];
    check(
        denied_host(&f, t, &answer(403, json!("d-1")), &events),
        Status::Pass,
        "decision d-1",
    );
    check(
        denied_host(&f, t, &answer(403, json!("d-2")), &events),
        Status::Fail,
        "no Denied event",
    );
    check(
        denied_host(&f, t, &answer(403, Value::Null), &events),
        Status::Fail,
        "without a decision_id",
    );
    check(
        denied_host(&f, t, &answer(502, Value::Null), &events),
        Status::Fail,
        "was not refused",
    );
    check(
        denied_host(&f, None, &Err("not run".into()), &events),
        Status::Skip,
        "no plain ! rule",
    );
    check(
        denied_host(&facts(Egress::Open), None, &Err("not run".into()), &events),
        Status::Skip,
        "open",
    );
}

#[test]
fn denied_targets_follow_the_policy() {
    let mut spec = iterion_test_support::conformance::sandbox_for(Some("x:1"), Path::new("/w"));
    spec.network.mode = NetworkMode::Allowlist;
    assert_eq!(denied_target(&spec).as_deref(), Some(ALLOWLIST_DENIED));
    spec.network.mode = NetworkMode::Denylist;
    spec.network.rules = vec!["!*.x.org".into(), "good.org".into(), "!bad.example.org".into()];
    assert_eq!(denied_target(&spec).as_deref(), Some("bad.example.org:443"));
    spec.network.rules = vec!["!bad.example.org:8443".into()];
    assert_eq!(denied_target(&spec).as_deref(), Some("bad.example.org:8443"));
    spec.network.rules = vec!["!10.0.0.0/8".into()];
    assert_eq!(denied_target(&spec), None);
    spec.network.mode = NetworkMode::Open;
    assert_eq!(denied_target(&spec), None);
}

fn all_proxy_env() -> Value {
    json!({"set": {"HTTP_PROXY": true, "HTTPS_PROXY": true, "ALL_PROXY": true, "http_proxy": true, "https_proxy": true, "all_proxy": true},
           "equal": true, "NO_PROXY": {"set": true, "has_star": false}, "no_proxy": {"set": true, "has_star": false},
           "node_use_env_proxy": true})
}

#[test]
fn proxy_env_mapping() {
    let f = facts(Egress::Relay);
    check(proxy_env(&f, &Ok(all_proxy_env())), Status::Pass, "set and equal");
    let mut v = all_proxy_env();
    v["set"]["all_proxy"] = json!(false);
    check(proxy_env(&f, &Ok(v)), Status::Fail, "missing all_proxy");
    let mut v = all_proxy_env();
    v["equal"] = json!(false);
    check(proxy_env(&f, &Ok(v)), Status::Fail, "differ");
    let mut v = all_proxy_env();
    v["no_proxy"]["has_star"] = json!(true);
    check(proxy_env(&f, &Ok(v)), Status::Fail, "no_proxy contains *");
    let mut v = all_proxy_env();
    v["node_use_env_proxy"] = json!(false);
    check(proxy_env(&f, &Ok(v)), Status::Fail, "NODE_USE_ENV_PROXY");
    check(
        proxy_env(&facts(Egress::Open), &Ok(json!({}))),
        Status::Skip,
        "open",
    );
}

fn visible(items: &[(&str, &str)]) -> Answer {
    let v: Vec<Value> = items
        .iter()
        .map(|(n, val)| json!({"name": n, "sha256": digest(val)}))
        .collect();
    Ok(json!({"visible": v}))
}

#[test]
fn secret_env_mapping() {
    let f = facts(Egress::Relay);
    check(
        secret_env(&f, &visible(&[])),
        Status::Pass,
        "no deny-class secret",
    );
    // Operator and workflow layers are intended, even with the host's value.
    check(
        secret_env(&f, &visible(&[("OPENAI_API_KEY", "sk-host"), ("GH_TOKEN", "gh")])),
        Status::Pass,
        "OPENAI_API_KEY (operator), GH_TOKEN (workflow)",
    );
    // Not in a secret category: ignored (PATH, proxy variables).
    check(
        secret_env(&f, &visible(&[("PATH", "/bin"), ("HTTP_PROXY", "x")])),
        Status::Pass,
        "no deny-class",
    );
    // From the image: another value than the host's.
    check(
        secret_env(&f, &visible(&[("AWS_SECRET_ACCESS_KEY", "x")])),
        Status::Warn,
        "image's own ENV: AWS_SECRET_ACCESS_KEY",
    );
    // The host's value without an operator or workflow entry: leaked.
    let c = secret_env(
        &f,
        &visible(&[
            ("ANTHROPIC_API_KEY", "sk-ant-host"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
        ]),
    );
    check(c.clone(), Status::Fail, "ANTHROPIC_API_KEY");
    assert!(!c.message.contains("sk-ant-host"));
    assert_eq!(
        c.details["visible"],
        json!(["ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY"])
    );
}

fn hardened() -> Value {
    json!({"no_new_privs": "1", "cap_eff": "00000000000004fb", "uid": 0, "gid": 0, "pid1": "/sbin/docker-init",
           "engine_sockets": [], "home": {"path": "/root", "writable": true},
           "workspace": {"path": "/w", "writable": true}, "git_hooks": {"path": "/w/.git/hooks", "writable": false},
           "claude_settings": null})
}

#[test]
fn hardening_mapping() {
    let f = facts(Egress::Relay);
    check(hardening(&f, &Ok(hardened())), Status::Pass, "PID 1 docker-init");
    let bad = |k: &str, v: Value, needle: &str| {
        let mut h = hardened();
        h[k] = v;
        check(hardening(&f, &Ok(h)), Status::Fail, needle);
    };
    bad("no_new_privs", json!("0"), "NoNewPrivs is 0");
    bad("cap_eff", json!("00000000a80425fb"), "CAP_NET_RAW");
    bad("pid1", json!("sleep"), "not an init");
    bad("uid", json!(1000), "uid 1000, expected 0");
    bad(
        "engine_sockets",
        json!(["/var/run/docker.sock"]),
        "/var/run/docker.sock",
    );
    bad("git_hooks", json!({"writable": true}), ".git/hooks is writable");
    bad(
        "workspace",
        json!({"path": "/w", "writable": false, "error": "Read-only file system"}),
        "not writable",
    );
    bad("home", Value::Null, "HOME is not set");
    // A non-root user must have no effective capability.
    let mut h = hardened();
    h["uid"] = json!(1000);
    let mut fu = facts(Egress::Relay);
    fu.uid = Some(1000);
    check(hardening(&fu, &Ok(h.clone())), Status::Fail, "CAP_CHOWN");
    h["cap_eff"] = json!("0000000000000000");
    check(hardening(&fu, &Ok(h)), Status::Pass, "uid 1000");
    // ~/.claude/settings.json is checked when mounted.
    let mut fc = facts(Egress::Relay);
    fc.claude_mounted = true;
    let mut h = hardened();
    h["claude_settings"] = json!({"writable": true});
    check(hardening(&fc, &Ok(h)), Status::Fail, "settings.json is writable");
    // compat: NoNewPrivs is not required and the compat capabilities are allowed; warn.
    let mut fcompat = facts(Egress::Relay);
    fcompat.hardening = HardeningProfile::Compat;
    let mut h = hardened();
    h["no_new_privs"] = json!("0");
    h["cap_eff"] = json!("00000000200405fb");
    check(
        hardening(&fcompat, &Ok(h)),
        Status::Warn,
        "compat hardening profile",
    );
}

#[test]
fn secret_rules_cover_the_secret_categories_only() {
    let rules = secret_rules();
    assert!(rules.contains(&"suffix:_API_KEY".to_string()));
    assert!(rules.contains(&"prefix:AWS_".to_string()));
    assert!(!rules.iter().any(|r| r == "exact:PATH" || r == "suffix:_PROXY"));
}

#[test]
fn numeric_users() {
    assert_eq!(numeric_user(Some("1000:1001")), (Some(1000), Some(1001)));
    assert_eq!(numeric_user(Some("0")), (Some(0), None));
    assert_eq!(numeric_user(Some("node")), (None, None));
    assert_eq!(numeric_user(None), (None, None));
}

/// A test-only wrapper around the real driver, impossible to select from the CLI.
/// `without_lease` simulates a regression (D30): the container is started without the lease, so it stays
/// on the engine's default network while the doctor believes the placement is the relay. `announce`
/// receives the name of the first container started (a test interrupts the battery then).
#[derive(Debug)]
struct Wrapped {
    inner: Arc<dyn Driver>,
    without_lease: bool,
    announce: Mutex<Option<tokio::sync::oneshot::Sender<String>>>,
}

impl Wrapped {
    fn new(inner: Arc<dyn Driver>) -> Self {
        Wrapped {
            inner,
            without_lease: false,
            announce: Mutex::new(None),
        }
    }
}

#[async_trait::async_trait]
impl Driver for Wrapped {
    fn kind(&self) -> iterion_driver::DriverKind {
        self.inner.kind()
    }
    fn capabilities(&self) -> iterion_driver::Capabilities {
        self.inner.capabilities()
    }
    async fn engine_info(&self) -> iterion_driver::Result<iterion_driver::EngineInfo> {
        self.inner.engine_info().await
    }
    async fn prepare(&self, req: PrepareRequest) -> iterion_driver::Result<iterion_driver::Prepared> {
        self.inner.prepare(req).await
    }
    async fn build(
        &self,
        p: iterion_driver::Prepared,
        r: iterion_driver::BuildRequest,
    ) -> iterion_driver::Result<iterion_driver::Prepared> {
        self.inner.build(p, r).await
    }
    async fn network(&self, req: NetworkRequest) -> iterion_driver::Result<NetworkLease> {
        self.inner.network(req).await
    }
    async fn start(
        &self,
        prepared: iterion_driver::Prepared,
        lease: Option<&NetworkLease>,
        req: StartRequest,
    ) -> iterion_driver::Result<iterion_driver::Started> {
        let lease = if self.without_lease { None } else { lease };
        let started = self.inner.start(prepared, lease, req).await?;
        if let Some(tx) = self.announce.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = tx.send(started.report.name.clone());
        }
        Ok(started)
    }
    async fn list_managed(&self) -> iterion_driver::Result<Vec<iterion_driver::ManagedResource>> {
        self.inner.list_managed().await
    }
    async fn owner_liveness(&self, r: &iterion_driver::ManagedResource) -> iterion_driver::Liveness {
        self.inner.owner_liveness(r).await
    }
    async fn remove_managed(
        &self,
        r: &iterion_driver::ManagedResource,
    ) -> iterion_driver::Result<iterion_driver::RemoveOutcome> {
        self.inner.remove_managed(r).await
    }
    async fn remove_image(&self, reference: &str) -> iterion_driver::Result<()> {
        self.inner.remove_image(reference).await
    }
}

fn container_exists(name: &str) -> bool {
    let socket = iterion_test_support::engine_socket().expect("a unix engine socket");
    let r = iterion_test_support::docker_http::request(
        &socket,
        "GET",
        &format!("/containers/{name}/json"),
        None,
        &[],
        Duration::from_secs(10),
    )
    .expect("inspect");
    r.status != 404
}

#[tokio::test(flavor = "multi_thread")]
async fn d30_default_network_regression_fails_the_egress_probes() {
    if !iterion_test_support::engine_required("d30_default_network_regression_fails_the_egress_probes") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().expect("the local test image");
    let data = tempfile::tempdir().expect("tempdir");
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    env.insert("ITERION_HOME".into(), data.path().display().to_string());
    let wf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/doctor/ok-good.bot");
    let mut inputs = crate::Inputs::new(env, std::env::temp_dir());
    inputs.strict = true;
    inputs.probe = true;
    inputs.workflow = Some(wf.clone());
    let loaded = crate::checks::load(&wf).expect("load the workflow");
    let mut host = crate::gather(&inputs).await.expect("select the driver");
    let inner = host.selection.driver.clone().expect("a real driver");
    assert_eq!(inner.kind(), iterion_driver::DriverKind::Docker);
    host.selection.driver = Some(Arc::new(Wrapped {
        without_lease: true,
        ..Wrapped::new(inner)
    }));
    let report = crate::run(&inputs, &host, Some(&loaded)).await.expect("a report");
    let checks = report.checks.clone().expect("strict checks");
    let get = |id: &str| checks.iter().find(|c| c.id == id).expect(id).clone();
    let start = get("probe_sandbox_start");
    assert_eq!(start.status, Status::Pass, "{}", start.message);
    for id in ["probe_direct_egress", "probe_host_services"] {
        let c = get(id);
        assert_eq!(c.status, Status::Fail, "{id}: {}", c.message);
        assert!(c.message.contains("enforced placement"), "{id}: {}", c.message);
    }
    assert_eq!(report.exit_code, 1);
    let name = start.message["started ".len()..]
        .split_whitespace()
        .next()
        .expect("the container name")
        .to_string();
    assert!(name.starts_with("iterion-doctor-"), "{name}");
    assert!(!container_exists(&name), "{name} was left behind");
}

/// Ctrl-C drops the battery (`cmd_doctor` selects on the signal): the drop guard removes the container.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_probe_run_removes_its_sandbox() {
    if !iterion_test_support::engine_required("an_interrupted_probe_run_removes_its_sandbox") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().expect("the local test image");
    let data = tempfile::tempdir().expect("tempdir");
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    env.insert("ITERION_HOME".into(), data.path().display().to_string());
    let wf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/doctor/ok-good.bot");
    let mut inputs = crate::Inputs::new(env, std::env::temp_dir());
    inputs.strict = true;
    inputs.probe = true;
    inputs.workflow = Some(wf.clone());
    let loaded = crate::checks::load(&wf).expect("load the workflow");
    let mut host = crate::gather(&inputs).await.expect("select the driver");
    let inner = host.selection.driver.clone().expect("a real driver");
    let (tx, rx) = tokio::sync::oneshot::channel();
    host.selection.driver = Some(Arc::new(Wrapped {
        announce: Mutex::new(Some(tx)),
        ..Wrapped::new(inner)
    }));
    let battery = crate::run(&inputs, &host, Some(&loaded));
    let name = tokio::select! {
        _ = battery => panic!("the battery finished before it was interrupted"),
        name = rx => name.expect("a container was started"),
    };
    assert!(name.starts_with("iterion-doctor-"), "{name}");
    assert!(!container_exists(&name), "{name} survived the interruption");
}
