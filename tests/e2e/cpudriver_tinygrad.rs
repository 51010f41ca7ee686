//! tinygrad's own tests on the CPU driver: `recap run --cpu -- python -m unittest test_tiny...`
//! with `DEV=CUDA`, tinygrad's CUDA backend (ctypes to `libcuda`, kernels compiled by NVRTC to
//! PTX). tinygrad 0.14.0 and NVRTC come from PyPI into a virtual environment under
//! `target/tinygrad-venv`, made here when it is missing (`nvidia-cuda-runtime` brings the headers
//! NVRTC includes for half floats); `test_tiny.py`, tinygrad's self-contained tests of its
//! external functionality (ops, a matmul, reductions, randomness, its JIT, BEAM search, symbolic
//! shapes, a small convolutional network forward and backward), comes from the same version's
//! source distribution. Where PyPI cannot be reached the test says so on stderr and passes
//! without running anything, as the numba suite does (docs/CPU-DRIVER.md, "tinygrad").

use std::path::{Path, PathBuf};
use std::process::Command;

use recap_tests::{cdylib, recap_bin, repo_root};

use crate::cpudriver::text;

const TINYGRAD: &str = "tinygrad==0.14.0";

/// The tests of `test_tiny.TestTiny` that run: all but `test_const` and `test_eye`, which run on
/// tinygrad's own CPU device (a host-side constant kernel compiled with clang, not the CUDA
/// driver), and the two image tests tinygrad runs only on OpenCL.
const TESTS: &[&str] = &[
    "test_copy",
    "test_elu",
    "test_plus",
    "test_plus_int",
    "test_plus_big",
    "test_cat",
    "test_sum",
    "test_gemm",
    "test_hgemm",
    "test_gemv",
    "test_random",
    "test_jit",
    "test_beam",
    "test_symbolic",
    "test_symbolic_reduce",
    "test_mnist",
    "test_mnist_backward",
];

/// The virtual environment's python and the folder holding `test_tiny.py`; `None` where they
/// cannot be made.
fn venv() -> Option<(PathBuf, PathBuf)> {
    let venv = repo_root().join("target/tinygrad-venv");
    let python = venv.join("bin/python");
    let tests = venv.join("tinygrad-tests");
    let ready = |python: &Path| {
        tests.join("test_tiny.py").is_file()
            && Command::new(python)
                .args(["-c", "import tinygrad, numpy, nvidia.cu13"])
                .output()
                .is_ok_and(|o| o.status.success())
    };
    if ready(&python) {
        return Some((python, tests));
    }
    let made = python.is_file()
        || Command::new("python3").arg("-m").arg("venv").arg(&venv).status().is_ok_and(|s| s.success());
    let pip = |args: &[&str]| {
        Command::new(&python).args(["-m", "pip", "--quiet"]).args(args).status().is_ok_and(|s| s.success())
    };
    let sdist = venv.join("sdist");
    let sdist_arg = sdist.to_string_lossy().into_owned();
    let installed = made
        && pip(&["install", TINYGRAD, "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "numpy"])
        && pip(&["download", "--no-deps", "--no-binary", ":all:", "-d", &sdist_arg, TINYGRAD]);
    // The source distribution's test/test_tiny.py, taken out with Python's own tarfile.
    let unpack = format!(
        "import glob, tarfile\n\
         t = tarfile.open(glob.glob({sdist:?} + '/tinygrad-*.tar.gz')[0])\n\
         m = next(m for m in t.getmembers() if m.name.endswith('/test/test_tiny.py'))\n\
         open({dest:?}, 'wb').write(t.extractfile(m).read())\n",
        sdist = sdist_arg,
        dest = tests.join("test_tiny.py").to_string_lossy(),
    );
    let unpacked = installed
        && std::fs::create_dir_all(&tests).is_ok()
        && Command::new(&python).args(["-c", &unpack]).status().is_ok_and(|s| s.success());
    if !unpacked || !ready(&python) {
        eprintln!(
            "skipped: tinygrad could not be installed into {} (is PyPI reachable?); tinygrad's tests did not run",
            venv.display()
        );
        return None;
    }
    Some((python, tests))
}

#[test]
fn tinygrad_test_tiny_passes_on_the_cpu_driver() {
    let Some((python, tests)) = venv() else { return };
    cdylib("recap-cpudriver", "recap_cpudriver");
    cdylib("recap-audit", "recap_audit");
    // NVRTC and the CUDA headers from the wheels: tinygrad looks for NVRTC on the library path
    // or at NVRTC_PATH, and passes `-I$CUDA_PATH/include` to it.
    let cuda = Command::new(&python)
        .args(["-c", "import nvidia.cu13 as m; print(list(m.__path__)[0])"])
        .output()
        .expect("asking the venv where the CUDA wheels are");
    let cuda = PathBuf::from(text(&cuda.stdout).trim());
    let names: Vec<String> = TESTS.iter().map(|t| format!("test_tiny.TestTiny.{t}")).collect();
    let out = Command::new(recap_bin())
        .args(["run", "--cpu", "--"])
        .arg(&python)
        .args(["-m", "unittest", "-v"])
        .args(&names)
        .current_dir(&tests)
        .env("DEV", "CUDA")
        .env("NVRTC_PATH", cuda.join("lib/libnvrtc.so.13"))
        .env("CUDA_PATH", &cuda)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("running recap run");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    // unittest's summary is on stderr: `Ran N tests in S`, then `OK` or `FAILED (...)`.
    let ran = stderr.lines().find(|l| l.starts_with("Ran ")).unwrap_or("no summary");
    assert!(
        out.status.success() && stderr.contains("\nOK"),
        "tinygrad's test_tiny failed on the CPU driver ({ran}):\n{stdout}\n{stderr}"
    );
    let count: usize = ran.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert_eq!(count, TESTS.len(), "every chosen test ran ({ran})");
    assert!(!stderr.contains("skipped"), "none was skipped:\n{stderr}");
}
