//! Image presence and pull (03 §5.2): normalisation, inspect, pull with a bound and error classification.

use crate::engine::Engine;
use crate::error::{Error, Result, engine, status_of};
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures::StreamExt;
use std::time::{Duration, Instant};

/// When to pull (05 §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PullPolicy {
    /// Pull when missing, and refresh `edge` / `latest` / untagged references.
    Auto,
    /// Pull only when missing (the default).
    #[default]
    Missing,
    /// Always pull.
    Always,
    /// Never pull.
    Never,
}

/// A normalised image reference (03 §11.2 normalisation; validation is the spec-safety check's job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host (`docker.io` when absent).
    pub domain: String,
    /// Repository path (`library/` added for single-component Docker Hub names).
    pub path: String,
    /// Tag, `latest` when neither tag nor digest is given.
    pub tag: Option<String>,
    /// Digest (`sha256:…`).
    pub digest: Option<String>,
    /// Whether the reference named neither tag nor digest.
    pub untagged: bool,
}

impl ImageRef {
    /// Normalises `alpine` → `docker.io/library/alpine:latest`.
    pub fn parse(reference: &str) -> Self {
        let (rest, digest) = match reference.split_once('@') {
            Some((r, d)) => (r, Some(d.to_string())),
            None => (reference, None),
        };
        let (name, tag) = match rest.rfind(':') {
            Some(i) if !rest[i + 1..].contains('/') => (&rest[..i], Some(rest[i + 1..].to_string())),
            _ => (rest, None),
        };
        let (domain, path) = match name.split_once('/') {
            Some((first, p)) if first.contains('.') || first.contains(':') || first == "localhost" => {
                (first.to_string(), p.to_string())
            }
            _ => ("docker.io".to_string(), name.to_string()),
        };
        let path = if domain == "docker.io" && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        let untagged = tag.is_none() && digest.is_none();
        let tag = if untagged { Some("latest".to_string()) } else { tag };
        Self {
            domain,
            path,
            tag,
            digest,
            untagged,
        }
    }

    /// `domain/path`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// The full normalised reference.
    pub fn full(&self) -> String {
        let mut s = self.name();
        if let Some(t) = &self.tag {
            s.push(':');
            s.push_str(t);
        }
        if let Some(d) = &self.digest {
            s.push('@');
            s.push_str(d);
        }
        s
    }

    /// Whether policy `Auto` refreshes a present copy (tag `edge` or `latest`, or untagged).
    pub fn refreshes_on_auto(&self) -> bool {
        self.digest.is_none() && (self.untagged || matches!(self.tag.as_deref(), Some("edge" | "latest")))
    }
}

/// Classifies a pull error message (03 §5.2 step 4, §16.9).
pub fn classify_pull_error(image: &str, registry: &str, message: &str) -> Error {
    let m = message.to_ascii_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| m.contains(w));
    if any(&[
        "not found",
        "manifest unknown",
        "repository does not exist",
        "name unknown",
    ]) {
        Error::ImageNotFound {
            image: image.to_string(),
        }
    } else if any(&[
        "unauthorized",
        "denied",
        "authentication required",
        "no basic auth credentials",
    ]) {
        Error::ImageAuth {
            image: image.to_string(),
            registry: registry.to_string(),
        }
    } else {
        Error::ImagePull {
            image: image.to_string(),
            reason: message.to_string(),
        }
    }
}

/// What is known about a local image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalImage {
    /// Image id (`sha256:…`).
    pub id: String,
    /// First repo digest, when any.
    pub digest: Option<String>,
    /// Image OS.
    pub os: Option<String>,
    /// Image architecture.
    pub arch: Option<String>,
    /// Its environment (`K=V`).
    pub env: Vec<String>,
    /// Its `ONBUILD` triggers.
    pub onbuild: Vec<String>,
    /// Its labels.
    pub labels: std::collections::BTreeMap<String, String>,
}

/// The outcome of [`ensure_image`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReady {
    /// The reference as declared.
    pub reference: String,
    /// The local image.
    pub image: LocalImage,
    /// Whether a pull happened.
    pub pulled: bool,
    /// Time spent.
    pub duration: Duration,
    /// Warnings to log (refresh failures, architecture mismatch).
    pub warnings: Vec<String>,
}

/// Inspects `reference` locally; `None` when the engine has no such image.
pub async fn inspect(engine: &Engine, reference: &str) -> Result<Option<LocalImage>> {
    match engine.docker.inspect_image(reference).await {
        Ok(i) => {
            let config = i.config.unwrap_or_default();
            Ok(Some(LocalImage {
                id: i.id.unwrap_or_default(),
                digest: i.repo_digests.and_then(|d| d.into_iter().next()),
                os: i.os,
                arch: i.architecture,
                env: config.env.unwrap_or_default(),
                onbuild: config.on_build.unwrap_or_default(),
                labels: config.labels.unwrap_or_default().into_iter().collect(),
            }))
        }
        Err(e) if status_of(&e) == Some(404) => Ok(None),
        Err(e) => Err(engine_err(e)),
    }
}

fn engine_err(e: bollard::errors::Error) -> Error {
    engine(e)
}

/// Pulls `reference`, bounded by `timeout` (on expiry the request is dropped, which cancels the engine's
/// pull), with the registry's credentials from `credentials` in `X-Registry-Auth`. `progress` receives the
/// engine's status lines.
pub async fn pull(
    engine: &Engine,
    reference: &str,
    timeout: Duration,
    progress: &(dyn Fn(&str) + Send + Sync),
    credentials: &crate::auth::Credentials,
) -> Result<()> {
    let r = ImageRef::parse(reference);
    // looked up only now: a present image never runs a credential helper
    let auth = credentials.lookup(&r.domain).await;
    let tag = r
        .digest
        .clone()
        .or(r.tag.clone())
        .unwrap_or_else(|| "latest".into());
    let opts = CreateImageOptionsBuilder::default()
        .from_image(&r.name())
        .tag(&tag)
        .build();
    let work = async {
        let creds = auth.as_ref().map(|a| bollard::auth::DockerCredentials {
            username: a.username.clone(),
            password: a.password.clone(),
            identitytoken: a.identity_token.clone(),
            serveraddress: Some(r.domain.clone()),
            ..Default::default()
        });
        let mut stream = engine.docker.create_image(Some(opts), None, creds);
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(s) = info.status {
                        progress(&s);
                    }
                }
                Err(bollard::errors::Error::DockerStreamError { error }) => {
                    return Err(classify_pull_error(reference, &r.domain, &error));
                }
                Err(bollard::errors::Error::DockerResponseServerError { message, .. }) => {
                    return Err(classify_pull_error(reference, &r.domain, &message));
                }
                Err(e) => {
                    return Err(Error::ImagePull {
                        image: reference.to_string(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        Ok(())
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(Error::SetupTimeout {
            phase: "pull",
            after: timeout,
        }),
    }
}

/// Makes `reference` available according to `policy` (03 §5.2 steps 2–8). `engine_os` is the engine's OS.
pub async fn ensure_image(
    engine: &Engine,
    reference: &str,
    policy: PullPolicy,
    timeout: Duration,
    progress: &(dyn Fn(&str) + Send + Sync),
    credentials: &crate::auth::Credentials,
) -> Result<ImageReady> {
    let started = Instant::now();
    let r = ImageRef::parse(reference);
    let mut warnings = Vec::new();
    let present = inspect(engine, reference).await?;
    let refresh = match policy {
        PullPolicy::Always => true,
        PullPolicy::Auto => r.refreshes_on_auto(),
        PullPolicy::Missing | PullPolicy::Never => false,
    };
    let (image, pulled) = match (present, policy) {
        (Some(img), _) if !refresh => (img, false),
        (Some(img), PullPolicy::Never) => (img, false),
        (None, PullPolicy::Never) => {
            return Err(Error::ImageAbsent {
                image: reference.to_string(),
            });
        }
        (Some(img), _) => match pull(engine, reference, timeout, progress, credentials).await {
            Ok(()) => (inspect(engine, reference).await?.unwrap_or(img), true),
            Err(Error::ImagePull { reason, .. }) => {
                warnings.push(format!(
                    "refresh of '{reference}' failed ({reason}); using the local copy"
                ));
                (img, false)
            }
            Err(e) => return Err(e),
        },
        (None, _) => {
            pull(engine, reference, timeout, progress, credentials).await?;
            let img = inspect(engine, reference)
                .await?
                .ok_or_else(|| Error::ImagePull {
                    image: reference.to_string(),
                    reason: "the engine reported success but the image is not present".into(),
                })?;
            (img, true)
        }
    };
    let facts = engine.facts();
    if let Some(os) = &image.os
        && !os.is_empty()
        && !os.eq_ignore_ascii_case(&facts.os)
    {
        return Err(Error::Unsupported {
            driver: facts.driver_name(),
            feature: format!("image for {os}"),
        });
    }
    if let Some(arch) = &image.arch
        && !arch_matches(arch, &facts.arch)
    {
        warnings.push(format!(
            "image '{reference}' is for {arch} but the engine runs on {}; emulation may work",
            facts.arch
        ));
    }
    Ok(ImageReady {
        reference: reference.to_string(),
        image,
        pulled,
        duration: started.elapsed(),
        warnings,
    })
}

/// Whether an image architecture (`amd64`, `arm64`) matches the engine's (`x86_64`, `aarch64`).
pub fn arch_matches(image_arch: &str, engine_arch: &str) -> bool {
    let canon = |a: &str| {
        match a {
            "x86_64" | "amd64" => "amd64",
            "aarch64" | "arm64" => "arm64",
            other => other,
        }
        .to_string()
    };
    engine_arch.is_empty() || canon(image_arch) == canon(engine_arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_ref(input: &str, full: &str, refresh: bool) {
        let r = ImageRef::parse(input);
        assert_eq!(
            (r.full().as_str(), r.refreshes_on_auto()),
            (full, refresh),
            "{input}"
        );
    }

    #[test]
    fn normalisation() {
        check_ref("alpine", "docker.io/library/alpine:latest", true);
        check_ref("alpine:3", "docker.io/library/alpine:3", false);
        check_ref("acme/x:edge", "docker.io/acme/x:edge", true);
        check_ref("localhost:5000/x/y:tag", "localhost:5000/x/y:tag", false);
        check_ref("127.0.0.1:5000/stall/img:1", "127.0.0.1:5000/stall/img:1", false);
        let d = format!("sha256:{}", "a".repeat(64));
        check_ref(
            &format!("registry.example:443/a@{d}"),
            &format!("registry.example:443/a@{d}"),
            false,
        );
        check_ref(
            "ghcr.io/socialgouv/iterion-sandbox-slim:v1.2.3",
            "ghcr.io/socialgouv/iterion-sandbox-slim:v1.2.3",
            false,
        );
    }

    fn check(message: &str, expect: &str) {
        let e = classify_pull_error("img", "ghcr.io", message);
        let got = match e {
            Error::ImageNotFound { .. } => "ImageNotFound",
            Error::ImageAuth { .. } => "ImageAuth",
            Error::ImagePull { .. } => "ImagePull",
            _ => "other",
        };
        assert_eq!(got, expect, "{message}");
    }

    #[test]
    fn pull_error_classification_16_9() {
        check(
            "manifest for ghcr.io/acme/x:9 not found: manifest unknown",
            "ImageNotFound",
        );
        check(
            "pull access denied for acme/x, repository does not exist or may require 'docker login'",
            "ImageNotFound",
        );
        check("unauthorized: authentication required", "ImageAuth");
        check("Get \"https://ghcr.io/v2/\": dial tcp: i/o timeout", "ImagePull");
        check(
            "received unexpected HTTP status: 503 Service Unavailable",
            "ImagePull",
        );
        check("no basic auth credentials", "ImageAuth");
        check(
            "name unknown: repository name not known to registry",
            "ImageNotFound",
        );
    }

    #[test]
    fn timeout_message_names_the_setting() {
        let e = Error::SetupTimeout {
            phase: "pull",
            after: Duration::from_secs(600),
        };
        assert!(e.to_string().contains("ITERION_SANDBOX_PULL_TIMEOUT"), "{e}");
    }

    #[test]
    fn architectures() {
        assert!(arch_matches("amd64", "x86_64"));
        assert!(arch_matches("arm64", "aarch64"));
        assert!(!arch_matches("arm64", "x86_64"));
    }
}
