//! Divergence and reconvergence, barriers with shared memory, calls, local memory.

use super::run_kernel;
use crate::ptx::*;

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

const HEAD: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

#[test]
fn nested_divergence_reconverges_before_a_barrier() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 1;
    setp.eq.u32 %p1, %r2, 0;
    @%p1 bra EVEN;
    and.b32 %r3, %r1, 2;
    setp.eq.u32 %p2, %r3, 0;
    @%p2 bra ODD1;
    mov.u32 %r4, 3;
    bra JOIN;
ODD1:
    mov.u32 %r4, 1;
    bra JOIN;
EVEN:
    setp.lt.u32 %p3, %r1, 10;
    @!%p3 bra BIG;
    mov.u32 %r4, 10;
    bra JOIN;
BIG:
    mov.u32 %r4, 20;
JOIN:
    bar.sync 0;
    add.u32 %r4, %r4, 100;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
}}"
    );
    let out = run_kernel(&ptx, "k", [1, 1, 1], [96, 1, 1], &[vec![0; 96 * 4]], &[]).unwrap();
    for (t, v) in words(&out[0]).into_iter().enumerate() {
        let want = if t & 1 == 1 {
            if t & 2 != 0 {
                3
            } else {
                1
            }
        } else if t < 10 {
            10
        } else {
            20
        };
        assert_eq!(v, want + 100, "thread {t}");
    }
}

#[test]
fn loops_with_divergent_exits() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r5, 0;
    mov.u32 %r6, 0;
LOOP:
    setp.ge.u32 %p1, %r6, %r1;
    @%p1 bra DONE;
    add.u32 %r5, %r5, %r6;
    setp.eq.u32 %p2, %r6, 20;
    @%p2 bra DONE;
    add.u32 %r6, %r6, 1;
    bra.uni LOOP;
DONE:
    bar.sync 0;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    ret;
}}"
    );
    let out = run_kernel(&ptx, "k", [2, 1, 1], [100, 1, 1], &[vec![0; 100 * 4]], &[]).unwrap();
    for (t, v) in words(&out[0]).into_iter().enumerate() {
        let t = t as u32;
        let want = if t > 20 { 210 } else { t * t.saturating_sub(1) / 2 };
        assert_eq!(v, want, "thread {t}");
    }
}

#[test]
fn early_return_then_barrier_and_shared_memory() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<6>;
    .shared .align 4 .b8 s[256];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 40;
    @%p1 bra END;
    shl.b32 %r2, %r1, 1;
    shl.b32 %r3, %r1, 2;
    mov.u32 %r4, s;
    add.s32 %r5, %r4, %r3;
    st.shared.u32 [%r5], %r2;
    bar.sync 0;
    sub.u32 %r6, 39, %r1;
    shl.b32 %r6, %r6, 2;
    add.s32 %r6, %r4, %r6;
    ld.shared.u32 %r7, [%r6];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r7;
END:
    ret;
}}"
    );
    let out = run_kernel(&ptx, "k", [3, 1, 1], [64, 1, 1], &[vec![0xAA; 64 * 4]], &[]).unwrap();
    for (t, v) in words(&out[0]).into_iter().enumerate() {
        let want = if t < 40 { 2 * (39 - t as u32) } else { 0xAAAA_AAAA };
        assert_eq!(v, want, "thread {t}");
    }
}

#[test]
fn a_barrier_inside_divergent_code_is_an_error() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 16;
    @!%p1 bra END;
    bar.sync 0;
END:
    bar.sync 0;
    ret;
}}"
    );
    let err = run_kernel(&ptx, "k", [1, 1, 1], [64, 1, 1], &[vec![0; 4]], &[]).unwrap_err();
    assert!(err.contains("barrier reached by only part"), "{err}");
    assert!(err.contains("line 12"), "{err}");
}

#[test]
fn calls_with_params_returns_and_divergence_inside() {
    let ptx = format!(
        "{HEAD}
.func (.param .b32 rv) pick(.param .b32 a, .param .b32 b)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    ld.param.b32 %r1, [a];
    ld.param.b32 %r2, [b];
    setp.lt.u32 %p1, %r1, 5;
    @%p1 bra SMALL;
    add.s32 %r3, %r1, %r2;
    st.param.b32 [rv], %r3;
    ret;
SMALL:
    mul.lo.s32 %r3, %r1, %r2;
    st.param.b32 [rv], %r3;
    ret;
}}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r4, 7;
    and.b32 %r5, %r1, 3;
    setp.eq.u32 %p1, %r5, 3;
    @%p1 bra SKIP;
    {{
    .param .b32 p0;
    .param .b32 p1;
    .param .b32 ret0;
    st.param.b32 [p0], %r1;
    st.param.b32 [p1], 1000;
    call.uni (ret0), pick, (p0, p1);
    ld.param.b32 %r4, [ret0];
    }}
SKIP:
    bar.sync 0;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
}}"
    );
    let out = run_kernel(&ptx, "k", [1, 1, 1], [40, 1, 1], &[vec![0; 40 * 4]], &[]).unwrap();
    for (t, v) in words(&out[0]).into_iter().enumerate() {
        let t = t as u32;
        let want = if t & 3 == 3 {
            7
        } else if t < 5 {
            t * 1000
        } else {
            t + 1000
        };
        assert_eq!(v, want, "thread {t}");
    }
}

#[test]
fn local_memory_is_per_thread() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .local .align 4 .b8 buf[64];
    .reg .pred %p<3>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u64 %rd4, buf;
    st.local.u32 [%rd4], %r1;
    st.local.u32 [buf+60], %r1;
    bar.sync 0;
    ld.local.u32 %r2, [%rd4];
    ld.local.u32 %r3, [buf+60];
    cvta.local.u64 %rd5, %rd4;
    isspacep.local %p1, %rd5;
    isspacep.shared %p2, %rd5;
    @!%p1 trap;
    @%p2 trap;
    ld.u32 %r4, [%rd5];
    add.s32 %r2, %r2, %r3;
    add.s32 %r2, %r2, %r4;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;
}}"
    );
    let out = run_kernel(&ptx, "k", [2, 1, 1], [33, 1, 1], &[vec![0; 33 * 4]], &[]).unwrap();
    for (t, v) in words(&out[0]).into_iter().enumerate() {
        assert_eq!(v, 3 * t as u32);
    }
}

#[test]
fn module_variables_with_initializers() {
    let ptx = format!(
        "{HEAD}
.const .align 4 .u32 table[4] = {{10, 20, 30, 40}};
.global .align 4 .u32 counter = 5;
.global .align 8 .u64 ptr_to_table = generic(table);
.visible .entry k(.param .u64 out)
{{
    .reg .b32 %r<10>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    mov.u64 %rd3, table;
    add.s64 %rd4, %rd3, %rd2;
    ld.const.u32 %r2, [%rd4];
    ld.global.u32 %r3, [counter];
    ld.global.u64 %rd5, [ptr_to_table];
    ld.u32 %r4, [%rd5+12];
    add.s32 %r2, %r2, %r3;
    add.s32 %r2, %r2, %r4;
    add.s64 %rd6, %rd1, %rd2;
    st.global.u32 [%rd6], %r2;
    ret;
}}"
    );
    let out = run_kernel(&ptx, "k", [1, 1, 1], [4, 1, 1], &[vec![0; 16]], &[]).unwrap();
    assert_eq!(words(&out[0]), vec![55, 65, 75, 85]);
}

#[test]
fn dynamic_shared_memory_and_multi_dimensional_ids() {
    let ptx = format!(
        "{HEAD}
.extern .shared .align 16 .b8 dyn[];
.visible .entry k(.param .u64 out)
{{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %tid.y;
    mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    mov.u32 %r5, %ctaid.y;
    mov.u32 %r6, %nctaid.x;
    mov.u32 %r7, %ctaid.x;
    mad.lo.s32 %r8, %r5, %r6, %r7;
    mov.u32 %r9, %ntid.y;
    mul.lo.s32 %r10, %r9, %r3;
    mad.lo.s32 %r11, %r8, %r10, %r4;
    shl.b32 %r12, %r4, 2;
    mov.u32 %r13, dyn;
    add.s32 %r13, %r13, %r12;
    st.shared.u32 [%r13], %r11;
    bar.sync 0;
    ld.shared.u32 %r14, [%r13];
    mov.u32 %r15, %dynamic_smem_size;
    add.s32 %r14, %r14, %r15;
    mul.wide.u32 %rd2, %r11, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r14;
    ret;
}}"
    );
    let m = Module::parse(&ptx).unwrap();
    let mut mem = Memory::new();
    let n = 3 * 2 * 8 * 4;
    let out = mem.add_region(n * 4, 256).unwrap();
    let dims = LaunchDims { grid: [3, 2, 1], block: [8, 4, 1], dynamic_shared: 128 };
    launch(&m, "k", &dims, &out.to_le_bytes(), &mem, &ExecOptions::default()).unwrap();
    let v = words(&mem.read_region(out).unwrap());
    for (i, x) in v.into_iter().enumerate() {
        assert_eq!(x, i as u32 + 128);
    }
    let small = LaunchDims { dynamic_shared: 64, ..dims };
    let err = launch(&m, "k", &small, &out.to_le_bytes(), &mem, &ExecOptions::default()).unwrap_err();
    assert!(err.to_string().contains("out-of-bounds write"), "{err}");
}

/// Native code stores a register at a barrier only when it may have changed since the thread's
/// segment began (the spill slot holds it otherwise). Registers kept unchanged across several
/// barriers, one written on a path that skips it in some iterations, and one written through
/// shared memory traffic must all come back right.
#[test]
fn registers_kept_across_barriers_in_a_loop() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .shared .align 4 .b32 sh[64];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, 0;
    mov.u32 %r3, 0;
    mov.u32 %r5, 7;
    mul.lo.u32 %r6, %r1, 3;
    mov.u32 %r7, sh;
    shl.b32 %r8, %r1, 2;
    add.u32 %r9, %r7, %r8;
LOOP:
    st.shared.u32 [%r9], %r3;
    bar.sync 0;
    setp.ne.u32 %p1, %r3, 2;
    @%p1 bra SKIP;
    add.u32 %r5, %r5, %r1;
SKIP:
    bar.sync 0;
    add.u32 %r2, %r2, %r5;
    add.u32 %r2, %r2, %r6;
    ld.shared.u32 %r10, [%r7];
    add.u32 %r2, %r2, %r10;
    bar.sync 0;
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p2, %r3, 4;
    @%p2 bra LOOP;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;
}}"
    );
    let m = Module::parse(&ptx).unwrap();
    assert!(m.jit_support("k").is_ok(), "the kernel must run as native code");
    let out = run_kernel(&ptx, "k", [2, 1, 1], [64, 1, 1], &[vec![0; 64 * 4]], &[]).unwrap();
    // r5: 7, 7, 7 + tid, 7 + tid; r6 = 3 tid four times; sh[0] = i in iteration i.
    let want: Vec<u32> = (0..64).map(|t| 28 + 2 * t + 12 * t + 6).collect();
    assert_eq!(words(&out[0]), want);
}
