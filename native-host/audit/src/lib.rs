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
//! NVRTC (`libnvrtc*.so.*`, which CuPy opens by absolute path) and nvJitLink (`libnvJitLink*.so*`,
//! which numba-cuda opens through cuda-pathfinder, and cuSPARSE links) are sent to the interposer
//! the same way, once the linker's search has found the file: that file is linked at
//! `RECAP_REAL_LIBNVRTC` or `RECAP_REAL_LIBNVJITLINK` for the interposer to forward to (its
//! `nvrtc.rs`, `nvjitlink.rs`).
//!
//! `LD_AUDIT` passes to the program's children, so this library is also loaded into every `ptxas`
//! the program runs (XLA and Triton compile PTX that way): there it keeps the input PTX by the
//! hash of the cubin `ptxas` wrote, for the interposer to find when the cubin is loaded
//! (`ptxas.rs`).
//!
//! Environment (set by `recap capture`): `RECAP_INTERPOSER`, the interposer's path (nothing is
//! redirected without it); `RECAP_REAL_LIBCUDA`, the real driver's path; `RECAP_REAL_LIBNVRTC` and
//! `RECAP_REAL_LIBNVJITLINK`, where to link the NVRTC and nvJitLink the program opens;
//! `RECAP_PTXAS_DIR`, where `ptxas` runs keep their PTX.

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

/// A library the interposer stands in for besides the driver: its file name's start, a start
/// that is not it, and the variable that says where to link the file the program asked for.
struct StandIn {
    prefix: &'static [u8],
    not: Option<&'static [u8]>,
    var: &'static str,
}

/// NVRTC (`libnvrtc.so.13`, or a copy a wheel renamed, `libnvrtc-1a2b3c4d.so.12`, but not the
/// `libnvrtc-builtins` that NVRTC itself loads) and nvJitLink (`libnvJitLink.so.13`).
const STAND_INS: [StandIn; 2] = [
    StandIn { prefix: b"libnvrtc", not: Some(b"libnvrtc-builtins"), var: "RECAP_REAL_LIBNVRTC" },
    StandIn { prefix: b"libnvJitLink", not: None, var: "RECAP_REAL_LIBNVJITLINK" },
];

/// The library the interposer stands in for that `name` is, if any.
fn stand_in(name: &Path) -> Option<&'static StandIn> {
    let file = name.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default();
    let shared_object = file.ends_with(b".so") || file.windows(4).any(|w| w == b".so.");
    STAND_INS
        .iter()
        .find(|s| shared_object && file.starts_with(s.prefix) && !s.not.is_some_and(|not| file.starts_with(not)))
}

/// Links `file` (the library the program asked for) at `link`, where the interposer looks for
/// it, unless an earlier load linked it already: the first file is the one forwarded to, and
/// another file of the same library (a second version in one process) is left to load as itself,
/// since its calls cannot be forwarded to the first.
fn link_real(file: &Path, link: &Path, interposer: &Path) -> bool {
    let Ok(real) = std::fs::canonicalize(file) else { return false };
    if real == interposer {
        return false;
    }
    std::os::unix::fs::symlink(&real, link).is_ok() || std::fs::canonicalize(link).is_ok_and(|linked| linked == real)
}

/// A name about to be looked up: a driver's becomes the interposer's path, and so do NVRTC's and
/// nvJitLink's once the file it names is found (the name as asked when it is a path, else the
/// candidate paths the linker tries), that file linked for the interposer to forward to.
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
    if let Some(library) = stand_in(&asked) {
        let link = env(library.var);
        if asked.components().count() > 1
            && asked.is_file()
            && link.is_some_and(|link| link_real(&asked, &link, &paths.interposer_file))
        {
            return paths.interposer.as_ptr();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_and_nvjitlink_are_known_by_their_file_names_and_nothing_else() {
        let var = |name: &str| stand_in(Path::new(name)).map(|s| s.var);
        assert_eq!(var("/usr/local/cuda/lib64/libnvrtc.so.13"), Some("RECAP_REAL_LIBNVRTC"));
        assert_eq!(var("libnvrtc-1a2b3c4d.so.12"), Some("RECAP_REAL_LIBNVRTC"));
        assert_eq!(var("/site-packages/nvidia/cu13/lib/libnvJitLink.so.13"), Some("RECAP_REAL_LIBNVJITLINK"));
        assert_eq!(var("libnvJitLink.so"), Some("RECAP_REAL_LIBNVJITLINK"));
        for other in ["libnvrtc-builtins.so.13.0", "libnvJitLink.h", "libnvJitLink_static.a", "libcudart.so.13"] {
            assert_eq!(var(other), None, "{other}");
        }
    }

    #[test]
    fn the_first_file_of_a_library_is_linked_and_a_second_one_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("recap-audit-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (first, second, interposer) = (dir.join("a.so.13"), dir.join("b.so.12"), dir.join("librecap.so"));
        for f in [&first, &second, &interposer] {
            std::fs::write(f, b"\x7fELF").unwrap();
        }
        let link = dir.join("real-nvjitlink.so");
        assert!(link_real(&first, &link, &interposer));
        // Asked again (the same file by another path, as a later search finds it): still it.
        assert!(link_real(&dir.join("./a.so.13"), &link, &interposer));
        assert!(!link_real(&second, &link, &interposer));
        assert_eq!(std::fs::canonicalize(&link).unwrap(), std::fs::canonicalize(&first).unwrap());
        // The interposer itself is never the real library.
        assert!(!link_real(&interposer, &dir.join("other-link.so"), &interposer));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
