//! CPU replay benchmarks: launch dispatch and five corpus kernels at sizes that take a while.
//!
//! `cargo bench -p recap-shared --bench cpu_replay -- [dispatch|kernels|NAME...] [--threads N] [--engine jit|jit-scalar|interp]
//! [--dump DIR] [--size N]` prints one line per measurement. `triton_matmul_f16` and
//! `triton_matmul_f16_masked` (not among `kernels`) are Triton's fp16 `tl.dot` at M = N = K =
//! `--size` (default 1024), which `bench/cpu/triton_matmul.sh` runs against numpy's float32 matmul. The archives are built in memory from the
//! corpus PTX (`RECAP_CORPUS`, default `tests/corpus`), so what runs is exactly the replay
//! path (`CpuReplay::run_iteration`) over real nvcc output. `--dump DIR` writes each kernel's
//! output region to `DIR/NAME.bin` so the native build of the same CUDA C can be compared with it
//! (`bench/native/run.sh` does both).

use std::io::Cursor;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use shared::archive::*;
use shared::ptx;
use shared::ptx::Engine;
use shared::replay::{CpuReplay, NoObserver, ReplayOptions};

fn corpus() -> PathBuf {
    if let Some(dir) = std::env::var_os("RECAP_CORPUS") {
        return PathBuf::from(dir);
    }
    // cargo runs benches in the package folder; the default is relative to the repository root.
    let cwd = std::env::current_dir().unwrap();
    let root = cwd.ancestors().find(|d| d.join("native-host").is_dir() && d.join("shared").is_dir()).unwrap_or(&cwd);
    root.join("tests/corpus")
}

/// A kernel argument, in parameter order.
enum Arg {
    Region(usize),
    I32(i32),
    F32(f32),
    U64(u64),
}

struct Case {
    name: &'static str,
    ptx: String,
    entry: &'static str,
    regions: Vec<(&'static str, Vec<u8>)>,
    args: Vec<Arg>,
    grid: [u32; 3],
    block: [u32; 3],
    output: usize,
    size: String,
    /// Dynamic shared memory per block, in bytes.
    shared: u32,
}

/// Deterministic pseudo-random floats in [-1, 1) (xorshift; the native harness uses the same).
fn floats(n: usize, seed: u32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .flat_map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            ((s >> 8) as f32 / (1u32 << 23) as f32 - 1.0).to_le_bytes()
        })
        .collect()
}

fn build(case: &Case) -> Vec<u8> {
    let module = ptx::Module::parse(&case.ptx).expect("corpus PTX parses");
    let entry = module.entry(case.entry).expect("entry exists");
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module(case.name, &case.ptx).unwrap();
    let params: Vec<ParamDecl> = entry
        .params()
        .iter()
        .zip(&case.args)
        .map(|(p, a)| ParamDecl {
            name: p.name.clone(),
            offset: p.offset,
            size: p.size,
            align: p.align,
            kind: if matches!(a, Arg::Region(_)) { ParamKind::Pointer } else { ParamKind::Value },
        })
        .collect();
    let k = w.add_kernel(m, case.entry, params.clone()).unwrap();
    let ids: Vec<RegionId> = case
        .regions
        .iter()
        .map(|(name, bytes)| {
            let r = w.add_region(RegionDecl::new(*name, bytes.len() as u64, DType::F32)).unwrap();
            w.set_initial_bytes(r, bytes).unwrap();
            r
        })
        .collect();
    let mut bytes = vec![0u8; entry.params_size() as usize];
    let mut relocs = Vec::new();
    for (p, a) in params.iter().zip(&case.args) {
        let at = p.offset as usize;
        match *a {
            Arg::Region(i) => relocs.push(Reloc { offset: p.offset as u64, target: ids[i], target_offset: 0 }),
            Arg::I32(v) => bytes[at..at + 4].copy_from_slice(&v.to_le_bytes()),
            Arg::F32(v) => bytes[at..at + 4].copy_from_slice(&v.to_le_bytes()),
            Arg::U64(v) => bytes[at..at + 8].copy_from_slice(&v.to_le_bytes()),
        }
    }
    w.launch(LaunchDecl {
        kernel: k,
        grid: case.grid,
        block: case.block,
        shared_bytes: case.shared,
        params: bytes,
        relocs,
    })
    .unwrap();
    w.finish().unwrap().into_inner()
}

fn ptx_of(case: &str) -> String {
    let path = corpus().join("nvcc").join(case).join("kernel.sm_90.ptx");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Pseudo-random f16 values in [-1, 1): [`floats`] rounded to f16.
fn halves(n: usize, seed: u32) -> Vec<u8> {
    floats(n, seed)
        .chunks(4)
        .flat_map(|c| half::f16::from_f32(f32::from_le_bytes(c.try_into().unwrap())).to_le_bytes())
        .collect()
}

/// Triton's `tl.dot` matrix products (`tests/corpus/triton/gen_dot.py`: fp16 inputs, fp32
/// accumulation in `mma.sync`, fp16 output) as Triton compiles them for sm_80. M, N and K are
/// kernel arguments, so the corpus PTX runs at any size its specialisation allows.
/// - `triton_matmul_f16`: `dot_f16`, the kernel Triton's JIT builds for operands whose sizes are
///   multiples of 16: blocks of 128x128, K in steps of 32, 4 warps, 4 stages of `cp.async`.
/// - `triton_matmul_f16_masked`: `dot_f16_masked`, every load and store masked, fp16 elements
///   loaded one at a time: blocks of 64x32, K in steps of 32, 4 warps.
fn triton_matmul(name: &'static str, m: usize, n: usize, k: usize) -> Case {
    let (case, entry, block_m, block_n, shared) = match name {
        "triton_matmul_f16" => ("tr_dot_f16", "dot_f16", 128, 128, 65536),
        _ => ("tr_dot_f16_masked", "dot_f16_masked", 64, 32, 6144),
    };
    // The unmasked kernel reads whole blocks: another size would read past the operands.
    assert!(
        name != "triton_matmul_f16" || (m.is_multiple_of(block_m) && n.is_multiple_of(block_n) && k.is_multiple_of(32)),
        "{name} runs at sizes that are multiples of 128, not {m}"
    );
    let path = corpus().join("triton").join(case).join("kernel.sm_80.ptx");
    Case {
        name,
        ptx: std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        entry,
        regions: vec![("a", halves(m * k, 7)), ("b", halves(k * n, 8)), ("c", vec![0; m * n * 2])],
        args: vec![
            Arg::Region(0),
            Arg::Region(1),
            Arg::Region(2),
            Arg::I32(m as i32),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
            Arg::U64(0),
            Arg::U64(0),
        ],
        grid: [m.div_ceil(block_m) as u32, n.div_ceil(block_n) as u32, 1],
        block: [128, 1, 1],
        output: 2,
        size: format!("M=N=K={m}"),
        shared,
    }
}

/// The sizes here are the ones `bench/native/kernels.cpp` runs by default.
fn cases() -> Vec<Case> {
    let saxpy_n = 1 << 26;
    let (mm, mn, mk) = (1024, 1024, 1024);
    let bodies = 8192;
    let (mw, mh, miter) = (2048, 1536, 256);
    let (rows, cols) = (16384, 1024);
    vec![
        Case {
            name: "saxpy",
            ptx: ptx_of("saxpy"),
            entry: "saxpy",
            regions: vec![("x", floats(saxpy_n, 1)), ("y", floats(saxpy_n, 2))],
            args: vec![Arg::I32(saxpy_n as i32), Arg::F32(2.5), Arg::Region(0), Arg::Region(1)],
            grid: [(saxpy_n / 256) as u32, 1, 1],
            block: [256, 1, 1],
            output: 1,
            shared: 0,
            size: format!("n={saxpy_n}"),
        },
        Case {
            name: "matmul_tiled",
            ptx: ptx_of("matmul_tiled"),
            entry: "matmul_tiled",
            regions: vec![("A", floats(mm * mk, 3)), ("B", floats(mk * mn, 4)), ("C", vec![0; mm * mn * 4])],
            args: vec![
                Arg::Region(0),
                Arg::Region(1),
                Arg::Region(2),
                Arg::I32(mm as i32),
                Arg::I32(mn as i32),
                Arg::I32(mk as i32),
            ],
            grid: [(mn / 16) as u32, (mm / 16) as u32, 1],
            block: [16, 16, 1],
            output: 2,
            shared: 0,
            size: format!("M=N=K={mm}"),
        },
        Case {
            name: "nbody_accel",
            ptx: ptx_of("nbody_accel"),
            entry: "nbody_accel",
            regions: vec![
                ("bodies", floats(bodies * 4, 5)),
                ("ax", vec![0; bodies * 4]),
                ("ay", vec![0; bodies * 4]),
                ("az", vec![0; bodies * 4]),
            ],
            args: vec![
                Arg::Region(0),
                Arg::Region(1),
                Arg::Region(2),
                Arg::Region(3),
                Arg::I32(bodies as i32),
                Arg::F32(0.01),
            ],
            grid: [(bodies / 128) as u32, 1, 1],
            block: [128, 1, 1],
            output: 1,
            shared: 0,
            size: format!("n={bodies}"),
        },
        Case {
            name: "mandelbrot",
            ptx: ptx_of("mandelbrot"),
            entry: "mandelbrot",
            regions: vec![("iters", vec![0; mw * mh * 4])],
            args: vec![
                Arg::Region(0),
                Arg::I32(mw as i32),
                Arg::I32(mh as i32),
                Arg::I32(miter),
                Arg::F32(-2.0),
                Arg::F32(-1.0),
                Arg::F32(2.5 / mw as f32),
            ],
            grid: [(mw / 32) as u32, (mh / 8) as u32, 1],
            block: [32, 8, 1],
            output: 0,
            shared: 0,
            size: format!("{mw}x{mh}, max_iter={miter}"),
        },
        Case {
            name: "softmax_rows",
            ptx: ptx_of("softmax_rows"),
            entry: "softmax_rows",
            regions: vec![("x", floats(rows * cols, 6)), ("y", vec![0; rows * cols * 4])],
            args: vec![Arg::Region(0), Arg::Region(1), Arg::I32(cols as i32)],
            grid: [rows as u32, 1, 1],
            block: [32, 1, 1],
            output: 1,
            shared: 0,
            size: format!("{rows}x{cols}"),
        },
    ]
}

/// A kernel that adds 1 to `x[0]`, as nvcc emits it for `x[0] += 1.0f`.
const INC_PTX: &str = r#"
.version 8.0
.target sm_50
.address_size 64

.visible .entry inc(
	.param .u64 inc_param_0
)
{
	.reg .f32 	%f<3>;
	.reg .b64 	%rd<3>;

	ld.param.u64 	%rd1, [inc_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	ld.global.f32 	%f1, [%rd2];
	add.f32 	%f2, %f1, 0f3F800000;
	st.global.f32 	[%rd2], %f2;
	ret;
}
"#;

fn dispatch_archive(launches: usize) -> Vec<u8> {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("inc", INC_PTX).unwrap();
    let p = ParamDecl { name: "inc_param_0".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer };
    let k = w.add_kernel(m, "inc", vec![p]).unwrap();
    let x = w.add_region(RegionDecl::new("x", 4, DType::F32)).unwrap();
    for _ in 0..launches {
        w.launch(LaunchDecl {
            kernel: k,
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_bytes: 0,
            params: vec![0; 8],
            relocs: vec![Reloc { offset: 0, target: x, target_offset: 0 }],
        })
        .unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// CPU time of the whole process (all its threads): unlike wall time it does not count the time
/// other programs on a shared machine held the cores.
fn cpu_time() -> Duration {
    #[cfg(unix)]
    {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `t` is a valid timespec for the call to fill.
        if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0 {
            return Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
        }
    }
    Duration::ZERO
}

/// `RECAP_JIT_DUMP=DIR` writes the native code of every kernel compiled into `DIR`, as `recap`
/// does: `NAME.one.s`/`NAME.group.s` and `.bin`.
fn jit_dump() -> Option<ptx::JitDump> {
    let dir = PathBuf::from(std::env::var_os("RECAP_JIT_DUMP")?);
    Some(ptx::JitDump::new(move |name, code, listing| {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join(format!("{name}.bin")), code);
        let _ = std::fs::write(dir.join(format!("{name}.s")), listing);
    }))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bench_dispatch(threads: usize, engine: Engine) {
    let launches = 1000;
    let bytes = dispatch_archive(launches);
    let archive = Archive::open(&bytes).unwrap();
    let mut replay =
        CpuReplay::new(&archive, ReplayOptions { threads, engine, jit_dump: jit_dump(), ..Default::default() })
            .unwrap();
    for _ in 0..20 {
        replay.run_iteration(&mut NoObserver).unwrap();
    }
    let mut times = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    let cpu0 = cpu_time();
    while Instant::now() < deadline || times.len() < 50 {
        let t = Instant::now();
        replay.run_iteration(&mut NoObserver).unwrap();
        times.push(t.elapsed());
    }
    let cpu = cpu_time() - cpu0;
    let runs = times.len();
    let min = *times.iter().min().unwrap();
    let med = median(times);
    let x = f32::from_le_bytes(replay.read_region(0).unwrap().try_into().unwrap());
    println!(
        "dispatch threads={threads} engine={engine:?}: {launches} launches of a 1-thread kernel, {runs} replays: median {:.4} us/launch, min {:.4} us/launch, cpu {:.4} us/launch (mean) (x = {x})",
        med.as_secs_f64() * 1e6 / launches as f64,
        min.as_secs_f64() * 1e6 / launches as f64,
        cpu.as_secs_f64() * 1e6 / (runs * launches) as f64,
    );
}

fn bench_kernel(case: &Case, threads: usize, engine: Engine, dump: Option<&PathBuf>) {
    let bytes = build(case);
    let archive = Archive::open(&bytes).unwrap();
    let mut replay =
        CpuReplay::new(&archive, ReplayOptions { threads, engine, jit_dump: jit_dump(), ..Default::default() })
            .unwrap();
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    let mut instructions = 0;
    for i in 0..6 {
        replay.restore_initial().unwrap();
        let (t, c) = (Instant::now(), cpu_time());
        let stats = replay.run_iteration(&mut NoObserver).unwrap();
        let (e, ce) = (t.elapsed(), cpu_time() - c);
        instructions = stats.instructions;
        if i > 0 {
            // The first run warms caches and page tables (and compiles the kernel).
            times.push(e);
            cpu.push(ce);
        }
    }
    let out = replay.read_region(case.output as RegionId).unwrap();
    let sum: f64 = match case.name {
        "mandelbrot" => out.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64).sum(),
        "triton_matmul_f16" | "triton_matmul_f16_masked" => {
            out.chunks(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).sum()
        }
        _ => out.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).sum(),
    };
    if let Some(dir) = dump {
        std::fs::write(dir.join(format!("{}.bin", case.name)), &out).unwrap();
        // The inputs too, for a comparison that does not regenerate them.
        for (i, (name, bytes)) in case.regions.iter().enumerate() {
            if i != case.output {
                std::fs::write(dir.join(format!("{}.{name}.bin", case.name)), bytes).unwrap();
            }
        }
    }
    let med = median(times);
    let cpu = median(cpu);
    println!(
        "kernel {} ({}) threads={threads} engine={engine:?}: median {:.1} ms, cpu {:.1} ms, {:.2} ns per thread-instruction, {} thread-instructions, checksum {sum:.6e}",
        case.name,
        case.size,
        med.as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e3,
        med.as_secs_f64() * 1e9 / instructions as f64,
        instructions
    );
}

fn main() {
    let mut threads = 0usize;
    let mut dump = None;
    let mut engine = Engine::Jit;
    let mut size = 1024usize;
    let mut picks = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => threads = args.next().and_then(|v| v.parse().ok()).expect("--threads N"),
            "--engine" => {
                engine = match args.next().as_deref() {
                    Some("jit") => Engine::Jit,
                    Some("jit-scalar") => Engine::JitScalar,
                    Some("interp") => Engine::Interpreter,
                    _ => panic!("--engine jit|jit-scalar|interp"),
                }
            }
            "--dump" => dump = Some(PathBuf::from(args.next().expect("--dump DIR"))),
            "--size" => size = args.next().and_then(|v| v.parse().ok()).expect("--size N"),
            "--bench" => {}
            other => picks.push(other.to_string()),
        }
    }
    let wants = |name: &str| picks.is_empty() || picks.iter().any(|p| p == name);
    if wants("dispatch") {
        bench_dispatch(1, engine);
    }
    for name in ["triton_matmul_f16", "triton_matmul_f16_masked"] {
        if wants(name) {
            bench_kernel(&triton_matmul(name, size, size, size), threads, engine, dump.as_ref());
        }
    }
    let kernels = ["saxpy", "matmul_tiled", "nbody_accel", "mandelbrot", "softmax_rows"];
    if !kernels.iter().any(|k| wants(k)) && !wants("kernels") {
        return;
    }
    for case in cases() {
        if wants("kernels") || wants(case.name) {
            bench_kernel(&case, threads, engine, dump.as_ref());
        }
    }
}
