//! `iterion run` on a cloud host (`ITERION_MODE=cloud`, off-cluster with a kubeconfig) through the
//! engine-backed fake Kubernetes API server: the tool node runs in a sibling pod (a container of the local
//! engine), writes into the copied workspace, and the run gets the workspace back — with the hostile parts of
//! the pod's archive (a link out of the workspace, writes into `.git`, into the run store) left out.
//!
//! The same tests also run against a real cluster when `ITERION_K8S_TEST_KUBECONFIG` names a kubeconfig (its
//! current context and namespace; the image `ITERION_K8S_TEST_IMAGE`, default the local test image, must be
//! present on the nodes: pods use `imagePullPolicy: Never`). Without it they say so and run against the fake
//! only; `ITERION_REQUIRE_K8S=1` makes its absence a failure.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use iterion_test_support::engine_required;
use iterion_test_support::k8s_fake::EngineFake;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.email=t@example.invalid", "-c", "user.name=t"])
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// Where the sibling pods go.
enum Cluster {
    /// The engine-backed fake API server.
    Fake(EngineFake),
    /// A real cluster (its kubeconfig).
    Real,
}

struct Cloud {
    dir: tempfile::TempDir,
    cluster: Cluster,
    kubeconfig: PathBuf,
    image: String,
    /// `ITERION_SANDBOX_PULL_POLICY` of the runs (`never` on the fake: no registry).
    pull_policy: String,
}

impl Cloud {
    fn work(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn store(&self) -> PathBuf {
        self.work().join(".iterion")
    }

    fn run(&self, work: &Path, file: &str, env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(BIN);
        c.args(["run", file, "--store-dir"])
            .arg(self.store())
            .current_dir(work)
            .env("HOME", self.dir.path().join("home"))
            .env("ITERION_MODE", "cloud")
            .env("KUBECONFIG", &self.kubeconfig)
            .env("ITERION_SANDBOX_HOST_STATE", "none")
            .env("ITERION_SANDBOX_PULL_POLICY", &self.pull_policy)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("ITERION_SANDBOX_DRIVER")
            .env_remove("ITERION_SANDBOX_DEFAULT")
            .env_remove("ITERION_SANDBOX_FLOOR")
            .env_remove("ITERION_HOME");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    fn events(&self) -> Vec<Value> {
        let runs = self.store().join("runs");
        let id = std::fs::read_dir(&runs)
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .file_name();
        std::fs::read_to_string(runs.join(id).join("events.jsonl"))
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn log(&self) -> String {
        let runs = self.store().join("runs");
        let id = std::fs::read_dir(&runs)
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .file_name();
        std::fs::read_to_string(runs.join(id).join("run.log")).unwrap_or_default()
    }
}

/// The engine-backed fake always, and a real cluster when `ITERION_K8S_TEST_KUBECONFIG` is set.
fn clusters(rt: &tokio::runtime::Runtime, test: &str) -> Vec<Cloud> {
    let fresh = || {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        dir
    };
    let mut out = Vec::new();
    let dir = fresh();
    let fake = rt.block_on(EngineFake::start("iterion-e2e")).unwrap();
    let kubeconfig = fake.write_kubeconfig(dir.path()).unwrap();
    out.push(Cloud {
        dir,
        cluster: Cluster::Fake(fake),
        kubeconfig,
        image: iterion_test_support::docker_image::TEST_IMAGE.to_string(),
        pull_policy: "never".into(),
    });
    match std::env::var("ITERION_K8S_TEST_KUBECONFIG")
        .ok()
        .filter(|v| !v.is_empty())
    {
        Some(k) => out.push(Cloud {
            dir: fresh(),
            cluster: Cluster::Real,
            kubeconfig: PathBuf::from(k),
            image: std::env::var("ITERION_K8S_TEST_IMAGE")
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| iterion_test_support::docker_image::TEST_IMAGE.to_string()),
            pull_policy: std::env::var("ITERION_K8S_TEST_PULL_POLICY")
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "missing".into()),
        }),
        None if std::env::var("ITERION_REQUIRE_K8S").as_deref() == Ok("1") => {
            panic!("{test}: ITERION_REQUIRE_K8S=1 but ITERION_K8S_TEST_KUBECONFIG is not set")
        }
        // Past the test harness's capture: visible in every run.
        None => iterion_test_support::notice(&format!(
            "notice: {test}: no real cluster (ITERION_K8S_TEST_KUBECONFIG is not set); the engine-backed fake only"
        )),
    }
    out
}

impl Cloud {
    /// The workflow text with this cluster's image.
    fn flow(&self, text: &str) -> String {
        text.replace("iterion-test/busybox:latest", &self.image)
    }

    /// After a run: no pod left (and, on the fake, no container).
    fn assert_nothing_left(self, rt: &tokio::runtime::Runtime) {
        if let Cluster::Fake(fake) = self.cluster {
            assert!(fake.pod_names("iterion-e2e").is_empty());
            let leftovers = rt.block_on(fake.shutdown());
            assert!(leftovers.is_empty(), "{leftovers:?}");
        }
    }
}

/// Runs `body` on the fake (and a real cluster when one is configured), under the engine rules.
fn on_each_cluster(test: &str, body: fn(&tokio::runtime::Runtime, Cloud)) {
    if !engine_required(test) {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().unwrap();
    let rt = rt();
    for c in clusters(&rt, test) {
        body(&rt, c);
    }
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

const FLOW: &str = r#"tool t:
  command: `cat input.txt > seen.txt && echo new > modify.txt && rm delete.txt && mkdir -p made && echo m > made/f && ln -s /etc/passwd escape && echo '[core] hooksPath = /tmp/evil' >> .git/config && mkdir -p .iterion/planted && hostname > where.txt && { test -e .iterion-data && echo leaked > leak.txt; mkdir -p .iterion-data/bin && echo evil > .iterion-data/bin/planted; echo '{}'; }`

workflow w:
  entry: t
  sandbox:
    image: "iterion-test/busybox:latest"
    user: "1000:1000"
  t -> done
"#;

#[test]
fn a_cloud_run_works_in_a_sibling_pod_and_gets_its_workspace_back() {
    on_each_cluster(
        "a_cloud_run_works_in_a_sibling_pod_and_gets_its_workspace_back",
        workspace_comes_back,
    );
}

fn workspace_comes_back(rt: &tokio::runtime::Runtime, c: Cloud) {
    let w = c.work();
    std::fs::write(w.join("flow.bot"), c.flow(FLOW)).unwrap();
    std::fs::write(w.join("input.txt"), "hello from the host\n").unwrap();
    std::fs::write(w.join("modify.txt"), "old\n").unwrap();
    std::fs::write(w.join("delete.txt"), "x\n").unwrap();
    git(&w, &["init", "-q"]);
    let git_config = std::fs::read_to_string(w.join(".git/config")).unwrap();

    // iterion's data dir (run-record key, binaries) inside the workspace: it must never reach the pod.
    let data = w.join(".iterion-data");
    let out = c.run(&w, "flow.bot", &[("ITERION_HOME", data.to_str().unwrap())]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}\nlog: {}", c.log());

    let events = c.events();
    let started = of_type(&events, "sandbox_started");
    assert_eq!(started.len(), 1, "{events:#?}");
    assert_eq!(started[0]["data"]["driver"], "kubernetes");
    let copied = of_type(&events, "sandbox_workspace_copied");
    assert_eq!(copied.len(), 1);
    assert!(
        copied[0]["data"]["files"].as_u64().unwrap() >= 4,
        "{:?}",
        copied[0]
    );
    // It ran in the pod's container, not on this host.
    let host_name = nix_hostname();
    let inside = std::fs::read_to_string(w.join("where.txt")).unwrap();
    assert_ne!(inside.trim(), host_name.trim());
    // The pod's work came back: written, modified, deleted.
    assert_eq!(
        std::fs::read_to_string(w.join("seen.txt")).unwrap(),
        "hello from the host\n"
    );
    assert_eq!(std::fs::read_to_string(w.join("modify.txt")).unwrap(), "new\n");
    assert!(!w.join("delete.txt").exists());
    assert_eq!(std::fs::read_to_string(w.join("made/f")).unwrap(), "m\n");
    // What the pod must not hand the host: a link out, git configuration, anything in the run store.
    assert!(std::fs::symlink_metadata(w.join("escape")).is_err());
    assert_eq!(
        std::fs::read_to_string(w.join(".git/config")).unwrap(),
        git_config
    );
    assert!(!c.store().join("planted").exists());
    assert!(
        data.is_dir() && !w.join("leak.txt").exists(),
        "the data dir reached the pod"
    );
    assert!(!data.join("bin/planted").exists());
    let stopped = of_type(&events, "sandbox_stopped");
    let errors = stopped[0]["data"]["errors"].to_string();
    assert!(
        errors.contains("escape"),
        "the refused link is reported: {errors}"
    );
    // Nothing left behind: the pod and its container are gone.
    c.assert_nothing_left(rt);
}

const WORKTREE_FLOW: &str = r#"tool t:
  command: `test -f .git && echo file > git-entry.txt || echo other > git-entry.txt; (git rev-parse HEAD > head.txt) 2>/dev/null; echo '{}'`

workflow w:
  entry: t
  sandbox:
    image: "iterion-test/busybox:latest"
    user: "1000:1000"
  t -> done
"#;

#[test]
fn a_linked_worktree_never_takes_its_host_git_pointer_into_the_pod() {
    on_each_cluster(
        "a_linked_worktree_never_takes_its_host_git_pointer_into_the_pod",
        worktree_pointer_stays,
    );
}

fn worktree_pointer_stays(rt: &tokio::runtime::Runtime, c: Cloud) {
    let repo = c.dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    git(&repo, &["worktree", "add", "-q", c.work().to_str().unwrap()]);
    let w = c.work();
    std::fs::write(w.join("flow.bot"), c.flow(WORKTREE_FLOW)).unwrap();
    let pointer = std::fs::read_to_string(w.join(".git")).unwrap();

    let out = c.run(&w, "flow.bot", &[]);
    assert!(
        out.status.success(),
        "stderr: {}\nlog: {}",
        String::from_utf8_lossy(&out.stderr),
        c.log()
    );
    // The `.git` file (a host path) was not copied in. Without git in the image (the local test image) the
    // fixup says so; with git, the pod's repository holds the host's HEAD.
    assert_eq!(
        std::fs::read_to_string(w.join("git-entry.txt")).unwrap(),
        "other\n"
    );
    if matches!(c.cluster, Cluster::Fake(_)) {
        assert!(
            c.log().contains("git is not available in the image"),
            "{}",
            c.log()
        );
    }
    if !c.log().contains("git is not available in the image") {
        let head = Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(&w)
            .output()
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(w.join("head.txt")).unwrap(),
            String::from_utf8_lossy(&head.stdout),
            "log: {}",
            c.log()
        );
    }
    // The host's pointer is untouched by the copy back.
    assert_eq!(std::fs::read_to_string(w.join(".git")).unwrap(), pointer);
    c.assert_nothing_left(rt);
}

fn nix_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default()
}

const ALLOWLIST_FLOW: &str = r#"tool t:
  command: `wget -q -O /dev/null http://example.com/ ; echo '{}'`

workflow w:
  entry: t
  sandbox:
    image: "iterion-test/busybox:latest"
    user: "1000:1000"
    network:
      mode: allowlist
      preset: none
      rules: ["api.github.com"]
  t -> done
"#;

/// The address this host has on the engine's default bridge: where the fake's pods reach the runner's proxy
/// (the part `ITERION_POD_IP` plays in a cluster).
fn bridge_gateway() -> String {
    let sock = iterion_test_support::engine_socket().expect("engine socket");
    let r = iterion_test_support::docker_http::request(
        &sock,
        "GET",
        "/networks/bridge",
        None,
        b"",
        std::time::Duration::from_secs(10),
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let config = &v["IPAM"]["Config"][0];
    if let Some(g) = config["Gateway"].as_str() {
        return g.to_string();
    }
    // The default bridge often lists only its subnet: the engine gives the bridge the subnet's first address.
    let subnet = config["Subnet"]
        .as_str()
        .expect("the bridge network has a subnet");
    let base: std::net::Ipv4Addr = subnet.split('/').next().unwrap().parse().unwrap();
    std::net::Ipv4Addr::from(u32::from(base) + 1).to_string()
}

#[test]
fn an_allowlist_run_confines_the_pod_to_the_runner_proxy() {
    if !engine_required("an_allowlist_run_confines_the_pod_to_the_runner_proxy") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().unwrap();
    let rt = rt();
    // The fake only: a real cluster's pods reach an off-cluster runner's proxy only with a routable address.
    let c = clusters(&rt, "an_allowlist_run_confines_the_pod_to_the_runner_proxy")
        .into_iter()
        .next()
        .unwrap();
    let w = c.work();
    std::fs::write(w.join("flow.bot"), c.flow(ALLOWLIST_FLOW)).unwrap();
    let gateway = bridge_gateway();
    let out = c.run(&w, "flow.bot", &[("ITERION_POD_IP", gateway.as_str())]);
    assert!(
        out.status.success(),
        "stderr: {}\nlog: {}",
        String::from_utf8_lossy(&out.stderr),
        c.log()
    );
    let events = c.events();
    let blocked = of_type(&events, "network_blocked");
    assert_eq!(blocked.len(), 1, "{events:#?}");
    assert_eq!(blocked[0]["node_id"], "t");
    assert_eq!(blocked[0]["data"]["host"], "example.com");
    assert_eq!(
        of_type(&events, "sandbox_started")[0]["data"]["enforced_egress"],
        true
    );
    // The proxy is advisory inside the pod; the NetworkPolicy is what enforces it, and both events agree.
    let network = &of_type(&events, "sandbox_network_started")[0]["data"];
    assert_eq!(network["placement"], "advisory");
    assert_eq!(network["enforced"], true);
    // The NetworkPolicy exists before the pod and goes only after it.
    let Cluster::Fake(fake) = &c.cluster else {
        unreachable!()
    };
    let order: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" || r.method == "DELETE")
        .filter_map(|r| {
            let what = if r.path.contains("/networkpolicies") {
                "policy"
            } else if r.path.ends_with("/pods")
                || (r.path.contains("/pods/") && r.path.split('/').count() == 7)
            {
                "pod"
            } else {
                return None;
            };
            Some(format!("{} {what}", r.method))
        })
        .collect();
    assert_eq!(
        order,
        ["POST policy", "POST pod", "DELETE pod", "DELETE policy"],
        "{:?}",
        fake.requests()
    );
    c.assert_nothing_left(&rt);
}

const NODE_POD_FLOW: &str = r#"tool first:
  command: `id -u > first.txt; echo '{}'`

tool second:
  sandbox:
    image: "iterion-test/busybox:latest"
    user: "2000:2000"
  command: `id -u > second.txt; echo '{}'`

tool third:
  command: `echo written by the run pod after the node pod > shared.txt; echo '{}'`

workflow w:
  entry: first
  sandbox:
    image: "iterion-test/busybox:latest"
    user: "1000:1000"
  first -> second
  second -> third
  third -> done
"#;

#[test]
fn a_node_with_its_own_sandbox_gets_its_own_pod() {
    on_each_cluster("a_node_with_its_own_sandbox_gets_its_own_pod", |rt, c| {
        let w = c.work();
        std::fs::write(w.join("flow.bot"), c.flow(NODE_POD_FLOW)).unwrap();
        std::fs::write(w.join("shared.txt"), "from the host\n").unwrap();
        let out = c.run(&w, "flow.bot", &[]);
        assert!(
            out.status.success(),
            "stderr: {}\nlog: {}",
            String::from_utf8_lossy(&out.stderr),
            c.log()
        );
        assert_eq!(std::fs::read_to_string(w.join("first.txt")).unwrap(), "1000\n");
        assert_eq!(std::fs::read_to_string(w.join("second.txt")).unwrap(), "2000\n");
        // The node pod still holds the host's copy of shared.txt, unchanged: its copy back (after the run
        // pod's) must not undo what the run pod wrote.
        assert_eq!(
            std::fs::read_to_string(w.join("shared.txt")).unwrap(),
            "written by the run pod after the node pod\n"
        );
        let events = c.events();
        assert_eq!(
            of_type(&events, "sandbox_workspace_copied").len(),
            2,
            "{events:#?}"
        );
        c.assert_nothing_left(rt);
    });
}
