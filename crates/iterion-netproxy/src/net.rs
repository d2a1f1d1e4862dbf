//! The injectable edges: name resolution ([`Resolver`]) and upstream dialing ([`Connector`]).

use async_trait::async_trait;
use std::any::Any;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream the proxy can relay: a TCP stream, a Unix stream, or an in-memory pipe in tests.
///
/// `Any` lets the relay recognise a kernel socket behind a type-erased stream (see `socket_of`) without a
/// method every implementor would have to write.
pub trait AsyncIo: AsyncRead + AsyncWrite + Send + Unpin + Any {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> AsyncIo for T {}

/// A boxed [`AsyncIo`].
pub type BoxIo = Box<dyn AsyncIo>;

/// The kernel socket behind a relayed stream, for the splice path of the relay.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub(crate) enum Socket<'a> {
    Tcp(&'a mut tokio::net::TcpStream),
    Unix(&'a mut tokio::net::UnixStream),
}

/// The TCP or Unix socket `io` is, looking through any number of [`BoxIo`] layers; `None` for anything else
/// (in-memory streams, TLS sessions, wrappers).
#[cfg(target_os = "linux")]
pub(crate) fn socket_of(io: &mut dyn AsyncIo) -> Option<Socket<'_>> {
    let any: &mut dyn Any = io;
    if any.is::<tokio::net::TcpStream>() {
        return any.downcast_mut().map(Socket::Tcp);
    }
    if any.is::<tokio::net::UnixStream>() {
        return any.downcast_mut().map(Socket::Unix);
    }
    // Call through the vtable of the inner stream, not the blanket impl of the box itself.
    any.downcast_mut::<BoxIo>()
        .and_then(|inner| socket_of(&mut **inner))
}

/// Why a name did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The name does not exist or has no A/AAAA record.
    #[error("no address for '{host}'")]
    NoAddress {
        /// The name looked up.
        host: String,
    },
    /// The resolver failed (server unreachable, malformed answer, …).
    #[error("resolver failed for '{host}': {message}")]
    Failed {
        /// The name looked up.
        host: String,
        /// What the resolver said.
        message: String,
    },
}

/// Resolves a host name to its addresses (A and AAAA), in the resolver's order.
#[async_trait]
pub trait Resolver: Send + Sync + fmt::Debug {
    /// Look up `host` (a canonical DNS name, never an IP literal).
    async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError>;
}

/// The system resolver (`/etc/resolv.conf`, hosts file) through `getaddrinfo`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        match tokio::net::lookup_host((host, 0)).await {
            Ok(addrs) => {
                let mut out: Vec<IpAddr> = Vec::new();
                for a in addrs {
                    if !out.contains(&a.ip()) {
                        out.push(a.ip());
                    }
                }
                if out.is_empty() {
                    Err(ResolveError::NoAddress {
                        host: host.to_owned(),
                    })
                } else {
                    Ok(out)
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error().is_none() => {
                Err(ResolveError::NoAddress {
                    host: host.to_owned(),
                })
            }
            Err(e) => Err(ResolveError::Failed {
                host: host.to_owned(),
                message: e.to_string(),
            }),
        }
    }
}

/// A resolver that asks one DNS server only (`--dns-server`), through hickory-resolver.
pub struct DnsServerResolver {
    inner: hickory_resolver::TokioResolver,
    server: SocketAddr,
}

impl fmt::Debug for DnsServerResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DnsServerResolver")
            .field("server", &self.server)
            .finish()
    }
}

impl DnsServerResolver {
    /// A resolver sending UDP and TCP queries to `server` only.
    pub fn new(server: SocketAddr) -> Result<Self, ResolveError> {
        use hickory_resolver::config::{NameServerConfig, ResolverConfig};
        use hickory_resolver::net::runtime::TokioRuntimeProvider;
        let mut ns = NameServerConfig::udp_and_tcp(server.ip());
        for c in &mut ns.connections {
            c.port = server.port();
        }
        let config = ResolverConfig::from_name_servers(vec![ns]);
        let inner = hickory_resolver::Resolver::builder_with_config(config, TokioRuntimeProvider::default())
            .build()
            .map_err(|e| ResolveError::Failed {
                host: server.to_string(),
                message: e.to_string(),
            })?;
        Ok(Self { inner, server })
    }
}

#[async_trait]
impl Resolver for DnsServerResolver {
    async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        // A trailing dot makes the name fully qualified: no search-domain expansion.
        match self.inner.lookup_ip(format!("{host}.")).await {
            Ok(answer) => {
                let out: Vec<IpAddr> = answer.iter().collect();
                if out.is_empty() {
                    Err(ResolveError::NoAddress {
                        host: host.to_owned(),
                    })
                } else {
                    Ok(out)
                }
            }
            Err(e) if e.is_no_records_found() => Err(ResolveError::NoAddress {
                host: host.to_owned(),
            }),
            Err(e) => Err(ResolveError::Failed {
                host: host.to_owned(),
                message: e.to_string(),
            }),
        }
    }
}

/// Opens the upstream connection to a pinned address.
#[async_trait]
pub trait Connector: Send + Sync + fmt::Debug {
    /// Connect to exactly `addr` (never resolve).
    async fn connect(&self, addr: SocketAddr) -> io::Result<BoxIo>;
}

/// Plain TCP with `TCP_NODELAY`; no source address is set.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpConnector;

#[async_trait]
impl Connector for TcpConnector {
    async fn connect(&self, addr: SocketAddr) -> io::Result<BoxIo> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Box::new(s))
    }
}
