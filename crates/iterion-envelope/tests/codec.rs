//! The pure codec: exact encodings, framing, the pure halves of the handshake, and object round trips.

use std::io::Read;
use std::time::Duration;

use iterion_envelope::{
    AskUser, AskUserAnswer, AskUserOption, AskUserQuestion, AskUserToolFail, Cancel, Envelope, Error, Event,
    Hello, LINE_CAP, Reader, Task, TaskResult, ToolCall, ToolDef, ToolOutcome, ToolResult, Writer,
    accept_launcher_hello, accept_runner_hello, choose_version, encode, error_code, kind,
};
use serde_json::{Value, json};

fn env(kind: &str, id: Option<&str>, payload: &impl serde::Serialize) -> Envelope {
    Envelope::new(kind, id.map(str::to_string), payload).unwrap()
}

/// Encoding: the exact line, and decoding it back gives the same type, id and byte-identical data.
fn check_encode(envelope: Envelope, expect: &str) {
    let line = encode(&envelope).unwrap();
    assert_eq!(String::from_utf8(line.clone()).unwrap(), format!("{expect}\n"));
    let back = Reader::new(&line[..]).read().unwrap().unwrap();
    assert_eq!(back.kind(), envelope.kind());
    assert_eq!(back.id(), envelope.id());
    assert_eq!(back.data_json(), envelope.data_json());
}

#[test]
fn en_exact_encodings() {
    check_encode(
        Hello::launcher(1..=1, "iterion 0.4.0").to_envelope().unwrap(),
        r#"{"type":"hello","data":{"protocol":"iterion.envelope","role":"launcher","min_version":1,"max_version":1,"software":"iterion 0.4.0"}}"#,
    );
    let task = Task {
        node_id: "fixer".into(),
        run_id: "r1".into(),
        system_prompt: "S".into(),
        user_prompt: "U".into(),
        model: "openai/gpt-5.4-mini".into(),
        tool_max_steps: 10,
        has_tools: true,
        tool_defs: vec![ToolDef {
            name: "bash".into(),
            input_schema: Some(json!({"type": "object"})),
            ..ToolDef::default()
        }],
        work_dir: "/workspace".into(),
        ..Task::default()
    };
    check_encode(
        env(kind::TASK, None, &task),
        r#"{"type":"task","data":{"node_id":"fixer","run_id":"r1","system_prompt":"S","user_prompt":"U","model":"openai/gpt-5.4-mini","tool_max_steps":10,"has_tools":true,"tool_defs":[{"name":"bash","input_schema":{"type":"object"}}],"work_dir":"/workspace"}}"#,
    );
    let call = ToolCall {
        name: "mcp.github.search".into(),
        input: Some(json!({"q": "iterion"})),
    };
    check_encode(
        env(kind::TOOL_CALL, Some("call-1"), &call),
        r#"{"type":"tool_call","id":"call-1","data":{"name":"mcp.github.search","input":{"q":"iterion"}}}"#,
    );
    let reply = |id, outcome| env(kind::TOOL_RESULT, Some(id), &ToolResult::from(outcome));
    check_encode(
        reply("call-1", ToolOutcome::Output("[]".into())),
        r#"{"type":"tool_result","id":"call-1","data":{"output":"[]"}}"#,
    );
    check_encode(
        reply("call-2", ToolOutcome::Error("permission denied".into())),
        r#"{"type":"tool_result","id":"call-2","data":{"error":"permission denied"}}"#,
    );
    let ask = AskUserToolFail {
        question: "approve commit?".into(),
        pending_tool_use_id: "tu_42".into(),
        conversation: Some(json!([{"role": "user"}])),
    };
    check_encode(
        reply("call-3", ToolOutcome::AskUser(ask)),
        r#"{"type":"tool_result","id":"call-3","data":{"ask_user":{"question":"approve commit?","pending_tool_use_id":"tu_42","conversation":[{"role":"user"}]}}}"#,
    );
    let option = |label: &str| AskUserOption {
        label: label.into(),
        description: String::new(),
    };
    let request = AskUser {
        reason: String::new(),
        questions: vec![AskUserQuestion {
            header: String::new(),
            question: "Proceed?".into(),
            options: vec![option("yes"), option("no")],
            multi_select: false,
        }],
    };
    check_encode(
        env(kind::ASK_USER, Some("ask-1"), &request),
        r#"{"type":"ask_user","id":"ask-1","data":{"questions":[{"question":"Proceed?","options":[{"label":"yes"},{"label":"no"}]}]}}"#,
    );
    let answer = AskUserAnswer {
        answers: [("Proceed?".to_string(), "yes".to_string())].into(),
    };
    check_encode(
        env(kind::ASK_USER_ANSWER, Some("ask-1"), &answer),
        r#"{"type":"ask_user_answer","id":"ask-1","data":{"answers":{"Proceed?":"yes"}}}"#,
    );
    check_encode(
        env(
            kind::ASK_USER_ANSWER,
            Some("ask-1"),
            &AskUserAnswer::error(iterion_envelope::NO_ASK_USER_HANDLER),
        ),
        r#"{"type":"ask_user_answer","id":"ask-1","data":{"answers":{"__error__":"launcher: no ask_user handler registered"}}}"#,
    );
    check_encode(
        env(
            kind::SESSION_CAPTURE,
            None,
            &json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
        ),
        r#"{"type":"session_capture","data":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
    );
    let event = Event {
        kind: "llm_request".into(),
        payload: json!({"model": "m"}).as_object().cloned(),
    };
    check_encode(
        env(kind::EVENT, None, &event),
        r#"{"type":"event","data":{"type":"llm_request","payload":{"model":"m"}}}"#,
    );
    let result = TaskResult {
        output: json!({"fixed": true}).as_object().cloned(),
        tokens: 1834,
        duration_ms: 5120,
        backend_name: "claw".into(),
        ..TaskResult::default()
    };
    check_encode(
        env(kind::RESULT, None, &result),
        r#"{"type":"result","data":{"output":{"fixed":true},"tokens":1834,"duration_ms":5120,"backend_name":"claw"}}"#,
    );
    let cancel = Cancel {
        reason: "signal SIGINT".into(),
    };
    check_encode(
        env(kind::CANCEL, None, &cancel),
        r#"{"type":"cancel","data":{"reason":"signal SIGINT"}}"#,
    );
    check_encode(
        Envelope::from_raw(kind::SESSION_REPLAY, Some(String::new()), None),
        r#"{"type":"session_replay"}"#,
    );
}

/// Decoding keeps the payload byte for byte, whitespace and key order included.
#[test]
fn en_decoded_data_is_byte_identical() {
    let line = br#"{"data": {"z":1, "a" : [ 2 ]}, "id":"x", "type":"event"}"#;
    let envelope = Reader::new(&line[..]).read().unwrap().unwrap();
    assert_eq!(envelope.data_json(), Some(r#"{"z":1, "a" : [ 2 ]}"#));
    assert_eq!(envelope.id(), Some("x"));
}

/// Reads until end of stream, or until an error and one more read (to show the poisoning), rendering each outcome.
fn frames(source: impl Read) -> Vec<String> {
    let mut reader = Reader::new(source);
    let mut out = Vec::new();
    loop {
        match reader.read() {
            Ok(Some(e)) => {
                let data = e.data_json().unwrap_or("-");
                let data = if data.len() > 80 {
                    format!("<{} bytes>", data.len())
                } else {
                    data.to_string()
                };
                out.push(format!("{} {} {data}", e.kind(), e.id().unwrap_or("-")));
            }
            Ok(None) => {
                out.push("eof".into());
                return out;
            }
            Err(e) => {
                out.push(render_error(&e));
                if out.iter().filter(|l| l.starts_with("error")).count() == 2 {
                    return out;
                }
            }
        }
    }
}

fn render_error(e: &Error) -> String {
    match e {
        Error::LineTooLong { limit } => format!("error LineTooLong {limit}"),
        Error::Malformed {
            line_number,
            reason,
            preview,
        } => format!("error Malformed line {line_number}: {reason} [{preview}]"),
        other => format!("error {other}"),
    }
}

fn check(input: &[u8], expect: &[&str]) {
    assert_eq!(
        frames(input),
        expect,
        "input {:?}",
        String::from_utf8_lossy(input)
    );
}

const EN3: &str =
    r#"{"type":"tool_call","id":"call-1","data":{"name":"mcp.github.search","input":{"q":"iterion"}}}"#;
const EN11: &str = r#"{"type":"result","data":{"output":{"fixed":true},"tokens":1834,"duration_ms":5120,"backend_name":"claw"}}"#;

fn line_of(len: usize) -> Vec<u8> {
    let (head, tail) = (r#"{"type":"event","data":""#, r#""}"#);
    let mut line = head.as_bytes().to_vec();
    line.resize(len - tail.len(), b'x');
    line.extend_from_slice(tail.as_bytes());
    assert_eq!(line.len(), len);
    line
}

#[test]
fn fr_framing() {
    let call = r#"tool_call call-1 {"name":"mcp.github.search","input":{"q":"iterion"}}"#;
    let result =
        r#"result - {"output":{"fixed":true},"tokens":1834,"duration_ms":5120,"backend_name":"claw"}"#;
    // FR1
    check(b"", &["eof"]);
    // FR2: exactly the cap
    let mut at_cap = line_of(LINE_CAP);
    at_cap.push(b'\n');
    check(&at_cap, &["event - <4194280 bytes>", "eof"]);
    // FR2 with CR LF: the CR does not count
    let mut at_cap_crlf = line_of(LINE_CAP);
    at_cap_crlf.extend_from_slice(b"\r\n");
    check(&at_cap_crlf, &["event - <4194280 bytes>", "eof"]);
    // FR3: one byte over, and the reader stays poisoned
    let mut over = line_of(LINE_CAP + 1);
    over.push(b'\n');
    check(&over, &["error LineTooLong 4194304", "error LineTooLong 4194304"]);
    // FR4
    check(format!("{EN3}\r\n").as_bytes(), &[call, "eof"]);
    // FR5
    check(format!("{EN3}\n  \t\r\n{EN3}\n").as_bytes(), &[call, call, "eof"]);
    // FR6
    check(
        b"not-json\n",
        &[
            "error Malformed line 1: not a JSON object [not-json]",
            "error Malformed line 1: not a JSON object [not-json]",
        ],
    );
    // FR7
    for (input, reason) in [
        (r#"{"id":"x"}"#, "`type` is missing"),
        (r#"{"type":5}"#, "`type` is not a string"),
        ("[1]", "not a JSON object"),
        (r#"["event"]"#, "not a JSON object"),
    ] {
        let rendered = format!("error Malformed line 1: {reason} [{input}]");
        check(format!("{input}\n").as_bytes(), &[&rendered, &rendered]);
    }
    // FR8
    check(
        b"{\"type\":\"event\",\"extra\":1,\"data\":{\"type\":\"x\"}}\n",
        &[r#"event - {"type":"x"}"#, "eof"],
    );
    // FR9
    let fr9 = r#"error Malformed line 1: `type` is missing [{"Type":"event"}]"#;
    check(b"{\"Type\":\"event\"}\n", &[fr9, fr9]);
    // FR10
    check(EN11.as_bytes(), &[result, "eof"]);
    // FR11
    let frames = frames(&b"\xFF\xFE\n"[..]);
    assert!(
        frames[0].starts_with("error Malformed line 1: not valid UTF-8"),
        "{frames:?}"
    );
    assert!(frames[0].ends_with("[\u{FFFD}\u{FFFD}]"), "{frames:?}");
    // line numbers count blank lines; a malformed line after a good one
    check(
        format!("{EN3}\n\n{{\n").as_bytes(),
        &[
            call,
            "error Malformed line 3: invalid JSON (EOF while parsing an object at line 1 column 1) [{]",
            "error Malformed line 3: invalid JSON (EOF while parsing an object at line 1 column 1) [{]",
        ],
    );
    // an empty id is absent; a non-string id is malformed
    check(b"{\"type\":\"cancel\",\"id\":\"\"}\n", &["cancel - -", "eof"]);
}

#[test]
fn fr_preview_is_the_first_256_characters() {
    let line = format!("{}\n", "é".repeat(1000));
    let Err(Error::Malformed { preview, .. }) = Reader::new(line.as_bytes()).read() else {
        panic!("expected Malformed");
    };
    assert_eq!(preview, "é".repeat(256));
}

/// The overflow is detected on a stream that never sends LF, without buffering it all.
#[test]
fn fr3_endless_line_is_refused() {
    let mut reader = Reader::new(std::io::repeat(b'a'));
    assert!(matches!(
        reader.read(),
        Err(Error::LineTooLong { limit: LINE_CAP })
    ));
    assert!(matches!(
        reader.read(),
        Err(Error::LineTooLong { limit: LINE_CAP })
    ));
}

#[test]
fn fr13_oversized_envelope_is_refused_and_nothing_written() {
    let big = "x".repeat(5 * 1024 * 1024);
    let envelope = env(kind::EVENT, None, &big);
    let mut writer = Writer::new(Vec::new());
    let err = writer.write(&envelope).unwrap_err();
    assert!(
        matches!(err, Error::EnvelopeTooLarge { size, limit: LINE_CAP } if size == big.len() + 26),
        "{err:?}"
    );
    assert!(writer.into_inner().is_empty());
}

/// An I/O error poisons the reader.
#[test]
fn io_error_poisons_the_reader() {
    struct Broken;
    impl Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk on fire"))
        }
    }
    let mut reader = Reader::new(Broken);
    for _ in 0..2 {
        let err = reader.read().unwrap_err();
        assert!(
            matches!(&err, Error::Io(e) if e.to_string() == "disk on fire"),
            "{err:?}"
        );
    }
}

fn launcher_hello(min: u32, max: u32, protocol: &str) -> Envelope {
    let mut hello = Hello::launcher(min..=max, "test");
    hello.protocol = protocol.into();
    hello.to_envelope().unwrap()
}

/// The runner's answer to a first envelope: the chosen version, or the result it writes before exiting 2.
fn check_runner_accepts(
    first: Envelope,
    supported: std::ops::RangeInclusive<u32>,
    expect: Result<u32, (&str, &str)>,
) {
    let got = accept_launcher_hello(&first, &supported);
    match (got, expect) {
        (Ok(v), Ok(e)) => assert_eq!(v, e),
        (Err(r), Err((error, code))) => {
            assert_eq!(r.error, error);
            assert_eq!(r.error_code, code);
        }
        (got, expect) => panic!("got {got:?}, expected {expect:?}"),
    }
}

#[test]
fn hs_version_choice_and_refusals() {
    let protocol = error_code::ENVELOPE_PROTOCOL_ERROR;
    check_runner_accepts(launcher_hello(1, 1, "iterion.envelope"), 1..=1, Ok(1)); // HS1
    check_runner_accepts(launcher_hello(1, 3, "iterion.envelope"), 1..=2, Ok(2)); // HS2
    check_runner_accepts(
        launcher_hello(2, 3, "iterion.envelope"),
        1..=1,
        Err((
            "unsupported protocol versions 2..3 (runner supports 1..1)",
            error_code::PROTOCOL_VERSION_MISMATCH,
        )),
    ); // HS3
    check_runner_accepts(
        env(kind::TASK, None, &json!({"node_id": "n"})),
        1..=1,
        Err(("expected hello, got task", protocol)),
    ); // HS7
    check_runner_accepts(
        launcher_hello(1, 1, "other"),
        1..=1,
        Err(("unknown protocol \"other\" (expected iterion.envelope)", protocol)),
    ); // HS11
    assert_eq!(choose_version(3..=5, &(1..=4)), Some(4));
    assert_eq!(choose_version(5..=6, &(1..=4)), None);
}

fn check_launcher_accepts(reply: Envelope, expect: Result<u32, &str>) {
    match (accept_runner_hello(&reply, &(1..=1)), expect) {
        (Ok(v), Ok(e)) => assert_eq!(v, e),
        (Err(Error::HandshakeFailed { detail }), Err(part)) => {
            assert!(detail.contains(part), "{detail:?} lacks {part:?}")
        }
        (got, expect) => panic!("got {got:?}, expected {expect:?}"),
    }
}

#[test]
fn hs_launcher_side() {
    let runner = |protocol: &str, version| {
        let mut hello = Hello::runner(version, "test", &["event", "cancel"]);
        hello.protocol = protocol.into();
        hello.to_envelope().unwrap()
    };
    check_launcher_accepts(runner("iterion.envelope", 1), Ok(1));
    check_launcher_accepts(runner("other", 1), Err("unknown protocol \"other\"")); // HS11
    check_launcher_accepts(runner("iterion.envelope", 2), Err("outside the offered 1..1"));
    let legacy = TaskResult::failure("unexpected envelope \"hello\" before task", "");
    check_launcher_accepts(env(kind::RESULT, None, &legacy), Err("incompatible runner")); // HS4
    assert_eq!(
        runner("iterion.envelope", 1).data_json(),
        Some(
            r#"{"protocol":"iterion.envelope","role":"runner","version":1,"software":"test","capabilities":["cancel","event"]}"#
        )
    );
}

fn full_task() -> Task {
    let text = |s: &str| s.to_string();
    Task {
        node_id: text("n"),
        run_id: text("r"),
        system_prompt: text("s"),
        user_prompt: text("u"),
        model: text("anthropic/claude-sonnet-4-5"),
        provider_hint: text("anthropic"),
        reasoning_effort: text("high"),
        max_tokens: 4096,
        tool_max_steps: 50,
        has_tools: true,
        tool_defs: vec![ToolDef {
            name: text("bash"),
            description: text("run a command"),
            input_schema: Some(json!({"type": "object"})),
        }],
        allowed_tools: vec![text("bash")],
        output_schema: Some(json!({"type": "object", "properties": {"ok": {"type": "boolean"}}})),
        work_dir: text("/workspace"),
        base_dir: text("/base"),
        readonly: true,
        compact_threshold_ratio: 0.8,
        compact_preserve_recent: 4,
        capabilities: vec![text("x")],
        store_dir: text("/store"),
        board_http_endpoint: text("http://board"),
        board_run_token: text("tok"),
        session_id: text("sess"),
        session_fingerprint: text("fp"),
        fork_session: true,
        interaction_enabled: true,
        resume_conversation: Some(json!([{"role": "assistant"}])),
        resume_pending_tool_use_id: text("tu_1"),
        resume_answer: text("yes"),
    }
}

#[test]
fn rt_object_round_trips() {
    // RT1: every field, and the encoding names each of them
    let task = full_task();
    let json = serde_json::to_value(&task).unwrap();
    assert_eq!(json.as_object().unwrap().len(), 29);
    assert_eq!(serde_json::from_value::<Task>(json).unwrap(), task);
    // RT2
    let task: Task = serde_json::from_str(r#"{"node_id":"n","future_field":{"x":1}}"#).unwrap();
    assert_eq!(task.node_id, "n");
    // RT3
    assert_eq!(TaskResult::millis(Duration::from_micros(500)), 0);
    assert_eq!(TaskResult::millis(Duration::from_micros(1700)), 1);
    // RT4
    let result: TaskResult = serde_json::from_str(r#"{"backend_name":""}"#).unwrap();
    assert_eq!(result.backend_name(), "claw");
    // RT5
    let result: TaskResult = serde_json::from_str(r#"{"error":"","output":{"ok":true}}"#).unwrap();
    assert!(result.is_success());
    assert_eq!(result.output.unwrap()["ok"], Value::Bool(true));
    // a result with every field survives a round trip
    let result = TaskResult {
        output: json!({"a": 1}).as_object().cloned(),
        tokens: 1,
        cost_usd: 0.25,
        duration_ms: 2,
        exit_code: 3,
        stderr: "e".into(),
        backend_name: "claw".into(),
        raw_output_len: 4,
        parse_fallback: true,
        formatting_pass_used: true,
        session_id: "s".into(),
        pending_conversation: Some(json!([])),
        pending_tool_use_id: "p".into(),
        error: "boom".into(),
        error_code: error_code::EXECUTION_FAILED.into(),
    };
    let back: TaskResult = serde_json::from_value(serde_json::to_value(&result).unwrap()).unwrap();
    assert_eq!(back, result);
    assert_eq!(back.runner_exit_code(), 1);
}

/// Tool-result precedence: ask_user, then a non-empty error, then output (absent = empty).
#[test]
fn tool_result_precedence() {
    let check = |json: &str, expect: ToolOutcome| {
        let reply: ToolResult = serde_json::from_str(json).unwrap();
        assert_eq!(reply.outcome(), expect, "{json}");
    };
    check("{}", ToolOutcome::Output(String::new()));
    check(r#"{"output":"o","error":""}"#, ToolOutcome::Output("o".into()));
    check(r#"{"output":"o","error":"e"}"#, ToolOutcome::Error("e".into()));
    check(
        r#"{"error":"e","ask_user":{"question":"q"}}"#,
        ToolOutcome::AskUser(AskUserToolFail {
            question: "q".into(),
            pending_tool_use_id: String::new(),
            conversation: None,
        }),
    );
}
