//! recap capture's audit library (`LD_AUDIT`, the dynamic linker's rtld-audit interface): a
//! program that `dlopen`s the CUDA driver by absolute path (`/usr/lib/x86_64-linux-gnu/libcuda.so.1`)
//! bypasses `LD_LIBRARY_PATH`, and so the interposer; the linker asks this library about every
//! name it is about to look up (`la_objsearch`, before it checks for a slash), and a driver's name
//! is answered with the interposer's path.
//!
//! A name is the driver's when its file name starts with `libcuda.so` or it is the very file
//! `recap capture` forwards to (`RECAP_REAL_LIBCUDA`: the CPU driver in the tests, a driver under
//! another name). Two loaders must still reach the real driver: the interposer itself, which opens
//! it by path, and the real driver, should it open itself again. `la_objopen` tags both objects'
//! cookies, and a search they start is left alone.
//!
//! Why a library of its own rather than the interposer: an audit library is loaded into a
//! namespace of its own before the program, and the interposer's start-up opens the real driver,
//! which would then be loaded a second time, there. This one has no start-up work and depends on
//! libc (and a hash) alone.
//!
//! NVRTC (`libnvrtc*.so.*`, which CuPy opens by absolute path) is sent to the interposer the same
//! way, once the linker's search has found the file: that file is linked at `RECAP_REAL_LIBNVRTC`
//! for the interposer to forward to (its `nvrtc.rs`).
//!
//! `LD_AUDIT` passes to the program's children, so this library is also loaded into every `ptxas`
//! the program runs (XLA and Triton compile PTX that way): there it keeps the input PTX by the
//! hash of the cubin `ptxas` wrote, for the interposer to find when the cubin is loaded
//! (`ptxas.rs`).
//!
//! Environment (set by `recap capture`): `RECAP_INTERPOSER`, the interposer's path (nothing is
//! redirected without it); `RECAP_REAL_LIBCUDA`, the real driver's path; `RECAP_REAL_LIBNVRTC`,
//! where to link the NVRTC the program opens; `RECAP_PTXAS_DIR`, where `ptxas` runs keep their PTX.

use std::ffi::{c_char, c_uint, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod ptxas;

/// `la_objsearch`'s flag for the name as the program gave it.
const LA_SER_ORIG: c_uint = 0x01;
/// What `la_objopen` writes into the cookie of an object whose loads are left alone.
const EXEMPT: usize = 0x7265_6361_7000_0001;

/// The interposer's path, and the real driver's file (resolved), once.
struct Paths {
    interposer: CString,
    interposer_file: PathBuf,
    real_file: Option<PathBuf>,
}

fn paths() -> Option<&'static Paths> {
    static PATHS: OnceLock<Option<Paths>> = OnceLock::new();
    PATHS
        .get_or_init(|| {
            let interposer = env("RECAP_INTERPOSER")?;
            let interposer_file = std::fs::canonicalize(&interposer).ok()?;
            let real_file = env("RECAP_REAL_LIBCUDA").and_then(|p| std::fs::canonicalize(p).ok());
            let interposer = CString::new(interposer_file.as_os_str().as_encoded_bytes()).ok()?;
            Some(Paths { interposer, interposer_file, real_file })
        })
        .as_ref()
}

/// An environment variable through libc (the loader's environment, read before `main`).
fn env(name: &str) -> Option<PathBuf> {
    let name = CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name; the value is copied out at once.
    let value = unsafe { libc::getenv(name.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: getenv returns a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(value) }.to_bytes();
    (!bytes.is_empty()).then(|| PathBuf::from(String::from_utf8_lossy(bytes).into_owned()))
}

/// Whether a name the program asked for is the CUDA driver's.
fn is_driver(name: &Path, paths: &Paths) -> bool {
    let file_name = name.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default();
    if file_name.starts_with(b"libcuda.so") {
        return true;
    }
    // Only a path can be the real driver's file; a bare name is searched for, and is not.
    name.components().count() > 1
        && paths.real_file.as_deref().is_some_and(|real| std::fs::canonicalize(name).is_ok_and(|f| f == real))
}

/// The audit interface version: the linker's own, which this library asks nothing new of.
#[no_mangle]
pub extern "C" fn la_version(version: c_uint) -> c_uint {
    version
}

/// An object was loaded: the interposer's and the real driver's loads are exempt.
///
/// # Safety
/// The dynamic linker's arguments: `map` a live `link_map`, `cookie` its audit cookie.
#[no_mangle]
pub unsafe extern "C" fn la_objopen(map: *mut libc::c_void, _lmid: libc::c_long, cookie: *mut usize) -> c_uint {
    let Some(paths) = paths() else { return 0 };
    if map.is_null() || cookie.is_null() {
        return 0;
    }
    // `struct link_map` begins with `l_addr`, then `l_name`.
    // SAFETY: `map` is the live `link_map` the dynamic linker passes; its second word is `l_name`.
    let name = unsafe { *(map as *const *const c_char).add(1) };
    if name.is_null() {
        return 0;
    }
    // SAFETY: `l_name` is a NUL-terminated string owned by the dynamic linker for the object's life.
    let name = unsafe { CStr::from_ptr(name) };
    let Ok(file) = std::fs::canonicalize(String::from_utf8_lossy(name.to_bytes()).as_ref()) else {
        return 0;
    };
    if file == paths.interposer_file || paths.real_file.as_ref() == Some(&file) {
        // SAFETY: checked non-NULL; the dynamic linker's cookie for this object, ours to set.
        unsafe { *cookie = EXEMPT };
    }
    0
}

/// Whether a name is NVRTC's: `libnvrtc.so.13`, or a copy a wheel renamed
/// (`libnvrtc-1a2b3c4d.so.12`), but not the `libnvrtc-builtins` that NVRTC itself loads.
fn is_nvrtc(name: &Path) -> bool {
    let file = name.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default();
    let shared_object = file.ends_with(b".so") || file.windows(4).any(|w| w == b".so.");
    file.starts_with(b"libnvrtc") && shared_object && !file.starts_with(b"libnvrtc-builtins")
}

/// Links `file` (the NVRTC the program asked for) where the interposer looks for it
/// (`RECAP_REAL_LIBNVRTC`), unless an earlier load already did: the first NVRTC is the one
/// forwarded to.
fn link_nvrtc(file: &Path) -> bool {
    let Some(link) = env("RECAP_REAL_LIBNVRTC") else { return false };
    let Ok(real) = std::fs::canonicalize(file) else { return false };
    if real == paths().map(|p| p.interposer_file.clone()).unwrap_or_default() {
        return false;
    }
    std::os::unix::fs::symlink(&real, &link).is_ok() || link.exists()
}

/// A name about to be looked up: a driver's becomes the interposer's path, and so does NVRTC's
/// once the file it names is found (the name as asked when it is a path, else the candidate
/// paths the linker tries), that file linked for the interposer to forward to.
///
/// # Safety
/// The dynamic linker's arguments: `name` a NUL-terminated name, `cookie` the searching object's
/// cookie (or NULL).
#[no_mangle]
pub unsafe extern "C" fn la_objsearch(name: *const c_char, cookie: *mut usize, flag: c_uint) -> *const c_char {
    // SAFETY: a non-NULL cookie is the searching object's, which the dynamic linker keeps alive.
    if name.is_null() || (!cookie.is_null() && unsafe { *cookie } == EXEMPT) {
        return name;
    }
    let Some(paths) = paths() else { return name };
    // SAFETY: checked non-NULL; the dynamic linker passes a NUL-terminated name.
    let name_text = unsafe { CStr::from_ptr(name) };
    let asked = PathBuf::from(String::from_utf8_lossy(name_text.to_bytes()).into_owned());
    if is_nvrtc(&asked) && asked.components().count() > 1 && asked.is_file() && link_nvrtc(&asked) {
        return paths.interposer.as_ptr();
    }
    if flag != LA_SER_ORIG {
        return name;
    }
    if is_driver(&asked, paths) {
        paths.interposer.as_ptr()
    } else {
        name
    }
}
