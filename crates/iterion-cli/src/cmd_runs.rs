//! `iterion runs list`, `show`, `rm` and `prune`: views of a run store, and removing runs from it.
//!
//! Store dir: `--store-dir`, else the store of the current project as for a workflow file located there
//! (`<data dir>/projects/<key>`; nothing in the project directory decides it).
use crate::terminal::clean;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use iterion_runtime::Error as RuntimeError;
use iterion_runtime::events::{EventRecord, parse_timestamp};
use iterion_runtime::lifecycle::housekeeping::{PruneFilter, RunRemoval, prune_candidates, remove_run};
use iterion_runtime::status::RunStatus;
use iterion_runtime::store::{self, RunDocument, Store, StoreDirRequest, names};

/// `iterion runs …`: inspect the runs of a store.
#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    command: RunsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum RunsCommand {
    /// List the runs of a store, newest first (id, name, status, failure code, workflow, started, duration).
    #[command(
        after_help = "EXAMPLES:\n  iterion runs list\n  iterion runs list --status failed_resumable --limit 5\n  \
iterion runs list --json | jq -r .id\n\nEXIT CODES:\n  0 listed (also an empty store); 1 the store cannot be read; 2 a usage error"
    )]
    List {
        /// Run store directory (default: the store of the current project).
        #[arg(long, value_name = "DIR")]
        store_dir: Option<PathBuf>,
        /// Show at most N runs (the newest).
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Only runs with this status (running, finished, failed, failed_resumable, cancelled).
        #[arg(long, value_name = "STATUS")]
        status: Option<String>,
        /// One JSON object per run, one per line.
        #[arg(long)]
        json: bool,
    },
    /// Remove runs (their directories, and the worktree a worktree run kept); a run in progress is refused.
    #[command(
        after_help = "EXAMPLES:\n  iterion runs rm brisk-otter-d894\n  iterion runs rm 01a2320f 01a2331c\n\n\
EXIT CODES:\n  0 every run was removed; 1 a run was not found, is in progress or could not be removed; 2 a usage error"
    )]
    Rm {
        /// The runs: ids, names or unique id prefixes.
        #[arg(value_name = "RUN", required = true)]
        runs: Vec<String>,
        /// Run store directory (default: the store of the current project).
        #[arg(long, value_name = "DIR")]
        store_dir: Option<PathBuf>,
        /// One JSON object per removed run, one per line.
        #[arg(long)]
        json: bool,
    },
    /// Remove the runs that are not in progress, by age and status: lists them unless --yes is given.
    #[command(
        after_help = "EXAMPLES:\n  iterion runs prune --older-than 7d            # list what would go\n  \
iterion runs prune --older-than 7d --yes      # remove it\n  iterion runs prune --status failed --status cancelled --yes\n\n\
EXIT CODES:\n  0 listed, or every selected run removed; 1 a run could not be removed; 2 a usage error"
    )]
    Prune {
        /// Only runs started longer ago than this (`90m`, `12h`, `7d`).
        #[arg(long, value_name = "DURATION")]
        older_than: Option<String>,
        /// Only runs with this status (repeatable; default: every status but running).
        #[arg(long, value_name = "STATUS")]
        status: Vec<String>,
        /// Remove the selected runs (without it, they are only listed).
        #[arg(long)]
        yes: bool,
        /// Run store directory (default: the store of the current project).
        #[arg(long, value_name = "DIR")]
        store_dir: Option<PathBuf>,
        /// One JSON document: the selected runs, whether they were removed, the errors.
        #[arg(long)]
        json: bool,
    },
    /// Print the events of a run as they are recorded; with --follow, keep printing until the run stops.
    #[command(
        after_help = "EXAMPLES:\n  iterion runs logs brisk-otter-d894\n  iterion runs logs -f 01a2320f            # a run in progress, until it ends\n  \
iterion runs logs --json RUN | jq .type    # the stored event lines\n\n\
EXIT CODES:\n  0 printed (with --follow: the run is no longer running); 1 the run was not found or its record cannot be read; 2 a usage error"
    )]
    Logs {
        /// The run: its id, its name, or a unique prefix of its id.
        #[arg(value_name = "RUN")]
        run_id: String,
        /// Keep printing new events until the run is no longer running.
        #[arg(short, long)]
        follow: bool,
        /// Run store directory (default: the store of the current project).
        #[arg(long, value_name = "DIR")]
        store_dir: Option<PathBuf>,
        /// Print the stored event lines (JSON), byte for byte.
        #[arg(long)]
        json: bool,
    },
    /// Show the run document of one run (and its events).
    #[command(
        after_help = "EXAMPLES:\n  iterion runs show brisk-otter-d894\n  iterion runs show 01a2320f --events\n  \
iterion runs show RUN --json | jq .status\n\nEXIT CODES:\n  0 shown; 1 the run was not found or cannot be read; 2 a usage error"
    )]
    Show {
        /// The run: its id, its name, or a unique prefix of its id.
        #[arg(value_name = "RUN")]
        run_id: String,
        /// Also print the run's events.
        #[arg(long)]
        events: bool,
        /// Print only the full output of node NAME, as text (each time it finished; with --json one JSON line
        /// each).
        #[arg(long, value_name = "NAME", conflicts_with = "events")]
        node: Option<String>,
        /// Run store directory (default: the store of the current project).
        #[arg(long, value_name = "DIR")]
        store_dir: Option<PathBuf>,
        /// Print `run.json` as one JSON line (then, with `--events`, the stored event lines).
        #[arg(long)]
        json: bool,
    },
}

/// Runs the command against the environment `env` (read once by `main`). Exit 0 on success, 1 for an
/// unknown or unreadable run, 2 for usage errors.
pub fn run(args: RunsArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let cwd = match std::env::current_dir() {
        Ok(c) => c,
        Err(e) => return fail(1, &format!("cannot read the current directory: {e}")),
    };
    let json = match &args.command {
        RunsCommand::List { json, .. }
        | RunsCommand::Rm { json, .. }
        | RunsCommand::Prune { json, .. }
        | RunsCommand::Logs { json, .. }
        | RunsCommand::Show { json, .. } => *json,
    };
    JSON_ERRORS.store(json, std::sync::atomic::Ordering::Relaxed);
    let out = std::io::stdout();
    let mut out = out.lock();
    let code = match args.command {
        RunsCommand::List {
            store_dir,
            limit,
            status,
            json,
        } => {
            let store = Store::at(resolve_store(store_dir.as_deref(), env, &cwd));
            let filter = Filter { limit, status };
            list(&store, &filter, json, &mut out)
        }
        RunsCommand::Rm {
            runs,
            store_dir,
            json,
        } => {
            let store = Store::at(resolve_store(store_dir.as_deref(), env, &cwd));
            remove(&store, &runs, json, env, &mut out)
        }
        RunsCommand::Prune {
            older_than,
            status,
            yes,
            store_dir,
            json,
        } => {
            let store = Store::at(resolve_store(store_dir.as_deref(), env, &cwd));
            match prune_filter(older_than.as_deref(), &status) {
                Ok(f) => prune(&store, &f, yes, json, &mut out),
                Err(m) => fail(2, &m),
            }
        }
        RunsCommand::Logs {
            run_id,
            follow,
            store_dir,
            json,
        } => {
            let store = Store::at(resolve_store(store_dir.as_deref(), env, &cwd));
            logs(&store, &run_id, follow, json, &mut out)
        }
        RunsCommand::Show {
            run_id,
            events,
            node: Some(node),
            store_dir,
            json,
        } if !events => {
            let store = Store::at(resolve_store(store_dir.as_deref(), env, &cwd));
            node_output(&store, &run_id, &node, json, &mut out)
        }
        RunsCommand::Show {
            run_id,
            events,
            store_dir,
            json,
            ..
        } => {
            let store = Store::at(resolve_store(store_dir.as_deref(), env, &cwd));
            show(&store, &run_id, events, json, &mut out)
        }
    };
    let _ = out.flush();
    code
}

/// The store of the project the current directory belongs to (its repository root), as `iterion run` uses it.
pub(crate) fn resolve_store(flag: Option<&Path>, env: &BTreeMap<String, String>, cwd: &Path) -> PathBuf {
    let data = iterion_host::data_dir(env, cwd);
    store::store_dir(StoreDirRequest {
        store_dir: flag,
        project_dir: &iterion_host::repo_root(cwd),
        cwd,
        data_dir: &data,
    })
}

/// The id of the run `query` names in `store` (id, name or unique id prefix), or the error to print with its
/// exit code: 1 with a hint for an unknown or ambiguous run, 2 for a malformed one.
pub(crate) fn find_run(store: &Store, query: &str) -> Result<String, (u8, String)> {
    match store.find_run(query) {
        Ok(id) => Ok(id),
        Err(e @ (RuntimeError::RunNotFound { .. } | RuntimeError::AmbiguousRun { .. })) => Err((
            1,
            format!("{e}\n  hint: `iterion runs list` shows the runs of this project (or pass --store-dir)"),
        )),
        Err(e) => Err((1, error_chain(&e))),
    }
}

fn parse_status(s: &str) -> Result<iterion_runtime::status::RunStatus, String> {
    iterion_runtime::status::RunStatus::parse(s).ok_or_else(|| {
        format!("invalid status '{s}' (want running, finished, failed, failed_resumable or cancelled)")
    })
}

fn prune_filter(older_than: Option<&str>, statuses: &[String]) -> Result<PruneFilter, String> {
    let mut f = PruneFilter::new();
    if let Some(d) = older_than {
        // the durations of the language, plus whole days (`7d`)
        let days = d
            .trim()
            .strip_suffix('d')
            .and_then(|n| n.parse::<u64>().ok())
            .map(|n| Duration::from_secs(n.saturating_mul(86_400)));
        f.older_than = Some(
            days.or_else(|| iterion_spec::duration::parse(d.trim()))
                .ok_or_else(|| {
                    format!("invalid --older-than '{d}' (want a duration such as 90m, 12h or 7d)")
                })?,
        );
    }
    for s in statuses {
        f.statuses.push(parse_status(s)?);
    }
    Ok(f)
}

fn removal_line(r: &RunRemoval) -> String {
    let mut line = format!(
        "{}  {}  {}  {}",
        r.id,
        r.name,
        r.status.map_or("unreadable", |s| s.as_str()),
        r.started.as_deref().unwrap_or("-")
    );
    if let Some(w) = &r.worktree {
        line.push_str(&format!("  (worktree {})", w.display()));
    }
    clean(&line).into_owned()
}

fn remove(
    store: &Store,
    queries: &[String],
    json: bool,
    env: &BTreeMap<String, String>,
    out: &mut impl Write,
) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    let mut orphaned = Vec::new();
    for q in queries {
        if let Err(e) = store::validate_component("run id", q) {
            return fail(2, &e.to_string());
        }
        let removed =
            find_run(store, q).and_then(|id| remove_run(store, &id).map_err(|e| (1, error_chain(&e))));
        match removed {
            Ok(r) if json => {
                let _ = writeln!(out, "{}", serde_json::to_value(&r).unwrap_or_default());
            }
            Ok(r) => {
                let _ = writeln!(out, "removed {}", removal_line(&r));
                // removed while its record said running: its process died without cleaning up (the removal
                // held the run's lock, so no process owns it)
                if r.status == Some(RunStatus::Running) {
                    orphaned.push(r.id.clone());
                }
            }
            Err((c, message)) => {
                code = fail(c, &message);
            }
        }
    }
    if !orphaned.is_empty() {
        remove_leftovers(&orphaned, env);
    }
    code
}

/// What the dead processes of removed runs left on the container engine (their sandbox containers and
/// networks), removed by the reaper's predicate; said on stderr. With no engine, says how to do it later.
fn remove_leftovers(runs: &[String], env: &BTreeMap<String, String>) {
    use iterion_runtime::lifecycle::reaper::{PruneAction, PruneScope};
    let later = |why: &str| {
        eprintln!(
            "note: {} was still recorded as running; what its process left on the engine was not removed ({}): \
             the next run's reaper or `iterion sandbox prune --yes` removes it",
            clean(&runs.join(", ")),
            clean(why)
        );
    };
    let result = crate::cmd_prune::prune_engine(env, None, true, PruneScope::Mine, Some(runs));
    match result {
        Ok(list) => {
            for p in &list {
                let what = match p.action {
                    PruneAction::Removed => "removed",
                    PruneAction::Failed => "could not remove",
                    _ => "kept",
                };
                eprintln!(
                    "{what} {} {} of a removed run: {}",
                    format!("{:?}", p.resource.kind).to_lowercase(),
                    clean(&p.resource.name),
                    clean(&p.reason)
                );
            }
        }
        Err(e) => later(&e),
    }
}

fn prune(store: &Store, filter: &PruneFilter, yes: bool, json: bool, out: &mut impl Write) -> ExitCode {
    let selected = match prune_candidates(store, filter, std::time::SystemTime::now()) {
        Ok(s) => s,
        Err(e) => return fail(1, &error_chain(&e)),
    };
    let mut errors = Vec::new();
    let mut removed = Vec::new();
    if yes {
        for r in &selected {
            match remove_run(store, &r.id) {
                Ok(done) => removed.push(done),
                Err(e) => errors.push(format!("{}: {}", r.id, error_chain(&e))),
            }
        }
    }
    if json {
        let doc = serde_json::json!({
            "store": store.root(),
            "dry_run": !yes,
            "selected": selected,
            "removed": removed.len(),
            "errors": errors,
        });
        let _ = writeln!(out, "{doc}");
    } else if selected.is_empty() {
        let _ = writeln!(out, "no run to prune in {}", store.root().display());
    } else if yes {
        for r in &removed {
            let _ = writeln!(out, "removed {}", removal_line(r));
        }
    } else {
        let _ = writeln!(
            out,
            "would remove {} run(s) from {} (add --yes to remove them):",
            selected.len(),
            store.root().display()
        );
        for r in &selected {
            let _ = writeln!(out, "  {}", removal_line(r));
        }
    }
    for e in &errors {
        eprintln!("error: {}", clean(e));
    }
    if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `runs list` filters.
struct Filter {
    limit: Option<usize>,
    status: Option<String>,
}

/// Set when the command prints JSON: a failure then also prints `{"error", "exit"}` on stdout, so a program
/// reading stdout always gets a JSON document.
static JSON_ERRORS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("error: {}", clean(message));
    if JSON_ERRORS.load(std::sync::atomic::Ordering::Relaxed) {
        println!("{}", serde_json::json!({"error": message, "exit": code}));
    }
    ExitCode::from(code)
}

/// Duration between two RFC 3339 times, when both parse and are ordered.
fn duration(doc: &RunDocument) -> Option<Duration> {
    let start = parse_timestamp(&doc.created_at)?;
    let end = parse_timestamp(doc.finished_at.as_deref()?)?;
    end.duration_since(start).ok()
}

/// `0.4s`, `12.3s`, `3m07s`, `1h02m`.
fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    }
}

/// A `running` run whose process is gone (`kill -9`, a crash): nobody holds its lock. Its record still says
/// `running` until the next `iterion run` of the store recovers it or it is resumed.
fn owner_gone(store: &Store, id: &str, doc: &RunDocument) -> bool {
    doc.status == RunStatus::Running
        && store
            .run_dir(id)
            .is_ok_and(|d| store::RunLock::is_held(&d.join(names::LOCK)).is_ok_and(|held| !held))
}

/// What to do about a run whose process is gone.
fn owner_gone_hint(id: &str) -> String {
    format!(
        "run {id} says running but its process is gone: `iterion resume {id}` continues it (its leftover \
         sandbox is reaped first), `iterion sandbox prune --yes` removes what it left"
    )
}

fn list(store: &Store, filter: &Filter, json: bool, out: &mut impl Write) -> ExitCode {
    let mut entries = match store.list_runs() {
        Ok(e) => e,
        Err(e) => return fail(1, &e.to_string()),
    };
    if let Some(want) = &filter.status {
        let want = match parse_status(want) {
            Ok(w) => w,
            Err(m) => return fail(2, &m),
        };
        entries.retain(|e| e.document.as_ref().is_ok_and(|d| d.status == want));
    }
    entries.reverse();
    if let Some(n) = filter.limit {
        entries.truncate(n);
    }
    if json {
        for e in &entries {
            let v = match &e.document {
                Ok(d) => serde_json::json!({
                    "id": e.id,
                    "name": d.name,
                    "workflow": d.workflow_name,
                    "status": d.status,
                    "owner_gone": owner_gone(store, &e.id, d),
                    "failure_code": d.failure_code,
                    "started": d.created_at,
                    "finished": d.finished_at,
                    "duration_ms": duration(d).map(|x| u64::try_from(x.as_millis()).unwrap_or(u64::MAX)),
                }),
                Err(err) => serde_json::json!({"id": e.id, "error": error_chain(err)}),
            };
            let _ = writeln!(out, "{v}");
        }
        return ExitCode::SUCCESS;
    }
    if entries.is_empty() {
        eprintln!("no runs in {}", store.root().display());
        return ExitCode::SUCCESS;
    }
    // A run whose record cannot be read is listed as unreadable, with the reason (naming the file) here.
    for e in &entries {
        if let Err(err) = &e.document {
            eprintln!("warning: {}", clean(&error_chain(err)));
        }
    }
    let mut rows: Vec<[String; 7]> = vec![[
        "ID".into(),
        "NAME".into(),
        "STATUS".into(),
        "CODE".into(),
        "WORKFLOW".into(),
        "STARTED".into(),
        "DURATION".into(),
    ]];
    let mut gone = Vec::new();
    for e in &entries {
        rows.push(match &e.document {
            Ok(d) => [
                e.id.clone(),
                d.name.clone(),
                if owner_gone(store, &e.id, d) {
                    gone.push(e.id.clone());
                    format!("{} (owner gone)", d.status)
                } else {
                    d.status.to_string()
                },
                d.failure_code.map_or_else(|| "-".to_owned(), |c| c.to_string()),
                d.workflow_name.clone(),
                d.created_at.clone(),
                duration(d).map_or_else(|| "-".to_owned(), human_duration),
            ],
            Err(_) => [
                e.id.clone(),
                "-".into(),
                "unreadable".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
        });
    }
    // Names, workflow names and ids come from stored documents a sandbox may have written.
    for r in &mut rows {
        for c in r.iter_mut() {
            *c = clean(c).into_owned();
        }
    }
    let mut widths = [0usize; 7];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in &rows {
        let mut line = String::new();
        for (i, (c, w)) in r.iter().zip(widths).enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  "));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    for id in &gone {
        eprintln!("note: {}", clean(&owner_gone_hint(id)));
    }
    ExitCode::SUCCESS
}

fn show(store: &Store, query: &str, with_events: bool, json: bool, out: &mut impl Write) -> ExitCode {
    if let Err(e) = store::validate_component("run id", query) {
        return fail(2, &e.to_string());
    }
    let run_id = match find_run(store, query) {
        Ok(id) => id,
        Err((code, message)) => return fail(code, &message),
    };
    let run_id = run_id.as_str();
    let doc = match store.read_run(run_id) {
        Ok(d) => d,
        Err(e @ RuntimeError::RunNotFound { .. }) => return fail(1, &e.to_string()),
        Err(e) => return fail(1, &error_chain(&e)),
    };
    let dir = match store.run_dir(run_id) {
        Ok(d) => d,
        Err(e) => return fail(2, &e.to_string()),
    };
    // Opened before anything is printed, so a log that cannot be opened prints only the error.
    let events = if with_events {
        match store.event_lines(run_id) {
            Ok(lines) => Some(lines),
            Err(e) => return fail(1, &error_chain(&e)),
        }
    } else {
        None
    };
    if json {
        // The document as stored, unknown fields included.
        let raw = match store.read_run_bytes(run_id) {
            Ok(b) => b,
            Err(e) => return fail(1, &error_chain(&e)),
        };
        match serde_json::from_slice::<serde_json::Value>(&raw) {
            Ok(v) => {
                let _ = writeln!(out, "{v}");
            }
            Err(_) => {
                return fail(
                    1,
                    &format!("cannot decode {}", dir.join(names::RUN_JSON).display()),
                );
            }
        }
    } else {
        // The stored run: its error, names and event data may hold any text a node produced.
        let _ = write!(out, "{}", clean(&summary(&doc, store.root(), &dir)));
        if owner_gone(store, run_id, &doc) {
            let _ = write!(out, "{}", clean(&field("Note", &owner_gone_hint(run_id))));
        }
        if events.is_some() {
            let _ = writeln!(out);
        }
    }
    // The stored lines one at a time (with --json byte-identical), blank and undecodable ones skipped.
    for line in events.into_iter().flatten() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                let _ = out.flush();
                return fail(1, &error_chain(&e));
            }
        };
        let shown = match (json, EventRecord::decode(&line)) {
            (true, _) => line,
            (false, Some(rec)) => clean(&event_line(&rec)).into_owned(),
            (false, None) => continue,
        };
        let _ = writeln!(out, "{shown}");
    }
    ExitCode::SUCCESS
}

/// `runs show RUN --node NAME`: every output node `NAME` finished with, read from the run's events, as text (a
/// string as it is, an object one `key: value` per field with multi-line strings as indented blocks), each under
/// a header; with `json` one JSON line per output. No output of that node is an error naming the nodes that have
/// one.
fn node_output(store: &Store, query: &str, node: &str, json: bool, out: &mut impl Write) -> ExitCode {
    if let Err(e) = store::validate_component("run id", query) {
        return fail(2, &e.to_string());
    }
    let run_id = match find_run(store, query) {
        Ok(id) => id,
        Err((code, message)) => return fail(code, &message),
    };
    let lines = match store.event_lines(run_id.as_str()) {
        Ok(l) => l,
        Err(e) => return fail(1, &error_chain(&e)),
    };
    let mut finished: Vec<String> = Vec::new();
    let mut shown = 0usize;
    for line in lines {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                let _ = out.flush();
                return fail(1, &error_chain(&e));
            }
        };
        let Some(rec) = EventRecord::decode(&line) else {
            continue;
        };
        if rec.event_type != "node_finished" {
            continue;
        }
        let Some(id) = rec.node_id.as_deref() else {
            continue;
        };
        let Some(output) = rec.data.get("output") else {
            continue;
        };
        if id != node {
            if !finished.iter().any(|f| f == id) {
                finished.push(id.to_owned());
            }
            continue;
        }
        shown += 1;
        if json {
            let _ = writeln!(out, "{output}");
            continue;
        }
        let ms = rec.data.get("duration_ms").and_then(serde_json::Value::as_u64);
        let when = ms.map_or(String::new(), |ms| format!(", {ms} ms"));
        let branch = rec
            .branch_id
            .as_deref()
            .map_or(String::new(), |b| format!(", branch {b}"));
        let _ = writeln!(out, "── node {} (#{shown}{when}{branch}) ──", clean(node));
        let _ = write!(out, "{}", clean(&output_text(output)));
    }
    if shown == 0 {
        let others = if finished.is_empty() {
            "no node of it finished with an output".to_owned()
        } else {
            format!("nodes with an output: {}", finished.join(", "))
        };
        return fail(
            1,
            &format!("node '{node}' has no output in run {run_id} ({others})"),
        );
    }
    ExitCode::SUCCESS
}

/// A node output as text: a string as it is; an object one `key: value` line per field (a multi-line string
/// as an indented block below its key, other values as JSON); anything else as JSON. Ends with a newline.
fn output_text(v: &serde_json::Value) -> String {
    use serde_json::Value;
    let mut s = match v {
        Value::String(t) => t.clone(),
        Value::Object(m) => {
            let mut t = String::new();
            for (k, v) in m {
                match v {
                    Value::String(x) if x.contains('\n') => {
                        t.push_str(&format!("{k}:\n"));
                        for l in x.lines() {
                            t.push_str(&format!("    {l}\n"));
                        }
                    }
                    Value::String(x) => t.push_str(&format!("{k}: {x}\n")),
                    other => t.push_str(&format!("{k}: {other}\n")),
                }
            }
            t
        }
        other => other.to_string(),
    };
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// How often `runs logs --follow` looks for new events.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

fn logs(store: &Store, query: &str, follow: bool, json: bool, out: &mut impl Write) -> ExitCode {
    if let Err(e) = store::validate_component("run id", query) {
        return fail(2, &e.to_string());
    }
    let run_id = match find_run(store, query) {
        Ok(id) => id,
        Err((code, message)) => return fail(code, &message),
    };
    let path = match store.run_dir(&run_id) {
        Ok(d) => d.join(names::EVENTS),
        Err(e) => return fail(2, &e.to_string()),
    };
    let mut tail = store::EventTail::new(&path);
    loop {
        // Decided before reading: what was written before is printed by this pass. A run is over once it is
        // no longer `running` and its process let go of the run's lock (its last events are written then).
        let running = follow
            && (store
                .read_run(&run_id)
                .is_ok_and(|d| d.status == RunStatus::Running)
                || path
                    .parent()
                    .is_some_and(|d| store::RunLock::is_held(&d.join(names::LOCK)).unwrap_or(false)));
        let lines = match tail.read() {
            Ok(l) => l,
            Err(e) => {
                let _ = out.flush();
                return fail(1, &error_chain(&e));
            }
        };
        for line in lines {
            let Some(rec) = EventRecord::decode(&line) else {
                continue;
            };
            let shown = if json {
                line
            } else {
                clean(&event_line(&rec)).into_owned()
            };
            if writeln!(out, "{shown}").and_then(|()| out.flush()).is_err() {
                // the reader went away (a closed pipe): nothing more to do
                return ExitCode::SUCCESS;
            }
        }
        if !running {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

/// `e` with its sources, `: `-separated (library errors do not repeat their source in their own text).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn field(label: &str, value: &str) -> String {
    format!("  {:<16} {value}\n", format!("{label}:"))
}

fn summary(doc: &RunDocument, store_root: &Path, dir: &Path) -> String {
    let mut s = format!("── Run: {} ──\n", doc.workflow_name);
    s += &field("Run name", &doc.name);
    s += &field("Run ID", &doc.id);
    s += &field("Status", doc.status.as_str());
    if let Some(c) = doc.failure_code {
        s += &field("Code", c.as_str());
    }
    if let Some(p) = doc.failure_phase {
        s += &field("Phase", p.as_str());
    }
    if let Some(e) = &doc.error {
        s += &field("Error", e);
    }
    s += &field("Workflow file", &doc.file_path);
    s += &field("Work dir", &doc.work_dir);
    s += &field("Started", &doc.created_at);
    if let Some(f) = &doc.finished_at {
        s += &field("Finished", f);
    }
    if let Some(d) = duration(doc) {
        s += &field("Duration", &human_duration(d));
    }
    if let Some(cp) = &doc.checkpoint {
        s += &field("Checkpoint", &format!("node {}", cp.node_id));
    }
    // what really happened: a resolved sandbox whose container never started is not "active"
    let state = match (doc.sandbox.containers.is_empty(), doc.status) {
        (true, RunStatus::Running) => "starting",
        (true, _) => "never started",
        (false, RunStatus::Running) => "running",
        (false, _) => "stopped",
    };
    let sandbox = match (&doc.sandbox.skipped, doc.sandbox.active, &doc.sandbox.driver) {
        (Some(sk), _, _) => format!("skipped — {}", sk.reason),
        (None, true, Some(d)) => format!("{d} · {state}"),
        (None, true, None) => state.to_owned(),
        (None, false, _) => "none".to_owned(),
    };
    s += &field("Sandbox", &sandbox);
    s += &field("Store", &store_root.display().to_string());
    s += &field("Events", &dir.join(names::EVENTS).display().to_string());
    s
}

fn event_line(e: &EventRecord) -> String {
    let node = e
        .node_id
        .as_deref()
        .map(|n| format!(" [{n}]"))
        .unwrap_or_default();
    let branch = e
        .branch_id
        .as_deref()
        .map(|b| format!(" ({b})"))
        .unwrap_or_default();
    let data = serde_json::Value::Object(e.data.clone());
    format!(
        "  {:>4}  {}  {}{node}{branch}  {data}",
        e.seq, e.timestamp, e.event_type
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(ms: u64, expect: &str) {
        assert_eq!(human_duration(Duration::from_millis(ms)), expect);
    }

    #[test]
    fn durations() {
        check(400, "0.4s");
        check(12_340, "12.3s");
        check(187_000, "3m07s");
        check(3_720_000, "1h02m");
    }
}
