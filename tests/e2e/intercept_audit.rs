//! `recap capture` and a program that opens the driver by its absolute path
//! (`tests/capture/programs/dlopen_path.c`): `LD_LIBRARY_PATH` cannot redirect that, the audit
//! library (`LD_AUDIT`, `native-host/audit`) does.

use std::path::Path;
use std::process::{Command, Output};

use recap_tests::{cdylib, recap_bin};
use serde_json::Value;

use crate::cpudriver::{text, Program};
use crate::intercept::{replay_check, tmp_archive};

/// `recap capture --json -o OUT -- dlopen_path DRIVER`, with `envs` added.
fn capture(program: &Program, out: &Path, envs: &[(&str, &str)]) -> Output {
    let driver = cdylib("recap-cpudriver", "recap_cpudriver");
    Command::new(recap_bin())
        .arg("capture")
        .arg("--driver")
        .arg(&driver)
        .args(["--json", "-o"])
        .arg(out)
        .arg("--")
        .arg(&program.exe)
        .arg(driver.canonicalize().unwrap())
        .env("RECAP_INTERCEPT_LIB", cdylib("recap-intercept", "recap_intercept"))
        .envs(envs.iter().copied())
        .current_dir(program.dir())
        .output()
        .expect("running recap capture")
}

#[test]
fn a_driver_opened_by_absolute_path_is_captured_through_the_audit_library() {
    let audit = cdylib("recap-audit", "recap_audit");
    let interposer = cdylib("recap-intercept", "recap_intercept");
    assert_eq!(audit.parent(), interposer.parent(), "recap capture finds the audit library beside the interposer");
    let program = Program::build("dlopen_path", &["-ldl"]);
    let dir = tempfile::tempdir().unwrap();

    let archive = tmp_archive(&dir, "by_path.recap");
    let o = capture(&program, &archive, &[]);
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{}\n{stdout}\n{}", o.status, text(&o.stderr));
    assert!(stdout.contains("dlopen_path: ok 2620250"), "{stdout}");
    let report: Value = serde_json::from_str(&stdout[stdout.find('{').unwrap()..]).unwrap();
    assert_eq!(report["audit"], true, "{report:#}");
    assert_eq!(report["ops"]["launch"], 1, "{report:#}");
    assert_eq!(report["kernels"][0]["name"], "triple_plus_one", "{report:#}");
    assert!(replay_check(&archive, "jit").contains("1 of 1 regions pass"));

    // Without the audit library the program reaches the driver around recap, which is said.
    let missing = tmp_archive(&dir, "missing.recap");
    let o = capture(&program, &missing, &[("RECAP_AUDIT_LIB", "/nonexistent/librecap_audit.so")]);
    let stderr = text(&o.stderr);
    assert!(text(&o.stdout).contains("dlopen_path: ok 2620250"), "{}", text(&o.stdout));
    assert!(!o.status.success());
    assert!(stderr.contains("librecap_audit.so is not beside"), "{stderr}");
    assert!(stderr.contains("nothing was recorded"), "{stderr}");
}
