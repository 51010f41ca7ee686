//! An archive file given its element types: one CPU interpreter replay of its PTX
//! (`shared::check::infer`) under a time limit, and the file replaced whole with a `types`
//! section added. What `recap capture` does after the program ends, `recap infer-types` does to
//! any archive, and Python's `recap.capture` does when its block ends.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use shared::archive::{with_typed_layouts, Archive, Op, RegionId, Stretch};
use shared::capture::TypesReport;
use shared::replay::{ReplayError, ReplayOptions};

use crate::mapped::MappedFile;

/// Why an archive could not be given its types.
#[derive(Debug, thiserror::Error)]
pub enum TypesFileError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("reading {path}: {error}")]
    Format { path: PathBuf, error: shared::archive::FormatError },
    #[error("replaying {path} on the CPU to find the types its stores write: {error}")]
    Replay { path: PathBuf, error: Box<ReplayError> },
    #[error("adding types to {path}: {error}")]
    Types { path: PathBuf, error: shared::archive::TypesError },
}

/// Each typed region's name and layout.
pub type NamedLayouts = Vec<(String, Vec<Stretch>)>;

/// How many passed-over ops a report names.
const SKIPPED_SHOWN: usize = 5;

/// Infers the types of `input`'s regions and writes the archive with them to `output` (which may
/// be `input`: the file is replaced whole, never half-written). `seconds` bounds the replay's
/// time; at the limit the types learnt so far are kept. Gives the summary and each typed
/// region's name and layout.
pub fn infer_file(
    input: &Path,
    output: &Path,
    options: ReplayOptions,
    seconds: Option<f64>,
) -> Result<(TypesReport, NamedLayouts), TypesFileError> {
    let started = Instant::now();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| TypesFileError::Io { path, error }
    };
    let map = MappedFile::open(input).map_err(io(input))?;
    let archive = Archive::open(&map).map_err(|error| TypesFileError::Format { path: input.to_path_buf(), error })?;
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
    let inferred =
        inferred.map_err(|error| TypesFileError::Replay { path: input.to_path_buf(), error: Box::new(error) })?;
    let bytes = with_typed_layouts(&map, &inferred.layouts)
        .map_err(|error| TypesFileError::Types { path: input.to_path_buf(), error })?;
    let named =
        |(region, stretches): &(RegionId, Vec<Stretch>)| (archive.region(*region).name.to_string(), stretches.clone());
    let layouts = inferred.layouts.iter().map(named).collect();
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
    // The file is unmapped before it is replaced (`output` may be `input`).
    drop(map);
    write_whole(output, &bytes).map_err(io(output))?;
    Ok((report, layouts))
}

/// `bytes` to `path` through a temporary file beside it, renamed over it once complete.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
