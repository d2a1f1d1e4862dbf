//! The event catalogue (section 6) and the `events.jsonl` line format (section 1.3).
//!
//! Every event is a typed data struct whose fields are exactly the `data` keys of the specification; the
//! [`Event`] enum wraps them so the lifecycle can only emit well-formed events. [`encode_line`] produces the
//! stored line (keys `seq`, `timestamp`, `type`, `run_id`, `node_id?`, `data`), applying the size limits.
//!
//! Modules, lowest first: `kinds` (tag enums), `data` (the [`EventData`] trait), `sandbox` and `run` (the
//! payloads), `forwarded` (runner events), `catalogue` ([`Event`]), `line` (the stored line).

macro_rules! data_node_id {
    ($t:ty) => {
        fn node_id(&self) -> Option<&str> {
            self.node_id.as_deref()
        }
    };
}

macro_rules! scoped_node_id {
    () => {
        fn node_id(&self) -> Option<&str> {
            Some(&self.node_id)
        }
    };
}

mod catalogue;
mod data;
mod forwarded;
mod kinds;
mod line;
mod run;
mod sandbox;

pub use crate::time::{format_timestamp, now_timestamp, parse_timestamp};
pub use catalogue::{BranchScoped, EVENT_TYPES, Event};
pub use data::EventData;
pub use forwarded::{Forwarded, ForwardedType};
pub use kinds::*;
pub use line::{EventRecord, MAX_LINE_BYTES, MAX_VALUE_BYTES, encode_line, limit_data};
pub use run::*;
pub use sandbox::*;
