//! Replay in this browser: `shared::replay::CpuReplay` compiled to wasm, single-threaded, driven
//! by the same [`Session`] as the host's sessions and `recap replay`, so it emits the same
//! messages and summarises the same regions. Each iteration starts from the archive's initial
//! state (restoring it is not timed), and the page gets control back between iterations so the
//! charts move while it runs.

use std::cell::Cell;
use std::collections::BTreeMap;

use shared::protocol::{SessionMessage, SessionState};
use shared::replay::{Clock, CpuReplay, NoObserver, ReplayLimits, ReplayOptions, Session, SessionError};
use wasm_bindgen::JsCast;

use super::dom::{now_ms, window};
use crate::model::LoadedArchive;

/// The page's clock: `performance.now()`.
struct PageClock;

impl Clock for PageClock {
    fn now_ms(&self) -> f64 {
        now_ms()
    }
}

/// Lets the browser paint and handle input before the next iteration.
async fn yield_to_page() {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let _ = window().set_timeout_with_callback_and_timeout_and_arguments_0(resolve.unchecked_ref(), 0);
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

/// Most PTX instructions (and loop passes) one iteration may take in the page: the interpreter in
/// wasm runs some 10^8 a second, so an endless kernel or loop stops within a minute or so instead
/// of freezing the tab, which cannot be interrupted while the replay holds its only thread.
const BROWSER_BUDGET: u64 = 5_000_000_000;

/// Runs `iterations` replays, reporting through `emit`; returns the final bytes of the regions
/// it summarised.
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
    let mut session = Session::new(a, iterations, &[]);
    while !session.done() {
        if stop.get() {
            return Err("stopped".into());
        }
        session.step(&mut replay, &PageClock, &mut NoObserver, emit).map_err(|e| e.to_string())?;
        yield_to_page().await;
    }
    let mut finals = BTreeMap::new();
    let mut keep = |region, bytes: &[u8]| {
        finals.insert(region, bytes.to_vec());
        Ok(())
    };
    let report = session.finish(&mut replay, check, emit, &mut keep).map_err(|e: SessionError<_>| e.to_string())?;
    emit(SessionMessage::state(SessionState::Finished));
    emit(SessionMessage::Finished { check: report, total_ms: now_ms() - t_start });
    Ok(finals)
}
