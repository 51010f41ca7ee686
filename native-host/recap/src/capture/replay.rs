//! The engine a recorded graph runs on: the archive replay of its devices' kind, built from the
//! recording at the first launch. On CUDA that is the `cuda/` engine's CUDA graph; on the CPU it is
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
use shared::replay::{CpuReplay, NoObserver, ReplayError, ReplayLimits, ReplayOptions};

use super::device::{Backend, RawBuffer};
use super::graph::Graph;
use super::{usage, CaptureError, CudaFailure, Result};

self_cell::self_cell!(
    /// A CPU replay and the archive bytes it reads.
    struct CpuLoaded {
        owner: Vec<u8>,
        #[not_covariant]
        dependent: CpuReplay,
    }
);

enum Kind {
    /// The CUDA graph, and the GPU that names its errors.
    Cuda(Box<crate::cuda::CudaReplay>, usize),
    Cpu(CpuLoaded),
}

impl Kind {
    /// The engine's address of `region` (a region that holds a buffer is always mapped).
    fn address(&self, region: RegionId) -> Result<u64> {
        let at = match self {
            Kind::Cuda(r, _) => r.region_address(region),
            Kind::Cpu(r) => r.with_dependent(|_, r| r.region_address(region)),
        };
        at.ok_or_else(|| CaptureError::Usage(format!("the graph's replay has no region {region}")))
    }
}

/// A graph's engine and, per archive region, the live buffer it stands for (`None` for scratch).
pub(super) struct Engine {
    kind: Kind,
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
        let kind = match cuda {
            Some(gpus) => {
                let archive = Archive::open(&bytes)?;
                let ordinal = gpus[0].ordinal;
                let replay = crate::cuda::CudaReplay::load_on(&gpus, &archive, Default::default())
                    .map_err(|e| CaptureError::Cuda { ordinal, source: Box::new(CudaFailure::Replay(e)) })?;
                Kind::Cuda(Box::new(replay), ordinal)
            }
            None if graph.devices().iter().any(|d| d.is_cuda()) => {
                return usage("a graph of several devices runs on GPUs only or on the CPU only")
            }
            None => Kind::Cpu(CpuLoaded::try_new(bytes, |bytes| {
                let archive = Archive::open(bytes).map_err(ReplayError::from)?;
                // The archive is this process's own recording: no limits but the machine's.
                let options = ReplayOptions {
                    limits: ReplayLimits::UNLIMITED,
                    jit_dump: crate::jit_dump::from_env(),
                    ..ReplayOptions::default()
                };
                CpuReplay::new(&archive, options).map_err(CaptureError::from)
            })?),
        };
        let region_of =
            buffers.iter().enumerate().filter_map(|(i, b)| Some((b.as_ref()?.id(), i as RegionId))).collect();
        Ok(Engine { kind, buffers, region_of })
    }

    /// One launch of the graph over its live buffers.
    pub fn run(&mut self, graph: &Graph) -> Result<()> {
        self.copy_in(graph)?;
        graph.devices().iter().try_for_each(|d| d.backend().synchronize())?;
        match &mut self.kind {
            Kind::Cuda(r, ordinal) => {
                r.replay()
                    .map_err(|e| CaptureError::Cuda { ordinal: *ordinal, source: Box::new(CudaFailure::Replay(e)) })?;
            }
            Kind::Cpu(r) => r.with_dependent_mut(|_, r| {
                r.run_iteration(&mut NoObserver).map(drop).map_err(|e| {
                    // Scratch a failed iteration left allocated is released for the next launch.
                    let _ = r.restore_initial();
                    CaptureError::from(e)
                })
            })?,
        }
        self.copy_out(graph)?;
        graph.devices().iter().try_for_each(|d| d.backend().synchronize())
    }

    /// Every buffer into its region, pointer fields holding the engine's addresses.
    fn copy_in(&mut self, graph: &Graph) -> Result<()> {
        let Engine { kind, buffers, region_of } = self;
        let target = |kind: &Kind, b: &RawBuffer, offset: u64| match region_of.get(&b.id()) {
            Some(&r) => Ok(kind.address(r)? + offset),
            None => usage(format!("buffer {} gained a pointer field after the graph first ran", b.name())),
        };
        for (i, b) in buffers.iter().enumerate() {
            let Some(b) = b else { continue };
            let region = i as RegionId;
            if matches!(kind, Kind::Cpu(_)) {
                let mut bytes = b.read_bytes()?;
                for f in b.pointer_fields() {
                    let at = f.offset as usize;
                    bytes[at..at + 8].copy_from_slice(&target(kind, &f.target, f.target_offset)?.to_le_bytes());
                }
                if let Kind::Cpu(r) = kind {
                    r.with_dependent_mut(|_, r| r.write_region(region, &bytes).map_err(CaptureError::from))?;
                }
                continue;
            }
            // Each buffer moves on its own GPU, where the graph placed its region.
            let backend = graph.region_device(region).backend();
            let dst = kind.address(region)?;
            backend.copy(b.addr(), dst, b.byte_len())?;
            for f in b.pointer_fields() {
                backend.write(dst + f.offset, &target(kind, &f.target, f.target_offset)?.to_le_bytes())?;
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
            match &self.kind {
                Kind::Cuda(..) => backend.copy(self.kind.address(region)?, b.addr(), b.byte_len())?,
                Kind::Cpu(r) => backend
                    .write(b.addr(), &r.with_dependent(|_, r| r.read_region(region).map_err(CaptureError::from))?)?,
            }
            for f in b.pointer_fields() {
                backend.write(b.addr() + f.offset, &(f.target.addr() + f.target_offset).to_le_bytes())?;
            }
        }
        Ok(())
    }
}
