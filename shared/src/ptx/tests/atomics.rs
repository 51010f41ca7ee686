//! Atomics are real atomics across blocks running in parallel.

use crate::ptx::*;

const HEAD: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

#[test]
fn global_atomics_across_many_parallel_blocks_are_exact() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 c)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .f32 %f<4>;
    .reg .f64 %fd<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [c];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    atom.global.add.u32 %r5, [%rd1], 1;
    red.global.add.f32 [%rd1+4], 0f3F800000;
    atom.global.max.s32 %r6, [%rd1+8], %r4;
    atom.global.min.u32 %r6, [%rd1+12], %r4;
    atom.global.inc.u32 %r6, [%rd1+16], 6;
    mov.u64 %rd2, 1;
    atom.global.add.u64 %rd3, [%rd1+24], %rd2;
    atom.global.add.f64 %fd1, [%rd1+32], 0d3FF0000000000000;
    atom.global.or.b32 %r6, [%rd1+40], 1;
    atom.global.xor.b32 %r6, [%rd1+44], 1;
    // Increment through a compare-and-swap loop.
LOOP:
    ld.volatile.global.u32 %r7, [%rd1+48];
    add.s32 %r8, %r7, 1;
    atom.global.cas.b32 %r9, [%rd1+48], %r7, %r8;
    setp.ne.u32 %p1, %r9, %r7;
    @%p1 bra LOOP;
    atom.global.exch.b32 %r6, [%rd1+52], %r4;
    ret;
}}"
    );
    let m = Module::parse(&ptx).unwrap();
    let mut mem = Memory::new();
    let c = mem.add_region(64, 256).unwrap();
    let mut init = vec![0u8; 64];
    init[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    mem.write(c, &init).unwrap();
    let blocks = 200u32;
    let dims = LaunchDims { grid: [blocks, 1, 1], block: [256, 1, 1], dynamic_shared: 0 };
    let opts = ExecOptions { threads: 0, ..Default::default() };
    launch(&m, "k", &dims, &c.to_le_bytes(), &mem, &opts).unwrap();
    let v = mem.read_region(c).unwrap();
    let u32_at = |k: usize| u32::from_le_bytes(v[k..k + 4].try_into().unwrap());
    let n = blocks * 256;
    assert_eq!(u32_at(0), n);
    assert_eq!(f32::from_le_bytes(v[4..8].try_into().unwrap()), n as f32);
    assert_eq!(u32_at(8), n - 1);
    assert_eq!(u32_at(12), 0);
    assert_eq!(u32_at(16), n % 7, "inc wraps to 0 after reaching 6");
    assert_eq!(u64::from_le_bytes(v[24..32].try_into().unwrap()), n as u64);
    assert_eq!(f64::from_le_bytes(v[32..40].try_into().unwrap()), n as f64);
    assert_eq!(u32_at(40), 1);
    assert_eq!(u32_at(44), n % 2);
    assert_eq!(u32_at(48), n, "compare-and-swap loop");
    assert!(u32_at(52) < n);
}

#[test]
fn shared_atomics_and_dec() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .shared .align 4 .b8 s[8];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 st.shared.u32 [s], 0;
    @%p1 st.shared.u32 [s+4], 0;
    bar.sync 0;
    atom.shared.add.u32 %r2, [s], %r1;
    atom.shared.dec.u32 %r3, [s+4], 4;
    bar.sync 0;
    ld.shared.u32 %r4, [s];
    ld.shared.u32 %r5, [s+4];
    @%p1 st.global.u32 [%rd1], %r4;
    @%p1 st.global.u32 [%rd1+4], %r5;
    ret;
}}"
    );
    let out = super::run_kernel(&ptx, "k", [1, 1, 1], [101, 1, 1], &[vec![0; 8]], &[]).unwrap();
    let v = &out[0];
    assert_eq!(u32::from_le_bytes(v[0..4].try_into().unwrap()), 100 * 101 / 2);
    // dec from 0 with limit 4 cycles 0 -> 4 -> 3 -> 2 -> 1 -> 0 with period 5; 101 steps end at 4.
    assert_eq!(u32::from_le_bytes(v[4..8].try_into().unwrap()), 4);
}

/// sm_90's vector float atomics (what Triton's split-K emits): each element is its own atomic add,
/// 4 bytes apart; `atom` returns the old values, `red` returns nothing. Every engine agrees.
#[test]
fn vector_float_atomics_add_each_element_on_every_engine() {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 c)
{{
    .reg .f32 %f<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [c];
    mov.f32 %f1, 0f3F800000;
    mov.f32 %f2, 0f40000000;
    mov.f32 %f3, 0f40400000;
    mov.f32 %f4, 0f40800000;
    atom.global.gpu.acq_rel.add.v4.f32 {{%f5, %f6, %f7, %f8}}, [%rd1], {{%f1, %f2, %f3, %f4}};
    red.global.add.v2.f32 [%rd1+16], {{%f4, %f1}};
    ret;
}}"
    );
    let m = Module::parse(&ptx).unwrap();
    let blocks = 64u32;
    for engine in [Engine::Interpreter, Engine::Jit, Engine::JitScalar] {
        let mut mem = Memory::new();
        let c = mem.add_region(32, 256).unwrap();
        mem.write(c, &[0; 32]).unwrap();
        let dims = LaunchDims { grid: [blocks, 1, 1], block: [32, 1, 1], dynamic_shared: 0 };
        let opts = ExecOptions { threads: 0, engine, ..Default::default() };
        launch(&m, "k", &dims, &c.to_le_bytes(), &mem, &opts).unwrap();
        let v = mem.read_region(c).unwrap();
        let f = |k: usize| f32::from_le_bytes(v[4 * k..4 * k + 4].try_into().unwrap());
        let n = (blocks * 32) as f32;
        assert_eq!([f(0), f(1), f(2), f(3), f(4), f(5)], [n, 2.0 * n, 3.0 * n, 4.0 * n, 4.0 * n, n], "{engine:?}");
    }
    let e = Module::parse(&ptx.replace("add.v2.f32", "add.v2.f16x2")).unwrap_err().to_string();
    assert!(e.contains("red.global.add.v2.f16x2"), "{e}");
}
