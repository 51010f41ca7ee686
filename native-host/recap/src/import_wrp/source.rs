//! PTX from the CUDA source Warp packaged with a capture (`wp.capture_save(..., source_fallback=True)`,
//! Warp 1.19): where a module's binary is a cubin (machine code for one GPU, which the CPU cannot
//! run and another GPU cannot load), its generated `.cu` is compiled again with NVRTC, loaded at run
//! time as the CUDA backend loads it, with the options Warp compiled it with (the capture's compile
//! recipe, Warp 1.19's `wp_cuda_compile_program`), for `compute_XX` of the capture's architecture,
//! against Warp's own headers (`--warp-include`: the `warp/native` folder of the release that made
//! the capture). Without NVRTC or the headers the import says which is missing.

use std::path::Path;

use shared::wrp::{CompileRecipe, WrpModule};

/// NVRTC's options for a module's source, as Warp 1.19 passes them (PTX for `compute_{arch}`; the
/// `--Ofast-compile` levels are left out: NVRTC before 12.9 refuses them, and they trade compile
/// time for code quality, never results).
pub(super) fn options(recipe: &CompileRecipe, arch: u32, include: &Path) -> Vec<String> {
    let mut o = vec![format!("--gpu-architecture=compute_{arch}"), "--std=c++17".to_string()];
    if recipe.debug {
        o.extend(["--define-macro=_DEBUG", "--generate-line-info", "--device-debug"].map(String::from));
    } else {
        o.push("--define-macro=NDEBUG".into());
        if recipe.lineinfo {
            o.push("--generate-line-info".into());
        }
    }
    o.push(if recipe.verify_fp { "--define-macro=WP_VERIFY_FP" } else { "--undefine-macro=WP_VERIFY_FP" }.into());
    o.push("--define-macro=WP_ENABLE_MATHDX=0".into());
    if recipe.fast_math {
        o.push("--use_fast_math".into());
    }
    o.push(if recipe.fuse_fp { "--fmad=true" } else { "--fmad=false" }.into());
    o.extend(
        [
            "--device-as-default-execution-space",
            "--extra-device-vectorization",
            "--restrict",
            "--diag-suppress=177,550",
        ]
        .map(String::from),
    );
    o.push(format!("--include-path={}", include.display()));
    o
}

/// The PTX of `module` compiled from its packaged source in `modules_dir`, or why not (one line).
pub(super) fn compile(
    module: &WrpModule,
    arch: u32,
    modules_dir: &Path,
    include: Option<&Path>,
) -> Result<String, String> {
    let file = &module.source_filename;
    if file.contains(['/', '\\']) || file.starts_with('.') || !file.ends_with(".cu") {
        return Err(format!("the capture names its CUDA source {file:?}, which is not a plain .cu file name"));
    }
    let path = modules_dir.join(file);
    let source = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let Some(include) = include else {
        return Err(format!(
            "the capture packaged {} (machine code) and its CUDA source {file}, no PTX: compiling the source \
             needs Warp's headers: give --warp-include DIR, the warp/native folder of the Warp release that made \
             the capture",
            module.binary_filename
        ));
    };
    if !include.join("builtin.h").is_file() {
        return Err(format!(
            "--warp-include {}: no builtin.h there (give Warp's warp/native folder)",
            include.display()
        ));
    }
    let stem = file.trim_end_matches(".cu");
    recap_cuda::nvrtc::compile_ptx_with(stem, &source, options(&module.recipe, arch, include)).map_err(|e| match e {
        recap_cuda::nvrtc::NvrtcError::Missing => format!(
            "the capture packaged {} (machine code) and its CUDA source {file}, no PTX: compiling the source \
             needs NVRTC (libnvrtc.so, from a CUDA toolkit or pip's nvidia-cuda-nvrtc), which is not installed",
            module.binary_filename
        ),
        recap_cuda::nvrtc::NvrtcError::Compile(log) => {
            format!("NVRTC did not compile {file}: {}", log.lines().take(3).collect::<Vec<_>>().join(" / "))
        }
    })
}
