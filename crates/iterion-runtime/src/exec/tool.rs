//! Tool nodes (10.4): shell and script paths, events, result.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use iterion_spec::model::Node;

use super::node::{NodeEnv, NodeError, NodeRun, NodeSuccess, driver_error, ms, run_collect, tail};
use super::output::tool_output;
use super::render::{Scope, expand_command_env, render_script_data, render_shell, render_shell_script};
use crate::events::{ToolCalled, ToolError, ToolStarted};
use crate::failure::FailureCode;
use iterion_spec::script::ScriptLanguage;

/// Interpreter and file extension of a script language.
fn language(lang: &str) -> Option<(&'static str, &'static str)> {
    Some(match lang {
        "sh" => ("sh", "sh"),
        "bash" => ("bash", "sh"),
        "js" | "node" => ("node", "js"),
        "py" | "python" | "python3" => ("python3", "py"),
        _ => return None,
    })
}

/// Expands `${…}` (withholding deny-class names in containers).
fn expand(env: &NodeEnv<'_>, text: &str) -> String {
    let container = env.in_container();
    let withhold = |n: &str| container && iterion_envdeny::is_denied(n);
    let mut withheld = Vec::new();
    let expanded = expand_command_env(text, env.host_env, &withhold, &mut withheld);
    env.warn_withheld(&withheld);
    expanded
}

/// What a tool node runs: its event name, its argv and, for a `script:`, the file to write first.
struct Prepared {
    tool: String,
    argv: Vec<String>,
    script: Option<Script>,
}

/// A script to write and the environment entries that carry its values.
struct Script {
    home: ScriptHome,
    text: String,
    values: Vec<(String, String)>,
}

fn failed(message: String) -> NodeError {
    NodeError::new(FailureCode::ExecutionFailed, message)
}

/// Renders the node's command or script; nothing has run yet.
fn prepare(env: &NodeEnv<'_>, node: &Node, scope: &Scope<'_>) -> Result<Prepared, NodeError> {
    let id = env.node_id;
    if let Some(script) = &node.script {
        let lang = node.language.as_ref().map_or("sh", |l| l.value.as_str());
        let Some((interp, ext)) = language(lang) else {
            return Err(failed(format!(
                "tool node '{id}': unknown script language '{lang}' (sh, bash, js, node, py, python, python3)"
            )));
        };
        let source = expand(env, &script.value);
        let (text, values) = match ScriptLanguage::of(lang) {
            // a value is data the script parses from its environment, never source text
            Some(l) => {
                let r = render_script_data(&source, l, scope)
                    .map_err(|e| failed(format!("tool node '{id}': {e}; nothing was run")))?;
                (r.text, r.values)
            }
            // the shell reads the script: quote for the shell, never a JSON string literal
            None => {
                let r = render_shell_script(&source, scope)
                    .map_err(|e| failed(format!("tool node '{id}': {e}; nothing was run")))?;
                (r.text, Vec::new())
            }
        };
        let home = ScriptHome::new(env, ext)
            .map_err(|e| failed(format!("tool node '{id}': {e}; nothing was run")))?;
        let mut argv = vec![interp.to_string()];
        if home.is_private() && interp == "python3" {
            // isolated: no PYTHON* variables, no user site, neither the script's directory nor the working
            // directory on the module path
            argv.push("-I".into());
        }
        argv.push(home.path.clone());
        return Ok(Prepared {
            tool: format!("script:{lang}:{id}"),
            argv,
            script: Some(Script { home, text, values }),
        });
    }
    let Some(cmd) = &node.command else {
        return Err(failed(format!("tool node '{id}' has neither command nor script")));
    };
    let text = render_shell(&expand(env, &cmd.value), scope)
        .map_err(|e| failed(format!("tool node '{id}': {e}; nothing was run")))?
        .text;
    Ok(Prepared {
        tool: format!("shell:{id}"),
        argv: vec![env.sandbox.shell.program().to_string(), "-c".into(), text],
        script: None,
    })
}

pub(crate) async fn run_tool(env: &NodeEnv<'_>, node: &Node, scope: &Scope<'_>) -> NodeRun {
    let id = env.node_id;
    let Prepared { tool, argv, script } = match prepare(env, node, scope) {
        Ok(p) => p,
        Err(e) => return NodeRun::Err(e),
    };
    let input_size = script.as_ref().map_or_else(|| argv[2].len(), |s| s.text.len()) as u64;
    env.sink.emit(
        ToolStarted {
            node_id: id.into(),
            tool: tool.clone(),
            input_size,
        }
        .into(),
    );
    let started = Instant::now();
    let result = match &script {
        Some(Script { home, text, values }) => {
            let written = home.write(env, text).await;
            let mut exec_env = env.base_exec_env();
            exec_env.extend(values.iter().cloned());
            if home.is_private() {
                // the operator's node options and module path may name the working directory
                exec_env.push(("NODE_OPTIONS".into(), String::new()));
                exec_env.push(("NODE_PATH".into(), String::new()));
            }
            let r = match written {
                Ok(()) => run_collect(env, env.request(argv, exec_env), None).await,
                Err(e) => Err(e),
            };
            home.remove(env).await;
            r
        }
        None => run_collect(env, env.request(argv, env.base_exec_env()), None).await,
    };
    let duration_ms = ms(started.elapsed());
    let tool_error = |error: String, exit_code: Option<i64>| {
        env.sink.emit(
            ToolError {
                node_id: id.into(),
                tool: tool.clone(),
                error,
                exit_code,
                duration_ms,
            }
            .into(),
        );
    };
    let collected = match result {
        Ok(c) => c,
        Err(e) => {
            let run = driver_error(id, &e);
            match &run {
                NodeRun::Err(err) => tool_error(err.message.clone(), None),
                _ => tool_error(format!("tool node '{id}': cancelled"), None),
            }
            return run;
        }
    };
    let st = collected.status;
    if st.cancelled {
        tool_error(format!("tool node '{id}': cancelled"), Some(i64::from(st.code)));
        return NodeRun::Cancelled;
    }
    if st.success() {
        env.sink.emit(
            ToolCalled {
                node_id: id.into(),
                tool,
                input_size,
                duration_ms,
                exit_code: Some(0),
            }
            .into(),
        );
        return NodeRun::Ok(NodeSuccess {
            output: tool_output(&collected.stdout_text()),
            tokens: None,
            cost_usd: None,
        });
    }
    let what = match (st.signal, script.is_some()) {
        (Some(s), _) => format!("killed by signal {s}"),
        (None, true) => format!("script failed with status {}", st.code),
        (None, false) => format!("command exited with status {}", st.code),
    };
    let mut message = format!("tool node '{id}': {what}");
    for (name, bytes) in [("stdout", &collected.stdout), ("stderr", &collected.stderr)] {
        let t = tail(bytes);
        if !t.is_empty() {
            message.push_str(&format!("\n{name}: {t}"));
        }
    }
    tool_error(message.clone(), Some(i64::from(st.code)));
    NodeRun::Err(NodeError::new(FailureCode::ExecutionFailed, message))
}

/// Where a script file lives while it runs.
enum Place {
    /// A directory of its own on the host (mode 0700, outside the workspace), removed with the file: a host
    /// interpreter finds nothing a sandbox wrote beside its script.
    Private(PathBuf),
    /// The workspace, written from the host (a bind-mounted container workspace); the host path of the file.
    HostWorkDir(PathBuf),
    /// The workspace, written and removed by execs inside the sandbox (kubernetes).
    Sandbox,
}

/// A script file: where it is and the path the interpreter is given.
struct ScriptHome {
    place: Place,
    /// The path the interpreter opens (in the sandbox's or the host's file system).
    path: String,
}

impl ScriptHome {
    /// Picks the place of a new script file with extension `ext`; a host node's is a fresh private directory.
    fn new(env: &NodeEnv<'_>, ext: &str) -> Result<ScriptHome, String> {
        let file = format!(".iterion-script-{:016x}.{ext}", rand::random::<u64>());
        if !env.in_container() {
            let dir = private_dir(env.host_env)?;
            let host_path = dir.join(&file);
            return Ok(ScriptHome {
                path: host_path.to_string_lossy().into_owned(),
                place: Place::Private(dir),
            });
        }
        let path = format!("{}/{file}", env.sandbox.workdir.trim_end_matches('/'));
        let place = match &env.sandbox.host_work_dir {
            Some(dir) => Place::HostWorkDir(dir.join(&file)),
            None => Place::Sandbox,
        };
        Ok(ScriptHome { place, path })
    }

    fn is_private(&self) -> bool {
        matches!(self.place, Place::Private(_))
    }

    /// Writes the script file: directly from the host when its place is on the host, else through an exec
    /// inside the sandbox.
    async fn write(&self, env: &NodeEnv<'_>, text: &str) -> Result<(), iterion_driver::Error> {
        let (host_path, mode) = match &self.place {
            Place::Private(_) => (PathBuf::from(&self.path), 0o600),
            Place::HostWorkDir(p) => (p.clone(), 0o644),
            Place::Sandbox => return write_in_sandbox(env, &self.path, text).await,
        };
        let res = {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&host_path)
                .and_then(|mut f| f.write_all(text.as_bytes()))
        };
        res.map_err(|e| iterion_driver::Error::ExecStart {
            reason: format!("cannot write the script file {}: {e}", host_path.display()),
        })
    }

    /// Removes the script file (and its private directory), also after a failure.
    async fn remove(&self, env: &NodeEnv<'_>) {
        let res = match &self.place {
            Place::Private(dir) => std::fs::remove_dir_all(dir).map_err(|e| (dir.clone(), e)),
            Place::HostWorkDir(p) => std::fs::remove_file(p).map_err(|e| (p.clone(), e)),
            Place::Sandbox => {
                let mut req = env.request(vec!["rm".into(), "-f".into(), self.path.clone()], Vec::new());
                req.cancel = tokio_util::sync::CancellationToken::new();
                if let Err(e) = run_collect(env, req, None).await {
                    env.warn(&format!("cannot remove the script file {}: {e}", self.path));
                }
                return;
            }
        };
        if let Err((p, e)) = res
            && e.kind() != std::io::ErrorKind::NotFound
        {
            env.warn(&format!("cannot remove the script file {}: {e}", p.display()));
        }
    }
}

/// A new directory only this user can enter, under the host's temporary directory (`TMPDIR` when it is an
/// absolute path, else `/tmp`). Creating it fails rather than reuse anything already there.
fn private_dir(host_env: &BTreeMap<String, String>) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let base = host_env
        .get("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let dir = base.join(format!("iterion-script-{:016x}", rand::random::<u64>()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| {
        format!(
            "cannot create a private directory for the script ({}): {e}",
            dir.display()
        )
    })?;
    Ok(dir)
}

/// Writes the script file through an exec inside the sandbox.
async fn write_in_sandbox(env: &NodeEnv<'_>, path: &str, text: &str) -> Result<(), iterion_driver::Error> {
    let req = env.request(
        vec![
            "sh".into(),
            "-c".into(),
            "umask 022 && cat > \"$1\"".into(),
            "sh".into(),
            path.into(),
        ],
        Vec::new(),
    );
    let c = run_collect(env, req, Some(text.as_bytes())).await?;
    if c.status.success() {
        Ok(())
    } else {
        Err(iterion_driver::Error::ExecStart {
            reason: format!("cannot write the script file {path}: {}", tail(&c.stderr)),
        })
    }
}
