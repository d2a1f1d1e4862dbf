//! Failure codes (section 3 of the runtime specification), their classes, phases and retry policy.
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

use crate::status::RunStatus;

/// Whether retrying a failed run can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// Retrying cannot help: status `failed`, no automatic redelivery.
    Deterministic,
    /// The run may succeed later: status `failed_resumable`, checkpoint kept.
    Resumable,
    /// Not a run failure: a refused resume (`RESUME_INVALID`, the run record is not changed).
    Refusal,
    /// Status `cancelled` (`CANCELLED`).
    Cancellation,
}

macro_rules! failure_codes {
    ($( $(#[$doc:meta])* $variant:ident = $json:literal, $class:ident; )*) => {
        /// One failure code of section 3. Each failure has exactly one code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[non_exhaustive]
        pub enum FailureCode {
            $( $(#[$doc])* #[serde(rename = $json)] $variant, )*
        }

        impl FailureCode {
            /// Every code, in the order of the specification table.
            pub const ALL: &'static [FailureCode] = &[ $(FailureCode::$variant,)* ];

            /// The JSON spelling (`SANDBOX_SETUP_TIMEOUT`).
            pub fn as_str(self) -> &'static str {
                match self { $(FailureCode::$variant => $json,)* }
            }

            /// The class of the code.
            pub fn class(self) -> FailureClass {
                match self { $(FailureCode::$variant => FailureClass::$class,)* }
            }

            /// Parses the JSON spelling.
            pub fn parse(s: &str) -> Option<FailureCode> {
                match s { $($json => Some(FailureCode::$variant),)* _ => None }
            }
        }
    };
}

failure_codes! {
    /// An inline sandbox was requested but no container driver is usable.
    SandboxDriverUnavailable = "SANDBOX_DRIVER_UNAVAILABLE", Deterministic;
    /// The resolved spec is invalid after expansion or unsupported by the selected driver.
    SandboxSpecInvalid = "SANDBOX_SPEC_INVALID", Deterministic;
    /// A network policy failed to compile at run time.
    SandboxPolicyInvalid = "SANDBOX_POLICY_INVALID", Deterministic;
    /// Enforced egress was required but cannot be provided.
    SandboxNetworkUnavailable = "SANDBOX_NETWORK_UNAVAILABLE", Deterministic;
    /// The image reference does not exist or access is denied.
    SandboxImageUnavailable = "SANDBOX_IMAGE_UNAVAILABLE", Deterministic;
    /// The image build failed.
    SandboxBuildFailed = "SANDBOX_BUILD_FAILED", Deterministic;
    /// A post-create command exited non-zero.
    SandboxPostCreateFailed = "SANDBOX_POST_CREATE_FAILED", Deterministic;
    /// `iterion __claw-runner` cannot start in the container.
    SandboxRunnerUnavailable = "SANDBOX_RUNNER_UNAVAILABLE", Deterministic;
    /// The agent CLI for `claude_code` nodes is missing where the node runs.
    AgentCliUnavailable = "AGENT_CLI_UNAVAILABLE", Deterministic;
    /// The envelope handshake failed.
    RunnerIncompatible = "RUNNER_INCOMPATIBLE", Deterministic;
    /// A setup-phase bound expired.
    SandboxSetupTimeout = "SANDBOX_SETUP_TIMEOUT", Resumable;
    /// Network lease, proxy or container start failed for another reason.
    SandboxStartFailed = "SANDBOX_START_FAILED", Resumable;
    /// A container disappeared or its engine became unreachable during execution.
    SandboxLost = "SANDBOX_LOST", Resumable;
    /// `worktree: auto` could not create the worktree.
    WorktreeFailed = "WORKTREE_FAILED", Deterministic;
    /// The workflow took an edge to `fail`.
    FailNodeReached = "FAIL_NODE_REACHED", Deterministic;
    /// A resume was refused; the run record is not changed.
    ResumeInvalid = "RESUME_INVALID", Refusal;
    /// A resume was refused because `run.json` failed its integrity check; the run record is not changed.
    RunRecordTampered = "RUN_RECORD_TAMPERED", Refusal;
    /// The checkpoint names an unknown node.
    NodeNotFound = "NODE_NOT_FOUND", Deterministic;
    /// A node finished and no edge applies.
    NoOutgoingEdge = "NO_OUTGOING_EDGE", Resumable;
    /// The only applicable edges were loop edges at their cap.
    LoopExhausted = "LOOP_EXHAUSTED", Resumable;
    /// A budget dimension reached its limit.
    BudgetExceeded = "BUDGET_EXCEEDED", Resumable;
    /// The `--timeout` deadline expired.
    Timeout = "TIMEOUT", Resumable;
    /// A node failed after its retries.
    ExecutionFailed = "EXECUTION_FAILED", Resumable;
    /// A fan-out would run more than one branch that writes to the workspace in parallel.
    WorkspaceSafety = "WORKSPACE_SAFETY", Resumable;
    /// A backend reported a transient tool failure.
    ToolFailedTransient = "TOOL_FAILED_TRANSIENT", Resumable;
    /// A backend reported a permanent tool failure.
    ToolFailedPermanent = "TOOL_FAILED_PERMANENT", Resumable;
    /// The model provider kept refusing with rate limits.
    RateLimited = "RATE_LIMITED", Resumable;
    /// The model context overflowed even after compaction.
    ContextLengthExceeded = "CONTEXT_LENGTH_EXCEEDED", Resumable;
    /// Network errors persisted through the retries.
    NetworkTransient = "NETWORK_TRANSIENT", Resumable;
    /// Reserved: schema enforcement is off in this version.
    SchemaValidation = "SCHEMA_VALIDATION", Resumable;
    /// Malformed or oversized envelope, or runner exit without result.
    EnvelopeProtocolError = "ENVELOPE_PROTOCOL_ERROR", Resumable;
    /// The owning process died without cleaning up (crash recovery).
    RunInterrupted = "RUN_INTERRUPTED", Resumable;
    /// A bug (panic) in iterion; the checkpoint is kept.
    InternalError = "INTERNAL_ERROR", Resumable;
    /// A write to the run store failed (a full disk, an I/O error): the record of the run is incomplete, so the
    /// run is stopped and never ends `finished`.
    StoreWriteFailed = "STORE_WRITE_FAILED", Deterministic;
    /// Status `cancelled`: signal or operator cancellation.
    Cancelled = "CANCELLED", Cancellation;
}

impl FailureCode {
    /// The status a failure with this code produces; `None` for `RESUME_INVALID`, which never changes the record.
    pub fn status(self) -> Option<RunStatus> {
        match self.class() {
            FailureClass::Deterministic => Some(RunStatus::Failed),
            FailureClass::Resumable => Some(RunStatus::FailedResumable),
            FailureClass::Cancellation => Some(RunStatus::Cancelled),
            FailureClass::Refusal => None,
        }
    }

    /// `true` for codes of class resumable (`run_failed.data.resumable`).
    pub fn is_resumable(self) -> bool {
        self.class() == FailureClass::Resumable
    }

    /// The node-level retry policy of section 10.10. Deterministic sandbox codes and `SANDBOX_LOST` are never
    /// retried.
    pub fn retry_policy(self) -> RetryPolicy {
        match self {
            FailureCode::RateLimited => RetryPolicy::Schedule(&[10, 30, 60]),
            FailureCode::ContextLengthExceeded => RetryPolicy::Fixed {
                retries: 1,
                delay: Duration::ZERO,
            },
            FailureCode::ToolFailedTransient => RetryPolicy::Fixed {
                retries: 2,
                delay: Duration::from_secs(2),
            },
            FailureCode::ExecutionFailed | FailureCode::EnvelopeProtocolError => RetryPolicy::Fixed {
                retries: 1,
                delay: Duration::from_secs(2),
            },
            FailureCode::NetworkTransient => RetryPolicy::Doubling {
                retries: 6,
                first: Duration::from_secs(1),
                max: Duration::from_secs(60),
            },
            _ => RetryPolicy::Never,
        }
    }

    /// Classifies an error that carries no code from its text (section 10.10): connection-level messages are
    /// `NETWORK_TRANSIENT`, anything else `EXECUTION_FAILED`.
    pub fn classify_message(message: &str) -> FailureCode {
        const NETWORK: &[&str] = &[
            "connection refused",
            "connection reset",
            "no such host",
            "i/o timeout",
            "timed out",
            "unexpected eof",
            "broken pipe",
            "temporary failure in name resolution",
        ];
        let lower = message.to_ascii_lowercase();
        if NETWORK.iter().any(|n| lower.contains(n)) {
            FailureCode::NetworkTransient
        } else {
            FailureCode::ExecutionFailed
        }
    }
}

impl From<iterion_driver::FailureCode> for FailureCode {
    /// Driver errors carry a subset of the codes, with the same spelling.
    fn from(code: iterion_driver::FailureCode) -> FailureCode {
        FailureCode::parse(code.as_str()).unwrap_or(FailureCode::InternalError)
    }
}

impl From<iterion_driver::SetupPhase> for FailurePhase {
    fn from(phase: iterion_driver::SetupPhase) -> FailurePhase {
        use iterion_driver::SetupPhase as P;
        match phase {
            P::Pull => FailurePhase::Pull,
            P::Build => FailurePhase::Build,
            P::Start => FailurePhase::Start,
            P::PostCreate => FailurePhase::PostCreate,
            P::PodReady => FailurePhase::PodReady,
            P::WorkspaceCopy => FailurePhase::WorkspaceCopy,
            P::Probe => FailurePhase::Probe,
        }
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How often and after which delay a failing node is retried (section 10.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryPolicy {
    /// No retry.
    Never,
    /// `retries` retries, each after `delay`.
    Fixed {
        /// Number of retries.
        retries: u32,
        /// Delay before each retry.
        delay: Duration,
    },
    /// One retry per entry, after that many seconds (unless the provider said `Retry-After`).
    Schedule(&'static [u64]),
    /// `retries` retries, the delay starting at `first` and doubling, capped at `max`.
    Doubling {
        /// Number of retries.
        retries: u32,
        /// First delay.
        first: Duration,
        /// Cap of the delay.
        max: Duration,
    },
}

impl RetryPolicy {
    /// Number of retries allowed.
    pub fn retries(self) -> u32 {
        match self {
            RetryPolicy::Never => 0,
            RetryPolicy::Fixed { retries, .. } | RetryPolicy::Doubling { retries, .. } => retries,
            RetryPolicy::Schedule(s) => u32::try_from(s.len()).unwrap_or(u32::MAX),
        }
    }

    /// Delay before retry number `attempt` (1-based); `None` when that retry is not allowed.
    pub fn delay(self, attempt: u32) -> Option<Duration> {
        if attempt == 0 || attempt > self.retries() {
            return None;
        }
        Some(match self {
            RetryPolicy::Never => return None,
            RetryPolicy::Fixed { delay, .. } => delay,
            RetryPolicy::Schedule(s) => Duration::from_secs(s[attempt as usize - 1]),
            RetryPolicy::Doubling { first, max, .. } => {
                let factor = 1u32.checked_shl(attempt - 1).unwrap_or(u32::MAX);
                first.saturating_mul(factor).min(max)
            }
        })
    }
}

/// Setup phase in which a sandbox failure happened (`run.json.failure_phase`, `run_failed.data.phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailurePhase {
    /// Sandbox resolution (4.2).
    Resolve,
    /// Driver selection (4.4).
    Driver,
    /// Network lease / proxy (4.7).
    Network,
    /// Image pull (4.8).
    Pull,
    /// Image build (4.9).
    Build,
    /// Container start (4.10).
    Start,
    /// Kubernetes pod readiness (4.10).
    PodReady,
    /// Kubernetes workspace copy (4.10).
    WorkspaceCopy,
    /// Post-create commands (4.11).
    PostCreate,
    /// In-container probes (4.12).
    Probe,
    /// A node container (5.2).
    NodeContainer,
    /// Command execution in a container (5.1).
    Exec,
}

impl FailurePhase {
    /// The JSON spelling (`post_create`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePhase::Resolve => "resolve",
            FailurePhase::Driver => "driver",
            FailurePhase::Network => "network",
            FailurePhase::Pull => "pull",
            FailurePhase::Build => "build",
            FailurePhase::Start => "start",
            FailurePhase::PodReady => "pod_ready",
            FailurePhase::WorkspaceCopy => "workspace_copy",
            FailurePhase::PostCreate => "post_create",
            FailurePhase::Probe => "probe",
            FailurePhase::NodeContainer => "node_container",
            FailurePhase::Exec => "exec",
        }
    }
}

impl fmt::Display for FailurePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(code: &str, class: FailureClass) {
        let parsed = FailureCode::parse(code).expect("known code");
        assert_eq!(parsed.as_str(), code);
        assert_eq!(parsed.class(), class, "{code}");
        assert_eq!(serde_json::to_value(parsed).unwrap(), serde_json::json!(code));
        let back: FailureCode = serde_json::from_value(serde_json::json!(code)).unwrap();
        assert_eq!(back, parsed);
    }

    #[test]
    fn every_code_has_its_class_and_spelling() {
        use FailureClass::*;
        check("SANDBOX_DRIVER_UNAVAILABLE", Deterministic);
        check("SANDBOX_SPEC_INVALID", Deterministic);
        check("SANDBOX_POLICY_INVALID", Deterministic);
        check("SANDBOX_NETWORK_UNAVAILABLE", Deterministic);
        check("SANDBOX_IMAGE_UNAVAILABLE", Deterministic);
        check("SANDBOX_BUILD_FAILED", Deterministic);
        check("SANDBOX_POST_CREATE_FAILED", Deterministic);
        check("SANDBOX_RUNNER_UNAVAILABLE", Deterministic);
        check("AGENT_CLI_UNAVAILABLE", Deterministic);
        check("RUNNER_INCOMPATIBLE", Deterministic);
        check("SANDBOX_SETUP_TIMEOUT", Resumable);
        check("SANDBOX_START_FAILED", Resumable);
        check("SANDBOX_LOST", Resumable);
        check("WORKTREE_FAILED", Deterministic);
        check("FAIL_NODE_REACHED", Deterministic);
        check("RESUME_INVALID", Refusal);
        check("RUN_RECORD_TAMPERED", Refusal);
        check("NODE_NOT_FOUND", Deterministic);
        check("NO_OUTGOING_EDGE", Resumable);
        check("LOOP_EXHAUSTED", Resumable);
        check("BUDGET_EXCEEDED", Resumable);
        check("TIMEOUT", Resumable);
        check("EXECUTION_FAILED", Resumable);
        check("TOOL_FAILED_TRANSIENT", Resumable);
        check("TOOL_FAILED_PERMANENT", Resumable);
        check("RATE_LIMITED", Resumable);
        check("CONTEXT_LENGTH_EXCEEDED", Resumable);
        check("NETWORK_TRANSIENT", Resumable);
        check("SCHEMA_VALIDATION", Resumable);
        check("ENVELOPE_PROTOCOL_ERROR", Resumable);
        check("RUN_INTERRUPTED", Resumable);
        check("INTERNAL_ERROR", Resumable);
        check("STORE_WRITE_FAILED", Deterministic);
        check("CANCELLED", Cancellation);
        check("WORKSPACE_SAFETY", Resumable);
        assert_eq!(FailureCode::ALL.len(), 35);
    }

    #[test]
    fn unknown_code_is_rejected() {
        assert_eq!(FailureCode::parse("SANDBOX_SKIPPED"), None);
        assert!(serde_json::from_value::<FailureCode>(serde_json::json!("sandbox_lost")).is_err());
    }

    #[test]
    fn code_maps_to_status() {
        assert_eq!(FailureCode::FailNodeReached.status(), Some(RunStatus::Failed));
        assert_eq!(
            FailureCode::SandboxSetupTimeout.status(),
            Some(RunStatus::FailedResumable)
        );
        assert_eq!(FailureCode::Cancelled.status(), Some(RunStatus::Cancelled));
        assert_eq!(FailureCode::ResumeInvalid.status(), None);
    }

    fn check_retry(code: FailureCode, delays: &[u64]) {
        let p = code.retry_policy();
        assert_eq!(p.retries() as usize, delays.len(), "{code}");
        for (i, d) in delays.iter().enumerate() {
            assert_eq!(
                p.delay(i as u32 + 1),
                Some(Duration::from_millis(*d)),
                "{code} retry {}",
                i + 1
            );
        }
        assert_eq!(p.delay(delays.len() as u32 + 1), None);
    }

    #[test]
    fn retry_policies_follow_section_10_10() {
        check_retry(FailureCode::RateLimited, &[10_000, 30_000, 60_000]);
        check_retry(FailureCode::ContextLengthExceeded, &[0]);
        check_retry(FailureCode::ToolFailedTransient, &[2000, 2000]);
        check_retry(FailureCode::ExecutionFailed, &[2000]);
        check_retry(
            FailureCode::NetworkTransient,
            &[1000, 2000, 4000, 8000, 16_000, 32_000],
        );
        check_retry(FailureCode::EnvelopeProtocolError, &[2000]);
        check_retry(FailureCode::SandboxLost, &[]);
        check_retry(FailureCode::SandboxSpecInvalid, &[]);
        check_retry(FailureCode::ToolFailedPermanent, &[]);
    }

    fn check_classify(message: &str, expect: FailureCode) {
        assert_eq!(FailureCode::classify_message(message), expect, "{message}");
    }

    #[test]
    fn messages_without_code_are_classified() {
        check_classify("dial tcp: Connection Refused", FailureCode::NetworkTransient);
        check_classify("read: connection reset by peer", FailureCode::NetworkTransient);
        check_classify("lookup api: no such host", FailureCode::NetworkTransient);
        check_classify("i/o timeout", FailureCode::NetworkTransient);
        check_classify("request timed out", FailureCode::NetworkTransient);
        check_classify("Unexpected EOF", FailureCode::NetworkTransient);
        check_classify("write: broken pipe", FailureCode::NetworkTransient);
        check_classify(
            "Temporary failure in name resolution",
            FailureCode::NetworkTransient,
        );
        check_classify("command exited with status 3", FailureCode::ExecutionFailed);
    }

    #[test]
    fn driver_codes_and_phases_convert_by_spelling() {
        use iterion_driver::{FailureCode as D, SetupPhase as P};
        for d in [
            D::DriverUnavailable,
            D::SpecInvalid,
            D::NetworkUnavailable,
            D::ImageUnavailable,
            D::BuildFailed,
            D::PostCreateFailed,
            D::SetupTimeout,
            D::StartFailed,
            D::Lost,
            D::Internal,
        ] {
            assert_eq!(FailureCode::from(d).as_str(), d.as_str());
        }
        for p in [
            P::Pull,
            P::Build,
            P::Start,
            P::PostCreate,
            P::PodReady,
            P::WorkspaceCopy,
            P::Probe,
        ] {
            assert_eq!(FailurePhase::from(p).as_str(), p.as_str());
        }
    }

    #[test]
    fn phases_spell_as_in_the_spec() {
        for (p, s) in [
            (FailurePhase::PodReady, "pod_ready"),
            (FailurePhase::WorkspaceCopy, "workspace_copy"),
            (FailurePhase::PostCreate, "post_create"),
            (FailurePhase::NodeContainer, "node_container"),
            (FailurePhase::Resolve, "resolve"),
        ] {
            assert_eq!(serde_json::to_value(p).unwrap(), serde_json::json!(s));
            assert_eq!(p.as_str(), s);
        }
    }
}
