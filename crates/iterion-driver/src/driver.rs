//! The `Driver` and `Run` traits (03 §3.1, §3.3).

use async_trait::async_trait;

use crate::error::Result;
use crate::exec::{Exec, ExecRequest};
use crate::types::{
    BuildRequest, Capabilities, CleanupReport, DriverKind, EngineInfo, Liveness, ManagedResource,
    NetworkLease, NetworkRequest, PrepareRequest, Prepared, RemoveOutcome, SandboxStatus, StartReport,
    StartRequest, TarSource, TarStream,
};

/// A sandbox driver, used as `Arc<dyn Driver>` chosen at run time.
///
/// Call order (the runtime follows it; drivers may assume it): `prepare`, `build` (only with a build spec and
/// `capabilities().build`), `network` (only when some policy is `allowlist` or `denylist`), the runtime binds
/// the proxy, `start` (borrowing the lease; on failure `start` removes what it created), post-create through
/// `Run::exec`, execs, `Run::cleanup`, then `NetworkLease::release`.
#[async_trait]
pub trait Driver: Send + Sync + std::fmt::Debug {
    /// Which driver.
    fn kind(&self) -> DriverKind;
    /// Best knowledge of the capabilities (after `engine_info`).
    fn capabilities(&self) -> Capabilities;
    /// Ping and identity; cached after the first success.
    async fn engine_info(&self) -> Result<EngineInfo>;
    /// Validation and image presence or pull; never starts anything.
    async fn prepare(&self, req: PrepareRequest) -> Result<Prepared>;
    /// Builds the image of a spec with `build`; `Unsupported` on drivers without build.
    async fn build(&self, prepared: Prepared, req: BuildRequest) -> Result<Prepared>;
    /// Reserves the egress placement.
    async fn network(&self, req: NetworkRequest) -> Result<NetworkLease>;
    /// Creates and starts the sandbox.
    async fn start(
        &self,
        prepared: Prepared,
        lease: Option<&NetworkLease>,
        req: StartRequest,
    ) -> Result<Started>;
    /// Every resource labelled `iterion.io/managed=true` (03 §9.2).
    async fn list_managed(&self) -> Result<Vec<ManagedResource>>;
    /// Liveness of a resource's owner (03 §8.1.2).
    async fn owner_liveness(&self, r: &ManagedResource) -> Liveness;
    /// Removes a managed resource; refuses one whose owner is `Alive` or `Foreign`.
    async fn remove_managed(&self, r: &ManagedResource) -> Result<RemoveOutcome>;
    /// Removes an image (build tags at cleanup).
    async fn remove_image(&self, reference: &str) -> Result<()>;
}

/// A started sandbox: exec, copy, status, cleanup.
///
/// After `cleanup`, every method returns `Error::SandboxGone`.
#[async_trait]
pub trait Run: Send + Sync + std::fmt::Debug {
    /// Container id or pod name.
    fn id(&self) -> &str;
    /// Which driver.
    fn kind(&self) -> DriverKind;
    /// Absolute workspace path inside the sandbox.
    fn workspace(&self) -> &str;
    /// Effective default user of execs.
    fn user(&self) -> Option<&str>;
    /// Starts one process.
    async fn exec(&self, req: ExecRequest) -> Result<Exec>;
    /// Extracts a tar stream into `dest_dir`.
    async fn copy_in(&self, dest_dir: &str, tar: TarSource) -> Result<()>;
    /// A tar stream of `src` (extract it with `safe_untar`).
    async fn copy_out(&self, src: &str) -> Result<TarStream>;
    /// Running, exited or gone.
    async fn status(&self) -> Result<SandboxStatus>;
    /// Removes the sandbox. Never fails; idempotent; concurrent callers wait for the same single cleanup and
    /// get the same report; not cancelled by the caller's cancellation.
    async fn cleanup(&self) -> CleanupReport;
    /// Panic path only: force removal within 5 s, synchronously.
    fn force_cleanup_blocking(&self);
    /// Kills every process of the sandbox except its own infrastructure (init, relay), for use between two
    /// steps when no exec of the caller is running: what a step left behind (`setsid … &`, daemons) does not
    /// outlive it. `Ok(Some(n))`: `n` processes were killed; `Ok(None)`: this sandbox cannot do it (a host
    /// run, or a driver without a process namespace of its own).
    async fn kill_leftovers(&self) -> Result<Option<u64>> {
        Ok(None)
    }
}

/// What `start` returns.
#[derive(Debug)]
pub struct Started {
    /// The sandbox handle.
    pub run: Box<dyn Run>,
    /// What was started.
    pub report: StartReport,
}

/// Compile-time proof that both traits are object safe.
#[allow(dead_code)]
fn _object_safe(_: &dyn Driver, _: &dyn Run) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + ?Sized>() {}

    #[test]
    fn trait_objects_are_send_and_sync() {
        assert_send_sync::<dyn Driver>();
        assert_send_sync::<dyn Run>();
        assert_send_sync::<std::sync::Arc<dyn Driver>>();
    }
}
