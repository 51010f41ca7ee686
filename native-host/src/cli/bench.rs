//! `recap bench cuda`: measures recap's CUDA replay beside the figures `bench/graph_floor.cu`
//! gives for CUDA itself (chain per node, replay call cost, load, WHILE, concurrent chains).

use std::path::PathBuf;

use anyhow::{bail, Context};

/// Measure replay performance
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Clone, Debug, clap::Subcommand)]
pub enum What {
    /// CUDA graph replay: per node, per call, load, WHILE, independent chains, parameter updates
    Cuda {
        /// cuda or cuda:N.
        #[arg(long, default_value = "cuda")]
        device: String,
        /// Timed repetitions per figure (medians are reported).
        #[arg(long, default_value_t = 50)]
        reps: usize,
        /// Also write the figures as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// PTX file with a `(float* x, int n)` kernel (e.g. `nvcc -ptx` of the floor benchmark) to
        /// time a 1000-node chain of too.
        #[arg(long, requires = "kernel")]
        ptx: Option<PathBuf>,
        /// Entry name of that kernel (e.g. `_Z3incPfi`).
        #[arg(long)]
        kernel: Option<String>,
        /// `nvcc -cubin` of the same kernel for this GPU, to time the chain with it too.
        #[arg(long, requires = "ptx")]
        cubin: Option<PathBuf>,
        /// Run only these parts, comma-separated (a part alone in a fresh process shows what a
        /// one-archive replay sees).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<recap_bench::Section>,
    },
}

/// Where a machine without a GPU is sent: scripts of this repository, not options of this command.
const CPU_BENCHMARKS: &str = "the CPU replay's benchmarks are bench/cpu/dispatch.sh and bench/native/run.sh \
                              (BENCHMARKS.md), and `recap replay FILE --device cpu --iterations N` times one archive";

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::Cuda { device, reps, json, ptx, kernel, cubin, only } => {
            let Some(ordinal) = device.parse::<recap::device::DeviceSpec>().ok().and_then(|d| d.gpu()) else {
                if device == "cpu" {
                    bail!("`recap bench cuda` measures a GPU, not the CPU: {CPU_BENCHMARKS}");
                }
                bail!("unknown device {device:?}: expected cuda or cuda:N");
            };
            let dev = match recap::cuda::Device::open(ordinal as usize) {
                Err(recap::cuda::OpenError::NoDriver) => bail!(
                    "no CUDA driver found (libcuda.so could not be loaded): `recap bench cuda` measures a GPU; {CPU_BENCHMARKS}"
                ),
                other => other?,
            };
            let text = match &ptx {
                Some(p) => Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?),
                None => None,
            };
            let cubin = match &cubin {
                Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
                None => None,
            };
            let outside = text.as_deref().zip(kernel.as_deref()).map(|(ptx, entry)| recap_bench::OutsideKernel {
                ptx,
                entry,
                cubin: cubin.as_deref().map(|c| (dev.sm, c)),
            });
            let figures = recap_bench::run(&dev, reps, outside, &only).context("CUDA benchmark")?;
            if let Some(path) = json {
                let rows: Vec<serde_json::Value> = figures
                    .iter()
                    .map(|f| serde_json::json!({ "name": f.name, "value": f.value, "unit": f.unit }))
                    .collect();
                let doc = serde_json::json!({ "device": dev.name, "sm": dev.sm, "driver": dev.driver.version_string(), "figures": rows });
                std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Ok(())
        }
    }
}
