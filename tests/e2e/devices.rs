//! Multi-device archives: the 1.1 format (a `devices` section, placed regions and ops, signal and
//! wait), what the reader refuses, the plan's per-device order, and replays of a halo exchange
//! split across devices on the CPU, which must give the bits of the same work on one device.

use std::io::Cursor;
use std::process::Command;

use recap_bench::halo_archive;
use recap_tests::archive::{reseal, section};
use recap_tests::recap_bin;
use shared::archive::layout::{self, SectionKind};
use shared::archive::*;
use shared::plan::{Hazard, Plan};
use shared::replay::{CpuReplay, NoObserver};

const PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k(.param .u64 a)\n{\nret;\n}\n";

/// Two devices, a region on each, a launch on each, a copy between them, and a signal/wait pair.
fn two_devices() -> (ArchiveWriter<Cursor<Vec<u8>>>, KernelId, RegionId, RegionId) {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    assert_eq!(w.add_device(&DeviceDecl { name: "left".into(), sm: 90 }).unwrap(), 0);
    assert_eq!(w.add_device(&DeviceDecl { name: "right".into(), sm: 80 }).unwrap(), 1);
    let m = w.add_module("m", PTX).unwrap();
    let k = w
        .add_kernel(
            m,
            "k",
            vec![ParamDecl { name: "a".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer }],
        )
        .unwrap();
    let a = w.add_region(RegionDecl::new("a", 64, DType::U32)).unwrap();
    let b = w.add_region(RegionDecl::new("b", 64, DType::U32).on(1)).unwrap();
    (w, k, a, b)
}

fn launch(w: &mut ArchiveWriter<Cursor<Vec<u8>>>, k: KernelId, target: RegionId) -> Result<OpId, WriteError> {
    let relocs = vec![Reloc { offset: 0, target, target_offset: 0 }];
    w.launch(LaunchDecl { kernel: k, grid: [1; 3], block: [1, 1, 1], shared_bytes: 0, params: vec![0; 8], relocs })
}

#[test]
fn devices_regions_and_ops_keep_their_placement_and_the_file_says_1_1() {
    let (mut w, k, a, b) = two_devices();
    launch(&mut w, k, a).unwrap();
    w.signal(7).unwrap();
    w.set_device(1).unwrap();
    w.wait(7).unwrap();
    w.copy(CopyOp { src: a, src_offset: 0, dst: b, dst_offset: 0, len: 64 }).unwrap();
    launch(&mut w, k, b).unwrap();
    let bytes = w.finish().unwrap().into_inner();
    let archive = Archive::open(&bytes).unwrap();
    archive.validate().unwrap();
    assert_eq!(archive.version(), (1, layout::MINOR_DEVICES));
    assert_eq!(archive.device_count(), 2);
    let devices: Vec<DeviceDecl> = archive.devices().collect();
    assert_eq!(devices, vec![DeviceDecl { name: "left".into(), sm: 90 }, DeviceDecl { name: "right".into(), sm: 80 }]);
    assert_eq!((archive.region(a).device, archive.region(b).device), (0, 1));
    let placed: Vec<(u32, &str)> =
        (0..archive.op_count() as OpId).map(|i| (archive.op_device(i), archive.op(i).kind_name())).collect();
    assert_eq!(placed, vec![(0, "launch"), (0, "signal"), (1, "wait"), (1, "copy"), (1, "launch")]);
    assert_eq!(archive.op(1), Op::Signal(7));
    assert_eq!(archive.op(2), Op::Wait(7));

    // The section is marked required: a reader that skipped it would misplace everything.
    let table = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
    let count = u32::from_le_bytes(bytes[24..28].try_into().unwrap()) as usize;
    let entry = (0..count)
        .map(|i| &bytes[table + i * 48..table + (i + 1) * 48])
        .find(|e| e[0..4] == 13u32.to_le_bytes())
        .unwrap();
    assert_eq!(
        u32::from_le_bytes(entry[4..8].try_into().unwrap()) & layout::SECTION_REQUIRED,
        layout::SECTION_REQUIRED
    );
}

#[test]
fn a_one_device_archive_stays_1_0_with_every_op_on_device_0() {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("m", PTX).unwrap();
    let k = w
        .add_kernel(
            m,
            "k",
            vec![ParamDecl { name: "a".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer }],
        )
        .unwrap();
    let a = w.add_region(RegionDecl::new("a", 64, DType::U32)).unwrap();
    launch(&mut w, k, a).unwrap();
    let err = w.signal(0).unwrap_err().to_string();
    assert!(err.contains("needs declared devices"), "{err}");
    let err = w.set_device(1).unwrap_err().to_string();
    assert!(err.contains("on device 1, but the archive has 1 device"), "{err}");
    let bytes = w.finish().unwrap().into_inner();
    let archive = Archive::open(&bytes).unwrap();
    assert_eq!(archive.version(), (1, 0));
    assert_eq!((archive.device_count(), archive.devices().len(), archive.op_device(0)), (1, 0, 0));
}

#[test]
fn the_writer_refuses_work_that_reaches_another_devices_memory() {
    let (mut w, k, a, b) = two_devices();
    let err = launch(&mut w, k, b).unwrap_err().to_string();
    assert!(err.contains("a parameter's region 1 is on device 1, not on device 0"), "{err}");
    let err = w.memset(MemsetOp { region: b, offset: 0, len: 4, width: 4, pattern: 0 }).unwrap_err().to_string();
    assert!(err.contains("memset: its region 1 is on device 1"), "{err}");
    let err = w.begin_while(Condition { region: b, offset: 0, max_iterations: 1 }).unwrap_err().to_string();
    assert!(err.contains("its condition's region 1 is on device 1"), "{err}");
    let err = w.add_region_reloc(a, Reloc { offset: 0, target: b, target_offset: 0 }).unwrap_err().to_string();
    assert!(err.contains("pointer in region 0: its target region 1 is on device 1"), "{err}");
    let err = w.add_region(RegionDecl::new("c", 4, DType::U8).on(2)).unwrap_err().to_string();
    assert!(err.contains("on device 2, but the archive has 2 devices"), "{err}");
    // A body runs on one device.
    w.begin_while(Condition { region: a, offset: 0, max_iterations: 1 }).unwrap();
    let err = w.set_device(1).unwrap_err().to_string();
    assert!(err.contains("body runs on device 0; its ops cannot move to device 1"), "{err}");
    w.end_body().unwrap();
    // A copy may cross devices, issued by either.
    w.set_device(1).unwrap();
    w.copy(CopyOp { src: b, src_offset: 0, dst: a, dst_offset: 0, len: 8 }).unwrap();
    Archive::open(&w.finish().unwrap().into_inner()).unwrap();
}

/// The bytes of a valid two-device archive, with the field at `at` of record `index` of `kind`
/// set to `value` and the checksums made right again, so that the rules see it.
fn patched(kind: SectionKind, index: usize, at: usize, value: u32) -> Vec<u8> {
    let (mut w, k, a, b) = two_devices();
    launch(&mut w, k, a).unwrap();
    w.set_device(1).unwrap();
    w.copy(CopyOp { src: a, src_offset: 0, dst: b, dst_offset: 0, len: 64 }).unwrap();
    let mut bytes = w.finish().unwrap().into_inner();
    let (off, _) = section(&bytes, kind);
    let record = kind.record_len().unwrap();
    let field = off + layout::TABLE_HEADER_LEN + index * record + at;
    bytes[field..field + 4].copy_from_slice(&value.to_le_bytes());
    reseal(&mut bytes);
    bytes
}

#[test]
fn the_reader_refuses_misplaced_records_naming_the_section_and_the_byte() {
    let cases = [
        (
            patched(SectionKind::Regions, 1, layout::REGION_DEVICE, 5),
            "regions",
            "region 1: the region is on device 5, but the archive has 2 devices",
        ),
        (patched(SectionKind::Ops, 1, layout::OP_DEVICE, 9), "ops", "op 1: the op is on device 9"),
        (
            patched(SectionKind::Ops, 0, layout::OP_DEVICE, 1),
            "relocs",
            "its target region 0 is on device 0, not on device 1",
        ),
        (patched(SectionKind::Devices, 0, 0, 999), "devices", "string"),
    ];
    for (bytes, section_name, reason) in cases {
        let e = Archive::open(&bytes).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with(section_name) && text.contains(reason), "{text}");
    }
    // A signal in a file without a devices section is an op kind that needs one.
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    w.add_region(RegionDecl::new("a", 4, DType::U8)).unwrap();
    w.marker("m").unwrap();
    let mut bytes = w.finish().unwrap().into_inner();
    let (off, _) = section(&bytes, SectionKind::Ops);
    let op = off + layout::TABLE_HEADER_LEN;
    bytes[op..op + 4].copy_from_slice(&layout::op::SIGNAL.to_le_bytes());
    reseal(&mut bytes);
    let text = Archive::open(&bytes).unwrap_err().to_string();
    assert!(text.contains("op 0 has kind 9 (signal), which needs a devices section"), "{text}");
}

#[test]
fn signals_and_waits_order_each_device_like_a_stream() {
    let (mut w, k, a, b) = two_devices();
    let scratch = w.add_region(RegionDecl::new("c", 64, DType::U32).on(1)).unwrap();
    let first = launch(&mut w, k, a).unwrap(); // 0, device 0
    let signal = w.signal(1).unwrap(); // 1, device 0
    let after = launch(&mut w, k, a).unwrap(); // 2, device 0: not ordered after the signal's waiters
    w.set_device(1).unwrap();
    let unrelated = launch(&mut w, k, scratch).unwrap(); // 3, device 1, before the wait
    let wait = w.wait(1).unwrap(); // 4
    let later = launch(&mut w, k, b).unwrap(); // 5, device 1, after the wait
    let bytes = w.finish().unwrap().into_inner();
    let plan = Plan::build(&Archive::open(&bytes).unwrap());
    assert_eq!(plan.device, vec![0, 0, 0, 1, 1, 1]);
    let sync: Vec<(OpId, OpId)> =
        plan.top().edges.iter().filter(|e| e.hazards == vec![Hazard::Sync]).map(|e| (e.from, e.to)).collect();
    assert!(sync.contains(&(first, signal)), "{sync:?}");
    assert!(sync.contains(&(signal, wait)), "{sync:?}");
    assert!(sync.contains(&(wait, later)), "{sync:?}");
    // Ops stay ordered by their data otherwise: work issued before the wait is not held by it.
    assert_eq!(sync.len(), 3, "{sync:?}");
    assert!(!plan.top().preds(later).any(|p| p == after), "device 0's later launch orders nothing on device 1");
    assert!(!plan.top().preds(unrelated).any(|p| p == signal));
}

/// Final field of every band, read back after one CPU replay.
fn cpu_bands(bytes: &[u8], devices: u32) -> Vec<Vec<u8>> {
    let archive = Archive::open(bytes).unwrap();
    let mut cpu = CpuReplay::new(&archive, Default::default()).unwrap();
    cpu.run_iteration(&mut NoObserver).unwrap();
    let names: Vec<String> =
        if devices == 1 { vec!["u".into()] } else { (0..devices).map(|b| format!("u{b}")).collect() };
    names.iter().map(|n| cpu.read_region(archive.region_named(n).unwrap()).unwrap()).collect()
}

#[test]
fn a_halo_exchange_split_over_devices_gives_the_bits_of_one_device_on_the_cpu() {
    let (nx, ny, steps) = (40, 30, 6);
    let whole = &cpu_bands(&halo_archive(nx, ny, steps, 1, false), 1)[0];
    let row = nx as usize * 4;
    for devices in [2, 3] {
        let bytes = halo_archive(nx, ny, steps, devices, true);
        let archive = Archive::open(&bytes).unwrap();
        assert_eq!(archive.device_count(), devices);
        let copies_between = (0..archive.op_count() as OpId)
            .filter(|&i| matches!(archive.op(i), Op::Copy(c) if archive.region(c.src).device != archive.region(c.dst).device))
            .count();
        assert_eq!(copies_between, 2 * steps * 2 * (devices as usize - 1), "two halo rows per inner edge per sweep");
        for (b, band) in cpu_bands(&bytes, devices).iter().enumerate() {
            // Band b holds rows r0-1 .. r1+1 of the whole field (halos included).
            let (r0, r1) = (ny * b as u32 / devices, ny * (b as u32 + 1) / devices);
            let (s0, s1) = (r0 - (b > 0) as u32, r1 + (b as u32 + 1 < devices) as u32);
            assert_eq!(band, &whole[s0 as usize * row..s1 as usize * row], "band {b} of {devices}");
        }
        // The archive's own check passes through the CLI, with every device in one memory.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("halo{devices}.recap"));
        std::fs::write(&path, &bytes).unwrap();
        let out =
            Command::new(recap_bin()).args(["replay", "--devices", "cpu", "--check"]).arg(&path).output().unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("{devices} of {devices} regions pass")), "{text}");
    }
}

#[test]
fn the_cli_shows_devices_and_refuses_placements_that_do_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("halo.recap");
    std::fs::write(&path, halo_archive(24, 12, 1, 2, false)).unwrap();
    let out = Command::new(recap_bin()).args(["inspect"]).arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("format 1.1") && text.contains("devices (2)") && text.contains("[0] gpu0"), "{text}");
    assert!(text.contains("[device 1] wait for event 0") && text.contains("on device 1"), "{text}");

    let run = |devices: &str| {
        let out = Command::new(recap_bin()).args(["replay", "--devices", devices]).arg(&path).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = run("cuda:0");
    assert!(!ok && err.contains("--devices places 1 device but") && err.contains("has 2"), "{err}");
    let (ok, err) = run("0=cuda:0,2=cuda:1");
    assert!(!ok && err.contains("places no GPU for device 1"), "{err}");
    let (ok, err) = run("cuda:0,1=cuda:1");
    assert!(!ok && err.contains("either a list"), "{err}");
    let (ok, err) = run("cpu,cuda:1");
    assert!(!ok && err.contains("\"cpu\" in --devices is not a GPU"), "{err}");
    let (ok, err) = run("cpu");
    assert!(ok, "{err}");
}

#[test]
fn the_fuzz_seeds_hold_multi_device_archives() {
    let root = recap_tests::repo_root();
    for seed in ["fuzz/seeds/archive_replay/halo_two_devices.recap", "fuzz/seeds/archive_open/two_devices.recap"] {
        let bytes = std::fs::read(root.join(seed)).unwrap();
        let archive = Archive::open(&bytes).unwrap();
        archive.validate().unwrap();
        assert_eq!(archive.device_count(), 2, "{seed}");
        assert!(archive.ops().any(|op| matches!(op, Op::Wait(_))), "{seed} has a wait");
    }
}
