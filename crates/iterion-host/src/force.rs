//! Where a forced driver came from (below the error type and the selection, which both name it).

/// Where a forced driver came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForceSource {
    /// `--sandbox-driver`.
    Flag,
    /// `ITERION_SANDBOX_DRIVER`.
    Env,
}

impl ForceSource {
    /// How the source is named in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ForceSource::Flag => "--sandbox-driver",
            ForceSource::Env => "ITERION_SANDBOX_DRIVER",
        }
    }
}
