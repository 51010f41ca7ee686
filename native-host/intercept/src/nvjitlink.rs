//! nvJitLink behind the interposer: the links a process makes with it, kept so that a cubin it
//! later loads gets the PTX it was linked from.
//!
//! numba-cuda (through cuda.bindings) and cuda.core link a kernel's PTX with nvJitLink and load
//! the cubin it hands out: the driver never sees PTX, nor its own linker (`cuLink*`, recorded in
//! `hooks.rs`). nvJitLink is opened with `dlopen`, often by absolute path (cuda-pathfinder), or
//! linked at load time (cuSPARSE); as for NVRTC (`nvrtc.rs`), the audit library answers its name
//! (`libnvJitLink*.so*`) with this library's path after linking the file asked for at
//! `RECAP_REAL_LIBNVJITLINK`, and this library exports every nvJitLink entry point and forwards
//! each there (`forward.rs`).
//!
//! nvJitLink's header makes each entry point an inline function over a versioned symbol
//! (`nvJitLinkCreate` calls `__nvJitLinkCreate_13_5` under a 13.5 header), and the library
//! exports every version it supports beside the plain name. build.rs generates all of them, 12.0
//! to 13.9, each forwarded to the real symbol of its own name: a version the real library lacks
//! answers `NVJITLINK_ERROR_OUTDATED_LIBRARY`, where a program linked against it would not load.
//!
//! Recorded once the real call succeeded: `nvJitLinkCreate` (the options, and the version every
//! later call about the link goes through), `nvJitLinkAddData` and `nvJitLinkAddFile` (every
//! input and its kind), `nvJitLinkGetLinkedPtx` (the link's own PTX, where the program asked for
//! it) and `nvJitLinkGetLinkedCubin` (the cubin handed out, kept under its BLAKE3 with the link).
//! A module loaded from those bytes, wherever the program copied them, gets the link's PTX: its
//! own linked PTX when the program took it, else its one PTX input (`images::link_ptx`, as for the
//! driver's linker: several PTX inputs are no one module's PTX, and other inputs are named). A
//! link of LTO-IR with `-lto` has no such input: nvJitLink optimises the whole and hands out a
//! cubin only, so the same link is made again with `-ptx` as soon as the program takes the cubin,
//! and its PTX is the module's. Not later, as NVRTC's programs are compiled again (`nvrtc.rs`):
//! nvJitLink calls the driver (`cuInit`), and recap's CPU driver asks for a cubin's PTX while it
//! holds its lock; the report's notes say what the second link cost the program.

use std::ffi::{c_char, CStr, CString};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::forward::{Entry, Real};
use crate::images::{InputKind, LinkInputs};

type NvJitLinkResult = i32;
const NVJITLINK_SUCCESS: NvJitLinkResult = 0;
/// What a call answers when the real nvJitLink cannot be loaded.
const NVJITLINK_ERROR_INTERNAL: NvJitLinkResult = 6;
/// What a versioned entry point the real nvJitLink does not export answers.
const NVJITLINK_ERROR_OUTDATED_LIBRARY: NvJitLinkResult = 14;

/// The real nvJitLink, where the audit library linked the file the program opened.
static REAL: Real =
    Real::new("nvJitLink", shared::capture::env::REAL_NVJITLINK, || crate::request::get().real_nvjitlink.as_deref());

/// The entry points whose calls are recorded; every other is forwarded untouched.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    Create,
    Destroy,
    AddData,
    AddFile,
    GetLinkedCubin,
    GetLinkedPtx,
    Other,
}

/// One link the program made, while its handle lives: enough to link it again.
#[derive(Clone, Default)]
struct Link {
    /// The suffix of the `nvJitLinkCreate` it was made by: the version every later call to the
    /// real library about it goes through.
    version: &'static str,
    options: Vec<String>,
    inputs: LinkInputs,
    /// Each input's `nvJitLinkInputType` as the program gave it.
    types: Vec<u32>,
    /// What `nvJitLinkGetLinkedPtx` handed out.
    linked_ptx: Option<String>,
}

impl Link {
    /// Whether nvJitLink optimised the link whole (`-lto` with LTO-IR inputs): its PTX is none
    /// of its inputs but what it makes of them, which the same link with `-ptx` gives.
    fn optimised(&self) -> bool {
        self.options.iter().any(|o| o == "-lto") && self.inputs.iter().any(|(k, _)| *k == InputKind::LtoIr)
    }
}

/// A cubin nvJitLink handed out, and the link that made it.
struct Output {
    hash: blake3::Hash,
    link: Link,
    /// The PTX of an optimised link, linked again with `-ptx`, and what that took in ms.
    relinked: Option<(Result<String, RelinkError>, f64)>,
}

/// Live links by handle, and every cubin handed out.
struct Book {
    links: Vec<(usize, Link)>,
    outputs: Vec<Arc<Output>>,
}

static BOOK: Mutex<Book> = Mutex::new(Book { links: Vec::new(), outputs: Vec::new() });

fn book() -> std::sync::MutexGuard<'static, Book> {
    BOOK.lock().unwrap_or_else(|e| e.into_inner())
}

unsafe extern "C" fn no_nvjitlink(_: usize, _: usize, _: usize, _: usize, _: usize, _: usize) -> usize {
    NVJITLINK_ERROR_INTERNAL as usize
}

unsafe extern "C" fn outdated(_: usize, _: usize, _: usize, _: usize, _: usize, _: usize) -> usize {
    NVJITLINK_ERROR_OUTDATED_LIBRARY as usize
}

// Every export: `nvJitLinkCreate`, `__nvJitLinkCreate_12_0` ... (build.rs).
include!(concat!(env!("OUT_DIR"), "/nvjitlink_exports.rs"));

/// An export's body: the real call, recorded when it succeeded. `version` is the export's suffix
/// (`_13_0`, or empty for a plain name), by which the sizes that go with a `GetLinked*` call are
/// asked of the same version.
///
/// # Safety
/// nvJitLink's contract for the entry point `call` stands for, with `args` its arguments.
unsafe fn call(call: Call, version: &'static str, entry: &Entry, args: [usize; 6]) -> usize {
    let missing = if version.is_empty() { no_nvjitlink } else { outdated };
    let real = entry.forward(missing);
    let [a, b, c, d, e, f] = args;
    if call == Call::Destroy && a != 0 {
        // SAFETY: `nvJitLinkDestroy(nvJitLinkHandle *)`: `a` points to the handle, gone once the
        // call returns.
        let handle = unsafe { *(a as *const usize) };
        book().links.retain(|(h, _)| *h != handle);
    }
    // SAFETY: the real entry point of the same name, or one that touches nothing.
    let r = unsafe { real(a, b, c, d, e, f) };
    if r as NvJitLinkResult == NVJITLINK_SUCCESS {
        // Nothing recorded may unwind into the program.
        // SAFETY: the call succeeded, so its arguments are what nvJitLink's contract says.
        let _ = std::panic::catch_unwind(|| unsafe { record(call, version, args) });
    }
    r
}

/// Records a call that succeeded.
///
/// # Safety
/// As [`call`]'s, and the real call succeeded.
unsafe fn record(call: Call, version: &'static str, args: [usize; 6]) {
    match call {
        Call::Create => {
            let (out, count, list) =
                (args[0] as *const usize, args[1] as u32 as usize, args[2] as *const *const c_char);
            if out.is_null() {
                return;
            }
            let count = if list.is_null() { 0 } else { count };
            // SAFETY: `nvJitLinkCreate(handle *, uint32_t n, const char **options)`: `list` holds
            // `count` strings, each NUL-terminated; `out` holds the new handle.
            let (options, handle) = unsafe {
                let options = (0..count)
                    .map(|i| *list.add(i))
                    .filter(|p| !p.is_null())
                    .map(|p| CStr::from_ptr(p).to_string_lossy().into_owned())
                    .collect();
                (options, *out)
            };
            let mut b = book();
            b.links.retain(|(h, _)| *h != handle);
            b.links.push((handle, Link { version, options, ..Link::default() }));
        }
        Call::AddData => {
            let (handle, kind, data, size, name) = (args[0], args[1] as u32, args[2] as *const u8, args[3], args[4]);
            if data.is_null() {
                return;
            }
            // SAFETY: `nvJitLinkAddData(handle, type, const void *data, size_t size, const char
            // *name)`, which nvJitLink accepted: `size` bytes at `data`, `name` NULL or a string.
            let (bytes, name) = unsafe {
                let name = (name != 0).then(|| CStr::from_ptr(name as *const c_char).to_string_lossy().into_owned());
                (std::slice::from_raw_parts(data, size).to_vec(), name)
            };
            add_input(handle, kind, input_kind(kind, &bytes, name.as_deref()), bytes);
        }
        Call::AddFile => {
            let (handle, kind, path) = (args[0], args[1] as u32, args[2] as *const c_char);
            if path.is_null() {
                return;
            }
            // SAFETY: `nvJitLinkAddFile(handle, type, const char *fileName)`: a NUL-terminated name.
            let path = unsafe { CStr::from_ptr(path) }.to_string_lossy().into_owned();
            let Ok(bytes) = std::fs::read(&path) else { return };
            add_input(handle, kind, input_kind(kind, &bytes, Some(&path)), bytes);
        }
        Call::GetLinkedPtx => {
            let (handle, ptx) = (args[0], args[1] as *const u8);
            let Some(size) = size_of(handle, "GetLinkedPtxSize", version) else { return };
            if ptx.is_null() {
                return;
            }
            // SAFETY: `nvJitLinkGetLinkedPtx(handle, char *ptx)` wrote the size it gives.
            let text = text_of(unsafe { std::slice::from_raw_parts(ptx, size) });
            if let Some((_, link)) = book().links.iter_mut().find(|(h, _)| *h == handle) {
                link.linked_ptx = Some(text);
            }
        }
        Call::GetLinkedCubin => {
            let (handle, cubin) = (args[0], args[1] as *const u8);
            let Some(size) = size_of(handle, "GetLinkedCubinSize", version) else { return };
            if cubin.is_null() {
                return;
            }
            // SAFETY: `nvJitLinkGetLinkedCubin(handle, void *cubin)` wrote the size it gives.
            let hash = blake3::hash(unsafe { std::slice::from_raw_parts(cubin, size) });
            let Some(link) = book().links.iter().find(|(h, _)| *h == handle).map(|(_, l)| l.clone()) else { return };
            if book().outputs.iter().any(|o| o.hash == hash) {
                return;
            }
            // Now, in the program's own call to nvJitLink: nvJitLink calls the driver (`cuInit`),
            // which recap's CPU driver answers under the lock it holds while it loads a module.
            let relinked = (link.optimised() && link.linked_ptx.is_none()).then(|| {
                let start = Instant::now();
                (relink(&link), start.elapsed().as_secs_f64() * 1e3)
            });
            book().outputs.push(Arc::new(Output { hash, link, relinked }));
        }
        Call::Destroy | Call::Other => {}
    }
}

fn add_input(handle: usize, raw: u32, kind: InputKind, bytes: Vec<u8>) {
    if let Some((_, link)) = book().links.iter_mut().find(|(h, _)| *h == handle) {
        link.inputs.push((kind, bytes));
        link.types.push(raw);
    }
}

/// What an input is, from nvJitLink's `nvJitLinkInputType`; `NVJITLINK_INPUT_ANY` (10) from its
/// name's extension, else its first bytes.
fn input_kind(kind: u32, bytes: &[u8], name: Option<&str>) -> InputKind {
    match kind {
        1 => InputKind::Cubin,
        2 => InputKind::Ptx,
        3 => InputKind::LtoIr,
        4 => InputKind::Fatbin,
        5 => InputKind::Object,
        6 => InputKind::Library,
        7 => InputKind::Index,
        10 => match name.and_then(|n| Path::new(n).extension()).and_then(|e| e.to_str()) {
            Some("ltoir") => InputKind::LtoIr,
            Some("a" | "lib") => InputKind::Library,
            Some("o" | "obj") => InputKind::Object,
            _ if bytes.starts_with(b"!<arch>\n") => InputKind::Library,
            _ => match shared::fatbin::image_kind(bytes) {
                Some(shared::fatbin::ImageKind::Ptx) => InputKind::Ptx,
                Some(shared::fatbin::ImageKind::Fatbin) => InputKind::Fatbin,
                _ => InputKind::Cubin,
            },
        },
        other => InputKind::Other(other),
    }
}

/// The `-arch=` of a link's options.
fn arch_of(options: &[String]) -> Option<String> {
    options.iter().find_map(|o| o.strip_prefix("-arch=")).map(str::to_string)
}

/// PTX handed out with or without its NUL.
fn text_of(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The real entry point `nvJitLink{base}` of the export's version.
fn sibling(base: &str, version: &str) -> usize {
    let name = if version.is_empty() { format!("nvJitLink{base}") } else { format!("__nvJitLink{base}{version}") };
    CString::new(name).map_or(0, |name| REAL.symbol(&name))
}

/// A size nvJitLink gives for `handle` (`GetLinkedCubinSize`, `GetLinkedPtxSize`).
fn size_of(handle: usize, base: &str, version: &str) -> Option<usize> {
    let f = sibling(base, version);
    if f == 0 {
        return None;
    }
    let mut size = 0usize;
    // SAFETY: the real `nvJitLinkGetLinked*Size(handle, size_t *)` of the same version.
    let f: unsafe extern "C" fn(usize, *mut usize) -> NvJitLinkResult = unsafe { std::mem::transmute(f) };
    (unsafe { f(handle, &mut size) } == NVJITLINK_SUCCESS).then_some(size)
}

fn output_of(cubin: &[u8]) -> Option<Arc<Output>> {
    let hash = blake3::hash(cubin);
    book().outputs.iter().find(|o| o.hash == hash).cloned()
}

/// The PTX of the nvJitLink link that handed out `cubin`, and where it came from, for the
/// report; `None` when nvJitLink did not make it.
pub fn ptx_for_cubin(cubin: &[u8], gpu_sm: u32) -> Option<(Option<String>, String)> {
    let output = output_of(cubin)?;
    let link = &output.link;
    let arch = arch_of(&link.options).map(|a| format!(" for {a}")).unwrap_or_default();
    if let Some(ptx) = &link.linked_ptx {
        return Some((Some(ptx.clone()), format!("PTX from nvJitLink (the link's own PTX{arch})")));
    }
    Some(match &output.relinked {
        Some((Ok(ptx), _)) => {
            (Some(ptx.clone()), format!("PTX from nvJitLink (its LTO-IR linked again with -ptx{arch})"))
        }
        Some((Err(e), _)) => (None, format!("none: its nvJitLink link of LTO-IR did not link again for PTX: {e}")),
        None => {
            crate::images::link_ptx(&link.inputs, gpu_sm, "PTX from nvJitLink", &format!("the nvJitLink link{arch}"))
        }
    })
}

/// The PTX of the nvJitLink link that handed out `cubin`, NUL-terminated and kept for the life of
/// the process; NULL when nvJitLink did not make it or it has none. For recap's CPU driver
/// (`images::recap_cubin_ptx`).
pub fn ptx_c(cubin: &[u8]) -> *const c_char {
    match ptx_for_cubin(cubin, 0) {
        Some((Some(text), _)) => crate::images::keep_c(text),
        _ => std::ptr::null(),
    }
}

/// Notes in the report how many links of LTO-IR were made again for their PTX, and what that
/// cost the program.
pub fn notes(report: &mut shared::capture::Report) {
    let b = book();
    let relinked: Vec<f64> = b.outputs.iter().filter_map(|o| o.relinked.as_ref().map(|(_, ms)| *ms)).collect();
    if !relinked.is_empty() {
        let (count, millis) = (relinked.len(), relinked.iter().sum::<f64>());
        report.note(format!(
            "nvJitLink: {count} link(s) of LTO-IR made again with -ptx for their PTX as the program linked them, in \
             {millis:.1} ms"
        ));
    }
}

/// Why an optimised link did not give its PTX when made again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelinkError {
    #[error("the real nvJitLink has no {0}")]
    Missing(String),
    #[error("an option or input name holds a NUL byte")]
    Nul,
    #[error("{call} failed with nvJitLink error {result}{log}")]
    Call { call: &'static str, result: NvJitLinkResult, log: String },
}

/// `link` made again with the real nvJitLink, with `-ptx` added: its PTX.
fn relink(link: &Link) -> Result<String, RelinkError> {
    let entry = |base: &str| match sibling(base, link.version) {
        0 => Err(RelinkError::Missing(format!("nvJitLink{base} of version `{}`", link.version))),
        f => Ok(f),
    };
    let (create, add, complete, size, get, destroy) = (
        entry("Create")?,
        entry("AddData")?,
        entry("Complete")?,
        entry("GetLinkedPtxSize")?,
        entry("GetLinkedPtx")?,
        entry("Destroy")?,
    );
    let mut options: Vec<CString> = link
        .options
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| RelinkError::Nul)?;
    if !link.options.iter().any(|o| o == "-ptx") {
        options.push(c"-ptx".to_owned());
    }
    let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: the real entry points of one version, called as nvJitLink's header declares them,
    // with arguments that live across the calls; the handle is destroyed on every path.
    unsafe {
        let create: unsafe extern "C" fn(*mut usize, u32, *const *const c_char) -> NvJitLinkResult =
            std::mem::transmute(create);
        let add: unsafe extern "C" fn(usize, u32, *const u8, usize, *const c_char) -> NvJitLinkResult =
            std::mem::transmute(add);
        let complete: unsafe extern "C" fn(usize) -> NvJitLinkResult = std::mem::transmute(complete);
        let size: unsafe extern "C" fn(usize, *mut usize) -> NvJitLinkResult = std::mem::transmute(size);
        let get: unsafe extern "C" fn(usize, *mut u8) -> NvJitLinkResult = std::mem::transmute(get);
        let destroy: unsafe extern "C" fn(*mut usize) -> NvJitLinkResult = std::mem::transmute(destroy);
        let mut handle = 0usize;
        let r = create(&mut handle, pointers.len() as u32, pointers.as_ptr());
        if r != NVJITLINK_SUCCESS {
            return Err(RelinkError::Call { call: "nvJitLinkCreate", result: r, log: String::new() });
        }
        let result = (|| {
            let failed = |call, result| RelinkError::Call { call, result, log: error_log(handle, link.version) };
            for (i, ((_, bytes), &kind)) in link.inputs.iter().zip(&link.types).enumerate() {
                let name = CString::new(format!("input-{i}")).map_err(|_| RelinkError::Nul)?;
                let r = add(handle, kind, bytes.as_ptr(), bytes.len(), name.as_ptr());
                if r != NVJITLINK_SUCCESS {
                    return Err(failed("nvJitLinkAddData", r));
                }
            }
            let r = complete(handle);
            if r != NVJITLINK_SUCCESS {
                return Err(failed("nvJitLinkComplete", r));
            }
            let mut len = 0usize;
            let r = size(handle, &mut len);
            if r != NVJITLINK_SUCCESS {
                return Err(failed("nvJitLinkGetLinkedPtxSize", r));
            }
            let mut text = vec![0u8; len.max(1)];
            let r = get(handle, text.as_mut_ptr());
            if r != NVJITLINK_SUCCESS {
                return Err(failed("nvJitLinkGetLinkedPtx", r));
            }
            Ok(text_of(&text))
        })();
        destroy(&mut handle);
        result
    }
}

/// nvJitLink's error log of `handle`, as `: LOG` (empty when there is none), for an error.
fn error_log(handle: usize, version: &str) -> String {
    let (size, get) = (sibling("GetErrorLogSize", version), sibling("GetErrorLog", version));
    if size == 0 || get == 0 {
        return String::new();
    }
    // SAFETY: the real `nvJitLinkGetErrorLogSize(handle, size_t *)` and `nvJitLinkGetErrorLog(handle,
    // char *)` of a live handle, into room for the size it gave.
    unsafe {
        let size: unsafe extern "C" fn(usize, *mut usize) -> NvJitLinkResult = std::mem::transmute(size);
        let get: unsafe extern "C" fn(usize, *mut u8) -> NvJitLinkResult = std::mem::transmute(get);
        let mut len = 0usize;
        if size(handle, &mut len) != NVJITLINK_SUCCESS || len == 0 {
            return String::new();
        }
        let mut text = vec![0u8; len];
        if get(handle, text.as_mut_ptr()) != NVJITLINK_SUCCESS {
            return String::new();
        }
        let text = text_of(&text);
        let text = text.trim();
        if text.is_empty() {
            String::new()
        } else {
            format!(": {text}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_of_any_kind_is_known_by_its_bytes_or_its_name() {
        let ptx = b".version 8.0\n.target sm_90\n";
        assert_eq!(input_kind(2, ptx, None), InputKind::Ptx);
        assert_eq!(input_kind(3, b"\xedCN\x7f", None), InputKind::LtoIr);
        assert_eq!(input_kind(10, ptx, Some("k.ptx")), InputKind::Ptx);
        assert_eq!(input_kind(10, b"\x50\xed\x55\xba\x01\x00\x10\x00", None), InputKind::Fatbin);
        assert_eq!(input_kind(10, b"\xedCN\x7f....", Some("/tmp/k.ltoir")), InputKind::LtoIr);
        assert_eq!(input_kind(10, b"!<arch>\nmembers", Some("libdevice")), InputKind::Library);
        assert_eq!(input_kind(10, b"\x7fELF", Some("k.cubin")), InputKind::Cubin);
        assert_eq!(input_kind(9, b"", None), InputKind::Other(9));
    }

    #[test]
    fn a_links_arch_is_its_arch_option() {
        let options = ["-lineinfo".to_string(), "-arch=sm_90".to_string()];
        assert_eq!(arch_of(&options).as_deref(), Some("sm_90"));
        assert_eq!(arch_of(&options[..1]), None);
    }
}
