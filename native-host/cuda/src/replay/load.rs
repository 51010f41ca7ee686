//! Loading an archive onto its GPUs: code (a cubin for the exact SM, else PTX, as libraries or
//! modules), recap's own kernels, peer access, regions (at their captured addresses, module
//! variables, or fresh allocations) with their initial bytes, the resolved steps, and in graph
//! mode the instantiated graph; and giving all of it back when the replay is dropped.

use std::collections::{BTreeSet, HashMap};
use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr};
use shared::archive::{Archive, KernelId, Op, RegionId, Reloc};
use shared::plan::{Plan, Span};

use super::graph::GraphState;
use super::step::{lower_memset, patch, patch_maps, Control, KernelStep, RegionAlloc, Step};
use super::trigger::Triggers;
use super::{CudaError, CudaReplay, LoadTimes, Mode, Pdl, ReplayOptions, Slot};
use crate::driver::{call, Code, Device, Func};
use crate::kernels;
use crate::pdl;
use crate::placed::Wanted;

/// A zeroed host buffer for a region's bytes; its size comes from the archive, so failing to get
/// it is an error, not an abort.
pub(super) fn host_buffer(size: u64, region: &str) -> Result<Vec<u8>, CudaError> {
    let too_big = || CudaError::Invalid(format!("region {region}: cannot allocate {size} bytes of host memory for it"));
    let len = usize::try_from(size).map_err(|_| too_big())?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| too_big())?;
    v.resize(len, 0);
    Ok(v)
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
            triggered_kernels: 0,
            reloaded_modules: 0,
            host_limit_hits: HashMap::new(),
            launches: archive.ops().filter(|op| matches!(op, Op::Launch(_))).count() as u64,
            library: Default::default(),
            serving: Default::default(),
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

    /// Loads one module's image (a cubin or NUL-terminated PTX) as a library (or a module where
    /// asked or where a library cannot be made), with an older PTX version where this driver's JIT
    /// is older than the PTX. Gives the code and the image it was loaded from.
    pub(super) fn load_code(
        &mut self,
        module: &str,
        image: Vec<u8>,
        library: bool,
    ) -> Result<(Code, Vec<u8>), CudaError> {
        let (code, image) = match Code::load(&image, library) {
            Ok(code) => (code, image),
            Err((error, log)) => {
                let jit = CudaError::Jit { module: module.to_owned(), error, log };
                match self.load_with_older_ptx_version(module, &image, library, &jit) {
                    Some(loaded) => loaded,
                    None => return Err(jit),
                }
            }
        };
        if self.slots.len() > 1 && matches!(code, Code::Module(_)) {
            code.unload();
            return Err(CudaError::Invalid(format!(
                "module {module} loads only as a module of one context, not as a library: it cannot be replayed on several GPUs"
            )));
        }
        Ok((code, image))
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
        // a wait at every entry for programmatic dependent launch, and the early trigger in the
        // entries of half-wave kernels, trigger.rs).
        let mut module_waits = Vec::new();
        let library = !self.options.module_functions;
        let mut functions: HashMap<KernelId, Func> = HashMap::new();
        let mut images = Vec::new();
        let mut triggers = if self.pdl && !self.options.pdl_wait_only {
            self.plan_triggers(archive)?
        } else {
            Triggers::none(archive)
        };
        let mut triggered = Vec::new();
        for (index, m) in archive.modules().enumerate() {
            let (image, waits, triggering) = match m.cubins.iter().find(|(sm, _)| Some(*sm) == shared_sm) {
                Some((_, cubin)) => (cubin.decode()?, false, 0),
                None => {
                    let ptx = m.ptx.decode()?;
                    let entries = triggers.entries(archive, index as u32);
                    let rewritten = self.pdl.then(|| {
                        std::str::from_utf8(&ptx)
                            .map_err(pdl::PdlError::from)
                            .and_then(|text| pdl::with_entry_waits(text, &|name| entries.contains(name)))
                    });
                    let (mut ptx, waits, triggering) = match rewritten {
                        None => (ptx, false, 0),
                        Some(Ok(pdl::Rewritten::Waits { text, triggers })) => (text.into_bytes(), true, triggers),
                        Some(Ok(pdl::Rewritten::OwnWaits)) => (ptx, true, 0),
                        Some(Err(why)) => {
                            self.warnings.push(format!("module {}: plain edges into its kernels ({why})", m.name));
                            (ptx, false, 0)
                        }
                    };
                    ptx.push(0);
                    (ptx, waits, triggering)
                }
            };
            module_waits.push(waits);
            if triggering == 0 {
                triggers.without_module(archive, index as u32);
            }
            triggered.push(triggering);
            let (code, image) = self.load_code(m.name, image, library)?;
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
        self.reloaded_modules =
            self.confirm_triggers(archive, &mut triggers, &mut functions_on, &mut triggered, library)?;
        self.triggered_kernels = triggered.iter().sum();
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
        let placed = shared::placement::placed_regions(archive, self.options.placement)?;
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
            if let Some(addr) = crate::module_vars::address(archive, i as RegionId, &self.modules)? {
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
        let map_uses = crate::tensor_maps::uses(archive)?;
        let launch_attrs = shared::launch_attrs::of_archive(archive)?;
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
                Op::Library(l) => self.library_step(id, &l, slot, library)?,
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
                self.triggered_kernels = 0;
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
    pub(super) fn copy_in(&self, slot: usize, addr: CUdeviceptr, bytes: &[u8]) -> Result<(), CudaError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let stream = self.slots[slot].stream;
        call!(cuMemcpyHtoDAsync_v2(addr, bytes.as_ptr() as *const c_void, bytes.len(), stream))?;
        // Pageable host memory: the copy has read `bytes` only once the stream gets past it.
        call!(cuStreamSynchronize(stream))?;
        Ok(())
    }
}

/// Stands in for recap's own kernels until they are loaded.
const NO_FUNC: Func = Func { function: std::ptr::null_mut(), kernel: std::ptr::null_mut() };

pub(super) fn get_function(code: Code, name: &str) -> Result<Func, CudaError> {
    let c = std::ffi::CString::new(name).expect("static names");
    code.get(&c).map_err(|error| CudaError::Kernel { module: "recap".into(), kernel: name.into(), error })
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
            self.serving.release();
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
                if let Some(slot) = self.slots.iter().position(|t| std::ptr::eq(t, s)) {
                    self.library.release(slot);
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
