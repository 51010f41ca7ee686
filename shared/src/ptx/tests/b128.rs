//! `.b128`: 128-bit registers (a pair of 64-bit registers, low half first) that `ld`, `st` and
//! `mov` move as a whole, in every state space, as sm_90 PTX uses them: 16-byte accesses aligned to
//! 16, and `mov.b128` to and from a pair of `.b64`. Every run compares native code with the
//! interpreter (`run_kernel`).

use super::run_kernel;

const HEAD: &str = ".version 8.3\n.target sm_90\n.address_size 64\n";

/// A kernel over `out` (16 bytes a thread) and `src` (the same), with `%q1..%q7` of `.b128`.
fn kernel(body: &str) -> String {
    format!(
        "{HEAD}
.visible .entry k(.param .u64 out, .param .u64 src)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<32>;
    .reg .b128 %q<8>;
    .shared .align 16 .b8 buf[1024];
    .local .align 16 .b8 loc[32];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [src];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 16;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    mov.u32 %r2, buf;
    cvt.u32.u64 %r3, %rd3;
    add.u32 %r4, %r2, %r3;
{body}
    ret;
}}"
    )
}

/// `src`'s bytes: thread `t`'s 16 bytes are distinct from every other thread's.
fn src(threads: usize) -> Vec<u8> {
    (0..16 * threads).map(|i| (i * 7 + 3) as u8).collect()
}

fn run(body: &str, threads: u32) -> Result<Vec<u8>, String> {
    let n = threads as usize;
    let out = run_kernel(&kernel(body), "k", [1, 1, 1], [threads, 1, 1], &[vec![0xEE; 16 * n], src(n)], &[])?;
    Ok(out.into_iter().next().unwrap())
}

#[test]
fn global_loads_and_stores_move_sixteen_bytes() {
    let out = run("    ld.global.b128 %q1, [%rd5];\n    st.global.b128 [%rd4], %q1;", 64).unwrap();
    assert_eq!(out, src(64));
}

#[test]
fn mov_packs_and_unpacks_pairs_of_b64_low_half_first() {
    // Swap the halves through a pair of `.b64`, then pack them again.
    let body = "    ld.global.b128 %q1, [%rd5];
    mov.b128 {%rd10, %rd11}, %q1;
    mov.b128 %q2, {%rd11, %rd10};
    mov.b128 %q3, %q2;
    st.global.b128 [%rd4], %q3;";
    let out = run(body, 32).unwrap();
    let want: Vec<u8> = src(32).chunks(16).flat_map(|c| [&c[8..], &c[..8]].concat()).collect();
    assert_eq!(out, want);
    // A constant half and a discarded one.
    let out = run(
        "    mov.b128 %q1, {%rd3, 7};\n    mov.b128 {_, %rd12}, %q1;\n    st.global.v2.b64 [%rd4], {%rd12, %rd3};",
        4,
    )
    .unwrap();
    let want: Vec<u8> = (0..4u64).flat_map(|t| [7u64.to_le_bytes(), (16 * t).to_le_bytes()].concat()).collect();
    assert_eq!(out, want);
}

#[test]
fn shared_and_local_accesses_cross_a_barrier() {
    // Each thread stores its row in shared memory, then reads its neighbour's after the barrier
    // (the register pair lives across it), through local memory.
    let body = "    ld.global.b128 %q1, [%rd5];
    st.shared.b128 [%r4], %q1;
    bar.sync 0;
    xor.b32 %r5, %r3, 16;
    add.u32 %r6, %r2, %r5;
    ld.shared.b128 %q2, [%r6];
    st.local.b128 [loc+16], %q2;
    ld.local.b128 %q4, [loc+16];
    st.global.b128 [%rd4], %q4;";
    let out = run(body, 32).unwrap();
    let s = src(32);
    let want: Vec<u8> = (0..32).flat_map(|t: usize| s[16 * (t ^ 1)..16 * (t ^ 1) + 16].to_vec()).collect();
    assert_eq!(out, want);
}

#[test]
fn an_access_aligned_to_eight_only_faults() {
    let err = run("    ld.global.b128 %q1, [%rd5+8];\n    st.global.b128 [%rd4], %q1;", 4).unwrap_err();
    assert!(err.contains("misaligned"), "{err}");
    let err = run("    ld.global.b128 %q1, [%rd5];\n    st.shared.b128 [%r4+8], %q1;", 4).unwrap_err();
    assert!(err.contains("misaligned"), "{err}");
}

#[test]
fn other_uses_of_a_128_bit_register_are_refused_with_their_reason() {
    for (body, says) in [
        ("    add.s64 %rd10, %q1, 1;", "128-bit register `%q1` used by an instruction other than"),
        ("    mov.b64 %q1, %rd1;", "128-bit register `%q1` used by an instruction other than"),
        ("    ld.global.b128 %rd10, [%rd5];", "needs a 128-bit register operand"),
        ("    mov.b128 %q1, %rd1;", "needs a 128-bit register operand"),
        ("    mov.b128 {%r1, %r2, %r3, %r5}, %q1;", "exactly two 64-bit values"),
        ("    ld.global.v2.b128 {%q1, %q2}, [%rd5];", "unsupported instruction"),
        ("    ld.global.b128 %q1, [%q2];", "128-bit register `%q2` used by an instruction other than"),
    ] {
        let err = run(body, 1).unwrap_err();
        assert!(err.contains(says), "{body}: {err}");
    }
}
