//! Modules and libraries (PTX, or fat binaries of PTX and the CPU driver's machine code), their
//! kernels and what a kernel declares.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

use shared::ptx::{Memory, MAX_SHARED_BYTES};

use crate::driver::{driver, Driver, Function, Module};
use crate::ffi::{c_str, element, host, host_mut, Handle, Out};
use crate::globals::{self, Loaded};
use crate::machine;
use crate::result::{guard, report, CUresult, Result};
use shared::fatbin::ImageKind;

/// `CU_JIT_ERROR_LOG_BUFFER` and `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`: where a failed load's
/// reason goes, besides stderr.
const JIT_ERROR_LOG_BUFFER: c_int = 5;
/// `CU_JIT_MAX_REGISTERS`: the most registers per thread the code may use.
const JIT_MAX_REGISTERS: c_int = 0;
const JIT_ERROR_LOG_BUFFER_SIZE: c_int = 6;

/// The JIT options of a load (`cuModuleLoadDataEx`, `cuLibraryLoadData`) the driver heeds: where
/// the caller asked for the error log, and `CU_JIT_MAX_REGISTERS`.
pub(crate) struct JitOptions {
    buffer: *mut c_void,
    size: usize,
    pub max_registers: Option<u32>,
}

impl JitOptions {
    /// # Safety
    /// `options` and `values` hold `n` elements each, as the JIT option arrays of the driver API.
    pub(crate) unsafe fn from_options(n: c_uint, options: *const c_int, values: *const *mut c_void) -> JitOptions {
        let mut log = JitOptions { buffer: std::ptr::null_mut(), size: 0, max_registers: None };
        for i in 0..n as usize {
            // SAFETY: `i < n`, by the contract.
            let (Ok(option), Ok(value)) = (unsafe { element(options, i) }, unsafe { element(values, i) }) else {
                break;
            };
            match option {
                // The count is passed as the pointer's value.
                JIT_MAX_REGISTERS => log.max_registers = u32::try_from(value as usize).ok(),
                JIT_ERROR_LOG_BUFFER => log.buffer = value,
                // The size is passed as the pointer's value.
                JIT_ERROR_LOG_BUFFER_SIZE => log.size = value as usize,
                _ => {}
            }
        }
        log
    }

    fn write(&self, message: &str) {
        if self.buffer.is_null() || self.size == 0 {
            return;
        }
        // SAFETY: the caller gave a buffer of `size` bytes for the log.
        let Ok(out) = (unsafe { host_mut(self.buffer, self.size) }) else { return };
        let n = message.len().min(self.size - 1);
        out[..n].copy_from_slice(&message.as_bytes()[..n]);
        out[n] = 0;
    }
}

/// Parses a module image: PTX text, NUL-terminated, or a fat binary or ELF image holding PTX or
/// the CPU driver's machine code (`machine.rs`); GPU cubins are refused.
///
/// # Safety
/// `image` is a module image as the driver API takes it: NUL-terminated when it is text.
unsafe fn load(image: *const c_void, log: &JitOptions, memory: &mut Memory) -> Result<Loaded> {
    if image.is_null() {
        return Err(CUresult::INVALID_VALUE);
    }
    let fail = |status: CUresult, message: String| {
        report(format_args!("module load: {message}"));
        log.write(&message);
        status
    };
    // The first four bytes (fewer where text ends sooner): an ELF or fat binary magic, or text.
    let mut magic = [0u8; 4];
    for (i, b) in magic.iter_mut().enumerate() {
        // SAFETY: a binary has a header of more than 4 bytes; text is read up to its NUL.
        *b = unsafe { element(image as *const u8, i) }?;
        if *b == 0 {
            break;
        }
    }
    let binary = match shared::fatbin::image_kind(&magic) {
        Some(ImageKind::Cubin) => {
            // SAFETY: an ELF image has at least its 64-byte header.
            let header = unsafe { host(image, 64) }?;
            if u16::from_le_bytes([header[18], header[19]]) != machine::EM_RECAP_CPU {
                // A GPU cubin: read it whole (its sections end the image) to name its kernels.
                let len = shared::fatbin::elf_header_len(header).filter(|&n| n <= 1 << 28).unwrap_or(64) as usize;
                let whole = unsafe { host(image, len.max(64)) }?;
                // One the process compiled (NVRTC, ptxas) runs as its PTX, which the interposer kept.
                if let Some(ptx) = crate::compiled::ptx_for_cubin(whole) {
                    return globals::parse(&ptx, memory).map_err(|e| fail(CUresult::INVALID_PTX, e.to_string()));
                }
                let why = machine::elf_ptx(whole).err().map(|e| e.to_string()).unwrap_or_default();
                return Err(fail(CUresult::NO_BINARY_FOR_GPU, why));
            }
            // SAFETY: CPU machine code is the header and NUL-terminated PTX after it.
            let text = unsafe { CStr::from_ptr((image as *const c_char).add(64)) }.to_bytes();
            let mut elf = header.to_vec();
            elf.extend_from_slice(text);
            Some(machine::elf_ptx(&elf).map(str::to_string))
        }
        Some(ImageKind::Fatbin) => {
            // SAFETY: a fat binary starts with its 16-byte container header, which gives its length.
            let header = unsafe { host(image, 16) }?;
            let len = shared::fatbin::container_len(header).ok_or(CUresult::INVALID_IMAGE)?;
            // SAFETY: the container is as long as its header says.
            let bytes = unsafe { host(image, len as usize) }?;
            match machine::fatbin_ptx(bytes) {
                Err(e) if e.is_gpu_code() => return Err(fail(CUresult::NO_BINARY_FOR_GPU, e.to_string())),
                ptx => Some(ptx),
            }
        }
        Some(ImageKind::Wrapper) => {
            return Err(fail(CUresult::INVALID_IMAGE, "the runtime's fat binary wrapper: load its fat binary".into()))
        }
        _ => None,
    };
    if let Some(ptx) = binary {
        let ptx = ptx.map_err(|e| fail(CUresult::INVALID_IMAGE, e.to_string()))?;
        let module = globals::parse(&ptx, memory).map_err(|e| fail(CUresult::INVALID_PTX, e.to_string()))?;
        return check_target(&module.ptx).map(|()| module).map_err(|(status, why)| fail(status, why));
    }
    // SAFETY: text, so NUL-terminated by the contract.
    let text = unsafe { CStr::from_ptr(image as *const c_char) }
        .to_str()
        .map_err(|_| fail(CUresult::INVALID_IMAGE, "the image is neither PTX text nor a binary".into()))?;
    if !text.contains(".version") && !text.contains(".target") && !text.contains(".entry") {
        return Err(fail(CUresult::INVALID_IMAGE, "the image is not PTX text (no .version, .target or .entry)".into()));
    }
    // The driver supplies `cudaGraphSetConditional`; here a conditional handle is the address of
    // its condition, so the function is a store (graph.rs).
    let defined = shared::cuda_graph::define_set_conditional(text);
    let text = defined.as_deref().unwrap_or(text);
    let module = globals::parse(text, memory).map_err(|e| fail(CUresult::INVALID_PTX, e.to_string()))?;
    check_target(&module.ptx).map(|()| module).map_err(|(status, why)| fail(status, why))
}

/// The newest PTX ISA the driver loads: every 9.x, which CUDA 13's toolkits (13.0 to 13.5 and
/// their NVVM and NVRTC) emit, so that a newer toolkit's PTX is not refused for its version alone.
const PTX_ISA: (u32, u32) = (9, 9);

/// Whether the device (`config.rs`) may run PTX of this `.version` and `.target`, as the real
/// driver's JIT decides: a newer ISA is `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`, a target above the
/// device's architecture (or an arch-specific `sm_XXa` of another one) `CUDA_ERROR_INVALID_PTX`.
fn check_target(module: &shared::ptx::Module) -> std::result::Result<(), (CUresult, String)> {
    let arch = crate::config::config().arch;
    if let Some(v) = module.version() {
        let parsed = v.split_once('.').and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
        if parsed.is_some_and(|p| p > PTX_ISA) {
            return Err((
                CUresult::UNSUPPORTED_PTX_VERSION,
                format!("PTX ISA {v} is newer than this driver's ({}.{})", PTX_ISA.0, PTX_ISA.1),
            ));
        }
    }
    for target in module.target().iter().filter(|t| t.starts_with("sm_")) {
        let Some(needed) = crate::config::parse_arch(target) else { continue };
        let specific = target.ends_with('a') || target.ends_with('f');
        if needed > arch || (specific && needed != arch) {
            return Err((
                CUresult::INVALID_PTX,
                format!("PTX for .target {target} does not run on this device (sm_{arch}; RECAP_CPU_ARCH sets it)"),
            ));
        }
    }
    Ok(())
}

/// Adds a loaded module, its kernels bounded by the load's `CU_JIT_MAX_REGISTERS`.
fn insert(d: &mut Driver, loaded: Loaded, jit: &JitOptions) -> Handle {
    let Loaded { ptx, const_bytes, mut bounds } = loaded;
    if let Some(max) = jit.max_registers {
        for b in bounds.values_mut() {
            b.max_registers = Some(b.max_registers.map_or(max, |own| own.min(max)));
        }
    }
    d.modules.insert(Module { ptx, const_bytes, bounds, functions: HashMap::new() })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> CUresult {
    unsafe { cuModuleLoadDataEx(module, image, 0, std::ptr::null(), std::ptr::null()) }
}

/// JIT options are ignored, except that the error log buffer gets a failed load's reason.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut Handle,
    image: *const c_void,
    num_options: c_uint,
    options: *const c_int,
    values: *const *mut c_void,
) -> CUresult {
    // SAFETY (here and in every export below): the pointers are the caller's, valid as the driver
    // API requires of them.
    let module = unsafe { Out::new(module) };
    guard(|| {
        let mut d = driver()?;
        d.current()?;
        module.check()?;
        let log = unsafe { JitOptions::from_options(num_options, options, values) };
        let ptx = unsafe { load(image, &log, &mut d.memory) }?;
        module.set(insert(&mut d, ptx, &log))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(module: Handle) -> CUresult {
    guard(|| {
        let mut d = driver()?;
        let m = d.modules.remove(module)?;
        for f in m.functions.values() {
            let _ = d.functions.remove(*f);
        }
        globals::unload(&m.ptx, &mut d.memory);
        Ok(())
    })
}

/// The kernel `name` of a module: the same handle every time it is asked for.
fn function(d: &mut Driver, module: Handle, name: &CStr) -> Result<Handle> {
    let m = d.modules.get(module)?;
    let name = name.to_str().map_err(|_| CUresult::NOT_FOUND)?;
    if let Some(&f) = m.functions.get(name) {
        return Ok(f);
    }
    let entry = m.ptx.entries().iter().position(|e| e.name() == name).ok_or(CUresult::NOT_FOUND)?;
    let c_name = CString::new(name).map_err(|_| CUresult::NOT_FOUND)?;
    let f = d.functions.insert(Function { module, entry, name: c_name });
    d.modules.get_mut(module)?.functions.insert(name.to_string(), f);
    Ok(f)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(func: *mut Handle, module: Handle, name: *const c_char) -> CUresult {
    let func = unsafe { Out::new(func) };
    guard(|| {
        let mut d = driver()?;
        let name = unsafe { c_str(name) }?;
        func.set(function(&mut d, module, name)?)
    })
}

/// A library is a module here, and its kernels are its functions: `cuKernelGetFunction` gives
/// back the kernel's own handle, and a `CUkernel` launches as a `CUfunction` (as CUDA 12 allows).
#[no_mangle]
pub unsafe extern "C" fn cuLibraryLoadData(
    library: *mut Handle,
    code: *const c_void,
    jit_options: *const c_int,
    jit_values: *const *mut c_void,
    num_jit_options: c_uint,
    _library_options: *const c_int,
    _library_values: *const *mut c_void,
    _num_library_options: c_uint,
) -> CUresult {
    let library = unsafe { Out::new(library) };
    guard(|| {
        let mut d = driver()?;
        library.check()?;
        let log = unsafe { JitOptions::from_options(num_jit_options, jit_options, jit_values) };
        let ptx = unsafe { load(code, &log, &mut d.memory) }?;
        library.set(insert(&mut d, ptx, &log))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryUnload(library: Handle) -> CUresult {
    unsafe { cuModuleUnload(library) }
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetKernel(kernel: *mut Handle, library: Handle, name: *const c_char) -> CUresult {
    unsafe { cuModuleGetFunction(kernel, library, name) }
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetFunction(func: *mut Handle, kernel: Handle) -> CUresult {
    let func = unsafe { Out::new(func) };
    guard(|| {
        driver()?.functions.get(kernel)?;
        func.set(kernel)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetParamInfo(
    func: Handle,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CUresult {
    let (offset, size) = unsafe { (Out::new(offset), Out::new(size)) };
    guard(|| {
        let d = driver()?;
        let (f, ptx) = d.function(func)?;
        let p = ptx.entries()[f.entry].params().get(index).ok_or(CUresult::INVALID_VALUE)?;
        if offset.is_null() && size.is_null() {
            return Err(CUresult::INVALID_VALUE);
        }
        offset.set_if_asked(p.offset as usize);
        size.set_if_asked(p.size as usize);
        Ok(())
    })
}

/// The name stays valid while the module is loaded.
#[no_mangle]
pub unsafe extern "C" fn cuFuncGetName(name: *mut *const c_char, func: Handle) -> CUresult {
    let name = unsafe { Out::new(name) };
    guard(|| {
        let d = driver()?;
        name.set(d.function(func)?.0.name.as_ptr())
    })
}

/// A GPU's most registers per thread.
const MAX_REGISTERS: u32 = 255;

/// `CUfunction_attribute` values, from what the PTX declares where it says: the launch bound
/// (`.maxntid`, `.reqntid`, else the device's 1024), static shared memory, the module's `.const`
/// bytes, local memory per thread (its frame and deepest call chain), the registers its body
/// declares (`.reg`, in 32-bit units: PTX's virtual registers, which a GPU's allocator packs
/// into fewer) within `.maxnreg` and `CU_JIT_MAX_REGISTERS`, the PTX ISA;
/// the binary version is the device's architecture. Attributes of a GPU's caches and clusters
/// are 0.
#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(value: *mut c_int, attr: c_int, func: Handle) -> CUresult {
    let value = unsafe { Out::new(value) };
    guard(|| {
        let d = driver()?;
        let (f, module) = d.function_module(func)?;
        let ptx = &module.ptx;
        let entry = &ptx.entries()[f.entry];
        let bounds = module.bounds.get(entry.name()).copied().unwrap_or_default();
        let static_shared = entry.static_shared_bytes() as c_int;
        let clamp = |n: u64| c_int::try_from(n).unwrap_or(c_int::MAX);
        value.set(match attr {
            0 => bounds.thread_limit().map_or(1024, |n| n.min(1024) as c_int), // MAX_THREADS_PER_BLOCK
            1 => static_shared,                                                // SHARED_SIZE_BYTES
            2 => clamp(module.const_bytes),                                    // CONST_SIZE_BYTES
            3 => clamp(ptx.local_bytes(entry)),                                // LOCAL_SIZE_BYTES
            // NUM_REGS: the registers its PTX declares, within `.maxnreg` and a GPU's limit.
            4 => bounds.registers.clamp(1, MAX_REGISTERS).min(bounds.max_registers.unwrap_or(MAX_REGISTERS)) as c_int,
            5 => ptx_version(ptx.version()),                // PTX_VERSION
            6 => crate::config::config().arch as c_int,     // BINARY_VERSION
            8 => MAX_SHARED_BYTES as c_int - static_shared, // MAX_DYNAMIC_SHARED_SIZE_BYTES
            7 | 9..=20 => 0,
            _ => return Err(CUresult::INVALID_VALUE),
        })
    })
}

/// `"8.7"` as 87, the way `CU_FUNC_ATTRIBUTE_PTX_VERSION` counts.
fn ptx_version(v: Option<&str>) -> c_int {
    let Some((major, minor)) = v.and_then(|v| v.split_once('.')) else { return 0 };
    major.parse::<c_int>().unwrap_or(0) * 10 + minor.parse::<c_int>().unwrap_or(0)
}

/// Accepted and ignored: the CPU engine's limits do not depend on a kernel's attributes.
#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(func: Handle, _attr: c_int, _value: c_int) -> CUresult {
    guard(|| driver()?.function(func).map(|_| ()))
}

#[cfg(test)]
#[path = "module_tests.rs"]
mod tests;
