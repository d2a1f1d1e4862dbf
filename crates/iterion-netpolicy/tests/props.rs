//! Properties: the parsers never panic, canonicalisation is idempotent, canonical rules re-parse to themselves.

use iterion_netpolicy::{Host, Mode, Policy, Rule, Target, classify};
use proptest::prelude::*;

/// Text shaped like rules and authorities: host-ish characters, wildcards, brackets, digits, odd separators and a
/// few non-ASCII characters that IDNA maps (full-width digits and letters, the ideographic full stop, ß).
fn hostish() -> impl Strategy<Value = String> {
    proptest::string::string_regex(
        r"[!\[\]*.:/%@a-zA-Z0-9_\-xX \t]{0,24}|[a-z0-9.\-_]{1,20}(:[0-9]{1,6})?|[0-9a-fx.]{1,20}|\[[0-9a-f:.%]{0,20}\](:[0-9]{0,5})?|[a-zü１２ＡＢ。ß.\-]{1,16}",
    )
    .expect("valid regex")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn rule_parse_never_panics(text in any::<String>()) {
        let _ = Rule::parse(&text);
    }

    #[test]
    fn target_parse_never_panics(text in any::<String>()) {
        let _ = Target::parse(&text, Some(443));
        let _ = Target::parse_lenient(&text, None);
    }

    #[test]
    fn target_canonicalisation_is_idempotent(text in hostish()) {
        if let Ok(target) = Target::parse_lenient(&text, Some(443)) {
            let again = Target::parse(&target.to_string(), None);
            prop_assert_eq!(again, Ok(target));
        }
    }

    #[test]
    fn host_canonicalisation_is_idempotent(text in hostish()) {
        if let Ok(host) = Host::parse_lenient(&text) {
            prop_assert_eq!(Host::parse_lenient(&host.to_string()), Ok(host));
        }
    }

    #[test]
    fn canonical_rules_reparse_to_the_same_rule(text in hostish()) {
        if let Ok(rule) = Rule::parse(&text) {
            let again = Rule::parse(&rule.canonical());
            prop_assert!(again.is_ok(), "canonical {:?} of {:?} does not parse: {:?}", rule.canonical(), text, again);
            let again = again.expect("checked above");
            prop_assert_eq!(
                (again.negated(), again.pattern(), again.port()),
                (rule.negated(), rule.pattern(), rule.port())
            );
        }
    }

    #[test]
    fn a_rule_matches_its_own_canonical_host(text in hostish()) {
        // An exact or IP rule allows the target spelled like the rule, whatever the spelling.
        if let Ok(rule) = Rule::parse(&text)
            && !rule.negated()
            && let Ok(target) = Target::parse_lenient(rule.pattern().to_string().trim_start_matches("**."), Some(rule.port().unwrap_or(443)))
            && matches!(rule.pattern(), iterion_netpolicy::Pattern::Exact(_) | iterion_netpolicy::Pattern::Ip(_))
        {
            prop_assert!(rule.matches(&target), "{:?} does not match {}", text, target);
        }
    }

    #[test]
    fn compile_and_decide_never_panic(rules in proptest::collection::vec(hostish(), 0..6), target in hostish(),
                                      answer in proptest::collection::vec(any::<std::net::IpAddr>(), 0..3)) {
        let refs: Vec<&str> = rules.iter().map(String::as_str).collect();
        if let Ok(policy) = Policy::compile(Mode::Denylist, &["iterion-default"], &refs)
            && let Ok(target) = Target::parse_lenient(&target, Some(443))
        {
            let d = policy.decide(&target, Some(&answer), &[]);
            prop_assert!(!d.allowed || d.reason.is_none());
        }
    }

    #[test]
    fn classify_is_total_and_mapped_addresses_agree(v4 in any::<std::net::Ipv4Addr>()) {
        let mapped = std::net::IpAddr::V6(v4.to_ipv6_mapped());
        prop_assert_eq!(classify(mapped), classify(std::net::IpAddr::V4(v4)));
    }
}
