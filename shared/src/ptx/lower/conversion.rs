//! Moves and conversions: `mov` (packing, unpacking, clocks, frame addresses, 128-bit pairs) and
//! `cvt` between integer and floating-point types, including the fp8 pairs.

use super::*;

impl FnLower<'_> {
    pub(super) fn mov(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 2, o.full)?;
        let ty = self.ty1(o)?;
        if ty == Ty::B128 {
            return self.mov128(o, ops);
        }
        match (&ops[0], &ops[1]) {
            (Operand::Vec(ds), src) => {
                // Unpack a wide register into parts.
                let a = self.src(src, ty)?;
                let part = ty.bits() / ds.len() as u32;
                for (k, dop) in ds.iter().enumerate() {
                    if matches!(dop, Operand::Name(n) if n == "_") {
                        continue;
                    }
                    let d = self.dst(dop)?;
                    self.push(Inst::Un { op: UnOp::Extract((k as u32 * part) as u8, mask_bits(part)), d, a });
                }
                Ok(())
            }
            (dop, Operand::Vec(ss)) => {
                let d = self.dst(dop)?;
                let part = ty.bits() / ss.len() as u32;
                let pty = match part {
                    8 => Ty::B8,
                    16 => Ty::B16,
                    32 => Ty::B32,
                    _ => return self.err("bad vector packing"),
                };
                let first = self.src(&ss[0], pty)?;
                let mut acc = first;
                for (k, s) in ss.iter().enumerate().skip(1) {
                    let b = self.src(s, pty)?;
                    let t = if k + 1 == ss.len() { d } else { self.new_reg(64) };
                    self.push(Inst::Bin { op: BinOp::Pack((k as u32 * part) as u8), d: t, a: acc, b });
                    acc = t;
                }
                if ss.len() == 1 {
                    self.push(Inst::Un { op: UnOp::Mov(mask_bits(ty.bits())), d, a: first });
                }
                Ok(())
            }
            (dop, Operand::Name(n)) if n == "%clock" || n == "%clock64" || n.starts_with("%globaltimer") => {
                let d = self.dst(dop)?;
                self.push(Inst::Clock { d, wide: n != "%clock" && !n.ends_with("_lo") && !n.ends_with("_hi") });
                Ok(())
            }
            (dop, Operand::Name(n)) if matches!(self.lookup(n), Some(Sym::Frame(_))) => {
                let Some(Sym::Frame(off)) = self.lookup(n) else { unreachable!() };
                let d = self.dst(dop)?;
                self.push(Inst::FrameAddr { d, off });
                Ok(())
            }
            (dop, Operand::SymOff(n, k)) if matches!(self.lookup(n), Some(Sym::Frame(_))) => {
                let Some(Sym::Frame(off)) = self.lookup(n) else { unreachable!() };
                let d = self.dst(dop)?;
                self.push(Inst::FrameAddr { d, off: (off as i64 + k) as u32 });
                Ok(())
            }
            (dop, src) => {
                let d = self.dst(dop)?;
                let a = self.src(src, ty)?;
                let m = if ty == Ty::Pred { 1 } else { mask_bits(ty.bits()) };
                self.push(Inst::Un { op: UnOp::Mov(m), d, a });
                Ok(())
            }
        }
    }

    /// `mov.b128`: between 128-bit registers, or between one and a pair of 64-bit values (low
    /// half first), as two moves of 64 bits.
    fn mov128(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        let mov = |s: &mut Self, d: R, a: R| s.push(Inst::Un { op: UnOp::Mov(u64::MAX), d, a });
        match (&ops[0], &ops[1]) {
            (Operand::Vec(ds), src) if ds.len() == 2 => {
                let pair = self.wide_pair(src, o.full)?;
                for (dop, a) in ds.iter().zip(pair) {
                    if !matches!(dop, Operand::Name(n) if n == "_") {
                        let d = self.dst(dop)?;
                        mov(self, d, a);
                    }
                }
            }
            (dop, Operand::Vec(ss)) if ss.len() == 2 => {
                let pair = self.wide_pair(dop, o.full)?;
                for (d, s) in pair.into_iter().zip(ss) {
                    let a = self.src(s, Ty::B64)?;
                    mov(self, d, a);
                }
            }
            (Operand::Vec(_), _) | (_, Operand::Vec(_)) => {
                return self.err(format!("`{}` packs or unpacks exactly two 64-bit values", o.full))
            }
            (dop, src) => {
                let d = self.wide_pair(dop, o.full)?;
                let a = self.wide_pair(src, o.full)?;
                mov(self, d[0], a[0]);
                mov(self, d[1], a[1]);
            }
        }
        Ok(())
    }
}

impl FnLower<'_> {
    pub(super) fn cvt(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        if o.mods.iter().any(|m| matches!(*m, "e4m3x2" | "e5m2x2")) {
            return self.cvt_fp8(o, ops);
        }
        if o.mods.contains(&"tf32") || o.full.contains(".tf32.") {
            return self.cvt_tf32(o, ops);
        }
        if o.types.len() != 2 {
            return self.err(format!("`{}` needs a destination and a source type", o.full));
        }
        let (to, from) = (o.types[0], o.types[1]);
        if matches!(to, Ty::F16x2 | Ty::BF16x2) && from == Ty::F32 {
            // cvt.rn.f16x2.f32 d, hi, lo
            self.want(ops, 3, o.full)?;
            let f = if to == Ty::F16x2 { Ty::F16 } else { Ty::BF16 };
            let rnd = o.rnd();
            let cv = Cvt {
                from,
                to: f,
                rnd,
                int_round: false,
                ftz: false,
                sat: false,
                satfinite: o.has("satfinite"),
                dst_bits: 16,
            };
            let d = self.dst(&ops[0])?;
            let hi = self.src(&ops[1], from)?;
            let lo = self.src(&ops[2], from)?;
            let th = self.new_reg(16);
            let tl = self.new_reg(16);
            self.push(Inst::Un { op: UnOp::Cvt(cv), d: th, a: hi });
            self.push(Inst::Un { op: UnOp::Cvt(cv), d: tl, a: lo });
            self.push(Inst::Bin { op: BinOp::Pack(16), d, a: tl, b: th });
            return Ok(());
        }
        self.want(ops, 2, o.full)?;
        if to == Ty::Pred
            || from == Ty::Pred
            || to.bits() > 64
            || from.bits() > 64
            || to.bits() == 32 && to.is_float() && from == Ty::F16x2
        {
            return self.unsupported(o.full);
        }
        let int_round = o.int_rnd();
        let rnd = int_round.or(o.rnd());
        if o.has("relu") {
            return self.unsupported(o.full);
        }
        let d = self.dst(&ops[0])?;
        let dst_bits = self.bits_of(d).clamp(to.bits(), 64) as u8;
        let cv = Cvt {
            from,
            to,
            rnd,
            int_round: int_round.is_some(),
            ftz: o.has("ftz"),
            sat: o.has("sat"),
            satfinite: o.has("satfinite"),
            dst_bits,
        };
        let a = self.src(&ops[1], from)?;
        self.push(Inst::Un { op: UnOp::Cvt(cv), d, a });
        Ok(())
    }

    /// `cvt.{rna,rn,rz}.tf32.f32 d, a` (XLA and Triton round f32 to tf32 before `mma`): the f32 bit
    /// pattern rounded at bit 13 in integer arithmetic (away from zero on a tie, to even, or toward
    /// zero), the low 13 bits cleared, so the register holds the tf32 value as an f32. A carry into
    /// the exponent is the next binade, or infinity, as the hardware rounds; infinities and NaNs pass
    /// through unchanged.
    fn cvt_tf32(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        let known = o.mods.iter().all(|m| matches!(*m, "rna" | "rn" | "rz" | "tf32"));
        if !known || o.types.iter().any(|t| *t != Ty::F32) {
            return self.unsupported(o.full);
        }
        self.want(ops, 2, o.full)?;
        let d = self.dst(&ops[0])?;
        let x = self.src(&ops[1], Ty::B32)?;
        let w = W::W32;
        let rounded = self.new_reg(32);
        if o.has("rz") {
            let zero = self.konst(0);
            self.push(Inst::Bin { op: BinOp::Or, d: rounded, a: x, b: zero });
        } else if o.has("rna") {
            let half = self.konst(0x1000);
            self.push(Inst::Bin { op: BinOp::Add(w), d: rounded, a: x, b: half });
        } else if o.has("rn") {
            // Half less one, plus the kept part's lowest bit: ties go to the even neighbour.
            let (odd, thirteen, one, bias) = (self.new_reg(32), self.konst(13), self.konst(1), self.new_reg(32));
            self.push(Inst::Bin { op: BinOp::ShrU(w), d: odd, a: x, b: thirteen });
            self.push(Inst::Bin { op: BinOp::And, d: odd, a: odd, b: one });
            let below = self.konst(0xfff);
            self.push(Inst::Bin { op: BinOp::Add(w), d: bias, a: odd, b: below });
            self.push(Inst::Bin { op: BinOp::Add(w), d: rounded, a: x, b: bias });
        } else {
            return self.unsupported(o.full);
        }
        let mask = self.konst(0xffff_e000);
        self.push(Inst::Bin { op: BinOp::And, d: rounded, a: rounded, b: mask });
        let (exponent, all_ones, special) = (self.new_reg(32), self.konst(0x7f80_0000), self.new_reg(1));
        self.push(Inst::Bin { op: BinOp::And, d: exponent, a: x, b: all_ones });
        self.push(Inst::Setp {
            ty: CmpTy::B(w),
            cmp: Cmp::Eq,
            ftz: false,
            d: special,
            dn: None,
            a: exponent,
            b: all_ones,
            comb: None,
        });
        self.push(Inst::Tern { op: TernOp::Selp, d, a: x, b: rounded, c: special });
        Ok(())
    }

    /// `cvt` to or from `.e4m3x2`/`.e5m2x2`: `.rn.satfinite{.relu}.f8x2.f32 d, a, b` (a to the
    /// high byte), `.rn.satfinite{.relu}.f8x2.f16x2 d, a` and `.rn{.relu}.f16x2.f8x2 d, a`.
    fn cvt_fp8(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        let names: Vec<&str> =
            o.full.split('.').skip(1).filter(|p| matches!(*p, "e4m3x2" | "e5m2x2" | "f32" | "f16x2")).collect();
        let fp8 = |s: &str| if s == "e4m3x2" { Fp8::E4M3 } else { Fp8::E5M2 };
        let relu = o.has("relu");
        let known = o.mods.iter().all(|m| matches!(*m, "rn" | "satfinite" | "relu" | "e4m3x2" | "e5m2x2"));
        if !known || !o.has("rn") {
            return self.unsupported(o.full);
        }
        let satfinite = o.has("satfinite");
        match names[..] {
            [to @ ("e4m3x2" | "e5m2x2"), "f32"] if satfinite => {
                self.want(ops, 3, o.full)?;
                let d = self.dst(&ops[0])?;
                let hi = self.src(&ops[1], Ty::F32)?;
                let lo = self.src(&ops[2], Ty::F32)?;
                let op = UnOp::Fp8(Fp8Cvt::FromF32 { to: fp8(to), relu });
                let (th, tl) = (self.new_reg(8), self.new_reg(8));
                self.push(Inst::Un { op, d: th, a: hi });
                self.push(Inst::Un { op, d: tl, a: lo });
                self.push(Inst::Bin { op: BinOp::Pack(8), d, a: tl, b: th });
            }
            [to @ ("e4m3x2" | "e5m2x2"), "f16x2"] if satfinite => {
                self.want(ops, 2, o.full)?;
                let d = self.dst(&ops[0])?;
                let a = self.src(&ops[1], Ty::B32)?;
                self.push(Inst::Un { op: UnOp::Fp8(Fp8Cvt::FromF16x2 { to: fp8(to), relu }), d, a });
            }
            ["f16x2", from @ ("e4m3x2" | "e5m2x2")] if !satfinite => {
                self.want(ops, 2, o.full)?;
                let d = self.dst(&ops[0])?;
                let a = self.src(&ops[1], Ty::B16)?;
                self.push(Inst::Un { op: UnOp::Fp8(Fp8Cvt::ToF16x2 { from: fp8(from), relu }), d, a });
            }
            _ => return self.unsupported(o.full),
        }
        Ok(())
    }
}
