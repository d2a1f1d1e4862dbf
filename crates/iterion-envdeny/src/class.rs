//! The built-in deny class (version 1) and classification.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// Version of the built-in deny class; bumped whenever the built-in lists change. Recorded in events.
pub const DENY_CLASS_VERSION: u32 = 1;

/// How a rule matches an upper-cased name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleKind {
    /// The whole name equals the pattern.
    Exact,
    /// The name starts with the pattern.
    Prefix,
    /// The name ends with the pattern (a name equal to the pattern matches too).
    Suffix,
}

impl RuleKind {
    /// `exact`, `prefix` or `suffix`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleKind::Exact => "exact",
            RuleKind::Prefix => "prefix",
            RuleKind::Suffix => "suffix",
        }
    }
}

/// Why a rule exists (reported in events and doctor output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Credentials (keys, tokens, passwords).
    Credential,
    /// Endpoints an agent sends credentials to.
    Endpoint,
    /// Proxy routing.
    Proxy,
    /// An agent's or model provider's namespace.
    AgentNamespace,
    /// Cloud SDK credentials and endpoints.
    CloudSdk,
    /// git and the GitHub CLI.
    Git,
    /// iterion's own settings.
    Iterion,
    /// Dynamic loader and language-runtime code loaders.
    Loader,
    /// Shell startup (exported functions).
    ShellStartup,
    /// Implicit binaries and shell startup files.
    PathAndShells,
    /// Configuration directories of agents and tools.
    ConfigHome,
    /// Programs started implicitly by tools.
    CommandHook,
    /// TLS trust roots and verification.
    TlsTrust,
    /// Access to a container engine or a cluster.
    EngineAccess,
}

impl Category {
    /// The snake_case name carried by events (`agent_namespace`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Credential => "credential",
            Category::Endpoint => "endpoint",
            Category::Proxy => "proxy",
            Category::AgentNamespace => "agent_namespace",
            Category::CloudSdk => "cloud_sdk",
            Category::Git => "git",
            Category::Iterion => "iterion",
            Category::Loader => "loader",
            Category::ShellStartup => "shell_startup",
            Category::PathAndShells => "path_and_shells",
            Category::ConfigHome => "config_home",
            Category::CommandHook => "command_hook",
            Category::TlsTrust => "tls_trust",
            Category::EngineAccess => "engine_access",
        }
    }
}

/// One rule of the deny class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule {
    /// How the pattern matches.
    pub kind: RuleKind,
    /// The upper-case pattern, e.g. `_TOKEN`, `AWS_`, `PATH`.
    pub pattern: &'static str,
    /// Why the rule exists.
    pub category: Category,
}

impl Rule {
    /// A rule; [`DenyClass::with_extra`] checks that the pattern is upper case.
    pub const fn new(kind: RuleKind, pattern: &'static str, category: Category) -> Self {
        Rule {
            kind,
            pattern,
            category,
        }
    }
}

/// Why a name is denied: the reported rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DenyReason {
    /// Kind of the reported rule.
    pub kind: RuleKind,
    /// Pattern of the reported rule, as listed in the class.
    pub pattern: &'static str,
    /// Category of the reported rule.
    pub category: Category,
}

impl DenyReason {
    /// `"<kind>:<pattern>"`, e.g. `suffix:_TOKEN`: what events and the doctor carry.
    pub fn code(&self) -> String {
        format!("{}:{}", self.kind.as_str(), self.pattern)
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.pattern)
    }
}

/// The verdict for one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Classification {
    /// The name may come from a repository.
    Pass,
    /// The name is in the deny class.
    Deny(DenyReason),
}

impl fmt::Display for Classification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Classification::Pass => f.write_str("pass"),
            Classification::Deny(r) => write!(f, "deny {r}"),
        }
    }
}

impl Classification {
    /// Whether the name is denied.
    pub fn is_denied(&self) -> bool {
        matches!(self, Classification::Deny(_))
    }
}

use Category as C;

/// Suffix rules of version 1 (§3.2).
pub const SUFFIXES: &[(&str, Category)] = &[
    ("_API_KEY", C::Credential),
    ("_APIKEY", C::Credential),
    ("_ACCESS_KEY", C::Credential),
    ("_SECRET_KEY", C::Credential),
    ("_PRIVATE_KEY", C::Credential),
    ("_TOKEN", C::Credential),
    ("_AUTHTOKEN", C::Credential),
    ("_AUTH", C::Credential),
    ("_SECRET", C::Credential),
    ("_PASSWORD", C::Credential),
    ("_PASSWD", C::Credential),
    ("_CREDENTIALS", C::Credential),
    ("_BASE_URL", C::Endpoint),
    ("_PROXY", C::Proxy),
];

/// Prefix rules (namespaces) of version 1 (§3.3).
pub const PREFIXES: &[(&str, Category)] = &[
    ("ANTHROPIC_", C::AgentNamespace),
    ("CLAUDE_", C::AgentNamespace),
    ("VERTEX_", C::AgentNamespace),
    ("CLOUD_ML_", C::AgentNamespace),
    ("OPENAI_", C::AgentNamespace),
    ("CODEX_", C::AgentNamespace),
    ("GEMINI_", C::AgentNamespace),
    ("BEDROCK_", C::AgentNamespace),
    ("MISTRAL_", C::AgentNamespace),
    ("GROQ_", C::AgentNamespace),
    ("DEEPSEEK_", C::AgentNamespace),
    ("OPENROUTER_", C::AgentNamespace),
    ("MOONSHOT_", C::AgentNamespace),
    ("KIMI_", C::AgentNamespace),
    ("XAI_", C::AgentNamespace),
    ("GROK_", C::AgentNamespace),
    ("ZAI_", C::AgentNamespace),
    ("ZHIPUAI_", C::AgentNamespace),
    ("OLLAMA_", C::AgentNamespace),
    ("LITELLM_", C::AgentNamespace),
    ("OPENCODE_", C::AgentNamespace),
    ("PI_CODING_AGENT_", C::AgentNamespace),
    ("ITERION_", C::Iterion),
    ("AWS_", C::CloudSdk),
    ("GOOGLE_", C::CloudSdk),
    ("GCLOUD_", C::CloudSdk),
    ("CLOUDSDK_", C::CloudSdk),
    ("GCP_", C::CloudSdk),
    ("AZURE_", C::CloudSdk),
    ("GIT_", C::Git),
    ("GH_", C::Git),
    ("LD_", C::Loader),
    ("DYLD_", C::Loader),
    ("BASH_FUNC_", C::ShellStartup),
    ("KUBERNETES_", C::EngineAccess),
];

/// Exact names of version 1 (§3.4).
pub const EXACT: &[(&str, Category)] = &[
    // credential (bare words)
    ("TOKEN", C::Credential),
    ("SECRET", C::Credential),
    ("PASSWORD", C::Credential),
    ("PASSWD", C::Credential),
    ("API_KEY", C::Credential),
    ("APIKEY", C::Credential),
    ("CREDENTIALS", C::Credential),
    ("BASE_URL", C::Credential),
    ("PGPASSWORD", C::Credential),
    // path and shells
    ("PATH", C::PathAndShells),
    ("HOME", C::PathAndShells),
    ("SHELL", C::PathAndShells),
    ("ENV", C::PathAndShells),
    ("BASH_ENV", C::PathAndShells),
    ("ZDOTDIR", C::PathAndShells),
    ("PROMPT_COMMAND", C::PathAndShells),
    ("PS0", C::PathAndShells),
    ("PS1", C::PathAndShells),
    ("PS2", C::PathAndShells),
    ("PS4", C::PathAndShells),
    ("SHELLOPTS", C::PathAndShells),
    ("BASHOPTS", C::PathAndShells),
    ("IFS", C::PathAndShells),
    ("CDPATH", C::PathAndShells),
    ("GLOBIGNORE", C::PathAndShells),
    ("INPUTRC", C::PathAndShells),
    ("FPATH", C::PathAndShells),
    // config homes
    ("XDG_CONFIG_HOME", C::ConfigHome),
    ("XDG_DATA_HOME", C::ConfigHome),
    ("XDG_STATE_HOME", C::ConfigHome),
    ("CLAUDE_CONFIG_DIR", C::ConfigHome),
    ("CODEX_HOME", C::ConfigHome),
    ("PI_CODING_AGENT_DIR", C::ConfigHome),
    ("OPENCODE_CONFIG", C::ConfigHome),
    ("OPENCODE_CONFIG_DIR", C::ConfigHome),
    ("GH_CONFIG_DIR", C::ConfigHome),
    ("GNUPGHOME", C::ConfigHome),
    ("DOCKER_CONFIG", C::ConfigHome),
    ("KUBECONFIG", C::ConfigHome),
    // code loaders of language runtimes
    ("NODE_OPTIONS", C::Loader),
    ("NODE_PATH", C::Loader),
    ("PYTHONPATH", C::Loader),
    ("PYTHONHOME", C::Loader),
    ("PYTHONSTARTUP", C::Loader),
    ("PERL5LIB", C::Loader),
    ("PERL5OPT", C::Loader),
    ("PERLLIB", C::Loader),
    ("RUBYOPT", C::Loader),
    ("RUBYLIB", C::Loader),
    ("JAVA_TOOL_OPTIONS", C::Loader),
    ("_JAVA_OPTIONS", C::Loader),
    ("JDK_JAVA_OPTIONS", C::Loader),
    ("GCONV_PATH", C::Loader),
    ("GLIBC_TUNABLES", C::Loader),
    ("LOCPATH", C::Loader),
    // implicit command hooks
    ("EDITOR", C::CommandHook),
    ("VISUAL", C::CommandHook),
    ("PAGER", C::CommandHook),
    ("MANPAGER", C::CommandHook),
    ("LESSOPEN", C::CommandHook),
    ("LESSCLOSE", C::CommandHook),
    ("BROWSER", C::CommandHook),
    ("SSH_ASKPASS", C::CommandHook),
    ("SUDO_ASKPASS", C::CommandHook),
    ("SSH_AUTH_SOCK", C::CommandHook),
    // TLS trust and verification
    ("SSL_CERT_FILE", C::TlsTrust),
    ("SSL_CERT_DIR", C::TlsTrust),
    ("NIX_SSL_CERT_FILE", C::TlsTrust),
    ("REQUESTS_CA_BUNDLE", C::TlsTrust),
    ("CURL_CA_BUNDLE", C::TlsTrust),
    ("NODE_EXTRA_CA_CERTS", C::TlsTrust),
    ("NODE_TLS_REJECT_UNAUTHORIZED", C::TlsTrust),
    ("CARGO_HTTP_CAINFO", C::TlsTrust),
    ("PIP_CERT", C::TlsTrust),
    ("PYTHONHTTPSVERIFY", C::TlsTrust),
    ("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", C::TlsTrust),
    ("DENO_CERT", C::TlsTrust),
    // engine access
    ("DOCKER_HOST", C::EngineAccess),
    ("DOCKER_CONTEXT", C::EngineAccess),
    ("DOCKER_CERT_PATH", C::EngineAccess),
    ("DOCKER_TLS_VERIFY", C::EngineAccess),
    ("CONTAINER_HOST", C::EngineAccess),
    ("CONTAINER_SSHKEY", C::EngineAccess),
];

/// A set of deny rules: the built-in class, optionally extended by an embedder.
///
/// Cheap to clone (the built-in tables are static; extra rules are shared).
#[derive(Debug, Clone, Default)]
pub struct DenyClass {
    extra: Arc<[Rule]>,
}

fn starts_with_ci(name: &[u8], upper: &[u8]) -> bool {
    name.len() >= upper.len() && name[..upper.len()].eq_ignore_ascii_case(upper)
}

fn ends_with_ci(name: &[u8], upper: &[u8]) -> bool {
    name.len() >= upper.len() && name[name.len() - upper.len()..].eq_ignore_ascii_case(upper)
}

fn valid_pattern(p: &str) -> bool {
    !p.is_empty()
        && p.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

impl DenyClass {
    /// The built-in class of version [`DENY_CLASS_VERSION`].
    pub fn builtin() -> Self {
        DenyClass::default()
    }

    /// A copy extended with more rules (embedders and tests only; there is no operator knob).
    pub fn with_extra(&self, rules: impl IntoIterator<Item = Rule>) -> Result<Self> {
        let mut all: Vec<Rule> = self.extra.to_vec();
        for r in rules {
            if !valid_pattern(r.pattern) {
                return Err(Error::InvalidRule {
                    pattern: r.pattern.to_string(),
                });
            }
            all.push(r);
        }
        Ok(DenyClass { extra: all.into() })
    }

    /// Every rule of the class, built-in tables first (exact, prefix, suffix), then extras.
    pub fn rules(&self) -> impl Iterator<Item = Rule> + '_ {
        let b =
            |kind| move |&(pattern, category): &(&'static str, Category)| Rule::new(kind, pattern, category);
        EXACT
            .iter()
            .map(b(RuleKind::Exact))
            .chain(PREFIXES.iter().map(b(RuleKind::Prefix)))
            .chain(SUFFIXES.iter().map(b(RuleKind::Suffix)))
            .chain(self.extra.iter().copied())
    }

    /// Classifies one name (case-insensitively, ASCII). Does not allocate.
    ///
    /// When several rules match, the reported one is: an exact rule, else the longest prefix, else the longest
    /// suffix.
    pub fn classify(&self, name: &str) -> Classification {
        let n = name.as_bytes();
        let deny = |kind, pattern, category| {
            Classification::Deny(DenyReason {
                kind,
                pattern,
                category,
            })
        };
        // exact beats prefix beats suffix; within a kind the longest pattern wins
        let extra = |kind: RuleKind| {
            self.extra
                .iter()
                .filter(move |r| r.kind == kind)
                .map(|r| (r.pattern, r.category))
        };
        let exact = EXACT.iter().copied().chain(extra(RuleKind::Exact));
        if let Some((p, c)) = exact
            .into_iter()
            .find(|(p, _)| n.eq_ignore_ascii_case(p.as_bytes()))
        {
            return deny(RuleKind::Exact, p, c);
        }
        let longest = |it: &mut dyn Iterator<Item = (&'static str, Category)>,
                       hit: &dyn Fn(&[u8]) -> bool| {
            it.filter(|(p, _)| hit(p.as_bytes()))
                .fold(None::<(&'static str, Category)>, |best, (p, c)| match best {
                    Some((b, _)) if b.len() >= p.len() => best,
                    _ => Some((p, c)),
                })
        };
        let mut prefixes = PREFIXES.iter().copied().chain(extra(RuleKind::Prefix));
        if let Some((p, c)) = longest(&mut prefixes, &|p| starts_with_ci(n, p)) {
            return deny(RuleKind::Prefix, p, c);
        }
        let mut suffixes = SUFFIXES.iter().copied().chain(extra(RuleKind::Suffix));
        if let Some((p, c)) = longest(&mut suffixes, &|p| ends_with_ci(n, p)) {
            return deny(RuleKind::Suffix, p, c);
        }
        Classification::Pass
    }

    /// Shorthand for `classify(name).is_denied()`.
    pub fn is_denied(&self, name: &str) -> bool {
        self.classify(name).is_denied()
    }
}

/// Renders the built-in class as the Markdown tables of the user documentation (one per kind).
///
/// The documentation embeds this output; a test compares the two so they cannot drift.
pub fn render_markdown() -> String {
    let mut out = format!("Deny class version {DENY_CLASS_VERSION}\n");
    for (title, table) in [
        ("Suffixes", SUFFIXES),
        ("Prefixes", PREFIXES),
        ("Exact names", EXACT),
    ] {
        out.push_str(&format!("\n### {title}\n\n| Pattern | Category |\n|---|---|\n"));
        for (p, c) in table {
            out.push_str(&format!("| `{p}` | {} |\n", c.as_str()));
        }
    }
    out
}
