//! Sandbox setup (05 §4.2–4.12), node containers (5.2), the resources guard and cleanup (§8.1, §8.2).
//!
//! Modules, lowest first: `convert`, `failures`, `guard`, `starter` (starting one container), `runner` (the claw runner in a container), `nodes` (the
//! executor's view), `network` (egress), `setup` (the steps of a run's setup).
mod convert;
mod copy;
mod failures;
mod fixup;
mod guard;
mod network;
mod nodes;
mod runner;
mod setup;
mod starter;

pub(crate) use failures::{compile_policy, resolve_failure};
pub(crate) use guard::Guard;
pub(crate) use nodes::Sandboxes;
pub(crate) use setup::{
    Setup, attachments_unsupported, claw_runtime_refusal, codex_refusal, effective_policies, host_fallback,
};
