//! Events, decision ids and statistics (spec §13.3, §12.3).

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};

/// A decision id: a UUIDv7 string, unique per decision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct DecisionId(String);

impl DecisionId {
    /// A new UUIDv7 (48-bit Unix milliseconds, version 7, variant 10, 74 random bits).
    pub fn new() -> Self {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut b: [u8; 16] = rand::random();
        b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
        b[6] = 0x70 | (b[6] & 0x0f);
        b[8] = 0x80 | (b[8] & 0x3f);
        let h = crate::auth::hex(&b);
        Self(format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        ))
    }

    #[cfg(test)]
    pub(crate) fn fixed(s: &str) -> Self {
        Self(s.to_owned())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for DecisionId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for DecisionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A decision reported in [`ProxyEvent::Denied`] or [`ProxyEvent::Allowed`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DecisionEvent {
    /// The decision id (the same value as the response's `X-Iterion-Decision-Id`).
    pub decision_id: DecisionId,
    /// Canonical target host.
    pub host: String,
    /// Target port.
    pub port: u16,
    /// `policy denial`, `non-global address`, `secret leak`; `None` for allowed requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The deciding rule's original text, `no rule matched`, `non-global address`; `None` for a mode fallback.
    pub rule: Option<String>,
    /// The refused address (only for `non-global address`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The node the credential is attributed to.
    pub node_id: Option<String>,
    /// The authenticated username.
    pub username: String,
    /// `CONNECT` or the forwarded method.
    pub method: String,
    /// The policy mode (`allowlist`, `denylist`, `open`).
    pub mode: String,
    /// For a `secret leak`: the secret's name (never its value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// Something the proxy reports; delivered through the configured callback, never blocking traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProxyEvent {
    /// A request was refused with 403 (not silent).
    Denied(DecisionEvent),
    /// A denial suppressed by the silent-deny list.
    SilentDenied {
        /// Canonical target host.
        host: String,
        /// Target port.
        port: u16,
        /// The node the credential is attributed to.
        node_id: Option<String>,
    },
    /// A request was allowed (only with `report_allowed`).
    Allowed(DecisionEvent),
    /// A name the policy allows did not resolve (502) or its resolver did not answer in time (504): not a
    /// policy decision, but the request was not served.
    DnsFailed {
        /// Canonical target host.
        host: String,
        /// Target port.
        port: u16,
        /// `dns_failed` or `dns_timeout`.
        code: String,
        /// The node the credential is attributed to.
        node_id: Option<String>,
    },
    /// A CONNECT tunnel ended.
    TunnelClosed {
        /// The decision that opened the tunnel.
        decision_id: DecisionId,
        /// Bytes from client to upstream.
        bytes_up: u64,
        /// Bytes from upstream to client.
        bytes_down: u64,
        /// How long the tunnel was open.
        duration_ms: u64,
        /// `eof`, `idle`, `lifetime`, `shutdown` or `error`; under TLS inspection also `sni mismatch` and
        /// `secret leak`.
        close_reason: String,
    },
    /// A placeholder was replaced by a secret's value in a request to a bound host.
    SecretSubstituted {
        /// The secret's name (never its value).
        secret: String,
        /// Canonical target host.
        host: String,
        /// Target port.
        port: u16,
        /// The request method.
        method: String,
        /// The request path without the query.
        path: String,
        /// The node the credential is attributed to.
        node_id: Option<String>,
        /// The decision that opened the tunnel.
        decision_id: DecisionId,
        /// Placeholders replaced in this request.
        count: u64,
    },
    /// A request failed authentication (407).
    AuthFailed {
        /// The scheme presented (lower case; empty when there was no single header).
        scheme: String,
        /// The Basic username presented, if any (never the token).
        username: Option<String>,
    },
}

/// Counters returned by `stats()` and `shutdown()`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Stats {
    /// Client connections accepted.
    pub connections: u64,
    /// Tunnels opened.
    pub tunnels: u64,
    /// Allowed decisions.
    pub allowed: u64,
    /// Denied decisions per reason.
    pub denied: BTreeMap<String, u64>,
    /// Silent denials per host.
    pub silent_denied: BTreeMap<String, u64>,
    /// Authentication failures.
    pub auth_failures: u64,
    /// Events dropped because the consumer was not keeping up.
    pub events_dropped: u64,
    /// Allowed names that did not resolve, or whose resolver timed out.
    pub dns_failures: u64,
    /// Bytes relayed from clients to upstreams.
    pub bytes_up: u64,
    /// Bytes relayed from upstreams to clients.
    pub bytes_down: u64,
}

/// Live counters shared by all connections.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) connections: AtomicU64,
    pub(crate) tunnels: AtomicU64,
    pub(crate) allowed: AtomicU64,
    pub(crate) auth_failures: AtomicU64,
    pub(crate) events_dropped: AtomicU64,
    pub(crate) dns_failures: AtomicU64,
    pub(crate) bytes_up: AtomicU64,
    pub(crate) bytes_down: AtomicU64,
    pub(crate) denied: Mutex<BTreeMap<String, u64>>,
    pub(crate) silent_denied: Mutex<BTreeMap<String, u64>>,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn bump(map: &Mutex<BTreeMap<String, u64>>, key: &str) {
        if let Ok(mut m) = map.lock() {
            *m.entry(key.to_owned()).or_default() += 1;
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            connections: get(&self.connections),
            tunnels: get(&self.tunnels),
            allowed: get(&self.allowed),
            denied: self.denied.lock().map(|m| m.clone()).unwrap_or_default(),
            silent_denied: self.silent_denied.lock().map(|m| m.clone()).unwrap_or_default(),
            auth_failures: get(&self.auth_failures),
            events_dropped: get(&self.events_dropped),
            dns_failures: get(&self.dns_failures),
            bytes_up: get(&self.bytes_up),
            bytes_down: get(&self.bytes_down),
        }
    }
}

/// The consumer callback type.
pub type EventCallback = Arc<dyn Fn(ProxyEvent) + Send + Sync + 'static>;

/// A bounded queue drained by a dedicated thread that calls the callback: a slow or blocked consumer makes the
/// proxy drop (and count) events, never wait.
#[derive(Clone)]
pub(crate) struct EventSink {
    tx: Option<mpsc::SyncSender<ProxyEvent>>,
    counters: Arc<Counters>,
    /// Events accepted into the queue, and events the consumer has returned from.
    queued: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
}

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSink")
            .field("enabled", &self.tx.is_some())
            .finish()
    }
}

impl EventSink {
    pub(crate) fn new(callback: Option<EventCallback>, capacity: usize, counters: Arc<Counters>) -> Self {
        let delivered = Arc::new(AtomicU64::new(0));
        let done = delivered.clone();
        let tx = callback.and_then(|cb| {
            let (tx, rx) = mpsc::sync_channel::<ProxyEvent>(capacity.max(1));
            std::thread::Builder::new()
                .name("netproxy-events".into())
                .spawn(move || {
                    while let Ok(ev) = rx.recv() {
                        cb(ev);
                        done.fetch_add(1, Ordering::Release);
                    }
                })
                .ok()
                .map(|_| tx)
        });
        Self {
            tx,
            counters,
            queued: Arc::new(AtomicU64::new(0)),
            delivered,
        }
    }

    pub(crate) fn emit(&self, ev: ProxyEvent) {
        if let Some(tx) = &self.tx {
            if tx.try_send(ev).is_ok() {
                self.queued.fetch_add(1, Ordering::Release);
            } else {
                Counters::add(&self.counters.events_dropped, 1);
            }
        }
    }

    /// Wait (at most `limit`) until the consumer has returned from every queued event.
    pub(crate) async fn drain(&self, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.delivered.load(Ordering::Acquire) < self.queued.load(Ordering::Acquire)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_ids_are_uuid_v7() {
        let a = DecisionId::new();
        let s = a.as_str();
        assert_eq!(s.len(), 36);
        assert_eq!(&s[14..15], "7");
        assert!(matches!(&s[19..20], "8" | "9" | "a" | "b"), "{s}");
        assert_ne!(a, DecisionId::new());
    }

    #[test]
    fn secret_events_serialise_with_their_type_and_never_a_value() {
        let ev = ProxyEvent::SecretSubstituted {
            secret: "GH_TOKEN".into(),
            host: "api.github.com".into(),
            port: 443,
            method: "GET".into(),
            path: "/user".into(),
            node_id: Some("fetch".into()),
            decision_id: DecisionId::fixed("0194f7e2-9a3b-7c41-8d20-5e6f7a8b9c0d"),
            count: 2,
        };
        assert_eq!(
            serde_json::to_string(&ev).unwrap_or_default(),
            r#"{"type":"secret_substituted","secret":"GH_TOKEN","host":"api.github.com","port":443,"method":"GET","path":"/user","node_id":"fetch","decision_id":"0194f7e2-9a3b-7c41-8d20-5e6f7a8b9c0d","count":2}"#
        );
    }

    #[test]
    fn blocked_consumer_drops_and_counts() {
        let counters = Arc::new(Counters::default());
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let gate = Mutex::new(gate_rx);
        let sink = EventSink::new(
            Some(Arc::new(move |_ev| {
                let _ = gate.lock().map(|g| g.recv());
            })),
            4,
            counters.clone(),
        );
        for _ in 0..100 {
            sink.emit(ProxyEvent::AuthFailed {
                scheme: "basic".into(),
                username: None,
            });
        }
        assert!(counters.events_dropped.load(Ordering::Relaxed) > 0);
        drop(gate_tx);
    }
}
