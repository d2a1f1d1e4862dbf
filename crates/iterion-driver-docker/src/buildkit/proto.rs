//! The few protocol buffers and gRPC frames a build session exchanges, encoded and decoded by hand: the
//! messages are a handful of fields, and a generated codec (prost, tonic) would cost more to compile than the
//! whole session.
//!
//! - `grpc.health.v1`: `HealthCheckRequest {string service = 1}`, `HealthCheckResponse {enum status = 1}`
//!   (`SERVING = 1`).
//! - `moby.buildkit.secrets.v1`: `GetSecretRequest {string ID = 1; map<string,string> annotations = 2}`,
//!   `GetSecretResponse {bytes data = 1}`.
//! - `moby.filesync.v1.Auth`: `CredentialsRequest {string Host = 1}`,
//!   `CredentialsResponse {string Username = 1; string Secret = 2}`.
//! - `moby.buildkit.v1.StatusResponse` (the `moby.buildkit.trace` progress of a build): the vertex names,
//!   states and logs, the rest skipped.
//!
//! A gRPC message travels as a 5-byte prefix (compressed flag, big-endian `u32` length) and the message.

/// A wire value of one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2 (strings, bytes, embedded messages, packed repeated fields).
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The message ends inside a field.
    #[error("truncated message")]
    Truncated,
    /// A varint longer than ten bytes.
    #[error("malformed varint")]
    Varint,
    /// Wire types 3, 4 (groups), 6 and 7.
    #[error("unsupported wire type {0}")]
    WireType(u8),
}

/// Reads a varint at the start of `b`: the value and the bytes it took.
pub fn read_varint(b: &[u8]) -> Result<(u64, usize), DecodeError> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    if b.len() < 10 {
        Err(DecodeError::Truncated)
    } else {
        Err(DecodeError::Varint)
    }
}

/// Appends `v` as a varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-delimited field.
pub fn put_bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    put_varint(out, u64::from(field) << 3 | 2);
    put_varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// The fields of a message, in order: `(number, value)`.
pub fn fields(mut b: &[u8]) -> Result<Vec<(u32, Value<'_>)>, DecodeError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (key, n) = read_varint(b)?;
        b = &b[n..];
        let number = u32::try_from(key >> 3).map_err(|_| DecodeError::Varint)?;
        let value = match (key & 7) as u8 {
            0 => {
                let (v, n) = read_varint(b)?;
                b = &b[n..];
                Value::Varint(v)
            }
            1 => {
                let (v, rest) = b.split_first_chunk::<8>().ok_or(DecodeError::Truncated)?;
                b = rest;
                Value::Fixed64(u64::from_le_bytes(*v))
            }
            2 => {
                let (len, n) = read_varint(b)?;
                b = &b[n..];
                let len = usize::try_from(len).map_err(|_| DecodeError::Truncated)?;
                if b.len() < len {
                    return Err(DecodeError::Truncated);
                }
                let (v, rest) = b.split_at(len);
                b = rest;
                Value::Bytes(v)
            }
            5 => {
                let (v, rest) = b.split_first_chunk::<4>().ok_or(DecodeError::Truncated)?;
                b = rest;
                Value::Fixed32(u32::from_le_bytes(*v))
            }
            w => return Err(DecodeError::WireType(w)),
        };
        out.push((number, value));
    }
    Ok(out)
}

/// The last string (or bytes) field `number` of a message, lossily as UTF-8.
fn string_field(msg: &[u8], number: u32) -> Result<Option<String>, DecodeError> {
    Ok(fields(msg)?
        .into_iter()
        .filter_map(|(n, v)| match v {
            Value::Bytes(b) if n == number => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .next_back())
}

/// The `ID` of a `GetSecretRequest`.
pub fn secret_request_id(msg: &[u8]) -> Result<String, DecodeError> {
    Ok(string_field(msg, 1)?.unwrap_or_default())
}

/// A `GetSecretResponse` carrying `data`.
pub fn secret_response(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 6);
    put_bytes(&mut out, 1, data);
    out
}

/// A `HealthCheckResponse` with status `SERVING`.
pub fn health_serving() -> Vec<u8> {
    vec![0x08, 0x01]
}

/// The `Host` of a `CredentialsRequest`.
pub fn credentials_request_host(msg: &[u8]) -> Result<String, DecodeError> {
    Ok(string_field(msg, 1)?.unwrap_or_default())
}

/// A `CredentialsResponse` (empty strings: anonymous).
pub fn credentials_response(username: &str, secret: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if !username.is_empty() {
        put_bytes(&mut out, 1, username.as_bytes());
    }
    if !secret.is_empty() {
        put_bytes(&mut out, 2, secret.as_bytes());
    }
    out
}

/// Frames `msg` as one uncompressed gRPC message.
pub fn grpc_frame(msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 5);
    out.push(0);
    out.extend_from_slice(&u32::try_from(msg.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

/// Why a gRPC request body is not one message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than the prefix announces.
    #[error("truncated grpc message")]
    Truncated,
    /// The compressed flag is set; the session never negotiates compression.
    #[error("compressed grpc message")]
    Compressed,
    /// A message larger than the bound.
    #[error("grpc message of {0} bytes is too large")]
    TooLarge(usize),
}

/// Bytes of a request message the session accepts (requests are a few names).
pub const MAX_REQUEST: usize = 64 * 1024;

/// The first message of a gRPC request body: `Ok(None)` while more bytes are needed.
pub fn grpc_unframe(buf: &[u8]) -> Result<Option<&[u8]>, FrameError> {
    let Some((head, rest)) = buf.split_first_chunk::<5>() else {
        return Ok(None);
    };
    if head[0] != 0 {
        return Err(FrameError::Compressed);
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_REQUEST {
        return Err(FrameError::TooLarge(len));
    }
    Ok(rest.get(..len))
}

/// One vertex (build step) of a `StatusResponse`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vertex {
    /// Its digest (identity across updates).
    pub digest: String,
    /// Its name (`[2/3] RUN make`).
    pub name: String,
    /// Answered from the cache.
    pub cached: bool,
    /// Has started.
    pub started: bool,
    /// Has completed.
    pub completed: bool,
    /// Its error, when it failed.
    pub error: String,
}

/// A log chunk of a vertex.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VertexLog {
    /// The vertex's digest.
    pub vertex: String,
    /// The bytes written.
    pub msg: Vec<u8>,
}

/// What a `StatusResponse` says, as far as progress lines need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Vertex updates.
    pub vertexes: Vec<Vertex>,
    /// Log chunks.
    pub logs: Vec<VertexLog>,
}

fn vertex(msg: &[u8]) -> Result<Vertex, DecodeError> {
    let mut v = Vertex::default();
    for (n, f) in fields(msg)? {
        match (n, f) {
            (1, Value::Bytes(b)) => v.digest = String::from_utf8_lossy(b).into_owned(),
            (3, Value::Bytes(b)) => v.name = String::from_utf8_lossy(b).into_owned(),
            (4, Value::Varint(c)) => v.cached = c != 0,
            (5, Value::Bytes(_)) => v.started = true,
            (6, Value::Bytes(_)) => v.completed = true,
            (7, Value::Bytes(b)) => v.error = String::from_utf8_lossy(b).into_owned(),
            _ => {}
        }
    }
    Ok(v)
}

fn vertex_log(msg: &[u8]) -> Result<VertexLog, DecodeError> {
    let mut l = VertexLog::default();
    for (n, f) in fields(msg)? {
        match (n, f) {
            (1, Value::Bytes(b)) => l.vertex = String::from_utf8_lossy(b).into_owned(),
            (4, Value::Bytes(b)) => l.msg = b.to_vec(),
            _ => {}
        }
    }
    Ok(l)
}

/// Decodes a `moby.buildkit.v1.StatusResponse` (`vertexes = 1`, `logs = 3`; statuses and warnings skipped).
pub fn status(msg: &[u8]) -> Result<Status, DecodeError> {
    let mut s = Status::default();
    for (n, f) in fields(msg)? {
        match (n, f) {
            (1, Value::Bytes(b)) => s.vertexes.push(vertex(b)?),
            (3, Value::Bytes(b)) => s.logs.push(vertex_log(b)?),
            _ => {}
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(read_varint(&b), Ok((v, b.len())), "{v}");
        }
        assert_eq!(read_varint(&[0x80, 0x80]), Err(DecodeError::Truncated));
        assert_eq!(read_varint(&[0xff; 11]), Err(DecodeError::Varint));
        // 300 is the example of the protobuf encoding guide
        let mut b = Vec::new();
        put_varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
    }

    #[test]
    fn secret_messages() {
        // GetSecretRequest{ID: "tok", annotations: {"a": "b"}} as Go's protobuf encodes it
        let mut req = Vec::new();
        put_bytes(&mut req, 1, b"tok");
        let mut entry = Vec::new();
        put_bytes(&mut entry, 1, b"a");
        put_bytes(&mut entry, 2, b"b");
        put_bytes(&mut req, 2, &entry);
        assert_eq!(req[..5], [0x0a, 0x03, b't', b'o', b'k']);
        assert_eq!(secret_request_id(&req).as_deref(), Ok("tok"));
        assert_eq!(secret_request_id(&[]).as_deref(), Ok(""));
        assert_eq!(
            secret_request_id(&[0x0a, 0x05, b'x']),
            Err(DecodeError::Truncated)
        );
        assert_eq!(secret_response(b"hi"), [0x0a, 0x02, b'h', b'i']);
        let big = vec![7u8; 200];
        let r = secret_response(&big);
        assert_eq!(r[..3], [0x0a, 0xc8, 0x01]);
        assert_eq!(fields(&r), Ok(vec![(1, Value::Bytes(&big[..]))]));
        assert_eq!(health_serving(), [0x08, 0x01]);
        assert_eq!(fields(&[0x0b]), Err(DecodeError::WireType(3)));
    }

    #[test]
    fn credentials_messages() {
        let mut req = Vec::new();
        put_bytes(&mut req, 1, b"registry.example:5000");
        assert_eq!(
            credentials_request_host(&req).as_deref(),
            Ok("registry.example:5000")
        );
        let r = credentials_response("jo", "pw");
        assert_eq!(r, [0x0a, 2, b'j', b'o', 0x12, 2, b'p', b'w']);
        assert!(credentials_response("", "").is_empty());
    }

    #[test]
    fn grpc_framing() {
        let f = grpc_frame(b"abc");
        assert_eq!(f, [0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(grpc_unframe(&f), Ok(Some(&b"abc"[..])));
        assert_eq!(grpc_unframe(&f[..4]), Ok(None));
        assert_eq!(grpc_unframe(&f[..7]), Ok(None));
        assert_eq!(grpc_unframe(&[1, 0, 0, 0, 0]), Err(FrameError::Compressed));
        assert_eq!(
            grpc_unframe(&[0, 0, 0x10, 0, 1]),
            Err(FrameError::TooLarge(0x10_0001))
        );
        assert_eq!(grpc_unframe(&grpc_frame(&[])), Ok(Some(&[][..])));
    }

    #[test]
    fn status_response() {
        // Vertex{digest:"sha256:1", name:"[1/2] RUN x", cached:true, started:{}, completed:{}, error:"boom"}
        let mut v = Vec::new();
        put_bytes(&mut v, 1, b"sha256:1");
        put_bytes(&mut v, 2, b"sha256:0"); // inputs, skipped
        put_bytes(&mut v, 3, b"[1/2] RUN x");
        v.extend_from_slice(&[0x20, 0x01]);
        put_bytes(&mut v, 5, &[0x08, 0x01]);
        put_bytes(&mut v, 6, &[0x08, 0x02]);
        put_bytes(&mut v, 7, b"boom");
        let mut log = Vec::new();
        put_bytes(&mut log, 1, b"sha256:1");
        put_bytes(&mut log, 2, &[0x08, 0x01]);
        log.extend_from_slice(&[0x18, 0x01]);
        put_bytes(&mut log, 4, b"hello\n");
        let mut msg = Vec::new();
        put_bytes(&mut msg, 1, &v);
        put_bytes(&mut msg, 2, b"\x0a\x01x"); // a VertexStatus, skipped
        put_bytes(&mut msg, 3, &log);
        let s = status(&msg).expect("decodes");
        assert_eq!(
            s.vertexes,
            [Vertex {
                digest: "sha256:1".into(),
                name: "[1/2] RUN x".into(),
                cached: true,
                started: true,
                completed: true,
                error: "boom".into(),
            }]
        );
        assert_eq!(
            s.logs,
            [VertexLog {
                vertex: "sha256:1".into(),
                msg: b"hello\n".to_vec(),
            }]
        );
        assert_eq!(status(&msg[..msg.len() - 1]), Err(DecodeError::Truncated));
    }
}
