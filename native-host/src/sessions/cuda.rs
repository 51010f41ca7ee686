//! CUDA devices: each replays as one instantiated CUDA graph, one session at a time per GPU.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use shared::protocol::{CheckReport, OpTiming, SessionMessage};

use super::report::{check_report, output_regions, summary};
use super::{Engine, Job, RunError};
use crate::cuda::{CudaReplay, Device, Mode, ReplayOptions};

/// Every CUDA device the driver reports; none (and no error) on a machine without a driver.
pub fn engines() -> Vec<Arc<dyn Engine>> {
    let Ok(info) = crate::cuda::driver() else { return Vec::new() };
    let mut out: Vec<Arc<dyn Engine>> = Vec::new();
    for ordinal in 0..info.device_count {
        match Device::open(ordinal) {
            Ok(device) => out.push(Arc::new(CudaEngine { device })),
            Err(e) => tracing::warn!(ordinal, "CUDA device not usable: {e}"),
        }
    }
    out
}

pub struct CudaEngine {
    device: Arc<Device>,
}

fn failed(e: impl std::fmt::Display) -> RunError {
    RunError::Failed(e.to_string())
}

impl Engine for CudaEngine {
    fn id(&self) -> String {
        format!("cuda:{}", self.device.ordinal)
    }

    fn kind(&self) -> &'static str {
        "cuda"
    }

    fn name(&self) -> String {
        format!("{} (sm_{})", self.device.name, self.device.sm)
    }

    fn run(&self, job: &Job<'_>, emit: &mut dyn FnMut(SessionMessage)) -> Result<Option<CheckReport>, RunError> {
        let archive = job.archive;
        // Per-op times come from one stream-mode pass with an event after every op; the timed
        // iterations then run as the graph.
        let mut timing = CudaReplay::load(
            &self.device,
            archive,
            ReplayOptions { mode: Mode::Stream, op_timing: true, ..Default::default() },
        )
        .map_err(failed)?;
        for (name, bytes) in job.bindings {
            timing.set_input(name, bytes).map_err(failed)?;
        }
        timing.replay().map_err(failed)?;
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

        let mut replay = CudaReplay::load(&self.device, archive, ReplayOptions::default()).map_err(failed)?;
        for index in 0..job.iterations {
            if job.cancel.load(Ordering::Relaxed) {
                return Err(RunError::Cancelled);
            }
            if index > 0 {
                replay.upload_initial(archive).map_err(failed)?;
            }
            for (name, bytes) in job.bindings {
                replay.set_input(name, bytes).map_err(failed)?;
            }
            let took = replay.replay().map_err(failed)?;
            emit(SessionMessage::Iteration { index, time_ms: took.as_secs_f64() * 1e3 });
        }
        for region in output_regions(archive) {
            let bytes = replay.read_region(region).map_err(failed)?;
            emit(summary(archive, region, &bytes));
        }
        if !job.check {
            return Ok(None);
        }
        Ok(Some(check_report(&replay.check(archive).map_err(failed)?)))
    }
}
