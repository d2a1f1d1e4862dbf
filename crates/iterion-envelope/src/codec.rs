//! NDJSON framing: the sans-I/O [`Decoder`], [`encode`], and blocking [`Reader`] / [`Writer`] over `std::io`.

use std::io::{Read, Write};

use crate::envelope::{Envelope, WireIn};
use crate::error::{Error, Result};

/// Longest accepted line: 4 MiB, without the LF and one optional CR before it.
pub const LINE_CAP: usize = 4 * 1024 * 1024;

/// Characters of a malformed line kept in [`Error::Malformed`].
pub const PREVIEW_CHARS: usize = 256;

/// Bytes a reader asks its source for at a time.
pub const READ_CHUNK: usize = 64 * 1024;

/// Encodes one envelope as its line, LF included. Refuses with [`Error::EnvelopeTooLarge`] when the JSON is
/// longer than [`LINE_CAP`].
pub fn encode(envelope: &Envelope) -> Result<Vec<u8>> {
    encode_with_limit(envelope, LINE_CAP)
}

/// [`encode`] with another line cap.
pub fn encode_with_limit(envelope: &Envelope, limit: usize) -> Result<Vec<u8>> {
    let mut line = Vec::with_capacity(64 + envelope.data_json().map_or(0, str::len));
    envelope.write_json(&mut line);
    if line.len() > limit {
        return Err(Error::EnvelopeTooLarge {
            size: line.len(),
            limit,
        });
    }
    line.push(b'\n');
    Ok(line)
}

/// Why a reader stopped for good; every later read returns the same error.
#[derive(Debug, Clone)]
enum Poison {
    LineTooLong {
        limit: usize,
    },
    Malformed {
        line_number: u64,
        reason: String,
        preview: String,
    },
    Io {
        kind: std::io::ErrorKind,
        message: String,
    },
}

impl Poison {
    fn error(&self) -> Error {
        match self {
            Poison::LineTooLong { limit } => Error::LineTooLong { limit: *limit },
            Poison::Malformed {
                line_number,
                reason,
                preview,
            } => Error::Malformed {
                line_number: *line_number,
                reason: reason.clone(),
                preview: preview.clone(),
            },
            Poison::Io { kind, message } => Error::Io(std::io::Error::new(*kind, message.clone())),
        }
    }
}

/// A sans-I/O envelope decoder: push bytes in, take envelopes out.
///
/// [`Decoder::next`] returns `Ok(None)` when it needs more bytes; call [`Decoder::finish`] at end of stream.
/// A line over the cap, a malformed line or an I/O error reported with [`Decoder::fail_io`] poisons the decoder.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    start: usize,
    /// Bytes from `start` already searched for a LF.
    scanned: usize,
    line_number: u64,
    limit: usize,
    poison: Option<Poison>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder with the standard line cap.
    pub fn new() -> Self {
        Decoder::with_limit(LINE_CAP)
    }

    /// A decoder with another line cap.
    pub fn with_limit(limit: usize) -> Self {
        Decoder {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            line_number: 0,
            limit,
            poison: None,
        }
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.compact();
        self.buf.extend_from_slice(bytes);
    }

    /// Whether bytes that form no complete line yet are buffered.
    pub fn has_partial_line(&self) -> bool {
        self.start < self.buf.len()
    }

    /// The next complete envelope, `Ok(None)` when more bytes are needed.
    // Not an Iterator: it needs `&mut self` results that can fail and a separate end-of-stream call.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Envelope>> {
        if let Some(p) = &self.poison {
            return Err(p.error());
        }
        loop {
            let pending = &self.buf[self.start + self.scanned..];
            match memchr_lf(pending) {
                Some(i) => {
                    let end = self.start + self.scanned + i;
                    let line_start = self.start;
                    self.start = end + 1;
                    self.scanned = 0;
                    if let Some(envelope) = self.line(line_start, end)? {
                        return Ok(Some(envelope));
                    }
                }
                None => {
                    self.scanned = self.buf.len() - self.start;
                    // A line of `limit` bytes may still be followed by CR before its LF.
                    if self.scanned > self.limit.saturating_add(1) {
                        return Err(self.poison(Poison::LineTooLong { limit: self.limit }));
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// At end of stream: decodes a final line without LF, if any; `Ok(None)` is the end of the envelopes.
    pub fn finish(&mut self) -> Result<Option<Envelope>> {
        if let Some(envelope) = self.next()? {
            return Ok(Some(envelope));
        }
        if !self.has_partial_line() {
            return Ok(None);
        }
        let (start, end) = (self.start, self.buf.len());
        self.start = end;
        self.scanned = 0;
        self.line(start, end)
    }

    /// Records an I/O error of the source; it poisons the decoder.
    pub fn fail_io(&mut self, error: std::io::Error) -> Error {
        let poison = Poison::Io {
            kind: error.kind(),
            message: error.to_string(),
        };
        self.poison.get_or_insert(poison);
        Error::Io(error)
    }

    /// Room for at most one read chunk at the end of the buffer; report what was read with [`Decoder::filled`].
    pub(crate) fn spare(&mut self) -> &mut [u8] {
        self.compact();
        let len = self.buf.len();
        self.buf.resize(len + READ_CHUNK, 0);
        &mut self.buf[len..]
    }

    /// After [`Decoder::spare`]: `n` bytes of it were filled.
    pub(crate) fn filled(&mut self, n: usize) {
        let len = self.buf.len() - READ_CHUNK + n;
        self.buf.truncate(len);
    }

    fn compact(&mut self) {
        if self.start > 0 && (self.start == self.buf.len() || self.start >= self.buf.len() / 2) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    fn poison(&mut self, poison: Poison) -> Error {
        let error = poison.error();
        self.poison = Some(poison);
        error
    }

    /// Decodes the line `buf[start..end]` (LF excluded); `Ok(None)` for a blank line.
    fn line(&mut self, start: usize, end: usize) -> Result<Option<Envelope>> {
        self.line_number += 1;
        let mut line = &self.buf[start..end];
        if let [rest @ .., b'\r'] = line {
            line = rest;
        }
        if line.len() > self.limit {
            return Err(self.poison(Poison::LineTooLong { limit: self.limit }));
        }
        if line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
            return Ok(None);
        }
        match decode_line(line) {
            Ok(envelope) => Ok(Some(envelope)),
            Err(reason) => {
                let poison = Poison::Malformed {
                    line_number: self.line_number,
                    reason,
                    preview: preview(line),
                };
                Err(self.poison(poison))
            }
        }
    }
}

fn memchr_lf(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// Decodes one line without its terminator; the error is the reason it is malformed.
pub(crate) fn decode_line(line: &[u8]) -> std::result::Result<Envelope, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not valid UTF-8 ({e})"))?;
    if !text.trim_start_matches([' ', '\t', '\r']).starts_with('{') {
        return Err("not a JSON object".to_string());
    }
    let wire: WireIn = serde_json::from_str(text).map_err(|e| format!("invalid JSON ({e})"))?;
    wire.into_envelope().map_err(str::to_string)
}

fn preview(line: &[u8]) -> String {
    let head = &line[..line.len().min(PREVIEW_CHARS * 4)];
    String::from_utf8_lossy(head)
        .chars()
        .take(PREVIEW_CHARS)
        .collect()
}

/// Reads envelopes from a blocking byte source.
#[derive(Debug)]
pub struct Reader<R> {
    source: R,
    decoder: Decoder,
    eof: bool,
}

impl<R: Read> Reader<R> {
    /// A reader with the standard line cap.
    pub fn new(source: R) -> Self {
        Reader::with_decoder(source, Decoder::new())
    }

    /// A reader over a configured decoder.
    pub fn with_decoder(source: R, decoder: Decoder) -> Self {
        Reader {
            source,
            decoder,
            eof: false,
        }
    }

    /// The next envelope; `Ok(None)` at end of stream.
    pub fn read(&mut self) -> Result<Option<Envelope>> {
        loop {
            if self.eof {
                return self.decoder.finish();
            }
            if let Some(envelope) = self.decoder.next()? {
                return Ok(Some(envelope));
            }
            match self.source.read(self.decoder.spare()) {
                Ok(0) => {
                    self.decoder.filled(0);
                    self.eof = true;
                }
                Ok(n) => self.decoder.filled(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => self.decoder.filled(0),
                Err(e) => {
                    self.decoder.filled(0);
                    return Err(self.decoder.fail_io(e));
                }
            }
        }
    }
}

/// Writes envelopes to a blocking byte sink: one `write_all` of the whole line, then a flush. Share it between
/// threads behind a mutex so lines never interleave.
#[derive(Debug)]
pub struct Writer<W> {
    sink: W,
}

impl<W: Write> Writer<W> {
    /// A writer over `sink`.
    pub fn new(sink: W) -> Self {
        Writer { sink }
    }

    /// Encodes and writes one envelope; an oversized one is refused and nothing is written.
    pub fn write(&mut self, envelope: &Envelope) -> Result<()> {
        let line = encode(envelope)?;
        self.sink.write_all(&line)?;
        self.sink.flush()?;
        Ok(())
    }

    /// The sink back.
    pub fn into_inner(self) -> W {
        self.sink
    }
}
