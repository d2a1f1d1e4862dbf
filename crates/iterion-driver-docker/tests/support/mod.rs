//! Shared helpers of the docker driver's engine tests (included with `mod support;`).
#![allow(dead_code)]

use iterion_driver_docker::endpoint::{EndpointSettings, Family};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use std::path::PathBuf;
use std::time::Duration;

/// A driver on the test engine, with the relay of the current build when it was built.
pub async fn driver() -> DockerDriver {
    driver_with(|_| {}).await
}

/// [`driver`] with settings changed by `f`.
pub async fn driver_with(f: impl FnOnce(&mut DockerSettings)) -> DockerDriver {
    let socket = iterion_test_support::engine_socket().expect("unix socket");
    let endpoints = EndpointSettings::new(Some(format!("unix://{}", socket.display())), None, None, None);
    let host = hostname();
    let mut s = DockerSettings::new(endpoints, Family::Docker, host, uid());
    if let Some(r) = relay_binary() {
        s = s.with_relay_binary(r);
    }
    f(&mut s);
    DockerDriver::connect(s).await.expect("connect")
}

/// This host's name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// A start checks' cache directory for one test, removed with it.
pub struct StartChecksCache {
    _root: tempfile::TempDir,
    /// The directory the driver keeps its entries in (created by the first full check).
    pub dir: PathBuf,
}

/// [`driver`] with the start checks' cache in a fresh temporary directory.
pub async fn driver_with_start_checks_cache() -> (DockerDriver, StartChecksCache) {
    let root = tempfile::tempdir().expect("cache dir");
    let dir = root.path().join("start-checks");
    let d = dir.clone();
    let driver = driver_with(|s| s.probe_cache = Some(d)).await;
    (driver, StartChecksCache { _root: root, dir })
}

/// This process's uid.
pub fn uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// The static relay this crate embeds, installed once per test process under a temporary directory.
pub fn relay_binary() -> Option<PathBuf> {
    static RELAY: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    RELAY
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("iterion-relay-test-{}", std::process::id()));
            iterion_driver_docker::relay::install_embedded(&dir).ok()
        })
        .clone()
}

/// Force-removes a container by id or name (drop guards, behind-the-back removal).
pub fn force_remove(id: &str) {
    if let Some(s) = iterion_test_support::engine_socket() {
        let _ = iterion_test_support::docker_http::request(
            &s,
            "DELETE",
            &format!("/containers/{id}?force=1&v=1"),
            None,
            &[],
            Duration::from_secs(30),
        );
    }
}

/// GET a JSON document from the engine.
pub fn engine_get(path: &str) -> serde_json::Value {
    let s = iterion_test_support::engine_socket().expect("socket");
    let r = iterion_test_support::docker_http::request(&s, "GET", path, None, &[], Duration::from_secs(30))
        .expect("engine");
    serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null)
}

/// Containers (all states) carrying `label=value`.
pub fn containers_with_label(label: &str, value: &str) -> Vec<String> {
    let filter = format!("{{\"label\":[\"{label}={value}\"]}}");
    let v = engine_get(&format!(
        "/containers/json?all=1&filters={}",
        iterion_test_support::docker_http::encode_component(&filter)
    ));
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["Id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Images carrying `label=value` (their ids).
pub fn images_with_label(label: &str, value: &str) -> Vec<String> {
    let filter = format!("{{\"label\":[\"{label}={value}\"]}}");
    let v = engine_get(&format!(
        "/images/json?filters={}",
        iterion_test_support::docker_http::encode_component(&filter)
    ));
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["Id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Force-removes an image by id or reference.
pub fn force_remove_image(id: &str) {
    if let Some(s) = iterion_test_support::engine_socket() {
        let _ = iterion_test_support::docker_http::request(
            &s,
            "DELETE",
            &format!("/images/{id}?force=1"),
            None,
            &[],
            Duration::from_secs(30),
        );
    }
}

/// Removes every container of a run id, then every image it built, when dropped.
#[derive(Debug)]
pub struct RunGuard(pub String);

impl Drop for RunGuard {
    fn drop(&mut self) {
        for id in containers_with_label("iterion.io/run-id", &self.0) {
            force_remove(&id);
        }
        for id in images_with_label("iterion.io/run-id", &self.0) {
            force_remove_image(&id);
        }
    }
}

/// POSTs a JSON body to the engine; returns the status and the parsed answer.
pub fn engine_post(path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let s = iterion_test_support::engine_socket().expect("socket");
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body).expect("json")
    };
    let r = iterion_test_support::docker_http::request(
        &s,
        "POST",
        path,
        Some("application/json"),
        &bytes,
        Duration::from_secs(60),
    )
    .expect("engine");
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null),
    )
}

/// A plain container of the test image on the default network, labelled as a test resource; removed on drop.
#[derive(Debug)]
pub struct PlainContainer {
    /// Container id.
    pub id: String,
    /// Its address on the default bridge.
    pub ip: String,
}

impl PlainContainer {
    /// Creates and starts `cmd` in the test image.
    pub fn start(image: &str, cmd: &[&str]) -> Self {
        let name = iterion_test_support::conformance::unique_name();
        let body = serde_json::json!({
            "Image": image,
            "Cmd": cmd,
            "Labels": {"iterion.io/component": "test"},
            "HostConfig": {"Init": true}
        });
        let (st, v) = engine_post(&format!("/containers/create?name={name}"), &body);
        assert_eq!(st, 201, "create: {v}");
        let id = v["Id"].as_str().expect("id").to_string();
        // Owned from here on: a failed assertion below still removes it.
        let mut me = Self {
            id,
            ip: String::new(),
        };
        let (st, v) = engine_post(&format!("/containers/{}/start", me.id), &serde_json::Value::Null);
        assert!(st == 204 || st == 304, "start: {st} {v}");
        let info = engine_get(&format!("/containers/{}/json", me.id));
        me.ip = info["NetworkSettings"]["IPAddress"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        me
    }
}

impl Drop for PlainContainer {
    fn drop(&mut self) {
        force_remove(&self.id);
    }
}

/// IPv4 addresses of this host's interfaces (from /proc/net/fib_trie, local /32 host entries).
pub fn host_ipv4_addresses() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    let mut out = Vec::new();
    let mut last = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = Some(a.to_string());
        } else if t.contains("/32 host LOCAL")
            && let Some(a) = last.take()
            && !a.starts_with("127.")
            && !out.contains(&a)
        {
            out.push(a);
        }
    }
    out
}
