//! NVIDIA Warp captures: the `.wrp` fixtures in `tests/wrp/` (made by Warp 1.19 itself, see
//! `tests/wrp/generate.py`, and by every older release with APIC capture, in
//! `tests/wrp/warp-<release>/`, see `tests/wrp/generate_versions.py`) read the same as an
//! independent reader reads them, import into archives that pass their check against Warp's own
//! replay on every CPU engine (and on CUDA where a GPU is), and what cannot be imported says what
//! and where in one line.

use std::path::{Path, PathBuf};

use recap_tests::repo_root;
use serde_json::Value;
use shared::wrp::{self, CaptureDevice, OpKind, PointerTarget, WrpOp};

use crate::debugging::{ok, one_line_error, recap, text};

const CPU_FIXTURES: [&str; 5] = ["saxpy_1k", "multi_ops", "particles", "control_flow", "backward"];
/// Captures of Warp's library routines (sorts, scans, reductions, run-length encoding), which
/// become recap library ops.
const LIBRARY_FIXTURES: [&str; 2] = ["library_ops", "library_more"];
const CUDA_FIXTURES: [&str; 4] =
    ["saxpy_1k_cuda_sm90", "multi_ops_cuda_sm90", "particles_cuda_sm90", "control_flow_cuda_sm90"];

fn fixtures() -> PathBuf {
    repo_root().join("tests/wrp")
}

/// Every Warp release before 1.19 that saves captures, each with its fixtures in
/// `tests/wrp/warp-<release>/` (written by `tests/wrp/generate_versions.py` with that release).
const OLDER_RELEASES: [&str; 6] = ["1.13.0", "1.14.0", "1.15.0", "1.16.0", "1.17.0", "1.18.0"];

/// `--expected NAME=FILE` for every `.out.npy` of a fixture (Warp's replay of the saved file).
fn expected_args(fixture: &str) -> Vec<String> {
    expected_args_in(&fixtures(), fixture)
}

fn expected_args_in(folder: &Path, fixture: &str) -> Vec<String> {
    let base = fixture.trim_end_matches("_cuda_sm90");
    let mut args = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(folder).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(binding) = name.strip_prefix(&format!("{base}.")).and_then(|n| n.strip_suffix(".out.npy")) {
            args.push("--expected".to_string());
            args.push(format!("{binding}={}", f.display()));
        }
    }
    assert!(!args.is_empty(), "{fixture} has outputs");
    args
}

fn import(fixture: &str, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{fixture}.recap"));
    let mut args = vec!["import-wrp".to_string(), fixtures().join(format!("{fixture}.wrp")).display().to_string()];
    args.extend(["-o".to_string(), out.display().to_string()]);
    if !fixture.ends_with("_cuda_sm90") {
        args.extend(["--ptx-from".to_string(), fixtures().join("ptx").display().to_string()]);
    }
    args.extend(expected_args(fixture));
    let said = ok(&args);
    assert!(said.contains("NVIDIA Warp 1.19.0") && said.contains("module "), "{said}");
    out
}

#[test]
fn every_fixture_imports_and_passes_its_check_on_every_engine() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = recap::cuda::Device::open(0)
        .map_err(|e| eprintln!("skipping the CUDA replays of Warp captures: no CUDA device ({e})"))
        .is_ok();
    for fixture in CPU_FIXTURES.iter().chain(&CUDA_FIXTURES) {
        let archive = import(fixture, dir.path());
        let a = archive.display().to_string();
        for engine in ["interp", "jit", "jit-scalar"] {
            let said = ok(&["replay", &a, "--device", "cpu", "--engine", engine, "--check"]);
            assert!(said.contains("regions pass"), "{fixture} on {engine}: {said}");
        }
        if gpu {
            for mode in ["graph", "stream"] {
                let said = ok(&["replay", &a, "--device", "cuda", "--mode", mode, "--check"]);
                assert!(said.contains("regions pass"), "{fixture} on CUDA ({mode}): {said}");
            }
        }
    }
    // Where the PTX came from is recorded.
    let archive = dir.path().join("saxpy_1k.recap").display().to_string();
    let meta = ok(&["inspect", &archive]);
    assert!(meta.contains("wp_wrp_saxpy_4ac8a34.sm90.ptx (--ptx-from)") && meta.contains("Warp 1.19.0"), "{meta}");
    // A fixture whose else branch runs: the import's flag region steers it, as Warp's replay does.
    let control = dir.path().join("control_flow.recap").display().to_string();
    let said = ok(&["inspect", &control]);
    assert!(said.contains("wrp_else"), "{said}");
}

#[test]
fn library_routines_import_as_library_ops_and_pass_their_check_on_every_engine() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = recap::cuda::Device::open(0).is_ok();
    for fixture in LIBRARY_FIXTURES {
        // Float results too are Warp's to the last bit (its CPU order): judged with no tolerance.
        let archive = dir.path().join(format!("{fixture}.recap"));
        let a = archive.display().to_string();
        let wrp = fixtures().join(format!("{fixture}.wrp")).display().to_string();
        let ptx = fixtures().join("ptx").display().to_string();
        let mut args: Vec<String> =
            ["import-wrp", &wrp, "-o", &a, "--ptx-from", &ptx, "--rtol", "0", "--atol", "0"].map(String::from).into();
        args.extend(expected_args(fixture));
        ok(&args);
        for engine in ["interp", "jit", "jit-scalar"] {
            let said = ok(&["replay", &a, "--device", "cpu", "--engine", engine, "--check"]);
            assert!(said.contains("regions pass"), "{fixture} on {engine}: {said}");
        }
        // The CUDA replay runs them as recap's library kernels, on the CPU driver here and on a
        // GPU where there is one, in both modes, to the same bytes.
        for mode in ["graph", "stream"] {
            let said = replay_on_cpu_driver(&archive, mode);
            assert!(
                said.contains("regions pass") && said.contains("(exact)"),
                "{fixture} on the CPU driver ({mode}): {said}"
            );
            if gpu {
                let said = ok(&["replay", &a, "--device", "cuda", "--mode", mode, "--check"]);
                assert!(
                    said.contains("regions pass") && said.contains("(exact)"),
                    "{fixture} on CUDA ({mode}): {said}"
                );
            }
        }
    }
    // What each op is, as `inspect` lists it: the routine over its regions.
    let listed = ok(&["inspect", &dir.path().join("library_more.recap").display().to_string()]);
    for routine in
        ["radix_sort_pairs", "segmented_sort_pairs", "inclusive_scan", "array_inner", "array_sum", "runlength_encode"]
    {
        assert!(listed.contains(routine), "{routine}: {listed}");
    }
    let listed = ok(&["inspect", &dir.path().join("library_ops.recap").display().to_string()]);
    assert!(listed.contains("exclusive_scan scan_in, scan_out"), "{listed}");
}

/// `recap replay ARCHIVE --device cuda --mode MODE --check` with the CPU driver as the machine's
/// CUDA driver (`recap run --cpu`): the CUDA replay's own code, graph or stream, over PTX the CPU
/// runs. Its output.
fn replay_on_cpu_driver(archive: &Path, mode: &str) -> String {
    for (package, lib) in [("recap-cpudriver", "recap_cpudriver"), ("recap-audit", "recap_audit")] {
        recap_tests::cdylib(package, lib);
    }
    let bin = recap_tests::recap_bin();
    let out = std::process::Command::new(&bin)
        .args(["run", "--cpu", "--"])
        .arg(&bin)
        .args(["replay", &archive.display().to_string(), "--device", "cuda", "--mode", mode, "--check"])
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("RECAP_CPU_DRIVER_LIB")
        .output()
        .expect("running recap run --cpu");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{}: {said}", archive.display());
    said
}

#[test]
fn library_records_read_field_by_field_as_the_independent_reader_reads_them() {
    let field = |g: &Value, k: &str| g[k].as_i64().unwrap_or_else(|| panic!("{k} in {g}"));
    for fixture in LIBRARY_FIXTURES {
        let bytes = std::fs::read(fixtures().join(format!("{fixture}.wrp"))).unwrap();
        let c = wrp::parse(&bytes).unwrap();
        let golden: Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures().join(format!("{fixture}.expected.json"))).unwrap(),
        )
        .unwrap();
        let mut seen = 0;
        for (op, g) in c.ops.iter().zip(golden["operations"].as_array().unwrap()) {
            let (got, want): (Vec<i64>, Vec<i64>) = match op.kind {
                OpKind::Scan { src, dst, count, src_stride, dst_stride, width, dtype, inclusive } => (
                    vec![
                        src.region as i64,
                        src.offset as i64,
                        dst.region as i64,
                        dst.offset as i64,
                        count as i64,
                        src_stride as i64,
                        dst_stride as i64,
                        width as i64,
                        dtype as i64,
                        inclusive as i64,
                    ],
                    [
                        "src_region_id",
                        "src_offset",
                        "dst_region_id",
                        "dst_offset",
                        "length",
                        "in_stride",
                        "out_stride",
                        "type_len",
                        "dtype",
                        "inclusive",
                    ]
                    .iter()
                    .map(|k| field(g, k))
                    .collect(),
                ),
                OpKind::RadixSort { keys, values, count, begin_bit, end_bit, value_size, dtype } => (
                    vec![
                        keys.region as i64,
                        keys.offset as i64,
                        values.region as i64,
                        values.offset as i64,
                        count as i64,
                        begin_bit as i64,
                        end_bit as i64,
                        value_size as i64,
                        dtype as i64,
                    ],
                    [
                        "keys_region_id",
                        "keys_offset",
                        "values_region_id",
                        "values_offset",
                        "count",
                        "begin_bit",
                        "end_bit",
                        "value_size",
                        "dtype",
                    ]
                    .iter()
                    .map(|k| field(g, k))
                    .collect(),
                ),
                OpKind::SegmentedSort { keys, values, starts, ends, count, segments, dtype } => (
                    vec![
                        keys.region as i64,
                        values.region as i64,
                        starts.region as i64,
                        ends.region as i64,
                        ends.offset as i64,
                        count as i64,
                        segments as i64,
                        dtype as i64,
                    ],
                    [
                        "keys_region_id",
                        "values_region_id",
                        "segstart_region_id",
                        "segend_region_id",
                        "segend_offset",
                        "count",
                        "num_segments",
                        "dtype",
                    ]
                    .iter()
                    .map(|k| field(g, k))
                    .collect(),
                ),
                OpKind::RunLengthEncode { values, run_values, run_lengths, run_count, count } => (
                    vec![
                        values.region as i64,
                        run_values.region as i64,
                        run_lengths.region as i64,
                        run_count.region as i64,
                        count as i64,
                    ],
                    [
                        "values_region_id",
                        "run_values_region_id",
                        "run_lengths_region_id",
                        "run_count_region_id",
                        "value_count",
                    ]
                    .iter()
                    .map(|k| field(g, k))
                    .collect(),
                ),
                OpKind::Reduction { a, b, out, count, a_stride, b_stride, width, kind, dtype } => (
                    vec![
                        a.region as i64,
                        b.region as i64,
                        out.region as i64,
                        count as i64,
                        a_stride as i64,
                        b_stride as i64,
                        width as i64,
                        kind as i64,
                        dtype as i64,
                    ],
                    [
                        "input_a_region_id",
                        "input_b_region_id",
                        "output_region_id",
                        "count",
                        "input_a_stride",
                        "input_b_stride",
                        "type_len",
                        "kind",
                        "dtype",
                    ]
                    .iter()
                    .map(|k| field(g, k))
                    .collect(),
                ),
                _ => continue,
            };
            assert_eq!(got, want, "{fixture}: {g}");
            seen += 1;
        }
        assert!(seen >= 3, "{fixture}: {seen} library records");
    }
}

/// The fixtures a release wrote (its manifest's), and what it could not write, with why.
fn release_fixtures(release: &str) -> (PathBuf, Vec<String>, Value) {
    let folder = fixtures().join(format!("warp-{release}"));
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["warp_version"], release);
    let names: Vec<String> = manifest["fixtures"].as_object().unwrap().keys().cloned().collect();
    (folder, names, manifest["not_written"].clone())
}

#[test]
fn every_releases_fixtures_import_and_pass_their_check_on_every_engine() {
    let dir = tempfile::tempdir().unwrap();
    for release in OLDER_RELEASES {
        let (folder, names, _) = release_fixtures(release);
        // Every release writes at least the one-launch and the particle captures.
        assert!(names.iter().any(|n| n == "saxpy_1k") && names.iter().any(|n| n == "particles"), "{release}");
        for fixture in &names {
            let out = dir.path().join(format!("{release}-{fixture}.recap"));
            let wrp = folder.join(format!("{fixture}.wrp"));
            let mut args = vec!["import-wrp".to_string(), wrp.display().to_string()];
            args.extend(["-o".to_string(), out.display().to_string()]);
            args.extend(["--ptx-from".to_string(), folder.join("ptx").display().to_string()]);
            args.extend(expected_args_in(&folder, fixture));
            let said = ok(&args);
            assert!(said.contains("NVIDIA Warp ") && said.contains(release), "{release} {fixture}: {said}");
            let a = out.display().to_string();
            for engine in ["interp", "jit", "jit-scalar"] {
                let said = ok(&["replay", &a, "--device", "cpu", "--engine", engine, "--check"]);
                assert!(said.contains("regions pass"), "{release} {fixture} on {engine}: {said}");
            }
        }
    }
}

/// A launch's arguments with the bytes its pointers cover zeroed (what the file has there is
/// stale), and where those pointers lead.
fn arguments(l: &wrp::Launch) -> Vec<(Vec<u8>, Vec<String>)> {
    l.params
        .iter()
        .map(|p| {
            let mut bytes = p.value.to_vec();
            for q in &p.pointers {
                bytes[q.at as usize..q.at as usize + 8].fill(0);
            }
            (bytes, p.pointers.iter().map(|q| format!("{} {:?}", q.at, q.target)).collect())
        })
        .collect()
}

#[test]
fn every_format_reads_into_the_same_model() {
    // The same saxpy, saved by every release, reads as the same launch: format 3's argument
    // records become the bytes and pointers the later formats store.
    let bytes = std::fs::read(fixtures().join("saxpy_1k.wrp")).unwrap();
    let latest = wrp::parse(&bytes).unwrap();
    let OpKind::Launch(want) = &latest.ops[0].kind else { panic!("{:?}", latest.ops[0]) };
    let mut versions = Vec::new();
    for release in OLDER_RELEASES {
        let bytes = std::fs::read(fixtures().join(format!("warp-{release}/saxpy_1k.wrp"))).unwrap();
        let c = wrp::parse(&bytes).unwrap_or_else(|e| panic!("{release}: {e}"));
        versions.push(u32::from_le_bytes(bytes[4..8].try_into().unwrap()));
        assert!(c.producer.contains(release), "{release}: {}", c.producer);
        assert_eq!((c.device, c.ops.len(), c.regions.len()), (CaptureDevice::Cpu, 1, 2), "{release}");
        let OpKind::Launch(l) = &c.ops[0].kind else { panic!("{release}: {:?}", c.ops[0]) };
        assert_eq!((l.kernel_key.as_str(), l.dim, l.ndim, l.shape), ("saxpy", 1024, 1, [1024, 0, 0, 0]), "{release}");
        assert_eq!(arguments(l), arguments(want), "{release}");
    }
    // Each release writes the format recap has it under, and no two releases share one but 1.16 and 1.17.
    let known: Vec<u32> = wrp::FORMATS.iter().map(|f| f.version).collect();
    assert_eq!(versions, [3, 10, 14, 15, 15, 16]);
    assert!(versions.iter().all(|v| known.contains(v)));
}

#[test]
fn a_format_no_release_writes_is_refused_in_one_line_naming_those_read() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.recap").display().to_string();
    let mut bytes = std::fs::read(fixtures().join("warp-1.18.0/particles.wrp")).unwrap();
    for version in [17u32, 2, 19, 0x0100_0010] {
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        let path = dir.path().join(format!("v{version}.wrp"));
        std::fs::write(&path, &bytes).unwrap();
        let err = one_line_error(&["import-wrp", &path.display().to_string(), "-o", &out]);
        assert!(
            err.contains(&format!("APIC format version {version},"))
                && err.contains("3 (Warp 1.13)")
                && err.contains("15 (Warp 1.16 or 1.17)")
                && err.contains("18 (Warp 1.19)")
                && err.contains(&format!("v{version}.wrp")),
            "{err}"
        );
    }
    // A known version on a file of another: the metadata disagrees, and says so.
    bytes[4..8].copy_from_slice(&18u32.to_le_bytes());
    let path = dir.path().join("v18.wrp");
    std::fs::write(&path, &bytes).unwrap();
    let err = one_line_error(&["import-wrp", &path.display().to_string(), "-o", &out]);
    assert!(err.contains("the metadata says version 16, the header 18"), "{err}");
    assert!(!Path::new(&out).exists(), "nothing written");
}

/// The op tree as (name, kernel key or "") pairs, depth first.
fn names(ops: &[WrpOp], out: &mut Vec<(String, String)>) {
    for op in ops {
        let (name, key) = match &op.kind {
            OpKind::Launch(l) => ("KERNEL_LAUNCH", l.kernel_key.clone()),
            OpKind::Copy { .. } => ("MEMCPY_D2D", String::new()),
            OpKind::Upload { .. } => ("MEMCPY_H2D", String::new()),
            OpKind::Memset { .. } => ("MEMSET", String::new()),
            OpKind::Fill { .. } => ("MEMTILE", String::new()),
            OpKind::Alloc { .. } => ("ALLOC", String::new()),
            OpKind::If { .. } => ("IF", String::new()),
            OpKind::While { .. } => ("WHILE", String::new()),
            OpKind::Scan { .. } => ("SCAN", String::new()),
            OpKind::RadixSort { .. } => ("RADIX_SORT", String::new()),
            OpKind::SegmentedSort { .. } => ("SEGMENTED_SORT", String::new()),
            OpKind::RunLengthEncode { .. } => ("RUNLENGTH_ENCODE", String::new()),
            OpKind::Reduction { .. } => ("REDUCTION", String::new()),
            OpKind::Library { opcode } => (wrp::opcode_name(*opcode), String::new()),
        };
        out.push((name.to_string(), key));
        match &op.kind {
            OpKind::If { then, otherwise, .. } => {
                names(then, out);
                names(otherwise, out);
            }
            OpKind::While { body, .. } => names(body, out),
            _ => {}
        }
    }
}

fn json_names(ops: &[Value], out: &mut Vec<(String, String)>) {
    for op in ops {
        out.push((op["op"].as_str().unwrap().to_string(), op["kernel_key"].as_str().unwrap_or("").to_string()));
        for branch in ["branch_a", "branch_b"] {
            if let Some(b) = op[branch].as_array() {
                json_names(b, out);
            }
        }
    }
}

#[test]
fn the_reader_reads_what_an_independent_reader_reads() {
    for fixture in CPU_FIXTURES.iter().chain(&CUDA_FIXTURES).chain(&LIBRARY_FIXTURES) {
        let bytes = std::fs::read(fixtures().join(format!("{fixture}.wrp"))).unwrap();
        let c = wrp::parse(&bytes).unwrap_or_else(|e| panic!("{fixture}: {e}"));
        let golden: Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures().join(format!("{fixture}.expected.json"))).unwrap(),
        )
        .unwrap();
        let meta = &golden["metadata"];
        let arch = golden["header"]["target_arch"].as_u64().unwrap() as u32;
        assert_eq!(c.device, if arch == 0 { CaptureDevice::Cpu } else { CaptureDevice::Cuda { arch } }, "{fixture}");
        assert_eq!(c.producer, meta["producer_version"].as_str().unwrap());
        let modules: Vec<(&str, &str)> =
            c.modules.iter().map(|m| (m.hash.as_str(), m.binary_filename.as_str())).collect();
        let want: Vec<(&str, &str)> = meta["modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["module_hash"].as_str().unwrap(), m["binary_filename"].as_str().unwrap()))
            .collect();
        assert_eq!(modules, want, "{fixture}");
        let kernels: Vec<&str> = c.kernels.iter().map(|k| k.forward_name.as_str()).collect();
        let want: Vec<&str> =
            meta["kernels"].as_array().unwrap().iter().map(|k| k["forward_name"].as_str().unwrap()).collect();
        assert_eq!(kernels, want, "{fixture}");
        let bindings: Vec<(String, u32)> = meta["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["name"].as_str().unwrap().to_string(), b["region_id"].as_u64().unwrap() as u32))
            .collect();
        assert_eq!(c.bindings, bindings, "{fixture}");
        let regions: Vec<(u32, u64, bool)> = c.regions.iter().map(|r| (r.id, r.size, r.initial.is_some())).collect();
        let want: Vec<(u32, u64, bool)> = golden["memory"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["region_id"].as_u64().unwrap() as u32, r["size"].as_u64().unwrap(), r["has_initial_data"] == 1))
            .collect();
        assert_eq!(regions, want, "{fixture}");
        let (mut got, mut want) = (Vec::new(), Vec::new());
        names(&c.ops, &mut got);
        json_names(golden["operations"].as_array().unwrap(), &mut want);
        assert_eq!(got, want, "{fixture}");
        // Every launch's pointers, as the other reader decoded them.
        let mut launches = Vec::new();
        fn collect<'a>(ops: &'a [WrpOp<'a>], out: &mut Vec<&'a wrp::Launch<'a>>) {
            for op in ops {
                match &op.kind {
                    OpKind::Launch(l) => out.push(l),
                    OpKind::If { then, otherwise, .. } => {
                        collect(then, out);
                        collect(otherwise, out);
                    }
                    OpKind::While { body, .. } => collect(body, out),
                    _ => {}
                }
            }
        }
        collect(&c.ops, &mut launches);
        let mut golden_launches = Vec::new();
        fn collect_json<'a>(ops: &'a [Value], out: &mut Vec<&'a Value>) {
            for op in ops {
                if op["op"] == "KERNEL_LAUNCH" {
                    out.push(op);
                }
                for branch in ["branch_a", "branch_b"] {
                    if let Some(b) = op[branch].as_array() {
                        collect_json(b, out);
                    }
                }
            }
        }
        collect_json(golden["operations"].as_array().unwrap(), &mut golden_launches);
        assert_eq!(launches.len(), golden_launches.len());
        for (l, g) in launches.iter().zip(golden_launches) {
            let pointers: Vec<String> = l
                .params
                .iter()
                .chain(&l.adjoints)
                .flat_map(|p| &p.pointers)
                .map(|p| match p.target {
                    PointerTarget::Data { region, offset } => format!("DATA_PTR {region} {offset}"),
                    PointerTarget::Null => "NULL -1 0".to_string(),
                    PointerTarget::Handle => "HANDLE".to_string(),
                })
                .collect();
            let want: Vec<String> = g["relocs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| format!("{} {} {}", r["kind"].as_str().unwrap(), r["region_id"], r["region_offset"]))
                .collect();
            assert_eq!(pointers, want, "{fixture}: launch of {}", l.kernel_key);
            assert_eq!(
                (l.size, l.dim, l.forward),
                (g["size"].as_u64().unwrap(), g["dim"].as_u64().unwrap(), g["is_forward"] == 1)
            );
        }
    }
}

#[test]
fn what_cannot_be_imported_says_what_and_where_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("out.recap").display().to_string();
    let fx = |f: &str| fixtures().join(f).display().to_string();
    let ptx = fx("ptx");

    // A library routine recap has no op for (here a hash grid update in place of library_ops'
    // reduction, a record of the same size): named, with the op's place, and nothing written.
    let mut grid = std::fs::read(fixtures().join("library_ops.wrp")).unwrap();
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("library_ops.expected.json")).unwrap()).unwrap();
    let ops_at = golden["header"]["sections"][2]["offset"].as_u64().unwrap() + 4;
    let reduction = &golden["operations"][3];
    assert_eq!(reduction["op"], "REDUCTION");
    let at = (ops_at + reduction["stream_offset"].as_u64().unwrap()) as usize;
    grid[at..at + 4].copy_from_slice(&19u32.to_le_bytes());
    let grid_wrp = d.join("grid.wrp");
    std::fs::write(&grid_wrp, &grid).unwrap();
    std::fs::create_dir(d.join("grid_modules")).unwrap();
    let err = one_line_error(&["import-wrp", &grid_wrp.display().to_string(), "-o", &out, "--ptx-from", &ptx]);
    assert!(err.contains("op 3") && err.contains("HASH_GRID_UPDATE") && err.contains("library"), "{err}");
    assert!(!Path::new(&out).exists(), "nothing written");
    // A CPU capture packages host object files: the message says how to get PTX.
    let err = one_line_error(&["import-wrp", &fx("saxpy_1k.wrp"), "-o", &out]);
    assert!(err.contains("wrp_saxpy") && err.contains("--ptx-from") && err.contains("compile_aot_module"), "{err}");
    // PTX that does not define the capture's entries.
    let empty = d.join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::copy(fixtures().join("ptx/wp_wrp_multi_a_23fe12c.sm90.ptx"), empty.join("wp_wrp_saxpy_0000000.sm90.ptx"))
        .unwrap();
    let err =
        one_line_error(&["import-wrp", &fx("saxpy_1k.wrp"), "-o", &out, "--ptx-from", &empty.display().to_string()]);
    assert!(err.contains("saxpy_fbc27457_cuda_kernel_forward"), "{err}");
    // Expected states that do not fit.
    let err = one_line_error(&[
        "import-wrp",
        &fx("saxpy_1k.wrp"),
        "-o",
        &out,
        "--ptx-from",
        &ptx,
        "--expected",
        &format!("z={}", fx("saxpy_1k.y.out.npy")),
    ]);
    assert!(err.contains("no binding named \"z\"") && err.contains("x, y"), "{err}");
    let err = one_line_error(&[
        "import-wrp",
        &fx("saxpy_1k.wrp"),
        "-o",
        &out,
        "--ptx-from",
        &ptx,
        "--expected",
        &format!("y={}", fx("multi_ops.m.out.npy")),
    ]);
    assert!(err.contains("512 bytes") && err.contains("4096"), "{err}");

    // Malformed files: one line naming the problem and the byte, never a panic.
    let good = std::fs::read(fixtures().join("particles.wrp")).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let mut magic = good.clone();
    magic[..4].copy_from_slice(b"PK\x03\x04");
    let mut version = good.clone();
    version[4] = 17;
    let mut offset = good.clone();
    // The first section's offset, past the end of the file.
    offset[64 + 8..64 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    let cases = [
        ("magic.wrp", magic, "not a Warp capture"),
        ("version.wrp", version, "version 17"),
        ("offset.wrp", offset, "runs past the end"),
        ("empty.wrp", Vec::new(), "needs"),
    ];
    for (name, bytes, want) in cases {
        let err = one_line_error(&["import-wrp", &write(name, &bytes), "-o", &out, "--ptx-from", &ptx]);
        assert!(err.contains(want) && err.contains(name), "{name}: {err}");
    }
    for cut in (0..good.len()).step_by(97) {
        let path = write("cut.wrp", &good[..cut]);
        let o = recap(&["import-wrp", &path, "-o", &out, "--ptx-from", &ptx]);
        assert_eq!(o.status.code(), Some(1), "truncated at {cut}: {}", text(&o.stderr));
    }
}

/// Packs a capture the way a user would send it: `NAME.wrp`, `NAME_modules/`, `ptx/` and
/// `expected/BINDING.npy`, in a folder inside a zip or a `.tar.gz` (Python's own zipfile and tarfile).
pub(crate) fn bundle(fixture: &str, dir: &Path, format: &str, with_ptx: bool) -> PathBuf {
    let out = dir.join(format!("{fixture}.{format}"));
    let base = fixture.trim_end_matches("_cuda_sm90");
    let script = r#"
import glob, os, sys, tarfile, zipfile
fx, out, fixture, base, fmt, with_ptx = sys.argv[1:7]
files = [(os.path.join(fx, fixture + ".wrp"), "cap/" + fixture + ".wrp")]
for f in sorted(glob.glob(os.path.join(fx, fixture + "_modules", "*"))):
    files.append((f, "cap/" + fixture + "_modules/" + os.path.basename(f)))
if with_ptx == "1":
    for f in sorted(glob.glob(os.path.join(fx, "ptx", "*"))):
        files.append((f, "cap/ptx/" + os.path.basename(f)))
for f in sorted(glob.glob(os.path.join(fx, base + ".*.out.npy"))):
    files.append((f, "cap/expected/" + os.path.basename(f)[len(base) + 1:-len(".out.npy")] + ".npy"))
if fmt == "zip":
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for src, name in files:
            z.write(src, name)
else:
    with tarfile.open(out, "w:gz") as t:
        for src, name in files:
            t.add(src, name)
"#
    .to_string();
    let status = std::process::Command::new("python3")
        .args(["-c", &script, &fixtures().display().to_string(), &out.display().to_string(), fixture, base, format])
        .arg(if with_ptx { "1" } else { "0" })
        .status()
        .expect("python3");
    assert!(status.success());
    out
}

async fn post(client: &reqwest::Client, url: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    let res = client
        .post(format!("{url}/api/archives"))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_converts_warp_captures_sent_as_zip_or_tar() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = recap_tests::server::Server::start(&d.join("data"), &[]);
    let client = reqwest::Client::new();

    // A CPU capture with its AOT PTX and Warp's outputs, zipped: converted, stored, and it passes.
    let zip = bundle("particles", d, "zip", true);
    let (status, info) = post(&client, &server.url, "application/zip", std::fs::read(&zip).unwrap()).await;
    assert_eq!(status, 201, "{info}");
    assert_eq!(info["name"], "particles.recap");
    let note = info["note"].as_str().unwrap();
    assert!(
        note.contains("particles.wrp") && note.contains("30 launch(es)") && note.contains("4 expected state(s)"),
        "{note}"
    );
    let body = serde_json::json!({"archive": info["id"], "device": "cpu"});
    let created = crate::host::new_session(&client, &server.url, body).await;
    let stream =
        crate::host::collect_stream(&server.ws(&format!("/api/sessions/{}/ws", created["id"].as_str().unwrap()))).await;
    let last = stream.last().unwrap();
    assert_eq!((last["type"].as_str(), last["check"]["passed"].as_bool()), (Some("finished"), Some(true)), "{last}");
    // Stored like any archive: listed, without the note.
    let (_, list) = crate::host::get_json(&client, &format!("{}/api/archives", server.url)).await;
    assert!(list.as_array().unwrap().iter().any(|a| a["id"] == info["id"] && a.get("note").is_none()));

    // A CUDA-flavoured capture packaging its PTX, as .tar.gz.
    let tgz = bundle("control_flow_cuda_sm90", d, "tar.gz", false);
    let (status, info) = post(&client, &server.url, "application/gzip", std::fs::read(&tgz).unwrap()).await;
    assert_eq!(status, 201, "{info}");
    assert!(info["note"].as_str().unwrap().contains("packaged with the capture"), "{info}");

    // A capture of Warp's library routines: they import as library ops.
    let library = bundle("library_ops", d, "zip", true);
    let (status, info) = post(&client, &server.url, "application/zip", std::fs::read(&library).unwrap()).await;
    assert_eq!(status, 201, "Warp's library routines import as library ops: {info}");

    // Refusals: one JSON error naming the problem, and nothing stored.
    let before =
        crate::host::get_json(&client, &format!("{}/api/archives", server.url)).await.1.as_array().unwrap().len();
    let no_ptx = bundle("saxpy_1k", d, "zip", false);
    let (status, err) = post(&client, &server.url, "application/zip", std::fs::read(&no_ptx).unwrap()).await;
    assert!(status == 422 && err["error"]["message"].as_str().unwrap().contains("--ptx-from"), "{status} {err}");
    let evil = d.join("evil.zip");
    let script = format!(
        "import zipfile; z = zipfile.ZipFile({:?}, 'w'); z.writestr('../escape.wrp', b'WRP1'); z.close()",
        evil.display().to_string()
    );
    assert!(std::process::Command::new("python3").args(["-c", &script]).status().unwrap().success());
    let (status, err) = post(&client, &server.url, "application/zip", std::fs::read(&evil).unwrap()).await;
    assert!(status == 422 && err["error"]["message"].as_str().unwrap().contains("leaves the bundle"), "{status} {err}");
    let (status, err) = post(&client, &server.url, "application/zip", b"not a zip at all".to_vec()).await;
    assert!(status == 422 && err["error"]["message"].as_str().unwrap().contains("not a zip"), "{status} {err}");
    let (status, err) = post(&client, &server.url, "application/x-tar", std::fs::read(&zip).unwrap()).await;
    assert_eq!(status, 422, "{err}");
    let after =
        crate::host::get_json(&client, &format!("{}/api/archives", server.url)).await.1.as_array().unwrap().len();
    assert_eq!(before, after, "nothing stored by a refused capture");
    assert!(
        !std::fs::read_dir(d.join("data/tmp")).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("work-")),
        "no scratch left"
    );
}

/// A CUDA capture saved with `source_fallback=True` (`saxpy_1k_cuda_source`: a cubin and Warp's
/// generated CUDA source, no PTX) imports by compiling the source with NVRTC against Warp's
/// headers, and passes its check on every engine; without the headers, or without NVRTC, the
/// import names what is missing in one line.
#[test]
fn a_capture_with_only_its_cuda_source_compiles_it_with_nvrtc() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("source.recap");
    let import = |env_path: Option<&Path>, include: Option<&Path>| {
        let mut cmd = std::process::Command::new(recap_tests::recap_bin());
        cmd.arg("import-wrp").arg(fixtures().join("saxpy_1k_cuda_source.wrp")).arg("-o").arg(&out);
        cmd.args(expected_args("saxpy_1k")).args(["--rtol", "0", "--atol", "0"]);
        if let Some(include) = include {
            cmd.arg("--warp-include").arg(include);
        }
        match env_path {
            Some(p) => cmd.env("LD_LIBRARY_PATH", p),
            None => cmd.env_remove("LD_LIBRARY_PATH"),
        };
        let o = cmd.output().unwrap();
        (o.status.success(), text(&o.stdout), text(&o.stderr))
    };
    let (done, _, err) = import(None, None);
    assert!(!done && err.lines().count() == 1, "{err}");
    assert!(err.contains("wp_wrp_saxpy_4ac8a34.cu") && err.contains("--warp-include"), "{err}");
    // Warp 1.19's headers and NVRTC 12.0 from PyPI, where the build tree has them
    // (generate_versions.py and the library kernels' PTX test install them).
    let root = repo_root();
    let headers = root.join("target/wrp-venvs/1.19.0/lib/python3.11/site-packages/warp/native");
    let nvrtc = root.join("target/nvrtc12-venv/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib");
    let system_nvrtc =
        std::process::Command::new("ldconfig").arg("-p").output().is_ok_and(|o| text(&o.stdout).contains("libnvrtc"));
    if headers.join("builtin.h").is_file() && !system_nvrtc {
        let (done, _, err) = import(Some(dir.path()), Some(&headers));
        assert!(!done && err.contains("needs NVRTC") && err.contains("not installed"), "{err}");
    }
    if !headers.join("builtin.h").is_file() || !nvrtc.is_dir() {
        eprintln!("skipped the compile: Warp 1.19's headers or NVRTC 12.0 are not in target/");
        return;
    }
    let (done, said, err) = import(Some(&nvrtc), Some(&headers));
    assert!(done, "{err}");
    assert!(said.contains("compiled from its CUDA source wp_wrp_saxpy_4ac8a34.cu with NVRTC"), "{said}");
    let a = out.display().to_string();
    for engine in ["interp", "jit", "jit-scalar"] {
        let said = ok(&["replay", &a, "--device", "cpu", "--engine", engine, "--check"]);
        assert!(said.contains("regions pass") && said.contains("(exact)"), "{engine}: {said}");
    }
}
