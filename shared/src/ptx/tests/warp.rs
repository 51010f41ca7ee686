//! Warp shuffles and votes against the CUDA definitions of `__shfl_*_sync` and `__ballot_sync`.

use super::run_kernel;

const HEAD: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Each thread shuffles `tid * 3 + 1` with the given instruction and stores value and predicate.
fn shuffle(inst: &str, threads: u32) -> Vec<(u32, u32)> {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mad.lo.s32 %r2, %r1, 3, 1;
    {inst}
    selp.u32 %r4, 1, 0, %p1;
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {{%r3, %r4}};
    ret;
}}"
    );
    let out = run_kernel(&ptx, "k", [1, 1, 1], [threads, 1, 1], &[vec![0; threads as usize * 8]], &[]).unwrap();
    let w = words(&out[0]);
    w.chunks(2).map(|c| (c[0], c[1])).collect()
}

fn val(l: usize) -> u32 {
    l as u32 * 3 + 1
}

#[test]
fn shfl_up_down_bfly_idx_full_width() {
    let n = 64;
    let up = shuffle("shfl.sync.up.b32 %r3|%p1, %r2, 1, 0, -1;", n);
    let down = shuffle("shfl.sync.down.b32 %r3|%p1, %r2, 3, 31, -1;", n);
    let bfly = shuffle("shfl.sync.bfly.b32 %r3|%p1, %r2, 5, 31, -1;", n);
    let idx = shuffle("shfl.sync.idx.b32 %r3|%p1, %r2, 7, 31, -1;", n);
    for l in 0..n as usize {
        let lane = l % 32;
        let base = l - lane;
        let (src, ok) = if lane >= 1 { (l - 1, true) } else { (l, false) };
        assert_eq!(up[l], (val(src), ok as u32), "up lane {l}");
        let (src, ok) = if lane + 3 < 32 { (l + 3, true) } else { (l, false) };
        assert_eq!(down[l], (val(src), ok as u32), "down lane {l}");
        assert_eq!(bfly[l], (val(base + (lane ^ 5)), 1), "bfly lane {l}");
        assert_eq!(idx[l], (val(base + 7), 1), "idx lane {l}");
    }
}

#[test]
fn shfl_with_segments_of_eight() {
    // CUDA's width 8: c = ((32 - 8) << 8) | clamp, clamp 31 for down/bfly/idx and 0 for up.
    let n = 32;
    let seg = (32 - 8) << 8;
    let up = shuffle(&format!("shfl.sync.up.b32 %r3|%p1, %r2, 2, {seg}, -1;"), n);
    let down = shuffle(&format!("shfl.sync.down.b32 %r3|%p1, %r2, 3, {}, -1;", seg | 31), n);
    let bfly = shuffle(&format!("shfl.sync.bfly.b32 %r3|%p1, %r2, 9, {}, -1;", seg | 31), n);
    let idx = shuffle(&format!("shfl.sync.idx.b32 %r3|%p1, %r2, 13, {}, -1;", seg | 31), n);
    for l in 0..n as usize {
        let (w, k) = (8, l % 8);
        let src = if k >= 2 { l - 2 } else { l };
        assert_eq!(up[l].0, val(src), "up lane {l}");
        let src = if k + 3 < w { l + 3 } else { l };
        assert_eq!(down[l].0, val(src), "down lane {l}");
        // xor may reach earlier segments but not later ones.
        let t = l ^ 9;
        let src = if t / w <= l / w { t } else { l };
        assert_eq!(bfly[l].0, val(src), "bfly lane {l}");
        assert_eq!(idx[l].0, val(l / w * w + 13 % w), "idx lane {l}");
    }
}

#[test]
fn votes_full_and_under_divergence() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<8>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    rem.u32 %r2, %r1, 3;
    setp.eq.u32 %p1, %r2, 0;
    vote.sync.ballot.b32 %r3, %p1, -1;
    vote.sync.any.pred %p2, %p1, -1;
    vote.sync.all.pred %p3, %p1, -1;
    setp.lt.u32 %p4, %r1, 1000;
    vote.sync.uni.pred %p5, %p4, -1;
    selp.u32 %r4, 1, 0, %p2;
    selp.u32 %r5, 2, 0, %p3;
    selp.u32 %r6, 4, 0, %p5;
    or.b32 %r4, %r4, %r5;
    or.b32 %r4, %r4, %r6;
    mov.u32 %r7, 0;
    and.b32 %r8, %r1, 1;
    setp.eq.u32 %p6, %r8, 1;
    @%p6 bra SKIP;
    vote.sync.ballot.b32 %r7, %p1, 0x55555555;
    activemask.b32 %r9;
    xor.b32 %r7, %r7, %r9;
SKIP:
    mul.wide.u32 %rd2, %r1, 12;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    st.global.u32 [%rd3+4], %r4;
    st.global.u32 [%rd3+8], %r7;
    ret;
}}"
    );
    let n = 64usize;
    let out = run_kernel(&ptx, "k", [1, 1, 1], [n as u32, 1, 1], &[vec![0; n * 12]], &[]).unwrap();
    let w = words(&out[0]);
    for l in 0..n {
        let warp = l / 32;
        let mut ballot = 0u32;
        let mut even_ballot = 0u32;
        for k in 0..32 {
            let t = warp * 32 + k;
            if t % 3 == 0 {
                ballot |= 1 << k;
                if t % 2 == 0 {
                    even_ballot |= 1 << k;
                }
            }
        }
        assert_eq!(w[l * 3], ballot, "ballot lane {l}");
        assert_eq!(w[l * 3 + 1], 1 | 4, "any, not all, uniform: lane {l}");
        let want = if l % 2 == 0 { even_ballot ^ 0x5555_5555 } else { 0 };
        assert_eq!(w[l * 3 + 2], want, "ballot of the active half xor activemask, lane {l}");
    }
}

#[test]
fn redux_reduces_over_the_active_lanes_of_each_warp() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    sub.s32 %r2, 20, %r1;
    mov.u32 %r3, 0;
    mov.u32 %r4, 0;
    setp.lt.u32 %p1, %r1, 40;
    @!%p1 bra SKIP;
    redux.sync.add.u32 %r3, %r1, -1;
    redux.sync.min.s32 %r4, %r2, -1;
SKIP:
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {{%r3, %r4}};
    ret;
}}"
    );
    let out = run_kernel(&ptx, "k", [1, 1, 1], [64, 1, 1], &[vec![0; 64 * 8]], &[]).unwrap();
    let w = words(&out[0]);
    for l in 0..64usize {
        let (sum, min) = match l {
            0..=31 => ((0..32).sum::<u32>(), (20 - 31i32) as u32),
            32..=39 => ((32..40).sum::<u32>(), (20 - 39i32) as u32),
            _ => (0, 0),
        };
        assert_eq!((w[2 * l], w[2 * l + 1]), (sum, min), "lane {l}");
    }
}

/// Whether native code takes kernel `k` (builds without a code generator take nothing).
fn native(ptx: &str) -> bool {
    let m = crate::ptx::Module::parse(ptx).unwrap();
    crate::ptx::exec::jit_support(&m, m.entry("k").unwrap()).is_ok()
}

#[test]
fn shuffles_read_exited_lanes_and_past_a_partial_warp() {
    // Every third thread exits before the shuffles; the others read exited lanes (their values
    // at exit), lanes past the block (their own) and a per-lane source index.
    let n = 45usize;
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mad.lo.s32 %r2, %r1, 3, 1;
    mov.u32 %r3, 1000;
    mul.lo.s32 %r5, %r1, 7;
    and.b32 %r5, %r5, 31;
    rem.u32 %r6, %r1, 3;
    setp.eq.u32 %p2, %r6, 0;
    @%p2 ret;
    shfl.sync.idx.b32 %r3|%p1, %r2, %r5, 31, -1;
    shfl.sync.down.b32 %r7|%p3, %r3, 5, 31, -1;
    add.s32 %r3, %r3, %r7;
    shfl.sync.bfly.b32 %r8, %r3, 16, 31, -1;
    add.s32 %r3, %r3, %r8;
    selp.u32 %r4, 1, 0, %p3;
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {{%r3, %r4}};
    ret;
}}"
    );
    if cfg!(all(feature = "jit", not(target_arch = "wasm32"))) {
        assert!(native(&ptx), "shuffles outside divergent code run as native code");
    }
    let out = run_kernel(&ptx, "k", [1, 1, 1], [n as u32, 1, 1], &[vec![0; n * 8]], &[]).unwrap();
    let w = words(&out[0]);
    let exited = |l: usize| l.is_multiple_of(3);
    let own = |l: usize, s: usize| if s < n { s } else { l };
    let idx: Vec<u32> =
        (0..n).map(|l| if exited(l) { 1000 } else { val(own(l, (l & !31) + ((l * 7) & 31))) }).collect();
    let down_ok = |l: usize| (l & 31) + 5 <= 31;
    let sum: Vec<u32> = (0..n)
        .map(|l| if exited(l) { 1000 } else { idx[l] + idx[if down_ok(l) { own(l, l + 5) } else { l }] })
        .collect();
    for l in 0..n {
        let expect =
            if exited(l) { (0, 0) } else { (sum[l] + sum[own(l, (l & !31) + ((l & 31) ^ 16))], down_ok(l) as u32) };
        assert_eq!((w[2 * l], w[2 * l + 1]), expect, "lane {l}");
    }
}

#[test]
fn a_shuffle_under_divergent_control_flow_stays_on_the_interpreter() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r3, %r1;
    setp.lt.u32 %p2, %r1, 16;
    @%p2 bra $L1;
    shfl.sync.bfly.b32 %r3, %r1, 1, 31, -1;
$L1:
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;
}}"
    );
    assert!(!native(&ptx));
    let out = run_kernel(&ptx, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 128]], &[]).unwrap();
    let w = words(&out[0]);
    assert_eq!(w[3], 3);
    assert_eq!(w[20], 21);
}

/// A loop whose trip count every thread computes alike (a kernel argument) keeps each warp
/// together, so shuffles inside it run as native code; a loop whose trip count depends on the
/// thread does not, and stays on the interpreter.
#[test]
fn shuffles_in_a_loop_every_thread_runs_alike_run_as_native_code() {
    let kernel = |bound: &str| {
        format!(
            "{HEAD}
.visible .entry k(.param .u64 out, .param .u32 n)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r9, [n];
    mov.u32 %r1, %tid.x;
    {bound}
    mov.u32 %r3, %r1;
    mov.u32 %r4, 0;
$LOOP:
    shfl.sync.bfly.b32 %r5, %r3, 1, 31, -1;
    add.s32 %r3, %r3, %r5;
    add.s32 %r4, %r4, 1;
    setp.lt.u32 %p1, %r4, %r8;
    @%p1 bra $LOOP;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;
}}"
        )
    };
    let uniform = kernel("mov.u32 %r8, %r9;");
    let varying = kernel("add.u32 %r8, %r9, %r1;");
    if cfg!(all(feature = "jit", not(target_arch = "wasm32"))) {
        assert!(native(&uniform), "a loop over a kernel argument keeps warps together");
    }
    assert!(!native(&varying), "a loop whose trip count depends on %tid.x does not");
    let out = run_kernel(&uniform, "k", [1, 1, 1], [64, 1, 1], &[vec![0; 256]], &3u32.to_le_bytes()).unwrap();
    let w = words(&out[0]);
    for l in 0..64u32 {
        // Each pass adds the partner's value: pairs (2i, 2i+1) hold 4i+1 after one pass and
        // double it on each of the two passes after.
        let pair = (l & !1) + (l | 1);
        assert_eq!(w[l as usize], pair * 4, "lane {l}");
    }
}

/// A warp matrix instruction after some threads of a warp exited reads their registers as they
/// left them, and lanes past the end of a partial last warp as zero, on every engine; the
/// threads that go on run it as native code.
#[test]
fn a_warp_matrix_instruction_reads_exited_lanes_as_they_left_them() {
    let n = 45usize;
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mad.lo.s32 %r2, %r1, 3, 1;
    rem.u32 %r6, %r1, 3;
    setp.eq.u32 %p2, %r6, 0;
    @%p2 ret;
    movmatrix.sync.aligned.m8n8.trans.b16 %r3, %r2;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;
}}"
    );
    if cfg!(all(feature = "jit", not(target_arch = "wasm32"))) {
        assert!(native(&ptx), "a warp matrix instruction outside divergent code runs as native code");
    }
    let out = run_kernel(&ptx, "k", [1, 1, 1], [n as u32, 1, 1], &[vec![0xFF; n * 4]], &[]).unwrap();
    let w = words(&out[0]);
    let src = |l: usize| if l < n { (l as u32) * 3 + 1 } else { 0 };
    for (l, &got) in w.iter().enumerate() {
        if l % 3 == 0 {
            assert_eq!(got, u32::MAX, "lane {l} exited before writing");
            continue;
        }
        // Element (row, col) of the warp's 8x8 matrix is half `col & 1` of lane 4*row + col/2;
        // lane l gets elements (c, r) and (c + 1, r) with r = l / 4 within the warp, c = 2 (l % 4).
        let base = l & !31;
        let k = l & 31;
        let elem = |row: usize, col: usize| (src(base + row * 4 + col / 2) >> (16 * (col & 1))) & 0xFFFF;
        let (r, c) = (k >> 2, 2 * (k & 3));
        assert_eq!(got, elem(c, r) | elem(c + 1, r) << 16, "lane {l}");
    }
}
