// ============================================================================================
// MEMORY SAFETY. Every check generated code makes before it touches memory is in this file, and
// so is every decision to leave one out. A change here decides whether generated code can read
// or write outside the memory a kernel was given: it needs two careful reviews, and the tests
// that run hostile kernels on every engine (`ptx/tests/hostile.rs`, `memory.rs`).
// ============================================================================================

//! The inline checks of generated code's memory accesses, and the slow path they fall back to.
//!
//! Generated code touches memory only through addresses it has checked:
//! - a global (or generic) address selects a slot of a region table built for the launch from the
//!   `Memory` borrowed for the whole launch (regions cannot be added or removed meanwhile); the
//!   offset must lie within the region and be naturally aligned, else the access goes to the
//!   interpreter's checked slow path, which resolves module variables, the shared and local
//!   windows, or reports the fault exactly as the interpreter does ([`Tx::fast_ptr`]);
//! - shared memory is the worker's per-block buffer, checked against its length;
//! - kernel parameters are read at offsets proven below the parameter size at compile time (the
//!   launch checks the buffer is at least that long); everything else takes the slow path;
//! - atomics always go through the slow path, which uses the regions' real atomic operations;
//! - a `cp.async` copies in place only once every 8-byte piece of its source (global) and its
//!   destination (shared) has passed the checks above, and only a whole copy with both addresses
//!   aligned to its size; anything else is the interpreter's copy ([`Tx::copy_async`]).
//!
//! Bounds and alignment are one compare: the offset rotated right by log2 of the access size is
//! below the count of aligned positions in the region (`len >> log2(size)`) exactly when the
//! access is aligned and fits ([`Tx::fits`]).
//!
//! Two decisions leave checks out, both proven at compile time from the code alone:
//! - the region entry of a pointer parameter is looked up once per call ([`Tx::hoist_root_entries`],
//!   from `param_roots`): only a hint, as every access is still checked against the entry it got
//!   and an address outside that region fails the check;
//! - in code for groups, a stretch of straight-line code whose shared-memory accesses go through
//!   bases it does not write gets one range check per base at its start, and a copy without the
//!   checks ([`Tx::prechecked_stretch`], [`stretch_checks`]); a vector access of the lanes' 4-byte
//!   words checks the `4 * LANES` bytes they touch at once ([`Tx::run_ptr`]).

use std::mem::offset_of;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Block, InstBuilder, MemFlagsData, Type, Value};

use super::analysis::{Class, Layout};
use super::emit::{flags, Repr, Tx};
use super::error::JitError;
use super::lanes::{is_control, LanePlan, Step, Vecs, LANES, PARTS};
use super::runtime::{JitCtx, Slot, SLOT_SHIFT, VECTOR_BASE};
use crate::ptx::flow::uses_defs;
use crate::ptx::ir::*;

const REGION_OFF_MASK: i64 = (1i64 << REGION_SHIFT) - 1;

/// A pointer parameter's region entry, computed once per call before the thread loop (Cranelift
/// does not hoist these loads out of the thread loop by itself).
pub(super) struct RootEntry {
    /// Where the region's bytes are.
    ptr: Value,
    /// The device address the region starts at.
    start: Value,
    /// Per access size `1 << k`: the count of aligned positions (see [`Slot`]).
    lim: [Option<Value>; 4],
    /// In code for groups: the count of 4-aligned positions where a 4-byte access of every
    /// lane (`4 * LANES` bytes) fits.
    lim_run: Option<Value>,
}

/// The base addresses of a vector access's lanes, as the register holds them.
#[derive(Clone, Copy)]
pub(super) enum LaneAddrs {
    /// 32-bit lanes in vectors.
    Parts(Vecs),
    /// One I64 per lane.
    Lanes([Value; LANES]),
}

impl Tx<'_, '_> {
    /// Looks up, in the entry block, the region entry of every pointer parameter that global
    /// accesses derive from (see `analysis::param_roots`).
    pub(super) fn hoist_root_entries(&mut self) {
        let mut need: Vec<(u32, usize)> = Vec::new();
        for ins in &self.a.f.insts {
            let (space, size, addr) = match ins.inst {
                Inst::Ld { space, size, addr, .. } | Inst::St { space, size, addr, .. } => (space, size, addr),
                _ => continue,
            };
            if !matches!(space, Space::Global | Space::Generic) || !matches!(size, 1 | 2 | 4 | 8) {
                continue;
            }
            if let Some(p) = self.root_of(&addr) {
                need.push((p, size.trailing_zeros() as usize));
            }
        }
        need.sort_unstable();
        need.dedup();
        let params = self.h().params;
        // Plain loads on purpose: marked pure, they would be placed again at each use, inside the
        // thread loop, which Cranelift does not hoist them out of.
        let pinned = flags();
        for (p, k) in need {
            if !self.root_entries.contains_key(&p) {
                let key = self.b.ins().load(types::I64, pinned, params, p as i32);
                let (ptr, len) = self.region_entry(key, pinned);
                let start = self.b.ins().band_imm_s(key, !REGION_OFF_MASK);
                let mut lim = [None; 4];
                lim[0] = Some(len);
                self.root_entries.insert(p, RootEntry { ptr, start, lim, lim_run: None });
            }
            let e = self.root_entries.get_mut(&p).expect("just inserted");
            if e.lim[k].is_none() {
                let len = e.lim[0].expect("length");
                e.lim[k] = Some(self.b.ins().ushr_imm_s(len, k as i64));
            }
            if self.a.width > 1 && k == 2 && self.root_entries[&p].lim_run.is_none() {
                let l4 = self.root_entries[&p].lim[2].expect("limit for 4 bytes");
                let l = self.lim_run(l4);
                self.root_entries.get_mut(&p).expect("entry").lim_run = Some(l);
            }
        }
    }

    pub(super) fn root_of(&self, a: &Addr) -> Option<u32> {
        match a.base {
            Base::Reg(r) => self.a.roots[r as usize],
            Base::Abs | Base::Frame => None,
        }
    }

    /// The interpreter's checked access for instruction `pc` (load, store or atomic); leaves the
    /// call when it reports a fault.
    pub(super) fn slow(&mut self, pc: usize, ea: Value, b: Value, c: Value) -> Value {
        let ctx = self.h().ctx;
        let ip = self.inst_ptr(pc);
        let t = self.thread_index();
        self.b.ins().call(self.slow_mem, &[ctx, ip, t, ea, b, c]);
        let v = self.ld_ctx(types::I64, offset_of!(JitCtx, slow_value));
        let fault = self.ld_ctx(types::I64, offset_of!(JitCtx, fault));
        let ok = self.b.create_block();
        let fe = self.fault_exit.expect("fault exit");
        // The pending count is left to the block's end: flushing it on this path alone would lose
        // it on the fast one.
        self.b.ins().brif(fault, fe, &[], ok, &[]);
        self.b.switch_to_block(ok);
        v
    }

    /// A vector access faults unless its base is aligned to the whole vector (the elements' checks
    /// below see only their own size): one test of the low bits, the fault named by the slow path.
    pub(super) fn vector_alignment(&mut self, pc: usize, space: Space, n: u8, size: u8, at: (Value, i64)) {
        if n < 2 || space == Space::KParam {
            return;
        }
        let ea = self.b.ins().iadd_imm_s(at.0, at.1);
        let low = self.b.ins().band_imm_s(ea, (n as u64 * size as u64 - 1) as i64);
        let bad = self.b.create_block();
        let ok = self.b.create_block();
        self.b.ins().brif(low, bad, &[], ok, &[]);
        let mark = self.block_mark();
        self.b.switch_to_block(bad);
        let z = self.iconst(0);
        let check = self.iconst(VECTOR_BASE);
        self.slow(pc, ea, z, check);
        self.b.ins().jump(ok, &[]);
        self.cold_since(mark);
        self.b.set_cold_block(bad);
        self.b.switch_to_block(ok);
    }

    fn mem_ty(size: u8) -> Type {
        match size {
            1 => types::I8,
            2 => types::I16,
            4 => types::I32,
            _ => types::I64,
        }
    }

    /// A checked pointer for a fast access at `base + off`, branching to `slow` when the checks
    /// fail. The region entry depends on the base alone (its loads are pure: the index is clamped
    /// into the table), so accesses around one base share it and loops hoist it; an offset that
    /// leaves the base's region fails the bounds check and takes the slow path, which resolves
    /// the full address.
    fn fast_ptr(&mut self, space: Space, size: u8, (base, off): (Value, i64), root: Option<u32>, slow: Block) -> Value {
        let h = self.h();
        let shared = h.shared;
        let k = size.trailing_zeros() as usize;
        let lim = h.shared_lim[k];
        match space {
            Space::Shared => {
                let ea = self.b.ins().iadd_imm_s(base, off);
                self.checked(shared, ea, k, lim, slow)
            }
            _ if root.is_some_and(|p| self.root_entries.contains_key(&p)) => {
                // The entry of the parameter the base derives from, looked up once per call.
                // The offset from the start of that region: for a base in another region it
                // is at least 2^36, past any region's length, so the check below sends it to
                // the slow path.
                let e = &self.root_entries[&root.expect("root")];
                let (ptr, start, lim) = (e.ptr, e.start, e.lim[k].expect("limit for this size"));
                let ea = self.b.ins().iadd_imm_s(base, off);
                let o = self.b.ins().isub(ea, start);
                self.checked(ptr, o, k, lim, slow)
            }
            _ => {
                let pure = MemFlagsData::trusted().with_readonly().with_can_move();
                let (ptr, len) = self.region_entry(base, pure);
                let lim = if k > 0 { self.b.ins().ushr_imm_s(len, k as i64) } else { len };
                let o = self.b.ins().band_imm_s(base, REGION_OFF_MASK);
                let o = self.b.ins().iadd_imm_s(o, off);
                self.checked(ptr, o, k, lim, slow)
            }
        }
    }

    /// The host address of shared-memory offset `ea`, for an access proven in bounds at the start
    /// of its stretch (see `Tx::prechecked_stretch`).
    pub(super) fn proven_shared(&mut self, ea: Value) -> Value {
        let shared = self.h().shared;
        self.b.ins().iadd(shared, ea)
    }

    /// The region-table entry (host pointer, length) of the region device address `key` falls
    /// in: slot `key >> REGION_SHIFT`, clamped to the table's last, empty entry.
    pub(super) fn region_entry(&mut self, key: Value, mem: MemFlagsData) -> (Value, Value) {
        let (table, table_max) = (self.h().table, self.h().table_max);
        let slot = self.b.ins().ushr_imm_s(key, REGION_SHIFT as i64);
        let slot = self.b.ins().umin(slot, table_max);
        let so = self.b.ins().ishl_imm_s(slot, SLOT_SHIFT);
        let ent = self.b.ins().iadd(table, so);
        let ptr = self.b.ins().load(types::I64, mem, ent, offset_of!(Slot, ptr) as i32);
        let len = self.b.ins().load(types::I64, mem, ent, offset_of!(Slot, len) as i32);
        (ptr, len)
    }

    /// Whether an access of `1 << k` bytes at `offset` is in bounds (`lim` aligned positions) and
    /// aligned: one compare of the rotated offset.
    pub(super) fn fits(&mut self, offset: Value, k: usize, lim: Value) -> Value {
        let idx = if k > 0 { self.b.ins().rotr_imm_s(offset, k as i64) } else { offset };
        self.b.ins().icmp(IntCC::UnsignedLessThan, idx, lim)
    }

    /// `host + offset` for an access of `1 << k` bytes whose offset is in bounds (`lim` aligned
    /// positions) and aligned, both in one compare of the rotated offset; otherwise a branch to
    /// `slow`.
    pub(super) fn checked(&mut self, host: Value, offset: Value, k: usize, lim: Value, slow: Block) -> Value {
        let ok = self.fits(offset, k, lim);
        let fast = self.b.create_block();
        self.b.ins().brif(ok, fast, &[], slow, &[]);
        self.b.switch_to_block(fast);
        self.b.ins().iadd(host, offset)
    }

    /// Loads `size` bytes as `out`: zero-extended to I64, or as a float of the same size.
    #[expect(
        clippy::too_many_arguments,
        reason = "a load's fields, its computed address and the result type the translator wants"
    )]
    pub(super) fn load(
        &mut self,
        pc: usize,
        space: Space,
        size: u8,
        at: (Value, i64),
        addr: &Addr,
        k: usize,
        out: Type,
    ) -> Value {
        let ty = if out == types::I64 { Self::mem_ty(size) } else { out };
        if space == Space::KParam {
            if let Base::Abs = addr.base {
                let off = addr.off as u64 + (k as u64) * size as u64;
                if addr.off >= 0 && off + size as u64 <= self.a.params_size as u64 {
                    let params = self.h().params;
                    // The parameter buffer is immutable during a launch, so these loads may move
                    // out of the thread loop.
                    let v = self.b.ins().load(
                        ty,
                        MemFlagsData::new().with_notrap().with_readonly().with_can_move(),
                        params,
                        off as i32,
                    );
                    return if size == 8 || out != types::I64 { v } else { self.zx(v) };
                }
            }
        }
        let ea = self.b.ins().iadd_imm_s(at.0, at.1);
        if !matches!(space, Space::Global | Space::Shared | Space::Generic) || !matches!(size, 1 | 2 | 4 | 8) {
            let z = self.iconst(0);
            let v = self.slow(pc, ea, z, z);
            return self.bits_as(v, out);
        }
        if self.prechecked[pc] {
            let p = self.proven_shared(ea);
            let v = self.b.ins().load(ty, flags(), p, 0);
            return if size == 8 || out != types::I64 { v } else { self.zx(v) };
        }
        let tmp = self.b.declare_var(out);
        let slow = self.b.create_block();
        let join = self.b.create_block();
        let root = self.root_of(addr);
        let p = self.fast_ptr(space, size, at, root, slow);
        let v = self.b.ins().load(ty, flags(), p, 0);
        let v = if size == 8 || out != types::I64 { v } else { self.zx(v) };
        self.b.def_var(tmp, v);
        self.b.ins().jump(join, &[]);
        let mark = self.block_mark();
        self.b.switch_to_block(slow);
        let z = self.iconst(0);
        let v = self.slow(pc, ea, z, z);
        let v = self.bits_as(v, out);
        self.b.def_var(tmp, v);
        self.b.ins().jump(join, &[]);
        self.cold_since(mark);
        self.b.set_cold_block(slow);
        self.b.switch_to_block(join);
        self.b.use_var(tmp)
    }

    /// `cp.async` of `size` bytes (4, 8 or 16) from global to shared memory. The common cases are
    /// done in place: the whole copy asked for (`src_size` at least `size`), both addresses
    /// aligned to `size`, and every 8-byte piece of both in bounds; or a zero fill (`src_size`
    /// zero: nothing is read, as in the interpreter, which checks no source then), the destination
    /// aligned and in bounds. Anything else (a partial copy, a misaligned or out-of-bounds address)
    /// takes the slow path, whose copy is the interpreter's, faults included. The pieces are all
    /// checked before any is written, so the slow path never finds half a copy done.
    pub(super) fn copy_async(
        &mut self,
        pc: usize,
        size: u8,
        src_size: R,
        dst: (Value, i64),
        src: (Value, i64),
        root: Option<u32>,
    ) {
        let dv = self.b.ins().iadd_imm_s(dst.0, dst.1);
        let sv = self.b.ins().iadd_imm_s(src.0, src.1);
        let n = self.get(src_size);
        let slow = self.b.create_block();
        let join = self.b.create_block();
        let check = self.b.create_block();
        let n = self.b.ins().band_imm_s(n, u32::MAX as i64);
        let whole = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, n, size as i64);
        let both = self.b.ins().bor(dv, sv);
        let low = self.b.ins().band_imm_s(both, size as i64 - 1);
        let aligned = self.b.ins().icmp_imm_s(IntCC::Equal, low, 0);
        let ok = self.b.ins().band(whole, aligned);
        let not_whole = self.b.create_block();
        self.b.ins().brif(ok, check, &[], not_whole, &[]);
        let piece = size.min(8);
        let ty = Self::mem_ty(piece);
        self.b.switch_to_block(not_whole);
        let empty = self.b.ins().icmp_imm_s(IntCC::Equal, n, 0);
        let low = self.b.ins().band_imm_s(dv, size as i64 - 1);
        let dst_aligned = self.b.ins().icmp_imm_s(IntCC::Equal, low, 0);
        let fill = self.b.ins().band(empty, dst_aligned);
        let zero_fill = self.b.create_block();
        self.b.ins().brif(fill, zero_fill, &[], slow, &[]);
        self.b.switch_to_block(zero_fill);
        let to: Vec<Value> = (0..size as i64)
            .step_by(piece as usize)
            .map(|off| self.fast_ptr(Space::Shared, piece, (dst.0, dst.1 + off), None, slow))
            .collect();
        let zero = if ty == types::I64 { self.iconst(0) } else { self.b.ins().iconst(ty, 0) };
        for p in to {
            self.b.ins().store(flags(), zero, p, 0);
        }
        self.b.ins().jump(join, &[]);
        self.b.switch_to_block(check);
        let mut pairs = Vec::new();
        for off in (0..size as i64).step_by(piece as usize) {
            let from = self.fast_ptr(Space::Global, piece, (src.0, src.1 + off), root, slow);
            let to = self.fast_ptr(Space::Shared, piece, (dst.0, dst.1 + off), None, slow);
            pairs.push((from, to));
        }
        let values: Vec<Value> = pairs.iter().map(|&(from, _)| self.b.ins().load(ty, flags(), from, 0)).collect();
        for (&(_, to), v) in pairs.iter().zip(values) {
            self.b.ins().store(flags(), v, to, 0);
        }
        self.b.ins().jump(join, &[]);
        let mark = self.block_mark();
        self.b.switch_to_block(slow);
        self.slow(pc, dv, sv, n);
        self.b.ins().jump(join, &[]);
        self.cold_since(mark);
        self.b.set_cold_block(slow);
        self.b.switch_to_block(join);
    }

    /// An I64 of a loaded value's bits as `out` (the slow path's result).
    fn bits_as(&mut self, v: Value, out: Type) -> Value {
        if out == types::F32 {
            self.f32_of(v)
        } else if out == types::F64 {
            self.f64_of(v)
        } else {
            v
        }
    }

    /// Stores the low `size` bytes of register `src`.
    pub(super) fn store(&mut self, pc: usize, space: Space, size: u8, at: (Value, i64), addr: &Addr, src: R) {
        // A float register of the access's size is stored from its float register as it is.
        let direct = matches!((self.a.classes[src as usize], size), (Class::F32, 4) | (Class::F64, 8))
            && self.a.consts[src as usize].is_none();
        let ea = self.b.ins().iadd_imm_s(at.0, at.1);
        if !matches!(space, Space::Global | Space::Shared | Space::Generic) || !matches!(size, 1 | 2 | 4 | 8) {
            let v = self.get(src);
            let v = self.mask(v, mask_bits(size as u32 * 8));
            let z = self.iconst(0);
            self.slow(pc, ea, v, z);
            return;
        }
        let (slow, join) =
            if self.prechecked[pc] { (None, None) } else { (Some(self.b.create_block()), Some(self.b.create_block())) };
        let p = match slow {
            Some(slow) => {
                let root = self.root_of(addr);
                self.fast_ptr(space, size, at, root, slow)
            }
            None => self.proven_shared(ea),
        };
        let x = if direct {
            self.raw(src)
        } else {
            let v = self.get(src);
            if size == 8 {
                v
            } else {
                self.b.ins().ireduce(Self::mem_ty(size), v)
            }
        };
        self.b.ins().store(flags(), x, p, 0);
        let (Some(slow), Some(join)) = (slow, join) else {
            return;
        };
        self.b.ins().jump(join, &[]);
        let mark = self.block_mark();
        self.b.switch_to_block(slow);
        let v = self.get(src);
        let v = self.mask(v, mask_bits(size as u32 * 8));
        let z = self.iconst(0);
        self.slow(pc, ea, v, z);
        self.b.ins().jump(join, &[]);
        self.cold_since(mark);
        self.b.set_cold_block(slow);
        self.b.switch_to_block(join);
    }

    /// Emits the straight-line code from `pc0` twice when one set of checks at its start can
    /// prove two or more of its shared-memory accesses in bounds ([`stretch_checks`]): once with
    /// those accesses unchecked, for when the checks pass, and once as usual (cold), which finds
    /// the failing access, in order, exactly as without this. The fast copy is one basic block
    /// of plain loads and arithmetic, which the code generator schedules and keeps in registers.
    /// Returns where the main loop goes on, or `None` to emit `pc0` as usual.
    pub(super) fn prechecked_stretch(&mut self, pc0: usize) -> Result<Option<usize>, JitError> {
        let plan = self.a.plan.as_ref().expect("code for groups");
        let blocks = &self.blocks;
        let (end, pcs, checks) =
            stretch_checks(self.a.f, plan, pc0, &|q| blocks[q].is_some(), &self.a.layouts, self.steps());
        if pcs.len() < 2 {
            return Ok(None);
        }
        self.flush_count();
        let mut all = None;
        for c in checks {
            let (base, lim) = if c.vector {
                let Repr::Vector(vars) = self.reprs[c.base as usize] else {
                    return Err(JitError::Translate {
                        what: "a vector check of a register not in vectors",
                        line: self.a.f.insts[pc0].line,
                    });
                };
                let p0 = self.b.use_var(vars[0]);
                let x = self.b.ins().extractlane(p0, 0);
                (self.zx(x), self.shared_lim_run.expect("shared limit for a run"))
            } else {
                (self.get(c.base), self.h().shared_lim[c.k])
            };
            let ends = if c.lo == c.hi { vec![c.lo] } else { vec![c.lo, c.hi] };
            for off in ends {
                let e = self.b.ins().iadd_imm_s(base, off);
                let ok = self.fits(e, c.k, lim);
                all = Some(match all {
                    None => ok,
                    Some(a) => self.b.ins().band(a, ok),
                });
            }
        }
        let fast = self.b.create_block();
        let checked = self.b.create_block();
        let join = self.b.create_block();
        self.b.ins().brif(all.expect("checks"), fast, &[], checked, &[]);
        for (blk, proven) in [(fast, true), (checked, false)] {
            let mark = self.block_mark();
            self.b.switch_to_block(blk);
            for &q in &pcs {
                self.prechecked[q] = proven;
            }
            self.unanchored = proven.then_some(0);
            for q in pc0..end {
                self.pending += self.a.width as i64;
                if !self.inst(q)? {
                    return Err(JitError::Translate {
                        what: "a control transfer in straight-line code",
                        line: self.a.f.insts[q].line,
                    });
                }
            }
            self.unanchored = None;
            self.flush_count();
            self.b.ins().jump(join, &[]);
            if !proven {
                self.cold_since(mark);
                self.b.set_cold_block(checked);
            }
        }
        for &q in &pcs {
            self.prechecked[q] = false;
        }
        self.b.switch_to_block(join);
        Ok(Some(end))
    }

    /// For a 4-byte access whose base varies by lane: a checked host pointer to the `4 * LANES`
    /// bytes the lanes touch when their addresses are consecutive; otherwise the code branches
    /// to a lane-by-lane copy of the access (see [`Tx::end_run`]). `None` when the address is
    /// one value for the group (such accesses are not vector accesses).
    pub(super) fn run_ptr(&mut self, pc: usize, space: Space, addr: &Addr) -> Result<Option<Value>, JitError> {
        let Base::Reg(base) = addr.base else { return Ok(None) };
        let step = self.steps()[base as usize];
        if self.prechecked[pc] {
            // Proven at the start of the stretch (`Tx::prechecked_stretch`): lanes consecutive
            // from lane 0, all in bounds.
            let Repr::Vector(vars) = self.reprs[base as usize] else {
                return Err(JitError::Translate {
                    what: "a proven vector access whose base is not in vectors",
                    line: self.a.f.insts[pc].line,
                });
            };
            let p0 = self.b.use_var(vars[0]);
            let x = self.b.ins().extractlane(p0, 0);
            let x = self.zx(x);
            let e0 = self.b.ins().iadd_imm_s(x, addr.off);
            return Ok(Some(self.proven_shared(e0)));
        }
        let (addrs, consecutive) = match self.reprs[base as usize] {
            Repr::One | Repr::Spill => return Ok(None),
            Repr::Vector(vars) => {
                let parts = vars.map(|var| self.b.use_var(var));
                // Known to step by 4 (the step analysis), or else lane l at 4 * l past lane 0 as
                // 32-bit differences, one compare per part. Either way an address that wraps
                // past 2^32 between lanes cannot pass the bounds check below (no shared window
                // or region is that close to 2^32 in a 32-bit address).
                let ok = if step == Step::affine(4, false) {
                    self.b.ins().iconst(types::I8, 1)
                } else {
                    let first = self.b.ins().extractlane(parts[0], 0);
                    let first = self.b.ins().splat(types::I32X4, first);
                    let mut all = None;
                    for (p, &v) in parts.iter().enumerate() {
                        let want = self.lane_consts(p, 4);
                        let dx = self.b.ins().isub(v, first);
                        let eq = self.b.ins().icmp(IntCC::Equal, dx, want);
                        all = Some(match all {
                            None => eq,
                            Some(a) => self.b.ins().band(a, eq),
                        });
                    }
                    self.b.ins().vall_true(all.expect("parts"))
                };
                (LaneAddrs::Parts(parts), ok)
            }
            Repr::PerLane(vars) => {
                let lanes: [Value; LANES] = vars.map(|v| self.b.use_var(v));
                let ok = match step {
                    Step::Affine { stride: 4, wrap: false } => self.b.ins().iconst(types::I8, 1),
                    Step::Affine { stride: 4, wrap: true } => {
                        // One wrap of the widened value would show between the first and last lane.
                        let span = self.b.ins().isub(lanes[LANES - 1], lanes[0]);
                        self.b.ins().icmp_imm_s(IntCC::Equal, span, 4 * (LANES as i64 - 1))
                    }
                    _ => {
                        let mut ok = None;
                        for (l, &x) in lanes.iter().enumerate().skip(1) {
                            let dx = self.b.ins().isub(x, lanes[0]);
                            let c = self.b.ins().icmp_imm_s(IntCC::Equal, dx, 4 * l as i64);
                            ok = Some(match ok {
                                None => c,
                                Some(o) => self.b.ins().band(o, c),
                            });
                        }
                        ok.expect("lanes")
                    }
                };
                (LaneAddrs::Lanes(lanes), ok)
            }
        };
        let base0 = self.lane_addr(addrs, 0);
        let e0 = self.b.ins().iadd_imm_s(base0, addr.off);
        let fallback = self.b.create_block();
        let join = self.b.create_block();
        self.run_blocks = Some((fallback, join, addrs));
        self.b.set_cold_block(fallback);
        let check = self.b.create_block();
        self.b.ins().brif(consecutive, check, &[], fallback, &[]);
        self.b.switch_to_block(check);
        let p = match space {
            Space::Shared => {
                let (shared, lim) = (self.h().shared, self.shared_lim_run.expect("shared limit for a run"));
                self.checked(shared, e0, 2, lim, fallback)
            }
            _ => {
                let root = self.root_of(addr).filter(|p| self.root_entries.contains_key(p));
                let (ptr, o, lim) = match root {
                    Some(p) => {
                        let e = &self.root_entries[&p];
                        let (ptr, start, lim_run) = (e.ptr, e.start, e.lim_run);
                        let o = self.b.ins().isub(e0, start);
                        (ptr, o, lim_run.expect("run limit of a root entry"))
                    }
                    None => {
                        let pure = MemFlagsData::trusted().with_readonly().with_can_move();
                        let (ptr, len) = self.region_entry(base0, pure);
                        let l4 = self.b.ins().ushr_imm_s(len, 2);
                        let lim = self.lim_run(l4);
                        let o = self.b.ins().band_imm_s(base0, REGION_OFF_MASK);
                        let o = self.b.ins().iadd_imm_s(o, addr.off);
                        (ptr, o, lim)
                    }
                };
                self.checked(ptr, o, 2, lim, fallback)
            }
        };
        Ok(Some(p))
    }

    /// Lane `l`'s base address as an I64. Extracted where it is needed: only lane 0 on the fast
    /// path, every lane in the cold lane-by-lane copy.
    fn lane_addr(&mut self, addrs: LaneAddrs, l: usize) -> Value {
        match addrs {
            LaneAddrs::Parts(parts) => {
                let x = self.b.ins().extractlane(parts[l / 4], (l % 4) as u8);
                self.zx(x)
            }
            LaneAddrs::Lanes(lanes) => lanes[l],
        }
    }

    /// Closes a vector access begun by [`Tx::run_ptr`]. Where the fast check fails, each lane
    /// in order takes the checked access of one-thread code's slow path (a call that keeps the
    /// kernel's registers, so the fast path pays nothing for it): the same values, the same
    /// fault at the same lane. `stored` holds the vectors a store wrote; a load's destination
    /// is rebuilt from the lanes.
    pub(super) fn end_run(&mut self, pc: usize, off: i64, stored: Option<Vecs>) -> Result<bool, JitError> {
        if self.prechecked[pc] {
            return Ok(true);
        }
        let (fallback, join, addrs) = self.run_blocks.take().expect("an open vector access");
        self.b.ins().jump(join, &[]);
        let mark = self.block_mark();
        self.b.switch_to_block(fallback);
        let z = self.iconst(0);
        let zero = self.splat_i32(0);
        let mut loaded = [zero; PARTS];
        for l in 0..LANES {
            self.lane = Some(l);
            let base = self.lane_addr(addrs, l);
            let ea = self.b.ins().iadd_imm_s(base, off);
            let (p, i) = (l / 4, (l % 4) as u8);
            match stored {
                Some(v) => {
                    let x = self.b.ins().extractlane(v[p], i);
                    let x = self.zx(x);
                    self.slow(pc, ea, x, z);
                }
                None => {
                    let x = self.slow(pc, ea, z, z);
                    let x = self.lo32(x);
                    loaded[p] = self.b.ins().insertlane(loaded[p], x, i);
                }
            }
        }
        self.lane = None;
        if let (None, Inst::Ld { d, .. }) = (stored, &self.a.f.insts[pc].inst) {
            let d = d[0];
            self.def_vec(d, loaded);
        }
        self.b.ins().jump(join, &[]);
        self.cold_since(mark);
        self.b.switch_to_block(join);
        Ok(true)
    }

    /// The count of 4-aligned positions where a run of `4 * LANES` bytes fits, from the count
    /// where 4 bytes fit.
    pub(super) fn lim_run(&mut self, l4: Value) -> Value {
        let k = LANES as i64 - 1;
        let big = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThan, l4, k);
        let less = self.b.ins().iadd_imm_s(l4, -k);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.ins().select(big, less, zero)
    }
}

/// One bounds check at the start of a stretch of straight-line code that covers several of its
/// shared-memory accesses: those through `base` (not written before them in the stretch) of
/// `1 << k` bytes at offsets from `lo` to `hi`, all the same modulo the size. A `vector` check
/// covers the `4 * LANES` bytes from lane 0's address, which holds for a base that steps by 4
/// from lane to lane (`Step::affine(4, false)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RangeCheck {
    base: R,
    vector: bool,
    k: usize,
    lo: i64,
    hi: i64,
}

/// The stretch of straight-line code from `pc0` (to the next label or control transfer) whose
/// shared-memory accesses one set of checks at its start can prove in bounds: its end, the
/// accesses it proves, and the checks.
fn stretch_checks(
    f: &Function,
    plan: &LanePlan,
    pc0: usize,
    leader: &dyn Fn(usize) -> bool,
    layouts: &[Layout],
    steps: &[Step],
) -> (usize, Vec<usize>, Vec<RangeCheck>) {
    let mut written = vec![false; f.nregs as usize];
    let mut pcs = Vec::new();
    let mut checks: Vec<RangeCheck> = Vec::new();
    let mut end = pc0;
    while end < f.insts.len() && (end == pc0 || !leader(end)) && !is_control(&f.insts[end].inst) && !plan.in_region[end]
    {
        end += 1;
    }
    for q in pc0..end {
        let ins = &f.insts[q];
        let access = match ins.inst {
            Inst::Ld { space: Space::Shared, size, n, addr, .. }
            | Inst::St { space: Space::Shared, size, n, addr, .. } => Some((size, n, addr)),
            _ => None,
        };
        if let Some((size, n, Addr { base: Base::Reg(r), off })) = access {
            let check = match layouts[r as usize] {
                _ if written[r as usize] || !matches!(size, 1 | 2 | 4 | 8) => None,
                Layout::One => {
                    let last = off.checked_add((n as i64 - 1) * size as i64);
                    last.map(|hi| RangeCheck { base: r, vector: false, k: size.trailing_zeros() as usize, lo: off, hi })
                }
                Layout::Vector if size == 4 && n == 1 && steps[r as usize] == Step::affine(4, false) => {
                    Some(RangeCheck { base: r, vector: true, k: 2, lo: off, hi: off })
                }
                _ => None,
            };
            if let Some(c) = check {
                let size = 1i64 << c.k;
                let same = checks.iter_mut().find(|o| {
                    (o.base, o.vector, o.k) == (c.base, c.vector, c.k) && o.lo.rem_euclid(size) == c.lo.rem_euclid(size)
                });
                match same {
                    Some(o) => {
                        o.lo = o.lo.min(c.lo);
                        o.hi = o.hi.max(c.hi);
                    }
                    None => checks.push(c),
                }
                pcs.push(q);
            }
        }
        for d in uses_defs(ins).1 {
            written[d as usize] = true;
        }
    }
    (end, pcs, checks)
}
