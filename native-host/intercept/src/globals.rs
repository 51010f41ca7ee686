//! The lookups of module variables' addresses (`cuModuleGetGlobal`, `cuLibraryGetGlobal`): the
//! program's own, and the CUDA runtime's behind `cudaMemcpyToSymbol` and `cudaGetSymbolAddress`.
//! Each address found becomes an allocation the recorder resolves copies and pointers against
//! (`record/module_vars.rs`).

use std::ffi::{c_char, CStr};

use crate::hooks::{guarded, then, Call};
use crate::real::Slot;
use crate::record::state;
use crate::sys::*;

/// Notes a lookup the driver answered.
///
/// # Safety
/// The pointers are the caller's, valid as the driver API requires of them.
unsafe fn found(
    call: Call,
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    handle: Handle,
    name: *const c_char,
) -> CUresult {
    then(call, || {
        if dptr.is_null() || bytes.is_null() || name.is_null() {
            return;
        }
        // SAFETY: the driver filled both and read the name.
        let (base, size, name) = unsafe { (*dptr, *bytes, CStr::from_ptr(name).to_string_lossy()) };
        state().module_var_found(handle as usize, &name, base, size as u64);
    })
}

hook! {
    [cuModuleGetGlobal_v2](dptr: *mut CUdeviceptr, bytes: *mut usize, module: Handle, name: *const c_char) =>
        |call: Call, dptr, bytes, module, name| found(call, dptr, bytes, module, name);
    [cuLibraryGetGlobal](dptr: *mut CUdeviceptr, bytes: *mut usize, library: Handle, name: *const c_char) =>
        |call: Call, dptr, bytes, library, name| found(call, dptr, bytes, library, name);
}
