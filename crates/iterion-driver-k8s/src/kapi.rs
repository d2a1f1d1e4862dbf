//! The API calls of the driver (07 §10, §11): create, watch until ready, delete and wait until gone. Every
//! kube error is translated here; nothing of kube leaves this module except through [`Kapi`]'s methods.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use iterion_driver::Error;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::api::{Api, DeleteParams, LogParams, PostParams, PropagationPolicy};

/// Labels and annotations of an object.
pub(crate) type Meta = (BTreeMap<String, String>, BTreeMap<String, String>);

/// A failed API call: the HTTP status when the server answered, and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiFail {
    pub code: Option<u16>,
    pub message: String,
    /// The `Status` reason (`NotFound`, `Forbidden`, …) when the server sent one.
    pub reason: String,
    /// The `Status` details' kind and name (`namespaces`, `nope` for a namespace that does not exist).
    pub details: Option<(String, String)>,
}

impl ApiFail {
    fn from_kube(what: &str, e: kube::Error) -> ApiFail {
        match e {
            kube::Error::Api(s) => ApiFail {
                code: Some(s.code),
                message: format!(
                    "{what}: {}",
                    if s.message.is_empty() {
                        &s.reason
                    } else {
                        &s.message
                    }
                ),
                reason: s.reason.clone(),
                details: s.details.as_ref().map(|d| (d.kind.clone(), d.name.clone())),
            },
            other => ApiFail::plain(format!("{what}: {}", crate::cluster::error_chain(&other))),
        }
    }

    /// A request that could not even be built.
    pub(crate) fn local(what: &str, e: &dyn std::error::Error) -> ApiFail {
        ApiFail::plain(format!("{what}: {e}"))
    }

    /// A failure without an answer of the server.
    pub(crate) fn plain(message: String) -> ApiFail {
        ApiFail {
            code: None,
            message,
            reason: String::new(),
            details: None,
        }
    }

    fn timeout(what: &str, after: Duration) -> ApiFail {
        ApiFail::plain(format!(
            "{what}: no answer within {}",
            iterion_driver::fmt_duration(after)
        ))
    }

    /// The driver error for a failure outside the cases a caller handles itself, in Kubernetes words: a
    /// namespace that does not exist, a verb the credentials may not use (with the RBAC rule to add) and refused
    /// credentials make the driver unavailable; any other answer is an API failure with its status.
    pub fn into_error(self) -> Error {
        let unavailable = |reason: String| Error::Unavailable {
            driver: "kubernetes".into(),
            reason,
        };
        match (self.code, self.reason.as_str(), &self.details) {
            (Some(404), _, Some((kind, ns))) if kind == "namespaces" => unavailable(format!(
                "namespace {ns} does not exist ({}); create it (kubectl create namespace {ns}) or set \
                 ITERION_SANDBOX_K8S_NAMESPACE to an existing one",
                self.message
            )),
            (Some(403), _, _) | (_, "Forbidden", _) => unavailable(match forbidden_rule(&self.message) {
                Some(rule) => format!(
                    "{}; add this rule to the Role bound to these credentials: {rule} (the shipped Role in \
                     deploy/kubernetes has every rule the driver needs)",
                    self.message
                ),
                None => format!("{}; apply the shipped Role in deploy/kubernetes", self.message),
            }),
            (Some(401), _, _) => unavailable(format!(
                "the Kubernetes API server refused the credentials ({}); check the kubeconfig user or the \
                 service account token",
                self.message
            )),
            (status, _, _) => Error::Engine {
                status,
                message: format!("Kubernetes API: {}", self.message),
            },
        }
    }
}

/// The namespace-bound API of one driver.
#[derive(Clone)]
pub(crate) struct Kapi {
    pub client: Client,
    pub namespace: String,
    /// Bound of one plain request.
    pub request_timeout: Duration,
    /// Interval of the "gone yet?" polls and of watch re-establishment.
    pub poll: Duration,
    /// How long cleanup waits for a deleted pod to disappear.
    pub delete_wait: Duration,
}

impl std::fmt::Debug for Kapi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kapi")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Kapi {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn policies(&self) -> Api<NetworkPolicy> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(crate) async fn bounded<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ApiFail> {
        match tokio::time::timeout(self.request_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ApiFail::from_kube(what, e)),
            Err(_) => Err(ApiFail::timeout(what, self.request_timeout)),
        }
    }

    /// `POST` the pod.
    pub async fn create_pod(&self, pod: &Pod) -> Result<(), ApiFail> {
        let what = "create pod";
        self.bounded(what, self.pods().create(&PostParams::default(), pod))
            .await
            .map(|_| ())
    }

    /// `POST` the NetworkPolicy.
    pub async fn create_policy(&self, np: &NetworkPolicy) -> Result<(), ApiFail> {
        let what = "create networkpolicy";
        self.bounded(what, self.policies().create(&PostParams::default(), np))
            .await
            .map(|_| ())
    }

    /// The pod as the server sent it (plain JSON, never decoded into a typed pod: a field the typed model does
    /// not expect cannot hide the pod), `None` when it does not exist.
    pub async fn get_pod(&self, name: &str) -> Result<Option<serde_json::Value>, ApiFail> {
        let what = "get pod";
        let path = format!("/api/v1/namespaces/{}/pods", self.namespace);
        let req = kube::core::Request::new(path)
            .get(name, &kube::api::GetParams::default())
            .map_err(|e| ApiFail::local(what, &e))?;
        match self.bounded(what, self.client.request_text(req)).await {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| ApiFail::plain(format!("{what}: the answer is not JSON: {e}"))),
            Err(f) if f.code == Some(404) => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// The labels and annotations of the NetworkPolicy `name`, `None` when it does not exist.
    pub async fn policy_meta(&self, name: &str) -> Result<Option<Meta>, ApiFail> {
        let np = self
            .bounded("get networkpolicy", self.policies().get_opt(name))
            .await?;
        Ok(np.map(|n| {
            (
                n.metadata.labels.unwrap_or_default(),
                n.metadata.annotations.unwrap_or_default(),
            )
        }))
    }

    /// The labels and annotations of the pod `name`, `None` when it does not exist.
    pub async fn pod_meta(&self, name: &str) -> Result<Option<Meta>, ApiFail> {
        let pod = self.bounded("get pod", self.pods().get_opt(name)).await?;
        Ok(pod.map(|p| {
            (
                p.metadata.labels.unwrap_or_default(),
                p.metadata.annotations.unwrap_or_default(),
            )
        }))
    }

    fn delete_params() -> DeleteParams {
        DeleteParams {
            grace_period_seconds: Some(5),
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        }
    }

    /// `DELETE` the pod (grace 5 s, background propagation); absent is success.
    pub async fn delete_pod(&self, name: &str) -> Result<(), ApiFail> {
        match self
            .bounded("delete pod", self.pods().delete(name, &Self::delete_params()))
            .await
        {
            Ok(_) => Ok(()),
            Err(f) if f.code == Some(404) => Ok(()),
            Err(f) => Err(f),
        }
    }

    /// `DELETE` the NetworkPolicy; absent is success.
    pub async fn delete_policy(&self, name: &str) -> Result<(), ApiFail> {
        match self
            .bounded(
                "delete networkpolicy",
                self.policies().delete(name, &Self::delete_params()),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(f) if f.code == Some(404) => Ok(()),
            Err(f) => Err(f),
        }
    }

    /// Polls until the pod is gone; `false` when it is still there after [`Kapi::delete_wait`].
    pub async fn wait_gone(&self, name: &str) -> bool {
        let deadline = Instant::now() + self.delete_wait;
        loop {
            if let Ok(None) = self.get_pod(name).await {
                return true;
            }
            if Instant::now() + self.poll > deadline {
                return false;
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Removes what a start created: the pod, then (once the pod is gone) its NetworkPolicy. Returns whether
    /// the pod is gone and the errors; a pod that does not go keeps its NetworkPolicy (07 §11).
    pub async fn teardown(&self, name: &str, policy: bool) -> (bool, Vec<String>) {
        self.teardown_signalled(name, policy, || {}).await
    }

    /// [`Kapi::teardown`], calling `deleted` once the pod's `DELETE` was answered.
    pub async fn teardown_signalled(
        &self,
        name: &str,
        policy: bool,
        deleted: impl FnOnce(),
    ) -> (bool, Vec<String>) {
        let mut errors = Vec::new();
        if let Err(f) = self.delete_pod(name).await {
            errors.push(f.message);
        }
        deleted();
        let gone = self.wait_gone(name).await;
        if !gone {
            errors.push(format!(
                "pod {name} was still present {} after its deletion{}",
                iterion_driver::fmt_duration(self.delete_wait),
                if policy {
                    "; its NetworkPolicy is left in place until the pod goes"
                } else {
                    ""
                }
            ));
            return (false, errors);
        }
        if policy && let Err(f) = self.delete_policy(name).await {
            errors.push(f.message);
        }
        (true, errors)
    }

    /// `container exited immediately with code <n>: <last 20 log lines>; …` — the log lines of the container
    /// inserted into the verdict when the API server gives them (07 §10).
    pub(crate) async fn with_log_tail(&self, name: &str, verdict: &str) -> String {
        let lp = LogParams {
            container: Some(crate::names::CONTAINER_NAME.to_string()),
            tail_lines: Some(20),
            ..LogParams::default()
        };
        let logs = self.bounded("get pod log", self.pods().logs(name, &lp)).await;
        match (logs, verdict.split_once(';')) {
            (Ok(text), Some((head, rest))) if !text.trim().is_empty() => {
                format!("{head}: {};{rest}", text.trim_end())
            }
            _ => verdict.to_string(),
        }
    }
}

/// The RBAC rule a `Forbidden` message asks for: `User "u" cannot create resource "pods" in API group "" in the
/// namespace "ns"` → `{apiGroups: [""], resources: ["pods"], verbs: ["create"]}` (a subresource as
/// `pods/exec`).
fn forbidden_rule(message: &str) -> Option<String> {
    let quoted_after = |key: &str| -> Option<String> {
        let rest = &message[message.find(key)? + key.len()..];
        let rest = rest.strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_string())
    };
    let verb = message
        .split(" cannot ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .to_string();
    let resource = quoted_after("resource ")?;
    let group = quoted_after("in API group ").unwrap_or_default();
    let resource = match message.find("subresource ") {
        Some(_) => format!("{resource}/{}", quoted_after("subresource ")?),
        None => resource,
    };
    Some(format!(
        "{{apiGroups: [\"{group}\"], resources: [\"{resource}\"], verbs: [\"{verb}\"]}}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(code: u16, reason: &str, message: &str, details: Option<(&str, &str)>) -> ApiFail {
        ApiFail {
            code: Some(code),
            message: message.into(),
            reason: reason.into(),
            details: details.map(|(k, n)| (k.into(), n.into())),
        }
    }

    #[test]
    fn api_failures_in_kubernetes_words() {
        // As a 1.36 API server answers a create in a namespace that does not exist.
        let e = fail(
            404,
            "NotFound",
            "create pod: namespaces \"nope\" not found",
            Some(("namespaces", "nope")),
        )
        .into_error();
        let text = e.to_string();
        assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
        assert!(
            text.contains("namespace nope does not exist") && !text.contains("container engine"),
            "{text}"
        );
        // A pod that is not there is not a missing namespace.
        let e = fail(
            404,
            "NotFound",
            "get pod: pods \"x\" not found",
            Some(("pods", "x")),
        )
        .into_error();
        assert!(
            matches!(
                e,
                Error::Engine {
                    status: Some(404),
                    ..
                }
            ),
            "{e:?}"
        );
        let forbidden = "create pod: pods is forbidden: User \"limited\" cannot create resource \"pods\" in API \
                         group \"\" in the namespace \"default\"";
        let text = fail(403, "Forbidden", forbidden, Some(("pods", "")))
            .into_error()
            .to_string();
        assert!(
            text.contains(r#"{apiGroups: [""], resources: ["pods"], verbs: ["create"]}"#),
            "{text}"
        );
        let exec = "pods \"p\" is forbidden: User \"u\" cannot create resource \"pods\" in API group \"\" \
                    in the namespace \"ns\": subresource \"exec\"";
        assert_eq!(
            forbidden_rule(exec).as_deref(),
            Some(r#"{apiGroups: [""], resources: ["pods/exec"], verbs: ["create"]}"#)
        );
        let np = "User \"u\" cannot delete resource \"networkpolicies\" in API group \"networking.k8s.io\" in \
                  the namespace \"ns\"";
        assert_eq!(
            forbidden_rule(np).as_deref(),
            Some(r#"{apiGroups: ["networking.k8s.io"], resources: ["networkpolicies"], verbs: ["delete"]}"#)
        );
        assert_eq!(forbidden_rule("something else"), None);
    }
}
