//! The event catalogue: the stored JSON line of every event type, snapshotted.
use iterion_runtime::events::*;
use iterion_runtime::failure::{FailureCode, FailurePhase};
use iterion_runtime::status::RunStatus;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

const RUN: &str = "0194f7e2-5c1b-7d3e-9a40-2f6c1d8e9b71";
const TS: &str = "2026-01-14T09:31:07.52Z";

fn s(v: &str) -> String {
    v.to_owned()
}

fn some(v: &str) -> Option<String> {
    Some(v.to_owned())
}

fn catalogue() -> Vec<Event> {
    vec![
        SandboxFloorApplied {
            floor: s("ITERION_SANDBOX_FLOOR"),
            value: s("auto"),
            scope: FloorScope::Run,
            node_id: None,
            from: s("none"),
            to: s("auto"),
            shadowed_source: s("workflow"),
        }
        .into(),
        SandboxNetworkDefaulted {
            mode: s("allowlist"),
            preset: s("iterion-default"),
            rules: 0,
            devcontainer: s("/w/app/.devcontainer/devcontainer.json"),
            reason: s("repository-defined sandbox without a network base"),
        }
        .into(),
        SandboxResolved {
            active: true,
            mode: s("auto"),
            source: s("default"),
            origin: some("default_image"),
            image: some("ghcr.io/socialgouv/iterion-sandbox-slim:v0.4.0"),
            build: false,
            devcontainer: None,
            host_state: s("auto"),
            host_state_source: s("default"),
            network_mode: s("open"),
            network_preset: None,
            placements: BTreeMap::from([(s("notify"), PlacementKind::Host), (s("tests"), PlacementKind::Run)]),
            warnings: 0,
        }
        .into(),
        // LC2
        SandboxSkipped {
            driver: s("none"),
            mode: s("auto"),
            source: s("default"),
            reason: s("no container runtime available (docker or podman not found or not reachable)"),
            node_id: None,
            file_secrets_dropped: None,
        }
        .into(),
        // LC7 (names given unsorted: serialised sorted)
        SandboxEnvDenied {
            sandbox: s("run"),
            names: vec![s("GITHUB_TOKEN"), s("ANTHROPIC_API_KEY")],
            entries: vec![
                EnvDeniedEntry {
                    name: s("ANTHROPIC_API_KEY"),
                    source: s("devcontainer.containerEnv"),
                    action: EnvAction::Removed,
                    reason: s("prefix:ANTHROPIC_"),
                    category: s("agent_namespace"),
                },
                EnvDeniedEntry {
                    name: s("GITHUB_TOKEN"),
                    source: s("devcontainer.containerEnv"),
                    action: EnvAction::Removed,
                    reason: s("suffix:_TOKEN"),
                    category: s("credential"),
                },
            ],
            deny_class_version: 1,
        }
        .into(),
        SandboxHostBindsDropped {
            driver: s("kubernetes"),
            binds: vec![s("/home/jo/.iterion")],
            reason: s("driver has no host file system"),
        }
        .into(),
        // HS1
        SandboxUserRemap {
            uid: 1000,
            gid: 1000,
            reason: s("host_state=auto: align container UID with host so writes to the mounted host state remain host-owned"),
        }
        .into(),
        // HS2
        SandboxUidMismatchWarning {
            spec_user: s("1001"),
            host_uid: 1000,
        }
        .into(),
        SandboxHostStateMounted {
            enabled: true,
            source: s("default"),
            workspace_folder: some("/home/jo/src/app"),
            mounts: Some(vec![s("/home/jo/.claude:/home/jo/.claude"), s("/home/jo/src/app/.git/hooks:/home/jo/src/app/.git/hooks:ro")]),
            caches: Some(vec![s("/home/jo/.cache/go-build")]),
            protected: Some(vec![s("/home/jo/src/app/.git/hooks")]),
            created: Some(vec![]),
            // HS5
            skipped: Some(vec![SkippedPath {
                path: s("/home/jo/src/app/.iterion"),
                reason: s("overlaps the workspace"),
            }]),
            home: Some(HomeSource::Host),
            home_tmpfs: Some(true),
        }
        .into(),
        SandboxNetworkStarted {
            driver: s("docker"),
            mode: s("allowlist"),
            preset: some("iterion-default"),
            rules: 2,
            placement: NetworkPlacement::Relay,
            proxy: s("/home/jo/.iterion/projects/-w-app/runs/r/net/proxy.sock"),
            enforced: true,
            node_overrides: vec![s("fetch")],
            tls_inspection: false,
            secrets: Vec::new(),
        }
        .into(),
        SandboxNetworkAdvisory {
            driver: s("docker"),
            engine: s("Docker Desktop"),
            reason: s("the engine cannot reach host sockets"),
        }
        .into(),
        SandboxImageReady {
            image: s("alpine/git:2.45.2"),
            digest: some("sha256:0123"),
            pulled: true,
            duration_ms: 1520,
            node_id: None,
        }
        .into(),
        SandboxClawRoutedViaRunner {
            reason: s("claw nodes run via iterion __claw-runner inside the container"),
            nodes: vec![s("review")],
            binary: RunnerBinary::Mounted,
            host_path: some("/usr/local/bin/iterion"),
        }
        .into(),
        SandboxBuildStarted {
            driver: s("docker"),
            dockerfile: s(".devcontainer/Dockerfile"),
            context: s(".devcontainer"),
            target: None,
            network: s("none"),
            cache: s("miss"),
            builder: s("buildkit"),
            builder_reason: some("build secrets are given, which needs BuildKit (the engine does not advertise it)"),
            node_id: some("lint"),
        }
        .into(),
        SandboxBuildFinished {
            driver: s("docker"),
            target: s("iterion-sandbox-build:r-5f0c1a2b"),
            duration_ms: 30000,
            network: s("none"),
            cache: s("miss"),
            builder: s("buildkit"),
            node_id: some("lint"),
        }
        .into(),
        // LC13
        SandboxBuildFailed {
            driver: s("docker"),
            error: s("build failed: failed to solve"),
            builder: some("classic"),
            node_id: None,
        }
        .into(),
        SandboxWorkspaceCopied {
            files: 120,
            bytes: 40960,
            duration_ms: 800,
        }
        .into(),
        SandboxPostCreateStarted {
            commands: 2,
            node_id: None,
        }
        .into(),
        // LC14
        SandboxPostCreateFinished {
            exit_code: 3,
            duration_ms: 40,
            node_id: None,
        }
        .into(),
        SandboxStarted {
            driver: s("docker"),
            mode: s("inline"),
            source: s("workflow"),
            origin: s("image"),
            image: s("alpine/git:2.45.2"),
            container: s("3f2a9c1d4e5b6a7b8c9d"),
            workspace_folder: s("/home/jo/src/app"),
            user: s("1000:1000"),
            has_post_create: false,
            network_mode: s("allowlist"),
            enforced_egress: true,
            shell: s("sh"),
            runtime: RuntimeRecord {
                name: s("gvisor"),
                source: s("workflow sandbox.runtime"),
                engine: s("runsc"),
            },
            duration_ms: 2100,
        }
        .into(),
        SandboxNodeContainerStarted {
            node_id: s("lint"),
            key: s("5f0c1a2b"),
            image: s("node:22"),
            container: s("aa11bb22cc33dd44"),
            duration_ms: 900,
        }
        .into(),
        // CL5
        SandboxStopped {
            driver: s("docker"),
            containers: 1,
            network_removed: true,
            proxy_stopped: true,
            images_removed: 0,
            duration_ms: 350,
            errors: vec![s("remove container 3f2a9c1d4e5b: engine error")],
        }
        .into(),
        // NW4 + NW5
        NetworkBlocked {
            host: s("evil.example"),
            port: 443,
            reason: BlockReason::PolicyDenial,
            rule: s("no rule matched"),
            decision_id: s("d-42"),
            run_id: s(RUN),
            node_id: some("fetch"),
            suppressed: Some(4),
            address: None,
            secret: None,
        }
        .into(),
        SecretSubstituted {
            secret: s("NPM_TOKEN"),
            host: s("registry.npmjs.org"),
            port: 443,
            method: s("GET"),
            path: s("/-/whoami"),
            node_id: some("publish"),
            decision_id: s("d-43"),
            count: 1,
        }
        .into(),
        RunStarted {
            workflow: s("release_gate"),
            file: s("/w/app/release.bot"),
            sandboxed: true,
            driver: some("docker"),
        }
        .into(),
        // RS2
        RunResumed {
            resumed_from: RunStatus::FailedResumable,
            restart_node: s("entry"),
            failure_code: Some(FailureCode::SandboxSetupTimeout),
        }
        .into(),
        RunFinished { duration_ms: 61000 }.into(),
        // LC11
        RunFailed::new(FailureCode::SandboxSetupTimeout, "post_create did not finish within 100ms")
            .phase(FailurePhase::PostCreate)
            .timeout("100ms")
            .into(),
        // CL2
        RunCancelled::new("signal SIGINT").into(),
        NodeStarted::new("build", NodeKind::Tool, 0, PlacementKind::Run).into(),
        NodeStarted::terminal("done", 0).into(),
        NodeFinished {
            tokens: Some(15),
            cost_usd: Some(0.01),
            ..NodeFinished::new("review", json!({"ok": true}), 4200)
        }
        .into(),
        NodeFinished::terminal("done").into(),
        // GX1
        EdgeSelected {
            from: s("a"),
            to: s("b"),
            condition: None,
            negated: None,
            expression: None,
            loop_name: some("fix"),
            iteration: Some(1),
            round_robin_index: None,
        }
        .into(),
        // SC4
        NodeRecovery {
            node_id: s("build"),
            code: FailureCode::ExecutionFailed,
            reason: s("retrying after failure"),
            attempt: 1,
            delay_ms: 2000,
            error: s("tool node 'build': command exited with status 3"),
        }
        .into(),
        ToolStarted {
            node_id: s("build"),
            tool: s("shell:build"),
            input_size: 12,
        }
        .into(),
        ToolCalled {
            node_id: s("build"),
            tool: s("shell:build"),
            input_size: 12,
            duration_ms: 80,
            exit_code: Some(0),
        }
        .into(),
        // TE11
        ToolError {
            node_id: s("build"),
            tool: s("shell:build"),
            error: s("tool node 'build': command exited with status 3\nboom"),
            exit_code: Some(3),
            duration_ms: 15,
        }
        .into(),
        DelegateStarted {
            node_id: s("review"),
            backend: s("claw"),
            placement: PlacementKind::Run,
            via: DelegateVia::Runner,
        }
        .into(),
        DelegateFinished {
            node_id: s("review"),
            backend: s("claw"),
            tokens: 7,
            cost_usd: None,
            duration_ms: 3000,
        }
        .into(),
        DelegateError {
            node_id: s("review"),
            backend: s("claude_code"),
            error: s("429 Too Many Requests"),
        }
        .into(),
        // AG3
        Forwarded::new("review", "llm_request", json!({"model": "claude-sonnet-4-5"}).as_object().unwrap().clone())
            .unwrap()
            .into(),
        Forwarded::new("review", "llm_step_finished", serde_json::Map::new()).unwrap().into(),
        Forwarded::new("review", "llm_retry", json!({"attempt": 1}).as_object().unwrap().clone())
            .unwrap()
            .into(),
        Forwarded::new("review", "llm_compacted", serde_json::Map::new()).unwrap().into(),
        // GX8
        BudgetWarning {
            dimension: s("max_iterations"),
            used: BudgetValue::Int(4),
            limit: BudgetValue::Int(5),
        }
        .into(),
        BudgetExceeded {
            dimension: s("max_cost_usd"),
            used: BudgetValue::Float(1.5),
            limit: BudgetValue::Float(1.0),
        }
        .into(),
        ArtifactWritten {
            node_id: s("plan"),
            publish: s("plan"),
            version: 0,
        }
        .into(),
        Event::from(BranchStarted { node_id: s("a") }).in_branch("branch_fan_a"),
        Event::from(BranchFinished {
            node_id: s("a"),
            error: None,
            join_node: some("m"),
        })
        .in_branch("branch_fan_a"),
        JoinReady {
            node_id: s("m"),
            strategy: s("best_effort"),
            failed_branches: Some(vec![FailedBranch {
                branch_id: s("branch_fan_b"),
                error: s("node 'b' in branch branch_fan_b: boom"),
            }]),
            terminal_join: None,
            branches_total: None,
        }
        .into(),
        HumanInputRequested {
            node_id: s("h"),
            interaction_id: s("run-1_h"),
            questions: serde_json::json!({"summary": "the diff"}),
            source: None,
            backend: None,
        }
        .into(),
        RunPaused {}.into(),
        HumanAnswersRecorded {
            node_id: s("h"),
            interaction_id: s("run-1_h"),
            answers: serde_json::json!({"approved": true}),
        }
        .into(),
    ]
}

#[test]
fn every_event_line() {
    let lines: Vec<String> = catalogue()
        .iter()
        .enumerate()
        .map(|(i, e)| encode_line(i as u64, TS, RUN, e).unwrap())
        .collect();
    insta::assert_snapshot!("catalogue", lines.join("\n"));
}

#[test]
fn catalogue_covers_every_event_type() {
    let covered: BTreeSet<&str> = catalogue().iter().map(|e| e.event_type()).collect();
    let all: BTreeSet<&str> = EVENT_TYPES.iter().copied().collect();
    assert_eq!(covered, all);
    // Section 6.1 and 6.2 list 46 types (llm_* counted one by one); fan-out and human nodes add 6.
    assert_eq!(all.len(), 52);
}

fn check_scope(event: Event, node: Option<&str>) {
    let line = encode_line(0, TS, RUN, &event).unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v.get("node_id").and_then(|n| n.as_str()), node, "{line}");
    assert!(v["data"].is_object(), "{line}");
}

#[test]
fn node_scope_of_events() {
    check_scope(
        NodeStarted::new("a", NodeKind::Agent, 2, PlacementKind::Own).into(),
        Some("a"),
    );
    check_scope(RunFinished { duration_ms: 1 }.into(), None);
    check_scope(
        SandboxImageReady {
            image: s("i"),
            digest: None,
            pulled: false,
            duration_ms: 0,
            node_id: None,
        }
        .into(),
        None,
    );
    check_scope(
        SandboxImageReady {
            image: s("i"),
            digest: None,
            pulled: false,
            duration_ms: 0,
            node_id: some("lint"),
        }
        .into(),
        Some("lint"),
    );
    // NW4: network_blocked carries node_id at the top level too.
    check_scope(
        NetworkBlocked {
            host: s("evil.example"),
            port: 443,
            reason: BlockReason::PolicyDenial,
            rule: s("no rule matched"),
            decision_id: s("d"),
            run_id: s(RUN),
            node_id: some("fetch"),
            suppressed: None,
            address: None,
            secret: None,
        }
        .into(),
        Some("fetch"),
    );
    // SC2: run_failed names the node in data only.
    check_scope(
        RunFailed::new(FailureCode::FailNodeReached, "workflow reached fail node")
            .node("check")
            .into(),
        None,
    );
    check_scope(NodeFinished::terminal("done").into(), Some("done"));
}

#[test]
fn terminal_node_finished_has_empty_data() {
    let line = encode_line(3, TS, RUN, &NodeFinished::terminal("done").into()).unwrap();
    assert!(line.ends_with(",\"node_id\":\"done\",\"data\":{}}"), "{line}");
}

#[test]
fn run_failed_resumable_follows_the_code() {
    for code in iterion_runtime::failure::FailureCode::ALL {
        let d = RunFailed::new(*code, "e");
        assert_eq!(d.resumable, code.is_resumable(), "{code}");
    }
}
