//! `CUresult`: the driver's status codes with their names and descriptions (one table, read by
//! both `cuGetErrorName` and `cuGetErrorString`), and [`guard`], which runs every export's body.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{LazyLock, Mutex, Once};

use crate::ffi::{host, Out};

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
    NO_BINARY_FOR_GPU = 209, c"CUDA_ERROR_NO_BINARY_FOR_GPU", c"no kernel image is available for execution on the device";
    PEER_ACCESS_UNSUPPORTED = 217, c"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", c"peer access is not supported between these two devices";
    INVALID_PTX = 218, c"CUDA_ERROR_INVALID_PTX", c"a PTX JIT compilation failed";
    UNSUPPORTED_PTX_VERSION = 222, c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", c"the provided PTX was compiled with an unsupported toolchain";
    INVALID_HANDLE = 400, c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle";
    FILE_NOT_FOUND = 301, c"CUDA_ERROR_FILE_NOT_FOUND", c"file not found";
    NOT_FOUND = 500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found";
    NOT_READY = 600, c"CUDA_ERROR_NOT_READY", c"device not ready";
    ILLEGAL_ADDRESS = 700, c"CUDA_ERROR_ILLEGAL_ADDRESS", c"an illegal memory access was encountered";
    LAUNCH_OUT_OF_RESOURCES = 701, c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", c"too many resources requested for launch";
    LAUNCH_TIMEOUT = 702, c"CUDA_ERROR_LAUNCH_TIMEOUT", c"the launch timed out and was terminated";
    LAUNCH_FAILED = 719, c"CUDA_ERROR_LAUNCH_FAILED", c"unspecified launch failure";
    PEER_ACCESS_ALREADY_ENABLED = 704, c"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", c"peer access is already enabled";
    PEER_ACCESS_NOT_ENABLED = 705, c"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", c"peer access has not been enabled";
    HOST_MEMORY_ALREADY_REGISTERED = 712, c"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", c"part or all of the requested memory range is already mapped";
    HOST_MEMORY_NOT_REGISTERED = 713, c"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", c"pointer does not correspond to a registered memory region";
    MISALIGNED_ADDRESS = 716, c"CUDA_ERROR_MISALIGNED_ADDRESS", c"misaligned address";
    NOT_SUPPORTED = 801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported";
    UNKNOWN = 999, c"CUDA_ERROR_UNKNOWN", c"unknown error";
}

/// The result of an export's body; `Err` is what the call returns.
pub(crate) type Result<T> = std::result::Result<T, CUresult>;

thread_local! {
    /// Whether the calling thread is inside one of the driver's calls: its panics are the driver's
    /// to report (a `const` cell without a destructor, readable at exit too).
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
}

/// Runs an export's body: its error is the call's status, and a panic (a bug here) becomes
/// `CUDA_ERROR_UNKNOWN` instead of unwinding into C, reported in one line, with no backtrace.
pub(crate) fn guard(body: impl FnOnce() -> Result<()>) -> CUresult {
    quiet_panics();
    let outer = IN_CALL.with(|c| c.replace(true));
    let result = catch_unwind(AssertUnwindSafe(body));
    IN_CALL.with(|c| c.set(outer));
    match result {
        Ok(Ok(())) => CUresult::SUCCESS,
        Ok(Err(status)) => status,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("a panic");
            report(format_args!("internal error ({message}): the call returns CUDA_ERROR_UNKNOWN"));
            CUresult::UNKNOWN
        }
    }
}

/// Installs, once, a panic hook that stays silent for panics inside the driver's calls (`guard`
/// reports them in one line) and hands every other panic to the hook that was there before, so a
/// Rust program that loads the driver keeps its own reports.
fn quiet_panics() {
    static ONCE: Once = Once::new();
    if std::thread::panicking() {
        return;
    }
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_CALL.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Calls this driver does not implement: each returns `CUDA_ERROR_NOT_SUPPORTED`, and with
/// `RECAP_CPU_LOG=1` the first call of each name is printed on stderr.
pub(crate) fn not_supported(name: &'static str) -> CUresult {
    log_unsupported_once(name.into());
    CUresult::NOT_SUPPORTED
}

/// With `RECAP_CPU_LOG=1`, names on stderr the first call of `what` (an entry point, or one with
/// the argument that makes it unsupported), which returns `CUDA_ERROR_NOT_SUPPORTED`.
fn log_unsupported_once(what: Cow<'static, str>) {
    static LOG: LazyLock<Option<Mutex<HashSet<Cow<'static, str>>>>> =
        LazyLock::new(|| std::env::var_os("RECAP_CPU_LOG").is_some_and(|v| v == "1").then(Default::default));
    if let Some(seen) = LOG.as_ref() {
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        if !seen.contains(&what) {
            report(format_args!("{what} is not implemented: it returns CUDA_ERROR_NOT_SUPPORTED"));
            seen.insert(what);
        }
    }
}

/// The tables of entry points the CUDA runtime asks the driver for by a 16-byte id before its
/// first call does anything; cuda.h does not describe them, and there are none here, so a
/// program on the CUDA runtime (CuPy, nvcc's programs) stops at its first runtime call
/// (docs/CPU-DRIVER.md, "CuPy"). The table is null, and `RECAP_CPU_LOG=1` names each id asked for.
#[no_mangle]
pub unsafe extern "C" fn cuGetExportTable(table: *mut *const c_void, id: *const c_void) -> CUresult {
    // SAFETY: the caller's out-parameter and its 16-byte id, per the driver API.
    let table = unsafe { Out::new(table) };
    guard(|| {
        // SAFETY: as above.
        let id = unsafe { host(id, 16) }?;
        table.set(std::ptr::null())?;
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let uuid = format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
        log_unsupported_once(format!("cuGetExportTable({uuid})").into());
        Err(CUresult::NOT_SUPPORTED)
    })
}

/// Prints why a call failed where the status alone would not say (a kernel fault, PTX that does
/// not load), as the real driver's JIT log or compute-sanitizer would.
pub(crate) fn report(message: impl std::fmt::Display) {
    use std::io::Write as _;
    // Not `eprintln!`, which panics where stderr fails: a report is never worth a failed call.
    let _ = writeln!(std::io::stderr(), "recap-cpudriver: {message}");
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

#[cfg(test)]
#[path = "result_tests.rs"]
mod tests;
