//! A cancellation signal that carries its reason.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// A cloneable cancellation signal with a reason; the first reason given wins.
#[derive(Debug, Clone, Default)]
pub struct CancelSignal {
    token: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
}

impl CancelSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        CancelSignal::default()
    }

    /// Fires the signal; the reason is kept unless an earlier call gave one.
    pub fn cancel(&self, reason: impl Into<String>) {
        {
            let mut slot = self.reason.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert_with(|| reason.into());
        }
        self.token.cancel();
    }

    /// Whether the signal fired.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Completes when the signal fires.
    pub async fn cancelled(&self) {
        self.token.cancelled().await;
    }

    /// The reason, once fired.
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
