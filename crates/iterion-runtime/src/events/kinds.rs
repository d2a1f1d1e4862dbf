//! The small tag enums that event payloads carry.
use serde::{Deserialize, Serialize};

/// Where a node executes, as tagged in events and `run.json` (the kind of a
/// [`iterion_spec::resolved::NodePlacement`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementKind {
    /// On the host, in the work dir.
    Host,
    /// In the run container.
    Run,
    /// In a node container of its own.
    Own,
}

impl PlacementKind {
    /// The tag of a resolved node placement.
    pub fn of(p: &iterion_spec::resolved::NodePlacement) -> PlacementKind {
        use iterion_spec::resolved::NodePlacement;
        match p {
            NodePlacement::Host { .. } => PlacementKind::Host,
            NodePlacement::Run { .. } => PlacementKind::Run,
            NodePlacement::Own { .. } => PlacementKind::Own,
        }
    }
}

/// Scope of a floor application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FloorScope {
    /// The run scope.
    Run,
    /// A node scope.
    Node,
}

/// What the env merge did to a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvAction {
    /// A deny-class name was removed.
    Removed,
    /// A reserved name's lower-layer value was overridden.
    Overridden,
}

/// Egress placement of the run network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkPlacement {
    /// Relay inside a `NetworkMode: none` container, proxy on a Unix socket.
    Relay,
    /// Proxy on host loopback, not enforced.
    Advisory,
    /// Kubernetes NetworkPolicy.
    K8s,
}

/// Where the claw runner binary comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerBinary {
    /// Host binary bound read-only.
    Mounted,
    /// `iterion` on the image's PATH.
    Image,
}

/// Whose `HOME` the container uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HomeSource {
    /// `HOME=<host home>`.
    Host,
    /// Left to the image.
    Image,
}

/// Kind of an executing node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// Agent node.
    Agent,
    /// Judge node.
    Judge,
    /// Tool node.
    Tool,
    /// Router node.
    Router,
    /// Human node.
    Human,
    /// Compute node.
    Compute,
}

/// How an agent backend is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelegateVia {
    /// Through `iterion __claw-runner` envelopes.
    Runner,
    /// Through the agent CLI.
    Cli,
}

/// Why the proxy refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlockReason {
    /// No rule allowed the target.
    #[serde(rename = "policy denial")]
    PolicyDenial,
    /// The target resolved to a non-global address.
    #[serde(rename = "non-global address")]
    NonGlobalAddress,
    /// TLS inspection found a secret in the request.
    #[serde(rename = "secret leak")]
    SecretLeak,
}

/// A budget amount: an integer (tokens, iterations, milliseconds) or a cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BudgetValue {
    /// Integer dimensions.
    Int(u64),
    /// `max_cost_usd`.
    Float(f64),
}
