//! `recap import-wrp FILE.wrp [-o OUT.recap] [--ptx-from DIR] [--expected NAME=FILE.npy]...`

use std::path::PathBuf;

use anyhow::Result;
use recap::import_wrp::{import_wrp, WrpOptions};

use super::data::InputArg;

/// Turn an NVIDIA Warp capture (wp.capture_save: FILE.wrp and FILE_modules/) into a .recap archive
#[derive(clap::Args)]
pub struct Args {
    /// The .wrp file
    pub file: PathBuf,
    /// The archive to write (default: FILE with the extension .recap)
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// The capture's modules folder (default: FILE_modules beside it)
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
    /// PTX of modules the capture did not package as PTX (a CPU capture never does): the folder
    /// wp.compile_aot_module(module, arch=90, module_dir=DIR, use_ptx=True) wrote
    #[arg(long, value_name = "DIR")]
    pub ptx_from: Option<PathBuf>,
    /// Warp's headers (the warp/native folder of the release that made the capture), for compiling
    /// the CUDA source a capture saved with source_fallback=True packaged where it has no PTX
    /// (NVRTC, libnvrtc.so, must be installed)
    #[arg(long, value_name = "DIR")]
    pub warp_include: Option<PathBuf>,
    /// What binding NAME holds after one replay, as .npy (Warp's own replay's output): the archive
    /// checks itself against it, and the region takes the file's dtype and shape (repeatable)
    #[arg(long, value_name = "NAME=FILE")]
    pub expected: Vec<InputArg>,
    /// Relative tolerance of floating-point expected states
    #[arg(long, default_value_t = 1e-5)]
    pub rtol: f64,
    /// Absolute tolerance of floating-point expected states
    #[arg(long, default_value_t = 1e-6)]
    pub atol: f64,
    /// What a replay of the archive may allocate: a capture over these is refused at import
    #[command(flatten)]
    pub limits: super::limits::LimitArgs,
}

pub fn run(args: Args) -> Result<()> {
    let output = args.output.clone().unwrap_or_else(|| args.file.with_extension("recap"));
    let options = WrpOptions {
        modules: args.modules,
        ptx_from: args.ptx_from,
        warp_include: args.warp_include,
        expected: args.expected.into_iter().map(|e| (e.name, e.file)).collect(),
        rtol: args.rtol,
        atol: args.atol,
        limits: args.limits.limits(),
    };
    let s = import_wrp(&args.file, &options, &output)?;
    println!(
        "{}: {}; {} region(s), {} launch(es), {} op(s), {} expected state(s), {} bytes",
        output.display(),
        s.producer,
        s.regions,
        s.launches,
        s.ops,
        s.expected,
        s.archive_bytes
    );
    for (module, source) in &s.modules {
        println!("  module {module}: PTX {source}");
    }
    if s.empty_launches > 0 {
        println!("  {} launch(es) of zero threads left out (Warp skips them too)", s.empty_launches);
    }
    Ok(())
}
