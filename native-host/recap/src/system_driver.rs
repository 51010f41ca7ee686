//! The machine's real CUDA driver, found as the dynamic linker would find `libcuda.so.1`: what
//! `recap capture` and the Python package's in-process capture put behind the interposer.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `RECAP_REAL_LIBCUDA` when set, else `ldconfig`'s cache, then the usual folders; `None` when
/// the machine has no driver.
pub fn system_driver() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(shared::capture::env::REAL_DRIVER) {
        return Some(PathBuf::from(p));
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(out) = Command::new("ldconfig").arg("-p").output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let line = line.trim();
            if line.starts_with("libcuda.so.1 ") && line.contains("x86-64") {
                if let Some((_, path)) = line.rsplit_once("=> ") {
                    candidates.push(PathBuf::from(path.trim()));
                }
            }
        }
    }
    for dir in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/local/nvidia/lib64",
        "/usr/lib/wsl/lib",
        "/usr/local/cuda/compat",
    ] {
        candidates.push(Path::new(dir).join("libcuda.so.1"));
    }
    candidates.into_iter().find(|p| p.is_file()).and_then(|p| p.canonicalize().ok())
}
