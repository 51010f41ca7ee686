//! Lowering the packed 16-bit integer instructions: `add`, `sub`, `min` and `max` on `.u16x2`
//! and `.s16x2` (two halves of a `.b32` register, each wrapping on its own, as NVRTC emits them
//! for CUB's scans), and `.relu` on the signed `min` and `max`. The types are told apart by their
//! modifier rather than as a [`Ty`]: nothing else in PTX has them, and an operand of theirs is a
//! plain `.b32` register. Any other instruction on them is refused by name.

use super::*;

/// Why `.relu` is refused elsewhere.
pub(super) const RELU_FORMS: &str = "`.relu` applies to `min` and `max` of `.s32` and `.s16x2`";

/// `Some(signed)` when the instruction works on packed 16-bit integer pairs.
pub(super) fn signedness(o: &Opc) -> Option<bool> {
    o.mods.iter().find_map(|m| match *m {
        "s16x2" => Some(true),
        "u16x2" => Some(false),
        _ => None,
    })
}

impl FnLower<'_> {
    pub(super) fn packed_int(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        let signed = signedness(o).unwrap_or(false);
        let op = match o.base {
            "add" => I2Op::Add,
            "sub" => I2Op::Sub,
            "min" => I2Op::Min,
            "max" => I2Op::Max,
            _ => return self.unsupported(o.full),
        };
        // `.relu`: the result, then each half's maximum with zero.
        let relu = o.has("relu");
        let known = |m: &&str| matches!(*m, "s16x2" | "u16x2") || (*m == "relu" && relu);
        if let Some(m) = o.mods.iter().find(|m| !known(m)) {
            return self.refused(o.full, &format!("`.{m}` does not apply to packed 16-bit integers"));
        }
        if !o.types.is_empty() || (relu && !(signed && matches!(op, I2Op::Min | I2Op::Max))) {
            return self.refused(o.full, if relu { RELU_FORMS } else { "one packed type, nothing else" });
        }
        self.want(ops, 3, o.full)?;
        let d = self.dst(&ops[0])?;
        let a = self.src(&ops[1], Ty::B32)?;
        let b = self.src(&ops[2], Ty::B32)?;
        self.push(Inst::Bin { op: BinOp::I2(op, signed), d, a, b });
        if relu {
            let zero = self.konst(0);
            self.push(Inst::Bin { op: BinOp::I2(I2Op::Max, true), d, a: d, b: zero });
        }
        Ok(())
    }
}
