//! `cp.async`: copies done when they issue, zero fill past `src-size`, `ignore-src`, cache hints,
//! and the group instructions as the no-ops they then are.

use super::run_kernel;

const HEAD: &str = ".version 8.0\n.target sm_80\n.address_size 64\n";

/// Each of 32 threads copies `size` bytes at offset `tid * size` from `src` into shared memory
/// with `copy` (which sees the shared address in `%r4`, the global one in `%rd5`, the thread
/// index in `%r1` and may set up more before), then every thread stores its piece to `out`.
fn copy(size: u32, copy: &str) -> Result<Vec<u8>, String> {
    let ptx = format!(
        "{HEAD}
.visible .entry k(.param .u64 out, .param .u64 src)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<16>;
    .shared .align 16 .b8 tile[512];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [src];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, tile;
    mad.lo.u32 %r4, %r1, {size}, %r2;
    mul.wide.u32 %rd3, %r1, {size};
    add.s64 %rd5, %rd2, %rd3;
    {copy}
    cp.async.commit_group;
    cp.async.wait_group 0;
    cp.async.wait_all;
    bar.sync 0;
    mov.u32 %r5, 0;
LOOP:
    add.u32 %r6, %r4, %r5;
    ld.shared.u8 %r7, [%r6];
    cvt.u64.u32 %rd6, %r5;
    add.s64 %rd7, %rd1, %rd3;
    add.s64 %rd7, %rd7, %rd6;
    st.global.u8 [%rd7], %r7;
    add.u32 %r5, %r5, 1;
    setp.lt.u32 %p3, %r5, {size};
    @%p3 bra LOOP;
    ret;
}}"
    );
    let src: Vec<u8> = (0..32 * size).map(|i| (i % 251 + 1) as u8).collect();
    let out = run_kernel(&ptx, "k", [1, 1, 1], [32, 1, 1], &[vec![0xEE; 32 * size as usize], src.clone()], &[])?;
    Ok(out.into_iter().next().unwrap())
}

fn src_byte(i: usize) -> u8 {
    (i % 251 + 1) as u8
}

#[test]
fn cp_async_16_with_src_size_zero_fills() {
    for op in ["ca", "cg"] {
        let out = copy(16, &format!("rem.u32 %r8, %r1, 17;\n    cp.async.{op}.shared.global [%r4], [%rd5], 16, %r8;"))
            .unwrap();
        for t in 0..32 {
            let keep = t % 17;
            for b in 0..16 {
                let want = if b < keep { src_byte(t * 16 + b) } else { 0 };
                assert_eq!(out[t * 16 + b], want, "{op} thread {t} byte {b}");
            }
        }
    }
}

#[test]
fn cp_async_4_8_16_whole_with_hints_and_scoped_spaces() {
    for (size, inst) in [
        (4, "cp.async.ca.shared.global [%r4], [%rd5], 4;"),
        (8, "cp.async.ca.shared::cta.global.L2::128B [%r4], [%rd5], 8;"),
        (
            16,
            "createpolicy.fractional.L2::evict_first.b64 %rd9, 1.0;\n    cp.async.cg.shared.global.L2::cache_hint [%r4], [%rd5], 16, %rd9;",
        ),
        (
            16,
            "createpolicy.fractional.L2::evict_last.b64 %rd9, 1.0;\n    mov.u32 %r8, 16;\n    cp.async.cg.shared.global.L2::cache_hint.L2::256B [%r4], [%rd5], 16, %r8, %rd9;",
        ),
    ] {
        let out = copy(size, inst).unwrap();
        for (i, b) in out.iter().enumerate() {
            assert_eq!(*b, src_byte(i), "{inst}: byte {i}");
        }
    }
}

#[test]
fn cp_async_ignore_src_and_unread_sources() {
    // Odd threads ignore the source: zeros.
    let out = copy(
        16,
        "and.b32 %r8, %r1, 1;\n    setp.eq.u32 %p1, %r8, 1;\n    cp.async.ca.shared.global [%r4], [%rd5], 16, %p1;",
    )
    .unwrap();
    for (i, b) in out.iter().enumerate() {
        let want = if (i / 16) % 2 == 1 { 0 } else { src_byte(i) };
        assert_eq!(*b, want, "byte {i}");
    }
    // With a src-size of 0 the source address is never read, valid or not, whatever the size.
    for size in [4, 8, 16] {
        let out =
            copy(size, &format!("mov.u64 %rd5, 3;\n    cp.async.ca.shared.global [%r4], [%rd5], {size}, 0;")).unwrap();
        assert!(out.iter().all(|b| *b == 0), "{size} bytes");
    }
}

#[test]
fn cp_async_faults_are_reported() {
    let e = copy(16, "add.u32 %r9, %r4, 8;\n    cp.async.cg.shared.global [%r9], [%rd5], 16;").unwrap_err();
    assert!(e.contains("misaligned write of 16 bytes at shared") && e.contains("thread [0, 0, 0]"), "{e}");
    let e = copy(16, "add.s64 %rd9, %rd5, 512;\n    cp.async.cg.shared.global [%r4], [%rd9], 16;").unwrap_err();
    assert!(e.contains("out-of-bounds read of 16 bytes at global") && e.contains("thread [0, 0, 0]"), "{e}");
    // A source aligned to 8 bytes, not 16; a destination past the end of shared memory.
    let e = copy(16, "add.s64 %rd9, %rd5, 8;\n    cp.async.cg.shared.global [%r4], [%rd9], 16;").unwrap_err();
    assert!(e.contains("misaligned read of 16 bytes at global") && e.contains("thread [0, 0, 0]"), "{e}");
    let e = copy(16, "add.u32 %r9, %r4, 512;\n    cp.async.cg.shared.global [%r9], [%rd5], 16;").unwrap_err();
    assert!(e.contains("out-of-bounds write of 16 bytes at shared") && e.contains("thread [0, 0, 0]"), "{e}");
    // A zero fill checks its destination alone.
    let e = copy(16, "add.u32 %r9, %r4, 8;\n    cp.async.cg.shared.global [%r9], [%rd5], 16, 0;").unwrap_err();
    assert!(e.contains("misaligned write of 16 bytes at shared") && e.contains("thread [0, 0, 0]"), "{e}");
    let e = copy(16, "add.u32 %r9, %r4, 512;\n    cp.async.cg.shared.global [%r9], [%rd5], 16, 0;").unwrap_err();
    assert!(e.contains("out-of-bounds write of 16 bytes at shared") && e.contains("thread [0, 0, 0]"), "{e}");
    // A partial read stops at the end of the source region.
    let e = copy(16, "add.s64 %rd9, %rd5, 496;\n    cp.async.ca.shared.global [%r4], [%rd9], 16, 8;").unwrap_err();
    assert!(e.contains("thread [1, 0, 0]"), "{e}");
}

#[test]
fn tma_tensor_copies_reductions_and_tcgen05_are_refused_with_a_reason() {
    for (inst, why) in [
        ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r4];", "kernel `k` uses `cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes`: TMA tensor copies (cp.async.bulk.tensor) are not supported on the CPU"),
        ("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd1], [%r1], 64;", "unsupported instruction"),
        ("tcgen05.fence::before_thread_sync;", "tensor memory"),
    ] {
        let ptx = format!("{HEAD}.visible .entry k() {{\n .reg .b32 %r<8>; .reg .b64 %rd<4>;\n {inst}\n ret; }}");
        let Err(e) = crate::ptx::Module::parse(&ptx) else { panic!("{inst} was accepted") };
        let e = e.to_string();
        assert!(e.contains("line 6") && e.contains(why), "{e}");
    }
}

#[test]
fn a_triton_tma_kernel_is_refused_at_its_tensor_copy() {
    // Triton's form: the `CUtensorMap` parameter's address taken with `cvta.param` first, the copy
    // through it further down.
    let ptx = include_str!("ptx/triton_tma_load.ptx");
    let line = ptx.lines().position(|l| l.contains("cp.async.bulk.tensor")).unwrap() + 1;
    let e = crate::ptx::Module::parse(ptx).unwrap_err();
    assert_eq!(e.line as usize, line, "{e}");
    assert!(
        e.message.starts_with("kernel `tma_copy` uses `cp.async.bulk.tensor.2d.")
            && e.message.ends_with(
                ": TMA tensor copies (cp.async.bulk.tensor) are not supported on the CPU \
                 (in kernel `tma_copy`; it stops 1 of the module's 1 kernels)"
            ),
        "{e}"
    );
    // Every instruction of the Tensor Memory Accelerator is named the same way, wherever it is.
    for inst in [
        "prefetch.tensormap [%rd1];",
        "cp.reduce.async.bulk.tensor.1d.global.shared::cta.add.tile.bulk_group [%rd1, {%r1}], [%r2];",
        "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd1, {%r1, %r2}];",
    ] {
        let ptx = format!("{HEAD}.func f(.param .b64 p)\n{{\n .reg .b32 %r<4>; .reg .b64 %rd<4>;\n {inst}\n ret;\n}}");
        let e = crate::ptx::Module::parse(&ptx).unwrap_err().to_string();
        assert!(
            e.starts_with("PTX line 7: function `f` uses `")
                && e.ends_with("are not supported on the CPU (in function `f`, which no kernel calls)"),
            "{e}"
        );
    }
}
