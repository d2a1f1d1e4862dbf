//! `iterion-netproxy`: the egress proxy that enforces an `iterion-netpolicy` policy.
//!
//! Layer L1: usable by programs that have nothing to do with iterion.
#![deny(missing_docs)]
