//! The trait every `data` payload implements.
use serde::Serialize;

/// One `data` payload of the catalogue.
pub trait EventData: Serialize {
    /// The event `type`.
    const TYPE: &'static str;
    /// The top-level `node_id` of the line, when the event is node-scoped.
    fn node_id(&self) -> Option<&str> {
        None
    }
}
