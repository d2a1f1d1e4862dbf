//! The async codec over tokio's `AsyncRead` / `AsyncWrite`.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use crate::codec::{Decoder, READ_CHUNK, encode};
use crate::envelope::Envelope;
use crate::error::Result;

/// Reads envelopes from an async byte source (same rules as [`crate::Reader`]).
#[derive(Debug)]
pub struct AsyncReader<R> {
    source: R,
    decoder: Decoder,
    chunk: Box<[u8]>,
    eof: bool,
}

impl<R: AsyncRead + Unpin> AsyncReader<R> {
    /// A reader with the standard line cap.
    pub fn new(source: R) -> Self {
        AsyncReader::with_decoder(source, Decoder::new())
    }

    /// A reader over a configured decoder.
    pub fn with_decoder(source: R, decoder: Decoder) -> Self {
        AsyncReader {
            source,
            decoder,
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            eof: false,
        }
    }

    /// The next envelope; `Ok(None)` at end of stream. Cancel safe: no envelope is lost when the future is dropped.
    pub async fn read(&mut self) -> Result<Option<Envelope>> {
        loop {
            if self.eof {
                return self.decoder.finish();
            }
            if let Some(envelope) = self.decoder.next()? {
                return Ok(Some(envelope));
            }
            // Read into a chunk of our own so a dropped future leaves the decoder untouched.
            match self.source.read(&mut self.chunk).await {
                Ok(0) => self.eof = true,
                Ok(n) => self.decoder.push(&self.chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.decoder.fail_io(e)),
            }
        }
    }

    /// Reads and discards raw bytes until end of stream or an error; the decoder is not consulted.
    pub async fn discard_rest(&mut self) {
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut self.source, &mut sink).await;
    }
}

/// A cloneable envelope writer: every clone writes through one mutex, one `write_all` of a whole line then a
/// flush, so concurrent writers never interleave bytes.
#[derive(Debug)]
pub struct SharedWriter<W> {
    sink: Arc<Mutex<Option<W>>>,
}

impl<W> Clone for SharedWriter<W> {
    fn clone(&self) -> Self {
        SharedWriter {
            sink: Arc::clone(&self.sink),
        }
    }
}

impl<W: AsyncWrite + Unpin> SharedWriter<W> {
    /// A writer over `sink`.
    pub fn new(sink: W) -> Self {
        SharedWriter {
            sink: Arc::new(Mutex::new(Some(sink))),
        }
    }

    /// Encodes and writes one envelope. An oversized envelope is refused and nothing is written; writing after
    /// [`SharedWriter::close`] fails with a broken-pipe error.
    pub async fn send(&self, envelope: &Envelope) -> Result<()> {
        let line = encode(envelope)?;
        self.send_line(&line).await
    }

    /// Writes one line that [`encode`] produced.
    pub(crate) async fn send_line(&self, line: &[u8]) -> Result<()> {
        let mut guard = self.sink.lock().await;
        let Some(sink) = guard.as_mut() else {
            return Err(closed().into());
        };
        sink.write_all(line).await?;
        sink.flush().await?;
        Ok(())
    }

    /// Shuts the sink down (closes the peer's stdin) and drops it; later sends fail. Idempotent.
    pub async fn close(&self) {
        let mut guard = self.sink.lock().await;
        if let Some(mut sink) = guard.take() {
            let _ = sink.shutdown().await;
        }
    }
}

fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "envelope writer closed")
}
