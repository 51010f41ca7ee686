//! Any bytes as the readable memory at an ELF image's address (what the interposer sees behind a
//! pointer a program handed the driver): `shared::fatbin::elf_len` gives a length inside those
//! bytes, at least the header's, or an error; it never panics and never reads past them. The same
//! bytes' function names (`elf_function_names`, how a cubin is matched to a PTX file) are read too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::fatbin;

fuzz_target!(|data: &[u8]| {
    if let Ok(len) = fatbin::elf_len(data) {
        assert!((64..=data.len() as u64).contains(&len), "{len} of {} bytes", data.len());
        assert!(fatbin::elf_header_len(data).is_some_and(|h| h <= len));
    }
    if let Ok(names) = fatbin::elf_function_names(data) {
        assert!(names.iter().map(|n| n.len()).sum::<usize>() <= data.len());
    }
});
