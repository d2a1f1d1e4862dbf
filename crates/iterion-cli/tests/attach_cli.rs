//! `iterion run --attach NAME=PATH`: usage errors before any run directory (AT4), a host run that stores
//! and renders the attachment (AT1, AT5), `--dry-run`, and on the real engine the read-only mount (AT2).
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use iterion_test_support::docker_http::request;
use iterion_test_support::{containers_of, engine_required, engine_socket};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

const PDF: &[u8] = b"%PDF-1.7\nthe attached document\n";

/// A workspace with a workflow, an attachment file outside it, its own store and home.
struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new(workflow: &str) -> Ws {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::write(dir.path().join("ws/w.bot"), workflow).unwrap();
        std::fs::write(dir.path().join("a.pdf"), PDF).unwrap();
        Ws { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn pdf(&self) -> PathBuf {
        self.dir.path().join("a.pdf")
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .arg("--store-dir")
            .arg(self.store())
            .current_dir(self.path())
            .env("HOME", self.dir.path().join("home"))
            .env("ITERION_SANDBOX_PULL_POLICY", "never")
            .env_remove("ITERION_SANDBOX_DEFAULT")
            .env_remove("ITERION_SANDBOX_FLOOR")
            .env_remove("ITERION_HOME")
            .output()
            .unwrap()
    }

    fn run_ids(&self) -> Vec<String> {
        std::fs::read_dir(self.store().join("runs"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn run_dir(&self, id: &str) -> PathBuf {
        self.store().join("runs").join(id)
    }

    fn events(&self, id: &str) -> Vec<Value> {
        std::fs::read_to_string(self.run_dir(id).join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Ws {
    fn drop(&mut self) {
        let Some(sock) = engine_socket() else { return };
        for id in self.run_ids() {
            for c in containers_of(&id) {
                let _ = request(
                    &sock,
                    "DELETE",
                    &format!("/containers/{c}?force=1&v=1"),
                    None,
                    b"",
                    Duration::from_secs(10),
                );
            }
        }
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn node_result(events: &[Value], node: &str) -> Value {
    events
        .iter()
        .find(|e| e["type"] == "node_finished" && e["node_id"] == node)
        .unwrap_or_else(|| panic!("no node_finished for {node}: {events:#?}"))["data"]["output"]["result"]
        .clone()
}

fn workflow(command: &str, sandbox: &str) -> String {
    format!(
        "attachments:\n  spec: file\n    accept_mime: [\"application/pdf\"]\n    required: true\n  logo: image\n\ntool t:\n  command: `{command}`\n\nworkflow w:\n  entry: t\n{sandbox}  t -> done\n"
    )
}

#[test]
fn at4_attach_usage_errors_exit_2_without_a_run_directory() {
    let ws = Ws::new(&workflow("echo hi", ""));
    let txt = ws.dir.path().join("notes.txt");
    std::fs::write(&txt, "plain").unwrap();
    let pdf = format!("spec={}", ws.pdf().display());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![],
            "attachment 'spec': required and not supplied (--attach spec=PATH)",
        ),
        (
            vec![
                "--attach".into(),
                pdf.clone(),
                "--attach".into(),
                "nope=a.pdf".into(),
            ],
            "attachment 'nope': not declared (workflow 'w' declares: spec, logo)",
        ),
        (vec!["--attach".into(), "spec".into()], "expected NAME=PATH"),
        (
            vec!["--attach".into(), format!("spec={}", txt.display())],
            "notes.txt is text/plain, which is not accepted (accept_mime: application/pdf)",
        ),
        (
            vec!["--attach".into(), format!("spec={}", ws.dir.path().display())],
            "is a directory",
        ),
        (vec!["--attach".into(), "spec=missing.pdf".into()], "cannot read"),
        (
            vec!["--attach".into(), pdf.clone(), "--attach".into(), pdf.clone()],
            "supplied more than once",
        ),
    ];
    for (extra, want) in cases {
        for dry in [false, true] {
            let mut args: Vec<&str> = vec!["run", "w.bot", "--sandbox", "none"];
            if dry {
                args.push("--dry-run");
            }
            args.extend(extra.iter().map(String::as_str));
            let out = ws.run(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
            assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
            assert!(ws.run_ids().is_empty(), "{args:?} created a run");
        }
    }
}

/// A repository's links are never followed, whatever they lead to; `/proc`, `/sys`, `/dev` and the
/// operator's credential locations are refused whatever the spelling; each is a usage error naming the
/// attachment (exit 2, no run directory), in a run and a dry run. An operator link outside the repository
/// still works.
#[test]
fn attachments_never_follow_repository_links_nor_reach_protected_places() {
    let ws = Ws::new(&workflow("cat {{attachments.spec}}", ""));
    let home = ws.dir.path().join("home");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        "[default]\naws_secret_access_key = s3cr3t\n",
    )
    .unwrap();
    let link = |target: &str, at: &str| std::os::unix::fs::symlink(target, ws.path().join(at)).unwrap();
    link("/proc/self/environ", "spec.pdf");
    link("../home/.aws/credentials", "creds");
    link("spec.pdf", "chain.pdf");
    link("..", "up");
    link("../a.pdf", "fine.pdf");
    // the operator's own link, outside the repository, to an ordinary file
    std::os::unix::fs::symlink(ws.pdf(), home.join("report.pdf")).unwrap();
    let refused = [
        (
            "spec.pdf".to_string(),
            "spec.pdf is a symbolic link inside the repository",
        ),
        ("creds".into(), "creds is a symbolic link inside the repository"),
        (
            "chain.pdf".into(),
            "chain.pdf is a symbolic link inside the repository",
        ),
        ("up/a.pdf".into(), "up is a symbolic link inside the repository"),
        (
            "fine.pdf".into(),
            "fine.pdf is a symbolic link inside the repository",
        ),
        (
            "/proc/self/../self/environ".into(),
            "leads into /proc, which attachments may not come from",
        ),
        ("//proc/self/environ".into(), "leads into /proc"),
        ("/dev/fd/0".into(), "leads into /dev"),
        ("/sys/kernel/hostname".into(), "leads into /sys"),
        (
            home.join(".aws/credentials").display().to_string(),
            "is a credential location (.aws), which attachments may not come from",
        ),
    ];
    for (path, want) in &refused {
        for dry in [false, true] {
            let arg = format!("spec={path}");
            let mut args = vec!["run", "w.bot", "--sandbox", "none", "--attach", &arg];
            if dry {
                args.push("--dry-run");
            }
            let out = ws.run(&args);
            assert_eq!(out.status.code(), Some(2), "{path}: {}", stderr(&out));
            let err = stderr(&out);
            assert!(err.contains("attachment 'spec': "), "{path}: {err}");
            assert!(err.contains(want), "{path}: {err}");
            assert!(!err.contains("s3cr3t"), "{path}: {err}");
            assert!(ws.run_ids().is_empty(), "{path} created a run");
        }
    }
    let arg = format!("spec={}", home.join("report.pdf").display());
    let out = ws.run(&["run", "w.bot", "--sandbox", "none", "--attach", &arg]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = ws.run_ids().pop().unwrap();
    assert_eq!(
        node_result(&ws.events(&id), "t"),
        json!(String::from_utf8_lossy(PDF).trim_end())
    );
}

#[test]
fn at1_at5_attach_on_the_host_stores_and_renders_the_file() {
    let ws = Ws::new(&workflow(
        "printf '%s|%s|%s|' {{attachments.spec}} {{attachments.spec.size}} {{attachments.spec.sha256}}; cat {{attachments.spec}}",
        "",
    ));
    // a relative PATH is taken from the current directory
    let out = ws.run(&["run", "w.bot", "--sandbox", "none", "--attach", "spec=../a.pdf"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = ws.run_ids().pop().unwrap();
    let stored = ws.run_dir(&id).join("attachments/spec/a.pdf");
    assert_eq!(std::fs::read(&stored).unwrap(), PDF);
    let meta: Value =
        serde_json::from_slice(&std::fs::read(ws.run_dir(&id).join("attachments/spec/meta.json")).unwrap())
            .unwrap();
    let sha = meta["sha256"].as_str().unwrap().to_owned();
    assert_eq!(sha.len(), 64);
    assert_eq!(meta["size"], json!(PDF.len()));
    assert_eq!(meta["mime"], json!("application/pdf"));
    assert_eq!(
        meta["storage_ref"],
        json!(format!("runs/{id}/attachments/spec/a.pdf"))
    );
    let doc: Value =
        serde_json::from_slice(&std::fs::read(ws.run_dir(&id).join("run.json")).unwrap()).unwrap();
    assert_eq!(doc["attachments"], json!([meta]));
    assert_eq!(
        node_result(&ws.events(&id), "t"),
        json!(format!(
            "{}|{}|{sha}|{}",
            stored.display(),
            PDF.len(),
            String::from_utf8_lossy(PDF).trim_end()
        ))
    );
}

#[test]
fn dry_run_accepts_attachments_and_creates_nothing() {
    let ws = Ws::new(&workflow("wc -c {{attachments.spec}}", ""));
    let pdf = format!("spec={}", ws.pdf().display());
    let out = ws.run(&["run", "w.bot", "--sandbox", "none", "--dry-run", "--attach", &pdf]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let source = std::fs::canonicalize(ws.pdf()).unwrap();
    assert!(
        stdout.contains(&format!(
            "  Attachments:   spec ← {} (application/pdf, {} bytes)\n",
            source.display(),
            PDF.len()
        )),
        "{stdout}"
    );
    let out = ws.run(&[
        "run",
        "w.bot",
        "--sandbox",
        "none",
        "--dry-run",
        "--json",
        "--attach",
        &pdf,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["attachments"],
        json!([{"name": "spec", "source": source.to_string_lossy(), "mime": "application/pdf",
                "size": PDF.len()}])
    );
    assert_eq!(doc["could_start"], json!(true));
    assert!(!ws.store().join("runs").exists() || ws.run_ids().is_empty());
}

fn image_ready() -> bool {
    if let Err(e) = iterion_test_support::docker_image::ensure_test_image() {
        panic!("cannot prepare the local test image: {e}");
    }
    true
}

/// AT2: in the run container the path is the mounted one, the file is readable, and neither the file nor its
/// directory can be written (the mount is read-only); the stored copy is unchanged.
#[test]
fn at2_docker_run_container_sees_a_read_only_mount() {
    if !engine_required("at2_attachments_read_only_mount") || !image_ready() {
        return;
    }
    let ws = Ws::new(&workflow(
        "p={{attachments.spec}}; w=0; if echo x >> \"$p\" 2>/dev/null; then w=1; fi; d=0; if touch /run/iterion/attachments/spec/new 2>/dev/null; then d=1; fi; printf '%s|%s|%s|' \"$p\" $w $d; cat \"$p\"",
        "  sandbox:\n    image: \"iterion-test/busybox:latest\"\n",
    ));
    let pdf = format!("spec={}", ws.pdf().display());
    let out = ws.run(&["run", "w.bot", "--attach", &pdf]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = ws.run_ids().pop().unwrap();
    let events = ws.events(&id);
    let placement = events
        .iter()
        .find(|e| e["type"] == "node_started" && e["node_id"] == "t")
        .unwrap()["data"]["placement"]
        .clone();
    assert_eq!(placement, json!("run"));
    assert_eq!(
        node_result(&events, "t"),
        json!(format!(
            "/run/iterion/attachments/spec/a.pdf|0|0|{}",
            String::from_utf8_lossy(PDF).trim_end()
        ))
    );
    let stored = ws.run_dir(&id).join("attachments/spec");
    assert_eq!(std::fs::read(stored.join("a.pdf")).unwrap(), PDF);
    assert!(!stored.join("new").exists());
    assert!(containers_of(&id).is_empty());
}
