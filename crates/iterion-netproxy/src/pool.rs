//! Idle upstream connections of plain forwarding, reused per pinned address and host (spec §8.5).

use crate::net::BoxIo;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use tokio::time::{Duration, Instant};

/// Idle upstream connections kept per key.
const POOL_PER_KEY: usize = 8;
/// Idle upstream connections kept in total.
const POOL_TOTAL: usize = 100;
/// How long an idle upstream connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// Pinned address and port, and the host the connection was opened for.
pub(crate) type PoolKey = (SocketAddr, String);

/// Idle upstream connections, keyed by pinned address, port and host, so a pooled connection is never reused
/// for another decision outcome (spec §8.5).
#[derive(Default)]
pub(crate) struct Pool {
    idle: Mutex<HashMap<PoolKey, Vec<(BoxIo, Instant)>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .idle
            .lock()
            .map(|m| m.values().map(Vec::len).sum::<usize>())
            .unwrap_or(0);
        f.debug_struct("Pool").field("idle", &n).finish()
    }
}

impl Pool {
    pub(crate) fn take(&self, key: &PoolKey) -> Option<BoxIo> {
        let mut idle = self.idle.lock().ok()?;
        let list = idle.get_mut(key)?;
        let now = Instant::now();
        while let Some((io, since)) = list.pop() {
            if now.duration_since(since) < POOL_IDLE {
                return Some(io);
            }
        }
        None
    }

    pub(crate) fn put(&self, key: PoolKey, io: BoxIo) {
        let Ok(mut idle) = self.idle.lock() else { return };
        let now = Instant::now();
        let mut total = 0;
        idle.retain(|_, list| {
            list.retain(|(_, since)| now.duration_since(*since) < POOL_IDLE);
            total += list.len();
            !list.is_empty()
        });
        let list = idle.entry(key).or_default();
        if list.len() < POOL_PER_KEY && total < POOL_TOTAL {
            list.push((io, now));
        }
    }

    pub(crate) fn clear(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.clear();
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.idle
            .lock()
            .map(|m| m.values().map(Vec::len).sum())
            .unwrap_or(0)
    }
}
