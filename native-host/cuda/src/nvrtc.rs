//! CUDA C to PTX with NVRTC, loaded at run time like the driver: without the library the caller
//! gets [`NvrtcError::Missing`], never a panic.

/// Why CUDA C did not become PTX.
#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error("NVRTC (libnvrtc) is not installed")]
    Missing,
    #[error("{0}")]
    Compile(String),
}

/// Compiles `source` (named `name.cu` in messages) to PTX, for `compute_XY` when `arch` is given.
pub fn compile_ptx(name: &str, source: &str, arch: Option<(i32, i32)>) -> Result<String, NvrtcError> {
    let options = arch.map(|(major, minor)| format!("--gpu-architecture=compute_{major}{minor}"));
    compile_ptx_with(name, source, options.into_iter().collect())
}

/// Compiles `source` (named `name.cu` in messages) to PTX with NVRTC's command-line `options`
/// (`--gpu-architecture=compute_90`, `--include-path=DIR`, ...).
pub fn compile_ptx_with(name: &str, source: &str, options: Vec<String>) -> Result<String, NvrtcError> {
    // SAFETY: only tries to open the library; cudarc panics on first use without it.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(NvrtcError::Missing);
    }
    let opts = cudarc::nvrtc::CompileOptions { name: Some(format!("{name}.cu")), options, ..Default::default() };
    match cudarc::nvrtc::compile_ptx_with_opts(source, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(cudarc::nvrtc::CompileError::CompileError { log, .. }) => {
            Err(NvrtcError::Compile(log.to_string_lossy().trim().to_owned()))
        }
        Err(e) => Err(NvrtcError::Compile(format!("{e:?}"))),
    }
}
