//! The probe that names a faulting op from a child process, run as `recap cuda-probe`: what the
//! `recap` binary (and tests that know where it is) hand to the CUDA backend with
//! [`crate::cuda::probe::set_child_probe`].

use std::path::{Path, PathBuf};
use std::process::Command;

use shared::archive::OpId;

/// Runs `bin cuda-probe FILE --device cuda:N --iterations K` and reads the op from its JSON line.
pub fn recap_binary(bin: PathBuf) -> Box<crate::cuda::probe::ChildProbe> {
    Box::new(move |ordinal: usize, file: &Path, iterations: u64| -> Option<(OpId, String)> {
        let out = Command::new(&bin)
            .arg("cuda-probe")
            .arg(file)
            .args(["--device", &format!("cuda:{ordinal}"), "--iterations", &iterations.to_string()])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        Some((v["op"].as_u64()? as OpId, v["label"].as_str()?.to_owned()))
    })
}

/// Registers [`recap_binary`] for this executable when it is the `recap` binary.
pub fn install_for_this_executable() {
    if let Ok(exe) = std::env::current_exe() {
        crate::cuda::probe::set_child_probe(recap_binary(exe));
    }
}
