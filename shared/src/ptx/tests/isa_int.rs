//! Integer arithmetic and bit instructions, with the edge cases PTX defines.

use super::harness::*;

#[test]
fn add_sub_wrap_and_saturate() {
    let r = one32("add.s32 %r10, %r1, %r2; sub.u32 %r11, %r2, %r1;", 0x7FFF_FFFF, 1, 0);
    assert_eq!(r.r, 0x8000_0000, "add wraps");
    assert_eq!(r.r11, 0x8000_0002, "1 - 0x7fffffff wraps");
    let r = one32("add.sat.s32 %r10, %r1, %r2; sub.sat.s32 %r11, %r3, %r2;", 0x7FFF_FFFF, 1, 0x8000_0000);
    assert_eq!(r.r, 0x7FFF_FFFF);
    assert_eq!(r.r11, 0x8000_0000);
    let r = one64("add.s64 %rd10, %rd1, %rd2;", u64::MAX, 2, 0);
    assert_eq!(r.rd, 1);
    let r = one32("add.u16 %h10, %h1, %h2;", 0xFFFF, 3, 0);
    assert_eq!(r.h, 2);
}

#[test]
fn mul_lo_hi_wide_and_mad() {
    let r = one32("mul.lo.s32 %r10, %r1, %r2; mul.hi.u32 %r11, %r1, %r2;", 0x8000_0001, 4, 0);
    assert_eq!(r.r, 4);
    assert_eq!(r.r11, 2);
    let r = one32("mul.hi.s32 %r10, %r1, %r2; mul.wide.s32 %rd10, %r1, %r2;", (-3i32) as u32, 0x4000_0000, 0);
    // -3 * 2^30 = -3221225472 = 0xFFFF_FFFF_4000_0000
    assert_eq!(r.r, 0xFFFF_FFFF);
    assert_eq!(r.rd, 0xFFFF_FFFF_4000_0000);
    let r = one32("mul.wide.u32 %rd10, %r1, %r2;", u32::MAX, u32::MAX, 0);
    assert_eq!(r.rd, 0xFFFF_FFFE_0000_0001);
    let r = one64("mul.hi.u64 %rd10, %rd1, %rd2;", u64::MAX, u64::MAX, 0);
    assert_eq!(r.rd, u64::MAX - 1);
    let r = one64("mul.hi.s64 %rd10, %rd1, %rd2;", (-1i64) as u64, 5, 0);
    assert_eq!(r.rd, u64::MAX);
    let r = one32("mad.lo.s32 %r10, %r1, %r2, %r3; mad.hi.u32 %r11, %r1, %r2, %r3;", 0x1_0000, 0x1_0000, 7);
    assert_eq!(r.r, 7);
    assert_eq!(r.r11, 8);
    let r = one32("mad.wide.u32 %rd10, %r1, %r2, %rd3;", 0x8000_0000, 4, 5);
    assert_eq!(r.rd, 0x2_0000_0005);
    let r = one32("mul24.lo.u32 %r10, %r1, %r2; mad24.lo.s32 %r11, %r1, %r2, %r3;", 0xFF00_0003, 0x0100_0005, 1);
    assert_eq!(r.r, 15, "only the low 24 bits multiply");
    assert_eq!(r.r11, 16);
}

#[test]
fn division_by_zero_and_overflow() {
    let r = one32("div.u32 %r10, %r1, %r2; rem.u32 %r11, %r1, %r2;", 17, 0, 0);
    assert_eq!(r.r, u32::MAX);
    assert_eq!(r.r11, 17);
    let r = one32("div.s32 %r10, %r1, %r2; rem.s32 %r11, %r1, %r2;", 0x8000_0000, u32::MAX, 0);
    assert_eq!(r.r, 0x8000_0000, "INT_MIN / -1 wraps");
    assert_eq!(r.r11, 0);
    let r = one32("div.s32 %r10, %r1, %r2; rem.s32 %r11, %r1, %r2;", (-7i32) as u32, 2, 0);
    assert_eq!(r.r as i32, -3, "truncating division");
    assert_eq!(r.r11 as i32, -1);
    let r = one64("div.u64 %rd10, %rd1, %rd2;", 100, 0, 0);
    assert_eq!(r.rd, u64::MAX);
    let r = one64("div.s64 %rd10, %rd1, %rd2;", (-100i64) as u64, 7, 0);
    assert_eq!(r.rd as i64, -14);
}

#[test]
fn min_max_signedness() {
    let r = one32("min.s32 %r10, %r1, %r2; min.u32 %r11, %r1, %r2;", u32::MAX, 1, 0);
    assert_eq!(r.r, u32::MAX);
    assert_eq!(r.r11, 1);
    let r = one32("max.s32 %r10, %r1, %r2; max.u32 %r11, %r1, %r2;", u32::MAX, 1, 0);
    assert_eq!(r.r, 1);
    assert_eq!(r.r11, u32::MAX);
    let r = one64("max.s64 %rd10, %rd1, %rd2;", (-5i64) as u64, (-9i64) as u64, 0);
    assert_eq!(r.rd as i64, -5);
    let r = one32("abs.s32 %r10, %r1; neg.s32 %r11, %r2;", 0x8000_0000, 5, 0);
    assert_eq!(r.r, 0x8000_0000, "abs of INT_MIN stays INT_MIN");
    assert_eq!(r.r11 as i32, -5);
}

#[test]
fn shifts_clamp_at_the_width() {
    for (s, shl, shr_u, shr_s) in [
        (0u32, 0x8000_0001u32, 0x8000_0001u32, 0x8000_0001u32),
        (1, 2, 0x4000_0000, 0xC000_0000),
        (31, 0x8000_0000, 1, 0xFFFF_FFFF),
        (32, 0, 0, 0xFFFF_FFFF),
        (1000, 0, 0, 0xFFFF_FFFF),
    ] {
        let r = one32(
            "shl.b32 %r10, %r1, %r2; shr.u32 %r11, %r1, %r2; shr.s32 %r12, %r1, %r2; cvt.u64.u32 %rd10, %r12;",
            0x8000_0001,
            s,
            0,
        );
        assert_eq!((r.r, r.r11, r.rd as u32), (shl, shr_u, shr_s), "shift by {s}");
    }
    let r = one64("shl.b64 %rd10, %rd1, %r2;", 1, 64, 0);
    assert_eq!(r.rd, 0);
    let r = one64("shr.s64 %rd10, %rd1, %r2;", 1 << 63, 70, 0);
    assert_eq!(r.rd, u64::MAX);
    let r = one32("shl.b16 %h10, %h1, %r2;", 1, 16, 0);
    assert_eq!(r.h, 0);
}

#[test]
fn funnel_shifts() {
    // shf.l: upper 32 bits of ({b, a} << n); shf.r: lower 32 bits of ({b, a} >> n).
    let r =
        one32("shf.l.wrap.b32 %r10, %r1, %r2, %r3; shf.r.wrap.b32 %r11, %r1, %r2, %r3;", 0x8000_0000, 0x0000_0001, 33);
    assert_eq!(r.r, 0x0000_0003, "wrap takes n mod 32");
    assert_eq!(r.r11, 0xC000_0000);
    let r = one32(
        "shf.l.clamp.b32 %r10, %r1, %r2, %r3; shf.r.clamp.b32 %r11, %r1, %r2, %r3;",
        0x1234_5678,
        0x9ABC_DEF0,
        40,
    );
    assert_eq!(r.r, 0x1234_5678, "clamp at 32 shifts a fully in");
    assert_eq!(r.r11, 0x9ABC_DEF0);
}

#[test]
fn bit_counting_and_reversal() {
    let r = one32("popc.b32 %r10, %r1; clz.b32 %r11, %r1;", 0x00F0_0001, 0, 0);
    assert_eq!((r.r, r.r11), (5, 8));
    let r = one32("clz.b32 %r10, %r1; brev.b32 %r11, %r2;", 0, 1, 0);
    assert_eq!((r.r, r.r11), (32, 0x8000_0000));
    let r = one64("popc.b64 %r10, %rd1; clz.b64 %r11, %rd1; brev.b64 %rd10, %rd2;", 1 << 40, 3, 0);
    assert_eq!((r.r, r.r11, r.rd), (1, 23, 0xC000_0000_0000_0000));
    let r = one32("bfind.u32 %r10, %r1; bfind.shiftamt.u32 %r11, %r1;", 0x0001_0000, 0, 0);
    assert_eq!((r.r, r.r11), (16, 15));
    let r = one32("bfind.u32 %r10, %r1; bfind.s32 %r11, %r2;", 0, 0xFFFF_FF00, 0);
    assert_eq!(r.r, 0xFFFF_FFFF, "no bit set");
    assert_eq!(r.r11, 7, "signed: first bit that differs from the sign");
    let r = one32("not.b32 %r10, %r1; cnot.b32 %r11, %r1;", 0xF0F0_F0F0, 0, 0);
    assert_eq!((r.r, r.r11), (0x0F0F_0F0F, 0));
}

#[test]
fn bit_field_extract_and_insert() {
    let r = one32("bfe.u32 %r10, %r1, 4, 8; bfe.s32 %r11, %r1, 4, 8;", 0x0000_0F80, 0, 0);
    assert_eq!(r.r, 0xF8);
    assert_eq!(r.r11, 0xFFFF_FFF8, "signed extract sign-extends");
    let r = one32("bfe.u32 %r10, %r1, %r2, %r3; bfe.s32 %r11, %r1, 0, 0;", 0x8000_0000, 28, 10);
    assert_eq!(r.r, 0x8, "field runs past bit 31");
    assert_eq!(r.r11, 0, "length 0 gives 0");
    let r = one32("bfe.s32 %r10, %r1, %r2, %r3;", 0x8000_0000, 40, 4);
    assert_eq!(r.r, 0xFFFF_FFFF, "position past the msb replicates the sign bit");
    let r = one32("bfi.b32 %r10, %r1, %r2, 8, 4; bfi.b32 %r11, %r1, %r2, 30, 8;", 0xFFFF_FFFA, 0, 0);
    assert_eq!(r.r, 0xA00);
    assert_eq!(r.r11, 0x8000_0000, "insert clipped at the msb");
    let r = one64("bfe.u64 %rd10, %rd1, 60, 8;", 0xF000_0000_0000_0000, 0, 0);
    assert_eq!(r.rd, 0xF);
}

#[test]
fn byte_permute_all_modes() {
    // a = 0x33221100, b = 0x77665544: bytes 0..7 are 0x00, 0x11, ... 0x77.
    let (a, b) = (0x3322_1100u32, 0x7766_5544u32);
    let r = one32("prmt.b32 %r10, %r1, %r2, %r3;", a, b, 0x0000_7531);
    assert_eq!(r.r, 0x7755_3311);
    let r = one32("prmt.b32 %r10, %r1, %r2, %r3;", 0x0000_8000, 0, 0x0000_1111 | 0x8888);
    assert_eq!(r.r, 0xFFFF_FFFF, "sign replication of byte 1 (0x80)");
    let cases = [
        ("f4e", 1u32, 0x4433_2211u32),
        ("b4e", 1, 0x6677_0011),
        ("rc8", 2, 0x2222_2222),
        ("ecl", 2, 0x3322_2222),
        ("ecr", 1, 0x1111_1100),
        ("rc16", 1, 0x3322_3322),
    ];
    for (mode, sel, want) in cases {
        let r = one32(&format!("prmt.b32.{mode} %r10, %r1, %r2, %r3;"), a, b, sel);
        assert_eq!(r.r, want, "prmt.{mode} {sel}");
    }
}

#[test]
fn lop3_truth_tables() {
    let (a, b, c) = (0xF0F0_F0F0u32, 0xCCCC_CCCCu32, 0xAAAA_AAAAu32);
    let r = one32("lop3.b32 %r10, %r1, %r2, %r3, 0x96; lop3.b32 %r11, %r1, %r2, %r3, 0xE8;", a, b, c);
    assert_eq!(r.r, a ^ b ^ c);
    assert_eq!(r.r11, (a & b) | (a & c) | (b & c), "majority");
    let r = one32("lop3.b32 %r10, %r1, %r2, %r3, 0x80;", a, b, c);
    assert_eq!(r.r, a & b & c);
}

#[test]
fn sad_selp_slct() {
    let r = one32("sad.u32 %r10, %r1, %r2, %r3; sad.s32 %r11, %r1, %r2, %r3;", 3, 10, 100);
    assert_eq!((r.r, r.r11), (107, 107));
    let r = one32(
        "setp.lt.u32 %p2, %r1, %r2; selp.b32 %r10, 11, 22, %p2; slct.u32.s32 %r11, 5, 6, %r3;",
        1,
        2,
        (-1i32) as u32,
    );
    assert_eq!((r.r, r.r11), (11, 6));
}

#[test]
fn setp_integer_forms() {
    let r = one32("setp.lt.s32 %p1, %r1, %r2; setp.lo.u32 %p2, %r1, %r2; selp.u32 %r10, 1, 0, %p2;", u32::MAX, 0, 0);
    assert!(r.p, "-1 < 0 signed");
    assert_eq!(r.r, 0, "0xffffffff is not below 0 unsigned");
    let r = one32("setp.eq.and.s32 %p1|%p2, %r1, %r2, %p1; selp.u32 %r10, 1, 0, %p2;", 1, 1, 0);
    assert!(!r.p, "eq and false = false");
    assert_eq!(r.r, 0, "ne and false = false");
    let r = one32("setp.ne.u32 %p3, 1, 0; setp.eq.or.s32 %p1|%p2, %r1, %r2, !%p3; selp.u32 %r10, 1, 0, %p2;", 1, 2, 0);
    assert!(!r.p);
    assert_eq!(r.r, 1, "ne or false = true");
    let r = one32("setp.hs.u16 %p1, %h1, %h2;", 0xFFFF, 1, 0);
    assert!(r.p);
}

#[test]
fn vector_packing_moves() {
    let r = one32("mov.b64 %rd10, {%r1, %r2}; mov.b64 {%r10, %r11}, %rd10;", 0x1111_2222, 0x3333_4444, 0);
    assert_eq!(r.rd, 0x3333_4444_1111_2222);
    assert_eq!((r.r, r.r11), (0x1111_2222, 0x3333_4444));
    let r = one32("mov.b32 %r10, {%h1, %h2}; mov.b32 {%h4, %h10}, %r10;", 0xAAAA, 0xBBBB, 0);
    assert_eq!(r.r, 0xBBBB_AAAA);
    assert_eq!(r.h, 0xBBBB);
}

#[test]
fn integer_conversions_saturate_and_extend() {
    let r = one32("cvt.s64.s32 %rd10, %r1; cvt.u64.u32 %rd11, %r1; cvt.u32.u64 %r11, %rd11;", 0xFFFF_FFFE, 0, 0);
    assert_eq!(r.rd, (-2i64) as u64);
    assert_eq!(r.r11, 0xFFFF_FFFE);
    let r = one32("cvt.sat.u8.s32 %r10, %r1; cvt.sat.s8.s32 %r11, %r1;", 300, 0, 0);
    assert_eq!((r.r, r.r11), (255, 127));
    let r = one32("cvt.sat.u8.s32 %r10, %r1; cvt.s32.s8 %r11, %r1;", (-5i32) as u32, 0, 0);
    assert_eq!(r.r, 0);
    assert_eq!(r.r11, (-5i32) as u32, "s8 source sign-extends");
    let r = one32("cvt.sat.s8.s32 %r10, %r1;", (-300i32) as u32, 0, 0);
    assert_eq!(r.r, 0xFFFF_FF80, "a signed 8-bit result is sign-extended into its 32-bit register");
    let r = one32("cvt.u8.u32 %r10, %r1; cvt.sat.u16.u32 %r11, %r1;", 0x1234, 0, 0);
    assert_eq!((r.r, r.r11), (0x34, 0x1234));
}

#[test]
fn carry_chains_add_and_subtract_wide_numbers() {
    // 96-bit add: (2^64 - 1) + 1 carries into the third word; the chain is guarded by nothing.
    let r = one32(
        "add.cc.u32 %r10, %r1, %r2; addc.cc.u32 %r11, %r1, 0; addc.u32 %r12, 0, 0; cvt.u64.u32 %rd10, %r12;",
        u32::MAX,
        1,
        0,
    );
    assert_eq!((r.r, r.r11, r.rd), (0, 0, 1));
    // 64-bit subtract in 32-bit halves: 0x1_0000_0000 - 1 = 0x0_FFFF_FFFF.
    let r = one32("sub.cc.u32 %r10, %r1, %r2; subc.u32 %r11, %r3, 0;", 0, 1, 1);
    assert_eq!((r.r, r.r11), (u32::MAX, 0));
    let r = one64("add.cc.u64 %rd10, %rd1, %rd2; addc.u32 %r10, 0, 0;", u64::MAX, 2, 0);
    assert_eq!((r.rd, r.r), (1, 1));
    let r = one32("add.cc.u32 %r10, %r1, %r2; addc.u32 %r11, 0, 0;", 5, 6, 0);
    assert_eq!((r.r, r.r11), (11, 0), "no carry");
}
