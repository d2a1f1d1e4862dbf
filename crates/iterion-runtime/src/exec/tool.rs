//! Tool nodes (10.4): shell and script paths, events, result.
use std::time::Instant;

use iterion_spec::model::Node;

use super::node::{NodeEnv, NodeError, NodeRun, NodeSuccess, driver_error, ms, run_collect, tail};
use super::output::tool_output;
use super::render::{Mode, Scope, expand_command_env, render, render_shell, render_shell_script};
use crate::events::{ToolCalled, ToolError, ToolStarted};
use crate::failure::FailureCode;

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

pub(crate) async fn run_tool(env: &NodeEnv<'_>, node: &Node, scope: &Scope<'_>) -> NodeRun {
    let id = env.node_id;
    let (tool, argv, script) = if let Some(script) = &node.script {
        let lang = node.language.as_ref().map_or("sh", |l| l.value.as_str());
        let Some((interp, ext)) = language(lang) else {
            return NodeRun::Err(NodeError::new(
                FailureCode::ExecutionFailed,
                format!(
                    "tool node '{id}': unknown script language '{lang}' (sh, bash, js, node, py, python, python3)"
                ),
            ));
        };
        let source = expand(env, &script.value);
        let text = if matches!(lang, "sh" | "bash") {
            // The shell reads the script: quote for the shell, never a JSON string literal.
            match render_shell_script(&source, scope) {
                Ok(r) => r.text,
                Err(e) => {
                    return NodeRun::Err(NodeError::new(
                        FailureCode::ExecutionFailed,
                        format!("tool node '{id}': {e}; nothing was run"),
                    ));
                }
            }
        } else {
            render(&source, Mode::JsonLiteral, scope).text
        };
        let file = format!(".iterion-script-{:016x}.{ext}", rand::random::<u64>());
        let path = format!("{}/{file}", env.sandbox.workdir.trim_end_matches('/'));
        (
            format!("script:{lang}:{id}"),
            vec![interp.to_string(), path.clone()],
            Some((file, path, text)),
        )
    } else if let Some(cmd) = &node.command {
        let text = match render_shell(&expand(env, &cmd.value), scope) {
            Ok(r) => r.text,
            Err(e) => {
                return NodeRun::Err(NodeError::new(
                    FailureCode::ExecutionFailed,
                    format!("tool node '{id}': {e}; nothing was run"),
                ));
            }
        };
        (
            format!("shell:{id}"),
            vec![env.sandbox.shell.program().to_string(), "-c".into(), text],
            None,
        )
    } else {
        return NodeRun::Err(NodeError::new(
            FailureCode::ExecutionFailed,
            format!("tool node '{id}' has neither command nor script"),
        ));
    };
    let input_size = script.as_ref().map_or_else(|| argv[2].len(), |(_, _, t)| t.len()) as u64;
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
        Some((file, path, text)) => {
            let written = write_script(env, file, path, text).await;
            let r = match written {
                Ok(()) => run_collect(env, env.request(argv, env.base_exec_env()), None).await,
                Err(e) => Err(e),
            };
            remove_script(env, file, path).await;
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

/// Writes the script file: directly into the host work dir when it is the workspace, else through an exec
/// inside the sandbox.
async fn write_script(
    env: &NodeEnv<'_>,
    file: &str,
    path: &str,
    text: &str,
) -> Result<(), iterion_driver::Error> {
    if let Some(dir) = &env.sandbox.host_work_dir {
        let host_path = dir.join(file);
        let res = {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&host_path)
                .and_then(|mut f| f.write_all(text.as_bytes()))
        };
        return res.map_err(|e| iterion_driver::Error::ExecStart {
            reason: format!("cannot write the script file {}: {e}", host_path.display()),
        });
    }
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

async fn remove_script(env: &NodeEnv<'_>, file: &str, path: &str) {
    if let Some(dir) = &env.sandbox.host_work_dir {
        let p = dir.join(file);
        if let Err(e) = std::fs::remove_file(&p)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            env.warn(&format!("cannot remove the script file {}: {e}", p.display()));
        }
        return;
    }
    let mut req = env.request(vec!["rm".into(), "-f".into(), path.into()], Vec::new());
    req.cancel = tokio_util::sync::CancellationToken::new();
    if let Err(e) = run_collect(env, req, None).await {
        env.warn(&format!("cannot remove the script file {path}: {e}"));
    }
}
