//! Checked memory accesses of one lane: loads, stores and atomics in every state space (generic
//! addresses resolved by window, global addresses by region, shared and local memory by the
//! block's buffers), the element types stores note, and the vector alignment rule. The
//! interpreter's `ld`/`st`/`atom` and native code's slow path ([`ThreadAccess`]) both come here,
//! so a fault is found and named the same way by every engine.

use crate::ptx::ir::*;
use crate::ptx::memory::{Fault, Region};
use crate::ptx::ops::{atom_new, sx};
use crate::ptx::typemap;

use super::worker::*;

#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
impl<const MW: usize> ThreadAccess for Worker<'_, MW> {
    fn access(
        &mut self,
        inst: &Inst,
        addr: u64,
        b: u64,
        c: u64,
        l: usize,
    ) -> Option<(Result<u64, (Fault, Space)>, u8, bool)> {
        Some(match *inst {
            Inst::Ld { space, size, .. } => (self.load(space, addr, size, l), size, false),
            Inst::St { space, size, .. } => {
                (self.store(space, addr, size, b & mask_bits(size as u32 * 8), l).map(|_| 0), size, true)
            }
            Inst::Atom { space, op, size, f, .. } => (self.atomic(space, addr, op, size, f, b, c, l), size, true),
            _ => return None,
        })
    }

    fn misaligned(&self, ins: &Instr, addr: u64, l: usize) -> Option<Stop> {
        let (space, size, n, write) = match ins.inst {
            Inst::Ld { space, size, n, .. } => (space, size, n, false),
            Inst::St { space, size, n, .. } => (space, size, n, true),
            _ => return None,
        };
        misaligned_vector(space, n, size, addr).map(|whole| self.vector_fault(space, addr, whole, write, l, ins.line))
    }

    fn cp_async(&mut self, ins: &Instr, dst: u64, src: u64, src_size: u64, l: usize) -> Res<()> {
        match ins.inst {
            Inst::CpAsync { size, .. } => self.cp_async_at(size, dst, src, src_size, l, ins.line),
            _ => Ok(()),
        }
    }
}

impl<'a, const MW: usize> Worker<'a, MW> {
    pub(super) fn address(&self, addr: &Addr, rb: usize, lb: usize, l: usize) -> u64 {
        match addr.base {
            Base::Reg(r) => self.b.regs[(rb + r as usize) * self.n + l].wrapping_add(addr.off as u64),
            Base::Abs => addr.off as u64,
            Base::Frame => (lb as u64).wrapping_add(addr.off as u64),
        }
    }

    /// The region and offset a global (or module variable) address falls in.
    #[inline]
    pub(super) fn global(&self, a: u64) -> Option<(&'a Region, u64)> {
        global_of(self.ctx, a)
    }

    /// The fault of thread `l`'s vector access at `addr` that is not aligned to its `whole` size.
    pub(super) fn vector_fault(&self, space: Space, addr: u64, whole: u32, write: bool, l: usize, line: u32) -> Stop {
        Stop::Mem {
            lane: l,
            addr,
            size: whole,
            space: self.resolve(space, addr).0,
            fault: Fault::Misaligned,
            write,
            line,
        }
    }

    /// Resolves a generic address into its state space and the address within it.
    #[inline]
    pub(super) fn resolve(&self, space: Space, a: u64) -> (Space, u64) {
        if space != Space::Generic {
            return (space, a);
        }
        match a & WINDOW_MASK {
            SHARED_BASE => (Space::Shared, a - SHARED_BASE),
            LOCAL_BASE => (Space::Local, a - LOCAL_BASE),
            _ => (Space::Global, a),
        }
    }

    #[inline]
    pub(super) fn load(&self, space: Space, a: u64, size: u8, l: usize) -> Result<u64, (Fault, Space)> {
        let (sp, a) = self.resolve(space, a);
        let sz = size as u64;
        match sp {
            Space::Global | Space::Const => {
                let (r, off) = self.global(a).ok_or((Fault::OutOfBounds, sp))?;
                r.check(off, sz).map_err(|f| (f, sp))?;
                Ok(r.load(off, size))
            }
            Space::Shared => {
                if a.checked_add(sz).is_none_or(|e| e > self.b.shared.len() as u64) {
                    return Err((Fault::OutOfBounds, sp));
                }
                if a & (sz - 1) != 0 {
                    return Err((Fault::Misaligned, sp));
                }
                Ok(read_le(&self.b.shared[a as usize..a as usize + size as usize]))
            }
            Space::Local => {
                let stride = self.ctx.stack as u64;
                if a.checked_add(sz).is_none_or(|e| e > stride) {
                    return Err((Fault::OutOfBounds, sp));
                }
                let o = l * stride as usize + a as usize;
                Ok(read_le(&self.b.local[o..o + size as usize]))
            }
            Space::KParam => {
                let p = self.ctx.params;
                if a.checked_add(sz).is_none_or(|e| e > p.len() as u64) {
                    return Err((Fault::OutOfBounds, sp));
                }
                Ok(read_le(&p[a as usize..a as usize + size as usize]))
            }
            Space::Generic => Err((Fault::OutOfBounds, sp)),
        }
    }

    /// The `typemap` code of the element with value register `src` of the `st` at `line` of the
    /// function running now.
    pub(super) fn store_code(&self, line: u32, src: R) -> u8 {
        let f = self.b.frames.last().map_or(self.ctx.entry, |f| f.func);
        self.ctx.module.funcs[f as usize].store_type(line, src)
    }

    /// Notes the type of a store that succeeded, where it went to global memory.
    pub(super) fn note_global(&self, space: Space, a: u64, size: u8, code: u8) {
        let (sp, a) = self.resolve(space, a);
        if sp == Space::Global {
            if let Some((r, off)) = self.global(a) {
                r.note_type(off, size as u64, || code);
            }
        }
    }

    #[inline]
    pub(super) fn store(&mut self, space: Space, a: u64, size: u8, v: u64, l: usize) -> Result<(), (Fault, Space)> {
        let (sp, a) = self.resolve(space, a);
        let sz = size as u64;
        match sp {
            Space::Global | Space::Const => {
                let (r, off) = self.global(a).ok_or((Fault::OutOfBounds, sp))?;
                r.check(off, sz).map_err(|f| (f, sp))?;
                r.store(off, size, v).map_err(|f| (f, sp))
            }
            Space::Shared => {
                if a.checked_add(sz).is_none_or(|e| e > self.b.shared.len() as u64) {
                    return Err((Fault::OutOfBounds, sp));
                }
                if a & (sz - 1) != 0 {
                    return Err((Fault::Misaligned, sp));
                }
                write_le(&mut self.b.shared[a as usize..a as usize + size as usize], v);
                Ok(())
            }
            Space::Local => {
                let stride = self.ctx.stack as u64;
                if a.checked_add(sz).is_none_or(|e| e > stride) {
                    return Err((Fault::OutOfBounds, sp));
                }
                let o = l * stride as usize + a as usize;
                write_le(&mut self.b.local[o..o + size as usize], v);
                Ok(())
            }
            Space::KParam | Space::Generic => Err((Fault::ReadOnly, sp)),
        }
    }

    #[expect(clippy::too_many_arguments, reason = "an atomic's fields and its lane, plain values on the per-lane path")]
    pub(super) fn atomic(
        &mut self,
        space: Space,
        a: u64,
        op: AtomOp,
        size: u8,
        f: Option<F>,
        b: u64,
        c: u64,
        l: usize,
    ) -> Result<u64, (Fault, Space)> {
        let (sp, a) = self.resolve(space, a);
        let sz = size as u64;
        let apply = |old: u64| atom_new(op, size, f, old, b, c);
        match sp {
            Space::Global => {
                let (r, off) = self.global(a).ok_or((Fault::OutOfBounds, sp))?;
                r.check(off, sz).map_err(|f| (f, sp))?;
                if self.ctx.types {
                    r.note_type(off, sz, || typemap::of_atomic(f, size));
                }
                if size == 4 && op == AtomOp::Add {
                    return r.fetch_add32(off, b as u32).map(|v| v as u64).map_err(|f| (f, sp));
                }
                r.rmw(off, size, apply).map_err(|f| (f, sp))
            }
            Space::Shared | Space::Local => {
                let (buf, o, lim) = if sp == Space::Shared {
                    let lim = self.b.shared.len() as u64;
                    (&mut self.b.shared, a, lim)
                } else {
                    let stride = self.ctx.stack as u64;
                    let o = l as u64 * stride + a;
                    if a.checked_add(sz).is_none_or(|e| e > stride) {
                        return Err((Fault::OutOfBounds, sp));
                    }
                    (&mut self.b.local, o, u64::MAX)
                };
                if a.checked_add(sz).is_none_or(|e| e > lim) {
                    return Err((Fault::OutOfBounds, sp));
                }
                if a & (sz - 1) != 0 {
                    return Err((Fault::Misaligned, sp));
                }
                let s = &mut buf[o as usize..o as usize + size as usize];
                let old = read_le(s);
                write_le(s, apply(old));
                Ok(old)
            }
            _ => Err((Fault::ReadOnly, sp)),
        }
    }

    /// Scalar loads from global or shared memory: the common case, without the generic dispatch.
    #[expect(
        clippy::too_many_arguments,
        reason = "the instruction's fields and where it runs (register and lane bases, active lanes, line), on the interpreter's hot path"
    )]
    #[inline]
    pub(super) fn ld1(
        &mut self,
        space: Space,
        size: u8,
        sext: bool,
        dmask: u64,
        d: usize,
        addr: &Addr,
        rb: usize,
        lb: usize,
        em: Mask<MW>,
        line: u32,
    ) -> Res<()> {
        let n = self.n;
        let ctx = self.ctx;
        let sbits = size as u32 * 8;
        let sz = size as u64;
        let (base, fixed) = lane_base(addr, rb, lb, n);
        let off = addr.off as u64;
        let regs = &mut self.b.regs;
        let fail = |lane: usize, addr: u64, fault: Fault| Stop::Mem {
            lane,
            addr,
            size: sz as u32,
            space,
            fault,
            write: false,
            line,
        };
        let ext = |v: u64| {
            if sext && sbits < 64 {
                sx(v, sbits) as u64 & dmask
            } else {
                v & dmask
            }
        };
        if space == Space::Shared {
            let sh = &self.b.shared;
            if let (Some(o), 4, true) = (base, size, em.same(&self.all, self.nwords)) {
                // The matmul-style inner loop: every lane loads a word of shared memory.
                let lim = sh.len() as u64;
                for l in 0..n {
                    let a = regs[o + l].wrapping_add(off);
                    if a >= lim.saturating_sub(3) || a & 3 != 0 {
                        let f = if a & 3 != 0 && a < lim { Fault::Misaligned } else { Fault::OutOfBounds };
                        return Err(fail(l, a, f));
                    }
                    let i = a as usize;
                    let w: [u8; 4] = sh[i..i + 4].try_into().expect("4 bytes");
                    regs[d + l] = ext(u32::from_le_bytes(w) as u64);
                }
                return Ok(());
            }
            return em.try_each(self.nwords, |l| {
                let a = match base {
                    Some(o) => regs[o + l].wrapping_add(off),
                    None => fixed,
                };
                let i = shared_index(sh.len(), a, sz).map_err(|f| fail(l, a, f))?;
                regs[d + l] = ext(read_le(&sh[i..i + size as usize]));
                Ok(())
            });
        }
        let mut cache = RegionCache::default();
        em.try_each(self.nwords, |l| {
            let a = match base {
                Some(o) => regs[o + l].wrapping_add(off),
                None => fixed,
            };
            let (r, o) = cache.get(ctx, a, sz).map_err(|f| fail(l, a, f))?;
            regs[d + l] = ext(r.load(o, size));
            Ok(())
        })
    }

    /// Scalar stores to global or shared memory; `code` is the store's `typemap` code, used where
    /// types are recorded.
    #[expect(
        clippy::too_many_arguments,
        reason = "the instruction's fields and where it runs (register and lane bases, active lanes, line), on the interpreter's hot path"
    )]
    #[inline]
    pub(super) fn st1(
        &mut self,
        space: Space,
        size: u8,
        src: usize,
        code: u8,
        addr: &Addr,
        rb: usize,
        lb: usize,
        em: Mask<MW>,
        line: u32,
    ) -> Res<()> {
        let n = self.n;
        let ctx = self.ctx;
        let sz = size as u64;
        let (base, fixed) = lane_base(addr, rb, lb, n);
        let off = addr.off as u64;
        let regs = &self.b.regs;
        let fail = |lane: usize, addr: u64, fault: Fault| Stop::Mem {
            lane,
            addr,
            size: sz as u32,
            space,
            fault,
            write: true,
            line,
        };
        if space == Space::Shared {
            let sh = &mut self.b.shared;
            return em.try_each(self.nwords, |l| {
                let a = match base {
                    Some(o) => regs[o + l].wrapping_add(off),
                    None => fixed,
                };
                let i = shared_index(sh.len(), a, sz).map_err(|f| fail(l, a, f))?;
                write_le(&mut sh[i..i + size as usize], regs[src + l]);
                Ok(())
            });
        }
        let mut cache = RegionCache::default();
        em.try_each(self.nwords, |l| {
            let a = match base {
                Some(o) => regs[o + l].wrapping_add(off),
                None => fixed,
            };
            let (r, o) = cache.get(ctx, a, sz).map_err(|f| fail(l, a, f))?;
            let v = regs[src + l] & mask_bits(size as u32 * 8);
            r.store(o, size, v).map_err(|f| fail(l, a, f))?;
            if ctx.types {
                r.note_type(o, sz, || typemap::with_value(code, size, v, |p| ctx.mem.is_address(p)));
            }
            Ok(())
        })
    }
}

/// A vector access (`.v2`, `.v4`) must be aligned to its whole size, as on a GPU, where the
/// elements' own checks see only the element size: the whole size when `addr` is not so aligned.
/// The parameter buffer is laid out by the declaration, so its vectors are left to that.
pub(super) fn misaligned_vector(space: Space, n: u8, size: u8, addr: u64) -> Option<u32> {
    let whole = n as u64 * size as u64;
    (n > 1 && space != Space::KParam && !addr.is_multiple_of(whole)).then_some(whole as u32)
}

#[inline]
pub(super) fn global_of<'a>(ctx: &Ctx<'a>, a: u64) -> Option<(&'a Region, u64)> {
    if a & WINDOW_MASK == MODVAR_BASE {
        let i = ((a - MODVAR_BASE) >> REGION_SHIFT) as usize;
        let r = ctx.module.vars.get(i)?;
        Some((r, a & ((1 << REGION_SHIFT) - 1)))
    } else {
        ctx.mem.region(a)
    }
}

/// The region of the previous lane's access: neighbouring lanes nearly always hit the same one.
#[derive(Default)]
pub(super) struct RegionCache<'a> {
    pub(super) key: Option<u64>,
    pub(super) cur: Option<&'a Region>,
}

impl<'a> RegionCache<'a> {
    #[inline]
    fn get(&mut self, ctx: &Ctx<'a>, a: u64, size: u64) -> Result<(&'a Region, u64), Fault> {
        let k = a >> REGION_SHIFT;
        if self.key != Some(k) {
            self.cur = global_of(ctx, a).map(|(r, _)| r);
            self.key = Some(k);
        }
        let r = self.cur.ok_or(Fault::OutOfBounds)?;
        // Placed regions' storage may start after the window's start (memory.rs).
        let o = (a & ((1 << REGION_SHIFT) - 1)).checked_sub(r.origin()).ok_or(Fault::OutOfBounds)?;
        r.check(o, size)?;
        Ok((r, o))
    }
}

/// Bounds and alignment of a shared-memory access; the byte index on success.
#[inline]
pub(super) fn shared_index(len: usize, a: u64, size: u64) -> Result<usize, Fault> {
    if a.checked_add(size).is_none_or(|e| e > len as u64) {
        return Err(Fault::OutOfBounds);
    }
    if a & (size - 1) != 0 {
        return Err(Fault::Misaligned);
    }
    Ok(a as usize)
}

/// The per-lane base register offset of an address, or its lane-independent value.
#[inline]
pub(super) fn lane_base(addr: &Addr, rb: usize, lb: usize, n: usize) -> (Option<usize>, u64) {
    match addr.base {
        Base::Reg(r) => (Some((rb + r as usize) * n), 0),
        Base::Abs => (None, addr.off as u64),
        Base::Frame => (None, (lb as u64).wrapping_add(addr.off as u64)),
    }
}

#[inline(always)]
pub(super) fn read_le(s: &[u8]) -> u64 {
    match s.len() {
        4 => u32::from_le_bytes(s.try_into().expect("4 bytes")) as u64,
        8 => u64::from_le_bytes(s.try_into().expect("8 bytes")),
        2 => u16::from_le_bytes(s.try_into().expect("2 bytes")) as u64,
        _ => s[0] as u64,
    }
}

#[inline(always)]
pub(super) fn write_le(s: &mut [u8], v: u64) {
    match s.len() {
        4 => s.copy_from_slice(&(v as u32).to_le_bytes()),
        8 => s.copy_from_slice(&v.to_le_bytes()),
        2 => s.copy_from_slice(&(v as u16).to_le_bytes()),
        _ => s[0] = v as u8,
    }
}
