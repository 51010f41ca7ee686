//! The CPU device: replays on the PTX interpreter (`shared::replay`), all cores for one session
//! at a time, so sessions queue rather than share cores.

use std::sync::atomic::Ordering;

use recap::device::{DeviceError, DeviceReplay, DeviceSpec, OpenOptions};
use shared::protocol::{CheckReport, SessionMessage};
use shared::replay::{ReplayError, ReplayOptions};

use super::{Backend, Job, RunError};

/// Replays on this machine's CPU cores.
pub struct CpuBackend {
    threads: usize,
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        CpuBackend { threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) }
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for CpuBackend {
    fn id(&self) -> String {
        "cpu".into()
    }

    fn kind(&self) -> &'static str {
        "cpu"
    }

    fn name(&self) -> String {
        format!("CPU ({} threads)", self.threads)
    }

    fn run(&self, job: &Job<'_>, emit: &mut dyn FnMut(SessionMessage)) -> Result<Option<CheckReport>, RunError> {
        if let Some(compared) = job.run_compare(emit) {
            return compared;
        }
        let archive = job.archive;
        let cancelled = || job.cancel.load(Ordering::Relaxed);
        let failed = |e: DeviceError| {
            if cancelled() || matches!(e, DeviceError::Cpu(ReplayError::Cancelled { .. })) {
                RunError::Cancelled
            } else {
                RunError::Failed(e.to_string())
            }
        };
        let cpu = ReplayOptions {
            cancel: Some(job.cancel.clone()),
            threads: 0,
            instruction_budget: job.budget,
            limits: job.limits,
            jit_dump: recap::jit_dump::from_env(),
            ..Default::default()
        };
        let options = OpenOptions { cpu, ..Default::default() };
        let mut replay = DeviceReplay::open(archive, DeviceSpec::Cpu(None), options).map_err(failed)?;
        job.run_replay(&mut replay, emit, failed)
    }
}
