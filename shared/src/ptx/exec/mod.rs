//! The executor: a thread block at a time, one instruction across all of the block's lanes.
//!
//! Registers are stored per register as a lane array (`regs[(frame_base + r) * n + lane]`), so an
//! arithmetic instruction is one tight loop over lanes, computed for every lane into a scratch
//! array and committed under the active mask (a copy when all lanes are active). Divergent
//! branches push entries on a reconvergence stack keyed by the branch's immediate
//! post-dominator; lanes that leave (`ret`, `exit`) are masked out everywhere.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::ir::*;
use super::lower::MAX_SHARED_BYTES;
use super::math::*;
use super::memory::{Fault, Memory, Region};
use super::module::{Entry, Module};
use super::typemap;

mod asynchronous;
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
mod jit;
mod warp;
mod warpgroup;

/// Compiled kernels of a module (empty where there is no code generator).
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
pub(crate) type JitCache = jit::Cache;
#[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
#[derive(Default)]
pub(crate) struct JitCache;

pub(crate) fn jit_support(module: &Module, e: &Entry) -> Result<(), String> {
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    {
        native_kernel(module, e).map(|_| ())
    }
    #[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
    {
        let _ = (module, e);
        Err(NO_CODE_GENERATOR.to_string())
    }
}

/// Whether kernel `e` of `module` has native code that runs groups of threads in vector lanes
/// under [`Engine::Jit`], and if not, why not.
pub(crate) fn lanes_support(module: &Module, e: &Entry) -> Result<(), String> {
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    {
        let (f, k) = native_kernel(module, e)?;
        k.lanes(f).map_err(|e| e.to_string())
    }
    #[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
    {
        let _ = (module, e);
        Err(NO_CODE_GENERATOR.to_string())
    }
}

#[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
const NO_CODE_GENERATOR: &str = "this build has no code generator";

/// Kernel `e`'s native code and the function it is compiled from, or why it has no native code.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
fn native_kernel<'m>(module: &'m Module, e: &Entry) -> Result<(&'m Function, Arc<jit::JitKernel>), String> {
    let f = &module.funcs[e.func as usize];
    match module.jit.kernel(e.func, f, e.params_size, None) {
        Some(k) => Ok((f, k)),
        None => {
            Err(jit::unsupported(f).map_or_else(|| "the code generator rejected it".to_string(), |why| why.to_string()))
        }
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
}

/// A sink for native code as it is compiled, for reading it or matching a profile against it:
/// called once for each compiled function of a kernel with its name (`KERNEL.one` for the code
/// that runs one thread at a time, `KERNEL.group` for the code for groups of threads), its machine
/// code, and Cranelift's listing of it, whose first line says where the code was loaded. A kernel
/// keeps the sink of the launch that compiled it, for its code for groups too.
#[derive(Clone)]
pub struct JitDump(Arc<DumpFn>);

/// What a [`JitDump`] calls: the function's name, its machine code and its listing.
type DumpFn = dyn Fn(&str, &[u8], &str) + Send + Sync;

impl JitDump {
    pub fn new(sink: impl Fn(&str, &[u8], &str) + Send + Sync + 'static) -> JitDump {
        JitDump(Arc::new(sink))
    }

    #[cfg_attr(not(all(feature = "jit", not(target_arch = "wasm32"))), allow(dead_code))]
    pub(crate) fn write(&self, name: &str, code: &[u8], listing: &str) {
        (self.0)(name, code, listing)
    }
}

impl std::fmt::Debug for JitDump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JitDump")
    }
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

const MAX_WORDS: usize = 16;
const MAX_THREADS: u64 = 1024;
const CHECK_EVERY: u64 = 4096;
const MAX_CALL_DEPTH: usize = 256;

#[derive(Clone, Copy, PartialEq, Eq)]
struct Mask<const MW: usize>([u64; MW]);

impl<const MW: usize> Mask<MW> {
    const EMPTY: Self = Mask([0; MW]);
    fn first(n: usize) -> Self {
        let mut m = Self::EMPTY;
        for (w, word) in m.0.iter_mut().enumerate() {
            let lo = w * 64;
            if n >= lo + 64 {
                *word = u64::MAX;
            } else if n > lo {
                *word = (1u64 << (n - lo)) - 1;
            }
        }
        m
    }
    #[inline]
    fn and(self, o: Self) -> Self {
        let mut r = self;
        for i in 0..MW {
            r.0[i] &= o.0[i];
        }
        r
    }
    #[inline]
    fn andnot(self, o: Self) -> Self {
        let mut r = self;
        for i in 0..MW {
            r.0[i] &= !o.0[i];
        }
        r
    }
    #[inline]
    fn or(self, o: Self) -> Self {
        let mut r = self;
        for i in 0..MW {
            r.0[i] |= o.0[i];
        }
        r
    }
    /// Equality over the first `nwords` words (the rest are zero in every mask of a block).
    #[inline]
    fn same(&self, o: &Self, nwords: usize) -> bool {
        let mut diff = 0;
        for i in 0..nwords {
            diff |= self.0[i] ^ o.0[i];
        }
        diff == 0
    }
    #[inline]
    fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
    /// The 32 bits of warp `w`.
    #[inline]
    fn warp(&self, w: usize) -> u32 {
        (self.0[w >> 1] >> ((w & 1) * 32)) as u32
    }
    #[inline]
    fn for_each(&self, nwords: usize, mut f: impl FnMut(usize)) {
        for w in 0..nwords {
            let mut bits = self.0[w];
            while bits != 0 {
                let t = bits.trailing_zeros() as usize;
                f(w * 64 + t);
                bits &= bits - 1;
            }
        }
    }
    #[inline]
    fn try_each<E>(&self, nwords: usize, mut f: impl FnMut(usize) -> Result<(), E>) -> Result<(), E> {
        for w in 0..nwords {
            let mut bits = self.0[w];
            while bits != 0 {
                let t = bits.trailing_zeros() as usize;
                f(w * 64 + t)?;
                bits &= bits - 1;
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
struct SimtEntry<const MW: usize> {
    pc: u32,
    rpc: u32,
    mask: Mask<MW>,
}

struct Frame<const MW: usize> {
    func: u32,
    reg_base: usize,
    local_base: u32,
    simt_base: usize,
    done: Mask<MW>,
    call_mask: Mask<MW>,
    call: Option<(u32, usize)>,
}

/// Everything the blocks of one launch share.
struct Ctx<'a> {
    module: &'a Module,
    kernel: &'a str,
    entry: u32,
    dims: LaunchDims,
    params: &'a [u8],
    mem: &'a Memory,
    shared_size: usize,
    stack: usize,
    budget: Option<u64>,
    used: AtomicU64,
    cancel: Option<&'a AtomicBool>,
    abort: AtomicBool,
    /// Whether stores note their element type in memory (`Memory::record_types`).
    types: bool,
    /// The order blocks run in, by linear index (`ExecOptions::block_order`); `None`: in order.
    order: Option<Vec<u64>>,
}

/// Buffers a worker needs, kept per OS thread between launches so that a launch allocates nothing
/// once the buffers have grown to its size.
#[derive(Default)]
struct Scratch<const MW: usize> {
    regs: Vec<u64>,
    out: Vec<u64>,
    out2: Vec<u64>,
    shared: Vec<u8>,
    local: Vec<u8>,
    tid: [Vec<u32>; 3],
    tid_dims: [u32; 3],
    frames: Vec<Frame<MW>>,
    simt: Vec<SimtEntry<MW>>,
}

/// Buffers of native code, kept beside the interpreter's (a separate borrow, so that a launch
/// moves nothing in or out of them).
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
type NativeScratch = jit::Scratch;
#[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
type NativeScratch = ();

thread_local! {
    /// One set of buffers per mask width, and native code's.
    static SCRATCH: std::cell::RefCell<(Scratch<1>, Scratch<16>, NativeScratch)> = std::cell::RefCell::default();
}

/// Runs `f` on this thread's buffers for mask width `MW`, or on fresh ones if they are in use.
fn with_scratch<const MW: usize, T>(f: impl FnOnce(&mut Scratch<MW>, &mut NativeScratch) -> T) -> T {
    let mut f = Some(f);
    let kept = SCRATCH
        .try_with(|s| {
            let mut s = s.try_borrow_mut().ok()?;
            let (one, wide, native) = &mut *s;
            let any: &mut dyn std::any::Any = if MW == 1 { one } else { wide };
            let sc = any.downcast_mut::<Scratch<MW>>()?;
            let r = f.take()?(sc, native);
            // A huge one-off launch should not pin its memory for the rest of the thread's life.
            if sc.regs.capacity() + sc.local.capacity() / 8 >= 1 << 24 {
                *sc = Scratch::default();
            }
            Some(r)
        })
        .ok()
        .flatten();
    match (kept, f) {
        (Some(r), _) => r,
        (None, Some(f)) => f(&mut Scratch::default(), &mut NativeScratch::default()),
        (None, None) => unreachable!("the closure ran and returned"),
    }
}

/// What an access did: its address or the fault, the access size, and whether it writes.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
type Access = (Result<u64, (Fault, Space)>, u8, bool);

/// What native code's slow path needs from a worker, whatever its mask width: one thread's
/// checked load, store or atomic.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
trait ThreadAccess {
    /// Runs `inst` for thread `l` at `addr` (`b`, `c`: the value operands); `None` if `inst`
    /// does not access memory. Gives the result, the access size and whether it writes.
    fn access(&mut self, inst: &Inst, addr: u64, b: u64, c: u64, l: usize) -> Option<Access>;
    /// The fault of thread `l`'s vector load or store `ins` at `addr` when that is not aligned to
    /// the whole vector.
    fn misaligned(&self, ins: &Instr, addr: u64, l: usize) -> Option<Stop>;
    /// `cp.async` of thread `l` (instruction `ins`) from `src` to `dst`, reading `src_size` bytes.
    fn cp_async(&mut self, ins: &Instr, dst: u64, src: u64, src_size: u64, l: usize) -> Res<()>;
}

#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
impl<const MW: usize> ThreadAccess for Worker<'_, MW> {
    fn access(
        &mut self,
        inst: &Inst,
        addr: u64,
        b: u64,
        c: u64,
        l: usize,
    ) -> Option<(Result<u64, (Fault, Space)>, u8, bool)> {
        Some(match *inst {
            Inst::Ld { space, size, .. } => (self.load(space, addr, size, l), size, false),
            Inst::St { space, size, .. } => {
                (self.store(space, addr, size, b & mask_bits(size as u32 * 8), l).map(|_| 0), size, true)
            }
            Inst::Atom { space, op, size, f, .. } => (self.atomic(space, addr, op, size, f, b, c, l), size, true),
            _ => return None,
        })
    }

    fn misaligned(&self, ins: &Instr, addr: u64, l: usize) -> Option<Stop> {
        let (space, size, n, write) = match ins.inst {
            Inst::Ld { space, size, n, .. } => (space, size, n, false),
            Inst::St { space, size, n, .. } => (space, size, n, true),
            _ => return None,
        };
        misaligned_vector(space, n, size, addr).map(|whole| self.vector_fault(space, addr, whole, write, l, ins.line))
    }

    fn cp_async(&mut self, ins: &Instr, dst: u64, src: u64, src_size: u64, l: usize) -> Res<()> {
        match ins.inst {
            Inst::CpAsync { size, .. } => self.cp_async_at(size, dst, src, src_size, l, ins.line),
            _ => Ok(()),
        }
    }
}

/// Per-thread (OS thread) state reused across the blocks it runs.
struct Worker<'a, const MW: usize> {
    ctx: &'a Ctx<'a>,
    n: usize,
    nwords: usize,
    all: Mask<MW>,
    /// Registers, shared and local memory, SIMT stack: borrowed, not owned, so that starting a
    /// launch moves nothing.
    b: &'a mut Scratch<MW>,
    ctaid: [u32; 3],
    exited: Mask<MW>,
    count: u64,
    flushed: u64,
    next_check: u64,
    entry_ready: bool,
    /// The fault of the lowest thread that faulted in the current segment (see [`Worker::fault`]).
    pending: Option<Stop>,
    /// Changes made to mbarriers in this block, and the line of the last failed mbarrier wait
    /// with the changes made before it (`exec/asynchronous.rs`).
    mbar_changes: u64,
    mbar_failed: Option<(u32, u64)>,
}

/// A failure inside a block before it is dressed with kernel, block and thread.
enum Stop {
    Mem {
        lane: usize,
        addr: u64,
        size: u32,
        space: Space,
        fault: Fault,
        write: bool,
        line: u32,
    },
    Barrier {
        line: u32,
    },
    Trap {
        lane: usize,
        line: u32,
    },
    /// An mbarrier wait that can never succeed.
    Stuck {
        line: u32,
    },
    Budget,
    Cancelled,
    Aborted,
}

type Res<T> = Result<T, Stop>;

/// A vector access (`.v2`, `.v4`) must be aligned to its whole size, as on a GPU, where the
/// elements' own checks see only the element size: the whole size when `addr` is not so aligned.
/// The parameter buffer is laid out by the declaration, so its vectors are left to that.
fn misaligned_vector(space: Space, n: u8, size: u8, addr: u64) -> Option<u32> {
    let whole = n as u64 * size as u64;
    (n > 1 && space != Space::KParam && !addr.is_multiple_of(whole)).then_some(whole as u32)
}

fn space_name(s: Space) -> &'static str {
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

fn run_grid(
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
fn over_blocks(
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
fn run_range_on<const MW: usize>(
    ctx: &Ctx,
    range: std::ops::Range<u64>,
    prepare: impl FnOnce(&mut NativeScratch),
    mut block: impl FnMut(&mut Worker<'_, MW>, &mut NativeScratch, u64) -> Res<u64>,
) -> Result<(u64, u64), ExecError> {
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

fn run_blocks<const MW: usize>(ctx: &Ctx, plan: &LaunchPlan, opts: &ExecOptions) -> Result<LaunchStats, ExecError> {
    let threads = plan.threads;
    let run_range = |range: std::ops::Range<u64>| -> Result<(u64, u64), ExecError> {
        let (_, count) = run_range_on::<MW>(ctx, range, |_| {}, |w, _, b| w.run_block(b).map(|()| 0))?;
        Ok((count, count * threads))
    };
    over_blocks(plan, opts, run_range, false)
}

#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
fn run_native<const MW: usize>(
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

/// Picks a monomorphic lane loop for the common compare types.
macro_rules! with_compare {
    ($ty:expr, $cmp:expr, $ftz:expr, $run:ident) => {{
        match ($ty, $cmp, $ftz) {
            (CmpTy::S(W::W32), Cmp::Eq, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) == (y as u32 as i32)) as u64)
            }
            (CmpTy::S(W::W32), Cmp::Ne, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) != (y as u32 as i32)) as u64)
            }
            (CmpTy::S(W::W32), Cmp::Lt, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) < (y as u32 as i32)) as u64)
            }
            (CmpTy::S(W::W32), Cmp::Le, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) <= (y as u32 as i32)) as u64)
            }
            (CmpTy::S(W::W32), Cmp::Gt, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) > (y as u32 as i32)) as u64)
            }
            (CmpTy::S(W::W32), Cmp::Ge, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) >= (y as u32 as i32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Eq, _) => {
                $run!(|x: u64, y: u64| ((x as u32) == (y as u32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Ne, _) => {
                $run!(|x: u64, y: u64| ((x as u32) != (y as u32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Lt, _) => {
                $run!(|x: u64, y: u64| ((x as u32) < (y as u32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Le, _) => {
                $run!(|x: u64, y: u64| ((x as u32) <= (y as u32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Gt, _) => {
                $run!(|x: u64, y: u64| ((x as u32) > (y as u32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Ge, _) => {
                $run!(|x: u64, y: u64| ((x as u32) >= (y as u32)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Eq, _) => {
                $run!(|x: u64, y: u64| ((x as i64) == (y as i64)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Ne, _) => {
                $run!(|x: u64, y: u64| ((x as i64) != (y as i64)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Lt, _) => {
                $run!(|x: u64, y: u64| ((x as i64) < (y as i64)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Le, _) => {
                $run!(|x: u64, y: u64| ((x as i64) <= (y as i64)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Gt, _) => {
                $run!(|x: u64, y: u64| ((x as i64) > (y as i64)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Ge, _) => {
                $run!(|x: u64, y: u64| ((x as i64) >= (y as i64)) as u64)
            }
            (CmpTy::U(W::W64), Cmp::Eq, _) => $run!(|x: u64, y: u64| ((x) == (y)) as u64),
            (CmpTy::U(W::W64), Cmp::Ne, _) => $run!(|x: u64, y: u64| ((x) != (y)) as u64),
            (CmpTy::U(W::W64), Cmp::Lt, _) => $run!(|x: u64, y: u64| ((x) < (y)) as u64),
            (CmpTy::U(W::W64), Cmp::Le, _) => $run!(|x: u64, y: u64| ((x) <= (y)) as u64),
            (CmpTy::U(W::W64), Cmp::Gt, _) => $run!(|x: u64, y: u64| ((x) > (y)) as u64),
            (CmpTy::U(W::W64), Cmp::Ge, _) => $run!(|x: u64, y: u64| ((x) >= (y)) as u64),
            (CmpTy::B(W::W32), Cmp::Eq, _) => {
                $run!(|x: u64, y: u64| ((x as u32) == (y as u32)) as u64)
            }
            (CmpTy::B(W::W32), Cmp::Ne, _) => {
                $run!(|x: u64, y: u64| ((x as u32) != (y as u32)) as u64)
            }
            (CmpTy::B(W::W64), Cmp::Eq, _) => $run!(|x: u64, y: u64| ((x) == (y)) as u64),
            (CmpTy::B(W::W64), Cmp::Ne, _) => $run!(|x: u64, y: u64| ((x) != (y)) as u64),
            (CmpTy::F(F::F32), Cmp::Eq, false) => {
                $run!(|x: u64, y: u64| (f32v(x) == f32v(y)) as u64)
            }
            (CmpTy::F(F::F32), Cmp::Ne, false) => {
                $run!(|x: u64, y: u64| { f32v(x).partial_cmp(&f32v(y)).is_some_and(|o| o.is_ne()) as u64 })
            }
            (CmpTy::F(F::F32), Cmp::Lt, false) => {
                $run!(|x: u64, y: u64| (f32v(x) < f32v(y)) as u64)
            }
            (CmpTy::F(F::F32), Cmp::Le, false) => {
                $run!(|x: u64, y: u64| (f32v(x) <= f32v(y)) as u64)
            }
            (CmpTy::F(F::F32), Cmp::Gt, false) => {
                $run!(|x: u64, y: u64| (f32v(x) > f32v(y)) as u64)
            }
            (CmpTy::F(F::F32), Cmp::Ge, false) => {
                $run!(|x: u64, y: u64| (f32v(x) >= f32v(y)) as u64)
            }
            (ty, cmp, ftz) => $run!(|x: u64, y: u64| compare(ty, cmp, ftz, x, y) as u64),
        }
    }};
}

#[inline(always)]
fn as_un<F: Fn(u64) -> u64>(f: F) -> F {
    f
}
#[inline(always)]
fn as_bin<F: Fn(u64, u64) -> u64>(f: F) -> F {
    f
}
#[inline(always)]
fn as_tern<F: Fn(u64, u64, u64) -> u64>(f: F) -> F {
    f
}

#[inline(always)]
fn un(regs: &[u64], out: &mut [u64], n: usize, a: usize, f: impl Fn(u64) -> u64) {
    for (o, &x) in out[..n].iter_mut().zip(&regs[a..a + n]) {
        *o = f(x);
    }
}

#[inline(always)]
fn bin(regs: &[u64], out: &mut [u64], n: usize, a: usize, b: usize, f: impl Fn(u64, u64) -> u64) {
    for ((o, &x), &y) in out[..n].iter_mut().zip(&regs[a..a + n]).zip(&regs[b..b + n]) {
        *o = f(x, y);
    }
}

#[inline(always)]
fn tern(regs: &[u64], out: &mut [u64], n: usize, a: usize, b: usize, c: usize, f: impl Fn(u64, u64, u64) -> u64) {
    for (((o, &x), &y), &z) in out[..n].iter_mut().zip(&regs[a..a + n]).zip(&regs[b..b + n]).zip(&regs[c..c + n]) {
        *o = f(x, y, z);
    }
}

#[inline]
fn commit<const MW: usize>(regs: &mut [u64], d: usize, out: &[u64], n: usize, m: &Mask<MW>, full: bool, nwords: usize) {
    if full {
        regs[d..d + n].copy_from_slice(&out[..n]);
        return;
    }
    for w in 0..nwords {
        let mut bits = m.0[w];
        if bits == u64::MAX {
            let l = w * 64;
            regs[d + l..d + l + 64].copy_from_slice(&out[l..l + 64]);
            continue;
        }
        while bits != 0 {
            let l = w * 64 + bits.trailing_zeros() as usize;
            regs[d + l] = out[l];
            bits &= bits - 1;
        }
    }
}

#[inline(always)]
fn sx(x: u64, bits: u32) -> i64 {
    let sh = 64 - bits;
    ((x << sh) as i64) >> sh
}

fn w_mask(w: W) -> u64 {
    mask_bits(w.bits())
}

impl<'a, const MW: usize> Worker<'a, MW> {
    fn new(ctx: &'a Ctx<'a>, b: &'a mut Scratch<MW>) -> Self {
        let [bx, by, bz] = ctx.dims.block;
        let n = (bx * by * bz) as usize;
        if b.tid_dims != ctx.dims.block || b.tid[0].len() != n {
            for t in &mut b.tid {
                t.clear();
            }
            for z in 0..bz {
                for y in 0..by {
                    for x in 0..bx {
                        b.tid[0].push(x);
                        b.tid[1].push(y);
                        b.tid[2].push(z);
                    }
                }
            }
            b.tid_dims = ctx.dims.block;
        }
        // Pad scratch to whole 64-lane words so masked copies never slice past the end.
        let padded = n.div_ceil(64) * 64;
        if b.out.len() < padded {
            b.out.resize(padded, 0);
            b.out2.resize(padded, 0);
        }
        // Shared memory is zeroed per block; registers and local memory are zeroed per launch so that
        // nothing of an earlier launch can be read back.
        if b.shared.len() != ctx.shared_size {
            b.shared.resize(ctx.shared_size, 0);
        }
        let local = ctx.stack * n;
        if !b.local.is_empty() || local > 0 {
            b.local.clear();
            b.local.resize(local, 0);
        }
        b.regs.clear();
        b.frames.clear();
        b.simt.clear();
        Worker {
            ctx,
            n,
            nwords: n.div_ceil(64),
            all: Mask::first(n),
            b,
            ctaid: [0; 3],
            exited: Mask::EMPTY,
            count: 0,
            flushed: 0,
            next_check: CHECK_EVERY,
            pending: None,
            entry_ready: false,
            mbar_changes: 0,
            mbar_failed: None,
        }
    }

    fn thread_of(&self, lane: usize) -> [u32; 3] {
        if lane < self.n {
            [self.b.tid[0][lane], self.b.tid[1][lane], self.b.tid[2][lane]]
        } else {
            [0; 3]
        }
    }

    fn dress(&self, s: Stop, _b: u64) -> ExecError {
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

    fn flush(&mut self) {
        let d = self.count - self.flushed;
        self.flushed = self.count;
        self.ctx.used.fetch_add(d * self.n as u64, Ordering::Relaxed);
    }

    #[cold]
    fn check(&mut self) -> Res<()> {
        self.next_check = self.count + CHECK_EVERY;
        let before = self.ctx.used.load(Ordering::Relaxed);
        self.flush();
        if let Some(b) = self.ctx.budget {
            if before + (CHECK_EVERY * self.n as u64) > b && self.ctx.used.load(Ordering::Relaxed) > b {
                return Err(Stop::Budget);
            }
        }
        if self.ctx.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(Stop::Cancelled);
        }
        if self.ctx.abort.load(Ordering::Relaxed) {
            return Err(Stop::Aborted);
        }
        Ok(())
    }

    fn fill_sregs(&mut self, f: &Function, base: usize, only_block: bool) {
        let n = self.n;
        let dims = self.ctx.dims;
        for &(r, s) in &f.sregs {
            let o = (base + r as usize) * n;
            let dst = &mut self.b.regs[o..o + n];
            let uniform = |v: u32| v as u64;
            match s {
                Sreg::Ctaid(d) => dst.fill(uniform(self.ctaid[d as usize])),
                _ if only_block => {}
                Sreg::Tid(d) => {
                    for (x, t) in dst.iter_mut().zip(&self.b.tid[d as usize]) {
                        *x = *t as u64;
                    }
                }
                Sreg::Ntid(d) => dst.fill(dims.block[d as usize] as u64),
                Sreg::Nctaid(d) => dst.fill(dims.grid[d as usize] as u64),
                Sreg::LaneId => dst.iter_mut().enumerate().for_each(|(l, x)| *x = (l & 31) as u64),
                Sreg::WarpId => dst.iter_mut().enumerate().for_each(|(l, x)| *x = (l >> 5) as u64),
                Sreg::NWarpId => dst.fill(n.div_ceil(32) as u64),
                Sreg::SmId | Sreg::GridId | Sreg::Zero => dst.fill(0),
                Sreg::NSmId => dst.fill(1),
                Sreg::LaneMaskEq => dst.iter_mut().enumerate().for_each(|(l, x)| *x = 1u64 << (l & 31)),
                Sreg::LaneMaskLt => dst.iter_mut().enumerate().for_each(|(l, x)| *x = (1u64 << (l & 31)) - 1),
                Sreg::LaneMaskLe => dst.iter_mut().enumerate().for_each(|(l, x)| *x = (2u64 << (l & 31)) - 1),
                Sreg::LaneMaskGt => {
                    dst.iter_mut().enumerate().for_each(|(l, x)| *x = (!((2u64 << (l & 31)) - 1)) & 0xFFFF_FFFF)
                }
                Sreg::LaneMaskGe => {
                    dst.iter_mut().enumerate().for_each(|(l, x)| *x = (!((1u64 << (l & 31)) - 1)) & 0xFFFF_FFFF)
                }
                Sreg::DynSmemSize => dst.fill(dims.dynamic_shared as u64),
                Sreg::TotalSmemSize => dst.fill(self.ctx.shared_size as u64),
            }
        }
    }

    /// Sets up a frame's registers: constants and special registers.
    fn enter(&mut self, f: &Function, base: usize) {
        let n = self.n;
        let need = (base + f.nregs as usize) * n;
        if self.b.regs.len() < need {
            self.b.regs.resize(need, 0);
        }
        for &(r, v) in &f.consts {
            let o = (base + r as usize) * n;
            self.b.regs[o..o + n].fill(v);
        }
        self.fill_sregs(f, base, false);
    }

    fn run_block(&mut self, b: u64) -> Res<()> {
        let g = self.ctx.dims.grid;
        // A 64-bit division costs tens of cycles: 1-D grids (the common case) need none.
        self.ctaid = if g[1] == 1 && g[2] == 1 {
            [b as u32, 0, 0]
        } else {
            [
                (b % g[0] as u64) as u32,
                ((b / g[0] as u64) % g[1] as u64) as u32,
                (b / (g[0] as u64 * g[1] as u64)) as u32,
            ]
        };
        let module = self.ctx.module;
        let f = &module.funcs[self.ctx.entry as usize];
        if !self.entry_ready {
            self.enter(f, 0);
            self.entry_ready = true;
        } else {
            self.fill_sregs(f, 0, true);
        }
        if !self.b.shared.is_empty() {
            self.b.shared.fill(0);
        }
        self.exited = Mask::EMPTY;
        self.mbar_failed = None;
        self.b.frames.clear();
        self.b.simt.clear();
        self.b.frames.push(Frame {
            func: self.ctx.entry,
            reg_base: 0,
            local_base: 0,
            simt_base: 0,
            done: Mask::EMPTY,
            call_mask: self.all,
            call: None,
        });
        self.b.simt.push(SimtEntry { pc: 0, rpc: u32::MAX, mask: self.all });
        self.pending = None;
        self.run()?;
        self.pending.take().map_or(Ok(()), Err)
    }

    /// Where several threads fault, the fault reported is the lowest thread's among those that
    /// fault before the next barrier, shuffle or the block's end: the order in which native code
    /// runs one thread after another, so that every engine names the same thread and line. In
    /// lockstep the lanes run each instruction in thread order and stop at the first that
    /// faults, so the lanes below it have run it and those above have not: the faulting lane is
    /// set aside (its fault kept if it is the lowest so far), the instruction runs on for the
    /// lanes above it, and the segment goes on without it. Gives the lanes still to run, if any.
    fn fault(&mut self, stop: Stop, em: Mask<MW>) -> Res<Mask<MW>> {
        let lane = match stop {
            Stop::Mem { lane, .. } | Stop::Trap { lane, .. } => lane,
            other => return Err(other),
        };
        let lower = Mask::first(lane);
        let this = Mask::first(lane + 1).andnot(lower);
        self.exited = self.exited.or(this);
        if !matches!(&self.pending, Some(Stop::Mem { lane: p, .. } | Stop::Trap { lane: p, .. }) if *p < lane) {
            self.pending = Some(stop);
        }
        Ok(em.andnot(lower).andnot(this))
    }

    /// The fault set aside for the segment now ending, if any.
    fn segment_end(&mut self) -> Res<()> {
        self.pending.take().map_or(Ok(()), Err)
    }

    fn pred_mask(&self, rb: usize, p: R, neg: bool, within: Mask<MW>) -> Mask<MW> {
        let n = self.n;
        let o = (rb + p as usize) * n;
        let regs = &self.b.regs[o..o + n];
        let mut m = Mask::<MW>::EMPTY;
        for w in 0..self.nwords {
            let lo = w * 64;
            let hi = (lo + 64).min(n);
            let mut bits = 0u64;
            for (k, v) in regs[lo..hi].iter().enumerate() {
                bits |= (*v & 1) << k;
            }
            m.0[w] = if neg { !bits } else { bits };
        }
        m.and(within)
    }

    fn run(&mut self) -> Res<()> {
        let module = self.ctx.module;
        let n = self.n;
        'frame: loop {
            let fi = self.b.frames.len() - 1;
            let (func_idx, rb, lb, sb) = {
                let fr = &self.b.frames[fi];
                (fr.func, fr.reg_base, fr.local_base as usize, fr.simt_base)
            };
            let func = &module.funcs[func_idx as usize];
            let insts = &func.insts[..];
            'entry: loop {
                if self.b.simt.len() == sb {
                    if fi == 0 {
                        return Ok(());
                    }
                    let fr = self.b.frames.pop().expect("frame");
                    let (_, caller_lb) = fr.call.expect("call");
                    let back = fr.call_mask.andnot(self.exited);
                    let callee = func;
                    let _ = callee;
                    if let Some(Inst::Call { rets, .. }) = self
                        .b
                        .frames
                        .last()
                        .map(|c| &module.funcs[c.func as usize])
                        .and_then(|cf| cf.insts.get(fr.call.expect("call").0 as usize))
                        .map(|i| &i.inst)
                    {
                        let stride = self.ctx.stack;
                        back.for_each(self.nwords, |l| {
                            for r in rets {
                                let s = l * stride + fr.local_base as usize + r.callee as usize;
                                let d = l * stride + caller_lb + r.caller as usize;
                                self.b.local.copy_within(s..s + r.size as usize, d);
                            }
                        });
                    }
                    continue 'frame;
                }
                let top = *self.b.simt.last().expect("entry");
                let done = self.b.frames[fi].done.or(self.exited);
                let mut mask = top.mask.andnot(done);
                if mask.is_empty() || top.pc == top.rpc {
                    self.b.simt.pop();
                    continue 'entry;
                }
                if top.pc as usize >= insts.len() {
                    self.b.frames[fi].done = self.b.frames[fi].done.or(mask);
                    self.b.simt.pop();
                    continue 'entry;
                }
                let mut pc = top.pc as usize;
                let rpc = top.rpc as usize;
                let mut full = mask.same(&self.all, self.nwords);
                loop {
                    self.count += 1;
                    if self.count >= self.next_check {
                        self.check()?;
                    }
                    let ins = &insts[pc];
                    let (em, efull) = match ins.guard {
                        None => (mask, full),
                        Some((p, neg)) => {
                            let g = self.pred_mask(rb, p, neg, mask);
                            let f = g.same(&self.all, self.nwords);
                            (g, f)
                        }
                    };
                    match &ins.inst {
                        Inst::Bra { target, reconv } => {
                            let t = *target as usize;
                            let not_taken = mask.andnot(em);
                            if em.is_empty() {
                                pc += 1;
                            } else if not_taken.is_empty() {
                                pc = t;
                            } else {
                                let r = *reconv;
                                let mut groups: [(u32, Mask<MW>); 2] = [(t as u32, em), (pc as u32 + 1, not_taken)];
                                let mut k = 0;
                                for i in 0..2 {
                                    if groups[i].0 != r {
                                        groups[k] = groups[i];
                                        k += 1;
                                    }
                                }
                                let top = self.b.simt.last_mut().expect("entry");
                                if top.rpc == r {
                                    match k {
                                        0 => {
                                            self.b.simt.pop();
                                        }
                                        1 => *top = SimtEntry { pc: groups[0].0, rpc: r, mask: groups[0].1 },
                                        _ => {
                                            *top = SimtEntry { pc: groups[1].0, rpc: r, mask: groups[1].1 };
                                            self.b.simt.push(SimtEntry { pc: groups[0].0, rpc: r, mask: groups[0].1 });
                                        }
                                    }
                                } else {
                                    top.pc = r;
                                    for g in groups[..k].iter().rev() {
                                        self.b.simt.push(SimtEntry { pc: g.0, rpc: r, mask: g.1 });
                                    }
                                }
                                continue 'entry;
                            }
                        }
                        Inst::Ret | Inst::Exit => {
                            if !em.is_empty() {
                                if fi == 0 || matches!(ins.inst, Inst::Exit) {
                                    self.exited = self.exited.or(em);
                                } else {
                                    self.b.frames[fi].done = self.b.frames[fi].done.or(em);
                                }
                                mask = mask.andnot(em);
                                if mask.is_empty() {
                                    self.b.simt.pop();
                                    continue 'entry;
                                }
                                full = false;
                            }
                            pc += 1;
                        }
                        Inst::Trap => {
                            if !em.is_empty() {
                                // Every active lane traps here; the lowest is the one that counts.
                                let lane =
                                    em.0.iter()
                                        .enumerate()
                                        .find(|(_, w)| **w != 0)
                                        .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
                                        .unwrap_or(0);
                                self.fault(Stop::Trap { lane, line: ins.line }, em)?;
                                self.exited = self.exited.or(em);
                                mask = mask.andnot(em);
                                full = false;
                                if mask.is_empty() {
                                    self.b.simt.pop();
                                    continue 'entry;
                                }
                            }
                            pc += 1;
                        }
                        Inst::Call { func: callee_idx, args, .. } => {
                            if em.is_empty() {
                                pc += 1;
                            } else {
                                if self.b.frames.len() >= MAX_CALL_DEPTH {
                                    return Err(Stop::Trap { lane: 0, line: ins.line });
                                }
                                self.b.simt.last_mut().expect("entry").pc = pc as u32 + 1;
                                let callee = &module.funcs[*callee_idx as usize];
                                let new_rb = rb + func.nregs as usize;
                                let new_lb = lb + func.frame_size as usize;
                                let stride = self.ctx.stack;
                                em.for_each(self.nwords, |l| {
                                    for a in args {
                                        let s = l * stride + lb + a.caller as usize;
                                        let d = l * stride + new_lb + a.callee as usize;
                                        self.b.local.copy_within(s..s + a.size as usize, d);
                                    }
                                });
                                self.enter(callee, new_rb);
                                let simt_base = self.b.simt.len();
                                self.b.frames.push(Frame {
                                    func: *callee_idx,
                                    reg_base: new_rb,
                                    local_base: new_lb as u32,
                                    simt_base,
                                    done: Mask::EMPTY,
                                    call_mask: em,
                                    call: Some((pc as u32, lb)),
                                });
                                self.b.simt.push(SimtEntry { pc: 0, rpc: u32::MAX, mask: em });
                                continue 'frame;
                            }
                        }
                        Inst::Bar { count, red, d, arrive } => {
                            if !em.is_empty() {
                                self.segment_end()?;
                                self.barrier(fi, func, em, *count, rb, ins.line)?;
                                if let (Some((kind, p, neg)), Some(d)) = (red, d) {
                                    let pm = self.pred_mask(rb, *p, *neg, em);
                                    let v = match kind {
                                        BarRed::Popc => pm.count() as u64,
                                        BarRed::And => (pm == em) as u64,
                                        BarRed::Or => (!pm.is_empty()) as u64,
                                    };
                                    let o = (rb + *d as usize) * n;
                                    em.for_each(self.nwords, |l| self.b.regs[o + l] = v);
                                }
                                let _ = arrive;
                            }
                            pc += 1;
                        }
                        inst => {
                            if !em.is_empty() {
                                let warp_wide = matches!(
                                    inst,
                                    Inst::Shfl { .. }
                                        | Inst::Mma(_)
                                        | Inst::Ldmatrix { .. }
                                        | Inst::Stmatrix { .. }
                                        | Inst::Movmatrix { .. }
                                        | Inst::Elect { .. }
                                        | Inst::Wgmma(_)
                                );
                                if warp_wide {
                                    self.segment_end()?;
                                }
                                let (mut left, mut left_full) = (em, efull);
                                let mut faulted = false;
                                while let Err(stop) = self.exec(inst, rb, lb, left, left_full, ins.line) {
                                    left = self.fault(stop, left)?;
                                    (left_full, faulted) = (false, true);
                                    // A warp-wide instruction that faults stops there: running it
                                    // again for the lanes above would use the same row addresses.
                                    if left.is_empty() || warp_wide {
                                        break;
                                    }
                                }
                                if faulted {
                                    mask = mask.andnot(self.exited);
                                    full = false;
                                    if mask.is_empty() {
                                        self.b.simt.pop();
                                        continue 'entry;
                                    }
                                }
                            }
                            pc += 1;
                        }
                    }
                    if pc == rpc {
                        self.b.simt.pop();
                        continue 'entry;
                    }
                }
            }
        }
    }

    fn barrier(&self, fi: usize, func: &Function, em: Mask<MW>, count: Option<R>, rb: usize, line: u32) -> Res<()> {
        let live = self.all.andnot(self.exited);
        let mut missing = live.andnot(em);
        if missing.is_empty() {
            return Ok(());
        }
        if let Some(c) = count {
            // Named barriers with a thread count: the arriving threads must make up the count.
            let want = self.b.regs[(rb + c as usize) * self.n] as u32;
            if want > 0 && em.count().div_ceil(32) * 32 >= want {
                return Ok(());
            }
        }
        // Lanes parked where every path exits without a barrier will never arrive: on a GPU the
        // barrier completes once they exit, so they do not count.
        let fr = &self.b.frames[fi];
        missing = missing.andnot(fr.done);
        let top = self.b.simt.len() - 1;
        for e in self.b.simt[fr.simt_base..top].iter().rev() {
            let hit = missing.and(e.mask);
            if hit.is_empty() {
                continue;
            }
            let pc = e.pc as usize;
            if pc < func.exit_bound.len() && !func.exit_bound[pc] {
                return Err(Stop::Barrier { line });
            }
            missing = missing.andnot(hit);
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Stop::Barrier { line })
        }
    }

    #[inline]
    fn address(&self, addr: &Addr, rb: usize, lb: usize, l: usize) -> u64 {
        match addr.base {
            Base::Reg(r) => self.b.regs[(rb + r as usize) * self.n + l].wrapping_add(addr.off as u64),
            Base::Abs => addr.off as u64,
            Base::Frame => (lb as u64).wrapping_add(addr.off as u64),
        }
    }

    /// The region and offset a global (or module variable) address falls in.
    #[inline]
    fn global(&self, a: u64) -> Option<(&'a Region, u64)> {
        global_of(self.ctx, a)
    }

    /// Resolves a generic address into its state space and the address within it.
    #[inline]
    /// The fault of thread `l`'s vector access at `addr` that is not aligned to its `whole` size.
    fn vector_fault(&self, space: Space, addr: u64, whole: u32, write: bool, l: usize, line: u32) -> Stop {
        Stop::Mem {
            lane: l,
            addr,
            size: whole,
            space: self.resolve(space, addr).0,
            fault: Fault::Misaligned,
            write,
            line,
        }
    }

    fn resolve(&self, space: Space, a: u64) -> (Space, u64) {
        if space != Space::Generic {
            return (space, a);
        }
        match a & WINDOW_MASK {
            SHARED_BASE => (Space::Shared, a - SHARED_BASE),
            LOCAL_BASE => (Space::Local, a - LOCAL_BASE),
            _ => (Space::Global, a),
        }
    }

    #[inline]
    fn load(&self, space: Space, a: u64, size: u8, l: usize) -> Result<u64, (Fault, Space)> {
        let (sp, a) = self.resolve(space, a);
        let sz = size as u64;
        match sp {
            Space::Global | Space::Const => {
                let (r, off) = self.global(a).ok_or((Fault::OutOfBounds, sp))?;
                r.check(off, sz).map_err(|f| (f, sp))?;
                Ok(r.load(off, size))
            }
            Space::Shared => {
                if a.checked_add(sz).is_none_or(|e| e > self.b.shared.len() as u64) {
                    return Err((Fault::OutOfBounds, sp));
                }
                if a & (sz - 1) != 0 {
                    return Err((Fault::Misaligned, sp));
                }
                Ok(read_le(&self.b.shared[a as usize..a as usize + size as usize]))
            }
            Space::Local => {
                let stride = self.ctx.stack as u64;
                if a.checked_add(sz).is_none_or(|e| e > stride) {
                    return Err((Fault::OutOfBounds, sp));
                }
                let o = l * stride as usize + a as usize;
                Ok(read_le(&self.b.local[o..o + size as usize]))
            }
            Space::KParam => {
                let p = self.ctx.params;
                if a.checked_add(sz).is_none_or(|e| e > p.len() as u64) {
                    return Err((Fault::OutOfBounds, sp));
                }
                Ok(read_le(&p[a as usize..a as usize + size as usize]))
            }
            Space::Generic => Err((Fault::OutOfBounds, sp)),
        }
    }

    /// The `typemap` code of the `st` at `line` of the function running now.
    fn store_code(&self, line: u32) -> u8 {
        let f = self.b.frames.last().map_or(self.ctx.entry, |f| f.func);
        self.ctx.module.funcs[f as usize].store_type(line)
    }

    /// Notes the type of a store that succeeded, where it went to global memory.
    fn note_global(&self, space: Space, a: u64, size: u8, code: u8) {
        let (sp, a) = self.resolve(space, a);
        if sp == Space::Global {
            if let Some((r, off)) = self.global(a) {
                r.note_type(off, size as u64, || code);
            }
        }
    }

    #[inline]
    fn store(&mut self, space: Space, a: u64, size: u8, v: u64, l: usize) -> Result<(), (Fault, Space)> {
        let (sp, a) = self.resolve(space, a);
        let sz = size as u64;
        match sp {
            Space::Global | Space::Const => {
                let (r, off) = self.global(a).ok_or((Fault::OutOfBounds, sp))?;
                r.check(off, sz).map_err(|f| (f, sp))?;
                r.store(off, size, v).map_err(|f| (f, sp))
            }
            Space::Shared => {
                if a.checked_add(sz).is_none_or(|e| e > self.b.shared.len() as u64) {
                    return Err((Fault::OutOfBounds, sp));
                }
                if a & (sz - 1) != 0 {
                    return Err((Fault::Misaligned, sp));
                }
                write_le(&mut self.b.shared[a as usize..a as usize + size as usize], v);
                Ok(())
            }
            Space::Local => {
                let stride = self.ctx.stack as u64;
                if a.checked_add(sz).is_none_or(|e| e > stride) {
                    return Err((Fault::OutOfBounds, sp));
                }
                let o = l * stride as usize + a as usize;
                write_le(&mut self.b.local[o..o + size as usize], v);
                Ok(())
            }
            Space::KParam | Space::Generic => Err((Fault::ReadOnly, sp)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        space: Space,
        a: u64,
        op: AtomOp,
        size: u8,
        f: Option<F>,
        b: u64,
        c: u64,
        l: usize,
    ) -> Result<u64, (Fault, Space)> {
        let (sp, a) = self.resolve(space, a);
        let sz = size as u64;
        let apply = |old: u64| atom_new(op, size, f, old, b, c);
        match sp {
            Space::Global => {
                let (r, off) = self.global(a).ok_or((Fault::OutOfBounds, sp))?;
                r.check(off, sz).map_err(|f| (f, sp))?;
                if self.ctx.types {
                    r.note_type(off, sz, || typemap::of_atomic(f, size));
                }
                if size == 4 && op == AtomOp::Add {
                    return r.fetch_add32(off, b as u32).map(|v| v as u64).map_err(|f| (f, sp));
                }
                r.rmw(off, size, apply).map_err(|f| (f, sp))
            }
            Space::Shared | Space::Local => {
                let (buf, o, lim) = if sp == Space::Shared {
                    let lim = self.b.shared.len() as u64;
                    (&mut self.b.shared, a, lim)
                } else {
                    let stride = self.ctx.stack as u64;
                    let o = l as u64 * stride + a;
                    if a.checked_add(sz).is_none_or(|e| e > stride) {
                        return Err((Fault::OutOfBounds, sp));
                    }
                    (&mut self.b.local, o, u64::MAX)
                };
                if a.checked_add(sz).is_none_or(|e| e > lim) {
                    return Err((Fault::OutOfBounds, sp));
                }
                if a & (sz - 1) != 0 {
                    return Err((Fault::Misaligned, sp));
                }
                let s = &mut buf[o as usize..o as usize + size as usize];
                let old = read_le(s);
                write_le(s, apply(old));
                Ok(old)
            }
            _ => Err((Fault::ReadOnly, sp)),
        }
    }

    /// Scalar loads from global or shared memory: the common case, without the generic dispatch.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn ld1(
        &mut self,
        space: Space,
        size: u8,
        sext: bool,
        dmask: u64,
        d: usize,
        addr: &Addr,
        rb: usize,
        lb: usize,
        em: Mask<MW>,
        line: u32,
    ) -> Res<()> {
        let n = self.n;
        let ctx = self.ctx;
        let sbits = size as u32 * 8;
        let sz = size as u64;
        let (base, fixed) = lane_base(addr, rb, lb, n);
        let off = addr.off as u64;
        let regs = &mut self.b.regs;
        let fail = |lane: usize, addr: u64, fault: Fault| Stop::Mem {
            lane,
            addr,
            size: sz as u32,
            space,
            fault,
            write: false,
            line,
        };
        let ext = |v: u64| {
            if sext && sbits < 64 {
                sx(v, sbits) as u64 & dmask
            } else {
                v & dmask
            }
        };
        if space == Space::Shared {
            let sh = &self.b.shared;
            if let (Some(o), 4, true) = (base, size, em.same(&self.all, self.nwords)) {
                // The matmul-style inner loop: every lane loads a word of shared memory.
                let lim = sh.len() as u64;
                for l in 0..n {
                    let a = regs[o + l].wrapping_add(off);
                    if a >= lim.saturating_sub(3) || a & 3 != 0 {
                        let f = if a & 3 != 0 && a < lim { Fault::Misaligned } else { Fault::OutOfBounds };
                        return Err(fail(l, a, f));
                    }
                    let i = a as usize;
                    let w: [u8; 4] = sh[i..i + 4].try_into().expect("4 bytes");
                    regs[d + l] = ext(u32::from_le_bytes(w) as u64);
                }
                return Ok(());
            }
            return em.try_each(self.nwords, |l| {
                let a = match base {
                    Some(o) => regs[o + l].wrapping_add(off),
                    None => fixed,
                };
                let i = shared_index(sh.len(), a, sz).map_err(|f| fail(l, a, f))?;
                regs[d + l] = ext(read_le(&sh[i..i + size as usize]));
                Ok(())
            });
        }
        let mut cache = RegionCache::default();
        em.try_each(self.nwords, |l| {
            let a = match base {
                Some(o) => regs[o + l].wrapping_add(off),
                None => fixed,
            };
            let (r, o) = cache.get(ctx, a, sz).map_err(|f| fail(l, a, f))?;
            regs[d + l] = ext(r.load(o, size));
            Ok(())
        })
    }

    /// Scalar stores to global or shared memory.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn st1(
        &mut self,
        space: Space,
        size: u8,
        src: usize,
        addr: &Addr,
        rb: usize,
        lb: usize,
        em: Mask<MW>,
        line: u32,
    ) -> Res<()> {
        let n = self.n;
        let ctx = self.ctx;
        let sz = size as u64;
        let code = if ctx.types { self.store_code(line) } else { typemap::UNTYPED };
        let (base, fixed) = lane_base(addr, rb, lb, n);
        let off = addr.off as u64;
        let regs = &self.b.regs;
        let fail = |lane: usize, addr: u64, fault: Fault| Stop::Mem {
            lane,
            addr,
            size: sz as u32,
            space,
            fault,
            write: true,
            line,
        };
        if space == Space::Shared {
            let sh = &mut self.b.shared;
            return em.try_each(self.nwords, |l| {
                let a = match base {
                    Some(o) => regs[o + l].wrapping_add(off),
                    None => fixed,
                };
                let i = shared_index(sh.len(), a, sz).map_err(|f| fail(l, a, f))?;
                write_le(&mut sh[i..i + size as usize], regs[src + l]);
                Ok(())
            });
        }
        let mut cache = RegionCache::default();
        em.try_each(self.nwords, |l| {
            let a = match base {
                Some(o) => regs[o + l].wrapping_add(off),
                None => fixed,
            };
            let (r, o) = cache.get(ctx, a, sz).map_err(|f| fail(l, a, f))?;
            let v = regs[src + l] & mask_bits(size as u32 * 8);
            r.store(o, size, v).map_err(|f| fail(l, a, f))?;
            if ctx.types {
                r.note_type(o, sz, || typemap::with_value(code, size, v, |p| ctx.mem.is_address(p)));
            }
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn exec(&mut self, inst: &Inst, rb: usize, lb: usize, em: Mask<MW>, full: bool, line: u32) -> Res<()> {
        let n = self.n;
        let nw = self.nwords;
        let ro = |r: R| (rb + r as usize) * n;
        // With every lane active the result goes straight into the destination (through cells, as
        // the destination may be a source); otherwise all lanes are computed and the active committed.
        macro_rules! un {
            ($d:expr, $a:expr, $f:expr) => {{
                if full {
                    let c = std::cell::Cell::from_mut(&mut self.b.regs[..]).as_slice_of_cells();
                    let (dd, aa) = (&c[ro($d)..ro($d) + n], &c[ro($a)..ro($a) + n]);
                    let f = as_un($f);
                    for (o, x) in dd.iter().zip(aa) {
                        o.set(f(x.get()));
                    }
                } else {
                    un(&self.b.regs, &mut self.b.out, n, ro($a), $f);
                    commit(&mut self.b.regs, ro($d), &self.b.out, n, &em, full, nw);
                }
            }};
        }
        macro_rules! bin {
            ($d:expr, $a:expr, $b:expr, $f:expr) => {{
                if full {
                    let c = std::cell::Cell::from_mut(&mut self.b.regs[..]).as_slice_of_cells();
                    let (dd, aa, bb) = (&c[ro($d)..ro($d) + n], &c[ro($a)..ro($a) + n], &c[ro($b)..ro($b) + n]);
                    let f = as_bin($f);
                    for ((o, x), y) in dd.iter().zip(aa).zip(bb) {
                        o.set(f(x.get(), y.get()));
                    }
                } else {
                    bin(&self.b.regs, &mut self.b.out, n, ro($a), ro($b), $f);
                    commit(&mut self.b.regs, ro($d), &self.b.out, n, &em, full, nw);
                }
            }};
        }
        macro_rules! tern {
            ($d:expr, $a:expr, $b:expr, $c:expr, $f:expr) => {{
                if full {
                    let c = std::cell::Cell::from_mut(&mut self.b.regs[..]).as_slice_of_cells();
                    let (dd, aa, bb, cc) = (
                        &c[ro($d)..ro($d) + n],
                        &c[ro($a)..ro($a) + n],
                        &c[ro($b)..ro($b) + n],
                        &c[ro($c)..ro($c) + n],
                    );
                    let f = as_tern($f);
                    for (((o, x), y), z) in dd.iter().zip(aa).zip(bb).zip(cc) {
                        o.set(f(x.get(), y.get(), z.get()));
                    }
                } else {
                    tern(&self.b.regs, &mut self.b.out, n, ro($a), ro($b), ro($c), $f);
                    commit(&mut self.b.regs, ro($d), &self.b.out, n, &em, full, nw);
                }
            }};
        }
        match *inst {
            Inst::Un { op, d, a } => exec_un!(un, op, d, a),
            Inst::Bin { op, d, a, b } => exec_bin!(bin, op, d, a, b),
            Inst::Tern { op, d, a, b, c } => exec_tern!(tern, op, d, a, b, c),
            Inst::Bfi { w, d, f, b, pos, len } => {
                let bits = w.bits() as u64;
                let (po, lo) = (ro(pos), ro(len));
                for l in 0..n {
                    self.b.out[l] = bfi(
                        bits,
                        self.b.regs[ro(f) + l],
                        self.b.regs[ro(b) + l],
                        self.b.regs[po + l],
                        self.b.regs[lo + l],
                    );
                }
                commit(&mut self.b.regs, ro(d), &self.b.out, n, &em, full, nw);
            }
            Inst::Setp { ty, cmp, ftz, d, dn, a, b, comb } => {
                macro_rules! run {
                    ($f:expr) => {
                        bin(&self.b.regs, &mut self.b.out, n, ro(a), ro(b), $f)
                    };
                }
                with_compare!(ty, cmp, ftz, run);
                if let Some((op, c, neg)) = comb {
                    let co = ro(c);
                    for l in 0..n {
                        let cv = (self.b.regs[co + l] & 1) ^ neg as u64;
                        let t = self.b.out[l];
                        self.b.out[l] = boolop(op, t, cv);
                        self.b.out2[l] = boolop(op, t ^ 1, cv);
                    }
                } else if dn.is_some() {
                    for l in 0..n {
                        self.b.out2[l] = self.b.out[l] ^ 1;
                    }
                }
                commit(&mut self.b.regs, ro(d), &self.b.out, n, &em, full, nw);
                if let Some(q) = dn {
                    commit(&mut self.b.regs, ro(q), &self.b.out2, n, &em, full, nw);
                }
            }
            Inst::Set { ty, cmp, ftz, d, float_result, a, b, comb } => {
                bin(&self.b.regs, &mut self.b.out, n, ro(a), ro(b), |x, y| compare(ty, cmp, ftz, x, y) as u64);
                if let Some((op, c, neg)) = comb {
                    let co = ro(c);
                    for l in 0..n {
                        let cv = (self.b.regs[co + l] & 1) ^ neg as u64;
                        self.b.out[l] = boolop(op, self.b.out[l], cv);
                    }
                }
                for l in 0..n {
                    self.b.out[l] = match (self.b.out[l] != 0, float_result) {
                        (true, true) => 1.0f32.to_bits() as u64,
                        (false, true) => 0,
                        (true, false) => 0xFFFF_FFFF,
                        (false, false) => 0,
                    };
                }
                commit(&mut self.b.regs, ro(d), &self.b.out, n, &em, full, nw);
            }
            Inst::FrameAddr { d, off } => {
                let v = lb as u64 + off as u64;
                let o = ro(d);
                em.for_each(nw, |l| self.b.regs[o + l] = v);
            }
            Inst::Cvta { to_generic, space, d, a, dmask } => {
                let base = window_base(space);
                if to_generic {
                    un!(d, a, |x| x.wrapping_add(base) & dmask)
                } else {
                    un!(d, a, |x| x.wrapping_sub(base) & dmask)
                }
            }
            Inst::Ld { space, size, sext, dmask, n: 1, d, addr } if matches!(space, Space::Global | Space::Shared) => {
                self.ld1(space, size, sext, dmask, ro(d[0]), &addr, rb, lb, em, line)?;
            }
            Inst::St { space, size, n: 1, a: srcs, addr } if matches!(space, Space::Global | Space::Shared) => {
                self.st1(space, size, ro(srcs[0]), &addr, rb, lb, em, line)?;
            }
            Inst::Ld { space, size, sext, dmask, n: cnt, d, addr } => {
                let sbits = size as u32 * 8;
                em.try_each(nw, |l| {
                    let a = self.address(&addr, rb, lb, l);
                    if let Some(whole) = misaligned_vector(space, cnt, size, a) {
                        return Err(self.vector_fault(space, a, whole, false, l, line));
                    }
                    for (k, &dk) in d.iter().enumerate().take(cnt as usize) {
                        let ea = a.wrapping_add((k * size as usize) as u64);
                        let v = self.load(space, ea, size, l).map_err(|(fault, sp)| Stop::Mem {
                            lane: l,
                            addr: ea,
                            size: size as u32,
                            space: sp,
                            fault,
                            write: false,
                            line,
                        })?;
                        let v = if sext && sbits < 64 { sx(v, sbits) as u64 } else { v };
                        self.b.regs[ro(dk) + l] = v & dmask;
                    }
                    Ok(())
                })?;
            }
            Inst::St { space, size, n: cnt, a: srcs, addr } => {
                let vm = mask_bits(size as u32 * 8);
                let code = if self.ctx.types { self.store_code(line) } else { typemap::UNTYPED };
                em.try_each(nw, |l| {
                    let a = self.address(&addr, rb, lb, l);
                    if let Some(whole) = misaligned_vector(space, cnt, size, a) {
                        return Err(self.vector_fault(space, a, whole, true, l, line));
                    }
                    for (k, &s) in srcs.iter().enumerate().take(cnt as usize) {
                        let ea = a.wrapping_add((k * size as usize) as u64);
                        let v = self.b.regs[ro(s) + l] & vm;
                        self.store(space, ea, size, v, l).map_err(|(fault, sp)| Stop::Mem {
                            lane: l,
                            addr: ea,
                            size: size as u32,
                            space: sp,
                            fault,
                            write: true,
                            line,
                        })?;
                        if self.ctx.types {
                            self.note_global(
                                space,
                                ea,
                                size,
                                typemap::with_value(code, size, v, |p| self.ctx.mem.is_address(p)),
                            );
                        }
                    }
                    Ok(())
                })?;
            }
            Inst::Atom { space, op, size, f, d, addr, b, c } => {
                em.try_each(nw, |l| {
                    let a = self.address(&addr, rb, lb, l);
                    let bv = self.b.regs[ro(b) + l];
                    let cv = self.b.regs[ro(c) + l];
                    let old = self.atomic(space, a, op, size, f, bv, cv, l).map_err(|(fault, sp)| Stop::Mem {
                        lane: l,
                        addr: a,
                        size: size as u32,
                        space: sp,
                        fault,
                        write: true,
                        line,
                    })?;
                    if let Some(d) = d {
                        self.b.regs[ro(d) + l] = old;
                    }
                    Ok(())
                })?;
            }
            Inst::Shfl { mode, d, p, a, b, c } => {
                let (ao, bo, co) = (ro(a), ro(b), ro(c));
                em.for_each(nw, |l| {
                    let (src, ok) = shfl_source(mode, l, self.b.regs[bo + l], self.b.regs[co + l], n);
                    self.b.out[l] = self.b.regs[ao + src] & 0xFFFF_FFFF;
                    self.b.out2[l] = ok as u64;
                });
                commit(&mut self.b.regs, ro(d), &self.b.out, n, &em, full, nw);
                if let Some(p) = p {
                    commit(&mut self.b.regs, ro(p), &self.b.out2, n, &em, full, nw);
                }
            }
            Inst::Vote { mode, d, a, neg } => {
                let pm = self.pred_mask(rb, a, neg, em);
                let o = ro(d);
                for w in 0..n.div_ceil(32) {
                    let act = em.warp(w);
                    if act == 0 {
                        continue;
                    }
                    let ballot = pm.warp(w);
                    let v = match mode {
                        VoteMode::Ballot => ballot as u64,
                        VoteMode::All => (ballot == act) as u64,
                        VoteMode::Any => (ballot != 0) as u64,
                        VoteMode::Uni => (ballot == 0 || ballot == act) as u64,
                    };
                    for k in 0..32 {
                        if act >> k & 1 != 0 {
                            self.b.regs[o + w * 32 + k] = v;
                        }
                    }
                }
            }
            Inst::Activemask { d } => {
                let o = ro(d);
                em.for_each(nw, |l| self.b.regs[o + l] = em.warp(l >> 5) as u64);
            }
            Inst::Redux { op, d, a } => {
                let (ao, o) = (ro(a), ro(d));
                for w in 0..n.div_ceil(32) {
                    let act = em.warp(w);
                    if act == 0 {
                        continue;
                    }
                    let lanes = (0..32).filter(|k| act >> k & 1 != 0).map(|k| self.b.regs[ao + w * 32 + k] as u32);
                    let v = match op {
                        ReduxOp::Add => lanes.fold(0u32, |x, y| x.wrapping_add(y)),
                        ReduxOp::MinU => lanes.min().unwrap_or(0),
                        ReduxOp::MaxU => lanes.max().unwrap_or(0),
                        ReduxOp::MinS => lanes.map(|x| x as i32).min().unwrap_or(0) as u32,
                        ReduxOp::MaxS => lanes.map(|x| x as i32).max().unwrap_or(0) as u32,
                        ReduxOp::And => lanes.fold(u32::MAX, |x, y| x & y),
                        ReduxOp::Or => lanes.fold(0, |x, y| x | y),
                        ReduxOp::Xor => lanes.fold(0, |x, y| x ^ y),
                    };
                    for k in 0..32 {
                        if act >> k & 1 != 0 {
                            self.b.regs[o + w * 32 + k] = v as u64;
                        }
                    }
                }
            }
            Inst::Clock { d, wide } => {
                let v = if wide { self.count } else { self.count & 0xFFFF_FFFF };
                let o = ro(d);
                em.for_each(nw, |l| self.b.regs[o + l] = v);
            }
            Inst::Mma(ref op) => self.mma(op, rb, em),
            Inst::Movmatrix { d, a } => self.movmatrix(d, a, rb, em),
            Inst::Ldmatrix { n: cnt, trans, space, d, addr } => {
                self.ldmatrix(cnt, trans, space, &d, &addr, rb, lb, em, line)?
            }
            Inst::Stmatrix { n: cnt, trans, space, a, addr } => {
                self.stmatrix(cnt, trans, space, &a, &addr, rb, lb, em, line)?
            }
            Inst::CpAsync { size, src_size, dst, src } => {
                em.try_each(nw, |l| self.cp_async(size, src_size, &dst, &src, rb, lb, l, line))?
            }
            Inst::Mbar { op, space, addr, d, b } => self.mbar(op, space, &addr, d, b, rb, lb, em, line)?,
            Inst::CpBulk { to_shared, dst, src, src_space, size, mbar } => em.try_each(nw, |l| {
                self.cp_bulk(to_shared, &dst, &src, src_space, size, mbar.as_ref(), rb, lb, l, line)
            })?,
            Inst::Elect { d, p, mask } => self.elect(d, p, mask, rb, em),
            Inst::Wgmma(ref op) => self.wgmma(op, rb, em, line)?,
            Inst::Nop | Inst::WarpSync => {}
            Inst::Bra { .. } | Inst::Ret | Inst::Exit | Inst::Trap | Inst::Bar { .. } | Inst::Call { .. } => {
                unreachable!("control flow is handled by the scheduler")
            }
        }
        Ok(())
    }
}

/// `bfi`: the low `len` bits of `f` inserted into `b` at `pos` (both taken modulo 256, clipped to
/// the width).
fn bfi(bits: u64, f: u64, b: u64, pos: u64, len: u64) -> u64 {
    let (p, ln) = (pos & 0xFF, len & 0xFF);
    let mut v = b;
    let mut i = 0;
    while i < ln && p + i < bits {
        let bit = (f >> i) & 1;
        v = (v & !(1 << (p + i))) | (bit << (p + i));
        i += 1;
    }
    v & mask_bits(bits as u32)
}

#[inline]
fn global_of<'a>(ctx: &Ctx<'a>, a: u64) -> Option<(&'a Region, u64)> {
    if a & WINDOW_MASK == MODVAR_BASE {
        let i = ((a - MODVAR_BASE) >> REGION_SHIFT) as usize;
        let r = ctx.module.vars.get(i)?;
        Some((r, a & ((1 << REGION_SHIFT) - 1)))
    } else {
        ctx.mem.region(a)
    }
}

/// The region of the previous lane's access: neighbouring lanes nearly always hit the same one.
#[derive(Default)]
struct RegionCache<'a> {
    key: Option<u64>,
    cur: Option<&'a Region>,
}

impl<'a> RegionCache<'a> {
    #[inline]
    fn get(&mut self, ctx: &Ctx<'a>, a: u64, size: u64) -> Result<(&'a Region, u64), Fault> {
        let k = a >> REGION_SHIFT;
        if self.key != Some(k) {
            self.cur = global_of(ctx, a).map(|(r, _)| r);
            self.key = Some(k);
        }
        let r = self.cur.ok_or(Fault::OutOfBounds)?;
        // Placed regions' storage may start after the window's start (memory.rs).
        let o = (a & ((1 << REGION_SHIFT) - 1)).checked_sub(r.origin()).ok_or(Fault::OutOfBounds)?;
        r.check(o, size)?;
        Ok((r, o))
    }
}

/// Bounds and alignment of a shared-memory access; the byte index on success.
#[inline]
fn shared_index(len: usize, a: u64, size: u64) -> Result<usize, Fault> {
    if a.checked_add(size).is_none_or(|e| e > len as u64) {
        return Err(Fault::OutOfBounds);
    }
    if a & (size - 1) != 0 {
        return Err(Fault::Misaligned);
    }
    Ok(a as usize)
}

/// The per-lane base register offset of an address, or its lane-independent value.
#[inline]
fn lane_base(addr: &Addr, rb: usize, lb: usize, n: usize) -> (Option<usize>, u64) {
    match addr.base {
        Base::Reg(r) => (Some((rb + r as usize) * n), 0),
        Base::Abs => (None, addr.off as u64),
        Base::Frame => (None, (lb as u64).wrapping_add(addr.off as u64)),
    }
}

#[inline(always)]
fn read_le(s: &[u8]) -> u64 {
    match s.len() {
        4 => u32::from_le_bytes(s.try_into().expect("4 bytes")) as u64,
        8 => u64::from_le_bytes(s.try_into().expect("8 bytes")),
        2 => u16::from_le_bytes(s.try_into().expect("2 bytes")) as u64,
        _ => s[0] as u64,
    }
}

#[inline(always)]
fn write_le(s: &mut [u8], v: u64) {
    match s.len() {
        4 => s.copy_from_slice(&(v as u32).to_le_bytes()),
        8 => s.copy_from_slice(&v.to_le_bytes()),
        2 => s.copy_from_slice(&(v as u16).to_le_bytes()),
        _ => s[0] = v as u8,
    }
}

#[inline]
fn boolop(op: BoolOp, a: u64, b: u64) -> u64 {
    match op {
        BoolOp::And => a & b,
        BoolOp::Or => a | b,
        BoolOp::Xor => a ^ b,
    }
}

#[inline]
fn compare(ty: CmpTy, cmp: Cmp, ftz: bool, x: u64, y: u64) -> bool {
    use std::cmp::Ordering as O;
    let ord = match ty {
        CmpTy::F(f) => return cmp_f64(to_f64(x, f, ftz), to_f64(y, f, ftz), cmp),
        CmpTy::U(w) | CmpTy::B(w) => {
            let m = w_mask(w);
            (x & m).cmp(&(y & m))
        }
        CmpTy::S(w) => sx(x, w.bits()).cmp(&sx(y, w.bits())),
    };
    match cmp {
        Cmp::Eq | Cmp::Equ => ord == O::Equal,
        Cmp::Ne | Cmp::Neu => ord != O::Equal,
        Cmp::Lt | Cmp::Ltu => ord == O::Less,
        Cmp::Le | Cmp::Leu => ord != O::Greater,
        Cmp::Gt | Cmp::Gtu => ord == O::Greater,
        Cmp::Ge | Cmp::Geu => ord != O::Less,
        Cmp::Num => true,
        Cmp::Nan => false,
    }
}

fn atom_new(op: AtomOp, size: u8, f: Option<F>, old: u64, b: u64, c: u64) -> u64 {
    let bits = size as u32 * 8;
    let m = mask_bits(bits);
    match op {
        AtomOp::Add => old.wrapping_add(b) & m,
        AtomOp::FAdd => match f {
            Some(F::F64) => b64(f64v(old) + f64v(b)),
            // Global f32 atomic add flushes subnormals and rounds to nearest.
            _ => b32(ftz32(ftz32(f32v(old)) + ftz32(f32v(b)))),
        },
        AtomOp::Min(s) => {
            if s {
                if sx(b, bits) < sx(old, bits) {
                    b & m
                } else {
                    old
                }
            } else {
                (old & m).min(b & m)
            }
        }
        AtomOp::Max(s) => {
            if s {
                if sx(b, bits) > sx(old, bits) {
                    b & m
                } else {
                    old
                }
            } else {
                (old & m).max(b & m)
            }
        }
        AtomOp::FMin | AtomOp::FMax => old,
        AtomOp::Inc => {
            if (old & m) >= (b & m) {
                0
            } else {
                (old + 1) & m
            }
        }
        AtomOp::Dec => {
            if old & m == 0 || (old & m) > (b & m) {
                b & m
            } else {
                (old - 1) & m
            }
        }
        AtomOp::And => old & b & m,
        AtomOp::Or => (old | b) & m,
        AtomOp::Xor => (old ^ b) & m,
        AtomOp::Exch => b & m,
        AtomOp::Cas => {
            if old & m == b & m {
                c & m
            } else {
                old
            }
        }
    }
}

/// The lane whose `a` thread `l` of an `n`-thread block reads in `shfl.sync` with operands `b` and
/// `c`, and whether that lane is in range (the predicate). Out of range, or past the block, a lane
/// reads its own value. Shared by both engines so that they agree bit for bit.
pub(crate) fn shfl_source(mode: ShflMode, l: usize, b: u64, c: u64, n: usize) -> (usize, bool) {
    let lane = (l & 31) as u32;
    let base = l & !31;
    let bval = b as u32 & 31;
    let cv = c as u32;
    let cval = cv & 31;
    let seg = (cv >> 8) & 31;
    let max_lane = (lane & seg) | (cval & !seg);
    let min_lane = lane & seg;
    let (j, ok) = match mode {
        ShflMode::Up => {
            let j = lane as i32 - bval as i32;
            (j, j >= max_lane as i32)
        }
        ShflMode::Down => {
            let j = (lane + bval) as i32;
            (j, j <= max_lane as i32)
        }
        ShflMode::Bfly => {
            let j = (lane ^ bval) as i32;
            (j, j <= max_lane as i32)
        }
        ShflMode::Idx => {
            let j = (min_lane | (bval & !seg)) as i32;
            (j, j <= max_lane as i32)
        }
    };
    let src = if ok { base + j as usize } else { l };
    (if src < n { src } else { l }, ok)
}

/// The numbers `0..n` in an order shuffled by `seed` (Fisher-Yates over splitmix64), for
/// [`ExecOptions::block_order`].
fn shuffled(n: u64, seed: u64) -> Vec<u64> {
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
