//! `recap replay FILE --device cpu|cuda[:N]`: run an archive's ops and, with `--check`, judge the
//! final regions against the archive's expected state.
//!
//! The command is backend-agnostic: it parses the arguments, opens the archive through a memory
//! map, opens it on the chosen device as a [`DeviceReplay`] and drives it. Each
//! iteration starts from the archive's initial state (restoring it is not timed), so `--check`
//! judges the same single pass whatever `--iterations` says.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use recap::device::{DeviceMap, DeviceReplay, DeviceSpec, OpenOptions};
use recap::mapped::MappedFile;
use shared::archive::{Archive, Direction, RegionId};
use shared::check::{CheckOptions, CheckState, ToleranceOverride, Verdict};
use shared::replay::{
    check_state, IterationStats, OpEvent, Ran, ReplayObserver, ReplayOptions, Replayer, Session, SessionError,
};

use super::data::{self, InputArg};

/// How the CUDA backend submits work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// One CUDA graph, instantiated once and launched per iteration (with programmatic edges
    /// between dependent kernels where the GPU has them, as graph-pdl)
    Graph,
    /// The graph with programmatic edges between dependent kernels, each waiting for its
    /// predecessors at entry, those whose every launch is at most half a wave first triggering their
    /// dependents (sm_90 and newer; ordinary edges and a warning elsewhere)
    GraphPdl,
    /// graph-pdl without the early trigger: every kernel only waits at entry
    GraphPdlWait,
    /// The graph with ordinary edges only
    GraphPlain,
    /// Every op submitted to a stream one by one.
    Stream,
}

/// Replay an archive on the CPU or a CUDA GPU, optionally checking the final state
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// The archive (.recap) to replay.
    pub file: PathBuf,
    /// cpu, cuda or cuda:N: every device of a multi-device archive on it (cpu:ENGINE, or the
    /// engine's name alone, picks the CPU engine as --engine does).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// A multi-device archive's devices on several GPUs: cuda:0,cuda:1 (device i on the i-th
    /// listed), 0=cuda:1,1=cuda:0, or cpu. Several devices may share a GPU.
    #[arg(long, conflicts_with = "device", value_name = "MAP")]
    pub devices: Option<DeviceMap>,
    /// How many times to run the ops (at least 1); each run starts from the initial state.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: u32,
    /// Compare the final regions with the archive's expected state, stretch by stretch in each
    /// stretch's element type; exit 1 unless all pass (and when there is nothing to check).
    #[arg(long)]
    pub check: bool,
    /// With --check: make N whole replays on the device (the CPU runs each launch's blocks in a
    /// different order) and report where they disagree with each other; a stretch whose replays
    /// disagree is nondeterministic and judged with a tolerance no tighter than their spread.
    #[arg(long, value_name = "N", requires = "check", value_parser = clap::value_parser!(u32).range(2..))]
    pub determinism: Option<u32>,
    /// With --check: float stretches pass within this many units in the last place: N for
    /// every region, or NAME=N for one region or binding (repeatable)
    #[arg(long, value_name = "[NAME=]N", requires = "check")]
    pub ulps: Vec<NamedValue<u64>>,
    /// With --check: float stretches pass within |got - want| <= atol + rtol * |want| ([NAME=]X)
    #[arg(long, value_name = "[NAME=]X", requires = "check")]
    pub rtol: Vec<NamedValue<f64>>,
    /// With --check: the absolute part of the float tolerance ([NAME=]X)
    #[arg(long, value_name = "[NAME=]X", requires = "check")]
    pub atol: Vec<NamedValue<f64>>,
    /// Most PTX instructions one iteration may execute on the CPU.
    #[arg(long)]
    pub budget: Option<u64>,
    /// CPU worker threads (0: all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// CUDA submission mode (default graph); the CPU always replays op by op.
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// CPU engine: native code where a kernel allows it (jit), native code one thread at a time
    /// (jit-scalar), or always the interpreter (interp).
    #[arg(long, value_enum, default_value = "jit")]
    pub engine: CpuBackend,
    /// Tensor-core arithmetic on the CPU: ieee (IEEE fused multiply-adds in k order), sm80 (Ampere's
    /// unit) or sm90 (Hopper's); by default that of the GPU the archive was captured on. The GPU
    /// models also fuse plain mul and add pairs as ptxas does; ieee keeps PTX's literal meaning
    #[arg(long, value_enum)]
    pub mma_model: Option<MmaModelArg>,
    /// Regions at the device addresses the capture recorded (captured) or at fresh ones (fresh);
    /// by default as the archive asks (docs/FORMAT.md, "Regions at their captured addresses").
    #[arg(long, value_enum)]
    pub placement: Option<PlacementArg>,
    #[command(flatten)]
    pub limits: super::limits::LimitArgs,
    /// Replace a binding's or region's initial data, NAME=FILE: a .npy whose dtype and shape fit
    /// the region, or raw bytes of its size (repeatable)
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<InputArg>,
    /// After the last iteration, write every output binding's region into DIR as .npy
    #[arg(long, value_name = "DIR")]
    pub dump: Option<PathBuf>,
    /// With --dump: write every region, not only the outputs
    #[arg(long, requires = "dump")]
    pub dump_all: bool,
    /// Print one JSON object per line (iterations, per-op times, dumped files, the check) for scripts
    #[arg(long)]
    pub json: bool,
    /// Print no line per iteration, only the summary and the check (on a terminal, more than ten
    /// iterations print the first one and a progress bar anyway)
    #[arg(long, short)]
    pub quiet: bool,
}

/// A tolerance for every region (`4`) or for one region or binding (`out=4`).
#[derive(Clone, Debug, PartialEq)]
pub struct NamedValue<T> {
    pub name: Option<String>,
    pub value: T,
}

impl<T: std::str::FromStr + PartialOrd + Default> std::str::FromStr for NamedValue<T> {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (name, value) = match s.rsplit_once('=') {
            Some((n, v)) if !n.is_empty() => (Some(n.to_string()), v),
            _ => (None, s),
        };
        match value.trim().parse::<T>() {
            Ok(v) if v >= T::default() => Ok(NamedValue { name, value: v }),
            _ => anyhow::bail!("{value:?} is not a non-negative number (expected N or NAME=N)"),
        }
    }
}

/// The override `--ulps/--rtol/--atol` with `name` (`None`: every region) set.
fn override_of<'o>(options: &'o mut CheckOptions, name: &Option<String>) -> &'o mut ToleranceOverride {
    let Some(n) = name else { return &mut options.all };
    let i = match options.by_name.iter().position(|(m, _)| m == n) {
        Some(i) => i,
        None => {
            options.by_name.push((n.clone(), ToleranceOverride::default()));
            options.by_name.len() - 1
        }
    };
    &mut options.by_name[i].1
}

/// The check's tolerances from `--ulps/--rtol/--atol`.
pub fn check_options(ulps: &[NamedValue<u64>], rtol: &[NamedValue<f64>], atol: &[NamedValue<f64>]) -> CheckOptions {
    let mut options = CheckOptions::default();
    for u in ulps {
        override_of(&mut options, &u.name).ulps = Some(u.value);
    }
    for r in rtol {
        override_of(&mut options, &r.name).rtol = Some(r.value);
    }
    for a in atol {
        override_of(&mut options, &a.name).atol = Some(a.value);
    }
    options
}

/// The check's verdict for people: a line per region, then the state with its counts.
pub fn print_verdict(verdict: &Verdict) {
    if verdict.state == CheckState::NothingToCheck {
        println!("no region has an expected state: nothing to check");
        return;
    }
    for c in &verdict.regions {
        println!("{}", c.line());
    }
    let count = |o| verdict.regions.iter().filter(|c| c.passed && c.outcome() == o).count();
    let (exact, within) = (count(shared::check::Outcome::Exact), count(shared::check::Outcome::Within));
    let failed = verdict.regions.iter().filter(|c| !c.passed).count();
    let nondet = verdict.regions.iter().filter(|c| c.nondeterministic()).count();
    let replays = if verdict.replays > 1 {
        format!("; {nondet} nondeterministic over {} replays", verdict.replays)
    } else {
        String::new()
    };
    println!(
        "{}: {} of {} regions pass ({exact} exact, {within} within tolerance, {failed} failed{replays})",
        verdict.state.label(),
        exact + within,
        verdict.regions.len()
    );
}

/// `--mma-model`: the tensor-core arithmetic of a CPU replay (`shared::ptx::MmaModel`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum MmaModelArg {
    Ieee,
    Sm80,
    Sm90,
}

impl From<MmaModelArg> for shared::ptx::MmaModel {
    fn from(m: MmaModelArg) -> Self {
        match m {
            MmaModelArg::Ieee => shared::ptx::MmaModel::Ieee,
            MmaModelArg::Sm80 => shared::ptx::MmaModel::Sm80,
            MmaModelArg::Sm90 => shared::ptx::MmaModel::Sm90,
        }
    }
}

/// The CPU engine for kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CpuBackend {
    /// Native code, groups of sixteen threads in vector lanes where the kernel allows
    Jit,
    /// Native code, one thread at a time
    JitScalar,
    /// The interpreter
    Interp,
}

impl From<CpuBackend> for shared::ptx::Engine {
    fn from(e: CpuBackend) -> Self {
        match e {
            CpuBackend::Jit => shared::ptx::Engine::Jit,
            CpuBackend::JitScalar => shared::ptx::Engine::JitScalar,
            CpuBackend::Interp => shared::ptx::Engine::Interpreter,
        }
    }
}

/// Where regions go (`--placement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlacementArg {
    /// At the device addresses the capture recorded
    Captured,
    /// At fresh addresses
    Fresh,
}

impl From<PlacementArg> for shared::placement::Placement {
    fn from(p: PlacementArg) -> Self {
        match p {
            PlacementArg::Captured => shared::placement::Placement::Captured,
            PlacementArg::Fresh => shared::placement::Placement::Fresh,
        }
    }
}

/// The replay the command drives, plus what it has said about how it ran.
pub struct Backend<'a> {
    replay: DeviceReplay<'a>,
    /// Loop-limit stops reported so far, by op (a CUDA replay counts them since it was loaded).
    limits_reported: std::collections::HashMap<shared::archive::OpId, u64>,
}

impl Replayer for Backend<'_> {
    type Error = anyhow::Error;

    fn restore_initial(&mut self, archive: &Archive<'_>) -> anyhow::Result<()> {
        Ok(self.replay.restore_initial(archive)?)
    }
    fn write_region(&mut self, region: RegionId, bytes: &[u8]) -> anyhow::Result<()> {
        Ok(self.replay.write_region(region, bytes)?)
    }
    fn run_iteration(&mut self, archive: &Archive<'_>, observer: &mut dyn ReplayObserver) -> anyhow::Result<Ran> {
        Ok(self.replay.run_iteration(archive, observer)?)
    }
    fn read_region(&mut self, region: RegionId) -> anyhow::Result<Vec<u8>> {
        Ok(self.replay.read_region(region)?)
    }
    fn set_block_order(&mut self, seed: Option<u64>) {
        self.replay.set_block_order(seed)
    }
}

impl Backend<'_> {
    /// The tensor-core arithmetic a CPU replay of an archive with tensor-core instructions runs,
    /// and why that one.
    fn tensor_cores(&self) -> Option<(shared::ptx::MmaModel, String)> {
        let DeviceReplay::Cpu(replay) = &self.replay else { return None };
        if !replay.uses_tensor_cores() {
            return None;
        }
        Some((replay.mma_model(), Self::why_model(replay)))
    }

    /// The special-function arithmetic (`.approx` functions) a CPU replay of an archive that
    /// runs them uses, and why that one: it follows the tensor-core model's GPU generation.
    fn special_functions(&self) -> Option<(shared::ptx::SfuModel, String)> {
        let DeviceReplay::Cpu(replay) = &self.replay else { return None };
        if !replay.uses_special_functions() {
            return None;
        }
        Some((replay.sfu_model(), Self::why_model(replay)))
    }

    /// Whether a CPU replay of an archive with multiplies and additions that ptxas fuses runs them
    /// fused, and why.
    fn contraction(&self) -> Option<(bool, String)> {
        let DeviceReplay::Cpu(replay) = &self.replay else { return None };
        if !replay.has_contractions() {
            return None;
        }
        Some((replay.contraction(), Self::why_model(replay)))
    }

    fn why_model(replay: &shared::replay::CpuReplay<'_>) -> String {
        match (replay.options_model(), replay.capture_sm()) {
            (Some(_), _) => "--mma-model".to_string(),
            (None, Some(sm)) => format!("the archive was captured on sm_{sm}"),
            (None, None) => "the archive names no GPU".to_string(),
        }
    }

    /// One-line notes on how the replay has to be carried out (printed once, before it starts).
    fn warnings(&self) -> Vec<String> {
        match &self.replay {
            DeviceReplay::Cpu(_) => Vec::new(),
            DeviceReplay::Cuda(replay) => replay.warnings().to_vec(),
        }
    }

    /// Warnings about what the last iteration did (a loop stopped by its limit), one line each.
    fn iteration_warnings(&mut self) -> anyhow::Result<Vec<String>> {
        let DeviceReplay::Cuda(replay) = &mut self.replay else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for mut limit in replay.loop_limits()? {
            let before = self.limits_reported.insert(limit.op, limit.times).unwrap_or(0);
            if limit.times > before {
                limit.times -= before;
                out.push(limit.message());
            }
        }
        Ok(out)
    }

    /// What to say about an iteration instead of the CPU's op and instruction counts (a GPU's
    /// iteration time is its device time).
    fn iteration_detail(&self, stats: &IterationStats) -> Option<String> {
        let DeviceReplay::Cuda(replay) = &self.replay else { return None };
        let how = match (replay.mode(), replay.graph_size()) {
            (recap::cuda::Mode::Graph, Some((nodes, edges))) => match replay.dependent_edges() {
                0 => format!("one graph of {nodes} nodes, {edges} edges"),
                p => format!(
                    "one graph of {nodes} nodes, {edges} edges ({p} programmatic; {} kernel{} trigger{} early)",
                    replay.triggered_kernels(),
                    if replay.triggered_kernels() == 1 { "" } else { "s" },
                    if replay.triggered_kernels() == 1 { "s" } else { "" },
                ),
            },
            _ => "op by op on a stream".to_string(),
        };
        Some(format!("on the GPU; {} ops, {} launches in the archive; {how}", stats.ops, stats.launches))
    }
}

/// What the command line asks of the replay on its device, refusing the flags that device cannot
/// honour: the options [`DeviceReplay::open`] takes.
fn open_options(args: &Args, gpus: Option<Vec<u32>>, cancel: &Arc<AtomicBool>) -> anyhow::Result<OpenOptions> {
    let placement = args.placement.map(Into::into);
    match args.device {
        DeviceSpec::Cpu(_) => {
            if let Some(mode) = args.mode {
                bail!(
                    "--mode {} applies to --device cuda only: the CPU always replays op by op",
                    clap::ValueEnum::to_possible_value(&mode).map(|v| v.get_name().to_owned()).unwrap_or_default()
                );
            }
        }
        DeviceSpec::Cuda(_) => {
            if args.budget.is_some() {
                bail!("--budget applies to --device cpu only: a GPU runs kernels without counting instructions");
            }
        }
    }
    let mode =
        clap::ValueEnum::to_possible_value(&args.mode.unwrap_or(ModeArg::Graph)).map(|v| v.get_name().to_owned());
    let cuda = mode.as_deref().and_then(recap::device::cuda_mode).context("--mode names no CUDA submission mode")?;
    Ok(OpenOptions {
        cpu: ReplayOptions {
            instruction_budget: args.budget,
            cancel: Some(cancel.clone()),
            threads: args.threads,
            engine: args.engine.into(),
            limits: args.limits.limits(),
            jit_dump: recap::jit_dump::from_env(),
            placement,
            mma_model: args.mma_model.map(Into::into),
            ..Default::default()
        },
        cuda: recap::cuda::ReplayOptions { placement, ..cuda },
        gpus,
    })
}

/// A progress bar that appears once a replay has run for a moment, on a terminal only.
struct Progress {
    bar: indicatif::ProgressBar,
    shown: Arc<AtomicBool>,
    ops_seen: u64,
}

const PROGRESS_DELAY: Duration = Duration::from_millis(300);

impl Progress {
    fn new(iterations: u32) -> Self {
        let bar =
            indicatif::ProgressBar::with_draw_target(Some(iterations as u64), indicatif::ProgressDrawTarget::hidden());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} iteration {pos}/{len} [{elapsed_precise}] {msg}")
                .expect("valid template"),
        );
        let shown = Arc::new(AtomicBool::new(false));
        if std::io::stderr().is_terminal() {
            // A long single kernel gives the observer no chance to act: a timer shows the bar.
            let (bar, shown) = (bar.clone(), shown.clone());
            std::thread::spawn(move || {
                std::thread::sleep(PROGRESS_DELAY);
                if !bar.is_finished() {
                    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                    bar.enable_steady_tick(Duration::from_millis(120));
                    shown.store(true, Ordering::Relaxed);
                }
            });
        }
        Progress { bar, shown, ops_seen: 0 }
    }

    fn println(&self, line: String) {
        if self.shown.load(Ordering::Relaxed) {
            self.bar.suspend(|| println!("{line}"));
        } else {
            println!("{line}");
        }
    }
}

impl ReplayObserver for Progress {
    fn op_started(&mut self, event: &OpEvent) {
        self.ops_seen += 1;
        // Updating the bar costs more than dispatching a small op: do it now and then.
        if self.ops_seen % 64 == 1 && self.shown.load(Ordering::Relaxed) {
            self.bar.set_message(format!("op {} {}", event.op, event.name.unwrap_or(event.kind)));
        }
    }
}

/// Runs the command; success when everything ran (and passed, with `--check`).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let map = MappedFile::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let archive = Archive::open(&map).with_context(|| format!("reading {}", args.file.display()))?;

    let cancel = Arc::new(AtomicBool::new(false));
    {
        let cancel = cancel.clone();
        // A second handler cannot be installed in one process; the first one keeps working. A GPU
        // kernel cannot be stopped from the host: a second Ctrl-C ends the process at once.
        let _ = ctrlc::set_handler(move || {
            if cancel.swap(true, Ordering::Relaxed) {
                std::process::exit(130);
            }
        });
    }
    let (device, gpus) = match &args.devices {
        None => (args.device, None),
        Some(DeviceMap::Cpu) => (DeviceSpec::Cpu(None), None),
        Some(DeviceMap::Cuda(gpus)) => {
            let logical = archive.device_count() as usize;
            if gpus.len() != logical {
                bail!(
                    "--devices places {} device{} but {} has {logical}: place every device, or use --device for one GPU",
                    gpus.len(),
                    if gpus.len() == 1 { "" } else { "s" },
                    args.file.display()
                );
            }
            (DeviceSpec::Cuda(gpus[0]), Some(gpus.clone()))
        }
    };
    let args = Args { device, ..args };
    if matches!(args.device, DeviceSpec::Cuda(_)) && recap::aslr::randomized() {
        let asked = args.placement.map(Into::into).map_or_else(|| shared::placement::asked(&archive), Ok);
        if asked.is_ok_and(|p| p == shared::placement::Placement::Captured) {
            // The captured ranges are free only in a process laid out without randomisation.
            let error = recap::aslr::reexec_without_randomization();
            eprintln!(
                "recap replay: could not run again without address-space randomisation ({error}); placing regions \
                 at their captured addresses will likely fail"
            );
        }
    }
    // Inputs are read and checked before anything is loaded: a wrong file is one line, at once.
    let mut inputs = Vec::with_capacity(args.inputs.len());
    for input in &args.inputs {
        let region = data::region_named(&archive, &input.name).context("--input")?;
        inputs.push((region, data::read_input(&archive.region(region), &input.file)?));
    }
    if let Some(dir) = &args.dump {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let (dumped, no_outputs) = dump_regions(&archive, args.dump_all)?;
    if args.dump.is_some() && no_outputs && !args.dump_all {
        eprintln!("note: {} names no output binding: --dump writes every region", args.file.display());
    }
    let replay = open_options(&args, gpus, &cancel)
        .and_then(|options| Ok(DeviceReplay::open(&archive, args.device, options)?))
        .with_context(|| format!("loading {} for {}", args.file.display(), args.device))?;
    let mut backend = Backend { replay, limits_reported: Default::default() };
    for w in backend.warnings() {
        eprintln!("warning: {w}");
    }
    let emit = |value: serde_json::Value| println!("{value}");
    if let Some((model, why)) = backend.tensor_cores() {
        if args.json {
            emit(serde_json::json!({"type": "mma_model", "model": model.name(), "why": why}));
        } else {
            println!("tensor cores: the {} model ({why})", model.name());
        }
    }
    if let Some((model, why)) = backend.special_functions() {
        if args.json {
            emit(serde_json::json!({"type": "sfu_model", "model": model.name(), "why": why}));
        } else {
            println!("special functions: the {} model ({why})", model.name());
        }
    }
    if let Some((fused, why)) = backend.contraction() {
        if args.json {
            emit(serde_json::json!({"type": "contraction", "fused": fused, "why": why}));
        } else if fused {
            println!("multiply-adds: fused as ptxas fuses them ({why})");
        } else {
            println!("multiply-adds: as the PTX reads, unfused ({why})");
        }
    }

    let mut progress = Progress::new(args.iterations);
    let mut times = Vec::with_capacity(args.iterations as usize);
    // On a terminal a long replay shows its first iteration (the one that compiles and
    // instantiates) and the progress bar; a pipe gets every line.
    let terse = args.iterations > 10 && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let clock = recap::clock::MonotonicClock::new();
    let mut session = Session::new(&archive, args.iterations, &inputs);
    let mut others = Vec::new();
    if let Some(n) = args.determinism {
        if !args.quiet && !args.json {
            println!("determinism: {n} whole replays on {}, the last one reported below", args.device);
        }
        let cancelled = || cancel.load(Ordering::Relaxed);
        others = session.replay_again(&mut backend, n - 1, &cancelled).map_err(|e| match e {
            SessionError::Replay(e) => {
                e.context(format!("replaying {} on {} for --determinism", args.file.display(), args.device))
            }
            other => anyhow::anyhow!("replaying {} on {} for --determinism: {other}", args.file.display(), args.device),
        })?;
    }
    while !session.done() {
        let i = times.len() as u32;
        if cancel.load(Ordering::Relaxed) {
            progress.bar.finish_and_clear();
            bail!(
                "replay of {} on {} cancelled after {i} of {} iterations",
                args.file.display(),
                args.device,
                args.iterations
            );
        }
        // The command prints its own lines: the session's messages are for the host and browser.
        let iteration = match session.step(&mut backend, &clock, &mut progress, &mut |_| {}) {
            Ok(it) => it,
            Err(e) => {
                progress.bar.finish_and_clear();
                return Err(e.context(format!(
                    "replaying {} on {}, iteration {}",
                    args.file.display(),
                    args.device,
                    i + 1
                )));
            }
        };
        let elapsed = Duration::from_secs_f64(iteration.time_ms / 1e3);
        let stats = iteration.stats;
        progress.bar.inc(1);
        if args.json {
            emit(serde_json::json!({
                "type": "iteration", "iteration": i + 1, "time_ms": iteration.time_ms,
                "stats": stats, "detail": backend.iteration_detail(&stats),
            }));
            if !iteration.ops.is_empty() {
                emit(serde_json::json!({"type": "op_timings", "iteration": i + 1, "ops": iteration.ops}));
            }
        } else if (!args.quiet || stats.stale_effects > 0) && (i == 0 || !terse) {
            // Even quiet, a replay whose recorded effects stood in over other inputs says so: it
            // changes what its verdict proves.
            let line = match backend.iteration_detail(&stats) {
                Some(detail) => format!("iteration {}: {} ({detail})", i + 1, fmt_duration(elapsed)),
                None => iteration_line(i, elapsed, &stats),
            };
            progress.println(line);
        }
        for w in backend.iteration_warnings()? {
            progress.bar.suspend(|| eprintln!("warning: iteration {}: {w}", i + 1));
        }
        times.push(elapsed);
    }
    progress.bar.finish_and_clear();
    if times.len() > 1 {
        let mut sorted = times.clone();
        sorted.sort();
        let (median, min) = (sorted[sorted.len() / 2], sorted[0]);
        if args.json {
            emit(serde_json::json!({
                "type": "summary", "iterations": times.len(),
                "median_ms": median.as_secs_f64() * 1e3, "min_ms": min.as_secs_f64() * 1e3,
            }));
        } else {
            println!("{} iterations: median {}, min {}", times.len(), fmt_duration(median), fmt_duration(min));
        }
    }
    if let Some(dir) = &args.dump {
        for (region, file) in &dumped {
            let r = archive.region(*region);
            let bytes = Replayer::read_region(&mut backend, *region)
                .with_context(|| format!("reading region {:?} to dump it", r.name))?;
            let path = dir.join(file);
            data::write_region(&r, &bytes, &path)?;
            if args.json {
                emit(serde_json::json!({"type": "dump", "region": r.name, "file": path}));
            } else {
                println!("wrote {} ({} bytes of {})", path.display(), bytes.len(), r.dtype.name());
            }
        }
    }
    if !args.check {
        return Ok(ExitCode::SUCCESS);
    }
    let options = check_options(&args.ulps, &args.rtol, &args.atol);
    let verdict = check_state(&mut backend, &archive, &options, &others)?;
    if args.json {
        emit(serde_json::json!({
            "type": "check", "state": verdict.state, "passed": verdict.passed(), "replays": verdict.replays,
            "regions": verdict.regions,
        }));
    } else {
        print_verdict(&verdict);
    }
    Ok(if verdict.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The regions `--dump` writes and their file names: the output bindings' (every region's with
/// `--dump-all`, and where the archive names no output binding, as a capture without names does:
/// writing nothing would leave an empty folder and no word why), each name once; and whether the
/// archive names no output binding.
fn dump_regions(archive: &Archive, all: bool) -> anyhow::Result<(Vec<(RegionId, String)>, bool)> {
    let no_outputs = !archive.bindings().any(|b| matches!(b.direction, Direction::Out | Direction::InOut));
    let regions: Vec<RegionId> = if all || no_outputs {
        archive.regions().map(|r| r.id).collect()
    } else {
        let mut outs: Vec<RegionId> = archive
            .bindings()
            .filter(|b| matches!(b.direction, Direction::Out | Direction::InOut))
            .map(|b| b.region)
            .collect();
        outs.dedup();
        outs
    };
    let mut taken = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(regions.len());
    for region in regions {
        let mut file = data::dump_name(archive.region(region).name);
        if !taken.insert(file.clone()) {
            file = format!("{}.{region}.npy", file.trim_end_matches(".npy"));
            taken.insert(file.clone());
        }
        out.push((region, file));
    }
    Ok((out, no_outputs))
}

fn iteration_line(i: u32, elapsed: Duration, stats: &IterationStats) -> String {
    let per_launch = if stats.launches > 0 {
        format!(", {:.3} us per launch", elapsed.as_secs_f64() * 1e6 / stats.launches as f64)
    } else {
        String::new()
    };
    // Which engine ran the launches: what a GPU engineer checks first when a replay is slow.
    let engines = if stats.launches > 0 {
        let interpreted = stats.launches - stats.native_launches - stats.recorded_effects;
        let recorded = match (stats.recorded_effects, stats.first_stale_effects) {
            (0, _) => String::new(),
            (n, None) => format!(", {n} from recorded effects (machine code only; inputs checked)"),
            // Inputs that differ only after ops the CPU ran (the caller wrote none): the GPU's
            // writes stand in, and the line says where the difference entered.
            (n, Some((op, after))) => format!(
                ", {n} from recorded effects (machine code only), {} of them over inputs that differ from the \
                 captured ones, first op {op}{}",
                stats.stale_effects,
                after.map(|w| format!(" after op {w} ran on the CPU")).unwrap_or_default()
            ),
        };
        format!(
            " ({} native code, {} of them in SIMD lanes, {interpreted} interpreted{recorded})",
            stats.native_launches, stats.lane_launches
        )
    } else {
        String::new()
    };
    format!(
        "iteration {}: {} ({} ops, {} launches{engines}, {} instructions{per_launch})",
        i + 1,
        fmt_duration(elapsed),
        stats.ops,
        stats.launches,
        stats.instructions
    )
}

fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.3} us", s * 1e6)
    }
}
