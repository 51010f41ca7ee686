//! Lowering a whole module: functions indexed (a prototype gives way to its definition), module
//! variables placed or given regions and initialised, every function lowered once per block its
//! shared variables are laid out for, frame sizes summed along call chains (recursion refused),
//! and the kernels' entries with their parameter layouts.

use super::*;

pub(crate) fn lower_module(text: &str, place: &mut crate::ptx::module::Place<'_>) -> Result<Module, PtxError> {
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
                if let Some(addr) = place(&decl).map_err(|e| PtxError::new(v.line, e.to_string()))? {
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
        id: crate::ptx::module::next_module_id(),
        funcs,
        entries,
        vars: var_regions,
        var_names,
        placed_vars,
        version: pm.version,
        target: pm.target,
        contracted: false,
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

pub(super) fn float_bits(ty: Ty, v: f64) -> u64 {
    match ty {
        Ty::F64 => v.to_bits(),
        Ty::F32 => (v as f32).to_bits() as u64,
        Ty::F16 => half::f16::from_f64(v).to_bits() as u64,
        Ty::BF16 => half::bf16::from_f64(v).to_bits() as u64,
        _ => v as i64 as u64,
    }
}
