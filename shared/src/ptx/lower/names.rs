//! Names resolved: what a declared name stands for ([`Sym`]), the sizes and alignments of
//! declarations, registers (128-bit ones as pairs), frame slots, kernel parameters, shared and
//! module variables, special registers, and source and destination operands as registers.

use super::*;

/// What a 128-bit register may do: registers are 64 bits wide on the CPU, so a `.b128` register
/// is a pair of them (low half first) that `ld`, `st` and `mov` `.b128` move as a whole.
const B128_REASON: &str =
    "a 128-bit register is a pair of 64-bit registers on the CPU, which only `ld`, `st` and `mov` `.b128` move";

/// What a name stands for where it is used.
#[derive(Clone, Copy, Debug)]
pub(super) enum Sym {
    Reg(R),
    Frame(u32),
    KParam(u32),
    /// A static `.shared` variable by id; its offset is the block's (`shared_layout::Layout`).
    Shared(u32),
    DynShared,
    Var(u64),
    Func,
}

pub(super) fn align_up(x: u64, a: u64) -> u64 {
    let a = a.max(1);
    x.div_ceil(a) * a
}

pub(super) fn decl_ty(d: &VarDecl) -> Result<Ty, PtxError> {
    Ty::parse(d.ty.trim_start_matches('.'))
        .ok_or_else(|| PtxError::new(d.line, format!("unsupported type `{}` of `{}`", d.ty, d.name)))
}

pub(super) fn decl_size(d: &VarDecl, init_len: Option<u64>) -> Result<u64, PtxError> {
    let ty = decl_ty(d)?;
    let mut n: u64 = d.vec as u64;
    for dim in &d.dims {
        match dim {
            Some(k) => n = n.saturating_mul(*k),
            None => match init_len {
                Some(l) => n = n.saturating_mul(l),
                None => n = 0,
            },
        }
    }
    Ok(n.saturating_mul(ty.bytes() as u64))
}

pub(super) fn decl_align(d: &VarDecl) -> Result<u64, PtxError> {
    let ty = decl_ty(d)?;
    Ok(d.align.map(|a| a as u64).unwrap_or((ty.bytes() * d.vec) as u64).max(1))
}

pub(super) fn sreg_of(name: &str) -> Option<Sreg> {
    let dim = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    if let Some((base, d)) = name.rsplit_once('.') {
        let d = dim(d)?;
        return Some(match base {
            "%tid" => Sreg::Tid(d),
            "%ntid" => Sreg::Ntid(d),
            "%ctaid" => Sreg::Ctaid(d),
            "%nctaid" => Sreg::Nctaid(d),
            "%cluster_ctaid" | "%cluster_ctarank" => Sreg::Zero,
            "%cluster_nctaid" => return Some(Sreg::Zero),
            _ => return None,
        });
    }
    Some(match name {
        "%laneid" => Sreg::LaneId,
        "%warpid" => Sreg::WarpId,
        "%nwarpid" => Sreg::NWarpId,
        "%smid" => Sreg::SmId,
        "%nsmid" => Sreg::NSmId,
        "%gridid" => Sreg::GridId,
        "%lanemask_eq" => Sreg::LaneMaskEq,
        "%lanemask_lt" => Sreg::LaneMaskLt,
        "%lanemask_le" => Sreg::LaneMaskLe,
        "%lanemask_gt" => Sreg::LaneMaskGt,
        "%lanemask_ge" => Sreg::LaneMaskGe,
        "%dynamic_smem_size" => Sreg::DynSmemSize,
        "%total_smem_size" => Sreg::TotalSmemSize,
        "%cluster_ctarank" | "%cluster_nctarank" | "%is_explicit_cluster" => Sreg::Zero,
        n if n.starts_with("%envreg") || n.starts_with("%pm") => Sreg::Zero,
        _ => return None,
    })
}

impl FnLower<'_> {
    pub(super) fn new_reg(&mut self, bits: u32) -> R {
        self.reg_bits.push(bits);
        (self.reg_bits.len() - 1) as R
    }

    /// A declared register of type `ty`: a pair of 64-bit registers for `.b128`, named by the first.
    fn new_reg_of(&mut self, ty: Ty, bits: u32) -> R {
        if ty != Ty::B128 {
            return self.new_reg(bits);
        }
        let lo = self.new_reg(64);
        self.new_reg(64);
        self.wide.insert(lo);
        lo
    }

    /// A 128-bit register operand of `op`: its low and high halves.
    pub(super) fn wide_pair(&mut self, o: &Operand, op: &str) -> Res<[R; 2]> {
        if let Operand::Name(n) = o {
            if let Some(Sym::Reg(r)) = self.lookup(n) {
                if self.wide.contains(&r) {
                    return Ok([r, r + 1]);
                }
            }
        }
        self.err(format!("`{op}` needs a 128-bit register operand"))
    }

    /// Fails where register `r` (named `n`) is a 128-bit register, which only `ld`, `st` and `mov`
    /// `.b128` take (through [`FnLower::wide_pair`]).
    pub(super) fn narrow(&self, r: R, n: &str) -> Res<R> {
        if self.wide.contains(&r) {
            return self.err(format!(
                "128-bit register `{n}` used by an instruction other than `ld`, `st` or `mov` `.b128`: {B128_REASON}"
            ));
        }
        Ok(r)
    }

    pub(super) fn frame_slot(&mut self, size: u64, align: u64) -> Res<u32> {
        let off = align_up(self.frame, align.max(1));
        self.frame = off + size;
        if self.frame > MAX_LOCAL_BYTES {
            return self.err(format!("local frame of {} bytes exceeds the {MAX_LOCAL_BYTES} byte limit", self.frame));
        }
        Ok(off as u32)
    }

    pub(super) fn declare(&mut self, d: &VarDecl, shared: &mut std::vec::IntoIter<Sym>) -> Res<()> {
        self.line = d.line;
        match d.space.as_str() {
            ".reg" => {
                let ty = decl_ty(d)?;
                if ty == Ty::B128 && d.vec > 1 {
                    return self.err(format!("vector of 128-bit registers `{}` is not supported", d.name));
                }
                let bits = ty.bits().min(64) * d.vec;
                if bits > 64 {
                    return self.err(format!("register `{}` wider than 64 bits is not supported", d.name));
                }
                match d.count {
                    Some(k) => {
                        if k > 1 << 20 {
                            return self.err(format!("too many registers `{}<{k}>`", d.name));
                        }
                        for i in 0..k {
                            let r = self.new_reg_of(ty, bits);
                            self.scopes.last_mut().unwrap().insert(format!("{}{}", d.name, i), Sym::Reg(r));
                        }
                    }
                    None => {
                        let r = self.new_reg_of(ty, bits);
                        self.scopes.last_mut().unwrap().insert(d.name.clone(), Sym::Reg(r));
                    }
                }
            }
            ".local" | ".param" => {
                if d.init.is_some() {
                    return self.err(format!("initialized `{}` variable `{}` is not supported", d.space, d.name));
                }
                let size = decl_size(d, None)?;
                let off = self.frame_slot(size, decl_align(d)?)?;
                self.scopes.last_mut().unwrap().insert(d.name.clone(), Sym::Frame(off));
            }
            ".shared" => {
                let sym = shared.next().unwrap_or(Sym::DynShared);
                self.scopes.last_mut().unwrap().insert(d.name.clone(), sym);
            }
            s => return self.err(format!("unsupported `{s}` declaration of `{}` inside a function", d.name)),
        }
        Ok(())
    }

    /// Where static shared variable `id` lies in this function's block.
    pub(super) fn shared_offset(&self, id: u32) -> Res<u32> {
        match self.layout.offset(id) {
            Some(o) => Ok(o),
            None => self.err("a shared variable has no place in this block"),
        }
    }

    pub(super) fn lookup(&self, name: &str) -> Option<Sym> {
        for s in self.scopes.iter().rev() {
            if let Some(v) = s.get(name) {
                return Some(*v);
            }
        }
        self.globals.get(name).copied()
    }

    pub(super) fn konst(&mut self, v: u64) -> R {
        if let Some(&r) = self.consts.get(&v) {
            return r;
        }
        let r = self.new_reg(64);
        self.consts.insert(v, r);
        self.const_list.push((r, v));
        r
    }

    fn sreg(&mut self, s: Sreg) -> R {
        if let Some(&r) = self.sregs.get(&s) {
            return r;
        }
        let r = self.new_reg(32);
        self.sregs.insert(s, r);
        r
    }

    pub(super) fn push(&mut self, inst: Inst) {
        self.insts.push(Instr { guard: self.guard, inst, line: self.line, contractable: false });
    }

    fn lit_bits(&self, l: &Lit, ty: Ty) -> u64 {
        let m = mask_bits(ty.bits());
        match (l, ty.float()) {
            (Lit::Int(v), None) => (*v as u64) & m,
            (Lit::Int(v), Some(_)) => {
                // Integer literals in float instructions are bit patterns when they fit, as ptxas reads them.
                (*v as u64) & m
            }
            (Lit::F32(b), Some(F::F64)) => (f32::from_bits(*b) as f64).to_bits(),
            (Lit::F32(b), Some(F::F16)) => half::f16::from_f32(f32::from_bits(*b)).to_bits() as u64,
            (Lit::F32(b), Some(F::BF16)) => half::bf16::from_f32(f32::from_bits(*b)).to_bits() as u64,
            (Lit::F32(b), _) => *b as u64 & m,
            (Lit::F64(b), Some(F::F32)) => (f64::from_bits(*b) as f32).to_bits() as u64,
            (Lit::F64(b), Some(F::F16)) => half::f16::from_f64(f64::from_bits(*b)).to_bits() as u64,
            (Lit::F64(b), Some(F::BF16)) => half::bf16::from_f64(f64::from_bits(*b)).to_bits() as u64,
            (Lit::F64(b), _) => *b & m,
            (Lit::Float(f), Some(_)) => float_bits(ty, *f),
            (Lit::Float(f), None) => (*f as i64 as u64) & m,
        }
    }

    /// A source operand as a register (immediates become constant registers).
    pub(super) fn src(&mut self, o: &Operand, ty: Ty) -> Res<R> {
        match o {
            Operand::Name(n) => self.name_src(n, 0),
            Operand::SymOff(n, off) => self.name_src(n, *off),
            Operand::Lit(l) => {
                let b = self.lit_bits(l, ty);
                Ok(self.konst(b))
            }
            Operand::Not(_) => self.err("a negated predicate is not allowed here"),
            _ => self.err("unexpected operand form"),
        }
    }

    fn name_src(&mut self, n: &str, off: i64) -> Res<R> {
        if let Some(s) = sreg_of(n) {
            return Ok(self.sreg(s));
        }
        if n == "%clock" || n == "%clock64" || n.starts_with("%globaltimer") {
            return self.err(format!("`{n}` may only be read by `mov`"));
        }
        match self.lookup(n) {
            Some(Sym::Reg(r)) if off == 0 => self.narrow(r, n),
            Some(Sym::Reg(_)) => self.err(format!("register `{n}` used with an offset")),
            Some(Sym::KParam(o)) => Ok(self.konst((o as i64 + off) as u64)),
            Some(Sym::Shared(id)) => {
                let o = self.shared_offset(id)?;
                Ok(self.konst((o as i64 + off) as u64))
            }
            Some(Sym::DynShared) => Ok(self.konst((self.dyn_base as i64 + off) as u64)),
            Some(Sym::Var(a)) => Ok(self.konst(a.wrapping_add(off as u64))),
            Some(Sym::Frame(_)) => self.err(format!("the address of `{n}` may only be taken by `mov`")),
            Some(Sym::Func) => self.err(format!("function pointers (`{n}`) are not supported")),
            None => self.err(format!("undeclared name `{n}`")),
        }
    }

    pub(super) fn pred_src(&mut self, o: &Operand) -> Res<(R, bool)> {
        match o {
            Operand::Not(n) => Ok((self.name_src(n, 0)?, true)),
            Operand::Lit(Lit::Int(v)) => Ok((self.konst((*v != 0) as u64), false)),
            o => Ok((self.src(o, Ty::Pred)?, false)),
        }
    }

    pub(super) fn dst(&mut self, o: &Operand) -> Res<R> {
        match o {
            Operand::Name(n) if n == "_" => Ok(self.new_reg(64)),
            Operand::Name(n) => match self.lookup(n) {
                Some(Sym::Reg(r)) => self.narrow(r, n),
                Some(_) => self.err(format!("`{n}` is not a register")),
                None if sreg_of(n).is_some() => self.err(format!("cannot write special register `{n}`")),
                None => self.err(format!("undeclared register `{n}`")),
            },
            _ => self.err("destination must be a register"),
        }
    }

    pub(super) fn bits_of(&self, r: R) -> u32 {
        self.reg_bits[r as usize]
    }
}

impl FnLower<'_> {
    /// Registers of a brace-enclosed vector operand (`{%r1, %r2}`), or of a single register.
    pub(super) fn reg_list(&mut self, op: &Operand, ty: Ty, dst: bool) -> Res<Vec<R>> {
        let items: Vec<&Operand> = match op {
            Operand::Vec(v) => v.iter().collect(),
            x => vec![x],
        };
        items.into_iter().map(|x| if dst { self.dst(x) } else { self.src(x, ty) }).collect()
    }

    /// Points every branch at its label: the innermost of the `{ }` blocks open at the branch
    /// that defines the label.
    pub(super) fn resolve_labels(&mut self) -> Res<()> {
        for (at, label, line, open) in std::mem::take(&mut self.fixups) {
            let found = open.iter().rev().find_map(|b| self.labels.get(&(*b, label.clone())));
            let Some(&t) = found else {
                return Err(PtxError::new(line, format!("undefined label `{label}`")));
            };
            if let Inst::Bra { target, .. } = &mut self.insts[at].inst {
                *target = t;
            }
        }
        Ok(())
    }
}
