//! `recap replay FILE --device cpu|cuda[:N]`: run an archive's ops and, with `--check`, judge the
//! final regions against the archive's expected state.
//!
//! The command is backend-agnostic: it parses the arguments, opens the archive through a memory
//! map, asks [`open_backend`] for a [`ReplayBackend`] on the chosen device and drives it. Each
//! iteration starts from the archive's initial state (restoring it is not timed), so `--check`
//! judges the same single pass whatever `--iterations` says.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use recap::mapped::MappedFile;
use recap_host::sessions::OpTimer;
use shared::archive::{Archive, Direction, RegionId};
use shared::check::RegionCheck;
use shared::replay::{CpuReplay, IterationStats, OpEvent, ReplayObserver, ReplayOptions};

use super::data::{self, InputArg};

/// Where a replay runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(u32),
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse) {
                Some(Ok(n)) => Ok(Device::Cuda(n)),
                _ => Err(format!("unknown device {s:?}: expected cpu, cuda or cuda:N")),
            },
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Where each logical device of a multi-device archive replays: `cuda:0,cuda:1` (device `i` on
/// the `i`-th GPU listed), `0=cuda:1,1=cuda:0` (by index), or `cpu` (every device in one memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceMap {
    Cpu,
    /// GPU ordinals, indexed by logical device.
    Cuda(Vec<u32>),
}

impl std::str::FromStr for DeviceMap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "cpu" {
            return Ok(DeviceMap::Cpu);
        }
        let gpu = |spec: &str| match spec.parse::<Device>() {
            Ok(Device::Cuda(n)) => Ok(n),
            _ => Err(format!("{spec:?} in --devices is not a GPU: expected cuda or cuda:N (or cpu alone, for every device)")),
        };
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if parts.iter().all(|p| p.contains('=')) {
            let mut by_index: Vec<Option<u32>> = Vec::new();
            for p in &parts {
                let (index, spec) = p.split_once('=').expect("checked above");
                let index: usize = index
                    .trim()
                    .parse()
                    .map_err(|_| format!("{index:?} in --devices is not a device index (0, 1, ...)"))?;
                if by_index.len() <= index {
                    by_index.resize(index + 1, None);
                }
                if by_index[index].replace(gpu(spec.trim())?).is_some() {
                    return Err(format!("device {index} is placed twice in --devices"));
                }
            }
            let missing: Vec<String> = by_index.iter().enumerate().filter(|(_, g)| g.is_none()).map(|(i, _)| i.to_string()).collect();
            if !missing.is_empty() {
                return Err(format!("--devices places no GPU for device {}", missing.join(", ")));
            }
            return Ok(DeviceMap::Cuda(by_index.into_iter().flatten().collect()));
        }
        if parts.iter().any(|p| p.contains('=')) {
            return Err("--devices takes either a list (cuda:0,cuda:1) or a mapping (0=cuda:1,1=cuda:0), not both".into());
        }
        parts.iter().map(|p| gpu(p)).collect::<Result<_, _>>().map(DeviceMap::Cuda)
    }
}

/// How the CUDA backend submits work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One CUDA graph, instantiated once and launched per iteration (with programmatic edges
    /// between dependent kernels where the GPU has them, as graph-pdl)
    Graph,
    /// The graph with programmatic edges between dependent kernels, each waiting for its
    /// predecessors at entry (sm_90 and newer; ordinary edges and a warning elsewhere)
    GraphPdl,
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
    /// cpu, cuda or cuda:N: every device of a multi-device archive on it.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// A multi-device archive's devices on several GPUs: cuda:0,cuda:1 (device i on the i-th
    /// listed), 0=cuda:1,1=cuda:0, or cpu. Several devices may share a GPU.
    #[arg(long, conflicts_with = "device", value_name = "MAP")]
    pub devices: Option<DeviceMap>,
    /// How many times to run the ops; each run starts from the initial state.
    #[arg(long, default_value_t = 1)]
    pub iterations: u32,
    /// Compare the final regions with the archive's expected state; exit 1 unless all pass.
    #[arg(long)]
    pub check: bool,
    /// Most PTX instructions one iteration may execute on the CPU.
    #[arg(long)]
    pub budget: Option<u64>,
    /// CPU worker threads (0: all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// CUDA submission mode (default graph); the CPU always replays op by op.
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// CPU engine: native code where a kernel allows it (jit), native code one thread at a time
    /// (jit-scalar), or always the interpreter (interp).
    #[arg(long, value_enum, default_value = "jit")]
    pub engine: CpuEngine,
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

/// The CPU engine for kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CpuEngine {
    /// Native code, groups of sixteen threads in vector lanes where the kernel allows
    Jit,
    /// Native code, one thread at a time
    JitScalar,
    /// The interpreter
    Interp,
}

impl From<CpuEngine> for shared::ptx::Engine {
    fn from(e: CpuEngine) -> Self {
        match e {
            CpuEngine::Jit => shared::ptx::Engine::Jit,
            CpuEngine::JitScalar => shared::ptx::Engine::JitScalar,
            CpuEngine::Interp => shared::ptx::Engine::Interpreter,
        }
    }
}

/// Settings every backend receives.
#[derive(Clone, Debug)]
pub struct BackendSettings {
    pub budget: Option<u64>,
    pub threads: usize,
    /// As given on the command line (`None`: the device's default).
    pub mode: Option<Mode>,
    pub cancel: Arc<AtomicBool>,
    pub engine: CpuEngine,
    /// What the archive may make a CPU replay allocate and launch.
    pub limits: shared::replay::ReplayLimits,
    /// GPU ordinals per logical device (`None`: every device on the one GPU asked for).
    pub placement: Option<Vec<u32>>,
}

/// A replay engine on one device, as the command drives it.
pub trait ReplayBackend {
    /// Restores the archive's initial state.
    fn reset(&mut self) -> anyhow::Result<()>;
    /// Runs every op once.
    fn run_iteration(&mut self, observer: &mut dyn ReplayObserver) -> anyhow::Result<IterationStats>;
    /// Judges the regions that have an expected state.
    fn check(&mut self) -> anyhow::Result<Vec<RegionCheck>>;
    /// Replaces a region's contents (for the iteration that follows).
    fn set_region(&mut self, region: RegionId, bytes: &[u8]) -> anyhow::Result<()>;
    /// A region's contents now.
    fn read_region(&mut self, region: RegionId) -> anyhow::Result<Vec<u8>>;

    /// One-line notes on how the replay has to be carried out (printed once, before it starts).
    fn warnings(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// What to say about the last iteration instead of the CPU's op and instruction counts.
    fn iteration_detail(&mut self) -> Option<String> {
        None
    }
    /// Warnings about what the last iteration did (a loop stopped by its limit), one line each.
    fn iteration_warnings(&mut self) -> anyhow::Result<Vec<String>> {
        Ok(Vec::new())
    }
}

struct CpuBackend<'a>(CpuReplay<'a>);

impl ReplayBackend for CpuBackend<'_> {
    fn reset(&mut self) -> anyhow::Result<()> {
        Ok(self.0.reset()?)
    }
    fn run_iteration(&mut self, observer: &mut dyn ReplayObserver) -> anyhow::Result<IterationStats> {
        Ok(self.0.run_iteration(observer)?)
    }
    fn check(&mut self) -> anyhow::Result<Vec<RegionCheck>> {
        Ok(self.0.check()?)
    }
    fn set_region(&mut self, region: RegionId, bytes: &[u8]) -> anyhow::Result<()> {
        Ok(self.0.set_region_bytes(region, bytes)?)
    }
    fn read_region(&mut self, region: RegionId) -> anyhow::Result<Vec<u8>> {
        Ok(self.0.region_bytes(region)?)
    }
}

/// A CUDA graph (or stream) replay of the archive on one GPU.
struct CudaBackend<'a> {
    replay: recap::cuda::ArchiveReplay<'a>,
    ops: u64,
    launches: u64,
    last_device_time: Duration,
    /// Loop-limit stops reported so far, by op (the replay counts them since it was loaded).
    limits_reported: std::collections::HashMap<shared::archive::OpId, u64>,
}

impl ReplayBackend for CudaBackend<'_> {
    fn reset(&mut self) -> anyhow::Result<()> {
        Ok(self.replay.reset()?)
    }
    fn run_iteration(&mut self, _observer: &mut dyn ReplayObserver) -> anyhow::Result<IterationStats> {
        // The GPU runs the whole graph without coming back to the host: there is no per-op event.
        self.last_device_time = self.replay.run_iteration()?;
        Ok(IterationStats { ops: self.ops, launches: self.launches, ..Default::default() })
    }
    fn check(&mut self) -> anyhow::Result<Vec<RegionCheck>> {
        Ok(self.replay.check()?)
    }
    fn set_region(&mut self, region: RegionId, bytes: &[u8]) -> anyhow::Result<()> {
        Ok(self.replay.replay().write_region(region, 0, bytes)?)
    }
    fn read_region(&mut self, region: RegionId) -> anyhow::Result<Vec<u8>> {
        Ok(self.replay.replay().read_region(region)?)
    }
    fn warnings(&mut self) -> Vec<String> {
        self.replay.replay().warnings().to_vec()
    }
    fn iteration_warnings(&mut self) -> anyhow::Result<Vec<String>> {
        let mut out = Vec::new();
        for mut limit in self.replay.replay().loop_limits()? {
            let before = self.limits_reported.insert(limit.op, limit.times).unwrap_or(0);
            if limit.times > before {
                limit.times -= before;
                out.push(limit.message());
            }
        }
        Ok(out)
    }
    fn iteration_detail(&mut self) -> Option<String> {
        let r = self.replay.replay();
        let how = match (r.mode(), r.graph_size()) {
            (recap::cuda::Mode::Graph, Some((nodes, edges))) => match r.dependent_edges() {
                0 => format!("one graph of {nodes} nodes, {edges} edges"),
                p => format!("one graph of {nodes} nodes, {edges} edges ({p} programmatic)"),
            },
            _ => "op by op on a stream".to_string(),
        };
        Some(format!(
            "{} on the GPU; {} ops, {} launches in the archive; {how}",
            fmt_duration(self.last_device_time),
            self.ops,
            self.launches
        ))
    }
}

/// The engine for `device`, over the archive held in `bytes`.
pub fn open_backend<'a>(
    device: Device,
    bytes: &'a [u8],
    archive: &Archive<'a>,
    settings: &BackendSettings,
) -> anyhow::Result<Box<dyn ReplayBackend + 'a>> {
    match device {
        Device::Cpu => {
            if let Some(mode) = settings.mode {
                bail!(
                    "--mode {} applies to --device cuda only: the CPU always replays op by op",
                    clap::ValueEnum::to_possible_value(&mode).map(|v| v.get_name().to_owned()).unwrap_or_default()
                );
            }
            let options = ReplayOptions {
                instruction_budget: settings.budget,
                cancel: Some(settings.cancel.clone()),
                threads: settings.threads,
                engine: settings.engine.into(),
                limits: settings.limits,
                jit_dump: recap::jit_dump::from_env(),
            };
            Ok(Box::new(CpuBackend(CpuReplay::new(archive, options)?)))
        }
        Device::Cuda(ordinal) => {
            if settings.budget.is_some() {
                bail!("--budget applies to --device cpu only: a GPU runs kernels without counting instructions");
            }
            use recap::cuda::Pdl;
            let (mode, pdl) = match settings.mode.unwrap_or(Mode::Graph) {
                Mode::Graph => (recap::cuda::Mode::Graph, Pdl::Auto),
                Mode::GraphPdl => (recap::cuda::Mode::Graph, Pdl::On),
                Mode::GraphPlain => (recap::cuda::Mode::Graph, Pdl::Off),
                Mode::Stream => (recap::cuda::Mode::Stream, Pdl::Auto),
            };
            let options = recap::cuda::ReplayOptions { mode, pdl, ..Default::default() };
            let ordinals: Vec<usize> = match &settings.placement {
                Some(gpus) => gpus.iter().map(|&g| g as usize).collect(),
                None => vec![ordinal as usize],
            };
            let replay = recap::cuda::ArchiveReplay::open_on(bytes, &ordinals, options)?;
            let launches = archive.ops().filter(|op| matches!(op, shared::archive::Op::Launch(_))).count() as u64;
            Ok(Box::new(CudaBackend { replay, ops: archive.op_count() as u64, launches, last_device_time: Duration::ZERO, limits_reported: Default::default() }))
        }
    }
}

/// A progress bar that appears once a replay has run for a moment, on a terminal only; it also
/// times the ops where `--json` asks for their times.
struct Progress {
    bar: indicatif::ProgressBar,
    shown: Arc<AtomicBool>,
    ops_seen: u64,
    timer: Option<OpTimer>,
}

const PROGRESS_DELAY: Duration = Duration::from_millis(300);

impl Progress {
    fn new(iterations: u32) -> Self {
        let bar = indicatif::ProgressBar::with_draw_target(Some(iterations as u64), indicatif::ProgressDrawTarget::hidden());
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
        Progress { bar, shown, ops_seen: 0, timer: None }
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
    fn op_finished(&mut self, event: &OpEvent) {
        if let Some(t) = &mut self.timer {
            t.op_finished(event);
        }
    }

    fn op_started(&mut self, event: &OpEvent) {
        if let Some(t) = &mut self.timer {
            t.op_started(event);
        }
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
    let (device, placement) = match &args.devices {
        None => (args.device, None),
        Some(DeviceMap::Cpu) => (Device::Cpu, None),
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
            (Device::Cuda(gpus[0]), Some(gpus.clone()))
        }
    };
    let args = Args { device, ..args };
    let settings = BackendSettings {
        budget: args.budget,
        threads: args.threads,
        mode: args.mode,
        cancel: cancel.clone(),
        engine: args.engine,
        limits: args.limits.limits(),
        placement,
    };
    // Inputs are read and checked before anything is loaded: a wrong file is one line, at once.
    let mut inputs = Vec::with_capacity(args.inputs.len());
    for input in &args.inputs {
        let region = data::region_named(&archive, &input.name).context("--input")?;
        inputs.push((region, data::read_input(&archive.region(region), &input.file)?));
    }
    if let Some(dir) = &args.dump {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let dumped = dump_regions(&archive, args.dump_all)?;
    let mut backend = open_backend(args.device, &map[..], &archive, &settings)
        .with_context(|| format!("loading {} for {}", args.file.display(), args.device))?;
    for w in backend.warnings() {
        eprintln!("warning: {w}");
    }
    let emit = |value: serde_json::Value| println!("{value}");

    let mut progress = Progress::new(args.iterations);
    if args.json {
        progress.timer = Some(OpTimer::default());
    }
    let mut times = Vec::with_capacity(args.iterations as usize);
    // On a terminal a long replay shows its first iteration (the one that compiles and
    // instantiates) and the progress bar; a pipe gets every line.
    let terse = args.iterations > 10 && std::io::IsTerminal::is_terminal(&std::io::stdout());
    for i in 0..args.iterations {
        if cancel.load(Ordering::Relaxed) {
            progress.bar.finish_and_clear();
            bail!("replay of {} on {} cancelled after {i} of {} iterations", args.file.display(), args.device, args.iterations);
        }
        if i > 0 {
            backend.reset()?;
        }
        for (region, bytes) in &inputs {
            backend.set_region(*region, bytes)?;
        }
        let start = Instant::now();
        let stats = backend.run_iteration(&mut progress);
        let elapsed = start.elapsed();
        let stats = match stats {
            Ok(s) => s,
            Err(e) => {
                progress.bar.finish_and_clear();
                return Err(e.context(format!("replaying {} on {}, iteration {}", args.file.display(), args.device, i + 1)));
            }
        };
        progress.bar.inc(1);
        if args.json {
            let ops = progress.timer.as_mut().map(OpTimer::take).unwrap_or_default();
            emit(serde_json::json!({
                "type": "iteration", "iteration": i + 1, "time_ms": elapsed.as_secs_f64() * 1e3,
                "stats": stats, "detail": backend.iteration_detail(),
            }));
            if !ops.is_empty() {
                emit(serde_json::json!({"type": "op_timings", "iteration": i + 1, "ops": ops}));
            }
        } else if !args.quiet && (i == 0 || !terse) {
            let line = match backend.iteration_detail() {
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
            let bytes = backend.read_region(*region).with_context(|| format!("reading region {:?} to dump it", r.name))?;
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
    let checks = backend.check()?;
    let failed = checks.iter().filter(|c| !c.passed).count();
    if args.json {
        emit(serde_json::json!({"type": "check", "passed": !checks.is_empty() && failed == 0, "regions": checks}));
    } else if checks.is_empty() {
        println!("no region has an expected state: nothing to check");
    } else {
        for c in &checks {
            println!("{}", c.line());
        }
        println!("{} of {} regions pass", checks.len() - failed, checks.len());
    }
    Ok(if failed == 0 && !checks.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The regions `--dump` writes and their file names: the output bindings' (every region's with
/// `--dump-all`), each name once.
fn dump_regions(archive: &Archive, all: bool) -> anyhow::Result<Vec<(RegionId, String)>> {
    let regions: Vec<RegionId> = if all {
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
    Ok(out)
}

fn iteration_line(i: u32, elapsed: Duration, stats: &IterationStats) -> String {
    let per_launch = if stats.launches > 0 {
        format!(", {:.3} us per launch", elapsed.as_secs_f64() * 1e6 / stats.launches as f64)
    } else {
        String::new()
    };
    // Which engine ran the launches: what a GPU engineer checks first when a replay is slow.
    let engines = if stats.launches > 0 {
        let interpreted = stats.launches - stats.native_launches;
        format!(
            " ({} native code, {} of them in SIMD lanes, {interpreted} interpreted)",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse() {
        assert_eq!("cpu".parse::<Device>(), Ok(Device::Cpu));
        assert_eq!("cuda".parse::<Device>(), Ok(Device::Cuda(0)));
        assert_eq!("cuda:3".parse::<Device>(), Ok(Device::Cuda(3)));
        assert!("cuda:x".parse::<Device>().unwrap_err().contains("cuda:N"));
        assert!("tpu".parse::<Device>().is_err());
    }
}
