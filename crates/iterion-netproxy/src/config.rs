//! Proxy configuration and its builder (spec §12.2, §15).

use crate::event::{EventCallback, ProxyEvent};
use crate::net::{Connector, Resolver, SystemResolver, TcpConnector};
use crate::secret::TlsInspection;
#[cfg(feature = "tls-inspection")]
use crate::tls::{BuildError, Inspector};
use crate::{Credential, Error, Policy, Result};
use iterion_netpolicy::SilentDeny;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Where the proxy listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address (`127.0.0.1:0` picks a free port).
    Tcp(SocketAddr),
    /// A Unix domain socket path (created with mode 0666; a stale socket file is removed first).
    Unix(PathBuf),
}

impl Listen {
    /// Whether this address is only reachable from this host (loopback TCP or a Unix socket).
    pub fn is_local(&self) -> bool {
        match self {
            Listen::Tcp(a) => a.ip().is_loopback(),
            Listen::Unix(_) => true,
        }
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp(a) => write!(f, "{a}"),
            Listen::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl FromStr for Listen {
    type Err = Error;

    /// `IP:PORT`, `[IPv6]:PORT` or `unix:/path`.
    fn from_str(s: &str) -> Result<Self> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(Error::Config {
                    problems: vec!["unix socket path is empty".into()],
                });
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        s.parse::<SocketAddr>()
            .map(Listen::Tcp)
            .map_err(|_| Error::Config {
                problems: vec![format!(
                    "invalid listen address '{s}' (want IP:PORT, [IPv6]:PORT or unix:/path)"
                )],
            })
    }
}

/// Limits and timeouts (spec §12.2). `Limits::default()` gives the documented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Time allowed to receive a complete request head.
    pub head_timeout: Duration,
    /// Maximum request head size (request line and header fields).
    pub max_head_bytes: usize,
    /// Maximum number of header fields.
    pub max_headers: usize,
    /// Concurrent client connections.
    pub max_connections: usize,
    /// Concurrent CONNECT tunnels.
    pub max_tunnels: usize,
    /// DNS resolution timeout.
    pub dns_timeout: Duration,
    /// Upstream connect budget (all addresses together).
    pub connect_timeout: Duration,
    /// A tunnel with no byte in either direction for this long is closed.
    pub tunnel_idle_timeout: Duration,
    /// Maximum tunnel lifetime (`None`: unlimited).
    pub tunnel_max_lifetime: Option<Duration>,
    /// Forward mode: time allowed for the upstream response head.
    pub upstream_response_timeout: Duration,
    /// Forward mode: a kept-alive client connection idle for this long is closed.
    pub client_idle_timeout: Duration,
    /// Capacity of the event queue; events beyond it are dropped and counted.
    pub event_queue: usize,
    /// Default grace used when the handle is dropped is zero; this is the grace the CLI passes to shutdown.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            head_timeout: Duration::from_secs(10),
            max_head_bytes: 32 * 1024,
            max_headers: 100,
            max_connections: 4096,
            max_tunnels: 1024,
            dns_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            tunnel_idle_timeout: Duration::from_secs(600),
            tunnel_max_lifetime: None,
            upstream_response_timeout: Duration::from_secs(300),
            client_idle_timeout: Duration::from_secs(90),
            event_queue: 4096,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// A validated proxy configuration; build it with [`ProxyConfig::builder`].
#[non_exhaustive]
pub struct ProxyConfig {
    pub(crate) listen: Listen,
    pub(crate) credentials: Vec<Credential>,
    pub(crate) anonymous: Option<Arc<Policy>>,
    pub(crate) resolver: Arc<dyn Resolver>,
    pub(crate) connector: Arc<dyn Connector>,
    pub(crate) on_event: Option<EventCallback>,
    pub(crate) report_allowed: bool,
    pub(crate) silent_deny: SilentDeny,
    pub(crate) rules_hint: String,
    pub(crate) limits: Limits,
    #[cfg(feature = "tls-inspection")]
    pub(crate) tls: Option<Arc<Inspector>>,
}

impl fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("listen", &self.listen)
            .field(
                "credentials",
                &self.credentials.iter().map(|c| &c.username).collect::<Vec<_>>(),
            )
            .field("anonymous", &self.anonymous.is_some())
            .field("resolver", &self.resolver)
            .field("connector", &self.connector)
            .field("report_allowed", &self.report_allowed)
            .field("limits", &self.limits)
            .field("tls", &self.tls_debug())
            .finish_non_exhaustive()
    }
}

impl ProxyConfig {
    /// A builder with the defaults: listen `127.0.0.1:0`, system resolver, plain TCP, default limits and the
    /// default silent-deny list.
    pub fn builder() -> ProxyConfigBuilder {
        ProxyConfigBuilder::default()
    }

    /// The configured limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    #[cfg(feature = "tls-inspection")]
    fn tls_debug(&self) -> &dyn fmt::Debug {
        &self.tls
    }

    #[cfg(not(feature = "tls-inspection"))]
    fn tls_debug(&self) -> &dyn fmt::Debug {
        &None::<()>
    }
}

/// Builds a [`ProxyConfig`]; [`ProxyConfigBuilder::build`] validates everything and lists every problem.
#[must_use]
pub struct ProxyConfigBuilder {
    listen: Listen,
    credentials: Vec<Credential>,
    anonymous: Option<Arc<Policy>>,
    resolver: Arc<dyn Resolver>,
    connector: Arc<dyn Connector>,
    on_event: Option<EventCallback>,
    report_allowed: bool,
    silent_deny: Option<Vec<String>>,
    limits: Limits,
    tls_inspection: Option<TlsInspection>,
    rules_hint: Option<String>,
}

impl fmt::Debug for ProxyConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyConfigBuilder")
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

impl Default for ProxyConfigBuilder {
    fn default() -> Self {
        Self {
            listen: Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 0))),
            credentials: Vec::new(),
            anonymous: None,
            resolver: Arc::new(SystemResolver),
            connector: Arc::new(TcpConnector),
            on_event: None,
            report_allowed: false,
            silent_deny: None,
            rules_hint: None,
            limits: Limits::default(),
            tls_inspection: None,
        }
    }
}

impl ProxyConfigBuilder {
    /// Where to listen.
    pub fn listen(mut self, listen: Listen) -> Self {
        self.listen = listen;
        self
    }

    /// Register a credential (repeatable; usernames and tokens must be unique).
    pub fn credential(mut self, credential: Credential) -> Self {
        self.credentials.push(credential);
        self
    }

    /// Disable authentication: every request is decided with `policy` and attributed to user `anonymous`.
    pub fn no_auth(mut self, policy: Arc<Policy>) -> Self {
        self.anonymous = Some(policy);
        self
    }

    /// The resolver used for the address stage (default: the system resolver).
    pub fn resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// The connector used to dial pinned addresses (default: plain TCP).
    pub fn connector(mut self, connector: Arc<dyn Connector>) -> Self {
        self.connector = connector;
        self
    }

    /// The event consumer; it runs on its own thread and may block without slowing traffic.
    pub fn on_event(mut self, f: impl Fn(ProxyEvent) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(f));
        self
    }

    /// Also report allowed decisions (`ProxyEvent::Allowed`).
    pub fn report_allowed(mut self, on: bool) -> Self {
        self.report_allowed = on;
        self
    }

    /// Where a refused client is told to add a rule (`sandbox.network.rules` by default; the standalone proxy
    /// says `--rule`).
    pub fn rules_hint(mut self, where_: impl Into<String>) -> Self {
        self.rules_hint = Some(where_.into());
        self
    }

    /// Replace the silent-deny list with these patterns (empty: disabled).
    pub fn silent_deny<S: AsRef<str>>(mut self, patterns: &[S]) -> Self {
        self.silent_deny = Some(patterns.iter().map(|p| p.as_ref().to_owned()).collect());
        self
    }

    /// Replace all limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Change the limits in place.
    pub fn with_limits(mut self, f: impl FnOnce(&mut Limits)) -> Self {
        f(&mut self.limits);
        self
    }

    /// TLS inspection and secret substitution. Active only with at least one binding: then
    /// [`ProxyConfigBuilder::build`] mints the CA (or loads the operator's) and every CONNECT tunnel is
    /// inspected (unless bypassed); without a binding nothing changes and no CA exists.
    pub fn tls_inspection(mut self, inspection: TlsInspection) -> Self {
        self.tls_inspection = Some(inspection);
        self
    }

    /// Validate and build; every problem is reported at once ([`Error::Config`]). With TLS inspection active the
    /// CA is minted here; a failure to mint it or to configure TLS is [`Error::TlsSetup`].
    pub fn build(self) -> Result<ProxyConfig> {
        let mut problems = Vec::new();
        if self.credentials.is_empty() && self.anonymous.is_none() {
            problems.push("no credential registered and authentication not disabled".to_owned());
        }
        if !self.credentials.is_empty() && self.anonymous.is_some() {
            problems.push("credentials are registered but authentication is disabled".to_owned());
        }
        let mut store = crate::auth::CredentialStore::default();
        for c in &self.credentials {
            if c.username.is_empty() || c.username.contains(':') {
                problems.push(format!(
                    "invalid username '{}' (empty or containing ':')",
                    c.username
                ));
            }
            if c.token().len() < 16 {
                problems.push(format!(
                    "token of '{}' is too short (want at least 16 characters)",
                    c.username
                ));
            }
            match store.insert(c.clone()) {
                Err(crate::auth::Conflict::Username) => {
                    problems.push(format!("duplicate username '{}'", c.username))
                }
                Err(crate::auth::Conflict::Token) => problems.push(format!(
                    "token of '{}' is already used by another credential",
                    c.username
                )),
                Ok(()) => {}
            }
        }
        let l = &self.limits;
        for (name, zero) in [
            ("max_head_bytes", l.max_head_bytes == 0),
            ("max_headers", l.max_headers == 0),
            ("max_connections", l.max_connections == 0),
            ("max_tunnels", l.max_tunnels == 0),
            ("event_queue", l.event_queue == 0),
            ("head_timeout", l.head_timeout.is_zero()),
            ("dns_timeout", l.dns_timeout.is_zero()),
            ("connect_timeout", l.connect_timeout.is_zero()),
            ("tunnel_idle_timeout", l.tunnel_idle_timeout.is_zero()),
            ("upstream_response_timeout", l.upstream_response_timeout.is_zero()),
            ("client_idle_timeout", l.client_idle_timeout.is_zero()),
        ] {
            if zero {
                problems.push(format!("{name} must be greater than zero"));
            }
        }
        let silent_deny = match &self.silent_deny {
            None => SilentDeny::default(),
            Some(p) if p.is_empty() => SilentDeny::disabled(),
            Some(p) => match SilentDeny::new(p) {
                Ok(s) => s,
                Err(errors) => {
                    problems.extend(errors.iter().map(|e| format!("silent-deny: {e}")));
                    SilentDeny::disabled()
                }
            },
        };
        // Validated last so a configuration with other problems never mints a CA.
        #[cfg_attr(not(feature = "tls-inspection"), allow(unused_variables))]
        let tls = match self.tls_inspection {
            Some(t) if problems.is_empty() => inspector(t, &mut problems)?,
            _ => None,
        };
        if !problems.is_empty() {
            return Err(Error::Config { problems });
        }
        Ok(ProxyConfig {
            listen: self.listen,
            credentials: self.credentials,
            anonymous: self.anonymous,
            resolver: self.resolver,
            connector: self.connector,
            on_event: self.on_event,
            report_allowed: self.report_allowed,
            silent_deny,
            rules_hint: self
                .rules_hint
                .unwrap_or_else(|| "sandbox.network.rules".to_owned()),
            limits: self.limits,
            #[cfg(feature = "tls-inspection")]
            tls,
        })
    }
}

/// The running inspector of the settings (`None`: no binding, inspection inactive); invalid settings add their
/// problems, a failure to mint the CA or to configure TLS is [`Error::TlsSetup`].
#[cfg(feature = "tls-inspection")]
fn inspector(t: TlsInspection, problems: &mut Vec<String>) -> Result<Option<Arc<Inspector>>> {
    match Inspector::build(t) {
        Ok(i) => Ok(i.map(Arc::new)),
        Err(BuildError::Config(p)) => {
            problems.extend(p);
            Ok(None)
        }
        Err(BuildError::Setup(e)) => Err(e.into()),
    }
}

/// Built without the `tls-inspection` feature: settings without a binding change nothing (as with the feature),
/// settings with one are refused with [`Error::TlsInspectionUnavailable`] rather than ignored.
#[cfg(not(feature = "tls-inspection"))]
fn inspector(t: TlsInspection, _problems: &mut Vec<String>) -> Result<Option<()>> {
    match t.bindings.first() {
        None => Ok(None),
        Some(b) => Err(Error::TlsInspectionUnavailable {
            secret: b.name.clone(),
        }),
    }
}
