//! A fake driver for lifecycle tests: records calls, can be told to fail or hang in a phase, and runs
//! execs on the host through an inner `NoopDriver` (so post-create commands and tool nodes really run).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use iterion_driver::{
    BuildRequest, Capabilities, Driver, DriverEvent, DriverKind, EgressPlacement, EngineInfo, Error,
    ImageRef, Liveness, ManagedResource, NetworkLease, NetworkRequest, NoopDriver, PrepareRequest, Prepared,
    ProxyListen, RemoveOutcome, Result, StartReport, StartRequest, Started, UserRemap,
};
use iterion_runtime::api::Runtime;
use iterion_runtime::events::EventRecord;
use iterion_runtime::lifecycle::{Cancel, DriverChoice, HostFacts, Launch, Outcome};
use iterion_runtime::store::{RunDocument, Store};

/// A container environment as given to `start`.
pub type EnvList = Vec<(String, String)>;

/// What the fake should do wrong.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// `prepare` returns this error.
    pub prepare: Option<Error>,
    /// `prepare` never returns.
    pub hang_prepare: bool,
    /// `build` returns this error (after emitting `BuildFailed`).
    pub build: Option<Error>,
    /// `start` returns this error.
    pub start: Option<Error>,
    /// `Run::cleanup` of the container reports this error.
    pub cleanup_error: Option<String>,
    /// `Run::cleanup` of the container never returns (a hanging stop).
    pub hang_cleanup: bool,
}

/// The fake driver.
#[derive(Debug, Clone)]
pub struct FakeDriver {
    pub calls: Arc<Mutex<Vec<String>>>,
    pub faults: Faults,
    pub env_seen: Arc<Mutex<Vec<EnvList>>>,
    /// The runtime-owned mounts of every start request.
    pub aux_seen: Arc<Mutex<Vec<Vec<iterion_driver::AuxMount>>>>,
    pub remap: Option<(u32, u32)>,
    /// Advertise host bind mounts (false: a driver without a host file system, like Kubernetes).
    pub host_binds: bool,
    inner: NoopDriver,
}

impl FakeDriver {
    pub fn new(faults: Faults) -> FakeDriver {
        FakeDriver {
            calls: Arc::default(),
            faults,
            env_seen: Arc::default(),
            aux_seen: Arc::default(),
            remap: None,
            host_binds: true,
            inner: NoopDriver::new(vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())]),
        }
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn call(&self, c: &str) {
        self.calls.lock().unwrap().push(c.to_owned());
    }
}

#[async_trait]
impl Driver for FakeDriver {
    fn kind(&self) -> DriverKind {
        DriverKind::Docker
    }
    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::linux_engine(true);
        c.host_binds = self.host_binds;
        c
    }
    async fn engine_info(&self) -> Result<EngineInfo> {
        Ok(EngineInfo::new(DriverKind::Docker, "fake engine"))
    }
    async fn prepare(&self, req: PrepareRequest) -> Result<Prepared> {
        self.call("prepare");
        if self.faults.hang_prepare {
            std::future::pending::<()>().await;
        }
        if let Some(e) = &self.faults.prepare {
            return Err(e.clone());
        }
        let image = req.sandbox.image.clone().unwrap_or_else(|| "built".into());
        req.events.emit(DriverEvent::ImageReady {
            image: image.clone(),
            digest: None,
            pulled: false,
            duration_ms: 1,
        });
        let mut p = Prepared::new(DriverKind::Docker, req.sandbox);
        p.image = Some(ImageRef {
            reference: image,
            digest: None,
            id: None,
        });
        Ok(p)
    }
    async fn build(&self, prepared: Prepared, req: BuildRequest) -> Result<Prepared> {
        self.call("build");
        let b = prepared.sandbox.build.clone().unwrap();
        req.events.emit(DriverEvent::BuildStarted {
            driver: DriverKind::Docker,
            dockerfile: b.dockerfile.clone(),
            context: b.context.clone(),
            target: "iterion-sandbox-build:x".into(),
            network: req.network,
            cache: iterion_driver::BuildCache::Miss,
            builder: iterion_driver::BuilderChoice {
                kind: iterion_driver::BuilderKind::Classic,
                reason: None,
            },
        });
        if let Some(e) = &self.faults.build {
            req.events.emit(DriverEvent::BuildFailed {
                driver: DriverKind::Docker,
                error: e.to_string(),
                builder: None,
            });
            return Err(e.clone());
        }
        Ok(prepared)
    }
    async fn network(&self, _req: NetworkRequest) -> Result<NetworkLease> {
        self.call("network");
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        Ok(NetworkLease::new(
            DriverKind::Docker,
            EgressPlacement::Advisory,
            ProxyListen::Tcp(addr),
            "127.0.0.1",
            0,
        ))
    }
    async fn start(
        &self,
        prepared: Prepared,
        _lease: Option<&NetworkLease>,
        req: StartRequest,
    ) -> Result<Started> {
        self.call(&format!("start {}", req.sandbox_key));
        if let Some(e) = &self.faults.start {
            return Err(e.clone());
        }
        self.env_seen.lock().unwrap().push(req.container_env.clone());
        self.aux_seen.lock().unwrap().push(req.aux_mounts.clone());
        let noop_p = self
            .inner
            .prepare(PrepareRequest::new(prepared.sandbox.clone()))
            .await?;
        let started = self.inner.start(noop_p, None, req.clone()).await?;
        let mut report = StartReport::new(
            "fakecontainer0123456789",
            prepared.sandbox.workspace_folder.clone(),
        );
        report.name = format!("iterion-{}", req.run_id);
        report.image.reference = prepared.image.map(|i| i.reference).unwrap_or_default();
        report.user = Some("1000:1000".into());
        report.user_remap = self.remap.map(|(uid, gid)| UserRemap { uid, gid });
        let run = FakeRun {
            inner: started.run,
            cleanup_error: self.faults.cleanup_error.clone(),
            hang_cleanup: self.faults.hang_cleanup,
            calls: self.calls.clone(),
        };
        Ok(Started {
            run: Box::new(run),
            report,
        })
    }
    async fn list_managed(&self) -> Result<Vec<ManagedResource>> {
        Ok(Vec::new())
    }
    async fn owner_liveness(&self, _r: &ManagedResource) -> Liveness {
        Liveness::Unknown
    }
    async fn remove_managed(&self, _r: &ManagedResource) -> Result<RemoveOutcome> {
        Ok(RemoveOutcome::AlreadyGone)
    }
    async fn remove_image(&self, _reference: &str) -> Result<()> {
        Ok(())
    }
}

/// A container run: execs on the host, cleanup recorded.
#[derive(Debug)]
pub struct FakeRun {
    inner: Box<dyn iterion_driver::Run>,
    cleanup_error: Option<String>,
    hang_cleanup: bool,
    calls: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl iterion_driver::Run for FakeRun {
    fn id(&self) -> &str {
        "fakecontainer0123456789"
    }
    fn kind(&self) -> DriverKind {
        DriverKind::Docker
    }
    fn workspace(&self) -> &str {
        self.inner.workspace()
    }
    fn user(&self) -> Option<&str> {
        None
    }
    async fn exec(&self, req: iterion_driver::ExecRequest) -> Result<iterion_driver::Exec> {
        self.inner.exec(req).await
    }
    async fn copy_in(&self, dest_dir: &str, tar: iterion_driver::TarSource) -> Result<()> {
        self.inner.copy_in(dest_dir, tar).await
    }
    async fn copy_out(&self, src: &str) -> Result<iterion_driver::TarStream> {
        self.inner.copy_out(src).await
    }
    async fn status(&self) -> Result<iterion_driver::SandboxStatus> {
        self.inner.status().await
    }
    async fn cleanup(&self) -> iterion_driver::CleanupReport {
        self.calls.lock().unwrap().push("cleanup".into());
        if self.hang_cleanup {
            std::future::pending::<()>().await;
        }
        let mut r = self.inner.cleanup().await;
        r.container_removed = self.cleanup_error.is_none();
        if let Some(e) = &self.cleanup_error {
            r.errors.push(e.clone());
        }
        r
    }
    fn force_cleanup_blocking(&self) {
        self.calls.lock().unwrap().push("force_cleanup".into());
        self.inner.force_cleanup_blocking()
    }
}

/// A temporary repository with a workflow file.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub work: PathBuf,
    pub store: PathBuf,
    pub file: PathBuf,
}

impl Fixture {
    pub fn new(workflow: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("repo");
        std::fs::create_dir_all(&work).unwrap();
        let store = dir.path().join("store");
        let file = work.join("wf.bot");
        std::fs::write(&file, workflow).unwrap();
        Fixture {
            dir,
            work,
            store,
            file,
        }
    }

    pub fn write(&self, rel: &str, text: &str) {
        let p = self.work.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    pub fn runtime(&self, choice: DriverChoice, env: &[(&str, &str)], builtin_auto: bool) -> Runtime {
        self.runtime_with(choice, env, builtin_auto, Cancel::new())
    }

    pub fn runtime_with(
        &self,
        choice: DriverChoice,
        env: &[(&str, &str)],
        builtin_auto: bool,
        cancel: Cancel,
    ) -> Runtime {
        let mut map: BTreeMap<String, String> =
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        map.insert("PATH".into(), std::env::var("PATH").unwrap_or_default());
        let host: Arc<dyn Driver> = Arc::new(NoopDriver::new(vec![(
            "PATH".into(),
            std::env::var("PATH").unwrap_or_default(),
        )]));
        let mut b = Runtime::builder()
            .host_driver(host)
            .driver_choice(choice)
            .store_dir(&self.store)
            .env(map)
            .cancel(cancel)
            .host_facts(HostFacts::new(
                None,
                Some(1000),
                Some(1000),
                "linux",
                self.dir.path().join("data"),
            ));
        if builtin_auto {
            b = b
                .builtin_default_mode(iterion_spec::resolve::ModeChoice::Auto)
                .default_image_version(Some("0.4.0".into()));
        }
        b.build().unwrap()
    }

    pub fn launch(&self) -> Launch {
        let bytes = std::fs::read(&self.file).unwrap();
        let checked = iterion_spec::check(&String::from_utf8_lossy(&bytes), &self.file.to_string_lossy());
        assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
        let wf = checked.workflows.into_iter().next().unwrap();
        Launch::new(wf, &self.file, bytes, &self.store, &self.work)
    }

    pub fn events(&self, o: &Outcome) -> Vec<EventRecord> {
        Store::at(&self.store).read_events(&o.run_id).unwrap()
    }

    pub fn doc(&self, o: &Outcome) -> RunDocument {
        Store::at(&self.store).read_run(&o.run_id).unwrap()
    }
}

/// The event types, in order.
pub fn types(events: &[EventRecord]) -> Vec<String> {
    events.iter().map(|e| e.event_type.clone()).collect()
}

/// The first event of a type.
pub fn first<'a>(events: &'a [EventRecord], t: &str) -> &'a EventRecord {
    events
        .iter()
        .find(|e| e.event_type == t)
        .unwrap_or_else(|| panic!("no {t} in {:?}", types(events)))
}

pub fn container(f: &FakeDriver) -> DriverChoice {
    DriverChoice::Container(Arc::new(f.clone()))
}

pub fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}
