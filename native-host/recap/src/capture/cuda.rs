//! The CUDA device, through the CUDA backend's checked driver layer (`recap_cuda::eager`): the
//! binary starts, and this says so in one clear error, on machines without a driver or a GPU.
//!
//! Everything runs on the legacy default stream, so eager ops are ordered with each other and a
//! read back sees every earlier write without explicit events.

use std::sync::Arc;

use recap_cuda::{DriverError, EagerModule, LaunchError};
use shared::archive::ParamDecl;

use super::{CaptureError, CudaFailure, LaunchFailure, PtxFailure, Result};

pub(crate) struct CudaBackend {
    /// The GPU and its primary context, shared with the archive replay engine in `crate::cuda`.
    device: Arc<crate::cuda::Device>,
}

/// A module loaded into the device's context.
pub(crate) type CudaModule = EagerModule;

impl CudaBackend {
    pub fn new(ordinal: usize) -> Result<Self> {
        use crate::cuda::OpenError;
        let device = crate::cuda::Device::open(ordinal).map_err(|e| match e {
            OpenError::NoDriver => CaptureError::NoCudaDriver,
            other => CaptureError::Cuda { ordinal, source: Box::new(CudaFailure::Open(other)) },
        })?;
        Ok(CudaBackend { device })
    }

    pub(crate) fn device(&self) -> &Arc<crate::cuda::Device> {
        &self.device
    }

    fn err(&self, what: &str) -> impl Fn(DriverError) -> CaptureError + '_ {
        let what = what.to_owned();
        move |source| CaptureError::Cuda {
            ordinal: self.device.ordinal,
            source: Box::new(CudaFailure::Driver { what: what.clone(), source }),
        }
    }

    pub fn describe(&self) -> String {
        format!("cuda:{} ({})", self.device.ordinal, self.device.name)
    }

    pub fn compute_capability(&self) -> Option<(i32, i32)> {
        Some(((self.device.sm / 10) as i32, (self.device.sm % 10) as i32))
    }

    pub fn alloc(&self, size: u64) -> Result<u64> {
        self.device.alloc(size).map_err(self.err(&format!("allocating {size} bytes")))
    }

    pub fn free(&self, addr: u64) -> Result<()> {
        self.device.free(addr).map_err(self.err("freeing device memory"))
    }

    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        self.device.write(addr, bytes).map_err(self.err("copying host to device"))
    }

    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        self.device.read(addr, out).map_err(self.err("copying device to host"))
    }

    pub fn copy(&self, src: u64, dst: u64, len: u64) -> Result<()> {
        self.device.copy(src, dst, len).map_err(self.err("copying device to device"))
    }

    pub fn fill(&self, addr: u64, len: u64, width: u32, pattern: u64) -> Result<()> {
        self.device
            .fill(addr, len, width, pattern)
            .map_err(self.err(&format!("filling {len} bytes with a {width}-byte pattern")))
    }

    pub fn load_module(&self, name: &str, ptx: &str) -> Result<CudaModule> {
        if ptx.contains('\0') {
            return Err(CaptureError::Ptx { module: name.to_owned(), source: Box::new(PtxFailure::Nul) });
        }
        self.device.load_ptx(ptx).map_err(|(source, log)| CaptureError::Ptx {
            module: name.to_owned(),
            source: Box::new(PtxFailure::Jit { source, log }),
        })
    }

    #[expect(clippy::too_many_arguments, reason = "a kernel launch's own arguments, as cuLaunchKernel takes them")]
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
        let layout: Vec<(&str, u32, u32)> = layout.iter().map(|p| (p.name.as_str(), p.offset, p.size)).collect();
        module.launch(entry, &layout, grid, block, shared, params).map_err(|e: LaunchError| CaptureError::Launch {
            kernel: entry.to_owned(),
            source: Box::new(LaunchFailure::Cuda(e)),
        })
    }

    pub fn synchronize(&self) -> Result<()> {
        self.device.synchronize().map_err(self.err("synchronizing"))
    }
}

/// Compiles CUDA C to PTX with NVRTC, for a device's architecture when one is given.
pub(crate) fn compile_cuda(name: &str, source: &str, arch: Option<(i32, i32)>) -> Result<String> {
    use recap_cuda::nvrtc::{compile_ptx, NvrtcError};
    compile_ptx(name, source, arch).map_err(|e| match e {
        NvrtcError::Missing => CaptureError::NoNvrtc,
        NvrtcError::Compile(log) => CaptureError::Nvrtc { module: name.to_owned(), log },
    })
}
