//! Two replays of one archive held side by side, op by op: where do their results part?
//!
//! The key idea: the plan already knows which regions every op may write, so after each op both
//! sides are read there and nowhere else, and compared as a check compares (`shared::check`):
//! stretch by stretch in each stretch's element type, floats within their type's tolerance, so an
//! op's writes agree bit for bit, agree within tolerance, or differ. The first op whose writes differ is the answer to "which kernel
//! first differs between these two devices"; inside while/if bodies every pass is compared, and a
//! pass numbers the op's runs within the iteration. Where the two sides do not even run the same
//! op next (a loop condition that came out differently), that is reported as the parting.
//!
//! The driver is the caller's: [`Comparison::after_op`] takes the op both sides just finished and
//! a reader for each side, so a CPU replay stepped with `CpuReplay::step` and a CUDA replay calling
//! back after each op go through the same judgement.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::archive::{Archive, DType, Op, OpId, RegionId, Tolerance};
use crate::check::{check_region, element, Outcome as Agreement, RegionCheck, RegionInput};
use crate::plan::Plan;

/// Decades of `|a - b|` the difference histogram counts: below 1e-9, then one bucket per power of
/// ten up to 1e9 and above, and the elements where only one side is NaN or infinite.
const DECADES: std::ops::RangeInclusive<i32> = -9..=9;

/// Where two replays part on one op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    pub op: OpId,
    /// `launch saxpy`, `copy a -> b`, ...
    pub label: String,
    /// Which run of this op within the iteration (1 for the first; more inside loop bodies).
    pub pass: u64,
    pub region: String,
    pub region_id: RegionId,
    /// The comparison: side B as `got`, side A as `want` (first mismatch, counts, worst errors).
    pub check: RegionCheck,
    /// `(bucket, elements)` of the differences over the elements that differ at all: `"< 1e-9"`,
    /// `"1e-3..1e-2"`, ..., `">= 1e9"`, `"nan/inf"`; only buckets that are not empty.
    pub histogram: Vec<(String, u64)>,
}

impl Divergence {
    /// A few lines for people: the op, the region, the first mismatch, the histogram.
    pub fn report(&self, a: &str, b: &str) -> String {
        let mut s = format!(
            "op {} ({}), pass {}: region {} differs: {}",
            self.op,
            self.label,
            self.pass,
            self.region,
            // The first mismatch follows, with the sides' names.
            self.check.detail().split("; first at").next().unwrap_or_default()
        );
        if let Some(f) = self.check.first_mismatch() {
            s.push_str(&format!("\n  first at element {} (byte {}): {a} {}, {b} {}", f.index, f.offset, f.want, f.got));
        }
        if !self.histogram.is_empty() {
            let buckets: Vec<String> = self.histogram.iter().map(|(k, n)| format!("{k}: {n}")).collect();
            s.push_str(&format!("\n  |{a} - {b}| over differing elements: {}", buckets.join(", ")));
        }
        s
    }
}

/// What a comparison found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Ops compared (each pass through a body counts).
    pub ops: u64,
    /// Region comparisons made.
    pub regions: u64,
    /// Ops whose writes agree only within tolerance (their bits differ).
    #[serde(default)]
    pub within: u64,
    /// Every op whose writes differ, in the order they ran (only the first unless all are asked for).
    pub divergences: Vec<Divergence>,
    /// Set when the two sides stopped running the same ops: `(after op, A's next, B's next)`, `None`
    /// for a side whose iteration was over.
    pub control: Option<(Option<OpId>, Option<OpId>, Option<OpId>)>,
}

impl Outcome {
    pub fn agree(&self) -> bool {
        self.divergences.is_empty() && self.control.is_none()
    }
}

/// One op as [`Comparison::after_op`] judged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    pub op: OpId,
    /// Which run of this op within the iteration (1 for the first).
    pub pass: u64,
    pub agree: bool,
    /// The op agrees within tolerance, not bit for bit.
    pub within: bool,
}

/// Both sides' bytes of a region where they part: `divergence` indexes [`Outcome::divergences`].
pub struct PartedBytes {
    pub divergence: usize,
    pub a: Vec<u8>,
    pub b: Vec<u8>,
}

/// The judgement of two replays, fed one finished op at a time.
pub struct Comparison<'a, 'p> {
    archive: &'a Archive<'a>,
    plan: &'p Plan,
    /// Per region, the offsets of the pointers stored in it: addresses, which every device lays
    /// out its own way, so those words are left out of the comparison.
    pointers: HashMap<RegionId, Vec<u64>>,
    /// What the program's arrays declared of each region's bytes (none where the archive's
    /// declaration does not fit it: those bytes are then compared byte for byte).
    declared: HashMap<RegionId, Vec<crate::archive::declared::DeclaredType>>,
    all: bool,
    passes: HashMap<OpId, u64>,
    last: Option<OpId>,
    judged: Option<Judged>,
    /// Whether to keep both sides' bytes of each region where they part (for plots and files).
    keep_bytes: bool,
    parted: Vec<PartedBytes>,
    outcome: Outcome,
}

impl<'a, 'p> Comparison<'a, 'p> {
    /// `all`: keep going past the first op that differs.
    pub fn new(archive: &'a Archive<'a>, plan: &'p Plan, all: bool) -> Self {
        let mut pointers: HashMap<RegionId, Vec<u64>> = HashMap::new();
        for (owner, r) in archive.region_relocs() {
            pointers.entry(owner).or_default().push(r.offset);
        }
        Comparison {
            archive,
            plan,
            pointers,
            declared: crate::archive::declared::of_archive(archive).unwrap_or_default(),
            all,
            passes: HashMap::new(),
            last: None,
            judged: None,
            keep_bytes: false,
            parted: Vec::new(),
            outcome: Outcome::default(),
        }
    }

    /// Keeps both sides' bytes of every region where they part, for [`Comparison::take_parted`].
    pub fn keeping_bytes(mut self) -> Self {
        self.keep_bytes = true;
        self
    }

    /// The op the latest [`Comparison::after_op`] judged (`None` when the sides ran different ops
    /// or both were over).
    pub fn judged(&self) -> Option<&Judged> {
        self.judged.as_ref()
    }

    /// The bytes of the regions where the sides parted since the last call (with
    /// [`Comparison::keeping_bytes`]).
    pub fn take_parted(&mut self) -> Vec<PartedBytes> {
        std::mem::take(&mut self.parted)
    }

    /// Both sides finished their next op: `a` and `b` (`None` once a side's iteration is over).
    /// Reads the regions the op may write through `read_a` and `read_b` and compares them. Gives
    /// whether to go on.
    pub fn after_op<E>(
        &mut self,
        a: Option<OpId>,
        b: Option<OpId>,
        mut read_a: impl FnMut(RegionId) -> Result<Vec<u8>, E>,
        mut read_b: impl FnMut(RegionId) -> Result<Vec<u8>, E>,
    ) -> Result<bool, E> {
        self.judged = None;
        if a != b {
            self.outcome.control = Some((self.last, a, b));
            return Ok(false);
        }
        let Some(op) = a else { return Ok(false) };
        self.last = Some(op);
        let pass = {
            let p = self.passes.entry(op).or_default();
            *p += 1;
            *p
        };
        self.outcome.ops += 1;
        // A freed region has nothing left to read; a while/if's writes are its body's, compared
        // op by op as they ran.
        let mut regions: Vec<RegionId> = match self.archive.op(op) {
            Op::Free(_) | Op::While { .. } | Op::If { .. } => Vec::new(),
            _ => self.plan.access[op as usize].writes.iter().map(|s| s.region).collect(),
        };
        regions.dedup();
        let mut parted = false;
        let mut within = false;
        for region in regions {
            let r = self.archive.region(region);
            let (mut got_a, mut got_b) = (read_a(region)?, read_b(region)?);
            for &at in self.pointers.get(&region).into_iter().flatten() {
                for bytes in [&mut got_a, &mut got_b] {
                    if let Some(word) = bytes.get_mut(at as usize..at as usize + 8) {
                        word.fill(0);
                    }
                }
            }
            self.outcome.regions += 1;
            let tolerance = r.tolerance.unwrap_or(Tolerance::Exact);
            let layout = self.archive.typed_layout(region);
            // Two sides may part as far as the program's own repeated runs did.
            let recorded = self.archive.recorded_spread(region);
            let check = check_region(&RegionInput {
                region,
                name: r.name,
                dtype: r.dtype,
                layout: layout.as_deref(),
                got: &got_b,
                others: &[],
                want: &got_a,
                tolerance,
                over: Default::default(),
                recorded: &recorded,
                declared: self.declared.get(&region).map_or(&[], |d| d.as_slice()),
            });
            if check.passed {
                within |= check.outcome() == Agreement::Within;
                continue;
            }
            parted = true;
            let histogram = histogram(&got_a, &got_b, r.dtype);
            self.outcome.divergences.push(Divergence {
                op,
                label: self.archive.op_label(op),
                pass,
                region: r.name.to_string(),
                region_id: region,
                check,
                histogram,
            });
            if self.keep_bytes {
                let divergence = self.outcome.divergences.len() - 1;
                self.parted.push(PartedBytes { divergence, a: got_a, b: got_b });
            }
        }
        let within = within && !parted;
        self.outcome.within += within as u64;
        self.judged = Some(Judged { op, pass, agree: !parted, within });
        Ok(!parted || self.all)
    }

    /// Every op whose writes differ so far.
    pub fn divergences(&self) -> &[Divergence] {
        &self.outcome.divergences
    }

    pub fn finish(self) -> Outcome {
        self.outcome
    }
}

/// `a - b` element by element as little-endian f64 (NaN where either side is not a number), for a
/// plot of where two regions differ; empty when their lengths differ.
pub fn difference(a: &[u8], b: &[u8], dtype: DType) -> Vec<u8> {
    if a.len() != b.len() {
        return Vec::new();
    }
    let dtype = if a.len().is_multiple_of(dtype.size()) { dtype } else { DType::Bytes };
    (0..a.len() / dtype.size()).flat_map(|i| (element(a, dtype, i) - element(b, dtype, i)).to_le_bytes()).collect()
}

/// Counts of `|a - b|` by decade over the elements whose bytes differ.
fn histogram(a: &[u8], b: &[u8], dtype: DType) -> Vec<(String, u64)> {
    if a.len() != b.len() {
        return Vec::new();
    }
    let dtype = if a.len().is_multiple_of(dtype.size()) { dtype } else { DType::Bytes };
    let size = dtype.size();
    let (lo, hi) = (*DECADES.start(), *DECADES.end());
    // [below lo, lo..lo+1, ..., hi-1..hi, at or above hi, nan/inf]
    let mut counts = vec![0u64; (hi - lo) as usize + 3];
    for i in 0..a.len() / size {
        if a[i * size..(i + 1) * size] == b[i * size..(i + 1) * size] {
            continue;
        }
        let d = (element(a, dtype, i) - element(b, dtype, i)).abs();
        let bucket = if !d.is_finite() {
            counts.len() - 1
        } else if d < 10f64.powi(lo) {
            0
        } else if d >= 10f64.powi(hi) {
            counts.len() - 2
        } else {
            (d.log10().floor() as i32 - lo + 1).clamp(1, hi - lo) as usize
        };
        counts[bucket] += 1;
    }
    let label = |k: usize| match k {
        0 => format!("< 1e{lo}"),
        k if k == counts.len() - 1 => "nan/inf".to_string(),
        k if k == counts.len() - 2 => format!(">= 1e{hi}"),
        k => {
            let e = lo + k as i32 - 1;
            format!("1e{e}..1e{}", e + 1)
        }
    };
    counts.iter().enumerate().filter(|(_, &n)| n > 0).map(|(k, &n)| (label(k), n)).collect()
}

#[cfg(test)]
mod tests {
    use super::{difference, histogram};
    use crate::archive::DType;

    #[test]
    fn the_difference_is_a_minus_b_as_f64() {
        let a: Vec<u8> = [1i32, 5, -3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let b: Vec<u8> = [1i32, 2, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
        let d: Vec<f64> =
            difference(&a, &b, DType::I32).chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(d, [0.0, 3.0, -7.0]);
        assert!(difference(&a, &b[..4], DType::I32).is_empty());
    }

    #[test]
    fn the_histogram_counts_differences_by_decade() {
        let a: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, f32::NAN].iter().flat_map(|v| v.to_le_bytes()).collect();
        let b: Vec<u8> = [1.0f32, 2.5, 3.0 + 1e-6, 40.0, 5.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let h = histogram(&a, &b, DType::F32);
        assert_eq!(
            h,
            vec![
                ("1e-7..1e-6".to_string(), 1),
                ("1e-1..1e0".to_string(), 1),
                ("1e1..1e2".to_string(), 1),
                ("nan/inf".to_string(), 1)
            ]
        );
    }
}
