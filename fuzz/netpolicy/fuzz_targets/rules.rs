//! Fuzz the rule compiler and the target parser.
//!
//! Input: UTF-8 text, one item per line. The first line picks the mode, the last line is the target, every line
//! in between is a rule. Besides "never panics", the target checks the invariants the proxy relies on:
//! canonical forms re-parse to themselves, and an allowed decision never carries a reason.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use iterion_netpolicy::{Host, Mode, Policy, Rule, SilentDeny, Target, classify};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines: Vec<&str> = text.split('\n').collect();
    let target_text = lines.pop().unwrap_or_default();
    let mode = match lines.first().map(|l| l.len() % 3) {
        Some(0) => Mode::Allowlist,
        Some(1) => Mode::Denylist,
        _ => Mode::Open,
    };

    for line in &lines {
        if let Ok(rule) = Rule::parse(line) {
            let again = Rule::parse(&rule.canonical()).unwrap_or_else(|e| {
                panic!("canonical {:?} of {line:?} does not parse: {e}", rule.canonical())
            });
            assert_eq!(
                (again.negated(), again.pattern(), again.port()),
                (rule.negated(), rule.pattern(), rule.port()),
                "{line:?}"
            );
        }
    }
    let _ = SilentDeny::new(&lines);
    let _ = Policy::compile_str(lines.first().copied().unwrap_or_default(), &["none"], &lines);

    if let Ok(host) = Host::parse_lenient(target_text) {
        assert_eq!(
            Host::parse_lenient(&host.to_string()),
            Ok(host),
            "{target_text:?}"
        );
    }
    let _ = Target::parse(target_text, None);
    let Ok(target) = Target::parse_lenient(target_text, Some(443)) else {
        return;
    };
    assert_eq!(
        Target::parse(&target.to_string(), None),
        Ok(target.clone()),
        "{target_text:?}"
    );

    let policy = match Policy::compile(mode, &[], &lines) {
        Ok(p) => p,
        Err(_) => match Policy::compile(mode, &["iterion-default"], &[]) {
            Ok(p) => p,
            Err(errors) => panic!("the default preset must compile: {errors:?}"),
        },
    };
    let answers = [
        IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34)),
        IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
        IpAddr::V6(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0xa00, 1)),
        IpAddr::V6(Ipv6Addr::new(0x2606, 0x4700, 0, 0, 0, 0, 0, 1)),
    ];
    for n in 0..=answers.len() {
        let d = policy.decide(&target, Some(&answers[..n]), &[]);
        assert_eq!(d.allowed, d.reason.is_none(), "{d:?}");
        if d.allowed && matches!(target.host, Host::Ip(_)) {
            // An allowed IP literal passed the SSRF guard, so it is global or explicitly allowed.
            let ip = d.addresses[0];
            let _ = classify(ip);
        }
    }
});
