//! The replay's regions and launches from outside: reading and writing regions (by id or by
//! binding name, from the host or another library's device memory), new launch parameters applied
//! as graph exec updates without a rebuild, and the expected-state check.

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUdeviceptr, CUgraphNode};
use shared::archive::{Archive, Direction, OpId, RegionId};
use shared::check::RegionCheck;

use super::load::host_buffer;
use super::step::{patch, patch_maps, RegionAlloc, Step};
use super::{CudaError, CudaReplay};
use crate::driver::call;

/// Above this many changed launches, parameter changes go through one `cuGraphExecUpdate`
/// instead of one `cuGraphExecKernelNodeSetParams` per node.
pub const SET_PARAMS_LIMIT: usize = 16;

impl CudaReplay {
    pub(super) fn region_index(&self, region: RegionId) -> Result<&RegionAlloc, CudaError> {
        self.regions.get(region as usize).ok_or_else(|| CudaError::Invalid(format!("no region {region}")))
    }

    /// Overwrites `bytes.len()` bytes of a region at `offset` (waits for earlier replays first).
    pub fn write_region_at(&mut self, region: RegionId, offset: u64, bytes: &[u8]) -> Result<(), CudaError> {
        self.ready()?;
        let r = self.region_index(region)?;
        if offset.checked_add(bytes.len() as u64).is_none_or(|e| e > r.size) {
            return Err(CudaError::Invalid(format!(
                "{} bytes at offset {offset} do not fit region {region} of {} bytes",
                bytes.len(),
                r.size
            )));
        }
        let (addr, slot) = (r.addr + offset, r.slot);
        let copied =
            self.slots[slot].device.bind().map_err(CudaError::from).and_then(|_| self.copy_in(slot, addr, bytes));
        copied.map_err(|e| self.fail(e))?;
        self.slots[0].device.bind()?;
        Ok(())
    }

    /// Reads a whole region back (waits for earlier replays first).
    pub fn read_region(&mut self, region: RegionId) -> Result<Vec<u8>, CudaError> {
        self.ready()?;
        let r = self.region_index(region)?;
        let (addr, size) = (r.addr, r.size as usize);
        let mut out = host_buffer(r.size, &region.to_string())?;
        let res = (|| {
            for s in &self.slots {
                s.device.bind()?;
                call!(cuStreamSynchronize(s.stream))?;
            }
            self.slots[self.regions[region as usize].slot].device.bind()?;
            if size > 0 {
                call!(cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, addr, size))?;
            }
            self.slots[0].device.bind()
        })();
        self.current = 0;
        res.map_err(|e| self.fail(e.into()))?;
        Ok(out)
    }

    /// Copies a whole region from `len` bytes at device address `src`, memory this replay did not
    /// allocate (another library's tensor in the same process), device to device: unified
    /// addressing lets the driver copy between any two contexts' allocations without the host.
    /// Waits for earlier replays first, and for the producer's `stream` where it names one (the
    /// `__cuda_array_interface__` convention: 1 and 2 are the legacy and per-thread default streams,
    /// as in the driver's own numbering).
    pub fn copy_region_from_device(
        &mut self,
        region: RegionId,
        src: CUdeviceptr,
        len: u64,
        stream: Option<u64>,
    ) -> Result<(), CudaError> {
        if let Some(s) = stream {
            self.ready()?;
            call!(cuStreamSynchronize(s as sys::CUstream))?;
        }
        self.copy_device(region, len, |addr| (addr, src))
    }

    /// Copies a whole region to `len` bytes at device address `dst` (see
    /// [`CudaReplay::copy_region_from_device`]). Waits for earlier replays first.
    pub fn copy_region_to_device(&mut self, region: RegionId, dst: CUdeviceptr, len: u64) -> Result<(), CudaError> {
        self.copy_device(region, len, |addr| (dst, addr))
    }

    /// One synchronous device-to-device copy of a whole region; `ends` gives (dst, src) from the
    /// region's address.
    fn copy_device(
        &mut self,
        region: RegionId,
        len: u64,
        ends: impl FnOnce(CUdeviceptr) -> (CUdeviceptr, CUdeviceptr),
    ) -> Result<(), CudaError> {
        self.ready()?;
        let r = self.region_index(region)?;
        if len != r.size {
            return Err(CudaError::Invalid(format!("region {region} holds {} bytes, not {len}", r.size)));
        }
        let (dst, src) = ends(r.addr);
        let slot = r.slot;
        let res = (|| {
            for s in &self.slots {
                s.device.bind()?;
                call!(cuStreamSynchronize(s.stream))?;
            }
            self.slots[slot].device.bind()?;
            if len > 0 {
                call!(cuMemcpy(dst, src, len as usize))?;
            }
            self.slots[0].device.bind()
        })();
        self.current = 0;
        res.map_err(|e| self.fail(e.into()))
    }

    fn binding(&self, name: &str) -> Result<(RegionId, Direction), CudaError> {
        self.bindings
            .iter()
            .find(|b| b.0 == name)
            .map(|b| (b.1, b.2))
            .ok_or_else(|| CudaError::Invalid(format!("the archive has no binding named {name}")))
    }

    /// Copies new input bytes into the region bound to `name` before the next replay.
    pub fn set_input(&mut self, name: &str, bytes: &[u8]) -> Result<(), CudaError> {
        let (region, dir) = self.binding(name)?;
        if dir == Direction::Out {
            return Err(CudaError::Invalid(format!("binding {name} is an output")));
        }
        let size = self.region_index(region)?.size;
        if bytes.len() as u64 != size {
            return Err(CudaError::Invalid(format!("binding {name} holds {size} bytes, not {}", bytes.len())));
        }
        self.write_region_at(region, 0, bytes)
    }

    /// Reads the region bound to `name`.
    pub fn read_output(&mut self, name: &str) -> Result<Vec<u8>, CudaError> {
        let (region, _) = self.binding(name)?;
        self.read_region(region)
    }

    /// Replaces the parameter bytes of launch `op` (pointer slots are relocated again); takes
    /// effect at the next replay without rebuilding the graph.
    pub fn set_launch_params(&mut self, op: OpId, params: &[u8]) -> Result<(), CudaError> {
        let regions = &self.regions;
        let Some(Step::Kernel(k)) = self.steps.get_mut(op as usize) else {
            return Err(CudaError::Invalid(format!("op {op} is not a launch")));
        };
        if params.len() != k.params.len() {
            return Err(CudaError::Invalid(format!(
                "op {op} takes {} parameter bytes, not {}",
                k.params.len(),
                params.len()
            )));
        }
        k.params.copy_from_slice(params);
        patch(&mut k.params, k.relocs.iter().copied(), regions);
        patch_maps(&mut k.params, &k.maps);
        self.pending_params.insert(op);
        self.serving.invalidate();
        Ok(())
    }

    pub(super) fn apply_param_changes(&mut self) -> Result<(), CudaError> {
        if self.pending_params.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending_params);
        let contexts: Vec<sys::CUcontext> = self.slots.iter().map(|s| s.device.context()).collect();
        let Some(g) = &self.graph else { return Ok(()) };
        let (exec, graph) = (g.exec, g.graph);
        let nodes: Vec<(OpId, CUgraphNode)> = pending.iter().map(|op| (*op, g.kernel_nodes[op])).collect();
        if nodes.len() <= SET_PARAMS_LIMIT {
            let mut ok = true;
            for &(op, node) in &nodes {
                let Step::Kernel(k) = &mut self.steps[op as usize] else { continue };
                let mut args = k.arg_pointers();
                let p = k.node_params(&mut args, contexts[k.slot]);
                if call!(cuGraphExecKernelNodeSetParams_v2(exec, node, &p)).is_err() {
                    ok = false;
                    break;
                }
            }
            if ok {
                return Ok(());
            }
        }
        // Many changes (or a node the driver would not update alone): update the graph's nodes,
        // then the executable graph from it in one call. The topology is unchanged, so this
        // never needs a new instantiation unless the driver refuses the update.
        for &(op, node) in &nodes {
            let Step::Kernel(k) = &mut self.steps[op as usize] else { continue };
            let mut args = k.arg_pointers();
            let p = k.node_params(&mut args, contexts[k.slot]);
            call!(cuGraphKernelNodeSetParams_v2(node, &p)).map_err(|e| self.op_error(op, e))?;
        }
        // SAFETY: plain data; the driver fills it in.
        let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
        if call!(cuGraphExecUpdate_v2(exec, graph, &mut info)).is_err() {
            let mut fresh = std::ptr::null_mut();
            call!(cuGraphInstantiateWithFlags(&mut fresh, graph, 0))?;
            call!(cuGraphExecDestroy(exec)).ok();
            if let Some(g) = &mut self.graph {
                g.exec = fresh;
            }
        }
        Ok(())
    }

    /// Judges every region that has an expected state (`shared::check::judge`, as every replay).
    pub fn check(&mut self, archive: &Archive) -> Result<Vec<RegionCheck>, CudaError> {
        Ok(shared::check::judge(archive, &Default::default(), &mut |r| self.read_region(r), &[])?.regions)
    }

    /// Applies parameter changes made with [`CudaReplay::set_launch_params`] now rather than at
    /// the next launch.
    pub fn apply_updates(&mut self) -> Result<(), CudaError> {
        self.ready()?;
        self.apply_param_changes().map_err(|e| self.fail(e))
    }
}
