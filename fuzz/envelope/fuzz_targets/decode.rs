//! Fuzz the envelope decoder.
//!
//! Input: arbitrary bytes. The first byte picks the read chunk size and whether a small line cap is used (so
//! over-long lines are reached); the rest is the stream. Besides "never panics", the target checks:
//! - framing does not depend on how the stream is cut into reads (whole vs chunked gives the same outcomes);
//! - every decoded envelope re-encodes to one line that decodes to an equal envelope (type, id, byte-identical
//!   data), and that line is compact JSON without a raw LF;
//! - every payload that decodes into its typed value survives serialise → deserialise unchanged.
#![no_main]

use iterion_envelope::{
    AskUser, AskUserAnswer, Cancel, Decoder, Envelope, Event, Hello, Task, TaskResult, ToolCall, ToolResult,
    encode_with_limit, kind,
};
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, stream)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(knobs & 0x3f) + 1;
    let limit = if knobs & 0x40 != 0 { 64 } else { iterion_envelope::LINE_CAP };

    let whole = outcomes(stream, stream.len().max(1), limit);
    let chunked = outcomes(stream, chunk, limit);
    assert_eq!(whole.rendered, chunked.rendered, "framing depends on read boundaries");

    for envelope in &whole.envelopes {
        let line = encode_with_limit(envelope, usize::MAX).expect("a decoded envelope encodes");
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1, "one LF, at the end");
        let mut decoder = Decoder::with_limit(usize::MAX);
        decoder.push(&line);
        let again = decoder.next().expect("re-encoded line decodes").expect("one envelope");
        assert_eq!(&again, envelope);
        typed_round_trip(envelope);
    }
});

struct Outcomes {
    rendered: Vec<String>,
    envelopes: Vec<Envelope>,
}

/// Feeds `stream` in `chunk`-sized reads and records every outcome until end of stream or an error.
fn outcomes(stream: &[u8], chunk: usize, limit: usize) -> Outcomes {
    let mut decoder = Decoder::with_limit(limit);
    let mut out = Outcomes {
        rendered: Vec::new(),
        envelopes: Vec::new(),
    };
    let record = |result: iterion_envelope::Result<Option<Envelope>>, out: &mut Outcomes| match result {
        Ok(Some(e)) => {
            out.rendered.push(format!("{} {:?} {:?}", e.kind(), e.id(), e.data_json()));
            out.envelopes.push(e);
            true
        }
        Ok(None) => false,
        Err(e) => {
            out.rendered.push(format!("error {e}"));
            false
        }
    };
    for piece in stream.chunks(chunk) {
        decoder.push(piece);
        while record(decoder.next(), &mut out) {}
        if out.rendered.last().is_some_and(|l| l.starts_with("error")) {
            return out;
        }
    }
    while record(decoder.finish(), &mut out) {}
    out
}

fn typed_round_trip(envelope: &Envelope) {
    match envelope.kind() {
        kind::HELLO => check::<Hello>(envelope),
        kind::TASK => check::<Task>(envelope),
        kind::TOOL_CALL => check::<ToolCall>(envelope),
        kind::TOOL_RESULT => check::<ToolResult>(envelope),
        kind::ASK_USER => check::<AskUser>(envelope),
        kind::ASK_USER_ANSWER => check::<AskUserAnswer>(envelope),
        kind::EVENT => check::<Event>(envelope),
        kind::RESULT => check::<TaskResult>(envelope),
        kind::CANCEL => check::<Cancel>(envelope),
        _ => {}
    }
}

/// A payload that decodes survives serialise → deserialise, through the envelope codec itself.
fn check<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(envelope: &Envelope) {
    let Ok(value) = envelope.decode::<T>() else {
        return;
    };
    let typed = Envelope::new(envelope.kind(), envelope.id().map(str::to_string), &value).expect("encodes");
    // Through serde_json::Value, so float text parsing cannot blur the comparison.
    let json: serde_json::Value = serde_json::from_str(typed.data_json().unwrap_or("null")).unwrap();
    let direct = serde_json::to_value(&value).unwrap();
    let back: T = serde_json::from_value(direct.clone()).expect("own encoding decodes");
    assert_eq!(back, value);
    assert_eq!(serde_json::to_value(&back).unwrap(), direct);
    assert_eq!(json.is_object(), direct.is_object());
}
