//! A full disk must not produce a clean record: with the store on a tiny tmpfs, the event a node's (large)
//! output cannot be written into fails the run with `STORE_WRITE_FAILED` and a non-zero exit, the lost write is
//! named on stderr, and the record never says `finished`.
//!
//! The test mounts a tmpfs over the projects of the default data dir (`HOME/.iterion/projects`, where the run
//! store lives; the data dir's `bin/` stays on the real disk), which needs root (CI runs as root). When the mount
//! is refused the test fails with the reason, it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::harness::{Hostile, show, types};

/// A tmpfs mounted at a path, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(at)
            .output()
            .expect("the mount program runs");
        assert!(
            out.status.success(),
            "this test mounts a {size} tmpfs at {} and needs root: {}",
            at.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}

/// A host tool node printing `bytes` of output (under the 256 KiB an event keeps of one value): its
/// `node_finished` event, which carries the output, does not fit a store smaller than that.
fn big_output_workflow(bytes: usize) -> String {
    format!(
        "tool big:\n  command: `printf '{{\"blob\": \"'; head -c {bytes} /dev/zero | tr -c a a; printf '\"}}'`\n\nworkflow w:\n  entry: big\n  big -> done\n"
    )
}

fn events_of(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_full_store_fails_the_run_and_says_what_was_lost() {
    let h = Hostile::new();
    let _fs = Tmpfs::mount(&h.data_dir().join("projects"), "128k");
    h.write("wf.bot", &big_output_workflow(200 * 1024));
    let out = h.iterion(&["run", "wf.bot", "--sandbox", "none"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "a run whose record is incomplete exits non-zero\n{}",
        show(&out)
    );
    assert!(stderr.contains("STORE_WRITE_FAILED"), "{}", show(&out));
    assert!(
        stderr.contains("node_finished"),
        "stderr names the event that could not be written\n{}",
        show(&out)
    );
    let dirs = h.run_dirs();
    assert_eq!(dirs.len(), 1, "{}", show(&out));
    let ev = events_of(&dirs[0]);
    let t = types(&ev);
    assert!(!t.contains(&"run_finished".to_owned()), "{t:?}");
    // No gap and no phantom: every stored event has the next seq.
    for (i, e) in ev.iter().enumerate() {
        assert_eq!(e["seq"], i as u64, "{t:?}");
    }
    if let Ok(doc) = std::fs::read(dirs[0].join("run.json")) {
        let doc: Value = serde_json::from_slice(&doc).unwrap();
        assert_ne!(doc["status"], "finished", "{doc}");
    }
}

/// The same workflow with room to spare still finishes: the failure above is the disk, not the output.
#[test]
fn with_room_the_same_run_finishes() {
    let h = Hostile::new();
    let _fs = Tmpfs::mount(&h.data_dir().join("projects"), "16m");
    h.write("wf.bot", &big_output_workflow(200 * 1024));
    let out = h.iterion(&["run", "wf.bot", "--sandbox", "none"]);
    assert!(out.status.success(), "{}", show(&out));
    let dirs = h.run_dirs();
    let t = types(&events_of(&dirs[0]));
    assert!(t.contains(&"run_finished".to_owned()), "{t:?}");
}
