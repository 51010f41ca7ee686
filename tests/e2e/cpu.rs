//! CPU replay through the real `recap` binary: every public corpus case imported and replayed with
//! `--check`, and hostile archives that must end in clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use recap_tests::{corpus_dir, recap_bin};
use shared::archive::*;
use shared::check::{check_region, RegionInput};

fn recap(args: &[&str]) -> Output {
    Command::new(recap_bin()).args(args).output().expect("running recap")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Imports a corpus case into `dir` and returns the archive's path.
fn import(case: &Path, arch: &str, dir: &Path) -> PathBuf {
    let name = format!("{}-{arch}.recap", case.file_name().unwrap().to_string_lossy());
    let out = dir.join(name);
    let o = recap(&["import-case", case.to_str().unwrap(), "--ptx", arch, "-o", out.to_str().unwrap()]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "import-case {} {arch} failed:\n{stdout}{stderr}", case.display());
    out
}

/// The archive's check must be earned by running it: judged before any op runs (initial state
/// against expected state), at least one region has to fail.
fn assert_initial_state_fails_the_check(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let archive = Archive::open(&bytes).unwrap();
    let mut judged = 0;
    let mut failing = 0;
    for r in archive.regions() {
        let (Some(expected), Some(tol)) = (r.expected, r.tolerance) else { continue };
        let initial = match r.initial {
            Some(b) => b.decode().unwrap(),
            None => vec![0; r.size as usize],
        };
        judged += 1;
        let want = expected.decode().unwrap();
        let input = RegionInput {
            region: r.id,
            name: r.name,
            dtype: r.dtype,
            layout: None,
            got: &initial,
            others: &[],
            want: &want,
            tolerance: tol,
            over: Default::default(),
            recorded: &[],
            declared: &[],
        };
        if !check_region(&input).passed {
            failing += 1;
        }
    }
    assert!(judged > 0, "{} has no expected state", path.display());
    assert!(failing > 0, "{}: the initial state already passes the check", path.display());
}

fn corpus_case_list(producer: &str) -> Vec<PathBuf> {
    let dir = corpus_dir().join(producer);
    let index = std::fs::read_to_string(dir.join("index.json"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join("index.json").display()));
    let names: Vec<String> = serde_json::from_str(&index).unwrap();
    names.iter().map(|n| dir.join(n)).collect()
}

/// Imports, checks non-vacuity, replays with `--check` (on the default engine: native code where a
/// kernel allows it); returns a failure description or None.
fn replay_case(case: &Path, arch: &str, dir: &Path) -> Option<String> {
    replay_case_with(case, arch, dir, &[])
}

fn replay_case_with(case: &Path, arch: &str, dir: &Path, extra: &[&str]) -> Option<String> {
    let archive = import(case, arch, dir);
    assert_initial_state_fails_the_check(&archive);
    let mut args = vec!["replay", archive.to_str().unwrap(), "--device", "cpu", "--check"];
    args.extend_from_slice(extra);
    let o = recap(&args);
    let (stdout, stderr) = text(&o);
    let passes = stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    if o.status.success() && passes > 0 && !stdout.contains("FAIL ") {
        None
    } else {
        Some(format!("{} {arch}: exit {:?}\n{stdout}{stderr}", case.display(), o.status.code()))
    }
}

fn replay_all(cases: &[(PathBuf, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let failures: Vec<String> = cases.iter().filter_map(|(c, arch)| replay_case(c, arch, dir.path())).collect();
    assert!(failures.is_empty(), "{} of {} cases fail:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

#[test]
fn every_nvcc_case_passes_its_check_on_the_cpu_for_sm_75_and_sm_90() {
    let cases = corpus_case_list("nvcc");
    assert_eq!(cases.len(), 14, "the public corpus has 14 nvcc cases");
    let all: Vec<(PathBuf, &str)> = cases.iter().flat_map(|c| [(c.clone(), "sm_75"), (c.clone(), "sm_90")]).collect();
    replay_all(&all);
}

#[test]
fn the_interpreter_engine_passes_the_same_checks() {
    let dir = tempfile::tempdir().unwrap();
    let failures: Vec<String> = corpus_case_list("nvcc")
        .iter()
        .filter(|c| c.ends_with("matmul_tiled") || c.ends_with("warp_shuffle_sum") || c.ends_with("histogram_u32"))
        .filter_map(|c| replay_case_with(c, "sm_90", dir.path(), &["--engine", "interp"]))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn triton_and_warp_cases_pass_their_check_on_the_cpu() {
    // Every target a Triton case has PTX for: the tl.dot cases have sm_80 and sm_90.
    let mut targets = Vec::new();
    for c in corpus_case_list("triton") {
        let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(c.join("case.json")).unwrap()).unwrap();
        for arch in spec["ptx"].as_object().unwrap().keys() {
            targets.push((c.clone(), arch.clone()));
        }
    }
    let mut all: Vec<(PathBuf, &str)> = targets.iter().map(|(c, a)| (c.clone(), a.as_str())).collect();
    for c in corpus_case_list("warp") {
        all.push((c.clone(), "sm_75"));
        all.push((c, "sm_90"));
    }
    assert!(all.len() >= 3);
    replay_all(&all);
}

#[test]
fn a_corrupted_expected_state_fails_the_check_with_exit_1() {
    // The same saxpy run judged against an expected state that is off by one ulp in one element.
    let case = corpus_dir().join("nvcc/saxpy");
    let dir = tempfile::tempdir().unwrap();
    let good = import(&case, "sm_90", dir.path());
    let bytes = std::fs::read(&good).unwrap();
    let archive = Archive::open(&bytes).unwrap();
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let mut ids = Vec::new();
    for m in archive.modules() {
        ids.push(w.add_module(m.name, &m.ptx_text().unwrap()).unwrap());
    }
    for k in archive.kernels() {
        w.add_kernel(ids[k.module as usize], k.name, k.params.clone()).unwrap();
    }
    for r in archive.regions() {
        let id =
            w.add_region(RegionDecl { shape: r.shape.clone(), ..RegionDecl::new(r.name, r.size, r.dtype) }).unwrap();
        if let Some(b) = r.initial {
            w.set_initial_bytes(id, &b.decode().unwrap()).unwrap();
        }
        if let (Some(b), Some(t)) = (r.expected, r.tolerance) {
            let mut want = b.decode().unwrap();
            if r.name == "y" {
                // The exponent's top bit: far beyond any float tolerance (one ulp would be within).
                want[4 * 123 + 3] ^= 0x40;
            }
            w.set_expected_bytes(id, &want, t).unwrap();
        }
    }
    for op in archive.ops() {
        let Op::Launch(l) = op else { panic!("saxpy is launches only") };
        let relocs = archive.relocs(l.relocs.clone()).collect();
        w.launch(LaunchDecl {
            kernel: l.kernel,
            grid: l.grid,
            block: l.block,
            shared_bytes: l.shared_bytes,
            params: l.params.to_vec(),
            relocs,
        })
        .unwrap();
    }
    let bad = dir.path().join("bad.recap");
    std::fs::write(&bad, w.finish().unwrap().into_inner()).unwrap();
    let o = recap(&["replay", bad.to_str().unwrap(), "--check"]);
    let (stdout, _) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("PASS x:"), "{stdout}");
    assert!(stdout.contains("FAIL y: bytes 0..20000 f32"), "{stdout}");
    assert!(stdout.contains("1 of 5000 elements differ beyond"), "{stdout}");
    assert!(stdout.contains("first at element 123"), "{stdout}");
}

#[test]
fn iterations_restart_from_the_initial_state_and_report_each_time() {
    let dir = tempfile::tempdir().unwrap();
    let archive = import(&corpus_dir().join("nvcc/saxpy"), "sm_90", dir.path());
    let o = recap(&["replay", archive.to_str().unwrap(), "--iterations", "3", "--check", "--threads", "1"]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stdout}{stderr}");
    for i in 1..=3 {
        assert!(stdout.contains(&format!("iteration {i}: ")), "{stdout}");
    }
    assert!(stdout.contains("3 iterations: median"), "{stdout}");
}

#[test]
fn each_iteration_says_which_engine_ran_its_launches() {
    let dir = tempfile::tempdir().unwrap();
    let archive = import(&corpus_dir().join("nvcc/matmul_tiled"), "sm_90", dir.path());
    let path = archive.to_str().unwrap();
    for (engine, want) in [
        ("jit", "1 launches (1 native code, 1 of them in SIMD lanes, 0 interpreted)"),
        ("jit-scalar", "1 launches (1 native code, 0 of them in SIMD lanes, 0 interpreted)"),
        ("interp", "1 launches (0 native code, 0 of them in SIMD lanes, 1 interpreted)"),
    ] {
        let o = recap(&["replay", path, "--device", "cpu", "--check", "--engine", engine]);
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{engine}: {stdout}{stderr}");
        assert!(stdout.contains(want), "{engine}: {stdout}");
    }
}

/// Triton's matrix products for sm_80 (`mma.sync` fed by `ldmatrix`, shared memory filled by
/// `cp.async` or by loads and stores, and a flash-attention block with shuffles) pass their check on native code, which runs them itself, and on the interpreter.
#[test]
fn triton_sm80_matrix_products_pass_on_native_code_and_the_interpreter() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["tr_dot_f16_masked", "tr_dot_f16", "tr_dot_bf16", "tr_dot_attention"] {
        let archive = import(&corpus_dir().join("triton").join(name), "sm_80", dir.path());
        let path = archive.to_str().unwrap();
        for (engine, want) in [
            ("jit", "1 launches (1 native code, 0 of them in SIMD lanes, 0 interpreted)"),
            ("interp", "1 launches (0 native code, 0 of them in SIMD lanes, 1 interpreted)"),
        ] {
            let o = recap(&["replay", path, "--device", "cpu", "--check", "--engine", engine]);
            let (stdout, stderr) = text(&o);
            assert!(o.status.success(), "{name} {engine}: {stdout}{stderr}");
            assert!(
                stdout.lines().any(|l| l.starts_with("PASS ")) && !stdout.contains("FAIL "),
                "{name} {engine}: {stdout}"
            );
            assert!(stdout.contains(want), "{name} {engine}: {stdout}");
        }
    }
}

#[test]
fn cuda_options_are_refused_for_the_cpu_and_bad_devices_named() {
    let dir = tempfile::tempdir().unwrap();
    let archive = import(&corpus_dir().join("nvcc/saxpy"), "sm_90", dir.path());
    let o = recap(&["replay", archive.to_str().unwrap(), "--device", "cpu", "--mode", "stream"]);
    let (stdout, stderr) = text(&o);
    assert!(!o.status.success(), "{stdout}");
    assert!(stderr.contains("--mode stream applies to --device cuda only"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let o = recap(&["replay", archive.to_str().unwrap(), "--device", "tpu"]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("expected cpu, cuda or cuda:N"));
}

// ---- hostile archives ----

const HEADER: &str = ".version 7.0\n.target sm_50\n.address_size 64\n";

/// `p[0] = p[n / 4]` (read at byte offset n) or `p[n / 4] = 1` (write), from one thread.
const OOB: &str = r#"
.visible .entry oob_read(.param .u64 p, .param .u64 n)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<5>;
	ld.param.u64 %rd1, [p];
	ld.param.u64 %rd2, [n];
	cvta.to.global.u64 %rd3, %rd1;
	add.s64 %rd4, %rd3, %rd2;
	ld.global.u32 %r1, [%rd4];
	st.global.u32 [%rd3], %r1;
	ret;
}
.visible .entry oob_write(.param .u64 p, .param .u64 n)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<5>;
	ld.param.u64 %rd1, [p];
	ld.param.u64 %rd2, [n];
	cvta.to.global.u64 %rd3, %rd1;
	add.s64 %rd4, %rd3, %rd2;
	mov.u32 %r1, 1;
	st.global.u32 [%rd4], %r1;
	ret;
}
"#;

const SPIN: &str = r#"
.visible .entry spin()
{
$L_top:
	bra.uni $L_top;
}
"#;

fn ptr_param(name: &str, offset: u32) -> ParamDecl {
    ParamDecl { name: name.into(), offset, size: 8, align: 8, kind: ParamKind::Pointer }
}

fn u64_param(name: &str, offset: u32) -> ParamDecl {
    ParamDecl { name: name.into(), offset, size: 8, align: 8, kind: ParamKind::Value }
}

/// One launch of `entry` with `(pointer to buf + target_offset, n)` parameters; `buf` is 64 bytes.
fn oob_archive(dir: &Path, entry: &str, n: u64, target_offset: u64) -> PathBuf {
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("oob", &format!("{HEADER}{OOB}")).unwrap();
    let k = w.add_kernel(m, entry, vec![ptr_param("p", 0), u64_param("n", 8)]).unwrap();
    let buf = w.add_region(RegionDecl::new("buf", 64, DType::U32)).unwrap();
    let mut params = vec![0u8; 16];
    params[8..].copy_from_slice(&n.to_le_bytes());
    w.launch(LaunchDecl {
        kernel: k,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: 0,
        params,
        relocs: vec![Reloc { offset: 0, target: buf, target_offset }],
    })
    .unwrap();
    let path = dir.join(format!("{entry}-{n}-{target_offset}.recap"));
    std::fs::write(&path, w.finish().unwrap().into_inner()).unwrap();
    path
}

fn single_kernel_archive(dir: &Path, name: &str, body: &str, entry: &str, shared_bytes: u32) -> PathBuf {
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let m = w.add_module(name, &format!("{HEADER}{body}")).unwrap();
    let k = w.add_kernel(m, entry, vec![]).unwrap();
    w.launch(LaunchDecl {
        kernel: k,
        grid: [2, 1, 1],
        block: [32, 1, 1],
        shared_bytes,
        params: vec![],
        relocs: vec![],
    })
    .unwrap();
    let path = dir.join(format!("{name}.recap"));
    std::fs::write(&path, w.finish().unwrap().into_inner()).unwrap();
    path
}

fn replay_fails(path: &Path, extra: &[&str]) -> String {
    let mut args = vec!["replay", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = recap(&args);
    let (stdout, stderr) = text(&o);
    assert!(!o.status.success(), "{} replayed without error:\n{stdout}", path.display());
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn out_of_bounds_reads_and_writes_stop_with_kernel_and_address() {
    let dir = tempfile::tempdir().unwrap();
    // In bounds (the last word): runs.
    let ok = oob_archive(dir.path(), "oob_read", 60, 0);
    let o = recap(&["replay", ok.to_str().unwrap()]);
    assert!(o.status.success(), "{:?}", text(&o));
    for entry in ["oob_read", "oob_write"] {
        for n in [64u64, 1 << 20, u64::MAX - 3] {
            let err = replay_fails(&oob_archive(dir.path(), entry, n, 0), &[]);
            assert!(err.contains("op 0 (launch of"), "{err}");
            assert!(err.contains(entry) && err.contains("address 0x"), "{err}");
        }
    }
}

#[test]
fn a_relocation_at_the_end_of_its_region_points_one_past_it() {
    let dir = tempfile::tempdir().unwrap();
    // The pointer itself is legal (one past the end); any access through it is caught.
    let err = replay_fails(&oob_archive(dir.path(), "oob_write", 0, 64), &[]);
    assert!(err.contains("oob_write") && err.contains("address 0x"), "{err}");
    // The last word itself is in bounds.
    let path = oob_archive(dir.path(), "oob_read", 0, 60);
    let o = recap(&["replay", path.to_str().unwrap()]);
    assert!(o.status.success(), "{:?}", text(&o));
    // Pointing past the end is refused when the archive is written.
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("oob", &format!("{HEADER}{OOB}")).unwrap();
    let k = w.add_kernel(m, "oob_read", vec![ptr_param("p", 0), u64_param("n", 8)]).unwrap();
    let buf = w.add_region(RegionDecl::new("buf", 64, DType::U32)).unwrap();
    let launch = LaunchDecl {
        kernel: k,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: 0,
        params: vec![0; 16],
        relocs: vec![Reloc { offset: 0, target: buf, target_offset: 65 }],
    };
    assert!(w.launch(launch).is_err());
}

#[test]
fn an_endless_kernel_is_stopped_by_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let path = single_kernel_archive(dir.path(), "spin", SPIN, "spin", 0);
    let err = replay_fails(&path, &["--budget", "1000000"]);
    assert!(err.contains("budget"), "{err}");
    assert!(err.contains("op 0 (launch of spin)"), "{err}");
}

#[test]
fn archives_that_declare_too_much_are_refused_before_anything_is_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, regions: &[u64], grid: [u32; 3]| {
        let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
        let m = w.add_module("spin", &format!("{HEADER}{SPIN}")).unwrap();
        let k = w.add_kernel(m, "spin", vec![]).unwrap();
        for (i, &size) in regions.iter().enumerate() {
            w.add_region(RegionDecl::new(format!("r{i}"), size, DType::U8)).unwrap();
        }
        w.launch(LaunchDecl { kernel: k, grid, block: [1, 1, 1], shared_bytes: 0, params: vec![], relocs: vec![] })
            .unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, w.finish().unwrap().into_inner()).unwrap();
        path
    };
    let huge = write("huge.recap", &[2 << 30], [1, 1, 1]);
    assert!(std::fs::metadata(&huge).unwrap().len() < 4096);
    let err = replay_fails(&huge, &[]);
    assert!(err.contains("region \"r0\"") && err.contains("2147483648") && err.contains("--max-region-bytes"), "{err}");
    let err = replay_fails(&huge, &["--max-region-bytes", "4GiB", "--max-total-bytes", "1G"]);
    assert!(err.contains("all regions together") && err.contains("--max-total-bytes"), "{err}");
    let err = replay_fails(&write("many.recap", &[64; 10], [1, 1, 1]), &["--max-regions", "8"]);
    assert!(err.contains("number of regions is 10") && err.contains("--max-regions"), "{err}");
    // 2^31 - 1 blocks of an endless kernel: refused before the first block, not hung on.
    let grid = write("grid.recap", &[], [i32::MAX as u32, 1, 1]);
    for engine in ["jit", "jit-scalar", "interp"] {
        let err = replay_fails(&grid, &["--engine", engine]);
        assert!(
            err.contains("op 0 (launch of spin)") && err.contains("2147483647") && err.contains("--max-grid-blocks"),
            "{engine}: {err}"
        );
    }
    let err = replay_fails(&huge, &["--max-region-bytes", "lots"]);
    assert!(err.contains("not a byte count"), "{err}");
}

#[test]
fn an_endless_kernel_is_stopped_by_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let path = single_kernel_archive(dir.path(), "spin", SPIN, "spin", 0);
    let child = Command::new(recap_bin())
        .args(["replay", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let started = Instant::now();
    let o = child.wait_with_output().unwrap();
    let (_, stderr) = text(&o);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!o.status.success());
    assert!(stderr.contains("cancelled"), "{stderr}");
}

#[test]
fn huge_shared_memory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let declared = r#"
.visible .entry big_shared()
{
	.shared .align 4 .b8 big[3000000000];
	ret;
}
"#;
    let err = replay_fails(&single_kernel_archive(dir.path(), "declared", declared, "big_shared", 0), &[]);
    assert!(err.contains("module declared"), "{err}");
    let dynamic = r#"
.extern .shared .align 4 .b8 dyn[];
.visible .entry dyn_shared()
{
	ret;
}
"#;
    let err = replay_fails(&single_kernel_archive(dir.path(), "dynamic", dynamic, "dyn_shared", u32::MAX), &[]);
    assert!(err.contains("dyn_shared") && err.contains("shared"), "{err}");
}

#[test]
fn calling_an_undefined_function_is_a_load_error() {
    let dir = tempfile::tempdir().unwrap();
    let body = r#"
.extern .func missing
(
)
;
.visible .entry calls_missing()
{
	call.uni missing, ();
	ret;
}
"#;
    let err = replay_fails(&single_kernel_archive(dir.path(), "undefined", body, "calls_missing", 0), &[]);
    assert!(err.contains("module undefined") && err.contains("missing"), "{err}");
    assert!(err.contains("line"), "{err}");
}

/// `p[3] = p[0] * p[1] + p[2]` with a plain `mul` and `add`, which ptxas fuses.
const MUL_ADD: &str = r#"
.version 8.0
.target sm_90
.address_size 64
.visible .entry mul_add(.param .u64 p)
{
    .reg .f32 %f<5>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    ld.global.f32 %f1, [%rd1];
    ld.global.f32 %f2, [%rd1+4];
    ld.global.f32 %f3, [%rd1+8];
    mul.f32 %f4, %f1, %f2;
    add.f32 %f4, %f4, %f3;
    st.global.f32 [%rd1+12], %f4;
    ret;
}
"#;

/// The replay says whether it fuses plain multiplies and additions as ptxas does (by default for
/// PTX that targets sm_90) or keeps them apart (`--mma-model ieee`).
#[test]
fn the_replay_says_whether_plain_multiply_adds_run_fused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mul_add.recap");
    let mut w = ArchiveWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    let r = w.add_region(RegionDecl::new("p", 16, DType::F32)).unwrap();
    let init: Vec<u8> = [1.5f32, 3.25, -4.0, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    w.set_initial_bytes(r, &init).unwrap();
    let m = w.add_module("m", MUL_ADD).unwrap();
    let p = ParamDecl { name: "p".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer };
    let k = w.add_kernel(m, "mul_add", vec![p]).unwrap();
    w.launch(LaunchDecl {
        kernel: k,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: 0,
        params: vec![0; 8],
        relocs: vec![Reloc { offset: 0, target: r, target_offset: 0 }],
    })
    .unwrap();
    w.finish().unwrap();
    for (extra, line) in [
        (&[][..], "multiply-adds: fused as ptxas fuses them (the archive was captured on sm_90)"),
        (&["--mma-model", "ieee"][..], "multiply-adds: as the PTX reads, unfused (--mma-model)"),
    ] {
        let mut args = vec!["replay", path.to_str().unwrap(), "--device", "cpu"];
        args.extend_from_slice(extra);
        let o = recap(&args);
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{extra:?}:\n{stdout}{stderr}");
        assert!(stdout.lines().any(|l| l == line), "{extra:?}: no `{line}` in\n{stdout}");
    }
}
