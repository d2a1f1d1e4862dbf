//! Run statuses (section 2) and the transitions that write them.
use serde::{Deserialize, Serialize};
use std::fmt;

use crate::error::{Error, Result};
use crate::failure::{FailureClass, FailureCode, FailurePhase};
use crate::store::{Checkpoint, RunDocument};

/// Status of a run (`run.json.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunStatus {
    /// A process owns the run and is executing it.
    Running,
    /// Reached `done`.
    Finished,
    /// Deterministic failure or the `fail` node; cannot be resumed.
    Failed,
    /// Resumable failure; checkpoint kept.
    FailedResumable,
    /// Stopped by a signal or the caller's cancellation; checkpoint kept; resumable.
    Cancelled,
    /// Reserved (not written by this version).
    Queued,
    /// Reserved (not written by this version).
    PausedWaitingHuman,
    /// Reserved (not written by this version).
    PausedOperator,
}

impl RunStatus {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Failed => "failed",
            RunStatus::FailedResumable => "failed_resumable",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Queued => "queued",
            RunStatus::PausedWaitingHuman => "paused_waiting_human",
            RunStatus::PausedOperator => "paused_operator",
        }
    }

    /// `true` for `finished`, `failed`, `failed_resumable` and `cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Finished | RunStatus::Failed | RunStatus::FailedResumable | RunStatus::Cancelled
        )
    }

    /// `true` for the statuses this version writes (the others are reserved and only read).
    pub fn is_written_by_this_version(self) -> bool {
        !matches!(
            self,
            RunStatus::Queued | RunStatus::PausedWaitingHuman | RunStatus::PausedOperator
        )
    }

    /// `true` when `iterion resume` may continue a run in this status.
    pub fn is_resumable(self) -> bool {
        matches!(self, RunStatus::FailedResumable | RunStatus::Cancelled)
    }

    /// Whether this version may move a run from `self` to `to`: a non-terminal run may reach any terminal
    /// status; a resumable run (and a reserved waiting status) may go back to `running`.
    pub fn can_transition_to(self, to: RunStatus) -> bool {
        if !to.is_written_by_this_version() {
            return false;
        }
        if to == RunStatus::Running {
            return self.is_resumable() || !self.is_written_by_this_version();
        }
        !self.is_terminal()
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One status change. [`RunDocument::apply`] writes status, failure code, error and checkpoint of a transition
/// together, so one atomic `run.json` write records all of them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Transition {
    /// Back to `running` (resume): `finished_at`, `failure_code`, `failure_phase` and `error` cleared,
    /// checkpoint kept.
    Resume,
    /// `finished`: `finished_at` set, checkpoint and failure cleared.
    Finish,
    /// `failed` (a deterministic code): `finished_at`, code and error set, checkpoint cleared.
    Fail {
        /// A code of class deterministic.
        code: FailureCode,
        /// Human-readable error.
        error: String,
        /// Setup phase for sandbox failures.
        phase: Option<FailurePhase>,
    },
    /// `failed_resumable` (a resumable code): `finished_at`, code and error set, checkpoint replaced when
    /// given, else kept; one must exist afterwards.
    FailResumable {
        /// A code of class resumable.
        code: FailureCode,
        /// Human-readable error.
        error: String,
        /// Setup phase for sandbox failures.
        phase: Option<FailurePhase>,
        /// New checkpoint (a stub `{node_id: entry, vars}` when no node ran yet), or `None` to keep the
        /// current one.
        checkpoint: Option<Checkpoint>,
    },
    /// `cancelled`: `failure_code: CANCELLED`, error `run cancelled: <reason>`, checkpoint as for
    /// `FailResumable`.
    Cancel {
        /// Why (`signal SIGINT`, `cancelled by the caller`).
        reason: String,
        /// New checkpoint, or `None` to keep the current one.
        checkpoint: Option<Checkpoint>,
    },
}

impl Transition {
    /// The status the transition writes.
    pub fn target(&self) -> RunStatus {
        match self {
            Transition::Resume => RunStatus::Running,
            Transition::Finish => RunStatus::Finished,
            Transition::Fail { .. } => RunStatus::Failed,
            Transition::FailResumable { .. } => RunStatus::FailedResumable,
            Transition::Cancel { .. } => RunStatus::Cancelled,
        }
    }

    /// A failure transition with the status implied by the class of `code` (`failed` or `failed_resumable`;
    /// `CANCELLED` gives a cancellation with `error` as the reason). `None` for `RESUME_INVALID`, which never
    /// changes the run record.
    pub fn for_code(code: FailureCode, error: String, phase: Option<FailurePhase>) -> Option<Transition> {
        Some(match code.class() {
            FailureClass::Deterministic => Transition::Fail { code, error, phase },
            FailureClass::Resumable => Transition::FailResumable {
                code,
                error,
                phase,
                checkpoint: None,
            },
            FailureClass::Cancellation => Transition::Cancel {
                reason: error,
                checkpoint: None,
            },
            FailureClass::Refusal => return None,
        })
    }
}

impl RunDocument {
    /// Applies a status transition at time `now` (RFC 3339, see [`crate::events::format_timestamp`]); the
    /// caller then writes the document once. The document is unchanged when an error is returned.
    pub fn apply(&mut self, transition: Transition, now: &str) -> Result<()> {
        let to = transition.target();
        if !self.status.can_transition_to(to) {
            return Err(Error::InvalidTransition {
                from: self.status,
                to,
            });
        }
        let check_class = |code: FailureCode, class: FailureClass| {
            if code.class() == class {
                Ok(())
            } else {
                Err(Error::CodeClassMismatch { code, status: to })
            }
        };
        let keep_or_replace = |current: &Option<Checkpoint>, given: Option<Checkpoint>| match given {
            Some(c) => Ok(Some(c)),
            None if current.is_some() => Ok(current.clone()),
            None => Err(Error::MissingCheckpoint { status: to }),
        };
        match transition {
            Transition::Resume => {
                self.finished_at = None;
                self.failure_code = None;
                self.failure_phase = None;
                self.error = None;
            }
            Transition::Finish => {
                self.finished_at = Some(now.to_owned());
                self.checkpoint = None;
                self.failure_code = None;
                self.failure_phase = None;
                self.error = None;
            }
            Transition::Fail { code, error, phase } => {
                check_class(code, FailureClass::Deterministic)?;
                self.finished_at = Some(now.to_owned());
                self.checkpoint = None;
                self.failure_code = Some(code);
                self.failure_phase = phase;
                self.error = Some(error);
            }
            Transition::FailResumable {
                code,
                error,
                phase,
                checkpoint,
            } => {
                check_class(code, FailureClass::Resumable)?;
                self.checkpoint = keep_or_replace(&self.checkpoint, checkpoint)?;
                self.finished_at = Some(now.to_owned());
                self.failure_code = Some(code);
                self.failure_phase = phase;
                self.error = Some(error);
            }
            Transition::Cancel { reason, checkpoint } => {
                self.checkpoint = keep_or_replace(&self.checkpoint, checkpoint)?;
                self.finished_at = Some(now.to_owned());
                self.failure_code = Some(FailureCode::Cancelled);
                self.failure_phase = None;
                self.error = Some(format!("run cancelled: {reason}"));
            }
        }
        self.status = to;
        self.updated_at = now.to_owned();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunStatus::*;

    fn check(from: RunStatus, to: RunStatus, allowed: bool) {
        assert_eq!(from.can_transition_to(to), allowed, "{from} -> {to}");
    }

    #[test]
    fn allowed_transitions() {
        check(Running, Finished, true);
        check(Running, Failed, true);
        check(Running, FailedResumable, true);
        check(Running, Cancelled, true);
        check(FailedResumable, Running, true);
        check(Cancelled, Running, true);
        check(Queued, Running, true);
        check(PausedOperator, Cancelled, true);
        check(Finished, Running, false);
        check(Failed, Running, false);
        check(Running, Running, false);
        check(Finished, Failed, false);
        check(FailedResumable, Finished, false);
        check(Running, Queued, false);
        check(Running, PausedWaitingHuman, false);
    }

    #[test]
    fn statuses_spell_and_classify() {
        for (s, json, terminal) in [
            (Running, "running", false),
            (Finished, "finished", true),
            (Failed, "failed", true),
            (FailedResumable, "failed_resumable", true),
            (Cancelled, "cancelled", true),
            (Queued, "queued", false),
            (PausedWaitingHuman, "paused_waiting_human", false),
            (PausedOperator, "paused_operator", false),
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(json));
            let back: RunStatus = serde_json::from_value(serde_json::json!(json)).unwrap();
            assert_eq!(back, s);
            assert_eq!(s.is_terminal(), terminal, "{json}");
        }
    }
}
