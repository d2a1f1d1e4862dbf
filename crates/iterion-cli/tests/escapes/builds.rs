//! Image builds and egress: a repository devcontainer `build` must not reach the network outside the run's
//! policy. Under `allowlist` or `denylist` the build runs without a network, and whatever the engine itself
//! would fetch for the Dockerfile (a remote `ADD`, a base image it would pull) is refused before the build.
//!
//! A host listener on 127.0.0.1 is out of a bridge container's reach anyway, so every attack aims at a listener
//! on the default bridge's gateway address: the host as the build containers (and the engine's own fetches)
//! see it. The observable effect is a connection to that listener.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use iterion_test_support::docker_http::request;
use iterion_test_support::engine_socket;
use serde_json::Value;

use crate::harness::{Hostile, IMAGE, engine_ready, first, show, types};

/// A TCP listener on the bridge gateway that counts the connections it receives.
struct HostService {
    ip: IpAddr,
    port: u16,
    hits: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HostService {
    fn start() -> HostService {
        let ip = bridge_gateway();
        let l = TcpListener::bind((ip, 0)).unwrap_or_else(|e| panic!("bind {ip}:0: {e}"));
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (hits.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((mut c, _)) => {
                        h.fetch_add(1, Ordering::SeqCst);
                        let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
                        let mut buf = [0u8; 256];
                        let _ = c.read(&mut buf);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        HostService {
            ip,
            port,
            hits,
            stop,
            thread: Some(thread),
        }
    }

    fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for HostService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The gateway address of the engine's default `bridge` network: its `Gateway` when the engine reports one,
/// otherwise the first address of its IPv4 subnet (where the engine puts the bridge interface).
fn bridge_gateway() -> IpAddr {
    let sock = engine_socket().expect("engine socket");
    let r = request(
        &sock,
        "GET",
        "/networks/bridge",
        None,
        b"",
        Duration::from_secs(10),
    )
    .expect("inspect bridge");
    let v: Value = serde_json::from_str(&r.text()).expect("network JSON");
    let configs: Vec<&Value> = v["IPAM"]["Config"].as_array().into_iter().flatten().collect();
    let gateway = configs
        .iter()
        .filter_map(|c| c["Gateway"].as_str())
        .find_map(|g| g.parse::<Ipv4Addr>().ok());
    let first_of_subnet = || {
        configs.iter().filter_map(|c| c["Subnet"].as_str()).find_map(|s| {
            let net: Ipv4Addr = s.split('/').next()?.parse().ok()?;
            Some(Ipv4Addr::from(u32::from(net) + 1))
        })
    };
    IpAddr::V4(
        gateway
            .or_else(first_of_subnet)
            .unwrap_or_else(|| panic!("the bridge network has no IPv4 gateway or subnet: {v}")),
    )
}

/// A repository whose devcontainer is built from `dockerfile`.
fn with_build(dockerfile: &str) -> Hostile {
    let h = Hostile::new();
    h.write(
        ".devcontainer/devcontainer.json",
        "{ \"name\": \"hostile\", \"build\": { \"dockerfile\": \"Dockerfile\" } }\n",
    );
    h.write(".devcontainer/Dockerfile", dockerfile);
    h
}

/// A one-node workflow under network `mode`.
fn workflow(mode: &str) -> String {
    format!(
        "tool hello:\n  command: `echo '{{\"ok\": true}}'`\n\nworkflow w:\n  entry: hello\n  sandbox:\n    network:\n      mode: {mode}\n  hello -> done\n"
    )
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `RUN` talks to a host service: under `allowlist` the build container has no network, the listener is never
/// reached, and the build events say the build ran without a network.
#[test]
fn a_build_run_step_cannot_reach_a_host_service_under_allowlist() {
    if !engine_ready("escapes::builds::run_step") {
        return;
    }
    let svc = HostService::start();
    let h = with_build(&format!(
        "FROM {IMAGE}\nRUN (echo GET / | nc -w 3 {} {}) || true\nRUN echo built > /built\n",
        svc.ip, svc.port
    ));
    let out = h.run_workflow("wf.bot", &workflow("allowlist"));
    assert_eq!(
        svc.hits(),
        0,
        "the build reached {} under allowlist\n{}",
        svc.addr(),
        show(&out)
    );
    assert!(
        out.status.success(),
        "an offline build still builds\n{}",
        show(&out)
    );
    let ids = h.run_ids();
    let ev = h.events(&ids[0]);
    assert_eq!(
        first(&ev, "sandbox_build_started")["data"]["network"],
        "none",
        "{:?}",
        types(&ev)
    );
    assert_eq!(first(&ev, "sandbox_build_finished")["data"]["network"], "none");
}

/// The same under `denylist`, whose default is to allow: the build still gets no network.
#[test]
fn a_build_run_step_cannot_reach_a_host_service_under_denylist() {
    if !engine_ready("escapes::builds::run_step_denylist") {
        return;
    }
    let svc = HostService::start();
    let h = with_build(&format!(
        "FROM {IMAGE}\nRUN (echo GET / | nc -w 3 {} {}) || true\n",
        svc.ip, svc.port
    ));
    let out = h.run_workflow("wf.bot", &workflow("denylist"));
    assert_eq!(
        svc.hits(),
        0,
        "the build reached {} under denylist\n{}",
        svc.addr(),
        show(&out)
    );
    assert!(out.status.success(), "{}", show(&out));
}

/// `ADD http://<host service>/x` is fetched by the engine itself, outside any container network: it is refused
/// before the build starts, with the Dockerfile line, and the engine never contacts the listener.
#[test]
fn a_remote_add_is_refused_before_the_build_with_its_line() {
    if !engine_ready("escapes::builds::remote_add") {
        return;
    }
    let svc = HostService::start();
    let h = with_build(&format!(
        "FROM {IMAGE}\n# fetch a payload\nADD http://{}/payload /payload\n",
        svc.addr()
    ));
    let out = h.run_workflow("wf.bot", &workflow("allowlist"));
    assert_eq!(
        svc.hits(),
        0,
        "the engine fetched from {}\n{}",
        svc.addr(),
        show(&out)
    );
    assert!(!out.status.success(), "{}", show(&out));
    let err = stderr(&out);
    assert!(
        err.contains("Dockerfile:3"),
        "the refusal names the line\n{}",
        show(&out)
    );
    assert!(err.contains("ADD"), "{}", show(&out));
    let ids = h.run_ids();
    let doc = h.doc(&ids[0]);
    assert_eq!(doc["failure_code"], "SANDBOX_BUILD_FAILED", "{doc}");
    let ev = h.events(&ids[0]);
    let failed = first(&ev, "sandbox_build_failed");
    assert!(
        failed["data"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("Dockerfile:3"),
        "{failed}"
    );
}

/// A remote `ADD` hidden behind a build argument, and one in an `ONBUILD` trigger, are refused the same way.
#[test]
fn a_remote_add_behind_a_variable_or_onbuild_is_refused() {
    if !engine_ready("escapes::builds::remote_add_variants") {
        return;
    }
    let svc = HostService::start();
    for (i, dockerfile) in [
        format!(
            "ARG SRC=http://{}/a\nFROM {IMAGE}\nARG SRC\nADD $SRC /a\n",
            svc.addr()
        ),
        format!(
            "FROM {IMAGE} AS base\nONBUILD ADD http://{}/b /b\nFROM base\nRUN true\n",
            svc.addr()
        ),
        format!("FROM {IMAGE}\nADD \\\n  [\"http://{}/c\", \"/c\"]\n", svc.addr()),
    ]
    .iter()
    .enumerate()
    {
        let h = with_build(dockerfile);
        let out = h.run_workflow("wf.bot", &workflow("allowlist"));
        assert_eq!(
            svc.hits(),
            0,
            "variant {i} reached {}\n{dockerfile}\n{}",
            svc.addr(),
            show(&out)
        );
        assert!(!out.status.success(), "variant {i}\n{dockerfile}\n{}", show(&out));
        assert!(
            stderr(&out).contains("Dockerfile:"),
            "variant {i}\n{}",
            show(&out)
        );
    }
}

/// A base image that is not present locally would be pulled by the engine from a registry the repository
/// names (here: the host service). Under `allowlist` nothing is pulled: the build is refused with the line.
#[test]
fn a_base_image_from_a_host_registry_is_not_pulled_under_allowlist() {
    if !engine_ready("escapes::builds::from_remote") {
        return;
    }
    let svc = HostService::start();
    for (line, dockerfile) in [
        (1, format!("FROM {}/evil/base:1\nRUN true\n", svc.addr())),
        (
            3,
            format!(
                "FROM {IMAGE}\nRUN true\nCOPY --from={}/evil/base:1 /x /x\n",
                svc.addr()
            ),
        ),
    ] {
        let h = with_build(&dockerfile);
        let out = h.run_workflow("wf.bot", &workflow("allowlist"));
        assert_eq!(
            svc.hits(),
            0,
            "the engine contacted {}\n{dockerfile}\n{}",
            svc.addr(),
            show(&out)
        );
        assert!(!out.status.success(), "{dockerfile}\n{}", show(&out));
        assert!(
            stderr(&out).contains(&format!("Dockerfile:{line}")),
            "{dockerfile}\n{}",
            show(&out)
        );
    }
}

/// Under `open` (the default) a build keeps the engine's default network, as before: the same `RUN` reaches
/// the listener and the events say so.
#[test]
fn under_open_a_build_keeps_the_network() {
    if !engine_ready("escapes::builds::open") {
        return;
    }
    let svc = HostService::start();
    let h = with_build(&format!(
        "FROM {IMAGE}\nRUN (echo GET / | nc -w 3 {} {}) || true\n",
        svc.ip, svc.port
    ));
    let out = h.run_workflow("wf.bot", &workflow("open"));
    if iterion_test_support::gvisor::runsc_without_network()
        && crate::harness::refused_under_gvisor(&out, crate::harness::OPEN_UNDER_GVISOR)
    {
        return;
    }
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        svc.hits() >= 1,
        "the open build reached the listener\n{}",
        show(&out)
    );
    let ids = h.run_ids();
    let ev = h.events(&ids[0]);
    assert_eq!(first(&ev, "sandbox_build_started")["data"]["network"], "open");
}
