//! Lifecycle vectors with a fake driver (05 §12.3, §12.5, §12.6, §12.7).
mod life_common;

use iterion_driver::{Error as DError, SetupPhase};
use iterion_runtime::failure::FailureCode;
use iterion_runtime::lifecycle::{Cancel, DriverChoice, Resume};
use iterion_runtime::status::RunStatus;
use life_common::*;
use serde_json::json;

const HELLO_AUTO: &str = "tool hello:\n  command: \"echo '{\\\"ok\\\": true}'\"\n\nworkflow greet:\n  entry: hello\n  hello -> done\n";

fn inline(extra: &str) -> String {
    format!(
        "tool hello:\n  command: \"echo hi\"\n\nworkflow greet:\n  entry: hello\n  sandbox:\n    image: \"alpine:3\"\n{extra}  hello -> done\n"
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn lc1_builtin_auto_with_a_driver_runs_in_the_container() {
    let fx = Fixture::new(HELLO_AUTO);
    let mut fake = FakeDriver::new(Faults::default());
    fake.remap = Some((1000, 1000));
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    let t = types(&ev);
    let sandbox: Vec<&str> = t
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("sandbox_") || t.starts_with("run_"))
        .collect();
    assert_eq!(
        sandbox,
        [
            "sandbox_resolved",
            "sandbox_image_ready",
            "sandbox_user_remap",
            "sandbox_host_state_mounted",
            "sandbox_started",
            "run_started",
            "run_finished",
            "sandbox_stopped"
        ]
    );
    let resolved = first(&ev, "sandbox_resolved");
    assert_eq!(resolved.data["active"], json!(true));
    assert_eq!(resolved.data["origin"], json!("default_image"));
    assert_eq!(
        first(&ev, "sandbox_host_state_mounted").data["enabled"],
        json!(true)
    );
    assert_eq!(t.last().map(String::as_str), Some("sandbox_stopped"));
    let stopped = first(&ev, "sandbox_stopped");
    assert_eq!(stopped.data["containers"], json!(1));
    assert_eq!(first(&ev, "node_started").data["placement"], json!("run"));
    let doc = fx.doc(&o);
    assert_eq!(doc.sandbox.driver.as_deref(), Some("docker"));
    assert_eq!(doc.sandbox.containers.len(), 1);
    assert!(doc.checkpoint.is_none());
    assert!(fake.calls().contains(&"cleanup".to_string()));
}

#[test]
fn lc2_builtin_auto_without_a_driver_runs_on_the_host() {
    let fx = Fixture::new(HELLO_AUTO);
    let choice = DriverChoice::Unavailable {
        reason: "no engine answers".into(),
    };
    let o = rt()
        .block_on(fx.runtime(choice, &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    let t = types(&ev);
    assert_eq!(&t[..3], ["sandbox_resolved", "sandbox_skipped", "run_started"]);
    let s = first(&ev, "sandbox_skipped");
    assert_eq!(s.data["driver"], json!("none"));
    assert_eq!(s.data["mode"], json!("auto"));
    assert_eq!(
        s.data["reason"],
        json!("no container runtime available (docker or podman not found or not reachable)")
    );
    assert_eq!(first(&ev, "node_started").data["placement"], json!("host"));
    assert!(fx.doc(&o).sandbox.skipped.is_some());
}

#[test]
fn lc3_inline_without_a_driver_fails() {
    let fx = Fixture::new(&inline(""));
    let choice = DriverChoice::Unavailable {
        reason: "none".into(),
    };
    let o = rt()
        .block_on(fx.runtime(choice, &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Failed);
    assert_eq!(o.failure_code, Some(FailureCode::SandboxDriverUnavailable));
    let ev = fx.events(&o);
    let t = types(&ev);
    assert_eq!(t, ["sandbox_resolved", "run_failed", "sandbox_stopped"]);
    let f = first(&ev, "run_failed");
    assert_eq!(f.data["code"], json!("SANDBOX_DRIVER_UNAVAILABLE"));
    assert_eq!(f.data["resumable"], json!(false));
    assert_eq!(f.data["phase"], json!("driver"));
    assert!(o.error.unwrap().contains("--sandbox none"));
}

#[test]
fn lc4_inline_floor_without_a_driver_fails() {
    let fx = Fixture::new(&HELLO_AUTO.replace("  entry: hello\n", "  entry: hello\n  sandbox: auto\n"));
    let choice = DriverChoice::Unavailable {
        reason: "none".into(),
    };
    let o = rt()
        .block_on(
            fx.runtime(choice, &[("ITERION_SANDBOX_FLOOR", "inline")], true)
                .launch(fx.launch()),
        )
        .unwrap();
    assert_eq!(o.status, RunStatus::Failed);
    assert_eq!(o.failure_code, Some(FailureCode::SandboxDriverUnavailable));
    assert!(!types(&fx.events(&o)).contains(&"sandbox_skipped".to_string()));
}

#[test]
fn lc5_auto_floor_raises_none() {
    let fx = Fixture::new(&HELLO_AUTO.replace("  entry: hello\n", "  entry: hello\n  sandbox: none\n"));
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(
            fx.runtime(container(&fake), &[("ITERION_SANDBOX_FLOOR", "auto")], true)
                .launch(fx.launch()),
        )
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    let t = types(&ev);
    assert_eq!(&t[..2], ["sandbox_floor_applied", "sandbox_resolved"]);
    let fl = first(&ev, "sandbox_floor_applied");
    assert_eq!(fl.data["from"], json!("none"));
    assert_eq!(fl.data["to"], json!("auto"));
    assert_eq!(first(&ev, "sandbox_resolved").data["mode"], json!("auto"));
    assert!(t.contains(&"sandbox_started".to_string()));
}

#[test]
fn lc6_builtin_none_creates_nothing() {
    let fx = Fixture::new(HELLO_AUTO);
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], false).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    assert_eq!(&types(&ev)[..2], ["sandbox_resolved", "run_started"]);
    assert_eq!(first(&ev, "sandbox_resolved").data["active"], json!(false));
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
}

#[test]
fn lc7_repository_secrets_are_removed_and_never_written() {
    let fx = Fixture::new(HELLO_AUTO);
    fx.write(
        ".devcontainer/devcontainer.json",
        r#"{"image": "alpine:3", "containerEnv": {"ANTHROPIC_API_KEY": "k-secret-value", "GITHUB_TOKEN": "t-secret-value", "NODE_ENV": "test"}}"#,
    );
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    let d = first(&ev, "sandbox_env_denied");
    assert_eq!(d.data["sandbox"], json!("run"));
    assert_eq!(d.data["names"], json!(["ANTHROPIC_API_KEY", "GITHUB_TOKEN"]));
    assert_eq!(d.data["entries"][0]["reason"], json!("prefix:ANTHROPIC_"));
    assert_eq!(d.data["entries"][1]["reason"], json!("suffix:_TOKEN"));
    assert_eq!(d.data["entries"][0]["action"], json!("removed"));
    let run_dir = o.run_dir.clone();
    for f in ["events.jsonl", "run.json", "run.log"] {
        let text = std::fs::read_to_string(run_dir.join(f)).unwrap();
        assert!(
            !text.contains("k-secret-value") && !text.contains("t-secret-value"),
            "{f}"
        );
    }
    let env = fake.env_seen.lock().unwrap()[0].clone();
    assert!(env.contains(&("NODE_ENV".into(), "test".into())));
    assert!(
        !env.iter()
            .any(|(k, _)| k == "ANTHROPIC_API_KEY" || k == "GITHUB_TOKEN")
    );
}

#[test]
fn lc11_post_create_over_its_bound_then_resume_finishes() {
    let fx = Fixture::new(&inline("    post_create: \"sleep 30\"\n"));
    let fake = FakeDriver::new(Faults::default());
    let env = [("ITERION_SANDBOX_POST_CREATE_TIMEOUT", "100ms")];
    let o = rt()
        .block_on(fx.runtime(container(&fake), &env, true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::FailedResumable, "{o:?}");
    assert_eq!(o.failure_code, Some(FailureCode::SandboxSetupTimeout));
    let ev = fx.events(&o);
    let t = types(&ev);
    assert!(t.contains(&"sandbox_post_create_started".to_string()));
    let f = first(&ev, "run_failed");
    assert_eq!(f.data["code"], json!("SANDBOX_SETUP_TIMEOUT"));
    assert_eq!(f.data["resumable"], json!(true));
    assert_eq!(f.data["phase"], json!("post_create"));
    assert_eq!(f.data["timeout"], json!("100ms"));
    assert_eq!(t.last().map(String::as_str), Some("sandbox_stopped"));
    assert!(fake.calls().contains(&"cleanup".to_string()));
    let doc = fx.doc(&o);
    assert_eq!(doc.checkpoint.as_ref().unwrap().node_id, "hello");
    // RS2: resume with a longer bound rebuilds the sandbox and finishes.
    std::fs::write(&fx.file, inline("    post_create: \"true\"\n")).unwrap();
    let mut r = Resume::new(&o.run_id, &fx.store);
    r.force = true;
    let o2 = rt()
        .block_on(fx.runtime(container(&fake), &[], true).resume(r))
        .unwrap();
    assert_eq!(o2.status, RunStatus::Finished, "{o2:?}");
    let ev = fx.events(&o2);
    let resumed = first(&ev, "run_resumed");
    assert_eq!(resumed.data["resumed_from"], json!("failed_resumable"));
    assert_eq!(resumed.data["restart_node"], json!("hello"));
    assert_eq!(resumed.data["failure_code"], json!("SANDBOX_SETUP_TIMEOUT"));
    let doc = fx.doc(&o2);
    assert!(doc.failure_code.is_none() && doc.error.is_none());
    assert_eq!(fake.calls().iter().filter(|c| c.starts_with("start")).count(), 2);
}

#[test]
fn lc12_image_not_found_and_pull_timeout() {
    let fx = Fixture::new(&inline(""));
    let fake = FakeDriver::new(Faults {
        prepare: Some(DError::ImageNotFound {
            image: "alpine:3".into(),
        }),
        ..Faults::default()
    });
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(
        (o.status, o.failure_code),
        (RunStatus::Failed, Some(FailureCode::SandboxImageUnavailable))
    );
    let fake = FakeDriver::new(Faults {
        hang_prepare: true,
        ..Faults::default()
    });
    let o = rt()
        .block_on(
            fx.runtime(
                container(&fake),
                &[("ITERION_SANDBOX_PULL_TIMEOUT", "100ms")],
                true,
            )
            .launch(fx.launch()),
        )
        .unwrap();
    assert_eq!(
        (o.status, o.failure_code),
        (RunStatus::FailedResumable, Some(FailureCode::SandboxSetupTimeout))
    );
    assert_eq!(first(&fx.events(&o), "run_failed").data["phase"], json!("pull"));
}

#[test]
fn lc13_build_failure() {
    let fx = Fixture::new(
        "tool hello:\n  command: \"echo hi\"\n\nworkflow greet:\n  entry: hello\n  sandbox:\n    build:\n      dockerfile: \"Dockerfile\"\n  hello -> done\n",
    );
    fx.write("Dockerfile", "FROM scratch\n");
    let fake = FakeDriver::new(Faults {
        build: Some(DError::BuildFailed {
            dockerfile: "Dockerfile".into(),
            tail: "error: failed to solve".into(),
        }),
        ..Faults::default()
    });
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(
        (o.status, o.failure_code),
        (RunStatus::Failed, Some(FailureCode::SandboxBuildFailed)),
        "{o:?}"
    );
    let ev = fx.events(&o);
    let t = types(&ev);
    assert!(t.contains(&"sandbox_build_started".to_string()));
    // The default policy is open: the build keeps the engine's network.
    assert_eq!(first(&ev, "sandbox_build_started").data["network"], json!("open"));
    assert!(
        first(&ev, "sandbox_build_failed").data["error"]
            .as_str()
            .unwrap()
            .contains("failed to solve")
    );
}

/// Under a filtering policy the build is asked to run without network, and a build the driver refuses before
/// it starts fails the run with the Dockerfile line in the message.
#[test]
fn lc13_build_under_allowlist_has_no_network_and_a_refusal_names_the_line() {
    let fx = Fixture::new(
        "tool hello:\n  command: \"echo hi\"\n\nworkflow greet:\n  entry: hello\n  sandbox:\n    build:\n      dockerfile: \"Dockerfile\"\n    network:\n      mode: allowlist\n  hello -> done\n",
    );
    fx.write("Dockerfile", "FROM scratch\n");
    let fake = FakeDriver::new(Faults {
        build: Some(DError::BuildRefused {
            dockerfile: "/w/Dockerfile".into(),
            line: 3,
            reason: "ADD http://h/x: the engine would fetch it itself".into(),
        }),
        ..Faults::default()
    });
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(
        (o.status, o.failure_code),
        (RunStatus::Failed, Some(FailureCode::SandboxBuildFailed)),
        "{o:?}"
    );
    let ev = fx.events(&o);
    assert_eq!(first(&ev, "sandbox_build_started").data["network"], json!("none"));
    let failed = first(&ev, "run_failed");
    assert!(
        failed.data["error"]
            .as_str()
            .unwrap()
            .contains("/w/Dockerfile:3: ADD"),
        "{failed:?}"
    );
}

#[test]
fn lc14_post_create_exit_3() {
    let fx = Fixture::new(&inline("    post_create: \"exit 3\"\n"));
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(
        (o.status, o.failure_code),
        (RunStatus::Failed, Some(FailureCode::SandboxPostCreateFailed))
    );
    let ev = fx.events(&o);
    assert_eq!(
        first(&ev, "sandbox_post_create_finished").data["exit_code"],
        json!(3)
    );
    assert!(o.error.unwrap().contains("exited 3"));
}

#[test]
fn lc18_forced_noop_runs_inline_on_the_host() {
    let fx = Fixture::new(&inline(""));
    let o = rt()
        .block_on(
            fx.runtime(DriverChoice::ForcedNoop, &[], true)
                .launch(fx.launch()),
        )
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    assert_eq!(
        first(&ev, "sandbox_skipped").data["reason"],
        json!("operator opted into the noop driver; the run is NOT actually sandboxed")
    );
    assert_eq!(first(&ev, "node_started").data["placement"], json!("host"));
}

#[test]
fn start_failure_is_resumable() {
    let fx = Fixture::new(&inline(""));
    let fake = FakeDriver::new(Faults {
        start: Some(DError::SetupTimeout {
            phase: SetupPhase::Start,
            after: std::time::Duration::from_secs(300),
            subject: None,
        }),
        ..Faults::default()
    });
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.failure_code, Some(FailureCode::SandboxSetupTimeout));
    assert_eq!(first(&fx.events(&o), "run_failed").data["phase"], json!("start"));
}

#[test]
fn cl5_cleanup_failure_leaves_the_status_alone() {
    let fx = Fixture::new(&inline(""));
    let fake = FakeDriver::new(Faults {
        cleanup_error: Some("remove container: engine said no".into()),
        ..Faults::default()
    });
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished);
    let ev = fx.events(&o);
    let s = first(&ev, "sandbox_stopped");
    assert_eq!(s.data["errors"], json!(["remove container: engine said no"]));
    assert_eq!(s.data["containers"], json!(0));
}

#[test]
fn failing_node_is_failed_resumable_with_its_code() {
    let fx = Fixture::new(&inline("").replace("echo hi", "exit 3"));
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::FailedResumable, "{o:?}");
    assert_eq!(o.failure_code, Some(FailureCode::ExecutionFailed));
    assert_eq!(fx.doc(&o).checkpoint.unwrap().node_id, "hello");
}

#[test]
fn cancellation_before_start_records_cancelled() {
    let fx = Fixture::new(&inline(""));
    let fake = FakeDriver::new(Faults {
        hang_prepare: true,
        ..Faults::default()
    });
    let cancel = Cancel::new();
    let rtm = fx.runtime_with(container(&fake), &[], true, cancel.clone());
    let o = rt()
        .block_on(async {
            let c = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                c.cancel("signal SIGINT");
            });
            rtm.launch(fx.launch()).await
        })
        .unwrap();
    assert_eq!(o.status, RunStatus::Cancelled);
    let ev = fx.events(&o);
    let c = first(&ev, "run_cancelled");
    assert_eq!(
        c.data,
        serde_json::from_value(json!({"reason": "signal SIGINT", "code": "CANCELLED"})).unwrap()
    );
    assert_eq!(types(&ev).last().map(String::as_str), Some("sandbox_stopped"));
    assert_eq!(fx.doc(&o).failure_code, Some(FailureCode::Cancelled));
}

#[test]
fn rs1_resume_of_a_finished_run_is_refused() {
    let fx = Fixture::new(HELLO_AUTO);
    let choice = DriverChoice::Unavailable {
        reason: "none".into(),
    };
    let o = rt()
        .block_on(fx.runtime(choice.clone(), &[], false).launch(fx.launch()))
        .unwrap();
    let before = std::fs::read(o.run_dir.join("run.json")).unwrap();
    let e = rt()
        .block_on(
            fx.runtime(choice, &[], false)
                .resume(Resume::new(&o.run_id, &fx.store)),
        )
        .unwrap_err();
    assert!(matches!(e, iterion_runtime::Error::ResumeInvalid { .. }), "{e}");
    assert_eq!(std::fs::read(o.run_dir.join("run.json")).unwrap(), before);
}

#[test]
fn rs4_recorded_inline_without_a_driver_fails_on_resume_and_rs5_changed_file_is_refused() {
    let fx = Fixture::new(&inline("    post_create: \"exit 3\"\n").replace("exit 3", "sleep 30"));
    let fake = FakeDriver::new(Faults::default());
    let env = [("ITERION_SANDBOX_POST_CREATE_TIMEOUT", "50ms")];
    let o = rt()
        .block_on(fx.runtime(container(&fake), &env, true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::FailedResumable);
    std::fs::write(&fx.file, inline("")).unwrap();
    let choice = DriverChoice::Unavailable {
        reason: "none".into(),
    };
    let e = rt()
        .block_on(
            fx.runtime(choice.clone(), &[], true)
                .resume(Resume::new(&o.run_id, &fx.store)),
        )
        .unwrap_err();
    assert!(e.to_string().contains("changed since the run started"), "{e}");
    let mut r = Resume::new(&o.run_id, &fx.store);
    r.force = true;
    let o2 = rt().block_on(fx.runtime(choice, &[], true).resume(r)).unwrap();
    assert_eq!(
        (o2.status, o2.failure_code),
        (RunStatus::Failed, Some(FailureCode::SandboxDriverUnavailable))
    );
}

const FETCH: &str = "tool fetch:\n  command: \"env | grep -i _proxy > env.txt; curl -sS -o /dev/null -w '%{http_code}' https://evil.example/ > code.txt; echo '{}'\"\n\nworkflow greet:\n  entry: fetch\n  sandbox:\n    image: \"alpine:3\"\n    network:\n      mode: allowlist\n      rules: [\"github.com\"]\n  fetch -> done\n";

#[test]
fn nw2_nw4_proxy_credentials_and_denials_name_the_node() {
    let fx = Fixture::new(FETCH);
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    let started = first(&ev, "sandbox_network_started");
    assert_eq!(started.data["mode"], json!("allowlist"));
    // The container environment carries the proxy URL without any credential (a credential there would be
    // readable by every process of every node through /proc/1/environ).
    let env = fake.env_seen.lock().unwrap()[0].clone();
    for k in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        let v = &env.iter().find(|(n, _)| n == k).unwrap().1;
        assert!(v.starts_with("http://") && !v.contains('@'), "{k}={v}");
    }
    assert!(
        env.iter()
            .any(|(n, v)| n == "NO_PROXY" && v == "localhost,127.0.0.1,::1")
    );
    assert!(env.iter().any(|(n, v)| n == "NODE_USE_ENV_PROXY" && v == "1"));
    // NW4: the node's request was made with its own credentials and refused.
    // NW2: the exec of node `fetch` overrides the proxy URLs with its own credentials.
    let exec_env = std::fs::read_to_string(fx.work.join("env.txt")).unwrap();
    assert!(exec_env.contains("\nHTTPS_PROXY=http://fetch:"), "{exec_env}");
    // Never the token in events.
    let url = exec_env
        .lines()
        .find_map(|l| l.strip_prefix("HTTPS_PROXY="))
        .unwrap();
    let token = url.trim_start_matches("http://fetch:").split('@').next().unwrap();
    assert_eq!(token.len(), 64, "{url}");
    let log = std::fs::read_to_string(o.run_dir.join("events.jsonl")).unwrap();
    assert!(!log.contains(token));
    let b = first(&ev, "network_blocked");
    assert_eq!(b.node_id.as_deref(), Some("fetch"));
    assert_eq!(b.data["host"], json!("evil.example"));
    assert_eq!(b.data["port"], json!(443));
    assert_eq!(b.data["reason"], json!("policy denial"));
    assert_eq!(b.data["rule"], json!("no rule matched"));
    assert!(!b.data["decision_id"].as_str().unwrap().is_empty());
    let stopped = first(&ev, "sandbox_stopped");
    assert_eq!(stopped.data["proxy_stopped"], json!(true));
    assert_eq!(stopped.data["network_removed"], json!(true));
}

#[test]
fn nw1_open_policy_sets_no_proxy_and_keeps_workflow_values() {
    let fx = Fixture::new(&inline("    env:\n      HTTPS_PROXY: \"http://corp:3128\"\n"));
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    assert!(!fake.calls().contains(&"network".to_string()));
    let env = fake.env_seen.lock().unwrap()[0].clone();
    assert!(env.contains(&("HTTPS_PROXY".into(), "http://corp:3128".into())));
    assert!(
        !env.iter()
            .any(|(n, _)| n == "HTTP_PROXY" || n == "NODE_USE_ENV_PROXY")
    );
    assert!(!types(&fx.events(&o)).contains(&"sandbox_network_started".to_string()));
}

#[test]
fn lc9_devcontainer_without_network_defaults_to_the_allowlist() {
    let fx = Fixture::new(HELLO_AUTO);
    fx.write(".devcontainer/devcontainer.json", r#"{"image": "alpine:3"}"#);
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    let t = types(&ev);
    assert_eq!(&t[..2], ["sandbox_network_defaulted", "sandbox_resolved"]);
    let r = first(&ev, "sandbox_resolved");
    assert_eq!(r.data["network_mode"], json!("allowlist"));
    assert_eq!(r.data["network_preset"], json!("iterion-default"));
    assert!(t.contains(&"sandbox_network_started".to_string()));
}

#[test]
fn nw6_workflow_proxy_value_is_overridden_under_enforcement() {
    let fx = Fixture::new(&FETCH.replace(
        "    network:\n",
        "    env:\n      https_proxy: \"http://evil:1\"\n    network:\n",
    ));
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    let ev = fx.events(&o);
    let d = first(&ev, "sandbox_env_denied");
    let entry = d.data["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "https_proxy")
        .unwrap()
        .clone();
    assert_eq!(entry["action"], json!("overridden"));
    assert_eq!(entry["reason"], json!("reserved:proxy"));
    assert_eq!(entry["source"], json!("workflow"));
}

#[test]
fn lc16_a_node_container_starts_once_and_is_reused() {
    let fx = Fixture::new(
        "tool a:\n  command: \"echo '{}'\"\n  sandbox:\n    image: \"node:20\"\n\ntool b:\n  command: \"echo '{}'\"\n  sandbox:\n    image: \"node:20\"\n\nworkflow greet:\n  entry: a\n  sandbox:\n    image: \"alpine:3\"\n  a -> b\n  b -> done\n",
    );
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    let started: Vec<_> = ev
        .iter()
        .filter(|e| e.event_type == "sandbox_node_container_started")
        .collect();
    assert_eq!(started.len(), 1, "{:?}", types(&ev));
    assert_eq!(started[0].node_id.as_deref(), Some("a"));
    let placements: Vec<_> = ev
        .iter()
        .filter(|e| e.event_type == "node_started" && e.data.contains_key("placement"))
        .map(|e| e.data["placement"].clone())
        .collect();
    assert_eq!(placements, [json!("own"), json!("own")]);
    assert_eq!(first(&ev, "sandbox_stopped").data["containers"], json!(2));
    assert_eq!(fx.doc(&o).sandbox.containers.len(), 2);
}

#[test]
fn cl3_second_signal_during_a_hanging_cleanup_force_removes() {
    let fx = Fixture::new(&inline(""));
    let fake = FakeDriver::new(Faults {
        hang_cleanup: true,
        ..Faults::default()
    });
    let cancel = Cancel::new();
    let rtm = fx.runtime_with(container(&fake), &[], true, cancel.clone());
    let calls = fake.calls.clone();
    let o = rt()
        .block_on(async {
            tokio::spawn(async move {
                while !calls.lock().unwrap().iter().any(|c| c == "cleanup") {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                cancel.force();
            });
            rtm.launch(fx.launch()).await
        })
        .unwrap();
    // The run had finished before cleanup: its status is unchanged by the second signal.
    assert_eq!(o.status, RunStatus::Finished);
    assert!(
        fake.calls().contains(&"force_cleanup".to_string()),
        "{:?}",
        fake.calls()
    );
    let ev = fx.events(&o);
    let stopped = first(&ev, "sandbox_stopped");
    assert!(
        stopped.data["errors"][0]
            .as_str()
            .unwrap()
            .contains("second signal"),
        "{stopped:?}"
    );
}

/// An `llm` router calls a model through its backend, so it is placed like an agent: in a sandboxed run its
/// call runs in the run container, with a proxy credential of its own under the run's egress policy, and the
/// resolution, the record and its `node_started` say so. It used to run on the host, outside the policy.
#[test]
fn an_llm_router_is_placed_in_the_run_container_with_its_own_credential() {
    let fx = Fixture::new(
        "router r:\n  mode: llm\n  backend: \"claude_code\"\n\ntool x:\n  command: \"echo '{}'\"\n\ntool y:\n  command: \"echo '{}'\"\n\nworkflow greet:\n  entry: r\n  sandbox:\n    image: \"alpine:3\"\n    network:\n      mode: allowlist\n      rules: [\"github.com\"]\n  r -> x\n  r -> y\n  x -> done\n  y -> done\n",
    );
    let reply = serde_json::json!({
        "type": "result", "is_error": false,
        "result": "{\"selected_route\": \"y\", \"reasoning\": \"r\"}",
        "usage": {"input_tokens": 1, "output_tokens": 1}
    });
    let cli = fx.dir.path().join("claude");
    std::fs::write(
        &cli,
        format!(
            "#!/bin/sh\nenv | grep '^HTTPS_PROXY=' > '{}'\ncat > /dev/null\necho '{reply}'\n",
            fx.work.join("router-env.txt").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fake = FakeDriver::new(Faults::default());
    let bin = path_str(&cli);
    let o = rt()
        .block_on(
            fx.runtime(container(&fake), &[("ITERION_CLAUDE_BIN", bin.as_str())], true)
                .launch(fx.launch()),
        )
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    let started = ev
        .iter()
        .find(|e| e.event_type == "node_started" && e.node_id.as_deref() == Some("r"))
        .unwrap();
    assert_eq!(started.data["placement"], json!("run"));
    assert_eq!(
        first(&ev, "sandbox_resolved").data["placements"]["r"],
        json!("run")
    );
    let delegate = first(&ev, "delegate_started");
    assert_eq!(delegate.node_id.as_deref(), Some("r"));
    assert_eq!(delegate.data["placement"], json!("run"));
    // the call went through the run's proxy with the router's own credential
    let env = std::fs::read_to_string(fx.work.join("router-env.txt")).unwrap();
    assert!(env.starts_with("HTTPS_PROXY=http://r:"), "{env}");
    let record = &fx.doc(&o).sandbox.nodes["r"];
    assert_eq!(serde_json::to_value(record.placement).unwrap(), json!("run"));
    let edge = ev
        .iter()
        .find(|e| e.event_type == "edge_selected" && e.data["from"] == json!("r"))
        .unwrap();
    assert_eq!(edge.data["to"], json!("y"));
}
