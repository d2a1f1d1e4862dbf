//! Human input for paused runs: answers from flags or a file, the terminal prompt, and how a pause is shown.
use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use iterion_runtime::api::Runtime;
use iterion_runtime::lifecycle::{Outcome, Paused, Resume};
use iterion_runtime::status::RunStatus;
use serde_json::{Map, Value};

use crate::early::{Early, fail1, runtime_early, usage};

/// Answers are asked on the terminal only when stdin is one, `--no-interactive` is not given and stdout
/// does not carry JSON.
pub fn interactive(json: bool, no_interactive: bool) -> bool {
    !json && !no_interactive && std::io::stdin().is_terminal()
}

/// The answers of `--answers-file` (a JSON object, typed values kept) and `--answer KEY=VALUE` (strings,
/// applied after the file; the resume reads them by the human node's output schema); `None` when neither is given.
pub fn answers_of(
    file: Option<&Path>,
    pairs: &[String],
    cwd: &Path,
) -> Result<Option<Map<String, Value>>, Early> {
    if file.is_none() && pairs.is_empty() {
        return Ok(None);
    }
    let mut answers = Map::new();
    if let Some(f) = file {
        let path = if f.is_absolute() {
            f.to_path_buf()
        } else {
            cwd.join(f)
        };
        let text = read_bounded(&path).map_err(|e| usage(format!("--answers-file {}: {e}", f.display())))?;
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => answers.extend(m),
            Ok(_) => {
                return Err(usage(format!(
                    "--answers-file {}: want a JSON object of key → answer",
                    f.display()
                )));
            }
            Err(e) => return Err(usage(format!("--answers-file {}: not JSON: {e}", f.display()))),
        }
    }
    for p in pairs {
        match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                answers.insert(k.to_string(), Value::from(v));
            }
            _ => return Err(usage(format!("invalid --answer '{p}' (want KEY=VALUE)"))),
        }
    }
    Ok(Some(answers))
}

/// A regular file of at most 1 MiB, never through a FIFO or device.
fn read_bounded(path: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    if !f.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err("not a regular file".into());
    }
    let mut buf = String::new();
    f.take(1 << 20)
        .read_to_string(&mut buf)
        .map_err(|e| e.to_string())?;
    Ok(buf)
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `key: value` lines of the questions, sorted by key.
pub fn question_lines(p: &Paused) -> Vec<String> {
    let mut lines = vec![format!(
        "Node:   {} (interaction {})",
        p.node_id, p.interaction_id
    )];
    if let Value::Object(q) = &p.questions {
        let sorted: BTreeMap<&String, &Value> = q.iter().collect();
        for (k, v) in sorted {
            lines.push(format!("  {k}: {}", crate::terminal::clean(&show(v))));
        }
    }
    if !p.expects.is_empty() {
        let keys: Vec<String> = p.expects.iter().map(|f| f.describe()).collect();
        lines.push(format!("Answers: {}", crate::terminal::clean(&keys.join(", "))));
    }
    lines
}

/// The `--json` line of a paused run.
pub fn paused_json(o: &Outcome, p: &Paused) -> String {
    let doc = iterion_runtime::store::Store::at(&o.store_dir)
        .read_run(&o.run_id)
        .ok();
    serde_json::json!({
        "run_id": o.run_id,
        "workflow": doc.as_ref().map(|d| d.workflow_name.clone()),
        "store": o.store_dir,
        "file": doc.as_ref().map(|d| d.file_path.clone()),
        "status": RunStatus::PausedWaitingHuman.as_str(),
        "interaction_id": p.interaction_id,
        "node_id": p.node_id,
        "questions": p.questions,
        "expects": p.expects,
    })
    .to_string()
}

/// One answer per field of the node's output schema, read by its type and asked again while it does not
/// parse; without a schema one text answer per question key (a single `answer` without keys). Read from stdin
/// with prompts on stderr.
fn prompt(p: &Paused) -> Result<Map<String, Value>, Early> {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\nHuman input required");
    for l in question_lines(p) {
        let _ = writeln!(err, "  {l}");
    }
    let stdin = std::io::stdin();
    let read = |err: &mut std::io::StderrLock<'_>, label: &str| -> Result<String, Early> {
        let _ = write!(err, "{label}> ");
        let _ = err.flush();
        let mut line = String::new();
        match stdin.lock().read_line(&mut line) {
            Ok(0) => Err(fail1("no answer: standard input ended; the run stays paused")),
            Ok(_) => Ok(line.trim_end_matches(['\n', '\r']).to_string()),
            Err(e) => Err(fail1(format!("cannot read an answer: {e}"))),
        }
    };
    let mut answers = Map::new();
    if !p.expects.is_empty() {
        for f in &p.expects {
            let label = format!("{} [{}]", f.name, f.expected());
            loop {
                let text = read(&mut err, &crate::terminal::clean(&label))?;
                match f.parse(&text) {
                    Ok(v) => {
                        answers.insert(f.name.clone(), v);
                        break;
                    }
                    Err(e) => {
                        let _ = writeln!(err, "  {}; try again", crate::terminal::clean(&e));
                    }
                }
            }
        }
        return Ok(answers);
    }
    let mut keys: Vec<String> = match &p.questions {
        Value::Object(q) => q.keys().cloned().collect(),
        _ => Vec::new(),
    };
    keys.sort();
    if keys.is_empty() {
        keys.push("answer".into());
    }
    for k in keys {
        let v = read(&mut err, &crate::terminal::clean(&k))?;
        answers.insert(k, Value::from(v));
    }
    Ok(answers)
}

/// While the run is paused and answers can be asked on the terminal, asks and resumes in-process.
pub async fn answer_on_terminal(
    runtime: &Runtime,
    mut outcome: Outcome,
    store_dir: &Path,
    interactive: bool,
) -> Result<Outcome, Early> {
    while interactive && outcome.status == RunStatus::PausedWaitingHuman {
        let Some(paused) = outcome.paused.clone() else {
            break;
        };
        let answers = tokio::task::block_in_place(|| prompt(&paused))?;
        let mut r = Resume::new(&outcome.run_id, store_dir);
        r.answers = Some(answers);
        outcome = runtime.resume(r).await.map_err(runtime_early)?;
    }
    Ok(outcome)
}
