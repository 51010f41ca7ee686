//! The warp-level matrix instructions' semantics: which element of which matrix each lane's
//! registers hold (the fragment layouts of the PTX ISA, "Matrix fragments for mma"), and the
//! arithmetic of `mma`. No engine in it: the executor hands in one warp's register values.
//!
//! **Fragments.** An `mma` of shape MxNxK multiplies A (MxK) by B (KxN) and adds C (MxN), and no
//! lane holds a whole matrix: each of the 32 lanes holds a few elements of each, packed into its
//! registers low bits first (two 16-bit or four 8-bit elements to a 32-bit register, one tf32,
//! f32 or s32, one f64 to a 64-bit register). With `g = lane >> 2` (the lane's group) and
//! `t = lane & 3` (its place in the group), element `i` of a lane's fragment sits at:
//!
//! | operand, element size | row | column |
//! |---|---|---|
//! | A, 16-bit (f16, bf16) | `g + 8*((i>>1)&1)` | `2t + (i&1) + 8*(i>>2)` |
//! | A, 32/64-bit (tf32, f64) | `g + 8*(i&1)` | `t + 4*(i>>1)` |
//! | A, 8-bit (s8, u8, e4m3, e5m2) | `g + 8*((i>>2)&1)` | `4t + (i&3) + 16*(i>>3)` |
//! | B, 16-bit | `2t + (i&1) + 8*(i>>1)` | `g` |
//! | B, 32/64-bit | `t + 4i` | `g` |
//! | B, 8-bit | `4t + (i&3) + 16*(i>>2)` | `g` |
//! | C and D | `g + 8*(i>>1)` | `2t + (i&1)` |
//!
//! One formula per element size covers every shape of that size: a smaller K or M just stops
//! at fewer elements (m16n8k8 f16 uses `i < 4` of the m16n8k16 table, m16n8k4 tf32 `i < 2` of
//! m16n8k8's, m8n8k4 f64 `i < 1`, m16n8k16 s8 `i < 8` of m16n8k32's), which is how the ISA's
//! tables read. B is stored column by column ("`.col`"): a lane's B elements run down a column.
//!
//! **Arithmetic.** The ISA leaves the accumulation order, its intermediate rounding and the
//! handling of subnormal inputs open; recap defines them: each element of D starts from C and
//! adds the products of its row of A and column of B in increasing k, each step one fused
//! multiply-add in f32 (the product exact, one round to nearest even per step), so a float `mma`
//! is `K` chained `fma.rn.f32`. Inputs (f16, bf16, tf32, e4m3, e5m2) widen to f32 exactly;
//! subnormals are kept, never flushed; a NaN result is the canonical NaN. An f16 C widens to f32
//! and an f16 D is the f32 sum rounded to nearest even once at the end. tf32 inputs ignore the
//! low 13 mantissa bits of their register (a NaN stays NaN). f64 uses f64 fused multiply-adds in
//! the same order. Integer products are exact and their sum with C wraps modulo 2^32, or with
//! `.satfinite` is clamped to the s32 range (the exact sum is clamped once, at the end). That is
//! the `ieee` model; where a launch asks for a GPU generation's ([`MmaModel`]), f16, bf16 and tf32
//! products take that generation's inner product instead (`numerics/tensor_core.rs`), the same
//! in every engine.
//!
//! **ldmatrix, stmatrix, movmatrix.** An 8x8 matrix of 16-bit elements is held by a warp as a
//! fragment of one 32-bit register per lane: lane `l` holds row `l >> 2`, columns `2(l&3)` and
//! `2(l&3)+1` (low half first). `ldmatrix` loads up to four such matrices, the rows of matrix `j`
//! at the addresses held by lanes `8j..8j+8`; `.trans` gives each lane the transposed matrix's
//! fragment instead. `stmatrix` is the inverse, `movmatrix.trans` the transpose in registers.

use half::{bf16, f16};

use super::ir::{Fp8, Mma, MmaTy};
use super::math::{b32, b64, fp8_to_f32};
use super::numerics::tensor_core::{self, MmaModel};

/// How an element type's fragments are laid out (its size class).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Half,
    Word,
    Byte,
}

fn class(t: MmaTy) -> Class {
    match t {
        MmaTy::F16 | MmaTy::BF16 => Class::Half,
        MmaTy::TF32 | MmaTy::F32 | MmaTy::F64 | MmaTy::S32 => Class::Word,
        MmaTy::S8 | MmaTy::U8 | MmaTy::E4M3 | MmaTy::E5M2 => Class::Byte,
    }
}

/// Bits of one element.
pub(crate) fn elem_bits(t: MmaTy) -> u32 {
    match class(t) {
        Class::Half => 16,
        Class::Byte => 8,
        Class::Word if t == MmaTy::F64 => 64,
        Class::Word => 32,
    }
}

/// Elements per register.
pub(crate) fn per_reg(t: MmaTy) -> usize {
    match elem_bits(t) {
        64 => 1,
        b => (32 / b) as usize,
    }
}

/// Where element `i` of lane `lane`'s A fragment sits: (row, column).
pub(crate) fn a_pos(t: MmaTy, lane: usize, i: usize) -> (usize, usize) {
    let (g, q) = (lane >> 2, lane & 3);
    match class(t) {
        Class::Half => (g + 8 * ((i >> 1) & 1), 2 * q + (i & 1) + 8 * (i >> 2)),
        Class::Word => (g + 8 * (i & 1), q + 4 * (i >> 1)),
        Class::Byte => (g + 8 * ((i >> 2) & 1), 4 * q + (i & 3) + 16 * (i >> 3)),
    }
}

/// Where element `i` of lane `lane`'s B fragment sits: (row, column).
fn b_pos(t: MmaTy, lane: usize, i: usize) -> (usize, usize) {
    let (g, q) = (lane >> 2, lane & 3);
    match class(t) {
        Class::Half => (2 * q + (i & 1) + 8 * (i >> 1), g),
        Class::Word => (q + 4 * i, g),
        Class::Byte => (4 * q + (i & 3) + 16 * (i >> 2), g),
    }
}

/// Where element `i` of lane `lane`'s C or D fragment sits: (row, column).
pub(crate) fn c_pos(lane: usize, i: usize) -> (usize, usize) {
    (lane / 4 + 8 * (i >> 1), 2 * (lane & 3) + (i & 1))
}

impl Mma {
    /// Registers each lane holds for A, B, C and D.
    pub(crate) fn reg_counts(&self) -> [usize; 4] {
        let (m, n, k) = (self.m as usize, self.n as usize, self.k as usize);
        let regs = |elems: usize, t: MmaTy| elems / 32 / per_reg(t);
        [regs(m * k, self.aty), regs(k * n, self.bty), regs(m * n, self.cty), regs(m * n, self.dty)]
    }
}

/// An element widened to f64 (exact for every input type).
pub(crate) fn value(t: MmaTy, bits: u64) -> f64 {
    match t {
        MmaTy::F16 => f16::from_bits(bits as u16).to_f64(),
        MmaTy::BF16 => bf16::from_bits(bits as u16).to_f64(),
        MmaTy::TF32 => {
            let x = f32::from_bits(bits as u32);
            if x.is_nan() {
                x as f64
            } else {
                f32::from_bits(bits as u32 & 0xFFFF_E000) as f64
            }
        }
        MmaTy::F32 => f32::from_bits(bits as u32) as f64,
        MmaTy::F64 => f64::from_bits(bits),
        MmaTy::S8 => bits as u8 as i8 as f64,
        MmaTy::U8 => bits as u8 as f64,
        MmaTy::S32 => bits as u32 as i32 as f64,
        MmaTy::E4M3 => fp8_to_f32(bits as u8, Fp8::E4M3) as f64,
        MmaTy::E5M2 => fp8_to_f32(bits as u8, Fp8::E5M2) as f64,
    }
}

/// Unpacks one operand of a warp (`regs`: lane-major, `count` registers per lane) into a
/// row-major matrix with `cols` columns.
fn unpack(t: MmaTy, regs: &[u64], count: usize, cols: usize, pos: impl Fn(usize, usize) -> (usize, usize)) -> Vec<f64> {
    let per = per_reg(t);
    let bits = elem_bits(t);
    let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
    let mut out = vec![0.0; count * per * 32];
    for lane in 0..32 {
        for i in 0..count * per {
            let r = regs[lane * count + i / per];
            let x = (r >> ((i % per) as u32 * bits)) & mask;
            let (row, col) = pos(lane, i);
            out[row * cols + col] = value(t, x);
        }
    }
    out
}

/// One warp's `mma` in `model`'s arithmetic: `a`, `b`, `c` hold every lane's operand registers
/// (lane-major, as many per lane as [`Mma::reg_counts`] says); gives every lane's D registers,
/// lane-major.
pub(crate) fn mma(op: &Mma, model: MmaModel, a: &[u64], b: &[u64], c: &[u64]) -> Vec<u64> {
    let [na, nb, nc, nd] = op.reg_counts();
    if is_float16x8(op) {
        let mut d = vec![0u64; 32 * nd];
        let regs = [(a, na), (b, nb), (c, nc)];
        mma_float(op, model, |o, lane, i| regs[o].0[lane * regs[o].1 + i], |lane, i, v| d[lane * nd + i] = v);
        return d;
    }
    let (m, n, k) = (op.m as usize, op.n as usize, op.k as usize);
    let am = unpack(op.aty, a, na, k, |l, i| a_pos(op.aty, l, i));
    let bm = unpack(op.bty, b, nb, n, |l, i| b_pos(op.bty, l, i));
    let cm = unpack(op.cty, c, nc, n, c_pos);
    let mut dm = vec![0u64; m * n];
    for row in 0..m {
        for col in 0..n {
            let arow = &am[row * k..row * k + k];
            let bcol = (0..k).map(|kk| bm[kk * n + col]);
            let acc = cm[row * n + col];
            dm[row * n + col] = element(op.dty, op.satfinite, acc, arow.iter().copied().zip(bcol));
        }
    }
    let per = per_reg(op.dty);
    let bits = elem_bits(op.dty);
    let mut d = vec![0u64; 32 * nd];
    for lane in 0..32 {
        for i in 0..nd * per {
            let (row, col) = c_pos(lane, i);
            d[lane * nd + i / per] |= dm[row * n + col] << ((i % per) as u32 * bits);
        }
    }
    d
}

/// Whether [`mma_float`] runs `op`: a float product of shape m16n8kK (every float type but f64).
pub(crate) fn is_float16x8(op: &Mma) -> bool {
    op.m == 16 && op.n == 8 && !matches!(op.aty, MmaTy::F64 | MmaTy::S8 | MmaTy::U8)
}

/// An element widened to f32 (exact for every input of [`mma_float`]). f16 by exact arithmetic
/// rather than a library call, so that a caller's loop over a fragment vectorises: the exponent
/// and mantissa moved into an f32's fields and scaled by 2^112 give every finite value (normal or
/// subnormal) exactly; infinities and NaNs keep their class (a NaN's payload never shows: every
/// NaN result is the canonical one).
#[inline(always)]
fn value32(t: MmaTy, bits: u64) -> f32 {
    match t {
        MmaTy::F16 => {
            let h = bits as u32 & 0xFFFF;
            let mag = h & 0x7FFF;
            let v = if mag >= 0x7C00 {
                f32::from_bits(mag << 13 | 0x7F80_0000)
            } else {
                f32::from_bits(mag << 13) * f32::from_bits(0x7780_0000)
            };
            f32::from_bits(v.to_bits() | (h & 0x8000) << 16)
        }
        MmaTy::BF16 => f32::from_bits((bits as u32 & 0xFFFF) << 16),
        MmaTy::F32 => f32::from_bits(bits as u32),
        _ => value(t, bits) as f32,
    }
}

/// One warp's float `mma` of shape m16n8kK ([`is_float16x8`]) with the arithmetic of [`element`]
/// (each element of D from C, one f32 fused multiply-add per k in increasing k), on f32 values
/// unpacked onto the stack: every input type widens to f32 exactly, so this gives `element`'s
/// bits. `reg(operand, lane, i)` reads register `i` of a lane's A (0), B (1) or C (2); `put(lane,
/// i, bits)` takes register `i` of a lane's D. A register's elements are neighbours along k (A,
/// B) or along a row (C, D) in every layout of the table above, so each register is placed once
/// and its elements follow. The k loop runs outside the rows so that the 16 rows' 8-column chains
/// are independent vector fused multiply-adds; `inline(always)` lets a caller compiled with FMA
/// instructions get them instead of library calls (the result is the same: a fused multiply-add
/// is exactly rounded either way).
///
/// The common form (Triton's and cuBLAS's f16 inputs into f32 accumulators, m16n8k16) gets its own
/// copy of the code with the types known, so that its unpacking loops have no type dispatch left
/// in them and vectorise.
#[inline(always)]
pub(crate) fn mma_float(
    op: &Mma,
    model: MmaModel,
    reg: impl Fn(usize, usize, usize) -> u64,
    put: impl FnMut(usize, usize, u64),
) {
    use MmaTy::{F16, F32};
    if is_f16_f32_k16(op) {
        mma_float_typed(16, [F16, F16, F32, F32], model, reg, put)
    } else {
        mma_float_typed(op.k as usize, [op.aty, op.bty, op.cty, op.dty], model, reg, put)
    }
}

/// Whether `model` has arithmetic of its own for inputs of type `t` (f16, bf16 and tf32; the
/// rest, and [`MmaModel::Ieee`], take the ISA's order in IEEE arithmetic).
pub(crate) fn modelled(model: MmaModel, t: MmaTy) -> bool {
    model != MmaModel::Ieee && matches!(t, MmaTy::F16 | MmaTy::BF16 | MmaTy::TF32)
}

/// [`mma_float`] for `k` and the types of A, B, C and D (in that order).
#[inline(always)]
fn mma_float_typed(
    k: usize,
    [aty, bty, cty, dty]: [MmaTy; 4],
    model: MmaModel,
    reg: impl Fn(usize, usize, usize) -> u64,
    mut put: impl FnMut(usize, usize, u64),
) {
    let regs = |elems: usize, t: MmaTy| elems / 32 / per_reg(t);
    let [na, nb, nc, nd] = [regs(16 * k, aty), regs(k * 8, bty), regs(128, cty), regs(128, dty)];
    // Row-major A (k at most 32), B by k, the accumulators by row.
    let mut am = [[0f32; 32]; 16];
    let mut bm = [[0f32; 8]; 32];
    let mut acc = [[0f32; 8]; 16];
    let (pa, ba) = (per_reg(aty), elem_bits(aty));
    let (pb, bb) = (per_reg(bty), elem_bits(bty));
    let (pc, bc) = (per_reg(cty), elem_bits(cty));
    let field = |v: u64, e: usize, bits: u32| (v >> (e as u32 * bits)) & ((1u64 << bits) - 1);
    for lane in 0..32 {
        for r in 0..na {
            let v = reg(0, lane, r);
            let (row, col) = a_pos(aty, lane, r * pa);
            for e in 0..pa {
                am[row & 15][(col + e) & 31] = value32(aty, field(v, e, ba));
            }
        }
        for r in 0..nb {
            let v = reg(1, lane, r);
            let (row, col) = b_pos(bty, lane, r * pb);
            for e in 0..pb {
                bm[(row + e) & 31][col & 7] = value32(bty, field(v, e, bb));
            }
        }
        for r in 0..nc {
            let v = reg(2, lane, r);
            let (row, col) = c_pos(lane, r * pc);
            for e in 0..pc {
                acc[row & 15][(col + e) & 7] = value32(cty, field(v, e, bc));
            }
        }
    }
    if modelled(model, aty) {
        let split = model == MmaModel::Sm80 && tensor_core::sm80_splits(k as u32, aty == MmaTy::TF32);
        let mins = [tensor_core::least_exponent(aty == MmaTy::F16), tensor_core::least_exponent(cty == MmaTy::F16)];
        let b_exp = tensor_core::exponents(&bm, mins[0]);
        for (ar, am_row) in acc.iter_mut().zip(&am) {
            *ar = tensor_core::row(model, split, mins, &am_row[..k], &bm[..k], &b_exp[..k], ar, dty == MmaTy::F16);
        }
    } else {
        for (kk, bk) in bm.iter().enumerate().take(k) {
            for (ar, am_row) in acc.iter_mut().zip(&am) {
                let x = am_row[kk];
                for (s, &y) in ar.iter_mut().zip(bk) {
                    *s = x.mul_add(y, *s);
                }
            }
        }
    }
    let pd = per_reg(dty);
    let bd = elem_bits(dty);
    for lane in 0..32 {
        for r in 0..nd {
            let (row, col) = c_pos(lane, r * pd);
            let mut v = 0u64;
            for e in 0..pd {
                v |= finish32(dty, acc[row & 15][(col + e) & 7]) << (e as u32 * bd);
            }
            put(lane, r, v);
        }
    }
}

/// The bits of a `dty` element (f32 or f16) of D from its f32 sum.
#[inline(always)]
fn finish32(dty: MmaTy, s: f32) -> u64 {
    if dty == MmaTy::F16 {
        if s.is_nan() {
            0x7FFF
        } else {
            f16::from_f32(s).to_bits() as u64
        }
    } else {
        b32(s)
    }
}

/// One element of D, from its accumulator `acc` and the products of its row of A and column of
/// B in increasing k (every value widened exactly): the defined order and rounding of the
/// module docs, as the bits of a `dty` element.
pub(crate) fn element(dty: MmaTy, satfinite: bool, acc: f64, pairs: impl Iterator<Item = (f64, f64)>) -> u64 {
    match dty {
        MmaTy::S32 => {
            // Exact: |products| < 2^16 * 32, plus an s32.
            let sum = pairs.fold(acc as i64, |s, (x, y)| s + (x as i64) * (y as i64));
            if satfinite {
                sum.clamp(i32::MIN as i64, i32::MAX as i64) as i32 as u32 as u64
            } else {
                sum as i32 as u32 as u64
            }
        }
        MmaTy::F64 => b64(pairs.fold(acc, |s, (x, y)| x.mul_add(y, s))),
        _ => finish32(dty, pairs.fold(acc as f32, |s, (x, y)| (x as f32).mul_add(y as f32, s))),
    }
}

/// The two elements (low half first) lane `lane` holds of an 8x8 matrix fragment, as (row,
/// column); `trans` gives those of the transposed matrix, read from the original.
pub(crate) fn frag8x8(lane: usize, trans: bool) -> [(usize, usize); 2] {
    let (r, c) = (lane >> 2, 2 * (lane & 3));
    if trans {
        [(c, r), (c + 1, r)]
    } else {
        [(r, c), (r, c + 1)]
    }
}

/// `movmatrix.m8n8.trans.b16` of one warp: `a` holds each lane's source register.
pub(crate) fn movmatrix(a: &[u64; 32]) -> [u64; 32] {
    let elem = |row: usize, col: usize| (a[row * 4 + col / 2] >> (16 * (col & 1))) & 0xFFFF;
    let mut d = [0u64; 32];
    for (lane, out) in d.iter_mut().enumerate() {
        let [(r0, c0), (r1, c1)] = frag8x8(lane, true);
        *out = elem(r0, c0) | elem(r1, c1) << 16;
    }
    d
}

/// Whether `op` is the common form, `mma.m16n8k16` of f16 inputs into f32 accumulators
/// (Triton's and cuBLAS's), which has code of its own ([`mma_f16_f32`]).
pub(crate) fn is_f16_f32_k16(op: &Mma) -> bool {
    use MmaTy::{F16, F32};
    (op.m, op.n, op.k) == (16, 8, 16) && (op.aty, op.bty, op.cty, op.dty) == (F16, F16, F32, F32)
}

/// A warp's A fragment of `mma.m16n8k16` with f16 elements (four registers of 32 lanes), as the
/// row-major f32 tile [`mma_f16_f32`] reads: unpacked once, it serves every `mma` of a tile row
/// that follows in a run (Triton's K step multiplies one A fragment by several B fragments).
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
pub(crate) type TileA16 = [[f32; 16]; 16];

/// Unpacks A (register `r` of every lane in `a[r]`) into its tile. In lane order a register's
/// halves are an 8x8 block of A, row by row (lane `4g + t` holds row `g`, columns `2t` and
/// `2t + 1`): register `r` is the block at rows `8 (r & 1)`, columns `8 (r >> 1)`.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[inline(always)]
pub(crate) fn unpack_a_f16<const F16C: bool>(a: [&[u64; 32]; 4], tile: &mut TileA16) {
    for (r, regs) in a.into_iter().enumerate() {
        let block = widen_f16::<F16C>(regs);
        for (g, row) in block.chunks_exact(8).enumerate() {
            let k = 8 * (r >> 1);
            tile[8 * (r & 1) + g][k..k + 8].copy_from_slice(row);
        }
    }
}

/// A warp's B fragment of `mma.m16n8k16` with f16 elements (two registers of 32 lanes), as the
/// f32 tile [`mma_f16_f32`] reads, row `k` holding the eight columns: unpacked once, it serves
/// every `mma` of a run that reads the same registers (Triton's warp tile multiplies each B
/// fragment by every A fragment of its column of tiles).
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
pub(crate) type TileB16 = [[f32; 8]; 16];

/// Unpacks B (register `r` of every lane in `b[r]`) into its tile. In lane order B's register `r`
/// is B's columns down k `8r..8r + 8` (lane `4g + t` holds column `g`, k `8r + 2t` and the next).
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[inline(always)]
pub(crate) fn unpack_b_f16<const F16C: bool>(b: [&[u64; 32]; 2], tile: &mut TileB16) {
    // Column by column (`bt[n][k]`), then row by row.
    let mut bt = [[0f32; 16]; 8];
    for (r, regs) in b.into_iter().enumerate() {
        let block = widen_f16::<F16C>(regs);
        for (n, col) in block.chunks_exact(8).enumerate() {
            bt[n][8 * r..8 * r + 8].copy_from_slice(col);
        }
    }
    for (k, row) in tile.iter_mut().enumerate() {
        for (n, x) in row.iter_mut().enumerate() {
            *x = bt[n][k];
        }
    }
}

/// A warp's C or D of `mma.m16n8k16` with f32 elements, row by row: the accumulators of one
/// tile of the product, as [`mma_f16_f32_tile`] reads and writes them.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
pub(crate) type TileC16 = [[f32; 8]; 16];

/// C's tile from its four registers (`reg(r, lane)`: register `r` of `lane`). In lane order,
/// registers 0 and 1 interleaved lane by lane are rows 0 to 7 (lane `4g + t` holds row `g`,
/// columns `2t` and `2t + 1`), registers 2 and 3 rows 8 to 15.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[inline(always)]
pub(crate) fn tile_c_f32(reg: impl Fn(usize, usize) -> u64) -> TileC16 {
    let mut rows = [[0f32; 8]; 16];
    for (g, row) in rows.iter_mut().enumerate() {
        let r = 2 * (g / 8);
        for t in 0..4 {
            let lane = 4 * (g % 8) + t;
            row[2 * t] = f32::from_bits(reg(r, lane) as u32);
            row[2 * t + 1] = f32::from_bits(reg(r + 1, lane) as u32);
        }
    }
    rows
}

/// D's four registers from its tile (`set(r, lane, bits)`), in [`tile_c_f32`]'s layout, each NaN
/// as the canonical one, as [`mma_float`] writes it.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[inline(always)]
pub(crate) fn untile_c_f32(tile: &TileC16, mut set: impl FnMut(usize, usize, u64)) {
    for (g, row) in tile.iter().enumerate() {
        let r = 2 * (g / 8);
        for t in 0..4 {
            let lane = 4 * (g % 8) + t;
            set(r, lane, b32(row[2 * t]));
            set(r + 1, lane, b32(row[2 * t + 1]));
        }
    }
}

/// `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32` for one warp on tiles: `acc` (C) becomes
/// D, with [`mma_float`]'s arithmetic and bits (the same f32 fused multiply-adds in increasing k
/// from C). The product runs eight rows at a time, so that the eight accumulator vectors, a row
/// of B and the broadcast element of A fit in sixteen vector registers. A NaN in `acc` may keep a
/// payload the canonical NaN does not have: any NaN an accumulator meets stays a NaN through
/// every later fused multiply-add, and [`untile_c_f32`] writes each as the canonical one, so the
/// registers end up with the bits one `mma` at a time gives.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[inline(always)]
pub(crate) fn mma_f16_f32_tile(model: MmaModel, a: &TileA16, bm: &TileB16, acc: &mut TileC16) {
    if modelled(model, MmaTy::F16) {
        let split = model == MmaModel::Sm80 && tensor_core::sm80_splits(16, false);
        let mins = [tensor_core::least_exponent(true), tensor_core::least_exponent(false)];
        let b_exp = tensor_core::exponents(bm, mins[0]);
        for (ar, am_row) in acc.iter_mut().zip(a) {
            *ar = tensor_core::row(model, split, mins, am_row, bm, &b_exp, ar, false);
        }
        return;
    }
    for (h, half) in acc.chunks_exact_mut(8).enumerate() {
        let mut rows: [[f32; 8]; 8] = half.try_into().expect("eight rows");
        for (k, bk) in bm.iter().enumerate() {
            for (i, row) in rows.iter_mut().enumerate() {
                let x = a[8 * h + i][k];
                for (s, &y) in row.iter_mut().zip(bk) {
                    *s = x.mul_add(y, *s);
                }
            }
        }
        half.copy_from_slice(&rows);
    }
}

/// [`mma_f16_f32_tile`] from C's registers into D's: `regs[s]` is register `s` of every lane, and
/// `c[r]`, `d[r]` name the registers of C and D. Every register of C is read before any of D is
/// written, so D may be C itself (as it is in every `mma` that accumulates).
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[inline(always)]
pub(crate) fn mma_f16_f32(
    model: MmaModel,
    a: &TileA16,
    bm: &TileB16,
    regs: &mut [[u64; 32]],
    c: [usize; 4],
    d: [usize; 4],
) {
    let mut acc = tile_c_f32(|r, lane| regs[c[r]][lane]);
    mma_f16_f32_tile(model, a, bm, &mut acc);
    untile_c_f32(&acc, |r, lane, v| regs[d[r]][lane] = v);
}

/// A row of eight f16 (16 bytes, little-endian) widened to f32, by the CPU's own conversion where
/// `F16C`, as [`widen_f16`].
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[inline(always)]
pub(crate) fn widen_f16_row<const F16C: bool>(bytes: &[u8; 16]) -> [f32; 8] {
    #[cfg(target_arch = "x86_64")]
    if F16C {
        // SAFETY: the caller checked that the CPU has the features the function needs.
        return unsafe { widen_f16_row_f16c(bytes) };
    }
    std::array::from_fn(|c| value32(MmaTy::F16, u16::from_le_bytes([bytes[2 * c], bytes[2 * c + 1]]) as u64))
}

/// [`widen_f16_row`] with F16C.
#[cfg(all(feature = "jit", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,f16c")]
fn widen_f16_row_f16c(bytes: &[u8; 16]) -> [f32; 8] {
    use std::arch::x86_64::*;
    let mut out = [0f32; 8];
    // SAFETY: `bytes` is 16 bytes and `out` eight f32s (32 bytes); both accesses are unaligned
    // ones.
    unsafe {
        let halves = _mm_loadu_si128(bytes.as_ptr() as *const __m128i);
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(halves));
    }
    out
}

/// [`widen_f16_block`], by the CPU's own conversion where `F16C` (the caller checked that the CPU
/// has F16C and AVX2). Both give every f16 its exact f32 value; only a NaN's payload may differ,
/// and nothing of it reaches a register: a NaN operand makes every product and sum it meets a
/// NaN, and each is written as the canonical one ([`untile_c_f32`]).
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[inline(always)]
fn widen_f16<const F16C: bool>(regs: &[u64; 32]) -> [f32; 64] {
    #[cfg(target_arch = "x86_64")]
    if F16C {
        // SAFETY: the caller checked that the CPU has the features the function needs.
        return unsafe { widen_f16_block_f16c(regs) };
    }
    widen_f16_block(regs)
}

/// [`widen_f16_block`] with F16C: lanes `4g..4g + 4` hold row `g`'s eight halves in order, so
/// their low words side by side are the row, which one conversion widens.
#[cfg(all(feature = "jit", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,f16c")]
fn widen_f16_block_f16c(regs: &[u64; 32]) -> [f32; 64] {
    use std::arch::x86_64::*;
    let mut out = [0f32; 64];
    let low_words = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    for (lanes, row) in regs.chunks_exact(4).zip(out.chunks_exact_mut(8)) {
        // SAFETY: `lanes` is four u64s (32 bytes) and `row` eight f32s (32 bytes); both accesses
        // are unaligned ones.
        unsafe {
            let v = _mm256_loadu_si256(lanes.as_ptr() as *const __m256i);
            let halves = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(v, low_words));
            _mm256_storeu_ps(row.as_mut_ptr(), _mm256_cvtph_ps(halves));
        }
    }
    out
}

/// A register's f16 elements across the warp, in lane order (low half first), widened to f32:
/// the 8x8 block of A or B it holds, row by row.
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
#[inline(always)]
fn widen_f16_block(regs: &[u64; 32]) -> [f32; 64] {
    let (mut lo, mut hi) = ([0f32; 32], [0f32; 32]);
    for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(regs) {
        (*l, *h) = (value32(MmaTy::F16, v), value32(MmaTy::F16, v >> 16));
    }
    let mut out = [0f32; 64];
    for (pair, (&l, &h)) in out.chunks_exact_mut(2).zip(lo.iter().zip(&hi)) {
        pair.copy_from_slice(&[l, h]);
    }
    out
}
