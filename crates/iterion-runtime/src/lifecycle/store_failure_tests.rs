//! A failed write to the run store fails the run: the executor stops, the run ends `failed` /
//! `STORE_WRITE_FAILED` naming what was lost, and no seq is skipped or taken twice. The failure is injected
//! through the emitter's event appender (the end-to-end proof on a full tmpfs is in the CLI's escape suite).
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use iterion_driver::NoopDriver;

use super::sink::Append;
use super::{DriverChoice, Launch, launch_with};
use crate::api::Runtime;
use crate::events::{Event, EventRecord};
use crate::failure::FailureCode;
use crate::status::RunStatus;
use crate::store::{Appended, Store};

/// How the injected appender fails the first event of one type.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The write fails (`No space left on device`); nothing is written.
    NoSpace,
    /// The line is written but its fsync fails.
    Fsync,
}

struct FailFirst {
    inner: Arc<dyn Append>,
    event_type: &'static str,
    fault: Fault,
    seen: AtomicUsize,
}

impl Append for FailFirst {
    fn append(&self, event: &Event) -> crate::error::Result<Appended> {
        if event.event_type() == self.event_type && self.seen.fetch_add(1, Ordering::SeqCst) == 0 {
            return match self.fault {
                Fault::NoSpace => Err(crate::error::Error::io(
                    "append to",
                    "events.jsonl",
                    std::io::Error::from_raw_os_error(28),
                )),
                Fault::Fsync => {
                    let mut a = self.inner.append(event)?;
                    a.sync_error = Some(std::io::Error::from_raw_os_error(5).to_string());
                    Ok(a)
                }
            };
        }
        self.inner.append(event)
    }

    fn next_seq(&self) -> u64 {
        self.inner.next_seq()
    }
}

const WORKFLOW: &str = "tool first:\n  command: `echo '{\"n\": 1}'`\n\ntool second:\n  command: `echo '{\"n\": 2}' > second.ran; echo '{\"n\": 2}'`\n\nworkflow w:\n  entry: first\n  first -> second\n  second -> done\n";

struct Ran {
    outcome: super::Outcome,
    events: Vec<EventRecord>,
    doc: crate::store::RunDocument,
    work: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn run(fault: Option<(&'static str, Fault)>) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("repo");
    std::fs::create_dir_all(&work).unwrap();
    let store = dir.path().join("store");
    let file = work.join("wf.bot");
    std::fs::write(&file, WORKFLOW).unwrap();
    let mut env = BTreeMap::new();
    env.insert("PATH".to_owned(), std::env::var("PATH").unwrap_or_default());
    let host = Arc::new(NoopDriver::new(vec![("PATH".into(), env["PATH"].clone())]));
    let rt = Runtime::builder()
        .host_driver(host)
        .driver_choice(DriverChoice::Unavailable {
            reason: "not needed".into(),
        })
        .store_dir(&store)
        .env(env)
        .build()
        .unwrap();
    let checked = iterion_spec::check(WORKFLOW, &file.to_string_lossy());
    assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
    let wf = checked.workflows.into_iter().next().unwrap();
    let launch = Launch::new(wf, &file, WORKFLOW.as_bytes().to_vec(), &store, &work);
    let rtm = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = rtm
        .block_on(launch_with(rt.config(), launch, |own| match fault {
            None => own,
            Some((event_type, fault)) => Arc::new(FailFirst {
                inner: own,
                event_type,
                fault,
                seen: AtomicUsize::new(0),
            }),
        }))
        .unwrap();
    let s = Store::at(&store);
    Ran {
        events: s.read_events(&outcome.run_id).unwrap(),
        doc: s.read_run(&outcome.run_id).unwrap(),
        outcome,
        work,
        _dir: dir,
    }
}

fn types(ev: &[EventRecord]) -> Vec<&str> {
    ev.iter().map(|e| e.event_type.as_str()).collect()
}

fn assert_seq_dense(ev: &[EventRecord]) {
    for (i, e) in ev.iter().enumerate() {
        assert_eq!(e.seq, i as u64, "{:?}", types(ev));
    }
}

#[test]
fn without_a_fault_the_run_finishes() {
    let r = run(None);
    assert_eq!(r.outcome.status, RunStatus::Finished, "{:?}", r.outcome);
    assert!(r.work.join("second.ran").exists());
    assert!(types(&r.events).contains(&"run_finished"));
    assert_seq_dense(&r.events);
}

#[test]
fn a_lost_node_finished_fails_the_run_and_stops_it() {
    let r = run(Some(("node_finished", Fault::NoSpace)));
    assert_eq!(
        (r.outcome.status, r.outcome.failure_code),
        (RunStatus::Failed, Some(FailureCode::StoreWriteFailed)),
        "{:?}",
        r.outcome
    );
    let error = r.outcome.error.clone().unwrap_or_default();
    assert!(error.contains("event node_finished (after seq "), "{error}");
    assert!(error.contains("No space left on device"), "{error}");
    assert_eq!(r.doc.status, RunStatus::Failed);
    assert_eq!(r.doc.failure_code, Some(FailureCode::StoreWriteFailed));
    let t = types(&r.events);
    assert!(!t.contains(&"node_finished"), "{t:?}");
    assert!(!t.contains(&"run_finished"), "{t:?}");
    assert!(
        !r.work.join("second.ran").exists(),
        "the next node did not run: {t:?}"
    );
    assert_seq_dense(&r.events);
    // The lost event took no seq; the terminal event names where the hole is.
    let failed = r
        .events
        .iter()
        .find(|e| e.event_type == "run_failed")
        .expect("run_failed");
    assert_eq!(failed.data["code"], "STORE_WRITE_FAILED");
    let before = r
        .events
        .iter()
        .find(|e| e.event_type == "tool_called")
        .unwrap()
        .seq;
    assert!(
        failed.data["error"]
            .as_str()
            .unwrap()
            .contains(&format!("node_finished (after seq {before})")),
        "{:?}",
        failed.data
    );
}

#[test]
fn a_failed_fsync_fails_the_run_too() {
    let r = run(Some(("node_finished", Fault::Fsync)));
    assert_eq!(
        r.outcome.failure_code,
        Some(FailureCode::StoreWriteFailed),
        "{:?}",
        r.outcome
    );
    assert!(
        r.outcome
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("may not be on disk"),
        "{:?}",
        r.outcome
    );
    assert!(!types(&r.events).contains(&"run_finished"));
    assert_seq_dense(&r.events);
}

#[test]
fn a_lost_event_during_setup_stops_the_run_before_any_node() {
    let r = run(Some(("sandbox_resolved", Fault::NoSpace)));
    assert_eq!(
        r.outcome.failure_code,
        Some(FailureCode::StoreWriteFailed),
        "{:?}",
        r.outcome
    );
    let t = types(&r.events);
    assert!(!t.contains(&"node_started"), "{t:?}");
    assert_seq_dense(&r.events);
}
