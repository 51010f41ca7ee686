//! Native code for groups of threads in vector lanes: every test runs through `run_kernel`, which
//! compares the interpreter, native code in lanes and one-thread native code byte for byte (or
//! error for error), and checks first that the kernel really has code for groups.

use super::run_kernel;
use crate::ptx::Module;

fn words(v: &[u8]) -> Vec<u32> {
    v.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn floats(v: &[u8]) -> Vec<f32> {
    v.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn bytes_of<T: Copy>(v: &[T], f: impl Fn(T) -> [u8; 4]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

fn assert_lanes(ptx: &str) {
    let m = Module::parse(ptx).unwrap();
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    assert_eq!(m.lanes_support("k"), Ok(()), "the kernel must have code for groups");
    #[cfg(not(all(feature = "jit", not(target_arch = "wasm32"))))]
    assert!(m.lanes_support("k").is_err());
}

/// `out[i] = a * x[i] + y[i]` with `i = ctaid.x * ntid.x + tid.x`, and an `if (i < n)` guard
/// that skips straight-line code: a region whose groups can split.
const AXPY: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u64 x, .param .u64 y, .param .f32 a, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .f32 %f<6>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [x];
    ld.param.u64 %rd3, [y];
    ld.param.f32 %f1, [a];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    mul.wide.u32 %rd4, %r5, 4;
    add.s64 %rd5, %rd2, %rd4;
    add.s64 %rd6, %rd3, %rd4;
    add.s64 %rd7, %rd1, %rd4;
    ld.global.f32 %f2, [%rd5];
    ld.global.f32 %f3, [%rd6];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd7], %f4;
DONE:
    ret;
}";

fn axpy_params(a: f32, n: u32) -> Vec<u8> {
    let mut p = a.to_le_bytes().to_vec();
    p.extend_from_slice(&n.to_le_bytes());
    p
}

#[test]
fn a_group_split_by_a_bounds_guard_runs_its_live_lanes_one_by_one() {
    assert_lanes(AXPY);
    let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.5 - 7.0).collect();
    let y: Vec<f32> = (0..64).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let bufs = [vec![0xAB; 256], bytes_of(&x, f32::to_le_bytes), bytes_of(&y, f32::to_le_bytes)];
    // 37 live threads: the group of threads 32..47 is split at 37, and the last group takes the
    // branch as a whole.
    let out = run_kernel(AXPY, "k", [2, 1, 1], [32, 1, 1], &bufs, &axpy_params(1.5, 37)).unwrap();
    let got = floats(&out[0]);
    for i in 0..64 {
        if i < 37 {
            assert_eq!(got[i].to_bits(), 1.5f32.mul_add(x[i], y[i]).to_bits(), "element {i}");
        } else {
            assert_eq!(out[0][4 * i..4 * i + 4], [0xAB; 4], "element {i} is past n");
        }
    }
}

#[test]
fn a_vector_store_that_leaves_its_region_faults_at_the_first_lane_outside() {
    assert_lanes(AXPY);
    let bufs = [vec![0; 4 * 21], vec![0; 256], vec![0; 256]];
    // Threads 16..31 form one group; thread 21 is the first past the 21-float output.
    let err = run_kernel(AXPY, "k", [1, 1, 1], [64, 1, 1], &bufs, &axpy_params(2.0, 64)).unwrap_err();
    assert!(err.contains("out-of-bounds write"), "{err}");
    assert!(err.contains("thread [21, 0, 0]"), "{err}");
}

#[test]
fn a_block_whose_rows_do_not_split_into_groups_runs_one_thread_at_a_time() {
    let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let bufs = [vec![0; 48], bytes_of(&x, f32::to_le_bytes), bytes_of(&x, f32::to_le_bytes)];
    let out = run_kernel(AXPY, "k", [1, 1, 1], [12, 1, 1], &bufs, &axpy_params(3.0, 12)).unwrap();
    assert_eq!(floats(&out[0]), x.iter().map(|v| 4.0 * v).collect::<Vec<f32>>());
}

/// Reverses each block's 32 words through shared memory: vector stores and loads at
/// consecutive addresses, a barrier between them (registers in vectors and 64-bit registers per
/// lane are spilled and restored), and a read at a stride that is not consecutive.
const REVERSE: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u64 inp, .param .u32 stride)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .shared .align 4 .b32 sh[64];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [inp];
    ld.param.u32 %r9, [stride];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r5, [%rd4];
    mov.u32 %r6, sh;
    shl.b32 %r7, %r1, 2;
    add.u32 %r8, %r6, %r7;
    st.shared.u32 [%r8], %r5;
    bar.sync 0;
    sub.u32 %r10, %r3, 1;
    sub.u32 %r11, %r10, %r1;
    shl.b32 %r12, %r11, 2;
    add.u32 %r13, %r6, %r12;
    ld.shared.u32 %r14, [%r13];
    mul.lo.u32 %r15, %r1, %r9;
    add.u32 %r15, %r6, %r15;
    ld.shared.u32 %r15, [%r15];
    xor.b32 %r14, %r14, %r15;
    add.s64 %rd5, %rd1, %rd3;
    st.global.u32 [%rd5], %r14;
    ret;
}";

#[test]
fn values_cross_a_barrier_in_vectors_and_strided_reads_go_lane_by_lane() {
    assert_lanes(REVERSE);
    let inp: Vec<u32> = (0..64u32).map(|i| i.wrapping_mul(2654435761)).collect();
    let bufs = [vec![0; 256], bytes_of(&inp, u32::to_le_bytes)];
    // A stride of 8 bytes: lane reads two words apart, never consecutive (and in bounds).
    let out = run_kernel(REVERSE, "k", [2, 1, 1], [32, 1, 1], &bufs, &8u32.to_le_bytes()).unwrap();
    let got = words(&out[0]);
    for b in 0..2 {
        for t in 0..32 {
            let reversed = inp[b * 32 + 31 - t];
            // Words 32..63 of the shared array are never written: they read as zero.
            let strided = if 2 * t < 32 { inp[b * 32 + 2 * t] } else { 0 };
            assert_eq!(got[b * 32 + t], reversed ^ strided, "block {b} thread {t}");
        }
    }
    // A stride of 2 bytes: lane 1 reads a misaligned word, the first fault of the block. One block:
    // where blocks running in parallel both fault, the first to stop wins (docs/PTX.md), so which
    // block an engine names could differ from run to run.
    let err = run_kernel(REVERSE, "k", [1, 1, 1], [32, 1, 1], &bufs, &2u32.to_le_bytes()).unwrap_err();
    assert!(err.contains("thread [1, 0, 0]"), "{err}");
}

/// `out + 4 * zext(tid.x + k) + adj`: consecutive lanes, unless `tid.x + k` wraps past 2^32
/// inside a group, where the lanes after the wrap land 16 GiB away.
const WRAP: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 k, .param .u64 adj)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r3, [k];
    ld.param.u64 %rd5, [adj];
    mov.u32 %r1, %tid.x;
    add.u32 %r2, %r1, %r3;
    mul.wide.u32 %rd2, %r2, 4;
    add.s64 %rd3, %rd1, %rd2;
    add.s64 %rd4, %rd3, %rd5;
    st.global.u32 [%rd4], %r1;
    ret;
}";

fn wrap_params(k: u32, adj: i64) -> Vec<u8> {
    let mut p = k.to_le_bytes().to_vec();
    p.extend_from_slice(&[0; 4]);
    p.extend_from_slice(&adj.to_le_bytes());
    p
}

#[test]
fn an_index_that_wraps_inside_a_group_is_not_taken_for_consecutive() {
    assert_lanes(WRAP);
    let out = run_kernel(WRAP, "k", [1, 1, 1], [16, 1, 1], &[vec![0; 64]], &wrap_params(0, 0)).unwrap();
    assert_eq!(words(&out[0]), (0..16).collect::<Vec<u32>>());
    // Threads 0..3 store to out[0..3]; thread 4's index wraps to 0, 16 GiB below `out`: the
    // index steps by one from lane to lane, the addresses do not.
    let k = u32::MAX - 3;
    let err = run_kernel(WRAP, "k", [1, 1, 1], [16, 1, 1], &[vec![0; 64]], &wrap_params(k, -4 * k as i64)).unwrap_err();
    assert!(err.contains("thread [4, 0, 0]"), "{err}");
}

/// Straight-line code after a barrier with three shared loads through bases computed before it:
/// `sh[kk]` and `sh[kk + 1]` (one address for the group) and `sh[tid.x + jj]` (consecutive
/// lanes). One check at the start of the stretch covers all three; where it fails, the usual
/// checked code runs and finds the first access out of bounds.
const STRETCH: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 kk, .param .u32 jj)
{
    .reg .b32 %r<20>;
    .reg .b64 %rd<4>;
    .shared .align 4 .b32 sh[64];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r9, [kk];
    ld.param.u32 %r15, [jj];
    mov.u32 %r1, %tid.x;
    mov.u32 %r6, sh;
    shl.b32 %r7, %r1, 2;
    add.u32 %r8, %r6, %r7;
    shl.b32 %r10, %r9, 2;
    add.u32 %r11, %r6, %r10;
    shl.b32 %r16, %r15, 2;
    add.u32 %r17, %r8, %r16;
    mul.lo.u32 %r2, %r1, 2654435761;
    st.shared.u32 [%r8], %r2;
    add.u32 %r3, %r2, 12345;
    st.shared.u32 [%r8+128], %r3;
    bar.sync 0;
    ld.shared.u32 %r12, [%r11];
    ld.shared.u32 %r13, [%r11+4];
    ld.shared.u32 %r14, [%r17];
    mad.lo.u32 %r18, %r13, 3, %r12;
    mad.lo.u32 %r18, %r14, 7, %r18;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r18;
    ret;
}";

fn stretch_params(kk: u32, jj: u32) -> Vec<u8> {
    [kk.to_le_bytes(), jj.to_le_bytes()].concat()
}

#[test]
fn one_check_covers_a_stretch_of_shared_loads_up_to_the_last_word() {
    assert_lanes(STRETCH);
    let sh: Vec<u32> = (0..32u32)
        .map(|t| t.wrapping_mul(2654435761))
        .chain((0..32u32).map(|t| t.wrapping_mul(2654435761).wrapping_add(12345)))
        .collect();
    for (kk, jj) in [(5, 0), (62, 32), (0, 17)] {
        let out = run_kernel(STRETCH, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 128]], &stretch_params(kk, jj)).unwrap();
        let want: Vec<u32> = (0..32)
            .map(|t| {
                let (a, b, c) = (sh[kk as usize], sh[kk as usize + 1], sh[t + jj as usize]);
                a.wrapping_add(b.wrapping_mul(3)).wrapping_add(c.wrapping_mul(7))
            })
            .collect();
        assert_eq!(words(&out[0]), want, "kk {kk} jj {jj}");
    }
}

#[test]
fn a_stretch_whose_check_fails_faults_where_the_checked_code_does() {
    assert_lanes(STRETCH);
    // `sh[kk + 1]` one word past the end: every thread faults there, thread 0 first.
    let err = run_kernel(STRETCH, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 128]], &stretch_params(63, 0)).unwrap_err();
    assert!(err.contains("thread [0, 0, 0]"), "{err}");
    // A group address below the shared window (the index wraps to -1).
    let err =
        run_kernel(STRETCH, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 128]], &stretch_params(u32::MAX, 0)).unwrap_err();
    assert!(err.contains("thread [0, 0, 0]"), "{err}");
    // Only the last lane of the last group reads past the end.
    let err = run_kernel(STRETCH, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 128]], &stretch_params(0, 33)).unwrap_err();
    assert!(err.contains("thread [31, 0, 0]"), "{err}");
}

/// [`WRAP`] inside an `if (tid.x < n)`: the addresses are computed in code that a varying
/// branch jumps over, where the steps of registers written there hold only while the whole
/// group runs it.
const WRAP_IN_REGION: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 k, .param .u64 adj, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r3, [k];
    ld.param.u64 %rd5, [adj];
    ld.param.u32 %r4, [n];
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, %r4;
    @%p1 bra DONE;
    add.u32 %r2, %r1, %r3;
    mul.wide.u32 %rd2, %r2, 4;
    add.s64 %rd3, %rd1, %rd2;
    add.s64 %rd4, %rd3, %rd5;
    st.global.u32 [%rd4], %r1;
DONE:
    ret;
}";

#[test]
fn steps_written_where_the_whole_group_runs_a_region_still_see_a_wrap() {
    assert_lanes(WRAP_IN_REGION);
    let params = |k: u32, adj: i64, n: u32| [wrap_params(k, adj), n.to_le_bytes().to_vec()].concat();
    let out = run_kernel(WRAP_IN_REGION, "k", [1, 1, 1], [16, 1, 1], &[vec![0; 64]], &params(0, 0, 16)).unwrap();
    assert_eq!(words(&out[0]), (0..16).collect::<Vec<u32>>());
    let out = run_kernel(WRAP_IN_REGION, "k", [1, 1, 1], [16, 1, 1], &[vec![0; 64]], &params(0, 0, 11)).unwrap();
    assert_eq!(words(&out[0]), (0..16).map(|t| if t < 11 { t } else { 0 }).collect::<Vec<u32>>());
    let k = u32::MAX - 3;
    let err = run_kernel(WRAP_IN_REGION, "k", [1, 1, 1], [16, 1, 1], &[vec![0; 64]], &params(k, -4 * k as i64, 16))
        .unwrap_err();
    assert!(err.contains("thread [4, 0, 0]"), "{err}");
}

/// A loop with two barriers per pass, and values computed once before it (written to the spill
/// area where they are computed, never again at a barrier) next to ones the loop changes; the
/// sum starts before the loop, so its first pass must store it at the first barrier.
const LOOP_AROUND_BARRIERS: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    .shared .align 4 .b32 sh[64];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r9, [n];
    mov.u32 %r1, %tid.x;
    mul.lo.u32 %r2, %r1, 7;
    add.u32 %r3, %r2, 5;
    mov.u32 %r6, sh;
    shl.b32 %r7, %r1, 2;
    add.u32 %r8, %r6, %r7;
    add.u32 %r4, %r2, 1000;
    mov.u32 %r5, 0;
LOOP:
    add.u32 %r3, %r3, %r5;
    st.shared.u32 [%r8], %r3;
    bar.sync 0;
    xor.b32 %r10, %r1, 1;
    shl.b32 %r10, %r10, 2;
    add.u32 %r10, %r6, %r10;
    ld.shared.u32 %r11, [%r10];
    add.u32 %r4, %r4, %r11;
    add.u32 %r4, %r4, %r2;
    bar.sync 0;
    add.u32 %r5, %r5, 1;
    setp.lt.u32 %p1, %r5, %r9;
    @%p1 bra LOOP;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
}";

#[test]
fn values_computed_once_before_a_loop_of_barriers_survive_every_pass() {
    assert_lanes(LOOP_AROUND_BARRIERS);
    for (threads, n) in [(32u32, 5u32), (12, 3), (64, 1)] {
        let out = run_kernel(
            LOOP_AROUND_BARRIERS,
            "k",
            [5, 1, 1],
            [threads, 1, 1],
            &[vec![0; 4 * threads as usize]],
            &n.to_le_bytes(),
        )
        .unwrap();
        let want: Vec<u32> = (0..threads)
            .map(|t| {
                let (mut acc, mut mine, mut other) = (7 * t + 1000, 7 * t + 5, 7 * (t ^ 1) + 5);
                for i in 0..n {
                    mine += i;
                    other += i;
                    acc = acc.wrapping_add(other).wrapping_add(7 * t);
                }
                let _ = mine;
                acc
            })
            .collect();
        assert_eq!(words(&out[0]), want, "{threads} threads, {n} passes");
    }
}

/// A conditional region that reads a register written before it and writes registers nobody
/// reads after it: where the group splits, the lanes that run it still see their older value.
const UPDATE_IN_REGION: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r4, [n];
    mov.u32 %r1, %tid.x;
    mul.lo.u32 %r5, %r1, 3;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    setp.ge.u32 %p1, %r1, %r4;
    @%p1 bra DONE;
    add.u32 %r5, %r5, 100;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd1, %rd4;
    st.global.u32 [%rd5], %r5;
DONE:
    ret;
}";

#[test]
fn lanes_that_run_a_split_region_read_the_values_they_had_before_it() {
    assert_lanes(UPDATE_IN_REGION);
    for n in [0u32, 5, 8, 13, 16] {
        let out = run_kernel(UPDATE_IN_REGION, "k", [1, 1, 1], [16, 1, 1], &[vec![0; 64]], &n.to_le_bytes()).unwrap();
        let want: Vec<u32> = (0..16).map(|t| if t < n { 3 * t + 100 } else { 3 * t }).collect();
        assert_eq!(words(&out[0]), want, "n = {n}");
    }
}
