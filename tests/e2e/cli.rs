//! The `recap` binary: import every public corpus case, inspect and validate the archives, and check
//! that what landed in the archive is what the case folder holds.

use std::path::Path;
use std::process::{Command, Output};

use recap_tests::{corpus_cases, recap_bin};
use serde_json::Value;
use shared::archive::{Archive, Op, ParamKind, Tolerance};

fn recap(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd = Command::new(recap_bin());
    for a in args {
        cmd.arg(a);
    }
    cmd.output().expect("running recap")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_corpus_case_imports_inspects_and_validates() {
    let cases = corpus_cases();
    assert!(cases.len() >= 16, "expected the 16 public cases, found {}", cases.len());
    let dir = tempfile::tempdir().unwrap();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let spec: Value = serde_json::from_slice(&std::fs::read(case.join("case.json")).unwrap()).unwrap();
        let archs: Vec<&str> = spec["ptx"].as_object().unwrap().keys().map(String::as_str).collect();
        assert!(archs.contains(&"sm_90"), "{name} has sm_90 PTX");
        for arch in archs {
            let out = dir.path().join(format!("{name}.{arch}.recap"));
            let import = recap(&[&"import-case", case, &"--ptx", &arch, &"-o", &out]);
            assert!(import.status.success(), "import {name} {arch}: {}", text(&import.stderr));

            let validate = recap(&[&"validate", &out]);
            assert!(validate.status.success(), "validate {name}: {}", text(&validate.stderr));
            assert!(text(&validate.stdout).starts_with("ok: "), "{}", text(&validate.stdout));

            let inspect = recap(&[&"inspect", &out]);
            assert!(inspect.status.success(), "inspect {name}: {}", text(&inspect.stderr));
            let shown = text(&inspect.stdout);
            for launch in spec["launches"].as_array().unwrap() {
                assert!(shown.contains(&format!("launch {} grid", launch["entry"].as_str().unwrap())), "{shown}");
            }
            for b in spec["buffers"].as_array().unwrap() {
                assert!(shown.contains(&format!("] {}: ", b["name"].as_str().unwrap())), "{shown}");
            }

            let bytes = std::fs::read(&out).unwrap();
            check_against_case(case, &spec, arch, &Archive::open(&bytes).unwrap());
        }
    }
}

/// The archive holds the case's PTX, every buffer's bytes, the tolerance, and each launch's
/// parameters with every pointer as a relocation.
fn check_against_case(dir: &Path, spec: &Value, arch: &str, a: &Archive) {
    let name = spec["name"].as_str().unwrap();
    let ptx = std::fs::read_to_string(dir.join(spec["ptx"][arch].as_str().unwrap())).unwrap();
    assert_eq!(a.module(0).ptx_text().unwrap(), ptx);
    assert_eq!(a.meta_value("case"), Some(name));
    let buffers = spec["buffers"].as_array().unwrap();
    assert_eq!(a.region_count(), buffers.len());
    let tol = &spec["tolerance"];
    for (r, b) in a.regions().zip(buffers) {
        assert_eq!(r.name, b["name"].as_str().unwrap());
        assert_eq!(r.dtype.name(), b["dtype"].as_str().unwrap());
        assert_eq!(r.size, b["count"].as_u64().unwrap() * r.dtype.size() as u64);
        let initial = std::fs::read(dir.join(b["initial"].as_str().unwrap())).unwrap();
        let expected = std::fs::read(dir.join(b["expected"].as_str().unwrap())).unwrap();
        assert_eq!(r.initial.unwrap().decode().unwrap(), initial, "{name}/{}", r.name);
        assert_eq!(r.expected.unwrap().decode().unwrap(), expected, "{name}/{}", r.name);
        let want = if let Some(f) = tol.get("mismatch_frac") {
            Tolerance::MismatchFraction { max_fraction: f.as_f64().unwrap() }
        } else if let Some(rtol) = tol.get("rtol") {
            Tolerance::Close { rtol: rtol.as_f64().unwrap(), atol: tol["atol"].as_f64().unwrap() }
        } else {
            Tolerance::Exact
        };
        assert_eq!(r.tolerance, Some(want), "{name}/{}", r.name);
        assert!(a.binding(r.name).is_some_and(|bd| bd.region == r.id));
    }
    let launches = spec["launches"].as_array().unwrap();
    assert_eq!(a.op_count(), launches.len());
    for (id, l) in launches.iter().enumerate() {
        let Op::Launch(op) = a.op(id as u32) else { panic!("{name}: op {id} is not a launch") };
        let k = a.kernel(op.kernel);
        assert_eq!(k.name, l["entry"].as_str().unwrap());
        assert_eq!(op.grid.to_vec(), json_u32s(&l["grid"]));
        assert_eq!(op.block.to_vec(), json_u32s(&l["block"]));
        assert_eq!(op.shared_bytes as u64, l["dynamic_shared_bytes"].as_u64().unwrap_or(0));
        let params = l["params"].as_array().unwrap();
        assert_eq!(k.params.len(), params.len());
        let relocs: Vec<_> = a.relocs(op.relocs.clone()).collect();
        for (p, decl) in params.iter().zip(&k.params) {
            let bytes = &op.params[decl.offset as usize..(decl.offset + decl.size) as usize];
            match p["kind"].as_str().unwrap() {
                "buffer" => {
                    assert_eq!(decl.kind, ParamKind::Pointer, "{name}: {}", decl.name);
                    let target = a.region_by_name(p["name"].as_str().unwrap()).unwrap().id;
                    assert!(relocs.iter().any(|r| r.offset == decl.offset as u64 && r.target == target));
                    assert_eq!(bytes, [0; 8], "no raw address is stored");
                }
                "scalar" => {
                    let v = &p["value"];
                    let want = match p["type"].as_str().unwrap() {
                        "i32" => (v.as_i64().unwrap() as i32).to_le_bytes().to_vec(),
                        "u32" => (v.as_u64().unwrap() as u32).to_le_bytes().to_vec(),
                        "u64" => v.as_u64().unwrap().to_le_bytes().to_vec(),
                        "i64" => v.as_i64().unwrap().to_le_bytes().to_vec(),
                        "f32" => (v.as_f64().unwrap() as f32).to_le_bytes().to_vec(),
                        "f64" => v.as_f64().unwrap().to_le_bytes().to_vec(),
                        other => panic!("{name}: scalar type {other} not covered by this test"),
                    };
                    assert_eq!(bytes, want, "{name}: {}", decl.name);
                }
                "bytes" => {
                    let mut want: Vec<u8> = (0..p["hex"].as_str().unwrap().len() / 2)
                        .map(|i| u8::from_str_radix(&p["hex"].as_str().unwrap()[2 * i..2 * i + 2], 16).unwrap())
                        .collect();
                    for ptr in p["pointers"].as_array().into_iter().flatten() {
                        let off = ptr["offset"].as_u64().unwrap();
                        let target = a.region_by_name(ptr["buffer"].as_str().unwrap()).unwrap().id;
                        assert!(relocs.iter().any(|r| r.offset == decl.offset as u64 + off && r.target == target));
                        want[off as usize..off as usize + 8].fill(0);
                    }
                    assert_eq!(bytes, want, "{name}: {}", decl.name);
                }
                other => panic!("{name}: parameter kind {other}"),
            }
        }
    }
}

fn json_u32s(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn a_missing_ptx_architecture_names_the_file_and_field() {
    let case = corpus_cases().into_iter().find(|c| c.ends_with("triton/tr_add")).expect("triton/tr_add in the corpus");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.recap");
    let r = recap(&[&"import-case", &case, &"--ptx", &"sm_75", &"-o", &out]);
    assert!(!r.status.success());
    let err = text(&r.stderr);
    assert!(err.contains("case.json: ptx.sm_75: this case has no sm_75 PTX (it has sm_90)"), "{err}");
    assert!(!out.exists() && !dir.path().join("x.recap.partial").exists(), "nothing is left behind");
}

/// A case whose `ptx` map has other targets than sm_75 and sm_90 (here sm_80 and sm_90a, as
/// Triton's and nvcc's newer cases do): any key imports, the PTX is stored as it is (its `.target`
/// what it declares), the archive's `ptx` meta names the key, and it replays with `--check`.
#[test]
fn any_ptx_key_of_a_case_imports() {
    let src = corpus_cases().into_iter().find(|c| c.ends_with("nvcc/saxpy")).expect("nvcc/saxpy in the corpus");
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let sm90 = std::fs::read_to_string(dir.path().join("kernel.sm_90.ptx")).unwrap();
    let sm80 = sm90.replace(".target sm_90", ".target sm_80");
    let sm90a = sm90.replace(".target sm_90", ".target sm_90a");
    std::fs::write(dir.path().join("kernel.sm_80.ptx"), &sm80).unwrap();
    std::fs::write(dir.path().join("kernel.sm_90a.ptx"), &sm90a).unwrap();
    let case_json = dir.path().join("case.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&case_json).unwrap()).unwrap();
    spec["ptx"] = serde_json::json!({"sm_80": "kernel.sm_80.ptx", "sm_90a": "kernel.sm_90a.ptx"});
    std::fs::write(&case_json, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();

    for (arg, key, ptx) in [("sm_80", "sm_80", &sm80), ("80", "sm_80", &sm80), ("sm_90a", "sm_90a", &sm90a)] {
        let out = dir.path().join(format!("{arg}.recap"));
        let r = recap(&[&"import-case", &dir.path(), &"--ptx", &arg, &"-o", &out]);
        assert!(r.status.success(), "import --ptx {arg}: {}", text(&r.stderr));
        assert!(text(&r.stdout).contains(&format!("case saxpy ({key})")), "{}", text(&r.stdout));
        let bytes = std::fs::read(&out).unwrap();
        let a = Archive::open(&bytes).unwrap();
        assert_eq!(a.module(0).ptx_text().unwrap(), ptx.as_str(), "the PTX is kept as it is");
        assert_eq!(a.meta_value("ptx"), Some(key));
        let replay = recap(&[&"replay", &out, &"--device", &"cpu", &"--check"]);
        assert!(replay.status.success(), "replay --ptx {arg}: {}{}", text(&replay.stdout), text(&replay.stderr));
    }

    let out = dir.path().join("x.recap");
    let r = recap(&[&"import-case", &dir.path(), &"--ptx", &"sm_90", &"-o", &out]);
    let err = text(&r.stderr);
    assert!(
        !r.status.success() && err.contains("ptx.sm_90: this case has no sm_90 PTX (it has sm_80, sm_90a)"),
        "{err}"
    );
    let r = recap(&[&"import-case", &dir.path(), &"--ptx", &"ampere", &"-o", &out]);
    let err = text(&r.stderr);
    assert!(!r.status.success() && err.contains("unknown PTX architecture \"ampere\""), "{err}");
}

#[test]
fn a_broken_case_names_the_field() {
    let src = corpus_cases().into_iter().find(|c| c.ends_with("nvcc/saxpy")).expect("nvcc/saxpy in the corpus");
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let case_json = dir.path().join("case.json");
    let original = std::fs::read_to_string(&case_json).unwrap();
    let out = dir.path().join("x.recap");
    for (from, to, want) in [
        ("\"f32\"", "\"f31\"", "buffers[0].dtype: unknown element type \"f31\""),
        ("\"count\": 5000", "\"count\": 5001", "buffers[0].initial: "),
        ("\"name\": \"y\"\n", "\"name\": \"z\"\n", "launches[0].params[3].name: no buffer named \"z\""),
    ] {
        assert!(original.contains(from), "saxpy case.json has {from}");
        std::fs::write(&case_json, original.replacen(from, to, 1)).unwrap();
        let r = recap(&[&"import-case", &dir.path(), &"-o", &out]);
        assert!(!r.status.success());
        let err = text(&r.stderr);
        assert!(err.contains(&case_json.display().to_string()) && err.contains(want), "{err}");
    }
}

#[test]
fn validate_prints_one_line_naming_section_offset_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.recap");
    let golden = recap_tests::repo_root().join("tests/golden/all-features.recap");
    std::fs::copy(&golden, &good).unwrap();
    let ok = recap(&[&"validate", &good]);
    assert!(ok.status.success());
    assert_eq!(text(&ok.stdout).lines().count(), 1);

    let mut bytes = std::fs::read(&golden).unwrap();
    bytes.truncate(bytes.len() - 5);
    let bad = dir.path().join("bad.recap");
    std::fs::write(&bad, &bytes).unwrap();
    let r = recap(&[&"validate", &bad]);
    assert!(!r.status.success());
    let err = text(&r.stderr);
    assert_eq!(
        err,
        format!(
            "{}: header at byte 32: header says the file is {} bytes but it is {} (truncated or padded)\n",
            bad.display(),
            bytes.len() + 5,
            bytes.len()
        )
    );
    assert!(r.stdout.is_empty());

    let missing = recap(&[&"validate", &dir.path().join("nope.recap")]);
    assert!(!missing.status.success());
    assert_eq!(text(&missing.stderr).lines().count(), 1);
}

#[test]
fn inspect_shows_nested_bodies_indented() {
    let golden = recap_tests::repo_root().join("tests/golden/all-features.recap");
    let r = recap(&[&"inspect", &golden]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let shown = text(&r.stdout);
    assert!(shown.contains("\n     3  while u32 at flags+16 != 0 (at most 1000 iterations) { 6 op(s)\n"), "{shown}");
    assert!(shown.contains("\n       4  launch step grid 2x1x1 block 128x1x1 shared 256 B (param_0=&field, param_1={16 B: &flags}, param_2=1.0)\n"), "{shown}");
    assert!(shown.contains("\n         6  copy 64 B counts+0 -> tmp+64\n"), "{shown}");
    assert!(shown.contains("cubin sm_90"), "{shown}");
    assert!(shown.contains("pointers inside regions (1)\n  flags+0 -> counts+64"), "{shown}");
}

/// Damaged data is never reported as numbers: a replay, a check and `inspect` of an archive whose
/// blobs fail their checksum stop with the section, the offset and the reason.
#[test]
fn damaged_data_stops_replay_check_and_inspect_with_section_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let case = corpus_cases().into_iter().find(|c| c.ends_with("nvcc/saxpy")).expect("the saxpy case");
    let good = dir.path().join("good.recap");
    let import = recap(&[&"import-case", &case, &"-o", &good]);
    assert!(import.status.success(), "{}", text(&import.stderr));
    let replay = recap(&[&"replay", &good, &"--device", &"cpu", &"--check"]);
    assert!(replay.status.success(), "{}", text(&replay.stderr));

    let mut bytes = std::fs::read(&good).unwrap();
    let (off, len) = recap_tests::archive::section(&bytes, shared::archive::layout::SectionKind::Blobs);
    // A byte in the middle of the region data, the table sections and their checksums untouched:
    // `open` accepts it, as it leaves the data's checksum to whoever reads the data.
    bytes[off + len / 2] ^= 0x10;
    let bad = dir.path().join("bad.recap");
    std::fs::write(&bad, &bytes).unwrap();
    assert!(Archive::open(&bytes).is_ok());
    for args in [
        vec!["replay", "--device", "cpu", "--check"],
        vec!["replay", "--device", "cpu", "--engine", "interp"],
        vec!["inspect"],
        vec!["validate"],
    ] {
        let mut all: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&args[0], &bad];
        all.extend(args[1..].iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
        let r = recap(&all);
        let err = text(&r.stderr);
        assert!(!r.status.success(), "{args:?} succeeded on damaged data: {}", text(&r.stdout));
        assert!(err.contains("blobs") && err.contains("checksum mismatch"), "{args:?}: {err}");
        assert!(err.contains(&format!("byte {off}")), "{args:?} names the offset: {err}");
        assert!(!text(&r.stdout).contains("FAIL"), "{args:?} reported numbers: {}", text(&r.stdout));
    }
}

#[test]
fn a_folder_is_named_as_one_and_quiet_replays_print_only_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    for command in ["validate", "inspect", "replay"] {
        let out = recap(&[&command, &dir.path()]);
        assert!(!out.status.success());
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            said.contains("is a folder, not an archive file") && said.trim().lines().count() == 1,
            "{command}: {said}"
        );
    }
    let archive = dir.path().join("a.recap");
    let case = corpus_cases().into_iter().next().unwrap();
    assert!(recap(&[&"import-case", &case, &"-o", &archive]).status.success());
    let out = recap(&[&"replay", &archive, &"--iterations", &"12", &"--quiet", &"--check"]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(
        !said.contains("iteration 1:") && said.contains("12 iterations: median") && said.contains("regions pass"),
        "{said}"
    );
    // Without --quiet, a pipe gets every iteration.
    let said = text(&recap(&[&"replay", &archive, &"--iterations", &"12"]).stdout);
    assert_eq!(said.lines().filter(|l| l.starts_with("iteration ")).count(), 12, "{said}");
}

#[test]
fn the_examples_are_valid_archives_that_replay_and_pass_their_checks() {
    let dir = tempfile::tempdir().unwrap();
    let out = recap(&[&"examples", &dir.path()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 5, "{}", text(&out.stdout));
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        let archive = Archive::open(&bytes).unwrap();
        archive.validate().unwrap();
        assert!(archive.op_count() >= 2, "{}", file.display());
        let has_expected = archive.regions().any(|r| r.expected.is_some());
        let replay = recap(&[&"replay", file, &"--quiet", &if has_expected { "--check" } else { "--iterations=1" }]);
        assert!(replay.status.success(), "{}: {}{}", file.display(), text(&replay.stdout), text(&replay.stderr));
    }
    let loop_file = dir.path().join("while-countdown.recap");
    let shown = text(&recap(&[&"replay", &loop_file, &"--check"]).stdout);
    assert!(shown.contains("2 of 2 regions pass"), "{shown}");
}

#[test]
fn a_cases_shape_hint_makes_its_buffers_2d_and_a_wrong_one_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("laplace.recap");
    let case = recap_tests::corpus_dir().join("nvcc/laplace2d");
    let spec: Value = serde_json::from_slice(&std::fs::read(case.join("case.json")).unwrap()).unwrap();
    if spec["buffers"][0].get("shape").is_none() {
        println!("skipping: this corpus ({}) carries no shape hints", case.display());
        return;
    }
    let import = recap(&[&"import-case", &case, &"-o", &out]);
    assert!(import.status.success(), "{}", text(&import.stderr));
    let bytes = std::fs::read(&out).unwrap();
    let archive = Archive::open(&bytes).unwrap();
    let r = archive.region(archive.region_named("in").unwrap());
    assert_eq!(r.shape, vec![60, 70]);

    // The same case with a shape that does not hold the buffer's elements.
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    for entry in std::fs::read_dir(&case).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), bad.join(entry.file_name())).unwrap();
    }
    let mut spec = spec;
    spec["buffers"][0]["shape"] = serde_json::json!([61, 70]);
    std::fs::write(bad.join("case.json"), serde_json::to_vec(&spec).unwrap()).unwrap();
    let import = recap(&[&"import-case", &bad, &"-o", &dir.path().join("bad.recap")]);
    assert!(!import.status.success());
    let err = text(&import.stderr);
    assert!(err.contains("shape") && err.contains("[61, 70]") && err.contains("4200 elements"), "{err}");
}

/// `inspect` reads a launch's values as the kernel's `.entry` declares them: a `u32` is an integer
/// (1024, not the denormal float its bits make), an `f32` a float, an `s32` signed; the kernel list
/// names each parameter's declared type.
#[test]
fn inspect_shows_parameter_values_by_their_declared_type() {
    use shared::archive::*;
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
               .visible .entry k(.param .u64 x, .param .u32 n, .param .f32 a, .param .s32 d)\n{\nret;\n}\n";
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("m", ptx).unwrap();
    let layout = shared::ptx::signature::entry_params(ptx, "k").unwrap();
    let k = w.add_kernel(m, "k", layout.iter().enumerate().map(|(i, p)| p.decl(i == 0)).collect()).unwrap();
    let x = w.add_region(RegionDecl::new("x", 64, DType::F32)).unwrap();
    let mut params = vec![0u8; 20];
    params[8..12].copy_from_slice(&1024u32.to_le_bytes());
    params[12..16].copy_from_slice(&0.5f32.to_le_bytes());
    params[16..20].copy_from_slice(&(-7i32).to_le_bytes());
    w.launch(LaunchDecl {
        kernel: k,
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_bytes: 0,
        params,
        relocs: vec![Reloc { offset: 0, target: x, target_offset: 0 }],
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typed.recap");
    std::fs::write(&file, w.finish().unwrap().into_inner()).unwrap();
    let r = recap(&[&"inspect", &file]);
    let shown = text(&r.stdout);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(shown.contains("launch k grid 1x1x1 block 32x1x1 (x=&x, n=1024, a=0.5, d=-7)"), "{shown}");
    assert!(shown.contains("value   .u32   n\n"), "{shown}");
    let json = text(&recap(&[&"inspect", &file, &"--json"]).stdout);
    let kernel: Value =
        json.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|v| v["type"] == "kernel").unwrap();
    assert_eq!(kernel["param_types"], serde_json::json!(["u64", "u32", "f32", "s32"]));
}

/// `recap bench cuda` where it cannot measure a GPU says so in one line and sends the user to what
/// exists: every `--option` it names is one of `recap replay`'s, every file it names is in the
/// repository.
#[test]
fn bench_without_a_gpu_names_options_and_files_that_exist() {
    let root = recap_tests::repo_root();
    let mut said = vec![text(&recap(&[&"bench", &"cuda", &"--device", &"cpu"]).stderr)];
    if matches!(recap::cuda::Device::open(0), Err(recap::cuda::OpenError::NoDriver)) {
        let out = recap(&[&"bench", &"cuda"]);
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(err.contains("no CUDA driver found"), "{err}");
        said.push(err);
    } else {
        println!("a CUDA driver is present: only the --device cpu message is checked");
    }
    let replay_help = text(&recap(&[&"replay", &"--help"]).stdout);
    for err in said {
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("bench/cpu/dispatch.sh"), "{err}");
        for word in err.split(|c: char| c.is_whitespace() || "`(),;".contains(c)) {
            if let Some(option) = word.strip_prefix("--") {
                assert!(
                    replay_help.contains(&format!("--{option}")),
                    "`--{option}` of {err:?} is no option of recap replay"
                );
            }
            if word.contains('/') || word.ends_with(".md") {
                assert!(root.join(word).exists(), "{word} of {err:?} is not in the repository");
            }
        }
    }
}

/// The README's way onto the PATH: `cargo install --path native-host` installs `recap` alone, and
/// `recap capture` from such a binary, with no interposer beside it, says which file is missing and
/// the command that builds it, which the README shows too.
#[test]
fn an_installed_binary_without_the_interposer_says_how_to_build_it() {
    let root = recap_tests::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let build = "cargo build --release -p recap-intercept";
    for want in ["cargo install --path native-host", build, "librecap_intercept.so"] {
        assert!(readme.contains(want), "the README lacks `{want}`");
    }
    let manifest = std::fs::read_to_string(root.join("native-host/Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"recap\""), "native-host installs the recap binary");
    // The binary alone, as `cargo install` leaves it.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("recap");
    std::fs::copy(recap_bin(), &bin).unwrap();
    let out = Command::new(&bin)
        .args(["capture", "-o"])
        .arg(dir.path().join("c.recap"))
        .args(["--", "true"])
        .env_remove("RECAP_INTERCEPT_LIB")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let missing = dir.path().join("librecap_intercept.so");
    assert!(err.contains(&missing.display().to_string()) && err.contains(build), "{err}");
    assert!(!err.trim_end().ends_with('.'), "{err}");
}
