//! Static shared memory, laid out per kernel.
//!
//! A block holds the `.shared` variables its kernel can reach: those its entry names or declares, and
//! those of the `.func`s it calls, transitively. A module of many kernels (a library's, say) may
//! declare far more shared memory in all than one block may have while every kernel alone fits, so
//! each kernel's variables are laid out for it alone, in declaration order, and the size limit
//! applies to each kernel.
//!
//! Lowering writes shared addresses into instructions as constants, so a `.func` is lowered once per
//! distinct placement of the variables it reaches ([`SharedPlan::key`]): kernels that agree on where
//! those variables lie share one lowered copy (a helper that touches no shared memory is lowered
//! once), the others get a copy of their own.
//!
//! A variable whose generic address initialises a module variable (`.global .u64 p =
//! generic(smem)`) must have one address in every kernel: such variables come first, at the same
//! offsets in every block.
//!
//! What a function reaches is read from the names its instructions mention, which over-approximates
//! (a register that shadows a variable's name counts it) and so only ever makes a block larger.

use std::collections::{BTreeSet, HashMap};

use super::parse::{InitElem, Operand, ParsedModule, Stmt, VarDecl};
use super::{align_up, decl_align, decl_size, PtxError, Sym, MAX_SHARED_BYTES};

/// A `.shared` variable of fixed size.
struct Var {
    name: String,
    size: u64,
    align: u64,
}

/// The static shared variables a function reaches with its callees.
#[derive(Default, Clone)]
struct Reach {
    vars: BTreeSet<u32>,
    dynamic: bool,
}

/// Where one kernel's block holds its shared variables.
pub(super) struct Layout {
    offsets: HashMap<u32, u32>,
    /// Bytes of static shared memory of the block.
    pub size: u32,
    /// Where dynamic shared memory (`.extern .shared`) starts.
    pub dyn_base: u32,
}

impl Layout {
    /// The offset of variable `id` in the block, if the kernel reaches it.
    pub fn offset(&self, id: u32) -> Option<u32> {
        self.offsets.get(&id).copied()
    }
}

/// The module's shared variables and what each function reaches.
pub(super) struct SharedPlan {
    vars: Vec<Var>,
    /// Module-scope `.shared` names: `Some(id)` with a fixed size, `None` for dynamic shared memory.
    module: HashMap<String, Option<u32>>,
    /// Per function, its own `.shared` declarations in statement order.
    locals: Vec<Vec<Option<u32>>>,
    /// Per function, the functions it calls by name.
    callees: Vec<Vec<usize>>,
    /// Per function, what it and its callees reach.
    reach: Vec<Reach>,
    /// Variables at one address in every block, laid out first.
    pinned: Vec<u32>,
    pinned_offsets: HashMap<u32, u32>,
    dyn_align: u64,
}

/// Dynamic shared memory: an extern array or one of unknown length, placed after the static variables.
fn is_dynamic(d: &VarDecl) -> bool {
    d.is_extern || (d.is_array && d.dims.first() == Some(&None) && d.init.is_none())
}

/// Every name an operand mentions.
fn operand_names<'a>(o: &'a Operand, out: &mut Vec<&'a str>) {
    match o {
        Operand::Name(n) | Operand::Not(n) | Operand::SymOff(n, _) => out.push(n),
        Operand::Addr { base: Some(n), .. } => out.push(n),
        Operand::Pair(a, b) => {
            out.push(a);
            out.push(b);
        }
        Operand::Vec(v) | Operand::List(v) => v.iter().for_each(|o| operand_names(o, out)),
        Operand::Addr { base: None, .. } | Operand::Lit(_) | Operand::TensorAddr => {}
    }
}

impl SharedPlan {
    /// Collects the module's shared variables and what every function reaches. `func_index` names
    /// the function each name stands for.
    pub fn new(pm: &ParsedModule, func_index: &HashMap<String, u32>) -> Result<SharedPlan, PtxError> {
        let mut plan = SharedPlan {
            vars: Vec::new(),
            module: HashMap::new(),
            locals: Vec::with_capacity(pm.funcs.len()),
            callees: Vec::with_capacity(pm.funcs.len()),
            reach: Vec::with_capacity(pm.funcs.len()),
            pinned: Vec::new(),
            pinned_offsets: HashMap::new(),
            dyn_align: 16,
        };
        for v in pm.vars.iter().filter(|v| v.space == ".shared") {
            let id = plan.declare(v)?;
            plan.module.insert(v.name.clone(), id);
        }
        let mut pinned = BTreeSet::new();
        for e in pm.vars.iter().filter_map(|v| v.init.as_ref()).flatten() {
            if let InitElem::Sym(name, _) = e {
                if let Some(Some(id)) = plan.module.get(name) {
                    pinned.insert(*id);
                }
            }
        }
        plan.pinned = pinned.into_iter().collect();
        let mut off = 0u64;
        for &id in &plan.pinned {
            let v = &plan.vars[id as usize];
            off = align_up(off, v.align);
            if off.saturating_add(v.size) > MAX_SHARED_BYTES {
                return Err(PtxError::new(
                    1,
                    format!(
                        "shared variables whose addresses initialise module variables need {} bytes, which exceeds the {MAX_SHARED_BYTES} byte limit of a block (through `{}`)",
                        off.saturating_add(v.size),
                        v.name
                    ),
                ));
            }
            plan.pinned_offsets.insert(id, off as u32);
            off += v.size;
        }

        let mut direct = Vec::with_capacity(pm.funcs.len());
        for f in &pm.funcs {
            let mut own = Vec::new();
            let mut reach = Reach::default();
            let mut callees = Vec::new();
            let mut names = Vec::new();
            for s in f.body.iter().flatten() {
                match s {
                    Stmt::Decl(d) if d.space == ".shared" => {
                        let id = plan.declare(d)?;
                        match id {
                            Some(id) => reach.vars.insert(id),
                            None => std::mem::replace(&mut reach.dynamic, true),
                        };
                        own.push(id);
                    }
                    Stmt::Inst(i) => i.operands.iter().for_each(|o| operand_names(o, &mut names)),
                    _ => {}
                }
            }
            for n in names {
                match plan.module.get(n) {
                    Some(Some(id)) => {
                        reach.vars.insert(*id);
                    }
                    Some(None) => reach.dynamic = true,
                    None => {
                        if let Some(&fi) = func_index.get(n) {
                            callees.push(fi as usize);
                        }
                    }
                }
            }
            callees.sort_unstable();
            callees.dedup();
            plan.locals.push(own);
            plan.callees.push(callees);
            direct.push(reach);
        }
        // Transitive reach: a walk of the call graph from every function (calls may form cycles,
        // which lowering refuses later with a better message).
        let mut seen = vec![usize::MAX; pm.funcs.len()];
        for f in 0..pm.funcs.len() {
            let mut reach = Reach::default();
            let mut stack = vec![f];
            seen[f] = f;
            while let Some(g) = stack.pop() {
                reach.vars.extend(direct[g].vars.iter().copied());
                reach.dynamic |= direct[g].dynamic;
                for &c in &plan.callees[g] {
                    if seen[c] != f {
                        seen[c] = f;
                        stack.push(c);
                    }
                }
            }
            plan.reach.push(reach);
        }
        Ok(plan)
    }

    /// Registers a `.shared` declaration: its id, or `None` for dynamic shared memory.
    fn declare(&mut self, d: &VarDecl) -> Result<Option<u32>, PtxError> {
        let align = decl_align(d)?;
        if is_dynamic(d) {
            self.dyn_align = self.dyn_align.max(align);
            return Ok(None);
        }
        self.vars.push(Var { name: d.name.clone(), size: decl_size(d, None)?, align });
        Ok(Some(self.vars.len() as u32 - 1))
    }

    /// The symbol a module-scope `.shared` name stands for.
    pub fn module_vars(&self) -> impl Iterator<Item = (&str, Sym)> {
        self.module.iter().map(|(n, id)| (n.as_str(), id.map_or(Sym::DynShared, Sym::Shared)))
    }

    /// The symbols of function `f`'s own `.shared` declarations, in statement order.
    pub fn locals(&self, f: usize) -> Vec<Sym> {
        self.locals[f].iter().map(|id| id.map_or(Sym::DynShared, Sym::Shared)).collect()
    }

    /// The functions `f` calls by name.
    pub fn callees(&self, f: usize) -> &[usize] {
        &self.callees[f]
    }

    /// The one offset of a variable whose address initialises a module variable.
    pub fn pinned_offset(&self, id: u32) -> Option<u32> {
        self.pinned_offsets.get(&id).copied()
    }

    /// The block of a kernel (or of a function lowered on its own) rooted at function `f`: the
    /// pinned variables, then those `f` reaches, in declaration order. `what` names it in the error
    /// of a block too large.
    pub fn layout(&self, f: usize, what: &str, line: u32) -> Result<Layout, PtxError> {
        let mut offsets = self.pinned_offsets.clone();
        let mut size = self.pinned.last().map_or(0, |&id| offsets[&id] as u64 + self.vars[id as usize].size);
        let mut placed = Vec::new();
        for &id in self.reach[f].vars.iter().filter(|id| !self.pinned_offsets.contains_key(id)) {
            let v = &self.vars[id as usize];
            let off = align_up(size, v.align);
            size = off.saturating_add(v.size);
            placed.push((id, off));
        }
        if size > MAX_SHARED_BYTES {
            return Err(PtxError::new(
                line,
                format!(
                    "{what} needs {size} bytes of static shared memory, which exceeds the {MAX_SHARED_BYTES} byte limit of a block"
                ),
            ));
        }
        offsets.extend(placed.into_iter().map(|(id, off)| (id, off as u32)));
        Ok(Layout { offsets, size: size as u32, dyn_base: align_up(size, self.dyn_align) as u32 })
    }

    /// What lowering function `f` within `layout` depends on: where the variables it reaches lie.
    /// Equal keys give equal code.
    pub fn key(&self, f: usize, layout: &Layout) -> Vec<u32> {
        let r = &self.reach[f];
        let mut key: Vec<u32> = r.vars.iter().map(|&id| layout.offset(id).unwrap_or(u32::MAX)).collect();
        if r.dynamic {
            key.push(layout.dyn_base);
        }
        key
    }
}
