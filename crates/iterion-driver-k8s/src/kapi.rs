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
            },
            other => ApiFail {
                code: None,
                message: format!("{what}: {}", crate::cluster::error_chain(&other)),
            },
        }
    }

    /// A request that could not even be built.
    pub(crate) fn local(what: &str, e: &dyn std::error::Error) -> ApiFail {
        ApiFail {
            code: None,
            message: format!("{what}: {e}"),
        }
    }

    fn timeout(what: &str, after: Duration) -> ApiFail {
        ApiFail {
            code: None,
            message: format!("{what}: no answer within {}", iterion_driver::fmt_duration(after)),
        }
    }

    /// The driver error for a failure outside the cases a caller handles itself.
    pub fn into_error(self) -> Error {
        Error::Engine {
            status: self.code,
            message: self.message,
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
            Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| ApiFail {
                code: None,
                message: format!("{what}: the answer is not JSON: {e}"),
            }),
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
