//! Lowering the instructions of the asynchronous proxy and their barriers: `mbarrier`,
//! `cp.async.bulk` (not the tensor form), `cp.async.mbarrier.arrive`, and the warp-level
//! `elect.sync`. Their semantics are `ptx::mbarrier`'s and the executor's; here the operand forms
//! the ISA allows are decoded and everything else is refused with its reason.

use super::*;

impl FnLower<'_> {
    /// The state space of a barrier or bulk-copy operand: shared memory of this block
    /// (`.shared`, `.shared::cta`, or `.shared::cluster`, which with clusters of one block is the
    /// same), or a generic address.
    fn shared_or_generic(&self, o: &Opc) -> Res<Option<Space>> {
        match self.space_of(o) {
            None => Ok(None),
            Some(Space::Shared) => Ok(Some(Space::Shared)),
            Some(_) => self.err(format!("`{}`: a barrier lives in shared memory", o.full)),
        }
    }

    /// `mbarrier.{init,arrive,arrive_drop,expect_tx,complete_tx,test_wait,try_wait,inval,
    /// pending_count}` with any `.sem`, `.scope` and shared-space modifiers.
    pub(super) fn mbarrier(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        if o.types != [Ty::B64] {
            return self.unsupported(o.full);
        }
        if o.has("pending_count") {
            self.want(ops, 2, o.full)?;
            let d = self.dst(&ops[0])?;
            let a = self.src(&ops[1], Ty::B64)?;
            self.push(Inst::Un { op: UnOp::Extract(0, crate::ptx::mbarrier::PENDING_MASK), d, a });
            return Ok(());
        }
        let space = self.shared_or_generic(o)?;
        let drop = o.has("arrive_drop");
        let wait = o.has("test_wait") || o.has("try_wait");
        let (op, dest) = if o.has("init") {
            (MbarOp::Init, false)
        } else if o.has("arrive") || drop {
            (MbarOp::Arrive { drop, expect_tx: o.has("expect_tx") }, true)
        } else if o.has("expect_tx") {
            (MbarOp::ExpectTx, false)
        } else if o.has("complete_tx") {
            (MbarOp::CompleteTx, false)
        } else if wait {
            (MbarOp::Wait { parity: o.has("parity"), blocking: o.has("try_wait") }, true)
        } else if o.has("inval") {
            (MbarOp::Inval, false)
        } else {
            return self.unsupported(o.full);
        };
        let (d, rest) = if dest { (Some(self.dst(&ops[0])?), &ops[1..]) } else { (None, ops) };
        let Some(at) = rest.first() else {
            return self.err(format!("`{}` needs the barrier's address", o.full));
        };
        let (space, addr) = self.addr(o, at, space)?;
        let rest = &rest[1..];
        // Operand `b`: the count, byte count, state or parity; arrivals default to one.
        let b = match (op, rest.len()) {
            (MbarOp::Init | MbarOp::ExpectTx | MbarOp::CompleteTx, 1) => self.src(&rest[0], Ty::U32)?,
            (MbarOp::Arrive { expect_tx: true, .. }, 1) => self.src(&rest[0], Ty::U32)?,
            (MbarOp::Arrive { expect_tx: false, .. }, 0) => self.konst(1),
            (MbarOp::Arrive { expect_tx: false, .. }, 1) => self.src(&rest[0], Ty::U32)?,
            // A suspend-time hint may follow a `try_wait`'s state or parity.
            (MbarOp::Wait { parity, blocking }, n) if n == 1 || (blocking && n == 2) => {
                self.src(&rest[0], if parity { Ty::U32 } else { Ty::B64 })?
            }
            (MbarOp::Inval, 0) => self.konst(0),
            _ => return self.err(format!("`{}`: unexpected operands", o.full)),
        };
        self.push(Inst::Mbar { op, space, addr, d, b });
        Ok(())
    }

    /// `cp.async.mbarrier.arrive{.noinc}{.shared{::cta}}.b64 [addr]`.
    pub(super) fn cp_async_arrive(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 1, o.full)?;
        let space = self.shared_or_generic(o)?;
        let (space, addr) = self.addr(o, &ops[0], space)?;
        let b = self.konst(0);
        self.push(Inst::Mbar { op: MbarOp::CpAsyncArrive { noinc: o.has("noinc") }, space, addr, d: None, b });
        Ok(())
    }

    /// `cp.async.bulk` between global and shared memory (both directions), its bulk groups and
    /// its L2 prefetch. The copies complete when they issue, so the groups are nothing to wait
    /// for; a copy into shared memory completes its bytes on its barrier at once.
    pub(super) fn cp_bulk(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        if o.has("commit_group") || o.has("wait_group") || o.mods.iter().any(|m| m.starts_with("prefetch")) {
            self.push(Inst::Nop);
            return Ok(());
        }
        if o.mods.iter().any(|m| m.starts_with("multicast")) {
            return self
                .refused(o.full, "multicast copies reach other blocks of a cluster, which the CPU does not model");
        }
        // The destination space comes first: `.shared::cluster.global` or `.global.shared::cta`.
        let spaces: Vec<&str> = o
            .mods
            .iter()
            .map(|m| m.split("::").next().unwrap_or(m))
            .filter(|m| matches!(*m, "global" | "shared"))
            .collect();
        let to_shared = match spaces[..] {
            ["shared", "global"] => true,
            ["global", "shared"] => false,
            ["shared", "shared"] => true,
            _ => return self.unsupported(o.full),
        };
        let src_space = if spaces[1] == "shared" { Space::Shared } else { Space::Global };
        let dst_space = if to_shared { Space::Shared } else { Space::Global };
        let with_mbar = o.mods.iter().any(|m| m.starts_with("mbarrier::complete_tx"));
        if to_shared != with_mbar {
            return self.unsupported(o.full);
        }
        if !to_shared && !o.has("bulk_group") {
            return self.unsupported(o.full);
        }
        let hint = o.mods.iter().any(|m| m.ends_with("cache_hint")) as usize;
        let want = 3 + with_mbar as usize + hint;
        if ops.len() != want {
            return self.err(format!("`{}` takes {want} operands, found {}", o.full, ops.len()));
        }
        let (_, dst) = self.addr(o, &ops[0], Some(dst_space))?;
        let (_, src) = self.addr(o, &ops[1], Some(src_space))?;
        let size = self.src(&ops[2], Ty::U32)?;
        let mbar = if with_mbar { Some(self.addr(o, &ops[3], Some(Space::Shared))?.1) } else { None };
        self.push(Inst::CpBulk { to_shared, dst, src, src_space, size, mbar });
        Ok(())
    }

    /// `elect.sync d|p, membermask` (`d` may be the sink `_`).
    pub(super) fn elect(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 2, o.full)?;
        if !o.has("sync") {
            return self.unsupported(o.full);
        }
        let Operand::Pair(d, p) = &ops[0] else {
            return self.err(format!("`{}` writes a pair `d|p`", o.full));
        };
        let d = self.dst(&Operand::Name(d.clone()))?;
        let p = self.dst(&Operand::Name(p.clone()))?;
        let mask = self.src(&ops[1], Ty::B32)?;
        self.push(Inst::Elect { d, p, mask });
        Ok(())
    }
}
