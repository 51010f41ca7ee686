//! Memory instructions: addresses resolved in their state space, `ld`, `st`, `atom`/`red`, and the
//! `cp.async` copies and their groups.

use super::*;

/// Why the Tensor Memory Accelerator's instructions are refused.
pub(super) const TMA_REASON: &str = "TMA tensor copies (cp.async.bulk.tensor) are not supported on the CPU";

/// Whether an opcode belongs to the Tensor Memory Accelerator: a copy, reduction or prefetch through
/// a `CUtensorMap` (`cp.async.bulk.tensor`, `cp.reduce.async.bulk.tensor`,
/// `cp.async.bulk.prefetch.tensor`), or work on the descriptor itself (`prefetch.tensormap`,
/// `tensormap.replace`).
pub(super) fn is_tma(opcode: &str) -> bool {
    let mut parts = opcode.split('.');
    let base = parts.next().unwrap_or("");
    let rest: Vec<&str> = parts.collect();
    match base {
        "cp" => rest.contains(&"bulk") && rest.contains(&"tensor"),
        "prefetch" | "prefetchu" => rest.iter().any(|m| m.starts_with("tensormap")),
        "tensormap" => true,
        _ => false,
    }
}

impl FnLower<'_> {
    /// `cp.async` and its groups. The copies complete when they issue, which the ISA allows (they
    /// must complete by the `cp.async.wait_group`/`wait_all` that waits for them), so waiting is
    /// nothing.
    pub(super) fn cp(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        if !o.has("async") {
            return self.unsupported(o.full);
        }
        if o.has("tensor") {
            return self.refused(o.full, TMA_REASON);
        }
        if o.has("reduce") {
            return self.unsupported(o.full);
        }
        if o.has("bulk") {
            return self.cp_bulk(o, ops);
        }
        if o.has("mbarrier") && o.has("arrive") {
            return self.cp_async_arrive(o, ops);
        }
        if o.has("commit_group") || o.has("wait_group") || o.has("wait_all") {
            self.push(Inst::Nop);
            return Ok(());
        }
        if !(o.has("ca") || o.has("cg")) || self.space_of(o) != Some(Space::Shared) || !o.has("global") {
            return self.unsupported(o.full);
        }
        let hint = o.mods.iter().any(|m| m.ends_with("cache_hint"));
        let rest = ops.len().checked_sub(3 + hint as usize).filter(|r| *r <= 1);
        let Some(rest) = rest else {
            return self.err(format!("`{}` takes 3 or 4 operands and its cache policy", o.full));
        };
        let size = match &ops[2] {
            Operand::Lit(Lit::Int(v @ (4 | 8 | 16))) => *v as u8,
            _ => return self.err(format!("`{}`: the copy size must be 4, 8 or 16", o.full)),
        };
        if o.has("cg") && size != 16 {
            return self.unsupported(o.full);
        }
        let (_, dst) = self.addr(o, &ops[0], Some(Space::Shared))?;
        let (_, src) = self.addr(o, &ops[1], Some(Space::Global))?;
        let full = self.konst(size as u64);
        let src_size = if rest == 0 {
            full
        } else {
            let pred = match &ops[3] {
                Operand::Not(_) => true,
                Operand::Name(n) => matches!(self.lookup(n), Some(Sym::Reg(r)) if self.bits_of(r) == 1),
                _ => false,
            };
            if pred {
                // `ignore-src`: when true nothing is read and the whole copy is zeros.
                let (p, neg) = self.pred_src(&ops[3])?;
                let t = self.new_reg(32);
                let zero = self.konst(0);
                let (x, y) = if neg { (full, zero) } else { (zero, full) };
                self.push(Inst::Tern { op: TernOp::Selp, d: t, a: x, b: y, c: p });
                t
            } else {
                self.src(&ops[3], Ty::U32)?
            }
        };
        self.push(Inst::CpAsync { size, src_size, dst, src });
        Ok(())
    }
}

impl FnLower<'_> {
    pub(super) fn space_of(&self, o: &Opc) -> Option<Space> {
        for m in &o.mods {
            let m = m.split("::").next().unwrap_or(m);
            match m {
                "global" => return Some(Space::Global),
                "shared" => return Some(Space::Shared),
                "local" => return Some(Space::Local),
                "const" => return Some(Space::Const),
                "param" => return Some(Space::KParam),
                _ => {}
            }
        }
        None
    }

    /// The address operand and the state space it is resolved in.
    pub(super) fn addr(&mut self, o: &Opc, op: &Operand, space: Option<Space>) -> Res<(Space, Addr)> {
        let Operand::Addr { base, off } = op else {
            return self.err(format!("`{}` needs an address in brackets", o.full));
        };
        let off = *off;
        let Some(name) = base else {
            return Ok((space.unwrap_or(Space::Generic), Addr { base: Base::Abs, off }));
        };
        let sym = if sreg_of(name).is_some() { None } else { self.lookup(name) };
        let generic = space.is_none();
        Ok(match sym {
            Some(Sym::Reg(r)) => {
                let sp = match space {
                    Some(Space::KParam) if !self.is_entry => Space::Local,
                    Some(s) => s,
                    None => Space::Generic,
                };
                (sp, Addr { base: Base::Reg(self.narrow(r, name)?), off })
            }
            Some(Sym::KParam(p)) => {
                if !matches!(space, Some(Space::KParam)) {
                    return self.err(format!("kernel parameter `{name}` accessed outside `.param`"));
                }
                (Space::KParam, Addr { base: Base::Abs, off: p as i64 + off })
            }
            Some(Sym::Frame(p)) => (Space::Local, Addr { base: Base::Frame, off: p as i64 + off }),
            Some(Sym::Shared(id)) => {
                let a = self.shared_offset(id)? as i64 + off;
                if generic {
                    (Space::Generic, Addr { base: Base::Abs, off: (SHARED_BASE as i64).wrapping_add(a) })
                } else {
                    (Space::Shared, Addr { base: Base::Abs, off: a })
                }
            }
            Some(Sym::DynShared) => {
                let a = self.dyn_base as i64 + off;
                if generic {
                    (Space::Generic, Addr { base: Base::Abs, off: (SHARED_BASE as i64).wrapping_add(a) })
                } else {
                    (Space::Shared, Addr { base: Base::Abs, off: a })
                }
            }
            Some(Sym::Var(a)) => (
                match space {
                    Some(Space::Const) => Space::Const,
                    _ => Space::Global,
                },
                Addr { base: Base::Abs, off: (a as i64).wrapping_add(off) },
            ),
            Some(Sym::Func) => return self.err(format!("`{name}` is a function, not an address")),
            None => return self.err(format!("undeclared name `{name}` in address")),
        })
    }

    fn vec_count(&self, o: &Opc) -> u8 {
        if o.has("v2") {
            2
        } else if o.has("v4") {
            4
        } else if o.has("v8") {
            8
        } else {
            1
        }
    }

    pub(super) fn ld(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        if ops.len() < 2 {
            return self.err(format!("`{}` needs a destination and an address", o.full));
        }
        let ty = self.ty1(o)?;
        let n = self.vec_count(o);
        if ty == Ty::B128 && n == 1 {
            // One 16-byte access into the register pair: `.v2.b64`, aligned to 16 as `.b128` is.
            let (space, addr) = self.addr(o, &ops[1], self.space_of(o))?;
            let [lo, hi] = self.wide_pair(&ops[0], o.full)?;
            self.push(Inst::Ld { space, size: 8, sext: false, dmask: u64::MAX, n: 2, d: [lo, hi, 0, 0], addr });
            return Ok(());
        }
        if n > 4 && !(n == 8 && ty.bits() <= 32) || ty.bits() > 64 {
            return self.unsupported(o.full);
        }
        let (space, addr) = self.addr(o, &ops[1], self.space_of(o))?;
        let dsts: Vec<&Operand> = match &ops[0] {
            Operand::Vec(v) => v.iter().collect(),
            x => vec![x],
        };
        if dsts.len() != n as usize {
            return self.err(format!("`{}` needs {n} destination registers", o.full));
        }
        let size = ty.bytes() as u8;
        // A `.v8` (32 bytes, sm_100's wide loads) is two `.v4` halves; an instruction moves at most four.
        for (half, dsts) in dsts.chunks(4).enumerate() {
            let mut d = [0; 4];
            let mut dmask = u64::MAX;
            for (k, x) in dsts.iter().enumerate() {
                d[k] = self.dst(x)?;
                dmask = mask_bits(self.bits_of(d[k]).max(ty.bits()).min(64));
            }
            let addr = Addr { off: addr.off + (half * 4 * size as usize) as i64, ..addr };
            self.push(Inst::Ld { space, size, sext: ty.is_signed(), dmask, n: dsts.len() as u8, d, addr });
        }
        Ok(())
    }

    pub(super) fn st(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        if ops.len() < 2 {
            return self.err(format!("`{}` needs an address and a value", o.full));
        }
        let ty = self.ty1(o)?;
        let n = self.vec_count(o);
        if n > 4 && !(n == 8 && ty.bits() <= 32) || ty.bits() > 64 && (ty != Ty::B128 || n > 1) {
            return self.unsupported(o.full);
        }
        let sp = self.space_of(o);
        if sp == Some(Space::Const) {
            return self.err("stores to `.const` are not allowed");
        }
        let (space, addr) = self.addr(o, &ops[0], sp)?;
        if space == Space::KParam {
            return self.err("stores to kernel parameters are not allowed");
        }
        let codes = self.provenance.store_codes(ty, &ops[1]);
        if ty == Ty::B128 {
            // One 16-byte access from the register pair, as `ld` above.
            let [lo, hi] = self.wide_pair(&ops[1], o.full)?;
            self.store_types.extend([lo, hi].map(|r| ((self.line, r), codes[0])));
            self.push(Inst::St { space, size: 8, n: 2, a: [lo, hi, 0, 0], addr });
            return Ok(());
        }
        let srcs: Vec<&Operand> = match &ops[1] {
            Operand::Vec(v) => v.iter().collect(),
            x => vec![x],
        };
        if srcs.len() != n as usize {
            return self.err(format!("`{}` needs {n} source values", o.full));
        }
        let size = ty.bytes() as u8;
        // A `.v8` is two `.v4` halves, as in `ld`.
        for (half, srcs) in srcs.chunks(4).enumerate() {
            let mut a = [0; 4];
            for (k, x) in srcs.iter().enumerate() {
                a[k] = self.src(x, ty)?;
                self.store_types.push(((self.line, a[k]), codes[half * 4 + k]));
            }
            let addr = Addr { off: addr.off + (half * 4 * size as usize) as i64, ..addr };
            self.push(Inst::St { space, size, n: srcs.len() as u8, a, addr });
        }
        Ok(())
    }

    pub(super) fn atom(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        let ty = self.ty1(o)?;
        let red = o.base == "red";
        let op = if o.has("add") {
            if ty.is_float() {
                if !matches!(ty, Ty::F32 | Ty::F64) {
                    return self.unsupported(o.full);
                }
                AtomOp::FAdd
            } else {
                AtomOp::Add
            }
        } else if o.has("min") {
            if ty.is_float() {
                AtomOp::FMin
            } else {
                AtomOp::Min(ty.is_signed())
            }
        } else if o.has("max") {
            if ty.is_float() {
                AtomOp::FMax
            } else {
                AtomOp::Max(ty.is_signed())
            }
        } else if o.has("inc") {
            AtomOp::Inc
        } else if o.has("dec") {
            AtomOp::Dec
        } else if o.has("and") {
            AtomOp::And
        } else if o.has("or") {
            AtomOp::Or
        } else if o.has("xor") {
            AtomOp::Xor
        } else if o.has("exch") {
            AtomOp::Exch
        } else if o.has("cas") {
            AtomOp::Cas
        } else {
            return self.unsupported(o.full);
        };
        let lanes = self.vec_count(o);
        // Vector atomics (sm_90: `.v2/.v4/.v8` of `.f32` add, what Triton's split-K emits) are
        // atomic per element, not as a whole: one scalar atomic per element, 4 bytes apart.
        if (lanes > 1 && !(op == AtomOp::FAdd && ty == Ty::F32)) || !matches!(ty.bits(), 32 | 64) {
            return self.unsupported(o.full);
        }
        if matches!(op, AtomOp::FMin | AtomOp::FMax) {
            return self.unsupported(o.full);
        }
        let nops = if red { 2 } else { 3 } + (op == AtomOp::Cas) as usize;
        // A trailing cache-policy operand is ignored.
        if ops.len() != nops && !(o.mods.iter().any(|m| m.contains("cache_hint")) && ops.len() == nops + 1) {
            return self.err(format!("`{}` takes {nops} operands, found {}", o.full, ops.len()));
        }
        let k = if red { 0 } else { 1 };
        let (space, addr) = self.addr(o, &ops[k], self.space_of(o))?;
        if !matches!(space, Space::Global | Space::Shared | Space::Generic) {
            return self.err(format!("`{}`: atomics work on global and shared memory only", o.full));
        }
        if lanes > 1 {
            let elements = |x: &Operand| match x {
                Operand::Vec(v) if v.len() == lanes as usize => Some(v.clone()),
                _ => None,
            };
            let bad = || format!("`{}` needs {lanes} values in braces", o.full);
            let srcs = elements(&ops[k + 1]).ok_or_else(bad).or_else(|e| self.err(e))?;
            let dsts = if red { None } else { Some(elements(&ops[0]).ok_or_else(bad).or_else(|e| self.err(e))?) };
            for (i, x) in srcs.iter().enumerate() {
                let b = self.src(x, ty)?;
                let d = match &dsts {
                    Some(d) => Some(self.dst(&d[i])?),
                    None => None,
                };
                let addr = Addr { off: addr.off + 4 * i as i64, ..addr };
                self.push(Inst::Atom { space, op, size: 4, f: ty.float(), d, addr, b, c: b });
            }
            return Ok(());
        }
        let d = if red { None } else { Some(self.dst(&ops[0])?) };
        let b = self.src(&ops[k + 1], ty)?;
        let c = if op == AtomOp::Cas { self.src(&ops[k + 2], ty)? } else { b };
        self.push(Inst::Atom { space, op, size: ty.bytes() as u8, f: ty.float(), d, addr, b, c });
        Ok(())
    }

    /// `isspacep.space p, a`: whether generic address `a` lies in `space`.
    pub(super) fn isspacep(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 2, o.full)?;
        let Some(space) = self.space_of(o).filter(|s| *s != Space::KParam) else {
            return self.unsupported(o.full);
        };
        let d = self.dst(&ops[0])?;
        let a = self.src(&ops[1], Ty::U64)?;
        self.push(Inst::Un { op: UnOp::IsSpace(space), d, a });
        Ok(())
    }

    /// `cvta{.to}.space.size d, a`: between a generic address and one in `space`; a frame
    /// variable (`__local_depot0`) is taken by address first.
    pub(super) fn cvta(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 2, o.full)?;
        let to = o.has("to");
        let space = if o.has("shared") || o.mods.iter().any(|m| m.starts_with("shared")) {
            Space::Shared
        } else if o.has("local") {
            Space::Local
        } else if o.has("global") || o.has("const") {
            Space::Global
        } else if o.has("param") {
            return self.unsupported(o.full);
        } else {
            return self.err(format!("`{}` names no state space", o.full));
        };
        let ty = self.ty1(o)?;
        let d = self.dst(&ops[0])?;
        if let Operand::Name(n) = &ops[1] {
            if let Some(Sym::Frame(off)) = self.lookup(n) {
                // `cvta.local.u64 %rd, __local_depot0`
                let t = self.new_reg(64);
                self.push(Inst::FrameAddr { d: t, off });
                self.push(Inst::Cvta { to_generic: !to, space, d, a: t, dmask: mask_bits(ty.bits()) });
                return Ok(());
            }
        }
        let a = self.src(&ops[1], ty)?;
        self.push(Inst::Cvta { to_generic: !to, space, d, a, dmask: mask_bits(ty.bits()) });
        Ok(())
    }
}
