//! The driver's linker (`cuLinkCreate`, `cuLinkAddData`, `cuLinkAddFile`, `cuLinkComplete`,
//! `cuLinkDestroy`), which numba and cuda-python's `Linker` use where nvJitLink is absent. The
//! inputs are PTX text, fat binaries or the CPU driver's machine code (whose PTX is taken); several
//! are linked into one PTX module on their text (`ptx_text::link`: `.extern` functions and
//! variables bound to the input that defines them), and the result is CPU machine code wrapping
//! that PTX (`machine::wrap`), which `cuModuleLoadData` and `cuLibraryLoadData` load as a GPU
//! driver loads a linked cubin. The PTX is parsed at `cuLinkComplete`, so a program's PTX errors
//! (and names left undefined) surface there, as `ptxas` and `nvlink` errors do on a GPU.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::driver::driver;
use crate::ffi::{c_str, host, Handle, Out};
use crate::machine;
use crate::module::JitOptions;
use crate::result::{guard, report, CUresult, Result};

/// `CUjitInputType`.
const INPUT_CUBIN: c_int = 0;
const INPUT_PTX: c_int = 1;
const INPUT_FATBINARY: c_int = 2;

pub(crate) struct Link {
    /// The PTX of each input, with the name the caller gave it.
    inputs: Vec<(String, String)>,
    /// The linked image, kept until `cuLinkDestroy`, as the driver's own is.
    output: Option<Vec<u8>>,
    /// `CU_JIT_MAX_REGISTERS`, which the linked code keeps as its kernels' `.maxnreg`.
    max_registers: Option<u32>,
}

// SAFETY (every `unsafe` below): the pointers are the caller's, valid as the driver API requires.

#[no_mangle]
pub unsafe extern "C" fn cuLinkCreate_v2(
    num_options: c_uint,
    options: *const c_int,
    values: *const *mut c_void,
    state: *mut Handle,
) -> CUresult {
    let state = unsafe { Out::new(state) };
    guard(|| {
        let mut d = driver()?;
        d.current()?;
        state.check()?;
        let max_registers = unsafe { JitOptions::from_options(num_options, options, values) }.max_registers;
        state.set(d.links.insert(Link { inputs: Vec::new(), output: None, max_registers }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkCreate(n: c_uint, o: *const c_int, v: *const *mut c_void, s: *mut Handle) -> CUresult {
    unsafe { cuLinkCreate_v2(n, o, v, s) }
}

/// The PTX of one input of kind `kind`.
fn input_ptx(kind: c_int, bytes: &[u8], name: &str) -> Result<String> {
    let fail = |status: CUresult, why: String| {
        report(format_args!("link input {name}: {why}"));
        status
    };
    match kind {
        INPUT_PTX => {
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            String::from_utf8(bytes[..end].to_vec())
                .map_err(|_| fail(CUresult::INVALID_IMAGE, "PTX that is not UTF-8".into()))
        }
        INPUT_FATBINARY => machine::fatbin_ptx(bytes).map_err(|e| fail(CUresult::NO_BINARY_FOR_GPU, e.to_string())),
        INPUT_CUBIN => {
            machine::elf_ptx(bytes).map(str::to_string).map_err(|e| fail(CUresult::NO_BINARY_FOR_GPU, e.to_string()))
        }
        // Objects, libraries, NVVM IR and LTO-IR need a GPU toolchain's linker.
        other => Err(fail(
            CUresult::NOT_SUPPORTED,
            format!("input type {other} (only PTX, cubins and fat binaries link here)"),
        )),
    }
}

fn add(state: Handle, kind: c_int, bytes: &[u8], name: &str) -> Result<()> {
    let mut d = driver()?;
    let link = d.links.get_mut(state)?;
    let ptx = input_ptx(kind, bytes, name)?;
    link.inputs.push((name.to_string(), ptx));
    Ok(())
}

/// A name for reports: the caller's, else `input`.
unsafe fn input_name(name: *const c_char) -> String {
    unsafe { c_str(name) }.map_or_else(|_| "input".to_string(), |n| n.to_string_lossy().into_owned())
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkAddData_v2(
    state: Handle,
    kind: c_int,
    data: *const c_void,
    size: usize,
    name: *const c_char,
    _num_options: c_uint,
    _options: *const c_int,
    _values: *const *mut c_void,
) -> CUresult {
    guard(|| {
        if size == 0 {
            return Err(CUresult::INVALID_VALUE);
        }
        let bytes = unsafe { host(data, size) }?;
        add(state, kind, bytes, &unsafe { input_name(name) })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkAddData(
    state: Handle,
    kind: c_int,
    data: *const c_void,
    size: usize,
    name: *const c_char,
    n: c_uint,
    o: *const c_int,
    v: *const *mut c_void,
) -> CUresult {
    unsafe { cuLinkAddData_v2(state, kind, data, size, name, n, o, v) }
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkAddFile_v2(
    state: Handle,
    kind: c_int,
    path: *const c_char,
    _num_options: c_uint,
    _options: *const c_int,
    _values: *const *mut c_void,
) -> CUresult {
    guard(|| {
        let path = unsafe { c_str(path) }?.to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).map_err(|e| {
            report(format_args!("link input {path}: {e}"));
            CUresult::FILE_NOT_FOUND
        })?;
        add(state, kind, &bytes, &path)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkAddFile(
    state: Handle,
    kind: c_int,
    path: *const c_char,
    n: c_uint,
    o: *const c_int,
    v: *const *mut c_void,
) -> CUresult {
    unsafe { cuLinkAddFile_v2(state, kind, path, n, o, v) }
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkComplete(state: Handle, image: *mut *mut c_void, size: *mut usize) -> CUresult {
    let (image, size) = unsafe { (Out::new(image), Out::new(size)) };
    guard(|| {
        let mut d = driver()?;
        let link = d.links.get_mut(state)?;
        let ptx = match link.inputs.as_slice() {
            [(_, ptx)] => ptx.clone(),
            [] => {
                report("cuLinkComplete: nothing was added to the link");
                return Err(CUresult::INVALID_VALUE);
            }
            several => crate::ptx_text::link(&several.iter().map(|(_, ptx)| ptx.as_str()).collect::<Vec<_>>()),
        };
        let ptx = match link.max_registers {
            Some(max) => crate::ptx_text::limit_registers(&ptx, max),
            None => ptx,
        };
        if let Err(e) = shared::ptx::Module::parse(&ptx) {
            let names: Vec<&str> = link.inputs.iter().map(|(n, _)| n.as_str()).collect();
            report(format_args!("cuLinkComplete ({}): {e}", names.join(", ")));
            return Err(CUresult::INVALID_PTX);
        }
        let output = link.output.insert(machine::wrap(&ptx));
        image.set(output.as_mut_ptr() as *mut c_void)?;
        size.set(output.len())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkDestroy(state: Handle) -> CUresult {
    guard(|| driver()?.links.remove(state).map(drop))
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
