//! `cvt` to and from the 8-bit float pairs `.e4m3x2` and `.e5m2x2`: round to nearest even,
//! `.satfinite` (magnitudes past the largest finite value become it, NaN the canonical `0x7F`),
//! `.relu`, subnormals, and the exact widening to `.f16x2`.

use super::harness::*;

/// `cvt.rn.satfinite{relu}.{fmt}.f32` of (a, b): the packed pair (a in the high byte).
fn pair(fmt: &str, relu: bool, a: f32, b: f32) -> u16 {
    let relu = if relu { ".relu" } else { "" };
    onef(&format!("cvt.rn.satfinite{relu}.{fmt}.f32 %h10, %f1, %f2;"), a, b, 0.0).h
}

fn one(fmt: &str, v: f32) -> u8 {
    pair(fmt, false, v, 0.0).to_le_bytes()[1]
}

fn p2(e: i32) -> f32 {
    2f64.powi(e) as f32
}

#[test]
fn f32_to_e4m3() {
    let e = "e4m3x2";
    assert_eq!(pair(e, false, 1.0, -2.0), 0x38C0);
    assert_eq!(one(e, 448.0), 0x7E, "largest finite");
    assert_eq!(one(e, 464.0), 0x7E, "halfway to 480 rounds to even, 448");
    assert_eq!(one(e, 500.0), 0x7E, "saturates");
    assert_eq!(one(e, f32::INFINITY), 0x7E);
    assert_eq!(one(e, f32::NEG_INFINITY), 0xFE);
    assert_eq!(one(e, f32::NAN), 0x7F);
    assert_eq!(one(e, -f32::NAN), 0x7F, "canonical NaN");
    assert_eq!(one(e, p2(-9)), 0x01, "smallest subnormal");
    assert_eq!(one(e, p2(-10)), 0x00, "half of it ties to even, zero");
    assert_eq!(one(e, 3.0 * p2(-11)), 0x01);
    assert_eq!(one(e, 7.5 * p2(-9)), 0x08, "rounds up into the smallest normal");
    assert_eq!(one(e, 1.0625), 0x38, "1 + 1/16 ties to even");
    assert_eq!(one(e, 1.1875), 0x3A, "1 + 3/16 ties to even, up");
    assert_eq!(one(e, -0.0), 0x80);
    assert_eq!(pair(e, true, -3.0, 3.0), 0x0044, "relu clamps negatives to +0");
    assert_eq!(pair(e, true, f32::NAN, 0.0), 0x7F00);
}

#[test]
fn f32_to_e5m2() {
    let e = "e5m2x2";
    assert_eq!(pair(e, false, 1.0, -2.0), 0x3CC0);
    assert_eq!(one(e, 57344.0), 0x7B, "largest finite");
    assert_eq!(one(e, 1.0e6), 0x7B, "saturates");
    assert_eq!(one(e, f32::INFINITY), 0x7B, "satfinite turns infinity into the largest finite");
    assert_eq!(one(e, f32::NEG_INFINITY), 0xFB);
    assert_eq!(one(e, f32::NAN), 0x7F);
    assert_eq!(one(e, p2(-16)), 0x01, "smallest subnormal");
    assert_eq!(one(e, p2(-17)), 0x00);
    assert_eq!(one(e, 1.5 * p2(-17)), 0x01);
}

#[test]
fn f16x2_to_fp8_and_back() {
    // 0x3C00 = 1.0, 0xC000 = -2.0, 0x7C00 = inf, 0x7E00 = NaN, 0x0001 = 2^-24.
    let to =
        |fmt: &str, relu: &str, x: u32| one32(&format!("cvt.rn.satfinite{relu}.{fmt}.f16x2 %h10, %r1;"), x, 0, 0).h;
    assert_eq!(to("e4m3x2", "", 0x3C00_C000), 0x38C0);
    assert_eq!(to("e5m2x2", "", 0x3C00_C000), 0x3CC0);
    assert_eq!(to("e4m3x2", "", 0x7C00_7E00), 0x7E7F);
    assert_eq!(to("e5m2x2", "", 0xFC00_0001), 0xFB00, "2^-24 is below half of e5m2's smallest subnormal");
    assert_eq!(to("e4m3x2", ".relu", 0x3C00_C000), 0x3800);
    let from = |fmt: &str, relu: &str, x: u32| one32(&format!("cvt.rn{relu}.f16x2.{fmt} %r10, %h1;"), x, 0, 0).r;
    assert_eq!(from("e4m3x2", "", 0x38C0), 0x3C00_C000);
    assert_eq!(from("e4m3x2", "", 0x7E01), 0x5F00_1800, "448 and 2^-9");
    assert_eq!(from("e4m3x2", "", 0xFF7F), 0x7FFF_7FFF, "NaNs become the canonical f16 NaN");
    assert_eq!(from("e5m2x2", "", 0x7CFC), 0x7C00_FC00, "e5m2 infinities");
    assert_eq!(from("e5m2x2", "", 0x7B01), 0x7B00_0100, "e5m2 is the top byte of an f16");
    assert_eq!(from("e4m3x2", ".relu", 0x38C0), 0x3C00_0000);
}

#[test]
fn every_fp8_value_survives_the_round_trip() {
    for fmt in ["e4m3x2", "e5m2x2"] {
        let inputs: Vec<[u64; 3]> = (0..256u64).map(|b| [b, 0, 0]).collect();
        let body = format!("cvt.rn.f16x2.{fmt} %r10, %h1; cvt.rn.satfinite.{fmt}.f16x2 %h10, %r10;");
        for (b, row) in rows(&body, &inputs).into_iter().enumerate() {
            let nan = match fmt {
                "e4m3x2" => b & 0x7F == 0x7F,
                _ => b & 0x7C == 0x7C && b & 3 != 0,
            };
            let inf = fmt == "e5m2x2" && b & 0x7F == 0x7C;
            let want = if nan {
                0x7F
            } else if inf {
                (b as u16 & 0x80) | 0x7B
            } else {
                b as u16
            };
            assert_eq!(row.h, want, "{fmt} {b:#x}");
        }
    }
}
