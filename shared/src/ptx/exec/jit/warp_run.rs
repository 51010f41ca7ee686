//! A run of warp matrix instructions at one boundary (a tile's `ldmatrix`es and its float `mma`s),
//! executed warp by warp over a dense copy of the registers the run touches.
//!
//! **Why.** Native code leaves each thread's registers in its own stretch of the spill area
//! (`spill[l * nregs + r]`), so one warp's fragment of one register lies in 32 places a few
//! hundred bytes apart. Running the instructions one by one (`Worker::warp_in_spill`) copies
//! every operand of every instruction across the block into the interpreter's registers and back,
//! which cost several times the arithmetic itself. Here the run's registers are gathered once per
//! boundary into `[warp][slot][lane]` (a slot per register the run reads or writes, constants
//! filled in), every instruction of the run reads and writes that copy (an `mma`'s accumulators
//! written by one `mma` are read by the next from there, with no trip through the spill area), and
//! the registers the run writes are scattered back once.
//!
//! **Same bits, same faults.** The arithmetic is `ptx::matrix`'s, the interpreter's own: the
//! `ldmatrix` fragments by `frag8x8`, the float `mma` by `mma_float`. Running warp by warp
//! instead of instruction by instruction changes nothing observable, as the run only reads shared
//! memory and writes registers of its own warp. The path takes only blocks whose every thread is
//! live and whose warps are whole (no lane to skip or to read as zero), and only rows that lie in
//! shared memory aligned to 16 bytes; for anything else (a row that would fault, above all) it
//! returns before writing anything, and the caller runs the instructions one by one, which
//! reports the fault as every engine does.

use super::runtime::EXITED;
use crate::ptx::exec::Worker;
use crate::ptx::ir::{Base, Inst, Instr, Mma, Space, R};
use crate::ptx::matrix::{self, is_float16x8};

/// The plan of a run: its slots and its steps, made once when the kernel is compiled.
#[derive(Clone)]
pub(super) struct WarpRun {
    /// Each slot's register and its constant value, if it has one.
    slots: Vec<(R, Option<u64>)>,
    /// The slots the run writes.
    defs: Vec<usize>,
    steps: Vec<Step>,
}

#[derive(Clone)]
enum Step {
    /// `ldmatrix`: `n` matrices into slots `d`, row addresses from slot `base` (or none: the
    /// offset alone) plus `off`.
    Ldmatrix { n: usize, trans: bool, space: Space, d: [usize; 4], base: Option<usize>, off: i64 },
    /// A float `mma` of shape m16n8kK; operands A, B, C and D by slot.
    Mma { op: Box<Mma>, slots: [[usize; 4]; 4] },
}

impl WarpRun {
    /// The plan of `run`, with the constant registers `consts` among its operands; `None` when
    /// the run holds an instruction this path does not take (it then runs one by one).
    pub(super) fn plan(run: &[Instr], consts: &[(R, u64)]) -> Option<WarpRun> {
        let mut plan = WarpRun { slots: Vec::new(), defs: Vec::new(), steps: Vec::new() };
        let slot = |plan: &mut WarpRun, r: R, def: bool| {
            let s = match plan.slots.iter().position(|s| s.0 == r) {
                Some(s) => s,
                None => {
                    plan.slots.push((r, consts.iter().find(|c| c.0 == r).map(|c| c.1)));
                    plan.slots.len() - 1
                }
            };
            if def && !plan.defs.contains(&s) {
                plan.defs.push(s);
            }
            s
        };
        for ins in run {
            if ins.guard.is_some() {
                return None;
            }
            let step = match &ins.inst {
                Inst::Ldmatrix { n, trans, space, d, addr } => {
                    let base = match addr.base {
                        Base::Reg(r) => Some(slot(&mut plan, r, false)),
                        Base::Abs => None,
                        Base::Frame => return None,
                    };
                    let mut ds = [0; 4];
                    for (j, &r) in d.iter().enumerate().take(*n as usize) {
                        ds[j] = slot(&mut plan, r, true);
                    }
                    Step::Ldmatrix { n: *n as usize, trans: *trans, space: *space, d: ds, base, off: addr.off }
                }
                Inst::Mma(op) if is_float16x8(op) => {
                    let mut slots = [[0; 4]; 4];
                    // Operands are read before D is written, as `mma_float` does.
                    for (o, rs) in [&op.a, &op.b, &op.c, &op.d].into_iter().enumerate() {
                        if rs.len() > 4 {
                            return None;
                        }
                        for (i, &r) in rs.iter().enumerate() {
                            slots[o][i] = slot(&mut plan, r, o == 3);
                        }
                    }
                    Step::Mma { op: op.clone(), slots }
                }
                _ => return None,
            };
            plan.steps.push(step);
        }
        Some(plan)
    }

    /// Runs the run for every warp of the block whose thread states are `state`, over its spill
    /// area (`nregs` registers a thread), with `buf` as scratch. False, with nothing written,
    /// where this path does not take the block (see the module docs).
    pub(super) fn run<const MW: usize>(
        &self,
        w: &Worker<'_, MW>,
        buf: &mut Vec<u64>,
        spill: &mut [u64],
        nregs: usize,
        state: &[u32],
    ) -> bool {
        let n = state.len();
        if !n.is_multiple_of(32) || state.contains(&EXITED) {
            return false;
        }
        let ns = self.slots.len();
        buf.clear();
        buf.resize(n * ns, 0);
        for (l, regs) in spill.chunks_exact(nregs).take(n).enumerate() {
            let warp = &mut buf[l / 32 * ns * 32..][..ns * 32];
            for (s, &(r, k)) in self.slots.iter().enumerate() {
                warp[s * 32 + l % 32] = k.unwrap_or(regs[r as usize]);
            }
        }
        for warp in buf.chunks_exact_mut(ns * 32) {
            if !self.run_warp(w, warp) {
                return false;
            }
        }
        for (l, regs) in spill.chunks_exact_mut(nregs).take(n).enumerate() {
            let warp = &buf[l / 32 * ns * 32..][..ns * 32];
            for &s in &self.defs {
                regs[self.slots[s].0 as usize] = warp[s * 32 + l % 32];
            }
        }
        true
    }

    /// The steps for one warp over its slots (`warp[slot * 32 + lane]`); false where a row of an
    /// `ldmatrix` is not 16 aligned bytes of shared memory.
    fn run_warp<const MW: usize>(&self, w: &Worker<'_, MW>, warp: &mut [u64]) -> bool {
        for step in &self.steps {
            match *step {
                Step::Ldmatrix { n, trans, space, d, base, off } => {
                    // Row r of matrix j at [j * 8 + r].
                    let mut rows = [[0u16; 8]; 32];
                    for (row, out) in rows.iter_mut().enumerate().take(8 * n) {
                        let a = base.map_or(0, |s| warp[s * 32 + row]).wrapping_add(off as u64);
                        let (sp, o) = w.resolve(space, a);
                        if sp != Space::Shared || !o.is_multiple_of(16) || o + 16 > w.b.shared.len() as u64 {
                            return false;
                        }
                        for (c, h) in w.b.shared[o as usize..o as usize + 16].chunks_exact(2).enumerate() {
                            out[c] = u16::from_le_bytes([h[0], h[1]]);
                        }
                    }
                    for lane in 0..32 {
                        let [(r0, c0), (r1, c1)] = matrix::frag8x8(lane, trans);
                        for (j, &s) in d.iter().enumerate().take(n) {
                            warp[s * 32 + lane] = rows[j * 8 + r0][c0] as u64 | (rows[j * 8 + r1][c1] as u64) << 16;
                        }
                    }
                }
                Step::Mma { ref op, slots } => mma(op, &slots, warp),
            }
        }
        true
    }
}

/// A float `mma` on a warp's slots, compiled with FMA instructions where the CPU has them (the
/// interpreter's build calls the C library's `fmaf`, which rounds the same).
fn mma(op: &Mma, slots: &[[usize; 4]; 4], warp: &mut [u64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has the features the function is compiled for.
        unsafe { mma_fma(op, slots, warp) };
        return;
    }
    mma_body(op, slots, warp)
}

/// # Safety
/// The CPU must have FMA and AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma,avx2")]
unsafe fn mma_fma(op: &Mma, slots: &[[usize; 4]; 4], warp: &mut [u64]) {
    mma_body(op, slots, warp)
}

#[inline(always)]
fn mma_body(op: &Mma, slots: &[[usize; 4]; 4], warp: &mut [u64]) {
    let mut out = [0u64; 32 * 4];
    matrix::mma_float(op, |o, lane, i| warp[slots[o][i] * 32 + lane], |lane, i, v| out[i * 32 + lane] = v);
    for (i, &s) in slots[3].iter().enumerate().take(op.d.len()) {
        warp[s * 32..s * 32 + 32].copy_from_slice(&out[i * 32..i * 32 + 32]);
    }
}
