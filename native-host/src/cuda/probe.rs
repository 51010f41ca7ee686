//! Naming the op that faulted when the fault took the whole process's CUDA context with it.
//!
//! The driver can keep a kernel fault (illegal address, trap) for the rest of the process: no
//! context can be made again on any device. The op is then found by a child process, `recap
//! cuda-probe FILE`, which replays the archive op by op and waits after each.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use shared::archive::OpId;

/// The `recap` binary to run the probe with: `RECAP_BIN`, else this executable if it is `recap`,
/// else a `recap` beside it (or beside its folder, for test executables under `deps/`).
pub fn probe_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("RECAP_BIN") {
        return Some(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().ok()?;
    if exe.file_stem().is_some_and(|s| s == "recap") {
        return Some(exe);
    }
    let name = format!("recap{}", std::env::consts::EXE_SUFFIX);
    exe.ancestors().skip(1).take(2).map(|d| d.join(&name)).find(|p| p.is_file())
}

/// Replays `bytes` in a child process to find the faulting op.
pub fn locate_in_child(ordinal: usize, bytes: &[u8], iterations: u64) -> Option<(OpId, String)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let bin = probe_binary()?;
    let file = std::env::temp_dir().join(format!(
        "recap-probe-{}-{}.recap",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, bytes).ok()?;
    let out = Command::new(bin)
        .arg("cuda-probe")
        .arg(&file)
        .args(["--device", &format!("cuda:{ordinal}"), "--iterations", &iterations.max(1).to_string()])
        .output();
    std::fs::remove_file(&file).ok();
    let out = out.ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some((v["op"].as_u64()? as OpId, v["label"].as_str()?.to_owned()))
}
