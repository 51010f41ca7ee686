//! The analyses the translator runs on a function before it emits anything: pure dataflow over
//! the lowered instructions, with no code generator in them.
//!
//! - What a thread keeps across a boundary, and when it stores and reloads it. A thread that
//!   reaches a `bar.sync` or a shuffle leaves its live registers in its spill area, and the next
//!   segment reloads them. Most of those stores would write back what is already there:
//!   [`written_through`] stores a value computed once before the kernel's loops where it is
//!   computed, [`clean_at_boundaries`] finds the registers whose spill slot still holds their
//!   value at a boundary, and [`reloaded_at_boundaries`] the ones a segment reads or may store
//!   (the others stay in the spill area untouched).
//! - Which pointer parameter an address derives from ([`param_roots`]), so that its region entry
//!   is looked up once per call instead of once per access. Only a hint: the access is still
//!   checked.
//! - How each register lives in machine registers ([`reg_classes`]): as an integer, or as a
//!   float where only float arithmetic touches it; in code for groups, as one value, in vectors
//!   or per lane ([`layouts`]); and which float results need no NaN canonicalisation because
//!   only float arithmetic reads them ([`nan_blind`]).
//!
//! [`Analysis`] holds all of it, with the function's boundaries and basic blocks, for the
//! translator to read.

use std::collections::HashMap;

use super::lanes::{lane_steps, LanePlan, Step, LANES};
use super::runtime::{Boundary, ShflInfo, Src};
use super::support::threads_exit_apart;
use super::warp_run::WarpRun;
use crate::ptx::flow::{live_in, successors, uses_defs};
use crate::ptx::ir::*;

/// What the translator knows of a function before it emits any of it: computed once for each
/// shape of code made from the function (one thread at a time, or groups of [`LANES`] threads
/// with their lane plan), from the function alone, and only read while the code is emitted.
pub(super) struct Analysis<'f> {
    pub(super) f: &'f Function,
    pub(super) params_size: u32,
    /// Threads one pass of the code runs: 1, or [`LANES`] in code for groups.
    pub(super) width: usize,
    /// Per register: its value, where it is a constant register.
    pub(super) consts: Vec<Option<u64>>,
    /// See [`reg_classes`].
    pub(super) classes: Vec<Class>,
    /// See [`layouts`].
    pub(super) layouts: Vec<Layout>,
    /// In code for groups: how each register steps from lane to lane (see [`lane_steps`]).
    pub(super) steps: Vec<Step>,
    /// See [`param_roots`].
    pub(super) roots: Vec<Option<u32>>,
    /// See [`nan_blind`].
    pub(super) nan_blind: Vec<bool>,
    /// Code for groups: which registers and instructions vary by lane.
    pub(super) plan: Option<LanePlan>,
    /// Per instruction, and the end: whether a basic block starts there (a branch target, or the
    /// instruction after a control transfer or a boundary).
    pub(super) leader: Vec<bool>,
    /// The boundaries (barriers and shuffles), in program order: segment `k + 1` resumes after
    /// boundary `k`.
    pub(super) bounds: Vec<Boundary>,
    /// Per boundary pc: its index in `bounds`.
    pub(super) bar_index: HashMap<usize, u32>,
    /// Per boundary pc: the registers live after it (the only ones a thread keeps across it).
    pub(super) keep: HashMap<usize, Vec<R>>,
    /// Per boundary pc: the kept registers whose spill slot already holds their value
    /// (see [`clean_at_boundaries`]).
    pub(super) clean: HashMap<usize, Vec<R>>,
    /// Per boundary pc: the kept registers clean there in a segment that began at a resume point
    /// (see [`clean_at_boundaries`]); the others are stored only in the first segment.
    pub(super) clean_resumed: HashMap<usize, Vec<R>>,
    /// Per boundary pc: the kept registers its resume point reloads (see
    /// [`reloaded_at_boundaries`]).
    pub(super) reload: HashMap<usize, Vec<R>>,
    /// Per instruction: the registers it stores to the spill area as it writes them (see
    /// [`written_through`]).
    pub(super) through: Vec<Vec<R>>,
    /// Registers live on entry to each instruction (see [`live_in`]), in code for groups or
    /// where the kernel has boundaries.
    pub(super) live: (Vec<u64>, usize),
    /// Registers shuffles and warp matrix instructions read from other threads, which a thread
    /// leaves in its spill area when it exits (an exited lane still serves its last value).
    pub(super) shfl_srcs: Vec<R>,

    /// The run of warp instructions that keeps its accumulators between its passes, if one may
    /// (see [`resident_run`]).
    pub(super) resident: Option<Resident>,
}

/// A run of warp instructions whose accumulator tiles stay in the worker from one pass of the run
/// to the next (see `warp_run.rs`), and what native code does for it. The tiles' registers have
/// no variables in one-thread code: they live in the thread's spill area (`Repr::Spill`), so none
/// is stored or reloaded at a boundary, and none is carried through the code between the run's
/// passes, which neither reads nor writes them. Before each instruction of `touch` (the first that
/// reads or writes one on each path from the run's resume point) the code has the tiles handed
/// back to the spill area (`runtime::h_hand_back_tiles`; the first thread that asks does it for
/// the block).
pub(super) struct Resident {
    /// The run's boundary.
    pub(super) k: u32,
    /// Its pc.
    pub(super) pc: usize,
    /// The registers of its tiles.
    pub(super) regs: Vec<R>,
    /// Per instruction: whether the code has the tiles handed back before it.
    pub(super) touch: Vec<bool>,
}

impl<'f> Analysis<'f> {
    /// The analysis of `f` for one-thread code (`plan: None`) or code for groups.
    pub(super) fn new(f: &'f Function, params_size: u32, plan: Option<LanePlan>) -> Analysis<'f> {
        let mut consts = vec![None; f.nregs as usize];
        for &(r, v) in &f.consts {
            consts[r as usize] = Some(v);
        }
        let (classes, fits) = reg_classes(f, &consts);
        let layouts = layouts(plan.as_ref(), &classes, &fits, &consts);
        let steps = match &plan {
            Some(p) => lane_steps(f, p, &layouts, &classes, &consts),
            None => Vec::new(),
        };
        let n_insts = f.insts.len();
        let mut shfl_srcs = Vec::new();
        let mut bar_index = HashMap::new();
        let mut bounds = Vec::new();
        let mut live = (Vec::new(), 0);
        let mut keep: HashMap<usize, Vec<R>> = HashMap::new();
        let mut through = Vec::new();
        let mut clean = HashMap::new();
        let mut clean_resumed = HashMap::new();
        let mut reload = HashMap::new();
        // Leaders: targets of branches and instructions after control transfers.
        let mut leader = vec![false; n_insts + 1];
        leader[0] = true;
        let mut targets = vec![false; n_insts + 1];
        for ins in &f.insts {
            if let Inst::Bra { target, .. } = ins.inst {
                targets[(target as usize).min(n_insts)] = true;
            }
        }
        // Consecutive warp matrix instructions (a tile's `ldmatrix`es, its `mma`s), with the plain
        // barriers right before and after them, are one boundary, at the last of them: the
        // runtime runs them in order once every thread has arrived, and the threads pay one
        // store and reload of their registers for the whole stretch instead of one for each
        // instruction and barrier. (A barrier is what every boundary is already.)
        let joins_next = |pc: usize| {
            let (this, next) = (&f.insts[pc], f.insts.get(pc + 1));
            next.is_some_and(|next| {
                this.joins_warp_run()
                    && next.joins_warp_run()
                    && (this.inst.is_warp_matrix() || next.inst.is_warp_matrix())
                    && !targets[pc + 1]
            })
        };
        let exits_apart = threads_exit_apart(f);
        let mut group = Vec::new();
        // The line of the first barrier of the stretch being gathered, if it has one.
        let mut group_line = None;
        // The first pc of the stretch being gathered, and per boundary pc the first of its stretch.
        let mut group_start = None;
        let mut stretch = HashMap::new();
        for (pc, ins) in f.insts.iter().enumerate() {
            match ins.inst {
                Inst::Bra { target, .. } => {
                    leader[(target as usize).min(n_insts)] = true;
                    leader[pc + 1] = true;
                }
                Inst::Ret | Inst::Exit | Inst::Trap | Inst::Shfl { .. } => leader[pc + 1] = true,
                ref i if (i.is_warp_matrix() || matches!(i, Inst::Bar { .. })) && !joins_next(pc) => {
                    leader[pc + 1] = true
                }
                _ => {}
            }
            let src = |r: R| Src { reg: r, konst: consts[r as usize] };
            let shfl = match ins.inst {
                // A barrier that begins a stretch: the stretch's boundary is at its end.
                Inst::Bar { .. } if joins_next(pc) => {
                    group_line.get_or_insert(ins.line);
                    group_start.get_or_insert(pc);
                    continue;
                }
                Inst::Bar { .. } => {
                    group_line.get_or_insert(ins.line);
                    None
                }
                Inst::Shfl { mode, d, p, a, b, c } => {
                    if consts[a as usize].is_none() && !shfl_srcs.contains(&a) {
                        shfl_srcs.push(a);
                    }
                    Some(ShflInfo { mode, d, p, a: src(a), b: src(b), c: src(c) })
                }
                ref i if i.is_warp_matrix() => {
                    // An exited thread's registers are read by the warp instructions after it.
                    for r in uses_defs(ins).0 {
                        if exits_apart && consts[r as usize].is_none() && !shfl_srcs.contains(&r) {
                            shfl_srcs.push(r);
                        }
                    }
                    group.push(ins.clone());
                    if joins_next(pc) {
                        group_start.get_or_insert(pc);
                        continue;
                    }
                    None
                }
                _ => continue,
            };
            let warp = std::mem::take(&mut group);
            let consts: Vec<(R, u64)> =
                warp.iter().flat_map(|i| uses_defs(i).0).filter_map(|r| Some((r, consts[r as usize]?))).collect();
            bar_index.insert(pc, bounds.len() as u32);
            stretch.insert(pc, group_start.take().unwrap_or(pc));
            let run = if warp.is_empty() { None } else { WarpRun::plan(&warp, &consts) };
            // A stretch with a barrier is named by its first barrier, where threads that never
            // arrive are reported.
            let line = group_line.take().unwrap_or(ins.line);
            bounds.push(Boundary { line, shfl, warp, consts, run });
        }
        if plan.is_some() || !bar_index.is_empty() {
            live = live_in(f);
        }
        if !bar_index.is_empty() {
            let (live, words) = (&live.0, live.1);
            for &pc in bar_index.keys() {
                let regs = (0..f.nregs)
                    .filter(|&r| {
                        live[(pc + 1) * words + r as usize / 64] >> (r % 64) & 1 == 1
                            && consts[r as usize].is_none()
                            && !f.sregs.iter().any(|s| s.0 == r)
                    })
                    .collect();
                keep.insert(pc, regs);
            }
            for (&pc, &k) in &bar_index {
                if let Some(run) = bounds[k as usize].run.as_mut() {
                    run.scatter_only(&keep[&pc]);
                }
            }
            through = written_through(f, &keep, plan.as_ref().map(|p| &p.in_region[..]));
            // The instructions of a stretch before its boundary emit no code of their own: their
            // writes happen in the run, after the boundary stored what it stores.
            let mut written = f.insts.iter().map(|i| uses_defs(i).1).collect::<Vec<_>>();
            for (&pc, &start) in &stretch {
                written[start..pc].iter_mut().for_each(Vec::clear);
            }
            clean = clean_at_boundaries(f, &keep, &through, &written, false);
            clean_resumed = clean_at_boundaries(f, &keep, &through, &written, true);
            reload = reloaded_at_boundaries(f, &keep, &clean_resumed, &shfl_srcs);
        }
        let resident = match plan {
            // Code for groups runs no warp instructions.
            Some(_) => None,
            None => resident_run(f, &bounds, &bar_index, &stretch, &shfl_srcs),
        };
        Analysis {
            f,
            params_size,
            width: if plan.is_some() { LANES } else { 1 },
            consts,
            classes,
            layouts,
            steps,
            roots: param_roots(f, params_size),
            nan_blind: nan_blind(f),
            plan,
            leader,
            bounds,
            bar_index,
            keep,
            clean,
            clean_resumed,
            reload,
            through,
            live,
            shfl_srcs,
            resident,
        }
    }
}

/// The run of warp instructions that may keep its accumulator tiles between its passes (the one
/// with the most accumulator registers, where several may), with the points where native code
/// has them handed back. A run may where no register of its tiles is read from an exited thread
/// (`always`: those stay in the spill area when a thread exits). The touch points are found by a
/// walk from the run's resume point: each path ends where it comes back to the run's stretch
/// (`stretch`: the boundary pc's first instruction; the instructions of a stretch are emitted at
/// its boundary), or at the first instruction on it that reads or writes a register of the tiles,
/// which is a touch point. So a thread that comes back to the run without meeting one neither
/// read nor wrote the tiles' registers, and the tiles still hold their values. Other boundaries
/// on the way are no touch points: their stores leave the tiles' registers alone (they have no
/// variables, see [`Resident`]), a shuffle of one of them reads it (a touch point), and the
/// runtime hands the tiles back before it runs another boundary's warp instructions.
fn resident_run(
    f: &Function,
    bounds: &[Boundary],
    bar_index: &HashMap<usize, u32>,
    stretch: &HashMap<usize, usize>,
    always: &[R],
) -> Option<Resident> {
    let n = f.insts.len();
    let mut best: Option<Resident> = None;
    for (&pc, &k) in bar_index {
        let Some(run) = bounds[k as usize].run.as_ref() else { continue };
        let regs: Vec<R> = run.accumulators().collect();
        let fits = !regs.is_empty() && regs.iter().all(|r| !always.contains(r));
        if !fits
            || best
                .as_ref()
                .is_some_and(|b| (b.regs.len(), std::cmp::Reverse(b.pc)) >= (regs.len(), std::cmp::Reverse(pc)))
        {
            continue;
        }
        let own = stretch[&pc]..=pc;
        let mut touch = vec![false; n];
        let mut seen = vec![false; n + 1];
        let mut todo = vec![pc + 1];
        while let Some(q) = todo.pop() {
            if q >= n || own.contains(&q) || std::mem::replace(&mut seen[q], true) {
                continue;
            }
            let (uses, defs) = uses_defs(&f.insts[q]);
            if uses.iter().chain(&defs).any(|r| regs.contains(r)) {
                touch[q] = true;
                continue;
            }
            todo.extend(successors(f, q).into_iter().flatten());
        }
        best = Some(Resident { k, pc, regs, touch });
    }
    best
}

/// Per instruction: the registers it writes that go to the spill area right there (written
/// through), so that no boundary after it has to store them again. Those are registers some
/// boundary keeps that have exactly one definition, unguarded, outside every loop and outside
/// code a varying branch jumps over (`in_region`): the values a kernel computes once before its
/// loops (indices, base addresses, bounds), which every later boundary would otherwise store
/// again for every thread, because the first pass through a loop comes from the kernel's start,
/// where nothing is in the spill area yet.
pub(super) fn written_through(f: &Function, keep: &HashMap<usize, Vec<R>>, in_region: Option<&[bool]>) -> Vec<Vec<R>> {
    let n = f.insts.len();
    let mut kept = vec![false; f.nregs as usize];
    keep.values().flatten().for_each(|&r| kept[r as usize] = true);
    let mut def_count = vec![0u32; f.nregs as usize];
    let defs: Vec<Vec<R>> = f.insts.iter().map(|i| uses_defs(i).1).collect();
    defs.iter().flatten().for_each(|&r| def_count[r as usize] += 1);
    let in_loop = |pc: usize| {
        let mut seen = vec![false; n + 1];
        let mut todo: Vec<usize> = successors(f, pc).into_iter().flatten().collect();
        while let Some(q) = todo.pop() {
            if q == pc {
                return true;
            }
            if q >= n || std::mem::replace(&mut seen[q], true) {
                continue;
            }
            todo.extend(successors(f, q).into_iter().flatten());
        }
        false
    };
    (0..n)
        .map(|pc| {
            let eligible = f.insts[pc].guard.is_none() && !in_region.is_some_and(|r| r[pc]);
            let regs: Vec<R> = defs[pc]
                .iter()
                .copied()
                .filter(|&r| eligible && kept[r as usize] && def_count[r as usize] == 1)
                .collect();
            if regs.is_empty() || in_loop(pc) {
                Vec::new()
            } else {
                regs
            }
        })
        .collect()
}

/// Per boundary pc: which of the registers kept across it (`keep`) already hold their current
/// value in the thread's spill area when the thread gets there, because they were reloaded from
/// it when the segment began and no instruction since then wrote them, or the instruction that
/// last wrote them also stored them (`through`, see [`written_through`]). Those need no store.
/// A forward analysis over instructions: a segment that starts after boundary `k` begins with
/// `keep[k]` clean, the kernel's start with nothing clean, a write (`written[pc]`: what the code
/// of instruction `pc` writes) makes a register dirty (clean if written through), and where paths
/// meet only what is clean on all of them stays clean.
/// With `resumed_only`, the paths from the kernel's start are left out: what a segment that
/// began at a resume point finds clean (the kernel's start is the first pass of every loop, so
/// counting it would make a loop's barriers store everything computed before the loop again on
/// every pass).
pub(super) fn clean_at_boundaries(
    f: &Function,
    keep: &HashMap<usize, Vec<R>>,
    through: &[Vec<R>],
    written: &[Vec<R>],
    resumed_only: bool,
) -> HashMap<usize, Vec<R>> {
    let n = f.insts.len();
    let words = (f.nregs as usize).div_ceil(64).max(1);
    let set_of = |regs: &[R]| {
        let mut v = vec![0u64; words];
        for &r in regs {
            v[r as usize / 64] |= 1 << (r % 64);
        }
        v
    };
    // `clean[pc]`: clean on entry to `pc` (all registers until a path reaches it).
    let mut clean = vec![u64::MAX; (n + 1) * words];
    // Code no path reaches yet says nothing; a boundary always begins a segment after it.
    let mut reached = vec![false; n + 1];
    if !resumed_only {
        clean[..words].fill(0);
        reached[0] = true;
    }
    let mut changed = true;
    while changed {
        changed = false;
        for pc in 0..n {
            if !reached[pc] && !keep.contains_key(&pc) {
                continue;
            }
            let out = match keep.get(&pc) {
                Some(k) => set_of(k),
                None => {
                    let mut v = clean[pc * words..(pc + 1) * words].to_vec();
                    for &r in &written[pc] {
                        v[r as usize / 64] &= !(1 << (r % 64));
                    }
                    for &r in &through[pc] {
                        v[r as usize / 64] |= 1 << (r % 64);
                    }
                    v
                }
            };
            for s in successors(f, pc).into_iter().flatten() {
                if !reached[s] {
                    reached[s] = true;
                    changed = true;
                }
                let dst = &mut clean[s * words..(s + 1) * words];
                for w in 0..words {
                    let m = dst[w] & out[w];
                    if m != dst[w] {
                        dst[w] = m;
                        changed = true;
                    }
                }
            }
        }
    }
    keep.keys()
        .map(|&pc| {
            let c = &clean[pc * words..(pc + 1) * words];
            let regs = keep[&pc].iter().copied().filter(|&r| c[r as usize / 64] >> (r % 64) & 1 == 1).collect();
            (pc, regs)
        })
        .collect()
}

/// Per boundary pc: the kept registers (`keep`) that the segment after it needs in machine
/// registers, so that its resume point reloads only those: the ones an instruction reachable
/// before the next boundaries reads, the ones such a boundary stores (kept there and not clean,
/// see [`clean_at_boundaries`]), and `always` (read when a thread exits). A register the
/// segment neither reads nor stores keeps its value in the spill area untouched.
pub(super) fn reloaded_at_boundaries(
    f: &Function,
    keep: &HashMap<usize, Vec<R>>,
    clean: &HashMap<usize, Vec<R>>,
    always: &[R],
) -> HashMap<usize, Vec<R>> {
    let n = f.insts.len();
    let uses: Vec<Vec<R>> = f.insts.iter().map(|i| uses_defs(i).0).collect();
    keep.keys()
        .map(|&k| {
            let mut needed = vec![false; f.nregs as usize];
            always.iter().for_each(|&r| needed[r as usize] = true);
            let mut seen = vec![false; n + 1];
            let mut todo = vec![k + 1];
            while let Some(q) = todo.pop() {
                if q >= n || std::mem::replace(&mut seen[q], true) {
                    continue;
                }
                uses[q].iter().for_each(|&r| needed[r as usize] = true);
                if let Some(kept) = keep.get(&q) {
                    kept.iter().filter(|r| !clean[&q].contains(r)).for_each(|&r| needed[r as usize] = true);
                    continue;
                }
                todo.extend(successors(f, q).into_iter().flatten());
            }
            (k, keep[&k].iter().copied().filter(|&r| needed[r as usize]).collect())
        })
        .collect()
}

/// Per register, the kernel parameter (its byte offset) that the register is a pointer into, as
/// far as a chain of single definitions shows: `ld.param.u64`, then any of `mov`, `cvta.to.global`,
/// 64-bit `add`/`sub` of an offset and `mad.wide`/64-bit `mad.lo` with the pointer as the addend.
/// Accesses through such a register take their region entry from the parameter, which is the
/// same for every thread of the launch, so the lookup leaves the thread loop. This is only a
/// hint: the access is still checked against the entry it got, and an address outside that
/// region takes the checked slow path, so a wrong guess costs speed, never correctness.
pub(super) fn param_roots(f: &Function, params_size: u32) -> Vec<Option<u32>> {
    let n = f.nregs as usize;
    let mut defs = vec![0u32; n];
    let mut def_at = vec![usize::MAX; n];
    for (pc, ins) in f.insts.iter().enumerate() {
        let (_, ds) = operands(ins);
        for d in ds {
            let d = d as usize;
            // A guarded definition may leave the old value: it counts as a second one.
            defs[d] += if ins.guard.is_some() { 2 } else { 1 };
            def_at[d] = pc;
        }
    }
    let mut roots = vec![None; n];
    // Chains are short; a bounded number of passes settles them (and cycles stay unrooted).
    for _ in 0..8 {
        let mut changed = false;
        for r in 0..n {
            if roots[r].is_some() || defs[r] != 1 {
                continue;
            }
            let root_of = |x: R| roots[x as usize];
            let root = match f.insts[def_at[r]].inst {
                Inst::Ld { space: Space::KParam, size: 8, n: 1, addr: Addr { base: Base::Abs, off }, .. }
                    if off >= 0 && off as u64 + 8 <= params_size as u64 =>
                {
                    Some(off as u32)
                }
                Inst::Un { op: UnOp::Mov(m), a, .. } if m == u64::MAX => root_of(a),
                Inst::Cvta { to_generic: false, space: Space::Global, a, dmask, .. } if dmask == u64::MAX => root_of(a),
                Inst::Bin { op: BinOp::Add(W::W64), a, b, .. } => root_of(a).or(root_of(b)),
                Inst::Bin { op: BinOp::Sub(W::W64), a, .. } => root_of(a),
                // An offset scaled and added to a pointer (`mad.wide` of an index and a size).
                Inst::Tern {
                    op: TernOp::MadWideS(W::W32) | TernOp::MadWideU(W::W32) | TernOp::MadLo(W::W64),
                    c,
                    ..
                } => root_of(c),
                _ => None,
            };
            if root.is_some() {
                roots[r] = root;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    roots
}

/// How a register lives in generated code. Float registers kept as Cranelift floats skip a move
/// between general and vector registers at every use; conversions at the boundaries are exact
/// bit casts, so the class only decides speed, never bits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Class {
    Int,
    /// Every value the register can hold fits in 32 bits (so it is exactly an `f32` bit pattern).
    F32,
    F64,
}

/// How a register lives in code for groups (see `lanes.rs`); in one-thread code every register
/// is [`Layout::One`]. The translator gives it Cranelift variables to match (`emit::Repr`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Layout {
    /// One value: the thread's, or the group's when it is the same for every lane.
    One,
    /// The lanes' 32-bit values in vectors of four (`I32X4`, or `F32X4` for an f32 register):
    /// lane `l` is lane `l % 4` of part `l / 4`.
    Vector,
    /// One scalar per lane, of the register's class.
    PerLane,
}

/// Each register's layout: in code for groups (`plan`), a varying register lives in vectors when
/// it holds 32 bits and per lane otherwise; every other register is one value.
pub(super) fn layouts(
    plan: Option<&LanePlan>,
    classes: &[Class],
    fits: &[bool],
    consts: &[Option<u64>],
) -> Vec<Layout> {
    (0..classes.len())
        .map(|r| match plan {
            Some(p) if p.varying[r] && consts[r].is_none() => match classes[r] {
                Class::F32 => Layout::Vector,
                Class::Int if fits[r] => Layout::Vector,
                _ => Layout::PerLane,
            },
            _ => Layout::One,
        })
        .collect()
}

pub(super) const PLAIN_F: FFlags = FFlags { ftz: false, sat: false };

/// The float format an instruction computes in natively (inline, in float registers), if any.
pub(super) fn float_op(inst: &Inst) -> Option<F> {
    let f = match *inst {
        Inst::Bin { op, .. } => match op {
            BinOp::FAdd(F::F32, Rnd::Rn, PLAIN_F)
            | BinOp::FSub(F::F32, Rnd::Rn, PLAIN_F)
            | BinOp::FMul(F::F32, Rnd::Rn, PLAIN_F)
            | BinOp::FDiv(F::F32, FMode::Ieee(Rnd::Rn) | FMode::Approx, false)
            | BinOp::FMin(F::F32, false, false)
            | BinOp::FMax(F::F32, false, false) => F::F32,
            BinOp::FAdd(F::F64, Rnd::Rn, _) | BinOp::FSub(F::F64, Rnd::Rn, _) | BinOp::FMul(F::F64, Rnd::Rn, _) => {
                F::F64
            }
            _ => return None,
        },
        Inst::Tern { op, .. } => match op {
            TernOp::Fma(F::F32, Rnd::Rn, PLAIN_F) => F::F32,
            TernOp::Fma(F::F64, Rnd::Rn, PLAIN_F) => F::F64,
            TernOp::FmaNeg(F::F32, PLAIN_F, _, _) => F::F32,
            TernOp::FmaNeg(F::F64, PLAIN_F, _, _) => F::F64,
            _ => return None,
        },
        Inst::Un { op, .. } => match op {
            UnOp::FRcp(F::F32, FMode::Ieee(Rnd::Rn) | FMode::Approx, false)
            | UnOp::FSqrt(F::F32, FMode::Ieee(Rnd::Rn) | FMode::Approx, false)
            | UnOp::FRsqrt(F::F32, false)
            | UnOp::FEx2(F::F32, false)
            | UnOp::FNeg(F::F32, false)
            | UnOp::FAbs(F::F32, false) => F::F32,
            UnOp::FNeg(F::F64, _) | UnOp::FAbs(F::F64, _) => F::F64,
            _ => return None,
        },
        Inst::Setp { ty: CmpTy::F(F::F32), ftz: false, .. } | Inst::Set { ty: CmpTy::F(F::F32), ftz: false, .. } => {
            F::F32
        }
        Inst::Setp { ty: CmpTy::F(F::F64), .. } | Inst::Set { ty: CmpTy::F(F::F64), .. } => F::F64,
        _ => return None,
    };
    Some(f)
}

/// Per register: whether every instruction that reads it is an inline float operation that gives
/// PTX's canonical NaN whatever NaN it reads (arithmetic, min/max, compares). The bits of a NaN
/// such a register holds can never show, so the operations that write it skip canonicalising
/// their result: in a chain of float arithmetic only the last link pays for it.
pub(super) fn nan_blind(f: &Function) -> Vec<bool> {
    let mut blind = vec![true; f.nregs as usize];
    for ins in &f.insts {
        let canonical_reader = float_op(&ins.inst).is_some()
            && !matches!(
                ins.inst,
                // Sign operations keep a NaN's bits; the exponential is a library call.
                Inst::Un { op: UnOp::FNeg(..) | UnOp::FAbs(..) | UnOp::FEx2(..), .. }
            );
        if !canonical_reader {
            for u in operands(ins).0 {
                blind[u as usize] = false;
            }
        }
        if let Some((p, _)) = ins.guard {
            blind[p as usize] = false;
        }
    }
    blind
}

/// Whether every value `ins` can write to `d` fits in 32 bits, given which registers do (`fits`).
/// Conservative: anything not known to is taken not to.
pub(super) fn def_fits32(ins: &Inst, fits: &[bool], consts: &[Option<u64>]) -> bool {
    let src = |r: R| match consts[r as usize] {
        Some(v) => v <= u32::MAX as u64,
        None => fits[r as usize],
    };
    const M32: u64 = u32::MAX as u64;
    match *ins {
        Inst::Un { op, a, .. } => match op {
            UnOp::Mov(m) => m <= M32 || src(a),
            UnOp::Extract(_, m) | UnOp::Not(m) => m <= M32,
            UnOp::Neg(W::W32) | UnOp::PredNot => true,
            UnOp::Cvt(c) => matches!(
                (c.from, c.to, c.rnd, c.sat),
                (Ty::U32, Ty::U64, _, false)
                    | (Ty::U64 | Ty::S64 | Ty::B64, Ty::U32 | Ty::S32 | Ty::B32, _, false)
                    | (Ty::S32 | Ty::U32, Ty::F32, Some(Rnd::Rn) | None, false)
            ),
            _ => float_op(ins) == Some(F::F32),
        },
        Inst::Bin { op, a, b, .. } => match op {
            BinOp::Add(W::W32)
            | BinOp::Sub(W::W32)
            | BinOp::MulLo(W::W32)
            | BinOp::MulHiU(W::W32)
            | BinOp::MulHiS(W::W32)
            | BinOp::MinU(W::W32)
            | BinOp::MaxU(W::W32)
            | BinOp::MinS(W::W32)
            | BinOp::MaxS(W::W32)
            | BinOp::Shl(W::W32)
            | BinOp::ShrU(W::W32)
            | BinOp::ShrS(W::W32) => true,
            BinOp::And | BinOp::Or | BinOp::Xor | BinOp::PredAnd | BinOp::PredOr | BinOp::PredXor => src(a) && src(b),
            _ => float_op(ins) == Some(F::F32),
        },
        Inst::Tern { op, a, b, .. } => match op {
            TernOp::MadLo(W::W32) => true,
            TernOp::Selp => src(a) && src(b),
            _ => float_op(ins) == Some(F::F32),
        },
        Inst::Setp { .. } | Inst::Set { .. } | Inst::FrameAddr { .. } => true,
        Inst::Ld { size, sext, dmask, .. } => (size <= 4 && !sext) || dmask <= M32,
        Inst::Cvta { dmask, .. } => dmask <= M32,
        // The exchange writes a 32-bit value and a 0/1 predicate.
        Inst::Shfl { .. } => true,
        _ => false,
    }
}

/// Registers an instruction reads and writes, leaving its guard aside.
pub(super) fn operands(ins: &Instr) -> (Vec<R>, Vec<R>) {
    uses_defs(&Instr { guard: None, inst: ins.inst.clone(), line: ins.line, contractable: false })
}

/// Picks each register's class: a float class where the register meets float arithmetic and no
/// integer arithmetic or addressing, and (for f32) every value it can hold fits in 32 bits.
pub(super) fn reg_classes(f: &Function, consts: &[Option<u64>]) -> (Vec<Class>, Vec<bool>) {
    let n = f.nregs as usize;
    let all_defs: Vec<Vec<R>> = f.insts.iter().map(|i| operands(i).1).collect();
    // Whether every value the register can hold fits in 32 bits.
    let mut fits = vec![true; n];
    for &(r, _) in &f.sregs {
        fits[r as usize] = false;
    }
    let mut changed = true;
    while changed {
        changed = false;
        for (ins, ds) in f.insts.iter().zip(&all_defs) {
            for &d in ds {
                if fits[d as usize] && !def_fits32(&ins.inst, &fits, consts) {
                    fits[d as usize] = false;
                    changed = true;
                }
            }
        }
    }
    // Touches: [f32, f64, int].
    let mut touch = vec![[0u32; 3]; n];
    for ins in &f.insts {
        let (u, d) = operands(ins);
        let mut regs: Vec<R> = u.iter().chain(&d).copied().collect();
        if let Some(fo) = float_op(&ins.inst) {
            // A compare's float operands are a and b; its predicates are integers.
            let fl: Vec<R> = match ins.inst {
                Inst::Setp { a, b, .. } | Inst::Set { a, b, .. } => vec![a, b],
                _ => regs.clone(),
            };
            regs.retain(|r| !fl.contains(r));
            let k = if fo == F::F32 { 0 } else { 1 };
            fl.iter().for_each(|&r| touch[r as usize][k] += 1);
            regs.iter().for_each(|&r| touch[r as usize][2] += 1);
        } else {
            match &ins.inst {
                // Moves, selects, loads and stores carry any class without conversion.
                Inst::Un { op: UnOp::Mov(_), .. } => {}
                Inst::Tern { op: TernOp::Selp, c, .. } => touch[*c as usize][2] += 1,
                Inst::Ld { addr, .. } | Inst::St { addr, .. } => {
                    if let Base::Reg(r) = addr.base {
                        touch[r as usize][2] += 1;
                    }
                }
                _ => regs.iter().for_each(|&r| touch[r as usize][2] += 1),
            }
        }
        if let Some((p, _)) = ins.guard {
            touch[p as usize][2] += 1;
        }
    }
    let classes = (0..n)
        .map(|r| {
            let [t32, t64, ti] = touch[r];
            if consts[r].is_some() || ti > 0 || f.sregs.iter().any(|s| s.0 as usize == r) {
                Class::Int
            } else if t32 > 0 && t64 == 0 && fits[r] {
                Class::F32
            } else if t64 > 0 && t32 == 0 {
                Class::F64
            } else {
                Class::Int
            }
        })
        .collect();
    (classes, fits)
}

#[cfg(test)]
mod tests {
    use super::param_roots;
    use crate::ptx::ir::{Addr, Base, Inst, Space};
    use crate::ptx::module::Module;

    /// The global accesses of nvcc's saxpy (through `cvta.to.global`, `mul.wide` and `add.s64`)
    /// and of the pointer-arithmetic test kernel all trace back to their pointer parameters.
    #[test]
    fn global_accesses_trace_back_to_their_pointer_parameters() {
        let saxpy = include_str!("../../../../../tests/corpus/nvcc/saxpy/kernel.sm_90.ptx");
        let m = Module::parse(saxpy).unwrap();
        let e = m.entry("saxpy").unwrap();
        let f = &m.funcs[e.func as usize];
        let roots = param_roots(f, e.params_size());
        let mut seen = Vec::new();
        for ins in &f.insts {
            if let Inst::Ld { space: Space::Global, addr: Addr { base: Base::Reg(r), .. }, .. }
            | Inst::St { space: Space::Global, addr: Addr { base: Base::Reg(r), .. }, .. } = ins.inst
            {
                seen.push(roots[r as usize]);
            }
        }
        // x at byte 8, y at byte 16: load x, load y, store y.
        assert_eq!(seen, [Some(8), Some(16), Some(16)]);
    }
}
