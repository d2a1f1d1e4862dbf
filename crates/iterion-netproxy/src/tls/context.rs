//! What an inspected tunnel knows about its decision, and how it ended: shared by the interception, the HTTP
//! relay and the raw scan.

use crate::event::{Counters, DecisionEvent, DecisionId, EventSink, ProxyEvent};
use iterion_netpolicy::Target;

/// The decided tunnel an interception works for.
#[derive(Debug, Clone)]
pub(crate) struct TunnelCtx {
    pub(crate) target: Target,
    pub(crate) host: String,
    pub(crate) decision_id: DecisionId,
    pub(crate) node_id: Option<String>,
    pub(crate) username: String,
    pub(crate) mode: String,
}

impl TunnelCtx {
    /// Report a refusal (`Denied`, counted per reason) under a new or the tunnel's decision id.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn deny(
        &self,
        events: &EventSink,
        counters: &Counters,
        decision_id: &DecisionId,
        method: &str,
        reason: &str,
        rule: &str,
        secret: Option<&str>,
    ) {
        Counters::bump(&counters.denied, reason);
        events.emit(ProxyEvent::Denied(DecisionEvent {
            decision_id: decision_id.clone(),
            host: self.host.clone(),
            port: self.target.port,
            reason: Some(reason.to_owned()),
            rule: Some(rule.to_owned()),
            address: None,
            node_id: self.node_id.clone(),
            username: self.username.clone(),
            method: method.to_owned(),
            mode: self.mode.clone(),
            secret: secret.map(str::to_owned),
        }));
    }
}

/// How an inspected tunnel ended.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Outcome {
    pub(crate) bytes_up: u64,
    pub(crate) bytes_down: u64,
    pub(crate) reason: &'static str,
}
