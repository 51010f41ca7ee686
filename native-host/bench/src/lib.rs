//! `recap bench cuda`: what recap's CUDA replay costs, measured the way `bench/graph_floor.cu`
//! measures CUDA itself, so each figure can sit beside its floor; and the archives it replays
//! (chains, DAGs, loops, the heat step, a multi-device halo exchange), which the GPU tests use
//! too. [`sample_kernels`] is the hand-written PTX they are built from.
//!
//! Every workload is a real archive built in memory and replayed through [`CudaReplay`], the same
//! path the CLI and the host take. Times are medians over repeated replays after warm-up.

// Errors carry the driver's own words and the JIT log: large, but only on the cold path.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shared::archive::*;

use recap_cuda::driver::{Code, Func};
use recap_cuda::{call, sys};
use recap_cuda::{CudaError, CudaReplay, Device, Mode, Pdl, ReplayOptions};

pub mod pdl;
pub mod sample_kernels;
use sample_kernels::SampleKernels;

const ELEMS: u32 = 256;

struct Builder {
    w: ArchiveWriter<Cursor<Vec<u8>>>,
    k: SampleKernels,
}

impl Builder {
    fn new() -> Self {
        let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).expect("in-memory writer");
        let k = SampleKernels::add(&mut w, "bench").expect("sample kernels");
        Builder { w, k }
    }

    fn region(&mut self, name: &str, bytes: u64) -> RegionId {
        self.w.add_region(RegionDecl::new(name, bytes, DType::F32)).expect("region")
    }

    /// `x[i] += 1` over `blocks` blocks of 256 threads.
    fn inc(&mut self, x: RegionId, blocks: u32) {
        let mut params = vec![0u8; 12];
        params[8..12].copy_from_slice(&(ELEMS * blocks).to_le_bytes());
        let relocs = vec![Reloc { offset: 0, target: x, target_offset: 0 }];
        self.w
            .launch(LaunchDecl {
                kernel: self.k.inc,
                grid: [blocks, 1, 1],
                block: [ELEMS, 1, 1],
                shared_bytes: 0,
                params,
                relocs,
            })
            .expect("launch");
    }

    fn spin(&mut self, x: RegionId, ns: u64) {
        let mut params = vec![0u8; 16];
        params[8..16].copy_from_slice(&ns.to_le_bytes());
        let relocs = vec![Reloc { offset: 0, target: x, target_offset: 0 }];
        self.w
            .launch(LaunchDecl {
                kernel: self.k.stamp_spin,
                grid: [1, 1, 1],
                block: [32, 1, 1],
                shared_bytes: 0,
                params,
                relocs,
            })
            .expect("launch");
    }

    fn finish(self) -> Vec<u8> {
        self.w.finish().expect("finish").into_inner()
    }
}

/// The heat-step example's graph (`examples/01-heat-step.rs`): `steps` times diffuse (a 2-D
/// stencil through a `Field` struct by value), add a source, cool, and copy the result back, on a
/// 96 x 64 grid: four ops a step, three of them kernels.
pub fn heat_archive(steps: usize) -> Vec<u8> {
    const PTX: &str = include_str!("../../recap/examples/kernels/heat.ptx");
    const NX: u32 = 96;
    const NY: u32 = 64;
    let n = NX * NY;
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).expect("in-memory writer");
    let module = w.add_module("heat", PTX).expect("module");
    let kernel = |w: &mut ArchiveWriter<Cursor<Vec<u8>>>, name: &str| {
        let layout = shared::ptx::signature::entry_params(PTX, name).expect("the example's PTX declares its entries");
        let decls = layout.iter().map(|p| p.decl(false)).collect();
        (w.add_kernel(module, name, decls).expect("kernel"), layout)
    };
    let (diffuse, dl) = kernel(&mut w, "heat_diffuse");
    let (source_k, sl) = kernel(&mut w, "heat_add_source");
    let (cool, cl) = kernel(&mut w, "heat_cool");
    let grid = |name: &str, w: &mut ArchiveWriter<Cursor<Vec<u8>>>| {
        let r = w
            .add_region(RegionDecl {
                shape: vec![NY as u64, NX as u64],
                ..RegionDecl::new(name, n as u64 * 4, DType::F32)
            })
            .expect("region");
        let values: Vec<u8> = (0..n).flat_map(|i| ((i % 97) as f32).to_le_bytes()).collect();
        w.set_initial_bytes(r, &values).expect("initial");
        r
    };
    let (u, v, src) = (grid("u", &mut w), grid("v", &mut w), grid("source", &mut w));
    let params = |layout: &[shared::ptx::signature::EntryParam]| {
        vec![0u8; layout.last().map_or(0, |p| (p.offset + p.size) as usize)]
    };
    let put = |bytes: &mut Vec<u8>, at: u32, value: &[u8]| {
        bytes[at as usize..at as usize + value.len()].copy_from_slice(value)
    };
    for _ in 0..steps {
        // Field { float* data; int nx; int ny } by value, twice, then alpha.
        let mut p = params(&dl);
        for f in &dl[..2] {
            put(&mut p, f.offset + 8, &NX.to_le_bytes());
            put(&mut p, f.offset + 12, &NY.to_le_bytes());
        }
        put(&mut p, dl[2].offset, &0.2f32.to_le_bytes());
        let relocs = vec![
            Reloc { offset: dl[0].offset as u64, target: u, target_offset: 0 },
            Reloc { offset: dl[1].offset as u64, target: v, target_offset: 0 },
        ];
        w.launch(LaunchDecl {
            kernel: diffuse,
            grid: [NX.div_ceil(16), NY.div_ceil(16), 1],
            block: [16, 16, 1],
            shared_bytes: 0,
            params: p,
            relocs,
        })
        .expect("launch");
        let mut p = params(&sl);
        put(&mut p, sl[2].offset, &0.05f32.to_le_bytes());
        put(&mut p, sl[3].offset, &n.to_le_bytes());
        let relocs = vec![
            Reloc { offset: sl[0].offset as u64, target: v, target_offset: 0 },
            Reloc { offset: sl[1].offset as u64, target: src, target_offset: 0 },
        ];
        w.launch(LaunchDecl {
            kernel: source_k,
            grid: [n.div_ceil(256), 1, 1],
            block: [256, 1, 1],
            shared_bytes: 0,
            params: p,
            relocs,
        })
        .expect("launch");
        let mut p = params(&cl);
        put(&mut p, cl[1].offset, &10.0f32.to_le_bytes());
        put(&mut p, cl[2].offset, &0.002f32.to_le_bytes());
        put(&mut p, cl[3].offset, &n.to_le_bytes());
        let relocs = vec![Reloc { offset: cl[0].offset as u64, target: v, target_offset: 0 }];
        w.launch(LaunchDecl {
            kernel: cool,
            grid: [n.div_ceil(256), 1, 1],
            block: [256, 1, 1],
            shared_bytes: 0,
            params: p,
            relocs,
        })
        .expect("launch");
        w.copy(CopyOp { src: v, src_offset: 0, dst: u, dst_offset: 0, len: n as u64 * 4 }).expect("copy");
    }
    w.finish().expect("finish").into_inner()
}

/// Heat diffusion on an `nx` x `ny` grid (the heat example's `heat_diffuse`), `steps` double
/// sweeps (`u -> v`, then `v -> u`), with the rows split into `devices` bands, one per logical
/// device. Each band holds its rows plus a halo row at every inner edge; after each sweep every
/// device signals, and each neighbour waits for that signal and copies the edge row into its
/// halo: a copy between devices. With one device it is the plain one-device archive of the
/// same work (no `devices` section).
///
/// Every cell is computed from the same neighbours in the same order whichever band holds it, so
/// all splits give the same bits. With `expected`, the final `u` of every band is the archive's
/// expected state (exact), taken from a CPU replay of the one-device archive.
pub fn halo_archive(nx: u32, ny: u32, steps: usize, devices: u32, expected: bool) -> Vec<u8> {
    const PTX: &str = include_str!("../../recap/examples/kernels/heat.ptx");
    assert!(devices >= 1 && ny >= 3 * devices, "each band needs rows of its own");
    let layout =
        shared::ptx::signature::entry_params(PTX, "heat_diffuse").expect("the example's PTX declares heat_diffuse");
    let initial: Vec<f32> = (0..nx * ny)
        .map(|i| {
            let (x, y) = (i % nx, i / nx);
            let hot = x.abs_diff(nx / 3) < nx / 8 && y.abs_diff(ny / 2) < ny / 6;
            if hot {
                100.0
            } else {
                10.0 + (i % 7) as f32
            }
        })
        .collect();
    let want = expected.then(|| {
        let one = halo_archive(nx, ny, steps, 1, false);
        let archive = Archive::open(&one).expect("just written");
        let mut cpu =
            shared::replay::CpuReplay::new(&archive, Default::default()).expect("the heat kernel runs on the CPU");
        cpu.run_iteration(&mut shared::replay::NoObserver).expect("the heat steps run on the CPU");
        cpu.read_region(archive.region_named("u").expect("named u")).expect("u")
    });

    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).expect("in-memory writer");
    if devices > 1 {
        for d in 0..devices {
            w.add_device(&DeviceDecl { name: format!("gpu{d}"), sm: 0 }).expect("device");
        }
    }
    let module = w.add_module("heat", PTX).expect("module");
    let diffuse = w.add_kernel(module, "heat_diffuse", layout.iter().map(|p| p.decl(false)).collect()).expect("kernel");
    let row = nx as u64 * 4;
    // Per band: its first and last real rows, and its first and last stored rows (with halos).
    let bands: Vec<(u32, u32, u32, u32)> = (0..devices)
        .map(|b| {
            let (r0, r1) = (ny * b / devices, ny * (b + 1) / devices);
            (r0, r1, r0 - (b > 0) as u32, r1 + (b + 1 < devices) as u32)
        })
        .collect();
    let mut fields = Vec::new();
    for (b, &(_, _, s0, s1)) in bands.iter().enumerate() {
        let rows = (s1 - s0) as u64;
        let suffix = if devices > 1 { b.to_string() } else { String::new() };
        let decl = |name: &str| RegionDecl {
            shape: vec![rows, nx as u64],
            ..RegionDecl::new(format!("{name}{suffix}"), rows * row, DType::F32).on(b as u32)
        };
        let u = w.add_region(decl("u")).expect("region");
        let v = w.add_region(decl("v")).expect("region");
        let bytes: Vec<u8> =
            initial[(s0 * nx) as usize..(s1 * nx) as usize].iter().flat_map(|x| x.to_le_bytes()).collect();
        w.set_initial_bytes(u, &bytes).expect("initial");
        w.set_initial_bytes(v, &bytes).expect("initial");
        if let Some(full) = &want {
            w.set_expected_bytes(u, &full[(s0 as u64 * row) as usize..(s1 as u64 * row) as usize], Tolerance::Exact)
                .expect("expected");
        }
        fields.push((u, v, s1 - s0));
    }
    let field = |p: &mut Vec<u8>, at: u32, rows: u32| {
        p[at as usize + 8..at as usize + 12].copy_from_slice(&nx.to_le_bytes());
        p[at as usize + 12..at as usize + 16].copy_from_slice(&rows.to_le_bytes());
    };
    let mut event = 0;
    for sweep in 0..steps * 2 {
        let forward = sweep % 2 == 0;
        for (b, &(u, v, rows)) in fields.iter().enumerate() {
            let (from, to) = if forward { (u, v) } else { (v, u) };
            w.set_device(b as u32).expect("device");
            let mut p = vec![0u8; layout.last().map_or(0, |l| (l.offset + l.size) as usize)];
            field(&mut p, layout[0].offset, rows);
            field(&mut p, layout[1].offset, rows);
            p[layout[2].offset as usize..layout[2].offset as usize + 4].copy_from_slice(&0.2f32.to_le_bytes());
            let relocs = vec![
                Reloc { offset: layout[0].offset as u64, target: from, target_offset: 0 },
                Reloc { offset: layout[1].offset as u64, target: to, target_offset: 0 },
            ];
            w.launch(LaunchDecl {
                kernel: diffuse,
                grid: [nx.div_ceil(32), rows.div_ceil(8), 1],
                block: [32, 8, 1],
                shared_bytes: 0,
                params: p,
                relocs,
            })
            .expect("launch");
            if devices > 1 {
                w.signal(event + b as u32).expect("signal");
            }
        }
        // Halo exchange on the fields just written, each copy issued by the device it fills.
        for b in 0..devices as usize {
            let (_, _, s0, s1) = bands[b];
            let out = |i: usize| if forward { fields[i].1 } else { fields[i].0 };
            w.set_device(b as u32).expect("device");
            let pull = |w: &mut ArchiveWriter<Cursor<Vec<u8>>>, n: usize, src_row: u32, dst_row: u32| {
                w.wait(event + n as u32).expect("wait");
                let src = CopyOp {
                    src: out(n),
                    src_offset: (src_row - bands[n].2) as u64 * row,
                    dst: out(b),
                    dst_offset: (dst_row - s0) as u64 * row,
                    len: row,
                };
                w.copy(src).expect("copy");
            };
            if b > 0 {
                pull(&mut w, b - 1, s0, s0);
            }
            if b + 1 < devices as usize {
                pull(&mut w, b + 1, s1 - 1, s1 - 1);
            }
        }
        event += devices;
    }
    let names: Vec<RegionId> = fields.iter().map(|f| f.0).collect();
    for (b, u) in names.into_iter().enumerate() {
        let name = if devices > 1 { format!("u{b}") } else { "u".to_string() };
        w.add_binding(&name, u, Direction::InOut).expect("binding");
    }
    w.set_meta("producer", "recap halo_archive");
    w.finish().expect("finish").into_inner()
}

/// `n` launches of the 256-thread `x[i] += 1` kernel on one buffer: a chain by data hazards.
pub fn chain_archive(n: usize) -> Vec<u8> {
    wide_chain_archive(n, 1)
}

/// [`chain_archive`] with `blocks` blocks per launch, over a buffer of `blocks` x 256 floats.
pub fn wide_chain_archive(n: usize, blocks: u32) -> Vec<u8> {
    let mut b = Builder::new();
    let x = b.region("x", ELEMS as u64 * 4 * u64::from(blocks));
    for _ in 0..n {
        b.inc(x, blocks);
    }
    b.finish()
}

/// `chains` independent chains of `len` kernels each, one buffer per chain, listed chain after
/// chain. `spin_ns` 0 uses the tiny `inc` kernel, otherwise a kernel that runs that long.
pub fn chains_archive(chains: usize, len: usize, spin_ns: u64) -> Vec<u8> {
    let mut b = Builder::new();
    let xs: Vec<RegionId> = (0..chains).map(|i| b.region(&format!("x{i}"), ELEMS as u64 * 4)).collect();
    for &x in &xs {
        for _ in 0..len {
            if spin_ns == 0 {
                b.inc(x, 1)
            } else {
                b.spin(x, spin_ns)
            }
        }
    }
    b.finish()
}

/// [`while_archive`] with the counter starting at `passes`: the loop runs its body that often,
/// and the archive expects the counter at 0 and the accumulator at `passes`.
pub fn countdown_archive(passes: u32) -> Vec<u8> {
    let mut b = Builder::new();
    let counter = b.w.add_region(RegionDecl::new("counter", 4, DType::U32)).expect("region");
    b.w.set_initial_bytes(counter, &passes.to_le_bytes()).expect("initial");
    b.w.set_expected_bytes(counter, &0u32.to_le_bytes(), Tolerance::Exact).expect("expected");
    let acc = b.w.add_region(RegionDecl::new("acc", 4, DType::U32)).expect("region");
    b.w.set_expected_bytes(acc, &passes.to_le_bytes(), Tolerance::Exact).expect("expected");
    b.w.begin_while(Condition { region: counter, offset: 0, max_iterations: passes.saturating_mul(2) }).expect("while");
    let relocs = vec![
        Reloc { offset: 0, target: counter, target_offset: 0 },
        Reloc { offset: 8, target: acc, target_offset: 0 },
    ];
    b.w.launch(LaunchDecl {
        kernel: b.k.count_down,
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_bytes: 0,
        params: vec![0; 16],
        relocs,
    })
    .expect("launch");
    b.w.end_body().expect("end");
    b.w.add_binding("acc", acc, Direction::Out).expect("binding");
    b.finish()
}

/// `while (counter) { counter -= 1; acc += 1 }`: one kernel per iteration, as in the floor.
pub fn while_archive() -> Vec<u8> {
    let mut b = Builder::new();
    let counter = b.w.add_region(RegionDecl::new("counter", 4, DType::U32)).expect("region");
    let x = b.w.add_region(RegionDecl::new("acc", 4, DType::U32)).expect("region");
    b.w.begin_while(Condition { region: counter, offset: 0, max_iterations: 0 }).expect("while");
    let relocs =
        vec![Reloc { offset: 0, target: counter, target_offset: 0 }, Reloc { offset: 8, target: x, target_offset: 0 }];
    b.w.launch(LaunchDecl {
        kernel: b.k.count_down,
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_bytes: 0,
        params: vec![0; 16],
        relocs,
    })
    .expect("launch");
    b.w.end_body().expect("end");
    b.finish()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One measured figure.
#[derive(Clone, Debug)]
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub unit: &'static str,
}

/// A kernel taking `(float* x, int n)` from outside recap, e.g. the floor's own `inc` as `nvcc`
/// builds it: a chain of it is the same chain with the very kernel the floor runs.
#[derive(Clone, Copy, Debug)]
pub struct OutsideKernel<'a> {
    pub ptx: &'a str,
    pub entry: &'a str,
    /// `nvcc -cubin` of the same kernel, and the SM it was built for.
    pub cubin: Option<(u32, &'a [u8])>,
}

/// `n` launches of an outside kernel; with `with_cubin`, its cubin goes into the archive too.
pub fn chain_archive_with(outside: &OutsideKernel, with_cubin: bool, n: usize) -> Result<Vec<u8>, CudaError> {
    let kernel = outside.entry;
    let bad = |e: WriteError| CudaError::Invalid(format!("building the chain of {kernel}: {e}"));
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).map_err(bad)?;
    let m = w.add_module("outside", outside.ptx).map_err(bad)?;
    if let (true, Some((sm, cubin))) = (with_cubin, outside.cubin) {
        w.add_cubin(m, sm, cubin).map_err(bad)?;
    }
    let p = |name: &str, offset, size, kind| ParamDecl { name: name.into(), offset, size, align: size, kind };
    let k =
        w.add_kernel(m, kernel, vec![p("x", 0, 8, ParamKind::Pointer), p("n", 8, 4, ParamKind::Value)]).map_err(bad)?;
    let x = w.add_region(RegionDecl::new("x", ELEMS as u64 * 4, DType::F32)).map_err(bad)?;
    for _ in 0..n {
        let mut params = vec![0u8; 12];
        params[8..12].copy_from_slice(&ELEMS.to_le_bytes());
        let relocs = vec![Reloc { offset: 0, target: x, target_offset: 0 }];
        w.launch(LaunchDecl { kernel: k, grid: [1, 1, 1], block: [ELEMS, 1, 1], shared_bytes: 0, params, relocs })
            .map_err(bad)?;
    }
    Ok(w.finish().map_err(bad)?.into_inner())
}

/// Diagnostic: an `n`-node chain of `inc` built and timed with raw driver calls only (its own
/// buffer and module, the device's stream, explicit kernel nodes sharing one parameter block), the way a C++
/// program would: what recap's own replay path adds, if anything. `x`: a buffer to use instead
/// of a fresh one. Returns the median time per node and the median host cost of one launch call.
fn raw_chain_per_node(device: &Arc<Device>, n: usize, reps: usize, x: Option<u64>) -> Result<(f64, f64), CudaError> {
    device.bind()?;
    let stream = device.stream();
    let mut own_x = 0;
    let mut x = match x {
        Some(x) => x,
        None => {
            call!(cuMemAlloc_v2(&mut own_x, ELEMS as usize * 4))?;
            call!(cuMemsetD8_v2(own_x, 0, ELEMS as usize * 4))?;
            own_x
        }
    };
    let mut image = sample_kernels::PTX.as_bytes().to_vec();
    image.push(0);
    let code = Code::load(&image, false).map_err(|(e, log)| CudaError::Jit { module: "raw".into(), error: e, log })?;
    let func: Func = code.get(c"inc")?;
    let mut count = ELEMS;
    let mut args = [&mut x as *mut u64 as *mut std::ffi::c_void, &mut count as *mut u32 as *mut std::ffi::c_void];
    let mut graph = std::ptr::null_mut();
    call!(cuGraphCreate(&mut graph, 0))?;
    let mut prev: Option<sys::CUgraphNode> = None;
    for _ in 0..n {
        let p = sys::CUDA_KERNEL_NODE_PARAMS {
            func: if func.kernel.is_null() { func.function } else { std::ptr::null_mut() },
            gridDimX: 1,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: ELEMS,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            kernelParams: args.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: func.kernel,
            ctx: if func.kernel.is_null() { std::ptr::null_mut() } else { device.context() },
        };
        let mut node = std::ptr::null_mut();
        let deps = prev.as_slice();
        call!(cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), &p))?;
        prev = Some(node);
    }
    let mut exec = std::ptr::null_mut();
    call!(cuGraphInstantiateWithFlags(&mut exec, graph, 0))?;
    let (mut t, mut call) = (Vec::new(), Vec::new());
    for i in 0..reps + 3 {
        let a = Instant::now();
        call!(cuGraphLaunch(exec, stream))?;
        let m = Instant::now();
        call!(cuStreamSynchronize(stream))?;
        if i >= 3 {
            t.push(us(a.elapsed()) / n as f64);
            call.push(us(m - a));
        }
    }
    call!(cuGraphExecDestroy(exec))?;
    call!(cuGraphDestroy(graph))?;
    code.unload();
    if own_x != 0 {
        call!(cuMemFree_v2(own_x))?;
    }
    Ok((median(t), median(call)))
}

/// Launches `inc` on a stream other than the device's, 26 times, each between two timing events,
/// the way a replay with a stream of its own did. Afterwards the driver launches every graph
/// kernel node in this context more slowly (see [`Device::stream`]); nothing undoes that, so the
/// benchmark does it last.
fn launch_on_a_second_stream(device: &Arc<Device>) -> Result<(), CudaError> {
    device.bind()?;
    let mut stream = std::ptr::null_mut();
    call!(cuStreamCreate(&mut stream, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32))?;
    let mut x = 0;
    call!(cuMemAlloc_v2(&mut x, ELEMS as usize * 4))?;
    let mut image = sample_kernels::PTX.as_bytes().to_vec();
    image.push(0);
    let code = Code::load(&image, false).map_err(|(e, log)| CudaError::Jit {
        module: "second stream".into(),
        error: e,
        log,
    })?;
    let func = code.get(c"inc")?;
    let mut count = ELEMS;
    let mut args = [&mut x as *mut u64 as *mut std::ffi::c_void, &mut count as *mut u32 as *mut std::ffi::c_void];
    let (mut start, mut end) = (std::ptr::null_mut(), std::ptr::null_mut());
    call!(cuEventCreate(&mut start, sys::CUevent_flags::CU_EVENT_DEFAULT as u32))?;
    call!(cuEventCreate(&mut end, sys::CUevent_flags::CU_EVENT_DEFAULT as u32))?;
    for _ in 0..26 {
        call!(cuEventRecord(start, stream))?;
        call!(cuLaunchKernel(func.function, 1, 1, 1, ELEMS, 1, 1, 0, stream, args.as_mut_ptr(), std::ptr::null_mut()))?;
        call!(cuEventRecord(end, stream))?;
        call!(cuStreamSynchronize(stream))?;
    }
    call!(cuEventDestroy_v2(start))?;
    call!(cuEventDestroy_v2(end))?;
    code.unload();
    call!(cuMemFree_v2(x))?;
    call!(cuStreamDestroy_v2(stream))?;
    Ok(())
}

/// Median per-iteration time of the WHILE archive counting down from `k`, over `reps` replays.
fn while_per_iteration(r: &mut CudaReplay, k: u32, reps: usize) -> Result<f64, CudaError> {
    let mut per = Vec::new();
    for rep in 0..reps + 1 {
        r.write_region_at(0, 0, &k.to_le_bytes())?;
        let a = Instant::now();
        r.launch()?;
        r.synchronize()?;
        let t = us(a.elapsed()) / k as f64;
        let left = u32::from_le_bytes(r.read_region(0)?[..4].try_into().expect("4 bytes"));
        if left != 0 {
            return Err(CudaError::Invalid(format!("while loop left the counter at {left}")));
        }
        if rep > 0 {
            per.push(t);
        }
    }
    Ok(median(per))
}

fn time_per_node(r: &mut CudaReplay, n: usize, reps: usize) -> Result<f64, CudaError> {
    for _ in 0..3 {
        r.launch()?;
        r.synchronize()?;
    }
    let mut t = Vec::new();
    for _ in 0..reps {
        let a = Instant::now();
        r.launch()?;
        r.synchronize()?;
        t.push(us(a.elapsed()) / n as f64);
    }
    Ok(median(t))
}

/// A part of the benchmark, to run alone in a fresh process (what a one-archive replay sees).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Section {
    /// Chains of 1 to 10,000 nodes: per node, per replay call, stream mode.
    Chain,
    /// Archive load to ready-to-launch at 1000 nodes.
    Load,
    /// WHILE loops: conditional node (three ways) and the host loop.
    While,
    /// Eight independent chains: the DAG against the same ops chained.
    Dag,
    /// Changing one launch's parameters in the instantiated graph.
    Update,
    /// The 1000-node chain and the WHILE loop after a kernel ran on a second stream.
    SecondStream,
    /// Programmatic dependent launch against plain graph edges, with and without the early
    /// trigger: chains of one-block kernels, of 132, 1,056 and two waves of blocks, of 1, 5 and
    /// 20 us kernels, eight independent chains, the heat step ([`pdl`]).
    Pdl,
    /// A two-device halo exchange (heat diffusion on 8192 x 8192 cells) on one GPU and on two.
    Devices,
}

/// Runs the benchmarks on `device` (all, or only the parts in `only`, in the usual order),
/// printing a line per figure as it goes. `outside_kernel`: PTX text and the entry name of a `(float*, int)` kernel to run a
/// 1000-node chain of as well.
pub fn run(
    device: &Arc<Device>,
    reps: usize,
    outside_kernel: Option<OutsideKernel>,
    only: &[Section],
) -> Result<Vec<Figure>, CudaError> {
    let wanted = |s: Section| only.is_empty() || only.contains(&s);
    let reps = reps.max(3);
    let mut out = Vec::new();
    let mut put = |name: String, value: f64, unit: &'static str| {
        println!("{name:<58} {value:>12.3} {unit}");
        out.push(Figure { name, value, unit });
    };
    println!(
        "device {:?}, driver {}, conditional nodes {}",
        device,
        device.driver.version_string(),
        if device.driver.has_conditional_nodes() { "yes" } else { "no" }
    );
    // The figures beside the floor's plain graph use ordinary edges; the pdl section compares.
    let graph = ReplayOptions { mode: Mode::Graph, pdl: Pdl::Off, ..Default::default() };
    let stream = ReplayOptions { mode: Mode::Stream, ..Default::default() };

    // Chains: per-node replay time and the host cost of one replay call.
    for n in [1usize, 10, 100, 1000, 10000].into_iter().filter(|_| wanted(Section::Chain)) {
        let bytes = chain_archive(n);
        let archive = Archive::open(&bytes)?;
        let mut r = CudaReplay::load(device, &archive, graph)?;
        for _ in 0..3 {
            r.launch()?;
            r.synchronize()?;
        }
        let (mut per_node, mut call) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let a = Instant::now();
            r.launch()?;
            let m = Instant::now();
            r.synchronize()?;
            let b = Instant::now();
            per_node.push(us(b - a) / n as f64);
            call.push(us(m - a));
        }
        put(format!("chain {n}: graph replay per node"), median(per_node), "us");
        if n == 1000 {
            // The same chain from raw driver calls on a buffer of their own (diagnostic).
            put(format!("chain {n}: raw driver calls, per node"), raw_chain_per_node(device, n, reps, None)?.0, "us");
            // The same graph with module CUfunctions instead of library CUkernels (diagnostic).
            let modules = ReplayOptions { module_functions: true, ..graph };
            let mut m = CudaReplay::load(device, &archive, modules)?;
            put(format!("chain {n}: graph per node, module CUfunction nodes"), time_per_node(&mut m, n, reps)?, "us");
            drop(m);
            // The same ops captured from a stream instead of built node by node (diagnostic).
            let mut c = CudaReplay::load(device, &archive, stream)?;
            c.capture_stream_graph()?;
            put(format!("chain {n}: stream-captured graph per node"), time_per_node(&mut c, n, reps)?, "us");
            if let Some(outside) = &outside_kernel {
                let kernel = outside.entry;
                let forms = if outside.cubin.is_some() { &[false, true][..] } else { &[false][..] };
                for &with_cubin in forms {
                    let form = if with_cubin { "cubin" } else { "PTX" };
                    let timed = chain_archive_with(outside, with_cubin, n).and_then(|bytes| {
                        let outside = Archive::open(&bytes)?;
                        let mut o = CudaReplay::load(device, &outside, graph)?;
                        time_per_node(&mut o, n, reps)
                    });
                    match timed {
                        Ok(t) => {
                            put(format!("chain {n}: graph per node, kernel {kernel} from outside {form}"), t, "us")
                        }
                        Err(e) => println!("chain {n} with kernel {kernel} from outside {form}: {e}"),
                    }
                }
            }
        }
        put(format!("chain {n}: host cost of one replay call"), median(call), "us");
        if n == 1 || n == 1000 {
            // What the launch call costs without recap's checks, on a graph of raw driver calls
            // (diagnostic), and the part of recap's checks that calls the driver.
            let (_, raw_call) = raw_chain_per_node(device, n, reps, None)?;
            put(format!("chain {n}: host cost of one raw cuGraphLaunch"), raw_call, "us");
            if n == 1 {
                let mut bind = Vec::new();
                for _ in 0..reps {
                    let a = Instant::now();
                    device.bind()?;
                    bind.push(us(a.elapsed()));
                }
                put("host cost of making the context current".to_string(), median(bind), "us");
            }
        }
        if n <= 1000 {
            let mut s = CudaReplay::load(device, &archive, stream)?;
            s.launch()?;
            s.synchronize()?;
            let mut per_kernel = Vec::new();
            for _ in 0..reps {
                let a = Instant::now();
                s.launch()?;
                s.synchronize()?;
                per_kernel.push(us(a.elapsed()) / n as f64);
            }
            put(format!("chain {n}: stream mode per kernel"), median(per_kernel), "us");
        }
    }

    // WHILE: per iteration, a conditional node vs the host loop (stream mode reads the flag back).
    // Before the load figures: fifteen loads and drops of a 1000-node archive leave the context
    // running conditional loops about 0.3 us per iteration slower (`--only load,while`).
    if wanted(Section::While) {
        let bytes = while_archive();
        let archive = Archive::open(&bytes)?;
        let modules = ReplayOptions { module_functions: true, ..graph };
        let plain = ReplayOptions { plain_condition_edges: true, ..graph };
        let trigger = ReplayOptions { trigger_condition_edges: true, ..graph };
        for (mode, label) in [
            (graph, "conditional WHILE node"),
            (trigger, "conditional WHILE node, edges from the completion trigger"),
            (plain, "conditional WHILE node, plain edges to the condition kernel"),
            (modules, "conditional WHILE node, module CUfunctions"),
            (stream, "host loop reading the flag"),
        ] {
            let mut r = CudaReplay::load(device, &archive, mode)?;
            let (libraries, modules) = r.code_kinds();
            println!(
                "while, {label}: {libraries} libraries, {modules} modules loaded, {} programmatic edges",
                r.programmatic_edges()
            );
            for k in [10u32, 100, 1000, 10000] {
                put(format!("while {k}: {label}, per iteration"), while_per_iteration(&mut r, k, reps.min(9))?, "us");
            }
        }
    }

    // Archive load to ready-to-launch (open, modules, regions, graph, instantiate, upload) at 1000 nodes.
    if wanted(Section::Load) {
        let bytes = chain_archive(1000);
        let (mut total, mut inst) = (Vec::new(), Vec::new());
        let mut first = None;
        for _ in 0..reps.min(15) {
            let a = Instant::now();
            let archive = Archive::open(&bytes)?;
            let r = CudaReplay::load(device, &archive, graph)?;
            let t = us(a.elapsed());
            first.get_or_insert(t);
            total.push(t);
            inst.push(us(r.load_times().instantiate));
        }
        put("load 1000 nodes: first load (PTX JIT or its cache)".into(), first.unwrap_or(0.0), "us");
        put("load 1000 nodes: archive to ready-to-launch".into(), median(total), "us");
        put("load 1000 nodes: of which instantiate".into(), median(inst), "us");
    }

    // Independent chains: the plan's DAG against the same ops chained one after another.
    for spin_ns in [0u64, 5_000].into_iter().filter(|_| wanted(Section::Dag)) {
        let bytes = chains_archive(8, 100, spin_ns);
        let archive = Archive::open(&bytes)?;
        let kernel = if spin_ns == 0 { "tiny kernels".to_string() } else { format!("{} us kernels", spin_ns / 1000) };
        let mut times = Vec::new();
        for serial in [false, true] {
            let mut r = CudaReplay::load(device, &archive, ReplayOptions { serial, ..graph })?;
            r.replay()?;
            let mut t = Vec::new();
            for _ in 0..reps {
                let a = Instant::now();
                r.launch()?;
                r.synchronize()?;
                t.push(us(a.elapsed()));
            }
            let m = median(t);
            let (nodes, edges) = r.graph_size().unwrap_or((0, 0));
            put(
                format!(
                    "8 chains x 100, {kernel}: {} ({nodes} nodes, {edges} edges)",
                    if serial { "chained" } else { "DAG" }
                ),
                m,
                "us",
            );
            times.push(m);
        }
        put(format!("8 chains x 100, {kernel}: DAG speed-up over chained"), times[1] / times[0], "x");
    }

    // Changing one launch's parameters in the instantiated graph.
    if wanted(Section::Update) {
        let bytes = chain_archive(1);
        let archive = Archive::open(&bytes)?;
        let mut r = CudaReplay::load(device, &archive, graph)?;
        let mut params = vec![0u8; 12];
        let mut t = Vec::new();
        for i in 0..200u32 {
            params[8..12].copy_from_slice(&(ELEMS - (i & 1)).to_le_bytes());
            r.set_launch_params(0, &params)?;
            let a = Instant::now();
            r.apply_updates()?;
            t.push(us(a.elapsed()));
        }
        put("update one kernel node's parameters".into(), median(t), "us");
        r.replay()?;
    }

    // Programmatic dependent launch: the same graphs with each dependent kernel scheduled while
    // its predecessor runs (and waiting for it on the GPU), against plain edges.
    if wanted(Section::Pdl) {
        pdl::section(device, reps, &mut put)?;
    }

    // Several GPUs: the same two-device archive with both devices on this GPU, then on two.
    if wanted(Section::Devices) {
        let (nx, ny, steps) = (8192, 8192, 10);
        let per_replay = |devices: &[Arc<Device>], bytes: &[u8]| -> Result<f64, CudaError> {
            let archive = Archive::open(bytes)?;
            let mut r = CudaReplay::load_on(devices, &archive, graph)?;
            for _ in 0..2 {
                r.replay()?;
            }
            let times = (0..reps.min(15)).map(|_| r.replay().map(us)).collect::<Result<Vec<_>, _>>()?;
            Ok(median(times))
        };
        let label = format!("halo {nx}x{ny}, {} sweeps", steps * 2);
        let whole = halo_archive(nx, ny, steps, 1, false);
        put(format!("{label}: one device, one GPU"), per_replay(std::slice::from_ref(device), &whole)?, "us");
        let split = halo_archive(nx, ny, steps, 2, false);
        let one = per_replay(std::slice::from_ref(device), &split)?;
        put(format!("{label}: two devices on one GPU"), one, "us");
        let other = (0..device.driver.device_count).find(|&o| o != device.ordinal).map(Device::open).transpose()?;
        match other {
            Some(other) => {
                let two = per_replay(&[device.clone(), other.clone()], &split)?;
                put(format!("{label}: two devices on cuda:{} and cuda:{}", device.ordinal, other.ordinal), two, "us");
                put(format!("{label}: speed-up of two GPUs over one"), one / two, "x");
            }
            None => println!("{label}: one GPU here, so no figure for two"),
        }
    }

    // The same chain and loop once a kernel has run on a second stream of the context: what
    // recap's one stream per device avoids.
    if wanted(Section::SecondStream) {
        launch_on_a_second_stream(device)?;
        let bytes = chain_archive(1000);
        let archive = Archive::open(&bytes)?;
        let mut r = CudaReplay::load(device, &archive, graph)?;
        put("chain 1000 after a kernel on a second stream: per node".into(), time_per_node(&mut r, 1000, reps)?, "us");
        let bytes = while_archive();
        let archive = Archive::open(&bytes)?;
        let mut r = CudaReplay::load(device, &archive, graph)?;
        put(
            "while 10000 after a kernel on a second stream: per iteration".into(),
            while_per_iteration(&mut r, 10000, reps.min(9))?,
            "us",
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heat_archive_replays_on_the_cpu() {
        let bytes = heat_archive(2);
        let archive = Archive::open(&bytes).unwrap();
        assert_eq!(archive.op_count(), 8);
        let mut r = shared::replay::CpuReplay::new(&archive, Default::default()).unwrap();
        r.run_iteration(&mut shared::replay::NoObserver).unwrap();
        let u: Vec<f32> =
            r.read_region(0).unwrap().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert!(u.iter().all(|v| v.is_finite()) && u != (0..96 * 64).map(|i| (i % 97) as f32).collect::<Vec<_>>());
    }
}
