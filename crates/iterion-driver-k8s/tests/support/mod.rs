//! Test support: the fake API servers.

#[allow(dead_code)]
pub mod fake_api;
#[allow(dead_code)]
pub mod scripted;
