//! Sandbox declarations (`C044`, `C092`–`C105`, `C128`): the mode and its properties, the literal values
//! (image, user, paths, mounts, env, build), devcontainer-style variables, and the network block.

use super::compiler::Compiler;
use crate::devcontainer::vars::is_allowlisted;
use crate::model::{NetworkDecl, SandboxDecl, SandboxScope, Spanned};
use crate::span::inner_span;
use crate::values;

fn is_literal(s: &str) -> bool {
    !s.contains("${")
}

impl Compiler<'_> {
    /// Checks one declaration; `owner` is `(workflow|node, name)`, spelled in messages as `node 'x'`.
    pub(super) fn sandbox(&mut self, d: &mut SandboxDecl, owner: (&str, &str)) {
        d.kind = d.derive_kind();
        if d.short {
            self.sandbox_short(d, owner);
            return;
        }
        if let Some(m) = &d.mode
            && !matches!(m.value.as_str(), "auto" | "none" | "inline")
        {
            self.err(
                "C044",
                m.span,
                format!("invalid sandbox mode '{}' (want auto, none or inline)", m.value),
            );
        }
        if let Some(h) = &d.host_state
            && !matches!(h.value.as_str(), "auto" | "none")
        {
            self.err(
                "C044",
                h.span,
                format!("invalid host_state '{}' (want auto or none)", h.value),
            );
        }
        self.secrets(d);
        if let Some(rt) = &d.runtime
            && let Err(m) = crate::resolved::OciRuntime::parse(&rt.value)
        {
            self.err("C044", rt.span, m);
        }
        if d.mode_str() == Some("none") {
            let props = d.properties_set();
            if !props.is_empty() {
                self.warn(
                    "C092",
                    d.span,
                    format!("ignored because sandbox mode is none: {}", props.join(", ")),
                );
            }
            self.none_warning(d, owner);
            return;
        }
        self.sandbox_image_or_build(d);
        self.sandbox_values(d);
        if let Some(n) = &d.network {
            self.network(n, d.scope == SandboxScope::Node);
        }
    }

    /// `C128`: the declaration turns isolation off.
    fn none_warning(&mut self, d: &SandboxDecl, (what, name): (&str, &str)) {
        let i = self.warn(
            "C128",
            d.span,
            format!("sandbox: none disables isolation for {what} '{name}'; prefer sandbox: auto"),
        );
        self.hint(
            i,
            "write sandbox: auto, or set mode: auto with the properties you need",
        );
    }

    /// The short form `sandbox: auto`, `sandbox: none` (`inline` needs a block, `C044`).
    fn sandbox_short(&mut self, d: &SandboxDecl, owner: (&str, &str)) {
        let m = d
            .mode
            .clone()
            .unwrap_or_else(|| Spanned::new(String::new(), d.span));
        match m.value.as_str() {
            "auto" => {}
            "none" => self.none_warning(d, owner),
            "inline" => {
                self.err(
                    "C044",
                    m.span,
                    "sandbox: inline needs a block with image: or build:",
                );
            }
            other => {
                self.err(
                    "C044",
                    m.span,
                    format!("invalid sandbox mode '{other}' (want auto, none or inline)"),
                );
            }
        }
    }

    /// `image:` and `build:` against the mode: neither with auto (`C093`), exactly one with inline or without
    /// a mode (`C044`); a block without mode, image or build only overrides network or host_state.
    fn sandbox_image_or_build(&mut self, d: &SandboxDecl) {
        let build_span = d.build.as_ref().map(|b| b.span);
        let image_span = d.image.as_ref().map(|i| i.span);
        match (d.mode_str(), image_span, build_span) {
            (Some("auto"), i, b) => {
                if let Some(s) = i.or(b) {
                    self.err(
                        "C093",
                        s,
                        "image and build are not allowed with mode auto; use mode inline",
                    );
                }
            }
            (Some("inline") | None, Some(_), Some(b)) => {
                self.err("C044", b, "image and build are mutually exclusive");
            }
            (Some("inline"), None, None) => {
                self.err("C044", d.span, "mode inline requires image or build");
            }
            (None, None, None) => self.sandbox_override(d),
            _ => {}
        }
    }

    /// A block without mode, image or build: it may only override network, host_state or runtime (`C044`), and a
    /// node, which shares the run's sandbox, only network (`C094`).
    fn sandbox_override(&mut self, d: &SandboxDecl) {
        let others = d.user.is_some()
            || d.workspace_folder.is_some()
            || d.post_create.is_some()
            || d.env.is_some()
            || d.mounts.is_some();
        if others || (d.network.is_none() && d.host_state.is_none() && d.runtime.is_none()) {
            let i = self.err(
                "C044",
                d.span,
                "a sandbox block without mode must declare image: or build:, or only override network/host_state/runtime; write mode: auto to customise the automatic sandbox",
            );
            self.hint(i, "add mode: auto");
        } else if d.scope == SandboxScope::Node
            && let Some(h) = d.host_state.as_ref().or(d.runtime.as_ref())
        {
            self.err(
                "C094",
                h.span,
                "a node that shares the run's sandbox can only override network",
            );
        }
    }

    fn sandbox_values(&mut self, d: &SandboxDecl) {
        if let Some(i) = &d.image
            && is_literal(&i.value)
            && let Err(r) = values::validate_image(&i.value)
        {
            self.err("C044", i.span, format!("invalid image '{}': {r}", i.value));
        }
        if let Some(wf) = &d.workspace_folder
            && is_literal(&wf.value)
            && values::validate_workspace_folder(&wf.value).is_err()
        {
            self.err(
                "C100",
                wf.span,
                format!("workspace_folder '{}' must be an absolute path", wf.value),
            );
        }
        if let Some(u) = &d.user
            && is_literal(&u.value)
            && values::validate_user(&u.value).is_err()
        {
            self.err("C101", u.span, format!("invalid sandbox user '{}'", u.value));
        }
        for m in d.mounts.iter().flatten() {
            if let Err(r) = values::parse_mount_with(&m.value, values::VarPolicy::Unexpanded) {
                self.err("C102", m.span, format!("invalid mount '{}': {r}", m.value));
            }
        }
        if let Some(env) = &d.env {
            for e in &env.entries {
                if let Err(r) = values::validate_env_entry(&e.key.value, &e.value.value) {
                    self.err(
                        "C103",
                        e.key.span,
                        format!("invalid sandbox env entry '{}': {r}", e.key.value),
                    );
                }
            }
        }
        if let Some(b) = &d.build {
            for (field, v) in [("dockerfile", &b.dockerfile), ("context", &b.context)] {
                if let Some(v) = v
                    && is_literal(&v.value)
                    && let Err(r) = values::validate_build_path(&v.value)
                {
                    self.err(
                        "C104",
                        v.span,
                        format!("invalid build {field} '{}': {r}", v.value),
                    );
                }
            }
            for e in b.args.iter().flat_map(|a| a.entries.iter()) {
                if let Err(r) = values::validate_build_arg_name(&e.key.value) {
                    self.err(
                        "C104",
                        e.key.span,
                        format!("invalid build args '{}': {r}", e.key.value),
                    );
                }
            }
        }
        // devcontainer-style variables (01 §6.7)
        let mut strings: Vec<&Spanned<String>> = Vec::new();
        strings.extend(d.image.iter());
        strings.extend(d.user.iter());
        strings.extend(d.workspace_folder.iter());
        strings.extend(d.post_create.iter());
        strings.extend(d.mounts.iter().flatten());
        strings.extend(d.env.iter().flat_map(|e| e.entries.iter().map(|x| &x.value)));
        if let Some(b) = &d.build {
            strings.extend(b.dockerfile.iter());
            strings.extend(b.context.iter());
            strings.extend(b.target.iter());
            strings.extend(b.args.iter().flat_map(|e| e.entries.iter().map(|x| &x.value)));
        }
        for s in strings {
            for (off, len, msg) in sandbox_variable_warnings(&s.value) {
                let span = inner_span(s, off, len);
                self.warn("C105", span, msg);
            }
        }
    }

    /// `C132`: `sandbox.secrets` entries (workflow level only; names, delivery, host patterns).
    fn secrets(&mut self, d: &SandboxDecl) {
        let Some(list) = &d.secrets else { return };
        if d.scope == SandboxScope::Node {
            let idx = self.err(
                "C132",
                d.span,
                "secrets are declared in the workflow's sandbox block, not on a node",
            );
            self.hint(idx, "move the secrets: block to the workflow's sandbox:");
            return;
        }
        let mut seen = std::collections::BTreeSet::new();
        for s in list {
            let name = &s.name.value;
            if let Err(why) = values::validate_secret_name(name) {
                self.err(
                    "C132",
                    s.name.span,
                    format!("invalid secret name '{name}': {why}"),
                );
            }
            if !seen.insert(name.clone()) {
                self.err("C132", s.name.span, format!("secret '{name}' is declared twice"));
            }
            let file = match s.delivery.as_ref().map(|d| d.value.as_str()) {
                None | Some("env") => false,
                Some("file") => true,
                Some(other) => {
                    let span = s.delivery.as_ref().map_or(s.name.span, |d| d.span);
                    self.err(
                        "C132",
                        span,
                        format!("invalid delivery 'as: {other}' for secret '{name}' (want env or file)"),
                    );
                    continue;
                }
            };
            let hosts = s.hosts.as_deref().unwrap_or_default();
            if file && (!hosts.is_empty() || s.plain_http.is_some()) {
                self.err(
                    "C132",
                    s.name.span,
                    format!("secret '{name}' is delivered as a file: it takes no hosts and no plain_http"),
                );
            }
            if !file && hosts.is_empty() {
                let idx = self.err(
                    "C132",
                    s.name.span,
                    format!("secret '{name}' names no hosts: its value could be sent nowhere"),
                );
                self.hint(
                    idx,
                    &format!("{name}: [\"api.example.com\"] (the hosts that may receive it)"),
                );
            }
            for h in hosts {
                if let Err(why) = values::validate_secret_host(&h.value) {
                    self.err(
                        "C132",
                        h.span,
                        format!("invalid host '{}' for secret '{name}': {why}", h.value),
                    );
                }
            }
        }
    }

    fn network(&mut self, n: &NetworkDecl, node: bool) {
        if let Some(m) = &n.mode
            && !matches!(m.value.as_str(), "allowlist" | "denylist" | "open")
        {
            self.err(
                "C095",
                m.span,
                format!(
                    "invalid network mode '{}' (want allowlist, denylist or open)",
                    m.value
                ),
            );
        }
        if let Some(p) = &n.preset
            && iterion_netpolicy::preset(&p.value).is_none()
        {
            self.err(
                "C096",
                p.span,
                format!(
                    "unknown network preset '{}' (want iterion-default or none)",
                    p.value
                ),
            );
        }
        for r in n.rules.iter().flatten() {
            if let Err(e) = iterion_netpolicy::Rule::parse(&r.value) {
                self.err("C097", r.span, format!("invalid network rule '{}': {e}", r.value));
            }
        }
        if let Some(inh) = &n.inherit {
            if !node {
                self.warn(
                    "C098",
                    inh.span,
                    "network.inherit has no effect at workflow level",
                );
            } else if !matches!(inh.value.as_str(), "merge" | "append" | "replace") {
                self.err(
                    "C098",
                    inh.span,
                    format!(
                        "network.inherit '{}' is invalid (want merge, append or replace)",
                        inh.value
                    ),
                );
            }
        }
        if n.mode.as_ref().is_some_and(|m| m.value == "open")
            && n.rules.as_ref().is_some_and(|r| !r.is_empty())
        {
            let span = n.mode.as_ref().map_or(n.span, |m| m.span);
            self.warn("C099", span, "network rules have no effect when mode is open");
        }
    }
}

/// `(offset, len, message)` for every devcontainer-style variable that is unsupported or names a `localEnv`
/// variable outside the allowlist (01 §6.7, §7.4).
pub fn sandbox_variable_warnings(s: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = s[i..].find("${") {
        let st = i + off;
        let Some(close) = s[st + 2..].find('}') else {
            break;
        };
        let inner = &s[st + 2..st + 2 + close];
        let len = close + 3;
        let env_name = inner
            .strip_prefix("localEnv:")
            .or_else(|| inner.strip_prefix("env:"))
            .map(|r| r.split(':').next().unwrap_or(""));
        match env_name {
            Some(name) => {
                let valid = !name.is_empty()
                    && name
                        .bytes()
                        .next()
                        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if valid && !is_allowlisted(name) {
                    out.push((
                        st,
                        len,
                        format!("localEnv:{name} is not on the allowlist and expands as unset"),
                    ));
                }
            }
            None => {
                let supported = matches!(
                    inner,
                    "localWorkspaceFolder"
                        | "localWorkspaceFolderBasename"
                        | "containerWorkspaceFolder"
                        | "containerWorkspaceFolderBasename"
                ) || inner.starts_with("containerEnv:");
                if !supported {
                    out.push((
                        st,
                        len,
                        format!("sandbox variable '${{{inner}}}' is not supported and is kept verbatim"),
                    ));
                }
            }
        }
        i = st + len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_variables() {
        let check = |s: &str, expect: &[&str]| {
            let got: Vec<String> = sandbox_variable_warnings(s).into_iter().map(|x| x.2).collect();
            assert_eq!(got, expect, "{s}");
        };
        check("${localEnv:HOME}/x ${localEnv:LC_ALL}", &[]);
        check(
            "${localEnv:AWS_SECRET_ACCESS_KEY}",
            &["localEnv:AWS_SECRET_ACCESS_KEY is not on the allowlist and expands as unset"],
        );
        check(
            "${devcontainerId}",
            &["sandbox variable '${devcontainerId}' is not supported and is kept verbatim"],
        );
        check("${localWorkspaceFolder}/x ${containerEnv:PATH}", &[]);
    }
}
