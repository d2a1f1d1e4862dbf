//! The wait until a new pod is `Ready` (07 §10): a watch on its name, read line by line as plain JSON, re-established
//! when it ends, with a `GET` of the pod after a failed watch.
//!
//! Nothing on the way is silent: an event that cannot be decoded, an `ERROR` event carrying a `Status` and a stream
//! that breaks are each logged and counted; [`WATCH_FAILURE_LIMIT`] of them in a row, with no decoded event in
//! between, end the wait with a failure that names the last one.

use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt};
use iterion_driver::{Error, EventSink, LogLevel, SetupPhase};
use serde_json::Value;

use crate::kapi::{ApiFail, Kapi};
use crate::status::{Readiness, readiness};

/// How long an `ImagePullBackOff` for an unrecognised reason is tolerated (07 §10).
const PULL_BACKOFF_LIMIT: Duration = Duration::from_secs(300);

/// Failed watches and undecodable events in a row that end the wait.
pub(crate) const WATCH_FAILURE_LIMIT: u32 = 5;

/// How a watch line starts the verdict of a container that ended at start.
const EXITED: &str = "container exited immediately with code ";

/// One line of a watch stream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Line {
    /// `ADDED` or `MODIFIED`: the pod as it is now.
    Pod(Value),
    /// `DELETED`.
    Deleted,
    /// `BOOKMARK`: only a resource version.
    Bookmark(Option<String>),
    /// `ERROR`: the `Status` the server sent instead of an object.
    Status {
        /// Its `code` (`410` for an expired resource version).
        code: Option<u64>,
        /// `reason: message`.
        text: String,
    },
    /// Not a watch event: what is wrong with it.
    Undecodable(String),
}

/// Classifies one line of a watch stream (blank lines are skipped by the caller).
pub(crate) fn parse_line(line: &str) -> Line {
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return Line::Undecodable(format!("{e}: {}", excerpt(line))),
    };
    let object = &v["object"];
    match v["type"].as_str() {
        Some("ADDED" | "MODIFIED") if object.is_object() => Line::Pod(object.clone()),
        Some("DELETED") => Line::Deleted,
        Some("BOOKMARK") => Line::Bookmark(resource_version(object)),
        Some("ERROR") => Line::Status {
            code: object["code"].as_u64(),
            text: [object["reason"].as_str(), object["message"].as_str()]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(": "),
        },
        // A bare Status (an error answered inside the stream without an event around it).
        None if v["kind"] == "Status" => Line::Status {
            code: v["code"].as_u64(),
            text: v["message"].as_str().unwrap_or_default().to_string(),
        },
        _ => Line::Undecodable(format!("not a watch event: {}", excerpt(line))),
    }
}

fn resource_version(object: &Value) -> Option<String> {
    object["metadata"]["resourceVersion"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The first 200 characters of a line, for a message.
fn excerpt(line: &str) -> String {
    let mut s: String = line.chars().take(200).collect();
    if s.len() < line.len() {
        s.push('…');
    }
    s
}

/// Where the wait stands: the last state seen, the failures in a row and the resource version to resume from.
struct Waiter<'a> {
    api: &'a Kapi,
    name: &'a str,
    image: &'a str,
    events: &'a EventSink,
    /// The last condition or waiting message, for the timeout's text.
    last: String,
    /// Failures since the last decoded event.
    in_a_row: u32,
    /// Failures of the whole wait.
    total: u32,
    /// The last failure, named by the timeout and by the failure at the bound.
    last_failure: Option<String>,
    /// Resume point of the next watch (`0`: the current state first).
    rv: String,
    backoff_since: Option<Instant>,
}

/// What a verdict means for the wait.
enum Step {
    Continue,
    Done(Result<(), Error>),
}

impl Waiter<'_> {
    /// Logs and counts one failure; `Err` once [`WATCH_FAILURE_LIMIT`] are in a row.
    fn failed(&mut self, what: String) -> Result<(), Error> {
        self.in_a_row += 1;
        self.total += 1;
        self.events.log(
            LogLevel::Warn,
            format!(
                "kubernetes: waiting for pod {}: {what} ({} in a row, {} in all)",
                self.name, self.in_a_row, self.total
            ),
        );
        self.last_failure = Some(what.clone());
        if self.in_a_row >= WATCH_FAILURE_LIMIT {
            return Err(Error::StartFailed {
                reason: format!(
                    "pod {}: the watch of its readiness failed {} times in a row; last: {what}",
                    self.name, self.in_a_row
                ),
                hint: Some(
                    "check the API server (and any proxy in front of it) with: kubectl get pod --watch"
                        .into(),
                ),
            });
        }
        Ok(())
    }

    fn decoded(&mut self) {
        self.in_a_row = 0;
    }

    /// The text the timeout appends: the last state, and the last failure when there was one.
    fn subject(&self) -> String {
        match &self.last_failure {
            Some(f) => format!(
                "pod {}: {}; {} watch failures, the last: {f}",
                self.name, self.last, self.total
            ),
            None => format!("pod {}: {}", self.name, self.last),
        }
    }

    async fn judge(&mut self, pod: &Value) -> Step {
        if let Some(rv) = resource_version(pod) {
            self.rv = rv;
        }
        match readiness(pod) {
            Readiness::Ready => Step::Done(Ok(())),
            Readiness::Waiting(m) => {
                self.backoff_since = None;
                self.last = m;
                Step::Continue
            }
            Readiness::PullBackOff(m) => {
                let since = *self.backoff_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= PULL_BACKOFF_LIMIT {
                    return Step::Done(Err(Error::ImagePull {
                        image: self.image.to_string(),
                        reason: m,
                    }));
                }
                self.last = m;
                Step::Continue
            }
            Readiness::StartFailed(m) if m.starts_with(EXITED) => Step::Done(Err(Error::StartFailed {
                reason: self.api.with_log_tail(self.name, &m).await,
                hint: None,
            })),
            Readiness::Unreadable(m) => match self.failed(format!("the pod object could not be read: {m}")) {
                Ok(()) => Step::Continue,
                Err(e) => Step::Done(Err(e)),
            },
            other => Step::Done(Err(verdict_error(other, self.image))),
        }
    }

    fn deleted(&self) -> Error {
        Error::StartFailed {
            reason: format!("pod {} was deleted while it was starting", self.name),
            hint: None,
        }
    }

    /// One watch from [`Waiter::rv`] until it ends (the server's timeout, a break, an `ERROR` event); `Err` at the
    /// failure bound.
    async fn watch_once(&mut self) -> Result<Step, Error> {
        let mut lines = match self.api.watch_pod_lines(self.name, &self.rv).await {
            Ok(l) => l,
            Err(f) => {
                self.failed(format!("opening the watch: {}", f.message))?;
                return Ok(Step::Continue);
            }
        };
        loop {
            let line = match lines.next().await {
                None => return Ok(Step::Continue),
                Some(Ok(line)) => line,
                Some(Err(e)) => {
                    self.failed(format!("the watch stream broke: {e}"))?;
                    return Ok(Step::Continue);
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            match parse_line(&line) {
                Line::Pod(pod) => {
                    self.decoded();
                    if let Step::Done(r) = self.judge(&pod).await {
                        return Ok(Step::Done(r));
                    }
                }
                Line::Deleted => return Ok(Step::Done(Err(self.deleted()))),
                Line::Bookmark(rv) => {
                    self.decoded();
                    if let Some(rv) = rv {
                        self.rv = rv;
                    }
                }
                Line::Status {
                    code: Some(410),
                    text,
                } => {
                    // The resume point expired: start over from the current state (not a failure).
                    self.events.log(
                        LogLevel::Info,
                        format!(
                            "kubernetes: the watch of pod {} expired ({text}); watching again",
                            self.name
                        ),
                    );
                    self.rv = "0".into();
                    return Ok(Step::Continue);
                }
                Line::Status { code, text } => {
                    let code = code.map(|c| format!("{c} ")).unwrap_or_default();
                    self.failed(format!("the watch returned an error: {code}{text}"))?;
                    self.rv = "0".into();
                    return Ok(Step::Continue);
                }
                Line::Undecodable(why) => self.failed(format!("an event could not be decoded: {why}"))?,
            }
        }
    }

    async fn run(&mut self) -> Result<(), Error> {
        loop {
            let failures = self.total;
            if let Step::Done(r) = self.watch_once().await? {
                return r;
            }
            if self.total > failures {
                // The watch failed: look at the pod itself before watching again.
                match self.api.get_pod(self.name).await {
                    Ok(Some(pod)) => {
                        if let Step::Done(r) = self.judge(&pod).await {
                            return r;
                        }
                    }
                    Ok(None) => return Err(self.deleted()),
                    Err(f) => self.failed(format!("reading the pod: {}", f.message))?,
                }
                tokio::time::sleep(self.api.poll).await;
            }
        }
    }
}

/// Waits until the pod is `Ready`, bounded by `bound` (07 §10). Watch trouble is logged to `events`.
pub(crate) async fn wait_ready(
    api: &Kapi,
    name: &str,
    image: &str,
    bound: Duration,
    events: &EventSink,
) -> Result<(), Error> {
    let mut w = Waiter {
        api,
        name,
        image,
        events,
        last: String::from("the pod was not observed yet"),
        in_a_row: 0,
        total: 0,
        last_failure: None,
        rv: "0".into(),
        backoff_since: None,
    };
    let watched = tokio::time::timeout(bound, w.run()).await;
    match watched {
        Ok(r) => r,
        Err(_) => Err(Error::SetupTimeout {
            phase: SetupPhase::PodReady,
            after: bound,
            subject: Some(w.subject()),
        }),
    }
}

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
        Readiness::Ready | Readiness::Waiting(_) | Readiness::Unreadable(_) => Error::StartFailed {
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

/// The lines of a watch stream.
pub(crate) type Lines = futures::stream::BoxStream<'static, std::io::Result<String>>;

impl Kapi {
    /// Opens a watch of the pod `name` from resource version `rv` and yields its lines. The request asks for an
    /// uncompressed stream (servers may compress watch streams one member per event) and for no bookmarks: the
    /// wait does not need them, and an API server whose storage cannot report watch progress (etcd without
    /// progress notifications) answers a watch that allows them with an `ERROR` event only, never the pod.
    pub(crate) async fn watch_pod_lines(&self, name: &str, rv: &str) -> Result<Lines, ApiFail> {
        let wp = kube::api::WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290)
            .disable_bookmarks();
        let path = format!("/api/v1/namespaces/{}/pods", self.namespace);
        let mut req = kube::core::Request::new(path)
            .watch(&wp, rv)
            .map_err(|e| ApiFail::local("watch pod", &e))?;
        req.headers_mut().insert(
            http::header::ACCEPT_ENCODING,
            http::HeaderValue::from_static("identity"),
        );
        let open = self.client.request_stream(req);
        let reader = self.bounded("watch pod", open).await?;
        Ok(reader.lines().boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn watch_lines() {
        let pod =
            json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "resourceVersion": "7"}});
        let added = json!({"type": "ADDED", "object": pod}).to_string();
        assert_eq!(parse_line(&added), Line::Pod(pod.clone()));
        let modified = json!({"type": "MODIFIED", "object": pod}).to_string();
        assert_eq!(parse_line(&modified), Line::Pod(pod.clone()));
        assert_eq!(
            parse_line(&json!({"type": "DELETED", "object": pod}).to_string()),
            Line::Deleted
        );
        let bookmark = json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}}}});
        assert_eq!(
            parse_line(&bookmark.to_string()),
            Line::Bookmark(Some("12".into()))
        );
        let expired = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "too old resource version: 1 (5)", "reason": "Expired", "code": 410}});
        assert_eq!(
            parse_line(&expired.to_string()),
            Line::Status {
                code: Some(410),
                text: "Expired: too old resource version: 1 (5)".into()
            }
        );
        assert!(matches!(
            parse_line("{\"type\":\"ADDED\",\"obj"),
            Line::Undecodable(_)
        ));
        assert!(matches!(parse_line("[1,2]"), Line::Undecodable(_)));
        assert!(matches!(
            parse_line(&json!({"type": "ADDED", "object": "x"}).to_string()),
            Line::Undecodable(_)
        ));
    }

    #[test]
    fn registry_of_an_image() {
        assert_eq!(registry_of("busybox"), "docker.io");
        assert_eq!(registry_of("library/busybox:1"), "docker.io");
        assert_eq!(registry_of("ghcr.io/o/i:1"), "ghcr.io");
        assert_eq!(registry_of("localhost/i"), "localhost");
        assert_eq!(registry_of("host:5000/i"), "host:5000");
    }
}
