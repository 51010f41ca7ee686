//! Judging a replay's final regions against an archive's expected bytes: the one verdict that
//! `recap replay --check`, `recap compare`, the host's sessions, the browser and Python all give.
//!
//! A region is judged stretch by stretch, each stretch in its own element type: the archive's
//! typed layout where it has one (`recap infer-types`: the type of the last PTX store to each
//! byte, [`infer`]), else the region's declared dtype; bytes no PTX wrote and whose region names
//! no dtype stay untyped and are compared byte for byte. A stretch is bit-exact, within its type's
//! tolerance, or different (with the first differing element in its type and the count). Floats
//! pass within `ulps` units in the last place or `atol + rtol * |want|`; integers and pointers
//! stay exact. Replays that disagree with each other ([`judge`] with several replays: `recap
//! replay --determinism N`) make a stretch nondeterministic: it is judged against the expected
//! state with a tolerance no tighter than their spread, so it never fails for differing from
//! itself, and a kernel that writes wrong values still fails. A region passes when all its
//! stretches pass; a check of an archive with no expected state is "nothing to check", not a pass.

use serde::{Deserialize, Serialize};

use crate::archive::declared::DeclaredType;
use crate::archive::{Archive, DType, ElemType, RegionId, Stretch, Tolerance};

pub mod infer;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_replay;

/// What a float stretch may differ by: `ulps` units in the last place, or `atol + rtol * |want|`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FloatTolerance {
    pub ulps: u64,
    pub rtol: f64,
    pub atol: f64,
}

impl FloatTolerance {
    /// A type's default: a few ulps, and a relative tolerance near a thousand-element sum's
    /// rounding in that type (about `sqrt(1000)` ulps at its precision).
    pub fn default_for(ty: ElemType) -> FloatTolerance {
        let (ulps, rtol) = match ty {
            ElemType::F16 => (2, 1e-3),
            ElemType::Bf16 => (2, 8e-3),
            ElemType::F64 => (4, 1e-13),
            _ => (4, 1e-5),
        };
        FloatTolerance { ulps, rtol, atol: 0.0 }
    }
}

/// Tolerances set by hand (`--ulps/--rtol/--atol`), for every region or for one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToleranceOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ulps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtol: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atol: Option<f64>,
}

impl ToleranceOverride {
    fn over(self, base: ToleranceOverride) -> ToleranceOverride {
        ToleranceOverride {
            ulps: self.ulps.or(base.ulps),
            rtol: self.rtol.or(base.rtol),
            atol: self.atol.or(base.atol),
        }
    }
}

/// How a check is made beyond what the archive says.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckOptions {
    /// For every region.
    #[serde(default)]
    pub all: ToleranceOverride,
    /// For the region, or the region bound to the binding, of this name; wins over `all`.
    #[serde(default)]
    pub by_name: Vec<(String, ToleranceOverride)>,
}

impl CheckOptions {
    fn for_region(&self, archive: &Archive<'_>, region: RegionId) -> ToleranceOverride {
        let name = archive.region(region).name;
        let named = |n: &str| n == name || archive.bindings().any(|b| b.region == region && b.name == n);
        self.by_name.iter().filter(|(n, _)| named(n)).fold(self.all, |acc, (_, o)| o.over(acc))
    }
}

/// Where a stretch's element type came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TypeSource {
    /// The last PTX store to it (the archive's typed layout).
    Ptx,
    /// The region's declared dtype (what the program named, or the binding's array).
    Declared,
    /// The program's own array that held it as the range ended (its framework's dtype,
    /// `archive::declared`): bytes only machine code wrote.
    Program,
    /// Nothing: no PTX wrote it, no array of the program held it, and the region names no dtype;
    /// judged byte for byte.
    None,
}

/// A stretch's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every element bit for bit.
    Exact,
    /// Some elements differ, all within the tolerance.
    Within,
    /// Some elements differ beyond it.
    Differ,
}

/// How far replays of the same archive on the same device disagreed with each other over a
/// stretch: the largest distance of any replay's element from the first replay's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// In units in the last place (floats) or in values (integers); 0 for untyped bytes.
    pub ulps: u64,
    pub abs: f64,
    /// Elements where some replay differs.
    pub elements: u64,
}

/// The first element of a stretch outside its tolerance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ElementDiff {
    /// Index of the element in the region read as the stretch's type (byte offset / size).
    pub index: u64,
    /// Byte offset in the region.
    pub offset: u64,
    /// Both values formatted as the type (floats with their bits).
    pub got: String,
    pub want: String,
    /// Both values as numbers where the type has them (None for untyped bytes, NaN, infinity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub got_value: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub want_value: Option<f64>,
}

/// The verdict on one stretch of a region.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StretchCheck {
    /// Byte offset in the region and length in bytes.
    pub offset: u64,
    pub len: u64,
    pub ty: ElemType,
    pub typed_by: TypeSource,
    pub outcome: Outcome,
    pub elements: u64,
    /// Elements not bit-equal to the expected state.
    pub inexact: u64,
    /// Elements outside the tolerance.
    pub differing: u64,
    /// The float tolerance it was judged by (widened to the spread where nondeterministic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<FloatTolerance>,
    /// Largest distances from the expected state over elements where both are finite.
    pub max_ulps: u64,
    pub max_abs: f64,
    pub max_rel: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<ElementDiff>,
    /// Set when the replays disagreed with each other here (nondeterministic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
    /// Set when the archive records that repeated runs of the program's range disagreed here
    /// (`recap capture --repeat-range`): nondeterministic at capture, judged no tighter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_spread: Option<Spread>,
    /// Distances (ulps, floats only) of the inexact elements by power of two: bucket `k` counts
    /// distances in `[2^(k-1), 2^k)`, bucket 0 distance 0 (for a histogram).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ulp_histogram: Vec<u64>,
}

/// The verdict on one region.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionCheck {
    pub region: RegionId,
    pub name: String,
    pub passed: bool,
    pub stretches: Vec<StretchCheck>,
    /// Set when the comparison could not be made at all (the two sides differ in length).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The archive's tolerance for the region (a mismatch fraction bounds differing elements).
    pub tolerance: Tolerance,
}

/// The whole check's state: nothing to check is its own state, never a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckState {
    /// Every region bit for bit.
    Exact,
    /// Every region passed, some only within tolerance.
    Within,
    Failed,
    /// The archive holds no expected state.
    NothingToCheck,
}

impl CheckState {
    pub fn passed(self) -> bool {
        matches!(self, CheckState::Exact | CheckState::Within)
    }

    /// Of a list of region verdicts.
    pub fn of(regions: &[RegionCheck]) -> CheckState {
        if regions.is_empty() {
            CheckState::NothingToCheck
        } else if regions.iter().any(|r| !r.passed) {
            CheckState::Failed
        } else if regions.iter().all(|r| r.outcome() == Outcome::Exact) {
            CheckState::Exact
        } else {
            CheckState::Within
        }
    }

    /// `PASS (exact)`, `PASS (within tolerance)`, `FAIL`, `nothing to check`.
    pub fn label(self) -> &'static str {
        match self {
            CheckState::Exact => "PASS (exact)",
            CheckState::Within => "PASS (within tolerance)",
            CheckState::Failed => "FAIL",
            CheckState::NothingToCheck => "nothing to check",
        }
    }
}

impl RegionCheck {
    /// The region's outcome: its worst stretch's.
    pub fn outcome(&self) -> Outcome {
        if self.error.is_some() || !self.passed {
            return Outcome::Differ;
        }
        if self.stretches.iter().all(|s| s.outcome == Outcome::Exact) {
            Outcome::Exact
        } else {
            Outcome::Within
        }
    }

    /// Whether any stretch's replays disagreed with each other.
    pub fn nondeterministic(&self) -> bool {
        self.stretches.iter().any(|s| s.spread.is_some() || s.recorded_spread.is_some())
    }

    pub fn elements(&self) -> u64 {
        self.stretches.iter().map(|s| s.elements).sum()
    }

    /// Elements outside the tolerance.
    pub fn mismatches(&self) -> u64 {
        self.stretches.iter().map(|s| s.differing).sum()
    }

    pub fn max_abs_err(&self) -> f64 {
        self.stretches.iter().map(|s| s.max_abs).fold(0.0, f64::max)
    }

    pub fn max_rel_err(&self) -> f64 {
        self.stretches.iter().map(|s| s.max_rel).fold(0.0, f64::max)
    }

    /// The first element outside the tolerance, in the first stretch that has one.
    pub fn first_mismatch(&self) -> Option<&ElementDiff> {
        self.stretches.iter().find_map(|s| s.first.as_ref())
    }

    /// One line: `PASS x: ...` or `FAIL x: ...`, what the CLI prints per region.
    pub fn line(&self) -> String {
        format!("{} {}: {}", if self.passed { "PASS" } else { "FAIL" }, self.name, self.detail())
    }

    /// What the verdict rests on, without the name: the stretches, one clause each.
    pub fn detail(&self) -> String {
        if let Some(e) = &self.error {
            return e.clone();
        }
        let mut parts: Vec<String> = self.stretches.iter().map(StretchCheck::detail).collect();
        if let Tolerance::MismatchFraction { max_fraction } = self.tolerance {
            parts.push(format!(
                "{} of {} elements differ, at most {:.4}% may",
                self.mismatches(),
                self.elements(),
                max_fraction * 100.0
            ));
        }
        parts.join("; ")
    }
}

/// A float's bits as a value.
fn float_value(ty: ElemType, bits: u64) -> f64 {
    match ty {
        ElemType::F16 => half::f16::from_bits(bits as u16).to_f64(),
        ElemType::Bf16 => half::bf16::from_bits(bits as u16).to_f64(),
        ElemType::F32 => f32::from_bits(bits as u32) as f64,
        _ => f64::from_bits(bits),
    }
}

/// Bits of a float as a signed integer in the order of the values (`-0` and `+0` both 0), so
/// that the distance of two is their distance in ulps.
fn ordered(ty: ElemType, bits: u64) -> i128 {
    let width = ty.size() as u32 * 8;
    let sign = 1u64 << (width - 1);
    let magnitude = (bits & (sign - 1)) as i128;
    if bits & sign != 0 {
        -magnitude
    } else {
        magnitude
    }
}

fn is_nan(ty: ElemType, bits: u64) -> bool {
    float_value(ty, bits).is_nan()
}

/// Element `i` of `bytes` (little-endian, `size` bytes) as bits.
fn bits_at(bytes: &[u8], size: usize, i: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..size].copy_from_slice(&bytes[i * size..(i + 1) * size]);
    u64::from_le_bytes(b)
}

/// An element as a number: floats as themselves, integers signed, pointers and bytes unsigned.
fn number(ty: ElemType, bits: u64) -> f64 {
    match ty {
        t if t.is_float() => float_value(t, bits),
        ElemType::I8 => bits as u8 as i8 as f64,
        ElemType::I16 => bits as u16 as i16 as f64,
        ElemType::I32 => bits as u32 as i32 as f64,
        ElemType::I64 => bits as i64 as f64,
        _ => bits as f64,
    }
}

/// An element formatted as its type: floats with their bits, pointers in hex.
pub fn format_element(ty: ElemType, bits: u64) -> String {
    match ty {
        ElemType::F16 => format!("{} (0x{bits:04x})", half::f16::from_bits(bits as u16)),
        ElemType::Bf16 => format!("{} (0x{bits:04x})", half::bf16::from_bits(bits as u16)),
        ElemType::F32 => format!("{:?} (0x{bits:08x})", f32::from_bits(bits as u32)),
        ElemType::F64 => format!("{:?} (0x{bits:016x})", f64::from_bits(bits)),
        ElemType::Ptr => format!("0x{bits:x}"),
        ElemType::Untyped => format!("0x{bits:02x}"),
        t => format!("{}", number(t, bits) as i64),
    }
}

/// The distance of two elements: ulps for floats (0 when both are NaN, the largest when only one
/// is or for different infinities), the absolute difference for everything else.
fn distance(ty: ElemType, a: u64, b: u64) -> u64 {
    if a == b {
        return 0;
    }
    if ty.is_float() {
        let (na, nb) = (is_nan(ty, a), is_nan(ty, b));
        if na && nb {
            return 0;
        }
        if na || nb {
            return u64::MAX;
        }
        // An infinity is only ever its own neighbour.
        if float_value(ty, a).is_infinite() || float_value(ty, b).is_infinite() {
            return u64::MAX;
        }
        return (ordered(ty, a) - ordered(ty, b)).unsigned_abs().min(u64::MAX as u128) as u64;
    }
    let d = number(ty, a) - number(ty, b);
    d.abs().min(u64::MAX as f64) as u64
}

/// What one region's check is given.
pub struct RegionInput<'x> {
    pub region: RegionId,
    pub name: &'x str,
    pub dtype: DType,
    /// The typed layout, where the archive has one.
    pub layout: Option<&'x [Stretch]>,
    /// The final bytes of the replay judged.
    pub got: &'x [u8],
    /// The final bytes of more replays of the same archive on the same device (for the spread).
    pub others: &'x [&'x [u8]],
    pub want: &'x [u8],
    pub tolerance: Tolerance,
    pub over: ToleranceOverride,
    /// The spread of repeated runs at capture that the archive records for this region.
    pub recorded: &'x [crate::archive::RecordedSpread],
    /// What the program's arrays declared of this region's bytes (sorted, not overlapping).
    pub declared: &'x [DeclaredType],
}

/// The stretches a region is judged in: its typed layout, where untyped stretches take the
/// types the program's arrays declared, and what is left the region's declared dtype where it
/// fits; without a layout, the same over the whole region.
pub fn stretches(
    dtype: DType,
    size: u64,
    layout: Option<&[Stretch]>,
    declared: &[DeclaredType],
) -> Vec<(u64, Stretch, TypeSource)> {
    let declared_dtype = ElemType::of_dtype(dtype);
    let mut out = Vec::new();
    // An untyped stretch at `offset`: the declared pieces inside it, the rest as the region's
    // dtype where it fits, else untyped.
    let untyped = |offset: u64, len: u64, out: &mut Vec<(u64, Stretch, TypeSource)>| {
        let fill = |at: u64, len: u64, out: &mut Vec<(u64, Stretch, TypeSource)>| {
            if len == 0 {
                return;
            }
            match declared_dtype {
                Some(t) if len.is_multiple_of(t.size() as u64) => {
                    out.push((at, Stretch { len, ty: t }, TypeSource::Declared))
                }
                _ => out.push((at, Stretch { len, ty: ElemType::Untyped }, TypeSource::None)),
            }
        };
        let end = offset + len;
        let mut at = offset;
        for d in declared.iter().filter(|d| d.offset < end && d.offset + d.len > offset) {
            // Whole elements of the array inside the stretch.
            let grid = d.ty.size() as u64;
            let lo = d.offset + offset.saturating_sub(d.offset).div_ceil(grid) * grid;
            let hi = d.offset + ((end.min(d.offset + d.len)) - d.offset) / grid * grid;
            if lo >= hi || lo < at {
                continue;
            }
            fill(at, lo - at, out);
            out.push((lo, Stretch { len: hi - lo, ty: d.ty }, TypeSource::Program));
            at = hi;
        }
        fill(at, end - at, out);
    };
    match layout {
        Some(l) if l.iter().map(|s| s.len).sum::<u64>() == size => {
            let mut offset = 0u64;
            for s in l {
                if s.ty == ElemType::Untyped {
                    untyped(offset, s.len, &mut out);
                } else {
                    out.push((offset, *s, TypeSource::Ptx));
                }
                offset += s.len;
            }
        }
        _ => untyped(0, size, &mut out),
    }
    out
}

/// The float tolerance of a stretch of type `ty` in a region whose archive tolerance is
/// `tolerance`, with `over` on top.
fn float_tolerance(ty: ElemType, tolerance: Tolerance, over: ToleranceOverride) -> FloatTolerance {
    let mut t = FloatTolerance::default_for(ty);
    if let Tolerance::Close { rtol, atol } = tolerance {
        t.rtol = rtol;
        t.atol = atol;
    }
    FloatTolerance {
        ulps: over.ulps.unwrap_or(t.ulps),
        rtol: over.rtol.unwrap_or(t.rtol),
        atol: over.atol.unwrap_or(t.atol),
    }
}

fn judge_stretch(input: &RegionInput<'_>, offset: u64, s: Stretch, typed_by: TypeSource) -> StretchCheck {
    let ty = s.ty;
    let size = ty.size();
    let range = offset as usize..(offset + s.len) as usize;
    let (got, want) = (&input.got[range.clone()], &input.want[range.clone()]);
    let others: Vec<&[u8]> = input.others.iter().map(|o| &o[range.clone()]).collect();
    let count = s.len as usize / size;

    // The replays' own disagreement.
    let mut spread = Spread { ulps: 0, abs: 0.0, elements: 0 };
    for i in 0..count {
        let g = bits_at(got, size, i);
        let mut differs = false;
        for o in &others {
            let b = bits_at(o, size, i);
            if b != g {
                differs = true;
                spread.ulps = spread.ulps.max(distance(ty, g, b));
                let d = (number(ty, g) - number(ty, b)).abs();
                if d.is_finite() {
                    spread.abs = spread.abs.max(d);
                }
            }
        }
        spread.elements += differs as u64;
    }
    let spread = (spread.elements > 0).then_some(spread);
    // What the archive records of the program's own repeated runs over these bytes.
    let end = offset + s.len;
    let recorded_spread = input.recorded.iter().filter(|r| r.offset < end && r.offset + r.len > offset).fold(
        None,
        |acc: Option<Spread>, r| {
            let a = acc.unwrap_or(Spread { ulps: 0, abs: 0.0, elements: 0 });
            Some(Spread { ulps: a.ulps.max(r.ulps), abs: a.abs.max(r.abs), elements: a.elements + r.elements })
        },
    );
    // The widest disagreement seen, in this check's replays or at capture.
    let widest = match (spread, recorded_spread) {
        (Some(a), Some(b)) => Some(Spread { ulps: a.ulps.max(b.ulps), abs: a.abs.max(b.abs), elements: a.elements }),
        (a, b) => a.or(b),
    };

    let mut tolerance = ty.is_float().then(|| float_tolerance(ty, input.tolerance, input.over));
    // Widened in value, not in ulps: the spread's largest difference covers every difference
    // the runs showed, while its ulps come from the elements nearest zero (a sum that cancels)
    // and would pass a large element far off.
    if let (Some(t), Some(sp)) = (&mut tolerance, widest) {
        t.atol = t.atol.max(sp.abs);
    }
    let mut out = StretchCheck {
        offset,
        len: s.len,
        ty,
        typed_by,
        outcome: Outcome::Exact,
        elements: count as u64,
        inexact: 0,
        differing: 0,
        tolerance,
        max_ulps: 0,
        max_abs: 0.0,
        max_rel: 0.0,
        first: None,
        spread,
        recorded_spread,
        ulp_histogram: Vec::new(),
    };
    for i in 0..count {
        let (g, w) = (bits_at(got, size, i), bits_at(want, size, i));
        if g == w {
            continue;
        }
        out.inexact += 1;
        let (gv, wv) = (number(ty, g), number(ty, w));
        let dist = distance(ty, g, w);
        if ty.is_float() && dist != u64::MAX {
            out.max_ulps = out.max_ulps.max(dist);
            let bucket = (64 - dist.leading_zeros()) as usize;
            if out.ulp_histogram.len() <= bucket {
                out.ulp_histogram.resize(bucket + 1, 0);
            }
            out.ulp_histogram[bucket] += 1;
        }
        if gv.is_finite() && wv.is_finite() && ty != ElemType::Untyped {
            let abs = (gv - wv).abs();
            out.max_abs = out.max_abs.max(abs);
            if wv != 0.0 {
                out.max_rel = out.max_rel.max(abs / wv.abs());
            }
        }
        let ok = match (&tolerance, widest) {
            (Some(t), _) => {
                (is_nan(ty, g) && is_nan(ty, w))
                    || dist <= t.ulps
                    || (gv.is_finite() && wv.is_finite() && (gv - wv).abs() <= t.atol + t.rtol * wv.abs())
            }
            // Integers, pointers and bytes are exact, unless the replays themselves disagreed:
            // then any value one of them gave passes, and integers within their spread.
            (None, Some(sp)) => {
                others.iter().any(|o| bits_at(o, size, i) == w)
                    || (recorded_spread.is_some() && ty != ElemType::Untyped && dist <= sp.ulps)
                    || (ty != ElemType::Untyped && ty != ElemType::Ptr && (gv - wv).abs() <= sp.abs)
            }
            (None, None) => false,
        };
        if !ok {
            out.differing += 1;
            if out.first.is_none() {
                let byte = offset + (i * size) as u64;
                out.first = Some(ElementDiff {
                    index: byte / size as u64,
                    offset: byte,
                    got: format_element(ty, g),
                    want: format_element(ty, w),
                    got_value: (ty != ElemType::Untyped && gv.is_finite()).then_some(gv),
                    want_value: (ty != ElemType::Untyped && wv.is_finite()).then_some(wv),
                });
            }
        }
    }
    out.outcome = if out.differing > 0 {
        Outcome::Differ
    } else if out.inexact > 0 {
        Outcome::Within
    } else {
        Outcome::Exact
    };
    out
}

/// Judges one region's final bytes against its expected bytes: THE verdict.
pub fn check_region(input: &RegionInput<'_>) -> RegionCheck {
    let mut out = RegionCheck {
        region: input.region,
        name: input.name.to_string(),
        passed: false,
        stretches: Vec::new(),
        error: None,
        tolerance: input.tolerance,
    };
    if input.got.len() != input.want.len() || input.others.iter().any(|o| o.len() != input.got.len()) {
        let other = input.others.iter().find(|o| o.len() != input.got.len()).map(|o| o.len());
        out.error = Some(match other {
            Some(n) if input.got.len() == input.want.len() => {
                format!("one replay's final state is {n} bytes but another's is {}", input.got.len())
            }
            _ => format!("final state is {} bytes but {} are expected", input.got.len(), input.want.len()),
        });
        return out;
    }
    for (offset, s, source) in stretches(input.dtype, input.got.len() as u64, input.layout, input.declared) {
        out.stretches.push(judge_stretch(input, offset, s, source));
    }
    out.passed = match input.tolerance {
        Tolerance::MismatchFraction { max_fraction } => {
            let n = out.elements();
            n == 0 || (out.mismatches() as f64) <= max_fraction * n as f64
        }
        _ => out.stretches.iter().all(|s| s.outcome != Outcome::Differ),
    };
    out
}

impl Spread {
    /// `WHO disagree on N elements by up to U ulps (|d| X)`: ulps for floats, values otherwise.
    pub fn describe(&self, who: &str, ty: ElemType) -> String {
        let by = if ty.is_float() { format!("{} ulps", self.ulps) } else { self.ulps.to_string() };
        format!("{who} disagree on {} elements by up to {by} (|d| {:.3e})", self.elements, self.abs)
    }
}

impl StretchCheck {
    /// What makes it nondeterministic, a clause each: its replays' spread, the program's own
    /// recorded at capture.
    pub fn spread_clauses(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(sp) = self.spread {
            out.push(format!("nondeterministic: {}", sp.describe("replays", self.ty)));
        }
        if let Some(sp) = self.recorded_spread {
            out.push(format!("nondeterministic at capture: {}", sp.describe("the program's repeated runs", self.ty)));
        }
        out
    }

    /// One clause: `bytes 0..64 f32 (ptx): 16 elements within 4 ulps or rtol 1e-5 ...`.
    pub fn detail(&self) -> String {
        let what = format!(
            "bytes {}..{} {}{}",
            self.offset,
            self.offset + self.len,
            self.ty.name(),
            match self.typed_by {
                TypeSource::Ptx => "",
                TypeSource::Declared => " (declared)",
                TypeSource::Program => " (the program's array)",
                TypeSource::None => " (no PTX wrote it)",
            }
        );
        let tol = match &self.tolerance {
            Some(t) => format!("{} ulps or atol {:e} + rtol {:e}", t.ulps, t.atol, t.rtol),
            None => "exact".to_string(),
        };
        let nondet: String = self.spread_clauses().iter().map(|c| format!(", {c}")).collect();
        match self.outcome {
            Outcome::Exact => format!("{what}: {} elements bit-exact{nondet}", self.elements),
            Outcome::Within => format!(
                "{what}: {} of {} elements inexact, within {tol} (max {} ulps, max abs err {:.3e}, max rel err {:.3e}){nondet}",
                self.inexact, self.elements, self.max_ulps, self.max_abs, self.max_rel
            ),
            Outcome::Differ => {
                let mut s = format!("{what}: {} of {} elements differ beyond {tol}", self.differing, self.elements);
                if let Some(f) = &self.first {
                    s.push_str(&format!("; first at element {} (byte {}): got {}, want {}", f.index, f.offset, f.got, f.want));
                }
                s + &nondet
            }
        }
    }
}

/// A replay's verdict over the archive: every region with an expected state, judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub state: CheckState,
    pub regions: Vec<RegionCheck>,
    /// Replays judged together (more than one with `--determinism`).
    pub replays: u32,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.state.passed()
    }
}

/// Judges every region of `archive` that has an expected state: `read` gives a region's final
/// bytes in the replay judged, `others` the same regions' final bytes of more replays (each a list
/// of `(region, bytes)`; regions missing from one are not compared with it).
pub fn judge<E>(
    archive: &Archive<'_>,
    options: &CheckOptions,
    read: &mut dyn FnMut(RegionId) -> Result<Vec<u8>, E>,
    others: &[Vec<(RegionId, Vec<u8>)>],
) -> Result<Verdict, E> {
    let mut regions = Vec::new();
    // Declared types that do not fit the archive fail every region: no verdict is given in types
    // the archive cannot vouch for.
    let (declared, declared_error) = match crate::archive::declared::of_archive(archive) {
        Ok(d) => (d, None),
        Err(e) => (Default::default(), Some(e.to_string())),
    };
    for view in archive.regions() {
        let (Some(expected), Some(tolerance)) = (view.expected, view.tolerance) else { continue };
        let decoded = match &declared_error {
            Some(e) => Err(e.clone()),
            None => expected.decode().map_err(|e| format!("its expected state cannot be read: {e}")),
        };
        let want = match decoded {
            Ok(w) => w,
            Err(e) => {
                regions.push(RegionCheck {
                    region: view.id,
                    name: view.name.to_string(),
                    passed: false,
                    stretches: Vec::new(),
                    error: Some(e),
                    tolerance,
                });
                continue;
            }
        };
        let got = read(view.id)?;
        let other: Vec<&[u8]> =
            others.iter().filter_map(|o| o.iter().find(|(r, _)| *r == view.id).map(|(_, b)| b.as_slice())).collect();
        let layout = archive.typed_layout(view.id);
        let recorded = archive.recorded_spread(view.id);
        regions.push(check_region(&RegionInput {
            region: view.id,
            name: view.name,
            dtype: view.dtype,
            layout: layout.as_deref(),
            got: &got,
            others: &other,
            want: &want,
            tolerance,
            over: options.for_region(archive, view.id),
            recorded: &recorded,
            declared: declared.get(&view.id).map_or(&[], |d| d.as_slice()),
        }));
    }
    Ok(Verdict { state: CheckState::of(&regions), regions, replays: 1 + others.len() as u32 })
}

/// The regions [`judge`] reads: those with an expected state.
pub fn checked_regions(archive: &Archive<'_>) -> Vec<RegionId> {
    archive.regions().filter(|r| r.expected.is_some() && r.tolerance.is_some()).map(|r| r.id).collect()
}

/// Reads element `i` of `bytes` as `dtype`, widened to `f64`.
pub fn element(bytes: &[u8], dtype: DType, i: usize) -> f64 {
    let n = dtype.size();
    let b = &bytes[i * n..i * n + n];
    match dtype {
        DType::Bytes | DType::U8 => b[0] as f64,
        DType::I8 => b[0] as i8 as f64,
        DType::U16 => u16::from_le_bytes([b[0], b[1]]) as f64,
        DType::I16 => i16::from_le_bytes([b[0], b[1]]) as f64,
        DType::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::Bf16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::U32 => u32::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::I32 => i32::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::U64 => u64::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::I64 => i64::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
    }
}

/// The dtype elements are read as: raw bytes when the length does not divide into elements.
pub(crate) fn effective_dtype(dtype: DType, len: usize) -> DType {
    if len.is_multiple_of(dtype.size()) {
        dtype
    } else {
        DType::Bytes
    }
}
