//! `iterion-runtime`: the run lifecycle, the run store and workflow execution over `Arc<dyn Driver>`.
//!
//! Layer L4: never names a container library; drivers are chosen by the caller or, through
//! [`api::Runtime::from_env`], by the host layer (`iterion-host`).
//!
//! Built so far: the run store ([`store`]), run statuses ([`status`]), failure codes ([`failure`]), the
//! event catalogue ([`events`]), launch attachments ([`attachments`]), workflow execution ([`exec`]), the run
//! lifecycle with resume, cleanup and the reaper ([`lifecycle`]) and the embedding API ([`api`], example
//! `examples/embed.rs`).
//!
//! Module order, lowest first; a module imports only modules before it, never one after it:
//! [`time`] → [`status`] → [`failure`] → [`error`] → [`events`] → [`store`] → [`attachments`] → [`exec`] →
//! [`lifecycle`] → [`api`].
//! Inside a directory module the same holds: `mod.rs` only declares and re-exports, its files import siblings
//! below them (for example `store::transition` → `store::document` → `store::files`).
#![deny(missing_docs)]

pub mod api;
pub mod attachments;
pub mod error;
pub mod events;
pub mod exec;
pub mod failure;
pub mod lifecycle;
pub mod status;
pub mod store;
pub mod time;

pub use error::{Error, Result};
