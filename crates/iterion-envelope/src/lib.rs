//! `iterion-envelope`: the NDJSON launcher ↔ runner wire types and codec.
//!
//! Layer L0. The protocol is specified in the project's envelope specification; this crate is not built yet
//! beyond its place in the workspace, and the runtime refuses `claw` nodes until it is.
#![deny(missing_docs)]
