//! Run statuses (section 2). The transitions that write them are [`crate::store::Transition`].
use serde::{Deserialize, Serialize};
use std::fmt;

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

    /// The status spelled `s` (its JSON spelling, any case; `-` taken for `_`).
    pub fn parse(s: &str) -> Option<RunStatus> {
        let s = s.trim().to_ascii_lowercase().replace('-', "_");
        [
            RunStatus::Running,
            RunStatus::Finished,
            RunStatus::Failed,
            RunStatus::FailedResumable,
            RunStatus::Cancelled,
            RunStatus::Queued,
            RunStatus::PausedWaitingHuman,
            RunStatus::PausedOperator,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
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
        !matches!(self, RunStatus::Queued | RunStatus::PausedOperator)
    }

    /// `true` when `iterion resume` may continue a run in this status (a paused run only with answers).
    pub fn is_resumable(self) -> bool {
        matches!(
            self,
            RunStatus::FailedResumable | RunStatus::Cancelled | RunStatus::PausedWaitingHuman
        )
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
        check(Running, PausedWaitingHuman, true);
        check(PausedWaitingHuman, Running, true);
        check(Finished, PausedWaitingHuman, false);
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
