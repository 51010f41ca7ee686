//! `CUresult`: the driver's status codes with their names and descriptions (one table, read by
//! both `cuGetErrorName` and `cuGetErrorString`), and [`guard`], which runs every export's body.

use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::ffi::Out;

/// A driver status, ABI-compatible with cuda.h's `CUresult` enum.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUresult(pub u32);

/// Every status the driver returns: `CUresult::NAME`, its value, its cuda.h name and description.
macro_rules! codes {
    ($($name:ident = $value:literal, $c_name:literal, $description:literal;)*) => {
        // Some statuses are here only for `cuGetErrorName` and `cuGetErrorString`.
        #[allow(dead_code)]
        impl CUresult {
            $(pub const $name: CUresult = CUresult($value);)*
        }
        const CODES: &[(CUresult, &CStr, &CStr)] = &[$((CUresult($value), $c_name, $description)),*];
    };
}

codes! {
    SUCCESS = 0, c"CUDA_SUCCESS", c"no error";
    INVALID_VALUE = 1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument";
    OUT_OF_MEMORY = 2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory";
    NOT_INITIALIZED = 3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error";
    DEINITIALIZED = 4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down";
    NO_DEVICE = 100, c"CUDA_ERROR_NO_DEVICE", c"no CUDA-capable device is detected";
    INVALID_DEVICE = 101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal";
    INVALID_IMAGE = 200, c"CUDA_ERROR_INVALID_IMAGE", c"device kernel image is invalid";
    INVALID_CONTEXT = 201, c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context";
    INVALID_PTX = 218, c"CUDA_ERROR_INVALID_PTX", c"a PTX JIT compilation failed";
    INVALID_HANDLE = 400, c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle";
    NOT_FOUND = 500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found";
    NOT_READY = 600, c"CUDA_ERROR_NOT_READY", c"device not ready";
    ILLEGAL_ADDRESS = 700, c"CUDA_ERROR_ILLEGAL_ADDRESS", c"an illegal memory access was encountered";
    LAUNCH_OUT_OF_RESOURCES = 701, c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", c"too many resources requested for launch";
    LAUNCH_TIMEOUT = 702, c"CUDA_ERROR_LAUNCH_TIMEOUT", c"the launch timed out and was terminated";
    LAUNCH_FAILED = 719, c"CUDA_ERROR_LAUNCH_FAILED", c"unspecified launch failure";
    NOT_SUPPORTED = 801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported";
    UNKNOWN = 999, c"CUDA_ERROR_UNKNOWN", c"unknown error";
}

/// The result of an export's body; `Err` is what the call returns.
pub(crate) type Result<T> = std::result::Result<T, CUresult>;

/// Runs an export's body: its error is the call's status, and a panic (a bug here) becomes
/// `CUDA_ERROR_UNKNOWN` instead of unwinding into C.
pub(crate) fn guard(body: impl FnOnce() -> Result<()>) -> CUresult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => CUresult::SUCCESS,
        Ok(Err(status)) => status,
        Err(_) => {
            eprintln!("recap-cpudriver: internal error (a panic), the call returns CUDA_ERROR_UNKNOWN");
            CUresult::UNKNOWN
        }
    }
}

/// Prints why a call failed where the status alone would not say (a kernel fault, PTX that does
/// not load), as the real driver's JIT log or compute-sanitizer would.
pub(crate) fn report(message: impl std::fmt::Display) {
    eprintln!("recap-cpudriver: {message}");
}

fn describe(
    error: CUresult,
    pick: impl Fn(&(CUresult, &'static CStr, &'static CStr)) -> &'static CStr,
    text: *mut *const c_char,
) -> CUresult {
    // SAFETY: `text` is the caller's out-parameter, per the driver API.
    let text = unsafe { Out::new(text) };
    guard(|| match CODES.iter().find(|c| c.0 == error) {
        Some(c) => text.set(pick(c).as_ptr()),
        None => {
            text.set(std::ptr::null())?;
            Err(CUresult::INVALID_VALUE)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, name: *mut *const c_char) -> CUresult {
    describe(error, |c| c.1, name)
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, text: *mut *const c_char) -> CUresult {
    describe(error, |c| c.2, text)
}
