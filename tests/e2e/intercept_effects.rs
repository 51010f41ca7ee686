//! `recap capture --record-effects`: a kernel loaded as machine code only
//! (`tests/capture/programs/machine_code.c`, a fat binary with one cubin and no PTX) replays on the
//! CPU from what it wrote during the capture, when its inputs are the captured ones, and is refused
//! with the reason when they are not.

use std::process::Command;

use recap_tests::recap_bin;
use serde_json::Value;

use crate::cpudriver::{text, Program};
use crate::intercept::{capture, capture_ok, inspect, replay_check, tmp_archive};

#[test]
fn launches_without_ptx_replay_on_the_cpu_from_their_recorded_effects() {
    let program = Program::build("machine_code", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();

    // Recorded plainly, the kernel is machine code only and the CPU replay names it.
    let plain = tmp_archive(&dir, "plain.recap");
    let report = capture_ok(&program, &plain, "profiler");
    let square = report["kernels"].as_array().unwrap().iter().find(|k| k["name"] == "square_acc").unwrap();
    assert_eq!(square["ptx"], false, "{report:#}");
    assert_eq!(square["cubins"], serde_json::json!([90]), "{report:#}");
    assert_eq!(report["recorded_effects"], 0);
    let o = Command::new(recap_bin()).args(["replay", "--check"]).arg(&plain).output().unwrap();
    let stderr = text(&o.stderr);
    assert!(!o.status.success());
    assert!(stderr.contains("the CPU cannot run square_acc") && stderr.contains("--record-effects"), "{stderr}");

    // With its effects recorded, the replay goes on past it and every region checks out.
    let fx = tmp_archive(&dir, "effects.recap");
    let o = capture(&program, &["--json", "--record-effects", "-o", fx.to_str().unwrap()], &[]);
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{}\n{stdout}\n{}", o.status, text(&o.stderr));
    assert!(stdout.contains("machine_code: ok 191764600"), "{stdout}");
    let report: Value = serde_json::from_str(&stdout[stdout.find('{').unwrap()..]).unwrap();
    assert_eq!(report["recorded_effects"], 1, "{report:#}");
    // From the first byte it changed to the last: y[399]'s top byte stays 0.
    assert_eq!(report["effects_bytes"], 400 * 4 - 1, "{report:#}");
    assert_eq!(report["ops"]["launch"], 3, "{report:#}");
    let listing = inspect(&fx);
    assert!(
        listing.contains("recorded effects (1): launches without PTX") && listing.contains("op 1: wrote alloc1+0"),
        "{listing}"
    );
    for engine in ["interp", "jit"] {
        let out = replay_check(&fx, engine);
        assert!(out.contains("2 of 2 regions pass"), "{engine}:\n{out}");
        assert!(out.contains("1 from recorded effects"), "{engine}:\n{out}");
    }

    // Other inputs: y (alloc1) is read by the kernel, so its recorded writes do not apply.
    let other = dir.path().join("y.bin");
    std::fs::write(&other, vec![1u8; 400 * 4]).unwrap();
    let o = Command::new(recap_bin())
        .args(["replay", "--check", "--input"])
        .arg(format!("alloc1={}", other.display()))
        .arg(&fx)
        .output()
        .unwrap();
    let stderr = text(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("op 1 (launch of square_acc, machine code only): its inputs differ from the captured ones"),
        "{stderr}"
    );
}

/// The same work as one CUDA graph launched twice: with `--record-effects` each launch runs node
/// by node, so the machine-code kernel's writes are read around each of its two launches, and the
/// CPU replay goes past both; without it the graph is forwarded whole and the CPU names the kernel.
#[test]
fn launches_without_ptx_inside_a_graph_launch_replay_on_the_cpu_from_their_recorded_effects() {
    let program = Program::build("machine_code", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();

    let plain = tmp_archive(&dir, "plain.recap");
    let o = capture(
        &program,
        &["--json", "--record-effects", "--range", "profiler", "-o", plain.to_str().unwrap()],
        &["graph"],
    );
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{}\n{stdout}\n{}", o.status, text(&o.stderr));
    assert!(stdout.contains("machine_code: ok 191764600"), "{stdout}");
    let report: Value = serde_json::from_str(&stdout[stdout.find('{').unwrap()..]).unwrap();
    assert_eq!(report["recorded_effects"], 2, "one per graph launch: {report:#}");
    assert_eq!(report["ops"]["graph launch (run node by node for recorded effects)"], 2, "{report:#}");
    assert_eq!(report["ops"]["launch"], 6, "{report:#}");
    assert!(report["incomplete"].as_array().is_none_or(|a| a.is_empty()), "{report:#}");
    for engine in ["interp", "jit"] {
        let out = replay_check(&plain, engine);
        assert!(out.contains("3 of 3 regions pass"), "{engine}:\n{out}");
        assert!(out.contains("2 from recorded effects"), "{engine}:\n{out}");
    }

    // Without effects asked for, the graph launch is forwarded as a graph and recorded expanded.
    let whole = tmp_archive(&dir, "whole.recap");
    let report = crate::intercept::capture_ok_with(&program, &whole, "profiler", &["graph"]);
    assert_eq!(report["ops"]["graph launch (expanded)"], 2, "{report:#}");
    assert_eq!(report["recorded_effects"], 0, "{report:#}");
    let o = Command::new(recap_bin()).args(["replay", "--check"]).arg(&whole).output().unwrap();
    let stderr = text(&o.stderr);
    assert!(!o.status.success());
    assert!(stderr.contains("the CPU cannot run square_acc"), "{stderr}");
}
