//! Embedding iterion: run a workflow from a program, without the CLI.
//!
//! ```text
//! cargo run -p iterion-runtime --example embed
//! ```
//!
//! The program owns the composition: it reads its environment once, picks the drivers (here the host
//! `NoopDriver` only, so the `sandbox: auto` workflow degrades visibly to the host with `sandbox_skipped`; a
//! real program passes a container driver with `.driver(...)`), and observes events as they are written.
use std::collections::BTreeMap;
use std::sync::Arc;

use iterion_driver::NoopDriver;
use iterion_runtime::api::{RunOptions, Runtime};
use iterion_runtime::events::Event;
use iterion_runtime::lifecycle::Observer;
use iterion_runtime::store::Appended;

/// Prints each event type as it is appended.
struct Print;

impl Observer for Print {
    fn event(&self, _appended: &Appended, event: &Event) {
        match event.node_id() {
            Some(n) => println!("event {} ({n})", event.event_type()),
            None => println!("event {}", event.event_type()),
        }
    }
}

const WORKFLOW: &str = "tool hello:
  command: `echo '{\"greeting\": \"hello from iterion\"}'`

workflow greet:
  entry: hello
  sandbox: auto
  hello -> done
";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let work = dir.path().join("project");
    std::fs::create_dir_all(&work)?;
    std::fs::write(work.join("greet.bot"), WORKFLOW)?;
    // The only read of the process environment; the library receives the map.
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let base: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let runtime = Runtime::builder()
        .host_driver(Arc::new(NoopDriver::new(base)))
        .no_container_driver("this example does not connect to a container engine")
        .store_dir(dir.path().join("store"))
        .env(env)
        .observer(Arc::new(Print))
        .build()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcome = rt.block_on(runtime.run(work.join("greet.bot"), RunOptions::new(&work)))?;
    println!(
        "run {} ({}): {}",
        outcome.run_id, outcome.run_name, outcome.status
    );
    Ok(())
}
