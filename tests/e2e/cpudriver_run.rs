//! `recap run --cpu -- CMD`: unmodified programs on the CPU driver, whichever way they find the
//! driver (by soname, by absolute path, through Python's `ctypes.util.find_library`), with the
//! device the command line configures, with `--capture`, and from an installed layout of the binary
//! and its libraries (`bin/recap`, `lib/recap/`).

use std::path::Path;
use std::process::{Command, Output};

use recap_tests::{cdylib, recap_bin, repo_root};

use crate::cpudriver::{text, Program};

/// The libraries `recap run` looks for beside itself, built.
fn libraries() -> [std::path::PathBuf; 3] {
    [
        cdylib("recap-cpudriver", "recap_cpudriver"),
        cdylib("recap-audit", "recap_audit"),
        cdylib("recap-intercept", "recap_intercept"),
    ]
}

/// `recap run --cpu ARGS -- CMD...` with no driver on the library path but recap's.
fn run_cpu(recap: &Path, args: &[&str], cmd: &[&std::ffi::OsStr]) -> Output {
    libraries();
    Command::new(recap)
        .args(["run", "--cpu"])
        .args(args)
        .arg("--")
        .args(cmd)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("RECAP_CPU_DRIVER_LIB")
        .env_remove("RECAP_INTERCEPT_LIB")
        .output()
        .expect("running recap run")
}

fn ok(out: &Output) -> String {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "recap run failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    stdout
}

#[test]
fn run_cpu_serves_a_program_linked_against_libcuda() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let stdout = ok(&run_cpu(&recap_bin(), &[], &[program.exe.as_os_str()]));
    assert_eq!(stdout, "driver_api: ok 21edac99ad72ea56\n");
}

#[test]
fn run_cpu_serves_a_driver_opened_by_absolute_path() {
    let program = Program::build("dlopen_path", &["-ldl"]);
    // No driver is there: the audit library answers the path with the CPU driver.
    let path = std::ffi::OsStr::new("/opt/nvidia/lib64/libcuda.so.1");
    let stdout = ok(&run_cpu(&recap_bin(), &[], &[program.exe.as_os_str(), path]));
    assert!(stdout.starts_with("dlopen_path: ok 2620250"), "{stdout}");
}

fn python_probe(recap: &Path, args: &[&str], probe_args: &[&str]) -> String {
    let script = repo_root().join("tests/capture/programs/find_library.py");
    let mut cmd: Vec<&std::ffi::OsStr> = vec!["python3".as_ref(), script.as_os_str()];
    cmd.extend(probe_args.iter().map(std::ffi::OsStr::new));
    ok(&run_cpu(recap, args, &cmd))
}

#[test]
fn run_cpu_serves_ctypes_find_library_and_the_device_it_was_asked_for() {
    let stdout = python_probe(&recap_bin(), &[], &[]);
    assert_eq!(
        stdout.lines().take(3).collect::<Vec<_>>(),
        ["find_library libcuda.so.1", "cuInit 0", "cuDeviceGet 0"],
        "{stdout}"
    );
    assert!(stdout.contains("name recap CPU device"), "{stdout}");
    assert!(stdout.contains("compute_capability 9.0\ntotal_memory 17179869184\n"), "the defaults:\n{stdout}");

    let stdout = python_probe(&recap_bin(), &["--arch", "sm_80", "--memory", "64M"], &["--limits"]);
    assert!(stdout.contains("compute_capability 8.0\ntotal_memory 67108864\n"), "{stdout}");
    // All of the memory can be allocated, one byte more cannot (CUDA_ERROR_OUT_OF_MEMORY), and
    // PTX for sm_90 does not load on an sm_80 device (CUDA_ERROR_INVALID_PTX).
    assert!(stdout.ends_with("alloc_all 0\nalloc_past 2\nload_sm_90 218\n"), "{stdout}");
}

#[test]
fn run_cpu_capture_records_the_program_as_capture_does() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("run.recap");
    let out = run_cpu(&recap_bin(), &["--capture", "-o", archive.to_str().unwrap()], &[program.exe.as_os_str()]);
    let stdout = ok(&out);
    assert!(stdout.starts_with("driver_api: ok 21edac99ad72ea56\n"), "{stdout}");
    assert!(stdout.contains("recap capture: ") && stdout.contains("range all"), "the capture's summary:\n{stdout}");
    let replay = crate::intercept::replay_check(&archive, "jit");
    assert!(replay.contains("regions pass"), "{replay}");
}

#[test]
fn run_cpu_works_from_an_installed_layout() {
    let prefix = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(prefix.path().join("bin")).unwrap();
    std::fs::create_dir_all(prefix.path().join("lib/recap")).unwrap();
    let recap = prefix.path().join("bin/recap");
    std::fs::copy(recap_bin(), &recap).unwrap();
    for lib in &libraries()[..2] {
        std::fs::copy(lib, prefix.path().join("lib/recap").join(lib.file_name().unwrap())).unwrap();
    }
    let program = Program::build("dlopen_path", &["-ldl"]);
    let path = std::ffi::OsStr::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1");
    let stdout = ok(&run_cpu(&recap, &[], &[program.exe.as_os_str(), path]));
    assert!(stdout.starts_with("dlopen_path: ok 2620250"), "{stdout}");
}

#[test]
fn run_cpu_without_the_driver_library_says_where_it_looked() {
    let prefix = tempfile::tempdir().unwrap();
    let recap = prefix.path().join("recap");
    std::fs::copy(recap_bin(), &recap).unwrap();
    let out = run_cpu(&recap, &[], &["true".as_ref()]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("the CPU driver") && stderr.contains("RECAP_CPU_DRIVER_LIB"), "{stderr}");
}
