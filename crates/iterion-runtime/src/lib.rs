//! `iterion-runtime`: the run lifecycle, the run store and workflow execution over `Arc<dyn Driver>`.
//!
//! Layer L3: never names a container library; drivers are chosen by the composition root.
#![deny(missing_docs)]
