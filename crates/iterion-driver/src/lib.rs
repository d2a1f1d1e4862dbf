//! `iterion-driver`: the object-safe `Driver` and `Run` traits, exec types, typed errors and `NoopDriver`.
//!
//! Layer L1: depends on no container library.
#![deny(missing_docs)]
