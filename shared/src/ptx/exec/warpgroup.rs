//! `wgmma.mma_async` as the interpreter runs it: once per warpgroup (four consecutive warps)
//! with an active lane, complete when it issues (the ISA only promises D after the
//! `wgmma.wait_group` that waits for it, so D written at once is one of the behaviours it
//! allows, and `wgmma.fence`/`commit_group`/`wait_group` have nothing left to order).
//!
//! As for the warp instructions (`exec/warp.rs`), every lane's registers are read (lanes past
//! the end of the block read as zero) and only active lanes are written. The descriptors and
//! `scale-d` are the warpgroup's lowest active lane's, as the ISA requires them to be the same
//! in every thread. An operand element outside shared memory faults at that lane.

use super::worker::*;
use crate::ptx::ir::*;
use crate::ptx::matrix;
use crate::ptx::wgmma::{self, M};

impl<const MW: usize> Worker<'_, MW> {
    /// Register `r` of lane `l` (zero past the block's end).
    fn reg_of(&self, rb: usize, r: R, l: usize) -> u64 {
        if l < self.n {
            self.b.regs[(rb + r as usize) * self.n + l]
        } else {
            0
        }
    }

    /// The `count` x K elements (raw bits) of the shared-memory operand `desc` names, row by row.
    #[expect(
        clippy::too_many_arguments,
        reason = "the descriptor and the shape of one operand, each from a different instruction field"
    )]
    fn wgmma_operand(
        &self,
        desc: u64,
        rows: usize,
        k: usize,
        t: MmaTy,
        mn_major: bool,
        l: usize,
        line: u32,
    ) -> Res<Vec<u64>> {
        let esize = wgmma::elem_bytes(t);
        let mut out = Vec::with_capacity(rows * k);
        for r in 0..rows {
            for kk in 0..k {
                let at = wgmma::operand_offset(desc, r, kk, esize, mn_major);
                let v = self.load(Space::Shared, at, esize as u8, l).map_err(|(fault, space)| Stop::Mem {
                    lane: l,
                    addr: at,
                    size: esize as u32,
                    space,
                    fault,
                    write: false,
                    line,
                })?;
                out.push(v);
            }
        }
        Ok(out)
    }

    pub(super) fn wgmma(&mut self, op: &Wgmma, rb: usize, em: Mask<MW>, line: u32) -> Res<()> {
        let (n, k) = (op.n as usize, op.k as usize);
        let nd = op.d_regs();
        let d_per = matrix::per_reg(op.dty);
        let d_bits = matrix::elem_bits(op.dty);
        let d_mask = if d_bits == 32 { 0xFFFF_FFFF } else { 0xFFFF };
        for g in 0..self.n.div_ceil(128) {
            let acts: Vec<u32> =
                (0..4).map(|w| if 4 * g + w < self.n.div_ceil(32) { em.warp(4 * g + w) } else { 0 }).collect();
            let Some(first) = (0..4).find(|w| acts[*w] != 0) else {
                continue;
            };
            let leader = 128 * g + 32 * first + acts[first].trailing_zeros() as usize;
            let scale_d = self.reg_of(rb, op.scale_d, leader) & 1 == 1;
            let b = self.wgmma_operand(self.reg_of(rb, op.b_desc, leader), n, k, op.bty, op.trans_b, leader, line)?;
            let a = if op.a_desc {
                self.wgmma_operand(self.reg_of(rb, op.a[0], leader), M, k, op.aty, op.trans_a, leader, line)?
            } else {
                let per = matrix::per_reg(op.aty);
                let bits = matrix::elem_bits(op.aty);
                let mut a = vec![0u64; M * k];
                for w in 0..4 {
                    for lane in 0..32 {
                        for i in 0..op.a.len() * per {
                            let v = self.reg_of(rb, op.a[i / per], 128 * g + 32 * w + lane);
                            let (row, col) = wgmma::a_pos(op.aty, w, lane, i);
                            a[row * k + col] = (v >> ((i % per) as u32 * bits)) & ((1u64 << bits) - 1);
                        }
                    }
                }
                a
            };
            let mut d = vec![0u64; M * n];
            for w in 0..4 {
                for lane in 0..32 {
                    for i in 0..nd * d_per {
                        let v = self.reg_of(rb, op.d[i / d_per], 128 * g + 32 * w + lane);
                        let (row, col) = wgmma::d_pos(w, lane, i);
                        d[row * n + col] = (v >> ((i % d_per) as u32 * d_bits)) & d_mask;
                    }
                }
            }
            let out = wgmma::product(op, self.ctx.mma, &a, &b, &d, scale_d);
            for (w, act) in acts.iter().enumerate() {
                for lane in (0..32).filter(|k| act >> k & 1 == 1) {
                    let l = 128 * g + 32 * w + lane;
                    for (j, &r) in op.d.iter().enumerate() {
                        let mut v = 0u64;
                        for h in 0..d_per {
                            let (row, col) = wgmma::d_pos(w, lane, j * d_per + h);
                            v |= out[row * n + col] << (h as u32 * d_bits);
                        }
                        self.b.regs[(rb + r as usize) * self.n + l] = v;
                    }
                }
            }
        }
        Ok(())
    }
}
