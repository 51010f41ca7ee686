//! A CPU stand-in for the CUDA driver: a `libcuda.so.1` that runs PTX on `shared::ptx`, so that
//! CUDA programs (C programs on the driver API, numba, CuPy, cuda-python) run, and are tested, on
//! machines without a GPU, and so that `recap capture`'s interposer is tested against something
//! that really executes. `recap run --cpu -- CMD` puts it in front of a program
//! (docs/CPU-DRIVER.md); `config.rs` is the device the environment asks for.
//!
//! What it implements, with the C ABI of cuda.h (a program linked with `-lcuda` or resolving entry
//! points with `cuGetProcAddress` finds the same functions):
//! - initialisation, the driver version (13.0), `RECAP_CPU_DEVICES` devices, one by default
//!   (`cuDeviceGet*`, the compute capability `RECAP_CPU_ARCH` gives, 9.0 by default, the CPU
//!   engine's limits as its attributes), primary and created contexts on each with a per-thread
//!   context stack (`device.rs`), peer access between devices (`queries.rs`);
//! - modules and libraries from PTX text, their kernels, parameter layouts and names (`module.rs`);
//! - device memory (every device's in the one host memory, each allocation owned by its maker's
//!   device), copies in every direction and between devices, fills, page-locked host memory
//!   (`memory.rs`); managed memory and host memory mapped into the device, the host's own bytes
//!   at device addresses (`mapped.rs`); stream-ordered memory pools, as bookkeeping (`pools.rs`);
//! - launches, from `kernelParams` or an `extra` buffer (`launch.rs`);
//! - the linker, of one PTX input or several linked on their text (`link.rs`, `ptx_text.rs`);
//!   occupancy, identifiers, cache and limit
//!   settings, host callbacks on streams (`queries.rs`);
//! - streams and events, the profiler switches (`stream.rs`);
//! - graphs built node by node: kernel, memcpy, memset, empty, event and child graph nodes, their
//!   dependencies, instantiation, kernel node updates, launches (`graph.rs`);
//! - status names and descriptions (`result.rs`) and `cuGetProcAddress` (`procs.rs`: the one table
//!   of entry points), with the per-thread default stream variants (`_ptds`, `_ptsz`).
//!
//! How it differs from the real driver:
//! - Work runs when it is issued, in call order, under one lock: streams and events are
//!   bookkeeping (an event records the host time), and async calls have finished when they return.
//! - A kernel fault is returned by the launch itself (the real driver returns it from a later
//!   call), printed on stderr prefixed `recap-cpudriver:`, and stays the context's sticky error.
//! - Memory, modules, streams and events belong to the driver, not to a context: destroying or
//!   resetting a context frees none of them (a reset clears the sticky error). A kernel reaches
//!   every device's allocations, whether or not peer access was enabled.
//! - Only PTX runs: PTX text, a fat binary's PTX entry, or the driver's own machine code (an ELF
//!   image wrapping PTX, `machine.rs`, which image readers take for a cubin without PTX); GPU
//!   cubins are `CUDA_ERROR_NO_BINARY_FOR_GPU`, naming their kernels. Module-scope
//!   variables are regions of device memory (`globals.rs`): `cuModuleGetGlobal` gives their address.
//! - JIT and launch options and attributes are accepted and ignored, except the JIT error log.
//! - Every other entry point of NVIDIA's driver is exported and returns `CUDA_ERROR_NOT_SUPPORTED`
//!   (`unsupported.rs`; `RECAP_CPU_LOG=1` names the first call of each). The CUDA runtime's private
//!   tables of entry points (`cuGetExportTable`, `result.rs`) are among them: programs on the
//!   runtime rather than the driver API stop at their first runtime call.
//!
//! Safety: every handle is looked up in a table before use (a stale or made-up one is
//! `CUDA_ERROR_INVALID_HANDLE`), every device address is checked by `shared::ptx::Memory` (a bad
//! one is `CUDA_ERROR_INVALID_VALUE`, in a kernel `CUDA_ERROR_ILLEGAL_ADDRESS`, or
//! `CUDA_ERROR_MISALIGNED_ADDRESS` for an access not aligned to its size), and host pointers
//! are read and written only in `ffi.rs`, on the terms the driver API sets. No panic crosses into C: every
//! export's body runs in `result::guard`, and the per-thread state (the context stack) lives where
//! a thread's end or the process's exit cannot take it away (`driver.rs`).

// The exports keep cuda.h's names; their safety contract is the driver API's.
#![allow(non_snake_case, clippy::missing_safety_doc)]
#![warn(unsafe_op_in_unsafe_fn)]

/// Defines exports whose bodies are one expression, each with an optional alias: the variant for
/// the per-thread default stream, the same call here (every stream is the same).
macro_rules! exports {
    ($($name:ident $params:tt $(| $alias:ident)? => $body:expr;)*) => {$(
        exports!(@export $name $params $body);
        $(exports!(@alias $alias $name $params);)?
    )*};
    (@export $name:ident ($($arg:ident: $ty:ty),* $(,)?) $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::result::CUresult {
            // SAFETY: the arguments are the caller's, valid as the driver API requires of them.
            #[allow(unused_unsafe)]
            unsafe { $body }
        }
    };
    (@alias $alias:ident $name:ident ($($arg:ident: $ty:ty),* $(,)?)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $alias($($arg: $ty),*) -> $crate::result::CUresult {
            // SAFETY: as for the call it stands for.
            unsafe { $name($($arg),*) }
        }
    };
}

mod compiled;
mod config;
mod device;
mod driver;
mod ffi;
mod globals;
mod graph;
mod launch;
mod link;
mod machine;
mod mapped;
mod memory;
mod module;
#[cfg(test)]
mod multi_device_tests;
mod pools;
mod procs;
mod ptx_text;
mod queries;
mod result;
mod stream;
#[cfg(test)]
mod test_support;
mod unsupported;
