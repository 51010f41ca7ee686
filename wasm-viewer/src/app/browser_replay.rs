//! Replay in this browser: `shared::replay::CpuReplay` compiled to wasm, single-threaded, emitting
//! the same session messages the host streams, so the page draws both the same way. Each
//! iteration starts from the archive's initial state (restoring it is not timed), as on the host,
//! and the page gets control back between iterations so the charts move while it runs.

use std::cell::Cell;
use std::collections::BTreeMap;

use shared::protocol::{self as proto, SessionMessage, SessionState};
use shared::replay::{CpuReplay, OpEvent, ReplayLimits, ReplayObserver, ReplayOptions};
use wasm_bindgen::JsCast;

use super::dom::{now_ms, window};
use crate::model::LoadedArchive;

/// Times the top-level ops of one iteration (a while/if counts with its whole body).
struct TopLevelTimer {
    depth: usize,
    started: f64,
    ops: Vec<proto::OpTiming>,
}

impl ReplayObserver for TopLevelTimer {
    fn op_started(&mut self, _: &OpEvent) {
        if self.depth == 0 {
            self.started = now_ms();
        }
        self.depth += 1;
    }

    fn op_finished(&mut self, e: &OpEvent) {
        self.depth = self.depth.saturating_sub(1);
        if self.depth == 0 {
            self.ops.push(proto::OpTiming {
                op: e.op,
                kind: e.kind.to_string(),
                name: e.name.map(str::to_string),
                time_ms: now_ms() - self.started,
            });
        }
    }
}

/// Lets the browser paint and handle input before the next iteration.
async fn yield_to_page() {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let _ = window().set_timeout_with_callback_and_timeout_and_arguments_0(resolve.unchecked_ref(), 0);
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

fn summary(region: u32, name: &str, shape: &[u64], bytes: &[u8], dtype: shared::archive::DType) -> proto::RegionSummary {
    let s = shared::check::RegionSummary::of(bytes, dtype);
    proto::RegionSummary {
        region,
        name: name.to_string(),
        dtype: s.dtype.name().to_string(),
        shape: shape.to_vec(),
        count: s.elements,
        min: s.min,
        max: s.max,
        mean: s.mean,
        nan_count: s.nan_count,
        inf_count: s.inf_count,
        histogram: s.histogram,
        first: s.head,
        preview: proto::RegionPreview::of(bytes, dtype, shape),
    }
}

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

fn region_check(c: &shared::check::RegionCheck) -> proto::RegionCheck {
    let tolerance = match c.tolerance {
        shared::archive::Tolerance::Exact => "exact".to_string(),
        shared::archive::Tolerance::Close { rtol, atol } => format!("rtol {rtol:e} atol {atol:e}"),
        shared::archive::Tolerance::MismatchFraction { max_fraction } => format!("at most {:.4}% differing", max_fraction * 100.0),
    };
    proto::RegionCheck {
        region: c.region,
        name: c.name.clone(),
        passed: c.passed,
        tolerance,
        count: c.elements,
        mismatches: c.mismatches,
        max_abs_error: finite(c.max_abs_err),
        max_rel_error: finite(c.max_rel_err),
        first_mismatch: c.first_mismatch.map(|(index, got, want)| proto::Mismatch { index, got: finite(got), want: finite(want) }),
        detail: c.detail(),
    }
}

/// Most PTX instructions (and loop passes) one iteration may take in the page: the interpreter in
/// wasm runs some 10^8 a second, so an endless kernel or loop stops within a minute or so instead
/// of freezing the tab, which cannot be interrupted while the replay holds its only thread.
const BROWSER_BUDGET: u64 = 5_000_000_000;

/// Runs `iterations` replays, reporting through `emit`; returns every region's final bytes.
pub async fn run(
    loaded: &LoadedArchive,
    iterations: u32,
    check: bool,
    stop: &Cell<bool>,
    emit: &mut dyn FnMut(SessionMessage),
) -> Result<BTreeMap<u32, Vec<u8>>, String> {
    let a = loaded.archive();
    emit(SessionMessage::state(SessionState::Running));
    emit(SessionMessage::Started {
        device: "this browser (wasm, 1 thread)".into(),
        iterations,
        ops: a.op_count() as u64,
        regions: a.region_count() as u64,
    });
    yield_to_page().await;
    let t_start = now_ms();
    let options = ReplayOptions {
        threads: 1,
        instruction_budget: Some(BROWSER_BUDGET),
        limits: ReplayLimits { max_total_bytes: 1 << 30, ..ReplayLimits::DEFAULT },
        ..ReplayOptions::default()
    };
    let mut replay = CpuReplay::new(a, options).map_err(|e| e.to_string())?;
    for i in 0..iterations {
        if stop.get() {
            return Err("stopped".into());
        }
        if i > 0 {
            replay.reset().map_err(|e| e.to_string())?;
        }
        let mut timer = TopLevelTimer { depth: 0, started: 0.0, ops: Vec::new() };
        let t0 = now_ms();
        replay.run_iteration(&mut timer).map_err(|e| e.to_string())?;
        let ms = now_ms() - t0;
        emit(SessionMessage::OpTimings { iteration: i, ops: timer.ops });
        emit(SessionMessage::Iteration { index: i, time_ms: ms });
        yield_to_page().await;
    }
    let mut finals = BTreeMap::new();
    for r in a.regions() {
        if r.scratch {
            continue;
        }
        let bytes = replay.region_bytes(r.id).map_err(|e| e.to_string())?;
        emit(SessionMessage::Region { summary: summary(r.id, r.name, &r.shape, &bytes, r.dtype) });
        finals.insert(r.id, bytes);
    }
    let report = if check {
        let checks = replay.check().map_err(|e| e.to_string())?;
        let regions: Vec<proto::RegionCheck> = checks.iter().map(region_check).collect();
        Some(proto::CheckReport { passed: regions.iter().all(|r| r.passed), regions })
    } else {
        None
    };
    emit(SessionMessage::state(SessionState::Finished));
    emit(SessionMessage::Finished { check: report, total_ms: now_ms() - t_start });
    Ok(finals)
}
