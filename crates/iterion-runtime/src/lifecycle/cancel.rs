//! Cancellation of a run with its reason.
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// Cancellation of a run with its reason (`signal SIGINT`, `cancelled by the caller`).
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    token: CancellationToken,
    force: CancellationToken,
    reason: Arc<std::sync::Mutex<Option<String>>>,
}

impl Cancel {
    /// A handle that is not cancelled.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Cancels with `reason` (the first reason wins).
    pub fn cancel(&self, reason: impl Into<String>) {
        let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_none() {
            *r = Some(reason.into());
        }
        drop(r);
        self.token.cancel();
    }

    /// A second cancellation (05 §8.2): cleanup skips its graceful steps and force-removes the containers.
    pub fn force(&self) {
        self.cancel("cancelled by the caller");
        self.force.cancel();
    }

    /// The token cleanup watches for [`Cancel::force`].
    pub fn force_token(&self) -> CancellationToken {
        self.force.clone()
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The token the executor watches.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// The reason given, or `cancelled by the caller`.
    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| "cancelled by the caller".into())
    }
}
