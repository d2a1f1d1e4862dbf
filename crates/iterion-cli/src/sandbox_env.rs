//! The `--sandbox-env` flag's error text, shared by `run`, `resume` and `sandbox doctor`.

/// A `--sandbox-env` error, prefixed with the flag once (some library errors already name it).
pub(crate) fn error_text(e: &iterion_envdeny::Error) -> String {
    let m = e.to_string();
    if m.starts_with("--sandbox-env") {
        m
    } else {
        format!("--sandbox-env: {m}")
    }
}
