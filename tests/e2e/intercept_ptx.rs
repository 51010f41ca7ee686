//! Where `recap capture` finds the PTX of a module the program loaded as a bare cubin: the
//! compiler caches the process put it in (`tests/capture/programs/triton_cache.c` writes its
//! kernel's cubin and PTX into a Triton-style or inductor-style cache folder, names the folder in
//! the environment only then, and loads the cubin's bytes), NVRTC
//! (`tests/capture/programs/nvrtc_cubin.c` compiles its kernel to a cubin with the real NVRTC,
//! from PyPI's `nvidia-cuda-nvrtc`, which runs without a GPU), a `ptxas` child
//! (`ptxas_cubin.c` runs the real `ptxas` from PyPI's `nvidia-cuda-nvcc` on a temporary file, as
//! XLA does), the driver's linker (`linked_copy.c` loads a copy of what `cuLinkComplete`
//! handed out, as numba did through cuda.core) and nvJitLink (`nvjitlink_cubin.c` links PTX, or
//! LTO-IR from NVRTC, with the real nvJitLink from PyPI's `nvidia-nvjitlink` and loads a copy of
//! the cubin, as numba-cuda does through cuda.bindings).

use std::path::PathBuf;
use std::process::Command;

use recap_tests::{cdylib, recap_bin, repo_root};

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

/// A file of one of NVIDIA's CUDA wheels from PyPI (`package`, which puts its files under the
/// `nvidia` namespace package), installed when missing into a virtual environment under
/// `target/cuda-wheels-venv`: the first file matching `pattern`, a glob relative to `nvidia/`.
/// `None` (after saying why) where it cannot be installed.
fn cuda_wheel_file(package: &str, pattern: &str) -> Option<PathBuf> {
    // One test at a time: pip writes a wheel's libraries in place, so a test that found a library
    // another test's install was still writing ran a program over a half-written file (SIGBUS).
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let venv = repo_root().join("target/cuda-wheels-venv");
    let python = venv.join("bin/python");
    let find = || -> Option<PathBuf> {
        let o = Command::new(&python)
            .args(["-c", "import glob, os, sys, nvidia; print('\\n'.join(p for d in nvidia.__path__ for p in sorted(glob.glob(os.path.join(d, sys.argv[1])))))"])
            .arg(pattern)
            .output()
            .ok()?;
        String::from_utf8_lossy(&o.stdout).lines().map(PathBuf::from).find(|p| p.is_file())
    };
    if let Some(file) = find() {
        return Some(file);
    }
    let made = python.is_file()
        || Command::new("python3").arg("-m").arg("venv").arg(&venv).status().is_ok_and(|s| s.success());
    let installed = made
        && Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", package])
            .status()
            .is_ok_and(|s| s.success());
    let file = if installed { find() } else { None };
    if file.is_none() {
        eprintln!(
            "skipped: {pattern} from pip's {package} could not be installed into {} (is PyPI reachable?); \
             the capture that needs it did not run",
            venv.display()
        );
    }
    file
}

/// NVRTC from PyPI (`nvidia-cuda-nvrtc`).
fn nvrtc_library() -> Option<PathBuf> {
    cuda_wheel_file("nvidia-cuda-nvrtc", "*/lib/libnvrtc.so.*")
}

/// nvJitLink from PyPI (`nvidia-nvjitlink`), which links without a GPU.
fn nvjitlink_library() -> Option<PathBuf> {
    cuda_wheel_file("nvidia-nvjitlink", "*/lib/libnvJitLink.so.*")
}

/// NVRTC's builtins library, beside NVRTC in its wheel.
fn nvrtc_builtins(nvrtc: &std::path::Path) -> PathBuf {
    std::fs::read_dir(nvrtc.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libnvrtc-builtins.so")))
        .expect("libnvrtc-builtins beside libnvrtc")
}

/// The `ptxas` binary from PyPI (`nvidia-cuda-nvcc`), which runs without a GPU.
fn ptxas_binary() -> Option<PathBuf> {
    cuda_wheel_file("nvidia-cuda-nvcc", "*/bin/ptxas")
}

#[test]
fn a_cubin_nvrtc_made_gets_the_ptx_of_its_program_compiled_again_and_replays() {
    let Some(nvrtc) = nvrtc_library() else { return };
    cdylib("recap-audit", "recap_audit");
    let program = Program::build("nvrtc_cubin", &["-lcuda", "-ldl"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "nvrtc.recap");
    let builtins = nvrtc_builtins(&nvrtc);
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

#[test]
fn a_cubin_a_ptxas_child_wrote_gets_the_ptx_it_read_and_replays() {
    let Some(ptxas) = ptxas_binary() else { return };
    cdylib("recap-audit", "recap_audit");
    let program = Program::build("ptxas_cubin", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "ptxas.recap");
    let report = capture_ok_with(&program, &archive, "profiler", &[ptxas.to_str().unwrap()]);
    let kernel = &report["kernels"][0];
    assert_eq!(kernel["name"], "scale_index", "{report:#}");
    assert_eq!(kernel["ptx"], true, "{report:#}");
    // The program's temporary file, which it deleted once ptxas had run.
    let from = kernel["ptx_from"].as_str().unwrap();
    assert!(from.starts_with("ptxas (/tmp/ptxas_cubin-") && from.ends_with(')'), "{report:#}");
    assert_eq!(kernel["layout_from"], "PTX .entry", "{report:#}");
    for engine in ["interp", "jit"] {
        let out = replay_check(&archive, engine);
        assert!(out.contains("1 of 1 regions pass"), "{engine}:\n{out}");
    }
    // `recap inspect --json` shows it: the capture report is kept in the archive.
    let o = Command::new(recap_bin()).args(["inspect", "--json"]).arg(&archive).output().unwrap();
    let listing = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && listing.contains(from), "inspect --json names the PTX's source:\n{listing}");
}

#[test]
fn ptxas_runs_that_leave_no_ptx_to_keep_are_noted_and_change_nothing_for_the_program() {
    let Some(ptxas) = ptxas_binary() else { return };
    cdylib("recap-audit", "recap_audit");
    let program = Program::build("ptxas_cubin", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "ptxas.recap");
    // The program checks that ptxas still fails on broken PTX and writes nothing.
    let report = capture_ok_with(&program, &archive, "profiler", &[ptxas.to_str().unwrap(), "refusals"]);
    let notes: Vec<&str> = report["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(
        notes.iter().any(|n| n.starts_with("ptxas /tmp/ptxas_cubin-")
            && n.contains("no output file /tmp/ptxas_cubin-")
            && n.ends_with("at its exit (it failed, or wrote elsewhere); nothing kept")),
        "{report:#}"
    );
    // The compile the program went on to run is unaffected.
    assert_eq!(report["kernels"][0]["ptx"], true, "{report:#}");
    assert!(report["kernels"][0]["ptx_from"].as_str().unwrap().starts_with("ptxas ("), "{report:#}");
}

#[test]
fn a_copy_of_a_linked_cubin_gets_the_links_ptx_input_and_replays() {
    let program = Program::build("linked_copy", &["-lcuda"]);
    for mode in ["copy", "in-place"] {
        let dir = tempfile::tempdir().unwrap();
        let archive = tmp_archive(&dir, "linked.recap");
        let args: &[&str] = if mode == "copy" { &[] } else { &["in-place"] };
        let report = capture_ok_with(&program, &archive, "profiler", args);
        let kernel = &report["kernels"][0];
        assert_eq!(kernel["name"], "scale_index", "{mode}: {report:#}");
        assert_eq!(kernel["ptx"], true, "{mode}: {report:#}");
        assert_eq!(kernel["ptx_from"], "the link's PTX input", "{mode}: {report:#}");
        for engine in ["interp", "jit"] {
            let out = replay_check(&archive, engine);
            assert!(out.contains("1 of 1 regions pass"), "{mode}, {engine}:\n{out}");
        }
    }
}

#[test]
fn a_cubin_nvjitlink_linked_from_ptx_gets_that_ptx_by_either_name_of_its_entry_points_and_replays() {
    let Some(nvjitlink) = nvjitlink_library() else { return };
    cdylib("recap-audit", "recap_audit");
    let program = Program::build("nvjitlink_cubin", &["-lcuda", "-ldl"]);
    // `__nvJitLinkCreate_13_0` and the rest, as a CUDA 13.0 header calls them; then the plain names.
    for mode in ["ptx", "plain"] {
        let dir = tempfile::tempdir().unwrap();
        let archive = tmp_archive(&dir, "nvjitlink.recap");
        let report = capture_ok_with(&program, &archive, "profiler", &[nvjitlink.to_str().unwrap(), mode]);
        let kernel = &report["kernels"][0];
        assert_eq!(kernel["name"], "scale_index", "{mode}: {report:#}");
        assert_eq!(kernel["ptx"], true, "{mode}: {report:#}");
        assert_eq!(kernel["ptx_from"], "PTX from nvJitLink", "{mode}: {report:#}");
        assert_eq!(kernel["layout_from"], "PTX .entry", "{mode}: {report:#}");
        for engine in ["interp", "jit"] {
            let out = replay_check(&archive, engine);
            assert!(out.contains("1 of 1 regions pass"), "{mode}, {engine}:\n{out}");
        }
    }
}

#[test]
fn a_cubin_nvjitlink_optimised_from_lto_ir_gets_the_ptx_of_the_link_made_again_and_replays() {
    let (Some(nvjitlink), Some(nvrtc)) = (nvjitlink_library(), nvrtc_library()) else { return };
    cdylib("recap-audit", "recap_audit");
    let program = Program::build("nvjitlink_cubin", &["-lcuda", "-ldl"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "lto.recap");
    let builtins = nvrtc_builtins(&nvrtc);
    let args = [nvjitlink.to_str().unwrap(), "lto", nvrtc.to_str().unwrap(), builtins.to_str().unwrap()];
    let report = capture_ok_with(&program, &archive, "profiler", &args);
    let kernel = &report["kernels"][0];
    assert_eq!(kernel["name"], "scale_index", "{report:#}");
    assert_eq!(kernel["ptx"], true, "{report:#}");
    assert_eq!(kernel["ptx_from"], "PTX from nvJitLink (its LTO-IR linked again with -ptx for sm_90)", "{report:#}");
    let notes = report["notes"].to_string();
    let relinked = "nvJitLink: 1 link(s) of LTO-IR made again with -ptx for their PTX as the program linked them, in ";
    assert!(notes.contains(relinked), "{report:#}");
    for engine in ["interp", "jit"] {
        let out = replay_check(&archive, engine);
        assert!(out.contains("1 of 1 regions pass"), "{engine}:\n{out}");
    }
}
