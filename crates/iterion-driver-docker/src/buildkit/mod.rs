//! BuildKit through the engine API: the choice of builder, the BuildKit build request and its answer, and the
//! build session that serves secrets and registry credentials.
//!
//! Why hand-rolled: bollard's `buildkit` feature brings tonic, prost and generated BuildKit protocols (a large
//! compile on a small machine) for what is here a few messages of one or two fields ([`proto`]), an HTTP/2
//! server from the `h2` crate ([`session`]), and a streamed HTTP/1.1 request ([`request`]).
//!
//! The choice ([`choose`]): `ITERION_SANDBOX_BUILDER` = `auto` (default), `buildkit` or `classic`. Podman always
//! builds with its own builder behind the classic request. On Docker, `auto` takes BuildKit when the engine
//! advertises it (`Builder-Version: 2` from `_ping`) or when the build needs it (build secrets, or BuildKit-only
//! Dockerfile syntax: `RUN --mount`, a `# syntax=` directive), the classic builder otherwise; the choice and its
//! reason are in the `sandbox_build_*` events.

pub mod proto;
pub mod request;
pub mod session;
pub mod stream;

use crate::dockerfile::{self, Refusal};
use iterion_driver::{BuilderChoice, BuilderKind};

/// `ITERION_SANDBOX_BUILDER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BuilderSetting {
    /// BuildKit when the engine advertises it or the build needs it; the classic builder otherwise.
    #[default]
    Auto,
    /// BuildKit on Docker (Podman: its own builder, said in the event).
    BuildKit,
    /// The classic builder.
    Classic,
}

impl BuilderSetting {
    /// Parses `auto`, `buildkit` or `classic` (case-insensitive); `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(Self::Auto),
            "buildkit" => Some(Self::BuildKit),
            "classic" => Some(Self::Classic),
            _ => None,
        }
    }
}

/// Why a build wants BuildKit: its secrets or its Dockerfile.
pub fn needs_buildkit(dockerfile_text: &str, has_secrets: bool) -> Option<&'static str> {
    if has_secrets {
        return Some("build secrets are given");
    }
    if syntax_directive(dockerfile_text).is_some() {
        return Some("the Dockerfile has a `# syntax=` directive");
    }
    let (instructions, _) = dockerfile::parse(dockerfile_text);
    instructions
        .iter()
        .any(|i| i.keyword == "RUN" && !mounts(&i.args).is_empty())
        .then_some("the Dockerfile uses `RUN --mount`")
}

/// Chooses the builder. `podman`: the engine is Podman; `advertised`: `_ping` said `Builder-Version: 2`;
/// `needs`: what [`needs_buildkit`] found.
pub fn choose(setting: BuilderSetting, podman: bool, advertised: bool, needs: Option<&str>) -> BuilderChoice {
    let pick = |kind, reason: Option<String>| BuilderChoice { kind, reason };
    if podman {
        let reason = match setting {
            BuilderSetting::Classic => None,
            _ => Some(
                "podman builds with its own builder (buildah) behind the classic build request".to_owned(),
            ),
        };
        return pick(BuilderKind::Classic, reason);
    }
    match setting {
        BuilderSetting::BuildKit => pick(BuilderKind::BuildKit, None),
        BuilderSetting::Classic => pick(BuilderKind::Classic, None),
        BuilderSetting::Auto if advertised => pick(BuilderKind::BuildKit, None),
        BuilderSetting::Auto => match needs {
            Some(why) => pick(
                BuilderKind::BuildKit,
                Some(format!(
                    "{why}, which needs BuildKit (the engine does not advertise it)"
                )),
            ),
            None => pick(
                BuilderKind::Classic,
                Some(
                    "the engine does not advertise BuildKit (no `Builder-Version: 2` from _ping)".to_owned(),
                ),
            ),
        },
    }
}

/// The `# syntax=` parser directive at the top of a Dockerfile: `(line, image)`. Directives are comments
/// before the first instruction; every such comment is looked at (over-reading is the safe side here).
pub fn syntax_directive(text: &str) -> Option<(usize, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (i, raw) in text.lines().enumerate() {
        let t = raw.trim();
        if t.is_empty() {
            continue;
        }
        let rest = t.strip_prefix('#')?.trim_start();
        if let Some((k, v)) = rest.split_once('=')
            && k.trim().eq_ignore_ascii_case("syntax")
        {
            return Some((i + 1, v.trim().to_owned()));
        }
    }
    None
}

/// The `--mount=` options of a `RUN`'s arguments, each as `key=value` pairs.
fn mounts(args: &str) -> Vec<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = args.trim_start();
    while let Some(after) = rest.strip_prefix("--") {
        let end = after.find(char::is_whitespace).unwrap_or(after.len());
        if let Some(spec) = after[..end].strip_prefix("mount=") {
            out.push(
                spec.split(',')
                    .map(|kv| match kv.split_once('=') {
                        Some((k, v)) => (k.trim().to_ascii_lowercase(), v.trim().to_owned()),
                        None => (kv.trim().to_ascii_lowercase(), String::new()),
                    })
                    .collect(),
            );
        }
        rest = after[end..].trim_start();
    }
    out
}

/// Before a BuildKit build without network: what BuildKit itself would fetch, besides what
/// [`dockerfile::offline_plan`] checks for both builders. A `# syntax=` directive makes the engine pull a
/// frontend image, and `RUN --mount=…,from=<image>` an image; both are refused (a `from=` naming a stage is
/// fine).
pub fn offline_refusal(text: &str) -> Option<Refusal> {
    if let Some((line, image)) = syntax_directive(text) {
        return Some(Refusal {
            line,
            reason: format!(
                "the `# syntax={image}` directive makes BuildKit fetch a frontend image, and the build has no \
                 network (remove the directive, or run with network mode open)"
            ),
        });
    }
    let (instructions, _) = dockerfile::parse(text);
    let mut stages: Vec<String> = Vec::new();
    for ins in &instructions {
        match ins.keyword.as_str() {
            "FROM" => {
                let w: Vec<&str> = ins
                    .args
                    .split_whitespace()
                    .filter(|w| !w.starts_with("--"))
                    .collect();
                if let [_, a, name] = w.as_slice()
                    && a.eq_ignore_ascii_case("as")
                {
                    stages.push(name.to_ascii_lowercase());
                }
            }
            "RUN" => {
                for m in mounts(&ins.args) {
                    let Some((_, from)) = m.iter().find(|(k, _)| k == "from") else {
                        continue;
                    };
                    let f = from.to_ascii_lowercase();
                    if !stages.contains(&f) && !f.chars().all(|c| c.is_ascii_digit()) {
                        return Some(Refusal {
                            line: ins.line,
                            reason: format!(
                                "RUN --mount from={from}: BuildKit would fetch the image {from}, and the build \
                                 has no network (copy from a stage of this Dockerfile, or run with network \
                                 mode open)"
                            ),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse() {
        assert_eq!(BuilderSetting::parse("BuildKit"), Some(BuilderSetting::BuildKit));
        assert_eq!(BuilderSetting::parse(" classic "), Some(BuilderSetting::Classic));
        assert_eq!(BuilderSetting::parse(""), Some(BuilderSetting::Auto));
        assert_eq!(BuilderSetting::parse("v2"), None);
    }

    #[test]
    fn the_choice_is_visible() {
        use BuilderKind::{BuildKit, Classic};
        let c = |s, podman, adv, needs| {
            let c = choose(s, podman, adv, needs);
            (c.kind, c.reason.is_some())
        };
        assert_eq!(c(BuilderSetting::Auto, false, true, None), (BuildKit, false));
        assert_eq!(c(BuilderSetting::Auto, false, false, None), (Classic, true));
        assert_eq!(c(BuilderSetting::Auto, false, false, Some("x")), (BuildKit, true));
        assert_eq!(
            c(BuilderSetting::Classic, false, true, Some("x")),
            (Classic, false)
        );
        assert_eq!(c(BuilderSetting::BuildKit, false, false, None), (BuildKit, false));
        assert_eq!(c(BuilderSetting::BuildKit, true, true, None), (Classic, true));
        assert_eq!(c(BuilderSetting::Auto, true, true, Some("x")), (Classic, true));
        assert_eq!(c(BuilderSetting::Classic, true, false, None), (Classic, false));
        let r = choose(
            BuilderSetting::Auto,
            false,
            false,
            needs_buildkit("FROM a\n", true),
        )
        .reason
        .unwrap_or_default();
        assert!(r.starts_with("build secrets are given"), "{r}");
    }

    #[test]
    fn buildkit_syntax_is_recognised() {
        assert_eq!(needs_buildkit("FROM a\nRUN make\n", false), None);
        assert!(needs_buildkit("FROM a\nRUN --mount=type=secret,id=t cat /run/secrets/t\n", false).is_some());
        assert!(needs_buildkit("# syntax=docker/dockerfile:1\nFROM a\n", false).is_some());
        assert!(
            needs_buildkit("FROM a\n# syntax=x\n", false).is_none(),
            "not a directive after FROM"
        );
        assert_eq!(
            syntax_directive("\n# escape=`\n#Syntax = docker/dockerfile:1.4\nFROM a"),
            Some((3, "docker/dockerfile:1.4".into()))
        );
    }

    #[test]
    fn offline_buildkit_fetches_are_refused() {
        let r = offline_refusal("# syntax=docker/dockerfile:1\nFROM a\n").expect("refused");
        assert_eq!(r.line, 1);
        let r =
            offline_refusal("FROM a\nRUN --mount=type=bind,from=alpine:3,target=/x ls\n").expect("refused");
        assert!(r.line == 2 && r.reason.contains("from=alpine:3"), "{r:?}");
        let ok = "FROM a AS build\nRUN make\nFROM b\nRUN --mount=type=bind,from=build,target=/x ls\n\
                  RUN --mount=from=0 ls\nRUN --mount=type=secret,id=t cat /run/secrets/t\n";
        assert_eq!(offline_refusal(ok), None);
    }
}
