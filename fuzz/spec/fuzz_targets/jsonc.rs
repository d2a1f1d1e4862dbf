//! The devcontainer.json reader on arbitrary bytes: it must never panic, and every diagnostic must carry a
//! 1-based position inside the file.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (_file, diags) = iterion_spec::devcontainer::parse(data, ".devcontainer/devcontainer.json");
    for d in &diags {
        assert!(d.line >= 1 && d.col >= 1, "diagnostic without a position: {d:?}");
    }
});
