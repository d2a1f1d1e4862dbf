//! `iterion help environment`: every environment variable iterion reads, with its default, and the ones it
//! sets for the nodes it runs. `crates/iterion-cli/tests/environment.rs` fails when the code names an
//! `ITERION_*` variable this table does not list (the test suites' own and the Kubernetes downward-API ones
//! are listed there).

/// `(name, default, meaning)` of every variable iterion reads.
pub const READ: &[(&str, &str, &str)] = &[
    (
        "ITERION_HOME",
        "~/.iterion",
        "iterion's data dir: run stores of every project, the run-record key, installed helper binaries",
    ),
    (
        "ITERION_LOG_LEVEL",
        "info",
        "error, warn, info, debug or trace (--log-level wins)",
    ),
    (
        "ITERION_MODE",
        "local (cloud inside Kubernetes)",
        "cloud or local: the host kind (cloud runs sandboxes as sibling pods)",
    ),
    (
        "ITERION_DESKTOP",
        "unset",
        "any value: this host is a desktop (the host kind the doctor reports)",
    ),
    (
        "ITERION_MCP_AUTOLOAD",
        "1",
        "0 or false: do not read the .mcp.json next to a workflow (its MCP servers are neither known nor started)",
    ),
    (
        "ITERION_MCP_HEALTHCHECK",
        "1",
        "0 or false: do not check that the workflow's stdio MCP servers answer before the first node",
    ),
    (
        "ITERION_DEFAULT_SUPERVISOR_MODEL",
        "anthropic/claude-sonnet-4-6",
        "the model of an llm router that names none (the claude CLI gets it without the anthropic/ prefix)",
    ),
    (
        "ITERION_CLAUDE_BIN",
        "claude",
        "the Claude Code CLI that claude_code nodes run",
    ),
    (
        "ITERION_CODEX_BIN",
        "codex",
        "the codex CLI that codex nodes run (on the host only; a run that would sandbox a codex node is refused)",
    ),
    (
        "ITERION_CLAW_CONTEXT_WINDOW",
        "by model family",
        "the context window (tokens) the claw runner compacts against (passed to the runner)",
    ),
    (
        "ITERION_BIN",
        "the embedded runner",
        "an iterion binary (statically linked) to bind into containers for claw nodes",
    ),
    (
        "ITERION_RELAY_BIN",
        "the embedded relay",
        "a statically linked iterion-relay for the egress relay placement",
    ),
    (
        "ITERION_ENVELOPE_HANDSHAKE_TIMEOUT",
        "30s",
        "how long the claw runner may take to answer the launcher's hello",
    ),
    (
        "ITERION_NETPROXY_TOKEN",
        "generated",
        "the token clients of `iterion netproxy serve` must present",
    ),
    (
        "ITERION_SANDBOX_DEFAULT",
        "auto for run/resume",
        "auto or none: the mode of workflows that declare none (--sandbox wins)",
    ),
    (
        "ITERION_SANDBOX_DEFAULT_IMAGE",
        "the image of this version",
        "the image of `auto` without a devcontainer.json (--sandbox-default-image wins)",
    ),
    (
        "ITERION_SANDBOX_HOST_STATE",
        "auto",
        "auto or none: share the agent home with the sandbox (--sandbox-host-state wins)",
    ),
    (
        "ITERION_SANDBOX_FLOOR",
        "unset",
        "auto raises `none` to `auto`; inline also forbids running on the host (machine-wide floor)",
    ),
    (
        "ITERION_SANDBOX_RUNTIME_FLOOR",
        "unset",
        "an OCI runtime every container must run under (gvisor, kata or a name), whatever else asks (machine-wide floor)",
    ),
    (
        "ITERION_SANDBOX_HOST_STATE_GUARD",
        "unset",
        "1: force host_state none on every run (machine-wide floor)",
    ),
    (
        "ITERION_SANDBOX_DRIVER",
        "docker, else podman",
        "force a driver: docker, podman, kubernetes or noop (--sandbox-driver wins)",
    ),
    (
        "ITERION_SANDBOX_PULL_POLICY",
        "missing",
        "missing (pull only an absent image), always, never, auto (refresh latest, edge and untagged images)",
    ),
    (
        "ITERION_SANDBOX_BUILDER",
        "auto",
        "image builder: auto (BuildKit when Docker advertises it or the build needs it), buildkit, classic",
    ),
    (
        "ITERION_SANDBOX_REBUILD",
        "unset",
        "1: build `build:` images even when the build cache has them (run --rebuild)",
    ),
    (
        "ITERION_SANDBOX_KEEP_BUILD_IMAGES",
        "unset",
        "no longer has an effect: every built image is kept as the build cache (sandbox prune removes them)",
    ),
    ("ITERION_SANDBOX_PULL_TIMEOUT", "10m", "bound of an image pull"),
    ("ITERION_SANDBOX_BUILD_TIMEOUT", "30m", "bound of an image build"),
    (
        "ITERION_SANDBOX_START_TIMEOUT",
        "5m",
        "bound of a container start",
    ),
    (
        "ITERION_SANDBOX_POST_CREATE_TIMEOUT",
        "30m",
        "bound of the post-create commands",
    ),
    (
        "ITERION_SANDBOX_K8S_POD_READY_TIMEOUT",
        "10m",
        "bound of a sibling pod becoming ready (Kubernetes)",
    ),
    (
        "ITERION_SANDBOX_WORKSPACE_COPY_TIMEOUT",
        "15m",
        "bound of the workspace copy into a pod (Kubernetes)",
    ),
    (
        "ITERION_SANDBOX_K8S_NAMESPACE",
        "the runner's namespace",
        "the namespace of sibling pods (Kubernetes)",
    ),
    (
        "ITERION_SANDBOX_K8S_POD_OVERRIDES",
        "none",
        "JSON object of scheduling and resource settings of sibling pods: nodeSelector, tolerations, affinity, priorityClassName, runtimeClassName, imagePullSecrets, resources, workspaceSizeLimit (Kubernetes)",
    ),
    (
        "ITERION_SANDBOX_HARDENING",
        "strict",
        "strict or compat: the capabilities and no-new-privileges of containers",
    ),
    (
        "ITERION_SANDBOX_PIDS_LIMIT",
        "4096",
        "process limit of a container (0: the engine's default)",
    ),
    (
        "ITERION_SANDBOX_MEMORY_LIMIT",
        "unset",
        "memory limit of a container (bytes, with k, m or g)",
    ),
    (
        "ITERION_SANDBOX_CPUS",
        "unset",
        "CPU limit of a container (decimal CPUs)",
    ),
    (
        "ITERION_SANDBOX_OCI_RUNTIME",
        "the engine's",
        "OCI runtime of containers, e.g. runsc",
    ),
    (
        "ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS",
        "unset",
        "1: refuse a filtering policy the proxy cannot enforce",
    ),
    (
        "ITERION_SANDBOX_PROVIDER_KEYS",
        "proxy",
        "direct: give sandboxed model backends their provider key itself instead of a placeholder the proxy replaces",
    ),
    (
        "ITERION_SANDBOX_TLS_UPSTREAM_CA",
        "unset",
        "PEM file of CAs the run's proxy also trusts for upstream TLS when it inspects (a private CA)",
    ),
    (
        "ITERION_SANDBOX_SILENT_DENY",
        "the proxy's list",
        "comma-separated hosts denied without a network_blocked event",
    ),
    (
        "ITERION_SANDBOX_PREFLIGHT",
        "unset",
        "1: run the strict doctor before every run (exit 2 on a failed check)",
    ),
    (
        "ITERION_SANDBOX_DOCTOR_TIMEOUT",
        "5s",
        "bound of each doctor probe",
    ),
    (
        "DOCKER_HOST",
        "unix:///var/run/docker.sock",
        "the Docker engine's socket",
    ),
    (
        "CONTAINER_HOST",
        "the rootful or rootless Podman socket",
        "the Podman engine",
    ),
];

/// `(name, meaning)` of the variables iterion sets for the nodes it runs.
pub const SET_FOR_NODES: &[(&str, &str)] = &[
    ("ITERION_RUN_ID", "the run's id"),
    ("ITERION_NODE_ID", "the node's id"),
    (
        "ITERION_ARTIFACT_FILES_DIR",
        "where the node may write artifact files",
    ),
    (
        "HTTP_PROXY, HTTPS_PROXY, ALL_PROXY",
        "the run's egress proxy under an allowlist or denylist policy",
    ),
];

/// The text of `iterion help environment`.
pub fn text() -> String {
    let width = READ.iter().map(|(n, _, _)| n.len()).max().unwrap_or(0);
    let mut s = String::from(
        "Environment variables iterion reads (a command-line flag, where there is one, wins):\n\n",
    );
    for (name, default, meaning) in READ {
        s.push_str(&format!(
            "  {name:<width$}  {meaning}\n  {:<width$}  default: {default}\n",
            ""
        ));
    }
    s.push_str("\nSet by iterion for the nodes it runs:\n\n");
    for (name, meaning) in SET_FOR_NODES {
        s.push_str(&format!("  {name:<width$}  {meaning}\n"));
    }
    s.push_str(
        "\nA `.env` file in the work dir or above it sets variables that are not already set (ITERION_* names \
         excepted).\n",
    );
    s
}
