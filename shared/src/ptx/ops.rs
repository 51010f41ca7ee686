//! Per-lane semantics of the arithmetic instructions. Each operation is matched once per
//! instruction and handed to a lane loop as its own closure, so the loop is monomorphic (and
//! vectorisable where the operation allows).
//!
//! Everything here is shared by the interpreter (`exec/interp.rs`) and native code (`exec/jit/`),
//! which calls these same functions for what it does not inline, so both engines compute the
//! same bits: the arithmetic macros, compares, `bfi`, an atomic's new value and a shuffle's
//! source lane.

use super::ir::*;
use super::math::*;

macro_rules! exec_un {
    ($m:ident, $op:expr, $d:expr, $a:expr) => {{
        use $crate::ptx::ir::{FMode, Rnd, UnOp, F, W};
        use $crate::ptx::math::*;
        match $op {
            UnOp::Mov(mask) => $m!($d, $a, |x| x & mask),
            UnOp::Extract(sh, mask) => $m!($d, $a, |x| (x >> sh) & mask),
            UnOp::Not(mask) => $m!($d, $a, |x| !x & mask),
            UnOp::CNot(mask) => $m!($d, $a, |x| ((x & mask) == 0) as u64),
            UnOp::PredNot => $m!($d, $a, |x| (x & 1) ^ 1),
            UnOp::Fp8(c) => $m!($d, $a, |x| fp8_cvt(x, c)),
            UnOp::IsSpace(sp) => {
                use $crate::ptx::ir::{Space, LOCAL_BASE, MODVAR_BASE, SHARED_BASE, WINDOW_MASK};
                $m!($d, $a, |x| {
                    let w = x & WINDOW_MASK;
                    (match sp {
                        Space::Shared => w == SHARED_BASE,
                        Space::Local => w == LOCAL_BASE,
                        Space::Const => w == MODVAR_BASE,
                        _ => w != SHARED_BASE && w != LOCAL_BASE,
                    }) as u64
                })
            }
            UnOp::Neg(W::W16) => $m!($d, $a, |x| (x as u16).wrapping_neg() as u64),
            UnOp::Neg(W::W32) => $m!($d, $a, |x| (x as u32).wrapping_neg() as u64),
            UnOp::Neg(W::W64) => $m!($d, $a, |x| x.wrapping_neg()),
            UnOp::Abs(W::W16) => $m!($d, $a, |x| (x as i16).wrapping_abs() as u16 as u64),
            UnOp::Abs(W::W32) => $m!($d, $a, |x| (x as i32).wrapping_abs() as u32 as u64),
            UnOp::Abs(W::W64) => $m!($d, $a, |x| (x as i64).wrapping_abs() as u64),
            UnOp::Popc(W::W64) => $m!($d, $a, |x| x.count_ones() as u64),
            UnOp::Popc(_) => $m!($d, $a, |x| (x as u32).count_ones() as u64),
            UnOp::Clz(W::W64) => $m!($d, $a, |x| x.leading_zeros() as u64),
            UnOp::Clz(_) => $m!($d, $a, |x| (x as u32).leading_zeros() as u64),
            UnOp::Brev(W::W64) => $m!($d, $a, |x| x.reverse_bits()),
            UnOp::Brev(_) => $m!($d, $a, |x| (x as u32).reverse_bits() as u64),
            UnOp::Bfind { w, signed, shiftamt } => {
                let bits = w.bits();
                $m!($d, $a, |x| {
                    let v = x & mask_bits(bits);
                    // For signed values the search is for the most significant bit that differs from the sign.
                    let s = if signed && (v >> (bits - 1)) & 1 == 1 { !v & mask_bits(bits) } else { v };
                    if s == 0 {
                        0xFFFF_FFFF
                    } else {
                        let pos = 63 - s.leading_zeros() as u64;
                        if shiftamt {
                            (bits as u64 - 1) - pos
                        } else {
                            pos
                        }
                    }
                })
            }
            UnOp::FNeg(F::F32, ftz) => $m!($d, $a, |x| {
                let v = f32v(x);
                let v = if ftz { ftz32(v) } else { v };
                // neg/abs do not canonicalise NaN payloads.
                (-v).to_bits() as u64
            }),
            UnOp::FNeg(F::F64, _) => $m!($d, $a, |x| x ^ (1 << 63)),
            UnOp::FNeg(_, _) => $m!($d, $a, |x| (x ^ 0x8000) & 0xFFFF),
            UnOp::FAbs(F::F32, ftz) => $m!($d, $a, |x| {
                let v = f32v(x);
                let v = if ftz { ftz32(v) } else { v };
                v.abs().to_bits() as u64
            }),
            UnOp::FAbs(F::F64, _) => $m!($d, $a, |x| x & !(1 << 63)),
            UnOp::FAbs(_, _) => $m!($d, $a, |x| x & 0x7FFF),
            // The special functions in the running launch's model (`numerics::sfu`), read once.
            UnOp::FRcp(F::F32, FMode::Approx, ftz) => {
                let model = $crate::ptx::numerics::sfu::active();
                $m!($d, $a, |x| rcp_approx32(model, x as u32, ftz) as u64)
            }
            UnOp::FRcp(F::F32, FMode::Ieee(rnd), ftz) => $m!($d, $a, |x| {
                let v = f32v(x);
                let v = if ftz { ftz32(v) } else { v };
                let r = div32(1.0, v, rnd);
                b32(if ftz { ftz32(r) } else { r })
            }),
            UnOp::FRcp(_, mode, _) => $m!($d, $a, |x| {
                let v = f64v(x);
                b64(match mode {
                    FMode::Ieee(rnd) => div64(1.0, v, rnd),
                    // rcp.approx.ftz.f64 keeps about 20 bits; the exact value is within that.
                    FMode::Approx | FMode::Full => 1.0 / v,
                })
            }),
            UnOp::FSqrt(F::F32, FMode::Approx, ftz) => {
                let model = $crate::ptx::numerics::sfu::active();
                $m!($d, $a, |x| sqrt_approx32(model, x as u32, ftz) as u64)
            }
            UnOp::FSqrt(F::F32, FMode::Ieee(rnd), ftz) => $m!($d, $a, |x| {
                let v = f32v(x);
                let v = if ftz { ftz32(v) } else { v };
                let r = sqrt32(v, rnd);
                b32(if ftz { ftz32(r) } else { r })
            }),
            UnOp::FSqrt(_, mode, _) => $m!($d, $a, |x| {
                let v = f64v(x);
                b64(match mode {
                    FMode::Ieee(rnd) => sqrt64(v, rnd),
                    FMode::Approx | FMode::Full => v.sqrt(),
                })
            }),
            UnOp::FRsqrt(F::F32, ftz) => {
                let model = $crate::ptx::numerics::sfu::active();
                $m!($d, $a, |x| rsqrt_approx32(model, x as u32, ftz) as u64)
            }
            UnOp::FRsqrt(_, _) => $m!($d, $a, |x| b64(1.0 / f64v(x).sqrt())),
            UnOp::FSin(ftz) => $m!($d, $a, |x| {
                let v = f32v(x);
                let v = if ftz { ftz32(v) } else { v };
                let r = (v as f64).sin() as f32;
                b32(if ftz { ftz32(r) } else { r })
            }),
            UnOp::FCos(ftz) => $m!($d, $a, |x| {
                let v = f32v(x);
                let v = if ftz { ftz32(v) } else { v };
                b32((v as f64).cos() as f32)
            }),
            UnOp::FLg2(ftz) => $m!($d, $a, |x| {
                let v = f32v(x);
                let v = if ftz { ftz32(v) } else { v };
                // lg2.approx of a subnormal without .ftz is computed on the exact value.
                b32((v as f64).log2() as f32)
            }),
            UnOp::FEx2(F::F32, ftz) => $m!($d, $a, |x| {
                let v = f32v(x);
                let v = if ftz { ftz32(v) } else { v };
                let r = ex2(v);
                b32(if ftz { ftz32(r) } else { r })
            }),
            UnOp::FEx2(f, _) => $m!($d, $a, |x| from_f64(to_f64(x, f, false).exp2(), f, false)),
            UnOp::FTanh(f) => $m!($d, $a, |x| from_f64(to_f64(x, f, false).tanh(), f, false)),
            UnOp::Testp(f, t) => $m!($d, $a, |x| testp(to_f64(x, f, false), t, f == F::F32) as u64),
            UnOp::Cvt(c) => {
                // The common conversions get their own loops.
                use $crate::ptx::ir::Ty;
                match (c.from, c.to, c.rnd, c.sat, c.ftz) {
                    (Ty::S32, Ty::S64, _, false, _) => $m!($d, $a, |x| x as u32 as i32 as i64 as u64),
                    (Ty::U32, Ty::U64, _, false, _) => $m!($d, $a, |x| x & 0xFFFF_FFFF),
                    (Ty::U64 | Ty::S64 | Ty::B64, Ty::U32 | Ty::S32 | Ty::B32, _, false, _) => {
                        $m!($d, $a, |x| x & 0xFFFF_FFFF)
                    }
                    (Ty::S32, Ty::F32, Some(Rnd::Rn) | None, false, _) => {
                        $m!($d, $a, |x| (x as u32 as i32 as f32).to_bits() as u64)
                    }
                    (Ty::U32, Ty::F32, Some(Rnd::Rn) | None, false, _) => {
                        $m!($d, $a, |x| (x as u32 as f32).to_bits() as u64)
                    }
                    (Ty::F32, Ty::F64, _, false, false) => $m!($d, $a, |x| b64(f32v(x) as f64)),
                    (Ty::F64, Ty::F32, Some(Rnd::Rn), false, false) => $m!($d, $a, |x| b32(f64v(x) as f32)),
                    _ => $m!($d, $a, |x| cvt(x, &c)),
                }
            }
        }
    }};
}

macro_rules! exec_bin {
    ($m:ident, $op:expr, $d:expr, $a:expr, $b:expr) => {{
        use $crate::ptx::ir::{BinOp, FFlags, FMode, H2Op, I2Op, Rnd, F, W};
        use $crate::ptx::math::*;
        use $crate::ptx::ops::sx;
        match $op {
            BinOp::Add(W::W32) => $m!($d, $a, $b, |x, y| (x as u32).wrapping_add(y as u32) as u64),
            BinOp::Add(W::W64) => $m!($d, $a, $b, |x, y| x.wrapping_add(y)),
            BinOp::Add(W::W16) => $m!($d, $a, $b, |x, y| (x as u16).wrapping_add(y as u16) as u64),
            BinOp::Sub(W::W32) => $m!($d, $a, $b, |x, y| (x as u32).wrapping_sub(y as u32) as u64),
            BinOp::Sub(W::W64) => $m!($d, $a, $b, |x, y| x.wrapping_sub(y)),
            BinOp::Sub(W::W16) => $m!($d, $a, $b, |x, y| (x as u16).wrapping_sub(y as u16) as u64),
            BinOp::AddSatS32 => $m!($d, $a, $b, |x, y| (x as i32).saturating_add(y as i32) as u32 as u64),
            BinOp::SubSatS32 => $m!($d, $a, $b, |x, y| (x as i32).saturating_sub(y as i32) as u32 as u64),
            BinOp::MulLo(W::W32) => {
                $m!($d, $a, $b, |x, y| (x as u32).wrapping_mul(y as u32) as u64)
            }
            BinOp::MulLo(W::W64) => $m!($d, $a, $b, |x, y| x.wrapping_mul(y)),
            BinOp::MulLo(W::W16) => {
                $m!($d, $a, $b, |x, y| (x as u16).wrapping_mul(y as u16) as u64)
            }
            BinOp::MulHiU(W::W16) => $m!($d, $a, $b, |x, y| ((x as u16 as u32 * y as u16 as u32) >> 16) as u64),
            BinOp::MulHiU(W::W32) => $m!($d, $a, $b, |x, y| ((x as u32 as u64 * y as u32 as u64) >> 32)),
            BinOp::MulHiU(W::W64) => $m!($d, $a, $b, |x, y| ((x as u128 * y as u128) >> 64) as u64),
            BinOp::MulHiS(W::W16) => {
                $m!($d, $a, $b, |x, y| (((x as i16 as i32 * y as i16 as i32) >> 16) as u16) as u64)
            }
            BinOp::MulHiS(W::W32) => {
                $m!($d, $a, $b, |x, y| (((x as i32 as i64 * y as i32 as i64) >> 32) as u32) as u64)
            }
            BinOp::MulHiS(W::W64) => {
                $m!($d, $a, $b, |x, y| ((x as i64 as i128 * y as i64 as i128) >> 64) as u64)
            }
            BinOp::MulWideU(W::W32) => {
                $m!($d, $a, $b, |x, y| (x as u32 as u64) * (y as u32 as u64))
            }
            BinOp::MulWideS(W::W32) => {
                $m!($d, $a, $b, |x, y| ((x as u32 as i32 as i64) * (y as u32 as i32 as i64)) as u64)
            }
            BinOp::MulWideU(_) => $m!($d, $a, $b, |x, y| ((x as u16 as u32) * (y as u16 as u32)) as u64),
            BinOp::MulWideS(_) => {
                $m!($d, $a, $b, |x, y| ((x as u16 as i16 as i32) * (y as u16 as i16 as i32)) as u32 as u64)
            }
            BinOp::Mul24Lo(s) => $m!($d, $a, $b, |x, y| {
                let (p, q) = if s {
                    (((x << 40) as i64 >> 40), ((y << 40) as i64 >> 40))
                } else {
                    ((x & 0xFF_FFFF) as i64, (y & 0xFF_FFFF) as i64)
                };
                (p.wrapping_mul(q) as u64) & 0xFFFF_FFFF
            }),
            BinOp::Mul24Hi(s) => $m!($d, $a, $b, |x, y| {
                let (p, q) = if s {
                    (((x << 40) as i64 >> 40), ((y << 40) as i64 >> 40))
                } else {
                    ((x & 0xFF_FFFF) as i64, (y & 0xFF_FFFF) as i64)
                };
                ((p.wrapping_mul(q) as u64) >> 16) & 0xFFFF_FFFF
            }),
            BinOp::DivU(w) => {
                let m = mask_bits(w.bits());
                $m!($d, $a, $b, |x, y| {
                    let (x, y) = (x & m, y & m);
                    if y == 0 {
                        m
                    } else {
                        x / y
                    }
                })
            }
            BinOp::DivS(w) => {
                let bits = w.bits();
                let m = mask_bits(bits);
                $m!($d, $a, $b, |x, y| {
                    let (p, q) = (sx(x, bits), sx(y, bits));
                    if q == 0 {
                        (if p >= 0 { -1i64 } else { 1 }) as u64 & m
                    } else {
                        (p.wrapping_div(q) as u64) & m
                    }
                })
            }
            BinOp::RemU(w) => {
                let m = mask_bits(w.bits());
                $m!($d, $a, $b, |x, y| {
                    let (x, y) = (x & m, y & m);
                    if y == 0 {
                        x
                    } else {
                        x % y
                    }
                })
            }
            BinOp::RemS(w) => {
                let bits = w.bits();
                let m = mask_bits(bits);
                $m!($d, $a, $b, |x, y| {
                    let (p, q) = (sx(x, bits), sx(y, bits));
                    if q == 0 {
                        x & m
                    } else {
                        (p.wrapping_rem(q) as u64) & m
                    }
                })
            }
            BinOp::MinU(w) => {
                let m = mask_bits(w.bits());
                $m!($d, $a, $b, |x, y| (x & m).min(y & m))
            }
            BinOp::MaxU(w) => {
                let m = mask_bits(w.bits());
                $m!($d, $a, $b, |x, y| (x & m).max(y & m))
            }
            BinOp::MinS(w) => {
                let bits = w.bits();
                let m = mask_bits(bits);
                $m!($d, $a, $b, |x, y| (sx(x, bits).min(sx(y, bits)) as u64) & m)
            }
            BinOp::MaxS(w) => {
                let bits = w.bits();
                let m = mask_bits(bits);
                $m!($d, $a, $b, |x, y| (sx(x, bits).max(sx(y, bits)) as u64) & m)
            }
            BinOp::And | BinOp::PredAnd => $m!($d, $a, $b, |x, y| x & y),
            BinOp::Or | BinOp::PredOr => $m!($d, $a, $b, |x, y| x | y),
            BinOp::Xor | BinOp::PredXor => $m!($d, $a, $b, |x, y| x ^ y),
            BinOp::Shl(W::W32) => $m!($d, $a, $b, |x, y| {
                let s = y as u32;
                if s >= 32 {
                    0
                } else {
                    ((x as u32) << s) as u64
                }
            }),
            BinOp::Shl(w) => {
                let bits = w.bits();
                let m = mask_bits(bits);
                $m!($d, $a, $b, |x, y| {
                    let s = y as u32;
                    if s >= bits {
                        0
                    } else {
                        (x << s) & m
                    }
                })
            }
            BinOp::ShrU(w) => {
                let bits = w.bits();
                let m = mask_bits(bits);
                $m!($d, $a, $b, |x, y| {
                    let s = y as u32;
                    if s >= bits {
                        0
                    } else {
                        (x & m) >> s
                    }
                })
            }
            BinOp::ShrS(w) => {
                let bits = w.bits();
                let m = mask_bits(bits);
                $m!($d, $a, $b, |x, y| {
                    let s = (y as u32).min(bits - 1);
                    ((sx(x, bits) >> s) as u64) & m
                })
            }
            BinOp::FAdd(F::F32, Rnd::Rn, FFlags { ftz: false, sat: false }) => {
                $m!($d, $a, $b, |x, y| b32(f32v(x) + f32v(y)))
            }
            BinOp::FSub(F::F32, Rnd::Rn, FFlags { ftz: false, sat: false }) => {
                $m!($d, $a, $b, |x, y| b32(f32v(x) - f32v(y)))
            }
            BinOp::FMul(F::F32, Rnd::Rn, FFlags { ftz: false, sat: false }) => {
                $m!($d, $a, $b, |x, y| b32(f32v(x) * f32v(y)))
            }
            BinOp::FAdd(F::F64, Rnd::Rn, _) => $m!($d, $a, $b, |x, y| b64(f64v(x) + f64v(y))),
            BinOp::FSub(F::F64, Rnd::Rn, _) => $m!($d, $a, $b, |x, y| b64(f64v(x) - f64v(y))),
            BinOp::FMul(F::F64, Rnd::Rn, _) => $m!($d, $a, $b, |x, y| b64(f64v(x) * f64v(y))),
            BinOp::FAdd(F::F32, r, fl) | BinOp::FSub(F::F32, r, fl) | BinOp::FMul(F::F32, r, fl) => {
                let kind = match $op {
                    BinOp::FAdd(..) => 0,
                    BinOp::FSub(..) => 1,
                    _ => 2,
                };
                $m!($d, $a, $b, |x, y| {
                    let (mut p, mut q) = (f32v(x), f32v(y));
                    if fl.ftz {
                        p = ftz32(p);
                        q = ftz32(q);
                    }
                    let mut v = match kind {
                        0 => add32(p, q, r),
                        1 => add32(p, -q, r),
                        _ => mul32(p, q, r),
                    };
                    if fl.sat {
                        v = sat32(v);
                    }
                    if fl.ftz {
                        v = ftz32(v);
                    }
                    b32(v)
                })
            }
            BinOp::FAdd(F::F64, r, fl) | BinOp::FSub(F::F64, r, fl) | BinOp::FMul(F::F64, r, fl) => {
                let kind = match $op {
                    BinOp::FAdd(..) => 0,
                    BinOp::FSub(..) => 1,
                    _ => 2,
                };
                $m!($d, $a, $b, |x, y| {
                    let (p, q) = (f64v(x), f64v(y));
                    let mut v = match kind {
                        0 => add64(p, q, r),
                        1 => add64(p, -q, r),
                        _ => mul64(p, q, r),
                    };
                    if fl.sat {
                        v = sat64(v);
                    }
                    b64(v)
                })
            }
            BinOp::FAdd(f, _, fl) | BinOp::FSub(f, _, fl) | BinOp::FMul(f, _, fl) => {
                let kind = match $op {
                    BinOp::FAdd(..) => 0,
                    BinOp::FSub(..) => 1,
                    _ => 2,
                };
                $m!($d, $a, $b, |x, y| {
                    let (p, q) = (to_f64(x, f, false), to_f64(y, f, false));
                    let mut v = match kind {
                        0 => p + q,
                        1 => p - q,
                        _ => p * q,
                    };
                    if fl.sat {
                        v = sat64(v);
                    }
                    from_f64(v, f, false)
                })
            }
            // `div.full.f32` in the running launch's model (`numerics::sfu`), read once.
            BinOp::FDiv(F::F32, FMode::Full, false) => {
                let model = $crate::ptx::numerics::sfu::active();
                $m!($d, $a, $b, |x, y| div_full32(model, x as u32, y as u32) as u64)
            }
            BinOp::FDiv(F::F32, mode, ftz) => $m!($d, $a, $b, |x, y| {
                let (mut p, mut q) = (f32v(x), f32v(y));
                if ftz {
                    p = ftz32(p);
                    q = ftz32(q);
                }
                let v = match mode {
                    FMode::Ieee(r) => div32(p, q, r),
                    FMode::Approx | FMode::Full => p / q,
                };
                b32(if ftz { ftz32(v) } else { v })
            }),
            BinOp::FDiv(F::F64, mode, _) => $m!($d, $a, $b, |x, y| {
                let (p, q) = (f64v(x), f64v(y));
                b64(match mode {
                    FMode::Ieee(r) => div64(p, q, r),
                    FMode::Approx | FMode::Full => p / q,
                })
            }),
            BinOp::FDiv(f, _, _) => {
                $m!($d, $a, $b, |x, y| from_f64(to_f64(x, f, false) / to_f64(y, f, false), f, false))
            }
            BinOp::FMin(f, ftz, nan) | BinOp::FMax(f, ftz, nan) => {
                let max = matches!($op, BinOp::FMax(..));
                $m!($d, $a, $b, |x, y| {
                    match fminmax64(to_f64(x, f, ftz), to_f64(y, f, ftz), max, nan) {
                        Some(v) => from_f64(v, f, false),
                        None => match f {
                            F::F32 => NAN32 as u64,
                            F::F64 => NAN64,
                            _ => 0x7FFF,
                        },
                    }
                })
            }
            BinOp::CopySign(F::F32) => {
                $m!($d, $a, $b, |x, y| ((y as u32 & 0x7FFF_FFFF) | (x as u32 & 0x8000_0000)) as u64)
            }
            BinOp::CopySign(_) => $m!($d, $a, $b, |x, y| (y & !(1 << 63)) | (x & (1 << 63))),
            BinOp::Pack(sh) => $m!($d, $a, $b, |x, y| x | (y << sh)),
            BinOp::Bmsk => $m!($d, $a, $b, |x, y| {
                let (p, q) = (x as u32 & 0xFF, y as u32 & 0xFF);
                if p >= 32 {
                    0
                } else {
                    ((((1u64 << q.min(32)) - 1) << p) & 0xFFFF_FFFF)
                }
            }),
            BinOp::AddCarryOut(w) => {
                let m = mask_bits(w.bits()) as u128;
                $m!($d, $a, $b, |x, y| (((x as u128 & m) + (y as u128 & m)) > m) as u64)
            }
            BinOp::SubBorrowOut(w) => {
                let m = mask_bits(w.bits());
                $m!($d, $a, $b, |x, y| ((x & m) < (y & m)) as u64)
            }
            BinOp::H2(op, f) => $m!($d, $a, $b, |x, y| {
                let mut out = 0u64;
                for k in 0..2 {
                    let p = to_f64((x >> (16 * k)) & 0xFFFF, f, false);
                    let q = to_f64((y >> (16 * k)) & 0xFFFF, f, false);
                    let v = match op {
                        H2Op::Add => Some(p + q),
                        H2Op::Sub => Some(p - q),
                        H2Op::Mul => Some(p * q),
                        H2Op::Min => fminmax64(p, q, false, false),
                        H2Op::Max => fminmax64(p, q, true, false),
                    };
                    let h = match v {
                        Some(v) => from_f64(v, f, false),
                        None => 0x7FFF,
                    };
                    out |= (h & 0xFFFF) << (16 * k);
                }
                out
            }),
            BinOp::I2(op, signed) => $m!($d, $a, $b, |x, y| {
                let mut out = 0u64;
                for k in 0..2 {
                    let (p, q) = (((x >> (16 * k)) & 0xFFFF) as u16, ((y >> (16 * k)) & 0xFFFF) as u16);
                    let v = match op {
                        I2Op::Add => p.wrapping_add(q),
                        I2Op::Sub => p.wrapping_sub(q),
                        I2Op::Min if signed => (p as i16).min(q as i16) as u16,
                        I2Op::Max if signed => (p as i16).max(q as i16) as u16,
                        I2Op::Min => p.min(q),
                        I2Op::Max => p.max(q),
                    };
                    out |= (v as u64) << (16 * k);
                }
                out
            }),
        }
    }};
}

macro_rules! exec_tern {
    ($m:ident, $op:expr, $d:expr, $a:expr, $b:expr, $c:expr) => {{
        use $crate::ptx::ir::{FFlags, Prmt, Rnd, TernOp, F, W};
        use $crate::ptx::math::*;
        use $crate::ptx::ops::sx;
        match $op {
            TernOp::MadLo(W::W32) => {
                $m!($d, $a, $b, $c, |x, y, z| (x as u32).wrapping_mul(y as u32).wrapping_add(z as u32) as u64)
            }
            TernOp::MadLo(W::W64) => {
                $m!($d, $a, $b, $c, |x, y, z| x.wrapping_mul(y).wrapping_add(z))
            }
            TernOp::MadLo(_) => {
                $m!($d, $a, $b, $c, |x, y, z| (x as u16).wrapping_mul(y as u16).wrapping_add(z as u16) as u64)
            }
            TernOp::MadHiU(W::W32) => {
                $m!($d, $a, $b, $c, |x, y, z| (((x as u32 as u64 * y as u32 as u64) >> 32) as u32)
                    .wrapping_add(z as u32) as u64)
            }
            TernOp::MadHiU(W::W64) => {
                $m!($d, $a, $b, $c, |x, y, z| (((x as u128 * y as u128) >> 64) as u64).wrapping_add(z))
            }
            TernOp::MadHiU(_) => $m!($d, $a, $b, $c, |x, y, z| (((x as u16 as u32 * y as u16 as u32) >> 16) as u16)
                .wrapping_add(z as u16) as u64),
            TernOp::MadHiS(W::W32) => {
                $m!($d, $a, $b, $c, |x, y, z| (((x as i32 as i64 * y as i32 as i64) >> 32) as u32)
                    .wrapping_add(z as u32) as u64)
            }
            TernOp::MadHiS(W::W64) => {
                $m!($d, $a, $b, $c, |x, y, z| {
                    (((x as i64 as i128 * y as i64 as i128) >> 64) as u64).wrapping_add(z)
                })
            }
            TernOp::MadHiS(_) => $m!($d, $a, $b, $c, |x, y, z| (((x as i16 as i32 * y as i16 as i32) >> 16) as u16)
                .wrapping_add(z as u16) as u64),
            TernOp::MadHiSatS32 => $m!($d, $a, $b, $c, |x, y, z| {
                let hi = ((x as i32 as i64 * y as i32 as i64) >> 32) as i32;
                hi.saturating_add(z as i32) as u32 as u64
            }),
            TernOp::MadWideU(W::W32) => {
                $m!($d, $a, $b, $c, |x, y, z| (x as u32 as u64 * y as u32 as u64).wrapping_add(z))
            }
            TernOp::MadWideS(W::W32) => {
                $m!($d, $a, $b, $c, |x, y, z| ((x as i32 as i64 * y as i32 as i64) as u64).wrapping_add(z))
            }
            TernOp::MadWideU(_) => {
                $m!($d, $a, $b, $c, |x, y, z| ((x as u16 as u32 * y as u16 as u32).wrapping_add(z as u32)) as u64)
            }
            TernOp::MadWideS(_) => $m!($d, $a, $b, $c, |x, y, z| ((x as i16 as i32 * y as i16 as i32) as u32)
                .wrapping_add(z as u32) as u64),
            TernOp::Mad24Lo(s) => $m!($d, $a, $b, $c, |x, y, z| {
                let (p, q) = if s {
                    (((x << 40) as i64 >> 40), ((y << 40) as i64 >> 40))
                } else {
                    ((x & 0xFF_FFFF) as i64, (y & 0xFF_FFFF) as i64)
                };
                ((p.wrapping_mul(q) as u64).wrapping_add(z)) & 0xFFFF_FFFF
            }),
            TernOp::Fma(F::F32, Rnd::Rn, FFlags { ftz: false, sat: false }) => {
                $m!($d, $a, $b, $c, fma_lane_f32)
            }
            TernOp::Fma(F::F64, Rnd::Rn, FFlags { ftz: false, sat: false }) => {
                $m!($d, $a, $b, $c, |x, y, z| b64(f64v(x).mul_add(f64v(y), f64v(z))))
            }
            TernOp::Fma(f, r, fl) => $m!($d, $a, $b, $c, |x, y, z| $crate::ptx::ops::fma_bits(f, r, fl, x, y, z)),
            TernOp::FmaNeg(f, fl, neg_product, neg_addend) => {
                // A negation flips the sign bit, exactly, of every value (NaNs included).
                let sign = $crate::ptx::ops::sign_bit(f);
                let (sa, sc) = (if neg_product { sign } else { 0 }, if neg_addend { sign } else { 0 });
                $m!($d, $a, $b, $c, |x, y, z| $crate::ptx::ops::fma_bits(f, Rnd::Rn, fl, x ^ sa, y, z ^ sc))
            }
            TernOp::FmaH2(f) => $m!($d, $a, $b, $c, |x, y, z| {
                let mut out = 0u64;
                for k in 0..2 {
                    let g = |v: u64| to_f64((v >> (16 * k)) & 0xFFFF, f, false);
                    let h = from_f64(g(x).mul_add(g(y), g(z)), f, false);
                    out |= (h & 0xFFFF) << (16 * k);
                }
                out
            }),
            TernOp::Addc(w) => {
                let m = mask_bits(w.bits());
                $m!($d, $a, $b, $c, |x, y, z| x.wrapping_add(y).wrapping_add(z & 1) & m)
            }
            TernOp::AddcCarryOut(w) => {
                let m = mask_bits(w.bits()) as u128;
                $m!($d, $a, $b, $c, |x, y, z| (((x as u128 & m) + (y as u128 & m) + (z as u128 & 1)) > m) as u64)
            }
            TernOp::Subc(w) => {
                let m = mask_bits(w.bits());
                $m!($d, $a, $b, $c, |x, y, z| x.wrapping_sub(y).wrapping_sub(z & 1) & m)
            }
            TernOp::SubcBorrowOut(w) => {
                let m = mask_bits(w.bits()) as u128;
                $m!($d, $a, $b, $c, |x, y, z| ((x as u128 & m) < (y as u128 & m) + (z as u128 & 1)) as u64)
            }
            TernOp::Selp => $m!($d, $a, $b, $c, |x, y, z| if z & 1 != 0 { x } else { y }),
            TernOp::SlctS(_) => $m!($d, $a, $b, $c, |x, y, z| if (z as u32 as i32) >= 0 { x } else { y }),
            TernOp::SlctF(ftz) => $m!($d, $a, $b, $c, |x, y, z| {
                let v = f32v(z);
                let v = if ftz { ftz32(v) } else { v };
                if v >= 0.0 || (v == 0.0) {
                    x
                } else {
                    y
                }
            }),
            TernOp::Bfe { w, signed } => {
                let bits = w.bits() as u64;
                $m!($d, $a, $b, $c, |x, y, z| {
                    let pos = y & 0xFF;
                    let len = z & 0xFF;
                    let msb = bits - 1;
                    let sbit = if signed && len != 0 {
                        let at = (pos + len - 1).min(msb);
                        (x >> at) & 1
                    } else {
                        0
                    };
                    let mut v = 0u64;
                    for i in 0..bits {
                        let bit = if i < len && pos + i <= msb { (x >> (pos + i)) & 1 } else { sbit };
                        v |= bit << i;
                    }
                    v
                })
            }
            TernOp::Prmt(mode) => $m!($d, $a, $b, $c, |x, y, z| {
                let src = (x & 0xFFFF_FFFF) | ((y & 0xFFFF_FFFF) << 32);
                let byte = |i: u64| (src >> (8 * (i & 7))) & 0xFF;
                let nsel = z & 3;
                let mut out = 0u64;
                for i in 0..4u64 {
                    let v = match mode {
                        Prmt::Default => {
                            let s = (z >> (4 * i)) & 0xF;
                            let b = byte(s & 7);
                            if s & 8 != 0 {
                                if b & 0x80 != 0 {
                                    0xFF
                                } else {
                                    0
                                }
                            } else {
                                b
                            }
                        }
                        Prmt::F4e => byte(nsel + i),
                        Prmt::B4e => byte((nsel + 8 - i) & 7),
                        Prmt::Rc8 => byte(nsel),
                        Prmt::Ecl => byte(i.max(nsel)),
                        Prmt::Ecr => byte(i.min(nsel)),
                        Prmt::Rc16 => byte(2 * (nsel & 1) + (i & 1)),
                    };
                    out |= v << (8 * i);
                }
                out
            }),
            TernOp::ShfL { wrap, .. } => $m!($d, $a, $b, $c, |x, y, z| {
                let n = if wrap { z & 31 } else { (z & 0xFFFF_FFFF).min(32) };
                let v = ((y & 0xFFFF_FFFF) << 32) | (x & 0xFFFF_FFFF);
                ((v << n) >> 32) & 0xFFFF_FFFF
            }),
            TernOp::ShfR { wrap } => $m!($d, $a, $b, $c, |x, y, z| {
                let n = if wrap { z & 31 } else { (z & 0xFFFF_FFFF).min(32) };
                let v = ((y & 0xFFFF_FFFF) << 32) | (x & 0xFFFF_FFFF);
                (v >> n) & 0xFFFF_FFFF
            }),
            TernOp::SadU(w) => {
                let m = mask_bits(w.bits());
                $m!($d, $a, $b, $c, |x, y, z| ((x & m).abs_diff(y & m)).wrapping_add(z) & m)
            }
            TernOp::SadS(w) => {
                let bits = w.bits();
                let m = mask_bits(bits);
                $m!($d, $a, $b, $c, |x, y, z| (sx(x, bits).abs_diff(sx(y, bits))).wrapping_add(z) & m)
            }
            TernOp::Lop3(lut) => $m!($d, $a, $b, $c, |x, y, z| {
                let mut r = 0u64;
                for k in 0..8u32 {
                    if lut >> k & 1 != 0 {
                        let p = if k & 4 != 0 { x } else { !x };
                        let q = if k & 2 != 0 { y } else { !y };
                        let s = if k & 1 != 0 { z } else { !z };
                        r |= p & q & s;
                    }
                }
                r & 0xFFFF_FFFF
            }),
        }
    }};
}

/// Picks a monomorphic lane loop for the common compare types.
macro_rules! with_compare {
    ($ty:expr, $cmp:expr, $ftz:expr, $run:ident) => {{
        use $crate::ptx::ir::{Cmp, CmpTy, F, W};
        use $crate::ptx::math::f32v;
        use $crate::ptx::ops::compare;
        match ($ty, $cmp, $ftz) {
            (CmpTy::S(W::W32), Cmp::Eq, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) == (y as u32 as i32)) as u64)
            }
            (CmpTy::S(W::W32), Cmp::Ne, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) != (y as u32 as i32)) as u64)
            }
            (CmpTy::S(W::W32), Cmp::Lt, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) < (y as u32 as i32)) as u64)
            }
            (CmpTy::S(W::W32), Cmp::Le, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) <= (y as u32 as i32)) as u64)
            }
            (CmpTy::S(W::W32), Cmp::Gt, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) > (y as u32 as i32)) as u64)
            }
            (CmpTy::S(W::W32), Cmp::Ge, _) => {
                $run!(|x: u64, y: u64| ((x as u32 as i32) >= (y as u32 as i32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Eq, _) => {
                $run!(|x: u64, y: u64| ((x as u32) == (y as u32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Ne, _) => {
                $run!(|x: u64, y: u64| ((x as u32) != (y as u32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Lt, _) => {
                $run!(|x: u64, y: u64| ((x as u32) < (y as u32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Le, _) => {
                $run!(|x: u64, y: u64| ((x as u32) <= (y as u32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Gt, _) => {
                $run!(|x: u64, y: u64| ((x as u32) > (y as u32)) as u64)
            }
            (CmpTy::U(W::W32), Cmp::Ge, _) => {
                $run!(|x: u64, y: u64| ((x as u32) >= (y as u32)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Eq, _) => {
                $run!(|x: u64, y: u64| ((x as i64) == (y as i64)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Ne, _) => {
                $run!(|x: u64, y: u64| ((x as i64) != (y as i64)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Lt, _) => {
                $run!(|x: u64, y: u64| ((x as i64) < (y as i64)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Le, _) => {
                $run!(|x: u64, y: u64| ((x as i64) <= (y as i64)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Gt, _) => {
                $run!(|x: u64, y: u64| ((x as i64) > (y as i64)) as u64)
            }
            (CmpTy::S(W::W64), Cmp::Ge, _) => {
                $run!(|x: u64, y: u64| ((x as i64) >= (y as i64)) as u64)
            }
            (CmpTy::U(W::W64), Cmp::Eq, _) => $run!(|x: u64, y: u64| ((x) == (y)) as u64),
            (CmpTy::U(W::W64), Cmp::Ne, _) => $run!(|x: u64, y: u64| ((x) != (y)) as u64),
            (CmpTy::U(W::W64), Cmp::Lt, _) => $run!(|x: u64, y: u64| ((x) < (y)) as u64),
            (CmpTy::U(W::W64), Cmp::Le, _) => $run!(|x: u64, y: u64| ((x) <= (y)) as u64),
            (CmpTy::U(W::W64), Cmp::Gt, _) => $run!(|x: u64, y: u64| ((x) > (y)) as u64),
            (CmpTy::U(W::W64), Cmp::Ge, _) => $run!(|x: u64, y: u64| ((x) >= (y)) as u64),
            (CmpTy::B(W::W32), Cmp::Eq, _) => {
                $run!(|x: u64, y: u64| ((x as u32) == (y as u32)) as u64)
            }
            (CmpTy::B(W::W32), Cmp::Ne, _) => {
                $run!(|x: u64, y: u64| ((x as u32) != (y as u32)) as u64)
            }
            (CmpTy::B(W::W64), Cmp::Eq, _) => $run!(|x: u64, y: u64| ((x) == (y)) as u64),
            (CmpTy::B(W::W64), Cmp::Ne, _) => $run!(|x: u64, y: u64| ((x) != (y)) as u64),
            (CmpTy::F(F::F32), Cmp::Eq, false) => {
                $run!(|x: u64, y: u64| (f32v(x) == f32v(y)) as u64)
            }
            (CmpTy::F(F::F32), Cmp::Ne, false) => {
                $run!(|x: u64, y: u64| { f32v(x).partial_cmp(&f32v(y)).is_some_and(|o| o.is_ne()) as u64 })
            }
            (CmpTy::F(F::F32), Cmp::Lt, false) => {
                $run!(|x: u64, y: u64| (f32v(x) < f32v(y)) as u64)
            }
            (CmpTy::F(F::F32), Cmp::Le, false) => {
                $run!(|x: u64, y: u64| (f32v(x) <= f32v(y)) as u64)
            }
            (CmpTy::F(F::F32), Cmp::Gt, false) => {
                $run!(|x: u64, y: u64| (f32v(x) > f32v(y)) as u64)
            }
            (CmpTy::F(F::F32), Cmp::Ge, false) => {
                $run!(|x: u64, y: u64| (f32v(x) >= f32v(y)) as u64)
            }
            (ty, cmp, ftz) => $run!(|x: u64, y: u64| compare(ty, cmp, ftz, x, y) as u64),
        }
    }};
}

#[inline(always)]
pub(crate) fn as_un<F: Fn(u64) -> u64>(f: F) -> F {
    f
}
#[inline(always)]
pub(crate) fn as_bin<F: Fn(u64, u64) -> u64>(f: F) -> F {
    f
}
#[inline(always)]
pub(crate) fn as_tern<F: Fn(u64, u64, u64) -> u64>(f: F) -> F {
    f
}

/// One lane of `fma` in format `f` with rounding `r` and flags `fl`, on and to register bits:
/// the arithmetic of PTX's `fma` and of a multiply and an add that ptxas fused.
#[inline]
pub(crate) fn fma_bits(f: F, r: Rnd, fl: FFlags, x: u64, y: u64, z: u64) -> u64 {
    match f {
        F::F32 => {
            let (mut p, mut q, mut s) = (f32v(x), f32v(y), f32v(z));
            if fl.ftz {
                p = ftz32(p);
                q = ftz32(q);
                s = ftz32(s);
            }
            let mut v = fma32(p, q, s, r);
            if fl.sat {
                v = sat32(v);
            }
            if fl.ftz {
                v = ftz32(v);
            }
            b32(v)
        }
        F::F64 => {
            let mut v = fma64(f64v(x), f64v(y), f64v(z), r);
            if fl.sat {
                v = sat64(v);
            }
            b64(v)
        }
        _ => {
            let mut v = to_f64(x, f, false).mul_add(to_f64(y, f, false), to_f64(z, f, false));
            if fl.sat {
                v = sat64(v);
            }
            from_f64(v, f, false)
        }
    }
}

/// The sign bit of a value of format `f` in its register.
pub(crate) fn sign_bit(f: F) -> u64 {
    match f {
        F::F16 | F::BF16 => 0x8000,
        F::F32 => 1 << 31,
        F::F64 => 1 << 63,
    }
}

#[inline(always)]
pub(crate) fn sx(x: u64, bits: u32) -> i64 {
    let sh = 64 - bits;
    ((x << sh) as i64) >> sh
}

pub(crate) fn w_mask(w: W) -> u64 {
    mask_bits(w.bits())
}

/// `bfi`: the low `len` bits of `f` inserted into `b` at `pos` (both taken modulo 256, clipped to
/// the width).
pub(crate) fn bfi(bits: u64, f: u64, b: u64, pos: u64, len: u64) -> u64 {
    let (p, ln) = (pos & 0xFF, len & 0xFF);
    let mut v = b;
    let mut i = 0;
    while i < ln && p + i < bits {
        let bit = (f >> i) & 1;
        v = (v & !(1 << (p + i))) | (bit << (p + i));
        i += 1;
    }
    v & mask_bits(bits as u32)
}

#[inline]
pub(crate) fn boolop(op: BoolOp, a: u64, b: u64) -> u64 {
    match op {
        BoolOp::And => a & b,
        BoolOp::Or => a | b,
        BoolOp::Xor => a ^ b,
    }
}

#[inline]
pub(crate) fn compare(ty: CmpTy, cmp: Cmp, ftz: bool, x: u64, y: u64) -> bool {
    use std::cmp::Ordering as O;
    let ord = match ty {
        CmpTy::F(f) => return cmp_f64(to_f64(x, f, ftz), to_f64(y, f, ftz), cmp),
        CmpTy::U(w) | CmpTy::B(w) => {
            let m = w_mask(w);
            (x & m).cmp(&(y & m))
        }
        CmpTy::S(w) => sx(x, w.bits()).cmp(&sx(y, w.bits())),
    };
    match cmp {
        Cmp::Eq | Cmp::Equ => ord == O::Equal,
        Cmp::Ne | Cmp::Neu => ord != O::Equal,
        Cmp::Lt | Cmp::Ltu => ord == O::Less,
        Cmp::Le | Cmp::Leu => ord != O::Greater,
        Cmp::Gt | Cmp::Gtu => ord == O::Greater,
        Cmp::Ge | Cmp::Geu => ord != O::Less,
        Cmp::Num => true,
        Cmp::Nan => false,
    }
}

pub(crate) fn atom_new(op: AtomOp, size: u8, f: Option<F>, old: u64, b: u64, c: u64) -> u64 {
    let bits = size as u32 * 8;
    let m = mask_bits(bits);
    match op {
        AtomOp::Add => old.wrapping_add(b) & m,
        AtomOp::FAdd => match f {
            Some(F::F64) => b64(f64v(old) + f64v(b)),
            // Global f32 atomic add flushes subnormals and rounds to nearest.
            _ => b32(ftz32(ftz32(f32v(old)) + ftz32(f32v(b)))),
        },
        AtomOp::Min(s) => {
            if s {
                if sx(b, bits) < sx(old, bits) {
                    b & m
                } else {
                    old
                }
            } else {
                (old & m).min(b & m)
            }
        }
        AtomOp::Max(s) => {
            if s {
                if sx(b, bits) > sx(old, bits) {
                    b & m
                } else {
                    old
                }
            } else {
                (old & m).max(b & m)
            }
        }
        AtomOp::FMin | AtomOp::FMax => old,
        AtomOp::Inc => {
            if (old & m) >= (b & m) {
                0
            } else {
                (old + 1) & m
            }
        }
        AtomOp::Dec => {
            if old & m == 0 || (old & m) > (b & m) {
                b & m
            } else {
                (old - 1) & m
            }
        }
        AtomOp::And => old & b & m,
        AtomOp::Or => (old | b) & m,
        AtomOp::Xor => (old ^ b) & m,
        AtomOp::Exch => b & m,
        AtomOp::Cas => {
            if old & m == b & m {
                c & m
            } else {
                old
            }
        }
    }
}

/// The lane whose `a` thread `l` of an `n`-thread block reads in `shfl.sync` with operands `b` and
/// `c`, and whether that lane is in range (the predicate). Out of range, or past the block, a lane
/// reads its own value. Shared by both engines so that they agree bit for bit.
pub(crate) fn shfl_source(mode: ShflMode, l: usize, b: u64, c: u64, n: usize) -> (usize, bool) {
    let lane = (l & 31) as u32;
    let base = l & !31;
    let bval = b as u32 & 31;
    let cv = c as u32;
    let cval = cv & 31;
    let seg = (cv >> 8) & 31;
    let max_lane = (lane & seg) | (cval & !seg);
    let min_lane = lane & seg;
    let (j, ok) = match mode {
        ShflMode::Up => {
            let j = lane as i32 - bval as i32;
            (j, j >= max_lane as i32)
        }
        ShflMode::Down => {
            let j = (lane + bval) as i32;
            (j, j <= max_lane as i32)
        }
        ShflMode::Bfly => {
            let j = (lane ^ bval) as i32;
            (j, j <= max_lane as i32)
        }
        ShflMode::Idx => {
            let j = (min_lane | (bval & !seg)) as i32;
            (j, j <= max_lane as i32)
        }
    };
    let src = if ok { base + j as usize } else { l };
    (if src < n { src } else { l }, ok)
}
