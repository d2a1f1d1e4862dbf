//! The launcher-side multiplexer against a scripted runner: the handshake from the launcher's side (HS) and the
//! multiplexer vectors (MX).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Peer, Recorder, patiently, pipes, show};
use iterion_envelope::launcher::{self, Handler, Level, NoHandler, Options};
use iterion_envelope::{
    Error, Task, TaskResult, ToolDef, ToolOutcome, ToolResult, advertised_tool, error_code, kind,
    node_failure,
};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

fn task() -> Task {
    let def = |name: &str| ToolDef {
        name: name.into(),
        ..ToolDef::default()
    };
    Task {
        node_id: "fixer".into(),
        has_tools: true,
        tool_defs: vec![def("Bash"), def("mcp.github.search")],
        ..Task::default()
    }
}

fn options() -> Options {
    Options::new("iterion test")
}

/// Starts the multiplexer on its own task; the returned peer plays the runner.
fn start<H: Handler>(handler: Arc<H>, options: Options) -> (JoinHandle<Result<TaskResult, Error>>, Peer) {
    let (ends, peer) = pipes();
    let task = task();
    let run =
        tokio::spawn(
            async move { launcher::run(ends.read, ends.write, handler, &task, None, options).await },
        );
    (run, peer)
}

async fn outcome(run: JoinHandle<Result<TaskResult, Error>>) -> Result<TaskResult, Error> {
    patiently("multiplexer", run).await.unwrap()
}

/// Runs a tool exchange: the runner sends `call` after bootstrap and the launcher's reply must be `expect`.
async fn check_tool_reply<H: Handler>(handler: Arc<H>, call: &str, expect: &str) {
    let (run, mut peer) = start(handler, options());
    peer.runner_bootstrap().await;
    peer.line(call).await;
    let reply = peer.expect(kind::TOOL_RESULT).await;
    assert_eq!(show(&reply), expect);
    peer.line(r#"{"type":"result","data":{"tokens":1}}"#).await;
    outcome(run).await.unwrap();
}

#[tokio::test]
async fn mx1_tool_call_is_dispatched_and_the_result_returned() {
    let handler = Arc::new(Recorder::with_tool(|name, _| async move {
        ToolOutcome::Output(format!("ok:{name}"))
    }));
    let (run, mut peer) = start(Arc::clone(&handler), options());
    let hello = peer.expect(kind::HELLO).await;
    assert_eq!(
        hello.data_json(),
        Some(
            r#"{"protocol":"iterion.envelope","role":"launcher","min_version":1,"max_version":1,"software":"iterion test"}"#
        )
    );
    peer.line(r#"{"type":"hello","data":{"protocol":"iterion.envelope","role":"runner","version":1}}"#)
        .await; // HS1
    let sent = peer.expect(kind::TASK).await;
    assert_eq!(sent.decode::<Task>().unwrap(), task());
    peer.line(r#"{"type":"tool_call","id":"call-1","data":{"name":"Bash","input":{"command":"echo hi"}}}"#)
        .await;
    let reply = peer.expect(kind::TOOL_RESULT).await;
    assert_eq!(
        show(&reply),
        r#"{"type":"tool_result","id":"call-1","data":{"output":"ok:Bash"}}"#
    );
    peer.line(r#"{"type":"result","data":{"tokens":42,"backend_name":"claw"}}"#)
        .await;
    let result = outcome(run).await.unwrap();
    assert_eq!((result.tokens, result.backend_name.as_str()), (42, "claw"));
    assert_eq!(
        handler.calls(),
        vec![("Bash".to_string(), Some(json!({"command": "echo hi"})))]
    );
    peer.expect_eof().await; // stdin closed after the result
}

#[tokio::test]
async fn mx2_no_dispatcher() {
    check_tool_reply(
        Arc::new(NoHandler),
        r#"{"type":"tool_call","id":"call-1","data":{"name":"Bash"}}"#,
        r#"{"type":"tool_result","id":"call-1","data":{"error":"launcher: no tool dispatcher registered (host doesn't know how to execute this tool)"}}"#,
    )
    .await;
}

/// A handler as the runtime writes it: only advertised tools, aliases accepted.
fn runtime_handler() -> Arc<Recorder> {
    Arc::new(Recorder::with_tool(|name, _| async move {
        match advertised_tool(&task().tool_defs, &name) {
            Ok(def) => ToolOutcome::Output(format!("dispatched:{}", def.name)),
            Err(refusal) => ToolOutcome::Error(refusal),
        }
    }))
}

#[tokio::test]
async fn mx3_unknown_tool_is_refused() {
    check_tool_reply(
        runtime_handler(),
        r#"{"type":"tool_call","id":"call-1","data":{"name":"rm_everything"}}"#,
        r#"{"type":"tool_result","id":"call-1","data":{"error":"launcher: tool \"rm_everything\" not in task.tool_defs (runner asked for an unknown tool)"}}"#,
    )
    .await;
}

#[tokio::test]
async fn mx4_mcp_alias() {
    check_tool_reply(
        runtime_handler(),
        r#"{"type":"tool_call","id":"call-1","data":{"name":"mcp__github__search"}}"#,
        r#"{"type":"tool_result","id":"call-1","data":{"output":"dispatched:mcp.github.search"}}"#,
    )
    .await;
}

#[tokio::test]
async fn mx5_events_and_captures_in_order() {
    let handler = Arc::new(Recorder::default());
    let (run, mut peer) = start(Arc::clone(&handler), options());
    peer.runner_bootstrap().await;
    peer.line(r#"{"type":"event","data":{"type":"tool_called"}}"#)
        .await;
    peer.line(r#"{"type":"event","data":{"payload":"not an event"}}"#)
        .await; // undecodable: dropped
    peer.line(r#"{"type":"session_capture","data":[{"role":"user"}]}"#)
        .await;
    peer.line(r#"{"type":"result","data":{"tokens":7}}"#).await;
    let result = outcome(run).await.unwrap();
    assert_eq!(result.tokens, 7);
    assert_eq!(result.backend_name, "claw"); // RT4: filled by the launcher
    assert_eq!(
        handler.log(),
        ["event:tool_called", r#"capture:[{"role":"user"}]"#]
    );
}

#[tokio::test]
async fn mx6_ask_user_without_handler() {
    let (run, mut peer) = start(Arc::new(NoHandler), options());
    peer.runner_bootstrap().await;
    peer.line(r#"{"type":"ask_user","id":"ask-1","data":{"questions":[{"question":"Proceed?"}]}}"#)
        .await;
    let reply = peer.expect(kind::ASK_USER_ANSWER).await;
    assert_eq!(
        show(&reply),
        r#"{"type":"ask_user_answer","id":"ask-1","data":{"answers":{"__error__":"launcher: no ask_user handler registered"}}}"#
    );
    peer.line(r#"{"type":"result","data":{"tokens":1}}"#).await;
    assert_eq!(outcome(run).await.unwrap().tokens, 1);
}

#[tokio::test]
async fn ask_user_with_answers() {
    let handler = Arc::new(Recorder {
        answers: Some([("Proceed?".to_string(), "yes".to_string())].into()),
        ..Recorder::default()
    });
    let (run, mut peer) = start(handler, options());
    peer.runner_bootstrap().await;
    peer.line(r#"{"type":"ask_user","id":"ask-1","data":{"questions":[{"question":"Proceed?"}]}}"#)
        .await;
    let reply = peer.expect(kind::ASK_USER_ANSWER).await;
    assert_eq!(
        show(&reply),
        r#"{"type":"ask_user_answer","id":"ask-1","data":{"answers":{"Proceed?":"yes"}}}"#
    );
    peer.line(r#"{"type":"result"}"#).await;
    outcome(run).await.unwrap();
}

#[tokio::test]
async fn mx7_a_slow_tool_does_not_delay_later_replies() {
    let release = Arc::new(Notify::new());
    let gate = Arc::clone(&release);
    let handler = Arc::new(Recorder::with_tool(move |name, input| {
        let gate = Arc::clone(&gate);
        async move {
            if input == Some(json!({"slow": true})) {
                gate.notified().await;
            }
            ToolOutcome::Output(format!("done:{name}"))
        }
    }));
    let (run, mut peer) = start(handler, options());
    peer.runner_bootstrap().await;
    peer.line(r#"{"type":"tool_call","id":"call-1","data":{"name":"a","input":{"slow":true}}}"#)
        .await;
    peer.line(r#"{"type":"tool_call","id":"call-2","data":{"name":"b"}}"#)
        .await;
    peer.line(r#"{"type":"tool_call","id":"call-3","data":{"name":"c"}}"#)
        .await;
    let mut early = [
        peer.expect(kind::TOOL_RESULT).await,
        peer.expect(kind::TOOL_RESULT).await,
    ]
    .map(|e| e.id().unwrap().to_string());
    early.sort();
    assert_eq!(early, ["call-2", "call-3"]);
    release.notify_one();
    let last = peer.expect(kind::TOOL_RESULT).await;
    assert_eq!(
        show(&last),
        r#"{"type":"tool_result","id":"call-1","data":{"output":"done:a"}}"#
    );
    peer.line(r#"{"type":"result"}"#).await;
    outcome(run).await.unwrap();
}

#[tokio::test]
async fn mx8_at_most_eight_handlers_at_once() {
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let handler = {
        let (running, most, gate) = (Arc::clone(&running), Arc::clone(&most), Arc::clone(&gate));
        Arc::new(Recorder::with_tool(move |_, _| {
            let (running, most, gate) = (Arc::clone(&running), Arc::clone(&most), Arc::clone(&gate));
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                gate.acquire().await.unwrap().forget();
                running.fetch_sub(1, Ordering::SeqCst);
                ToolOutcome::Output("ok".into())
            }
        }))
    };
    let (run, mut peer) = start(handler, options());
    peer.runner_bootstrap().await;
    for n in 1..=20 {
        peer.line(&format!(
            r#"{{"type":"tool_call","id":"call-{n}","data":{{"name":"t"}}}}"#
        ))
        .await;
    }
    patiently("8 handlers running", async {
        while running.load(Ordering::SeqCst) < 8 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    for _ in 0..50 {
        tokio::task::yield_now().await; // give a 9th handler every chance to start
    }
    assert_eq!(running.load(Ordering::SeqCst), 8);
    let mut ids = Vec::new();
    for _ in 1..=20 {
        gate.add_permits(1);
        ids.push(peer.expect(kind::TOOL_RESULT).await.id().unwrap().to_string());
    }
    assert_eq!(most.load(Ordering::SeqCst), 8);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 20);
    peer.line(r#"{"type":"result"}"#).await;
    outcome(run).await.unwrap();
}

#[tokio::test]
async fn mx9_oversized_tool_output_becomes_an_error() {
    let handler = Arc::new(Recorder::with_tool(|_, _| async {
        ToolOutcome::Output("x".repeat(5 << 20))
    }));
    let (run, mut peer) = start(handler, options());
    peer.runner_bootstrap().await;
    peer.line(r#"{"type":"tool_call","id":"call-1","data":{"name":"cat"}}"#)
        .await;
    let reply: ToolResult = peer.expect(kind::TOOL_RESULT).await.decode().unwrap();
    assert_eq!(
        reply.error,
        "tool output too large for the envelope channel (5242937 bytes > 4194304)"
    );
    peer.line(r#"{"type":"result"}"#).await;
    outcome(run).await.unwrap();
}

#[tokio::test]
async fn mx10_runner_exits_without_result() {
    let (run, mut peer) = start(Arc::new(NoHandler), options());
    peer.runner_bootstrap().await;
    peer.close().await;
    let outcome = outcome(run).await;
    assert!(matches!(outcome, Err(Error::RunnerExited)), "{outcome:?}");
    let failure = node_failure(&outcome, Some(3), "iterion-claw-runner: panic\n").unwrap();
    assert_eq!(
        failure.message,
        "claw backend: runner exited with status 3 without a result\nrunner stderr:\niterion-claw-runner: panic"
    );
    assert_eq!(failure.code, error_code::ENVELOPE_PROTOCOL_ERROR);
}

/// The runner breaks the protocol after the task; `expect` is the multiplexer's error detail.
async fn check_protocol_error(lines: &[&str], expect: &str) {
    let (run, mut peer) = start(
        Arc::new(Recorder::with_tool(|_, _| async {
            ToolOutcome::Output(String::new())
        })),
        options(),
    );
    peer.runner_bootstrap().await;
    for line in lines {
        peer.line(line).await;
    }
    match outcome(run).await {
        Err(Error::Protocol { detail }) => assert_eq!(detail, expect),
        other => panic!("expected Protocol({expect}), got {other:?}"),
    }
}

#[tokio::test]
async fn mx11_protocol_errors() {
    check_protocol_error(
        &[r#"{"type":"tool_call","data":{"name":"x"}}"#],
        "tool_call without id",
    )
    .await;
    check_protocol_error(
        &[
            r#"{"type":"tool_call","id":"call-1","data":{"name":"x"}}"#,
            r#"{"type":"ask_user","id":"call-1","data":{"questions":[]}}"#,
        ],
        "ask_user with duplicate id \"call-1\"",
    )
    .await;
    check_protocol_error(
        &[r#"{"type":"tool_call","id":"call-1","data":{"input":{}}}"#],
        "tool_call envelope has invalid data: missing field `name` at line 1 column 12",
    )
    .await;
    check_protocol_error(
        &[r#"{"type":"result","data":{"tokens":"many"}}"#],
        "result envelope has invalid data: invalid type: string \"many\", expected u64 at line 1 column 16",
    )
    .await;
}

#[tokio::test]
async fn mx12_misdirected_types_are_ignored() {
    let handler = Arc::new(Recorder::default());
    let (run, mut peer) = start(Arc::clone(&handler), options());
    peer.runner_bootstrap().await;
    peer.line(r#"{"type":"task","data":{"node_id":"x"}}"#).await;
    peer.line(r#"{"type":"future_type"}"#).await;
    peer.line(r#"{"type":"result","data":{"tokens":3}}"#).await;
    assert_eq!(outcome(run).await.unwrap().tokens, 3);
    let diagnostics = handler.diagnostics();
    assert_eq!(
        diagnostics,
        [
            (
                Level::Debug,
                "ignoring \"task\" envelope from the runner".to_string()
            ),
            (
                Level::Debug,
                "ignoring \"future_type\" envelope from the runner".to_string()
            )
        ]
    );
}

/// A handler whose tool never finishes and reports when it is dropped (cancelled).
fn endless_tool() -> (Arc<Recorder>, Arc<Notify>) {
    struct Dropped(Arc<Notify>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.notify_one();
        }
    }
    let dropped = Arc::new(Notify::new());
    let signal = Arc::clone(&dropped);
    let handler = Recorder::with_tool(move |_, _| {
        let guard = Dropped(Arc::clone(&signal));
        async move {
            let _guard = guard;
            std::future::pending::<ToolOutcome>().await
        }
    });
    (Arc::new(handler), dropped)
}

#[tokio::test]
async fn mx13_cancel_with_the_runners_result() {
    let (handler, dropped) = endless_tool();
    let options = options();
    let cancel = options.cancel.clone();
    let (run, mut peer) = start(Arc::clone(&handler), options);
    peer.runner_bootstrap().await;
    peer.line(r#"{"type":"tool_call","id":"call-1","data":{"name":"Bash"}}"#)
        .await;
    patiently("the handler runs", async {
        while handler.calls().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    cancel.cancel("signal SIGINT");
    let sent = peer.expect(kind::CANCEL).await;
    assert_eq!(
        show(&sent),
        r#"{"type":"cancel","data":{"reason":"signal SIGINT"}}"#
    );
    patiently("handler cancelled", dropped.notified()).await;
    peer.line(r#"{"type":"result","data":{"error":"cancelled: signal SIGINT","error_code":"CANCELLED"}}"#)
        .await;
    match outcome(run).await {
        Err(Error::Cancelled { result: Some(r) }) => assert_eq!(r.error_code, error_code::CANCELLED),
        other => panic!("expected Cancelled with a result, got {other:?}"),
    }
    peer.expect_eof().await; // stdin closed
}

#[tokio::test]
async fn mx13b_cancel_without_an_answer() {
    let mut options = options();
    options.cancel_grace = Duration::from_millis(200);
    let cancel = options.cancel.clone();
    let (run, mut peer) = start(Arc::new(NoHandler), options);
    peer.runner_bootstrap().await;
    cancel.cancel("operator");
    peer.expect(kind::CANCEL).await;
    match outcome(run).await {
        Err(Error::Cancelled { result: None }) => {}
        other => panic!("expected Cancelled without a result, got {other:?}"),
    }
    peer.expect_eof().await;
}

#[tokio::test]
async fn mx14_malformed_line_then_a_flood_never_blocks_the_runner() {
    let (run, mut peer) = start(Arc::new(NoHandler), options());
    peer.runner_bootstrap().await;
    let flood = tokio::spawn(async move {
        peer.raw(b"not-json\n").await;
        peer.raw(&vec![b'z'; 1 << 20]).await;
        peer.close().await;
        peer
    });
    match outcome(run).await {
        Err(Error::Protocol { detail }) => assert!(
            detail == "malformed envelope on line 2: not a JSON object (line starts with \"not-json\")",
            "{detail}"
        ),
        other => panic!("expected Protocol, got {other:?}"),
    }
    let mut peer = patiently("the flood is drained", flood).await.unwrap();
    peer.expect_eof().await; // stdin closed
}

#[tokio::test]
async fn mx15_envelope_after_result_is_a_warning() {
    let handler = Arc::new(Recorder::default());
    let (run, mut peer) = start(Arc::clone(&handler), options());
    peer.runner_bootstrap().await;
    peer.line(r#"{"type":"result","data":{"tokens":5}}"#).await;
    assert_eq!(outcome(run).await.unwrap().tokens, 5);
    peer.line(r#"{"type":"event","data":{"type":"late"}}"#).await;
    patiently("warning", handler.diagnosed.notified()).await;
    assert_eq!(
        handler.diagnostics(),
        [(
            Level::Warning,
            "ignoring \"event\" envelope received after the result".to_string()
        )]
    );
    assert!(handler.log().is_empty());
}

/// Handshake from the launcher's side: what the runner answers, and the failure detail expected.
async fn check_handshake(answer: Option<&str>, timeout: Duration, expect: &str) {
    let mut options = options();
    options.handshake_timeout = timeout;
    let (run, mut peer) = start(Arc::new(NoHandler), options);
    peer.expect(kind::HELLO).await;
    match answer {
        Some(line) => peer.line(line).await,
        None if timeout > Duration::from_secs(1) => peer.close().await,
        None => {}
    }
    match outcome(run).await {
        Err(Error::HandshakeFailed { detail }) => {
            assert!(detail.contains(expect), "{detail:?} lacks {expect:?}")
        }
        other => panic!("expected HandshakeFailed, got {other:?}"),
    }
    drop(peer);
}

#[tokio::test]
async fn hs_launcher_handshake_failures() {
    let long = Duration::from_secs(30);
    // HS3: the runner refuses the versions
    check_handshake(
        Some(r#"{"type":"result","data":{"error":"unsupported protocol versions 1..1 (runner supports 2..2)","error_code":"PROTOCOL_VERSION_MISMATCH"}}"#),
        long,
        "incompatible runner: it answered hello with a result (unsupported protocol versions 1..1 (runner supports 2..2))",
    )
    .await;
    // HS4: a legacy runner
    check_handshake(
        Some(r#"{"type":"result","data":{"error":"unexpected envelope \"hello\" before task"}}"#),
        long,
        "incompatible runner",
    )
    .await;
    // HS5: no answer within the timeout
    check_handshake(
        None,
        Duration::from_millis(100),
        "no hello from the runner within 100ms",
    )
    .await;
    // HS6: output closed before hello
    check_handshake(None, long, "runner output ended before its hello").await;
    // HS11
    check_handshake(
        Some(r#"{"type":"hello","data":{"protocol":"other","role":"runner","version":1}}"#),
        long,
        "unknown protocol \"other\"",
    )
    .await;
    let failure = node_failure(&Err(Error::HandshakeFailed { detail: "x".into() }), None, "").unwrap();
    assert_eq!(failure.code, "RUNNER_INCOMPATIBLE");
}

#[tokio::test]
async fn result_error_becomes_the_node_error() {
    let (run, mut peer) = start(Arc::new(NoHandler), options());
    peer.runner_bootstrap().await;
    peer.line(r#"{"type":"result","data":{"error":"429 from provider","error_code":"RATE_LIMITED"}}"#)
        .await;
    let outcome = outcome(run).await;
    let failure = node_failure(&outcome, Some(1), "").unwrap();
    assert_eq!(failure.message, "claw backend: runner: 429 from provider");
    assert_eq!(failure.code, "RATE_LIMITED");
    let ok = TaskResult::default();
    assert!(node_failure(&Ok(ok), Some(0), "").is_none());
}
