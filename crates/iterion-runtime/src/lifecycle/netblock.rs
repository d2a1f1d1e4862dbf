//! De-duplication of `network_blocked` events (05 §4.7 item 4): identical `(host, port, node_id, reason)`
//! denials within 60 s produce one event; the next event for that key carries `suppressed: <count>`.
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The de-duplication window.
pub const WINDOW: Duration = Duration::from_secs(60);

type Key = (String, u16, Option<String>, String);

#[derive(Debug)]
struct Entry {
    last_emitted: Instant,
    suppressed: u64,
}

/// Decides which denials become events.
#[derive(Debug, Default)]
pub struct Dedup {
    seen: HashMap<Key, Entry>,
}

impl Dedup {
    /// A new, empty de-duplicator.
    pub fn new() -> Self {
        Self::default()
    }

    /// `None` when the denial is suppressed; `Some(suppressed)` when an event is due, with the number of
    /// identical denials suppressed since the previous event (`None` inside when there were none).
    pub fn admit(
        &mut self,
        host: &str,
        port: u16,
        node_id: Option<&str>,
        reason: &str,
        now: Instant,
    ) -> Option<Option<u64>> {
        let key = (
            host.to_owned(),
            port,
            node_id.map(str::to_owned),
            reason.to_owned(),
        );
        match self.seen.get_mut(&key) {
            Some(e) if now.duration_since(e.last_emitted) < WINDOW => {
                e.suppressed += 1;
                None
            }
            Some(e) => {
                let n = std::mem::take(&mut e.suppressed);
                e.last_emitted = now;
                Some((n > 0).then_some(n))
            }
            None => {
                self.seen.insert(
                    key,
                    Entry {
                        last_emitted: now,
                        suppressed: 0,
                    },
                );
                Some(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nw5_five_within_the_window_then_one_after() {
        let mut d = Dedup::new();
        let t0 = Instant::now();
        let mut events = Vec::new();
        for i in 0..5u64 {
            if let Some(s) = d.admit(
                "evil.example",
                443,
                Some("fetch"),
                "policy denial",
                t0 + Duration::from_secs(i),
            ) {
                events.push(s);
            }
        }
        if let Some(s) = d.admit(
            "evil.example",
            443,
            Some("fetch"),
            "policy denial",
            t0 + Duration::from_secs(61),
        ) {
            events.push(s);
        }
        assert_eq!(events, vec![None, Some(4)]);
    }

    #[test]
    fn keys_differ_by_node_and_port() {
        let mut d = Dedup::new();
        let t = Instant::now();
        assert_eq!(d.admit("h", 443, Some("a"), "policy denial", t), Some(None));
        assert_eq!(d.admit("h", 443, Some("b"), "policy denial", t), Some(None));
        assert_eq!(d.admit("h", 80, Some("a"), "policy denial", t), Some(None));
        assert_eq!(d.admit("h", 443, Some("a"), "policy denial", t), None);
    }
}
