//! Finding where results go wrong: data in and out as `.npy` (read back by numpy), `inspect --json`,
//! `extract`, `compare` naming a deliberately perturbed kernel, `diff`, and `trim` of a multi-op
//! archive into one that passes its check on every engine; bad inputs give one clear line each.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use recap::Device;
use recap_tests::{corpus_dir, recap_bin};
use serde_json::Value;

pub(crate) fn recap<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(recap_bin()).args(args).output().expect("running recap")
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs recap and wants it to succeed; its stdout.
pub(crate) fn ok<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    let out = recap(args);
    assert!(out.status.success(), "recap {args:?} failed: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// Runs recap and wants it to fail with exactly one line on stderr; that line.
pub(crate) fn one_line_error<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    let out = recap(args);
    assert!(!out.status.success(), "recap {args:?} succeeded: {}", text(&out.stdout));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "recap {args:?}: {err}");
    err
}

fn imported(case: &str, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{case}.recap"));
    ok(&[
        Path::new("import-case").as_os_str(),
        corpus_dir().join("nvcc").join(case).as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    out
}

/// numpy, which these tests read and write `.npy` files with (`cargo xtask test` installs it).
fn python(script: &str) -> String {
    let out = Command::new("python3").arg("-c").arg(script).output().expect("python3");
    assert!(out.status.success(), "python3 failed (numpy is needed: pip install numpy): {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn npy_files_round_trip_through_numpy() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let saxpy = imported("saxpy", d);
    // The expected output, extracted, and the output of a replay, dumped: numpy reads both as the
    // same f32 vector of the region's shape.
    ok(&[
        Path::new("extract").as_os_str(),
        saxpy.as_os_str(),
        "--expected".as_ref(),
        "y".as_ref(),
        "-o".as_ref(),
        d.join("want.npy").as_os_str(),
    ]);
    let dump = d.join("dump");
    ok(&[Path::new("replay").as_os_str(), saxpy.as_os_str(), "--dump".as_ref(), dump.as_os_str()]);
    let seen = python(&format!(
        "import numpy as np\nw = np.load({:?}); g = np.load({:?}); x = np.load({:?})\n\
         print(w.dtype, w.shape, g.dtype, g.shape, bool((w == g).all()), x.shape)\n\
         np.save({:?}, (x * 3).astype(np.float32)); (x * 3).astype(np.float32).tofile({:?})",
        d.join("want.npy"),
        dump.join("y.npy"),
        dump.join("x.npy"),
        d.join("x3.npy"),
        d.join("x3.bin"),
    ));
    assert_eq!(seen.trim(), "float32 (5000,) float32 (5000,) True (5000,)");
    // New input data from numpy, as .npy and as raw bytes: the same results either way, and not
    // the archive's own.
    let run = |input: &Path, out: &Path| {
        let arg = format!("x={}", input.display());
        ok(&[
            Path::new("replay").as_os_str(),
            saxpy.as_os_str(),
            "--input".as_ref(),
            arg.as_ref(),
            "--dump".as_ref(),
            out.as_os_str(),
        ]);
    };
    run(&d.join("x3.npy"), &d.join("a"));
    run(&d.join("x3.bin"), &d.join("b"));
    let same = python(&format!(
        "import numpy as np\na = np.load({:?}); b = np.load({:?}); w = np.load({:?})\nprint(bool((a == b).all()), bool((a == w).all()))",
        d.join("a/y.npy"),
        d.join("b/y.npy"),
        d.join("want.npy"),
    ));
    assert_eq!(same.trim(), "True False");
}

#[test]
fn bad_inputs_give_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let saxpy = imported("saxpy", d);
    python(&format!(
        "import numpy as np\nnp.save({:?}, np.zeros(5000, np.float64)); np.save({:?}, np.zeros((50, 100), np.float32)); np.save({:?}, np.zeros(10, np.float32))",
        d.join("f64.npy"),
        d.join("2d.npy"),
        d.join("short.npy"),
    ));
    std::fs::write(d.join("corrupt.npy"), b"\x93NUMPY\x01\x00\xff\x00{'descr': '<f4'").unwrap();
    std::fs::write(d.join("short.bin"), [0u8; 12]).unwrap();
    let replay = |input: String| {
        one_line_error(&[Path::new("replay").as_os_str(), saxpy.as_os_str(), "--input".as_ref(), input.as_ref()])
    };
    let e = replay(format!("x={}", d.join("f64.npy").display()));
    assert!(e.contains("dtype <f8") && e.contains("\"x\"") && e.contains("<f4"), "{e}");
    let e = replay(format!("x={}", d.join("2d.npy").display()));
    assert!(e.contains("shape [50, 100]") && e.contains("[5000]"), "{e}");
    let e = replay(format!("x={}", d.join("short.npy").display()));
    assert!(e.contains("shape [10]"), "{e}");
    let e = replay(format!("x={}", d.join("corrupt.npy").display()));
    assert!(e.contains("corrupt.npy") && e.contains("not a .npy file"), "{e}");
    let e = replay(format!("x={}", d.join("short.bin").display()));
    assert!(e.contains("12 bytes of raw data") && e.contains("20000"), "{e}");
    let e = replay(format!("nope={}", d.join("short.bin").display()));
    assert!(e.contains("no binding or region named \"nope\"") && e.contains("bindings: x, y"), "{e}");
    // clap's own refusal adds a usage hint after its line.
    let e =
        text(&recap(&[Path::new("replay").as_os_str(), saxpy.as_os_str(), "--input".as_ref(), "x".as_ref()]).stderr);
    assert!(e.lines().next().unwrap().contains("expected NAME=FILE"), "{e}");
    let e = one_line_error(&[Path::new("extract").as_os_str(), saxpy.as_os_str(), "--region".as_ref(), "x".as_ref()]);
    assert!(e.contains("-o FILE"), "{e}");
    let e = one_line_error(&[
        Path::new("trim").as_os_str(),
        saxpy.as_os_str(),
        "--ops".as_ref(),
        "0..5".as_ref(),
        "-o".as_ref(),
        d.join("t.recap").as_os_str(),
    ]);
    assert!(e.contains("op 5 does not exist"), "{e}");
}

#[test]
fn inspect_json_and_extract_say_what_the_archive_holds() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let matmul = imported("matmul_tiled", d);
    let lines: Vec<Value> = ok(&[Path::new("inspect").as_os_str(), matmul.as_os_str(), "--json".as_ref()])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(lines[0]["type"], "header");
    let count = |t: &str| lines.iter().filter(|l| l["type"] == t).count() as u64;
    for t in ["modules", "kernels", "regions", "bindings", "ops"] {
        assert_eq!(lines[0][t].as_u64().unwrap(), count(&t[..t.len() - 1]), "{t}");
    }
    let launch = lines.iter().find(|l| l["type"] == "op").unwrap();
    assert_eq!(launch["kind"], "launch");
    assert_eq!(launch["kernel"], "matmul_tiled");
    assert!(launch["pointers"].as_array().unwrap().len() >= 3, "{launch}");

    let ptx = d.join("k.ptx");
    ok(&[Path::new("extract").as_os_str(), matmul.as_os_str(), "--ptx".as_ref(), "-o".as_ref(), ptx.as_os_str()]);
    let want = std::fs::read_to_string(corpus_dir().join("nvcc/matmul_tiled/kernel.sm_90.ptx")).unwrap();
    assert_eq!(std::fs::read_to_string(&ptx).unwrap(), want);
    // By kernel name, to stdout.
    assert_eq!(
        ok(&[Path::new("extract").as_os_str(), matmul.as_os_str(), "--ptx".as_ref(), "matmul_tiled".as_ref()]),
        want
    );
}

/// The heat kernel with one constant changed: the stencil's centre weight -4 becomes -3.
pub(crate) fn perturbed_heat() -> String {
    let perturbed = crate::capture::HEAT_PTX.replacen("0fC0800000", "0fC0400000", 1);
    assert_ne!(perturbed, crate::capture::HEAT_PTX);
    perturbed
}

#[test]
fn compare_names_the_first_op_a_perturbed_kernel_changes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cpu = Device::cpu();
    let good = crate::capture::saved_workload(&cpu, crate::capture::HEAT_PTX, d, "good.recap");
    let bad = crate::capture::saved_workload(&cpu, &perturbed_heat(), d, "bad.recap");

    // The interpreter and native code agree on every op of the workload, loops and ifs included.
    let out = ok(&[Path::new("compare").as_os_str(), good.as_os_str(), "--devices".as_ref(), "interp,jit".as_ref()]);
    assert!(out.contains("interp and jit agree"), "{out}");

    // Against the perturbed capture: the first heat_diffuse launch is named, with its region.
    let args = [
        Path::new("compare").as_os_str(),
        good.as_os_str(),
        "--against".as_ref(),
        bad.as_os_str(),
        "--devices".as_ref(),
        "jit,interp".as_ref(),
        "--json".as_ref(),
    ];
    let out = recap(&args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: Value =
        serde_json::from_str(text(&out.stdout).trim()).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    let divergences = report["outcome"]["divergences"].as_array().unwrap();
    assert_eq!(divergences.len(), 1, "stops at the first: {report}");
    let first = &divergences[0];
    assert_eq!(first["label"], "launch heat_diffuse");
    assert_eq!(first["region"], "heat_v");
    assert_eq!(first["pass"], 1);
    let inspect = ok(&[Path::new("inspect").as_os_str(), good.as_os_str(), "--json".as_ref()]);
    let first_heat = inspect
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["kernel"] == "heat_diffuse")
        .unwrap_or_else(|| panic!("no launch of heat_diffuse in:\n{inspect}"));
    assert_eq!(first["op"], first_heat["id"], "the first heat launch, not a later op");
    let differing: u64 =
        first["check"]["stretches"].as_array().unwrap().iter().map(|s| s["differing"].as_u64().unwrap()).sum();
    assert!(differing > 0, "{first}");
    assert!(!first["histogram"].as_array().unwrap().is_empty());

    // --all goes on: every later op that the heat field reaches differs too.
    let mut all = args.to_vec();
    all.push("--all".as_ref());
    let out = recap(&all);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    assert!(report["outcome"]["divergences"].as_array().unwrap().len() > 3, "{report}");

    // The text report names op, kernel, region, element and both values.
    let out = recap(&args[..args.len() - 1]);
    let t = text(&out.stdout);
    assert!(
        t.contains("launch heat_diffuse") && t.contains("region heat_v differs") && t.contains("first at element"),
        "{t}"
    );

    // A GPU next to the CPU where one exists (the GPU machine runs this for real).
    match Device::cuda(0) {
        Ok(_) => {
            let out =
                ok(&[Path::new("compare").as_os_str(), good.as_os_str(), "--devices".as_ref(), "cpu,cuda".as_ref()]);
            assert!(out.contains("agree"), "{out}");
        }
        Err(e) => eprintln!("skipping the cpu,cuda comparison: no CUDA device ({e})"),
    }
}

#[test]
fn diff_reports_structure_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cpu = Device::cpu();
    let good = crate::capture::saved_workload(&cpu, crate::capture::HEAT_PTX, d, "good.recap");
    let bad = crate::capture::saved_workload(&cpu, &perturbed_heat(), d, "bad.recap");
    let same = recap(&[Path::new("diff").as_os_str(), good.as_os_str(), good.as_os_str()]);
    assert!(same.status.success(), "{}", text(&same.stdout));
    assert!(text(&same.stdout).contains("same work and the same data"));
    let out = recap(&[Path::new("diff").as_os_str(), good.as_os_str(), bad.as_os_str(), "--json".as_ref()]);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let module = lines.iter().find(|l| l["kind"] == "module").expect("the heat module differs");
    assert_eq!(module["key"], "heat");
    assert!(module["detail"]["ptx_blake3"].is_object(), "{module}");
    assert_eq!(lines.last().unwrap()["differences"], lines.len() as u64 - 1);

    // Data: a trimmed archive's initial state differs from the original's where ops ran before it.
    let trimmed = d.join("t.recap");
    ok(&[
        Path::new("trim").as_os_str(),
        good.as_os_str(),
        "--ops".as_ref(),
        "1".as_ref(),
        "-o".as_ref(),
        trimmed.as_os_str(),
    ]);
    let out = text(&recap(&[Path::new("diff").as_os_str(), good.as_os_str(), trimmed.as_os_str()]).stdout);
    assert!(out.contains("data y: initial"), "{out}");
    // The ops are aligned: op 1 is kept, every other op is only in A, and nothing reads as changed.
    assert!(out.contains("op 0: only in A: launch axpy") && out.contains("op 2: only in A"), "{out}");
    assert!(!out.lines().any(|l| l.starts_with("op ") && !l.contains(": only in A: ")), "{out}");
}

#[test]
fn trimmed_archives_stand_on_their_own_and_pass_their_check_on_every_engine() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = crate::capture::saved_workload(&Device::cpu(), crate::capture::HEAT_PTX, d, "good.recap");
    let ops: Vec<Value> = ok(&[Path::new("inspect").as_os_str(), good.as_os_str(), "--json".as_ref()])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["type"] == "op")
        .collect();
    let while_op = ops.iter().find(|o| o["kind"] == "while").expect("the workload's loop")["id"].as_u64().unwrap();
    let body_len = ops[while_op as usize]["body_len"].as_u64().unwrap();
    let last = ops.len() as u64 - 1;
    // From the loop (whole) to the end; the loop's body alone; one op in the middle.
    for (how, arg) in [
        ("--ops", format!("{while_op}..{last}")),
        ("--body", while_op.to_string()),
        ("--ops", format!("{}", while_op + body_len + 2)),
    ] {
        let out = d.join(format!("trim-{how}-{arg}.recap").replace("..", "_"));
        ok(&[
            Path::new("trim").as_os_str(),
            good.as_os_str(),
            how.as_ref(),
            arg.as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        ok(&[Path::new("validate").as_os_str(), out.as_os_str()]);
        for engine in ["interp", "jit"] {
            let r = ok(&[
                Path::new("replay").as_os_str(),
                out.as_os_str(),
                "--check".as_ref(),
                "--engine".as_ref(),
                engine.as_ref(),
            ]);
            assert!(r.contains("regions pass") && !r.contains("FAIL"), "{how} {arg} on {engine}: {r}");
        }
        // On a GPU too, where one exists (the GPU machine runs this for real).
        match Device::cuda(0) {
            Ok(_) => {
                let r = ok(&[
                    Path::new("replay").as_os_str(),
                    out.as_os_str(),
                    "--check".as_ref(),
                    "--device".as_ref(),
                    "cuda".as_ref(),
                ]);
                assert!(r.contains("regions pass") && !r.contains("FAIL"), "{how} {arg} on cuda: {r}");
            }
            Err(e) => eprintln!("skipping the trimmed archive's check on cuda: no CUDA device ({e})"),
        }
        let meta = ok(&[Path::new("inspect").as_os_str(), out.as_os_str()]);
        assert!(meta.contains("trimmed_ops"), "{meta}");
    }
    // A range that cuts a body in two is refused, naming the body.
    let e = one_line_error(&[
        Path::new("trim").as_os_str(),
        good.as_os_str(),
        "--ops".as_ref(),
        format!("{}..{}", while_op, while_op + 1).as_ref(),
        "-o".as_ref(),
        d.join("x.recap").as_os_str(),
    ]);
    assert!(e.contains("cross a while/if body") || e.contains("ended before"), "{e}");
}

/// GETs `path` from the host and writes the body to `file`; gives the status.
async fn download(client: &reqwest::Client, url: &str, file: &Path) -> u16 {
    let res = client.get(url).send().await.unwrap();
    let status = res.status().as_u16();
    std::fs::write(file, res.bytes().await.unwrap()).unwrap();
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_sessions_on_the_host_stream_where_two_sides_part_and_keep_both_as_npy() {
    use crate::host::{collect_stream, get_json, new_session, upload};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cpu = Device::cpu();
    let good = crate::capture::saved_workload(&cpu, crate::capture::HEAT_PTX, d, "good.recap");
    let bad = crate::capture::saved_workload(&cpu, &perturbed_heat(), d, "bad.recap");
    let server = recap_tests::server::Server::start(&d.join("data"), &[]);
    let client = reqwest::Client::new();
    let (_, good_info) = upload(&client, &server.url, "good", std::fs::read(&good).unwrap()).await;
    let (_, bad_info) = upload(&client, &server.url, "bad", std::fs::read(&bad).unwrap()).await;
    let (good_id, bad_id) = (good_info["id"].as_str().unwrap(), bad_info["id"].as_str().unwrap());
    let run = |body: Value| {
        let (client, server) = (&client, &server);
        async move {
            let created = new_session(client, &server.url, body).await;
            let id = created["id"].as_str().unwrap().to_string();
            let stream = collect_stream(&server.ws(&format!("/api/sessions/{id}/ws"))).await;
            assert_eq!(stream.last().unwrap()["type"], "finished", "{stream:#?}");
            (id, stream)
        }
    };
    let of_type = |stream: &[Value], t: &str| stream.iter().filter(|m| m["type"] == t).cloned().collect::<Vec<_>>();

    // The same archive on the interpreter and on native code: every op agrees.
    let (id, stream) =
        run(serde_json::json!({"archive": good_id, "kind": "compare", "device": "interp", "compare_with": "jit"}))
            .await;
    let judged: Vec<Value> =
        of_type(&stream, "compared").iter().flat_map(|m| m["ops"].as_array().unwrap().clone()).collect();
    let verdict = &of_type(&stream, "compare")[0]["verdict"];
    assert_eq!(
        (verdict["a"].as_str(), verdict["b"].as_str(), verdict["agree"].as_bool()),
        (Some("interp"), Some("jit"), Some(true)),
        "{verdict}"
    );
    assert_eq!(judged.len() as u64, verdict["ops"].as_u64().unwrap(), "every judged op is streamed");
    assert!(judged.iter().all(|j| j["agree"] == true));
    assert!(judged.iter().any(|j| j["pass"].as_u64().unwrap() > 1), "loop bodies are judged per pass");
    assert!(of_type(&stream, "parted").is_empty());
    let (_, info) = get_json(&client, &format!("{}/api/sessions/{id}", server.url)).await;
    assert_eq!(
        (info["kind"].as_str(), info["compare_with"].as_str(), info["passed"].as_bool()),
        (Some("compare"), Some("jit"), Some(true)),
        "{info}"
    );

    // Side b replays the perturbed capture: the first heat_diffuse launch is where they part.
    let body = serde_json::json!({"archive": good_id, "kind": "compare", "device": "jit", "compare_with": "interp", "compare_against": bad_id});
    let (id, stream) = run(body).await;
    let partings = of_type(&stream, "parted");
    assert_eq!(partings.len(), 1, "stops at the first: {partings:#?}");
    let p = &partings[0]["parting"];
    assert_eq!(
        (p["label"].as_str(), p["name"].as_str(), p["pass"].as_u64()),
        (Some("launch heat_diffuse"), Some("heat_v"), Some(1)),
        "{p}"
    );
    for side in ["a", "b", "difference"] {
        assert!(p[side]["mean"].as_array().is_some_and(|m| !m.is_empty()), "a plot of {side}: {p}");
    }
    let differing: Vec<Value> = of_type(&stream, "compared")
        .iter()
        .flat_map(|m| m["ops"].as_array().unwrap().clone())
        .filter(|j| j["agree"] == false)
        .collect();
    assert_eq!(differing.len(), 1);
    assert_eq!(differing[0]["op"], p["op"]);
    let verdict = &of_type(&stream, "compare")[0]["verdict"];
    assert_eq!((verdict["agree"].as_bool(), verdict["differing"].as_u64()), (Some(false), Some(1)), "{verdict}");
    let (_, info) = get_json(&client, &format!("{}/api/sessions/{id}", server.url)).await;
    assert_eq!(info["passed"], false, "{info}");

    // Both sides of the parting region download as .npy; numpy finds exactly the mismatches reported.
    let base = format!("{}/api/sessions/{id}/regions/heat_v", server.url);
    assert_eq!(download(&client, &format!("{base}?side=a"), &d.join("a.npy")).await, 200);
    assert_eq!(download(&client, &format!("{base}.npy?side=b"), &d.join("b.npy")).await, 200);
    let (status, err) = get_json(&client, &base).await;
    assert_eq!(status, 400, "a comparison keeps two sides: {err}");
    let counted = python(&format!(
        "import numpy as np; a = np.load({:?}); b = np.load({:?}); print(a.dtype, a.shape == b.shape, int((a != b).sum()))",
        d.join("a.npy").to_str().unwrap(),
        d.join("b.npy").to_str().unwrap()
    ));
    assert_eq!(counted.trim(), format!("float32 True {}", p["check"]["mismatches"]), "{p}");

    // A replay keeps its outputs; the archive page serves initial and expected contents.
    let matmul = imported("matmul_tiled", d);
    let (_, matmul_info) = upload(&client, &server.url, "matmul", std::fs::read(&matmul).unwrap()).await;
    let matmul_id = matmul_info["id"].as_str().unwrap();
    let (id, stream) = run(serde_json::json!({"archive": matmul_id, "device": "cpu"})).await;
    let inspected = ok(&[Path::new("inspect").as_os_str(), matmul.as_os_str(), "--json".as_ref()]);
    let with_expected: Vec<String> = inspected
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["type"] == "region" && l["expected"].as_bool() == Some(true))
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    let region = of_type(&stream, "region")
        .iter()
        .map(|m| m["summary"]["name"].as_str().unwrap().to_string())
        .find(|n| with_expected.contains(n))
        .unwrap_or_else(|| panic!("an output with an expected state among {with_expected:?}: {inspected}"));
    let region = region.as_str();
    assert_eq!(
        download(&client, &format!("{}/api/sessions/{id}/regions/{region}", server.url), &d.join("final.npy")).await,
        200
    );
    let archive_url = format!("{}/api/archives/{matmul_id}/regions/{region}", server.url);
    let status = download(&client, &format!("{archive_url}?contents=expected"), &d.join("expected.npy")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&std::fs::read(d.join("expected.npy")).unwrap()));
    assert_eq!(download(&client, &archive_url, &d.join("initial.npy")).await, 200);
    let extracted = d.join("extracted.npy");
    ok(&[
        Path::new("extract").as_os_str(),
        matmul.as_os_str(),
        "--region".as_ref(),
        region.as_ref(),
        "-o".as_ref(),
        extracted.as_os_str(),
    ]);
    let same = python(&format!(
        "import numpy as np; f, e, i, x = (np.load(p) for p in ({:?}, {:?}, {:?}, {:?})); print(np.array_equal(f, e), np.array_equal(i, x), f.size > 0 and bool(np.isfinite(f).all()))",
        d.join("final.npy").to_str().unwrap(),
        d.join("expected.npy").to_str().unwrap(),
        d.join("initial.npy").to_str().unwrap(),
        extracted.to_str().unwrap()
    ));
    assert_eq!(same.trim(), "True True True", "final = expected, initial = extract's");

    // Bad requests: one clear error each, nothing queued.
    let refused = |body: Value| {
        let client = &client;
        let url = format!("{}/api/sessions", server.url);
        async move {
            let res = client.post(url).json(&body).send().await.unwrap();
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.unwrap()["error"]["message"].as_str().unwrap_or_default().to_string())
        }
    };
    let (status, msg) = refused(serde_json::json!({"archive": good_id, "kind": "compare"})).await;
    assert!(status == 400 && msg.contains("compare_with"), "{status} {msg}");
    let (status, msg) = refused(serde_json::json!({"archive": good_id, "compare_with": "jit"})).await;
    assert!(status == 400 && msg.contains("kind"), "{status} {msg}");
    let (status, msg) =
        refused(serde_json::json!({"archive": good_id, "kind": "compare", "compare_with": "tpu"})).await;
    assert!(status == 400 && msg.contains("tpu"), "{status} {msg}");
    let (status, msg) =
        refused(serde_json::json!({"archive": good_id, "kind": "compare", "compare_with": "jit", "iterations": 5}))
            .await;
    assert!(status == 400 && msg.contains("one iteration"), "{status} {msg}");
    let (status, msg) =
        refused(serde_json::json!({"archive": good_id, "device": "cpu", "cuda_mode": "graph-pdl"})).await;
    assert!(status == 400 && msg.contains("CUDA device"), "{status} {msg}");
    let (status, msg) = refused(serde_json::json!({"archive": good_id, "device": "cpu", "cuda_mode": "graphs"})).await;
    assert!(status == 400 && msg.contains("graph-pdl"), "{status} {msg}");
    let other = crate::host::archive(64, 1);
    let (_, other) = upload(&client, &server.url, "other", other).await;
    let (status, msg) = refused(serde_json::json!({"archive": good_id, "kind": "compare", "compare_with": "jit", "compare_against": other["id"]})).await;
    assert!(status == 400 && msg.contains("cannot be compared op by op"), "{status} {msg}");
    let (status, err) = get_json(&client, &format!("{}/api/archives/{good_id}/regions/nope", server.url)).await;
    assert!(
        status == 404 && err["error"]["message"].as_str().unwrap().contains("heat_v"),
        "names the regions there are: {err}"
    );
    let (status, err) = get_json(&client, &format!("{archive_url}?contents=final")).await;
    assert_eq!(status, 400, "{err}");
}
