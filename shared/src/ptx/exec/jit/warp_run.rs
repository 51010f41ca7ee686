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
//! `ldmatrix` fragments in `frag8x8`'s layout (whole rows moved at once), the float `mma` by
//! `mma_float`, and the common form (f16 into f32, m16n8k16) by `mma_f16_f32_tile`, the same
//! arithmetic written for that one layout, whose
//! A tile is kept unpacked from one `mma` to the next that reads the same slots, and each B tile
//! for every later `mma` of the run that reads its slots, while no step writes them (planned
//! once, per run: in Triton's 64x64 warp tile each A fragment meets eight B fragments in a row,
//! and each B fragment four A fragments). Running warp by warp
//! instead of instruction by instruction changes nothing observable, as the run only reads shared
//! memory and writes registers of its own warp. The path takes only blocks whose every thread is
//! live and whose warps are whole (no lane to skip or to read as zero), and only rows that lie in
//! shared memory aligned to 16 bytes; for anything else (a row that would fault, above all) it
//! returns before writing anything, and the caller runs the instructions one by one, which
//! reports the fault as every engine does.
//!
//! **Tiles filled straight.** An `ldmatrix` whose registers serve only as the A (or, transposed,
//! as the B pairs) of common-form `mma`s of the run, and are dead after it, never fills its lanes:
//! its rows, which are exactly A's (B's) rows in that layout, are widened into the `mma`s' f32
//! tile directly (`WarpRun::fill_tiles_straight`). Nothing else reads those registers, so nothing
//! can tell.
//!
//! **Accumulators as tiles, kept across passes.** The four registers an `mma` of the common form
//! accumulates into (C and D the same registers, read and written by no other step of the run) are
//! an accumulator tile: the run reads them from the spill area into row-major f32 tiles once,
//! every `mma` works on the tile in place, and they go back at the end. A run whose tiles the
//! analysis lets it keep (`keep`, see `analysis::resident_run`: every path of native code from the
//! run's resume point either comes back to the run without touching those registers or meets a
//! point where the code asks for them first) leaves them in its tiles instead, and the next pass of
//! the same run starts from there: a K loop's accumulators then never leave their tiles until the
//! loop ends. The spill area holds stale values meanwhile; [`WarpRun::flush`] writes the tiles back
//! wherever anything else may read the registers (native code's request, another boundary's warp
//! instructions, a block this path declines). Because a kept tile is changed in place, a run checks every row address of
//! every warp's `ldmatrix`es before it runs any warp, so that declining never leaves half a run done.

use super::fma::{with_fma, FmaBody};
use super::runtime::EXITED;
use crate::ptx::exec::worker::Worker;
use crate::ptx::flow::uses_defs;
use crate::ptx::ir::{Base, Inst, Instr, Mma, Space, R};
use crate::ptx::matrix::{self, is_f16_f32_k16, is_float16x8};
use crate::ptx::numerics::MmaModel;

/// A worker's buffers for runs, kept from one boundary to the next. None is cleared: a slot
/// outside `gathered`, an A or B tile, a row offset and an accumulator tile are written before
/// they are read.
#[derive(Default)]
pub(super) struct RunScratch {
    /// The run's slots, `[warp][slot][lane]`.
    regs: Vec<u64>,
    /// The run's A tiles filled straight by `ldmatrix`es.
    tiles_a: Vec<matrix::TileA16>,
    /// The run's unpacked B tiles.
    tiles_b: Vec<matrix::TileB16>,
    /// The run's accumulator tiles, `[warp][tile]`.
    accs: Vec<matrix::TileC16>,
    /// The shared memory offset of each row of each `ldmatrix`, `[warp][row]` (the run's rows in
    /// order), checked before any warp runs.
    rows: Vec<u32>,
    /// Whether `accs` hold the accumulators of a run that kept them (see [`WarpRun::flush`]),
    /// which the spill area does not hold.
    resident: bool,
}

impl RunScratch {
    /// A new block: no run of it has kept anything.
    pub(super) fn new_block(&mut self) {
        self.resident = false;
    }
}

/// The plan of a run: its slots and its steps, made once when the kernel is compiled.
#[derive(Clone)]
pub(super) struct WarpRun {
    /// Each slot's register and its constant value, if it has one.
    slots: Vec<(R, Option<u64>)>,
    /// The slots the run reads before it writes them (the thread left those registers in its
    /// spill area) and the constant ones: the only slots gathered.
    gathered: Vec<usize>,
    /// The slots the run writes that are live after it: the only ones scattered back.
    defs: Vec<usize>,
    steps: Vec<Step>,
    /// How many unpacked B tiles the run keeps (see [`Step::MmaF16`]).
    tiles_b: usize,
    /// The accumulator tiles: each one's four registers (C and D of the `mma`s that accumulate
    /// into it), and which of them are live after the run (the only ones written back).
    accs: Vec<([R; 4], [bool; 4])>,
    /// The rows of the run's `ldmatrix`es, all together (a warp's share of `RunScratch::rows`).
    rows: usize,
    /// How many A tiles `ldmatrix`es fill straight (see [`Step::LdTileA`]).
    tiles_a: usize,
    /// Where each `ldmatrix`'s rows are, in the run's order.
    row_addrs: Vec<RowAddrs>,
}

#[derive(Clone)]
enum Step {
    /// `ldmatrix`: `n` matrices into slots `d`; its rows' offsets are at `row` in the warp's share
    /// of `RunScratch::rows` (see [`RowAddrs`]).
    Ldmatrix { n: usize, trans: bool, d: [usize; 4], row: usize },
    /// A float `mma` of shape m16n8kK; operands A, B, C and D by slot.
    Mma { op: Box<Mma>, slots: [[usize; 4]; 4] },
    /// The common form ([`matrix::is_f16_f32_k16`]) by its own code; A's tile is unpacked again
    /// only where `unpack_a` (the step before of this form read other slots for A, or a step since
    /// wrote one of them). B's tile is the run's tile `b_tile`, unpacked there only where
    /// `unpack_b` (no step before read B from the same slots, or a step since wrote one of them).
    MmaF16 {
        a: [usize; 4],
        b: [usize; 2],
        acc: Acc,
        unpack_a: bool,
        b_tile: usize,
        unpack_b: bool,
        a_tile: Option<usize>,
    },
    /// An `ldmatrix` (four matrices, not transposed) whose registers only ever serve as the A of
    /// common-form `mma`s of the run, and are dead after it: its rows go straight into the run's
    /// A tile `tile` as f32 (`a_tile` of those `mma`s), with no trip through the lanes.
    LdTileA { row: usize, tile: usize },
    /// A transposed `ldmatrix` of `n` matrices whose register pairs only ever serve as the B of
    /// common-form `mma`s of the run, and are dead after it: each pair's rows go straight into
    /// B tile `tiles[pair]` as f32 (`b_tile` of those `mma`s).
    LdTileB { row: usize, n: usize, tiles: [usize; 2] },
}

/// Where the rows of an `ldmatrix` are: `n` matrices of 8 rows, row addresses from slot `base`
/// (or none: the offset alone) plus `off`, which no step before it writes, in `space`; their
/// offsets go to `row` in the warp's share of `RunScratch::rows`.
#[derive(Clone, Copy)]
struct RowAddrs {
    n: usize,
    space: Space,
    base: Option<usize>,
    off: i64,
    row: usize,
}

/// Where a common-form `mma` finds C and puts D.
#[derive(Clone, Copy)]
enum Acc {
    /// The run's accumulator tile of this index.
    Tile(usize),
    /// C's and D's slots.
    Slots { c: [usize; 4], d: [usize; 4] },
}

/// While a run is planned: which slots' fragments the steps so far leave unpacked, as long as no
/// step writes those slots.
#[derive(Default)]
struct Unpacked {
    /// The A slots of the last common-form `mma`.
    a: Option<[usize; 4]>,
    /// Per B tile of the run: the slots it holds, or none (free again).
    b: Vec<Option<[usize; 2]>>,
}

impl Unpacked {
    /// The tile holding B's slots `b`, and whether the step must unpack it there (no tile holds
    /// them yet: a free one, or a new one, does now).
    fn tile_b(&mut self, b: [usize; 2]) -> (usize, bool) {
        if let Some(t) = self.b.iter().position(|t| *t == Some(b)) {
            return (t, false);
        }
        let t = self.b.iter().position(Option::is_none).unwrap_or_else(|| {
            self.b.push(None);
            self.b.len() - 1
        });
        self.b[t] = Some(b);
        (t, true)
    }

    /// A step writes `slots`: the tiles unpacked from any of them are stale.
    fn written(&mut self, slots: &[usize]) {
        let stale = |held: &[usize]| held.iter().any(|s| slots.contains(s));
        if self.a.is_some_and(|a| stale(&a)) {
            self.a = None;
        }
        for t in &mut self.b {
            if t.is_some_and(|b| stale(&b)) {
                *t = None;
            }
        }
    }
}

impl WarpRun {
    /// The plan of `run`, with the constant registers `consts` among its operands; `None` when
    /// the run holds an instruction this path does not take (it then runs one by one).
    pub(super) fn plan(run: &[Instr], consts: &[(R, u64)]) -> Option<WarpRun> {
        let mut plan = WarpRun {
            slots: Vec::new(),
            gathered: Vec::new(),
            defs: Vec::new(),
            steps: Vec::new(),
            tiles_b: 0,
            accs: accumulator_tiles(run).into_iter().map(|regs| (regs, [true; 4])).collect(),
            rows: 0,
            tiles_a: 0,
            row_addrs: Vec::new(),
        };
        let mut unpacked = Unpacked::default();
        let slot = |plan: &mut WarpRun, r: R, def: bool| {
            let s = match plan.slots.iter().position(|s| s.0 == r) {
                Some(s) => s,
                None => {
                    let konst = consts.iter().find(|c| c.0 == r).map(|c| c.1);
                    plan.slots.push((r, konst));
                    // First seen as an operand: read before any step writes it.
                    if !def || konst.is_some() {
                        plan.gathered.push(plan.slots.len() - 1);
                    }
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
                    // Row addresses are checked before any step runs: from the values the run
                    // starts with.
                    if base.is_some_and(|b| plan.defs.contains(&b)) {
                        return None;
                    }
                    let mut ds = [0; 4];
                    for (j, &r) in d.iter().enumerate().take(*n as usize) {
                        ds[j] = slot(&mut plan, r, true);
                    }
                    unpacked.written(&ds[..*n as usize]);
                    let (n, row) = (*n as usize, plan.rows);
                    plan.rows += 8 * n;
                    plan.row_addrs.push(RowAddrs { n, space: *space, base, off: addr.off, row });
                    Step::Ldmatrix { n, trans: *trans, d: ds, row }
                }
                Inst::Mma(op) if is_f16_f32_k16(op) && op.a.len() == 4 && op.b.len() == 2 => {
                    let tile = plan.accs.iter().position(|(regs, _)| op.c[..] == regs[..] && op.d[..] == regs[..]);
                    let a = [0, 1, 2, 3].map(|i| slot(&mut plan, op.a[i], false));
                    let b = [0, 1].map(|i| slot(&mut plan, op.b[i], false));
                    let acc = match tile {
                        Some(t) => Acc::Tile(t),
                        None if op.c.len() == 4 && op.d.len() == 4 => {
                            // Operands are read before D is written, as `mma_float` does.
                            let c = [0, 1, 2, 3].map(|i| slot(&mut plan, op.c[i], false));
                            let d = [0, 1, 2, 3].map(|i| slot(&mut plan, op.d[i], true));
                            Acc::Slots { c, d }
                        }
                        None => return None,
                    };
                    let unpack_a = unpacked.a.replace(a) != Some(a);
                    let (b_tile, unpack_b) = unpacked.tile_b(b);
                    if let Acc::Slots { d, .. } = acc {
                        unpacked.written(&d);
                    }
                    Step::MmaF16 { a, b, acc, unpack_a, b_tile, unpack_b, a_tile: None }
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
                    unpacked.written(&slots[3][..op.d.len()]);
                    Step::Mma { op: op.clone(), slots }
                }
                _ => return None,
            };
            plan.steps.push(step);
        }
        plan.tiles_b = unpacked.b.len();
        Some(plan)
    }

    /// The registers of the run's accumulator tiles.
    pub(super) fn accumulators(&self) -> impl Iterator<Item = R> + '_ {
        self.accs.iter().flat_map(|(regs, _)| *regs)
    }

    /// Leaves out of the scatter the slots whose registers are dead after the run (`live`: the
    /// registers live after it): a tile's fragments, read only by the run's own `mma`s.
    pub(super) fn scatter_only(&mut self, live: &[R]) {
        let slots = &self.slots;
        self.defs.retain(|&s| live.contains(&slots[s].0));
        for (regs, written) in &mut self.accs {
            *written = regs.map(|r| live.contains(&r));
        }
        self.fill_tiles_straight(live);
    }

    /// Turns the `ldmatrix`es whose registers only feed common-form `mma`s into tile fills
    /// ([`Step::LdTileA`], [`Step::LdTileB`]), where every use of those registers in the run is
    /// that (the same four as A, or the same pair as B, written only by such `ldmatrix`es, at the
    /// same place of their destinations, and never grouped otherwise), the run writes them before
    /// it reads them, and they are dead after it (`live`): nothing but those `mma`s can tell the
    /// lanes were never written.
    fn fill_tiles_straight(&mut self, live: &[R]) {
        // A row address is read as it is.
        let bases: Vec<usize> = self.row_addrs.iter().filter_map(|r| r.base).collect();
        let ok_slot = |s: usize| !self.gathered.contains(&s) && !live.contains(&self.slots[s].0) && !bases.contains(&s);
        // Every slot some step reads or writes other than as a fused A or B could be.
        let mut quads: Vec<[usize; 4]> = Vec::new();
        let mut pairs: Vec<[usize; 2]> = Vec::new();
        for step in &self.steps {
            if let Step::Ldmatrix { n, trans, d, .. } = *step {
                if !trans && n == 4 && !quads.contains(&d) {
                    quads.push(d);
                }
                if trans && (n == 2 || n == 4) {
                    for p in d[..n].chunks_exact(2) {
                        let p = [p[0], p[1]];
                        if !pairs.contains(&p) {
                            pairs.push(p);
                        }
                    }
                }
            }
        }
        // A slot in two groupings (two quads, two pairs, a quad and a pair) has no tile of its own:
        // a tile holds what its grouping's `ldmatrix` last wrote, not what the registers hold
        // after another grouping's.
        let overlapping: Vec<usize> = {
            let groups: Vec<&[usize]> = quads.iter().map(|q| &q[..]).chain(pairs.iter().map(|p| &p[..])).collect();
            let shares =
                |i: usize| groups.iter().enumerate().any(|(j, h)| j != i && h.iter().any(|s| groups[i].contains(s)));
            (0..groups.len()).filter(|&i| shares(i)).flat_map(|i| groups[i].iter().copied()).collect()
        };
        quads.retain(|q| q.iter().all(|&s| ok_slot(s) && !overlapping.contains(&s)));
        pairs.retain(|p| p.iter().all(|&s| ok_slot(s) && !overlapping.contains(&s)));
        // Drop candidates used any other way, until none is (an `ldmatrix` is filled straight only
        // where all of its destinations are, so dropping one pair can drop its partner).
        loop {
            let (nq, np) = (quads.len(), pairs.len());
            for step in &self.steps {
                let mut other: Vec<usize> = Vec::new();
                match *step {
                    Step::Ldmatrix { n, trans, d, .. } => {
                        let fused = if trans {
                            (n == 2 || n == 4) && d[..n].chunks_exact(2).all(|p| pairs.contains(&[p[0], p[1]]))
                        } else {
                            n == 4 && quads.contains(&d)
                        };
                        if !fused {
                            other.extend(&d[..n]);
                        }
                    }
                    Step::Mma { ref op, slots } => {
                        for (o, len) in [op.a.len(), op.b.len(), op.c.len(), op.d.len()].into_iter().enumerate() {
                            other.extend(&slots[o][..len.min(4)]);
                        }
                    }
                    Step::MmaF16 { a, b, acc, .. } => {
                        if !quads.contains(&a) {
                            other.extend(a);
                        }
                        if !pairs.contains(&b) {
                            other.extend(b);
                        }
                        if let Acc::Slots { c, d } = acc {
                            other.extend(c);
                            other.extend(d);
                        }
                    }
                    Step::LdTileA { .. } | Step::LdTileB { .. } => {}
                }
                quads.retain(|q| !q.iter().any(|s| other.contains(s)));
                pairs.retain(|p| !p.iter().any(|s| other.contains(s)));
            }
            if (quads.len(), pairs.len()) == (nq, np) {
                break;
            }
        }
        let first_b = self.tiles_b;
        for step in &mut self.steps {
            match *step {
                Step::Ldmatrix { n, trans: false, d, row, .. } if n == 4 && quads.contains(&d) => {
                    *step = Step::LdTileA { row, tile: quads.iter().position(|q| *q == d).expect("a fused quad") };
                }
                Step::Ldmatrix { n, trans: true, d, row, .. }
                    if (n == 2 || n == 4) && d[..n].chunks_exact(2).all(|p| pairs.contains(&[p[0], p[1]])) =>
                {
                    let tile = |p: usize| {
                        first_b + pairs.iter().position(|q| *q == [d[2 * p], d[2 * p + 1]]).expect("a fused pair")
                    };
                    let tiles = [tile(0), if n == 4 { tile(1) } else { 0 }];
                    *step = Step::LdTileB { row, n, tiles };
                }
                Step::MmaF16 { a, b, ref mut a_tile, ref mut b_tile, ref mut unpack_b, .. } => {
                    *a_tile = quads.iter().position(|q| *q == a);
                    if let Some(t) = pairs.iter().position(|q| *q == b) {
                        (*b_tile, *unpack_b) = (first_b + t, false);
                    }
                }
                _ => {}
            }
        }
        self.tiles_a = quads.len();
        self.tiles_b += pairs.len();
    }

    /// Runs the run for every warp of the block whose thread states are `state`, over its spill
    /// area (`nregs` registers a thread), with `scratch`'s buffers; where `keep`, the accumulator
    /// tiles stay in `scratch` for the next pass of this run instead of going back to the spill
    /// area. False where this path does not take the block (see the module docs): then nothing is
    /// written but the tiles an earlier pass kept, which go back to the spill area first.
    pub(super) fn run<const MW: usize>(
        &self,
        w: &Worker<'_, MW>,
        scratch: &mut RunScratch,
        spill: &mut [u64],
        nregs: usize,
        state: &[u32],
        keep: bool,
    ) -> bool {
        let n = state.len();
        if !n.is_multiple_of(32) || state.contains(&EXITED) {
            self.flush(scratch, spill, nregs, n);
            return false;
        }
        let ns = self.slots.len();
        let RunScratch { regs: buf, tiles_a, tiles_b, accs, rows, resident } = scratch;
        if buf.len() < n * ns {
            buf.resize(n * ns, 0);
        }
        // Slot by slot, so that each slot's 32 lanes are written side by side.
        for (wi, warp) in buf[..n * ns].chunks_exact_mut(ns * 32).enumerate() {
            let threads = &spill[wi * 32 * nregs..][..32 * nregs];
            for &s in &self.gathered {
                let lanes = &mut warp[s * 32..s * 32 + 32];
                match self.slots[s] {
                    (_, Some(k)) => lanes.fill(k),
                    (r, None) => {
                        for (x, regs) in lanes.iter_mut().zip(threads.chunks_exact(nregs)) {
                            *x = regs[r as usize];
                        }
                    }
                }
            }
        }
        // A warp's share of each buffer: at least one entry, so that every warp has one.
        let (nw, nr, na) = (n / 32, self.rows.max(1), self.accs.len().max(1));
        if rows.len() < nw * nr {
            rows.resize(nw * nr, 0);
        }
        for (warp, rows) in buf[..n * ns].chunks_exact(ns * 32).zip(rows.chunks_exact_mut(nr)) {
            if !self.check_rows(w, warp, rows) {
                if std::mem::take(resident) {
                    self.write_back(accs, spill, nregs, n);
                }
                return false;
            }
        }
        if accs.len() < nw * na {
            accs.resize(nw * na, [[0.0; 8]; 16]);
        }
        if !*resident {
            for (wi, tiles) in accs.chunks_exact_mut(na).take(nw).enumerate() {
                let threads = &spill[wi * 32 * nregs..][..32 * nregs];
                for (tile, (regs, _)) in tiles.iter_mut().zip(&self.accs) {
                    *tile = matrix::tile_c_f32(|r, lane| threads[lane * nregs + regs[r] as usize]);
                }
            }
        }
        if tiles_b.len() < self.tiles_b {
            tiles_b.resize(self.tiles_b, [[0.0; 8]; 16]);
        }
        if tiles_a.len() < self.tiles_a {
            tiles_a.resize(self.tiles_a, [[0.0; 16]; 16]);
        }
        let warps = buf[..n * ns].chunks_exact_mut(ns * 32);
        for ((warp, rows), acc) in warps.zip(rows.chunks_exact(nr)).zip(accs.chunks_exact_mut(na)) {
            self.run_warp(w, warp, rows, WarpTiles { a: tiles_a, b: tiles_b, acc });
        }
        for (wi, warp) in buf[..n * ns].chunks_exact(ns * 32).enumerate() {
            let threads = &mut spill[wi * 32 * nregs..][..32 * nregs];
            for &s in &self.defs {
                let r = self.slots[s].0 as usize;
                for (&x, regs) in warp[s * 32..s * 32 + 32].iter().zip(threads.chunks_exact_mut(nregs)) {
                    regs[r] = x;
                }
            }
        }
        *resident = keep && !self.accs.is_empty();
        if !keep {
            self.write_back(accs, spill, nregs, n);
        }
        true
    }

    /// Writes the accumulator tiles a pass of this run kept in `scratch` back to the spill area
    /// of the block's `n` threads (`nregs` registers a thread), if it kept them.
    pub(super) fn flush(&self, scratch: &mut RunScratch, spill: &mut [u64], nregs: usize, n: usize) {
        if std::mem::take(&mut scratch.resident) {
            self.write_back(&scratch.accs, spill, nregs, n);
        }
    }

    /// The accumulator tiles `accs` (`[warp][tile]`) into the registers of theirs that are live
    /// after the run.
    fn write_back(&self, accs: &[matrix::TileC16], spill: &mut [u64], nregs: usize, n: usize) {
        let na = self.accs.len();
        for (wi, tiles) in accs.chunks_exact(na.max(1)).take(n / 32).enumerate() {
            let threads = &mut spill[wi * 32 * nregs..][..32 * nregs];
            for (tile, (regs, live)) in tiles.iter().zip(&self.accs) {
                matrix::untile_c_f32(tile, |r, lane, v| {
                    if live[r] {
                        threads[lane * nregs + regs[r] as usize] = v;
                    }
                });
            }
        }
    }

    /// Finds the shared memory offset of every row of the `ldmatrix`es of one warp (`warp`, its
    /// slots as the run starts) into `rows`; false where one is not 16 aligned bytes of shared
    /// memory.
    fn check_rows<const MW: usize>(&self, w: &Worker<'_, MW>, warp: &[u64], rows: &mut [u32]) -> bool {
        for &RowAddrs { n, space, base, off, row } in &self.row_addrs {
            for (r, out) in rows[row..row + 8 * n].iter_mut().enumerate() {
                let a = base.map_or(0, |s| warp[s * 32 + r]).wrapping_add(off as u64);
                let (sp, o) = w.resolve(space, a);
                if sp != Space::Shared || !o.is_multiple_of(16) || o + 16 > w.b.shared.len() as u64 {
                    return false;
                }
                *out = o as u32;
            }
        }
        true
    }

    /// The steps for one warp over its slots (`warp[slot * 32 + lane]`), its rows' offsets
    /// (checked by [`WarpRun::check_rows`]) and its tiles, compiled with FMA instructions and
    /// F16C conversions where the CPU has them ([`with_fma`]; see `matrix::widen_f16` for the
    /// conversions). One check a warp for every step: a CPU without all three runs the portable
    /// code, with the same bits.
    fn run_warp<const MW: usize>(&self, w: &Worker<'_, MW>, warp: &mut [u64], rows: &[u32], tiles: WarpTiles<'_>) {
        with_fma(WarpSteps { run: self, w, warp, rows, tiles })
    }

    /// `F16C` as in [`FmaBody::run`].
    #[inline(always)]
    fn run_warp_body<const MW: usize, const F16C: bool>(
        &self,
        w: &Worker<'_, MW>,
        warp: &mut [u64],
        rows: &[u32],
        WarpTiles { a: tiles_a, b: tiles_b, acc: accs }: WarpTiles<'_>,
    ) {
        let mut tile_a: matrix::TileA16 = [[0.0; 16]; 16];
        // Row `i` of the rows at `row`, as 16 bytes of shared memory (checked before the run).
        let bytes = |row: usize, i: usize| -> &[u8; 16] {
            let o = rows[row + i] as usize;
            w.b.shared[o..o + 16].try_into().expect("16 bytes")
        };
        for step in &self.steps {
            match *step {
                Step::Ldmatrix { n, trans: false, d, row } => {
                    // Lanes 4r..4r + 4 of matrix j's register hold its row r's words in order
                    // (`frag8x8`).
                    for i in 0..8 * n {
                        let (j, r) = (i / 8, i % 8);
                        for (q, word) in bytes(row, i).chunks_exact(4).enumerate() {
                            warp[d[j] * 32 + 4 * r + q] = u32::from_le_bytes(word.try_into().unwrap()) as u64;
                        }
                    }
                }
                Step::Ldmatrix { n, trans: true, d, row } => {
                    // Transposed, lane 4g + t holds column g of rows 2t and 2t + 1 (`frag8x8`):
                    // those two rows' halves, interleaved, go to lanes t, t + 4, ..., t + 28.
                    for (j, &s) in d.iter().enumerate().take(n) {
                        for t in 0..4 {
                            let (lo, hi) = (bytes(row, 8 * j + 2 * t), bytes(row, 8 * j + 2 * t + 1));
                            for (g, (l, h)) in lo.chunks_exact(2).zip(hi.chunks_exact(2)).enumerate() {
                                let pair = u16::from_le_bytes([l[0], l[1]]) as u64
                                    | (u16::from_le_bytes([h[0], h[1]]) as u64) << 16;
                                warp[s * 32 + 4 * g + t] = pair;
                            }
                        }
                    }
                }
                Step::LdTileA { row, tile } => {
                    // Matrix j is A's 8x8 block at rows 8 (j & 1), columns 8 (j >> 1), row by
                    // row, as its register is in lane order (`matrix::unpack_a_f16`).
                    let t = &mut tiles_a[tile];
                    for i in 0..32 {
                        let (j, r) = (i / 8, i % 8);
                        let k = 8 * (j >> 1);
                        t[8 * (j & 1) + r][k..k + 8].copy_from_slice(&matrix::widen_f16_row::<F16C>(bytes(row, i)));
                    }
                }
                Step::LdTileB { row, n, tiles } => {
                    // Transposed, row r of matrix j is B's row k = 8 (j & 1) + r of the pair's
                    // tile, as its register is in lane order (`matrix::unpack_b_f16`).
                    for i in 0..8 * n {
                        let (j, r) = (i / 8, i % 8);
                        tiles_b[tiles[j / 2]][8 * (j & 1) + r] = matrix::widen_f16_row::<F16C>(bytes(row, i));
                    }
                }
                Step::Mma { ref op, slots } => mma(op, w.ctx.mma, &slots, warp),
                Step::MmaF16 { a, b, acc, unpack_a, b_tile, unpack_b, a_tile } => {
                    let ops = F16Operands { a, b, acc };
                    let a = match a_tile {
                        Some(t) => &mut tiles_a[t],
                        None => &mut tile_a,
                    };
                    let unpack = [unpack_a && a_tile.is_none(), unpack_b];
                    mma_f16_body::<F16C>(w.ctx.mma, warp, accs, a, &mut tiles_b[b_tile], ops, unpack)
                }
            }
        }
    }
}

/// One warp's pass over a run's steps, as [`with_fma`] runs it.
struct WarpSteps<'s, 'w, const MW: usize> {
    run: &'s WarpRun,
    w: &'s Worker<'w, MW>,
    warp: &'s mut [u64],
    rows: &'s [u32],
    tiles: WarpTiles<'s>,
}

impl<const MW: usize> FmaBody for WarpSteps<'_, '_, MW> {
    type Out = ();
    #[inline(always)]
    fn run<const F16C: bool>(self) {
        self.run.run_warp_body::<MW, F16C>(self.w, self.warp, self.rows, self.tiles)
    }
}

/// A warp's tiles in a run: those `ldmatrix`es fill straight, the B tiles, and the accumulators.
struct WarpTiles<'s> {
    a: &'s mut [matrix::TileA16],
    b: &'s mut [matrix::TileB16],
    acc: &'s mut [matrix::TileC16],
}

/// The accumulator tiles of a run: the C (and D) registers of its common-form `mma`s that
/// accumulate (C and D the same four registers, in order), where no other step of the run reads
/// or writes any of them.
fn accumulator_tiles(run: &[Instr]) -> Vec<[R; 4]> {
    let quad = |ins: &Instr| match &ins.inst {
        Inst::Mma(op) if is_f16_f32_k16(op) && op.c == op.d && op.d.len() == 4 && ins.guard.is_none() => {
            let q: [R; 4] = op.d[..].try_into().ok()?;
            // Four distinct registers.
            (1..4).all(|i| !q[..i].contains(&q[i])).then_some(q)
        }
        _ => None,
    };
    let mut tiles: Vec<[R; 4]> = Vec::new();
    for q in run.iter().filter_map(quad) {
        if !tiles.contains(&q) {
            tiles.push(q);
        }
    }
    tiles.retain(|q| {
        run.iter().all(|ins| match &ins.inst {
            // An `mma` that accumulates into this tile reads none of it as A or B.
            Inst::Mma(op) if quad(ins) == Some(*q) => !op.a.iter().chain(&op.b).any(|r| q.contains(r)),
            _ => {
                let (uses, defs) = uses_defs(ins);
                !uses.iter().chain(&defs).any(|r| q.contains(r))
            }
        })
    });
    tiles
}

/// The slots of a common-form `mma`'s A and B, and where its C and D are.
#[derive(Clone, Copy)]
struct F16Operands {
    a: [usize; 4],
    b: [usize; 2],
    acc: Acc,
}

/// A common-form `mma` on a warp's slots and tiles (A's and B's tiles unpacked first where
/// `unpack` says); `F16C` as in [`WarpRun::run_warp_body`].
#[inline(always)]
fn mma_f16_body<const F16C: bool>(
    model: MmaModel,
    warp: &mut [u64],
    accs: &mut [matrix::TileC16],
    a: &mut matrix::TileA16,
    b: &mut matrix::TileB16,
    ops: F16Operands,
    unpack: [bool; 2],
) {
    let lanes = |s: usize| -> &[u64; 32] { warp[s * 32..s * 32 + 32].try_into().expect("a slot is 32 lanes") };
    if unpack[0] {
        matrix::unpack_a_f16::<F16C>(ops.a.map(lanes), a);
    }
    if unpack[1] {
        matrix::unpack_b_f16::<F16C>(ops.b.map(lanes), b);
    }
    match ops.acc {
        Acc::Tile(t) => matrix::mma_f16_f32_tile(model, a, b, &mut accs[t]),
        Acc::Slots { c, d } => {
            let (regs, _) = warp.as_chunks_mut::<32>();
            matrix::mma_f16_f32(model, a, b, regs, c, d);
        }
    }
}

/// A float `mma` on a warp's slots, with the features of the code it is inlined into (see
/// [`with_fma`]).
#[inline(always)]
fn mma(op: &Mma, model: MmaModel, slots: &[[usize; 4]; 4], warp: &mut [u64]) {
    let mut out = [0u64; 32 * 4];
    matrix::mma_float(op, model, |o, lane, i| warp[slots[o][i] * 32 + lane], |lane, i, v| out[i * 32 + lane] = v);
    for (i, &s) in slots[3].iter().enumerate().take(op.d.len()) {
        warp[s * 32..s * 32 + 32].copy_from_slice(&out[i * 32..i * 32 + 32]);
    }
}
