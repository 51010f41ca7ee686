//! `recap replay --check` verdicts from the command line: typed layouts inferred by `recap
//! infer-types` and shown by `recap inspect`, nondeterminism measured with `--determinism`,
//! nothing to check as its own state, and iteration counts refused where they mean nothing.

use std::io::Cursor;
use std::path::Path;
use std::process::{Command, Output};

use recap_tests::recap_bin;
use shared::archive::*;
use shared::replay::{CpuReplay, NoObserver, ReplayOptions};

fn recap(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(recap_bin()).args(args).output().expect("running recap")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Every thread adds its value into one of eight bins with a float atomic: the sums' rounding
/// depends on the order the blocks run in.
const HISTOGRAM: &str = r#"
.version 7.0
.target sm_70
.address_size 64
.visible .entry histogram(.param .u64 pvals, .param .u64 pbins)
{
    .reg .b32 %r<8>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [pvals];
    ld.param.u64 %rd2, [pbins];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    and.b32 %r5, %r4, 7;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd2, %rd5;
    red.global.add.f32 [%rd6], %f1;
    ret;
}
"#;

/// The histogram over 1024 values as an archive of raw-byte regions; with `expected`, the bins'
/// expected state.
fn histogram(ptx: &str, expected: Option<&[u8]>) -> Vec<u8> {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("histogram", ptx).unwrap();
    let param =
        |i: u32| ParamDecl { name: format!("p{i}"), offset: 8 * i, size: 8, align: 8, kind: ParamKind::Pointer };
    let k = w.add_kernel(m, "histogram", vec![param(0), param(1)]).unwrap();
    let vals: Vec<u8> = (0..1024u64).flat_map(|i| (((i * 2654435761) % 10007) as f32 / 3.0).to_le_bytes()).collect();
    let v = w.add_region(RegionDecl::new("vals", 4096, DType::Bytes)).unwrap();
    w.set_initial_bytes(v, &vals).unwrap();
    let b = w.add_region(RegionDecl::new("bins", 32, DType::Bytes)).unwrap();
    w.set_initial_bytes(b, &[0; 32]).unwrap();
    if let Some(e) = expected {
        w.set_expected_bytes(b, e, Tolerance::Exact).unwrap();
    }
    let relocs =
        vec![Reloc { offset: 0, target: v, target_offset: 0 }, Reloc { offset: 8, target: b, target_offset: 0 }];
    w.launch(LaunchDecl {
        kernel: k,
        grid: [32, 1, 1],
        block: [32, 1, 1],
        shared_bytes: 0,
        params: vec![0; 16],
        relocs,
    })
    .unwrap();
    w.finish().unwrap().into_inner()
}

/// The bins after one replay with blocks in the order of `seed` (standing in for a GPU's run).
fn bins_after(archive: &[u8], seed: u64) -> Vec<u8> {
    let a = Archive::open(archive).unwrap();
    let options = ReplayOptions { threads: 1, block_order: Some(seed), ..Default::default() };
    let mut replay = CpuReplay::new(&a, options).unwrap();
    replay.run_iteration(&mut NoObserver).unwrap();
    replay.read_region(1).unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn a_float_atomic_histogram_is_typed_nondeterministic_and_within_tolerance_while_a_wrong_kernel_fails() {
    let dir = tempfile::tempdir().unwrap();
    let want = bins_after(&histogram(HISTOGRAM, None), 1000);
    let plain = write(dir.path(), "h.recap", &histogram(HISTOGRAM, Some(&want)));
    let typed = dir.path().join("typed.recap");
    let o = recap(&[&"infer-types", &plain, &"-o", &typed]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("bins: f32 ×8 (32 B)"), "{}", text(&o));
    let shown = text(&recap(&[&"inspect", &typed]));
    assert!(shown.contains("types: f32 ×8 (32 B)"), "{shown}");

    let o = recap(&[&"replay", &typed, &"--check", &"--determinism", &"4", &"--threads", &"1"]);
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(said.contains("PASS bins: bytes 0..32 f32:") && said.contains("nondeterministic"), "{said}");
    assert!(said.contains("PASS (within tolerance): 1 of 1 regions pass"), "{said}");

    // Alone and with no tolerance to spare, the same replay differs from the GPU's bits.
    let o = recap(&[&"replay", &typed, &"--check", &"--ulps", &"0", &"--rtol", &"0"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));

    // One more add per value: the bins are wrong, whatever the replays' spread.
    let wrong = HISTOGRAM.replace(
        "red.global.add.f32 [%rd6], %f1;",
        "add.rn.f32 %f1, %f1, 0f3F800000;\n    red.global.add.f32 [%rd6], %f1;",
    );
    let bad = histogram(&wrong, Some(&want));
    let layout = Archive::open(&std::fs::read(&typed).unwrap()).unwrap().typed_layout(1).unwrap();
    let bad = write(dir.path(), "bad.recap", &with_typed_layouts(&bad, &[(1, layout)]).unwrap());
    let o = recap(&[&"replay", &bad, &"--check", &"--determinism", &"3", &"--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let check: serde_json::Value = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "check")
        .expect("a check line");
    assert_eq!(check["state"], "failed");
    let stretch = &check["regions"][0]["stretches"][0];
    assert_eq!((stretch["ty"].as_str(), stretch["outcome"].as_str()), (Some("f32"), Some("differ")));
    assert_eq!(stretch["first"]["index"], 0, "{stretch}");
}

#[test]
fn nothing_to_check_is_not_a_pass_and_zero_iterations_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let plain = write(dir.path(), "h.recap", &histogram(HISTOGRAM, None));
    let o = recap(&[&"replay", &plain, &"--check"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("nothing to check"), "{}", text(&o));
    let o = recap(&[&"replay", &plain, &"--check", &"--json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"state\":\"nothing_to_check\""), "{}", text(&o));
    for extra in [&[][..], &["--check"][..]] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"replay", &plain, &"--iterations", &"0"];
        args.extend(extra.iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
        let o = recap(&args);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("--iterations"), "{}", text(&o));
    }
}

/// `recap capture --json EXTRA -o ARCHIVE -- COMMAND` through the CPU driver, with `env` set; the
/// program, run in the archive's folder, must print `ok_line`. Gives the capture's report.
fn capture_on_cpu_driver(
    archive: &Path,
    extra: &[&str],
    command: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
    ok_line: &str,
) -> serde_json::Value {
    let o = Command::new(recap_bin())
        .args(["capture", "--json"])
        .args(extra)
        .arg("-o")
        .arg(archive)
        .arg("--driver")
        .arg(recap_tests::cdylib("recap-cpudriver", "recap_cpudriver"))
        .arg("--")
        .args(command)
        .env("RECAP_INTERCEPT_LIB", recap_tests::cdylib("recap-intercept", "recap_intercept"))
        .envs(env.iter().copied())
        .current_dir(archive.parent().unwrap())
        .output()
        .unwrap();
    let said = text(&o);
    assert!(o.status.success() && said.contains(ok_line), "{said}");
    serde_json::from_str(&said[said.find('{').unwrap()..]).unwrap()
}

/// `recap capture --json EXTRA -o ARCHIVE -- float_order` through the CPU driver, its blocks in
/// the shuffled orders of `order` (`RECAP_CPU_BLOCK_ORDER`); the program must pass its own check.
fn capture_float_order(archive: &Path, extra: &[&str], order: &str) -> serde_json::Value {
    let program = crate::cpudriver::Program::build("float_order", &["-lcuda", "-lm"]);
    let env = [("RECAP_CPU_BLOCK_ORDER", order.as_ref())];
    let exe = program.exe.canonicalize().unwrap();
    capture_on_cpu_driver(archive, extra, &[exe.as_os_str()], &env, "float_order: ok ")
}

/// A program with a float-atomic histogram and a lock-ordered sum (`float_order.c`), captured
/// through recap's CPU driver with its blocks started in a shuffled order, as a GPU would: the
/// capture types the regions from the PTX's stores, and replays in other orders differ from the
/// capture in the last bits, so the check calls those stretches nondeterministic and within
/// tolerance; with no tolerance at all they fail, naming the element.
#[test]
fn a_captured_float_atomic_histogram_and_lock_ordered_sum_pass_within_tolerance_as_nondeterministic() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("float_order.recap");
    let report = capture_float_order(&archive, &[], "7");
    assert_eq!(report["ops"]["launch"], 2, "{report:#}");
    // vals (host data), bins and total (f32 stores), lock (32-bit atomics).
    assert_eq!(
        (report["types"]["typed_regions"].as_u64(), report["types"]["untyped_regions"].as_u64()),
        (Some(3), Some(1))
    );
    let shown = text(&recap(&[&"inspect", &archive]));
    assert!(shown.contains("types: f32 ×8 (32 B)") && shown.contains("types: f32 ×1 (4 B)"), "{shown}");

    let o = recap(&[&"replay", &archive, &"--check", &"--determinism", &"4"]);
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(said.contains("PASS (within tolerance)") && said.contains("nondeterministic"), "{said}");
    assert!(!said.contains("FAIL"), "{said}");

    // Judged bit for bit, a replay in another order than the capture's is told apart.
    let o = recap(&[&"replay", &archive, &"--check", &"--ulps", &"0", &"--rtol", &"0", &"--atol", &"0"]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(said.contains("FAIL") && said.contains("f32") && said.contains("element "), "{said}");
}

/// The float-atomic histogram with its expected bins (one replay's, in an order of its own) and
/// the typed layout `recap infer-types` gives it.
fn typed_histogram(dir: &Path) -> Vec<u8> {
    let want = bins_after(&histogram(HISTOGRAM, None), 1000);
    let plain = histogram(HISTOGRAM, Some(&want));
    let p = write(dir, "h.recap", &plain);
    let typed = dir.join("typed.recap");
    assert!(recap(&[&"infer-types", &p, &"-o", &typed]).status.success());
    std::fs::read(&typed).unwrap()
}

/// A host session asks for the same measurement as `--determinism`: its check judges four whole
/// replays together, says which stretches disagreed, and the session keeps the request across a
/// restart; requests that cannot mean anything are refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_session_measures_determinism_and_keeps_the_request() {
    use crate::host::{collect_stream, get_json, new_session, upload};
    let dir = tempfile::tempdir().unwrap();
    let typed = typed_histogram(dir.path());
    let data = dir.path().join("data");
    let server = recap_tests::server::Server::start(&data, &[]);
    let client = reqwest::Client::new();
    let (status, a) = upload(&client, &server.url, "histogram", typed).await;
    assert_eq!(status, 201, "{a}");

    for (body, why) in [
        (serde_json::json!({"archive": a["id"], "determinism": 1}), "2 to 16, got 1"),
        (serde_json::json!({"archive": a["id"], "determinism": 17}), "2 to 16, got 17"),
        (serde_json::json!({"archive": a["id"], "determinism": 3, "check": false}), "checks nothing"),
    ] {
        let res = client.post(format!("{}/api/sessions", server.url)).json(&body).send().await.unwrap();
        assert_eq!(res.status().as_u16(), 400, "{body}");
        let said = res.text().await.unwrap();
        assert!(said.contains("determinism") && said.contains(why), "{said}");
    }

    let created = new_session(&client, &server.url, serde_json::json!({"archive": a["id"], "determinism": 4})).await;
    let id = created["id"].as_str().unwrap();
    let stream = collect_stream(&server.ws(&format!("/api/sessions/{id}/ws"))).await;
    let end = stream.last().unwrap();
    assert_eq!(end["type"], "finished", "{stream:#?}");
    let check = &end["check"];
    assert_eq!((check["replays"].as_u64(), check["state"].as_str()), (Some(4), Some("within")), "{check:#}");
    let stretch = &check["regions"][0]["stretches"][0];
    assert_eq!(stretch["ty"], "f32", "{stretch}");
    assert!(stretch["spread"]["ulps"].as_u64().unwrap() > 0, "the replays disagreed: {stretch}");
    assert!(server.stop());

    let server = recap_tests::server::Server::start(&data, &[]);
    let (_, info) = get_json(&client, &format!("{}/api/sessions/{id}", server.url)).await;
    assert_eq!((info["determinism"].as_u64(), info["passed"].as_bool()), (Some(4), Some(true)), "{info}");
}

/// `recap capture --repeat-range 3`: the range runs three more times on the capture's device (the
/// CPU driver, blocks in shuffled orders), and the stretches where those runs and the program's
/// disagree keep their spread in the archive. A later check, even one asked to be bit-exact, calls
/// them nondeterministic and judges them no tighter than that spread; the lock stays exact.
#[test]
fn repeat_range_keeps_the_programs_own_spread_and_checks_judge_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("repeated.recap");
    let report = capture_float_order(&archive, &["--repeat-range", "3"], "11");
    let repeat = &report["repeat"];
    assert!(repeat["error"].is_null(), "{report:#}");
    assert_eq!(repeat["runs"], 3);
    let stretches = repeat["stretches"].as_u64().unwrap();
    assert!(stretches >= 1 && repeat["max_ulps"].as_u64().unwrap() > 0, "the runs disagree: {report:#}");
    let shown = text(&recap(&[&"inspect", &archive]));
    assert_eq!(shown.matches("spread at capture: bytes ").count() as u64, stretches, "{shown}");

    let o = recap(&[&"replay", &archive, &"--check", &"--json", &"--ulps", &"0", &"--rtol", &"0", &"--atol", &"0"]);
    let check: serde_json::Value = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "check")
        .unwrap_or_else(|| panic!("a check line: {}", text(&o)));
    let mut recorded = 0;
    for region in check["regions"].as_array().unwrap() {
        for s in region["stretches"].as_array().unwrap() {
            match s.get("recorded_spread") {
                Some(sp) => {
                    recorded += 1;
                    assert_eq!(s["ty"], "f32", "{s}");
                    let (atol, abs) = (s["tolerance"]["atol"].as_f64().unwrap(), sp["abs"].as_f64().unwrap());
                    assert!(atol >= abs && abs > 0.0, "judged no tighter: {s}");
                }
                None => assert!(s["ty"] != "f32" || s["outcome"] == "exact" || s["outcome"] == "differ", "{s}"),
            }
        }
    }
    assert_eq!(recorded, stretches, "{check:#}");
    let said = text(&recap(&[&"replay", &archive, &"--check"]));
    assert!(said.contains("nondeterministic at capture: the program's repeated runs disagree"), "{said}");
}

/// The viewer asks for replays judged together from its form and shows the verdict in elements:
/// the state line, each stretch in its type with its spread, and the histogram of its distances
/// in ulps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_viewer_shows_a_nondeterministic_stretch_with_its_spread_and_ulp_histogram() -> anyhow::Result<()> {
    use crate::browser::{click, select_value, wait_attr_eq};
    use std::time::Duration;
    if !recap_tests::browser::available("the_viewer_shows_a_nondeterministic_stretch_with_its_spread_and_ulp_histogram")
    {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let typed = typed_histogram(dir.path());
    let web = recap_tests::repo_root().join("web");
    let server = recap_tests::server::Server::start(&dir.path().join("data"), &["--web", &web.to_string_lossy()]);
    let (status, a) = crate::host::upload(&reqwest::Client::new(), &server.url, "histogram", typed).await;
    anyhow::ensure!(status == 201, "upload: {a}");
    let b = recap_tests::browser::Browser::start().await?;
    b.open(&format!("{}/archives/{}#replay", server.url, a["id"].as_str().unwrap())).await?;
    b.wait_for("#r-device option[value='cpu']", Duration::from_secs(10)).await?;
    select_value(&b, "#r-device", "cpu").await?;
    for (field, value) in [("#r-iters", "1"), ("#r-determinism", "4")] {
        let e = b.client.find(fantoccini::Locator::Css(field)).await?;
        e.clear().await?;
        e.send_keys(value).await?;
    }
    click(&b, "#r-start").await?;
    wait_attr_eq(&b, "#r-state", "data-state", "finished", Duration::from_secs(60)).await?;
    let verdict = b.text("#r-verdict").await?;
    assert!(verdict.starts_with("PASS (within tolerance)") && verdict.contains("4 whole replays"), "{verdict}");
    let stretch = b.text("#r-check-table tr[data-stretch='1:0']").await?;
    assert!(stretch.contains("bytes 0..32 f32") && stretch.contains("nondeterministic"), "{stretch}");
    assert!(stretch.contains("replays disagree on"), "{stretch}");
    b.wait_for("#r-check-table tr[data-stretch='1:0'] .ulp-histogram svg", Duration::from_secs(5)).await?;
    Ok(())
}

/// A Python program's device arrays type the bytes no PTX wrote: `recap capture` puts its
/// `sitecustomize` first on the path (and still runs the program's own), which names each live
/// array's dtype as the range ends at `cuProfilerStop`. The check then judges those stretches in
/// those types, leaves the bytes two arrays disagree on untyped, and says which typed what; with
/// `--no-array-types` nothing is asked.
#[test]
fn a_python_programs_arrays_type_the_bytes_no_ptx_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("own");
    std::fs::create_dir(&own).unwrap();
    std::fs::write(own.join("sitecustomize.py"), "import os\nos.environ['RECAP_TEST_CHAINED'] = 'chained'\n").unwrap();
    let program = recap_tests::repo_root().join("tests/capture/programs/array_types.py");
    let capture = |archive: &Path, extra: &[&str]| {
        let command = ["python3".as_ref(), program.as_os_str()];
        let env = [("PYTHONPATH", own.as_os_str())];
        capture_on_cpu_driver(archive, extra, &command, &env, "array_types: ok chained")["notes"].to_string()
    };
    let archive = dir.path().join("arrays.recap");
    let notes = capture(&archive, &[]);
    assert!(
        notes.contains("2 stretches (2040 bytes) typed by the program's arrays as the range ended: <f4 ×1, <i4 ×1"),
        "{notes}"
    );
    let bytes = std::fs::read(&archive).unwrap();
    let declared = declared::of_archive(&Archive::open(&bytes).unwrap()).unwrap();
    let spans: Vec<_> = declared[&0].iter().map(|d| (d.offset, d.len, d.ty, d.from.as_str())).collect();
    assert_eq!(spans, [(8, 1016, ElemType::F32, "<f4"), (1024, 1024, ElemType::I32, "<i4")]);
    let o =
        Command::new(recap_bin()).arg("replay").arg(&archive).args(["--device", "cpu", "--check"]).output().unwrap();
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(
        said.contains(
            "bytes 0..8 untyped (no PTX wrote it): 8 elements bit-exact; \
             bytes 8..1024 f32 (the program's array): 254 elements bit-exact; \
             bytes 1024..2048 i32 (the program's array): 256 elements bit-exact"
        ),
        "{said}"
    );

    let o = Command::new(recap_bin()).arg("inspect").arg(&archive).output().unwrap();
    let said = text(&o);
    assert!(said.contains("the program's arrays: f32 ×254 at 8..1024 (<f4), i32 ×256 at 1024..2048 (<i4)"), "{said}");

    let plain = dir.path().join("plain.recap");
    let notes = capture(&plain, &["--no-array-types"]);
    assert!(!notes.contains("typed by the program's arrays"), "{notes}");
    let bytes = std::fs::read(&plain).unwrap();
    assert!(declared::of_archive(&Archive::open(&bytes).unwrap()).unwrap().is_empty());
}
