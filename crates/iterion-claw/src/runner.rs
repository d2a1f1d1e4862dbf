//! The runner side of one claw node: bootstrap over the envelope channel, run the task's loop, send the
//! `result`. Events and session captures go to the launcher as `event` / `session_capture`; non-builtin tools
//! go to it as `tool_call`. A `cancel` (or the launcher closing stdin) stops the loop with a `CANCELLED` result.

use crate::agent::{Agent, Sink, ToolDelegate};
use crate::provider::{self, Client, RetryPolicy};
use crate::tools::Builtins;
use futures::future::BoxFuture;
use iterion_envelope::runner::{Channel, RunnerOptions, bootstrap};
use iterion_envelope::{Error as EnvelopeError, Task, TaskResult, ToolOutcome, error_code};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// What the runner needs besides its task: the env map (keys, base URLs) and the egress proxy URL.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct ServeOptions {
    /// Provider keys and base URLs (`ANTHROPIC_API_KEY`, `OPENAI_BASE_URL`, …).
    pub env: BTreeMap<String, String>,
    /// The egress proxy URL, credentials included, when the run has one.
    pub proxy: Option<String>,
    /// The runner's `software` string in `hello`.
    pub software: String,
    /// Whether model answers are streamed.
    pub stream: bool,
    /// Retry policy of model calls.
    pub retry: RetryPolicy,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("software", &self.software)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl ServeOptions {
    /// Options with `env`, no proxy, streaming on and the default retry policy.
    pub fn new(env: BTreeMap<String, String>, software: impl Into<String>) -> Self {
        ServeOptions {
            env,
            proxy: None,
            software: software.into(),
            stream: true,
            retry: RetryPolicy::default(),
        }
    }

    /// Sends model and `web_fetch` traffic through `proxy`.
    pub fn with_proxy(mut self, proxy: impl Into<String>) -> Self {
        self.proxy = Some(proxy.into());
        self
    }
}

/// What the sink forwards to the launcher, in order.
enum Outbound {
    Event(String, Map<String, Value>),
    Capture(Value),
}

struct ChannelSink(mpsc::UnboundedSender<Outbound>);

impl Sink for ChannelSink {
    fn event(&self, kind: &str, payload: Map<String, Value>) {
        let _ = self.0.send(Outbound::Event(kind.to_string(), payload));
    }
    fn session_capture(&self, snapshot: Value) {
        let _ = self.0.send(Outbound::Capture(snapshot));
    }
}

struct ChannelTools<W>(Arc<Channel<W>>);

impl<W: AsyncWrite + Unpin + Send + Sync + 'static> ToolDelegate for ChannelTools<W> {
    fn call<'a>(&'a self, name: &'a str, input: &'a Value) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            match self.0.run_tool(name, Some(input.clone())).await {
                ToolOutcome::Output(text) => Ok(text),
                ToolOutcome::Error(text) => Err(text),
                ToolOutcome::AskUser(_) => Err(format!(
                    "{name}: asking the user is not supported in this version"
                )),
            }
        })
    }
}

/// Runs one node over `reader`/`writer` (the runner's stdin and stdout) and returns the process exit status.
pub async fn serve<R, W>(reader: R, writer: W, options: ServeOptions) -> i32
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + Sync + 'static,
{
    let boot = match bootstrap(reader, writer, RunnerOptions::new(options.software.clone())).await {
        Ok(b) => b,
        Err(EnvelopeError::Bootstrap { exit_code, .. }) => return exit_code,
        Err(e) => {
            eprintln!("iterion-claw-runner: bootstrap failed: {e}");
            return 2;
        }
    };
    let channel = Arc::new(boot.channel);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let forward = {
        let channel = Arc::clone(&channel);
        tokio::spawn(async move {
            while let Some(out) = rx.recv().await {
                match out {
                    Outbound::Event(kind, payload) => channel.emit_event(&kind, Some(payload)).await,
                    Outbound::Capture(snapshot) => channel.capture_session(&snapshot).await,
                }
            }
        })
    };
    let replay = boot.replay.as_deref().and_then(decode_replay);
    let result = tokio::select! {
        r = execute(&boot.task, replay, &options, ChannelSink(tx), ChannelTools(Arc::clone(&channel))) => r,
        () = channel.cancelled() => {
            let reason = channel.cancel_reason().unwrap_or_default();
            TaskResult::failure(format!("cancelled: {reason}"), error_code::CANCELLED)
        }
    };
    // every event and capture reaches the launcher before the result
    let _ = forward.await;
    match channel.finish(&result).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("iterion-claw-runner: cannot send the result: {e}");
            2
        }
    }
}

/// Proxy variables the runner honours, in order: the first non-empty one is the egress proxy of every model
/// and `web_fetch` request (`NO_PROXY` is not honoured: in a sandbox nothing else is reachable).
pub const PROXY_VARS: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "HTTP_PROXY",
    "http_proxy",
];

/// The egress proxy URL named by `env` (see [`PROXY_VARS`]), if any.
pub fn proxy_from_env(env: &BTreeMap<String, String>) -> Option<String> {
    PROXY_VARS
        .iter()
        .filter_map(|k| env.get(*k))
        .map(|v| v.trim())
        .find(|v| !v.is_empty())
        .map(str::to_string)
}

/// The runner process over its own stdin and stdout: `env` is the process environment (keys, base URLs and the
/// proxy come from it, never from argv or the task), `software` the `hello` software string. Returns the exit
/// status; the caller should exit the process with it right away (a pending read of stdin would otherwise
/// keep the runtime alive).
///
/// First the process guards its envelope channel against its own tools (see [`private_channel`]).
pub async fn run_stdio(env: BTreeMap<String, String>, software: impl Into<String>) -> i32 {
    let (reader, writer) = match private_channel() {
        Ok(channel) => channel,
        Err(e) => {
            eprintln!("iterion-claw-runner: cannot set up the envelope channel: {e}");
            return 2;
        }
    };
    let proxy = proxy_from_env(&env);
    let mut options = ServeOptions::new(env, software);
    options.proxy = proxy;
    serve(reader, writer, options).await
}

/// Takes the envelope channel off the standard streams, before any tool runs: the process becomes
/// non-dumpable (a tool runs as the same user, and could otherwise open `/proc/<runner>/fd/1` and write a
/// `result` of its choosing, or read the provider key in `/proc/<runner>/environ`), the channel moves to new
/// close-on-exec descriptors that no child inherits, and descriptors 0 and 1 become `/dev/null` and stderr, so
/// a program that does inherit them reaches no envelope.
fn private_channel() -> std::io::Result<(tokio::fs::File, tokio::fs::File)> {
    use std::os::fd::AsFd;
    nix::sys::prctl::set_dumpable(false)?;
    // `try_clone_to_owned` duplicates with F_DUPFD_CLOEXEC
    let input = std::io::stdin().as_fd().try_clone_to_owned()?;
    let output = std::io::stdout().as_fd().try_clone_to_owned()?;
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(&null)?;
    nix::unistd::dup2_stdout(std::io::stderr())?;
    Ok((
        tokio::fs::File::from_std(std::fs::File::from(input)),
        tokio::fs::File::from_std(std::fs::File::from(output)),
    ))
}

/// The environment of the runner's `bash` tool: the runner's own (what the node's place gives any of its
/// commands) without the variables the launcher added for the runner alone: every provider's key and base
/// URL, and the compaction override.
pub fn tool_env(env: &BTreeMap<String, String>) -> iterion_boundary::Env {
    let runner_only = provider::all_env_vars();
    iterion_boundary::Env::from_map(env.iter().filter(|(k, _)| {
        !runner_only.contains(&k.as_str()) && k.as_str() != crate::compact::CONTEXT_WINDOW_VAR
    }))
}

/// The conversation of a replayed session snapshot; one that cannot be decoded is a warning on stderr and a
/// fresh start.
fn decode_replay(raw: &serde_json::value::RawValue) -> Option<Vec<crate::provider::Message>> {
    let decoded = serde_json::from_str::<Value>(raw.get())
        .map_err(|e| e.to_string())
        .and_then(|v| crate::compact::decode_snapshot(&v));
    match decoded {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!(
                "iterion-claw-runner: warning: the replayed session cannot be decoded ({e}); starting fresh"
            );
            None
        }
    }
}

/// The task's loop with the sink and delegate; setup failures become failed results.
async fn execute<D: ToolDelegate>(
    task: &Task,
    replay: Option<Vec<crate::provider::Message>>,
    options: &ServeOptions,
    sink: ChannelSink,
    tools: D,
) -> TaskResult {
    let setup = || -> crate::Result<(provider::Provider, Client, Builtins)> {
        let p = provider::resolve(&task.provider_hint, &task.model, &options.env)?;
        let roots = crate::provider::trust_file_roots(&options.env);
        let client = Client::with_roots(options.proxy.as_deref(), options.retry, &roots)?;
        let allowed: &[String] = if task.has_tools { &task.allowed_tools } else { &[] };
        let builtins = Builtins::new(
            &PathBuf::from(&task.work_dir),
            allowed,
            task.readonly,
            options.proxy.as_deref(),
        )?
        .with_shell_env(tool_env(&options.env));
        Ok((p, client, builtins))
    };
    match setup() {
        Ok((p, client, builtins)) => {
            let window = crate::compact::context_window(&p.model, &options.env);
            Agent::new(&client, &p, &builtins, &sink)
                .with_delegate(&tools)
                .streaming(options.stream)
                .with_context_window(window)
                .run_from(task, replay)
                .await
        }
        Err(e) => TaskResult::failure(e.to_string(), e.code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_env_keeps_the_node_s_variables_and_no_provider_s() {
        let env: BTreeMap<String, String> = [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/dev"),
            ("HTTPS_PROXY", "http://n:tok@127.0.0.1:3128"),
            ("ITERION_NODE_ID", "a"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("ANTHROPIC_BASE_URL", "http://model"),
            ("OPENAI_API_KEY", "sk-oai"),
            ("GROQ_API_KEY", "gsk"),
            (crate::compact::CONTEXT_WINDOW_VAR, "1000"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let names: Vec<String> = tool_env(&env)
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["HOME", "HTTPS_PROXY", "ITERION_NODE_ID", "PATH"]);
    }
}
