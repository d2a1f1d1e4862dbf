//! `iterion sandbox prune`: the containers, networks and cached build images iterion labelled whose owner is
//! gone. The decision is the runtime's (`Runtime::prune`, the reaper's predicate); this module parses the
//! flags and renders the result.
//!
//! Exit codes: 0 the listing (dry run) or every removal succeeded; 1 no engine answers, it cannot list, or a
//! removal was refused or failed; 2 a usage error.

use std::collections::BTreeMap;
use std::process::ExitCode;

use iterion_runtime::api::{HostOptions, Runtime};
use iterion_runtime::lifecycle::reaper::{PruneAction, PruneScope, Pruned};
use serde_json::json;

use crate::terminal::clean;

/// Arguments of `iterion sandbox prune`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "A resource is removed when the iterion process that created it is gone and its run is over \
                  (the rule the reaper applies at the start of every run), cached build images included; a \
                  cached image a live run's sandbox uses is kept.\n\nEXAMPLES:\n  iterion sandbox prune            \
                  # list what would be removed, and why\n  iterion sandbox prune --yes\n  iterion sandbox prune \
                  --json | jq '.resources[].reason'\n\nEXIT CODES:\n  0 listed, or every removal succeeded; 1 no engine \
                  answers, or a removal was refused or failed; 2 a usage error"
)]
pub struct PruneArgs {
    /// Remove them (without it, only list what would be removed and why).
    #[arg(long)]
    pub yes: bool,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also the resources of other users' stores (by default only those of stores you own are removed).
    #[arg(long)]
    pub all_users: bool,
    /// Force a driver (default: `ITERION_SANDBOX_DRIVER`, else the engine that answers).
    #[arg(long, value_name = "DRIVER", value_parser = ["docker", "podman"])]
    pub sandbox_driver: Option<String>,
}

fn kind(p: &Pruned) -> &'static str {
    match p.resource.kind {
        iterion_driver::ResourceKind::Container => "container",
        iterion_driver::ResourceKind::Network => "network",
        iterion_driver::ResourceKind::Image => "image",
    }
}

fn short(id: &str) -> &str {
    let id = id.strip_prefix("sha256:").unwrap_or(id);
    &id[..id.len().min(12)]
}

/// The human listing: one line per resource, then a summary line.
pub fn render_human(list: &[Pruned], apply: bool) -> String {
    let mut out = String::new();
    for p in list {
        let name = if p.resource.name.is_empty() {
            "<untagged>"
        } else {
            &p.resource.name
        };
        out.push_str(&format!(
            "{:<13} {:<9} {} ({}): {}\n",
            p.action.as_str().replace('_', " "),
            kind(p),
            clean(name),
            short(&p.resource.id),
            clean(&p.reason)
        ));
    }
    let count = |a: PruneAction| list.iter().filter(|p| p.action == a).count();
    if apply {
        out.push_str(&format!(
            "{} removed, {} kept, {} failed\n",
            count(PruneAction::Removed),
            count(PruneAction::Kept),
            count(PruneAction::Failed)
        ));
    } else {
        out.push_str(&format!(
            "{} would be removed, {} kept; run with --yes to remove them\n",
            count(PruneAction::WouldRemove),
            count(PruneAction::Kept)
        ));
    }
    out
}

/// The JSON document: `{"dry_run", "resources": [{kind, id, name, action, reason, labels}]}`.
pub fn render_json(list: &[Pruned], apply: bool) -> serde_json::Value {
    let resources: Vec<serde_json::Value> = list
        .iter()
        .map(|p| {
            json!({
                "kind": kind(p),
                "id": p.resource.id,
                "name": p.resource.name,
                "action": p.action.as_str(),
                "reason": p.reason,
                "labels": p.resource.labels,
            })
        })
        .collect();
    json!({"dry_run": !apply, "resources": resources})
}

/// The reaper's predicate over the engine iterion selects (`driver` forces one), removing when `apply`, for
/// the stores `scope` names and, when given, only the resources of `runs`. `iterion sandbox prune` and the
/// engine side of `iterion runs rm` both go through it.
pub(crate) fn prune_engine(
    env: &BTreeMap<String, String>,
    driver: Option<String>,
    apply: bool,
    scope: PruneScope,
    runs: Option<&[String]>,
) -> Result<Vec<Pruned>, String> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| std::env::temp_dir());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    rt.block_on(async {
        let opts = HostOptions::new()
            .cwd(&cwd)
            .forced_driver(driver)
            .argv0(crate::argv0());
        let builder = Runtime::from_host(env, &opts).await.map_err(|e| e.to_string())?;
        let runtime = builder.build().map_err(|e| e.to_string())?;
        runtime.prune_runs(apply, scope, runs).await
    })
}

/// Runs `iterion sandbox prune`.
pub fn run(args: PruneArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let scope = if args.all_users {
        PruneScope::All
    } else {
        PruneScope::Mine
    };
    let result = prune_engine(env, args.sandbox_driver.clone(), args.yes, scope, None);
    let list = match result {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {}", clean(&e));
            return ExitCode::from(1);
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&render_json(&list, args.yes)).unwrap_or_default()
        );
    } else {
        print!("{}", render_human(&list, args.yes));
    }
    if list.iter().any(|p| p.action == PruneAction::Failed) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
