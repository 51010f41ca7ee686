//! `mbarrier`, `cp.async.bulk` and `elect.sync`: barriers whose phases complete with their
//! arrivals and transaction bytes, bulk copies done when they issue, waits in the form Triton
//! emits (a `waitLoop:` label repeated in block after block), a wait that cannot complete, and
//! the hints (`setmaxnreg`, `griddepcontrol`, `fence.proxy.async`) accepted as no-ops.

use super::run_kernel;

const HEAD: &str = ".version 8.0\n.target sm_90a\n.address_size 64\n";

fn kernel(body: &str) -> String {
    format!(
        "{HEAD}
.visible .entry k(.param .u64 out, .param .u64 src)
{{
    .reg .pred %p<8>;
    .reg .b32 %r<32>;
    .reg .b64 %rd<32>;
    .shared .align 8 .b64 bar;
    .shared .align 8 .b64 bar2;
    .shared .align 128 .b8 buf[256];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [src];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, bar;
    mov.u32 %r3, buf;
    setp.eq.u32 %p1, %r1, 0;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
{body}
    ret;
}}"
    )
}

fn run(body: &str, threads: u32, out_len: usize) -> Result<Vec<u8>, String> {
    let src: Vec<u8> = (0..256).map(|i| (i * 7 + 3) as u8).collect();
    let out = run_kernel(&kernel(body), "k", [1, 1, 1], [threads, 1, 1], &[vec![0xEE; out_len], src], &[])?;
    Ok(out.into_iter().next().unwrap())
}

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// A Triton-style wait on `%r2` with parity `parity`, in its own block.
fn wait(parity: u32) -> String {
    format!(
        "    {{
    .reg .pred P1;
    waitLoop:
    mbarrier.try_wait.parity.shared::cta.b64 P1, [%r2], {parity};
    @!P1 bra.uni waitLoop;
    }}"
    )
}

#[test]
fn a_bulk_copy_completes_its_phase_and_copies_back_out() {
    // Phase 0: every thread arrives. Phase 1: thread 0 expects 256 bytes and copies them in;
    // the others arrive. Then thread 0 copies the tile out with a bulk group.
    let body = format!(
        "    @%p1 mbarrier.init.shared::cta.b64 [%r2], 64;
    fence.mbarrier_init.release.cluster;
    bar.sync 0;
    mbarrier.arrive.shared::cta.b64 _, [%r2];
{w0}
    @%p1 mbarrier.arrive.expect_tx.shared.b64 _, [%r2], 256;
    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd2], 256, [%r2];
    @!%p1 mbarrier.arrive.release.cta.shared::cta.b64 %rd5, [%r2];
{w1}
    fence.proxy.async.shared::cta;
    @%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r3], 256;
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group.read 0;
    @%p1 mbarrier.inval.shared::cta.b64 [%r2];",
        w0 = wait(0),
        w1 = wait(1)
    );
    let out = run(&body, 64, 256).unwrap();
    let want: Vec<u8> = (0..256).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(out, want);
}

#[test]
fn bytes_still_expected_keep_the_phase_open() {
    // 128 bytes expected, 64 copied: test_wait says no, then the second half completes it.
    let body = "    @%p1 mbarrier.init.shared.b64 [%r2], 1;
    @%p1 mbarrier.arrive.expect_tx.shared.b64 %rd5, [%r2], 128;
    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd2], 64, [%r2];
    mbarrier.test_wait.parity.shared.b64 %p2, [%r2], 0;
    selp.u32 %r4, 1, 0, %p2;
    @%p1 st.global.u32 [%rd1], %r4;
    add.u32 %r5, %r3, 64;
    add.s64 %rd6, %rd2, 64;
    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r5], [%rd6], 64, [%r2];
    mbarrier.test_wait.shared.b64 %p3, [%r2], %rd5;
    selp.u32 %r4, 1, 0, %p3;
    @%p1 st.global.u32 [%rd1+4], %r4;
    mbarrier.pending_count.b64 %r6, %rd5;
    @%p1 st.global.u32 [%rd1+8], %r6;
    ld.shared.u32 %r7, [buf+124];
    @%p1 st.global.u32 [%rd1+12], %r7;";
    let out = words(&run(body, 32, 16).unwrap());
    let src: Vec<u8> = (0..256).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(out[..3], [0, 1, 1], "open, then complete; one arrival was pending before the arrive");
    assert_eq!(out[3], u32::from_le_bytes(src[124..128].try_into().unwrap()));
}

#[test]
fn expect_tx_and_complete_tx_and_arrive_counts() {
    // Two arrivals of a count of 3 leave the phase open; expect_tx then complete_tx of 32 bytes
    // with the last arrival closes it; a second barrier with arrive_drop needs one fewer later.
    let body = "    mov.u32 %r10, bar2;
    @%p1 mbarrier.init.shared.b64 [%r2], 3;
    @%p1 mbarrier.arrive.shared.b64 _, [%r2], 2;
    @%p1 mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r2], 32;
    @%p1 mbarrier.arrive.shared.b64 _, [%r2];
    mbarrier.test_wait.parity.shared.b64 %p2, [%r2], 0;
    @%p1 mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%r2], 32;
    mbarrier.test_wait.parity.acquire.cta.shared.b64 %p3, [%r2], 0;
    selp.u32 %r4, 1, 0, %p2;
    selp.u32 %r5, 1, 0, %p3;
    @%p1 st.global.v2.u32 [%rd1], {%r4, %r5};
    @%p1 mbarrier.init.shared.b64 [%r10], 2;
    @%p1 mbarrier.arrive_drop.shared.b64 _, [%r10];
    @%p1 mbarrier.arrive.shared.b64 %rd7, [%r10];
    mbarrier.pending_count.b64 %r6, %rd7;
    mbarrier.test_wait.parity.shared.b64 %p4, [%r10], 0;
    @%p1 mbarrier.arrive.shared.b64 _, [%r10];
    mbarrier.test_wait.parity.shared.b64 %p5, [%r10], 1;
    selp.u32 %r7, 1, 0, %p4;
    selp.u32 %r8, 1, 0, %p5;
    @%p1 st.global.v2.u32 [%rd1+8], {%r7, %r8};
    @%p1 st.global.u32 [%rd1+16], %r6;";
    let out = words(&run(body, 32, 20).unwrap());
    assert_eq!(out, [0, 1, 1, 1, 1], "open until the bytes are done; the dropped arrival is not expected again");
}

#[test]
fn a_wait_no_thread_can_complete_is_an_error() {
    let body = format!(
        "    @%p1 mbarrier.init.shared.b64 [%r2], 2;
    @%p1 mbarrier.arrive.shared.b64 _, [%r2];
{}",
        wait(0)
    );
    let err = run(&body, 32, 4).unwrap_err();
    let line = kernel(&body).lines().position(|l| l.contains("try_wait")).unwrap() + 1;
    assert!(err.contains("mbarrier wait that cannot complete") && err.contains(&format!("(line {line})")), "{err}");
}

#[test]
fn a_barrier_outside_shared_memory_faults() {
    let err = run("    mbarrier.init.b64 [%rd1], 1;", 32, 8).unwrap_err();
    assert!(err.contains("out-of-bounds read of 8 bytes at shared address"), "{err}");
}

#[test]
fn cp_async_mbarrier_arrive_counts_once_with_noinc() {
    let body = "    @%p1 mbarrier.init.shared.b64 [%r2], 1;
    @%p1 cp.async.mbarrier.arrive.shared.b64 [%r2];
    mbarrier.test_wait.parity.shared.b64 %p2, [%r2], 0;
    @%p1 cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r2];
    mbarrier.test_wait.parity.shared.b64 %p3, [%r2], 0;
    selp.u32 %r4, 1, 0, %p2;
    selp.u32 %r5, 1, 0, %p3;
    @%p1 st.global.v2.u32 [%rd1], {%r4, %r5};";
    assert_eq!(words(&run(body, 32, 8).unwrap()), [0, 1]);
}

#[test]
fn elect_sync_picks_the_lowest_active_member() {
    // Odd lanes take part; the member mask leaves out lanes 1 and 33.
    let body = "    and.b32 %r4, %r1, 1;
    setp.eq.u32 %p2, %r4, 1;
    mov.u32 %r6, 0;
    mov.pred %p3, 0;
    @%p2 elect.sync %r6|%p3, 0xFFFFFFFD;
    selp.u32 %r7, 1000, 0, %p3;
    add.u32 %r8, %r7, %r6;
    st.global.u32 [%rd4], %r8;
    elect.sync _|%p4, -1;
    selp.u32 %r9, 1, 0, %p4;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd1, 256;
    add.s64 %rd6, %rd6, %rd5;
    st.global.u32 [%rd6], %r9;";
    let out = words(&run(body, 64, 512).unwrap());
    for t in 0..64u32 {
        let want = match t {
            3 | 35 => 1000 + 3,
            _ if t % 2 == 1 => 3,
            _ => 0,
        };
        assert_eq!(out[t as usize], want, "thread {t}");
        assert_eq!(out[64 + t as usize], (t % 32 == 0) as u32, "thread {t} with every lane");
    }
}

#[test]
fn hints_of_sm_90_kernels_are_accepted() {
    let body = "    setmaxnreg.inc.sync.aligned.u32 240;
    setmaxnreg.dec.sync.aligned.u32 40;
    griddepcontrol.wait;
    griddepcontrol.launch_dependents;
    fence.proxy.async;
    fence.proxy.async.global;
    cp.async.bulk.prefetch.L2.global [%rd2], 256;
    st.global.u32 [%rd4], %r1;";
    assert_eq!(words(&run(body, 32, 128).unwrap()), (0..32).collect::<Vec<u32>>());
}

#[test]
fn tensor_and_multicast_bulk_copies_are_refused_with_their_reason() {
    let err = run(
        "    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%r3], [%rd2], 256, [%r2], %rs1;",
        32,
        4,
    )
    .unwrap_err();
    assert!(err.contains("multicast"), "{err}");
}
