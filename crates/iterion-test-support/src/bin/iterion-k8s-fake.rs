//! The engine-backed fake Kubernetes API server as a program, to try iterion's kubernetes mode (or the
//! real-cluster test variants) on a machine with only a Docker engine:
//!
//! ```sh
//! cargo run -p iterion-test-support --bin iterion-k8s-fake -- /tmp/fake-kubeconfig [namespace]
//! ITERION_MODE=cloud KUBECONFIG=/tmp/fake-kubeconfig iterion run review.bot
//! ```
//!
//! It writes the kubeconfig, prints its path and serves until interrupted (Ctrl-C), then removes every
//! container it created. NetworkPolicies are stored, not enforced.

use std::path::PathBuf;

use iterion_test_support::k8s_fake::EngineFake;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next().map(PathBuf::from) else {
        anyhow::bail!("usage: iterion-k8s-fake KUBECONFIG_PATH [NAMESPACE]");
    };
    let namespace = args.next().unwrap_or_else(|| "iterion".into());
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let fake = EngineFake::start(namespace).await?;
        let scratch = tempfile::tempdir()?;
        std::fs::copy(fake.write_kubeconfig(scratch.path())?, &path)?;
        println!(
            "serving {} (namespace {}); kubeconfig {}",
            fake.url(),
            fake.namespace(),
            path.display()
        );
        tokio::signal::ctrl_c().await?;
        let errors = fake.shutdown().await;
        for e in &errors {
            eprintln!("shutdown: {e}");
        }
        Ok(())
    })
}
