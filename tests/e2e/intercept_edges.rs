//! `recap capture` of what a capture must survive (`tests/capture/programs/capture_edges.c`, on the
//! CPU driver): work the driver refuses, a device copy that overlaps itself, a code image whose ELF
//! header lies, a parameter layout the driver gives only as offsets and sizes, and programs that
//! end by `_exit`, by `abort` or without tearing anything down. Each time the archive is written
//! with the work the driver did, and replays to the state the program left.

use std::path::Path;

use serde_json::Value;

use crate::cpudriver::{text, Program};
use crate::intercept::{capture, capture_ok_with, inspect, replay_check, tmp_archive};

fn notes(report: &Value) -> Vec<String> {
    report["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
}

fn incomplete(report: &Value) -> Vec<String> {
    report["incomplete"].as_object().unwrap().keys().cloned().collect()
}

/// Every region with an expected state passes on the interpreter and on native code.
fn replays_to_the_end_state(archive: &Path) {
    for engine in ["interp", "jit"] {
        let out = replay_check(archive, engine);
        assert!(out.contains("regions pass") && !out.contains("FAIL"), "engine {engine}:\n{out}");
    }
}

#[test]
fn work_the_driver_refuses_is_left_out_and_an_overlapping_copy_is_recorded_as_what_it_left() {
    let program = Program::build("capture_edges", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "refused.recap");
    let report = capture_ok_with(&program, &archive, "profiler", &["refused"]);
    // The two launches the driver ran; the three it refused are not ops.
    assert_eq!(report["ops"]["launch"], 2, "{report:#}");
    assert_eq!(report["kernels"][0]["launches"], 2, "{report:#}");
    let notes = notes(&report);
    for (shape, at) in
        [("grid [0, 1, 1], block [128, 1, 1]", "after op 0"), ("grid [8, 1, 1], block [4096, 1, 1]", "after op 0")]
    {
        assert!(
            notes.iter().any(|n| n
                .starts_with(&format!("a launch of scale_add ({shape}) {at} was refused by the driver (CUresult "))
                && n.ends_with("it did nothing, and nothing is recorded")),
            "{shape}: {notes:#?}"
        );
    }
    // The launch of a kernel whose module was unloaded, after the copy (op 1).
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("a launch of scale_add (grid [8, 1, 1], block [128, 1, 1]) after op 1 was refused")),
        "{notes:#?}"
    );
    // CUDA leaves an overlapping copy undefined: what the driver left is kept, and named.
    assert_eq!(report["ops"]["device copy overlapping itself (recorded as the bytes it left)"], 1, "{report:#}");
    let incomplete = incomplete(&report);
    assert!(
        incomplete.len() == 1
            && incomplete[0].starts_with("op 1: a device copy of 3936 bytes within alloc1 overlaps itself"),
        "{incomplete:#?}"
    );
    let listing = inspect(&archive);
    assert!(listing.contains("launch scale_add"), "{listing}");
    replays_to_the_end_state(&archive);
}

#[test]
fn a_layout_from_the_driver_aligns_each_parameter_by_its_offset() {
    let program = Program::build("capture_edges", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "layout.recap");
    let o = capture(&program, &["--json", "--record-effects", "-o", archive.to_str().unwrap()], &["layout"]);
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{}\n{stdout}\n{}", o.status, text(&o.stderr));
    let report: Value = serde_json::from_str(&stdout[stdout.find('{').unwrap()..]).unwrap();
    let kernel = &report["kernels"][0];
    assert_eq!((kernel["name"].as_str(), kernel["ptx"].as_bool()), (Some("affine_pair"), Some(false)), "{report:#}");
    assert_eq!(kernel["layout_from"], "cuFuncGetParamInfo", "{report:#}");
    assert_eq!(report["recorded_effects"], 1, "{report:#}");
    // An 8-byte struct at offset 4 is aligned to 4, a 3-byte one at 12 to 4, a pointer at 16 to 8:
    // `+OFFSET SIZE B align ALIGN` in the listing.
    let listing = inspect(&archive);
    let params: Vec<Vec<&str>> = listing
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() > 4 && w[0].starts_with('+') && w[2] == "B" && w[3] == "align")
        .collect();
    let layout: Vec<(&str, &str, &str)> = params.iter().map(|w| (w[0], w[1], w[4])).collect();
    assert_eq!(layout, [("+0", "4", "8"), ("+4", "8", "4"), ("+12", "3", "4"), ("+16", "8", "8")], "{listing}");
    replays_to_the_end_state(&archive);
}

#[test]
fn a_code_image_whose_section_table_lies_does_not_crash_the_capture() {
    let program = Program::build("capture_edges", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "lying.recap");
    let report = capture_ok_with(&program, &archive, "profiler", &["lying-elf"]);
    let notes = notes(&report);
    assert!(
        notes.iter().any(|n| n.starts_with("cuModuleLoadData: a cubin: ELF byte 40: its header tables end at byte ")
            && n.contains("past the")
            && n.ends_with("its kernels cannot be recorded")),
        "{notes:#?}"
    );
    assert_eq!(report["ops"]["launch"], 1, "{report:#}");
    replays_to_the_end_state(&archive);
}

#[test]
fn a_program_ending_by_exit_or_abort_leaves_the_work_recorded_so_far() {
    let program = Program::build("capture_edges", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    for (mode, how) in [("exit", "_exit()"), ("abort", "abort()")] {
        let archive = tmp_archive(&dir, &format!("{mode}.recap"));
        let o = capture(&program, &["--json", "--range", "all", "-o", archive.to_str().unwrap()], &[mode]);
        let stdout = text(&o.stdout);
        assert!(stdout.contains("capture_edges: ok "), "{mode}: {}\n{stdout}\n{}", o.status, text(&o.stderr));
        assert_eq!(o.status.success(), mode == "exit", "{mode}: {}\n{}", o.status, text(&o.stderr));
        let report: Value = serde_json::from_str(&stdout[stdout.find('{').expect("a report")..]).unwrap();
        assert_eq!(report["ended_at"], how, "{report:#}");
        assert!(
            notes(&report)
                .iter()
                .any(|n| n.starts_with(&format!("the program ended by {how}, which runs no exit handler"))),
            "{report:#}"
        );
        assert!(incomplete(&report).is_empty(), "{report:#}");
        assert_eq!(report["ops"]["launch"], 1, "{report:#}");
        assert_eq!(report["ops"]["upload"], 2, "{report:#}");
        replays_to_the_end_state(&archive);
    }
}

#[test]
fn a_program_that_exits_without_tearing_down_keeps_its_end_state() {
    let program = Program::build("capture_edges", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "no-teardown.recap");
    let report = capture_ok_with(&program, &archive, "all", &["no-teardown"]);
    assert_eq!(report["ended_at"], "the end of the program", "{report:#}");
    // The final contents were read at exit, after the program's thread-locals were gone.
    assert!(incomplete(&report).is_empty(), "{report:#}");
    let out = replay_check(&archive, "jit");
    assert!(out.contains("2 of 2 regions pass"), "{out}");
}
