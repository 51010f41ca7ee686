//! Every corpus PTX file parses; every corpus case runs from its `case.json` on both engines and
//! matches the bytes recorded on a GPU under the case's tolerance, and native code matches the
//! interpreter bit for bit.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::ptx::*;

fn corpus_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("RECAP_CORPUS") {
        Some(d) => PathBuf::from(d),
        None => {
            // Relative to the repository root (tests run in the crate folder, one level below it).
            let cwd = std::env::current_dir().ok()?;
            let root = cwd
                .ancestors()
                .find(|d| d.join("shared").is_dir() && d.join("native-host").is_dir())
                .unwrap_or(&cwd)
                .to_path_buf();
            root.join("tests/corpus")
        }
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipping: no corpus at {} (set RECAP_CORPUS)", dir.display());
        None
    }
}

fn cases(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for producer in ["nvcc", "triton", "warp"] {
        let Ok(rd) = std::fs::read_dir(dir.join(producer)) else {
            continue;
        };
        for e in rd.flatten() {
            if e.path().join("case.json").is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_corpus_ptx_parses() {
    let Some(dir) = corpus_dir() else { return };
    let mut n = 0;
    for case in cases(&dir) {
        for e in std::fs::read_dir(&case).unwrap().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "ptx") {
                let text = std::fs::read_to_string(&p).unwrap();
                let m = Module::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                assert!(!m.entries().is_empty(), "{}: no kernels", p.display());
                n += 1;
            }
        }
    }
    assert!(n >= 29, "only {n} PTX files found");
}

fn scalar_bytes(ty: &str, v: &Value) -> Vec<u8> {
    match ty {
        "f32" => (v.as_f64().unwrap() as f32).to_le_bytes().to_vec(),
        "f64" => v.as_f64().unwrap().to_le_bytes().to_vec(),
        "i32" | "s32" => (v.as_i64().unwrap() as i32).to_le_bytes().to_vec(),
        "u32" => (v.as_u64().unwrap() as u32).to_le_bytes().to_vec(),
        "i64" | "s64" => v.as_i64().unwrap().to_le_bytes().to_vec(),
        "u64" => v.as_u64().unwrap().to_le_bytes().to_vec(),
        t => panic!("scalar type {t}"),
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// What one engine made of a case: the final bytes of every buffer, and how many launches ran as
/// native code.
struct CaseRun {
    buffers: Vec<(String, Vec<u8>)>,
    native_launches: usize,
}

/// Runs a case with the PTX of one architecture on one engine and checks it against the GPU.
fn run_case(case: &Path, arch: &str, engine: Engine) -> Option<Result<CaseRun, String>> {
    let c: Value = serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).unwrap()).unwrap();
    let ptx_file = c["ptx"][arch].as_str()?;
    let text = std::fs::read_to_string(case.join(ptx_file)).unwrap();
    let module = Module::parse(&text).unwrap();
    let mut mem = Memory::new();
    let mut bufs = std::collections::HashMap::new();
    for b in c["buffers"].as_array().unwrap() {
        let name = b["name"].as_str().unwrap();
        let init = std::fs::read(case.join(b["initial"].as_str().unwrap())).unwrap();
        let base = mem.add_region(init.len() as u64, 256).unwrap();
        mem.write(base, &init).unwrap();
        bufs.insert(name.to_string(), base);
    }
    let mut native_launches = 0;
    for l in c["launches"].as_array().unwrap() {
        let entry = l["entry"].as_str().unwrap();
        let e = module.entry(entry).unwrap();
        let mut params = vec![0u8; e.params_size() as usize];
        for (p, info) in l["params"].as_array().unwrap().iter().zip(e.params()) {
            let bytes = match p["kind"].as_str().unwrap() {
                "buffer" => bufs[p["name"].as_str().unwrap()].to_le_bytes().to_vec(),
                "scalar" => scalar_bytes(p["type"].as_str().unwrap(), &p["value"]),
                "bytes" => {
                    let mut b = hex(p["hex"].as_str().unwrap());
                    for ptr in p["pointers"].as_array().into_iter().flatten() {
                        let off = ptr["offset"].as_u64().unwrap() as usize;
                        let addr = bufs[ptr["buffer"].as_str().unwrap()];
                        b[off..off + 8].copy_from_slice(&addr.to_le_bytes());
                    }
                    b
                }
                k => panic!("param kind {k}"),
            };
            let o = info.offset as usize;
            params[o..o + bytes.len()].copy_from_slice(&bytes);
        }
        let g = l["grid"].as_array().unwrap();
        let bl = l["block"].as_array().unwrap();
        let dims = LaunchDims {
            grid: [0, 1, 2].map(|i| g[i].as_u64().unwrap() as u32),
            block: [0, 1, 2].map(|i| bl[i].as_u64().unwrap() as u32),
            dynamic_shared: l["dynamic_shared_bytes"].as_u64().unwrap_or(0) as u32,
        };
        let opts = ExecOptions { engine, ..ExecOptions::default() };
        match launch(&module, entry, &dims, &params, &mem, &opts) {
            Ok(stats) => native_launches += stats.jit as usize,
            Err(e) => return Some(Err(format!("{}: {e}", case.display()))),
        }
    }
    let tol = &c["tolerance"];
    let mut buffers = Vec::new();
    for b in c["buffers"].as_array().unwrap() {
        let name = b["name"].as_str().unwrap();
        buffers.push((name.to_string(), mem.read_region(bufs[name]).unwrap()));
        let Some(exp_file) = b["expected"].as_str() else {
            continue;
        };
        let expected = std::fs::read(case.join(exp_file)).unwrap();
        let got = mem.read_region(bufs[name]).unwrap();
        if let Err(e) = compare(&got, &expected, b["dtype"].as_str().unwrap(), tol) {
            return Some(Err(format!("{} [{arch}] buffer {name}: {e}", case.display())));
        }
    }
    Some(Ok(CaseRun { buffers, native_launches }))
}

fn compare(got: &[u8], exp: &[u8], dtype: &str, tol: &Value) -> Result<(), String> {
    if got.len() != exp.len() {
        return Err(format!("size {} vs {}", got.len(), exp.len()));
    }
    if tol["exact"].as_bool() == Some(true) || !dtype.starts_with('f') {
        if let Some(i) = (0..got.len()).find(|&i| got[i] != exp[i]) {
            return Err(format!("byte {i} differs: {} vs {}", got[i], exp[i]));
        }
        return Ok(());
    }
    let rtol = tol["rtol"].as_f64().unwrap_or(0.0);
    let atol = tol["atol"].as_f64().unwrap_or(0.0);
    let frac = tol["mismatch_frac"].as_f64().unwrap_or(0.0);
    let vals = |b: &[u8]| -> Vec<f64> {
        match dtype {
            "f32" => b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            "f64" => b.chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            "f16" => b.chunks(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
            "bf16" => b.chunks(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
            _ => panic!("dtype {dtype}"),
        }
    };
    let (g, e) = (vals(got), vals(exp));
    let mut bad = 0;
    let mut first = None;
    for (i, (x, y)) in g.iter().zip(&e).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || (x - y).abs() <= atol + rtol * y.abs();
        if !ok {
            bad += 1;
            first.get_or_insert((i, *x, *y));
        }
    }
    if bad as f64 > frac * g.len() as f64 {
        let (i, x, y) = first.unwrap();
        return Err(format!("{bad} of {} elements differ, first at {i}: {x} vs {y}", g.len()));
    }
    Ok(())
}

#[test]
fn every_corpus_case_matches_the_gpu() {
    let Some(dir) = corpus_dir() else { return };
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut native = 0;
    for case in cases(&dir) {
        // Float atomics may add in another order on each run (the tolerance covers that).
        let text = std::fs::read_dir(&case)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "ptx"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .collect::<String>();
        let float_atomics = text.contains(".add.f32") && (text.contains("atom.") || text.contains("red."));
        for arch in ["sm_75", "sm_80", "sm_90"] {
            let interp = run_case(&case, arch, Engine::Interpreter);
            for engine in [Engine::Jit, Engine::JitScalar] {
                let jit = run_case(&case, arch, engine);
                match (&interp, jit) {
                    (Some(Ok(a)), Some(Ok(b))) => {
                        if engine == Engine::Jit {
                            ran += 1;
                            native += b.native_launches;
                        }
                        for ((name, x), (_, y)) in a.buffers.iter().zip(&b.buffers) {
                            if x != y && !float_atomics {
                                let i = (0..x.len()).find(|&i| x[i] != y[i]).unwrap_or(0);
                                failures.push(format!(
                                    "{} [{arch}] buffer {name}: {engine:?} differs from the interpreter at byte {i}",
                                    case.display()
                                ));
                            }
                        }
                    }
                    (Some(Err(e)), _) => failures.push(e.clone()),
                    (_, Some(Err(e))) => failures.push(e),
                    _ => {}
                }
            }
        }
    }
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    assert!(native >= 20, "only {native} launches ran as native code");
    #[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
    assert_eq!(native, 0);
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(ran >= 29, "only {ran} case runs");
}

/// Triton's matrix products for sm_80 (`mma.sync` fed by `ldmatrix` from shared memory, filled by
/// `cp.async` in the unmasked fp16 one; a flash-attention block with shuffles around its two
/// products) run as native code, match the GPU
/// under the case's tolerance and the interpreter bit for bit.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[test]
fn triton_sm80_matrix_products_run_as_native_code() {
    let Some(dir) = corpus_dir() else { return };
    for case in ["tr_dot_f16_masked", "tr_dot_f16", "tr_dot_bf16", "tr_dot_attention"] {
        let path = dir.join("triton").join(case);
        let text = std::fs::read_to_string(path.join("kernel.sm_80.ptx")).unwrap();
        let m = Module::parse(&text).unwrap();
        let entry = m.entries()[0].name.clone();
        assert_eq!(m.jit_support(&entry), Ok(()), "{case}");
        let interp = run_case(&path, "sm_80", Engine::Interpreter).unwrap().unwrap();
        for engine in [Engine::Jit, Engine::JitScalar] {
            let native = run_case(&path, "sm_80", engine).unwrap().unwrap();
            assert_eq!(native.native_launches, 1, "{case} {engine:?}: interpreted");
            assert!(interp.buffers == native.buffers, "{case} {engine:?}: differs from the interpreter");
        }
    }
}

/// The kernels whose threads do the same work on neighbouring data get code for groups of
/// threads in vector lanes (which `every_corpus_case_matches_the_gpu` then checks against the
/// interpreter); the others say why not.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[test]
fn tiled_and_elementwise_kernels_run_in_lanes() {
    let Some(dir) = corpus_dir() else { return };
    let lanes = |case: &str| {
        let text = std::fs::read_to_string(dir.join("nvcc").join(case).join("kernel.sm_90.ptx")).unwrap();
        Module::parse(&text).unwrap().lanes_support(case)
    };
    for case in ["matmul_tiled", "transpose_shared", "block_reduce_sum", "laplace2d", "vec_add_f64"] {
        assert_eq!(lanes(case), Ok(()), "{case}");
    }
    let why = lanes("warp_shuffle_sum").unwrap_err();
    assert!(why.to_string().starts_with("a shuffle (line "), "{why}");
}
