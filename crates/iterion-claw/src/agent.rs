//! The model loop of one task: conversation, tool execution (concurrent when several calls are requested),
//! `tool_max_steps`, structured output with one reformat pass, events and session captures.

use crate::compact;
use crate::error::Error;
use crate::output::{conforms, parse_object};
use crate::provider::{
    self, Client, Message, Provider, Request, Retry, ToolCallReq, ToolResultMsg, ToolSpec, Turn,
};
use crate::tools::Builtins;
use futures::future::BoxFuture;
use iterion_envelope::{Task, TaskResult};
use serde_json::{Map, Value, json};
use std::time::Instant;

/// Model calls allowed when the task sets no `tool_max_steps`.
pub const DEFAULT_TOOL_MAX_STEPS: u64 = 50;

/// The user message of the reformat pass; the schema follows it.
pub const REFORMAT_PROMPT: &str = "Reformat your previous answer as one JSON object that matches this JSON Schema. \
Answer with the JSON object only, no other text. Schema:";

/// Where the loop reports: inner `event`s and session snapshots.
pub trait Sink: Send + Sync {
    /// One event (`llm_request`, `llm_step_finished`, `llm_retry`, `tool_started`, `tool_called`, `tool_error`).
    fn event(&self, kind: &str, payload: Map<String, Value>);
    /// The conversation after a model turn.
    fn session_capture(&self, snapshot: Value);
}

/// Executes tools that are not builtins (the runner routes them to the launcher as `tool_call`).
pub trait ToolDelegate: Send + Sync {
    /// Runs `name` with `input`: the result text, or an error message for the model.
    fn call<'a>(&'a self, name: &'a str, input: &'a Value) -> BoxFuture<'a, Result<String, String>>;
}

/// One task's loop over a provider.
#[derive(Clone, Copy)]
pub struct Agent<'a> {
    client: &'a Client,
    provider: &'a Provider,
    builtins: &'a Builtins,
    sink: &'a dyn Sink,
    delegate: Option<&'a dyn ToolDelegate>,
    stream: bool,
    context_window: u64,
}

/// Compactions allowed for one model call that overflows the context.
pub const MAX_OVERFLOW_COMPACTIONS: u32 = 2;

impl std::fmt::Debug for Agent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("provider", self.provider)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

impl<'a> Agent<'a> {
    /// A non-streaming loop without a delegate for non-builtin tools.
    pub fn new(
        client: &'a Client,
        provider: &'a Provider,
        builtins: &'a Builtins,
        sink: &'a dyn Sink,
    ) -> Self {
        Agent {
            client,
            provider,
            builtins,
            sink,
            delegate: None,
            stream: false,
            context_window: compact::context_window(&provider.model, &Default::default()),
        }
    }

    /// The model's context window in tokens (default: by model family, see [`compact::context_window`]).
    pub fn with_context_window(mut self, tokens: u64) -> Self {
        self.context_window = tokens;
        self
    }

    /// Routes non-builtin tools of the task's `tool_defs` to `delegate`.
    pub fn with_delegate(mut self, delegate: &'a dyn ToolDelegate) -> Self {
        self.delegate = Some(delegate);
        self
    }

    /// Streams the model's answers (SSE).
    pub fn streaming(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// The tools offered for `task`: none without `has_tools`; else the enabled builtins, then (unless
    /// `readonly`) the delegated `tool_defs` that are allowed and not builtins.
    pub fn tools(&self, task: &Task) -> Vec<ToolSpec> {
        if !task.has_tools {
            return Vec::new();
        }
        let mut specs = self.builtins.specs();
        if self.delegate.is_some() && !task.readonly {
            for d in &task.tool_defs {
                let allowed = task.allowed_tools.is_empty() || task.allowed_tools.contains(&d.name);
                if allowed && !crate::tools::BUILTINS.contains(&d.name.as_str()) {
                    specs.push(ToolSpec {
                        name: d.name.clone(),
                        description: d.description.clone(),
                        input_schema: d
                            .input_schema
                            .clone()
                            .unwrap_or_else(|| json!({"type": "object"})),
                    });
                }
            }
        }
        specs
    }

    /// Runs `task` to its result; failures are carried in `error` / `error_code`.
    pub async fn run(&self, task: &Task) -> TaskResult {
        self.run_from(task, None).await
    }

    /// Runs `task` continuing `replay` (a conversation decoded from a replayed session snapshot) when given:
    /// the replay is closed (a trailing tool call gets a "result lost" answer) and compacted before the first
    /// model call, since a replay follows a context overflow.
    pub async fn run_from(&self, task: &Task, replay: Option<Vec<Message>>) -> TaskResult {
        let started = Instant::now();
        let mut state = State {
            messages: vec![Message::User(task.user_prompt.clone())],
            tokens: 0,
            step: 0,
        };
        let mut outcome = Ok(());
        if let Some(mut messages) = replay {
            compact::close_replayed(&mut messages);
            state.messages = messages;
            outcome = self.compact(task, &mut state, "session_replay").await.map(|_| ());
        }
        let mut result = match outcome {
            Ok(()) => match self.converse(task, &mut state).await {
                Ok(text) => self.finish(task, &mut state, text).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
        .unwrap_or_else(|e| TaskResult {
            error: e.to_string(),
            error_code: e.code().into(),
            ..TaskResult::default()
        });
        result.tokens = state.tokens;
        result.backend_name = iterion_envelope::DEFAULT_BACKEND_NAME.into();
        result.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        result
    }

    /// The tool loop; returns the final text.
    async fn converse(&self, task: &Task, state: &mut State) -> Result<String, Error> {
        let tools = self.tools(task);
        let max_steps = if task.tool_max_steps == 0 {
            DEFAULT_TOOL_MAX_STEPS
        } else {
            task.tool_max_steps
        };
        let mut text = String::new();
        while state.step < max_steps {
            if self.over_threshold(task, state, &tools) {
                self.compact(task, state, "threshold").await?;
            }
            let turn = self.call_fitting(task, state, &tools).await?;
            text = turn.text.clone();
            if turn.tool_calls.is_empty() {
                break;
            }
            let results =
                futures::future::join_all(turn.tool_calls.iter().map(|c| self.execute(c, &tools))).await;
            state.messages.push(Message::ToolResults(results));
        }
        Ok(text)
    }

    /// Whether the conversation's estimate passes `compact_threshold_ratio` of the context window.
    fn over_threshold(&self, task: &Task, state: &State, tools: &[ToolSpec]) -> bool {
        let ratio = if task.compact_threshold_ratio > 0.0 && task.compact_threshold_ratio <= 1.0 {
            task.compact_threshold_ratio
        } else {
            compact::DEFAULT_THRESHOLD_RATIO
        };
        let estimate = compact::estimate_tokens(&task.system_prompt, &state.messages, tools);
        estimate as f64 > ratio * self.context_window as f64
    }

    /// [`Agent::call`], compacting the conversation and calling again when the provider reports a context
    /// overflow (at most [`MAX_OVERFLOW_COMPACTIONS`] times); the overflow stands when nothing can be compacted.
    async fn call_fitting(&self, task: &Task, state: &mut State, tools: &[ToolSpec]) -> Result<Turn, Error> {
        let mut compactions = 0;
        loop {
            match self.call(task, state, tools).await {
                Err(e @ Error::ContextLengthExceeded { .. }) if compactions < MAX_OVERFLOW_COMPACTIONS => {
                    // the refused call does not count as a step
                    state.step -= 1;
                    compactions += 1;
                    if !self.compact(task, state, "context_length_exceeded").await? {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// Compacts the conversation (see [`compact`]): the older messages become a summary written by the model,
    /// or lose their tool outputs when the summary call overflows too. Emits `llm_compacted`; `false` when there
    /// was nothing to compact.
    async fn compact(&self, task: &Task, state: &mut State, reason: &str) -> Result<bool, Error> {
        let preserve = usize::try_from(task.compact_preserve_recent)
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(compact::DEFAULT_PRESERVE_RECENT);
        let Some(b) = compact::boundary(&state.messages, preserve) else {
            return Ok(false);
        };
        let req = Request {
            system: compact::SUMMARY_SYSTEM.into(),
            messages: vec![Message::User(compact::transcript(&state.messages[1..b]))],
            tools: Vec::new(),
            max_tokens: task.max_tokens,
            stream: self.stream,
            reasoning_effort: String::new(),
        };
        let sink = self.sink;
        let step = state.step;
        let mut on_retry = |r: &Retry| {
            let delay_ms = u64::try_from(r.delay.as_millis()).unwrap_or(u64::MAX);
            sink.event(
                "llm_retry",
                obj(json!({"step": step, "attempt": r.attempt, "delay_ms": delay_ms, "error": r.error, "error_code": r.code, "compaction": true})),
            );
        };
        let (messages, method) = match self.client.send(self.provider, &req, &mut on_retry).await {
            Ok(turn) => {
                state.tokens += turn.usage.input_tokens + turn.usage.output_tokens;
                (compact::with_summary(&state.messages, b, &turn.text), "summary")
            }
            Err(Error::ContextLengthExceeded { .. }) => {
                match compact::drop_tool_outputs(&state.messages, b) {
                    Some(m) => (m, "dropped_tool_outputs"),
                    None => return Ok(false),
                }
            }
            Err(e) => return Err(e),
        };
        let before = state.messages.len();
        state.messages = messages;
        self.sink.event(
            "llm_compacted",
            obj(json!({
                "before_messages": before,
                "after_messages": state.messages.len(),
                "reason": reason,
                "method": method,
            })),
        );
        Ok(true)
    }

    /// One model call: `llm_request`, the call (with `llm_retry`s), `llm_step_finished`, the session capture.
    async fn call(&self, task: &Task, state: &mut State, tools: &[ToolSpec]) -> Result<Turn, Error> {
        state.step += 1;
        let step = state.step;
        let p = self.provider;
        self.sink.event(
            "llm_request",
            obj(json!({"step": step, "provider": p.name, "model": p.model, "messages": state.messages.len(), "tools": tools.len()})),
        );
        let req = Request {
            system: task.system_prompt.clone(),
            messages: state.messages.clone(),
            tools: tools.to_vec(),
            max_tokens: task.max_tokens,
            stream: self.stream,
            reasoning_effort: task.reasoning_effort.clone(),
        };
        let sink = self.sink;
        let mut on_retry = |r: &Retry| {
            let delay_ms = u64::try_from(r.delay.as_millis()).unwrap_or(u64::MAX);
            sink.event(
                "llm_retry",
                obj(json!({"step": step, "attempt": r.attempt, "delay_ms": delay_ms, "error": r.error, "error_code": r.code})),
            );
        };
        let turn = self.client.send(p, &req, &mut on_retry).await?;
        state.tokens += turn.usage.input_tokens + turn.usage.output_tokens;
        self.sink.event(
            "llm_step_finished",
            obj(json!({
                "step": step,
                "stop": format!("{:?}", turn.stop),
                "input_tokens": turn.usage.input_tokens,
                "output_tokens": turn.usage.output_tokens,
                "tool_calls": turn.tool_calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            })),
        );
        state.messages.push(Message::Assistant {
            text: turn.text.clone(),
            tool_calls: turn.tool_calls.clone(),
        });
        self.sink
            .session_capture(provider::snapshot(&task.system_prompt, &state.messages));
        Ok(turn)
    }

    /// Runs one requested tool call (a builtin, or an offered delegated tool), reporting `tool_started` and `tool_called` or `tool_error`.
    async fn execute(&self, c: &ToolCallReq, offered: &[ToolSpec]) -> ToolResultMsg {
        let input_size = c.input.to_string().len();
        self.sink.event(
            "tool_started",
            obj(json!({"tool": c.name, "call_id": c.id, "input_size": input_size})),
        );
        let t = Instant::now();
        let outcome = if self.builtins.has(&c.name) {
            self.builtins
                .run(&c.name, &c.input)
                .await
                .map_err(|e| e.to_string())
        } else {
            match self.delegate {
                Some(d) if offered.iter().any(|t| t.name == c.name) => d.call(&c.name, &c.input).await,
                _ => Err(format!("{}: tool is not available", c.name)),
            }
        };
        let duration_ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
        match outcome {
            Ok(content) => {
                self.sink.event(
                    "tool_called",
                    obj(json!({"tool": c.name, "call_id": c.id, "duration_ms": duration_ms, "output_size": content.len()})),
                );
                ToolResultMsg {
                    id: c.id.clone(),
                    content,
                    is_error: false,
                }
            }
            Err(error) => {
                self.sink.event(
                    "tool_error",
                    obj(json!({"tool": c.name, "call_id": c.id, "duration_ms": duration_ms, "error": error})),
                );
                ToolResultMsg {
                    id: c.id.clone(),
                    content: error,
                    is_error: true,
                }
            }
        }
    }

    /// The output from the final text: parsed by the output rule; with a schema and an unusable text, one
    /// reformat call, then the `{"text": …}` fallback.
    async fn finish(&self, task: &Task, state: &mut State, text: String) -> Result<TaskResult, Error> {
        let mut r = TaskResult {
            raw_output_len: text.len() as u64,
            ..TaskResult::default()
        };
        let usable = |o: &Option<Map<String, Value>>, s: &Value| o.as_ref().is_some_and(|m| conforms(m, s));
        let parsed = parse_object(&text);
        let Some(schema) = &task.output_schema else {
            r.output = Some(parsed.unwrap_or_else(|| obj(json!({"text": text}))));
            return Ok(r);
        };
        if usable(&parsed, schema) {
            r.output = parsed;
            return Ok(r);
        }
        r.formatting_pass_used = true;
        state
            .messages
            .push(Message::User(format!("{REFORMAT_PROMPT}\n{schema}")));
        let turn = self.call_fitting(task, state, &[]).await?;
        let again = parse_object(&turn.text);
        if usable(&again, schema) {
            r.output = again;
        } else {
            r.parse_fallback = true;
            r.output = Some(obj(json!({"text": text})));
        }
        Ok(r)
    }
}

/// The conversation and counters of one run.
#[derive(Debug)]
struct State {
    messages: Vec<Message>,
    tokens: u64,
    step: u64,
}
