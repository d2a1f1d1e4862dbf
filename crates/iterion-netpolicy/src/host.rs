//! Host and request-target canonicalisation (spec 04 §4).
//!
//! Rules and request targets go through the same functions, so a rule written in any spelling matches a request
//! written in any spelling.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use idna::uts46::{AsciiDenyList, DnsLength, Hyphens, Uts46};

/// The longest host name accepted, in bytes (after IDNA, without a trailing dot).
pub const MAX_NAME_LEN: usize = 253;
/// The longest label accepted, in bytes (after IDNA).
pub const MAX_LABEL_LEN: usize = 63;

/// A canonical host: a DNS name (lower-case ASCII, IDNA applied, no trailing dot) or an IP literal (IPv4-mapped
/// IPv6 literals are normalised to IPv4).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// A canonical DNS name.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Host {
    /// Canonicalise a host as it appears in an authority: a DNS name in any spelling, an IPv4 literal in any of
    /// the spellings of §4.3, or a bracketed IPv6 literal. A bare (unbracketed) IPv6 literal is rejected; use
    /// [`Host::parse_lenient`] where one is acceptable.
    pub fn parse(text: &str) -> Result<Host, HostError> {
        canonicalize(text, false)
    }

    /// Like [`Host::parse`], but also accepts an unbracketed IPv6 literal (the `check` command, §4.2 step 5).
    pub fn parse_lenient(text: &str) -> Result<Host, HostError> {
        canonicalize(text, true)
    }

    /// The DNS name, when this host is one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Host::Name(n) => Some(n),
            Host::Ip(_) => None,
        }
    }

    /// The IP address, when this host is an IP literal.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Name(_) => None,
            Host::Ip(ip) => Some(*ip),
        }
    }
}

/// Displays a name as is and an IP in its canonical form (IPv6 without brackets, RFC 5952).
impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl serde::Serialize for Host {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Why a host could not be canonicalised (§4.2). Every variant is an "invalid host" (HTTP 400), never a policy
/// decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The host is empty.
    #[error("empty host")]
    Empty,
    /// The host has an empty label (`a..b`) or more than one trailing dot.
    #[error("empty label in host name")]
    EmptyLabel,
    /// A label is longer than 63 bytes after IDNA.
    #[error("host name label longer than 63 bytes")]
    LabelTooLong,
    /// The whole name is longer than 253 bytes after IDNA.
    #[error("host name longer than 253 bytes")]
    NameTooLong,
    /// A character that may not appear in a host name.
    #[error("character {ch:?} is not allowed in a host name")]
    BadChar {
        /// The offending character.
        ch: char,
    },
    /// IDNA (UTS #46) processing rejected the name.
    #[error("not a valid internationalised domain name")]
    Idna,
    /// An IPv6 literal carries a zone id (`%eth0`).
    #[error("an IPv6 zone id is not allowed")]
    Zone,
    /// A bracketed (or bare, where accepted) literal is not a valid IPv6 address.
    #[error("not a valid IPv6 address")]
    Ipv6,
    /// The host ends in a number but is not a valid IPv4 address in any spelling of §4.3.
    #[error("not a valid IPv4 address")]
    Ipv4,
    /// An unbracketed IPv6 literal where brackets are required.
    #[error("an IPv6 literal must be bracketed")]
    UnbracketedIpv6,
}

/// A canonical request target: a host and a port (§4.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Target {
    /// The canonical host.
    pub host: Host,
    /// The port, 1–65535.
    pub port: u16,
}

impl Target {
    /// Build a target from an already canonical host.
    pub fn new(host: Host, port: u16) -> Target {
        Target { host, port }
    }

    /// Parse an HTTP authority (`host`, `host:port`, `[v6]`, `[v6]:port`) into a canonical target.
    ///
    /// `default_port` is used when the text carries no port; `None` makes the port mandatory (CONNECT). A bare
    /// IPv6 literal is refused: an HTTP authority must bracket it.
    pub fn parse(text: &str, default_port: Option<u16>) -> Result<Target, TargetError> {
        parse_target(text, default_port, false)
    }

    /// Like [`Target::parse`], but also accepts a bare IPv6 literal (`iterion netproxy check`).
    pub fn parse_lenient(text: &str, default_port: Option<u16>) -> Result<Target, TargetError> {
        parse_target(text, default_port, true)
    }
}

/// Displays `host:port`, with an IPv6 host bracketed.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]:{}", self.port),
            host => write!(f, "{host}:{}", self.port),
        }
    }
}

/// Why a request target could not be parsed (§4.1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// Whitespace, control characters or a malformed bracket.
    #[error("invalid target")]
    Invalid,
    /// No port, and the context requires one (CONNECT).
    #[error("port required")]
    PortRequired,
    /// The port is not decimal 1–65535 without sign or leading zero.
    #[error("invalid port")]
    Port,
    /// The host part is not a valid host.
    #[error("invalid host")]
    Host {
        /// Why the host was refused.
        #[source]
        source: HostError,
    },
}

impl From<HostError> for TargetError {
    fn from(source: HostError) -> Self {
        TargetError::Host { source }
    }
}

fn parse_target(text: &str, default_port: Option<u16>, lenient: bool) -> Result<Target, TargetError> {
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(TargetError::Invalid);
    }
    let (host_text, port_text) = if let Some(rest) = text.strip_prefix('[') {
        let close = rest.find(']').ok_or(TargetError::Invalid)?;
        let after = &rest[close + 1..];
        let port = if after.is_empty() {
            None
        } else if let Some(p) = after.strip_prefix(':') {
            Some(p)
        } else {
            return Err(TargetError::Invalid);
        };
        (&text[..close + 2], port)
    } else {
        match text.matches(':').count() {
            0 => (text, None),
            1 => {
                let (h, p) = text.split_once(':').ok_or(TargetError::Invalid)?;
                (h, Some(p))
            }
            _ if lenient => (text, None),
            _ => return Err(HostError::UnbracketedIpv6.into()),
        }
    };
    let port = match port_text {
        Some(p) => parse_port(p).ok_or(TargetError::Port)?,
        None => default_port.ok_or(TargetError::PortRequired)?,
    };
    if host_text.contains('@') {
        return Err(HostError::BadChar { ch: '@' }.into());
    }
    let host = canonicalize(host_text, lenient)?;
    Ok(Target { host, port })
}

/// Parse a port: decimal digits only, no sign, no leading zero, 1–65535.
pub fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || text.starts_with('0') {
        return None;
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match text.parse::<u32>() {
        Ok(n @ 1..=65535) => u16::try_from(n).ok(),
        _ => None,
    }
}

/// Normalise an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) to IPv4; every other address is returned as is.
pub fn normalize_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Parse an IPv6 literal (without brackets): a zone id is refused; an IPv4-mapped address becomes IPv4.
pub(crate) fn parse_ipv6_literal(text: &str) -> Result<IpAddr, HostError> {
    if text.contains('%') {
        return Err(HostError::Zone);
    }
    let v6 = Ipv6Addr::from_str(text).map_err(|_| HostError::Ipv6)?;
    Ok(normalize_ip(IpAddr::V6(v6)))
}

/// Whether the last dot-separated label "ends in a number" (§4.2 step 4): all decimal digits, or `0x`/`0X`
/// followed by hex digits.
pub(crate) fn ends_in_number(text: &str) -> bool {
    let last = text.rsplit('.').next().unwrap_or(text);
    if last.is_empty() {
        return false;
    }
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    match last.strip_prefix("0x").or_else(|| last.strip_prefix("0X")) {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => false,
    }
}

/// Parse an IPv4 literal in any classic spelling (§4.3): 1–4 dot-separated parts, each decimal, octal (leading
/// `0`) or hexadecimal (`0x`); with fewer than 4 parts the last part fills the remaining bytes.
pub fn parse_ipv4_any(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        values.push(parse_ipv4_part(part)?);
    }
    let (last, init) = values.split_last()?;
    let mut addr: u32 = 0;
    for (i, v) in init.iter().enumerate() {
        if *v > 255 {
            return None;
        }
        addr |= (*v as u32) << (24 - 8 * i);
    }
    let remaining_bits = 8 * (4 - init.len()) as u32;
    if remaining_bits < 32 && *last >= (1u64 << remaining_bits) {
        return None;
    }
    if *last > u64::from(u32::MAX) {
        return None;
    }
    addr |= *last as u32;
    Some(Ipv4Addr::from(addr))
}

fn parse_ipv4_part(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        (hex, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        // `0x` alone reads as zero, like the classic parser.
        return if radix == 16 { Some(0) } else { None };
    }
    if !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return None;
    }
    // Leading zeros cannot make the value bigger; strip them so long zero runs do not overflow.
    let significant = digits.trim_start_matches('0');
    if significant.len() > 16 {
        return None;
    }
    if significant.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(significant, radix).ok()
}

/// Parse a strict IPv4 dotted quad: four decimal parts without leading zeros (CIDR addresses, §3.2 step 6).
pub(crate) fn parse_ipv4_strict(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (slot, part) in octets.iter_mut().zip(&parts) {
        if part.is_empty()
            || part.len() > 3
            || (part.len() > 1 && part.starts_with('0'))
            || !part.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        *slot = part.parse().ok()?;
    }
    Some(Ipv4Addr::from(octets))
}

/// Canonicalise a host (§4.2). `lenient` accepts an unbracketed IPv6 literal.
pub(crate) fn canonicalize(text: &str, lenient: bool) -> Result<Host, HostError> {
    if text.is_empty() {
        return Err(HostError::Empty);
    }
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or(HostError::Ipv6)?;
        return parse_ipv6_literal(inner).map(Host::Ip);
    }
    if text.contains(':') {
        if lenient && text.matches(':').count() >= 2 {
            return parse_ipv6_literal(text).map(Host::Ip);
        }
        return Err(if text.matches(':').count() >= 2 {
            HostError::UnbracketedIpv6
        } else {
            HostError::BadChar { ch: ':' }
        });
    }
    if let Some(ch) = text
        .chars()
        .find(|c| matches!(c, '%' | '@' | '/' | '?' | '#' | '[' | ']') || c.is_whitespace() || c.is_control())
    {
        return Err(HostError::BadChar { ch });
    }
    let lower = text.to_ascii_lowercase();
    let trimmed = strip_one_dot(&lower)?;
    if ends_in_number(trimmed) {
        return parse_ipv4_any(trimmed)
            .map(|v4| Host::Ip(IpAddr::V4(v4)))
            .ok_or(HostError::Ipv4);
    }
    canonical_name(trimmed, trimmed.len() != lower.len())
}

/// Remove exactly one trailing dot; a second one, an empty label or an empty name is an error.
fn strip_one_dot(text: &str) -> Result<&str, HostError> {
    let trimmed = text.strip_suffix('.').unwrap_or(text);
    if trimmed.is_empty() {
        return Err(HostError::Empty);
    }
    if trimmed.split('.').any(str::is_empty) {
        return Err(HostError::EmptyLabel);
    }
    Ok(trimmed)
}

/// IDNA to ASCII, then the label rules (§4.2 steps 6–8). The name is already lower-case, has no trailing dot and
/// does not end in a number; `dot_removed` says whether the caller removed a trailing `.` from it. IDNA mapping can
/// produce a name that ends in a number (full-width digits): it is then read as an IPv4 literal, exactly as if it
/// had been written in ASCII.
pub(crate) fn canonical_name(text: &str, dot_removed: bool) -> Result<Host, HostError> {
    let ascii = Uts46::new()
        .to_ascii(
            text.as_bytes(),
            AsciiDenyList::URL,
            Hyphens::Allow,
            DnsLength::Ignore,
        )
        .map_err(|_| HostError::Idna)?;
    // Mapping may have produced dots (`。`, `．`), a trailing dot or digits: the result is checked like typed ASCII.
    // Exactly one trailing dot is removed in all, however it was spelled (`a.com。.` has two).
    if dot_removed && ascii.ends_with('.') {
        return Err(HostError::EmptyLabel);
    }
    let trimmed = strip_one_dot(ascii.as_ref())?;
    if ends_in_number(trimmed) {
        return parse_ipv4_any(trimmed)
            .map(|v4| Host::Ip(IpAddr::V4(v4)))
            .ok_or(HostError::Ipv4);
    }
    check_labels(trimmed)?;
    Ok(Host::Name(trimmed.to_owned()))
}

fn check_labels(name: &str) -> Result<(), HostError> {
    for label in name.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(HostError::LabelTooLong);
        }
        if let Some(ch) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
        {
            return Err(HostError::BadChar { ch });
        }
    }
    if name.len() > MAX_NAME_LEN {
        return Err(HostError::NameTooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_ends_in_number(text: &str, expect: bool) {
        assert_eq!(ends_in_number(text), expect, "{text:?}");
    }

    #[test]
    fn ends_in_number_looks_at_the_last_label_only() {
        check_ends_in_number("example.123", true);
        check_ends_in_number("1.2.3.0x1F", true);
        check_ends_in_number("0X", true);
        check_ends_in_number("123.example", false);
        check_ends_in_number("1.2.3.0x1g", false);
        check_ends_in_number("1.2.3.", false);
        check_ends_in_number("", false);
    }

    #[track_caller]
    fn check_port(text: &str, expect: Option<u16>) {
        assert_eq!(parse_port(text), expect, "{text:?}");
    }

    #[test]
    fn ports_are_plain_decimal() {
        check_port("1", Some(1));
        check_port("443", Some(443));
        check_port("65535", Some(65535));
        check_port("0", None);
        check_port("65536", None);
        check_port("0443", None);
        check_port("+443", None);
        check_port("", None);
        check_port("4 43", None);
        check_port("１", None);
    }

    #[track_caller]
    fn check_strict(text: &str, expect: Option<&str>) {
        assert_eq!(
            parse_ipv4_strict(text).map(|a| a.to_string()).as_deref(),
            expect,
            "{text:?}"
        );
    }

    #[test]
    fn strict_dotted_quads() {
        check_strict("10.0.0.0", Some("10.0.0.0"));
        check_strict("255.255.255.255", Some("255.255.255.255"));
        check_strict("010.0.0.0", None);
        check_strict("10.0.0", None);
        check_strict("256.0.0.0", None);
        check_strict("0x0a.0.0.0", None);
        check_strict("1.2.3.4.5", None);
    }

    #[test]
    fn mapped_addresses_normalise_to_ipv4() {
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("address");
        assert_eq!(normalize_ip(mapped), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        let compatible: IpAddr = "::10.0.0.1".parse().expect("address");
        assert_eq!(normalize_ip(compatible), compatible);
    }
}
