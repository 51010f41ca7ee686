//! `RECAP_JIT_DUMP=DIR`: the native code of every kernel the CPU engine compiles, written into
//! `DIR` as `NAME.one.s`/`NAME.group.s` (Cranelift's listing, its first line the address the code
//! was loaded at) and the machine code as `NAME.one.bin`/`NAME.group.bin`, for reading it or
//! matching a `perf` profile against it.

use std::path::PathBuf;

use shared::ptx::JitDump;

/// A sink that writes into the folder `RECAP_JIT_DUMP` names, or `None` when it is not set.
pub fn from_env() -> Option<JitDump> {
    let dir = PathBuf::from(std::env::var_os("RECAP_JIT_DUMP")?);
    Some(JitDump::new(move |name, code, listing| {
        // Best effort: a folder that cannot be written loses the listing, never the kernel.
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join(format!("{name}.bin")), code);
        let _ = std::fs::write(dir.join(format!("{name}.s")), listing);
    }))
}
