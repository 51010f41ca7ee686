//! Any bytes as a fat binary and as a code image: `shared::fatbin` returns an error or entries,
//! never panics, and no entry grows past the decompression limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::fatbin;

fuzz_target!(|data: &[u8]| {
    let _ = fatbin::image_kind(data);
    let _ = fatbin::container_len(data);
    let _ = fatbin::elf_header_len(data);
    let Ok(entries) = fatbin::parse(data) else { return };
    for e in &entries {
        assert!(e.payload.len() as u64 <= fatbin::MAX_ENTRY_BYTES);
        let _ = e.ptx();
    }
});
