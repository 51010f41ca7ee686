//! The engine a recorded graph runs on: the archive replay of its devices' kind (a
//! `recap::device::DeviceReplay`, as every replay of an archive), built from the recording at the
//! first launch. On CUDA that is the `cuda/` engine's CUDA graph, on the GPUs the capture API already
//! opened; on the CPU it is
//! `shared::replay`, so a graph's while, if, alloc and free mean on the CPU exactly what they mean
//! in every other CPU replay of an archive (a while still true at its limit is
//! `ReplayError::LoopLimit`, a scratch region used outside its life is refused by name).
//!
//! The hard idea: the engine owns its regions, at addresses of its own, while the caller's buffers
//! live in the devices' memories. Each launch copies every buffer into its region, rewriting the
//! pointer fields to the engine's addresses; runs; and copies every region back, rewriting the
//! pointer fields to the live addresses. A failed run copies nothing back.

use std::collections::HashMap;
use std::io::Cursor;

use shared::archive::{Archive, RegionId};
use shared::replay::{NoObserver, ReplayLimits, ReplayOptions};

use super::device::{Backend, RawBuffer};
use super::graph::Graph;
use super::{usage, CaptureError, CudaFailure, Result};
use crate::device::{DeviceError, DeviceReplay, DeviceSpec, OpenOptions};

self_cell::self_cell!(
    /// The engine and the archive bytes it reads.
    struct Loaded {
        owner: Vec<u8>,
        #[not_covariant]
        dependent: DeviceReplay,
    }
);

/// The engine's error as the capture API says it: on CUDA, naming the GPU `gpu`.
fn engine_error(gpu: usize) -> impl Fn(DeviceError) -> CaptureError {
    move |e| match e {
        DeviceError::Cpu(e) => CaptureError::from(e),
        DeviceError::Cuda(e) => CaptureError::Cuda { ordinal: gpu, source: Box::new(CudaFailure::Replay(e)) },
    }
}

/// The engine's address of `region` (a region that holds a buffer is always mapped).
fn address(replay: &Loaded, region: RegionId) -> Result<u64> {
    replay
        .with_dependent(|_, r| r.region_address(region))
        .ok_or_else(|| CaptureError::Usage(format!("the graph's replay has no region {region}")))
}

/// A graph's engine and, per archive region, the live buffer it stands for (`None` for scratch).
pub(super) struct Engine {
    replay: Loaded,
    /// The GPU that names the engine's errors (on CUDA, the graph's first).
    gpu: usize,
    buffers: Vec<Option<RawBuffer>>,
    /// The region of each buffer, by buffer id.
    region_of: HashMap<u64, RegionId>,
}

impl Engine {
    /// Writes `graph` as an archive and loads it on its devices' engine.
    pub fn build(graph: &Graph) -> Result<Engine> {
        let (out, buffers) = graph.write_archive(Cursor::new(Vec::new()), &[], &[], &[])?;
        let bytes = out.into_inner();
        let cuda = graph
            .devices()
            .iter()
            .map(|d| match d.backend() {
                Backend::Cuda(c) => Some(c.device().clone()),
                Backend::Cpu(_) => None,
            })
            .collect::<Option<Vec<_>>>();
        if cuda.is_none() && graph.devices().iter().any(|d| d.is_cuda()) {
            return usage("a graph of several devices runs on GPUs only or on the CPU only");
        }
        let gpu = cuda.as_ref().map_or(0, |gpus| gpus[0].ordinal);
        let replay = match &cuda {
            // The GPUs hold their own copy of everything the archive says: its bytes go once loaded.
            Some(gpus) => {
                let archive = Archive::open(&bytes)?;
                Loaded::try_new(Vec::new(), |_| {
                    DeviceReplay::load_on(&archive, gpus, Default::default()).map_err(engine_error(gpu))
                })?
            }
            None => Loaded::try_new(bytes, |bytes| {
                let archive = Archive::open(bytes)?;
                // The archive is this process's own recording: no limits but the machine's.
                let cpu = ReplayOptions {
                    limits: ReplayLimits::UNLIMITED,
                    jit_dump: crate::jit_dump::from_env(),
                    ..ReplayOptions::default()
                };
                DeviceReplay::open(&archive, DeviceSpec::Cpu(None), OpenOptions { cpu, ..OpenOptions::default() })
                    .map_err(engine_error(gpu))
            })?,
        };
        let region_of =
            buffers.iter().enumerate().filter_map(|(i, b)| Some((b.as_ref()?.id(), i as RegionId))).collect();
        Ok(Engine { replay, gpu, buffers, region_of })
    }

    /// One launch of the graph over its live buffers.
    pub fn run(&mut self, graph: &Graph) -> Result<()> {
        self.copy_in(graph)?;
        graph.devices().iter().try_for_each(|d| d.backend().synchronize())?;
        let failed = engine_error(self.gpu);
        self.replay.with_dependent_mut(|_, r| match r {
            DeviceReplay::Cuda(r) => r.replay().map(drop).map_err(|e| failed(e.into())),
            DeviceReplay::Cpu(r) => r.run_iteration(&mut NoObserver).map(drop).map_err(|e| {
                // Scratch a failed iteration left allocated is released for the next launch.
                let _ = r.restore_initial();
                failed(e.into())
            }),
        })?;
        self.copy_out(graph)?;
        graph.devices().iter().try_for_each(|d| d.backend().synchronize())
    }

    /// Every buffer into its region, pointer fields holding the engine's addresses.
    fn copy_in(&mut self, graph: &Graph) -> Result<()> {
        let Engine { replay, buffers, region_of, .. } = self;
        let on_cpu = replay.with_dependent(|_, r| matches!(r, DeviceReplay::Cpu(_)));
        let target = |replay: &Loaded, b: &RawBuffer, offset: u64| match region_of.get(&b.id()) {
            Some(&r) => Ok(address(replay, r)? + offset),
            None => usage(format!("buffer {} gained a pointer field after the graph first ran", b.name())),
        };
        for (i, b) in buffers.iter().enumerate() {
            let Some(b) = b else { continue };
            let region = i as RegionId;
            if on_cpu {
                let mut bytes = b.read_bytes()?;
                for f in b.pointer_fields() {
                    let at = f.offset as usize;
                    bytes[at..at + 8].copy_from_slice(&target(replay, &f.target, f.target_offset)?.to_le_bytes());
                }
                replay.with_dependent_mut(|_, r| match r {
                    DeviceReplay::Cpu(r) => r.write_region(region, &bytes).map_err(CaptureError::from),
                    DeviceReplay::Cuda(_) => Ok(()),
                })?;
                continue;
            }
            // Each buffer moves on its own GPU, where the graph placed its region.
            let backend = graph.region_device(region).backend();
            let dst = address(replay, region)?;
            backend.copy(b.addr(), dst, b.byte_len())?;
            for f in b.pointer_fields() {
                backend.write(dst + f.offset, &target(replay, &f.target, f.target_offset)?.to_le_bytes())?;
            }
        }
        Ok(())
    }

    /// Every region back into its buffer, pointer fields holding the live addresses.
    fn copy_out(&self, graph: &Graph) -> Result<()> {
        for (i, b) in self.buffers.iter().enumerate() {
            let Some(b) = b else { continue };
            let region = i as RegionId;
            let backend = graph.region_device(region).backend();
            let bytes = self.replay.with_dependent(|_, r| match r {
                DeviceReplay::Cpu(r) => r.read_region(region).map(Some).map_err(CaptureError::from),
                DeviceReplay::Cuda(_) => Ok(None),
            })?;
            match bytes {
                Some(bytes) => backend.write(b.addr(), &bytes)?,
                None => backend.copy(address(&self.replay, region)?, b.addr(), b.byte_len())?,
            }
            for f in b.pointer_fields() {
                backend.write(b.addr() + f.offset, &(f.target.addr() + f.target_offset).to_le_bytes())?;
            }
        }
        Ok(())
    }
}
