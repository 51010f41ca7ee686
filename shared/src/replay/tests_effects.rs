//! Launches of kernels without PTX replayed from recorded effects: applied when the inputs hash
//! matches, refused with both hashes when not, and the archive rules that keep them in place.

use std::io::Cursor;

use super::*;
use crate::archive::*;
use crate::effects::InputsHasher;

fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// One region `y` (4 words, a pointer to `x` in word 2..4), one region `x`, and one launch of a
/// kernel without PTX that points at `y`; with `effects`, it wrote `[7, 8]` at byte 0 of `x`.
fn archive(effects: bool) -> Vec<u8> {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("machine", "").unwrap();
    w.add_cubin(m, 90, b"\x7fELF not for the CPU").unwrap();
    let param = ParamDecl { name: "p".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer };
    let k = w.add_kernel(m, "gemm", vec![param]).unwrap();
    let y = w.add_region(RegionDecl::new("y", 16, DType::U32)).unwrap();
    let x = w.add_region(RegionDecl::new("x", 8, DType::U32)).unwrap();
    w.set_initial_bytes(y, &u32s(&[1, 2, 0, 0])).unwrap();
    w.set_initial_bytes(x, &u32s(&[3, 4])).unwrap();
    w.add_region_reloc(y, Reloc { offset: 8, target: x, target_offset: 0 }).unwrap();
    w.set_expected_bytes(x, &u32s(&[7, 8]), Tolerance::Exact).unwrap();
    let relocs = vec![Reloc { offset: 0, target: y, target_offset: 0 }];
    let op = w
        .launch(LaunchDecl { kernel: k, grid: [1; 3], block: [1; 3], shared_bytes: 0, params: vec![0; 8], relocs })
        .unwrap();
    if effects {
        // What the capture hashed: y with its pointer word left out (any address), then x.
        let mut h = InputsHasher::default();
        h.region(y, &u32s(&[1, 2, 0xdead, 0xbeef]), &[8]);
        h.region(x, &u32s(&[3, 4]), &[]);
        w.add_effects(op, h.finish(), &[(x, 0, &u32s(&[7, 8]))]).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[test]
fn recorded_effects_stand_in_for_a_kernel_without_ptx() {
    let bytes = archive(true);
    let a = Archive::open(&bytes).unwrap();
    a.validate().unwrap();
    let effects: Vec<_> = a.effects().collect();
    assert_eq!((effects.len(), effects[0].op, effects[0].writes.len()), (1, 0, 1));
    let mut replay = CpuReplay::new(&a, ReplayOptions::default()).unwrap();
    let stats = replay.run_iteration(&mut NoObserver).unwrap();
    assert_eq!((stats.launches, stats.recorded_effects, stats.instructions), (1, 1, 0));
    let verdict = super::check_state(&mut replay, &a, &Default::default(), &[]).unwrap();
    assert!(verdict.passed(), "x holds what the launch wrote");

    // Other inputs: the recorded writes do not apply.
    replay.restore_initial().unwrap();
    replay.write_region(1, &u32s(&[3, 5])).unwrap();
    let err = replay.run_iteration(&mut NoObserver).unwrap_err();
    assert!(matches!(err, ReplayError::EffectsInputs { op: 0, .. }), "{err}");
    assert!(err.to_string().contains("launch of gemm, machine code only): its inputs differ"), "{err}");
}

#[test]
fn without_effects_the_kernel_is_named_and_the_flag_suggested() {
    let bytes = archive(false);
    let a = Archive::open(&bytes).unwrap();
    let err = CpuReplay::new(&a, ReplayOptions::default()).err().unwrap();
    assert!(matches!(err, ReplayError::NoPtx { .. }), "{err}");
    assert!(err.to_string().contains("the CPU cannot run gemm") && err.to_string().contains("--record-effects"));
}

#[test]
fn the_writer_keeps_effects_to_launches_in_order_and_inside_regions() {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("machine", "").unwrap();
    let k = w.add_kernel(m, "k", vec![]).unwrap();
    let x = w.add_region(RegionDecl::new("x", 8, DType::U32)).unwrap();
    let fill = w.memset(MemsetOp { region: x, offset: 0, len: 8, width: 4, pattern: 0 }).unwrap();
    let launch = |w: &mut ArchiveWriter<_>| {
        w.launch(LaunchDecl { kernel: k, grid: [1; 3], block: [1; 3], shared_bytes: 0, params: vec![], relocs: vec![] })
            .unwrap()
    };
    let (a, b) = (launch(&mut w), launch(&mut w));
    let h = [0u8; 16];
    assert!(w.add_effects(fill, h, &[]).unwrap_err().to_string().contains("not a launch"));
    assert!(w.add_effects(a, h, &[(x, 4, &[0; 8])]).unwrap_err().to_string().contains("which is 8 bytes"));
    assert!(w.add_effects(a, h, &[(9, 0, &[0])]).unwrap_err().to_string().contains("does not exist"));
    w.add_effects(b, h, &[]).unwrap();
    assert!(w.add_effects(a, h, &[]).unwrap_err().to_string().contains("after those of a later"));
    let bytes = w.finish().unwrap().into_inner();
    let a = Archive::open(&bytes).unwrap();
    let effects: Vec<_> = a.effects().collect();
    assert_eq!((effects.len(), effects[0].op, effects[0].writes.len()), (1, b, 0), "a launch that wrote nothing");
}

/// An archive whose PTX kernel `copy` (run on the CPU) writes `x` before `gemm` (machine code
/// only, with recorded effects) reads it; the recorded hash is over `x` as `hashed_x`.
fn archive_after_a_cpu_kernel(hashed_x: &[u32]) -> Vec<u8> {
    let ptx = r#".version 7.0
.target sm_80
.address_size 64
.visible .entry copy(.param .u64 p) {
    .reg .b64 %rd<2>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, 9;
    st.global.u32 [%rd1+4], %r1;
    ret;
}
"#;
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let param = ParamDecl { name: "p".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer };
    let pm = w.add_module("ptx", ptx).unwrap();
    let copy = w.add_kernel(pm, "copy", vec![param.clone()]).unwrap();
    let mm = w.add_module("machine", "").unwrap();
    w.add_cubin(mm, 90, b"\x7fELF not for the CPU").unwrap();
    let out = ParamDecl { name: "out".into(), offset: 8, ..param.clone() };
    let gemm = w.add_kernel(mm, "gemm", vec![param, out]).unwrap();
    let x = w.add_region(RegionDecl::new("x", 8, DType::U32)).unwrap();
    let y = w.add_region(RegionDecl::new("y", 8, DType::U32)).unwrap();
    w.set_initial_bytes(x, &u32s(&[3, 4])).unwrap();
    w.set_expected_bytes(y, &u32s(&[7, 8]), Tolerance::Exact).unwrap();
    let reloc = |offset, target| Reloc { offset, target, target_offset: 0 };
    let launch = |kernel, relocs: Vec<Reloc>| LaunchDecl {
        kernel,
        grid: [1; 3],
        block: [1; 3],
        shared_bytes: 0,
        params: vec![0; 8 * relocs.len()],
        relocs,
    };
    w.launch(launch(copy, vec![reloc(0, x)])).unwrap();
    let op = w.launch(launch(gemm, vec![reloc(0, x), reloc(8, y)])).unwrap();
    let mut h = InputsHasher::default();
    h.region(x, &u32s(hashed_x), &[]);
    h.region(y, &[0; 8], &[]);
    w.add_effects(op, h.finish(), &[(y, 0, &u32s(&[7, 8]))]).unwrap();
    w.finish().unwrap().into_inner()
}

#[test]
fn effects_after_a_cpu_result_that_differs_apply_and_are_counted() {
    // The GPU's copy wrote 9 as the CPU's does: nothing to say.
    let bytes = archive_after_a_cpu_kernel(&[3, 9]);
    let a = Archive::open(&bytes).unwrap();
    let mut replay = CpuReplay::new(&a, ReplayOptions::default()).unwrap();
    let stats = replay.run_iteration(&mut NoObserver).unwrap();
    assert_eq!((stats.recorded_effects, stats.stale_effects, stats.first_stale_effects), (1, 0, None));

    // The capture saw 10 where the CPU wrote 9: the effects still apply (y is the GPU's), the
    // launch is counted, and the CPU launch before it that reaches x is named.
    let bytes = archive_after_a_cpu_kernel(&[3, 10]);
    let a = Archive::open(&bytes).unwrap();
    let mut replay = CpuReplay::new(&a, ReplayOptions::default()).unwrap();
    let stats = replay.run_iteration(&mut NoObserver).unwrap();
    assert_eq!((stats.recorded_effects, stats.stale_effects, stats.first_stale_effects), (1, 1, Some((1, Some(0)))));
    let verdict = super::check_state(&mut replay, &a, &Default::default(), &[]).unwrap();
    assert!(verdict.passed(), "y holds the recorded writes");

    // With an input of the caller's, the same difference stops the replay.
    replay.restore_initial().unwrap();
    replay.write_region(0, &u32s(&[3, 4])).unwrap();
    let err = replay.run_iteration(&mut NoObserver).unwrap_err();
    assert!(matches!(err, ReplayError::EffectsInputs { op: 1, .. }), "{err}");
    // Restored again, the caller's inputs are gone and the replay goes on.
    replay.restore_initial().unwrap();
    assert_eq!(replay.run_iteration(&mut NoObserver).unwrap().stale_effects, 1);
}
