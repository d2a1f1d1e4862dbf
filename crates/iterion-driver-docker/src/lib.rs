//! `iterion-driver-docker`: the Docker / Podman driver over the engine API.
//!
//! Layer L2: the only crate of the workspace that names `bollard`; no bollard type leaves it.
#![deny(missing_docs)]
