//! The crate's one error type.

use crate::wire::TaskResult;

/// Everything that can go wrong while encoding, decoding or exchanging envelopes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A line longer than the line cap arrived; the reader is poisoned and returns this error again.
    #[error("envelope line longer than {limit} bytes")]
    LineTooLong {
        /// The line cap in bytes (without the LF and an optional CR).
        limit: usize,
    },
    /// A line that is not UTF-8, not a JSON object, or has no string `type`; the reader is poisoned.
    #[error("malformed envelope on line {line_number}: {reason} (line starts with {preview:?})")]
    Malformed {
        /// 1-based physical line number in the stream, blank lines included.
        line_number: u64,
        /// What is wrong with the line.
        reason: String,
        /// The first 256 characters of the line, invalid UTF-8 replaced by U+FFFD.
        preview: String,
    },
    /// The writer refused an envelope whose encoding exceeds the line cap; nothing was written.
    #[error("envelope of {size} bytes exceeds the {limit} byte line cap")]
    EnvelopeTooLarge {
        /// Encoded size in bytes, without the LF.
        size: usize,
        /// The line cap in bytes.
        limit: usize,
    },
    /// Reading or writing the stream failed; a reader that saw it is poisoned.
    #[error("envelope stream i/o")]
    Io(#[from] std::io::Error),
    /// A payload could not be serialised to JSON.
    #[error("encode {kind} payload")]
    Encode {
        /// The envelope type being encoded.
        kind: String,
        /// The serialiser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The `data` of an envelope does not decode into the payload its type requires.
    #[error("{kind} envelope has invalid data: {detail}")]
    Data {
        /// The envelope type.
        kind: String,
        /// Why decoding failed.
        detail: String,
    },
    /// The launcher could not agree on a protocol with the runner (missing, legacy or incompatible runner).
    #[error("handshake with the runner failed: {detail}")]
    HandshakeFailed {
        /// What happened instead of a compatible `hello`.
        detail: String,
    },
    /// The runner's output ended before it sent a `result`.
    #[error("runner exited without sending a result")]
    RunnerExited,
    /// The runner broke the protocol (malformed or oversized line, missing or duplicate id, undecodable data).
    #[error("envelope protocol: {detail}")]
    Protocol {
        /// What the runner did wrong.
        detail: String,
    },
    /// Cancellation was requested; `result` is the runner's final result when it arrived within the grace period.
    #[error("cancelled")]
    Cancelled {
        /// The runner's cancelled `result`, if it arrived in time.
        result: Option<Box<TaskResult>>,
    },
    /// The runner refused the bootstrap: `result` was already written to the launcher and the process should
    /// exit with `exit_code`.
    #[error("runner bootstrap ended with exit status {exit_code}: {}", result.error)]
    Bootstrap {
        /// The `result` that was written (its `error` says why).
        result: Box<TaskResult>,
        /// The exit status the runner process should end with (1 cancelled, 2 protocol error).
        exit_code: i32,
    },
    /// The launcher closed the runner's stdin while a request was waiting for its reply.
    #[error("runner: launcher closed envelope channel")]
    LauncherClosed,
    /// A request was made after the runner's envelope channel had closed.
    #[error("runner: envelope channel closed before reply")]
    ChannelClosed,
    /// Reading the launcher's envelopes failed while a request was waiting for its reply.
    #[error("runner: reading envelopes failed: {detail}")]
    ReadFailed {
        /// The read error.
        detail: String,
    },
    /// A reply carried the id of a pending request but the wrong type.
    #[error("runner: unexpected reply type {reply_type:?} for {id}")]
    UnexpectedReply {
        /// The type of the reply.
        reply_type: String,
        /// The request id it answered.
        id: String,
    },
    /// The runner channel was used after `finish`.
    #[error("runner: envelope channel already finished")]
    Finished,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
