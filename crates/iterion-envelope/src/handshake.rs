//! The `hello` exchange as pure functions: what each side sends and how the runner picks a version.

use std::ops::RangeInclusive;

use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::wire::{Hello, PROTOCOL, Role, TaskResult, error_code, kind};

/// The protocol version this crate implements.
pub const VERSION: u32 = 1;

/// The versions this crate speaks.
pub const SUPPORTED: RangeInclusive<u32> = VERSION..=VERSION;

/// Capabilities a runner built on this crate announces, sorted.
pub const RUNNER_CAPABILITIES: &[&str] = &["cancel", "event", "session_capture"];

impl Hello {
    /// The launcher's `hello` for the versions it speaks.
    pub fn launcher(versions: RangeInclusive<u32>, software: impl Into<String>) -> Self {
        Hello {
            protocol: PROTOCOL.to_string(),
            role: Role::Launcher,
            min_version: Some(*versions.start()),
            max_version: Some(*versions.end()),
            version: None,
            software: software.into(),
            capabilities: Vec::new(),
        }
    }

    /// The runner's `hello` with the chosen version; capabilities are sorted.
    pub fn runner(version: u32, software: impl Into<String>, capabilities: &[&str]) -> Self {
        let mut capabilities: Vec<String> = capabilities.iter().map(|c| c.to_string()).collect();
        capabilities.sort();
        capabilities.dedup();
        Hello {
            protocol: PROTOCOL.to_string(),
            role: Role::Runner,
            min_version: None,
            max_version: None,
            version: Some(version),
            software: software.into(),
            capabilities,
        }
    }

    /// This `hello` as an envelope.
    pub fn to_envelope(&self) -> Result<Envelope> {
        Envelope::new(kind::HELLO, None, self)
    }
}

/// Runner side: the version to answer the launcher's first envelope with, or the `result` to send before
/// exiting with status 2.
pub fn accept_launcher_hello(
    first: &Envelope,
    supported: &RangeInclusive<u32>,
) -> std::result::Result<u32, Box<TaskResult>> {
    let protocol_error =
        |msg: String| Box::new(TaskResult::failure(msg, error_code::ENVELOPE_PROTOCOL_ERROR));
    if first.kind() != kind::HELLO {
        return Err(protocol_error(format!("expected hello, got {}", first.kind())));
    }
    let hello: Hello = first
        .decode()
        .map_err(|e| protocol_error(format!("invalid hello: {e}")))?;
    if hello.protocol != PROTOCOL {
        return Err(protocol_error(format!(
            "unknown protocol {:?} (expected {PROTOCOL})",
            hello.protocol
        )));
    }
    if hello.role != Role::Launcher {
        return Err(protocol_error(
            "hello from a runner, expected the launcher".to_string(),
        ));
    }
    let (Some(min), Some(max)) = (hello.min_version, hello.max_version) else {
        return Err(protocol_error(
            "hello without min_version and max_version".to_string(),
        ));
    };
    choose_version(min..=max, supported).ok_or_else(|| {
        Box::new(TaskResult::failure(
            format!(
                "unsupported protocol versions {min}..{max} (runner supports {}..{})",
                supported.start(),
                supported.end()
            ),
            error_code::PROTOCOL_VERSION_MISMATCH,
        ))
    })
}

/// The highest version both ranges contain.
pub fn choose_version(offered: RangeInclusive<u32>, supported: &RangeInclusive<u32>) -> Option<u32> {
    let high = (*offered.end()).min(*supported.end());
    let low = (*offered.start()).max(*supported.start());
    (low <= high).then_some(high)
}

/// Launcher side: the version the runner chose, or why the runner is incompatible.
pub fn accept_runner_hello(reply: &Envelope, offered: &RangeInclusive<u32>) -> Result<u32> {
    let failed = |detail: String| Error::HandshakeFailed { detail };
    match reply.kind() {
        kind::HELLO => {}
        kind::RESULT => {
            let error = reply
                .decode::<TaskResult>()
                .map(|r| r.error)
                .unwrap_or_else(|e| e.to_string());
            return Err(failed(format!(
                "incompatible runner: it answered hello with a result ({error}); use the same iterion \
                 build inside the container"
            )));
        }
        other => return Err(failed(format!("expected hello from the runner, got {other}"))),
    }
    let hello: Hello = reply.decode().map_err(|e| failed(e.to_string()))?;
    if hello.protocol != PROTOCOL {
        return Err(failed(format!(
            "unknown protocol {:?} (expected {PROTOCOL})",
            hello.protocol
        )));
    }
    if hello.role != Role::Runner {
        return Err(failed("hello from a launcher, expected the runner".to_string()));
    }
    match hello.version {
        Some(v) if offered.contains(&v) => Ok(v),
        Some(v) => Err(failed(format!(
            "runner chose version {v}, outside the offered {}..{}",
            offered.start(),
            offered.end()
        ))),
        None => Err(failed("runner hello without a version".to_string())),
    }
}
