//! CUDA replay on a real GPU. Every test here that needs one is ignored unless asked for
//! (`--include-ignored`), so a machine without a GPU counts them as ignored, not passed; asked for
//! where no CUDA driver or device is found, each prints why it is skipped (the two that check what
//! happens without a driver always run). On a GPU machine run them with
//! `RECAP_CORPUS=.gpu/corpus RECAP_BIN=.gpu/bin/recap .gpu/tests/e2e-* gpu:: --include-ignored --nocapture`
//! (or `cargo test -p recap-tests --test e2e -- --include-ignored gpu::`).

use std::io::Cursor;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};

use recap::cuda::{locate_fault, CudaError, CudaReplay, Device, LoopLimit, Mode, OpenError, ReplayOptions};
use recap_bench::sample_kernels::SampleKernels;
use recap_tests::{corpus_cases, recap_bin};
use shared::archive::*;

/// GPU tests share one device and a fault resets it for the whole process: run them one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Device 0, or `None` after printing why the test is skipped.
fn gpu(test: &str) -> Option<Arc<Device>> {
    match Device::open(0) {
        Ok(d) => Some(d),
        Err(e @ (OpenError::NoDriver | OpenError::NoDevice { .. })) => {
            println!("skipping GPU test {test}: {e}");
            None
        }
        Err(e) => panic!("CUDA driver present but unusable: {e}"),
    }
}

const MODES: [Mode; 2] = [Mode::Graph, Mode::Stream];

fn opts(mode: Mode) -> ReplayOptions {
    ReplayOptions { mode, ..Default::default() }
}

fn writer() -> (ArchiveWriter<Cursor<Vec<u8>>>, SampleKernels) {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let k = SampleKernels::add(&mut w, "tests").unwrap();
    (w, k)
}

fn launch(kernel: KernelId, grid: u32, block: u32, params: Vec<u8>, pointers: &[(u64, RegionId)]) -> LaunchDecl {
    LaunchDecl {
        kernel,
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_bytes: 0,
        params,
        relocs: pointers.iter().map(|&(offset, target)| Reloc { offset, target, target_offset: 0 }).collect(),
    }
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}
fn u64s(bytes: &[u8]) -> Vec<u64> {
    bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect()
}

fn add_params(n: u32, v: u32) -> Vec<u8> {
    let mut p = vec![0u8; 16];
    p[8..12].copy_from_slice(&n.to_le_bytes());
    p[12..16].copy_from_slice(&v.to_le_bytes());
    p
}

#[test]
fn without_a_driver_the_error_says_so_in_one_line() {
    match Device::open(0) {
        Err(e @ OpenError::NoDriver) => {
            // Loading an archive for the GPU says the same, and never panics inside cudarc.
            let bytes = count_down_archive(1, 0);
            let archive = Archive::open(&bytes).unwrap();
            let load = CudaReplay::open(&archive, &[0], opts(Mode::Graph)).err().map(|e| e.to_string());
            assert_eq!(load.as_deref(), Some(e.to_string().as_str()));
            let msg = e.to_string();
            assert!(msg.starts_with("no CUDA driver found"), "{msg}");
            assert!(msg.contains("--device cpu") && !msg.contains('\n'), "{msg}");
        }
        Err(e @ OpenError::NoDevice { .. }) => assert!(e.to_string().starts_with("no CUDA device 0"), "{e}"),
        Err(e) => panic!("unexpected: {e}"),
        Ok(d) => {
            println!("CUDA driver present ({:?}): the no-driver message is checked on machines without one", d);
            assert!(matches!(Device::open(d.driver.device_count), Err(OpenError::NoDevice { .. })));
        }
    }
}

/// Runs the `recap` binary; returns (success, stdout, stderr).
fn recap(args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let o = Command::new(recap_bin()).args(args).output().expect("running recap");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Imports a corpus case with `recap import-case` into `dir`.
pub(crate) fn import_case(case: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    let name = case.file_name().unwrap().to_string_lossy().to_string();
    let out = dir.join(format!("{name}.recap"));
    let (ok, stdout, stderr) = recap(&[
        "import-case".as_ref(),
        case.as_os_str(),
        "--ptx".as_ref(),
        "sm_90".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(ok, "import {name}: {stdout}{stderr}");
    out
}

/// Imports every public corpus case with `recap import-case` and hands each to `f` with its name.
fn for_each_imported_case(mut f: impl FnMut(&str, &std::path::Path)) {
    let dir = tempfile::tempdir().unwrap();
    let cases = corpus_cases();
    assert!(cases.len() >= 16, "expected the 16 public cases, found {}", cases.len());
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        f(&name, &import_case(case, dir.path()));
    }
}

fn replay_cli(file: &std::path::Path, extra: &[&str]) -> (bool, String, String) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["replay".as_ref(), file.as_os_str()];
    args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
    recap(&args)
}

#[test]
fn the_cli_says_when_there_is_no_driver_or_device_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = import_case(&corpus_cases()[0], dir.path());
    let (device, want) = match Device::open(0) {
        Err(OpenError::NoDriver) => ("cuda".to_string(), "no CUDA driver found".to_string()),
        Err(OpenError::NoDevice { .. }) => ("cuda".to_string(), "no CUDA device 0".to_string()),
        Err(e) => panic!("CUDA driver present but unusable: {e}"),
        Ok(d) => {
            let n = d.driver.device_count;
            (format!("cuda:{n}"), format!("no CUDA device {n}: this machine has {n}"))
        }
    };
    let (ok, stdout, stderr) = replay_cli(&file, &["--device", &device, "--check"]);
    println!("recap replay --device {device}: {}", stderr.trim_end());
    assert!(!ok, "{stdout}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: ") && stderr.contains(&want), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_cli_replays_every_corpus_case_with_check_in_both_modes() {
    let _g = serial();
    let Some(_dev) = gpu("the_cli_replays_every_corpus_case_with_check_in_both_modes") else { return };
    let mut failures = Vec::new();
    for_each_imported_case(|name, file| {
        for (mode, how) in [
            ("graph", "one graph of"),
            ("graph-pdl", "one graph of"),
            ("graph-pdl-wait", "one graph of"),
            ("graph-plain", "one graph of"),
            ("stream", "op by op on a stream"),
        ] {
            let (ok, stdout, stderr) =
                replay_cli(file, &["--device", "cuda", "--mode", mode, "--iterations", "2", "--check"]);
            let summary = stdout.lines().find(|l| l.contains("regions pass")).unwrap_or("no check summary").to_string();
            let first = stdout.lines().next().unwrap_or_default().to_string();
            println!("{} {name} {mode}: {summary}; {first}", if ok { "PASS" } else { "FAIL" });
            if !ok || !first.contains(how) || !stdout.contains("iteration 2: ") {
                failures.push(format!("{name} --mode {mode}:\n{stdout}{stderr}"));
            }
        }
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_cli_names_the_faulting_op_and_exits_non_zero() {
    let _g = serial();
    let Some(_dev) = gpu("the_cli_names_the_faulting_op_and_exits_non_zero") else { return };
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.recap");
    std::fs::write(&bad, fault_archive()).unwrap();
    let good = dir.path().join("good.recap");
    std::fs::write(&good, count_down_archive(5, 0)).unwrap();
    for mode in ["graph", "stream"] {
        let (ok, stdout, stderr) = replay_cli(&bad, &["--device", "cuda", "--mode", mode]);
        println!("--mode {mode}: {}", stderr.trim_end());
        assert!(!ok, "{stdout}");
        assert!(stderr.contains("at op 1 (launch poke)") && stderr.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        // The next replay, in a new process, runs on the same GPU.
        let (ok, stdout, stderr) = replay_cli(&good, &["--device", "cuda", "--mode", mode]);
        assert!(ok && stdout.contains("iteration 1: "), "{stdout}{stderr}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_cli_warns_when_a_loop_stops_at_its_limit() {
    let _g = serial();
    let Some(_dev) = gpu("the_cli_warns_when_a_loop_stops_at_its_limit") else { return };
    let dir = tempfile::tempdir().unwrap();
    let limited = dir.path().join("limited.recap");
    std::fs::write(&limited, count_down_archive(10, 4)).unwrap();
    let within = dir.path().join("within.recap");
    std::fs::write(&within, count_down_archive(3, 4)).unwrap();
    let line = "op 0 (while counter[0]) stopped at its limit of 4 iterations with its condition still set";
    for mode in ["graph", "stream"] {
        let (ok, stdout, stderr) = replay_cli(&limited, &["--device", "cuda", "--mode", mode, "--iterations", "2"]);
        println!("--mode {mode}: {}", stderr.trim_end());
        assert!(ok, "{stdout}{stderr}");
        for i in [1, 2] {
            assert!(stderr.contains(&format!("warning: iteration {i}: {line}\n")), "{mode}: {stderr}");
        }
        let (ok, stdout, stderr) = replay_cli(&within, &["--device", "cuda", "--mode", mode, "--iterations", "2"]);
        assert!(ok && stdout.contains("iteration 2: "), "{stdout}{stderr}");
        assert!(!stderr.contains("stopped at its limit"), "{mode}: {stderr}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_corpus_case_passes_check_in_both_modes() {
    let _g = serial();
    let Some(dev) = gpu("every_corpus_case_passes_check_in_both_modes") else { return };
    let mut failures = Vec::new();
    for_each_imported_case(|name, file| {
        let bytes = std::fs::read(file).unwrap();
        let archive = Archive::open(&bytes).unwrap();
        // Library kernels (the default) in both modes, and graph nodes from module functions.
        let variants =
            [opts(Mode::Graph), opts(Mode::Stream), ReplayOptions { module_functions: true, ..opts(Mode::Graph) }];
        for options in variants {
            let mode = format!("{:?}{}", options.mode, if options.module_functions { " (modules)" } else { "" });
            let mut r = CudaReplay::load(&dev, &archive, options).unwrap_or_else(|e| panic!("{name} {mode}: {e}"));
            let (libraries, modules) = r.code_kinds();
            let wrong_kind = if options.module_functions { libraries } else { modules };
            assert_eq!(wrong_kind, 0, "{name} {mode}: {libraries} libraries, {modules} modules");
            let t = r.replay().unwrap_or_else(|e| panic!("{name} {mode}: {e}"));
            let checks = r.check(&archive).unwrap();
            assert!(!checks.is_empty(), "{name} has expected regions");
            let passed = checks.iter().all(|c| c.passed);
            println!(
                "{} {name} {mode}: {} regions, {:.1} us",
                if passed { "PASS" } else { "FAIL" },
                checks.len(),
                t.as_secs_f64() * 1e6
            );
            for c in checks.iter().filter(|c| !c.passed) {
                failures.push(format!("{name} {mode}: {}", c.line()));
            }
        }
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// counter = 10, acc = 0; while (counter) { counter -= 1; acc += 1 }.
fn count_down_archive(start: u32, max_iterations: u32) -> Vec<u8> {
    let (mut w, k) = writer();
    let counter = w.add_region(RegionDecl::new("counter", 4, DType::U32)).unwrap();
    let acc = w.add_region(RegionDecl::new("acc", 4, DType::U32)).unwrap();
    w.set_initial_bytes(counter, &start.to_le_bytes()).unwrap();
    w.begin_while(Condition { region: counter, offset: 0, max_iterations }).unwrap();
    w.launch(launch(k.count_down, 1, 32, vec![0; 16], &[(0, counter), (8, acc)])).unwrap();
    w.end_body().unwrap();
    w.finish().unwrap().into_inner()
}

/// counter = 10; while (counter) { x += 1 (64 threads); spin 20 us, then counter -= 1, acc += 1 }:
/// the body's last kernel writes the condition late, so a condition read too early runs one
/// iteration too many.
fn slow_writer_archive(start: u32) -> Vec<u8> {
    let (mut w, k) = writer();
    let counter = w.add_region(RegionDecl::new("counter", 4, DType::U32)).unwrap();
    let acc = w.add_region(RegionDecl::new("acc", 4, DType::U32)).unwrap();
    let x = w.add_region(RegionDecl::new("x", 64 * 4, DType::U32)).unwrap();
    w.set_initial_bytes(counter, &start.to_le_bytes()).unwrap();
    w.begin_while(Condition { region: counter, offset: 0, max_iterations: 0 }).unwrap();
    w.launch(launch(k.add_u32, 1, 64, add_params(64, 1), &[(0, x)])).unwrap();
    let mut p = vec![0u8; 24];
    p[16..24].copy_from_slice(&20_000u64.to_le_bytes());
    w.launch(launch(k.slow_count_down, 1, 32, p, &[(0, counter), (8, acc)])).unwrap();
    w.end_body().unwrap();
    w.finish().unwrap().into_inner()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_while_body_that_writes_its_condition_late_stops_on_time() {
    let _g = serial();
    let Some(dev) = gpu("a_while_body_that_writes_its_condition_late_stops_on_time") else { return };
    let bytes = slow_writer_archive(10);
    let archive = Archive::open(&bytes).unwrap();
    let variants = [
        opts(Mode::Graph),
        ReplayOptions { plain_condition_edges: true, ..opts(Mode::Graph) },
        ReplayOptions { trigger_condition_edges: true, ..opts(Mode::Graph) },
        opts(Mode::Stream),
    ];
    for options in variants {
        let mut r = CudaReplay::load(&dev, &archive, options).unwrap();
        for round in 0..3 {
            r.write_region_at(0, 0, &10u32.to_le_bytes()).unwrap();
            r.write_region_at(1, 0, &0u32.to_le_bytes()).unwrap();
            r.replay().unwrap();
            let got = (u32s(&r.read_region(1).unwrap())[0], u32s(&r.read_region(0).unwrap())[0]);
            assert_eq!(got, (10, 0), "{options:?}, round {round}: (acc, counter)");
        }
        println!("slow writer, {options:?}: 10 iterations exactly, {} programmatic edges", r.programmatic_edges());
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn while_loop_runs_until_its_condition_clears() {
    let _g = serial();
    let Some(dev) = gpu("while_loop_runs_until_its_condition_clears") else { return };
    for (start, max, want_acc, want_counter) in [(10, 0, 10, 0), (1000, 0, 1000, 0), (0, 0, 0, 0), (10, 4, 4, 6)] {
        let bytes = count_down_archive(start, max);
        let archive = Archive::open(&bytes).unwrap();
        for mode in MODES {
            let mut r = CudaReplay::load(&dev, &archive, opts(mode)).unwrap();
            if start == 10 && max == 0 {
                println!(
                    "while, {mode:?}: (libraries, modules) loaded: {:?}, programmatic edges: {}",
                    r.code_kinds(),
                    r.programmatic_edges()
                );
            }
            r.replay().unwrap();
            let got = (u32s(&r.read_region(1).unwrap())[0], u32s(&r.read_region(0).unwrap())[0]);
            assert_eq!(got, (want_acc, want_counter), "start {start} max {max} {mode:?}");
            // Only a loop its limit stopped with the counter still set is reported.
            let limited = max != 0 && start > max;
            let want: Vec<LoopLimit> = if limited {
                vec![LoopLimit { op: 0, label: "while counter[0]".into(), limit: max, times: 1 }]
            } else {
                Vec::new()
            };
            assert_eq!(r.loop_limits().unwrap(), want, "start {start} max {max} {mode:?}");
            // A second replay continues from the state the first left; 3 passes end on their own.
            r.write_region_at(0, 0, &3u32.to_le_bytes()).unwrap();
            r.replay().unwrap();
            let acc = u32s(&r.read_region(1).unwrap())[0];
            assert_eq!(acc, want_acc + if max == 0 { 3 } else { 3.min(max) }, "second replay, {mode:?}");
            assert_eq!(r.loop_limits().unwrap(), want, "second replay, start {start} max {max} {mode:?}");
            if limited {
                // Stopped by the limit again: counted twice.
                r.write_region_at(0, 0, &(max + 5).to_le_bytes()).unwrap();
                r.replay().unwrap();
                let twice = r.loop_limits().unwrap();
                assert_eq!(twice.len(), 1, "{mode:?}");
                assert_eq!(twice[0].times, 2, "{mode:?}");
                println!("while start {start} max {max}, {mode:?}: {}", twice[0].message());
            }
        }
        println!("while start {start} max {max}: acc {want_acc} in both modes");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn if_runs_its_body_only_when_the_flag_is_set() {
    let _g = serial();
    let Some(dev) = gpu("if_runs_its_body_only_when_the_flag_is_set") else { return };
    let (mut w, k) = writer();
    let flags = w.add_region(RegionDecl::new("flags", 8, DType::U32)).unwrap();
    let x = w.add_region(RegionDecl::new("x", 64 * 4, DType::U32)).unwrap();
    let y = w.add_region(RegionDecl::new("y", 64 * 4, DType::U32)).unwrap();
    w.set_initial_bytes(flags, &[1, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    w.begin_if(Condition { region: flags, offset: 0, max_iterations: 0 }).unwrap();
    w.launch(launch(k.add_u32, 1, 64, add_params(64, 5), &[(0, x)])).unwrap();
    w.end_body().unwrap();
    w.begin_if(Condition { region: flags, offset: 4, max_iterations: 0 }).unwrap();
    w.launch(launch(k.add_u32, 1, 64, add_params(64, 7), &[(0, y)])).unwrap();
    w.end_body().unwrap();
    let bytes = w.finish().unwrap().into_inner();
    let archive = Archive::open(&bytes).unwrap();
    for mode in MODES {
        let mut r = CudaReplay::load(&dev, &archive, opts(mode)).unwrap();
        r.replay().unwrap();
        assert_eq!(u32s(&r.read_region(x).unwrap()), vec![5; 64], "{mode:?}");
        assert_eq!(u32s(&r.read_region(y).unwrap()), vec![0; 64], "{mode:?}");
        // Flip the flags: now only the second body runs.
        r.write_region_at(flags, 0, &[0, 0, 0, 0, 1, 0, 0, 0]).unwrap();
        r.replay().unwrap();
        assert_eq!(u32s(&r.read_region(x).unwrap()), vec![5; 64], "{mode:?}");
        assert_eq!(u32s(&r.read_region(y).unwrap()), vec![7; 64], "{mode:?}");
    }
    println!("if: bodies ran exactly when their flags were set, both modes");
}

/// Two branches of two spinning kernels each; every kernel stamps its start and end (%globaltimer).
fn branches_archive(spin_ns: u64) -> Vec<u8> {
    let (mut w, k) = writer();
    let a = w.add_region(RegionDecl::new("a", 32, DType::U64)).unwrap();
    let b = w.add_region(RegionDecl::new("b", 32, DType::U64)).unwrap();
    for step in 0..2u64 {
        for region in [a, b] {
            let mut p = vec![0u8; 16];
            p[8..16].copy_from_slice(&spin_ns.to_le_bytes());
            w.launch(LaunchDecl {
                relocs: vec![Reloc { offset: 0, target: region, target_offset: step * 16 }],
                ..launch(k.stamp_spin, 1, 32, p, &[])
            })
            .unwrap();
        }
    }
    w.finish().unwrap().into_inner()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn independent_branches_overlap_in_time() {
    let _g = serial();
    let Some(dev) = gpu("independent_branches_overlap_in_time") else { return };
    let spin = 500_000; // 0.5 ms per kernel
    let bytes = branches_archive(spin);
    let archive = Archive::open(&bytes).unwrap();
    // Plan: a and b are independent, each a chain of two.
    assert_eq!(archive_depth(&archive), 2);
    for serial_chain in [false, true] {
        let options = ReplayOptions { serial: serial_chain, ..opts(Mode::Graph) };
        let mut r = CudaReplay::load(&dev, &archive, options).unwrap();
        let (nodes, edges) = r.graph_size().unwrap();
        r.replay().unwrap(); // warm
        let t = r.replay().unwrap();
        let a = u64s(&r.read_region(0).unwrap());
        let b = u64s(&r.read_region(1).unwrap());
        // Each branch ran in order.
        assert!(a[0] < a[1] && a[1] <= a[2] && a[2] < a[3], "{a:?}");
        assert!(b[0] < b[1] && b[1] <= b[2] && b[2] < b[3], "{b:?}");
        // Time during which a kernel of branch a and a kernel of branch b ran at once.
        let kernels = |s: &[u64]| [(s[0], s[1]), (s[2], s[3])];
        let mut overlap = 0i64;
        for (s0, e0) in kernels(&a) {
            for (s1, e1) in kernels(&b) {
                overlap += (e0.min(e1) as i64 - s0.max(s1) as i64).max(0);
            }
        }
        println!(
            "{}: {nodes} nodes, {edges} edges, replay {:.2} ms, branches overlap {:.2} ms",
            if serial_chain { "chained" } else { "DAG" },
            t.as_secs_f64() * 1e3,
            overlap as f64 / 1e6
        );
        if serial_chain {
            assert_eq!(edges, 3);
            assert_eq!(overlap, 0, "a chain must not overlap: {a:?} {b:?}");
        } else {
            assert_eq!(edges, 2);
            // Both branches ran at once for most of their length.
            assert!(overlap as u64 > spin, "branches did not overlap: a {a:?} b {b:?}");
            assert!(t.as_nanos() < 3 * spin as u128, "DAG replay took {t:?}");
        }
    }
}

fn archive_depth(a: &Archive) -> usize {
    shared::plan::Plan::build(a).top().depth()
}

pub(crate) fn fault_archive() -> Vec<u8> {
    let (mut w, k) = writer();
    let x = w.add_region(RegionDecl::new("x", 256, DType::U32)).unwrap();
    w.launch(launch(k.add_u32, 1, 64, add_params(64, 1), &[(0, x)])).unwrap();
    let mut p = vec![0u8; 16];
    p[0..8].copy_from_slice(&0x10u64.to_le_bytes()); // a by-value address nothing maps
    w.launch(launch(k.poke, 1, 1, p, &[])).unwrap();
    w.finish().unwrap().into_inner()
}

/// Runs test `name` again in a process of its own and wants it to pass; `false` inside that
/// process. A kernel fault can leave the driver unusable for the rest of the process that made
/// it, which must not take the GPU tests after it down with it.
fn in_own_process(name: &str) -> bool {
    if std::env::var_os("RECAP_TEST_OWN_PROCESS").is_some() {
        return false;
    }
    let exe = std::env::current_exe().expect("the test executable");
    let out = Command::new(exe)
        .args([&format!("gpu::{name}"), "--exact", "--nocapture", "--test-threads", "1"])
        .env("RECAP_TEST_OWN_PROCESS", "1")
        .output()
        .expect("running the test in its own process");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{said}");
    assert!(out.status.success() && said.contains("1 passed"), "{name} in its own process: {said}");
    true
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_fault_names_its_op_and_the_next_replay_works() {
    let _g = serial();
    let Some(dev) = gpu("a_kernel_fault_names_its_op_and_the_next_replay_works") else { return };
    if in_own_process("a_kernel_fault_names_its_op_and_the_next_replay_works") {
        return;
    }
    // Where the driver keeps the fault for the whole process, the op is found by `recap
    // cuda-probe` in a child process: this test knows where that binary is.
    recap::cuda::probe::set_child_probe(recap::child_probe::recap_binary(recap_bin()));
    let bad_bytes = fault_archive();
    let bad = Archive::open(&bad_bytes).unwrap();
    let good_bytes = count_down_archive(5, 0);
    let good = Archive::open(&good_bytes).unwrap();
    // A replay loaded before the fault is invalidated with the context, and says so.
    let mut bystander = CudaReplay::load(&dev, &good, opts(Mode::Graph)).unwrap();
    let mut r = CudaReplay::load(&dev, &bad, opts(Mode::Graph)).unwrap();
    let err = r.replay().expect_err("the poke must fault");
    assert!(err.is_fault(), "{err}");
    let msg = locate_fault(&dev, &bad_bytes, err, 1).to_string();
    println!("graph mode: {msg}");
    assert!(msg.contains("at op 1 (launch poke)"), "{msg}");
    assert!(msg.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{msg}");
    assert!(r.replay().is_err());
    assert!(matches!(bystander.replay(), Err(CudaError::Stale)));
    drop((r, bystander));
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let probe = |file: &std::path::Path| -> serde_json::Value {
        let out = Command::new(recap_bin()).arg("cuda-probe").arg(file).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    match dev.lost() {
        None => {
            println!("recovered in this process: {:?}", dev.recoveries());
            for mode in MODES {
                let mut next = CudaReplay::load(&dev, &good, opts(mode)).unwrap();
                next.replay().unwrap();
                assert_eq!(u32s(&next.read_region(1).unwrap())[0], 5, "{mode:?}");
                // Stream mode names the op by itself, and the device recovers again.
                let mut bad_again =
                    CudaReplay::load(&dev, &bad, ReplayOptions { sync_each_op: true, ..opts(mode) }).unwrap();
                if mode == Mode::Stream {
                    let e = bad_again.replay().unwrap_err().to_string();
                    assert!(e.contains("at op 1 (launch poke)"), "{e}");
                }
            }
        }
        Some(why) => {
            // The driver keeps this fault for the whole process: this process says so clearly
            // and keeps running; a new process replays on the same GPU.
            println!("the driver kept the fault for this process: {why}");
            let again = Device::open(0).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(again.contains("unusable in this process") && again.contains("new process"), "{again}");
            let ok = probe(&write("good.recap", &good_bytes));
            assert!(ok["op"].is_null(), "{ok}");
            let found = probe(&write("bad.recap", &bad_bytes));
            assert_eq!(found["op"], 1, "{found}");
            println!("a new process replayed the good archive and named op {} of the bad one", found["op"]);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_jit_failure_carries_the_jit_log() {
    let _g = serial();
    let Some(dev) = gpu("a_jit_failure_carries_the_jit_log") else { return };
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let bad_ptx =
        ".version 7.8\n.target sm_60\n.address_size 64\n.visible .entry k()\n{\n  frobnicate.u32 %r1;\n  ret;\n}\n";
    let m = w.add_module("broken", bad_ptx).unwrap();
    let k = w.add_kernel(m, "k", vec![]).unwrap();
    w.launch(launch(k, 1, 1, vec![], &[])).unwrap();
    let bytes = w.finish().unwrap().into_inner();
    let archive = Archive::open(&bytes).unwrap();
    let err = CudaReplay::load(&dev, &archive, opts(Mode::Graph)).err().expect("bad PTX must not load");
    let msg = err.to_string();
    println!("{msg}");
    assert!(msg.starts_with("module broken did not load"), "{msg}");
    assert!(msg.contains("JIT log") && msg.contains("frobnicate"), "{msg}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn inputs_and_launch_parameters_change_without_a_rebuild() {
    let _g = serial();
    let Some(dev) = gpu("inputs_and_launch_parameters_change_without_a_rebuild") else { return };
    let (mut w, k) = writer();
    let n = 40;
    let x = w.add_region(RegionDecl::new("x", n as u64 * 4, DType::U32)).unwrap();
    w.add_binding("x", x, Direction::InOut).unwrap();
    for _ in 0..n {
        w.launch(launch(k.add_u32, 1, 64, add_params(n, 1), &[(0, x)])).unwrap();
    }
    let bytes = w.finish().unwrap().into_inner();
    let archive = Archive::open(&bytes).unwrap();
    for mode in MODES {
        let mut r = CudaReplay::load(&dev, &archive, opts(mode)).unwrap();
        r.replay().unwrap();
        assert_eq!(u32s(&r.read_output("x").unwrap()), vec![n; n as usize]);
        // New input, then one changed parameter (a per-node update), then all of them (one exec update).
        r.set_input("x", &vec![0u8; n as usize * 4]).unwrap();
        r.set_launch_params(0, &add_params(n, 101)).unwrap();
        r.replay().unwrap();
        assert_eq!(u32s(&r.read_output("x").unwrap()), vec![n + 100; n as usize], "{mode:?}");
        r.set_input("x", &vec![0u8; n as usize * 4]).unwrap();
        for op in 0..n {
            r.set_launch_params(op, &add_params(n, 2)).unwrap();
        }
        r.replay().unwrap();
        assert_eq!(u32s(&r.read_output("x").unwrap()), vec![2 * n; n as usize], "{mode:?}");
        assert!(r.set_input("nope", &[]).is_err());
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn memsets_of_every_width_and_alignment() {
    let _g = serial();
    let Some(dev) = gpu("memsets_of_every_width_and_alignment") else { return };
    let (mut w, _) = writer();
    let size = 4096u64;
    let r = w.add_region(RegionDecl::new("r", size, DType::U8)).unwrap();
    w.set_initial_bytes(r, &vec![0xee; size as usize]).unwrap();
    let fills = [
        (0u64, 64u64, 1u32, 0xabu64),
        (64, 64, 2, 0x1234),
        (130, 62, 2, 0x5678), // 2-aligned
        (192, 64, 4, 0xdeadbeef),
        (256, 64, 4, 0x01020304),
        (328, 64, 8, 0x1122334455667788), // halves differ: generated kernel
        (400, 64, 8, 0x0badf00d0badf00d), // equal halves: a 4-byte memset
        (464, 24, 8, 0x8877665544332211),
        (512, 3000, 8, 0x0102030405060708),
    ];
    let mut want = vec![0xeeu8; size as usize];
    for (offset, len, width, pattern) in fills {
        let m = MemsetOp { region: r, offset, len, width, pattern };
        w.memset(m).unwrap();
        m.fill(&mut want[offset as usize..(offset + len) as usize]);
    }
    let bytes = w.finish().unwrap().into_inner();
    let archive = Archive::open(&bytes).unwrap();
    for mode in MODES {
        let mut replay = CudaReplay::load(&dev, &archive, opts(mode)).unwrap();
        replay.replay().unwrap();
        let got = replay.read_region(r).unwrap();
        let first_bad = got.iter().zip(&want).position(|(a, b)| a != b);
        assert_eq!(first_bad, None, "{mode:?}: first wrong byte");
    }
    println!("memsets: 1/2/4/8-byte patterns at every alignment match in both modes");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn stream_mode_reports_per_op_times() {
    let _g = serial();
    let Some(dev) = gpu("stream_mode_reports_per_op_times") else { return };
    let bytes = branches_archive(100_000);
    let archive = Archive::open(&bytes).unwrap();
    let mut r = CudaReplay::load(&dev, &archive, ReplayOptions { op_timing: true, ..opts(Mode::Stream) }).unwrap();
    r.replay().unwrap();
    let times = r.op_times().unwrap();
    assert_eq!(times.len(), 4);
    for t in &times {
        println!("op {} {}: {:?}", t.op, t.label, t.total);
        assert!(t.total.as_nanos() >= 90_000, "{t:?}");
    }
}

/// `ReplayOptions` for programmatic dependent launch.
fn pdl() -> ReplayOptions {
    ReplayOptions { pdl: recap::cuda::Pdl::On, ..opts(Mode::Graph) }
}

/// Ten times: a kernel that spins 20 us before it reads and writes `counter` and `acc`, then one
/// that does the same at once. A dependent scheduled early that did not wait would read what the
/// slow one had not yet written.
fn late_writes_archive(start: u32) -> Vec<u8> {
    let (mut w, k) = writer();
    let counter = w.add_region(RegionDecl::new("counter", 4, DType::U32)).unwrap();
    let acc = w.add_region(RegionDecl::new("acc", 4, DType::U32)).unwrap();
    w.set_initial_bytes(counter, &start.to_le_bytes()).unwrap();
    for _ in 0..10 {
        let mut p = vec![0u8; 24];
        p[16..24].copy_from_slice(&20_000u64.to_le_bytes());
        w.launch(launch(k.slow_count_down, 1, 32, p, &[(0, counter), (8, acc)])).unwrap();
        w.launch(launch(k.count_down, 1, 32, vec![0; 16], &[(0, counter), (8, acc)])).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn programmatic_edges_wait_for_a_late_write() {
    let _g = serial();
    let Some(dev) = gpu("programmatic_edges_wait_for_a_late_write") else { return };
    let bytes = late_writes_archive(100);
    let archive = Archive::open(&bytes).unwrap();
    let r = CudaReplay::load(&dev, &archive, pdl()).unwrap();
    if dev.sm < 90 {
        assert!(r.warnings().iter().any(|w| w.contains("sm_90")), "{:?}", r.warnings());
        return;
    }
    assert_eq!(r.dependent_edges(), 19, "every kernel after the first follows through a programmatic edge");
    // Both kernels are one block: each triggers its dependent at entry, so the fast one is
    // scheduled while the slow one spins, and must still read what it wrote.
    assert_eq!((r.triggered_kernels(), r.reloaded_modules()), (2, 0));
    // The default takes them too; plain edges when asked; the wait alone when asked.
    let default = CudaReplay::load(&dev, &archive, opts(Mode::Graph)).unwrap();
    assert_eq!((default.dependent_edges(), default.triggered_kernels()), (19, 2));
    let plain =
        CudaReplay::load(&dev, &archive, ReplayOptions { pdl: recap::cuda::Pdl::Off, ..opts(Mode::Graph) }).unwrap();
    assert_eq!((plain.dependent_edges(), plain.triggered_kernels()), (0, 0));
    let wait = CudaReplay::load(&dev, &archive, ReplayOptions { pdl_wait_only: true, ..pdl() }).unwrap();
    assert_eq!((wait.dependent_edges(), wait.triggered_kernels()), (19, 0));
    drop(default);
    for mut replay in [r, wait, plain] {
        for _ in 0..3 {
            replay.restore_initial(&archive).unwrap();
            replay.replay().unwrap();
            let (counter, acc) = (u32s(&replay.read_region(0).unwrap()), u32s(&replay.read_region(1).unwrap()));
            assert_eq!((counter[0], acc[0]), (80, 20), "every read saw the write before it");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn early_triggers_go_to_half_wave_kernels_and_change_no_result() {
    let _g = serial();
    let Some(dev) = gpu("early_triggers_go_to_half_wave_kernels_and_change_no_result") else { return };
    // `inc` at one block per multiprocessor: half a wave wherever a multiprocessor holds two of its
    // blocks, which the occupancy API says, so it triggers. `add_u32` at four 256-thread blocks per
    // multiprocessor, half of what the thread limit alone would let fit, but with 100 KiB of dynamic
    // shared memory each, so that the occupancy API puts at most two on a multiprocessor: past half
    // a wave, its module is loaded again without the trigger for it.
    let sms = dev.residency.multiprocessors;
    let (mut w, k) = writer();
    let a = w.add_region(RegionDecl::new("a", sms as u64 * 1024, DType::F32)).unwrap();
    let n = sms * 4 * 256;
    let b = w.add_region(RegionDecl::new("b", n as u64 * 4, DType::U32)).unwrap();
    for v in 1..=6u32 {
        let mut p = vec![0u8; 12];
        p[8..12].copy_from_slice(&(sms * 256).to_le_bytes());
        w.launch(launch(k.inc, sms, 256, p, &[(0, a)])).unwrap();
        let wide = launch(k.add_u32, sms * 4, 256, add_params(n, v), &[(0, b)]);
        w.launch(LaunchDecl { shared_bytes: 100 * 1024, ..wide }).unwrap();
    }
    let bytes = w.finish().unwrap().into_inner();
    let archive = Archive::open(&bytes).unwrap();
    let mut results = Vec::new();
    for (name, options) in [
        ("graph-plain", ReplayOptions { pdl: recap::cuda::Pdl::Off, ..opts(Mode::Graph) }),
        ("graph-pdl-wait", ReplayOptions { pdl_wait_only: true, ..pdl() }),
        ("graph-pdl", pdl()),
        ("stream", opts(Mode::Stream)),
    ] {
        let mut r = CudaReplay::load(&dev, &archive, options).unwrap();
        let how = (r.dependent_edges(), r.triggered_kernels(), r.reloaded_modules());
        println!("{name}: (programmatic edges, kernels that trigger early, modules loaded twice) {how:?}");
        if name == "graph-pdl" && dev.sm >= 90 {
            assert_eq!(how, (10, 1, 1), "inc triggers, add_u32 does not");
        } else {
            assert_eq!((how.1, how.2), (0, 0), "{name}");
        }
        for _ in 0..3 {
            r.restore_initial(&archive).unwrap();
            r.replay().unwrap();
            let (x, y) = (r.read_region(a).unwrap(), u32s(&r.read_region(b).unwrap()));
            assert!(x.chunks(4).all(|c| f32::from_le_bytes(c.try_into().unwrap()) == 6.0), "{name}: a");
            assert!(y.iter().all(|&v| v == 21), "{name}: b saw every add");
            results.push((x, y));
        }
    }
    assert!(results.windows(2).all(|w| w[0] == w[1]), "every mode gives the same bytes");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn programmatic_edges_hold_with_more_blocks_than_the_gpu_holds_at_once() {
    let _g = serial();
    let Some(dev) = gpu("programmatic_edges_hold_with_more_blocks_than_the_gpu_holds_at_once") else { return };
    // 2^24 u32s, 65,536 blocks of 256 threads per launch: many waves on any GPU.
    let n: u32 = 1 << 24;
    let (mut w, k) = writer();
    let x = w.add_region(RegionDecl::new("x", n as u64 * 4, DType::U32)).unwrap();
    for v in 1..=6u32 {
        w.launch(launch(k.add_u32, n / 256, 256, add_params(n, v), &[(0, x)])).unwrap();
    }
    let bytes = w.finish().unwrap().into_inner();
    let archive = Archive::open(&bytes).unwrap();
    let mut r = CudaReplay::load(&dev, &archive, pdl()).unwrap();
    if dev.sm >= 90 {
        // Past half a wave: the wait alone, no early trigger, and no second load to find that out.
        assert_eq!((r.dependent_edges(), r.triggered_kernels(), r.reloaded_modules()), (5, 0, 0));
    }
    for _ in 0..3 {
        r.restore_initial(&archive).unwrap();
        r.replay().unwrap();
        let got = u32s(&r.read_region(x).unwrap());
        assert!(got.iter().all(|&v| v == 21), "every element saw every add: {:?}", got.iter().find(|&&v| v != 21));
    }
}

/// Every GPU of the machine, or `None` after printing why the test is skipped.
fn all_gpus(test: &str) -> Option<Vec<Arc<Device>>> {
    let first = gpu(test)?;
    let mut out = vec![first];
    while let Ok(d) = Device::open(out.len()) {
        out.push(d);
    }
    Some(out)
}

/// Two logical devices: fills, launches, a peer copy each way, a signal and a wait, and a
/// device-side loop on device 1.
fn two_device_archive() -> Vec<u8> {
    let (mut w, k) = writer();
    for name in ["left", "right"] {
        w.add_device(&DeviceDecl { name: name.into(), sm: 0 }).unwrap();
    }
    let n = 256u32;
    let ones: Vec<u8> = (0..n).flat_map(|i| (i + 1).to_le_bytes()).collect();
    let x0 = w.add_region(RegionDecl::new("x0", n as u64 * 4, DType::U32)).unwrap();
    w.set_initial_bytes(x0, &ones).unwrap();
    let x1 = w.add_region(RegionDecl::new("x1", n as u64 * 4, DType::U32).on(1)).unwrap();
    let counter = w.add_region(RegionDecl::new("counter", 4, DType::U32).on(1)).unwrap();
    w.set_initial_bytes(counter, &5u32.to_le_bytes()).unwrap();
    let acc = w.add_region(RegionDecl::new("acc", 4, DType::U32).on(1)).unwrap();
    w.launch(launch(k.add_u32, 1, n, add_params(n, 3), &[(0, x0)])).unwrap();
    // An 8-byte pattern with differing halves: recap's fill kernel, on device 0's GPU.
    w.memset(MemsetOp { region: x0, offset: 64, len: 64, width: 8, pattern: 0x0000_0007_0000_0009 }).unwrap();
    w.signal(0).unwrap();
    w.set_device(1).unwrap();
    w.wait(0).unwrap();
    w.copy(CopyOp { src: x0, src_offset: 0, dst: x1, dst_offset: 0, len: n as u64 * 4 }).unwrap();
    w.launch(launch(k.add_u32, 1, n, add_params(n, 100), &[(0, x1)])).unwrap();
    w.begin_while(Condition { region: counter, offset: 0, max_iterations: 0 }).unwrap();
    w.launch(launch(k.count_down, 1, 32, vec![0; 16], &[(0, counter), (8, acc)])).unwrap();
    w.end_body().unwrap();
    w.set_device(0).unwrap();
    w.copy(CopyOp { src: x1, src_offset: 512, dst: x0, dst_offset: 0, len: 256 }).unwrap();
    w.finish().unwrap().into_inner()
}

/// Every region after one CPU replay: what every GPU placement must give.
fn cpu_regions(bytes: &[u8]) -> Vec<Vec<u8>> {
    let archive = Archive::open(bytes).unwrap();
    let mut cpu = shared::replay::CpuReplay::new(&archive, Default::default()).unwrap();
    cpu.run_iteration(&mut shared::replay::NoObserver).unwrap();
    (0..archive.region_count() as RegionId).map(|r| cpu.read_region(r).unwrap()).collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_two_device_archive_gives_the_cpus_bytes_on_one_gpu_and_on_two() {
    let _serial = serial();
    let Some(gpus) = all_gpus("a_two_device_archive_gives_the_cpus_bytes_on_one_gpu_and_on_two") else { return };
    let bytes = two_device_archive();
    let archive = Archive::open(&bytes).unwrap();
    let want = cpu_regions(&bytes);
    assert_eq!(u32s(&want[3]), vec![5], "the loop ran five times on the CPU");
    let mut placements: Vec<Vec<Arc<Device>>> = vec![vec![gpus[0].clone()]];
    if gpus.len() >= 2 {
        placements.push(vec![gpus[0].clone(), gpus[1].clone()]);
        placements.push(vec![gpus[1].clone(), gpus[0].clone()]);
    } else {
        println!("one GPU: the two-GPU placements of a_two_device_archive_gives_the_cpus_bytes_on_one_gpu_and_on_two are skipped");
    }
    // Without peer access the copies between the GPUs go through the driver's staging.
    let staged = ReplayOptions { without_peer_access: true, ..opts(Mode::Graph) };
    for devices in &placements {
        for options in [opts(Mode::Graph), opts(Mode::Stream), staged] {
            let mode = options.mode;
            let mut r = CudaReplay::load_on(devices, &archive, options).unwrap();
            let ordinals: Vec<usize> = devices.iter().map(|d| d.ordinal).collect();
            let expect_placement = if devices.len() == 1 { vec![ordinals[0]; 2] } else { ordinals.clone() };
            assert_eq!(r.placement(), expect_placement);
            for round in 0..2 {
                r.restore_initial(&archive).unwrap();
                r.replay().unwrap();
                for (id, want) in want.iter().enumerate() {
                    let got = r.read_region(id as RegionId).unwrap();
                    assert_eq!(
                        &got,
                        want,
                        "{} region {id} on {ordinals:?} in {mode:?}, round {round}",
                        archive.region(id as RegionId).name
                    );
                }
            }
        }
    }
    // Three GPUs for two devices: refused, naming both counts.
    let three = vec![gpus[0].clone(); 3];
    let err = CudaReplay::load_on(&three, &archive, opts(Mode::Graph)).err().unwrap().to_string();
    assert!(err.contains("the archive has 2 devices but 3 GPUs were given"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_halo_exchange_passes_its_check_on_one_gpu_and_across_two() {
    let _serial = serial();
    let Some(gpus) = all_gpus("a_halo_exchange_passes_its_check_on_one_gpu_and_across_two") else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("halo.recap");
    std::fs::write(&path, recap_bench::halo_archive(256, 128, 20, 2, true)).unwrap();
    let mut runs = vec![vec!["--device", "cuda:0"]];
    if gpus.len() >= 2 {
        runs.push(vec!["--devices", "cuda:0,cuda:1"]);
        runs.push(vec!["--devices", "0=cuda:1,1=cuda:0"]);
        runs.push(vec!["--devices", "cuda:1,cuda:0", "--mode", "stream"]);
    } else {
        println!("one GPU: the two-GPU runs of a_halo_exchange_passes_its_check_on_one_gpu_and_across_two are skipped");
    }
    for run in runs {
        let out = Command::new(recap_bin())
            .arg("replay")
            .arg(&path)
            .args(&run)
            .args(["--check", "--iterations", "3"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{run:?}: {text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("2 of 2 regions pass"), "{run:?}: {text}");
    }
}
