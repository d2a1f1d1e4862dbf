//! `iterion-claw`: the model loop of the `claw` backend, the code that `iterion __claw-runner` runs inside
//! the sandbox.
//!
//! Built here:
//! - [`provider`]: the provider choice rule (hint, model prefix, `claude*` → Anthropic, else OpenAI), a table
//!   of OpenAI-compatible providers ([`provider::COMPATIBLE`]), request building and response parsing for the
//!   Anthropic Messages API and OpenAI Chat Completions, streaming (SSE) with the same result as a plain call,
//!   bounded retries with backoff on 429 and 5xx honouring `retry-after`, and the mapping of failures to the
//!   `error_code`s of a claw result ([`Error::code`]).
//! - [`tools`]: the runner builtins (`bash`, `read_file`, `write_file`, `file_edit`, `glob`, `grep`,
//!   `web_fetch`), relative paths against the task's `work_dir`, the `readonly` restriction, output caps.
//! - [`output`]: the output parsing rule of the final text and the check against the output schema.
//! - [`agent`]: the loop: conversation, tool calls (concurrent when several), `tool_max_steps`, one reformat
//!   pass for a schema (`formatting_pass_used`, `parse_fallback`), events and session captures through a
//!   [`Sink`], non-builtin tools through a [`ToolDelegate`], compaction (`llm_compacted`) on a context
//!   overflow, past the threshold and on a replayed session.
//! - [`compact`]: the compaction rules, the context windows by model family and the decoding of a replayed
//!   session snapshot.
//! - [`runner::serve`]: the runner side of one node over the envelope channel (bootstrap, loop, `result`);
//!   [`runner::run_stdio`]: the runner process itself over stdin/stdout, what `iterion __claw-runner` and the
//!   static `iterion-claw-runner` program run.
//!
//! HTTP goes through `reqwest` (rustls, no default features, `stream`): a well-kept client whose proxy support
//! takes credentials from the proxy URL, confined to this crate and absent from its public signatures. The
//! caller gives the proxy URL (the run's egress proxy) and an env map for keys and base URLs; the crate never
//! reads the process environment.
#![deny(missing_docs)]

pub mod agent;
pub mod compact;
mod error;
pub mod output;
pub mod provider;
pub mod runner;
pub mod tools;

pub use agent::{Agent, Sink, ToolDelegate};
pub use error::{Error, Result};
