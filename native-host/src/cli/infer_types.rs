//! `recap infer-types FILE -o OUT`: FILE with a typed layout for each region its PTX writes: the
//! element type of the last store to each byte, from one iteration on the CPU interpreter
//! (`shared::check::infer`). A check then judges each stretch in its own type (floats within their
//! tolerance, integers and pointers exactly); `recap inspect` lists the layouts.

use std::path::PathBuf;

use anyhow::{Context, Result};
use recap::mapped::MappedFile;
use shared::archive::{with_typed_layouts, Archive, ElemType, Stretch};
use shared::replay::ReplayOptions;

use super::limits::LimitArgs;

/// Infer each region's element types from the PTX stores that write it, into a copy of the archive
#[derive(clap::Args)]
pub struct Args {
    pub file: PathBuf,
    /// The archive to write (the same bytes plus a `types` section)
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// Most PTX instructions the CPU replay may execute
    #[arg(long)]
    pub budget: Option<u64>,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// A layout in one line: `f32 ×16 (64 B), i32 ×4 (16 B), untyped 8 B`.
pub fn layout_line(stretches: &[Stretch]) -> String {
    stretches
        .iter()
        .map(|s| match s.ty {
            ElemType::Untyped => format!("untyped {} B (no PTX wrote it)", s.len),
            t => format!("{} ×{} ({} B)", t.name(), s.len / t.size() as u64, s.len),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn run(args: Args) -> Result<()> {
    let map = MappedFile::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let archive = Archive::open(&map).with_context(|| format!("reading {}", args.file.display()))?;
    let options = ReplayOptions { instruction_budget: args.budget, limits: args.limits.limits(), ..Default::default() };
    let layouts = shared::check::infer::infer_layouts(&archive, options)
        .with_context(|| format!("replaying {} on the CPU to find the types its stores write", args.file.display()))?;
    let bytes =
        with_typed_layouts(&map, &layouts).with_context(|| format!("adding types to {}", args.file.display()))?;
    std::fs::write(&args.output, &bytes).with_context(|| format!("writing {}", args.output.display()))?;
    for (region, stretches) in &layouts {
        println!("{}: {}", archive.region(*region).name, layout_line(stretches));
    }
    let untouched = archive.region_count() - layouts.len();
    println!(
        "wrote {}: typed layouts of {} regions ({untouched} written by no PTX store)",
        args.output.display(),
        layouts.len()
    );
    Ok(())
}
