//! Helpers shared by the crate's integration tests.

use iterion_netpolicy::{Pattern, Rule};

/// A rule as text for table tests: its error code, or `[negated ]<kind> <value>[ port <p>]`.
pub fn describe_rule(text: &str) -> String {
    match Rule::parse(text) {
        Err(e) => e.code().to_owned(),
        Ok(rule) => {
            let neg = if rule.negated() { "negated " } else { "" };
            let pattern = match rule.pattern() {
                Pattern::Exact(h) => format!("exact {h}"),
                Pattern::OneLabel(s) => format!("one-label {s}"),
                Pattern::MultiLabel(s) => format!("multi-label {s}"),
                Pattern::AnyName => "any-name".to_owned(),
                Pattern::Ip(ip) => format!("ip {ip}"),
                Pattern::Cidr(net) => format!("cidr {net}"),
                other => format!("{other:?}"),
            };
            let port = rule.port().map(|p| format!(" port {p}")).unwrap_or_default();
            format!("{neg}{pattern}{port}")
        }
    }
}

/// Assert what `input` parses to (see [`describe_rule`]).
#[track_caller]
pub fn check_rule(input: &str, expect: &str) {
    assert_eq!(describe_rule(input), expect, "rule {input:?}");
}
