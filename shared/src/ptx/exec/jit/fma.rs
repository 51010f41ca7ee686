//! The one place that picks the machine code of the warp matrix arithmetic native code runs at a
//! boundary (`warp_run.rs`'s warp steps, `runtime.rs`'s `mma` on the spill area): compiled with
//! FMA, AVX2 and F16C where the CPU has all three, the portable code otherwise. Both give the same
//! bits: `f32::mul_add` is one rounding either way (the portable build calls the C library's
//! `fmaf`), and `matrix::widen_f16` converts exactly with or without F16C.
//!
//! The hard idea: `#[target_feature]` only changes the code of the function it is on and of what is
//! inlined into it. So the work is a [`FmaBody`] whose `run` is `#[inline(always)]`, and
//! [`with_fma`] calls it from a generic function compiled for those features: each body is
//! monomorphised into both versions, the CPU is asked once per call, and the inner loops carry no
//! check and no indirect call.

/// Work to run with the CPU's FMA, AVX2 and F16C where it has them (see [`with_fma`]).
pub(super) trait FmaBody {
    type Out;
    /// Runs the work. `F16C`: the CPU has F16C, AVX2 and FMA, and this code is compiled for them.
    /// Implementations are `#[inline(always)]`, so that they take the caller's features.
    fn run<const F16C: bool>(self) -> Self::Out;
}

/// Runs `body` compiled with FMA, AVX2 and F16C where the CPU has all three (one check a call),
/// and its portable build otherwise.
#[inline(always)]
pub(super) fn with_fma<B: FmaBody>(body: B) -> B::Out {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("f16c")
    {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { run_x86(body) };
    }
    body.run::<false>()
}

/// # Safety
/// The CPU must have FMA, AVX2 and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma,avx2,f16c")]
unsafe fn run_x86<B: FmaBody>(body: B) -> B::Out {
    body.run::<true>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx::matrix;

    /// A chain of fused multiply-adds, each step's bits.
    struct Chain<'a>(&'a [(f32, f32)]);

    impl FmaBody for Chain<'_> {
        type Out = Vec<u32>;
        #[inline(always)]
        fn run<const F16C: bool>(self) -> Vec<u32> {
            let mut acc = 0.0f32;
            self.0
                .iter()
                .map(|&(a, b)| {
                    acc = a.mul_add(b, acc);
                    acc.to_bits()
                })
                .collect()
        }
    }

    /// A row of eight f16 values widened to f32, as a warp step does.
    struct Widen<'a>(&'a [u8; 16]);

    impl FmaBody for Widen<'_> {
        type Out = [u32; 8];
        #[inline(always)]
        fn run<const F16C: bool>(self) -> [u32; 8] {
            matrix::widen_f16_row::<F16C>(self.0).map(f32::to_bits)
        }
    }

    #[test]
    fn the_build_with_fma_gives_the_portable_builds_bits() {
        // After -1, (1 + 2^-23)(1 - 2^-23) - 1 is -2^-46 fused but 0 rounded twice; then a
        // product far below the accumulator, subnormal ones, and an inexact one.
        let e = f32::EPSILON;
        let pairs = [(1.0, -1.0), (1.0 + e, 1.0 - e), (3.0e-20, 2.0e-19), (1.0e-30, 1.0e-10), (0.1, 0.3)];
        let chain = with_fma(Chain(&pairs));
        assert_eq!(chain, Chain(&pairs).run::<false>());
        let mut unfused = 0.0f32;
        let twice: Vec<u32> = pairs
            .iter()
            .map(|&(a, b)| {
                unfused += a * b;
                unfused.to_bits()
            })
            .collect();
        assert_ne!(chain, twice, "the inputs must tell a fused multiply-add from two roundings");

        // f16: one, a subnormal, the largest finite, infinity, a NaN with payload, minus zero.
        let halves: [u16; 8] = [0x3C00, 0x0001, 0x7BFF, 0x7C00, 0x7E01, 0x8000, 0xC500, 0x03FF];
        let mut row = [0u8; 16];
        for (bytes, h) in row.chunks_exact_mut(2).zip(halves) {
            bytes.copy_from_slice(&h.to_le_bytes());
        }
        assert_eq!(with_fma(Widen(&row)), Widen(&row).run::<false>());
    }
}
