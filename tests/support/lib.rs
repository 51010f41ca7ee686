//! Helpers shared by the end-to-end tests.
//!
//! Finding the `recap` binary: `CARGO_BIN_EXE_recap` exists only for tests of the `recap` package
//! itself, so [`recap_bin`] looks in this order:
//! 1. `RECAP_BIN`, when set (the GPU machine runs staged, prebuilt binaries and has no cargo);
//! 2. when the tests run under cargo (`CARGO` is set at run time), `cargo build -p recap-cli --bin recap`
//!    into the same target dir and profile as this test executable, once per test process, so a
//!    `cargo test -p recap-tests` never runs a stale binary;
//! 3. `target/<profile>/recap` beside this test executable's `deps/` folder.
//!
//! [`cdylib`] finds a workspace package's C library (the CPU CUDA driver, for one) the same way:
//! beside `RECAP_BIN`, else built by cargo, else in `target/<profile>/`.

pub mod archive;
pub mod browser;
pub mod cluster;
pub mod server;
pub mod services;
pub mod static_server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

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
        let bin = built("recap-cli", &["--bin", "recap"], &format!("recap{}", std::env::consts::EXE_SUFFIX));
        assert!(bin.is_file(), "no recap binary at {}; build it or set RECAP_BIN", bin.display());
        bin
    })
    .clone()
}

/// The C library (`cdylib`) `lib` of workspace package `package`, e.g.
/// `cdylib("recap-cpudriver", "recap_cpudriver")` is the path of `librecap_cpudriver.so` (see the
/// module docs for how it is found).
pub fn cdylib(package: &str, lib: &str) -> PathBuf {
    static LIBS: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut libs = LIBS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, path)) = libs.iter().find(|(p, _)| p == package) {
        return path.clone();
    }
    let file = format!("{}{lib}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    let path = match std::env::var_os("RECAP_BIN") {
        Some(bin) => Path::new(&bin).parent().expect("the folder of RECAP_BIN").join(&file),
        None => built(package, &["--lib"], &file),
    };
    assert!(path.is_file(), "no {file} of {package} at {}; build it or stage it beside RECAP_BIN", path.display());
    libs.push((package.to_string(), path.clone()));
    path
}

/// `target/<profile>/FILE` beside this test executable, after `cargo build -p PACKAGE TARGET...`
/// into the same target dir and profile when the tests run under cargo (`CARGO` is set at run time),
/// so that a `cargo test -p recap-tests` never runs a stale build.
fn built(package: &str, target: &[&str], file: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/e2e-HASH
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps");
    if let Some(cargo) = std::env::var_os("CARGO") {
        let target_dir = profile_dir.parent().expect("target dir");
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", package]).args(target).arg("--target-dir").arg(target_dir);
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => drop(cmd.arg("--release")),
            Some(other) => drop(cmd.args(["--profile", other])),
            None => {}
        }
        let status = cmd.current_dir(repo_root()).status().expect("running cargo build");
        assert!(status.success(), "cargo build -p {package} failed: {status}");
    }
    profile_dir.join(file)
}

/// `len` incompressible bytes from `seed` as a `Read` (xorshift64, eight bytes a step): test data
/// that lz4 cannot shrink, of any size, without holding it.
pub struct Noise {
    state: u64,
    left: u64,
}

impl Noise {
    pub fn new(len: u64, seed: u64) -> Noise {
        Noise { state: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1, left: len }
    }
}

impl std::io::Read for Noise {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize;
        for chunk in buf[..n].chunks_mut(8) {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            chunk.copy_from_slice(&self.state.to_le_bytes()[..chunk.len()]);
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// `len` bytes of [`Noise`] from `seed`, held.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len);
    std::io::Read::read_to_end(&mut Noise::new(len as u64, seed), &mut bytes).expect("noise never fails");
    bytes
}

/// Streams to `path` an archive of one `size`-byte region of [`Noise`] (and a memset, so it has an
/// op), never holding the region: the archives of the big-upload tests and benchmarks.
pub fn write_noise_archive(path: &Path, size: u64, seed: u64) {
    use shared::archive::{ArchiveWriter, DType, MemsetOp, RegionDecl};
    let file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).expect("creating the archive"));
    let mut w = ArchiveWriter::new(file).expect("archive writer");
    let r = w.add_region(RegionDecl::new("payload", size, DType::U8)).expect("region");
    w.set_initial(r, &mut Noise::new(size, seed)).expect("the region's bytes");
    w.memset(MemsetOp { region: r, offset: 0, len: 8, width: 8, pattern: seed }).expect("memset");
    w.finish().expect("writing the archive");
}
