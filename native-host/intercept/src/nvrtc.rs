//! NVRTC behind the interposer: the programs a process compiles at run time, kept so that a cubin
//! it later loads gets its PTX.
//!
//! CuPy (by default), PyTorch's jiterator and others compile CUDA C with NVRTC for the GPU's exact
//! architecture (`-arch=sm_90`), take the cubin (`nvrtcGetCUBIN`) and load that: the driver never
//! sees PTX. The source does not change with the architecture, so the same program compiled again
//! for the virtual architecture (`compute_90`) with the same options, headers and name expressions
//! gives the PTX the cubin was made from.
//!
//! How calls get here: NVRTC is opened with `dlopen`, often by absolute path (CuPy's
//! cuda-pathfinder), like the driver. The audit library (`native-host/audit`) answers NVRTC's
//! name (`libnvrtc*.so*`) with this library's path, after linking the file the program asked for
//! at `RECAP_REAL_LIBNVRTC` (a path in `recap capture`'s folder); this library exports every NVRTC
//! entry point, and forwards each to that file, loaded on first use (`forward.rs`). Four entry points are also recorded:
//! `nvrtcCreateProgram` (source, name, headers), `nvrtcAddNameExpression`, `nvrtcCompileProgram`
//! (options) and `nvrtcGetCUBIN` (the cubin handed out, which is what the program loads).
//!
//! The compile for PTX ([`ptx_for_cubin`]) runs when the archive is written, after the range, so
//! the range's timing is the program's own; the report says what it cost.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crate::forward::{Entry, Forward, Real};

type NvrtcResult = c_int;
const NVRTC_SUCCESS: NvrtcResult = 0;
/// `NVRTC_ERROR_INTERNAL_ERROR`: what a call answers when the real NVRTC cannot be loaded.
const NVRTC_ERROR_INTERNAL_ERROR: NvrtcResult = 11;

/// What one program was made of: enough to compile it again.
struct Source {
    name: String,
    text: CString,
    /// `(contents, include name)` of each header handed in.
    headers: Vec<(CString, CString)>,
    name_expressions: Vec<CString>,
    options: Vec<CString>,
}

/// A cubin NVRTC handed out, and the program it came from.
struct Compiled {
    source: Arc<Source>,
    cubin: Vec<u8>,
    ptx: OnceLock<Result<Recompiled, RecompileError>>,
    /// The same PTX NUL-terminated, for [`ptx_c`].
    ptx_c: OnceLock<Option<CString>>,
}

/// The PTX of a compile for the virtual architecture.
#[derive(Clone)]
pub struct Recompiled {
    pub ptx: String,
    /// Where it came from, for the report: the program and the architecture.
    pub from: String,
    pub millis: f64,
}

/// Live programs by handle, and every cubin handed out.
#[derive(Default)]
struct Book {
    programs: Vec<(usize, Source)>,
    compiled: Vec<Arc<Compiled>>,
}

static BOOK: Mutex<Book> = Mutex::new(Book { programs: Vec::new(), compiled: Vec::new() });

fn book() -> std::sync::MutexGuard<'static, Book> {
    BOOK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The real NVRTC, where the audit library linked the file the program opened.
static REAL: Real =
    Real::new("NVRTC", shared::capture::env::REAL_NVRTC, || crate::request::get().real_nvrtc.as_deref());

unsafe extern "C" fn no_nvrtc(_: usize, _: usize, _: usize, _: usize, _: usize, _: usize) -> usize {
    NVRTC_ERROR_INTERNAL_ERROR as usize
}

unsafe extern "C" fn no_nvrtc_string(_: usize, _: usize, _: usize, _: usize, _: usize, _: usize) -> usize {
    c"NVRTC_ERROR_INTERNAL_ERROR (recap capture could not load the real NVRTC)".as_ptr() as usize
}

/// Exports that forward to the real NVRTC untouched.
macro_rules! forwarded {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        #[allow(non_snake_case, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $name(a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> usize {
            static ENTRY: Entry = Entry::new(
                &REAL,
                // SAFETY: the literal ends in its NUL.
                unsafe { CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) },
            );
            let missing: Forward = if stringify!($name) == "nvrtcGetErrorString" { no_nvrtc_string } else { no_nvrtc };
            ENTRY.forward(missing)(a, b, c, d, e, f)
        }
    )*};
}

// Every export of libnvrtc.so.12 and .13 that is not recorded below.
forwarded!(
    nvrtcGetErrorString,
    nvrtcVersion,
    nvrtcGetNumSupportedArchs,
    nvrtcGetSupportedArchs,
    nvrtcGetPTXSize,
    nvrtcGetPTX,
    nvrtcGetCUBINSize,
    nvrtcGetNVVMSize,
    nvrtcGetNVVM,
    nvrtcGetLTOIRSize,
    nvrtcGetLTOIR,
    nvrtcGetOptiXIRSize,
    nvrtcGetOptiXIR,
    nvrtcGetTileIRSize,
    nvrtcGetTileIR,
    nvrtcGetProgramLogSize,
    nvrtcGetProgramLog,
    nvrtcGetLoweredName,
    nvrtcGetPCHHeapSize,
    nvrtcSetPCHHeapSize,
    nvrtcGetPCHCreateStatus,
    nvrtcGetPCHHeapSizeRequired,
    nvrtcSetFlowCallback,
    nvrtcGetBundledHeadersInfo,
    nvrtcInstallBundledHeaders,
    nvrtcRemoveBundledHeaders,
    __nvrtcCPEx,
    __nvrtcNvvmHandle,
);

/// The real entry point `name` as a [`Forward`].
macro_rules! real {
    ($name:literal) => {{
        static ENTRY: Entry = Entry::new(&REAL, $name);
        ENTRY.forward(no_nvrtc)
    }};
}

/// A C string the program handed in, copied (empty when NULL).
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn copy(p: *const c_char) -> CString {
    if p.is_null() {
        CString::default()
    } else {
        CStr::from_ptr(p).to_owned()
    }
}

/// # Safety
/// NVRTC's contract: `prog` is writable; the strings are NUL-terminated; `headers` and
/// `include_names` hold `num_headers` strings each (or are NULL when it is 0).
#[no_mangle]
pub unsafe extern "C" fn nvrtcCreateProgram(
    prog: *mut *mut c_void,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    headers: *const *const c_char,
    include_names: *const *const c_char,
) -> NvrtcResult {
    let real = real!(c"nvrtcCreateProgram");
    let r = real(
        prog as usize,
        src as usize,
        name as usize,
        num_headers as usize,
        headers as usize,
        include_names as usize,
    ) as NvrtcResult;
    if r == NVRTC_SUCCESS && !prog.is_null() && !src.is_null() {
        let n = if headers.is_null() || include_names.is_null() { 0 } else { num_headers.max(0) as usize };
        let source = Source {
            name: copy(name).to_string_lossy().into_owned(),
            text: copy(src),
            headers: (0..n).map(|i| (copy(*headers.add(i)), copy(*include_names.add(i)))).collect(),
            name_expressions: Vec::new(),
            options: Vec::new(),
        };
        let mut b = book();
        let handle = *prog as usize;
        b.programs.retain(|(h, _)| *h != handle);
        b.programs.push((handle, source));
    }
    r
}

/// # Safety
/// NVRTC's contract: `prog` is a program; `name_expression` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn nvrtcAddNameExpression(prog: *mut c_void, name_expression: *const c_char) -> NvrtcResult {
    let r = real!(c"nvrtcAddNameExpression")(prog as usize, name_expression as usize, 0, 0, 0, 0) as NvrtcResult;
    if r == NVRTC_SUCCESS {
        if let Some((_, s)) = book().programs.iter_mut().find(|(h, _)| *h == prog as usize) {
            s.name_expressions.push(copy(name_expression));
        }
    }
    r
}

/// # Safety
/// NVRTC's contract: `prog` is a program; `options` holds `num_options` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn nvrtcCompileProgram(
    prog: *mut c_void,
    num_options: c_int,
    options: *const *const c_char,
) -> NvrtcResult {
    let r = real!(c"nvrtcCompileProgram")(prog as usize, num_options as usize, options as usize, 0, 0, 0);
    let n = if options.is_null() { 0 } else { num_options.max(0) as usize };
    if let Some((_, s)) = book().programs.iter_mut().find(|(h, _)| *h == prog as usize) {
        s.options = (0..n).map(|i| copy(*options.add(i))).collect();
    }
    r as NvrtcResult
}

/// # Safety
/// NVRTC's contract: `prog` is a compiled program; `cubin` has room for `nvrtcGetCUBINSize`.
#[no_mangle]
pub unsafe extern "C" fn nvrtcGetCUBIN(prog: *mut c_void, cubin: *mut c_char) -> NvrtcResult {
    let r = real!(c"nvrtcGetCUBIN")(prog as usize, cubin as usize, 0, 0, 0, 0) as NvrtcResult;
    if r != NVRTC_SUCCESS || cubin.is_null() {
        return r;
    }
    let mut size = 0usize;
    if real!(c"nvrtcGetCUBINSize")(prog as usize, &mut size as *mut usize as usize, 0, 0, 0, 0) as NvrtcResult
        != NVRTC_SUCCESS
    {
        return r;
    }
    let bytes = std::slice::from_raw_parts(cubin as *const u8, size).to_vec();
    let mut b = book();
    let Some((_, s)) = b.programs.iter().find(|(h, _)| *h == prog as usize) else { return r };
    let source = Arc::new(Source {
        name: s.name.clone(),
        text: s.text.clone(),
        headers: s.headers.clone(),
        name_expressions: s.name_expressions.clone(),
        options: s.options.clone(),
    });
    if !b.compiled.iter().any(|c| c.cubin == bytes) {
        b.compiled.push(Arc::new(Compiled { source, cubin: bytes, ptx: OnceLock::new(), ptx_c: OnceLock::new() }));
    }
    r
}

/// # Safety
/// NVRTC's contract: `prog` points to a program handle.
#[no_mangle]
pub unsafe extern "C" fn nvrtcDestroyProgram(prog: *mut *mut c_void) -> NvrtcResult {
    if !prog.is_null() {
        let handle = *prog as usize;
        book().programs.retain(|(h, _)| *h != handle);
    }
    real!(c"nvrtcDestroyProgram")(prog as usize, 0, 0, 0, 0, 0) as NvrtcResult
}

/// Why an NVRTC program did not compile again for its PTX.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecompileError {
    #[error("its options name no architecture")]
    NoArchitecture,
    /// An option with a NUL byte inside once its architecture was made virtual.
    #[error("{0}")]
    Option(#[source] std::ffi::NulError),
    /// An NVRTC call that failed, with NVRTC's result.
    #[error("{call} failed with NVRTC error {result}")]
    Call { call: &'static str, result: NvrtcResult },
    #[error("compiling for {arch} failed (NVRTC error {result}): {log}")]
    Compile { arch: String, result: NvrtcResult, log: String },
    #[error("NVRTC's PTX is not UTF-8")]
    PtxNotUtf8,
}

/// What a parsed cubin NVRTC made says until the archive is written.
pub const PENDING: &str = "NVRTC, compiled again for PTX when the archive is written";

/// Gives every module NVRTC made, still waiting for its PTX, the PTX of its program compiled
/// again, and notes in the report what that cost. Runs when the archive is written.
pub fn complete(modules: &mut [crate::images::ModuleImage], report: &mut shared::capture::Report) {
    let (mut count, mut millis) = (0, 0.0);
    for image in modules.iter_mut() {
        let pending = image.parsed().filter(|p| p.ptx_from == PENDING);
        let Some(cubin) = pending.and_then(|p| p.cubins.first()).map(|(_, bytes)| bytes.clone()) else {
            continue;
        };
        match ptx_for_cubin(&cubin) {
            Some(Ok(r)) => {
                count += 1;
                millis += r.millis;
                image.set_ptx(Some(r.ptx), r.from);
            }
            Some(Err(e)) => image.set_ptx(None, format!("none: its NVRTC program did not compile again: {e}")),
            None => image.set_ptx(None, crate::images::NO_PTX.into()),
        }
    }
    if count > 0 {
        report
            .note(format!("NVRTC: {count} program(s) compiled again for their PTX after the range, in {millis:.1} ms"));
    }
}

/// Whether NVRTC handed out `cubin` (the image a module was loaded from, as long as its ELF
/// headers say: what NVRTC gave, or that followed only by zero padding).
pub fn made(cubin: &[u8]) -> bool {
    find(cubin).is_some()
}

fn find(cubin: &[u8]) -> Option<Arc<Compiled>> {
    let b = book();
    b.compiled
        .iter()
        .find(|c| {
            c.cubin.len() >= cubin.len()
                && c.cubin[..cubin.len()] == *cubin
                && c.cubin[cubin.len()..].iter().all(|&b| b == 0)
        })
        .cloned()
}

/// The PTX of the NVRTC program that made `cubin`, compiled again for the virtual architecture
/// (once per program); `None` when NVRTC did not make it.
pub fn ptx_for_cubin(cubin: &[u8]) -> Option<Result<Recompiled, RecompileError>> {
    let compiled = find(cubin)?;
    Some(compiled.ptx.get_or_init(|| recompile(&compiled.source)).clone())
}

/// The PTX of the NVRTC program that made `cubin`, compiled again now, NUL-terminated and kept for
/// the life of the process; NULL when NVRTC did not make it or it does not compile. For recap's CPU
/// driver (`images::recap_cubin_ptx`).
pub fn ptx_c(cubin: &[u8]) -> *const c_char {
    let Some(compiled) = find(cubin) else { return std::ptr::null() };
    let text = compiled.ptx_c.get_or_init(|| {
        let r = compiled.ptx.get_or_init(|| recompile(&compiled.source));
        r.as_ref().ok().and_then(|r| CString::new(r.ptx.clone()).ok())
    });
    text.as_ref().map_or(std::ptr::null(), |t| t.as_ptr())
}

/// The options with every real architecture (`sm_XX`) made virtual (`compute_XX`), and the
/// architecture; an error when the program named none.
fn virtual_options(options: &[CString]) -> Result<(Vec<CString>, String), RecompileError> {
    let mut out = Vec::with_capacity(options.len());
    let mut arch = None;
    let mut next_is_arch = false;
    for o in options {
        let s = o.to_string_lossy();
        let (prefix, value) = match s.split_once('=') {
            Some((k, v)) if matches!(k, "-arch" | "--gpu-architecture") => (format!("{k}="), v.to_string()),
            _ if next_is_arch => (String::new(), s.to_string()),
            _ => {
                next_is_arch = matches!(&*s, "-arch" | "--gpu-architecture");
                out.push(o.clone());
                continue;
            }
        };
        next_is_arch = false;
        let value = match value.strip_prefix("sm_") {
            Some(sm) => format!("compute_{sm}"),
            None => value,
        };
        arch = Some(value.clone());
        out.push(CString::new(format!("{prefix}{value}")).map_err(RecompileError::Option)?);
    }
    let arch = arch.ok_or(RecompileError::NoArchitecture)?;
    Ok((out, arch))
}

/// Compiles `source` again for its virtual architecture with the real NVRTC.
fn recompile(source: &Source) -> Result<Recompiled, RecompileError> {
    let start = Instant::now();
    let (options, arch) = virtual_options(&source.options)?;
    let name = CString::new(source.name.as_str()).unwrap_or_default();
    let headers: Vec<*const c_char> = source.headers.iter().map(|(h, _)| h.as_ptr()).collect();
    let includes: Vec<*const c_char> = source.headers.iter().map(|(_, n)| n.as_ptr()).collect();
    let options_p: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    let mut prog: *mut c_void = std::ptr::null_mut();
    let status = |call: &'static str, r: usize| -> Result<(), RecompileError> {
        if r as NvrtcResult == NVRTC_SUCCESS {
            Ok(())
        } else {
            Err(RecompileError::Call { call, result: r as NvrtcResult })
        }
    };
    // SAFETY: NVRTC's own calls, with the arguments its API takes, all of them live here.
    unsafe {
        status(
            "nvrtcCreateProgram",
            real!(c"nvrtcCreateProgram")(
                &mut prog as *mut *mut c_void as usize,
                source.text.as_ptr() as usize,
                name.as_ptr() as usize,
                headers.len(),
                headers.as_ptr() as usize,
                includes.as_ptr() as usize,
            ),
        )?;
        let result = (|| {
            for e in &source.name_expressions {
                status(
                    "nvrtcAddNameExpression",
                    real!(c"nvrtcAddNameExpression")(prog as usize, e.as_ptr() as usize, 0, 0, 0, 0),
                )?;
            }
            let r = real!(c"nvrtcCompileProgram")(prog as usize, options_p.len(), options_p.as_ptr() as usize, 0, 0, 0);
            if r as NvrtcResult != NVRTC_SUCCESS {
                return Err(RecompileError::Compile { arch: arch.clone(), result: r as NvrtcResult, log: log(prog) });
            }
            let mut size = 0usize;
            status(
                "nvrtcGetPTXSize",
                real!(c"nvrtcGetPTXSize")(prog as usize, &mut size as *mut usize as usize, 0, 0, 0, 0),
            )?;
            let mut ptx = vec![0u8; size.max(1)];
            status("nvrtcGetPTX", real!(c"nvrtcGetPTX")(prog as usize, ptx.as_mut_ptr() as usize, 0, 0, 0, 0))?;
            let end = ptx.iter().position(|&b| b == 0).unwrap_or(ptx.len());
            String::from_utf8(ptx[..end].to_vec()).map_err(|_| RecompileError::PtxNotUtf8)
        })();
        real!(c"nvrtcDestroyProgram")(&mut prog as *mut *mut c_void as usize, 0, 0, 0, 0, 0);
        let ptx = result?;
        Ok(Recompiled {
            ptx,
            from: format!("NVRTC program `{}` compiled again for {arch}", source.name),
            millis: start.elapsed().as_secs_f64() * 1e3,
        })
    }
}

/// The program's compile log, for an error.
///
/// # Safety
/// `prog` is a live NVRTC program.
unsafe fn log(prog: *mut c_void) -> String {
    let mut size = 0usize;
    if real!(c"nvrtcGetProgramLogSize")(prog as usize, &mut size as *mut usize as usize, 0, 0, 0, 0) != 0 {
        return String::new();
    }
    let mut text = vec![0u8; size.max(1)];
    real!(c"nvrtcGetProgramLog")(prog as usize, text.as_mut_ptr() as usize, 0, 0, 0, 0);
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    String::from_utf8_lossy(&text[..end]).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(list: &[&str]) -> Vec<CString> {
        list.iter().map(|s| CString::new(*s).unwrap()).collect()
    }

    #[test]
    fn real_architectures_become_virtual_in_every_spelling() {
        let (o, arch) = virtual_options(&opts(&["-arch=sm_90", "-std=c++17"])).unwrap();
        assert_eq!((o, arch), (opts(&["-arch=compute_90", "-std=c++17"]), "compute_90".to_string()));
        let (o, arch) = virtual_options(&opts(&["--gpu-architecture", "sm_90a", "-lineinfo"])).unwrap();
        assert_eq!((o, arch), (opts(&["--gpu-architecture", "compute_90a", "-lineinfo"]), "compute_90a".to_string()));
        let (o, _) = virtual_options(&opts(&["--gpu-architecture=sm_80"])).unwrap();
        assert_eq!(o, opts(&["--gpu-architecture=compute_80"]));
        let e = virtual_options(&opts(&["-std=c++17"])).unwrap_err();
        assert_eq!(e, RecompileError::NoArchitecture);
        assert_eq!(e.to_string(), "its options name no architecture");
    }
}
