//! Control: block barriers (`bar`, `barrier`, their reductions and arrivals) and calls, with
//! arguments and results copied between the caller's and the callee's frames.

use super::*;

impl FnLower<'_> {
    pub(super) fn bar(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        if o.has("warp") {
            // Warps run in lockstep in the interpreter.
            self.push(Inst::WarpSync);
            return Ok(());
        }
        let arrive = o.has("arrive");
        if o.has("red") {
            let kind = if o.has("popc") {
                BarRed::Popc
            } else if o.has("and") {
                BarRed::And
            } else if o.has("or") {
                BarRed::Or
            } else {
                return self.unsupported(o.full);
            };
            if ops.len() != 3 && ops.len() != 4 {
                return self.err(format!("`{}` takes 3 or 4 operands", o.full));
            }
            let d = self.dst(&ops[0])?;
            let count = if ops.len() == 4 { Some(self.src(&ops[2], Ty::U32)?) } else { None };
            let (p, neg) = self.pred_src(ops.last().unwrap())?;
            self.push(Inst::Bar { count, red: Some((kind, p, neg)), d: Some(d), arrive: false });
            return Ok(());
        }
        if ops.is_empty() && o.base == "barrier" {
            self.push(Inst::Bar { count: None, red: None, d: None, arrive });
            return Ok(());
        }
        if ops.is_empty() || ops.len() > 2 {
            return self.err(format!("`{}` takes a barrier id and an optional thread count", o.full));
        }
        let count = if ops.len() == 2 { Some(self.src(&ops[1], Ty::U32)?) } else { None };
        self.push(Inst::Bar { count, red: None, d: None, arrive });
        Ok(())
    }
}

impl FnLower<'_> {
    pub(super) fn call(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        // call{.uni} (rets), name, (args);   call name, (args);   call name;
        let mut k = 0;
        let mut ret_ops: &[Operand] = &[];
        if let Some(Operand::List(r)) = ops.first() {
            ret_ops = r;
            k = 1;
        }
        let Some(Operand::Name(fname)) = ops.get(k) else {
            return self.err(format!("`{}` needs a function name", o.full));
        };
        let arg_ops: &[Operand] = match ops.get(k + 1) {
            Some(Operand::List(a)) => a,
            None => &[],
            Some(_) => return self.err("indirect calls are not supported"),
        };
        if ops.len() > k + 2 {
            return self.err("indirect calls through a prototype are not supported");
        }
        let Some(&fi) = self.func_index.get(fname) else {
            return self.err(format!("call of undeclared function `{fname}`"));
        };
        let callee = &self.all[fi as usize];
        if callee.body.is_none() {
            return self.err(format!("call of `{fname}`, which has no body in this module"));
        }
        if callee.is_entry {
            return self.err(format!("call of kernel `{fname}`"));
        }
        if callee.params.len() != arg_ops.len() || callee.rets.len() != ret_ops.len() {
            return self.err(format!("call of `{fname}` with the wrong number of arguments"));
        }
        // Callee frame offsets follow the same layout rule as in its own lowering: returns, then params.
        let mut off = 0u64;
        let mut slots = Vec::new();
        for p in callee.rets.iter().chain(&callee.params) {
            let size = decl_size(p, None)?;
            off = align_up(off, decl_align(p)?);
            slots.push((off as u32, size as u32));
            off += size;
        }
        let mut rets = Vec::new();
        let mut args = Vec::new();
        for (i, r) in ret_ops.iter().enumerate() {
            let Operand::Name(n) = r else {
                return self.err("call results must be `.param` names");
            };
            let Some(Sym::Frame(c)) = self.lookup(n) else {
                return self.err(format!("call result `{n}` is not a `.param` variable"));
            };
            rets.push(CallArg { caller: c, callee: slots[i].0, size: slots[i].1 });
        }
        for (i, a) in arg_ops.iter().enumerate() {
            let Operand::Name(n) = a else {
                return self.err("call arguments must be `.param` names");
            };
            let Some(Sym::Frame(c)) = self.lookup(n) else {
                return self.err(format!("call argument `{n}` is not a `.param` variable"));
            };
            let s = slots[ret_ops.len() + i];
            args.push(CallArg { caller: c, callee: s.0, size: s.1 });
        }
        let Some(&func) = self.calls.get(&fi) else {
            return self.err(format!("call of `{fname}`, which this function does not name"));
        };
        self.push(Inst::Call { func, args, rets });
        Ok(())
    }

    /// `bra label`: the target is resolved when the body ends ([`FnLower::resolve_labels`]).
    pub(super) fn bra(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        if o.base == "brx" {
            return self.unsupported(o.full);
        }
        self.want(ops, 1, o.full)?;
        let Operand::Name(l) = &ops[0] else {
            return self.err("`bra` needs a label");
        };
        self.fixups.push((self.insts.len(), l.clone(), self.line, self.label_scopes.clone()));
        self.push(Inst::Bra { target: 0, reconv: 0 });
        Ok(())
    }
}
