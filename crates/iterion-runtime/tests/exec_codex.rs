//! `codex` agent and judge nodes with a fake codex CLI on the host (`NoopDriver`): argv and stdin, the JSONL
//! answer, the output schema file, thread resume, failure codes and retries, a missing CLI, and the refusal
//! of a codex node placed in a container.
mod exec_common;

use std::path::{Path, PathBuf};

use exec_common::{Harness, failure_error, summary};
use iterion_runtime::events::PlacementKind;
use iterion_runtime::store::LogLevel;
use serde_json::json;

fn fake_codex() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fake-codex.sh")
        .to_string_lossy()
        .into_owned()
}

/// A harness whose codex is the fixture script, recording into its own directory.
struct Codex {
    h: Harness,
    state: tempfile::TempDir,
}

impl Codex {
    fn new(out: &str) -> Codex {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(state.path().join("out"), out).unwrap();
        let mut h = Harness::new().env("ITERION_CODEX_BIN", &fake_codex());
        h.run_env = vec![(
            "FAKE_CODEX_DIR".into(),
            state.path().to_string_lossy().into_owned(),
        )];
        Codex { h, state }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.state.path().join(name)
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    fn argv(&self, n: usize) -> Vec<String> {
        self.file(&format!("argv.{n}"))
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// The JSONL of a successful turn answering `text` on thread `thread`.
fn answer(thread: &str, text: &str) -> String {
    [
        json!({"type": "thread.started", "thread_id": thread}),
        json!({"type": "turn.started"}),
        json!({"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "thinking"}}),
        json!({"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": text}}),
        json!({"type": "turn.completed", "usage": {"input_tokens": 120, "cached_input_tokens": 100, "output_tokens": 8}}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect()
}

const SCHEMA_NODE: &str = "schema verdict:\n  ok: bool\n\nprompt sys:\n  You review.\n\nprompt ask:\n  Review {{input.topic}}.\n\nagent a:\n  backend: \"codex\"\n  model: \"gpt-5-codex\"\n  system: sys\n  user: ask\n  output: verdict\n\nworkflow w:\n  entry: a\n  vars:\n    topic: string = \"the diff\"\n  a -> done when ok\n  a -> fail\n";

#[tokio::test]
async fn a_codex_node_runs_the_host_cli_with_the_prompt_on_stdin_and_answers_the_schema() {
    let mut c = Codex::new(&answer("th-1", "{\"ok\": true}"));
    let out = c.h.run(SCHEMA_NODE).await;
    assert_eq!(summary(&out), "finished", "{:#?}", c.h.rec.lines());
    let argv = c.argv(0);
    let work = c.h.work_dir().to_string_lossy().into_owned();
    let schema_at = argv.iter().position(|a| a == "--output-schema").unwrap() + 1;
    assert_eq!(
        argv,
        [
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--color",
            "never",
            "-C",
            work.as_str(),
            "--sandbox",
            "workspace-write",
            "-m",
            "gpt-5-codex",
            "--output-schema",
            argv[schema_at].as_str(),
            "-",
        ]
    );
    // the schema file existed during the call and is gone after it
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&c.file("schema.0")).unwrap(),
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false})
    );
    assert!(!Path::new(&argv[schema_at]).exists());
    let stdin = c.file("stdin.0");
    assert!(
        stdin.starts_with("You review.\n\nReview the diff.\n\nAnswer with only a JSON object"),
        "{stdin}"
    );
    assert!(
        argv.iter().all(|a| !a.contains("Review the diff")),
        "the prompt is never in argv"
    );
    assert_eq!(c.file("env.0"), "ITERION_NODE_ID=a\n");
    let fin = &c.h.rec.of("node_finished")[0];
    assert_eq!(
        fin["output"],
        json!({"ok": true, "_session_id": "th-1", "_backend": "codex", "_session_fingerprint": "openai-direct"})
    );
    assert_eq!(fin["_tokens"], 128);
    assert_eq!(
        c.h.rec.of("delegate_started"),
        [json!({"backend": "codex", "placement": "host", "via": "cli"})]
    );
    let notice = c.h.rec.warnings();
    assert!(
        notice.iter().any(|w| w.contains("node 'a': backend codex runs the host codex CLI outside the iterion sandbox, partially sandboxed by codex itself (--sandbox workspace-write)")),
        "{notice:?}"
    );
}

#[tokio::test]
async fn inherit_resumes_the_thread_and_readonly_is_codex_read_only() {
    let mut c = Codex::new(&answer("th-2", "plain words"));
    std::fs::write(c.path("out.0"), answer("th-1", "{\"step\": 1}")).unwrap();
    let src = "agent a:\n  backend: \"codex\"\n\njudge b:\n  backend: \"codex\"\n  readonly: true\n  session: inherit\n\nworkflow w:\n  entry: a\n  a -> b with { _session_id: \"{{outputs.a._session_id}}\", step: \"{{outputs.a.step}}\" }\n  b -> done\n";
    let out = c.h.run(src).await;
    assert_eq!(summary(&out), "finished", "{:#?}", c.h.rec.lines());
    let a = c.argv(0);
    assert!(!a.contains(&"resume".to_string()), "{a:?}");
    assert!(!a.contains(&"-m".to_string()), "codex picks its own model: {a:?}");
    let b = c.argv(1);
    assert_eq!(
        b[b.len() - 3..],
        ["resume".to_string(), "th-1".to_string(), "-".to_string()]
    );
    let sandbox = b.iter().position(|x| x == "--sandbox").unwrap();
    assert_eq!(b[sandbox + 1], "read-only");
    assert!(!b.contains(&"--output-schema".to_string()));
    // without a user prompt the input is the prompt
    assert_eq!(c.file("stdin.1"), "{\"_session_id\":\"th-1\",\"step\":1}");
    assert_eq!(
        c.h.rec.of("node_finished")[1]["output"],
        json!({"text": "plain words", "_session_id": "th-2", "_backend": "codex", "_session_fingerprint": "openai-direct"})
    );
}

#[tokio::test]
async fn fork_is_not_a_codex_feature_and_runs_fresh() {
    let mut c = Codex::new(&answer("th-9", "{}"));
    let src = "agent a:\n  backend: \"codex\"\n\nagent b:\n  backend: \"codex\"\n  session: fork\n\nworkflow w:\n  entry: a\n  a -> b with { _session_id: \"{{outputs.a._session_id}}\", _session_fingerprint: \"{{outputs.a._session_fingerprint}}\" }\n  b -> done\n";
    assert_eq!(summary(&c.h.run(src).await), "finished");
    assert!(!c.argv(1).contains(&"resume".to_string()));
    assert!(
        c.h.rec
            .warnings()
            .iter()
            .any(|w| w == "node 'b': codex cannot fork a session; running fresh"),
        "{:?}",
        c.h.rec.warnings()
    );
}

const SIMPLE: &str = "agent a:\n  backend: \"codex\"\n\nworkflow w:\n  entry: a\n  a -> done\n";

#[tokio::test]
async fn a_rate_limited_turn_is_retried_on_the_rate_limit_schedule() {
    let failed = [
        json!({"type": "thread.started", "thread_id": "th-r"}),
        json!({"type": "turn.failed", "error": {"message": "stream error: Rate limit reached for gpt-5-codex; try again in 20s"}}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect::<String>();
    let mut c = Codex::new(&failed);
    std::fs::write(c.path("exit"), "1").unwrap();
    std::fs::write(c.path("out.2"), answer("th-r", "{\"ok\": 1}")).unwrap();
    std::fs::write(c.path("exit.2"), "0").unwrap();
    let out = c.h.run(SIMPLE).await;
    assert_eq!(summary(&out), "finished", "{:#?}", c.h.rec.lines());
    let rec = c.h.rec.of("node_recovery");
    assert_eq!(rec.len(), 2);
    assert!(rec.iter().all(|r| r["code"] == "RATE_LIMITED"));
    assert_eq!(rec[0]["delay_ms"], 10000);
    assert_eq!(rec[1]["delay_ms"], 30000);
    assert!(
        rec[0]["error"].as_str().unwrap().contains("Rate limit reached"),
        "{rec:?}"
    );
    assert_eq!(c.h.rec.of("delegate_error").len(), 2);
}

#[tokio::test]
async fn an_error_event_without_a_turn_fails_the_node_with_its_message() {
    let mut c = Codex::new(&format!(
        "{}\n",
        json!({"type": "error", "message": "unexpected status 401 Unauthorized"})
    ));
    std::fs::write(c.path("exit"), "1").unwrap();
    let out = c.h.run(SIMPLE).await;
    assert_eq!(summary(&out), "EXECUTION_FAILED node=a checkpoint=a");
    assert!(
        failure_error(&out).contains("unexpected status 401 Unauthorized"),
        "{}",
        failure_error(&out)
    );
    // EXECUTION_FAILED is retried once
    assert_eq!(c.file("count").trim(), "2");
}

#[tokio::test]
async fn a_codex_cli_that_is_not_installed_is_agent_cli_unavailable() {
    let mut c = Codex::new("");
    c.h = c.h.env("ITERION_CODEX_BIN", "/nonexistent/codex");
    let out = c.h.run(SIMPLE).await;
    assert_eq!(summary(&out), "AGENT_CLI_UNAVAILABLE node=a checkpoint=-");
    let e = failure_error(&out);
    assert!(
        e.contains("the codex CLI '/nonexistent/codex' is not available on the host"),
        "{e}"
    );
    assert!(e.contains("ITERION_CODEX_BIN"), "{e}");
    assert!(c.h.rec.of("node_recovery").is_empty());
}

#[tokio::test]
async fn a_codex_node_placed_in_a_container_is_refused_without_running() {
    let mut c = Codex::new(&answer("th", "{}"));
    c.h = c.h.placed("a", PlacementKind::Run);
    let out = c.h.run(SIMPLE).await;
    assert_eq!(summary(&out), "SANDBOX_SPEC_INVALID node=a checkpoint=-");
    assert!(
        failure_error(&out).contains("backend codex cannot run inside the iterion sandbox"),
        "{}",
        failure_error(&out)
    );
    assert_eq!(c.file("count"), "", "codex never ran");
    assert!(
        !c.h.rec
            .logs
            .lock()
            .unwrap()
            .iter()
            .any(|(l, m)| *l == LogLevel::Warn && m.contains("partially sandboxed"))
    );
}
