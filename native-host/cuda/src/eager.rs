//! Eager work on one GPU, as the capture API runs it outside a capture: allocations, copies,
//! fills, modules and launches, each a checked driver call on the legacy default stream, so
//! eager ops are ordered with each other and a read back sees every earlier write without
//! explicit events. Every function makes the device's context current first.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;

use crate::driver::{call, load_module, Device, DriverError};

impl Device {
    /// `size` bytes of device memory (a zero-byte request is rounded up: the driver refuses it).
    pub fn alloc(&self, size: u64) -> Result<u64, DriverError> {
        self.bind()?;
        let mut addr = 0;
        call!(cuMemAlloc_v2(&mut addr, size.max(1) as usize))?;
        Ok(addr)
    }

    /// Frees what [`Device::alloc`] gave; the caller frees each allocation once.
    pub fn free(&self, addr: u64) -> Result<(), DriverError> {
        self.bind()?;
        call!(cuMemFree_v2(addr))
    }

    /// Host to device; the caller checks the range.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), DriverError> {
        self.bind()?;
        call!(cuMemcpyHtoD_v2(addr, bytes.as_ptr() as *const c_void, bytes.len()))
    }

    /// Device to host; the caller checks the range.
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), DriverError> {
        self.bind()?;
        call!(cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, addr, out.len()))
    }

    /// Device to device; the caller checks both ranges.
    pub fn copy(&self, src: u64, dst: u64, len: u64) -> Result<(), DriverError> {
        self.bind()?;
        call!(cuMemcpyDtoD_v2(dst, src, len as usize))
    }

    /// Fills `len` bytes with the low `width` (1, 2, 4 or 8) bytes of `pattern`; the driver checks
    /// the alignment each width needs.
    pub fn fill(&self, addr: u64, len: u64, width: u32, pattern: u64) -> Result<(), DriverError> {
        self.bind()?;
        let n = (len / width as u64) as usize;
        let (lo, hi) = (pattern as u32, (pattern >> 32) as u32);
        match width {
            1 => call!(cuMemsetD8_v2(addr, pattern as u8, n)),
            2 => call!(cuMemsetD16_v2(addr, pattern as u16, n)),
            4 => call!(cuMemsetD32_v2(addr, lo, n)),
            _ if lo == hi => call!(cuMemsetD32_v2(addr, lo, n * 2)),
            // An 8-byte pattern is two strided 4-byte fills: each row is one 8-byte element.
            _ => {
                call!(cuMemsetD2D32_v2(addr, 8, lo, 1, n)).and_then(|()| call!(cuMemsetD2D32_v2(addr + 4, 8, hi, 1, n)))
            }
        }
    }

    /// Waits for all work of the context.
    pub fn synchronize(&self) -> Result<(), DriverError> {
        self.bind()?;
        call!(cuCtxSynchronize())
    }

    /// Loads PTX text as a module of this context; the error carries the JIT log.
    pub fn load_ptx(self: &Arc<Self>, ptx: &str) -> Result<EagerModule, (DriverError, String)> {
        self.bind().map_err(|e| (e, String::new()))?;
        let mut image = ptx.as_bytes().to_vec();
        image.push(0);
        let raw = load_module(&image)?;
        Ok(EagerModule { raw, device: self.clone(), functions: Mutex::new(HashMap::new()) })
    }
}

/// A module loaded into a device's context for eager launches.
pub struct EagerModule {
    raw: sys::CUmodule,
    device: Arc<Device>,
    functions: Mutex<HashMap<String, sys::CUfunction>>,
}

// SAFETY: driver API handles may be used from any thread once the owning context is current,
// which every use here ensures with `bind`.
unsafe impl Send for EagerModule {}
unsafe impl Sync for EagerModule {}

impl Drop for EagerModule {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // Nothing useful can be done with a failure to unload while dropping.
            let _ = call!(cuModuleUnload(self.raw));
        }
    }
}

/// Why an eager launch did not start.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("entry name contains a NUL byte")]
    Name,
    #[error("not found in the loaded module: {0}")]
    NotFound(DriverError),
    #[error("parameter {name} lies past the {len} parameter bytes")]
    Params { name: String, len: usize },
    #[error("launch failed: {0}")]
    Driver(#[from] DriverError),
}

impl EagerModule {
    fn function(&self, entry: &str) -> Result<sys::CUfunction, LaunchError> {
        let mut fns = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&f) = fns.get(entry) {
            return Ok(f);
        }
        let name = CString::new(entry).map_err(|_| LaunchError::Name)?;
        let mut f = std::ptr::null_mut();
        call!(cuModuleGetFunction(&mut f, self.raw, name.as_ptr())).map_err(LaunchError::NotFound)?;
        fns.insert(entry.to_owned(), f);
        Ok(f)
    }

    /// Launches `entry` with `params` laid out at `offsets` (parameter name, offset, size, as the
    /// PTX declares them); pointers inside must point at live allocations of this context.
    pub fn launch(
        &self,
        entry: &str,
        layout: &[(&str, u32, u32)],
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        params: &[u8],
    ) -> Result<(), LaunchError> {
        self.device.bind()?;
        let f = self.function(entry)?;
        // The driver copies each parameter from these pointers when the launch is queued.
        let mut bytes = params.to_vec();
        let mut pointers: Vec<*mut c_void> = Vec::with_capacity(layout.len());
        for &(name, offset, size) in layout {
            if offset as usize + size as usize > bytes.len() {
                return Err(LaunchError::Params { name: name.to_owned(), len: bytes.len() });
            }
            // SAFETY: in bounds, checked above.
            pointers.push(unsafe { bytes.as_mut_ptr().add(offset as usize) } as *mut c_void);
        }
        let args = if pointers.is_empty() { std::ptr::null_mut() } else { pointers.as_mut_ptr() };
        call!(cuLaunchKernel(
            f,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared,
            std::ptr::null_mut(),
            args,
            std::ptr::null_mut()
        ))?;
        Ok(())
    }
}
