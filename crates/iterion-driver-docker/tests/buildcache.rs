//! The build cache on the real engine: a second build of the same inputs reuses the image (`cache: hit`), a
//! changed context file or build argument builds again (`miss`), a rebuild builds and keeps the tag, and a
//! cached image is never a way around the checks of a build without network.

mod support;

use iterion_driver::{
    BuildCache, BuildNetwork, BuildRequest, Driver, DriverEvent, Error as DError, EventSink, ExecRequest,
    OutputLimits, PrepareRequest, Prepared, PullPolicy, StartRequest, exec_collect, owner,
};
use iterion_driver_docker::DockerDriver;
use iterion_spec::resolved::{BuildSpec, ResolvedSandbox};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

struct Fixture {
    driver: DockerDriver,
    image: String,
    ws: PathBuf,
    _dir: tempfile::TempDir,
    store: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let image = iterion_test_support::docker_image::ensure_test_image().expect("image");
    let dir = tempfile::tempdir().expect("ws");
    let ws = std::fs::canonicalize(dir.path()).expect("canon");
    Fixture {
        driver: support::driver().await,
        image,
        ws,
        _dir: dir,
        store: tempfile::tempdir().expect("store"),
    }
}

/// What one build reported and produced.
struct Built {
    prepared: Result<Prepared, DError>,
    started: Option<BuildCache>,
    finished: Option<BuildCache>,
}

impl Built {
    fn tag(&self) -> String {
        match &self.prepared {
            Ok(p) => p.image.clone().expect("image").reference,
            Err(e) => panic!("build failed: {e}"),
        }
    }
    fn id(&self) -> String {
        match &self.prepared {
            Ok(p) => p.image.clone().expect("image").id.expect("id"),
            Err(e) => panic!("build failed: {e}"),
        }
    }
    fn cache(&self) -> (Option<BuildCache>, Option<BuildCache>) {
        (self.started, self.finished)
    }
}

impl Fixture {
    fn sandbox(&self, args: &[(&str, &str)]) -> ResolvedSandbox {
        let mut sb = iterion_test_support::conformance::sandbox_for(Some(&self.image), &self.ws);
        sb.image = None;
        sb.build = Some(BuildSpec {
            dockerfile: self.ws.join("Dockerfile").display().to_string(),
            context: self.ws.display().to_string(),
            target: None,
            args: args
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        });
        sb
    }

    async fn build(&self, run_id: &str, args: &[(&str, &str)], f: impl FnOnce(&mut BuildRequest)) -> Built {
        let mut p = PrepareRequest::new(self.sandbox(args));
        p.pull_policy = PullPolicy::Never;
        let prepared = self.driver.prepare(p).await.expect("prepare");
        let seen: Arc<Mutex<Vec<DriverEvent>>> = Arc::default();
        let sink = seen.clone();
        let mut req = BuildRequest::new(run_id);
        req.owner = Some(owner::current_owner(self.store.path()));
        req.network = BuildNetwork::Open;
        req.events = EventSink::new(move |e| sink.lock().unwrap().push(e));
        f(&mut req);
        let prepared = self.driver.build(prepared, req).await;
        let events = seen.lock().unwrap().clone();
        let started = events.iter().find_map(|e| match e {
            DriverEvent::BuildStarted { cache, .. } => Some(*cache),
            _ => None,
        });
        let finished = events.iter().find_map(|e| match e {
            DriverEvent::BuildFinished { cache, .. } => Some(*cache),
            _ => None,
        });
        Built {
            prepared,
            started,
            finished,
        }
    }

    async fn greeting(&self, run_id: &str, built: Built) -> String {
        let prepared = built.prepared.expect("built");
        let req = StartRequest::new(run_id, &self.ws, owner::current_owner(self.store.path()));
        let started = self.driver.start(prepared, None, req).await.expect("start");
        let c = exec_collect(
            &*started.run,
            ExecRequest::shell("cat /greeting /data"),
            OutputLimits::default(),
        )
        .await
        .expect("exec");
        started.run.cleanup().await;
        c.stdout_text()
    }
}

const HIT: (Option<BuildCache>, Option<BuildCache>) = (Some(BuildCache::Hit), Some(BuildCache::Hit));
const MISS: (Option<BuildCache>, Option<BuildCache>) = (Some(BuildCache::Miss), Some(BuildCache::Miss));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_build_hits_and_a_changed_file_or_argument_misses() {
    if !iterion_test_support::engine_required("build_cache_hit_and_miss") {
        return;
    }
    let f = fixture().await;
    let (a, b, c) = (
        iterion_test_support::conformance::unique_name(),
        iterion_test_support::conformance::unique_name(),
        iterion_test_support::conformance::unique_name(),
    );
    let _guards = [
        support::RunGuard(a.clone()),
        support::RunGuard(b.clone()),
        support::RunGuard(c.clone()),
    ];
    std::fs::write(
        f.ws.join("Dockerfile"),
        format!(
            "FROM {}\nARG GREETING=hello\nCOPY data /data\nRUN echo \"$GREETING\" > /greeting\n",
            f.image
        ),
    )
    .expect("write");
    // unique bytes: no image of an earlier test run has these inputs
    std::fs::write(f.ws.join("data"), &a).expect("write");

    let first = f.build(&a, &[], |_| {}).await;
    assert_eq!(first.cache(), MISS);
    let tag = first.tag();
    assert!(tag.starts_with("iterion-sandbox-build:cache-"), "{tag}");
    let labels = support::engine_get(&format!("/images/{tag}/json"))["Config"]["Labels"].clone();
    assert_eq!(labels["iterion.io/managed"], "true");
    assert_eq!(labels["iterion.io/component"], "build");
    assert_eq!(labels["iterion.io/run-id"], a.as_str());
    assert_eq!(labels["iterion.io/builder-pid"], std::process::id().to_string());
    assert!(
        labels["iterion.io/owner-pid"].is_null(),
        "no owner labels: a reaper removes by them"
    );
    assert_eq!(labels["iterion.io/build-key"].as_str().map(|k| k.len()), Some(64));

    // another run, the same inputs: the image is reused, nothing is built
    let second = f.build(&b, &[], |_| {}).await;
    assert_eq!(second.cache(), HIT);
    assert_eq!((second.tag(), second.id()), (tag.clone(), first.id()));
    assert_eq!(f.greeting(&b, second).await, format!("hello\n{a}"));

    // a changed context file
    std::fs::write(f.ws.join("data"), &b).expect("write");
    let changed = f.build(&b, &[], |_| {}).await;
    assert_eq!(changed.cache(), MISS);
    assert_ne!(changed.tag(), tag);
    assert_eq!(f.greeting(&b, changed).await, format!("hello\n{b}"));

    // a changed build argument
    let with_arg = f.build(&c, &[("GREETING", "bye")], |_| {}).await;
    assert_eq!(with_arg.cache(), MISS);
    let arg_tag = with_arg.tag();
    let arg_id = with_arg.id();
    assert_eq!(f.greeting(&c, with_arg).await, format!("bye\n{b}"));

    // a rebuild of the same inputs asks the engine again (whose own layer cache may give the same image) and
    // keeps the tag
    let rebuilt = f.build(&c, &[("GREETING", "bye")], |r| r.rebuild = true).await;
    assert_eq!(rebuilt.cache(), MISS);
    assert_eq!(rebuilt.tag(), arg_tag);
    assert!(!arg_id.is_empty());
    let again = f.build(&c, &[("GREETING", "bye")], |_| {}).await;
    assert_eq!(again.cache(), HIT);
}

/// A Dockerfile that builds with network (its remote `ONBUILD ADD` is only stored) but is refused without
/// network: the image cached by the build with network is not used by the build without it, which is refused
/// by the Dockerfile check before any lookup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_image_is_no_way_around_the_checks_of_a_build_without_network() {
    if !iterion_test_support::engine_required("build_cache_offline_checks") {
        return;
    }
    let f = fixture().await;
    let a = iterion_test_support::conformance::unique_name();
    let _g = support::RunGuard(a.clone());
    std::fs::write(
        f.ws.join("Dockerfile"),
        format!(
            "FROM {}\nONBUILD ADD http://127.0.0.1:9/x /x\nRUN echo {a} > /greeting\n",
            f.image
        ),
    )
    .expect("write");
    let open = f.build(&a, &[], |_| {}).await;
    assert_eq!(open.cache(), MISS);
    let again = f.build(&a, &[], |_| {}).await;
    assert_eq!(again.cache(), HIT);
    let offline = f.build(&a, &[], |r| r.network = BuildNetwork::None).await;
    let err = offline.prepared.expect_err("refused");
    assert!(
        matches!(&err, DError::BuildRefused { line: 2, .. }),
        "refused at the ONBUILD line: {err}"
    );
    assert_eq!(offline.started, Some(BuildCache::Miss));
}
