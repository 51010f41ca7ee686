//! Sessions in worker processes: CUDA devices (each replays as one instantiated CUDA graph, one
//! session at a time per GPU) and the CPU.
//!
//! The key design decision: every session runs in a worker process of its own (`recap
//! session-worker`), never in the host. On a GPU, a kernel fault (an illegal address, a trap) leaves
//! the driver unusable for the rest of the process that made it, so in-process the first faulting
//! session would take the GPU away from every later one. On the CPU, an archive's regions are
//! allocated by the process that replays it, so a failed allocation, or memory the kernel's
//! out-of-memory killer reclaims, ends that process: in the worker it ends the session, not the
//! host, and the replay's memory goes back to the system when the worker exits. The worker replays
//! one session and writes its messages as JSON lines on stdout; the host relays them, kills the
//! worker on cancel (or when its time is up), and a worker that dies leaves the device as usable as
//! before.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shared::archive::Archive;
use shared::protocol::{CheckReport, OpTiming, SessionMessage};

use super::{Backend, CompareSides, CpuBackend, Job, RunError};
use recap::cuda::{locate_fault, CudaReplay, Device, Mode, ReplayOptions};

/// Every CUDA device the driver reports, each replaying in worker processes started from `exe`;
/// none (and no error) on a machine without a driver. The host opens each device once to learn its
/// name and lets it go, so it holds no CUDA context of its own.
pub fn backends(exe: &std::path::Path) -> Vec<Arc<dyn Backend>> {
    let Ok(info) = recap::cuda::driver() else { return Vec::new() };
    let mut out: Vec<Arc<dyn Backend>> = Vec::new();
    for ordinal in 0..info.device_count {
        match Device::open(ordinal) {
            Ok(device) => out.push(Arc::new(WorkerBackend {
                device: WorkerDevice::Cuda(ordinal),
                name: format!("{} (sm_{})", device.name, device.sm),
                exe: exe.to_path_buf(),
            })),
            Err(e) => tracing::warn!(ordinal, "CUDA device not usable: {e}"),
        }
    }
    out
}

/// Where a worker replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerDevice {
    /// This machine's CPU cores, on `shared::replay`.
    Cpu,
    /// The CUDA device of this ordinal.
    Cuda(usize),
}

/// What the host sends a worker on its stdin (one JSON document).
#[derive(Debug, Serialize, Deserialize)]
pub struct WorkerJob {
    /// The stored archive file.
    pub archive: PathBuf,
    pub device: WorkerDevice,
    pub iterations: u32,
    pub check: bool,
    /// Replacement initial bytes of named bindings, base64.
    pub bindings: Vec<(String, String)>,
    /// Most PTX instructions one CPU iteration may execute.
    #[serde(default)]
    pub budget: Option<u64>,
    /// What the archive may make a CPU replay allocate and launch (default: the defaults).
    #[serde(default)]
    pub limits: shared::replay::ReplayLimits,
    /// Set for a `compare` session.
    #[serde(default)]
    pub compare: Option<CompareSides>,
    /// Where to keep region contents for download.
    #[serde(default)]
    pub keep_dir: Option<PathBuf>,
    /// A CUDA session's submission mode.
    #[serde(default)]
    pub cuda_mode: Option<String>,
    /// Whole replays the check judges together.
    #[serde(default = "one")]
    pub replays: u32,
}

fn one() -> u32 {
    1
}

/// What a worker writes on its stdout, one JSON document per line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "worker", rename_all = "snake_case")]
pub enum WorkerLine {
    /// A session message, relayed as it is.
    Message { message: Box<SessionMessage> },
    /// The replay finished; the last line.
    Done { check: Option<CheckReport> },
    /// The replay failed; the last line.
    Failed { error: String },
}

/// Replays the sessions of one device, each in a worker process.
pub struct WorkerBackend {
    device: WorkerDevice,
    name: String,
    /// The `recap` executable to start workers from.
    exe: PathBuf,
}

impl WorkerBackend {
    /// The CPU, replaying in workers started from `exe` (the host's own `recap` executable).
    pub fn cpu(exe: &std::path::Path) -> WorkerBackend {
        WorkerBackend { device: WorkerDevice::Cpu, name: CpuBackend::new().name(), exe: exe.to_path_buf() }
    }
}

/// What the host could not make of a worker's output.
#[derive(Debug, thiserror::Error)]
enum WorkerOutputError {
    #[error("the replay worker wrote a line that is not a message ({error}): {line}")]
    NotAMessage { error: serde_json::Error, line: String },
    #[error("reading the replay worker's output: {0}")]
    Read(std::io::Error),
}

/// Bytes of a worker's stderr kept to explain its death.
const STDERR_TAIL: usize = 4096;

impl Backend for WorkerBackend {
    fn id(&self) -> String {
        match self.device {
            WorkerDevice::Cpu => "cpu".into(),
            WorkerDevice::Cuda(ordinal) => format!("cuda:{ordinal}"),
        }
    }

    fn kind(&self) -> &'static str {
        match self.device {
            WorkerDevice::Cpu => "cpu",
            WorkerDevice::Cuda(_) => "cuda",
        }
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn run(&self, job: &Job<'_>, emit: &mut dyn FnMut(SessionMessage)) -> Result<Option<CheckReport>, RunError> {
        use base64::Engine as _;
        let id = self.id();
        let request = WorkerJob {
            archive: job.archive_path.to_path_buf(),
            device: self.device,
            iterations: job.iterations,
            check: job.check,
            budget: job.budget,
            limits: job.limits,
            compare: job.compare.cloned(),
            keep_dir: job.keep_dir.map(|d| d.to_path_buf()),
            cuda_mode: job.cuda_mode.map(str::to_string),
            replays: job.replays,
            bindings: job
                .bindings
                .iter()
                .map(|(name, bytes)| (name.clone(), base64::engine::general_purpose::STANDARD.encode(bytes)))
                .collect(),
        };
        let mut worker = Command::new(&self.exe);
        if shared::placement::asked(job.archive) == Ok(shared::placement::Placement::Captured) {
            // The captured ranges are free only in a process laid out without randomisation.
            recap::aslr::disable_in(&mut worker);
        }
        let mut child = worker
            .arg("session-worker")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                RunError::Failed(format!("starting the replay worker for {id} ({}): {e}", self.exe.display()))
            })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        // The job can be large (bindings): written from its own thread so a worker that dies early
        // cannot block the host.
        let writer = std::thread::spawn(move || {
            let mut stdin = stdin;
            serde_json::to_writer(&mut stdin, &request).map_err(std::io::Error::from)?;
            stdin.flush()
        });
        let stderr_tail = std::thread::spawn(move || {
            let mut tail = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                }
            }
            String::from_utf8_lossy(&tail).trim().to_string()
        });
        let (tx, rx) = std::sync::mpsc::channel::<Result<WorkerLine, WorkerOutputError>>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let parsed = match line {
                    Ok(line) => serde_json::from_str::<WorkerLine>(&line).map_err(|error| {
                        WorkerOutputError::NotAMessage { error, line: line.chars().take(200).collect() }
                    }),
                    Err(error) => Err(WorkerOutputError::Read(error)),
                };
                let stop = parsed.is_err();
                if tx.send(parsed).is_err() || stop {
                    break;
                }
            }
        });
        let mut outcome: Option<Result<Option<CheckReport>, RunError>> = None;
        loop {
            if job.cancel.load(Ordering::Relaxed) {
                let _ = child.kill();
                outcome = Some(Err(RunError::Cancelled));
                break;
            }
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Ok(WorkerLine::Message { message })) => emit(*message),
                Ok(Ok(WorkerLine::Done { check })) => outcome = Some(Ok(check)),
                Ok(Ok(WorkerLine::Failed { error })) => outcome = Some(Err(RunError::Failed(error))),
                Ok(Err(e)) => {
                    let _ = child.kill();
                    outcome = Some(Err(RunError::Failed(e.to_string())));
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let status = child.wait();
        let _ = reader.join();
        let _ = writer.join();
        let tail = stderr_tail.join().unwrap_or_default();
        outcome.unwrap_or_else(|| {
            let status = status.map(|s| s.to_string()).unwrap_or_else(|e| format!("status unknown: {e}"));
            let tail = if tail.is_empty() { String::new() } else { format!("; its last output: {tail}") };
            Err(RunError::Failed(format!(
                "the replay worker for {id} ended ({status}) before the session finished{tail}"
            )))
        })
    }
}

/// `recap session-worker`: reads a [`WorkerJob`] from `input`, replays it, and writes
/// [`WorkerLine`]s to `output`. Returns an error only when `output` cannot be written (the host
/// is gone).
pub fn run_worker(input: impl Read, output: impl Write) -> std::io::Result<()> {
    let mut output = std::io::LineWriter::new(output);
    let mut send = |line: &WorkerLine| -> std::io::Result<()> {
        serde_json::to_writer(&mut output, line).map_err(std::io::Error::from)?;
        output.write_all(b"\n")?;
        output.flush()
    };
    let last = match worker_replay(input, &mut |message| send(&WorkerLine::Message { message: Box::new(message) })) {
        Ok(check) => WorkerLine::Done { check },
        Err(WorkerError::Output(e)) => return Err(e),
        Err(WorkerError::Failed(error)) => WorkerLine::Failed { error },
    };
    send(&last)
}

enum WorkerError {
    Output(std::io::Error),
    Failed(String),
}

fn worker_replay(
    input: impl Read,
    send: &mut dyn FnMut(SessionMessage) -> std::io::Result<()>,
) -> Result<Option<CheckReport>, WorkerError> {
    use base64::Engine as _;
    let failed = |e: String| WorkerError::Failed(e);
    let job: WorkerJob = serde_json::from_reader(input).map_err(|e| failed(format!("reading the replay job: {e}")))?;
    let map = recap::mapped::MappedFile::open(&job.archive)
        .map_err(|e| failed(format!("opening {}: {e}", job.archive.display())))?;
    let archive = Archive::open(&map).map_err(|e| failed(format!("reading {}: {e}", job.archive.display())))?;
    let mut bindings = Vec::with_capacity(job.bindings.len());
    for (name, text) in job.bindings {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| failed(format!("binding {name:?} is not valid base64: {e}")))?;
        bindings.push((name, bytes));
    }
    // The host ends a worker by killing it: nothing here sets the flag.
    let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let run = Job {
        archive: &archive,
        archive_path: &job.archive,
        iterations: job.iterations,
        check: job.check,
        bindings: &bindings,
        cancel: &cancel,
        budget: job.budget,
        limits: job.limits,
        compare: job.compare.as_ref(),
        keep_dir: job.keep_dir.as_deref(),
        cuda_mode: job.cuda_mode.as_deref(),
        replays: job.replays,
    };
    let mut output_error = None;
    let mut emit = |message| {
        if output_error.is_none() {
            output_error = send(message).err();
        }
    };
    let result = match (run.run_compare(&mut emit), job.device) {
        (Some(compared), _) => compared,
        (None, WorkerDevice::Cpu) => CpuBackend::new().run(&run, &mut emit),
        (None, WorkerDevice::Cuda(ordinal)) => match Device::open(ordinal) {
            Ok(device) => replay_here(&device, &map, &run, &mut emit),
            Err(e) => Err(RunError::Failed(e.to_string())),
        },
    };
    if let Some(e) = output_error {
        return Err(WorkerError::Output(e));
    }
    result.map_err(|e| failed(e.to_string()))
}

fn failed(e: impl std::fmt::Display) -> RunError {
    RunError::Failed(e.to_string())
}

/// Replays `job` in this process (what a worker runs). `bytes` are the archive's bytes, for naming
/// the op behind a fault.
fn replay_here(
    device: &Arc<Device>,
    bytes: &[u8],
    job: &Job<'_>,
    emit: &mut dyn FnMut(SessionMessage),
) -> Result<Option<CheckReport>, RunError> {
    let archive = job.archive;
    // A fault found without its op (graph mode, or a wait after several ops) is located by
    // replaying op by op, in a child process when the driver keeps the fault.
    let fault = |e: recap::cuda::CudaError| failed(locate_fault(device, bytes, e, 1));
    // Per-op times come from one stream-mode pass with an event after every op; the timed
    // iterations then run as the graph.
    let mut timing =
        CudaReplay::load(device, archive, ReplayOptions { mode: Mode::Stream, op_timing: true, ..Default::default() })
            .map_err(failed)?;
    for (name, bytes) in job.bindings {
        timing.set_input(name, bytes).map_err(failed)?;
    }
    timing.replay().map_err(fault)?;
    let ops = timing
        .op_times()
        .map_err(failed)?
        .into_iter()
        .map(|t| OpTiming {
            op: t.op,
            kind: t.label.split(' ').next().unwrap_or("").to_string(),
            name: t.label.split_once(' ').map(|(_, rest)| rest.to_string()),
            time_ms: t.total.as_secs_f64() * 1e3,
        })
        .collect();
    drop(timing);
    emit(SessionMessage::OpTimings { iteration: 0, ops });

    // The host checked the name against `shared::protocol::CUDA_MODES` when it took the session.
    let options = job.cuda_mode.and_then(recap::device::cuda_mode).unwrap_or_default();
    let mut replay = CudaReplay::load(device, archive, options).map_err(failed)?;
    for warning in replay.warnings() {
        tracing::warn!("{warning}");
    }
    // The replay names a fault's op itself ([`recap::cuda::locate_fault`]).
    job.run_replay(&mut replay, emit, failed)
}
