//! The special-function unit of sm_90 (`MUFU`), bit for bit, and the PTX forms built on it.
//!
//! **What the GPU runs.** ptxas compiles `ex2.approx.ftz.f32`, `rcp.approx.ftz.f32`,
//! `rsqrt.approx.ftz.f32` and `sqrt.approx.ftz.f32` to one `MUFU` instruction each (`EX2`, `RCP`,
//! `RSQ`, `SQRT`), which flushes subnormal inputs and results to zero. The forms without `.ftz`
//! wrap it in scalings (seen in the SASS of `tests/numerics/sfu_probe.cu`): `ex2.approx.f32`
//! halves an argument below -126 and squares the result; `rcp.approx.f32` multiplies an argument
//! below 2^-126 in magnitude by 2^24 (above 2^126 by 1/4) and the result by the same factor;
//! `rsqrt` and `sqrt` multiply a subnormal argument by 2^24 and the result by 2^12 and 2^-12.
//! `div.full.f32` is not IEEE division: it scales both operands by 1/4 when the divisor is above
//! 2^126 and by 2^24 when it is below 2^-126, takes `MUFU.RCP` of the divisor and multiplies
//! (rounded to nearest) by the dividend.
//!
//! **The unit.** Each function depends on a limited index, so one table per function holds its
//! result for one reference binade, and exponent arithmetic does the rest: `RCP` on the 23
//! significand bits ([1, 2)), `RSQ` and `SQRT` on the significand and the exponent's parity ([1,
//! 4)), `EX2` on the argument's fixed-point fraction: |x| is cut to 23 fraction bits (toward zero)
//! and a negative argument's fixed-point value is its one's complement (its two's complement when
//! the fraction is zero), so 2^x = 2^i * T[f] with i the integer part and f the fraction of that
//! value. A table is a piecewise quadratic in its
//! index (128 segments, f64 coefficients) plus a residual per index, a small integer that is zero
//! for 98-99.5% of them: the unit's own interpolator truncates its partial products in ways the
//! quadratic does not model, and the residual carries that difference. Tables and residuals are
//! fitted by `tests/numerics/sfu_fit.py` from the probe's outputs and live in `sfu_tables/`
//! (zstd, 130-290 KB each), decompressed on first use (8 or 16 MiB of `i8` each).
//!
//! **Evidence.** Every function here matches an H200 on all 2^32 inputs (per-chunk hashes of the
//! probe, `sfu_exhaustive`), and `tests/numerics/sfu_sample.bin` (16,384 inputs per form, the
//! hardware's outputs) is checked on every test run.

use std::cell::Cell;
use std::io::Read;
use std::sync::OnceLock;

use super::tensor_core::MmaModel;

/// The canonical NaN the unit writes.
const NAN: u32 = 0x7FFF_FFFF;
/// 2^-126, the least normal f32, and 2^126, above which `rcp` and `div.full` scale down.
const MIN_NORMAL: f32 = f32::MIN_POSITIVE;
const BIG: f32 = 8.507_059e37;

/// How the CPU computes the `.approx` special functions and `div.full.f32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SfuModel {
    /// IEEE functions, correctly rounded or nearly so (within PTX's stated bounds).
    #[default]
    Ieee,
    /// Hopper's special-function unit, as measured on an H200.
    Sm90,
}

impl SfuModel {
    /// The model's name (`ieee`, `sm90`).
    pub fn name(self) -> &'static str {
        match self {
            SfuModel::Ieee => "ieee",
            SfuModel::Sm90 => "sm90",
        }
    }

    /// The special-function model that goes with a tensor-core model: a launch names one GPU
    /// generation for both. Only sm_90's unit is measured; Ampere's launches keep IEEE functions.
    pub fn for_mma(m: MmaModel) -> SfuModel {
        match m {
            MmaModel::Sm90 => SfuModel::Sm90,
            MmaModel::Ieee | MmaModel::Sm80 => SfuModel::Ieee,
        }
    }
}

thread_local! {
    static ACTIVE: Cell<SfuModel> = const { Cell::new(SfuModel::Ieee) };
}

/// The model of the launch running on this thread. Both engines read it through the one
/// arithmetic of `ops.rs`; a launch sets it on each worker thread for the time it runs blocks
/// ([`Active`]).
#[inline]
pub(crate) fn active() -> SfuModel {
    ACTIVE.with(|a| a.get())
}

/// Sets the thread's model for as long as it lives and restores the previous one after.
pub(crate) struct Active(SfuModel);

impl Active {
    pub(crate) fn set(model: SfuModel) -> Active {
        Active(ACTIVE.with(|a| a.replace(model)))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(self.0));
    }
}

/// One function's table: the result bits for index `i` are the quadratic of `i`'s segment at
/// `i`'s offset in it, rounded to the nearest integer, plus `residual[i]`.
struct Table {
    seg_shift: u32,
    coef: Vec<[f64; 3]>,
    residual: Vec<i8>,
}

impl Table {
    /// Reads `sfu_fit.py`'s format: `SFUT`, version 1, log2 of the entries, log2 of the segments,
    /// the segments' (c0, c1, c2) as f64, the compressed residuals' length and the zstd frame.
    fn parse(bytes: &[u8]) -> Result<Table, String> {
        let word = |at: usize| -> Result<u32, String> {
            bytes
                .get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(|| format!("table truncated at byte {at}"))
        };
        if bytes.get(..4) != Some(b"SFUT") || word(4)? != 1 {
            return Err("not a version 1 table".into());
        }
        let (n, m) = (word(8)?, word(12)?);
        if n > 24 || m > n {
            return Err(format!("table of 2^{n} entries in 2^{m} segments"));
        }
        let mut at = 16;
        let mut coef = Vec::with_capacity(1 << m);
        for _ in 0..1usize << m {
            let mut c = [0.0; 3];
            for v in &mut c {
                let b = bytes.get(at..at + 8).ok_or_else(|| format!("table truncated at byte {at}"))?;
                *v = f64::from_le_bytes(b.try_into().map_err(|_| "coefficient")?);
                at += 8;
            }
            coef.push(c);
        }
        let len = word(at)? as usize;
        let frame = bytes.get(at + 4..at + 4 + len).ok_or("residuals truncated")?;
        let mut dec = ruzstd::decoding::StreamingDecoder::new(frame).map_err(|e| e.to_string())?;
        let mut raw = Vec::with_capacity(1 << n);
        (&mut dec).take((1u64 << n) + 1).read_to_end(&mut raw).map_err(|e| e.to_string())?;
        if raw.len() != 1 << n {
            return Err(format!("{} residuals, want 2^{n}", raw.len()));
        }
        Ok(Table { seg_shift: n - m, coef, residual: raw.into_iter().map(|b| b as i8).collect() })
    }

    #[inline]
    fn get(&self, i: u32) -> i64 {
        let c = &self.coef[(i >> self.seg_shift) as usize];
        let dx = (i & ((1 << self.seg_shift) - 1)) as f64;
        // Horner's rule, unfused, as the fitter evaluated it.
        let q = c[0] + dx * (c[1] + dx * c[2]);
        (q + 0.5).floor() as i64 + self.residual[i as usize] as i64
    }
}

macro_rules! table {
    ($name:ident, $file:literal) => {
        fn $name() -> &'static Table {
            static T: OnceLock<Table> = OnceLock::new();
            T.get_or_init(|| {
                // The tables are compiled in; `tables_parse` checks every one of them.
                Table::parse(include_bytes!(concat!("sfu_tables/", $file)))
                    .unwrap_or_else(|e| unreachable!("sfu_tables/{}: {e}", $file))
            })
        }
    };
}
table!(rcp_table, "rcp.sfu");
table!(rsq_table, "rsq.sfu");
table!(sqrt_table, "sqrt.sfu");
table!(ex2_table, "ex2.sfu");

#[inline]
fn parts(x: u32) -> (u32, i32, u32) {
    (x & 0x8000_0000, ((x >> 23) & 0xFF) as i32, x & 0x7F_FFFF)
}

/// `MUFU.RCP`: 1/x, subnormals flushed.
pub(crate) fn mufu_rcp(x: u32) -> u32 {
    let (sign, e, m) = parts(x);
    match e {
        0 => sign | 0x7F80_0000,
        255 if m != 0 => NAN,
        255 => sign,
        _ => {
            // The table gives 1/1.m's bits in (0.5, 1]; dividing by 2^(e-127) is exponent arithmetic.
            let r = rcp_table().get(m) - (((e - 127) as i64) << 23);
            if r < 0x80_0000 {
                sign
            } else {
                sign | r as u32
            }
        }
    }
}

/// The reference index of a square root's table: the significand with the exponent's parity,
/// so that x = (1.m * 2^p) * 2^(2k); returns (index, k).
#[inline]
fn root_index(e: i32, m: u32) -> (u32, i64) {
    let p = (e - 127) & 1;
    (((p as u32) << 23) | m, ((e - 127 - p) / 2) as i64)
}

/// `MUFU.RSQ`: 1/sqrt(x), subnormals flushed.
pub(crate) fn mufu_rsq(x: u32) -> u32 {
    let (sign, e, m) = parts(x);
    match (sign != 0, e) {
        (_, 0) => sign | 0x7F80_0000,
        (_, 255) if m != 0 => NAN,
        (false, 255) => 0,
        (true, _) => NAN,
        (false, _) => {
            let (i, k) = root_index(e, m);
            (rsq_table().get(i) - (k << 23)) as u32
        }
    }
}

/// `MUFU.SQRT`: sqrt(x), subnormals flushed.
pub(crate) fn mufu_sqrt(x: u32) -> u32 {
    let (sign, e, m) = parts(x);
    match (sign != 0, e) {
        (_, 0) => sign,
        (_, 255) if m != 0 => NAN,
        (false, 255) => 0x7F80_0000,
        (true, _) => NAN,
        (false, _) => {
            let (i, k) = root_index(e, m);
            (sqrt_table().get(i) + (k << 23)) as u32
        }
    }
}

/// `MUFU.EX2`: 2^x on the argument's fixed-point value (23 fraction bits, magnitude cut toward
/// zero, a negative value's fraction in one's complement), subnormals flushed.
pub(crate) fn mufu_ex2(x: u32) -> u32 {
    let (sign, e, m) = parts(x);
    if e == 255 && m != 0 {
        return NAN;
    }
    if e == 0 {
        return 0x3F80_0000;
    }
    // |x| >= 256 (infinities too) is far past either end of the range.
    if e >= 127 + 8 {
        return if sign != 0 { 0 } else { 0x7F80_0000 };
    }
    let mag = (0x80_0000 | m) as i64;
    let fixed = if e >= 127 { mag << (e - 127) } else { mag >> (127 - e).min(40) };
    // A negative value's fraction is complemented bit by bit (one's complement), except that a
    // whole number is negated exactly.
    let fixed = match (sign != 0, fixed & 0x7F_FFFF) {
        (false, _) => fixed,
        (true, 0) => -fixed,
        (true, _) => !fixed,
    };
    let (int, frac) = (fixed >> 23, (fixed & 0x7F_FFFF) as u32);
    // The table gives 2^(f/2^23) as the bits of a value in [1, 2].
    let r = ex2_table().get(frac) + (int << 23);
    if r < 0x80_0000 {
        0
    } else if r >= 0x7F80_0000 {
        0x7F80_0000
    } else {
        r as u32
    }
}

#[inline]
fn f(x: u32) -> f32 {
    f32::from_bits(x)
}

/// An f32 result as the GPU writes it: NaNs canonical.
#[inline]
fn bits(v: f32) -> u32 {
    if v.is_nan() {
        NAN
    } else {
        v.to_bits()
    }
}

/// `ex2.approx.f32` (`ftz`: `ex2.approx.ftz.f32`).
pub(crate) fn ex2(x: u32, ftz: bool) -> u32 {
    let v = f(x);
    if ftz || v >= -126.0 || v.is_nan() {
        return mufu_ex2(x);
    }
    // Halve the argument, square the result: the square may be subnormal.
    let h = f(mufu_ex2(bits(v * 0.5)));
    bits(h * h)
}

/// The factor `rcp.approx.f32` and `div.full.f32` scale a divisor of magnitude `a` by (and its
/// dividend, or the result, with it).
#[inline]
fn rcp_scale(a: f32) -> f32 {
    if a > BIG {
        0.25
    } else if a < MIN_NORMAL {
        16_777_216.0
    } else {
        1.0
    }
}

/// `rcp.approx.f32` (`ftz`: `rcp.approx.ftz.f32`).
pub(crate) fn rcp(x: u32, ftz: bool) -> u32 {
    if ftz {
        return mufu_rcp(x);
    }
    let v = f(x);
    let s = rcp_scale(v.abs());
    bits(s * f(mufu_rcp(bits(v * s))))
}

/// `div.full.f32` (not `div.full.ftz.f32`, which is not measured and keeps IEEE division).
pub(crate) fn div_full(a: u32, b: u32) -> u32 {
    let (a, b) = (f(a), f(b));
    let s = rcp_scale(b.abs());
    bits(f(mufu_rcp(bits(b * s))) * (a * s))
}

/// `rsqrt.approx.f32` (`ftz`: `rsqrt.approx.ftz.f32`).
pub(crate) fn rsqrt(x: u32, ftz: bool) -> u32 {
    let v = f(x);
    if ftz || v.abs() >= MIN_NORMAL || v.is_nan() {
        return mufu_rsq(x);
    }
    bits(f(mufu_rsq(bits(v * 16_777_216.0))) * 4096.0)
}

/// `sqrt.approx.f32` (`ftz`: `sqrt.approx.ftz.f32`).
pub(crate) fn sqrt(x: u32, ftz: bool) -> u32 {
    let v = f(x);
    if ftz || v.abs() >= MIN_NORMAL || v.is_nan() {
        return mufu_sqrt(x);
    }
    bits(f(mufu_sqrt(bits(v * 16_777_216.0))) * (1.0 / 4096.0))
}

#[cfg(test)]
#[path = "sfu_tests.rs"]
mod tests;
