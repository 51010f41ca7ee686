//! `recap import-case DIR [--ptx sm_80|sm_90a|...] -o FILE.recap`

use std::path::PathBuf;

use anyhow::Result;
use recap::import::{import_case, PtxArch};

/// Turn a corpus case folder (case.json, PTX, *.in.bin, *.out.bin) into a .recap archive
#[derive(clap::Args)]
pub struct Args {
    /// The case folder, e.g. tests/corpus/nvcc/saxpy
    pub dir: PathBuf,
    /// Which PTX file of the case to import: any key of its `ptx` map (sm_75, sm_80, sm_90a, sm_100...)
    #[arg(long, default_value = "sm_90")]
    pub ptx: PtxArch,
    /// The archive to write
    #[arg(short, long)]
    pub output: PathBuf,
}

pub fn run(args: Args) -> Result<()> {
    let s = import_case(&args.dir, &args.ptx, &args.output)?;
    println!(
        "{}: case {} ({}), {} kernel(s), {} region(s), {} launch(es), {} bytes",
        args.output.display(),
        s.case,
        s.ptx,
        s.kernels,
        s.regions,
        s.launches,
        s.archive_bytes
    );
    Ok(())
}
