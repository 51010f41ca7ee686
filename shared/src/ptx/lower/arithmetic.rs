//! Integer, floating-point and predicate arithmetic: unary, binary and ternary operations, the
//! carry chain of `add.cc`/`addc`, and comparisons (`setp`, `set`).

use super::*;

impl FnLower<'_> {
    fn carry_reg(&mut self) -> R {
        match self.cc {
            Some(r) => r,
            None => {
                let r = self.new_reg(1);
                self.cc = Some(r);
                r
            }
        }
    }

    /// `add.cc`, `addc(.cc)`, `sub.cc`, `subc(.cc)` on 32- or 64-bit integers.
    pub(super) fn carry_arith(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 3, o.full)?;
        let ty = self.ty1(o)?;
        let w = match ty.int_w() {
            Some(w @ (W::W32 | W::W64)) => w,
            _ => return self.unsupported(o.full),
        };
        let d = self.dst(&ops[0])?;
        let a = self.src(&ops[1], ty)?;
        let b = self.src(&ops[2], ty)?;
        let cc = self.carry_reg();
        let sub = o.base.starts_with("sub");
        let with_in = o.base.ends_with('c');
        let out = o.has("cc");
        if !with_in {
            // Carry out first: `d` may be one of the sources.
            let op = if sub { BinOp::SubBorrowOut(w) } else { BinOp::AddCarryOut(w) };
            self.push(Inst::Bin { op, d: cc, a, b });
            let op = if sub { BinOp::Sub(w) } else { BinOp::Add(w) };
            self.push(Inst::Bin { op, d, a, b });
            return Ok(());
        }
        let t = self.new_reg(1);
        if out {
            let op = if sub { TernOp::SubcBorrowOut(w) } else { TernOp::AddcCarryOut(w) };
            self.push(Inst::Tern { op, d: t, a, b, c: cc });
        }
        let op = if sub { TernOp::Subc(w) } else { TernOp::Addc(w) };
        self.push(Inst::Tern { op, d, a, b, c: cc });
        if out {
            self.push(Inst::Un { op: UnOp::Mov(1), d: cc, a: t });
        }
        Ok(())
    }
}

impl FnLower<'_> {
    pub(super) fn binary(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 3, o.full)?;
        let ty = self.ty1(o)?;
        let (sa, sb) = match o.base {
            "shl" | "shr" => (ty, Ty::U32),
            _ => (ty, ty),
        };
        let op = if ty == Ty::Pred {
            match o.base {
                "and" => BinOp::PredAnd,
                "or" => BinOp::PredOr,
                "xor" => BinOp::PredXor,
                _ => return self.unsupported(o.full),
            }
        } else if matches!(ty, Ty::F16x2 | Ty::BF16x2) {
            let f = if ty == Ty::F16x2 { F::F16 } else { F::BF16 };
            let h = match o.base {
                "add" => H2Op::Add,
                "sub" => H2Op::Sub,
                "mul" => H2Op::Mul,
                "min" => H2Op::Min,
                "max" => H2Op::Max,
                _ => return self.unsupported(o.full),
            };
            BinOp::H2(h, f)
        } else if let Some(f) = ty.float() {
            let rnd = o.rnd().unwrap_or(Rnd::Rn);
            let fl = o.flags();
            match o.base {
                "add" => BinOp::FAdd(f, rnd, fl),
                "sub" => BinOp::FSub(f, rnd, fl),
                "mul" => BinOp::FMul(f, rnd, fl),
                "div" => {
                    let mode = if o.has("full") {
                        FMode::Full
                    } else if o.has("approx") {
                        FMode::Approx
                    } else if let Some(r) = o.rnd() {
                        FMode::Ieee(r)
                    } else if f == F::F64 {
                        return self.err(format!("`{}` needs a rounding modifier", o.full));
                    } else {
                        FMode::Approx
                    };
                    BinOp::FDiv(f, mode, fl.ftz)
                }
                "min" => BinOp::FMin(f, fl.ftz, o.has("NaN")),
                "max" => BinOp::FMax(f, fl.ftz, o.has("NaN")),
                "copysign" => BinOp::CopySign(f),
                _ => return self.unsupported(o.full),
            }
        } else {
            let Some(w) = ty.int_w() else {
                return self.unsupported(o.full);
            };
            let s = ty.is_signed();
            match o.base {
                "add" if o.has("sat") => {
                    if ty != Ty::S32 {
                        return self.unsupported(o.full);
                    }
                    BinOp::AddSatS32
                }
                "sub" if o.has("sat") => {
                    if ty != Ty::S32 {
                        return self.unsupported(o.full);
                    }
                    BinOp::SubSatS32
                }
                "add" if o.has("cc") => return self.unsupported(o.full),
                "sub" if o.has("cc") => return self.unsupported(o.full),
                "add" => BinOp::Add(w),
                "sub" => BinOp::Sub(w),
                "mul" if o.has("wide") => {
                    if w == W::W64 {
                        return self.unsupported(o.full);
                    }
                    if s {
                        BinOp::MulWideS(w)
                    } else {
                        BinOp::MulWideU(w)
                    }
                }
                "mul" if o.has("hi") => {
                    if s {
                        BinOp::MulHiS(w)
                    } else {
                        BinOp::MulHiU(w)
                    }
                }
                "mul" => BinOp::MulLo(w),
                "mul24" => {
                    if w != W::W32 {
                        return self.unsupported(o.full);
                    }
                    if o.has("hi") {
                        BinOp::Mul24Hi(s)
                    } else {
                        BinOp::Mul24Lo(s)
                    }
                }
                "div" => {
                    if s {
                        BinOp::DivS(w)
                    } else {
                        BinOp::DivU(w)
                    }
                }
                "rem" => {
                    if s {
                        BinOp::RemS(w)
                    } else {
                        BinOp::RemU(w)
                    }
                }
                "min" => {
                    if s {
                        BinOp::MinS(w)
                    } else {
                        BinOp::MinU(w)
                    }
                }
                "max" => {
                    if s {
                        BinOp::MaxS(w)
                    } else {
                        BinOp::MaxU(w)
                    }
                }
                "and" => BinOp::And,
                "or" => BinOp::Or,
                "xor" => BinOp::Xor,
                "shl" => BinOp::Shl(w),
                "shr" => {
                    if s {
                        BinOp::ShrS(w)
                    } else {
                        BinOp::ShrU(w)
                    }
                }
                _ => return self.unsupported(o.full),
            }
        };
        // `.relu` (signed `min` and `max` only): the result, then its maximum with zero.
        let relu = match (o.has("relu"), op) {
            (false, _) => None,
            (true, BinOp::MinS(W::W32) | BinOp::MaxS(W::W32)) => Some(BinOp::MaxS(W::W32)),
            (true, _) => return self.refused(o.full, packed_int::RELU_FORMS),
        };
        let d = self.dst(&ops[0])?;
        let a = self.src(&ops[1], sa)?;
        let b = self.src(&ops[2], sb)?;
        self.push(Inst::Bin { op, d, a, b });
        // PTX lets ptxas fuse a multiply and an add that carry no rounding modifier.
        let fused_kind = matches!(
            op,
            BinOp::FAdd(..) | BinOp::FSub(..) | BinOp::FMul(..) | BinOp::H2(H2Op::Add | H2Op::Sub | H2Op::Mul, _)
        );
        if fused_kind && o.rnd().is_none() {
            if let Some(last) = self.insts.last_mut() {
                last.contractable = true;
            }
        }
        if let Some(op) = relu {
            let zero = self.konst(0);
            self.push(Inst::Bin { op, d, a: d, b: zero });
        }
        Ok(())
    }

    pub(super) fn ternary(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        let ty = self.ty1(o)?;
        if o.base == "lop3" {
            self.want(ops, 5, o.full)?;
            let lut = match &ops[4] {
                Operand::Lit(Lit::Int(v)) if (0..256).contains(v) => *v as u8,
                _ => return self.err("`lop3` needs an immediate truth table"),
            };
            let d = self.dst(&ops[0])?;
            let a = self.src(&ops[1], ty)?;
            let b = self.src(&ops[2], ty)?;
            let c = self.src(&ops[3], ty)?;
            self.push(Inst::Tern { op: TernOp::Lop3(lut), d, a, b, c });
            return Ok(());
        }
        self.want(ops, 4, o.full)?;
        let mut tys = [ty, ty, ty];
        let op = match o.base {
            "mad" | "fma" => {
                if matches!(ty, Ty::F16x2 | Ty::BF16x2) {
                    TernOp::FmaH2(if ty == Ty::F16x2 { F::F16 } else { F::BF16 })
                } else if let Some(f) = ty.float() {
                    TernOp::Fma(f, o.rnd().unwrap_or(Rnd::Rn), o.flags())
                } else {
                    let Some(w) = ty.int_w() else {
                        return self.unsupported(o.full);
                    };
                    let s = ty.is_signed();
                    if o.has("wide") {
                        if w == W::W64 {
                            return self.unsupported(o.full);
                        }
                        let wide = if w == W::W16 { Ty::B32 } else { Ty::B64 };
                        tys[2] = wide;
                        if s {
                            TernOp::MadWideS(w)
                        } else {
                            TernOp::MadWideU(w)
                        }
                    } else if o.has("hi") {
                        if o.has("sat") {
                            if ty != Ty::S32 {
                                return self.unsupported(o.full);
                            }
                            TernOp::MadHiSatS32
                        } else if s {
                            TernOp::MadHiS(w)
                        } else {
                            TernOp::MadHiU(w)
                        }
                    } else if o.has("cc") {
                        return self.unsupported(o.full);
                    } else {
                        TernOp::MadLo(w)
                    }
                }
            }
            "mad24" => {
                if o.has("hi") || ty.int_w() != Some(W::W32) {
                    return self.unsupported(o.full);
                }
                TernOp::Mad24Lo(ty.is_signed())
            }
            "sad" => {
                let Some(w) = ty.int_w() else {
                    return self.unsupported(o.full);
                };
                if ty.is_signed() {
                    TernOp::SadS(w)
                } else {
                    TernOp::SadU(w)
                }
            }
            "selp" => {
                tys[2] = Ty::Pred;
                TernOp::Selp
            }
            "slct" => {
                // slct.dtype.ctype d, a, b, c
                let cty = o.types.get(1).copied().unwrap_or(Ty::S32);
                tys = [o.types[0], o.types[0], cty];
                match cty {
                    Ty::F32 => TernOp::SlctF(o.has("ftz")),
                    Ty::S32 => TernOp::SlctS(W::W32),
                    _ => return self.unsupported(o.full),
                }
            }
            "bfe" => {
                let Some(w) = ty.int_w().filter(|w| *w != W::W16) else {
                    return self.unsupported(o.full);
                };
                tys = [ty, Ty::U32, Ty::U32];
                TernOp::Bfe { w, signed: ty.is_signed() }
            }
            "prmt" => {
                let mode = if o.has("f4e") {
                    Prmt::F4e
                } else if o.has("b4e") {
                    Prmt::B4e
                } else if o.has("rc8") {
                    Prmt::Rc8
                } else if o.has("ecl") {
                    Prmt::Ecl
                } else if o.has("ecr") {
                    Prmt::Ecr
                } else if o.has("rc16") {
                    Prmt::Rc16
                } else {
                    Prmt::Default
                };
                TernOp::Prmt(mode)
            }
            "shf" => {
                let wrap = o.has("wrap");
                tys[2] = Ty::U32;
                if o.has("l") {
                    TernOp::ShfL { w: true, wrap }
                } else if o.has("r") {
                    TernOp::ShfR { wrap }
                } else {
                    return self.unsupported(o.full);
                }
            }
            _ => return self.unsupported(o.full),
        };
        let d = self.dst(&ops[0])?;
        let a = self.src(&ops[1], tys[0])?;
        let b = self.src(&ops[2], tys[1])?;
        let c = if o.base == "selp" {
            let (c, neg) = self.pred_src(&ops[3])?;
            if neg {
                let t = self.new_reg(1);
                self.push(Inst::Un { op: UnOp::PredNot, d: t, a: c });
                t
            } else {
                c
            }
        } else {
            self.src(&ops[3], tys[2])?
        };
        self.push(Inst::Tern { op, d, a, b, c });
        Ok(())
    }

    pub(super) fn unary(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 2, o.full)?;
        let ty = self.ty1(o)?;
        let ftz = o.has("ftz");
        let approx = o.has("approx");
        let mode = if approx {
            FMode::Approx
        } else {
            match o.rnd() {
                Some(r) => FMode::Ieee(r),
                None => FMode::Approx,
            }
        };
        let op = match (o.base, ty.float(), ty.int_w()) {
            ("not", _, _) if ty == Ty::Pred => UnOp::PredNot,
            ("not", _, _) => UnOp::Not(mask_bits(ty.bits())),
            ("cnot", _, _) => UnOp::CNot(mask_bits(ty.bits())),
            ("neg", Some(f), _) => UnOp::FNeg(f, ftz),
            ("abs", Some(f), _) => UnOp::FAbs(f, ftz),
            ("neg", None, Some(w)) => UnOp::Neg(w),
            ("abs", None, Some(w)) => UnOp::Abs(w),
            ("popc", None, Some(w)) if w != W::W16 => UnOp::Popc(w),
            ("clz", None, Some(w)) if w != W::W16 => UnOp::Clz(w),
            ("brev", None, Some(w)) if w != W::W16 => UnOp::Brev(w),
            ("bfind", None, Some(w)) if w != W::W16 => {
                UnOp::Bfind { w, signed: ty.is_signed(), shiftamt: o.has("shiftamt") }
            }
            ("rcp", Some(f @ (F::F32 | F::F64)), _) => UnOp::FRcp(f, mode, ftz),
            ("sqrt", Some(f @ (F::F32 | F::F64)), _) => UnOp::FSqrt(f, mode, ftz),
            ("rsqrt", Some(f @ (F::F32 | F::F64)), _) => UnOp::FRsqrt(f, ftz),
            ("sin", Some(F::F32), _) => UnOp::FSin(ftz),
            ("cos", Some(F::F32), _) => UnOp::FCos(ftz),
            ("lg2", Some(F::F32), _) => UnOp::FLg2(ftz),
            ("ex2", Some(f @ (F::F32 | F::F16 | F::BF16)), _) => UnOp::FEx2(f, ftz),
            ("tanh", Some(f @ (F::F32 | F::F16 | F::BF16)), _) => UnOp::FTanh(f),
            ("testp", Some(f @ (F::F32 | F::F64)), _) => {
                let t = if o.has("finite") {
                    Testp::Finite
                } else if o.has("infinite") {
                    Testp::Infinite
                } else if o.has("number") {
                    Testp::Number
                } else if o.has("notanumber") {
                    Testp::NotANumber
                } else if o.has("normal") {
                    Testp::Normal
                } else if o.has("subnormal") {
                    Testp::Subnormal
                } else {
                    return self.unsupported(o.full);
                };
                UnOp::Testp(f, t)
            }
            _ => return self.unsupported(o.full),
        };
        let d = self.dst(&ops[0])?;
        let sty = match o.base {
            "popc" | "clz" | "brev" | "bfind" => ty,
            _ => ty,
        };
        let a = self.src(&ops[1], sty)?;
        self.push(Inst::Un { op, d, a });
        Ok(())
    }

    fn cmp_of(&self, s: &str) -> Option<Cmp> {
        Some(match s {
            "eq" => Cmp::Eq,
            "ne" => Cmp::Ne,
            "lt" | "lo" => Cmp::Lt,
            "le" | "ls" => Cmp::Le,
            "gt" | "hi" => Cmp::Gt,
            "ge" | "hs" => Cmp::Ge,
            "equ" => Cmp::Equ,
            "neu" => Cmp::Neu,
            "ltu" => Cmp::Ltu,
            "leu" => Cmp::Leu,
            "gtu" => Cmp::Gtu,
            "geu" => Cmp::Geu,
            "num" => Cmp::Num,
            "nan" => Cmp::Nan,
            _ => return None,
        })
    }

    pub(super) fn setp(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        let Some(cmp) = o.mods.first().and_then(|m| self.cmp_of(m)) else {
            return self.unsupported(o.full);
        };
        let bop = if o.has("and") {
            Some(BoolOp::And)
        } else if o.has("or") {
            Some(BoolOp::Or)
        } else if o.has("xor") {
            Some(BoolOp::Xor)
        } else {
            None
        };
        // `set.cmp.dtype.stype`: the last type is the compared one.
        let sty = self.ty1(o)?;
        let cty = match (sty.float(), sty.int_w()) {
            (Some(f), _) => CmpTy::F(f),
            (None, Some(w)) => {
                if sty.is_signed() {
                    CmpTy::S(w)
                } else if matches!(sty, Ty::B16 | Ty::B32 | Ty::B64) {
                    CmpTy::B(w)
                } else {
                    CmpTy::U(w)
                }
            }
            _ => return self.unsupported(o.full),
        };
        if matches!(cty, CmpTy::B(_)) && !matches!(cmp, Cmp::Eq | Cmp::Ne) {
            return self.err(format!("`{}`: bit types compare only with eq and ne", o.full));
        }
        let n = if bop.is_some() { 4 } else { 3 };
        self.want(ops, n, o.full)?;
        let a = self.src(&ops[1], sty)?;
        let b = self.src(&ops[2], sty)?;
        let comb = match bop {
            Some(bo) => {
                let (c, neg) = self.pred_src(&ops[3])?;
                Some((bo, c, neg))
            }
            None => None,
        };
        let ftz = o.has("ftz");
        if o.base == "set" {
            let dty = o.types.first().copied().unwrap_or(Ty::U32);
            let d = self.dst(&ops[0])?;
            self.push(Inst::Set { ty: cty, cmp, ftz, d, float_result: dty == Ty::F32, a, b, comb });
            return Ok(());
        }
        let (d, dn) = match &ops[0] {
            Operand::Pair(p, q) => {
                let d = self.dst(&Operand::Name(p.clone()))?;
                let q = self.dst(&Operand::Name(q.clone()))?;
                (d, Some(q))
            }
            x => (self.dst(x)?, None),
        };
        self.push(Inst::Setp { ty: cty, cmp, ftz, d, dn, a, b, comb });
        Ok(())
    }

    /// `bfi.type d, f, b, pos, len` on 32- or 64-bit integers: field `f` inserted into `b`.
    pub(super) fn bfi(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 5, o.full)?;
        let ty = self.ty1(o)?;
        let w = ty.int_w().filter(|w| *w != W::W16).ok_or(()).or_else(|_| self.unsupported(o.full))?;
        let d = self.dst(&ops[0])?;
        let f = self.src(&ops[1], ty)?;
        let b = self.src(&ops[2], ty)?;
        let pos = self.src(&ops[3], Ty::U32)?;
        let len = self.src(&ops[4], Ty::U32)?;
        self.push(Inst::Bfi { w, d, f, b, pos, len });
        Ok(())
    }

    /// `bmsk.clamp.b32 d, a, b`: a mask of `b` bits from bit `a`.
    pub(super) fn bmsk(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        self.want(ops, 3, o.full)?;
        if !o.has("clamp") {
            return self.unsupported(o.full);
        }
        let d = self.dst(&ops[0])?;
        let a = self.src(&ops[1], Ty::U32)?;
        let b = self.src(&ops[2], Ty::U32)?;
        self.push(Inst::Bin { op: BinOp::Bmsk, d, a, b });
        Ok(())
    }
}
