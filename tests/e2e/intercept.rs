//! `recap capture -- CMD`: unmodified C programs on the CUDA driver API (`tests/capture/programs/`)
//! run under recap's interposer, in front of the CPU driver (`recap-cpudriver`) in place of a GPU;
//! the archives they leave replay bit-exactly on every CPU engine and check themselves.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use recap_tests::{cdylib, recap_bin};
use serde_json::Value;

use crate::cpudriver::{text, Program};

/// Runs `recap capture ARGS -- PROGRAM PROGRAM_ARGS` against the CPU driver.
pub(crate) fn capture(program: &Program, args: &[&str], program_args: &[&str]) -> Output {
    Command::new(recap_bin())
        .arg("capture")
        .arg("--driver")
        .arg(cdylib("recap-cpudriver", "recap_cpudriver"))
        .args(args)
        .arg("--")
        .arg(&program.exe)
        .args(program_args)
        .env("RECAP_INTERCEPT_LIB", cdylib("recap-intercept", "recap_intercept"))
        .current_dir(program.dir())
        .output()
        .expect("running recap capture")
}

/// Captures with `--json` and returns the report; the program's own `ok` line must be there too.
pub(crate) fn capture_ok(program: &Program, out: &Path, range: &str) -> Value {
    capture_ok_with(program, out, range, &[])
}

/// [`capture_ok`] of the program run with `program_args`.
pub(crate) fn capture_ok_with(program: &Program, out: &Path, range: &str, program_args: &[&str]) -> Value {
    let o = capture(program, &["--json", "--range", range, "-o", out.to_str().unwrap()], program_args);
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "recap capture failed: {}\nstdout:\n{stdout}\nstderr:\n{}", o.status, text(&o.stderr));
    let json = &stdout[stdout.find('{').expect("a JSON report")..];
    assert!(stdout[..stdout.find('{').unwrap()].contains(": ok "), "the program ran and passed:\n{stdout}");
    serde_json::from_str(json).unwrap_or_else(|e| panic!("report: {e}\n{json}"))
}

pub(crate) fn replay_check(archive: &Path, engine: &str) -> String {
    let o = Command::new(recap_bin())
        .args(["replay", "--check", "--engine", engine])
        .arg(archive)
        .output()
        .expect("running recap replay");
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "replay --engine {engine} failed: {}\n{stdout}\n{}", o.status, text(&o.stderr));
    stdout
}

pub(crate) fn inspect(archive: &Path) -> String {
    let o = Command::new(recap_bin()).arg("inspect").arg(archive).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
}

pub(crate) fn tmp_archive(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

#[test]
fn capture_records_a_program_linked_against_libcuda_and_replays_it_exactly() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "driver_api.recap");
    let report = capture_ok(&program, &archive, "profiler");
    assert_eq!(report["ended_at"], "cuProfilerStop");
    // What the program issues between cuProfilerStart and cuProfilerStop.
    assert_eq!(report["ops"]["launch"], 4, "{report:#}");
    assert_eq!(report["ops"]["copy"], 1, "{report:#}");
    let kernels: Vec<&str> =
        report["kernels"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert_eq!(kernels, ["scale_add", "mix_u32"]);
    assert!(report["kernels"].as_array().unwrap().iter().all(|k| k["ptx"] == true && k["layout_from"] == "PTX .entry"));
    // A call recap does not record passes through and is counted.
    assert_eq!(report["passed_through"]["cuCtxSynchronize"], 1, "{report:#}");
    assert!(report["incomplete"].as_object().unwrap().is_empty(), "{report:#}");
    // After the program, one interpreter replay learns the types its PTX stores: `y` (f32), `u`
    // (u32, an integer of that width), and `x`, a device copy of `y`, which carries its types.
    let types = &report["types"];
    assert_eq!((types["typed_regions"].as_u64(), types["untyped_regions"].as_u64()), (Some(3), Some(0)), "{report:#}");
    assert!(types["skipped_ops"] == 0 && types["stopped"].is_null() && types["error"].is_null(), "{report:#}");

    let listing = inspect(&archive);
    assert!(listing.contains("types: f32 ×1000") && listing.contains("types: i32 ×1000"), "typed layouts:\n{listing}");
    assert!(listing.contains("capture.range: profiler") && listing.contains("producer: recap capture"), "{listing}");
    // The command line the request carried.
    let command = format!("capture.command: {}", program.exe.display());
    assert!(listing.contains(&command), "{command}:\n{listing}");
    assert!(listing.contains("launch scale_add") && listing.contains("&alloc"), "pointers are relocations:\n{listing}");
    for engine in ["interp", "jit", "jit-scalar"] {
        let out = replay_check(&archive, engine);
        assert!(out.contains("3 of 3 regions pass"), "engine {engine}:\n{out}");
    }
}

/// A launch in clusters (`cuLaunchKernelEx` with a cluster dimension): the attribute is kept beside
/// the op, and the CPU replay, which runs blocks without clusters, refuses that launch by name
/// before it starts instead of computing something else.
#[test]
fn a_launch_in_clusters_is_kept_and_the_cpu_replay_refuses_it_by_name() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "cluster.recap");
    let report = capture_ok_with(&program, &archive, "profiler", &["cluster"]);
    assert_eq!(report["ops"]["launch"], 4, "{report:#}");
    assert_eq!(
        report["ops"]["launch attribute: cluster dimensions (replayed on CUDA; the CPU refuses the launch)"], 1,
        "{report:#}"
    );
    assert!(report["incomplete"].as_object().unwrap().is_empty(), "{report:#}");
    // Type inference passes over the launch it cannot run and says so; the rest still get types.
    let types = &report["types"];
    assert_eq!(types["skipped_ops"], 1, "{report:#}");
    let skipped = types["skipped"][0].as_str().unwrap();
    assert!(skipped.starts_with("op 4 (scale_add): ") && skipped.contains("clusters"), "{report:#}");
    assert!(types["typed_regions"].as_u64().unwrap() >= 1, "{report:#}");
    let listing = inspect(&archive);
    assert!(listing.contains(r#"capture.launch_attributes: [{"op":4,"attributes":{"cluster":[2,1,1]}}]"#), "{listing}");
    let o = Command::new(recap_bin()).args(["replay", "--check"]).arg(&archive).output().unwrap();
    let stderr = text(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("op 4 (launch of scale_add)")
            && stderr.contains("clusters of 2x1x1 blocks")
            && stderr.contains("on CUDA"),
        "{stderr}"
    );
}

#[test]
fn capture_follows_the_runtime_style_resolution_and_relocates_pointers_in_buffers() {
    let program = Program::build("runtime_style", &["-ldl"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "runtime_style.recap");
    let report = capture_ok(&program, &archive, "profiler");
    // Every entry point came from cuGetProcAddress_v2 (per-thread-stream variants included); the
    // launches were recorded, so the resolver handed out recap's exports.
    assert_eq!(report["ops"]["launch"], 2, "{report:#}");
    assert_eq!(report["ops"]["upload"], 3, "{report:#}");
    assert_eq!(report["ops"]["memset"], 1, "{report:#}");
    assert_eq!(report["passed_through"]["cuStreamSynchronize_ptsz"], 1, "{report:#}");
    // The table of pointers the program uploaded became relocations, and the region holding it
    // is not checked byte for byte.
    let listing = inspect(&archive);
    assert!(listing.contains("pointers inside regions (2)"), "{listing}");
    assert!(report["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("holds pointers")));
    // The struct parameter's pointer is a relocation too.
    assert!(listing.contains("param_0={16 B: &alloc0}"), "{listing}");
    for engine in ["interp", "jit"] {
        let out = replay_check(&archive, engine);
        assert!(out.contains("3 of 3 regions pass"), "engine {engine}:\n{out}");
    }
}

#[test]
fn capture_ranges_by_launch_count_and_the_whole_program() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    // Launches 2 and 3 of the program (the range ends after its last launch).
    let two = tmp_archive(&dir, "two.recap");
    let report = capture_ok(&program, &two, "launches:1:2");
    assert_eq!(report["ops"]["launch"], 2, "{report:#}");
    assert_eq!(report["ended_at"], "its last launch");
    assert!(replay_check(&two, "jit").contains("regions pass"));
    // Everything: the uploads before cuProfilerStart and the downloads after it are in.
    let all = tmp_archive(&dir, "all.recap");
    let report = capture_ok(&program, &all, "all");
    assert!(report["ops"]["launch"].as_u64().unwrap() >= 4, "{report:#}");
    assert!(report["ops"]["upload"].as_u64().unwrap() >= 1, "{report:#}");
    assert!(report["ops"]["download (checked, not replayed)"].as_u64().unwrap() >= 1, "{report:#}");
    let out = replay_check(&all, "jit");
    assert!(out.contains("regions pass") && !out.contains("FAIL"), "{out}");
}

/// The interposer in front of a program without `recap capture`, its request written by hand: a
/// range it cannot read is said once on stderr, in the words of `recap capture --range`, and the
/// program's profiler range is recorded instead, to the archive and report the request names.
#[test]
fn the_interposer_reads_its_request_from_the_environment_and_records_the_profiler_range_for_a_bad_one() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("shim");
    std::fs::create_dir(&shim).unwrap();
    for alias in ["libcuda.so.1", "libcuda.so"] {
        std::os::unix::fs::symlink(cdylib("recap-intercept", "recap_intercept"), shim.join(alias)).unwrap();
    }
    let (archive, report) = (dir.path().join("by-hand.recap"), dir.path().join("report.json"));
    let o = Command::new(&program.exe)
        .env("LD_LIBRARY_PATH", &shim)
        .env("RECAP_REAL_LIBCUDA", cdylib("recap-cpudriver", "recap_cpudriver"))
        .env("RECAP_CAPTURE_RANGE", "launches:two:3")
        .env("RECAP_CAPTURE_OUT", &archive)
        .env("RECAP_CAPTURE_REPORT", &report)
        .output()
        .unwrap();
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "{}\n{}\n{stderr}", o.status, text(&o.stdout));
    let said = "recap capture: range \"launches:two:3\": SKIP \"two\" is not a number; recording between \
                cuProfilerStart and cuProfilerStop\n";
    assert_eq!(stderr.matches(said).count(), 1, "{stderr}");
    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!((report["range"].as_str(), report["ended_at"].as_str()), (Some("profiler"), Some("cuProfilerStop")));
    assert_eq!(report["archive"].as_str(), Some(archive.to_str().unwrap()), "{report:#}");
    assert_eq!(report["ops"]["launch"], 4, "{report:#}");
    assert!(replay_check(&archive, "interp").contains("regions pass"));
}

#[test]
fn capture_says_why_nothing_was_recorded_and_refuses_bad_requests() {
    let program = Program::build("driver_api", &["-lcuda"]);
    // This mode exits before its cuProfilerStart.
    let o = capture(&program, &["-o", "never.recap"], &["garbage-module"]);
    let stderr = text(&o.stderr);
    assert!(!o.status.success());
    assert!(stderr.contains("nothing was recorded") && stderr.contains("never called cuProfilerStart"), "{stderr}");
    assert!(!program.dir().join("never.recap").exists());

    let o = capture(&program, &["--range", "nvtx-ish"], &[]);
    assert!(text(&o.stderr).contains("range \"nvtx-ish\" is not one of"), "{}", text(&o.stderr));
    let o = capture(&program, &["--range", "launches:3:0"], &[]);
    assert!(text(&o.stderr).contains("COUNT must be at least 1"), "{}", text(&o.stderr));

    let o = Command::new(recap_bin())
        .args(["capture", "--driver", "/nonexistent/libcuda.so.1", "--"])
        .arg(&program.exe)
        .env("RECAP_INTERCEPT_LIB", cdylib("recap-intercept", "recap_intercept"))
        .output()
        .unwrap();
    assert!(text(&o.stderr).contains("--driver /nonexistent/libcuda.so.1"), "{}", text(&o.stderr));
}

/// Archives `recap capture` wrote on a GPU machine through NVIDIA's driver (the CUDA runtime with a
/// stream-captured graph, Triton, CuPy, a runtime-style C program) replay bit-exactly on the CPU.
#[test]
fn gpu_captured_archives_replay_exactly_on_the_cpu() {
    let dir = recap_tests::repo_root().join("tests/capture/archives");
    let mut archives: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "recap"))
        .collect();
    archives.sort();
    assert!(archives.len() >= 4, "{archives:?}");
    for archive in &archives {
        let out = replay_check(archive, "jit");
        assert!(out.contains("regions pass") && !out.contains("FAIL"), "{}:\n{out}", archive.display());
        let listing = inspect(archive);
        assert!(listing.contains("producer: recap capture"), "{listing}");
    }
}
