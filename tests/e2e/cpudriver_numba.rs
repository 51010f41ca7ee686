//! numba-cuda's own test suites on the CPU driver: `recap run --cpu -- python -m numba.runtests
//! <SUBSET>` in a virtual environment under `target/numba-venv` (made here when it is missing:
//! `pip install numba-cuda nvidia-cuda-runtime nvidia-nvvm nvidia-cuda-nvrtc numpy pytest
//! filecheck cffi ml_dtypes`: numba's test modules import pytest, filecheck, cffi and ml_dtypes). Where PyPI cannot be reached
//! the test says so on stderr and passes without running anything, as the GPU tests do without a
//! GPU. The subset (docs/CPU-DRIVER.md, "numba-cuda") is the test modules of `cudadrv` and
//! `cudapy` that pass in full on the CPU driver and run in about four minutes on two cores; a
//! module failing again fails this test. tests/cpudriver/numba_suite.sh runs the whole suites.

use std::path::{Path, PathBuf};
use std::process::Command;

use recap_tests::{cdylib, recap_bin, repo_root};

use crate::cpudriver::text;

/// numba-cuda's test modules that run here, every test in them passing or skipped.
pub(crate) const SUBSET: &[&str] = &[
    "numba.cuda.tests.cudadrv.test_array_attr",
    "numba.cuda.tests.cudadrv.test_context_stack",
    "numba.cuda.tests.cudadrv.test_cuda_array_slicing",
    "numba.cuda.tests.cudadrv.test_cuda_devicerecord",
    "numba.cuda.tests.cudadrv.test_detect",
    "numba.cuda.tests.cudadrv.test_emm_plugins",
    "numba.cuda.tests.cudadrv.test_events",
    "numba.cuda.tests.cudadrv.test_init",
    "numba.cuda.tests.cudadrv.test_inline_ptx",
    "numba.cuda.tests.cudadrv.test_is_fp16",
    "numba.cuda.tests.cudadrv.test_nvrtc",
    "numba.cuda.tests.cudadrv.test_nvvm_driver",
    "numba.cuda.tests.cudadrv.test_pinned",
    "numba.cuda.tests.cudadrv.test_profiler",
    "numba.cuda.tests.cudadrv.test_reset_device",
    "numba.cuda.tests.cudadrv.test_select_device",
    "numba.cuda.tests.cudapy.test_alignment",
    "numba.cuda.tests.cudapy.test_analysis",
    "numba.cuda.tests.cudapy.test_array_args",
    "numba.cuda.tests.cudapy.test_atomics",
    "numba.cuda.tests.cudapy.test_byteflow",
    "numba.cuda.tests.cudapy.test_casting",
    "numba.cuda.tests.cudapy.test_compiler",
    "numba.cuda.tests.cudapy.test_const_string",
    "numba.cuda.tests.cudapy.test_constmem",
    "numba.cuda.tests.cudapy.test_copy_propagate",
    "numba.cuda.tests.cudapy.test_cuda_jit_no_types",
    "numba.cuda.tests.cudapy.test_enums",
    "numba.cuda.tests.cudapy.test_exception",
    "numba.cuda.tests.cudapy.test_flow_control",
    "numba.cuda.tests.cudapy.test_frexp_ldexp",
    "numba.cuda.tests.cudapy.test_gufunc",
    "numba.cuda.tests.cudapy.test_gufunc_scheduling",
    "numba.cuda.tests.cudapy.test_inline",
    "numba.cuda.tests.cudapy.test_ir",
    "numba.cuda.tests.cudapy.test_iterators",
];

/// The tests the subset runs: 100 of `cudadrv` (96 pass, 4 are skipped by numba itself on this
/// device) and 409 of `cudapy` (406 pass, 3 skipped).
const SUBSET_TESTS: usize = 509;

/// The virtual environment with numba-cuda, made when missing; `None` where it cannot be made.
fn venv() -> Option<PathBuf> {
    let venv = repo_root().join("target/numba-venv");
    let python = venv.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import numba.cuda, cuda.bindings, pytest, filecheck, cffi, ml_dtypes"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ready(&python) {
        return Some(python);
    }
    let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().is_ok_and(|s| s.success());
    let installed = made
        && Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "numba-cuda",
                "nvidia-cuda-runtime",
                "nvidia-nvvm",
                "nvidia-cuda-nvrtc",
            ])
            .args(["numpy", "pytest", "filecheck", "cffi", "ml_dtypes"])
            .status()
            .is_ok_and(|s| s.success());
    if !installed || !ready(&python) {
        eprintln!(
            "skipped: numba-cuda could not be installed into {} (is PyPI reachable?); \
             the numba suites did not run",
            venv.display()
        );
        return None;
    }
    Some(python)
}

#[test]
fn numba_cuda_test_subset_passes_on_the_cpu_driver() {
    let Some(python) = venv() else { return };
    cdylib("recap-cpudriver", "recap_cpudriver");
    cdylib("recap-audit", "recap_audit");
    let out = Command::new(recap_bin())
        .args(["run", "--cpu", "--"])
        .arg(&python)
        .args(["-m", "numba.runtests", "-v"])
        .args(SUBSET)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("running recap run");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    // unittest's summary is on stderr: `Ran N tests in S`, then `OK` or `FAILED (...)`.
    let ran = stderr.lines().find(|l| l.starts_with("Ran ")).unwrap_or("no summary");
    assert!(
        out.status.success() && stderr.contains("\nOK"),
        "numba's subset failed on the CPU driver ({ran}):\n{stdout}\n{stderr}"
    );
    let count: usize = ran.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert_eq!(count, SUBSET_TESTS, "the subset ran all of its tests ({ran})");
}
