//! Failures of setup steps: driver errors, timeouts, resolution errors and policies that do not compile.

use iterion_driver::{Error as DError, SetupPhase};
use iterion_netpolicy::Policy;
use iterion_spec::resolve::ResolveError;
use iterion_spec::resolved::NetworkPolicySpec;

use super::convert::mode_of;
use crate::failure::{FailureCode, FailurePhase};
use crate::lifecycle::config::Config;
use crate::lifecycle::step_failure::Failure;

/// Reason of `sandbox_skipped` when no container runtime is usable.
pub(crate) const NO_RUNTIME: &str =
    "no container runtime available (docker or podman not found or not reachable)";
/// Reason of `sandbox_skipped` when the operator forced `noop`.
pub(crate) const OPERATOR_NOOP: &str =
    "operator opted into the noop driver; the run is NOT actually sandboxed";
/// Error of an inline scope without a driver.
pub(crate) const INLINE_NEEDS_CONTAINER: &str = "this workflow pins a container (sandbox inline); install Docker or Podman, or run with --sandbox none to execute on the host";

pub(super) fn code_of(e: &DError, during_setup: bool) -> FailureCode {
    e.failure_code(during_setup)
        .and_then(|c| FailureCode::parse(c.as_str()))
        .unwrap_or(FailureCode::SandboxStartFailed)
}

pub(super) fn phase_of(p: SetupPhase) -> FailurePhase {
    match p {
        SetupPhase::Pull => FailurePhase::Pull,
        SetupPhase::Build => FailurePhase::Build,
        SetupPhase::Start => FailurePhase::Start,
        SetupPhase::PostCreate => FailurePhase::PostCreate,
        SetupPhase::PodReady => FailurePhase::PodReady,
        SetupPhase::WorkspaceCopy => FailurePhase::WorkspaceCopy,
        _ => FailurePhase::Probe,
    }
}

pub(super) fn timeout_text(cfg: &Config, phase: FailurePhase) -> String {
    let s = &cfg.settings;
    match phase {
        FailurePhase::Pull => s.pull_timeout.text.clone(),
        FailurePhase::Build => s.build_timeout.text.clone(),
        FailurePhase::PostCreate => s.post_create_timeout.text.clone(),
        FailurePhase::Probe => s.probe_timeout.text.clone(),
        FailurePhase::PodReady => s.pod_ready_timeout.text.clone(),
        FailurePhase::WorkspaceCopy => s.workspace_copy_timeout.text.clone(),
        _ => s.start_timeout.text.clone(),
    }
}

/// A setup-phase bound expired (05 §7.1).
pub(super) fn timeout_failure(cfg: &Config, phase: FailurePhase, what: &str) -> Failure {
    let text = timeout_text(cfg, phase);
    Failure::new(
        FailureCode::SandboxSetupTimeout,
        format!("{what} did not finish within {text}"),
    )
    .phase(phase)
    .with(|e| e.timeout(text))
}

pub(super) fn driver_failure(cfg: &Config, e: &DError, phase: FailurePhase) -> Failure {
    if let DError::SetupTimeout { phase: p, .. } = e {
        let ph = phase_of(*p);
        let mut f = timeout_failure(cfg, ph, p.as_str());
        f.event.error = e.to_string();
        return f;
    }
    let mut f = Failure::new(code_of(e, true), e.to_string()).phase(phase);
    match e {
        DError::StartFailed { hint, .. } => f = f.hint(hint.clone()),
        DError::NetworkUnavailable { hint, .. } => f = f.hint(Some(hint.clone())),
        DError::ImagePull { image, .. } => f = f.hint(Some(iterion_driver::image_pull_hint(image))),
        DError::InvalidSpec { field, .. } => f = f.with(|e| e.detail(field.clone())),
        DError::Unavailable { .. } => f = f.hint(Some(INLINE_NEEDS_CONTAINER.to_owned())),
        _ => {}
    }
    f
}

pub(crate) fn resolve_failure(e: &ResolveError) -> Failure {
    match e {
        ResolveError::Unsandboxable { .. } => {
            Failure::new(FailureCode::SandboxDriverUnavailable, e.to_string()).phase(FailurePhase::Resolve)
        }
        _ => Failure::new(FailureCode::SandboxSpecInvalid, e.to_string()).phase(FailurePhase::Resolve),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Setup

pub(crate) fn compile_policy(p: &NetworkPolicySpec) -> Result<Policy, Failure> {
    let presets: Vec<&str> = p.preset.iter().map(|x| x.as_str()).collect();
    let rules: Vec<&str> = p.rules.iter().map(String::as_str).collect();
    Policy::compile(mode_of(p.mode), &presets, &rules).map_err(|errs| {
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        Failure::new(
            FailureCode::SandboxPolicyInvalid,
            format!(
                "the network policy of {} does not compile: {}",
                p.source,
                text.join("; ")
            ),
        )
        .phase(FailurePhase::Network)
    })
}
