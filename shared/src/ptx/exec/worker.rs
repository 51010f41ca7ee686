//! A worker: the per-OS-thread state that runs one block after another, and what both engines
//! run a block over (the launch's shared context, the block's lane masks, registers, shared and
//! local memory, the reconvergence stack, and the `Stop` a block fails with).
//!
//! The interpreter (`interp.rs`) and native code (`jit/`) both run on a [`Worker`]: native code
//! keeps its registers in its own buffers but uses the worker's shared memory, its checked memory
//! accesses (`access.rs`, through [`ThreadAccess`]) and its warp matrix instructions.

use std::sync::atomic::{AtomicBool, AtomicU64};

use crate::ptx::ir::*;
use crate::ptx::memory::{Fault, Memory};
use crate::ptx::module::Module;
use crate::ptx::numerics::MmaModel;

#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
use super::jit;
use super::launch::LaunchDims;

/// Mask words of the widest block (1024 threads).
pub(super) const MAX_WORDS: usize = 16;
pub(super) const CHECK_EVERY: u64 = 4096;
pub(super) const MAX_CALL_DEPTH: usize = 256;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Mask<const MW: usize>(pub(super) [u64; MW]);

impl<const MW: usize> Mask<MW> {
    pub(super) const EMPTY: Self = Mask([0; MW]);
    pub(super) fn first(n: usize) -> Self {
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
    pub(super) fn and(self, o: Self) -> Self {
        let mut r = self;
        for i in 0..MW {
            r.0[i] &= o.0[i];
        }
        r
    }
    #[inline]
    pub(super) fn andnot(self, o: Self) -> Self {
        let mut r = self;
        for i in 0..MW {
            r.0[i] &= !o.0[i];
        }
        r
    }
    #[inline]
    pub(super) fn or(self, o: Self) -> Self {
        let mut r = self;
        for i in 0..MW {
            r.0[i] |= o.0[i];
        }
        r
    }
    /// Equality over the first `nwords` words (the rest are zero in every mask of a block).
    #[inline]
    pub(super) fn same(&self, o: &Self, nwords: usize) -> bool {
        let mut diff = 0;
        for i in 0..nwords {
            diff |= self.0[i] ^ o.0[i];
        }
        diff == 0
    }
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    pub(super) fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
    /// The 32 bits of warp `w`.
    #[inline]
    pub(super) fn warp(&self, w: usize) -> u32 {
        (self.0[w >> 1] >> ((w & 1) * 32)) as u32
    }
    #[inline]
    pub(super) fn for_each(&self, nwords: usize, mut f: impl FnMut(usize)) {
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
    pub(super) fn try_each<E>(&self, nwords: usize, mut f: impl FnMut(usize) -> Result<(), E>) -> Result<(), E> {
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
pub(super) struct SimtEntry<const MW: usize> {
    pub(super) pc: u32,
    pub(super) rpc: u32,
    pub(super) mask: Mask<MW>,
}

pub(super) struct Frame<const MW: usize> {
    pub(super) func: u32,
    pub(super) reg_base: usize,
    pub(super) local_base: u32,
    pub(super) simt_base: usize,
    pub(super) done: Mask<MW>,
    pub(super) call_mask: Mask<MW>,
    pub(super) call: Option<(u32, usize)>,
}

/// Everything the blocks of one launch share.
pub(super) struct Ctx<'a> {
    pub(super) module: &'a Module,
    pub(super) kernel: &'a str,
    pub(super) entry: u32,
    pub(super) dims: LaunchDims,
    pub(super) params: &'a [u8],
    pub(super) mem: &'a Memory,
    pub(super) shared_size: usize,
    pub(super) stack: usize,
    pub(super) budget: Option<u64>,
    pub(super) used: AtomicU64,
    pub(super) cancel: Option<&'a AtomicBool>,
    pub(super) abort: AtomicBool,
    /// Whether stores note their element type in memory (`Memory::record_types`).
    pub(super) types: bool,
    /// The order blocks run in, by linear index (`ExecOptions::block_order`); `None`: in order.
    pub(super) order: Option<Vec<u64>>,
    /// The arithmetic of `mma` and `wgmma` (`ExecOptions::mma_model`).
    pub(super) mma: MmaModel,
}

/// Buffers a worker needs, kept per OS thread between launches so that a launch allocates nothing
/// once the buffers have grown to its size.
#[derive(Default)]
pub(super) struct Scratch<const MW: usize> {
    pub(super) regs: Vec<u64>,
    pub(super) out: Vec<u64>,
    pub(super) out2: Vec<u64>,
    pub(super) shared: Vec<u8>,
    pub(super) local: Vec<u8>,
    pub(super) tid: [Vec<u32>; 3],
    pub(super) tid_dims: [u32; 3],
    pub(super) frames: Vec<Frame<MW>>,
    pub(super) simt: Vec<SimtEntry<MW>>,
}

/// Buffers of native code, kept beside the interpreter's (a separate borrow, so that a launch
/// moves nothing in or out of them).
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
pub(super) type NativeScratch = jit::Scratch;
#[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
pub(super) type NativeScratch = ();

thread_local! {
    /// One set of buffers per mask width, and native code's.
    static SCRATCH: std::cell::RefCell<(Scratch<1>, Scratch<16>, NativeScratch)> = std::cell::RefCell::default();
}

/// Runs `f` on this thread's buffers for mask width `MW`, or on fresh ones if they are in use.
pub(super) fn with_scratch<const MW: usize, T>(f: impl FnOnce(&mut Scratch<MW>, &mut NativeScratch) -> T) -> T {
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
pub(super) type Access = (Result<u64, (Fault, Space)>, u8, bool);

/// What native code's slow path needs from a worker, whatever its mask width: one thread's
/// checked load, store or atomic.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
pub(super) trait ThreadAccess {
    /// Runs `inst` for thread `l` at `addr` (`b`, `c`: the value operands); `None` if `inst`
    /// does not access memory. Gives the result, the access size and whether it writes.
    fn access(&mut self, inst: &Inst, addr: u64, b: u64, c: u64, l: usize) -> Option<Access>;
    /// The fault of thread `l`'s vector load or store `ins` at `addr` when that is not aligned to
    /// the whole vector.
    fn misaligned(&self, ins: &Instr, addr: u64, l: usize) -> Option<Stop>;
    /// `cp.async` of thread `l` (instruction `ins`) from `src` to `dst`, reading `src_size` bytes.
    fn cp_async(&mut self, ins: &Instr, dst: u64, src: u64, src_size: u64, l: usize) -> Res<()>;
}

/// Per-thread (OS thread) state reused across the blocks it runs.
pub(super) struct Worker<'a, const MW: usize> {
    pub(super) ctx: &'a Ctx<'a>,
    pub(super) n: usize,
    pub(super) nwords: usize,
    pub(super) all: Mask<MW>,
    /// Registers, shared and local memory, SIMT stack: borrowed, not owned, so that starting a
    /// launch moves nothing.
    pub(super) b: &'a mut Scratch<MW>,
    pub(super) ctaid: [u32; 3],
    pub(super) exited: Mask<MW>,
    pub(super) count: u64,
    pub(super) flushed: u64,
    pub(super) next_check: u64,
    pub(super) entry_ready: bool,
    /// The fault of the lowest thread that faulted in the current segment (see [`Worker::fault`]).
    pub(super) pending: Option<Stop>,
    /// Changes made to mbarriers in this block, and the line of the last failed mbarrier wait
    /// with the changes made before it (`exec/asynchronous.rs`).
    pub(super) mbar_changes: u64,
    pub(super) mbar_failed: Option<(u32, u64)>,
}

/// A failure inside a block before it is dressed with kernel, block and thread.
pub(super) enum Stop {
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

pub(super) type Res<T> = Result<T, Stop>;

impl<'a, const MW: usize> Worker<'a, MW> {
    pub(super) fn new(ctx: &'a Ctx<'a>, b: &'a mut Scratch<MW>) -> Self {
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

    pub(super) fn thread_of(&self, lane: usize) -> [u32; 3] {
        if lane < self.n {
            [self.b.tid[0][lane], self.b.tid[1][lane], self.b.tid[2][lane]]
        } else {
            [0; 3]
        }
    }
}
