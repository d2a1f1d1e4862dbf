//! Endpoint discovery (03 §4.1): which local engine sockets to try, in order.
//!
//! Pure: the values of `DOCKER_HOST`, `CONTAINER_HOST`, `XDG_RUNTIME_DIR` and `HOME` are passed in by the
//! caller (the CLI reads the environment once).

use std::path::PathBuf;

/// The environment values endpoint discovery needs, read once by the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointSettings {
    /// `DOCKER_HOST`, when set and non-empty.
    pub docker_host: Option<String>,
    /// `CONTAINER_HOST`, when set and non-empty.
    pub container_host: Option<String>,
    /// `XDG_RUNTIME_DIR`, when set and non-empty.
    pub xdg_runtime_dir: Option<PathBuf>,
    /// `HOME`, when set and non-empty.
    pub home: Option<PathBuf>,
}

impl EndpointSettings {
    /// Settings from the four values (empty strings count as unset).
    pub fn new(
        docker_host: Option<String>,
        container_host: Option<String>,
        xdg_runtime_dir: Option<PathBuf>,
        home: Option<PathBuf>,
    ) -> Self {
        let s = |v: Option<String>| v.filter(|v| !v.is_empty());
        let p = |v: Option<PathBuf>| v.filter(|v| !v.as_os_str().is_empty());
        Self {
            docker_host: s(docker_host),
            container_host: s(container_host),
            xdg_runtime_dir: p(xdg_runtime_dir),
            home: p(home),
        }
    }
}

/// Which candidate list an endpoint comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Docker candidates (`DOCKER_HOST`, the system socket, rootless, Desktop).
    Docker,
    /// Podman candidates (`CONTAINER_HOST`, rootless, rootful).
    Podman,
}

/// One place to look for an engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// A local Unix socket.
    Unix {
        /// Candidate list.
        family: Family,
        /// Socket path.
        path: PathBuf,
    },
    /// A configured endpoint that cannot be used: the reason says why.
    Refused {
        /// Candidate list.
        family: Family,
        /// Why (for example a remote `tcp://` engine).
        reason: String,
    },
}

fn from_host_var(family: Family, var: &str, value: &str) -> Candidate {
    if let Some(path) = value.strip_prefix("unix://") {
        return Candidate::Unix {
            family,
            path: PathBuf::from(path),
        };
    }
    let scheme = value.split_once("://").map_or(value, |(s, _)| s);
    Candidate::Refused {
        family,
        reason: format!(
            "remote engines are not supported ({var}={scheme}://…): the workspace bind needs a local engine"
        ),
    }
}

/// The candidates of 03 §4.1 in order. When `DOCKER_HOST` (or `CONTAINER_HOST`) is set it replaces nothing:
/// it is tried first in its list, and a non-`unix://` value yields a [`Candidate::Refused`] entry.
pub fn candidates(s: &EndpointSettings) -> Vec<Candidate> {
    let mut out = Vec::new();
    let unix = |family, path: PathBuf| Candidate::Unix { family, path };
    match &s.docker_host {
        Some(h) => out.push(from_host_var(Family::Docker, "DOCKER_HOST", h)),
        None => {
            out.push(unix(Family::Docker, "/var/run/docker.sock".into()));
            if let Some(x) = &s.xdg_runtime_dir {
                out.push(unix(Family::Docker, x.join("docker.sock")));
            }
            if let Some(h) = &s.home {
                out.push(unix(Family::Docker, h.join(".docker/run/docker.sock")));
            }
        }
    }
    match &s.container_host {
        Some(h) => out.push(from_host_var(Family::Podman, "CONTAINER_HOST", h)),
        None => {
            if let Some(x) = &s.xdg_runtime_dir {
                out.push(unix(Family::Podman, x.join("podman/podman.sock")));
            }
            out.push(unix(Family::Podman, "/run/podman/podman.sock".into()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(c: &Candidate) -> String {
        match c {
            Candidate::Unix { family, path } => format!("{family:?} {}", path.display()),
            Candidate::Refused { family, reason } => format!("{family:?} refused: {reason}"),
        }
    }

    fn check(docker_host: Option<&str>, container_host: Option<&str>, expect: &[&str]) {
        let s = EndpointSettings::new(
            docker_host.map(String::from),
            container_host.map(String::from),
            Some("/run/user/1000".into()),
            Some("/home/jo".into()),
        );
        let got: Vec<String> = candidates(&s).iter().map(show).collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn candidate_lists_4_1() {
        check(
            None,
            None,
            &[
                "Docker /var/run/docker.sock",
                "Docker /run/user/1000/docker.sock",
                "Docker /home/jo/.docker/run/docker.sock",
                "Podman /run/user/1000/podman/podman.sock",
                "Podman /run/podman/podman.sock",
            ],
        );
        check(
            Some("unix:///tmp/d.sock"),
            Some(""),
            &[
                "Docker /tmp/d.sock",
                "Podman /run/user/1000/podman/podman.sock",
                "Podman /run/podman/podman.sock",
            ],
        );
        check(
            Some("tcp://h:2376"),
            Some("ssh://me@h"),
            &[
                "Docker refused: remote engines are not supported (DOCKER_HOST=tcp://…): the workspace bind needs a local engine",
                "Podman refused: remote engines are not supported (CONTAINER_HOST=ssh://…): the workspace bind needs a local engine",
            ],
        );
    }
}
