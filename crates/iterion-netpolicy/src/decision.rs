//! Decision types shared by the name stage and the address stage (spec 04 §5, §8, §13.2, §13.3).
//!
//! A decision id is not part of these types: the proxy generates one per decision.

use std::fmt;
use std::net::IpAddr;

use serde::ser::SerializeMap;

use crate::address::AddressClass;
use crate::host::Target;
use crate::mode::Mode;

/// Why a request was refused (the `reason` of §13.2), for the two reasons this crate decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Reason {
    /// A `!` rule matched, no rule matched in allowlist mode, or an IP rule denied at the address stage.
    #[serde(rename = "policy denial")]
    PolicyDenial,
    /// The SSRF guard refused a non-global address (or the proxy's own listening address).
    #[serde(rename = "non-global address")]
    NonGlobalAddress,
}

impl Reason {
    /// The wire text: `policy denial` or `non-global address`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::PolicyDenial => "policy denial",
            Reason::NonGlobalAddress => "non-global address",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What decided (the `rule` of §13.2 and of `check` output).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DecidingRule {
    /// A rule of the compiled policy.
    Rule {
        /// Its position in the compiled list (presets first, then rules).
        index: usize,
        /// Its original text.
        text: String,
    },
    /// Allowlist mode and no rule matched: `no rule matched`.
    NoRuleMatched,
    /// Denylist or open mode and no rule matched: `(mode fallback)`.
    ModeFallback,
    /// The SSRF guard: `non-global address`.
    NonGlobalAddress,
}

impl DecidingRule {
    /// The text shown in responses, events and `check` output.
    pub fn as_str(&self) -> &str {
        match self {
            DecidingRule::Rule { text, .. } => text,
            DecidingRule::NoRuleMatched => "no rule matched",
            DecidingRule::ModeFallback => "(mode fallback)",
            DecidingRule::NonGlobalAddress => "non-global address",
        }
    }
}

impl fmt::Display for DecidingRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for DecidingRule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The outcome of the name stage (§5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameDecision {
    /// Whether the name stage allows the target.
    pub allowed: bool,
    /// The deciding rule, or the mode fallback.
    pub rule: DecidingRule,
    /// Why it was refused (`policy denial`); `None` when allowed.
    pub reason: Option<Reason>,
}

/// The outcome of the address stage for one address (§8.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressDecision {
    /// The address checked (an IPv4-mapped address is checked, and reported, as IPv4).
    pub address: IpAddr,
    /// Its class.
    pub class: AddressClass,
    /// Whether it may be dialled.
    pub allowed: bool,
    /// Why it was refused; `None` when allowed.
    pub reason: Option<Reason>,
    /// The deciding IP rule when one mattered (an allow that made a non-global address explicit, or a `!` rule);
    /// `NonGlobalAddress` for a guard refusal; `None` for a global address with no IP rule.
    pub rule: Option<DecidingRule>,
}

/// Which stage produced a [`Decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Decided on the target alone.
    Name,
    /// Decided on the addresses (every address was checked, or one was refused).
    Address,
}

/// The outcome of both stages for one target: everything the 403 response (§13.2) and the `Denied` / `Allowed`
/// events (§13.3) need, except the decision id, the credential and the method, which the proxy adds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// The canonical target.
    pub target: Target,
    /// The policy mode.
    pub mode: Mode,
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Why it was refused; `None` when allowed.
    pub reason: Option<Reason>,
    /// The deciding rule (for an allowed request, the name-stage rule or the mode fallback).
    pub rule: DecidingRule,
    /// The refused address, for a `non-global address` refusal or an IP-rule denial at the address stage.
    pub address: Option<IpAddr>,
    /// Every address checked, in the order given (IPv4-mapped addresses as IPv4). When allowed, these are the
    /// only addresses the proxy may dial, in this order (pinned dial, §8.5).
    pub addresses: Vec<IpAddr>,
    /// The stage that decided.
    pub stage: Stage,
}

impl Decision {
    /// A sentence an agent can act on (the `message` of §13.2).
    pub fn message(&self) -> String {
        let host = &self.target.host;
        let port = self.target.port;
        match (self.reason, self.address) {
            (None, _) => format!(
                "host '{host}' (port {port}) is allowed by the sandbox network policy ({})",
                self.rule
            ),
            (Some(Reason::NonGlobalAddress), Some(addr)) => format!(
                "host '{host}' (port {port}) resolves to the non-global address {addr}, which the sandbox refuses; \
                 if the workflow needs it, add an explicit rule for that address to sandbox.network.rules"
            ),
            (Some(_), _) => format!(
                "host '{host}' (port {port}) is blocked by the sandbox network policy ({}); if the workflow needs \
                 it, add it to sandbox.network.rules",
                self.rule
            ),
        }
    }
}

/// The `iterion netproxy check` line (§16.2): `allow HOST:PORT rule="…"` or
/// `deny HOST:PORT reason="…" rule="…" [address=…]`.
impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            None => write!(f, "allow {} rule=\"{}\"", self.target, self.rule),
            Some(reason) => {
                write!(
                    f,
                    "deny {} reason=\"{reason}\" rule=\"{}\"",
                    self.target, self.rule
                )?;
                if let Some(addr) = self.address {
                    write!(f, " address={addr}")?;
                }
                Ok(())
            }
        }
    }
}

/// Serialises as the `check --json` object without its `target` key: `host`, `port`, `decision`, `reason` (when
/// denied), `rule`, `address` (when set) and `addresses` (the resolved addresses, when a name was resolved; an IP
/// literal is never resolved, so it has none).
impl serde::Serialize for Decision {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("host", &self.target.host)?;
        map.serialize_entry("port", &self.target.port)?;
        map.serialize_entry("decision", if self.allowed { "allow" } else { "deny" })?;
        if let Some(reason) = self.reason {
            map.serialize_entry("reason", reason.as_str())?;
        }
        map.serialize_entry("rule", self.rule.as_str())?;
        if let Some(addr) = self.address {
            map.serialize_entry("address", &addr)?;
        }
        if self.target.host.name().is_some() && !self.addresses.is_empty() {
            map.serialize_entry("addresses", &self.addresses)?;
        }
        map.end()
    }
}
