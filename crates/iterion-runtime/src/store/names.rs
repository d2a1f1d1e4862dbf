//! File names inside a run directory.
/// The run document.
pub const RUN_JSON: &str = "run.json";
/// The event log.
pub const EVENTS: &str = "events.jsonl";
/// The human log.
pub const RUN_LOG: &str = "run.log";
/// The advisory lock.
pub const LOCK: &str = ".lock";
/// Published outputs.
pub const ARTIFACTS: &str = "artifacts";
/// Claw session snapshots.
pub const SESSIONS: &str = "sessions";
/// Human interaction records.
pub const INTERACTIONS: &str = "interactions";
/// Files produced by the run.
pub const ARTIFACT_FILES: &str = "artifact_files";
/// Egress proxy socket directory.
pub const NET: &str = "net";
/// Attachments supplied at launch, one directory per name (mounted read-only at `/run/iterion/attachments`).
pub const ATTACHMENTS: &str = "attachments";
