//! The errors `run` and `resume` report before a run record exists: usage errors (exit 2) and the others.
use iterion_spec::diag::Diagnostic;

/// A usage error (exit 2) or another error before the run record exists (exit 1).
pub(crate) struct Early {
    pub(crate) code: u8,
    pub(crate) message: String,
    pub(crate) diagnostics: Option<(Vec<Diagnostic>, String)>,
}

pub(crate) fn usage(message: impl Into<String>) -> Early {
    Early {
        code: 2,
        message: message.into(),
        diagnostics: None,
    }
}

pub(crate) fn fail1(message: impl Into<String>) -> Early {
    Early {
        code: 1,
        message: message.into(),
        diagnostics: None,
    }
}

pub(crate) fn runtime_early(e: iterion_runtime::Error) -> Early {
    use iterion_runtime::Error as E;
    match e {
        E::InvalidVar { .. }
        | E::UnknownVar { .. }
        | E::UnknownPreset { .. }
        | E::InvalidLaunch { .. }
        | E::InvalidAttachment { .. }
        | E::InvalidRunId { .. }
        | E::AnswersRequired { .. }
        | E::AnswersNotWanted { .. }
        | E::AnswersInvalid { .. } => usage(e.to_string()),
        E::CancelledBeforeStart { ref reason } => Early {
            code: signal_exit(reason).unwrap_or(1),
            message: e.to_string(),
            diagnostics: None,
        },
        other => fail1(crate::cmd_runs::error_chain(&other)),
    }
}

/// 128 + the signal's number for a cancellation by SIGINT (130), SIGTERM (143) or SIGHUP (129), as shells
/// report a process ended by a signal.
pub(crate) fn signal_exit(reason: &str) -> Option<u8> {
    match reason {
        "signal SIGINT" => Some(130),
        "signal SIGTERM" => Some(143),
        "signal SIGHUP" => Some(129),
        _ => None,
    }
}
