//! `ldmatrix`, `stmatrix` and `movmatrix` against the ISA's fragment of an 8x8 matrix of 16-bit
//! elements ("Figure: ldmatrix fragments"): lane `l` holds row `l / 4`, columns `2 (l % 4)` and
//! `2 (l % 4) + 1`, the lower column in the lower half; `.trans` holds the transposed matrix.

use super::run_kernel;

const HEAD: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// The element at (row, col) of matrix `j`, as the tests lay it out in shared memory.
fn elem(j: usize, row: usize, col: usize) -> u32 {
    (0x1000 * (j + 1) + row * 16 + col) as u32
}

/// The register lane `lane` gets for matrix `j`, from the ISA's figure.
fn fragment(j: usize, lane: usize, trans: bool) -> u32 {
    let (r, c) = (lane / 4, 2 * (lane % 4));
    if trans {
        elem(j, c, r) | elem(j, c + 1, r) << 16
    } else {
        elem(j, r, c) | elem(j, r, c + 1) << 16
    }
}

/// A kernel of `threads` threads: each thread writes row `tid % 32` of the warp's matrices to
/// shared memory (matrix `r / 8`, row `r % 8`, 16 bytes at a stride of 32 to keep rows apart),
/// then runs `ldmatrix` with row addresses from lanes `0..8 * n` (the other lanes give an address
/// that would fault) and stores its registers; with `into_address`, the first matrix lands in
/// the register that held the row addresses (every row must be read before any lands).
fn ldmatrix_into(n: usize, trans: bool, threads: u32, into_address: bool) -> Vec<u32> {
    let reg = |i: usize| if i == 0 && into_address { "%r4".to_string() } else { format!("%d{i}") };
    let regs = (0..n).map(reg).collect::<Vec<_>>().join(", ");
    let stores =
        (0..n).map(|i| format!("st.global.u32 [%rd3+{}], {};", 4 * i, reg(i))).collect::<Vec<_>>().join("\n    ");
    let tr = if trans { ".trans" } else { "" };
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out, .param .u64 rows)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<16>;
    .reg .b32 %d<4>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 tile[2048];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd4, [rows];
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 31;
    shr.u32 %r9, %r1, 5;
    shl.b32 %r9, %r9, 10;
    mov.u32 %r3, tile;
    add.u32 %r3, %r3, %r9;
    mad.lo.u32 %r4, %r2, 32, %r3;
    mul.wide.u32 %rd5, %r2, 16;
    add.s64 %rd5, %rd4, %rd5;
    ld.global.v4.u32 {{%r5, %r6, %r7, %r8}}, [%rd5];
    st.shared.v4.u32 [%r4], {{%r5, %r6, %r7, %r8}};
    bar.sync 0;
    setp.ge.u32 %p1, %r2, {};
    @%p1 mov.u32 %r4, 7;
    ldmatrix.sync.aligned.m8n8.x{n}{tr}.shared.b16 {{{regs}}}, [%r4];
    mul.wide.u32 %rd2, %r1, {};
    add.s64 %rd3, %rd1, %rd2;
    {stores}
    ret;
}}",
        8 * n,
        4 * n
    );
    let mut rows = Vec::new();
    for r in 0..32 {
        for c in 0..8 {
            rows.extend_from_slice(&(elem(r / 8, r % 8, c) as u16).to_le_bytes());
        }
    }
    let out =
        run_kernel(&ptx, "k", [1, 1, 1], [threads, 1, 1], &[vec![0; threads as usize * 4 * n], rows], &[]).unwrap();
    words(&out[0])
}

#[test]
fn ldmatrix_x1_x2_x4_with_and_without_trans() {
    // Whole warps (native code runs the instruction over a dense copy of the warp's registers)
    // and a partial last warp whose rows all come from lanes inside the block (it runs on the
    // spill area, lane by lane).
    // Also with the rows landing in the register that held their addresses.
    for (n, threads) in [(1, 64), (2, 64), (4, 64), (1, 48), (2, 48)] {
        for (trans, into) in [(false, false), (true, false), (false, true), (true, true)] {
            let got = ldmatrix_into(n, trans, threads, into);
            for l in 0..threads as usize {
                for j in 0..n {
                    let want = fragment(j, l % 32, trans);
                    assert_eq!(got[l * n + j], want, "x{n} trans {trans} into the address {into} lane {l} matrix {j}");
                }
            }
        }
    }
}

#[test]
fn ldmatrix_misaligned_row_names_its_lane() {
    let ptx = format!(
        "{HEAD}
.visible .entry k()
{{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .shared .align 16 .b8 tile[512];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, tile;
    mad.lo.u32 %r3, %r1, 16, %r2;
    setp.eq.u32 %p1, %r1, 5;
    @%p1 add.u32 %r3, %r3, 2;
    ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%r4, %r5}}, [%r3];
    ret;
}}"
    );
    let e = run_kernel(&ptx, "k", [1, 1, 1], [32, 1, 1], &[], &[]).unwrap_err();
    assert!(e.contains("misaligned read") && e.contains("thread [5, 0, 0]"), "{e}");
}

#[test]
fn stmatrix_is_ldmatrix_inverse() {
    for (n, trans) in [(1, false), (2, true), (4, false), (4, true)] {
        let srcs = (0..n).map(|i| format!("%s{i}")).collect::<Vec<_>>().join(", ");
        let loads =
            (0..n).map(|i| format!("ld.global.u32 %s{i}, [%rd3+{}];", 4 * i)).collect::<Vec<_>>().join("\n    ");
        let tr = if trans { ".trans" } else { "" };
        let ptx = format!(
            "{HEAD}
.visible .entry k(.param .u64 out, .param .u64 frags)
{{
    .reg .b32 %r<16>;
    .reg .b32 %s<4>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 tile[1024];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd4, [frags];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, {};
    add.s64 %rd3, %rd4, %rd2;
    {loads}
    mov.u32 %r3, tile;
    mad.lo.u32 %r4, %r1, 32, %r3;
    stmatrix.sync.aligned.m8n8.x{n}{tr}.shared::cta.b16 [%r4], {{{srcs}}};
    bar.sync 0;
    ld.shared.v4.u32 {{%r5, %r6, %r7, %r8}}, [%r4];
    mul.wide.u32 %rd5, %r1, 16;
    add.s64 %rd5, %rd1, %rd5;
    st.global.v4.u32 [%rd5], {{%r5, %r6, %r7, %r8}};
    ret;
}}",
            4 * n
        );
        let mut frags = Vec::new();
        for l in 0..32 {
            for j in 0..n {
                frags.extend_from_slice(&fragment(j, l, trans).to_le_bytes());
            }
        }
        let out = run_kernel(&ptx, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 32 * 16], frags], &[]).unwrap();
        let got = words(&out[0]);
        for r in 0..8 * n {
            for c in 0..8 {
                let w = got[r * 4 + c / 2];
                let h = (w >> (16 * (c % 2))) & 0xFFFF;
                assert_eq!(
                    h,
                    elem(r / 8, r % 8, c) & 0xFFFF,
                    "x{n} trans {trans} matrix {} row {} col {c}",
                    r / 8,
                    r % 8
                );
            }
        }
    }
}

#[test]
fn movmatrix_transposes_across_the_warp() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out, .param .u64 frags)
{{
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd4, [frags];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd4, %rd2;
    ld.global.u32 %r2, [%rd3];
    movmatrix.sync.aligned.m8n8.trans.b16 %r3, %r2;
    add.s64 %rd5, %rd1, %rd2;
    st.global.u32 [%rd5], %r3;
    ret;
}}"
    );
    let frags: Vec<u8> = (0..64).flat_map(|l| fragment(l / 32, l % 32, false).to_le_bytes()).collect();
    let out = run_kernel(&ptx, "k", [1, 1, 1], [64, 1, 1], &[vec![0; 256], frags], &[]).unwrap();
    for (l, w) in words(&out[0]).into_iter().enumerate() {
        assert_eq!(w, fragment(l / 32, l % 32, true), "lane {l}");
    }
}
