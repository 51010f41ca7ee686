//! Numerics with PTX semantics: directed rounding, flush-to-zero, saturation, NaN rules,
//! conversions among all integer and float widths.
//!
//! Directed rounding (`.rz/.rm/.rp`) is exact for add, sub, mul, div, sqrt and f32 `fma`: the
//! operation is done in round-to-nearest, its exact error is recovered with an error-free
//! transformation (TwoSum, a fused multiply-add residual), and the result is stepped one ulp toward
//! the requested direction when the error points that way. `fma.{rz,rm,rp}.f64` and directed
//! conversions to f16/bf16 round to nearest (documented approximation).

use half::{bf16, f16};

use super::ir::{Cmp, Cvt, Fp8, Fp8Cvt, Rnd, Testp, Ty, F};
use super::numerics::sfu::{self, SfuModel};

pub(crate) const NAN32: u32 = 0x7FFF_FFFF;
pub(crate) const NAN64: u64 = 0x7FFF_FFFF_FFFF_FFFF;

#[inline]
pub(crate) fn f32v(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
#[inline]
pub(crate) fn f64v(x: u64) -> f64 {
    f64::from_bits(x)
}
#[inline]
pub(crate) fn b32(x: f32) -> u64 {
    if x.is_nan() {
        NAN32 as u64
    } else {
        x.to_bits() as u64
    }
}
#[inline]
pub(crate) fn b64(x: f64) -> u64 {
    if x.is_nan() {
        NAN64
    } else {
        x.to_bits()
    }
}
#[inline]
pub(crate) fn ftz32(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}
#[inline]
pub(crate) fn sat32(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}
#[inline]
pub(crate) fn sat64(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

fn next_up32(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        return x;
    }
    if x == 0.0 {
        return f32::from_bits(1);
    }
    let b = x.to_bits();
    f32::from_bits(if x > 0.0 { b + 1 } else { b - 1 })
}
fn next_down32(x: f32) -> f32 {
    -next_up32(-x)
}
fn next_up64(x: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        return x;
    }
    if x == 0.0 {
        return f64::from_bits(1);
    }
    let b = x.to_bits();
    f64::from_bits(if x > 0.0 { b + 1 } else { b - 1 })
}
fn next_down64(x: f64) -> f64 {
    -next_up64(-x)
}

/// Rounds the exact value `hi + lo` (|lo| small against hi, or a value of lo's sign standing for it)
/// to f32 in the given mode.
pub(crate) fn round_f32(hi: f64, lo: f64, mode: Rnd) -> f32 {
    let r = hi as f32;
    if hi.is_nan() || hi.is_infinite() {
        return r;
    }
    // Sign of (exact - r).
    let diff = hi - r as f64;
    let dir = if r.is_infinite() {
        // Overflowed in round-to-nearest: the exact value is below +inf / above -inf.
        if r > 0.0 {
            -1.0
        } else {
            1.0
        }
    } else if diff != 0.0 {
        diff
    } else {
        lo
    };
    match mode {
        Rnd::Rn => {
            if r.is_finite() && diff != 0.0 && lo != 0.0 {
                // Exactly halfway in f64 but not in exact arithmetic: lo decides.
                let ulp = (next_up32(r.abs()) - r.abs()) as f64;
                if (diff.abs() * 2.0 - ulp).abs() == 0.0 && (lo > 0.0) == (diff > 0.0) {
                    return if diff > 0.0 { next_up32(r) } else { next_down32(r) };
                }
            }
            r
        }
        Rnd::Rz => {
            if r > 0.0 && dir < 0.0 || r == f32::INFINITY {
                if r.is_infinite() {
                    f32::MAX
                } else {
                    next_down32(r)
                }
            } else if r < 0.0 && dir > 0.0 || r == f32::NEG_INFINITY {
                if r.is_infinite() {
                    f32::MIN
                } else {
                    next_up32(r)
                }
            } else if r == 0.0 && dir != 0.0 {
                0.0f32.copysign(hi as f32)
            } else {
                r
            }
        }
        Rnd::Rm => {
            if dir < 0.0 {
                if r == f32::INFINITY {
                    f32::MAX
                } else {
                    next_down32(r)
                }
            } else if r == f32::NEG_INFINITY && dir > 0.0 {
                f32::NEG_INFINITY
            } else {
                r
            }
        }
        Rnd::Rp => {
            if dir > 0.0 {
                if r == f32::NEG_INFINITY {
                    f32::MIN
                } else {
                    next_up32(r)
                }
            } else if r == f32::INFINITY && dir < 0.0 {
                f32::INFINITY
            } else {
                r
            }
        }
    }
}

/// Steps an f64 result computed in round-to-nearest toward the requested direction, given the
/// sign of its exact error `err` (exact - r).
pub(crate) fn adjust64(r: f64, err: f64, mode: Rnd) -> f64 {
    if r.is_nan() || err == 0.0 || err.is_nan() {
        return r;
    }
    match mode {
        Rnd::Rn => r,
        Rnd::Rz => {
            if r > 0.0 && err < 0.0 {
                next_down64(r)
            } else if r < 0.0 && err > 0.0 {
                next_up64(r)
            } else {
                r
            }
        }
        Rnd::Rm => {
            if err < 0.0 {
                next_down64(r)
            } else {
                r
            }
        }
        Rnd::Rp => {
            if err > 0.0 {
                next_up64(r)
            } else {
                r
            }
        }
    }
}

fn overflow64(r: f64, mode: Rnd) -> f64 {
    // Round-to-nearest overflowed to infinity; directed modes may stop at the largest finite.
    match (mode, r > 0.0) {
        (Rnd::Rz, true) | (Rnd::Rm, true) => f64::MAX,
        (Rnd::Rz, false) | (Rnd::Rp, false) => f64::MIN,
        _ => r,
    }
}

fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

pub(crate) fn add64(a: f64, b: f64, mode: Rnd) -> f64 {
    let (s, e) = two_sum(a, b);
    if mode == Rnd::Rn {
        return s;
    }
    if s.is_infinite() && a.is_finite() && b.is_finite() {
        return overflow64(s, mode);
    }
    if s == 0.0 && e == 0.0 {
        // Exact zero sum of opposite values is -0 when rounding toward -inf.
        if mode == Rnd::Rm && a != 0.0 && (a.is_sign_negative() != b.is_sign_negative()) {
            return -0.0;
        }
        return s;
    }
    adjust64(s, if e.is_finite() { e } else { 0.0 }, mode)
}

pub(crate) fn mul64(a: f64, b: f64, mode: Rnd) -> f64 {
    let p = a * b;
    if mode == Rnd::Rn {
        return p;
    }
    if p.is_infinite() && a.is_finite() && b.is_finite() {
        return overflow64(p, mode);
    }
    let e = a.mul_add(b, -p);
    adjust64(p, if e.is_finite() { e } else { 0.0 }, mode)
}

pub(crate) fn div64(a: f64, b: f64, mode: Rnd) -> f64 {
    let q = a / b;
    if mode == Rnd::Rn || !q.is_finite() || q == 0.0 && a == 0.0 {
        if q.is_infinite() && a.is_finite() && b != 0.0 && mode != Rnd::Rn {
            return overflow64(q, mode);
        }
        return q;
    }
    let r = (-q).mul_add(b, a);
    let err = if b > 0.0 { r } else { -r };
    adjust64(q, err, mode)
}

pub(crate) fn sqrt64(a: f64, mode: Rnd) -> f64 {
    let q = a.sqrt();
    if mode == Rnd::Rn || !q.is_finite() || q == 0.0 {
        return q;
    }
    let r = (-q).mul_add(q, a);
    adjust64(q, r, mode)
}

pub(crate) fn add32(a: f32, b: f32, mode: Rnd) -> f32 {
    if mode == Rnd::Rn {
        return a + b;
    }
    let (s, e) = two_sum(a as f64, b as f64);
    if s == 0.0 && e == 0.0 && mode == Rnd::Rm && a != 0.0 && a.is_sign_negative() != b.is_sign_negative() {
        return -0.0;
    }
    round_f32(s, e, mode)
}

pub(crate) fn mul32(a: f32, b: f32, mode: Rnd) -> f32 {
    if mode == Rnd::Rn {
        return a * b;
    }
    round_f32(a as f64 * b as f64, 0.0, mode)
}

/// Round-to-nearest f32 fma without a libm call: the product is exact in f64, so rounding the f64
/// sum to f32 is correct unless the sum landed exactly on an f32 midpoint (double rounding) or in
/// the subnormal range; those rare cases take the exact fused path.
#[inline(always)]
pub(crate) fn fma32_rn(a: f32, b: f32, c: f32) -> f32 {
    let s = a as f64 * b as f64 + c as f64;
    let bits = s.to_bits();
    if bits & 0x1FFF_FFFF == 0x1000_0000 || (s != 0.0 && s.abs() < 1.0e-37) {
        return fma32_exact(a, b, c);
    }
    s as f32
}

/// `fma.rn.f32` of one lane, as a function item so lane loops always inline it.
#[inline(always)]
pub(crate) fn fma_lane_f32(x: u64, y: u64, z: u64) -> u64 {
    b32(fma32_rn(f32v(x), f32v(y), f32v(z)))
}

/// The fused libm path, kept out of lane loops: without the barrier LLVM may evaluate it for every
/// lane and select afterwards, as `fma` has no side effects.
#[cold]
#[inline(never)]
fn fma32_exact(a: f32, b: f32, c: f32) -> f32 {
    std::hint::black_box(a).mul_add(b, c)
}

pub(crate) fn fma32(a: f32, b: f32, c: f32, mode: Rnd) -> f32 {
    if mode == Rnd::Rn {
        return fma32_rn(a, b, c);
    }
    let p = a as f64 * b as f64;
    let (s, e) = two_sum(p, c as f64);
    round_f32(s, e, mode)
}

pub(crate) fn fma64(a: f64, b: f64, c: f64, _mode: Rnd) -> f64 {
    a.mul_add(b, c)
}

pub(crate) fn div32(a: f32, b: f32, mode: Rnd) -> f32 {
    if mode == Rnd::Rn {
        return a / b;
    }
    let (a64, b64v) = (a as f64, b as f64);
    let q = a64 / b64v;
    if !q.is_finite() || q == 0.0 {
        return round_f32(q, 0.0, mode);
    }
    let r = (-q).mul_add(b64v, a64);
    let err = if b64v > 0.0 { r } else { -r };
    round_f32(q, err, mode)
}

pub(crate) fn sqrt32(a: f32, mode: Rnd) -> f32 {
    if mode == Rnd::Rn {
        return a.sqrt();
    }
    let q = (a as f64).sqrt();
    if !q.is_finite() || q == 0.0 {
        return q as f32;
    }
    let r = (-q).mul_add(q, a as f64);
    round_f32(q, r, mode)
}

/// PTX `min`/`max`: a NaN operand is ignored unless both are NaN (canonical NaN then); with
/// `.NaN` any NaN operand gives the canonical NaN. -0 orders below +0.
pub(crate) fn fminmax64(a: f64, b: f64, max: bool, nan: bool) -> Option<f64> {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => return None,
        (true, false) => return if nan { None } else { Some(b) },
        (false, true) => return if nan { None } else { Some(a) },
        _ => {}
    }
    if a == b {
        // Distinguish signed zeros.
        let neg = a.is_sign_negative() || b.is_sign_negative();
        let pos = a.is_sign_positive() || b.is_sign_positive();
        return Some(if a == 0.0 {
            if max {
                if pos {
                    0.0
                } else {
                    -0.0
                }
            } else if neg {
                -0.0
            } else {
                0.0
            }
        } else {
            a
        });
    }
    Some(if (a > b) == max { a } else { b })
}

pub(crate) fn cmp_f64(a: f64, b: f64, cmp: Cmp) -> bool {
    let un = a.is_nan() || b.is_nan();
    match cmp {
        Cmp::Eq => !un && a == b,
        Cmp::Ne => !un && a != b,
        Cmp::Lt => !un && a < b,
        Cmp::Le => !un && a <= b,
        Cmp::Gt => !un && a > b,
        Cmp::Ge => !un && a >= b,
        Cmp::Equ => un || a == b,
        Cmp::Neu => un || a != b,
        Cmp::Ltu => un || a < b,
        Cmp::Leu => un || a <= b,
        Cmp::Gtu => un || a > b,
        Cmp::Geu => un || a >= b,
        Cmp::Num => !un,
        Cmp::Nan => un,
    }
}

pub(crate) fn testp(x: f64, t: Testp, is32: bool) -> bool {
    let sub = if is32 { (x as f32).is_subnormal() } else { x.is_subnormal() };
    match t {
        Testp::Finite => x.is_finite(),
        Testp::Infinite => x.is_infinite(),
        Testp::Number => !x.is_nan(),
        Testp::NotANumber => x.is_nan(),
        Testp::Normal => x.is_finite() && x != 0.0 && !sub,
        Testp::Subnormal => sub,
    }
}

/// A register value read as a float of type `f`, widened to f64 (exactly).
pub(crate) fn to_f64(x: u64, f: F, ftz: bool) -> f64 {
    match f {
        F::F32 => {
            let v = f32v(x);
            (if ftz { ftz32(v) } else { v }) as f64
        }
        F::F64 => f64v(x),
        F::F16 => f16::from_bits(x as u16).to_f64(),
        F::BF16 => bf16::from_bits(x as u16).to_f64(),
    }
}

/// An exact-or-rounded f64 value stored as float type `f` (round to nearest for halves).
pub(crate) fn from_f64(v: f64, f: F, ftz: bool) -> u64 {
    match f {
        F::F32 => {
            let r = v as f32;
            b32(if ftz { ftz32(r) } else { r })
        }
        F::F64 => b64(v),
        F::F16 => {
            let h = f16::from_f64(v);
            if h.is_nan() {
                0x7FFF
            } else {
                h.to_bits() as u64
            }
        }
        F::BF16 => {
            let h = bf16::from_f64(v);
            if h.is_nan() {
                0x7FFF
            } else {
                h.to_bits() as u64
            }
        }
    }
}

fn int_range(t: Ty) -> (i128, i128) {
    let bits = t.bits();
    if t.is_signed() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

fn int_value(x: u64, t: Ty) -> i128 {
    let bits = t.bits();
    if t.is_signed() {
        let sh = 64 - bits;
        (((x << sh) as i64) >> sh) as i128
    } else if bits >= 64 {
        x as i128
    } else {
        (x & ((1u64 << bits) - 1)) as i128
    }
}

fn round_int(v: f64, r: Rnd) -> f64 {
    match r {
        Rnd::Rn => v.round_ties_even(),
        Rnd::Rz => v.trunc(),
        Rnd::Rm => v.floor(),
        Rnd::Rp => v.ceil(),
    }
}

fn int_to_f64_rounded(v: i128, mode: Rnd) -> f64 {
    let r = v as f64;
    if mode == Rnd::Rn {
        return r;
    }
    // Exact comparison through i128 (every f64 in range converts exactly).
    let back = if r >= 1.7e38 { i128::MAX } else { r as i128 };
    let err = (v - back).signum() as f64;
    adjust64(r, err, mode)
}

/// A signed result narrower than its register is sign-extended into it.
fn widen(c: &Cvt, v: u64) -> u64 {
    let (tb, db) = (c.to.bits(), c.dst_bits as u32);
    if c.to.is_signed() && tb < db {
        let sh = 64 - tb;
        ((((v << sh) as i64) >> sh) as u64) & if db >= 64 { u64::MAX } else { (1u64 << db) - 1 }
    } else {
        v
    }
}

/// `cvt` of one lane.
pub(crate) fn cvt(x: u64, c: &Cvt) -> u64 {
    let from_f = c.from.float();
    let to_f = c.to.float();
    let to_bits = c.to.bits();
    let mask = if to_bits >= 64 { u64::MAX } else { (1u64 << to_bits) - 1 };
    match (from_f, to_f) {
        (None, None) => {
            let v = int_value(x, c.from);
            let v = if c.sat {
                let (lo, hi) = int_range(c.to);
                v.clamp(lo, hi)
            } else {
                v
            };
            widen(c, (v as u64) & mask)
        }
        (None, Some(f)) => {
            let v = int_value(x, c.from);
            let mode = c.rnd.unwrap_or(Rnd::Rn);
            let out = match f {
                F::F64 => b64(int_to_f64_rounded(v, mode)),
                F::F32 => {
                    let hi = v as f64;
                    let back = if hi.abs() >= 1.7e38 { v } else { hi as i128 };
                    let lo = (v - back) as f64;
                    b32(round_f32(hi, lo, mode))
                }
                _ => from_f64(v as f64, f, false),
            };
            if c.sat {
                let fv = to_f64(out, f, false);
                return from_f64(sat64(fv), f, false);
            }
            out
        }
        (Some(f), None) => {
            let mut v = to_f64(x, f, c.ftz);
            if v.is_nan() {
                return 0;
            }
            v = round_int(v, c.rnd.unwrap_or(Rnd::Rz));
            let (lo, hi) = int_range(c.to);
            let i = if v >= hi as f64 {
                hi
            } else if v <= lo as f64 {
                lo
            } else {
                v as i128
            };
            widen(c, (i as u64) & mask)
        }
        (Some(ff), Some(tf)) => {
            let v = to_f64(x, ff, c.ftz);
            let mut r = if c.int_round { round_int(v, c.rnd.unwrap_or(Rnd::Rn)) } else { v };
            if c.sat {
                r = sat64(r);
            }
            // The rounding to the destination: the mode asked, or to nearest after `.rni`-style
            // rounding to an integer, whose mode is spent on that.
            let mode = if c.int_round { Rnd::Rn } else { c.rnd.unwrap_or(Rnd::Rn) };
            match tf {
                F::F32 => {
                    let f = round_f32(r, 0.0, mode);
                    b32(if c.ftz { ftz32(f) } else { f })
                }
                F::F64 => b64(r),
                F::F16 | F::BF16 => {
                    let o = round_half(r, tf, mode);
                    if c.satfinite && !r.is_nan() {
                        // .satfinite: clamp infinities to the largest finite value.
                        let t = to_f64(o, tf, false);
                        if t.is_infinite() {
                            let max = if tf == F::F16 { f16::MAX.to_f64() } else { bf16::MAX.to_f64() };
                            return from_f64(max.copysign(t), tf, false);
                        }
                    }
                    o
                }
            }
        }
    }
}

/// `r` rounded to f16 or bf16 (`tf`) in `mode`: the nearest value, ties to even, or for `.rz`,
/// `.rm` and `.rp` the neighbour of the nearest value on the side the mode asks for, where the
/// nearest one lies on the other side of `r`. The bit patterns of either format are ordered like
/// their magnitudes, so a neighbour is one step of the magnitude (from a zero, to the smallest
/// subnormal of the other sign; from an infinity, to the largest finite value). A NaN becomes
/// the canonical 0x7FFF.
fn round_half(r: f64, tf: F, mode: Rnd) -> u64 {
    let near = from_f64(r, tf, false);
    let t = to_f64(near, tf, false);
    if r.is_nan() || t == r {
        return near;
    }
    let down = match mode {
        Rnd::Rn => return near,
        Rnd::Rm if t > r => true,
        Rnd::Rp if t < r => false,
        Rnd::Rz if t.abs() > r.abs() => t > 0.0,
        _ => return near,
    };
    let (sign, mag) = (near & 0x8000, near & 0x7FFF);
    match (sign != 0, down) {
        // Toward zero.
        (false, true) | (true, false) if mag > 0 => sign | (mag - 1),
        // From a zero, across it.
        (false, true) | (true, false) => (sign ^ 0x8000) | 1,
        // Away from zero.
        _ => sign | (mag + 1),
    }
}

/// `ex2.approx.f32`: 2^x as the running launch's model computes it (`numerics::sfu`): sm_90's
/// unit, or the correctly rounded value (PTX allows 2 ulp). `.ftz` flushes around this: the
/// unit's results agree with that (a subnormal 2^x needs x < -126, which `.ftz` flushes to zero).
pub(crate) fn ex2(x: f32) -> f32 {
    match sfu::active() {
        SfuModel::Sm90 => f32::from_bits(sfu::ex2(x.to_bits(), false)),
        SfuModel::Ieee => (x as f64).exp2() as f32,
    }
}

/// `rcp.approx{.ftz}.f32` of register bits in `model`: sm_90's unit, or the correctly rounded
/// reciprocal (`.ftz` flushing the argument and the result).
#[inline]
pub(crate) fn rcp_approx32(model: SfuModel, x: u32, ftz: bool) -> u32 {
    match model {
        SfuModel::Sm90 => sfu::rcp(x, ftz),
        SfuModel::Ieee => ieee_approx32(x, ftz, |v| 1.0 / v),
    }
}

/// `sqrt.approx{.ftz}.f32` of register bits in `model`: sm_90's unit, or the correctly rounded
/// square root.
#[inline]
pub(crate) fn sqrt_approx32(model: SfuModel, x: u32, ftz: bool) -> u32 {
    match model {
        SfuModel::Sm90 => sfu::sqrt(x, ftz),
        SfuModel::Ieee => ieee_approx32(x, ftz, f32::sqrt),
    }
}

/// `rsqrt.approx{.ftz}.f32` of register bits in `model`: sm_90's unit, or a correctly rounded
/// square root then a correctly rounded reciprocal (within PTX's bound for `rsqrt.approx.f32`,
/// 2^-22.9 relative, and what CUDA C's `1.0f / sqrtf(x)` gives on a CPU).
#[inline]
pub(crate) fn rsqrt_approx32(model: SfuModel, x: u32, ftz: bool) -> u32 {
    match model {
        SfuModel::Sm90 => sfu::rsqrt(x, ftz),
        SfuModel::Ieee => ieee_approx32(x, ftz, |v| 1.0 / v.sqrt()),
    }
}

/// `div.full.f32` of register bits in `model`: sm_90's (the dividend times `MUFU.RCP` of the
/// divisor, both scaled where the divisor is huge or tiny), or the correctly rounded quotient.
#[inline]
pub(crate) fn div_full32(model: SfuModel, a: u32, b: u32) -> u32 {
    match model {
        SfuModel::Sm90 => sfu::div_full(a, b),
        SfuModel::Ieee => b32(f32v(a as u64) / f32v(b as u64)) as u32,
    }
}

#[inline(always)]
fn ieee_approx32(x: u32, ftz: bool, f: impl Fn(f32) -> f32) -> u32 {
    let v = f32v(x as u64);
    let r = f(if ftz { ftz32(v) } else { v });
    b32(if ftz { ftz32(r) } else { r }) as u32
}

/// The value of an 8-bit float: `.e4m3` (no infinities, NaN `S.1111.111`, largest 448) or
/// `.e5m2` (IEEE-like, infinities and NaNs, largest 57344). Exact in f32.
pub(crate) fn fp8_to_f32(x: u8, f: Fp8) -> f32 {
    let neg = x & 0x80 != 0;
    let (exp, man, bias, mbits) = match f {
        Fp8::E4M3 => ((x >> 3) & 0xF, x & 7, 7, 3),
        Fp8::E5M2 => ((x >> 2) & 0x1F, x & 3, 15, 2),
    };
    let v = match f {
        Fp8::E4M3 if exp == 0xF && man == 7 => f32::NAN,
        Fp8::E5M2 if exp == 0x1F => {
            if man == 0 {
                f32::INFINITY
            } else {
                f32::NAN
            }
        }
        _ if exp == 0 => man as f32 * (2.0f32).powi(1 - bias - mbits),
        _ => (1.0 + man as f32 / (1 << mbits) as f32) * (2.0f32).powi(exp as i32 - bias),
    };
    if neg {
        -v
    } else {
        v
    }
}

/// `cvt.rn.satfinite{.relu}` of a value to an 8-bit float: round to nearest even, magnitudes
/// beyond the largest finite value (infinities included) become it with their sign, NaN becomes
/// the canonical `0x7F`; with `relu` negative values become `+0`.
pub(crate) fn fp8_from_f64(v: f64, f: Fp8, relu: bool) -> u8 {
    if v.is_nan() {
        return 0x7F;
    }
    let v = if relu && v < 0.0 { 0.0 } else { v };
    let sign = if v.is_sign_negative() { 0x80 } else { 0 };
    let a = v.abs();
    let (bias, mbits, max): (i32, i32, u8) = match f {
        Fp8::E4M3 => (7, 3, 0x7E),
        Fp8::E5M2 => (15, 2, 0x7B),
    };
    let bits = if a.is_infinite() {
        max as u32
    } else if a < (2.0f64).powi(1 - bias) {
        // Subnormal: a multiple of the smallest step; rounding up to 2^mbits steps lands exactly on
        // the smallest normal's encoding.
        (a / (2.0f64).powi(1 - bias - mbits)).round_ties_even() as u32
    } else {
        let e = ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023;
        let frac = a / (2.0f64).powi(e) - 1.0;
        let m = (frac * (1u32 << mbits) as f64).round_ties_even() as u32;
        let (e, m) = if m == 1 << mbits { (e + 1, 0) } else { (e, m) };
        let biased = (e + bias).min(0x3F) as u32;
        (biased << mbits) | m
    };
    (bits.min(max as u32) as u8) | sign
}

/// `cvt` with an 8-bit float pair on one side, on one lane.
pub(crate) fn fp8_cvt(x: u64, c: Fp8Cvt) -> u64 {
    let h2f = |h: u16| f16::from_bits(h).to_f64();
    match c {
        Fp8Cvt::FromF32 { to, relu } => fp8_from_f64(f32v(x) as f64, to, relu) as u64,
        Fp8Cvt::FromF16x2 { to, relu } => {
            let lo = fp8_from_f64(h2f(x as u16), to, relu) as u64;
            let hi = fp8_from_f64(h2f((x >> 16) as u16), to, relu) as u64;
            lo | hi << 8
        }
        Fp8Cvt::ToF16x2 { from, relu } => {
            let one = |b: u8| -> u64 {
                let v = fp8_to_f32(b, from);
                if v.is_nan() {
                    0x7FFF
                } else if relu && v < 0.0 {
                    0
                } else {
                    f16::from_f32(v).to_bits() as u64
                }
            };
            one(x as u8) | one((x >> 8) as u8) << 16
        }
    }
}
