//! The real driver behind the interposer: loading it, the slots the trampolines jump through, the
//! typed calls the recorder itself makes, and the map from the real driver's entry points to ours
//! that `cuGetProcAddress` answers with.
//!
//! The real driver is loaded with `RTLD_DEEPBIND`: its references to its own exported names must
//! bind inside it, never to the same names that this library exports (which would recurse).

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::sys::*;

include!(concat!(env!("OUT_DIR"), "/names.rs"));

const FORWARDED_COUNT: usize = FORWARDED.len();

/// The slot each forwarded entry point jumps through, filled by [`load`].
static mut FORWARD_SLOTS: [usize; FORWARDED_COUNT] = [0; FORWARDED_COUNT];
/// How often each forwarded entry point was called (`lock inc` in its trampoline).
static FORWARD_COUNTS: [AtomicU64; FORWARDED_COUNT] = [const { AtomicU64::new(0) }; FORWARDED_COUNT];

/// The generated trampolines (build.rs): one exported naked function per forwarded entry point,
/// counting the call and jumping through its slot, arguments untouched.
#[allow(clippy::missing_safety_doc)]
mod trampolines {
    include!(concat!(env!("OUT_DIR"), "/trampolines.rs"));
}

struct Driver {
    handle: usize,
}

static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();

/// What an entry point the real driver lacks answers.
extern "C" fn missing_entry_point() -> CUresult {
    CUDA_ERROR_NOT_FOUND
}

/// What every entry point answers when the real driver could not be loaded.
extern "C" fn no_driver() -> CUresult {
    CUDA_ERROR_NOT_INITIALIZED
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Loads the real driver and fills every forwarding slot. Runs once, from the library's
/// constructor, before any program code can call in.
pub fn load() {
    DRIVER.get_or_init(|| {
        let driver = open_real();
        let fallback =
            if driver.is_some() { missing_entry_point as *const () as usize } else { no_driver as *const () as usize };
        for (i, name) in FORWARDED.iter().enumerate() {
            let p = driver.as_ref().and_then(|d| dlsym(d.handle, name)).unwrap_or(fallback);
            // SAFETY: the constructor runs before any trampoline can be called, on one thread.
            unsafe { (*std::ptr::addr_of_mut!(FORWARD_SLOTS))[i] = p };
        }
        driver
    });
}

fn open_real() -> Option<Driver> {
    let Some(path) = &crate::request::get().driver else {
        let var = shared::capture::env::REAL_DRIVER;
        eprintln!("recap capture: {var} is not set, so there is no CUDA driver to forward to");
        return None;
    };
    let handle = open_driver(path)?;
    if dlsym(handle, "cuInit").is_some_and(|f| Some(f) == own_symbol("cuInit")) {
        // The program asked for the driver by this very path and the audit library (`LD_AUDIT`)
        // answered with this library, so the dynamic linker now knows that spelling as ours.
        // The same file under another spelling is a name nobody has used.
        // SAFETY: a handle from dlopen, of this library, which stays loaded.
        unsafe { libc::dlclose(handle as *mut c_void) };
        let (dir, file) = (path.parent()?, path.file_name()?);
        let respelled = open_driver(&dir.join(".").join(file))?;
        if dlsym(respelled, "cuInit").is_some_and(|f| Some(f) == own_symbol("cuInit")) {
            eprintln!("recap capture: the CUDA driver {} is recap's own interposer", path.display());
            return None;
        }
        return Some(Driver { handle: respelled });
    }
    Some(Driver { handle })
}

fn open_driver(path: &std::path::Path) -> Option<usize> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a NUL-terminated path; the handle is kept for the life of the process.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_DEEPBIND) };
    if handle.is_null() {
        eprintln!("recap capture: cannot load the CUDA driver {}: {}", path.display(), dlerror());
        return None;
    }
    Some(handle as usize)
}

fn dlsym(handle: usize, name: &str) -> Option<usize> {
    let c = CString::new(name).ok()?;
    // SAFETY: a valid handle from dlopen and a NUL-terminated name.
    let p = unsafe { libc::dlsym(handle as *mut c_void, c.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}

/// The real driver's entry point `name`.
pub fn symbol(name: &str) -> Option<usize> {
    DRIVER.get().and_then(Option::as_ref).and_then(|d| dlsym(d.handle, name))
}

/// How many times each forwarded entry point has been called, by name (non-zero only).
pub fn forward_counts() -> HashMap<&'static str, u64> {
    let mut out = HashMap::new();
    for (i, name) in FORWARDED.iter().enumerate() {
        let n = FORWARD_COUNTS[i].load(Ordering::Relaxed);
        if n > 0 {
            out.insert(*name, n);
        }
    }
    out
}

/// A hook's real entry point, resolved on first use.
pub struct Slot {
    name: &'static str,
    ptr: AtomicUsize,
}

impl Slot {
    pub const fn new(name: &'static str) -> Slot {
        Slot { name, ptr: AtomicUsize::new(0) }
    }

    pub fn get(&self) -> usize {
        let p = self.ptr.load(Ordering::Relaxed);
        if p != 0 {
            return p;
        }
        let p = match DRIVER.get().and_then(Option::as_ref) {
            Some(d) => dlsym(d.handle, self.name).unwrap_or(missing_entry_point as *const () as usize),
            None => no_driver as *const () as usize,
        };
        self.ptr.store(p, Ordering::Relaxed);
        p
    }
}

/// Our own exported symbol `name` (a hook or a trampoline).
fn own_symbol(name: &str) -> Option<usize> {
    static OWN: OnceLock<usize> = OnceLock::new();
    let handle = *OWN.get_or_init(|| {
        // SAFETY: dladdr on one of our own functions names the object we live in; RTLD_NOLOAD
        // returns the handle of that already loaded object.
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(own_symbol as *const c_void, &mut info) == 0 || info.dli_fname.is_null() {
                return 0;
            }
            libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) as usize
        }
    });
    (handle != 0).then(|| dlsym(handle, name)).flatten()
}

/// The map `cuGetProcAddress` uses: a real entry point's address to the export of ours that
/// stands for it. Built by name from the export lists, so a new driver needs no table: whatever
/// version or per-thread variant the real resolver picks, it is one of the driver's exports, and
/// we export every one of them.
pub fn ours_for(real: usize) -> Option<usize> {
    static MAP: OnceLock<HashMap<usize, usize>> = OnceLock::new();
    let map = MAP.get_or_init(|| {
        let mut map = HashMap::new();
        // Hooks last: where two names share one real address, the hook wins.
        for name in FORWARDED.iter().chain(HOOKED.iter()) {
            if let (Some(r), Some(o)) = (symbol(name), own_symbol(name)) {
                map.insert(r, o);
            }
        }
        map
    });
    map.get(&real).copied()
}

/// Typed calls the recorder makes to the real driver itself (never through our own exports).
macro_rules! real_calls {
    ($( $(#[$doc:meta])* fn $fn_name:ident = $sym:literal ( $($arg:ident : $ty:ty),* ); )*) => {$(
        $(#[$doc])*
        // The driver's own signatures, `cuLaunchKernel`'s eleven arguments included.
        #[allow(clippy::missing_safety_doc, clippy::too_many_arguments)]
        pub unsafe fn $fn_name($($arg: $ty),*) -> CUresult {
            static SLOT: Slot = Slot::new($sym);
            let f: unsafe extern "C" fn($($ty),*) -> CUresult = std::mem::transmute(SLOT.get());
            f($($arg),*)
        }
    )*};
}

real_calls! {
    fn ctx_synchronize = "cuCtxSynchronize"();
    fn ctx_get_current = "cuCtxGetCurrent"(ctx: *mut Handle);
    fn ctx_push_current = "cuCtxPushCurrent_v2"(ctx: Handle);
    fn ctx_pop_current = "cuCtxPopCurrent_v2"(ctx: *mut Handle);
    fn ctx_get_device = "cuCtxGetDevice"(device: *mut CUdevice);
    fn stream_get_ctx = "cuStreamGetCtx"(stream: Handle, ctx: *mut Handle);
    fn device_get_attribute = "cuDeviceGetAttribute"(value: *mut i32, attribute: i32, device: CUdevice);
    fn memcpy_dtoh = "cuMemcpyDtoH_v2"(dst: *mut c_void, src: CUdeviceptr, len: usize);
    fn memcpy_htod = "cuMemcpyHtoD_v2"(dst: CUdeviceptr, src: *const c_void, len: usize);
    fn memcpy_dtod_async = "cuMemcpyDtoDAsync_v2"(dst: CUdeviceptr, src: CUdeviceptr, len: usize, stream: Handle);
    fn memset_d8_async = "cuMemsetD8Async"(dst: CUdeviceptr, value: u8, count: usize, stream: Handle);
    fn memset_d16_async = "cuMemsetD16Async"(dst: CUdeviceptr, value: u16, count: usize, stream: Handle);
    fn memset_d32_async = "cuMemsetD32Async"(dst: CUdeviceptr, value: u32, count: usize, stream: Handle);
    fn launch_kernel = "cuLaunchKernel"(
        f: Handle, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32,
        shared: u32, stream: Handle, params: *mut *mut c_void, extra: *mut *mut c_void
    );
    fn func_get_param_info = "cuFuncGetParamInfo"(f: Handle, index: usize, offset: *mut usize, size: *mut usize);
    fn kernel_get_param_info = "cuKernelGetParamInfo"(k: Handle, index: usize, offset: *mut usize, size: *mut usize);
    fn func_get_name = "cuFuncGetName"(name: *mut *const c_char, f: Handle);
    fn func_get_module = "cuFuncGetModule"(module: *mut Handle, f: Handle);
    fn kernel_get_name = "cuKernelGetName"(name: *mut *const c_char, k: Handle);
    fn kernel_get_library = "cuKernelGetLibrary"(library: *mut Handle, k: Handle);
    fn module_get_global = "cuModuleGetGlobal_v2"(dptr: *mut CUdeviceptr, bytes: *mut usize, m: Handle, name: *const c_char);
    fn library_get_global = "cuLibraryGetGlobal"(dptr: *mut CUdeviceptr, bytes: *mut usize, l: Handle, name: *const c_char);
    fn get_error_name = "cuGetErrorName"(error: CUresult, name: *mut *const c_char);
}
