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
    // SAFETY: only tries to open the library; cudarc panics on first use without it.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(NvrtcError::Missing);
    }
    let mut opts = cudarc::nvrtc::CompileOptions { name: Some(format!("{name}.cu")), ..Default::default() };
    if let Some((major, minor)) = arch {
        opts.options.push(format!("--gpu-architecture=compute_{major}{minor}"));
    }
    match cudarc::nvrtc::compile_ptx_with_opts(source, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(cudarc::nvrtc::CompileError::CompileError { log, .. }) => {
            Err(NvrtcError::Compile(log.to_string_lossy().trim().to_owned()))
        }
        Err(e) => Err(NvrtcError::Compile(format!("{e:?}"))),
    }
}
