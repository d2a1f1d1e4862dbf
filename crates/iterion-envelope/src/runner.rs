//! The runner side: the bootstrap (`hello`, replays, `task`) and the [`Channel`] the model loop talks through.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::cancel::CancelSignal;
use crate::codec::encode;
use crate::envelope::Envelope;
use crate::error::{Error, Result};
use crate::handshake::{RUNNER_CAPABILITIES, SUPPORTED, accept_launcher_hello};
use crate::io::{AsyncReader, SharedWriter};
use crate::wire::{
    AskUser, AskUserAnswer, Cancel, Event, Hello, Task, TaskResult, ToolCall, ToolOutcome, ToolResult,
    error_code, kind,
};

/// The prefix of every diagnostic line a runner writes to stderr.
pub const STDERR_PREFIX: &str = "iterion-claw-runner: ";

/// Where the runner's diagnostics go (one line each, without the prefix).
pub type Diagnostics = Arc<dyn Fn(&str) + Send + Sync>;

/// Settings of the runner side.
#[derive(Clone)]
#[non_exhaustive]
pub struct RunnerOptions {
    /// Protocol versions the runner speaks.
    pub supported: RangeInclusive<u32>,
    /// The runner's `software` string.
    pub software: String,
    /// Capabilities announced in `hello`.
    pub capabilities: Vec<&'static str>,
    /// Receives diagnostics; by default they go to stderr with [`STDERR_PREFIX`].
    pub diagnostics: Diagnostics,
}

impl std::fmt::Debug for RunnerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerOptions")
            .field("supported", &self.supported)
            .field("software", &self.software)
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}

impl RunnerOptions {
    /// The defaults, with `software` naming the runner (e.g. `iterion 0.4.0`).
    pub fn new(software: impl Into<String>) -> Self {
        RunnerOptions {
            supported: SUPPORTED,
            software: software.into(),
            capabilities: RUNNER_CAPABILITIES.to_vec(),
            diagnostics: Arc::new(|line| eprintln!("{STDERR_PREFIX}{line}")),
        }
    }
}

/// A runner ready to execute its task.
#[derive(Debug)]
pub struct Bootstrap<W> {
    /// The agreed protocol version.
    pub version: u32,
    /// The task.
    pub task: Task,
    /// The last `session_replay` snapshot received before the task.
    pub replay: Option<Box<RawValue>>,
    /// The channel to the launcher.
    pub channel: Channel<W>,
}

/// Performs the runner's bootstrap over its stdin (`reader`) and stdout (`writer`).
///
/// On a protocol violation or a `cancel` before the task, the matching `result` is written and
/// [`Error::Bootstrap`] says which exit status the process must end with.
pub async fn bootstrap<R, W>(reader: R, writer: W, options: RunnerOptions) -> Result<Bootstrap<W>>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut reader = AsyncReader::new(reader);
    let writer = SharedWriter::new(writer);
    let refuse = |result: TaskResult, exit_code: i32| {
        let writer = writer.clone();
        let diagnostics = Arc::clone(&options.diagnostics);
        async move {
            if let Err(e) = writer.send(&Envelope::new(kind::RESULT, None, &result)?).await {
                diagnostics(&format!("cannot write the result: {e}"));
            }
            Err::<Bootstrap<W>, Error>(Error::Bootstrap {
                result: Box::new(result),
                exit_code,
            })
        }
    };
    let protocol_error = |msg: String| TaskResult::failure(msg, error_code::ENVELOPE_PROTOCOL_ERROR);

    let first = match reader.read().await {
        Ok(Some(envelope)) => envelope,
        Ok(None) => return refuse(protocol_error("expected hello, got end of input".into()), 2).await,
        Err(e) => return refuse(protocol_error(format!("expected hello: {e}")), 2).await,
    };
    let version = match accept_launcher_hello(&first, &options.supported) {
        Ok(version) => version,
        Err(result) => return refuse(*result, 2).await,
    };
    let hello = Hello::runner(version, options.software.clone(), &options.capabilities);
    writer.send(&hello.to_envelope()?).await?;

    let mut replay: Option<Box<RawValue>> = None;
    let task = loop {
        let envelope = match reader.read().await {
            Ok(Some(envelope)) => envelope,
            Ok(None) => {
                return refuse(
                    protocol_error("launcher closed the envelope channel before task".into()),
                    2,
                )
                .await;
            }
            Err(e) => return refuse(protocol_error(format!("reading before task: {e}")), 2).await,
        };
        match envelope.kind() {
            kind::SESSION_REPLAY => {
                if replay.is_some() {
                    (options.diagnostics)(
                        "several session_replay envelopes before the task; keeping the last",
                    );
                }
                replay = envelope.data().map(RawValue::to_owned);
            }
            kind::CANCEL => {
                let reason = envelope.decode::<Cancel>().map(|c| c.reason).unwrap_or_default();
                return refuse(TaskResult::cancelled(&reason), 1).await;
            }
            kind::TASK => match decode_task(&envelope) {
                Ok(task) => break task,
                Err(detail) => {
                    let msg = format!("task envelope has empty or invalid data: {detail}");
                    return refuse(protocol_error(msg), 2).await;
                }
            },
            other => {
                return refuse(
                    protocol_error(format!("unexpected envelope {other:?} before task")),
                    2,
                )
                .await;
            }
        }
    };
    Ok(Bootstrap {
        version,
        task,
        replay,
        channel: Channel::start(reader, writer, options.diagnostics),
    })
}

fn decode_task(envelope: &Envelope) -> std::result::Result<Task, String> {
    let Some(data) = envelope.data() else {
        return Err("no data".to_string());
    };
    let task: Task = serde_json::from_str(data.get()).map_err(|e| e.to_string())?;
    if task.node_id.is_empty() {
        return Err("node_id is missing".to_string());
    }
    Ok(task)
}

type Slot = oneshot::Sender<Result<Envelope>>;

#[derive(Default)]
struct Pending {
    slots: HashMap<String, Slot>,
    closed: bool,
}

struct Shared<W> {
    writer: SharedWriter<W>,
    pending: Mutex<Pending>,
    next_call: AtomicU64,
    next_ask: AtomicU64,
    finished: AtomicBool,
    cancel: CancelSignal,
    diagnostics: Diagnostics,
}

impl<W> Shared<W> {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The runner's channel to the launcher after the bootstrap. One background task reads the launcher's
/// envelopes and routes replies by id; dropping the channel stops it.
pub struct Channel<W> {
    shared: Arc<Shared<W>>,
    reader: JoinHandle<()>,
}

impl<W> std::fmt::Debug for Channel<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("finished", &self.shared.finished.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<W> Drop for Channel<W> {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> Channel<W> {
    fn start<R: AsyncRead + Unpin + Send + 'static>(
        reader: AsyncReader<R>,
        writer: SharedWriter<W>,
        diagnostics: Diagnostics,
    ) -> Self {
        let shared = Arc::new(Shared {
            writer,
            pending: Mutex::new(Pending::default()),
            next_call: AtomicU64::new(1),
            next_ask: AtomicU64::new(1),
            finished: AtomicBool::new(false),
            cancel: CancelSignal::new(),
            diagnostics,
        });
        let reader = tokio::spawn(route_replies(reader, Arc::clone(&shared)));
        Channel { shared, reader }
    }

    /// Asks the launcher to execute a tool and waits for its reply, a cancellation, or the channel's end.
    pub async fn call_tool(&self, name: &str, input: Option<Value>) -> Result<ToolOutcome> {
        let call = ToolCall {
            name: name.to_string(),
            input,
        };
        let reply = self
            .request("call", &self.shared.next_call, kind::TOOL_CALL, &call)
            .await?;
        Ok(reply.decode::<ToolResult>()?.outcome())
    }

    /// [`Channel::call_tool`] with every failure turned into a tool error for the model.
    pub async fn run_tool(&self, name: &str, input: Option<Value>) -> ToolOutcome {
        match self.call_tool(name, input).await {
            Ok(outcome) => outcome,
            Err(Error::Data { detail, .. }) => {
                ToolOutcome::Error(format!("dispatcher: decode tool_result: {detail}"))
            }
            Err(e) => ToolOutcome::Error(format!("dispatcher: tool_call: {e}")),
        }
    }

    /// Asks the user through the launcher and waits for the answers.
    pub async fn ask_user(&self, request: &AskUser) -> Result<AskUserAnswer> {
        let reply = self
            .request("ask", &self.shared.next_ask, kind::ASK_USER, request)
            .await?;
        reply.decode()
    }

    async fn request(
        &self,
        prefix: &str,
        counter: &AtomicU64,
        kind: &str,
        payload: &impl Serialize,
    ) -> Result<Envelope> {
        if self.shared.finished.load(Ordering::SeqCst) {
            return Err(Error::Finished);
        }
        let id = format!("{prefix}-{}", counter.fetch_add(1, Ordering::SeqCst));
        let envelope = Envelope::new(kind, Some(id.clone()), payload)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.shared.pending();
            if pending.closed {
                return Err(Error::ChannelClosed);
            }
            pending.slots.insert(id.clone(), tx);
        }
        if let Err(e) = self.shared.writer.send(&envelope).await {
            self.shared.pending().slots.remove(&id);
            return Err(e);
        }
        tokio::select! {
            biased;
            reply = rx => reply.unwrap_or(Err(Error::ChannelClosed)),
            _ = self.shared.cancel.cancelled() => {
                self.shared.pending().slots.remove(&id);
                Err(Error::Cancelled { result: None })
            }
        }
    }

    /// Sends a session snapshot; best effort (an oversized or failed write becomes a diagnostic).
    pub async fn capture_session(&self, snapshot: &impl Serialize) {
        match Envelope::new(kind::SESSION_CAPTURE, None, snapshot) {
            Ok(envelope) => self.best_effort(&envelope).await,
            Err(e) => (self.shared.diagnostics)(&format!("session_capture not sent: {e}")),
        }
    }

    /// Sends an observability event; best effort.
    pub async fn emit_event(&self, event_type: &str, payload: Option<Map<String, Value>>) {
        let event = Event {
            kind: event_type.to_string(),
            payload,
        };
        match Envelope::new(kind::EVENT, None, &event) {
            Ok(envelope) => self.best_effort(&envelope).await,
            Err(e) => (self.shared.diagnostics)(&format!("event not sent: {e}")),
        }
    }

    async fn best_effort(&self, envelope: &Envelope) {
        if self.shared.finished.load(Ordering::SeqCst) {
            (self.shared.diagnostics)(&format!(
                "{} not sent: the result was already written",
                envelope.kind()
            ));
            return;
        }
        if let Err(e) = self.shared.writer.send(envelope).await {
            (self.shared.diagnostics)(&format!("{} not sent: {e}", envelope.kind()));
        }
    }

    /// Writes the task's `result` (an oversized one is replaced by an error result) and returns the exit status
    /// the runner must end with. Every later operation fails.
    pub async fn finish(&self, result: &TaskResult) -> Result<i32> {
        if self.shared.finished.swap(true, Ordering::SeqCst) {
            return Err(Error::Finished);
        }
        let envelope = Envelope::new(kind::RESULT, None, result)?;
        let (line, sent) = match encode(&envelope) {
            Ok(line) => (line, result.clone()),
            Err(Error::EnvelopeTooLarge { size, .. }) => {
                let replacement = TaskResult {
                    tokens: result.tokens,
                    duration_ms: result.duration_ms,
                    ..TaskResult::failure(
                        format!("result too large for the envelope channel ({size} bytes)"),
                        error_code::EXECUTION_FAILED,
                    )
                };
                (
                    encode(&Envelope::new(kind::RESULT, None, &replacement)?)?,
                    replacement,
                )
            }
            Err(e) => return Err(e),
        };
        self.shared.writer.send_line(&line).await?;
        Ok(sent.runner_exit_code())
    }

    /// Completes when the launcher sends `cancel` or closes the runner's stdin.
    pub async fn cancelled(&self) {
        self.shared.cancel.cancelled().await;
    }

    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancel.is_cancelled()
    }

    /// The cancellation reason, once cancelled.
    pub fn cancel_reason(&self) -> Option<String> {
        self.shared.cancel.reason()
    }
}

/// The background reader: routes replies to their pending request, turns `cancel` and end of input into
/// cancellation, and fails every pending request when the input ends.
async fn route_replies<R: AsyncRead + Unpin, W>(mut reader: AsyncReader<R>, shared: Arc<Shared<W>>) {
    let end = loop {
        match reader.read().await {
            Ok(Some(envelope)) => route(envelope, &shared),
            Ok(None) => break None,
            Err(e) => break Some(e.to_string()),
        }
    };
    let slots = {
        let mut pending = shared.pending();
        pending.closed = true;
        std::mem::take(&mut pending.slots)
    };
    for (_, slot) in slots {
        let error = match &end {
            None => Error::LauncherClosed,
            Some(detail) => Error::ReadFailed {
                detail: detail.clone(),
            },
        };
        let _ = slot.send(Err(error));
    }
    match end {
        None => shared.cancel.cancel("launcher closed the envelope channel"),
        Some(detail) => (shared.diagnostics)(&format!("reading the launcher's envelopes failed: {detail}")),
    }
}

fn route<W>(envelope: Envelope, shared: &Shared<W>) {
    let Some(id) = envelope.id().map(str::to_string) else {
        if envelope.kind() == kind::CANCEL {
            let reason = envelope.decode::<Cancel>().map(|c| c.reason).unwrap_or_default();
            shared.cancel.cancel(reason);
        }
        return;
    };
    let Some(slot) = shared.pending().slots.remove(&id) else {
        (shared.diagnostics)(&format!(
            "dropping {:?} for {id:?}, which is not pending",
            envelope.kind()
        ));
        return;
    };
    let expected = if id.starts_with("ask-") {
        kind::ASK_USER_ANSWER
    } else {
        kind::TOOL_RESULT
    };
    let reply = if envelope.kind() == expected {
        Ok(envelope)
    } else {
        Err(Error::UnexpectedReply {
            reply_type: envelope.kind().to_string(),
            id,
        })
    };
    let _ = slot.send(reply);
}
