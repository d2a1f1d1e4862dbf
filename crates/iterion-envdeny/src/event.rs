//! Data of the `sandbox_env_denied` event (§6): names and rule codes, never values.

use crate::class::DENY_CLASS_VERSION;
use crate::merge::{Action, EnvReportEntry, Source};

/// The `data` object of a `sandbox_env_denied` event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SandboxEnvDenied {
    /// `"run"` or the node id whose own container this is.
    pub sandbox: String,
    /// Sorted, de-duplicated names that were removed or overridden.
    pub names: Vec<String>,
    /// One per report entry.
    pub entries: Vec<EnvReportEntry>,
    /// [`DENY_CLASS_VERSION`].
    pub deny_class_version: u32,
}

impl SandboxEnvDenied {
    /// The event data for a merge report; `None` when the report is empty (no event is emitted then).
    pub fn from_report(sandbox: &str, report: &[EnvReportEntry]) -> Option<Self> {
        if report.is_empty() {
            return None;
        }
        let mut names: Vec<String> = report.iter().map(|e| e.name.clone()).collect();
        names.sort();
        names.dedup();
        let mut entries = report.to_vec();
        entries
            .sort_by(|a, b| (a.name.as_str(), a.source.as_str()).cmp(&(b.name.as_str(), b.source.as_str())));
        Some(SandboxEnvDenied {
            sandbox: sandbox.to_string(),
            names,
            entries,
            deny_class_version: DENY_CLASS_VERSION,
        })
    }

    /// The warn-level human log line that accompanies the event.
    pub fn log_line(&self) -> String {
        let names_of = |action: Action| {
            let mut v: Vec<&str> = self
                .entries
                .iter()
                .filter(|e| e.action == action)
                .map(|e| e.name.as_str())
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let removed = names_of(Action::Removed);
        let overridden = names_of(Action::Overridden);
        let all_repo = self
            .entries
            .iter()
            .filter(|e| e.action == Action::Removed)
            .all(|e| {
                matches!(
                    e.source,
                    Source::RemoteEnv | Source::ContainerEnv | Source::RunArgs
                )
            });
        let mut parts = Vec::new();
        if !removed.is_empty() {
            parts.push(format!(
                "removed {} {}env var(s) ({})",
                removed.len(),
                if all_repo { "repository " } else { "" },
                removed.join(", ")
            ));
        }
        if !overridden.is_empty() {
            let what = if removed.is_empty() { " env var(s)" } else { "" };
            parts.push(format!(
                "overrode {}{what} ({})",
                overridden.len(),
                overridden.join(", ")
            ));
        }
        format!("sandbox: {}; see sandbox_env_denied", parts.join(" and "))
    }
}
