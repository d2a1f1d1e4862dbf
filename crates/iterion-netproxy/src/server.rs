//! Listeners, accepting connections, the running proxy and shutdown (spec §12.3); each connection is served by
//! `crate::request`.

use crate::config::{Listen, ProxyConfig};
use crate::event::{Counters, Stats};
use crate::net::{AsyncIo, BoxIo};
use crate::request::serve_connection;
use crate::response::{ErrorContext, error_response};
use crate::secret::TrustBundle;
use crate::shared::Shared;
use crate::{Credential, Error, Result};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;
use tokio::time::Duration;
use tokio_util::task::TaskTracker;

/// The proxy: [`Proxy::start`] binds and serves.
#[derive(Debug, Clone, Copy)]
pub struct Proxy;

impl Proxy {
    /// Bind the configured listener and start serving; returns once listening.
    ///
    /// # Errors
    ///
    /// [`Error::Bind`] when the listener cannot be created.
    pub async fn start(config: ProxyConfig) -> Result<RunningProxy> {
        let listen = config.listen.clone();
        let bind_err = |source| Error::Bind {
            listen: listen.to_string(),
            source,
        };
        let (listener, bound) = match &config.listen {
            Listen::Tcp(addr) => {
                let l = bind_tcp(*addr).map_err(bind_err)?;
                let local = l.local_addr().map_err(bind_err)?;
                (Listener::Tcp(l), Listen::Tcp(local))
            }
            Listen::Unix(path) => {
                use std::os::unix::fs::{FileTypeExt, PermissionsExt};
                if let Ok(meta) = std::fs::symlink_metadata(path)
                    && meta.file_type().is_socket()
                {
                    std::fs::remove_file(path).map_err(bind_err)?;
                }
                let l = tokio::net::UnixListener::bind(path).map_err(bind_err)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(bind_err)?;
                (Listener::Unix(l, path.clone()), Listen::Unix(path.clone()))
            }
        };
        let own = match &bound {
            Listen::Tcp(a) => vec![*a],
            Listen::Unix(_) => Vec::new(),
        };
        let shared = Shared::new(config, own)?;
        let tracker = TaskTracker::new();
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), tracker.clone()));
        Ok(RunningProxy {
            shared,
            bound,
            tracker,
            accept: std::sync::Mutex::new(Some(accept)),
            stats: OnceCell::new(),
        })
    }
}

/// A TCP listener whose accepted sockets start with `TCP_NODELAY`: Linux copies the option from the listening
/// socket to every connection it accepts, which saves one `setsockopt` per connection.
fn bind_tcp(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // What `TcpListener::bind` does: a restarted proxy can take its port back while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Whether accepted sockets already carry the listener's `TCP_NODELAY` (see [`bind_tcp`]).
const NODELAY_INHERITED: bool = cfg!(target_os = "linux");

enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, std::path::PathBuf),
}

async fn accept_loop(listener: Listener, sh: Arc<Shared>, tracker: TaskTracker) {
    loop {
        let accepted: std::io::Result<BoxIo> = tokio::select! {
            () = sh.draining.cancelled() => break,
            r = async {
                match &listener {
                    Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
                        if !NODELAY_INHERITED {
                            let _ = s.set_nodelay(true);
                        }
                        Box::new(s) as BoxIo
                    }),
                    Listener::Unix(l, _) => l.accept().await.map(|(s, _)| Box::new(s) as BoxIo),
                }
            } => r,
        };
        match accepted {
            Ok(io) => spawn_connection(&sh, &tracker, io),
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                // Out of descriptors and similar: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    if let Listener::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
}

/// Serve one accepted connection in the background (connection limit applied).
pub(crate) fn spawn_connection<S: AsyncIo>(sh: &Arc<Shared>, tracker: &TaskTracker, mut io: S) {
    Counters::add(&sh.counters.connections, 1);
    match sh.connections.clone().try_acquire_owned() {
        Ok(permit) => {
            let sh = sh.clone();
            tracker.spawn(async move {
                serve_connection(sh, io).await;
                drop(permit);
            });
        }
        Err(_) => {
            tracker.spawn(async move {
                let _ = io
                    .write_all(&error_response(&Error::unavailable(), &ErrorContext::default()))
                    .await;
                let _ = io.shutdown().await;
            });
        }
    }
}

/// A running proxy; dropping it closes everything (`shutdown(0)` in the background).
#[derive(Debug)]
pub struct RunningProxy {
    shared: Arc<Shared>,
    bound: Listen,
    tracker: TaskTracker,
    accept: std::sync::Mutex<Option<JoinHandle<()>>>,
    stats: OnceCell<Stats>,
}

impl RunningProxy {
    /// The bound TCP address (`None` for a Unix socket).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.bound {
            Listen::Tcp(a) => Some(*a),
            Listen::Unix(_) => None,
        }
    }

    /// Where the proxy listens (with the actual port for `:0`).
    pub fn listening(&self) -> &Listen {
        &self.bound
    }

    /// The proxy URL for a credential: `http://<username>:<token>@<host>:<port>` (IPv6 bracketed, username
    /// percent-encoded). For a Unix socket the host is `localhost` without port: whatever relays a TCP port to the
    /// socket supplies the port.
    pub fn endpoint(&self, username: &str, token: &str) -> String {
        let user = crate::auth::percent_encode_userinfo(username);
        match &self.bound {
            Listen::Tcp(a) => format!("http://{user}:{token}@{a}"),
            Listen::Unix(_) => format!("http://{user}:{token}@localhost"),
        }
    }

    /// Register a credential while running.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the username or the token is already registered.
    pub fn add_credential(&self, credential: Credential) -> Result<()> {
        let name = credential.username.clone();
        let mut store = self.shared.creds.write().map_err(|_| Error::unavailable())?;
        if store.anonymous.is_some() {
            return Err(Error::Config {
                problems: vec!["authentication is disabled".into()],
            });
        }
        store.insert(credential).map_err(|c| Error::Config {
            problems: vec![match c {
                crate::auth::Conflict::Username => format!("duplicate username '{name}'"),
                crate::auth::Conflict::Token => {
                    format!("token of '{name}' is already used by another credential")
                }
            }],
        })
    }

    /// Remove a credential; `true` when it existed. Later requests with it get 407, and tunnels opened with it
    /// are closed (`TunnelClosed` with reason `revoked`); a plain request already being forwarded completes.
    pub fn remove_credential(&self, username: &str) -> bool {
        self.shared
            .creds
            .write()
            .map(|mut s| s.remove(username))
            .unwrap_or(false)
    }

    /// Whether any credential is registered (always `true` with authentication disabled).
    pub fn has_credentials(&self) -> bool {
        self.shared
            .creds
            .read()
            .map(|s| s.anonymous.is_some() || !s.is_empty())
            .unwrap_or(false)
    }

    /// Whether TLS inspection is active (at least one secret binding; a CA exists). Always `false` without the
    /// `tls-inspection` feature.
    pub fn tls_inspection_active(&self) -> bool {
        #[cfg(feature = "tls-inspection")]
        return self.shared.tls.is_some();
        #[cfg(not(feature = "tls-inspection"))]
        false
    }

    /// The trust files of the inspection CA (`ca.pem` and `ca-bundle.pem` contents); `None` when inspection is
    /// not active. Write them with [`TrustBundle::write_to`].
    pub fn trust_bundle(&self) -> Option<TrustBundle> {
        #[cfg(feature = "tls-inspection")]
        return self.shared.tls.as_ref().map(|i| i.trust_bundle());
        #[cfg(not(feature = "tls-inspection"))]
        None
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Stop accepting, let in-flight work finish within `grace`, then close every remaining tunnel and
    /// connection (both sides), deliver the events already queued (waiting one second at most for the consumer),
    /// and return the final counters. Idempotent: a second call waits for the first and
    /// returns the same `Stats`.
    pub async fn shutdown(&self, grace: Duration) -> Stats {
        self.stats
            .get_or_init(|| async {
                self.shared.draining.cancel();
                let accept = self.accept.lock().ok().and_then(|mut a| a.take());
                if let Some(accept) = accept {
                    let _ = accept.await;
                }
                self.tracker.close();
                if tokio::time::timeout(grace, self.tracker.wait()).await.is_err() {
                    self.shared.hard.cancel();
                    self.tracker.wait().await;
                }
                self.shared.hard.cancel();
                self.shared.pool.clear();
                // Deliver what was already queued (a blocked consumer delays shutdown by one second at most).
                self.shared.events.drain(Duration::from_secs(1)).await;
                self.shared.counters.snapshot()
            })
            .await
            .clone()
    }

    /// Serve one already-accepted stream (for embedders that accept connections themselves, and for tests).
    pub fn serve_stream<S: AsyncIo>(&self, io: S) {
        spawn_connection(&self.shared, &self.tracker, io);
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        self.shared.draining.cancel();
        self.shared.hard.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_start_with_nodelay_on_both_families() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = bind_tcp(addr.parse().expect("addr")) else {
                // No IPv6 loopback in this environment.
                assert!(addr.starts_with('['), "binding {addr} failed");
                continue;
            };
            let local = l.local_addr().expect("local addr");
            let (c, a) = tokio::join!(tokio::net::TcpStream::connect(local), l.accept());
            let (_c, (s, _)) = (c.expect("connect"), a.expect("accept"));
            // What the accept loop relies on when it skips its own setsockopt.
            assert_eq!(s.nodelay().ok(), Some(true), "{addr}");
        }
    }
}
