//! Replay results as protocol messages: the one place every engine (the host's CPU and CUDA
//! sessions, the CLI, the browser replay) turns final region contents and check verdicts into
//! [`crate::protocol`] values, so all of them report alike.
//!
//! Which regions a replay summarises ([`output_regions`]): the regions bound as outputs (`out` or
//! `inout`) or holding an expected state; when the archive marks none, every region that is not
//! scratch. At most [`MAX_SUMMARIES`], in region order: a viewer plots a handful, not thousands.

use crate::archive::{Archive, DType, Direction, RegionId, Tolerance};
use crate::check::{effective_dtype, element, RegionCheck as Judged, Verdict};
use crate::compare::{difference, Divergence};
use crate::protocol::{
    CheckReport, Mismatch, Parting, RegionCheckReport, RegionPreview, RegionSummary, SessionMessage,
};

/// Most regions summarised per replay.
pub const MAX_SUMMARIES: usize = 64;
/// Number of histogram bins in a [`RegionSummary`].
pub const HISTOGRAM_BINS: usize = 32;
/// Number of leading values a [`RegionSummary`] carries.
pub const HEAD_VALUES: usize = 16;

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// The regions a replay summarises (see the module docs).
pub fn output_regions(archive: &Archive<'_>) -> Vec<RegionId> {
    let mut out: Vec<RegionId> = archive
        .regions()
        .filter(|r| {
            r.expected.is_some()
                || archive
                    .bindings()
                    .any(|b| b.region == r.id && matches!(b.direction, Direction::Out | Direction::InOut))
        })
        .map(|r| r.id)
        .collect();
    if out.is_empty() {
        out = archive.regions().filter(|r| !r.scratch).map(|r| r.id).collect();
    }
    out.truncate(MAX_SUMMARIES);
    out
}

impl RegionSummary {
    /// Statistics of `bytes` read as `dtype` (as raw bytes when the length does not divide into
    /// elements): min, max and mean of the finite elements, counts of NaN and infinities, a
    /// histogram of [`HISTOGRAM_BINS`] equal bins over `[min, max]` (all in bin 0 when
    /// `min == max`), the first [`HEAD_VALUES`] elements, and a preview for plotting.
    pub fn of(region: RegionId, name: &str, dtype: DType, shape: &[u64], bytes: &[u8]) -> RegionSummary {
        let read_as = effective_dtype(dtype, bytes.len());
        let count = bytes.len() / read_as.size();
        let (mut min, mut max, mut sum) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
        let (mut finite_count, mut nan_count, mut inf_count) = (0u64, 0u64, 0u64);
        for i in 0..count {
            let v = element(bytes, read_as, i);
            if v.is_nan() {
                nan_count += 1;
            } else if v.is_infinite() {
                inf_count += 1;
            } else {
                finite_count += 1;
                min = min.min(v);
                max = max.max(v);
                sum += v;
            }
        }
        let mut histogram = vec![0u64; HISTOGRAM_BINS];
        if finite_count > 0 {
            let span = max - min;
            for i in 0..count {
                let v = element(bytes, read_as, i);
                if v.is_finite() {
                    let bin = if span > 0.0 && span.is_finite() {
                        (((v - min) / span) * HISTOGRAM_BINS as f64) as usize
                    } else {
                        0
                    };
                    histogram[bin.min(HISTOGRAM_BINS - 1)] += 1;
                }
            }
        }
        let any = finite_count > 0;
        RegionSummary {
            region,
            name: name.to_string(),
            dtype: read_as.name().to_string(),
            shape: shape.to_vec(),
            count: count as u64,
            min: any.then_some(min).and_then(finite),
            max: any.then_some(max).and_then(finite),
            mean: any.then(|| sum / finite_count as f64).and_then(finite),
            nan_count,
            inf_count,
            histogram,
            first: (0..count.min(HEAD_VALUES)).map(|i| finite(element(bytes, read_as, i))).collect(),
            preview: RegionPreview::of(bytes, dtype, shape),
        }
    }
}

/// The summary of one region's final contents, as the message every replay sends.
pub fn region_summary(archive: &Archive<'_>, region: RegionId, bytes: &[u8]) -> SessionMessage {
    let view = archive.region(region);
    SessionMessage::Region { summary: RegionSummary::of(region, view.name, view.dtype, &view.shape, bytes) }
}

fn tolerance_text(v: &Judged) -> String {
    let floats: Vec<String> = v
        .stretches
        .iter()
        .filter_map(|s| {
            s.tolerance.map(|t| format!("{}: {} ulps or atol {:e} + rtol {:e}", s.ty.name(), t.ulps, t.atol, t.rtol))
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut parts = if floats.is_empty() { vec!["exact".to_string()] } else { floats };
    if let Tolerance::MismatchFraction { max_fraction } = v.tolerance {
        parts.push(format!("at most {:.4}% differing", max_fraction * 100.0));
    }
    parts.join("; ")
}

impl From<&Judged> for RegionCheckReport {
    fn from(v: &Judged) -> RegionCheckReport {
        RegionCheckReport {
            region: v.region,
            name: v.name.clone(),
            passed: v.passed,
            tolerance: tolerance_text(v),
            count: v.elements(),
            mismatches: v.mismatches(),
            max_abs_error: finite(v.max_abs_err()),
            max_rel_error: finite(v.max_rel_err()),
            first_mismatch: v.first_mismatch().map(|f| Mismatch {
                index: f.index,
                got: f.got_value,
                want: f.want_value,
            }),
            detail: v.detail(),
            outcome: v.outcome(),
            nondeterministic: v.nondeterministic(),
            stretches: v.stretches.clone(),
        }
    }
}

impl CheckReport {
    /// A replay's verdict as the message every replay sends.
    pub fn of(verdict: &Verdict) -> CheckReport {
        CheckReport {
            passed: verdict.passed(),
            state: verdict.state,
            regions: verdict.regions.iter().map(RegionCheckReport::from).collect(),
            replays: verdict.replays,
        }
    }
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
            check: RegionCheckReport::from(&d.check),
            histogram: d.histogram.clone(),
            a: RegionPreview::of(a, view.dtype, &view.shape),
            b: RegionPreview::of(b, view.dtype, &view.shape),
            difference: RegionPreview::of(&difference(a, b, view.dtype), DType::F64, &view.shape),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn of(bytes: &[u8], dtype: DType) -> RegionSummary {
        RegionSummary::of(0, "r", dtype, &[], bytes)
    }

    #[test]
    fn summary_counts_specials_and_bins_finite_values() {
        let mut vals: Vec<f32> = (0..64).map(|i| i as f32).collect();
        vals.push(f32::NAN);
        vals.push(f32::NEG_INFINITY);
        let s = of(&f32s(&vals), DType::F32);
        assert_eq!(s.count, 66);
        assert_eq!((s.min, s.max), (Some(0.0), Some(63.0)));
        assert_eq!(s.mean, Some(31.5));
        assert_eq!((s.nan_count, s.inf_count), (1, 1));
        assert_eq!(s.histogram.len(), HISTOGRAM_BINS);
        assert_eq!(s.histogram.iter().sum::<u64>(), 64);
        assert!(s.histogram.iter().all(|&c| c == 2), "{:?}", s.histogram);
        assert_eq!(s.first.len(), HEAD_VALUES);
        assert_eq!(s.first[3], Some(3.0));
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<RegionSummary>(&json).unwrap(), s);
    }

    #[test]
    fn summary_of_constant_and_empty_and_special_only_regions() {
        let s = of(&f32s(&[2.0; 5]), DType::F32);
        assert_eq!(s.histogram[0], 5);
        assert_eq!(s.mean, Some(2.0));
        let s = of(&[], DType::F32);
        assert_eq!((s.count, s.min, s.mean), (0, None, None));
        let s = of(&f32s(&[f32::NAN, f32::INFINITY]), DType::F32);
        assert_eq!((s.min, s.nan_count, s.inf_count), (None, 1, 1));
        assert_eq!(s.first, vec![None, None]);
        let s = of(&[200u8, 10], DType::I8);
        assert_eq!((s.min, s.max), (Some(-56.0), Some(10.0)));
        // A mean that overflows is left out rather than sent as infinity.
        let s = of(&[f32::MAX; 4].iter().flat_map(|x| (*x as f64).to_le_bytes()).collect::<Vec<_>>(), DType::F64);
        assert_eq!(s.max, Some(f32::MAX as f64));
    }
}
