//! The asynchronous proxy's instructions as the interpreter runs them: `mbarrier` operations
//! and `cp.async.bulk` copies, each lane's in lane order, every copy complete when it issues
//! (`ptx::mbarrier` explains why that lets a wait be decided at once).
//!
//! A barrier is 8 bytes of the block's shared memory, read and written like any other access
//! (bounds and alignment checked; a generic address must fall in the shared window). A wait
//! that fails twice with no barrier changed in between stops the block with
//! [`Stop::Stuck`]: in lockstep, the threads that would complete its phase are the ones waiting.

use super::worker::*;
use crate::ptx::ir::*;
use crate::ptx::mbarrier;
use crate::ptx::memory::Fault;

impl<const MW: usize> Worker<'_, MW> {
    /// Reads the barrier at `a` (in `space`) for lane `l`, applies `op` with operand `b`, writes
    /// it back: gives what the instruction returns.
    fn mbar_one(&mut self, op: MbarOp, space: Space, a: u64, b: u64, l: usize, line: u32) -> Res<u64> {
        let fail = |fault: Fault, space: Space, write: bool| Stop::Mem {
            lane: l,
            addr: a,
            size: 8,
            space,
            fault,
            write,
            line,
        };
        let (sp, off) = self.resolve(space, a);
        if sp != Space::Shared {
            return Err(fail(Fault::OutOfBounds, Space::Shared, false));
        }
        let w = self.load(Space::Shared, off, 8, l).map_err(|(f, s)| fail(f, s, false))?;
        let (new, out) = mbarrier::apply(op, w, b);
        if new != w {
            self.store(Space::Shared, off, 8, new, l).map_err(|(f, s)| fail(f, s, true))?;
        }
        if mbarrier::changes(op) {
            self.mbar_changes += 1;
        }
        Ok(out)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the instruction's fields and where it runs (register and lane bases, active lanes, line)"
    )]
    pub(super) fn mbar(
        &mut self,
        op: MbarOp,
        space: Space,
        addr: &Addr,
        d: Option<R>,
        b: R,
        rb: usize,
        lb: usize,
        em: Mask<MW>,
        line: u32,
    ) -> Res<()> {
        let n = self.n;
        let mut failed = false;
        em.try_each(self.nwords, |l| {
            let a = self.address(addr, rb, lb, l);
            let bv = self.b.regs[(rb + b as usize) * n + l];
            let out = self.mbar_one(op, space, a, bv, l, line)?;
            if let Some(d) = d {
                self.b.regs[(rb + d as usize) * n + l] = out;
            }
            failed |= matches!(op, MbarOp::Wait { .. }) && out == 0;
            Ok(())
        })?;
        if failed {
            if self.mbar_failed == Some((line, self.mbar_changes)) {
                return Err(Stop::Stuck { line });
            }
            self.mbar_failed = Some((line, self.mbar_changes));
        }
        Ok(())
    }

    /// One lane's `cp.async.bulk` of `size` bytes (a multiple of 16, both addresses 16-byte
    /// aligned), done at once; into shared memory it then completes `size` bytes on its barrier.
    #[expect(
        clippy::too_many_arguments,
        reason = "the instruction's fields and where one lane runs it (register and lane bases, lane, line)"
    )]
    pub(super) fn cp_bulk(
        &mut self,
        to_shared: bool,
        dst: &Addr,
        src: &Addr,
        src_space: Space,
        size: R,
        mbar: Option<&Addr>,
        rb: usize,
        lb: usize,
        l: usize,
        line: u32,
    ) -> Res<()> {
        let n = self.n;
        let size = self.b.regs[(rb + size as usize) * n + l] as u32 as u64;
        let da = self.address(dst, rb, lb, l);
        let sa = self.address(src, rb, lb, l);
        let dst_space = if to_shared { Space::Shared } else { Space::Global };
        let fail = |addr: u64, space: Space, fault: Fault, write: bool| Stop::Mem {
            lane: l,
            addr,
            size: size as u32,
            space,
            fault,
            write,
            line,
        };
        if !size.is_multiple_of(16) || !sa.is_multiple_of(16) {
            return Err(fail(sa, src_space, Fault::Misaligned, false));
        }
        if !da.is_multiple_of(16) {
            return Err(fail(da, dst_space, Fault::Misaligned, true));
        }
        // Source and destination may be the same shared memory: read all of it first.
        let mut buf = Vec::with_capacity(size as usize / 8);
        for off in (0..size).step_by(8) {
            let v = self.load(src_space, sa.wrapping_add(off), 8, l).map_err(|(f, sp)| fail(sa, sp, f, false))?;
            buf.push(v);
        }
        for (i, v) in buf.into_iter().enumerate() {
            let at = da.wrapping_add(8 * i as u64);
            self.store(dst_space, at, 8, v, l).map_err(|(f, sp)| fail(da, sp, f, true))?;
        }
        if let Some(m) = mbar {
            let a = self.address(m, rb, lb, l);
            self.mbar_one(MbarOp::CompleteTx, Space::Shared, a, size, l, line)?;
        }
        Ok(())
    }
}
