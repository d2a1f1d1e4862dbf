//! Labels of managed resources (03 §8.1.1), the owner they name (§8.1.2) and label-value sanitising (§11.1).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// `true` on every resource iterion creates.
pub const MANAGED: &str = "iterion.io/managed";
/// `run`, `node`, `network`, `build`, `doctor-probe`, `test`.
pub const COMPONENT: &str = "iterion.io/component";
/// The run id.
pub const RUN_ID: &str = "iterion.io/run-id";
/// The friendly run name.
pub const RUN_NAME: &str = "iterion.io/run-name";
/// Host name of the owning process.
pub const OWNER_HOST: &str = "iterion.io/owner-host";
/// Pid of the owning process, decimal.
pub const OWNER_PID: &str = "iterion.io/owner-pid";
/// Start time of the owning process, Unix seconds.
pub const OWNER_START: &str = "iterion.io/owner-start";
/// Absolute store directory of the run.
pub const STORE: &str = "iterion.io/store";
/// `run` or a node spec key.
pub const SANDBOX_KEY: &str = "iterion.io/sandbox-key";
/// The image reference as declared.
pub const IMAGE: &str = "iterion.io/image";
/// On a cached build image: the content hash of its build inputs (its tag is derived from it).
pub const BUILD_KEY: &str = "iterion.io/build-key";
/// On a cached build image: host name of the process that built it. Cached images outlive their run, so they
/// name their builder with these instead of the owner labels, which a reaper removes by.
pub const BUILDER_HOST: &str = "iterion.io/builder-host";
/// On a cached build image: pid of the process that built it.
pub const BUILDER_PID: &str = "iterion.io/builder-pid";
/// On a cached build image: start time of the process that built it, Unix seconds.
pub const BUILDER_START: &str = "iterion.io/builder-start";
/// The iterion version.
pub const ITERION_VERSION: &str = "iterion.io/iterion-version";

/// The iterion process that owns resources (03 §8.1.2), computed once by the CLI.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnerInfo {
    /// Host name.
    pub host_name: String,
    /// Process id.
    pub pid: u32,
    /// Process start time, Unix seconds.
    pub start_time: u64,
    /// Store directory of the run.
    pub store_dir: PathBuf,
}

/// Maximum bytes of a label value.
pub const MAX_LABEL_VALUE: usize = 253;

/// Value of [`COMPONENT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Component {
    /// The run container.
    Run,
    /// A node's own container.
    Node,
    /// A network.
    Network,
    /// A build image.
    Build,
    /// The doctor's throwaway sandbox.
    DoctorProbe,
    /// Test resources.
    Test,
}

impl Component {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Run => "run",
            Component::Node => "node",
            Component::Network => "network",
            Component::Build => "build",
            Component::DoctorProbe => "doctor-probe",
            Component::Test => "test",
        }
    }
}

/// Removes control characters and truncates to 253 bytes (on a character boundary). Never fails.
pub fn sanitize_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len().min(MAX_LABEL_VALUE));
    for c in v.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_LABEL_VALUE {
            break;
        }
        out.push(c);
    }
    out
}

/// Inputs of [`sandbox_labels`].
#[derive(Debug, Clone)]
pub struct LabelInput<'a> {
    /// Component.
    pub component: Component,
    /// Run id.
    pub run_id: &'a str,
    /// Friendly run name.
    pub run_name: Option<&'a str>,
    /// Owner.
    pub owner: &'a OwnerInfo,
    /// `run` or the spec key.
    pub sandbox_key: &'a str,
    /// Image reference as declared.
    pub image: Option<&'a str>,
    /// iterion version.
    pub version: &'a str,
}

/// Every label of §8.1.1 for one resource, values sanitised.
pub fn sandbox_labels(i: &LabelInput<'_>) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        m.insert(k.to_string(), sanitize_label_value(v));
    };
    put(MANAGED, "true");
    put(COMPONENT, i.component.as_str());
    put(RUN_ID, i.run_id);
    if let Some(n) = i.run_name {
        put(RUN_NAME, n);
    }
    put(OWNER_HOST, &i.owner.host_name);
    put(OWNER_PID, &i.owner.pid.to_string());
    put(OWNER_START, &i.owner.start_time.to_string());
    put(STORE, &i.owner.store_dir.to_string_lossy());
    put(SANDBOX_KEY, i.sandbox_key);
    if let Some(img) = i.image {
        put(IMAGE, img);
    }
    put(ITERION_VERSION, i.version);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expect: &str) {
        assert_eq!(sanitize_label_value(input), expect);
    }

    #[test]
    fn sanitising() {
        check("run-1", "run-1");
        check("a\nb\tc\u{7f}", "abc");
        check(&"x".repeat(300), &"x".repeat(253));
        check(&format!("{}é", "x".repeat(252)), &"x".repeat(252));
    }

    #[test]
    fn all_labels() {
        let owner = OwnerInfo {
            host_name: "ci-7".into(),
            pid: 4242,
            start_time: 1_764_400_000,
            store_dir: "/home/jo/.iterion/runs".into(),
        };
        let l = sandbox_labels(&LabelInput {
            component: Component::Run,
            run_id: "r\u{1}1",
            run_name: Some("nightly"),
            owner: &owner,
            sandbox_key: "run",
            image: Some("alpine:3"),
            version: "0.1.0",
        });
        let got: Vec<String> = l.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            got,
            [
                "iterion.io/component=run",
                "iterion.io/image=alpine:3",
                "iterion.io/iterion-version=0.1.0",
                "iterion.io/managed=true",
                "iterion.io/owner-host=ci-7",
                "iterion.io/owner-pid=4242",
                "iterion.io/owner-start=1764400000",
                "iterion.io/run-id=r1",
                "iterion.io/run-name=nightly",
                "iterion.io/sandbox-key=run",
                "iterion.io/store=/home/jo/.iterion/runs",
            ]
        );
    }
}
