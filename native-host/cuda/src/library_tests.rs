//! The library kernels' PTX run on recap's CPU engines (the same PTX a GPU JIT-compiles) against
//! `shared::library`, byte for byte over every operand, scratch halves included; and the PTX is
//! what its source compiles to where NVRTC 12.0 is installed.

use shared::archive::{At, DType, LibraryOp};
use shared::ptx::{self, Engine, ExecOptions, LaunchDims, Memory, Module};

use super::*;

/// A small deterministic generator (xorshift64*), so a failure replays the same data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `n` elements of `dtype`: few distinct keys (runs and ties, which stability decides), both
/// signs, and for floats with `specials` zeros of both signs, infinities, NaNs of both signs and
/// any bits. Data that is summed has no NaNs: a GPU's float add gives the canonical NaN where the
/// CPU's keeps an operand's payload, so only sort keys may be NaNs where bytes must match.
fn elements(rng: &mut Rng, dtype: DType, n: usize, distinct: u64, specials: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let odds = if specials { 40 } else { 1 << 20 };
    for _ in 0..n {
        let pick = rng.below(distinct) as i64 - distinct as i64 / 2;
        match dtype {
            DType::F32 => {
                let v = match rng.below(odds) {
                    0 => f32::NAN,
                    1 => -f32::NAN,
                    2 => -0.0,
                    3 => f32::INFINITY,
                    4 => f32::NEG_INFINITY,
                    5 => f32::from_bits(rng.next() as u32),
                    _ => pick as f32 * 0.37 + (rng.below(1000) as f32) * 1e-4,
                };
                out.extend_from_slice(&v.to_le_bytes());
            }
            DType::F64 => {
                let v = match rng.below(odds) {
                    0 => f64::NAN,
                    1 => -0.0,
                    2 => f64::from_bits(rng.next()),
                    _ => pick as f64 * 0.37 + (rng.below(1000) as f64) * 1e-7,
                };
                out.extend_from_slice(&v.to_le_bytes());
            }
            DType::I64 | DType::U64 => out.extend_from_slice(
                &(pick.wrapping_mul(0x1_0000_0001) ^ (rng.next() as i64 & 0x3000_0000_0000)).to_le_bytes(),
            ),
            _ => {
                out.extend_from_slice(&((pick as i32).wrapping_mul(65_537) ^ (rng.below(4) as i32) << 30).to_le_bytes())
            }
        }
    }
    out
}

/// Runs `op` over `bufs` (one per operand, at region `i` offset 0) with the library kernel on
/// `engine`, and with `shared::library`; both must leave the same bytes.
fn same_as_cpu(op: LibraryOp, bufs: Vec<Vec<u8>>, engine: Engine) {
    let module = Module::parse(LIBRARY_MODULE).expect("library.ptx parses");
    let mut mem = Memory::new();
    let bases: Vec<u64> = bufs
        .iter()
        .map(|b| {
            let base = mem.add_region(b.len().max(1) as u64, 256).unwrap();
            mem.write(base, b).unwrap();
            base
        })
        .collect();
    let launch = launch_of(&op);
    let temp_keys = mem.add_region(launch.temp.0.max(1), 256).unwrap();
    let temp_values = mem.add_region(launch.temp.1.max(1), 256).unwrap();
    let (params, _) = launch.params(|a| match a {
        Arg::Operand(At { region, offset }) => bases[region as usize] + offset,
        Arg::TempKeys => temp_keys,
        Arg::TempValues => temp_values,
        Arg::U32(_) => unreachable!("not a pointer"),
    });
    let dims = LaunchDims { grid: [1, 1, 1], block: [THREADS, 1, 1], dynamic_shared: 0 };
    let opts = ExecOptions { engine, ..Default::default() };
    ptx::launch(&module, ENTRIES[launch.entry], &dims, &params, &mem, &opts)
        .unwrap_or_else(|e| panic!("{} on {engine:?}: {e}", op.name()));
    let mut want = bufs;
    shared::library::run(&op, &mut want, None).unwrap();
    for (i, (w, base)) in want.iter().zip(&bases).enumerate() {
        let mut got = vec![0u8; w.len()];
        mem.read(*base, &mut got).unwrap();
        if let Some(at) = got.iter().zip(w).position(|(g, w)| g != w) {
            panic!("{} on {engine:?}: operand {i} differs first at byte {at} of {}: {op:?}", op.name(), w.len());
        }
    }
}

fn at(region: u32) -> At {
    At { region, offset: 0 }
}

const ENGINES: [Engine; 2] = [Engine::Interpreter, Engine::Jit];

#[test]
fn radix_sorts_leave_both_halves_as_warp_does_for_every_key_type_and_bit_range() {
    let mut rng = Rng(0x5eed);
    // (key, count, begin, end): every key type, one and two 16-bit passes, bits that start
    // inside a pass, a count past one split tile (8192), and nothing to sort.
    let cases = [
        (DType::I32, 300, 0, 32),
        (DType::U32, 257, 0, 16),
        (DType::F32, 1000, 0, 32),
        (DType::F32, 9000, 0, 32),
        (DType::I64, 200, 0, 64),
        (DType::U64, 150, 8, 40),
        (DType::F64, 300, 0, 64),
        (DType::I32, 100, 4, 20),
        (DType::I32, 50, 7, 7),
    ];
    for (key, count, begin_bit, end_bit) in cases {
        for value_size in [4u32, 8] {
            let keys = elements(&mut rng, key, 2 * count, 64, true);
            let values: Vec<u8> = (0..2 * count * value_size as usize).map(|_| rng.next() as u8).collect();
            let op = LibraryOp::RadixSortPairs {
                keys: at(0),
                values: at(1),
                count: count as u32,
                key,
                value_size,
                begin_bit,
                end_bit,
            };
            let engines: &[Engine] = if count > 1000 { &[Engine::Jit] } else { &ENGINES };
            for &engine in engines {
                same_as_cpu(op, vec![keys.clone(), values.clone()], engine);
            }
        }
    }
}

#[test]
fn segmented_sorts_sort_each_segment_in_order_even_where_segments_overlap() {
    let mut rng = Rng(7);
    let count = 600usize;
    for key in [DType::I32, DType::F32] {
        let keys = elements(&mut rng, key, 2 * count, 32, true);
        let values: Vec<u8> = (0..2 * count * 4).map(|_| rng.next() as u8).collect();
        // Empty, whole, overlapping and adjacent segments.
        let segs: [(i32, i32); 6] = [(0, 0), (0, 100), (50, 250), (250, 600), (10, 11), (0, 600)];
        let starts: Vec<u8> = segs.iter().flat_map(|s| s.0.to_le_bytes()).collect();
        let ends: Vec<u8> = segs.iter().flat_map(|s| s.1.to_le_bytes()).collect();
        let op = LibraryOp::SegmentedSortPairs {
            keys: at(0),
            values: at(1),
            starts: at(2),
            ends: at(3),
            count: count as u32,
            segments: segs.len() as u32,
            key,
        };
        for engine in ENGINES {
            same_as_cpu(op, vec![keys.clone(), values.clone(), starts.clone(), ends.clone()], engine);
        }
    }
}

#[test]
fn a_segment_outside_the_keys_stops_the_launch_before_anything_is_sorted() {
    let mut rng = Rng(9);
    let keys = elements(&mut rng, DType::I32, 64, 16, true);
    let module = Module::parse(LIBRARY_MODULE).unwrap();
    let mut mem = Memory::new();
    let mut region = |bytes: &[u8]| {
        let base = mem.add_region(bytes.len() as u64, 256).unwrap();
        mem.write(base, bytes).unwrap();
        base
    };
    let k = region(&keys);
    let v = region(&[0u8; 256]);
    let starts = region(&[0i32, 10].iter().flat_map(|s| s.to_le_bytes()).collect::<Vec<u8>>());
    let ends = region(&[20i32, 33].iter().flat_map(|s| s.to_le_bytes()).collect::<Vec<u8>>());
    let tk = region(&[0u8; 128]);
    let tv = region(&[0u8; 128]);
    let op = LibraryOp::SegmentedSortPairs {
        keys: at(0),
        values: at(1),
        starts: at(2),
        ends: at(3),
        count: 32,
        segments: 2,
        key: DType::I32,
    };
    let bases = [k, v, starts, ends];
    let (params, _) = launch_of(&op).params(|a| match a {
        Arg::Operand(at) => bases[at.region as usize],
        Arg::TempKeys => tk,
        Arg::TempValues => tv,
        Arg::U32(_) => unreachable!(),
    });
    let dims = LaunchDims { grid: [1, 1, 1], block: [THREADS, 1, 1], dynamic_shared: 0 };
    let err = ptx::launch(&module, ENTRIES[1], &dims, &params, &mem, &ExecOptions::default()).unwrap_err();
    assert!(err.to_string().contains("trap"), "{err}");
    let mut after = vec![0u8; keys.len()];
    mem.read(k, &mut after).unwrap();
    assert_eq!(after, keys, "the first segment, which is valid, was not sorted either");
}

#[test]
fn scans_sums_and_inner_products_add_in_index_order_to_the_last_bit() {
    let mut rng = Rng(0xfeed);
    // Counts past one staged tile (2048), strided rows of several components.
    for (dtype, count, width) in [
        (DType::F32, 2100u32, 1u32),
        (DType::F32, 300, 3),
        (DType::F64, 2100, 2),
        (DType::I32, 2500, 1),
        (DType::U32, 100, 2),
        (DType::I64, 900, 1),
        (DType::U64, 64, 4),
    ] {
        let size = dtype.size() as u32;
        let (src_stride, dst_stride) = (size * (width + 1), size * width);
        let mut src = elements(&mut rng, dtype, (count * (width + 1)) as usize, 1 << 20, false);
        // An operand spans its last row's components only.
        src.truncate(((count - 1) * src_stride + width * size) as usize);
        let dst = vec![0xabu8; (count * dst_stride) as usize];
        for inclusive in [true, false] {
            let op = LibraryOp::Scan { src: at(0), dst: at(1), count, dtype, src_stride, dst_stride, width, inclusive };
            for engine in ENGINES {
                same_as_cpu(op, vec![src.clone(), dst.clone()], engine);
            }
        }
        if matches!(dtype, DType::F32 | DType::F64) {
            let sum = LibraryOp::Sum { src: at(0), dst: at(1), count, dtype, stride: src_stride, width };
            let inner = LibraryOp::Inner {
                a: at(0),
                b: at(1),
                dst: at(2),
                count,
                dtype,
                a_stride: src_stride,
                b_stride: dst_stride,
                width,
            };
            let b = elements(&mut rng, dtype, (count * width) as usize, 1 << 20, false);
            for engine in ENGINES {
                same_as_cpu(sum, vec![src.clone(), vec![0; (width * size) as usize]], engine);
                same_as_cpu(inner, vec![src.clone(), b.clone(), vec![0; size as usize]], engine);
            }
        }
    }
}

#[test]
fn run_length_encoding_counts_runs_across_staged_tiles() {
    let mut rng = Rng(3);
    for count in [1usize, 5, 4097] {
        // Runs of random lengths, one of them across the 2048-element tile boundary.
        let mut values = Vec::new();
        while values.len() < count {
            let v = rng.below(5) as i32 - 2;
            for _ in 0..1 + rng.below(if values.len() > 2000 { 90 } else { 6 }) {
                values.push(v);
            }
        }
        values.truncate(count);
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let n = count as u32;
        let op = LibraryOp::RunLengthEncode {
            values: at(0),
            run_values: at(1),
            run_lengths: at(2),
            run_count: at(3),
            count: n,
        };
        let fill = vec![0x5au8; count * 4];
        for engine in ENGINES {
            same_as_cpu(op, vec![bytes.clone(), fill.clone(), fill.clone(), vec![0; 4]], engine);
        }
    }
}

#[test]
fn the_checked_in_ptx_is_what_its_source_compiles_to() {
    // NVRTC 12.0 from PyPI in a virtual environment of the build tree (installed where missing
    // and PyPI is reachable); the generator compares and says what differs.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join("target/nvrtc12-venv");
    let python = venv.join("bin/python");
    let run = |cmd: &mut std::process::Command| cmd.status().is_ok_and(|s| s.success());
    let ready = python.is_file()
        || run(std::process::Command::new("python3").args(["-m", "venv"]).arg(&venv))
            && run(std::process::Command::new(&python).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "nvidia-cuda-nvrtc-cu12==12.0.76",
            ]));
    if !ready {
        eprintln!("skipped: NVRTC 12.0 (nvidia-cuda-nvrtc-cu12) could not be installed into {}", venv.display());
        return;
    }
    let out = std::process::Command::new(&python)
        .arg(root.join("native-host/cuda/kernels/generate.py"))
        .arg("--check")
        .output()
        .expect("running generate.py");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    assert!(said.contains("is what library.cu compiles to"), "{said}");
}
