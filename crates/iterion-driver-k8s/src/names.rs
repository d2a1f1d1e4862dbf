//! Names and identity of the objects the driver creates: the pod (and NetworkPolicy) name, the labels and the
//! annotations (07 §4). Pure functions over strings.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Name of the one container of a sandbox pod.
pub const CONTAINER_NAME: &str = "workload";

/// A DNS label is at most this long.
const MAX_NAME: usize = 63;

/// Characters of the run id kept before the hash suffix when the id had to be changed or shortened.
const KEPT: usize = 46;

fn sha_hex(s: &str) -> String {
    let d = Sha256::digest(s.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// `s` lower-cased, every character outside `[a-z0-9-]` replaced by `-`, trailing `-` removed.
fn dns_form(s: &str) -> String {
    let lowered: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    lowered.trim_end_matches('-').to_string()
}

/// The pod name of a run's sandbox, also the name of its NetworkPolicy: `iterion-<s>` (07 §4). A node's own
/// pod appends `-<first 8 characters of its spec key>`. When the run id is not already a valid name part, or
/// the name would exceed 63 characters, `s` is shortened and suffixed with 8 hex characters of the run id's
/// SHA-256 — for a node's pod with a budget that leaves room for its suffix, so every name is a DNS label.
pub fn pod_name(run_id: &str, spec_key: Option<&str>) -> String {
    let suffix = spec_key.map(|k| {
        let k: String = dns_form(k).chars().take(8).collect();
        format!("-{k}")
    });
    let suffix = suffix.unwrap_or_default();
    let s = dns_form(run_id);
    let fits = "iterion-".len() + s.len() + suffix.len() <= MAX_NAME;
    let s = if s == run_id && fits && !s.is_empty() && !s.starts_with('-') {
        s
    } else {
        let budget = MAX_NAME - "iterion-".len() - 9 - suffix.len();
        let kept: String = s.chars().take(KEPT.min(budget)).collect();
        let kept = kept.trim_matches('-');
        let hash = &sha_hex(run_id)[..8];
        if kept.is_empty() {
            hash.to_string()
        } else {
            format!("{kept}-{hash}")
        }
    };
    format!("iterion-{s}{suffix}")
}

/// Whether `v` is a valid label value: empty, or at most 63 characters of `[A-Za-z0-9-_.]` that begin and end
/// with an alphanumeric character.
pub fn is_label_value(v: &str) -> bool {
    if v.is_empty() {
        return true;
    }
    let b = v.as_bytes();
    v.len() <= MAX_NAME
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// The `iterion.io/run-id` label value: the run id when it is a valid label value, else `h-` + the first 16 hex
/// characters of its SHA-256 (the raw id is in the annotation of the same name).
pub fn run_id_label(run_id: &str) -> String {
    if is_label_value(run_id) && !run_id.is_empty() {
        run_id.to_string()
    } else {
        format!("h-{}", &sha_hex(run_id)[..16])
    }
}

/// What a pod or NetworkPolicy is, in the `iterion.io/component` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// The run's sandbox pod.
    Run,
    /// A node's own sandbox pod.
    Node,
    /// The per-run NetworkPolicy.
    Network,
}

impl Component {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Run => "run",
            Component::Node => "node",
            Component::Network => "network",
        }
    }
}

/// Who owns the objects: the runner process (and its pod, in a cluster).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Owner {
    /// `ITERION_POD_NAME`, else the host name.
    pub host: String,
    /// The runner's pid.
    pub pid: u32,
    /// The runner's start time, Unix seconds.
    pub start: u64,
    /// `ITERION_POD_UID`, when set.
    pub pod_uid: Option<String>,
    /// `ITERION_POD_NAME`, when set (with `pod_uid`, the objects get an owner reference).
    pub pod_name: Option<String>,
    /// The run store directory.
    pub store: String,
}

impl Owner {
    /// An owner with a host name, pid and start time.
    pub fn new(host: impl Into<String>, pid: u32, start: u64) -> Self {
        Owner {
            host: host.into(),
            pid,
            start,
            ..Owner::default()
        }
    }
}

/// The identity of one object: its name, labels and annotations (07 §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The pod name (for a NetworkPolicy: the name of the pod it confines, which is also its own name).
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// The identity of a run's pod (`node_key` none) or of a node's own pod (`node_key` = its spec key), or of
/// the NetworkPolicy that confines that pod (same name, component `network`).
pub fn identity(
    run_id: &str,
    run_name: Option<&str>,
    node_key: Option<&str>,
    component: Component,
    owner: &Owner,
) -> Identity {
    let name = pod_name(run_id, node_key);
    let mut labels = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        labels.insert(k.to_string(), v);
    };
    put("iterion.io/managed", "true".into());
    put("iterion.io/run-id", run_id_label(run_id));
    if let Some(n) = run_name.filter(|n| is_label_value(n) && !n.is_empty()) {
        put("iterion.io/run-name", n.to_string());
    }
    put("iterion.io/component", component.as_str().into());
    put("iterion.io/pod", name.clone());
    if is_label_value(&owner.host) {
        put("iterion.io/owner-host", owner.host.clone());
    }
    put("iterion.io/owner-pid", owner.pid.to_string());
    put("iterion.io/owner-start", owner.start.to_string());
    put("app.kubernetes.io/managed-by", "iterion".into());
    let mut annotations = BTreeMap::new();
    annotations.insert("iterion.io/run-id".to_string(), run_id.to_string());
    if let Some(n) = run_name {
        annotations.insert("iterion.io/run-name".to_string(), n.to_string());
    }
    annotations.insert("iterion.io/store".to_string(), owner.store.clone());
    if let Some(uid) = &owner.pod_uid {
        annotations.insert("iterion.io/owner-pod-uid".to_string(), uid.clone());
    }
    if let Some(k) = node_key {
        annotations.insert("iterion.io/sandbox-key".to_string(), k.to_string());
    }
    Identity {
        name,
        labels,
        annotations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(run_id: &str, expect: &str) {
        let got = pod_name(run_id, None);
        assert_eq!(got, expect, "{run_id:?}");
        assert!(got.len() <= 63, "{got}");
    }

    #[test]
    fn pod_names() {
        check(
            "0190f5c2-7d1e-7abc-9def-0123456789ab",
            "iterion-0190f5c2-7d1e-7abc-9def-0123456789ab",
        );
        check("run_123", "iterion-run-123-e17c932e");
        check("Run.X", "iterion-run-x-8f92673d");
        check(&"a".repeat(200), &format!("iterion-{}-c2a908d9", "a".repeat(46)));
        check("abc-", "iterion-abc-2211b74f");
    }

    #[test]
    fn node_pod_names_stay_dns_labels() {
        let uuid = "0190f5c2-7d1e-7abc-9def-0123456789ab";
        assert_eq!(
            pod_name(uuid, Some("3f2a9c81e0d4")),
            "iterion-0190f5c2-7d1e-7abc-9def-0123456789ab-3f2a9c81"
        );
        let long = pod_name(&"a".repeat(200), Some("3f2a9c81e0d4"));
        assert_eq!(long.len(), 63, "{long}");
        assert!(long.ends_with("-c2a908d9-3f2a9c81"), "{long}");
    }

    #[test]
    fn label_values() {
        for (v, ok) in [
            ("", true),
            ("0190f5c2-7d1e-7abc-9def-0123456789ab", true),
            ("a.b_c", true),
            ("-a", false),
            ("a-", false),
            ("a b", false),
            (&"a".repeat(64) as &str, false),
        ] {
            assert_eq!(is_label_value(v), ok, "{v:?}");
        }
        assert_eq!(run_id_label("run 1"), format!("h-{}", &sha_hex("run 1")[..16]));
    }

    #[test]
    fn identity_labels_and_annotations() {
        let mut owner = Owner::new("runner-7d9f", 42, 1_700_000_000);
        owner.pod_uid = Some("uid-1".into());
        owner.store = "/data/store".into();
        let id = identity(
            "r1",
            Some("bold-fox"),
            Some("abcdef0123"),
            Component::Node,
            &owner,
        );
        assert_eq!(id.name, "iterion-r1-abcdef01");
        assert_eq!(id.labels["iterion.io/pod"], id.name);
        assert_eq!(id.labels["iterion.io/component"], "node");
        assert_eq!(id.labels["iterion.io/run-name"], "bold-fox");
        assert_eq!(id.annotations["iterion.io/owner-pod-uid"], "uid-1");
        assert_eq!(id.annotations["iterion.io/sandbox-key"], "abcdef0123");
        let net = identity("r1", None, Some("abcdef0123"), Component::Network, &owner);
        assert_eq!(
            net.name, id.name,
            "a NetworkPolicy is named after the pod it confines"
        );
        assert_eq!(net.labels["iterion.io/pod"], id.name);
        assert_eq!(
            identity("r1", None, None, Component::Run, &owner).name,
            "iterion-r1"
        );
    }
}
