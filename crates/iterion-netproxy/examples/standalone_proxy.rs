//! Run the egress proxy on its own: `cargo run -p iterion-netproxy --example standalone_proxy`.
//!
//! Prints the proxy URL; try `curl -x <url> https://api.github.com/` (allowed by the `iterion-default` preset)
//! and `curl -x <url> https://evil.example/` (403). Ctrl-C stops it and prints the counters.

use iterion_netpolicy::{Mode, Policy};
use iterion_netproxy::{Credential, Listen, Proxy, ProxyConfig};
use std::sync::Arc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let policy = Policy::compile(
        Mode::Allowlist,
        &["iterion-default"],
        &["internal.acme.dev", "!evil.example"],
    )
    .map_err(|errors| anyhow::anyhow!("{}", errors[0]))?;
    let token = iterion_netproxy::new_token();
    let config = ProxyConfig::builder()
        .listen(Listen::Tcp("127.0.0.1:0".parse()?))
        .credential(Credential::new("ci", token.clone(), None, Arc::new(policy)))
        .on_event(|ev| eprintln!("{ev:?}"))
        .build()?; // validates everything
    let running = Proxy::start(config).await?; // binds; returns once listening
    println!("{}", running.endpoint("ci", &token)); // http://ci:<token>@127.0.0.1:<port>
    tokio::signal::ctrl_c().await?;
    let stats = running.shutdown(std::time::Duration::from_secs(5)).await;
    println!("{stats:?}");
    Ok(())
}
