//! The API calls of the driver (07 §10, §11): create, watch until ready, delete and wait until gone. Every
//! kube error is translated here; nothing of kube leaves this module except through [`Kapi`]'s methods.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use iterion_driver::{Error, SetupPhase};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::api::{Api, DeleteParams, LogParams, PostParams, PropagationPolicy, WatchEvent, WatchParams};

use crate::status::{Readiness, readiness};

/// How long an `ImagePullBackOff` for an unrecognised reason is tolerated (07 §10).
const PULL_BACKOFF_LIMIT: Duration = Duration::from_secs(300);

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

    async fn bounded<T>(
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

    /// The pod as JSON, `None` when it does not exist.
    pub async fn get_pod(&self, name: &str) -> Result<Option<serde_json::Value>, ApiFail> {
        let pod = self.bounded("get pod", self.pods().get_opt(name)).await?;
        Ok(pod.map(|p| serde_json::to_value(p).unwrap_or_default()))
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
        let mut errors = Vec::new();
        if let Err(f) = self.delete_pod(name).await {
            errors.push(f.message);
        }
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
    async fn with_log_tail(&self, name: &str, verdict: &str) -> String {
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

    /// Waits until the pod is `Ready`, bounded by `bound` (07 §10), with a watch on its name that is
    /// re-established when it ends.
    pub async fn wait_ready(&self, name: &str, image: &str, bound: Duration) -> Result<(), Error> {
        let mut last = String::from("the pod was not observed yet");
        let watched = tokio::time::timeout(bound, self.watch_ready(name, image, &mut last)).await;
        match watched {
            Ok(r) => r,
            Err(_) => Err(Error::SetupTimeout {
                phase: SetupPhase::PodReady,
                after: bound,
                subject: Some(format!("pod {name}: {last}")),
            }),
        }
    }

    async fn watch_ready(&self, name: &str, image: &str, last: &mut String) -> Result<(), Error> {
        let mut backoff_since: Option<Instant> = None;
        loop {
            let wp = WatchParams::default()
                .fields(&format!("metadata.name={name}"))
                .timeout(290);
            let stream = match self.pods().watch(&wp, "0").await {
                Ok(s) => s,
                Err(e) => {
                    *last = ApiFail::from_kube("watch pod", e).message;
                    tokio::time::sleep(self.poll).await;
                    continue;
                }
            };
            let mut stream = stream.boxed();
            while let Ok(Some(event)) = stream.try_next().await {
                let pod = match event {
                    WatchEvent::Added(p) | WatchEvent::Modified(p) => p,
                    WatchEvent::Deleted(_) => {
                        return Err(Error::StartFailed {
                            reason: format!("pod {name} was deleted while it was starting"),
                            hint: None,
                        });
                    }
                    WatchEvent::Bookmark(_) | WatchEvent::Error(_) => continue,
                };
                let json = serde_json::to_value(&pod).unwrap_or_default();
                match readiness(&json) {
                    Readiness::Ready => return Ok(()),
                    Readiness::Waiting(m) => {
                        backoff_since = None;
                        *last = m;
                    }
                    Readiness::PullBackOff(m) => {
                        let since = *backoff_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= PULL_BACKOFF_LIMIT {
                            return Err(Error::ImagePull {
                                image: image.to_string(),
                                reason: m,
                            });
                        }
                        *last = m;
                    }
                    Readiness::StartFailed(m) if m.starts_with(EXITED) => {
                        return Err(Error::StartFailed {
                            reason: self.with_log_tail(name, &m).await,
                            hint: None,
                        });
                    }
                    other => return Err(verdict_error(other, image)),
                }
            }
            tokio::time::sleep(self.poll).await;
        }
    }
}

/// How the readiness verdict of a container that ended at start begins.
const EXITED: &str = "container exited immediately with code ";

/// The driver error of a final readiness verdict.
fn verdict_error(r: Readiness, image: &str) -> Error {
    match r {
        Readiness::ImageNotFound(_) => Error::ImageNotFound {
            image: image.to_string(),
        },
        Readiness::ImageAbsent(_) => Error::ImageAbsent {
            image: image.to_string(),
        },
        Readiness::ImageAuth(_) => Error::ImageAuth {
            image: image.to_string(),
            registry: registry_of(image),
        },
        Readiness::InvalidSpec(m) => Error::InvalidSpec {
            field: "user".into(),
            reason: format!("{m}; set sandbox.user to a numeric non-root uid"),
        },
        Readiness::StartFailed(m) => Error::StartFailed {
            reason: m,
            hint: None,
        },
        Readiness::PullBackOff(m) => Error::ImagePull {
            image: image.to_string(),
            reason: m,
        },
        Readiness::Ready | Readiness::Waiting(_) => Error::StartFailed {
            reason: "internal: not a final verdict".into(),
            hint: None,
        },
    }
}

/// The registry host of an image reference (`docker.io` when the first part is not a host).
fn registry_of(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_string()
        }
        _ => "docker.io".to_string(),
    }
}
