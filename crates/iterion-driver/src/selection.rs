//! Driver selection (03 §2): host kind, preference order, forcing, and what an active scope does when only
//! `noop` is left. Pure: the CLI probes the engines and passes the answers in.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::types::DriverKind;

/// Where iterion runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostKind {
    /// In a cluster.
    Cloud,
    /// A developer machine or CI host.
    Local,
    /// The desktop application.
    Desktop,
}

/// A driver forced by `--sandbox-driver` or `ITERION_SANDBOX_DRIVER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forced {
    /// The driver.
    pub driver: DriverKind,
    /// `--sandbox-driver` or `ITERION_SANDBOX_DRIVER` (named in errors).
    pub source: String,
}

/// What selection looks at (an environment snapshot and probe answers).
#[derive(Debug, Clone, Default)]
pub struct SelectionInput {
    /// `ITERION_MODE`.
    pub iterion_mode: Option<String>,
    /// `KUBERNETES_SERVICE_HOST`.
    pub kubernetes_service_host: Option<String>,
    /// `ITERION_DESKTOP`.
    pub iterion_desktop: Option<String>,
    /// `argv[0]`.
    pub argv0: String,
    /// A forced driver.
    pub forced: Option<Forced>,
    /// Probe answers per candidate: `Ok(reported driver)` (a Podman service on the Docker socket reports
    /// `Podman`) or `Err(reason)`. A candidate that was not probed counts as unavailable.
    pub probes: BTreeMap<DriverKind, std::result::Result<DriverKind, String>>,
}

/// The selected driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Host kind.
    pub host_kind: HostKind,
    /// The driver to use (as reported by the engine identity).
    pub driver: DriverKind,
    /// Whether it was forced.
    pub forced: bool,
    /// Warnings to log.
    pub warnings: Vec<String>,
    /// Candidates tried before the selected one, with why they were unavailable.
    pub unavailable: Vec<(DriverKind, String)>,
}

/// The host kind (§2.1) and warnings.
pub fn host_kind(input: &SelectionInput) -> (HostKind, Vec<String>) {
    let mut warnings = Vec::new();
    if let Some(m) = &input.iterion_mode {
        let v = m.trim().to_ascii_lowercase();
        match v.as_str() {
            "cloud" => return (HostKind::Cloud, warnings),
            "local" => return (HostKind::Local, warnings),
            "" => {}
            _ => warnings.push(format!(
                "ITERION_MODE '{}' is not cloud or local; ignored",
                m.trim()
            )),
        }
    }
    if input
        .kubernetes_service_host
        .as_deref()
        .is_some_and(|v| !v.is_empty())
    {
        return (HostKind::Cloud, warnings);
    }
    let argv0_name = std::path::Path::new(&input.argv0)
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if input.iterion_desktop.as_deref().is_some_and(|v| !v.is_empty())
        || argv0_name.contains("iterion-desktop")
    {
        return (HostKind::Desktop, warnings);
    }
    (HostKind::Local, warnings)
}

/// Candidates in preference order (§2.2).
pub fn candidates(kind: HostKind) -> &'static [DriverKind] {
    match kind {
        HostKind::Cloud => &[DriverKind::Kubernetes, DriverKind::Noop],
        HostKind::Local | HostKind::Desktop => &[DriverKind::Docker, DriverKind::Podman, DriverKind::Noop],
    }
}

fn probe(input: &SelectionInput, k: DriverKind) -> std::result::Result<DriverKind, String> {
    if k == DriverKind::Noop {
        return Ok(DriverKind::Noop);
    }
    input
        .probes
        .get(&k)
        .cloned()
        .unwrap_or_else(|| Err("not probed".into()))
}

/// Selects the driver (§2.2). A forced driver that is unavailable is `Unavailable` naming the source.
pub fn select(input: &SelectionInput) -> Result<Selection> {
    let (host_kind, warnings) = host_kind(input);
    if let Some(f) = &input.forced {
        return match probe(input, f.driver) {
            Ok(reported) => Ok(Selection {
                host_kind,
                driver: reported,
                forced: true,
                warnings,
                unavailable: Vec::new(),
            }),
            Err(reason) => Err(Error::Unavailable {
                driver: f.driver.to_string(),
                reason: format!("forced by {}: {reason}", f.source),
            }),
        };
    }
    let mut unavailable = Vec::new();
    for &k in candidates(host_kind) {
        match probe(input, k) {
            Ok(reported) => {
                return Ok(Selection {
                    host_kind,
                    driver: reported,
                    forced: false,
                    warnings,
                    unavailable,
                });
            }
            Err(reason) => unavailable.push((k, reason)),
        }
    }
    // noop is always available, so the loop returned
    Err(Error::Unavailable {
        driver: "noop".into(),
        reason: "no candidate driver".into(),
    })
}

/// The message of an inline scope that cannot run on the host.
pub const INLINE_NEEDS_CONTAINER: &str = "this workflow pins a container (sandbox inline); install Docker or Podman, or run with --sandbox none to execute on the host";
/// The `sandbox_skipped` reason when the operator forces `noop`.
pub const OPERATOR_NOOP_REASON: &str =
    "operator opted into the noop driver; the run is NOT actually sandboxed";

/// What an active scope does when the selected driver is `noop` (§2.3): `Ok(reason)` runs on the host with a
/// `sandbox_skipped` reason, `Err(Unavailable)` fails with `SANDBOX_DRIVER_UNAVAILABLE`.
pub fn noop_scope(may_degrade: bool, inline_floor: bool, forced_noop: bool) -> Result<String> {
    match (forced_noop, inline_floor, may_degrade) {
        (true, true, _) => Err(Error::Unavailable {
            driver: "noop".into(),
            reason: "the inline floor forbids running on the host".into(),
        }),
        (true, false, _) => Ok(OPERATOR_NOOP_REASON.into()),
        (false, _, true) if !inline_floor => {
            Ok("no container driver is available; running on the host".into())
        }
        _ => Err(Error::Unavailable {
            driver: "noop".into(),
            reason: INLINE_NEEDS_CONTAINER.into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row of §16.7: mode, KUBERNETES_SERVICE_HOST with or without service-account files, desktop,
    /// answering engines, forced driver.
    #[derive(Default)]
    struct Row {
        mode: Option<&'static str>,
        k8s: Option<bool>,
        desktop: Option<&'static str>,
        docker: Option<DriverKind>,
        podman: bool,
        docker_reason: Option<&'static str>,
        forced: Option<DriverKind>,
    }

    fn check(r: Row, expect: &str) {
        let mut input = SelectionInput {
            iterion_mode: r.mode.map(str::to_string),
            kubernetes_service_host: r.k8s.map(|_| "10.0.0.1".to_string()),
            argv0: r.desktop.unwrap_or("/usr/bin/iterion").to_string(),
            forced: r.forced.map(|d| Forced {
                driver: d,
                source: "--sandbox-driver".into(),
            }),
            ..Default::default()
        };
        input.probes.insert(
            DriverKind::Docker,
            r.docker
                .ok_or_else(|| r.docker_reason.unwrap_or("no engine answers").to_string()),
        );
        input.probes.insert(
            DriverKind::Podman,
            if r.podman {
                Ok(DriverKind::Podman)
            } else {
                Err("no engine answers".into())
            },
        );
        input.probes.insert(
            DriverKind::Kubernetes,
            match r.k8s {
                Some(true) => Ok(DriverKind::Kubernetes),
                _ => Err("no service-account files".into()),
            },
        );
        let got = match select(&input) {
            Ok(s) => {
                let why: Vec<String> = s.unavailable.iter().map(|(k, r)| format!("{k}: {r}")).collect();
                format!("{:?} {} [{}]", s.host_kind, s.driver, why.join("; "))
            }
            Err(e) => format!(
                "error {}: {e}",
                e.failure_code(true).map(|c| c.as_str()).unwrap_or("-")
            ),
        };
        assert_eq!(got, expect);
    }

    use DriverKind::{Docker, Podman};

    #[test]
    fn vectors_16_7() {
        check(
            Row {
                docker: Some(Docker),
                ..Row::default()
            },
            "Local docker []",
        );
        check(
            Row {
                podman: true,
                ..Row::default()
            },
            "Local podman [docker: no engine answers]",
        );
        check(
            Row {
                docker: Some(Podman),
                ..Row::default()
            },
            "Local podman []",
        );
        check(
            Row::default(),
            "Local noop [docker: no engine answers; podman: no engine answers]",
        );
        check(
            Row {
                mode: Some("cloud"),
                docker: Some(Docker),
                ..Row::default()
            },
            "Cloud noop [kubernetes: no service-account files]",
        );
        check(
            Row {
                mode: Some("cloud"),
                k8s: Some(true),
                ..Row::default()
            },
            "Cloud kubernetes []",
        );
        check(
            Row {
                k8s: Some(true),
                ..Row::default()
            },
            "Cloud kubernetes []",
        );
        check(
            Row {
                k8s: Some(false),
                docker: Some(Docker),
                ..Row::default()
            },
            "Cloud noop [kubernetes: no service-account files]",
        );
        check(
            Row {
                mode: Some("local"),
                k8s: Some(true),
                docker: Some(Docker),
                ..Row::default()
            },
            "Local docker []",
        );
        check(
            Row {
                desktop: Some("/opt/Iterion-Desktop/iterion-desktop"),
                docker: Some(Docker),
                ..Row::default()
            },
            "Desktop docker []",
        );
        check(
            Row {
                docker: Some(Docker),
                forced: Some(DriverKind::Noop),
                ..Row::default()
            },
            "Local noop []",
        );
        check(
            Row {
                forced: Some(Docker),
                ..Row::default()
            },
            "error SANDBOX_DRIVER_UNAVAILABLE: the docker sandbox driver is unavailable: forced by --sandbox-driver: no engine answers",
        );
        check(
            Row {
                docker_reason: Some("DOCKER_HOST=tcp://h:2376: remote engines are unsupported"),
                ..Row::default()
            },
            "Local noop [docker: DOCKER_HOST=tcp://h:2376: remote engines are unsupported; podman: no engine answers]",
        );
    }

    #[test]
    fn unknown_mode_warns() {
        let input = SelectionInput {
            iterion_mode: Some(" Hybrid ".into()),
            ..Default::default()
        };
        assert_eq!(
            host_kind(&input),
            (
                HostKind::Local,
                vec!["ITERION_MODE 'Hybrid' is not cloud or local; ignored".to_string()]
            )
        );
    }

    #[test]
    fn scopes_with_only_noop() {
        assert!(noop_scope(true, false, false).is_ok());
        assert_eq!(
            noop_scope(false, false, false).unwrap_err().to_string(),
            format!("the noop sandbox driver is unavailable: {INLINE_NEEDS_CONTAINER}")
        );
        assert!(noop_scope(true, true, false).is_err());
        assert_eq!(noop_scope(true, false, true).unwrap(), OPERATOR_NOOP_REASON);
        assert_eq!(
            noop_scope(true, true, true).unwrap_err().to_string(),
            "the noop sandbox driver is unavailable: the inline floor forbids running on the host"
        );
    }
}
