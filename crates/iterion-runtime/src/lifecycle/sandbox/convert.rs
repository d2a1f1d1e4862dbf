//! Small conversions between resolved specs, driver values and event fields.
use std::time::Duration;

use iterion_netpolicy::Mode;
use iterion_spec::resolved::{
    HostState, NetworkMode, NetworkPolicySpec, Origin, ResolvedMode, ResolvedSandbox,
};

pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------------------
// Resources and cleanup

pub(super) fn origin_label(r: &ResolvedSandbox) -> &'static str {
    match r.origin {
        Origin::Devcontainer => "devcontainer",
        Origin::DefaultImage => "default_image",
        Origin::Workflow | Origin::Node => {
            if r.build.is_some() {
                "build"
            } else {
                "image"
            }
        }
    }
}

pub(super) fn mode_of(m: NetworkMode) -> Mode {
    match m {
        NetworkMode::Allowlist => Mode::Allowlist,
        NetworkMode::Denylist => Mode::Denylist,
        NetworkMode::Open => Mode::Open,
    }
}

/// A dummy spec for the host driver's `prepare` (the noop driver only records why it skipped).
pub(super) fn host_spec(work_dir: &str) -> ResolvedSandbox {
    let mut s = ResolvedSandbox {
        mode: ResolvedMode::Auto,
        source: "host".into(),
        origin: Origin::DefaultImage,
        devcontainer: None,
        image: None,
        build: None,
        user: None,
        workspace_folder: work_dir.to_owned(),
        post_create: Vec::new(),
        env_layers: Default::default(),
        mounts: Vec::new(),
        host_state: HostState::None,
        host_state_source: "host".into(),
        network: NetworkPolicySpec::open("host"),
        runtime: Default::default(),
        degrade_allowed: true,
        key: String::new(),
    };
    s.refresh_key();
    s
}
