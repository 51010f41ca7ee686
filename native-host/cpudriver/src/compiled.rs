//! GPU cubins the process compiled itself, under `recap capture`: this driver cannot run their
//! machine code, but the interposer in front of it knows where each such cubin's PTX is (the
//! NVRTC program that made it, compiled again; the input of the `ptxas` run that wrote it) and
//! hands it back (its `recap_cubin_ptx`), which runs here in the cubin's place, as a GPU would run
//! the cubin. Without the interposer (or for a cubin the process did not compile) a GPU cubin is
//! refused as before.

use std::ffi::{c_char, c_void, CStr};

extern "C" {
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
}

/// `RTLD_DEFAULT` on glibc: the global scope, where the interposer is when a program links
/// `libcuda.so.1`.
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

/// The PTX `cubin` was compiled from in this process, from the interposer, when there is one.
pub fn ptx_for_cubin(cubin: &[u8]) -> Option<String> {
    // SAFETY: dlsym with a NUL-terminated name; the symbol, when there, is the interposer's
    // `recap_cubin_ptx`, which reads `len` bytes at `cubin` and returns NULL or NUL-terminated
    // text it keeps for the life of the process.
    unsafe {
        let f = dlsym(RTLD_DEFAULT, c"recap_cubin_ptx".as_ptr());
        if f.is_null() {
            return None;
        }
        let f: unsafe extern "C" fn(*const u8, usize) -> *const c_char = std::mem::transmute(f);
        let ptx = f(cubin.as_ptr(), cubin.len());
        (!ptx.is_null()).then(|| CStr::from_ptr(ptx).to_string_lossy().into_owned())
    }
}
