//! The in-process control API: a program that loaded this library itself (the Python package's
//! `with recap.capture(path, inputs=..., outputs=...)`) opens and closes ranges by call instead of
//! through `recap capture`'s environment, names device memory as the archive's bindings, and gets
//! the report back as JSON. Each range opened by call is a capture request of its own
//! (`shared::capture::Request`, range `in-process`), the process's request with its path. Several ranges, one after another, each write their own archive.
//!
//! The exported functions are C ABI, called through `ctypes`; each returns 0 on success and -1
//! on failure, with the reason from `recap_control_error` (the calling thread's last error). No
//! panic crosses into the caller.
//!
//! A binding names a device pointer range: at the end of the range it must be one whole
//! allocation the range touched (the archive's regions are allocations). A pointer inside a
//! larger allocation (a block of PyTorch's caching allocator or CuPy's memory pool) is reported,
//! not bound to the wrong bytes.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::PathBuf;
use std::sync::Mutex;

use shared::archive::{DType, Direction};
use shared::capture::{Range, Request};

use crate::record::state;

/// A binding the caller asked for.
#[derive(Clone, Debug)]
pub struct Bind {
    pub name: String,
    pub ptr: u64,
    pub bytes: u64,
    pub direction: Direction,
    /// The element type and shape the caller's array has, for the region.
    pub dtype: DType,
    pub shape: Vec<u64>,
}

/// The bindings of the controlled range.
#[derive(Default)]
struct Control {
    /// Whether a controlled range is open (from its begin to its end call).
    open: bool,
    binds: Vec<Bind>,
}

static CONTROL: Mutex<Control> = Mutex::new(Control { open: false, binds: Vec::new() });

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn control() -> std::sync::MutexGuard<'static, Control> {
    CONTROL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The bindings of the controlled range open now (none when none is), for its archive.
pub fn open_binds() -> Vec<Bind> {
    let c = control();
    if c.open {
        c.binds.clone()
    } else {
        Vec::new()
    }
}

/// Why a control call failed: the text [`recap_control_error`] hands back.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// `what` names the argument.
    #[error("{what} is NULL")]
    Null { what: &'static str },
    #[error("{what} is not UTF-8")]
    NotUtf8 { what: &'static str },
    #[error("a capture is already open in this process: end it first")]
    AlreadyOpen,
    #[error("a capture is already recording in this process")]
    AlreadyRecording,
    #[error("no capture is recording in this process")]
    NotRecording,
    #[error("binding {name}: no capture is open")]
    NoneOpen { name: String },
    #[error("binding {name}: direction {direction} is not 0 (in), 1 (out) or 2 (both)")]
    Direction { name: String, direction: c_int },
    #[error("binding {name} is named twice")]
    NamedTwice { name: String },
    #[error("{name:?} is not an element type")]
    ElemType { name: String },
    #[error(transparent)]
    Report(#[from] serde_json::Error),
    #[error(transparent)]
    Nul(#[from] std::ffi::NulError),
    /// A panic inside the call, with its message.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Runs `f`, turning an error or a panic into the thread's last error and -1.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), ControlError>) -> c_int {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
        Err(ControlError::Internal(what.unwrap_or_else(|| "unknown panic".into())))
    });
    match outcome {
        Ok(()) => 0,
        Err(e) => {
            let c = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
            LAST_ERROR.with(|e| *e.borrow_mut() = c);
            -1
        }
    }
}

/// # Safety
/// `s` is NULL or a NUL-terminated string.
pub(crate) unsafe fn text(s: *const c_char, what: &'static str) -> Result<String, ControlError> {
    if s.is_null() {
        return Err(ControlError::Null { what });
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(s) };
    s.to_str().map(str::to_string).map_err(|_| ControlError::NotUtf8 { what })
}

/// The reason the calling thread's last control call failed ("" if none did).
#[no_mangle]
pub extern "C" fn recap_control_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Opens a range now; its archive goes to `path` when [`recap_control_end`] closes it.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn recap_control_begin(path: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let path = PathBuf::from(unsafe { text(path, "path") }?);
        let request = Request { range: Range::InProcess, output: path, ..crate::request::get().clone() };
        let mut st = state();
        {
            let mut c = control();
            if c.open {
                return Err(ControlError::AlreadyOpen);
            }
            c.open = true;
            c.binds.clear();
        }
        st.begin_controlled(request).inspect_err(|_| control().open = false)
    })
}

/// Names `bytes` bytes of device memory at `ptr` as binding `name` of the open range: `direction`
/// 0 input, 1 output, 2 both; `dtype` a numpy type string (`<f4`) and `shape` `ndim` dimensions
/// (the region's element type and shape in the archive).
///
/// # Safety
/// `name` and `dtype` are NUL-terminated strings; `shape` points to `ndim` values (or is NULL
/// when `ndim` is 0).
#[no_mangle]
pub unsafe extern "C" fn recap_control_bind(
    name: *const c_char,
    ptr: u64,
    bytes: u64,
    direction: c_int,
    dtype: *const c_char,
    shape: *const u64,
    ndim: usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let (name, descr) = unsafe { (text(name, "binding name")?, text(dtype, "dtype")?) };
        let direction = match direction {
            0 => Direction::In,
            1 => Direction::Out,
            2 => Direction::InOut,
            direction => return Err(ControlError::Direction { name, direction }),
        };
        let dtype = shared::npy::dtype_of(&descr).unwrap_or(DType::Bytes);
        let shape = if ndim == 0 || shape.is_null() {
            Vec::new()
        } else {
            // SAFETY: the caller passes `ndim` values.
            unsafe { std::slice::from_raw_parts(shape, ndim) }.to_vec()
        };
        let mut c = control();
        if !c.open {
            return Err(ControlError::NoneOpen { name });
        }
        match c.binds.iter_mut().find(|b| b.name == name) {
            Some(b) if b.ptr == ptr && b.bytes == bytes && b.direction != direction => b.direction = Direction::InOut,
            Some(_) => return Err(ControlError::NamedTwice { name }),
            None => c.binds.push(Bind { name, ptr, bytes, direction, dtype, shape }),
        }
        Ok(())
    })
}

/// Closes the open range and writes its archive; `*report` then points to the capture report as
/// JSON (valid until the next call), whose `error` says why no archive was written, if none was.
///
/// # Safety
/// `report` is writable.
#[no_mangle]
pub unsafe extern "C" fn recap_control_end(report: *mut *const c_char) -> c_int {
    thread_local! {
        static REPORT: RefCell<CString> = RefCell::new(CString::default());
    }
    guard(|| {
        if report.is_null() {
            return Err(ControlError::Null { what: "report" });
        }
        // The program's arrays, before the recorder's lock (`declared.rs` says why).
        crate::declared::gather();
        let mut st = state();
        let ended = st.finish_controlled("the end of the capture block");
        control().open = false;
        ended?;
        let json = CString::new(serde_json::to_string(&st.report)?)?;
        REPORT.with(|r| {
            *r.borrow_mut() = json;
            // SAFETY: checked non-NULL; the caller passes writable memory.
            unsafe { *report = r.borrow().as_ptr() };
        });
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's last error, as the Python package reads it.
    fn last_error() -> String {
        // SAFETY: the thread's own NUL-terminated message, alive until its next failing call.
        unsafe { CStr::from_ptr(recap_control_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_refused_call_answers_minus_one_and_says_why() {
        let (name, dtype) = (c"x", c"<f4");
        let bind = |direction| {
            // SAFETY: NUL-terminated strings and no shape.
            unsafe { recap_control_bind(name.as_ptr(), 0x1000, 4, direction, dtype.as_ptr(), std::ptr::null(), 0) }
        };
        assert_eq!(bind(7), -1);
        assert_eq!(last_error(), "binding x: direction 7 is not 0 (in), 1 (out) or 2 (both)");
        assert_eq!(bind(0), -1);
        assert_eq!(last_error(), "binding x: no capture is open");
        // SAFETY: NULL is what each refuses.
        assert_eq!(unsafe { recap_control_begin(std::ptr::null()) }, -1);
        assert_eq!(last_error(), "path is NULL");
        // SAFETY: as above.
        assert_eq!(unsafe { recap_control_end(std::ptr::null_mut()) }, -1);
        assert_eq!(last_error(), "report is NULL");
        assert_eq!(guard(|| panic!("a recorder bug")), -1);
        assert_eq!(last_error(), "internal error: a recorder bug");
    }
}
