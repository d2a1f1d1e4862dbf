//! `iterion-netpolicy`: egress rule grammar, canonicalisation, matcher, presets and address classes.
//!
//! Layer L0: pure functions, no tokio, no DNS, no sockets, no randomness. The same compiler validates the DSL's
//! `network:` rules at compile time (`iterion-spec`) and is enforced at run time (`iterion-netproxy`), so the two
//! can never disagree.
//!
//! A request is decided in two stages:
//!
//! 1. the **name stage** ([`Policy::decide_name`]): rules are checked top to bottom and the **last** matching
//!    rule decides (a plain rule allows, a `!` rule denies); with no match, `allowlist` denies and `denylist` /
//!    `open` allow. Host-name patterns never match IP literals.
//! 2. the **address stage** ([`Policy::decide_address`], [`Policy::decide`]): every address the target resolves
//!    to (or the IP literal itself) is [`classify`]-ed; non-global and metadata addresses are refused unless an
//!    allow rule was written explicitly for that network (the SSRF guard).
//!
//! ```
//! use iterion_netpolicy::{Mode, Policy, Reason, Target};
//!
//! let policy = Policy::compile(
//!     Mode::Allowlist,
//!     &["iterion-default"],
//!     &["internal.acme.dev", "10.0.0.0/8", "!gist.github.com"],
//! )
//! .map_err(|errors| errors[0].to_string())?;
//!
//! // Name stage only.
//! let target = Target::parse("API.GitHub.com.:443", None)?;
//! assert!(policy.decide_name(&target).allowed);
//! let gist = Target::parse("gist.github.com:443", None)?;
//! assert_eq!(policy.decide_name(&gist).rule.as_str(), "!gist.github.com");
//!
//! // Both stages, with the addresses a resolver returned.
//! let internal = Target::parse("internal.acme.dev:443", None)?;
//! let decision = policy.decide(&internal, Some(&["10.1.2.3".parse()?]), &[]);
//! assert!(decision.allowed);
//!
//! // `169.254.169.254` spelled as a decimal number is still the metadata address, and `**` never matches it.
//! let metadata = Target::parse("2852039166:80", None)?;
//! let decision = policy.decide(&metadata, None, &[]);
//! assert_eq!(decision.reason, Some(Reason::PolicyDenial));
//! assert_eq!(decision.to_string(), r#"deny 169.254.169.254:80 reason="policy denial" rule="no rule matched""#);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Presets
//!
//! [`preset`] returns the rules of a named preset; [`PRESET_NAMES`] lists the names. Any other name is a
//! [`PolicyError::Preset`].
//!
//! | Name | Rules |
//! |---|---|
//! | `none` | (empty) |
//! | `iterion-default` | the 40 rules below, in this order |
//!
//! | Group | `iterion-default` rules |
//! |---|---|
//! | LLM endpoints | `api.anthropic.com`, `console.anthropic.com`, `api.openai.com`, `openrouter.ai`, `**.bedrock.amazonaws.com`, `**.googleapis.com`, `**.openai.azure.com`, `api.mistral.ai`, `api.z.ai`, `api.moonshot.ai`, `api.moonshot.cn`, `api.x.ai` |
//! | npm and Yarn | `registry.npmjs.org`, `**.npmjs.org`, `registry.yarnpkg.com` |
//! | PyPI | `pypi.org`, `files.pythonhosted.org` |
//! | Go modules | `proxy.golang.org`, `sum.golang.org` |
//! | GitHub | `github.com`, `**.github.com`, `codeload.github.com`, `objects.githubusercontent.com`, `raw.githubusercontent.com`, `release-assets.githubusercontent.com` |
//! | other forges | `gitlab.com`, `**.gitlab.com`, `bitbucket.org`, `**.bitbucket.org` |
//! | apt | `deb.debian.org`, `security.debian.org`, `archive.ubuntu.com`, `security.ubuntu.com` |
//! | Nix and devbox | `cache.nixos.org`, `channels.nixos.org`, `releases.nixos.org`, `nix-community.cachix.org`, `devbox.sh`, `**.devbox.sh`, `get.jetify.com` |
//!
//! `**.googleapis.com` covers every Google Cloud API (it is broad); Bedrock's regional endpoints
//! (`bedrock-runtime.<region>.amazonaws.com`) are not matched by `**.bedrock.amazonaws.com` and need their own rule.
//!
//! # Silent-deny list
//!
//! A denial of one of these hosts is refused like any other but produces no `network_blocked` event
//! ([`SilentDeny`]). The list never changes a decision: an explicit allow rule still allows the host.
//!
//! | Default pattern ([`DEFAULT_SILENT_DENY`]) |
//! |---|
//! | `statsig.anthropic.com` |
//! | `**.statsig.com` |
//! | `**.sentry.io` |
//! | `**.datadoghq.com` |
//! | `**.segment.io` |
#![deny(missing_docs)]

pub mod address;
pub mod decision;
pub mod host;
pub mod mode;
pub mod policy;
pub mod preset;
pub mod rule;
pub mod silent;

pub use address::{AddressClass, Embedding, METADATA_ADDRESSES, NonGlobalKind, classify, embedded_ipv4};
pub use decision::{AddressDecision, DecidingRule, Decision, NameDecision, Reason, Stage};
pub use host::{Host, HostError, Target, TargetError};
pub use policy::{Mode, Policy, PolicyError, Warning};
pub use preset::{ITERION_DEFAULT, PRESET_NAMES, preset, preset_names};
pub use rule::{Pattern, Rule, RuleError};
pub use silent::{DEFAULT_SILENT_DENY, SilentDeny};

/// Any error of this crate, for callers that want one type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A rule did not parse.
    #[error(transparent)]
    Rule(#[from] RuleError),
    /// A request target did not parse.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// A host did not canonicalise.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A policy did not compile (the first of its errors; [`Policy::compile`] returns all of them).
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
