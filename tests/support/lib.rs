//! Helpers shared by the end-to-end tests.
//!
//! Finding the `recap` binary: `CARGO_BIN_EXE_recap` exists only for tests of the `recap` package
//! itself, so [`recap_bin`] looks in this order:
//! 1. `RECAP_BIN`, when set (the GPU machine runs staged, prebuilt binaries and has no cargo);
//! 2. when the tests run under cargo (`CARGO` is set at run time), `cargo build -p recap-cli --bin recap`
//!    into the same target dir and profile as this test executable, once per test process, so a
//!    `cargo test -p recap-tests` never runs a stale binary;
//! 3. `target/<profile>/recap` beside this test executable's `deps/` folder.

pub mod archive;
pub mod browser;
pub mod cluster;
pub mod server;
pub mod services;
pub mod static_server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The corpus of real cases: `RECAP_CORPUS`, or `tests/corpus` in the repository.
pub fn corpus_dir() -> PathBuf {
    match std::env::var_os("RECAP_CORPUS") {
        Some(dir) => PathBuf::from(dir),
        None => repo_root().join("tests/corpus"),
    }
}

/// The repository root: found upwards from the current directory (cargo runs tests in the package
/// folder) by the workspace's `Cargo.toml` next to `shared/`.
pub fn repo_root() -> PathBuf {
    let cwd = std::env::current_dir().expect("current dir");
    cwd.ancestors()
        .find(|d| d.join("shared").is_dir() && d.join("Cargo.toml").is_file() && d.join("native-host").is_dir())
        .unwrap_or(&cwd)
        .to_path_buf()
}

/// Every case folder of the corpus (`<producer>/<case>/case.json`), sorted.
pub fn corpus_cases() -> Vec<PathBuf> {
    let mut cases = Vec::new();
    let root = corpus_dir();
    for producer in std::fs::read_dir(&root).unwrap_or_else(|e| panic!("corpus {}: {e}", root.display())) {
        let producer = producer.unwrap().path();
        let Ok(entries) = std::fs::read_dir(&producer) else { continue };
        for case in entries {
            let case = case.unwrap().path();
            if case.join("case.json").is_file() {
                cases.push(case);
            }
        }
    }
    cases.sort();
    cases
}

/// The `recap` binary to run (see the module docs for how it is found).
pub fn recap_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("RECAP_BIN") {
            return PathBuf::from(bin);
        }
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/e2e-HASH
        let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps");
        let bin = profile_dir.join(format!("recap{}", std::env::consts::EXE_SUFFIX));
        if let Some(cargo) = std::env::var_os("CARGO") {
            build_recap(Path::new(&cargo), profile_dir);
        }
        assert!(bin.is_file(), "no recap binary at {}; build it or set RECAP_BIN", bin.display());
        bin
    })
    .clone()
}

fn build_recap(cargo: &Path, profile_dir: &Path) {
    let target_dir = profile_dir.parent().expect("target dir");
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "recap-cli", "--bin", "recap", "--target-dir"]).arg(target_dir);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => drop(cmd.arg("--release")),
        Some(other) => drop(cmd.args(["--profile", other])),
        None => {}
    }
    let status = cmd.current_dir(repo_root()).status().expect("running cargo build for the recap binary");
    assert!(status.success(), "cargo build -p recap-cli failed: {status}");
}

/// `len` incompressible bytes from `seed` (xorshift64, one byte per step): test data that lz4 cannot
/// shrink, without storing any.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}
