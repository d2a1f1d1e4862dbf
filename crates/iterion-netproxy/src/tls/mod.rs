//! TLS inspection and secret substitution (spec §14), compiled with the `tls-inspection` feature.
//!
//! Active only when at least one [`crate::SecretBinding`] is configured: a per-run CA is minted ([`ca`]),
//! CONNECT tunnels whose first bytes are a TLS ClientHello are terminated with a leaf certificate for the SNI and
//! re-encrypted towards the pinned upstream ([`intercept`]), HTTP/1.1 requests are relayed one by one with
//! placeholders replaced by the real values for bound hosts and refused elsewhere ([`http`]), responses from
//! bound hosts are scrubbed ([`scan`]), and tunnels that are not TLS are scanned for placeholders ([`raw`]).
//!
//! Module order (each imports only those before it): [`scan`], [`ca`], [`inspector`], [`context`]; then, above
//! `crate::shared` and `crate::forward`, [`raw`], [`http`], [`intercept`].

pub(crate) mod ca;
pub(crate) mod context;
pub(crate) mod http;
pub(crate) mod inspector;
pub(crate) mod intercept;
pub(crate) mod raw;
pub(crate) mod scan;

#[cfg(test)]
mod tests;

pub(crate) use inspector::{BuildError, Inspector};
