//! Tunnels that are not TLS while inspection is active (spec §14.7): relayed as raw bytes, the client-to-upstream
//! direction scanned with a streaming matcher; a placeholder, or a real value the target may not receive in
//! clear text, closes the tunnel with a `secret leak` denial.

use super::context::{Outcome, TunnelCtx};
use super::inspector::Inspector;
use super::scan::{Detector, Hit};
use crate::shared::Shared;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Duration, Instant};

/// How long bytes that could start a placeholder are held back when no more client bytes arrive.
const HOLD_BACK: Duration = Duration::from_millis(50);

/// The rule of a placeholder or value seen in a raw tunnel: a host the secret is not bound to is named; its own
/// host needs TLS, or (bound for plain HTTP too) substitution, which raw tunnels never get.
pub(crate) fn outside_tls_rule(insp: &Inspector, hit: Hit, ctx: &TunnelCtx) -> String {
    let b = &insp.bindings[hit.binding()];
    if !b.bound_to(&ctx.target) {
        format!("secret {} is not bound to {}", b.name, ctx.host)
    } else if b.plain_http && matches!(hit, Hit::Placeholder(_)) {
        format!("secret {} could not be substituted safely", b.name)
    } else {
        format!("secret {} requires TLS", b.name)
    }
}

/// Relay with the upstream direction scanned. `first` holds client bytes already read, `down_first` upstream
/// bytes already read.
pub(crate) async fn scanned_relay<S, U>(
    sh: &Shared,
    insp: &Inspector,
    client: &mut S,
    upstream: &mut U,
    first: Vec<u8>,
    down_first: Vec<u8>,
    ctx: &TunnelCtx,
) -> Outcome
where
    S: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
    U: AsyncRead + AsyncWrite + Unpin + Send + ?Sized,
{
    let mut out = Outcome::default();
    // Every placeholder, and the values the target may not receive in clear text.
    let mut det = Detector::new(insp.needles(|i| {
        let b = &insp.bindings[i];
        !(b.plain_http && b.bound_to(&ctx.target))
    }));
    let leak = |hit: Hit, out: Outcome| {
        let idx = hit.binding();
        let rule = outside_tls_rule(insp, hit, ctx);
        tracing::info!(host = %ctx.host, rule = %rule, "secret in a raw tunnel; tunnel closed");
        ctx.deny(
            &sh.events,
            &sh.counters,
            &ctx.decision_id,
            "CONNECT",
            "secret leak",
            &rule,
            Some(&insp.bindings[idx].name),
        );
        Outcome {
            reason: "secret leak",
            ..out
        }
    };
    if !down_first.is_empty() {
        if client.write_all(&down_first).await.is_err() {
            return Outcome {
                reason: "error",
                ..out
            };
        }
        out.bytes_down += down_first.len() as u64;
    }
    match det.feed(&first) {
        Err(hit) => return leak(hit, out),
        Ok(bytes) => {
            if upstream.write_all(&bytes).await.is_err() {
                return Outcome {
                    reason: "error",
                    ..out
                };
            }
            out.bytes_up += bytes.len() as u64;
        }
    }
    let idle = sh.limits.tunnel_idle_timeout;
    let end_of_life = sh.limits.tunnel_max_lifetime.map(|l| Instant::now() + l);
    let mut up_done = false;
    let mut down_done = false;
    let mut ubuf = vec![0u8; 16 * 1024];
    let mut dbuf = vec![0u8; 16 * 1024];
    while !(up_done && down_done) {
        let deadline = Instant::now() + idle;
        let lifetime = async {
            match end_of_life {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = client.read(&mut ubuf), if !up_done => match r {
                Ok(0) | Err(_) => {
                    let rest = det.flush();
                    if upstream.write_all(&rest).await.is_err() {
                        return Outcome { reason: "error", ..out };
                    }
                    out.bytes_up += rest.len() as u64;
                    let _ = upstream.shutdown().await;
                    up_done = true;
                }
                Ok(n) => match det.feed(&ubuf[..n]) {
                    Err(hit) => return leak(hit, out),
                    Ok(bytes) => {
                        if upstream.write_all(&bytes).await.is_err() {
                            return Outcome { reason: "error", ..out };
                        }
                        out.bytes_up += bytes.len() as u64;
                    }
                },
            },
            r = upstream.read(&mut dbuf), if !down_done => match r {
                Ok(0) | Err(_) => {
                    let _ = client.shutdown().await;
                    down_done = true;
                }
                Ok(n) => {
                    if client.write_all(&dbuf[..n]).await.is_err() {
                        return Outcome { reason: "error", ..out };
                    }
                    out.bytes_down += n as u64;
                }
            },
            // A possible placeholder start is held back only briefly: interactive protocols never stall.
            () = tokio::time::sleep(HOLD_BACK), if det.holding() && !up_done => {
                let bytes = det.flush();
                if upstream.write_all(&bytes).await.is_err() {
                    return Outcome { reason: "error", ..out };
                }
                out.bytes_up += bytes.len() as u64;
            }
            () = tokio::time::sleep_until(deadline) => return Outcome { reason: "idle", ..out },
            () = lifetime => return Outcome { reason: "lifetime", ..out },
            () = sh.hard.cancelled() => return Outcome { reason: "shutdown", ..out },
        }
    }
    Outcome { reason: "eof", ..out }
}
