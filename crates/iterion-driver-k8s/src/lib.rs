//! `iterion-driver-k8s`: the Kubernetes sibling-pod driver.
//!
//! Layer L2: the only crate of the workspace allowed to name `kube` / `k8s-openapi`. Not built yet: the
//! composition root reports the kubernetes driver as unavailable with that reason.
#![deny(missing_docs)]

/// Why the kubernetes driver cannot be selected in this build.
pub const NOT_BUILT: &str = "the kubernetes driver is not built in this version of iterion";
