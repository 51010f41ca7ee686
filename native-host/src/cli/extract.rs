//! `recap extract FILE --ptx [NAME] | --region NAME | --expected NAME [-o OUT]`: one thing out of an
//! archive, as a file of its own: a module's PTX text, or a region's initial or expected bytes
//! (`.npy` with the region's dtype and shape when OUT ends in `.npy`, raw bytes otherwise).

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use recap::mapped::MappedFile;
use shared::archive::Archive;

use super::data;

/// Write a module's PTX or a region's initial or expected data to a file
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["ptx", "region", "expected"])))]
pub struct Args {
    pub file: PathBuf,
    /// PTX of the module with this name, or of the module holding the kernel with this name (the
    /// only module when none is named)
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "NAME")]
    pub ptx: Option<String>,
    /// Initial data of this binding or region
    #[arg(long, value_name = "NAME")]
    pub region: Option<String>,
    /// Expected final data of this binding or region
    #[arg(long, value_name = "NAME")]
    pub expected: Option<String>,
    /// Where to write (`.npy` for data with its dtype and shape); PTX goes to stdout without it
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let map = MappedFile::open(&args.file).with_context(|| format!("{}", args.file.display()))?;
    let archive = Archive::open(&map).with_context(|| format!("{}", args.file.display()))?;
    archive.verify_blobs().with_context(|| format!("{}", args.file.display()))?;
    if let Some(name) = &args.ptx {
        let text = ptx_of(&archive, name)?;
        return match &args.output {
            Some(out) => std::fs::write(out, text).with_context(|| format!("writing {}", out.display())),
            None => Ok(std::io::stdout().lock().write_all(text.as_bytes())?),
        };
    }
    let (name, expected) = match (&args.region, &args.expected) {
        (Some(n), _) => (n, false),
        (_, Some(n)) => (n, true),
        _ => unreachable!("clap requires one of --ptx, --region, --expected"),
    };
    let Some(out) = &args.output else {
        bail!("region data needs -o FILE (.npy keeps its dtype and shape; any other name gets raw bytes)");
    };
    let region = archive.region(data::region_named(&archive, name)?);
    let (blob, what) = if expected { (region.expected, "an expected state") } else { (region.initial, "initial data") };
    let bytes = match blob {
        Some(b) => b.decode()?,
        // A region without initial data starts zeroed, as every replay starts it.
        None if !expected => vec![0; region.size as usize],
        None => bail!("region {:?} has no {what} in {}", region.name, args.file.display()),
    };
    data::write_region(&region, &bytes, out)
}

/// The PTX text `name` selects (see [`Args::ptx`]).
fn ptx_of(archive: &Archive, name: &str) -> Result<String> {
    let modules: Vec<_> = archive.modules().collect();
    let module = if name.is_empty() {
        match modules.as_slice() {
            [one] => one.clone(),
            _ => bail!(
                "the archive has {} modules: name one with --ptx NAME ({})",
                modules.len(),
                modules.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
            ),
        }
    } else if let Some(m) = modules.iter().find(|m| m.name == name) {
        m.clone()
    } else if let Some(k) = archive.kernel_by_name(name) {
        modules[k.module as usize].clone()
    } else {
        bail!(
            "no module or kernel named {name:?} (modules: {}; kernels: {})",
            modules.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
            archive.kernels().map(|k| k.name.to_string()).collect::<Vec<_>>().join(", ")
        );
    };
    Ok(module.ptx_text()?)
}
