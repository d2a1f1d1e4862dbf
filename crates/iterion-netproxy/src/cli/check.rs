//! `check`: decide targets exactly like the live proxy, without connecting anywhere.

use super::args::CheckArgs;
use super::common::{chain, compile_policy, resolver, usage_errors};
use crate::{DecideOptions, Resolver};
use iterion_netpolicy::{Policy, Target};
use std::io::Write;
use std::process::ExitCode;

/// `check`: decide every target; exit 0 when all are allowed, 1 when one is denied, 2 on a usage error.
pub(super) fn check(a: CheckArgs) -> ExitCode {
    // Every flag error is listed (§16.2), the resolver's with the policy's.
    let (policy, resolver) = match (compile_policy(&a.policy), resolver(&a.policy)) {
        (Ok(p), Ok(r)) => (p, r),
        (policy, resolver) => {
            let mut errors = policy.err().unwrap_or_default();
            errors.extend(resolver.err());
            return usage_errors(&errors);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let mut all_allowed = true;
    let mut out = std::io::stdout().lock();
    for text in &a.targets {
        let line = runtime.block_on(check_one(&policy, text, &a, resolver.as_ref()));
        let (allowed, line) = match line {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        all_allowed &= allowed;
        if writeln!(out, "{line}").is_err() {
            return ExitCode::from(2);
        }
    }
    if all_allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Decide one target; returns whether it is allowed and the output line.
async fn check_one(
    policy: &Policy,
    text: &str,
    a: &CheckArgs,
    resolver: &dyn Resolver,
) -> Result<(bool, String), String> {
    let denied_line =
        |shown: &str, reason: &str, host: Option<(String, u16)>| -> Result<(bool, String), String> {
            if a.json {
                let mut m = serde_json::Map::new();
                m.insert("target".into(), text.into());
                if let Some((h, p)) = host {
                    m.insert("host".into(), h.into());
                    m.insert("port".into(), p.into());
                }
                m.insert("decision".into(), "deny".into());
                m.insert("reason".into(), reason.into());
                m.insert("rule".into(), "-".into());
                return Ok((false, serde_json::Value::Object(m).to_string()));
            }
            Ok((false, format!("deny {shown} reason=\"{reason}\" rule=\"-\"")))
        };
    let target = match Target::parse_lenient(text, Some(443)) {
        Ok(t) => t,
        Err(_) => return denied_line(&escape_controls(text), "invalid target", None),
    };
    let resolver = if a.no_resolve { None } else { Some(resolver) };
    let decision = match crate::decide(policy, &target, resolver, &DecideOptions::default()).await {
        Ok(d) => d,
        Err(e) => {
            // the name stage allowed it (or nothing would have been resolved): show by which rule
            let named = policy.decide_name(&target);
            let by = format!("allowed by {}", named.rule.as_str());
            let (ok, line) = denied_line(
                &target.to_string(),
                &e.to_string(),
                Some((target.host.to_string(), target.port)),
            )?;
            let line = if a.json {
                let mut v: serde_json::Value = serde_json::from_str(&line).map_err(|e| chain(&e))?;
                v["policy"] = serde_json::Value::from(by);
                v.to_string()
            } else {
                format!("{line} policy=\"{by}\"")
            };
            return Ok((ok, line));
        }
    };
    if !a.json {
        return Ok((decision.allowed, decision.to_string()));
    }
    let serde_json::Value::Object(fields) = serde_json::to_value(&decision).map_err(|e| chain(&e))? else {
        return Err("decision did not serialise to an object".to_owned());
    };
    let mut m = serde_json::Map::new();
    m.insert("target".into(), text.into());
    m.extend(fields);
    Ok((decision.allowed, serde_json::Value::Object(m).to_string()))
}

/// An invalid target as given, with control characters (and the Unicode line and paragraph separators) escaped:
/// a target must not be able to start a line of its own (one line per target, §16.2).
fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
