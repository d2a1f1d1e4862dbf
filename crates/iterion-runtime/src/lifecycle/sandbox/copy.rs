//! The copy back of a sandbox without a host file system (kubernetes), 05 §8.1 step 1: the pod's workspace
//! applied to the work dir with mirrored deletions, by the resources guard at cleanup.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use iterion_driver::Run;
use iterion_driver::copyback::{MirrorOptions, MirrorReport, mirror_back};

/// What the copy back of one sandbox needs, kept by the resources guard.
#[derive(Debug, Clone)]
pub(super) struct CopyBack {
    pub(super) run: Arc<dyn Run>,
    pub(super) work_dir: PathBuf,
    pub(super) listing: Arc<Vec<iterion_driver::CopiedEntry>>,
    pub(super) protect: Vec<PathBuf>,
    pub(super) bound: Duration,
}

/// Copies the sandbox's workspace back into the work dir (excluding `.git` and the run store), mirroring
/// deletions, bounded by the workspace copy timeout.
pub(super) async fn copy_back(cb: &CopyBack) -> Result<MirrorReport, String> {
    let work = async {
        let stream = cb
            .run
            .copy_out(cb.run.workspace())
            .await
            .map_err(|e| e.to_string())?;
        mirror_back(
            stream,
            &cb.work_dir,
            cb.listing.clone(),
            MirrorOptions {
                protect: cb.protect.clone(),
                // `copy_out` archives the directory under its own name
                prefix: std::path::Path::new(cb.run.workspace())
                    .file_name()
                    .map(PathBuf::from),
                ..MirrorOptions::default()
            },
        )
        .await
        .map_err(|e| e.to_string())
    };
    match tokio::time::timeout(cb.bound, work).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "did not finish within {}",
            iterion_driver::fmt_duration(cb.bound)
        )),
    }
}

/// The log line of a finished copy back.
pub(super) fn describe(id: &str, r: &MirrorReport) -> String {
    let short: String = id.chars().take(63).collect();
    format!(
        "sandbox: workspace copied back from {short}: {} entries written, {} files unchanged, {} deleted, {} protected entries left out, {} refused",
        r.written, r.unchanged, r.deleted, r.protected, r.skipped
    )
}
