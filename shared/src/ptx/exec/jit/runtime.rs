//! What generated code runs with and what it calls: the context it reads and writes
//! ([`JitCtx`], whose field offsets are baked into the code), the region table it looks addresses
//! up in ([`Slot`]), the helpers it calls (arithmetic as the interpreter defines it, the checked
//! slow path of memory accesses, the end of a pass over the threads), and the loop that runs a
//! block segment by segment ([`JitKernel::run_block`]). Every `unsafe` operation of running
//! compiled code is in this file.
//!
//! Region memory is made of `AtomicU32` words, so writing it through a pointer is interior
//! mutability; the plain loads and stores emitted by the translator are what relaxed atomic
//! accesses compile to on x86-64 and AArch64. The spill area, the per-thread state and the
//! context are owned by the calling worker for the duration of the call. Instruction budget,
//! cancel flag and the launch's abort flag are checked on every backward branch, and the budget
//! after each block too, so no launch can run unbounded.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use super::compile::{Compiled, JitKernel};
use super::fma::{with_fma, FmaBody};
use super::warp_run::{RunScratch, WarpRun};
use crate::ptx::exec::worker::{Res, Stop, ThreadAccess, Worker};
use crate::ptx::ir::*;
use crate::ptx::math::*;
use crate::ptx::matrix::{self, is_float16x8};
use crate::ptx::memory::Memory;
use crate::ptx::numerics::sfu;
use crate::ptx::numerics::MmaModel;
use crate::ptx::ops::{compare, shfl_source};

/// State of a thread between segments: it exited.
pub(super) const EXITED: u32 = u32::MAX;
pub(super) const ST_DONE: u32 = 0;
pub(super) const ST_FAULT: u32 = 1;
pub(super) const ST_TRAP: u32 = 2;
pub(super) const ST_LIMIT: u32 = 3;
/// The `c` operand of a slow-path call for a load or store (which has none) that asks for the
/// check of a vector access's base alignment alone.
pub(super) const VECTOR_BASE: u64 = u64::MAX;

/// One entry of the region table: index = address >> REGION_SHIFT. Kept to two words because the
/// table is rebuilt for every launch: the per-size limit (`len >> log2(size)`, the count of
/// naturally aligned positions that fit) is one shift in the generated code, which hoists it.
#[repr(C)]
pub(super) struct Slot {
    pub(super) ptr: *mut u8,
    pub(super) len: u64,
}

pub(super) const SLOT_SHIFT: i64 = 4;
const _: () = assert!(std::mem::size_of::<Slot>() == 1 << SLOT_SHIFT);

impl Slot {
    const EMPTY: Slot = Slot { ptr: std::ptr::null_mut(), len: 0 };
}

/// What generated code reads and writes; field offsets are baked into the code.
#[repr(C)]
pub(super) struct JitCtx {
    pub(super) table: *const Slot,
    /// The table's last index: a null entry that every address past the table maps to.
    pub(super) table_max: u64,
    pub(super) shared: *mut u8,
    pub(super) shared_len: u64,
    /// Per access size `1 << k`: `len >> k` for the block's shared memory (see [`Slot`]).
    pub(super) shared_lim: [u64; 4],
    pub(super) params: *const u8,
    pub(super) spill: *mut u64,
    pub(super) state: *mut u32,
    pub(super) limit: u64,
    pub(super) cancel: *const u8,
    pub(super) abort: *const u8,
    pub(super) count: u64,
    pub(super) n: u64,
    pub(super) ntid: [u64; 3],
    pub(super) nctaid: [u64; 3],
    pub(super) ctaid: [u64; 3],
    pub(super) fault: u64,
    pub(super) stop_thread: u64,
    pub(super) stop_pc: u64,
    pub(super) rt: *mut c_void,
    /// The value a slow-path access returns (its trampoline has no return value).
    pub(super) slow_value: u64,
}

/// The Rust side of a call, reached by the slow-path helpers.
struct Rt<'w> {
    w: &'w mut dyn ThreadAccess,
    stop: Option<Stop>,
    /// The run that keeps its accumulator tiles, with the worker's buffers of runs and the
    /// registers a thread has, for [`h_hand_back_tiles`].
    kept: Option<(&'w WarpRun, &'w mut RunScratch, usize)>,
}

pub(super) type EntryFn = unsafe extern "C" fn(*mut JitCtx, u32) -> u32;

/// A shuffle operand: its register, or its value when it is a constant.
#[derive(Clone, Copy)]
pub(super) struct Src {
    pub(super) reg: R,
    pub(super) konst: Option<u64>,
}

#[derive(Clone, Copy)]
pub(super) struct ShflInfo {
    pub(super) mode: ShflMode,
    pub(super) d: R,
    pub(super) p: Option<R>,
    pub(super) a: Src,
    pub(super) b: Src,
    pub(super) c: Src,
}

/// Boundary `k` (segment `k + 1` resumes after it): a barrier, a shuffle or a run of consecutive
/// warp matrix instructions (`warp`, which the caller of the code runs in order with the
/// interpreter's code, see `Worker::warp_in_spill`).
#[derive(Clone)]
pub(super) struct Boundary {
    pub(super) line: u32,
    pub(super) shfl: Option<ShflInfo>,
    pub(super) warp: Vec<Instr>,
    /// The constant registers among the warp instructions' operands, with their values.
    pub(super) consts: Vec<(R, u64)>,
    /// The warp instructions' plan for running them warp by warp, where they allow it.
    pub(super) run: Option<WarpRun>,
}

/// A float `mma` of shape m16n8kK ([`is_float16x8`]) for every warp with a live thread, straight
/// on the spill area (`spill[l * nregs + r]`): `ptx::matrix`'s own arithmetic, which the
/// interpreter runs too, compiled here with FMA instructions where the CPU has them
/// ([`with_fma`]). Lanes past the end of the block read as zero; threads that exited are read,
/// not written (`Worker::warp_in_spill`).
fn mma_in_spill(op: &Mma, model: MmaModel, consts: &[(R, u64)], spill: &mut [u64], nregs: usize, state: &[u32]) {
    with_fma(MmaInSpill { op, model, consts, spill, nregs, state })
}

/// [`mma_in_spill`]'s operands, as [`with_fma`] runs it.
struct MmaInSpill<'s> {
    op: &'s Mma,
    model: MmaModel,
    consts: &'s [(R, u64)],
    spill: &'s mut [u64],
    nregs: usize,
    state: &'s [u32],
}

impl FmaBody for MmaInSpill<'_> {
    type Out = ();
    /// `F16C` does not matter here: the body converts no f16 rows of its own.
    #[inline(always)]
    fn run<const F16C: bool>(self) {
        mma_in_spill_body(self.op, self.model, self.consts, self.spill, self.nregs, self.state)
    }
}

#[inline(always)]
fn mma_in_spill_body(op: &Mma, model: MmaModel, consts: &[(R, u64)], spill: &mut [u64], nregs: usize, state: &[u32]) {
    let n = state.len();
    let operands = [&op.a[..], &op.b[..], &op.c[..]];
    // Each operand register's constant value, if it has one (`u64::MAX` as "none" would be a
    // valid f64 bit pattern, so an option).
    let konst: [[Option<u64>; 8]; 3] = operands.map(|rs| {
        let mut k = [None; 8];
        for (i, r) in rs.iter().enumerate().take(8) {
            k[i] = consts.iter().find(|c| c.0 == *r).map(|c| c.1);
        }
        k
    });
    let mut out = [0u64; 32 * 4];
    let nd = op.d.len();
    for w in 0..n.div_ceil(32) {
        let lanes = w * 32..(w * 32 + 32).min(n);
        if state[lanes.clone()].iter().all(|&s| s == EXITED) {
            continue;
        }
        let read = |o: usize, lane: usize, i: usize| {
            let l = w * 32 + lane;
            match konst[o][i] {
                Some(v) => v,
                None if l < n => spill[l * nregs + operands[o][i] as usize],
                None => 0,
            }
        };
        matrix::mma_float(op, model, read, |lane, i, v| out[lane * nd + i] = v);
        for l in lanes {
            if state[l] != EXITED {
                for (i, &d) in op.d.iter().enumerate() {
                    spill[l * nregs + d as usize] = out[(l - w * 32) * nd + i];
                }
            }
        }
    }
}

pub(super) struct Meta {
    pub(super) nregs: usize,
    pub(super) bounds: Vec<Boundary>,
    /// The boundary whose run keeps its accumulator tiles between its passes, if one does (see
    /// `analysis::Resident`).
    pub(super) resident: Option<u32>,
    /// Threads one pass of the code runs (1, or [`LANES`]): the threads of a group always share
    /// their state, so the runtime reads one state per group.
    pub(super) width: usize,
}

impl Meta {
    /// The run that keeps its accumulator tiles between its passes, if one does.
    fn kept_run(&self) -> Option<&WarpRun> {
        self.resident.and_then(|k| self.bounds[k as usize].run.as_ref())
    }
}

// Helpers called from generated code. Each receives the address of an instruction copy owned by
// the `JitKernel` whose code calls it.

macro_rules! scalar1 {
    ($d:expr, $a:expr, $f:expr) => {{
        let f = crate::ptx::ops::as_un($f);
        f($a)
    }};
}
macro_rules! scalar2 {
    ($d:expr, $a:expr, $b:expr, $f:expr) => {{
        let f = crate::ptx::ops::as_bin($f);
        f($a, $b)
    }};
}
macro_rules! scalar3 {
    ($d:expr, $a:expr, $b:expr, $c:expr, $f:expr) => {{
        let f = crate::ptx::ops::as_tern($f);
        f($a, $b, $c)
    }};
}

pub(super) extern "C" fn h_un(ins: *const Instr, x: u64) -> u64 {
    // SAFETY: `ins` is a live instruction copy owned by the calling kernel.
    let ins = unsafe { &*ins };
    match ins.inst {
        Inst::Un { op, .. } => exec_un!(scalar1, op, (), x),
        _ => 0,
    }
}

pub(super) extern "C" fn h_bin(ins: *const Instr, x: u64, y: u64) -> u64 {
    // SAFETY: as in `h_un`.
    let ins = unsafe { &*ins };
    match ins.inst {
        Inst::Bin { op, .. } => exec_bin!(scalar2, op, (), x, y),
        _ => 0,
    }
}

pub(super) extern "C" fn h_tern(ins: *const Instr, x: u64, y: u64, z: u64) -> u64 {
    // SAFETY: as in `h_un`.
    let ins = unsafe { &*ins };
    match ins.inst {
        Inst::Tern { op, .. } => exec_tern!(scalar3, op, (), x, y, z),
        _ => 0,
    }
}

pub(super) extern "C" fn h_cmp(ins: *const Instr, x: u64, y: u64) -> u64 {
    // SAFETY: as in `h_un`.
    let ins = unsafe { &*ins };
    match ins.inst {
        Inst::Setp { ty, cmp, ftz, .. } | Inst::Set { ty, cmp, ftz, .. } => compare(ty, cmp, ftz, x, y) as u64,
        _ => 0,
    }
}

/// `ex2.approx.f32` without `.ftz`, exactly as the interpreter computes it.
pub(super) extern "C" fn h_ex2(x: f32) -> u32 {
    b32(ex2(x)) as u32
}

/// `rcp.approx.f32`, `sqrt.approx.f32` and `rsqrt.approx.f32` without `.ftz`, exactly as the
/// interpreter computes them in the running launch's model.
pub(super) extern "C" fn h_rcp_approx(x: f32) -> u32 {
    rcp_approx32(sfu::active(), x.to_bits(), false)
}
pub(super) extern "C" fn h_sqrt_approx(x: f32) -> u32 {
    sqrt_approx32(sfu::active(), x.to_bits(), false)
}
pub(super) extern "C" fn h_rsqrt_approx(x: f32) -> u32 {
    rsqrt_approx32(sfu::active(), x.to_bits(), false)
}

pub(super) extern "C" fn h_bfi(bits: u64, fv: u64, b: u64, pos: u64, len: u64) -> u64 {
    crate::ptx::ops::bfi(bits, fv, b, pos, len)
}

/// The interpreter's checked load, store or atomic for one thread.
pub(super) extern "C" fn h_mem(ctx: *mut JitCtx, ins: *const Instr, thread: u64, addr: u64, b: u64, c: u64) -> u64 {
    // SAFETY: `ctx` is the context of the running call and `rt` points to that call's `Rt`, which
    // the caller does not touch until the call returns; `ins` as in `h_un`.
    let (ctx, ins) = unsafe { (&mut *ctx, &*ins) };
    let rt = unsafe { &mut *(ctx.rt as *mut Rt<'_>) };
    let l = thread as usize;
    if matches!(ins.inst, Inst::CpAsync { .. }) {
        // `addr` the destination, `b` the source, `c` the bytes to read.
        if let Err(stop) = rt.w.cp_async(ins, addr, b, c, l) {
            rt.stop = Some(stop);
            ctx.fault = 1;
        }
        return 0;
    }
    if c == VECTOR_BASE && matches!(ins.inst, Inst::Ld { .. } | Inst::St { .. }) {
        if let Some(stop) = rt.w.misaligned(ins, addr, l) {
            rt.stop = Some(stop);
            ctx.fault = 1;
        }
        return 0;
    }
    let Some((res, size, write)) = rt.w.access(&ins.inst, addr, b, c, l) else {
        return 0;
    };
    match res {
        Ok(v) => v,
        Err((fault, space)) => {
            rt.stop = Some(Stop::Mem { lane: l, addr, size: size as u32, space, fault, write, line: ins.line });
            ctx.fault = 1;
            0
        }
    }
}

/// The boundary state every live thread waits at (`None`: all exited), or the lower boundary index
/// of two that differ.
fn waiting(state: &[u32], width: usize) -> Result<Option<u32>, u32> {
    // The common case, every thread at one boundary: a single pass, one state per group.
    if let Some(&first) = state.first() {
        if first != EXITED && state.iter().step_by(width).all(|&s| s == first) {
            return Ok(Some(first));
        }
    }
    let mut at = None;
    for &s in state.iter().step_by(width) {
        if s == EXITED {
            continue;
        }
        match at {
            None => at = Some(s),
            Some(a) if a != s => return Err(a.min(s) - 1),
            _ => {}
        }
    }
    Ok(at)
}

/// Performs shuffle `s - 1` (if that boundary is one) for the threads waiting after it, with the
/// interpreter's rule for every lane: the source lane from mode, `b` and `c`, its `a` (a lane past
/// the block, or out of the segment, reads its own), the predicate whether the source was in range.
fn exchange(meta: &Meta, s: u32, state: &[u32], spill: &mut [u64]) {
    let Some(sh) = meta.bounds.get(s as usize - 1).and_then(|b| b.shfl) else {
        return;
    };
    let n = state.len();
    let nr = meta.nregs;
    let read = |spill: &[u64], l: usize, x: Src| x.konst.unwrap_or_else(|| spill[l * nr + x.reg as usize]);
    let mut out = Vec::with_capacity(n);
    // The index reads several parallel lists.
    #[allow(clippy::needless_range_loop)]
    for l in 0..n {
        if state[l] == EXITED {
            out.push((0, 0));
            continue;
        }
        let (src, ok) = shfl_source(sh.mode, l, read(spill, l, sh.b), read(spill, l, sh.c), n);
        out.push((read(spill, src, sh.a) & 0xFFFF_FFFF, ok as u64));
    }
    for (l, (v, ok)) in out.into_iter().enumerate() {
        if state[l] == EXITED {
            continue;
        }
        spill[l * nr + sh.d as usize] = v;
        if let Some(p) = sh.p {
            spill[l * nr + p as usize] = ok;
        }
    }
}

/// Native code is about to read or write registers of the tiles the kept run holds: they go back
/// to the spill area, if they are not there yet (the first thread to ask writes them for the
/// block; for the others there is nothing left to do).
pub(super) extern "C" fn h_hand_back_tiles(ctx: *mut JitCtx) -> u64 {
    // SAFETY: as in `h_mem`; the spill area holds `n * nregs` words while the kernel has
    // boundaries (`run_block`), and generated code does not touch it during the call.
    let ctx = unsafe { &mut *ctx };
    let rt = unsafe { &mut *(ctx.rt as *mut Rt<'_>) };
    if let Some((run, scratch, nregs)) = rt.kept.as_mut() {
        let (n, nregs) = (ctx.n as usize, *nregs);
        let spill = unsafe { std::slice::from_raw_parts_mut(ctx.spill, n * nregs) };
        run.flush(scratch, spill, nregs, n);
    }
    0
}

/// At the end of a pass over the threads: the segment to run next when every live thread waits at
/// the same boundary (after its exchange), or 0 to return to the caller (which also runs the warp
/// matrix instructions: they need the worker, and may fault).
pub(super) extern "C" fn h_boundary(ctx: *mut JitCtx, meta: *const Meta) -> u64 {
    // SAFETY: `ctx` is the context of the running call, whose `state` holds `n` entries and whose
    // spill area `n * nregs` words while the kernel has boundaries (`run_block`); `meta` is owned
    // by the calling kernel.
    let (ctx, meta) = unsafe { (&mut *ctx, &*meta) };
    let n = ctx.n as usize;
    let state = unsafe { std::slice::from_raw_parts(ctx.state, n) };
    match waiting(state, meta.width) {
        Ok(Some(s)) if meta.bounds[s as usize - 1].warp.is_empty() => {
            let spill = unsafe { std::slice::from_raw_parts_mut(ctx.spill, n * meta.nregs) };
            exchange(meta, s, state, spill);
            s as u64
        }
        _ => 0,
    }
}

static NEVER: u8 = 0;

/// The compiled code a launch runs (see [`JitKernel::variant`]).
#[derive(Clone, Copy)]
pub(crate) struct Variant<'k>(pub(super) &'k Compiled);

impl Variant<'_> {
    /// Whether this is the code for groups of threads in vector lanes.
    pub(crate) fn in_lanes(self) -> bool {
        self.0.meta.width > 1
    }
}

/// Buffers of a worker that runs compiled kernels.
#[derive(Default)]
pub(crate) struct Scratch {
    state: Vec<u32>,
    spill: Vec<u64>,
    table: Vec<Slot>,
    /// The buffers of runs of warp instructions (`WarpRun::run`).
    warp: RunScratch,
}

// SAFETY: the table holds addresses of region memory only while a launch borrows that memory;
// it is rebuilt for every launch before use.
unsafe impl Send for Scratch {}

impl Scratch {
    #[inline]
    pub(crate) fn prepare(&mut self, mem: &Memory) {
        self.table.clear();
        self.table.push(Slot::EMPTY);
        self.table.extend(mem.slot_regions().map(|r| match r {
            Some((ptr, len)) => Slot { ptr, len },
            None => Slot::EMPTY,
        }));
        self.table.push(Slot::EMPTY);
    }
}

impl JitKernel {
    /// [`JitKernel::run_block`], where a fault is named as every engine names it: the lowest
    /// thread's of its segment (see the interpreter's `Worker::fault`). One-thread code runs the
    /// threads in that order and stops at the first fault, so it names it by itself; code for
    /// groups runs sixteen lanes side by side and the rows of a block out of order, so a block it
    /// stops on runs again as one-thread code, which names the fault. The block's writes before
    /// the fault stay (the launch has failed either way); should the second run not fault (a
    /// fault that depended on what the first run wrote), the first run's fault stands.
    pub(in crate::ptx::exec) fn run_block_named<const MW: usize>(
        &self,
        v: Variant<'_>,
        w: &mut Worker<'_, MW>,
        js: &mut Scratch,
        b: u64,
    ) -> Res<u64> {
        match self.run_block(v, w, js, b) {
            Err(first @ (Stop::Mem { .. } | Stop::Trap { .. })) if v.in_lanes() => {
                match self.run_block(Variant(&self.one), w, js, b) {
                    Err(again @ (Stop::Mem { .. } | Stop::Trap { .. })) => Err(again),
                    _ => Err(first),
                }
            }
            other => other,
        }
    }

    /// Runs block `b` on worker `w` with code `v` (from [`JitKernel::variant`]); returns the
    /// thread-instructions executed.
    pub(in crate::ptx::exec) fn run_block<const MW: usize>(
        &self,
        v: Variant<'_>,
        w: &mut Worker<'_, MW>,
        js: &mut Scratch,
        b: u64,
    ) -> Res<u64> {
        let v = v.0;
        let ctx = w.ctx;
        let g = ctx.dims.grid;
        // A 64-bit division costs tens of cycles: 1-D grids (the common case) need none.
        let ctaid: [u64; 3] = if g[1] == 1 && g[2] == 1 {
            [b, 0, 0]
        } else {
            [b % g[0] as u64, (b / g[0] as u64) % g[1] as u64, b / (g[0] as u64 * g[1] as u64)]
        };
        // The native context takes the 64-bit values computed here rather than reading back
        // `w.ctaid`: a wide load of narrow stores just made stalls store forwarding.
        w.ctaid = ctaid.map(|v| v as u32);
        if ctx.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(Stop::Cancelled);
        }
        if ctx.abort.load(Ordering::Relaxed) {
            return Err(Stop::Aborted);
        }
        if !w.b.shared.is_empty() {
            w.b.shared.fill(0);
        }
        js.warp.new_block();
        let n = w.n;
        // A kernel without boundaries keeps no thread state (see `Tx::build`).
        let stateful = !v.meta.bounds.is_empty();
        js.state.clear();
        if stateful {
            js.state.resize(n, 0);
        }
        if stateful && js.spill.len() < n * self.nregs {
            js.spill.resize(n * self.nregs, 0);
        }
        let mut total = 0u64;
        let mut seg = 0u32;
        loop {
            let limit = match ctx.budget {
                Some(bud) => bud.saturating_sub(ctx.used.load(Ordering::Relaxed)),
                None => u64::MAX,
            };
            let dims = ctx.dims;
            let mut jc = JitCtx {
                table: js.table.as_ptr(),
                table_max: js.table.len() as u64 - 1,
                shared: w.b.shared.as_mut_ptr(),
                shared_len: w.b.shared.len() as u64,
                shared_lim: [0, 1, 2, 3].map(|k| w.b.shared.len() as u64 >> k),
                params: ctx.params.as_ptr(),
                spill: js.spill.as_mut_ptr(),
                state: js.state.as_mut_ptr(),
                limit,
                cancel: ctx.cancel.map_or(&NEVER as *const u8, |c| c.as_ptr() as *const u8),
                abort: ctx.abort.as_ptr() as *const u8,
                count: 0,
                n: n as u64,
                ntid: dims.block.map(|v| v as u64),
                nctaid: dims.grid.map(|v| v as u64),
                ctaid,
                fault: 0,
                stop_thread: 0,
                stop_pc: 0,
                rt: std::ptr::null_mut(),
                slow_value: 0,
            };
            let kept = v.meta.kept_run().map(|run| (run, &mut js.warp, self.nregs));
            let mut rt = Rt { w: &mut *w, stop: None, kept };
            jc.rt = &mut rt as *mut Rt<'_> as *mut c_void;
            // SAFETY: the code was compiled from this kernel for this signature; every pointer in
            // `jc` is valid for the call (see the module docs for what the code may touch).
            let status = unsafe { (v.entry)(&mut jc, seg) };
            let stop = rt.stop.take();
            total += jc.count;
            // The shared count only serves budget checks (as in the interpreter); without a
            // budget a locked add per block would be most of a small launch's cost. Code checks the
            // budget on backward branches only, so a loop-free kernel's blocks are judged here,
            // after each segment: a launch of millions of short blocks stops as the interpreter's
            // does.
            if let Some(bud) = ctx.budget {
                let used = ctx.used.fetch_add(jc.count, Ordering::Relaxed) + jc.count;
                if status == ST_DONE && used > bud {
                    return Err(Stop::Budget);
                }
            }
            match status {
                ST_DONE if !stateful => return Ok(total),
                ST_DONE => {}
                ST_FAULT => return Err(stop.unwrap_or(Stop::Aborted)),
                ST_TRAP => {
                    return Err(Stop::Trap {
                        lane: jc.stop_thread as usize,
                        line: self.lines.get(jc.stop_pc as usize).copied().unwrap_or(0),
                    })
                }
                _ => {
                    if ctx.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                        return Err(Stop::Cancelled);
                    }
                    if ctx.abort.load(Ordering::Relaxed) {
                        return Err(Stop::Aborted);
                    }
                    return Err(Stop::Budget);
                }
            }
            match waiting(&js.state, v.meta.width) {
                Ok(None) => return Ok(total),
                Ok(Some(s)) => {
                    let bound = &v.meta.bounds[s as usize - 1];
                    let keep = v.meta.resident == Some(s - 1);
                    if let Some(kept) = v.meta.kept_run() {
                        if !keep {
                            // This boundary's warp instructions may read the tiles' registers
                            // from the spill area.
                            kept.flush(&mut js.warp, &mut js.spill, self.nregs, n);
                        }
                    }
                    let fast = bound
                        .run
                        .as_ref()
                        .is_some_and(|r| r.run(w, &mut js.warp, &mut js.spill, self.nregs, &js.state, keep));
                    for ins in bound.warp.iter().filter(|_| !fast) {
                        match &ins.inst {
                            Inst::Mma(op) if is_float16x8(op) => {
                                mma_in_spill(op, w.ctx.mma, &bound.consts, &mut js.spill, self.nregs, &js.state)
                            }
                            _ => {
                                let state = &js.state;
                                w.warp_in_spill(ins, &mut js.spill, self.nregs, |l| state[l] != EXITED)?;
                            }
                        }
                    }
                    exchange(&v.meta, s, &js.state, &mut js.spill);
                    seg = s;
                }
                Err(k) => return Err(Stop::Barrier { line: v.meta.bounds[k as usize].line }),
            }
        }
    }
}
