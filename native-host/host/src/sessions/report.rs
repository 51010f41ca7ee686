//! Turning replay results (`shared::check`) into protocol messages, the same for every engine.

use std::path::{Path, PathBuf};

use shared::archive::{Archive, DType, Direction, RegionId, Tolerance};
use shared::check::{RegionCheck as Verdict, RegionSummary as Stats};
use shared::compare::{difference, Divergence};
use shared::protocol::{CheckReport, Mismatch, Parting, RegionCheck, RegionPreview, RegionSummary, SessionMessage};

/// Most regions summarised per session: a viewer plots a handful, not thousands.
pub const MAX_SUMMARIES: usize = 64;

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// The regions worth summarising: bound as outputs or with expected bytes; all persistent
/// regions when the archive marks none.
pub fn output_regions(archive: &Archive<'_>) -> Vec<RegionId> {
    let mut out: Vec<RegionId> = archive
        .regions()
        .filter(|r| {
            r.expected.is_some()
                || archive.bindings().any(|b| b.region == r.id && matches!(b.direction, Direction::Out | Direction::InOut))
        })
        .map(|r| r.id)
        .collect();
    if out.is_empty() {
        out = archive.regions().filter(|r| !r.scratch).map(|r| r.id).collect();
    }
    out.truncate(MAX_SUMMARIES);
    out
}

pub fn summary(archive: &Archive<'_>, region: RegionId, bytes: &[u8]) -> SessionMessage {
    let view = archive.region(region);
    let s = Stats::of(bytes, view.dtype);
    SessionMessage::Region {
        summary: RegionSummary {
            region,
            name: view.name.to_string(),
            dtype: s.dtype.name().to_string(),
            shape: view.shape.clone(),
            count: s.elements,
            min: s.min.and_then(finite),
            max: s.max.and_then(finite),
            mean: s.mean.and_then(finite),
            nan_count: s.nan_count,
            inf_count: s.inf_count,
            histogram: s.histogram,
            first: s.head.into_iter().map(|v| v.and_then(finite)).collect(),
            preview: RegionPreview::of(bytes, view.dtype, &view.shape),
        },
    }
}

fn tolerance_text(t: &Tolerance) -> String {
    match *t {
        Tolerance::Exact => "exact".into(),
        Tolerance::Close { rtol, atol } => format!("rtol {rtol:e} atol {atol:e}"),
        Tolerance::MismatchFraction { max_fraction } => format!("at most {:.4}% differing", max_fraction * 100.0),
    }
}

fn region_check(v: &Verdict) -> RegionCheck {
    RegionCheck {
        region: v.region,
        name: v.name.clone(),
        passed: v.passed,
        tolerance: tolerance_text(&v.tolerance),
        count: v.elements,
        mismatches: v.mismatches,
        max_abs_error: finite(v.max_abs_err),
        max_rel_error: finite(v.max_rel_err),
        first_mismatch: v.first_mismatch.map(|(index, got, want)| Mismatch { index, got: finite(got), want: finite(want) }),
        detail: v.detail(),
    }
}

pub fn check_report(verdicts: &[Verdict]) -> CheckReport {
    let regions: Vec<RegionCheck> = verdicts.iter().map(region_check).collect();
    CheckReport { passed: regions.iter().all(|r| r.passed), regions }
}

/// Where two sides of a comparison part, with both sides' values and their difference drawn.
pub fn parting(archive: &Archive<'_>, d: &Divergence, a: &[u8], b: &[u8]) -> SessionMessage {
    let view = archive.region(d.region_id);
    SessionMessage::Parted {
        parting: Box::new(Parting {
            op: d.op,
            label: d.label.clone(),
            pass: d.pass,
            region: d.region_id,
            name: d.region.clone(),
            dtype: view.dtype.name().to_string(),
            shape: view.shape.clone(),
            check: region_check(&d.check),
            histogram: d.histogram.clone(),
            a: RegionPreview::of(a, view.dtype, &view.shape),
            b: RegionPreview::of(b, view.dtype, &view.shape),
            difference: RegionPreview::of(&difference(a, b, view.dtype), DType::F64, &view.shape),
        }),
    }
}

/// Most bytes of region contents a session keeps for download.
pub const KEEP_BYTES: u64 = 256 << 20;

/// Region contents a session keeps for download (`GET /api/sessions/{id}/regions/{name}`): files in
/// the session's folder, `{region}.bin` for a replay's final state and `a-{region}.bin` /
/// `b-{region}.bin` for both sides of a comparison where they part. A region that would take the
/// session past [`KEEP_BYTES`] is not kept.
pub struct Keeper {
    dir: Option<PathBuf>,
    used: u64,
}

impl Keeper {
    pub fn new(dir: Option<&Path>) -> Keeper {
        Keeper { dir: dir.map(Path::to_path_buf), used: 0 }
    }

    /// Keeps `bytes` as `file`, unless that file exists already, this session keeps nothing or its
    /// allowance is spent; an error only when the file cannot be written.
    pub fn keep(&mut self, file: &str, bytes: &[u8]) -> std::io::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let path = dir.join(file);
        if path.exists() || self.used + bytes.len() as u64 > KEEP_BYTES {
            return Ok(());
        }
        self.used += bytes.len() as u64;
        std::fs::write(path, bytes)
    }
}

/// The file a session keeps `region` in: `side` is `a` or `b` for a comparison.
pub fn kept_file(region: RegionId, side: Option<&str>) -> String {
    match side {
        Some(side) => format!("{side}-{region}.bin"),
        None => format!("{region}.bin"),
    }
}
