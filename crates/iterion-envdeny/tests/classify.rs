//! §10.1 classification vectors, properties and the data checks of §3.5.

use iterion_envdeny::{
    Category, Classification, DenyClass, EXACT, PREFIXES, Rule, RuleKind, SUFFIXES, classify, render_markdown,
};
use proptest::prelude::*;

fn check(name: &str, expect: &str) {
    let got = match classify(name) {
        Classification::Pass => "pass".to_string(),
        Classification::Deny(r) => r.code(),
    };
    assert_eq!(got, expect, "classify({name:?})");
}

#[test]
fn vectors_10_1() {
    check("OPENAI_API_KEY", "prefix:OPENAI_");
    check("STRIPE_API_KEY", "suffix:_API_KEY");
    check("SERPAPI_APIKEY", "suffix:_APIKEY");
    check("API_KEY", "exact:API_KEY");
    check("GITHUB_TOKEN", "suffix:_TOKEN");
    check("GH_TOKEN", "prefix:GH_");
    check("github_token", "suffix:_TOKEN");
    check("TOKEN", "exact:TOKEN");
    check("TOKENIZERS_PARALLELISM", "pass");
    check("AWS_SESSION_TOKEN", "prefix:AWS_");
    check("AWS_REGION", "prefix:AWS_");
    check("JWT_SECRET", "suffix:_SECRET");
    check("DJANGO_SECRET_KEY", "suffix:_SECRET_KEY");
    check("SECRET", "exact:SECRET");
    check("SECRETARY", "pass");
    check("PGPASSWORD", "exact:PGPASSWORD");
    check("DB_PASSWORD", "suffix:_PASSWORD");
    check("npm_config__auth", "suffix:_AUTH");
    check("NGROK_AUTHTOKEN", "suffix:_AUTHTOKEN");
    check("GOOGLE_APPLICATION_CREDENTIALS", "prefix:GOOGLE_");
    check("ANTHROPIC_BASE_URL", "prefix:ANTHROPIC_");
    check("OLLAMA_BASE_URL", "prefix:OLLAMA_");
    check("MY_SERVICE_BASE_URL", "suffix:_BASE_URL");
    check("PIP_INDEX_URL", "pass");
    check("DATABASE_URL", "pass");
    check("HTTP_PROXY", "suffix:_PROXY");
    check("http_proxy", "suffix:_PROXY");
    check("Https_Proxy", "suffix:_PROXY");
    check("ALL_PROXY", "suffix:_PROXY");
    check("all_proxy", "suffix:_PROXY");
    check("NO_PROXY", "suffix:_PROXY");
    check("no_proxy", "suffix:_PROXY");
    check("FTP_PROXY", "suffix:_PROXY");
    check("grpc_proxy", "suffix:_PROXY");
    check("NODE_USE_ENV_PROXY", "suffix:_PROXY");
    check("PROXY", "pass");
    check("CLAUDE_CODE_USE_BEDROCK", "prefix:CLAUDE_");
    check("CLAUDE_CONFIG_DIR", "exact:CLAUDE_CONFIG_DIR");
    check("CLOUD_ML_REGION", "prefix:CLOUD_ML_");
    check("VERTEX_REGION_CLAUDE_3_5_HAIKU", "prefix:VERTEX_");
    check("CODEX_HOME", "exact:CODEX_HOME");
    check("GEMINI_API_KEY", "prefix:GEMINI_");
    check("MOONSHOT_API_KEY", "prefix:MOONSHOT_");
    check("XAI_API_KEY", "prefix:XAI_");
    check("ITERION_HOME", "prefix:ITERION_");
    check("iterion_sandbox_default", "prefix:ITERION_");
    check("GIT_SSH_COMMAND", "prefix:GIT_");
    check("GIT_CONFIG_GLOBAL", "prefix:GIT_");
    check("GITHUB_REPOSITORY", "pass");
    check("LD_PRELOAD", "prefix:LD_");
    check("ld_library_path", "prefix:LD_");
    check("DYLD_INSERT_LIBRARIES", "prefix:DYLD_");
    check("BASH_FUNC_x", "prefix:BASH_FUNC_");
    check("NODE_OPTIONS", "exact:NODE_OPTIONS");
    check("NODE_ENV", "pass");
    check("PATH", "exact:PATH");
    check("Path", "exact:PATH");
    check("MANPATH", "pass");
    check("HOME", "exact:HOME");
    check("SHELL", "exact:SHELL");
    check("BASH_ENV", "exact:BASH_ENV");
    check("ENV", "exact:ENV");
    check("ZDOTDIR", "exact:ZDOTDIR");
    check("PROMPT_COMMAND", "exact:PROMPT_COMMAND");
    check("PS1", "exact:PS1");
    check("IFS", "exact:IFS");
    check("XDG_CONFIG_HOME", "exact:XDG_CONFIG_HOME");
    check("XDG_CACHE_HOME", "pass");
    check("EDITOR", "exact:EDITOR");
    check("LESSOPEN", "exact:LESSOPEN");
    check("SSL_CERT_FILE", "exact:SSL_CERT_FILE");
    check(
        "NODE_TLS_REJECT_UNAUTHORIZED",
        "exact:NODE_TLS_REJECT_UNAUTHORIZED",
    );
    check("DOCKER_HOST", "exact:DOCKER_HOST");
    check("DOCKER_BUILDKIT", "pass");
    check("KUBECONFIG", "exact:KUBECONFIG");
    check("KUBERNETES_SERVICE_HOST", "prefix:KUBERNETES_");
    check("GLIBC_TUNABLES", "exact:GLIBC_TUNABLES");
    check("JAVA_TOOL_OPTIONS", "exact:JAVA_TOOL_OPTIONS");
    check("LANG", "pass");
    check("LC_ALL", "pass");
    check("TZ", "pass");
    check("CI", "pass");
    check("DEBIAN_FRONTEND", "pass");
    check("GOFLAGS", "pass");
    check("XDG_RUNTIME_DIR", "pass");
}

#[test]
fn names_listed_as_passing_pass() {
    for n in [
        "LANG",
        "LC_ALL",
        "TZ",
        "TERM",
        "CI",
        "NODE_ENV",
        "DEBIAN_FRONTEND",
        "GOFLAGS",
        "GOPROXY",
        "PIP_INDEX_URL",
        "DATABASE_URL",
        "RUST_LOG",
        "XDG_CACHE_HOME",
        "XDG_RUNTIME_DIR",
        "TMPDIR",
        "USER",
        "HISTFILE",
        "NPM_CONFIG_REGISTRY",
    ] {
        check(n, "pass");
    }
}

#[test]
fn category_is_reported() {
    let Classification::Deny(r) = classify("https_proxy") else {
        panic!("https_proxy must be denied")
    };
    assert_eq!((r.kind, r.category), (RuleKind::Suffix, Category::Proxy));
}

#[test]
fn tables_are_upper_case_unique_and_unshadowed() {
    let valid = |p: &str| {
        p.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    };
    for table in [SUFFIXES, PREFIXES, EXACT] {
        let mut seen = std::collections::BTreeSet::new();
        for (p, _) in table {
            assert!(valid(p), "{p} is not upper case");
            assert!(seen.insert(*p), "{p} is listed twice");
        }
    }
    for (a, ca) in PREFIXES {
        for (b, cb) in PREFIXES {
            if b.len() > a.len() && b.starts_with(a) {
                assert_eq!(ca, cb, "prefix {a} is shadowed by {b} of another category");
            }
        }
    }
}

#[test]
fn with_extra_adds_rules_and_rejects_lower_case() {
    let c = DenyClass::builtin()
        .with_extra([Rule::new(RuleKind::Prefix, "ACME_", Category::Credential)])
        .unwrap();
    assert_eq!(c.classify("acme_key").to_string(), "deny prefix:ACME_");
    assert_eq!(DenyClass::builtin().classify("acme_key"), Classification::Pass);
    let e = DenyClass::builtin()
        .with_extra([Rule::new(RuleKind::Exact, "lower", Category::Credential)])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "deny rule pattern 'lower' must be non-empty upper case [A-Z0-9_]"
    );
}

/// `DENY_CLASS.md` (the user-facing table, linked from the sandbox documentation) is rendered from the crate
/// data; regenerate it with `ITERION_UPDATE_DOCS=1 cargo test -p iterion-envdeny --test classify`.
#[test]
fn documentation_matches_the_crate_data() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("DENY_CLASS.md");
    let header = "<!-- generated from iterion-envdeny's tables by tests/classify.rs; do not edit -->\n\n# The environment deny class\n\n";
    let want = format!("{header}{}", render_markdown());
    if std::env::var_os("ITERION_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        got, want,
        "DENY_CLASS.md drifted from the crate data; regenerate it (see the test's doc)"
    );
}

#[test]
fn full_deny_list_snapshot() {
    insta::assert_snapshot!(render_markdown());
}

proptest! {
    #[test]
    fn classification_ignores_letter_case(name in "[A-Za-z_][A-Za-z0-9_]{0,40}") {
        prop_assert_eq!(classify(&name), classify(&name.to_ascii_lowercase()));
        prop_assert_eq!(classify(&name), classify(&name.to_ascii_uppercase()));
    }
}
