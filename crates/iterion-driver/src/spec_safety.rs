//! Spec safety (03 §11): every value that reaches an engine or a manifest is validated early, with the field
//! named. Pure functions.

use iterion_spec::resolved::ResolvedSandbox;

use crate::error::{Error, Result};

/// A parsed image reference (§11.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReference {
    /// Registry host (and port), `None` when absent.
    pub domain: Option<String>,
    /// Repository path.
    pub path: String,
    /// Tag.
    pub tag: Option<String>,
    /// Digest (`algorithm:hex`).
    pub digest: Option<String>,
}

impl ImageReference {
    /// The normalised form: `docker.io` when the domain is missing, `library/` for a single-component path
    /// on `docker.io`, `:latest` when there is neither tag nor digest.
    pub fn normalized(&self) -> String {
        let domain = self.domain.as_deref().unwrap_or("docker.io");
        let path = if domain == "docker.io" && !self.path.contains('/') {
            format!("library/{}", self.path)
        } else {
            self.path.clone()
        };
        let mut s = format!("{domain}/{path}");
        match (&self.tag, &self.digest) {
            (None, None) => s.push_str(":latest"),
            (t, d) => {
                if let Some(t) = t {
                    s.push(':');
                    s.push_str(t);
                }
                if let Some(d) = d {
                    s.push('@');
                    s.push_str(d);
                }
            }
        }
        s
    }
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn check_component(c: &str) -> std::result::Result<(), String> {
    if c.is_empty() {
        return Err("empty path component".into());
    }
    let b = c.as_bytes();
    if !is_lower_alnum(b[0]) || !is_lower_alnum(b[b.len() - 1]) {
        return Err(format!(
            "path component '{c}' must start and end with a lower-case letter or digit"
        ));
    }
    let mut i = 0;
    while i < b.len() {
        if is_lower_alnum(b[i]) {
            i += 1;
            continue;
        }
        // a separator: ".", "_", "__" or one or more "-"
        let start = i;
        while i < b.len() && !is_lower_alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return Err(format!("invalid characters '{sep}' in path component '{c}'"));
        }
    }
    Ok(())
}

fn check_domain(d: &str) -> std::result::Result<(), String> {
    let (host, port) = if let Some(rest) = d.strip_prefix('[') {
        let end = rest.find(']').ok_or("unterminated IPv6 address")?;
        let ip = &rest[..end];
        if ip.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("invalid IPv6 address '{ip}'"));
        }
        (None, rest[end + 1..].strip_prefix(':'))
    } else {
        match d.rsplit_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(d), None),
        }
    };
    if let Some(p) = port
        && (p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().is_err())
    {
        return Err(format!("invalid port '{p}'"));
    }
    if let Some(h) = host {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if h.is_empty() || !h.split('.').all(label_ok) {
            return Err(format!("invalid registry host '{h}'"));
        }
    }
    Ok(())
}

/// Parses an image reference (§11.2).
pub fn parse_image(s: &str) -> std::result::Result<ImageReference, String> {
    if s.is_empty() {
        return Err("empty image reference".into());
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("whitespace or control character in the image reference".into());
    }
    if s.starts_with('-') {
        return Err("an image reference must not start with '-'".into());
    }
    let (name_tag, digest) = match s.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (s, None),
    };
    if let Some(d) = digest {
        let (alg, hex) = d.split_once(':').ok_or("digest must be algorithm:hex")?;
        let alg_ok = !alg.is_empty() && alg.bytes().all(|b| is_lower_alnum(b) || b"+._-".contains(&b));
        if !alg_ok {
            return Err(format!("invalid digest algorithm '{alg}'"));
        }
        let lower_hex = |h: &str| {
            h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if alg == "sha256" {
            if hex.len() != 64 || !lower_hex(hex) {
                return Err("a sha256 digest needs exactly 64 lower-case hex characters".into());
            }
        } else if hex.len() < 32 || !lower_hex(hex) {
            return Err("a digest needs at least 32 lower-case hex characters".into());
        }
    }
    let last_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name_tag[last_slash..].rfind(':') {
        Some(i) => (&name_tag[..last_slash + i], Some(&name_tag[last_slash + i + 1..])),
        None => (name_tag, None),
    };
    if let Some(t) = tag {
        let b = t.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 128
            && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
            && b.iter().all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(c));
        if !ok {
            return Err(format!(
                "invalid tag (1-128 characters of [A-Za-z0-9_.-], not starting with '.' or '-'): '{}'",
                if t.len() > 40 { &t[..40] } else { t }
            ));
        }
    }
    if name.len() > 255 {
        return Err("the image name is longer than 255 characters".into());
    }
    let mut comps: Vec<&str> = name.split('/').collect();
    let domain = if comps.len() > 1 && (comps[0].contains(['.', ':']) || comps[0] == "localhost") {
        let d = comps.remove(0);
        check_domain(d)?;
        Some(d.to_string())
    } else {
        None
    };
    for c in &comps {
        check_component(c)?;
    }
    Ok(ImageReference {
        domain,
        path: comps.join("/"),
        tag: tag.map(str::to_string),
        digest: digest.map(str::to_string),
    })
}

/// Checks a user (`uid`, `uid:gid`, `name`, `name:group`): the grammar of 01 §8.10, numeric parts at most
/// 2147483647, at most 64 bytes.
pub fn check_user(u: &str) -> std::result::Result<(), String> {
    if u.len() > 64 {
        return Err("longer than 64 bytes".into());
    }
    let part_ok = |p: &str| {
        let b = p.as_bytes();
        !b.is_empty()
            && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
            && b.iter().all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(c))
    };
    let parts: Vec<&str> = match u.split_once(':') {
        Some((a, b)) => vec![a, b],
        None => vec![u],
    };
    for p in parts {
        if !part_ok(p) {
            return Err(format!("'{}' is not a valid user or group", p.escape_debug()));
        }
        if p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u64>().map_or(true, |n| n > 2_147_483_647) {
            return Err(format!("{p} is above 2147483647"));
        }
    }
    Ok(())
}

/// Checks a workspace folder: absolute, no control characters, no `,`, no `..` component, not `/`, not inside
/// `/proc`, `/sys`, `/dev`, `/run/iterion`.
pub fn check_workspace_folder(w: &str) -> std::result::Result<(), String> {
    if !w.starts_with('/') {
        return Err(format!("'{}' must be an absolute path", w.escape_debug()));
    }
    if w.chars().any(char::is_control) {
        return Err("contains a control character".into());
    }
    if w.contains(',') {
        return Err(format!("'{w}' must not contain ','"));
    }
    if w.split('/').any(|c| c == "..") {
        return Err(format!("'{w}' must not contain a '..' component"));
    }
    let norm = w.trim_end_matches('/');
    if norm.is_empty() {
        return Err("/ is not a workspace folder".into());
    }
    for sys in ["/proc", "/sys", "/dev", "/run/iterion"] {
        if norm == sys || norm.starts_with(&format!("{sys}/")) {
            return Err(format!("'{w}' is inside {sys}"));
        }
    }
    Ok(())
}

/// Checks a build-arg key (`^[A-Za-z_][A-Za-z0-9_]*$`).
pub fn check_build_arg_key(k: &str) -> std::result::Result<(), String> {
    if iterion_envdeny::is_valid_name(k.as_bytes()) {
        Ok(())
    } else {
        Err(format!("'{}' is not a valid build-arg name", k.escape_debug()))
    }
}

/// Checks a build target (`^[A-Za-z0-9][A-Za-z0-9_.-]*$`).
pub fn check_build_target(t: &str) -> std::result::Result<(), String> {
    let b = t.as_bytes();
    if !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(c))
    {
        Ok(())
    } else {
        Err(format!("'{}' is not a valid build target", t.escape_debug()))
    }
}

fn invalid(field: impl Into<String>, reason: String) -> Error {
    Error::InvalidSpec {
        field: field.into(),
        reason,
    }
}

/// Checks every field of a resolved sandbox (§11.1); the first failure names its field.
pub fn check_spec(s: &ResolvedSandbox) -> Result<()> {
    if let Some(img) = &s.image {
        parse_image(img).map_err(|r| invalid("image", r))?;
    }
    if let Some(u) = &s.user {
        check_user(u).map_err(|r| invalid("user", r))?;
    }
    check_workspace_folder(&s.workspace_folder).map_err(|r| invalid("workspace_folder", r))?;
    for (layer, map) in [
        (iterion_envdeny::Layer::Repository, &s.env_layers.repo),
        (iterion_envdeny::Layer::Workflow, &s.env_layers.workflow),
    ] {
        for (n, v) in map {
            iterion_envdeny::validate_entry(layer, n, v).map_err(|e| {
                invalid(
                    format!("env.{}", iterion_envdeny::escape_name(n.as_bytes())),
                    e.to_string(),
                )
            })?;
        }
    }
    if let Some(b) = &s.build {
        for (k, v) in &b.args {
            check_build_arg_key(k).map_err(|r| invalid(format!("build.args.{}", k.escape_debug()), r))?;
            if v.contains('\0') {
                return Err(invalid(
                    format!("build.args.{k}"),
                    "the value contains a NUL byte".into(),
                ));
            }
        }
        if let Some(t) = &b.target {
            check_build_target(t).map_err(|r| invalid("build.target", r))?;
        }
    }
    for (i, c) in s.post_create.iter().enumerate() {
        if c.len() > 64 * 1024 {
            return Err(invalid(format!("post_create[{i}]"), "longer than 64 KiB".into()));
        }
        if c.contains('\0') {
            return Err(invalid(format!("post_create[{i}]"), "contains a NUL byte".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(field: &str, value: &str, expect: &str) {
        let got = match field {
            "image" => parse_image(value).map(|r| r.normalized()),
            "user" => check_user(value).map(|_| "ok".to_string()),
            "workspace" => check_workspace_folder(value).map(|_| "ok".to_string()),
            "arg" => check_build_arg_key(value).map(|_| "ok".to_string()),
            "target" => check_build_target(value).map(|_| "ok".to_string()),
            other => panic!("unknown field {other}"),
        };
        match (got, expect) {
            (Ok(v), e) if !e.starts_with("error") => assert_eq!(v, e, "{field} {value:?}"),
            (Err(r), e) if e.starts_with("error") => {
                assert!(
                    r.contains(&e["error ".len().min(e.len())..]),
                    "{field} {value:?}: {r}"
                )
            }
            (got, e) => panic!("{field} {value:?}: got {got:?}, want {e}"),
        }
    }

    #[test]
    fn vectors_16_2() {
        let hex = "a".repeat(64);
        check("image", "alpine", "docker.io/library/alpine:latest");
        check(
            "image",
            "ghcr.io/socialgouv/iterion-sandbox-slim:v1.2.3",
            "ghcr.io/socialgouv/iterion-sandbox-slim:v1.2.3",
        );
        check("image", "localhost:5000/x/y:tag", "localhost:5000/x/y:tag");
        check(
            "image",
            &format!("registry.example:443/a@sha256:{hex}"),
            &format!("registry.example:443/a@sha256:{hex}"),
        );
        check("image", "Alpine", "error lower-case");
        check("image", "-alpine", "error must not start with '-'");
        check("image", "alpine:3 ", "error whitespace");
        check(
            "image",
            &format!("alpine:{}", "a".repeat(129)),
            "error invalid tag",
        );
        check("image", "a@sha256:abc", "error 64 lower-case hex");
        check("image", "a//b", "error empty path component");
        for u in ["1000", "1000:1000", "node", "node:node", "devbox"] {
            check("user", u, "ok");
        }
        for u in ["-1", "1000:", ":1000", "a b", "root\n"] {
            check("user", u, "error not a valid user");
        }
        check("user", "4294967296", "error above 2147483647");
        check("workspace", "/workspace", "ok");
        check("workspace", "/home/jo/src/app", "ok");
        check("workspace", "workspace", "error must be an absolute path");
        check("workspace", "/", "error is not a workspace folder");
        check("workspace", "/proc/x", "error inside /proc");
        check("workspace", "/a,b", "error must not contain ','");
        check("workspace", "/a/../b", "error '..'");
        check("workspace", "/run/iterion/x", "error inside /run/iterion");
        check("arg", "VERSION", "ok");
        check("arg", "1X", "error not a valid build-arg name");
        check("arg", "A-B", "error not a valid build-arg name");
        check("target", "runtime", "ok");
        check("target", "-x", "error not a valid build target");
    }

    #[test]
    fn more_image_forms() {
        check("image", "ubuntu:22.04", "docker.io/library/ubuntu:22.04");
        check("image", "acme/tool", "docker.io/acme/tool:latest");
        check("image", "[::1]:5000/x", "[::1]:5000/x:latest");
        check("image", "a__b/c---d/e.f", "docker.io/a__b/c---d/e.f:latest");
        check("image", "a___b", "error invalid characters");
        check(
            "image",
            &format!("x:{}", "a".repeat(128)),
            &format!("docker.io/library/x:{}", "a".repeat(128)),
        );
    }
}
