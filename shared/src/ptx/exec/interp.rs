//! The interpreter: a thread block at a time, one instruction across all of the block's lanes.
//!
//! Registers are stored per register as a lane array (`regs[(frame_base + r) * n + lane]`), so an
//! arithmetic instruction is one tight loop over lanes, computed for every lane into a scratch
//! array and committed under the active mask (a copy when all lanes are active). Divergent
//! branches push entries on a reconvergence stack keyed by the branch's immediate
//! post-dominator; lanes that leave (`ret`, `exit`) are masked out everywhere.

use std::sync::atomic::Ordering;

use crate::ptx::ir::*;
use crate::ptx::ops::{as_bin, as_tern, as_un, bfi, boolop, compare, shfl_source, sx};
use crate::ptx::typemap;

use super::access::*;
use super::worker::*;

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

impl<'a, const MW: usize> Worker<'a, MW> {
    pub(super) fn flush(&mut self) {
        let d = self.count - self.flushed;
        self.flushed = self.count;
        self.ctx.used.fetch_add(d * self.n as u64, Ordering::Relaxed);
    }

    #[cold]
    pub(super) fn check(&mut self) -> Res<()> {
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

    pub(super) fn fill_sregs(&mut self, f: &Function, base: usize, only_block: bool) {
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
    pub(super) fn enter(&mut self, f: &Function, base: usize) {
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

    pub(super) fn run_block(&mut self, b: u64) -> Res<()> {
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
    pub(super) fn fault(&mut self, stop: Stop, em: Mask<MW>) -> Res<Mask<MW>> {
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
    pub(super) fn segment_end(&mut self) -> Res<()> {
        self.pending.take().map_or(Ok(()), Err)
    }

    pub(super) fn pred_mask(&self, rb: usize, p: R, neg: bool, within: Mask<MW>) -> Mask<MW> {
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

    pub(super) fn run(&mut self) -> Res<()> {
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

    pub(super) fn barrier(
        &self,
        fi: usize,
        func: &Function,
        em: Mask<MW>,
        count: Option<R>,
        rb: usize,
        line: u32,
    ) -> Res<()> {
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
    pub(super) fn exec(&mut self, inst: &Inst, rb: usize, lb: usize, em: Mask<MW>, full: bool, line: u32) -> Res<()> {
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
                let code = if self.ctx.types { self.store_code(line, srcs[0]) } else { typemap::UNTYPED };
                self.st1(space, size, ro(srcs[0]), code, &addr, rb, lb, em, line)?;
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
                            let code = self.store_code(line, s);
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
