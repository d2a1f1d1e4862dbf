//! Running a command to completion with its outputs read into memory, within limits: [`exec_collect`] over
//! any [`Run`](crate::Run).

use tokio::io::AsyncReadExt;

use crate::driver::Run;
use crate::error::{Error, Result};
use crate::exec::{DEFAULT_CAPTURE, ExecOutput, ExecRequest, ExitStatus, Output};

/// Capture limits of [`exec_collect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Bytes of stdout kept.
    pub max_stdout: usize,
    /// Bytes of stderr kept.
    pub max_stderr: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            max_stdout: DEFAULT_CAPTURE,
            max_stderr: DEFAULT_CAPTURE,
        }
    }
}

/// The output of [`exec_collect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// How the process ended.
    pub status: ExitStatus,
    /// Captured stdout (at most `max_stdout` bytes).
    pub stdout: Vec<u8>,
    /// Captured stderr (at most `max_stderr` bytes).
    pub stderr: Vec<u8>,
    /// stdout had more bytes (read and discarded).
    pub stdout_truncated: bool,
    /// stderr had more bytes (read and discarded).
    pub stderr_truncated: bool,
}

impl Collected {
    /// stdout as text (lossy).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as text (lossy).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

async fn read_capped(r: Option<ExecOutput>, max: usize) -> Result<(Vec<u8>, bool)> {
    let Some(mut r) = r else {
        return Ok((Vec::new(), false));
    };
    let mut out = Vec::new();
    let mut truncated = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = r.read(&mut buf).await.map_err(Error::from_io)?;
        if n == 0 {
            break;
        }
        let keep = n.min(max.saturating_sub(out.len()));
        out.extend_from_slice(&buf[..keep]);
        truncated |= keep < n;
    }
    Ok((out, truncated))
}

/// Runs `req` with both outputs piped, reads them concurrently into memory within `limits`, and waits.
pub async fn exec_collect(run: &dyn Run, req: ExecRequest, limits: OutputLimits) -> Result<Collected> {
    let req = req.outputs(Output::Piped, Output::Piped);
    let mut exec = run.exec(req).await?;
    let out = exec.stdout.take();
    let err = exec.stderr.take();
    let (o, e) = tokio::join!(
        read_capped(out, limits.max_stdout),
        read_capped(err, limits.max_stderr)
    );
    let status = exec.wait().await?;
    let (stdout, stdout_truncated) = o?;
    let (stderr, stderr_truncated) = e?;
    Ok(Collected {
        status,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
    })
}
