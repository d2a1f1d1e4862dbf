//! What `serve` and `check` share: the policy and the resolver from the flags, usage errors, durations, and how a
//! failure is printed.

use super::args::PolicyArgs;
use crate::{DnsServerResolver, Resolver, SystemResolver};
use iterion_netpolicy::Policy;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Print every usage error on stderr; exit code 2.
pub(super) fn usage_errors(errors: &[String]) -> ExitCode {
    for e in errors {
        eprintln!("{e}");
    }
    ExitCode::from(2)
}

/// Compile the policy from the flags; every error is returned.
pub(super) fn compile_policy(p: &PolicyArgs) -> Result<Policy, Vec<String>> {
    let mut rules: Vec<String> = Vec::new();
    // An unreadable rules file is one problem among the others: the mode, presets and --rule values are still
    // checked so that one run lists everything to fix.
    let mut problems: Vec<String> = Vec::new();
    if let Some(path) = &p.rules_file {
        match std::fs::read_to_string(path) {
            Ok(text) => rules.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_owned),
            ),
            Err(e) => problems.push(format!("cannot read rules file {}: {e}", path.display())),
        }
    }
    rules.extend(p.rules.iter().cloned());
    for w in denylist_warnings(&p.mode, &rules) {
        eprintln!("warning: {w}");
    }
    let presets: Vec<&str> = p.presets.iter().map(String::as_str).collect();
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    match Policy::compile_str(&p.mode, &presets, &rules) {
        Ok(policy) if problems.is_empty() => Ok(policy),
        Ok(_) => Err(problems),
        Err(errors) => {
            problems.extend(errors.iter().map(ToString::to_string));
            Err(problems)
        }
    }
}

/// In denylist mode a rule without `!` allows what it matches (everything is allowed anyway): almost always a
/// rule meant to deny, so each one is named with the spelling that denies.
fn denylist_warnings(mode: &str, rules: &[String]) -> Vec<String> {
    if mode != "denylist" {
        return Vec::new();
    }
    rules
        .iter()
        .filter(|r| !r.starts_with('!'))
        .map(|r| {
            format!(
                "in denylist mode the rule '{r}' allows what it matches (everything not denied is allowed already); write '!{r}' to deny it"
            )
        })
        .collect()
}

/// The resolver of `--dns-server`, or the system resolver.
pub(super) fn resolver(p: &PolicyArgs) -> Result<Arc<dyn Resolver>, String> {
    let Some(server) = &p.dns_server else {
        return Ok(Arc::new(SystemResolver));
    };
    let addr = match server.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => match server.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, 53),
            Err(_) => return Err(format!("invalid --dns-server '{server}' (want IP or IP:PORT)")),
        },
    };
    DnsServerResolver::new(addr)
        .map(|r| Arc::new(r) as Arc<dyn Resolver>)
        .map_err(|e| e.to_string())
}

/// Duration syntax of the workflow language (`90s`, `1h30m`, `250ms`): the one parser of iterion-spec.
pub(super) fn parse_duration(s: &str) -> Option<Duration> {
    iterion_spec::duration::parse(s)
}

/// The chain of an error and its sources, joined by `: ` (the way failures are printed).
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// `what: error: sources…`.
pub(super) fn context(what: impl std::fmt::Display, e: &dyn std::error::Error) -> String {
    format!("{what}: {}", chain(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_dur(input: &str, expect: Option<f64>) {
        assert_eq!(parse_duration(input).map(|d| d.as_secs_f64()), expect, "{input}");
    }

    #[test]
    fn a_positive_rule_in_denylist_mode_is_named() {
        let rules = vec!["evil.example.org".to_string(), "!bad.example".to_string()];
        let w = denylist_warnings("denylist", &rules);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("'!evil.example.org'"), "{w:?}");
        assert!(denylist_warnings("allowlist", &rules).is_empty());
    }

    #[test]
    fn durations() {
        check_dur("90s", Some(90.0));
        check_dur("1h30m", Some(5400.0));
        check_dur("1.5h", Some(5400.0));
        check_dur("250ms", Some(0.25));
        check_dur("10", None);
        check_dur("", None);
        check_dur("5x", None);
    }

    #[test]
    fn failures_print_their_sources() {
        let e = crate::Error::Bind {
            listen: "127.0.0.1:1".into(),
            source: std::io::Error::other("in use"),
        };
        assert_eq!(
            context("cannot start the proxy", &e),
            "cannot start the proxy: cannot listen on 127.0.0.1:1: in use"
        );
    }
}
