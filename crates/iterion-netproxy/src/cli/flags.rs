//! The `serve` flags that need more than clap: log level, secret bindings and TLS inspection settings.

use super::args::ServeArgs;
use crate::{SecretBinding, TlsInspection};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `--log-level`: the maximum level of the stderr log.
pub(super) fn log_level(text: &str) -> Result<tracing_subscriber::filter::LevelFilter, String> {
    use tracing_subscriber::filter::LevelFilter;
    match text.to_ascii_lowercase().as_str() {
        "off" => Ok(LevelFilter::OFF),
        "error" => Ok(LevelFilter::ERROR),
        "warn" => Ok(LevelFilter::WARN),
        "info" => Ok(LevelFilter::INFO),
        "debug" => Ok(LevelFilter::DEBUG),
        "trace" => Ok(LevelFilter::TRACE),
        _ => Err(format!(
            "invalid --log-level '{text}' (want off, error, warn, info, debug or trace)"
        )),
    }
}

/// `--secret NAME=HOST[,HOST...]` with the value of the environment variable `NAME`.
fn secret_binding(spec: &str, env: &BTreeMap<String, String>) -> Result<SecretBinding, String> {
    let Some((name, hosts)) = spec.split_once('=') else {
        return Err(format!("invalid --secret '{spec}' (want NAME=HOST[,HOST...])"));
    };
    let hosts: Vec<&str> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    if name.is_empty() || hosts.is_empty() {
        return Err(format!("invalid --secret '{spec}' (want NAME=HOST[,HOST...])"));
    }
    match env.get(name) {
        Some(value) => Ok(SecretBinding::new(name, value.clone(), &hosts)),
        None => Err(format!(
            "--secret {name}: the environment variable {name} is not set (the value is read from it)"
        )),
    }
}

/// The TLS inspection settings from the flags; every problem is added to `errors`.
pub(super) fn tls_settings(
    a: &ServeArgs,
    env: &BTreeMap<String, String>,
    errors: &mut Vec<String>,
) -> Option<TlsInspection> {
    if !a.tls_inspect {
        if !a.secrets.is_empty()
            || !a.tls_bypass.is_empty()
            || a.ca_cert.is_some()
            || a.ca_key.is_some()
            || a.ca_out.is_some()
        {
            errors.push(
                "--secret, --tls-bypass, --ca-cert, --ca-key and --ca-out need --tls-inspect".to_owned(),
            );
        }
        return None;
    }
    if a.secrets.is_empty() {
        errors.push("--tls-inspect needs at least one --secret NAME=HOST[,HOST...]".to_owned());
    }
    let mut t = TlsInspection::new();
    for spec in &a.secrets {
        match secret_binding(spec, env) {
            Ok(b) => t = t.binding(b),
            Err(e) => errors.push(e),
        }
    }
    for p in &a.tls_bypass {
        t = t.bypass(p.clone());
    }
    match (&a.ca_cert, &a.ca_key) {
        (Some(cert), Some(key)) => {
            let read = |p: &PathBuf, what: &str, errors: &mut Vec<String>| match std::fs::read_to_string(p) {
                Ok(text) => Some(text),
                Err(e) => {
                    errors.push(format!("cannot read {what} {}: {e}", p.display()));
                    None
                }
            };
            let cert = read(cert, "--ca-cert", errors);
            let key = read(key, "--ca-key", errors);
            if let (Some(cert), Some(key)) = (cert, key) {
                t = t.operator_ca(cert, key);
            }
        }
        (None, None) => {}
        _ => errors.push("--ca-cert and --ca-key go together".to_owned()),
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_flags() {
        let env = BTreeMap::from([("GH_TOKEN".to_owned(), "ghp_x".to_owned())]);
        let b = secret_binding("GH_TOKEN=api.github.com, **.githubusercontent.com", &env);
        let b = b.expect("binding");
        assert_eq!(b.name(), "GH_TOKEN");
        assert_eq!(b.hosts(), ["api.github.com", "**.githubusercontent.com"]);
        assert!(secret_binding("GH_TOKEN=", &env).is_err());
        assert!(secret_binding("=api.github.com", &env).is_err());
        assert!(secret_binding("NOPE=api.github.com", &env).is_err());
        assert!(log_level("DEBUG").is_ok());
        assert!(log_level("verbose").is_err());
    }
}
