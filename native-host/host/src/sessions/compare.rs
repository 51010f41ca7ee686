//! `compare` sessions: one iteration on two sides, op by op (`recap::compare`), streamed as
//! [`SessionMessage::Compared`] batches, a [`SessionMessage::Parted`] for every op where the sides
//! part and a [`SessionMessage::Compare`] verdict.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shared::archive::Archive;
use shared::compare::{Divergence, Judged};
use shared::protocol::{
    CheckReport, CompareVerdict, ControlParting, OpAgreement, SessionMessage, MAX_COMPARED_REPORTED,
};

use super::kept::{kept_file, Keeper};
use super::{Job, RunError};
use recap::compare::{compare, CompareObserver, CompareOptions};
use recap::device::DeviceSpec;
use shared::report::parting;

/// The two sides of a comparison, as the host names them (`interp`, `jit`, `cuda:0`, ...).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompareSides {
    pub a: String,
    pub b: String,
    /// Go on past the first op that differs.
    pub all: bool,
    /// The archive file side `b` replays, when not the session's own.
    #[serde(default)]
    pub against: Option<std::path::PathBuf>,
}

/// Agreements are sent at least this often, or when this many have gathered.
const BATCH_EVERY: Duration = Duration::from_millis(200);
const BATCH_OPS: usize = 256;

struct Streamer<'a, 'e> {
    archive: &'a Archive<'a>,
    emit: &'e mut dyn FnMut(SessionMessage),
    batch: Vec<OpAgreement>,
    reported: u64,
    sent_at: Instant,
    keeper: Keeper,
    keep_error: Option<std::io::Error>,
}

impl Streamer<'_, '_> {
    fn flush(&mut self) {
        if !self.batch.is_empty() {
            (self.emit)(SessionMessage::Compared { ops: std::mem::take(&mut self.batch) });
        }
        self.sent_at = Instant::now();
    }
}

impl CompareObserver for Streamer<'_, '_> {
    fn judged(&mut self, j: &Judged) {
        if self.reported < MAX_COMPARED_REPORTED || !j.agree {
            self.batch.push(OpAgreement { op: j.op, pass: j.pass, agree: j.agree, within: j.within });
            self.reported += 1;
        }
        if self.batch.len() >= BATCH_OPS || self.sent_at.elapsed() >= BATCH_EVERY {
            self.flush();
        }
    }

    fn parted(&mut self, d: &Divergence, a: &[u8], b: &[u8]) {
        // The op's agreement goes out before its parting.
        self.flush();
        (self.emit)(parting(self.archive, d, a, b));
        for (side, bytes) in [("a", a), ("b", b)] {
            if let Err(e) = self.keeper.keep(&kept_file(d.region_id, Some(side)), bytes) {
                self.keep_error.get_or_insert(e);
            }
        }
    }
}

/// Runs a comparison session.
pub fn run(
    job: &Job<'_>,
    sides: &CompareSides,
    emit: &mut dyn FnMut(SessionMessage),
) -> Result<Option<CheckReport>, RunError> {
    let side = |s: &str| {
        s.parse::<DeviceSpec>()
            .map(|d| d.engine_or(shared::ptx::Engine::Jit))
            .map_err(|e| RunError::Failed(e.to_string()))
    };
    let (a, b) = (side(&sides.a)?, side(&sides.b)?);
    let options = CompareOptions {
        budget: job.budget,
        limits: job.limits,
        all: sides.all,
        cancel: Some(job.cancel.clone()),
        mma_model: None,
    };
    let mut streamer = Streamer {
        archive: job.archive,
        emit,
        batch: Vec::new(),
        reported: 0,
        sent_at: Instant::now(),
        keeper: Keeper::new(job.keep_dir),
        keep_error: None,
    };
    let other_map = match &sides.against {
        Some(path) => Some(
            recap::mapped::MappedFile::open(path)
                .map_err(|e| RunError::Failed(format!("opening {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let other = match &other_map {
        Some(map) => {
            let other =
                Archive::open(map).map_err(|e| RunError::Failed(format!("reading the archive side b replays: {e}")))?;
            recap::compare::same_shape(job.archive, &other).map_err(|e| RunError::Failed(e.to_string()))?;
            other
        }
        None => job.archive.clone(),
    };
    let outcome = compare(job.archive, &other, (a, b), options, &mut streamer);
    streamer.flush();
    let outcome = outcome.map_err(|e| {
        if job.cancel.load(std::sync::atomic::Ordering::Relaxed) {
            RunError::Cancelled
        } else {
            RunError::Failed(e.to_string())
        }
    })?;
    if let Some(e) = streamer.keep_error {
        tracing::warn!("keeping the parted regions for download: {e}");
    }
    (streamer.emit)(SessionMessage::Compare {
        verdict: CompareVerdict {
            a: a.to_string(),
            b: b.to_string(),
            agree: outcome.agree(),
            ops: outcome.ops,
            regions: outcome.regions,
            differing: outcome
                .divergences
                .iter()
                .map(|d| (d.op, d.pass))
                .collect::<std::collections::HashSet<_>>()
                .len() as u64,
            control: outcome.control.map(|(after, a_next, b_next)| ControlParting { after, a_next, b_next }),
        },
    });
    Ok(None)
}
