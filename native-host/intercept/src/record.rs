//! The recorder: what the hooks tell it, kept as the program runs, and the recording of the range.
//!
//! Three kinds of bookkeeping, with different costs:
//! - always, because the range may need them later: live allocations, loaded code images and the
//!   kernels found in them, link states, and the work of stream captures (a CUDA graph captured
//!   before the range may be launched inside it). Each is a map update on a call that is rare in
//!   a hot loop (allocation, module load, capture), never on a plain launch or copy;
//! - inside the range: every launch, copy and memset becomes [`Work`] and is issued into the
//!   [`Recording`]: its pointers resolved against live allocations, each allocation snapshotted
//!   the first time the range touches it (after a context synchronise, so the snapshot is the
//!   state this op sees in issue order);
//! - at the end of the range: a synchronise, every touched allocation read back as the expected
//!   state, and the archive written.
//!
//! Issue order is the order of the calls. A program's streams and events only ever let work wait
//! for work issued earlier, so issue order is one valid serial order of the program; the archive's
//! plan then recovers the concurrency from the data each op touches.
//!
//! Everything here runs inside the program's own process and threads: no panics escape (the hooks
//! catch them), and a failure marks the recording incomplete instead of disturbing the program.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::control::ControlError;
use crate::graphs::{Graph, GraphBook};
use crate::images::{LinkInputs, LinkOutputs, ModuleImage};
use crate::launch_attrs::LaunchAttrs;
use crate::real;
use crate::sys::*;
use crate::tensor_maps::TensorMaps;
use shared::capture::{Range, Report, Request};

pub(crate) mod devices;
mod effects;
mod graph_by_nodes;
mod layout;
pub(crate) mod module_vars;
mod settle;

pub use effects::LaunchEffects;
pub use graph_by_nodes::launch_graph_by_nodes;
pub use layout::Layout;
use layout::{pack, param_info_layout};
pub use settle::Staged;

const ARMED: u8 = 0;
const RECORDING: u8 = 1;
const DONE: u8 = 2;

/// Where the range is; read without the lock on every launch and copy.
static PHASE: AtomicU8 = AtomicU8::new(ARMED);
/// Stream captures in progress; while any is, work must be routed through the lock.
static CAPTURING: AtomicUsize = AtomicUsize::new(0);
/// Launches seen, for `launches:SKIP:COUNT`.
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// Host bytes of an upload: taken at the call, or (in a captured graph, which reads host memory
/// each time it runs) read where they are when the graph is launched.
#[derive(Clone, Debug)]
pub enum HostData {
    Taken(Vec<u8>),
    At { ptr: usize, len: usize },
}

/// One piece of device work as the program issued it.
#[derive(Clone, Debug)]
pub enum Work {
    Launch {
        func: usize,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        params: Vec<u8>,
        attrs: LaunchAttrs,
    },
    Upload {
        dst: u64,
        data: HostData,
    },
    Download {
        src: u64,
        len: u64,
    },
    Copy {
        dst: u64,
        src: u64,
        len: u64,
    },
    Memset {
        dst: u64,
        width: u32,
        pattern: u64,
        count: u64,
    },
    Graph {
        exec: usize,
    },
    /// A conditional node of a graph: `kind` is `CU_GRAPH_COND_TYPE_IF` or `_WHILE`.
    Control {
        kind: u32,
        handle: u64,
        body: Vec<Work>,
    },
    /// A condition taking its default value at the start of a graph launch.
    SetCondition {
        handle: u64,
        value: u32,
    },
}

/// A live allocation.
#[derive(Clone, Debug)]
pub struct Alloc {
    /// Its number in allocation order: what names its region.
    pub id: u64,
    pub base: u64,
    pub size: u64,
    pub kind: &'static str,
    /// The device of the context current when it was made.
    pub device: CUdevice,
}

/// A kernel handle (`CUfunction` or `CUkernel`): its module and name.
#[derive(Clone, Debug)]
struct Func {
    module: usize,
    name: String,
}

/// A touched allocation: a region of the archive.
pub struct RegionRec {
    pub alloc: Alloc,
    pub initial: Vec<u8>,
    pub expected: Option<Vec<u8>>,
    /// `(offset, target region, target offset)`: pointers found in the initial contents.
    pub relocs: Vec<(u64, usize, u64)>,
}

/// Host data a copy uploaded, and the device pointers found in it.
pub struct Upload {
    pub bytes: Vec<u8>,
    pub relocs: Vec<(u64, usize, u64)>,
}

pub struct KernelRec {
    pub module: usize,
    pub name: String,
    pub layout: Layout,
    pub launches: u64,
}

pub enum OpRec {
    Launch {
        kernel: usize,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        params: Vec<u8>,
        relocs: Vec<(u64, usize, u64)>,
        attrs: LaunchAttrs,
        /// Parameters that are tensor maps: `(parameter offset, region, offset, encode)`.
        tensor_maps: Vec<(u32, usize, u64, shared::tensor_map::Encode)>,
    },
    Upload {
        upload: usize,
        dst: usize,
        dst_offset: u64,
    },
    Copy {
        src: usize,
        src_offset: u64,
        dst: usize,
        dst_offset: u64,
        len: u64,
    },
    Memset {
        dst: usize,
        offset: u64,
        len: u64,
        width: u32,
        pattern: u64,
    },
    /// A while or if on the u32 at the start of a region; its body is the ops up to the matching
    /// `EndBody`.
    While {
        region: usize,
    },
    If {
        region: usize,
    },
    EndBody,
    /// Work the driver refused (`settle.rs`): kept in place so that op numbers stay, and written
    /// as nothing.
    Refused,
}

/// The range's recording.
pub struct Recording {
    /// What the range was asked for: the process's request, or the control API's.
    pub request: Request,
    pub regions: Vec<RegionRec>,
    region_of: HashMap<u64, usize>,
    pub uploads: Vec<Upload>,
    /// Regions that hold device pointers: their final contents cannot be checked byte for byte.
    pub pointer_holders: HashSet<usize>,
    pub ops: Vec<OpRec>,
    pub kernels: Vec<KernelRec>,
    kernel_of: HashMap<(usize, String), usize>,
    pub downloads: u64,
    /// What launches of kernels without PTX wrote (`--record-effects`), in op order.
    pub effects: Vec<LaunchEffects>,
    forwarded_before: HashMap<&'static str, u64>,
    pub sm: u32,
    ctx: usize,
    /// The device of each op, and the contexts the range used (`devices.rs`).
    pub devices: devices::Devices,
}

#[derive(Default)]
struct CaptureBook {
    by_stream: HashMap<usize, usize>,
    by_event: HashMap<usize, usize>,
    work: HashMap<usize, Vec<Work>>,
    /// Captures into a graph the program made (`cuStreamBeginCaptureToGraph`): the graph and the
    /// nodes the captured work goes after.
    into: HashMap<usize, (usize, Vec<usize>)>,
    next: usize,
}

/// The kind of an allocation a graph's memory allocation node reserves: its contents before the
/// node runs are undefined, and after the graph frees it they cannot be read.
pub const GRAPH_MEMORY: &str = "cuGraphAddMemAllocNode";

/// The kind of the allocation that stands for a conditional handle's condition: 4 bytes at the
/// handle's value, never read from the device (the driver keeps the condition where no program
/// reads it). See `shared::cuda_graph::define_set_conditional`.
pub const CONDITION: &str = "cuGraphConditionalHandleCreate";

pub struct State {
    allocs: BTreeMap<u64, Alloc>,
    next_alloc: u64,
    pub modules: Vec<ModuleImage>,
    module_of: HashMap<usize, usize>,
    funcs: HashMap<usize, Func>,
    layouts: HashMap<usize, Option<Layout>>,
    links: HashMap<usize, LinkInputs>,
    /// Every cubin `cuLinkComplete` handed out, with the link's inputs.
    linked: LinkOutputs,
    captures: CaptureBook,
    /// Graphs (captured or built node by node) and executable graphs (graphs.rs).
    pub graphs: GraphBook,
    /// Tensor maps the program encoded (tensor_maps.rs).
    pub tensor_maps: TensorMaps,
    pub recording: Option<Recording>,
    /// The devices of the contexts seen (`devices.rs`).
    pub ctx_devices: devices::ContextDevices,
    /// Module variables seen (`module_vars.rs`).
    vars: module_vars::Vars,
    /// A launch without PTX on its way through the driver (`--record-effects`).
    pending_effects: Option<effects::Pending>,
    /// Work of a CUDA graph launch is being issued: its launches run as one unit with it.
    expanding_graph: bool,
    pub report: Report,
    /// What the work being issued must read back once its call has returned (`settle.rs`).
    pending_reads: Vec<settle::PendingRead>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| {
    let request = crate::request::get();
    Mutex::new(State {
        report: Report { audit: request.interposer.is_some(), ..Report::new(&request.range) },
        allocs: BTreeMap::new(),
        next_alloc: 0,
        modules: Vec::new(),
        module_of: HashMap::new(),
        funcs: HashMap::new(),
        layouts: HashMap::new(),
        links: HashMap::new(),
        linked: LinkOutputs::default(),
        captures: CaptureBook::default(),
        graphs: GraphBook::default(),
        tensor_maps: TensorMaps::default(),
        recording: None,
        ctx_devices: devices::ContextDevices::default(),
        vars: module_vars::Vars::default(),
        pending_effects: None,
        expanding_graph: false,
        pending_reads: Vec::new(),
    })
});

pub fn state() -> MutexGuard<'static, State> {
    // A panic while the lock was held left the state as it was; the hooks already noted it.
    STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The range the process's request asks for (the control API opens its own besides).
fn range() -> &'static Range {
    &crate::request::get().range
}

/// Whether work on a plain (not capturing) stream must be looked at: inside the range, or while
/// a capture might need it. With `--range all` the range opens at the first work the program
/// issues.
pub fn busy() -> bool {
    match PHASE.load(Ordering::Relaxed) {
        RECORDING => true,
        ARMED if *range() == Range::All => {
            let mut st = state();
            if PHASE.load(Ordering::Relaxed) == ARMED {
                st.begin_requested();
            }
            true
        }
        _ => CAPTURING.load(Ordering::Relaxed) > 0,
    }
}

/// Called by every launch hook before anything else: counts launches for `launches:SKIP:COUNT`
/// and opens that range at the right one.
pub fn count_launch() {
    let n = LAUNCHES.fetch_add(1, Ordering::Relaxed);
    if PHASE.load(Ordering::Relaxed) != ARMED {
        return;
    }
    if let Range::Launches { skip, .. } = *range() {
        if n == skip {
            state().begin_requested();
        }
    }
}

/// After a launch has been forwarded: reads what it wrote when asked to (`--record-effects`), and
/// closes a `launches:SKIP:COUNT` range after its last launch.
pub fn after_launch() {
    if PHASE.load(Ordering::Relaxed) != RECORDING {
        return;
    }
    let mut st = state();
    st.effects_after();
    if let Range::Launches { skip, count } = *range() {
        if LAUNCHES.load(Ordering::Relaxed) >= skip + count {
            st.finish("its last launch");
        }
    }
}

/// The program's own range markers.
pub fn profiler_start() {
    let mut st = state();
    if *range() == Range::Profiler {
        match PHASE.load(Ordering::Relaxed) {
            ARMED => st.begin_requested(),
            DONE => st.report.note("cuProfilerStart after the recorded range: only the first range is recorded"),
            _ => {}
        }
    }
}

/// A range the program marks (an NVTX range) opens the recorded range if it is still to come;
/// says whether it did. Only the first is recorded.
pub fn marker_opens() -> bool {
    let mut st = state();
    if PHASE.load(Ordering::Relaxed) != ARMED {
        return false;
    }
    st.begin_requested();
    true
}

/// The marked range that opened the recorded range ends: so does the recording.
pub fn marker_closes(at: &str) {
    if PHASE.load(Ordering::Relaxed) == RECORDING {
        crate::declared::gather();
        state().finish(at);
    }
}

/// Whether the recorded range is still to come (cheap, without the lock).
pub fn armed() -> bool {
    PHASE.load(Ordering::Relaxed) == ARMED
}

pub fn profiler_stop() {
    // The program's arrays, before the lock (`declared.rs` says why).
    if PHASE.load(Ordering::Relaxed) == RECORDING {
        crate::declared::gather();
    }
    let mut st = state();
    if *range() == Range::Profiler && PHASE.load(Ordering::Relaxed) == RECORDING {
        st.finish("cuProfilerStop");
    }
}

/// The program is tearing down a context: a range still open ends here, while its memory can
/// still be read.
pub fn context_ending(call: &str) {
    if PHASE.load(Ordering::Relaxed) == RECORDING {
        crate::declared::gather();
        let mut st = state();
        st.report.note(format!("the range was still open at {call}; it ends there"));
        st.finish(call);
    }
}

/// Whether a range is being recorded (cheap, without the lock).
pub fn recording() -> bool {
    PHASE.load(Ordering::Relaxed) == RECORDING
}

/// Ends a range still open as the program ends (`ending.rs`), at `at`, with the lock taken as
/// `lock` manages to (in a signal handler it must not wait forever); says whether the lock was had.
pub fn end_open_range(at: &str, note: Option<&str>, lock: impl FnOnce() -> Option<MutexGuard<'static, State>>) -> bool {
    let Some(mut st) = lock() else { return false };
    if PHASE.load(Ordering::Relaxed) == RECORDING {
        if let Some(note) = note {
            st.report.note(note);
        }
        st.finish(at);
    }
    true
}

/// The state's lock if it can be had without waiting.
pub fn try_state() -> Option<MutexGuard<'static, State>> {
    match STATE.try_lock() {
        Ok(st) => Some(st),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

impl State {
    /// Opens the range the process's request asks for.
    fn begin_requested(&mut self) {
        self.begin(crate::request::get().clone());
    }

    fn begin(&mut self, request: Request) {
        let (ctx, sm) = current_device();
        self.module_vars_range_begins();
        self.recording = Some(Recording {
            request,
            regions: Vec::new(),
            region_of: HashMap::new(),
            uploads: Vec::new(),
            pointer_holders: HashSet::new(),
            ops: Vec::new(),
            kernels: Vec::new(),
            kernel_of: HashMap::new(),
            downloads: 0,
            effects: Vec::new(),
            forwarded_before: real::forward_counts(),
            sm,
            ctx,
            devices: devices::Devices::default(),
        });
        // Now, after the CUDA runtime registered its own teardown (`ending.rs` says why).
        crate::ending::arm();
        PHASE.store(RECORDING, Ordering::Relaxed);
    }

    /// Opens a range now for `request`, on request of the in-process control API (`control.rs`),
    /// whatever the process's range says; a fresh report goes with it. Refused while a range is
    /// open.
    pub fn begin_controlled(&mut self, request: Request) -> Result<(), ControlError> {
        if PHASE.load(Ordering::Relaxed) == RECORDING {
            return Err(ControlError::AlreadyRecording);
        }
        self.report = Report::new(&request.range);
        self.begin(request);
        Ok(())
    }

    /// Ends the range opened by [`State::begin_controlled`] and writes its archive.
    pub fn finish_controlled(&mut self, at: &str) -> Result<(), ControlError> {
        if PHASE.load(Ordering::Relaxed) != RECORDING {
            return Err(ControlError::NotRecording);
        }
        self.finish(at);
        Ok(())
    }

    fn finish(&mut self, at: &str) {
        PHASE.store(DONE, Ordering::Relaxed);
        let Some(mut rec) = self.recording.take() else { return };
        self.report.ended_at = at.to_string();
        let pushed = rec.ctx != 0 && current_ctx() != rec.ctx;
        if pushed {
            // SAFETY: the context the range ran in; popped below.
            unsafe { real::ctx_push_current(rec.ctx as Handle) };
        }
        let sync = rec.devices.synchronize();
        if sync != CUDA_SUCCESS {
            self.report.incomplete(format!("synchronising at the end of the range failed (CUresult {sync})"));
        }
        for r in &mut rec.regions {
            if r.expected.is_none() && r.alloc.kind != CONDITION {
                match read_device(r.alloc.base, r.alloc.size) {
                    Ok(bytes) => r.expected = Some(bytes),
                    Err(_) if r.alloc.kind == GRAPH_MEMORY => self.report.note(format!(
                        "{}: graph memory the graph freed, so its final contents are not checked",
                        region_name(&r.alloc)
                    )),
                    Err(e) => self.report.incomplete(format!(
                        "{}: reading the final contents failed (CUresult {e})",
                        region_name(&r.alloc)
                    )),
                }
            }
        }
        if pushed {
            let mut popped: Handle = std::ptr::null_mut();
            // SAFETY: pops what was pushed above.
            unsafe { real::ctx_pop_current(&mut popped) };
        }
        let now = real::forward_counts();
        for (name, n) in now {
            let before = rec.forwarded_before.get(name).copied().unwrap_or(0);
            if n > before {
                self.report.passed_through.insert(name.to_string(), n - before);
            }
        }
        rec.devices.learn_sms(rec.regions.iter().map(|r| r.alloc.device));
        let binds = crate::control::open_binds();
        crate::archive::write(&rec, &binds, &mut self.modules, &self.vars, &mut self.report);
    }

    // ---- always-kept bookkeeping ----

    pub fn add_alloc(&mut self, base: u64, size: u64, kind: &'static str) {
        if base == 0 || size == 0 {
            return;
        }
        let id = self.next_alloc;
        self.next_alloc += 1;
        let device = self.ctx_devices.current();
        self.allocs.insert(base, Alloc { id, base, size, kind, device });
    }

    /// An allocation goes away: inside the range its contents are read first (they are the
    /// region's final state).
    pub fn free(&mut self, base: u64) {
        let Some(alloc) = self.allocs.remove(&base) else { return };
        let Some(rec) = self.recording.as_mut() else { return };
        let Some(&r) = rec.region_of.get(&alloc.id) else { return };
        rec.devices.synchronize();
        match read_device(alloc.base, alloc.size) {
            Ok(bytes) => rec.regions[r].expected = Some(bytes),
            Err(e) => self
                .report
                .incomplete(format!("{}: reading it before its free failed (CUresult {e})", region_name(&alloc))),
        }
    }

    /// The live allocation holding `addr`, and the offset in it.
    pub fn resolve(&self, addr: u64) -> Option<(&Alloc, u64)> {
        let (_, a) = self.allocs.range(..=addr).next_back()?;
        (addr < a.base + a.size).then_some((a, addr - a.base))
    }

    pub fn add_module(&mut self, handle: usize, mut image: ModuleImage) {
        // Loaded for the GPU of the current context (none for a context-free library load).
        image.gpu_sm = current_device().1;
        let index = self.modules.len();
        self.modules.push(image);
        self.module_of.insert(handle, index);
    }

    /// A code image handed to the driver by pointer: what it is, read (or referenced) now.
    ///
    /// # Safety
    /// `image` is a code image the driver just accepted.
    pub unsafe fn add_module_from(&mut self, handle: usize, image: *const c_void, via: &str) {
        // SAFETY: the driver accepted this image.
        if let Some(module) = unsafe { self.linked.image_at(image, via) } {
            self.add_module(handle, module);
            return;
        }
        // SAFETY: the driver accepted this image, so it is a readable image of a known kind.
        match unsafe { ModuleImage::from_pointer(image, via) } {
            Ok(m) => self.add_module(handle, m),
            Err(e) => self.report.note(format!("{via}: {e}; its kernels cannot be recorded")),
        }
    }

    pub fn alias_module(&mut self, handle: usize, of: usize) {
        if let Some(&m) = self.module_of.get(&of) {
            self.module_of.insert(handle, m);
        }
    }

    pub fn add_func(&mut self, handle: usize, module: usize, name: &str) {
        if let Some(&m) = self.module_of.get(&module) {
            self.funcs.insert(handle, Func { module: m, name: name.to_string() });
        }
    }

    pub fn alias_func(&mut self, handle: usize, of: usize) {
        if let Some(f) = self.funcs.get(&of).cloned() {
            self.funcs.insert(handle, f);
        }
    }

    pub fn link_create(&mut self, state: usize) {
        self.links.insert(state, Vec::new());
    }

    pub fn link_add(&mut self, state: usize, kind: u32, bytes: Vec<u8>) {
        if let Some(inputs) = self.links.get_mut(&state) {
            inputs.push((crate::images::InputKind::of_driver(kind), bytes));
        }
    }

    pub fn link_complete(&mut self, state: usize, cubin: Vec<u8>) {
        if let Some(inputs) = self.links.get(&state) {
            self.linked.add(cubin, inputs.clone());
        }
    }

    pub fn link_destroy(&mut self, state: usize) {
        self.links.remove(&state);
    }

    // ---- stream capture ----

    fn capture_of(&self, stream: usize) -> Option<usize> {
        self.captures.by_stream.get(&stream).copied()
    }

    /// A capture into the program's own graph, after the nodes `deps`.
    pub fn capture_begin_into(&mut self, stream: usize, graph: usize, deps: Vec<usize>) {
        let id = self.captures.next;
        self.capture_begin(stream);
        self.captures.into.insert(id, (graph, deps));
    }

    pub fn capture_begin(&mut self, stream: usize) {
        let id = self.captures.next;
        self.captures.next += 1;
        self.captures.by_stream.insert(stream, id);
        self.captures.work.insert(id, Vec::new());
        CAPTURING.fetch_add(1, Ordering::Relaxed);
    }

    pub fn capture_end(&mut self, stream: usize, graph: Option<usize>) {
        let Some(id) = self.captures.by_stream.get(&stream).copied() else { return };
        self.captures.by_stream.retain(|_, c| *c != id);
        self.captures.by_event.retain(|_, c| *c != id);
        let work = self.captures.work.remove(&id).unwrap_or_default();
        match (self.captures.into.remove(&id), graph) {
            (Some((into, deps)), _) => self.graphs.append_chain(into, work, &deps),
            (None, Some(graph)) => self.graphs.add_graph(graph, Graph::chain(work)),
            (None, None) => {}
        }
        CAPTURING.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn event_recorded(&mut self, event: usize, stream: usize) {
        match self.capture_of(stream) {
            Some(id) => drop(self.captures.by_event.insert(event, id)),
            None => drop(self.captures.by_event.remove(&event)),
        }
    }

    pub fn stream_waits(&mut self, stream: usize, event: usize) {
        if let Some(&id) = self.captures.by_event.get(&event) {
            self.captures.by_stream.insert(stream, id);
        }
    }

    pub fn graph_instantiated(&mut self, exec: usize, graph: usize) {
        self.graphs.instantiate(exec, graph);
    }

    // ---- work ----

    /// A kernel handle's layout (cached), packing its parameters now: the pointers the program
    /// passed are only valid during the call.
    ///
    /// # Safety
    /// `params` and `extra` are as the program passed them to a launch the driver is given.
    pub unsafe fn pack_params(
        &mut self,
        func: usize,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> Option<Vec<u8>> {
        let layout = self.layout(func)?;
        // SAFETY: the program passes kernelParams or extra as cuLaunchKernel documents them.
        unsafe { pack(&layout, params, extra) }
    }

    fn layout(&mut self, func: usize) -> Option<Layout> {
        if let Some(l) = self.layouts.get(&func) {
            return l.clone();
        }
        let found = self.find_func(func);
        let layout = match &found {
            Some(f) => {
                let from_ptx = self.modules[f.module].ptx_layout(&f.name);
                from_ptx.or_else(|| param_info_layout(func))
            }
            None => param_info_layout(func),
        };
        if layout.is_none() {
            let name = found.map_or_else(|| "an unknown kernel".to_string(), |f| f.name);
            self.report
                .incomplete(format!("{name}: no parameter layout (no PTX .entry, and cuFuncGetParamInfo failed)"));
        }
        self.layouts.insert(func, layout.clone());
        layout
    }

    /// The module and name of a kernel handle: from the calls that made it, else asked of the
    /// driver (a handle the runtime made before we could see it, or a `CUkernel` used as a
    /// `CUfunction`).
    fn find_func(&mut self, func: usize) -> Option<Func> {
        if let Some(f) = self.funcs.get(&func) {
            return Some(f.clone());
        }
        let mut name: *const std::ffi::c_char = std::ptr::null();
        let mut owner: Handle = std::ptr::null_mut();
        // SAFETY: out-parameters; the driver answers with an error for a handle of the other kind.
        let found = unsafe {
            if real::func_get_name(&mut name, func as Handle) == CUDA_SUCCESS
                && real::func_get_module(&mut owner, func as Handle) == CUDA_SUCCESS
            {
                true
            } else {
                real::kernel_get_name(&mut name, func as Handle) == CUDA_SUCCESS
                    && real::kernel_get_library(&mut owner, func as Handle) == CUDA_SUCCESS
            }
        };
        if !found || name.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated name owned by the driver.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let module = *self.module_of.get(&(owner as usize))?;
        let f = Func { module, name };
        self.funcs.insert(func, f.clone());
        Some(f)
    }

    fn issue(&mut self, work: Work) {
        // A range a marker opened may have opened before the program made its context.
        if let Some(rec) = self.recording.as_mut().filter(|r| r.ctx == 0) {
            (rec.ctx, rec.sm) = current_device();
        }
        match work {
            Work::Launch { func, grid, block, shared, params, attrs } => {
                self.issue_launch(func, grid, block, shared, params, attrs)
            }
            Work::Upload { dst, data } => {
                let bytes = match data {
                    HostData::Taken(b) => b,
                    // SAFETY: a captured graph reads this host memory when it runs; the program
                    // must keep it valid for as long as it launches the graph.
                    HostData::At { ptr, len } => unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }.to_vec(),
                };
                let len = bytes.len() as u64;
                if len == 0 {
                    return;
                }
                let Some((dst, dst_offset)) = self.region_range(dst, len, "a copy from the host") else { return };
                let mut bytes = bytes;
                let relocs = self.pointers_in(&mut bytes, 0);
                let rec = self.recording.as_mut().expect("recording");
                if !relocs.is_empty() {
                    rec.pointer_holders.insert(dst);
                }
                rec.uploads.push(Upload { bytes, relocs });
                let upload = rec.uploads.len() - 1;
                rec.ops.push(OpRec::Upload { upload, dst, dst_offset });
                self.report.count("upload");
            }
            Work::Download { src, len } => {
                if self.region_range(src, len, "a copy to the host").is_some() {
                    self.recording.as_mut().expect("recording").downloads += 1;
                    self.report.count("download (checked, not replayed)");
                }
            }
            Work::Copy { dst, src, len } => {
                let Some((src, src_offset)) = self.region_range(src, len, "a device copy's source") else { return };
                let Some((dst, dst_offset)) = self.region_range(dst, len, "a device copy's destination") else {
                    return;
                };
                if src == dst && src_offset < dst_offset + len && dst_offset < src_offset + len {
                    return self.overlapping_copy(dst, dst_offset, len);
                }
                self.recording.as_mut().expect("recording").ops.push(OpRec::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    len,
                });
                self.report.count("copy");
            }
            Work::Memset { dst, width, pattern, count } => {
                let len = count * width as u64;
                let Some((dst, offset)) = self.region_range(dst, len, "a memset") else { return };
                self.recording.as_mut().expect("recording").ops.push(OpRec::Memset {
                    dst,
                    offset,
                    len,
                    width,
                    pattern,
                });
                self.report.count("memset");
            }
            Work::Control { kind, handle, body } => {
                let Some(region) = self.condition_region(handle) else {
                    self.report.incomplete("a conditional node whose handle recap did not see created".into());
                    return;
                };
                let while_loop = kind == shared::cuda_graph::conditional_type::WHILE;
                let rec = self.recording.as_mut().expect("recording");
                rec.ops.push(if while_loop { OpRec::While { region } } else { OpRec::If { region } });
                self.report.count(if while_loop {
                    "conditional node (a while op)"
                } else {
                    "conditional node (an if op)"
                });
                for w in body {
                    self.issue(w);
                }
                self.recording.as_mut().expect("recording").ops.push(OpRec::EndBody);
            }
            Work::SetCondition { handle, value } => {
                if let Some(dst) = self.condition_region(handle) {
                    let rec = self.recording.as_mut().expect("recording");
                    rec.ops.push(OpRec::Memset { dst, offset: 0, len: 4, width: 4, pattern: value as u64 });
                    self.report.count("memset");
                }
            }
            Work::Graph { exec } => {
                let (work, missing) = self.graphs.launch(exec);
                self.report.count("graph launch (expanded)");
                for why in missing {
                    self.report.incomplete(format!("a CUDA graph launched in the range holds {why}"));
                }
                // Launches inside a graph launched whole get no recorded effects (see
                // `effects_before`; `graph_by_nodes.rs` issues a graph node by node where it can).
                self.expanding_graph = true;
                for w in work {
                    self.issue(w);
                }
                self.expanding_graph = false;
            }
        }
    }

    fn issue_launch(
        &mut self,
        func: usize,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        mut params: Vec<u8>,
        attrs: LaunchAttrs,
    ) {
        let Some(f) = self.find_func(func) else {
            self.report.incomplete("a launch of a kernel from code recap did not see loaded: not recorded".to_string());
            return;
        };
        let Some(layout) = self.layout(func) else { return };
        // Before its parameters are read: a word may point into one of the module's variables.
        self.module_vars_before_launch(f.module);
        // Every 8-byte word of a parameter that points into a live allocation is a pointer; a
        // parameter that is a tensor map is kept as the map it is.
        let mut relocs = Vec::new();
        let mut tensor_maps = Vec::new();
        for &(_, offset, size, align) in &layout.params {
            let end = ((offset + size) as usize).min(params.len());
            let start = (offset as usize).min(end);
            if end - start == shared::tensor_map::SIZE {
                if let Some(map) = self.tensor_map_param(&mut params[start..end], offset, align) {
                    tensor_maps.extend(map);
                    continue;
                }
            }
            relocs.extend(self.pointers_in(&mut params[start..end], offset as u64));
        }
        let module = f.module;
        if let Err(e) = self.modules[module].prepare() {
            self.report.incomplete(format!("kernel {}: {e}", f.name));
        }
        let sets_conditions = self.modules[module]
            .parsed()
            .and_then(|p| p.ptx.as_deref())
            .is_some_and(|ptx| ptx.contains(shared::cuda_graph::SET_CONDITIONAL));
        if sets_conditions && !self.graphs.conditions.is_empty() {
            relocs.extend(self.condition_params(&mut params));
        }
        let rec = self.recording.as_mut().expect("recording");
        let kernel = match rec.kernel_of.get(&(module, f.name.clone())) {
            Some(&k) => k,
            None => {
                rec.kernels.push(KernelRec { module, name: f.name.clone(), layout, launches: 0 });
                rec.kernel_of.insert((module, f.name.clone()), rec.kernels.len() - 1);
                rec.kernels.len() - 1
            }
        };
        rec.kernels[kernel].launches += 1;
        let targets: Vec<usize> = relocs.iter().map(|r| r.1).collect();
        rec.ops.push(OpRec::Launch { kernel, grid, block, shared, params, relocs, attrs: attrs.clone(), tensor_maps });
        let op = rec.ops.len() - 1;
        self.report.count("launch");
        crate::launch_attrs::report(&attrs, &mut self.report);
        let machine_code_only = self.modules[module].parsed().is_some_and(|p| p.ptx.is_none());
        let effects_wanted = self.recording.as_ref().is_some_and(|r| r.request.record_effects);
        if machine_code_only && effects_wanted {
            self.effects_before(op, targets.into_iter(), &f.name);
        }
    }

    /// A conditional handle was made: its condition is a 4-byte allocation of its own.
    pub fn condition_created(&mut self, handle: u64, graph: usize, default: u32, flags: u32) {
        let device = self.ctx_devices.current();
        let alloc = Alloc { id: self.next_alloc, base: handle, size: 4, kind: CONDITION, device };
        self.next_alloc += 1;
        let assign = flags & shared::cuda_graph::COND_ASSIGN_DEFAULT != 0;
        self.graphs.conditions.insert(handle, crate::graphs::Condition { graph, default, assign, alloc });
    }

    /// The region standing for conditional handle `handle`'s condition, made the first time the
    /// range touches it (starting at the handle's default value).
    fn condition_region(&mut self, handle: u64) -> Option<usize> {
        let c = self.graphs.conditions.get(&handle)?.clone();
        let fresh = !self.recording.as_ref()?.region_of.contains_key(&c.alloc.id);
        let r = self.touch(&c.alloc);
        if fresh {
            self.recording.as_mut()?.regions[r].initial = c.default.to_le_bytes().to_vec();
        }
        Some(r)
    }

    /// The 8-byte parameter words of a kernel that sets conditions which hold a conditional handle
    /// (made relocations to the condition's region, their bytes zeros).
    fn condition_params(&mut self, params: &mut [u8]) -> Vec<(u64, usize, u64)> {
        let mut found = Vec::new();
        for at in (0..params.len().saturating_sub(7)).step_by(8) {
            let word = u64::from_le_bytes(params[at..at + 8].try_into().expect("8 bytes"));
            if self.graphs.conditions.contains_key(&word) {
                if let Some(r) = self.condition_region(word) {
                    params[at..at + 8].fill(0);
                    found.push((at as u64, r, 0));
                }
            }
        }
        found
    }

    /// A 128-byte parameter that is a tensor map the program encoded: its bytes zeroed and the map
    /// placed in its region (`Some(None)` when it cannot be placed, which is noted). `None` when it
    /// is no map recap saw encoded (a 64-byte aligned one is noted as one it may be).
    fn tensor_map_param(
        &mut self,
        bytes: &mut [u8],
        offset: u32,
        align: u32,
    ) -> Option<Option<(u32, usize, u64, shared::tensor_map::Encode)>> {
        let Some(filed) = self.tensor_maps.find(bytes).cloned() else {
            if align == 64 {
                self.report.incomplete(
                    "a 128-byte parameter aligned to 64 (a tensor map?) that recap did not see encoded: replayed as captured"
                        .into(),
                );
            }
            return None;
        };
        bytes.fill(0);
        match self.touch_addr(filed.global) {
            Some((region, at)) => {
                self.report.count("tensor map parameter (encoded again on a CUDA replay)");
                Some(Some((offset, region, at, filed.encode)))
            }
            None => {
                self.report.incomplete("a tensor map whose global address lies in no allocation recap saw".into());
                Some(None)
            }
        }
    }

    /// The region and offset of `[addr, addr + len)`, touching it; notes work it cannot place.
    fn region_range(&mut self, addr: u64, len: u64, what: &str) -> Option<(usize, u64)> {
        let fits = self.resolve(addr).is_some_and(|(a, off)| off + len <= a.size);
        if !fits {
            self.report
                .incomplete(format!("{what} of {len} bytes is not inside one allocation recap saw: not recorded"));
            return None;
        }
        self.touch_addr(addr)
    }

    /// The region holding `addr` and the offset in it, snapshotting its allocation the first time
    /// the range touches it.
    fn touch_addr(&mut self, addr: u64) -> Option<(usize, u64)> {
        let (alloc, offset) = self.resolve(addr).map(|(a, o)| (a.clone(), o))?;
        Some((self.touch(&alloc), offset))
    }

    fn touch(&mut self, alloc: &Alloc) -> usize {
        let rec = self.recording.as_mut().expect("recording");
        if let Some(&r) = rec.region_of.get(&alloc.id) {
            return r;
        }
        // The snapshot must see every op issued before this one, on every device.
        rec.devices.synchronize();
        let read = if alloc.kind == CONDITION { Err(CUDA_SUCCESS) } else { read_device(alloc.base, alloc.size) };
        let initial = match read {
            // A condition's value before the graph sets it.
            Err(_) if alloc.kind == CONDITION => vec![0; alloc.size as usize],
            Ok(bytes) => bytes,
            // Not mapped outside the graph's run: its contents before the node are undefined anyway.
            Err(_) if alloc.kind == GRAPH_MEMORY => vec![0; alloc.size as usize],
            Err(e) => {
                self.report.incomplete(format!(
                    "{}: reading its contents failed (CUresult {e}); zeros stand in",
                    region_name(alloc)
                ));
                vec![0; alloc.size as usize]
            }
        };
        self.report.bytes_snapshotted += alloc.size;
        let rec = self.recording.as_mut().expect("recording");
        rec.regions.push(RegionRec { alloc: alloc.clone(), initial, expected: None, relocs: Vec::new() });
        let r = rec.regions.len() - 1;
        rec.region_of.insert(alloc.id, r);
        // Pointers stored in the contents (tables of buffers, structs of arrays).
        let mut initial = std::mem::take(&mut self.recording.as_mut().expect("recording").regions[r].initial);
        let relocs = self.pointers_in(&mut initial, 0);
        let rec = self.recording.as_mut().expect("recording");
        if !relocs.is_empty() {
            rec.pointer_holders.insert(r);
        }
        rec.regions[r].initial = initial;
        rec.regions[r].relocs = relocs;
        r
    }

    /// The device pointers in `bytes` (whose first byte is at `base` in its owner): every 8-byte
    /// aligned word that points into a live allocation. Each one's allocation is touched, and its
    /// bytes are zeroed, since the relocation stands for it. Returns `(offset in the owner, region,
    /// offset in the region)`.
    fn pointers_in(&mut self, bytes: &mut [u8], base: u64) -> Vec<(u64, usize, u64)> {
        let (lo, hi) = self.address_span();
        let mut found = Vec::new();
        let first = (base.next_multiple_of(8) - base) as usize;
        let mut at = first;
        while at + 8 <= bytes.len() {
            let word = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
            if word >= lo && word < hi {
                if let Some((region, offset)) = self.touch_addr(word) {
                    found.push((base + at as u64, region, offset));
                    bytes[at..at + 8].fill(0);
                }
            }
            at += 8;
        }
        found
    }

    /// The lowest and one past the highest address of any live allocation: a cheap filter before
    /// looking a word up.
    fn address_span(&self) -> (u64, u64) {
        let lo = self.allocs.keys().next().copied().unwrap_or(0);
        let hi = self.allocs.values().next_back().map_or(0, |a| a.base + a.size);
        (lo, hi)
    }
}

/// The current context and its device's SM version (`90` for sm_90); `(0, 0)` without one.
fn current_device() -> (usize, u32) {
    let mut ctx: Handle = std::ptr::null_mut();
    let mut device: CUdevice = 0;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe {
        if real::ctx_get_current(&mut ctx) != CUDA_SUCCESS || ctx.is_null() {
            return (0, 0);
        }
        real::ctx_get_device(&mut device);
        real::device_get_attribute(&mut major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
        real::device_get_attribute(&mut minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    }
    (ctx as usize, (major * 10 + minor).max(0) as u32)
}

fn current_ctx() -> usize {
    current_device().0
}

pub fn region_name(a: &Alloc) -> String {
    format!("alloc{}", a.id)
}

/// Reads device memory through the real driver.
fn read_device(addr: u64, len: u64) -> Result<Vec<u8>, CUresult> {
    let mut out = vec![0u8; len as usize];
    // SAFETY: `out` has `len` bytes.
    let r = unsafe { real::memcpy_dtoh(out.as_mut_ptr().cast(), addr, len as usize) };
    if r == CUDA_SUCCESS {
        Ok(out)
    } else {
        Err(r)
    }
}

/// Whether `stream` is being captured into a graph.
pub fn capturing(stream: usize) -> bool {
    CAPTURING.load(Ordering::Relaxed) > 0 && state().capture_of(stream).is_some()
}
