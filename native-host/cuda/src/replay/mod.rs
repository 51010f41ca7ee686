//! The safe layer: [`CudaReplay`] loads an archive onto one GPU, or a multi-device archive onto
//! several, and replays it, as one CUDA graph or op by op on streams.
//!
//! # Several GPUs
//! Each logical device of the archive is placed on a GPU (a [`Slot`]); several may share one.
//! Regions are allocated on their device's GPU and every node runs in its GPU's context, so the
//! archive becomes one multi-device CUDA graph: the driver orders nodes of different GPUs along
//! the plan's edges itself, which is what events between per-GPU graphs would do by hand. Copies
//! between GPUs are memcpy nodes between their memories: direct where peer access could be
//! enabled, staged by the driver where not. The graph is launched on the first GPU's stream. In
//! stream mode an op on another GPU than the one before first waits for an event recorded there.
//!
//! This file holds the replay's state and its facts; the work is in its children: `load`
//! (modules, regions, steps, the instantiated graph, and dropping them), `step` (one op resolved
//! for this replay), `graph` (graph mode's build), `stream` (running a replay, stream mode's
//! submission), `bindings` (regions and launch parameters from outside), `fault` (faults and
//! the op that caused one), `trigger` (which kernels trigger their dependents early) and `serve`
//! (the serving path: copies in and out around the archive in one graph, updated per call).

mod bindings;
mod fault;
mod graph;
mod library;
mod load;
mod options;
mod serve;
mod step;
mod stream;
mod trigger;

use std::collections::{BTreeSet, HashMap};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys::{self, CUdeviceptr};
use shared::archive::{Archive, Direction, OpId, RegionId};
use shared::plan::Plan;
use shared::replay::{IterationStats, Ran, ReplayObserver};

pub use self::bindings::SET_PARAMS_LIMIT;
pub use self::fault::{locate_fault, probe_ops};
pub use self::options::{Mode, Pdl, ReplayOptions, UnknownMode};
pub use self::serve::{ServeCall, Sink, Source};
pub use crate::error::CudaError;

use self::graph::GraphState;
use self::serve::Serving;
use self::step::{Control, RegionAlloc, Step};
use crate::driver::{call, Code, Device, DriverError, Func};
use crate::placed::Reservation;

/// Time of one op in stream mode, summed over every time it ran (loop bodies run many times).
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    pub op: OpId,
    pub label: String,
    pub runs: u64,
    pub total: Duration,
}

/// Where the time of [`CudaReplay::load`] went.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadTimes {
    /// Loading modules (PTX JIT, or the driver's JIT cache, or a cubin) and finding kernels.
    pub modules: Duration,
    /// Allocating regions and uploading initial data.
    pub regions: Duration,
    /// Building the graph node by node.
    pub build: Duration,
    /// `cuGraphInstantiate` and the first upload.
    pub instantiate: Duration,
}

/// One archive, loaded onto one GPU: modules, regions with their initial data, and (in graph
/// mode) the instantiated graph. Replay it as often as needed.
pub struct CudaReplay {
    /// The GPUs, the first launching the graph; one unless the archive's devices were placed on several.
    slots: Vec<Slot>,
    /// Per logical device of the archive: its slot.
    placement: Vec<usize>,
    /// Per op: its slot.
    op_slots: Vec<usize>,
    /// Stream mode: the slot of the op submitted last.
    current: usize,
    mode: Mode,
    options: ReplayOptions,
    modules: Vec<Code>,
    regions: Vec<RegionAlloc>,
    /// Ranges reserved and mapped at captured addresses (placed.rs), with their slot.
    reservations: Vec<(usize, Reservation)>,
    steps: Vec<Step>,
    labels: Vec<String>,
    plan: Plan,
    /// Body range of each while/if op.
    bodies: HashMap<OpId, std::ops::Range<u32>>,
    bindings: Vec<(String, RegionId, Direction)>,
    start: sys::CUevent,
    end: sys::CUevent,
    op_events: Vec<sys::CUevent>,
    op_log: Vec<(OpId, usize)>,
    graph: Option<GraphState>,
    pending_params: BTreeSet<OpId>,
    warnings: Vec<String>,
    poisoned: bool,
    load_times: LoadTimes,
    /// Whether WHILE bodies join recap's condition kernel through programmatic edges (sm_90 and
    /// driver 12.3 or newer), and how many such edges the graph has.
    programmatic: bool,
    /// The kernel-node port programmatic edges leave from (see [`ReplayOptions`]).
    programmatic_port: u32,
    programmatic_edges: usize,
    /// Whether the archive's kernels follow each other through programmatic edges
    /// ([`ReplayOptions::pdl`]), and how many such edges the graph has.
    pdl: bool,
    dependent_edges: usize,
    /// Kernels whose entry triggers their dependents early (half a wave, trigger.rs), and the
    /// modules loaded a second time to take the trigger out of a kernel past half a wave.
    triggered_kernels: usize,
    reloaded_modules: usize,
    /// Times a host-driven loop (stream mode) was stopped by its limit, by op.
    host_limit_hits: HashMap<OpId, u64>,
    /// Launch ops of the archive (counted once, for iteration statistics).
    launches: u64,
    /// recap's library kernels and their scratch, where the archive has library ops (library.rs).
    library: library::LibraryKernels,
    /// The serving path's graphs and buffers (serve.rs).
    serving: Serving,
}

/// One GPU of a replay, with what the logical devices placed on it share.
struct Slot {
    device: Arc<Device>,
    generation: u64,
    stream: sys::CUstream,
    fill_u64: Func,
    fill_bytes: Func,
    set_condition: Option<Func>,
    /// Per while/if op (numbered over the whole archive): its pass counter and the times its
    /// limit stopped it, two `u32`s. On every slot, so a condition kernel touches only its own GPU.
    control: CUdeviceptr,
    /// Stream mode: recorded here when the next op runs on another slot, which waits for it.
    handoff: sys::CUevent,
}

/// A WHILE loop that its `max_iterations` stopped while its condition still asked for more
/// passes: the replay went on with whatever state that pass left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopLimit {
    pub op: OpId,
    /// `while counter[0]`.
    pub label: String,
    pub limit: u32,
    /// How many times, counted since the archive was loaded.
    pub times: u64,
}

impl LoopLimit {
    /// One line for a report: `op 3 (while counter[0]) stopped at its limit of 4 iterations with
    /// its condition still set`, with the count when it happened more than once.
    pub fn message(&self) -> String {
        let times = if self.times > 1 { format!(" ({} times)", self.times) } else { String::new() };
        format!(
            "op {} ({}) stopped at its limit of {} iterations with its condition still set{times}",
            self.op, self.label, self.limit
        )
    }
}

// SAFETY: every handle is used only with the device's context made current on the calling thread
// (each public method binds it first); the device's stream is shared, and the driver takes work
// on one stream from several threads.
unsafe impl Send for CudaReplay {}

impl CudaReplay {
    fn op_error(&self, op: OpId, error: DriverError) -> CudaError {
        CudaError::Op { op, label: self.labels.get(op as usize).cloned().unwrap_or_default(), error }
    }

    fn ready(&self) -> Result<(), CudaError> {
        if self.poisoned || self.slots.iter().any(|s| s.device.generation() != s.generation) {
            return Err(CudaError::Stale);
        }
        self.slots[0].device.bind()?;
        Ok(())
    }

    /// Where the load's time went.
    pub fn load_times(&self) -> LoadTimes {
        self.load_times
    }

    /// The GPU that launches the graph (the only one unless the archive's devices were placed on several).
    pub fn device(&self) -> &Arc<Device> {
        &self.slots[0].device
    }

    /// Every GPU of the replay, the launching one first.
    pub fn devices(&self) -> Vec<Arc<Device>> {
        self.slots.iter().map(|s| s.device.clone()).collect()
    }

    /// Per logical device of the archive: the ordinal of the GPU it was placed on.
    pub fn placement(&self) -> Vec<usize> {
        self.placement.iter().map(|&s| self.slots[s].device.ordinal).collect()
    }

    /// The mode actually used (graph mode falls back to stream mode on old drivers).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Graph nodes and edges (in graph mode), recap's own condition kernels included.
    pub fn graph_size(&self) -> Option<(usize, usize)> {
        self.graph.as_ref().map(|g| (g.node_count, g.edge_count))
    }

    /// How many of the loaded code images are libraries (kernels as `CUkernel`) and how many
    /// modules, recap's own kernels included.
    pub fn code_kinds(&self) -> (usize, usize) {
        let libraries = self.modules.iter().filter(|c| matches!(c, Code::Library(_))).count();
        (libraries, self.modules.len() - libraries)
    }

    /// Programmatic edges in the graph (from WHILE bodies to recap's condition kernel).
    pub fn programmatic_edges(&self) -> usize {
        self.programmatic_edges
    }

    /// Programmatic edges between the archive's own kernels ([`ReplayOptions::pdl`]).
    pub fn dependent_edges(&self) -> usize {
        self.dependent_edges
    }

    /// The archive's kernels that fire `griddepcontrol.launch_dependents` at entry, so that their
    /// dependents are scheduled once all of their blocks have started (each launch of them one
    /// wave on its GPU; [`ReplayOptions::pdl_wait_only`] turns it off).
    pub fn triggered_kernels(&self) -> usize {
        self.triggered_kernels
    }

    /// Modules loaded twice because the occupancy API put a kernel given the trigger past one
    /// wave (the load's cost of the trigger: one more JIT of each).
    pub fn reloaded_modules(&self) -> usize {
        self.reloaded_modules
    }

    /// Every WHILE loop whose `max_iterations` stopped it with its condition still set, in any
    /// replay since the archive was loaded (with how many times). Waits for the device.
    pub fn loop_limits(&mut self) -> Result<Vec<LoopLimit>, CudaError> {
        self.ready()?;
        let mut out = Vec::new();
        let mut device_counts: Option<(Vec<u32>, usize)> = None;
        for (i, step) in self.steps.iter().enumerate() {
            let Step::Control { kind: Control::While, counter, max_iterations, slot, .. } = *step else { continue };
            if max_iterations == 0 {
                continue;
            }
            let op = i as OpId;
            let mut times = self.host_limit_hits.get(&op).copied().unwrap_or(0);
            if self.graph.is_some() {
                if device_counts.is_none() {
                    // Each slot's counters of the loops placed on it, side by side.
                    let control_ops = self.steps.iter().filter(|s| matches!(s, Step::Control { .. })).count().max(1);
                    let mut buf = vec![0u32; control_ops * 2 * self.slots.len()];
                    for (i, s) in self.slots.iter().enumerate() {
                        s.device.bind()?;
                        call!(cuStreamSynchronize(s.stream))?;
                        let part = &mut buf[i * control_ops * 2..(i + 1) * control_ops * 2];
                        call!(cuMemcpyDtoH_v2(part.as_mut_ptr() as *mut c_void, s.control, part.len() * 4))?;
                    }
                    self.slots[0].device.bind()?;
                    device_counts = Some((buf, control_ops * 2));
                }
                let index = ((counter - self.slots[slot].control) / 4) as usize + 1;
                times += device_counts.as_ref().map_or(0, |(c, per)| c[slot * per + index] as u64);
            }
            if times > 0 {
                out.push(LoopLimit { op, label: self.labels[i].clone(), limit: max_iterations, times });
            }
        }
        Ok(out)
    }

    /// One-line warnings about how the replay had to be carried out.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Device address of a region (for tests and the capture API).
    pub fn region_address(&self, region: RegionId) -> Option<u64> {
        self.regions.get(region as usize).map(|r| r.addr)
    }
}

/// Called by [`CudaReplay::replay_each_op`] after each op, with the replay (to read regions).
pub type OpHook<'h> = dyn FnMut(&mut CudaReplay, OpId) -> Result<(), CudaError> + 'h;

impl shared::replay::Replayer for CudaReplay {
    type Error = CudaError;

    fn restore_initial(&mut self, archive: &Archive<'_>) -> Result<(), CudaError> {
        CudaReplay::restore_initial(self, archive)
    }

    fn write_region(&mut self, region: RegionId, bytes: &[u8]) -> Result<(), CudaError> {
        let size = self.region_index(region)?.size;
        if bytes.len() as u64 != size {
            return Err(CudaError::Invalid(format!("region {region} holds {size} bytes, not {}", bytes.len())));
        }
        self.write_region_at(region, 0, bytes)
    }

    /// One replay; a fault is reported with the op that caused it ([`locate_fault`]).
    fn run_iteration(&mut self, archive: &Archive<'_>, _observer: &mut dyn ReplayObserver) -> Result<Ran, CudaError> {
        let took = self.replay().map_err(|e| locate_fault(&self.slots[0].device.clone(), archive.bytes(), e, 1))?;
        let stats = IterationStats { ops: archive.op_count() as u64, launches: self.launches, ..Default::default() };
        Ok(Ran { stats, device_ms: Some(took.as_secs_f64() * 1e3) })
    }

    fn read_region(&mut self, region: RegionId) -> Result<Vec<u8>, CudaError> {
        CudaReplay::read_region(self, region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_limit_reads_as_one_line_naming_op_and_limit() {
        let once = LoopLimit { op: 3, label: "while counter[0]".into(), limit: 4, times: 1 };
        assert_eq!(
            once.message(),
            "op 3 (while counter[0]) stopped at its limit of 4 iterations with its condition still set"
        );
        let twice = LoopLimit { times: 2, ..once };
        assert!(twice.message().ends_with("still set (2 times)"), "{}", twice.message());
    }
}
