//! The lowest layer: checked calls into the CUDA driver, loaded at run time through cudarc.
//!
//! Every raw call goes through [`check`], which turns a `CUresult` into a [`DriverError`] naming
//! the call. Nothing here is called before [`driver`] has confirmed that the driver library can be
//! loaded: cudarc panics on the first call otherwise.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{self, CUresult};

/// A failed driver call: which call, and the driver's own name and words for the error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {name} ({text})")]
pub struct DriverError {
    pub call: &'static str,
    pub code: CUresult,
    pub name: String,
    pub text: String,
}

impl DriverError {
    /// Errors after which the context is unusable until it is reset: every later call in the
    /// process would return the same error.
    pub fn is_sticky(&self) -> bool {
        use CUresult::*;
        matches!(
            self.code,
            CUDA_ERROR_ILLEGAL_ADDRESS
                | CUDA_ERROR_ILLEGAL_INSTRUCTION
                | CUDA_ERROR_MISALIGNED_ADDRESS
                | CUDA_ERROR_INVALID_ADDRESS_SPACE
                | CUDA_ERROR_INVALID_PC
                | CUDA_ERROR_LAUNCH_FAILED
                | CUDA_ERROR_HARDWARE_STACK_ERROR
                | CUDA_ERROR_ASSERT
                | CUDA_ERROR_ECC_UNCORRECTABLE
                | CUDA_ERROR_LAUNCH_TIMEOUT
                | CUDA_ERROR_CONTEXT_IS_DESTROYED
        )
    }
}

fn describe(code: CUresult) -> (String, String) {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: both calls only write a pointer to a static string owned by the driver.
    unsafe {
        sys::cuGetErrorName(code, &mut name);
        sys::cuGetErrorString(code, &mut text);
    }
    let read = |p: *const std::ffi::c_char| {
        if p.is_null() {
            format!("{code:?}")
        } else {
            // SAFETY: the driver returns NUL-terminated static strings.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    (read(name), read(text))
}

/// Turns a driver result into `Result`, naming the call on failure.
pub fn check(code: CUresult, call: &'static str) -> Result<(), DriverError> {
    if code == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (name, text) = describe(code);
    Err(DriverError { call, code, name, text })
}

/// Calls a raw driver function and checks its result: `call!(cuMemAlloc_v2(&mut p, n))`. The
/// arguments are evaluated inside the `unsafe` block on purpose: they are the raw pointers and
/// handles the call takes.
#[macro_export]
macro_rules! call {
    ($f:ident($($arg:expr),* $(,)?)) => {
        $crate::driver::check(
            // SAFETY: every caller passes arguments valid for the call; see the call site.
            #[allow(unused_unsafe)]
            unsafe { $crate::sys::$f($($arg),*) },
            stringify!($f),
        )
    };
}
pub use call;

/// Why no device could be used.
#[derive(Clone, Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no CUDA driver found (libcuda.so could not be loaded); use --device cpu to replay on the CPU")]
    NoDriver,
    #[error("CUDA driver could not start: {0}")]
    Init(DriverError),
    #[error("no CUDA device {ordinal}: this machine has {count}")]
    NoDevice { ordinal: usize, count: usize },
    #[error("CUDA driver {found} is too old: recap needs 12.0 or newer")]
    TooOld { found: String },
    #[error("{0}")]
    Driver(#[from] DriverError),
    #[error(
        "CUDA device {ordinal} is unusable in this process after a kernel fault ({reason}): replay in a new process"
    )]
    Lost { ordinal: usize, reason: String },
}

/// Devices whose context could not be recovered after a fault, with why: the driver keeps some
/// errors for the whole process, and every later call would fail with them.
static LOST: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());

fn lost(ordinal: usize) -> Option<String> {
    LOST.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|l| l.0 == ordinal).map(|l| l.1.clone())
}

/// Facts about the loaded driver.
#[derive(Clone, Debug)]
pub struct DriverInfo {
    /// As `cuDriverGetVersion` reports it: 12040 is 12.4.
    pub version: i32,
    pub device_count: usize,
}

impl DriverInfo {
    pub fn version_string(&self) -> String {
        format!("{}.{}", self.version / 1000, (self.version % 1000) / 10)
    }

    /// Conditional WHILE/IF graph nodes need driver 12.4 or newer.
    pub fn has_conditional_nodes(&self) -> bool {
        self.version >= 12040
    }
}

/// Loads and initialises the driver once per process. Never panics when it is missing.
pub fn driver() -> Result<&'static DriverInfo, OpenError> {
    static INFO: OnceLock<Result<DriverInfo, OpenError>> = OnceLock::new();
    INFO.get_or_init(|| {
        // SAFETY: only tries to open the library; cudarc panics on any call when this is false.
        if !unsafe { sys::is_culib_present() } {
            return Err(OpenError::NoDriver);
        }
        let mut version = 0;
        call!(cuDriverGetVersion(&mut version))?;
        if version < 12000 {
            return Err(OpenError::TooOld { found: format!("{}.{}", version / 1000, (version % 1000) / 10) });
        }
        match call!(cuInit(0)) {
            Ok(()) => {}
            // A driver on a machine without a GPU: report no device, not a broken driver.
            Err(e) if e.code == CUresult::CUDA_ERROR_NO_DEVICE => return Ok(DriverInfo { version, device_count: 0 }),
            Err(e) => return Err(OpenError::Init(e)),
        }
        let mut count = 0;
        call!(cuDeviceGetCount(&mut count))?;
        Ok(DriverInfo { version, device_count: count.max(0) as usize })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// A raw handle that the driver lets any thread use.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handle<T>(pub T);
// SAFETY: driver handles (contexts, streams, graphs, modules) are usable from any thread once the
// owning context is current there; every user makes it current first.
unsafe impl<T> Send for Handle<T> {}
unsafe impl<T> Sync for Handle<T> {}

/// A context recap works in, whether it is the device's primary context or one of its own, and
/// the one stream every replay in it runs on.
#[derive(Clone, Copy, Debug)]
struct Ctx {
    handle: sys::CUcontext,
    /// Made with `cuCtxCreate` (destroyed on recovery) rather than retained as the primary context.
    owned: bool,
    stream: sys::CUstream,
}

/// Makes a working context: the primary context if it is usable, else a context of recap's own
/// (after a fault the primary context can stay broken for the rest of the process). Checked with
/// a real allocation, since a broken context is only found out by using it.
fn fresh_context(dev: sys::CUdevice) -> Result<Ctx, DriverError> {
    let probe = |ctx: sys::CUcontext| -> Result<(), DriverError> {
        call!(cuCtxSetCurrent(ctx))?;
        let mut p = 0;
        call!(cuMemAlloc_v2(&mut p, 4))?;
        call!(cuMemFree_v2(p))?;
        call!(cuCtxSynchronize())
    };
    let stream = || -> Result<sys::CUstream, DriverError> {
        let mut s = std::ptr::null_mut();
        call!(cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32))?;
        Ok(s)
    };
    let mut primary = std::ptr::null_mut();
    let retained = call!(cuDevicePrimaryCtxRetain(&mut primary, dev));
    let first_error = match retained.and_then(|_| probe(primary)).and_then(|_| stream()) {
        Ok(stream) => return Ok(Ctx { handle: primary, owned: false, stream }),
        Err(e) => e,
    };
    if !primary.is_null() {
        call!(cuCtxSetCurrent(std::ptr::null_mut())).ok();
        call!(cuDevicePrimaryCtxRelease_v2(dev)).ok();
    }
    let mut own = std::ptr::null_mut();
    let both = |e: DriverError| DriverError {
        text: format!("{}; a new context failed too: {}: {} ({})", first_error.text, e.call, e.name, e.text),
        ..first_error.clone()
    };
    call!(cuCtxCreate_v2(&mut own, 0, dev)).map_err(both)?;
    match probe(own).and_then(|_| stream()) {
        Ok(stream) => Ok(Ctx { handle: own, owned: true, stream }),
        Err(e) => {
            call!(cuCtxDestroy_v2(own)).ok();
            Err(both(e))
        }
    }
}

/// One GPU and the context recap uses on it, shared by every replay on it in this process.
///
/// A kernel fault (illegal address, trap) leaves the context unusable for everyone. Recovery is
/// [`Device::recover`]: it drops the context (`cuDevicePrimaryCtxReset` and release for the
/// primary context, `cuCtxDestroy` for one of recap's own), which frees every allocation, module
/// and graph made in it, makes a fresh one, and bumps the device's generation so that replays made
/// before know their handles are gone and never touch them again.
pub struct Device {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability as `major * 10 + minor` (90 for sm_90).
    pub sm: u32,
    /// How much the GPU holds at once: what decides whether a grid is half a wave.
    pub residency: Residency,
    pub driver: &'static DriverInfo,
    dev: sys::CUdevice,
    ctx: Mutex<Handle<Ctx>>,
    generation: AtomicU64,
    recoveries: Mutex<Vec<String>>,
}

/// What one GPU's multiprocessors hold at once, from its attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Residency {
    pub multiprocessors: u32,
    /// Resident blocks per multiprocessor, at most.
    pub blocks: u32,
    /// Resident threads per multiprocessor, at most.
    pub threads: u32,
}

impl Device {
    /// Opens device `ordinal` (0-based), shared with every other user of it in this process.
    pub fn open(ordinal: usize) -> Result<Arc<Device>, OpenError> {
        static OPEN: Mutex<Vec<(usize, std::sync::Weak<Device>)>> = Mutex::new(Vec::new());
        let driver = driver()?;
        if ordinal >= driver.device_count {
            return Err(OpenError::NoDevice { ordinal, count: driver.device_count });
        }
        if let Some(reason) = lost(ordinal) {
            return Err(OpenError::Lost { ordinal, reason });
        }
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = open.iter().find(|(o, _)| *o == ordinal).and_then(|(_, w)| w.upgrade()) {
            return Ok(d);
        }
        let mut dev = 0;
        call!(cuDeviceGet(&mut dev, ordinal as i32))?;
        let mut name_buf = [0 as std::ffi::c_char; 256];
        call!(cuDeviceGetName(name_buf.as_mut_ptr(), name_buf.len() as i32, dev))?;
        // SAFETY: the driver NUL-terminates within the buffer.
        let name = unsafe { CStr::from_ptr(name_buf.as_ptr()) }.to_string_lossy().into_owned();
        let attr = |a| {
            let mut v = 0;
            call!(cuDeviceGetAttribute(&mut v, a, dev)).map(|_| v)
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let residency = Residency {
            multiprocessors: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            blocks: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)? as u32,
            threads: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)? as u32,
        };
        let ctx = fresh_context(dev)?;
        let d = Arc::new(Device {
            ordinal,
            name,
            sm: (major * 10 + minor) as u32,
            residency,
            driver,
            dev,
            ctx: Mutex::new(Handle(ctx)),
            generation: AtomicU64::new(0),
            recoveries: Mutex::new(Vec::new()),
        });
        open.retain(|(_, w)| w.strong_count() > 0);
        open.push((ordinal, Arc::downgrade(&d)));
        Ok(d)
    }

    /// Makes this device's context current on the calling thread.
    /// Why this device cannot be used any more in this process, if it cannot.
    pub fn lost(&self) -> Option<String> {
        lost(self.ordinal)
    }

    pub fn bind(&self) -> Result<(), DriverError> {
        let ctx = self.context();
        call!(cuCtxSetCurrent(ctx))
    }

    /// The context (for raw driver calls: benchmarks and diagnostics).
    pub fn context(&self) -> sys::CUcontext {
        self.ctx.lock().unwrap_or_else(|e| e.into_inner()).0.handle
    }

    /// The stream every replay on this device launches on.
    ///
    /// One per context, not one per replay: once kernels have been launched (`cuLaunchKernel`) on
    /// a second stream of a context, every graph kernel node launched in that context afterwards
    /// takes longer, for good (an H100 with driver 580: 1.13 instead of 0.95 us per node of a
    /// 1000-node chain, `bench/cuda/launch_modes.cpp`). Graph launches on several streams do not
    /// do this, kernel launches on one stream do not either. The price: replays on one device
    /// from several threads run one after another on the GPU.
    pub fn stream(&self) -> sys::CUstream {
        self.ctx.lock().unwrap_or_else(|e| e.into_inner()).0.stream
    }

    /// What each recovery did so far (for logs and notes).
    pub fn recoveries(&self) -> Vec<String> {
        self.recoveries.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Lets kernels and copies of this device's context reach `other`'s memory directly over
    /// NVLink or PCIe (`on`), where the two GPUs can (`cuDeviceCanAccessPeer`), or stops it.
    /// Gives whether access is on afterwards: where it is not, copies between the two go through
    /// the driver's staging, still correct. Access lasts as long as the contexts.
    pub fn set_peer_access(&self, other: &Device, on: bool) -> Result<bool, DriverError> {
        let mut can = 0;
        call!(cuDeviceCanAccessPeer(&mut can, self.dev, other.dev))?;
        if can == 0 {
            return Ok(false);
        }
        self.bind()?;
        if on {
            match call!(cuCtxEnablePeerAccess(other.context(), 0)) {
                Err(e) if e.name != "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED" => Err(e),
                _ => Ok(true),
            }
        } else {
            match call!(cuCtxDisablePeerAccess(other.context())) {
                Err(e) if e.name != "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED" => Err(e),
                _ => Ok(false),
            }
        }
    }

    /// Increases each time the context is reset after a fault.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Resets the primary context after a sticky error so that the next replay works. Everything
    /// allocated in it before is gone.
    pub fn recover(&self) -> Result<(), DriverError> {
        let mut ctx = self.ctx.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        // A context current on this thread while it is torn down stays referenced by the thread.
        call!(cuCtxSetCurrent(std::ptr::null_mut())).ok();
        let old = ctx.0;
        let dropped = if old.owned {
            call!(cuCtxDestroy_v2(old.handle))
        } else {
            call!(cuDevicePrimaryCtxReset_v2(self.dev)).and_then(|_| call!(cuDevicePrimaryCtxRelease_v2(self.dev)))
        };
        let fresh = match fresh_context(self.dev) {
            Ok(c) => c,
            Err(e) => {
                let reason = format!("{e}");
                LOST.lock().unwrap_or_else(|e| e.into_inner()).push((self.ordinal, reason.clone()));
                self.recoveries.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                    "{} {}; no new context: {reason}",
                    if old.owned { "destroyed recap's own context" } else { "reset the primary context" },
                    match &dropped {
                        Ok(()) => "(ok)".to_string(),
                        Err(e) => format!("({e})"),
                    },
                ));
                return Err(e);
            }
        };
        ctx.0 = fresh;
        self.recoveries.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
            "{} {}; now using {}",
            if old.owned { "destroyed recap's own context" } else { "reset the primary context" },
            match dropped {
                Ok(()) => "(ok)".to_string(),
                Err(e) => format!("({e})"),
            },
            if fresh.owned { "a context of recap's own (cuCtxCreate)" } else { "the primary context" }
        ));
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let ctx = self.ctx.lock().unwrap_or_else(|e| e.into_inner()).0;
        // SAFETY: destroys the stream this value made and releases the one context reference it holds.
        unsafe {
            sys::cuStreamDestroy_v2(ctx.stream);
            if ctx.owned {
                sys::cuCtxDestroy_v2(ctx.handle);
            } else {
                sys::cuDevicePrimaryCtxRelease_v2(self.dev);
            }
        }
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cuda:{} ({}, sm_{})", self.ordinal, self.name, self.sm)
    }
}

/// A launchable kernel: the function in recap's context, and, when it came from a library, the
/// context-independent kernel handle that graph kernel nodes take.
#[derive(Clone, Copy, Debug)]
pub struct Func {
    pub function: sys::CUfunction,
    /// Null for a kernel of a module.
    pub kernel: sys::CUkernel,
}

/// Code loaded into the driver.
///
/// A library (`cuLibraryLoadData`) is what the CUDA runtime itself loads kernels through, and its
/// `CUkernel` handles are what the runtime's graph kernel nodes carry; a module
/// (`cuModuleLoadData`) gives context-bound `CUfunction`s only. recap prefers libraries and keeps
/// modules for comparison and as the fallback when a library cannot be made.
#[derive(Clone, Copy, Debug)]
pub enum Code {
    Library(sys::CUlibrary),
    Module(sys::CUmodule),
}

impl Code {
    /// Loads a cubin or NUL-terminated PTX, as a library when `library` is set (falling back to a
    /// module), returning the JIT error log on failure.
    pub fn load(image: &[u8], library: bool) -> Result<Code, (DriverError, String)> {
        if library {
            let mut lib = std::ptr::null_mut();
            let loaded = call!(cuLibraryLoadData(
                &mut lib,
                image.as_ptr() as *const c_void,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            ));
            if loaded.is_ok() {
                return Ok(Code::Library(lib));
            }
            // A module load of the same image either works or says why, with the JIT log.
        }
        load_module(image).map(Code::Module)
    }

    /// Finds entry `name`, loaded into the current context.
    pub fn get(&self, name: &std::ffi::CStr) -> Result<Func, DriverError> {
        match *self {
            Code::Library(lib) => {
                let mut kernel = std::ptr::null_mut();
                call!(cuLibraryGetKernel(&mut kernel, lib, name.as_ptr()))?;
                let mut function = std::ptr::null_mut();
                call!(cuKernelGetFunction(&mut function, kernel))?;
                Ok(Func { function, kernel })
            }
            Code::Module(module) => {
                let mut function = std::ptr::null_mut();
                call!(cuModuleGetFunction(&mut function, module, name.as_ptr()))?;
                Ok(Func { function, kernel: std::ptr::null_mut() })
            }
        }
    }

    /// Unloads the code; every `Func` from it is invalid afterwards.
    pub fn unload(self) {
        // SAFETY: called once per loaded image, when nothing uses its kernels any more.
        unsafe {
            match self {
                Code::Library(lib) => sys::cuLibraryUnload(lib),
                Code::Module(module) => sys::cuModuleUnload(module),
            };
        }
    }
}

/// Loads a module from a cubin or NUL-terminated PTX, returning the JIT error log on failure.
pub fn load_module(image: &[u8]) -> Result<sys::CUmodule, (DriverError, String)> {
    const LOG: usize = 16 * 1024;
    let mut log = vec![0u8; LOG];
    let mut options =
        [sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER, sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
    let mut values = [log.as_mut_ptr() as *mut c_void, LOG as *mut c_void];
    let mut module = std::ptr::null_mut();
    let r = call!(cuModuleLoadDataEx(
        &mut module,
        image.as_ptr() as *const c_void,
        options.len() as u32,
        options.as_mut_ptr(),
        values.as_mut_ptr(),
    ));
    match r {
        Ok(()) => Ok(module),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err((e, String::from_utf8_lossy(&log[..end]).trim().to_owned()))
        }
    }
}
