//! The claw runner in a container (05 §4.6 "iterion binary for claw", §4.12): which binary is bound, the
//! `sandbox_claw_routed_via_runner` event, and the `--version` probe that fails the run with
//! `SANDBOX_RUNNER_UNAVAILABLE` before `run_started` when the runner cannot start there.
use iterion_driver::{AuxMount, AuxMountKind, ExecRequest, OutputLimits, Run, StartRequest};

use super::starter::Starter;
use crate::events::{RunnerBinary, SandboxClawRoutedViaRunner};
use crate::exec::claw::{CONTAINER_RUNNER_EXEC_PATH, CONTAINER_RUNNER_PATH};
use crate::failure::{FailureCode, FailurePhase};
use crate::lifecycle::step_failure::Failure;

/// The program name looked up on the image's PATH when no runner is bound.
const IMAGE_RUNNER: &str = "iterion";

const HINT: &str = "use an image that contains iterion, set ITERION_BIN to a Linux build of iterion for the image's architecture, or mount one";

impl Starter {
    /// The claw nodes that run in the container being started (`node_id`: a node container).
    pub(super) fn claw_nodes_in(&self, node_id: Option<&str>) -> Vec<String> {
        match node_id {
            Some(id) if self.claw_nodes.contains(id) => vec![id.to_owned()],
            Some(_) => Vec::new(),
            None => self.claw_run_nodes.clone(),
        }
    }

    /// Binds the configured runner read-only at [`CONTAINER_RUNNER_PATH`] and [`CONTAINER_RUNNER_EXEC_PATH`]
    /// when the driver can bind host files, emits `sandbox_claw_routed_via_runner`, and returns the program
    /// claw nodes run there (the second path, which the sandbox cannot move aside). A bound file that
    /// is not an ELF program for the engine's architecture is `SANDBOX_RUNNER_UNAVAILABLE` before the start.
    pub(super) async fn bind_runner(
        &self,
        req: &mut StartRequest,
        nodes: Vec<String>,
    ) -> Result<String, Failure> {
        let bound = self
            .cfg
            .claw_runner
            .container_binary
            .clone()
            .filter(|_| self.driver.capabilities().host_binds);
        let (binary, host_path, program) = match bound {
            Some(path) => {
                for container_path in [CONTAINER_RUNNER_PATH, CONTAINER_RUNNER_EXEC_PATH] {
                    req.aux_mounts.push(AuxMount {
                        kind: AuxMountKind::IterionBinary,
                        host_path: path.clone(),
                        container_path: container_path.into(),
                        read_only: true,
                    });
                }
                let shown = path.to_string_lossy().into_owned();
                (RunnerBinary::Mounted, Some(shown), CONTAINER_RUNNER_EXEC_PATH)
            }
            None => (RunnerBinary::Image, None, IMAGE_RUNNER),
        };
        self.em.emit(SandboxClawRoutedViaRunner {
            reason: "claw nodes run via iterion __claw-runner inside the container".into(),
            nodes,
            binary,
            host_path,
        });
        if let Some(path) = self
            .cfg
            .claw_runner
            .container_binary
            .as_deref()
            .filter(|_| binary == RunnerBinary::Mounted)
        {
            self.check_runner_arch(path).await?;
        }
        Ok(program.to_owned())
    }

    /// The bound runner must be an ELF program for the engine's architecture (the host's when the engine does
    /// not say).
    async fn check_runner_arch(&self, path: &std::path::Path) -> Result<(), Failure> {
        let arch = match self.driver.engine_info().await {
            Ok(info) if !info.arch.is_empty() => info.arch,
            _ => std::env::consts::ARCH.to_owned(),
        };
        crate::exec::elf_arch::check_runner_arch(path, &arch).map_err(|why| {
            Failure::new(
                FailureCode::SandboxRunnerUnavailable,
                format!("the claw runner cannot run in the container: {why}"),
            )
            .phase(FailurePhase::Start)
            .hint(Some(HINT.into()))
        })
    }

    /// 4.12: `<program> --version` must succeed inside the container within the probe bound; otherwise
    /// `SANDBOX_RUNNER_UNAVAILABLE` (phase `probe`) with a remediation hint.
    pub(super) async fn probe_runner(&self, run: &dyn Run, program: &str) -> Result<(), Failure> {
        let bound = self.cfg.settings.probe_timeout.duration;
        let req = ExecRequest::new([program, "--version"]).label("probe");
        let limits = OutputLimits {
            max_stdout: 64 * 1024,
            max_stderr: 64 * 1024,
        };
        let why = match tokio::time::timeout(bound, iterion_driver::exec_collect(run, req, limits)).await {
            Err(_) => format!("'{program} --version' did not finish within {bound:?}"),
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(c)) if c.status.success() => return Ok(()),
            Ok(Ok(c)) => format!(
                "'{program} --version' exited with status {}: {}",
                c.status.code,
                String::from_utf8_lossy(&c.stderr).trim()
            ),
        };
        Err(Failure::new(
            FailureCode::SandboxRunnerUnavailable,
            format!("the claw runner cannot start in the container: {why}"),
        )
        .phase(FailurePhase::Probe)
        .hint(Some(HINT.into())))
    }
}
