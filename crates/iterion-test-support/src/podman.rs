//! Podman as a second engine of the tests, through its Docker-compatible service socket
//! (`podman system service unix:///run/podman/podman.sock`).
//!
//! The rule is the Docker one of [`crate::engine_required`]: without a Podman service a test is skipped with a
//! notice on a developer machine, and fails when `CI` (or `ITERION_REQUIRE_PODMAN=1`) is set. Podman keeps its
//! own image store, so [`ensure_test_images`] imports the local test images there too.

use crate::docker_http::{self, encode_component};
use crate::docker_image;
use std::path::PathBuf;
use std::time::Duration;

/// The rootful Podman service socket, used unless `CONTAINER_HOST` names another `unix://` socket.
pub const DEFAULT_SOCKET: &str = "/run/podman/podman.sock";

/// The Podman socket the tests use: `CONTAINER_HOST=unix://…` when set, else [`DEFAULT_SOCKET`]; `None` for a
/// non-`unix://` `CONTAINER_HOST`.
pub fn socket() -> Option<PathBuf> {
    match std::env::var("CONTAINER_HOST") {
        Ok(h) if !h.is_empty() => h.strip_prefix("unix://").map(PathBuf::from),
        _ => Some(PathBuf::from(DEFAULT_SOCKET)),
    }
}

/// Whether the environment demands that the Podman tests run (`CI`, or `ITERION_REQUIRE_PODMAN=1`).
pub fn demanded() -> bool {
    let set = |k: &str| {
        std::env::var(k)
            .map(|v| !v.is_empty() && v != "0" && v != "false")
            .unwrap_or(false)
    };
    set("CI") || set("ITERION_REQUIRE_PODMAN")
}

/// Pings the Podman service (`GET /_ping`, two seconds) and checks that the answer is Podman's (it carries
/// `Libpod-Api-Version`), not a Docker daemon behind the same path. Returns the socket.
pub fn answers() -> Result<PathBuf, String> {
    let sock = socket().ok_or_else(|| "CONTAINER_HOST is not a unix:// socket".to_string())?;
    let r = docker_http::request(&sock, "GET", "/_ping", None, b"", Duration::from_secs(2))?;
    if r.status != 200 {
        return Err(format!("{}: /_ping answered {}", sock.display(), r.status));
    }
    if r.header("libpod-api-version").is_none() {
        return Err(format!("{} answers but is not Podman", sock.display()));
    }
    Ok(sock)
}

/// The Podman socket when the service answers and the test should go on; `None` when the test should return
/// early (skipped, with a notice on stderr). Panics, failing the test, when Podman is demanded but does not
/// answer.
pub fn required(test: &str) -> Option<PathBuf> {
    match answers() {
        Ok(sock) => Some(sock),
        Err(why) if demanded() => panic!(
            "{test}: a Podman service is required (CI or ITERION_REQUIRE_PODMAN is set) but none answers: {why}; \
             start one with `podman system service --time=0 unix://{DEFAULT_SOCKET}` (see CONTRIBUTING.md)"
        ),
        Err(why) => {
            crate::notice(&format!(
                "SKIPPED {test}: no Podman service answers ({why}); set CI=1 to make this a failure"
            ));
            None
        }
    }
}

/// Imports the local test images (`ITERION_TEST_BUSYBOX` or the system's static BusyBox) into Podman's store;
/// a no-op when they are present with the same digest.
pub fn ensure_test_images(socket: &std::path::Path) -> Result<(), String> {
    let busybox = std::env::var_os("ITERION_TEST_BUSYBOX").map(PathBuf::from);
    for a in &docker_image::test_archives(busybox.as_deref())? {
        docker_image::ensure_image(socket, a)
            .map_err(|e| format!("import {} into podman: {e}", a.reference))?;
    }
    Ok(())
}

/// What [`labelled`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Containers, in any state.
    Containers,
    /// Networks.
    Networks,
}

/// Ids of the containers or networks carrying the label `label` (`key` or `key=value`) on the engine at
/// `socket`. An engine that does not answer is an `Err`, so "nothing left behind" cannot pass by accident.
pub fn labelled(socket: &std::path::Path, kind: Kind, label: &str) -> Result<Vec<String>, String> {
    let filters = serde_json::json!({ "label": [label] }).to_string();
    let path = match kind {
        Kind::Containers => format!("/containers/json?all=1&filters={}", encode_component(&filters)),
        Kind::Networks => format!("/networks?filters={}", encode_component(&filters)),
    };
    let r = docker_http::request(socket, "GET", &path, None, b"", Duration::from_secs(10))?;
    if r.status != 200 {
        return Err(format!("GET {path}: {} {}", r.status, r.text()));
    }
    let list: Vec<serde_json::Value> =
        serde_json::from_slice(&r.body).map_err(|e| format!("GET {path}: {e}"))?;
    Ok(list
        .iter()
        .filter_map(|v| v["Id"].as_str().map(str::to_owned))
        .collect())
}

/// Force-removes a container (and its anonymous volumes) or a network; best effort, for drop guards.
pub fn remove(socket: &std::path::Path, kind: Kind, id: &str) {
    let path = match kind {
        Kind::Containers => format!("/containers/{id}?force=1&v=1"),
        Kind::Networks => format!("/networks/{id}?force=1"),
    };
    let _ = docker_http::request(socket, "DELETE", &path, None, b"", Duration::from_secs(30));
}
