//! Snapshots of what the `iterion` binary prints, so a restructure that changes a word of the CLI's output
//! shows up in review: the `--help` of every command and subcommand (found by walking the `Commands:`
//! lists), and the human and `--json` output with the exit code of `iterion validate` on a good and a bad
//! fixture and of `iterion run --sandbox none` on a one-tool workflow. Temporary paths, run ids, run
//! names, timestamps and durations are redacted. Review changes with `cargo insta review`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Commands clap hides from the `Commands:` lists but that still print their help.
const HIDDEN: &[&str] = &["__sandbox-probe"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The command `iterion ARGS` in `dir` with `HOME` at `home` and no inherited `ITERION_*` variable or
/// terminal width.
fn command(args: &[&str], dir: &Path, home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_iterion"));
    c.args(args).current_dir(dir).env("HOME", home);
    for (k, _) in std::env::vars() {
        if k.starts_with("ITERION_") || k == "COLUMNS" || k == "LINES" {
            c.env_remove(k);
        }
    }
    c
}

/// Runs [`command`].
fn iterion(args: &[&str], dir: &Path, home: &Path) -> Output {
    command(args, dir, home).output().expect("run iterion")
}

/// Exit code, stdout and stderr in one text.
fn transcript(o: &Output) -> String {
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        o.status.code().expect("an exit code"),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The subcommand names of a help text's `Commands:` list, without `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn help_of_every_command() {
    let home = tempfile::tempdir().expect("tempdir");
    // a stack: the root first, then each command's subcommands in their listed order, hidden ones last
    let mut pending: Vec<Vec<String>> = HIDDEN.iter().map(|h| vec![h.to_string()]).collect();
    pending.push(Vec::new());
    let mut walked = Vec::new();
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let o = iterion(&args, &workspace(), home.path());
        let shown = format!("iterion {}", args.join(" "));
        assert_eq!(o.status.code(), Some(0), "{shown}\n{}", transcript(&o));
        assert!(o.stderr.is_empty(), "{shown}\n{}", transcript(&o));
        let help = String::from_utf8(o.stdout).expect("utf-8 help");
        for sub in subcommands(&help).into_iter().rev() {
            let mut child = path.clone();
            child.push(sub);
            pending.push(child);
        }
        let name = std::iter::once("iterion")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("_");
        insta::assert_snapshot!(format!("help_{name}"), help, &shown);
        walked.push(shown);
    }
    // the tree itself, so a new or vanished command is a reviewed change too
    insta::assert_snapshot!("help_tree", walked.join("\n"));
}

#[test]
fn validate_a_good_and_a_bad_fixture() {
    let home = tempfile::tempdir().expect("tempdir");
    for (case, file) in [
        ("ok", "fixtures/spec/ok-example-3-ci-check.bot"),
        ("err", "fixtures/spec/err-graph.bot"),
    ] {
        for (mode, extra) in [("human", None), ("json", Some("--json"))] {
            let mut args = vec!["validate"];
            args.extend(extra);
            args.push(file);
            let o = iterion(&args, &workspace(), home.path());
            let shown = format!("iterion {}", args.join(" "));
            insta::assert_snapshot!(format!("validate_{case}_{mode}"), transcript(&o), &shown);
        }
    }
}

#[test]
fn run_a_one_tool_workflow_without_sandbox() {
    for (mode, extra) in [("human", None), ("json", Some("--json"))] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ws = tmp.path().join("ws");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&ws).expect("mkdir ws");
        std::fs::create_dir_all(&home).expect("mkdir home");
        std::fs::write(
            ws.join("w.bot"),
            "tool t:\n  command: \"echo hello\"\n\nworkflow w:\n  entry: t\n  t -> done\n",
        )
        .expect("write the workflow");
        let mut args = vec!["run", "--sandbox", "none"];
        args.extend(extra);
        args.push("w.bot");
        let o = iterion(&args, &ws, &home);
        let shown = format!("iterion {}", args.join(" "));
        let text = redact(&transcript(&o), tmp.path());
        insta::assert_snapshot!(format!("run_sandbox_none_{mode}"), text, &shown);
    }
}

/// A workspace `ws` (holding `w.bot` = `workflow`) and a home beside it, in a temporary directory.
fn scratch(workflow: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = tmp.path().join("ws");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&ws).expect("mkdir ws");
    std::fs::create_dir_all(&home).expect("mkdir home");
    std::fs::write(ws.join("w.bot"), workflow).expect("write the workflow");
    (tmp, ws, home)
}

/// `HH:MM:SS ` at the start of a log line.
fn redact_clock(text: &str) -> String {
    text.lines()
        .map(|l| {
            let b = l.as_bytes();
            let clock = b.len() > 9
                && [0, 1, 3, 4, 6, 7].iter().all(|i| b[*i].is_ascii_digit())
                && b[2] == b':'
                && b[5] == b':'
                && b[8] == b' ';
            if clock {
                format!("[CLOCK]{}\n", &l[8..])
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

#[test]
fn run_outcomes_human() {
    // a node failing, retried once, then failing the run
    let (tmp, ws, home) =
        scratch("tool t:\n  command: `echo oops >&2; exit 3`\n\nworkflow w:\n  entry: t\n  t -> done\n");
    let o = iterion(&["run", "--sandbox", "none", "w.bot"], &ws, &home);
    insta::assert_snapshot!(
        "run_failure_with_retry_human",
        redact_clock(&redact(&transcript(&o), tmp.path())),
        "iterion run --sandbox none w.bot (a tool that exits 3)"
    );
    // a human node: paused, with the resume line
    let (tmp, ws, home) = scratch(
        "compute c:\n  expr:\n    n: \"1 + 1\"\n\nhuman h:\n  interaction: human\n\nworkflow w:\n  entry: c\n  c -> h with { n: \"{{outputs.c.n}}\" }\n  h -> done\n",
    );
    let o = iterion(
        &["run", "--sandbox", "none", "--no-interactive", "w.bot"],
        &ws,
        &home,
    );
    insta::assert_snapshot!(
        "run_paused_human",
        redact_clock(&redact(&transcript(&o), tmp.path())),
        "iterion run --sandbox none --no-interactive w.bot (a human node)"
    );
    // setup failure: an inline sandbox and no engine answering
    let (tmp, ws, home) = scratch(
        "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  sandbox:\n    image: \"alpine:3\"\n  t -> done\n",
    );
    let nowhere = format!("unix://{}", tmp.path().join("absent.sock").display());
    let o = command(&["run", "w.bot"], &ws, &home)
        .env("DOCKER_HOST", &nowhere)
        .env("CONTAINER_HOST", &nowhere)
        .output()
        .expect("run iterion");
    insta::assert_snapshot!(
        "run_setup_failure_human",
        redact_clock(&redact(&transcript(&o), tmp.path())),
        "iterion run w.bot (sandbox inline, no engine)"
    );
}

#[test]
fn run_cancelled_human() {
    let (tmp, ws, home) = scratch("tool t:\n  command: `sleep 30`\n\nworkflow w:\n  entry: t\n  t -> done\n");
    let store = tmp.path().join("store");
    let store_s = store.to_string_lossy().into_owned();
    let mut c = command(
        &["run", "--sandbox", "none", "--store-dir", &store_s, "w.bot"],
        &ws,
        &home,
    );
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = c.spawn().expect("spawn");
    // cancel once the node runs
    let started = std::time::Instant::now();
    loop {
        let events = std::fs::read_dir(store.join("runs"))
            .ok()
            .and_then(|mut rd| rd.next())
            .and_then(|e| std::fs::read_to_string(e.ok()?.path().join("events.jsonl")).ok())
            .unwrap_or_default();
        if events.contains("\"tool_started\"") {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the node never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(130));
    insta::assert_snapshot!(
        "run_cancelled_human",
        redact_clock(&redact(&transcript(&o), tmp.path())),
        "iterion run --sandbox none w.bot, then SIGINT"
    );
}

/// Replaces what differs between two runs: the temporary directory (also as a store project key), run
/// ids, the run name, timestamps and durations.
fn redact(text: &str, tmp: &Path) -> String {
    let tmp = tmp.to_string_lossy();
    let key = tmp.replace(['/', '\\', ':'], "-");
    // The start-of-run reaper reports leftovers of other processes on the shared engine (other tests): not
    // this command's output.
    let text: String = text
        .lines()
        .filter(|l| !l.contains("sandbox: reaped leftover"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut out = text.replace(&key, "-[TMP]").replace(&*tmp, "[TMP]");
    if let Some(name) = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Run name:"))
        .map(|n| n.trim().to_string())
    {
        out = out.replace(&name, "[RUN_NAME]");
    }
    out = redact_uuids(&out);
    out = redact_after(&out, "\"timestamp\":\"", |c| c != '"', "[TIMESTAMP]");
    out = redact_after(&out, "\"duration_ms\":", |c| c.is_ascii_digit(), "[MS]");
    redact_after(&out, "finished (", |c| c.is_ascii_digit() || c == '.', "[SECS]")
}

/// Replaces the run of characters matching `keep` after every `prefix` with `with`.
fn redact_after(text: &str, prefix: &str, keep: impl Fn(char) -> bool, with: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let (head, tail) = rest.split_at(at + prefix.len());
        out.push_str(head);
        let end = tail.find(|c: char| !keep(c)).unwrap_or(tail.len());
        if end > 0 {
            out.push_str(with);
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Replaces every `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` hex UUID with `[RUN_ID]`.
fn redact_uuids(text: &str) -> String {
    const SHAPE: [usize; 5] = [8, 4, 4, 4, 12];
    let is_uuid = |s: &str| {
        s.len() == 36
            && s.split('-').map(str::len).eq(SHAPE)
            && s.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
    };
    let mut out = String::new();
    let mut i = 0;
    while i < text.len() {
        if let Some(candidate) = text.get(i..i + 36)
            && is_uuid(candidate)
        {
            out.push_str("[RUN_ID]");
            i += 36;
            continue;
        }
        let c = text[i..].chars().next().expect("in bounds");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

#[test]
fn the_redactions_replace_only_what_varies() {
    let tmp = Path::new("/tmp/.tmpAbC");
    let text = "Run name:   brisk-otter-d894\nrun brisk-otter-d894 at /tmp/.tmpAbC/ws, store \
                /h/projects/-tmp-.tmpAbC-ws\n{\"timestamp\":\"2026-01-01T00:00:00Z\",\"run_id\":\
                \"01a23311-39d7-798e-a997-98c989738e14\",\"duration_ms\":188,\"seq\":3}\n  node t: finished (0.0s)\n";
    assert_eq!(
        redact(text, tmp),
        "Run name:   [RUN_NAME]\nrun [RUN_NAME] at [TMP]/ws, store /h/projects/-[TMP]-ws\n\
         {\"timestamp\":\"[TIMESTAMP]\",\"run_id\":\"[RUN_ID]\",\"duration_ms\":[MS],\"seq\":3}\n  \
         node t: finished ([SECS]s)\n"
    );
}

#[test]
fn completions_cover_every_command() {
    let home = tempfile::tempdir().expect("tempdir");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = iterion(&["completions", shell], home.path(), home.path());
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", transcript(&o));
        let script = String::from_utf8_lossy(&o.stdout);
        for word in ["validate", "resume", "runs", "sandbox", "doctor", "--dry-run"] {
            assert!(script.contains(word), "{shell}: no '{word}' in the script");
        }
    }
    let o = iterion(&["completions", "tcsh"], home.path(), home.path());
    assert_eq!(o.status.code(), Some(2), "{}", transcript(&o));
}
