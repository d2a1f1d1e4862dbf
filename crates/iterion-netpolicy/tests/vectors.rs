//! The test vectors of spec 04 §4.3–4.4 and §18.1–18.5, §18.9 (decision parts), as table tests.

mod common;

use common::check_rule;
use std::net::{IpAddr, SocketAddr};

use iterion_netpolicy::{
    AddressClass, Decision, Mode, Policy, PolicyError, Rule, SilentDeny, Target, Warning, classify, preset,
};

// ---------------------------------------------------------------------------------------------------------------
// §18.1 rule parsing

#[test]
#[rustfmt::skip]
fn rule_parsing_18_1() {
    check_rule("api.anthropic.com", "exact api.anthropic.com");
    check_rule("API.Anthropic.COM", "exact api.anthropic.com");
    check_rule("github.com.", "exact github.com");
    check_rule("bücher.example", "exact xn--bcher-kva.example");
    check_rule("*.example.com", "one-label example.com");
    check_rule("**.example.com", "multi-label example.com");
    check_rule("**", "any-name");
    check_rule("*", "E_BARE_STAR");
    check_rule("*.", "E_WILDCARD_SUFFIX");
    check_rule("**.", "E_WILDCARD_SUFFIX");
    check_rule("a*b.com", "E_WILDCARD");
    check_rule("*github.com", "E_WILDCARD");
    check_rule("github.com.*", "E_WILDCARD");
    check_rule("***.x.com", "E_WILDCARD");
    check_rule("*.*.com", "E_WILDCARD");
    check_rule("**.*.com", "E_WILDCARD");
    check_rule("!", "E_NEGATION");
    check_rule("! ", "E_NEGATION");
    check_rule("!  github.com", "negated exact github.com");
    check_rule("", "E_EMPTY");
    check_rule("1.2.3.4", "ip 1.2.3.4");
    check_rule("127.1", "ip 127.0.0.1");
    check_rule("2130706433", "ip 127.0.0.1");
    check_rule("0x7f.0.0.1", "ip 127.0.0.1");
    check_rule("256.1.1.1", "E_IPV4");
    check_rule("example.123", "E_IPV4");
    check_rule("2001:db8::1", "ip 2001:db8::1");
    check_rule("[2001:db8::1]", "ip 2001:db8::1");
    check_rule("[2001:db8::1]:443", "ip 2001:db8::1 port 443");
    check_rule("::ffff:10.0.0.1", "ip 10.0.0.1");
    check_rule("fe80::1%eth0", "E_SYNTAX");
    check_rule("10.0.0.0/8", "cidr 10.0.0.0/8");
    check_rule("10.0.0.1/8", "E_CIDR");
    check_rule("10.0.0.0/99", "E_CIDR");
    check_rule("10.0.0.0/08", "E_CIDR");
    check_rule("010.0.0.0/8", "E_CIDR");
    check_rule("fd00::/8", "cidr fd00::/8");
    check_rule("[fd00::/8]:5432", "cidr fd00::/8 port 5432");
    check_rule("10.0.0.0/8:5432", "cidr 10.0.0.0/8 port 5432");
    check_rule("github.com:22", "exact github.com port 22");
    check_rule("github.com:0", "E_PORT");
    check_rule("github.com:65536", "E_PORT");
    check_rule("github.com:0443", "E_PORT");
    check_rule("github.com:", "E_PORT");
    check_rule("https://github.com", "E_NOT_A_HOST");
    check_rule("github.com/path", "E_NOT_A_HOST");
    check_rule("user@github.com", "E_NOT_A_HOST");
    check_rule("git hub.com", "E_NOT_A_HOST");
    check_rule("a..b.com", "E_HOST");
    check_rule("*.github.com:443", "one-label github.com port 443");
}

#[test]
#[rustfmt::skip]
fn rule_parsing_more_forms() {
    check_rule("  github.com  ", "exact github.com");
    check_rule("0177.0.0.1", "ip 127.0.0.1");
    check_rule("0xa9fea9fe", "ip 169.254.169.254");
    check_rule("!10.0.0.0/8", "negated cidr 10.0.0.0/8");
    check_rule("![2001:db8::1]:443", "negated ip 2001:db8::1 port 443");
    check_rule("::ffff:10.0.0.0/104", "cidr 10.0.0.0/8");
    check_rule("10.0.0.0/33", "E_CIDR");
    check_rule("fd00::/129", "E_CIDR");
    check_rule("fd00::1/8", "E_CIDR");
    check_rule("[fe80::1%eth0]:443", "E_SYNTAX");
    check_rule("[2001:db8::1]x", "E_SYNTAX");
    check_rule("[1.2.3.4]", "E_SYNTAX");
    check_rule("[2001:db8::1", "E_SYNTAX");
    check_rule("x.com?q", "E_NOT_A_HOST");
    check_rule("x.com#f", "E_NOT_A_HOST");
    check_rule("x%41.com", "E_NOT_A_HOST");
    check_rule("exa_mple.com", "exact exa_mple.com");
    check_rule("-bad-.com", "exact -bad-.com");
    check_rule("github.com..", "E_HOST");
    check_rule("github.com:+22", "E_PORT");
    check_rule("1.2.3.4.5", "E_IPV4");
    check_rule("08.0.0.1", "E_IPV4");
    // Regression (found by proptest): a trailing dot does not hide a number.
    check_rule("0.", "ip 0.0.0.0");
    check_rule("127.1.", "ip 127.0.0.1");
    check_rule("example.123.", "E_IPV4");
}

#[test]
fn rule_error_messages_are_c097_reasons() {
    let reason = |text: &str| Rule::parse(text).map(|_| ()).unwrap_err().to_string();
    assert_eq!(reason(""), "empty rule");
    assert_eq!(reason("!"), "'!' must be followed by a pattern");
    assert_eq!(reason("https://x.com"), "a rule is a host pattern, not a URL");
    assert_eq!(reason("x.com:0"), "port must be 1–65535");
    assert_eq!(reason("10.0.0.1/8"), "host bits set; did you mean 10.0.0.0/8?");
    assert_eq!(reason("256.1.1.1"), "not a valid IPv4 address");
    assert_eq!(reason("*"), "a bare '*' is not allowed; use ** for any host");
    assert_eq!(
        reason("a*b.com"),
        "a wildcard must be the whole leftmost label: *.example.com or **.example.com"
    );
    assert_eq!(reason("*."), "a wildcard needs a domain after it");
}

#[test]
fn canonical_rule_text_reparses_to_the_same_rule() {
    for text in [
        "GitHub.com.",
        "!*.Example.com:443",
        "**.b.c",
        "**",
        "127.1",
        "[2001:db8:0::1]:443",
        "fd00::/8",
        "[fd00::/8]:5432",
        "10.0.0.0/8:5432",
    ] {
        let rule = Rule::parse(text).expect(text);
        let again = Rule::parse(&rule.canonical()).expect("canonical text parses");
        assert_eq!(
            (again.negated(), again.pattern(), again.port()),
            (rule.negated(), rule.pattern(), rule.port()),
            "{text}"
        );
    }
}

// ---------------------------------------------------------------------------------------------------------------
// §4.3 / §4.4 target canonicalisation

fn describe_target(text: &str, default_port: Option<u16>) -> String {
    match Target::parse(text, default_port) {
        Ok(t) => t.to_string(),
        Err(e) => e.to_string(),
    }
}

#[track_caller]
fn check_target(input: &str, expect: &str) {
    assert_eq!(describe_target(input, Some(443)), expect, "target {input:?}");
}

#[track_caller]
fn check_connect(input: &str, expect: &str) {
    assert_eq!(describe_target(input, None), expect, "CONNECT target {input:?}");
}

#[test]
#[rustfmt::skip]
fn target_canonicalisation_4_4() {
    check_connect("github.com:443", "github.com:443");
    check_connect("GitHub.COM:443", "github.com:443");
    check_connect("github.com.:443", "github.com:443");
    check_connect("github.com..:443", "invalid host");
    check_connect("bücher.example:443", "xn--bcher-kva.example:443");
    check_connect("xn--bcher-kva.example:443", "xn--bcher-kva.example:443");
    check_connect("[::1]:443", "[::1]:443");
    check_connect("[::ffff:127.0.0.1]:80", "127.0.0.1:80");
    check_connect("[::ffff:a9fe:a9fe]:80", "169.254.169.254:80");
    check_connect("[fe80::1%25eth0]:443", "invalid host");
    check_connect("127.1:80", "127.0.0.1:80");
    check_connect("0x7f.0.0.1:80", "127.0.0.1:80");
    check_connect("2130706433:80", "127.0.0.1:80");
    check_connect("example.com:99999", "invalid port");
    check_connect("example.com:0443", "invalid port");
    check_connect("example.com", "port required");
    check_connect(":443", "invalid host");
    check_connect("user@example.com:443", "invalid host");
    check_connect("exa_mple.com:443", "exa_mple.com:443");
    check_connect("-bad-.com:443", "-bad-.com:443");
    let name_254 = format!(
        "{}.{}.{}.{}.com",
        "a".repeat(62),
        "b".repeat(62),
        "c".repeat(62),
        "d".repeat(61)
    );
    assert_eq!(name_254.len(), 254);
    check_connect(&format!("{name_254}:443"), "invalid host");
    let name_253 = &name_254[1..];
    check_connect(&format!("{name_253}:443"), &format!("{name_253}:443"));
}

#[test]
#[rustfmt::skip]
fn target_parsing_more() {
    check_target("example.com", "example.com:443");
    check_target("[2001:db8::1]", "[2001:db8::1]:443");
    check_target("[2001:db8:0::1]:8443", "[2001:db8::1]:8443");
    check_target("2001:db8::1", "invalid host");
    check_target("exa mple.com", "invalid target");
    check_target("example.com\t", "invalid target");
    check_target("[::1]x", "invalid target");
    check_target("[::1", "invalid target");
    check_target("a.com:-1", "invalid port");
    check_target("a.com:", "invalid port");
    check_target("*.github.com", "invalid host");
    check_target("a%2e.com", "invalid host");
    check_target("a..b", "invalid host");
    check_target(".", "invalid host");
    check_target("example.123", "invalid host");
    check_target("127.1.:80", "127.0.0.1:80");
    check_target("0.", "0.0.0.0:443");
    check_target("1.2.3.4.5", "invalid host");
    check_target(&format!("{}.com", "a".repeat(64)), "invalid host");
    // Full-width digits map to ASCII digits under IDNA: the result is an IPv4 literal, not a name.
    check_target("１２７.０.０.１", "127.0.0.1:443");
    check_target("ＧＩＴＨＵＢ.com", "github.com:443");
}

#[test]
fn lenient_targets_accept_bare_ipv6() {
    let lenient = |t: &str| match Target::parse_lenient(t, Some(443)) {
        Ok(t) => t.to_string(),
        Err(e) => e.to_string(),
    };
    assert_eq!(lenient("64:ff9b::a9fe:a9fe"), "[64:ff9b::a9fe:a9fe]:443");
    assert_eq!(lenient("::ffff:169.254.169.254"), "169.254.169.254:443");
    assert_eq!(lenient("fe80::1%eth0"), "invalid host");
    assert_eq!(lenient("github.com"), "github.com:443");
}

#[track_caller]
fn check_ipv4(spelling: &str, expect: Option<&str>) {
    let got = iterion_netpolicy::host::parse_ipv4_any(spelling).map(|a| a.to_string());
    assert_eq!(got.as_deref(), expect, "IPv4 spelling {spelling:?}");
}

#[test]
#[rustfmt::skip]
fn ipv4_spellings_4_3() {
    for s in [
        "127.1",
        "127.0.1",
        "2130706433",
        "0x7f000001",
        "0x7f.0.0.1",
        "0177.0.0.1",
    ] {
        check_ipv4(s, Some("127.0.0.1"));
    }
    for s in ["2852039166", "0xa9fea9fe", "0251.0376.0251.0376"] {
        check_ipv4(s, Some("169.254.169.254"));
    }
    for s in ["256.1.1.1", "1.2.3.4.5", "08.0.0.1", "0x1g.0.0.1"] {
        check_ipv4(s, None);
    }
    check_ipv4("1.2.65535", Some("1.2.255.255"));
    check_ipv4("1.2.65536", None);
    check_ipv4("1.16777215", Some("1.255.255.255"));
    check_ipv4("1.16777216", None);
    check_ipv4("4294967295", Some("255.255.255.255"));
    check_ipv4("4294967296", None);
    check_ipv4("0x00000000000000000001", Some("0.0.0.1"));
    check_ipv4("99999999999999999999999", None);
    check_ipv4("1..2", None);
}

// ---------------------------------------------------------------------------------------------------------------
// §18.2 compilation

#[track_caller]
fn check_compile(mode: &str, presets: &[&str], rules: &[&str], expect: &str) {
    let got = match Policy::compile_str(mode, presets, rules) {
        Ok(p) => {
            let warnings: Vec<String> = p.warnings().iter().map(Warning::to_string).collect();
            format!("{} rules; warnings {warnings:?}", p.rules().len())
        }
        Err(errors) => errors
            .iter()
            .map(|e| match e {
                PolicyError::Rule { index, .. } => format!("{} #{index}: {e}", e.code()),
                _ => format!("{}: {e}", e.code()),
            })
            .collect::<Vec<_>>()
            .join("; "),
    };
    assert_eq!(got, expect, "mode {mode}, presets {presets:?}, rules {rules:?}");
}

#[test]
#[rustfmt::skip]
fn compilation_18_2() {
    check_compile("nope", &[], &[], "C095: invalid network mode 'nope' (want allowlist, denylist or open)");
    check_compile("allowlist", &["iterion-default"], &[], "40 rules; warnings []");
    check_compile("allowlist", &["none"], &[], "0 rules; warnings []");
    check_compile("allowlist", &["iterion-defualt"], &[], "C096: unknown network preset 'iterion-defualt' (want iterion-default or none)");
    check_compile("allowlist", &[], &["a*b.com", "10.0.0.0/99", "ok.com"], "C097 #0: invalid network rule 'a*b.com': a wildcard must be the whole leftmost label: *.example.com or **.example.com; C097 #1: invalid network rule '10.0.0.0/99': the prefix length of an IPv4 range is at most 32");
    check_compile("allowlist", &[], &["**"], "1 rules; warnings [\"network rule '**' allows every host name\"]");
    check_compile("denylist", &[], &["github.com"], "1 rules; warnings [\"denylist without a ! rule allows everything\"]");
}

#[test]
#[rustfmt::skip]
fn compilation_more() {
    check_compile("bogus", &["nope"], &["*"], "C095: invalid network mode 'bogus' (want allowlist, denylist or open); C096: unknown network preset 'nope' (want iterion-default or none); C097 #0: invalid network rule '*': a bare '*' is not allowed; use ** for any host");
    check_compile("open", &[], &["a.com"], "1 rules; warnings [\"network rules have no effect when mode is open\"]");
    check_compile("allowlist", &["iterion-default"], &["GitHub.com."], "41 rules; warnings [\"network rule 'GitHub.com.' appears twice\"]");
    check_compile("denylist", &[], &["!a.com", "a.com"], "2 rules; warnings []");
    check_compile("allowlist", &["none", "iterion-default"], &["!**"], "41 rules; warnings []");
}

#[test]
fn dsl_rule_errors_01_s12() {
    // 01 §11 vector S12: each of these is a C097.
    let rules = [
        "a*b.com",
        "github.com.*",
        "*github.com",
        "***.x.com",
        "*.",
        "**.",
        "*.*.com",
        "*",
        "!",
        "10.0.0.0/99",
        "example.com:0",
        "example.com:70000",
        "https://x.com",
        "x.com/path",
    ];
    let errors = Policy::compile(A, &[], &rules).map(|_| ()).unwrap_err();
    let indices: Vec<(usize, &str)> = errors
        .iter()
        .map(|e| match e {
            PolicyError::Rule { index, .. } => (*index, e.code()),
            _ => (usize::MAX, e.code()),
        })
        .collect();
    let want: Vec<(usize, &str)> = (0..rules.len()).map(|i| (i, "C097")).collect();
    assert_eq!(indices, want);
}

#[test]
fn every_preset_rule_parses() {
    for name in iterion_netpolicy::PRESET_NAMES {
        for rule in preset(name).expect("known preset") {
            assert!(Rule::parse(rule).is_ok(), "preset {name} rule {rule}");
        }
    }
    assert_eq!(preset("iterion-default").map(<[_]>::len), Some(40));
    assert_eq!(preset("none").map(<[_]>::len), Some(0));
    assert_eq!(preset("iterion-defaults"), None);
}

#[test]
fn the_default_preset_compiles_to_this_list() {
    let policy = Policy::compile(Mode::Allowlist, &["iterion-default"], &[]).expect("compiles");
    let canonical: Vec<String> = policy.rules().iter().map(Rule::canonical).collect();
    insta::assert_json_snapshot!(canonical);
}

// ---------------------------------------------------------------------------------------------------------------
// §18.3 name-stage decisions

const A: Mode = Mode::Allowlist;
const D: Mode = Mode::Denylist;
const O: Mode = Mode::Open;

fn name_outcome(mode: Mode, presets: &[&str], rules: &[&str], target: &str) -> String {
    let policy = Policy::compile(mode, presets, rules).expect("policy compiles");
    let target = match Target::parse(target, Some(443)) {
        Ok(t) => t,
        Err(e) => return format!("invalid target ({e})"),
    };
    let d = policy.decide_name(&target);
    if d.allowed {
        "allow".to_owned()
    } else {
        format!("deny ({})", d.rule)
    }
}

#[track_caller]
fn check_name(mode: Mode, rules: &[&str], target: &str, expect: &str) {
    assert_eq!(
        name_outcome(mode, &[], rules, target),
        expect,
        "{mode} {rules:?} {target}"
    );
}

#[track_caller]
fn check_preset_name(rules: &[&str], target: &str, expect: &str) {
    assert_eq!(
        name_outcome(A, &["iterion-default"], rules, target),
        expect,
        "preset + {rules:?} {target}"
    );
}

#[test]
#[rustfmt::skip]
fn name_stage_18_3() {
    let two = &["api.anthropic.com", "**.github.com"];
    check_name(A, two, "api.anthropic.com", "allow"); // N1
    check_name(A, two, "github.com", "allow"); // N2
    check_name(A, two, "raw.github.com", "allow"); // N3
    check_name(A, two, "a.b.github.com", "allow"); // N4
    check_name(A, two, "evil.site", "deny (no rule matched)"); // N5
    check_name(A, &["*.example.com"], "foo.example.com", "allow"); // N6
    check_name(A, &["*.example.com"], "a.b.example.com", "deny (no rule matched)"); // N7
    check_name(A, &["*.example.com"], "example.com", "deny (no rule matched)"); // N8
    check_name(A, &["**.example.com"], "example.com", "allow"); // N9
    check_name(A, &["**.example.com"], "foo.evil.site", "deny (no rule matched)"); // N10
    check_name(A, &["github.com", "!github.com"], "github.com", "deny (!github.com)"); // N11
    check_name(A, &["!github.com", "github.com"], "github.com", "allow"); // N12
    check_name(A, &["**.github.com", "!gist.github.com"], "gist.github.com", "deny (!gist.github.com)"); // N13
    check_name(A, &["**.github.com", "!gist.github.com"], "api.github.com", "allow"); // N14
    check_name(A, &["!gist.github.com", "**.github.com"], "gist.github.com", "allow"); // N15
    check_name(D, &["!**.evil.site"], "evil.site", "deny (!**.evil.site)"); // N16
    check_name(D, &["!**.evil.site"], "sub.evil.site", "deny (!**.evil.site)"); // N17
    check_name(D, &["!**.evil.site"], "github.com", "allow"); // N18
    check_name(D, &["github.com"], "github.com", "allow"); // N19
    check_name(D, &["!**.corp.example", "ci.corp.example"], "ci.corp.example", "allow"); // N20
    check_name(D, &["!**.corp.example", "ci.corp.example"], "db.corp.example", "deny (!**.corp.example)"); // N21
    check_name(O, &[], "evil.site", "allow"); // N22
    check_name(O, &["!**"], "evil.site", "deny (!**)"); // N23
    check_name(A, &["github.com"], "GitHub.COM.", "allow"); // N24
    check_name(A, &["github.com."], "github.com", "allow"); // N25
    check_name(A, &["bücher.example"], "xn--bcher-kva.example", "allow"); // N26
    check_name(A, &["xn--bcher-kva.example"], "bücher.example", "allow"); // N27
    check_name(A, &["github.com:22"], "github.com:22", "allow"); // N28
    check_name(A, &["github.com:22"], "github.com:443", "deny (no rule matched)"); // N29
    check_name(A, &["*.github.com:443"], "api.github.com:8443", "deny (no rule matched)"); // N30
    check_name(A, &["github.com"], "1.2.3.4", "deny (no rule matched)"); // N31
    check_name(A, &["1.2.3.4"], "1.2.3.4", "allow"); // N32
    check_name(A, &["**"], "1.2.3.4", "deny (no rule matched)"); // N33
    check_name(A, &["**"], "anything.example", "allow"); // N34
    check_name(A, &["0.0.0.0/0"], "1.2.3.4", "allow"); // N35
    check_name(A, &["10.0.0.0/8"], "10.1.2.3", "allow"); // N36
    check_name(D, &["!10.0.0.0/8"], "10.0.0.1", "deny (!10.0.0.0/8)"); // N37
    check_name(D, &["!10.0.0.0/8"], "11.0.0.0", "allow"); // N38
    check_name(A, &["127.0.0.1"], "127.1", "allow"); // N39
    check_name(A, &["**"], "2130706433", "deny (no rule matched)"); // N40
    check_name(A, &["*.github.com"], "*.github.com", "invalid target (invalid host)"); // N41
    check_name(A, &["2001:db8::1"], "[2001:db8:0::1]", "allow"); // N42
    check_name(A, &["fd00::/8"], "[fd12::1]", "allow"); // N43
    check_name(A, &["::ffff:1.2.3.4"], "1.2.3.4", "allow"); // N44
    check_name(A, &["1.2.3.4"], "[::ffff:1.2.3.4]", "allow"); // N45
    check_name(A, &[], "github.com", "deny (no rule matched)"); // N46
    for host in [
        "api.anthropic.com",
        "api.openai.com",
        "registry.npmjs.org",
        "github.com",
        "raw.github.com",
        "pypi.org",
        "proxy.golang.org",
        "cache.nixos.org",
        "channels.nixos.org",
        "nix-community.cachix.org",
        "get.jetify.com",
        "devbox.sh",
        "docs.devbox.sh",
        "api.moonshot.ai",
        "api.z.ai",
        "raw.githubusercontent.com",
    ] {
        check_preset_name(&[], host, "allow"); // N47
    }
    for host in [
        "evil.site",
        "gist.githubusercontent.com",
        "bedrock-runtime.us-east-1.amazonaws.com",
    ] {
        check_preset_name(&[], host, "deny (no rule matched)"); // N48
    }
    check_preset_name(&["!api.openai.com"], "api.openai.com", "deny (!api.openai.com)"); // N49
    check_name(A, &["**.github.com"], "github.com.evil.site", "deny (no rule matched)"); // N50
    check_name(A, &["**.github.com"], "evilgithub.com", "deny (no rule matched)"); // N51
}

#[test]
#[rustfmt::skip]
fn name_stage_more() {
    check_name(D, &[], "github.com", "allow");
    check_name(A, &["*.example.com"], "xexample.com", "deny (no rule matched)");
    check_name(A, &["*.example.com"], ".example.com", "invalid target (invalid host)");
    check_name(A, &["**"], "[2001:db8::1]", "deny (no rule matched)");
    check_name(A, &["::/0"], "[2001:db8::1]", "allow");
    check_name(A, &["0.0.0.0/0"], "[2001:db8::1]", "deny (no rule matched)");
    check_name(A, &["10.0.0.0/8:5432"], "10.0.0.5:5432", "allow");
    check_name(A, &["10.0.0.0/8:5432"], "10.0.0.5:22", "deny (no rule matched)");
    check_name(A, &["[fd00::/8]:5432"], "[fd00::1]:5432", "allow");
    check_name(A, &["**", "!*.evil.site"], "a.evil.site", "deny (!*.evil.site)");
    check_name(A, &["**", "!*.evil.site"], "evil.site", "allow");
}

#[test]
fn name_decision_names_the_rule_index() {
    let policy = Policy::compile(A, &["iterion-default"], &["!api.openai.com"]).expect("compiles");
    let target = Target::parse("api.openai.com:443", None).expect("target");
    let d = policy.decide_name(&target);
    assert_eq!(
        d.rule,
        iterion_netpolicy::DecidingRule::Rule {
            index: 40,
            text: "!api.openai.com".to_owned()
        }
    );
    assert_eq!(d.reason, Some(iterion_netpolicy::Reason::PolicyDenial));
}

// ---------------------------------------------------------------------------------------------------------------
// §18.4 address classification

fn describe_class(class: AddressClass) -> String {
    match class {
        AddressClass::Global => "global".to_owned(),
        AddressClass::NonGlobal { kind, .. } => format!("non-global ({kind})"),
        AddressClass::Metadata { .. } => "metadata".to_owned(),
    }
}

#[track_caller]
fn check_class(addr: &str, expect: &str) {
    let ip: IpAddr = addr.parse().expect("test address parses");
    assert_eq!(describe_class(classify(ip)), expect, "address {addr}");
}

#[test]
#[rustfmt::skip]
fn classification_18_4() {
    for a in ["8.8.8.8", "1.1.1.1", "140.82.112.3", "172.32.0.1", "100.128.0.1"] {
        check_class(a, "global");
    }
    check_class("0.0.0.0", "non-global (this network)");
    for a in ["10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1"] {
        check_class(a, "non-global (private)");
    }
    check_class("100.64.0.1", "non-global (shared address space)");
    check_class("100.127.255.255", "non-global (shared address space)");
    check_class("127.0.0.1", "non-global (loopback)");
    check_class("127.255.255.255", "non-global (loopback)");
    check_class("169.254.1.1", "non-global (link-local)");
    for a in [
        "169.254.169.254",
        "169.254.170.2",
        "168.63.129.16",
        "100.100.100.200",
        "192.0.0.192",
    ] {
        check_class(a, "metadata");
    }
    check_class("192.0.0.9", "non-global (IETF protocol assignments)");
    for a in ["192.0.2.1", "198.51.100.7", "203.0.113.9"] {
        check_class(a, "non-global (documentation)");
    }
    check_class("198.18.0.1", "non-global (benchmarking)");
    check_class("192.88.99.1", "non-global (6to4 relay anycast)");
    check_class("224.0.0.1", "non-global (multicast)");
    check_class("239.255.255.250", "non-global (multicast)");
    check_class("240.0.0.1", "non-global (reserved)");
    check_class("255.255.255.255", "non-global (reserved)");
    check_class("::", "non-global (unspecified)");
    check_class("::1", "non-global (loopback)");
    check_class("::ffff:127.0.0.1", "non-global (loopback)");
    check_class("::ffff:169.254.169.254", "metadata");
    check_class("::ffff:8.8.8.8", "global");
    check_class("::10.0.0.1", "non-global (IPv4-compatible)");
    check_class("64:ff9b::a9fe:a9fe", "metadata");
    check_class("64:ff9b::a00:1", "non-global (private)");
    check_class("64:ff9b::808:808", "global");
    check_class("64:ff9b:1::1", "non-global (NAT64 local use)");
    check_class("2002:a9fe:a9fe::1", "metadata");
    check_class("2002:a00:1::1", "non-global (private)");
    check_class("2002:808:808::1", "global");
    check_class("2001:0:4136:e378:8000:63bf:3fff:fdd2", "non-global (Teredo)");
    check_class("2001:db8::1", "non-global (documentation)");
    check_class("2001:2::1", "non-global (benchmarking)");
    check_class("2001:10::1", "non-global (ORCHID)");
    check_class("3fff::1", "non-global (documentation)");
    check_class("5f00::1", "non-global (segment routing)");
    check_class("100::1", "non-global (discard-only)");
    check_class("fc00::1", "non-global (unique local)");
    check_class("fd12:3456::1", "non-global (unique local)");
    check_class("fd00:ec2::254", "metadata");
    check_class("fd00:ec2::23", "metadata");
    check_class("fe80::1", "non-global (link-local)");
    check_class("fec0::1", "non-global (site-local)");
    check_class("ff02::1", "non-global (multicast)");
    check_class("4000::1", "non-global (not global unicast)");
    check_class("2606:4700:4700::1111", "global");
    check_class("2a00:1450:4007:80e::200e", "global");
}

#[test]
fn embedded_addresses_report_the_ipv4_block() {
    let class = classify("64:ff9b::a00:1".parse().expect("address"));
    assert_eq!(
        class,
        AddressClass::NonGlobal {
            kind: iterion_netpolicy::NonGlobalKind::Private,
            block: "10.0.0.0/8".parse().expect("net"),
        }
    );
    let class = classify("2002:a9fe:a9fe::1".parse().expect("address"));
    assert_eq!(
        class,
        AddressClass::Metadata {
            address: "169.254.169.254".parse().expect("address")
        }
    );
}

// ---------------------------------------------------------------------------------------------------------------
// §18.5 two-stage decisions (the resolver answer is given as a list)

fn decide(mode: Mode, rules: &[&str], target: &str, answer: &[&str], own: &[&str]) -> Decision {
    let policy = Policy::compile(mode, &[], rules).expect("policy compiles");
    let target = Target::parse(target, Some(443)).expect("target parses");
    let answer: Vec<IpAddr> = answer.iter().map(|a| a.parse().expect("answer parses")).collect();
    let own: Vec<SocketAddr> = own
        .iter()
        .map(|a| a.parse().expect("listen address parses"))
        .collect();
    let resolved = (!answer.is_empty()).then_some(answer.as_slice());
    policy.decide(&target, resolved, &own)
}

fn describe_decision(d: &Decision) -> String {
    match (d.allowed, d.reason, d.address) {
        (true, _, _) => "allowed".to_owned(),
        (false, Some(reason), Some(addr)) => format!("refused, {reason}, rule {}, address {addr}", d.rule),
        (false, reason, _) => {
            format!(
                "refused, {}, rule {}",
                reason.map(|r| r.as_str()).unwrap_or("?"),
                d.rule
            )
        }
    }
}

#[track_caller]
fn check_two_stage(mode: Mode, rules: &[&str], target: &str, answer: &[&str], expect: &str) {
    let d = decide(mode, rules, target, answer, &[]);
    assert_eq!(
        describe_decision(&d),
        expect,
        "{mode} {rules:?} {target} {answer:?}"
    );
}

const NG: &str = "non-global address, rule non-global address";

#[test]
#[rustfmt::skip]
fn two_stage_18_5() {
    check_two_stage(A, &["**"], "metadata.google.internal:80", &["169.254.169.254"], &format!("refused, {NG}, address 169.254.169.254")); // S1
    check_two_stage(A, &["**"], "rebind.example:443", &["93.184.216.34", "127.0.0.1"], &format!("refused, {NG}, address 127.0.0.1")); // S2
    check_two_stage(A, &["**"], "public.example:443", &["93.184.216.34"], "allowed"); // S3
    check_two_stage(A, &["**"], "v6.example:443", &["::ffff:10.0.0.5"], &format!("refused, {NG}, address 10.0.0.5")); // S4
    check_two_stage(A, &["**"], "nat64.example:443", &["64:ff9b::a9fe:a9fe"], &format!("refused, {NG}, address 64:ff9b::a9fe:a9fe")); // S5
    check_two_stage(A, &["internal.acme.dev", "10.0.0.0/8"], "internal.acme.dev:443", &["10.1.2.3"], "allowed"); // S6
    check_two_stage(A, &["internal.acme.dev", "0.0.0.0/0"], "internal.acme.dev:443", &["10.1.2.3"], &format!("refused, {NG}, address 10.1.2.3")); // S7
    check_two_stage(A, &["internal.acme.dev", "169.254.0.0/16"], "internal.acme.dev:80", &["169.254.169.254"], &format!("refused, {NG}, address 169.254.169.254")); // S8
    check_two_stage(A, &["internal.acme.dev", "169.254.169.254"], "internal.acme.dev:80", &["169.254.169.254"], "allowed"); // S9
    check_two_stage(D, &[], "169.254.169.254:80", &[], &format!("refused, {NG}, address 169.254.169.254")); // S10
    check_two_stage(D, &[], "127.1:8080", &[], &format!("refused, {NG}, address 127.0.0.1")); // S11
    check_two_stage(D, &["!140.82.0.0/16"], "github.com:443", &["140.82.112.3"], "refused, policy denial, rule !140.82.0.0/16, address 140.82.112.3"); // S12
    check_two_stage(O, &[], "localhost:8080", &["127.0.0.1"], &format!("refused, {NG}, address 127.0.0.1")); // S13
    check_two_stage(A, &["127.0.0.1"], "127.0.0.1:8080", &[], "allowed"); // S14
    check_two_stage(A, &["10.0.0.0/8:5432"], "10.0.0.5:5432", &[], "allowed"); // S15
    check_two_stage(A, &["10.0.0.0/8:5432"], "10.0.0.5:22", &[], "refused, policy denial, rule no rule matched"); // S16
    check_two_stage(A, &["outside.test", "172.17.0.0/16"], "outside.test:8080", &["172.17.0.2"], "allowed"); // S17
    // S18 (NXDOMAIN) and S19 (DNS timeout) are resolver outcomes, decided by the proxy before any address stage.
}

#[test]
fn self_connection_s20() {
    let own = ["203.0.113.50:3128"];
    let rules = &["**", "0.0.0.0/0", "203.0.113.50"];
    let d = decide(A, rules, "203.0.113.50:3128", &[], &own);
    assert_eq!(
        describe_decision(&d),
        format!("refused, {NG}, address 203.0.113.50")
    );
    // The same address on another port is not the proxy.
    let d = decide(A, rules, "203.0.113.50:443", &[], &own);
    assert_eq!(describe_decision(&d), "allowed");
    // A loopback listener is refused as a loopback address already, and also as the proxy itself.
    let d = decide(A, &["127.0.0.1"], "127.0.0.1:3128", &[], &["127.0.0.1:3128"]);
    assert_eq!(describe_decision(&d), format!("refused, {NG}, address 127.0.0.1"));
    // A wildcard listener covers loopback on its port.
    let d = decide(A, &["127.0.0.1"], "127.0.0.1:3128", &[], &["0.0.0.0:3128"]);
    assert_eq!(describe_decision(&d), format!("refused, {NG}, address 127.0.0.1"));
    let d = decide(A, &["127.0.0.1"], "127.0.0.1:3128", &[], &["[::]:3128"]);
    assert_eq!(describe_decision(&d), format!("refused, {NG}, address 127.0.0.1"));
    let d = decide(A, &["::1"], "[::1]:3128", &[], &["0.0.0.0:3128"]);
    assert_eq!(describe_decision(&d), "allowed");
    let d = decide(A, &["127.0.0.1"], "127.0.0.1:3129", &[], &["0.0.0.0:3128"]);
    assert_eq!(describe_decision(&d), "allowed");
}

#[track_caller]
fn check_explicit(rules: &[&str], address: &str, expect: &str) {
    let mut all = vec!["a.test"];
    all.extend_from_slice(rules);
    let d = decide(A, &all, "a.test:443", &[address], &[]);
    let got = if d.allowed { "explicit" } else { "not explicit" };
    assert_eq!(got, expect, "rules {rules:?} address {address}");
}

#[test]
#[rustfmt::skip]
fn explicit_allows_8_3() {
    for r in ["10.1.2.3", "10.1.0.0/16", "10.0.0.0/8"] {
        check_explicit(&[r], "10.1.2.3", "explicit");
    }
    for r in ["0.0.0.0/0", "8.0.0.0/6"] {
        check_explicit(&[r], "10.1.2.3", "not explicit");
    }
    check_explicit(&["127.0.0.1"], "127.0.0.1", "explicit");
    check_explicit(&["127.0.0.0/8"], "127.0.0.1", "explicit");
    check_explicit(&["0.0.0.0/0"], "127.0.0.1", "not explicit");
    check_explicit(&["172.17.0.0/16"], "172.17.0.2", "explicit");
    check_explicit(&["172.0.0.0/8"], "172.17.0.2", "not explicit");
    check_explicit(&["169.254.169.254"], "169.254.169.254", "explicit");
    check_explicit(&["169.254.169.254/32"], "169.254.169.254", "explicit");
    check_explicit(&["169.254.0.0/16"], "169.254.169.254", "not explicit");
    check_explicit(&["0.0.0.0/0"], "169.254.169.254", "not explicit");
    check_explicit(&["fd00:ec2::254"], "fd00:ec2::254", "explicit");
    check_explicit(&["fd00::/8"], "fd00:ec2::254", "not explicit");
    check_explicit(&["fc00::/7"], "fd00:ec2::254", "not explicit");
    check_explicit(&["10.0.0.0/8"], "::ffff:10.0.0.1", "explicit");
    check_explicit(&["10.0.0.1"], "::ffff:10.0.0.1", "explicit");
    check_explicit(&["10.0.0.0/8"], "64:ff9b::a00:1", "explicit");
    check_explicit(&["169.254.169.254"], "64:ff9b::a9fe:a9fe", "explicit");
    check_explicit(&["::/0"], "64:ff9b::a9fe:a9fe", "not explicit");
    check_explicit(&["10.0.0.0/8", "!10.0.0.0/8"], "10.1.2.3", "not explicit");
    check_explicit(&["!10.0.0.0/8", "10.0.0.0/8"], "10.1.2.3", "explicit");
    check_explicit(&["10.0.0.0/8:22"], "10.1.2.3", "not explicit");
    check_explicit(&["fd00::/8"], "fd12::1", "explicit");
    check_explicit(&["2001::/32"], "2001:0:4136:e378:8000:63bf:3fff:fdd2", "explicit");
}

#[test]
fn ip_rule_denies_at_the_address_stage_in_every_mode() {
    for mode in [A, D, O] {
        let d = decide(mode, &["**", "!8.8.8.0/24"], "dns.example:443", &["8.8.8.8"], &[]);
        assert_eq!(
            describe_decision(&d),
            "refused, policy denial, rule !8.8.8.0/24, address 8.8.8.8",
            "{mode}"
        );
    }
    // A `!` rule on the embedded IPv4 also refuses a NAT64 address.
    let d = decide(
        A,
        &["**", "!8.8.8.8"],
        "dns.example:443",
        &["64:ff9b::808:808"],
        &[],
    );
    assert_eq!(
        describe_decision(&d),
        "refused, policy denial, rule !8.8.8.8, address 64:ff9b::808:808"
    );
    // Global NAT64 addresses are accepted (IPv6-only networks use them).
    let d = decide(A, &["**"], "dns.example:443", &["64:ff9b::808:808"], &[]);
    assert_eq!(describe_decision(&d), "allowed");
}

#[test]
fn allowed_decisions_keep_every_address_in_order() {
    let d = decide(
        A,
        &["**"],
        "cdn.example:443",
        &["2606:4700::1", "::ffff:93.184.216.34"],
        &[],
    );
    assert!(d.allowed);
    let want: Vec<IpAddr> = vec![
        "2606:4700::1".parse().expect("a"),
        "93.184.216.34".parse().expect("a"),
    ];
    assert_eq!(d.addresses, want);
    assert_eq!(d.rule.as_str(), "**");
    assert_eq!(d.stage, iterion_netpolicy::Stage::Address);
}

// ---------------------------------------------------------------------------------------------------------------
// §18.9 `iterion netproxy check`: the decision lines (flag parsing and exit codes belong to the CLI)

#[track_caller]
fn check_line(mode: Mode, rules: &[&str], target: &str, answer: Option<&[&str]>, expect: &str) {
    let policy = Policy::compile(mode, &[], rules).expect("policy compiles");
    let target = Target::parse_lenient(target, Some(443)).expect("target parses");
    let answer: Option<Vec<IpAddr>> =
        answer.map(|a| a.iter().map(|s| s.parse().expect("answer parses")).collect());
    let d = policy.decide(&target, answer.as_deref(), &[]);
    assert_eq!(d.to_string(), expect);
}

#[test]
#[rustfmt::skip]
fn check_command_lines_18_9() {
    check_line(A, &["**.github.com"], "api.github.com", Some(&["140.82.112.5"]), r#"allow api.github.com:443 rule="**.github.com""#);
    check_line(A, &["**.github.com"], "evil.example:80", None, r#"deny evil.example:80 reason="policy denial" rule="no rule matched""#);
    check_line(D, &[], "169.254.169.254:80", None, r#"deny 169.254.169.254:80 reason="non-global address" rule="non-global address" address=169.254.169.254"#);
    check_line(D, &[], "0xa9fea9fe", None, r#"deny 169.254.169.254:443 reason="non-global address" rule="non-global address" address=169.254.169.254"#);
    check_line(A, &["**"], "2130706433:80", None, r#"deny 127.0.0.1:80 reason="policy denial" rule="no rule matched""#);
    check_line(D, &[], "[::ffff:169.254.169.254]:80", None, r#"deny 169.254.169.254:80 reason="non-global address" rule="non-global address" address=169.254.169.254"#);
    check_line(D, &[], "64:ff9b::a9fe:a9fe", None, r#"deny [64:ff9b::a9fe:a9fe]:443 reason="non-global address" rule="non-global address" address=64:ff9b::a9fe:a9fe"#);
    check_line(D, &[], "example.org", None, r#"allow example.org:443 rule="(mode fallback)""#);
    check_line(A, &["**.github.com", "!gist.github.com"], "gist.github.com", None, r#"deny gist.github.com:443 reason="policy denial" rule="!gist.github.com""#);
}

#[test]
fn check_command_errors_18_9() {
    let errors = Policy::compile(A, &[], &["a*b.com"]).map(|_| ()).unwrap_err();
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "invalid network rule 'a*b.com': a wildcard must be the whole leftmost label: *.example.com or **.example.com"
        ]
    );
    let errors = Policy::compile(A, &["nope"], &[]).map(|_| ()).unwrap_err();
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["unknown network preset 'nope' (want iterion-default or none)"]
    );
}

#[test]
fn check_json_18_9() {
    // The §18.9 row uses `--rule github.com`, but by §5.2 an unscoped rule matches every port (N28/N29 scope ports
    // only with `:PORT`), so that rule allows `github.com:22`. The row's output is reproduced with a rule scoped to
    // 443; the unscoped rule is checked at the end to allow, as §5.2 says.
    let policy = Policy::compile(A, &[], &["github.com:443"]).expect("compiles");
    let target = Target::parse_lenient("github.com:22", Some(443)).expect("target");
    insta::assert_json_snapshot!("check_json_port_denied", policy.decide(&target, None, &[]));
    let d = decide(
        A,
        &["**"],
        "rebind.example:443",
        &["93.184.216.34", "127.0.0.1"],
        &[],
    );
    insta::assert_json_snapshot!("check_json_rebind", d);
    let unscoped = Policy::compile(A, &[], &["github.com"]).expect("compiles");
    assert!(unscoped.decide(&target, None, &[]).allowed);
}

#[test]
fn denial_messages_13_2() {
    let d = decide(A, &[], "evil.example:443", &[], &[]);
    assert_eq!(
        d.message(),
        "host 'evil.example' (port 443) is blocked by the sandbox network policy (no rule matched); if the \
         workflow needs it, add it to sandbox.network.rules"
    );
    let d = decide(
        A,
        &["**"],
        "metadata.google.internal:80",
        &["169.254.169.254"],
        &[],
    );
    assert_eq!(
        d.message(),
        "host 'metadata.google.internal' (port 80) resolves to the non-global address 169.254.169.254, which the \
         sandbox refuses; if the workflow needs it, add an explicit rule for that address to \
         sandbox.network.rules"
    );
}

// ---------------------------------------------------------------------------------------------------------------
// §7 silent deny

#[track_caller]
fn check_silent(list: &SilentDeny, target: &str, expect: bool) {
    let target = Target::parse(target, Some(443)).expect("target parses");
    assert_eq!(list.is_silent(&target), expect, "{target}");
}

#[test]
#[rustfmt::skip]
fn silent_deny_7() {
    let default = SilentDeny::default();
    check_silent(&default, "statsig.anthropic.com", true);
    check_silent(&default, "statsig.com", true);
    check_silent(&default, "api.statsig.com", true);
    check_silent(&default, "o123.ingest.sentry.io", true);
    check_silent(&default, "http-intake.logs.datadoghq.com", true);
    check_silent(&default, "api.segment.io", true);
    check_silent(&default, "api.anthropic.com", false);
    check_silent(&default, "sentry.io.evil.site", false);
    let disabled = SilentDeny::from_config_value(Some("")).expect("empty value");
    check_silent(&disabled, "statsig.anthropic.com", false);
    let custom =
        SilentDeny::from_config_value(Some(" telemetry.example , **.metrics.example")).expect("parses");
    check_silent(&custom, "telemetry.example", true);
    check_silent(&custom, "a.metrics.example", true);
    check_silent(&custom, "statsig.anthropic.com", false);
    assert_eq!(SilentDeny::from_config_value(None).expect("default"), default);
    let errors = SilentDeny::from_config_value(Some("ok.example,a*b.com"))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(errors.len(), 1);
}

#[test]
fn silent_deny_never_changes_a_decision() {
    // E3: an explicit allow rule for a silent-deny host allows it.
    let policy = Policy::compile(A, &[], &["statsig.anthropic.com"]).expect("compiles");
    let target = Target::parse("statsig.anthropic.com:443", None).expect("target");
    assert!(policy.decide_name(&target).allowed);
    assert!(SilentDeny::default().is_silent(&target));
}
