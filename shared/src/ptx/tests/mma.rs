//! `mma.sync.aligned` against the fragment layout tables of the PTX ISA ("Matrix fragments for
//! mma.mMnNkK"), each table written out here per shape as the ISA states it (not the executor's
//! unified formulas), and against the accumulation recap defines (docs/PTX.md): from C, in
//! increasing k, one f32 fused multiply-add per step.

use half::{bf16, f16};

use super::{run_kernel, run_kernel_in};
use crate::ptx::numerics::MmaModel;

const HEAD: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

/// Where element `i` of lane `lane`'s fragment sits: (row, column).
type Pos = fn(usize, usize) -> (usize, usize);

fn g(l: usize) -> usize {
    l >> 2
}
fn t(l: usize) -> usize {
    l % 4
}

// The ISA's tables, shape by shape.
fn a_f16_k16(l: usize, i: usize) -> (usize, usize) {
    let row = if i < 2 || (4..6).contains(&i) { g(l) } else { g(l) + 8 };
    let col = if i < 4 { t(l) * 2 + (i & 1) } else { t(l) * 2 + (i & 1) + 8 };
    (row, col)
}
fn b_f16_k16(l: usize, i: usize) -> (usize, usize) {
    let row = if i < 2 { t(l) * 2 + (i & 1) } else { t(l) * 2 + (i & 1) + 8 };
    (row, g(l))
}
fn a_f16_k8(l: usize, i: usize) -> (usize, usize) {
    (if i < 2 { g(l) } else { g(l) + 8 }, t(l) * 2 + (i & 1))
}
fn b_f16_k8(l: usize, i: usize) -> (usize, usize) {
    (t(l) * 2 + i, g(l))
}
fn a_tf32_k8(l: usize, i: usize) -> (usize, usize) {
    let row = if i == 0 || i == 2 { g(l) } else { g(l) + 8 };
    let col = if i < 2 { t(l) } else { t(l) + 4 };
    (row, col)
}
fn b_tf32_k8(l: usize, i: usize) -> (usize, usize) {
    (if i == 0 { t(l) } else { t(l) + 4 }, g(l))
}
fn a_tf32_k4(l: usize, i: usize) -> (usize, usize) {
    (if i == 0 { g(l) } else { g(l) + 8 }, t(l))
}
fn b_tf32_k4(l: usize, _i: usize) -> (usize, usize) {
    (t(l), g(l))
}
fn a_f64_m8n8k4(l: usize, _i: usize) -> (usize, usize) {
    (l >> 2, l % 4)
}
fn b_f64_m8n8k4(l: usize, _i: usize) -> (usize, usize) {
    (l % 4, l >> 2)
}
fn c_m8n8(l: usize, i: usize) -> (usize, usize) {
    (g(l), t(l) * 2 + (i & 1))
}
fn a_i8_k16(l: usize, i: usize) -> (usize, usize) {
    (if i < 4 { g(l) } else { g(l) + 8 }, t(l) * 4 + (i & 3))
}
fn b_i8_k16(l: usize, i: usize) -> (usize, usize) {
    (t(l) * 4 + i, g(l))
}
fn a_i8_k32(l: usize, i: usize) -> (usize, usize) {
    let row = if i < 4 || (8..12).contains(&i) { g(l) } else { g(l) + 8 };
    let col = if i < 8 { t(l) * 4 + (i & 3) } else { t(l) * 4 + (i & 3) + 16 };
    (row, col)
}
fn b_i8_k32(l: usize, i: usize) -> (usize, usize) {
    let row = if i < 4 { t(l) * 4 + (i & 3) } else { t(l) * 4 + (i & 3) + 16 };
    (row, g(l))
}
fn c_m16n8(l: usize, i: usize) -> (usize, usize) {
    (if i < 2 { g(l) } else { g(l) + 8 }, t(l) * 2 + (i & 1))
}

/// An element type: its bits and its value.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Ty {
    F16,
    BF16,
    TF32,
    F32,
    F64,
    S8,
    U8,
    S32,
    E4M3,
    E5M2,
}

impl Ty {
    fn bits(self) -> usize {
        match self {
            Ty::F16 | Ty::BF16 => 16,
            Ty::S8 | Ty::U8 | Ty::E4M3 | Ty::E5M2 => 8,
            Ty::F64 => 64,
            _ => 32,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Ty::F16 => "f16",
            Ty::BF16 => "bf16",
            Ty::TF32 => "tf32",
            Ty::F32 => "f32",
            Ty::F64 => "f64",
            Ty::S8 => "s8",
            Ty::U8 => "u8",
            Ty::S32 => "s32",
            Ty::E4M3 => "e4m3",
            Ty::E5M2 => "e5m2",
        }
    }
    fn value(self, x: u64) -> f64 {
        match self {
            Ty::F16 => f16::from_bits(x as u16).to_f64(),
            Ty::BF16 => bf16::from_bits(x as u16).to_f64(),
            Ty::TF32 if f32::from_bits(x as u32).is_nan() => f64::NAN,
            Ty::TF32 => f32::from_bits(x as u32 & !0x1FFF) as f64,
            Ty::F32 => f32::from_bits(x as u32) as f64,
            Ty::F64 => f64::from_bits(x),
            Ty::S8 => x as u8 as i8 as f64,
            Ty::U8 => x as u8 as f64,
            Ty::S32 => x as u32 as i32 as f64,
            Ty::E4M3 => fp8(x as u8, 4, 3),
            Ty::E5M2 => fp8(x as u8, 5, 2),
        }
    }
}

/// An 8-bit float with `e` exponent and `m` mantissa bits, as the OCP FP8 formats define them.
fn fp8(x: u8, e: u32, m: u32) -> f64 {
    let s = if x & 0x80 != 0 { -1.0 } else { 1.0 };
    let ex = ((x >> m) & ((1 << e) - 1) as u8) as i32;
    let mant = (x & ((1 << m) - 1) as u8) as f64;
    let bias = (1 << (e - 1)) - 1;
    let top = (1 << e) - 1;
    if e == 4 && ex == top && mant == 7.0 {
        return f64::NAN;
    }
    if e == 5 && ex == top {
        return if mant == 0.0 { s * f64::INFINITY } else { f64::NAN };
    }
    if ex == 0 {
        s * mant * 2f64.powi(1 - bias - m as i32)
    } else {
        s * (1.0 + mant / (1 << m) as f64) * 2f64.powi(ex - bias)
    }
}

/// One shape and type combination with its layout tables.
struct Case {
    shape: (usize, usize, usize),
    d: Ty,
    a: Ty,
    b: Ty,
    c: Ty,
    satfinite: bool,
    pa: Pos,
    pb: Pos,
    pc: Pos,
}

impl Case {
    fn regs(&self, elems: usize, ty: Ty) -> usize {
        let per = if ty.bits() == 64 { 1 } else { 32 / ty.bits() };
        elems / 32 / per
    }

    /// Packs a row-major matrix (element bits) into each lane's registers.
    fn pack(&self, m: &[u64], cols: usize, ty: Ty, pos: Pos, count: usize) -> Vec<u64> {
        let per = if ty.bits() == 64 { 1 } else { 32 / ty.bits() };
        let mask = if ty.bits() == 64 { u64::MAX } else { (1u64 << ty.bits()) - 1 };
        let mut regs = vec![0u64; 32 * count];
        for l in 0..32 {
            for i in 0..count * per {
                let (r, c) = pos(l, i);
                regs[l * count + i / per] |= (m[r * cols + c] & mask) << ((i % per) * ty.bits());
            }
        }
        regs
    }

    /// Runs the `mma` on every engine with the given matrices (element bits, row-major); gives D
    /// as element bits, row-major, read back through the table.
    fn run(&self, am: &[u64], bm: &[u64], cm: &[u64]) -> Vec<u64> {
        self.run_in(MmaModel::Ieee, am, bm, cm)
    }

    /// [`Case::run`] with `model`'s arithmetic.
    fn run_in(&self, model: MmaModel, am: &[u64], bm: &[u64], cm: &[u64]) -> Vec<u64> {
        let (m, n, k) = self.shape;
        let (na, nb, nc, nd) =
            (self.regs(m * k, self.a), self.regs(k * n, self.b), self.regs(m * n, self.c), self.regs(m * n, self.d));
        let wide = self.a == Ty::F64;
        let (reg, ld, sz) = if wide { ("%x", "u64", 8) } else { ("%r", "u32", 4) };
        let total = na + nb + nc;
        let mut body = String::new();
        for i in 0..total {
            body += &format!("    ld.global.{ld} {reg}{i}, [%rd4+{}];\n", i * sz);
        }
        let list =
            |from: usize, cnt: usize| (from..from + cnt).map(|i| format!("{reg}{i}")).collect::<Vec<_>>().join(", ");
        let dregs = (0..nd).map(|i| format!("{reg}{}", 40 + i)).collect::<Vec<_>>().join(", ");
        let sat = if self.satfinite { ".satfinite" } else { "" };
        body += &format!(
            "    mma.sync.aligned.m{}n{}k{}.row.col{sat}.{}.{}.{}.{} {{{dregs}}}, {{{}}}, {{{}}}, {{{}}};\n",
            m,
            n,
            k,
            self.d.name(),
            self.a.name(),
            self.b.name(),
            self.c.name(),
            list(0, na),
            list(na, nb),
            list(na + nb, nc)
        );
        for i in 0..nd {
            body += &format!("    st.global.{ld} [%rd6+{}], {reg}{};\n", i * sz, 40 + i);
        }
        let ptx = format!(
            "{HEAD}
.visible .entry k(.param .u64 out, .param .u64 inp)
{{
    .reg .b32 %r<64>;
    .reg .b64 %x<64>;
    .reg .b64 %rd<8>;
    .reg .b32 %t0;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [inp];
    mov.u32 %t0, %tid.x;
    mul.wide.u32 %rd3, %t0, {};
    add.s64 %rd4, %rd2, %rd3;
    mul.wide.u32 %rd5, %t0, {};
    add.s64 %rd6, %rd1, %rd5;
{body}    ret;
}}",
            total * sz,
            nd * sz
        );
        let ra = self.pack(am, k, self.a, self.pa, na);
        let rb = self.pack(bm, n, self.b, self.pb, nb);
        let rc = self.pack(cm, n, self.c, self.pc, nc);
        let mut inp = Vec::new();
        for l in 0..32 {
            for w in ra[l * na..(l + 1) * na].iter().chain(&rb[l * nb..(l + 1) * nb]).chain(&rc[l * nc..(l + 1) * nc]) {
                inp.extend_from_slice(&w.to_le_bytes()[..sz]);
            }
        }
        let out = run_kernel_in(model, &ptx, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 32 * nd * sz], inp], &[]).unwrap();
        let words: Vec<u64> = out[0]
            .chunks(sz)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..sz].copy_from_slice(c);
                u64::from_le_bytes(b)
            })
            .collect();
        let per = if self.d.bits() == 64 { 1 } else { 32 / self.d.bits() };
        let mask = if self.d.bits() == 64 { u64::MAX } else { (1u64 << self.d.bits()) - 1 };
        let mut d = vec![0u64; m * n];
        for l in 0..32 {
            for i in 0..nd * per {
                let (r, c) = (self.pc)(l, i);
                d[r * n + c] = (words[l * nd + i / per] >> ((i % per) * self.d.bits())) & mask;
            }
        }
        d
    }

    /// D as recap defines it, element bits, row-major.
    fn expect(&self, am: &[u64], bm: &[u64], cm: &[u64]) -> Vec<u64> {
        let (m, n, k) = self.shape;
        let mut d = vec![0u64; m * n];
        for r in 0..m {
            for c in 0..n {
                let a = |kk: usize| self.a.value(am[r * k + kk]);
                let b = |kk: usize| self.b.value(bm[kk * n + c]);
                d[r * n + c] = match self.d {
                    Ty::S32 => {
                        let mut s = self.c.value(cm[r * n + c]) as i64;
                        for kk in 0..k {
                            s += a(kk) as i64 * b(kk) as i64;
                        }
                        let s = if self.satfinite { s.clamp(i32::MIN as i64, i32::MAX as i64) } else { s };
                        s as i32 as u32 as u64
                    }
                    Ty::F64 => {
                        let mut s = self.c.value(cm[r * n + c]);
                        for kk in 0..k {
                            s = a(kk).mul_add(b(kk), s);
                        }
                        if s.is_nan() {
                            0x7FFF_FFFF_FFFF_FFFF
                        } else {
                            s.to_bits()
                        }
                    }
                    _ => {
                        let mut s = self.c.value(cm[r * n + c]) as f32;
                        for kk in 0..k {
                            s = (a(kk) as f32).mul_add(b(kk) as f32, s);
                        }
                        match (self.d, s.is_nan()) {
                            (Ty::F16, true) => 0x7FFF,
                            (Ty::F16, false) => f16::from_f32(s).to_bits() as u64,
                            (_, true) => 0x7FFF_FFFF,
                            _ => s.to_bits() as u64,
                        }
                    }
                };
            }
        }
        d
    }

    fn check(&self, am: &[u64], bm: &[u64], cm: &[u64]) -> Vec<u64> {
        let got = self.run(am, bm, cm);
        let want = self.expect(am, bm, cm);
        let (_, n, _) = self.shape;
        for (i, (x, y)) in got.iter().zip(&want).enumerate() {
            assert_eq!(x, y, "{:?}x{:?}: D[{}][{}] is {x:#x}, want {y:#x}", self.a, self.b, i / n, i % n);
        }
        got
    }
}

/// A small deterministic generator of element bits.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Values of -2..=2 in steps of 1/8 (fp8: any finite positive or negative bits), as the bits
    /// of type `ty`.
    fn floats(&mut self, len: usize, ty: Ty) -> Vec<u64> {
        (0..len)
            .map(|_| {
                let v = (self.next() % 33) as f64 / 8.0 - 2.0;
                match ty {
                    Ty::F16 => f16::from_f64(v).to_bits() as u64,
                    Ty::BF16 => bf16::from_f64(v).to_bits() as u64,
                    // tf32 inputs with stray low mantissa bits, which must be ignored.
                    Ty::TF32 => (v as f32).to_bits() as u64 | (self.next() & 0x1FFF),
                    Ty::F32 => ((v * 1.37) as f32).to_bits() as u64,
                    Ty::F64 => (v * 1.37).to_bits(),
                    Ty::E4M3 | Ty::E5M2 => self.next() & 0x77,
                    _ => unreachable!(),
                }
            })
            .collect()
    }
    fn ints(&mut self, len: usize, ty: Ty) -> Vec<u64> {
        (0..len)
            .map(|_| match ty {
                Ty::S32 => ((self.next() % 2001) as i64 - 1000) as u64,
                _ => self.next() & 0xFF,
            })
            .collect()
    }
}

/// A case of `shape` with D, A, B, C of `[d, a, b, c]` laid out by the tables `[pa, pb, pc]`.
fn case(shape: (usize, usize, usize), [d, a, b, c]: [Ty; 4], [pa, pb, pc]: [Pos; 3]) -> Case {
    Case { shape, d, a, b, c, satfinite: false, pa, pb, pc }
}

fn random(cs: &Case, seed: u64) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let (m, n, k) = cs.shape;
    let mut g = Gen(seed);
    let ints = cs.d == Ty::S32;
    let a = if ints { g.ints(m * k, cs.a) } else { g.floats(m * k, cs.a) };
    let b = if ints { g.ints(k * n, cs.b) } else { g.floats(k * n, cs.b) };
    let c = if ints { g.ints(m * n, Ty::S32) } else { g.floats(m * n, cs.c) };
    (a, b, c)
}

fn f16b(v: f64) -> u64 {
    f16::from_f64(v).to_bits() as u64
}
fn f32b(v: f32) -> u64 {
    v.to_bits() as u64
}

#[test]
fn m16n8k16_f16_fragments_and_accumulation() {
    for (d, c) in [(Ty::F32, Ty::F32), (Ty::F16, Ty::F16), (Ty::F32, Ty::F16), (Ty::F16, Ty::F32)] {
        let cs = case((16, 8, 16), [d, Ty::F16, Ty::F16, c], [a_f16_k16, b_f16_k16, c_m16n8]);
        let (a, b, cm) = random(&cs, 7);
        cs.check(&a, &b, &cm);
    }
}

#[test]
fn m16n8k16_one_element_lands_where_the_table_says() {
    // A[9][13] = 2, B[13][3] = 3, everything else zero: D[9][3] = 6, held by lane
    // (9 - 8) * 4 + 3 / 2 = 5 as c3 (row g + 8, column 2t + 1).
    let cs = case((16, 8, 16), [Ty::F32, Ty::F16, Ty::F16, Ty::F32], [a_f16_k16, b_f16_k16, c_m16n8]);
    let mut a = vec![0; 256];
    let mut b = vec![0; 128];
    a[9 * 16 + 13] = f16b(2.0);
    b[13 * 8 + 3] = f16b(3.0);
    let d = cs.check(&a, &b, &[0; 128]);
    assert_eq!(d[9 * 8 + 3], f32b(6.0));
    assert_eq!(d.iter().filter(|x| **x != 0).count(), 1);
    // The table's own reading: lane 5's c3.
    assert_eq!(c_m16n8(5, 3), (9, 3));
    // A[9][13] is lane (9 - 8) * 4 + (13 - 8) / 2 = 6, element a7 (row g + 8, column 2t + 1 + 8).
    assert_eq!(a_f16_k16(6, 7), (9, 13));
    // B[13][3] is lane 3 * 4 + (13 - 8) / 2 = 14, element b3.
    assert_eq!(b_f16_k16(14, 3), (13, 3));
}

#[test]
fn m16n8k16_f16_nan_infinity_subnormal_overflow() {
    let cs = case((16, 8, 16), [Ty::F32, Ty::F16, Ty::F16, Ty::F32], [a_f16_k16, b_f16_k16, c_m16n8]);
    let mut a = vec![0; 256];
    let mut b = vec![0; 128];
    let mut c = vec![0; 128];
    // Row 0: inf * 0 is NaN (canonical).
    a[0] = f16b(f64::INFINITY);
    b[0] = 0;
    // Row 1: inf * 1 stays inf.
    a[16] = f16b(f64::INFINITY);
    b[1] = f16b(1.0);
    // Row 2: the smallest f16 subnormal squared, 2^-48, is exact in f32.
    a[2 * 16 + 5] = 1;
    b[5 * 8 + 2] = 1;
    // Row 3: C at f32's largest absorbs a product far below its ulp.
    c[3 * 8 + 3] = f32b(f32::MAX);
    a[3 * 16 + 7] = f16b(65504.0);
    b[7 * 8 + 3] = f16b(65504.0);
    // Row 4: a NaN input.
    a[4 * 16 + 1] = 0x7E01;
    b[8 + 4] = f16b(1.0);
    let d = cs.check(&a, &b, &c);
    assert_eq!(d[0], 0x7FFF_FFFF);
    assert_eq!(d[8 + 1], f32b(f32::INFINITY));
    assert_eq!(d[2 * 8 + 2], f32b(2f32.powi(-48)));
    assert_eq!(d[3 * 8 + 3], f32b(f32::MAX));
    assert_eq!(d[4 * 8 + 4], 0x7FFF_FFFF);
    // An f16 D overflows to infinity and keeps subnormals.
    let cs = case((16, 8, 16), [Ty::F16, Ty::F16, Ty::F16, Ty::F16], [a_f16_k16, b_f16_k16, c_m16n8]);
    let mut a = vec![0; 256];
    let mut b = vec![0; 128];
    a[0] = f16b(300.0);
    b[0] = f16b(300.0);
    a[16] = f16b(2f64.powi(-12));
    b[1] = f16b(2f64.powi(-12));
    let d = cs.check(&a, &b, &[0; 128]);
    assert_eq!(d[0], 0x7C00);
    assert_eq!(d[8 + 1], 0x0001, "2^-24, the smallest f16 subnormal");
}

#[test]
fn accumulation_is_in_k_order_rounding_each_step() {
    // C = 1, then + 2^24 and - 2^24: in k order 1 + 2^24 rounds to 2^24 (ties to even), and
    // the result is 0, where exact or reordered sums give 1.
    let cs = case((16, 8, 16), [Ty::F32, Ty::F16, Ty::F16, Ty::F32], [a_f16_k16, b_f16_k16, c_m16n8]);
    let mut a = vec![0; 256];
    let mut b = vec![0; 128];
    let mut c = vec![0; 128];
    c[0] = f32b(1.0);
    a[0] = f16b(4096.0);
    b[0] = f16b(4096.0);
    a[1] = f16b(-4096.0);
    b[8] = f16b(4096.0);
    let d = cs.check(&a, &b, &c);
    assert_eq!(d[0], f32b(0.0));
}

#[test]
fn m16n8k16_and_k8_bf16() {
    let cs = case((16, 8, 16), [Ty::F32, Ty::BF16, Ty::BF16, Ty::F32], [a_f16_k16, b_f16_k16, c_m16n8]);
    let (a, b, c) = random(&cs, 11);
    cs.check(&a, &b, &c);
    // A bf16 product beyond f32's range overflows the f32 sum to infinity.
    let mut a = vec![0; 256];
    let mut b = vec![0; 128];
    a[0] = bf16::from_f64(2f64.powi(100)).to_bits() as u64;
    b[0] = bf16::from_f64(2f64.powi(100)).to_bits() as u64;
    let d = cs.check(&a, &b, &[0; 128]);
    assert_eq!(d[0], f32b(f32::INFINITY));
    let cs = case((16, 8, 8), [Ty::F32, Ty::BF16, Ty::BF16, Ty::F32], [a_f16_k8, b_f16_k8, c_m16n8]);
    let (a, b, c) = random(&cs, 12);
    cs.check(&a, &b, &c);
}

#[test]
fn m16n8k8_f16() {
    for (d, c) in [(Ty::F32, Ty::F32), (Ty::F16, Ty::F16)] {
        let cs = case((16, 8, 8), [d, Ty::F16, Ty::F16, c], [a_f16_k8, b_f16_k8, c_m16n8]);
        let (a, b, cm) = random(&cs, 13);
        cs.check(&a, &b, &cm);
    }
}

#[test]
fn tf32_k8_and_k4_ignore_low_mantissa_bits() {
    let cs = case((16, 8, 8), [Ty::F32, Ty::TF32, Ty::TF32, Ty::F32], [a_tf32_k8, b_tf32_k8, c_m16n8]);
    let (a, b, c) = random(&cs, 17);
    cs.check(&a, &b, &c);
    let cs = case((16, 8, 4), [Ty::F32, Ty::TF32, Ty::TF32, Ty::F32], [a_tf32_k4, b_tf32_k4, c_m16n8]);
    let (a, b, c) = random(&cs, 19);
    cs.check(&a, &b, &c);
    // 1 + 2^-20 is 1 as a tf32; a NaN whose payload is only in the low bits stays NaN.
    let mut a = vec![0; 64];
    let mut b = vec![0; 32];
    a[0] = f32b(1.0 + 2f32.powi(-20));
    b[0] = f32b(3.0);
    a[4] = 0x7F80_0001;
    b[1] = f32b(1.0);
    let d = cs.check(&a, &b, &[0; 128]);
    assert_eq!(d[0], f32b(3.0));
    assert_eq!(d[8 + 1], 0x7FFF_FFFF);
}

#[test]
fn m8n8k4_f64() {
    let cs = case((8, 8, 4), [Ty::F64, Ty::F64, Ty::F64, Ty::F64], [a_f64_m8n8k4, b_f64_m8n8k4, c_m8n8]);
    let (a, b, c) = random(&cs, 23);
    cs.check(&a, &b, &c);
    let mut a = vec![0; 32];
    let b = vec![1f64.to_bits(); 32];
    a[0] = f64::INFINITY.to_bits();
    a[1] = f64::NEG_INFINITY.to_bits();
    let d = cs.check(&a, &b, &[0; 64]);
    assert_eq!(d[0], 0x7FFF_FFFF_FFFF_FFFF);
}

#[test]
fn integer_k32_and_k16_wrap_or_saturate() {
    for (a, b) in [(Ty::S8, Ty::S8), (Ty::U8, Ty::S8), (Ty::S8, Ty::U8), (Ty::U8, Ty::U8)] {
        let cs = case((16, 8, 32), [Ty::S32, a, b, Ty::S32], [a_i8_k32, b_i8_k32, c_m16n8]);
        let (am, bm, cm) = random(&cs, 29);
        cs.check(&am, &bm, &cm);
        let cs = case((16, 8, 16), [Ty::S32, a, b, Ty::S32], [a_i8_k16, b_i8_k16, c_m16n8]);
        let (am, bm, cm) = random(&cs, 31);
        cs.check(&am, &bm, &cm);
    }
    // C = i32::MAX - 10 plus 127 * 127: wraps, or with .satfinite stops at i32::MAX; C = i32::MIN
    // plus -128 * 127 likewise at i32::MIN.
    for satfinite in [false, true] {
        let cs =
            Case { satfinite, ..case((16, 8, 32), [Ty::S32, Ty::S8, Ty::S8, Ty::S32], [a_i8_k32, b_i8_k32, c_m16n8]) };
        let mut a = vec![0; 512];
        let mut b = vec![0; 256];
        let mut c = vec![0; 128];
        c[0] = (i32::MAX - 10) as u32 as u64;
        c[9] = i32::MIN as u32 as u64;
        a[0] = 127;
        a[32] = 0x80;
        b[0] = 127;
        b[1] = 127;
        let d = cs.check(&a, &b, &c);
        let want_hi = if satfinite { i32::MAX } else { (i32::MAX - 10).wrapping_add(127 * 127) };
        let want_lo = if satfinite { i32::MIN } else { i32::MIN.wrapping_add(-128 * 127) };
        assert_eq!(d[0] as u32 as i32, want_hi);
        assert_eq!(d[8 + 1] as u32 as i32, want_lo);
    }
}

#[test]
fn fp8_k32_products() {
    for (a, b) in [(Ty::E4M3, Ty::E4M3), (Ty::E4M3, Ty::E5M2), (Ty::E5M2, Ty::E5M2)] {
        let cs = case((16, 8, 32), [Ty::F32, a, b, Ty::F32], [a_i8_k32, b_i8_k32, c_m16n8]);
        let (am, bm, cm) = random(&cs, 37);
        cs.check(&am, &bm, &cm);
    }
    let cs = case((16, 8, 32), [Ty::F32, Ty::E4M3, Ty::E5M2, Ty::F32], [a_i8_k32, b_i8_k32, c_m16n8]);
    let mut a = vec![0; 512];
    let mut b = vec![0; 256];
    a[0] = 0x7F; // e4m3 NaN
    b[0] = 0x3C; // e5m2 1.0
    a[32] = 0x7E; // e4m3 448
    b[1] = 0x7C; // e5m2 inf
    a[64] = 0x01; // e4m3 2^-9, the smallest subnormal
    b[2] = 0x01; // e5m2 2^-16, the smallest subnormal
    let d = cs.check(&a, &b, &[0; 128]);
    assert_eq!(d[0], 0x7FFF_FFFF);
    assert_eq!(d[8 + 1], f32b(f32::INFINITY));
    assert_eq!(d[2 * 8 + 2], f32b(2f32.powi(-25)));
    // The k16 shape of fp8 reads the 8-bit table of k16.
    let cs = case((16, 8, 16), [Ty::F32, Ty::E5M2, Ty::E4M3, Ty::F32], [a_i8_k16, b_i8_k16, c_m16n8]);
    let (am, bm, cm) = random(&cs, 41);
    cs.check(&am, &bm, &cm);
}

#[test]
fn unsupported_shapes_and_types_are_refused_at_load() {
    for inst in [
        "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k16.col.row.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f16",
        "mma.sync.aligned.m16n8k32.row.col.s32.s4.s4.s32",
        "mma.sync.aligned.m16n8k16.row.col.satfinite.f32.f16.f16.f32",
    ] {
        let ptx = format!(
            "{HEAD}.visible .entry k() {{ .reg .b32 %r<8>;\n {inst} {{%r0,%r1,%r2,%r3}}, {{%r0,%r1,%r2,%r3}}, {{%r0,%r1}}, {{%r0,%r1,%r2,%r3}};\n ret; }}"
        );
        let Err(e) = crate::ptx::Module::parse(&ptx) else { panic!("{inst} was accepted") };
        let e = e.to_string();
        assert!(e.contains("line 5") && e.contains(inst), "{e}");
    }
}

/// A K step as Triton emits it: `ldmatrix`es, then `mma`s that share one A fragment and chain
/// their accumulators, then A reloaded and used again. Native code runs such a run warp by warp
/// and keeps A unpacked between the `mma`s that share it; every engine must give the products
/// of the tables (checked here against the ISA's `ldmatrix` rows and `mma` layouts), and a
/// reloaded A must not be served from the tile of the old one. B's tiles are kept too, for every
/// `mma` of the run that reads the same registers; a reloaded B must not be served from its old
/// tile either.
#[test]
fn a_shared_a_fragment_and_a_reloaded_one_give_the_tables_products() {
    let ptx = format!(
        "{HEAD}.visible .entry k_step(.param .u64 inp, .param .u64 out) {{
  .reg .b32 %r<40>; .reg .f32 %f<24>; .reg .b64 %rd<10>;
  .shared .align 16 .b8 sm[2048];
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 64; add.u64 %rd4, %rd1, %rd3;
  mov.u32 %r2, sm; mad.lo.u32 %r3, %r1, 64, %r2;
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd4]; st.shared.v4.u32 [%r3], {{%r30,%r31,%r32,%r33}};
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd4+16]; st.shared.v4.u32 [%r3+16], {{%r30,%r31,%r32,%r33}};
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd4+32]; st.shared.v4.u32 [%r3+32], {{%r30,%r31,%r32,%r33}};
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd4+48]; st.shared.v4.u32 [%r3+48], {{%r30,%r31,%r32,%r33}};
  bar.sync 0;
  shl.b32 %r4, %r1, 4; add.u32 %r5, %r2, %r4; add.u32 %r11, %r5, 512;
  and.b32 %r6, %r1, 15; shl.b32 %r7, %r6, 4; add.u32 %r8, %r2, %r7;
  add.u32 %r9, %r8, 1024; add.u32 %r10, %r8, 1536;
  mov.f32 %f0, 0f3F800000;
  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%r20,%r21,%r22,%r23}}, [%r5];
  ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%r24,%r25}}, [%r9];
  ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%r26,%r27}}, [%r10];
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f1,%f2,%f3,%f4}}, {{%r20,%r21,%r22,%r23}}, {{%r24,%r25}}, {{%f0,%f0,%f0,%f0}};
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f5,%f6,%f7,%f8}}, {{%r20,%r21,%r22,%r23}}, {{%r26,%r27}}, {{%f1,%f2,%f3,%f4}};
  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%r20,%r21,%r22,%r23}}, [%r11];
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f9,%f10,%f11,%f12}}, {{%r20,%r21,%r22,%r23}}, {{%r24,%r25}}, {{%f5,%f6,%f7,%f8}};
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f13,%f14,%f15,%f16}}, {{%r20,%r21,%r22,%r23}}, {{%r26,%r27}}, {{%f0,%f0,%f0,%f0}};
  ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%r24,%r25}}, [%r10];
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f17,%f18,%f19,%f20}}, {{%r20,%r21,%r22,%r23}}, {{%r24,%r25}}, {{%f13,%f14,%f15,%f16}};
  mul.wide.u32 %rd5, %r1, 64; add.u64 %rd6, %rd2, %rd5;
  st.global.v4.f32 [%rd6], {{%f5,%f6,%f7,%f8}};
  st.global.v4.f32 [%rd6+16], {{%f9,%f10,%f11,%f12}};
  st.global.v4.f32 [%rd6+32], {{%f13,%f14,%f15,%f16}};
  st.global.v4.f32 [%rd6+48], {{%f17,%f18,%f19,%f20}};
  ret;
}}"
    );
    // Shared memory: A0 at halves 0..256, A1 at 256..512, B0 at 512..640, B1 at 768..896.
    let mut g = Gen(11);
    let halves: Vec<u16> = (0..1024).map(|_| f16::from_f64((g.next() % 33) as f64 / 4.0 - 4.0).to_bits()).collect();
    let inp: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let out = run_kernel(&ptx, "k_step", [1, 1, 1], [32, 1, 1], &[inp, vec![0; 32 * 64]], &[]).unwrap();
    let got: Vec<u32> = out[1].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    let h = |i: usize| f16::from_bits(halves[i]).to_f32();
    // `ldmatrix` gives matrix j, row r, column c from halves (j * 8 + r) * 8 + c of its rows; the
    // A fragment's register j is matrix j, the B fragment's register j matrix j.
    let a = |base: usize, row: usize, k: usize| h(base + ((row / 8 + 2 * (k / 8)) * 8 + row % 8) * 8 + k % 8);
    let b = |base: usize, k: usize, n: usize| h(base + ((k / 8) * 8 + n) * 8 + k % 8);
    let product = |abase: usize, bbase: usize, c: &dyn Fn(usize, usize) -> f32| {
        let mut d = [[0f32; 8]; 16];
        for (row, d_row) in d.iter_mut().enumerate() {
            for (n, x) in d_row.iter_mut().enumerate() {
                *x = (0..16).fold(c(row, n), |s, k| a(abase, row, k).mul_add(b(bbase, k, n), s));
            }
        }
        d
    };
    let d1 = product(0, 512, &|_, _| 1.0);
    let d5 = product(0, 768, &|r, n| d1[r][n]);
    let d9 = product(256, 512, &|r, n| d5[r][n]);
    let d13 = product(256, 768, &|_, _| 1.0);
    // B0's registers reloaded with B1.
    let d17 = product(256, 768, &|r, n| d13[r][n]);
    for lane in 0..32 {
        for (j, d) in [d5, d9, d13, d17].iter().enumerate() {
            for r in 0..4 {
                let (row, col) = c_m16n8(lane, r);
                assert_eq!(got[lane * 16 + j * 4 + r], d[row][col].to_bits(), "lane {lane}, result {j}, c{r}");
            }
        }
    }
    assert_ne!(d9, d5, "the reloaded A changes the product");
    assert_ne!(d17, product(256, 512, &|r, n| d13[r][n]), "the reloaded B changes the product");
}

/// A K loop of `ldmatrix`es and accumulating `mma`s into two tiles, three passes over a block's
/// own A and B (A_i at byte `stride * i` of shared memory, B_i at `1536 + 256 i`, the second
/// tile's B 128 bytes further, 16 bytes of scratch at 2560), two warps a block; `in_loop` runs
/// after the row on every pass. Each thread stores its share of both tiles and of a third
/// (`%f31`..`%f34`, zero unless `in_loop` changes it). Native code keeps the two tiles in
/// the worker from one pass to the next unless something touches their registers.
fn k_loop(in_loop: &str) -> String {
    format!(
        "{HEAD}.visible .entry k_loop(.param .u64 inp, .param .u64 out, .param .u32 stride) {{
  .reg .b32 %r<80>; .reg .f32 %f<40>; .reg .b64 %rd<12>; .reg .pred %p<8>;
  .shared .align 16 .b8 sm[2576];
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out]; ld.param.u32 %r70, [stride];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, sm;
  mul.wide.u32 %rd3, %r2, 2560; add.u64 %rd4, %rd1, %rd3;
  mov.u32 %r40, %r1;
COPY:
  setp.ge.u32 %p1, %r40, 160;
  @%p1 bra COPIED;
  mul.wide.u32 %rd5, %r40, 16; add.u64 %rd6, %rd4, %rd5;
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd6];
  mad.lo.u32 %r41, %r40, 16, %r3;
  st.shared.v4.u32 [%r41], {{%r30,%r31,%r32,%r33}};
  add.u32 %r40, %r40, 64;
  bra COPY;
COPIED:
  bar.sync 0;
  and.b32 %r4, %r1, 31; shl.b32 %r5, %r4, 4; add.u32 %r5, %r5, %r3;
  and.b32 %r6, %r1, 15; shl.b32 %r7, %r6, 4; add.u32 %r8, %r7, %r3; add.u32 %r8, %r8, 1536;
  mov.f32 %f1, 0f00000000; mov.f32 %f2, 0f00000000; mov.f32 %f3, 0f00000000; mov.f32 %f4, 0f00000000;
  mov.f32 %f5, 0f3F800000; mov.f32 %f6, 0f3F800000; mov.f32 %f7, 0f3F800000; mov.f32 %f8, 0f3F800000;
  mov.f32 %f31, 0f00000000; mov.f32 %f32, 0f00000000; mov.f32 %f33, 0f00000000; mov.f32 %f34, 0f00000000;
  mov.u32 %r50, 0;
LOOP:
  mad.lo.u32 %r10, %r50, %r70, %r5;
  mad.lo.u32 %r11, %r50, 256, %r8;
  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%r20,%r21,%r22,%r23}}, [%r10];
  ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%r24,%r25}}, [%r11];
  ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%r26,%r27}}, [%r11+128];
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f1,%f2,%f3,%f4}}, {{%r20,%r21,%r22,%r23}}, {{%r24,%r25}}, {{%f1,%f2,%f3,%f4}};
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f5,%f6,%f7,%f8}}, {{%r20,%r21,%r22,%r23}}, {{%r26,%r27}}, {{%f5,%f6,%f7,%f8}};
{in_loop}
  add.u32 %r50, %r50, 1;
  setp.lt.u32 %p2, %r50, 3;
  @%p2 bra LOOP;
  mov.u32 %r60, %ntid.x; mad.lo.u32 %r61, %r2, %r60, %r1;
  mul.wide.u32 %rd7, %r61, 48; add.u64 %rd8, %rd2, %rd7;
  st.global.v4.f32 [%rd8], {{%f1,%f2,%f3,%f4}};
  st.global.v4.f32 [%rd8+16], {{%f5,%f6,%f7,%f8}};
  st.global.v4.f32 [%rd8+32], {{%f31,%f32,%f33,%f34}};
  ret;
}}"
    )
}

/// B fragments from transposed `ldmatrix`es (four matrices: two B fragments; then two more
/// rows reloaded into one of them) feeding common-form `mma`s: native code fills B's tiles
/// straight from shared memory, and must give the interpreter's products, the reloaded B
/// included.
#[test]
fn transposed_b_fragments_and_a_reloaded_one_give_the_interpreters_products() {
    let ptx = format!(
        "{HEAD}.visible .entry k_trans(.param .u64 inp, .param .u64 out) {{
  .reg .b32 %r<40>; .reg .f32 %f<24>; .reg .b64 %rd<10>;
  .shared .align 16 .b8 sm[1536];
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 48; add.u64 %rd4, %rd1, %rd3;
  mov.u32 %r2, sm; mad.lo.u32 %r3, %r1, 48, %r2;
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd4]; st.shared.v4.u32 [%r3], {{%r30,%r31,%r32,%r33}};
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd4+16]; st.shared.v4.u32 [%r3+16], {{%r30,%r31,%r32,%r33}};
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd4+32]; st.shared.v4.u32 [%r3+32], {{%r30,%r31,%r32,%r33}};
  bar.sync 0;
  shl.b32 %r4, %r1, 4; add.u32 %r5, %r2, %r4; add.u32 %r6, %r5, 512;
  and.b32 %r7, %r1, 15; shl.b32 %r8, %r7, 4; add.u32 %r9, %r2, %r8; add.u32 %r9, %r9, 1024;
  mov.f32 %f0, 0f00000000;
  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%r20,%r21,%r22,%r23}}, [%r5];
  ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%r24,%r25,%r26,%r27}}, [%r6];
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f1,%f2,%f3,%f4}}, {{%r20,%r21,%r22,%r23}}, {{%r24,%r25}}, {{%f0,%f0,%f0,%f0}};
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f5,%f6,%f7,%f8}}, {{%r20,%r21,%r22,%r23}}, {{%r26,%r27}}, {{%f0,%f0,%f0,%f0}};
  ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{%r24,%r25}}, [%r9];
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f9,%f10,%f11,%f12}}, {{%r20,%r21,%r22,%r23}}, {{%r24,%r25}}, {{%f1,%f2,%f3,%f4}};
  mul.wide.u32 %rd5, %r1, 48; add.u64 %rd6, %rd2, %rd5;
  st.global.v4.f32 [%rd6], {{%f1,%f2,%f3,%f4}};
  st.global.v4.f32 [%rd6+16], {{%f5,%f6,%f7,%f8}};
  st.global.v4.f32 [%rd6+32], {{%f9,%f10,%f11,%f12}};
  ret;
}}"
    );
    let mut g = Gen(31);
    let inp: Vec<u8> =
        (0..768).flat_map(|_| f16::from_f64((g.next() % 33) as f64 / 4.0 - 4.0).to_bits().to_le_bytes()).collect();
    let out = run_kernel(&ptx, "k_trans", [1, 1, 1], [32, 1, 1], &[inp, vec![0; 32 * 48]], &[]).unwrap();
    let got: Vec<f32> = out[1].chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let (first, second, reloaded): (Vec<f32>, Vec<f32>, Vec<f32>) = (
        got.chunks(12).flat_map(|t| t[..4].to_vec()).collect(),
        got.chunks(12).flat_map(|t| t[4..8].to_vec()).collect(),
        got.chunks(12).flat_map(|t| t[8..].to_vec()).collect(),
    );
    // The two B fragments differ, and the reloaded one changes the sum it adds to.
    assert_ne!(first, second);
    assert!(first.iter().zip(&reloaded).any(|(x, y)| x != y));
    assert!(got.iter().any(|x| *x != 0.0));
}

/// Fragments whose registers two `ldmatrix`es share in different groupings (a transposed pair
/// reloaded across the two B fragments of an earlier load, an A fragment reloaded in another
/// register order) must reach the `mma`s as the registers hold them, as on the interpreter.
#[test]
fn fragments_reloaded_in_other_groupings_give_the_interpreters_products() {
    let ptx = format!(
        "{HEAD}.visible .entry k_regroup(.param .u64 inp, .param .u64 out) {{
  .reg .b32 %r<40>; .reg .f32 %f<24>; .reg .b64 %rd<10>;
  .shared .align 16 .b8 sm[1536];
  ld.param.u64 %rd1, [inp]; ld.param.u64 %rd2, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 48; add.u64 %rd4, %rd1, %rd3;
  mov.u32 %r2, sm; mad.lo.u32 %r3, %r1, 48, %r2;
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd4]; st.shared.v4.u32 [%r3], {{%r30,%r31,%r32,%r33}};
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd4+16]; st.shared.v4.u32 [%r3+16], {{%r30,%r31,%r32,%r33}};
  ld.global.v4.u32 {{%r30,%r31,%r32,%r33}}, [%rd4+32]; st.shared.v4.u32 [%r3+32], {{%r30,%r31,%r32,%r33}};
  bar.sync 0;
  shl.b32 %r4, %r1, 4; add.u32 %r5, %r2, %r4; add.u32 %r6, %r5, 512;
  and.b32 %r7, %r1, 15; shl.b32 %r8, %r7, 4; add.u32 %r9, %r2, %r8; add.u32 %r9, %r9, 1024;
  mov.f32 %f0, 0f00000000;
  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%r20,%r21,%r22,%r23}}, [%r5];
  ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%r24,%r25,%r26,%r27}}, [%r6];
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f1,%f2,%f3,%f4}}, {{%r20,%r21,%r22,%r23}}, {{%r24,%r25}}, {{%f0,%f0,%f0,%f0}};
  ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{%r25,%r26}}, [%r9];
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f5,%f6,%f7,%f8}}, {{%r20,%r21,%r22,%r23}}, {{%r25,%r26}}, {{%f0,%f0,%f0,%f0}};
  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%r21,%r20,%r22,%r23}}, [%r6];
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%f9,%f10,%f11,%f12}}, {{%r20,%r21,%r22,%r23}}, {{%r26,%r27}}, {{%f0,%f0,%f0,%f0}};
  mul.wide.u32 %rd5, %r1, 48; add.u64 %rd6, %rd2, %rd5;
  st.global.v4.f32 [%rd6], {{%f1,%f2,%f3,%f4}};
  st.global.v4.f32 [%rd6+16], {{%f5,%f6,%f7,%f8}};
  st.global.v4.f32 [%rd6+32], {{%f9,%f10,%f11,%f12}};
  ret;
}}"
    );
    let mut g = Gen(37);
    let inp: Vec<u8> =
        (0..768).flat_map(|_| f16::from_f64((g.next() % 33) as f64 / 4.0 - 4.0).to_bits().to_le_bytes()).collect();
    let out = run_kernel(&ptx, "k_regroup", [1, 1, 1], [32, 1, 1], &[inp, vec![0; 32 * 48]], &[]).unwrap();
    assert!(out[1].chunks(4).any(|c| f32::from_le_bytes(c.try_into().unwrap()) != 0.0));
}

/// A warp's 16x8 tile of f32 accumulators.
type Tile = [[f32; 8]; 16];

/// Runs [`k_loop`] on two blocks of 64 threads with distinct inputs and checks every thread's
/// share of the three tiles against the products the ISA's layouts give. `after_pass` applies to
/// a warp's tiles what the loop's own code does after each pass; it is handed the pass's product
/// of A and the first tile's B, accumulated onto a C it names.
fn check_k_loop(in_loop: &str, after_pass: impl Fn(&mut [Tile; 3], &dyn Fn(&Tile) -> Tile)) {
    let quarters = |g: &mut Gen| f16::from_f64((g.next() % 33) as f64 / 4.0 - 4.0);
    check_k_loop_in(MmaModel::Ieee, quarters, in_loop, after_pass)
}

/// [`check_k_loop`] in `model`'s arithmetic, on inputs `value` makes.
fn check_k_loop_in(
    model: MmaModel,
    value: impl Fn(&mut Gen) -> f16,
    in_loop: &str,
    after_pass: impl Fn(&mut [Tile; 3], &dyn Fn(&Tile) -> Tile),
) {
    let ptx = k_loop(in_loop);
    let mut g = Gen(23);
    let halves: Vec<u16> = (0..2 * 1280).map(|_| value(&mut g).to_bits()).collect();
    let inp: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let out =
        run_kernel_in(model, &ptx, "k_loop", [2, 1, 1], [64, 1, 1], &[inp, vec![0; 128 * 48]], &512u32.to_le_bytes())
            .unwrap();
    let got: Vec<u32> = out[1].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    for block in 0..2 {
        let h = |i: usize| f16::from_bits(halves[block * 1280 + i]).to_f32();
        let a = |base: usize, row: usize, k: usize| h(base + ((row / 8 + 2 * (k / 8)) * 8 + row % 8) * 8 + k % 8);
        let b = |base: usize, k: usize, n: usize| h(base + ((k / 8) * 8 + n) * 8 + k % 8);
        let product = |pass: usize, t: usize, c: &Tile| -> Tile {
            let (abase, bbase) = (256 * pass, 768 + 128 * pass + 64 * t);
            let mut d = *c;
            for (row, d_row) in d.iter_mut().enumerate() {
                for (n, x) in d_row.iter_mut().enumerate() {
                    *x = if model == MmaModel::Ieee {
                        (0..16).fold(*x, |s, k| a(abase, row, k).mul_add(b(bbase, k, n), s))
                    } else {
                        f32::from_bits(model_element(model, *x, |k| (a(abase, row, k), b(bbase, k, n))))
                    };
                }
            }
            d
        };
        // Every thread of a warp holds its share of the warp's tiles; both warps compute the same.
        for warp in 0..2 {
            let mut tiles: [Tile; 3] = [[[0.0; 8]; 16], [[1.0; 8]; 16], [[0.0; 8]; 16]];
            for pass in 0..3 {
                tiles[0] = product(pass, 0, &tiles[0]);
                tiles[1] = product(pass, 1, &tiles[1]);
                after_pass(&mut tiles, &|c| product(pass, 0, c));
            }
            for lane in 0..32 {
                let thread = block * 64 + warp * 32 + lane;
                for (t, tile) in tiles.iter().enumerate() {
                    for r in 0..4 {
                        let (row, col) = c_m16n8(lane, r);
                        let want = tile[row][col].to_bits();
                        assert_eq!(
                            got[thread * 12 + t * 4 + r],
                            want,
                            "block {block}, thread {thread}, tile {t}, c{r}"
                        );
                    }
                }
            }
        }
    }
}

/// A K loop whose native code never touches its accumulators: they stay in the run's tiles from
/// one pass to the next (see `exec/jit/warp_run.rs`) and go back to the threads where the code
/// after the loop reads them, block after block.
#[test]
fn a_k_loops_accumulators_stay_in_tiles_and_come_back_after_it() {
    check_k_loop("", |_, _| {});
}

/// Native code inside the loop writes an accumulator on some threads only (the odd ones), and
/// reads one on the even ones in the last pass: each thread that touches them loads them first,
/// every thread's tile goes back to its registers, and the next pass finds the threads' values.
#[test]
fn native_code_that_touches_kept_accumulators_on_some_threads_sees_and_changes_them() {
    let in_loop = "
  and.b32 %r62, %r1, 1; setp.eq.u32 %p3, %r62, 0;
  @%p3 bra EVEN;
  add.f32 %f2, %f2, 0f3F800000;
  bra JOINED;
EVEN:
  setp.ne.u32 %p4, %r50, 2;
  @%p4 bra JOINED;
  add.f32 %f9, %f7, 0f00000000;
  mov.b32 %r63, %f9; st.shared.u32 [%r3+2560], %r63;
JOINED:";
    check_k_loop(in_loop, |tiles, _| {
        for lane in (1..32).step_by(2) {
            let (row, col) = c_m16n8(lane, 1);
            tiles[0][row][col] += 1.0;
        }
    });
}

/// A barrier inside the loop (after a shared store that the loop's warp instructions cannot
/// pass), then a shuffle that reads a kept accumulator from the neighbouring lane and adds it to
/// another: the shuffle's exchange reads every lane's current value, so the tiles go back to the
/// threads before it, and the run's next pass starts from the sums.
#[test]
fn a_shuffle_of_a_kept_accumulator_reads_every_lanes_current_value() {
    let in_loop = "
  st.shared.u32 [%r3+2560], %r50;
  bar.sync 0;
  ld.shared.u32 %r64, [%r3+2560];
  sub.u32 %r65, %r64, %r50;
  mov.b32 %r66, %f3;
  shfl.sync.bfly.b32 %r67, %r66, 1, 31, -1;
  add.u32 %r67, %r67, %r65;
  mov.b32 %f10, %r67;
  add.f32 %f8, %f8, %f10;";
    check_k_loop(in_loop, |tiles, _| {
        let before = *tiles;
        for lane in 0..32 {
            let (row, col) = c_m16n8(lane ^ 1, 2);
            let (r8, c8) = c_m16n8(lane, 3);
            tiles[1][r8][c8] += before[0][row][col];
        }
    });
}

/// A second row of warp instructions in the loop (after a shared store the first row cannot
/// pass) reads the first row's accumulators as its C, into other registers that native code adds
/// up: the tiles go back to the threads before that row runs, and the first row's next pass
/// finds them unchanged.
#[test]
fn another_row_that_reads_kept_accumulators_sees_their_current_values() {
    let in_loop = "
  st.shared.u32 [%r3+2560], %r50;
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f11,%f12,%f13,%f14}, {%r20,%r21,%r22,%r23}, {%r24,%r25}, {%f1,%f2,%f3,%f4};
  add.f32 %f31, %f31, %f11; add.f32 %f32, %f32, %f12; add.f32 %f33, %f33, %f13; add.f32 %f34, %f34, %f14;";
    check_k_loop(in_loop, |tiles, product| {
        let d = product(&tiles[0]);
        for (sum, row) in tiles[2].iter_mut().zip(d) {
            for (s, x) in sum.iter_mut().zip(row) {
                *s += x;
            }
        }
    });
}

/// A pass after the first whose `ldmatrix` rows leave shared memory fails as on every engine,
/// with the kept tiles handed back to the threads before the instructions run one by one.
#[test]
fn a_later_pass_that_faults_fails_as_the_interpreter_does() {
    let ptx = k_loop("");
    let inp = vec![0x3Cu8; 2560];
    // Stride 1040: the third pass's A rows reach past the block's 2576 bytes. One block: where
    // blocks run in parallel, the first to fault is the one named.
    let stride = 1040u32.to_le_bytes();
    match run_kernel(&ptx, "k_loop", [1, 1, 1], [64, 1, 1], &[inp, vec![0; 64 * 48]], &stride) {
        Ok(_) => panic!("rows past shared memory ran"),
        Err(e) => {
            let line = ptx.lines().position(|l| l.contains("ldmatrix")).expect("an ldmatrix") + 1;
            assert!(
                e.contains("out-of-bounds read") && e.contains(&format!("shared address 0xa10 (line {line})")),
                "{e}"
            )
        }
    }
}

/// The inputs an H200 was given and the D it computed (`tests/numerics/mma_sample.bin`), run as
/// PTX on every engine in the Hopper model: every bit of D as the hardware's, for each `mma` form
/// the probe recorded and every kind of input it tried (random, cancellation, subnormals, wide
/// exponent spreads, a dominant accumulator, sparse powers of two, infinities and NaNs, near-ties,
/// overflow, signed zeros).
#[test]
fn every_engine_gives_the_h200s_bits_in_the_sm90_model() {
    use crate::ptx::numerics::probe;
    let forms: [Case; 6] = [
        case((16, 8, 16), [Ty::F32, Ty::F16, Ty::F16, Ty::F32], [a_f16_k16, b_f16_k16, c_m16n8]),
        case((16, 8, 16), [Ty::F32, Ty::BF16, Ty::BF16, Ty::F32], [a_f16_k16, b_f16_k16, c_m16n8]),
        case((16, 8, 8), [Ty::F32, Ty::TF32, Ty::TF32, Ty::F32], [a_tf32_k8, b_tf32_k8, c_m16n8]),
        case((16, 8, 16), [Ty::F16, Ty::F16, Ty::F16, Ty::F16], [a_f16_k16, b_f16_k16, c_m16n8]),
        case((16, 8, 8), [Ty::F32, Ty::F16, Ty::F16, Ty::F32], [a_f16_k8, b_f16_k8, c_m16n8]),
        case((16, 8, 8), [Ty::F32, Ty::BF16, Ty::BF16, Ty::F32], [a_f16_k8, b_f16_k8, c_m16n8]),
    ];
    let mut ran = [0; 6];
    for tile in probe::sample().into_iter().filter(|t| t.form < forms.len()) {
        let wide = |v: &[u32]| v.iter().map(|&x| x as u64).collect::<Vec<_>>();
        let d = forms[tile.form].run_in(MmaModel::Sm90, &wide(&tile.a), &wide(&tile.b), &wide(&tile.c));
        assert_eq!(d, wide(&tile.d), "{} class {}", probe::form_name(tile.form), tile.class);
        ran[tile.form] += 1;
    }
    assert!(ran.iter().all(|&n| n > 0), "the sample holds every mma form: {ran:?}");
}

/// One f32 element of an f16 `mma.m16n8k16` in `model` from C `c` and the pairs `pair(k)`, by the
/// model's own per-element function (`tensor_core::dot`), not the tile code the engines run.
fn model_element(model: MmaModel, c: f32, pair: impl Fn(usize) -> (f32, f32)) -> u32 {
    use crate::ptx::numerics::tensor_core::{dot, exponent_of, Term};
    let products: Vec<Term> = (0..16)
        .map(|k| {
            let (x, y) = pair(k);
            Term { value: x as f64 * y as f64, exp: exponent_of(x, -14) + exponent_of(y, -14) }
        })
        .collect();
    dot(model, model == MmaModel::Sm80, Term { value: c as f64, exp: exponent_of(c, -126) }, &products, false)
}

/// Triton's K loop (`ldmatrix`es and accumulating `mma`s whose tiles native code keeps across
/// passes) in the Hopper and Ampere models, on f16 inputs with full mantissas and exponents that
/// differ: every engine gives the model's bits, element by element as `tensor_core::dot` computes
/// them, and they are not the IEEE chain's.
#[test]
fn a_k_loop_in_the_sm90_and_sm80_models_gives_the_models_bits_on_every_engine() {
    let wide = |g: &mut Gen| {
        let x = f16::from_bits((g.next() % 0x5C00) as u16 | 0x0400);
        if g.next().is_multiple_of(2) {
            -x
        } else {
            x
        }
    };
    for model in [MmaModel::Sm90, MmaModel::Sm80] {
        check_k_loop_in(model, wide, "", |_, _| {});
    }
    let ptx = k_loop("");
    let mut g = Gen(23);
    let inp: Vec<u8> = (0..2 * 1280).flat_map(|_| wide(&mut g).to_bits().to_le_bytes()).collect();
    let run = |model| {
        let bufs = [inp.clone(), vec![0; 128 * 48]];
        run_kernel_in(model, &ptx, "k_loop", [2, 1, 1], [64, 1, 1], &bufs, &512u32.to_le_bytes()).unwrap()
    };
    assert_ne!(run(MmaModel::Sm90)[1], run(MmaModel::Ieee)[1]);
}
