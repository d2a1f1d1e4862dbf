//! The executor's view of the sandboxes, node containers started lazily (5.2).
use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use iterion_spec::resolved::ResolvedSandbox;

use super::convert::ms;
use super::starter::Starter;
use crate::events::{PlacementKind, SandboxNodeContainerStarted};
use crate::exec::{NodeSandbox, NodeSandboxes, SandboxUnavailable};
use crate::failure::FailurePhase;
use crate::lifecycle::step_failure::Failure;
use crate::store::ContainerRecord;

/// A node container not started yet (5.2).
pub(super) struct OwnSpec {
    pub(super) spec: ResolvedSandbox,
    pub(super) started: tokio::sync::Mutex<Option<Result<NodeSandbox, SandboxUnavailable>>>,
}

/// The executor's view of the sandboxes: each node's `Run`, started lazily for node containers.
pub(crate) struct Sandboxes {
    pub(super) host: NodeSandbox,
    pub(super) run: Option<NodeSandbox>,
    pub(super) placements: BTreeMap<String, PlacementKind>,
    pub(super) own_keys: BTreeMap<String, String>,
    pub(super) own: BTreeMap<String, OwnSpec>,
    pub(super) starter: Option<Arc<Starter>>,
    pub(super) driver_name: Option<String>,
}

impl std::fmt::Debug for Sandboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandboxes")
            .field("placements", &self.placements)
            .finish_non_exhaustive()
    }
}

impl Sandboxes {
    pub(crate) fn sandboxed(&self) -> bool {
        self.run.is_some()
    }

    pub(crate) fn driver_name(&self) -> Option<String> {
        self.driver_name.clone()
    }

    /// Whether [`NodeSandboxes::sandbox_for`] gives `node_id` a container (the run container, or a node
    /// container that can be started).
    pub(crate) fn in_container(&self, node_id: &str) -> bool {
        match self.placements.get(node_id) {
            Some(PlacementKind::Run) => self.run.is_some(),
            Some(PlacementKind::Own) => {
                self.starter.is_some()
                    && self
                        .own_keys
                        .get(node_id)
                        .is_some_and(|k| self.own.contains_key(k))
            }
            _ => false,
        }
    }
}

#[async_trait]
impl NodeSandboxes for Sandboxes {
    async fn sandbox_for(&self, node_id: &str) -> Result<NodeSandbox, SandboxUnavailable> {
        match self
            .placements
            .get(node_id)
            .copied()
            .unwrap_or(PlacementKind::Host)
        {
            PlacementKind::Host => Ok(self.host.clone()),
            PlacementKind::Run => Ok(self.run.clone().unwrap_or_else(|| self.host.clone())),
            PlacementKind::Own => {
                let (Some(key), Some(starter)) = (self.own_keys.get(node_id), self.starter.as_ref()) else {
                    return Ok(self.host.clone());
                };
                let Some(own) = self.own.get(key) else {
                    return Ok(self.host.clone());
                };
                let mut slot = own.started.lock().await;
                if let Some(r) = slot.as_ref() {
                    return r.clone();
                }
                let unavailable = |f: Failure| SandboxUnavailable {
                    code: f.event.code,
                    error: f.event.error.clone(),
                    phase: Some(FailurePhase::NodeContainer),
                    hint: f.event.hint.clone(),
                };
                let r = async {
                    starter.classify(node_id, &own.spec, starter.net.is_some())?;
                    let prepared = starter.prepare(&own.spec, Some(node_id), Some(key)).await?;
                    let st = starter.start(&own.spec, prepared, key, Some(node_id)).await?;
                    starter.em.emit(SandboxNodeContainerStarted {
                        node_id: node_id.to_owned(),
                        key: key.clone(),
                        image: st.report.image.reference.clone(),
                        container: st.report.container_id.clone(),
                        duration_ms: ms(st.duration),
                    });
                    let (id, name) = (st.report.container_id.clone(), st.report.name.clone());
                    let k = key.clone();
                    starter.em.update(move |d| {
                        d.sandbox.containers.push(ContainerRecord {
                            role: "node".into(),
                            id: id.chars().take(12).collect(),
                            name,
                            key: Some(k),
                        })
                    });
                    Ok::<_, Failure>(st.sandbox)
                }
                .await
                .map_err(unavailable);
                *slot = Some(r.clone());
                r
            }
        }
    }

    fn exec_env(&self, node_id: &str) -> Vec<(String, String)> {
        let Some(starter) = &self.starter else {
            return Vec::new();
        };
        let Some(policy) = starter
            .net
            .as_ref()
            .and_then(|n| n.node_policies.get(node_id).cloned())
        else {
            return Vec::new();
        };
        starter.mint(node_id, Some(node_id.to_owned()), policy)
    }

    fn policies_differ(&self, node_ids: &[&str]) -> bool {
        let Some(net) = self.starter.as_ref().and_then(|s| s.net.as_ref()) else {
            return false;
        };
        let mut policies = node_ids
            .iter()
            .map(|id| net.node_policies.get(*id).unwrap_or(&net.run_policy));
        let Some(first) = policies.next() else {
            return false;
        };
        policies.any(|p| p != first)
    }

    async fn node_ended_concurrently(&self, node_id: &str, _sandbox: &NodeSandbox) {
        if let Some(starter) = &self.starter {
            starter.revoke(node_id);
        }
    }

    async fn node_ended(&self, node_id: &str, sandbox: &NodeSandbox) {
        let Some(starter) = &self.starter else { return };
        if sandbox.placement == PlacementKind::Host {
            return;
        }
        starter
            .end_step(node_id, &sandbox.run, &format!("node {node_id}"))
            .await;
    }

    async fn step_starting(&self, _node_id: &str) {
        if let Some(starter) = &self.starter {
            super::guard::Guard::lock(&starter.res).nodes_ran = true;
            starter.kill_leftovers().await;
        }
    }
}
