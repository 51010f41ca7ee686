//! The capture API against real PTX on the CPU device: kernel layouts read from `.entry`
//! declarations (a module the CPU executor refuses still records), and graphs replayed through
//! `shared::replay`.

use shared::archive::{Archive, Op, ParamKind};
use shared::replay::{CpuReplay, NoObserver, ReplayError, ReplayOptions};

use crate::{args, CaptureError, Device, StructArg};

/// Triton's TMA load: a `CUtensorMap` by value and a `cp.async.bulk.tensor` the CPU lowering refuses.
const TMA_PTX: &str = include_str!("../../../../shared/src/ptx/tests/ptx/triton_tma_load.ptx");

#[test]
fn a_module_the_cpu_refuses_gets_its_layout_and_records_and_running_it_is_refused() {
    let refusal = shared::ptx::Module::parse(TMA_PTX).unwrap_err().to_string();
    assert!(refusal.contains("cp.async.bulk.tensor"), "{refusal}");

    let dev = Device::cpu();
    let module = dev.load_ptx("tma", TMA_PTX).unwrap();
    let kernel = module.kernel("tma_copy").unwrap();
    let layout: Vec<(u32, u32, u32, ParamKind)> =
        kernel.params().iter().map(|p| (p.offset, p.size, p.align, p.kind)).collect();
    assert_eq!(
        layout,
        [
            (0, 128, 64, ParamKind::Value),
            (128, 8, 8, ParamKind::Pointer),
            (136, 4, 4, ParamKind::Value),
            (144, 8, 8, ParamKind::Pointer)
        ]
    );

    let (src, dst) = (dev.upload(&[1.0f32; 64]).unwrap(), dev.alloc::<f32>(64).unwrap());
    let graph = dev.capture(|d| d.launch(&kernel, 1, 128, 0, &args![StructArg::new(128), &src, 8u32, &dst])).unwrap();
    let bytes = graph.to_archive_bytes(&[("src", src.raw())], &[("dst", dst.raw())]).unwrap();
    let archive = Archive::open(&bytes).unwrap();
    let Op::Launch(launch) = archive.op(0) else { panic!("op 0 is not a launch") };
    assert_eq!(archive.kernel(launch.kernel).name, "tma_copy");
    assert_eq!(launch.params.len(), 152);
    let relocs: Vec<u64> = archive.relocs(launch.relocs.clone()).map(|r| r.offset).collect();
    assert_eq!(relocs, [128, 144]);

    // Running it on the CPU is where the refusal comes, eagerly and as a graph, in its own words.
    let eager = dev.launch(&kernel, 1, 128, 0, &args![StructArg::new(128), &src, 8u32, &dst]).unwrap_err();
    assert!(matches!(&eager, CaptureError::Ptx { module, .. } if module == "tma"), "{eager}");
    assert!(eager.to_string().contains(&refusal), "{eager}");
    let replayed = graph.launch().unwrap_err().to_string();
    assert!(replayed.contains("cp.async.bulk.tensor") && replayed.contains("not supported on the CPU"), "{replayed}");

    // PTX without a kernel to record is still refused when it loads.
    assert!(dev.load_ptx("bad", ".version 8.0\n.target sm_75\nthis is not ptx").is_err());
}

/// `step(cond, count)`: one thread counts a pass and takes one off the condition word.
const STEP_PTX: &str = "
.version 7.0
.target sm_70
.address_size 64

.visible .entry step(.param .u64 cond, .param .u64 count)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [cond];
    ld.param.u64 %rd2, [count];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    ld.global.u32 %r1, [%rd3];
    sub.u32 %r1, %r1, 1;
    st.global.u32 [%rd3], %r1;
    ld.global.u32 %r2, [%rd4];
    add.u32 %r2, %r2, 1;
    st.global.u32 [%rd4], %r2;
    ret;
}
";

#[test]
fn a_while_still_true_at_its_limit_fails_the_cpu_launch_as_loop_limit_and_leaves_the_buffers() {
    let dev = Device::cpu();
    let step = dev.load_ptx("step", STEP_PTX).unwrap().kernel("step").unwrap();
    let (cond, count) = (dev.upload(&[3u32]).unwrap(), dev.alloc::<u32>(1).unwrap());
    let graph = dev
        .capture(|d| {
            d.zero(&count)?;
            d.while_nonzero(&cond, 5, |d| d.launch(&step, 1, 1, 0, &args![&cond, &count]))
        })
        .unwrap();

    // Within its limit the loop runs until its word clears, in place over the live buffers.
    graph.launch().unwrap();
    assert_eq!((cond.read().unwrap()[0], count.read().unwrap()[0]), (0, 3));

    // Still set after 5 passes: the launch fails as every CPU replay of the archive does, and the
    // buffers keep what they held before it.
    dev.write(&cond, &[9]).unwrap();
    let err = graph.launch().unwrap_err();
    assert!(
        matches!(&err, CaptureError::Replay(e) if matches!(**e, ReplayError::LoopLimit { op: 1, limit: 5 })),
        "{err}"
    );
    assert!(err.to_string().contains("condition still true after its limit of 5 iterations"), "{err}");
    assert_eq!((cond.read().unwrap()[0], count.read().unwrap()[0]), (9, 3));

    // The same archive replayed by `shared::replay` directly stops at the same op with the same error.
    let bytes = graph.to_archive_bytes(&[], &[]).unwrap();
    let archive = Archive::open(&bytes).unwrap();
    let mut replay = CpuReplay::new(&archive, ReplayOptions::default()).unwrap();
    let direct = replay.run_iteration(&mut NoObserver).unwrap_err();
    assert!(matches!(direct, ReplayError::LoopLimit { op: 1, limit: 5 }), "{direct}");

    // A launch after the failed one starts clean.
    dev.write(&cond, &[2]).unwrap();
    graph.launch().unwrap();
    assert_eq!((cond.read().unwrap()[0], count.read().unwrap()[0]), (0, 2));
}

#[test]
fn device_spellings_parse_as_every_interface_parses_them() {
    assert_eq!(Device::from_spec("cpu").unwrap().name(), "cpu");
    let e = Device::from_spec("tpu").unwrap_err();
    assert!(matches!(&e, CaptureError::DeviceSpec(crate::device::DeviceSpecError::Unknown(s)) if s == "tpu"), "{e}");
    let e = Device::from_spec("cpu:interp").unwrap_err();
    assert!(matches!(e, CaptureError::CpuEngine(crate::device::DeviceSpec::Cpu(Some(_)))), "{e}");
    assert_eq!(e.to_string(), "device interp: the capture API's CPU device chooses its engine itself; use cpu");
}

#[test]
fn errors_keep_the_error_they_wrap_as_their_source() {
    let dev = Device::cpu();
    let module = dev.load_ptx("tma", TMA_PTX).unwrap();
    let e = module.kernel("nope").unwrap_err();
    assert!(std::error::Error::source(&e).is_some(), "{e}");
    let CaptureError::Ptx { source, .. } = &e else { panic!("{e}") };
    assert!(matches!(&**source, crate::PtxFailure::NoEntry { entry, .. } if entry == "nope"), "{e}");
    assert!(e.to_string().starts_with("PTX module tma: no entry named nope; it has "), "{e}");
    let e = dev.backend().read(0x10, &mut [0u8; 4]).unwrap_err();
    assert!(matches!(e, CaptureError::Cpu(shared::ptx::MemError::OutOfBounds { .. })), "{e}");
}

#[test]
fn an_archive_that_cannot_be_opened_keeps_the_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = crate::Graph::load(dir.path().join("missing.recap"), &Device::cpu()).unwrap_err();
    let CaptureError::Archive { source, .. } = &e else { panic!("{e}") };
    let crate::ArchiveFailure::Open(io) = &**source else { panic!("{e}") };
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("missing.recap: cannot open: "), "{e}");
}
