//! The crate error type.
use std::path::PathBuf;

/// Errors of the run store, status transitions and event log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file-system operation on a store path failed.
    #[error("cannot {op} {}", path.display())]
    Io {
        /// What was attempted (`create`, `read`, `write`, `rename`, …).
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A store file was refused: a symbolic link, not a regular file, larger than its limit, or with a line
    /// longer than the limit.
    #[error("cannot read {}: it {reason}", path.display())]
    StoreFile {
        /// The file.
        path: PathBuf,
        /// Why, as a clause (`is not a regular file (a character device)`).
        reason: String,
    },
    /// A stored JSON document could not be decoded.
    #[error("cannot decode {}", path.display())]
    Decode {
        /// The file that failed to decode.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// A value could not be encoded as JSON.
    #[error("cannot encode {what} as JSON")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// A run id given by the operator does not match `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`.
    #[error(
        "invalid run id '{value}': expected 1 to 128 characters of [A-Za-z0-9._-] starting with a letter or digit"
    )]
    InvalidRunId {
        /// The rejected value.
        value: String,
    },
    /// A path component derived from data is empty or contains `/`, `\`, `..`, NUL or a control character
    /// (an internal error: `INTERNAL_ERROR`).
    #[error("unsafe {kind} '{}' for a store path", value.escape_debug())]
    UnsafePathComponent {
        /// What the component names (`run id`, `node id`, `artifact name`).
        kind: &'static str,
        /// The rejected value.
        value: String,
    },
    /// The run's `.lock` is held by another process.
    #[error("run {run_id} is locked by another process")]
    Locked {
        /// The locked run.
        run_id: String,
    },
    /// No run with this id exists in the store.
    #[error("run {run_id} not found in {}", store.display())]
    RunNotFound {
        /// The requested run id.
        run_id: String,
        /// The store dir searched.
        store: PathBuf,
    },
    /// A run name or id prefix that more than one run of the store matches.
    #[error("'{query}' matches {} runs in {}: {}", candidates.len(), store.display(), candidates.join(", "))]
    AmbiguousRun {
        /// The name or prefix given.
        query: String,
        /// The ids it matches.
        candidates: Vec<String>,
        /// The store dir searched.
        store: PathBuf,
    },
    /// A run directory with this id already exists.
    #[error("run {run_id} already exists in {}", store.display())]
    RunExists {
        /// The requested run id.
        run_id: String,
        /// The store dir.
        store: PathBuf,
    },
    /// A write to `events.jsonl` stored fewer bytes than the line; the file was truncated back.
    #[error("short write to {}: {written} of {expected} bytes", path.display())]
    ShortWrite {
        /// The event log.
        path: PathBuf,
        /// Bytes written.
        written: usize,
        /// Bytes of the line.
        expected: usize,
    },
    /// The requested status change is not an allowed transition (section 2).
    #[error("cannot move run from status {from} to {to}")]
    InvalidTransition {
        /// The current status.
        from: crate::status::RunStatus,
        /// The requested status.
        to: crate::status::RunStatus,
    },
    /// A failure code was used with a status of the other class (e.g. a resumable code for `failed`).
    #[error("failure code {code} cannot produce status {status}")]
    CodeClassMismatch {
        /// The code.
        code: crate::failure::FailureCode,
        /// The requested status.
        status: crate::status::RunStatus,
    },
    /// `failed_resumable` and `cancelled` require a checkpoint and none exists or was given.
    #[error("status {status} requires a checkpoint and the run has none")]
    MissingCheckpoint {
        /// The requested status.
        status: crate::status::RunStatus,
    },
    /// A `--var` or preset value is malformed or does not coerce to the declared type (usage error).
    #[error("invalid var '{name}': {reason}")]
    InvalidVar {
        /// The var name (or the whole argument when it has no name).
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A `--var` names a var the workflow does not declare (usage error).
    #[error("unknown var '{name}'")]
    UnknownVar {
        /// The undeclared name.
        name: String,
    },
    /// `--preset` names a preset the workflow does not declare (usage error).
    #[error("unknown preset '{name}'")]
    UnknownPreset {
        /// The undeclared preset.
        name: String,
    },
    /// A launch input is invalid (an `ITERION_SANDBOX_*` value, a recorded `--sandbox-env` name no longer set):
    /// a usage error, nothing is created.
    #[error("{message}")]
    InvalidLaunch {
        /// What is wrong.
        message: String,
    },
    /// An attachment supplied or required at launch is unusable (undeclared name, required and missing, not a
    /// readable regular file, a MIME type the declaration does not accept): a usage error, nothing is created.
    #[error("attachment '{name}': {reason}")]
    InvalidAttachment {
        /// The attachment name (or the whole argument when it has no name).
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The run was cancelled (a signal) while its sandbox was being resolved, before anything was created.
    #[error("cancelled before the run started ({reason}); nothing was created")]
    CancelledBeforeStart {
        /// Why (for example `signal SIGTERM`).
        reason: String,
    },
    /// The data dir's run-record key exists but cannot be used (not a private regular file of 64 hex digits).
    #[error("cannot use the run-record key {}: {reason}; remove it to create a new one (runs signed with it can then only be resumed with --force)", path.display())]
    RecordKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A `run.json` failed its integrity check (`RUN_RECORD_TAMPERED`): nothing acts on it and it is not changed.
    #[error("{}", tampered_message(run_id, path, *unsigned))]
    RunRecordTampered {
        /// The run.
        run_id: String,
        /// Its `run.json`.
        path: PathBuf,
        /// `true`: the record has no tag at all (older version, or the tag was removed); `false`: the tag does
        /// not match.
        unsigned: bool,
    },
    /// A resume was refused (`RESUME_INVALID`); the run record is not changed.
    #[error("cannot resume run {run_id}: {reason}")]
    ResumeInvalid {
        /// The run.
        run_id: String,
        /// Why.
        reason: String,
    },
    /// A `paused_waiting_human` run was resumed without answers; the run record is not changed (a usage error).
    #[error(
        "run {run_id} is waiting for human input: no answers provided; use --answers-file or --answer key=value"
    )]
    AnswersRequired {
        /// The run.
        run_id: String,
    },
    /// Answers were given to a run that waits for none (it would drop them); the run record is not changed
    /// (a usage error).
    #[error(
        "run {run_id} is not waiting for human input (status {status}, restarting at node '{node_id}'): answers are only taken by a paused run; resume it without answers, and answer when it pauses"
    )]
    AnswersNotWanted {
        /// The run.
        run_id: String,
        /// Its status.
        status: crate::status::RunStatus,
        /// The node it restarts at.
        node_id: String,
    },
    /// The answers do not fit the human node's output schema; the run record is not changed (a usage error).
    #[error("run {run_id}: the answers for human node '{node_id}' do not fit its output schema: {reason}")]
    AnswersInvalid {
        /// The run.
        run_id: String,
        /// The human node.
        node_id: String,
        /// Every key that is wrong, and the keys the node takes.
        reason: String,
    },
    /// The workflow does not compile or uses constructs this version cannot execute; nothing was
    /// created.
    #[error("workflow {file} has errors ({} diagnostic(s))", diagnostics.len())]
    Compile {
        /// The workflow file.
        file: String,
        /// Every diagnostic.
        diagnostics: Vec<iterion_spec::diag::Diagnostic>,
    },
    /// The host layer refused its input (an invalid forced driver name: a usage error).
    #[error(transparent)]
    Host(#[from] iterion_host::Error),
    /// The runtime builder is missing a required part.
    #[error("the runtime builder is missing {what}")]
    Incomplete {
        /// What is missing.
        what: &'static str,
    },
    /// A git operation of `worktree: auto` failed (`WORKTREE_FAILED` when creating the worktree).
    #[error("worktree: {op} failed: {reason}")]
    Worktree {
        /// The git step (`worktree add`, `commit`, `branch`, `worktree remove`, …).
        op: &'static str,
        /// What git reported.
        reason: String,
    },
}

fn tampered_message(run_id: &str, path: &std::path::Path, unsigned: bool) -> String {
    if unsigned {
        format!(
            "RUN_RECORD_TAMPERED: run {run_id} cannot be resumed: {} has no integrity tag bound to this run (it \
             was written by an older iterion, or the tag was removed)\n  hint: check that its file_path, work_dir and sandbox settings \
             are the ones you launched with (iterion runs show {run_id}), then resume with --force",
            path.display()
        )
    } else {
        format!(
            "RUN_RECORD_TAMPERED: run {run_id} cannot be resumed: {} does not match its integrity tag, so something \
             without this host's key (for example a sandboxed process) changed it or copied another run's record there\n  hint: do not trust this run's \
             record; inspect it with iterion runs show {run_id} and start a new run",
            path.display()
        )
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<iterion_boundary::Error> for Error {
    fn from(e: iterion_boundary::Error) -> Error {
        match e {
            iterion_boundary::Error::StoreIo { op, path, source } => Error::Io { op, path, source },
            iterion_boundary::Error::StoreFile { path, reason } => Error::StoreFile { path, reason },
            other => Error::StoreFile {
                path: PathBuf::new(),
                reason: other.to_string(),
            },
        }
    }
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
