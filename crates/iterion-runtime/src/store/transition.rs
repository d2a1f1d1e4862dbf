//! Status transitions of a run record (section 2): [`Transition`] and [`RunDocument::apply`].
use crate::error::{Error, Result};
use crate::failure::{FailureClass, FailureCode, FailurePhase};
use crate::status::RunStatus;

use super::document::{Checkpoint, RunDocument};

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
    /// `paused_waiting_human`: not terminal; `finished_at` and any failure cleared, the checkpoint (at the
    /// human node, with the interaction) replaced.
    Pause {
        /// The checkpoint at the human node.
        checkpoint: Checkpoint,
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
            Transition::Pause { .. } => RunStatus::PausedWaitingHuman,
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
    /// Applies a status transition at time `now` (RFC 3339, see [`crate::time::format_timestamp`]); the
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
            Transition::Pause { checkpoint } => {
                self.checkpoint = Some(checkpoint);
                self.finished_at = None;
                self.failure_code = None;
                self.failure_phase = None;
                self.error = None;
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
