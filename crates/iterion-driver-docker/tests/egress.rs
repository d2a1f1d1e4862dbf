//! Enforced egress on the real engine (03 §14.1, C24) with the real `iterion-netproxy` on the lease's Unix
//! socket, and the relay cases C33 (dynamically linked relay refused) and C34 (relay death stops the sandbox).

mod support;

use async_trait::async_trait;
use iterion_driver::{
    Driver, EgressPlacement, Error as DError, ExecRequest, NetworkRequest, OutputLimits, PrepareRequest,
    ProxyEndpoint, ProxyListen, PullPolicy, StartRequest, exec_collect, owner,
};
use iterion_netpolicy::{Mode, Policy};
use iterion_netproxy::{Credential, Listen, Proxy, ProxyConfig, ProxyEvent, Resolver, new_token};
use iterion_spec::resolved::OciRuntime;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug)]
struct MapResolver(String, IpAddr);

#[async_trait]
impl Resolver for MapResolver {
    async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, iterion_netproxy::ResolveError> {
        if host == self.0 {
            Ok(vec![self.1])
        } else {
            Err(iterion_netproxy::ResolveError::NoAddress {
                host: host.to_string(),
            })
        }
    }
}

async fn sh(run: &dyn iterion_driver::Run, script: &str, env: &[(&str, String)]) -> (i32, String, String) {
    let mut req = ExecRequest::shell(script);
    for (k, v) in env {
        req = req.env(*k, v.clone());
    }
    let c = exec_collect(run, req, OutputLimits::default())
        .await
        .expect("exec");
    (c.status.code, c.stdout_text(), c.stderr_text())
}

fn base64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c24_enforced_egress_through_the_relay() {
    if !iterion_test_support::engine_required("c24_enforced_egress_through_the_relay") {
        return;
    }
    c24(OciRuntime::Default).await;
}

/// C24 with the sandbox under gVisor: the relay reaches the proxy's socket through the bind, and nothing else
/// is reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c24_enforced_egress_through_the_relay_under_gvisor() {
    if !iterion_test_support::gvisor::required("c24_enforced_egress_through_the_relay_under_gvisor") {
        return;
    }
    c24(OciRuntime::Gvisor).await;
}

async fn c24(runtime: OciRuntime) {
    let image = iterion_test_support::docker_image::ensure_test_image().expect("image");
    let driver = support::driver().await;
    assert!(
        support::relay_binary().is_some(),
        "the relay must build for this test"
    );

    // 1. The outside service and a host listener on every interface.
    let outside = support::PlainContainer::start(&image, &["httpd", "-f", "-p", "8080", "-h", "/www"]);
    assert!(!outside.ip.is_empty(), "outside container has an address");
    let host_l = std::net::TcpListener::bind("0.0.0.0:0").expect("bind host listener");
    let host_port = host_l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        use std::io::Write;
        for mut s in host_l.incoming().flatten() {
            let _ = s.write_all(b"HOSTSVC\n");
        }
    });
    let bridge = support::engine_get("/networks/bridge");
    let subnet = bridge["IPAM"]["Config"][0]["Subnet"]
        .as_str()
        .unwrap_or("172.17.0.0/16")
        .to_string();
    let gateway = bridge["IPAM"]["Config"][0]["Gateway"]
        .as_str()
        .unwrap_or("172.17.0.1")
        .to_string();

    // 2. Network lease, proxy on its Unix socket, sandbox.
    let run_id = iterion_test_support::conformance::unique_name();
    let _guard = support::RunGuard(run_id.clone());
    let run_dir = tempfile::tempdir().expect("run dir");
    let lease = driver
        .network(NetworkRequest::new(&run_id, run_dir.path(), true))
        .await
        .expect("lease");
    assert_eq!(lease.placement, EgressPlacement::Relay);
    let ProxyListen::Unix(sock) = lease.proxy_listen.clone() else {
        panic!("relay lease listens on a Unix socket")
    };
    let token = new_token();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let policy = Arc::new(Policy::compile(Mode::Allowlist, &[], &["outside.test", &subnet]).expect("policy"));
    let ip: IpAddr = outside.ip.parse().expect("ip");
    let config = ProxyConfig::builder()
        .listen(Listen::Unix(sock.clone()))
        .credential(Credential::new("run", token.clone(), None, policy))
        .resolver(Arc::new(MapResolver("outside.test".into(), ip)))
        .on_event(move |e| sink.lock().expect("events").push(e))
        .build()
        .expect("proxy config");
    let proxy = Proxy::start(config).await.expect("proxy");

    let ws = tempfile::tempdir().expect("ws");
    let wsp = std::fs::canonicalize(ws.path()).expect("canon");
    let mut sandbox = iterion_test_support::conformance::sandbox_for(Some(&image), &wsp);
    sandbox.runtime.name = runtime.clone();
    sandbox.refresh_key();
    let mut preq = PrepareRequest::new(sandbox);
    preq.pull_policy = PullPolicy::Never;
    let prepared = driver.prepare(preq).await.expect("prepare");
    let mut sreq = StartRequest::new(&run_id, &wsp, owner::current_owner(run_dir.path()));
    let url = format!("http://run:{token}@127.0.0.1:3128");
    let mut env: Vec<(String, String)> = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .iter()
    .map(|k| (k.to_string(), url.clone()))
    .collect();
    env.push(("NO_PROXY".into(), "localhost,127.0.0.1,::1".into()));
    env.sort();
    sreq.container_env = env;
    sreq.proxy = Some(ProxyEndpoint {
        host: "127.0.0.1".into(),
        port: 3128,
    });
    let started = driver.start(prepared, Some(&lease), sreq).await.expect("start");
    assert!(started.report.enforced_egress);
    let run = started.run;
    if runtime == OciRuntime::Gvisor {
        let (_, version, _) = sh(&*run, "cat /proc/version", &[]).await;
        assert!(
            version.starts_with(iterion_test_support::gvisor::KERNEL),
            "{version}"
        );
    }

    // 3. Without the proxy: nothing is reachable, and there is no route at all.
    let (_, out, _) = sh(
        &*run,
        &format!(
            "printf 'GET /ok HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {} 8080",
            outside.ip
        ),
        &[],
    )
    .await;
    assert!(!out.contains("ok"), "outside reached directly: {out}");
    let mut targets = support::host_ipv4_addresses();
    targets.push(gateway.clone());
    for a in &targets {
        let (_, out, _) = sh(&*run, &format!("echo x | nc -w 3 {a} {host_port}"), &[]).await;
        assert!(!out.contains("HOSTSVC"), "host service reached on {a}: {out}");
    }
    let (code, _, _) = sh(&*run, "echo x | nc -w 3 1.1.1.1 80", &[]).await;
    assert_ne!(code, 0, "1.1.1.1 must be unreachable");
    let (_, routes, _) = sh(&*run, "cat /proc/net/route", &[]).await;
    assert_eq!(
        routes.lines().filter(|l| !l.trim().is_empty()).count(),
        1,
        "only the header: {routes}"
    );

    // 4. Through the proxy: the allowed name answers.
    let auth = base64(&format!("run:{token}"));
    let get = |host: &str| {
        format!(
            "printf 'GET http://{host}:8080/ok HTTP/1.1\\r\\nHost: {host}:8080\\r\\nProxy-Authorization: Basic %s\\r\\nConnection: close\\r\\n\\r\\n' \"$PA\" | nc -w 5 127.0.0.1 3128"
        )
    };
    let pa = [("PA", auth.clone())];
    let (_, out, err) = sh(&*run, &get("outside.test"), &pa).await;
    assert!(
        out.lines().last().unwrap_or_default().trim() == "ok",
        "through the proxy: {out} {err}"
    );

    // 5. A denied name: 403 and one Denied event.
    let (_, out, _) = sh(&*run, &get("denied.test"), &pa).await;
    assert!(out.starts_with("HTTP/1.1 403"), "denied: {out}");
    // The proxy may report the denial just after answering: wait for it with a deadline.
    let mut denied = Vec::new();
    for _ in 0..50 {
        denied = events
            .lock()
            .expect("events")
            .iter()
            .filter_map(|e| match e {
                ProxyEvent::Denied(d) if d.host == "denied.test" => Some(d.clone()),
                _ => None,
            })
            .collect();
        if !denied.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0].reason.as_deref(), Some("policy denial"));
    assert_eq!(denied[0].rule.as_deref(), Some("no rule matched"));

    // 6. No credentials: 407.
    let (_, out, _) = sh(&*run, "printf 'GET http://outside.test:8080/ok HTTP/1.1\\r\\nHost: outside.test:8080\\r\\nConnection: close\\r\\n\\r\\n' | nc -w 5 127.0.0.1 3128", &[]).await;
    assert!(out.starts_with("HTTP/1.1 407"), "no credentials: {out}");

    let report = run.cleanup().await;
    assert!(report.container_removed, "{report:?}");
    proxy.shutdown(Duration::from_secs(5)).await;
    assert!(lease.release().is_empty());
    assert!(
        !sock.parent().expect("dir").exists(),
        "release removes the socket directory"
    );
    assert!(support::containers_with_label("iterion.io/run-id", &run_id).is_empty());
}

#[tokio::test]
async fn c33_dynamically_linked_relay_is_refused() {
    if !iterion_test_support::engine_required("c33_dynamically_linked_relay_is_refused") {
        return;
    }
    let socket = iterion_test_support::engine_socket().expect("socket");
    let endpoints = iterion_driver_docker::endpoint::EndpointSettings::new(
        Some(format!("unix://{}", socket.display())),
        None,
        None,
        None,
    );
    // A dynamically linked program: the test binary itself.
    let dynamic = std::env::current_exe().expect("exe");
    let settings = iterion_driver_docker::DockerSettings::new(
        endpoints,
        iterion_driver_docker::endpoint::Family::Docker,
        support::hostname(),
        support::uid(),
    )
    .with_relay_binary(&dynamic);
    let driver = iterion_driver_docker::DockerDriver::connect(settings)
        .await
        .expect("connect");
    let dir = tempfile::tempdir().expect("dir");
    let err = driver
        .network(NetworkRequest::new("r-c33", dir.path(), false))
        .await
        .expect_err("refused");
    match &err {
        DError::StartFailed { reason, .. } => {
            assert!(reason.contains(&dynamic.display().to_string()), "{reason}");
            assert!(reason.contains("is not a static"), "{reason}");
        }
        other => panic!("want StartFailed, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c34_relay_death_stops_the_sandbox() {
    if !iterion_test_support::engine_required("c34_relay_death_stops_the_sandbox") {
        return;
    }
    let image = iterion_test_support::docker_image::ensure_test_image().expect("image");
    let driver = support::driver().await;
    let run_id = iterion_test_support::conformance::unique_name();
    let _guard = support::RunGuard(run_id.clone());
    let run_dir = tempfile::tempdir().expect("run dir");
    let lease = driver
        .network(NetworkRequest::new(&run_id, run_dir.path(), false))
        .await
        .expect("lease");
    let ProxyListen::Unix(sock) = lease.proxy_listen.clone() else {
        panic!("relay lease listens on a Unix socket")
    };
    let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind the proxy socket");
    let ws = tempfile::tempdir().expect("ws");
    let wsp = std::fs::canonicalize(ws.path()).expect("canon");
    let mut preq = PrepareRequest::new(iterion_test_support::conformance::sandbox_for(Some(&image), &wsp));
    preq.pull_policy = PullPolicy::Never;
    let prepared = driver.prepare(preq).await.expect("prepare");
    let sreq = StartRequest::new(&run_id, &wsp, owner::current_owner(run_dir.path()));
    let run = driver
        .start(prepared, Some(&lease), sreq)
        .await
        .expect("start")
        .run;
    // The relay is the child of the engine's init (PID 1): kill it from inside.
    let (_, ps, _) = sh(&*run, "ps -o pid,args", &[]).await;
    let pid = ps
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(iterion_driver_docker::RELAY_BIN_TARGET))
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .expect("relay process");
    // The kill exec itself may be reported as SandboxGone: the container stops under it.
    if let Ok(ex) = run.exec(ExecRequest::shell(format!("kill -KILL {pid}"))).await {
        let _ = ex.wait().await;
    }
    let mut gone = None;
    for _ in 0..50 {
        match run.exec(ExecRequest::new(["true"])).await {
            Err(e) => {
                gone = Some(e);
                break;
            }
            Ok(ex) => {
                if let Err(e) = ex.wait().await {
                    gone = Some(e);
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(matches!(gone, Some(DError::SandboxGone { .. })), "{gone:?}");
    run.cleanup().await;
    lease.release();
}
