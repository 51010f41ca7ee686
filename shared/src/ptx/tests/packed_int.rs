//! Packed 16-bit integer pairs (`add`, `sub`, `min`, `max` on `.u16x2` and `.s16x2`, as NVRTC
//! emits for CUB's scans), `.relu`, and what a refusal says: the instruction, its line and the
//! kernels it stops. Every kernel runs on every engine (`harness::rows`).

use super::harness::*;
use crate::ptx::Module;

#[test]
fn add_and_sub_wrap_each_half_on_its_own() {
    let body = "add.u16x2 %r10, %r1, %r2; sub.s16x2 %r11, %r1, %r2;";
    let r = one32(body, 0x0001_FFFF, 0x0001_0001, 0);
    assert_eq!(r.r, 0x0002_0000, "the low half wraps and carries nothing into the high half");
    assert_eq!(r.r11, 0x0000_FFFE);
    let r = one32(body, 0x0000_0000, 0x0001_0001, 0);
    assert_eq!(r.r11, 0xFFFF_FFFF, "the low half borrows nothing from the high half");
    let r = one32("add.s16x2 %r10, %r1, %r2; sub.u16x2 %r11, %r1, %r2;", 0x7FFF_8000, 0x0001_FFFF, 0);
    assert_eq!(r.r, 0x8000_7FFF, "signed halves wrap too: no saturation");
    assert_eq!(r.r11, 0x7FFE_8001);
}

#[test]
fn min_and_max_compare_each_half_by_its_signedness() {
    let body = "min.s16x2 %r10, %r1, %r2; min.u16x2 %r11, %r1, %r2;";
    let r = one32(body, 0x8000_0001, 0x0001_8000, 0);
    assert_eq!(r.r, 0x8000_8000);
    assert_eq!(r.r11, 0x0001_0001);
    let body = "max.s16x2 %r10, %r1, %r2; max.u16x2 %r11, %r1, %r2;";
    let r = one32(body, 0x8000_0001, 0x0001_8000, 0);
    assert_eq!(r.r, 0x0001_0001);
    assert_eq!(r.r11, 0x8000_8000);
    // Many rows at once, so that code for groups of threads runs them too.
    let inputs: Vec<[u64; 3]> =
        (0..64u64).map(|i| [i.wrapping_mul(0x9E37_79B9) & 0xFFFF_FFFF, (i * 0x0101_7F3D) & 0xFFFF_FFFF, 0]).collect();
    for (row, [a, b, _]) in rows(body, &inputs).iter().zip(&inputs) {
        let half = |v: u64, k: u32| (v >> (16 * k)) as u16;
        let want_s =
            (0..2).fold(0u32, |w, k| w | ((half(*a, k) as i16).max(half(*b, k) as i16) as u16 as u32) << (16 * k));
        let want_u = (0..2).fold(0u32, |w, k| w | (half(*a, k).max(half(*b, k)) as u32) << (16 * k));
        assert_eq!((row.r, row.r11), (want_s, want_u), "{a:#x} {b:#x}");
    }
}

#[test]
fn relu_clamps_signed_min_and_max_at_zero() {
    let r =
        one32("min.relu.s16x2 %r10, %r1, %r2; max.s16x2.relu %r11, %r1, %r3;", 0xFFFF_0005, 0x0003_0007, 0xFFFE_0003);
    assert_eq!(r.r, 0x0000_0005, "min(-1, 3) is -1, clamped to 0; min(5, 7) is 5");
    assert_eq!(r.r11, 0x0000_0005, "max(-1, -2) is -1, clamped to 0; max(5, 3) is 5");
    let r = one32("min.relu.s32 %r10, %r1, %r2; max.relu.s32 %r11, %r1, %r3;", (-5i32) as u32, 3, (-3i32) as u32);
    assert_eq!((r.r, r.r11), (0, 0));
    let r = one32("min.relu.s32 %r10, %r1, %r2; max.relu.s32 %r11, %r1, %r2;", 7, 9, 0);
    assert_eq!((r.r, r.r11), (7, 9));
    // Predicated off, neither the result nor its clamp is written.
    let r = one32("setp.eq.u32 %p2, %r3, 1; @%p2 min.relu.s32 %r10, %r1, %r2;", (-5i32) as u32, 3, 0);
    assert_eq!(r.r, 0);
    let r = one32("setp.eq.u32 %p2, %r3, 1; @%p2 min.relu.s32 %r10, %r1, %r2;", 11, 30, 1);
    assert_eq!(r.r, 11);
}

#[test]
fn forms_the_isa_lacks_are_refused_by_name_and_line() {
    for (body, what) in [
        ("mul.lo.s16x2 %r10, %r1, %r2;", "unsupported instruction `mul.lo.s16x2`"),
        ("min.relu.u16x2 %r10, %r1, %r2;", "`.relu` applies to `min` and `max` of `.s32` and `.s16x2`"),
        ("add.sat.s16x2 %r10, %r1, %r2;", "`.sat` does not apply to packed 16-bit integers"),
        ("max.relu.u32 %r10, %r1, %r2;", "`.relu` applies to"),
        ("add.relu.s32 %r10, %r1, %r2;", "`.relu` applies to"),
    ] {
        let Err(err) = try_rows(body, &[[1, 2, 3]]) else { panic!("{body} was accepted") };
        assert!(err.contains(what), "{body}: {err}");
        assert!(err.starts_with("PTX line "), "{body}: {err}");
    }
}

#[test]
fn a_refusal_counts_the_kernels_it_stops() {
    let ptx = r#"
.version 8.0
.target sm_90
.address_size 64
.func (.param .b32 r) scan_op(.param .b32 a, .param .b32 b)
{
    .reg .b32 %r<4>;
    ld.param.b32 %r1, [a];
    ld.param.b32 %r2, [b];
    mul.lo.s16x2 %r3, %r1, %r2;
    st.param.b32 [r], %r3;
    ret;
}
.visible .entry plain() { ret; }
.visible .entry scan_a() { .reg .b32 %r<2>; { .param .b32 a; .param .b32 b; .param .b32 r; st.param.b32 [a], 1; st.param.b32 [b], 2; call.uni (r), scan_op, (a, b); } ret; }
.visible .entry scan_b() { .reg .b32 %r<2>; { .param .b32 a; .param .b32 b; .param .b32 r; st.param.b32 [a], 1; st.param.b32 [b], 2; call.uni (r), scan_op, (a, b); } ret; }
"#;
    let err = Module::parse(ptx).unwrap_err();
    assert_eq!(err.line, 10, "{err}");
    assert!(err.message.contains("unsupported instruction `mul.lo.s16x2`"), "{err}");
    assert!(
        err.message.contains("(in function `scan_op`; it stops 2 of the module's 3 kernels: `scan_a`, `scan_b`)"),
        "{err}"
    );
}
