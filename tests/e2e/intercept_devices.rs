//! Capturing a program that works on two GPUs: `two_devices.c` on the CPU driver with two devices
//! (`RECAP_CPU_DEVICES=2`) becomes an archive with two devices, each region on the device of its
//! allocation, each op on the device it was issued to, a signal and a wait wherever the device
//! changes, and a replay on one CPU that checks every region; a program on one device of the same
//! driver still gets a one-device archive.

use std::path::Path;
use std::process::{Command, Output};

use recap_tests::{cdylib, recap_bin};
use serde_json::Value;

use crate::cpudriver::{text, Program};
use crate::intercept::{replay_check, tmp_archive};

/// `recap capture --json --range profiler` of `program` on the CPU driver with two devices.
fn capture_on_two(program: &Program, out: &Path) -> Output {
    capture_on_two_with(program, out, &[])
}

/// [`capture_on_two`] of the program run with `program_args`.
fn capture_on_two_with(program: &Program, out: &Path, program_args: &[&str]) -> Output {
    Command::new(recap_bin())
        .args(["capture", "--json", "--range", "profiler", "-o"])
        .arg(out)
        .arg("--driver")
        .arg(cdylib("recap-cpudriver", "recap_cpudriver"))
        .arg("--")
        .arg(&program.exe)
        .args(program_args)
        .env("RECAP_INTERCEPT_LIB", cdylib("recap-intercept", "recap_intercept"))
        .env("RECAP_CPU_DEVICES", "2")
        .current_dir(program.dir())
        .output()
        .expect("running recap capture")
}

/// The capture's report; the program's own `ok` line must be there too.
fn report_of(o: &Output) -> Value {
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "recap capture failed: {}\nstdout:\n{stdout}\nstderr:\n{}", o.status, text(&o.stderr));
    let start = stdout.find('{').expect("a JSON report");
    assert!(stdout[..start].contains(": ok "), "the program ran and passed:\n{stdout}");
    serde_json::from_str(&stdout[start..]).unwrap_or_else(|e| panic!("report: {e}\n{stdout}"))
}

/// `recap inspect --json`: one JSON value per line.
fn inspect_json(archive: &Path) -> Vec<Value> {
    let o = Command::new(recap_bin()).arg("inspect").arg(archive).arg("--json").output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect()
}

fn of_type<'a>(lines: &'a [Value], t: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == t).collect()
}

#[test]
fn two_devices_runs_on_a_cpu_driver_of_two_devices_and_not_on_one() {
    let program = Program::build("two_devices", &["-lcuda"]);
    let two = Command::new(&program.exe).env("LD_LIBRARY_PATH", program.dir()).env("RECAP_CPU_DEVICES", "2").output();
    let two = two.unwrap();
    assert!(two.status.success(), "{}\n{}", text(&two.stdout), text(&two.stderr));
    assert!(text(&two.stdout).starts_with("two_devices: ok "), "{}", text(&two.stdout));
    let one = program.run(&[]);
    assert!(!one.status.success());
    assert_eq!(text(&one.stderr), "two_devices: 1 device(s); this program needs two\n");
}

#[test]
fn recap_run_gives_the_program_the_devices_it_asks_for() {
    let program = Program::build("two_devices", &["-lcuda"]);
    let run = |devices: &str| {
        Command::new(recap_bin())
            .args(["run", "--cpu", "--devices", devices, "--"])
            .arg(&program.exe)
            .env("RECAP_CPU_DRIVER_LIB", cdylib("recap-cpudriver", "recap_cpudriver"))
            .output()
            .unwrap()
    };
    let two = run("2");
    assert!(two.status.success(), "{}\n{}", text(&two.stdout), text(&two.stderr));
    assert!(text(&two.stdout).starts_with("two_devices: ok "), "{}", text(&two.stdout));
    let one = run("1");
    assert_eq!(text(&one.stderr), "two_devices: 1 device(s); this program needs two\n");
    let none = run("0");
    assert!(!none.status.success());
    assert!(text(&none.stderr).contains("--devices"), "{}", text(&none.stderr));
}

#[test]
fn capture_on_two_devices_places_regions_and_ops_and_replays_on_one_cpu() {
    let program = Program::build("two_devices", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "two_devices.recap");
    let report = report_of(&capture_on_two(&program, &archive));
    assert_eq!(report["ops"]["launch"], 3, "{report:#}");
    assert_eq!(report["ops"]["upload"], 4, "{report:#}");
    assert_eq!(report["ops"]["copy"], 1, "the peer copy: {report:#}");
    let notes = report["notes"].to_string();
    assert!(notes.contains("the range ran on 2 GPUs (cuda:0 (sm_90), cuda:1 (sm_90))"), "{report:#}");

    let lines = inspect_json(&archive);
    let devices: Vec<(&str, u64)> =
        of_type(&lines, "device").iter().map(|d| (d["name"].as_str().unwrap(), d["sm"].as_u64().unwrap())).collect();
    assert_eq!(devices, [("cuda:0", 90), ("cuda:1", 90)]);
    // alloc0 and alloc1 (x0, y0) were made in device 0's context, alloc2..4 (x1, y1, z1) in device
    // 1's; each upload is on the device of the region it fills.
    let regions: Vec<(&str, u64)> = of_type(&lines, "region")
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["device"].as_u64().unwrap()))
        .collect();
    for (name, device) in [("alloc0", 0), ("alloc1", 0), ("alloc2", 1), ("alloc3", 1), ("alloc4", 1)] {
        assert!(regions.contains(&(name, device)), "{name} on device {device}: {regions:?}");
    }
    assert_eq!(regions.iter().filter(|r| r.0.starts_with("upload")).map(|r| r.1).collect::<Vec<_>>(), [0, 0, 1, 1]);
    // Issue order, each op on its device, a signal and a wait at each change of device; the peer
    // copy (y0 into x1) on device 0, whose context was current.
    let ops: Vec<(String, u64)> = of_type(&lines, "op")
        .iter()
        .map(|o| {
            let kind = o["kind"].as_str().unwrap();
            let what = o["kernel"].as_str().map_or(kind.to_string(), |k| format!("{kind} {k}"));
            (what, o["device"].as_u64().unwrap())
        })
        .collect();
    let want: Vec<(String, u64)> = [
        ("copy", 0),
        ("copy", 0),
        ("launch scale_add", 0),
        ("signal", 0),
        ("wait", 1),
        ("copy", 1),
        ("copy", 1),
        ("launch mix_u32", 1),
        ("signal", 1),
        ("wait", 0),
        ("copy", 0),
        ("signal", 0),
        ("wait", 1),
        ("launch scale_add", 1),
    ]
    .iter()
    .map(|&(k, d)| (k.to_string(), d))
    .collect();
    assert_eq!(ops, want);

    // One CPU replays both devices and every region checks.
    replay_check(&archive, "interp");
}

#[test]
fn a_one_device_program_on_a_two_device_driver_still_gets_a_one_device_archive() {
    let program = Program::build("driver_api", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "driver_api.recap");
    let report = report_of(&capture_on_two(&program, &archive));
    assert!(!report["notes"].to_string().contains("GPUs"), "{report:#}");
    let lines = inspect_json(&archive);
    assert!(lines[0].get("devices").is_none(), "{}", lines[0]);
    assert!(of_type(&lines, "device").is_empty());
    assert!(of_type(&lines, "op").iter().all(|o| o.get("device").is_none() && o["kind"] != "signal"));
    replay_check(&archive, "interp");
}

/// A kernel on device 1 given a pointer into device 0's memory (peer access) is work an archive's
/// devices cannot express: the capture says so and writes the range as one device, which replays
/// and checks, instead of writing nothing.
#[test]
fn a_kernel_reading_a_peers_memory_keeps_the_range_as_one_device_and_says_why() {
    let program = Program::build("two_devices", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = tmp_archive(&dir, "peer.recap");
    let report = report_of(&capture_on_two_with(&program, &archive, &["peer"]));
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("the range ran on 2 GPUs, but op ")
            && notes.contains("is given a pointer into")
            && notes.contains("written as a one-device archive"),
        "{report:#}"
    );
    let lines = inspect_json(&archive);
    assert!(lines[0].get("devices").is_none(), "{}", lines[0]);
    assert!(of_type(&lines, "op").iter().all(|o| o["kind"] != "signal" && o["kind"] != "wait"));
    let out = replay_check(&archive, "interp");
    assert!(out.contains("regions pass"), "{out}");
}
