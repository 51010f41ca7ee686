//! The libraries this interposer stands in for besides the driver, NVRTC (`nvrtc.rs`) and
//! nvJitLink (`nvjitlink.rs`): each real library is loaded on first use from the path the audit
//! library linked it at, and each entry point resolved there on first use.
//!
//! The real library is opened with `RTLD_DEEPBIND`: its calls to its own exports must reach
//! itself, not the exports of the same names here. Every entry point of both libraries takes at
//! most six pointer or integer arguments and returns an integer or a pointer, so one function
//! shape ([`Forward`]) calls any of them with its registers untouched.

use std::ffi::{c_void, CStr, CString};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Six integer registers in, one out: the shape every forwarded entry point is called through.
pub type Forward = unsafe extern "C" fn(usize, usize, usize, usize, usize, usize) -> usize;

/// A real library: what it is called in messages, and where the audit library linked it.
pub struct Real {
    what: &'static str,
    /// The variable that names the link, for the message when it is not set.
    var: &'static str,
    path: fn() -> Option<&'static Path>,
    handle: OnceLock<usize>,
}

impl Real {
    pub const fn new(what: &'static str, var: &'static str, path: fn() -> Option<&'static Path>) -> Real {
        Real { what, var, path, handle: OnceLock::new() }
    }

    /// The library's handle, loaded on first use (0 when it cannot be, said once on stderr).
    fn handle(&self) -> usize {
        *self.handle.get_or_init(|| {
            let Some(path) = (self.path)() else {
                eprintln!("recap capture: {} was asked for, but {} is not set", self.what, self.var);
                return 0;
            };
            let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else { return 0 };
            // SAFETY: a NUL-terminated path; the handle is kept for the life of the process.
            let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_DEEPBIND) };
            if handle.is_null() {
                eprintln!("recap capture: cannot load {} from {}", self.what, path.display());
            }
            handle as usize
        })
    }

    /// The address of `name` in the real library; 0 when the library or the symbol is not there.
    pub fn symbol(&self, name: &CStr) -> usize {
        let handle = self.handle();
        if handle == 0 {
            return 0;
        }
        // SAFETY: a handle from dlopen and a NUL-terminated name.
        unsafe { libc::dlsym(handle as *mut c_void, name.as_ptr()) as usize }
    }
}

/// One entry point of a real library, resolved on first use.
pub struct Entry {
    real: &'static Real,
    name: &'static CStr,
    ptr: AtomicUsize,
}

impl Entry {
    pub const fn new(real: &'static Real, name: &'static CStr) -> Entry {
        Entry { real, name, ptr: AtomicUsize::new(0) }
    }

    /// The real entry point as a [`Forward`], or `missing` when the library or the symbol is not
    /// there.
    pub fn forward(&self, missing: Forward) -> Forward {
        let mut p = self.ptr.load(Ordering::Relaxed);
        if p == 0 {
            p = match self.real.symbol(self.name) {
                0 => missing as *const () as usize,
                found => found,
            };
            self.ptr.store(p, Ordering::Relaxed);
        }
        // SAFETY: `p` is `missing` or an exported function of the real library, whose every
        // entry point takes its arguments in the six integer registers a `Forward` passes on.
        unsafe { std::mem::transmute::<usize, Forward>(p) }
    }
}
