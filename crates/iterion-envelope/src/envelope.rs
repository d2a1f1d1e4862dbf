//! The envelope header: `{"type", "id"?, "data"?}` with `data` kept as raw JSON.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::{Error, Result};

/// One envelope. `data` is the payload's JSON text exactly as received (or as encoded), decoded on demand with
/// [`Envelope::decode`].
#[derive(Debug, Clone)]
pub struct Envelope {
    kind: String,
    id: Option<String>,
    data: Option<Box<RawValue>>,
}

impl PartialEq for Envelope {
    /// Same type, same id and byte-identical data.
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.id == other.id && self.data_json() == other.data_json()
    }
}

impl Eq for Envelope {}

#[derive(Serialize)]
struct WireOut<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a RawValue>,
}

/// The header as decoded; `type` and `id` are checked by hand so the errors can say what is wrong.
#[derive(Deserialize)]
pub(crate) struct WireIn {
    #[serde(rename = "type", default)]
    kind: Option<serde_json::Value>,
    #[serde(default)]
    id: Option<serde_json::Value>,
    #[serde(default)]
    data: Option<Box<RawValue>>,
}

impl WireIn {
    /// The envelope, or why the header is unusable.
    pub(crate) fn into_envelope(self) -> std::result::Result<Envelope, &'static str> {
        let kind = match self.kind {
            Some(serde_json::Value::String(s)) => s,
            Some(_) => return Err("`type` is not a string"),
            None => return Err("`type` is missing"),
        };
        let id = match self.id {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s),
            Some(_) => return Err("`id` is not a string"),
        };
        Ok(Envelope::from_raw(kind, id, self.data))
    }
}

impl Envelope {
    /// An envelope from raw parts; an empty `id` is treated as absent.
    pub fn from_raw(kind: impl Into<String>, id: Option<String>, data: Option<Box<RawValue>>) -> Self {
        Envelope {
            kind: kind.into(),
            id: id.filter(|i| !i.is_empty()),
            data,
        }
    }

    /// An envelope whose data is `payload` serialised compactly.
    pub fn new(kind: impl Into<String>, id: Option<String>, payload: &impl Serialize) -> Result<Self> {
        let kind = kind.into();
        let data = serde_json::value::to_raw_value(payload).map_err(|source| Error::Encode {
            kind: kind.clone(),
            source,
        })?;
        Ok(Envelope::from_raw(kind, id, Some(data)))
    }

    /// An envelope without id or data.
    pub fn bare(kind: impl Into<String>) -> Self {
        Envelope::from_raw(kind, None, None)
    }

    /// The header's `type`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The correlation id, never empty.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The raw payload.
    pub fn data(&self) -> Option<&RawValue> {
        self.data.as_deref()
    }

    /// The payload's JSON text, byte for byte.
    pub fn data_json(&self) -> Option<&str> {
        self.data.as_deref().map(RawValue::get)
    }

    /// Decodes the payload; a missing payload decodes like `null`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        let json = self.data_json().unwrap_or("null");
        serde_json::from_str(json).map_err(|e| Error::Data {
            kind: self.kind.clone(),
            detail: e.to_string(),
        })
    }

    /// Appends the envelope's line (compact JSON, no LF) to `out`.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        let wire = WireOut {
            kind: &self.kind,
            id: self.id.as_deref(),
            data: self.data.as_deref(),
        };
        // Strings and raw JSON serialise infallibly into a Vec.
        serde_json::to_writer(out, &wire).expect("an envelope header always serialises");
    }
}
