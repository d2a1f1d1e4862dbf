//! The run document `run.json` (section 1.4), its checkpoint (1.6) and recorded sandbox settings (1.7).
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::failure::{FailureCode, FailurePhase};
use crate::status::RunStatus;

use super::files::write_atomic;

/// `run.json.format_version` written by this version.
pub const FORMAT_VERSION: u32 = 1;

/// The largest `run.json` the store reads (its checkpoint holds every output of the run).
pub const MAX_RUN_JSON: u64 = 64 << 20;

/// The bytes of a `run.json`: a regular file, never through a link, at most [`MAX_RUN_JSON`] bytes.
pub fn read_run_json(path: &Path) -> Result<Vec<u8>> {
    Ok(iterion_boundary::fs::read_file(path, MAX_RUN_JSON)?)
}

/// The process that owns a run (`run.json.owner`, also written into `.lock`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Process start time, Unix seconds.
    pub started_at: u64,
}

/// Launch inputs (`run.json.inputs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchInputs {
    /// `--preset`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// `--var` strings before coercion.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
}

fn is_empty_map<K, V>(m: &BTreeMap<K, V>) -> bool {
    m.is_empty()
}

/// The checkpoint (section 1.6): everything resume needs; events are never replayed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Node to (re-)execute on resume.
    pub node_id: String,
    /// Node id → latest output.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub outputs: Map<String, Value>,
    /// Node id → outputs within the current activation of each loop.
    #[serde(default, skip_serializing_if = "is_empty_map")]
    pub history: BTreeMap<String, Vec<Value>>,
    /// Loop name → traversals in the current activation.
    #[serde(default, skip_serializing_if = "is_empty_map")]
    pub loop_counters: BTreeMap<String, u64>,
    /// Loop name → output of the loop edge's source at the previous traversal.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub loop_previous_output: Map<String, Value>,
    /// Artifact name → next version number.
    #[serde(default, skip_serializing_if = "is_empty_map")]
    pub artifact_versions: BTreeMap<String, u64>,
    /// Resolved, typed vars.
    #[serde(default)]
    pub vars: Map<String, Value>,
    /// Node id → error code → attempts made.
    #[serde(default, skip_serializing_if = "is_empty_map")]
    pub node_attempts: BTreeMap<String, BTreeMap<String, u32>>,
    /// The input already built for `node_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_input: Option<Value>,
    /// Router id → selections made by a round-robin router in this run.
    #[serde(default, skip_serializing_if = "is_empty_map")]
    pub round_robin_counters: BTreeMap<String, u64>,
    /// The interaction a paused run waits for (`paused_waiting_human`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interaction_id: Option<String>,
    /// The questions of that interaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interaction_questions: Option<Value>,
    /// The agent session to continue when an agent asked (interaction protocol).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_session_id: Option<String>,
    /// The backend of the agent that asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_name: Option<String>,
    /// Agent session id → where the node that made it ran (a session never crosses placements).
    #[serde(default, skip_serializing_if = "is_empty_map")]
    pub session_placements: BTreeMap<String, crate::events::PlacementKind>,
    /// How many times in a row that agent asked (at most 5 re-invocations).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub interaction_depth: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Checkpoint {
    /// The stub checkpoint `{node_id: entry, vars}` written when a run stops before any node ran.
    pub fn stub(entry: impl Into<String>, vars: Map<String, Value>) -> Checkpoint {
        Checkpoint {
            node_id: entry.into(),
            vars,
            ..Checkpoint::default()
        }
    }
}

/// One `--sandbox-env` entry as recorded (values only for the `value` form, which is pass-class only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "form", rename_all = "snake_case")]
pub enum OperatorEnvEntry {
    /// `--sandbox-env NAME`: re-read from the environment on resume.
    Copy {
        /// Variable name.
        name: String,
    },
    /// `--sandbox-env NAME=VALUE`.
    Value {
        /// Variable name.
        name: String,
        /// Literal value (never a secret: pass-class names only).
        value: String,
    },
}

/// Inputs to sandbox resolution as seen at launch (`sandbox.requested`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRequested {
    /// `--sandbox`.
    pub cli_mode: Option<String>,
    /// `--sandbox-host-state`.
    pub cli_host_state: Option<String>,
    /// `--sandbox-default-image`.
    pub cli_default_image: Option<String>,
    /// `--sandbox-runtime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_runtime: Option<String>,
    /// `--sandbox-driver`.
    pub cli_driver: Option<String>,
    /// `--sandbox-env` entries.
    #[serde(default)]
    pub operator_env: Vec<OperatorEnvEntry>,
    /// `ITERION_SANDBOX_DEFAULT`, `ITERION_SANDBOX_HOST_STATE`, `ITERION_SANDBOX_DEFAULT_IMAGE` as literal strings.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The built-in default mode of the caller (`auto` for `iterion run`).
    #[serde(default)]
    pub builtin_default_mode: String,
}

/// `sandbox.skipped`: a scope that degraded to unsandboxed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedScope {
    /// `run` or a node id.
    pub scope: String,
    /// Why.
    pub reason: String,
}

/// Names contributed by each environment layer (never values).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvLayers {
    /// Repository layer.
    #[serde(default)]
    pub repo: Vec<String>,
    /// Workflow layer.
    #[serde(default)]
    pub workflow: Vec<String>,
    /// Operator layer.
    #[serde(default)]
    pub operator: Vec<String>,
}

/// Where one node executes (`sandbox.nodes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlacementRecord {
    /// `host`, `run` or `own`.
    pub placement: crate::events::PlacementKind,
    /// Why (for host placements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Spec key of an `own` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Image of an `own` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// `sandbox.network`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkRecord {
    /// Whether egress is enforced.
    pub enforced: bool,
    /// `open`, `relay`, `advisory` or `k8s`.
    pub placement: String,
}

/// One container created for the run (`sandbox.containers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// `run` or `node`.
    pub role: String,
    /// Engine id (12 characters).
    pub id: String,
    /// Container name.
    pub name: String,
    /// Spec key of a node container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Recorded sandbox settings (`run.json.sandbox`, section 1.7), persisted before any container is created.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxRecord {
    /// Inputs to resolution as seen at launch.
    #[serde(default)]
    pub requested: SandboxRequested,
    /// Floor applications (the plan's entries, as JSON).
    #[serde(default)]
    pub floors: Vec<Value>,
    /// Whether any scope is sandboxed.
    #[serde(default)]
    pub active: bool,
    /// Selected driver.
    #[serde(default)]
    pub driver: Option<String>,
    /// A scope that degraded to unsandboxed.
    #[serde(default)]
    pub skipped: Option<SkippedScope>,
    /// The resolved run-scope sandbox in its JSON form.
    #[serde(default)]
    pub resolved: Option<iterion_spec::resolved::ResolvedSandbox>,
    /// Effective container user (`uid:gid`).
    #[serde(default)]
    pub effective_user: Option<String>,
    /// Names contributed by each env layer.
    #[serde(default)]
    pub env_layers: EnvLayers,
    /// Merge report entries (names and rules only).
    #[serde(default)]
    pub env_report: Vec<Value>,
    /// Node id → placement.
    #[serde(default)]
    pub nodes: BTreeMap<String, NodePlacementRecord>,
    /// Network placement.
    #[serde(default)]
    pub network: Option<NetworkRecord>,
    /// Containers created.
    #[serde(default)]
    pub containers: Vec<ContainerRecord>,
    /// Always `false` in this DSL version.
    #[serde(default)]
    pub file_secrets_dropped: bool,
    /// Fields this version does not know, preserved on rewrite.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One attachment of a run, as its `meta.json` and `run.json.attachments` record it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentRecord {
    /// The declared attachment name.
    pub name: String,
    /// The base name of the supplied file (the stored file's name).
    pub original_filename: String,
    /// The sniffed MIME type.
    pub mime: String,
    /// Size in bytes.
    pub size: u64,
    /// Lower-case hex SHA-256 of the content.
    pub sha256: String,
    /// When it was stored (RFC 3339).
    pub created_at: String,
    /// The stored file relative to the store dir (`runs/<id>/attachments/<name>/<file>`).
    pub storage_ref: String,
}

/// The run document `run.json` (section 1.4). Unknown top-level fields are kept in `extra` and written back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunDocument {
    /// `1`.
    pub format_version: u32,
    /// Run id.
    pub id: String,
    /// Friendly name.
    pub name: String,
    /// Name of the `workflow` declaration.
    pub workflow_name: String,
    /// Lower-case hex SHA-256 of the workflow file bytes.
    pub workflow_hash: String,
    /// Absolute path of the workflow file.
    pub file_path: String,
    /// Status (section 2).
    pub status: RunStatus,
    /// Launch inputs.
    #[serde(default)]
    pub inputs: LaunchInputs,
    /// Creation time, RFC 3339 UTC.
    pub created_at: String,
    /// Last write, RFC 3339 UTC.
    pub updated_at: String,
    /// Set by a terminal status, cleared by `running`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Error of the last failure or cancellation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Code of the last failure or cancellation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<FailureCode>,
    /// Setup phase of a sandbox failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_phase: Option<FailurePhase>,
    /// Checkpoint (kept for resumable statuses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Checkpoint>,
    /// Node id → latest artifact version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_index: Option<BTreeMap<String, u64>>,
    /// Absolute host work dir.
    #[serde(default)]
    pub work_dir: String,
    /// Whether the run uses a git worktree.
    #[serde(default)]
    pub worktree: bool,
    /// The attachments copied into the run directory at launch; a resume reads these, never the
    /// original paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<AttachmentRecord>,
    /// Git top-level of the source repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_root: Option<String>,
    /// Worktree base commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<String>,
    /// Worktree final commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_commit: Option<String>,
    /// Worktree final branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_branch: Option<String>,
    /// `ITERION_*` variables at launch, secrets redacted ([`launch_env`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_env: Option<BTreeMap<String, String>>,
    /// Version of the binary that created or last resumed the run.
    #[serde(default)]
    pub iterion_version: String,
    /// The process that currently owns the run.
    #[serde(default)]
    pub owner: Owner,
    /// Recorded sandbox settings.
    #[serde(default)]
    pub sandbox: SandboxRecord,
    /// Integrity tag (`hmac-sha256-v2:<hex>`) over the run id, the run directory and the rest of the document,
    /// keyed by the host secret of the data dir; absent when the writer had no key. Set by [`RunDocument::save_signed`], checked before a resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<String>,
    /// Top-level fields this version does not know, preserved on rewrite.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What a new run document is made of; the rest starts empty.
#[derive(Debug, Clone)]
pub struct NewRun {
    /// Run id.
    pub id: String,
    /// Name of the `workflow` declaration.
    pub workflow_name: String,
    /// Absolute path of the workflow file.
    pub file_path: String,
    /// Bytes of the workflow file (hashed into `workflow_hash`).
    pub workflow_bytes: Vec<u8>,
    /// Launch inputs.
    pub inputs: LaunchInputs,
    /// Absolute host work dir.
    pub work_dir: String,
    /// The process environment (only `ITERION_*` names are recorded, redacted).
    pub env: BTreeMap<String, String>,
    /// Version of the binary.
    pub iterion_version: String,
    /// The owning process.
    pub owner: Owner,
    /// Creation time, RFC 3339 UTC.
    pub now: String,
}

impl RunDocument {
    /// A `running` document for a new run; the friendly name and hash are derived here.
    pub fn new(new: NewRun) -> RunDocument {
        RunDocument {
            format_version: FORMAT_VERSION,
            name: super::ids::friendly_name(&new.file_path, &new.id),
            id: new.id,
            workflow_name: new.workflow_name,
            workflow_hash: super::ids::sha256_hex(&new.workflow_bytes),
            file_path: new.file_path,
            status: RunStatus::Running,
            inputs: new.inputs,
            created_at: new.now.clone(),
            updated_at: new.now,
            finished_at: None,
            error: None,
            failure_code: None,
            failure_phase: None,
            checkpoint: None,
            artifact_index: None,
            work_dir: new.work_dir,
            worktree: false,
            attachments: Vec::new(),
            repo_root: None,
            base_commit: None,
            final_commit: None,
            final_branch: None,
            launch_env: Some(launch_env(&new.env)),
            iterion_version: new.iterion_version,
            owner: new.owner,
            sandbox: SandboxRecord::default(),
            integrity: None,
            extra: Map::new(),
        }
    }

    /// Pretty-printed (2-space indent) JSON with a trailing newline.
    pub fn to_pretty_json(&self) -> Result<String> {
        let mut s = serde_json::to_string_pretty(self).map_err(|source| Error::Encode {
            what: "run document",
            source,
        })?;
        s.push('\n');
        Ok(s)
    }

    /// Reads and decodes a `run.json`: a regular file, never through a link, at most [`MAX_RUN_JSON`] bytes
    /// ([`Error::StoreFile`] naming it otherwise).
    pub fn load(path: &Path) -> Result<RunDocument> {
        let bytes = read_run_json(path)?;
        serde_json::from_slice(&bytes).map_err(|source| Error::Decode {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Writes the document atomically to `path` ([`write_atomic`]), without an integrity tag.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.save_signed(path, None)
    }

    /// Writes the document atomically to `path`, with an integrity tag computed with the key for the run the
    /// binding names (none without a key: a stale tag is never carried over to changed content).
    pub fn save_signed(
        &self,
        path: &Path,
        key: Option<(&super::integrity::RecordKey, super::integrity::RecordBinding<'_>)>,
    ) -> Result<()> {
        write_atomic(path, self.signed_text(key)?.as_bytes())
    }

    /// Writes the document atomically as `run.json` of the run directory `dir` (a handle: a run directory
    /// renamed or replaced by a link after it was opened does not redirect the write), signed as
    /// [`RunDocument::save_signed`].
    pub fn save_in(
        &self,
        dir: &iterion_boundary::fs::Dir,
        key: Option<(&super::integrity::RecordKey, super::integrity::RecordBinding<'_>)>,
    ) -> Result<()> {
        Ok(dir.write_atomic(super::names::RUN_JSON, self.signed_text(key)?.as_bytes())?)
    }

    fn signed_text(
        &self,
        key: Option<(&super::integrity::RecordKey, super::integrity::RecordBinding<'_>)>,
    ) -> Result<String> {
        let mut doc = self.clone();
        doc.integrity = None;
        let mut text = doc.to_pretty_json()?;
        if let Some((k, binding)) = key {
            doc.integrity = Some(k.sign_text(&text, binding)?);
            text = doc.to_pretty_json()?;
        }
        Ok(text)
    }

    /// Decodes the bytes of the `run.json` at `path` (named in the error).
    pub fn decode(bytes: &[u8], path: &Path) -> Result<RunDocument> {
        serde_json::from_slice(bytes).map_err(|source| Error::Decode {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// The `ITERION_*` variables of `env`, each value replaced by `"[redacted]"` when the name contains `TOKEN`,
/// `KEY`, `SECRET`, `PASSWORD`, `CREDENTIAL` or `AUTH`.
pub fn launch_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    const SENSITIVE: &[&str] = &["TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH"];
    env.iter()
        .filter(|(k, _)| k.starts_with("ITERION_"))
        .map(|(k, v)| {
            let upper = k.to_ascii_uppercase();
            let value = if SENSITIVE.iter().any(|s| upper.contains(s)) {
                "[redacted]".to_owned()
            } else {
                v.clone()
            };
            (k.clone(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn sample(now: &str) -> RunDocument {
        RunDocument::new(NewRun {
            id: "r1".into(),
            workflow_name: "wf".into(),
            file_path: "/w/app/flow.bot".into(),
            workflow_bytes: b"workflow wf {}".to_vec(),
            inputs: LaunchInputs::default(),
            work_dir: "/w/app".into(),
            env: BTreeMap::new(),
            iterion_version: "0.1.0".into(),
            owner: Owner {
                host: "h".into(),
                pid: 1,
                started_at: 2,
            },
            now: now.into(),
        })
    }

    #[test]
    fn crash_between_temp_file_and_rename_keeps_previous_document() {
        // ST8
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        let old = sample("2026-01-14T09:31:07Z");
        old.save(&path).unwrap();
        let mut new = old.clone();
        new.workflow_name = "changed".into();
        // A staged temporary file, as write_atomic leaves it when the process dies before its rename.
        let tmp = dir.path().join(".run.json.tmp-0123456789abcdef");
        fs::write(&tmp, new.to_pretty_json().unwrap()).unwrap();
        assert!(tmp.exists());
        assert_eq!(RunDocument::load(&path).unwrap(), old);
        // A torn temp file is equally harmless.
        fs::write(dir.path().join(".run.json.tmp-dead"), b"{\"format_ver").unwrap();
        assert_eq!(RunDocument::load(&path).unwrap(), old);
    }

    #[test]
    fn saved_document_is_pretty_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        sample("2026-01-14T09:31:07Z").save(&path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("{\n  \"format_version\": 1,\n  \"id\": \"r1\""),
            "{text}"
        );
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temp file left behind");
    }

    fn check_launch_env(input: &[(&str, &str)], expect: serde_json::Value) {
        let env = input
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            serde_json::to_value(launch_env(&env)).unwrap(),
            expect,
            "{input:?}"
        );
    }

    #[test]
    fn launch_env_is_filtered_and_redacted() {
        use serde_json::json;
        // ST10
        check_launch_env(
            &[("ITERION_API_TOKEN", "abc"), ("ITERION_LOG_LEVEL", "debug")],
            json!({"ITERION_API_TOKEN": "[redacted]", "ITERION_LOG_LEVEL": "debug"}),
        );
        check_launch_env(&[("HOME", "/home/jo"), ("GITHUB_TOKEN", "t")], json!({}));
        check_launch_env(
            &[("ITERION_SIGNING_KEY", "k")],
            json!({"ITERION_SIGNING_KEY": "[redacted]"}),
        );
        check_launch_env(
            &[("ITERION_DB_PASSWORD", "p")],
            json!({"ITERION_DB_PASSWORD": "[redacted]"}),
        );
        check_launch_env(
            &[("ITERION_X_SECRET", "s")],
            json!({"ITERION_X_SECRET": "[redacted]"}),
        );
        check_launch_env(
            &[("ITERION_CREDENTIALS", "c")],
            json!({"ITERION_CREDENTIALS": "[redacted]"}),
        );
        check_launch_env(
            &[("ITERION_AUTH_HEADER", "a")],
            json!({"ITERION_AUTH_HEADER": "[redacted]"}),
        );
        check_launch_env(
            &[("ITERION_SANDBOX_DEFAULT", "auto")],
            json!({"ITERION_SANDBOX_DEFAULT": "auto"}),
        );
    }

    #[test]
    fn sandbox_record_round_trips_the_spec_example() {
        // 05 §1.7, elisions filled in.
        let example = serde_json::json!({
          "requested": {
            "cli_mode": "auto", "cli_host_state": null, "cli_default_image": null, "cli_driver": null,
            "operator_env": [{"name": "NPM_TOKEN", "form": "copy"}, {"name": "CI_LABEL", "form": "value", "value": "nightly"}],
            "env": {"ITERION_SANDBOX_DEFAULT": "", "ITERION_SANDBOX_HOST_STATE": "", "ITERION_SANDBOX_DEFAULT_IMAGE": ""},
            "builtin_default_mode": "auto"
          },
          "floors": [],
          "active": true,
          "driver": "docker",
          "skipped": null,
          "resolved": { "mode": "auto", "source": "default (default image: ghcr.io/socialgouv/iterion-sandbox-slim:v0.4.0)",
                        "origin": "default_image", "devcontainer": null, "image": "ghcr.io/socialgouv/iterion-sandbox-slim:v0.4.0",
                        "build": null, "user": null, "workspace_folder": "/home/jo/src/app", "post_create": [],
                        "mounts": [], "host_state": "auto", "host_state_source": "default",
                        "network": {"mode": "open", "preset": null, "rules": [], "defaulted": false, "source": "default"},
                        "degrade_allowed": true, "key": "5f0c1a2b" },
          "effective_user": "1000:1000",
          "env_layers": {"repo": [], "workflow": ["CI"], "operator": ["NPM_TOKEN"]},
          "env_report": [],
          "nodes": {"notify": {"placement": "host", "reason": "node sandbox: none"}, "tests": {"placement": "run"}},
          "network": {"enforced": false, "placement": "open"},
          "containers": [{"role": "run", "id": "3f2a9c1d4e5b", "name": "iterion-0194f7e2"}],
          "file_secrets_dropped": false
        });
        let record: SandboxRecord = serde_json::from_value(example.clone()).unwrap();
        assert_eq!(record.requested.operator_env.len(), 2);
        assert!(record.resolved.is_some());
        let back = serde_json::to_value(&record).unwrap();
        for key in [
            "requested",
            "floors",
            "active",
            "driver",
            "skipped",
            "effective_user",
            "env_layers",
            "nodes",
            "network",
            "containers",
        ] {
            assert_eq!(back[key], example[key], "{key}");
        }
        assert_eq!(back["resolved"]["mode"], "auto");
        assert_eq!(back["resolved"]["network"]["mode"], "open");
        assert_eq!(back["resolved"]["workspace_folder"], "/home/jo/src/app");
    }

    #[test]
    fn stub_checkpoint_has_only_node_and_vars() {
        let mut vars = Map::new();
        vars.insert("n".into(), serde_json::json!(3));
        let stub = Checkpoint::stub("entry", vars);
        assert_eq!(
            serde_json::to_value(&stub).unwrap(),
            serde_json::json!({"node_id": "entry", "vars": {"n": 3}})
        );
    }
}
