//! Default bounds and limits shared by every driver (03 §13).

use std::time::Duration;

/// Engine ping (`Unavailable` on expiry).
pub const ENGINE_PING: Duration = Duration::from_secs(5);
/// Any other single, non-streaming engine API request (`Engine` on expiry).
pub const ENGINE_REQUEST: Duration = Duration::from_secs(60);
/// One image pull (`ITERION_SANDBOX_PULL_TIMEOUT`).
pub const PULL: Duration = Duration::from_secs(10 * 60);
/// One image build (`ITERION_SANDBOX_BUILD_TIMEOUT`).
pub const BUILD: Duration = Duration::from_secs(30 * 60);
/// Start, create to shell probe (`ITERION_SANDBOX_START_TIMEOUT`).
pub const START: Duration = Duration::from_secs(5 * 60);
/// Post-create, whole phase (`ITERION_SANDBOX_POST_CREATE_TIMEOUT`).
pub const POST_CREATE: Duration = Duration::from_secs(30 * 60);
/// Exec kill grace (`ExecRequest::kill_grace`).
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// Cleanup, all steps together.
pub const CLEANUP: Duration = Duration::from_secs(30);
/// Container stop grace (within a 10 s request bound).
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Registry credential helper.
pub const CREDENTIAL_HELPER: Duration = Duration::from_secs(10);
/// Reaper pass at run start (list and remove).
pub const REAPER_PASS: Duration = Duration::from_secs(10);
/// Exec output buffer per stream (backpressure beyond it).
pub const EXEC_OUTPUT_BUFFER: usize = 256 * 1024;
/// `exec_collect` capture per stream.
pub const EXEC_CAPTURE: usize = 16 * 1024 * 1024;
/// Size of the exec tmpfs (`/run/iterion/exec`).
pub const EXEC_TMPFS: u64 = 64 * 1024 * 1024;
/// Relay concurrent connections.
pub const RELAY_CONNECTIONS: usize = 1024;
/// Forced cleanup on the panic path.
pub const FORCE_CLEANUP: Duration = Duration::from_secs(5);
