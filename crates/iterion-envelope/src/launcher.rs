//! The launcher-side multiplexer: handshake, task, then concurrent dispatch of the runner's requests until its
//! `result`.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cancel::CancelSignal;
use crate::codec::encode;
use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::handshake::{SUPPORTED, accept_runner_hello};
use crate::io::{AsyncReader, SharedWriter};
use crate::tools::{NO_ASK_USER_HANDLER, NO_TOOL_DISPATCHER, oversized_tool_output};
use crate::wire::{
    AskUser, AskUserAnswer, Cancel, DEFAULT_BACKEND_NAME, Event, Hello, Task, TaskResult, ToolCall,
    ToolOutcome, ToolResult, kind,
};

/// Default bound on tool handlers running at once.
pub const DEFAULT_MAX_CONCURRENT_TOOL_CALLS: usize = 8;
/// Default wait for the runner's `hello`.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default wait for the runner's `result` after `cancel`.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(5);
/// How long the caller waits for the runner to exit after a `result` before killing it.
pub const EXIT_WAIT_AFTER_RESULT: Duration = Duration::from_secs(10);
/// How long the caller waits for the runner to exit after stdin was closed on cancellation or error.
pub const KILL_AFTER_CLOSE: Duration = Duration::from_secs(5);
/// How long the runner's output is drained after a `result`.
pub const DRAIN_AFTER_RESULT: Duration = Duration::from_secs(10);
/// How long the runner's output is drained after an error.
pub const DRAIN_AFTER_ERROR: Duration = Duration::from_secs(5);

/// How much a diagnostic matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Expected oddities (ignored envelopes).
    Debug,
    /// Something the operator may want to know (envelope after `result`, handlers cut short).
    Warning,
}

/// What the launcher does with the runner's requests. Every method has a default: tools and questions are
/// refused with a fixed error text, everything else is dropped.
pub trait Handler: Send + Sync + 'static {
    /// Executes a tool the runner asked for. Runs in its own task, concurrently with other calls.
    fn on_tool_call(
        &self,
        name: String,
        input: Option<serde_json::Value>,
    ) -> impl Future<Output = ToolOutcome> + Send {
        let _ = (name, input);
        async { ToolOutcome::Error(NO_TOOL_DISPATCHER.to_string()) }
    }

    /// Answers the runner's questions, or says why it cannot.
    fn on_ask_user(
        &self,
        request: AskUser,
    ) -> impl Future<Output = std::result::Result<BTreeMap<String, String>, String>> + Send {
        let _ = request;
        async { Err(NO_ASK_USER_HANDLER.to_string()) }
    }

    /// Receives a session snapshot, inline (before the next envelope is read).
    fn on_session_capture(&self, snapshot: &RawValue) {
        let _ = snapshot;
    }

    /// Receives a decodable `event`, inline.
    fn on_event(&self, event: Event) {
        let _ = event;
    }

    /// Receives the multiplexer's diagnostics.
    fn on_diagnostic(&self, level: Level, message: &str) {
        let _ = (level, message);
    }
}

/// A handler that implements nothing: every default applies.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHandler;

impl Handler for NoHandler {}

/// Settings of one multiplexer run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Tool handlers running at once; later calls wait in arrival order.
    pub max_concurrent_tool_calls: usize,
    /// Wait for the runner's `hello`.
    pub handshake_timeout: Duration,
    /// Wait for the runner's `result` after sending `cancel`.
    pub cancel_grace: Duration,
    /// Protocol versions offered.
    pub versions: RangeInclusive<u32>,
    /// The launcher's `software` string.
    pub software: String,
    /// Fires to cancel the task.
    pub cancel: CancelSignal,
}

impl Options {
    /// The defaults, with `software` naming the launcher (e.g. `iterion 0.4.0`).
    pub fn new(software: impl Into<String>) -> Self {
        Options {
            max_concurrent_tool_calls: DEFAULT_MAX_CONCURRENT_TOOL_CALLS,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            cancel_grace: DEFAULT_CANCEL_GRACE,
            versions: SUPPORTED,
            software: software.into(),
            cancel: CancelSignal::new(),
        }
    }
}

/// Runs one task on a runner: `hello`, the optional `session_replay`, `task`, then dispatch until `result`.
///
/// `reader` is the runner's stdout, `writer` its stdin. Before returning, the runner's stdin is closed and its
/// stdout is drained in a background task (so the runner never blocks on a full pipe). The caller then waits for
/// the process — [`EXIT_WAIT_AFTER_RESULT`] after a result, [`KILL_AFTER_CLOSE`] after a cancellation or an
/// error — and kills it through its exec handle if it has not exited. See [`crate::node_failure`] for turning
/// the outcome into a node error.
pub async fn run<R, W, H>(
    reader: R,
    writer: W,
    handler: Arc<H>,
    task: &Task,
    replay: Option<&RawValue>,
    options: Options,
) -> Result<TaskResult>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let mut reader = AsyncReader::new(reader);
    let writer = SharedWriter::new(writer);
    let outcome = session(&mut reader, &writer, &handler, task, replay, &options).await;
    writer.close().await;
    let after_result = matches!(outcome, Ok(_) | Err(Error::Cancelled { result: Some(_) }));
    tokio::spawn(drain(reader, handler, after_result));
    outcome
}

async fn drain<R: AsyncRead + Unpin, H: Handler>(
    mut reader: AsyncReader<R>,
    handler: Arc<H>,
    after_result: bool,
) {
    let budget = if after_result {
        DRAIN_AFTER_RESULT
    } else {
        DRAIN_AFTER_ERROR
    };
    let work = async {
        loop {
            match reader.read().await {
                Ok(Some(envelope)) if after_result => handler.on_diagnostic(
                    Level::Warning,
                    &format!(
                        "ignoring {:?} envelope received after the result",
                        envelope.kind()
                    ),
                ),
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(_) => break,
            }
        }
        reader.discard_rest().await;
    };
    let _ = tokio::time::timeout(budget, work).await;
}

async fn session<R, W, H>(
    reader: &mut AsyncReader<R>,
    writer: &SharedWriter<W>,
    handler: &Arc<H>,
    task: &Task,
    replay: Option<&RawValue>,
    options: &Options,
) -> Result<TaskResult>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    handshake(reader, writer, options).await?;
    if let Some(snapshot) = replay {
        let data = snapshot.to_owned();
        writer
            .send(&Envelope::from_raw(kind::SESSION_REPLAY, None, Some(data)))
            .await?;
    }
    writer.send(&Envelope::new(kind::TASK, None, task)?).await?;
    Dispatch::new(writer.clone(), Arc::clone(handler), options)
        .run(reader)
        .await
}

async fn handshake<R, W>(
    reader: &mut AsyncReader<R>,
    writer: &SharedWriter<W>,
    options: &Options,
) -> Result<u32>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let failed = |detail: String| Error::HandshakeFailed { detail };
    let hello = Hello::launcher(options.versions.clone(), options.software.clone()).to_envelope()?;
    writer
        .send(&hello)
        .await
        .map_err(|e| failed(format!("cannot send hello to the runner: {e}")))?;
    let reply = tokio::select! {
        _ = options.cancel.cancelled() => return Err(Error::Cancelled { result: None }),
        reply = tokio::time::timeout(options.handshake_timeout, reader.read()) => reply,
    };
    match reply {
        Err(_) => Err(failed(format!(
            "no hello from the runner within {}ms",
            options.handshake_timeout.as_millis()
        ))),
        Ok(Ok(None)) => Err(failed(
            "runner output ended before its hello (runner missing or built for another architecture?)"
                .to_string(),
        )),
        Ok(Err(e)) => Err(failed(e.to_string())),
        Ok(Ok(Some(envelope))) => accept_runner_hello(&envelope, &options.versions),
    }
}

/// Ids of requests whose reply has not been written yet.
type Outstanding = Arc<Mutex<HashSet<String>>>;

struct Dispatch<W, H> {
    writer: SharedWriter<W>,
    handler: Arc<H>,
    outstanding: Outstanding,
    /// Tool calls in arrival order, for the dispatcher task.
    calls: mpsc::UnboundedSender<(String, ToolCall)>,
    /// Write failures of the reply tasks.
    failures: mpsc::UnboundedReceiver<Error>,
    failure_tx: mpsc::UnboundedSender<Error>,
    work: JoinSet<()>,
    cancel: CancelSignal,
    cancel_grace: Duration,
}

impl<W, H> Dispatch<W, H>
where
    W: AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    fn new(writer: SharedWriter<W>, handler: Arc<H>, options: &Options) -> Self {
        let (calls, call_rx) = mpsc::unbounded_channel();
        let (failure_tx, failures) = mpsc::unbounded_channel();
        let outstanding: Outstanding = Arc::default();
        let mut work = JoinSet::new();
        work.spawn(dispatch_tool_calls(
            call_rx,
            Arc::new(Semaphore::new(options.max_concurrent_tool_calls.max(1))),
            writer.clone(),
            Arc::clone(&handler),
            Arc::clone(&outstanding),
            failure_tx.clone(),
        ));
        Dispatch {
            writer,
            handler,
            outstanding,
            calls,
            failures,
            failure_tx,
            work,
            cancel: options.cancel.clone(),
            cancel_grace: options.cancel_grace,
        }
    }

    async fn run<R: AsyncRead + Unpin>(mut self, reader: &mut AsyncReader<R>) -> Result<TaskResult> {
        let mut grace_deadline: Option<Instant> = None;
        loop {
            let grace = async {
                match grace_deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                Some(error) = self.failures.recv() => return Err(error),
                _ = self.cancel.cancelled(), if grace_deadline.is_none() => {
                    self.start_cancel().await;
                    grace_deadline = Some(Instant::now() + self.cancel_grace);
                }
                _ = grace => return Err(Error::Cancelled { result: None }),
                read = reader.read() => {
                    let envelope = match read {
                        Ok(Some(envelope)) => envelope,
                        Ok(None) if grace_deadline.is_some() => return Err(Error::Cancelled { result: None }),
                        Ok(None) => return Err(Error::RunnerExited),
                        Err(Error::Io(e)) => return Err(Error::Io(e)),
                        Err(e) => return Err(protocol(e.to_string())),
                    };
                    if let Some(result) = self.handle(envelope, grace_deadline.is_some())? {
                        return match grace_deadline {
                            Some(_) => Err(Error::Cancelled { result: Some(Box::new(result)) }),
                            None => Ok(result),
                        };
                    }
                }
            }
        }
    }

    async fn start_cancel(&mut self) {
        self.work.abort_all();
        let reason = self.cancel.reason().unwrap_or_default();
        let envelope = Envelope::new(kind::CANCEL, None, &Cancel { reason });
        if let Ok(envelope) = envelope
            && let Err(e) = self.writer.send(&envelope).await
        {
            self.handler
                .on_diagnostic(Level::Warning, &format!("cannot send cancel to the runner: {e}"));
        }
    }

    /// Handles one envelope; `Some` is the runner's final result.
    fn handle(&mut self, envelope: Envelope, cancelling: bool) -> Result<Option<TaskResult>> {
        match envelope.kind() {
            kind::TOOL_CALL => {
                let id = self.register(&envelope)?;
                let call: ToolCall = envelope.decode().map_err(|e| protocol(e.to_string()))?;
                if cancelling {
                    return Ok(None);
                }
                // The dispatcher only stops when the work set is aborted, which also ends this loop.
                let _ = self.calls.send((id, call));
            }
            kind::ASK_USER => {
                let id = self.register(&envelope)?;
                let request: AskUser = envelope.decode().map_err(|e| protocol(e.to_string()))?;
                if cancelling {
                    return Ok(None);
                }
                self.work.spawn(answer_ask_user(
                    id,
                    request,
                    self.writer.clone(),
                    Arc::clone(&self.handler),
                    Arc::clone(&self.outstanding),
                    self.failure_tx.clone(),
                ));
            }
            kind::SESSION_CAPTURE => match envelope.data() {
                Some(snapshot) => self.handler.on_session_capture(snapshot),
                None => self
                    .handler
                    .on_diagnostic(Level::Debug, "dropping a session_capture without data"),
            },
            kind::EVENT => match envelope.decode::<Event>() {
                Ok(event) => self.handler.on_event(event),
                Err(e) => self
                    .handler
                    .on_diagnostic(Level::Debug, &format!("dropping an undecodable event: {e}")),
            },
            kind::RESULT => {
                // Every field is optional, so a result without data is an empty (successful) one.
                let mut result: TaskResult = match envelope.data() {
                    None => TaskResult::default(),
                    Some(_) => envelope.decode().map_err(|e| protocol(e.to_string()))?,
                };
                if result.backend_name.is_empty() {
                    result.backend_name = DEFAULT_BACKEND_NAME.to_string();
                }
                let running = self.outstanding.lock().unwrap_or_else(|e| e.into_inner()).len();
                if running > 0 {
                    self.handler.on_diagnostic(
                        Level::Warning,
                        &format!(
                            "runner sent its result with {running} request(s) unanswered; cancelling them"
                        ),
                    );
                }
                self.work.abort_all();
                return Ok(Some(result));
            }
            other => self.handler.on_diagnostic(
                Level::Debug,
                &format!("ignoring {other:?} envelope from the runner"),
            ),
        }
        Ok(None)
    }

    /// Records a request's id; a missing or outstanding id is a protocol error.
    fn register(&self, envelope: &Envelope) -> Result<String> {
        let Some(id) = envelope.id() else {
            return Err(protocol(format!("{} without id", envelope.kind())));
        };
        let mut outstanding = self.outstanding.lock().unwrap_or_else(|e| e.into_inner());
        if !outstanding.insert(id.to_string()) {
            return Err(protocol(format!("{} with duplicate id {id:?}", envelope.kind())));
        }
        Ok(id.to_string())
    }
}

fn protocol(detail: String) -> Error {
    Error::Protocol { detail }
}

/// Takes tool calls in arrival order and runs each once a concurrency permit is free.
async fn dispatch_tool_calls<W, H>(
    mut calls: mpsc::UnboundedReceiver<(String, ToolCall)>,
    permits: Arc<Semaphore>,
    writer: SharedWriter<W>,
    handler: Arc<H>,
    outstanding: Outstanding,
    failures: mpsc::UnboundedSender<Error>,
) where
    W: AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    // Dropped (aborting every handler) when this task is aborted.
    let mut running = JoinSet::new();
    loop {
        let next = tokio::select! {
            next = calls.recv() => next,
            Some(_) = running.join_next(), if !running.is_empty() => continue,
        };
        let Some((id, call)) = next else { break };
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            break;
        };
        let (writer, handler, outstanding, failures) = (
            writer.clone(),
            Arc::clone(&handler),
            Arc::clone(&outstanding),
            failures.clone(),
        );
        running.spawn(async move {
            let outcome = handler.on_tool_call(call.name, call.input).await;
            drop(permit);
            let reply = tool_result_line(&id, outcome);
            reply_and_release(&writer, reply, &id, &outstanding, &failures).await;
        });
    }
    while running.join_next().await.is_some() {}
}

async fn answer_ask_user<W, H>(
    id: String,
    request: AskUser,
    writer: SharedWriter<W>,
    handler: Arc<H>,
    outstanding: Outstanding,
    failures: mpsc::UnboundedSender<Error>,
) where
    W: AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let answer = match handler.on_ask_user(request).await {
        Ok(answers) => AskUserAnswer { answers },
        Err(message) => AskUserAnswer::error(message),
    };
    let reply =
        Envelope::new(kind::ASK_USER_ANSWER, Some(id.clone()), &answer).and_then(|e| match encode(&e) {
            Err(Error::EnvelopeTooLarge { size, .. }) => {
                let answer = AskUserAnswer::error(format!(
                    "answers too large for the envelope channel ({size} bytes)"
                ));
                encode(&Envelope::new(kind::ASK_USER_ANSWER, Some(id.clone()), &answer)?)
            }
            other => other,
        });
    reply_and_release(&writer, reply, &id, &outstanding, &failures).await;
}

/// The encoded `tool_result` line; an oversized one is replaced by an error reply.
fn tool_result_line(id: &str, outcome: ToolOutcome) -> Result<Vec<u8>> {
    let envelope = Envelope::new(
        kind::TOOL_RESULT,
        Some(id.to_string()),
        &ToolResult::from(outcome),
    )?;
    match encode(&envelope) {
        Err(Error::EnvelopeTooLarge { size, .. }) => {
            let error = ToolResult::from(ToolOutcome::Error(oversized_tool_output(size)));
            encode(&Envelope::new(kind::TOOL_RESULT, Some(id.to_string()), &error)?)
        }
        other => other,
    }
}

async fn reply_and_release<W: AsyncWrite + Unpin>(
    writer: &SharedWriter<W>,
    line: Result<Vec<u8>>,
    id: &str,
    outstanding: &Outstanding,
    failures: &mpsc::UnboundedSender<Error>,
) {
    let written = match line {
        Ok(line) => writer.send_line(&line).await,
        Err(e) => Err(e),
    };
    outstanding.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    if let Err(e) = written {
        let _ = failures.send(e);
    }
}
