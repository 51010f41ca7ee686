//! The CUDA device, on the driver API through cudarc with dynamic loading: the binary starts, and
//! this says so in one clear error, on machines without a driver or a GPU.
//!
//! Everything runs on the legacy default stream, so eager ops are ordered with each other and a
//! read back sees every earlier write without explicit events.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys, DriverError};
use shared::archive::ParamDecl;

use super::{CaptureError, Result};

pub(crate) struct CudaBackend {
    /// The GPU and its primary context, shared with the archive replay engine in `crate::cuda`.
    device: Arc<crate::cuda::Device>,
}

/// A module loaded into the device's context.
pub(crate) struct CudaModule {
    raw: sys::CUmodule,
    device: Arc<crate::cuda::Device>,
    functions: Mutex<HashMap<String, sys::CUfunction>>,
}

// SAFETY: driver API handles may be used from any thread once the owning context is current,
// which every use here ensures with `bind`.
unsafe impl Send for CudaModule {}
unsafe impl Sync for CudaModule {}

impl Drop for CudaModule {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: the module was loaded in this context and is unloaded once.
            let _ = unsafe { result::module::unload(self.raw) };
        }
    }
}

impl CudaBackend {
    pub fn new(ordinal: usize) -> Result<Self> {
        use crate::cuda::OpenError;
        let device = crate::cuda::Device::open(ordinal).map_err(|e| match e {
            OpenError::NoDriver => CaptureError::NoCudaDriver,
            other => CaptureError::Cuda { ordinal, message: other.to_string() },
        })?;
        Ok(CudaBackend { device })
    }

    pub(crate) fn device(&self) -> &Arc<crate::cuda::Device> {
        &self.device
    }

    fn err(&self, what: &str) -> impl Fn(DriverError) -> CaptureError + '_ {
        let what = what.to_owned();
        move |e| CaptureError::Cuda { ordinal: self.device.ordinal, message: format!("{what}: {e}") }
    }

    fn bind(&self) -> Result<()> {
        self.device.bind().map_err(|e| CaptureError::Cuda {
            ordinal: self.device.ordinal,
            message: format!("binding the context to this thread: {e}"),
        })
    }

    pub fn describe(&self) -> String {
        format!("cuda:{} ({})", self.device.ordinal, self.device.name)
    }

    pub fn compute_capability(&self) -> Option<(i32, i32)> {
        Some(((self.device.sm / 10) as i32, (self.device.sm % 10) as i32))
    }

    pub fn alloc(&self, size: u64) -> Result<u64> {
        self.bind()?;
        // SAFETY: a plain allocation; a zero-byte request is rounded up because the driver refuses it.
        unsafe { result::malloc_sync(size.max(1) as usize) }.map_err(self.err(&format!("allocating {size} bytes")))
    }

    pub fn free(&self, addr: u64) -> Result<()> {
        self.bind()?;
        // SAFETY: `addr` came from `alloc` and is freed once (buffers free on their last drop).
        unsafe { result::free_sync(addr) }.map_err(self.err("freeing device memory"))
    }

    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        self.bind()?;
        // SAFETY: callers check the range against the buffer's size.
        unsafe { result::memcpy_htod_sync(addr, bytes) }.map_err(self.err("copying host to device"))
    }

    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        self.bind()?;
        // SAFETY: callers check the range against the buffer's size.
        unsafe { result::memcpy_dtoh_sync(out, addr) }.map_err(self.err("copying device to host"))
    }

    pub fn copy(&self, src: u64, dst: u64, len: u64) -> Result<()> {
        self.bind()?;
        // SAFETY: callers check both ranges.
        unsafe { result::memcpy_dtod_sync(dst, src, len as usize) }.map_err(self.err("copying device to device"))
    }

    pub fn fill(&self, addr: u64, len: u64, width: u32, pattern: u64) -> Result<()> {
        self.bind()?;
        let n = (len / width as u64) as usize;
        let (lo, hi) = (pattern as u32, (pattern >> 32) as u32);
        // SAFETY: callers check the range; the driver checks the alignment each width needs.
        let r = unsafe {
            match width {
                1 => sys::cuMemsetD8_v2(addr, pattern as u8, n).result(),
                2 => sys::cuMemsetD16_v2(addr, pattern as u16, n).result(),
                4 => sys::cuMemsetD32_v2(addr, lo, n).result(),
                _ if lo == hi => sys::cuMemsetD32_v2(addr, lo, n * 2).result(),
                // An 8-byte pattern is two strided 4-byte fills: each row is one 8-byte element.
                _ => sys::cuMemsetD2D32_v2(addr, 8, lo, 1, n)
                    .result()
                    .and_then(|()| sys::cuMemsetD2D32_v2(addr + 4, 8, hi, 1, n).result()),
            }
        };
        r.map_err(self.err(&format!("filling {len} bytes with a {width}-byte pattern")))
    }

    pub fn load_module(&self, name: &str, ptx: &str) -> Result<CudaModule> {
        self.bind()?;
        if ptx.contains('\0') {
            return Err(CaptureError::Ptx { module: name.to_owned(), message: "PTX text contains a NUL byte".into() });
        }
        let mut image = ptx.as_bytes().to_vec();
        image.push(0);
        let raw = crate::cuda::driver::load_module(&image).map_err(|(e, log)| CaptureError::Ptx {
            module: name.to_owned(),
            message: format!("the CUDA JIT refused it ({e}): {log}"),
        })?;
        Ok(CudaModule { raw, device: self.device.clone(), functions: Mutex::new(HashMap::new()) })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &self,
        module: &CudaModule,
        entry: &str,
        layout: &[ParamDecl],
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        params: &[u8],
    ) -> Result<()> {
        self.bind()?;
        let launch_err = |message: String| CaptureError::Launch { kernel: entry.to_owned(), message };
        let f = {
            let mut fns = module.functions.lock().unwrap_or_else(|p| p.into_inner());
            match fns.get(entry) {
                Some(&f) => f,
                None => {
                    let cname = CString::new(entry).map_err(|_| launch_err("entry name contains a NUL byte".into()))?;
                    // SAFETY: the module is loaded and stays loaded while `module` lives.
                    let f = unsafe { result::module::get_function(module.raw, cname) }
                        .map_err(|e| launch_err(format!("not found in the loaded module: {e}")))?;
                    fns.insert(entry.to_owned(), f);
                    f
                }
            }
        };
        // The driver copies each parameter from these pointers when the launch is queued.
        let mut bytes = params.to_vec();
        let mut pointers: Vec<*mut c_void> = Vec::with_capacity(layout.len());
        for p in layout {
            if p.offset as usize + p.size as usize > bytes.len() {
                return Err(launch_err(format!("parameter {} lies past the {} parameter bytes", p.name, bytes.len())));
            }
            // SAFETY: in bounds, checked above.
            pointers.push(unsafe { bytes.as_mut_ptr().add(p.offset as usize) } as *mut c_void);
        }
        // SAFETY: parameters are laid out as the PTX declares them and pointers point at live
        // allocations of this context (the capture API checks both before packing).
        unsafe {
            result::launch_kernel(
                f,
                (grid[0], grid[1], grid[2]),
                (block[0], block[1], block[2]),
                shared,
                std::ptr::null_mut(),
                &mut pointers,
            )
        }
        .map_err(|e| launch_err(format!("launch failed: {e}")))
    }

    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: waits for all work of the current context.
        unsafe { sys::cuCtxSynchronize() }.result().map_err(self.err("synchronizing"))
    }
}

/// Compiles CUDA C to PTX with NVRTC, for a device's architecture when one is given.
pub(crate) fn compile_cuda(name: &str, source: &str, arch: Option<(i32, i32)>) -> Result<String> {
    // SAFETY: only tries to open the library; cudarc panics on first use without it.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(CaptureError::NoNvrtc);
    }
    let mut opts = cudarc::nvrtc::CompileOptions { name: Some(format!("{name}.cu")), ..Default::default() };
    if let Some((major, minor)) = arch {
        opts.options.push(format!("--gpu-architecture=compute_{major}{minor}"));
    }
    match cudarc::nvrtc::compile_ptx_with_opts(source, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(cudarc::nvrtc::CompileError::CompileError { log, .. }) => {
            Err(CaptureError::Nvrtc { module: name.to_owned(), log: log.to_string_lossy().trim().to_owned() })
        }
        Err(e) => Err(CaptureError::Nvrtc { module: name.to_owned(), log: format!("{e:?}") }),
    }
}
