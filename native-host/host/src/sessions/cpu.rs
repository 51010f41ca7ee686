//! The CPU device: replays on the PTX interpreter (`shared::replay`), all cores for one session
//! at a time, so sessions queue rather than share cores.

use std::sync::atomic::Ordering;
use std::time::Instant;

use shared::protocol::{CheckReport, OpTiming, SessionMessage};
use shared::replay::{CpuReplay, OpEvent, ReplayError, ReplayObserver, ReplayOptions};

use super::report::{check_report, kept_file, output_regions, summary, Keeper};
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

/// Per-op timings are sent for the first iterations and then every this-many, so that a long
/// session's log stays small while its charts stay meaningful.
const OP_TIMINGS_EVERY: u32 = 100;

/// Times top-level ops (a while/if includes its body).
#[derive(Default)]
pub struct OpTimer {
    open: Vec<Instant>,
    done: Vec<OpTiming>,
}

impl OpTimer {
    /// The timings of the ops finished since the last call.
    pub fn take(&mut self) -> Vec<OpTiming> {
        std::mem::take(&mut self.done)
    }
}

impl ReplayObserver for OpTimer {
    fn op_started(&mut self, _event: &OpEvent) {
        self.open.push(Instant::now());
    }

    fn op_finished(&mut self, event: &OpEvent) {
        let Some(start) = self.open.pop() else { return };
        if self.open.is_empty() {
            self.done.push(OpTiming {
                op: event.op,
                kind: event.kind.to_string(),
                name: event.name.map(str::to_string),
                time_ms: start.elapsed().as_secs_f64() * 1e3,
            });
        }
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

    fn run(&self, job: &Job<'_>, emit: &mut dyn FnMut(SessionMessage)) -> Result<Option<CheckReport>, RunError> {
        if let Some(compared) = job.run_compare(emit) {
            return compared;
        }
        let archive = job.archive;
        let failed = |e: ReplayError| {
            if job.cancel.load(Ordering::Relaxed) || matches!(e, ReplayError::Cancelled { .. }) {
                RunError::Cancelled
            } else {
                RunError::Failed(e.to_string())
            }
        };
        let options = ReplayOptions {
            cancel: Some(job.cancel.clone()),
            threads: 0,
            instruction_budget: job.budget,
            limits: job.limits,
            jit_dump: recap::jit_dump::from_env(),
            ..Default::default()
        };
        let mut replay = CpuReplay::new(archive, options).map_err(failed)?;
        let bound: Vec<(u32, &[u8])> = job
            .bindings
            .iter()
            .filter_map(|(name, bytes)| archive.binding(name).map(|b| (b.region, bytes.as_slice())))
            .collect();
        for index in 0..job.iterations {
            if job.cancel.load(Ordering::Relaxed) {
                return Err(RunError::Cancelled);
            }
            if index > 0 {
                replay.reset().map_err(failed)?;
            }
            for (region, bytes) in &bound {
                replay.set_region_bytes(*region, bytes).map_err(failed)?;
            }
            let mut timer = OpTimer::default();
            let started = Instant::now();
            replay.run_iteration(&mut timer).map_err(failed)?;
            let time_ms = started.elapsed().as_secs_f64() * 1e3;
            if index < OP_TIMINGS_EVERY || index % OP_TIMINGS_EVERY == 0 {
                emit(SessionMessage::OpTimings { iteration: index, ops: timer.done });
            }
            emit(SessionMessage::Iteration { index, time_ms });
        }
        let mut keeper = Keeper::new(job.keep_dir);
        for region in output_regions(archive) {
            let bytes = replay.region_bytes(region).map_err(failed)?;
            emit(summary(archive, region, &bytes));
            keeper.keep(&kept_file(region, None), &bytes).map_err(|e| RunError::Failed(format!("keeping region {region}: {e}")))?;
        }
        if !job.check {
            return Ok(None);
        }
        Ok(Some(check_report(&replay.check().map_err(failed)?)))
    }
}
