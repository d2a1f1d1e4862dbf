//! `iterion-driver-k8s`: Kubernetes for iterion.
//!
//! Layer L2: the only crate of the workspace allowed to name `kube` / `k8s-openapi`; no type of theirs
//! appears in this API.
//!
//! **Built:** cluster access and its checks ([`cluster`]): in-cluster versus off-cluster discovery from an
//! injected environment (07 §2), the reachability and version check behind the doctor's `k8s_context`
//! (06 §4.11) and the `SelfSubjectAccessReview` permission check behind `k8s_rbac` (06 §4.12, 07 §7.3).
//!
//! **Built, not yet driven:** the pure core of the sibling-pod driver — names, labels and annotations
//! ([`names`], 07 §4), the refusals and the parsing of the user, the kubernetes mount forms and the pod
//! overrides ([`spec_check`], §3, §5.2, §5.4), the pod and NetworkPolicy manifests ([`manifest`], §5, §7.1;
//! snapshot-tested) and the exec script that keeps argv and environment values out of request URLs
//! ([`script`], §9), and the reading of the exec status channel and of a pod's readiness ([`status`], §9,
//! §10).
//!
//! **The driver** over those pieces ([`K8sDriver`], configured by [`K8sSettings`]):
//! prepare (refusals, overrides, the reachability and permission checks once per driver), start (the
//! NetworkPolicy before the pod, the pod, a watch until `Ready`, the shell probe), exec over the WebSocket
//! `v5.channel.k8s.io` protocol through the two-step script, `copy_in` / `copy_out` as `tar` over exec, status,
//! cleanup (the pod, then its NetworkPolicy once the pod is gone), and name conflicts resolved by the owner's
//! liveness (the owner pod looked up by name and UID, or this host's process table).
//!
//! A start also copies the runner's work dir into the pod (a streamed archive: sorted entries, links kept,
//! the run store and a linked worktree's `.git` file left out), bounded by the workspace copy timeout.
//! Between two steps, [`K8sRun`]'s `kill_leftovers` kills what a step left running in the pod.
//!
//! **Tests:** `tests/driver.rs` checks every API call of the lifecycle, in order, against a scripted fake API
//! server (`tests/support/scripted.rs`); `tests/conformance.rs` runs the driver conformance suite of
//! `iterion-test-support` (C01–C09, C11–C15, C30, C32) end to end through its engine-backed fake API server,
//! whose pods are containers of the local engine (an engine test: skipped without an engine, a failure under
//! `CI`).
//!
//! Its start report carries the listing of that copy ([`iterion_driver::WorkspaceCopy`]); the runtime does the
//! git fixup of a linked worktree and the copy back with mirrored deletions, and `iterion-host` selects the
//! driver on a cloud host.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use std::time::Duration;
//! use iterion_driver_k8s::cluster::{ClusterAccess, DiscoveryInputs, check_context, check_rbac};
//!
//! # async fn doctor(env: BTreeMap<String, String>) {
//! let access = ClusterAccess::discover(&DiscoveryInputs::new(env));
//! let context = check_context(&access, Duration::from_secs(5)).await;
//! println!("k8s_context {:?}: {}", context.status(), context.message());
//! if context.passed() {
//!     let rbac = check_rbac(&access, None, Duration::from_secs(5)).await;
//!     println!("k8s_rbac {:?}: {}", rbac.status(), rbac.message());
//! }
//! # }
//! ```
#![deny(missing_docs)]

mod abandon;
pub mod cluster;
mod driver;
mod kapi;
pub mod manifest;
pub mod names;
mod ready;
mod run;
pub mod script;
pub mod spec_check;
pub mod status;
mod workspace;
mod wsexec;

pub use driver::{K8sDriver, K8sSettings};
pub use run::K8sRun;
