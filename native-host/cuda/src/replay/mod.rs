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

use std::collections::{BTreeSet, HashMap};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys::{self, CUdeviceptr, CUgraph, CUgraphNode};
use shared::archive::{Archive, Direction, FormatError, KernelId, Op, OpId, RegionId, Reloc};
use shared::check::RegionCheck;
use shared::plan::{Dag, Plan, Span};
use shared::replay::{IterationStats, Ran, ReplayObserver};

use super::driver::{call, Code, Device, DriverError, Func, OpenError};
use super::kernels;
use super::pdl;
use super::placed::{Reservation, Wanted};

/// How the ops are submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// One CUDA graph built with the explicit node API, instantiated once, launched per replay.
    #[default]
    Graph,
    /// The same ops launched one by one on a stream; loops and branches are driven from the host.
    Stream,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "graph" => Ok(Mode::Graph),
            "stream" => Ok(Mode::Stream),
            _ => Err(format!("unknown mode {s}: use graph or stream")),
        }
    }
}

/// Whether kernels follow kernels through programmatic edges ([`ReplayOptions::pdl`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pdl {
    /// Where the GPU and driver have it; ordinary edges elsewhere, silently.
    #[default]
    Auto,
    /// Asked for: where the GPU or driver lacks it, ordinary edges and a warning.
    On,
    /// Ordinary edges only (for comparison).
    Off,
}

/// What a replay is asked to do besides running the ops.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayOptions {
    pub mode: Mode,
    /// Chain every op after the one before it instead of following the plan's DAG (for comparison).
    pub serial: bool,
    /// Stream mode: record an event after every op so that [`CudaReplay::op_times`] has figures.
    pub op_timing: bool,
    /// Stream mode: wait for every op to finish before the next, so that a fault names its op.
    pub sync_each_op: bool,
    /// Load code as modules and give graph nodes context-bound `CUfunction`s instead of the
    /// library `CUkernel`s the CUDA runtime uses (for comparison).
    pub module_functions: bool,
    /// Join a WHILE body's kernels to recap's condition kernel with ordinary edges even where
    /// programmatic edges are available (for comparison).
    pub plain_condition_edges: bool,
    /// Start the programmatic edges to the condition kernel at the body kernel's completion
    /// trigger (`CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC`) instead of at its launch
    /// (`CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER`, the default: the condition kernel may start once
    /// every block of the body kernel has begun). Either way `griddepcontrol.wait` holds the
    /// condition kernel until the body's writes are visible; the launch-order port only lets it
    /// be scheduled earlier, which is about 0.1 us per iteration faster on an H200 (for comparison).
    pub trigger_condition_edges: bool,
    /// Programmatic dependent launch between the archive's kernels in graph mode: every kernel
    /// waits for its predecessors at entry (`griddepcontrol.wait`, see [`super::pdl`]) and kernel
    /// nodes follow kernel nodes through programmatic edges, so a dependent kernel is scheduled
    /// while its predecessor still runs. By default wherever the GPU (sm_90 and newer) and the
    /// driver (12.3) have it.
    pub pdl: Pdl,
    /// With `pdl`: start the programmatic edges between kernels at the predecessor's launch
    /// (`CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER`: the dependent may be scheduled once every block
    /// of its predecessor has begun) instead of at its completion trigger (the default, what
    /// programmatic stream serialization does; for comparison).
    pub pdl_from_launch: bool,
    /// Several GPUs: turn peer access between them off, so that copies between them go through
    /// the driver's staging as on GPUs without a direct link (for comparison and tests).
    pub without_peer_access: bool,
    /// Regions at their captured addresses or fresh ones; `None` follows the archive
    /// (`shared::placement`, placed.rs).
    pub placement: Option<shared::placement::Placement>,
}

/// Above this many changed launches, parameter changes go through one `cuGraphExecUpdate`
/// instead of one `cuGraphExecKernelNodeSetParams` per node.
pub const SET_PARAMS_LIMIT: usize = 16;

/// Everything that can go wrong loading or replaying on a GPU.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("archive: {0}")]
    Format(#[from] FormatError),
    #[error("module {module} did not load: {error}{}", if log.is_empty() { String::new() } else { format!("\nJIT log:\n{log}") })]
    Jit { module: String, error: DriverError, log: String },
    #[error("kernel {kernel} of module {module}: {error}")]
    Kernel { module: String, kernel: String, error: DriverError },
    #[error("op {op} ({label}) failed: {error}")]
    Op { op: OpId, label: String, error: DriverError },
    #[error("replay faulted on {device}{}: {error}; {}", match op { Some((id, label)) => format!(" at op {id} ({label})"), None => String::new() }, match lost { None => "the device was reset and is ready for the next replay".to_string(), Some(why) => format!("the driver keeps the error for this process ({why}), so the next replay on this device must run in a new process") })]
    Fault { device: String, op: Option<(OpId, String)>, error: DriverError, lost: Option<String> },
    #[error("the device was reset after a fault since this replay was loaded: load the archive again")]
    Stale,
    #[error("{0}")]
    Invalid(String),
}

/// A zeroed host buffer for a region's bytes; its size comes from the archive, so failing to get
/// it is an error, not an abort.
fn host_buffer(size: u64, region: &str) -> Result<Vec<u8>, CudaError> {
    let too_big = || CudaError::Invalid(format!("region {region}: cannot allocate {size} bytes of host memory for it"));
    let len = usize::try_from(size).map_err(|_| too_big())?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| too_big())?;
    v.resize(len, 0);
    Ok(v)
}

impl CudaError {
    fn driver(&self) -> Option<&DriverError> {
        match self {
            CudaError::Driver(e) | CudaError::Op { error: e, .. } | CudaError::Fault { error: e, .. } => Some(e),
            CudaError::Jit { error, .. } | CudaError::Kernel { error, .. } => Some(error),
            _ => None,
        }
    }

    /// Whether the error faulted the device (the context had to be reset).
    pub fn is_fault(&self) -> bool {
        matches!(self, CudaError::Fault { .. })
    }
}

/// A device buffer for one region.
struct RegionAlloc {
    /// What `cuMemAlloc` returned (freed on drop); 0 for a region placed at its captured address
    /// (its memory is one of the replay's reservations).
    base: CUdeviceptr,
    /// `base` rounded up to the region's alignment: the region's device address.
    addr: CUdeviceptr,
    size: u64,
    /// The GPU holding it.
    slot: usize,
}

/// A kernel launch with its parameter buffer, already relocated.
#[derive(Clone)]
struct KernelStep {
    func: Func,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    params: Vec<u8>,
    /// Offset of each parameter in `params`, in declaration order.
    offsets: Vec<usize>,
    relocs: Vec<Reloc>,
    /// Tensor maps encoded for this replay's regions, by parameter offset (tensor_maps.rs).
    maps: Vec<(usize, [u8; shared::tensor_map::SIZE])>,
    /// The kernel waits for its predecessors at entry: it may follow kernels through
    /// programmatic edges.
    waits: bool,
    /// The GPU it runs on (`func.function` belongs to that GPU's context).
    slot: usize,
    /// The captured launch's attributes that a replay sets (launch_attrs.rs).
    attrs: Vec<sys::CUlaunchAttribute>,
}

impl KernelStep {
    /// Pointers to each parameter, as `kernelParams` wants them; valid while `params` is untouched.
    fn arg_pointers(&mut self) -> Vec<*mut c_void> {
        let base = self.params.as_mut_ptr();
        // SAFETY: every offset lies inside `params` (checked when the step is made).
        self.offsets.iter().map(|&o| unsafe { base.add(o) } as *mut c_void).collect()
    }

    /// Node parameters naming the library kernel (with the context it runs in) when there is one,
    /// else the context's function.
    fn node_params(&self, args: &mut [*mut c_void], ctx: sys::CUcontext) -> sys::CUDA_KERNEL_NODE_PARAMS {
        let library = !self.func.kernel.is_null();
        sys::CUDA_KERNEL_NODE_PARAMS {
            func: if library { std::ptr::null_mut() } else { self.func.function },
            gridDimX: self.grid[0],
            gridDimY: self.grid[1],
            gridDimZ: self.grid[2],
            blockDimX: self.block[0],
            blockDimY: self.block[1],
            blockDimZ: self.block[2],
            sharedMemBytes: self.shared,
            kernelParams: if args.is_empty() { std::ptr::null_mut() } else { args.as_mut_ptr() },
            extra: std::ptr::null_mut(),
            kern: self.func.kernel,
            ctx: if library { ctx } else { std::ptr::null_mut() },
        }
    }
}

/// A parameter buffer for one of recap's own kernels.
#[derive(Default)]
struct Args {
    bytes: Vec<u8>,
    offsets: Vec<usize>,
}

impl Args {
    fn push(mut self, value: &[u8]) -> Self {
        let align = value.len();
        while !self.bytes.len().is_multiple_of(align) {
            self.bytes.push(0);
        }
        self.offsets.push(self.bytes.len());
        self.bytes.extend_from_slice(value);
        self
    }
    fn u64(self, v: u64) -> Self {
        self.push(&v.to_le_bytes())
    }
    fn u32(self, v: u32) -> Self {
        self.push(&v.to_le_bytes())
    }
    fn launch(self, (func, slot): (Func, usize), grid: u32, block: u32) -> KernelStep {
        KernelStep {
            slot,
            func,
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            shared: 0,
            params: self.bytes,
            offsets: self.offsets,
            relocs: Vec::new(),
            maps: Vec::new(),
            waits: false,
            attrs: Vec::new(),
        }
    }
}

/// How a memset is carried out: a memset node where the driver's element sizes allow, else a fill kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fill {
    /// `cuMemsetD8/16/32`: element size in bytes, element value, element count.
    Memset { elem: u32, value: u32, count: u64 },
    /// `recap_fill_u64`: an 8-byte pattern whose halves differ, 8-byte aligned.
    U64 { count: u64, pattern: u64 },
    /// `recap_fill_bytes`: anything else (unaligned destinations).
    Bytes { len: u64, pattern: u64, width: u32 },
}

fn lower_memset(dst: CUdeviceptr, len: u64, width: u32, pattern: u64) -> Fill {
    let bytes = pattern.to_le_bytes();
    let w = width as usize;
    if bytes[..w].iter().all(|&b| b == bytes[0]) {
        return Fill::Memset { elem: 1, value: bytes[0] as u32, count: len };
    }
    let lo = pattern as u32;
    match width {
        2 if dst.is_multiple_of(2) => Fill::Memset { elem: 2, value: lo & 0xffff, count: len / 2 },
        4 if dst.is_multiple_of(4) => Fill::Memset { elem: 4, value: lo, count: len / 4 },
        8 if dst.is_multiple_of(4) && (pattern >> 32) as u32 == lo => {
            Fill::Memset { elem: 4, value: lo, count: len / 4 }
        }
        8 if dst.is_multiple_of(8) => Fill::U64 { count: len / 8, pattern },
        _ => Fill::Bytes { len, pattern, width },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Control {
    While,
    If,
}

/// One archive op, resolved to device addresses and functions.
#[derive(Clone)]
enum Step {
    Kernel(KernelStep),
    Copy {
        src: CUdeviceptr,
        dst: CUdeviceptr,
        len: u64,
    },
    Memset {
        dst: CUdeviceptr,
        fill: Fill,
        slot: usize,
    },
    Control {
        kind: Control,
        cond: CUdeviceptr,
        cond_span: Span,
        counter: CUdeviceptr,
        max_iterations: u32,
        slot: usize,
    },
    /// Orders other ops but does no device work (alloc, free: scratch lives for the whole
    /// replay; signal, wait: the plan has turned them into edges).
    Barrier,
    /// Does nothing and orders nothing (markers, zero-length copies and memsets).
    Skip,
}

/// The instantiated graph and the node of every launch in it.
struct GraphState {
    graph: CUgraph,
    exec: sys::CUgraphExec,
    kernel_nodes: HashMap<OpId, CUgraphNode>,
    node_count: usize,
    edge_count: usize,
}

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
    /// Times a host-driven loop (stream mode) was stopped by its limit, by op.
    host_limit_hits: HashMap<OpId, u64>,
    /// Launch ops of the archive (counted once, for iteration statistics).
    launches: u64,
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

/// What a loop does after `done` passes, its condition word reading `word`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Run,
    Done,
    /// The condition still asks for a pass, but `max_iterations` passes are done.
    Limited,
}

fn next_pass(done: u32, max_iterations: u32, word: u32) -> Pass {
    match (word, max_iterations) {
        (0, _) => Pass::Done,
        (_, 0) => Pass::Run,
        (_, max) if done >= max => Pass::Limited,
        _ => Pass::Run,
    }
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

fn patch(bytes: &mut [u8], relocs: impl Iterator<Item = Reloc>, regions: &[RegionAlloc]) {
    for r in relocs {
        let addr = regions[r.target as usize].addr + r.target_offset;
        let at = r.offset as usize;
        bytes[at..at + 8].copy_from_slice(&addr.to_le_bytes());
    }
}

/// Writes a launch's tensor maps over their (zeroed) parameter bytes.
fn patch_maps(bytes: &mut [u8], maps: &[(usize, [u8; shared::tensor_map::SIZE])]) {
    for (at, map) in maps {
        bytes[*at..*at + map.len()].copy_from_slice(map);
    }
}

impl CudaReplay {
    /// Loads `archive` onto `device`: modules, regions and initial data, and in graph mode the
    /// instantiated graph, ready to launch.
    pub fn load(device: &Arc<Device>, archive: &Archive, options: ReplayOptions) -> Result<Self, CudaError> {
        Self::load_on(std::slice::from_ref(device), archive, options)
    }

    /// Loads `archive` with its logical device `d` on `devices[d]`, or every logical device on
    /// `devices[0]` when only one is given. Several logical devices may share a GPU.
    pub fn load_on(devices: &[Arc<Device>], archive: &Archive, options: ReplayOptions) -> Result<Self, CudaError> {
        let logical = archive.device_count() as usize;
        let placed: Vec<&Arc<Device>> = match devices.len() {
            0 => return Err(CudaError::Invalid("no GPU to replay on".into())),
            1 => vec![&devices[0]; logical],
            n if n == logical => devices.iter().collect(),
            n => {
                return Err(CudaError::Invalid(format!(
                "the archive has {logical} device{} but {n} GPUs were given: give one GPU per device, or one for all",
                if logical == 1 { "" } else { "s" }
            )))
            }
        };
        let mut slots: Vec<Slot> = Vec::new();
        let mut placement = Vec::with_capacity(logical);
        for d in placed {
            let slot = match slots.iter().position(|s| Arc::ptr_eq(&s.device, d)) {
                Some(i) => i,
                None => {
                    slots.push(Slot {
                        device: d.clone(),
                        generation: d.generation(),
                        stream: std::ptr::null_mut(),
                        fill_u64: NO_FUNC,
                        fill_bytes: NO_FUNC,
                        set_condition: None,
                        control: 0,
                        handoff: std::ptr::null_mut(),
                    });
                    slots.len() - 1
                }
            };
            placement.push(slot);
        }
        let plan = Plan::build(archive);
        let op_slots = plan.device.iter().map(|&d| placement[d as usize]).collect();
        // Programmatic edges and PDL where every GPU of the replay has them.
        let newest_common = slots.iter().map(|s| s.device.sm).min().unwrap_or(0);
        let driver = slots[0].device.driver;
        slots[0].device.bind()?;
        let mut me = CudaReplay {
            slots,
            placement,
            op_slots,
            current: 0,
            mode: options.mode,
            options,
            modules: Vec::new(),
            regions: Vec::new(),
            reservations: Vec::new(),
            steps: Vec::new(),
            labels: Vec::new(),
            plan,
            bodies: HashMap::new(),
            bindings: archive.bindings().map(|b| (b.name.to_owned(), b.region, b.direction)).collect(),
            start: std::ptr::null_mut(),
            end: std::ptr::null_mut(),
            op_events: Vec::new(),
            op_log: Vec::new(),
            graph: None,
            pending_params: BTreeSet::new(),
            warnings: Vec::new(),
            poisoned: false,
            load_times: LoadTimes::default(),
            programmatic: !options.plain_condition_edges && newest_common >= 90 && driver.version >= 12030,
            programmatic_port: if options.trigger_condition_edges {
                sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
            } else {
                sys::CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER
            },
            programmatic_edges: 0,
            pdl: options.pdl != Pdl::Off,
            dependent_edges: 0,
            host_limit_hits: HashMap::new(),
            launches: archive.ops().filter(|op| matches!(op, Op::Launch(_))).count() as u64,
        };
        let result = me.load_inner(archive);
        match result {
            Ok(()) => Ok(me),
            Err(e) => Err(me.fail(e)),
        }
    }

    /// Opens the GPUs `ordinals` (one per logical device of the archive, or one for all) and
    /// loads `archive` onto them ([`CudaReplay::load_on`]).
    pub fn open(archive: &Archive, ordinals: &[usize], options: ReplayOptions) -> Result<Self, CudaError> {
        let devices = ordinals.iter().map(|&o| Device::open(o)).collect::<Result<Vec<_>, _>>()?;
        Self::load_on(&devices, archive, options)
    }

    /// A PTX module whose `.version` is newer than this driver's JIT knows (a producer built with a
    /// newer CUDA toolkit, such as Warp's bundled compiler) is tried again with the driver's newest
    /// version in its place, and a warning says so: ptxas then refuses it only if the kernels use
    /// something that version lacks. `None` when `refused` was for another reason or the retry
    /// failed too.
    fn load_with_older_ptx_version(
        &mut self,
        module: &str,
        image: &[u8],
        library: bool,
        refused: &CudaError,
    ) -> Option<(Code, Vec<u8>)> {
        let CudaError::Jit { error, log, .. } = refused else { return None };
        if error.code != sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION {
            return None;
        }
        // ptxas says "Unsupported .version 9.4; current version is '9.0'".
        let supported = log.split("current version is '").nth(1)?.split('\'').next()?.to_string();
        let text = std::str::from_utf8(image.strip_suffix(&[0]).unwrap_or(image)).ok()?;
        let declared = text.lines().find_map(|l| l.trim().strip_prefix(".version"))?.trim().to_string();
        let lowered = text.replacen(&format!(".version {declared}"), &format!(".version {supported}"), 1);
        let mut lowered = lowered.into_bytes();
        lowered.push(0);
        let code = Code::load(&lowered, library).ok()?;
        self.warnings.push(format!(
            "module {module}: its PTX declares .version {declared}, newer than this driver's {supported}: \
             loaded as .version {supported} (its kernels use nothing newer)"
        ));
        Some((code, lowered))
    }

    fn load_inner(&mut self, archive: &Archive) -> Result<(), CudaError> {
        let has_control = archive.ops().any(|op| matches!(op, Op::While { .. } | Op::If { .. }));
        let driver = self.slots[0].device.driver;
        if self.mode == Mode::Graph && has_control && !driver.has_conditional_nodes() {
            self.warnings.push(format!(
                "CUDA driver {} has no conditional graph nodes (12.4 or newer has): replaying op by op with loops driven from the host",
                driver.version_string()
            ));
            self.mode = Mode::Stream;
        }
        let multi = self.slots.len() > 1;
        if multi && self.options.module_functions {
            return Err(CudaError::Invalid(
                "a replay on several GPUs loads code as libraries (their kernels run in any context): leave module functions off".into(),
            ));
        }
        if multi && self.options.op_timing {
            return Err(CudaError::Invalid(
                "per-op timing compares events of one GPU: place every device of the archive on one GPU to time its ops".into(),
            ));
        }
        // The architecture every GPU of the replay has (their oldest), and the one they share.
        let oldest_sm = self.slots.iter().map(|s| s.device.sm).min().unwrap_or(0);
        let shared_sm = Some(self.slots[0].device.sm).filter(|sm| self.slots.iter().all(|s| s.device.sm == *sm));

        let pdl_available = self.mode == Mode::Graph && oldest_sm >= 90 && driver.version >= 12030;
        if self.pdl && !pdl_available && self.options.pdl == Pdl::On {
            self.warnings.push(format!(
                "programmatic dependent launch needs graph mode on an sm_90 or newer GPU with CUDA driver 12.3 or newer \
                 (this is sm_{oldest_sm}, driver {}): plain graph edges",
                driver.version_string()
            ));
        }
        self.pdl &= pdl_available;

        archive.verify_blobs()?;
        let clock = std::time::Instant::now();
        // Modules: a cubin built for exactly this GPU if the archive has one, else its PTX (with
        // a wait at every entry for programmatic dependent launch).
        let mut module_waits = Vec::new();
        let library = !self.options.module_functions;
        let mut functions: HashMap<KernelId, Func> = HashMap::new();
        let mut images = Vec::new();
        for m in archive.modules() {
            let (image, waits) = match m.cubins.iter().find(|(sm, _)| Some(*sm) == shared_sm) {
                Some((_, cubin)) => (cubin.decode()?, false),
                None => {
                    let ptx = m.ptx.decode()?;
                    let (mut ptx, waits) = match self
                        .pdl
                        .then(|| std::str::from_utf8(&ptx).map_err(|e| e.to_string()).and_then(pdl::with_entry_waits))
                    {
                        None => (ptx, false),
                        Some(Ok(pdl::Rewritten::Waits(text))) => (text.into_bytes(), true),
                        Some(Ok(pdl::Rewritten::OwnWaits)) => (ptx, true),
                        Some(Err(why)) => {
                            self.warnings.push(format!("module {}: plain edges into its kernels ({why})", m.name));
                            (ptx, false)
                        }
                    };
                    ptx.push(0);
                    (ptx, waits)
                }
            };
            module_waits.push(waits);
            let (code, image) = match Code::load(&image, library) {
                Ok(code) => (code, image),
                Err((error, log)) => {
                    let jit = CudaError::Jit { module: m.name.to_owned(), error, log };
                    match self.load_with_older_ptx_version(m.name, &image, library, &jit) {
                        Some(loaded) => loaded,
                        None => return Err(jit),
                    }
                }
            };
            if multi && matches!(code, Code::Module(_)) {
                code.unload();
                return Err(CudaError::Invalid(format!(
                    "module {} loads only as a module of one context, not as a library: it cannot be replayed on several GPUs",
                    m.name
                )));
            }
            self.modules.push(code);
            images.push(image);
        }
        for k in archive.kernels() {
            let name = std::ffi::CString::new(k.name)
                .map_err(|_| CudaError::Invalid(format!("kernel name {:?} holds a NUL byte", k.name)))?;
            let code = self.modules[k.module as usize];
            let looked_up = code.get(&name).map_err(|error| {
                let module = archive.module(k.module).name.to_owned();
                // A library may compile its PTX only when a kernel is first looked up: a module
                // load of the same image gives the JIT log.
                match Code::load(&images[k.module as usize], false) {
                    Err((error, log)) if matches!(code, Code::Library(_)) => CudaError::Jit { module, error, log },
                    Ok(m) => {
                        m.unload();
                        CudaError::Kernel { module, kernel: k.name.to_owned(), error }
                    }
                    Err(_) => CudaError::Kernel { module, kernel: k.name.to_owned(), error },
                }
            });
            let f = match looked_up {
                Ok(f) => f,
                Err(e) => {
                    let module = archive.module(k.module).name;
                    let Some((lowered, image)) =
                        self.load_with_older_ptx_version(module, &images[k.module as usize], library, &e)
                    else {
                        return Err(e);
                    };
                    std::mem::replace(&mut self.modules[k.module as usize], lowered).unload();
                    images[k.module as usize] = image;
                    lowered.get(&name).map_err(|error| CudaError::Kernel {
                        module: module.to_owned(),
                        kernel: k.name.to_owned(),
                        error,
                    })?
                }
            };
            functions.insert(k.id, f);
        }
        let own = |src: &str, what: &str| -> Result<Code, CudaError> {
            let mut image = src.as_bytes().to_vec();
            image.push(0);
            Code::load(&image, library).map_err(|(error, log)| CudaError::Jit { module: what.to_owned(), error, log })
        };
        let fills = own(kernels::FILL_MODULE, "recap fill kernels")?;
        self.modules.push(fills);
        let condition = if has_control && self.mode == Mode::Graph {
            let text =
                if self.programmatic { kernels::CONDITION_MODULE_PROGRAMMATIC } else { kernels::CONDITION_MODULE };
            let m = own(text, "recap condition kernel")?;
            self.modules.push(m);
            Some(m)
        } else {
            None
        };
        for slot in &mut self.slots {
            slot.device.bind()?;
            slot.fill_u64 = get_function(fills, kernels::FILL_U64)?;
            slot.fill_bytes = get_function(fills, kernels::FILL_BYTES)?;
            slot.set_condition = condition.map(|m| get_function(m, kernels::SET_CONDITION)).transpose()?;
        }
        // Kernels of the other GPUs: the same library kernels, as functions of their contexts.
        let mut functions_on: Vec<HashMap<KernelId, Func>> = vec![functions];
        for slot in &self.slots[1..] {
            slot.device.bind()?;
            let mut here = HashMap::new();
            for (&k, f) in &functions_on[0] {
                let mut function = std::ptr::null_mut();
                call!(cuKernelGetFunction(&mut function, f.kernel))?;
                here.insert(k, Func { function, kernel: f.kernel });
            }
            functions_on.push(here);
        }
        for i in 0..self.slots.len() {
            for j in 0..self.slots.len() {
                let on = !self.options.without_peer_access;
                if i != j && !self.slots[i].device.set_peer_access(&self.slots[j].device, on)? && on {
                    self.warnings.push(format!(
                        "cuda:{} cannot reach cuda:{} directly: copies between them are staged by the driver",
                        self.slots[i].device.ordinal, self.slots[j].device.ordinal
                    ));
                }
            }
        }

        self.load_times.modules = clock.elapsed();
        let clock = std::time::Instant::now();
        // Regions, each on its device's GPU: first those placed at their captured addresses (before
        // any allocation of this replay could take their range), then the others.
        let placed = shared::placement::placed_regions(archive, self.options.placement)
            .map_err(|e| CudaError::Invalid(e.to_string()))?;
        let mut at: Vec<Option<u64>> = vec![None; archive.region_count()];
        for slot in 0..self.slots.len() {
            let wanted: Vec<Wanted> = placed
                .iter()
                .map(|a| (a, archive.region(a.region)))
                .filter(|(_, r)| self.placement[r.device as usize] == slot)
                .map(|(a, r)| Wanted { name: r.name, address: a.address, size: r.size })
                .collect();
            if wanted.is_empty() {
                continue;
            }
            self.slots[slot].device.bind()?;
            let mut done = Vec::new();
            let result = crate::placed::place(self.slots[slot].device.ordinal, &wanted, &mut done);
            self.reservations.extend(done.into_iter().map(|r| (slot, r)));
            result?;
        }
        for a in &placed {
            at[a.region as usize] = Some(a.address);
        }
        for (i, r) in archive.regions().enumerate() {
            let slot = self.placement[r.device as usize];
            self.slots[slot].device.bind()?;
            // A module variable is the loaded module's own storage on its GPU, never allocated.
            if let Some(addr) = super::module_vars::address(archive, i as RegionId, &self.modules)? {
                self.regions.push(RegionAlloc { base: 0, addr, size: r.size, slot });
                continue;
            }
            if let Some(addr) = at[i] {
                self.regions.push(RegionAlloc { base: 0, addr, size: r.size, slot });
                continue;
            }
            self.slots[slot].device.bind()?;
            let align = r.align.max(1) as u64;
            let extra = if align > 256 { align } else { 0 };
            let mut base = 0;
            call!(cuMemAlloc_v2(&mut base, (r.size.max(1) + extra) as usize))?;
            let addr = base.next_multiple_of(align);
            self.regions.push(RegionAlloc { base, addr, size: r.size, slot });
        }
        let control_ops = archive.ops().filter(|op| matches!(op, Op::While { .. } | Op::If { .. })).count();
        for slot in &mut self.slots {
            slot.device.bind()?;
            // Per while/if: its pass counter, and how many times its limit stopped it.
            call!(cuMemAlloc_v2(&mut slot.control, control_ops.max(1) * 8))?;
            call!(cuMemsetD8_v2(slot.control, 0, control_ops.max(1) * 8))?;
            slot.stream = slot.device.stream();
            call!(cuEventCreate(&mut slot.handoff, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32))?;
        }
        self.slots[0].device.bind()?;
        for ev in [&mut self.start, &mut self.end] {
            call!(cuEventCreate(ev, sys::CUevent_flags::CU_EVENT_DEFAULT as u32))?;
        }
        self.restore_initial(archive)?;
        self.load_times.regions = clock.elapsed();

        // Steps.
        let map_uses = crate::tensor_maps::uses(archive).map_err(CudaError::Invalid)?;
        let launch_attrs = shared::launch_attrs::of_archive(archive).map_err(|e| CudaError::Invalid(e.to_string()))?;
        let mut next_counter = 0u64;
        for id in 0..archive.op_count() as u32 {
            self.labels.push(archive.op_label(id));
            let slot = self.op_slots[id as usize];
            let step = match archive.op(id) {
                Op::Launch(l) => {
                    let k = archive.kernel(l.kernel);
                    let mut params = l.params.to_vec();
                    let relocs: Vec<Reloc> = archive.relocs(l.relocs.clone()).collect();
                    patch(&mut params, relocs.iter().copied(), &self.regions);
                    let mut maps = Vec::new();
                    for u in map_uses.get(&id).into_iter().flatten() {
                        let (at, region) = (u.param_offset as usize, u.region as usize);
                        let Some(r) = self.regions.get(region).filter(|r| u.offset <= r.size) else {
                            return Err(CudaError::Invalid(format!(
                                "op {id}: a tensor map in region {region}, which the archive does not have"
                            )));
                        };
                        if at + shared::tensor_map::SIZE > params.len() {
                            return Err(CudaError::Invalid(format!(
                                "op {id}: a tensor map at parameter offset {at}, past its parameters"
                            )));
                        }
                        let map = crate::tensor_maps::encode(u, r.addr + u.offset).map_err(|e| self.op_error(id, e))?;
                        maps.push((at, map));
                    }
                    patch_maps(&mut params, &maps);
                    let func = functions_on[slot][&l.kernel];
                    if l.shared_bytes > 48 * 1024 {
                        self.slots[slot].device.bind()?;
                        call!(cuFuncSetAttribute(
                            func.function,
                            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            l.shared_bytes as i32
                        ))
                        .map_err(|error| self.op_error(id, error))?;
                    }
                    Step::Kernel(KernelStep {
                        func,
                        grid: l.grid,
                        block: l.block,
                        shared: l.shared_bytes,
                        params,
                        offsets: k.params.iter().map(|p| p.offset as usize).collect(),
                        relocs,
                        maps,
                        waits: module_waits[k.module as usize],
                        slot,
                        attrs: launch_attrs.get(&id).map(crate::launch_attrs::for_launch).unwrap_or_default(),
                    })
                }
                Op::Copy(c) if c.len > 0 => Step::Copy {
                    src: self.regions[c.src as usize].addr + c.src_offset,
                    dst: self.regions[c.dst as usize].addr + c.dst_offset,
                    len: c.len,
                },
                Op::Memset(m) if m.len > 0 => {
                    let dst = self.regions[m.region as usize].addr + m.offset;
                    Step::Memset { dst, fill: lower_memset(dst, m.len, m.width, m.pattern), slot }
                }
                Op::Alloc(_) | Op::Free(_) | Op::Signal(_) | Op::Wait(_) => Step::Barrier,
                Op::While { cond, .. } | Op::If { cond, .. } => {
                    let kind = if matches!(archive.op(id), Op::While { .. }) { Control::While } else { Control::If };
                    self.bodies.insert(id, archive.body(id));
                    let counter = self.slots[slot].control + next_counter * 8;
                    next_counter += 1;
                    Step::Control {
                        kind,
                        cond: self.regions[cond.region as usize].addr + cond.offset,
                        cond_span: Span::new(cond.region, cond.offset, cond.offset + 4),
                        counter,
                        max_iterations: cond.max_iterations,
                        slot,
                    }
                }
                Op::Copy(_) | Op::Memset(_) | Op::Marker(_) => Step::Skip,
            };
            self.steps.push(step);
        }

        self.slots[0].device.bind()?;
        if self.mode == Mode::Graph {
            let clock = std::time::Instant::now();
            let (mut graph, mut kernel_nodes, mut node_count, mut edge_count) = self.build_graph()?;
            self.load_times.build = clock.elapsed();
            let clock = std::time::Instant::now();
            let mut exec = std::ptr::null_mut();
            let mut r = call!(cuGraphInstantiateWithFlags(&mut exec, graph, 0));
            if r.is_err() && self.programmatic_edges + self.dependent_edges > 0 {
                // A driver that takes programmatic edges but cannot instantiate them in a
                // conditional body: ordinary edges do the same work, one launch latency slower.
                call!(cuGraphDestroy(graph)).ok();
                if self.dependent_edges > 0 {
                    self.warnings.push(
                        "the driver could not instantiate programmatic edges between kernels: plain graph edges".into(),
                    );
                }
                self.programmatic = false;
                self.programmatic_edges = 0;
                self.pdl = false;
                self.dependent_edges = 0;
                (graph, kernel_nodes, node_count, edge_count) = self.build_graph()?;
                r = call!(cuGraphInstantiateWithFlags(&mut exec, graph, 0));
            }
            if let Err(e) = r {
                call!(cuGraphDestroy(graph)).ok();
                return Err(e.into());
            }
            self.graph = Some(GraphState { graph, exec, kernel_nodes, node_count, edge_count });
            call!(cuGraphUpload(exec, self.slots[0].stream))?;
            call!(cuStreamSynchronize(self.slots[0].stream))?;
            self.load_times.instantiate = clock.elapsed();
        }
        Ok(())
    }

    /// Writes every region's initial bytes (zeros where the archive has none) with its pointers relocated.
    pub fn restore_initial(&mut self, archive: &Archive) -> Result<(), CudaError> {
        self.ready()?;
        let mut relocs: HashMap<RegionId, Vec<Reloc>> = HashMap::new();
        for (owner, r) in archive.region_relocs() {
            relocs.entry(owner).or_default().push(r);
        }
        for r in archive.regions() {
            let alloc = &self.regions[r.id as usize];
            let owned = relocs.get(&r.id);
            let slot = &self.slots[alloc.slot];
            slot.device.bind()?;
            match (&r.initial, owned) {
                (None, None) => {
                    call!(cuMemsetD8Async(alloc.addr, 0, r.size as usize, slot.stream))?;
                }
                _ => {
                    let mut bytes = match &r.initial {
                        Some(b) => b.decode()?,
                        None => host_buffer(r.size, r.name)?,
                    };
                    if let Some(list) = owned {
                        patch(&mut bytes, list.iter().copied(), &self.regions);
                    }
                    self.copy_in(alloc.slot, alloc.addr, &bytes)?;
                }
            }
        }
        for slot in &self.slots {
            slot.device.bind()?;
            call!(cuStreamSynchronize(slot.stream))?;
        }
        self.slots[0].device.bind()?;
        Ok(())
    }

    /// Copies `bytes` to `addr` on the stream of `slot`, whose context must be current.
    fn copy_in(&self, slot: usize, addr: CUdeviceptr, bytes: &[u8]) -> Result<(), CudaError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let stream = self.slots[slot].stream;
        call!(cuMemcpyHtoDAsync_v2(addr, bytes.as_ptr() as *const c_void, bytes.len(), stream))?;
        // Pageable host memory: the copy has read `bytes` only once the stream gets past it.
        call!(cuStreamSynchronize(stream))?;
        Ok(())
    }

    fn op_error(&self, op: OpId, error: DriverError) -> CudaError {
        CudaError::Op { op, label: self.labels.get(op as usize).cloned().unwrap_or_default(), error }
    }

    /// Turns a sticky error into a fault: resets the device so that the next replay works.
    fn fail(&mut self, e: CudaError) -> CudaError {
        let sticky = e.driver().is_some_and(|d| d.is_sticky());
        if !sticky {
            return e;
        }
        self.poisoned = true;
        let op = match &e {
            CudaError::Op { op, label, .. } => Some((*op, label.clone())),
            _ => None,
        };
        let error = e.driver().cloned().expect("sticky errors carry a driver error");
        // A fault on one GPU of several leaves the others' work of this replay undefined too.
        let lost = self.slots.iter().filter_map(|s| s.device.recover().err()).map(|e| e.to_string()).next();
        let device = self.slots.iter().map(|s| format!("{:?}", s.device)).collect::<Vec<_>>().join(" + ");
        CudaError::Fault { device, op, error, lost }
    }

    fn ready(&self) -> Result<(), CudaError> {
        if self.poisoned || self.slots.iter().any(|s| s.device.generation() != s.generation) {
            return Err(CudaError::Stale);
        }
        self.slots[0].device.bind()?;
        Ok(())
    }

    /// Stream mode: makes `slot` current, its stream first waiting for everything submitted on
    /// the slot of the op before.
    fn enter(&mut self, slot: usize) -> Result<sys::CUstream, DriverError> {
        if self.slots.len() == 1 {
            return Ok(self.slots[0].stream);
        }
        let handoff = if slot != self.current {
            let from = &self.slots[self.current];
            from.device.bind()?;
            call!(cuEventRecord(from.handoff, from.stream))?;
            Some(from.handoff)
        } else {
            None
        };
        let to = &self.slots[slot];
        to.device.bind()?;
        if let Some(event) = handoff {
            call!(cuStreamWaitEvent(to.stream, event, 0))?;
        }
        self.current = slot;
        Ok(to.stream)
    }

    // ---- graph construction ----

    fn build_graph(&mut self) -> Result<(CUgraph, HashMap<OpId, CUgraphNode>, usize, usize), CudaError> {
        let mut graph = std::ptr::null_mut();
        call!(cuGraphCreate(&mut graph, 0))?;
        let mut b =
            GraphBuilder { me: self, kernel_nodes: HashMap::new(), kernel_slots: HashMap::new(), nodes: 0, edges: 0 };
        let top = b.me.plan.dags[0].clone();
        match b.add_scope(graph, &top) {
            Ok(_) => {
                let GraphBuilder { kernel_nodes, nodes, edges, .. } = b;
                Ok((graph, kernel_nodes, nodes, edges))
            }
            Err(e) => {
                call!(cuGraphDestroy(graph)).ok();
                Err(e)
            }
        }
    }

    // ---- replay ----

    /// Submits one replay without waiting for it. Pair with [`CudaReplay::synchronize`].
    pub fn launch(&mut self) -> Result<(), CudaError> {
        self.ready()?;
        self.apply_param_changes().map_err(|e| self.fail(e))?;
        let r = self.submit();
        r.map_err(|e| self.fail(e))
    }

    fn submit(&mut self) -> Result<(), CudaError> {
        match &self.graph {
            Some(g) if self.mode == Mode::Graph => {
                call!(cuGraphLaunch(g.exec, self.slots[0].stream))?;
                Ok(())
            }
            _ => {
                self.op_log.clear();
                let top: Vec<OpId> = self.plan.dags[0].nodes.clone();
                self.run_ops(&top, None)?;
                self.join_slots()
            }
        }
    }

    /// Stream mode: the first slot's stream waits for the work of every other slot, so that
    /// what follows on it (the end event, a read) comes after the whole replay.
    fn join_slots(&mut self) -> Result<(), CudaError> {
        if self.slots.len() > 1 {
            for i in 1..self.slots.len() {
                self.enter(i)?;
            }
            self.enter(0)?;
        }
        Ok(())
    }

    /// Replays once op by op (stream mode only), calling `hook` with each op as it finishes (an op
    /// without a body once it has run, a while/if once its passes are done), in the order the CPU
    /// replay's `step` gives them: what holding the GPU beside another replay, op by op, needs.
    pub fn replay_each_op(&mut self, hook: &mut OpHook<'_>) -> Result<(), CudaError> {
        if self.mode != Mode::Stream {
            return Err(CudaError::Invalid("an op-by-op replay needs stream mode".into()));
        }
        self.ready()?;
        self.apply_param_changes().map_err(|e| self.fail(e))?;
        self.op_log.clear();
        let top: Vec<OpId> = self.plan.dags[0].nodes.clone();
        let r = self.run_ops(&top, Some(hook)).and_then(|_| self.join_slots());
        r.map_err(|e| self.fail(e))?;
        self.synchronize()
    }

    /// Waits for everything submitted so far.
    pub fn synchronize(&mut self) -> Result<(), CudaError> {
        self.ready()?;
        let r = self.slots.iter().try_for_each(|s| s.device.bind().and_then(|_| call!(cuStreamSynchronize(s.stream))));
        self.current = 0;
        r.map_err(|e| self.fail(e.into()))?;
        self.slots[0].device.bind()?;
        Ok(())
    }

    /// Replays once and waits; returns the device time between the replay's start and end.
    pub fn replay(&mut self) -> Result<Duration, CudaError> {
        self.ready()?;
        self.apply_param_changes().map_err(|e| self.fail(e))?;
        let r = (|| {
            let stream = self.slots[0].stream;
            call!(cuEventRecord(self.start, stream))?;
            self.submit()?;
            call!(cuEventRecord(self.end, stream))?;
            for s in &self.slots {
                s.device.bind()?;
                call!(cuStreamSynchronize(s.stream))?;
            }
            self.slots[0].device.bind()?;
            let mut ms = 0f32;
            call!(cuEventElapsedTime(&mut ms, self.start, self.end))?;
            Ok(Duration::from_secs_f64(ms as f64 / 1e3))
        })();
        r.map_err(|e| self.fail(e))
    }

    fn run_ops(&mut self, ops: &[OpId], mut hook: Option<&mut OpHook<'_>>) -> Result<(), CudaError> {
        for &op in ops {
            self.run_op(op, hook.as_deref_mut())?;
            if let Some(hook) = hook.as_deref_mut() {
                hook(self, op)?;
            }
        }
        Ok(())
    }

    fn run_op(&mut self, op: OpId, mut hook: Option<&mut OpHook<'_>>) -> Result<(), CudaError> {
        let stream = self.enter(self.op_slots[op as usize]).map_err(|e| self.op_error(op, e))?;
        let step = self.steps[op as usize].clone();
        let r: Result<(), DriverError> = match step {
            Step::Kernel(mut k) => launch_kernel(&mut k, stream),
            Step::Copy { src, dst, len, .. } => call!(cuMemcpyDtoDAsync_v2(dst, src, len as usize, stream)),
            Step::Memset { dst, fill, slot } => self.run_fill(slot, dst, fill),
            Step::Control { kind, cond, max_iterations, .. } => {
                let body: Vec<OpId> = self.plan.body(op).map(|d| d.nodes.clone()).unwrap_or_default();
                let mut done = 0u32;
                loop {
                    if kind == Control::If && done == 1 {
                        break;
                    }
                    let mut word = 0u32;
                    call!(cuStreamSynchronize(stream)).map_err(|e| self.op_error(op, e))?;
                    call!(cuMemcpyDtoH_v2(&mut word as *mut u32 as *mut c_void, cond, 4))
                        .map_err(|e| self.op_error(op, e))?;
                    match next_pass(done, max_iterations, word) {
                        Pass::Run => {}
                        Pass::Done => break,
                        Pass::Limited => {
                            *self.host_limit_hits.entry(op).or_default() += 1;
                            break;
                        }
                    }
                    self.run_ops(&body, hook.as_deref_mut())?;
                    // The body ran on this op's GPU; a later pass reads the word on its stream.
                    self.enter(self.op_slots[op as usize]).map_err(|e| self.op_error(op, e))?;
                    done += 1;
                }
                Ok(())
            }
            Step::Barrier | Step::Skip => return Ok(()),
        };
        r.map_err(|e| self.op_error(op, e))?;
        if self.options.sync_each_op {
            call!(cuStreamSynchronize(stream)).map_err(|e| self.op_error(op, e))?;
        }
        if self.options.op_timing {
            let i = self.op_log.len();
            if i >= self.op_events.len() {
                let mut ev = std::ptr::null_mut();
                call!(cuEventCreate(&mut ev, sys::CUevent_flags::CU_EVENT_DEFAULT as u32))?;
                self.op_events.push(ev);
            }
            call!(cuEventRecord(self.op_events[i], stream))?;
            self.op_log.push((op, i));
        }
        Ok(())
    }

    fn run_fill(&self, slot: usize, dst: CUdeviceptr, fill: Fill) -> Result<(), DriverError> {
        let stream = self.slots[slot].stream;
        match fill {
            Fill::Memset { elem: 1, value, count } => call!(cuMemsetD8Async(dst, value as u8, count as usize, stream)),
            Fill::Memset { elem: 2, value, count } => {
                call!(cuMemsetD16Async(dst, value as u16, count as usize, stream))
            }
            Fill::Memset { value, count, .. } => call!(cuMemsetD32Async(dst, value, count as usize, stream)),
            other => launch_kernel(&mut self.fill_step(slot, dst, other), stream),
        }
    }

    fn fill_step(&self, slot: usize, dst: CUdeviceptr, fill: Fill) -> KernelStep {
        let s = &self.slots[slot];
        match fill {
            Fill::U64 { count, pattern } => Args::default().u64(dst).u64(count).u64(pattern).launch(
                (s.fill_u64, slot),
                kernels::fill_grid(count),
                kernels::FILL_BLOCK,
            ),
            Fill::Bytes { len, pattern, width } => Args::default().u64(dst).u64(len).u64(pattern).u32(width).launch(
                (s.fill_bytes, slot),
                kernels::fill_grid(len),
                kernels::FILL_BLOCK,
            ),
            Fill::Memset { .. } => unreachable!("memsets are not kernels"),
        }
    }

    /// Per-op device times of the last stream-mode replay with `op_timing` on.
    pub fn op_times(&mut self) -> Result<Vec<OpTime>, CudaError> {
        self.ready()?;
        let mut totals: Vec<OpTime> = Vec::new();
        let mut index: HashMap<OpId, usize> = HashMap::new();
        let mut prev = self.start;
        for &(op, ev) in &self.op_log {
            let mut ms = 0f32;
            call!(cuEventElapsedTime(&mut ms, prev, self.op_events[ev]))?;
            prev = self.op_events[ev];
            let i = *index.entry(op).or_insert_with(|| {
                totals.push(OpTime { op, label: self.labels[op as usize].clone(), runs: 0, total: Duration::ZERO });
                totals.len() - 1
            });
            totals[i].runs += 1;
            totals[i].total += Duration::from_secs_f64(ms.max(0.0) as f64 / 1e3);
        }
        Ok(totals)
    }

    // ---- bindings and updates ----

    fn region_index(&self, region: RegionId) -> Result<&RegionAlloc, CudaError> {
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
        Ok(())
    }

    fn apply_param_changes(&mut self) -> Result<(), CudaError> {
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

    /// For comparison only: records one stream-mode submission by stream capture and launches
    /// that graph from now on (a chain in archive order, not the plan's DAG). Archives with loops
    /// cannot be captured: their host loop reads the condition back.
    pub fn capture_stream_graph(&mut self) -> Result<(), CudaError> {
        self.ready()?;
        if self.mode != Mode::Stream
            || self.steps.iter().any(|s| matches!(s, Step::Control { .. }))
            || self.slots.len() > 1
        {
            return Err(CudaError::Invalid(
                "only a stream-mode replay on one GPU without loops can be captured".into(),
            ));
        }
        let stream = self.slots[0].stream;
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        call!(cuStreamBeginCapture_v2(stream, mode))?;
        let submitted = self.submit();
        let mut graph = std::ptr::null_mut();
        let ended = call!(cuStreamEndCapture(stream, &mut graph));
        submitted?;
        ended?;
        let mut exec = std::ptr::null_mut();
        call!(cuGraphInstantiateWithFlags(&mut exec, graph, 0))?;
        self.graph = Some(GraphState { graph, exec, kernel_nodes: HashMap::new(), node_count: 0, edge_count: 0 });
        self.mode = Mode::Graph;
        Ok(())
    }

    /// Applies parameter changes made with [`CudaReplay::set_launch_params`] now rather than at
    /// the next launch.
    pub fn apply_updates(&mut self) -> Result<(), CudaError> {
        self.ready()?;
        self.apply_param_changes().map_err(|e| self.fail(e))
    }

    // ---- facts ----

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

/// Stands in for recap's own kernels until they are loaded.
const NO_FUNC: Func = Func { function: std::ptr::null_mut(), kernel: std::ptr::null_mut() };

fn get_function(code: Code, name: &str) -> Result<Func, CudaError> {
    let c = std::ffi::CString::new(name).expect("static names");
    code.get(&c).map_err(|error| CudaError::Kernel { module: "recap".into(), kernel: name.into(), error })
}

fn launch_kernel(k: &mut KernelStep, stream: sys::CUstream) -> Result<(), DriverError> {
    let mut args = k.arg_pointers();
    let params = if args.is_empty() { std::ptr::null_mut() } else { args.as_mut_ptr() };
    if !k.attrs.is_empty() {
        let config = sys::CUlaunchConfig {
            gridDimX: k.grid[0],
            gridDimY: k.grid[1],
            gridDimZ: k.grid[2],
            blockDimX: k.block[0],
            blockDimY: k.block[1],
            blockDimZ: k.block[2],
            sharedMemBytes: k.shared,
            hStream: stream,
            attrs: k.attrs.as_mut_ptr(),
            numAttrs: k.attrs.len() as u32,
        };
        return call!(cuLaunchKernelEx(&config, k.func.function, params, std::ptr::null_mut()));
    }
    call!(cuLaunchKernel(
        k.func.function,
        k.grid[0],
        k.grid[1],
        k.grid[2],
        k.block[0],
        k.block[1],
        k.block[2],
        k.shared,
        stream,
        params,
        std::ptr::null_mut(),
    ))
}

/// Adds one DAG (the top level or a body) to a CUDA graph.
struct GraphBuilder<'r> {
    me: &'r mut CudaReplay,
    kernel_nodes: HashMap<OpId, CUgraphNode>,
    /// The slot of every kernel node added: programmatic edges join kernels of one GPU only.
    kernel_slots: HashMap<CUgraphNode, usize>,
    nodes: usize,
    edges: usize,
}

impl GraphBuilder<'_> {
    /// Adds `dag`'s ops to `graph`; returns each placed op's exit node.
    fn add_scope(&mut self, graph: CUgraph, dag: &Dag) -> Result<HashMap<OpId, CUgraphNode>, CudaError> {
        let mut exits: HashMap<OpId, CUgraphNode> = HashMap::new();
        let mut last: Option<CUgraphNode> = None;
        for &op in &dag.nodes {
            let deps: Vec<CUgraphNode> = if self.me.options.serial {
                last.into_iter().collect()
            } else {
                dag.preds(op).filter_map(|p| exits.get(&p).copied()).collect()
            };
            let Some(exit) = self.add_op(graph, op, &deps).map_err(|e| match e {
                CudaError::Driver(error) => self.me.op_error(op, error),
                other => other,
            })?
            else {
                continue;
            };
            exits.insert(op, exit);
            last = Some(exit);
        }
        Ok(exits)
    }

    fn count(&mut self, deps: &[CUgraphNode]) {
        self.nodes += 1;
        self.edges += deps.len();
    }

    fn add_kernel(
        &mut self,
        graph: CUgraph,
        k: &mut KernelStep,
        deps: &[CUgraphNode],
    ) -> Result<CUgraphNode, CudaError> {
        let mut args = k.arg_pointers();
        let p = k.node_params(&mut args, self.me.slots[k.slot].device.context());
        let mut node = std::ptr::null_mut();
        call!(cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), &p))?;
        for a in &k.attrs {
            call!(cuGraphKernelNodeSetAttribute(node, a.id, &a.value))?;
        }
        self.count(deps);
        self.kernel_slots.insert(node, k.slot);
        Ok(node)
    }

    /// Joins `to` after `from` through programmatic edges (the kernel `to` waits for their writes
    /// with `griddepcontrol.wait`), falling back to ordinary edges where the driver refuses them.
    /// Gives how many programmatic edges were added.
    fn join_programmatic(
        &mut self,
        graph: CUgraph,
        from: &[CUgraphNode],
        to: CUgraphNode,
        port: u32,
    ) -> Result<usize, CudaError> {
        if from.is_empty() {
            return Ok(0);
        }
        let edge = sys::CUgraphEdgeData {
            from_port: port as u8,
            to_port: 0,
            type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
            reserved: [0; 5],
        };
        let targets = vec![to; from.len()];
        let data = vec![edge; from.len()];
        self.edges += from.len();
        match call!(cuGraphAddDependencies_v2(graph, from.as_ptr(), targets.as_ptr(), data.as_ptr(), from.len())) {
            Ok(()) => Ok(from.len()),
            Err(_) => {
                call!(cuGraphAddDependencies(graph, from.as_ptr(), targets.as_ptr(), from.len()))?;
                Ok(0)
            }
        }
    }

    /// `deps` split into kernel nodes on `slot`'s GPU (which a kernel there may follow through
    /// programmatic edges) and the rest.
    fn kernels_and_rest(&self, deps: &[CUgraphNode], slot: usize) -> (Vec<CUgraphNode>, Vec<CUgraphNode>) {
        deps.iter().partition(|&n| self.kernel_slots.get(n) == Some(&slot))
    }

    /// Adds recap's condition kernel after a WHILE body's `writers`: through programmatic edges
    /// from kernel nodes where the device has them (the kernel waits for their writes with
    /// `griddepcontrol.wait`), through ordinary edges otherwise.
    fn add_tail(&mut self, graph: CUgraph, tail: &mut KernelStep, writers: &[CUgraphNode]) -> Result<(), CudaError> {
        let (kernels, rest) = if self.me.programmatic {
            self.kernels_and_rest(writers, tail.slot)
        } else {
            (Vec::new(), writers.to_vec())
        };
        let node = self.add_kernel(graph, tail, &rest)?;
        let added = self.join_programmatic(graph, &kernels, node, self.me.programmatic_port)?;
        self.me.programmatic_edges += added;
        Ok(())
    }

    fn add_op(&mut self, graph: CUgraph, op: OpId, deps: &[CUgraphNode]) -> Result<Option<CUgraphNode>, CudaError> {
        let slot = self.me.op_slots[op as usize];
        // The context every node of this op runs in: its GPU's.
        let ctx = self.me.slots[slot].device.context();
        let step = self.me.steps[op as usize].clone();
        let node = match step {
            Step::Kernel(mut k) if self.me.pdl && k.waits => {
                let (kernels, rest) = self.kernels_and_rest(deps, k.slot);
                let node = self.add_kernel(graph, &mut k, &rest)?;
                let port = if self.me.options.pdl_from_launch {
                    sys::CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER
                } else {
                    sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
                };
                let added = self.join_programmatic(graph, &kernels, node, port)?;
                self.me.dependent_edges += added;
                self.kernel_nodes.insert(op, node);
                node
            }
            Step::Kernel(mut k) => {
                let node = self.add_kernel(graph, &mut k, deps)?;
                self.kernel_nodes.insert(op, node);
                node
            }
            Step::Copy { src, dst, len, .. } => {
                let p = sys::CUDA_MEMCPY3D {
                    srcXInBytes: 0,
                    srcY: 0,
                    srcZ: 0,
                    srcLOD: 0,
                    srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                    srcHost: std::ptr::null(),
                    srcDevice: src,
                    srcArray: std::ptr::null_mut(),
                    reserved0: std::ptr::null_mut(),
                    srcPitch: 0,
                    srcHeight: 0,
                    dstXInBytes: 0,
                    dstY: 0,
                    dstZ: 0,
                    dstLOD: 0,
                    dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                    dstHost: std::ptr::null_mut(),
                    dstDevice: dst,
                    dstArray: std::ptr::null_mut(),
                    reserved1: std::ptr::null_mut(),
                    dstPitch: 0,
                    dstHeight: 0,
                    WidthInBytes: len as usize,
                    Height: 1,
                    Depth: 1,
                };
                let mut node = std::ptr::null_mut();
                call!(cuGraphAddMemcpyNode(&mut node, graph, deps.as_ptr(), deps.len(), &p, ctx))?;
                self.count(deps);
                node
            }
            Step::Memset { dst, fill, .. } => match fill {
                Fill::Memset { elem, value, count } => {
                    let p = sys::CUDA_MEMSET_NODE_PARAMS {
                        dst,
                        pitch: 0,
                        value,
                        elementSize: elem,
                        width: count as usize,
                        height: 1,
                    };
                    let mut node = std::ptr::null_mut();
                    call!(cuGraphAddMemsetNode(&mut node, graph, deps.as_ptr(), deps.len(), &p, ctx))?;
                    self.count(deps);
                    node
                }
                other => {
                    let mut k = self.me.fill_step(slot, dst, other);
                    self.add_kernel(graph, &mut k, deps)?
                }
            },
            Step::Barrier => {
                let mut node = std::ptr::null_mut();
                call!(cuGraphAddEmptyNode(&mut node, graph, deps.as_ptr(), deps.len()))?;
                self.count(deps);
                node
            }
            Step::Skip => return Ok(None),
            Step::Control { kind, cond, cond_span, counter, max_iterations, .. } => {
                let set = (self.me.slots[slot].set_condition.expect("loaded for archives with loops"), slot);
                let mut handle: sys::CUgraphConditionalHandle = 0;
                call!(cuGraphConditionalHandleCreate(&mut handle, graph, ctx, 0, 0))?;
                let mut pre =
                    Args::default().u64(handle).u64(cond).u64(counter).u32(max_iterations).u32(1).launch(set, 1, 1);
                let pre_node = self.add_kernel(graph, &mut pre, deps)?;

                // SAFETY: plain data (a zeroed union is a valid empty parameter block).
                let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
                params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
                params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
                    handle,
                    type_: match kind {
                        Control::While => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
                        Control::If => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
                    },
                    size: 1,
                    phGraph_out: std::ptr::null_mut(),
                    ctx,
                };
                let mut node = std::ptr::null_mut();
                call!(cuGraphAddNode_v2(&mut node, graph, &pre_node, std::ptr::null(), 1, &mut params))?;
                self.count(&[pre_node]);
                // SAFETY: the driver filled `phGraph_out` with the node's one body graph.
                let body_graph = unsafe { *params.__bindgen_anon_1.conditional.phGraph_out };
                let body_dag = self.me.plan.body(op).cloned().expect("every while/if has a body DAG");
                let body_exits = self.add_scope(body_graph, &body_dag)?;
                if kind == Control::While {
                    // The next iteration's condition: after every body op that writes the word.
                    let writers: Vec<CUgraphNode> = if self.me.options.serial {
                        body_dag.nodes.iter().rev().find_map(|o| body_exits.get(o).copied()).into_iter().collect()
                    } else {
                        body_dag
                            .nodes
                            .iter()
                            .filter(|o| self.me.plan.access[**o as usize].writes.iter().any(|w| w.overlaps(&cond_span)))
                            .filter_map(|o| body_exits.get(o).copied())
                            .collect()
                    };
                    let mut tail =
                        Args::default().u64(handle).u64(cond).u64(counter).u32(max_iterations).u32(0).launch(set, 1, 1);
                    self.add_tail(body_graph, &mut tail, &writers)?;
                }
                node
            }
        };
        Ok(Some(node))
    }
}

impl Drop for CudaReplay {
    fn drop(&mut self) {
        // After a reset every handle below is already gone; touching them could hit a newer
        // context's objects.
        if self.poisoned || self.slots.iter().any(|s| s.device.generation() != s.generation) {
            return;
        }
        // SAFETY: each handle was created by this value and is destroyed once, with the context
        // it was made in current.
        unsafe {
            for s in &self.slots {
                if s.device.bind().is_err() {
                    return;
                }
                sys::cuStreamSynchronize(s.stream);
            }
            if self.slots[0].device.bind().is_err() {
                return;
            }
            if let Some(g) = self.graph.take() {
                sys::cuGraphExecDestroy(g.exec);
                sys::cuGraphDestroy(g.graph);
            }
            for ev in self.op_events.drain(..).chain([self.start, self.end]) {
                if !ev.is_null() {
                    sys::cuEventDestroy_v2(ev);
                }
            }
            for s in &self.slots {
                if s.device.bind().is_err() {
                    continue;
                }
                for r in self.regions.iter().filter(|r| std::ptr::eq(&self.slots[r.slot], s) && r.base != 0) {
                    sys::cuMemFree_v2(r.base);
                }
                for (_, r) in self.reservations.iter().filter(|(slot, _)| std::ptr::eq(&self.slots[*slot], s)) {
                    r.release();
                }
                if s.control != 0 {
                    sys::cuMemFree_v2(s.control);
                }
                if !s.handoff.is_null() {
                    sys::cuEventDestroy_v2(s.handoff);
                }
            }
            for m in self.modules.drain(..) {
                m.unload();
            }
        }
    }
}

/// After a fault in graph mode (or without per-op sync), finds which op faulted by replaying the
/// archive (`bytes`) again op by op, waiting after each, for up to `iterations` replays. In this
/// process when the device recovered; otherwise in a child process, since the driver keeps the
/// fault for the whole process: the one the program set with [`crate::probe::set_child_probe`]
/// (`recap cuda-probe`). Other errors are handed back as they are.
pub fn locate_fault(device: &Arc<Device>, bytes: &[u8], error: CudaError, iterations: u64) -> CudaError {
    let (name, driver_error, lost) = match error {
        CudaError::Fault { op: None, device, error, lost } => (device, error, lost),
        other => return other,
    };
    let found = if lost.is_none() {
        locate_here(device, bytes, iterations)
    } else {
        super::probe::locate_in_child(device.ordinal, bytes, iterations)
    };
    CudaError::Fault { device: name, op: found, error: driver_error, lost }
}

fn locate_here(device: &Arc<Device>, bytes: &[u8], iterations: u64) -> Option<(OpId, String)> {
    let archive = Archive::open(bytes).ok()?;
    let options = ReplayOptions { mode: Mode::Stream, sync_each_op: true, ..Default::default() };
    let mut probe = CudaReplay::load(device, &archive, options).ok()?;
    for _ in 0..iterations.max(1) {
        match probe.replay() {
            Ok(_) => continue,
            Err(CudaError::Fault { op: Some(op), .. }) => return Some(op),
            Err(_) => break,
        }
    }
    None
}

/// Runs `iterations` stream-mode replays waiting after every op, and says which op faulted, if
/// one did (what `recap cuda-probe` does in a child process).
pub fn probe_ops(
    device: &Arc<Device>,
    archive: &Archive,
    iterations: u64,
) -> Result<Option<(OpId, String, String)>, CudaError> {
    let options = ReplayOptions { mode: Mode::Stream, sync_each_op: true, ..Default::default() };
    let mut probe = CudaReplay::load(device, archive, options)?;
    for _ in 0..iterations.max(1) {
        match probe.replay() {
            Ok(_) => continue,
            Err(CudaError::Fault { op: Some((op, label)), error, .. }) => {
                return Ok(Some((op, label, error.to_string())))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
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
    fn a_loop_runs_while_its_word_is_set_and_its_limit_is_named_when_it_stops_it() {
        // Unbounded: the word alone decides.
        assert_eq!(next_pass(0, 0, 1), Pass::Run);
        assert_eq!(next_pass(1_000_000, 0, 7), Pass::Run);
        assert_eq!(next_pass(3, 0, 0), Pass::Done);
        // Bounded: below the limit as unbounded; at it, a set word is a loop the limit stopped.
        assert_eq!(next_pass(3, 4, 1), Pass::Run);
        assert_eq!(next_pass(4, 4, 1), Pass::Limited);
        assert_eq!(next_pass(4, 4, 0), Pass::Done);
        assert_eq!(next_pass(0, 1, u32::MAX), Pass::Run);
        assert_eq!(next_pass(1, 1, u32::MAX), Pass::Limited);
    }

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
