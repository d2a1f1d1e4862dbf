//! The outcome of driver selection as the runtime sees it.

use std::sync::Arc;

use iterion_driver::{Driver, DriverKind};

use crate::selection::Selection;

/// The container driver of a run, as decided by driver selection.
#[derive(Debug, Clone)]
pub enum DriverChoice {
    /// A container driver answered its availability probe.
    Container(Arc<dyn Driver>),
    /// No container runtime is usable: auto scopes degrade to the host, inline scopes fail with
    /// `SANDBOX_DRIVER_UNAVAILABLE`.
    Unavailable {
        /// Why (the probe answers), for the log.
        reason: String,
    },
    /// The operator forced the `noop` driver: every active scope runs on the host (unless the inline floor
    /// is active).
    ForcedNoop,
    /// The operator forced a driver that is not usable: every active scope fails.
    ForcedUnavailable {
        /// The error text, naming the forcing source.
        message: String,
    },
}

impl DriverChoice {
    /// The driver's name in events and records: the container driver's kind, `noop` when forced, else
    /// `none`.
    pub fn name(&self) -> &'static str {
        match self {
            DriverChoice::Container(d) => d.kind().as_str(),
            DriverChoice::ForcedNoop => "noop",
            _ => "none",
        }
    }
}

impl Selection {
    /// Maps the selection onto the runtime's [`DriverChoice`]: a selected engine is `Container`; the noop
    /// driver is `ForcedNoop` when forced, else `Unavailable` with the reason and every candidate's answer;
    /// a forced driver that is down is `ForcedUnavailable` naming the forcing source.
    pub fn driver_choice(&self) -> DriverChoice {
        match (&self.driver, self.kind) {
            (Some(_), DriverKind::Noop) if self.forced.is_some() => DriverChoice::ForcedNoop,
            (Some(_), DriverKind::Noop) => DriverChoice::Unavailable {
                reason: format!("{} ({})", self.reason, self.unavailable_summary()),
            },
            (Some(d), _) => DriverChoice::Container(d.clone()),
            (None, _) => DriverChoice::ForcedUnavailable {
                message: self
                    .require()
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "the forced driver is unavailable".into()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{SelectOptions, select};
    use std::collections::BTreeMap;

    fn choice_of(forced: Option<&str>) -> super::DriverChoice {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = format!("unix://{}", dir.path().join("absent.sock").display());
        let env = BTreeMap::from([
            ("DOCKER_HOST".to_string(), sock.clone()),
            ("CONTAINER_HOST".to_string(), sock),
        ]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(select(&env, &SelectOptions::new(forced.map(String::from))))
            .expect("select")
            .driver_choice()
    }

    #[test]
    fn selections_map_onto_choices() {
        use super::DriverChoice as C;
        assert!(matches!(choice_of(Some("noop")), C::ForcedNoop));
        match choice_of(None) {
            C::Unavailable { reason } => assert!(
                reason.starts_with("DOCKER_HOST=unix://")
                    && reason.contains("did not answer; Podman is not tried"),
                "{reason}"
            ),
            other => panic!("{other:?}"),
        }
        match choice_of(Some("docker")) {
            C::ForcedUnavailable { message } => {
                assert!(message.contains("forced by --sandbox-driver"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(choice_of(Some("noop")).name(), "noop");
        assert_eq!(choice_of(None).name(), "none");
    }
}
