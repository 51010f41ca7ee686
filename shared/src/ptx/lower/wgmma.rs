//! Lowering `wgmma`: `mma_async` in each operand form the ISA defines (A from registers or a
//! descriptor, the immediates each type takes), and `fence`, `commit_group` and `wait_group`,
//! which have nothing to order once products complete when they issue (`exec/warpgroup.rs`).

use super::*;

/// The shapes and types `wgmma.mma_async` has: for A's type, K, whether N may be any multiple
/// of 8 up to 256 (8-bit integers: up to 32, then multiples of 16), and the D types allowed.
fn valid(n: u16, k: u8, dty: MmaTy, aty: MmaTy, bty: MmaTy) -> bool {
    use MmaTy::*;
    let n_ok = |int: bool| (8..=256).contains(&n) && n.is_multiple_of(8) && (!int || n <= 32 || n.is_multiple_of(16));
    match aty {
        F16 => bty == F16 && k == 16 && matches!(dty, F16 | F32) && n_ok(false),
        BF16 => bty == BF16 && k == 16 && dty == F32 && n_ok(false),
        TF32 => bty == TF32 && k == 8 && dty == F32 && n_ok(false),
        E4M3 | E5M2 => matches!(bty, E4M3 | E5M2) && k == 32 && matches!(dty, F16 | F32) && n_ok(false),
        S8 | U8 => matches!(bty, S8 | U8) && k == 32 && dty == S32 && n_ok(true),
        _ => false,
    }
}

impl FnLower<'_> {
    /// An immediate operand of `wgmma` among `allowed`.
    fn wgmma_imm(&self, o: &Opc, op: &Operand, what: &str, allowed: &[i128]) -> Res<i128> {
        match op {
            Operand::Lit(Lit::Int(v)) if allowed.contains(v) => Ok(*v),
            _ => self.err(format!("`{}`: {what} must be one of {allowed:?}", o.full)),
        }
    }

    pub(super) fn wgmma(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        if o.has("fence") || o.has("commit_group") || o.has("wait_group") {
            self.push(Inst::Nop);
            return Ok(());
        }
        if !o.has("mma_async") {
            return self.unsupported(o.full);
        }
        if o.has("sp") || o.mods.iter().any(|m| m.starts_with("sp")) {
            return self.unsupported(o.full);
        }
        let mut shape = None;
        let mut tys = Vec::new();
        let mut satfinite = false;
        for p in o.full.split('.').skip(1) {
            let t = match p {
                "mma_async" | "sync" | "aligned" => continue,
                "satfinite" => {
                    satfinite = true;
                    continue;
                }
                "f16" => MmaTy::F16,
                "bf16" => MmaTy::BF16,
                "tf32" => MmaTy::TF32,
                "f32" => MmaTy::F32,
                "s8" => MmaTy::S8,
                "u8" => MmaTy::U8,
                "s32" => MmaTy::S32,
                "e4m3" => MmaTy::E4M3,
                "e5m2" => MmaTy::E5M2,
                _ => {
                    let s = p.strip_prefix("m64n").and_then(|r| r.split_once('k'));
                    match s.and_then(|(n, k)| Some((n.parse::<u16>().ok()?, k.parse::<u8>().ok()?))) {
                        Some(s) if shape.is_none() => {
                            shape = Some(s);
                            continue;
                        }
                        _ => return self.unsupported(o.full),
                    }
                }
            };
            tys.push(t);
        }
        let (Some((n, k)), &[dty, aty, bty]) = (shape, &tys[..]) else {
            return self.unsupported(o.full);
        };
        if !valid(n, k, dty, aty, bty) || (satfinite && dty != MmaTy::S32) {
            return self.unsupported(o.full);
        }
        let a_desc = !matches!(ops.get(1), Some(Operand::Vec(_)));
        let int = dty == MmaTy::S32;
        let halves = matches!(aty, MmaTy::F16 | MmaTy::BF16);
        // d, a, b, scale-d, then imm-scale-a and imm-scale-b (float types), then imm-trans-a (A
        // from a descriptor) and imm-trans-b (16-bit types).
        let want = 4 + if int { 0 } else { 2 } + if halves { 1 + a_desc as usize } else { 0 };
        if ops.len() != want {
            return self.err(format!("`{}` takes {want} operands, found {}", o.full, ops.len()));
        }
        let mut op = Wgmma {
            n,
            k,
            dty,
            aty,
            bty,
            satfinite,
            d: vec![],
            a: vec![],
            a_desc,
            b_desc: 0,
            scale_d: 0,
            neg_a: false,
            neg_b: false,
            trans_a: false,
            trans_b: false,
        };
        op.d = self.reg_list(&ops[0], if dty == MmaTy::F32 { Ty::F32 } else { Ty::B32 }, true)?;
        if op.d.len() != op.d_regs() {
            return self.err(format!("`{}`: D needs {} registers, found {}", o.full, op.d_regs(), op.d.len()));
        }
        op.a = if a_desc { vec![self.src(&ops[1], Ty::B64)?] } else { self.reg_list(&ops[1], Ty::B32, false)? };
        if !a_desc && op.a.len() != 4 {
            return self.err(format!("`{}`: A needs 4 registers, found {}", o.full, op.a.len()));
        }
        op.b_desc = self.src(&ops[2], Ty::B64)?;
        op.scale_d = match &ops[3] {
            Operand::Lit(Lit::Int(v)) => self.konst((*v != 0) as u64),
            x => {
                let (p, neg) = self.pred_src(x)?;
                if neg {
                    let t = self.new_reg(1);
                    self.push(Inst::Un { op: UnOp::PredNot, d: t, a: p });
                    t
                } else {
                    p
                }
            }
        };
        if !int {
            op.neg_a = self.wgmma_imm(o, &ops[4], "imm-scale-a", &[1, -1])? < 0;
            op.neg_b = self.wgmma_imm(o, &ops[5], "imm-scale-b", &[1, -1])? < 0;
        }
        if halves {
            if a_desc {
                op.trans_a = self.wgmma_imm(o, &ops[6], "imm-trans-a", &[0, 1])? == 1;
            }
            op.trans_b = self.wgmma_imm(o, &ops[want - 1], "imm-trans-b", &[0, 1])? == 1;
        }
        self.push(Inst::Wgmma(Box::new(op)));
        Ok(())
    }
}
