//! The egress network of a run: lease, proxy, credentials (05 §4.7 item 3).
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use iterion_driver::{Driver, NetworkRequest, ProxyListen};
use iterion_netpolicy::Policy;
use iterion_netproxy::{Credential, Proxy, ProxyConfig, ProxyEvent};
use iterion_spec::resolved::NetworkPolicySpec;

use super::failures::{driver_failure, timeout_failure};
use super::guard::Guard;
use super::setup::Setup;
use super::starter::{Net, url_host};
use crate::events::{
    BlockReason, NetworkBlocked, NetworkPlacement, SandboxNetworkAdvisory, SandboxNetworkStarted,
    SecretSubstituted,
};
use crate::failure::{FailureCode, FailurePhase};
use crate::lifecycle::netblock::Dedup;
use crate::lifecycle::step_failure::Failure;
use crate::store::LogLevel;

impl Setup<'_> {
    /// 4.7 item 3: the lease, the proxy on it, per-node credentials and `sandbox_network_started`.
    pub(super) async fn start_network(
        &self,
        driver: &Arc<dyn Driver>,
        run_policy: &NetworkPolicySpec,
        run_compiled: Arc<Policy>,
        compiled: &BTreeMap<String, Arc<Policy>>,
        overrides: &[String],
        guard: &mut Guard,
    ) -> Result<Net, Failure> {
        let cfg = self.cfg;
        let none = crate::lifecycle::secrets::Secrets::default();
        // checked before the network starts (`Setup::checked_secrets`)
        let secrets = self.secrets.as_ref().unwrap_or(&none);
        let req = NetworkRequest::new(
            self.run_id.clone(),
            self.run_dir.clone(),
            cfg.settings.require_enforced_egress,
        );
        let lease = match tokio::time::timeout(cfg.settings.start_timeout.duration, driver.network(req)).await
        {
            Err(_) => return Err(timeout_failure(cfg, FailurePhase::Start, "the network lease")),
            Ok(Err(e)) => return Err(driver_failure(cfg, &e, FailurePhase::Network)),
            Ok(Ok(l)) => Arc::new(l),
        };
        Guard::lock(&guard.res).lease = Some(lease.clone());
        // The proxy starts with one credential nobody is given (the configuration requires one); it is removed
        // once the proxy runs. Steps get credentials of their own while they run (`Starter::mint`).
        const BOOTSTRAP: &str = "bootstrap";
        let mut builder = ProxyConfig::builder()
            .listen(crate::lifecycle::assembly::proxy_listen(&lease.proxy_listen))
            .credential(Credential::new(
                BOOTSTRAP,
                iterion_netproxy::new_token(),
                None,
                run_compiled.clone(),
            ));
        if let Some(sd) = &cfg.settings.silent_deny {
            builder = builder.silent_deny(sd);
        }
        builder = builder.on_event(proxy_events(self.em.clone(), self.run_id.clone()));
        let start_failed = |e: String| {
            Failure::new(
                FailureCode::SandboxStartFailed,
                format!("cannot start the egress proxy: {e}"),
            )
            .phase(FailurePhase::Network)
        };
        // secret bindings: the proxy inspects TLS with a CA of the run's own and swaps placeholders for values
        let bindings = secrets.bindings();
        let placeholders: BTreeMap<String, String> = bindings
            .iter()
            .map(|b| (b.name().to_owned(), b.placeholder().to_owned()))
            .collect();
        if !bindings.is_empty() {
            let mut tls = iterion_netproxy::TlsInspection::new().run_id(self.run_id.clone());
            for b in bindings {
                tls = tls.binding(b);
            }
            if let Some(pem) = crate::lifecycle::secrets::upstream_ca(&cfg.env)
                .map_err(|e| Failure::new(FailureCode::SandboxSpecInvalid, e).phase(FailurePhase::Network))?
            {
                tls = tls.upstream_root_pem(pem);
            }
            builder = builder.tls_inspection(tls);
        }
        let config = builder.build().map_err(|e| start_failed(e.to_string()))?;
        let proxy = Proxy::start(config)
            .await
            .map_err(|e| start_failed(e.to_string()))?;
        proxy.remove_credential(BOOTSTRAP);
        let tls_dir = match proxy.trust_bundle() {
            None => None,
            Some(bundle) => {
                let dir = self.run_dir.join("tls");
                bundle
                    .write_to(&dir)
                    .map_err(|e| start_failed(format!("cannot write the run's CA files: {e}")))?;
                Some(dir)
            }
        };
        let tls_inspection = proxy.tls_inspection_active();
        let placement = lease.placement;
        let port = match placement {
            iterion_driver::EgressPlacement::Advisory => proxy
                .local_addr()
                .map(|a| a.port())
                .unwrap_or(lease.container_proxy_port),
            _ => lease.container_proxy_port,
        };
        let proxy_text = match &lease.proxy_listen {
            ProxyListen::Unix(p) => p.to_string_lossy().into_owned(),
            ProxyListen::Tcp(_) => proxy.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        };
        Guard::lock(&guard.res).proxy = Some(proxy);
        let host = lease.container_proxy_host.clone();
        let net_placement = match placement {
            iterion_driver::EgressPlacement::Advisory => NetworkPlacement::Advisory,
            _ => NetworkPlacement::Relay,
        };
        // An advisory placement that a NetworkPolicy encloses (kubernetes) is not Docker Desktop's.
        if placement == iterion_driver::EgressPlacement::Advisory && lease.enforced {
            self.em.log(
                LogLevel::Info,
                "sandbox: the pod reaches the proxy over the pod network; its NetworkPolicy admits only the proxy (as far as the cluster's network plugin enforces NetworkPolicies)",
            );
        } else if placement == iterion_driver::EgressPlacement::Advisory {
            let reason = "the engine cannot reach a host socket (Docker Desktop); the proxy is advisory: processes that ignore HTTP(S)_PROXY bypass it";
            self.em.log(LogLevel::Warn, &format!("sandbox: {reason}"));
            let engine = driver.engine_info().await.map(|i| i.engine).unwrap_or_default();
            self.em.emit(SandboxNetworkAdvisory {
                driver: driver.kind().as_str().to_owned(),
                engine,
                reason: reason.into(),
            });
        }
        self.em.emit(SandboxNetworkStarted {
            driver: driver.kind().as_str().to_owned(),
            mode: run_policy.mode.as_str().to_owned(),
            preset: run_policy.preset.map(|p| p.as_str().to_owned()),
            rules: run_policy.rules.len() as u64,
            placement: net_placement,
            proxy: proxy_text,
            enforced: lease.enforced,
            node_overrides: overrides.to_vec(),
            tls_inspection,
            secrets: secrets
                .infos()
                .into_iter()
                .filter(|i| i.delivery == crate::lifecycle::secrets::Delivery::Env)
                .collect(),
        });
        Ok(Net {
            lease,
            base_url: format!("http://{}:{port}", url_host(&host)),
            host: host.clone(),
            port,
            run_policy: run_compiled,
            node_policies: compiled.clone(),
            endpoint: iterion_driver::ProxyEndpoint { host, port },
            placeholders,
            tls_dir,
        })
    }
}

/// What the run does with the proxy's events: a policy denial becomes `network_blocked` (deduplicated); an allowed
/// name that does not resolve becomes a warning in the run log naming the node.
fn proxy_events(
    em: super::super::sink::Emitter,
    run_id: String,
) -> impl Fn(ProxyEvent) + Send + Sync + 'static {
    let dedup = Mutex::new(Dedup::new());
    let substituted = Mutex::new(SubstitutionAudit::default());
    move |ev| {
        if let ProxyEvent::SecretSubstituted {
            secret,
            host,
            port,
            method,
            path,
            node_id,
            decision_id,
            count,
        } = ev
        {
            let due = substituted.lock().unwrap_or_else(|p| p.into_inner()).admit(
                &secret,
                &host,
                node_id.as_deref(),
                count,
                Instant::now(),
            );
            if let Some(count) = due {
                em.emit(SecretSubstituted {
                    secret,
                    host,
                    port,
                    method,
                    path,
                    node_id,
                    decision_id: decision_id.to_string(),
                    count,
                });
            }
            return;
        }
        // an allowed name that does not resolve is no policy decision, but the node's request failed: say so
        if let ProxyEvent::DnsFailed {
            host,
            port,
            code,
            node_id,
        } = &ev
        {
            let admitted = dedup.lock().unwrap_or_else(|p| p.into_inner()).admit(
                host,
                *port,
                node_id.as_deref(),
                code,
                Instant::now(),
            );
            if admitted.is_none() {
                return;
            }
            let who = node_id
                .as_deref()
                .map(|n| format!("node {n}: "))
                .unwrap_or_default();
            let what = if code == "dns_timeout" {
                "timed out"
            } else {
                "failed"
            };
            em.log(
                LogLevel::Warn,
                &format!("sandbox: {who}name resolution of {host}:{port} {what} (the egress proxy answered 502/504)"),
            );
            return;
        }
        if let ProxyEvent::Denied(d) = ev {
            let reason_text = d.reason.clone().unwrap_or_else(|| "policy denial".into());
            let admitted = dedup.lock().unwrap_or_else(|p| p.into_inner()).admit(
                &d.host,
                d.port,
                d.node_id.as_deref(),
                &reason_text,
                Instant::now(),
            );
            let Some(suppressed) = admitted else { return };
            let reason = match reason_text.as_str() {
                "non-global address" => BlockReason::NonGlobalAddress,
                "secret leak" => BlockReason::SecretLeak,
                _ => BlockReason::PolicyDenial,
            };
            em.emit(NetworkBlocked {
                host: d.host.clone(),
                port: d.port,
                reason,
                rule: d.rule.clone().unwrap_or_else(|| "no rule matched".into()),
                decision_id: d.decision_id.to_string(),
                run_id: run_id.clone(),
                node_id: d.node_id.clone(),
                suppressed,
                address: d.address.clone(),
                secret: d.secret.clone(),
            });
        }
    }
}

/// The audit of substitutions: the first per `(secret, host, node)` at once, then at most one event a minute
/// per key carrying the count since the previous event.
#[derive(Default)]
struct SubstitutionAudit {
    /// key → (last event, substitutions since).
    seen: std::collections::HashMap<(String, String, Option<String>), (Instant, u64)>,
}

impl SubstitutionAudit {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(60);

    /// The count to report now, or `None` while the key's minute runs.
    fn admit(
        &mut self,
        secret: &str,
        host: &str,
        node: Option<&str>,
        count: u64,
        now: Instant,
    ) -> Option<u64> {
        let key = (secret.to_owned(), host.to_owned(), node.map(str::to_owned));
        match self.seen.get_mut(&key) {
            None => {
                self.seen.insert(key, (now, 0));
                Some(count)
            }
            Some((last, pending)) => {
                *pending += count;
                if now.duration_since(*last) >= Self::EVERY {
                    let n = *pending;
                    *last = now;
                    *pending = 0;
                    Some(n)
                } else {
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SubstitutionAudit;
    use std::time::{Duration, Instant};

    #[test]
    fn substitutions_are_reported_at_once_then_once_a_minute_with_the_count() {
        let mut a = SubstitutionAudit::default();
        let t = Instant::now();
        assert_eq!(a.admit("GH_TOKEN", "api.github.com", Some("n"), 1, t), Some(1));
        assert_eq!(
            a.admit(
                "GH_TOKEN",
                "api.github.com",
                Some("n"),
                2,
                t + Duration::from_secs(1)
            ),
            None
        );
        assert_eq!(a.admit("GH_TOKEN", "api.github.com", Some("m"), 1, t), Some(1));
        assert_eq!(
            a.admit(
                "GH_TOKEN",
                "api.github.com",
                Some("n"),
                1,
                t + Duration::from_secs(61)
            ),
            Some(3)
        );
    }
}
