//! Kernel launches: the parameter buffer packed by the PTX `.entry` layout, the grid run on
//! `shared::ptx` before the call returns.

use std::ffi::{c_uint, c_void};

use shared::ptx::{Entry, ExecError, ExecOptions, LaunchDims, LaunchPlan};

use crate::driver::{ready, Driver};
use crate::ffi::{element, host, Handle};
use crate::result::{guard, report, CUresult, Result};

/// The words of a launch's `extra` array: `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`
/// (the next word is the packed parameter buffer), `CU_LAUNCH_PARAM_BUFFER_SIZE` (the next word
/// points to its size).
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

/// The kernel's parameter buffer, from `kernelParams` (a pointer to each parameter's value, in
/// declaration order) or from `extra` (one buffer packed by the caller).
///
/// # Safety
/// The arrays and what they point to are as the driver API requires for this kernel.
unsafe fn pack(entry: &Entry, kernel_params: *const *const c_void, extra: *const *const c_void) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; entry.params_size() as usize];
    match (kernel_params.is_null(), extra.is_null()) {
        (false, false) => return Err(CUresult::INVALID_VALUE),
        (true, true) if !buf.is_empty() => return Err(CUresult::INVALID_VALUE),
        (true, true) => {}
        (false, true) => {
            for (i, p) in entry.params().iter().enumerate() {
                let (offset, size) = (p.offset as usize, p.size as usize);
                // SAFETY: one readable pointer per parameter, to `size` readable bytes.
                let value = unsafe { host(element(kernel_params, i)?, size) }?;
                buf[offset..offset + size].copy_from_slice(value);
            }
        }
        (true, false) => {
            let (mut pointer, mut size) = (None, None);
            let mut i = 0;
            loop {
                // SAFETY: the array runs to `CU_LAUNCH_PARAM_END`, each key followed by its value.
                match unsafe { element(extra, i) }? as usize {
                    PARAM_END => break,
                    PARAM_BUFFER_POINTER => pointer = Some(unsafe { element(extra, i + 1) }?),
                    PARAM_BUFFER_SIZE => size = Some(unsafe { element(element(extra, i + 1)? as *const usize, 0) }?),
                    _ => return Err(CUresult::INVALID_VALUE),
                }
                i += 2;
            }
            let (Some(pointer), Some(size)) = (pointer, size) else { return Err(CUresult::INVALID_VALUE) };
            if size < buf.len() {
                return Err(CUresult::INVALID_VALUE);
            }
            let n = buf.len();
            // SAFETY: the caller's buffer holds `size >= n` bytes.
            buf.copy_from_slice(unsafe { host(pointer, n) }?);
        }
    }
    Ok(buf)
}

/// The status of a launch the engine stopped: an access not aligned to its size is the real
/// driver's misaligned address, any other memory fault its illegal address; a trap or a barrier
/// only part of a block reached, an unspecified launch failure.
fn fault(e: &ExecError) -> CUresult {
    match e {
        // The engine's fault kinds reach here only as the words of `what`.
        ExecError::Memory { what, .. } if what.starts_with("misaligned") => CUresult::MISALIGNED_ADDRESS,
        ExecError::Memory { .. } => CUresult::ILLEGAL_ADDRESS,
        ExecError::Budget { .. } | ExecError::Cancelled { .. } => CUresult::LAUNCH_TIMEOUT,
        _ => CUresult::LAUNCH_FAILED,
    }
}

/// A launch. A shape the engine refuses (too many threads, too much shared memory) is
/// `CUDA_ERROR_INVALID_VALUE`; a fault in the kernel is reported on stderr and becomes the
/// context's sticky error.
///
/// # Safety
/// As [`pack`].
unsafe fn launch(
    f: Handle,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    dynamic_shared: c_uint,
    stream: Handle,
    kernel_params: *const *const c_void,
    extra: *const *const c_void,
) -> CUresult {
    guard(|| {
        let mut d = ready(Some(stream))?;
        let params = unsafe { pack_for(&d, f, kernel_params, extra) }?;
        run(&mut d, f, LaunchDims { grid, block, dynamic_shared }, &params)
    })
}

/// Kernel `f`'s parameter buffer from the caller's `kernelParams` or `extra` (a graph's kernel node
/// packs it when the node is made, as the real driver copies the values then).
///
/// # Safety
/// As [`pack`].
pub(crate) unsafe fn pack_for(
    d: &Driver,
    f: Handle,
    kernel_params: *const *const c_void,
    extra: *const *const c_void,
) -> Result<Vec<u8>> {
    let (func, ptx) = d.function(f)?;
    // SAFETY: the caller's contract.
    unsafe { pack(&ptx.entries()[func.entry], kernel_params, extra) }
}

/// Runs kernel `f` over `dims` with its packed parameters, in the current context.
pub(crate) fn run(d: &mut Driver, f: Handle, dims: LaunchDims, params: &[u8]) -> Result<()> {
    let ctx = d.current()?;
    let (func, module) = d.function_module(f)?;
    let ptx = &module.ptx;
    let entry = &ptx.entries()[func.entry];
    // A block past the kernel's declared bounds does not launch, as on a GPU.
    if module.bounds.get(entry.name()).is_some_and(|b| !b.admits(dims.block)) {
        report(format_args!(
            "kernel {}: a block of {:?} threads is past its .maxntid/.reqntid",
            entry.name(),
            dims.block
        ));
        return Err(CUresult::INVALID_VALUE);
    }
    let plan = LaunchPlan::new(ptx, entry.name(), &dims).map_err(|e| {
        report(&e);
        CUresult::INVALID_VALUE
    })?;
    let launched = match crate::config::config().block_order.next_seed() {
        None => plan.launch(ptx, params, &d.memory, &d.exec),
        seed => plan.launch(ptx, params, &d.memory, &ExecOptions { block_order: seed, ..d.exec.clone() }),
    };
    let Err(e) = launched else { return Ok(()) };
    report(&e);
    let status = fault(&e);
    d.context(ctx)?.fault = Some(status);
    Err(status)
}

/// `CUlaunchConfig`. Launch attributes are ignored: they tune how a GPU schedules a launch, and
/// here every launch runs to completion, in call order.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: Handle,
    attrs: *mut c_void,
    num_attrs: c_uint,
}

exports! {
    cuLaunchKernel(
        f: Handle,
        gx: c_uint, gy: c_uint, gz: c_uint,
        bx: c_uint, by: c_uint, bz: c_uint,
        shared: c_uint,
        stream: Handle,
        kernel_params: *const *const c_void,
        extra: *const *const c_void
    ) | cuLaunchKernel_ptsz => launch(f, [gx, gy, gz], [bx, by, bz], shared, stream, kernel_params, extra);
    cuLaunchKernelEx(
        config: *const LaunchConfig,
        f: Handle,
        kernel_params: *const *const c_void,
        extra: *const *const c_void
    ) | cuLaunchKernelEx_ptsz => match element(config, 0) {
        Ok(c) => launch(f, c.grid, c.block, c.shared, c.stream, kernel_params, extra),
        Err(status) => status,
    };
}

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;
