//! Decide targets the way the proxy would, without a socket:
//! `cargo run -p iterion-netproxy --example check_policy -- api.github.com:443 169.254.169.254:80`.
//!
//! Names are resolved with the system resolver and every address goes through the SSRF guard.

use iterion_netpolicy::{Mode, Policy, Target};
use iterion_netproxy::{DecideOptions, SystemResolver, decide};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let policy = Policy::compile(Mode::Allowlist, &["iterion-default"], &["!gist.github.com"])
        .map_err(|errors| anyhow::anyhow!("{}", errors[0]))?;
    let targets: Vec<String> = std::env::args().skip(1).collect();
    let targets = if targets.is_empty() {
        vec!["api.github.com".to_owned(), "0xa9fea9fe:80".to_owned()]
    } else {
        targets
    };
    for text in targets {
        let Ok(target) = Target::parse_lenient(&text, Some(443)) else {
            println!("deny {text} reason=\"invalid target\" rule=\"-\"");
            continue;
        };
        match decide(&policy, &target, Some(&SystemResolver), &DecideOptions::default()).await {
            Ok(decision) => println!("{decision}"),
            Err(e) => println!("deny {target} reason=\"{e}\" rule=\"-\""),
        }
    }
    Ok(())
}
