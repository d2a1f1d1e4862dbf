//! Throughput of the envelope codec: encoding (typed payload → line, and raw envelope → line) and decoding
//! (bytes → envelopes through the blocking and the async reader, and bytes → typed payloads) over two
//! generated streams of several megabytes: small envelopes (events and tool calls of a few hundred bytes) and
//! large ones (64 KiB tool results). Prints a table; `cargo xtask bench envelope` runs it.
//!
//! Every stage runs once untimed to warm up, then `ITERATIONS` timed runs; the table reports the median and
//! the fastest run as MB/s of NDJSON bytes (MB = 10^6 bytes).
//!
//! Arguments: `[SIZE_MB] [ITERATIONS]` (defaults 32 and 9).

use std::hint::black_box;
use std::time::{Duration, Instant};

use iterion_envelope::{
    AsyncReader, Envelope, Event, Reader, ToolCall, ToolOutcome, ToolResult, encode, kind,
};
use serde_json::json;

/// One payload of the stream, typed, so the typed encoder has something to serialise.
enum Payload {
    Call(ToolCall),
    Reply(ToolResult),
    Event(Event),
}

impl Payload {
    fn envelope(&self, n: usize) -> Envelope {
        match self {
            Payload::Call(c) => Envelope::new(kind::TOOL_CALL, Some(format!("call-{n}")), c),
            Payload::Reply(r) => Envelope::new(kind::TOOL_RESULT, Some(format!("call-{n}")), r),
            Payload::Event(e) => Envelope::new(kind::EVENT, None, e),
        }
        .unwrap()
    }
}

fn small_payloads(bytes: usize) -> Vec<Payload> {
    let mut out = Vec::new();
    let mut size = 0;
    let mut n = 0;
    while size < bytes {
        let p = match n % 3 {
            0 => Payload::Call(ToolCall {
                name: "bash".into(),
                input: Some(json!({"command": format!("cargo test -p crate-{n} -- --nocapture"), "timeout_ms": 120000})),
            }),
            1 => Payload::Reply(ToolResult::from(ToolOutcome::Output(format!(
                "{{\"stdout\":\"test result: ok. {n} passed; 0 failed\\n\",\"stderr\":\"\",\"exit_code\":0}}"
            )))),
            _ => Payload::Event(Event {
                kind: "llm_step_finished".into(),
                payload: json!({"model": "claude-sonnet-4-5", "step": n, "input_tokens": 1834, "output_tokens": 312, "stop_reason": "tool_use"})
                    .as_object()
                    .cloned(),
            }),
        };
        size += encode(&p.envelope(n)).unwrap().len();
        out.push(p);
        n += 1;
    }
    out
}

fn large_payloads(bytes: usize) -> Vec<Payload> {
    let text: String = (0..64 * 1024 / 64)
        .map(|i| format!("src/module_{i:04}.rs:{i}: warning: unused variable `x` \"quoted\"\t\n"))
        .collect();
    (0..bytes.div_ceil(text.len()))
        .map(|_| Payload::Reply(ToolResult::from(ToolOutcome::Output(text.clone()))))
        .collect()
}

struct Row {
    stage: &'static str,
    median: Duration,
    fastest: Duration,
}

fn measure(stage: &'static str, iterations: usize, mut f: impl FnMut()) -> Row {
    f();
    let mut times: Vec<Duration> = (0..iterations)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    Row {
        stage,
        median: times[times.len() / 2],
        fastest: times[0],
    }
}

fn mb_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn bench_stream(name: &str, payloads: &[Payload], iterations: usize, rt: &tokio::runtime::Runtime) {
    let envelopes: Vec<Envelope> = payloads.iter().enumerate().map(|(n, p)| p.envelope(n)).collect();
    let stream: Vec<u8> = envelopes.iter().flat_map(|e| encode(e).unwrap()).collect();
    let bytes = stream.len();
    let count = envelopes.len();

    let rows = vec![
        measure("encode typed payload → line", iterations, || {
            let mut out = Vec::with_capacity(bytes);
            for (n, p) in payloads.iter().enumerate() {
                out.extend_from_slice(&encode(&p.envelope(n)).unwrap());
            }
            black_box(out);
        }),
        measure("encode raw envelope → line", iterations, || {
            let mut out = Vec::with_capacity(bytes);
            for e in &envelopes {
                out.extend_from_slice(&encode(e).unwrap());
            }
            black_box(out);
        }),
        measure("decode line → envelope (std Reader)", iterations, || {
            let mut reader = Reader::new(&stream[..]);
            let mut n = 0;
            while let Some(e) = reader.read().unwrap() {
                black_box(&e);
                n += 1;
            }
            assert_eq!(n, count);
        }),
        measure("decode line → envelope (AsyncReader)", iterations, || {
            rt.block_on(async {
                let mut reader = AsyncReader::new(&stream[..]);
                let mut n = 0;
                while let Some(e) = reader.read().await.unwrap() {
                    black_box(&e);
                    n += 1;
                }
                assert_eq!(n, count);
            })
        }),
        measure("decode line → typed payload", iterations, || {
            let mut reader = Reader::new(&stream[..]);
            while let Some(e) = reader.read().unwrap() {
                match e.kind() {
                    kind::TOOL_CALL => drop(black_box(e.decode::<ToolCall>().unwrap())),
                    kind::TOOL_RESULT => drop(black_box(e.decode::<ToolResult>().unwrap())),
                    _ => drop(black_box(e.decode::<Event>().unwrap())),
                }
            }
        }),
    ];

    println!(
        "\n{name}: {count} envelopes, {:.1} MB of NDJSON (mean line {} bytes)",
        bytes as f64 / 1e6,
        bytes / count
    );
    println!("{:<40} {:>12} {:>12}", "stage", "median MB/s", "best MB/s");
    for r in rows {
        println!(
            "{:<40} {:>12.0} {:>12.0}",
            r.stage,
            mb_per_s(bytes, r.median),
            mb_per_s(bytes, r.fastest)
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` the target only runs once, small, as a
    // smoke test of the measuring code.
    let measuring = std::env::args().any(|a| a == "--bench");
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let size_mb: usize = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(if measuring { 32 } else { 1 });
    let iterations: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(if measuring { 9 } else { 1 })
        .max(1);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let bytes = size_mb << 20;
    println!("envelope codec throughput ({iterations} timed runs per stage)");
    bench_stream("small envelopes", &small_payloads(bytes), iterations, &rt);
    bench_stream(
        "large envelopes (64 KiB tool results)",
        &large_payloads(bytes),
        iterations,
        &rt,
    );
}
