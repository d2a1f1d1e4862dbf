//! The complete version-1 transcript: the real multiplexer against the real runner bootstrap and channel, both
//! in memory, with every line each side wrote recorded in order.

mod common;

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use common::{Recorder, patiently};
use iterion_envelope::launcher::{self, Options};
use iterion_envelope::runner::{self, RunnerOptions};
use iterion_envelope::{Task, TaskResult, ToolDef, ToolOutcome};
use serde_json::json;
use tokio::io::AsyncWrite;

type Log = Arc<Mutex<Vec<String>>>;

/// Records every complete line written through it, prefixed with its direction.
struct Tap<W> {
    inner: W,
    direction: &'static str,
    partial: Vec<u8>,
    log: Log,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Tap<W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let n = std::task::ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        this.partial.extend_from_slice(&buf[..n]);
        while let Some(end) = this.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = this.partial.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..end]).into_owned();
            this.log
                .lock()
                .unwrap()
                .push(format!("{} {text}", this.direction));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn tap<W>(inner: W, direction: &'static str, log: &Log) -> Tap<W> {
    Tap {
        inner,
        direction,
        partial: Vec::new(),
        log: Arc::clone(log),
    }
}

/// 08's complete transcript, line for line.
const EXPECTED: &str = r#"L→R {"type":"hello","data":{"protocol":"iterion.envelope","role":"launcher","min_version":1,"max_version":1,"software":"iterion 0.4.0"}}
R→L {"type":"hello","data":{"protocol":"iterion.envelope","role":"runner","version":1,"software":"iterion 0.4.0","capabilities":["cancel","event","session_capture"]}}
L→R {"type":"task","data":{"node_id":"fixer","run_id":"r1","user_prompt":"Fix the failing test.","model":"anthropic/claude-sonnet-4-5","tool_max_steps":10,"has_tools":true,"tool_defs":[{"name":"bash","input_schema":{"type":"object"}},{"name":"notify_team","input_schema":{"type":"object"}}],"output_schema":{"type":"object"},"work_dir":"/workspace"}}
R→L {"type":"event","data":{"type":"llm_request","payload":{"model":"claude-sonnet-4-5"}}}
R→L {"type":"tool_call","id":"call-1","data":{"name":"notify_team","input":{"text":"fixing"}}}
L→R {"type":"tool_result","id":"call-1","data":{"output":"sent"}}
R→L {"type":"session_capture","data":[{"role":"user","content":[{"type":"text","text":"Fix the failing test."}]}]}
R→L {"type":"result","data":{"output":{"fixed":true},"tokens":1834,"duration_ms":5120,"backend_name":"claw"}}"#;

#[tokio::test]
async fn complete_transcript_version_1() {
    let log: Log = Arc::default();
    let (launcher_end, runner_end) = tokio::io::duplex(64 * 1024);
    let (launcher_in, launcher_out) = tokio::io::split(launcher_end);
    let (runner_in, runner_out) = tokio::io::split(runner_end);

    let schema = json!({"type": "object"});
    let tool = |name: &str| ToolDef {
        name: name.into(),
        input_schema: Some(schema.clone()),
        ..ToolDef::default()
    };
    let task = Task {
        node_id: "fixer".into(),
        run_id: "r1".into(),
        user_prompt: "Fix the failing test.".into(),
        model: "anthropic/claude-sonnet-4-5".into(),
        tool_max_steps: 10,
        has_tools: true,
        tool_defs: vec![tool("bash"), tool("notify_team")],
        output_schema: Some(schema.clone()),
        work_dir: "/workspace".into(),
        ..Task::default()
    };

    let runner_out = tap(runner_out, "R→L", &log);
    let runner = tokio::spawn(async move {
        let mut options = RunnerOptions::new("iterion 0.4.0");
        options.diagnostics = Arc::new(|line| panic!("unexpected runner diagnostic: {line}"));
        let boot = runner::bootstrap(runner_in, runner_out, options).await.unwrap();
        let channel = boot.channel;
        channel
            .emit_event(
                "llm_request",
                json!({"model": "claude-sonnet-4-5"}).as_object().cloned(),
            )
            .await;
        // `bash` is a builtin: it runs where the runner runs and produces no envelope.
        let sent = channel
            .run_tool("notify_team", Some(json!({"text": "fixing"})))
            .await;
        assert_eq!(sent, ToolOutcome::Output("sent".into()));
        let snapshot =
            json!([{"role": "user", "content": [{"type": "text", "text": boot.task.user_prompt}]}]);
        channel.capture_session(&snapshot).await;
        let result = TaskResult {
            output: json!({"fixed": true}).as_object().cloned(),
            tokens: 1834,
            duration_ms: 5120,
            backend_name: "claw".into(),
            ..TaskResult::default()
        };
        channel.finish(&result).await.unwrap()
    });

    let handler = Arc::new(Recorder::with_tool(|_, _| async {
        ToolOutcome::Output("sent".into())
    }));
    let result = patiently(
        "multiplexer",
        launcher::run(
            launcher_in,
            tap(launcher_out, "L→R", &log),
            Arc::clone(&handler),
            &task,
            None,
            Options::new("iterion 0.4.0"),
        ),
    )
    .await
    .unwrap();
    assert_eq!(patiently("runner", runner).await.unwrap(), 0);

    assert_eq!(result.tokens, 1834);
    assert_eq!(result.output, json!({"fixed": true}).as_object().cloned());
    assert_eq!(
        handler.calls(),
        vec![("notify_team".to_string(), Some(json!({"text": "fixing"})))]
    );
    assert_eq!(
        handler.log(),
        [
            "event:llm_request",
            r#"capture:[{"role":"user","content":[{"type":"text","text":"Fix the failing test."}]}]"#
        ]
    );
    let transcript = log.lock().unwrap().join("\n");
    assert_eq!(transcript, EXPECTED);
    insta::assert_snapshot!(transcript);
}
