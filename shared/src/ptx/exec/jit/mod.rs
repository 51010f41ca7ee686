//! Native code for kernels, compiled with Cranelift (native builds with the `jit` feature).
//!
//! # Shape
//! A kernel becomes one native function `run(ctx, segment) -> status` that runs every thread of a
//! block, one after another, from a resume point to the next boundary (`bar.sync` or
//! `shfl.sync`) or to its exit. PTX registers are Cranelift variables (SSA values the register
//! allocator keeps in machine registers); a thread that reaches a boundary stores its registers in
//! a per-thread spill area and the next segment reloads them and resumes after it. Code between
//! boundaries is thus a plain loop over the block's threads, which is what a CPU runs fastest.
//! When every live thread waits at the same boundary the code goes on with the next segment
//! itself; a shuffle first exchanges the values across each warp (`exchange`), exactly as the
//! interpreter does for lanes in lockstep. A row of warp matrix instructions (`mma`, `ldmatrix`...)
//! is one boundary with the plain barriers right before and after it; the runtime runs the row warp
//! by warp once every thread has arrived (`warp_run.rs`). A K loop's row keeps its accumulators in
//! the worker between passes; native code then holds those registers in the spill area alone and
//! has them handed back before it first reads or writes one (`analysis::Resident`).
//!
//! Whether a kernel runs here is decided when it is first launched, before any thread runs
//! ([`support`]). Arithmetic that is not inlined calls back into the interpreter's own
//! per-lane semantics (`ops.rs`), so both engines compute the same bits.
//!
//! # Safety
//! Generated code touches memory only through addresses it has checked inline, or that one check
//! proved in bounds for a whole stretch of code; anything else goes to the interpreter's checked
//! slow path, which reports faults exactly as the interpreter does. Every such check, and every
//! decision to leave one out, is in `checks.rs`, which says why that holds. The `unsafe` of running
//! the code (the call, the context it is handed, the helpers it calls) is in `runtime.rs`; that of
//! owning it (the entry pointer made from the finished code, freeing the code) in `compile.rs`.
//!
//! # Files
//! - `support.rs`: which kernels run as native code;
//! - `compile.rs`: the compile driver (Cranelift set up, the function declared and defined, the
//!   cache of compiled kernels);
//! - `analysis.rs`: the dataflow analyses the translator reads ([`analysis::Analysis`]), with no
//!   code generator in them;
//! - `translate.rs`: the translator, instruction by instruction, over the state of `emit.rs`;
//! - `lanes.rs`: the second shape, groups of threads in vector lanes: its plan and its vector code;
//! - `checks.rs`: the inline checks of memory accesses;
//! - `warp_run.rs`: a boundary's run of `ldmatrix`es and float `mma`s, warp by warp over a dense
//!   copy of its registers;
//! - `fma.rs`: the machine code warp matrix arithmetic runs as (FMA, AVX2 and F16C where the CPU
//!   has them), picked in one place;
//! - `runtime.rs`: the context, the helpers generated code calls, and the loop that runs a block;
//! - `error.rs`: why a kernel has no native code ([`error::JitError`]).

mod analysis;
mod checks;
mod compile;
mod emit;
mod error;
mod fma;
mod lanes;
mod runtime;
mod support;
mod translate;
mod warp_run;

pub(crate) use compile::{Cache, JitKernel};
pub(crate) use error::JitError;
pub(crate) use runtime::Scratch;
pub(crate) use support::unsupported;
