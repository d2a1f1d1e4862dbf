//! IP address classification for the SSRF guard (spec 04 §8.4).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// The class of an address (§8.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(tag = "class", rename_all = "snake_case")]
pub enum AddressClass {
    /// A globally routable address: accepted by the address stage unless an IP rule denies it.
    Global,
    /// A non-global address: accepted only with an explicit allow rule inside `block` (§8.3).
    NonGlobal {
        /// Which kind of non-global network.
        kind: NonGlobalKind,
        /// The block the address belongs to (for an embedded IPv4, the IPv4 block).
        block: IpNet,
    },
    /// A cloud metadata or platform endpoint: accepted only with an allow rule naming exactly `address`.
    Metadata {
        /// The metadata address (for an embedded IPv4, the IPv4 address).
        address: IpAddr,
    },
}

/// The kind of a non-global block (§8.4 tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NonGlobalKind {
    /// `0.0.0.0/8`.
    ThisNetwork,
    /// `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`.
    Private,
    /// `100.64.0.0/10` (CGNAT).
    Shared,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// `192.0.0.0/24`.
    IetfProtocolAssignments,
    /// `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `192.88.99.0/24`.
    SixToFourRelayAnycast,
    /// `198.18.0.0/15`, `2001:2::/48`.
    Benchmarking,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `240.0.0.0/4`, including broadcast.
    Reserved,
    /// `::`.
    Unspecified,
    /// `::/96` other than `::` and `::1` (deprecated IPv4-compatible).
    Ipv4Compatible,
    /// `64:ff9b:1::/48`.
    Nat64LocalUse,
    /// `100::/64`.
    DiscardOnly,
    /// `2001::/32`, whatever it embeds.
    Teredo,
    /// `2001:10::/28`.
    Orchid,
    /// `5f00::/16`.
    SegmentRouting,
    /// `fc00::/7`.
    UniqueLocal,
    /// `fec0::/10`.
    SiteLocal,
    /// Any IPv6 address outside `2000::/3` not listed otherwise.
    NotGlobalUnicast,
}

impl NonGlobalKind {
    /// A short human description (the §8.4 table wording).
    pub fn as_str(self) -> &'static str {
        match self {
            NonGlobalKind::ThisNetwork => "this network",
            NonGlobalKind::Private => "private",
            NonGlobalKind::Shared => "shared address space",
            NonGlobalKind::Loopback => "loopback",
            NonGlobalKind::LinkLocal => "link-local",
            NonGlobalKind::IetfProtocolAssignments => "IETF protocol assignments",
            NonGlobalKind::Documentation => "documentation",
            NonGlobalKind::SixToFourRelayAnycast => "6to4 relay anycast",
            NonGlobalKind::Benchmarking => "benchmarking",
            NonGlobalKind::Multicast => "multicast",
            NonGlobalKind::Reserved => "reserved",
            NonGlobalKind::Unspecified => "unspecified",
            NonGlobalKind::Ipv4Compatible => "IPv4-compatible",
            NonGlobalKind::Nat64LocalUse => "NAT64 local use",
            NonGlobalKind::DiscardOnly => "discard-only",
            NonGlobalKind::Teredo => "Teredo",
            NonGlobalKind::Orchid => "ORCHID",
            NonGlobalKind::SegmentRouting => "segment routing",
            NonGlobalKind::UniqueLocal => "unique local",
            NonGlobalKind::SiteLocal => "site-local",
            NonGlobalKind::NotGlobalUnicast => "not global unicast",
        }
    }
}

impl fmt::Display for NonGlobalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an IPv6 address carries an IPv4 address that decides its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Embedding {
    /// `::ffff:0:0/96`.
    Ipv4Mapped,
    /// `64:ff9b::/96`.
    Nat64,
    /// `2002::/16` (bits 16–47).
    SixToFour,
}

/// The cloud metadata and platform endpoints (§8.4), checked before every block.
pub const METADATA_ADDRESSES: &[IpAddr] = &[
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 2)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 253)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 123)),
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V4(Ipv4Addr::new(192, 0, 0, 192)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23)),
];

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> (Ipv4Addr, u8) {
    (Ipv4Addr::new(a, b, c, d), len)
}

/// IPv4 non-global blocks (§8.4), most specific first where they overlap.
const V4_BLOCKS: &[((Ipv4Addr, u8), NonGlobalKind)] = &[
    (v4(0, 0, 0, 0, 8), NonGlobalKind::ThisNetwork),
    (v4(10, 0, 0, 0, 8), NonGlobalKind::Private),
    (v4(100, 64, 0, 0, 10), NonGlobalKind::Shared),
    (v4(127, 0, 0, 0, 8), NonGlobalKind::Loopback),
    (v4(169, 254, 0, 0, 16), NonGlobalKind::LinkLocal),
    (v4(172, 16, 0, 0, 12), NonGlobalKind::Private),
    (v4(192, 0, 0, 0, 24), NonGlobalKind::IetfProtocolAssignments),
    (v4(192, 0, 2, 0, 24), NonGlobalKind::Documentation),
    (v4(192, 88, 99, 0, 24), NonGlobalKind::SixToFourRelayAnycast),
    (v4(192, 168, 0, 0, 16), NonGlobalKind::Private),
    (v4(198, 18, 0, 0, 15), NonGlobalKind::Benchmarking),
    (v4(198, 51, 100, 0, 24), NonGlobalKind::Documentation),
    (v4(203, 0, 113, 0, 24), NonGlobalKind::Documentation),
    (v4(224, 0, 0, 0, 4), NonGlobalKind::Multicast),
    (v4(240, 0, 0, 0, 4), NonGlobalKind::Reserved),
];

#[allow(clippy::too_many_arguments)]
const fn v6(a: u16, b: u16, c: u16, d: u16, e: u16, f: u16, g: u16, h: u16, len: u8) -> (Ipv6Addr, u8) {
    (Ipv6Addr::new(a, b, c, d, e, f, g, h), len)
}

/// IPv6 non-global blocks (§8.4) other than the embeddings, most specific first where they overlap.
const V6_BLOCKS: &[((Ipv6Addr, u8), NonGlobalKind)] = &[
    (v6(0, 0, 0, 0, 0, 0, 0, 0, 128), NonGlobalKind::Unspecified),
    (v6(0, 0, 0, 0, 0, 0, 0, 1, 128), NonGlobalKind::Loopback),
    (v6(0, 0, 0, 0, 0, 0, 0, 0, 96), NonGlobalKind::Ipv4Compatible),
    (
        v6(0x64, 0xff9b, 1, 0, 0, 0, 0, 0, 48),
        NonGlobalKind::Nat64LocalUse,
    ),
    (v6(0x100, 0, 0, 0, 0, 0, 0, 0, 64), NonGlobalKind::DiscardOnly),
    (v6(0x2001, 0x2, 0, 0, 0, 0, 0, 0, 48), NonGlobalKind::Benchmarking),
    (v6(0x2001, 0x10, 0, 0, 0, 0, 0, 0, 28), NonGlobalKind::Orchid),
    (v6(0x2001, 0, 0, 0, 0, 0, 0, 0, 32), NonGlobalKind::Teredo),
    (
        v6(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0, 32),
        NonGlobalKind::Documentation,
    ),
    (v6(0x3fff, 0, 0, 0, 0, 0, 0, 0, 20), NonGlobalKind::Documentation),
    (v6(0x5f00, 0, 0, 0, 0, 0, 0, 0, 16), NonGlobalKind::SegmentRouting),
    (v6(0xfc00, 0, 0, 0, 0, 0, 0, 0, 7), NonGlobalKind::UniqueLocal),
    (v6(0xfe80, 0, 0, 0, 0, 0, 0, 0, 10), NonGlobalKind::LinkLocal),
    (v6(0xfec0, 0, 0, 0, 0, 0, 0, 0, 10), NonGlobalKind::SiteLocal),
    (v6(0xff00, 0, 0, 0, 0, 0, 0, 0, 8), NonGlobalKind::Multicast),
];

/// The IPv4 address an IPv6 address embeds, when its class is decided by it (IPv4-mapped, NAT64 well-known
/// prefix, 6to4). Teredo is deliberately absent: it is non-global whatever it embeds.
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<(Embedding, Ipv4Addr)> {
    let seg = ip.segments();
    let low32 = Ipv4Addr::new(
        (seg[6] >> 8) as u8,
        seg[6] as u8,
        (seg[7] >> 8) as u8,
        seg[7] as u8,
    );
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some((Embedding::Ipv4Mapped, v4));
    }
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some((Embedding::Nat64, low32));
    }
    if seg[0] == 0x2002 {
        let embedded = Ipv4Addr::new(
            (seg[1] >> 8) as u8,
            seg[1] as u8,
            (seg[2] >> 8) as u8,
            seg[2] as u8,
        );
        return Some((Embedding::SixToFour, embedded));
    }
    None
}

/// Classify an address (§8.4). Metadata addresses are checked first; an IPv4-mapped, NAT64 or 6to4 address is
/// classified through the IPv4 address it carries (the result names the IPv4 block or metadata address).
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(a) => classify_v4(a),
        IpAddr::V6(a) => classify_v6(a),
    }
}

fn classify_v4(a: Ipv4Addr) -> AddressClass {
    if METADATA_ADDRESSES.contains(&IpAddr::V4(a)) {
        return AddressClass::Metadata {
            address: IpAddr::V4(a),
        };
    }
    for ((net, len), kind) in V4_BLOCKS {
        if let Ok(block) = Ipv4Net::new(*net, *len)
            && block.contains(&a)
        {
            return AddressClass::NonGlobal {
                kind: *kind,
                block: IpNet::V4(block),
            };
        }
    }
    AddressClass::Global
}

fn classify_v6(a: Ipv6Addr) -> AddressClass {
    if METADATA_ADDRESSES.contains(&IpAddr::V6(a)) {
        return AddressClass::Metadata {
            address: IpAddr::V6(a),
        };
    }
    if let Some((_, embedded)) = embedded_ipv4(a) {
        return classify_v4(embedded);
    }
    for ((net, len), kind) in V6_BLOCKS {
        if let Ok(block) = Ipv6Net::new(*net, *len)
            && block.contains(&a)
        {
            return AddressClass::NonGlobal {
                kind: *kind,
                block: IpNet::V6(block),
            };
        }
    }
    let global_unicast = Ipv6Net::new(Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);
    if global_unicast.is_ok_and(|n| n.contains(&a)) {
        return AddressClass::Global;
    }
    let block = Ipv6Net::new(a, 3).map(|n| IpNet::V6(n.trunc()));
    AddressClass::NonGlobal {
        kind: NonGlobalKind::NotGlobalUnicast,
        block: block.unwrap_or(IpNet::V6(Ipv6Net::default())),
    }
}

/// The address the explicit-allow test of §8.3 is done against: the embedded IPv4 for an IPv4-mapped, NAT64 or
/// 6to4 address, the address itself otherwise.
pub fn explicit_test_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => match embedded_ipv4(a) {
            Some((_, v4)) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}
