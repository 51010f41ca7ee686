//! `recap examples DIR`: writes a set of archives that show what recap does with real work: a
//! stencil step of several kernels and copies, a pipeline of hundreds of dependent ops, a DAG of
//! independent chains, a device-side loop and a two-device halo exchange, with 2-D fields that
//! draw as heatmaps. `cargo xtask demo` serves them beside the corpus cases.

use std::path::PathBuf;

use anyhow::Context;

/// Write example archives into a folder
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// The folder (made if missing).
    pub dir: PathBuf,
}

/// The examples: file name, what it shows, and how it is built.
fn examples() -> Vec<(&'static str, &'static str, fn() -> Vec<u8>)> {
    vec![
        ("heat-step.recap", "25 steps of a 2-D heat simulation: 3 kernels and a copy each, a 96 x 64 field", || {
            recap_bench::heat_archive(25)
        }),
        (
            "halo-two-devices.recap",
            "a 256 x 128 heat field split over two devices, halo rows exchanged by peer copies",
            || recap_bench::halo_archive(256, 128, 10, 2, true),
        ),
        ("pipeline-300.recap", "300 dependent launches on one buffer: a chain", || recap_bench::chain_archive(300)),
        ("dag-8-chains.recap", "8 independent chains of 40 launches: a DAG whose chains run side by side", || {
            recap_bench::chains_archive(8, 40, 0)
        }),
        ("while-countdown.recap", "a device-side while loop that runs its body 64 times", || {
            recap_bench::countdown_archive(64)
        }),
    ]
}

pub fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir).with_context(|| format!("creating {}", args.dir.display()))?;
    for (file, what, build) in examples() {
        let path = args.dir.join(file);
        let bytes = build();
        std::fs::write(&path, &bytes).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {} ({} bytes): {what}", path.display(), bytes.len());
    }
    Ok(())
}
