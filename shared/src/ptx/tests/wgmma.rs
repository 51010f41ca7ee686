//! `wgmma.mma_async` against the PTX ISA's register fragment tables for a warpgroup (written
//! out here as the ISA states them) and its shared-memory layouts (placed here the way the
//! ISA's figures draw them: core matrices of 8 rows of 16 bytes, swizzle atoms of 8 lines whose
//! 16-byte chunks are permuted), with the accumulation recap defines (docs/PTX.md).

use half::f16;

use super::run_kernel;

const HEAD: &str = ".version 8.0\n.target sm_90a\n.address_size 64\n";
/// Shared memory of the test kernels: A's tile at 0, B's at `B_AT`.
const SHARED: usize = 32768;
const B_AT: usize = 16384;

#[derive(Clone, Copy)]
enum Layout {
    /// K-major core matrices: 16-byte chunk `kb/16` of row `r` at `(r/8)*sbo + (kb/16)*lbo`.
    KInterleave { lbo: usize, sbo: usize },
    /// K-major swizzle atoms of 8 lines of `w` bytes, one line per row, atoms `sbo` apart.
    KSwizzle { w: usize, sbo: usize },
    /// MN-major core matrices: 8 k-lines of 16 bytes of MN; MN chunks `sbo`, k groups `lbo` apart.
    MnInterleave { lbo: usize, sbo: usize },
    /// MN-major swizzle atoms of 8 k-lines of `w` bytes of MN; MN spans `lbo`, k groups `sbo` apart.
    MnSwizzle { w: usize, lbo: usize, sbo: usize },
}

impl Layout {
    fn code(self) -> u64 {
        let (mode, lbo, sbo) = match self {
            Layout::KInterleave { lbo, sbo } | Layout::MnInterleave { lbo, sbo } => (0, lbo, sbo),
            Layout::KSwizzle { w, sbo } => (swizzle_code(w), 16, sbo),
            Layout::MnSwizzle { w, lbo, sbo } => (swizzle_code(w), lbo, sbo),
        };
        (mode << 62) | ((lbo as u64 >> 4) << 16) | ((sbo as u64 >> 4) << 32)
    }
    fn mn_major(self) -> bool {
        matches!(self, Layout::MnInterleave { .. } | Layout::MnSwizzle { .. })
    }
    /// Where byte `byte` of element (`r`, `k`) lands, relative to the tile.
    fn place(self, r: usize, k: usize, esize: usize) -> usize {
        // A swizzle atom's line `line` has its 16-byte chunks permuted by XOR with
        // `line / (128 / w)`, as the ISA's figures show (the pattern repeats every 1024 bytes).
        let chunk = |w: usize, line: usize, c: usize| c ^ (line / (128 / w));
        match self {
            Layout::KInterleave { lbo, sbo } => {
                let kb = k * esize;
                (r / 8) * sbo + (kb / 16) * lbo + (r % 8) * 16 + kb % 16
            }
            Layout::KSwizzle { w, sbo } => {
                let kb = k * esize;
                (r / 8) * sbo + (r % 8) * w + chunk(w, r % 8, kb / 16) * 16 + kb % 16
            }
            Layout::MnInterleave { lbo, sbo } => {
                let rb = r * esize;
                (rb / 16) * sbo + (k / 8) * lbo + (k % 8) * 16 + rb % 16
            }
            Layout::MnSwizzle { w, lbo, sbo } => {
                let rb = r * esize;
                (rb / w) * lbo + (k / 8) * sbo + (k % 8) * w + chunk(w, k % 8, (rb % w) / 16) * 16 + rb % 16
            }
        }
    }
}

fn swizzle_code(w: usize) -> u64 {
    match w {
        128 => 1,
        64 => 2,
        32 => 3,
        _ => unreachable!(),
    }
}

/// The ISA's D table for a warpgroup: element `i` of lane `lane` of warp `w`.
fn d_pos(w: usize, lane: usize, i: usize) -> (usize, usize) {
    let row = 16 * w + lane / 4 + if i % 4 < 2 { 0 } else { 8 };
    let col = (lane % 4) * 2 + (i & 1) + 8 * (i / 4);
    (row, col)
}

/// The ISA's A table for 16-bit elements (k16): a0..a7 of lane `lane` of warp `w`.
fn a_pos_f16(w: usize, lane: usize, i: usize) -> (usize, usize) {
    let row = 16 * w + lane / 4 + if matches!(i, 2 | 3 | 6 | 7) { 8 } else { 0 };
    let col = (lane % 4) * 2 + (i & 1) + if i >= 4 { 8 } else { 0 };
    (row, col)
}

/// One test: `slices` instructions of K `k` each along a K of `k * slices`, each stepping the
/// descriptors' start by 32 bytes (the same tiles, K-major), or one instruction.
struct Case<'a> {
    inst: &'a str,
    n: usize,
    k: usize,
    esize: usize,
    /// D: 32-bit elements (f32, s32) or f16.
    d32: bool,
    a: Option<Layout>,
    b: Layout,
    slices: usize,
    /// The immediates after `scale-d` (`, 1, 1, 0, 0`...); `scale-d` is 0 for the first slice
    /// when `fresh`.
    imms: &'a str,
    fresh: bool,
}

/// Runs `case` on A (64 x K), B (K x N as element bits) and C, and gives D's elements.
fn run(case: &Case, a: &[u64], b: &[u64], c: &[u64]) -> Result<Vec<u64>, String> {
    let (n, ktot, es) = (case.n, case.k * case.slices, case.esize);
    let mut img = vec![0u8; SHARED];
    let put = |img: &mut Vec<u8>, at: usize, v: u64| img[at..at + es].copy_from_slice(&v.to_le_bytes()[..es]);
    if let Some(la) = case.a {
        for r in 0..64 {
            for k in 0..ktot {
                put(&mut img, la.place(r, k, es), a[r * ktot + k]);
            }
        }
    }
    for k in 0..ktot {
        for col in 0..n {
            put(&mut img, B_AT + case.b.place(col, k, es), b[k * n + col]);
        }
    }
    let per = if case.d32 { 1 } else { 2 };
    let nd = 64 * n / 128 / per;
    let bits = 32 / per;
    // Each thread's registers, from the tables.
    let mut cin = vec![0u8; 128 * nd * 4];
    let mut ain = vec![0u8; 128 * 4 * 4];
    for w in 0..4 {
        for lane in 0..32 {
            let t = 32 * w + lane;
            for j in 0..nd {
                let mut v = 0u64;
                for h in 0..per {
                    let (row, col) = d_pos(w, lane, j * per + h);
                    v |= c[row * n + col] << (h * bits);
                }
                cin[(t * nd + j) * 4..(t * nd + j) * 4 + 4].copy_from_slice(&(v as u32).to_le_bytes());
            }
            if case.a.is_none() {
                for j in 0..4 {
                    let mut v = 0u64;
                    for h in 0..2 {
                        let (row, col) = a_pos_f16(w, lane, 2 * j + h);
                        v |= a[row * ktot + col] << (16 * h);
                    }
                    ain[(t * 4 + j) * 4..(t * 4 + j) * 4 + 4].copy_from_slice(&(v as u32).to_le_bytes());
                }
            }
        }
    }
    let dregs: Vec<String> = (0..nd).map(|j| format!("%r{}", 100 + j)).collect();
    let mut body = String::new();
    for (j, r) in dregs.iter().enumerate() {
        body += &format!("    ld.global.u32 {r}, [%rd5+{}];\n", j * 4);
    }
    for j in 0..4 {
        body += &format!("    ld.global.u32 %r{}, [%rd6+{}];\n", 60 + j, j * 4);
    }
    body += &format!(
        "    mov.b64 %rd20, {};\n    add.s64 %rd20, %rd20, %rd10;\n    mov.b64 %rd21, {};\n    add.s64 %rd21, %rd21, %rd10;\n    add.s64 %rd21, %rd21, {};\n",
        case.a.map_or(0, |l| l.code()),
        case.b.code(),
        B_AT >> 4
    );
    body += "    wgmma.fence.sync.aligned;\n";
    let a_op = if case.a.is_some() { "%rd20".to_string() } else { "{%r60, %r61, %r62, %r63}".to_string() };
    for s in 0..case.slices {
        let scale = if case.fresh && s == 0 { "0" } else { "%p1" };
        body += &format!("    {} {{{}}}, {a_op}, %rd21, {scale}{};\n", case.inst, dregs.join(", "), case.imms);
        body += "    add.s64 %rd20, %rd20, 2;\n    add.s64 %rd21, %rd21, 2;\n";
    }
    body += "    wgmma.commit_group.sync.aligned;\n    wgmma.wait_group.sync.aligned 0;\n";
    for (j, r) in dregs.iter().enumerate() {
        body += &format!("    st.global.u32 [%rd7+{}], {r};\n", j * 4);
    }
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out, .param .u64 img, .param .u64 ain, .param .u64 cin)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<400>;
    .reg .b64 %rd<32>;
    .shared .align 1024 .b8 tile[{SHARED}];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [img];
    ld.param.u64 %rd3, [ain];
    ld.param.u64 %rd4, [cin];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, %r1;
    mov.u32 %r2, tile;
    mul.lo.u32 %r3, %r1, 16;
COPY:
    cvt.u64.u32 %rd8, %r3;
    add.s64 %rd9, %rd2, %rd8;
    ld.global.v4.u32 {{%r4, %r5, %r6, %r7}}, [%rd9];
    add.u32 %r8, %r2, %r3;
    st.shared.v4.u32 [%r8], {{%r4, %r5, %r6, %r7}};
    add.u32 %r3, %r3, 2048;
    setp.lt.u32 %p2, %r3, {SHARED};
    @%p2 bra COPY;
    bar.sync 0;
    cvt.u64.u32 %rd10, %r2;
    shr.u64 %rd10, %rd10, 4;
    mul.wide.u32 %rd11, %r1, {nd4};
    add.s64 %rd5, %rd4, %rd11;
    add.s64 %rd7, %rd1, %rd11;
    mul.wide.u32 %rd12, %r1, 16;
    add.s64 %rd6, %rd3, %rd12;
{body}    ret;
}}",
        nd4 = nd * 4
    );
    let out = run_kernel(&ptx, "k", [1, 1, 1], [128, 1, 1], &[vec![0; 128 * nd * 4], img, ain, cin], &[])?;
    let out = &out[0];
    let mut d = vec![0u64; 64 * n];
    for w in 0..4 {
        for lane in 0..32 {
            let t = 32 * w + lane;
            for j in 0..nd {
                let v = u32::from_le_bytes(out[(t * nd + j) * 4..(t * nd + j) * 4 + 4].try_into().unwrap()) as u64;
                for h in 0..per {
                    let (row, col) = d_pos(w, lane, j * per + h);
                    d[row * n + col] = (v >> (h * bits)) & if per == 1 { 0xFFFF_FFFF } else { 0xFFFF };
                }
            }
        }
    }
    Ok(d)
}

fn h(x: f32) -> u64 {
    f16::from_f32(x).to_bits() as u64
}

/// Small f16 values whose products and sums are exact, so any accumulation order gives them.
fn f16_inputs(n: usize, k: usize) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let a = (0..64 * k).map(|i| h(((i * 7 % 13) as f32 - 6.0) / 4.0)).collect();
    let b = (0..k * n).map(|i| h(((i * 5 % 11) as f32 - 5.0) / 2.0)).collect();
    let c = (0..64 * n).map(|i| ((i % 9) as f32 - 4.0).to_bits() as u64).collect();
    (a, b, c)
}

/// D = A * B (+ C), each element an f32 fused multiply-add chain in increasing k.
fn reference(a: &[u64], b: &[u64], c: Option<&[u64]>, n: usize, k: usize, neg_b: bool) -> Vec<u64> {
    let v = |x: u64| f16::from_bits(x as u16).to_f32();
    let mut d = vec![0u64; 64 * n];
    for row in 0..64 {
        for col in 0..n {
            let mut s = c.map_or(0.0, |c| f32::from_bits(c[row * n + col] as u32));
            for kk in 0..k {
                let y = if neg_b { -v(b[kk * n + col]) } else { v(b[kk * n + col]) };
                s = v(a[row * k + kk]).mul_add(y, s);
            }
            d[row * n + col] = s.to_bits() as u64;
        }
    }
    d
}

#[test]
fn f16_from_descriptors_without_swizzle_uses_lbo_and_sbo() {
    // Strides larger than the dense ones, so that each is seen to be honoured.
    for (la, lb) in [
        (Layout::KInterleave { lbo: 128, sbo: 256 }, Layout::KInterleave { lbo: 128, sbo: 256 }),
        (Layout::KInterleave { lbo: 2048, sbo: 384 }, Layout::KInterleave { lbo: 1024, sbo: 512 }),
    ] {
        let case = Case {
            inst: "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16",
            n: 16,
            k: 16,
            esize: 2,
            d32: true,
            a: Some(la),
            b: lb,
            slices: 1,
            imms: ", 1, 1, 0, 0",
            fresh: false,
        };
        let (a, b, c) = f16_inputs(16, 16);
        assert_eq!(run(&case, &a, &b, &c).unwrap(), reference(&a, &b, Some(&c), 16, 16, false));
    }
}

#[test]
fn f16_k_major_in_every_swizzle_mode_stepping_along_k() {
    // A swizzle atom's line holds w bytes of K: w/32 instructions of K 16 cover it, each
    // descriptor's start 32 bytes on; the first does not add C (scale-d 0).
    for w in [32, 64, 128] {
        let slices = w / 32;
        let k = 16 * slices;
        let case = Case {
            inst: "wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16",
            n: 24,
            k: 16,
            esize: 2,
            d32: true,
            a: Some(Layout::KSwizzle { w, sbo: 8 * w }),
            b: Layout::KSwizzle { w, sbo: 8 * w },
            slices,
            imms: ", 1, 1, 0, 0",
            fresh: true,
        };
        let (a, b, c) = f16_inputs(24, k);
        assert_eq!(run(&case, &a, &b, &c).unwrap(), reference(&a, &b, None, 24, k, false), "{w}-byte swizzle");
    }
}

#[test]
fn f16_mn_major_operands() {
    // imm-trans-a and imm-trans-b 1: A as K rows of 64 M elements, B as K rows of N elements.
    for (la, lb, n) in [
        (Layout::MnInterleave { lbo: 128, sbo: 256 }, Layout::MnInterleave { lbo: 128, sbo: 256 }, 16),
        (Layout::MnSwizzle { w: 128, lbo: 2048, sbo: 1024 }, Layout::MnSwizzle { w: 128, lbo: 2048, sbo: 1024 }, 128),
        (Layout::MnSwizzle { w: 64, lbo: 1024, sbo: 512 }, Layout::MnSwizzle { w: 32, lbo: 512, sbo: 256 }, 32),
    ] {
        let case = Case {
            inst: &format!("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16"),
            n,
            k: 16,
            esize: 2,
            d32: true,
            a: Some(la),
            b: lb,
            slices: 1,
            imms: ", 1, 1, 1, 1",
            fresh: false,
        };
        assert!(la.mn_major() && lb.mn_major());
        let (a, b, c) = f16_inputs(n, 16);
        assert_eq!(run(&case, &a, &b, &c).unwrap(), reference(&a, &b, Some(&c), n, 16, false), "n {n}");
    }
}

#[test]
fn a_from_registers_with_an_f16_accumulator_rounds_once_and_negates_b() {
    let n = 16;
    let case = Case {
        inst: "wgmma.mma_async.sync.aligned.m64n16k16.f16.f16.f16",
        n,
        k: 16,
        esize: 2,
        d32: false,
        a: None,
        b: Layout::KInterleave { lbo: 128, sbo: 256 },
        slices: 1,
        imms: ", 1, -1, 0",
        fresh: false,
    };
    let (mut a, b, _) = f16_inputs(n, 16);
    // Row 0 gets 1/3 in every column of A: sums that f16 cannot hold exactly; row 1 an infinity
    // times a zero of B (NaN).
    a[..16].fill(h(1.0 / 3.0));
    // Row 2: the smallest normal f16 (2^-14) times B's halves: products and sums below f16's
    // normal range, kept (not flushed) and rounded to f16 subnormals at the end.
    a[32..48].fill(h(6.103_515_6e-5));
    let mut b = b;
    a[16] = h(f32::INFINITY);
    b[0] = h(0.0);
    let mut c: Vec<u64> = (0..64 * n).map(|i| h((i % 5) as f32 * 0.25)).collect();
    c[2 * n..3 * n].fill(0);
    let got = run(&case, &a, &b, &c).unwrap();
    let c32: Vec<u64> = c.iter().map(|x| (f16::from_bits(*x as u16).to_f32()).to_bits() as u64).collect();
    let want = reference(&a, &b, Some(&c32), n, 16, true);
    for i in 0..64 * n {
        let s = f32::from_bits(want[i] as u32);
        let want = if s.is_nan() { 0x7FFF } else { f16::from_f32(s).to_bits() as u64 };
        assert_eq!(got[i], want, "element {i}");
    }
    assert_eq!(got[16], 0x7FFF, "infinity times zero is the canonical NaN");
    assert!((0..n).any(|col| got[2 * n + col] & 0x7C00 == 0 && got[2 * n + col] & 0x3FF != 0), "f16 subnormals");
}

#[test]
fn tf32_fp8_and_int8_shapes() {
    // tf32 (k8): the low 13 bits of each input are ignored.
    let n = 8;
    let tf = |x: f32| x.to_bits() as u64 | 0x1FFF;
    let a: Vec<u64> = (0..64 * 8).map(|i| tf((i % 7) as f32 - 3.0)).collect();
    let b: Vec<u64> = (0..8 * n).map(|i| tf((i % 5) as f32 * 0.5)).collect();
    let case = Case {
        inst: "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32",
        n,
        k: 8,
        esize: 4,
        d32: true,
        a: Some(Layout::KInterleave { lbo: 128, sbo: 256 }),
        b: Layout::KInterleave { lbo: 128, sbo: 256 },
        slices: 1,
        imms: ", 1, 1",
        fresh: true,
    };
    let got = run(&case, &a, &b, &vec![0; 64 * n]).unwrap();
    let v = |x: u64| f32::from_bits(x as u32 & 0xFFFF_E000);
    for row in 0..64 {
        for col in 0..n {
            let want = (0..8).fold(0.0f32, |s, k| v(a[row * 8 + k]).mul_add(v(b[k * n + col]), s));
            assert_eq!(got[row * n + col], want.to_bits() as u64, "tf32 ({row}, {col})");
        }
    }

    // e4m3 x e5m2 (k32): 0x38 is 1.0 in e4m3, 0x40 is 2.0 in e5m2; 0x7F is e4m3's NaN.
    let a: Vec<u64> = (0..64 * 32).map(|i| if i == 5 { 0x7F } else { 0x38 }).collect();
    let b: Vec<u64> = vec![0x40; 32 * n];
    let case = Case {
        inst: "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e5m2",
        esize: 1,
        k: 32,
        a: Some(Layout::KSwizzle { w: 32, sbo: 256 }),
        b: Layout::KSwizzle { w: 32, sbo: 256 },
        imms: ", 1, -1",
        ..case
    };
    let got = run(&case, &a, &b, &vec![0; 64 * n]).unwrap();
    assert_eq!(got[0], 0x7FFF_FFFF, "a NaN input gives the canonical NaN");
    assert!(got[n..].iter().all(|x| *x == (-64.0f32).to_bits() as u64), "32 products of 1 * -2");

    // s8 (k32) with .satfinite: 32 * 127 * 127 added to i32::MAX - 10 saturates.
    let a: Vec<u64> = (0..64 * 32).map(|i| if i < 32 { 127 } else { (i % 3) as u64 }).collect();
    let b: Vec<u64> = (0..32 * n).map(|i| if i % n == 0 { 127 } else { 0xFF }).collect();
    let mut c = vec![5u64; 64 * n];
    c[0] = (i32::MAX - 10) as u32 as u64;
    let case = Case {
        inst: "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8.satfinite",
        a: Some(Layout::KInterleave { lbo: 128, sbo: 256 }),
        b: Layout::KInterleave { lbo: 128, sbo: 256 },
        imms: "",
        fresh: false,
        ..case
    };
    let got = run(&case, &a, &b, &c).unwrap();
    assert_eq!(got[0], i32::MAX as u32 as u64, "saturated");
    for row in 1..64 {
        for col in 0..n {
            let bv = |k: usize| if col == 0 { 127i64 } else { -1 } * (b[k * n + col] > 0) as i64;
            let want = 5 + (0..32).map(|k| a[row * 32 + k] as i64 * bv(k)).sum::<i64>();
            assert_eq!(got[row * n + col], want as i32 as u32 as u64, "s8 ({row}, {col})");
        }
    }
}

#[test]
fn malformed_wgmma_is_refused_at_load() {
    let load = |ins: &str| {
        let ptx = format!(
            "{HEAD}.visible .entry k()\n{{\n    .reg .b32 %r<200>;\n    .reg .b64 %rd<4>;\n    .reg .pred %p<2>;\n    {ins}\n    ret;\n}}"
        );
        crate::ptx::Module::parse(&ptx).err().map(|e| e.to_string())
    };
    let d4 = "{%r0, %r1, %r2, %r3}";
    assert_eq!(
        load(&format!("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d4}, %rd0, %rd1, 1, 1, 1, 0, 0;")),
        None
    );
    assert_eq!(load(&format!("wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8 {d4}, %rd0, %rd1, %p1;")), None);
    for (ins, why) in [
        (format!("wgmma.mma_async.sync.aligned.m64n12k16.f32.f16.f16 {d4}, %rd0, %rd1, 1, 1, 1, 0, 0;"), "unsupported"),
        (format!("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d4}, %rd0, %rd1, 1, 1, 1;"), "takes 8 operands"),
        (format!("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.f16 {d4}, %rd0, %rd1, 1, 1, 1, 0, 0;"), "unsupported"),
        (format!("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d4}, %rd0, %rd1, 1, 2, 1, 0, 0;"), "imm-scale-a"),
        (
            "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%r0, %r1}, %rd0, %rd1, 1, 1, 1, 0, 0;".into(),
            "D needs 4",
        ),
        (
            format!("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16 {d4}, %rd0, %rd1, %r9, 0, 1, 1, 1, 0, 0;"),
            "unsupported",
        ),
    ] {
        let err = load(&ins).unwrap_or_else(|| panic!("{ins} loads"));
        assert!(err.contains(why), "{ins}: {err}");
    }
}
