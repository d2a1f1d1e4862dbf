//! Policy compilation (spec 04 §3.3), the name stage (§5) and the address stage (§8.2–8.3).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use crate::address::{AddressClass, classify, explicit_test_address};
use crate::decision::{AddressDecision, DecidingRule, Decision, NameDecision, Reason, Stage};
use crate::host::{Host, Target, normalize_ip};
use crate::preset::preset;
use crate::rule::{Pattern, Rule, RuleError};

pub use crate::mode::Mode;

impl FromStr for Mode {
    type Err = PolicyError;

    /// Exactly `allowlist`, `denylist` or `open`.
    fn from_str(s: &str) -> Result<Mode, PolicyError> {
        match s {
            "allowlist" => Ok(Mode::Allowlist),
            "denylist" => Ok(Mode::Denylist),
            "open" => Ok(Mode::Open),
            _ => Err(PolicyError::Mode { given: s.to_owned() }),
        }
    }
}

/// A compilation error (§3.3). [`Policy::compile`] returns all of them at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// `C095`: the mode is not `allowlist`, `denylist` or `open`.
    #[error("invalid network mode '{given}' (want allowlist, denylist or open)")]
    Mode {
        /// The mode as given.
        given: String,
    },
    /// `C096`: an unknown preset name.
    #[error("unknown network preset '{name}' (want iterion-default or none)")]
    Preset {
        /// The preset as given.
        name: String,
    },
    /// `C097`: a rule that does not parse.
    #[error("invalid network rule '{rule}': {error}")]
    Rule {
        /// The rule's index in the `rules` argument.
        index: usize,
        /// The rule as given.
        rule: String,
        /// Why it does not parse (its `Display` is the reason).
        error: RuleError,
    },
}

impl PolicyError {
    /// The DSL diagnostic code (01 §9.3): `C095`, `C096` or `C097`.
    pub fn code(&self) -> &'static str {
        match self {
            PolicyError::Mode { .. } => "C095",
            PolicyError::Preset { .. } => "C096",
            PolicyError::Rule { .. } => "C097",
        }
    }
}

/// A compilation warning (§3.3): returned with the policy, never an error.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Warning {
    /// The same rule (same polarity, canonical pattern and port) appears twice.
    DuplicateRule {
        /// Position of the repeated rule in the compiled list.
        index: usize,
        /// Position of its first occurrence.
        first: usize,
        /// Its original text.
        rule: String,
    },
    /// `**` in allowlist mode.
    AnyNameInAllowlist {
        /// Position of the `**` rule in the compiled list.
        index: usize,
    },
    /// Rules under mode `open` (01 `C099`).
    RulesUnderOpen,
    /// A denylist without any `!` rule.
    DenylistWithoutNegation,
}

impl Warning {
    /// The DSL diagnostic code when there is one (`C099` for rules under `open`).
    pub fn code(&self) -> Option<&'static str> {
        match self {
            Warning::RulesUnderOpen => Some("C099"),
            _ => None,
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::DuplicateRule { rule, .. } => write!(f, "network rule '{rule}' appears twice"),
            Warning::AnyNameInAllowlist { .. } => f.write_str("network rule '**' allows every host name"),
            Warning::RulesUnderOpen => f.write_str("network rules have no effect when mode is open"),
            Warning::DenylistWithoutNegation => f.write_str("denylist without a ! rule allows everything"),
        }
    }
}

/// A compiled egress policy: a mode and one ordered rule list (presets first, then rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    mode: Mode,
    rules: Vec<Rule>,
    warnings: Vec<Warning>,
}

impl Policy {
    /// Compile a policy (§3.3): presets expanded in order, then the rules in order. Every error is returned
    /// (unknown presets and every bad rule, each with its index).
    pub fn compile(mode: Mode, presets: &[&str], rules: &[&str]) -> Result<Policy, Vec<PolicyError>> {
        let mut errors = Vec::new();
        let mut compiled = Vec::new();
        for name in presets {
            match preset(name) {
                Some(list) => compiled.extend(list.iter().filter_map(|r| Rule::parse(r).ok())),
                None => errors.push(PolicyError::Preset {
                    name: (*name).to_owned(),
                }),
            }
        }
        for (index, text) in rules.iter().enumerate() {
            match Rule::parse(text) {
                Ok(rule) => compiled.push(rule),
                Err(error) => errors.push(PolicyError::Rule {
                    index,
                    rule: (*text).to_owned(),
                    error,
                }),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let warnings = warnings(mode, &compiled);
        Ok(Policy {
            mode,
            rules: compiled,
            warnings,
        })
    }

    /// Like [`Policy::compile`] with the mode as text: an invalid mode is reported together with every other
    /// error.
    pub fn compile_str(mode: &str, presets: &[&str], rules: &[&str]) -> Result<Policy, Vec<PolicyError>> {
        match mode.parse::<Mode>() {
            Ok(mode) => Policy::compile(mode, presets, rules),
            Err(mode_error) => {
                let mut errors = vec![mode_error];
                if let Err(rest) = Policy::compile(Mode::Allowlist, presets, rules) {
                    errors.extend(rest);
                }
                Err(errors)
            }
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The compiled rules, in evaluation order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The compilation warnings.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The name stage (§5): the last matching rule decides; with no match the mode decides.
    pub fn decide_name(&self, target: &Target) -> NameDecision {
        let matched = self
            .rules
            .iter()
            .enumerate()
            .rev()
            .find(|(_, rule)| rule.matches(target));
        match matched {
            Some((index, rule)) => NameDecision {
                allowed: !rule.negated(),
                rule: DecidingRule::Rule {
                    index,
                    text: rule.original().to_owned(),
                },
                reason: rule.negated().then_some(Reason::PolicyDenial),
            },
            None => match self.mode {
                Mode::Allowlist => NameDecision {
                    allowed: false,
                    rule: DecidingRule::NoRuleMatched,
                    reason: Some(Reason::PolicyDenial),
                },
                Mode::Denylist | Mode::Open => NameDecision {
                    allowed: true,
                    rule: DecidingRule::ModeFallback,
                    reason: None,
                },
            },
        }
    }

    /// The last IP or CIDR rule matching an address on a port (§8.2 step 1), with its index.
    fn ip_rule(&self, ip: IpAddr, port: u16) -> Option<(usize, &Rule)> {
        self.rules
            .iter()
            .enumerate()
            .rev()
            .find(|(_, rule)| rule.is_ip_rule() && rule.matches_address(ip, port))
    }

    /// The address stage for one address (§8.2 steps 1–7). `own_listen` are the proxy's own TCP listening
    /// addresses: an address equal to one of them (with the target port) is refused; a listener on an unspecified
    /// address also covers the unspecified and loopback addresses on its port (`0.0.0.0`: IPv4; `::`, usually
    /// dual-stack: both families).
    ///
    /// For an address embedding an IPv4 address (NAT64, 6to4; IPv4-mapped addresses are checked as IPv4), a `!`
    /// rule matching either the address or the embedded IPv4 refuses it, and the explicit-allow test of §8.3 uses
    /// the last IP rule matching the embedded IPv4.
    pub fn decide_address(&self, ip: IpAddr, port: u16, own_listen: &[SocketAddr]) -> AddressDecision {
        let address = normalize_ip(ip);
        let class = classify(address);
        let refuse = |reason: Reason, rule: DecidingRule| AddressDecision {
            address,
            class,
            allowed: false,
            reason: Some(reason),
            rule: Some(rule),
        };
        let as_deciding = |(index, rule): (usize, &Rule)| DecidingRule::Rule {
            index,
            text: rule.original().to_owned(),
        };
        let direct = self.ip_rule(address, port);
        if let Some(hit @ (_, rule)) = direct
            && rule.negated()
        {
            return refuse(Reason::PolicyDenial, as_deciding(hit));
        }
        let test_address = explicit_test_address(address);
        let explicit = if test_address == address {
            direct
        } else {
            let embedded = self.ip_rule(test_address, port);
            if let Some(hit @ (_, rule)) = embedded
                && rule.negated()
            {
                return refuse(Reason::PolicyDenial, as_deciding(hit));
            }
            embedded
        };
        let explicit_range = explicit.and_then(|(_, rule)| rule.pattern().ip_range());
        let accepted = match class {
            AddressClass::Global => true,
            AddressClass::NonGlobal { block, .. } => explicit_range.is_some_and(|r| block.contains(&r)),
            AddressClass::Metadata { address: meta } => {
                explicit_range.is_some_and(|r| r.prefix_len() == r.max_prefix_len() && r.addr() == meta)
            }
        };
        if !accepted || is_own_listener(address, port, own_listen) {
            return refuse(Reason::NonGlobalAddress, DecidingRule::NonGlobalAddress);
        }
        AddressDecision {
            address,
            class,
            allowed: true,
            reason: None,
            rule: explicit.or(direct).map(as_deciding),
        }
    }

    /// Both stages for one target (§5, §8.2). The address stage runs on the IP literal of an IP target, or on
    /// `resolved` (every address must pass; the first refused one is reported). For a name target with
    /// `resolved == None` (or an empty answer) only the name stage runs (`check --no-resolve`); a proxy calls this
    /// only after a successful resolution. The proxy should call [`Policy::decide_name`] first and resolve only
    /// when the name stage allows.
    pub fn decide(
        &self,
        target: &Target,
        resolved: Option<&[IpAddr]>,
        own_listen: &[SocketAddr],
    ) -> Decision {
        let name = self.decide_name(target);
        let mut decision = Decision {
            target: target.clone(),
            mode: self.mode,
            allowed: name.allowed,
            reason: name.reason,
            rule: name.rule,
            address: None,
            addresses: Vec::new(),
            stage: Stage::Name,
        };
        if !decision.allowed {
            return decision;
        }
        let literal;
        let addresses: &[IpAddr] = match (&target.host, resolved) {
            (Host::Ip(ip), _) => {
                literal = [*ip];
                &literal
            }
            (Host::Name(_), Some(list)) => list,
            (Host::Name(_), None) => &[],
        };
        if addresses.is_empty() {
            return decision;
        }
        decision.stage = Stage::Address;
        decision.addresses = addresses.iter().map(|a| normalize_ip(*a)).collect();
        for ip in addresses {
            let verdict = self.decide_address(*ip, target.port, own_listen);
            if !verdict.allowed {
                decision.allowed = false;
                decision.reason = verdict.reason;
                decision.rule = verdict.rule.unwrap_or(DecidingRule::NonGlobalAddress);
                decision.address = Some(verdict.address);
                return decision;
            }
        }
        decision
    }
}

fn is_own_listener(address: IpAddr, port: u16, own_listen: &[SocketAddr]) -> bool {
    own_listen.iter().any(|listen| {
        if listen.port() != port {
            return false;
        }
        let listen_ip = normalize_ip(listen.ip());
        if listen_ip == address {
            return true;
        }
        // `0.0.0.0` covers IPv4; `::` is usually dual-stack and covers both families.
        listen_ip.is_unspecified()
            && (listen_ip.is_ipv6() || address.is_ipv4())
            && (address.is_loopback() || address.is_unspecified())
    })
}

fn warnings(mode: Mode, rules: &[Rule]) -> Vec<Warning> {
    let mut out = Vec::new();
    for (index, rule) in rules.iter().enumerate() {
        if let Some(first) = rules[..index].iter().position(|r| r.key() == rule.key()) {
            out.push(Warning::DuplicateRule {
                index,
                first,
                rule: rule.original().to_owned(),
            });
        }
        if mode == Mode::Allowlist && !rule.negated() && *rule.pattern() == Pattern::AnyName {
            out.push(Warning::AnyNameInAllowlist { index });
        }
    }
    if mode == Mode::Open && !rules.is_empty() {
        out.push(Warning::RulesUnderOpen);
    }
    if mode == Mode::Denylist && !rules.iter().any(Rule::negated) {
        out.push(Warning::DenylistWithoutNegation);
    }
    out
}
