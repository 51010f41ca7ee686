//! Turning replay results (`shared::check`) into protocol messages, the same for every engine.

use shared::archive::{Archive, Direction, RegionId, Tolerance};
use shared::check::{RegionCheck as Verdict, RegionSummary as Stats};
use shared::protocol::{CheckReport, Mismatch, RegionCheck, RegionPreview, RegionSummary, SessionMessage};

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

pub fn check_report(verdicts: &[Verdict]) -> CheckReport {
    let regions: Vec<RegionCheck> = verdicts
        .iter()
        .map(|v| RegionCheck {
            region: v.region,
            name: v.name.clone(),
            passed: v.passed,
            tolerance: tolerance_text(&v.tolerance),
            count: v.elements,
            mismatches: v.mismatches,
            max_abs_error: finite(v.max_abs_err),
            max_rel_error: finite(v.max_rel_err),
            first_mismatch: v.first_mismatch.map(|(index, got, want)| Mismatch {
                index,
                got: finite(got),
                want: finite(want),
            }),
            detail: v.detail(),
        })
        .collect();
    CheckReport { passed: regions.iter().all(|r| r.passed), regions }
}
