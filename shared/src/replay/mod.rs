//! Op-level CPU replay of an archive: every op kind, over one [`ptx::Memory`].
//!
//! The key design decision: everything that can be worked out once is worked out in
//! [`CpuReplay::new`] (every module parsed, every kernel's entry resolved, every launch's
//! parameter bytes patched with the device addresses of persistent regions, ops decoded into a
//! flat array), so that replaying an iteration is a walk over that array with no lookups, no
//! allocation and no string handling per op. Only relocations that target graph-owned scratch
//! are patched per launch, because scratch gets a new address at every `alloc`.
//!
//! Control flow is walked with an explicit stack of open bodies rather than recursion, so a
//! hostile archive with deeply nested bodies cannot overflow the native stack.
//!
//! Time is never read here (`std::time::Instant` panics on wasm32): a [`ReplayObserver`] is told
//! when each op starts and finishes and measures time itself.

use std::io::Read as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::archive::{Archive, FormatError, Op, OpId, RegionId, Reloc};
use crate::ptx;

mod contraction;
mod limits;
mod module_vars;
pub mod session;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_effects;
#[cfg(test)]
mod tests_module_vars;

pub use limits::{LimitError, ReplayLimits};

/// Whole contents of some regions, each beside its id: a replay's final state, or initial bytes.
pub type RegionContents = Vec<(RegionId, Vec<u8>)>;
pub use session::{
    check_state, run_session, CheckRequest, Clock, Iteration, KeepError, OpTimer, Ran, Replayer, Session, SessionError,
};

/// Limits and resources of a replay.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// Most PTX instructions one iteration may execute (all launches together); `None` is unbounded.
    pub instruction_budget: Option<u64>,
    /// Set from anywhere to stop the replay at the next op or inside a running kernel.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Worker threads for thread blocks; 0 means all cores.
    pub threads: usize,
    /// Native code or the interpreter for kernels (see [`ptx::Engine`]).
    pub engine: ptx::Engine,
    /// What the archive may allocate and launch, checked before anything is allocated.
    pub limits: ReplayLimits,
    /// Where native code goes as kernels are compiled (see [`ptx::JitDump`]).
    pub jit_dump: Option<ptx::JitDump>,
    /// Regions at their captured addresses or fresh ones; `None` follows the archive
    /// ([`crate::placement`]).
    pub placement: Option<crate::placement::Placement>,
    /// Each launch runs its blocks in an order shuffled by this seed (`ptx::ExecOptions::block_order`).
    pub block_order: Option<u64>,
    /// Memory keeps the element type of every store (`ptx::Memory::record_types`), read back by
    /// [`CpuReplay::written_types`]: for `shared::check::infer`.
    pub record_types: bool,
    /// The arithmetic of tensor-core instructions; `None` follows the GPU the archive was captured
    /// on ([`CpuReplay::mma_model`]).
    pub mma_model: Option<ptx::MmaModel>,
    /// For `shared::check::infer`: a launch the CPU cannot run (no PTX, PTX it refuses, a
    /// GPU-only attribute) and an op that fails are passed over instead of ending the replay;
    /// [`CpuReplay::skipped`] says which and why. Only a budget or a cancel stops it.
    pub skip_unrunnable: bool,
}

/// What went wrong, and at which op.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("archive: {0}")]
    Format(FormatError),
    #[error("module {module}: {error}")]
    Load { module: String, error: ptx::PtxError },
    #[error(
        "the CPU cannot run {}: the archive has machine code only for {} (no PTX); replay it on a GPU of \
         that architecture, or capture with `recap capture --record-effects` so that a CPU replay applies \
         what each launch wrote",
        kernels.join(", "),
        sms.iter().map(|sm| format!("sm_{sm}")).collect::<Vec<_>>().join(", ")
    )]
    NoPtx { kernels: Vec<String>, sms: Vec<u32> },
    #[error(
        "op {op} (launch of {kernel}, machine code only): its inputs differ from the captured ones \
         (hash {got}, recorded {want}), so what it wrote then does not apply now, and the CPU cannot run it"
    )]
    EffectsInputs { op: OpId, kernel: String, got: String, want: String },
    #[error(transparent)]
    Metadata(#[from] crate::archive::MetadataError),
    #[error("kernel {kernel}: module {module} has no entry named {kernel}")]
    MissingEntry { kernel: String, module: String },
    #[error("op {op} (launch of {kernel}): {reason}")]
    BadLaunch { op: OpId, kernel: String, reason: String },
    #[error("op {op} (launch of {kernel}): {error}")]
    Exec { op: OpId, kernel: String, error: ptx::ExecError },
    #[error(
        "op {op} (launch of {kernel}): {error}; that address lies in region {region} as captured (at \
         {captured:#x}), so the kernel followed a pointer the capture did not see, which only a replay with \
         regions at their captured addresses can follow (--placement captured)"
    )]
    UnseenPointer { op: OpId, kernel: String, error: Box<ptx::ExecError>, region: String, captured: u64 },
    #[error("op {op} ({kind}): {error}")]
    Memory { op: OpId, kind: &'static str, error: ptx::MemError },
    #[error("op {op} (library): {error}")]
    Library { op: OpId, error: crate::library::LibraryError },
    #[error("op {op} ({kind}) uses scratch region {region} while it is not allocated")]
    NotAllocated { op: OpId, kind: &'static str, region: String },
    #[error("op {op} (alloc) allocates scratch region {region}, which is already allocated")]
    DoubleAlloc { op: OpId, region: String },
    #[error("op {op} (while): condition still true after its limit of {limit} iterations")]
    LoopLimit { op: OpId, limit: u32 },
    #[error("op {op} ({kind}): the instruction budget of {budget} is spent")]
    Budget { op: OpId, kind: &'static str, budget: u64 },
    #[error("replay cancelled at op {op} ({kind})")]
    Cancelled { op: OpId, kind: &'static str },
    #[error("region {region}: {reason}")]
    Region { region: String, reason: String },
    #[error("loading region {region}: {error}")]
    Upload { region: String, error: ptx::MemError },
    #[error("archive refused: {0}")]
    Limit(#[from] LimitError),
    #[error(
        "region {region} cannot be placed at its captured address {address:#x}: {error}; replay with \
         --placement fresh to give regions fresh addresses (pointers the capture did not see then point \
         outside every region)"
    )]
    Place { region: String, address: u64, error: ptx::PlaceError },
}

// The wrapped errors are part of each message rather than `source()`, so that a chain printer
// (anyhow's `{:#}`) does not say them twice.
impl From<FormatError> for ReplayError {
    fn from(e: FormatError) -> Self {
        ReplayError::Format(e)
    }
}

/// One op execution as the observer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpEvent<'a> {
    pub op: OpId,
    /// `launch`, `copy`, `memset`, `alloc`, `free`, `while`, `if` or `marker`.
    pub kind: &'static str,
    /// The kernel's entry name for a launch, the marker's name for a marker.
    pub name: Option<&'a str>,
}

/// Told about every op as it runs. A while/if op starts before its body and finishes after it.
pub trait ReplayObserver {
    fn op_started(&mut self, _event: &OpEvent) {}
    fn op_finished(&mut self, _event: &OpEvent) {}
}

/// An observer that ignores everything.
pub struct NoObserver;
impl ReplayObserver for NoObserver {}

/// Counts of one iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IterationStats {
    /// Ops executed, counting each pass through a loop body.
    pub ops: u64,
    pub launches: u64,
    /// PTX instructions executed over all launches, counted per thread (what the budget limits).
    pub instructions: u64,
    /// Passes through while bodies.
    pub loop_iterations: u64,
    /// Launches that ran as native code (the rest ran on the interpreter).
    #[serde(default)]
    pub native_launches: u64,
    /// Of those, launches whose threads ran in groups, in vector lanes.
    #[serde(default)]
    pub lane_launches: u64,
    /// Launches of kernels without PTX whose recorded effects were applied (not counted above).
    #[serde(default)]
    pub recorded_effects: u64,
    /// Of those, launches whose inputs differed from the captured ones while the caller had
    /// written no input: earlier ops the CPU ran wrote other bytes than the GPU did (rounding,
    /// float atomics' order), so the writes applied are what the GPU computed from its own inputs.
    #[serde(default)]
    pub stale_effects: u64,
    /// The first such launch, and the last op before it that ran on the CPU and reaches the same
    /// regions (where the difference most likely comes from).
    #[serde(default)]
    pub first_stale_effects: Option<(OpId, Option<OpId>)>,
}

/// An op decoded once, with everything it needs at hand.
enum Step {
    Launch(usize),
    /// A launch of a kernel without PTX: its recorded effects (an index into `recorded`).
    Effects(usize),
    Copy {
        src: RegionId,
        src_offset: u64,
        dst: RegionId,
        dst_offset: u64,
        len: u64,
    },
    Memset {
        region: RegionId,
        offset: u64,
        len: u64,
        width: u32,
        pattern: u64,
    },
    Alloc(RegionId),
    Free(RegionId),
    While {
        region: RegionId,
        offset: u64,
        max_iterations: u32,
        end: usize,
    },
    If {
        region: RegionId,
        offset: u64,
        end: usize,
    },
    Marker(String),
    /// A library routine (`shared::library`).
    Library(crate::archive::LibraryOp),
    /// A signal or wait: one memory in archive order already holds every order it asks for.
    Sync(&'static str),
    /// A launch passed over under [`ReplayOptions::skip_unrunnable`].
    Skipped,
}

impl Step {
    fn kind(&self) -> &'static str {
        match self {
            Step::Launch(_) | Step::Effects(_) | Step::Skipped => "launch",
            Step::Copy { .. } => "copy",
            Step::Library(_) => "library",
            Step::Memset { .. } => "memset",
            Step::Alloc(_) => "alloc",
            Step::Free(_) => "free",
            Step::While { .. } => "while",
            Step::If { .. } => "if",
            Step::Marker(_) => "marker",
            Step::Sync(kind) => kind,
        }
    }
}

struct PreparedLaunch {
    module: usize,
    entry: String,
    /// Entry, grid, block and shared memory checked once against the module.
    plan: ptx::LaunchPlan,
    /// Parameter bytes with persistent regions' addresses already in place.
    params: Vec<u8>,
    /// Relocations into scratch regions, patched at every launch.
    scratch_relocs: Vec<Reloc>,
}

/// A launch replayed from its recorded effects (`shared::effects`).
struct RecordedLaunch {
    kernel: String,
    inputs: [u8; crate::effects::INPUTS_HASH_LEN],
    /// The regions it can reach, ascending, each with the offsets of the pointers it holds.
    reach: Vec<(RegionId, Vec<u64>)>,
    /// `(region, offset, bytes)` it wrote.
    writes: Vec<(RegionId, u64, Vec<u8>)>,
}

struct RegionState {
    name: String,
    size: u64,
    align: u32,
    scratch: bool,
    /// Base device address while mapped.
    base: Option<u64>,
}

/// An open while/if body during the walk.
struct Frame {
    op: usize,
    end: usize,
    iterations: u32,
}

/// Where an iteration stands between two ops (see [`CpuReplay::step`]).
#[derive(Default)]
pub struct Cursor {
    frames: Vec<Frame>,
    pc: usize,
    stats: IterationStats,
    /// Set by [`CpuReplay::run_to`]: stop before this op starts.
    stop_before: Option<usize>,
}

impl Cursor {
    /// Counts of the iteration so far.
    pub fn stats(&self) -> &IterationStats {
        &self.stats
    }
}

/// A replay of one archive on the CPU: its device memory, its decoded ops and its kernels.
pub struct CpuReplay<'a> {
    archive: Archive<'a>,
    /// Parsed PTX; `None` for a module with machine code only.
    modules: Vec<Option<ptx::Module>>,
    launches: Vec<PreparedLaunch>,
    recorded: Vec<RecordedLaunch>,
    /// Recorded effects by launch op, until `decode_ops` takes them.
    effects: std::collections::HashMap<OpId, crate::archive::Effects<'a>>,
    steps: Vec<Step>,
    regions: Vec<RegionState>,
    region_relocs: Vec<(RegionId, Reloc)>,
    /// The PTX initialisers of regions that are module variables: their contents where the
    /// archive gives none.
    var_inits: Vec<(RegionId, Vec<u8>)>,
    memory: ptx::Memory,
    options: ReplayOptions,
    /// Scratch parameter buffer for launches with scratch relocations.
    param_scratch: Vec<u8>,
    /// Handed to every launch; built once so that a launch does not touch the cancel flag's
    /// reference count.
    exec: ptx::ExecOptions,
    /// Under [`ReplayOptions::skip_unrunnable`]: why each module's PTX was refused (empty where
    /// it was not), and the ops passed over with the reason.
    refused_modules: Vec<String>,
    skipped: Vec<(OpId, String)>,
    /// Whether the caller wrote a region since the initial state was restored: then a launch's
    /// inputs that differ from the captured ones are the caller's, and its recorded effects must
    /// not stand in for it.
    inputs_written: bool,
}

const UPLOAD_CHUNK: usize = 1 << 16;

impl<'a> CpuReplay<'a> {
    /// Parses every module, resolves every kernel, maps every persistent region and uploads its
    /// initial contents. Every problem an archive can have that does not depend on running it is
    /// reported here.
    pub fn new(archive: &Archive<'a>, options: ReplayOptions) -> Result<Self, ReplayError> {
        options.limits.check(archive)?;
        archive.verify_blobs()?;
        // Kernels captured as machine code only (library kernels that ship no PTX) are named all
        // at once, before anything runs, unless every launch of them has recorded effects.
        let effects: std::collections::HashMap<OpId, crate::archive::Effects<'a>> =
            archive.effects().map(|e| (e.op, e)).collect();
        let mut unrecorded = vec![false; archive.kernel_count()];
        for id in 0..archive.op_count() as OpId {
            if let Op::Launch(l) = archive.op(id) {
                unrecorded[l.kernel as usize] |= !effects.contains_key(&id);
            }
        }
        let mut no_ptx = Vec::new();
        let mut sms = Vec::new();
        for k in archive.kernels() {
            let m = archive.module(k.module);
            if m.ptx.is_empty() && unrecorded[k.id as usize] {
                no_ptx.push(k.name.to_string());
                for (sm, _) in &m.cubins {
                    if !sms.contains(sm) {
                        sms.push(*sm);
                    }
                }
            }
        }
        if !no_ptx.is_empty() && !options.skip_unrunnable {
            return Err(ReplayError::NoPtx { kernels: no_ptx, sms });
        }
        // Launches whose attributes change what they compute (clusters, cooperative launches)
        // need a GPU: the CPU runs a grid's blocks without clusters or a grid-wide barrier.
        let attrs = crate::launch_attrs::of_archive(archive)?;
        let mut gpu_only: Vec<_> = attrs.iter().filter(|(op, _)| !effects.contains_key(op)).collect();
        gpu_only.sort_by_key(|(op, _)| **op);
        let mut gpu_only = gpu_only.into_iter().filter_map(|(op, a)| a.needs_gpu().map(|why| (*op, why)));
        let mut skipped = Vec::new();
        if options.skip_unrunnable {
            skipped.extend(gpu_only.map(|(op, why)| (op, format!("the CPU cannot replay it: {why}"))));
        } else if let Some((op, why)) = gpu_only.next() {
            let Op::Launch(l) = archive.op(op) else { unreachable!("of_archive keeps launches only") };
            return Err(ReplayError::BadLaunch {
                op,
                kernel: archive.kernel(l.kernel).name.to_string(),
                reason: format!("the CPU cannot replay it: {why}; replay it on CUDA"),
            });
        }
        let regions = archive
            .regions()
            .map(|r| RegionState {
                name: r.name.to_string(),
                size: r.size,
                align: r.align,
                scratch: r.scratch,
                base: None,
            })
            .collect();
        let mut replay = CpuReplay {
            archive: archive.clone(),
            modules: Vec::with_capacity(archive.module_count()),
            launches: Vec::new(),
            recorded: Vec::new(),
            effects,
            steps: Vec::with_capacity(archive.op_count()),
            regions,
            region_relocs: archive.region_relocs().collect(),
            var_inits: Vec::new(),
            memory: {
                let mut m = ptx::Memory::new();
                if options.record_types {
                    m.record_types();
                }
                m
            },
            exec: exec_options(&options),
            options,
            param_scratch: Vec::new(),
            refused_modules: Vec::new(),
            skipped,
            inputs_written: false,
        };
        replay.place_regions()?;
        replay.load_modules()?;
        replay.exec.mma_model = replay.mma_model();
        replay.apply_contraction();
        for i in 0..replay.regions.len() {
            if !replay.regions[i].scratch && replay.regions[i].base.is_none() {
                replay.map_region(i as RegionId)?;
            }
        }
        replay.restore_initial()?;
        replay.decode_ops()?;
        Ok(replay)
    }

    /// Regions at their captured addresses, where the archive or the options ask for it; before
    /// any other region is mapped, which then gets a fresh address above them.
    fn place_regions(&mut self) -> Result<(), ReplayError> {
        let placed: Vec<_> = crate::placement::placed_regions(&self.archive, self.options.placement)?
            .into_iter()
            .filter(|a| !self.regions[a.region as usize].scratch)
            .collect();
        let spans: Vec<(u64, u64)> = placed.iter().map(|a| (a.address, self.regions[a.region as usize].size)).collect();
        self.memory.place_regions(&spans, self.options.limits.max_total_bytes).map_err(|error| {
            let a = placed[error.index()];
            ReplayError::Place { region: self.regions[a.region as usize].name.clone(), address: a.address, error }
        })?;
        for a in placed {
            self.regions[a.region as usize].base = Some(a.address);
        }
        Ok(())
    }

    /// Parses every module with PTX, its variables that are regions of the archive placed in this
    /// replay's memory (`module_vars.rs`), and checks that every kernel is an entry of its module.
    fn load_modules(&mut self) -> Result<(), ReplayError> {
        let archive = self.archive.clone();
        let vars = module_vars::by_module(&archive)?;
        for m in archive.modules() {
            if m.ptx.is_empty() {
                self.modules.push(None);
                continue;
            }
            let text = m.ptx_text()?;
            let parsed = module_vars::parse(m.name, &text, &vars[m.id as usize], &mut self.regions, &mut self.memory);
            let parsed = match parsed {
                Err(e) if self.options.skip_unrunnable => {
                    self.refused_modules.resize(m.id as usize, String::new());
                    self.refused_modules.push(e.to_string());
                    self.modules.push(None);
                    continue;
                }
                parsed => parsed?,
            };
            let (parsed, inits) = parsed;
            self.var_inits.extend(inits);
            self.modules.push(Some(parsed));
        }
        for k in archive.kernels() {
            let Some(module) = &self.modules[k.module as usize] else { continue };
            if module.entry(k.name).is_none() && !self.options.skip_unrunnable {
                return Err(ReplayError::MissingEntry {
                    kernel: k.name.to_string(),
                    module: archive.module(k.module).name.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Where a global access faulted at an address inside a region's captured range while that
    /// region sits elsewhere in this replay: the region and its captured address. Such an address
    /// came from a pointer the capture did not see (it would have been relocated).
    fn captured_region_at(&self, error: &ptx::ExecError) -> Option<(String, u64)> {
        let ptx::ExecError::Memory { addr, space: "global", .. } = *error else { return None };
        let captured = crate::placement::placed_regions(&self.archive, Some(crate::placement::Placement::Captured));
        captured.ok()?.into_iter().find_map(|a| {
            let r = &self.regions[a.region as usize];
            let inside = addr >= a.address && addr - a.address < r.size;
            (inside && r.base != Some(a.address)).then(|| (r.name.clone(), a.address))
        })
    }

    fn map_region(&mut self, region: RegionId) -> Result<u64, ReplayError> {
        let r = &mut self.regions[region as usize];
        let base = self
            .memory
            .add_region(r.size, r.align as u64)
            .map_err(|error| ReplayError::Upload { region: r.name.clone(), error })?;
        r.base = Some(base);
        Ok(base)
    }

    fn decode_ops(&mut self) -> Result<(), ReplayError> {
        let archive = self.archive.clone();
        for id in 0..archive.op_count() as OpId {
            let step = match archive.op(id) {
                Op::Launch(_) if self.skipped.iter().any(|(op, _)| *op == id) => Step::Skipped,
                Op::Launch(l) if self.modules[archive.kernel(l.kernel).module as usize].is_none() => {
                    match self.effects.remove(&id) {
                        Some(effects) => Step::Effects(self.recorded_launch(&l, effects)?),
                        None => {
                            // Only under `skip_unrunnable` (`new` refuses such a launch otherwise).
                            let module = archive.kernel(l.kernel).module as usize;
                            let why = match self.refused_modules.get(module) {
                                Some(e) if !e.is_empty() => format!("its PTX is refused: {e}"),
                                _ => "its module has machine code only (no PTX)".to_string(),
                            };
                            self.skipped.push((id, why));
                            Step::Skipped
                        }
                    }
                }
                Op::Launch(l) if self.options.skip_unrunnable => match self.prepare_launch(id, &l) {
                    Ok(step) => step,
                    Err(e) => {
                        self.skipped.push((id, e.to_string()));
                        Step::Skipped
                    }
                },
                Op::Launch(l) => self.prepare_launch(id, &l)?,
                Op::Copy(c) => Step::Copy {
                    src: c.src,
                    src_offset: c.src_offset,
                    dst: c.dst,
                    dst_offset: c.dst_offset,
                    len: c.len,
                },
                Op::Memset(m) => {
                    Step::Memset { region: m.region, offset: m.offset, len: m.len, width: m.width, pattern: m.pattern }
                }
                Op::Alloc(r) => Step::Alloc(r),
                Op::Free(r) => Step::Free(r),
                Op::While { cond, body_len } => Step::While {
                    region: cond.region,
                    offset: cond.offset,
                    max_iterations: cond.max_iterations,
                    end: id as usize + 1 + body_len as usize,
                },
                Op::If { cond, body_len } => {
                    Step::If { region: cond.region, offset: cond.offset, end: id as usize + 1 + body_len as usize }
                }
                Op::Marker(name) => Step::Marker(name.to_string()),
                op @ (Op::Signal(_) | Op::Wait(_)) => Step::Sync(op.kind_name()),
                Op::Library(l) => Step::Library(l),
            };
            self.steps.push(step);
        }
        Ok(())
    }

    /// A launch of a kernel with PTX, its parameters patched and its plan made.
    fn prepare_launch(&mut self, id: OpId, l: &crate::archive::LaunchView<'_>) -> Result<Step, ReplayError> {
        let archive = self.archive.clone();
        let k = archive.kernel(l.kernel);
        let module = k.module as usize;
        let ptx = self.modules[module].as_ref().expect("a module with PTX");
        // `new` has checked every entry, unless under `skip_unrunnable`.
        let entry = ptx.entry(k.name).ok_or_else(|| ReplayError::MissingEntry {
            kernel: k.name.to_string(),
            module: archive.module(k.module).name.to_string(),
        })?;
        let bad = |reason: String| ReplayError::BadLaunch { op: id, kernel: k.name.to_string(), reason };
        if l.params.len() < entry.params_size() as usize {
            return Err(bad(format!(
                "{} parameter bytes given but the PTX entry declares {}",
                l.params.len(),
                entry.params_size()
            )));
        }
        let mut params = l.params.to_vec();
        let mut scratch_relocs = Vec::new();
        for r in archive.relocs(l.relocs.clone()) {
            let target = &self.regions[r.target as usize];
            match target.base {
                Some(base) => patch(&mut params, r.offset, base + r.target_offset),
                None => scratch_relocs.push(r),
            }
        }
        let dims = ptx::LaunchDims { grid: l.grid, block: l.block, dynamic_shared: l.shared_bytes };
        let plan = ptx::LaunchPlan::new(ptx, k.name, &dims).map_err(|error| ReplayError::Exec {
            op: id,
            kernel: k.name.to_string(),
            error,
        })?;
        self.launches.push(PreparedLaunch { module, entry: k.name.to_string(), plan, params, scratch_relocs });
        Ok(Step::Launch(self.launches.len() - 1))
    }

    /// A launch without PTX, prepared for replay from its effects: what it can reach, and its
    /// writes decoded.
    fn recorded_launch(
        &mut self,
        l: &crate::archive::LaunchView<'_>,
        effects: crate::archive::Effects<'_>,
    ) -> Result<usize, ReplayError> {
        let kernel = self.archive.kernel(l.kernel).name.to_string();
        let pairs: Vec<(RegionId, RegionId)> = self.region_relocs.iter().map(|(o, r)| (*o, r.target)).collect();
        let targets = self.archive.relocs(l.relocs.clone()).map(|r| r.target).collect::<Vec<_>>();
        let reach = crate::effects::reachable(targets, &pairs)
            .into_iter()
            .map(|region| {
                let words = self.region_relocs.iter().filter(|(o, _)| *o == region).map(|(_, r)| r.offset).collect();
                (region, words)
            })
            .collect();
        let mut writes = Vec::with_capacity(effects.writes.len());
        for (region, offset, blob) in effects.writes {
            writes.push((region, offset, blob.decode()?));
        }
        self.recorded.push(RecordedLaunch { kernel, inputs: effects.inputs, reach, writes });
        Ok(self.recorded.len() - 1)
    }

    /// Applies launch `index`'s recorded effects; whether its inputs were the captured ones.
    ///
    /// Inputs that differ stop the replay when the caller wrote inputs of its own (the recorded
    /// writes belong to other inputs). Otherwise every byte the replay started from is the
    /// capture's, and only ops the CPU ran since can have made the difference: a result rounded
    /// otherwise than the GPU's, float atomics summed in another order. The writes are applied
    /// then, as the GPU's results from its own inputs, and the iteration's stats say so.
    fn apply_effects(&mut self, pc: usize, index: usize) -> Result<bool, ReplayError> {
        let mem_err = |error| ReplayError::Memory { op: pc as OpId, kind: "launch", error };
        let mut hasher = crate::effects::InputsHasher::default();
        let mut contents = Vec::new();
        for (region, words) in &self.recorded[index].reach {
            let base = self.mapped(pc, *region)?;
            contents.clear();
            contents.resize(self.regions[*region as usize].size as usize, 0);
            self.memory.read(base, &mut contents).map_err(mem_err)?;
            hasher.region(*region, &contents, words);
        }
        let got = hasher.finish();
        let l = &self.recorded[index];
        let same = got == l.inputs;
        if !same && self.inputs_written {
            return Err(ReplayError::EffectsInputs {
                op: pc as OpId,
                kernel: l.kernel.clone(),
                got: crate::effects::hex(&got),
                want: crate::effects::hex(&l.inputs),
            });
        }
        for (region, offset, bytes) in &l.writes {
            let base = self.mapped(pc, *region)?;
            self.memory.write(base + offset, bytes).map_err(mem_err)?;
        }
        Ok(same)
    }

    /// The last op before `pc` that the CPU ran from PTX and that reaches a region recorded
    /// launch `index` reaches (a region it may have written).
    fn last_cpu_launch_reaching(&self, pc: usize, index: usize) -> Option<OpId> {
        let reach: Vec<RegionId> = self.recorded[index].reach.iter().map(|(r, _)| *r).collect();
        let pairs: Vec<(RegionId, RegionId)> = self.region_relocs.iter().map(|(owner, r)| (*owner, r.target)).collect();
        (0..pc).rev().find_map(|op| {
            let Step::Launch(_) = self.steps[op] else { return None };
            let Op::Launch(l) = self.archive.op(op as OpId) else { return None };
            let reached = crate::effects::reachable(self.archive.relocs(l.relocs.clone()).map(|r| r.target), &pairs);
            reached.iter().any(|r| reach.contains(r)).then_some(op as OpId)
        })
    }

    /// Restores the state the archive starts from: writes every persistent region's initial
    /// contents (zeros where it has none), frees any scratch still allocated, and patches the
    /// region-held pointers.
    pub fn restore_initial(&mut self) -> Result<(), ReplayError> {
        self.inputs_written = false;
        let mut buf = vec![0u8; UPLOAD_CHUNK];
        for id in 0..self.regions.len() {
            let r = &self.regions[id];
            let Some(base) = r.base else { continue };
            if r.scratch {
                self.memory
                    .remove_region(base)
                    .map_err(|error| ReplayError::Upload { region: r.name.clone(), error })?;
                self.regions[id].base = None;
                continue;
            }
            let upload_err = |error| ReplayError::Upload { region: r.name.clone(), error };
            match self.archive.region(id as RegionId).initial {
                Some(blob) => {
                    let mut reader = blob.reader();
                    let mut at = 0u64;
                    while at < r.size {
                        let n = (r.size - at).min(UPLOAD_CHUNK as u64) as usize;
                        reader.read_exact(&mut buf[..n]).map_err(|e| ReplayError::Region {
                            region: r.name.clone(),
                            reason: format!("initial data does not decode after {at} bytes: {e}"),
                        })?;
                        self.memory.write(base + at, &buf[..n]).map_err(upload_err)?;
                        at += n as u64;
                    }
                }
                None => {
                    self.memory.fill(base, r.size, &[0]).map_err(upload_err)?;
                    if let Some((_, init)) = self.var_inits.iter().find(|v| v.0 as usize == id) {
                        self.memory.write(base, init).map_err(upload_err)?;
                    }
                }
            }
        }
        self.patch_region_relocs(None)
    }

    /// Writes the pointers that region contents hold, for relocations whose owner and target are
    /// both mapped; with `only`, just those that involve that region.
    fn patch_region_relocs(&mut self, only: Option<RegionId>) -> Result<(), ReplayError> {
        for &(owner, r) in &self.region_relocs {
            if only.is_some_and(|o| o != owner && o != r.target) {
                continue;
            }
            let (Some(at), Some(target)) = (self.regions[owner as usize].base, self.regions[r.target as usize].base)
            else {
                continue;
            };
            let addr = target + r.target_offset;
            self.memory
                .write(at + r.offset, &addr.to_le_bytes())
                .map_err(|error| ReplayError::Upload { region: self.regions[owner as usize].name.clone(), error })?;
        }
        Ok(())
    }

    /// Replaces the budget, cancel flag and thread count for the iterations that follow.
    pub fn set_options(&mut self, options: ReplayOptions) {
        self.exec = exec_options(&options);
        self.options = options;
        self.exec.mma_model = self.mma_model();
        self.apply_contraction();
    }

    /// The tensor-core arithmetic this replay runs: the options' model, else that of the GPU the
    /// archive was captured on ([`CpuReplay::capture_sm`]; IEEE arithmetic where it names none).
    pub fn mma_model(&self) -> ptx::MmaModel {
        self.options.mma_model.unwrap_or_else(|| ptx::MmaModel::for_sm(self.capture_sm()))
    }

    /// The model the options name (`None`: the archive's GPU's).
    pub fn options_model(&self) -> Option<ptx::MmaModel> {
        self.options.mma_model
    }

    /// Whether a module of the archive runs tensor-core instructions (where
    /// [`CpuReplay::mma_model`] matters).
    pub fn uses_tensor_cores(&self) -> bool {
        self.modules.iter().flatten().any(|m| m.uses_tensor_cores())
    }

    /// The special-function arithmetic this replay runs (`.approx` functions): that of the GPU
    /// generation [`CpuReplay::mma_model`] names.
    pub fn sfu_model(&self) -> ptx::SfuModel {
        ptx::SfuModel::for_mma(self.mma_model())
    }

    /// Whether a module of the archive runs a special function (where
    /// [`CpuReplay::sfu_model`] matters).
    pub fn uses_special_functions(&self) -> bool {
        self.modules.iter().flatten().any(|m| m.uses_special_functions())
    }

    /// The architecture the archive was captured on (90 for sm_90): its devices' where they say,
    /// else the newest its modules carry machine code for, else the newest its PTX targets.
    pub fn capture_sm(&self) -> Option<u32> {
        let devices = self.archive.devices().map(|d| d.sm).filter(|&sm| sm > 0).max();
        let cubins = || self.archive.modules().flat_map(|m| m.cubins.into_iter().map(|(sm, _)| sm)).max();
        let targets = || {
            let sm = |t: &String| t.strip_prefix("sm_")?.trim_end_matches(['a', 'f']).parse::<u32>().ok();
            self.modules.iter().flatten().flat_map(|m| m.target().iter().filter_map(sm)).max()
        };
        devices.or_else(cubins).or_else(targets)
    }

    pub fn archive(&self) -> &Archive<'a> {
        &self.archive
    }

    /// The device memory (for tools that inspect addresses).
    pub fn memory(&self) -> &ptx::Memory {
        &self.memory
    }

    /// Where `region` lives in this replay's memory: `None` for scratch that is not allocated now,
    /// or a region the archive does not have.
    pub fn region_address(&self, region: RegionId) -> Option<u64> {
        self.regions.get(region as usize)?.base
    }

    fn region_index(&self, region: RegionId) -> Result<&RegionState, ReplayError> {
        self.regions.get(region as usize).ok_or_else(|| ReplayError::Region {
            region: region.to_string(),
            reason: format!("no such region (the archive has {})", self.regions.len()),
        })
    }

    /// Replaces a region's contents (a binding's new input). The length must be the region's size.
    pub fn write_region(&mut self, region: RegionId, bytes: &[u8]) -> Result<(), ReplayError> {
        self.inputs_written = true;
        let r = self.region_index(region)?;
        if bytes.len() as u64 != r.size {
            return Err(ReplayError::Region {
                region: r.name.clone(),
                reason: format!("is {} bytes but {} were given", r.size, bytes.len()),
            });
        }
        let base = r.base.ok_or_else(|| ReplayError::Region {
            region: r.name.clone(),
            reason: "is scratch and not allocated".to_string(),
        })?;
        self.memory.write(base, bytes).map_err(|error| ReplayError::Upload { region: r.name.clone(), error })
    }

    /// A region's current contents.
    pub fn read_region(&self, region: RegionId) -> Result<Vec<u8>, ReplayError> {
        let r = self.region_index(region)?;
        let base = r.base.ok_or_else(|| ReplayError::Region {
            region: r.name.clone(),
            reason: "is scratch and not allocated".to_string(),
        })?;
        let mut out = Vec::new();
        out.try_reserve_exact(r.size as usize).map_err(|_| ReplayError::Region {
            region: r.name.clone(),
            reason: format!("cannot allocate {} bytes to read it", r.size),
        })?;
        out.resize(r.size as usize, 0);
        self.memory.read(base, &mut out).map_err(|error| ReplayError::Upload { region: r.name.clone(), error })?;
        Ok(out)
    }

    /// The element type codes (`ptx::typemap`) of a region's bytes, one per byte, as the stores
    /// of the iterations run so far left them; `None` unless [`ReplayOptions::record_types`].
    /// The ops passed over under [`ReplayOptions::skip_unrunnable`], with the reason, in the order
    /// they were met (a failing op once per time it failed).
    pub fn skipped(&self) -> &[(OpId, String)] {
        &self.skipped
    }

    pub fn written_types(&self, region: RegionId) -> Result<Option<Vec<u8>>, ReplayError> {
        let r = self.region_index(region)?;
        let Some(base) = r.base else { return Ok(None) };
        self.memory.types(base, r.size).map_err(|error| ReplayError::Upload { region: r.name.clone(), error })
    }

    fn cancelled(&self) -> bool {
        self.options.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed))
    }

    fn mapped(&self, op: usize, region: RegionId) -> Result<u64, ReplayError> {
        let r = &self.regions[region as usize];
        r.base.ok_or_else(|| ReplayError::NotAllocated {
            op: op as OpId,
            kind: self.steps[op].kind(),
            region: r.name.clone(),
        })
    }

    fn condition(&self, op: usize, region: RegionId, offset: u64) -> Result<bool, ReplayError> {
        let base = self.mapped(op, region)?;
        let word = self.memory.read_u32(base + offset).map_err(|error| ReplayError::Memory {
            op: op as OpId,
            kind: self.steps[op].kind(),
            error,
        })?;
        Ok(word != 0)
    }

    /// Runs every op once, in order, through loops and conditionals.
    pub fn run_iteration<O: ReplayObserver + ?Sized>(
        &mut self,
        observer: &mut O,
    ) -> Result<IterationStats, ReplayError> {
        let mut cursor = Cursor::default();
        while self.step(&mut cursor, observer)?.is_some() {}
        Ok(cursor.stats)
    }

    /// Runs an iteration on from `cursor` until op `op` is about to start (the first time), and
    /// stops there; whether it got there (false: the iteration ended first). The state is then the
    /// state before `op`: what cutting an archive at `op` starts from.
    pub fn run_to(&mut self, cursor: &mut Cursor, op: OpId) -> Result<bool, ReplayError> {
        cursor.stop_before = Some(op as usize);
        let result = (|| {
            while self.step(cursor, &mut NoObserver)?.is_some() {}
            Ok(cursor.pc == op as usize && cursor.pc < self.steps.len())
        })();
        cursor.stop_before = None;
        result
    }

    /// Runs an iteration on from `cursor` (a fresh one starts it) until the next op finishes: an op
    /// without a body, or a while/if whose body is done (a false condition finishes it at once).
    /// Gives that op, or `None` once the iteration is over. This is how two replays are held side by
    /// side, op by op, to find where they part; [`CpuReplay::run_iteration`] is this in a loop.
    pub fn step<O: ReplayObserver + ?Sized>(
        &mut self,
        cursor: &mut Cursor,
        observer: &mut O,
    ) -> Result<Option<OpId>, ReplayError> {
        let Cursor { frames, pc, stats, stop_before } = cursor;
        loop {
            // Close (or repeat) the bodies that end here, innermost first.
            if let Some(f) = frames.last_mut() {
                if *pc == f.end {
                    let op = f.op;
                    if let Step::While { region, offset, max_iterations, .. } = self.steps[op] {
                        if self.condition(op, region, offset)? {
                            if max_iterations != 0 && f.iterations >= max_iterations {
                                return Err(ReplayError::LoopLimit { op: op as OpId, limit: max_iterations });
                            }
                            if self.cancelled() {
                                return Err(ReplayError::Cancelled { op: op as OpId, kind: "while" });
                            }
                            self.charge_pass(op, stats)?;
                            f.iterations += 1;
                            stats.loop_iterations += 1;
                            *pc = op + 1;
                            continue;
                        }
                    }
                    frames.pop();
                    observer.op_finished(&OpEvent { op: op as OpId, kind: self.steps[op].kind(), name: None });
                    return Ok(Some(op as OpId));
                }
            }
            if *pc == self.steps.len() {
                return Ok(None);
            }
            let at = *pc;
            if *stop_before == Some(at) {
                return Ok(None);
            }
            if self.cancelled() {
                return Err(ReplayError::Cancelled { op: at as OpId, kind: self.steps[at].kind() });
            }
            stats.ops += 1;
            let kind = self.steps[at].kind();
            if let Step::While { region, offset, end, .. } | Step::If { region, offset, end } = self.steps[at] {
                observer.op_started(&OpEvent { op: at as OpId, kind, name: None });
                if self.condition(at, region, offset)? {
                    if matches!(self.steps[at], Step::While { .. }) {
                        self.charge_pass(at, stats)?;
                        stats.loop_iterations += 1;
                    }
                    frames.push(Frame { op: at, end, iterations: 1 });
                    *pc += 1;
                    continue;
                }
                observer.op_finished(&OpEvent { op: at as OpId, kind, name: None });
                *pc = end;
                return Ok(Some(at as OpId));
            }
            let name = match &self.steps[at] {
                Step::Launch(i) => Some(self.launches[*i].entry.as_str()),
                Step::Effects(i) => Some(self.recorded[*i].kernel.as_str()),
                Step::Marker(name) => Some(name.as_str()),
                _ => None,
            };
            let event = OpEvent { op: at as OpId, kind, name };
            observer.op_started(&event);
            match self.run_step(at, stats) {
                Err(e)
                    if self.options.skip_unrunnable
                        && !matches!(e, ReplayError::Budget { .. } | ReplayError::Cancelled { .. }) =>
                {
                    self.skipped.push((at as OpId, e.to_string()))
                }
                result => result?,
            }
            let name = match &self.steps[at] {
                Step::Launch(i) => Some(self.launches[*i].entry.as_str()),
                Step::Effects(i) => Some(self.recorded[*i].kernel.as_str()),
                Step::Marker(name) => Some(name.as_str()),
                _ => None,
            };
            observer.op_finished(&OpEvent { op: at as OpId, kind, name });
            *pc += 1;
            return Ok(Some(at as OpId));
        }
    }

    /// A pass through a loop body costs the budget one instruction, so that a loop whose body runs
    /// no kernel (or kernels that stop at once) cannot spin forever under a budget.
    fn charge_pass(&self, op: usize, stats: &IterationStats) -> Result<(), ReplayError> {
        match self.options.instruction_budget {
            Some(b) if stats.instructions.saturating_add(stats.loop_iterations) >= b => {
                Err(ReplayError::Budget { op: op as OpId, kind: "while", budget: b })
            }
            _ => Ok(()),
        }
    }

    fn run_step(&mut self, pc: usize, stats: &mut IterationStats) -> Result<(), ReplayError> {
        let kind = self.steps[pc].kind();
        let mem_err = |error| ReplayError::Memory { op: pc as OpId, kind, error };
        match self.steps[pc] {
            Step::Launch(i) => {
                stats.launches += 1;
                self.launch(pc, i, stats)?;
            }
            Step::Effects(i) => {
                stats.launches += 1;
                stats.recorded_effects += 1;
                if !self.apply_effects(pc, i)? {
                    stats.stale_effects += 1;
                    if stats.first_stale_effects.is_none() {
                        stats.first_stale_effects = Some((pc as OpId, self.last_cpu_launch_reaching(pc, i)));
                    }
                }
            }
            Step::Copy { src, src_offset, dst, dst_offset, len } => {
                let from = self.mapped(pc, src)? + src_offset;
                let to = self.mapped(pc, dst)? + dst_offset;
                self.memory.copy(to, from, len).map_err(mem_err)?;
            }
            Step::Memset { region, offset, len, width, pattern } => {
                let at = self.mapped(pc, region)? + offset;
                let unit = pattern.to_le_bytes();
                self.memory.fill(at, len, &unit[..width as usize]).map_err(mem_err)?;
            }
            Step::Alloc(region) => {
                if self.regions[region as usize].base.is_some() {
                    return Err(ReplayError::DoubleAlloc {
                        op: pc as OpId,
                        region: self.regions[region as usize].name.clone(),
                    });
                }
                let base = self.map_region(region)?;
                let size = self.regions[region as usize].size;
                self.memory.fill(base, size, &[0]).map_err(mem_err)?;
                self.patch_region_relocs(Some(region))?;
            }
            Step::Library(op) => {
                // Each operand's bytes out, the routine over them, the written ones back in order.
                let operands = op.operands().unwrap_or_default();
                let mut bufs = Vec::with_capacity(operands.len());
                for o in &operands {
                    let mut buf = vec![0u8; o.len as usize];
                    self.memory.read(self.mapped(pc, o.at.region)? + o.at.offset, &mut buf).map_err(mem_err)?;
                    bufs.push(buf);
                }
                let budget = self.options.instruction_budget.map(|b| b.saturating_sub(stats.instructions));
                crate::library::run(&op, &mut bufs, budget)
                    .map_err(|error| ReplayError::Library { op: pc as OpId, error })?;
                for (o, buf) in operands.iter().zip(&bufs) {
                    if o.written {
                        self.memory.write(self.mapped(pc, o.at.region)? + o.at.offset, buf).map_err(mem_err)?;
                    }
                }
            }
            Step::Free(region) => {
                let base = self.mapped(pc, region)?;
                self.memory.remove_region(base).map_err(mem_err)?;
                self.regions[region as usize].base = None;
            }
            Step::Marker(_) | Step::Sync(_) | Step::Skipped => {}
            Step::While { .. } | Step::If { .. } => unreachable!("control ops are walked by run_iteration"),
        }
        Ok(())
    }

    fn launch(&mut self, pc: usize, index: usize, stats: &mut IterationStats) -> Result<(), ReplayError> {
        let l = &self.launches[index];
        let params: &[u8] = if l.scratch_relocs.is_empty() {
            &l.params
        } else {
            self.param_scratch.clear();
            self.param_scratch.extend_from_slice(&l.params);
            for r in &l.scratch_relocs {
                let target = &self.regions[r.target as usize];
                let base = target.base.ok_or_else(|| ReplayError::NotAllocated {
                    op: pc as OpId,
                    kind: "launch",
                    region: target.name.clone(),
                })?;
                patch(&mut self.param_scratch, r.offset, base + r.target_offset);
            }
            &self.param_scratch
        };
        let budget = match self.options.instruction_budget {
            Some(b) if stats.instructions >= b => {
                return Err(ReplayError::Budget { op: pc as OpId, kind: "launch", budget: b });
            }
            Some(b) => Some(b - stats.instructions),
            None => None,
        };
        // Rewritten only when it changes: a fresh write read back at once by the launch stalls
        // store forwarding, a measurable share of a small launch.
        if self.exec.instruction_budget != budget {
            self.exec.instruction_budget = budget;
        }
        let module = self.modules[l.module].as_ref().expect("launches run modules with PTX");
        let done = l.plan.launch(module, params, &self.memory, &self.exec).map_err(|error| {
            let (op, kernel) = (pc as OpId, l.entry.clone());
            match self.captured_region_at(&error) {
                Some((region, captured)) => {
                    ReplayError::UnseenPointer { op, kernel, error: Box::new(error), region, captured }
                }
                None => ReplayError::Exec { op, kernel, error },
            }
        })?;
        stats.instructions += done.thread_instructions;
        stats.native_launches += done.jit as u64;
        stats.lane_launches += done.lanes as u64;
        Ok(())
    }
}

/// What every launch of a replay runs with (the budget is set per launch).
fn exec_options(options: &ReplayOptions) -> ptx::ExecOptions {
    ptx::ExecOptions {
        instruction_budget: None,
        cancel: options.cancel.clone(),
        threads: options.threads,
        engine: options.engine,
        jit_dump: options.jit_dump.clone(),
        block_order: options.block_order,
        // Set once the archive's modules are loaded (`CpuReplay::mma_model`).
        mma_model: ptx::MmaModel::Ieee,
    }
}

fn patch(bytes: &mut [u8], offset: u64, value: u64) {
    // The archive reader has checked that relocations fit inside their owner.
    bytes[offset as usize..offset as usize + 8].copy_from_slice(&value.to_le_bytes());
}

impl Replayer for CpuReplay<'_> {
    type Error = ReplayError;

    fn restore_initial(&mut self, _archive: &Archive<'_>) -> Result<(), ReplayError> {
        CpuReplay::restore_initial(self)
    }

    fn write_region(&mut self, region: RegionId, bytes: &[u8]) -> Result<(), ReplayError> {
        CpuReplay::write_region(self, region, bytes)
    }

    fn run_iteration(&mut self, _archive: &Archive<'_>, observer: &mut dyn ReplayObserver) -> Result<Ran, ReplayError> {
        Ok(Ran { stats: CpuReplay::run_iteration(self, observer)?, device_ms: None })
    }

    fn read_region(&mut self, region: RegionId) -> Result<Vec<u8>, ReplayError> {
        CpuReplay::read_region(self, region)
    }

    fn set_block_order(&mut self, seed: Option<u64>) {
        self.options.block_order = seed;
        self.exec.block_order = seed;
    }
}
