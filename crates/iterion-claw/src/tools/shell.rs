//! `bash` and `run_command` (the same tool under the reference's name; run with `sh` where the image has no
//! bash) and `web_fetch`.

use super::tool_err;
use crate::error::Result;
use iterion_boundary::{Env, HostCommand, Pipe};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// Timeout of `bash` when the call gives none.
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);
/// Upper bound of a `bash` timeout.
pub const MAX_BASH_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs `command` with `sh -c` semantics (bash when the image has it) in `work_dir`, with exactly `env` (see
/// [`super::Builtins::with_shell_env`]): the runner's provider keys and its envelope channel never reach it
/// (stdin is `/dev/null`, stdout and stderr are pipes the runner reads). A `bash` or `sh` planted in the work
/// directory is never the one started. `tool` is the name the call came under (`bash` or `run_command`).
pub(super) async fn bash(tool: &str, work_dir: &Path, env: &Env, input: &Value) -> Result<String> {
    let command = super::str_arg(tool, input, "command")?;
    let timeout = input["timeout_ms"]
        .as_u64()
        .map_or(DEFAULT_BASH_TIMEOUT, Duration::from_millis)
        .min(MAX_BASH_TIMEOUT);
    let start = |shell: &str| {
        HostCommand::new(shell, env.clone())
            .arg("-c")
            .arg(&command)
            .current_dir(work_dir)
            .untrusted_dir(work_dir)
            .stdin(Pipe::Null)
            .stdout(Pipe::Piped)
            .stderr(Pipe::Piped)
            .into_tokio()
            .map_err(|e| match e {
                iterion_boundary::Error::NotFound { .. } => {
                    std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string())
                }
                other => std::io::Error::other(other.to_string()),
            })
            .and_then(|mut c| c.kill_on_drop(true).spawn())
    };
    // images without bash (a static busybox) still have a POSIX sh, as tool nodes do
    let child = match start("bash") {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => start("sh"),
        other => other,
    }
    .map_err(|e| tool_err(tool, format!("cannot start bash (or sh): {e}")))?;
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(r) => r.map_err(|e| tool_err(tool, e.to_string()))?,
        Err(_) => {
            return Err(tool_err(
                tool,
                format!("command timed out after {} ms", timeout.as_millis()),
            ));
        }
    };
    let text = |b: &[u8]| super::cap_at(String::from_utf8_lossy(b).into_owned(), super::OUTPUT_CAP / 2);
    Ok(json!({
        "stdout": text(&out.stdout),
        "stderr": text(&out.stderr),
        "exit_code": out.status.code().unwrap_or(-1),
    })
    .to_string())
}

pub(super) async fn web_fetch(http: &reqwest::Client, url: &str) -> Result<String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(tool_err("web_fetch", "url must be http:// or https://"));
    }
    let resp = http
        .get(url)
        .send()
        .await
        .map_err(|e| tool_err("web_fetch", e.to_string()))?;
    let status = resp.status().as_u16();
    let body = resp
        .text()
        .await
        .map_err(|e| tool_err("web_fetch", e.to_string()))?;
    if !(200..300).contains(&status) {
        return Err(tool_err(
            "web_fetch",
            format!("HTTP {status}: {}", crate::error::preview(&body)),
        ));
    }
    Ok(body)
}
