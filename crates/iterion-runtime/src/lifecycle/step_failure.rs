//! A failure of a lifecycle step.
use crate::events::RunFailed;
use crate::failure::{FailureCode, FailurePhase};

/// A failure of a lifecycle step: everything `run.json` and `run_failed` need.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    pub(crate) event: Box<RunFailed>,
}

impl Failure {
    pub(crate) fn new(code: FailureCode, error: impl Into<String>) -> Failure {
        Failure {
            event: Box::new(RunFailed::new(code, error)),
        }
    }

    /// Applies a `RunFailed` builder step.
    pub(crate) fn with(mut self, f: impl FnOnce(RunFailed) -> RunFailed) -> Failure {
        self.event = Box::new(f(*self.event));
        self
    }

    pub(crate) fn phase(self, phase: FailurePhase) -> Failure {
        self.with(|e| e.phase(phase))
    }

    pub(crate) fn hint(self, hint: Option<String>) -> Failure {
        match hint.filter(|h| !h.is_empty()) {
            Some(h) => self.with(|e| e.hint(h)),
            None => self,
        }
    }
}
