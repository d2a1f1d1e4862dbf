//! The engine-backed fake API server at the HTTP level, as any client sees it: the refusals a real API server
//! gives (`404`, `405`, `409` as `Status` objects), NetworkPolicies stored and listed by label, and a pod's life
//! from `POST` to the object's disappearance with its engine container. Engine rules apply (the fake realises
//! pods through the engine).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use iterion_test_support::k8s_fake::EngineFake;
use serde_json::{Value, json};

/// One request over a fresh connection (`Connection: close`): the status code and the body as JSON (or text
/// in a JSON string).
fn call(url: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    call_with(url, method, path, body, "")
}

/// [`call`] with extra header lines (each ending in `\r\n`).
fn call_with(url: &str, method: &str, path: &str, body: Option<&Value>, headers: &str) -> (u16, Value) {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let body = body.map(Value::to_string).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         {headers}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    // The fake keeps connections alive: read the head, then exactly content-length bytes.
    loop {
        let n = s.read(&mut buf).expect("read");
        assert!(
            n > 0,
            "connection closed before a full answer: {:?}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw).to_string();
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse().ok())
                .expect("content-length");
            if rest.len() >= len {
                let code = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .expect("status");
                let body = &rest[..len];
                return (code, serde_json::from_str(body).unwrap_or_else(|_| json!(body)));
            }
        }
    }
}

fn started_fake() -> Option<(tokio::runtime::Runtime, EngineFake)> {
    if !iterion_test_support::engine_required("k8s_fake") {
        return None;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = rt.block_on(EngineFake::start("ns1")).expect("fake");
    Some((rt, fake))
}

#[test]
fn refusals_are_kubernetes_status_objects_and_unknown_requests_are_recorded() {
    let Some((rt, fake)) = started_fake() else {
        return;
    };
    let url = fake.url();
    let (code, v) = call(&url, "GET", "/version", None);
    assert_eq!(
        (code, v["major"].as_str(), v["minor"].as_str()),
        (200, Some("1"), Some("31"))
    );
    let (code, v) = call(&url, "GET", "/api/v1/namespaces/ns1/pods/absent", None);
    assert_eq!(
        (code, v["kind"].as_str(), v["reason"].as_str()),
        (404, Some("Status"), Some("NotFound"))
    );
    assert_eq!(v["message"], "pods \"absent\" not found");
    let (code, v) = call(
        &url,
        "PUT",
        "/api/v1/namespaces/ns1/pods/absent",
        Some(&json!({})),
    );
    assert_eq!((code, v["reason"].as_str()), (405, Some("MethodNotAllowed")));
    let (code, _) = call(&url, "GET", "/apis/apps/v1/namespaces/ns1/deployments", None);
    assert_eq!(code, 404);
    let (code, v) = call(
        &url,
        "GET",
        "/api/v1/namespaces/ns1/pods/absent/exec?command=true",
        None,
    );
    assert_eq!((code, v["reason"].as_str()), (404, Some("NotFound")));
    assert_eq!(
        fake.unknown_requests(),
        vec![
            "PUT /api/v1/namespaces/ns1/pods/absent".to_string(),
            "GET /apis/apps/v1/namespaces/ns1/deployments".to_string()
        ]
    );
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "ns1"}}});
    let (code, v) = call(
        &url,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        Some(&review),
    );
    assert_eq!((code, v["status"]["allowed"].as_bool()), (201, Some(true)));
    assert_eq!(fake.requests().len(), 6);
    assert!(rt.block_on(fake.shutdown()).is_empty());
}

#[test]
fn networkpolicies_are_stored_listed_by_label_and_deleted() {
    let Some((rt, fake)) = started_fake() else {
        return;
    };
    let url = fake.url();
    let base = "/apis/networking.k8s.io/v1/namespaces/ns1/networkpolicies";
    let np = |name: &str, managed: &str| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": name, "labels": {"iterion.io/managed": managed}},
               "spec": {"podSelector": {}, "policyTypes": ["Egress"]}})
    };
    let (code, v) = call(&url, "POST", base, Some(&np("a", "true")));
    assert_eq!(code, 201);
    assert_eq!(v["metadata"]["namespace"], "ns1");
    assert!(v["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert_eq!(call(&url, "POST", base, Some(&np("b", "false"))).0, 201);
    let (code, v) = call(&url, "POST", base, Some(&np("a", "true")));
    assert_eq!((code, v["reason"].as_str()), (409, Some("AlreadyExists")));
    let (code, v) = call(
        &url,
        "GET",
        &format!("{base}?labelSelector=iterion.io%2Fmanaged%3Dtrue"),
        None,
    );
    assert_eq!((code, v["kind"].as_str()), (200, Some("NetworkPolicyList")));
    let names: Vec<&str> = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["a"]);
    // Another namespace sees none of them.
    let (_, v) = call(
        &url,
        "GET",
        "/apis/networking.k8s.io/v1/namespaces/other/networkpolicies",
        None,
    );
    assert_eq!(v["items"], json!([]));
    assert_eq!(call(&url, "DELETE", &format!("{base}/a"), None).0, 200);
    assert_eq!(call(&url, "GET", &format!("{base}/a"), None).0, 404);
    assert_eq!(call(&url, "DELETE", &format!("{base}/a"), None).0, 404);
    assert!(fake.unknown_requests().is_empty());
    assert!(rt.block_on(fake.shutdown()).is_empty());
}

#[test]
fn a_pod_becomes_a_running_container_and_goes_with_it() {
    let Some((rt, fake)) = started_fake() else {
        return;
    };
    let image = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let url = fake.url();
    let pods = "/api/v1/namespaces/ns1/pods";
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p1", "labels": {"iterion.io/managed": "true"}},
        "spec": {"restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000},
            "containers": [{"name": "workload", "image": image, "command": ["sleep", "infinity"],
                "workingDir": "/workspace", "env": [{"name": "A", "value": "1"}],
                "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}]}],
            "volumes": [{"name": "workspace", "emptyDir": {}}]}});
    let (code, v) = call(&url, "POST", pods, Some(&pod));
    assert_eq!((code, v["status"]["phase"].as_str()), (201, Some("Pending")));
    let (code, v) = call(&url, "POST", pods, Some(&pod));
    assert_eq!((code, v["reason"].as_str()), (409, Some("AlreadyExists")));
    let ready = |v: &Value| {
        v["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = loop {
        let (code, v) = call(&url, "GET", &format!("{pods}/p1"), None);
        assert_eq!(code, 200);
        if ready(&v) {
            break v;
        }
        assert!(Instant::now() < deadline, "the pod never became Ready: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(running["status"]["phase"], "Running");
    let containers = fake.containers();
    assert_eq!(containers.len(), 1);
    assert_eq!(
        running["status"]["containerStatuses"][0]["containerID"],
        format!("docker://{}", containers[0])
    );
    let (code, v) = call(
        &url,
        "GET",
        &format!("{pods}?labelSelector=iterion.io%2Fmanaged%3Dtrue"),
        None,
    );
    assert_eq!((code, v["items"].as_array().map(Vec::len)), (200, Some(1)));
    let (code, log) = call(
        &url,
        "GET",
        &format!("{pods}/p1/log?container=workload&tailLines=20"),
        None,
    );
    assert_eq!((code, log), (200, json!("")), "sleep infinity writes nothing");
    let (code, v) = call(&url, "GET", &format!("{pods}/p1/log?container=other"), None);
    assert_eq!((code, v["reason"].as_str()), (400, Some("BadRequest")));
    // An exec offering only the v4 subprotocol is refused before any upgrade: it could not close stdin.
    let v4 = "upgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
              sec-websocket-protocol: v4.channel.k8s.io\r\n";
    let exec = format!("{pods}/p1/exec?command=true&container=workload&stdout=true");
    let (code, v) = call_with(&url, "GET", &exec, None, v4);
    assert_eq!(code, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("v5.channel.k8s.io")),
        "{v}"
    );
    let (code, v) = call(
        &url,
        "DELETE",
        &format!("{pods}/p1"),
        Some(&json!({"gracePeriodSeconds": 5})),
    );
    assert_eq!(code, 200);
    assert!(v["metadata"]["deletionTimestamp"].is_string(), "{v}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while call(&url, "GET", &format!("{pods}/p1"), None).0 != 404 {
        assert!(Instant::now() < deadline, "the deleted pod never went");
        std::thread::sleep(Duration::from_millis(100));
    }
    let socket = iterion_test_support::engine_socket().expect("socket");
    let r = iterion_test_support::docker_http::request(
        &socket,
        "GET",
        &format!("/containers/{}/json", containers[0]),
        None,
        &[],
        Duration::from_secs(10),
    )
    .expect("engine");
    assert_eq!(r.status, 404, "the pod's container outlived the pod");
    assert!(fake.unknown_requests().is_empty());
    assert!(rt.block_on(fake.shutdown()).is_empty());
}
