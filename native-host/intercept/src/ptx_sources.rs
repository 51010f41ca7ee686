//! PTX for a module the program loaded as a bare cubin, found where its producer left it.
//!
//! Triton compiles a kernel to PTX, then to a cubin, and keeps both side by side in its cache
//! (`NAME.ptx` beside `NAME.cubin`, with `NAME.json` and the rest); it loads the cubin. The cubin
//! the driver receives is byte for byte the file in the cache, so a `.cubin` file of the same bytes
//! names the folder, and the `.ptx` beside it is the module's PTX. Which folders, and how deep:
//! - `TRITON_CACHE_DIR/<hash>/` (Triton's own cache, wherever the process points it);
//! - `TORCHINDUCTOR_CACHE_DIR/triton/<device>/<hash>/`, and inductor's default
//!   `$TMPDIR/torchinductor_$USER/triton/<device>/<hash>/` (torch.compile's kernels, which inductor
//!   compiles into its own cache folders rather than Triton's);
//! - `TRITON_HOME/.triton/cache/<hash>/`, by default `~/.triton/cache/<hash>/`.
//!
//! Every variable is read when the image is looked at (the first launch in the range), through
//! `getenv` on the live environment: a Python program that sets `os.environ["TRITON_CACHE_DIR"]`
//! after start-up is seen. The walk is bounded ([`MAX_DEPTH`] folders below a root, and only files
//! of the cubin's exact length are read), so a large cache costs directory listings, not reads.

use std::path::{Path, PathBuf};

/// Folders below a cache root that the walk enters: inductor's `<device>/<hash>/` is two.
const MAX_DEPTH: usize = 3;

/// The PTX its producer keeps beside a byte-identical copy of `cubin`, and that file's path.
pub fn producer_ptx(cubin: &[u8]) -> Option<(String, PathBuf)> {
    cache_roots().iter().find_map(|root| find_beside(root, cubin, MAX_DEPTH))
}

/// The folders Triton and inductor cache compiled kernels in, for this process as it is now.
pub fn cache_roots() -> Vec<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let mut roots = Vec::new();
    if let Some(d) = var("TRITON_CACHE_DIR") {
        roots.push(d);
    }
    if let Some(d) = var("TORCHINDUCTOR_CACHE_DIR") {
        roots.push(d.join("triton"));
    }
    // Inductor's default: Python's `tempfile.gettempdir()` and `getpass.getuser()`.
    if let Some(user) = user_name() {
        let tmp = var("TMPDIR").unwrap_or_else(|| PathBuf::from("/tmp"));
        roots.push(tmp.join(format!("torchinductor_{user}")).join("triton"));
    }
    if let Some(home) = var("TRITON_HOME").or_else(|| var("HOME")) {
        roots.push(home.join(".triton/cache"));
    }
    roots.dedup();
    roots
}

/// The user name as `getpass.getuser()` finds it: the login variables, then the password database.
fn user_name() -> Option<String> {
    for name in ["LOGNAME", "USER", "LNAME", "USERNAME"] {
        if let Some(v) = std::env::var_os(name).filter(|v| !v.is_empty()) {
            return Some(v.to_string_lossy().into_owned());
        }
    }
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: a zeroed passwd and a buffer of the length passed; getpwuid_r writes only into them
    // and sets `result` to `pw` or NULL.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        if libc::getpwuid_r(libc::getuid(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut result) != 0
            || result.is_null()
            || pw.pw_name.is_null()
        {
            return None;
        }
        Some(std::ffi::CStr::from_ptr(pw.pw_name).to_string_lossy().into_owned())
    }
}

/// A `.cubin` of exactly `cubin`'s bytes at most `depth` folders below `dir`, with its `.ptx`.
fn find_beside(dir: &Path, cubin: &[u8], depth: usize) -> Option<(String, PathBuf)> {
    let mut folders = Vec::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        let path = entry.path();
        if kind.is_dir() {
            folders.push(path);
            continue;
        }
        if !kind.is_file() || path.extension().is_none_or(|e| e != "cubin") {
            continue;
        }
        if entry.metadata().map(|m| m.len()).ok() != Some(cubin.len() as u64) {
            continue;
        }
        if std::fs::read(&path).ok().as_deref() != Some(cubin) {
            continue;
        }
        let ptx = path.with_extension("ptx");
        if let Ok(text) = std::fs::read_to_string(&ptx) {
            return Some((text, ptx));
        }
    }
    if depth == 0 {
        return None;
    }
    folders.into_iter().find_map(|f| find_beside(&f, cubin, depth - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cubin_is_matched_by_its_bytes_at_inductors_depth_and_not_below() {
        let root = tempfile_dir("depth");
        let cubin = b"\x7fELF a cubin's bytes".to_vec();
        let deep = root.join("0/abcdef");
        std::fs::create_dir_all(&deep).unwrap();
        // Same length, other bytes: not it.
        std::fs::write(deep.join("other.cubin"), b"\x7fELF a cubin's BYTES").unwrap();
        std::fs::write(deep.join("other.ptx"), "// other").unwrap();
        assert_eq!(find_beside(&root, &cubin, MAX_DEPTH), None);
        std::fs::write(deep.join("k.cubin"), &cubin).unwrap();
        std::fs::write(deep.join("k.ptx"), "// k").unwrap();
        assert_eq!(find_beside(&root, &cubin, MAX_DEPTH), Some(("// k".to_string(), deep.join("k.ptx"))));
        // One folder short of reaching it.
        assert_eq!(find_beside(&root, &cubin, 1), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    fn tempfile_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("recap-ptx-sources-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
