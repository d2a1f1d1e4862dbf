//! What the composition root hands the lifecycle about the host: its facts and the driver selection.
use std::path::PathBuf;
use std::sync::Arc;

use iterion_driver::Driver;

/// Facts about the host the lifecycle needs for host state (05 §4.6), gathered by the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostFacts {
    /// The host home.
    pub home: Option<PathBuf>,
    /// Host uid (Unix).
    pub uid: Option<u32>,
    /// Host gid (Unix).
    pub gid: Option<u32>,
    /// `linux`, `macos`, `windows`.
    pub os: String,
    /// iterion's data directory (05 §1.1).
    pub data_dir: PathBuf,
}

impl HostFacts {
    /// Facts with the given home, ids, OS and data dir.
    pub fn new(
        home: Option<PathBuf>,
        uid: Option<u32>,
        gid: Option<u32>,
        os: &str,
        data_dir: PathBuf,
    ) -> Self {
        HostFacts {
            home,
            uid,
            gid,
            os: os.to_owned(),
            data_dir,
        }
    }
}

/// What driver selection (03 §2, done by the composition root) produced for a run.
#[derive(Debug, Clone)]
pub enum DriverChoice {
    /// A container driver answered its availability probe.
    Container(Arc<dyn Driver>),
    /// No container runtime is usable: auto scopes degrade to the host, inline scopes fail with
    /// `SANDBOX_DRIVER_UNAVAILABLE`.
    Unavailable {
        /// Why (the probe answers), for the log.
        reason: String,
    },
    /// The operator forced the `noop` driver: every active scope runs on the host (unless the inline floor
    /// is active).
    ForcedNoop,
    /// The operator forced a driver that is not usable: every active scope fails.
    ForcedUnavailable {
        /// The error text, naming the forcing source.
        message: String,
    },
}

impl DriverChoice {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            DriverChoice::Container(d) => d.kind().as_str(),
            DriverChoice::ForcedNoop => "noop",
            _ => "none",
        }
    }
}
