//! PTX parser and CPU executor.
//!
//! The key design decision: PTX is parsed and lowered once into a compact typed instruction list
//! per function (registers resolved to indices, immediates to constant registers, labels to
//! instruction indices, reconvergence points precomputed), and executed a whole thread block at a
//! time, one instruction across all of the block's lanes. Dispatch then costs per instruction, not
//! per thread; barriers, shared memory, warp shuffles and votes fall out of lockstep execution;
//! blocks run in parallel on all cores (feature `parallel`).
//!
//! The parser is our own rather than a lowering from a grammar-generated AST: PTX as nvcc, NVRTC and
//! Triton emit it is a small statement language, and a direct lowering keeps load time low, accepts
//! modifiers in any order, and reports an unsupported instruction with its line at load time.
//!
//! Safety: device memory is a set of [`Memory`] regions of 32-bit atomic words, every access is
//! checked against the region its address selects, shared and local memory are bounds-checked
//! per access. The interpreter has no `unsafe` code; the native-code engine (`exec/jit/`, native
//! builds only) runs generated code that checks every address against its region before it touches
//! it, and its module docs set out why that holds. A hostile kernel can fail (out-of-bounds,
//! budget, cancellation, divergent barrier, trap) but cannot reach outside its own memory.

#[macro_use]
mod ops;
mod error;
mod exec;
mod flow;
mod ir;
mod lower;
mod math;
mod matrix;
mod mbarrier;
mod memory;
mod module;
mod numerics;
mod parse;
pub mod signature;
pub mod typemap;
mod wgmma;

#[cfg(test)]
mod tests;

pub use error::PtxError;
pub use exec::{launch, Engine, ExecError, ExecOptions, JitDump, LaunchDims, LaunchPlan, LaunchStats};
pub use lower::{MAX_LOCAL_BYTES, MAX_SHARED_BYTES};
pub use memory::{MemError, Memory, PlaceError};
pub use module::{
    Entry, Module, NativeCodeRefusal, NoNativeCode, ParamInfo, Place, PlaceRefusal, PlacedVariable, VariableDecl,
};
pub use numerics::{MmaModel, SfuModel};
