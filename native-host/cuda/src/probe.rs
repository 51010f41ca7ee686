//! Naming the op that faulted when the fault took the whole process's CUDA context with it.
//!
//! The driver can keep a kernel fault (illegal address, trap) for the rest of the process: no
//! context can be made again on any device. The op is then found by a child process, `recap
//! cuda-probe FILE`, which replays the archive op by op and waits after each.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use shared::archive::OpId;

/// How this process runs the probe in another one: given the GPU's ordinal, an archive file and
/// how many replays to try, the op that faulted and its label, if one did. The program that
/// knows how to run itself as the probe (the `recap` binary: `recap cuda-probe`) sets it.
pub type ChildProbe = dyn Fn(usize, &Path, u64) -> Option<(OpId, String)> + Send + Sync;

static CHILD_PROBE: OnceLock<Box<ChildProbe>> = OnceLock::new();

/// Sets how faults are probed in a child process, once per process; `false` when one was set
/// already (the first stays). Without one, a fault that took the process's context leaves its
/// op unnamed.
pub fn set_child_probe(probe: Box<ChildProbe>) -> bool {
    CHILD_PROBE.set(probe).is_ok()
}

/// Replays `bytes` in a child process to find the faulting op.
pub fn locate_in_child(ordinal: usize, bytes: &[u8], iterations: u64) -> Option<(OpId, String)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let probe = CHILD_PROBE.get()?;
    let file = std::env::temp_dir().join(format!(
        "recap-probe-{}-{}.recap",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, bytes).ok()?;
    let found = probe(ordinal, &file, iterations.max(1));
    std::fs::remove_file(&file).ok();
    found
}
