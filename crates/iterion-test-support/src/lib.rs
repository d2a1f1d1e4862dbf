//! Helpers shared by the workspace's tests. Not part of any public API.
//!
//! The main one is [`engine_required`]: tests that need a container engine call it first. On a developer
//! machine without an engine they are skipped with a visible notice; when `CI` (or `ITERION_REQUIRE_DOCKER=1`)
//! is set, a missing engine is a failure, never a silent skip.

pub mod conformance;
pub mod dns;
pub mod docker_http;
pub mod docker_image;
pub mod fake_provider;
pub mod gvisor;
pub mod k8s_fake;
pub mod podman;
pub mod upstream;

use std::path::PathBuf;
use std::time::Duration;

/// Whether the environment demands that engine tests run (CI, or `ITERION_REQUIRE_DOCKER=1`).
pub fn engine_demanded() -> bool {
    let set = |k: &str| {
        std::env::var(k)
            .map(|v| !v.is_empty() && v != "0" && v != "false")
            .unwrap_or(false)
    };
    set("CI") || set("ITERION_REQUIRE_DOCKER")
}

/// The Unix socket of the local engine: `DOCKER_HOST=unix://…` when set, else `/var/run/docker.sock`.
pub fn engine_socket() -> Option<PathBuf> {
    match std::env::var("DOCKER_HOST") {
        Ok(h) if !h.is_empty() => h.strip_prefix("unix://").map(PathBuf::from),
        _ => Some(PathBuf::from("/var/run/docker.sock")),
    }
}

/// Ids of the containers (any state) labelled `iterion.io/run-id=<run_id>` on the local engine; empty when no
/// engine answers.
pub fn containers_of(run_id: &str) -> Vec<String> {
    let Some(sock) = engine_socket() else {
        return Vec::new();
    };
    let filters = serde_json::json!({"label": [format!("iterion.io/run-id={run_id}")]}).to_string();
    let Ok(r) = docker_http::request(
        &sock,
        "GET",
        &format!(
            "/containers/json?all=1&filters={}",
            docker_http::encode_component(&filters)
        ),
        None,
        b"",
        Duration::from_secs(10),
    ) else {
        return Vec::new();
    };
    let list: Vec<serde_json::Value> = serde_json::from_str(&r.text()).unwrap_or_default();
    list.iter()
        .filter_map(|c| c["Id"].as_str().map(str::to_owned))
        .collect()
}

/// Pings the engine over its Unix socket (`GET /_ping`), bounded to two seconds.
pub fn engine_answers() -> Result<(), String> {
    let path = engine_socket().ok_or_else(|| "DOCKER_HOST is not a unix:// socket".to_string())?;
    let r = iterion_driver_docker::engine_http::blocking::get(&path, "/_ping", Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    if r.status == 200 {
        Ok(())
    } else {
        Err(format!("unexpected answer: {}", r.status_line))
    }
}

/// A line the person running the tests sees: written to the process's stderr directly, which the test
/// harness's output capture (it holds back `print!` and `eprint!` only) does not hide.
pub fn notice(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Returns `true` when an engine answers and the test should go on, `false` when the test should return early
/// (skipped, with a notice on stderr). Panics, failing the test, when an engine is demanded but none answers.
pub fn engine_required(test: &str) -> bool {
    match engine_answers() {
        Ok(()) => true,
        Err(why) if engine_demanded() => {
            panic!(
                "{test}: a container engine is required (CI or ITERION_REQUIRE_DOCKER is set) but none answers: {why}"
            )
        }
        Err(why) => {
            notice(&format!(
                "SKIPPED {test}: no container engine answers ({why}); set CI=1 to make this a failure"
            ));
            false
        }
    }
}
