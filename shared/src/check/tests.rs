//! The verdict's rules on hand-made bytes; the replays that feed it real bytes are tested in
//! `shared::replay` and the CLI's tests.

use super::*;

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn input<'x>(dtype: DType, got: &'x [u8], want: &'x [u8], tolerance: Tolerance) -> RegionInput<'x> {
    RegionInput {
        region: 3,
        name: "y",
        dtype,
        layout: None,
        got,
        others: &[],
        want,
        tolerance,
        over: ToleranceOverride::default(),
        recorded: &[],
        declared: &[],
    }
}

fn check(dtype: DType, got: &[u8], want: &[u8], tolerance: Tolerance) -> RegionCheck {
    check_region(&input(dtype, got, want, tolerance))
}

#[test]
fn exact_floats_and_floats_a_few_ulps_off_are_told_apart() {
    let want = f32s(&[1.0, 2.0, 3.0, 4.0]);
    let same = check(DType::F32, &want, &want, Tolerance::Exact);
    assert!(same.passed);
    assert_eq!(same.outcome(), Outcome::Exact);
    assert!(same.line().contains("4 elements bit-exact"), "{}", same.line());
    let near = f32s(&[1.0, f32::from_bits(2.0f32.to_bits() + 3), 3.0, 4.0]);
    let c = check(DType::F32, &near, &want, Tolerance::Exact);
    assert!(c.passed, "{}", c.line());
    assert_eq!(c.outcome(), Outcome::Within);
    assert_eq!((c.stretches[0].inexact, c.stretches[0].max_ulps), (1, 3));
    assert_eq!(CheckState::of(std::slice::from_ref(&c)), CheckState::Within);
    assert_eq!(CheckState::of(&[same]), CheckState::Exact);
}

#[test]
fn a_float_far_off_fails_naming_the_element_in_its_type() {
    let want = f32s(&[1.0, 2.0, 3.0, 4.0]);
    let got = f32s(&[1.0, 2.5, 3.0, 5.0]);
    let c = check(DType::F32, &got, &want, Tolerance::Exact);
    assert!(!c.passed);
    assert_eq!((c.elements(), c.mismatches()), (4, 2));
    let f = c.first_mismatch().unwrap();
    assert_eq!((f.index, f.offset, f.got_value, f.want_value), (1, 4, Some(2.5), Some(2.0)));
    assert_eq!((f.got.as_str(), f.want.as_str()), ("2.5 (0x40200000)", "2.0 (0x40000000)"));
    assert_eq!(c.max_abs_err(), 1.0);
    assert_eq!(c.max_rel_err(), 0.25);
    assert!(c.line().starts_with("FAIL y: bytes 0..16 f32 (declared): 2 of 4 elements differ"), "{}", c.line());
    assert_eq!(CheckState::of(&[c]), CheckState::Failed);
}

#[test]
fn the_tolerance_is_ulps_or_relative_and_overridable() {
    let want = f32s(&[1000.0]);
    let got = f32s(&[1000.009]); // about 147 ulps, 9e-6 relative
    assert!(check(DType::F32, &got, &want, Tolerance::Exact).passed);
    let mut i = input(DType::F32, &got, &want, Tolerance::Exact);
    i.over = ToleranceOverride { ulps: Some(0), rtol: Some(1e-6), atol: None };
    assert!(!check_region(&i).passed);
    i.over = ToleranceOverride { ulps: Some(200), rtol: Some(0.0), atol: None };
    assert!(check_region(&i).passed);
    // The archive's own rtol/atol replace the type's defaults.
    let c = check(DType::F32, &got, &want, Tolerance::Close { rtol: 1e-7, atol: 0.0 });
    assert!(!c.passed, "{}", c.line());
}

#[test]
fn nan_matches_nan_and_zero_matches_negative_zero_but_not_bit_for_bit() {
    let want = f32s(&[0.0, f32::from_bits(0x7fc0_0000)]);
    let got = f32s(&[-0.0, f32::from_bits(0x7fc0_0001)]);
    let c = check(DType::F32, &got, &want, Tolerance::Exact);
    assert!(c.passed, "{}", c.line());
    assert_eq!(c.outcome(), Outcome::Within);
    let inf = check(DType::F32, &f32s(&[f32::INFINITY]), &f32s(&[f32::MAX]), Tolerance::Exact);
    assert!(!inf.passed);
    assert_eq!(inf.max_abs_err(), 0.0, "infinite differences stay out of the maxima");
}

#[test]
fn every_float_width_counts_ulps_in_its_own_type() {
    let h = |bits: u16| bits.to_le_bytes().to_vec();
    let one = half::f16::from_f32(1.0).to_bits();
    assert!(check(DType::F16, &h(one + 2), &h(one), Tolerance::Exact).passed);
    let c = check(DType::F16, &h(one + 3), &h(one), Tolerance::Exact);
    assert!(!c.passed, "3 ulps of f16 is 3e-3 relative, beyond both defaults: {}", c.line());
    assert_eq!(c.first_mismatch().unwrap().got, "1.0029297 (0x3c03)");
    let b = half::bf16::from_f32(1.0).to_bits();
    assert!(check(DType::Bf16, &h(b + 1), &h(b), Tolerance::Exact).passed);
    let d = |v: f64| v.to_le_bytes().to_vec();
    assert!(check(DType::F64, &d(1.0 + 4.0 * f64::EPSILON), &d(1.0), Tolerance::Exact).passed);
    assert!(!check(DType::F64, &d(1.0 + 1e-9), &d(1.0), Tolerance::Exact).passed);
}

#[test]
fn integers_stay_exact_whatever_the_tolerance() {
    let got = (-1i32).to_le_bytes();
    let want = 1i32.to_le_bytes();
    let c = check(DType::I32, &got, &want, Tolerance::Close { rtol: 1.0, atol: 2.0 });
    assert!(!c.passed);
    let f = c.first_mismatch().unwrap();
    assert_eq!((f.got.as_str(), f.want.as_str(), f.got_value), ("-1", "1", Some(-1.0)));
}

#[test]
fn a_typed_layout_splits_a_region_into_stretches_of_their_own_types() {
    let mut want = half::f16::from_f32(1.5).to_bits().to_le_bytes().repeat(4);
    want.extend(7i32.to_le_bytes().repeat(2));
    want.extend([9u8; 4]);
    let mut got = want.clone();
    got[8] = 8; // the first i32
    let layout = [
        Stretch { len: 8, ty: ElemType::F16 },
        Stretch { len: 8, ty: ElemType::I32 },
        Stretch { len: 4, ty: ElemType::Untyped },
    ];
    let mut i = input(DType::Bytes, &got, &want, Tolerance::Exact);
    i.layout = Some(&layout);
    let c = check_region(&i);
    let kinds: Vec<_> = c.stretches.iter().map(|s| (s.offset, s.ty, s.typed_by, s.outcome)).collect();
    assert_eq!(
        kinds,
        [
            (0, ElemType::F16, TypeSource::Ptx, Outcome::Exact),
            (8, ElemType::I32, TypeSource::Ptx, Outcome::Differ),
            (16, ElemType::Untyped, TypeSource::None, Outcome::Exact),
        ]
    );
    let f = c.first_mismatch().unwrap();
    assert_eq!((f.index, f.offset, f.got.as_str(), f.want.as_str()), (2, 8, "8", "7"));
    assert!(c.detail().contains("bytes 16..20 untyped (no PTX wrote it): 4 elements bit-exact"), "{}", c.detail());
    // Untyped stretches take the declared dtype where it fits.
    i.dtype = DType::U16;
    let c = check_region(&i);
    assert_eq!((c.stretches[2].ty, c.stretches[2].typed_by), (ElemType::I16, TypeSource::Declared));
}

#[test]
fn untyped_bytes_take_the_types_the_programs_arrays_declared_and_ptx_types_win() {
    // f32 ×4 an array declared (only machine code wrote them), then i32 ×2 a PTX store typed,
    // then 8 bytes nobody typed; a declaration that claims the PTX-typed bytes loses there.
    let mut want = f32s(&[1.0, 2.0, 3.0, 4.0]);
    want.extend(7i32.to_le_bytes().repeat(2));
    want.extend([5u8; 8]);
    let mut got = want.clone();
    got[4..8].copy_from_slice(&f32::from_bits(2.0f32.to_bits() + 2).to_le_bytes());
    let layout = [
        Stretch { len: 16, ty: ElemType::Untyped },
        Stretch { len: 8, ty: ElemType::I32 },
        Stretch { len: 8, ty: ElemType::Untyped },
    ];
    let declared = [
        crate::archive::declared::DeclaredType {
            region: 3,
            offset: 0,
            len: 20,
            ty: ElemType::F32,
            from: "torch.float32".into(),
        },
        crate::archive::declared::DeclaredType { region: 3, offset: 26, len: 4, ty: ElemType::F16, from: "<f2".into() },
    ];
    let mut i = input(DType::Bytes, &got, &want, Tolerance::Exact);
    i.layout = Some(&layout);
    i.declared = &declared;
    let c = check_region(&i);
    let kinds: Vec<_> = c.stretches.iter().map(|s| (s.offset, s.len, s.ty, s.typed_by, s.outcome)).collect();
    assert_eq!(
        kinds,
        [
            (0, 16, ElemType::F32, TypeSource::Program, Outcome::Within),
            (16, 8, ElemType::I32, TypeSource::Ptx, Outcome::Exact),
            (24, 2, ElemType::Untyped, TypeSource::None, Outcome::Exact),
            (26, 4, ElemType::F16, TypeSource::Program, Outcome::Exact),
            (30, 2, ElemType::Untyped, TypeSource::None, Outcome::Exact),
        ]
    );
    assert!(c.passed, "{}", c.detail());
    assert!(c.detail().contains("bytes 0..16 f32 (the program's array): 1 of 4 elements inexact"), "{}", c.detail());
    // Without the declaration the same bytes are judged one by one, and the 2-ulp float fails.
    i.declared = &[];
    assert!(!check_region(&i).passed);
}

#[test]
fn replays_that_disagree_widen_the_tolerance_to_their_spread_but_wrong_values_still_fail() {
    let want = f32s(&[10.0, 20.0]);
    // Replays 1000 ulps apart from each other, and from the expected state by as much.
    let a = f32s(&[f32::from_bits(10.0f32.to_bits() + 1000), 20.0]);
    let b = f32s(&[f32::from_bits(10.0f32.to_bits() - 1000), 20.0]);
    let others: [&[u8]; 1] = [&b];
    let mut i = input(DType::F32, &a, &want, Tolerance::Exact);
    assert!(!check_region(&i).passed, "alone, 1000 ulps fails");
    i.others = &others;
    let c = check_region(&i);
    assert!(c.passed, "{}", c.line());
    assert!(c.nondeterministic());
    let s = &c.stretches[0];
    assert_eq!((s.outcome, s.spread.unwrap().ulps, s.spread.unwrap().elements), (Outcome::Within, 2000, 1));
    let t = s.tolerance.unwrap();
    assert_eq!((t.ulps, t.atol), (4, s.spread.unwrap().abs), "widened in value, not in ulps");
    assert!(
        c.detail().contains("nondeterministic: replays disagree on 1 elements by up to 2000 ulps"),
        "{}",
        c.detail()
    );
    // A value far beyond the spread fails, naming the element.
    let wrong = f32s(&[10.0, 21.0]);
    let others: [&[u8]; 1] = [&wrong];
    let i = RegionInput { got: &wrong, others: &others, ..i };
    let c = check_region(&i);
    assert!(!c.passed);
    assert_eq!(c.first_mismatch().unwrap().index, 1);
}

#[test]
fn integer_and_byte_stretches_whose_replays_disagree_pass_with_a_value_a_replay_gave() {
    let want = [1u8, 2, 3, 4];
    let (a, b) = ([1u8, 2, 3, 5], [1u8, 2, 3, 4]);
    let others: [&[u8]; 1] = [&b];
    let mut i = input(DType::Bytes, &a, &want, Tolerance::Exact);
    i.others = &others;
    assert!(check_region(&i).passed);
    let c = [9u8, 2, 3, 5];
    let others: [&[u8]; 1] = [&c];
    i.others = &others;
    assert!(!check_region(&i).passed, "no replay gave 4");
}

#[test]
fn mismatch_fraction_bounds_the_share_of_differing_elements() {
    let want: Vec<u8> = (0..100u32).flat_map(|v| v.to_le_bytes()).collect();
    let mut got = want.clone();
    got[0] ^= 1;
    got[4 * 50] ^= 1;
    let tol = |f| Tolerance::MismatchFraction { max_fraction: f };
    assert!(check(DType::U32, &got, &want, tol(0.02)).passed);
    let c = check(DType::U32, &got, &want, tol(0.019));
    assert!(!c.passed);
    assert_eq!((c.elements(), c.mismatches()), (100, 2));
}

#[test]
fn lengths_that_differ_fail_with_a_reason() {
    let c = check(DType::F32, &[0; 8], &[0; 4], Tolerance::Exact);
    assert!(!c.passed);
    assert_eq!(c.line(), "FAIL y: final state is 8 bytes but 4 are expected");
}

#[test]
fn a_ragged_region_is_judged_as_bytes() {
    let c = check(DType::F32, &[1, 2, 3, 4, 5], &[1, 2, 3, 4, 6], Tolerance::Exact);
    assert_eq!((c.elements(), c.mismatches()), (5, 1));
    assert_eq!(c.first_mismatch().unwrap().index, 4);
    assert_eq!(c.stretches[0].typed_by, TypeSource::None);
}

#[test]
fn no_regions_is_nothing_to_check_not_a_pass() {
    assert_eq!(CheckState::of(&[]), CheckState::NothingToCheck);
    assert!(!CheckState::NothingToCheck.passed());
}

#[test]
fn check_serialises_to_json() {
    let c = check(DType::F32, &f32s(&[1.0]), &f32s(&[2.0]), Tolerance::Exact);
    let v: serde_json::Value = serde_json::to_value(&c).unwrap();
    assert_eq!(v["region"], 3);
    assert_eq!(v["passed"], false);
    assert_eq!(v["stretches"][0]["ty"], "f32");
    assert_eq!(v["stretches"][0]["outcome"], "differ");
    assert_eq!(v["stretches"][0]["first"]["want"], "2.0 (0x40000000)");
    let back: RegionCheck = serde_json::from_value(v).unwrap();
    assert_eq!(back, c);
}
