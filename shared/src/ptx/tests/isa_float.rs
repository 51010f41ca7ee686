//! Float arithmetic, rounding modes, flush-to-zero, NaN rules, approximate functions, conversions.

use super::harness::*;

const ONE_UP: u32 = 0x3F80_0001; // next f32 above 1.0
const ONE_DOWN_NEG: u32 = 0xBF80_0001; // next f32 below -1.0
const TINY: f32 = 9.313_226e-10; // 2^-30
const NAN_CANON: u32 = 0x7FFF_FFFF;

/// 2^e as f32, exactly (f32::powi overflows on the way to small powers).
fn p2(e: i32) -> f32 {
    2f64.powi(e) as f32
}

fn bits(x: f32) -> u32 {
    x.to_bits()
}

/// `x` rounded to f16, to nearest even, by `half`; a NaN as PTX's canonical one.
fn f16_rn(x: f32) -> u32 {
    let h = half::f16::from_f32(x);
    if h.is_nan() {
        0x7FFF
    } else {
        h.to_bits() as u32
    }
}

#[test]
fn add_rounding_modes() {
    let body =
        "add.rn.f32 %f10, %f1, %f2; add.rz.f32 %f11, %f1, %f2; add.rp.f32 %f12, %f1, %f2; add.rm.f32 %f13, %f1, %f2;
                mov.b32 %r10, %f11; mov.b32 %r11, %f12; mov.b32 %r12, %f13; mov.b64 %rd10, {%r12, %r12};";
    let r = onef(body, 1.0, TINY, 0.0);
    assert_eq!(bits(r.f), 0x3F80_0000, "rn");
    assert_eq!(r.r, 0x3F80_0000, "rz");
    assert_eq!(r.r11, ONE_UP, "rp");
    assert_eq!(r.rd as u32, 0x3F80_0000, "rm");
    let r = onef(body, -1.0, -TINY, 0.0);
    assert_eq!(r.r, 0xBF80_0000, "rz toward zero");
    assert_eq!(r.r11, 0xBF80_0000, "rp toward +inf");
    assert_eq!(r.rd as u32, ONE_DOWN_NEG, "rm toward -inf");
    let r = onef("add.rm.f32 %f10, %f1, %f2;", 1.0, -1.0, 0.0);
    assert_eq!(bits(r.f), 0x8000_0000, "x - x is -0 when rounding down");
    let r = onef("add.rz.f32 %f10, %f1, %f2;", f32::MAX, f32::MAX, 0.0);
    assert_eq!(r.f, f32::MAX, "rz does not overflow to infinity");
}

#[test]
fn mul_div_sqrt_fma_rounding_modes() {
    let a = f32::from_bits(ONE_UP);
    let r = onef("mul.rn.f32 %f10, %f1, %f1; mul.rp.f32 %f11, %f1, %f1; mov.b32 %r10, %f11;", a, 0.0, 0.0);
    assert_eq!(bits(r.f), 0x3F80_0002);
    assert_eq!(r.r, 0x3F80_0003);
    let r = onef("div.rn.f32 %f10, %f1, %f2; div.rz.f32 %f11, %f1, %f2; mov.b32 %r10, %f11;", 1.0, 3.0, 0.0);
    assert_eq!(bits(r.f), 0x3EAA_AAAB);
    assert_eq!(r.r, 0x3EAA_AAAA);
    let r = onef("sqrt.rn.f32 %f10, %f1; sqrt.rp.f32 %f11, %f1; mov.b32 %r10, %f11;", 2.0, 0.0, 0.0);
    assert_eq!(bits(r.f), 0x3FB5_04F3);
    assert_eq!(r.r, 0x3FB5_04F4);
    // fma is fused: (1 + 2^-12)^2 - 1 keeps the 2^-24 term a separate multiply would round away.
    let x = 1.0 + p2(-12);
    let r = onef(
        "fma.rn.f32 %f10, %f1, %f1, %f2; mul.rn.f32 %f11, %f1, %f1; add.rn.f32 %f12, %f11, %f2; mov.b32 %r10, %f12;",
        x,
        -1.0,
        0.0,
    );
    assert_eq!(r.f, p2(-11) + p2(-24));
    assert_eq!(f32::from_bits(r.r), p2(-11));
    let r = onef("fma.rz.f32 %f10, %f1, %f1, %f2; fma.rp.f32 %f11, %f1, %f1, %f2; mov.b32 %r10, %f11;", a, 0.0, 0.0);
    assert_eq!(bits(r.f), 0x3F80_0002);
    assert_eq!(r.r, 0x3F80_0003);
}

#[test]
fn f64_rounding_modes() {
    let r = oned(
        "add.rp.f64 %fd10, %fd1, %fd2; add.rn.f64 %fd11, %fd1, %fd2; mov.b64 %rd10, %fd11;",
        1.0,
        2f64.powi(-60),
        0.0,
    );
    assert_eq!(r.fd, 1.0 + f64::EPSILON);
    assert_eq!(f64::from_bits(r.rd), 1.0);
    let r = oned("div.rz.f64 %fd10, %fd1, %fd2; div.rp.f64 %fd11, %fd1, %fd2; mov.b64 %rd10, %fd11;", 1.0, 3.0, 0.0);
    assert_eq!(r.fd.to_bits(), 0x3FD5_5555_5555_5555);
    assert_eq!(r.rd, 0x3FD5_5555_5555_5556);
    let r = oned("mul.rm.f64 %fd10, %fd1, %fd2;", -(1.0 + f64::EPSILON), 1.0 + f64::EPSILON, 0.0);
    // exact: -(1 + 2^-51 + 2^-104): toward -inf is one ulp past the nearest.
    assert_eq!(r.fd.to_bits(), (-(1.0 + 2.0 * f64::EPSILON)).to_bits() + 1);
    let r = oned("sqrt.rn.f64 %fd10, %fd1; fma.rn.f64 %fd11, %fd1, %fd2, %fd3; mov.b64 %rd10, %fd11;", 2.0, 3.0, 1.0);
    assert_eq!(r.fd, 2f64.sqrt());
    assert_eq!(f64::from_bits(r.rd), 7.0);
}

#[test]
fn flush_to_zero_and_saturation() {
    let den = p2(-140);
    let r = onef("add.f32 %f10, %f1, %f2; add.ftz.f32 %f11, %f1, %f2; mov.b32 %r10, %f11;", den, 0.0, 0.0);
    assert_eq!(r.f, den, "denormals survive without .ftz");
    assert_eq!(r.r, 0, "flushed with .ftz");
    let r = onef("mul.f32 %f10, %f1, %f1; mul.ftz.f32 %f11, %f1, %f1; mov.b32 %r10, %f11;", -(p2(-70)), 0.0, 0.0);
    assert_eq!(r.f, p2(-140));
    assert_eq!(r.r, 0);
    let r = onef("mul.ftz.f32 %f10, %f1, %f2;", -den, 1.0, 0.0);
    assert_eq!(bits(r.f), 0x8000_0000, "flush keeps the sign");
    let r = onef("add.sat.f32 %f10, %f1, %f2; mul.sat.f32 %f11, %f3, %f2; mov.b32 %r10, %f11;", 0.75, 0.5, f32::NAN);
    assert_eq!(r.f, 1.0);
    assert_eq!(r.r, 0, "NaN saturates to 0");
    let r = onef("fma.rn.sat.f32 %f10, %f1, %f2, %f3;", -2.0, 1.0, 0.5);
    assert_eq!(r.f, 0.0);
    let r = onef("setp.lt.ftz.f32 %p1, %f1, %f2;", -den, 0.0, 0.0);
    assert!(!r.p, "-denormal flushed to -0 is not below 0");
}

#[test]
fn nan_and_infinity_rules() {
    let qnan_payload = f32::from_bits(0x7FC0_0123);
    let r = onef("add.f32 %f10, %f1, %f2; mul.f32 %f11, %f3, %f2; mov.b32 %r10, %f11;", qnan_payload, 1.0, 0.0);
    assert_eq!(bits(r.f), NAN_CANON, "NaN results are canonical");
    let r = onef("mul.f32 %f10, %f1, %f2;", f32::INFINITY, 0.0, 0.0);
    assert_eq!(bits(r.f), NAN_CANON);
    let r = onef("div.rn.f32 %f10, %f1, %f2; div.rn.f32 %f11, %f2, %f2; mov.b32 %r10, %f11;", 1.0, 0.0, 0.0);
    assert_eq!(r.f, f32::INFINITY);
    assert_eq!(r.r, NAN_CANON);
    let r = onef("div.rn.f32 %f10, %f1, %f2;", -1.0, 0.0, 0.0);
    assert_eq!(r.f, f32::NEG_INFINITY);
    let r = onef("sqrt.rn.f32 %f10, %f1; rcp.rn.f32 %f11, %f2; mov.b32 %r10, %f11;", -1.0, -0.0, 0.0);
    assert_eq!(bits(r.f), NAN_CANON);
    assert_eq!(f32::from_bits(r.r), f32::NEG_INFINITY);
    let r = onef("min.f32 %f10, %f1, %f2; max.f32 %f11, %f2, %f1; mov.b32 %r10, %f11;", f32::NAN, 3.0, 0.0);
    assert_eq!(r.f, 3.0, "min ignores one NaN");
    assert_eq!(f32::from_bits(r.r), 3.0);
    let r = onef("min.f32 %f10, %f1, %f1; min.NaN.f32 %f11, %f1, %f2; mov.b32 %r10, %f11;", f32::NAN, 3.0, 0.0);
    assert_eq!(bits(r.f), NAN_CANON);
    assert_eq!(r.r, NAN_CANON);
    let r = onef("min.f32 %f10, %f1, %f2; max.f32 %f11, %f1, %f2; mov.b32 %r10, %f11;", 0.0, -0.0, 0.0);
    assert_eq!(bits(r.f), 0x8000_0000);
    assert_eq!(r.r, 0);
    let r = oned("min.f64 %fd10, %fd1, %fd2; max.f64 %fd11, %fd1, %fd2; mov.b64 %rd10, %fd11;", f64::NAN, -2.0, 0.0);
    assert_eq!(r.fd, -2.0);
    assert_eq!(f64::from_bits(r.rd), -2.0);
}

/// Float registers carry any bit pattern unchanged through moves, selects, sign operations, loads
/// and stores, also around a loop; only arithmetic makes a NaN canonical.
#[test]
fn float_registers_keep_their_bits() {
    let payload = 0x7FC0_0123u32;
    let snan = 0xFF80_0001u32;
    let body = "mov.f32 %f4, %f1; setp.eq.u32 %p2, %r3, 0; selp.f32 %f10, %f4, %f2, %p2; \
        neg.f32 %f5, %f4; abs.f32 %f6, %f5; mov.b32 %r10, %f5; mov.b32 %r11, %f6; \
        mov.f64 %fd4, %fd1; neg.f64 %fd5, %fd4; abs.f64 %fd10, %fd5; \
        max.f32 %f7, %f4, %f2; min.f32 %f8, %f2, %f4; add.f32 %f9, %f7, %f8; mov.b32 %r12, %f9; \
        cvt.u64.u32 %rd10, %r12;";
    let r = rows(
        body,
        &[
            [payload as u64, 2.0f32.to_bits() as u64, 0],
            [snan as u64, (-0.0f32).to_bits() as u64, 0],
            [0x7FF0_0000_0000_0042, 1, 1],
            [(-0.0f32).to_bits() as u64, 0, 0],
        ],
    );
    assert_eq!(bits(r[0].f), payload);
    assert_eq!(r[0].r, payload ^ 0x8000_0000);
    assert_eq!(r[0].r11, payload & 0x7FFF_FFFF);
    assert_eq!(r[0].rd, 4.0f32.to_bits() as u64, "min and max skip one NaN");
    assert_eq!(bits(r[1].f), snan);
    assert_eq!(r[1].rd, 0x8000_0000, "-0 + -0");
    assert_eq!(bits(r[2].f), 1, "selp picks b");
    assert_eq!(r[2].fd.to_bits(), 0x7FF0_0000_0000_0042, "an f64 NaN payload survives neg and abs");
    assert_eq!(r[3].rd, 0, "max(-0, +0) + min(+0, -0) = +0 + -0");
    let looped = "mov.f32 %f4, 0f00000000; mov.u32 %r4, 0;
$Lx:
    fma.rn.f32 %f4, %f4, %f2, %f1; add.u32 %r4, %r4, 1; setp.lt.u32 %p3, %r4, 5; @%p3 bra $Lx;
    mov.f32 %f10, %f4; mov.b32 %r10, %f4;";
    let r = rows(
        looped,
        &[
            [1.5f32.to_bits() as u64, 0.5f32.to_bits() as u64, 0],
            [payload as u64, 0.5f32.to_bits() as u64, 0],
            [f32::INFINITY.to_bits() as u64, 0, 0],
        ],
    );
    assert_eq!(r[0].f, 2.90625);
    assert_eq!(r[1].r, NAN_CANON);
    assert_eq!(r[2].r, NAN_CANON, "inf * 0 + inf on the second pass");
}

#[test]
fn float_compare_ordered_and_unordered() {
    let cases = [
        ("lt", f32::NAN, 1.0, false),
        ("ltu", f32::NAN, 1.0, true),
        ("ne", f32::NAN, f32::NAN, false),
        ("neu", f32::NAN, f32::NAN, true),
        ("eq", 0.0, -0.0, true),
        ("num", f32::NAN, 1.0, false),
        ("nan", 1.0, f32::NAN, true),
        ("geu", 1.0, 2.0, false),
        ("ge", 2.0, 2.0, true),
        ("gtu", f32::INFINITY, f32::NAN, true),
        ("le", f32::NEG_INFINITY, -1e38, true),
    ];
    for (cmp, a, b, want) in cases {
        let r = onef(&format!("setp.{cmp}.f32 %p1, %f1, %f2;"), a, b, 0.0);
        assert_eq!(r.p, want, "setp.{cmp} {a} {b}");
    }
    let r = oned("setp.equ.f64 %p1, %fd1, %fd2;", f64::NAN, 0.0, 0.0);
    assert!(r.p);
    let r = onef("set.lt.u32.f32 %r10, %f1, %f2; set.gt.f32.f32 %f10, %f1, %f2;", 1.0, 2.0, 0.0);
    assert_eq!(r.r, 0xFFFF_FFFF);
    assert_eq!(r.f, 0.0);
}

#[test]
fn approximate_functions_within_their_error() {
    let r = onef("ex2.approx.f32 %f10, %f1; lg2.approx.f32 %f11, %f2; mov.b32 %r10, %f11;", 3.0, 8.0, 0.0);
    assert_eq!(r.f, 8.0);
    assert_eq!(f32::from_bits(r.r), 3.0);
    let r = onef(
        "ex2.approx.ftz.f32 %f10, %f1; lg2.approx.f32 %f11, %f2; mov.b32 %r10, %f11;",
        f32::NEG_INFINITY,
        0.0,
        0.0,
    );
    assert_eq!(r.f, 0.0);
    assert_eq!(f32::from_bits(r.r), f32::NEG_INFINITY);
    for x in [0.1f32, 1.0, 2.5, -3.0, 100.0] {
        let r = onef("sin.approx.f32 %f10, %f1; cos.approx.f32 %f11, %f1; mov.b32 %r10, %f11;", x, 0.0, 0.0);
        assert!((r.f - x.sin()).abs() < p2(-20), "sin {x}");
        assert!((f32::from_bits(r.r) - x.cos()).abs() < p2(-20), "cos {x}");
        let r = onef("rsqrt.approx.f32 %f10, %f1; rcp.approx.f32 %f11, %f1; mov.b32 %r10, %f11;", x.abs(), 0.0, 0.0);
        assert!((r.f - 1.0 / x.abs().sqrt()).abs() <= 2.0 * f32::EPSILON * r.f.abs(), "rsqrt {x}");
        assert!((f32::from_bits(r.r) - 1.0 / x.abs()).abs() <= f32::EPSILON * r.f.abs().max(1.0), "rcp {x}");
    }
    let r = onef("div.approx.f32 %f10, %f1, %f2; div.full.f32 %f11, %f1, %f2; mov.b32 %r10, %f11;", 1.0, 3.0, 0.0);
    assert!((r.f - 1.0 / 3.0).abs() < 2.0 * f32::EPSILON);
    assert!((f32::from_bits(r.r) - 1.0 / 3.0).abs() < 2.0 * f32::EPSILON);
    let r = onef("tanh.approx.f32 %f10, %f1;", 0.5, 0.0, 0.0);
    assert!((r.f - 0.5f32.tanh()).abs() < 1e-6);
    let r = oned("rcp.rn.f64 %fd10, %fd1; rsqrt.approx.f64 %fd11, %fd2; mov.b64 %rd10, %fd11;", 4.0, 16.0, 0.0);
    assert_eq!(r.fd, 0.25);
    assert_eq!(f64::from_bits(r.rd), 0.25);
}

#[test]
fn testp_copysign_abs_neg() {
    let r = onef("testp.finite.f32 %p1, %f1;", f32::INFINITY, 0.0, 0.0);
    assert!(!r.p);
    let r = onef("testp.notanumber.f32 %p1, %f1;", f32::NAN, 0.0, 0.0);
    assert!(r.p);
    let r = onef("testp.subnormal.f32 %p1, %f1;", p2(-130), 0.0, 0.0);
    assert!(r.p);
    let r = onef("testp.normal.f32 %p1, %f1;", 0.0, 0.0, 0.0);
    assert!(!r.p, "zero is not normal");
    let r = oned("testp.infinite.f64 %p1, %fd1;", f64::NEG_INFINITY, 0.0, 0.0);
    assert!(r.p);
    let r = onef(
        "copysign.f32 %f10, %f1, %f2; abs.f32 %f11, %f1; mov.b32 %r10, %f11; neg.f32 %f12, %f2; mov.b32 %r11, %f12;",
        -1.0,
        2.5,
        0.0,
    );
    assert_eq!(r.f, -2.5, "copysign takes the sign of a and the magnitude of b");
    assert_eq!(f32::from_bits(r.r), 1.0);
    assert_eq!(f32::from_bits(r.r11), -2.5);
    let r = onef("abs.ftz.f32 %f10, %f1;", -p2(-130), 0.0, 0.0);
    assert_eq!(bits(r.f), 0);
    let r = oned("neg.f64 %fd10, %fd1; abs.f64 %fd11, %fd1; mov.b64 %rd10, %fd11;", -0.0, 0.0, 0.0);
    assert_eq!(r.fd.to_bits(), 0);
    assert_eq!(r.rd, 0);
}

#[test]
fn float_to_int_conversions_saturate() {
    let body = "cvt.rzi.s32.f32 %r10, %f1; cvt.rni.s32.f32 %r11, %f2; cvt.rmi.s64.f32 %rd10, %f3;";
    let r = onef(body, -2.7, 2.5, -2.1);
    assert_eq!((r.r as i32, r.r11 as i32, r.rd as i64), (-2, 2, -3));
    let r = onef(body, 3.5, 3.5, 2.1);
    assert_eq!((r.r as i32, r.r11 as i32, r.rd as i64), (3, 4, 2));
    let r = onef("cvt.rpi.s32.f32 %r10, %f1; cvt.rzi.s32.f32 %r11, %f2;", 2.1, f32::NAN, 0.0);
    assert_eq!((r.r, r.r11), (3, 0), "NaN converts to 0");
    let r = onef("cvt.rzi.s32.f32 %r10, %f1; cvt.rzi.s32.f32 %r11, %f2;", f32::INFINITY, -3e9, 0.0);
    assert_eq!((r.r, r.r11), (0x7FFF_FFFF, 0x8000_0000));
    let r = onef("cvt.rzi.u32.f32 %r10, %f1; cvt.rzi.u8.f32 %r11, %f2;", -5.0, 300.0, 0.0);
    assert_eq!((r.r, r.r11), (0, 255));
    let r = oned("cvt.rni.u64.f64 %rd10, %fd1; cvt.rzi.s16.f64 %r10, %fd2;", 1e30, -1e10, 0.0);
    assert_eq!(r.rd, u64::MAX);
    assert_eq!(r.r, 0xFFFF_8000, "s16 minimum, sign-extended into 32 bits");
}

#[test]
fn int_to_float_conversions_round() {
    let body = "cvt.rn.f32.s32 %f10, %r1; cvt.rz.f32.s32 %f11, %r1; mov.b32 %r10, %f11; cvt.rp.f32.s32 %f12, %r1; mov.b32 %r11, %f12;";
    let r = one32(body, 16_777_219, 0, 0);
    assert_eq!(r.f, 16_777_220.0, "tie to even");
    assert_eq!(f32::from_bits(r.r), 16_777_218.0);
    assert_eq!(f32::from_bits(r.r11), 16_777_220.0);
    let r = one64("cvt.rn.f32.u64 %f10, %rd1; cvt.rz.f32.u64 %f11, %rd1; mov.b32 %r10, %f11;", u64::MAX, 0, 0);
    assert_eq!(r.f, 18_446_744_073_709_551_616.0);
    assert_eq!(r.r, 0x5F7F_FFFF);
    let r = one64(
        "cvt.rn.f64.s64 %fd10, %rd1; cvt.rm.f64.s64 %fd11, %rd1; mov.b64 %rd10, %fd11;",
        (-(1i64 << 53) - 1) as u64,
        0,
        0,
    );
    assert_eq!(r.fd, -9_007_199_254_740_992.0);
    assert_eq!(f64::from_bits(r.rd), -9_007_199_254_740_994.0);
    let r = one32("cvt.rn.f32.u16 %f10, %h1; cvt.rn.f64.s8 %fd10, %h2;", 65535, 0xFF, 0);
    assert_eq!(r.f, 65535.0);
    assert_eq!(r.fd, -1.0);
}

#[test]
fn float_to_float_conversions() {
    let one_half_ulp = 1.0 + 2f64.powi(-24);
    let body = "cvt.rn.f32.f64 %f10, %fd1; cvt.rp.f32.f64 %f11, %fd1; mov.b32 %r10, %f11; cvt.rz.f32.f64 %f12, %fd2; mov.b32 %r11, %f12;";
    let r = oned(body, one_half_ulp, one_half_ulp + 2f64.powi(-40), 0.0);
    assert_eq!(r.f, 1.0, "tie to even");
    assert_eq!(r.r, ONE_UP);
    assert_eq!(f32::from_bits(r.r11), 1.0);
    let r = oned("cvt.rn.f32.f64 %f10, %fd1; cvt.rz.f32.f64 %f11, %fd1; mov.b32 %r10, %f11;", 1e300, 0.0, 0.0);
    assert_eq!(r.f, f32::INFINITY);
    assert_eq!(f32::from_bits(r.r), f32::MAX);
    let r = onef("cvt.f64.f32 %fd10, %f1; cvt.ftz.f64.f32 %fd11, %f1; mov.b64 %rd10, %fd11;", p2(-140), 0.0, 0.0);
    assert_eq!(r.fd, 2f64.powi(-140));
    assert_eq!(r.rd, 0);
    let r = onef("cvt.sat.f32.f32 %f10, %f1; cvt.rni.f32.f32 %f11, %f2; mov.b32 %r10, %f11; cvt.rmi.f32.f32 %f12, %f3; mov.b32 %r11, %f12;", 1.5, 2.5, -0.5);
    assert_eq!(r.f, 1.0);
    assert_eq!(f32::from_bits(r.r), 2.0);
    assert_eq!(f32::from_bits(r.r11), -1.0);
}

#[test]
fn half_precision_conversions_and_arithmetic() {
    let r = onef("cvt.rn.f16.f32 %h10, %f1; cvt.rn.bf16.f32 %h4, %f1; mov.b32 %r10, {%h4, %h4};", 1.0, 0.0, 0.0);
    assert_eq!(r.h, 0x3C00);
    assert_eq!(r.r & 0xFFFF, 0x3F80);
    let r = onef("cvt.rn.f16.f32 %h10, %f1;", 65520.0, 0.0, 0.0);
    assert_eq!(r.h, 0x7C00, "65520 rounds to infinity in f16");
    let r = onef("cvt.rn.satfinite.f16.f32 %h10, %f1;", 1e6, 0.0, 0.0);
    assert_eq!(r.h, 0x7BFF, "satfinite clamps to 65504");
    let r = one32("cvt.f32.f16 %f10, %h1; cvt.f32.bf16 %f11, %h2; mov.b32 %r10, %f11;", 0x3C00, 0x4049, 0);
    assert_eq!(r.f, 1.0);
    assert_eq!(f32::from_bits(r.r), 3.140625);
    let r = one32("add.f16 %h10, %h1, %h2; mul.rn.f16 %h4, %h1, %h2; cvt.f32.f16 %f10, %h4;", 0x3C00, 0x4000, 0);
    assert_eq!(r.h, 0x4200, "1 + 2 = 3");
    assert_eq!(r.f, 2.0);
    let r = one32("add.f16x2 %r10, %r1, %r2; fma.rn.f16x2 %r11, %r1, %r2, %r2;", 0x4000_3C00, 0x3C00_4000, 0);
    assert_eq!(r.r, 0x4200_4200);
    assert_eq!(r.r11, 0x4200_4400, "low: 1*2+2 = 4, high: 2*1+1 = 3");
    let r = onef("cvt.rn.f16x2.f32 %r10, %f1, %f2;", 2.0, 1.0, 0.0);
    assert_eq!(r.r, 0x4000_3C00, "first source goes to the upper half");
}

/// `cvt.rn.f16x2.f32` (native code calls the conversion straight) on the values where rounding
/// to f16 is delicate: ties to even, the largest finite value and the first that overflows,
/// subnormal results and those that round to zero, signed zeros, infinities and NaNs (which
/// become the canonical 0x7FFF). Every engine must give the bits `half` gives, `rows` checks them
/// against the interpreter.
#[test]
fn f32_to_f16_rounds_to_nearest_even_through_every_edge() {
    let values: [f32; 16] = [
        1.0 + f32::EPSILON,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        65504.0,
        65519.99,
        65520.0,
        2f32.powi(-24),
        2f32.powi(-25),
        2f32.powi(-25) * 1.0001,
        2f32.powi(-14) - 2f32.powi(-25),
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0xFF80_0001),
        -1e-30,
    ];
    let inputs: Vec<[u64; 3]> = values.chunks(2).map(|p| [p[0].to_bits() as u64, p[1].to_bits() as u64, 0]).collect();
    let out = rows("cvt.rn.f16x2.f32 %r10, %f1, %f2;", &inputs);
    for (row, pair) in out.iter().zip(values.chunks(2)) {
        assert_eq!(row.r, f16_rn(pair[0]) << 16 | f16_rn(pair[1]), "{pair:?}");
    }
}

/// `cvt.rn.f16x2.f32` (native code converts inline) over every f32 exponent, each with the
/// mantissas that decide a rounding (the dropped part just below, at and just above half of the
/// kept part's last bit, with that bit even and odd, for every position the kept part ends at in
/// the subnormal range too) and both signs, against `half`'s conversion and on every engine.
#[test]
fn f32_to_f16_rounds_to_nearest_even_at_every_exponent() {
    let mut values = Vec::new();
    for exp in 0u32..256 {
        // The kept part's last bit is worth 2^13 of the mantissa for normal f16 results, more
        // for subnormal ones (up to 2^23 at 2^-25).
        for shift in 13..=23u32 {
            let half_ulp = 1u32 << (shift - 1);
            for kept in [0, 1u32 << shift, 3u32 << shift] {
                for dropped in [0, 1, half_ulp - 1, half_ulp, half_ulp + 1] {
                    let mantissa = (kept | dropped) & 0x7F_FFFF;
                    for sign in [0, 0x8000_0000u32] {
                        values.push(f32::from_bits(sign | exp << 23 | mantissa));
                    }
                }
            }
        }
        values.push(f32::from_bits(exp << 23 | 0x7F_FFFF));
    }
    for chunk in values.chunks(1024) {
        let inputs: Vec<[u64; 3]> =
            chunk.chunks(2).map(|p| [p[0].to_bits() as u64, p[1].to_bits() as u64, 0]).collect();
        let out = rows("cvt.rn.f16x2.f32 %r10, %f1, %f2;", &inputs);
        for (row, pair) in out.iter().zip(chunk.chunks(2)) {
            assert_eq!(
                row.r,
                f16_rn(pair[0]) << 16 | f16_rn(pair[1]),
                "{:08x} {:08x}",
                pair[0].to_bits(),
                pair[1].to_bits()
            );
        }
    }
}

/// `cvt.{rz,rm,rp}.f16.f32` and `.bf16.f32` against the definition of each mode, found by search
/// over every finite value of the format: `.rm` the largest value not above the source, `.rp`
/// the smallest not below it (an infinity past the largest finite value), `.rz` whichever of the
/// two is nearer zero; a zero result keeps the source's sign.
#[test]
fn f32_to_f16_and_bf16_round_in_every_mode() {
    let values: [f32; 14] = [
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        -(1.0 + 2f32.powi(-12)),
        1.0 / 3.0,
        -2.0 / 3.0,
        65519.0,
        70000.0,
        -70000.0,
        2f32.powi(-26),
        -(2f32.powi(-26)),
        3e-6,
        1e38,
        0.0,
        -0.0,
    ];
    // Each format: its name, its values by bit pattern, its infinity.
    type Format = (&'static str, fn(u16) -> f32, u16);
    let formats: [Format; 2] = [("f16", f16_value, 0x7C00), ("bf16", bf16_value, 0x7F80)];
    for (fmt, value, inf) in formats {
        // Every finite value but -0, in increasing order.
        let mut finite: Vec<(f64, u16)> =
            (0..=u16::MAX).filter(|&b| b != 0x8000 && value(b).is_finite()).map(|b| (value(b) as f64, b)).collect();
        finite.sort_by(|a, b| a.0.total_cmp(&b.0));
        let inputs: Vec<[u64; 3]> = values.iter().map(|v| [v.to_bits() as u64, 0, 0]).collect();
        for mode in ["rz", "rm", "rp"] {
            let body = format!("cvt.{mode}.{fmt}.f32 %h10, %f1;");
            for (row, &v) in rows(&body, &inputs).iter().zip(&values) {
                let r = v as f64;
                let below = finite.iter().rev().find(|p| p.0 <= r).map_or(inf | 0x8000, |p| p.1);
                let above = finite.iter().find(|p| p.0 >= r).map_or(inf, |p| p.1);
                let want = match mode {
                    "rm" => below,
                    "rp" => above,
                    _ if r >= 0.0 => below,
                    _ => above,
                };
                let want = if value(want) == 0.0 { (v.is_sign_negative() as u16) << 15 } else { want };
                assert_eq!(row.h, want, "cvt.{mode}.{fmt}.f32 of {v:e}: {:#06x}, not {want:#06x}", row.h);
            }
        }
    }
}

fn f16_value(b: u16) -> f32 {
    half::f16::from_bits(b).to_f32()
}

fn bf16_value(b: u16) -> f32 {
    half::bf16::from_bits(b).to_f32()
}

/// Native code skips canonicalising a NaN that only float arithmetic reads (the reader makes it
/// canonical). Whatever reaches a store, a move, `neg`, `abs`, `max` or a compare must still see
/// PTX's NaN rules: the stored bits are the interpreter's.
#[test]
fn a_nan_flowing_through_arithmetic_is_canonical_wherever_it_shows() {
    let payload = 0x7FC0_0123u64;
    let body = "
    add.f32 %f4, %f1, %f2;
    mul.f32 %f5, %f4, %f2;
    fma.rn.f32 %f6, %f5, %f2, %f3;
    sub.f32 %f7, %f6, %f3;
    mov.b32 %r10, %f7;
    add.f32 %f8, %f1, %f3;
    neg.f32 %f10, %f8;
    add.f32 %f9, %f1, %f2;
    max.f32 %f11, %f9, %f3;
    mov.b32 %r11, %f11;
    add.f32 %f12, %f1, %f2;
    setp.nan.f32 %p1, %f12, %f12;
    add.f64 %fd4, %fd1, %fd2;
    mul.f64 %fd10, %fd4, %fd2;";
    let r = rows(
        body,
        &[
            [payload, 2.0f32.to_bits() as u64, 1.0f32.to_bits() as u64],
            [0xFFF8_0000_0000_0123, 0x4000_0000_0000_0000, 0],
        ],
    );
    assert_eq!(r[0].r, NAN_CANON, "a NaN through four operations");
    assert_eq!(bits(r[0].f), NAN_CANON | 0x8000_0000, "neg of an arithmetic NaN");
    assert_eq!(r[0].r11, 1.0f32.to_bits(), "max skips the NaN");
    assert!(r[0].p, "a compare sees the NaN");
    assert_eq!(r[1].fd.to_bits(), 0x7FFF_FFFF_FFFF_FFFF, "f64 arithmetic NaN is canonical");
}

/// `rsqrt.approx.f32` is an f32 square root then an f32 reciprocal: PTX allows a relative error
/// of 2^-22.9, and two correct roundings stay within it over every exponent and many mantissas.
#[test]
fn rsqrt_approx_stays_within_the_ptx_bound() {
    let bound = 2f64.powf(-22.9);
    let mut inputs = Vec::new();
    let mut seed = 0x9E37_79B9u32;
    for e in 1..254u32 {
        for _ in 0..40 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let x = f32::from_bits(e << 23 | (seed & 0x7F_FFFF));
            inputs.push([x.to_bits() as u64, 0, 0]);
        }
    }
    // One launch per 1024 inputs: the harness runs a thread per input in one block.
    let rows: Vec<_> = inputs.chunks(1024).flat_map(|c| rows("rsqrt.approx.f32 %f10, %f1;", c)).collect();
    for (row, inp) in rows.iter().zip(&inputs) {
        let x = f32::from_bits(inp[0] as u32) as f64;
        let exact = 1.0 / x.sqrt();
        let err = ((row.f as f64) - exact).abs() / exact;
        assert!(err <= bound, "rsqrt({x}) = {} is off by {err:e}", row.f);
    }
}

/// `cvt.{rna,rn,rz}.tf32.f32` as XLA's and Triton's tf32 matmuls emit it: rounded at bit 13 of the
/// f32 pattern, low 13 bits cleared, infinities and NaNs unchanged; on every engine.
#[test]
fn cvt_to_tf32_rounds_at_bit_13() {
    let ptx = r#".version 8.0
.target sm_90
.address_size 64
.visible .entry tf32(.param .u64 p) {
    .reg .b64 %rd<3>;
    .reg .b32 %r<5>;
    .reg .f32 %f<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 16;
    add.u64 %rd1, %rd1, %rd2;
    ld.global.f32 %f1, [%rd1];
    cvt.rna.tf32.f32 %r2, %f1;
    cvt.rn.tf32.f32 %r3, %f1;
    cvt.rz.tf32.f32 %r4, %f1;
    st.global.u32 [%rd1+4], %r2;
    st.global.u32 [%rd1+8], %r3;
    st.global.u32 [%rd1+12], %r4;
    ret;
}
"#;
    // (input, rna, rn, rz) as bit patterns.
    let cases: [(u32, u32, u32, u32); 8] = [
        (0x3f80_0000, 0x3f80_0000, 0x3f80_0000, 0x3f80_0000), // 1.0 is a tf32 already
        (0x3f80_1000, 0x3f80_2000, 0x3f80_0000, 0x3f80_0000), // a tie below an even kept part
        (0x3f80_3000, 0x3f80_4000, 0x3f80_4000, 0x3f80_2000), // a tie below an odd kept part
        (0x3f80_0fff, 0x3f80_0000, 0x3f80_0000, 0x3f80_0000), // just under half
        (0xbf80_1001, 0xbf80_2000, 0xbf80_2000, 0xbf80_0000), // negative, just over half
        (0x7f7f_f000, 0x7f80_0000, 0x7f80_0000, 0x7f7f_e000), // the largest f32 rounds up to infinity
        (0x7f80_0000, 0x7f80_0000, 0x7f80_0000, 0x7f80_0000), // infinity
        (0x7fc0_0001, 0x7fc0_0001, 0x7fc0_0001, 0x7fc0_0001), // a NaN keeps its payload
    ];
    let mut input = Vec::new();
    for (x, ..) in cases {
        input.extend_from_slice(&x.to_le_bytes());
        input.extend_from_slice(&[0; 12]);
    }
    // Every engine, checked against the interpreter's bytes by the harness.
    let out = super::run_kernel(ptx, "tf32", [1, 1, 1], [cases.len() as u32, 1, 1], &[input], &[]).unwrap();
    for (i, (x, rna, rn, rz)) in cases.iter().enumerate() {
        let w = |k: usize| u32::from_le_bytes(out[0][i * 16 + 4 * k..i * 16 + 4 * k + 4].try_into().unwrap());
        assert_eq!((w(1), w(2), w(3)), (*rna, *rn, *rz), "input {x:#010x}");
    }
}
