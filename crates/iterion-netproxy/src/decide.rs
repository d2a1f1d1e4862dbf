//! The two-stage decision without any socket (spec §5, §8.1, §8.2): used by the proxy for every request, and by
//! `iterion netproxy check` and the doctor.

use crate::net::{ResolveError, Resolver};
use crate::{Error, Policy, Result};
use iterion_netpolicy::{Decision, Host, Target};
use std::net::SocketAddr;
use std::time::Duration;

/// Options of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecideOptions {
    /// Resolution timeout (default 5 s).
    pub dns_timeout: Duration,
    /// The proxy's own TCP listening addresses (refused as targets: no self-connection).
    pub own_listen: Vec<SocketAddr>,
}

impl Default for DecideOptions {
    fn default() -> Self {
        Self {
            dns_timeout: Duration::from_secs(5),
            own_listen: Vec::new(),
        }
    }
}

/// Decide `target` under `policy`: the name stage, then — when it allows and `resolver` is given — resolution
/// and the address stage on **every** resolved address. An IP literal always gets the address stage. With
/// `resolver == None` a name target is decided on the name stage alone (`check --no-resolve`).
///
/// When the decision allows, `Decision::addresses` are the only addresses that may be dialled, in that order.
///
/// # Errors
///
/// [`Error::Upstream`] with status 502 (`dns_failed`) when the name does not resolve, 504 (`dns_timeout`) when the
/// resolver does not answer in time. These are not policy decisions.
pub async fn decide(
    policy: &Policy,
    target: &Target,
    resolver: Option<&dyn Resolver>,
    options: &DecideOptions,
) -> Result<Decision> {
    let resolver = match (&target.host, resolver) {
        (Host::Name(name), Some(r)) if policy.decide_name(target).allowed => Some((name, r)),
        _ => None,
    };
    let Some((name, resolver)) = resolver else {
        return Ok(policy.decide(target, None, &options.own_listen));
    };
    let addresses = match tokio::time::timeout(options.dns_timeout, resolver.lookup(name)).await {
        Err(_) => return Err(Error::upstream(504, "dns_timeout", "dns timeout")),
        Ok(Err(ResolveError::NoAddress { .. } | ResolveError::Failed { .. })) => {
            return Err(Error::upstream(502, "dns_failed", "dns resolution failed"));
        }
        Ok(Ok(a)) if a.is_empty() => return Err(Error::upstream(502, "dns_failed", "dns resolution failed")),
        Ok(Ok(a)) => a,
    };
    Ok(policy.decide(target, Some(&addresses), &options.own_listen))
}
