//! One archive replayed on two devices (or two CPU engines) side by side, op by op: the driver
//! behind `recap compare` and the host's `compare` sessions.
//!
//! Both sides start from the archive's initial state and run one iteration. After every op the
//! regions that op may write (the plan's write set) are read on both sides and judged by
//! `shared::compare`. A CPU side is stepped op by op (`CpuReplay::step`); a CUDA side replays on a
//! stream, synchronising after each op, and calls back as each finishes, and the CPU side is
//! stepped from inside that callback, so neither side runs ahead.

// Errors carry the CUDA driver's own words and the JIT log, as `cuda/` does: large, but only on
// the cold path.
#![allow(clippy::result_large_err)]

use shared::archive::{Archive, Op, OpId, RegionId};
use shared::compare::{Comparison, Divergence, Judged, Outcome};
use shared::plan::Plan;
use shared::ptx::Engine;
use shared::replay::{CpuReplay, Cursor, NoObserver, ReplayError, ReplayLimits, ReplayOptions};

use crate::cuda::{CudaError, OpenError};
use crate::device::DeviceSpec;

/// How both sides replay.
#[derive(Clone, Debug, Default)]
pub struct CompareOptions {
    /// Most PTX instructions the iteration may execute on a CPU side.
    pub budget: Option<u64>,
    /// What the archive may make a CPU side allocate and launch.
    pub limits: ReplayLimits,
    /// Go on past the first op that differs.
    pub all: bool,
    /// Set to stop the CPU side between blocks.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// The tensor-core arithmetic of a CPU side; `None` follows the archive's GPU
    /// (`shared::replay::CpuReplay::mma_model`).
    pub mma_model: Option<shared::ptx::MmaModel>,
}

/// Hears each op as it is judged.
pub trait CompareObserver {
    fn judged(&mut self, _judged: &Judged) {}
    /// The sides parted on `divergence`; `a` and `b` are their bytes of its region.
    fn parted(&mut self, _divergence: &Divergence, _a: &[u8], _b: &[u8]) {}
}

/// An observer that hears nothing.
pub struct Quiet;
impl CompareObserver for Quiet {}

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("loading the archive for {side}: {source}")]
    LoadCpu { side: DeviceSpec, source: ReplayError },
    #[error("replaying on {side}: {source}")]
    Cpu { side: DeviceSpec, source: ReplayError },
    #[error("opening cuda:{ordinal}: {source}")]
    OpenCuda { ordinal: u32, source: OpenError },
    #[error("loading the archive for cuda:{ordinal}: {source}")]
    LoadCuda { ordinal: u32, source: CudaError },
    #[error("replaying on cuda:{ordinal}: {source}")]
    Cuda { ordinal: u32, source: CudaError },
    #[error("compare holds one GPU beside a CPU engine, or two CPU engines: compare each GPU with cpu")]
    TwoGpus,
}

/// Replays `a_archive` on side `a` and `b_archive` (the same archive, or one of the same shape) on
/// side `b`, op by op, and judges every op's writes. A CPU side that names no engine runs native
/// code ([`Engine::Jit`]).
pub fn compare(
    a_archive: &Archive<'_>,
    b_archive: &Archive<'_>,
    (a, b): (DeviceSpec, DeviceSpec),
    options: CompareOptions,
    observer: &mut dyn CompareObserver,
) -> Result<Outcome, CompareError> {
    let (a, b) = (a.engine_or(Engine::Jit), b.engine_or(Engine::Jit));
    let plan = Plan::build(a_archive);
    let mut comparison = Comparison::new(a_archive, &plan, options.all).keeping_bytes();
    let replay_options = |engine| ReplayOptions {
        instruction_budget: options.budget,
        engine,
        limits: options.limits,
        cancel: options.cancel.clone(),
        jit_dump: crate::jit_dump::from_env(),
        mma_model: options.mma_model,
        ..Default::default()
    };
    fn load<'a>(
        archive: &Archive<'a>,
        side: DeviceSpec,
        options: ReplayOptions,
    ) -> Result<CpuReplay<'a>, CompareError> {
        CpuReplay::new(archive, options).map_err(|source| CompareError::LoadCpu { side, source })
    }
    let cpu = |archive, side, engine| load(archive, side, replay_options(engine));
    let report = |comparison: &mut Comparison, observer: &mut dyn CompareObserver| {
        if let Some(j) = comparison.judged() {
            observer.judged(j);
        }
        for p in comparison.take_parted() {
            observer.parted(&comparison.divergences()[p.divergence], &p.a, &p.b);
        }
    };
    match (a, b) {
        (DeviceSpec::Cpu(ea), DeviceSpec::Cpu(eb)) => {
            let (mut ra, mut rb) =
                (cpu(a_archive, a, ea.unwrap_or_default())?, cpu(b_archive, b, eb.unwrap_or_default())?);
            let (mut ca, mut cb) = (Cursor::default(), Cursor::default());
            let step_error = |side| move |source| CompareError::Cpu { side, source };
            loop {
                let oa = ra.step(&mut ca, &mut NoObserver).map_err(step_error(a))?;
                let ob = rb.step(&mut cb, &mut NoObserver).map_err(step_error(b))?;
                let go = comparison.after_op(
                    oa,
                    ob,
                    |r| ra.read_region(r).map_err(step_error(a)),
                    |r| rb.read_region(r).map_err(step_error(b)),
                )?;
                report(&mut comparison, observer);
                if !go {
                    break;
                }
            }
        }
        (DeviceSpec::Cuda(ordinal), DeviceSpec::Cpu(engine)) | (DeviceSpec::Cpu(engine), DeviceSpec::Cuda(ordinal)) => {
            let cpu_side = DeviceSpec::Cpu(engine);
            let engine = engine.unwrap_or_default();
            let cuda_first = matches!(a, DeviceSpec::Cuda(_));
            let (cpu_archive, gpu_archive) = if cuda_first { (b_archive, a_archive) } else { (a_archive, b_archive) };
            let mut host = cpu(cpu_archive, cpu_side, engine)?;
            let device = crate::cuda::Device::open(ordinal as usize)
                .map_err(|source| CompareError::OpenCuda { ordinal, source })?;
            let gpu_options = crate::cuda::ReplayOptions {
                mode: crate::cuda::Mode::Stream,
                sync_each_op: true,
                ..Default::default()
            };
            let mut gpu = crate::cuda::CudaReplay::load(&device, gpu_archive, gpu_options)
                .map_err(|source| CompareError::LoadCuda { ordinal, source })?;
            let mut cursor = Cursor::default();
            let mut failed: Option<CompareError> = None;
            let mut going = true;
            let cpu_error = move |source| CompareError::Cpu { side: cpu_side, source };
            let gpu_error = move |source| CompareError::Cuda { ordinal, source };
            let mut hook = |gpu: &mut crate::cuda::CudaReplay, op: OpId| -> Result<(), CudaError> {
                if !going {
                    return Ok(());
                }
                let result = host.step(&mut cursor, &mut NoObserver).map_err(cpu_error).and_then(|theirs| {
                    let read_cpu = |r| host.read_region(r).map_err(cpu_error);
                    let read_gpu = |r| gpu.read_region(r).map_err(gpu_error);
                    if cuda_first {
                        comparison.after_op(Some(op), theirs, read_gpu, read_cpu)
                    } else {
                        comparison.after_op(theirs, Some(op), read_cpu, read_gpu)
                    }
                });
                match result {
                    Ok(go) => {
                        report(&mut comparison, observer);
                        going = go;
                    }
                    Err(e) => {
                        failed = Some(e);
                        going = false;
                    }
                }
                Ok(())
            };
            gpu.replay_each_op(&mut hook).map_err(gpu_error)?;
            if let Some(e) = failed {
                return Err(e);
            }
            if going {
                // The GPU's iteration is over: so must the CPU's be.
                let rest = host.step(&mut cursor, &mut NoObserver).map_err(cpu_error)?;
                let (oa, ob) = if cuda_first { (None, rest) } else { (rest, None) };
                comparison.after_op(oa, ob, |_| Ok::<_, CompareError>(Vec::new()), |_| Ok(Vec::new()))?;
            }
        }
        (DeviceSpec::Cuda(_), DeviceSpec::Cuda(_)) => return Err(CompareError::TwoGpus),
    }
    Ok(comparison.finish())
}

/// Whether `b` can be replayed beside `a` op by op: the same ops (kind and kernel name, in order)
/// over regions of the same sizes and types, in order (names may differ: a capture numbers the
/// buffers nobody named).
pub fn same_shape(a: &Archive, b: &Archive) -> Result<(), ShapeError> {
    if a.op_count() != b.op_count() || a.region_count() != b.region_count() {
        return Err(ShapeError::Counts {
            ops: b.op_count(),
            regions: b.region_count(),
            a_ops: a.op_count(),
            a_regions: a.region_count(),
        });
    }
    for (ra, rb) in a.regions().zip(b.regions()) {
        if (ra.size, ra.dtype) != (rb.size, rb.dtype) {
            return Err(ShapeError::Region {
                region: ra.id,
                name: rb.name.to_string(),
                size: rb.size,
                a_name: ra.name.to_string(),
                a_size: ra.size,
            });
        }
    }
    for id in 0..a.op_count() as OpId {
        let (oa, ob) = (a.op(id), b.op(id));
        let same = match (&oa, &ob) {
            (Op::Launch(x), Op::Launch(y)) => a.kernel(x.kernel).name == b.kernel(y.kernel).name,
            _ => oa.kind_name() == ob.kind_name(),
        };
        if !same {
            return Err(ShapeError::Op { op: id, label: b.op_label(id), a_label: a.op_label(id) });
        }
    }
    Ok(())
}

/// How archive `b` differs in shape from `a` ([`same_shape`]): said from `b`'s side ("here"),
/// against `a` ("there").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("{ops} ops and {regions} regions against {a_ops} ops and {a_regions} regions")]
    Counts { ops: usize, regions: usize, a_ops: usize, a_regions: usize },
    #[error("region {region} is {name:?} of {size} bytes here and {a_name:?} of {a_size} bytes there")]
    Region { region: RegionId, name: String, size: u64, a_name: String, a_size: u64 },
    #[error("op {op} is {label} here and {a_label} there")]
    Op { op: OpId, label: String, a_label: String },
}
