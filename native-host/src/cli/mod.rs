//! The `recap` subcommands, one module each; `main.rs` wires them into clap.

pub mod bench;
pub mod capture;
pub mod compare;
pub mod cuda_probe;
pub mod data;
pub mod diff;
pub mod examples;
pub mod extract;
pub mod import_case;
pub mod import_wrp;
pub mod infer_types;
pub mod inspect;
pub mod limits;
pub mod repeat_range;
pub mod replay;
pub mod run;
pub mod serve;
pub mod session_worker;
pub mod trim;
pub mod validate;
pub mod worker;

/// A fresh folder named `prefix…` where `library` is `libcuda.so.1` and `libcuda.so`: put first
/// on `LD_LIBRARY_PATH` ([`prepend`]), it is the driver a child process loads.
pub(crate) fn libcuda_folder(prefix: &str, library: &std::path::Path) -> anyhow::Result<tempfile::TempDir> {
    use anyhow::Context;
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().context("making a folder for the driver")?;
    for name in ["libcuda.so.1", "libcuda.so"] {
        std::os::unix::fs::symlink(library, dir.path().join(name))
            .with_context(|| format!("linking {} as {name}", library.display()))?;
    }
    Ok(dir)
}

/// `dir` followed by the search path in environment variable `var`.
pub(crate) fn prepend(dir: &std::path::Path, var: &str) -> std::ffi::OsString {
    let mut search = std::ffi::OsString::from(dir);
    if let Some(old) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        search.push(":");
        search.push(old);
    }
    search
}
