//! ptxas's contraction against an H200: the kernels of `tests/numerics/contraction/` (shapes of a
//! multiply feeding additions, and CUDA C whose PTX nvcc leaves unfused), run with
//! [`Module::set_contraction`] on every engine, give the bits the GPU gave for the same inputs;
//! run as their PTX reads, exactly those with a fused pair differ.

use super::*;

const N: usize = 256;
const SEED: u64 = 0x636F6E7472616374;
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/numerics/contraction/");

/// splitmix64's output for counter `x` (`run_probe.py`'s `mix`).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Buffers a, b, c, d as `run_probe.py` makes them: magnitudes in [2^-7, 2^7), random signs and
/// mantissas.
fn inputs(f64: bool) -> Vec<Vec<u8>> {
    (0..4u64)
        .map(|k| {
            let mut buf = Vec::new();
            for i in 0..N as u64 {
                let z = mix(SEED + k * N as u64 + i);
                if f64 {
                    let bits = (z >> 63) << 63 | (1016 + ((z >> 52) & 0x7FF) % 14) << 52 | (z & ((1 << 52) - 1));
                    buf.extend_from_slice(&bits.to_le_bytes());
                } else {
                    let bits = ((z >> 63) << 31 | (120 + (z >> 32) % 14) << 23 | (z & 0x7F_FFFF)) as u32;
                    buf.extend_from_slice(&bits.to_le_bytes());
                }
            }
            buf
        })
        .collect()
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(format!("{DIR}{name}")).unwrap_or_else(|e| panic!("{DIR}{name}: {e}"))
}

/// Runs every kernel of `ptx` (listed with its float type in `listing`) and checks it against
/// `recorded`, the H200's outputs one kernel after another.
fn check(ptx: &str, listing: &str, recorded: &[u8]) -> Outcome {
    let literal = Module::parse(ptx).unwrap();
    let mut fused = Module::parse(ptx).unwrap();
    fused.set_contraction(true);
    assert!(fused.contraction() && fused.has_contractions());
    let (mut differ, mut contracted, mut mismatches) = (Vec::new(), Vec::new(), Vec::new());
    let mut off = 0;
    for line in listing.lines() {
        let (name, ty) = line.split_once(' ').unwrap();
        let size = if ty == "f64" { 8 } else { 4 };
        let want = &recorded[off..off + 2 * N * size];
        off += 2 * N * size;
        let mut bufs = inputs(ty == "f64");
        bufs.push(vec![0; 2 * N * size]);
        let extra = (N as u32).to_le_bytes();
        let grid = [(N / 128) as u32, 1, 1];
        for engine in [Engine::Interpreter, Engine::Jit, Engine::JitScalar] {
            let opts = ExecOptions { engine, ..ExecOptions::default() };
            let out = run_module_with(&fused, name, grid, [128, 1, 1], &bufs, &extra, &opts).unwrap();
            let got = &out[4];
            if got != want {
                let i = (0..2 * N).find(|&i| got[i * size..(i + 1) * size] != want[i * size..(i + 1) * size]).unwrap();
                let hex = |b: &[u8]| b.iter().rev().map(|x| format!("{x:02x}")).collect::<String>();
                let (g, w) = (hex(&got[i * size..(i + 1) * size]), hex(&want[i * size..(i + 1) * size]));
                mismatches.push(format!("{name} on {engine:?}: element {i} is 0x{g}, the H200 gave 0x{w}"));
            }
        }
        let opts = ExecOptions { engine: Engine::Interpreter, ..ExecOptions::default() };
        let out = run_module_with(&literal, name, grid, [128, 1, 1], &bufs, &extra, &opts).unwrap();
        if out[4] != want {
            differ.push(name.to_string());
        }
        let e = fused.entry(name).unwrap();
        if !fused.funcs[e.func as usize].contraction.is_empty() {
            contracted.push(name.to_string());
        }
    }
    assert_eq!(off, recorded.len(), "the record holds more than the listed kernels");
    Outcome { differ, contracted, mismatches }
}

struct Outcome {
    /// Kernels whose literal run differs from the H200.
    differ: Vec<String>,
    /// Kernels with a contraction.
    contracted: Vec<String>,
    /// Where a contracted run differs from the H200: kernel, engine, first element.
    mismatches: Vec<String>,
}

#[test]
fn probe_shapes_match_the_h200() {
    let o = check(
        &String::from_utf8(read("probe.ptx")).unwrap(),
        &String::from_utf8(read("kernels.txt")).unwrap(),
        &read("h200_probe.bin"),
    );
    // The one shape the model leaves apart: ptxas unrolls the loop of constant trip count below
    // the multiply, after which they share a block; the model does not unroll loops.
    let unrolled = |m: &String| m.starts_with("mul_before_loop ");
    assert!(o.mismatches.iter().all(unrolled), "{:#?}", o.mismatches);
    assert_eq!(o.mismatches.len(), 3, "{:#?}", o.mismatches);
    let differ: Vec<&String> = o.differ.iter().filter(|k| *k != "mul_before_loop").collect();
    assert_eq!(differ, o.contracted.iter().collect::<Vec<_>>(), "the kernels whose PTX read literally differs");
    for k in ["add_mul", "sub_x_mul", "mul_two_adds", "complex_mul", "add_mul_f64", "add_mul_f16", "source_redefined"] {
        assert!(o.differ.iter().any(|d| d == k), "{k} should differ when read literally");
    }
}

#[test]
fn nvcc_output_matches_the_h200() {
    let o = check(
        &String::from_utf8(read("nvcc_probe.ptx")).unwrap(),
        &String::from_utf8(read("nvcc_kernels.txt")).unwrap(),
        &read("h200_nvcc.bin"),
    );
    assert!(o.mismatches.is_empty(), "{:#?}", o.mismatches);
    assert_eq!(o.differ, o.contracted);
    assert!(o.differ.iter().any(|d| d == "nvcc_butterfly"), "{:?}", o.differ);
}
