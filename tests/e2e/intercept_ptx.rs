//! Where `recap capture` finds the PTX of a module the program loaded as a bare cubin: the
//! compiler caches the process put it in (`tests/capture/programs/triton_cache.c` writes its
//! kernel's cubin and PTX into a Triton-style or inductor-style cache folder, names the folder in
//! the environment only then, and loads the cubin's bytes), and NVRTC
//! (`tests/capture/programs/nvrtc_cubin.c` compiles its kernel to a cubin with the real NVRTC,
//! from PyPI's `nvidia-cuda-nvrtc`, which runs without a GPU).

use std::path::PathBuf;
use std::process::Command;

use recap_tests::{cdylib, repo_root};

use crate::cpudriver::Program;
use crate::intercept::{capture_ok_with, replay_check, tmp_archive};

#[test]
fn a_cubin_from_tritons_or_inductors_cache_gets_the_ptx_beside_it_and_replays() {
    let program = Program::build("triton_cache", &["-lcuda"]);
    for (mode, folder) in [("triton", "5AH6XZKQ3JY2BFOM"), ("inductor", "triton/0/5AH6XZKQ3JY2BFOM")] {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let archive = tmp_archive(&dir, "cache.recap");
        let report = capture_ok_with(&program, &archive, "profiler", &[mode, cache.to_str().unwrap()]);
        let kernel = &report["kernels"][0];
        assert_eq!(kernel["name"], "scale_index", "{mode}: {report:#}");
        assert_eq!(kernel["ptx"], true, "{mode}: {report:#}");
        let want = cache.join(folder).join("scale_index.ptx");
        assert_eq!(kernel["ptx_from"], want.to_str().unwrap(), "{mode}: {report:#}");
        assert_eq!(kernel["layout_from"], "PTX .entry", "{mode}: {report:#}");
        for engine in ["interp", "jit"] {
            let out = replay_check(&archive, engine);
            assert!(out.contains("1 of 1 regions pass"), "{mode}, {engine}:\n{out}");
        }
    }
}

#[test]
fn a_stale_cubin_of_the_same_name_elsewhere_in_the_cache_is_not_taken() {
    let program = Program::build("triton_cache", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    // The program writes its files at start; a stale cubin of another length under another
    // hash must not be taken for it.
    let stale = cache.join("triton/0/OTHERHASH");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("scale_index.cubin"), b"\x7fELF not the loaded bytes").unwrap();
    std::fs::write(stale.join("scale_index.ptx"), "// not it").unwrap();
    let archive = tmp_archive(&dir, "cache.recap");
    let report = capture_ok_with(&program, &archive, "profiler", &["inductor", cache.to_str().unwrap()]);
    let from = report["kernels"][0]["ptx_from"].as_str().unwrap();
    assert!(from.ends_with("triton/0/5AH6XZKQ3JY2BFOM/scale_index.ptx"), "{report:#}");
}

/// NVRTC from PyPI (`nvidia-cuda-nvrtc`) in a virtual environment under `target/nvrtc-venv`,
/// made when missing; `None` (after saying why) where it cannot be installed.
fn nvrtc_library() -> Option<PathBuf> {
    let venv = repo_root().join("target/nvrtc-venv");
    let python = venv.join("bin/python");
    let find = || -> Option<PathBuf> {
        let o = Command::new(&python)
            .args(["-c", "import glob, os, nvidia; print('\\n'.join(p for d in nvidia.__path__ for p in glob.glob(os.path.join(d, '*', 'lib', 'libnvrtc.so.*')) if 'builtins' not in p))"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&o.stdout).lines().map(PathBuf::from).find(|p| p.is_file())
    };
    if let Some(lib) = find() {
        return Some(lib);
    }
    let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().is_ok_and(|s| s.success());
    let installed = made
        && Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "nvidia-cuda-nvrtc"])
            .status()
            .is_ok_and(|s| s.success());
    let lib = if installed { find() } else { None };
    if lib.is_none() {
        eprintln!(
            "skipped: NVRTC (pip's nvidia-cuda-nvrtc) could not be installed into {} (is PyPI reachable?); \
             the NVRTC capture did not run",
            venv.display()
        );
    }
    lib
}

#[test]
fn a_cubin_nvrtc_made_gets_the_ptx_of_its_program_compiled_again_and_replays() {
    let Some(nvrtc) = nvrtc_library() else { return };
    cdylib("recap-audit", "recap_audit");
    let program = Program::build("nvrtc_cubin", &["-lcuda", "-ldl"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "nvrtc.recap");
    // NVRTC's builtins library sits beside it in the wheel.
    let builtins = std::fs::read_dir(nvrtc.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libnvrtc-builtins.so")))
        .expect("libnvrtc-builtins beside libnvrtc");
    let report =
        capture_ok_with(&program, &archive, "profiler", &[nvrtc.to_str().unwrap(), builtins.to_str().unwrap()]);
    let kernel = &report["kernels"][0];
    // The instantiation the program asked for by name expression.
    assert_eq!(kernel["name"], "_Z10scale_biasILi3EEvPji", "{report:#}");
    assert_eq!(kernel["ptx"], true, "{report:#}");
    assert_eq!(kernel["ptx_from"], "NVRTC program `scale_bias.cu` compiled again for compute_90", "{report:#}");
    let notes = report["notes"].to_string();
    assert!(notes.contains("NVRTC: 1 program(s) compiled again for their PTX after the range, in "), "{report:#}");
    for engine in ["interp", "jit"] {
        let out = replay_check(&archive, engine);
        assert!(out.contains("1 of 1 regions pass"), "{engine}:\n{out}");
    }
}
