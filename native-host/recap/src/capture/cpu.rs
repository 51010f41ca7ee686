//! The CPU device: one `shared::ptx::Memory` address space and the PTX executor.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use shared::ptx::{self, ExecOptions, LaunchDims, Memory};

use super::{CaptureError, LaunchFailure, PtxFailure, Result};

fn mem_err(e: ptx::MemError) -> CaptureError {
    CaptureError::Cpu(e)
}

/// A module as the CPU device holds it: lowered for the executor, or the reason the executor
/// refuses it. A refused module still records (its kernels' layouts come from their `.entry`
/// declarations, `layouts::kernel_layouts`); the refusal is the error of running it.
pub(crate) type CpuModule = std::result::Result<Arc<ptx::Module>, ptx::PtxError>;

pub(crate) fn refused(name: &str, e: &ptx::PtxError) -> CaptureError {
    CaptureError::Ptx { module: name.to_owned(), source: Box::new(PtxFailure::Parse(e.clone())) }
}

pub(crate) struct CpuBackend {
    /// Adding and removing regions needs `&mut Memory`; everything else, kernels included, `&Memory`.
    memory: RwLock<Memory>,
    options: ExecOptions,
}

impl CpuBackend {
    pub fn new() -> Self {
        CpuBackend {
            memory: RwLock::new(Memory::new()),
            options: ExecOptions { jit_dump: crate::jit_dump::from_env(), ..ExecOptions::default() },
        }
    }

    fn memory(&self) -> RwLockReadGuard<'_, Memory> {
        self.memory.read().unwrap_or_else(|p| p.into_inner())
    }

    fn memory_mut(&self) -> RwLockWriteGuard<'_, Memory> {
        self.memory.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn alloc(&self, size: u64, align: u32) -> Result<u64> {
        self.memory_mut().add_region(size, align as u64).map_err(mem_err)
    }

    pub fn free(&self, addr: u64) -> Result<()> {
        self.memory_mut().remove_region(addr).map_err(mem_err)
    }

    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        self.memory().write(addr, bytes).map_err(mem_err)
    }

    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        self.memory().read(addr, out).map_err(mem_err)
    }

    pub fn copy(&self, src: u64, dst: u64, len: u64) -> Result<()> {
        self.memory().copy(dst, src, len).map_err(mem_err)
    }

    pub fn fill(&self, addr: u64, len: u64, width: u32, pattern: u64) -> Result<()> {
        let bytes = pattern.to_le_bytes();
        self.memory().fill(addr, len, &bytes[..width as usize]).map_err(mem_err)
    }

    /// Lowers `text` for the executor. A module the executor refuses loads only when its kernels
    /// can be recorded (`has_kernels`: its `.entry` declarations read); otherwise the refusal is
    /// the error of loading it.
    pub fn load_module(&self, name: &str, text: &str, has_kernels: bool) -> Result<CpuModule> {
        match ptx::Module::parse(text) {
            Ok(m) => Ok(Ok(Arc::new(m))),
            Err(e) if has_kernels => Ok(Err(e)),
            Err(e) => Err(refused(name, &e)),
        }
    }

    pub fn launch(
        &self,
        module: &ptx::Module,
        entry: &str,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        params: &[u8],
    ) -> Result<()> {
        let dims = LaunchDims { grid, block, dynamic_shared: shared };
        ptx::launch(module, entry, &dims, params, &self.memory(), &self.options)
            .map(|_| ())
            .map_err(|e| CaptureError::Launch { kernel: entry.to_owned(), source: Box::new(LaunchFailure::Cpu(e)) })
    }
}
