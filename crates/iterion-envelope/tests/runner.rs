//! The runner side against a scripted launcher: the bootstrap (HS), the runner channel (RC), output discipline,
//! and concurrent writers on one stream (FR12).

mod common;

use std::sync::{Arc, Mutex};

use common::{Peer, patiently, pipes, show};
use iterion_envelope::runner::{self, Bootstrap, RunnerOptions};
use iterion_envelope::{
    AskUser, AskUserQuestion, AskUserToolFail, Envelope, Error, SharedWriter, TaskResult, ToolCall,
    ToolOutcome, kind,
};
use serde_json::json;
use tokio::io::{DuplexStream, WriteHalf};

const HELLO_1_1: &str = r#"{"type":"hello","data":{"protocol":"iterion.envelope","role":"launcher","min_version":1,"max_version":1,"software":"iterion 0.4.0"}}"#;
const TASK: &str = r#"{"type":"task","data":{"node_id":"fixer","user_prompt":"U"}}"#;

type Diagnosed = Arc<Mutex<Vec<String>>>;

fn runner_options(supported: std::ops::RangeInclusive<u32>) -> (RunnerOptions, Diagnosed) {
    let lines: Diagnosed = Arc::default();
    let sink = Arc::clone(&lines);
    let mut options = RunnerOptions::new("iterion test");
    options.supported = supported;
    options.diagnostics = Arc::new(move |line| sink.lock().unwrap().push(line.to_string()));
    (options, lines)
}

type Runner = Bootstrap<WriteHalf<DuplexStream>>;

/// Sends `lines` as the launcher, runs the bootstrap, and returns its outcome plus everything the runner wrote
/// until then (one line each).
async fn bootstrap(
    lines: &[&str],
    supported: std::ops::RangeInclusive<u32>,
) -> (Result<Runner, Error>, Vec<String>, Peer, Diagnosed) {
    let (ends, mut peer) = pipes();
    for line in lines {
        peer.line(line).await;
    }
    let (options, diagnosed) = runner_options(supported);
    let outcome = patiently("bootstrap", runner::bootstrap(ends.read, ends.write, options)).await;
    let mut written = Vec::new();
    // the runner's hello, and its result when it refused
    written.push(show(&peer.next().await));
    if let Err(Error::Bootstrap { .. }) = &outcome
        && written[0].starts_with(r#"{"type":"hello""#)
    {
        written.push(show(&peer.next().await));
    }
    (outcome, written, peer, diagnosed)
}

/// A bootstrap the runner refuses: the lines it wrote and the exit status.
async fn check_refused(lines: &[&str], supported: std::ops::RangeInclusive<u32>, expect: &[&str], exit: i32) {
    let (outcome, written, _peer, _) = bootstrap(lines, supported).await;
    match outcome {
        Err(Error::Bootstrap { exit_code, result }) => {
            assert_eq!(exit_code, exit, "{result:?}");
        }
        other => panic!("expected a refused bootstrap, got {other:?}"),
    }
    assert_eq!(written, expect);
}

const RUNNER_HELLO_1: &str = r#"{"type":"hello","data":{"protocol":"iterion.envelope","role":"runner","version":1,"software":"iterion test","capabilities":["cancel","event","session_capture"]}}"#;

#[tokio::test]
async fn hs1_and_hs2_runner_picks_the_highest_common_version() {
    let (outcome, written, _peer, _) = bootstrap(&[HELLO_1_1, TASK], 1..=1).await;
    let runner = outcome.unwrap();
    assert_eq!((runner.version, runner.task.node_id.as_str()), (1, "fixer"));
    assert_eq!(written, [RUNNER_HELLO_1]);

    let hello_1_3 = r#"{"type":"hello","data":{"protocol":"iterion.envelope","role":"launcher","min_version":1,"max_version":3}}"#;
    let (outcome, written, _peer, _) = bootstrap(&[hello_1_3, TASK], 1..=2).await;
    assert_eq!(outcome.unwrap().version, 2);
    assert_eq!(
        written,
        [
            r#"{"type":"hello","data":{"protocol":"iterion.envelope","role":"runner","version":2,"software":"iterion test","capabilities":["cancel","event","session_capture"]}}"#
        ]
    );
}

#[tokio::test]
async fn hs_runner_refusals() {
    // HS3
    check_refused(
        &[r#"{"type":"hello","data":{"protocol":"iterion.envelope","role":"launcher","min_version":2,"max_version":3}}"#],
        1..=1,
        &[r#"{"type":"result","data":{"error":"unsupported protocol versions 2..3 (runner supports 1..1)","error_code":"PROTOCOL_VERSION_MISMATCH"}}"#],
        2,
    )
    .await;
    // HS7
    check_refused(
        &[TASK],
        1..=1,
        &[r#"{"type":"result","data":{"error":"expected hello, got task","error_code":"ENVELOPE_PROTOCOL_ERROR"}}"#],
        2,
    )
    .await;
    // HS8
    check_refused(
        &[HELLO_1_1, r#"{"type":"tool_result","id":"call-1","data":{"output":"x"}}"#],
        1..=1,
        &[
            RUNNER_HELLO_1,
            r#"{"type":"result","data":{"error":"unexpected envelope \"tool_result\" before task","error_code":"ENVELOPE_PROTOCOL_ERROR"}}"#,
        ],
        2,
    )
    .await;
    // HS9
    check_refused(
        &[HELLO_1_1, r#"{"type":"task"}"#],
        1..=1,
        &[
            RUNNER_HELLO_1,
            r#"{"type":"result","data":{"error":"task envelope has empty or invalid data: no data","error_code":"ENVELOPE_PROTOCOL_ERROR"}}"#,
        ],
        2,
    )
    .await;
    check_refused(
        &[HELLO_1_1, r#"{"type":"task","data":{}}"#],
        1..=1,
        &[
            RUNNER_HELLO_1,
            r#"{"type":"result","data":{"error":"task envelope has empty or invalid data: missing field `node_id` at line 1 column 2","error_code":"ENVELOPE_PROTOCOL_ERROR"}}"#,
        ],
        2,
    )
    .await;
    // HS11
    check_refused(
        &[r#"{"type":"hello","data":{"protocol":"other","role":"launcher","min_version":1,"max_version":1}}"#],
        1..=1,
        &[r#"{"type":"result","data":{"error":"unknown protocol \"other\" (expected iterion.envelope)","error_code":"ENVELOPE_PROTOCOL_ERROR"}}"#],
        2,
    )
    .await;
    // cancel before the task: cancelled result, exit 1
    check_refused(
        &[
            HELLO_1_1,
            r#"{"type":"cancel","data":{"reason":"signal SIGTERM"}}"#,
        ],
        1..=1,
        &[
            RUNNER_HELLO_1,
            r#"{"type":"result","data":{"error":"cancelled: signal SIGTERM","error_code":"CANCELLED"}}"#,
        ],
        1,
    )
    .await;
}

#[tokio::test]
async fn hs10_last_session_replay_wins_with_one_warning() {
    let (outcome, _, _peer, diagnosed) = bootstrap(
        &[
            HELLO_1_1,
            r#"{"type":"session_replay","data":[{"role":"user","n":1}]}"#,
            r#"{"type":"session_replay","data":[{"role":"user","n":2}]}"#,
            TASK,
        ],
        1..=1,
    )
    .await;
    let runner = outcome.unwrap();
    assert_eq!(runner.replay.unwrap().get(), r#"[{"role":"user","n":2}]"#);
    assert_eq!(
        *diagnosed.lock().unwrap(),
        ["several session_replay envelopes before the task; keeping the last"]
    );
}

/// A bootstrapped runner and the launcher peer, with the runner's hello already read.
async fn started() -> (Runner, Peer, Diagnosed) {
    let (outcome, _, peer, diagnosed) = bootstrap(&[HELLO_1_1, TASK], 1..=1).await;
    (outcome.unwrap(), peer, diagnosed)
}

#[tokio::test]
async fn rc1_concurrent_calls_get_their_own_replies() {
    let (runner, mut peer, _) = started().await;
    let channel = Arc::new(runner.channel);
    let calls: Vec<_> = (0..3)
        .map(|n| {
            let channel = Arc::clone(&channel);
            tokio::spawn(async move { channel.call_tool("Bash", Some(json!({"n": n}))).await })
        })
        .collect();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let call = peer.expect(kind::TOOL_CALL).await;
        let data: ToolCall = call.decode().unwrap();
        assert_eq!(data.name, "Bash");
        ids.push(call.id().unwrap().to_string());
    }
    for id in ids.iter().rev() {
        peer.line(&format!(
            r#"{{"type":"tool_result","id":"{id}","data":{{"output":"result-of-Bash"}}}}"#
        ))
        .await;
    }
    ids.sort();
    assert_eq!(ids, ["call-1", "call-2", "call-3"]);
    for call in calls {
        let outcome = patiently("call", call).await.unwrap().unwrap();
        assert_eq!(outcome, ToolOutcome::Output("result-of-Bash".into()));
    }
}

/// One call answered with `reply` (its id filled in); `expect` is what the runner's tool sees.
async fn check_reply(reply: &str, expect: ToolOutcome) {
    let (runner, mut peer, _) = started().await;
    let channel = Arc::new(runner.channel);
    let c = Arc::clone(&channel);
    let call = tokio::spawn(async move { c.run_tool("Bash", None).await });
    let id = peer.expect(kind::TOOL_CALL).await.id().unwrap().to_string();
    peer.line(&reply.replace("{id}", &id)).await;
    assert_eq!(patiently("call", call).await.unwrap(), expect);
}

#[tokio::test]
async fn rc2_rc3_rc5_replies_become_tool_outcomes() {
    // RC2
    check_reply(
        r#"{"type":"tool_result","id":"{id}","data":{"error":"permission denied"}}"#,
        ToolOutcome::Error("permission denied".into()),
    )
    .await;
    // RC3: EN6
    check_reply(
        r#"{"type":"tool_result","id":"{id}","data":{"ask_user":{"question":"approve commit?","pending_tool_use_id":"tu_42","conversation":[{"role":"user"}]}}}"#,
        ToolOutcome::AskUser(AskUserToolFail {
            question: "approve commit?".into(),
            pending_tool_use_id: "tu_42".into(),
            conversation: Some(json!([{"role": "user"}])),
        }),
    )
    .await;
    // RC5
    check_reply(
        r#"{"type":"ask_user_answer","id":"{id}","data":{"answers":{}}}"#,
        ToolOutcome::Error(
            r#"dispatcher: tool_call: runner: unexpected reply type "ask_user_answer" for call-1"#.into(),
        ),
    )
    .await;
    // undecodable data
    check_reply(
        r#"{"type":"tool_result","id":"{id}","data":{"output":7}}"#,
        ToolOutcome::Error(
            "dispatcher: decode tool_result: invalid type: integer `7`, expected a string at line 1 column 11".into(),
        ),
    )
    .await;
}

#[tokio::test]
async fn rc4_closed_stdin_fails_pending_calls_and_cancels() {
    let (runner, mut peer, _) = started().await;
    let channel = Arc::new(runner.channel);
    let c = Arc::clone(&channel);
    let call = tokio::spawn(async move { c.call_tool("Bash", None).await });
    peer.expect(kind::TOOL_CALL).await;
    peer.close().await;
    let err = patiently("call", call).await.unwrap().unwrap_err();
    assert!(err.to_string().contains("closed"), "{err}");
    assert_eq!(err.to_string(), "runner: launcher closed envelope channel");
    patiently("cancelled", channel.cancelled()).await;
    let later = channel.call_tool("Bash", None).await.unwrap_err();
    assert_eq!(later.to_string(), "runner: envelope channel closed before reply");
}

#[tokio::test]
async fn rc6_reply_for_an_unknown_id_is_dropped() {
    let (runner, mut peer, diagnosed) = started().await;
    let channel = Arc::new(runner.channel);
    let c = Arc::clone(&channel);
    let call = tokio::spawn(async move { c.call_tool("Bash", None).await });
    peer.expect(kind::TOOL_CALL).await;
    peer.line(r#"{"type":"tool_result","id":"call-99","data":{"output":"stray"}}"#)
        .await;
    peer.line(r#"{"type":"tool_result","id":"call-1","data":{"output":"mine"}}"#)
        .await;
    let outcome = patiently("call", call).await.unwrap().unwrap();
    assert_eq!(outcome, ToolOutcome::Output("mine".into()));
    assert_eq!(
        *diagnosed.lock().unwrap(),
        ["dropping \"tool_result\" for \"call-99\", which is not pending"]
    );
}

#[tokio::test]
async fn rc7_cancel_after_task_ends_with_a_cancelled_result() {
    let (runner, mut peer, _) = started().await;
    let channel = runner.channel;
    peer.line(r#"{"type":"cancel","data":{"reason":"signal SIGINT"}}"#)
        .await;
    patiently("cancelled", channel.cancelled()).await;
    let reason = channel.cancel_reason().unwrap();
    let exit = channel.finish(&TaskResult::cancelled(&reason)).await.unwrap();
    assert_eq!(exit, 1);
    assert_eq!(
        show(&peer.expect(kind::RESULT).await),
        r#"{"type":"result","data":{"error":"cancelled: signal SIGINT","error_code":"CANCELLED"}}"#
    );
    // every later operation fails
    assert!(matches!(
        channel.finish(&TaskResult::default()).await,
        Err(Error::Finished)
    ));
    assert!(matches!(channel.call_tool("x", None).await, Err(Error::Finished)));
}

#[tokio::test]
async fn rc8_oversized_capture_is_not_sent_and_the_task_continues() {
    let (runner, mut peer, diagnosed) = started().await;
    let channel = runner.channel;
    channel.capture_session(&json!(["x".repeat(5 << 20)])).await;
    channel
        .emit_event("llm_request", json!({"model": "m"}).as_object().cloned())
        .await;
    assert_eq!(
        show(&peer.next().await),
        r#"{"type":"event","data":{"type":"llm_request","payload":{"model":"m"}}}"#
    );
    assert_eq!(
        *diagnosed.lock().unwrap(),
        ["session_capture not sent: envelope of 5242918 bytes exceeds the 4194304 byte line cap"]
    );
    assert_eq!(channel.finish(&TaskResult::default()).await.unwrap(), 0);
    assert_eq!(show(&peer.next().await), r#"{"type":"result","data":{}}"#);
}

#[tokio::test]
async fn oversized_result_is_replaced() {
    let (runner, mut peer, _) = started().await;
    let big = TaskResult {
        output: json!({"text": "y".repeat(5 << 20)}).as_object().cloned(),
        tokens: 9,
        duration_ms: 12,
        ..TaskResult::default()
    };
    assert_eq!(runner.channel.finish(&big).await.unwrap(), 1);
    assert_eq!(
        show(&peer.expect(kind::RESULT).await),
        r#"{"type":"result","data":{"tokens":9,"duration_ms":12,"error":"result too large for the envelope channel (5242955 bytes)","error_code":"EXECUTION_FAILED"}}"#
    );
}

#[tokio::test]
async fn ask_user_round_trip() {
    let (runner, mut peer, _) = started().await;
    let channel = Arc::new(runner.channel);
    let c = Arc::clone(&channel);
    let ask = tokio::spawn(async move {
        let request = AskUser {
            reason: String::new(),
            questions: vec![AskUserQuestion {
                header: String::new(),
                question: "Proceed?".into(),
                options: vec![],
                multi_select: false,
            }],
        };
        c.ask_user(&request).await
    });
    let request = peer.expect(kind::ASK_USER).await;
    assert_eq!(
        show(&request),
        r#"{"type":"ask_user","id":"ask-1","data":{"questions":[{"question":"Proceed?"}]}}"#
    );
    peer.line(r#"{"type":"ask_user_answer","id":"ask-1","data":{"answers":{"Proceed?":"yes"}}}"#)
        .await;
    let answer = patiently("ask", ask).await.unwrap().unwrap();
    assert_eq!(answer.answers["Proceed?"], "yes");
}

#[tokio::test]
async fn fr12_concurrent_writers_never_interleave() {
    let (ends, mut peer) = pipes();
    let writer = SharedWriter::new(ends.write);
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let writer = writer.clone();
            tokio::spawn(async move {
                for n in 0..100 {
                    let call = ToolCall {
                        name: format!("tool-{w}"),
                        input: Some(json!({"n": n, "pad": "p".repeat(997)})),
                    };
                    let envelope =
                        Envelope::new(kind::TOOL_CALL, Some(format!("call-{w}-{n}")), &call).unwrap();
                    writer.send(&envelope).await.unwrap();
                }
            })
        })
        .collect();
    let reading = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(envelope) = peer.reader.read().await.unwrap() {
            assert_eq!(envelope.kind(), kind::TOOL_CALL);
            let call: ToolCall = envelope.decode().unwrap();
            seen.push(format!("{} {}", call.name, envelope.id().unwrap()));
        }
        seen
    });
    for w in writers {
        patiently("writer", w).await.unwrap();
    }
    writer.close().await;
    let mut seen = patiently("reader", reading).await.unwrap();
    assert_eq!(seen.len(), 800);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 800);
}
