//! `recap validate FILE`: open and deep-validate an archive; one line either way.

use std::path::PathBuf;
use std::process::ExitCode;

use recap::mapped::MappedFile;
use shared::archive::Archive;

/// Check an archive's structure, checksums and compressed data
#[derive(clap::Args)]
pub struct Args {
    pub file: PathBuf,
}

pub fn run(args: Args) -> ExitCode {
    let shown = args.file.display();
    let map = match MappedFile::open(&args.file) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{shown}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match Archive::open(&map).and_then(|a| a.validate().map(|()| a)) {
        Ok(a) => {
            let (major, minor) = a.version();
            println!(
                "ok: {shown}: format {major}.{minor}, {} bytes, {} module(s), {} kernel(s), {} region(s), {} op(s)",
                a.len(),
                a.module_count(),
                a.kernel_count(),
                a.region_count(),
                a.op_count()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{shown}: {e}");
            ExitCode::FAILURE
        }
    }
}
