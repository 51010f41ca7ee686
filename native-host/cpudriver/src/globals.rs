//! Module-scope variables (`.global`, `.const`) in device memory: each variable of a loaded
//! module is a region of the driver's memory, where the module's kernels reach it
//! (`shared::ptx::Module::parse_placing`), so `cuModuleGetGlobal` gives a device address that
//! copies, memsets and kernels of other modules can use, as on NVIDIA's driver. Initialisers are
//! written when the module loads; the regions go when it is unloaded.

use std::collections::HashMap;
use std::ffi::c_char;

use shared::ptx::{Memory, Module, PlaceRefusal, PtxError};

use crate::driver::driver;
use crate::ffi::{c_str, CUdeviceptr, Handle, Out};
use crate::ptx_text::Bounds;
use crate::result::{guard, CUresult};

/// A module parsed from PTX, with what the driver reads from its text besides
/// (`CU_FUNC_ATTRIBUTE_*`, launch checks).
pub(crate) struct Loaded {
    pub ptx: Module,
    /// Bytes of the module's `.const` variables.
    pub const_bytes: u64,
    /// Each kernel's launch bounds, where it declares any.
    pub bounds: HashMap<String, Bounds>,
}

/// Parses PTX with its variables placed in `memory` and initialised there. On failure the
/// regions placed so far are removed again.
pub(crate) fn parse(text: &str, memory: &mut Memory) -> Result<Loaded, PtxError> {
    let mut placed = Vec::new();
    let mut const_bytes = 0u64;
    let parsed = Module::parse_placing(text, &mut |v| {
        let base = memory
            .add_region(v.size.max(1), v.align.max(1))
            .map_err(|source| PlaceRefusal::NoMemory { variable: v.name.to_string(), source })?;
        placed.push(base);
        if v.constant {
            const_bytes += v.size;
        }
        Ok(Some(base))
    });
    match parsed {
        Ok(m) => {
            for v in m.placed_variables() {
                // The region was made for the variable, at least as large as its initialiser.
                let _ = memory.write(v.addr, &v.init);
            }
            Ok(Loaded { ptx: m, const_bytes, bounds: crate::ptx_text::bounds(text) })
        }
        Err(e) => {
            for base in placed {
                let _ = memory.remove_region(base);
            }
            Err(e)
        }
    }
}

/// Gives back the regions of an unloaded module's variables.
pub(crate) fn unload(module: &Module, memory: &mut Memory) {
    for v in module.placed_variables() {
        let _ = memory.remove_region(v.addr);
    }
}

/// The address and size of variable `name` of a module (or library).
unsafe fn get_global(dptr: *mut CUdeviceptr, bytes: *mut usize, module: Handle, name: *const c_char) -> CUresult {
    let (dptr, bytes) = unsafe { (Out::new(dptr), Out::new(bytes)) };
    guard(|| {
        let d = driver()?;
        let m = d.modules.get(module)?;
        let name = unsafe { c_str(name) }?.to_str().map_err(|_| CUresult::NOT_FOUND)?;
        let v = m.ptx.placed_variables().iter().find(|v| v.name == name).ok_or(CUresult::NOT_FOUND)?;
        dptr.set_if_asked(v.addr);
        bytes.set_if_asked(v.size as usize);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    module: Handle,
    name: *const c_char,
) -> CUresult {
    unsafe { get_global(dptr, bytes, module, name) }
}

/// A library is a module here.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetGlobal(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    library: Handle,
    name: *const c_char,
) -> CUresult {
    unsafe { get_global(dptr, bytes, library, name) }
}
