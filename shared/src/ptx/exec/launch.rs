//! The public launch API and the choice of engine: a launch checked once into a [`LaunchPlan`],
//! its blocks spread over the cores, each range of blocks run on one worker by the interpreter
//! or by native code where the kernel has it, and a block's `Stop` dressed as an [`ExecError`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::ptx::ir::*;
use crate::ptx::lower::MAX_SHARED_BYTES;
use crate::ptx::memory::{Fault, Memory};
use crate::ptx::module::{Entry, Module};
use crate::ptx::numerics::sfu::{self, SfuModel};
use crate::ptx::numerics::MmaModel;

use super::dump::JitDump;
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
use super::jit;
use super::worker::*;

/// Compiled kernels of a module (empty where there is no code generator).
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
pub(crate) type JitCache = jit::Cache;
#[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
#[derive(Default)]
pub(crate) struct JitCache;

/// Why a kernel has no native code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoNativeCode {
    /// The build has no code generator (the wasm viewer, or a build without the `jit` feature).
    #[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
    #[error("this build has no code generator")]
    NoCodeGenerator,
    /// The kernel needs what native code lacks, or the code generator failed on it.
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    #[error(transparent)]
    Refused(#[from] jit::JitError),
    /// The code generator declined the kernel without naming a construct.
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    #[error("the code generator rejected it")]
    Rejected,
}

/// Whether kernel `e` of `module` runs as native code under [`Engine::Jit`], and if not, why not.
pub(crate) fn jit_support(module: &Module, e: &Entry) -> Result<(), NoNativeCode> {
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    {
        native_kernel(module, e).map(|_| ())
    }
    #[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
    {
        let _ = (module, e);
        Err(NoNativeCode::NoCodeGenerator)
    }
}

/// Whether kernel `e` of `module` has native code that runs groups of threads in vector lanes
/// under [`Engine::Jit`], and if not, why not.
pub(crate) fn lanes_support(module: &Module, e: &Entry) -> Result<(), NoNativeCode> {
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    {
        let (f, k) = native_kernel(module, e)?;
        Ok(k.lanes(f)?)
    }
    #[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
    {
        let _ = (module, e);
        Err(NoNativeCode::NoCodeGenerator)
    }
}

/// Kernel `e`'s native code and the function it is compiled from, or why it has no native code.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
pub(super) fn native_kernel<'m>(
    module: &'m Module,
    e: &Entry,
) -> Result<(&'m Function, Arc<jit::JitKernel>), NoNativeCode> {
    let f = &module.funcs[e.func as usize];
    match module.jit.kernel(e.func, f, e.params_size, None) {
        Some(k) => Ok((f, k)),
        None => Err(jit::unsupported(f).map_or(NoNativeCode::Rejected, NoNativeCode::Refused)),
    }
}

/// Which engine runs a launch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Engine {
    /// Native code where the build has a code generator and the kernel needs nothing it lacks
    /// (decided once per kernel, before it runs), the interpreter otherwise.
    #[default]
    Jit,
    /// Native code as [`Engine::Jit`], but always one thread at a time: never the code that
    /// runs groups of threads in vector lanes (for comparing the two).
    JitScalar,
    /// Always the interpreter.
    Interpreter,
}

/// Grid and block shape of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Bytes of `extern .shared` memory per block.
    pub dynamic_shared: u32,
}

/// Limits and knobs of one launch.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// Stop with [`ExecError::Budget`] after about this many thread-instructions (instructions
    /// issued to a block, times its thread count; checked every few thousand instructions).
    pub instruction_budget: Option<u64>,
    /// Set to `true` from anywhere to stop the launch with [`ExecError::Cancelled`].
    pub cancel: Option<Arc<AtomicBool>>,
    /// Worker threads for blocks: 0 = all cores, 1 = run on the calling thread.
    pub threads: usize,
    pub engine: Engine,
    /// Where native code goes as it is compiled, for reading it (none: nowhere).
    pub jit_dump: Option<JitDump>,
    /// Run each launch's blocks in an order shuffled by this seed rather than in index order: a
    /// GPU promises no order, and a program whose result depends on it (float atomics, a
    /// lock-ordered sum) shows that on the CPU too (`recap replay --determinism`).
    pub block_order: Option<u64>,
    /// The arithmetic of tensor-core instructions (`mma`, `wgmma`): IEEE by default, or the model
    /// of a GPU generation (`recap replay --mma-model`).
    pub mma_model: MmaModel,
}

/// What a launch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaunchStats {
    pub blocks: u64,
    /// Instructions issued to blocks (one per instruction per block, whatever its width).
    pub instructions: u64,
    /// Issued instructions times the threads of their block (for native code: the instructions
    /// each thread executed).
    pub thread_instructions: u64,
    /// Whether the launch ran as native code.
    pub jit: bool,
    /// Whether native code ran the launch's threads in groups, in vector lanes.
    pub lanes: bool,
}

/// Why a launch stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("no kernel named `{0}` in the module")]
    NoSuchKernel(String),
    #[error("kernel `{kernel}`: {reason}")]
    BadLaunch { kernel: String, reason: String },
    #[error(
        "kernel `{kernel}` block {block:?} thread {thread:?}: {what} of {size} bytes at {space} address {addr:#x} (line {line})"
    )]
    Memory {
        kernel: String,
        block: [u32; 3],
        thread: [u32; 3],
        addr: u64,
        size: u32,
        space: &'static str,
        what: &'static str,
        line: u32,
    },
    #[error("kernel `{kernel}` block {block:?}: barrier reached by only part of the block's threads (line {line})")]
    DivergentBarrier { kernel: String, block: [u32; 3], line: u32 },
    #[error(
        "kernel `{kernel}` block {block:?}: mbarrier wait that cannot complete: its phase needs arrivals or bytes no thread of the block will give before it, as the CPU runs a block's threads in lockstep (line {line})"
    )]
    MbarrierDeadlock { kernel: String, block: [u32; 3], line: u32 },
    #[error("kernel `{kernel}` block {block:?} thread {thread:?}: trap (line {line})")]
    Trap { kernel: String, block: [u32; 3], thread: [u32; 3], line: u32 },
    #[error("kernel `{kernel}`: instruction budget of {budget} exhausted")]
    Budget { kernel: String, budget: u64 },
    #[error("kernel `{kernel}`: cancelled")]
    Cancelled { kernel: String },
}

pub(super) const MAX_THREADS: u64 = 1024;

pub(super) fn space_name(s: Space) -> &'static str {
    match s {
        Space::Global => "global",
        Space::Shared => "shared",
        Space::Local => "local",
        Space::Const => "const",
        Space::KParam => "param",
        Space::Generic => "generic",
    }
}

/// Runs `entry` of `module` over the grid: [`LaunchPlan::new`] then [`LaunchPlan::launch`].
pub fn launch(
    module: &Module,
    entry: &str,
    dims: &LaunchDims,
    params: &[u8],
    mem: &Memory,
    opts: &ExecOptions,
) -> Result<LaunchStats, ExecError> {
    LaunchPlan::new(module, entry, dims)?.launch(module, params, mem, opts)
}

/// A kernel and launch shape checked once (entry resolved, grid, block and shared memory within
/// limits), so that launching it again costs only the work of the launch itself.
#[derive(Clone)]
pub struct LaunchPlan {
    module: u64,
    entry: u32,
    func: u32,
    dims: LaunchDims,
    shared_size: u32,
    params_size: u32,
    nblocks: u64,
    threads: u64,
    /// The kernel's native code (or `None` where it needs the interpreter), looked up in the
    /// module's cache at the first launch with [`Engine::Jit`] and kept here for the next ones.
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    native: std::sync::OnceLock<Option<Arc<jit::JitKernel>>>,
}

impl std::fmt::Debug for LaunchPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchPlan")
            .field("entry", &self.entry)
            .field("dims", &self.dims)
            .field("shared_size", &self.shared_size)
            .finish_non_exhaustive()
    }
}

impl LaunchPlan {
    pub fn new(module: &Module, entry: &str, dims: &LaunchDims) -> Result<LaunchPlan, ExecError> {
        let index = module
            .entries
            .iter()
            .position(|e| e.name == entry)
            .ok_or_else(|| ExecError::NoSuchKernel(entry.to_string()))?;
        let e = &module.entries[index];
        let bad = |reason: String| ExecError::BadLaunch { kernel: entry.to_string(), reason };
        let threads: u64 = dims.block.iter().map(|&d| d as u64).product();
        if dims.block.contains(&0) || dims.grid.contains(&0) {
            return Err(bad(format!("empty grid {:?} or block {:?}", dims.grid, dims.block)));
        }
        if threads > MAX_THREADS || dims.block[2] > 64 {
            return Err(bad(format!("block {:?} has more than {MAX_THREADS} threads or z above 64", dims.block)));
        }
        if dims.grid[1] > 65535 || dims.grid[2] > 65535 || dims.grid[0] > i32::MAX as u32 {
            return Err(bad(format!("grid {:?} exceeds the limits of a launch", dims.grid)));
        }
        let shared_size = e.dynamic_shared_base as u64 + dims.dynamic_shared as u64;
        if dims.dynamic_shared > 0 && shared_size > MAX_SHARED_BYTES || e.static_shared as u64 > MAX_SHARED_BYTES {
            return Err(bad(format!(
                "{} bytes of shared memory per block ({} static + {} dynamic) exceed the {MAX_SHARED_BYTES} byte limit",
                shared_size, e.static_shared, dims.dynamic_shared
            )));
        }
        let shared_size = if dims.dynamic_shared > 0 { shared_size } else { e.static_shared as u64 };
        Ok(LaunchPlan {
            module: module.id,
            entry: index as u32,
            func: e.func,
            dims: *dims,
            shared_size: shared_size as u32,
            params_size: e.params_size,
            nblocks: dims.grid.iter().map(|&d| d as u64).product(),
            threads,
            #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
            native: std::sync::OnceLock::new(),
        })
    }

    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    fn native(&self, module: &Module, dump: Option<&JitDump>) -> Option<&jit::JitKernel> {
        self.native
            .get_or_init(|| {
                let func = &module.funcs[self.func as usize];
                module.jit.kernel(self.func, func, self.params_size, dump)
            })
            .as_deref()
    }

    /// The kernel's entry name.
    pub fn kernel<'m>(&self, module: &'m Module) -> Option<&'m str> {
        (module.id == self.module).then(|| module.entries[self.entry as usize].name.as_str())
    }

    pub fn dims(&self) -> &LaunchDims {
        &self.dims
    }

    /// Runs the planned kernel over its grid. `module` must be the one the plan was made for.
    pub fn launch(
        &self,
        module: &Module,
        params: &[u8],
        mem: &Memory,
        opts: &ExecOptions,
    ) -> Result<LaunchStats, ExecError> {
        let Some(entry) = self.kernel(module) else {
            return Err(ExecError::BadLaunch {
                kernel: module.entries.get(self.entry as usize).map_or("?", |e| e.name.as_str()).to_string(),
                reason: "the launch plan was made for another module".to_string(),
            });
        };
        if (params.len() as u64) < self.params_size as u64 {
            return Err(ExecError::BadLaunch {
                kernel: entry.to_string(),
                reason: format!("{} bytes of parameters given, the kernel takes {}", params.len(), self.params_size),
            });
        }
        run_grid(self, module, entry, params, mem, opts)
    }
}

pub(super) fn run_grid(
    plan: &LaunchPlan,
    module: &Module,
    entry: &str,
    params: &[u8],
    mem: &Memory,
    opts: &ExecOptions,
) -> Result<LaunchStats, ExecError> {
    let func = &module.funcs[plan.func as usize];
    let ctx = Ctx {
        module,
        kernel: entry,
        entry: plan.func,
        dims: plan.dims,
        params,
        mem,
        shared_size: plan.shared_size as usize,
        stack: func.stack_size as usize,
        budget: opts.instruction_budget,
        used: AtomicU64::new(0),
        cancel: opts.cancel.as_deref(),
        abort: AtomicBool::new(false),
        types: mem.records_types(),
        order: opts.block_order.map(|seed| shuffled(plan.nblocks, seed)),
        mma: opts.mma_model,
    };
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    if matches!(opts.engine, Engine::Jit | Engine::JitScalar) {
        if let Some(k) = plan.native(module, opts.jit_dump.as_ref()) {
            // Native code uses no lane masks, but its slow path runs on a worker: a one-word
            // worker is cheaper to set up for the small blocks where setup matters.
            return if plan.threads <= 64 {
                run_native::<1>(&ctx, plan, k, mem, opts)
            } else {
                run_native::<MAX_WORDS>(&ctx, plan, k, mem, opts)
            };
        }
    }
    // Blocks of one or two warps run with one-word lane masks: a launch of a small block then
    // copies and combines a single word per mask operation instead of sixteen.
    if plan.threads <= 64 {
        run_blocks::<1>(&ctx, plan, opts)
    } else {
        run_blocks::<MAX_WORDS>(&ctx, plan, opts)
    }
}

/// Runs blocks over `run_range`, on rayon's workers where the launch allows; sums the
/// (issued instructions, thread-instructions) of every range.
#[cfg_attr(not(feature = "parallel"), allow(unused_variables))]
pub(super) fn over_blocks(
    plan: &LaunchPlan,
    opts: &ExecOptions,
    run_range: impl Fn(std::ops::Range<u64>) -> Result<(u64, u64), ExecError> + Sync,
    jit: bool,
) -> Result<LaunchStats, ExecError> {
    let nblocks = plan.nblocks;
    let mut instructions = 0u64;
    let mut thread_instructions = 0u64;
    #[cfg(feature = "parallel")]
    let parallel = opts.threads != 1 && nblocks > 1;
    #[cfg(not(feature = "parallel"))]
    let parallel = false;
    if !parallel {
        let (i, t) = run_range(0..nblocks)?;
        instructions += i;
        thread_instructions += t;
    } else {
        #[cfg(feature = "parallel")]
        {
            use rayon::prelude::*;
            let workers = if opts.threads == 0 { rayon::current_num_threads() } else { opts.threads };
            let chunks = (workers as u64 * 4).min(nblocks).max(1);
            let per = nblocks.div_ceil(chunks);
            let ranges: Vec<_> = (0..chunks).map(|c| c * per..((c + 1) * per).min(nblocks)).collect();
            let results: Vec<Result<(u64, u64), ExecError>> = ranges.into_par_iter().map(&run_range).collect();
            let mut first_err = None;
            for r in results {
                match r {
                    Ok((c, t)) => {
                        instructions += c;
                        thread_instructions += t;
                    }
                    Err(ExecError::Cancelled { .. }) if first_err.is_some() => {}
                    Err(e) => {
                        // A block stopped because another failed says nothing new.
                        if first_err.is_none() || matches!(first_err, Some(ExecError::Cancelled { .. })) {
                            first_err = Some(e);
                        }
                    }
                }
            }
            if let Some(e) = first_err {
                return Err(e);
            }
        }
    }
    Ok(LaunchStats { blocks: nblocks, instructions, thread_instructions, jit, lanes: false })
}

/// Runs the blocks of `range` on this OS thread's worker: `block` runs one and returns the
/// thread-instructions it counted itself (native code does; the interpreter counts in the worker).
/// Gives that sum and the worker's own count of issued instructions.
pub(super) fn run_range_on<const MW: usize>(
    ctx: &Ctx,
    range: std::ops::Range<u64>,
    prepare: impl FnOnce(&mut NativeScratch),
    mut block: impl FnMut(&mut Worker<'_, MW>, &mut NativeScratch, u64) -> Res<u64>,
) -> Result<(u64, u64), ExecError> {
    // The special functions follow the launch's GPU generation on this thread while it runs blocks.
    let _sfu = sfu::Active::set(SfuModel::for_mma(ctx.mma));
    // The error leaves through `failed` so that the scratch closure returns two words in
    // registers: a large result moved through memory right after being written stalls.
    let mut failed = None;
    let counts = with_scratch::<MW, _>(|scratch, native| {
        prepare(native);
        let mut w = Worker::<MW>::new(ctx, scratch);
        let mut total = 0u64;
        for b in range {
            let b = ctx.order.as_ref().map_or(b, |o| o[b as usize]);
            match block(&mut w, native, b) {
                Ok(c) => total += c,
                Err(s) => {
                    ctx.abort.store(true, Ordering::Relaxed);
                    failed = Some(w.dress(s, b));
                    break;
                }
            }
        }
        // The shared count only serves budget checks of workers still running.
        if ctx.budget.is_some() {
            w.flush();
        }
        (total, w.count)
    });
    match failed {
        None => Ok(counts),
        Some(e) => Err(e),
    }
}

pub(super) fn run_blocks<const MW: usize>(
    ctx: &Ctx,
    plan: &LaunchPlan,
    opts: &ExecOptions,
) -> Result<LaunchStats, ExecError> {
    let threads = plan.threads;
    let run_range = |range: std::ops::Range<u64>| -> Result<(u64, u64), ExecError> {
        let (_, count) = run_range_on::<MW>(ctx, range, |_| {}, |w, _, b| w.run_block(b).map(|()| 0))?;
        Ok((count, count * threads))
    };
    over_blocks(plan, opts, run_range, false)
}

#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
pub(super) fn run_native<const MW: usize>(
    ctx: &Ctx,
    plan: &LaunchPlan,
    k: &jit::JitKernel,
    mem: &Memory,
    opts: &ExecOptions,
) -> Result<LaunchStats, ExecError> {
    let threads = plan.threads;
    let code = k.variant(&ctx.module.funcs[plan.func as usize], plan.dims.block, opts.engine == Engine::Jit);
    let run_range = |range: std::ops::Range<u64>| -> Result<(u64, u64), ExecError> {
        let (total, _) =
            run_range_on::<MW>(ctx, range, |js| js.prepare(mem), |w, js, b| k.run_block_named(code, w, js, b))?;
        // A division is a good share of a one-thread launch: skip the common trivial one.
        Ok((if threads == 1 { total } else { total / threads }, total))
    };
    let stats = over_blocks(plan, opts, run_range, true)?;
    Ok(LaunchStats { lanes: code.in_lanes(), ..stats })
}

impl<const MW: usize> Worker<'_, MW> {
    /// The error a block's `Stop` is: kernel, block, and the thread it names.
    pub(super) fn dress(&self, s: Stop, _b: u64) -> ExecError {
        let kernel = self.ctx.kernel.to_string();
        let block = self.ctaid;
        match s {
            Stop::Mem { lane, addr, size, space, fault, write, line } => ExecError::Memory {
                kernel,
                block,
                thread: self.thread_of(lane),
                addr,
                size,
                space: space_name(space),
                what: match (fault, write) {
                    (Fault::OutOfBounds, false) => "out-of-bounds read",
                    (Fault::OutOfBounds, true) => "out-of-bounds write",
                    (Fault::Misaligned, false) => "misaligned read",
                    (Fault::Misaligned, true) => "misaligned write",
                    (Fault::ReadOnly, _) => "write to read-only memory",
                },
                line,
            },
            Stop::Barrier { line } => ExecError::DivergentBarrier { kernel, block, line },
            Stop::Stuck { line } => ExecError::MbarrierDeadlock { kernel, block, line },
            Stop::Trap { lane, line } => ExecError::Trap { kernel, block, thread: self.thread_of(lane), line },
            Stop::Budget => ExecError::Budget { kernel, budget: self.ctx.budget.unwrap_or(0) },
            Stop::Cancelled | Stop::Aborted => ExecError::Cancelled { kernel },
        }
    }
}

/// The numbers `0..n` in an order shuffled by `seed` (Fisher-Yates over splitmix64), for
/// [`ExecOptions::block_order`].
pub(super) fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (0..n).collect();
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in (1..order.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

#[cfg(test)]
mod tests {
    use crate::ptx::Module;

    /// Why a kernel has no native code reaches `Module::jit_support` and `lanes_support` as the
    /// construct and its line.
    #[test]
    fn a_kernel_without_native_code_names_the_construct_and_its_line() {
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n    .reg .pred %p<2>;\n    \
                   .reg .b32 %r<3>;\n    mov.u32 %r1, %tid.x;\n    setp.lt.u32 %p1, %r1, 7;\n    \
                   vote.sync.ballot.b32 %r2, %p1, -1;\n    ret;\n}\n";
        let m = Module::parse(ptx).unwrap();
        #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
        let why = "`vote` at line 10";
        #[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
        let why = "this build has no code generator";
        assert_eq!(m.jit_support("k").unwrap_err().to_string(), why);
        assert_eq!(m.lanes_support("k").unwrap_err().to_string(), why);
        assert_eq!(m.jit_support("j").unwrap_err(), crate::ptx::NoNativeCode::NoKernel("j".into()));
    }
}
