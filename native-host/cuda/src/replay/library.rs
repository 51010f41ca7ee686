//! Library ops in the CUDA replay: each becomes a kernel step, one launch of one of recap's
//! library kernels (`crate::library`: what it launches and why one block), so the graph builder,
//! stream mode, per-op timing and rebinding treat it as any launch. The kernels' module is loaded
//! the first time an archive needs it; a sort's scratch keys and values are the replay's own
//! device memory, one allocation per op (two sorts on parallel branches of the graph never share
//! one), freed with the replay.

use cudarc::driver::sys::CUdeviceptr;
use shared::archive::{LibraryOp, OpId, Reloc};

use super::step::{KernelStep, Step};
use super::{CudaError, CudaReplay};
use crate::driver::{call, Code, Func};
use crate::library::{self, Arg, ENTRIES};

/// The library kernels of one replay: their functions on each slot's GPU, once loaded, and the
/// scratch buffers its steps use.
#[derive(Default)]
pub(super) struct LibraryKernels {
    /// Per slot, the function of each of [`ENTRIES`].
    funcs: Option<Vec<Vec<Func>>>,
    /// Scratch allocations: (slot, address).
    scratch: Vec<(usize, CUdeviceptr)>,
}

impl LibraryKernels {
    /// Frees the scratch of `slot`, whose context is current. Called once, when the replay drops.
    pub(super) fn release(&mut self, slot: usize) {
        for (_, addr) in self.scratch.iter().filter(|(s, _)| *s == slot) {
            // SAFETY: allocated by this replay in this slot's context and freed once here.
            unsafe { cudarc::driver::sys::cuMemFree_v2(*addr) };
        }
        self.scratch.retain(|(s, _)| *s != slot);
    }
}

impl CudaReplay {
    /// The step that runs library op `id` on `slot`: the module loaded (as a library when
    /// `as_library`) if it is the first, operands checked for the alignment the kernels load
    /// them with, scratch allocated, parameters relocated to the operands' regions.
    pub(super) fn library_step(
        &mut self,
        id: OpId,
        op: &LibraryOp,
        slot: usize,
        as_library: bool,
    ) -> Result<Step, CudaError> {
        if self.library.funcs.is_none() {
            let mut image = library::LIBRARY_MODULE.as_bytes().to_vec();
            image.push(0);
            let code = Code::load(&image, as_library).map_err(|(error, log)| CudaError::Jit {
                module: "recap library kernels".into(),
                error,
                log,
            })?;
            self.modules.push(code);
            let mut per_slot = Vec::new();
            for s in &self.slots {
                s.device.bind()?;
                let funcs = ENTRIES.iter().map(|e| super::load::get_function(code, e)).collect::<Result<_, _>>()?;
                per_slot.push(funcs);
            }
            self.library.funcs = Some(per_slot);
        }
        let launch = library::launch_of(op);
        let operands = op.operands().map_err(|(_, why)| CudaError::Invalid(format!("op {id}: {why}")))?;
        for o in &operands {
            let align = library::operand_align(op, o.at).unwrap_or(1);
            if !(self.regions[o.at.region as usize].addr + o.at.offset).is_multiple_of(align) {
                return Err(CudaError::Invalid(format!(
                    "op {id}: {}'s {} at byte {} of region {} is not {align}-byte aligned, as recap's library \
                     kernels load it; replay the archive on the CPU (--device cpu)",
                    op.name(),
                    o.role,
                    o.at.offset,
                    o.at.region
                )));
            }
        }
        self.slots[slot].device.bind()?;
        let mut temp = [0; 2];
        for (t, bytes) in temp.iter_mut().zip([launch.temp.0, launch.temp.1]) {
            if bytes > 0 {
                call!(cuMemAlloc_v2(t, bytes as usize)).map_err(|e| self.op_error(id, e))?;
                self.library.scratch.push((slot, *t));
            }
        }
        self.slots[0].device.bind()?;
        let regions = &self.regions;
        let (params, offsets) = launch.params(|a| match a {
            Arg::Operand(at) => regions[at.region as usize].addr + at.offset,
            Arg::TempKeys => temp[0],
            Arg::TempValues => temp[1],
            Arg::U32(_) => 0,
        });
        let relocs = launch
            .args
            .iter()
            .zip(&offsets)
            .filter_map(|(a, &at)| match a {
                Arg::Operand(o) => Some(Reloc { offset: at as u64, target: o.region, target_offset: o.offset }),
                _ => None,
            })
            .collect();
        let funcs = self.library.funcs.as_ref().expect("loaded above");
        Ok(Step::Kernel(KernelStep {
            func: funcs[slot][launch.entry],
            grid: [1, 1, 1],
            block: [library::THREADS, 1, 1],
            shared: 0,
            params,
            offsets,
            relocs,
            maps: Vec::new(),
            waits: false,
            slot,
            attrs: Vec::new(),
        }))
    }
}
