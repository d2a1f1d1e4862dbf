//! The [`Event`] enum over every payload of the catalogue.
use serde_json::{Map, Value};

use super::data::EventData;
use super::forwarded::Forwarded;
use super::run::*;
use super::sandbox::*;
use crate::error::{Error, Result};

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
                }
            }

            /// The top-level `node_id` of the stored line, for node-scoped events.
            pub fn node_id(&self) -> Option<&str> {
                match self {
                    $(Event::$variant(d) => d.node_id(),)*
                    Event::Forwarded(f) => Some(f.node_id.as_str()),
                }
                .filter(|n| !n.is_empty())
            }

            /// The `data` object.
            pub fn data(&self) -> Result<Map<String, Value>> {
                let value = match self {
                    $(Event::$variant(d) => serde_json::to_value(d),)*
                    Event::Forwarded(f) => return Ok(f.data.clone()),
                }
                .map_err(|source| Error::Encode { what: "event data", source })?;
                match value {
                    Value::Object(m) => Ok(m),
                    _ => Ok(Map::new()),
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
