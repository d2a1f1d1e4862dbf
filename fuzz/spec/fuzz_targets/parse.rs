//! The workflow front end on arbitrary bytes: lex + parse + compile must never panic, and every diagnostic
//! must carry a 1-based position.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let checked = iterion_spec::check_bytes(data, "fuzz.bot");
    for d in &checked.diagnostics {
        assert!(d.line >= 1 && d.col >= 1, "diagnostic without a position: {d:?}");
    }
});
