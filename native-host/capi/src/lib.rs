//! The C API of recap: load an archive on a device, set and get its bindings by name, replay it.
//!
//! The key design decision: handles are opaque and every call returns a status (or NULL) instead of
//! crashing; the reason for the last failure on the calling thread is one string from
//! `recap_last_error`. A Rust panic never crosses into C: it becomes an error like any other.
//! The header `include/recap.h` is generated from this file by cbindgen and checked in; the test
//! suite fails when it is stale.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use recap::{CaptureError, Device, Graph};

/// A device: the CPU or one CUDA GPU.
pub struct RecapDevice {
    device: Device,
}

/// An archive loaded on a device, ready to replay.
pub struct RecapGraph {
    graph: Graph,
    names: Vec<CString>,
}

/// Outcome of a call; on `RECAP_STATUS_ERROR`, `recap_last_error` says why.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecapStatus {
    Ok = 0,
    Error = 1,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Why a call failed; its message is what `recap_last_error` then says.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("{0} is NULL")]
    Null(&'static str),
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    #[error(transparent)]
    Recap(#[from] CaptureError),
    #[error("binding index {index} is out of range; the graph has {count} bindings")]
    BindingIndex { index: usize, count: usize },
    /// `names` lists the graph's bindings, comma-separated.
    #[error("binding {name}: no such binding; the graph has {names}")]
    NoBinding { name: String, names: String },
    #[error("binding {name}: is {size} bytes; the output buffer is {len}")]
    BufferSize { name: String, size: usize, len: usize },
}

fn set_error(message: String) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs `f`, turning an error or a panic into the thread's last error.
fn guard<T>(fallback: T, f: impl FnOnce() -> Result<T, CallError>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(error)) => {
            set_error(error.to_string());
            fallback
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_error(format!("internal error: {what}"));
            fallback
        }
    }
}

fn status(f: impl FnOnce() -> Result<(), CallError>) -> RecapStatus {
    guard(RecapStatus::Error, || f().map(|()| RecapStatus::Ok))
}

/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn text<'a>(s: *const c_char, what: &'static str) -> Result<&'a str, CallError> {
    if s.is_null() {
        return Err(CallError::Null(what));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(s) }.to_str().map_err(|_| CallError::NotUtf8(what))
}

/// # Safety
/// `p` is NULL or a handle this library returned and that was not freed.
unsafe fn handle<'a, T>(p: *const T, what: &'static str) -> Result<&'a T, CallError> {
    // SAFETY: the caller passes a live handle or NULL.
    unsafe { p.as_ref() }.ok_or(CallError::Null(what))
}

/// The reason for the last failed call on this thread, or "" if none failed. The string stays
/// valid until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn recap_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Opens a device: "cpu", "cuda" (GPU 0) or "cuda:N". NULL on failure (no driver, no such GPU).
///
/// # Safety
/// `spec` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn recap_device_open(spec: *const c_char) -> *mut RecapDevice {
    guard(std::ptr::null_mut(), || {
        // SAFETY: forwarded from the caller.
        let spec = unsafe { text(spec, "device spec") }?;
        let device = Device::from_spec(spec)?;
        Ok(Box::into_raw(Box::new(RecapDevice { device })))
    })
}

/// Closes a device handle. Graphs loaded on it keep the device alive until they are freed.
///
/// # Safety
/// `device` is NULL or a handle from `recap_device_open`, freed once.
#[no_mangle]
pub unsafe extern "C" fn recap_device_free(device: *mut RecapDevice) {
    if !device.is_null() {
        // SAFETY: the caller hands back ownership of a handle this library made.
        drop(unsafe { Box::from_raw(device) });
    }
}

/// Loads an archive file onto a device. NULL on failure.
///
/// # Safety
/// `path` is a NUL-terminated string; `device` a live device handle.
#[no_mangle]
pub unsafe extern "C" fn recap_graph_load(path: *const c_char, device: *const RecapDevice) -> *mut RecapGraph {
    guard(std::ptr::null_mut(), || {
        // SAFETY: forwarded from the caller.
        let (path, device) = unsafe { (text(path, "path")?, handle(device, "device")?) };
        let graph = Graph::load(path, &device.device)?;
        let names = graph.bindings().iter().map(|b| CString::new(b.name.as_str()).unwrap_or_default()).collect();
        Ok(Box::into_raw(Box::new(RecapGraph { graph, names })))
    })
}

/// Frees a graph and its device memory.
///
/// # Safety
/// `graph` is NULL or a handle from `recap_graph_load`, freed once.
#[no_mangle]
pub unsafe extern "C" fn recap_graph_free(graph: *mut RecapGraph) {
    if !graph.is_null() {
        // SAFETY: the caller hands back ownership of a handle this library made.
        drop(unsafe { Box::from_raw(graph) });
    }
}

/// Replays the graph once and waits for it to finish.
///
/// # Safety
/// `graph` is a live graph handle.
#[no_mangle]
pub unsafe extern "C" fn recap_graph_launch(graph: *mut RecapGraph) -> RecapStatus {
    status(|| {
        // SAFETY: forwarded from the caller.
        let g = unsafe { handle(graph, "graph") }?;
        Ok(g.graph.launch()?)
    })
}

/// Number of named bindings (inputs and outputs) of the graph; 0 for a NULL handle.
///
/// # Safety
/// `graph` is NULL or a live graph handle.
#[no_mangle]
pub unsafe extern "C" fn recap_graph_binding_count(graph: *const RecapGraph) -> usize {
    // SAFETY: forwarded from the caller.
    unsafe { graph.as_ref() }.map_or(0, |g| g.names.len())
}

/// Name of binding `index`, valid while the graph lives; NULL when out of range.
///
/// # Safety
/// `graph` is a live graph handle.
#[no_mangle]
pub unsafe extern "C" fn recap_graph_binding_name(graph: *const RecapGraph, index: usize) -> *const c_char {
    guard(std::ptr::null(), || {
        // SAFETY: forwarded from the caller.
        let g = unsafe { handle(graph, "graph") }?;
        g.names.get(index).map(|n| n.as_ptr()).ok_or(CallError::BindingIndex { index, count: g.names.len() })
    })
}

/// Size in bytes of a binding, written to `*bytes`.
///
/// # Safety
/// `graph` is a live graph handle, `name` a NUL-terminated string, `bytes` writable.
#[no_mangle]
pub unsafe extern "C" fn recap_graph_binding_size(
    graph: *const RecapGraph,
    name: *const c_char,
    bytes: *mut usize,
) -> RecapStatus {
    status(|| {
        // SAFETY: forwarded from the caller.
        let (g, name) = unsafe { (handle(graph, "graph")?, text(name, "binding name")?) };
        let b = g.graph.bindings().iter().find(|b| b.name == name).ok_or_else(|| {
            let names: Vec<&str> = g.graph.bindings().iter().map(|b| b.name.as_str()).collect();
            CallError::NoBinding { name: name.to_string(), names: names.join(", ") }
        })?;
        if bytes.is_null() {
            return Err(CallError::Null("bytes"));
        }
        // SAFETY: checked non-NULL; the caller passes writable memory.
        unsafe { *bytes = b.bytes as usize };
        Ok(())
    })
}

/// Replaces a binding's contents with `len` bytes from `data`; `len` must be its exact size.
///
/// # Safety
/// `graph` is a live graph handle, `name` a NUL-terminated string, `data` `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn recap_graph_set(
    graph: *mut RecapGraph,
    name: *const c_char,
    data: *const c_void,
    len: usize,
) -> RecapStatus {
    status(|| {
        // SAFETY: forwarded from the caller.
        let (g, name) = unsafe { (handle(graph, "graph")?, text(name, "binding name")?) };
        if data.is_null() && len > 0 {
            return Err(CallError::Null("data"));
        }
        // SAFETY: the caller passes `len` readable bytes.
        let bytes = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(data as *const u8, len) } };
        Ok(g.graph.set_param(name, bytes)?)
    })
}

/// Copies a binding's contents into `out`; `len` must be its exact size.
///
/// # Safety
/// `graph` is a live graph handle, `name` a NUL-terminated string, `out` `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn recap_graph_get(
    graph: *const RecapGraph,
    name: *const c_char,
    out: *mut c_void,
    len: usize,
) -> RecapStatus {
    status(|| {
        // SAFETY: forwarded from the caller.
        let (g, name) = unsafe { (handle(graph, "graph")?, text(name, "binding name")?) };
        let bytes = g.graph.get_param(name)?;
        if bytes.len() != len {
            return Err(CallError::BufferSize { name: name.to_string(), size: bytes.len(), len });
        }
        if out.is_null() && len > 0 {
            return Err(CallError::Null("out"));
        }
        if len > 0 {
            // SAFETY: the caller passes `len` writable bytes, distinct from `bytes`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, len) };
        }
        Ok(())
    })
}
