//! `recap cuda-probe FILE`: replays an archive on a GPU op by op, waiting after each, and prints
//! as JSON which op faulted (`{"op": null}` when none did). Run by recap itself in a child
//! process to name the op behind a fault that left the parent's CUDA context unusable.

use std::path::PathBuf;

use anyhow::{bail, Context};
use recap::mapped::MappedFile;
use shared::archive::Archive;

/// Find the op that faults on a GPU (used by recap itself)
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    pub file: PathBuf,
    /// cuda or cuda:N.
    #[arg(long, default_value = "cuda")]
    pub device: String,
    /// Replays to run before giving up.
    #[arg(long, default_value_t = 1)]
    pub iterations: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Some(ordinal) = args.device.parse::<recap::device::DeviceSpec>().ok().and_then(|d| d.gpu()) else {
        bail!("unknown device {:?}: expected cuda or cuda:N", args.device);
    };
    let map = MappedFile::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let archive = Archive::open(&map).with_context(|| format!("reading {}", args.file.display()))?;
    let device = recap::cuda::Device::open(ordinal as usize)?;
    let found = recap::cuda::replay::probe_ops(&device, &archive, args.iterations)?;
    let doc = match found {
        Some((op, label, error)) => serde_json::json!({ "op": op, "label": label, "error": error }),
        None => serde_json::json!({ "op": null }),
    };
    println!("{doc}");
    Ok(())
}
