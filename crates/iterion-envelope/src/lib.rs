//! `iterion-envelope`: the NDJSON protocol between the launcher (the host-side runtime executing a `claw` node)
//! and `iterion __claw-runner` (the model loop, running inside the sandbox).
//!
//! Every envelope is one compact JSON object on one line, `{"type", "id"?, "data"?}`, at most [`LINE_CAP`]
//! bytes. The default build is pure: the wire types ([`Task`], [`TaskResult`], [`Hello`], …), the sans-I/O
//! [`Decoder`], [`encode`], blocking [`Reader`] / [`Writer`] over `std::io`, the handshake rules, the
//! launcher's tool boundary ([`advertised_tool`]) and [`node_failure`]. The `tokio` feature adds the async
//! codec ([`AsyncReader`], [`SharedWriter`]), the launcher-side multiplexer ([`launcher::run`]) and the
//! runner-side bootstrap and channel ([`runner::bootstrap`], [`runner::Channel`]).
//!
//! ```
//! use iterion_envelope::{Envelope, Reader, Task, encode, kind};
//!
//! let task = Task { node_id: "fixer".into(), user_prompt: "Fix the failing test.".into(), ..Task::default() };
//! let line = encode(&Envelope::new(kind::TASK, None, &task)?)?;
//! assert_eq!(
//!     line,
//!     b"{\"type\":\"task\",\"data\":{\"node_id\":\"fixer\",\"user_prompt\":\"Fix the failing test.\"}}\n"
//! );
//!
//! let mut reader = Reader::new(&line[..]);
//! let envelope = reader.read()?.expect("one envelope");
//! assert_eq!(envelope.kind(), kind::TASK);
//! assert_eq!(envelope.decode::<Task>()?, task);
//! assert!(reader.read()?.is_none()); // end of stream
//! # Ok::<(), iterion_envelope::Error>(())
//! ```
#![deny(missing_docs)]

mod codec;
mod envelope;
mod error;
mod failure;
mod handshake;
mod tools;
mod wire;

#[cfg(feature = "tokio")]
mod cancel;
#[cfg(feature = "tokio")]
mod io;
#[cfg(feature = "tokio")]
pub mod launcher;
#[cfg(feature = "tokio")]
pub mod runner;

pub use codec::{Decoder, LINE_CAP, PREVIEW_CHARS, READ_CHUNK, Reader, Writer, encode, encode_with_limit};
pub use envelope::Envelope;
pub use error::{Error, Result};
pub use failure::{CANCELLED, NodeFailure, RUNNER_INCOMPATIBLE, STDERR_TAIL_BYTES, StderrTail, node_failure};
pub use handshake::{
    RUNNER_CAPABILITIES, SUPPORTED, VERSION, accept_launcher_hello, accept_runner_hello, choose_version,
};
pub use tools::{
    NO_ASK_USER_HANDLER, NO_TOOL_DISPATCHER, advertised_tool, oversized_tool_output, unimplemented_tool,
};
pub use wire::{
    ANSWER_ERROR_KEY, AskUser, AskUserAnswer, AskUserOption, AskUserQuestion, AskUserToolFail, Cancel,
    DEFAULT_BACKEND_NAME, Event, Hello, PROTOCOL, Role, Task, TaskResult, ToolCall, ToolDef, ToolOutcome,
    ToolResult, error_code, kind,
};

#[cfg(feature = "tokio")]
pub use cancel::CancelSignal;
#[cfg(feature = "tokio")]
pub use io::{AsyncReader, SharedWriter};
