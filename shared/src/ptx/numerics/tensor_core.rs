//! The inner product of a tensor core, bit for bit per architecture: how one element of `mma`'s
//! (and `wgmma`'s) D comes from a row of A, a column of B and C. Nothing else lives here: the
//! fragment layouts are `matrix.rs`'s and `wgmma.rs`'s, and they call in.
//!
//! **The models.** [`MmaModel::Ieee`] is recap's defined order of the ISA: from C, one f32 fused
//! multiply-add per k in increasing k. [`MmaModel::Sm90`] is Hopper's unit, fitted to and checked
//! against an H200's outputs (`tests/numerics/`): every product of two inputs is exact; each term
//! (the products and C) has an alignment exponent, the sum of its factors' exponents for a product
//! (a subnormal factor counted at its format's least normal exponent, a zero at -126, so that a
//! product's significand lies in [0, 4)) and C's own for C; every term is shifted to the largest of
//! those exponents keeping [`Sm90`](MmaModel::Sm90)'s 25 bits below that exponent's unit, the bits
//! beyond cut off (toward zero), and the cut terms are added exactly in fixed point; the sum is
//! then rounded once, toward zero for an f32 D and to nearest even for an f16 D. All the k of one
//! instruction form one such sum. [`MmaModel::Sm80`] is Ampere's unit as published (Khattak and
//! Mikaitis; Xie et al.), not measured here: 24 bits below the largest exponent, and the
//! m16n8k16 16-bit forms and the m16n8k8 tf32 form sum their two halves of k one after the other,
//! D rounded between them.
//!
//! **Special values.** A NaN input, an infinity times zero or infinities of both signs give a NaN,
//! written as the canonical NaN of D's type (`math::NAN32`, [`NAN16`]); an infinity otherwise gives
//! itself. A sum past the largest finite value gives the infinity of its sign.
//!
//! **Why f64.** The products of f16, bf16 and tf32 inputs are exact in f64 (at most 22 significant
//! bits, exponents far inside f64's range), each term shifted to 25 bits below the largest
//! exponent is an integer under 2^28 times a power of two, and seventeen of them add exactly in
//! f64's 53 bits. So the model is plain f64 multiplies, truncations and adds over arrays, which a
//! compiler vectorises, rather than integer code per element.

use half::f16;

use crate::ptx::ir::MmaTy;
use crate::ptx::math::NAN32;

/// How the CPU computes a tensor-core inner product (`recap replay --mma-model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MmaModel {
    /// The ISA's order with IEEE arithmetic: one f32 fused multiply-add per k, in increasing k.
    #[default]
    Ieee,
    /// Ampere's tensor cores (sm_80, sm_86, sm_89), as published.
    Sm80,
    /// Hopper's tensor cores (sm_90, sm_90a), as measured on an H200.
    Sm90,
}

impl MmaModel {
    /// Every model, in the order the CLI lists them.
    pub const ALL: [MmaModel; 3] = [MmaModel::Ieee, MmaModel::Sm80, MmaModel::Sm90];

    /// The model's name (`ieee`, `sm80`, `sm90`).
    pub fn name(self) -> &'static str {
        match self {
            MmaModel::Ieee => "ieee",
            MmaModel::Sm80 => "sm80",
            MmaModel::Sm90 => "sm90",
        }
    }

    /// The model by its name.
    pub fn from_name(name: &str) -> Option<MmaModel> {
        MmaModel::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The model of a GPU of compute capability `sm` (90 for sm_90): Hopper from 90 on, Ampere
    /// from 80 to 89, and IEEE arithmetic below 80 and where the archive names no GPU.
    pub fn for_sm(sm: Option<u32>) -> MmaModel {
        match sm {
            Some(sm) if sm >= 90 => MmaModel::Sm90,
            Some(sm) if sm >= 80 => MmaModel::Sm80,
            _ => MmaModel::Ieee,
        }
    }

    /// Bits kept below the largest term's exponent (`None` for [`MmaModel::Ieee`]).
    fn frac_bits(self) -> Option<i32> {
        match self {
            MmaModel::Ieee => None,
            MmaModel::Sm80 => Some(24),
            MmaModel::Sm90 => Some(25),
        }
    }
}

/// The canonical NaN the tensor core writes into an f16 D (an f32 D's is `math::NAN32`).
pub(crate) const NAN16: u16 = 0x7FFF;

/// An input element's format, for its alignment exponent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    F16,
    BF16,
    /// tf32 and f32 (the f32 layout; tf32's low 13 bits are dropped before this is asked).
    F32,
}

/// An element as the unit sees it: its exact value and its alignment exponent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Term {
    pub value: f64,
    pub exp: i32,
}

/// The alignment exponent of an element of `format` with these bits: its unbiased exponent, a
/// subnormal's the format's least normal one, zero's [`ZERO_EXP`], an infinity's or NaN's one past
/// the largest.
#[inline(always)]
pub(crate) fn exponent(format: Format, bits: u32) -> i32 {
    let (biased, mant, bias) = match format {
        Format::F16 => ((bits >> 10) & 0x1F, bits & 0x3FF, 15),
        Format::BF16 => ((bits >> 7) & 0xFF, bits & 0x7F, 127),
        Format::F32 => ((bits >> 23) & 0xFF, bits & 0x7F_FFFF, 127),
    };
    match (biased, mant) {
        (0, 0) => ZERO_EXP,
        (0, _) => 1 - bias,
        (b, _) => b as i32 - bias,
    }
}

/// A zero's alignment exponent: below every other term's, so that a zero never sets the
/// alignment (a product with a zero factor neither: its exponent stays far below too).
pub(crate) const ZERO_EXP: i32 = -512;

/// The least alignment exponent a sum is taken at: only sums of zeros fall below it, and those are
/// zero at any alignment.
const LEAST_MAX_EXP: i32 = -600;

/// A zero accumulator (`wgmma` with `scale-d` false).
pub(crate) const ZERO: Term = Term { value: 0.0, exp: ZERO_EXP };

/// An element of type `t` (f16, bf16, tf32 or f32: the types the models take) as the unit sees
/// it: tf32 without its low 13 bits (a NaN stays a NaN).
pub(crate) fn term(t: MmaTy, bits: u64) -> Term {
    let bits = bits as u32;
    match t {
        MmaTy::F16 => Term { value: f16::from_bits(bits as u16).to_f64(), exp: exponent(Format::F16, bits) },
        MmaTy::BF16 => Term { value: half::bf16::from_bits(bits as u16).to_f64(), exp: exponent(Format::BF16, bits) },
        _ => {
            let nan = f32::from_bits(bits).is_nan();
            let kept = if t == MmaTy::TF32 && !nan { bits & 0xFFFF_E000 } else { bits };
            Term { value: f32::from_bits(kept) as f64, exp: exponent(Format::F32, kept) }
        }
    }
}

/// `2^e` for an exponent inside f64's normal range.
#[inline(always)]
fn pow2(e: i32) -> f64 {
    f64::from_bits(((1023 + e) as u64) << 52)
}

/// The fixed-point sum of terms whose largest exponent is `max_exp`: each term `value` cut toward
/// zero to `frac` bits below `2^max_exp`, added exactly; gives the exact sum (NaN or an infinity
/// where a term is one).
#[inline(always)]
fn fused(frac: i32, max_exp: i32, values: impl Iterator<Item = f64>) -> f64 {
    // Exponents lie in [-600, 256]: both scales are normal f64s.
    let max_exp = max_exp.max(LEAST_MAX_EXP);
    let up = pow2(frac - max_exp);
    let down = pow2(max_exp - frac);
    values.map(|v| (v * up).trunc()).sum::<f64>() * down
}

/// The exact value `x` rounded toward zero to f32 (+0 for a zero); past the largest finite f32,
/// the infinity of its sign.
#[inline(always)]
pub(crate) fn f32_toward_zero(x: f64) -> f32 {
    let y = x as f32;
    let y =
        if y.is_infinite() || (y as f64).abs() <= x.abs() || x.is_nan() { y } else { f32::from_bits(y.to_bits() - 1) };
    // The unit writes no negative zero: a sum that is or rounds to zero gives +0.
    if y == 0.0 {
        0.0
    } else {
        y
    }
}

/// One element of D in the model `model` (not [`MmaModel::Ieee`]): `c` the accumulator,
/// `products` each product of A's row and B's column in increasing k with its alignment exponent
/// (the sum of its factors'), `f16_out` whether D is f16. Gives D's bits.
pub(crate) fn dot(model: MmaModel, split: bool, c: Term, products: &[Term], f16_out: bool) -> u32 {
    let frac = model.frac_bits().expect("a tensor-core model");
    // Between Ampere's halves the running D is in D's format.
    let round = |x: f64| -> Term {
        if f16_out {
            let h = f16_nearest(x);
            Term { value: f16::from_bits(h).to_f64(), exp: exponent(Format::F16, h as u32) }
        } else {
            let f = f32_toward_zero(x);
            Term { value: f as f64, exp: exponent(Format::F32, f.to_bits()) }
        }
    };
    let group = |c: Term, ps: &[Term]| -> f64 {
        let max_exp = ps.iter().fold(c.exp, |m, p| m.max(p.exp));
        fused(frac, max_exp, std::iter::once(c.value).chain(ps.iter().map(|p| p.value)))
    };
    let sum = if split && products.len() > 1 {
        let (lo, hi) = products.split_at(products.len() / 2);
        group(round(group(c, lo)), hi)
    } else {
        group(c, products)
    };
    finish(sum, f16_out)
}

/// D's bits from the exact sum: rounded toward zero to f32 or to nearest even to f16, a NaN as
/// the canonical one, a zero as +0.
#[inline(always)]
pub(crate) fn finish(sum: f64, f16_out: bool) -> u32 {
    if sum.is_nan() {
        return if f16_out { NAN16 as u32 } else { NAN32 };
    }
    if f16_out {
        f16_nearest(sum) as u32
    } else {
        f32_toward_zero(sum).to_bits()
    }
}

/// The bits of the f16 nearest the exact value `x` (ties to even; past the largest finite f16, the
/// infinity of its sign), rounded once: a conversion through f32 would round twice. A sum that is
/// or rounds to zero gives +0: the unit writes no negative zero.
#[inline(always)]
pub(crate) fn f16_nearest(x: f64) -> u16 {
    let sign = if x < 0.0 { 0x8000 } else { 0 };
    let a = x.abs();
    if a >= 65520.0 {
        // 65504 plus half its unit: the tie goes to the even neighbour, infinity.
        return sign | 0x7C00;
    }
    let biased = ((a.to_bits() >> 52) as i32 - 1023 + 15).max(1);
    // The value in units of its f16 exponent's last place, rounded: below 2^-14 the subnormals'
    // fixed unit 2^-24; a carry to 2^11 lands in the next exponent's encoding by itself.
    let units = (a * pow2(25 - biased)).round_ties_even() as u16;
    if units == 0 {
        // A sum that rounds to zero is +0 whatever its sign (measured).
        return 0;
    }
    sign | (((biased - 1) as u16) << 10).wrapping_add(units)
}

/// Whether Ampere sums this form's k in two halves: the m16n8k16 forms of 16-bit inputs and the
/// m16n8k8 form of tf32 (`k` the instruction's K, `tf32` whether its inputs are tf32).
pub(crate) fn sm80_splits(k: u32, tf32: bool) -> bool {
    (k == 16 && !tf32) || (k == 8 && tf32)
}

/// The alignment exponent of an element from its value widened to f32 (exact for every input of
/// these units): zero's [`ZERO_EXP`], else its exponent but at least `min`, the least normal exponent of
/// the element's own format (-14 for f16, -126 for bf16, tf32 and f32).
#[inline(always)]
pub(crate) fn exponent_of(x: f32, min: i32) -> i32 {
    let biased = ((x.to_bits() >> 23) & 0xFF) as i32;
    if x == 0.0 {
        ZERO_EXP
    } else {
        (biased - 127).max(min)
    }
}

/// The least normal exponent of an input format, as [`exponent_of`] takes it.
pub(crate) fn least_exponent(f16_format: bool) -> i32 {
    if f16_format {
        -14
    } else {
        -126
    }
}

/// The alignment exponents of B's rows of eight columns ([`exponent_of`] with `min`), once per
/// `mma` rather than once per row of A.
#[inline(always)]
pub(crate) fn exponents<const K: usize>(b: &[[f32; 8]; K], min: i32) -> [[i32; 8]; K] {
    std::array::from_fn(|k| std::array::from_fn(|n| exponent_of(b[k][n], min)))
}

/// One row of an `mma` tile in `model` (not [`MmaModel::Ieee`]) on values widened to f32: `a` the
/// row of A (`k` elements), `b[k]` B's row `k` (eight columns) and `b_exp[k]` their exponents
/// ([`exponents`]), `c` the row of C; `mins` the least exponents of the inputs' and C's formats;
/// `split` whether k is summed in two halves (Ampere).
/// Gives the row of D as f32 values (an f16 D's elements widened back, exactly; a NaN for a NaN,
/// which the caller writes as D's canonical one). The eight columns run side by side, so that each step is an f64 vector
/// operation over them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn row(
    model: MmaModel,
    split: bool,
    mins: [i32; 2],
    a: &[f32],
    b: &[[f32; 8]],
    b_exp: &[[i32; 8]],
    c: &[f32; 8],
    f16_out: bool,
) -> [f32; 8] {
    let frac = model.frac_bits().expect("a tensor-core model");
    let k = a.len();
    let halves: &[(usize, usize)] = if split { &[(0, k / 2), (k / 2, k)] } else { &[(0, k)] };
    let mut acc = *c;
    let mut acc_min = mins[1];
    for &(from, to) in halves {
        let mut max_exp = [0i32; 8];
        for (m, &x) in max_exp.iter_mut().zip(&acc) {
            *m = exponent_of(x, acc_min);
        }
        for kk in from..to {
            let ea = exponent_of(a[kk], mins[0]);
            for (m, &eb) in max_exp.iter_mut().zip(&b_exp[kk]) {
                *m = (*m).max(ea + eb);
            }
        }
        for m in &mut max_exp {
            *m = (*m).max(LEAST_MAX_EXP);
        }
        let up: [f64; 8] = std::array::from_fn(|n| pow2(frac - max_exp[n]));
        let mut sum: [f64; 8] = std::array::from_fn(|n| (acc[n] as f64 * up[n]).trunc());
        for kk in from..to {
            let x = a[kk] as f64;
            for ((s, &y), &u) in sum.iter_mut().zip(&b[kk]).zip(&up) {
                *s += (x * y as f64 * u).trunc();
            }
        }
        for n in 0..8 {
            let exact = sum[n] * pow2(max_exp[n] - frac);
            acc[n] = if exact.is_nan() {
                // The caller writes it as D's canonical NaN.
                f32::from_bits(NAN32)
            } else if f16_out {
                f16::from_bits(f16_nearest(exact)).to_f32()
            } else {
                f32_toward_zero(exact)
            };
        }
        // Between Ampere's halves the running D is in D's format.
        acc_min = least_exponent(f16_out);
    }
    acc
}
