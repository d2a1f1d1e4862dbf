//! Named rule lists expanded at compile time (spec 04 §6).

/// The names [`preset`] knows, in the order they are listed in error messages.
pub const PRESET_NAMES: &[&str] = &["iterion-default", "none"];

/// The `iterion-default` preset: LLM endpoints, package registries, code forges, apt mirrors and the Nix/devbox
/// caches (40 rules, in this order).
pub const ITERION_DEFAULT: &[&str] = &[
    // LLM endpoints
    "api.anthropic.com",
    "console.anthropic.com",
    "api.openai.com",
    "openrouter.ai",
    "**.bedrock.amazonaws.com",
    "**.googleapis.com",
    "**.openai.azure.com",
    "api.mistral.ai",
    "api.z.ai",
    "api.moonshot.ai",
    "api.moonshot.cn",
    "api.x.ai",
    // npm and Yarn
    "registry.npmjs.org",
    "**.npmjs.org",
    "registry.yarnpkg.com",
    // PyPI
    "pypi.org",
    "files.pythonhosted.org",
    // Go modules
    "proxy.golang.org",
    "sum.golang.org",
    // GitHub
    "github.com",
    "**.github.com",
    "codeload.github.com",
    "objects.githubusercontent.com",
    "raw.githubusercontent.com",
    "release-assets.githubusercontent.com",
    // other forges
    "gitlab.com",
    "**.gitlab.com",
    "bitbucket.org",
    "**.bitbucket.org",
    // apt
    "deb.debian.org",
    "security.debian.org",
    "archive.ubuntu.com",
    "security.ubuntu.com",
    // Nix and devbox
    "cache.nixos.org",
    "channels.nixos.org",
    "releases.nixos.org",
    "nix-community.cachix.org",
    "devbox.sh",
    "**.devbox.sh",
    "get.jetify.com",
];

/// The rules of a preset, or `None` for an unknown name. `none` is the empty list.
pub fn preset(name: &str) -> Option<&'static [&'static str]> {
    match name {
        "iterion-default" => Some(ITERION_DEFAULT),
        "none" => Some(&[]),
        _ => None,
    }
}

/// The known preset names (the same as [`PRESET_NAMES`]).
pub fn preset_names() -> &'static [&'static str] {
    PRESET_NAMES
}
