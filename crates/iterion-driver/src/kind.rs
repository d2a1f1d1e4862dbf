//! Which driver implementation: the one type the error and every other module name.

use std::fmt;

/// Which driver implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    /// Docker Engine.
    Docker,
    /// Podman service (Docker-compatible API).
    Podman,
    /// Sibling pods on Kubernetes.
    Kubernetes,
    /// Host execution, no isolation.
    Noop,
}

impl DriverKind {
    /// `docker`, `podman`, `kubernetes`, `noop`.
    pub fn as_str(self) -> &'static str {
        match self {
            DriverKind::Docker => "docker",
            DriverKind::Podman => "podman",
            DriverKind::Kubernetes => "kubernetes",
            DriverKind::Noop => "noop",
        }
    }

    /// Parses a driver name (as given to `--sandbox-driver`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "docker" => DriverKind::Docker,
            "podman" => DriverKind::Podman,
            "kubernetes" => DriverKind::Kubernetes,
            "noop" => DriverKind::Noop,
            _ => return None,
        })
    }
}

impl fmt::Display for DriverKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
