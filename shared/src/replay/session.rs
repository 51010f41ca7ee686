//! One replay session, the same wherever it runs: the host's CPU and CUDA sessions, `recap
//! replay` and the replay in the browser all drive their engine through [`Replayer`] and
//! [`Session`], and report through [`crate::report`].
//!
//! A session is: for each iteration, restore the initial state (from the second on), write the
//! bound inputs, run every op once and time it, emit the iteration (and the per-op times of the
//! first iterations, then every hundredth); at the end, summarise the output regions and judge
//! the check. The clock is passed in: the browser has no `Instant`, and an engine that measures
//! its own device time (a GPU) reports that instead.

use crate::archive::{Archive, RegionId};
use crate::check::{checked_regions, judge, CheckOptions, Verdict};
use crate::protocol::{CheckReport, OpTiming, SessionMessage};
use crate::report::{output_regions, region_summary};

use super::{IterationStats, OpEvent, RegionContents, ReplayObserver};

/// Per-op times are reported for the first iterations and then every this-many, so that a long
/// session's log stays small while its charts stay meaningful.
pub const OP_TIMINGS_EVERY: u32 = 100;

/// Milliseconds from any fixed start: `Instant` natively, `performance.now()` in a browser.
pub trait Clock {
    fn now_ms(&self) -> f64;
}

/// What one run of every op did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Ran {
    pub stats: IterationStats,
    /// The engine's own measure of the iteration (a GPU's device time between events), where it
    /// has one; otherwise the session's clock times it.
    pub device_ms: Option<f64>,
}

/// The verbs every replay engine shares: the CPU replay ([`super::CpuReplay`]) and the CUDA
/// replay implement it. `archive` is always the archive the engine was loaded from.
pub trait Replayer {
    type Error: std::fmt::Display;
    /// Restores every region's initial contents (what the archive starts from).
    fn restore_initial(&mut self, archive: &Archive<'_>) -> Result<(), Self::Error>;
    /// Replaces a whole region's contents (a bound input), for the iteration that follows.
    fn write_region(&mut self, region: RegionId, bytes: &[u8]) -> Result<(), Self::Error>;
    /// Runs every op once. `observer` sees each op start and finish where the engine comes back
    /// between ops (the CPU does; a GPU graph runs without coming back).
    fn run_iteration(&mut self, archive: &Archive<'_>, observer: &mut dyn ReplayObserver) -> Result<Ran, Self::Error>;
    /// A region's current contents.
    fn read_region(&mut self, region: RegionId) -> Result<Vec<u8>, Self::Error>;
    /// Runs the blocks of every launch from now on in an order shuffled by `seed` (`None`: the
    /// engine's own order), where the engine chooses the order (the CPU does; a GPU schedules
    /// blocks itself, so it ignores this): how replays of a program whose result depends on the
    /// order differ from each other on the CPU as they do on a GPU.
    fn set_block_order(&mut self, seed: Option<u64>) {
        let _ = seed;
    }
}

/// How a session checks its final state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckRequest {
    /// Tolerances set by hand.
    pub options: CheckOptions,
    /// Whole replays made in all (at least 1): with more than one, the stretches where they
    /// disagree with each other are nondeterministic and judged with their spread (`shared::check`).
    pub replays: u32,
}

impl CheckRequest {
    /// One replay, the archive's tolerances.
    pub fn plain() -> CheckRequest {
        CheckRequest { options: CheckOptions::default(), replays: 1 }
    }
}

/// Judges `replayer`'s current state against the archive's expected state: [`judge`] over the
/// replayer's regions.
pub fn check_state<R: Replayer + ?Sized>(
    replayer: &mut R,
    archive: &Archive<'_>,
    options: &CheckOptions,
    others: &[Vec<(RegionId, Vec<u8>)>],
) -> Result<Verdict, R::Error> {
    judge(archive, options, &mut |r| replayer.read_region(r), others)
}

/// Times the top-level ops of one iteration (a while/if counts with its whole body).
pub struct OpTimer<'c> {
    clock: &'c dyn Clock,
    depth: usize,
    started: f64,
    ops: Vec<OpTiming>,
}

impl<'c> OpTimer<'c> {
    pub fn new(clock: &'c dyn Clock) -> Self {
        OpTimer { clock, depth: 0, started: 0.0, ops: Vec::new() }
    }

    /// The timings of the ops finished since the last call.
    pub fn take(&mut self) -> Vec<OpTiming> {
        std::mem::take(&mut self.ops)
    }
}

impl ReplayObserver for OpTimer<'_> {
    fn op_started(&mut self, _: &OpEvent) {
        if self.depth == 0 {
            self.started = self.clock.now_ms();
        }
        self.depth += 1;
    }

    fn op_finished(&mut self, e: &OpEvent) {
        self.depth = self.depth.saturating_sub(1);
        if self.depth == 0 {
            self.ops.push(OpTiming {
                op: e.op,
                kind: e.kind.to_string(),
                name: e.name.map(str::to_string),
                time_ms: self.clock.now_ms() - self.started,
            });
        }
    }
}

/// Both observers see every op.
struct Both<'x, 'y>(&'x mut dyn ReplayObserver, &'y mut dyn ReplayObserver);

impl ReplayObserver for Both<'_, '_> {
    fn op_started(&mut self, e: &OpEvent) {
        self.0.op_started(e);
        self.1.op_started(e);
    }
    fn op_finished(&mut self, e: &OpEvent) {
        self.0.op_finished(e);
        self.1.op_finished(e);
    }
}

/// One iteration as [`Session::step`] ran it.
#[derive(Clone, Debug, PartialEq)]
pub struct Iteration {
    /// From 0.
    pub index: u32,
    pub time_ms: f64,
    pub stats: IterationStats,
    /// Top-level ops and their times, where the engine reports ops.
    pub ops: Vec<OpTiming>,
}

/// Keeps a region's final contents (for download); the keeper's error when it cannot.
pub type KeepRegion<'k> = dyn FnMut(RegionId, &[u8]) -> Result<(), KeepError> + 'k;

/// Why a keeper ([`KeepRegion`]) could not keep a region: its own error, whatever its type (a file
/// the host could not write, for one), kept as the source.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct KeepError(Box<dyn std::error::Error + Send + Sync>);

impl KeepError {
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> KeepError {
        KeepError(error.into())
    }
}

/// Why a session stopped early.
#[derive(Debug)]
pub enum SessionError<E> {
    Cancelled,
    Replay(E),
    /// A region's final contents could not be kept.
    Keep {
        region: RegionId,
        error: KeepError,
    },
}

impl<E: std::fmt::Display> std::fmt::Display for SessionError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::Cancelled => write!(f, "cancelled"),
            SessionError::Replay(e) => write!(f, "{e}"),
            SessionError::Keep { region, error } => write!(f, "keeping region {region}: {error}"),
        }
    }
}

/// A session in progress: [`Session::step`] runs one iteration at a time (so a browser can paint
/// between them), [`Session::finish`] reports the end. [`run_session`] does both in one call.
pub struct Session<'s, 'a> {
    archive: &'s Archive<'a>,
    iterations: u32,
    inputs: &'s [(RegionId, Vec<u8>)],
    next: u32,
}

impl<'s, 'a> Session<'s, 'a> {
    /// `iterations` runs of `archive`, each with `inputs` written into their regions first.
    pub fn new(archive: &'s Archive<'a>, iterations: u32, inputs: &'s [(RegionId, Vec<u8>)]) -> Self {
        Session { archive, iterations, inputs, next: 0 }
    }

    /// Whether every iteration has run.
    pub fn done(&self) -> bool {
        self.next >= self.iterations
    }

    /// Runs the next iteration: restore (from the second on), write the inputs, run and time it,
    /// and emit it (with its per-op times for the first [`OP_TIMINGS_EVERY`] iterations and every
    /// [`OP_TIMINGS_EVERY`]th after). `observer` sees every op as well (a progress bar).
    pub fn step<R: Replayer + ?Sized>(
        &mut self,
        replayer: &mut R,
        clock: &dyn Clock,
        observer: &mut dyn ReplayObserver,
        emit: &mut dyn FnMut(SessionMessage),
    ) -> Result<Iteration, R::Error> {
        let index = self.next;
        if index > 0 {
            replayer.restore_initial(self.archive)?;
        }
        for (region, bytes) in self.inputs {
            replayer.write_region(*region, bytes)?;
        }
        let mut timer = OpTimer::new(clock);
        let started = clock.now_ms();
        let ran = replayer.run_iteration(self.archive, &mut Both(&mut timer, observer))?;
        let time_ms = ran.device_ms.unwrap_or_else(|| clock.now_ms() - started);
        self.next += 1;
        let ops = timer.take();
        if !ops.is_empty() && (index < OP_TIMINGS_EVERY || index.is_multiple_of(OP_TIMINGS_EVERY)) {
            emit(SessionMessage::OpTimings { iteration: index, ops: ops.clone() });
        }
        emit(SessionMessage::Iteration { index, time_ms });
        Ok(Iteration { index, time_ms, stats: ran.stats, ops })
    }

    /// Emits a summary of every output region ([`crate::report::output_regions`]), handing its
    /// bytes to `keep` too, then judges the check when asked (with the archive's tolerances).
    pub fn finish<R: Replayer + ?Sized>(
        &self,
        replayer: &mut R,
        check: bool,
        emit: &mut dyn FnMut(SessionMessage),
        keep: &mut KeepRegion,
    ) -> Result<Option<CheckReport>, SessionError<R::Error>> {
        let request = check.then(CheckRequest::plain);
        self.finish_checked(replayer, request.as_ref(), &[], emit, keep)
    }

    /// [`Session::finish`] with the check's tolerances and the final states of more replays
    /// ([`Session::replay_again`]) to measure the spread against.
    pub fn finish_checked<R: Replayer + ?Sized>(
        &self,
        replayer: &mut R,
        check: Option<&CheckRequest>,
        others: &[Vec<(RegionId, Vec<u8>)>],
        emit: &mut dyn FnMut(SessionMessage),
        keep: &mut KeepRegion,
    ) -> Result<Option<CheckReport>, SessionError<R::Error>> {
        for region in output_regions(self.archive) {
            let bytes = replayer.read_region(region).map_err(SessionError::Replay)?;
            emit(region_summary(self.archive, region, &bytes));
            keep(region, &bytes).map_err(|error| SessionError::Keep { region, error })?;
        }
        let Some(check) = check else { return Ok(None) };
        let verdict = check_state(replayer, self.archive, &check.options, others).map_err(SessionError::Replay)?;
        Ok(Some(CheckReport::of(&verdict)))
    }

    /// Makes `runs` more whole replays of the session (restore, inputs, every iteration), the
    /// k-th with its blocks in the order of seed `k + 2` where the engine chooses the order, and
    /// gives the final bytes of every region the check reads from each; then restores the
    /// initial state and sets seed 1 for the replay the session itself makes. Called before the
    /// first [`Session::step`].
    pub fn replay_again<R: Replayer + ?Sized>(
        &self,
        replayer: &mut R,
        runs: u32,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<RegionContents>, SessionError<R::Error>> {
        let regions = checked_regions(self.archive);
        let mut out = Vec::new();
        for k in 0..runs {
            replayer.set_block_order(Some(k as u64 + 2));
            for i in 0..self.iterations {
                if cancelled() {
                    return Err(SessionError::Cancelled);
                }
                if k > 0 || i > 0 {
                    replayer.restore_initial(self.archive).map_err(SessionError::Replay)?;
                }
                for (region, bytes) in self.inputs {
                    replayer.write_region(*region, bytes).map_err(SessionError::Replay)?;
                }
                replayer.run_iteration(self.archive, &mut super::NoObserver).map_err(SessionError::Replay)?;
            }
            let mut finals = Vec::with_capacity(regions.len());
            for &r in &regions {
                finals.push((r, replayer.read_region(r).map_err(SessionError::Replay)?));
            }
            out.push(finals);
        }
        if runs > 0 {
            replayer.restore_initial(self.archive).map_err(SessionError::Replay)?;
            replayer.set_block_order(Some(1));
        }
        Ok(out)
    }
}

/// Runs a whole session: every iteration (stopping between two when `cancelled` says so), then
/// the summaries and the check.
#[expect(clippy::too_many_arguments, reason = "a whole session's inputs, each from a different place in the caller")]
pub fn run_session<R: Replayer + ?Sized>(
    replayer: &mut R,
    archive: &Archive<'_>,
    iterations: u32,
    inputs: &[(RegionId, Vec<u8>)],
    check: Option<&CheckRequest>,
    clock: &dyn Clock,
    cancelled: &dyn Fn() -> bool,
    emit: &mut dyn FnMut(SessionMessage),
    keep: &mut KeepRegion,
) -> Result<Option<CheckReport>, SessionError<R::Error>> {
    let mut session = Session::new(archive, iterations, inputs);
    let again = check.map_or(0, |c| c.replays.saturating_sub(1));
    let others = session.replay_again(replayer, again, cancelled)?;
    while !session.done() {
        if cancelled() {
            return Err(SessionError::Cancelled);
        }
        session.step(replayer, clock, &mut super::NoObserver, emit).map_err(SessionError::Replay)?;
    }
    session.finish_checked(replayer, check, &others, emit, keep)
}
