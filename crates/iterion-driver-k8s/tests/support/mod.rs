//! Test support for the cluster-access tests.

pub mod fake_api;
