//! The JSONC reader and the devcontainer loader never panic, whatever the input.

mod devc_common;

use iterion_spec::devcontainer::parse_jsonc;
use proptest::prelude::*;

/// Fragments that steer random input towards interesting JSONC shapes.
fn jsonc_like() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just(",".to_owned()),
        Just(":".to_owned()),
        Just("\"image\"".to_owned()),
        Just("\"mounts\"".to_owned()),
        Just("\"build\"".to_owned()),
        Just("\"runArgs\"".to_owned()),
        Just("\"${localEnv:HOME}\"".to_owned()),
        Just("/*".to_owned()),
        Just("*/".to_owned()),
        Just("//".to_owned()),
        Just("\n".to_owned()),
        Just("\"\\u".to_owned()),
        Just("\\".to_owned()),
        Just("-1.5e3".to_owned()),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("\u{feff}".to_owned()),
        "[ -~]{0,4}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(atom, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn jsonc_reader_never_panics(text in jsonc_like()) {
        if let Err(e) = parse_jsonc(&text) {
            prop_assert!(e.pos.line >= 1 && e.pos.col >= 1);
        }
    }

    #[test]
    fn loader_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let out = devc_common::load_bytes(&bytes);
        prop_assert!(out.spec.is_none() || !iterion_spec::diag::has_errors(&out.diagnostics));
    }

    #[test]
    fn loader_never_panics_on_jsonc(text in jsonc_like()) {
        let out = devc_common::load_bytes(text.as_bytes());
        for d in &out.diagnostics {
            prop_assert!(d.line >= 1 && d.col >= 1);
        }
    }

    #[test]
    fn valid_json_reads_like_serde_json(v in arb_json()) {
        let text = serde_json::to_string_pretty(&v).unwrap();
        let parsed = parse_jsonc(&text);
        prop_assert!(parsed.is_ok(), "{text}: {parsed:?}");
    }
}

fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i32>().prop_map(serde_json::Value::from),
        ".*".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}
