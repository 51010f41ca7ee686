//! Executor tests: real corpus PTX, and small PTX kernels per instruction family.

mod agreement;
mod asynccopy;
mod atomics;
mod b128;
mod contraction;
mod control;
mod corpus;
mod fp8;
mod harness;
mod hostile;
mod isa_float;
mod isa_int;
mod lanes;
mod ldmatrix;
mod mbarrier;
mod memory;
mod mma;
mod numerics;
mod packed_int;
mod placed_vars;
mod shared_layout;
mod warp;
mod wgmma;
mod wide_vectors;

use super::*;

/// Runs `entry` of a PTX text over one buffer per element of `bufs` (their addresses are the
/// kernel's first parameters, followed by `extra` parameter bytes) and returns the buffers after.
/// Runs on every engine: native code, in lanes or one thread at a time, must leave the
/// interpreter's bytes (or fail the same way).
pub(crate) fn run_kernel(
    ptx: &str,
    entry: &str,
    grid: [u32; 3],
    block: [u32; 3],
    bufs: &[Vec<u8>],
    extra: &[u8],
) -> Result<Vec<Vec<u8>>, String> {
    run_kernel_in(MmaModel::Ieee, ptx, entry, grid, block, bufs, extra)
}

/// [`run_kernel`] with tensor-core instructions in `model`'s arithmetic.
pub(crate) fn run_kernel_in(
    model: MmaModel,
    ptx: &str,
    entry: &str,
    grid: [u32; 3],
    block: [u32; 3],
    bufs: &[Vec<u8>],
    extra: &[u8],
) -> Result<Vec<Vec<u8>>, String> {
    let opts = |engine| ExecOptions { engine, mma_model: model, ..ExecOptions::default() };
    let interp = run_kernel_with(ptx, entry, grid, block, bufs, extra, &opts(Engine::Interpreter));
    for engine in [Engine::Jit, Engine::JitScalar] {
        let native = run_kernel_with(ptx, entry, grid, block, bufs, extra, &opts(engine));
        match (&interp, &native) {
            (Ok(a), Ok(b)) => assert!(a == b, "{engine:?} differs from the interpreter\n{ptx}"),
            (Err(a), Err(b)) => assert_eq!(a, b, "{engine:?} fails differently from the interpreter"),
            _ => panic!("one engine failed: {:?} vs {engine:?} {:?}", interp.as_ref().err(), native.as_ref().err()),
        }
    }
    interp
}

/// Runs `entry` as [`run_kernel`] does, on the one engine and with the options `opts` name.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_kernel_with(
    ptx: &str,
    entry: &str,
    grid: [u32; 3],
    block: [u32; 3],
    bufs: &[Vec<u8>],
    extra: &[u8],
    opts: &ExecOptions,
) -> Result<Vec<Vec<u8>>, String> {
    let m = Module::parse(ptx).map_err(|e| e.to_string())?;
    run_module_with(&m, entry, grid, block, bufs, extra, opts)
}

/// [`run_kernel_with`] on a module already parsed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_module_with(
    m: &Module,
    entry: &str,
    grid: [u32; 3],
    block: [u32; 3],
    bufs: &[Vec<u8>],
    extra: &[u8],
    opts: &ExecOptions,
) -> Result<Vec<Vec<u8>>, String> {
    let mut mem = Memory::new();
    let mut params = Vec::new();
    let mut bases = Vec::new();
    for b in bufs {
        let base = mem.add_region(b.len() as u64, 256).unwrap();
        mem.write(base, b).unwrap();
        params.extend_from_slice(&base.to_le_bytes());
        bases.push(base);
    }
    params.extend_from_slice(extra);
    let dims = LaunchDims { grid, block, dynamic_shared: 0 };
    launch(m, entry, &dims, &params, &mem, opts).map_err(|e| e.to_string())?;
    Ok(bases.iter().map(|&b| mem.read_region(b).unwrap()).collect())
}
