//! The check against real replays: hand-written PTX run by the CPU engine, types inferred from
//! its stores, and replays whose blocks run in different orders.

use std::io::Cursor;

use super::*;
use crate::archive::*;
use crate::check::infer::infer_layouts;
use crate::replay::{check_state, CpuReplay, NoObserver, ReplayOptions, Replayer, Session};

/// Every block adds its element to one total under a spin lock: the sum's rounding depends on
/// the order the blocks take the lock in.
const LOCK_SUM: &str = r#"
.version 7.0
.target sm_70
.address_size 64
.visible .entry lock_sum(.param .u64 px, .param .u64 ptotal, .param .u64 plock)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [px];
    ld.param.u64 %rd2, [ptotal];
    ld.param.u64 %rd3, [plock];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %ctaid.x;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.f32 %f1, [%rd5];
SPIN:
    atom.global.cas.b32 %r2, [%rd3], 0, 1;
    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra SPIN;
    ld.global.f32 %f2, [%rd2];
    add.rn.f32 %f3, %f2, %f1;
    st.global.f32 [%rd2], %f3;
    atom.global.exch.b32 %r3, [%rd3], 0;
    ret;
}
"#;

/// Every thread adds its value into one of eight bins with a float atomic.
const HISTOGRAM: &str = r#"
.version 7.0
.target sm_70
.address_size 64
.visible .entry histogram(.param .u64 pvals, .param .u64 pbins)
{
    .reg .b32 %r<8>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [pvals];
    ld.param.u64 %rd2, [pbins];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    and.b32 %r5, %r4, 7;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd2, %rd5;
    red.global.add.f32 [%rd6], %f1;
    ret;
}
"#;

/// One thread writes two halves (stored as `.u16`, as nvcc stores `__half`), two `int`s and a
/// float stored as `.b32` bits (as Triton does) into one block of bytes.
const MIXED: &str = r#"
.version 7.0
.target sm_70
.address_size 64
.visible .entry mixed(.param .u64 pout)
{
    .reg .b16 %rs<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [pout];
    cvta.to.global.u64 %rd1, %rd1;
    mov.f32 %f1, 0f3FC00000;
    cvt.rn.f16.f32 %rs1, %f1;
    st.global.u16 [%rd1], %rs1;
    st.global.u16 [%rd1+2], %rs1;
    mov.u32 %r1, 7;
    st.global.s32 [%rd1+4], %r1;
    st.global.s32 [%rd1+8], %r1;
    mov.b32 %r2, %f1;
    st.global.b32 [%rd1+12], %r2;
    ret;
}
"#;

/// One thread publishes a scan tile's descriptor as CUB's decoupled look-back does: a status
/// word and the tile's `float` sum in one `st.relaxed.gpu.v2.u32`, the sum moved to `.b32` first.
const TILE_STATE: &str = r#"
.version 7.0
.target sm_70
.address_size 64
.visible .entry tile_state(.param .u64 pout)
{
    .reg .b32 %r<3>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [pout];
    cvta.to.global.u64 %rd1, %rd1;
    mov.f32 %f1, 0f463E5A70;
    mov.b32 %r2, %f1;
    mov.u32 %r1, 101;
    st.relaxed.gpu.global.v2.u32 [%rd1], {%r1, %r2};
    ret;
}
"#;

struct Case {
    ptx: String,
    kernel: &'static str,
    /// `(name, initial bytes)`, all declared as raw bytes: the types come from the PTX alone.
    regions: Vec<(&'static str, Vec<u8>)>,
    grid: u32,
    block: u32,
}

/// The case as an archive; with `expected`, those final states (by region) and typed layouts.
fn build(case: &Case, expected: &[(RegionId, Vec<u8>)]) -> Vec<u8> {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("m", &case.ptx).unwrap();
    let params: Vec<ParamDecl> = (0..case.regions.len())
        .map(|i| ParamDecl { name: format!("p{i}"), offset: 8 * i as u32, size: 8, align: 8, kind: ParamKind::Pointer })
        .collect();
    let k = w.add_kernel(m, case.kernel, params).unwrap();
    let ids: Vec<RegionId> = case
        .regions
        .iter()
        .map(|(name, init)| {
            let r = w.add_region(RegionDecl::new(*name, init.len() as u64, DType::Bytes)).unwrap();
            w.set_initial_bytes(r, init).unwrap();
            r
        })
        .collect();
    for (r, bytes) in expected {
        w.set_expected_bytes(*r, bytes, Tolerance::Exact).unwrap();
    }
    w.launch(LaunchDecl {
        kernel: k,
        grid: [case.grid, 1, 1],
        block: [case.block, 1, 1],
        shared_bytes: 0,
        params: vec![0; 8 * ids.len()],
        relocs: ids
            .iter()
            .enumerate()
            .map(|(i, &r)| Reloc { offset: 8 * i as u64, target: r, target_offset: 0 })
            .collect(),
    })
    .unwrap();
    w.finish().unwrap().into_inner()
}

fn one_thread() -> ReplayOptions {
    ReplayOptions { threads: 1, ..Default::default() }
}

/// The case with its expected state from one replay in an order of its own (as a GPU's run
/// would have it), and its typed layouts.
fn captured(case: &Case) -> Vec<u8> {
    let plain = build(case, &[]);
    let archive = Archive::open(&plain).unwrap();
    let mut replay = CpuReplay::new(&archive, ReplayOptions { block_order: Some(1000), ..one_thread() }).unwrap();
    replay.run_iteration(&mut NoObserver).unwrap();
    let finals: Vec<(RegionId, Vec<u8>)> =
        (0..case.regions.len() as RegionId).map(|r| (r, replay.read_region(r).unwrap())).collect();
    let with_expected = build(case, &finals);
    let layouts = infer_layouts(&Archive::open(&with_expected).unwrap(), one_thread()).unwrap().layouts;
    with_typed_layouts(&with_expected, &layouts).unwrap()
}

/// `replays` whole replays of `bytes`, each in its own block order, judged together.
fn judge_replays(bytes: &[u8], replays: u32) -> Verdict {
    let archive = Archive::open(bytes).unwrap();
    let mut replay = CpuReplay::new(&archive, one_thread()).unwrap();
    let session = Session::new(&archive, 1, &[]);
    let others = session.replay_again(&mut replay, replays - 1, &|| false).unwrap();
    Replayer::run_iteration(&mut replay, &archive, &mut NoObserver).unwrap();
    check_state(&mut replay, &archive, &CheckOptions::default(), &others).unwrap()
}

fn lock_sum() -> Case {
    let x: Vec<f32> = (0..64).map(|b| ((b * 7919) % 1000) as f32 / 7.0 + 1e-3 * b as f32).collect();
    Case {
        ptx: LOCK_SUM.to_string(),
        kernel: "lock_sum",
        regions: vec![
            ("x", x.iter().flat_map(|v| v.to_le_bytes()).collect()),
            ("total", vec![0; 4]),
            ("lock", vec![0; 4]),
        ],
        grid: 64,
        block: 1,
    }
}

fn histogram() -> Case {
    let vals: Vec<f32> = (0..1024).map(|i| ((i * 2654435761u64 as usize) % 10007) as f32 / 3.0).collect();
    Case {
        ptx: HISTOGRAM.to_string(),
        kernel: "histogram",
        regions: vec![("vals", vals.iter().flat_map(|v| v.to_le_bytes()).collect()), ("bins", vec![0; 32])],
        grid: 32,
        block: 32,
    }
}

#[test]
fn store_types_give_each_region_its_layout() {
    let bytes = captured(&lock_sum());
    let a = Archive::open(&bytes).unwrap();
    assert_eq!(a.typed_layout(0), None, "x is only read");
    assert_eq!(a.typed_layout(1), Some(vec![Stretch { len: 4, ty: ElemType::F32 }]));
    assert_eq!(a.typed_layout(2), Some(vec![Stretch { len: 4, ty: ElemType::I32 }]), "the lock's atomics");
    let bytes = captured(&histogram());
    let a = Archive::open(&bytes).unwrap();
    assert_eq!(a.typed_layout(1), Some(vec![Stretch { len: 32, ty: ElemType::F32 }]));
}

#[test]
fn a_mixed_dtype_block_gets_a_stretch_per_type() {
    let case =
        Case { ptx: MIXED.to_string(), kernel: "mixed", regions: vec![("block", vec![0; 20])], grid: 1, block: 1 };
    let bytes = captured(&case);
    let a = Archive::open(&bytes).unwrap();
    assert_eq!(
        a.typed_layout(0).unwrap(),
        [
            Stretch { len: 4, ty: ElemType::F16 },
            Stretch { len: 8, ty: ElemType::I32 },
            Stretch { len: 4, ty: ElemType::F32 },
            Stretch { len: 4, ty: ElemType::Untyped },
        ]
    );
    let v = judge_replays(&bytes, 1);
    let s: Vec<_> = v.regions[0].stretches.iter().map(|s| (s.ty, s.typed_by, s.outcome)).collect();
    assert_eq!(s[3], (ElemType::Untyped, TypeSource::None, Outcome::Exact));
    assert_eq!(v.state, CheckState::Exact);
}

#[test]
fn a_vector_store_types_each_element_by_its_own_register() {
    let case = Case {
        ptx: TILE_STATE.to_string(),
        kernel: "tile_state",
        regions: vec![("tiles", vec![0; 8])],
        grid: 1,
        block: 1,
    };
    let a_bytes = captured(&case);
    let a = Archive::open(&a_bytes).unwrap();
    assert_eq!(
        a.typed_layout(0).unwrap(),
        [Stretch { len: 4, ty: ElemType::I32 }, Stretch { len: 4, ty: ElemType::F32 }],
        "the status is an integer, the tile's sum a float"
    );
}

#[test]
fn block_order_changes_a_lock_ordered_sum_and_the_check_calls_it_nondeterministic() {
    let bytes = captured(&lock_sum());
    let v = judge_replays(&bytes, 4);
    assert_eq!(v.replays, 4);
    let total = &v.regions[1];
    assert!(total.passed, "{}", total.line());
    assert!(total.nondeterministic(), "replays in other block orders disagree: {}", total.line());
    let spread = total.stretches[0].spread.unwrap();
    assert!(spread.ulps > 0 && spread.abs > 0.0, "{spread:?}");
    // The replay judged may happen to match the expected bits; it is never judged tighter than
    // the spread its own replays show.
    assert!(total.stretches[0].tolerance.unwrap().atol >= spread.abs);
    assert!(v.regions[2].passed && !v.regions[2].nondeterministic(), "{}", v.regions[2].line());
    assert!(v.passed());
}

#[test]
fn block_order_changes_a_float_atomic_histogram_and_the_check_calls_it_nondeterministic() {
    let bytes = captured(&histogram());
    let v = judge_replays(&bytes, 4);
    let bins = &v.regions[1];
    assert!(bins.passed, "{}", bins.line());
    assert!(bins.nondeterministic(), "{}", bins.line());
    assert_eq!(bins.outcome(), Outcome::Within, "{}", bins.line());
    assert_eq!(v.state, CheckState::Within);
}

#[test]
fn a_kernel_altered_to_write_a_wrong_value_still_fails_naming_the_element() {
    let good = captured(&lock_sum());
    // The same archive, one more add in the kernel: every block adds 1 more.
    let mut case = lock_sum();
    case.ptx = LOCK_SUM
        .replace("add.rn.f32 %f3, %f2, %f1;", "add.rn.f32 %f3, %f2, %f1;\n    add.rn.f32 %f3, %f3, 0f3F800000;");
    let archive = Archive::open(&good).unwrap();
    let expected: Vec<(RegionId, Vec<u8>)> =
        archive.regions().filter_map(|r| r.expected.map(|e| (r.id, e.decode().unwrap()))).collect();
    let layouts: Vec<(RegionId, Vec<Stretch>)> =
        (0..3).filter_map(|r| archive.typed_layout(r).map(|l| (r, l))).collect();
    let bad = with_typed_layouts(&build(&case, &expected), &layouts).unwrap();
    let v = judge_replays(&bad, 4);
    let total = &v.regions[1];
    assert!(!total.passed);
    let first = total.first_mismatch().unwrap();
    assert_eq!((first.index, total.stretches[0].ty), (0, ElemType::F32));
    assert!(total.line().contains("first at element 0"), "{}", total.line());
    assert_eq!(v.state, CheckState::Failed);
}

/// Triton's reductions stage their results through shared memory (`st.shared.b32` of an `.f32`
/// sum, `ld.shared.b32` or `ldmatrix` back, `st.global.b32` out): the global store says only
/// `.b32`, and the type comes from what the kernel keeps in shared memory. A kernel that keeps
/// integers there stays integer.
const STAGED: &str = r#"
.version 8.0
.target sm_80
.address_size 64
.shared .align 16 .b8 smem[64];
.visible .entry staged(.param .u64 pout)
{
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [pout];
    mov.u32 %r1, smem;
    mov.f32 %f1, 0f3FC00000;
    add.f32 %r2, %f1, %f1;
    st.shared.b32 [%r1], %r2;
    ld.shared.b32 %r3, [%r1];
    st.shared.v2.b32 [%r1+8], {%r3, %r3};
    bar.sync 0;
    ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r4}, [%r1];
    ld.shared.b32 %r5, [%r1+8];
    st.global.b32 [%rd1], %r4;
    st.global.b32 [%rd1+4], %r5;
    ret;
}
"#;

#[test]
fn a_float_staged_through_shared_memory_keeps_its_type() {
    let case =
        Case { ptx: STAGED.to_string(), kernel: "staged", regions: vec![("out", vec![0; 8])], grid: 1, block: 32 };
    let a = captured(&case);
    assert_eq!(Archive::open(&a).unwrap().typed_layout(0), Some(vec![Stretch { len: 8, ty: ElemType::F32 }]));
    // The same kernel staging an integer: the shared memory holds no float type.
    let ints = STAGED.replace("add.f32 %r2, %f1, %f1;", "add.s32 %r2, %r1, 3;");
    let case = Case { ptx: ints, ..case };
    let a = captured(&case);
    assert_eq!(Archive::open(&a).unwrap().typed_layout(0), Some(vec![Stretch { len: 8, ty: ElemType::I32 }]));
}

/// XLA's PTX as LLVM now writes it: every value in an untyped `.b32` register, floats computed
/// into them, selected with `selp.b32` and shuffled with `shfl.sync.*.b32` before `st.global.b32`;
/// and bits loaded and stored again unchanged.
const UNTYPED_REGISTERS: &str = r#"
.version 8.4
.target sm_90
.address_size 64
.visible .entry select_fusion(.param .u64 pin, .param .u64 pout)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [pin];
    ld.param.u64 %rd2, [pout];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    ld.global.nc.b32 %r1, [%rd1];
    ld.global.nc.b32 %r2, [%rd1+4];
    mul.rn.f32 %r3, %r1, %r2;
    setp.gt.f32 %p1, %r1, 0f00000000;
    selp.b32 %r4, %r3, %r2, %p1;
    st.global.b32 [%rd2], %r4;
    selp.b32 %r5, 0, %r3, %p1;
    st.global.b32 [%rd2+4], %r5;
    shfl.sync.bfly.b32 %r6|%p2, %r3, 1, 31, -1;
    st.global.b32 [%rd2+8], %r6;
    max.f32 %r7, %r3, %r2;
    st.global.u32 [%rd2+12], %r7;
    ld.global.nc.b32 %r8, [%rd1+8];
    st.global.b32 [%rd2+16], %r8;
    add.s32 %r9, %r8, 1;
    selp.b32 %r10, %r9, %r3, %p1;
    st.global.b32 [%rd2+20], %r10;
    ret;
}
"#;

#[test]
fn floats_in_untyped_registers_keep_their_type_through_selects_and_shuffles() {
    let input: Vec<u8> = [1.5f32, -2.25, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    let case = Case {
        ptx: UNTYPED_REGISTERS.to_string(),
        kernel: "select_fusion",
        regions: vec![("in", input), ("out", vec![0; 24])],
        grid: 1,
        block: 32,
    };
    let a = captured(&case);
    assert_eq!(
        Archive::open(&a).unwrap().typed_layout(1),
        Some(vec![Stretch { len: 16, ty: ElemType::F32 }, Stretch { len: 8, ty: ElemType::I32 }]),
        "the product selected, shuffled and maximised is a float; loaded bits and a select of an \
         integer with a float are not"
    );
}
