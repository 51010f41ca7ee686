//! The CPU device: replays on the PTX interpreter, all cores for one session at a time.

use shared::protocol::{CheckReport, SessionMessage};

use super::{Engine, Job, RunError};

/// Replays on this machine's CPU cores.
pub struct CpuEngine {
    threads: usize,
}

impl CpuEngine {
    pub fn new() -> CpuEngine {
        CpuEngine { threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) }
    }
}

impl Default for CpuEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl Engine for CpuEngine {
    fn id(&self) -> String {
        "cpu".into()
    }

    fn kind(&self) -> &'static str {
        "cpu"
    }

    fn name(&self) -> String {
        format!("CPU ({} threads)", self.threads)
    }

    fn run(&self, _job: &Job<'_>, _emit: &mut dyn FnMut(SessionMessage)) -> Result<Option<CheckReport>, RunError> {
        Err(RunError::Failed("CPU replay is not part of this build yet".into()))
    }
}
