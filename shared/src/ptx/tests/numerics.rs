//! Properties of the numeric helpers against independent references.

use proptest::prelude::*;

use crate::ptx::ir::Rnd;
use crate::ptx::math::*;

fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![any::<u32>().prop_map(f32::from_bits), (-1000.0f32..1000.0), (-1.0f32..1.0).prop_map(|x| x * 1e-30),]
}

proptest! {
    #[test]
    fn fast_fma_matches_the_fused_reference(a in any_f32(), b in any_f32(), c in any_f32()) {
        let want = a.mul_add(b, c);
        let got = fma32_rn(a, b, c);
        prop_assert!(want.to_bits() == got.to_bits() || (want.is_nan() && got.is_nan()), "{a} {b} {c}: {want} vs {got}");
    }

    #[test]
    fn directed_adds_bracket_the_exact_sum(a in -1e6f32..1e6, b in -1e6f32..1e6) {
        // The exact sum of two f32 of these magnitudes is exact in f64.
        let exact = a as f64 + b as f64;
        let dn = add32(a, b, Rnd::Rm) as f64;
        let up = add32(a, b, Rnd::Rp) as f64;
        let z = add32(a, b, Rnd::Rz) as f64;
        prop_assert!(dn <= exact && exact <= up);
        prop_assert!(up - dn <= (f32::EPSILON as f64) * exact.abs().max(f32::MIN_POSITIVE as f64) * 2.0);
        prop_assert!(z.abs() <= exact.abs());
        prop_assert_eq!(add32(a, b, Rnd::Rn), a + b);
    }

    #[test]
    fn directed_division_brackets_the_quotient(a in 1e-3f32..1e3, b in 1e-3f32..1e3) {
        let dn = div32(a, b, Rnd::Rm);
        let up = div32(a, b, Rnd::Rp);
        // dn * b <= a <= up * b, exactly (products of f32 are exact in f64).
        prop_assert!((dn as f64) * (b as f64) <= a as f64);
        prop_assert!((up as f64) * (b as f64) >= a as f64);
        prop_assert!(up.to_bits() - dn.to_bits() <= 1);
    }
}

#[test]
fn midpoint_sums_take_the_exact_path() {
    // (1 + 2^-12)^2 + 2^-60 = 1 + 2^-11 + 2^-24 + 2^-60: in f64 the 2^-60 is lost and the sum sits
    // exactly between two f32 values, where rounding again would go to even (down); the exact
    // value is above the midpoint, so the fused result rounds up.
    let a = 1.0f32 + 1.0 / 4096.0;
    let c = (2f64.powi(-60)) as f32;
    let naive = (a as f64 * a as f64 + c as f64) as f32;
    let fused = a.mul_add(a, c);
    assert_ne!(naive, fused, "the case double-rounds");
    assert_eq!(fma32_rn(a, a, c).to_bits(), fused.to_bits());
    assert_eq!(fused, 1.0 + 2f32.powi(-11) + f32::EPSILON);
}
