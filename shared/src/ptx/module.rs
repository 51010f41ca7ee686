//! A loaded module: its kernels (`Entry`, with their parameters as the PTX declares them), its
//! lowered functions and its module-scope variables.

use super::error::PtxError;
use super::ir::Function;
use super::{exec, lower, memory};

/// One kernel parameter as the PTX declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamInfo {
    pub name: String,
    /// Byte offset in the parameter buffer.
    pub offset: u32,
    pub size: u32,
    pub align: u32,
    /// Declared with `.ptr` (Triton and some NVRTC output say so; nvcc leaves pointers as `.u64`).
    pub pointer: bool,
}

/// A kernel (`.entry`) of a module.
#[derive(Debug, Clone)]
pub struct Entry {
    pub(super) name: String,
    pub(super) func: u32,
    pub(super) params: Vec<ParamInfo>,
    pub(super) params_size: u32,
    /// Bytes of static `.shared` memory of the kernel's block: the variables it reaches.
    pub(super) static_shared: u32,
    /// Where dynamic shared memory starts in the kernel's block.
    pub(super) dynamic_shared_base: u32,
}

impl Entry {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn params(&self) -> &[ParamInfo] {
        &self.params
    }
    /// Bytes of the parameter buffer (the end of the last parameter).
    pub fn params_size(&self) -> u32 {
        self.params_size
    }
    /// Bytes of static `.shared` memory a block of this kernel uses: the module-scope variables it
    /// and the functions it calls name, and its own.
    pub fn static_shared_bytes(&self) -> u32 {
        self.static_shared
    }
}

impl Module {
    /// Bytes of local memory a thread of kernel `entry` uses: its frame (`.local` variables and
    /// `.param` slots) and the deepest chain of calls from it, as lowering laid them out.
    pub fn local_bytes(&self, entry: &Entry) -> u64 {
        self.funcs.get(entry.func as usize).map_or(0, |f| f.stack_size)
    }
}

/// A module-scope `.global` or `.const` variable as its module declares it, offered to the caller
/// of [`Module::parse_placing`] to place in memory of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VariableDecl<'a> {
    pub name: &'a str,
    /// Bytes (an array of unspecified size takes its size from its initialiser).
    pub size: u64,
    pub align: u64,
    /// Declared `.const` (read-only to kernels).
    pub constant: bool,
    /// Whether the PTX gives it an initialiser.
    pub initialised: bool,
}

/// A variable the caller of [`Module::parse_placing`] placed: kernels reach it at `addr`, in the
/// caller's [`Memory`](super::Memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedVariable {
    pub name: String,
    pub addr: u64,
    pub size: u64,
    /// The initialiser's bytes, which the caller writes at `addr` (the rest of the variable is
    /// zeros); empty without an initialiser.
    pub init: Vec<u8>,
}

/// Where a variable goes: `Ok(Some(address))` in the caller's memory, `Ok(None)` in the module,
/// `Err(why)` refuses the module.
pub type Place<'p> = dyn FnMut(&VariableDecl) -> Result<Option<u64>, PlaceRefusal> + 'p;

/// Why the caller of [`Module::parse_placing`] cannot place a variable; the module is refused at
/// the variable's line with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceRefusal {
    /// The caller's region for the variable is smaller than the variable.
    #[error("variable `{variable}` is {size} bytes, but region {region} holds {holds}")]
    RegionTooSmall { variable: String, size: u64, region: String, holds: u64 },
    /// The caller's memory has no room for the variable.
    #[error("variable `{variable}`: {source}")]
    NoMemory { variable: String, source: memory::MemError },
}

/// Why a kernel has no native code ([`Module::jit_support`], [`Module::lanes_support`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoNativeCode {
    /// The module has no kernel of that name.
    #[error("no kernel named `{0}`")]
    NoKernel(String),
    /// The first construct that needs the interpreter, or why the code generator made no code.
    #[error(transparent)]
    Refused(NativeCodeRefusal),
}

/// What keeps a kernel from native code: its message names the construct and its line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct NativeCodeRefusal(exec::NoNativeCode);

/// A parsed, lowered PTX module, ready to launch.
///
/// Module-scope `.global` and `.const` variables live in the module (as on a GPU, they last as
/// long as the loaded module) at addresses of their own window, so kernels can take their
/// addresses and every launch of the module sees the same storage. A caller that must reach a
/// variable from outside (a driver's `cuModuleGetGlobal`, a replay restoring a captured
/// variable's contents) places it in its own memory instead ([`Module::parse_placing`]): kernels
/// then reach it at that address, like any buffer.
pub struct Module {
    /// Unique per parsed module, so that a [`LaunchPlan`](super::exec::LaunchPlan) cannot be used
    /// with another module.
    pub(super) id: u64,
    pub(super) funcs: Vec<Function>,
    pub(super) entries: Vec<Entry>,
    pub(super) vars: Vec<memory::Region>,
    pub(super) var_names: Vec<String>,
    /// Variables placed in the caller's memory, in declaration order.
    pub(super) placed_vars: Vec<PlacedVariable>,
    pub(super) version: Option<String>,
    pub(super) target: Vec<String>,
    /// Whether the functions run ptxas's contraction of multiplies and additions
    /// ([`Module::set_contraction`]).
    pub(super) contracted: bool,
    /// Kernels compiled to native code, by function, made on first launch.
    #[cfg_attr(not(all(feature = "jit", not(target_arch = "wasm32"))), allow(dead_code))]
    pub(super) jit: exec::JitCache,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("entries", &self.entries.iter().map(|e| &e.name).collect::<Vec<_>>())
            .field("functions", &self.funcs.len())
            .field("variables", &self.var_names)
            .finish()
    }
}

pub(super) fn next_module_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Module {
    /// Parses and lowers PTX text. Anything the executor cannot run is an error here.
    pub fn parse(text: &str) -> Result<Module, PtxError> {
        lower::lower_module(text, &mut |_| Ok(None))
    }

    /// Parses and lowers PTX text, asking `place` where each module-scope `.global` and `.const`
    /// variable lives (in declaration order). A variable placed at an address is storage of the
    /// caller's [`Memory`](super::Memory) at that address: the module keeps none for it, kernels
    /// (and initialisers that take its address) use that address, and the caller writes its
    /// initial contents ([`Module::placed_variables`]). A `.const` variable placed so is
    /// writable by the caller's copies, as on a GPU, where `cuMemcpyHtoD` writes constant memory.
    pub fn parse_placing(text: &str, place: &mut Place<'_>) -> Result<Module, PtxError> {
        lower::lower_module(text, place)
    }

    /// Runs the module as ptxas compiled it (`on`) or as its PTX reads (`off`, what parsing
    /// gives): ptxas fuses a float `mul` and the `add`s and `sub`s that use it, where none has a
    /// rounding modifier, into fused multiply-adds (one rounding instead of two), by the rule
    /// measured on an H200 that `lower/contract.rs` states. Every CUDA GPU runs ptxas's code;
    /// a replay that must match one turns this on. Native code compiled so far is dropped.
    pub fn set_contraction(&mut self, on: bool) {
        if self.contracted == on {
            return;
        }
        for f in &mut self.funcs {
            for (pc, inst) in &mut f.contraction {
                std::mem::swap(&mut f.insts[*pc as usize].inst, inst);
            }
        }
        self.contracted = on;
        self.jit = Default::default();
    }

    /// Whether [`Module::set_contraction`] turned ptxas's contraction on.
    pub fn contraction(&self) -> bool {
        self.contracted
    }

    /// Whether the module has a multiply and an addition that ptxas fuses (where
    /// [`Module::set_contraction`] matters).
    pub fn has_contractions(&self) -> bool {
        self.funcs.iter().any(|f| !f.contraction.is_empty())
    }

    /// The variables [`Module::parse_placing`] placed in the caller's memory.
    pub fn placed_variables(&self) -> &[PlacedVariable] {
        &self.placed_vars
    }

    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The `.version` directive, e.g. `"8.7"`.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// The `.target` directive's words, e.g. `["sm_90a"]`.
    pub fn target(&self) -> &[String] {
        &self.target
    }

    /// Lowered instruction count of all functions (a size measure for tools).
    pub fn instruction_count(&self) -> usize {
        self.funcs.iter().map(|f| f.insts.len()).sum()
    }

    /// Whether kernel `entry` runs as native code under
    /// [`Engine::Jit`](super::exec::Engine::Jit), and if not, why not (`Err` names the first
    /// construct that needs the interpreter).
    pub fn jit_support(&self, entry: &str) -> Result<(), NoNativeCode> {
        let e = self.entry(entry).ok_or_else(|| NoNativeCode::NoKernel(entry.to_string()))?;
        exec::jit_support(self, e).map_err(|e| NoNativeCode::Refused(NativeCodeRefusal(e)))
    }

    /// Whether kernel `entry` also has native code that runs groups of consecutive threads in
    /// vector lanes (used by [`Engine::Jit`](super::exec::Engine::Jit) when a block's rows split
    /// into whole groups), and if not, why not.
    pub fn lanes_support(&self, entry: &str) -> Result<(), NoNativeCode> {
        let e = self.entry(entry).ok_or_else(|| NoNativeCode::NoKernel(entry.to_string()))?;
        exec::lanes_support(self, e).map_err(|e| NoNativeCode::Refused(NativeCodeRefusal(e)))
    }

    /// Reads a module-scope `.global`/`.const` variable by name.
    pub fn read_variable(&self, name: &str) -> Option<Vec<u8>> {
        let i = self.var_names.iter().position(|n| n == name)?;
        let r = &self.vars[i];
        let mut v = vec![0u8; r.size() as usize];
        r.read(0, &mut v);
        Some(v)
    }
}
