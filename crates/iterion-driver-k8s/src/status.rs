//! Reading what the cluster says: the exec status channel (07 §9, §15.5) and a pod's readiness while the driver
//! waits for it (§10). Pure functions over the JSON the API server sends.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Deserialize;

/// What the exec status channel (channel 3) said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecStatus {
    /// The command ended with this exit code (`Success` is 0).
    Exited(i32),
    /// Another failure: the driver inspects the pod to tell `SandboxGone` from `ExecStart`.
    Failure {
        /// The status reason.
        reason: String,
        /// The status message.
        message: String,
    },
}

/// Parses the status channel's JSON: `Success` → exit 0; `Failure` with reason `NonZeroExitCode` and a cause
/// `ExitCode` → that code; anything else (unparseable text included) → [`ExecStatus::Failure`].
pub fn exec_status(json: &[u8]) -> ExecStatus {
    let Ok(s) = serde_json::from_slice::<Status>(json) else {
        return ExecStatus::Failure {
            reason: "Unparseable".into(),
            message: String::from_utf8_lossy(json).chars().take(200).collect(),
        };
    };
    if s.status.as_deref() == Some("Success") {
        return ExecStatus::Exited(0);
    }
    let reason = s.reason.clone().unwrap_or_default();
    if reason == "NonZeroExitCode"
        && let Some(code) = s
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .and_then(|c| c.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
            .and_then(|c| c.message.as_deref())
            .and_then(|m| m.trim().parse::<i32>().ok())
    {
        return ExecStatus::Exited(code);
    }
    ExecStatus::Failure {
        reason,
        message: s.message.unwrap_or_default(),
    }
}

/// Where a pod stands while the driver waits for `Ready` (07 §10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Condition `Ready=True`.
    Ready,
    /// Not ready yet; the last condition or waiting message, for the timeout's text.
    Waiting(String),
    /// Pull failed: the image does not exist (`SANDBOX_IMAGE_UNAVAILABLE`).
    ImageNotFound(String),
    /// The image is not on the node and the pull policy is `Never` (`ErrImageNeverPull`,
    /// `SANDBOX_IMAGE_UNAVAILABLE`).
    ImageAbsent(String),
    /// Pull failed: not authorised (`SANDBOX_IMAGE_UNAVAILABLE`).
    ImageAuth(String),
    /// `ImagePullBackOff` for another reason: retried by the kubelet; fatal once it lasted 5 minutes.
    PullBackOff(String),
    /// The pod cannot run as specified (`SANDBOX_SPEC_INVALID`): a non-numeric or root image user.
    InvalidSpec(String),
    /// The container cannot start, or ended, or the pod failed (`SANDBOX_START_FAILED`).
    StartFailed(String),
    /// The object is not a pod as far as readiness goes (its `status` has the wrong shape): why.
    Unreadable(String),
}

/// The part of a pod that readiness reads. Only these fields are decoded, each optional, so that a field a newer
/// server adds (or one a typed model declares required) never hides the pod's state.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PodView {
    status: Option<StatusView>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct StatusView {
    phase: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    conditions: Option<Vec<ConditionView>>,
    container_statuses: Option<Vec<ContainerView>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ConditionView {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: Option<String>,
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ContainerView {
    state: Option<StateView>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StateView {
    waiting: Option<WaitingView>,
    terminated: Option<TerminatedView>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WaitingView {
    reason: Option<String>,
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct TerminatedView {
    exit_code: i64,
}

fn lower_has(s: &str, words: &[&str]) -> bool {
    let l = s.to_ascii_lowercase();
    words.iter().any(|w| l.contains(w))
}

fn container_verdict(cs: &ContainerView) -> Option<Readiness> {
    let state = cs.state.as_ref()?;
    if let Some(t) = &state.terminated {
        return Some(Readiness::StartFailed(format!(
            "container exited immediately with code {}; the image must provide sleep and /bin/sh",
            t.exit_code
        )));
    }
    let w = state.waiting.as_ref()?;
    let reason = w.reason.clone().unwrap_or_default();
    let message = w.message.clone().unwrap_or_default();
    let text = if message.is_empty() {
        reason.clone()
    } else {
        format!("{reason}: {message}")
    };
    match reason.as_str() {
        "ErrImagePull" | "ImagePullBackOff" if lower_has(&message, &["not found", "manifest unknown"]) => {
            Some(Readiness::ImageNotFound(text))
        }
        "ErrImagePull" | "ImagePullBackOff"
            if lower_has(&message, &["unauthorized", "denied", "authentication required"]) =>
        {
            Some(Readiness::ImageAuth(text))
        }
        "ImagePullBackOff" | "ErrImagePull" => Some(Readiness::PullBackOff(text)),
        // The kubelet never retries this one: waiting for it would only run into the pod-ready bound.
        "ErrImageNeverPull" => Some(Readiness::ImageAbsent(text)),
        "CreateContainerConfigError"
            if lower_has(&message, &["runasnonroot", "non-numeric user", "non-root"]) =>
        {
            Some(Readiness::InvalidSpec(text))
        }
        "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => {
            Some(Readiness::StartFailed(text))
        }
        _ => Some(Readiness::Waiting(text)),
    }
}

/// Classifies a pod object (JSON, as a GET or a watch event carries it).
pub fn readiness(pod_json: &serde_json::Value) -> Readiness {
    let pod = match PodView::deserialize(pod_json) {
        Ok(p) => p,
        Err(e) => return Readiness::Unreadable(e.to_string()),
    };
    let Some(status) = pod.status else {
        return Readiness::Waiting("no status yet".into());
    };
    if status.phase.as_deref() == Some("Failed") {
        let why = [status.reason.clone(), status.message.clone()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        return Readiness::StartFailed(if why.is_empty() {
            "the pod failed".into()
        } else {
            why
        });
    }
    let conditions = status.conditions.unwrap_or_default();
    if conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
    {
        return Readiness::Ready;
    }
    for cs in status.container_statuses.iter().flatten() {
        if let Some(v) = container_verdict(cs)
            && !matches!(v, Readiness::Waiting(_))
        {
            return v;
        }
    }
    let last = conditions
        .iter()
        .rev()
        .find_map(|c| c.message.clone().or_else(|| c.reason.clone()))
        .unwrap_or_else(|| status.phase.unwrap_or_else(|| "Pending".into()));
    Readiness::Waiting(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exec_status_mapping() {
        assert_eq!(exec_status(br#"{"status":"Success"}"#), ExecStatus::Exited(0));
        assert_eq!(
            exec_status(
                br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"17"}]}}"#
            ),
            ExecStatus::Exited(17)
        );
        assert_eq!(
            exec_status(br#"{"status":"Failure","reason":"InternalError","message":"container not found"}"#),
            ExecStatus::Failure {
                reason: "InternalError".into(),
                message: "container not found".into()
            }
        );
        assert!(matches!(exec_status(b"garbage"), ExecStatus::Failure { .. }));
    }

    fn waiting(reason: &str, message: &str) -> serde_json::Value {
        json!({"status": {"phase": "Pending", "containerStatuses": [{
            "name": "workload", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": message}}}]}})
    }

    #[test]
    fn readiness_table() {
        assert_eq!(
            readiness(
                &json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
            ),
            Readiness::Ready
        );
        assert!(matches!(
            readiness(&waiting("ErrImagePull", "rpc error: manifest unknown")),
            Readiness::ImageNotFound(_)
        ));
        assert!(matches!(
            readiness(&waiting(
                "ImagePullBackOff",
                "pull access denied, authentication required"
            )),
            Readiness::ImageAuth(_)
        ));
        assert!(matches!(
            readiness(&waiting(
                "ErrImageNeverPull",
                "Container image \"x:1\" is not present with pull policy of Never"
            )),
            Readiness::ImageAbsent(_)
        ));
        assert!(matches!(
            readiness(&waiting("ImagePullBackOff", "i/o timeout")),
            Readiness::PullBackOff(_)
        ));
        assert!(matches!(
            readiness(&waiting(
                "CreateContainerConfigError",
                "container has runAsNonRoot and image will run as root"
            )),
            Readiness::InvalidSpec(_)
        ));
        assert!(matches!(
            readiness(&waiting("RunContainerError", "exec: sleep: not found")),
            Readiness::StartFailed(_)
        ));
        assert!(matches!(
            readiness(&waiting("ContainerCreating", "")),
            Readiness::Waiting(_)
        ));
        let exited = json!({"status": {"phase": "Running", "containerStatuses": [{
            "name": "workload", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 127}}}]}});
        assert_eq!(
            readiness(&exited),
            Readiness::StartFailed(
                "container exited immediately with code 127; the image must provide sleep and /bin/sh".into()
            )
        );
        assert_eq!(
            readiness(
                &json!({"status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}})
            ),
            Readiness::StartFailed("Evicted: low on memory".into())
        );
        assert_eq!(
            readiness(&json!({"status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available"}]}})),
            Readiness::Waiting("0/3 nodes are available".into())
        );
    }

    #[test]
    fn readiness_reads_only_what_it_needs() {
        // Fields a typed pod model does not expect, or expects in another shape, do not hide the state.
        let pod = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "generation": 1, "creationTimestamp": "not a time"},
            "spec": {"containers": "not a list"},
            "status": {"phase": "Running", "observedGeneration": 1,
                "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1,
                                "lastProbeTime": null}],
                "containerStatuses": [{"name": "workload", "ready": true,
                    "allocatedResourcesStatus": [{"name": "x", "resources": [{"health": "Healthy"}]}],
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}});
        assert_eq!(readiness(&pod), Readiness::Ready);
        assert!(matches!(
            readiness(&json!({"status": {"conditions": "not a list"}})),
            Readiness::Unreadable(_)
        ));
    }
}
