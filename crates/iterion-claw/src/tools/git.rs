//! `git_status` and `git_diff`: git run in the work directory where the runner is (inside the sandbox for a
//! sandboxed node), started like `bash` (through [`HostCommand`], from the shell environment, never from a
//! `git` planted in the work directory) and bounded. No program the repository's configuration names runs:
//! every call carries [`iterion_boundary::git::HARDENED`], `--no-pager`, `--no-optional-locks` (a status
//! writes nothing, not even the index's refreshed stat data; `git diff` refreshes it regardless, as it always
//! does), and a diff `--no-ext-diff
//! --no-textconv`; attributes come from the empty tree where git supports it (2.40+), so no `.gitattributes`
//! names a filter.

use super::confine::Root;
use super::tool_err;
use crate::error::Result;
use iterion_boundary::git::{HARDENED, ObjectFormat};
use iterion_boundary::{Bounds, Env, HostCommand};
use serde_json::Value;
use std::time::Duration;

/// How long one git call may take.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Stdout kept of a git call; a longer diff is an error asking for a narrower one.
pub const MAX_GIT_OUTPUT: usize = 4 << 20;

/// `git_status`: `git status --short --branch` of the work directory.
pub(super) async fn git_status(root: &Root, env: &Env) -> Result<String> {
    let out = git(root, env, "git_status", &["status", "--short", "--branch"]).await?;
    Ok(if out.trim().is_empty() {
        "nothing to report".into()
    } else {
        out
    })
}

/// `git_diff`: the unstaged changes, or with `staged` the staged ones, or against `base` (a revision); only
/// below `path` when given.
pub(super) async fn git_diff(root: &Root, env: &Env, input: &Value) -> Result<String> {
    const TOOL: &str = "git_diff";
    let mut args = vec!["diff", "--no-ext-diff", "--no-textconv", "--no-color"];
    if input["staged"].as_bool().unwrap_or(false) {
        args.push("--cached");
    }
    let base = input["base"].as_str().unwrap_or_default();
    if !base.is_empty() {
        // a revision, never an option
        if base.starts_with('-') || base.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(tool_err(TOOL, format!("'{base}' is not a revision")));
        }
        args.push(base);
    }
    args.push("--");
    let path = match input["path"].as_str() {
        Some(p) => {
            let confined = root.confine(TOOL, p)?;
            Some(root.shown(&confined))
        }
        None => None,
    };
    if let Some(p) = &path {
        args.push(p);
    }
    let out = git(root, env, TOOL, &args).await?;
    Ok(if out.trim().is_empty() {
        "no differences".into()
    } else {
        out
    })
}

/// Runs `git <args>` in the work directory and returns its stdout; a failure is a tool error with git's
/// stderr, a missing git "git is not available".
async fn git(root: &Root, env: &Env, tool: &'static str, args: &[&str]) -> Result<String> {
    let dir = root.path().to_path_buf();
    let env = env.clone();
    let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
    let run = move || -> Result<String> {
        let format = object_format(&dir, &env);
        let mut env = env;
        if let Some(f) = format {
            env.set("GIT_ATTR_SOURCE", f.empty_tree());
        }
        let captured = command(&dir, env, &args)
            .run_bounded(None, Bounds::new(GIT_TIMEOUT).max_stdout(MAX_GIT_OUTPUT))
            .map_err(|e| match e {
                iterion_boundary::Error::NotFound { .. } => tool_err(
                    tool,
                    "git is not available in this environment (no git program on PATH)",
                ),
                iterion_boundary::Error::OutputTooLarge { .. } => tool_err(
                    tool,
                    format!("git output passed {MAX_GIT_OUTPUT} bytes; narrow it with 'path'"),
                ),
                other => tool_err(tool, other.to_string()),
            })?;
        if !captured.status.success() {
            let stderr = String::from_utf8_lossy(&captured.stderr);
            return Err(tool_err(
                tool,
                format!(
                    "git exited with {}: {}",
                    captured.status.code().unwrap_or(-1),
                    stderr.trim()
                ),
            ));
        }
        Ok(String::from_utf8_lossy(&captured.stdout).into_owned())
    };
    tokio::task::spawn_blocking(run)
        .await
        .map_err(|e| tool_err(tool, e.to_string()))?
}

fn command(dir: &std::path::Path, env: Env, args: &[String]) -> HostCommand {
    let mut c = HostCommand::new("git", env).current_dir(dir).untrusted_dir(dir);
    // a status writes no refreshed index back: it changes nothing, also in a readonly node
    c = c.arg("--no-pager").arg("--no-optional-locks");
    for h in HARDENED {
        c = c.arg("-c").arg(h);
    }
    c.args(args)
}

/// The repository's object format, asked of git (`None` outside a repository or when git does not say):
/// its empty tree is the attribute source.
fn object_format(dir: &std::path::Path, env: &Env) -> Option<ObjectFormat> {
    let c = command(
        dir,
        env.clone(),
        &["rev-parse".into(), "--show-object-format".into()],
    );
    let out = c
        .run_bounded(None, Bounds::new(GIT_TIMEOUT).max_stdout(64))
        .ok()?;
    match String::from_utf8_lossy(&out.stdout).trim() {
        "sha1" => Some(ObjectFormat::Sha1),
        "sha256" => Some(ObjectFormat::Sha256),
        _ => None,
    }
}
