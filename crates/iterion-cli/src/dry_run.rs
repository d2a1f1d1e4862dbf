//! `iterion run --dry-run`: prints what the runtime's dry run decided, for a person or as one JSON document.
use std::io::Write;

use iterion_runtime::lifecycle::dry_run::DryRun;
use iterion_spec::resolved::{NodePlacement, Origin, ResolvedSandbox, RunMode};

use crate::terminal::clean;

/// Prints `d` (JSON: the document plus `could_start`).
pub fn print(d: &DryRun, json: bool) {
    let mut out = std::io::stdout().lock();
    if json {
        let mut v = serde_json::to_value(d).unwrap_or_default();
        v["could_start"] = serde_json::Value::Bool(d.could_start());
        let _ = writeln!(out, "{v}");
        return;
    }
    for l in lines(d) {
        let _ = writeln!(out, "{}", clean(&l));
    }
}

fn row(label: &str, value: impl AsRef<str>) -> String {
    format!("  {:<14} {}", format!("{label}:"), value.as_ref())
}

fn more(value: impl AsRef<str>) -> String {
    format!("  {:<14} {}", "", value.as_ref())
}

/// The human report, one line an item.
fn lines(d: &DryRun) -> Vec<String> {
    let mut l = vec![format!("── Dry run: {} ──", d.workflow)];
    l.push(row("File", &d.file));
    l.push(row("Store", &d.store_dir));
    let work = if d.worktree {
        format!(
            "{} (a new git worktree of {}, created when the run starts)",
            d.work_dir,
            d.repo_root.as_deref().unwrap_or("?")
        )
    } else {
        d.work_dir.clone()
    };
    l.push(row("Work dir", work));
    l.push(row("Driver", &d.driver));
    if let Some(plan) = &d.plan {
        l.push(row(
            "Sandbox",
            format!("{} ({})", run_mode(plan.run_mode), plan.run_source),
        ));
        if let Some(r) = &plan.run {
            scope(&mut l, r, d.env_denied.get("run"), d.workspace_copied);
        }
        for f in &plan.floors {
            l.push(row(
                "Floor",
                format!("{} = {}: {} → {}", f.floor.as_str(), f.value, f.from, f.to),
            ));
        }
        let mut first = true;
        for (id, p) in &plan.nodes {
            let text = match p {
                NodePlacement::Host { reason, .. } => format!("{id} → host ({reason})"),
                NodePlacement::Run { network: None } => format!("{id} → run container"),
                NodePlacement::Run { network: Some(n) } => {
                    format!("{id} → run container, network {} of its own", n.mode.as_str())
                }
                NodePlacement::Own { key, sandbox } => format!(
                    "{id} → own container {} ({})",
                    &key[..key.len().min(12)],
                    image_of(sandbox)
                ),
            };
            l.push(if first { row("Nodes", text) } else { more(text) });
            first = false;
        }
        for w in &plan.warnings {
            l.push(row("Warning", w.render_header()));
        }
    }
    if let Some(s) = &d.skipped {
        l.push(row("Host fallback", format!("{s}; network policy NOT enforced")));
    }
    for (i, a) in d.attachments.iter().enumerate() {
        let text = format!("{} ← {} ({}, {} bytes)", a.name, a.source, a.mime, a.size);
        l.push(if i == 0 {
            row("Attachments", text)
        } else {
            more(text)
        });
    }
    for (i, s) in d.secrets.iter().enumerate() {
        let to = match s.delivery {
            iterion_runtime::lifecycle::secrets::Delivery::File => {
                format!("a read-only file at /run/iterion/secrets/{}", s.name)
            }
            iterion_runtime::lifecycle::secrets::Delivery::Env => {
                let plain = if s.plain_http { ", plain HTTP too" } else { "" };
                format!("a placeholder; the value only to {}{plain}", s.hosts.join(", "))
            }
        };
        let who = match s.source {
            iterion_runtime::lifecycle::secrets::GrantSource::Provider => "provider key",
            iterion_runtime::lifecycle::secrets::GrantSource::Workflow => "declared, granted",
            iterion_runtime::lifecycle::secrets::GrantSource::Operator => "--secret",
        };
        let text = format!("{} → {to} ({who})", s.name);
        l.push(if i == 0 { row("Secrets", text) } else { more(text) });
    }
    for name in &d.secrets_ungranted {
        l.push(row(
            "Warning",
            format!("the workflow asks for secret {name}, not granted (--secret {name}): the sandbox will not get it"),
        ));
    }
    match &d.refused {
        None => l.push(row("Verdict", "the run could start (nothing was created)")),
        Some(r) => {
            l.push(row(
                "Verdict",
                format!("REFUSED {}: {}", r.code.as_str(), r.error),
            ));
            if let Some(h) = &r.hint {
                l.push(row("Hint", h));
            }
        }
    }
    l
}

fn image_of(s: &ResolvedSandbox) -> String {
    match (&s.image, &s.build) {
        (Some(i), _) => format!("image {i}"),
        (None, Some(b)) => format!("build {}", b.dockerfile),
        _ => "no image".into(),
    }
}

/// The lines of one container scope: origin and image, host state, network with its rules, mounts, env.
fn scope(l: &mut Vec<String>, s: &ResolvedSandbox, denied: Option<&Vec<String>>, copied: bool) {
    let origin = match &s.devcontainer {
        Some(dc) => format!("devcontainer {} · {}", dc.path, image_of(s)),
        None => format!("{} · {}", origin(s.origin), image_of(s)),
    };
    l.push(row("Container", origin));
    l.push(row(
        "Host state",
        format!("{} ({})", s.host_state.as_str(), s.host_state_source),
    ));
    l.push(row(
        "Runtime",
        format!("{} ({})", s.runtime.name, s.runtime.source),
    ));
    let n = &s.network;
    let mut net = n.mode.as_str().to_owned();
    if let Some(p) = n.preset {
        net.push_str(&format!(" · preset {}", p.as_str()));
    }
    net.push_str(&format!(" · {} rule(s) ({})", n.rules.len(), n.source));
    if n.defaulted {
        net.push_str(" · defaulted for a repository-defined sandbox");
    }
    l.push(row("Network", net));
    for r in &n.rules {
        l.push(more(format!("rule {r}")));
    }
    let how = if copied {
        "copied in at start and back at the end"
    } else {
        "bind, read-write"
    };
    l.push(row(
        "Mounts",
        format!("workspace → {} ({how})", s.workspace_folder),
    ));
    for m in &s.mounts {
        l.push(more(m.to_string()));
    }
    if let Some(u) = &s.user {
        l.push(row("User", u));
    }
    if !s.post_create.is_empty() {
        l.push(row("Post-create", format!("{} command(s)", s.post_create.len())));
    }
    match denied {
        Some(d) if !d.is_empty() => l.push(row("Env denied", d.join(", "))),
        _ => l.push(row("Env denied", "none")),
    }
}

fn run_mode(m: RunMode) -> &'static str {
    match m {
        RunMode::None => "none",
        RunMode::Auto => "auto",
        RunMode::Inline => "inline",
    }
}

fn origin(o: Origin) -> &'static str {
    match o {
        Origin::Devcontainer => "devcontainer",
        Origin::Workflow => "workflow sandbox block",
        Origin::Node => "node sandbox block",
        Origin::DefaultImage => "default image",
    }
}
