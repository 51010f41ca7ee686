//! The serving path: one call is the caller's inputs copied in, the archive's work and its outputs
//! copied out, all ONE executable graph launched on the caller's stream, without waiting unless
//! the call asks for host results.
//!
//! A call's shape (which regions come from or go to device memory or the host, and whether the
//! kernels read and write the caller's arrays in place) picks an executable graph built once for
//! that shape and kept: memcpy nodes before the archive's first nodes and after its last ones,
//! around the archive's own nodes (graph.rs builds them into the same graph). A later call with
//! other device pointers only changes those nodes (`cuGraphExecMemcpyNodeSetParams`), or with
//! `zero_copy` the kernel nodes whose parameters point into a bound region
//! (`cuGraphExecKernelNodeSetParams`): an update costs about half a microsecond, a rebuild
//! milliseconds.
//!
//! A call runs over the regions as the previous call left them, as a CUDA graph replayed by its
//! program does: the regions it gives replace theirs, the rest (weights the archive only reads, a
//! sum it keeps) carry over. Restoring the initial state every call would copy every region a
//! kernel can reach, weights included, since the plan cannot tell a kernel's reads from its
//! writes; a replay (`Session`) restores it, the serving path does not. Host bytes go through
//! page-locked buffers, one per region, which the graph copies from and to; a call with host
//! inputs waits for the previous call's graph before it overwrites them.

use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::driver::sys::{self, CUdeviceptr, CUgraphNode};
use shared::archive::{Archive, Direction, OpId, RegionId};

use super::step::{linear_copy, Mem, Step};
use super::{CudaError, CudaReplay, Mode};
use crate::driver::{call, DriverError};

/// How many shapes of call keep their executable graph; the least recently used goes first.
const SHAPES: usize = 8;

/// Where a call's input region gets its bytes.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// Device memory of the caller's, as long as the region (another library's array).
    Device(CUdeviceptr),
    /// Host bytes, as long as the region.
    Host(&'a [u8]),
}

/// Where a call's output region goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// Device memory of the caller's, as long as the region.
    Device(CUdeviceptr),
    /// A page-locked buffer of the replay's, read with [`CudaReplay::served`] once
    /// [`CudaReplay::serve_wait`] has returned.
    Host,
}

/// One serving call.
#[derive(Clone, Copy, Debug)]
pub struct ServeCall<'a> {
    pub inputs: &'a [(RegionId, Source<'a>)],
    pub outputs: &'a [(RegionId, Sink)],
    /// The caller's stream (a `CUstream` as an integer; 0 is the legacy default stream), or `None`
    /// for the replay's own.
    pub stream: Option<u64>,
    /// The kernels' parameters point straight at the caller's device arrays instead of copies.
    pub zero_copy: bool,
}

/// What distinguishes one call's graph from another's: per bound region, whether its end is on
/// the host.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Shape {
    inputs: Vec<(RegionId, bool)>,
    outputs: Vec<(RegionId, bool)>,
    zero_copy: bool,
}

/// A memcpy node between a region and the caller's device memory, and the pointer it copies
/// from or to now.
struct CopyNode {
    node: CUgraphNode,
    /// Its place among the call's device ends (inputs, then outputs).
    at: usize,
    region: CUdeviceptr,
    len: u64,
    into_region: bool,
    ptr: CUdeviceptr,
}

/// A kernel node whose parameters point into regions bound in place (`zero_copy`).
struct InPlace {
    op: OpId,
    node: CUgraphNode,
    /// Parameter offset, index into [`Served::bound`], offset inside the region.
    slots: Vec<(usize, usize, u64)>,
}

/// The executable graph of one shape.
struct Served {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// The device ends' copies, in the order of the call's inputs and then its outputs.
    copies: Vec<CopyNode>,
    /// Regions bound in place, with their alignment and the address the kernels use now.
    bound: Vec<(RegionId, u64, CUdeviceptr)>,
    launches: Vec<InPlace>,
    used: u64,
}

/// The serving path's state in a replay: graphs by shape, the buffers they copy through.
#[derive(Default)]
pub(super) struct Serving {
    shapes: HashMap<Shape, Served>,
    pinned: HashMap<RegionId, (*mut u8, usize)>,
    /// Recorded after every call's graph; the stream it was recorded on.
    done: Option<(sys::CUevent, sys::CUstream)>,
    /// Launch parameters changed since the graphs were built: they are built again.
    stale: bool,
    calls: u64,
}

impl Serving {
    /// The graphs are out of date (a launch's parameters changed).
    pub(super) fn invalidate(&mut self) {
        self.stale = true;
    }

    /// Destroys every graph; the context must be current.
    fn drop_graphs(&mut self) {
        for (_, s) in self.shapes.drain() {
            // SAFETY: made by this value, destroyed once.
            unsafe {
                sys::cuGraphExecDestroy(s.exec);
                sys::cuGraphDestroy(s.graph);
            }
        }
    }

    /// Frees everything; the replay's context must be current.
    pub(super) fn release(&mut self) {
        self.drop_graphs();
        // SAFETY: each was allocated by this value and is freed once.
        unsafe {
            for (_, (p, _)) in self.pinned.drain() {
                sys::cuMemFreeHost(p as *mut c_void);
            }
            if let Some((e, _)) = self.done.take() {
                sys::cuEventDestroy_v2(e);
            }
        }
    }
}

impl CudaReplay {
    /// Submits one serving call (see the module's doc) without waiting for it. Host outputs are
    /// read with [`CudaReplay::served`] after [`CudaReplay::serve_wait`]; so is everything on the
    /// replay's own stream (`stream: None`), which nothing of the caller's follows.
    pub fn serve(&mut self, archive: &Archive<'_>, call: &ServeCall<'_>) -> Result<(), CudaError> {
        self.ready()?;
        if self.mode != Mode::Graph || self.graph.is_none() {
            return Err(CudaError::Invalid(
                "the serving path runs the archive as one CUDA graph: load it in graph mode".into(),
            ));
        }
        if self.slots.len() > 1 {
            return Err(CudaError::Invalid(
                "the serving path runs on one GPU: this archive was placed on several".into(),
            ));
        }
        let r = self.serve_inner(archive, call);
        r.map_err(|e| self.fail(e))
    }

    fn serve_inner(&mut self, archive: &Archive<'_>, call: &ServeCall<'_>) -> Result<(), CudaError> {
        if self.serving.stale || !self.pending_params.is_empty() {
            self.apply_param_changes()?;
            self.serving.drop_graphs();
            self.serving.stale = false;
        }
        if call.zero_copy {
            self.check_in_place(archive, call)?;
        }
        let shape = Shape {
            inputs: call.inputs.iter().map(|(r, s)| (*r, matches!(s, Source::Host(_)))).collect(),
            outputs: call.outputs.iter().map(|(r, s)| (*r, *s == Sink::Host)).collect(),
            zero_copy: call.zero_copy,
        };
        if !self.serving.shapes.contains_key(&shape) {
            let served = self.build_served(archive, call)?;
            if self.serving.shapes.len() >= SHAPES {
                let oldest = self.serving.shapes.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| k.clone());
                if let Some(s) = oldest.and_then(|k| self.serving.shapes.remove(&k)) {
                    call!(cuGraphExecDestroy(s.exec)).ok();
                    call!(cuGraphDestroy(s.graph)).ok();
                }
            }
            self.serving.shapes.insert(shape.clone(), served);
        }
        let stream = call.stream.map_or(self.slots[0].stream, |s| s as sys::CUstream);

        // Host inputs into their page-locked buffers, once the previous call has read them.
        if call.inputs.iter().any(|(_, s)| matches!(s, Source::Host(_))) {
            if let Some((event, _)) = self.serving.done {
                call!(cuEventSynchronize(event))?;
            }
            for (region, source) in call.inputs {
                if let Source::Host(bytes) = source {
                    let (p, len) = self.pinned_buffer(*region)?;
                    if bytes.len() != len {
                        return Err(CudaError::Invalid(format!(
                            "input {} holds {len} bytes, not {}",
                            archive.region(*region).name,
                            bytes.len()
                        )));
                    }
                    // SAFETY: a page-locked buffer of `len` bytes, which no graph reads now.
                    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, len) };
                }
            }
        }

        let ctx = self.slots[0].device.context();
        self.serving.calls += 1;
        let calls = self.serving.calls;
        let served = self.serving.shapes.get_mut(&shape).expect("built above");
        served.used = calls;
        let exec = served.exec;

        // The device ends: copies pointed at this call's memory, or kernels at it.
        let ends: Vec<(RegionId, CUdeviceptr)> = device_ends(call).collect();
        if call.zero_copy {
            let mut changed = false;
            for &(region, ptr) in &ends {
                let b = served.bound.iter().find(|b| b.0 == region).expect("bound when built");
                if !ptr.is_multiple_of(b.1) {
                    return Err(CudaError::Invalid(format!(
                        "zero_copy: the array for {} is at {ptr:#x}, which is not {}-byte aligned as the archive's \
                         kernels expect it",
                        archive.region(region).name,
                        b.1
                    )));
                }
                changed |= b.2 != ptr;
            }
            if changed {
                for &(region, ptr) in &ends {
                    served.bound.iter_mut().find(|b| b.0 == region).expect("bound when built").2 = ptr;
                }
                for l in &served.launches {
                    let Some(Step::Kernel(k)) = self.steps.get(l.op as usize) else { continue };
                    let mut k = k.clone();
                    for &(at, bound, offset) in &l.slots {
                        k.params[at..at + 8].copy_from_slice(&(served.bound[bound].2 + offset).to_le_bytes());
                    }
                    let mut args = k.arg_pointers();
                    let p = k.node_params(&mut args, ctx);
                    if let Err(e) = call!(cuGraphExecKernelNodeSetParams_v2(exec, l.node, &p)) {
                        // Some nodes may point at the new arrays and some not: the next call sets them all.
                        served.bound.iter_mut().for_each(|b| b.2 = 0);
                        return Err(e.into());
                    }
                }
            }
        } else {
            for c in &mut served.copies {
                let ptr = ends[c.at].1;
                if c.ptr == ptr {
                    continue;
                }
                let (src, dst) = if c.into_region { (ptr, c.region) } else { (c.region, ptr) };
                let p = linear_copy(Mem::Device(src), Mem::Device(dst), c.len);
                call!(cuGraphExecMemcpyNodeSetParams(exec, c.node, &p, ctx))?;
                c.ptr = ptr;
            }
        }

        // Ordered after the previous call wherever it ran, and the replay's own stream after this one.
        let own = self.slots[0].stream;
        if let Some((event, last)) = self.serving.done {
            if last != stream {
                call!(cuStreamWaitEvent(stream, event, 0))?;
            }
        }
        call!(cuGraphLaunch(exec, stream))?;
        let event = match self.serving.done {
            Some((e, _)) => e,
            None => {
                let mut e = std::ptr::null_mut();
                call!(cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32))?;
                e
            }
        };
        self.serving.done = Some((event, stream));
        call!(cuEventRecord(event, stream))?;
        if stream != own {
            call!(cuStreamWaitEvent(own, event, 0))?;
        }
        Ok(())
    }

    /// Waits for the last serving call's graph (a blocking call: release the GIL around it).
    pub fn serve_wait(&mut self) -> Result<(), CudaError> {
        let Some((event, _)) = self.serving.done else { return Ok(()) };
        self.ready()?;
        let r = call!(cuEventSynchronize(event));
        r.map_err(|e| self.fail(e.into()))
    }

    /// The bytes the last serving call copied out of `region` to the host (after
    /// [`CudaReplay::serve_wait`]).
    pub fn served(&self, region: RegionId) -> Option<&[u8]> {
        let &(p, len) = self.serving.pinned.get(&region)?;
        // SAFETY: a page-locked buffer of `len` bytes owned by this replay; the graph that writes
        // it has finished (the caller waited), and the next one starts under `&mut self`.
        Some(unsafe { std::slice::from_raw_parts(p, len) })
    }

    fn pinned_buffer(&mut self, region: RegionId) -> Result<(*mut u8, usize), CudaError> {
        if let Some(&b) = self.serving.pinned.get(&region) {
            return Ok(b);
        }
        let len = self.region_index(region)?.size as usize;
        let mut p = std::ptr::null_mut();
        call!(cuMemAllocHost_v2(&mut p, len.max(1)))?;
        self.serving.pinned.insert(region, (p as *mut u8, len));
        Ok((p as *mut u8, len))
    }

    /// Refuses a zero-copy call whose arrays the kernels cannot use in place: host arrays, and a
    /// region read and written in place with different arrays in and out (or only one of them).
    fn check_in_place(&self, archive: &Archive<'_>, call: &ServeCall<'_>) -> Result<(), CudaError> {
        let name = |r: RegionId| archive.region(r).name.to_string();
        // What the capture said of each region; a region no binding names may be both.
        let direction = |r: RegionId| self.bindings.iter().find(|b| b.1 == r).map_or(Direction::InOut, |b| b.2);
        if let Some((region, _)) = call.inputs.iter().find(|i| matches!(i.1, Source::Host(_))) {
            return Err(CudaError::Invalid(format!(
                "zero_copy: input {} is a host array; the kernels can only read GPU arrays in place",
                name(*region)
            )));
        }
        if let Some((region, _)) = call.outputs.iter().find(|o| o.1 == Sink::Host) {
            return Err(CudaError::Invalid(format!(
                "zero_copy: output {} would come back to the host; pass a GPU array for it",
                name(*region)
            )));
        }
        let input = |r: RegionId| call.inputs.iter().find(|i| i.0 == r).map(|i| i.1);
        let output = |r: RegionId| call.outputs.iter().find(|o| o.0 == r).map(|o| o.1);
        for region in call.inputs.iter().map(|i| i.0).chain(call.outputs.iter().map(|o| o.0)) {
            let same =
                matches!((input(region), output(region)), (Some(Source::Device(a)), Some(Sink::Device(b))) if a == b);
            if direction(region) == Direction::InOut && !same {
                return Err(CudaError::Invalid(format!(
                    "zero_copy: {0} is read and written in place: pass the same GPU array as input {0} and \
                     output {0}, or serve without zero_copy",
                    name(region)
                )));
            }
        }
        Ok(())
    }

    /// Why `region` cannot be bound in place, if it cannot: something other than a kernel's
    /// parameter holds its address.
    fn in_place_refusal(&self, archive: &Archive<'_>, region: RegionId) -> Option<String> {
        let r = &self.regions[region as usize];
        let inside = |p: CUdeviceptr| p >= r.addr && p < r.addr + r.size.max(1);
        if !self.reservations.is_empty() {
            return Some("the archive's regions are placed at their captured addresses".into());
        }
        if archive.region_relocs().any(|(_, reloc)| reloc.target == region) {
            return Some("another region holds its address".into());
        }
        for (op, step) in self.steps.iter().enumerate() {
            let why = match step {
                Step::Copy { src, dst, .. } if inside(*src) || inside(*dst) => "a copy",
                Step::Memset { dst, .. } if inside(*dst) => "a memset",
                Step::Control { cond, .. } if inside(*cond) => "a loop's or branch's condition",
                Step::Kernel(k) if !k.maps.is_empty() && k.relocs.iter().any(|x| x.target == region) => {
                    "a kernel's tensor map"
                }
                _ => continue,
            };
            return Some(format!("{why} reaches it (op {op}, {})", self.labels[op]));
        }
        None
    }

    /// Builds and instantiates the graph of `call`'s shape.
    fn build_served(&mut self, archive: &Archive<'_>, call: &ServeCall<'_>) -> Result<Served, CudaError> {
        let name = |r: RegionId| archive.region(r).name.to_string();
        let mut bound: Vec<(RegionId, u64, CUdeviceptr)> = Vec::new();
        if call.zero_copy {
            for region in call.inputs.iter().map(|i| i.0).chain(call.outputs.iter().map(|o| o.0)) {
                if bound.iter().any(|b| b.0 == region) {
                    continue;
                }
                if let Some(why) = self.in_place_refusal(archive, region) {
                    return Err(CudaError::Invalid(format!(
                        "zero_copy: region {} cannot be bound in place: {why}",
                        name(region)
                    )));
                }
                let align = (archive.region(region).align as u64).max(1);
                bound.push((region, align, self.regions[region as usize].addr));
            }
        }

        for (r, _) in call.inputs.iter().filter(|(_, s)| matches!(s, Source::Host(_))) {
            self.pinned_buffer(*r)?;
        }
        for (r, _) in call.outputs.iter().filter(|(_, s)| *s == Sink::Host) {
            self.pinned_buffer(*r)?;
        }

        let mut graph = std::ptr::null_mut();
        call!(cuGraphCreate(&mut graph, 0))?;
        let mut copies = Vec::new();
        let built = self.fill_served(graph, call, &mut copies);
        let kernel_nodes = match built {
            Ok(b) => b,
            Err(e) => {
                call!(cuGraphDestroy(graph)).ok();
                return Err(e);
            }
        };
        let mut exec = std::ptr::null_mut();
        if let Err(e) = call!(cuGraphInstantiateWithFlags(&mut exec, graph, 0)) {
            call!(cuGraphDestroy(graph)).ok();
            return Err(e.into());
        }
        call!(cuGraphUpload(exec, self.slots[0].stream))?;

        let mut launches = Vec::new();
        if call.zero_copy {
            for (op, node) in kernel_nodes {
                let Some(Step::Kernel(k)) = self.steps.get(op as usize) else { continue };
                let slots: Vec<(usize, usize, u64)> = k
                    .relocs
                    .iter()
                    .filter_map(|x| {
                        let i = bound.iter().position(|b| b.0 == x.target)?;
                        Some((x.offset as usize, i, x.target_offset))
                    })
                    .collect();
                if !slots.is_empty() {
                    launches.push(InPlace { op, node, slots });
                }
            }
        }
        Ok(Served { graph, exec, copies, bound, launches, used: 0 })
    }

    /// Adds a shape's nodes to `graph`: copies in, the archive, copies out. Gives
    /// the archive's kernel nodes.
    fn fill_served(
        &mut self,
        graph: sys::CUgraph,
        call: &ServeCall<'_>,
        copies: &mut Vec<CopyNode>,
    ) -> Result<HashMap<OpId, CUgraphNode>, CudaError> {
        let ctx = self.slots[0].device.context();
        let add = |deps: &[CUgraphNode], p: &sys::CUDA_MEMCPY3D| -> Result<CUgraphNode, DriverError> {
            let mut node = std::ptr::null_mut();
            call!(cuGraphAddMemcpyNode(&mut node, graph, deps.as_ptr(), deps.len(), p, ctx))?;
            Ok(node)
        };
        let mut entry = Vec::new();
        // The device ends in the order the call lists them, numbered as `device_ends` does.
        let mut at = 0;
        if !call.zero_copy {
            for (r, source) in call.inputs {
                let a = &self.regions[*r as usize];
                let (src, ptr) = match source {
                    Source::Device(p) => (Mem::Device(*p), Some(*p)),
                    Source::Host(_) => (Mem::Host(self.serving.pinned[r].0 as *mut c_void), None),
                };
                if a.size > 0 {
                    let node = add(&[], &linear_copy(src, Mem::Device(a.addr), a.size))?;
                    entry.push(node);
                    if let Some(ptr) = ptr {
                        copies.push(CopyNode { node, at, region: a.addr, len: a.size, into_region: true, ptr });
                    }
                }
                at += usize::from(ptr.is_some());
            }
        }
        // The graph's own statistics stay those of the replay's graph.
        let (programmatic, dependent) = (self.programmatic_edges, self.dependent_edges);
        let built = self.build_into(graph, &entry);
        (self.programmatic_edges, self.dependent_edges) = (programmatic, dependent);
        let built = built?;
        let sinks = if built.sinks.is_empty() { entry.clone() } else { built.sinks.clone() };
        if !call.zero_copy {
            for (r, sink) in call.outputs {
                let a = &self.regions[*r as usize];
                let (dst, ptr) = match sink {
                    Sink::Device(p) => (Mem::Device(*p), Some(*p)),
                    Sink::Host => (Mem::Host(self.serving.pinned[r].0 as *mut c_void), None),
                };
                if a.size > 0 {
                    let node = add(&sinks, &linear_copy(Mem::Device(a.addr), dst, a.size))?;
                    if let Some(ptr) = ptr {
                        copies.push(CopyNode { node, at, region: a.addr, len: a.size, into_region: false, ptr });
                    }
                }
                at += usize::from(ptr.is_some());
            }
        }
        Ok(built.kernel_nodes)
    }
}

/// A call's device ends: its device inputs, then its device outputs, in the order it lists them.
fn device_ends<'c>(call: &'c ServeCall<'_>) -> impl Iterator<Item = (RegionId, CUdeviceptr)> + 'c {
    let inputs = call.inputs.iter().filter_map(|(r, s)| match s {
        Source::Device(p) => Some((*r, *p)),
        Source::Host(_) => None,
    });
    inputs.chain(call.outputs.iter().filter_map(|(r, s)| match s {
        Sink::Device(p) => Some((*r, *p)),
        Sink::Host => None,
    }))
}
