//! Regions that are module variables (the archive's `module-vars` section) on CUDA: such a region
//! is not allocated; it is the variable of the loaded module on its slot's GPU, found by name
//! (`cuLibraryGetGlobal`, or `cuModuleGetGlobal` for code loaded as a module). Restoring the
//! initial state then writes the variable the kernels read, and copies, memsets and relocations
//! that name the region reach it.

use std::ffi::CString;

use cudarc::driver::sys::CUdeviceptr;
use shared::archive::{Archive, RegionId};

use super::driver::{call, Code};
use crate::error::CudaError;

/// The device address of the variable region `region` stands for, in the current context, or
/// `None` when the region is an ordinary one. `modules` are the archive's modules as loaded.
pub(crate) fn address(archive: &Archive, region: RegionId, modules: &[Code]) -> Result<Option<CUdeviceptr>, CudaError> {
    let Some(v) = archive.module_var(region) else { return Ok(None) };
    let r = archive.region(region);
    let module = archive.module(v.module).name;
    let name = CString::new(v.name)
        .map_err(|_| CudaError::Invalid(format!("region {}: variable name {:?} holds a NUL byte", r.name, v.name)))?;
    let (mut base, mut size) = (0, 0usize);
    let found = match modules[v.module as usize] {
        Code::Library(lib) => call!(cuLibraryGetGlobal(&mut base, &mut size, lib, name.as_ptr())),
        Code::Module(m) => call!(cuModuleGetGlobal_v2(&mut base, &mut size, m, name.as_ptr())),
    };
    found.map_err(|e| {
        CudaError::Invalid(format!("region {}: module {module} has no variable {} on this GPU ({e})", r.name, v.name))
    })?;
    if (size as u64) < r.size {
        return Err(CudaError::Invalid(format!(
            "region {}: variable {} of module {module} is {size} bytes, but the region holds {}",
            r.name, v.name, r.size
        )));
    }
    Ok(Some(base))
}
