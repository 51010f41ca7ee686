//! Where the hardware leaves a result open, recap defines one and every engine gives it: registers
//! read before any write read as zero, a vector access must be aligned to its whole size, and the
//! instruction budget stops a launch of loop-free blocks as it stops a loop.

use super::run_kernel;
use crate::ptx::*;

const HEAD: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Each thread stores, at its global index: a register never written before (then writes it, so
/// an engine that carries registers from one thread or block to the next would store that value
/// in the next thread), a register written only by even threads, a float read before any write,
/// and a register first read after a barrier.
fn undefined_reads() -> String {
    format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd2, %r4, 16;
    add.s64 %rd3, %rd1, %rd2;
    add.u32 %r6, %r5, %r1;
    st.global.u32 [%rd3], %r6;
    mov.u32 %r5, 77;
    and.b32 %r7, %r1, 1;
    setp.eq.u32 %p1, %r7, 0;
    @%p1 mov.u32 %r8, 9;
    st.global.u32 [%rd3+4], %r8;
    mov.u32 %r8, 55;
    add.f32 %f2, %f1, 0f3F800000;
    st.global.f32 [%rd3+8], %f2;
    mov.f32 %f1, 0f40000000;
    bar.sync 0;
    add.u32 %r10, %r9, 3;
    st.global.u32 [%rd3+12], %r10;
    mov.u32 %r9, 1000;
    ret;
}}"
    )
}

#[test]
fn registers_read_before_any_write_read_as_zero_on_every_engine() {
    let (blocks, threads) = (3u32, 32u32);
    let n = (blocks * threads) as usize;
    let out = run_kernel(&undefined_reads(), "k", [blocks, 1, 1], [threads, 1, 1], &[vec![0xAB; n * 16]], &[]).unwrap();
    let w = words(&out[0]);
    for i in 0..n {
        let tid = (i as u32) % threads;
        let row = &w[i * 4..i * 4 + 4];
        assert_eq!(row[0], tid, "thread {i}: unwritten register plus %tid.x");
        assert_eq!(
            row[1],
            if tid.is_multiple_of(2) { 9 } else { 0 },
            "thread {i}: register written by even threads only"
        );
        assert_eq!(f32::from_bits(row[2]), 1.0, "thread {i}: unwritten float plus one");
        assert_eq!(row[3], 3, "thread {i}: unwritten register read after a barrier");
    }
}

/// Loads (or stores) a vector at `out + offset`.
fn vector_access(op: &str) -> String {
    format!(
        "{HEAD}
.visible .entry k(.param .u64 out, .param .u32 offset)
{{
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 tile[64];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [offset];
    cvt.u64.u32 %rd2, %r1;
    add.s64 %rd3, %rd1, %rd2;
    mov.u64 %rd4, tile;
    add.s64 %rd5, %rd4, %rd2;
    mov.u32 %r2, 7;
    mov.u32 %r3, 8;
    mov.u32 %r4, 9;
    mov.u32 %r5, 10;
    {op}
    ret;
}}"
    )
}

#[test]
fn vector_accesses_must_be_aligned_to_their_whole_size_on_every_engine() {
    let cases = [
        ("ld.global.v4.u32 {%r2, %r3, %r4, %r5}, [%rd3];", "misaligned read", 16),
        ("st.global.v4.u32 [%rd3], {%r2, %r3, %r4, %r5};", "misaligned write", 16),
        ("st.global.v2.u32 [%rd3], {%r2, %r3};", "misaligned write", 8),
        ("ld.shared.v4.u32 {%r2, %r3, %r4, %r5}, [%rd5];", "misaligned read", 16),
    ];
    for (op, fault, whole) in cases {
        let ptx = vector_access(op);
        // Aligned to the element but not to the vector: the GPU faults, so every engine must.
        let err = run_kernel(&ptx, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 64]], &4u32.to_le_bytes()).unwrap_err();
        assert!(err.contains(fault), "{op}: {err}");
        assert!(err.contains(&format!("{whole} bytes")) || err.contains(&format!("size {whole}")), "{op}: {err}");
        assert!(err.contains("thread [0, 0, 0]"), "{op}: {err}");
        // Aligned to the whole vector: fine.
        run_kernel(&ptx, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 64]], &(whole as u32).to_le_bytes())
            .unwrap_or_else(|e| panic!("{op} at offset {whole}: {e}"));
    }
}

#[test]
fn the_budget_stops_a_launch_of_loop_free_blocks_on_every_engine() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .b32 %r<4>;
    mov.u32 %r1, %tid.x;
    add.u32 %r2, %r1, 1;
    ret;
}}"
    );
    let m = Module::parse(&ptx).unwrap();
    let mem = Memory::new();
    // Ten million blocks, and the largest grid a launch may name: without a per-block check,
    // native code would run the first for seconds and the second for days.
    for grid in [10_000_000u32, u32::MAX >> 1] {
        let dims = LaunchDims { grid: [grid, 1, 1], block: [32, 1, 1], dynamic_shared: 0 };
        for engine in [Engine::Jit, Engine::JitScalar, Engine::Interpreter] {
            let opts = ExecOptions { instruction_budget: Some(1000), engine, ..Default::default() };
            let err = launch(&m, "k", &dims, &0u64.to_le_bytes(), &mem, &opts).unwrap_err();
            assert!(matches!(err, ExecError::Budget { budget: 1000, .. }), "{engine:?}, grid {grid}: {err}");
        }
    }
}

/// Thread 5 faults first in program order, thread 2 at a later instruction (after a barrier when
/// `barrier` is set).
fn two_faults(first: &str, barrier: bool) -> String {
    let bar = if barrier { "bar.sync 0;" } else { "" };
    format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 5;
    {first}
    {bar}
    add.u32 %r3, %r1, 1;
    setp.eq.u32 %p2, %r1, 2;
    @%p2 st.global.u32 [%rd1+8192], %r3;
    st.global.u32 [%rd1], %r3;
    ret;
}}"
    )
}

#[test]
fn where_several_threads_fault_every_engine_names_the_lowest_thread_of_the_segment() {
    for first in ["@%p1 ld.global.u32 %r2, [%rd1+4096];", "@%p1 trap;"] {
        // No barrier between them: thread 2 is the lowest thread that faults.
        let err = run_kernel(&two_faults(first, false), "k", [1, 1, 1], [32, 1, 1], &[vec![0; 64]], &[]).unwrap_err();
        assert!(err.contains("thread [2, 0, 0]") && err.contains("out-of-bounds write"), "{first}: {err}");
        // Thread 5's fault comes before a barrier that thread 2's comes after: the first segment's
        // fault counts.
        let err = run_kernel(&two_faults(first, true), "k", [1, 1, 1], [32, 1, 1], &[vec![0; 64]], &[]).unwrap_err();
        assert!(err.contains("thread [5, 0, 0]"), "{first}: {err}");
    }
}
