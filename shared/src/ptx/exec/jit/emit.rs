//! The translator's state while it emits one function: the Cranelift function builder, the
//! variables PTX registers live in ([`Repr`]), the values loaded once at the function's entry
//! ([`Hoisted`]), the blocks of the thread loop, and the primitives every part of the translator
//! uses: reading and writing a register in the domain it lives in, calls to helpers, and the
//! spill area a thread keeps its registers in across a boundary.

use std::collections::HashMap;

use cranelift_codegen::entity::EntityRef;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::{
    types, AbiParam, Block, FuncRef, InstBuilder, MemFlagsData, SigRef, Signature, Type, Value,
};
use cranelift_frontend::{FunctionBuilder, Variable};

use super::analysis::{Analysis, Class, Layout};
use super::checks::{LaneAddrs, RootEntry};
use super::error::JitError;
use super::lanes::{vflags, Step, LANES, PARTS};
use super::runtime::Meta;
use crate::ptx::ir::*;
use crate::ptx::math::*;

/// The variables a register's value lives in, as its [`Layout`] says: in one-thread code every
/// register is [`Repr::One`].
#[derive(Clone, Copy)]
pub(super) enum Repr {
    /// One value: the thread's, or the group's when it is the same for every lane.
    One,
    /// The lanes' 32-bit values in vectors of four (`I32X4`, or `F32X4` for an f32 register):
    /// lane `l` is lane `l % 4` of part `l / 4`.
    Vector([Variable; PARTS]),
    /// One scalar per lane, of the register's class.
    PerLane([Variable; LANES]),
    /// No variable: the thread's spill area, where every read loads it and every write stores it
    /// (one-thread code: the registers of the accumulator tiles a run keeps, see
    /// `analysis::Resident`, so that none of them is carried through the code between the run's
    /// passes, where it is neither read nor written).
    Spill,
}

pub(super) struct Hoisted {
    pub(super) ctx: Value,
    pub(super) table: Value,
    pub(super) table_max: Value,
    pub(super) shared: Value,
    pub(super) shared_lim: [Value; 4],
    pub(super) params: Value,
    pub(super) spill: Value,
    pub(super) state: Value,
    pub(super) limit: Value,
    pub(super) cancel: Value,
    pub(super) abort: Value,
}

/// The emission state of one function: the builder, what was emitted so far, and where the
/// translator is; everything known of the function beforehand is in the analysis (`a`).
pub(super) struct Tx<'a, 'b> {
    pub(super) b: FunctionBuilder<'b>,
    pub(super) a: &'a Analysis<'a>,
    pub(super) vars: Vec<Variable>,
    /// Whether the instruction being emitted writes a NaN-blind register.
    pub(super) dst_nan_blind: bool,
    pub(super) root_entries: HashMap<u32, RootEntry>,
    pub(super) blocks: Vec<Option<Block>>,
    pub(super) h: Option<Hoisted>,
    pub(super) cnt: Variable,
    pub(super) t: Variable,
    pub(super) tid: [Variable; 3],
    pub(super) pending: i64,
    pub(super) next_thread: Option<Block>,
    pub(super) fault_exit: Option<Block>,
    pub(super) limit_exit: Option<Block>,
    pub(super) sig_n: [Option<SigRef>; 7],
    pub(super) sig_ff: Option<SigRef>,
    pub(super) call_conv: cranelift_codegen::isa::CallConv,
    /// The `preserve_all` trampoline to `runtime::h_mem` (see `compile::define_slow_mem`).
    pub(super) slow_mem: FuncRef,
    /// Instructions handed to helpers by address (boxed: the addresses stay put as it grows).
    #[allow(clippy::vec_box)]
    pub(super) insts: &'a mut Vec<Box<Instr>>,
    /// The boundaries as the runtime sees them (the code passes their address to a helper).
    pub(super) meta: &'a Meta,
    /// Whether the segment being run began at the kernel's start (a boolean variable).
    pub(super) first_segment: Option<Variable>,
    pub(super) reprs: Vec<Repr>,
    /// Where code for groups runs the code a varying branch jumps over for the whole group: how
    /// each register steps from lane to lane there (see `Tx::region`); elsewhere the kernel's
    /// steps (`Analysis::steps`) hold.
    pub(super) region_steps: Option<Vec<Step>>,
    /// In code for groups, the lane an instruction is being emitted for (`None`: the group).
    pub(super) lane: Option<usize>,
    /// The next instruction the main loop emits (a region emits the code it jumps over).
    pub(super) resume_at: usize,
    /// Why the code cannot be built, found while emitting it.
    pub(super) broken: Option<JitError>,
    /// An open vector access (see `Tx::run_ptr`): its lane-by-lane block, the join, and the
    /// lanes' addresses.
    pub(super) run_blocks: Option<(Block, Block, LaneAddrs)>,
    /// In code for groups, shared memory: the count of 4-aligned positions where a 4-byte
    /// access of every lane (`4 * LANES` bytes) fits.
    pub(super) shared_lim_run: Option<Value>,
    /// Per instruction: whether its shared-memory accesses are proven in bounds where it is
    /// being emitted (see `Tx::prechecked_stretch`).
    pub(super) prechecked: Vec<bool>,
    /// In the fast copy of a prechecked stretch: a stack slot that float vector results are
    /// stored to now and then, and how many results since the last store (see `Tx::anchor`).
    pub(super) anchor_slot: Option<cranelift_codegen::ir::StackSlot>,
    pub(super) unanchored: Option<usize>,
}

pub(super) fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

impl<'a, 'b> Tx<'a, 'b> {
    #[allow(clippy::vec_box)]
    pub(super) fn new(
        mut b: FunctionBuilder<'b>,
        a: &'a Analysis<'a>,
        call_conv: cranelift_codegen::isa::CallConv,
        slow_mem: FuncRef,
        insts: &'a mut Vec<Box<Instr>>,
        meta: &'a Meta,
    ) -> Tx<'a, 'b> {
        let f = a.f;
        let mut reprs: Vec<Repr> = a
            .layouts
            .iter()
            .zip(&a.classes)
            .map(|(layout, class)| match layout {
                Layout::One => Repr::One,
                Layout::Vector => {
                    let ty = if *class == Class::F32 { types::F32X4 } else { types::I32X4 };
                    Repr::Vector(std::array::from_fn(|_| b.declare_var(ty)))
                }
                Layout::PerLane => {
                    let ty = if *class == Class::F64 { types::F64 } else { types::I64 };
                    Repr::PerLane(std::array::from_fn(|_| b.declare_var(ty)))
                }
            })
            .collect();
        for &r in a.resident.iter().flat_map(|res| &res.regs) {
            reprs[r as usize] = Repr::Spill;
        }
        let vars = a
            .classes
            .iter()
            .map(|c| {
                b.declare_var(match c {
                    Class::Int => types::I64,
                    Class::F32 => types::F32,
                    Class::F64 => types::F64,
                })
            })
            .collect();
        let cnt = b.declare_var(types::I64);
        let t = b.declare_var(types::I64);
        let tid = [b.declare_var(types::I64), b.declare_var(types::I64), b.declare_var(types::I64)];
        Tx {
            b,
            a,
            vars,
            dst_nan_blind: false,
            root_entries: HashMap::new(),
            blocks: vec![None; f.insts.len() + 1],
            h: None,
            cnt,
            t,
            tid,
            pending: 0,
            next_thread: None,
            fault_exit: None,
            limit_exit: None,
            sig_n: [None; 7],
            sig_ff: None,
            call_conv,
            slow_mem,
            insts,
            meta,
            first_segment: None,
            reprs,
            region_steps: None,
            lane: None,
            resume_at: 0,
            broken: None,
            run_blocks: None,
            shared_lim_run: None,
            prechecked: vec![false; f.insts.len()],
            anchor_slot: None,
            unanchored: None,
        }
    }

    /// How each register steps from lane to lane where the code being emitted runs (see
    /// `Tx::region_steps`).
    pub(super) fn steps(&self) -> &[Step] {
        self.region_steps.as_deref().unwrap_or(&self.a.steps)
    }

    /// Marks the blocks created since `first` (see [`Tx::block_mark`]) as cold: code that runs
    /// when a check fails moves out of the way of the code that runs every time.
    pub(super) fn cold_since(&mut self, first: usize) {
        for i in first..self.b.func.dfg.num_blocks() {
            self.b.set_cold_block(Block::new(i));
        }
    }

    /// Where the blocks about to be created start, for [`Tx::cold_since`].
    pub(super) fn block_mark(&self) -> usize {
        self.b.func.dfg.num_blocks()
    }

    pub(super) fn h(&self) -> &Hoisted {
        self.h.as_ref().expect("hoisted values")
    }

    pub(super) fn ld_ctx(&mut self, ty: Type, off: usize) -> Value {
        let c = self.h.as_ref().map(|h| h.ctx).expect("ctx");
        self.b.ins().load(ty, flags(), c, off as i32)
    }

    pub(super) fn iconst(&mut self, v: u64) -> Value {
        self.b.ins().iconst(types::I64, v as i64)
    }

    pub(super) fn var_ty(&self, r: R) -> Type {
        match self.a.classes[r as usize] {
            Class::Int => types::I64,
            Class::F32 => types::F32,
            Class::F64 => types::F64,
        }
    }

    /// The register's value for the thread (or lane) being emitted, in its class's type (`I64`,
    /// `F32`, `F64`).
    pub(super) fn raw(&mut self, r: R) -> Value {
        match self.reprs[r as usize] {
            Repr::One => self.b.use_var(self.vars[r as usize]),
            Repr::Spill => {
                let (ty, base) = (self.var_ty(r), self.spill_base());
                self.b.ins().load(ty, flags(), base, (r * 8) as i32)
            }
            Repr::PerLane(vars) => match self.lane {
                Some(l) => self.b.use_var(vars[l]),
                None => self.lane_missing(r),
            },
            Repr::Vector(vars) => match self.lane {
                Some(l) => {
                    let v = self.b.use_var(vars[l / 4]);
                    let x = self.b.ins().extractlane(v, (l % 4) as u8);
                    if self.a.classes[r as usize] == Class::F32 {
                        x
                    } else {
                        self.zx(x)
                    }
                }
                None => self.lane_missing(r),
            },
        }
    }

    /// A varying register read where the code for the whole group is emitted: a flaw of the lane
    /// plan, which fails the compilation (the kernel then runs one thread at a time).
    pub(super) fn lane_missing(&mut self, r: R) -> Value {
        self.broken.get_or_insert(JitError::LaneMissing(r));
        match self.a.classes[r as usize] {
            Class::F32 => self.b.ins().f32const(Ieee32::with_bits(0)),
            Class::F64 => self.b.ins().f64const(Ieee64::with_bits(0)),
            Class::Int => self.iconst(0),
        }
    }

    /// Writes the register for the lane being emitted, or for every lane.
    pub(super) fn def_raw(&mut self, r: R, v: Value) {
        match self.reprs[r as usize] {
            Repr::One => self.b.def_var(self.vars[r as usize], v),
            Repr::Spill => {
                let base = self.spill_base();
                self.b.ins().store(flags(), v, base, (r * 8) as i32);
            }
            Repr::PerLane(vars) => match self.lane {
                Some(l) => self.b.def_var(vars[l], v),
                None => vars.iter().for_each(|&x| self.b.def_var(x, v)),
            },
            Repr::Vector(vars) => {
                let e = if self.a.classes[r as usize] == Class::F32 { v } else { self.lo32(v) };
                match self.lane {
                    Some(l) => {
                        let cur = self.b.use_var(vars[l / 4]);
                        let nv = self.b.ins().insertlane(cur, e, (l % 4) as u8);
                        self.b.def_var(vars[l / 4], nv);
                    }
                    None => {
                        let ty = self.vec_ty(r);
                        let nv = self.b.ins().splat(ty, e);
                        vars.iter().for_each(|&x| self.b.def_var(x, nv));
                    }
                }
            }
        }
    }

    /// A register's 64 bits.
    pub(super) fn get(&mut self, r: R) -> Value {
        if let Some(v) = self.a.consts[r as usize] {
            return self.iconst(v);
        }
        let v = self.raw(r);
        match self.a.classes[r as usize] {
            Class::Int => v,
            Class::F32 => {
                let i = self.b.ins().bitcast(types::I32, MemFlagsData::new(), v);
                self.zx(i)
            }
            Class::F64 => self.b.ins().bitcast(types::I64, MemFlagsData::new(), v),
        }
    }

    /// A register's low 32 bits as an f32.
    pub(super) fn get_f32(&mut self, r: R) -> Value {
        if let Some(v) = self.a.consts[r as usize] {
            return self.b.ins().f32const(Ieee32::with_bits(v as u32));
        }
        match self.a.classes[r as usize] {
            Class::F32 => self.raw(r),
            _ => {
                let v = self.get(r);
                self.f32_of(v)
            }
        }
    }

    pub(super) fn get_f64(&mut self, r: R) -> Value {
        if let Some(v) = self.a.consts[r as usize] {
            return self.b.ins().f64const(Ieee64::with_bits(v));
        }
        match self.a.classes[r as usize] {
            Class::F64 => self.raw(r),
            _ => {
                let v = self.get(r);
                self.f64_of(v)
            }
        }
    }

    /// Writes 64 bits; an f32-class register only ever receives values that fit in 32 bits
    /// (`reg_classes`), so dropping the high half loses nothing.
    pub(super) fn set(&mut self, r: R, v: Value) {
        let v = match self.a.classes[r as usize] {
            Class::Int => v,
            Class::F32 => self.f32_of(v),
            Class::F64 => self.f64_of(v),
        };
        self.def_raw(r, v);
    }

    /// Writes an f32 as its bits, zero-extended.
    pub(super) fn set_f32(&mut self, r: R, x: Value) {
        if self.a.classes[r as usize] == Class::F32 {
            self.def_raw(r, x);
        } else {
            let i = self.b.ins().bitcast(types::I32, MemFlagsData::new(), x);
            let i = self.zx(i);
            self.set(r, i);
        }
    }

    pub(super) fn set_f64(&mut self, r: R, x: Value) {
        if self.a.classes[r as usize] == Class::F64 {
            self.def_raw(r, x);
        } else {
            let i = self.b.ins().bitcast(types::I64, MemFlagsData::new(), x);
            self.set(r, i);
        }
    }

    /// PTX's canonical NaN for a NaN result. A select of floats becomes a branch over a move, so
    /// the check stays off the value's dependency chain.
    pub(super) fn canon32(&mut self, x: Value) -> Value {
        if self.dst_nan_blind {
            return x;
        }
        let isnan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let nan = self.b.ins().f32const(Ieee32::with_bits(NAN32));
        self.b.ins().select(isnan, nan, x)
    }

    pub(super) fn canon64(&mut self, x: Value) -> Value {
        if self.dst_nan_blind {
            return x;
        }
        let isnan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
        let nan = self.b.ins().f64const(Ieee64::with_bits(NAN64));
        self.b.ins().select(isnan, nan, x)
    }

    pub(super) fn flush_count(&mut self) {
        if self.pending > 0 {
            let c = self.b.use_var(self.cnt);
            let c = self.b.ins().iadd_imm_s(c, self.pending);
            self.b.def_var(self.cnt, c);
            self.pending = 0;
        }
    }

    /// Signature of a helper taking `n` 64-bit arguments and returning one.
    pub(super) fn sig(&mut self, n: usize) -> SigRef {
        if let Some(s) = self.sig_n[n] {
            return s;
        }
        let mut s = Signature::new(self.call_conv);
        for _ in 0..n {
            s.params.push(AbiParam::new(types::I64));
        }
        s.returns.push(AbiParam::new(types::I64));
        let r = self.b.import_signature(s);
        self.sig_n[n] = Some(r);
        r
    }

    pub(super) fn call(&mut self, fptr: usize, args: &[Value]) -> Value {
        let sig = self.sig(args.len());
        let callee = self.iconst(fptr as u64);
        let c = self.b.ins().call_indirect(sig, callee, args);
        self.b.inst_results(c)[0]
    }

    /// A stable address of a copy of instruction `pc` for the helpers.
    pub(super) fn inst_ptr(&mut self, pc: usize) -> Value {
        let bx = Box::new(self.a.f.insts[pc].clone());
        let p = &*bx as *const Instr as u64;
        self.insts.push(bx);
        self.iconst(p)
    }

    pub(super) fn lo32(&mut self, v: Value) -> Value {
        self.b.ins().ireduce(types::I32, v)
    }
    pub(super) fn zx(&mut self, v: Value) -> Value {
        self.b.ins().uextend(types::I64, v)
    }
    pub(super) fn sx(&mut self, v: Value) -> Value {
        self.b.ins().sextend(types::I64, v)
    }
    pub(super) fn f32_of(&mut self, v: Value) -> Value {
        let x = self.lo32(v);
        self.b.ins().bitcast(types::F32, MemFlagsData::new(), x)
    }
    pub(super) fn f64_of(&mut self, v: Value) -> Value {
        self.b.ins().bitcast(types::F64, MemFlagsData::new(), v)
    }

    /// Signature of a helper from f32 to its 32 result bits.
    pub(super) fn sig_f32(&mut self) -> SigRef {
        if let Some(s) = self.sig_ff {
            return s;
        }
        let mut s = Signature::new(self.call_conv);
        s.params.push(AbiParam::new(types::F32));
        s.returns.push(AbiParam::new(types::I32));
        let r = self.b.import_signature(s);
        self.sig_ff = Some(r);
        r
    }

    /// Stores register `r` in the spill area at `base` (a thread's, or a group's): `8 * width`
    /// bytes per register, a vector part as 16 bytes, a per-lane register as one word per lane,
    /// a register with one value as one word.
    pub(super) fn spill_store(&mut self, base: Value, r: R) {
        let off = (r as usize * 8 * self.a.width) as i32;
        match self.reprs[r as usize] {
            Repr::Spill => {}
            Repr::One => {
                let v = self.b.use_var(self.vars[r as usize]);
                self.b.ins().store(flags(), v, base, off);
            }
            Repr::Vector(vars) => {
                for (p, var) in vars.into_iter().enumerate() {
                    let v = self.b.use_var(var);
                    self.b.ins().store(vflags(), v, base, off + 16 * p as i32);
                }
            }
            Repr::PerLane(vars) => {
                for (l, var) in vars.iter().enumerate() {
                    let v = self.b.use_var(*var);
                    self.b.ins().store(flags(), v, base, off + 8 * l as i32);
                }
            }
        }
    }

    /// Loads register `r` from the spill area at `base` (see [`Tx::spill_store`]).
    pub(super) fn spill_load(&mut self, base: Value, r: R) {
        let off = (r as usize * 8 * self.a.width) as i32;
        match self.reprs[r as usize] {
            Repr::Spill => {}
            Repr::One => {
                let ty = self.var_ty(r);
                let v = self.b.ins().load(ty, flags(), base, off);
                self.b.def_var(self.vars[r as usize], v);
            }
            Repr::Vector(vars) => {
                let ty = self.vec_ty(r);
                for (p, var) in vars.into_iter().enumerate() {
                    let v = self.b.ins().load(ty, vflags(), base, off + 16 * p as i32);
                    self.b.def_var(var, v);
                }
            }
            Repr::PerLane(vars) => {
                let ty = self.var_ty(r);
                for (l, var) in vars.iter().enumerate() {
                    let v = self.b.ins().load(ty, flags(), base, off + 8 * l as i32);
                    self.b.def_var(*var, v);
                }
            }
        }
    }
}
