//! Any text as PTX for the CPU driver's reader of PTX text (`native-host/cpudriver/src/ptx_text.rs`,
//! compiled here from its own source, which needs nothing but std): launch bounds are read, and
//! the text linked with itself and with a part of itself, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../native-host/cpudriver/src/ptx_text.rs"]
mod ptx_text;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = ptx_text::bounds(text);
    let mut half = text.len() / 2;
    while !text.is_char_boundary(half) {
        half -= 1;
    }
    let (a, b) = text.split_at(half);
    let _ = ptx_text::link(&[a, b]);
    let _ = ptx_text::link(&[text, text, a]);
});
