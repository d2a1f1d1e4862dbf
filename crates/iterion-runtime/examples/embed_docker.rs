//! Embedding iterion with a real sandbox: the workflow file given as the first argument runs in a Docker (or
//! Podman) container, its egress enforced through the embedded relay and the egress proxy.
//!
//! ```text
//! cargo run -p iterion-runtime --example embed_docker -- examples/demo/demo.bot
//! ```
//!
//! The work directory is the current directory. The driver is forced to `docker` unless
//! `ITERION_SANDBOX_DRIVER` says otherwise, so a missing engine is an error instead of a run on the host.
//! Prints the run id and the run directory; exits 0 when the run `finished`, 1 otherwise.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iterion_runtime::api::{HostOptions, RunOptions, Runtime};
use iterion_runtime::lifecycle::Outcome;
use iterion_runtime::status::RunStatus;

/// Runs `workflow` in `work_dir` with the drivers the host layer selects from `env`.
pub async fn embed(
    env: &BTreeMap<String, String>,
    workflow: &Path,
    work_dir: &Path,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let forced = (!env.contains_key("ITERION_SANDBOX_DRIVER")).then(|| "docker".to_string());
    let opts = HostOptions::new().cwd(work_dir).forced_driver(forced);
    let builder = Runtime::from_host(env, &opts).await?;
    for w in builder.host_warnings() {
        eprintln!("warning: {w}");
    }
    let runtime = builder.build()?;
    Ok(runtime.run(workflow, RunOptions::new(work_dir)).await?)
}

#[allow(dead_code)] // the test includes this file for `embed`
fn main() -> std::process::ExitCode {
    let Some(workflow) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: embed_docker WORKFLOW");
        return std::process::ExitCode::from(2);
    };
    // The only reads of the process environment; the library receives the map and the directory.
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let work_dir = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: current directory: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Box::<dyn std::error::Error>::from)
        .and_then(|rt| rt.block_on(embed(&env, &workflow, &work_dir)));
    match outcome {
        Ok(o) => {
            println!("run id: {}", o.run_id);
            println!("run dir: {}", o.run_dir.display());
            println!("status: {}", o.status);
            if let Some(e) = &o.error {
                eprintln!("error: {e}");
            }
            if o.status == RunStatus::Finished {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
