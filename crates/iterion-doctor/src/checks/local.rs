//! The local checks of the strict battery: the workflow, resolution, the driver, the spec, the engine, mount
//! safety, the repository environment, the image and its build context.

use super::*;
pub(super) fn workflow_compiles(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "workflow_compiles";
    let Some(_) = ctx.loaded else {
        return skip(ID, "no workflow file");
    };
    let errs = ctx.diags_in(Bucket::Workflow);
    if !errs.is_empty() {
        let lines: Vec<String> = errs.iter().map(|d| diag_line(d)).collect();
        return fail(
            ID,
            lines.join("; "),
            "fix the listed diagnostics; iterion run would refuse this workflow",
        );
    }
    match &ctx.workflow {
        Some(w) => pass(
            ID,
            format!(
                "workflow '{}' compiles ({} nodes)",
                w.name.as_str(),
                w.nodes.len()
            ),
        ),
        None => fail(
            ID,
            "the file declares no workflow",
            "fix the listed diagnostics; iterion run would refuse this workflow",
        ),
    }
}

pub(super) fn sandbox_active(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "sandbox_active";
    let plan = match &ctx.plan {
        Ok(p) => p,
        Err(ResolveError::Devcontainer { diagnostics, .. })
            if diagnostics.iter().any(|d| d.is_error() && d.code == "D006") =>
        {
            return skip(ID, "the devcontainer weakens isolation (see spec_safety)");
        }
        Err(e @ ResolveError::Devcontainer { diagnostics, .. }) => {
            let hint = diagnostics
                .iter()
                .find(|d| d.is_error())
                .and_then(|d| d.hint.clone())
                .unwrap_or_else(|| "fix devcontainer.json".into());
            return fail(ID, e.to_string(), hint);
        }
        Err(e @ ResolveError::Unsandboxable { .. }) => {
            return fail(
                ID,
                e.to_string(),
                "run from a repository with a devcontainer, or set ITERION_SANDBOX_DEFAULT_IMAGE",
            );
        }
        Err(e @ ResolveError::InvalidValue { code, .. }) => {
            let owner = match bucket(code) {
                Bucket::Network => "network_policy_syntax",
                Bucket::Safety => "spec_safety",
                _ => "spec_valid",
            };
            return skip(ID, format!("resolution failed: {e} (see {owner})"));
        }
        Err(_) if ctx.workflow.is_none() => return skip(ID, "the workflow did not compile"),
        Err(e) => return skip(ID, format!("resolution failed: {e}")),
    };
    let sandbox_warnings: Vec<String> = ctx
        .diags
        .iter()
        .filter(|d| !d.is_error() && bucket(d.code) == Bucket::Sandbox)
        .chain(plan.warnings.iter())
        .map(diag_line)
        .collect();
    if let Some(f) = plan.floors.iter().find(|f| f.scope == Scope::Run) {
        return mk(
            ID,
            Status::Warn,
            format!(
                "{}={} raised the run scope from {} to {} (shadowed: {})",
                f.floor.as_str(),
                f.value,
                f.from,
                f.to,
                f.shadowed_source
            ),
            None,
        );
    }
    match (&plan.run, plan.run_mode) {
        (None, RunMode::None) => warn(
            ID,
            format!("none from {}: this run will not be sandboxed", plan.run_source),
            "this run will not be sandboxed; prefer sandbox: auto (C128)",
        ),
        (None, _) => warn(
            ID,
            format!(
                "{} from {}: {}",
                match plan.run_mode {
                    RunMode::Inline => "inline",
                    _ => "auto",
                },
                plan.run_source,
                plan.run_skippable.as_deref().unwrap_or("no container spec")
            ),
            "set ITERION_SANDBOX_DEFAULT_IMAGE or add a devcontainer.json",
        ),
        (Some(r), _) => {
            let origin = match (&r.devcontainer, &r.image, &r.build) {
                (Some(d), _, _) => format!("devcontainer {}", d.path),
                (None, _, Some(b)) => format!("build {}", b.dockerfile),
                (None, Some(i), None) => format!("image {i}"),
                (None, None, None) => "no image".into(),
            };
            let nodes: Vec<String> = plan
                .nodes
                .iter()
                .map(|(k, p)| {
                    format!(
                        "{k}={}",
                        match p {
                            NodePlacement::Host { .. } => "host",
                            NodePlacement::Run { .. } => "run",
                            NodePlacement::Own { .. } => "own",
                        }
                    )
                })
                .collect();
            let mut m = format!("{} from {} · {origin}", r.mode.as_str(), r.source);
            if !nodes.is_empty() {
                m.push_str(&format!(" · nodes: {}", nodes.join(", ")));
            }
            if !sandbox_warnings.is_empty() {
                m.push_str(&format!(" · warnings: {}", sandbox_warnings.join("; ")));
            }
            pass(ID, m)
        }
    }
}

pub(super) fn driver_available(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "driver_available";
    let sel = &ctx.host.selection;
    if ctx.plan.is_err() {
        return skip(ID, "sandbox resolution failed (see sandbox_active)");
    }
    if !ctx.active() {
        return pass(ID, "no active sandbox scope: nothing needs a driver");
    }
    if let Some(reason) = sel.unavailable_reason()
        && sel.forced.is_some()
    {
        return fail(
            ID,
            format!("the forced driver {} is unavailable: {reason}", sel.kind),
            format!("the forced driver {} is unavailable: {reason}", sel.kind),
        );
    }
    if ctx.cross_host() {
        let m = if ctx.cloud {
            "cross-host check: the spec is validated, the runtime is not (this host does not run kubernetes sandboxes; the k8s_* checks cover the cluster)".to_string()
        } else {
            format!(
                "cross-host check: the spec is validated, the runtime is not ({})",
                sel.unavailable_summary()
            )
        };
        let hint = if ctx.cloud {
            "runs here need Docker or Podman: check this workflow with --target local"
        } else {
            "cross-host check: install Docker or Podman to run here"
        };
        return warn(ID, m, hint);
    }
    if sel.kind == DriverKind::Noop {
        if ctx.forced_noop() {
            if ctx.inline_floor() {
                return fail(
                    ID,
                    "noop forced by the operator: the inline floor forbids running on the host",
                    "unset ITERION_SANDBOX_FLOOR=inline or choose a container driver",
                );
            }
            return warn(
                ID,
                "noop forced by the operator: the run is NOT sandboxed",
                "the run will execute on the host (noop driver): it is NOT sandboxed",
            );
        }
        return fail(
            ID,
            format!("no usable driver: {}", sel.unavailable_summary()),
            "install Docker or Podman (or start the daemon), or pass --sandbox-driver=noop to run on the host",
        );
    }
    let version = sel.engine.as_ref().map(|e| e.engine.clone()).unwrap_or_default();
    let mut c = pass(
        ID,
        format!("{} {version} ({})", sel.kind, sel.reason).replace("  ", " "),
    );
    c.details = json!({"driver": sel.kind.as_str()});
    c
}

pub(super) fn spec_valid(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "spec_valid";
    let mut problems: Vec<String> = ctx
        .diags_in(Bucket::SpecValid)
        .iter()
        .map(|d| diag_line(d))
        .collect();
    let mut hint = ctx
        .diags_in(Bucket::SpecValid)
        .iter()
        .find_map(|d| d.hint.clone());
    if problems.is_empty()
        && let Err(ResolveError::InvalidValue { code, .. }) = &ctx.plan
        && bucket(code) == Bucket::SpecValid
        && let Err(e) = &ctx.plan
    {
        problems.push(format!("[{code}] {e}"));
    }
    if !problems.is_empty() {
        let h = match hint.take() {
            Some(h) => format!("fix the sandbox: block ({h})"),
            None => "fix the sandbox: block".into(),
        };
        return fail(ID, problems.join("; "), h);
    }
    if ctx.plan.is_err() {
        return skip(ID, "sandbox resolution failed (see sandbox_active)");
    }
    if ctx.specs.is_empty() {
        return skip(ID, "no active sandbox scope");
    }
    for (label, s) in &ctx.specs {
        if s.image.is_some() == s.build.is_some() {
            return fail(
                ID,
                format!("{label}: exactly one of image and build is required"),
                "fix the sandbox: block",
            );
        }
    }
    // the launch refusal of a codex node (agent, judge, llm router) placed in a container
    if let (Ok(plan), Some(wf)) = (&ctx.plan, &ctx.workflow) {
        let codex = iterion_runtime::exec::codex::codex_nodes(wf, &ctx.inputs.env);
        if let Some(why) = iterion_runtime::exec::codex::plan_refusal(plan, &codex) {
            return fail(ID, why, iterion_runtime::exec::codex::CODEX_SANDBOX_HINT);
        }
    }
    let nodes = ctx.specs.len() - usize::from(ctx.specs.iter().any(|(l, _)| l == "run"));
    pass(ID, format!("run spec and {nodes} node specs are valid"))
}

pub(super) async fn engine_reachable(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "engine_reachable";
    if ctx.cloud {
        return skip(ID, "target cloud");
    }
    if !ctx.active() {
        return skip(ID, "no active sandbox scope");
    }
    if ctx.forced_noop() {
        return skip(ID, "the noop driver needs no engine");
    }
    if ctx.cross_host() {
        return skip(ID, "cross-host check: no engine on this host");
    }
    match ctx.host.engine.ping().await {
        Ok(a) => pass(
            ID,
            engine_line(&EngineDoc {
                kind: a.kind,
                version: a.version,
                api_version: a.api_version,
                rootless: a.rootless,
                desktop: a.desktop,
                endpoint: Some(a.endpoint),
            }),
        ),
        Err(e) => {
            let hint = match &e {
                EngineFailure::NotRunning(_) | EngineFailure::Other(_) => {
                    "start Docker Desktop, or: systemctl start docker (or podman.socket)".to_string()
                }
                EngineFailure::Permission(_) => {
                    "add your user to the docker group, or use rootless Podman".into()
                }
                EngineFailure::Timeout { endpoint, after } => format!(
                    "the engine at {endpoint} did not answer within {}; check the daemon (or raise ITERION_SANDBOX_DOCTOR_TIMEOUT)",
                    iterion_driver::fmt_duration(*after)
                ),
                EngineFailure::TooOld(_) => "upgrade the engine (Docker 20.10 or Podman 3 or newer)".into(),
            };
            fail(ID, describe(&e), hint)
        }
    }
}

pub(super) fn host_facts(ctx: &Ctx<'_>) -> HostFacts {
    let env = &ctx.inputs.env;
    HostFacts {
        os: if cfg!(target_os = "macos") {
            HostOs::MacOs
        } else if cfg!(windows) {
            HostOs::Windows
        } else {
            HostOs::Linux
        },
        home: env.get("HOME").filter(|v| !v.is_empty()).map(PathBuf::from),
        xdg_runtime_dir: env
            .get("XDG_RUNTIME_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        engine_socket: ctx
            .host
            .selection
            .engine
            .as_ref()
            .and_then(|e| e.endpoint.as_ref())
            .and_then(|e| e.strip_prefix("unix://"))
            .map(PathBuf::from),
    }
}

pub(super) fn spec_safety(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "spec_safety";
    let mut parts = Vec::new();
    for d in ctx.diags_in(Bucket::Safety) {
        parts.push(fail(ID, diag_line(d), "remove or narrow the mount"));
    }
    if let Err(ResolveError::Devcontainer { diagnostics, file }) = &ctx.plan {
        for d in diagnostics.iter().filter(|d| d.is_error() && d.code == "D006") {
            parts.push(fail(
                ID,
                format!("{file}: {}", d.message),
                format!(
                    "remove {} from devcontainer.json",
                    d.message.split_whitespace().next().unwrap_or("the setting")
                ),
            ));
        }
    }
    let facts = host_facts(ctx);
    let fs = RealFs;
    let driver = if ctx.cloud {
        DriverKind::Kubernetes
    } else if ctx.kind() == DriverKind::Podman {
        DriverKind::Podman
    } else {
        DriverKind::Docker
    };
    for (label, s) in &ctx.specs {
        if let Err(e) = iterion_driver::spec_safety::check_spec(s) {
            let field = match &e {
                iterion_driver::Error::InvalidSpec { field, .. } => field.clone(),
                _ => "the spec".into(),
            };
            parts.push(fail(ID, format!("{label}: {e}"), format!("fix {field}")));
        }
        let policy = MountPolicy {
            host: &facts,
            fs: &fs,
            driver,
            workspace_target: Some(&s.workspace_folder),
            workspace_host: Some(&ctx.inputs.work_dir),
            runtime_targets: &[],
        };
        for m in &s.mounts {
            if m.kind != MountKind::Bind || ctx.cloud {
                continue;
            }
            if let Err(e) = policy.check_mount(&m.to_string()) {
                parts.push(fail(ID, e.to_string(), "remove or narrow the mount"));
            }
        }
        if !ctx.cloud
            && let Err(e) = policy.check_workspace(&ctx.inputs.work_dir)
        {
            parts.push(fail(ID, e.to_string(), "run iterion from a project directory"));
        }
    }
    if !ctx.cloud && !ctx.specs.is_empty() {
        parts.extend(git_pointers(ctx, &facts, driver));
    }
    if parts.is_empty() && ctx.specs.is_empty() {
        return skip(
            ID,
            if ctx.plan.is_err() {
                "sandbox resolution failed (see sandbox_active)"
            } else {
                "no active sandbox scope"
            },
        );
    }
    let n: usize = ctx.specs.iter().map(|(_, s)| s.mounts.len()).sum();
    combine(
        ID,
        parts,
        pass(
            ID,
            format!(
                "{} spec(s), {n} mount(s), workspace and env entries pass",
                ctx.specs.len()
            ),
        ),
    )
}

/// The workspace's git pointers as the local driver verifies them before a start: a `.git` file, a
/// `commondir` or a protected hooks/config path that leads out of the workspace without being its genuine
/// repository, or a linked worktree's common dir that mount safety refuses. Each is a `spec_safety` failure,
/// since the run would be refused.
pub(super) fn git_pointers(ctx: &Ctx<'_>, facts: &HostFacts, driver: DriverKind) -> Vec<Check> {
    const ID: &str = "spec_safety";
    use iterion_driver_docker::mounts::{git_dirs, git_overlays};
    let ws = &ctx.inputs.work_dir;
    let refused = |r: iterion_driver_docker::mounts::GitRefusal| {
        vec![fail(ID, format!("the workspace git pointer {r}"), r.remedy)]
    };
    let dirs = match git_dirs(ws) {
        Err(r) => return refused(r),
        Ok(None) => return Vec::new(),
        Ok(Some(d)) => d,
    };
    if let Err(r) = git_overlays(ws, &dirs) {
        return refused(r);
    }
    let ws_canon = std::fs::canonicalize(ws).unwrap_or_else(|_| ws.clone());
    if dirs.outside && !dirs.common_dir.starts_with(&ws_canon) {
        let fs = RealFs;
        let policy = MountPolicy {
            host: facts,
            fs: &fs,
            driver,
            workspace_target: None,
            workspace_host: Some(ws),
            runtime_targets: &[],
        };
        let c = dirs.common_dir.to_string_lossy().into_owned();
        if let Err(reason) = policy.check_bind_source(&c) {
            return vec![fail(
                ID,
                format!("the git common directory of this linked worktree is refused: source {reason}"),
                "move the repository out of the sensitive location, or run from a plain clone",
            )];
        }
    }
    Vec::new()
}

pub(super) fn env_deny(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "env_deny";
    if ctx.specs.is_empty() {
        return skip(ID, "no active sandbox scope");
    }
    let mut denied: BTreeSet<String> = BTreeSet::new();
    let mut repo_names = 0usize;
    for (_, s) in &ctx.specs {
        for name in s.env_layers.repo.keys() {
            repo_names += 1;
            if let iterion_envdeny::Classification::Deny(r) = iterion_envdeny::classify(name) {
                denied.insert(format!("{name} ({})", r.code()));
            }
        }
        let total = s
            .env_layers
            .repo
            .iter()
            .chain(s.env_layers.workflow.iter())
            .chain(ctx.inputs.sandbox_env.iter().map(|(k, v)| (k, v)))
            .map(|(k, v)| (k.as_str(), v.as_str()));
        if let Err(e) = iterion_envdeny::validate_total(total) {
            return fail(ID, e.to_string(), "fix the named entry");
        }
    }
    if denied.is_empty() {
        let mut c = pass(
            ID,
            format!("the repository layer contributes no deny-class name ({repo_names} names)"),
        );
        c.details = json!({"removed": []});
        return c;
    }
    let list: Vec<String> = denied.into_iter().collect();
    let mut c = warn(
        ID,
        format!(
            "{} repository variable(s) will be removed: {}",
            list.len(),
            list.join(", ")
        ),
        "these variables will not reach the sandbox; set them in the workflow's sandbox.env if they are really needed",
    );
    c.details = json!({"removed": list});
    c
}

/// The secret bindings a run would make (the workflow's declarations and the model nodes' provider keys), and
/// for each bound host whether its requests are inspected (TLS) or allowed in plain HTTP.
pub(super) fn secrets(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "secrets";
    use iterion_runtime::lifecycle::secrets::{Delivery, GrantSource};
    let Some(w) = &ctx.workflow else {
        return skip(ID, "no workflow");
    };
    if ctx.specs.is_empty() {
        return skip(ID, "no active sandbox scope: secrets reach only a container");
    }
    let planned = iterion_runtime::lifecycle::secrets::planned(w, &ctx.inputs.env);
    if planned.is_empty() {
        return skip(
            ID,
            "the workflow declares no secret and no model node's key is set",
        );
    }
    let mut lines = Vec::new();
    let mut problems = Vec::new();
    let mut details = Vec::new();
    for p in &planned {
        let s = &p.info;
        let how = match s.delivery {
            Delivery::File => "a read-only file".to_owned(),
            Delivery::Env => s
                .hosts
                .iter()
                .map(|h| {
                    let via = if !iterion_netproxy::TLS_INSPECTION {
                        "not inspectable: this build has no TLS inspection"
                    } else if s.plain_http {
                        "TLS inspected, plain HTTP allowed"
                    } else {
                        "TLS inspected"
                    };
                    format!("{h} ({via})")
                })
                .collect::<Vec<_>>()
                .join(", "),
        };
        let who = match s.source {
            GrantSource::Provider => "provider key",
            _ => "declared",
        };
        lines.push(format!("{} → {how} [{who}]", s.name));
        if !p.value_set {
            problems.push(format!(
                "{} is not set on this host (iterion run --secret {} reads it)",
                s.name, s.name
            ));
        }
        if s.delivery == Delivery::File && !ctx.capabilities().host_binds {
            problems.push(format!("{}: this driver cannot deliver file secrets", s.name));
        }
        if s.delivery == Delivery::Env && !iterion_netproxy::TLS_INSPECTION {
            problems.push(format!("{}: this build cannot inspect TLS", s.name));
        }
        details.push(serde_json::to_value(p).unwrap_or_default());
    }
    let mut c = if problems.is_empty() {
        pass(ID, lines.join("; "))
    } else {
        warn(
            ID,
            format!("{}; {}", lines.join("; "), problems.join("; ")),
            "a declared secret is delivered only when the operator grants it: export NAME and pass --secret NAME",
        )
    };
    c.details = json!({"secrets": details});
    c
}

pub(super) async fn image_resolvable(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "image_resolvable";
    if ctx.specs.is_empty() {
        return skip(ID, "no active sandbox scope");
    }
    let images: BTreeSet<&str> = ctx.specs.iter().filter_map(|(_, s)| s.image.as_deref()).collect();
    if images.is_empty() {
        return skip(ID, "the spec builds its image (see build_context)");
    }
    if ctx.forced_noop() {
        return skip(ID, "the noop driver does not use images");
    }
    let never = ctx
        .inputs
        .env
        .get("ITERION_SANDBOX_PULL_POLICY")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("never"));
    let local_engine = !ctx.cloud && ctx.real_local_engine();
    let mut parts = Vec::new();
    for image in images {
        if !ctx.cloud && !local_engine {
            parts.push(warn(
                ID,
                format!("cannot verify {image} offline: no container engine answers on this host"),
                format!("cannot verify {image} offline"),
            ));
            continue;
        }
        if local_engine {
            match ctx.host.engine.image_present(image).await {
                Ok(true) => {
                    parts.push(pass(ID, format!("{image} present locally")));
                    continue;
                }
                Ok(false) if never => {
                    parts.push(fail(
                        ID,
                        format!("{image} is absent locally and ITERION_SANDBOX_PULL_POLICY=never"),
                        "pull the image first or change ITERION_SANDBOX_PULL_POLICY",
                    ));
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    parts.push(warn(
                        ID,
                        format!("cannot check {image}: {e}"),
                        format!("cannot verify {image} offline"),
                    ));
                    continue;
                }
            }
        }
        parts.push(match ctx.host.engine.registry(image).await {
            RegistryAnswer::Found => pass(ID, format!("{image} found in its registry")),
            RegistryAnswer::NotFound(m) => fail(
                ID,
                format!("{image}: {m}"),
                "the tag does not exist: check the reference",
            ),
            RegistryAnswer::Auth(m) => warn(
                ID,
                format!("{image}: {m}"),
                format!(
                    "cannot verify {image} without credentials; iterion run will use the engine's credentials"
                ),
            ),
            // where the image must be found: in the local engine, or (a cluster) in its registry only
            RegistryAnswer::Unreachable(m) if !local_engine => warn(
                ID,
                format!("{image}: its registry is unreachable from here, so the cluster's access to it is not verified: {m}"),
                format!("cannot verify {image} offline"),
            ),
            // iterion run would fail pulling it
            RegistryAnswer::Unreachable(m) => fail(
                ID,
                format!("{image} is not present locally and its registry is unreachable: {m}"),
                iterion_driver::image_pull_hint(image),
            ),
        });
    }
    combine(ID, parts, skip(ID, "no image"))
}

/// Total size of the build context after `.dockerignore`, stopping past `cap`.
pub(super) fn context_size(
    root: &Path,
    ignore: &iterion_driver_docker::imagebuild::DockerIgnore,
    cap: u64,
) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p
                .strip_prefix(root)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or_default();
            if ignore.excluded(&rel) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else {
                total += meta.len();
                if total > cap {
                    return total;
                }
            }
        }
    }
    total
}

pub(super) fn build_context(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "build_context";
    let builds: Vec<(&String, &iterion_spec::resolved::BuildSpec)> = ctx
        .specs
        .iter()
        .filter_map(|(l, s)| s.build.as_ref().map(|b| (l, b)))
        .collect();
    if builds.is_empty() {
        return skip(
            ID,
            if ctx.specs.is_empty() {
                "no active sandbox scope"
            } else {
                "the spec uses an image"
            },
        );
    }
    if ctx.cloud || ctx.kind() == DriverKind::Kubernetes {
        return fail(
            ID,
            "kubernetes: sandbox.build is local-only; build the image in CI and reference it with sandbox.image",
            "kubernetes: sandbox.build is local-only; build in CI and pin sandbox.image",
        );
    }
    if ctx.forced_noop() {
        return skip(ID, "the noop driver does not build images");
    }
    let root = iterion_host::repo_root(&ctx.inputs.work_dir);
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    let mut parts = Vec::new();
    for (label, b) in builds {
        let df = match std::fs::canonicalize(&b.dockerfile) {
            Ok(p) if p.is_file() => p,
            _ => {
                parts.push(fail(
                    ID,
                    format!("{label}: the Dockerfile {} does not exist", b.dockerfile),
                    format!("create {} or fix build.dockerfile", b.dockerfile),
                ));
                continue;
            }
        };
        let cx = match std::fs::canonicalize(&b.context) {
            Ok(p) if p.is_dir() => p,
            _ => {
                parts.push(fail(
                    ID,
                    format!("{label}: the build context {} is not a directory", b.context),
                    "fix build.context",
                ));
                continue;
            }
        };
        if let Some(bad) = [&df, &cx].into_iter().find(|p| !p.starts_with(&root)) {
            parts.push(fail(
                ID,
                format!("{label}: {} resolves outside {}", bad.display(), root.display()),
                "keep the Dockerfile and context inside the repository",
            ));
            continue;
        }
        let ignore_bytes = iterion_spec::source::read_regular(
            &cx.join(".dockerignore"),
            iterion_spec::source::MAX_FILE_BYTES,
        )
        .into_bytes()
        .unwrap_or_default();
        let ignore_text = String::from_utf8_lossy(&ignore_bytes);
        let ignore = iterion_driver_docker::imagebuild::DockerIgnore::parse(&ignore_text);
        const GIB: u64 = 1 << 30;
        let size = context_size(&cx, &ignore, GIB);
        if size > GIB {
            parts.push(warn(
                ID,
                format!("{label}: the build context exceeds 1 GiB"),
                "the build context is over 1 GiB; add a .dockerignore",
            ));
        } else {
            parts.push(pass(
                ID,
                format!(
                    "{label}: Dockerfile {} · context {} ({size} bytes)",
                    df.display(),
                    cx.display()
                ),
            ));
        }
    }
    combine(ID, parts, skip(ID, "no build"))
}

/// The OCI runtimes the engine offers and the one each container of the workflow gets (`sandbox.runtime`,
/// `--sandbox-runtime`, `ITERION_SANDBOX_OCI_RUNTIME`, the runtime floor); a runtime the engine lacks fails
/// here as the run would, before anything starts.
pub(super) async fn oci_runtime(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "oci_runtime";
    if ctx.plan.is_err() {
        return skip(ID, "sandbox resolution failed (see sandbox_active)");
    }
    if ctx.specs.is_empty() || !ctx.active() {
        return skip(ID, "no active sandbox scope");
    }
    let wanted: Vec<(&str, &iterion_spec::resolved::RuntimeChoice)> =
        ctx.specs.iter().map(|(l, s)| (l.as_str(), &s.runtime)).collect();
    let choice = |rt: &iterion_spec::resolved::RuntimeChoice, engine: Option<&str>| json!({"name": rt.name.as_str(), "source": rt.source, "engine": engine.unwrap_or("default")});
    if ctx.cloud {
        let mut lines = Vec::new();
        let mut details = serde_json::Map::new();
        for (label, rt) in &wanted {
            let class = iterion_driver_k8s::manifest::runtime_class(&rt.name);
            lines.push(format!(
                "{label}: {} ({}) -> runtimeClassName {}",
                rt.name,
                rt.source,
                class.as_deref().unwrap_or("(cluster default)")
            ));
            details.insert((*label).to_owned(), choice(rt, class.as_deref()));
        }
        let mut c = pass(ID, lines.join("; "));
        c.details = json!({"scopes": details});
        return c;
    }
    if ctx.forced_noop() || ctx.cross_host() {
        return skip(ID, "no engine on this host to ask");
    }
    let Some(offered) = ctx.host.engine.runtimes().await else {
        return skip(ID, "the engine did not list its runtimes (see engine_reachable)");
    };
    let podman = ctx.host.selection.kind == DriverKind::Podman;
    let mut lines = Vec::new();
    let mut details = serde_json::Map::new();
    let mut missing = Vec::new();
    for (label, rt) in &wanted {
        match iterion_driver_docker::engine::engine_runtime(podman, &offered.names, &rt.name) {
            Ok(engine) => {
                let shown = engine.clone().or_else(|| offered.default.clone());
                lines.push(format!(
                    "{label}: {} ({}) -> {}",
                    rt.name,
                    rt.source,
                    shown.as_deref().unwrap_or("the engine's default")
                ));
                details.insert((*label).to_owned(), choice(rt, engine.as_deref()));
            }
            Err(e) => missing.push((label.to_string(), e.to_string())),
        }
    }
    let offers = format!(
        "the engine offers {} (default {})",
        if offered.names.is_empty() {
            "no runtime list".to_owned()
        } else {
            offered.names.join(", ")
        },
        offered.default.as_deref().unwrap_or("unknown")
    );
    if let Some((label, why)) = missing.first() {
        return fail(ID, format!("{label}: {why}"), format!("{why}; {offers}"));
    }
    let mut c = pass(ID, format!("{}; {offers}", lines.join("; ")));
    c.details = json!({"offered": offered.names, "default": offered.default, "scopes": details});
    c
}
