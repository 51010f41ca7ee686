//! Regions that are module variables (the `module-vars` section): the CPU replay backs each with
//! the variable kernels use, so the captured contents (not the PTX initialiser) are what kernels
//! read, copies reach the variable, a pointer to it is relocated, and the check reads it back.

use std::io::Cursor;

use super::*;
use crate::archive::*;
use crate::plan::Plan;

/// `out[i] = taps[i] * scale + bias[0]` for three threads; thread 0 counts the launch in
/// `launches`. `bias` is reached through a pointer parameter, `taps` and `launches` by name.
const FILTER: &str = r#"
.version 8.0
.target sm_90
.address_size 64
.const .align 4 .f32 taps[3] = {0f3F800000, 0f3F800000, 0f3F800000};
.global .align 4 .u32 launches = 100;
.visible .entry filter(.param .u64 out, .param .u64 bias, .param .f32 scale)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<6>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [bias];
    ld.param.f32 %f1, [scale];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    mov.u64 %rd4, taps;
    add.s64 %rd5, %rd4, %rd3;
    ld.const.f32 %f2, [%rd5];
    ld.global.f32 %f3, [%rd2];
    fma.rn.f32 %f4, %f2, %f1, %f3;
    add.s64 %rd6, %rd1, %rd3;
    st.global.f32 [%rd6], %f4;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    atom.global.add.u32 %r2, [launches], 1;
DONE:
    ret;
}
"#;

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

struct Built {
    bytes: Vec<u8>,
    taps: RegionId,
    launches: RegionId,
    out: RegionId,
}

/// An archive that sets `taps` by a copy from `new_taps` when `copy_in` (as a
/// `cudaMemcpyToSymbol` inside the range would), then launches `filter` twice; `bias` holds the
/// bias and, in its second word, a pointer to `taps[1]`. With `declare_vars`, `taps` and
/// `launches` are the module's variables.
fn build(copy_in: bool, declare_vars: bool) -> Built {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("filter", FILTER).unwrap();
    let params = vec![
        ParamDecl { name: "out".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer },
        ParamDecl { name: "bias".into(), offset: 8, size: 8, align: 8, kind: ParamKind::Pointer },
        ParamDecl { name: "scale".into(), offset: 16, size: 4, align: 4, kind: ParamKind::Value },
    ];
    let k = w.add_kernel(m, "filter", params).unwrap();
    let taps = w.add_region(RegionDecl::new("taps", 12, DType::F32)).unwrap();
    w.set_initial_bytes(taps, &f32s(&[2.0, 3.0, 4.0])).unwrap();
    let launches = w.add_region(RegionDecl::new("launches", 4, DType::U32)).unwrap();
    w.set_initial_bytes(launches, &7u32.to_le_bytes()).unwrap();
    let new_taps = w.add_region(RegionDecl::new("new_taps", 12, DType::F32)).unwrap();
    w.set_initial_bytes(new_taps, &f32s(&[10.0, 20.0, 30.0])).unwrap();
    let bias = w.add_region(RegionDecl::new("bias", 16, DType::F32)).unwrap();
    w.set_initial_bytes(bias, &f32s(&[0.5, 0.0, 0.0, 0.0])).unwrap();
    // The table of pointers a program might keep: its second word points at taps[1].
    w.add_region_reloc(bias, Reloc { offset: 8, target: taps, target_offset: 4 }).unwrap();
    let out = w.add_region(RegionDecl::new("out", 12, DType::F32)).unwrap();
    if declare_vars {
        w.add_module_var(taps, m, "taps").unwrap();
        w.add_module_var(launches, m, "launches").unwrap();
    }
    if copy_in {
        w.copy(CopyOp { src: new_taps, src_offset: 0, dst: taps, dst_offset: 0, len: 12 }).unwrap();
    }
    let mut params = vec![0u8; 20];
    params[16..20].copy_from_slice(&2.0f32.to_le_bytes());
    let relocs =
        vec![Reloc { offset: 0, target: out, target_offset: 0 }, Reloc { offset: 8, target: bias, target_offset: 0 }];
    for _ in 0..2 {
        let (params, relocs) = (params.clone(), relocs.clone());
        w.launch(LaunchDecl { kernel: k, grid: [1, 1, 1], block: [3, 1, 1], shared_bytes: 0, params, relocs }).unwrap();
    }
    let bytes = w.finish().unwrap().into_inner();
    Built { bytes, taps, launches, out }
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn kernels_read_and_write_the_regions_that_are_their_module_variables() {
    let b = build(false, true);
    let a = Archive::open(&b.bytes).unwrap();
    assert_eq!(a.version(), (1, 2));
    assert_eq!(a.module_var(b.taps).map(|v| v.name), Some("taps"));
    let mut replay = CpuReplay::new(&a, ReplayOptions::default()).unwrap();
    replay.run_iteration(&mut NoObserver).unwrap();
    // The captured taps (2, 3, 4), not the PTX initialiser's ones.
    assert_eq!(floats(&replay.read_region(b.out).unwrap()), [4.5, 6.5, 8.5]);
    // Counted on from the captured 7, not the initialiser's 100.
    assert_eq!(replay.read_region(b.launches).unwrap(), 9u32.to_le_bytes());
    // A pointer stored in a region points at the variable kernels read.
    let bias = replay.read_region(a.region_named("bias").unwrap()).unwrap();
    let at = u64::from_le_bytes(bias[8..16].try_into().unwrap());
    let mut tap = [0u8; 4];
    replay.memory().read(at, &mut tap).unwrap();
    assert_eq!(f32::from_le_bytes(tap), 3.0);
    // A second iteration starts from the captured state again.
    replay.restore_initial().unwrap();
    replay.run_iteration(&mut NoObserver).unwrap();
    assert_eq!(replay.read_region(b.launches).unwrap(), 9u32.to_le_bytes());
}

#[test]
fn without_the_section_the_kernels_see_their_initialisers() {
    // What an archive without module variables gave: the regions are plain buffers nobody reads.
    let b = build(false, false);
    let a = Archive::open(&b.bytes).unwrap();
    assert_eq!(a.version(), (1, 0));
    let mut replay = CpuReplay::new(&a, ReplayOptions::default()).unwrap();
    replay.run_iteration(&mut NoObserver).unwrap();
    assert_eq!(floats(&replay.read_region(b.out).unwrap()), [2.5, 2.5, 2.5]);
    assert_eq!(replay.read_region(b.launches).unwrap(), 7u32.to_le_bytes());
}

#[test]
fn a_copy_into_a_module_variable_is_what_the_next_launch_reads_and_the_plan_orders_it() {
    let b = build(true, true);
    let a = Archive::open(&b.bytes).unwrap();
    let mut replay = CpuReplay::new(&a, ReplayOptions::default()).unwrap();
    replay.run_iteration(&mut NoObserver).unwrap();
    assert_eq!(floats(&replay.read_region(b.out).unwrap()), [20.5, 40.5, 60.5]);
    // The launches name `taps` without a relocation; the plan still puts them after the copy, and
    // the second launch after the first (both count in `launches`).
    let plan = Plan::build(&a);
    let preds: Vec<Vec<OpId>> = (1..3).map(|op| plan.top().preds(op).collect()).collect();
    assert_eq!(preds, [vec![0], vec![1]]);
}

#[test]
fn a_variable_the_module_does_not_declare_is_refused_by_name() {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("filter", FILTER).unwrap();
    let r = w.add_region(RegionDecl::new("ghost", 4, DType::U32)).unwrap();
    w.add_module_var(r, m, "ghost").unwrap();
    let bytes = w.finish().unwrap().into_inner();
    let a = Archive::open(&bytes).unwrap();
    let e = CpuReplay::new(&a, ReplayOptions::default()).err().expect("refused").to_string();
    assert_eq!(e, "region ghost: module filter declares no .global or .const variable named ghost");
}

#[test]
fn a_region_smaller_than_its_variable_is_refused() {
    let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("filter", FILTER).unwrap();
    let r = w.add_region(RegionDecl::new("taps", 8, DType::F32)).unwrap();
    w.add_module_var(r, m, "taps").unwrap();
    let bytes = w.finish().unwrap().into_inner();
    let a = Archive::open(&bytes).unwrap();
    let e = CpuReplay::new(&a, ReplayOptions::default()).err().expect("refused").to_string();
    assert!(e.contains("variable `taps` is 12 bytes, but region taps holds 8"), "{e}");
}
