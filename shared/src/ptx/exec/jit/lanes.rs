//! Native code for groups of threads in vector lanes.
//!
//! One-thread native code runs a block's threads one after another; a kernel whose threads do
//! the same work on neighbouring data (a tile of a matrix product, a row of an image) then pays
//! the thread loop, the spills at barriers and every access's check once per thread, and does
//! its float arithmetic one lane at a time, in one long dependency chain per thread. This second
//! shape runs [`LANES`] consecutive threads of a row (`%tid.x` a multiple of [`LANES`] apart, same
//! `%tid.y` and `%tid.z`) together:
//! - a register whose value can differ between the threads of a group (*varying*: it depends on
//!   `%tid.x` or `%laneid`, on a per-thread load, or is written under a varying condition) lives
//!   in [`PARTS`] vectors of four lanes (`i32x4`, `f32x4`) when it holds 32 bits, else in one
//!   scalar per lane; every other register is one scalar for the group, computed once;
//! - 32-bit float and integer arithmetic, compares and selects on vectors are vector
//!   instructions, one per part: the parts' dependency chains are independent, so the core
//!   overlaps them (Cranelift's vectors are 128 bits wide; four of them stand in for one AVX-512
//!   register, and a tile's row of 16 threads is one group: one cache line per row access, four
//!   fma chains in flight, and the per-group work of resuming, dispatching and checking paid once
//!   per 16 threads);
//! - a 4-byte load or store whose lanes' addresses are consecutive is one checked access of
//!   `4 * LANES` bytes; otherwise each lane takes one-thread code's checked slow path in order,
//!   so values and faults are those of one-thread code;
//! - a branch whose condition is uniform is an ordinary branch; a varying one must be a forward
//!   branch over straight-line code (an `if` without loops, barriers or exits inside). There the
//!   group jumps when all its lanes take the branch, runs the code as vectors when none does, and
//!   otherwise runs it lane by lane where the branch is not taken;
//! - straight-line code whose shared-memory accesses go through bases computed before it gets one
//!   range check per base at its start and a copy without the checks ([`Tx::prechecked_stretch`]);
//! - groups run down the block's columns, `%tid.y` fastest (see `Tx::build`).
//!
//! Whether a kernel has this shape is decided once, at compile time ([`LanePlan::new`]); a launch
//! uses it when the block's x dimension is a multiple of [`LANES`]. Every lane-by-lane step is
//! the one-thread code for that lane's thread, so slow paths and arithmetic are exactly those of
//! one-thread native code, and the instruction count is the same. Which fault comes first where
//! several threads fault in one segment is not: groups run lanes side by side and rows out of
//! thread order, so a block this code stops on runs again as one-thread code, which names the
//! fault every engine names (`JitKernel::run_block_named`).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::immediates::Ieee32;
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Type, Value};

use super::analysis::{Class, Layout, PLAIN_F};
use super::emit::{Repr, Tx};
use super::error::JitError;
use super::translate::int_cc;
use crate::ptx::flow::uses_defs;
use crate::ptx::ir::*;
use crate::ptx::math::NAN32;

/// Vectors of four 32-bit lanes a varying 32-bit register takes. Four (groups of 16 threads)
/// measured 1.4x faster than two on the tiled matrix product, where two had been faster before
/// the fast copies of straight-line code ([`Tx::prechecked_stretch`]) removed the spills.
pub(super) const PARTS: usize = 4;

/// Threads in one group.
pub(super) const LANES: usize = 4 * PARTS;

/// How many float vector results of a prechecked stretch share one anchoring store (see
/// `Tx::anchor`): few enough that the loads they need fit in the 16 vector registers.
const ANCHOR_EVERY: usize = 2;

/// A varying 32-bit register's value: its lanes, four per vector.
pub(super) type Vecs = [Value; PARTS];

/// Which registers vary within a group.
pub(super) struct LanePlan {
    pub varying: Vec<bool>,
    /// Per instruction: whether it lies in code a varying branch jumps over (it runs for some
    /// lanes of a group only).
    pub in_region: Vec<bool>,
}

impl LanePlan {
    /// The plan, or why the kernel cannot run in lanes.
    pub fn new(f: &Function) -> Result<LanePlan, JitError> {
        let n = f.insts.len();
        let nregs = f.nregs as usize;
        let mut varying = vec![false; nregs];
        for &(r, s) in &f.sregs {
            if matches!(
                s,
                Sreg::Tid(0)
                    | Sreg::LaneId
                    | Sreg::LaneMaskEq
                    | Sreg::LaneMaskLt
                    | Sreg::LaneMaskLe
                    | Sreg::LaneMaskGt
                    | Sreg::LaneMaskGe
            ) {
                varying[r as usize] = true;
            }
        }
        let ud: Vec<_> = f.insts.iter().map(uses_defs).collect();
        // Per instruction: whether it is inside the code a varying forward branch jumps over.
        let mut in_region = vec![false; n];
        loop {
            in_region.fill(false);
            for (pc, ins) in f.insts.iter().enumerate() {
                let Inst::Bra { target, .. } = ins.inst else {
                    continue;
                };
                let Some((p, _)) = ins.guard else { continue };
                if !varying[p as usize] {
                    continue;
                }
                let target = target as usize;
                if target <= pc {
                    return Err(JitError::NoLanes {
                        what: "a loop whose condition differs between threads",
                        line: ins.line,
                    });
                }
                // The index reads several parallel lists.
                #[allow(clippy::needless_range_loop)]
                for q in pc + 1..target.min(n) {
                    if in_region[q] || is_control(&f.insts[q].inst) {
                        return Err(JitError::NoLanes {
                            what: "a branch that differs between threads over more than straight-line code",
                            line: ins.line,
                        });
                    }
                    in_region[q] = true;
                }
            }
            let mut changed = false;
            for (pc, ins) in f.insts.iter().enumerate() {
                let (uses, defs) = &ud[pc];
                let v = in_region[pc] || per_thread(&ins.inst) || uses.iter().any(|&u| varying[u as usize]);
                if v {
                    for &d in defs {
                        if !varying[d as usize] {
                            varying[d as usize] = true;
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
        for ins in &f.insts {
            if let Inst::Bra { target, .. } = ins.inst {
                if (target as usize) < n && in_region[target as usize] {
                    return Err(JitError::NoLanes { what: "a branch into a conditional region", line: ins.line });
                }
            }
            if let Some((p, _)) = ins.guard {
                if varying[p as usize] && matches!(ins.inst, Inst::Ret | Inst::Exit | Inst::Trap | Inst::Bar { .. }) {
                    return Err(JitError::NoLanes {
                        what: "an exit or barrier under a condition that differs between threads",
                        line: ins.line,
                    });
                }
            }
            if matches!(ins.inst, Inst::Shfl { .. }) {
                return Err(JitError::NoLanes { what: "a shuffle", line: ins.line });
            }
            if ins.inst.is_warp_matrix() {
                return Err(JitError::NoLanes { what: "a warp matrix instruction", line: ins.line });
            }
        }
        Ok(LanePlan { varying, in_region })
    }

    /// Whether instruction `pc` runs per lane (or as vectors) rather than once for the group.
    pub fn per_lane(&self, f: &Function, pc: usize) -> bool {
        let ins = &f.insts[pc];
        per_thread(&ins.inst) || uses_defs(ins).0.iter().any(|&u| self.varying[u as usize])
    }
}

pub(super) fn is_control(inst: &Inst) -> bool {
    matches!(
        inst,
        Inst::Bra { .. }
            | Inst::Bar { .. }
            | Inst::Shfl { .. }
            | Inst::Mma(_)
            | Inst::Ldmatrix { .. }
            | Inst::Stmatrix { .. }
            | Inst::Movmatrix { .. }
            | Inst::Ret
            | Inst::Exit
            | Inst::Trap
            | Inst::Call { .. }
    )
}

/// Instructions whose effect or result belongs to each thread even with equal operands: atomics,
/// and accesses that may reach a thread's own local memory.
fn per_thread(inst: &Inst) -> bool {
    match inst {
        Inst::Atom { .. } | Inst::Clock { .. } => true,
        Inst::Ld { space, .. } | Inst::St { space, .. } => {
            !matches!(space, Space::Global | Space::Shared | Space::Const | Space::KParam)
        }
        _ => false,
    }
}

pub(super) fn vflags() -> MemFlagsData {
    // Not `aligned`: a 16-byte access here is only 4-byte aligned.
    MemFlagsData::new().with_notrap()
}

/// How a register's value steps from one lane of a group to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// No definition seen yet (the optimistic start of the analysis).
    Unset,
    /// Lane `l` holds lane 0's value plus `l * stride`, exactly in the register's width. With
    /// `wrap`, a 64-bit value made by widening a 32-bit one (`mul.wide`, a zero or sign
    /// extension): exact unless that 32-bit value wrapped between two lanes of the group, which
    /// would show as a difference between the first and last lane other than `(LANES - 1) *
    /// stride`.
    Affine { stride: i64, wrap: bool },
    /// Anything else.
    Unknown,
}

impl Step {
    const UNIFORM: Step = Step::Affine { stride: 0, wrap: false };

    pub(super) fn affine(stride: i64, wrap: bool) -> Step {
        // A stride of 0 is a value the lanes share, whatever it was widened from.
        Step::Affine { stride, wrap: wrap && stride != 0 }
    }

    fn meet(self, other: Step) -> Step {
        match (self, other) {
            (Step::Unset, x) | (x, Step::Unset) => x,
            (a, b) if a == b => a,
            _ => Step::Unknown,
        }
    }
}

/// The register widths the step analysis tells apart (from the registers' representations).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Width {
    /// One value for the group.
    Uniform,
    /// A varying 32-bit integer in vectors.
    V32,
    /// A varying 64-bit integer, one per lane.
    P64,
    /// A varying float.
    Float,
}

/// Per register, how its lanes step ([`Step`]): a flow-insensitive fixpoint over every
/// definition, so that an access through a base known to step by its size is a vector access
/// without comparing the lanes' addresses. Definitions under a guard or inside a region, and
/// every operation but integer add, subtract, multiply by a constant, shift left by a constant,
/// copies and widenings, give [`Step::Unknown`]. A register some path reads before writing it
/// holds the same zero in every lane, which counts as a definition.
pub(super) fn lane_steps(
    f: &Function,
    plan: &LanePlan,
    layouts: &[Layout],
    classes: &[Class],
    consts: &[Option<u64>],
) -> Vec<Step> {
    let n = layouts.len();
    let width = |r: R| width_of(layouts, classes, r);
    let mut steps: Vec<Step> =
        (0..n as R).map(|r| if width(r) == Width::Uniform { Step::UNIFORM } else { Step::Unset }).collect();
    // Special registers are written before the first instruction; any other register live there
    // is read before it is written.
    let (live, _) = crate::ptx::flow::live_in(f);
    let mut special = vec![false; n];
    f.sregs.iter().for_each(|&(r, _)| special[r as usize] = true);
    for r in 0..n {
        if live[r / 64] >> (r % 64) & 1 == 1 && !special[r] {
            steps[r] = steps[r].meet(Step::UNIFORM);
        }
    }
    for &(r, s) in &f.sregs {
        let step = match s {
            Sreg::Tid(0) | Sreg::LaneId => Step::affine(1, false),
            Sreg::LaneMaskEq | Sreg::LaneMaskLt | Sreg::LaneMaskLe | Sreg::LaneMaskGt | Sreg::LaneMaskGe => {
                Step::Unknown
            }
            _ => Step::UNIFORM,
        };
        steps[r as usize] = steps[r as usize].meet(step);
    }
    loop {
        let mut changed = false;
        for (pc, ins) in f.insts.iter().enumerate() {
            for d in uses_defs(ins).1 {
                let wd = width(d);
                if wd == Width::Uniform {
                    continue;
                }
                let step = if ins.guard.is_some() || plan.in_region[pc] || wd == Width::Float {
                    Step::Unknown
                } else {
                    def_step(&ins.inst, wd, &steps, &width, consts)
                };
                let m = steps[d as usize].meet(step);
                if m != steps[d as usize] {
                    steps[d as usize] = m;
                    changed = true;
                }
            }
        }
        if !changed {
            return steps;
        }
    }
}

fn width_of(layouts: &[Layout], classes: &[Class], r: R) -> Width {
    match (layouts[r as usize], classes[r as usize]) {
        (Layout::One, _) => Width::Uniform,
        (Layout::Vector, Class::Int) => Width::V32,
        (Layout::PerLane, Class::Int) => Width::P64,
        _ => Width::Float,
    }
}

/// The step of `d`, of width `wd`, as instruction `inst` defines it.
fn def_step(inst: &Inst, wd: Width, steps: &[Step], width: &dyn Fn(R) -> Width, consts: &[Option<u64>]) -> Step {
    // An operand's step where its width suits a result of width `w` (a group value suits any).
    let operand = |r: R, w: Width| -> Option<(i64, bool)> {
        if consts[r as usize].is_some() || width(r) == Width::Uniform {
            return Some((0, false));
        }
        let zero_extended = w == Width::P64 && width(r) == Width::V32;
        if width(r) != w && !zero_extended {
            return None;
        }
        match steps[r as usize] {
            // A 32-bit register read as 64 bits is zero-extended: a widening.
            Step::Affine { stride, wrap } => Some((stride, wrap || (zero_extended && stride != 0))),
            _ => None,
        }
    };
    let unset = |r: R| steps[r as usize] == Step::Unset && consts[r as usize].is_none() && width(r) != Width::Uniform;
    let same_width = |w: W| matches!((w, wd), (W::W32, Width::V32) | (W::W64, Width::P64));
    let konst = |r: R| consts[r as usize].map(|k| if wd == Width::V32 { k as u32 as i32 as i64 } else { k as i64 });
    let sum = |a: Option<(i64, bool)>, b: Option<(i64, bool)>, neg: bool| match (a, b) {
        (Some((sa, wa)), Some((sb, wb))) if !(wa && wb) => {
            Step::affine(if neg { sa.wrapping_sub(sb) } else { sa.wrapping_add(sb) }, wa || wb)
        }
        _ => Step::Unknown,
    };
    let product = |a: R, b: R, w: Width| -> Option<(i64, bool)> {
        match (konst(a), konst(b)) {
            (_, Some(c)) => operand(a, w).map(|(s, x)| (s.wrapping_mul(c), x)),
            (Some(c), _) => operand(b, w).map(|(s, x)| (s.wrapping_mul(c), x)),
            _ => match (operand(a, w), operand(b, w)) {
                (Some((0, _)), Some((0, _))) => Some((0, false)),
                _ => None,
            },
        }
    };
    let widened = |a: R, c: i64| match operand(a, Width::V32) {
        Some((s, _)) => Step::affine(s.wrapping_mul(c), true),
        None => Step::Unknown,
    };
    let step = match *inst {
        Inst::Bin { op, a, b, .. } => match op {
            BinOp::Add(w) if same_width(w) => sum(operand(a, wd), operand(b, wd), false),
            BinOp::Sub(w) if same_width(w) => sum(operand(a, wd), operand(b, wd), true),
            BinOp::MulLo(w) if same_width(w) => match product(a, b, wd) {
                Some((s, x)) => Step::affine(s, x),
                None => Step::Unknown,
            },
            BinOp::Shl(w) if same_width(w) => match (operand(a, wd), consts[b as usize]) {
                (Some((s, x)), Some(k)) if k < if wd == Width::V32 { 32 } else { 64 } => {
                    Step::affine(s.wrapping_shl(k as u32), x)
                }
                _ => Step::Unknown,
            },
            BinOp::MulWideU(W::W32) | BinOp::MulWideS(W::W32) if wd == Width::P64 => match (konst(a), konst(b)) {
                (_, Some(c)) => widened(a, c),
                (Some(c), _) => widened(b, c),
                _ => Step::Unknown,
            },
            _ => Step::Unknown,
        },
        Inst::Tern { op: TernOp::MadLo(w), a, b, c, .. } if same_width(w) => {
            sum(product(a, b, wd), operand(c, wd), false)
        }
        Inst::Un { op: UnOp::Mov(m), a, .. } => match (wd, width(a)) {
            (Width::P64, Width::V32) if m == u32::MAX as u64 => widened(a, 1),
            // The low half of a 64-bit value that steps evenly steps evenly, wrapped or not
            // (a wrap changes only the high half).
            (Width::V32, Width::P64) if m == u32::MAX as u64 => match steps[a as usize] {
                Step::Affine { stride, .. } => Step::affine(stride, false),
                _ => Step::Unknown,
            },
            (Width::V32, _) if m >= u32::MAX as u64 => {
                operand(a, wd).map_or(Step::Unknown, |(s, x)| Step::affine(s, x))
            }
            (Width::P64, _) if m == u64::MAX => operand(a, wd).map_or(Step::Unknown, |(s, x)| Step::affine(s, x)),
            _ => Step::Unknown,
        },
        Inst::Un { op: UnOp::Cvt(c), a, .. }
            if matches!(c.from, Ty::U32 | Ty::S32 | Ty::B32)
                && matches!(c.to, Ty::U64 | Ty::S64 | Ty::B64)
                && !c.sat
                && c.rnd.is_none() =>
        {
            match wd {
                // A zero extension kept in 32 bits (the register's upper half is known zero).
                Width::V32 => operand(a, wd).map_or(Step::Unknown, |(s, x)| Step::affine(s, x)),
                _ => widened(a, 1),
            }
        }
        _ => Step::Unknown,
    };
    // An operand still unset leaves the result unset (it is revisited once the operand is known).
    let pending = match *inst {
        Inst::Bin { a, b, .. } => unset(a) || unset(b),
        Inst::Tern { a, b, c, .. } => unset(a) || unset(b) || unset(c),
        Inst::Un { a, .. } => unset(a),
        _ => false,
    };
    if pending && step == Step::Unknown {
        Step::Unset
    } else {
        step
    }
}

impl Tx<'_, '_> {
    /// The vector type of a register in vectors.
    pub(super) fn vec_ty(&self, r: R) -> Type {
        if self.a.classes[r as usize] == Class::F32 {
            types::F32X4
        } else {
            types::I32X4
        }
    }

    fn recast(&mut self, v: Value, to: Type) -> Value {
        if self.b.func.dfg.value_type(v) == to {
            v
        } else {
            self.b.ins().bitcast(to, MemFlagsData::new().with_endianness(Endianness::Little), v)
        }
    }

    fn recast_all(&mut self, v: Vecs, to: Type) -> Vecs {
        v.map(|x| self.recast(x, to))
    }

    pub(super) fn splat_i32(&mut self, k: i64) -> Value {
        let x = self.b.ins().iconst(types::I32, k);
        self.b.ins().splat(types::I32X4, x)
    }

    /// Register `r` as vectors of `ty` (`I32X4` or `F32X4`): a constant or a group value
    /// broadcast, vectors as they are; `None` for a register kept per lane.
    pub(super) fn vec_of(&mut self, r: R, ty: Type) -> Option<Vecs> {
        if let Some(k) = self.a.consts[r as usize] {
            let v = if ty == types::F32X4 {
                self.b.ins().f32const(Ieee32::with_bits(k as u32))
            } else {
                self.b.ins().iconst(types::I32, k as u32 as i64)
            };
            let v = self.b.ins().splat(ty, v);
            return Some([v; PARTS]);
        }
        match self.reprs[r as usize] {
            Repr::One | Repr::Spill => {
                let v = if ty == types::F32X4 {
                    self.get_f32(r)
                } else {
                    let x = self.get(r);
                    self.lo32(x)
                };
                let v = self.b.ins().splat(ty, v);
                Some([v; PARTS])
            }
            Repr::Vector(vars) => {
                let v = vars.map(|var| self.b.use_var(var));
                Some(self.recast_all(v, ty))
            }
            Repr::PerLane(_) => None,
        }
    }

    /// Writes whole vectors to `r`, if `r` is kept in vectors.
    pub(super) fn def_vec(&mut self, r: R, v: Vecs) -> bool {
        let Repr::Vector(vars) = self.reprs[r as usize] else {
            return false;
        };
        let ty = self.vec_ty(r);
        for (var, x) in vars.into_iter().zip(v) {
            let x = self.recast(x, ty);
            self.b.def_var(var, x);
        }
        true
    }

    /// A 0/1 predicate vector as a lane mask (all ones where set).
    fn mask_of(&mut self, p: Value) -> Value {
        let ty = self.b.func.dfg.value_type(p);
        let z = self.b.ins().iconst(ty.lane_type(), 0);
        let z = self.b.ins().splat(ty, z);
        self.b.ins().icmp(IntCC::NotEqual, p, z)
    }

    /// Emits instruction `pc` for every lane of the group: as vector instructions where it has
    /// a vector form, else once per lane through the one-thread code.
    pub(super) fn lanes_inst(&mut self, pc: usize) -> Result<bool, JitError> {
        if self.a.f.insts[pc].guard.is_none() && self.vector_inst(pc)? {
            return Ok(true);
        }
        self.each_lane(pc)
    }

    fn each_lane(&mut self, pc: usize) -> Result<bool, JitError> {
        for l in 0..LANES {
            self.lane = Some(l);
            let open = self.one_inst(pc)?;
            if !open {
                self.lane = None;
                return Err(JitError::Translate {
                    what: "a control transfer run per lane",
                    line: self.a.f.insts[pc].line,
                });
            }
        }
        self.lane = None;
        Ok(true)
    }

    /// A varying forward branch at `pc` over the straight-line code up to its target.
    pub(super) fn region(&mut self, pc: usize) -> Result<bool, JitError> {
        let ins = self.a.f.insts[pc].clone();
        let (Inst::Bra { target, .. }, Some((p, neg))) = (ins.inst, ins.guard) else {
            return Err(JitError::Translate { what: "a region without a guarded branch", line: ins.line });
        };
        let target = target as usize;
        let Some(pv) = self.vec_of(p, types::I32X4) else {
            return Err(JitError::Translate { what: "a branch condition kept per lane", line: ins.line });
        };
        self.flush_count();
        let taken = pv.map(|x| {
            let m = self.mask_of(x);
            if neg {
                self.b.ins().bnot(m)
            } else {
                m
            }
        });
        let (mut both, mut either) = (taken[0], taken[0]);
        for &m in &taken[1..] {
            both = self.b.ins().band(both, m);
            either = self.b.ins().bor(either, m);
        }
        let all = self.b.ins().vall_true(both);
        let any = self.b.ins().vany_true(either);
        let tb = self.blocks[target.min(self.a.f.insts.len())].expect("branch target");
        let not_all = self.b.create_block();
        let full = self.b.create_block();
        let masked = self.b.create_block();
        self.b.ins().brif(all, tb, &[], not_all, &[]);
        self.b.switch_to_block(not_all);
        self.b.ins().brif(any, masked, &[], full, &[]);

        // No lane takes the branch: the code runs for the whole group. Every lane runs every
        // instruction of it in order, so the steps of the registers it writes hold here, for
        // what it reads later in the region (the kernel-wide analysis cannot count on them: where
        // the group splits, a lane that skips the code keeps its older value).
        self.b.switch_to_block(full);
        self.region_steps = Some(self.a.steps.clone());
        for q in pc + 1..target {
            self.pending += LANES as i64;
            if !self.inst(q)? {
                return Err(JitError::Translate { what: "control transfer in a region", line: self.a.f.insts[q].line });
            }
            let ins = &self.a.f.insts[q];
            for d in uses_defs(ins).1 {
                let wd = width_of(&self.a.layouts, &self.a.classes, d);
                let step = match wd {
                    Width::Uniform => continue,
                    Width::Float => Step::Unknown,
                    _ if ins.guard.is_some() => Step::Unknown,
                    _ => {
                        let (layouts, classes) = (&self.a.layouts, &self.a.classes);
                        def_step(&ins.inst, wd, self.steps(), &|r| width_of(layouts, classes, r), &self.a.consts)
                    }
                };
                let steps = self.region_steps.as_mut().expect("the region's steps");
                steps[d as usize] = if step == Step::Unset { Step::Unknown } else { step };
            }
        }
        self.region_steps = None;
        self.flush_count();
        self.b.ins().jump(tb, &[]);

        // Some lanes take it: the others run the code one lane at a time (rarely: at the edge
        // of the data, so out of the way of the code that runs every time).
        let mark = self.block_mark();
        self.b.set_cold_block(masked);
        self.b.switch_to_block(masked);
        self.forget_dead_defs(pc + 1, target);
        for q in pc + 1..target {
            for l in 0..LANES {
                self.lane = Some(l);
                let bit = self.b.ins().extractlane(taken[l / 4], (l % 4) as u8);
                let run = self.b.create_block();
                let skip = self.b.create_block();
                self.b.ins().brif(bit, skip, &[], run, &[]);
                self.b.switch_to_block(run);
                let c = self.b.use_var(self.cnt);
                let c = self.b.ins().iadd_imm_s(c, 1);
                self.b.def_var(self.cnt, c);
                if !self.one_inst(q)? {
                    self.lane = None;
                    return Err(JitError::Translate {
                        what: "control transfer in a region",
                        line: self.a.f.insts[q].line,
                    });
                }
                self.b.ins().jump(skip, &[]);
                self.b.switch_to_block(skip);
            }
            self.lane = None;
        }
        self.b.ins().jump(tb, &[]);
        self.cold_since(mark);
        // The block the one-thread code would start after the branch is never entered.
        if let Some(blk) = self.blocks[pc + 1] {
            self.b.switch_to_block(blk);
            self.b.ins().jump(tb, &[]);
        }
        self.resume_at = target;
        Ok(false)
    }

    /// Before code from `from` to `to` runs lane by lane where a group splits: gives the
    /// registers it writes that nobody reads after `to`, nor before writing them inside it, a
    /// placeholder value. A lane that skips
    /// the code keeps its older value of them, which nothing reads; left alone, that older
    /// value would have to flow in from before the branch, so the code that runs for whole
    /// groups would compute every lane's value of them (say, each lane's address of an access
    /// it makes as one vector access) and carry it around the kernel's loop.
    fn forget_dead_defs(&mut self, from: usize, to: usize) {
        let (live, words) = (&self.a.live.0, self.a.live.1);
        let dead: Vec<R> = (from..to)
            .flat_map(|q| uses_defs(&self.a.f.insts[q]).1)
            .filter(|&r| {
                let dead_at = |pc: usize| live[pc * words + r as usize / 64] >> (r % 64) & 1 == 0;
                dead_at(from) && dead_at(to)
            })
            .collect();
        for r in dead {
            match self.reprs[r as usize] {
                Repr::One | Repr::Spill => {}
                Repr::Vector(vars) => {
                    let ty = self.vec_ty(r);
                    let z = self.splat_i32(0);
                    let z = self.recast(z, ty);
                    vars.iter().for_each(|&v| self.b.def_var(v, z));
                }
                Repr::PerLane(vars) => {
                    let z = match self.a.classes[r as usize] {
                        Class::F32 => self.b.ins().f32const(Ieee32::with_bits(0)),
                        Class::F64 => self.b.ins().f64const(cranelift_codegen::ir::immediates::Ieee64::with_bits(0)),
                        Class::Int => self.b.ins().iconst(types::I64, 0),
                    };
                    vars.iter().for_each(|&v| self.b.def_var(v, z));
                }
            }
        }
    }

    /// The vector form of instruction `pc`, if it has one and its registers are in vectors.
    fn vector_inst(&mut self, pc: usize) -> Result<bool, JitError> {
        let ins = self.a.f.insts[pc].clone();
        let (f4, i4) = (types::F32X4, types::I32X4);
        let in_vectors = |tx: &Self, r: R| matches!(tx.reprs[r as usize], Repr::Vector(_));
        match ins.inst {
            Inst::Bin { op, d, a, b } => {
                let fop = matches!(
                    op,
                    BinOp::FAdd(F::F32, Rnd::Rn, PLAIN_F)
                        | BinOp::FSub(F::F32, Rnd::Rn, PLAIN_F)
                        | BinOp::FMul(F::F32, Rnd::Rn, PLAIN_F)
                );
                if fop {
                    if !in_vectors(self, d) {
                        return Ok(false);
                    }
                    let (Some(x), Some(y)) = (self.vec_of(a, f4), self.vec_of(b, f4)) else {
                        return Ok(false);
                    };
                    let v = std::array::from_fn(|p| match op {
                        BinOp::FAdd(..) => self.b.ins().fadd(x[p], y[p]),
                        BinOp::FSub(..) => self.b.ins().fsub(x[p], y[p]),
                        _ => self.b.ins().fmul(x[p], y[p]),
                    });
                    let v = self.vcanon(d, v);
                    self.anchor(v);
                    return Ok(self.def_vec(d, v));
                }
                let iop = matches!(
                    op,
                    BinOp::Add(W::W32)
                        | BinOp::Sub(W::W32)
                        | BinOp::MulLo(W::W32)
                        | BinOp::And
                        | BinOp::Or
                        | BinOp::Xor
                        | BinOp::PredAnd
                        | BinOp::PredOr
                        | BinOp::PredXor
                ) || (matches!(op, BinOp::Shl(W::W32) | BinOp::ShrU(W::W32) | BinOp::ShrS(W::W32))
                    && self.a.consts[b as usize].is_some_and(|k| k < 32));
                if !iop || self.a.classes[d as usize] != Class::Int || !in_vectors(self, d) {
                    return Ok(false);
                }
                if let Some(k) =
                    self.a.consts[b as usize].filter(|_| matches!(op, BinOp::Shl(_) | BinOp::ShrU(_) | BinOp::ShrS(_)))
                {
                    let Some(x) = self.vec_of(a, i4) else { return Ok(false) };
                    let v = x.map(|x| match op {
                        BinOp::Shl(_) => self.b.ins().ishl_imm_s(x, k as i64),
                        BinOp::ShrU(_) => self.b.ins().ushr_imm_s(x, k as i64),
                        _ => self.b.ins().sshr_imm_s(x, k as i64),
                    });
                    return Ok(self.def_vec(d, v));
                }
                let (Some(x), Some(y)) = (self.vec_of(a, i4), self.vec_of(b, i4)) else {
                    return Ok(false);
                };
                let v = std::array::from_fn(|p| {
                    let (x, y) = (x[p], y[p]);
                    match op {
                        BinOp::Add(_) => self.b.ins().iadd(x, y),
                        BinOp::Sub(_) => self.b.ins().isub(x, y),
                        BinOp::MulLo(_) => self.b.ins().imul(x, y),
                        BinOp::And | BinOp::PredAnd => self.b.ins().band(x, y),
                        BinOp::Or | BinOp::PredOr => self.b.ins().bor(x, y),
                        _ => self.b.ins().bxor(x, y),
                    }
                });
                Ok(self.def_vec(d, v))
            }
            Inst::Tern { op, d, a, b, c } => {
                if !in_vectors(self, d) {
                    return Ok(false);
                }
                match op {
                    TernOp::Fma(F::F32, Rnd::Rn, PLAIN_F) => {
                        let (Some(x), Some(y), Some(z)) = (self.vec_of(a, f4), self.vec_of(b, f4), self.vec_of(c, f4))
                        else {
                            return Ok(false);
                        };
                        let v = std::array::from_fn(|p| self.b.ins().fma(x[p], y[p], z[p]));
                        let v = self.vcanon(d, v);
                        self.anchor(v);
                        Ok(self.def_vec(d, v))
                    }
                    TernOp::FmaNeg(F::F32, PLAIN_F, neg_product, neg_addend) => {
                        let (Some(x), Some(y), Some(z)) = (self.vec_of(a, f4), self.vec_of(b, f4), self.vec_of(c, f4))
                        else {
                            return Ok(false);
                        };
                        let v = std::array::from_fn(|p| {
                            let m = if neg_product { self.b.ins().fneg(x[p]) } else { x[p] };
                            let s = if neg_addend { self.b.ins().fneg(z[p]) } else { z[p] };
                            self.b.ins().fma(m, y[p], s)
                        });
                        let v = self.vcanon(d, v);
                        self.anchor(v);
                        Ok(self.def_vec(d, v))
                    }
                    TernOp::MadLo(W::W32) => {
                        let (Some(x), Some(y), Some(z)) = (self.vec_of(a, i4), self.vec_of(b, i4), self.vec_of(c, i4))
                        else {
                            return Ok(false);
                        };
                        let v = std::array::from_fn(|p| {
                            let m = self.b.ins().imul(x[p], y[p]);
                            self.b.ins().iadd(m, z[p])
                        });
                        Ok(self.def_vec(d, v))
                    }
                    TernOp::Selp => {
                        let ty = self.vec_ty(d);
                        let (Some(x), Some(y), Some(c)) = (self.vec_of(a, ty), self.vec_of(b, ty), self.vec_of(c, i4))
                        else {
                            return Ok(false);
                        };
                        let v = std::array::from_fn(|p| {
                            let m = self.mask_of(c[p]);
                            let m = self.recast(m, ty);
                            self.b.ins().bitselect(m, x[p], y[p])
                        });
                        Ok(self.def_vec(d, v))
                    }
                    _ => Ok(false),
                }
            }
            Inst::Un { op: UnOp::Mov(m), d, a } if m >= u32::MAX as u64 => {
                let ty = self.vec_ty(d);
                let Some(x) = self.vec_of(a, ty) else { return Ok(false) };
                Ok(self.def_vec(d, x))
            }
            Inst::Un { op: UnOp::PredNot, d, a } => {
                let Some(x) = self.vec_of(a, i4) else { return Ok(false) };
                let one = self.splat_i32(1);
                let v = x.map(|x| self.b.ins().bxor(x, one));
                Ok(self.def_vec(d, v))
            }
            Inst::Setp { ty, cmp, d, dn, a, b, comb, .. } => {
                let signed = match ty {
                    CmpTy::S(W::W32) => true,
                    CmpTy::U(W::W32) => false,
                    CmpTy::B(W::W32) if matches!(cmp, Cmp::Eq | Cmp::Ne) => false,
                    _ => return Ok(false),
                };
                let Some(cc) = int_cc(cmp, signed) else { return Ok(false) };
                if [Some(d), dn].into_iter().flatten().any(|r| !in_vectors(self, r)) {
                    return Ok(false);
                }
                let (Some(x), Some(y)) = (self.vec_of(a, i4), self.vec_of(b, i4)) else {
                    return Ok(false);
                };
                let cv = match comb {
                    Some((_, c, _)) => match self.vec_of(c, i4) {
                        Some(cv) => Some(cv),
                        None => return Ok(false),
                    },
                    None => None,
                };
                let one = self.splat_i32(1);
                let mut out = [[one; PARTS]; 2];
                for p in 0..PARTS {
                    let m = self.b.ins().icmp(cc, x[p], y[p]);
                    let t = self.b.ins().band(m, one);
                    let c = match (comb, cv) {
                        (Some((_, _, neg)), Some(cv)) => {
                            let c = self.b.ins().band(cv[p], one);
                            Some(if neg { self.b.ins().bxor(c, one) } else { c })
                        }
                        _ => None,
                    };
                    let combine = |tx: &mut Self, v: Value| match (comb, c) {
                        (Some((op, _, _)), Some(c)) => match op {
                            BoolOp::And => tx.b.ins().band(v, c),
                            BoolOp::Or => tx.b.ins().bor(v, c),
                            BoolOp::Xor => tx.b.ins().bxor(v, c),
                        },
                        _ => v,
                    };
                    out[0][p] = combine(self, t);
                    if dn.is_some() {
                        let tn = self.b.ins().bxor(t, one);
                        out[1][p] = combine(self, tn);
                    }
                }
                self.def_vec(d, out[0]);
                if let Some(q) = dn {
                    self.def_vec(q, out[1]);
                }
                Ok(true)
            }
            Inst::Ld { space: space @ (Space::Shared | Space::Global), size: 4, sext: false, dmask, n: 1, d, addr }
                if dmask >= u32::MAX as u64 =>
            {
                if !in_vectors(self, d[0]) {
                    return Ok(false);
                }
                let ty = self.vec_ty(d[0]);
                let Some(ptr) = self.run_ptr(pc, space, &addr)? else { return Ok(false) };
                let v = std::array::from_fn(|p| self.b.ins().load(ty, vflags(), ptr, 16 * p as i32));
                self.def_vec(d[0], v);
                self.end_run(pc, addr.off, None)
            }
            Inst::St { space: space @ (Space::Shared | Space::Global), size: 4, n: 1, a: srcs, addr } => {
                let ty = if self.a.classes[srcs[0] as usize] == Class::F32 { f4 } else { i4 };
                if matches!(self.reprs[srcs[0] as usize], Repr::PerLane(_)) {
                    return Ok(false);
                }
                if matches!(addr.base, Base::Reg(r) if matches!(self.reprs[r as usize], Repr::One)) {
                    return Ok(false);
                }
                // Made before the check: the lane-by-lane path stores it too.
                let v = self.vec_of(srcs[0], ty).expect("vectors or a group value");
                let bits = self.recast_all(v, i4);
                let Some(ptr) = self.run_ptr(pc, space, &addr)? else { return Ok(false) };
                for (p, x) in v.into_iter().enumerate() {
                    self.b.ins().store(vflags(), x, ptr, 16 * p as i32);
                }
                self.end_run(pc, addr.off, Some(bits))
            }
            _ => Ok(false),
        }
    }

    /// In the fast copy of a prechecked stretch, stores every [`ANCHOR_EVERY`]-th float vector
    /// result to a stack slot nobody reads. The code generator places pure arithmetic just before
    /// its first use by a load, store or branch: left alone, a chain of fmas fed by loads would
    /// sink below all of the stretch's loads, whose results would then all be live at once and
    /// spill. The store is such a use; it holds the chain, and the loads it needs, in place.
    fn anchor(&mut self, v: Vecs) {
        let Some(n) = self.unanchored else { return };
        if n + 1 < ANCHOR_EVERY {
            self.unanchored = Some(n + 1);
            return;
        }
        self.unanchored = Some(0);
        let slot = *self.anchor_slot.get_or_insert_with(|| {
            let data = StackSlotData::new(StackSlotKind::ExplicitSlot, 16 * PARTS as u32, 4);
            self.b.create_sized_stack_slot(data)
        });
        for (p, x) in v.into_iter().enumerate() {
            self.b.ins().stack_store(types::I64, x, slot, 16 * p as i32);
        }
    }

    /// A result's NaNs as PTX's canonical NaN (unless only float arithmetic reads it).
    fn vcanon(&mut self, d: R, v: Vecs) -> Vecs {
        if self.a.nan_blind[d as usize] {
            return v;
        }
        let nan = self.b.ins().f32const(Ieee32::with_bits(NAN32));
        let nan = self.b.ins().splat(types::F32X4, nan);
        v.map(|v| {
            let isnan = self.b.ins().fcmp(cranelift_codegen::ir::condcodes::FloatCC::Unordered, v, v);
            let isnan = self.recast(isnan, types::F32X4);
            self.b.ins().bitselect(isnan, nan, v)
        })
    }

    /// `first + l` for every lane `l` (as 32-bit lanes, masked with `mask` if given).
    pub(super) fn lane_indices(&mut self, first: Value, mask: Option<i64>) -> Vecs {
        let x = self.lo32(first);
        let x = self.b.ins().splat(types::I32X4, x);
        std::array::from_fn(|p| {
            let ids = self.lane_consts(p, 1);
            let v = self.b.ins().iadd(x, ids);
            match mask {
                Some(m) => {
                    let m = self.splat_i32(m);
                    self.b.ins().band(v, m)
                }
                None => v,
            }
        })
    }

    /// `[scale * l for the four lanes l of part p]` as an `I32X4` constant.
    pub(super) fn lane_consts(&mut self, p: usize, scale: u32) -> Value {
        let bytes: Vec<u8> = (0..4u32).flat_map(|i| (scale * (4 * p as u32 + i)).to_le_bytes()).collect();
        let c = self.b.func.dfg.constants.insert(bytes.into());
        self.b.ins().vconst(types::I32X4, c)
    }
}

#[cfg(test)]
mod tests {
    use super::super::analysis::{layouts, reg_classes};
    use super::*;
    use crate::ptx::module::Module;

    /// The steps of the base registers of the kernel's 4-byte stores, in program order.
    fn store_base_steps(ptx: &str) -> Vec<Step> {
        let m = Module::parse(ptx).unwrap();
        let f = &m.funcs[m.entry("k").unwrap().func as usize];
        let plan = LanePlan::new(f).unwrap();
        let mut consts = vec![None; f.nregs as usize];
        for &(r, v) in &f.consts {
            consts[r as usize] = Some(v);
        }
        let (classes, fits) = reg_classes(f, &consts);
        let layouts = layouts(Some(&plan), &classes, &fits, &consts);
        let steps = lane_steps(f, &plan, &layouts, &classes, &consts);
        f.insts
            .iter()
            .filter_map(|i| match i.inst {
                Inst::St { size: 4, addr: Addr { base: Base::Reg(r), .. }, .. } => Some(steps[r as usize]),
                _ => None,
            })
            .collect()
    }

    fn kernel(body: &str) -> String {
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 out)\n{{\n\
             .reg .pred %p<4>;\n.reg .b32 %r<16>;\n.reg .b64 %rd<16>;\n.shared .align 4 .b32 sh[64];\n\
             ld.param.u64 %rd1, [out];\nmov.u32 %r1, %tid.x;\nmov.u32 %r3, sh;\n{body}\nret;\n}}"
        )
    }

    #[test]
    fn addresses_built_from_the_thread_index_step_by_their_scale() {
        let steps = store_base_steps(&kernel(
            "mul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\nst.global.u32 [%rd3], %r1;\n\
             shl.b32 %r2, %r1, 2;\nadd.u32 %r4, %r3, %r2;\nst.shared.u32 [%r4], %r1;\n\
             mad.lo.s32 %r5, %r1, 8, %r3;\nst.shared.u32 [%r5], %r1;\n\
             mul.lo.u32 %r6, %r1, %r1;\nadd.u32 %r7, %r3, %r6;\nst.shared.u32 [%r7], %r1;\n\
             cvt.u64.u32 %rd4, %r2;\nadd.s64 %rd5, %rd1, %rd4;\nst.global.u32 [%rd5], %r1;",
        ));
        assert_eq!(
            steps,
            [
                Step::Affine { stride: 4, wrap: true },
                Step::Affine { stride: 4, wrap: false },
                Step::Affine { stride: 8, wrap: false },
                Step::Unknown,
                Step::Affine { stride: 4, wrap: true },
            ]
        );
    }

    #[test]
    fn a_register_with_two_different_steps_has_none() {
        // %r4 steps by 4 where it is made and by 5 after the add: the analysis sees both.
        let steps = store_base_steps(&kernel(
            "shl.b32 %r2, %r1, 2;\nadd.u32 %r4, %r3, %r2;\nst.shared.u32 [%r4], %r1;\n\
             add.u32 %r4, %r4, %r1;\nst.shared.u32 [%r4], %r1;",
        ));
        assert_eq!(steps, [Step::Unknown, Step::Unknown]);
        // Written under a condition that differs between lanes: no step either.
        let steps = store_base_steps(&kernel(
            "shl.b32 %r2, %r1, 2;\nadd.u32 %r4, %r3, %r2;\nsetp.lt.u32 %p1, %r1, 3;\n\
             @%p1 add.u32 %r4, %r3, 4;\nst.shared.u32 [%r4], %r1;",
        ));
        assert_eq!(steps, [Step::Unknown]);
    }
}
