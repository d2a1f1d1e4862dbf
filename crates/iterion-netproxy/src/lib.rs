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
//! # TLS inspection and secret substitution
//!
//! Opt-in with [`ProxyConfigBuilder::tls_inspection`] and at least one [`SecretBinding`]; without a binding no CA
//! exists and every tunnel stays opaque. With one:
//!
//! - a per-run CA is minted at [`ProxyConfigBuilder::build`] (ECDSA P-256, path length 0, valid from now − 1 h
//!   to now + 30 days; the key only in memory, zeroised on drop) or loaded with [`TlsInspection::operator_ca`];
//!   [`RunningProxy::trust_bundle`] returns `ca.pem` and `ca-bundle.pem` ([`TrustBundle::write_to`]);
//! - a CONNECT whose first bytes are a TLS ClientHello is intercepted unless its host matches a
//!   [`TlsInspection::bypass`] pattern: the SNI must equal the CONNECT host (else the tunnel is closed with a
//!   `Denied` event, rule `sni mismatch`), the client gets a leaf minted for that host (ALPN `http/1.1` only),
//!   and the upstream is verified for that host against the Mozilla roots, the host's native roots and
//!   [`TlsInspection::upstream_root_pem`] (an invalid certificate answers `502 upstream certificate invalid`);
//! - HTTP/1.1 requests are relayed one by one: a binding's placeholder ([`SecretBinding::placeholder`],
//!   `iterion-ph-` + 32 hex) is replaced by the value in the target, header values and bodies of at most 1 MiB
//!   (identity encoding; JSON, form or text), only towards the binding's hosts, with a matching `Host` header;
//!   each substitution is reported as [`ProxyEvent::SecretSubstituted`]. A placeholder anywhere else is
//!   refused with `403 secret leak` (`secret <NAME> is not bound to <host>`, `… requires TLS` for plain
//!   HTTP, `… could not be substituted safely` for bodies it cannot rewrite); tunnels that are not TLS are
//!   scanned client-to-upstream and closed on a placeholder. Responses from bound hosts have the value
//!   replaced by the placeholder (requests to them carry `Accept-Encoding: identity`);
//! - the **real value** is guarded like its placeholder: a request carrying it (the sandbox may have come by it,
//!   e.g. through a file or a response that was not scrubbed) towards a host the secret is not bound to is
//!   refused the same way, in intercepted requests, plain forwards and raw tunnels (streaming, across reads),
//!   and so is the value in clear text to its own host unless the binding allows plain HTTP. Values shorter
//!   than 8 bytes are not looked for (they would match ordinary traffic). No error, event or log carries a
//!   value: `Denied` events name the secret ([`DecisionEvent::secret`]);
//! - binding hosts are host-name patterns as in network rules or single IP addresses with an optional port
//!   (`127.0.0.1:8080`, `[::1]:8080`); CIDR ranges and negations are refused. An IP target is intercepted
//!   with a leaf for the address (an IP SAN) and the upstream certificate is verified for it;
//! - [`SecretBinding::plain_http`] (off by default) also substitutes in plain-HTTP **forward** requests
//!   (absolute-form `http://…` through the proxy) to the bound hosts, for providers reached over plain HTTP
//!   such as a local model server: the same rules as inside TLS (the `Host` header, when present, must name
//!   the request's authority; bodies of at most 1 MiB with identity encoding and a JSON, form or text type are
//!   rewritten and their length recomputed, anything else with a placeholder is refused), the response is
//!   scrubbed, and the upstream connection is not pooled. The value then crosses the network in clear text. A
//!   raw (non-TLS) CONNECT tunnel to such a host gets no substitution: it is scanned and closed on a
//!   placeholder, as for any host.
//!
//! ```no_run
//! use iterion_netproxy::{SecretBinding, TlsInspection};
//! let github = SecretBinding::new("GH_TOKEN", "ghp_…", &["api.github.com"]);
//! println!("GH_TOKEN={}", github.placeholder()); // what the sandbox sees
//! // A local model server reached over plain HTTP, bound to its exact address.
//! let local = SecretBinding::new("MODEL_KEY", "sk-…", &["127.0.0.1:8080"]).plain_http(true);
//! let tls = TlsInspection::new().binding(github).binding(local).bypass("**.pinned.example");
//! # let _ = tls;
//! ```
//!
//! Documented limits: WebSocket frames (after a `101`) are relayed without inspection; tunnels to bypassed
//! hosts are opaque and cannot be scanned; values used to sign requests (AWS secret keys, HMAC secrets) cannot
//! be substituted; request bodies above 1 MiB, chunked bodies above 1 MiB and compressed bodies are scanned
//! but never rewritten (a placeholder there is refused); in plain forward requests to hosts no
//! [`SecretBinding::plain_http`] binding is bound to, only bodies of at most 1 MiB with a `Content-Length` are
//! scanned; responses a bound host sends compressed despite
//! `Accept-Encoding: identity` are relayed unscrubbed. `ca-bundle.pem` is the Mozilla root set compiled in
//! (`webpki-root-certs`) followed by the run CA.
//!
//! # Features
//!
//! - `tls-inspection` (default): TLS inspection and secret substitution above, with their rustls, tokio-rustls,
//!   rcgen and webpki dependencies. Without it the settings types remain, but [`ProxyConfigBuilder::build`]
//!   refuses settings with a secret binding with [`Error::TlsInspectionUnavailable`] (settings without one change
//!   nothing, as with the feature), and [`RunningProxy::trust_bundle`] is always `None`.
//! - `cli`: the `cli` module (`serve` and `check`, with clap) and the `iterion-netproxy` binary, whose `main`
//!   reads the environment once and hands it down; `iterion netproxy` runs the same command line.
//!
//! # Modules
//!
//! Each module imports only those before it: `error`, [`head`], `net`, `auth`, `event`, `response` (the answers),
//! `decide`, `tunnel` (the opaque relay), `secret` (the inspection settings), `pool` (idle upstream connections),
//! `tls::{scan, ca, inspector, context}`, `config`, `shared` (what every connection shares, the pinned dial),
//! `forward`, `tls::{raw, http, intercept}`, `request` (one connection), `server` (listeners, [`RunningProxy`]),
//! `cli`.
#![deny(missing_docs)]

mod auth;
#[cfg(feature = "cli")]
pub mod cli;
mod config;
mod decide;
mod error;
mod event;
mod forward;
pub mod head;
mod net;
mod pool;
mod request;
mod response;
mod secret;
mod server;
mod shared;
#[cfg(feature = "tls-inspection")]
mod tls;

/// Whether this build can inspect TLS (the `tls-inspection` feature): without it a secret binding is refused.
pub const TLS_INSPECTION: bool = cfg!(feature = "tls-inspection");
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
pub use secret::{PLACEHOLDER_PREFIX, SecretBinding, TlsInspection, TrustBundle};
pub use server::{Proxy, RunningProxy};
