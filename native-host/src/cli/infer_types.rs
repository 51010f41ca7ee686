//! `recap infer-types FILE -o OUT`: FILE with a typed layout for each region its PTX writes: the
//! element type of the last store to each byte, from one iteration on the CPU interpreter
//! (`shared::check::infer`). A check then judges each stretch in its own type (floats within their
//! tolerance, integers and pointers exactly); `recap inspect` lists the layouts.

use std::path::{Path, PathBuf};

use anyhow::Result;
use shared::capture::TypesReport;
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

pub use shared::archive::layout_line;

pub fn run(args: Args) -> Result<()> {
    let options = ReplayOptions { instruction_budget: args.budget, limits: args.limits.limits(), ..Default::default() };
    let (report, lines) = infer_file(&args.file, &args.output, options, None)?;
    for line in lines {
        println!("{line}");
    }
    print_types_report(&report);
    println!("wrote {}", args.output.display());
    Ok(())
}

/// [`recap::types::infer_file`], its lines for people: a layout per typed region.
pub fn infer_file(
    input: &Path,
    output: &Path,
    options: ReplayOptions,
    seconds: Option<f64>,
) -> Result<(TypesReport, Vec<String>)> {
    let (report, layouts) = recap::types::infer_file(input, output, options, seconds)?;
    Ok((report, layouts.iter().map(|(name, stretches)| format!("{name}: {}", layout_line(stretches))).collect()))
}

/// The summary of an inference, in the lines `recap capture` and `recap infer-types` print.
pub fn print_types_report(r: &TypesReport) {
    if let Some(e) = &r.error {
        println!("  types: none inferred: {e}");
        return;
    }
    println!(
        "  types: {} regions typed from their PTX stores, {} untyped (written by no PTX store) in {:.1} s",
        r.typed_regions, r.untyped_regions, r.seconds
    );
    if r.skipped_ops > 0 {
        println!("    {} launches passed over (what they wrote stays untyped):", r.skipped_ops);
        for s in &r.skipped {
            println!("      {s}");
        }
        if r.skipped_ops as usize > r.skipped.len() {
            println!("      and {} more", r.skipped_ops as usize - r.skipped.len());
        }
    }
    if let Some(why) = &r.stopped {
        println!("    stopped early, the later ops' writes stay untyped: {why}");
    }
}
