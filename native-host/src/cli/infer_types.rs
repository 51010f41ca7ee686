//! `recap infer-types FILE -o OUT`: FILE with a typed layout for each region its PTX writes: the
//! element type of the last store to each byte, from one iteration on the CPU interpreter
//! (`shared::check::infer`). A check then judges each stretch in its own type (floats within their
//! tolerance, integers and pointers exactly); `recap inspect` lists the layouts.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use recap::mapped::MappedFile;
use shared::archive::{with_typed_layouts, Archive, ElemType, Op, Stretch};
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
    let options = ReplayOptions { instruction_budget: args.budget, limits: args.limits.limits(), ..Default::default() };
    let (report, lines) = infer_file(&args.file, &args.output, options, None)?;
    for line in lines {
        println!("{line}");
    }
    print_types_report(&report);
    println!("wrote {}", args.output.display());
    Ok(())
}

/// Infers the types of `input`'s regions and writes the archive with them to `output` (which
/// may be `input`: the file is replaced whole, never half-written). `seconds` bounds the replay's
/// time; at the limit the types learnt so far are kept. Gives the summary and a line per typed
/// region.
pub fn infer_file(
    input: &Path,
    output: &Path,
    options: ReplayOptions,
    seconds: Option<f64>,
) -> Result<(TypesReport, Vec<String>)> {
    let started = Instant::now();
    let map = MappedFile::open(input).with_context(|| format!("opening {}", input.display()))?;
    let archive = Archive::open(&map).with_context(|| format!("reading {}", input.display()))?;
    let cancel = Arc::new(AtomicBool::new(false));
    let (done, finished) = mpsc::channel::<()>();
    let watchdog = seconds.map(|s| {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            if finished.recv_timeout(Duration::from_secs_f64(s)).is_err() {
                cancel.store(true, Ordering::Relaxed);
            }
        })
    });
    let inferred = shared::check::infer::infer_layouts(&archive, ReplayOptions { cancel: Some(cancel), ..options });
    drop(done);
    if let Some(w) = watchdog {
        let _ = w.join();
    }
    let inferred = inferred
        .with_context(|| format!("replaying {} on the CPU to find the types its stores write", input.display()))?;
    let bytes =
        with_typed_layouts(&map, &inferred.layouts).with_context(|| format!("adding types to {}", input.display()))?;
    let lines = inferred
        .layouts
        .iter()
        .map(|(region, stretches)| format!("{}: {}", archive.region(*region).name, layout_line(stretches)))
        .collect();
    let report = TypesReport {
        typed_regions: inferred.layouts.len() as u64,
        untyped_regions: (archive.region_count() - inferred.layouts.len()) as u64,
        skipped_ops: inferred.skipped.len() as u64,
        skipped: inferred
            .skipped
            .iter()
            .take(SKIPPED_SHOWN)
            .map(|(op, why)| match archive.op(*op) {
                Op::Launch(l) => format!("op {op} ({}): {why}", archive.kernel(l.kernel).name),
                other => format!("op {op} ({}): {why}", other.kind_name()),
            })
            .collect(),
        stopped: inferred.stopped.map(|why| match seconds {
            Some(s) if why.starts_with("replay cancelled") => format!("its time limit of {s} s was reached ({why})"),
            _ => why,
        }),
        error: None,
        seconds: started.elapsed().as_secs_f64(),
    };
    drop(archive);
    drop(map);
    write_whole(output, &bytes)?;
    Ok((report, lines))
}

/// How many passed-over ops a report names.
const SKIPPED_SHOWN: usize = 5;

/// `bytes` to `path` through a temporary file beside it, renamed over it once complete.
pub(crate) fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).with_context(|| format!("writing into {}", dir.display()))?;
    tmp.write_all(bytes).with_context(|| format!("writing {}", path.display()))?;
    tmp.persist(path).map_err(|e| e.error).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
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
