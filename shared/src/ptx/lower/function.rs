//! Lowering one function: its parameters placed, its body walked statement by statement
//! (declarations, labels, `{ }` blocks, guarded instructions), branches resolved to their labels,
//! reconvergence points set, and registers that some path reads before any write given a value.

use super::*;

/// The state of lowering one copy of one function: its scopes of names, registers, constants and
/// special registers so far, the instructions emitted, and the labels and branches to join.
pub(super) struct FnLower<'m> {
    pub(super) globals: &'m HashMap<String, Sym>,
    pub(super) func_index: &'m HashMap<String, u32>,
    pub(super) all: &'m [parse::Func],
    /// The block this copy of the function is lowered for.
    pub(super) layout: &'m Layout,
    /// The copies its calls go to, by the callee's index in `all`.
    pub(super) calls: &'m HashMap<u32, u32>,
    pub(super) dyn_base: u32,
    pub(super) scopes: Vec<HashMap<String, Sym>>,
    pub(super) reg_bits: Vec<u32>,
    pub(super) consts: HashMap<u64, R>,
    pub(super) const_list: Vec<(R, u64)>,
    pub(super) sregs: HashMap<Sreg, R>,
    pub(super) insts: Vec<Instr>,
    /// Labels by `{ }` block and name: a label is visible in its block and the blocks inside it
    /// (Triton's inline assembly repeats `waitLoop:` in block after block).
    pub(super) labels: HashMap<(u32, String), u32>,
    /// The blocks open here, outermost first, and the number of blocks opened so far.
    pub(super) label_scopes: Vec<u32>,
    pub(super) blocks: u32,
    /// Branches to resolve at the end: instruction, label, line, and the blocks open there.
    pub(super) fixups: Vec<(usize, String, u32, Vec<u32>)>,
    pub(super) frame: u64,
    pub(super) is_entry: bool,
    pub(super) line: u32,
    pub(super) guard: Option<(R, bool)>,
    /// The carry flag of `add.cc`/`addc` and friends, allocated on first use.
    pub(super) cc: Option<R>,
    /// The low halves of the 128-bit registers (each a pair: the high half is the next register).
    pub(super) wide: HashSet<R>,
    /// `((line, source register), typemap code)` of each element of each `st`: what a store says
    /// about the bytes it writes.
    pub(super) store_types: Vec<((u32, R), u8)>,
    /// The float type each register last held, for `store_types`.
    pub(super) provenance: crate::ptx::typemap::Provenance,
}

impl<'m> FnLower<'m> {
    pub(super) fn new(
        globals: &'m HashMap<String, Sym>,
        func_index: &'m HashMap<String, u32>,
        all: &'m [parse::Func],
        layout: &'m Layout,
        calls: &'m HashMap<u32, u32>,
    ) -> Self {
        FnLower {
            globals,
            func_index,
            all,
            layout,
            calls,
            dyn_base: layout.dyn_base,
            scopes: vec![HashMap::new()],
            reg_bits: Vec::new(),
            consts: HashMap::new(),
            const_list: Vec::new(),
            sregs: HashMap::new(),
            insts: Vec::new(),
            labels: HashMap::new(),
            label_scopes: vec![0],
            blocks: 0,
            wide: HashSet::new(),
            store_types: Vec::new(),
            provenance: Default::default(),
            fixups: Vec::new(),
            frame: 0,
            is_entry: false,
            line: 0,
            guard: None,
            cc: None,
        }
    }
}

impl FnLower<'_> {
    pub(super) fn err<T>(&self, msg: impl Into<String>) -> Res<T> {
        Err(PtxError::new(self.line, msg.into()))
    }
}

impl FnLower<'_> {
    pub(super) fn lower(mut self, f: &parse::Func, shared: Vec<Sym>) -> Res<Function> {
        self.is_entry = f.is_entry;
        self.line = f.line;
        if f.is_entry {
            let mut off = 0u64;
            for p in &f.params {
                off = align_up(off, decl_align(p)?);
                self.scopes[0].insert(p.name.clone(), Sym::KParam(off as u32));
                off += decl_size(p, None)?;
            }
        } else {
            for list in [&f.rets, &f.params] {
                for p in list.iter() {
                    if p.space != ".param" {
                        self.line = p.line;
                        return self.err(format!(
                            "parameter `{}` of `{}` is not a `.param` (register parameters are not supported)",
                            p.name, f.name
                        ));
                    }
                    let size = decl_size(p, None)?;
                    let off = self.frame_slot(size, decl_align(p)?)?;
                    self.scopes[0].insert(p.name.clone(), Sym::Frame(off));
                }
            }
        }
        let Some(body) = &f.body else {
            return Ok(Function {
                name: f.name.clone(),
                insts: Vec::new(),
                nregs: 0,
                consts: Vec::new(),
                sregs: Vec::new(),
                frame_size: self.frame as u32,
                stack_size: 0,
                exit_bound: Vec::new(),
                store_types: Vec::new(),
                contraction: Vec::new(),
            });
        };
        // A TMA kernel takes the address of its `CUtensorMap` parameter first (`cvta.param`), which
        // would be the refusal; the copy that needs it is the one worth naming.
        for s in body {
            if let Stmt::Inst(i) = s {
                if is_tma(&i.opcode) {
                    let what = if f.is_entry { "kernel" } else { "function" };
                    return Err(PtxError::new(
                        i.line,
                        format!("{what} `{}` uses `{}`: {TMA_REASON}", f.name, i.opcode),
                    ));
                }
            }
        }
        self.provenance = crate::ptx::typemap::Provenance::learn_shared(body.iter().filter_map(|s| match s {
            Stmt::Inst(i) => Some((i.opcode.as_str(), i.operands.as_slice())),
            _ => None,
        }));
        let mut shared = shared.into_iter();
        for s in body {
            match s {
                Stmt::Decl(d) => self.declare(d, &mut shared)?,
                Stmt::Label(l, line) => {
                    let block = *self.label_scopes.last().expect("the function's block");
                    if self.labels.insert((block, l.clone()), self.insts.len() as u32).is_some() {
                        return Err(PtxError::new(*line, format!("label `{l}` defined twice")));
                    }
                }
                Stmt::Open => {
                    self.scopes.push(HashMap::new());
                    self.blocks += 1;
                    self.label_scopes.push(self.blocks);
                }
                Stmt::Close => {
                    self.scopes.pop();
                    if self.label_scopes.len() > 1 {
                        self.label_scopes.pop();
                    }
                }
                Stmt::Inst(i) => {
                    self.line = i.line;
                    self.guard = match &i.guard {
                        None => None,
                        Some((p, neg)) => match self.lookup(p) {
                            Some(Sym::Reg(r)) => Some((r, *neg)),
                            _ => return self.err(format!("guard `{p}` is not a predicate register")),
                        },
                    };
                    self.inst(i)?;
                }
            }
        }
        // A body that runs off its end returns.
        self.guard = None;
        self.push(Inst::Ret);
        self.resolve_labels()?;
        warp_runs::gather_warp_matrix_rows(&mut self.insts);
        mark_reconvergence(&mut self.insts);
        let frame = align_up(self.frame, 16);
        let mut func = Function {
            name: f.name.clone(),
            insts: self.insts,
            nregs: self.reg_bits.len() as u32,
            consts: self.const_list,
            sregs: self.sregs.into_iter().map(|(s, r)| (r, s)).collect(),
            frame_size: frame as u32,
            stack_size: 0,
            exit_bound: Vec::new(),
            store_types: {
                let mut t = self.store_types;
                t.sort_unstable();
                t.dedup_by_key(|s| s.0);
                t
            },
            contraction: Vec::new(),
        };
        define_undefined(&mut func, &self.reg_bits, f.line);
        func.exit_bound = exit_bound(&func.insts);
        func.contraction = contract::contractions(&mut func);
        Ok(func)
    }

    pub(super) fn want(&self, ops: &[Operand], n: usize, op: &str) -> Res<()> {
        if ops.len() != n {
            return self.err(format!("`{op}` takes {n} operands, found {}", ops.len()));
        }
        Ok(())
    }

    pub(super) fn unsupported<T>(&self, op: &str) -> Res<T> {
        self.err(format!("unsupported instruction `{op}`"))
    }

    pub(super) fn refused<T>(&self, op: &str, why: &str) -> Res<T> {
        self.err(format!("unsupported instruction `{op}`: {why}"))
    }
}

/// Gives every register that some path reads before any write a defined value, zero, by a `mov`
/// at the function's entry. The hardware leaves such a register's contents undefined; here every
/// engine must produce the same bytes, and an engine that keeps registers from one thread or block
/// to the next would otherwise leak one thread's value into another. Compilers rarely leave such
/// a read, so most functions get no extra instruction.
fn define_undefined(func: &mut Function, reg_bits: &[u32], line: u32) {
    let (live, _) = crate::ptx::flow::live_in(func);
    let mut preset = vec![false; func.nregs as usize];
    func.consts.iter().for_each(|&(r, _)| preset[r as usize] = true);
    func.sregs.iter().for_each(|&(r, _)| preset[r as usize] = true);
    let undefined: Vec<R> =
        (0..func.nregs).filter(|&r| live[r as usize / 64] >> (r % 64) & 1 == 1 && !preset[r as usize]).collect();
    if undefined.is_empty() {
        return;
    }
    let zero = match func.consts.iter().find(|&&(_, v)| v == 0) {
        Some(&(r, _)) => r,
        None => {
            let r = func.nregs;
            func.nregs += 1;
            func.consts.push((r, 0));
            r
        }
    };
    let k = undefined.len() as u32;
    let mut insts: Vec<Instr> = undefined
        .iter()
        .map(|&d| Instr {
            guard: None,
            inst: Inst::Un { op: UnOp::Mov(mask_bits(reg_bits[d as usize])), d, a: zero },
            line,
            contractable: false,
        })
        .collect();
    insts.extend(std::mem::take(&mut func.insts));
    for ins in &mut insts {
        if let Inst::Bra { target, .. } = &mut ins.inst {
            *target += k;
        }
    }
    mark_reconvergence(&mut insts);
    func.insts = insts;
}
