//! `iterion-netpolicy`: egress rule grammar, canonicalisation, matcher, presets and address classes.
//!
//! Layer L0: pure functions, no tokio, no DNS.
#![deny(missing_docs)]
