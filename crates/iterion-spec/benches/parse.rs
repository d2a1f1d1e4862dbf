//! Throughput of the workflow language front end: lex, lex+parse, and lex+parse+compile (`check`, what
//! `iterion validate` does) over one generated workflow of several megabytes with every node kind, edges with
//! conditions and loops, templates and sandbox blocks. Prints a table; `cargo xtask bench spec` runs it.
//!
//! Every stage runs on the same input, once untimed to warm up, then `ITERATIONS` timed runs; the table
//! reports the median and the fastest wall-clock run, and the mean thread CPU time per run. Each timed run
//! includes dropping its result. MB are 10^6 bytes.
//!
//! Arguments: `[SIZE_MB] [ITERATIONS] [STAGE]` (defaults 6, 7 and `all`; STAGE is `lex`, `parse`, `check`
//! or `all`, to profile one stage alone). SIZE_MB sizes the declarations in MiB; the edges of the workflow
//! block come on top.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

fn group(out: &mut String, i: usize) {
    let next = i + 1;
    let _ = write!(
        out,
        r#"## group {i}
schema s{i}:
  ok: bool
  text: string
  level: string [enum: "low", "high"]

prompt p{i}:
  Step {i}: summarise {{{{vars.topic}}}} for the reader.

  Keep it short; previous text: {{{{input.text}}}}

agent a{i}:
  model: "${{MODEL:-anthropic/claude-sonnet-4-5}}"
  user: p{i}
  output: s{i}
  tools: [bash, read_file, mcp.github.*]
  reasoning_effort: high

tool t{i}:
  output: s{i}
  command: `printf '{{"ok": true, "text": "%s"}}' {{{{outputs.a{i}.text}}}}`
  sandbox:
    image: "ghcr.io/acme/ci:2024-06"
    user: "1000:1000"
    env:
      CI: "true"
      STEP: {i}
    mounts: ["type=volume,source=cache{i},target=/cache"]
    network:
      mode: allowlist
      preset: "iterion-default"
      rules: ["api.github.com", "**.example.com", "!gist.github.com"]

judge j{i}:
  backend: "claude_code"
  user: p{i}
  output: s{i}
  sandbox:
    network:
      rules: ["registry.npmjs.org"]

compute c{i}:
  input: s{i}
  expr:
    n: "length(input.text) + {i} * 2"
    good: "input.ok && level != 'low' || contains(text, 'x')"

router r{i}:
  mode: fan_out_all

"#
    );
    let _ = next;
}

fn edges(out: &mut String, i: usize, last: bool) {
    let next = if last {
        "done".to_string()
    } else {
        format!("a{}", i + 1)
    };
    let _ = write!(
        out,
        "  a{i} -> t{i} with {{ text: \"{{{{outputs.a{i}.text}}}}\" }}\n  t{i} -> j{i} when ok\n  t{i} -> fail when not ok\n  j{i} -> t{i} when \"level == 'low'\" as retry{i}(3)\n  j{i} -> c{i}\n  c{i} -> r{i}\n  r{i} -> {next}\n"
    );
}

fn generate(min_bytes: usize) -> String {
    let mut decls = String::with_capacity(min_bytes + 1024);
    let mut wf = String::new();
    decls.push_str("## generated benchmark workflow\nvars:\n  topic: string = \"release notes\"\n\n");
    let mut i = 0;
    // each group adds declarations plus ~200 bytes of edges
    while decls.len() + wf.len() < min_bytes {
        group(&mut decls, i);
        i += 1;
    }
    for k in 0..i {
        edges(&mut wf, k, k + 1 == i);
    }
    decls.push_str("workflow bench:\n  entry: a0\n  budget:\n    max_duration: \"2h\"\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      rules: [\"api.github.com\"]\n");
    decls.push_str(&wf);
    decls
}

/// CPU time of the calling thread (user + system) from `/proc/thread-self/stat`, when available. The machine
/// running the benchmark may be shared, so the table reports CPU-time throughput next to wall-clock time.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // fields after the parenthesised command name; utime and stime are fields 14 and 15 (1-based)
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10)) // USER_HZ is 100 on Linux
}

struct Timing {
    median_wall: Duration,
    best_wall: Duration,
    cpu_per_iter: Option<Duration>,
}

/// Runs `f` once to warm up (caches, allocator, page faults of the first run), then `iters` timed times.
fn time<T>(iters: usize, mut f: impl FnMut() -> T) -> Timing {
    drop(std::hint::black_box(f()));
    let mut walls = Vec::with_capacity(iters);
    let cpu0 = thread_cpu();
    for _ in 0..iters {
        let t = Instant::now();
        // the result is dropped inside the timed region: freeing the tree is part of the work
        drop(std::hint::black_box(f()));
        walls.push(t.elapsed());
    }
    let cpu = match (cpu0, thread_cpu()) {
        (Some(a), Some(b)) => Some((b - a) / iters as u32),
        _ => None,
    };
    walls.sort();
    let mid = walls.len() / 2;
    let median = if walls.len() % 2 == 1 {
        walls[mid]
    } else {
        (walls[mid - 1] + walls[mid]) / 2
    };
    Timing {
        median_wall: median,
        best_wall: walls[0],
        cpu_per_iter: cpu,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let size_mb: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(6);
    let iters: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(7).max(1);
    let stage = args.get(2).map_or("all", String::as_str);
    if !matches!(stage, "all" | "lex" | "parse" | "check") {
        eprintln!("unknown stage '{stage}' (want lex, parse, check or all)");
        std::process::exit(2);
    }
    let src = generate(size_mb * 1024 * 1024);
    let mb = src.len() as f64 / 1e6;

    // sanity: the generated workflow is valid, so compile runs every check
    let checked = iterion_spec::check(&src, "bench.bot");
    let errors = checked.diagnostics.iter().filter(|d| d.is_error()).count();
    assert_eq!(
        errors,
        0,
        "generated workflow has errors: {:?}",
        checked
            .diagnostics
            .iter()
            .take(3)
            .map(|d| d.render())
            .collect::<Vec<_>>()
    );
    let w = &checked.workflows[0];
    println!(
        "iterion-spec front end: {:.2} MB (10^6 bytes), {} lines, {} nodes, {} edges, {} tokens, {} diagnostics, {} iterations",
        mb,
        src.lines().count(),
        w.nodes.len(),
        w.edges.len(),
        iterion_spec::lex(&src, "bench.bot").tokens.len(),
        checked.diagnostics.len(),
        iters
    );
    drop(checked);
    println!();
    println!(
        "| stage                  | median wall ms | best wall ms | MB/s (median wall) | CPU ms/iter | MB/s (CPU) |"
    );
    println!(
        "|------------------------|---------------:|-------------:|-------------------:|------------:|-----------:|"
    );
    let row = |name: &str, t: Timing| {
        let (cpu_ms, cpu_rate) = match t.cpu_per_iter {
            Some(c) if !c.is_zero() => (
                format!("{:.0}", c.as_secs_f64() * 1e3),
                format!("{:.1}", mb / c.as_secs_f64()),
            ),
            _ => ("n/a".to_string(), "n/a".to_string()),
        };
        println!(
            "| {name:<22} | {:>14.1} | {:>12.1} | {:>18.1} | {cpu_ms:>11} | {cpu_rate:>10} |",
            t.median_wall.as_secs_f64() * 1e3,
            t.best_wall.as_secs_f64() * 1e3,
            mb / t.median_wall.as_secs_f64()
        );
    };
    if matches!(stage, "all" | "lex") {
        row("lex", time(iters, || iterion_spec::lex(&src, "bench.bot")));
    }
    if matches!(stage, "all" | "parse") {
        row(
            "lex + parse",
            time(iters, || iterion_spec::parse(&src, "bench.bot")),
        );
    }
    if matches!(stage, "all" | "check") {
        row(
            "lex + parse + compile",
            time(iters, || iterion_spec::check(&src, "bench.bot")),
        );
    }
}
