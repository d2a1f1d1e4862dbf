//! An adversarial corpus of SSRF and policy vectors (spec 04 §3–§5, §8), in the spirit of the usual SSRF
//! payload lists: every way of spelling a loopback, private or metadata address, IPv6 embeddings, names that look
//! like addresses, rule-grammar edge cases and last-match-wins orderings. Each expectation is derived from the
//! specification text; where the text is silent the safer outcome is expected and the choice is noted.

mod common;

use common::{check_rule, describe_rule as rule};
use std::net::IpAddr;

use iterion_netpolicy::{Mode, Policy, Rule, SilentDeny, Target};

const A: Mode = Mode::Allowlist;
const D: Mode = Mode::Denylist;
const O: Mode = Mode::Open;

// ---------------------------------------------------------------------------------------------------------------
// Target canonicalisation (§4.1–§4.4), as `iterion netproxy check` reads a target (bare IPv6 accepted, port 443).

fn target(text: &str) -> String {
    match Target::parse_lenient(text, Some(443)) {
        Ok(t) => t.to_string(),
        Err(e) => e.to_string(),
    }
}

#[track_caller]
fn check_target(input: &str, expect: &str) {
    assert_eq!(target(input), expect, "target {input:?}");
}

/// An HTTP authority (CONNECT: the port is mandatory, a bare IPv6 literal is refused).
#[track_caller]
fn check_authority(input: &str, expect: &str) {
    let got = match Target::parse(input, None) {
        Ok(t) => t.to_string(),
        Err(e) => e.to_string(),
    };
    assert_eq!(got, expect, "authority {input:?}");
}

#[test]
#[rustfmt::skip]
fn loopback_in_every_ipv4_spelling() {
    for s in [
        "127.0.0.1", "127.1", "127.0.1", "0177.0.0.1", "0177.1", "0x7f.0.0.1", "0X7F.0.0.1", "0x7f.1",
        "0x7f.0x0.0x0.0x1", "0x7f.0.1", "2130706433", "017700000001", "0x7f000001", "0x7F000001",
        "00000177.0.0.1", "127.000.000.001", "0x0000007f.0.0.1", "127.0.0.1.", "127.1.", "0177.0.0.01",
        "127.0.0x1", "0x7f.00.0.1",
    ] {
        check_target(s, "127.0.0.1:443");
    }
    check_target("127.0.0.1:80", "127.0.0.1:80");
    check_target("0x7f000001:8080", "127.0.0.1:8080");
    check_target("127.1.:22", "127.0.0.1:22");
    check_target("127.255.255.254", "127.255.255.254:443");
    check_target("0x7fffffff", "127.255.255.255:443");
}

#[test]
#[rustfmt::skip]
fn metadata_address_in_every_spelling() {
    for s in [
        "169.254.169.254", "2852039166", "0xa9fea9fe", "0xA9FEA9FE", "0251.0376.0251.0376",
        "0xa9.0xfe.0xa9.0xfe", "169.254.43518", "169.16689662", "025177524776", "0251.254.169.254",
        "169.254.169.254.", "0xa9.254.0251.0xfe", "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]",
        "[0:0:0:0:0:ffff:a9fe:a9fe]", "[::FFFF:A9FE:A9FE]", "::ffff:169.254.169.254", "::ffff:a9fe:a9fe",
        "[0000:0000:0000:0000:0000:ffff:169.254.169.254]",
    ] {
        check_target(s, "169.254.169.254:443");
    }
    check_target("169.254.169.254:80", "169.254.169.254:80");
    check_target("[::ffff:a9fe:a9fe]:80", "169.254.169.254:80");
    // Embeddings other than IPv4-mapped stay IPv6 (they are classified through the IPv4 they carry, §8.4).
    check_target("[64:ff9b::a9fe:a9fe]", "[64:ff9b::a9fe:a9fe]:443");
    check_target("[64:ff9b::169.254.169.254]:80", "[64:ff9b::a9fe:a9fe]:80");
    check_target("[2002:a9fe:a9fe::]", "[2002:a9fe:a9fe::]:443");
}

#[test]
#[rustfmt::skip]
fn other_ipv4_spellings() {
    for s in ["0", "0.0.0.0", "0x0", "00", "0.0", "0.0.0", "0x0.0x0.0x0.0x0", "000.000.000.000", "0."] {
        check_target(s, "0.0.0.0:443");
    }
    for s in ["255.255.255.255", "4294967295", "0xffffffff", "0377.0377.0377.0377", "255.16777215", "255.255.65535"] {
        check_target(s, "255.255.255.255:443");
    }
    check_target("10.1", "10.0.0.1:443");
    check_target("012.0.0.1", "10.0.0.1:443");
    check_target("0xa.0.0.1", "10.0.0.1:443");
    check_target("167772161", "10.0.0.1:443");
    check_target("192.168.1", "192.168.0.1:443");
    check_target("192.11010305", "192.168.1.1:443");
    check_target("192.11010049", "192.168.0.1:443");
    check_target("0xc0a80101", "192.168.1.1:443");
    check_target("3232235777", "192.168.1.1:443");
    check_target("100.64.1", "100.64.0.1:443");
    check_target("1.2.3.4", "1.2.3.4:443");
    // Invalid IPv4 spellings are invalid hosts, never host names (§4.2 step 4).
    for s in [
        "256.1.1.1", "1.256.1.1", "1.1.256.1", "1.1.1.256", "1.2.3.4.5", "08.0.0.1", "09.1", "0x1g.0.0.1",
        "4294967296", "0x100000000", "1.16777216", "1.1.65536", "0400.0.0.1", "0x100.0.0.1", "example.123",
        "example.0x7f", "a.b.c.1", "1..1", ".1.2.3.4", "127.0.0.1..", "1.2.3.+4",
        "99999999999999999999999", "0x7f.0.0.1.0", "１.256.1.1",
    ] {
        check_target(s, "invalid host");
    }
    check_target("1.2.3.4 ", "invalid target");
    check_target(" 1.2.3.4", "invalid target");
}

#[test]
#[rustfmt::skip]
fn full_width_and_ideographic_spellings_of_addresses() {
    // IDNA maps full-width digits, letters and the ideographic full stop to ASCII: the result is read exactly as
    // if it had been written in ASCII, so these are the addresses, never DNS names (spec silent; the safe reading).
    check_target("１２７.０.０.１", "127.0.0.1:443");
    check_target("127。0。0。1", "127.0.0.1:443");
    check_target("１２７．０．０．１", "127.0.0.1:443");
    check_target("127.0.0.1。", "127.0.0.1:443");
    check_target("０ｘ７ｆ.１", "127.0.0.1:443");
    check_target("２１３０７０６４３３", "127.0.0.1:443");
    check_target("１６９.２５４.１６９.２５４", "169.254.169.254:443");
    check_target("１６９.２５４.１６９.２５４:80", "169.254.169.254:80");
    check_target("example.１２３", "invalid host");
    check_target("127.0.0.1.。", "invalid host");
    // One trailing dot is removed (§4.2 step 3), whether written as `.` or as a character IDNA maps to `.`; a
    // second one, in any mix of spellings, is an empty label.
    check_target("127.0.0.1。.", "invalid host");
    check_target("１２７.０.０.１．.", "invalid host");
}

#[test]
#[rustfmt::skip]
fn ipv6_literals() {
    check_target("[::1]", "[::1]:443");
    check_target("[::1]:80", "[::1]:80");
    check_target("::1", "[::1]:443");
    check_target("[0:0:0:0:0:0:0:1]", "[::1]:443");
    check_target("[0000:0000:0000:0000:0000:0000:0000:0001]:8080", "[::1]:8080");
    check_target("[::]", "[::]:443");
    check_target("::", "[::]:443");
    check_target("[FE80::1]", "[fe80::1]:443");
    check_target("[2001:DB8:0:0:0:0:0:1]", "[2001:db8::1]:443");
    check_target("[2001:db8::1]:65535", "[2001:db8::1]:65535");
    check_target("[::ffff:127.0.0.1]", "127.0.0.1:443");
    check_target("[::ffff:7f00:1]", "127.0.0.1:443");
    check_target("::ffff:7f00:1", "127.0.0.1:443");
    check_target("[::ffff:0:0]", "0.0.0.0:443");
    check_target("[::ffff:10.0.0.1]:5432", "10.0.0.1:5432");
    check_target("[64:ff9b::7f00:1]", "[64:ff9b::7f00:1]:443");
    check_target("[2002:7f00:1::]", "[2002:7f00:1::]:443");
    check_target("[fd00::1]", "[fd00::1]:443");
    // Zone ids (raw or percent-encoded) are refused (§4.2 step 2).
    for s in [
        "[fe80::1%eth0]", "[fe80::1%25eth0]", "[fe80::1%25eth0]:443", "fe80::1%eth0", "fe80::1%25eth0",
        "[fe80::1%1]:80", "[::1%lo]",
    ] {
        check_target(s, "invalid host");
    }
    // Malformed brackets and literals.
    check_target("[::1]:", "invalid port");
    check_target("[::1]:0", "invalid port");
    check_target("[::1]:65536", "invalid port");
    check_target("[::1]:080", "invalid port");
    check_target("[::1]x", "invalid target");
    check_target("[::1]:80x", "invalid port");
    check_target("[::1", "invalid target");
    check_target("[::1]]", "invalid target");
    check_target("[[::1]]", "invalid target");
    for s in [
        "[127.0.0.1]", "[localhost]", "[]", "[]:80", "[::g]", "[1:2:3:4:5:6:7:8:9]", "[::ffff:0177.0.0.1]",
        "[::ffff:127.1]", "[00064:ff9b::1]", "::1]", "[user@::1]",
    ] {
        check_target(s, "invalid host");
    }
}

#[test]
#[rustfmt::skip]
fn authorities_must_bracket_ipv6_and_carry_a_port() {
    check_authority("[::1]:443", "[::1]:443");
    check_authority("::1", "invalid host");
    check_authority("::ffff:127.0.0.1", "invalid host");
    check_authority("64:ff9b::a9fe:a9fe", "invalid host");
    check_authority("[::1]", "port required");
    check_authority("127.1", "port required");
    check_authority("127.1:80", "127.0.0.1:80");
    check_authority("2130706433:80", "127.0.0.1:80");
}

#[test]
#[rustfmt::skip]
fn host_names() {
    for s in ["localhost", "LOCALHOST", "localhost.", "LocalHost.", "ｌｏｃａｌｈｏｓｔ", "ＬＯＣＡＬＨＯＳＴ"] {
        check_target(s, "localhost:443");
    }
    check_target("localhost..", "invalid host");
    for s in ["localhost。.", "localhost．.", "localhost.。", "localhost。。", "example.com｡.", "example.com。:443"] {
        let expect = if s.ends_with(":443") { "example.com:443" } else { "invalid host" };
        check_target(s, expect);
    }
    check_target("ｅxample.com", "example.com:443");
    check_target("example。com", "example.com:443");
    check_target("EXAMPLE.COM.", "example.com:443");
    check_target("bücher.example", "xn--bcher-kva.example:443");
    check_target("BÜCHER.example", "xn--bcher-kva.example:443");
    check_target("xn--bcher-kva.example", "xn--bcher-kva.example:443");
    check_target("XN--BCHER-KVA.EXAMPLE", "xn--bcher-kva.example:443");
    // UTS #46 non-transitional processing: `ß` is kept (not mapped to `ss`); joiner and bidi checks are on; soft
    // hyphens are ignored.
    check_target("faß.de", "xn--fa-hia.de:443");
    check_target("FASS.de", "fass.de:443");
    check_target("exam\u{ad}ple.com", "example.com:443");
    check_target("a\u{200d}b.example", "invalid host");
    check_target("a\u{200c}b.example", "invalid host");
    check_target("\u{5d0}a.example", "invalid host");
    check_target("xn--.example", "invalid host");
    check_target("xn--a.example", "invalid host");
    check_target("metadata.google.internal", "metadata.google.internal:443");
    check_target("metadata.google.internal.:80", "metadata.google.internal:80");
    check_target("metadata", "metadata:443");
    // Names that look like addresses are names (they do not end in a number).
    check_target("1.2.3.4.nip.io", "1.2.3.4.nip.io:443");
    check_target("127.0.0.1.nip.io:80", "127.0.0.1.nip.io:80");
    check_target("169.254.169.254.xip.io", "169.254.169.254.xip.io:443");
    check_target("0x7f.example", "0x7f.example:443");
    check_target("123.example", "123.example:443");
    check_target("7f000001.example", "7f000001.example:443");
    check_target("deadbeef", "deadbeef:443");
    check_target("0xgg", "0xgg:443");
    check_target("_dmarc.example.com", "_dmarc.example.com:443");
    // The last label is not a number: these are names, whatever their other labels look like.
    check_target("1.2.3.-4", "1.2.3.-4:443");
    check_target("1.2.3.4e0", "1.2.3.4e0:443");
    check_target("-bad-.com", "-bad-.com:443");
    check_target("a-b.c-d.example", "a-b.c-d.example:443");
    // Userinfo, percent-encoding, wildcards and other characters are invalid hosts.
    for s in [
        "user@example.com", "user@example.com:443", "user:pass@example.com:443", "@example.com", "example.com@",
        "evil.com@169.254.169.254", "169.254.169.254@evil.com", "%65xample.com", "example.com%00",
        "example.com%2f", "*.localhost", "*.example.com", "**", "exa$mple.com", "exa!mple.com",
        "exa*mple.com", "a\\b.com", "a,b.com", "a\"b.com", "a<b>.com", "a/b.com", "a?b.com", "a#b.com",
        "example.com/", "example.com/path", "example.com#@evil.com", "example.com\\@evil.com",
        "exa;mple.com", "a..b", "..", ".", ".example.com", "example..com", "", "user＠example.com",
        "example.com：443", "example.com／x", "a｜b.com",
    ] {
        check_target(s, "invalid host");
    }
    for s in [
        " example.com", "example.com ", "exa mple.com", "example.com\n", "example.com\r\nX: y", "exa\tmple.com",
        "example.com\0", "exa\u{a0}mple.com", "exa\u{3000}mple.com", "\u{7f}example.com", "exa\u{85}mple.com",
        "exa\u{2028}mple.com",
    ] {
        check_target(s, "invalid target");
    }
    // URLs are not targets.
    check_target("http://example.com", "invalid port");
    check_target("http://169.254.169.254/", "invalid port");
    check_target("example.com:443/path", "invalid port");
}

#[test]
#[rustfmt::skip]
fn name_lengths() {
    let label_63 = "a".repeat(63);
    let label_64 = "a".repeat(64);
    check_target(&format!("{label_63}.com"), &format!("{label_63}.com:443"));
    check_target(&format!("{label_64}.com"), "invalid host");
    check_target(&format!("www.{label_64}"), "invalid host");
    // 4 × 63 + 1 = 253 bytes: the longest name; with one trailing dot still accepted.
    let name_253 = format!("{label_63}.{label_63}.{label_63}.{}", "a".repeat(61));
    assert_eq!(name_253.len(), 253);
    check_target(&name_253, &format!("{name_253}:443"));
    check_target(&format!("{name_253}."), &format!("{name_253}:443"));
    check_target(&format!("{name_253}.."), "invalid host");
    check_target(&format!("a{name_253}"), "invalid host");
    check_target(&format!("{name_253}.a"), "invalid host");
    // The limits apply after IDNA: a short Unicode label whose punycode is longer than 63 bytes is refused.
    // 19 CJK characters are 57 bytes of UTF-8 but 64 bytes of punycode (`xn--` included).
    check_target("貮凉訒厐畽鲲駭頁聡揎掔蹉欌侓枉錒鐯殷臅.example", "invalid host");
    check_target("饤剫譸洒膿茈搥糽鐿緶夑蘯輔寐拴邮聖絭.example", "xn--gerx5njoc62krqby10ab90ayzae9a23mjne2ye49m8ssiymrhgj1qdrw.example:443");
}

#[test]
#[rustfmt::skip]
fn ports() {
    check_target("example.com:1", "example.com:1");
    check_target("example.com:65535", "example.com:65535");
    for s in [
        "example.com:", "example.com:0", "example.com:00", "example.com:0443", "example.com:65536",
        "example.com:99999", "example.com:4294967739", "example.com:+443", "example.com:-1",
        "example.com:abc", "example.com:443a", "example.com:0x1bb", "example.com:４４３", "127.1:", "127.1:0",
    ] {
        check_target(s, "invalid port");
    }
    check_target(":443", "invalid host");
    check_target("example.com:443:80", "invalid host");
}

// ---------------------------------------------------------------------------------------------------------------
// Rule grammar (§3)

#[test]
#[rustfmt::skip]
fn rule_address_spellings() {
    for s in ["127.0.0.1", "127.1", "0177.0.0.1", "0x7f.0.0.1", "0X7F.0.0.1", "2130706433", "017700000001",
        "0x7f000001", "127.0.0.1.", "::ffff:127.0.0.1", "[::ffff:127.0.0.1]", "::ffff:7f00:1", "１２７.０.０.１"]
    {
        check_rule(s, "ip 127.0.0.1");
    }
    for s in ["169.254.169.254", "2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "[::ffff:a9fe:a9fe]"] {
        check_rule(s, "ip 169.254.169.254");
    }
    check_rule("!0xa9fea9fe", "negated ip 169.254.169.254");
    check_rule("127.1:22", "ip 127.0.0.1 port 22");
    check_rule("0:80", "ip 0.0.0.0 port 80");
    check_rule("::1", "ip ::1");
    check_rule("[::1]", "ip ::1");
    check_rule("[::1]:443", "ip ::1 port 443");
    check_rule("::1:443", "ip ::1:443");
    check_rule("[0:0::1]", "ip ::1");
    check_rule("64:ff9b::a9fe:a9fe", "ip 64:ff9b::a9fe:a9fe");
    check_rule("[FD00:EC2::254]", "ip fd00:ec2::254");
    for s in ["256.1.1.1", "1.2.3.4.5", "08.0.0.1", "0x1g.0.0.1", "4294967296", "example.123", "example.0x1f",
        "*.127.0.0.1", "**.1.2.3.4", "a.1"]
    {
        check_rule(s, "E_IPV4");
    }
    for s in ["fe80::1%eth0", "fe80::1%25eth0", "[fe80::1%eth0]", "[fe80::1%25eth0]:443", "[::1]443", "[[::1]]",
        "::1]", "[::1", "[1.2.3.4]", "[1.2.3.4]:80", "[example.com]", "::g", "1:2:3:4:5:6:7:8:9", "github.com:443:80",
        "[]", "[]:80", "[::ffff:0177.0.0.1]"]
    {
        check_rule(s, "E_SYNTAX");
    }
    check_rule("[::1]:", "E_PORT");
    check_rule("[::1]:0", "E_PORT");
    check_rule("[::1]:65536", "E_PORT");
}

#[test]
#[rustfmt::skip]
fn rule_cidrs() {
    check_rule("0.0.0.0/0", "cidr 0.0.0.0/0");
    check_rule("::/0", "cidr ::/0");
    check_rule("[::/0]", "cidr ::/0");
    check_rule("1.2.3.4/32", "cidr 1.2.3.4/32");
    check_rule("169.254.169.254/32", "cidr 169.254.169.254/32");
    check_rule("::1/128", "cidr ::1/128");
    check_rule("fc00::/7", "cidr fc00::/7");
    check_rule("[fe80::/10]:22", "cidr fe80::/10 port 22");
    check_rule("!10.0.0.0/8:5432", "negated cidr 10.0.0.0/8 port 5432");
    check_rule("::ffff:0:0/96", "cidr 0.0.0.0/0");
    check_rule("::ffff:169.254.169.254/128", "cidr 169.254.169.254/32");
    check_rule("64:ff9b::/96", "cidr 64:ff9b::/96");
    for s in ["10.0.0.1/8", "fd00::/7", "fd00::1/8", "10.0.0.0/33", "::/129", "10.0.0.0/08", "10.0.0.0/8/8",
        "10.0.0.0/8.0", "010.0.0.0/8", "0x0a.0.0.0/8", "10.0.0/8", "10/8", "10.0.0.0./8", "127.1/32",
        "2130706433/32", "10.0.0.0/1234", "a.com/8", "10.0.0.0/99", "[10.0.0.0/8]"]
    {
        assert!(rule(s) == "E_CIDR" || rule(s) == "E_SYNTAX", "rule {s:?}: {}", rule(s));
    }
    check_rule("10.0.0.1/8", "E_CIDR");
    check_rule("10.0.0.0/8/8", "E_CIDR");
    check_rule("127.1/32", "E_CIDR");
    check_rule("fd00::/7", "E_CIDR");
    assert_eq!(
        Rule::parse("192.168.1.1/16").map(|_| ()).unwrap_err().to_string(),
        "host bits set; did you mean 192.168.0.0/16?"
    );
    assert_eq!(
        Rule::parse("fd00::1/8").map(|_| ()).unwrap_err().to_string(),
        "host bits set; did you mean fd00::/8?"
    );
    for s in ["10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/a", "10.0.0.0/ 8"] {
        assert!(Rule::parse(s).is_err(), "rule {s:?} must not parse");
    }
}

#[test]
#[rustfmt::skip]
fn rule_names_and_wildcards() {
    for s in ["localhost", "LOCALHOST", "localhost.", "  localhost  ", "\tlocalhost\n", "ｌｏｃａｌｈｏｓｔ"] {
        check_rule(s, "exact localhost");
    }
    check_rule("!  LOCALHOST.", "negated exact localhost");
    check_rule("localhost。", "exact localhost");
    check_rule("*.example.com。", "one-label example.com");
    for s in ["localhost。.", "localhost．.", "localhost.。", "**.example.com。.", "*.example.com．."] {
        check_rule(s, "E_HOST");
    }
    check_rule("ｅxample.com", "exact example.com");
    check_rule("BÜCHER.example", "exact xn--bcher-kva.example");
    check_rule("1.2.3.4.nip.io", "exact 1.2.3.4.nip.io");
    check_rule("*.1.2.3.4.nip.io", "one-label 1.2.3.4.nip.io");
    check_rule("**.EXAMPLE.com.", "multi-label example.com");
    check_rule("*.example.com.", "one-label example.com");
    check_rule("**.localhost", "multi-label localhost");
    check_rule("*.localhost:8080", "one-label localhost port 8080");
    check_rule("**:443", "any-name port 443");
    check_rule("!**", "negated any-name");
    check_rule("_dmarc.example.com", "exact _dmarc.example.com");
    check_rule("1.2.3.-4", "exact 1.2.3.-4");
    // `/` followed by a digit is a CIDR (§3.2 step 3 rejects only a non-digit path).
    check_rule("example.com/8a", "E_CIDR");
    check_rule("*:443", "E_BARE_STAR");
    check_rule("!*", "E_BARE_STAR");
    for s in ["*.", "**.", "*..", "**..", "!*.", "**.:443"] {
        check_rule(s, "E_WILDCARD_SUFFIX");
    }
    for s in ["***", "***.x.com", "**example.com", "*example.com", "example.*", "ex*.com", "*.*", "**.**",
        "*.**.com", "a.*.com", "*.ex*.com", "**.*", "*-*.com", "x.com*"]
    {
        check_rule(s, "E_WILDCARD");
    }
    for s in ["a..b.com", ".example.com", "example.com..", "exa$mple.com", "!!github.com", "exa\"mple.com",
        "a,b.com", "a\\b.com", "a<b.com", "user＠example.com", "example.com：443", "**.a..b", "*..example.com"]
    {
        check_rule(s, "E_HOST");
    }
    check_rule(&format!("{}.com", "a".repeat(64)), "E_HOST");
    check_rule(&format!("{}.com", "a".repeat(63)), &format!("exact {}.com", "a".repeat(63)));
    for s in ["", "   ", "\t"] {
        check_rule(s, "E_EMPTY");
    }
    for s in ["!", "! ", "!\t", " ! "] {
        check_rule(s, "E_NEGATION");
    }
    for s in ["http://example.com", "https://x", "//example.com", "example.com/", "example.com/a",
        "user@example.com", "@example.com", "example.com?", "example.com#", "x%2ecom",
        "%", "exa mple.com", "example.com :443", "example.com\u{0}", "exa\u{a0}mple.com", "exa\u{3000}mple.com",
        "! http://x", "example.com:443/x", "10.0.0.0/8?x"]
    {
        check_rule(s, "E_NOT_A_HOST");
    }
    for s in ["example.com:", "example.com:0", "example.com:00", "example.com:0443", "example.com:65536",
        "example.com:+1", "example.com:-1", "example.com:1e3", "example.com:４４３", "*.example.com:",
        "**:0", "10.0.0.0/8:"]
    {
        check_rule(s, "E_PORT");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Decisions: the `check` line of §16.2 for both stages. `answer` is what a resolver returned for a name target;
// `None` decides a name on the policy alone (`--no-resolve`). IP literals always get the address stage.

fn line(mode: Mode, presets: &[&str], rules: &[&str], target: &str, answer: Option<&[&str]>) -> String {
    let policy = Policy::compile(mode, presets, rules).expect("policy compiles");
    let target = match Target::parse_lenient(target, Some(443)) {
        Ok(t) => t,
        Err(e) => return format!("invalid ({e})"),
    };
    let answer: Option<Vec<IpAddr>> =
        answer.map(|a| a.iter().map(|s| s.parse().expect("answer parses")).collect());
    policy.decide(&target, answer.as_deref(), &[]).to_string()
}

#[track_caller]
fn check_line(mode: Mode, rules: &[&str], target: &str, answer: Option<&[&str]>, expect: &str) {
    assert_eq!(
        line(mode, &[], rules, target, answer),
        expect,
        "{mode} {rules:?} {target} {answer:?}"
    );
}

#[track_caller]
fn check_literal(mode: Mode, rules: &[&str], target: &str, expect: &str) {
    check_line(mode, rules, target, None, expect);
}

fn ng(target: &str, address: &str) -> String {
    format!(r#"deny {target} reason="non-global address" rule="non-global address" address={address}"#)
}

fn no_match(target: &str) -> String {
    format!(r#"deny {target} reason="policy denial" rule="no rule matched""#)
}

fn fallback(target: &str) -> String {
    format!(r#"allow {target} rule="(mode fallback)""#)
}

#[test]
#[rustfmt::skip]
fn every_non_global_ipv4_literal_is_refused_in_every_mode() {
    let cases = [
        ("127.1", "127.0.0.1"), ("0x7f000001", "127.0.0.1"), ("017700000001", "127.0.0.1"),
        ("127.255.255.255", "127.255.255.255"), ("0", "0.0.0.0"), ("0.0.0.0", "0.0.0.0"), ("0.1.2.3", "0.1.2.3"),
        ("10.0.0.1", "10.0.0.1"), ("10.255.255.255", "10.255.255.255"), ("012.1", "10.0.0.1"),
        ("172.16.0.0", "172.16.0.0"), ("172.31.255.255", "172.31.255.255"), ("192.168.0.1", "192.168.0.1"),
        ("0xc0a80001", "192.168.0.1"), ("100.64.0.1", "100.64.0.1"), ("100.127.255.255", "100.127.255.255"),
        ("169.254.0.1", "169.254.0.1"), ("169.254.255.255", "169.254.255.255"), ("192.0.0.8", "192.0.0.8"),
        ("192.0.2.1", "192.0.2.1"), ("192.88.99.1", "192.88.99.1"), ("198.18.0.1", "198.18.0.1"),
        ("198.19.255.255", "198.19.255.255"), ("198.51.100.1", "198.51.100.1"), ("203.0.113.1", "203.0.113.1"),
        ("224.0.0.1", "224.0.0.1"), ("239.255.255.250", "239.255.255.250"), ("240.0.0.1", "240.0.0.1"),
        ("255.255.255.255", "255.255.255.255"), ("4294967295", "255.255.255.255"),
        // Metadata endpoints, in several spellings.
        ("169.254.169.254", "169.254.169.254"), ("2852039166", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"), ("0251.0376.0251.0376", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"), ("169.254.170.2", "169.254.170.2"),
        ("169.254.169.253", "169.254.169.253"), ("169.254.169.123", "169.254.169.123"),
        ("168.63.129.16", "168.63.129.16"), ("100.100.100.200", "100.100.100.200"),
        ("192.0.0.192", "192.0.0.192"),
    ];
    for (spelling, address) in cases {
        for port in [80, 443, 8080] {
            let t = format!("{spelling}:{port}");
            let shown = format!("{address}:{port}");
            check_literal(D, &[], &t, &ng(&shown, address));
            check_literal(O, &[], &t, &ng(&shown, address));
            // Allowlist: `**` never matches an IP literal (§5.3).
            check_literal(A, &["**"], &t, &no_match(&shown));
            // `0.0.0.0/0` passes the name stage but is not an explicit rule for a non-global network (§8.3).
            check_literal(A, &["0.0.0.0/0"], &t, &ng(&shown, address));
            check_literal(A, &["**", "0.0.0.0/0", "::/0"], &t, &ng(&shown, address));
        }
    }
}

#[test]
#[rustfmt::skip]
fn non_global_ipv6_literals_are_refused() {
    let cases = [
        ("[::1]", "::1"), ("::1", "::1"), ("[0:0:0:0:0:0:0:1]", "::1"), ("[::]", "::"), ("::", "::"),
        ("[::ffff:127.0.0.1]", "127.0.0.1"), ("[::ffff:7f00:1]", "127.0.0.1"), ("::ffff:7f00:1", "127.0.0.1"),
        ("[::ffff:0:0]", "0.0.0.0"), ("[::ffff:a9fe:a9fe]", "169.254.169.254"),
        ("[::ffff:10.0.0.1]", "10.0.0.1"), ("[::ffff:192.168.1.1]", "192.168.1.1"),
        ("[::ffff:100.64.0.1]", "100.64.0.1"), ("[::ffff:255.255.255.255]", "255.255.255.255"),
        // Deprecated IPv4-compatible addresses are non-global whatever they carry.
        ("[::127.0.0.1]", "::7f00:1"), ("[::8.8.8.8]", "::808:808"), ("[::2]", "::2"), ("[::a9fe:a9fe]", "::a9fe:a9fe"),
        // NAT64 well-known prefix: classified through the embedded IPv4.
        ("[64:ff9b::7f00:1]", "64:ff9b::7f00:1"), ("[64:ff9b::127.0.0.1]", "64:ff9b::7f00:1"),
        ("[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"), ("[64:ff9b::a00:1]", "64:ff9b::a00:1"),
        ("[64:ff9b::]", "64:ff9b::"), ("[64:ff9b::ffff:ffff]", "64:ff9b::ffff:ffff"),
        ("[64:ff9b::c0a8:101]", "64:ff9b::c0a8:101"),
        // NAT64 local use is non-global whatever it embeds.
        ("[64:ff9b:1::808:808]", "64:ff9b:1::808:808"), ("[64:ff9b:1:ffff::1]", "64:ff9b:1:ffff::1"),
        // 6to4: classified through bits 16–47.
        ("[2002:7f00:1::]", "2002:7f00:1::"), ("[2002:7f00:1::1]", "2002:7f00:1::1"),
        ("[2002:a9fe:a9fe::]", "2002:a9fe:a9fe::"), ("[2002:a00:1::]", "2002:a00:1::"),
        ("[2002::]", "2002::"), ("[2002:c0a8:101:1::1]", "2002:c0a8:101:1::1"),
        // Teredo is non-global whatever it embeds (here an obfuscated 8.8.8.8 client and server 65.54.227.120).
        ("[2001:0:4136:e378:8000:63bf:3fff:fdd2]", "2001:0:4136:e378:8000:63bf:3fff:fdd2"),
        ("[2001::]", "2001::"), ("[2001:0:808:808::f7f7:f7f7]", "2001:0:808:808::f7f7:f7f7"),
        ("[2001:0::ffff:ffff]", "2001::ffff:ffff"),
        ("[2001:2::1]", "2001:2::1"), ("[2001:10::1]", "2001:10::1"), ("[2001:1f:ffff::1]", "2001:1f:ffff::1"),
        ("[2001:db8::1]", "2001:db8::1"), ("[2001:db8:ffff::1]", "2001:db8:ffff::1"),
        ("[3fff::1]", "3fff::1"), ("[3fff:fff::1]", "3fff:fff::1"), ("[5f00::1]", "5f00::1"),
        ("[100::1]", "100::1"), ("[100::ffff:ffff:ffff:ffff]", "100::ffff:ffff:ffff:ffff"),
        ("[fc00::1]", "fc00::1"), ("[fd00::1]", "fd00::1"), ("[fdff:ffff::1]", "fdff:ffff::1"),
        ("[fd00:ec2::254]", "fd00:ec2::254"), ("[fd00:ec2::23]", "fd00:ec2::23"),
        ("[fe80::1]", "fe80::1"), ("[febf:ffff::1]", "febf:ffff::1"), ("[fec0::1]", "fec0::1"),
        ("[ff02::1]", "ff02::1"), ("[ff05::1:3]", "ff05::1:3"), ("[ff0e::1]", "ff0e::1"),
        ("[4000::1]", "4000::1"), ("[1000::1]", "1000::1"), ("[100:0:0:1::1]", "100:0:0:1::1"),
        ("[e000::1]", "e000::1"), ("[::ffff:0:7f00:1]", "::ffff:0:7f00:1"),
    ];
    for (spelling, address) in cases {
        let shown = match address.parse::<IpAddr>().expect("address") {
            IpAddr::V4(_) => format!("{address}:443"),
            IpAddr::V6(_) => format!("[{address}]:443"),
        };
        check_literal(D, &[], spelling, &ng(&shown, address));
        check_literal(O, &[], spelling, &ng(&shown, address));
        check_literal(A, &["**"], spelling, &no_match(&shown));
        check_literal(A, &["::/0", "0.0.0.0/0"], spelling, &ng(&shown, address));
    }
}

#[test]
#[rustfmt::skip]
fn global_literals_pass_the_address_stage() {
    for t in ["8.8.8.8", "1.1.1.1", "134744072", "0x08080808", "010.010.010.010", "172.32.0.1", "172.15.255.255",
        "100.128.0.1", "100.63.255.255", "169.253.255.255", "169.255.0.1", "192.0.1.1", "192.0.3.1",
        "192.88.98.1", "192.169.0.1", "198.17.255.255", "198.20.0.1", "198.51.99.1", "203.0.112.1",
        "223.255.255.255", "11.0.0.1", "1.0.0.0", "[::ffff:8.8.8.8]", "::ffff:808:808"]
    {
        let shown = Target::parse_lenient(t, Some(443)).expect("parses").to_string();
        check_literal(D, &[], t, &fallback(&shown));
        check_literal(O, &[], t, &fallback(&shown));
        check_literal(A, &["0.0.0.0/0"], t, &format!(r#"allow {shown} rule="0.0.0.0/0""#));
        check_literal(A, &["**"], t, &no_match(&shown));
    }
    for t in ["[2606:4700:4700::1111]", "[2a00:1450:4007:80e::200e]", "[64:ff9b::808:808]", "[64:ff9b::8.8.8.8]",
        "[2002:808:808::1]", "[3fff:1000::1]", "[2001:20::1]", "[2001:4860:4860::8888]", "[2c0f:fb50:4003::1]"]
    {
        let shown = Target::parse_lenient(t, Some(443)).expect("parses").to_string();
        check_literal(D, &[], t, &fallback(&shown));
        check_literal(A, &["::/0"], t, &format!(r#"allow {shown} rule="::/0""#));
        check_literal(A, &["0.0.0.0/0"], t, &no_match(&shown));
    }
}

#[test]
#[rustfmt::skip]
fn explicit_rules_for_non_global_literals() {
    check_literal(A, &["127.0.0.1"], "127.1:8080", r#"allow 127.0.0.1:8080 rule="127.0.0.1""#);
    check_literal(A, &["127.0.0.0/8"], "2130706433:80", r#"allow 127.0.0.1:80 rule="127.0.0.0/8""#);
    check_literal(A, &["127.1"], "0x7f.0.0.1", r#"allow 127.0.0.1:443 rule="127.1""#);
    check_literal(A, &["::ffff:127.0.0.1"], "127.0.0.1", r#"allow 127.0.0.1:443 rule="::ffff:127.0.0.1""#);
    check_literal(A, &["127.0.0.1"], "[::ffff:7f00:1]:80", r#"allow 127.0.0.1:80 rule="127.0.0.1""#);
    check_literal(A, &["127.0.0.0/16"], "127.0.0.1", r#"allow 127.0.0.1:443 rule="127.0.0.0/16""#);
    check_literal(A, &["126.0.0.0/7"], "127.0.0.1", &ng("127.0.0.1:443", "127.0.0.1"));
    check_literal(A, &["10.0.0.0/8"], "10.1", r#"allow 10.0.0.1:443 rule="10.0.0.0/8""#);
    check_literal(A, &["10.0.0.0/7"], "10.0.0.1", &ng("10.0.0.1:443", "10.0.0.1"));
    check_literal(A, &["172.16.0.0/12"], "172.31.1.1", r#"allow 172.31.1.1:443 rule="172.16.0.0/12""#);
    check_literal(A, &["172.0.0.0/11"], "172.31.1.1", &ng("172.31.1.1:443", "172.31.1.1"));
    check_literal(A, &["100.64.0.0/10"], "100.64.0.1", r#"allow 100.64.0.1:443 rule="100.64.0.0/10""#);
    check_literal(A, &["198.18.0.0/15"], "198.19.0.1", r#"allow 198.19.0.1:443 rule="198.18.0.0/15""#);
    check_literal(A, &["::1"], "[::1]:8080", r#"allow [::1]:8080 rule="::1""#);
    check_literal(A, &["::/0"], "[::1]", &ng("[::1]:443", "::1"));
    check_literal(A, &["fd00::/8"], "[fd00::1]", r#"allow [fd00::1]:443 rule="fd00::/8""#);
    check_literal(A, &["fc00::/7"], "[fd12::1]", r#"allow [fd12::1]:443 rule="fc00::/7""#);
    check_literal(A, &["fc00::/6"], "[fd12::1]", &ng("[fd12::1]:443", "fd12::1"));
    check_literal(A, &["fe80::/10"], "[fe80::1]", r#"allow [fe80::1]:443 rule="fe80::/10""#);
    // Metadata needs a rule naming exactly that address (§8.2 step 6).
    check_literal(A, &["169.254.169.254"], "0xa9fea9fe:80", r#"allow 169.254.169.254:80 rule="169.254.169.254""#);
    check_literal(A, &["169.254.169.254/32"], "2852039166", r#"allow 169.254.169.254:443 rule="169.254.169.254/32""#);
    check_literal(A, &["0xa9fea9fe"], "169.254.169.254", r#"allow 169.254.169.254:443 rule="0xa9fea9fe""#);
    check_literal(A, &["169.254.0.0/16"], "169.254.169.254", &ng("169.254.169.254:443", "169.254.169.254"));
    check_literal(A, &["169.254.169.254/31"], "169.254.169.254", &ng("169.254.169.254:443", "169.254.169.254"));
    check_literal(A, &["169.254.0.0/16"], "169.254.1.1", r#"allow 169.254.1.1:443 rule="169.254.0.0/16""#);
    check_literal(A, &["168.63.129.16"], "168.63.129.16", r#"allow 168.63.129.16:443 rule="168.63.129.16""#);
    check_literal(A, &["168.63.0.0/16"], "168.63.129.16", &ng("168.63.129.16:443", "168.63.129.16"));
    check_literal(A, &["192.0.0.0/24"], "192.0.0.192", &ng("192.0.0.192:443", "192.0.0.192"));
    check_literal(A, &["100.64.0.0/10"], "100.100.100.200", &ng("100.100.100.200:443", "100.100.100.200"));
    check_literal(A, &["fd00:ec2::254"], "[fd00:ec2::254]", r#"allow [fd00:ec2::254]:443 rule="fd00:ec2::254""#);
    check_literal(A, &["fd00::/8"], "[fd00:ec2::254]", &ng("[fd00:ec2::254]:443", "fd00:ec2::254"));
    check_literal(A, &["fd00:ec2::/64"], "[fd00:ec2::23]", &ng("[fd00:ec2::23]:443", "fd00:ec2::23"));
    // A literal embedding an address is not the same literal at the name stage: an IPv4 rule does not match a
    // NAT64 or 6to4 literal, and an IPv6 range covering the literal is not explicit for the IPv4 it carries.
    check_literal(A, &["169.254.169.254"], "[64:ff9b::a9fe:a9fe]", &no_match("[64:ff9b::a9fe:a9fe]:443"));
    check_literal(A, &["64:ff9b::/96"], "[64:ff9b::a9fe:a9fe]", &ng("[64:ff9b::a9fe:a9fe]:443", "64:ff9b::a9fe:a9fe"));
    check_literal(A, &["64:ff9b::/96"], "[64:ff9b::a00:1]", &ng("[64:ff9b::a00:1]:443", "64:ff9b::a00:1"));
    check_literal(A, &["64:ff9b::/96"], "[64:ff9b::808:808]", r#"allow [64:ff9b::808:808]:443 rule="64:ff9b::/96""#);
    check_literal(A, &["2002::/16"], "[2002:7f00:1::]", &ng("[2002:7f00:1::]:443", "2002:7f00:1::"));
    check_literal(A, &["2001::/32"], "[2001::1]", r#"allow [2001::1]:443 rule="2001::/32""#);
    check_literal(A, &["2000::/3"], "[2001::1]", &ng("[2001::1]:443", "2001::1"));
}

#[test]
#[rustfmt::skip]
fn ip_rules_last_match_wins_and_port_scoping() {
    check_literal(D, &["!169.254.169.254"], "0251.0376.0251.0376:80", r#"deny 169.254.169.254:80 reason="policy denial" rule="!169.254.169.254""#);
    check_literal(D, &["!169.254.169.254"], "[::ffff:a9fe:a9fe]", r#"deny 169.254.169.254:443 reason="policy denial" rule="!169.254.169.254""#);
    check_literal(D, &["!0.0.0.0/0"], "8.8.8.8", r#"deny 8.8.8.8:443 reason="policy denial" rule="!0.0.0.0/0""#);
    check_literal(D, &["!0.0.0.0/0"], "[::ffff:8.8.8.8]", r#"deny 8.8.8.8:443 reason="policy denial" rule="!0.0.0.0/0""#);
    check_literal(D, &["!0.0.0.0/0"], "[2606:4700::1]", &fallback("[2606:4700::1]:443"));
    check_literal(D, &["!::/0"], "[2606:4700::1]", r#"deny [2606:4700::1]:443 reason="policy denial" rule="!::/0""#);
    check_literal(D, &["!10.0.0.0/8", "10.1.0.0/16"], "10.1.2.3", r#"allow 10.1.2.3:443 rule="10.1.0.0/16""#);
    check_literal(D, &["10.1.0.0/16", "!10.0.0.0/8"], "10.1.2.3", r#"deny 10.1.2.3:443 reason="policy denial" rule="!10.0.0.0/8""#);
    check_literal(A, &["127.0.0.1", "!127.0.0.1"], "127.1", r#"deny 127.0.0.1:443 reason="policy denial" rule="!127.0.0.1""#);
    check_literal(A, &["!127.0.0.1", "127.0.0.1"], "127.1", r#"allow 127.0.0.1:443 rule="127.0.0.1""#);
    check_literal(A, &["10.0.0.0/8:5432"], "10.0.0.5:5432", r#"allow 10.0.0.5:5432 rule="10.0.0.0/8:5432""#);
    check_literal(A, &["10.0.0.0/8:5432"], "10.0.0.5:22", &no_match("10.0.0.5:22"));
    check_literal(A, &["10.0.0.0/8:5432"], "10.0.0.5", &no_match("10.0.0.5:443"));
    check_literal(A, &["[fd00::/8]:5432"], "[fd00::5]:5432", r#"allow [fd00::5]:5432 rule="[fd00::/8]:5432""#);
    check_literal(A, &["[fd00::/8]:5432"], "[fd00::5]:5433", &no_match("[fd00::5]:5433"));
    check_literal(A, &["[::1]:8080"], "[::1]:8080", r#"allow [::1]:8080 rule="[::1]:8080""#);
    check_literal(A, &["0.0.0.0/0", "127.0.0.1:8080"], "127.1:8080", r#"allow 127.0.0.1:8080 rule="127.0.0.1:8080""#);
    check_literal(A, &["127.0.0.1:8080", "0.0.0.0/0"], "127.1:8080", &ng("127.0.0.1:8080", "127.0.0.1"));
    check_literal(A, &["0.0.0.0/0", "127.0.0.1:8080"], "127.1:8081", &ng("127.0.0.1:8081", "127.0.0.1"));
    check_literal(D, &["!127.0.0.1:22"], "127.0.0.1:22", r#"deny 127.0.0.1:22 reason="policy denial" rule="!127.0.0.1:22""#);
    check_literal(D, &["!127.0.0.1:22"], "127.0.0.1:80", &ng("127.0.0.1:80", "127.0.0.1"));
    check_literal(O, &["!**"], "8.8.8.8", &fallback("8.8.8.8:443"));
    check_literal(O, &["!**"], "127.1", &ng("127.0.0.1:443", "127.0.0.1"));
}

#[test]
#[rustfmt::skip]
fn name_stage_orderings_and_wildcards() {
    let n = |mode, rules: &[&str], t: &str| line(mode, &[], rules, t, None);
    assert_eq!(n(A, &["**.example.com"], "example.com"), r#"allow example.com:443 rule="**.example.com""#);
    assert_eq!(n(A, &["**.example.com"], "a.b.c.example.com"), r#"allow a.b.c.example.com:443 rule="**.example.com""#);
    for t in ["example.com.evil", "evilexample.com", "example.co", "xample.com", "example.com.evil.com", "com"] {
        let shown = format!("{t}:443");
        assert_eq!(n(A, &["**.example.com"], t), no_match(&shown), "{t}");
        assert_eq!(n(A, &["*.example.com"], t), no_match(&shown), "{t}");
        assert_eq!(n(A, &["example.com"], t), no_match(&shown), "{t}");
    }
    assert_eq!(n(A, &["*.example.com"], "a.example.com"), r#"allow a.example.com:443 rule="*.example.com""#);
    assert_eq!(n(A, &["*.example.com"], "A.EXAMPLE.COM."), r#"allow a.example.com:443 rule="*.example.com""#);
    assert_eq!(n(A, &["*.example.com"], "example.com"), no_match("example.com:443"));
    assert_eq!(n(A, &["*.example.com"], "a.b.example.com"), no_match("a.b.example.com:443"));
    assert_eq!(n(A, &["*.localhost"], "localhost"), no_match("localhost:443"));
    assert_eq!(n(A, &["*.localhost"], "evil.localhost"), r#"allow evil.localhost:443 rule="*.localhost""#);
    assert_eq!(n(A, &["**"], "LOCALHOST."), r#"allow localhost:443 rule="**""#);
    assert_eq!(n(A, &["**"], "1.2.3.4.nip.io"), r#"allow 1.2.3.4.nip.io:443 rule="**""#);
    assert_eq!(n(A, &["1.2.3.4"], "1.2.3.4.nip.io"), no_match("1.2.3.4.nip.io:443"));
    assert_eq!(n(A, &["**.nip.io"], "127.0.0.1.nip.io"), r#"allow 127.0.0.1.nip.io:443 rule="**.nip.io""#);
    assert_eq!(n(D, &["!localhost"], "LocalHost."), r#"deny localhost:443 reason="policy denial" rule="!localhost""#);
    assert_eq!(n(D, &["!**.localhost"], "a.b.localhost"), r#"deny a.b.localhost:443 reason="policy denial" rule="!**.localhost""#);
    assert_eq!(n(D, &["!*.internal"], "google.internal"), r#"deny google.internal:443 reason="policy denial" rule="!*.internal""#);
    assert_eq!(n(D, &["!*.internal"], "metadata.google.internal"), fallback("metadata.google.internal:443"));
    assert_eq!(n(D, &["!**.internal"], "metadata.google.internal"), r#"deny metadata.google.internal:443 reason="policy denial" rule="!**.internal""#);
    assert_eq!(n(D, &["!**"], "github.com"), r#"deny github.com:443 reason="policy denial" rule="!**""#);
    assert_eq!(n(D, &["!**", "github.com"], "github.com"), r#"allow github.com:443 rule="github.com""#);
    assert_eq!(n(D, &["github.com", "!**"], "github.com"), r#"deny github.com:443 reason="policy denial" rule="!**""#);
    assert_eq!(n(A, &["**", "!**.evil.test", "ok.evil.test"], "ok.evil.test"), r#"allow ok.evil.test:443 rule="ok.evil.test""#);
    assert_eq!(n(A, &["**", "!**.evil.test", "ok.evil.test"], "x.ok.evil.test"), r#"deny x.ok.evil.test:443 reason="policy denial" rule="!**.evil.test""#);
    assert_eq!(n(A, &["**", "!**.evil.test", "ok.evil.test"], "evil.test"), r#"deny evil.test:443 reason="policy denial" rule="!**.evil.test""#);
    assert_eq!(n(A, &["!github.com", "GitHub.COM."], "github.com"), r#"allow github.com:443 rule="GitHub.COM.""#);
    assert_eq!(n(A, &["github.com", "!GITHUB.com.:443"], "github.com"), r#"deny github.com:443 reason="policy denial" rule="!GITHUB.com.:443""#);
    assert_eq!(n(A, &["github.com", "!GITHUB.com.:443"], "github.com:22"), r#"allow github.com:22 rule="github.com""#);
    assert_eq!(n(A, &["**:443"], "anything.test"), r#"allow anything.test:443 rule="**:443""#);
    assert_eq!(n(A, &["**:443"], "anything.test:80"), no_match("anything.test:80"));
    assert_eq!(n(A, &["bücher.example"], "BÜCHER.example."), r#"allow xn--bcher-kva.example:443 rule="bücher.example""#);
    assert_eq!(n(A, &["ｅxample.com"], "example.com"), r#"allow example.com:443 rule="ｅxample.com""#);
    assert_eq!(n(A, &["example.com"], "ｅｘａｍｐｌｅ.ｃｏｍ"), r#"allow example.com:443 rule="example.com""#);
    // A name rule never matches an IP literal, and an IP rule never matches a name (§5.3).
    assert_eq!(n(A, &["localhost"], "127.0.0.1"), no_match("127.0.0.1:443"));
    assert_eq!(n(A, &["127.0.0.1"], "localhost"), no_match("localhost:443"));
    assert_eq!(n(A, &["0.0.0.0/0", "::/0"], "localhost"), no_match("localhost:443"));
    assert_eq!(n(D, &["!0.0.0.0/0", "!::/0"], "localhost"), fallback("localhost:443"));
    // Invalid targets are never decided.
    for t in ["*.example.com", "**", "user@github.com", "github.com..", "[fe80::1%25eth0]", "example.com:0"] {
        assert!(n(A, &["**"], t).starts_with("invalid ("), "{t}");
    }
}

#[test]
#[rustfmt::skip]
fn resolved_addresses_are_all_checked() {
    let r = |rules: &[&str], t: &str, answer: &[&str]| line(A, &[], rules, t, Some(answer));
    assert_eq!(r(&["**"], "metadata.google.internal:80", &["169.254.169.254"]), ng("metadata.google.internal:80", "169.254.169.254"));
    assert_eq!(r(&["**"], "a.test", &["::ffff:169.254.169.254"]), ng("a.test:443", "169.254.169.254"));
    assert_eq!(r(&["**"], "a.test", &["::ffff:127.0.0.1"]), ng("a.test:443", "127.0.0.1"));
    assert_eq!(r(&["**"], "a.test", &["64:ff9b::7f00:1"]), ng("a.test:443", "64:ff9b::7f00:1"));
    assert_eq!(r(&["**"], "a.test", &["2002:a9fe:a9fe::1"]), ng("a.test:443", "2002:a9fe:a9fe::1"));
    assert_eq!(r(&["**"], "a.test", &["2001:0:4136:e378:8000:63bf:3fff:fdd2"]), ng("a.test:443", "2001:0:4136:e378:8000:63bf:3fff:fdd2"));
    assert_eq!(r(&["**"], "a.test", &["fe80::1"]), ng("a.test:443", "fe80::1"));
    assert_eq!(r(&["**"], "a.test", &["::"]), ng("a.test:443", "::"));
    assert_eq!(r(&["**"], "a.test", &["0.0.0.0"]), ng("a.test:443", "0.0.0.0"));
    assert_eq!(r(&["**"], "a.test", &["255.255.255.255"]), ng("a.test:443", "255.255.255.255"));
    assert_eq!(r(&["**"], "a.test", &["8.8.8.8", "1.1.1.1", "10.0.0.1"]), ng("a.test:443", "10.0.0.1"));
    assert_eq!(r(&["**"], "a.test", &["fd00::1", "8.8.8.8"]), ng("a.test:443", "fd00::1"));
    assert_eq!(r(&["**"], "a.test", &["8.8.8.8", "2606:4700::1", "64:ff9b::808:808"]), r#"allow a.test:443 rule="**""#);
    assert_eq!(r(&["**"], "1.2.3.4.nip.io", &["1.2.3.4"]), r#"allow 1.2.3.4.nip.io:443 rule="**""#);
    assert_eq!(r(&["**"], "127.0.0.1.nip.io:80", &["127.0.0.1"]), ng("127.0.0.1.nip.io:80", "127.0.0.1"));
    assert_eq!(r(&["**"], "localhost", &["127.0.0.1", "::1"]), ng("localhost:443", "127.0.0.1"));
    // Explicit allows: every address must be covered.
    assert_eq!(r(&["db.test", "10.0.0.0/8"], "db.test", &["10.0.0.1", "10.0.0.2"]), r#"allow db.test:443 rule="db.test""#);
    assert_eq!(r(&["db.test", "10.0.0.0/8"], "db.test", &["10.0.0.1", "192.168.0.1"]), ng("db.test:443", "192.168.0.1"));
    assert_eq!(r(&["db.test", "10.0.0.0/8:5432"], "db.test:5432", &["10.0.0.1"]), r#"allow db.test:5432 rule="db.test""#);
    assert_eq!(r(&["db.test", "10.0.0.0/8:5432"], "db.test:22", &["10.0.0.1"]), ng("db.test:22", "10.0.0.1"));
    assert_eq!(r(&["db.test", "10.0.0.0/8", "!10.0.0.2"], "db.test", &["10.0.0.1", "10.0.0.2"]), r#"deny db.test:443 reason="policy denial" rule="!10.0.0.2" address=10.0.0.2"#);
    assert_eq!(r(&["db.test", "10.0.0.0/8"], "db.test", &["::ffff:10.0.0.1"]), r#"allow db.test:443 rule="db.test""#);
    assert_eq!(r(&["db.test", "10.0.0.0/8"], "db.test", &["64:ff9b::a00:1"]), r#"allow db.test:443 rule="db.test""#);
    assert_eq!(r(&["md.test", "169.254.169.254"], "md.test", &["169.254.169.254"]), r#"allow md.test:443 rule="md.test""#);
    assert_eq!(r(&["md.test", "169.254.0.0/16"], "md.test", &["169.254.169.254"]), ng("md.test:443", "169.254.169.254"));
    assert_eq!(r(&["md.test", "0.0.0.0/0"], "md.test", &["169.254.169.254"]), ng("md.test:443", "169.254.169.254"));
    assert_eq!(r(&["**", "!8.8.8.0/24"], "dns.test", &["8.8.4.4", "8.8.8.8"]), r#"deny dns.test:443 reason="policy denial" rule="!8.8.8.0/24" address=8.8.8.8"#);
    // A name the name stage refuses is never checked against its addresses.
    assert_eq!(r(&["**", "!evil.test"], "evil.test", &["8.8.8.8"]), r#"deny evil.test:443 reason="policy denial" rule="!evil.test""#);
    // The guard applies in every mode.
    assert_eq!(line(D, &[], &[], "a.test", Some(&["127.0.0.1"])), ng("a.test:443", "127.0.0.1"));
    assert_eq!(line(O, &[], &[], "a.test", Some(&["fd00::1"])), ng("a.test:443", "fd00::1"));
    assert_eq!(line(D, &[], &[], "a.test", Some(&["8.8.8.8"])), fallback("a.test:443"));
}

#[test]
#[rustfmt::skip]
fn presets_do_not_open_addresses() {
    let p = |rules: &[&str], t: &str, answer: Option<&[&str]>| line(A, &["iterion-default"], rules, t, answer);
    assert_eq!(p(&[], "169.254.169.254:80", None), no_match("169.254.169.254:80"));
    assert_eq!(p(&[], "metadata.google.internal", None), no_match("metadata.google.internal:443"));
    assert_eq!(p(&[], "storage.googleapis.com", Some(&["169.254.169.254"])), ng("storage.googleapis.com:443", "169.254.169.254"));
    assert_eq!(p(&[], "api.github.com", Some(&["140.82.112.5"])), r#"allow api.github.com:443 rule="**.github.com""#);
    assert_eq!(p(&[], "API.GITHUB.COM.", None), r#"allow api.github.com:443 rule="**.github.com""#);
    assert_eq!(p(&[], "github.com.evil.test", None), no_match("github.com.evil.test:443"));
    assert_eq!(p(&[], "localhost", None), no_match("localhost:443"));
    assert_eq!(p(&["!**.github.com"], "codeload.github.com", None), r#"deny codeload.github.com:443 reason="policy denial" rule="!**.github.com""#);
    assert_eq!(line(A, &["none"], &["github.com"], "github.com", None), r#"allow github.com:443 rule="github.com""#);
    assert_eq!(line(A, &["none", "iterion-default"], &[], "pypi.org", None), r#"allow pypi.org:443 rule="pypi.org""#);
    let errors = Policy::compile(A, &["iterion-default", "Iterion-Default", "", "none "], &[])
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "unknown network preset 'Iterion-Default' (want iterion-default or none)",
            "unknown network preset '' (want iterion-default or none)",
            "unknown network preset 'none ' (want iterion-default or none)",
        ]
    );
}

#[test]
#[rustfmt::skip]
fn silent_deny_matches_canonical_hosts_only() {
    let silent = SilentDeny::default();
    let is = |t: &str| silent.is_silent(&Target::parse_lenient(t, Some(443)).expect("parses"));
    for t in ["statsig.anthropic.com", "STATSIG.Anthropic.COM.", "statsig.com", "a.statsig.com", "sentry.io",
        "o1.ingest.sentry.io", "datadoghq.com", "http-intake.logs.datadoghq.com", "api.segment.io"]
    {
        assert!(is(t), "{t} is silent");
    }
    for t in ["anthropic.com", "api.anthropic.com", "notsentry.io", "sentry.io.evil.test", "segment.com", "1.2.3.4"] {
        assert!(!is(t), "{t} is reported");
    }
}
