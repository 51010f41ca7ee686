//! From an opcode to the family that lowers it: the opcode split into base, types and modifiers
//! ([`Opc`]), then one arm per base name.

use super::*;

/// Opcode split into its base name, its type suffixes (in order) and its other modifiers.
pub(super) struct Opc<'a> {
    pub(super) base: &'a str,
    pub(super) types: Vec<Ty>,
    pub(super) mods: Vec<&'a str>,
    pub(super) full: &'a str,
}

impl<'a> Opc<'a> {
    pub(super) fn new(op: &'a str) -> Self {
        let mut it = op.split('.');
        let base = it.next().unwrap_or("");
        let mut types = Vec::new();
        let mut mods = Vec::new();
        for p in it {
            match Ty::parse(p) {
                Some(t) => types.push(t),
                None => mods.push(p),
            }
        }
        Opc { base, types, mods, full: op }
    }
    pub(super) fn has(&self, m: &str) -> bool {
        self.mods.contains(&m)
    }
    pub(super) fn rnd(&self) -> Option<Rnd> {
        for m in &self.mods {
            match *m {
                "rn" => return Some(Rnd::Rn),
                "rz" => return Some(Rnd::Rz),
                "rm" => return Some(Rnd::Rm),
                "rp" => return Some(Rnd::Rp),
                _ => {}
            }
        }
        None
    }
    pub(super) fn int_rnd(&self) -> Option<Rnd> {
        for m in &self.mods {
            match *m {
                "rni" => return Some(Rnd::Rn),
                "rzi" => return Some(Rnd::Rz),
                "rmi" => return Some(Rnd::Rm),
                "rpi" => return Some(Rnd::Rp),
                _ => {}
            }
        }
        None
    }
    pub(super) fn flags(&self) -> FFlags {
        FFlags { ftz: self.has("ftz"), sat: self.has("sat") }
    }
}

impl FnLower<'_> {
    pub(super) fn ty1(&self, o: &Opc) -> Res<Ty> {
        match o.types.last() {
            Some(t) => Ok(*t),
            None => self.err(format!("`{}` has no type", o.full)),
        }
    }

    pub(super) fn inst(&mut self, i: &parse::Inst) -> Res<()> {
        let o = Opc::new(&i.opcode);
        let ops = &i.operands;
        self.provenance.observe(&i.opcode, ops);
        if packed_int::signedness(&o).is_some() {
            return self.packed_int(&o, ops);
        }
        match o.base {
            "mov" => self.mov(&o, ops),
            "add" | "sub" if o.has("cc") => self.carry_arith(&o, ops),
            "addc" | "subc" => self.carry_arith(&o, ops),
            "add" | "sub" | "mul" | "div" | "rem" | "min" | "max" | "and" | "or" | "xor" | "shl" | "shr"
            | "copysign" | "mul24" => self.binary(&o, ops),
            "mad" | "fma" | "mad24" | "sad" | "selp" | "slct" | "bfe" | "prmt" | "shf" | "lop3" => {
                self.ternary(&o, ops)
            }
            "neg" | "abs" | "not" | "cnot" | "popc" | "clz" | "brev" | "bfind" | "rcp" | "sqrt" | "rsqrt" | "sin"
            | "cos" | "lg2" | "ex2" | "tanh" | "testp" => self.unary(&o, ops),
            "bfi" => self.bfi(&o, ops),
            "bmsk" => self.bmsk(&o, ops),
            "isspacep" => self.isspacep(&o, ops),
            "setp" | "set" => self.setp(&o, ops),
            "cvt" => self.cvt(&o, ops),
            "cvta" => self.cvta(&o, ops),
            "ld" | "ldu" => self.ld(&o, ops),
            "st" => self.st(&o, ops),
            "atom" | "red" => self.atom(&o, ops),
            "bra" | "brx" => self.bra(&o, ops),
            "ret" => {
                self.push(Inst::Ret);
                Ok(())
            }
            "exit" => {
                self.push(Inst::Exit);
                Ok(())
            }
            "trap" | "brkpt" => {
                self.push(Inst::Trap);
                Ok(())
            }
            "bar" | "barrier" => self.bar(&o, ops),
            "membar" | "fence" | "prefetch" | "prefetchu" | "nanosleep" | "pmevent" | "discard" | "applypriority"
            | "createpolicy" => {
                if o.base == "createpolicy" {
                    // Cache policies are hints: produce a zero policy.
                    let d = self.dst(&ops[0])?;
                    let z = self.konst(0);
                    self.push(Inst::Un { op: UnOp::Mov(u64::MAX), d, a: z });
                    return Ok(());
                }
                self.push(Inst::Nop);
                Ok(())
            }
            "shfl" => self.shfl(&o, ops),
            "vote" => self.vote(&o, ops),
            "redux" => self.redux(&o, ops),
            "activemask" => self.activemask(&o, ops),
            "call" => self.call(&o, ops),
            "mma" => self.mma(&o, ops),
            "ldmatrix" | "stmatrix" => self.ldst_matrix(&o, ops),
            "movmatrix" => self.movmatrix(&o, ops),
            "cp" => self.cp(&o, ops),
            "mbarrier" => self.mbarrier(&o, ops),
            "elect" => self.elect(&o, ops),
            // Register allocation hints and the programmatic-launch controls, which have nothing
            // to do where a launch's blocks run one after another.
            "setmaxnreg" | "griddepcontrol" => {
                self.push(Inst::Nop);
                Ok(())
            }
            "wgmma" => self.wgmma(&o, ops),
            "tcgen05" => self.refused(o.full, "tensor memory (tcgen05, sm_100) is not modelled on the CPU"),
            _ => self.unsupported(&i.opcode),
        }
    }
}
