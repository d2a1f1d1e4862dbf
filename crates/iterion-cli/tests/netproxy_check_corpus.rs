//! An adversarial corpus for `iterion netproxy check` (spec 04 §16.2, §18.9), run as the built binary: SSRF
//! spellings of loopback, private and metadata addresses, IPv6 embeddings, names that look like addresses,
//! malformed targets, bad rules and presets. Names are decided with `--no-resolve` or through a scripted UDP DNS
//! responder on `127.0.0.1:0` (`--dns-server`): no test touches the outside network.

use iterion_test_support::dns::ScriptedDns;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Output};

fn iterion(args: &[&str]) -> Output {
    let mut full = vec!["netproxy", "check"];
    full.extend_from_slice(args);
    Command::new(env!("CARGO_BIN_EXE_iterion"))
        .args(&full)
        .env_remove("ITERION_NETPROXY_TOKEN")
        .output()
        .expect("run iterion")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim_end().to_owned()
}

/// One invocation: the expected stdout (every line) and exit code; on exit 2, the expected stderr and an empty
/// stdout (nothing is decided).
#[track_caller]
fn check(args: &[&str], expect: &str, code: i32) {
    let out = iterion(args);
    // usage errors: one per line, each with the `error: ` prefix of every iterion command
    let prefixed: String;
    let expect = if code == 2 {
        prefixed = expect
            .lines()
            .map(|l| format!("error: {l}"))
            .collect::<Vec<_>>()
            .join("\n");
        prefixed.as_str()
    } else {
        expect
    };
    let (got, other) = if code == 2 {
        (text(&out.stderr), text(&out.stdout))
    } else {
        (text(&out.stdout), String::new())
    };
    assert_eq!(
        (got.as_str(), out.status.code(), other.as_str()),
        (expect, Some(code), ""),
        "args {args:?}"
    );
}

fn ng(target: &str, address: &str) -> String {
    format!(r#"deny {target} reason="non-global address" rule="non-global address" address={address}"#)
}

fn no_match(target: &str) -> String {
    format!(r#"deny {target} reason="policy denial" rule="no rule matched""#)
}

fn invalid(given: &str) -> String {
    format!(r#"deny {given} reason="invalid target" rule="-""#)
}

#[test]
#[rustfmt::skip]
fn address_literals_in_every_spelling() {
    let loopback = [
        "127.0.0.1", "127.1", "127.0.1", "0177.0.0.1", "0x7f.0.0.1", "0X7F.0.0.1", "0x7f.1", "2130706433",
        "017700000001", "0x7f000001", "127.0.0.1.", "127.000.000.001", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
        "::ffff:7f00:1", "１２７.０.０.１", "127。0。0。1",
    ];
    for t in loopback {
        check(&["--mode", "denylist", t], &ng("127.0.0.1:443", "127.0.0.1"), 1);
        check(&["--rule", "**", t], &no_match("127.0.0.1:443"), 1);
        check(&["--rule", "127.0.0.1", t], r#"allow 127.0.0.1:443 rule="127.0.0.1""#, 0);
    }
    let metadata = [
        "169.254.169.254", "2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "0xa9.0xfe.0xa9.0xfe",
        "169.254.43518", "169.16689662", "025177524776", "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]",
        "::ffff:a9fe:a9fe", "169.254.169.254.",
    ];
    check(&["--mode", "denylist", "::ffff:a9fe:a9fe:80"], &ng("[::ffff:a9fe:a9fe:80]:443", "::ffff:a9fe:a9fe:80"), 1);
    for t in metadata {
        // A bare IPv6 literal cannot carry a port (`::ffff:a9fe:a9fe:80` is another address).
        if t.matches(':').count() < 2 || t.starts_with('[') {
            check(&["--mode", "denylist", &format!("{t}:80")], &ng("169.254.169.254:80", "169.254.169.254"), 1);
        }
        check(&["--mode", "open", t], &ng("169.254.169.254:443", "169.254.169.254"), 1);
        check(&["--rule", "**", "--rule", "0.0.0.0/0", t], &ng("169.254.169.254:443", "169.254.169.254"), 1);
        check(&["--rule", "169.254.0.0/16", t], &ng("169.254.169.254:443", "169.254.169.254"), 1);
        check(&["--rule", "169.254.169.254", t], r#"allow 169.254.169.254:443 rule="169.254.169.254""#, 0);
        check(&["--mode", "denylist", "--rule", "!169.254.169.254", t], r#"deny 169.254.169.254:443 reason="policy denial" rule="!169.254.169.254""#, 1);
    }
    let non_global = [
        ("0", "0.0.0.0"), ("0.0.0.0", "0.0.0.0"), ("0x0", "0.0.0.0"), ("10.1", "10.0.0.1"),
        ("172.16.0.1", "172.16.0.1"), ("192.168.1.1", "192.168.1.1"), ("3232235777", "192.168.1.1"),
        ("100.64.0.1", "100.64.0.1"), ("198.18.0.1", "198.18.0.1"), ("192.0.2.1", "192.0.2.1"),
        ("198.51.100.1", "198.51.100.1"), ("203.0.113.1", "203.0.113.1"), ("192.0.0.8", "192.0.0.8"),
        ("192.88.99.1", "192.88.99.1"), ("224.0.0.251", "224.0.0.251"), ("240.0.0.1", "240.0.0.1"),
        ("255.255.255.255", "255.255.255.255"), ("4294967295", "255.255.255.255"),
        ("169.254.170.2", "169.254.170.2"), ("168.63.129.16", "168.63.129.16"),
        ("100.100.100.200", "100.100.100.200"), ("192.0.0.192", "192.0.0.192"),
    ];
    for (t, a) in non_global {
        check(&["--mode", "denylist", t], &ng(&format!("{a}:443"), a), 1);
    }
    for t in ["8.8.8.8", "134744072", "0x08080808", "172.32.0.1", "100.128.0.1", "[::ffff:8.8.8.8]"] {
        check(&["--mode", "denylist", t], r#"allow 8.8.8.8:443 rule="(mode fallback)""#.replace("8.8.8.8", &canonical(t)).as_str(), 0);
    }
}

/// The canonical host of a literal in this corpus (for global addresses written several ways).
fn canonical(t: &str) -> String {
    match t {
        "134744072" | "0x08080808" | "[::ffff:8.8.8.8]" => "8.8.8.8".to_owned(),
        other => other.to_owned(),
    }
}

#[test]
#[rustfmt::skip]
fn ipv6_literals() {
    let cases = [
        ("[::1]", "::1"), ("::1", "::1"), ("[::1]:443", "::1"), ("[0:0:0:0:0:0:0:1]", "::1"), ("[::]", "::"),
        ("::", "::"), ("[::127.0.0.1]", "::7f00:1"), ("::127.0.0.1", "::7f00:1"),
        ("[64:ff9b::7f00:1]", "64:ff9b::7f00:1"), ("64:ff9b::127.0.0.1", "64:ff9b::7f00:1"),
        ("64:ff9b::a9fe:a9fe", "64:ff9b::a9fe:a9fe"), ("[64:ff9b:1::808:808]", "64:ff9b:1::808:808"),
        ("[2002:7f00:1::]", "2002:7f00:1::"), ("2002:a9fe:a9fe::1", "2002:a9fe:a9fe::1"),
        ("[2001:0:4136:e378:8000:63bf:3fff:fdd2]", "2001:0:4136:e378:8000:63bf:3fff:fdd2"),
        ("[2001:db8::1]", "2001:db8::1"), ("[fd00::1]", "fd00::1"), ("[FD00:EC2::254]", "fd00:ec2::254"),
        ("[fe80::1]", "fe80::1"), ("[fec0::1]", "fec0::1"), ("[ff02::1]", "ff02::1"), ("[100::1]", "100::1"),
        ("[5f00::1]", "5f00::1"), ("[3fff::1]", "3fff::1"), ("[4000::1]", "4000::1"),
    ];
    for (t, a) in cases {
        check(&["--mode", "denylist", t], &ng(&format!("[{a}]:443"), a), 1);
        check(&["--rule", "**", t], &no_match(&format!("[{a}]:443")), 1);
    }
    check(&["--mode", "denylist", "[::1]:8080"], &ng("[::1]:8080", "::1"), 1);
    check(&["--rule", "::1", "[::1]:8080"], r#"allow [::1]:8080 rule="::1""#, 0);
    check(&["--rule", "[::1]:8080", "[0::1]:8080"], r#"allow [::1]:8080 rule="[::1]:8080""#, 0);
    check(&["--rule", "fc00::/7", "[fd12::1]"], r#"allow [fd12::1]:443 rule="fc00::/7""#, 0);
    check(&["--rule", "fd00::/8", "[fd00:ec2::254]"], &ng("[fd00:ec2::254]:443", "fd00:ec2::254"), 1);
    check(&["--rule", "64:ff9b::/96", "64:ff9b::a9fe:a9fe"], &ng("[64:ff9b::a9fe:a9fe]:443", "64:ff9b::a9fe:a9fe"), 1);
    check(&["--rule", "::/0", "[2606:4700:4700::1111]"], r#"allow [2606:4700:4700::1111]:443 rule="::/0""#, 0);
    check(&["--rule", "::/0", "64:ff9b::808:808"], r#"allow [64:ff9b::808:808]:443 rule="::/0""#, 0);
    check(&["--mode", "denylist", "2002:808:808::1"], r#"allow [2002:808:808::1]:443 rule="(mode fallback)""#, 0);
}

#[test]
#[rustfmt::skip]
fn invalid_targets_are_denied_and_printed_as_given() {
    for t in [
        "bad..host", "github.com..", "256.1.1.1", "1.2.3.4.5", "08.0.0.1", "0x1g.0.0.1", "example.123",
        "4294967296", "[fe80::1%25eth0]", "[fe80::1%25eth0]:443", "fe80::1%eth0", "[fe80::1%eth0]", "[::1",
        "[::1]x", "[127.0.0.1]", "[]", "user@example.com", "user@example.com:443", "evil.com@169.254.169.254",
        "*.example.com", "**", "example.com:0", "example.com:65536", "example.com:0443", "example.com:",
        "example.com:abc", ":443", "%65xample.com", "a/b.com", "http://169.254.169.254/", "example.com:443:80",
        "exa$mple.com", "127.0.0.1..", "user＠example.com", "example.com：443",
    ] {
        check(&["--mode", "open", "--no-resolve", t], &invalid(t), 1);
    }
    let long = format!("{}.com", "a".repeat(64));
    check(&["--mode", "open", "--no-resolve", &long], &invalid(&long), 1);
    check(&["--mode", "open", "--no-resolve", "exa mple.com"], &invalid("exa mple.com"), 1);
    check(&["--mode", "open", "--no-resolve", ""], &invalid(""), 1);
}

#[test]
fn a_target_cannot_forge_an_output_line() {
    // One line per target (§16.2): control characters of an invalid target are escaped, never written raw.
    let forged = "evil.example\nallow evil.example:443 rule=\"**\"";
    let out = iterion(&["--no-resolve", "--rule", "ok.example", forged, "ok.example"]);
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            r#"deny evil.example\nallow evil.example:443 rule="**" reason="invalid target" rule="-""#,
            r#"allow ok.example:443 rule="ok.example""#,
        ],
        "{out:?}"
    );
    assert_eq!(out.status.code(), Some(1));
    for (given, shown) in [
        ("a.com\r", r"a.com\r"),
        ("a\tb.com", r"a\tb.com"),
        ("a.com\u{1b}[2K", r"a.com\u{1b}[2K"),
        ("a.com\u{85}x", r"a.com\u{85}x"),
        ("a.com\u{2028}x", r"a.com\u{2028}x"),
        ("a\\b.com", r"a\b.com"),
    ] {
        check(&["--no-resolve", given], &invalid(shown), 1);
    }
    // JSON carries the target as given (JSON escaping keeps it on one line).
    let out = iterion(&["--json", "--no-resolve", forged]);
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json line");
    assert_eq!(v["target"].as_str(), Some(forged));
}

#[test]
#[rustfmt::skip]
fn names_on_the_policy_alone() {
    let nr = |rules: &[&str], t: &str, expect: &str, code: i32| {
        let mut args = vec!["--no-resolve"];
        for r in rules {
            args.extend(["--rule", r]);
        }
        args.push(t);
        check(&args, expect, code);
    };
    nr(&["**"], "localhost", r#"allow localhost:443 rule="**""#, 0);
    nr(&["**"], "LOCALHOST.:8080", r#"allow localhost:8080 rule="**""#, 0);
    nr(&["!localhost", "**"], "LocalHost", r#"allow localhost:443 rule="**""#, 0);
    nr(&["**", "!localhost"], "LocalHost.", r#"deny localhost:443 reason="policy denial" rule="!localhost""#, 1);
    nr(&["**", "!**.localhost"], "a.b.localhost", r#"deny a.b.localhost:443 reason="policy denial" rule="!**.localhost""#, 1);
    nr(&["*.example.com"], "example.com", &no_match("example.com:443"), 1);
    nr(&["*.example.com"], "a.b.example.com", &no_match("a.b.example.com:443"), 1);
    nr(&["*.example.com"], "A.Example.COM.", r#"allow a.example.com:443 rule="*.example.com""#, 0);
    nr(&["**.example.com"], "example.com", r#"allow example.com:443 rule="**.example.com""#, 0);
    nr(&["**.example.com"], "x.y.z.example.com:8443", r#"allow x.y.z.example.com:8443 rule="**.example.com""#, 0);
    nr(&["**.example.com"], "example.com.evil.test", &no_match("example.com.evil.test:443"), 1);
    nr(&["**.example.com"], "evilexample.com", &no_match("evilexample.com:443"), 1);
    nr(&["**"], "1.2.3.4.nip.io", r#"allow 1.2.3.4.nip.io:443 rule="**""#, 0);
    nr(&["1.2.3.4"], "1.2.3.4.nip.io", &no_match("1.2.3.4.nip.io:443"), 1);
    nr(&["**"], "ｅxample.com", r#"allow example.com:443 rule="**""#, 0);
    nr(&["example.com"], "ＥＸＡＭＰＬＥ。ｃｏｍ", r#"allow example.com:443 rule="example.com""#, 0);
    nr(&["bücher.example"], "xn--bcher-kva.example", r#"allow xn--bcher-kva.example:443 rule="bücher.example""#, 0);
    nr(&["xn--bcher-kva.example"], "BÜCHER.example.", r#"allow xn--bcher-kva.example:443 rule="xn--bcher-kva.example""#, 0);
    nr(&["github.com:22"], "github.com:22", r#"allow github.com:22 rule="github.com:22""#, 0);
    nr(&["github.com:22"], "github.com", &no_match("github.com:443"), 1);
    nr(&["*.github.com:443"], "api.github.com:8443", &no_match("api.github.com:8443"), 1);
    nr(&["**:443"], "any.test", r#"allow any.test:443 rule="**:443""#, 0);
    nr(&["github.com", "!github.com"], "github.com", r#"deny github.com:443 reason="policy denial" rule="!github.com""#, 1);
    nr(&["!github.com", "github.com"], "github.com", r#"allow github.com:443 rule="github.com""#, 0);
    nr(&["**.github.com", "!gist.github.com"], "gist.github.com", r#"deny gist.github.com:443 reason="policy denial" rule="!gist.github.com""#, 1);
    nr(&["!gist.github.com", "**.github.com"], "gist.github.com", r#"allow gist.github.com:443 rule="**.github.com""#, 0);
    nr(&["  !  Gist.GitHub.com.  ", "**"], "gist.github.com", r#"allow gist.github.com:443 rule="**""#, 0);
    nr(&["**", "  !  Gist.GitHub.com.  "], "gist.github.com", r#"deny gist.github.com:443 reason="policy denial" rule="!  Gist.GitHub.com.""#, 1);
    // A target or rule starting with `-` follows `--` or `=` (otherwise it reads as a flag).
    check(&["--no-resolve", "--rule=-bad-.com", "--", "-bad-.com:443"], r#"allow -bad-.com:443 rule="-bad-.com""#, 0);
    // Flags may follow targets.
    check(&["a.test", "--no-resolve", "--rule", "a.test"], r#"allow a.test:443 rule="a.test""#, 0);
    nr(&["exa_mple.com"], "exa_mple.com", r#"allow exa_mple.com:443 rule="exa_mple.com""#, 0);
    // Denylist and open: the mode decides only when no rule matches.
    check(&["--mode", "denylist", "--no-resolve", "--rule", "!**.evil.site", "evil.site"], r#"deny evil.site:443 reason="policy denial" rule="!**.evil.site""#, 1);
    check(&["--mode", "denylist", "--no-resolve", "--rule", "!**.evil.site", "github.com"], r#"allow github.com:443 rule="(mode fallback)""#, 0);
    check(&["--mode", "open", "--no-resolve", "--rule", "!**", "evil.site"], r#"deny evil.site:443 reason="policy denial" rule="!**""#, 1);
    check(&["--mode", "open", "--no-resolve", "metadata.google.internal"], r#"allow metadata.google.internal:443 rule="(mode fallback)""#, 0);
}

#[test]
#[rustfmt::skip]
fn presets() {
    let p = |t: &str, expect: &str, code: i32| check(&["--preset", "iterion-default", "--no-resolve", t], expect, code);
    for t in ["api.anthropic.com", "API.ANTHROPIC.COM.", "registry.npmjs.org", "raw.githubusercontent.com", "docs.devbox.sh"] {
        let shown = t.to_ascii_lowercase();
        let shown = shown.trim_end_matches('.');
        let out = iterion(&["--preset", "iterion-default", "--no-resolve", t]);
        assert!(text(&out.stdout).starts_with(&format!("allow {shown}:443 rule=")), "{t}: {out:?}");
        assert_eq!(out.status.code(), Some(0), "{t}");
    }
    p("gist.githubusercontent.com", &no_match("gist.githubusercontent.com:443"), 1);
    p("bedrock-runtime.us-east-1.amazonaws.com", &no_match("bedrock-runtime.us-east-1.amazonaws.com:443"), 1);
    p("metadata.google.internal", &no_match("metadata.google.internal:443"), 1);
    p("localhost", &no_match("localhost:443"), 1);
    p("169.254.169.254", &no_match("169.254.169.254:443"), 1);
    p("github.com.evil.site", &no_match("github.com.evil.site:443"), 1);
    check(&["--preset", "iterion-default", "--rule", "!api.openai.com", "--no-resolve", "api.openai.com"], r#"deny api.openai.com:443 reason="policy denial" rule="!api.openai.com""#, 1);
    check(&["--preset", "none", "--no-resolve", "github.com"], &no_match("github.com:443"), 1);
    check(&["--preset", "nope", "x.com"], "unknown network preset 'nope' (want iterion-default or none)", 2);
    check(&["--preset", "iterion-defualt", "x.com"], "unknown network preset 'iterion-defualt' (want iterion-default or none)", 2);
    check(&["--preset", "Iterion-Default", "x.com"], "unknown network preset 'Iterion-Default' (want iterion-default or none)", 2);
    check(&["--preset", "", "x.com"], "unknown network preset '' (want iterion-default or none)", 2);
}

#[test]
#[rustfmt::skip]
fn bad_rules_are_listed_and_nothing_is_decided() {
    let bad = |rule: &str, reason: &str| {
        check(&["--rule", rule, "--no-resolve", "x.com"], &format!("invalid network rule '{rule}': {reason}"), 2);
    };
    bad("*", "a bare '*' is not allowed; use ** for any host");
    bad("*.", "a wildcard needs a domain after it");
    bad("**.", "a wildcard needs a domain after it");
    for r in ["a*b.com", "*github.com", "github.com.*", "***.x.com", "*.*.com", "**.*.com", "**example.com"] {
        bad(r, "a wildcard must be the whole leftmost label: *.example.com or **.example.com");
    }
    bad("!", "'!' must be followed by a pattern");
    bad("! ", "'!' must be followed by a pattern");
    bad("", "empty rule");
    bad("   ", "empty rule");
    for r in ["https://github.com", "github.com/path", "user@github.com", "git hub.com", "x.com?q", "x.com#f", "x%41.com"] {
        bad(r, "a rule is a host pattern, not a URL");
    }
    for r in ["github.com:0", "github.com:65536", "github.com:0443", "github.com:", "[::1]:0"] {
        bad(r, "port must be 1–65535");
    }
    for r in ["256.1.1.1", "example.123", "1.2.3.4.5", "08.0.0.1", "0x1g.0.0.1"] {
        bad(r, "not a valid IPv4 address");
    }
    bad("10.0.0.1/8", "host bits set; did you mean 10.0.0.0/8?");
    bad("fd00::1/8", "host bits set; did you mean fd00::/8?");
    bad("10.0.0.0/99", "the prefix length of an IPv4 range is at most 32");
    for r in ["10.0.0.0/08", "010.0.0.0/8", "fe80::1%eth0", "[1.2.3.4]", "[::1]x", "a..b.com", "exa$mple.com"] {
        let out = iterion(&["--rule", r, "--no-resolve", "x.com"]);
        assert_eq!(out.status.code(), Some(2), "rule {r:?}: {out:?}");
        assert!(text(&out.stderr).starts_with(&format!("error: invalid network rule '{r}': ")), "rule {r:?}: {out:?}");
        assert_eq!(text(&out.stdout), "", "rule {r:?}");
    }
    // Every error is listed, in order; the mode error too.
    check(
        &["--mode", "deny", "--rule", "a*b.com", "--rule", "ok.com", "--rule", "10.0.0.0/99", "--preset", "nope", "x.com"],
        "invalid network mode 'deny' (want allowlist, denylist or open)\n\
         unknown network preset 'nope' (want iterion-default or none)\n\
         invalid network rule 'a*b.com': a wildcard must be the whole leftmost label: *.example.com or **.example.com\n\
         invalid network rule '10.0.0.0/99': the prefix length of an IPv4 range is at most 32",
        2,
    );
    // A bad --dns-server is listed with the policy errors.
    check(
        &["--mode", "nope", "--rule", "*", "--dns-server", "not-an-ip", "x.com"],
        "invalid network mode 'nope' (want allowlist, denylist or open)\n\
         invalid network rule '*': a bare '*' is not allowed; use ** for any host\n\
         invalid --dns-server 'not-an-ip' (want IP or IP:PORT)",
        2,
    );
    check(&["--mode", "Allowlist", "x.com"], "invalid network mode 'Allowlist' (want allowlist, denylist or open)", 2);
    check(&["--mode", "", "x.com"], "invalid network mode '' (want allowlist, denylist or open)", 2);
    // A bad rule in a rules file is reported like a --rule.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rules.txt");
    std::fs::write(&path, "# comment\r\n\r\n**.github.com\r\n!gist.github.com\r\na*b.com\r\n").expect("write rules");
    let p = path.to_str().expect("utf-8 path");
    check(
        &["--rules-file", p, "x.com"],
        "invalid network rule 'a*b.com': a wildcard must be the whole leftmost label: *.example.com or **.example.com",
        2,
    );
    std::fs::write(&path, "# comment\r\n\r\n  **.github.com  \r\n!gist.github.com\r\n").expect("write rules");
    check(&["--rules-file", p, "--no-resolve", "gist.github.com", "api.github.com"],
        "deny gist.github.com:443 reason=\"policy denial\" rule=\"!gist.github.com\"\nallow api.github.com:443 rule=\"**.github.com\"", 1);
    let missing = dir.path().join("missing.txt");
    let out = iterion(&["--rules-file", missing.to_str().expect("utf-8"), "x.com"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(text(&out.stdout), "");
    // An unreadable rules file does not hide the other problems.
    let out = iterion(&["--rules-file", missing.to_str().expect("utf-8"), "--rule", "a*b.com", "x.com"]);
    let err = text(&out.stderr);
    assert_eq!((out.status.code(), text(&out.stdout).as_str()), (Some(2), ""), "{err}");
    assert!(err.contains("cannot read rules file") && err.contains("missing.txt"), "{err}");
    assert!(err.contains("invalid network rule 'a*b.com'"), "{err}");
}

#[test]
#[rustfmt::skip]
fn exit_codes_and_output_order() {
    check(&["--rule", "**", "--no-resolve", "a.test", "b.test:80"], "allow a.test:443 rule=\"**\"\nallow b.test:80 rule=\"**\"", 0);
    check(&["--rule", "**", "--no-resolve", "a.test", "127.1", "b.test"],
        "allow a.test:443 rule=\"**\"\ndeny 127.0.0.1:443 reason=\"policy denial\" rule=\"no rule matched\"\nallow b.test:443 rule=\"**\"", 1);
    check(&["--rule", "**", "--no-resolve", "bad..host", "a.test"], "deny bad..host reason=\"invalid target\" rule=\"-\"\nallow a.test:443 rule=\"**\"", 1);
    // Flags, not targets.
    for args in [&["--no-resolve"][..], &["--mode", "nope"], &["--bogus", "x.com"], &["--dns-server", "not-an-ip", "x.com"]] {
        let out = iterion(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert_eq!(text(&out.stdout), "", "{args:?}");
    }
}

#[test]
#[rustfmt::skip]
fn json_lines() {
    let json = |args: &[&str]| -> (Vec<serde_json::Value>, Option<i32>) {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = iterion(&full);
        let lines = text(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect();
        (lines, out.status.code())
    };
    let (lines, code) = json(&["--mode", "denylist", "0xa9fea9fe:80"]);
    assert_eq!(
        lines,
        [serde_json::json!({
            "target": "0xa9fea9fe:80", "host": "169.254.169.254", "port": 80, "decision": "deny",
            "reason": "non-global address", "rule": "non-global address", "address": "169.254.169.254"
        })]
    );
    assert_eq!(code, Some(1));
    let (lines, code) = json(&["--rule", "127.0.0.1", "127.1:8080", "[::1]"]);
    assert_eq!(
        lines,
        [
            serde_json::json!({"target": "127.1:8080", "host": "127.0.0.1", "port": 8080, "decision": "allow", "rule": "127.0.0.1"}),
            serde_json::json!({"target": "[::1]", "host": "::1", "port": 443, "decision": "deny", "reason": "policy denial", "rule": "no rule matched"}),
        ]
    );
    assert_eq!(code, Some(1));
    let (lines, code) = json(&["--no-resolve", "--rule", "github.com:443", "github.com:22", "[fe80::1%25eth0]:443"]);
    assert_eq!(
        lines,
        [
            serde_json::json!({"target": "github.com:22", "host": "github.com", "port": 22, "decision": "deny", "reason": "policy denial", "rule": "no rule matched"}),
            serde_json::json!({"target": "[fe80::1%25eth0]:443", "decision": "deny", "reason": "invalid target", "rule": "-"}),
        ]
    );
    assert_eq!(code, Some(1));
    let (lines, code) = json(&["--mode", "denylist", "--no-resolve", "example.org"]);
    assert_eq!(lines, [serde_json::json!({"target": "example.org", "host": "example.org", "port": 443, "decision": "allow", "rule": "(mode fallback)"})]);
    assert_eq!(code, Some(0));
    // The exact key order of the §16.2 line.
    let out = iterion(&["--json", "--no-resolve", "--rule", "github.com:443", "github.com:22"]);
    assert_eq!(
        text(&out.stdout),
        r#"{"target":"github.com:22","host":"github.com","port":22,"decision":"deny","reason":"policy denial","rule":"no rule matched"}"#
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Names through a scripted DNS server.

/// A scripted DNS server serving `zone`; its address.
fn responder(zone: &[(&str, &[&str])]) -> SocketAddr {
    ScriptedDns::start(zone).addr()
}

#[test]
#[rustfmt::skip]
fn names_resolved_through_a_scripted_server() {
    let server = responder(&[
        ("metadata.google.internal", &["169.254.169.254"]),
        ("public.test", &["93.184.216.34"]),
        ("rebind.test", &["93.184.216.34", "127.0.0.1"]),
        ("mapped.test", &["::ffff:169.254.169.254"]),
        ("nat64.test", &["64:ff9b::a9fe:a9fe"]),
        ("nat64-public.test", &["64:ff9b::5db8:d822"]),
        ("sixtofour.test", &["2002:7f00:1::1"]),
        ("teredo.test", &["2001:0:4136:e378:8000:63bf:3fff:fdd2"]),
        ("ula.test", &["fd00::1"]),
        ("zero.test", &["0.0.0.0"]),
        ("cgnat.test", &["100.64.0.1"]),
        ("private.test", &["10.1.2.3"]),
        ("mixed.test", &["10.1.2.3", "192.168.1.1"]),
        ("1.2.3.4.nip.io", &["1.2.3.4"]),
        ("127.0.0.1.nip.io", &["127.0.0.1"]),
        ("v6.test", &["2606:4700::1111"]),
        ("empty.test", &[]),
        ("api.github.com", &["140.82.112.5"]),
        ("gist.github.com", &["140.82.112.4"]),
    ]);
    let s = server.to_string();
    let dns = |rules: &[&str], t: &str, expect: &str, code: i32| {
        let mut args = vec!["--dns-server", s.as_str()];
        for r in rules {
            args.extend(["--rule", r]);
        }
        args.push(t);
        check(&args, expect, code);
    };
    // The §16.2 / §18.9 lines.
    dns(&["**.github.com"], "api.github.com", r#"allow api.github.com:443 rule="**.github.com""#, 0);
    dns(&["**.github.com", "!gist.github.com"], "gist.github.com", r#"deny gist.github.com:443 reason="policy denial" rule="!gist.github.com""#, 1);
    dns(&["**"], "nosuch.invalid", r#"deny nosuch.invalid:443 reason="dns resolution failed" rule="-" policy="allowed by **""#, 1);
    // A resolution failure denies in every mode: nothing was checked.
    check(&["--dns-server", &s, "--mode", "denylist", "example.org"], r#"deny example.org:443 reason="dns resolution failed" rule="-" policy="allowed by (mode fallback)""#, 1);
    dns(&["**"], "metadata.google.internal:80", &ng("metadata.google.internal:80", "169.254.169.254"), 1);
    dns(&["**"], "METADATA.Google.Internal.", &ng("metadata.google.internal:443", "169.254.169.254"), 1);
    dns(&["**", "0.0.0.0/0"], "metadata.google.internal", &ng("metadata.google.internal:443", "169.254.169.254"), 1);
    dns(&["**", "169.254.169.254"], "metadata.google.internal", r#"allow metadata.google.internal:443 rule="**""#, 0);
    dns(&["**"], "public.test", r#"allow public.test:443 rule="**""#, 0);
    dns(&["**"], "rebind.test", &ng("rebind.test:443", "127.0.0.1"), 1);
    dns(&["**"], "mapped.test", &ng("mapped.test:443", "169.254.169.254"), 1);
    dns(&["**"], "nat64.test", &ng("nat64.test:443", "64:ff9b::a9fe:a9fe"), 1);
    dns(&["**"], "nat64-public.test", r#"allow nat64-public.test:443 rule="**""#, 0);
    dns(&["**"], "sixtofour.test", &ng("sixtofour.test:443", "2002:7f00:1::1"), 1);
    dns(&["**"], "teredo.test", &ng("teredo.test:443", "2001:0:4136:e378:8000:63bf:3fff:fdd2"), 1);
    dns(&["**"], "ula.test", &ng("ula.test:443", "fd00::1"), 1);
    dns(&["**"], "zero.test", &ng("zero.test:443", "0.0.0.0"), 1);
    dns(&["**"], "cgnat.test", &ng("cgnat.test:443", "100.64.0.1"), 1);
    dns(&["**"], "private.test", &ng("private.test:443", "10.1.2.3"), 1);
    dns(&["**", "10.0.0.0/8"], "private.test", r#"allow private.test:443 rule="**""#, 0);
    dns(&["**", "10.0.0.0/8"], "mixed.test", &ng("mixed.test:443", "192.168.1.1"), 1);
    dns(&["**", "10.0.0.0/8:5432"], "private.test:5432", r#"allow private.test:5432 rule="**""#, 0);
    dns(&["**", "10.0.0.0/8:5432"], "private.test:22", &ng("private.test:22", "10.1.2.3"), 1);
    dns(&["**", "!93.184.216.0/24"], "public.test", r#"deny public.test:443 reason="policy denial" rule="!93.184.216.0/24" address=93.184.216.34"#, 1);
    dns(&["**"], "1.2.3.4.nip.io", r#"allow 1.2.3.4.nip.io:443 rule="**""#, 0);
    dns(&["**"], "127.0.0.1.nip.io:8080", &ng("127.0.0.1.nip.io:8080", "127.0.0.1"), 1);
    dns(&["**"], "v6.test", r#"allow v6.test:443 rule="**""#, 0);
    dns(&["**"], "missing.test", r#"deny missing.test:443 reason="dns resolution failed" rule="-" policy="allowed by **""#, 1);
    dns(&["**"], "empty.test", r#"deny empty.test:443 reason="dns resolution failed" rule="-" policy="allowed by **""#, 1);
    // A name the name stage refuses is not resolved: the decision is the policy's.
    dns(&["**", "!missing.test"], "missing.test", r#"deny missing.test:443 reason="policy denial" rule="!missing.test""#, 1);
    dns(&[], "public.test", &no_match("public.test:443"), 1);
    // Denylist and open modes keep the guard.
    check(&["--dns-server", &s, "--mode", "denylist", "metadata.google.internal"], &ng("metadata.google.internal:443", "169.254.169.254"), 1);
    check(&["--dns-server", &s, "--mode", "open", "rebind.test"], &ng("rebind.test:443", "127.0.0.1"), 1);
    // JSON: the resolved addresses, in the order answered, IPv4-mapped answers as IPv4.
    let out = iterion(&["--dns-server", &s, "--json", "--rule", "**", "mapped.test", "public.test", "missing.test"]);
    let lines: Vec<serde_json::Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(
        lines,
        [
            serde_json::json!({"target": "mapped.test", "host": "mapped.test", "port": 443, "decision": "deny", "reason": "non-global address", "rule": "non-global address", "address": "169.254.169.254", "addresses": ["169.254.169.254"]}),
            serde_json::json!({"target": "public.test", "host": "public.test", "port": 443, "decision": "allow", "rule": "**", "addresses": ["93.184.216.34"]}),
            serde_json::json!({"target": "missing.test", "host": "missing.test", "port": 443, "decision": "deny", "reason": "dns resolution failed", "rule": "-", "policy": "allowed by **"}),
        ],
        "{out:?}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_server_that_never_answers_is_a_dns_timeout() {
    // Bound but never read: every query goes unanswered (spec 04 §8.1: 504 `dns timeout` after 5 s).
    let silent = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    let s = silent.local_addr().expect("udp addr").to_string();
    check(
        &["--dns-server", &s, "--rule", "**", "slow.test"],
        r#"deny slow.test:443 reason="dns timeout" rule="-" policy="allowed by **""#,
        1,
    );
    // The name stage decides first: a refused name is never resolved.
    check(
        &["--dns-server", &s, "--rule", "other.test", "slow.test"],
        &no_match("slow.test:443"),
        1,
    );
    drop(silent);
}
