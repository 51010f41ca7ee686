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

/// One example archive: its file name, what it shows, and how it is built.
struct Example {
    file: &'static str,
    shows: &'static str,
    build: fn() -> Vec<u8>,
}

fn examples() -> Vec<Example> {
    vec![
        Example {
            file: "heat-step.recap",
            shows: "25 steps of a 2-D heat simulation: 3 kernels and a copy each, a 96 x 64 field",
            build: || recap_bench::heat_archive(25),
        },
        Example {
            file: "halo-two-devices.recap",
            shows: "a 256 x 128 heat field split over two devices, halo rows exchanged by peer copies",
            build: || recap_bench::halo_archive(256, 128, 10, 2, true),
        },
        Example {
            file: "pipeline-300.recap",
            shows: "300 dependent launches on one buffer: a chain",
            build: || recap_bench::chain_archive(300),
        },
        Example {
            file: "dag-8-chains.recap",
            shows: "8 independent chains of 40 launches: a DAG whose chains run side by side",
            build: || recap_bench::chains_archive(8, 40, 0),
        },
        Example {
            file: "while-countdown.recap",
            shows: "a device-side while loop that runs its body 64 times",
            build: || recap_bench::countdown_archive(64),
        },
    ]
}

pub fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir).with_context(|| format!("creating {}", args.dir.display()))?;
    for example in examples() {
        let path = args.dir.join(example.file);
        let bytes = (example.build)();
        std::fs::write(&path, &bytes).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {} ({} bytes): {}", path.display(), bytes.len(), example.shows);
    }
    Ok(())
}
