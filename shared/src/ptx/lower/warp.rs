//! Warp-level instructions: `shfl`, and the warp matrix instructions `mma.sync`, `ldmatrix` and
//! `stmatrix`.

use super::*;

impl FnLower<'_> {
    /// `mma.sync.aligned.shape.row.col{.satfinite}.dtype.atype.btype.ctype d, a, b, c`.
    pub(super) fn mma(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 4, o.full)?;
        let mut shape = None;
        let mut tys = Vec::new();
        let mut layout = Vec::new();
        let mut satfinite = false;
        for p in o.full.split('.').skip(1) {
            let t = match p {
                "sync" | "aligned" | "rn" => continue,
                "row" | "col" => {
                    layout.push(p);
                    continue;
                }
                "satfinite" => {
                    satfinite = true;
                    continue;
                }
                "f16" => MmaTy::F16,
                "bf16" => MmaTy::BF16,
                "tf32" => MmaTy::TF32,
                "f32" => MmaTy::F32,
                "f64" => MmaTy::F64,
                "s8" => MmaTy::S8,
                "u8" => MmaTy::U8,
                "s32" => MmaTy::S32,
                "e4m3" => MmaTy::E4M3,
                "e5m2" => MmaTy::E5M2,
                _ => match mma_shape(p) {
                    Some(s) if shape.is_none() => {
                        shape = Some(s);
                        continue;
                    }
                    _ => return self.unsupported(o.full),
                },
            };
            tys.push(t);
        }
        let (Some((m, n, k)), &[dty, aty, bty, cty], ["row", "col"]) = (shape, &tys[..], &layout[..]) else {
            return self.unsupported(o.full);
        };
        use MmaTy::*;
        let float_acc = |t: MmaTy| matches!(t, F16 | F32);
        let ok = match (m, n, k, aty) {
            (16, 8, 16 | 8, F16) => bty == F16 && float_acc(cty) && float_acc(dty),
            (16, 8, 16 | 8, BF16) => bty == BF16 && cty == F32 && dty == F32,
            (16, 8, 8 | 4, TF32) => bty == TF32 && cty == F32 && dty == F32,
            (8, 8, 4, F64) => bty == F64 && cty == F64 && dty == F64,
            (16, 8, 32 | 16, S8 | U8) => matches!(bty, S8 | U8) && cty == S32 && dty == S32,
            (16, 8, 32 | 16, E4M3 | E5M2) => matches!(bty, E4M3 | E5M2) && float_acc(cty) && cty == dty,
            _ => false,
        };
        if !ok || (satfinite && dty != S32) || (m, k) == (16, 8) && cty != dty {
            return self.unsupported(o.full);
        }
        let reg_ty = |t: MmaTy| match t {
            F32 => Ty::F32,
            F64 => Ty::F64,
            _ => Ty::B32,
        };
        let mut op = Mma { m, n, k, dty, aty, bty, cty, satfinite, d: vec![], a: vec![], b: vec![], c: vec![] };
        op.d = self.reg_list(&ops[0], reg_ty(dty), true)?;
        op.a = self.reg_list(&ops[1], reg_ty(aty), false)?;
        op.b = self.reg_list(&ops[2], reg_ty(bty), false)?;
        op.c = self.reg_list(&ops[3], reg_ty(cty), false)?;
        let want = op.reg_counts();
        for (name, (have, want)) in ["d", "a", "b", "c"]
            .iter()
            .zip([op.d.len(), op.a.len(), op.b.len(), op.c.len()].into_iter().zip([want[3], want[0], want[1], want[2]]))
        {
            if have != want {
                return self.err(format!("`{}`: operand {name} needs {want} registers, found {have}", o.full));
            }
        }
        self.push(Inst::Mma(Box::new(op)));
        Ok(())
    }

    /// `ldmatrix.sync.aligned.m8n8.xN{.trans}{.shared}.b16 d, [p]` and `stmatrix` (operands swapped).
    pub(super) fn ldst_matrix(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 2, o.full)?;
        let n = if o.has("x1") {
            1
        } else if o.has("x2") {
            2
        } else if o.has("x4") {
            4
        } else {
            return self.unsupported(o.full);
        };
        if !o.has("m8n8") || o.types != [Ty::B16] {
            return self.unsupported(o.full);
        }
        let space = match self.space_of(o) {
            None => None,
            Some(Space::Shared) => Some(Space::Shared),
            Some(_) => return self.unsupported(o.full),
        };
        let trans = o.has("trans");
        let load = o.base == "ldmatrix";
        let (regs, at) = if load { (&ops[0], &ops[1]) } else { (&ops[1], &ops[0]) };
        let (space, addr) = self.addr(o, at, space)?;
        let list = self.reg_list(regs, Ty::B32, load)?;
        if list.len() != n as usize {
            return self.err(format!("`{}` needs {n} registers", o.full));
        }
        let mut r = [0; 4];
        r[..list.len()].copy_from_slice(&list);
        self.push(if load {
            Inst::Ldmatrix { n, trans, space, d: r, addr }
        } else {
            Inst::Stmatrix { n, trans, space, a: r, addr }
        });
        Ok(())
    }
}

impl FnLower<'_> {
    pub(super) fn shfl(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        let mode = if o.has("up") {
            ShflMode::Up
        } else if o.has("down") {
            ShflMode::Down
        } else if o.has("bfly") {
            ShflMode::Bfly
        } else if o.has("idx") {
            ShflMode::Idx
        } else {
            return self.unsupported(o.full);
        };
        let sync = o.has("sync");
        self.want(ops, if sync { 5 } else { 4 }, o.full)?;
        let (d, p) = match &ops[0] {
            Operand::Pair(a, b) => (self.dst(&Operand::Name(a.clone()))?, Some(self.dst(&Operand::Name(b.clone()))?)),
            x => (self.dst(x)?, None),
        };
        let a = self.src(&ops[1], Ty::B32)?;
        let b = self.src(&ops[2], Ty::B32)?;
        let c = self.src(&ops[3], Ty::B32)?;
        self.push(Inst::Shfl { mode, d, p, a, b, c });
        Ok(())
    }

    /// `vote{.sync}.mode.pred d, {!}a{, membermask}`.
    pub(super) fn vote(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        let mode = if o.has("all") {
            VoteMode::All
        } else if o.has("any") {
            VoteMode::Any
        } else if o.has("uni") {
            VoteMode::Uni
        } else if o.has("ballot") {
            VoteMode::Ballot
        } else {
            return self.unsupported(o.full);
        };
        if ops.len() < 2 {
            return self.err("`vote` needs a destination and a predicate");
        }
        let d = self.dst(&ops[0])?;
        let (a, neg) = self.pred_src(&ops[1])?;
        self.push(Inst::Vote { mode, d, a, neg });
        Ok(())
    }

    /// `redux.sync.op.type d, a, membermask` on 32-bit integers.
    pub(super) fn redux(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        // redux.sync.op.type d, a, membermask
        self.want(ops, 3, o.full)?;
        let ty = self.ty1(o)?;
        let op = match (o.mods.get(1).copied(), ty) {
            (Some("add"), Ty::U32 | Ty::S32) => ReduxOp::Add,
            (Some("min"), Ty::U32) => ReduxOp::MinU,
            (Some("min"), Ty::S32) => ReduxOp::MinS,
            (Some("max"), Ty::U32) => ReduxOp::MaxU,
            (Some("max"), Ty::S32) => ReduxOp::MaxS,
            (Some("and"), Ty::B32) => ReduxOp::And,
            (Some("or"), Ty::B32) => ReduxOp::Or,
            (Some("xor"), Ty::B32) => ReduxOp::Xor,
            _ => return self.unsupported(o.full),
        };
        let d = self.dst(&ops[0])?;
        let a = self.src(&ops[1], ty)?;
        self.push(Inst::Redux { op, d, a });
        Ok(())
    }

    /// `activemask.b32 d`.
    pub(super) fn activemask(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 1, o.full)?;
        let d = self.dst(&ops[0])?;
        self.push(Inst::Activemask { d });
        Ok(())
    }

    /// `movmatrix.sync.aligned.m8n8.trans.b16 d, a`.
    pub(super) fn movmatrix(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 2, o.full)?;
        if !(o.has("m8n8") && o.has("trans") && o.types == [Ty::B16]) {
            return self.unsupported(o.full);
        }
        let d = self.dst(&ops[0])?;
        let a = self.src(&ops[1], Ty::B32)?;
        self.push(Inst::Movmatrix { d, a });
        Ok(())
    }
}

/// `mMnNkK` as numbers.
fn mma_shape(p: &str) -> Option<(u8, u8, u8)> {
    let rest = p.strip_prefix('m')?;
    let (m, rest) = rest.split_once('n')?;
    let (n, k) = rest.split_once('k')?;
    Some((m.parse().ok()?, n.parse().ok()?, k.parse().ok()?))
}
