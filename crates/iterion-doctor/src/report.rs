//! The doctor's report: the JSON document of 06 §7 (field order is the document's key order) and the human
//! renderings of §2 and §5.

use serde::Serialize;
use serde_json::Value;

/// Schema id of the JSON document.
pub const SCHEMA: &str = "iterion.sandbox.doctor/1";

/// Status of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Verified.
    Pass,
    /// A risk, or not verifiable from here.
    Warn,
    /// The run would fail, or the configuration is unsafe.
    Fail,
    /// Not applicable, or a prerequisite failed.
    Skip,
}

impl Status {
    /// `PASS`, `WARN`, `FAIL`, `SKIP`.
    pub fn upper(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
        }
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// Stable id.
    pub id: &'static str,
    /// Title.
    pub title: &'static str,
    /// Status.
    pub status: Status,
    /// One line.
    pub message: String,
    /// Remediation (`null` on pass and skip).
    pub hint: Option<String>,
    /// Time taken.
    pub duration_ms: u64,
    /// Check-specific details (never an environment value).
    pub details: Value,
}

/// The engine object of the document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineDoc {
    /// `docker` / `podman`.
    pub kind: String,
    /// Engine version.
    pub version: String,
    /// API version.
    pub api_version: String,
    /// Rootless engine.
    pub rootless: bool,
    /// Docker Desktop.
    pub desktop: bool,
    /// Endpoint.
    pub endpoint: Option<String>,
}

/// Counts per status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct Summary {
    /// Passed.
    pub pass: usize,
    /// Warnings.
    pub warn: usize,
    /// Failed.
    pub fail: usize,
    /// Skipped.
    pub skip: usize,
}

/// The document of 06 §7.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `iterion.sandbox.doctor/1`.
    pub schema: &'static str,
    /// Strict mode.
    pub strict: bool,
    /// `local` / `cloud` in strict mode, `null` in report mode.
    pub target: Option<String>,
    /// Host kind.
    pub host: String,
    /// Rust OS name.
    pub os: &'static str,
    /// Rust arch name.
    pub arch: &'static str,
    /// The container runtime found (`docker`, `podman`), `null` without one.
    pub container_runtime: Option<String>,
    /// The engine, `null` without one.
    pub engine: Option<EngineDoc>,
    /// Drivers that answered, sorted.
    pub available_drivers: Vec<String>,
    /// The selected driver.
    pub selected_driver: String,
    /// Why the selected (forced) driver cannot be used, or why no runtime was found.
    pub driver_error: Option<String>,
    /// Capabilities of the selected driver (06 §7 key order).
    pub capabilities: Value,
    /// `relay`, `advisory`, `none`, `network_policy`.
    pub egress_placement: String,
    /// `ITERION_SANDBOX_DEFAULT` or `<unset>`.
    pub sandbox_default: String,
    /// The sandbox settings in force (literal values or `null`).
    pub settings: Value,
    /// `{path, name}` or `null`.
    pub workflow: Value,
    /// The resolved spec summary or `null`.
    pub spec: Value,
    /// The checks (strict mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<Check>>,
    /// Counts (`null` in report mode).
    pub summary: Option<Summary>,
    /// The exit code.
    pub exit_code: u8,
    /// Human-only lines of report mode (not in the JSON document).
    #[serde(skip)]
    pub human: Vec<(String, String)>,
    /// The strict header's workflow label (not in the JSON document).
    #[serde(skip)]
    pub header: String,
    /// Warnings about the doctor's own settings (an invalid timeout, an unknown `ITERION_MODE`), counted with
    /// the warnings of the checks.
    #[serde(rename = "warnings", skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Report {
    /// Number of failed checks.
    pub fn failed(&self) -> usize {
        self.checks
            .iter()
            .flatten()
            .filter(|c| c.status == Status::Fail)
            .count()
    }

    /// Sets `summary` and `exit_code` from the checks.
    pub fn finish(&mut self) {
        if let Some(checks) = &self.checks {
            let mut s = Summary::default();
            for c in checks {
                match c.status {
                    Status::Pass => s.pass += 1,
                    Status::Warn => s.warn += 1,
                    Status::Fail => s.fail += 1,
                    Status::Skip => s.skip += 1,
                }
            }
            self.exit_code = u8::from(s.fail > 0);
            self.summary = Some(s);
        }
    }

    /// The pretty-printed JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Adds warnings about the settings; they count as warnings in the summary.
    pub fn add_notes(&mut self, notes: impl IntoIterator<Item = String>) {
        for n in notes {
            if let Some(s) = &mut self.summary {
                s.warn += 1;
            }
            self.notes.push(n);
        }
    }

    /// Human output (06 §2 for report mode, §5 for strict mode). `color` adds ANSI colours to the status.
    pub fn to_human(&self, color: bool) -> String {
        let mut out = String::new();
        if !self.strict {
            out.push_str("iterion sandbox — doctor report\n");
            for (k, v) in &self.human {
                let label = format!("{k}:");
                let mut lines = v.lines();
                out.push_str(&format!("  {label:<20}{}\n", lines.next().unwrap_or("")));
                for l in lines {
                    out.push_str(&format!("  {:<20}{l}\n", ""));
                }
            }
            return out;
        }
        out.push_str(&format!(
            "iterion sandbox doctor --strict{} (target: {})\n",
            self.header,
            self.target.as_deref().unwrap_or("local")
        ));
        for c in self.checks.iter().flatten() {
            let status = format!("{:<4}", c.status.upper());
            let status = if color {
                let code = match c.status {
                    Status::Pass => "32",
                    Status::Warn => "33",
                    Status::Fail => "31",
                    Status::Skip => "2",
                };
                format!("\x1b[{code}m{status}\x1b[0m")
            } else {
                status
            };
            out.push_str(&format!("  {status}  {:<24}{}\n", c.id, c.message));
            if matches!(c.status, Status::Warn | Status::Fail)
                && let Some(h) = &c.hint
            {
                out.push_str(&format!("          hint: {h}\n"));
            }
        }
        for n in &self.notes {
            out.push_str(&format!("  {:<4}  {:<24}{n}\n", "WARN", "settings"));
        }
        let s = self.summary.unwrap_or_default();
        let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        out.push_str(&format!(
            "\n  {} passed, {}, {} failed, {} skipped — exit {}\n",
            s.pass,
            plural(s.warn, "warning", "warnings"),
            s.fail,
            s.skip,
            self.exit_code
        ));
        // what only a started sandbox shows (a missing user, no /bin/sh, a missing init) is tried by --probe
        let probed = self.checks.iter().flatten().any(|c| c.id.starts_with("probe_"));
        if !probed && self.selected_driver != "noop" && self.selected_driver != "none" {
            out.push_str(
                "  not tried: starting the sandbox (its user, its shell, the engine's init) and its boundaries; add --probe\n",
            );
        }
        out
    }
}

/// A check with the given fields: the title comes from the id, and a hint is kept only on a warning or a
/// failure.
pub fn make_check(
    id: &'static str,
    status: Status,
    message: impl Into<String>,
    hint: Option<String>,
) -> Check {
    let title = match id {
        "workflow_compiles" => "workflow compiles",
        "sandbox_active" => "sandbox resolution",
        "driver_available" => "driver available",
        "spec_valid" => "spec valid",
        "engine_reachable" => "container engine answers",
        "oci_runtime" => "OCI runtime",
        "spec_safety" => "spec safety",
        "env_deny" => "repository environment",
        "secrets" => "secret bindings",
        "image_resolvable" => "image resolvable",
        "build_context" => "build context",
        "k8s_spec_compatible" => "Kubernetes compatibility",
        "k8s_context" => "cluster reachable",
        "k8s_rbac" => "permissions",
        "k8s_pod_ip" => "runner address",
        "network_policy_syntax" => "network policy",
        "egress_enforcement" => "egress enforcement",
        "driver_capabilities" => "driver capabilities",
        "probe_sandbox_start" => "probe: sandbox starts",
        "probe_direct_egress" => "probe: direct egress blocked",
        "probe_host_services" => "probe: host services unreachable",
        "probe_dns" => "probe: DNS",
        "probe_metadata" => "probe: metadata unreachable",
        "probe_denied_host" => "probe: denied host refused",
        "probe_proxy_env" => "probe: proxy environment",
        "probe_secret_env" => "probe: no leaked secrets",
        "probe_hardening" => "probe: hardening",
        _ => "check",
    };
    let hint = match status {
        Status::Warn | Status::Fail => hint,
        Status::Pass | Status::Skip => None,
    };
    Check {
        id,
        title,
        status,
        message: message.into(),
        hint,
        duration_ms: 0,
        details: Value::Object(Default::default()),
    }
}
