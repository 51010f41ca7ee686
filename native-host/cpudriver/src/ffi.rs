//! The C side of the driver API: its types, and the few functions that turn the caller's raw
//! pointers into Rust values. All of the crate's dereferences of caller memory are here; each
//! trusts the driver API's contract (an out-parameter points to writable storage, a host buffer
//! of `n` bytes is `n` readable bytes, a name is NUL-terminated), as the real driver does. Device
//! addresses are never dereferenced: they go through `shared::ptx::Memory`, which checks them.

use std::ffi::{c_char, c_void, CStr};

use crate::result::{CUresult, Result};

pub type CUdevice = i32;
pub type CUdeviceptr = u64;
/// `CUcontext`, `CUmodule`, `CUfunction`, `CUstream`, `CUevent`, `CUlibrary`, `CUkernel`: opaque
/// pointers, checked against the driver's tables before use (see `driver::Handles`).
pub type Handle = *mut c_void;

/// An out-parameter: null is refused with `CUDA_ERROR_INVALID_VALUE` when written.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    /// # Safety
    /// `p` is null or valid for writing a `T`.
    pub(crate) unsafe fn new(p: *mut T) -> Out<T> {
        Out(p)
    }

    pub(crate) fn is_null(&self) -> bool {
        self.0.is_null()
    }

    /// Fails before any work is done, for calls that would otherwise make something to leak.
    pub(crate) fn check(&self) -> Result<()> {
        if self.0.is_null() {
            return Err(CUresult::INVALID_VALUE);
        }
        Ok(())
    }

    pub(crate) fn set(&self, value: T) -> Result<()> {
        self.check()?;
        // SAFETY: non-null, and valid for a write by `new`'s contract; C does not promise
        // alignment beyond the type's, which `write_unaligned` does not need.
        unsafe { self.0.write_unaligned(value) };
        Ok(())
    }

    /// Writes only where the caller asked (the parameter is optional).
    pub(crate) fn set_if_asked(&self, value: T) {
        if !self.0.is_null() {
            let _ = self.set(value);
        }
    }
}

/// `len` bytes of host memory at `p` (an empty slice for `len == 0`, whatever `p`).
///
/// # Safety
/// `p` is valid for reading `len` bytes for `'a`.
pub(crate) unsafe fn host<'a>(p: *const c_void, len: usize) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(CUresult::INVALID_VALUE);
    }
    // SAFETY: non-null and `len` readable bytes by the contract.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

/// `len` writable bytes of host memory at `p`.
///
/// # Safety
/// `p` is valid for writing `len` bytes for `'a`, and nothing else reads or writes them meanwhile.
pub(crate) unsafe fn host_mut<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(CUresult::INVALID_VALUE);
    }
    // SAFETY: non-null and `len` writable, unshared bytes by the contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) })
}

/// A NUL-terminated string (a symbol or kernel name, PTX text).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn c_str<'a>(p: *const c_char) -> Result<&'a CStr> {
    if p.is_null() {
        return Err(CUresult::INVALID_VALUE);
    }
    // SAFETY: NUL-terminated by the contract.
    Ok(unsafe { CStr::from_ptr(p) })
}

/// Element `i` of a C array of `T` (a kernel's parameter pointers, `extra` words, JIT options).
///
/// # Safety
/// `array` is null or has more than `i` readable elements.
pub(crate) unsafe fn element<T: Copy>(array: *const T, i: usize) -> Result<T> {
    if array.is_null() {
        return Err(CUresult::INVALID_VALUE);
    }
    // SAFETY: element `i` is readable by the contract.
    Ok(unsafe { array.add(i).read_unaligned() })
}

/// Host-to-host copy for `cuMemcpy` between two host addresses.
///
/// # Safety
/// `src` is valid for reading and `dst` for writing `len` bytes.
pub(crate) unsafe fn host_copy(dst: *mut c_void, src: *const c_void, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    if dst.is_null() || src.is_null() {
        return Err(CUresult::INVALID_VALUE);
    }
    // SAFETY: by the contract; `copy` allows overlap, as memmove does.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
    Ok(())
}
