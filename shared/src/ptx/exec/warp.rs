//! The instructions that read or write a whole warp's registers at once (`mma`, `ldmatrix`,
//! `stmatrix`, `movmatrix`; their semantics are `ptx::matrix`'s) and `cp.async`, as the
//! interpreter runs them.
//!
//! A warp instruction runs once for each warp with an active lane, like `vote` does. The ISA
//! leaves it undefined when some lanes of the warp are inactive or have exited; recap defines it:
//! every lane's registers are read, active or not (an exited lane's hold what it left there, and
//! lanes past the end of a partial last warp read as zero), and only active lanes are written.
//! `ldmatrix` and `stmatrix` use the row addresses of the lanes that provide them whether those
//! lanes are active or not; a row address that faults names its lane (the lowest such lane of the
//! warp is the one reported), and a row whose lane is past the end of the block faults at the
//! warp's lowest active lane.

use super::access::*;
use super::worker::*;
use crate::ptx::ir::*;
use crate::ptx::matrix;
use crate::ptx::memory::Fault;

impl<const MW: usize> Worker<'_, MW> {
    /// Registers `rs` of every lane of warp `w`, lane-major (zero past the block's end).
    fn warp_regs(&self, rb: usize, w: usize, rs: &[R]) -> Vec<u64> {
        let n = self.n;
        let mut out = vec![0u64; 32 * rs.len()];
        for k in 0..32 {
            let l = w * 32 + k;
            if l >= n {
                break;
            }
            for (i, &r) in rs.iter().enumerate() {
                out[k * rs.len() + i] = self.b.regs[(rb + r as usize) * n + l];
            }
        }
        out
    }

    /// Writes `vals` (lane-major, one per register of `rs`) to the active lanes `act` of warp `w`.
    fn warp_write(&mut self, rb: usize, w: usize, act: u32, rs: &[R], vals: &[u64]) {
        let n = self.n;
        for k in 0..32 {
            if act >> k & 1 == 0 {
                continue;
            }
            let l = w * 32 + k;
            for (i, &r) in rs.iter().enumerate() {
                self.b.regs[(rb + r as usize) * n + l] = vals[k * rs.len() + i];
            }
        }
    }

    /// Runs warp instruction `ins` (`mma`, `ldmatrix`, `stmatrix`, `movmatrix`) for native code,
    /// with the code above: native code leaves every thread's registers in its spill area
    /// (`spill[l * nregs + r]`, thread after thread), so the instruction's operands of every
    /// thread are copied into the interpreter's registers (constants from the function), it runs
    /// for the threads that have not exited (`live`), and its results go back to their spill
    /// slots. One implementation for both engines, so they give the same bits and faults.
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    pub(super) fn warp_in_spill(
        &mut self,
        ins: &Instr,
        spill: &mut [u64],
        nregs: usize,
        live: impl Fn(usize) -> bool,
    ) -> Res<()> {
        let n = self.n;
        if self.b.regs.len() < nregs * n {
            self.b.regs.resize(nregs * n, 0);
        }
        let f = &self.ctx.module.funcs[self.ctx.entry as usize];
        let (uses, defs) = crate::ptx::flow::uses_defs(ins);
        for &r in &uses {
            let o = r as usize * n;
            match f.consts.iter().find(|c| c.0 == r) {
                Some(&(_, v)) => self.b.regs[o..o + n].fill(v),
                None => {
                    for l in 0..n {
                        self.b.regs[o + l] = spill[l * nregs + r as usize];
                    }
                }
            }
        }
        let mut em = Mask::<MW>::EMPTY;
        for l in (0..n).filter(|&l| live(l)) {
            em.0[l / 64] |= 1 << (l % 64);
        }
        match ins.inst {
            Inst::Mma(ref op) => self.mma(op, 0, em),
            Inst::Movmatrix { d, a } => self.movmatrix(d, a, 0, em),
            Inst::Ldmatrix { n: cnt, trans, space, d, addr } => {
                self.ldmatrix(cnt, trans, space, &d, &addr, 0, 0, em, ins.line)?
            }
            Inst::Stmatrix { n: cnt, trans, space, a, addr } => {
                self.stmatrix(cnt, trans, space, &a, &addr, 0, 0, em, ins.line)?
            }
            _ => {}
        }
        for &r in &defs {
            let o = r as usize * n;
            for l in (0..n).filter(|&l| live(l)) {
                spill[l * nregs + r as usize] = self.b.regs[o + l];
            }
        }
        Ok(())
    }

    pub(super) fn mma(&mut self, op: &Mma, rb: usize, em: Mask<MW>) {
        for w in 0..self.n.div_ceil(32) {
            let act = em.warp(w);
            if act == 0 {
                continue;
            }
            let a = self.warp_regs(rb, w, &op.a);
            let b = self.warp_regs(rb, w, &op.b);
            let c = self.warp_regs(rb, w, &op.c);
            let d = matrix::mma(op, self.ctx.mma, &a, &b, &c);
            self.warp_write(rb, w, act, &op.d, &d);
        }
    }

    pub(super) fn movmatrix(&mut self, d: R, a: R, rb: usize, em: Mask<MW>) {
        for w in 0..self.n.div_ceil(32) {
            let act = em.warp(w);
            if act == 0 {
                continue;
            }
            let src: [u64; 32] = self.warp_regs(rb, w, &[a]).try_into().expect("32 lanes");
            self.warp_write(rb, w, act, &[d], &matrix::movmatrix(&src));
        }
    }

    /// `elect.sync`: per warp, the lowest active lane whose bit is set in its own `membermask`
    /// leads; every active lane gets the leader's lane number in `d` (zero where none leads) and
    /// only the leader gets `p` true.
    pub(super) fn elect(&mut self, d: R, p: R, mask: R, rb: usize, em: Mask<MW>) {
        let n = self.n;
        for w in 0..n.div_ceil(32) {
            let act = em.warp(w);
            if act == 0 {
                continue;
            }
            let leader = (0..32)
                .find(|&k| act >> k & 1 == 1 && self.b.regs[(rb + mask as usize) * n + w * 32 + k] >> k & 1 == 1);
            for k in (0..32).filter(|k| act >> k & 1 == 1) {
                let l = w * 32 + k;
                self.b.regs[(rb + d as usize) * n + l] = leader.unwrap_or(0) as u64;
                self.b.regs[(rb + p as usize) * n + l] = (leader == Some(k)) as u64;
            }
        }
    }

    /// The address of row `row` (0..32: matrix `row / 8`, its row `row % 8`) of warp `w`, checked
    /// for the 16-byte alignment rows need: (lane, address).
    #[expect(
        clippy::too_many_arguments,
        reason = "the instruction's operand, the warp's row and where the block's lanes are: plain values, called per row"
    )]
    fn row_addr(
        &self,
        addr: &Addr,
        space: Space,
        rb: usize,
        lb: usize,
        w: usize,
        row: usize,
        act: u32,
        write: bool,
        line: u32,
    ) -> Res<(usize, u64)> {
        let l = w * 32 + row;
        if l >= self.n {
            let lane = w * 32 + act.trailing_zeros() as usize;
            let space = if space == Space::Generic { Space::Shared } else { space };
            return Err(Stop::Mem { lane, addr: 0, size: 16, space, fault: Fault::OutOfBounds, write, line });
        }
        let a = self.address(addr, rb, lb, l);
        if !a.is_multiple_of(16) {
            return Err(self.vector_fault(space, a, 16, write, l, line));
        }
        Ok((l, a))
    }

    /// The 16 bytes of a row at `a` when all of them lie in the block's shared memory (the case
    /// of every `ldmatrix` a compiler emits): one check for the row instead of one per element,
    /// the same values.
    fn shared_row(&self, space: Space, a: u64) -> Option<&[u8]> {
        let (sp, off) = self.resolve(space, a);
        let end = off.checked_add(16)?;
        (sp == Space::Shared && end <= self.b.shared.len() as u64).then(|| &self.b.shared[off as usize..end as usize])
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the instruction's fields and where it runs (register and lane bases, active lanes, line)"
    )]
    pub(super) fn ldmatrix(
        &mut self,
        n: u8,
        trans: bool,
        space: Space,
        d: &[R],
        addr: &Addr,
        rb: usize,
        lb: usize,
        em: Mask<MW>,
        line: u32,
    ) -> Res<()> {
        let n = n as usize;
        for w in 0..self.n.div_ceil(32) {
            let act = em.warp(w);
            if act == 0 {
                continue;
            }
            // Matrix j, row r, column c at [j][r * 8 + c].
            let mut m = [[0u64; 64]; 4];
            for row in 0..8 * n {
                let (l, a) = self.row_addr(addr, space, rb, lb, w, row, act, false, line)?;
                if let Some(bytes) = self.shared_row(space, a) {
                    for (c, h) in bytes.chunks_exact(2).enumerate() {
                        m[row / 8][(row % 8) * 8 + c] = u16::from_le_bytes([h[0], h[1]]) as u64;
                    }
                    continue;
                }
                for c in 0..8 {
                    let ea = a.wrapping_add(2 * c as u64);
                    m[row / 8][(row % 8) * 8 + c] = self.load(space, ea, 2, l).map_err(|(fault, sp)| Stop::Mem {
                        lane: l,
                        addr: a,
                        size: 16,
                        space: sp,
                        fault,
                        write: false,
                        line,
                    })?;
                }
            }
            let mut vals = vec![0u64; 32 * n];
            for k in 0..32 {
                let [(r0, c0), (r1, c1)] = matrix::frag8x8(k, trans);
                for (j, mj) in m.iter().enumerate().take(n) {
                    vals[k * n + j] = mj[r0 * 8 + c0] | mj[r1 * 8 + c1] << 16;
                }
            }
            self.warp_write(rb, w, act, &d[..n], &vals);
        }
        Ok(())
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the instruction's fields and where it runs (register and lane bases, active lanes, line)"
    )]
    pub(super) fn stmatrix(
        &mut self,
        n: u8,
        trans: bool,
        space: Space,
        srcs: &[R],
        addr: &Addr,
        rb: usize,
        lb: usize,
        em: Mask<MW>,
        line: u32,
    ) -> Res<()> {
        let n = n as usize;
        for w in 0..self.n.div_ceil(32) {
            let act = em.warp(w);
            if act == 0 {
                continue;
            }
            let regs = self.warp_regs(rb, w, &srcs[..n]);
            let mut m = [[0u64; 64]; 4];
            for k in 0..32 {
                let [(r0, c0), (r1, c1)] = matrix::frag8x8(k, trans);
                for (j, mj) in m.iter_mut().enumerate().take(n) {
                    let v = regs[k * n + j];
                    mj[r0 * 8 + c0] = v & 0xFFFF;
                    mj[r1 * 8 + c1] = (v >> 16) & 0xFFFF;
                }
            }
            for row in 0..8 * n {
                let (l, a) = self.row_addr(addr, space, rb, lb, w, row, act, true, line)?;
                for c in 0..8 {
                    let ea = a.wrapping_add(2 * c as u64);
                    self.store(space, ea, 2, m[row / 8][(row % 8) * 8 + c], l).map_err(|(fault, sp)| Stop::Mem {
                        lane: l,
                        addr: a,
                        size: 16,
                        space: sp,
                        fault,
                        write: true,
                        line,
                    })?;
                }
            }
        }
        Ok(())
    }

    /// `cp.async` of one lane, done at once: the first `src_size` bytes (at most `size`) from
    /// global memory, the rest zeros, to shared memory. Both addresses must be aligned to `size`
    /// (the source only when something is read).
    #[expect(
        clippy::too_many_arguments,
        reason = "the instruction's fields and where one lane runs it (register and lane bases, lane, line)"
    )]
    pub(super) fn cp_async(
        &mut self,
        size: u8,
        src_size: R,
        dst: &Addr,
        src: &Addr,
        rb: usize,
        lb: usize,
        l: usize,
        line: u32,
    ) -> Res<()> {
        let da = self.address(dst, rb, lb, l);
        let sa = self.address(src, rb, lb, l);
        self.cp_async_at(size, da, sa, self.b.regs[(rb + src_size as usize) * self.n + l], l, line)
    }

    /// `cp.async` of lane `l` at addresses already computed (native code computes them itself),
    /// `src_size` the register's value.
    pub(super) fn cp_async_at(&mut self, size: u8, da: u64, sa: u64, src_size: u64, l: usize, line: u32) -> Res<()> {
        let sz = size as u64;
        let keep = (src_size as u32 as u64).min(sz);
        let fail = |addr: u64, size: u64, space: Space, fault: Fault, write: bool| Stop::Mem {
            lane: l,
            addr,
            size: size as u32,
            space,
            fault,
            write,
            line,
        };
        if !da.is_multiple_of(sz) {
            return Err(fail(da, sz, Space::Shared, Fault::Misaligned, true));
        }
        if keep > 0 && !sa.is_multiple_of(sz) {
            return Err(fail(sa, keep, Space::Global, Fault::Misaligned, false));
        }
        let mut buf = [0u8; 16];
        // Whole copies read in aligned pieces of up to 8 bytes; partial ones byte by byte.
        let step = if keep == sz { sz.min(8) } else { 1 };
        let mut off = 0;
        while off < keep {
            let v = self
                .load(Space::Global, sa.wrapping_add(off), step as u8, l)
                .map_err(|(f, sp)| fail(sa, keep, sp, f, false))?;
            buf[off as usize..(off + step) as usize].copy_from_slice(&v.to_le_bytes()[..step as usize]);
            off += step;
        }
        let step = sz.min(8);
        for off in (0..sz).step_by(step as usize) {
            let v = read_le(&buf[off as usize..(off + step) as usize]);
            self.store(Space::Shared, da + off, step as u8, v, l).map_err(|(f, sp)| fail(da, sz, sp, f, true))?;
        }
        Ok(())
    }
}
