//! The translator: a function's instructions into Cranelift IR. [`Tx::build`] lays out the
//! function (the entry's loads, the loop over the block's threads, the resume points after each
//! boundary, the exits), then emits the body one instruction at a time: inline where the
//! instruction has an inline form, through a call to the interpreter's own per-lane semantics
//! otherwise, so that both engines compute the same bits. Memory accesses go through the checks
//! of `checks.rs`; code for groups goes through `lanes.rs` for instructions that vary by lane.

use std::mem::offset_of;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::Switch;

use super::analysis::{operands, Class, PLAIN_F};
use super::emit::{flags, Hoisted, Repr, Tx};
use super::error::JitError;
use super::runtime::*;
use crate::ptx::ir::*;

/// The integer condition of PTX compare `cmp` (signed or not), if it has one (the unordered
/// forms are float-only).
pub(super) fn int_cc(cmp: Cmp, signed: bool) -> Option<IntCC> {
    Some(match (cmp, signed) {
        (Cmp::Eq, _) => IntCC::Equal,
        (Cmp::Ne, _) => IntCC::NotEqual,
        (Cmp::Lt, true) => IntCC::SignedLessThan,
        (Cmp::Le, true) => IntCC::SignedLessThanOrEqual,
        (Cmp::Gt, true) => IntCC::SignedGreaterThan,
        (Cmp::Ge, true) => IntCC::SignedGreaterThanOrEqual,
        (Cmp::Lt, false) => IntCC::UnsignedLessThan,
        (Cmp::Le, false) => IntCC::UnsignedLessThanOrEqual,
        (Cmp::Gt, false) => IntCC::UnsignedGreaterThan,
        (Cmp::Ge, false) => IntCC::UnsignedGreaterThanOrEqual,
        _ => return None,
    })
}

/// A result in the domain it was computed in.
enum Out {
    I(Value),
    F32(Value),
    F64(Value),
}

impl Tx<'_, '_> {
    pub(super) fn build(&mut self) -> Result<(), JitError> {
        let f = self.a.f;
        let n_insts = f.insts.len();
        for (pc, l) in self.a.leader.iter().enumerate() {
            if *l {
                self.blocks[pc] = Some(self.b.create_block());
            }
        }
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        let ctx = self.b.block_params(entry)[0];
        let seg0 = self.b.block_params(entry)[1];
        let seg = self.b.declare_var(types::I32);
        self.b.def_var(seg, seg0);
        self.h = Some(Hoisted {
            ctx,
            table: ctx,
            table_max: ctx,
            shared: ctx,
            shared_lim: [ctx; 4],
            params: ctx,
            spill: ctx,
            state: ctx,
            limit: ctx,
            cancel: ctx,
            abort: ctx,
        });
        let i64t = types::I64;
        let table = self.ld_ctx(i64t, offset_of!(JitCtx, table));
        let table_max = self.ld_ctx(i64t, offset_of!(JitCtx, table_max));
        let shared = self.ld_ctx(i64t, offset_of!(JitCtx, shared));
        let mut shared_lim = [ctx; 4];
        for (k, l) in shared_lim.iter_mut().enumerate() {
            *l = self.ld_ctx(i64t, offset_of!(JitCtx, shared_lim) + 8 * k);
        }
        let params = self.ld_ctx(i64t, offset_of!(JitCtx, params));
        let spill = self.ld_ctx(i64t, offset_of!(JitCtx, spill));
        let state = self.ld_ctx(i64t, offset_of!(JitCtx, state));
        let limit = self.ld_ctx(i64t, offset_of!(JitCtx, limit));
        let cancel = self.ld_ctx(i64t, offset_of!(JitCtx, cancel));
        let abort = self.ld_ctx(i64t, offset_of!(JitCtx, abort));
        let n = self.ld_ctx(i64t, offset_of!(JitCtx, n));
        let mut ntid = [ctx; 3];
        let mut nctaid = [ctx; 3];
        let mut ctaid = [ctx; 3];
        for d in 0..3 {
            ntid[d] = self.ld_ctx(i64t, offset_of!(JitCtx, ntid) + 8 * d);
            nctaid[d] = self.ld_ctx(i64t, offset_of!(JitCtx, nctaid) + 8 * d);
            ctaid[d] = self.ld_ctx(i64t, offset_of!(JitCtx, ctaid) + 8 * d);
        }
        self.h =
            Some(Hoisted { ctx, table, table_max, shared, shared_lim, params, spill, state, limit, cancel, abort });
        self.hoist_root_entries();
        if self.a.width > 1 {
            self.shared_lim_run = Some(self.lim_run(shared_lim[2]));
        }
        let zero = self.iconst(0);
        self.b.def_var(self.cnt, zero);
        self.b.def_var(self.t, zero);
        for d in 0..3 {
            self.b.def_var(self.tid[d], zero);
        }
        let head = self.b.create_block();
        let next = self.b.create_block();
        let finish = self.b.create_block();
        let done = self.b.create_block();
        let fault_exit = self.b.create_block();
        let limit_exit = self.b.create_block();
        self.next_thread = Some(next);
        self.fault_exit = Some(fault_exit);
        self.limit_exit = Some(limit_exit);
        self.b.ins().jump(head, &[]);

        // head: next live thread, or done.
        self.b.switch_to_block(head);
        let t = self.b.use_var(self.t);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, t, n);
        let live = self.b.create_block();
        if self.a.bounds.is_empty() {
            // Without boundaries every thread runs once from the top to its exit: no state.
            self.b.ins().brif(more, live, &[], finish, &[]);
        } else {
            let check_state = self.b.create_block();
            self.b.ins().brif(more, check_state, &[], finish, &[]);
            self.b.switch_to_block(check_state);
            let so = self.b.ins().ishl_imm_s(t, 2);
            let sa = self.b.ins().iadd(state, so);
            let st = self.b.ins().load(types::I32, flags(), sa, 0);
            let ex = self.b.ins().iconst(types::I32, EXITED as i64);
            let exited = self.b.ins().icmp(IntCC::Equal, st, ex);
            self.b.ins().brif(exited, next, &[], live, &[]);
        }
        self.b.switch_to_block(live);
        if !self.a.bounds.is_empty() {
            let first = self.b.declare_var(types::I8);
            let segv = self.b.use_var(seg);
            let is_first = self.b.ins().icmp_imm_s(IntCC::Equal, segv, 0);
            self.b.def_var(first, is_first);
            self.first_segment = Some(first);
        }
        // Special registers of this thread.
        for &(r, s) in &f.sregs {
            if self.a.width > 1 && matches!(s, Sreg::Tid(0) | Sreg::LaneId) {
                // Lane l of a group is thread t + l, at x + l in its row.
                if let Repr::Vector(_) = self.reprs[r as usize] {
                    let first = match s {
                        Sreg::LaneId => self.b.use_var(self.t),
                        _ => self.b.use_var(self.tid[0]),
                    };
                    let v = self.lane_indices(first, matches!(s, Sreg::LaneId).then_some(31));
                    self.def_vec(r, v);
                    continue;
                }
                for l in 0..self.a.width {
                    self.lane = Some(l);
                    let v = match s {
                        Sreg::LaneId => {
                            let t = self.b.use_var(self.t);
                            let tl = self.b.ins().iadd_imm_s(t, l as i64);
                            self.b.ins().band_imm_s(tl, 31)
                        }
                        _ => {
                            let x = self.b.use_var(self.tid[0]);
                            self.b.ins().iadd_imm_s(x, l as i64)
                        }
                    };
                    self.set(r, v);
                }
                self.lane = None;
                continue;
            }
            let v = match s {
                Sreg::Tid(d) => self.b.use_var(self.tid[d as usize]),
                Sreg::Ntid(d) => ntid[d as usize],
                Sreg::Ctaid(d) => ctaid[d as usize],
                Sreg::Nctaid(d) => nctaid[d as usize],
                Sreg::LaneId => self.b.ins().band_imm_s(t, 31),
                Sreg::WarpId => self.b.ins().ushr_imm_s(t, 5),
                Sreg::NWarpId => {
                    let x = self.b.ins().iadd_imm_s(n, 31);
                    self.b.ins().ushr_imm_s(x, 5)
                }
                Sreg::NSmId => self.iconst(1),
                Sreg::SmId | Sreg::GridId | Sreg::Zero => self.iconst(0),
                other => return Err(JitError::SpecialRegister(other)),
            };
            self.set(r, v);
        }
        // Resume points: segment 0 starts at the top, segment k+1 after barrier k.
        let mut sw = Switch::new();
        sw.set_entry(0, self.blocks[0].expect("entry block"));
        let mut resumes = Vec::new();
        let mut bars: Vec<(usize, u32)> = self.a.bar_index.iter().map(|(&p, &k)| (p, k)).collect();
        bars.sort();
        for &(pc, k) in &bars {
            let rb = self.b.create_block();
            sw.set_entry(k as u128 + 1, rb);
            resumes.push((rb, pc));
        }
        let segv = self.b.use_var(seg);
        sw.emit(&mut self.b, segv, done);
        for (rb, pc) in resumes {
            self.b.switch_to_block(rb);
            let base = self.spill_base();
            for r in self.a.reload[&pc].clone() {
                self.spill_load(base, r);
            }
            self.b.ins().jump(self.blocks[pc + 1].expect("block after barrier"), &[]);
        }

        // next: advance the thread and its (x, y, z) index.
        self.b.switch_to_block(next);
        let x = self.b.use_var(self.tid[0]);
        let y = self.b.use_var(self.tid[1]);
        let z = self.b.use_var(self.tid[2]);
        if self.a.width == 1 {
            let t = self.b.use_var(self.t);
            let t1 = self.b.ins().iadd_imm_s(t, 1);
            self.b.def_var(self.t, t1);
            let x1 = self.b.ins().iadd_imm_s(x, 1);
            let wx = self.b.ins().icmp(IntCC::Equal, x1, ntid[0]);
            let x2 = self.b.ins().select(wx, zero, x1);
            let wx64 = self.b.ins().uextend(types::I64, wx);
            let y1 = self.b.ins().iadd(y, wx64);
            let wy = self.b.ins().icmp(IntCC::Equal, y1, ntid[1]);
            let y2 = self.b.ins().select(wy, zero, y1);
            let wy64 = self.b.ins().uextend(types::I64, wy);
            let z2 = self.b.ins().iadd(z, wy64);
            self.b.def_var(self.tid[0], x2);
            self.b.def_var(self.tid[1], y2);
            self.b.def_var(self.tid[2], z2);
        } else {
            // Groups go down the columns (y fastest, then z, then x): neighbouring groups of a
            // row usually read the same cache lines of a tile, and the rows of a tile lie in
            // different lines, so this order starts the core's fetches of a segment's lines one
            // group after another instead of every other group. Threads between two barriers
            // are unordered in CUDA, so any order is a valid one.
            let y1 = self.b.ins().iadd_imm_s(y, 1);
            let wy = self.b.ins().icmp(IntCC::Equal, y1, ntid[1]);
            let y2 = self.b.ins().select(wy, zero, y1);
            let wy64 = self.b.ins().uextend(types::I64, wy);
            let z1 = self.b.ins().iadd(z, wy64);
            let wz = self.b.ins().icmp(IntCC::Equal, z1, ntid[2]);
            let z2 = self.b.ins().select(wz, zero, z1);
            let step = self.iconst(self.a.width as u64);
            let dx = self.b.ins().select(wz, step, zero);
            let x2 = self.b.ins().iadd(x, dx);
            let row = self.b.ins().imul(z2, ntid[1]);
            let row = self.b.ins().iadd(row, y2);
            let first = self.b.ins().imul(row, ntid[0]);
            let first = self.b.ins().iadd(first, x2);
            let end = self.b.ins().icmp(IntCC::Equal, x2, ntid[0]);
            let t1 = self.b.ins().select(end, n, first);
            self.b.def_var(self.t, t1);
            self.b.def_var(self.tid[0], x2);
            self.b.def_var(self.tid[1], y2);
            self.b.def_var(self.tid[2], z2);
        }
        self.b.ins().jump(head, &[]);

        // finish: every thread reached a boundary or exited. When all live ones wait at the same
        // boundary, go on with the next segment here (after a shuffle's exchange); otherwise the
        // caller sorts it out (all exited, or threads at different barriers).
        self.b.switch_to_block(finish);
        if self.a.bounds.is_empty() {
            self.b.ins().jump(done, &[]);
        } else {
            let mp = self.meta as *const Meta as u64;
            let mp = self.iconst(mp);
            let r = self.call(h_boundary as *const () as usize, &[ctx, mp]);
            let again = self.b.create_block();
            self.b.ins().brif(r, again, &[], done, &[]);
            self.b.switch_to_block(again);
            let r32 = self.lo32(r);
            self.b.def_var(seg, r32);
            let zero = self.iconst(0);
            self.b.def_var(self.t, zero);
            for d in 0..3 {
                self.b.def_var(self.tid[d], zero);
            }
            self.b.ins().jump(head, &[]);
        }
        for (blk, code) in [(done, ST_DONE), (fault_exit, ST_FAULT), (limit_exit, ST_LIMIT)] {
            self.b.switch_to_block(blk);
            self.ret(code);
        }

        // The body.
        let mut open = false;
        for pc in 0..n_insts {
            if pc < self.resume_at {
                // Emitted with the region of a branch that differs between lanes.
                continue;
            }
            if let Some(blk) = self.blocks[pc] {
                if open {
                    self.flush_count();
                    self.b.ins().jump(blk, &[]);
                }
                self.b.switch_to_block(blk);
                open = true;
            }
            if !open {
                // Unreachable code after a transfer with no label: give it a block anyway.
                let blk = self.b.create_block();
                self.b.switch_to_block(blk);
            }
            if self.a.plan.is_some() && self.blocks[pc].is_some() {
                if let Some(end) = self.prechecked_stretch(pc)? {
                    self.resume_at = end;
                    open = true;
                    continue;
                }
            }
            if self.a.resident.as_ref().is_some_and(|res| res.touch[pc]) {
                let ctx = self.h().ctx;
                self.call(h_hand_back_tiles as *const () as usize, &[ctx]);
            }
            self.pending += self.a.width as i64;
            open = self.inst(pc)?;
        }
        if let Some(blk) = self.blocks[n_insts] {
            if open {
                self.flush_count();
                self.b.ins().jump(blk, &[]);
            }
            self.b.switch_to_block(blk);
            open = true;
        }
        if open {
            // Falling off the end ends the thread.
            self.thread_exit();
        }
        match self.broken.take() {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    fn ret(&mut self, code: u32) {
        let c = self.b.use_var(self.cnt);
        let ctx = self.h().ctx;
        self.b.ins().store(flags(), c, ctx, offset_of!(JitCtx, count) as i32);
        let r = self.b.ins().iconst(types::I32, code as i64);
        self.b.ins().return_(&[r]);
    }

    pub(super) fn spill_base(&mut self) -> Value {
        let t = self.b.use_var(self.t);
        let off = self.b.ins().imul_imm_s(t, self.a.f.nregs as i64 * 8);
        let spill = self.h().spill;
        self.b.ins().iadd(spill, off)
    }

    /// Sets the state of the thread, or of the group: the threads of a group share one state,
    /// kept at its first thread (the code and the runtime read no other).
    fn set_state(&mut self, v: u32) {
        let t = self.b.use_var(self.t);
        let so = self.b.ins().ishl_imm_s(t, 2);
        let state = self.h().state;
        let sa = self.b.ins().iadd(state, so);
        let v = self.b.ins().iconst(types::I32, v as i64);
        self.b.ins().store(flags(), v, sa, 0);
    }

    /// The index of the thread being emitted for: the lane's in code for groups.
    pub(super) fn thread_index(&mut self) -> Value {
        let t = self.b.use_var(self.t);
        match self.lane {
            Some(l) if l > 0 => self.b.ins().iadd_imm_s(t, l as i64),
            _ => t,
        }
    }

    fn thread_exit(&mut self) {
        self.flush_count();
        if !self.a.shfl_srcs.is_empty() {
            let base = self.spill_base();
            for r in self.a.shfl_srcs.clone() {
                let v = self.get(r);
                self.b.ins().store(flags(), v, base, (r * 8) as i32);
            }
        }
        if !self.a.bounds.is_empty() {
            self.set_state(EXITED);
        }
        let next = self.next_thread.expect("next");
        self.b.ins().jump(next, &[]);
    }

    /// Stops the call when the budget share is used up or the launch is cancelled or aborted.
    fn back_edge_check(&mut self) {
        let h = self.h();
        let (limit, cancel, abort) = (h.limit, h.cancel, h.abort);
        let c = self.b.use_var(self.cnt);
        let over = self.b.ins().icmp(IntCC::UnsignedGreaterThan, c, limit);
        let cv = self.b.ins().load(types::I8, flags(), cancel, 0);
        let av = self.b.ins().load(types::I8, flags(), abort, 0);
        let flags_set = self.b.ins().bor(cv, av);
        let fs = self.b.ins().icmp_imm_s(IntCC::NotEqual, flags_set, 0);
        let stop = self.b.ins().bor(over, fs);
        let cont = self.b.create_block();
        let lim = self.limit_exit.expect("limit exit");
        self.b.ins().brif(stop, lim, &[], cont, &[]);
        self.b.switch_to_block(cont);
    }

    fn pred(&mut self, p: R, neg: bool) -> Value {
        let v = self.get(p);
        let bit = self.b.ins().band_imm_s(v, 1);
        self.b.ins().icmp_imm_s(if neg { IntCC::Equal } else { IntCC::NotEqual }, bit, 0)
    }

    /// Emits instruction `pc`; returns whether the current block is still open.
    pub(super) fn inst(&mut self, pc: usize) -> Result<bool, JitError> {
        let open = self.inst_body(pc)?;
        if open && self.a.through.get(pc).is_some_and(|t| !t.is_empty()) {
            let base = self.spill_base();
            for r in self.a.through[pc].clone() {
                self.spill_store(base, r);
            }
        }
        Ok(open)
    }

    fn inst_body(&mut self, pc: usize) -> Result<bool, JitError> {
        if let Some(plan) = &self.a.plan {
            let ins = &self.a.f.insts[pc];
            let varying_branch =
                matches!(ins.inst, Inst::Bra { .. }) && ins.guard.is_some_and(|(p, _)| plan.varying[p as usize]);
            if varying_branch {
                return self.region(pc);
            }
            if plan.per_lane(self.a.f, pc) {
                return self.lanes_inst(pc);
            }
        }
        self.one_inst(pc)
    }

    /// Emits instruction `pc` for one thread: the thread of one-thread code, the lane being
    /// emitted, or the whole group where nothing in it varies by lane.
    pub(super) fn one_inst(&mut self, pc: usize) -> Result<bool, JitError> {
        let ins = self.a.f.insts[pc].clone();
        if let Inst::Bra { target, .. } = ins.inst {
            self.flush_count();
            if (target as usize) <= pc {
                self.back_edge_check();
            }
            let tb = self.blocks[(target as usize).min(self.a.f.insts.len())].expect("target");
            let fall = self.blocks[pc + 1].expect("fallthrough");
            match ins.guard {
                None => {
                    self.b.ins().jump(tb, &[]);
                }
                Some((p, neg)) => {
                    let c = self.pred(p, neg);
                    self.b.ins().brif(c, tb, &[], fall, &[]);
                }
            }
            return Ok(false);
        }
        let Some((p, neg)) = ins.guard else {
            return self.body(pc, &ins);
        };
        self.flush_count();
        let c = self.pred(p, neg);
        let run = self.b.create_block();
        let skip = self.b.create_block();
        self.b.ins().brif(c, run, &[], skip, &[]);
        self.b.switch_to_block(run);
        if self.body(pc, &ins)? {
            self.flush_count();
            self.b.ins().jump(skip, &[]);
        }
        self.b.switch_to_block(skip);
        Ok(true)
    }

    fn body(&mut self, pc: usize, ins: &Instr) -> Result<bool, JitError> {
        match ins.inst {
            Inst::Un { op, d, a } => {
                self.dst_nan_blind = self.a.nan_blind[d as usize];
                let v = self.un(pc, op, d, a);
                self.dst_nan_blind = false;
                self.put(d, v);
            }
            Inst::Bin { op, d, a, b } => {
                self.dst_nan_blind = self.a.nan_blind[d as usize];
                let v = self.bin(pc, op, a, b);
                self.dst_nan_blind = false;
                self.put(d, v);
            }
            Inst::Tern { op, d, a, b, c } => {
                self.dst_nan_blind = self.a.nan_blind[d as usize];
                let v = self.tern(pc, op, d, a, b, c);
                self.dst_nan_blind = false;
                self.put(d, v);
            }
            Inst::Bfi { w, d, f, b, pos, len } => {
                let args = [self.iconst(w.bits() as u64), self.get(f), self.get(b), self.get(pos), self.get(len)];
                let v = self.call(h_bfi as *const () as usize, &args);
                self.set(d, v);
            }
            Inst::Setp { ty, cmp, ftz, d, dn, a, b, comb } => {
                let t = self.compare(pc, ty, cmp, ftz, a, b);
                match comb {
                    Some((op, c, neg)) => {
                        let cv = self.get(c);
                        let cv = self.b.ins().band_imm_s(cv, 1);
                        let cv = if neg { self.b.ins().bxor_imm_s(cv, 1) } else { cv };
                        let r = self.boolop(op, t, cv);
                        self.set(d, r);
                        if let Some(q) = dn {
                            let tn = self.b.ins().bxor_imm_s(t, 1);
                            let r2 = self.boolop(op, tn, cv);
                            self.set(q, r2);
                        }
                    }
                    None => {
                        self.set(d, t);
                        if let Some(q) = dn {
                            let tn = self.b.ins().bxor_imm_s(t, 1);
                            self.set(q, tn);
                        }
                    }
                }
            }
            Inst::Set { ty, cmp, ftz, d, float_result, a, b, comb } => {
                let mut t = self.compare(pc, ty, cmp, ftz, a, b);
                if let Some((op, c, neg)) = comb {
                    let cv = self.get(c);
                    let cv = self.b.ins().band_imm_s(cv, 1);
                    let cv = if neg { self.b.ins().bxor_imm_s(cv, 1) } else { cv };
                    t = self.boolop(op, t, cv);
                }
                let yes = self.iconst(if float_result { 1.0f32.to_bits() as u64 } else { 0xFFFF_FFFF });
                let zero = self.iconst(0);
                let r = self.b.ins().select(t, yes, zero);
                self.set(d, r);
            }
            Inst::FrameAddr { d, off } => {
                let v = self.iconst(off as u64);
                self.set(d, v);
            }
            Inst::Cvta { to_generic, space, d, a, dmask } => {
                let base = window_base(space);
                let x = self.get(a);
                let v = if to_generic {
                    self.b.ins().iadd_imm_s(x, base as i64)
                } else {
                    self.b.ins().iadd_imm_s(x, (base as i64).wrapping_neg())
                };
                let v = self.mask(v, dmask);
                self.set(d, v);
            }
            Inst::Ld { space, size, sext, dmask, n, d, addr } => {
                let (base, off) = self.addr_parts(&addr);
                self.vector_alignment(pc, space, n, size, (base, off));
                // The index reads several parallel lists.
                #[allow(clippy::needless_range_loop)]
                for k in 0..n as usize {
                    let at = (base, off.wrapping_add((k * size as usize) as i64));
                    // A float register takes the loaded bits straight into a float register.
                    let fty = match (self.a.classes[d[k] as usize], size) {
                        (Class::F32, 4) if !sext && dmask >= u32::MAX as u64 => Some(types::F32),
                        (Class::F64, 8) if dmask == u64::MAX => Some(types::F64),
                        _ => None,
                    };
                    if let Some(fty) = fty {
                        let v = self.load(pc, space, size, at, &addr, k, fty);
                        self.def_raw(d[k], v);
                        continue;
                    }
                    let v = self.load(pc, space, size, at, &addr, k, types::I64);
                    let sbits = size as u32 * 8;
                    let v = if sext && sbits < 64 {
                        let s = self.b.ins().ishl_imm_s(v, (64 - sbits) as i64);
                        self.b.ins().sshr_imm_s(s, (64 - sbits) as i64)
                    } else {
                        v
                    };
                    let v = self.mask(v, dmask);
                    self.set(d[k], v);
                }
            }
            Inst::St { space, size, n, a: srcs, addr } => {
                let (base, off) = self.addr_parts(&addr);
                self.vector_alignment(pc, space, n, size, (base, off));
                for (k, &s) in srcs.iter().enumerate().take(n as usize) {
                    let at = (base, off.wrapping_add((k * size as usize) as i64));
                    self.store(pc, space, size, at, &addr, s);
                }
            }
            Inst::Atom { d, addr, b, c, .. } => {
                let a = self.address(&addr);
                let bv = self.get(b);
                let cv = self.get(c);
                let old = self.slow(pc, a, bv, cv);
                if let Some(d) = d {
                    self.set(d, old);
                }
            }
            Inst::Ret | Inst::Exit => {
                self.thread_exit();
                return Ok(false);
            }
            Inst::Trap => {
                self.flush_count();
                let t = self.b.use_var(self.t);
                let ctx = self.h().ctx;
                self.b.ins().store(flags(), t, ctx, offset_of!(JitCtx, stop_thread) as i32);
                let p = self.iconst(pc as u64);
                self.b.ins().store(flags(), p, ctx, offset_of!(JitCtx, stop_pc) as i32);
                let r = self.b.ins().iconst(types::I32, ST_TRAP as i64);
                let c = self.b.use_var(self.cnt);
                self.b.ins().store(flags(), c, ctx, offset_of!(JitCtx, count) as i32);
                self.b.ins().return_(&[r]);
                return Ok(false);
            }
            Inst::Bar { .. }
            | Inst::Shfl { .. }
            | Inst::Mma(_)
            | Inst::Ldmatrix { .. }
            | Inst::Stmatrix { .. }
            | Inst::Movmatrix { .. } => {
                let Some(&k) = self.a.bar_index.get(&pc) else {
                    // Runs with the boundary of the run of warp instructions it begins.
                    return Ok(true);
                };
                self.flush_count();
                let base = self.spill_base();
                let mut first_only = Vec::new();
                for r in self.a.keep[&pc].clone() {
                    if !self.a.clean_resumed[&pc].contains(&r) {
                        self.spill_store(base, r);
                    } else if !self.a.clean[&pc].contains(&r) {
                        first_only.push(r);
                    }
                }
                if !first_only.is_empty() {
                    // Dirty only where the segment began at the kernel's start.
                    let first = self.first_segment.expect("a kernel with boundaries");
                    let is_first = self.b.use_var(first);
                    let store = self.b.create_block();
                    let done = self.b.create_block();
                    self.b.ins().brif(is_first, store, &[], done, &[]);
                    self.b.switch_to_block(store);
                    for r in first_only {
                        self.spill_store(base, r);
                    }
                    self.b.ins().jump(done, &[]);
                    self.b.switch_to_block(done);
                }
                // The exchange reads a shuffle's operands, and a run of warp matrix instructions
                // the operands it does not write itself first, as 64-bit words from the spill area.
                let mut srcs = Vec::new();
                if matches!(ins.inst, Inst::Shfl { .. }) {
                    srcs = operands(ins).0;
                }
                let mut written = Vec::new();
                for w in &self.a.bounds[k as usize].warp {
                    let (uses, defs) = operands(w);
                    srcs.extend(uses.into_iter().filter(|r| !written.contains(r)));
                    written.extend(defs);
                }
                srcs.sort_unstable();
                srcs.dedup();
                for r in srcs {
                    // Constants need no store, and a register that lives in the spill area is there.
                    if self.a.consts[r as usize].is_none() && !matches!(self.reprs[r as usize], Repr::Spill) {
                        let v = self.get(r);
                        self.b.ins().store(flags(), v, base, (r * 8) as i32);
                    }
                }
                self.set_state(k + 1);
                let next = self.next_thread.expect("next");
                self.b.ins().jump(next, &[]);
                return Ok(false);
            }
            Inst::CpAsync { size, src_size, dst, src } => {
                let (d, s) = (self.addr_parts(&dst), self.addr_parts(&src));
                let root = self.root_of(&src);
                self.copy_async(pc, size, src_size, d, s, root);
            }
            Inst::Nop => {}
            Inst::Bra { .. }
            | Inst::Vote { .. }
            | Inst::Activemask { .. }
            | Inst::Redux { .. }
            | Inst::Clock { .. }
            | Inst::Call { .. }
            | Inst::Mbar { .. }
            | Inst::CpBulk { .. }
            | Inst::Elect { .. }
            | Inst::Wgmma(_)
            | Inst::WarpSync => {
                return Err(JitError::Translate { what: "an instruction without native code", line: ins.line })
            }
        }
        Ok(true)
    }

    fn put(&mut self, d: R, v: Out) {
        match v {
            Out::I(v) => self.set(d, v),
            Out::F32(x) => self.set_f32(d, x),
            Out::F64(x) => self.set_f64(d, x),
        }
    }

    pub(super) fn mask(&mut self, v: Value, m: u64) -> Value {
        if m == u64::MAX {
            v
        } else {
            self.b.ins().band_imm_s(v, m as i64)
        }
    }

    fn boolop(&mut self, op: BoolOp, a: Value, b: Value) -> Value {
        match op {
            BoolOp::And => self.b.ins().band(a, b),
            BoolOp::Or => self.b.ins().bor(a, b),
            BoolOp::Xor => self.b.ins().bxor(a, b),
        }
    }

    /// An address as base value and constant offset (kept apart so that accesses at offsets from
    /// one base share its region lookup).
    fn addr_parts(&mut self, a: &Addr) -> (Value, i64) {
        match a.base {
            Base::Reg(r) => (self.get(r), a.off),
            Base::Abs | Base::Frame => (self.iconst(0), a.off),
        }
    }

    fn address(&mut self, a: &Addr) -> Value {
        match a.base {
            Base::Reg(r) => {
                let v = self.get(r);
                self.b.ins().iadd_imm_s(v, a.off)
            }
            // The entry's frame starts at local offset 0 (calls run on the interpreter).
            Base::Abs | Base::Frame => self.iconst(a.off as u64),
        }
    }

    /// A compare as 0/1 in 64 bits.
    fn compare(&mut self, pc: usize, ty: CmpTy, cmp: Cmp, ftz: bool, a: R, b: R) -> Value {
        let icc = |signed: bool| int_cc(cmp, signed);
        let fcc = || -> FloatCC {
            match cmp {
                Cmp::Eq => FloatCC::Equal,
                Cmp::Ne => FloatCC::OrderedNotEqual,
                Cmp::Lt => FloatCC::LessThan,
                Cmp::Le => FloatCC::LessThanOrEqual,
                Cmp::Gt => FloatCC::GreaterThan,
                Cmp::Ge => FloatCC::GreaterThanOrEqual,
                Cmp::Equ => FloatCC::UnorderedOrEqual,
                Cmp::Neu => FloatCC::NotEqual,
                Cmp::Ltu => FloatCC::UnorderedOrLessThan,
                Cmp::Leu => FloatCC::UnorderedOrLessThanOrEqual,
                Cmp::Gtu => FloatCC::UnorderedOrGreaterThan,
                Cmp::Geu => FloatCC::UnorderedOrGreaterThanOrEqual,
                Cmp::Num => FloatCC::Ordered,
                Cmp::Nan => FloatCC::Unordered,
            }
        };
        let c = match ty {
            CmpTy::U(W::W32) | CmpTy::S(W::W32) | CmpTy::B(W::W32)
                if icc(matches!(ty, CmpTy::S(_))).is_some()
                    && (matches!(ty, CmpTy::U(_) | CmpTy::S(_)) || matches!(cmp, Cmp::Eq | Cmp::Ne)) =>
            {
                let cc = icc(matches!(ty, CmpTy::S(_))).expect("int compare");
                let (x, y) = (self.get(a), self.get(b));
                let (x, y) = (self.lo32(x), self.lo32(y));
                self.b.ins().icmp(cc, x, y)
            }
            CmpTy::U(W::W64) | CmpTy::S(W::W64) | CmpTy::B(W::W64)
                if icc(matches!(ty, CmpTy::S(_))).is_some()
                    && (matches!(ty, CmpTy::U(_) | CmpTy::S(_)) || matches!(cmp, Cmp::Eq | Cmp::Ne)) =>
            {
                let cc = icc(matches!(ty, CmpTy::S(_))).expect("int compare");
                let (x, y) = (self.get(a), self.get(b));
                self.b.ins().icmp(cc, x, y)
            }
            CmpTy::F(F::F32) if !ftz => {
                let (x, y) = (self.get_f32(a), self.get_f32(b));
                self.b.ins().fcmp(fcc(), x, y)
            }
            CmpTy::F(F::F64) => {
                let (x, y) = (self.get_f64(a), self.get_f64(b));
                self.b.ins().fcmp(fcc(), x, y)
            }
            _ => {
                let (x, y) = (self.get(a), self.get(b));
                let ip = self.inst_ptr(pc);
                return self.call(h_cmp as *const () as usize, &[ip, x, y]);
            }
        };
        self.zx(c)
    }

    fn un(&mut self, pc: usize, op: UnOp, d: R, a: R) -> Out {
        let dc = self.a.classes[d as usize];
        match op {
            UnOp::Mov(m) if dc == Class::F32 && m >= u32::MAX as u64 => return Out::F32(self.get_f32(a)),
            UnOp::Mov(u64::MAX) if dc == Class::F64 => return Out::F64(self.get_f64(a)),
            UnOp::FNeg(F::F32, false) => {
                let v = self.get_f32(a);
                return Out::F32(self.b.ins().fneg(v));
            }
            UnOp::FAbs(F::F32, false) => {
                let v = self.get_f32(a);
                return Out::F32(self.b.ins().fabs(v));
            }
            UnOp::FNeg(F::F64, _) => {
                let v = self.get_f64(a);
                return Out::F64(self.b.ins().fneg(v));
            }
            UnOp::FAbs(F::F64, _) => {
                let v = self.get_f64(a);
                return Out::F64(self.b.ins().fabs(v));
            }
            UnOp::FRcp(F::F32, FMode::Ieee(Rnd::Rn), false) => {
                let v = self.get_f32(a);
                let one = self.b.ins().f32const(1.0);
                let r = self.b.ins().fdiv(one, v);
                return Out::F32(self.canon32(r));
            }
            UnOp::FSqrt(F::F32, FMode::Ieee(Rnd::Rn), false) => {
                let v = self.get_f32(a);
                let r = self.b.ins().sqrt(v);
                return Out::F32(self.canon32(r));
            }
            // The special functions follow the launch's model, which the helpers read: one
            // implementation with the interpreter's.
            UnOp::FRcp(F::F32, FMode::Approx, false) => return self.f32_helper(a, h_rcp_approx as *const () as u64),
            UnOp::FSqrt(F::F32, FMode::Approx, false) => return self.f32_helper(a, h_sqrt_approx as *const () as u64),
            UnOp::FRsqrt(F::F32, false) => return self.f32_helper(a, h_rsqrt_approx as *const () as u64),
            UnOp::FEx2(F::F32, false) => return self.f32_helper(a, h_ex2 as *const () as u64),
            UnOp::Cvt(c)
                if matches!(
                    (c.from, c.to, c.rnd, c.sat),
                    (Ty::S32 | Ty::U32, Ty::F32, Some(Rnd::Rn) | None, false)
                ) =>
            {
                let x = self.get(a);
                let v = self.lo32(x);
                return Out::F32(if c.from == Ty::S32 {
                    self.b.ins().fcvt_from_sint(types::F32, v)
                } else {
                    self.b.ins().fcvt_from_uint(types::F32, v)
                });
            }
            _ => {}
        }
        let x = self.get(a);
        Out::I(match op {
            UnOp::Mov(m) => self.mask(x, m),
            UnOp::Extract(sh, m) => {
                let v = self.b.ins().ushr_imm_s(x, sh as i64);
                self.mask(v, m)
            }
            UnOp::Not(m) => {
                let v = self.b.ins().bnot(x);
                self.mask(v, m)
            }
            UnOp::PredNot => {
                let v = self.b.ins().band_imm_s(x, 1);
                self.b.ins().bxor_imm_s(v, 1)
            }
            UnOp::Neg(W::W32) => {
                let v = self.lo32(x);
                let v = self.b.ins().ineg(v);
                self.zx(v)
            }
            UnOp::Neg(W::W64) => self.b.ins().ineg(x),
            UnOp::Cvt(c) => match (c.from, c.to, c.rnd, c.sat, c.ftz) {
                (Ty::S32, Ty::S64, _, false, _) => {
                    let v = self.lo32(x);
                    self.sx(v)
                }
                (Ty::U32, Ty::U64, _, false, _)
                | (Ty::U64 | Ty::S64 | Ty::B64, Ty::U32 | Ty::S32 | Ty::B32, _, false, _) => {
                    self.b.ins().band_imm_s(x, 0xFFFF_FFFF)
                }
                (Ty::F32, Ty::F16, Some(Rnd::Rn), false, false) if !c.satfinite && !c.int_round => self.f16_of_f32(x),
                _ => self.helper_un(pc, x),
            },
            _ => self.helper_un(pc, x),
        })
    }

    /// `cvt.rn.f16.f32` without `.ftz`, `.sat` or `.satfinite` (Triton's epilogue packs every f32
    /// accumulator to f16 this way), inline: the f32 bits in `x` rounded to the nearest f16, ties to
    /// even, as the interpreter's conversion (`math::from_f64`) rounds them. Above the largest f16
    /// (65520 and up, where the rounding carries into the exponent) the result is infinity; from
    /// 2^-14 up, the mantissa's bit 13 and the bits below it round it (adding 0xFFF, plus one if
    /// the kept part is odd); below 2^-14 (f16 subnormals and zero), the f32 sum of the magnitude
    /// and 0.5, whose last bit is worth 2^-24 (the f16 subnormal step), is the f16 rounded to
    /// nearest even by the addition itself, 0.5 taken off; a NaN is the canonical 0x7FFF.
    fn f16_of_f32(&mut self, x: Value) -> Value {
        let f = self.b.ins().ireduce(types::I32, x);
        let abs = self.b.ins().band_imm_s(f, 0x7FFF_FFFF);
        let sign = self.b.ins().ushr_imm_s(f, 16);
        let sign = self.b.ins().band_imm_s(sign, 0x8000);
        let odd = self.b.ins().ushr_imm_s(abs, 13);
        let odd = self.b.ins().band_imm_s(odd, 1);
        let normal = self.b.ins().iadd_imm_s(abs, ((15 - 127) << 23) + 0xFFF);
        let normal = self.b.ins().iadd(normal, odd);
        let normal = self.b.ins().ushr_imm_s(normal, 13);
        let magnitude = self.b.ins().bitcast(types::F32, MemFlagsData::new(), abs);
        let half = self.b.ins().f32const(Ieee32::with_bits(0x3F00_0000));
        let sum = self.b.ins().fadd(magnitude, half);
        let sum = self.b.ins().bitcast(types::I32, MemFlagsData::new(), sum);
        let subnormal = self.b.ins().iadd_imm_s(sum, -0x3F00_0000);
        let small = self.b.ins().icmp_imm_s(IntCC::UnsignedLessThan, abs, 0x3880_0000);
        let big = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, abs, 0x4780_0000);
        let nan = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThan, abs, 0x7F80_0000);
        let inf = self.b.ins().iconst(types::I32, 0x7C00);
        let v = self.b.ins().select(small, subnormal, normal);
        let v = self.b.ins().select(big, inf, v);
        let v = self.b.ins().bor(v, sign);
        let canonical = self.b.ins().iconst(types::I32, 0x7FFF);
        let v = self.b.ins().select(nan, canonical, v);
        self.zx(v)
    }

    fn helper_un(&mut self, pc: usize, x: Value) -> Value {
        let ip = self.inst_ptr(pc);
        self.call(h_un as *const () as usize, &[ip, x])
    }

    /// An f32 function of one operand that a helper `extern "C" fn(f32) -> u32` computes (the
    /// result's bits).
    fn f32_helper(&mut self, a: R, callee: u64) -> Out {
        let v = self.get_f32(a);
        let sig = self.sig_f32();
        let callee = self.iconst(callee);
        let c = self.b.ins().call_indirect(sig, callee, &[v]);
        let bits = self.b.inst_results(c)[0];
        Out::F32(self.b.ins().bitcast(types::F32, MemFlagsData::new(), bits))
    }

    fn bin(&mut self, pc: usize, op: BinOp, a: R, b: R) -> Out {
        macro_rules! f32op {
            ($m:ident) => {{
                let (p, q) = (self.get_f32(a), self.get_f32(b));
                let v = self.b.ins().$m(p, q);
                return Out::F32(self.canon32(v));
            }};
        }
        macro_rules! f64op {
            ($m:ident) => {{
                let (p, q) = (self.get_f64(a), self.get_f64(b));
                let v = self.b.ins().$m(p, q);
                return Out::F64(self.canon64(v));
            }};
        }
        match op {
            BinOp::FAdd(F::F32, Rnd::Rn, PLAIN_F) => f32op!(fadd),
            BinOp::FSub(F::F32, Rnd::Rn, PLAIN_F) => f32op!(fsub),
            BinOp::FMul(F::F32, Rnd::Rn, PLAIN_F) => f32op!(fmul),
            BinOp::FDiv(F::F32, FMode::Ieee(Rnd::Rn) | FMode::Approx, false) => f32op!(fdiv),
            BinOp::FMin(F::F32, false, false) | BinOp::FMax(F::F32, false, false) => {
                // PTX min/max: a NaN operand yields the other one; Cranelift's min/max order -0
                // below +0 as PTX does.
                let (p, q) = (self.get_f32(a), self.get_f32(b));
                let m = if matches!(op, BinOp::FMax(..)) { self.b.ins().fmax(p, q) } else { self.b.ins().fmin(p, q) };
                let qn = self.b.ins().fcmp(FloatCC::Unordered, q, q);
                let r = self.b.ins().select(qn, p, m);
                let pn = self.b.ins().fcmp(FloatCC::Unordered, p, p);
                let r = self.b.ins().select(pn, q, r);
                return Out::F32(self.canon32(r));
            }
            BinOp::FAdd(F::F64, Rnd::Rn, _) => f64op!(fadd),
            BinOp::FSub(F::F64, Rnd::Rn, _) => f64op!(fsub),
            BinOp::FMul(F::F64, Rnd::Rn, _) => f64op!(fmul),
            _ => {}
        }
        let (x, y) = (self.get(a), self.get(b));
        macro_rules! i32op {
            ($m:ident) => {{
                let (p, q) = (self.lo32(x), self.lo32(y));
                let v = self.b.ins().$m(p, q);
                self.zx(v)
            }};
        }
        Out::I(match op {
            BinOp::Add(W::W32) => i32op!(iadd),
            BinOp::Sub(W::W32) => i32op!(isub),
            BinOp::MulLo(W::W32) => i32op!(imul),
            BinOp::Add(W::W64) => self.b.ins().iadd(x, y),
            BinOp::Sub(W::W64) => self.b.ins().isub(x, y),
            BinOp::MulLo(W::W64) => self.b.ins().imul(x, y),
            BinOp::MulWideU(W::W32) => {
                let (p, q) = (self.lo32(x), self.lo32(y));
                let (p, q) = (self.zx(p), self.zx(q));
                self.b.ins().imul(p, q)
            }
            BinOp::MulWideS(W::W32) => {
                let (p, q) = (self.lo32(x), self.lo32(y));
                let (p, q) = (self.sx(p), self.sx(q));
                self.b.ins().imul(p, q)
            }
            BinOp::MulHiU(W::W64) => self.b.ins().umulhi(x, y),
            BinOp::MulHiS(W::W64) => self.b.ins().smulhi(x, y),
            BinOp::MulHiU(W::W32) => {
                let (p, q) = (self.lo32(x), self.lo32(y));
                let v = self.b.ins().umulhi(p, q);
                self.zx(v)
            }
            BinOp::MulHiS(W::W32) => {
                let (p, q) = (self.lo32(x), self.lo32(y));
                let v = self.b.ins().smulhi(p, q);
                self.zx(v)
            }
            BinOp::MinU(W::W32) => i32op!(umin),
            BinOp::MaxU(W::W32) => i32op!(umax),
            BinOp::MinS(W::W32) => i32op!(smin),
            BinOp::MaxS(W::W32) => i32op!(smax),
            BinOp::MinU(W::W64) => self.b.ins().umin(x, y),
            BinOp::MaxU(W::W64) => self.b.ins().umax(x, y),
            BinOp::MinS(W::W64) => self.b.ins().smin(x, y),
            BinOp::MaxS(W::W64) => self.b.ins().smax(x, y),
            BinOp::And | BinOp::PredAnd => self.b.ins().band(x, y),
            BinOp::Or | BinOp::PredOr => self.b.ins().bor(x, y),
            BinOp::Xor | BinOp::PredXor => self.b.ins().bxor(x, y),
            BinOp::Shl(W::W32) | BinOp::ShrU(W::W32) | BinOp::ShrS(W::W32) => {
                // Shift amounts at or past the width give 0 (or the sign for an arithmetic shift).
                let s = self.lo32(y);
                let p = self.lo32(x);
                let big = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, s, 32);
                let v = match op {
                    BinOp::Shl(_) => {
                        let v = self.b.ins().ishl(p, s);
                        let z = self.b.ins().iconst(types::I32, 0);
                        self.b.ins().select(big, z, v)
                    }
                    BinOp::ShrU(_) => {
                        let v = self.b.ins().ushr(p, s);
                        let z = self.b.ins().iconst(types::I32, 0);
                        self.b.ins().select(big, z, v)
                    }
                    _ => {
                        let k = self.b.ins().iconst(types::I32, 31);
                        let s2 = self.b.ins().select(big, k, s);
                        self.b.ins().sshr(p, s2)
                    }
                };
                self.zx(v)
            }
            BinOp::Shl(W::W64) | BinOp::ShrU(W::W64) | BinOp::ShrS(W::W64) => {
                let s = self.lo32(y);
                let big = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, s, 64);
                let s64 = self.zx(s);
                match op {
                    BinOp::Shl(_) => {
                        let v = self.b.ins().ishl(x, s64);
                        let z = self.iconst(0);
                        self.b.ins().select(big, z, v)
                    }
                    BinOp::ShrU(_) => {
                        let v = self.b.ins().ushr(x, s64);
                        let z = self.iconst(0);
                        self.b.ins().select(big, z, v)
                    }
                    _ => {
                        let k = self.iconst(63);
                        let s2 = self.b.ins().select(big, k, s64);
                        self.b.ins().sshr(x, s2)
                    }
                }
            }
            BinOp::Pack(sh) => {
                let s = self.b.ins().ishl_imm_s(y, sh as i64);
                self.b.ins().bor(x, s)
            }
            _ => {
                let ip = self.inst_ptr(pc);
                self.call(h_bin as *const () as usize, &[ip, x, y])
            }
        })
    }

    fn tern(&mut self, pc: usize, op: TernOp, d: R, a: R, b: R, c: R) -> Out {
        match op {
            TernOp::Fma(F::F32, Rnd::Rn, PLAIN_F) => {
                let (p, q, r) = (self.get_f32(a), self.get_f32(b), self.get_f32(c));
                let v = self.b.ins().fma(p, q, r);
                return Out::F32(self.canon32(v));
            }
            TernOp::Fma(F::F64, Rnd::Rn, PLAIN_F) => {
                let (p, q, r) = (self.get_f64(a), self.get_f64(b), self.get_f64(c));
                let v = self.b.ins().fma(p, q, r);
                return Out::F64(self.canon64(v));
            }
            // A negation flips the sign bit, as `ops::fma_bits`'s caller does.
            TernOp::FmaNeg(F::F32, PLAIN_F, neg_product, neg_addend) => {
                let (mut p, q, mut r) = (self.get_f32(a), self.get_f32(b), self.get_f32(c));
                if neg_product {
                    p = self.b.ins().fneg(p);
                }
                if neg_addend {
                    r = self.b.ins().fneg(r);
                }
                let v = self.b.ins().fma(p, q, r);
                return Out::F32(self.canon32(v));
            }
            TernOp::FmaNeg(F::F64, PLAIN_F, neg_product, neg_addend) => {
                let (mut p, q, mut r) = (self.get_f64(a), self.get_f64(b), self.get_f64(c));
                if neg_product {
                    p = self.b.ins().fneg(p);
                }
                if neg_addend {
                    r = self.b.ins().fneg(r);
                }
                let v = self.b.ins().fma(p, q, r);
                return Out::F64(self.canon64(v));
            }
            // The chosen operand's bits are the result: select in the destination's domain.
            TernOp::Selp if self.a.classes[d as usize] != Class::Int => {
                let z = self.get(c);
                let bit = self.b.ins().band_imm_s(z, 1);
                return if self.a.classes[d as usize] == Class::F32 {
                    let (x, y) = (self.get_f32(a), self.get_f32(b));
                    Out::F32(self.b.ins().select(bit, x, y))
                } else {
                    let (x, y) = (self.get_f64(a), self.get_f64(b));
                    Out::F64(self.b.ins().select(bit, x, y))
                };
            }
            _ => {}
        }
        let (x, y, z) = (self.get(a), self.get(b), self.get(c));
        Out::I(match op {
            TernOp::MadLo(W::W32) => {
                let (p, q, r) = (self.lo32(x), self.lo32(y), self.lo32(z));
                let m = self.b.ins().imul(p, q);
                let v = self.b.ins().iadd(m, r);
                self.zx(v)
            }
            TernOp::MadLo(W::W64) => {
                let m = self.b.ins().imul(x, y);
                self.b.ins().iadd(m, z)
            }
            TernOp::MadWideU(W::W32) | TernOp::MadWideS(W::W32) => {
                let (p, q) = (self.lo32(x), self.lo32(y));
                let (p, q) =
                    if matches!(op, TernOp::MadWideU(_)) { (self.zx(p), self.zx(q)) } else { (self.sx(p), self.sx(q)) };
                let m = self.b.ins().imul(p, q);
                self.b.ins().iadd(m, z)
            }
            TernOp::Selp => {
                let bit = self.b.ins().band_imm_s(z, 1);
                self.b.ins().select(bit, x, y)
            }
            _ => {
                let ip = self.inst_ptr(pc);
                self.call(h_tern as *const () as usize, &[ip, x, y, z])
            }
        })
    }
}
