//! `recap capture [--range R] [-o OUT] -- CMD [ARGS]`: runs an unmodified CUDA program with recap's
//! interposer in front of the driver and writes the work of the range as one archive.
//!
//! This command only sets the stage: it finds the interposer (`librecap_intercept.so`, beside this
//! binary) and the real driver, puts the interposer first on `LD_LIBRARY_PATH` as `libcuda.so.1`
//! and `libcuda.so` (a fresh folder of two symlinks), tells it what to record (a
//! `shared::capture::Request`, written into the program's environment), runs the program, and
//! prints the report the interposer left. The recording itself happens inside the program (`native-host/intercept`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use shared::capture::{Range, Report, Request, TypesReport};
use shared::replay::ReplayOptions;

use super::inspect::human;

/// The audit library's file name (`native-host/audit`).
const AUDIT_LIB: &str = "librecap_audit.so";

/// recap's `sitecustomize` for Python programs: the element types of their arrays, the Python
/// package's own module.
const SITECUSTOMIZE: &str = include_str!("../../../python/recap/_array_types.py");

/// Where NVTX v3 looks for its injection library.
const NVTX_INJECTION: &str = "NVTX_INJECTION64_PATH";

/// Record a CUDA program's work into an archive
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "Examples:\n  recap capture -o step.recap -- python train.py\n  \
                        recap capture --range launches:10:5 -- ./my_cuda_app --size 4096")]
pub struct Args {
    /// What to record: `profiler` (between cudaProfilerStart and cudaProfilerStop, as Nsight's
    /// --capture-range=cudaProfilerApi), `launches:SKIP:COUNT` (COUNT launches after the first
    /// SKIP), `all` (everything the program issues), or `nvtx:NAME` (the first NVTX range whose
    /// message is NAME, as Nsight's --capture-range=nvtx; `NAME@DOMAIN` in a named domain,
    /// `NAME@*` in any)
    #[arg(long, default_value = "profiler")]
    pub range: String,
    /// The archive to write
    #[arg(short, long, default_value = "capture.recap")]
    pub output: PathBuf,
    /// The CUDA driver to forward to (default: the system's libcuda.so.1, found as the dynamic
    /// linker would)
    #[arg(long, value_name = "LIBCUDA")]
    pub driver: Option<PathBuf>,
    /// Print the capture report as JSON instead of a summary
    #[arg(long)]
    pub json: bool,
    /// Keep what each launch of a kernel without PTX (cuBLAS, PyTorch's own) writes, read around
    /// it, so that a CPU replay can go on past it when its inputs are the captured ones
    #[arg(long)]
    pub record_effects: bool,
    /// Make replays place regions at their captured device addresses, so that pointers the
    /// capture cannot find (computed by kernels, written into buffers) stay right; without it,
    /// the capture asks for this where it sees kernels write pointers
    #[arg(long)]
    pub place_regions: bool,
    /// Keep the program's address-space randomisation (by default it runs without, as under gdb,
    /// so that a replay can place regions at the captured device addresses: recap::aslr)
    #[arg(long)]
    pub keep_aslr: bool,
    /// After the program ends, replay the archive's PTX once on the CPU interpreter for at most
    /// this many seconds to learn each region's element types (the archive's `types` section),
    /// so that a check judges floats within their type's tolerance; 0 skips it (the archive is
    /// then compared byte for byte until `recap infer-types` adds them)
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub infer_types_seconds: f64,
    /// After the program (and the types), run the recorded range N more times on the device it
    /// ran on, each from the captured initial state, and keep in the archive how far those runs
    /// and the program's own disagree, per stretch: a check on any device then judges those
    /// stretches as nondeterministic, no tighter than the program's own spread
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub repeat_range: Option<u32>,
    /// Do not ask a Python program, as the range ends, for the element types of its live device
    /// arrays (PyTorch tensors, CuPy, Numba and JAX arrays), which type the bytes only machine
    /// code wrote; by default recap's `sitecustomize` is put first on PYTHONPATH to ask
    #[arg(long)]
    pub no_array_types: bool,
    /// The program and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let range = Range::parse(&args.range)?;
    let interposer = interposer()?;
    let driver = match &args.driver {
        Some(d) => d.canonicalize().with_context(|| format!("--driver {}", d.display()))?,
        None => system_driver()?,
    };
    if driver == interposer.canonicalize().unwrap_or_default() {
        bail!(
            "the driver to forward to is recap's own interposer ({}); name the real one with --driver",
            driver.display()
        );
    }
    let output = std::path::absolute(&args.output).with_context(|| format!("{}", args.output.display()))?;
    if let Some(dir) = output.parent() {
        if !dir.is_dir() {
            bail!("the folder of {} does not exist", output.display());
        }
    }

    let shim = super::libcuda_folder("recap-capture-", &interposer)?;
    let report_path = shim.path().join("report.json");
    let search = super::prepend(shim.path(), "LD_LIBRARY_PATH");
    let command_line = args.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
    let _ = std::fs::remove_file(&output);
    let mut cmd = Command::new(&args.command[0]);
    // Named to the dynamic linker by its own path, so that every way in finds the one file.
    let interposer_file = interposer.canonicalize().unwrap_or_else(|_| interposer.clone());
    let mut request = Request {
        report: Some(report_path.clone()),
        command: Some(command_line),
        record_effects: args.record_effects,
        place_regions: args.place_regions,
        driver: Some(driver.clone()),
        ..Request::new(range.clone(), output.clone())
    };
    match audit_library(&interposer) {
        Some(audit) => {
            // Driver loads by absolute path bypass LD_LIBRARY_PATH; the audit library sends
            // them to the interposer too (`native-host/audit`).
            let mut list = OsString::from(audit);
            if let Some(old) = std::env::var_os("LD_AUDIT").filter(|v| !v.is_empty()) {
                list.push(":");
                list.push(old);
            }
            cmd.env("LD_AUDIT", list);
            request.interposer = Some(interposer_file.clone());
            // NVRTC is sent to the interposer too, the file the program opened linked here.
            request.real_nvrtc = Some(shim.path().join("real-nvrtc.so"));
            // And nvJitLink (numba links its kernels with it through cuda.bindings).
            request.real_nvjitlink = Some(shim.path().join("real-nvjitlink.so"));
            // Every child inherits LD_AUDIT: a `ptxas` the program runs keeps its input PTX here.
            let ptxas_dir = shim.path().join("ptxas");
            std::fs::create_dir(&ptxas_dir).with_context(|| format!("creating {}", ptxas_dir.display()))?;
            request.ptxas_dir = Some(ptxas_dir);
        }
        None => eprintln!(
            "recap capture: {AUDIT_LIB} is not beside {}: a program that opens the driver by its absolute path \
             will bypass recap",
            interposer.display()
        ),
    }
    if let Range::Nvtx { .. } = range {
        // The interposer is also the NVTX injection library (`intercept/src/nvtx.rs`).
        if let Some(other) = std::env::var_os(NVTX_INJECTION) {
            eprintln!(
                "recap capture: {NVTX_INJECTION} named {}; recap takes its place for the nvtx range",
                PathBuf::from(other).display()
            );
        }
        cmd.env(NVTX_INJECTION, &interposer_file);
    }
    if !args.no_array_types {
        // Python imports the first `sitecustomize` on its path at start-up; recap's asks for the
        // arrays' types as the range ends, then imports the one it hides (`sitecustomize.py`).
        let folder = shim.path().join("python");
        std::fs::create_dir_all(&folder)
            .and_then(|()| std::fs::write(folder.join("sitecustomize.py"), SITECUSTOMIZE))
            .with_context(|| format!("writing {}", folder.display()))?;
        cmd.env("PYTHONPATH", super::prepend(&folder, "PYTHONPATH"));
    }
    if !args.keep_aslr {
        // This process's persona passes to the program it runs. Some sandboxes (a container's
        // seccomp profile) refuse the change: the capture goes on, randomised.
        if let Err(e) = recap::aslr::disable_for_exec() {
            eprintln!(
                "recap capture: address-space randomisation stays on ({e}): a GPU replay that places regions at \
                 their captured addresses may not get them"
            );
        }
    }
    request.write_env(&mut cmd);
    let status = cmd
        .args(&args.command[1..])
        .env("LD_LIBRARY_PATH", search)
        .status()
        .with_context(|| format!("running {}", args.command[0].to_string_lossy()))?;

    let report: Option<Report> = std::fs::read(&report_path).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let Some(mut report) = report else {
        let why = match range {
            Range::Profiler => "it never called cuProfilerStart (cudaProfilerStart, torch.cuda.profiler.start()); \
                                record with --range all or --range launches:SKIP:COUNT instead"
                .to_string(),
            Range::Launches { skip, .. } => format!("it made no more than {skip} kernel launches through the driver"),
            // `--range` never gives `in-process` (the control API's).
            Range::All | Range::InProcess => "it issued no work through the CUDA driver".to_string(),
            Range::Nvtx { .. } => format!(
                "it never opened the NVTX range {range} (NVTX v3 calls such as nvtxRangePushA, \
                 torch.cuda.nvtx.range_push, nvtx.annotate; NAME alone is the default domain, NAME@* any)"
            ),
        };
        let program = if status.success() { "the program".to_string() } else { format!("the program ({status})") };
        bail!("nothing was recorded: {program} ran, but {why}");
    };
    if let (Some(archive), true) = (&report.archive, args.infer_types_seconds > 0.0) {
        report.types = Some(infer_types(Path::new(archive), args.infer_types_seconds, args.json));
    }
    if let (Some(archive), Some(runs)) = (&report.archive, args.repeat_range) {
        if !args.json {
            eprintln!("recap capture: running the range {runs} more times on its device to measure its spread");
        }
        report.repeat = Some(super::repeat_range::measure(Path::new(archive), &driver, runs));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report);
    }
    if !status.success() {
        eprintln!("recap capture: the program exited with {status}");
    }
    match (&report.archive, &report.error) {
        (Some(_), _) if status.success() => Ok(ExitCode::SUCCESS),
        (Some(_), _) => Ok(ExitCode::from(status.code().unwrap_or(1).clamp(1, 255) as u8)),
        (None, Some(e)) => bail!("no archive was written: {e}"),
        (None, None) => bail!("no archive was written"),
    }
}

/// Adds typed layouts to the archive just written, in place (`infer_types::infer_file`). A
/// failure costs the archive nothing: it stays untyped and the report says why.
fn infer_types(archive: &Path, seconds: f64, quiet: bool) -> TypesReport {
    if !quiet {
        eprintln!("recap capture: learning element types from the archive's PTX (at most {seconds} s)");
    }
    let started = std::time::Instant::now();
    match super::infer_types::infer_file(archive, archive, ReplayOptions::default(), Some(seconds)) {
        Ok((report, _)) => report,
        Err(e) => TypesReport {
            error: Some(format!("{e:#}")),
            seconds: started.elapsed().as_secs_f64(),
            ..TypesReport::default()
        },
    }
}

fn print_summary(r: &Report) {
    let out = r.archive.as_deref().unwrap_or("(no archive)");
    println!("recap capture: {out} (range {}, ended at {}, sm_{})", r.range, r.ended_at, r.sm);
    let ops: Vec<String> = r.ops.iter().map(|(k, n)| format!("{n} {k}")).collect();
    println!("  ops: {}", if ops.is_empty() { "none".into() } else { ops.join(", ") });
    let with_ptx = r.kernels.iter().filter(|k| k.ptx).count();
    println!("  kernels: {} ({with_ptx} with PTX, {} machine code only)", r.kernels.len(), r.kernels.len() - with_ptx);
    for k in &r.kernels {
        let cubins: Vec<String> = k.cubins.iter().map(|sm| format!("sm_{sm}")).collect();
        println!(
            "    {} x{}: PTX {}; cubins [{}]; layout from {}",
            k.name,
            k.launches,
            k.ptx_from,
            cubins.join(", "),
            k.layout_from
        );
    }
    println!(
        "  regions: {}, {} snapshotted, {} uploaded",
        r.regions,
        human(r.bytes_snapshotted),
        human(r.upload_bytes)
    );
    if r.recorded_effects > 0 {
        println!(
            "  recorded effects: {} launches without PTX, {} written (a CPU replay applies them when the inputs match)",
            r.recorded_effects,
            human(r.effects_bytes)
        );
    }
    if let Some(why) = &r.placement {
        println!("  regions placed at their captured addresses on replay: {why}");
    }
    if r.audit {
        println!("  LD_AUDIT: a driver opened by its absolute path reaches recap too");
    }
    if !r.passed_through.is_empty() {
        let calls: Vec<String> = r.passed_through.iter().map(|(k, n)| format!("{k} x{n}")).collect();
        println!("  passed through unrecorded: {}", calls.join(", "));
    }
    for (what, n) in &r.incomplete {
        println!("  incomplete: {what}{}", if *n > 1 { format!(" (x{n})") } else { String::new() });
    }
    for note in &r.notes {
        println!("  note: {note}");
    }
    if let Some(types) = &r.types {
        super::infer_types::print_types_report(types);
    }
    if let Some(repeat) = &r.repeat {
        super::repeat_range::print_report(repeat);
    }
}

/// The interposer: `RECAP_INTERCEPT_LIB`, else `librecap_intercept.so` beside this binary.
fn interposer() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("RECAP_INTERCEPT_LIB") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("finding this executable")?;
    let lib = exe.with_file_name("librecap_intercept.so");
    if !lib.is_file() {
        bail!(
            "the interposer {} is missing: `cargo build --release -p recap-intercept` builds it into target/release; \
             put librecap_intercept.so beside this binary, or point RECAP_INTERCEPT_LIB at it",
            lib.display()
        );
    }
    Ok(lib)
}

/// The audit library beside the interposer (`RECAP_AUDIT_LIB` names another), if it is there.
pub(crate) fn audit_library(interposer: &Path) -> Option<PathBuf> {
    let lib = std::env::var_os("RECAP_AUDIT_LIB").map_or_else(|| interposer.with_file_name(AUDIT_LIB), PathBuf::from);
    lib.is_file().then(|| lib.canonicalize().unwrap_or(lib))
}

/// The system's CUDA driver (`recap::system_driver`).
fn system_driver() -> anyhow::Result<PathBuf> {
    recap::system_driver::system_driver()
        .context("no CUDA driver (libcuda.so.1) found on this machine; name one with --driver")
}
