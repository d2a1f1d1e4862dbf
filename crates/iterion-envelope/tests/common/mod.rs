//! Shared pieces of the async tests: in-memory pipes, a scripted peer, and a recording launcher handler.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iterion_envelope::launcher::{Handler, Level};
use iterion_envelope::{AskUser, AsyncReader, Envelope, Event, ToolOutcome, kind};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::Notify;

/// A safety net so a broken test fails instead of hanging; never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub async fn patiently<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no progress within {PATIENCE:?}"))
}

/// One end of a byte pipe pair: what the process under test reads and writes.
pub struct Ends {
    pub read: ReadHalf<DuplexStream>,
    pub write: WriteHalf<DuplexStream>,
}

/// The process under test's ends and the scripted peer's ends, connected through a 64 KiB pipe.
pub fn pipes() -> (Ends, Peer) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    (
        Ends { read: ar, write: aw },
        Peer {
            reader: AsyncReader::new(br),
            write: bw,
        },
    )
}

/// The other side, scripted by the test.
pub struct Peer {
    pub reader: AsyncReader<ReadHalf<DuplexStream>>,
    pub write: WriteHalf<DuplexStream>,
}

impl Peer {
    /// Sends one line as given (LF added).
    pub async fn line(&mut self, json: &str) {
        self.raw(format!("{json}\n").as_bytes()).await;
    }

    /// Sends raw bytes.
    pub async fn raw(&mut self, bytes: &[u8]) {
        patiently("peer write", self.write.write_all(bytes))
            .await
            .unwrap();
    }

    /// The next envelope, which must exist.
    pub async fn next(&mut self) -> Envelope {
        patiently("peer read", self.reader.read())
            .await
            .unwrap()
            .expect("an envelope, got end of stream")
    }

    /// The next envelope, which must have this type.
    pub async fn expect(&mut self, expected: &str) -> Envelope {
        let envelope = self.next().await;
        assert_eq!(envelope.kind(), expected, "got {}", show(&envelope));
        envelope
    }

    /// Asserts the other side closed its output.
    pub async fn expect_eof(&mut self) {
        let next = patiently("peer read", self.reader.read()).await.unwrap();
        assert!(
            next.is_none(),
            "expected end of stream, got {}",
            show(&next.unwrap())
        );
    }

    /// Plays the runner's half of the handshake and reads the task.
    pub async fn runner_bootstrap(&mut self) -> Envelope {
        self.expect(kind::HELLO).await;
        self.line(r#"{"type":"hello","data":{"protocol":"iterion.envelope","role":"runner","version":1,"software":"test","capabilities":["cancel","event","session_capture"]}}"#).await;
        self.expect(kind::TASK).await
    }

    /// Closes the peer's output (the other side reads end of stream).
    pub async fn close(&mut self) {
        self.write.shutdown().await.unwrap();
    }
}

/// An envelope as its line, without LF.
pub fn show(envelope: &Envelope) -> String {
    let line = iterion_envelope::encode(envelope).unwrap();
    String::from_utf8(line).unwrap().trim_end().to_string()
}

pub type ToolFn =
    Arc<dyn Fn(String, Option<Value>) -> Pin<Box<dyn Future<Output = ToolOutcome> + Send>> + Send + Sync>;

/// A launcher handler that records everything; tools run `tool` when set, else the crate's default.
#[derive(Default)]
pub struct Recorder {
    pub tool: Option<ToolFn>,
    pub answers: Option<BTreeMap<String, String>>,
    pub calls: Mutex<Vec<(String, Option<Value>)>>,
    /// `event:<type>` and `capture:<json>` in arrival order.
    pub log: Mutex<Vec<String>>,
    pub diagnostics: Mutex<Vec<(Level, String)>>,
    pub diagnosed: Notify,
}

impl Recorder {
    pub fn with_tool<F, Fut>(f: F) -> Self
    where
        F: Fn(String, Option<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolOutcome> + Send + 'static,
    {
        Recorder {
            tool: Some(Arc::new(move |name, input| Box::pin(f(name, input)))),
            ..Recorder::default()
        }
    }

    pub fn calls(&self) -> Vec<(String, Option<Value>)> {
        self.calls.lock().unwrap().clone()
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn diagnostics(&self) -> Vec<(Level, String)> {
        self.diagnostics.lock().unwrap().clone()
    }
}

impl Handler for Recorder {
    fn on_tool_call(&self, name: String, input: Option<Value>) -> impl Future<Output = ToolOutcome> + Send {
        self.calls.lock().unwrap().push((name.clone(), input.clone()));
        let tool = self.tool.clone();
        async move {
            match tool {
                Some(tool) => tool(name, input).await,
                None => ToolOutcome::Error(iterion_envelope::NO_TOOL_DISPATCHER.to_string()),
            }
        }
    }

    fn on_ask_user(
        &self,
        request: AskUser,
    ) -> impl Future<Output = Result<BTreeMap<String, String>, String>> + Send {
        let _ = request;
        let answers = self.answers.clone();
        async move { answers.ok_or_else(|| iterion_envelope::NO_ASK_USER_HANDLER.to_string()) }
    }

    fn on_session_capture(&self, snapshot: &RawValue) {
        self.log
            .lock()
            .unwrap()
            .push(format!("capture:{}", snapshot.get()));
    }

    fn on_event(&self, event: Event) {
        self.log.lock().unwrap().push(format!("event:{}", event.kind));
    }

    fn on_diagnostic(&self, level: Level, message: &str) {
        self.diagnostics
            .lock()
            .unwrap()
            .push((level, message.to_string()));
        self.diagnosed.notify_one();
    }
}
