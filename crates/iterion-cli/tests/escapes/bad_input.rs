//! Bad input must not take the host down: files that never end or never open, files built to make a parser
//! quadratic or recursive, and text built to drive the operator's terminal.
//!
//! Every child runs under a watchdog: a child still running after a generous bound is killed and the test
//! fails as a hang (a hang detector, not a timing assertion).

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Hostile, engine_ready, show};

/// Far above what any of these commands needs; only a hang reaches it.
const HANG: Duration = Duration::from_secs(300);

/// Spawns `cmd` with piped output and waits for it under the watchdog.
fn watched(mut cmd: Command) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iterion");
    wait_watched(child, |_| {})
}

/// Waits for `child` under the watchdog, calling `tick` with the elapsed time while it runs; stdout and
/// stderr are drained on threads so a chatty child cannot block on a full pipe.
fn wait_watched(mut child: Child, mut tick: impl FnMut(Duration)) -> Output {
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            panic!("iterion hung: still running after {HANG:?}, killed");
        }
        tick(start.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Peak resident set of the process (`VmHWM` from /proc), in KiB, sampled while it runs.
fn sample_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `mkfifo PATH`.
fn mkfifo(path: &std::path::Path) {
    let st = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(st.success(), "mkfifo {}", path.display());
}

fn assert_no_escape(out: &Output) {
    for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        assert!(
            !bytes.contains(&0x1b) && !bytes.contains(&0x07),
            "a raw ESC or BEL reached the terminal on {name}:\n{}",
            show(out)
        );
    }
}

#[test]
fn validate_of_dev_zero_is_refused_before_reading() {
    let h = Hostile::new();
    let child = h
        .cmd(&["validate", "/dev/zero"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut peak = 0;
    let out = wait_watched(child, |_| peak = peak.max(sample_hwm(pid).unwrap_or(0)));
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        stderr(&out).contains("cannot read /dev/zero: not a regular file (a character device)"),
        "{}",
        show(&out)
    );
    // Bounded memory: reported in the failure message only (the exit above already proves nothing was
    // read); a reader that read first would have grown without limit.
    assert!(peak < 1 << 20, "peak RSS {peak} KiB");
}

#[test]
fn validate_and_run_of_a_fifo_are_refused_not_waited_on() {
    let h = Hostile::new();
    let fifo = h.repo().join("wf.bot");
    mkfifo(&fifo);
    for args in [
        &["validate", "wf.bot"][..],
        &["run", "wf.bot", "--sandbox", "none"][..],
    ] {
        let out = watched(h.cmd(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", show(&out));
        assert!(
            stderr(&out).contains("not a regular file (a FIFO)"),
            "{args:?}: {}",
            show(&out)
        );
    }
    // Through a symlink too.
    std::os::unix::fs::symlink(&fifo, h.repo().join("link.bot")).unwrap();
    let out = watched(h.cmd(&["validate", "link.bot"]));
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

#[test]
fn a_fifo_devcontainer_is_refused_not_waited_on() {
    if !engine_ready("escapes::bad_input::a_fifo_devcontainer_is_refused_not_waited_on") {
        return;
    }
    let h = Hostile::new();
    let dc = h.repo().join(".devcontainer/devcontainer.json");
    std::fs::remove_file(&dc).unwrap();
    mkfifo(&dc);
    h.write(
        "wf.bot",
        "tool t:\n  command: `echo '{}'`\n\nworkflow w:\n  entry: t\n  sandbox: auto\n  t -> done\n",
    );
    let out = watched(h.cmd(&["run", "wf.bot"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        stderr(&out).contains("cannot read devcontainer.json: not a regular file (a FIFO)"),
        "{}",
        show(&out)
    );
}

/// `{"image": …, "containerEnv": {"K0": "v", …}}` with `n` keys, every tenth one repeated.
fn huge_devcontainer(n: usize) -> String {
    let mut s = format!("{{\"image\": \"{}\", \"containerEnv\": {{", crate::harness::IMAGE);
    for i in 0..n {
        s.push_str(&format!("\"K{i}\":\"v\",\n"));
    }
    for i in (0..n).step_by(10) {
        s.push_str(&format!("\"K{i}\":\"w\",\n"));
    }
    s.push_str("\"END\":\"v\"}}\n");
    s
}

#[test]
fn a_devcontainer_with_700k_keys_is_read_in_linear_time() {
    if !engine_ready("escapes::bad_input::a_devcontainer_with_700k_keys_is_read_in_linear_time") {
        return;
    }
    let h = Hostile::new();
    let text = huge_devcontainer(630_000);
    assert!(text.len() < 10 << 20, "{} bytes", text.len());
    h.write(".devcontainer/devcontainer.json", &text);
    h.write(
        "wf.bot",
        "tool t:\n  command: `echo '{}'`\n\nworkflow w:\n  entry: t\n  sandbox: auto\n  t -> done\n",
    );
    // The run refuses the environment (far over the entry limit) after reading the whole file; the point is
    // that it gets there.
    let out = watched(h.cmd(&["run", "wf.bot"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        stderr(&out).contains("sandbox environment is too large"),
        "{}",
        show(&out)
    );
}

#[test]
fn sigterm_during_a_long_parse_ends_the_process() {
    let h = Hostile::new();
    // Close to the size limit and slow to check: many nodes with templates and conditions.
    let mut wf = String::new();
    let mut i = 0;
    while wf.len() < 9 << 20 {
        wf.push_str(&format!(
            "tool t{i}:\n  command: `echo {{{{input.x}}}} {i}`\n  sandbox: none\n\n"
        ));
        i += 1;
    }
    wf.push_str("workflow w:\n  entry: t0\n  sandbox: none\n  t0 -> done\n");
    h.write("wf.bot", &wf);
    for args in [
        &["validate", "wf.bot"][..],
        &["run", "wf.bot", "--sandbox", "none"][..],
    ] {
        let child = h
            .cmd(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut sent = false;
        let out = wait_watched(child, |elapsed| {
            if !sent && elapsed > Duration::from_millis(300) {
                sent = true;
                let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
            }
        });
        assert!(
            sent,
            "{args:?} finished before the signal; make the file slower to check"
        );
        let by_term = out.status.signal() == Some(15);
        assert!(
            by_term || out.status.code() == Some(1),
            "{args:?}: {}",
            show(&out)
        );
    }
}

#[test]
fn sigterm_while_a_run_reads_a_huge_devcontainer_ends_the_run() {
    if !engine_ready("escapes::bad_input::sigterm_while_a_run_reads_a_huge_devcontainer_ends_the_run") {
        return;
    }
    let h = Hostile::new();
    h.write(".devcontainer/devcontainer.json", &huge_devcontainer(630_000));
    h.write(
        "wf.bot",
        "tool t:\n  command: `echo '{}'`\n\nworkflow w:\n  entry: t\n  sandbox: auto\n  t -> done\n",
    );
    let child = h
        .cmd(&["run", "wf.bot"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut sent = false;
    // The signal lands while the file is read and mapped (the run's signal handling is installed by then): the
    // run must end as cancelled (or refuse the file), not carry on for minutes.
    let out = wait_watched(child, |elapsed| {
        if !sent && elapsed > Duration::from_secs(2) {
            sent = true;
            let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        }
    });
    assert!(sent, "{}", show(&out));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    // cancelled (128 + SIGTERM), or the file refused (1)
    let code = out.status.code();
    assert!(
        (code == Some(143) && all.contains("signal SIGTERM"))
            || (code == Some(1) && all.contains("sandbox environment is too large")),
        "{}",
        show(&out)
    );
}

/// A condition of 200 000 operands.
fn long_condition() -> String {
    format!(
        "tool a:\n  command: `echo '{{\"x\": true}}'`\n  sandbox: none\n\nworkflow w:\n  entry: a\n  sandbox: none\n  a -> done when \"{}\"\n  a -> done\n",
        vec!["x"; 200_000].join(" && ")
    )
}

#[test]
fn a_200k_operand_condition_is_a_positioned_diagnostic_not_an_abort() {
    let h = Hostile::new();
    h.write("wf.bot", &long_condition());
    let out = watched(h.cmd(&["validate", "--json", "wf.bot"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON report");
    let c040: Vec<_> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == "C040")
        .collect();
    assert_eq!(c040.len(), 1, "{report}");
    assert_eq!(c040[0]["line"], 8);
    assert!(c040[0]["col"].as_u64().unwrap() > 20, "{report}");
    assert!(
        c040[0]["message"]
            .as_str()
            .unwrap()
            .contains("too many operands (max 512)"),
        "{report}"
    );

    let out = watched(h.cmd(&["run", "wf.bot", "--sandbox", "none"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(stderr(&out).contains("C040"), "{}", show(&out));
}

#[test]
fn escape_sequences_in_workflow_text_are_escaped_in_diagnostics() {
    let h = Hostile::new();
    h.write(
        "wf.bot",
        "tool a:\n  command: `echo '{}'`\n  sandbox: none\n\nworkflow w:\n  entry: a\n  sandbox: none\n  a -> \"\x1b]0;pwned\x07\x1b[2J\"\n",
    );
    for args in [
        &["validate", "wf.bot"][..],
        &["run", "wf.bot", "--sandbox", "none"][..],
    ] {
        let out = watched(h.cmd(args));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", show(&out));
        assert_no_escape(&out);
        assert!(
            String::from_utf8_lossy(&[out.stdout.clone(), out.stderr.clone()].concat())
                .contains("\\x1b]0;pwned\\x07"),
            "{args:?}: the text is shown, escaped: {}",
            show(&out)
        );
    }
}

#[test]
fn escape_sequences_from_a_sandboxed_node_never_reach_the_terminal() {
    if !engine_ready("escapes::bad_input::escape_sequences_from_a_sandboxed_node_never_reach_the_terminal") {
        return;
    }
    let h = Hostile::new();
    h.write(
        "wf.bot",
        "tool evil:\n  command: `printf '\\033]0;pwned\\007\\033[2J' >&2; printf '\\033[31mred\\r' ; exit 3`\n\nworkflow w:\n  entry: evil\n  sandbox: auto\n  evil -> done\n",
    );
    let out = watched(h.cmd(&["run", "wf.bot", "--log-level", "debug"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_no_escape(&out);
    assert!(
        stderr(&out).contains("\\x1b]0;pwned")
            || String::from_utf8_lossy(&out.stdout).contains("\\x1b]0;pwned"),
        "the node's stderr is shown, escaped: {}",
        show(&out)
    );
    // The stored run keeps the bytes; `runs show` prints them escaped.
    let ids = h.run_ids();
    assert_eq!(ids.len(), 1);
    let shown = watched(h.cmd(&["runs", "show", &ids[0], "--events"]));
    assert!(shown.status.success(), "{}", show(&shown));
    assert_no_escape(&shown);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("\\x1b]0;pwned"),
        "{}",
        show(&shown)
    );
}

/// What a store reader may use at most; the attacks below push an unbounded reader past 1 GiB.
const STORE_READER_KIB: u64 = 256 * 1024;

/// Runs `iterion ARGS` under `/usr/bin/time`, under the watchdog, and returns its output and peak resident
/// set in KiB. A child that grows past [`STORE_READER_KIB`] while it runs is killed at once (so an unbounded
/// reader fails the test instead of taking the machine), and its peak is reported as such.
fn measured(h: &Hostile, args: &[&str]) -> (Output, u64) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let report_path = report.path().to_string_lossy().into_owned();
    let child = h
        .cmd_under(&["/usr/bin/time", "-f", "%M", "-o", &report_path], args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn /usr/bin/time iterion");
    let time_pid = child.id();
    let mut peak = 0;
    let out = wait_watched(child, |_| {
        let children =
            std::fs::read_to_string(format!("/proc/{time_pid}/task/{time_pid}/children")).unwrap_or_default();
        for pid in children.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            let hwm = sample_hwm(pid as u32).unwrap_or(0);
            peak = peak.max(hwm);
            if hwm > STORE_READER_KIB {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    });
    let reported = std::fs::read_to_string(report.path())
        .unwrap_or_default()
        .lines()
        .rev()
        .find_map(|l| l.trim().parse::<u64>().ok())
        .unwrap_or(0);
    (out, peak.max(reported))
}

/// A store with one good run and two runs whose files a sandbox or repository replaced: `run.json` a link to
/// `/dev/zero` (run `zero`), and an `events.jsonl` whose second line is 3 GiB long (run `huge`, a sparse
/// file, recorded as still running so `logs -f` keeps following it). Returns the store's runs dir.
fn poisoned_store(h: &Hostile) -> std::path::PathBuf {
    h.write(
        "good.bot",
        "tool step:\n  command: `echo '{\"ok\": true}'`\n\nworkflow good:\n  entry: step\n  step -> done\n",
    );
    let out = h.iterion(&["run", "good.bot", "--sandbox", "none", "--json"]);
    assert!(out.status.success(), "{}", show(&out));
    let good = h.run_dirs().pop().expect("the good run");
    let runs = good.parent().unwrap().to_path_buf();
    let copy = |id: &str| {
        let dir = runs.join(id);
        std::fs::create_dir(&dir).unwrap();
        for f in ["run.json", "events.jsonl"] {
            std::fs::copy(good.join(f), dir.join(f)).unwrap();
        }
        dir
    };
    let zero = copy("zero");
    std::fs::remove_file(zero.join("run.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", zero.join("run.json")).unwrap();
    let huge = copy("huge");
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(huge.join("run.json")).unwrap()).unwrap();
    doc["status"] = "running".into();
    doc["finished_at"] = serde_json::Value::Null;
    std::fs::write(huge.join("run.json"), serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let first = std::fs::read_to_string(huge.join("events.jsonl")).unwrap();
    let first = first.lines().next().unwrap().to_owned();
    std::fs::write(huge.join("events.jsonl"), format!("{first}\n")).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(huge.join("events.jsonl"))
        .unwrap();
    f.set_len(3 << 30).unwrap();
    runs
}

/// `runs list` over the poisoned store stays small, names the `run.json` it refused, and still lists the
/// other runs (human and `--json`).
#[test]
fn runs_list_is_bounded_and_lists_the_other_runs() {
    let h = Hostile::new();
    let runs = poisoned_store(&h);
    let good = h
        .run_ids()
        .into_iter()
        .find(|id| id != "zero" && id != "huge")
        .unwrap();
    let (out, kib) = measured(&h, &["runs", "list"]);
    assert!(kib < STORE_READER_KIB, "peak RSS {kib} KiB: {}", show(&out));
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&good) && text.contains("huge"), "{}", show(&out));
    assert!(
        text.lines()
            .any(|l| l.starts_with("zero") && l.contains("unreadable")),
        "{}",
        show(&out)
    );
    let zero_json = runs.join("zero/run.json");
    assert!(
        stderr(&out).contains(&format!(
            "cannot read {}: it is a symbolic link",
            zero_json.display()
        )),
        "{}",
        show(&out)
    );
    let (out, kib) = measured(&h, &["runs", "list", "--json"]);
    assert!(kib < STORE_READER_KIB, "peak RSS {kib} KiB: {}", show(&out));
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    let zero = lines.iter().find(|l| l["id"] == "zero").unwrap();
    assert!(
        zero["error"]
            .as_str()
            .unwrap_or_default()
            .contains(&*zero_json.to_string_lossy()),
        "{zero}"
    );
}

/// `runs show --events` of the 3 GiB line and `runs show` of the `/dev/zero` record fail with an error
/// naming the file, and stay small.
#[test]
fn runs_show_is_bounded_and_names_the_file() {
    let h = Hostile::new();
    let runs = poisoned_store(&h);
    let cases: [(&[&str], String); 4] = [
        (&["runs", "show", "huge", "--events"], line_too_long(&runs)),
        (
            &["runs", "show", "huge", "--events", "--json"],
            line_too_long(&runs),
        ),
        (&["runs", "show", "zero"], linked(&runs)),
        (&["runs", "show", "zero", "--json"], linked(&runs)),
    ];
    for (args, expect) in cases {
        let (out, kib) = measured(&h, args);
        assert!(
            kib < STORE_READER_KIB,
            "{args:?}: peak RSS {kib} KiB: {}",
            show(&out)
        );
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", show(&out));
        assert!(stderr(&out).contains(&expect), "{args:?}: {}", show(&out));
    }
}

fn line_too_long(runs: &std::path::Path) -> String {
    format!(
        "cannot read {}: it has a line longer than the limit",
        runs.join("huge/events.jsonl").display()
    )
}

fn linked(runs: &std::path::Path) -> String {
    format!(
        "cannot read {}: it is a symbolic link",
        runs.join("zero/run.json").display()
    )
}

/// `runs logs -f` of a "running" run whose log holds a 3 GiB line prints the lines before it, then fails
/// naming the file, instead of buffering the line for ever.
#[test]
fn runs_logs_follow_is_bounded_and_names_the_file() {
    let h = Hostile::new();
    let runs = poisoned_store(&h);
    let (out, kib) = measured(&h, &["runs", "logs", "huge", "-f", "--json"]);
    assert!(kib < STORE_READER_KIB, "peak RSS {kib} KiB: {}", show(&out));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        1,
        "{}",
        show(&out)
    );
    let expect = format!(
        "cannot read {}: it has a line longer than the limit",
        runs.join("huge/events.jsonl").display()
    );
    assert!(stderr(&out).contains(&expect), "{}", show(&out));
}
