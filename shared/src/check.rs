//! Judging a replay's final regions against an archive's expected bytes, and summarising regions.
//!
//! Elements are read by the region's [`DType`] and widened to `f64` for comparison and reporting:
//! every integer up to 2^53 and every float is exact in an `f64`, and larger 64-bit integers are
//! only ever compared bitwise by the exact and mismatch-fraction tolerances, so the widening never
//! turns a real difference into a pass. A region whose size is not a multiple of its element size
//! is judged as raw bytes.

use serde::{Deserialize, Serialize};

use crate::archive::{DType, RegionId, Tolerance};

/// The verdict on one region.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionCheck {
    pub region: RegionId,
    pub name: String,
    pub passed: bool,
    /// Elements compared (bytes for raw-byte regions).
    pub elements: u64,
    /// Elements outside the tolerance (for `Exact` and `MismatchFraction`: not bitwise equal).
    pub mismatches: u64,
    /// Largest `|got - want|` over elements where both are finite (0 when there are none).
    pub max_abs_err: f64,
    /// Largest `|got - want| / |want|` over elements where both are finite and `want != 0`.
    pub max_rel_err: f64,
    /// `(element index, got, want)` of the first element outside the tolerance.
    pub first_mismatch: Option<(u64, f64, f64)>,
    /// Set when the comparison could not be made at all (the two sides differ in length).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub tolerance: Tolerance,
}

impl RegionCheck {
    /// One line: `PASS x: ...` or `FAIL x: ...`, what the CLI prints per region.
    pub fn line(&self) -> String {
        format!("{} {}: {}", if self.passed { "PASS" } else { "FAIL" }, self.name, self.detail())
    }

    /// What the verdict rests on, without the name.
    pub fn detail(&self) -> String {
        if let Some(e) = &self.error {
            return e.clone();
        }
        let tol = match self.tolerance {
            Tolerance::Exact => "exact".to_string(),
            Tolerance::Close { rtol, atol } => format!("rtol {rtol:e} atol {atol:e}"),
            Tolerance::MismatchFraction { max_fraction } => format!("at most {:.4}% differing", max_fraction * 100.0),
        };
        let errs = format!("max abs err {:.3e}, max rel err {:.3e}", self.max_abs_err, self.max_rel_err);
        if self.mismatches == 0 {
            return format!("{} elements within {tol} ({errs})", self.elements);
        }
        let mut s = format!("{} of {} elements differ ({tol}; {errs})", self.mismatches, self.elements);
        if let Some((i, got, want)) = self.first_mismatch {
            s.push_str(&format!("; first at element {i}: got {got}, want {want}"));
        }
        s
    }
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

/// Whether `got` is within `|got - want| <= atol + rtol * |want|`; NaN matches NaN and an
/// infinity matches only the same infinity.
pub fn close(got: f64, want: f64, rtol: f64, atol: f64) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if got.is_infinite() || want.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= atol + rtol * want.abs()
}

/// Compares a region's final bytes `got` with its expected bytes `want` under `tolerance`.
pub fn check_region(
    region: RegionId,
    name: &str,
    dtype: DType,
    got: &[u8],
    want: &[u8],
    tolerance: Tolerance,
) -> RegionCheck {
    let mut out = RegionCheck {
        region,
        name: name.to_string(),
        passed: false,
        elements: 0,
        mismatches: 0,
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        first_mismatch: None,
        error: None,
        tolerance,
    };
    if got.len() != want.len() {
        out.error = Some(format!("final state is {} bytes but {} are expected", got.len(), want.len()));
        return out;
    }
    let dtype = effective_dtype(dtype, got.len());
    let size = dtype.size();
    let count = got.len() / size;
    out.elements = count as u64;
    for i in 0..count {
        let bitwise_equal = got[i * size..(i + 1) * size] == want[i * size..(i + 1) * size];
        let g = element(got, dtype, i);
        let w = element(want, dtype, i);
        if g.is_finite() && w.is_finite() {
            let abs = (g - w).abs();
            out.max_abs_err = out.max_abs_err.max(abs);
            if w != 0.0 {
                out.max_rel_err = out.max_rel_err.max(abs / w.abs());
            }
        }
        let ok = match tolerance {
            Tolerance::Exact | Tolerance::MismatchFraction { .. } => bitwise_equal,
            Tolerance::Close { rtol, atol } => bitwise_equal || close(g, w, rtol, atol),
        };
        if !ok {
            out.mismatches += 1;
            if out.first_mismatch.is_none() {
                out.first_mismatch = Some((i as u64, g, w));
            }
        }
    }
    out.passed = match tolerance {
        Tolerance::Exact | Tolerance::Close { .. } => out.mismatches == 0,
        Tolerance::MismatchFraction { max_fraction } => {
            count == 0 || (out.mismatches as f64) <= max_fraction * count as f64
        }
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn exact_counts_differing_elements_and_reports_the_first() {
        let want = f32s(&[1.0, 2.0, 3.0, 4.0]);
        let got = f32s(&[1.0, 2.5, 3.0, 5.0]);
        let c = check_region(3, "y", DType::F32, &got, &want, Tolerance::Exact);
        assert!(!c.passed);
        assert_eq!((c.elements, c.mismatches), (4, 2));
        assert_eq!(c.first_mismatch, Some((1, 2.5, 2.0)));
        assert_eq!(c.max_abs_err, 1.0);
        assert_eq!(c.max_rel_err, 0.25);
        assert!(c.line().starts_with("FAIL y: 2 of 4 elements differ"), "{}", c.line());
        let same = check_region(3, "y", DType::F32, &want, &want, Tolerance::Exact);
        assert!(same.passed && same.mismatches == 0 && same.first_mismatch.is_none());
        assert!(same.line().starts_with("PASS y:"));
    }

    #[test]
    fn exact_is_bitwise_so_negative_zero_and_nan_payloads_count() {
        let want = f32s(&[0.0, f32::from_bits(0x7fc0_0000)]);
        let got = f32s(&[-0.0, f32::from_bits(0x7fc0_0001)]);
        let c = check_region(0, "z", DType::F32, &got, &want, Tolerance::Exact);
        assert_eq!(c.mismatches, 2);
        // Close treats them as equal: -0 == 0 and NaN matches NaN.
        let c = check_region(0, "z", DType::F32, &got, &want, Tolerance::Close { rtol: 0.0, atol: 0.0 });
        assert!(c.passed, "{}", c.line());
    }

    #[test]
    fn close_uses_atol_plus_rtol_times_want() {
        let tol = Tolerance::Close { rtol: 1e-3, atol: 1e-6 };
        let want = f32s(&[1000.0, 0.0]);
        let inside = f32s(&[1000.9, 0.0000009]);
        let outside = f32s(&[1001.2, 0.0000009]);
        assert!(check_region(0, "a", DType::F32, &inside, &want, tol).passed);
        let c = check_region(0, "a", DType::F32, &outside, &want, tol);
        assert!(!c.passed);
        assert_eq!(c.first_mismatch.unwrap().0, 0);
    }

    #[test]
    fn close_matches_nan_with_nan_and_infinities_only_with_themselves() {
        let tol = Tolerance::Close { rtol: 1.0, atol: 1.0 };
        assert!(close(f64::NAN, f64::NAN, 0.0, 0.0));
        assert!(!close(f64::NAN, 1.0, 1.0, 1.0));
        assert!(!close(1.0, f64::NAN, 1.0, 1.0));
        assert!(close(f64::INFINITY, f64::INFINITY, 0.0, 0.0));
        assert!(!close(f64::INFINITY, f64::NEG_INFINITY, 1.0, 1.0));
        assert!(!close(f64::INFINITY, 1e300, 1.0, 1.0));
        let c = check_region(0, "a", DType::F32, &f32s(&[f32::INFINITY]), &f32s(&[f32::MAX]), tol);
        assert!(!c.passed);
        // Infinite differences are not folded into the error maxima.
        assert_eq!(c.max_abs_err, 0.0);
    }

    #[test]
    fn close_reads_every_float_width() {
        let tol = Tolerance::Close { rtol: 0.0, atol: 0.01 };
        let h = |v: f32| half::f16::from_f32(v).to_le_bytes().to_vec();
        let b = |v: f32| half::bf16::from_f32(v).to_le_bytes().to_vec();
        assert!(check_region(0, "h", DType::F16, &h(1.0), &h(1.005), tol).passed);
        assert!(!check_region(0, "h", DType::F16, &h(1.0), &h(1.5), tol).passed);
        assert!(!check_region(0, "b", DType::Bf16, &b(1.0), &b(2.0), tol).passed);
        let d = |v: f64| v.to_le_bytes().to_vec();
        assert!(check_region(0, "d", DType::F64, &d(1.0), &d(1.001), tol).passed);
        assert!(!check_region(0, "d", DType::F64, &d(1.0), &d(1.1), tol).passed);
    }

    #[test]
    fn integers_are_signed_by_dtype() {
        let got = (-1i32).to_le_bytes();
        let want = 1i32.to_le_bytes();
        let c = check_region(0, "i", DType::I32, &got, &want, Tolerance::Close { rtol: 0.0, atol: 2.0 });
        assert!(c.passed, "{}", c.line());
        let c = check_region(0, "u", DType::U32, &got, &want, Tolerance::Close { rtol: 0.0, atol: 2.0 });
        assert!(!c.passed);
        assert_eq!(c.first_mismatch, Some((0, u32::MAX as f64, 1.0)));
    }

    #[test]
    fn mismatch_fraction_bounds_the_share_of_differing_elements() {
        let want: Vec<u8> = (0..100u32).flat_map(|v| v.to_le_bytes()).collect();
        let mut got = want.clone();
        got[0] ^= 1;
        got[4 * 50] ^= 1;
        let tol = |f| Tolerance::MismatchFraction { max_fraction: f };
        assert!(check_region(0, "m", DType::U32, &got, &want, tol(0.02)).passed);
        let c = check_region(0, "m", DType::U32, &got, &want, tol(0.019));
        assert!(!c.passed);
        assert_eq!((c.elements, c.mismatches), (100, 2));
    }

    #[test]
    fn lengths_that_differ_fail_with_a_reason() {
        let c = check_region(0, "x", DType::F32, &[0; 8], &[0; 4], Tolerance::Exact);
        assert!(!c.passed);
        assert_eq!(c.line(), "FAIL x: final state is 8 bytes but 4 are expected");
    }

    #[test]
    fn a_ragged_region_is_judged_as_bytes() {
        let c = check_region(0, "r", DType::F32, &[1, 2, 3, 4, 5], &[1, 2, 3, 4, 6], Tolerance::Exact);
        assert_eq!((c.elements, c.mismatches), (5, 1));
        assert_eq!(c.first_mismatch, Some((4, 5.0, 6.0)));
    }

    #[test]
    fn check_serialises_to_json() {
        let c = check_region(7, "y", DType::F32, &f32s(&[1.0]), &f32s(&[2.0]), Tolerance::Exact);
        let v: serde_json::Value = serde_json::to_value(&c).unwrap();
        assert_eq!(v["region"], 7);
        assert_eq!(v["passed"], false);
        assert_eq!(v["first_mismatch"], serde_json::json!([0, 1.0, 2.0]));
        assert_eq!(v["tolerance"]["kind"], "exact");
        let back: RegionCheck = serde_json::from_value(v).unwrap();
        assert_eq!(back, c);
    }
}
