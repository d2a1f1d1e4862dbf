//! The [`Event`] enum over every payload of the catalogue.
use serde_json::{Map, Value};

use super::data::EventData;
use super::forwarded::Forwarded;
use super::run::*;
use super::sandbox::*;
use crate::error::{Error, Result};

/// An event emitted on behalf of a fan-out branch.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchScoped {
    /// `branch_<router>_<target>`.
    pub branch_id: String,
    /// The event.
    pub event: Box<Event>,
}

macro_rules! catalogue {
    ($( $variant:ident ),* $(,)?) => {
        /// Every event of the catalogue (section 6).
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum Event {
            $(
                #[doc = concat!("See [`", stringify!($variant), "`].")]
                $variant($variant),
            )*
            /// An event forwarded from the claw runner.
            Forwarded(Forwarded),
            /// An event emitted on behalf of a fan-out branch (its line carries `branch_id`).
            Branch(BranchScoped),
        }

        $(
            impl From<$variant> for Event {
                fn from(d: $variant) -> Event {
                    Event::$variant(d)
                }
            }
        )*

        impl From<Forwarded> for Event {
            fn from(f: Forwarded) -> Event {
                Event::Forwarded(f)
            }
        }

        impl Event {
            /// The event `type`.
            pub fn event_type(&self) -> &'static str {
                match self {
                    $(Event::$variant(_) => <$variant as EventData>::TYPE,)*
                    Event::Forwarded(f) => f.kind.as_str(),
                    Event::Branch(b) => b.event.event_type(),
                }
            }

            /// The top-level `node_id` of the stored line, for node-scoped events.
            pub fn node_id(&self) -> Option<&str> {
                match self {
                    $(Event::$variant(d) => d.node_id(),)*
                    Event::Forwarded(f) => Some(f.node_id.as_str()),
                    Event::Branch(b) => b.event.node_id(),
                }
                .filter(|n| !n.is_empty())
            }

            /// The `data` object.
            pub fn data(&self) -> Result<Map<String, Value>> {
                let value = match self {
                    $(Event::$variant(d) => serde_json::to_value(d),)*
                    Event::Forwarded(f) => return Ok(f.data.clone()),
                    Event::Branch(b) => return b.event.data(),
                }
                .map_err(|source| Error::Encode { what: "event data", source })?;
                match value {
                    Value::Object(m) => Ok(m),
                    _ => Ok(Map::new()),
                }
            }
        }

        impl Event {
            /// The fan-out branch this event was emitted for.
            pub fn branch_id(&self) -> Option<&str> {
                match self {
                    Event::Branch(b) => Some(b.branch_id.as_str()),
                    _ => None,
                }
            }

            /// The event itself, without its branch scope.
            pub fn inner(&self) -> &Event {
                match self {
                    Event::Branch(b) => b.event.inner(),
                    e => e,
                }
            }

            /// This event, emitted on behalf of branch `branch_id`.
            pub fn in_branch(self, branch_id: impl Into<String>) -> Event {
                match self {
                    Event::Branch(b) => Event::Branch(b),
                    e => Event::Branch(BranchScoped { branch_id: branch_id.into(), event: Box::new(e) }),
                }
            }
        }

        /// The event types of the catalogue, forwarded runner types included.
        pub const EVENT_TYPES: &[&str] = &[
            $(<$variant as EventData>::TYPE,)*
            "llm_request", "llm_step_finished", "llm_retry", "llm_compacted",
        ];
    };
}

catalogue!(
    SandboxFloorApplied,
    SandboxNetworkDefaulted,
    SandboxResolved,
    SandboxSkipped,
    SandboxEnvDenied,
    SandboxHostBindsDropped,
    SandboxUserRemap,
    SandboxUidMismatchWarning,
    SandboxHostStateMounted,
    SandboxNetworkStarted,
    SandboxNetworkAdvisory,
    SandboxImageReady,
    SandboxClawRoutedViaRunner,
    SandboxBuildStarted,
    SandboxBuildFinished,
    SandboxBuildFailed,
    SandboxWorkspaceCopied,
    SandboxPostCreateStarted,
    SandboxPostCreateFinished,
    SandboxStarted,
    SandboxNodeContainerStarted,
    SandboxStopped,
    NetworkBlocked,
    SecretSubstituted,
    RunStarted,
    RunResumed,
    RunFinished,
    RunFailed,
    RunCancelled,
    NodeStarted,
    NodeFinished,
    EdgeSelected,
    NodeRecovery,
    ToolStarted,
    ToolCalled,
    ToolError,
    DelegateStarted,
    DelegateFinished,
    DelegateError,
    BudgetWarning,
    BudgetExceeded,
    ArtifactWritten,
    BranchStarted,
    BranchFinished,
    JoinReady,
    HumanInputRequested,
    RunPaused,
    HumanAnswersRecorded,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forged_runner_events_are_dropped() {
        assert!(Forwarded::new("n", "run_finished", Map::new()).is_none());
        assert!(Forwarded::new("n", "sandbox_started", Map::new()).is_none());
        let f = Forwarded::new("n", "llm_request", Map::new()).unwrap();
        assert_eq!(Event::from(f).event_type(), "llm_request");
    }
}
