//! Regions at their captured addresses: a program whose kernel writes device pointers it computed
//! from integers into a table, which a second kernel follows. The capture cannot relocate those
//! pointers; it sees them in the table's final contents, so it asks replays to place regions at
//! their captured addresses, where the table's pointers are right as they are.

use std::process::Command;

use recap_tests::recap_bin;

use crate::cpudriver::{text, Program};
use crate::intercept::{capture_ok, inspect, replay_check, tmp_archive};

#[test]
fn capture_places_regions_where_a_kernel_wrote_pointers_and_a_fresh_replay_fails_clearly() {
    let program = Program::build("placed_pointers", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "placed.recap");
    let report = capture_ok(&program, &archive, "profiler");
    assert_eq!(report["ops"]["launch"], 2, "{report:#}");
    let why = report["placement"].as_str().unwrap_or_else(|| panic!("placement chosen: {report:#}"));
    assert!(why.contains("300 device pointer(s) the capture did not see"), "{why}");
    assert!(report["incomplete"].as_object().unwrap().is_empty(), "{report:#}");
    let listing = inspect(&archive);
    assert!(listing.contains("capture.placement: captured"), "{listing}");
    assert!(listing.contains("capture.addresses: [{\"region\":"), "{listing}");

    // Placed, the table's pointers are right: every region passes, the table included (its
    // pointers equal the captured ones), on both engines.
    for engine in ["interp", "jit"] {
        let out = replay_check(&archive, engine);
        assert!(out.contains("3 of 3 regions pass"), "engine {engine}:\n{out}");
    }

    // At fresh addresses, the second kernel follows a captured pointer into no region.
    let o = Command::new(recap_bin())
        .args(["replay", "--check", "--engine", "interp", "--placement", "fresh"])
        .arg(&archive)
        .output()
        .unwrap();
    let stderr = text(&o.stderr);
    assert!(!o.status.success(), "a fresh replay cannot follow the captured pointers");
    assert!(stderr.contains("`follow`") && stderr.contains("out-of-bounds read"), "{stderr}");
    assert!(
        stderr.contains("that address lies in region") && stderr.contains("--placement captured"),
        "the error says where the pointer came from: {stderr}"
    );
}

#[test]
fn capture_without_written_pointers_keeps_fresh_placement_unless_asked() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "fresh.recap");
    let report = capture_ok(&program, &archive, "profiler");
    assert!(report["placement"].is_null(), "{report:#}");
    let listing = inspect(&archive);
    assert!(!listing.contains("capture.placement") && listing.contains("capture.addresses"), "{listing}");

    // Asked for, placement is kept, and the replay places regions (also when told to).
    let placed = tmp_archive(&dir, "placed.recap");
    let o = crate::intercept::capture(
        &program,
        &["--json", "--place-regions", "--range", "profiler", "-o", placed.to_str().unwrap()],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("--place-regions"), "{}", text(&o.stdout));
    assert!(inspect(&placed).contains("capture.placement: captured"));
    let out = replay_check(&placed, "jit");
    assert!(out.contains("3 of 3 regions pass"), "{out}");
    let o = Command::new(recap_bin())
        .args(["replay", "--check", "--placement", "captured"])
        .arg(&archive)
        .output()
        .unwrap();
    assert!(o.status.success() && text(&o.stdout).contains("3 of 3 regions pass"), "{}", text(&o.stderr));
}
