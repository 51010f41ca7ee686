//! The compile driver: a Cranelift module set up for this machine, the kernel's function and the
//! trampoline to the checked slow path declared in it, the translator run over the function, and
//! the machine code kept with what the runtime needs ([`Compiled`]). A kernel has one-thread code,
//! made on its first launch, and where it suits them code for groups of [`LANES`] threads, made
//! on the first launch that can use it; [`Cache`] keeps both per module.
//!
//! A code generator failure, an error or a panic, never fails a launch: the kernel runs on the
//! interpreter, or keeps to its one-thread code.

use std::collections::HashMap;
use std::mem::offset_of;
use std::sync::{Arc, Mutex, OnceLock};

use cranelift_codegen::ir::{types, AbiParam, InstBuilder, Signature};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::Module as _;

use super::analysis::Analysis;
use super::emit::{flags, Tx};
use super::error::JitError;
use super::lanes::{LanePlan, LANES};
use super::runtime::{h_mem, EntryFn, JitCtx, Meta, Variant};
use super::support::unsupported;
use crate::ptx::exec::dump::JitDump;
use crate::ptx::ir::*;

/// Owns the executable memory of compiled kernels.
struct Code(Option<JITModule>);

// SAFETY: after `finalize_definitions` the module's memory is immutable machine code; nothing in
// it is tied to the thread that compiled it.
unsafe impl Send for Code {}
unsafe impl Sync for Code {}

impl Drop for Code {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            // SAFETY: the only pointer into this memory is the entry of the `JitKernel` that owns
            // this `Code`, which is being dropped with it.
            unsafe { m.free_memory() };
        }
    }
}

/// A kernel compiled to native code: code that runs one thread at a time, and where the kernel
/// suits it, code that runs groups of [`LANES`] threads in vector lanes (see [`lanes`]).
pub(crate) struct JitKernel {
    pub(super) one: Compiled,
    /// The code for groups of [`LANES`] threads, or why the kernel has none: compiled on the
    /// first launch that can use it.
    group: OnceLock<Result<Compiled, JitError>>,
    params_size: u32,
    /// Where the code for groups goes when it is compiled, as the one-thread code did.
    dump: Option<JitDump>,
    pub(super) nregs: usize,
    pub(super) lines: Vec<u32>,
}

/// One compiled function of a kernel.
pub(super) struct Compiled {
    pub(super) entry: EntryFn,
    _code: Code,
    /// Instructions the code hands to the helpers by address: boxed, so that the addresses stay
    /// put while the list grows.
    #[allow(clippy::vec_box)]
    _insts: Vec<Box<Instr>>,
    /// What the code and the runtime know of each boundary (the code holds its address).
    pub(super) meta: Box<Meta>,
}

/// Per-module cache: function index -> compiled kernel, or `None` when it runs on the interpreter.
#[derive(Default)]
pub(crate) struct Cache(Mutex<HashMap<u32, Option<Arc<JitKernel>>>>);

impl Cache {
    /// Kernel `func_index` (function `f`), compiled on the first call; `dump` receives its code.
    pub(crate) fn kernel(
        &self,
        func_index: u32,
        f: &Function,
        params_size: u32,
        dump: Option<&JitDump>,
    ) -> Option<Arc<JitKernel>> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(func_index)
            .or_insert_with(|| {
                // A code generator failure (an error, or a panic inside it) leaves the kernel to the
                // interpreter rather than failing the launch.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compile(f, params_size, dump)))
                    .ok()
                    .and_then(Result::ok)
                    .map(Arc::new)
            })
            .clone()
    }
}

fn compile(f: &Function, params_size: u32, dump: Option<&JitDump>) -> Result<JitKernel, JitError> {
    if let Some(why) = unsupported(f) {
        return Err(why);
    }
    let one = compile_variant(f, params_size, None, dump)?;
    Ok(JitKernel {
        one,
        group: OnceLock::new(),
        params_size,
        dump: dump.cloned(),
        nregs: f.nregs as usize,
        lines: f.insts.iter().map(|i| i.line).collect(),
    })
}

/// Code for groups is an addition: a kernel it does not suit, or a failure to build it (an error
/// or a panic in the code generator), leaves the one-thread code alone.
fn compile_group(f: &Function, params_size: u32, dump: Option<&JitDump>) -> Result<Compiled, JitError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        LanePlan::new(f).and_then(|plan| compile_variant(f, params_size, Some(plan), dump))
    }))
    .unwrap_or_else(|_| Err(JitError::GroupPanicked))
}

/// Compiles the one-thread code (`plan: None`) or the code for groups of [`LANES`] threads, and
/// hands it to `dump` if there is one.
fn compile_variant(
    f: &Function,
    params_size: u32,
    plan: Option<LanePlan>,
    dump: Option<&JitDump>,
) -> Result<Compiled, JitError> {
    let mut flags = settings::builder();
    let set = |fl: &mut settings::Builder, k: &str, v: &str| fl.set(k, v).map_err(|e| JitError::Setup(e.to_string()));
    set(&mut flags, "opt_level", "speed")?;
    set(&mut flags, "use_colocated_libcalls", "false")?;
    set(&mut flags, "is_pic", "false")?;
    let isa = cranelift_native::builder()
        .map_err(|e| JitError::Setup(e.to_string()))?
        .finish(settings::Flags::new(flags))
        .map_err(|e| JitError::Setup(e.to_string()))?;
    let call_conv = isa.default_call_conv();
    let mut module = JITModule::new(JITBuilder::with_isa(isa, cranelift_module::default_libcall_names()));
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(types::I64));
    sig.params.push(AbiParam::new(types::I32));
    sig.returns.push(AbiParam::new(types::I32));
    let refused = |message: String| JitError::Codegen { function: f.name.clone(), message };
    let id = module
        .declare_function(&f.name, cranelift_module::Linkage::Export, &sig)
        .map_err(|e| refused(e.to_string()))?;
    let slow_mem = define_slow_mem(&mut module, call_conv)?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let slow_mem = module.declare_func_in_func(slow_mem, &mut ctx.func);
    // Called through its absolute address, not a 32-bit displacement: the two functions may land in
    // different mappings, and where a process has also mapped a GPU driver's gigabytes of address
    // space those can lie more than 2 GiB apart, which a displacement cannot reach.
    ctx.func.dfg.ext_funcs[slow_mem].colocated = false;
    let frontend = module.target_config();
    let mut fctx = FunctionBuilderContext::new();
    let mut insts = Vec::new();
    let nregs = f.nregs as usize;
    let plan_is_some = plan.is_some();
    let analysis = Analysis::new(f, params_size, plan);
    let meta = Box::new(Meta {
        nregs,
        bounds: analysis.bounds.clone(),
        width: analysis.width,
        resident: analysis.resident.as_ref().map(|r| r.k),
    });
    {
        let b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let mut tx = Tx::new(b, &analysis, call_conv, slow_mem, &mut insts, &meta);
        tx.build()?;
        tx.b.seal_all_blocks();
        tx.b.finalize(frontend);
    }
    ctx.set_disasm(dump.is_some());
    module.define_function(id, &mut ctx).map_err(|e| refused(format!("{e:?}")))?;
    let listing = dump
        .as_ref()
        .and_then(|_| ctx.compiled_code())
        .map(|c| (c.code_buffer().to_vec(), c.vcode.clone().unwrap_or_default()));
    module.finalize_definitions().map_err(|e| refused(e.to_string()))?;
    let ptr = module.get_finalized_function(id);
    if let (Some(dump), Some((code, text))) = (dump, listing) {
        let name = format!("{}.{}", f.name, if plan_is_some { "group" } else { "one" });
        dump.write(&name, &code, &format!("; loaded at {ptr:p}\n{text}"));
    }
    // SAFETY: `ptr` is the finalized code of a function declared with exactly this signature
    // (pointer, u32) -> u32 in the target's default (C) calling convention.
    let entry: EntryFn = unsafe { std::mem::transmute::<*const u8, EntryFn>(ptr) };
    Ok(Compiled { entry, _code: Code(Some(module)), _insts: insts, meta })
}

/// Defines the trampoline through which generated code reaches [`h_mem`], the checked access
/// behind every fast path that fails its check. It follows the `preserve_all` convention: the
/// kernel's registers survive the call, so values live across an access need not be kept on the
/// stack for the rare case where the slow path runs (with plain calls, the register allocator
/// spilled most of a kernel's hot values around these cold calls). The result goes through
/// `JitCtx::slow_value`, as `preserve_all` returns nothing.
fn define_slow_mem(
    module: &mut JITModule,
    call_conv: cranelift_codegen::isa::CallConv,
) -> Result<cranelift_module::FuncId, JitError> {
    const NAME: &str = "recap_slow_mem";
    let refused = |message: String| JitError::Codegen { function: NAME.to_string(), message };
    let mut sig = Signature::new(cranelift_codegen::isa::CallConv::PreserveAll);
    let mut inner = Signature::new(call_conv);
    for _ in 0..6 {
        sig.params.push(AbiParam::new(types::I64));
        inner.params.push(AbiParam::new(types::I64));
    }
    inner.returns.push(AbiParam::new(types::I64));
    let id =
        module.declare_function(NAME, cranelift_module::Linkage::Local, &sig).map_err(|e| refused(e.to_string()))?;
    let frontend = module.target_config();
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let blk = b.create_block();
        b.append_block_params_for_function_params(blk);
        b.switch_to_block(blk);
        let args = b.block_params(blk).to_vec();
        let inner = b.import_signature(inner);
        let callee = b.ins().iconst(types::I64, h_mem as *const () as usize as i64);
        let c = b.ins().call_indirect(inner, callee, &args);
        let v = b.inst_results(c)[0];
        b.ins().store(flags(), v, args[0], offset_of!(JitCtx, slow_value) as i32);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(frontend);
    }
    module.define_function(id, &mut ctx).map_err(|e| refused(format!("{e:?}")))?;
    Ok(id)
}

impl JitKernel {
    /// The code a launch of block shape `block` runs: the code for groups where `lanes` allows
    /// it, the rows of a block split into whole groups and the kernel (`f`, the function this
    /// kernel was compiled from) has that shape.
    pub(in crate::ptx::exec) fn variant(&self, f: &Function, block: [u32; 3], lanes: bool) -> Variant<'_> {
        if lanes && (block[0] as usize).is_multiple_of(LANES) {
            if let Ok(g) = self.group(f) {
                return Variant(g);
            }
        }
        Variant(&self.one)
    }

    fn group(&self, f: &Function) -> &Result<Compiled, JitError> {
        self.group.get_or_init(|| compile_group(f, self.params_size, self.dump.as_ref()))
    }

    /// Whether the kernel has code for groups of threads, and if not, why not.
    pub(crate) fn lanes(&self, f: &Function) -> Result<(), JitError> {
        self.group(f).as_ref().map(|_| ()).map_err(Clone::clone)
    }
}
