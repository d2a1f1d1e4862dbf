//! The build step: choose the builder, read the build secrets, check and list (`imagebuild::plan`), key the
//! inputs (`buildcache`), reuse the image of that key or build it, and report `BuildStarted` / `BuildFinished` /
//! `BuildFailed` with the builder and the cache outcome.

use super::{common_ancestor, ms};
use crate::auth::Credentials;
use crate::buildcache;
use crate::buildkit::{self, BuilderSetting};
use crate::engine::Engine;
use crate::image;
use crate::imagebuild::{self, BuildInput};
use bollard::query_parameters::RemoveImageOptions;
use iterion_driver::labels::{
    self, BUILD_KEY, BUILDER_HOST, BUILDER_PID, BUILDER_START, ITERION_VERSION, STORE,
};
use iterion_driver::{
    BuildCache, BuildNetwork, BuildRequest, BuildSecretSource, BuilderChoice, BuilderKind, DriverEvent,
    DriverKind, Error as DError, ImageRef, LogLevel, Prepared, PullPolicy, SecretBytes, SetupPhase,
};
use iterion_spec::resolved::BuildSpec;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// The labels a cached image carries besides iterion's build labels: its key, the iterion version and the
/// process that built it (what `iterion sandbox prune` judges it by) under the `builder-*` labels: not the
/// owner labels, by which a reaper (also one of an earlier version) removes what a gone process left.
fn cache_labels(req: &BuildRequest, key: &str, version: &str) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(BUILD_KEY.to_owned(), key.to_owned());
    l.insert(ITERION_VERSION.to_owned(), labels::sanitize_label_value(version));
    if let Some(o) = &req.owner {
        l.insert(
            BUILDER_HOST.to_owned(),
            labels::sanitize_label_value(&o.host_name),
        );
        l.insert(BUILDER_PID.to_owned(), o.pid.to_string());
        l.insert(BUILDER_START.to_owned(), o.start_time.to_string());
        l.insert(
            STORE.to_owned(),
            labels::sanitize_label_value(&o.store_dir.to_string_lossy()),
        );
    }
    l
}

/// What the driver gives a build besides the request.
pub(super) struct BuildSettings<'a> {
    /// Docker or Podman.
    pub kind: DriverKind,
    /// iterion's version (a label of the image).
    pub version: &'a str,
    /// `ITERION_SANDBOX_BUILDER`.
    pub builder: BuilderSetting,
    /// Registry credentials.
    pub credentials: Credentials,
}

/// Bytes a build secret may have (BuildKit's own bound).
const MAX_SECRET_BYTES: u64 = 500 * 1024;

/// Reads the build secrets: an env value as given, a file now (unreadable, too large or a duplicate id is an
/// error naming the secret, never its value).
fn read_secrets(req: &BuildRequest) -> Result<BTreeMap<String, SecretBytes>, DError> {
    let invalid = |reason: String| DError::InvalidSpec {
        field: "--sandbox-build-secret".into(),
        reason,
    };
    let mut out = BTreeMap::new();
    for s in &req.secrets {
        let value = match &s.source {
            BuildSecretSource::Env { value, .. } => value.clone(),
            BuildSecretSource::File(path) => {
                match iterion_spec::source::read_regular(path, MAX_SECRET_BYTES) {
                    iterion_spec::source::FileRead::Found(b) => SecretBytes::new(b),
                    other => {
                        return Err(invalid(format!(
                            "secret {}: cannot read {}: {other}",
                            s.id,
                            path.display()
                        )));
                    }
                }
            }
        };
        if out.insert(s.id.clone(), value).is_some() {
            return Err(invalid(format!("secret {} is given twice", s.id)));
        }
    }
    Ok(out)
}

/// The builder of this build (`auto` looks at the engine, the secrets and the Dockerfile).
fn choice_of(engine: &Engine, setting: BuilderSetting, b: &BuildSpec, has_secrets: bool) -> BuilderChoice {
    let facts = engine.facts();
    let text = iterion_spec::source::read_regular(std::path::Path::new(&b.dockerfile), MAX_FILE)
        .into_bytes()
        .map(|t| String::from_utf8_lossy(&t).into_owned())
        .unwrap_or_default();
    let needs = buildkit::needs_buildkit(&text, has_secrets);
    buildkit::choose(setting, facts.podman, facts.buildkit, needs)
}

const MAX_FILE: u64 = iterion_spec::source::MAX_FILE_BYTES;

fn input_of(b: &BuildSpec, req: &BuildRequest) -> BuildInput {
    let dockerfile = PathBuf::from(&b.dockerfile);
    let context = PathBuf::from(&b.context);
    let root = common_ancestor(&dockerfile, &context);
    let mut input = BuildInput::new(dockerfile, context, root, String::new(), req.run_id.clone());
    input.target = b.target.clone();
    input.args = b.args.clone();
    input.network = req.network;
    input.pull = req.pull_policy == PullPolicy::Always && req.network == BuildNetwork::Open;
    input.timeout = req.build_timeout;
    // the run store may lie inside the context: its records never go to the engine (nor into the key)
    input.exclude = req.owner.iter().map(|o| o.store_dir.clone()).collect();
    input
}

/// What a build produced.
struct Outcome {
    tag: String,
    id: Option<String>,
    cache: BuildCache,
}

/// Builds (or reuses) the image of `prepared`'s build and returns the prepared spec running it.
pub(super) async fn build(
    engine: &Engine,
    settings: &BuildSettings<'_>,
    prepared: Prepared,
    req: &BuildRequest,
) -> iterion_driver::Result<Prepared> {
    let kind = settings.kind;
    let Some(b) = prepared.sandbox.build.clone() else {
        return Ok(prepared);
    };
    let secrets = match read_secrets(req) {
        Ok(s) => s,
        Err(e) => {
            req.events.emit(DriverEvent::BuildFailed {
                driver: kind,
                error: e.to_string(),
                builder: None,
            });
            return Err(e);
        }
    };
    let choice = choice_of(engine, settings.builder, &b, !secrets.is_empty());
    let ctx = Ctx {
        kind,
        version: settings.version,
        choice: &choice,
        credentials: &settings.credentials,
        secrets,
    };
    if req.pull_policy == PullPolicy::Always && req.network == BuildNetwork::None {
        req.events.log(
            LogLevel::Warn,
            format!(
                "build of {}: base images are not pulled (pull policy always) because the build has no \
                 network under this network policy; the images present on this host are used",
                b.dockerfile
            ),
        );
    }
    let started = Instant::now();
    let mut announced = false;
    let res = cached_build(engine, &ctx, &b, req, &mut announced).await;
    match res {
        Ok(out) => {
            req.events.emit(DriverEvent::BuildFinished {
                driver: kind,
                target: out.tag.clone(),
                duration_ms: ms(started.elapsed()),
                network: req.network,
                cache: out.cache,
                builder: choice.clone(),
            });
            let mut p = prepared;
            p.sandbox.build = None;
            p.sandbox.image = Some(out.tag.clone());
            p.image = Some(ImageRef {
                reference: out.tag,
                digest: None,
                id: out.id,
            });
            Ok(p)
        }
        Err(e) => {
            let e: DError = match e {
                crate::Error::SetupTimeout { after, .. } => DError::SetupTimeout {
                    phase: SetupPhase::Build,
                    after,
                    subject: Some(b.dockerfile.clone()),
                },
                other => other.into(),
            };
            if !announced {
                started_event(req, &ctx, &b, BuildCache::Miss);
            }
            req.events.emit(DriverEvent::BuildFailed {
                driver: kind,
                error: e.to_string(),
                builder: Some(choice.clone()),
            });
            Err(e)
        }
    }
}

/// The choices of one build.
struct Ctx<'a> {
    kind: DriverKind,
    version: &'a str,
    choice: &'a BuilderChoice,
    credentials: &'a Credentials,
    secrets: BTreeMap<String, SecretBytes>,
}

fn started_event(req: &BuildRequest, ctx: &Ctx<'_>, b: &BuildSpec, cache: BuildCache) {
    req.events.emit(DriverEvent::BuildStarted {
        driver: ctx.kind,
        dockerfile: b.dockerfile.clone(),
        context: b.context.clone(),
        target: b.target.clone().unwrap_or_default(),
        network: req.network,
        cache,
        builder: ctx.choice.clone(),
    });
}

/// The steps: every check and the context listing, the key, the lookup (skipped by a rebuild and by pull
/// policy `always` with network, which refreshes the base images), then the engine's build tagged by the key.
async fn cached_build(
    engine: &Engine,
    ctx: &Ctx<'_>,
    b: &BuildSpec,
    req: &BuildRequest,
    announced: &mut bool,
) -> crate::Result<Outcome> {
    let mut input = input_of(b, req);
    input.builder = ctx.choice.kind;
    input.secrets = ctx.secrets.clone();
    input.credentials = ctx.credentials.clone();
    if input.builder == BuilderKind::Classic && !input.secrets.is_empty() {
        return Err(crate::Error::Unsupported {
            driver: engine.facts().driver_name(),
            feature: match &ctx.choice.reason {
                Some(why) => {
                    format!("build secrets: they need BuildKit, and the classic builder is used ({why})")
                }
                None => "build secrets with ITERION_SANDBOX_BUILDER=classic (they need BuildKit)".into(),
            },
        });
    }
    let planned = imagebuild::plan(engine, &input).await?;
    let (planned, key) = buildcache::key_of(engine, &input, planned).await?;
    let tag = buildcache::tag_of(&key);
    let reuse = !req.rebuild && !input.pull;
    let present = buildcache::lookup(engine, &key).await?;
    if reuse && let Some(hit) = present {
        started_event(req, ctx, b, BuildCache::Hit);
        *announced = true;
        return Ok(Outcome {
            tag,
            id: Some(hit.id),
            cache: BuildCache::Hit,
        });
    }
    started_event(req, ctx, b, BuildCache::Miss);
    *announced = true;
    let previous = image::inspect(engine, &tag).await?.map(|l| l.id);
    input.tag = tag.clone();
    input.labels = cache_labels(req, &key, ctx.version);
    let events = req.events.clone();
    let progress = move |s: &str| events.log(LogLevel::Info, format!("build: {s}"));
    imagebuild::build_planned(engine, &input, planned, &progress).await?;
    let id = image::inspect(engine, &tag).await?.map(|l| l.id);
    if let Some(old) = previous.filter(|old| Some(old) != id.as_ref()) {
        // The tag moved to the new image: the one it named is removed unless a container still uses it.
        let opts = RemoveImageOptions {
            force: false,
            noprune: false,
            platforms: None,
        };
        if let Err(e) = engine.docker.remove_image(&old, Some(opts), None).await {
            req.events.log(
                LogLevel::Info,
                format!("build: the image {tag} named before this build is kept: {e}"),
            );
        }
    }
    Ok(Outcome {
        tag,
        id,
        cache: BuildCache::Miss,
    })
}
