//! `recap capture --range nvtx:NAME[@DOMAIN]`: a C program that loads NVTX as NVTX v3's headers
//! do (`tests/capture/programs/nvtx_range.c`) finds recap's interposer as its injection library,
//! and the range follows its push/pop, domain and start/end ranges.

use crate::cpudriver::{text, Program};
use crate::intercept::{capture, capture_ok, inspect, replay_check, tmp_archive};

#[test]
fn nvtx_ranges_open_and_close_the_recorded_range() {
    let program = Program::build("nvtx_range", &["-lcuda", "-ldl"]);
    // On its own the program runs with NVTX as no-ops.
    let alone = std::process::Command::new(&program.exe).env("LD_LIBRARY_PATH", program.dir()).output().unwrap();
    assert!(text(&alone.stdout).contains("nvtx_range: ok 2148595058 injected=0"), "{}", text(&alone.stderr));

    let dir = tempfile::tempdir().unwrap();
    // The first "step": its nested "inner" range does not end it; the second "step" is not recorded.
    let step = tmp_archive(&dir, "step.recap");
    let report = capture_ok(&program, &step, "nvtx:step");
    assert_eq!(report["ops"]["launch"], 3, "{report:#}");
    assert_eq!(report["ended_at"], "nvtxRangePop", "{report:#}");
    assert_eq!(report["range"], "nvtx:step");
    let listing = inspect(&step);
    assert!(listing.contains("capture.range: nvtx:step"), "{listing}");
    assert!(replay_check(&step, "jit").contains("1 of 1 regions pass"));

    // A push in a named domain whose message is a registered string.
    let solve = tmp_archive(&dir, "solve.recap");
    let report = capture_ok(&program, &solve, "nvtx:solve@physics");
    assert_eq!(report["ops"]["launch"], 1, "{report:#}");
    assert_eq!(report["ended_at"], "nvtxDomainRangePop", "{report:#}");
    assert!(replay_check(&solve, "interp").contains("1 of 1 regions pass"));
    let any = tmp_archive(&dir, "any.recap");
    assert_eq!(capture_ok(&program, &any, "nvtx:solve@*")["ops"]["launch"], 1);

    // A start/end range.
    let io = tmp_archive(&dir, "io.recap");
    let report = capture_ok(&program, &io, "nvtx:io");
    assert_eq!(report["ops"]["launch"], 1, "{report:#}");
    assert_eq!(report["ended_at"], "nvtxRangeEnd", "{report:#}");

    // "solve" is not in the default domain, and no domain "chemistry" exists.
    for range in ["nvtx:solve", "nvtx:step@chemistry"] {
        let o = capture(&program, &["--range", range, "-o", "none.recap"], &[]);
        let stderr = text(&o.stderr);
        assert!(!o.status.success(), "{range}");
        assert!(stderr.contains(&format!("never opened the NVTX range {range}")), "{range}: {stderr}");
        assert!(text(&o.stdout).contains("injected=1"), "{}", text(&o.stdout));
    }
}
