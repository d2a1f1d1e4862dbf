//! Attachments through the lifecycle (09 §7, vectors AT1, AT3, AT4, AT5 of §9.5): checked before the run record,
//! stored in the run directory, rendered for host and container nodes, mounted read-only, refused by a driver
//! without host bind mounts, and the same on a resume.
mod life_common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use iterion_driver::AuxMountKind;
use iterion_runtime::api::RunOptions;
use iterion_runtime::failure::FailureCode;
use iterion_runtime::lifecycle::{DriverChoice, Launch, Resume};
use iterion_runtime::status::RunStatus;
use iterion_runtime::store::AttachmentRecord;
use life_common::*;
use serde_json::json;
use sha2::{Digest, Sha256};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn no_driver() -> DriverChoice {
    DriverChoice::Unavailable {
        reason: "none".into(),
    }
}

/// `spec` (PDF only) and an optional `logo`; one tool node printing the values it was given.
fn workflow(command: &str, sandbox: &str) -> String {
    format!(
        "attachments:\n  spec: file\n    accept_mime: [\"application/pdf\"]\n  logo: image\n\ntool t:\n  command: `{command}`\n\nworkflow w:\n  entry: t\n{sandbox}  t -> done\n"
    )
}

const PDF: &[u8] = b"%PDF-1.7\nan attachment\n";

/// A file outside the work dir whose name needs quoting in a shell.
fn source(fx: &Fixture) -> PathBuf {
    let p = fx.dir.path().join("my spec's.pdf");
    std::fs::write(&p, PDF).unwrap();
    p
}

/// Compiles and prepares the fixture's workflow with `opts` (the library path of `iterion run --attach`).
fn prepare(fx: &Fixture, choice: DriverChoice, opts: RunOptions) -> Result<Launch, iterion_runtime::Error> {
    let rtm = fx.runtime(choice, &[], false);
    let compiled = rtm.compile(&fx.file, &fx.work).unwrap();
    rtm.prepare(compiled, opts)
}

fn result_of(fx: &Fixture, o: &iterion_runtime::lifecycle::Outcome) -> String {
    let ev = fx.events(o);
    first(&ev, "node_finished").data["output"]["result"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn at1_at5_stored_with_meta_and_rendered_quoted_on_the_host() {
    let fx = Fixture::new(&workflow(
        "printf '%s|%s|%s|' {{attachments.spec}} {{attachments.spec.size}} {{attachments.spec.mime}}; cat {{attachments.spec.path}}",
        "",
    ));
    let src = source(&fx);
    let launch = prepare(&fx, no_driver(), RunOptions::new(&fx.work).attach("spec", &src)).unwrap();
    let o = rt()
        .block_on(fx.runtime(no_driver(), &[], false).launch(launch))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let dir = o.run_dir.join("attachments");
    let stored = dir.join("spec").join("my spec's.pdf");
    // AT1: the stored copy, its meta.json and the record in run.json
    assert_eq!(std::fs::read(&stored).unwrap(), PDF);
    let expect = AttachmentRecord {
        name: "spec".into(),
        original_filename: "my spec's.pdf".into(),
        mime: "application/pdf".into(),
        size: PDF.len() as u64,
        sha256: hex::encode(Sha256::digest(PDF)),
        created_at: fx.doc(&o).attachments[0].created_at.clone(),
        storage_ref: format!("runs/{}/attachments/spec/my spec's.pdf", o.run_id),
    };
    assert_eq!(fx.doc(&o).attachments, vec![expect.clone()]);
    let meta: AttachmentRecord =
        serde_json::from_slice(&std::fs::read(dir.join("spec/meta.json")).unwrap()).unwrap();
    assert_eq!(meta, expect);
    assert_eq!(fx.store.join(&expect.storage_ref), stored);
    assert_eq!(
        (mode(&dir), mode(&stored), mode(&dir.join("spec/meta.json"))),
        (0o700, 0o600, 0o600)
    );
    // AT1 + AT5: the host path (one quoted word: the name has a space and a quote), the size, the content
    assert_eq!(
        result_of(&fx, &o),
        format!(
            "{}|{}|application/pdf|{}",
            stored.display(),
            PDF.len(),
            String::from_utf8_lossy(PDF).trim_end()
        )
    );
    // the unsupplied `logo` is not referenced: no warning about it
    let log = std::fs::read_to_string(o.run_dir.join("run.log")).unwrap();
    assert!(!log.contains("'logo'"), "{log}");
}

#[test]
fn at4_usage_errors_create_no_run() {
    let fx = Fixture::new(
        &workflow("echo hi", "").replace("  logo: image\n", "  logo: image\n    required: true\n"),
    );
    let src = source(&fx);
    let txt = fx.dir.path().join("notes.pdf");
    std::fs::write(&txt, "plain text").unwrap();
    let cases: Vec<(RunOptions, &str)> = vec![
        (
            RunOptions::new(&fx.work).attach("spec", &src),
            "attachment 'logo': required and not supplied (--attach logo=PATH)",
        ),
        (
            RunOptions::new(&fx.work)
                .attach("logo", &src)
                .attach("nope", &src),
            "attachment 'nope': not declared (workflow 'w' declares: spec, logo)",
        ),
        (
            RunOptions::new(&fx.work)
                .attach("logo", &src)
                .attach("spec", &txt),
            "notes.pdf is text/plain, which is not accepted (accept_mime: application/pdf)",
        ),
        (
            RunOptions::new(&fx.work)
                .attach("logo", &src)
                .attach("spec", fx.dir.path()),
            "is a directory",
        ),
    ];
    for (opts, want) in cases {
        let e = prepare(&fx, no_driver(), opts).unwrap_err();
        assert!(
            matches!(e, iterion_runtime::Error::InvalidAttachment { .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains(want), "{e} / {want}");
    }
    // a launch built by hand without the required attachment is refused the same way
    let e = rt()
        .block_on(fx.runtime(no_driver(), &[], false).launch(fx.launch()))
        .unwrap_err();
    assert!(e.to_string().contains("required and not supplied"), "{e}");
    assert!(
        !fx.store.join("runs").exists() || std::fs::read_dir(fx.store.join("runs")).unwrap().count() == 0
    );
}

#[test]
fn container_nodes_see_the_mounted_path_and_the_mount_is_read_only() {
    let fx = Fixture::new(&workflow(
        "printf '%s|%s' {{attachments.spec}} {{attachments.logo}}",
        "  sandbox:\n    image: \"alpine:3\"\n",
    ));
    let src = source(&fx);
    let fake = FakeDriver::new(Faults::default());
    let launch = prepare(
        &fx,
        container(&fake),
        RunOptions::new(&fx.work).attach("spec", &src),
    )
    .unwrap();
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], false).launch(launch))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    // AT2's rendering: the container path; the unsupplied `logo` renders empty (an empty quoted word)
    assert_eq!(result_of(&fx, &o), "/run/iterion/attachments/spec/my spec's.pdf|");
    let aux = fake.aux_seen.lock().unwrap().clone();
    let mounts: Vec<_> = aux[0]
        .iter()
        .filter(|a| a.kind == AuxMountKind::Attachments)
        .map(|a| (a.host_path.clone(), a.container_path.clone(), a.read_only))
        .collect();
    assert_eq!(
        mounts,
        [(
            o.run_dir.join("attachments"),
            "/run/iterion/attachments".to_string(),
            true
        )]
    );
    let log = std::fs::read_to_string(o.run_dir.join("run.log")).unwrap();
    assert_eq!(
        log.matches("attachment 'logo' was not supplied").count(),
        1,
        "{log}"
    );
}

#[test]
fn a_run_without_attachments_mounts_none() {
    let fx = Fixture::new(&workflow("echo '{}'", "  sandbox:\n    image: \"alpine:3\"\n"));
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], false).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let aux = fake.aux_seen.lock().unwrap().clone();
    assert!(
        aux[0].iter().all(|a| a.kind != AuxMountKind::Attachments),
        "{aux:?}"
    );
    assert!(!o.run_dir.join("attachments").exists());
    assert!(fx.doc(&o).attachments.is_empty());
}

#[test]
fn at3_a_driver_without_host_binds_refuses_before_any_node() {
    let fx = Fixture::new(&workflow(
        "echo {{attachments.spec}}",
        "  sandbox:\n    image: \"alpine:3\"\n",
    ));
    let src = source(&fx);
    let mut fake = FakeDriver::new(Faults::default());
    fake.host_binds = false;
    let launch = prepare(
        &fx,
        container(&fake),
        RunOptions::new(&fx.work).attach("spec", &src),
    )
    .unwrap();
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], false).launch(launch))
        .unwrap();
    assert_eq!(
        (o.status, o.failure_code),
        (RunStatus::Failed, Some(FailureCode::SandboxSpecInvalid)),
        "{o:?}"
    );
    let ev = fx.events(&o);
    let failed = first(&ev, "run_failed");
    assert_eq!(failed.data["detail"], json!("attachments"));
    assert_eq!(
        failed.data["error"],
        json!("attachments need a host bind mount or pod copy, which this driver does not provide")
    );
    assert!(
        !types(&ev)
            .iter()
            .any(|t| t == "node_started" || t == "sandbox_started"),
        "{:?}",
        types(&ev)
    );
    assert!(
        !fake.calls().iter().any(|c| c.starts_with("start")),
        "{:?}",
        fake.calls()
    );
    // a dry run says the same, and lists the attachment
    let launch = prepare(
        &fx,
        container(&fake),
        RunOptions::new(&fx.work).attach("spec", &src),
    )
    .unwrap();
    let d = fx.runtime(container(&fake), &[], false).dry_run(&launch).unwrap();
    assert!(!d.could_start());
    let r = d.refused.clone().unwrap();
    assert_eq!(r.code, FailureCode::SandboxSpecInvalid);
    assert_eq!(d.attachments.len(), 1);
    assert_eq!(d.attachments[0].name, "spec");
    // with host bind mounts it could start
    fake.host_binds = true;
    let d = fx.runtime(container(&fake), &[], false).dry_run(&launch).unwrap();
    assert!(d.could_start(), "{:?}", d.refused);

    // the same driver runs a workflow that has no attachments
    fake.host_binds = false;
    let fx = Fixture::new(
        "tool t:\n  command: `echo '{}'`\n\nworkflow w:\n  entry: t\n  sandbox:\n    image: \"alpine:3\"\n  t -> done\n",
    );
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], false).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
}

#[test]
fn resume_uses_the_stored_copy_never_the_original() {
    // fails until the test creates a marker in the work dir, then prints the attachment
    let fx = Fixture::new(&workflow(
        "if [ ! -f marker ]; then exit 3; fi; printf '%s|' {{attachments.spec}}; cat {{attachments.spec}}",
        "",
    ));
    let src = source(&fx);
    let launch = prepare(&fx, no_driver(), RunOptions::new(&fx.work).attach("spec", &src)).unwrap();
    let o = rt()
        .block_on(fx.runtime(no_driver(), &[], false).launch(launch))
        .unwrap();
    assert_eq!(o.status, RunStatus::FailedResumable, "{o:?}");
    let records = fx.doc(&o).attachments;
    // the original is gone (and another file has its name): the resume reads only the stored copy
    std::fs::remove_file(&src).unwrap();
    std::fs::write(&src, b"%PDF-1.7\nreplaced").unwrap();
    std::fs::write(fx.work.join("marker"), "").unwrap();
    let o2 = rt()
        .block_on(
            fx.runtime(no_driver(), &[], false)
                .resume(Resume::new(&o.run_id, &fx.store)),
        )
        .unwrap();
    assert_eq!(o2.status, RunStatus::Finished, "{o2:?}");
    assert_eq!(fx.doc(&o2).attachments, records);
    let ev = fx.events(&o2);
    let out = ev
        .iter()
        .rfind(|e| e.event_type == "node_finished" && e.node_id.as_deref() == Some("t"))
        .unwrap()
        .data["output"]["result"]
        .clone();
    let stored = o.run_dir.join("attachments/spec/my spec's.pdf");
    assert_eq!(
        out,
        json!(format!(
            "{}|{}",
            stored.display(),
            String::from_utf8_lossy(PDF).trim_end()
        ))
    );
}

#[test]
fn node_containers_get_the_mount_too() {
    let fx = Fixture::new(
        "attachments:\n  spec: file\n\ntool t:\n  command: `printf '%s' {{attachments.spec}}`\n  sandbox:\n    image: \"node:20\"\n\nworkflow w:\n  entry: t\n  sandbox:\n    image: \"alpine:3\"\n  t -> done\n",
    );
    let src = source(&fx);
    let fake = FakeDriver::new(Faults::default());
    let launch = prepare(
        &fx,
        container(&fake),
        RunOptions::new(&fx.work).attach("spec", &src),
    )
    .unwrap();
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], false).launch(launch))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    assert_eq!(first(&ev, "node_started").data["placement"], json!("own"));
    assert_eq!(result_of(&fx, &o), "/run/iterion/attachments/spec/my spec's.pdf");
    let aux = fake.aux_seen.lock().unwrap().clone();
    assert_eq!(aux.len(), 2, "the run container and the node's");
    for mounts in aux {
        assert_eq!(
            mounts
                .iter()
                .filter(|a| a.kind == AuxMountKind::Attachments && a.read_only)
                .count(),
            1,
            "{mounts:?}"
        );
    }
}

#[test]
fn a_stored_copy_changed_after_the_launch_refuses_the_resume() {
    let fx = Fixture::new(&workflow(
        "if [ ! -f marker ]; then exit 3; fi; cat {{attachments.spec}}",
        "",
    ));
    let src = source(&fx);
    let launch = prepare(&fx, no_driver(), RunOptions::new(&fx.work).attach("spec", &src)).unwrap();
    let o = rt()
        .block_on(fx.runtime(no_driver(), &[], false).launch(launch))
        .unwrap();
    assert_eq!(o.status, RunStatus::FailedResumable, "{o:?}");
    let stored = o.run_dir.join("attachments/spec/my spec's.pdf");
    std::fs::write(&stored, b"%PDF-1.7\nsomething else").unwrap();
    std::fs::write(fx.work.join("marker"), "").unwrap();
    let before = std::fs::read(o.run_dir.join("run.json")).unwrap();
    let e = rt()
        .block_on(
            fx.runtime(no_driver(), &[], false)
                .resume(Resume::new(&o.run_id, &fx.store)),
        )
        .unwrap_err();
    assert!(matches!(e, iterion_runtime::Error::ResumeInvalid { .. }), "{e}");
    assert!(
        e.to_string().contains("attachment 'spec' (")
            && e.to_string().ends_with("changed since the run started"),
        "{e}"
    );
    assert_eq!(std::fs::read(o.run_dir.join("run.json")).unwrap(), before);
}
