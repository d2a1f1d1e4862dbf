//! `iterion-envdeny`: which environment variable names may never reach a sandbox, and how the container and
//! exec environments are layered.
//!
//! Layer L0: pure functions over injected maps; never reads the process environment.
#![deny(missing_docs)]
