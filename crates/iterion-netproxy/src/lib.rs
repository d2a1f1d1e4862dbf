//! `iterion-netproxy`: the egress proxy that enforces an [`iterion_netpolicy`] policy.
//!
//! Layer L1: usable by programs that have nothing to do with iterion. It serves HTTP/1.1 `CONNECT` tunnels and
//! absolute-form `http://` forwarding on a TCP or Unix listener, authenticates clients with per-node credentials
//! (`Proxy-Authorization: Basic` or `Bearer`), and decides every request in two stages:
//!
//! 1. the **name stage** on the requested `host:port` (rules, last match wins, mode fallback);
//! 2. the **address stage**: the proxy resolves the name itself and refuses the request when **any** address is
//!    non-global (loopback, private, link-local, metadata, …) unless an explicit IP/CIDR rule names it — the
//!    SSRF guard. It then dials exactly the address it checked (pinned dial) and never resolves again.
//!
//! Refusals are `403` responses with `X-Iterion-Reason` and a JSON body naming the rule; every decision has a
//! UUIDv7 id reported in [`ProxyEvent`]s, delivered on a dedicated thread through a bounded queue so a slow
//! consumer never slows traffic.
//!
//! ```no_run
//! use iterion_netpolicy::{Mode, Policy};
//! use iterion_netproxy::{Credential, Listen, Proxy, ProxyConfig};
//! use std::sync::Arc;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = Policy::compile(Mode::Allowlist, &["iterion-default"], &["internal.acme.dev", "!evil.example"])
//!     .map_err(|errors| errors[0].to_string())?;
//! let token = iterion_netproxy::new_token();
//! let config = ProxyConfig::builder()
//!     .listen(Listen::Tcp("127.0.0.1:0".parse()?))
//!     .credential(Credential::new("ci", token.clone(), None, Arc::new(policy)))
//!     .on_event(|ev| eprintln!("{ev:?}"))
//!     .build()?; // validates everything
//! let running = Proxy::start(config).await?; // binds; returns once listening
//! println!("{}", running.endpoint("ci", &token)); // http://ci:<token>@127.0.0.1:<port>
//! let stats = running.shutdown(std::time::Duration::from_secs(5)).await;
//! println!("{stats:?}");
//! # Ok(())
//! # }
//! ```
//!
//! Runnable examples: `examples/standalone_proxy.rs` (the snippet above) and `examples/check_policy.rs` (the
//! two-stage [`decide`] without a socket, as `iterion netproxy check` uses it). The [`head`] module (the strict
//! HTTP/1.1 head parser) is public so it can be fuzzed (`fuzz/netproxy`).
//!
//! Not built in this version: TLS inspection and secret substitution (spec §14); requesting it with
//! [`ProxyConfigBuilder::tls_inspection`] fails with [`Error::TlsInspectionNotBuilt`].
#![deny(missing_docs)]

mod auth;
mod config;
mod decide;
mod error;
mod event;
mod forward;
pub mod head;
mod net;
mod response;
mod server;
mod tunnel;

#[cfg(test)]
mod tests;

pub use auth::{Credential, base64_encode, new_token};
pub use config::{Limits, Listen, ProxyConfig, ProxyConfigBuilder};
pub use decide::{DecideOptions, decide};
pub use error::{Error, Result};
pub use event::{DecisionEvent, DecisionId, EventCallback, ProxyEvent, Stats};
pub use iterion_netpolicy::{Decision, Policy, Target};
pub use net::{
    AsyncIo, BoxIo, Connector, DnsServerResolver, ResolveError, Resolver, SystemResolver, TcpConnector,
};
pub use response::{AUTH_REALM, CONNECT_ESTABLISHED};
pub use server::{Proxy, RunningProxy};
