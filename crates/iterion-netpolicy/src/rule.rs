//! The rule grammar (spec 04 §3): `[!]PATTERN[:PORT]`.

use std::fmt;
use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::host::{
    self, Host, HostError, Target, canonical_name, ends_in_number, parse_ipv4_any, parse_ipv4_strict,
    parse_ipv6_literal, parse_port,
};

/// What a rule matches, in canonical form (§3.1, §5.2).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Pattern {
    /// Exactly this DNS name.
    Exact(String),
    /// `*.S`: a DNS name with exactly one extra label in front of `S` (the suffix stored here).
    OneLabel(String),
    /// `**.S`: `S` itself or any name ending in `.S` (the suffix stored here).
    MultiLabel(String),
    /// `**`: every DNS name, never an IP literal.
    AnyName,
    /// Exactly this IP address (IPv4-mapped literals are stored as IPv4).
    Ip(IpAddr),
    /// Every IP address inside this range.
    Cidr(IpNet),
}

impl Pattern {
    /// Whether this pattern matches host names (as opposed to IP literals).
    pub fn is_name_pattern(&self) -> bool {
        matches!(
            self,
            Pattern::Exact(_) | Pattern::OneLabel(_) | Pattern::MultiLabel(_) | Pattern::AnyName
        )
    }

    /// The address range of an IP or CIDR pattern (a single address is a /32 or /128).
    pub fn ip_range(&self) -> Option<IpNet> {
        match self {
            Pattern::Ip(ip) => Some(IpNet::from(*ip)),
            Pattern::Cidr(net) => Some(*net),
            _ => None,
        }
    }

    /// Whether the pattern matches this canonical host (ports are not considered here).
    pub fn matches_host(&self, host: &Host) -> bool {
        match (self, host) {
            (Pattern::Exact(h), Host::Name(n)) => h == n,
            (Pattern::OneLabel(s), Host::Name(n)) => n
                .strip_suffix(s.as_str())
                .and_then(|p| p.strip_suffix('.'))
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
            (Pattern::MultiLabel(s), Host::Name(n)) => {
                n == s
                    || n.strip_suffix(s.as_str())
                        .is_some_and(|p| p.len() > 1 && p.ends_with('.'))
            }
            (Pattern::AnyName, Host::Name(_)) => true,
            (Pattern::Ip(_) | Pattern::Cidr(_), Host::Ip(ip)) => self.matches_ip(*ip),
            _ => false,
        }
    }

    /// Whether an IP or CIDR pattern contains this address (IPv4-mapped addresses are compared as IPv4). Name
    /// patterns never match an address.
    pub fn matches_ip(&self, ip: IpAddr) -> bool {
        let ip = host::normalize_ip(ip);
        match self {
            Pattern::Ip(a) => *a == ip,
            Pattern::Cidr(net) => net.contains(&ip),
            _ => false,
        }
    }
}

/// The canonical spelling: `h`, `*.s`, `**.s`, `**`, an IPv4 address, `[v6]`, a CIDR (`[v6/len]` for IPv6).
impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Exact(h) => f.write_str(h),
            Pattern::OneLabel(s) => write!(f, "*.{s}"),
            Pattern::MultiLabel(s) => write!(f, "**.{s}"),
            Pattern::AnyName => f.write_str("**"),
            Pattern::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Pattern::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Pattern::Cidr(IpNet::V4(n)) => write!(f, "{n}"),
            Pattern::Cidr(IpNet::V6(n)) => write!(f, "[{n}]"),
        }
    }
}

/// One compiled rule: polarity, pattern, optional port and the original text (§3.2 step 10).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Rule {
    negated: bool,
    pattern: Pattern,
    port: Option<u16>,
    original: String,
}

impl Rule {
    /// Parse one rule (§3.2). The error's `Display` is the `<reason>` of `invalid network rule '<r>': <reason>`.
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let original = text.trim_matches(|c: char| c.is_ascii_whitespace());
        if original.is_empty() {
            return Err(RuleError::Empty);
        }
        let (negated, body) = match original.strip_prefix('!') {
            Some(rest) => (true, rest.trim_matches(|c: char| c.is_ascii_whitespace())),
            None => (false, original),
        };
        if body.is_empty() {
            return Err(RuleError::Negation);
        }
        check_not_a_url(body)?;
        let (pattern_text, port) = split_port(body)?;
        let pattern = parse_pattern(pattern_text)?;
        Ok(Rule {
            negated,
            pattern,
            port,
            original: original.to_owned(),
        })
    }

    /// Whether a match means deny (`!`).
    pub fn negated(&self) -> bool {
        self.negated
    }

    /// The canonical pattern.
    pub fn pattern(&self) -> &Pattern {
        &self.pattern
    }

    /// The port the rule is scoped to, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The text as written (outer whitespace trimmed): used in events, responses and `check` output.
    pub fn original(&self) -> &str {
        &self.original
    }

    /// The canonical text `[!]PATTERN[:PORT]`: parsing it gives the same rule (up to the original text).
    pub fn canonical(&self) -> String {
        let bang = if self.negated { "!" } else { "" };
        match self.port {
            Some(port) => format!("{bang}{}:{port}", self.pattern),
            None => format!("{bang}{}", self.pattern),
        }
    }

    /// Whether this is an IP or CIDR rule (considered by the address stage).
    pub fn is_ip_rule(&self) -> bool {
        !self.pattern.is_name_pattern()
    }

    /// Whether the rule matches a canonical target (§5.2).
    pub fn matches(&self, target: &Target) -> bool {
        self.port_matches(target.port) && self.pattern.matches_host(&target.host)
    }

    /// Whether this IP or CIDR rule matches an address on a port (the address stage, §8.2 step 1).
    pub fn matches_address(&self, ip: IpAddr, port: u16) -> bool {
        self.port_matches(port) && self.pattern.matches_ip(ip)
    }

    /// The canonical form used to detect duplicates: polarity, pattern and port.
    pub(crate) fn key(&self) -> (bool, &Pattern, Option<u16>) {
        (self.negated, &self.pattern, self.port)
    }

    fn port_matches(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }
}

/// Displays the original text.
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.original)
    }
}

impl std::str::FromStr for Rule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Rule, RuleError> {
        Rule::parse(s)
    }
}

/// Why a rule did not parse (§3.2). `Display` is the reason; [`RuleError::code`] is the stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// `E_EMPTY`: nothing but whitespace.
    #[error("empty rule")]
    Empty,
    /// `E_NEGATION`: `!` with nothing after it.
    #[error("'!' must be followed by a pattern")]
    Negation,
    /// `E_NOT_A_HOST`: a scheme, path, query, fragment, userinfo, `%`, whitespace or control character.
    #[error("a rule is a host pattern, not a URL")]
    NotAHost,
    /// `E_SYNTAX`: malformed brackets, an IPv6 zone id or a malformed IPv6 literal.
    #[error("{detail}")]
    Syntax {
        /// What is wrong.
        detail: &'static str,
    },
    /// `E_PORT`: the port is not decimal 1–65535 without sign or leading zero.
    #[error("port must be 1–65535")]
    Port,
    /// `E_CIDR`: a malformed CIDR range.
    #[error("{detail}")]
    Cidr {
        /// What is wrong (for host bits set, the corrected range is suggested).
        detail: String,
    },
    /// `E_IPV4`: the pattern ends in a number but is not an IPv4 address in any accepted spelling.
    #[error("not a valid IPv4 address")]
    Ipv4,
    /// `E_BARE_STAR`: `*` alone.
    #[error("a bare '*' is not allowed; use ** for any host")]
    BareStar,
    /// `E_WILDCARD`: a `*` that is not the whole leftmost label.
    #[error("a wildcard must be the whole leftmost label: *.example.com or **.example.com")]
    Wildcard,
    /// `E_WILDCARD_SUFFIX`: `*.` or `**.` with no domain after it.
    #[error("a wildcard needs a domain after it")]
    WildcardSuffix,
    /// `E_HOST`: the host or wildcard suffix is not a valid host name.
    #[error("{reason}")]
    Host {
        /// Why the host was refused.
        reason: HostError,
    },
}

impl RuleError {
    /// The stable error code of §3.2 (`E_EMPTY`, `E_NEGATION`, …).
    pub fn code(&self) -> &'static str {
        match self {
            RuleError::Empty => "E_EMPTY",
            RuleError::Negation => "E_NEGATION",
            RuleError::NotAHost => "E_NOT_A_HOST",
            RuleError::Syntax { .. } => "E_SYNTAX",
            RuleError::Port => "E_PORT",
            RuleError::Cidr { .. } => "E_CIDR",
            RuleError::Ipv4 => "E_IPV4",
            RuleError::BareStar => "E_BARE_STAR",
            RuleError::Wildcard => "E_WILDCARD",
            RuleError::WildcardSuffix => "E_WILDCARD_SUFFIX",
            RuleError::Host { .. } => "E_HOST",
        }
    }
}

fn looks_like_ipv6(text: &str) -> bool {
    text.starts_with('[') || text.matches(':').count() >= 2
}

/// §3.2 step 3. A `%` in something shaped like an IPv6 literal is a zone id (`E_SYNTAX`), not a URL.
fn check_not_a_url(body: &str) -> Result<(), RuleError> {
    if body.contains("://") {
        return Err(RuleError::NotAHost);
    }
    let bytes = body.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'/' && !bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            return Err(RuleError::NotAHost);
        }
    }
    if body
        .chars()
        .any(|c| matches!(c, '?' | '#' | '@') || c.is_whitespace() || c.is_control())
    {
        return Err(RuleError::NotAHost);
    }
    if body.contains('%') {
        return Err(if looks_like_ipv6(body) {
            RuleError::Syntax {
                detail: "an IPv6 zone id is not allowed",
            }
        } else {
            RuleError::NotAHost
        });
    }
    Ok(())
}

/// §3.2 steps 4–5.
fn split_port(body: &str) -> Result<(&str, Option<u16>), RuleError> {
    if let Some(rest) = body.strip_prefix('[') {
        let close = rest.find(']').ok_or(RuleError::Syntax {
            detail: "missing ']' after an IPv6 address",
        })?;
        let inner = &rest[..close];
        let after = &rest[close + 1..];
        if inner.contains('[') {
            return Err(RuleError::Syntax {
                detail: "unexpected '[' inside brackets",
            });
        }
        if !inner.contains(':') {
            return Err(RuleError::Syntax {
                detail: "brackets are only for IPv6 addresses",
            });
        }
        let port = if after.is_empty() {
            None
        } else if let Some(p) = after.strip_prefix(':') {
            Some(parse_port(p).ok_or(RuleError::Port)?)
        } else {
            return Err(RuleError::Syntax {
                detail: "only ':PORT' may follow ']'",
            });
        };
        return Ok((inner, port));
    }
    if body.contains('[') || body.contains(']') {
        return Err(RuleError::Syntax {
            detail: "unbalanced brackets",
        });
    }
    match body.matches(':').count() {
        0 => Ok((body, None)),
        1 => {
            let (pattern, port) = body.split_once(':').unwrap_or((body, ""));
            let port = parse_port(port).ok_or(RuleError::Port)?;
            Ok((pattern, Some(port)))
        }
        _ => Ok((body, None)),
    }
}

/// §3.2 steps 6–9.
fn parse_pattern(text: &str) -> Result<Pattern, RuleError> {
    if text.is_empty() {
        return Err(RuleError::Host {
            reason: HostError::Empty,
        });
    }
    if let Some((addr, prefix)) = text.split_once('/') {
        return parse_cidr(addr, prefix).map(Pattern::Cidr);
    }
    if text.contains(':') {
        return match parse_ipv6_literal(text) {
            Ok(ip) => Ok(Pattern::Ip(ip)),
            Err(HostError::Zone) => Err(RuleError::Syntax {
                detail: "an IPv6 zone id is not allowed",
            }),
            Err(_) => Err(RuleError::Syntax {
                detail: "not a valid IPv6 address",
            }),
        };
    }
    let without_dot = text.strip_suffix('.').unwrap_or(text);
    if ends_in_number(without_dot) {
        return parse_ipv4_any(without_dot)
            .map(|v4| Pattern::Ip(IpAddr::V4(v4)))
            .ok_or(RuleError::Ipv4);
    }
    let lower = text.to_ascii_lowercase();
    if lower == "**" {
        return Ok(Pattern::AnyName);
    }
    if lower == "*" {
        return Err(RuleError::BareStar);
    }
    let (make, suffix): (fn(String) -> Pattern, &str) = if let Some(s) = lower.strip_prefix("**.") {
        (Pattern::MultiLabel, s)
    } else if let Some(s) = lower.strip_prefix("*.") {
        (Pattern::OneLabel, s)
    } else {
        (Pattern::Exact, lower.as_str())
    };
    if suffix.contains('*') {
        return Err(RuleError::Wildcard);
    }
    let is_wildcard = suffix.len() != lower.len();
    let trimmed = suffix.strip_suffix('.').unwrap_or(suffix);
    if is_wildcard && trimmed.is_empty() {
        return Err(RuleError::WildcardSuffix);
    }
    if trimmed.is_empty() {
        return Err(RuleError::Host {
            reason: HostError::Empty,
        });
    }
    if trimmed.split('.').any(str::is_empty) {
        return Err(RuleError::Host {
            reason: HostError::EmptyLabel,
        });
    }
    match canonical_name(trimmed, trimmed.len() != suffix.len())
        .map_err(|reason| RuleError::Host { reason })?
    {
        Host::Name(name) => Ok(make(name)),
        Host::Ip(ip) if !is_wildcard => Ok(Pattern::Ip(ip)),
        Host::Ip(_) => Err(RuleError::Wildcard),
    }
}

fn parse_cidr(addr: &str, prefix: &str) -> Result<IpNet, RuleError> {
    let bad = |detail: &str| RuleError::Cidr {
        detail: detail.to_owned(),
    };
    if prefix.is_empty()
        || prefix.len() > 3
        || (prefix.len() > 1 && prefix.starts_with('0'))
        || !prefix.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad(
            "the prefix length must be a decimal number without leading zeros",
        ));
    }
    let len: u8 = prefix
        .parse()
        .map_err(|_| bad("the prefix length is too large"))?;
    let net = if addr.contains(':') {
        if addr.contains('%') {
            return Err(bad("an IPv6 zone id is not allowed"));
        }
        let v6 = addr
            .parse()
            .map_err(|_| bad("the address of a CIDR range must be an IPv4 dotted quad or an IPv6 address"))?;
        let net =
            Ipv6Net::new(v6, len).map_err(|_| bad("the prefix length of an IPv6 range is at most 128"))?;
        IpNet::V6(net)
    } else {
        let v4 = parse_ipv4_strict(addr).ok_or_else(|| {
            bad("the address of a CIDR range must be a dotted quad of four decimal parts without leading zeros")
        })?;
        let net =
            Ipv4Net::new(v4, len).map_err(|_| bad("the prefix length of an IPv4 range is at most 32"))?;
        IpNet::V4(net)
    };
    if net.network() != net.addr() {
        return Err(RuleError::Cidr {
            detail: format!("host bits set; did you mean {}?", net.trunc()),
        });
    }
    Ok(normalize_mapped_net(net))
}

/// An IPv6 range inside `::ffff:0:0/96` is the IPv4 range it maps (addresses are compared as IPv4).
fn normalize_mapped_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net
        && v6.prefix_len() >= 96
        && let Some(v4) = v6.addr().to_ipv4_mapped()
        && let Ok(n) = Ipv4Net::new(v4, v6.prefix_len() - 96)
    {
        return IpNet::V4(n);
    }
    net
}
