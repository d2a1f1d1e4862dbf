//! The state every connection shares ([`Shared`]), what a handled request leads to ([`Next`]), and the pinned
//! dial (spec §8.5): below the request handlers (`server`, `forward`, the TLS relays) that all use them.

use crate::auth::CredentialStore;
use crate::config::{Limits, ProxyConfig};
use crate::event::{Counters, DecisionId, EventSink};
use crate::head::HeadLimits;
use crate::net::{BoxIo, Connector, Resolver};
use crate::pool::Pool;
#[cfg(feature = "tls-inspection")]
use crate::tls::{Inspector, context::TunnelCtx};
use crate::{Credential, Error, Result};
use iterion_netpolicy::SilentDeny;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// State shared by the accept loop and every connection.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) limits: Limits,
    pub(crate) creds: RwLock<CredentialStore>,
    pub(crate) resolver: Arc<dyn Resolver>,
    pub(crate) connector: Arc<dyn Connector>,
    pub(crate) events: EventSink,
    pub(crate) counters: Arc<Counters>,
    pub(crate) silent: SilentDeny,
    /// Where a refused client is told to add a rule.
    pub(crate) rules_hint: String,
    pub(crate) report_allowed: bool,
    pub(crate) own_listen: Vec<SocketAddr>,
    /// Stop accepting; head readers answer 503.
    pub(crate) draining: CancellationToken,
    /// Close everything now.
    pub(crate) hard: CancellationToken,
    pub(crate) tunnels: Arc<Semaphore>,
    pub(crate) connections: Arc<Semaphore>,
    pub(crate) pool: Pool,
    pub(crate) last_auth_log: AtomicU64,
    /// TLS inspection, when at least one secret binding is configured.
    #[cfg(feature = "tls-inspection")]
    pub(crate) tls: Option<Arc<Inspector>>,
}

impl Shared {
    pub(crate) fn new(config: ProxyConfig, own_listen: Vec<SocketAddr>) -> Result<Arc<Self>> {
        let counters = Arc::new(Counters::default());
        let mut creds = CredentialStore::default();
        if let Some(policy) = config.anonymous {
            creds.anonymous = Some(Arc::new(Credential::new(
                "anonymous",
                String::new(),
                None,
                policy,
            )));
        }
        for c in config.credentials {
            let name = c.username.clone();
            creds.insert(c).map_err(|_| Error::Config {
                problems: vec![format!("duplicate credential '{name}'")],
            })?;
        }
        Ok(Arc::new(Self {
            limits: config.limits,
            creds: RwLock::new(creds),
            resolver: config.resolver,
            connector: config.connector,
            events: EventSink::new(config.on_event, config.limits.event_queue, counters.clone()),
            counters,
            silent: config.silent_deny,
            rules_hint: config.rules_hint,
            report_allowed: config.report_allowed,
            own_listen,
            draining: CancellationToken::new(),
            hard: CancellationToken::new(),
            tunnels: Arc::new(Semaphore::new(config.limits.max_tunnels)),
            connections: Arc::new(Semaphore::new(config.limits.max_connections)),
            pool: Pool::default(),
            last_auth_log: AtomicU64::new(0),
            #[cfg(feature = "tls-inspection")]
            tls: config.tls,
        }))
    }

    pub(crate) fn head_limits(&self) -> HeadLimits {
        HeadLimits {
            max_head_bytes: self.limits.max_head_bytes,
            max_headers: self.limits.max_headers,
        }
    }
}

/// What to do after one request.
pub(crate) enum Next {
    KeepAlive,
    Close,
    /// `200 Connection Established` was sent: relay the tunnel, then close.
    Tunnel(Tunnel),
}

/// An established CONNECT tunnel, before its relay.
pub(crate) struct Tunnel {
    pub(crate) upstream: BoxIo,
    pub(crate) decision_id: DecisionId,
    pub(crate) permit: tokio::sync::OwnedSemaphorePermit,
    /// Set only when TLS inspection applies to this tunnel.
    #[cfg(feature = "tls-inspection")]
    pub(crate) inspect: Option<Box<TunnelCtx>>,
    /// Cancelled when the tunnel's credential is removed: the tunnel closes.
    pub(crate) revoked: CancellationToken,
}

/// Dial the pinned addresses in order within the connect budget; the first success wins (spec §8.5).
pub(crate) async fn dial(sh: &Shared, addresses: &[IpAddr], port: u16) -> Result<(BoxIo, SocketAddr)> {
    let deadline = Instant::now() + sh.limits.connect_timeout;
    let mut last = None;
    for ip in addresses {
        let addr = SocketAddr::new(*ip, port);
        match tokio::time::timeout_at(deadline, sh.connector.connect(addr)).await {
            Ok(Ok(io)) => return Ok((io, addr)),
            Ok(Err(e)) => last = Some(e),
            Err(_) => {
                return Err(Error::upstream(
                    504,
                    "upstream_connect_timeout",
                    "upstream connect timeout",
                ));
            }
        }
    }
    let detail = last.map(|e| format!(": {e}")).unwrap_or_default();
    Err(Error::upstream(
        502,
        "upstream_connect_failed",
        format!("upstream connect failed{detail}"),
    ))
}
