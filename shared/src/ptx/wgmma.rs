//! `wgmma.mma_async`'s semantics: where its operands sit in shared memory (matrix descriptors
//! and their swizzle modes), which elements a warpgroup's registers hold, and its arithmetic
//! (that of `mma`, `ptx::matrix`). No engine in it: the executor reads the operands through
//! [`operand_offset`] and the fragment positions, and hands the values to [`product`].
//!
//! **Shape.** One instruction per warpgroup (four consecutive warps, 128 threads): D (64xN) =
//! A (64xK) * B (KxN) + D, with K 32 bytes of elements (16 f16/bf16, 8 tf32, 32 fp8 or 8-bit
//! integers). Warp `w` of the group holds rows `16w..16w+16` of A (from registers) and of D,
//! laid out as `mma.m16n8k*`'s A and C fragments (`matrix.rs`), D repeated for each 8 columns:
//! element `i` of a lane's D is at row `16w + g + 8*((i>>1)&1)`, column `8*(i>>2) + 2t + (i&1)`.
//!
//! **Descriptors.** A shared-memory operand is named by a 64-bit descriptor: its start address
//! (bits 0-13), the leading-dimension byte offset LBO (bits 16-29) and the stride-dimension
//! byte offset SBO (bits 32-45), each in units of 16 bytes, and the swizzle mode (bits 62-63:
//! none, 128, 64 or 32 bytes). The operand is made of core matrices, 8 rows of 16 bytes. An
//! operand is K-major (each of its 64 or N rows holds its K elements together: A row-major, B
//! column-major) or, with `imm-trans` 1, MN-major. With `W` the swizzle width in bytes, row `r`
//! (of M or N) and byte `kb` of K (for MN-major: byte `rb` of the M/N row and element `k`), the
//! element's address before swizzling is:
//!
//! | layout | address |
//! |---|---|
//! | K-major, no swizzle | `start + (r/8)*SBO + (kb/16)*LBO + (r%8)*16 + kb%16` |
//! | K-major, W-byte swizzle | `start + (r/8)*SBO + (r%8)*W + kb` |
//! | MN-major, no swizzle | `start + (rb/16)*SBO + (k/8)*LBO + (k%8)*16 + rb%16` |
//! | MN-major, W-byte swizzle | `start + (rb/W)*LBO + (k/8)*SBO + (k%8)*W + rb%W` |
//!
//! and the W-byte swizzle then XORs address bits 4.. (the 16-byte chunk) with bits 7.. (the
//! 128-byte line), `log2(W/16)` bits of each: the pattern TMA and `cp.async` writers use, on the
//! absolute shared-memory address, which is why stepping a descriptor's start along K inside a
//! swizzled tile works. The descriptor's base-offset field (bits 49-51), for patterns that do
//! not start on a 1024-byte boundary, is not modelled: recap always swizzles by the absolute
//! address.
//!
//! **Arithmetic.** Each element of D is `mma`'s: from D (or zero when `scale-d` is false), the
//! products in increasing k, one f32 fused multiply-add each (exact products, subnormals kept,
//! canonical NaN), f16 D rounded once at the end, integers exact and wrapped or, with
//! `.satfinite`, clamped. `imm-scale-a`/`imm-scale-b` of -1 negate A or B first. In a GPU
//! generation's model ([`MmaModel`]) f16, bf16 and tf32 elements take that generation's inner
//! product (`numerics/tensor_core.rs`): Hopper's `wgmma` runs on the unit its `mma` does.

use super::ir::{MmaTy, Wgmma};
use super::matrix;
use super::numerics::tensor_core::{self, MmaModel, Term};

/// Rows (M) of every `wgmma`.
pub(crate) const M: usize = 64;

/// Bytes of one element of `t`.
pub(crate) fn elem_bytes(t: MmaTy) -> usize {
    matrix::elem_bits(t) as usize / 8
}

impl Wgmma {
    /// Registers each thread holds for D (and the accumulator).
    pub(crate) fn d_regs(&self) -> usize {
        M * self.n as usize / 128 / matrix::per_reg(self.dty)
    }
}

/// Byte offset in shared memory of element (`r`, `k`) of an operand (`r` its row in M or N,
/// `k` its index along K, elements of `esize` bytes) that descriptor `desc` names.
pub(crate) fn operand_offset(desc: u64, r: usize, k: usize, esize: usize, mn_major: bool) -> u64 {
    let field = |at: u32| ((desc >> at) & 0x3FFF) << 4;
    let (start, lbo, sbo) = (field(0), field(16), field(32));
    let w: u64 = match desc >> 62 {
        1 => 128,
        2 => 64,
        3 => 32,
        _ => 0,
    };
    let r = r as u64;
    let k = k as u64;
    let at = match (mn_major, w) {
        (false, 0) => {
            let kb = k * esize as u64;
            start + (r / 8) * sbo + (kb / 16) * lbo + (r % 8) * 16 + kb % 16
        }
        (false, w) => start + (r / 8) * sbo + (r % 8) * w + k * esize as u64,
        (true, 0) => {
            let rb = r * esize as u64;
            start + (rb / 16) * sbo + (k / 8) * lbo + (k % 8) * 16 + rb % 16
        }
        (true, w) => {
            let rb = r * esize as u64;
            start + (rb / w) * lbo + (k / 8) * sbo + (k % 8) * w + rb % w
        }
    };
    if w == 0 {
        at
    } else {
        at ^ (((at >> 7) & (w / 16 - 1)) << 4)
    }
}

/// Where element `i` of lane `lane` of warp `w` (of its warpgroup) sits in D: (row, column).
pub(crate) fn d_pos(w: usize, lane: usize, i: usize) -> (usize, usize) {
    let (row, col) = matrix::c_pos(lane, i & 3);
    (16 * w + row, col + 8 * (i >> 2))
}

/// Where element `i` of lane `lane` of warp `w` sits in A held in registers: (row, column).
pub(crate) fn a_pos(t: MmaTy, w: usize, lane: usize, i: usize) -> (usize, usize) {
    let (row, col) = matrix::a_pos(t, lane, i);
    (16 * w + row, col)
}

/// The product of one warpgroup in `model`'s arithmetic: `a` (64xK, row-major) and `b` (NxK: B's
/// columns, each with its K elements) hold raw element bits, `d` the accumulator's elements (64xN,
/// row-major, bits of `dty`); gives D's elements, row-major.
pub(crate) fn product(op: &Wgmma, model: MmaModel, a: &[u64], b: &[u64], d: &[u64], scale_d: bool) -> Vec<u64> {
    let (n, k) = (op.n as usize, op.k as usize);
    if matrix::modelled(model, op.aty) && matches!(op.dty, MmaTy::F32 | MmaTy::F16) {
        return modelled_product(op, model, a, b, d, scale_d);
    }
    let sign = |neg: bool| if neg { -1.0 } else { 1.0 };
    let av: Vec<f64> = a.iter().map(|x| sign(op.neg_a) * matrix::value(op.aty, *x)).collect();
    let bv: Vec<f64> = b.iter().map(|x| sign(op.neg_b) * matrix::value(op.bty, *x)).collect();
    let mut out = vec![0u64; M * n];
    for row in 0..M {
        let arow = &av[row * k..row * k + k];
        for col in 0..n {
            let bcol = &bv[col * k..col * k + k];
            let acc = if scale_d { matrix::value(op.dty, d[row * n + col]) } else { 0.0 };
            out[row * n + col] =
                matrix::element(op.dty, op.satfinite, acc, arow.iter().copied().zip(bcol.iter().copied()));
        }
    }
    out
}

/// [`product`] in a tensor-core model: every element one fused sum of its K products and D
/// (`tensor_core::dot`), the unit `mma` uses on the same GPU.
fn modelled_product(op: &Wgmma, model: MmaModel, a: &[u64], b: &[u64], d: &[u64], scale_d: bool) -> Vec<u64> {
    let (n, k) = (op.n as usize, op.k as usize);
    let term = |t: MmaTy, bits: u64, neg: bool| {
        let Term { value, exp } = tensor_core::term(t, bits);
        Term { value: if neg { -value } else { value }, exp }
    };
    let av: Vec<Term> = a.iter().map(|&x| term(op.aty, x, op.neg_a)).collect();
    let bv: Vec<Term> = b.iter().map(|&x| term(op.bty, x, op.neg_b)).collect();
    let f16_out = op.dty == MmaTy::F16;
    let mut products = Vec::with_capacity(k);
    let mut out = vec![0u64; M * n];
    for row in 0..M {
        let arow = &av[row * k..row * k + k];
        for col in 0..n {
            let bcol = &bv[col * k..col * k + k];
            products.clear();
            products.extend(arow.iter().zip(bcol).map(|(x, y)| Term { value: x.value * y.value, exp: x.exp + y.exp }));
            let c = if scale_d { tensor_core::term(op.dty, d[row * n + col]) } else { tensor_core::ZERO };
            out[row * n + col] = tensor_core::dot(model, false, c, &products, f16_out) as u64;
        }
    }
    out
}
