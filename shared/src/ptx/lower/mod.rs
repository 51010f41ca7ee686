//! Lowering the syntax tree into the executor's instruction lists: names resolved to registers,
//! frame slots and addresses; opcodes decoded into typed operations; branch targets and
//! reconvergence points computed. Everything that can be rejected is rejected here.

use std::collections::{HashMap, HashSet};

use super::error::PtxError;
use super::ir::*;
use super::memory::Region;
use super::module::{Entry, Module, ParamInfo, PlacedVariable, VariableDecl};
use super::parse::{self, InitElem, Lit, Operand, Stmt, VarDecl};

mod asynchronous;
mod packed_int;
mod refusal;
mod shared_layout;
mod warp_runs;
mod wgmma;

use shared_layout::{Layout, SharedPlan};

/// Largest static + dynamic shared memory a block may use (bytes), as on sm_90.
pub const MAX_SHARED_BYTES: u64 = 228 * 1024;
/// Largest per-thread local frame (bytes), as the hardware allows.
pub const MAX_LOCAL_BYTES: u64 = 512 * 1024;

/// Why the Tensor Memory Accelerator's instructions are refused.
const TMA_REASON: &str = "TMA tensor copies (cp.async.bulk.tensor) are not supported on the CPU";

/// Whether an opcode belongs to the Tensor Memory Accelerator: a copy, reduction or prefetch through
/// a `CUtensorMap` (`cp.async.bulk.tensor`, `cp.reduce.async.bulk.tensor`,
/// `cp.async.bulk.prefetch.tensor`), or work on the descriptor itself (`prefetch.tensormap`,
/// `tensormap.replace`).
fn is_tma(opcode: &str) -> bool {
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

/// What a 128-bit register may do: registers are 64 bits wide on the CPU, so a `.b128` register
/// is a pair of them (low half first) that `ld`, `st` and `mov` `.b128` move as a whole.
const B128_REASON: &str =
    "a 128-bit register is a pair of 64-bit registers on the CPU, which only `ld`, `st` and `mov` `.b128` move";

#[derive(Clone, Copy, Debug)]
enum Sym {
    Reg(R),
    Frame(u32),
    KParam(u32),
    /// A static `.shared` variable by id; its offset is the block's (`shared_layout::Layout`).
    Shared(u32),
    DynShared,
    Var(u64),
    Func,
}

fn align_up(x: u64, a: u64) -> u64 {
    let a = a.max(1);
    x.div_ceil(a) * a
}

fn decl_ty(d: &VarDecl) -> Result<Ty, PtxError> {
    Ty::parse(d.ty.trim_start_matches('.'))
        .ok_or_else(|| PtxError::new(d.line, format!("unsupported type `{}` of `{}`", d.ty, d.name)))
}

fn decl_size(d: &VarDecl, init_len: Option<u64>) -> Result<u64, PtxError> {
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

fn decl_align(d: &VarDecl) -> Result<u64, PtxError> {
    let ty = decl_ty(d)?;
    Ok(d.align.map(|a| a as u64).unwrap_or((ty.bytes() * d.vec) as u64).max(1))
}

pub(crate) fn lower_module(text: &str, place: &mut super::module::Place<'_>) -> Result<Module, PtxError> {
    let pm = parse::parse(text)?;
    if pm.address_size == Some(32) {
        return Err(PtxError::new(1, "32-bit addressing (`.address_size 32`) is not supported".into()));
    }
    let mut globals: HashMap<String, Sym> = HashMap::new();
    let mut func_index: HashMap<String, u32> = HashMap::new();
    for (i, f) in pm.funcs.iter().enumerate() {
        match func_index.get(&f.name) {
            Some(&j) => {
                // A prototype followed by its definition: keep the definition.
                if pm.funcs[j as usize].body.is_none() {
                    func_index.insert(f.name.clone(), i as u32);
                } else if f.body.is_some() {
                    return Err(PtxError::new(f.line, format!("function `{}` is defined twice", f.name)));
                }
            }
            None => {
                func_index.insert(f.name.clone(), i as u32);
            }
        }
    }
    // Shared memory: laid out per kernel (shared_layout.rs).
    let plan = SharedPlan::new(&pm, &func_index)?;
    for (name, sym) in plan.module_vars() {
        globals.insert(name.to_string(), sym);
    }
    let mut var_regions: Vec<Region> = Vec::new();
    let mut var_names: Vec<String> = Vec::new();
    let mut pending_inits: Vec<(usize, &VarDecl)> = Vec::new();
    let mut placed: Vec<(PlacedVariable, &VarDecl)> = Vec::new();
    for v in &pm.vars {
        match v.space.as_str() {
            ".shared" => {}
            ".global" | ".const" => {
                let init_len = v.init.as_ref().map(|i| i.len() as u64 / v.vec as u64);
                let size = decl_size(v, init_len)?;
                if size >= (1u64 << REGION_SHIFT) {
                    return Err(PtxError::new(v.line, format!("variable `{}` is too large ({size} bytes)", v.name)));
                }
                let decl = VariableDecl {
                    name: &v.name,
                    size,
                    align: decl_align(v)?,
                    constant: v.space == ".const",
                    initialised: v.init.is_some(),
                };
                if let Some(addr) = place(&decl).map_err(|e| PtxError::new(v.line, e))? {
                    globals.insert(v.name.clone(), Sym::Var(addr));
                    placed.push((PlacedVariable { name: v.name.clone(), addr, size, init: Vec::new() }, v));
                    continue;
                }
                if var_regions.len() as u64 >= MAX_REGION_SLOTS {
                    return Err(PtxError::new(v.line, "too many module variables".into()));
                }
                let idx = var_regions.len();
                let region = Region::new(size, v.space == ".const")
                    .map_err(|e| PtxError::new(v.line, format!("variable `{}`: {e}", v.name)))?;
                var_regions.push(region);
                var_names.push(v.name.clone());
                globals.insert(v.name.clone(), Sym::Var(MODVAR_BASE + ((idx as u64) << REGION_SHIFT)));
                if v.init.is_some() {
                    pending_inits.push((idx, v));
                }
            }
            ".local" => {
                return Err(PtxError::new(
                    v.line,
                    format!("module-level `.local` variable `{}` is not supported", v.name),
                ))
            }
            s => return Err(PtxError::new(v.line, format!("unsupported module-level `{s}` variable `{}`", v.name))),
        }
    }
    for name in func_index.keys() {
        globals.entry(name.clone()).or_insert(Sym::Func);
    }
    for (idx, v) in pending_inits {
        let bytes = init_bytes(v, &globals, &plan)?;
        let region = &var_regions[idx];
        let n = bytes.len().min(region.size() as usize);
        region.write(0, &bytes[..n]);
    }
    let mut placed_vars = Vec::with_capacity(placed.len());
    for (mut p, v) in placed {
        if v.init.is_some() {
            p.init = init_bytes(v, &globals, &plan)?;
            p.init.truncate(p.size as usize);
        }
        placed_vars.push(p);
    }
    // Every kernel is a root with a block of its own; so is every function no kernel calls, so that
    // what it cannot lower is still refused. A function is lowered once per placement of the shared
    // variables it reaches (`SharedPlan::key`), its calls going to its callees' copies for the same block.
    let mut roots = Vec::new();
    for (i, f) in pm.funcs.iter().enumerate() {
        if func_index.get(&f.name) == Some(&(i as u32)) {
            roots.push(i);
        }
    }
    let mut layouts: Vec<Layout> = Vec::new();
    let mut variants: HashMap<(usize, Vec<u32>), u32> = HashMap::new();
    let mut jobs: Vec<(usize, usize)> = Vec::new();
    let mut variant = |f: usize, l: usize, layouts: &[Layout], jobs: &mut Vec<(usize, usize)>| -> u32 {
        *variants.entry((f, plan.key(f, &layouts[l]))).or_insert_with(|| {
            jobs.push((f, l));
            jobs.len() as u32 - 1
        })
    };
    let mut root_func = HashMap::new();
    let mut funcs = Vec::with_capacity(roots.len());
    let mut layout_of = Vec::with_capacity(roots.len());
    let mut lowered = vec![false; pm.funcs.len()];
    for entries_first in [true, false] {
        for &r in &roots {
            let f = &pm.funcs[r];
            if f.is_entry != entries_first || lowered[r] {
                continue;
            }
            let what = format!("{} `{}`", if f.is_entry { "kernel" } else { "function" }, f.name);
            layouts.push(plan.layout(r, &what, f.line)?);
            root_func.insert(r, variant(r, layouts.len() - 1, &layouts, &mut jobs));
            while funcs.len() < jobs.len() {
                let (f, l) = jobs[funcs.len()];
                let calls: HashMap<u32, u32> =
                    plan.callees(f).iter().map(|&c| (c as u32, variant(c, l, &layouts, &mut jobs))).collect();
                let lf = FnLower::new(&globals, &func_index, &pm.funcs, &layouts[l], &calls);
                funcs.push(
                    lf.lower(&pm.funcs[f], plan.locals(f))
                        .map_err(|e| refusal::with_kernels_stopped(e, &pm, &plan, f))?,
                );
                layout_of.push(l);
                lowered[f] = true;
            }
        }
    }
    // Frame sizes of call chains; recursion is rejected.
    let n = funcs.len();
    let mut state = vec![0u8; n];
    let mut stack_size = vec![0u64; n];
    fn visit(i: usize, funcs: &[Function], state: &mut [u8], stack: &mut [u64]) -> Result<u64, PtxError> {
        match state[i] {
            2 => return Ok(stack[i]),
            1 => {
                return Err(PtxError::new(1, format!("recursive call involving `{}` is not supported", funcs[i].name)))
            }
            _ => {}
        }
        state[i] = 1;
        let mut deepest = 0u64;
        for ins in &funcs[i].insts {
            if let Inst::Call { func, .. } = &ins.inst {
                deepest = deepest.max(visit(*func as usize, funcs, state, stack)?);
            }
        }
        state[i] = 2;
        stack[i] = funcs[i].frame_size as u64 + deepest;
        Ok(stack[i])
    }
    for i in 0..n {
        visit(i, &funcs, &mut state, &mut stack_size)?;
    }
    for (f, s) in funcs.iter_mut().zip(&stack_size) {
        f.stack_size = *s;
    }
    let mut entries = Vec::new();
    for (i, f) in pm.funcs.iter().enumerate() {
        if !f.is_entry || f.body.is_none() || func_index.get(&f.name) != Some(&(i as u32)) {
            continue;
        }
        let func = root_func[&i];
        if stack_size[func as usize] > MAX_LOCAL_BYTES {
            return Err(PtxError::new(
                f.line,
                format!("kernel `{}` needs {} bytes of local memory per thread", f.name, stack_size[func as usize]),
            ));
        }
        let mut params = Vec::new();
        let mut off = 0u64;
        for p in &f.params {
            let size = decl_size(p, None)?;
            let align = decl_align(p)?;
            off = align_up(off, align);
            params.push(ParamInfo {
                name: p.name.clone(),
                offset: off as u32,
                size: size as u32,
                align: align as u32,
                pointer: p.ptr,
            });
            off += size;
        }
        let layout = &layouts[layout_of[func as usize]];
        entries.push(Entry {
            name: f.name.clone(),
            func,
            params,
            params_size: off as u32,
            static_shared: layout.size,
            dynamic_shared_base: layout.dyn_base,
        });
    }
    Ok(Module {
        id: super::module::next_module_id(),
        funcs,
        entries,
        vars: var_regions,
        var_names,
        placed_vars,
        version: pm.version,
        target: pm.target,
        jit: Default::default(),
    })
}

fn init_bytes(v: &VarDecl, globals: &HashMap<String, Sym>, plan: &SharedPlan) -> Result<Vec<u8>, PtxError> {
    let ty = decl_ty(v)?;
    let w = ty.bytes() as usize;
    let mut out = Vec::new();
    for e in v.init.as_ref().into_iter().flatten() {
        let bits: u64 = match (*e).clone() {
            InitElem::Int(i) => {
                if ty.is_float() {
                    float_bits(ty, i as f64)
                } else {
                    i as u64
                }
            }
            InitElem::Float(f) => float_bits(ty, f),
            InitElem::F32(b) => {
                if ty == Ty::F64 {
                    (f32::from_bits(b) as f64).to_bits()
                } else {
                    b as u64
                }
            }
            InitElem::F64(b) => {
                if ty == Ty::F32 {
                    (f64::from_bits(b) as f32).to_bits() as u64
                } else {
                    b
                }
            }
            InitElem::Sym(name, off) => match globals.get(&name) {
                Some(Sym::Var(a)) => a.wrapping_add(off as u64),
                Some(Sym::Shared(id)) => match plan.pinned_offset(*id) {
                    Some(o) => SHARED_BASE + o as u64 + off as u64,
                    None => return Err(PtxError::new(v.line, format!("`{name}` has no fixed place in shared memory"))),
                },
                _ => {
                    return Err(PtxError::new(
                        v.line,
                        format!("initializer of `{}` refers to `{name}`, which is not a variable", v.name),
                    ))
                }
            },
        };
        out.extend_from_slice(&bits.to_le_bytes()[..w.min(8)]);
    }
    Ok(out)
}

fn float_bits(ty: Ty, v: f64) -> u64 {
    match ty {
        Ty::F64 => v.to_bits(),
        Ty::F32 => (v as f32).to_bits() as u64,
        Ty::F16 => half::f16::from_f64(v).to_bits() as u64,
        Ty::BF16 => half::bf16::from_f64(v).to_bits() as u64,
        _ => v as i64 as u64,
    }
}

fn sreg_of(name: &str) -> Option<Sreg> {
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

/// Opcode split into its base name, its type suffixes (in order) and its other modifiers.
struct Opc<'a> {
    base: &'a str,
    types: Vec<Ty>,
    mods: Vec<&'a str>,
    full: &'a str,
}

impl<'a> Opc<'a> {
    fn new(op: &'a str) -> Self {
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
    fn has(&self, m: &str) -> bool {
        self.mods.contains(&m)
    }
    fn rnd(&self) -> Option<Rnd> {
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
    fn int_rnd(&self) -> Option<Rnd> {
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
    fn flags(&self) -> FFlags {
        FFlags { ftz: self.has("ftz"), sat: self.has("sat") }
    }
}

struct FnLower<'m> {
    globals: &'m HashMap<String, Sym>,
    func_index: &'m HashMap<String, u32>,
    all: &'m [parse::Func],
    /// The block this copy of the function is lowered for.
    layout: &'m Layout,
    /// The copies its calls go to, by the callee's index in `all`.
    calls: &'m HashMap<u32, u32>,
    dyn_base: u32,
    scopes: Vec<HashMap<String, Sym>>,
    reg_bits: Vec<u32>,
    consts: HashMap<u64, R>,
    const_list: Vec<(R, u64)>,
    sregs: HashMap<Sreg, R>,
    insts: Vec<Instr>,
    /// Labels by `{ }` block and name: a label is visible in its block and the blocks inside it
    /// (Triton's inline assembly repeats `waitLoop:` in block after block).
    labels: HashMap<(u32, String), u32>,
    /// The blocks open here, outermost first, and the number of blocks opened so far.
    label_scopes: Vec<u32>,
    blocks: u32,
    /// Branches to resolve at the end: instruction, label, line, and the blocks open there.
    fixups: Vec<(usize, String, u32, Vec<u32>)>,
    frame: u64,
    is_entry: bool,
    line: u32,
    guard: Option<(R, bool)>,
    /// The carry flag of `add.cc`/`addc` and friends, allocated on first use.
    cc: Option<R>,
    /// The low halves of the 128-bit registers (each a pair: the high half is the next register).
    wide: HashSet<R>,
    /// `(line, typemap code)` of each `st`: what a store says about the bytes it writes.
    store_types: Vec<(u32, u8)>,
    /// The float type each register last held, for `store_types`.
    provenance: super::typemap::Provenance,
}

type Res<T> = Result<T, PtxError>;

impl<'m> FnLower<'m> {
    fn new(
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
    fn carry_arith(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    fn err<T>(&self, msg: impl Into<String>) -> Res<T> {
        Err(PtxError::new(self.line, msg.into()))
    }

    fn new_reg(&mut self, bits: u32) -> R {
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
    fn wide_pair(&mut self, o: &Operand, op: &str) -> Res<[R; 2]> {
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
    fn narrow(&self, r: R, n: &str) -> Res<R> {
        if self.wide.contains(&r) {
            return self.err(format!(
                "128-bit register `{n}` used by an instruction other than `ld`, `st` or `mov` `.b128`: {B128_REASON}"
            ));
        }
        Ok(r)
    }

    fn frame_slot(&mut self, size: u64, align: u64) -> Res<u32> {
        let off = align_up(self.frame, align.max(1));
        self.frame = off + size;
        if self.frame > MAX_LOCAL_BYTES {
            return self.err(format!("local frame of {} bytes exceeds the {MAX_LOCAL_BYTES} byte limit", self.frame));
        }
        Ok(off as u32)
    }

    fn declare(&mut self, d: &VarDecl, shared: &mut std::vec::IntoIter<Sym>) -> Res<()> {
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
    fn shared_offset(&self, id: u32) -> Res<u32> {
        match self.layout.offset(id) {
            Some(o) => Ok(o),
            None => self.err("a shared variable has no place in this block"),
        }
    }

    fn lookup(&self, name: &str) -> Option<Sym> {
        for s in self.scopes.iter().rev() {
            if let Some(v) = s.get(name) {
                return Some(*v);
            }
        }
        self.globals.get(name).copied()
    }

    fn konst(&mut self, v: u64) -> R {
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

    fn push(&mut self, inst: Inst) {
        self.insts.push(Instr { guard: self.guard, inst, line: self.line });
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
    fn src(&mut self, o: &Operand, ty: Ty) -> Res<R> {
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

    fn pred_src(&mut self, o: &Operand) -> Res<(R, bool)> {
        match o {
            Operand::Not(n) => Ok((self.name_src(n, 0)?, true)),
            Operand::Lit(Lit::Int(v)) => Ok((self.konst((*v != 0) as u64), false)),
            o => Ok((self.src(o, Ty::Pred)?, false)),
        }
    }

    fn dst(&mut self, o: &Operand) -> Res<R> {
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

    fn bits_of(&self, r: R) -> u32 {
        self.reg_bits[r as usize]
    }

    fn lower(mut self, f: &parse::Func, shared: Vec<Sym>) -> Res<Function> {
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
        self.provenance = super::typemap::Provenance::learn_shared(body.iter().filter_map(|s| match s {
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
        for (at, label, line, open) in std::mem::take(&mut self.fixups) {
            let found = open.iter().rev().find_map(|b| self.labels.get(&(*b, label.clone())));
            let Some(&t) = found else {
                return Err(PtxError::new(line, format!("undefined label `{label}`")));
            };
            if let Inst::Bra { target, .. } = &mut self.insts[at].inst {
                *target = t;
            }
        }
        warp_runs::gather_warp_matrix_rows(&mut self.insts);
        let reconv = reconvergence(&self.insts);
        for (i, r) in reconv.into_iter().enumerate() {
            if let Inst::Bra { reconv, .. } = &mut self.insts[i].inst {
                *reconv = r;
            }
        }
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
        };
        define_undefined(&mut func, &self.reg_bits, f.line);
        func.exit_bound = exit_bound(&func.insts);
        Ok(func)
    }

    fn want(&self, ops: &[Operand], n: usize, op: &str) -> Res<()> {
        if ops.len() != n {
            return self.err(format!("`{op}` takes {n} operands, found {}", ops.len()));
        }
        Ok(())
    }

    fn unsupported<T>(&self, op: &str) -> Res<T> {
        self.err(format!("unsupported instruction `{op}`"))
    }

    fn refused<T>(&self, op: &str, why: &str) -> Res<T> {
        self.err(format!("unsupported instruction `{op}`: {why}"))
    }

    /// Registers of a brace-enclosed vector operand (`{%r1, %r2}`), or of a single register.
    fn reg_list(&mut self, op: &Operand, ty: Ty, dst: bool) -> Res<Vec<R>> {
        let items: Vec<&Operand> = match op {
            Operand::Vec(v) => v.iter().collect(),
            x => vec![x],
        };
        items.into_iter().map(|x| if dst { self.dst(x) } else { self.src(x, ty) }).collect()
    }

    /// `mma.sync.aligned.shape.row.col{.satfinite}.dtype.atype.btype.ctype d, a, b, c`.
    fn mma(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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
    fn ldst_matrix(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    /// `cp.async` and its groups. The copies complete when they issue, which the ISA allows (they
    /// must complete by the `cp.async.wait_group`/`wait_all` that waits for them), so waiting is
    /// nothing.
    fn cp(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    fn ty1(&self, o: &Opc) -> Res<Ty> {
        match o.types.last() {
            Some(t) => Ok(*t),
            None => self.err(format!("`{}` has no type", o.full)),
        }
    }

    fn inst(&mut self, i: &parse::Inst) -> Res<()> {
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
            "bfi" => {
                self.want(ops, 5, o.full)?;
                let ty = self.ty1(&o)?;
                let w = ty.int_w().filter(|w| *w != W::W16).ok_or(()).or_else(|_| self.unsupported(o.full))?;
                let d = self.dst(&ops[0])?;
                let f = self.src(&ops[1], ty)?;
                let b = self.src(&ops[2], ty)?;
                let pos = self.src(&ops[3], Ty::U32)?;
                let len = self.src(&ops[4], Ty::U32)?;
                self.push(Inst::Bfi { w, d, f, b, pos, len });
                Ok(())
            }
            "bmsk" => {
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
            "isspacep" => {
                self.want(ops, 2, o.full)?;
                let Some(space) = self.space_of(&o).filter(|s| *s != Space::KParam) else {
                    return self.unsupported(o.full);
                };
                let d = self.dst(&ops[0])?;
                let a = self.src(&ops[1], Ty::U64)?;
                self.push(Inst::Un { op: UnOp::IsSpace(space), d, a });
                Ok(())
            }
            "setp" | "set" => self.setp(&o, ops),
            "cvt" => self.cvt(&o, ops),
            "cvta" => {
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
                let ty = self.ty1(&o)?;
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
            "ld" | "ldu" => self.ld(&o, ops),
            "st" => self.st(&o, ops),
            "atom" | "red" => self.atom(&o, ops),
            "bra" | "brx" => {
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
            "vote" => {
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
            "redux" => {
                // redux.sync.op.type d, a, membermask
                self.want(ops, 3, o.full)?;
                let ty = self.ty1(&o)?;
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
            "activemask" => {
                self.want(ops, 1, o.full)?;
                let d = self.dst(&ops[0])?;
                self.push(Inst::Activemask { d });
                Ok(())
            }
            "call" => self.call(&o, ops),
            "mma" => self.mma(&o, ops),
            "ldmatrix" | "stmatrix" => self.ldst_matrix(&o, ops),
            "movmatrix" => {
                self.want(ops, 2, o.full)?;
                if !(o.has("m8n8") && o.has("trans") && o.types == [Ty::B16]) {
                    return self.unsupported(o.full);
                }
                let d = self.dst(&ops[0])?;
                let a = self.src(&ops[1], Ty::B32)?;
                self.push(Inst::Movmatrix { d, a });
                Ok(())
            }
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

    fn mov(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    fn binary(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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
                    let mode = if o.has("approx") || o.has("full") {
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
        if let Some(op) = relu {
            let zero = self.konst(0);
            self.push(Inst::Bin { op, d, a: d, b: zero });
        }
        Ok(())
    }

    fn ternary(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    fn unary(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    fn setp(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    fn cvt(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
        if o.mods.iter().any(|m| matches!(*m, "e4m3x2" | "e5m2x2")) {
            return self.cvt_fp8(o, ops);
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

    fn space_of(&self, o: &Opc) -> Option<Space> {
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
    fn addr(&mut self, o: &Opc, op: &Operand, space: Option<Space>) -> Res<(Space, Addr)> {
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

    fn ld(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    fn st(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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
        self.store_types.push((self.line, self.provenance.store_code(ty, &ops[1])));
        if ty == Ty::B128 {
            // One 16-byte access from the register pair, as `ld` above.
            let [lo, hi] = self.wide_pair(&ops[1], o.full)?;
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
            }
            let addr = Addr { off: addr.off + (half * 4 * size as usize) as i64, ..addr };
            self.push(Inst::St { space, size, n: srcs.len() as u8, a, addr });
        }
        Ok(())
    }

    fn atom(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    fn bar(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    fn shfl(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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

    fn call(&mut self, o: &Opc, ops: &[Operand]) -> Res<()> {
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
}

/// `mMnNkK` as numbers.
fn mma_shape(p: &str) -> Option<(u8, u8, u8)> {
    let rest = p.strip_prefix('m')?;
    let (m, rest) = rest.split_once('n')?;
    let (n, k) = rest.split_once('k')?;
    Some((m.parse().ok()?, n.parse().ok()?, k.parse().ok()?))
}

/// The immediate post-dominator of every branch, as an instruction index (`insts.len()` when the
/// paths meet only at the function's end): where lanes that diverge at the branch meet again.
fn reconvergence(insts: &[Instr]) -> Vec<u32> {
    let n = insts.len();
    let mut out = vec![n as u32; n];
    // Basic blocks.
    let mut leader = vec![false; n + 1];
    leader[0] = true;
    for (i, ins) in insts.iter().enumerate() {
        match &ins.inst {
            Inst::Bra { target, .. } => {
                leader[*target as usize] = true;
                leader[i + 1] = true;
            }
            Inst::Ret | Inst::Exit | Inst::Trap => leader[i + 1] = true,
            _ => {}
        }
    }
    let starts: Vec<usize> = (0..n).filter(|&i| leader[i]).collect();
    let nb = starts.len();
    let mut block_of = vec![0usize; n + 1];
    for (b, &s) in starts.iter().enumerate() {
        let e = starts.get(b + 1).copied().unwrap_or(n);
        for x in block_of.iter_mut().take(e).skip(s) {
            *x = b;
        }
    }
    let exit = nb;
    block_of[n] = exit;
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); nb];
    for (b, out) in succ.iter_mut().enumerate() {
        let last = starts.get(b + 1).copied().unwrap_or(n) - 1;
        let ins = &insts[last];
        match &ins.inst {
            Inst::Bra { target, .. } => {
                out.push(block_of[*target as usize]);
                if ins.guard.is_some() {
                    out.push(block_of[last + 1]);
                }
            }
            Inst::Ret | Inst::Exit | Inst::Trap => {
                out.push(exit);
                if ins.guard.is_some() {
                    out.push(block_of[last + 1]);
                }
            }
            _ => out.push(block_of[last + 1]),
        }
    }
    // Post-dominators: dominators of the reverse graph rooted at the exit (Cooper, Harvey, Kennedy).
    let mut preds_rev: Vec<Vec<usize>> = vec![Vec::new(); nb + 1]; // reverse-graph successors = CFG preds
    for (b, out) in succ.iter().enumerate() {
        for &s in out {
            preds_rev[s].push(b);
        }
    }
    let mut order = Vec::with_capacity(nb + 1);
    let mut seen = vec![false; nb + 1];
    let mut stack = vec![(exit, 0usize)];
    seen[exit] = true;
    while let Some((v, i)) = stack.pop() {
        if i < preds_rev[v].len() {
            stack.push((v, i + 1));
            let w = preds_rev[v][i];
            if !seen[w] {
                seen[w] = true;
                stack.push((w, 0));
            }
        } else {
            order.push(v);
        }
    }
    let mut po = vec![usize::MAX; nb + 1];
    for (k, &v) in order.iter().enumerate() {
        po[v] = k;
    }
    const UNDEF: usize = usize::MAX;
    let mut idom = vec![UNDEF; nb + 1];
    idom[exit] = exit;
    let rpo: Vec<usize> = order.iter().rev().copied().collect();
    let mut changed = true;
    while changed {
        changed = false;
        for &b in &rpo {
            if b == exit {
                continue;
            }
            let mut new = UNDEF;
            for &s in &succ[b] {
                if idom[s] == UNDEF {
                    continue;
                }
                new = if new == UNDEF {
                    s
                } else {
                    let (mut x, mut y) = (s, new);
                    while x != y {
                        while po[x] < po[y] {
                            x = idom[x];
                        }
                        while po[y] < po[x] {
                            y = idom[y];
                        }
                    }
                    x
                };
            }
            if new != UNDEF && idom[b] != new {
                idom[b] = new;
                changed = true;
            }
        }
    }
    for (i, ins) in insts.iter().enumerate() {
        if let Inst::Bra { .. } = ins.inst {
            let b = block_of[i];
            let p = idom[b];
            out[i] = if p == UNDEF || p == exit { n as u32 } else { starts[p] as u32 };
        }
    }
    out
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
        })
        .collect();
    insts.extend(std::mem::take(&mut func.insts));
    for ins in &mut insts {
        if let Inst::Bra { target, .. } = &mut ins.inst {
            *target += k;
        }
    }
    for (i, r) in reconvergence(&insts).into_iter().enumerate() {
        if let Inst::Bra { reconv, .. } = &mut insts[i].inst {
            *reconv = r;
        }
    }
    func.insts = insts;
}

fn exit_bound(insts: &[Instr]) -> Vec<bool> {
    let n = insts.len();
    let mut eb = vec![true; n + 1];
    let mut changed = true;
    while changed {
        changed = false;
        for i in (0..n).rev() {
            let ins = &insts[i];
            let v = match &ins.inst {
                Inst::Ret | Inst::Exit | Inst::Trap if ins.guard.is_none() => true,
                Inst::Ret | Inst::Exit | Inst::Trap => eb[i + 1],
                Inst::Bar { .. } | Inst::Call { .. } => false,
                Inst::Bra { target, .. } if ins.guard.is_none() => eb[*target as usize],
                Inst::Bra { target, .. } => eb[*target as usize] && eb[i + 1],
                _ => eb[i + 1],
            };
            if v != eb[i] {
                eb[i] = v;
                changed = true;
            }
        }
    }
    eb.truncate(n);
    eb
}
