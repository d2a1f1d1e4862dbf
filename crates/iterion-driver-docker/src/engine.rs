//! Engine connection (03 §4.2, §4.3): ping with a bound and distinct failure reasons, API version
//! negotiation (never above what the server supports, never below 1.41), and the engine's identity.

use crate::endpoint::{Candidate, EndpointSettings, Family, candidates};
use crate::engine_http::{self, EngineHttpError};
use crate::error::{Error, Result, engine};
use bollard::{ClientVersion, Docker};
use iterion_spec::resolved::OciRuntime;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Lowest engine API version the driver accepts.
pub const MIN_API: (usize, usize) = (1, 41);
/// Highest engine API version the driver asks for (the lower of this and the server's maximum is used).
pub const MAX_API: (usize, usize) = (1, 45);
/// Bound of every non-streaming engine request (03 §13).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What the handshake learned about the engine (03 §4.3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineFacts {
    /// The engine is Podman (a component named Podman, or a `Libpod-API-Version` ping header).
    pub podman: bool,
    /// Engine version string.
    pub version: String,
    /// The negotiated API version, `major.minor`.
    pub api_version: String,
    /// Engine OS (`linux`).
    pub os: String,
    /// Engine architecture as the engine reports it (`x86_64`, `aarch64`).
    pub arch: String,
    /// Rootless engine.
    pub rootless: bool,
    /// Docker Desktop (the engine runs in a virtual machine).
    pub desktop: bool,
    /// The socket the driver is connected to.
    pub endpoint: PathBuf,
    /// `_ping` answered `Builder-Version: 2`.
    pub buildkit: bool,
    /// `/info` `InitBinary`.
    pub init_binary: Option<String>,
    /// `/info` `CgroupVersion`.
    pub cgroup_version: Option<String>,
    /// `/info` `SecurityOptions`.
    pub security_options: Vec<String>,
    /// SELinux is enabled on the engine (binds of the relay need relabelling).
    pub selinux: bool,
    /// `/info` `Runtimes`: the OCI runtimes the engine can start a container with, sorted.
    pub runtimes: Vec<String>,
    /// `/info` `DefaultRuntime`.
    pub default_runtime: Option<String>,
    /// `/info` `Runtimes.<name>.runtimeArgs`: the arguments the daemon passes each runtime, by name.
    pub runtime_args: std::collections::BTreeMap<String, Vec<String>>,
}

/// The engine names tried, in order, for a logical runtime: gVisor registers as `runsc` (its program's name,
/// what its install guide and Podman's defaults use) or `gvisor`; Kata as `kata`, `kata-runtime` or its shim.
fn runtime_candidates(want: &OciRuntime) -> Vec<&str> {
    match want {
        OciRuntime::Default => Vec::new(),
        OciRuntime::Gvisor => vec!["runsc", "gvisor"],
        OciRuntime::Kata => vec!["kata", "kata-runtime", "io.containerd.kata.v2"],
        OciRuntime::Named(n) => vec![n.as_str()],
    }
}

/// How to make gVisor available to an engine that lacks it.
pub const REGISTER_RUNSC_HINT: &str = "install gVisor (apt-get install runsc) and register it with the daemon: add \"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": [\"--host-uds=open\"]}} to /etc/docker/daemon.json and reload the daemon (systemctl reload docker, or SIGHUP); Podman: install runsc where containers.conf looks for it";

impl EngineFacts {
    /// `docker` or `podman`.
    pub fn driver_name(&self) -> &'static str {
        if self.podman { "podman" } else { "docker" }
    }

    /// The engine's name for the runtime `want` (`None`: the engine's default), or why the engine cannot start
    /// a container under it ([`engine_runtime`] over `/info` `Runtimes`).
    pub fn oci_runtime(&self, want: &OciRuntime) -> Result<Option<String>, iterion_driver::Error> {
        engine_runtime(self.podman, &self.runtimes, want)
    }

    /// Refuses a sandbox whose egress the registration of its gVisor runtime cannot carry, before anything
    /// starts: the relay reaches the proxy's Unix socket through a bind, which gVisor allows only with
    /// `--host-uds=open` (or `all`); an `open` policy needs a network, which `--network=none` takes away.
    /// Other runtimes, and runtimes whose arguments the engine does not list (Podman), pass.
    pub fn check_runtime_egress(
        &self,
        engine_name: &str,
        needs_proxy: bool,
    ) -> Result<(), iterion_driver::Error> {
        let Some(args) = self.runtime_args.get(engine_name) else {
            return Ok(());
        };
        if !matches!(engine_name, "runsc" | "gvisor") {
            return Ok(());
        }
        let flag = |name: &str| {
            args.iter().rev().find_map(|a| {
                let a = a.trim_start_matches('-');
                a.strip_prefix(name).and_then(|v| v.strip_prefix('='))
            })
        };
        let refuse = |why: String| iterion_driver::Error::InvalidSpec {
            field: "runtime".into(),
            reason: why,
        };
        if needs_proxy {
            let uds = flag("host-uds").unwrap_or("none");
            let legacy = args
                .iter()
                .any(|a| a.trim_start_matches('-') == "fsgofer-host-uds");
            if !matches!(uds, "open" | "all") && !legacy {
                return Err(refuse(format!(
                    "the '{engine_name}' runtime is registered without --host-uds=open, so the egress relay cannot reach the proxy's socket; add \"--host-uds=open\" to its runtimeArgs in the daemon's configuration"
                )));
            }
        } else if flag("network") == Some("none") {
            return Err(refuse(format!(
                "the '{engine_name}' runtime is registered with --network=none, so a sandbox under it has no network, and an open network policy needs one; use a filtered policy (allowlist or denylist) or register runsc without --network=none"
            )));
        }
        Ok(())
    }
}

/// The engine's name for the runtime `want` among the `runtimes` an engine lists (`None`: its default), or
/// [`iterion_driver::Error::RuntimeUnavailable`] with how to register it. Podman lists the runtimes of its
/// configuration, installed or not, so a missing program shows at the create. The doctor asks the same.
pub fn engine_runtime(
    podman: bool,
    runtimes: &[String],
    want: &OciRuntime,
) -> Result<Option<String>, iterion_driver::Error> {
    if want.is_default() {
        return Ok(None);
    }
    if let Some(found) = runtime_candidates(want)
        .iter()
        .find(|c| runtimes.iter().any(|r| r == *c))
    {
        return Ok(Some((*found).to_owned()));
    }
    let hint = match want {
        OciRuntime::Gvisor => REGISTER_RUNSC_HINT.to_owned(),
        OciRuntime::Kata => "install Kata Containers and register its runtime with the engine".to_owned(),
        _ => format!("register a runtime named '{want}' with the engine, or choose one it offers"),
    };
    Err(iterion_driver::Error::RuntimeUnavailable {
        driver: if podman {
            iterion_driver::DriverKind::Podman
        } else {
            iterion_driver::DriverKind::Docker
        },
        runtime: want.to_string(),
        offered: if runtimes.is_empty() {
            "none listed".to_owned()
        } else {
            runtimes.join(", ")
        },
        hint,
    })
}

/// Identity flags derived from the handshake answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Identity {
    /// Podman.
    pub podman: bool,
    /// Rootless.
    pub rootless: bool,
    /// Docker Desktop.
    pub desktop: bool,
    /// BuildKit advertised.
    pub buildkit: bool,
    /// SELinux enabled.
    pub selinux: bool,
}

/// Derives the identity of 03 §4.3 from the `_ping` headers, `/version` component names, `/info`
/// security options and operating system.
pub fn identify(
    ping_headers: &[(String, String)],
    component_names: &[String],
    security_options: &[String],
    operating_system: &str,
) -> Identity {
    let header = |n: &str| {
        ping_headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    };
    let podman = header("Libpod-API-Version").is_some()
        || component_names
            .iter()
            .any(|c| c.to_ascii_lowercase().contains("podman"));
    let rootless = security_options.iter().any(|o| {
        o.split(',')
            .any(|kv| kv.trim().eq_ignore_ascii_case("name=rootless"))
    });
    let selinux = security_options.iter().any(|o| {
        o.split(',')
            .any(|kv| kv.trim().eq_ignore_ascii_case("name=selinux"))
    });
    Identity {
        podman,
        rootless,
        desktop: operating_system.contains("Docker Desktop"),
        buildkit: header("Builder-Version").map(str::trim) == Some("2"),
        selinux,
    }
}

/// Parses `major.minor`.
pub fn parse_api(v: &str) -> Option<(usize, usize)> {
    let (a, b) = v.trim().split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The API version to use: the lower of ours and the server's; `Err` when the server is older than 1.41.
pub fn negotiate(server: &str) -> std::result::Result<(usize, usize), String> {
    let s = parse_api(server).ok_or_else(|| format!("engine API version '{server}' is not major.minor"))?;
    if s < MIN_API {
        return Err(format!("engine API {server} is older than 1.41"));
    }
    Ok(s.min(MAX_API))
}

fn driver_of(family: Family) -> &'static str {
    match family {
        Family::Docker => "docker",
        Family::Podman => "podman",
    }
}

/// Pings `socket` (`GET /_ping`) within `timeout`; returns the response headers. Failure reasons are the
/// distinct sentences of 03 §4.2.
pub async fn ping(socket: &Path, timeout: Duration) -> std::result::Result<Vec<(String, String)>, String> {
    match engine_http::get(socket, "/_ping", timeout).await {
        Ok(r) if r.status == 200 => Ok(r.headers),
        Ok(r) => Err(format!(
            "engine at {} answered '{}' to _ping",
            socket.display(),
            r.status_line
        )),
        Err(e @ EngineHttpError::PermissionDenied { .. }) => Err(format!(
            "{e} (add your user to the docker group or use rootless Podman)"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// A connected engine: the bollard client (API version negotiated) and the facts of the handshake.
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) docker: Docker,
    facts: EngineFacts,
}

impl Engine {
    /// The handshake facts.
    pub fn facts(&self) -> &EngineFacts {
        &self.facts
    }

    /// Connects to the engine at `socket`: ping (bounded by `ping_timeout`), `/version` with negotiation,
    /// `/info`. `family` names the driver in errors.
    pub async fn connect(socket: &Path, family: Family, ping_timeout: Duration) -> Result<Self> {
        let driver = driver_of(family);
        let unavailable = |reason: String| Error::Unavailable { driver, reason };
        let headers = ping(socket, ping_timeout).await.map_err(unavailable)?;
        let path = socket
            .to_str()
            .ok_or_else(|| unavailable(format!("socket path {} is not UTF-8", socket.display())))?;
        let client = |v: (usize, usize)| {
            Docker::connect_with_unix(
                path,
                REQUEST_TIMEOUT.as_secs(),
                &ClientVersion {
                    major_version: v.0,
                    minor_version: v.1,
                },
            )
            .map_err(|e| unavailable(format!("engine at {}: {e}", socket.display())))
        };
        // `/version` is not versioned in meaning; ask it at the minimum API. The ping's `Api-Version` header
        // names the server's API already, so `/info` (at the negotiated API) is asked at the same time; without
        // the header the two go one after the other.
        let probe = client(MIN_API)?;
        let pinged_api = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("api-version"))
            .and_then(|(_, v)| negotiate(v.trim()).ok());
        let (version, docker, info, api) = match pinged_api {
            Some(api) => {
                let docker = client(api)?;
                let (version, info) = tokio::join!(probe.version(), docker.info());
                let version = version.map_err(engine)?;
                let server_api = version.api_version.clone().unwrap_or_default();
                let agreed = negotiate(&server_api).map_err(unavailable)?;
                if agreed != api {
                    // The header and `/version` disagree: trust `/version`, as without a header.
                    let docker = client(agreed)?;
                    let info = docker.info().await.map_err(engine)?;
                    (version, docker, info, agreed)
                } else {
                    (version, docker, info.map_err(engine)?, api)
                }
            }
            None => {
                let version = probe.version().await.map_err(engine)?;
                let server_api = version.api_version.clone().unwrap_or_default();
                let api = negotiate(&server_api).map_err(unavailable)?;
                let docker = client(api)?;
                let info = docker.info().await.map_err(engine)?;
                (version, docker, info, api)
            }
        };
        let components: Vec<String> = version
            .components
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name)
            .collect();
        let security_options = info.security_options.clone().unwrap_or_default();
        let operating_system = info.operating_system.clone().unwrap_or_default();
        let id = identify(&headers, &components, &security_options, &operating_system);
        let facts = EngineFacts {
            podman: id.podman,
            version: version.version.unwrap_or_default(),
            api_version: format!("{}.{}", api.0, api.1),
            os: info.os_type.clone().unwrap_or_else(|| "linux".into()),
            arch: info.architecture.clone().unwrap_or_default(),
            rootless: id.rootless,
            desktop: id.desktop,
            endpoint: socket.to_path_buf(),
            buildkit: id.buildkit,
            init_binary: info.init_binary.clone().filter(|s| !s.is_empty()),
            cgroup_version: info.cgroup_version.map(|v| v.to_string()),
            security_options,
            selinux: id.selinux,
            runtime_args: info
                .runtimes
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.runtime_args.unwrap_or_default()))
                .collect(),
            runtimes: {
                let mut r: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
                r.sort();
                r
            },
            default_runtime: info.default_runtime.filter(|s| !s.is_empty()),
        };
        Ok(Self { docker, facts })
    }

    /// Tries the candidates of 03 §4.1 of `family` in order and connects to the first that answers.
    /// The error lists why each candidate failed.
    pub async fn discover(
        settings: &EndpointSettings,
        family: Family,
        ping_timeout: Duration,
    ) -> Result<Self> {
        let mut reasons = Vec::new();
        for c in candidates(settings) {
            match c {
                Candidate::Refused { family: f, reason } if f == family => reasons.push(reason),
                Candidate::Unix { family: f, path } if f == family => {
                    match Self::connect(&path, family, ping_timeout).await {
                        Ok(e) => return Ok(e),
                        Err(Error::Unavailable { reason, .. }) => reasons.push(reason),
                        Err(e) => reasons.push(e.to_string()),
                    }
                }
                _ => {}
            }
        }
        Err(Error::Unavailable {
            driver: driver_of(family),
            reason: if reasons.is_empty() {
                "no endpoint to try".into()
            } else {
                reasons.join("; ")
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(podman: bool, runtimes: &[&str]) -> EngineFacts {
        EngineFacts {
            podman,
            version: "27.0".into(),
            api_version: "1.46".into(),
            os: "linux".into(),
            arch: "x86_64".into(),
            rootless: false,
            desktop: false,
            endpoint: PathBuf::from("/run/docker.sock"),
            buildkit: true,
            init_binary: None,
            cgroup_version: None,
            security_options: Vec::new(),
            selinux: false,
            runtimes: runtimes.iter().map(|s| s.to_string()).collect(),
            default_runtime: Some("runc".into()),
            runtime_args: Default::default(),
        }
    }

    /// `expect`: the engine name, `default`, or the error text.
    fn check_runtime(runtimes: &[&str], want: &str, expect: &str) {
        let want = OciRuntime::parse(want).unwrap();
        let got = match facts(false, runtimes).oci_runtime(&want) {
            Ok(Some(n)) => n,
            Ok(None) => "default".into(),
            Err(e) => e.to_string(),
        };
        assert!(got.starts_with(expect), "{want}: {got}");
    }

    #[test]
    fn a_gvisor_registration_that_cannot_carry_the_egress_is_refused() {
        let check = |args: &[&str], needs_proxy: bool| {
            let mut f = facts(false, &["runc", "runsc"]);
            f.runtime_args
                .insert("runsc".into(), args.iter().map(|s| s.to_string()).collect());
            f.check_runtime_egress("runsc", needs_proxy)
                .map_err(|e| e.to_string())
        };
        assert!(check(&["--host-uds=open"], true).is_ok());
        assert!(check(&["--host-uds=all", "--network=none"], true).is_ok());
        assert!(check(&["--fsgofer-host-uds"], true).is_ok());
        let e = check(&[], true).unwrap_err();
        assert!(e.contains("registered without --host-uds=open"), "{e}");
        assert!(check(&["--host-uds=create"], true).is_err());
        assert!(check(&["--host-uds=open"], false).is_ok());
        let e = check(&["--network=none"], false).unwrap_err();
        assert!(e.contains("registered with --network=none"), "{e}");
        // runc, and a runtime the engine lists no arguments for, are not looked at
        assert!(facts(false, &["runc"]).check_runtime_egress("runc", true).is_ok());
        assert!(
            facts(false, &["runsc"])
                .check_runtime_egress("runsc", true)
                .is_ok()
        );
    }

    #[test]
    fn runtimes_map_onto_the_engine_names() {
        check_runtime(&["runc"], "default", "default");
        check_runtime(&["runc", "runsc"], "gvisor", "runsc");
        check_runtime(&["gvisor", "runc"], "gvisor", "gvisor");
        check_runtime(&["gvisor", "runsc"], "gvisor", "runsc");
        check_runtime(&["kata-runtime", "runc"], "kata", "kata-runtime");
        check_runtime(&["crun", "runc"], "crun", "crun");
        check_runtime(
            &["io.containerd.runc.v2", "runc"],
            "gvisor",
            "the docker engine has no OCI runtime for 'gvisor' (it offers: io.containerd.runc.v2, runc); install gVisor (apt-get install runsc) and register it",
        );
        check_runtime(
            &[],
            "youki",
            "the docker engine has no OCI runtime for 'youki' (it offers: none listed); register a runtime named 'youki'",
        );
        let e = facts(true, &["crun"]).oci_runtime(&OciRuntime::Kata).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the podman engine has no OCI runtime for 'kata'"),
            "{e}"
        );
        assert_eq!(
            e.failure_code(true).map(|c| c.as_str()),
            Some("SANDBOX_DRIVER_UNAVAILABLE")
        );
    }

    fn check(headers: &[(&str, &str)], components: &[&str], secopts: &[&str], os: &str, expect: &str) {
        let h: Vec<(String, String)> = headers
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let c: Vec<String> = components.iter().map(|s| s.to_string()).collect();
        let s: Vec<String> = secopts.iter().map(|s| s.to_string()).collect();
        let id = identify(&h, &c, &s, os);
        let mut got = Vec::new();
        for (on, name) in [
            (id.podman, "podman"),
            (id.rootless, "rootless"),
            (id.desktop, "desktop"),
            (id.buildkit, "buildkit"),
            (id.selinux, "selinux"),
        ] {
            if on {
                got.push(name);
            }
        }
        assert_eq!(got.join(","), expect);
    }

    #[test]
    fn identity_4_3() {
        check(
            &[("Api-Version", "1.41")],
            &["Engine"],
            &["name=seccomp,profile=default"],
            "Debian GNU/Linux 12",
            "",
        );
        check(&[("Libpod-API-Version", "4.3.1")], &[], &[], "fedora", "podman");
        check(
            &[],
            &["Podman Engine"],
            &["name=rootless"],
            "fedora",
            "podman,rootless",
        );
        check(
            &[("Builder-Version", "2")],
            &["Engine"],
            &["name=seccomp", "name=rootless"],
            "Ubuntu",
            "rootless,buildkit",
        );
        check(&[], &["Engine"], &[], "Docker Desktop", "desktop");
        check(&[], &[], &["name=selinux"], "rhel", "selinux");
    }

    fn check_negotiate(server: &str, expect: std::result::Result<(usize, usize), &str>) {
        assert_eq!(negotiate(server), expect.map_err(str::to_string));
    }

    #[test]
    fn api_negotiation_4_2() {
        check_negotiate("1.41", Ok((1, 41)));
        check_negotiate("1.43", Ok((1, 43)));
        check_negotiate("1.51", Ok(MAX_API));
        check_negotiate("1.40", Err("engine API 1.40 is older than 1.41"));
        check_negotiate("x", Err("engine API version 'x' is not major.minor"));
    }

    #[tokio::test]
    async fn ping_failure_reasons_are_distinct() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("none.sock");
        let e = ping(&missing, Duration::from_secs(1)).await.expect_err("missing");
        assert_eq!(e, format!("no engine socket at {}", missing.display()));

        // A socket file nobody listens on: connection refused.
        let stale = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
        let e = ping(&stale, Duration::from_secs(1)).await.expect_err("refused");
        assert_eq!(e, format!("engine at {} refused the connection", stale.display()));

        // A listener that accepts and never answers: timeout.
        let silent = dir.path().join("silent.sock");
        let l = tokio::net::UnixListener::bind(&silent).expect("bind");
        let hold = tokio::spawn(async move {
            let (s, _) = l.accept().await.expect("accept");
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(s);
        });
        let e = ping(&silent, Duration::from_millis(200))
            .await
            .expect_err("timeout");
        assert_eq!(
            e,
            format!("engine at {} did not answer within 200ms", silent.display())
        );
        hold.abort();
    }
}
