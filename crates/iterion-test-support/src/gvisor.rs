//! gVisor on the test engine. [`required`] gates the tests that run sandboxes under `runsc`: it goes on when
//! the engine at `DOCKER_HOST` lists a `runsc` runtime, skips with a visible notice when it does not, and fails
//! when `ITERION_REQUIRE_GVISOR=1` says the runtime was expected (`.ci/run` sets it after registering `runsc`
//! with a daemon it started itself; it never reconfigures a daemon it did not start).

use std::time::Duration;

/// The start of `/proc/version` inside a gVisor sandbox: gVisor's own kernel, whatever the host runs.
pub const KERNEL: &str = "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016";

/// An allowlist policy without rules: what a sandbox that needs no network takes under gVisor, whose
/// registration may carry `--network=none` (the driver then refuses an open policy).
pub fn filtered_policy() -> iterion_spec::resolved::NetworkPolicySpec {
    let mut p = iterion_spec::resolved::NetworkPolicySpec::open("gvisor tests");
    p.mode = iterion_spec::resolved::NetworkMode::Allowlist;
    p
}

/// Whether `ITERION_REQUIRE_GVISOR` demands the gVisor tests.
pub fn demanded() -> bool {
    std::env::var("ITERION_REQUIRE_GVISOR")
        .map(|v| !v.is_empty() && v != "0" && v != "false")
        .unwrap_or(false)
}

/// The runtimes the engine at `DOCKER_HOST` lists (`/info` `Runtimes`), sorted.
pub fn engine_runtimes() -> Result<Vec<String>, String> {
    let sock = crate::engine_socket().ok_or_else(|| "DOCKER_HOST is not a unix:// socket".to_string())?;
    let r = crate::docker_http::request(&sock, "GET", "/info", None, b"", Duration::from_secs(10))?;
    let info: serde_json::Value = serde_json::from_str(&r.text()).map_err(|e| format!("/info: {e}"))?;
    let mut names: Vec<String> = info["Runtimes"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    Ok(names)
}

/// Whether the engine registers `runsc` with `--network=none` (its sandboxes then have loopback only, and an
/// open policy is refused under it).
pub fn runsc_without_network() -> bool {
    let Some(sock) = crate::engine_socket() else {
        return false;
    };
    let Ok(r) = crate::docker_http::request(&sock, "GET", "/info", None, b"", Duration::from_secs(10)) else {
        return false;
    };
    let info: serde_json::Value = serde_json::from_str(&r.text()).unwrap_or_default();
    info["Runtimes"]["runsc"]["runtimeArgs"]
        .as_array()
        .is_some_and(|a| a.iter().any(|v| v == "--network=none"))
}

/// `true` when the engine answers and lists `runsc`; `false` (with a notice) when the test should return early.
/// Panics when gVisor is demanded and missing, or when an engine is demanded and none answers.
pub fn required(test: &str) -> bool {
    if !demanded() && !crate::engine_required(test) {
        return false;
    }
    let why = match engine_runtimes() {
        Ok(names) if names.iter().any(|n| n == "runsc") => return true,
        Ok(names) => format!("the engine lists no runsc runtime (it has: {})", names.join(", ")),
        Err(e) => format!("no engine answers ({e})"),
    };
    if demanded() {
        panic!("{test}: gVisor is required (ITERION_REQUIRE_GVISOR is set) but {why}");
    }
    crate::notice(&format!(
        "SKIPPED {test}: {why}; register runsc with the daemon (.ci/run does it for a daemon it starts) or set ITERION_REQUIRE_GVISOR=1 to make this a failure"
    ));
    false
}
