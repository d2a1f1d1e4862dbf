//! Escape class 5, credentials broader than the node: a node reads every proxy credential it can find in the
//! container (`/proc/1/environ`, `/proc/*/environ`) and uses it; a node leaves a process behind (`setsid … &`)
//! that uses the node's credential after the node ended. The target is a listener on the host's loopback that
//! the run's policy allows (`127.0.0.1` is an explicit rule, so the proxy dials it) and the narrow node's policy
//! does not: every connection that reaches it is recorded with the word the client sent.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::{Hostile, engine_ready, show};

/// A host loopback listener that records the first line each connection sends.
pub(crate) struct Target {
    pub(crate) port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Target {
    pub(crate) fn start() -> Target {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let rec = seen.clone();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let rec = rec.clone();
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    let mut line = String::new();
                    let mut r = BufReader::new(&s);
                    let _ = r.read_line(&mut line);
                    rec.lock().unwrap().push(line.trim().to_owned());
                    let _ = (&s).write_all(b"HOSTSVC\n");
                });
            }
        });
        Target { port, seen }
    }

    pub(crate) fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// A shell snippet that prints the token of a proxy URL read on stdin (`http://user:token@host:port`).
pub(crate) const TOKEN_OF: &str = r"sed -n 's#^[^=]*=\{0,1\}http://[^:/@]*:\([^@]*\)@.*#\1#p'";

/// A shell snippet that opens a tunnel to the target through the relay with token `$1`, sends word `$2`, and
/// prints the proxy's status line.
pub(crate) fn connect_fn(port: u16) -> String {
    format!(
        "connect() {{ printf 'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\nProxy-Authorization: Bearer %s\\r\\n\\r\\n%s\\n' \"$1\" \"$2\" | nc -w 3 127.0.0.1 3128 | head -n 1; }}\n"
    )
}

fn read(h: &Hostile, rel: &str) -> Option<String> {
    std::fs::read_to_string(h.repo().join(rel)).ok()
}

/// The run allows the host listener; `narrow` replaces the network policy with one that allows nothing it can
/// reach. `wide` uses its own credential (the control: the listener is reachable under the run's policy) and
/// leaves a sleeping process behind holding that credential in its environment. `narrow` then collects every
/// proxy credential visible in the container and tries each against the listener.
#[test]
fn a_node_finds_no_credential_broader_than_its_own() {
    if !engine_ready("escapes::credentials::broader") {
        return;
    }
    let h = Hostile::new();
    let t = Target::start();
    let connect = connect_fn(t.port);
    h.write(
        "wide.sh",
        &format!(
            "{connect}tok=$(echo \"$HTTP_PROXY\" | {TOKEN_OF})\nconnect \"$tok\" wide > wide.txt\nsetsid sleep 600 </dev/null >/dev/null 2>&1 &\necho '{{}}'\n"
        ),
    );
    h.write(
        "scan.sh",
        &format!(
            "{connect}tr '\\000' '\\n' < /proc/1/environ > pid1-env.txt\necho \"$HTTP_PROXY\" | {TOKEN_OF} > own.txt\nfor f in /proc/[0-9]*/environ; do tr '\\000' '\\n' < \"$f\" 2>/dev/null; done | grep -i '_proxy=' | {TOKEN_OF} | sort -u > found.txt\n: > tried.txt\nwhile read -r tok; do connect \"$tok\" narrow >> tried.txt; done < found.txt\necho '{{}}'\n"
        ),
    );
    let out = h.run_workflow(
        "wf.bot",
        "tool wide:\n  command: \"sh ./wide.sh\"\n\ntool narrow:\n  sandbox:\n    network:\n      inherit: replace\n      mode: allowlist\n      rules: [\"narrow.invalid\"]\n  command: \"sh ./scan.sh\"\n\nworkflow w:\n  entry: wide\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      rules: [\"127.0.0.1\"]\n  wide -> narrow\n  narrow -> done\n",
    );
    assert!(out.status.success(), "{}", show(&out));
    // The control: under the run's policy the listener is reachable with a node's own credential.
    let wide = read(&h, "wide.txt").unwrap_or_default();
    assert!(wide.contains(" 200 "), "wide reached the listener: {wide:?}");
    assert!(t.seen().contains(&"wide".to_owned()), "{:?}", t.seen());
    // PID 1's environment (the container's create-time environment) holds the proxy URL without credentials.
    let pid1 = read(&h, "pid1-env.txt").expect("narrow read /proc/1/environ");
    let proxy_vars: Vec<&str> = pid1
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("_proxy="))
        .collect();
    assert!(!proxy_vars.is_empty(), "the proxy variables are set: {pid1}");
    for v in &proxy_vars {
        assert!(!v.contains('@'), "a credential in PID 1's environment: {v}");
    }
    // `narrow` has a credential of its own, and sees no other.
    let own = read(&h, "own.txt").unwrap_or_default();
    assert_eq!(own.trim().len(), 64, "narrow's own token: {own:?}");
    let found = read(&h, "found.txt").unwrap_or_default();
    let others: Vec<&str> = found.lines().filter(|l| l.trim() != own.trim()).collect();
    assert!(others.is_empty(), "narrow found other credentials: {others:?}");
    // And nothing it tried reached the listener.
    assert!(
        !t.seen().contains(&"narrow".to_owned()),
        "narrow reached the listener: {:?}",
        t.seen()
    );
}

/// A node leaves `setsid sh ./late.sh &` behind and ends; three seconds later the leftover uses the node's
/// credential. The next node waits past that moment: the leftover must be gone, or its request refused.
#[test]
fn a_process_left_behind_by_a_node_loses_the_node_credential() {
    if !engine_ready("escapes::credentials::leftover") {
        return;
    }
    let h = Hostile::new();
    let t = Target::start();
    let connect = connect_fn(t.port);
    h.write(
        "leave.sh",
        "setsid sh ./late.sh </dev/null >/dev/null 2>&1 &\necho '{}'\n",
    );
    h.write(
        "late.sh",
        &format!(
            "{connect}sleep 3\ntok=$(echo \"$HTTP_PROXY\" | {TOKEN_OF})\nconnect \"$tok\" late > late.txt\n"
        ),
    );
    h.write("check.sh", "sleep 8\nps > ps.txt 2>&1\necho '{}'\n");
    let out = h.run_workflow(
        "wf.bot",
        "tool leave:\n  command: \"sh ./leave.sh\"\n\ntool check:\n  command: \"sh ./check.sh\"\n\nworkflow w:\n  entry: leave\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      rules: [\"127.0.0.1\"]\n  leave -> check\n  check -> done\n",
    );
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        !t.seen().contains(&"late".to_owned()),
        "the leftover reached the listener: {:?}",
        t.seen()
    );
    if let Some(late) = read(&h, "late.txt") {
        assert!(
            late.contains(" 407 "),
            "the leftover's request was not refused: {late:?}"
        );
    }
    let ps = read(&h, "ps.txt").expect("check listed the processes");
    assert!(
        !ps.contains("late.sh"),
        "the leftover still runs while the next node does:\n{ps}"
    );
}
