//! The messages the host and the viewer exchange, as plain serde types.
//!
//! The key design decision: the host and the wasm viewer compile these same types, so a field can
//! never be renamed on one side only. Every JSON body of the HTTP API and every WebSocket message is
//! one of the types below; `docs/API.md` shows each as JSON.
//!
//! A replay session's WebSocket stream is its event log: a sequence of [`Event`]s, each a
//! [`SessionMessage`] with a sequence number and a timestamp. The log is the same for everyone who
//! opens the session; a viewer that joins late first receives the log so far, then live events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::archive::DType;
use crate::check::element;

/// The body of every error answer: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable, machine-readable: `not_found`, `invalid_archive`, `too_large`, `unauthorized`, ...
    pub code: String,
    /// For people: what went wrong and where.
    pub message: String,
}

/// A stored archive, as `POST /api/archives`, `GET /api/archives` and `GET /api/archives/{id}` give it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveInfo {
    /// The first 128 bits of the blake3 hash, in hex: identical bytes always get the same id.
    pub id: String,
    /// The name given at upload (`?name=`), or the file name for seeded archives.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// The full blake3 hash of the bytes, in hex.
    pub hash: String,
    pub ops: u64,
    pub kernels: u64,
    pub regions: u64,
    /// RFC 3339, UTC, seconds (`2026-11-22T02:15:00Z`).
    pub uploaded_at: String,
    /// The other names the same bytes were uploaded under after `name`, oldest first: a duplicate
    /// upload stores no second copy, so the name it came with is kept here.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// In the answer to an upload of bytes already stored under another name: the name that upload
    /// added to `aliases` (absent when the name was already known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias_added: Option<String>,
    /// What the host did with the upload beyond storing it (an NVIDIA Warp capture converted);
    /// only in the answer to the upload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A device this host can replay on, as `GET /api/devices` lists them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// What `POST /api/sessions` takes as `device`: `cpu`, `cuda:0`, `cuda:1`, ...
    pub id: String,
    /// `cpu` or `cuda`.
    pub kind: String,
    /// For people: `CPU (16 threads)`, `NVIDIA H100 80GB HBM3 (sm_90)`, ...
    pub name: String,
    /// How many sessions run on it at once.
    pub concurrency: u32,
    /// Sessions running on it now.
    pub running: u32,
    /// Sessions waiting for it now.
    pub queued: u32,
    /// With `recap serve --queue`: the workers that have this device (`concurrency` is their
    /// number); absent on a single host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<String>,
}

/// The body of `POST /api/sessions`. Unknown fields are refused: a misspelled setting must not
/// silently fall back to its default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// An archive id.
    pub archive: String,
    /// `cpu`, `cuda` (the first CUDA device) or `cuda:N`.
    #[serde(default = "default_device")]
    pub device: String,
    /// How many times to replay the whole archive (at least 1).
    #[serde(default = "default_iterations")]
    pub iterations: u32,
    /// Whether to judge the final regions against the archive's expected bytes.
    #[serde(default = "default_true")]
    pub check: bool,
    /// Replacement initial bytes for named bindings, base64 (standard alphabet, padded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bindings: BTreeMap<String, String>,
    /// Most PTX instructions one iteration may execute on the CPU (default and maximum: the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
    /// Seconds the whole session may run before it is stopped (default and maximum: the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
    /// `replay` (the default) or `compare`: one iteration on `device` and on `compare_with` side by
    /// side, op by op, judging every op's writes (see [`SessionMessage::Compared`]).
    #[serde(default, skip_serializing_if = "SessionKind::is_replay")]
    pub kind: SessionKind,
    /// The second side of a `compare` session: `cpu`, `interp`, `jit`, `jit-scalar`, `cuda` or
    /// `cuda:N` (`device` is the first and takes the same names there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare_with: Option<String>,
    /// A `compare` session goes on past the first op that differs and reports every one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compare_all: bool,
    /// The second side of a `compare` session replays this archive (an id) instead: another
    /// capture of the same program, with the same ops over regions of the same sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare_against: Option<String>,
    /// How a CUDA session submits the ops: `graph` (the default: programmatic edges between
    /// dependent kernels where the GPU has them, half-wave kernels triggering their dependents
    /// early), `graph-pdl` (the same, asked for), `graph-pdl-wait` (the same without the early
    /// trigger), `graph-plain` (ordinary edges only) or `stream`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_mode: Option<String>,
    /// Whole replays to make on the device before the session's iterations and judge together
    /// with them (2 to [`MAX_DETERMINISM`]; a replay session with `check`): a stretch where they
    /// disagree is nondeterministic and judged with a tolerance no tighter than their spread, as
    /// `recap replay --check --determinism N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub determinism: Option<u32>,
}

/// The most whole replays a session may judge together.
pub const MAX_DETERMINISM: u32 = 16;

/// The CUDA submission modes a session may ask for.
pub const CUDA_MODES: [&str; 5] = ["graph", "graph-pdl", "graph-pdl-wait", "graph-plain", "stream"];

/// What a session does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// Replays the archive `iterations` times on one device, timing it and checking the result.
    #[default]
    Replay,
    /// Replays one iteration on two devices side by side and names where their results part.
    Compare,
}

impl SessionKind {
    pub fn name(self) -> &'static str {
        match self {
            SessionKind::Replay => "replay",
            SessionKind::Compare => "compare",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "replay" => Some(SessionKind::Replay),
            "compare" => Some(SessionKind::Compare),
            _ => None,
        }
    }

    pub fn is_replay(&self) -> bool {
        *self == SessionKind::Replay
    }
}

fn default_device() -> String {
    "cpu".into()
}
fn default_iterations() -> u32 {
    1
}
fn default_true() -> bool {
    true
}

/// The answer to `POST /api/sessions`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCreated {
    /// 128 random bits, hex.
    pub id: String,
    /// The share link: the viewer's page for this session (carries `?token=` when the host requires one).
    pub url: String,
    /// The control key: whoever holds it may cancel the session. Only the creator receives it.
    pub control: String,
    /// The share link with control rights (`url` plus `control=`).
    pub control_url: String,
}

/// Where a session is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Queued,
    Running,
    Finished,
    Failed,
    Cancelled,
}

impl SessionState {
    pub fn name(self) -> &'static str {
        match self {
            SessionState::Queued => "queued",
            SessionState::Running => "running",
            SessionState::Finished => "finished",
            SessionState::Failed => "failed",
            SessionState::Cancelled => "cancelled",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "queued" => SessionState::Queued,
            "running" => SessionState::Running,
            "finished" => SessionState::Finished,
            "failed" => SessionState::Failed,
            "cancelled" => SessionState::Cancelled,
            _ => return None,
        })
    }

    /// Finished, failed or cancelled: nothing more will happen.
    pub fn is_terminal(self) -> bool {
        matches!(self, SessionState::Finished | SessionState::Failed | SessionState::Cancelled)
    }
}

/// A session as `GET /api/sessions` and `GET /api/sessions/{id}` give it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub id: String,
    pub archive: String,
    /// The archive's name when the session was created, kept after the archive is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_name: Option<String>,
    pub device: String,
    pub iterations: u32,
    pub check: bool,
    pub state: SessionState,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// RFC 3339, UTC; absent until the session ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Whether the check passed; absent until finished with `check: true`, and absent when
    /// there was nothing to check (`check_state` says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<bool>,
    /// The check's state once finished: `exact`, `within`, `failed` or `nothing_to_check` (a
    /// session read back from the index knows `passed` only, and nothing to check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_state: Option<CheckState>,
    /// The error of a failed session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The instruction budget of one iteration on the CPU, as the host settled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
    /// The wall-clock limit of the session in seconds, as the host settled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
    /// `replay` or `compare`; for `compare`, `passed` says whether the two sides agree.
    #[serde(default, skip_serializing_if = "SessionKind::is_replay")]
    pub kind: SessionKind,
    /// The second side of a `compare` session (`device` is the first), as the host names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare_with: Option<String>,
    /// Whether a `compare` session goes on past the first op that differs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compare_all: bool,
    /// The archive the second side of a `compare` session replays, when not `archive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare_against: Option<String>,
    /// The CUDA submission mode the session asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_mode: Option<String>,
    /// Whole replays made and judged together, where the session asked for more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub determinism: Option<u32>,
}

/// One entry of a session's event log: what the WebSocket carries, one JSON text message each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// 0, 1, 2, ... within the session: a viewer can tell it missed nothing.
    pub seq: u64,
    /// When the host produced it, microseconds since the Unix epoch.
    pub time_us: u64,
    #[serde(flatten)]
    pub message: SessionMessage,
}

/// What happened in a session. Serialized with a `"type"` field naming the variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SessionMessage {
    /// The session's state changed; `note` says why when the host itself moved it (a session
    /// queued again because the host stopped or restarted).
    State {
        state: SessionState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// The session waits for its device; `position` 0 means it is next.
    Queue { position: u32 },
    /// Replay began: what is being replayed where.
    Started { device: String, iterations: u32, ops: u64, regions: u64 },
    /// One replay of the whole archive took `time_ms`.
    Iteration { index: u32, time_ms: f64 },
    /// Time of each top-level op in one iteration.
    OpTimings { iteration: u32, ops: Vec<OpTiming> },
    /// Statistics of one region after the last iteration.
    Region { summary: RegionSummary },
    /// Comparison: ops both sides just finished, in the order they ran, and whether their writes
    /// agree. Sent in batches; after the first [`MAX_COMPARED_REPORTED`] only ops that differ.
    Compared { ops: Vec<OpAgreement> },
    /// Comparison: an op whose writes differ, with both sides' values of the region where they part.
    Parted { parting: Box<Parting> },
    /// Comparison: the verdict, sent once before `finished`.
    Compare { verdict: CompareVerdict },
    /// The session completed; `check` is absent when checking was not asked for.
    Finished {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        check: Option<CheckReport>,
        total_ms: f64,
    },
    /// The session stopped on an error.
    Failed { error: String },
    /// Someone with control rights cancelled it.
    Cancelled,
}

impl SessionMessage {
    /// A state change without a note.
    pub fn state(state: SessionState) -> SessionMessage {
        SessionMessage::State { state, note: None }
    }

    /// The state this message moves the session to, if any.
    pub fn terminal_state(&self) -> Option<SessionState> {
        match self {
            SessionMessage::Finished { .. } => Some(SessionState::Finished),
            SessionMessage::Failed { .. } => Some(SessionState::Failed),
            SessionMessage::Cancelled => Some(SessionState::Cancelled),
            _ => None,
        }
    }
}

/// Most [`OpAgreement`]s a comparison reports one by one; after those, only ops that differ (the
/// verdict still counts every op), so a long loop cannot flood the log.
pub const MAX_COMPARED_REPORTED: u64 = 4096;

/// One op of a comparison: both sides ran it and their writes were compared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpAgreement {
    /// Index in the archive's op list.
    pub op: u32,
    /// Which run of this op within the iteration (1 for the first; more inside loop bodies).
    pub pass: u64,
    /// Whether every region the op may write holds the same values on both sides, within the
    /// tolerance of each stretch's element type (`shared::check`).
    pub agree: bool,
    /// Of ops that agree: some values differ in their bits, all within tolerance.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub within: bool,
}

/// Where the two sides of a comparison part on one op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Parting {
    pub op: u32,
    /// `launch saxpy`, `copy a -> b`, ...
    pub label: String,
    pub pass: u64,
    pub region: u32,
    pub name: String,
    /// `f32`, `i32`, `u8`, ...
    pub dtype: String,
    /// The region's shape hint, outermost first; empty for 1-D.
    pub shape: Vec<u64>,
    /// The first side's values as `want`, the second's as `got`.
    pub check: RegionCheckReport,
    /// `(bucket, elements)`: `|a - b|` by decade over the elements that differ (`"< 1e-9"`,
    /// `"1e-3..1e-2"`, ..., `"nan/inf"`).
    pub histogram: Vec<(String, u64)>,
    /// The first side's values, downsampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a: Option<RegionPreview>,
    /// The second side's values, downsampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<RegionPreview>,
    /// `a - b` element by element, downsampled (`null` where either side is not finite).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub difference: Option<RegionPreview>,
}

/// The outcome of a comparison.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompareVerdict {
    /// The two sides as the host names them.
    pub a: String,
    pub b: String,
    pub agree: bool,
    /// Ops compared (each pass through a loop body counts).
    pub ops: u64,
    /// Region comparisons made.
    pub regions: u64,
    /// Ops whose writes differ.
    pub differing: u64,
    /// Set when the two sides stopped running the same ops (a loop condition came out otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlParting>,
}

/// The two sides ran different ops next; `null` for a side whose iteration was over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlParting {
    /// The last op both ran; `null` at the start.
    pub after: Option<u32>,
    pub a_next: Option<u32>,
    pub b_next: Option<u32>,
}

/// The time of one op (for a `while`/`if`, including its body).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpTiming {
    /// Index in the archive's op list.
    pub op: u32,
    /// `launch`, `copy`, `memset`, `alloc`, `free`, `while`, `if`, `marker`.
    pub kind: String,
    /// The kernel's entry name for launches, the marker's name for markers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub time_ms: f64,
}

/// Statistics of a region's final contents, read as its element type (computed by
/// [`RegionSummary::of`] in `shared::report`, with every non-finite number carried as `null` so
/// the JSON always round-trips).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionSummary {
    pub region: u32,
    pub name: String,
    /// `f32`, `i32`, `u8`, ...
    pub dtype: String,
    /// Outermost first; empty for 1-D.
    pub shape: Vec<u64>,
    /// Number of elements.
    pub count: u64,
    /// Over the finite values; absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    pub nan_count: u64,
    pub inf_count: u64,
    /// Equal-width bins over `[min, max]` of the finite values.
    pub histogram: Vec<u64>,
    /// The first elements (at most 16); `null` for NaN and infinities.
    pub first: Vec<Option<f64>>,
    /// The whole region downsampled for plotting; absent for an empty region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<RegionPreview>,
}

/// Most buckets of a 1-D [`RegionPreview`] (a line plot is rarely wider in pixels).
pub const PREVIEW_POINTS: usize = 1024;
/// Most rows and most columns of a 2-D [`RegionPreview`] (a heatmap of at most 64 x 64 cells).
pub const PREVIEW_GRID: usize = 64;

/// A region's elements downsampled into at most [`PREVIEW_POINTS`] buckets (1-D) or a grid of at
/// most [`PREVIEW_GRID`] x [`PREVIEW_GRID`] buckets (a region whose shape has two or more
/// dimensions: the last dimension is the columns, the others are folded into rows).
///
/// Each bucket keeps the smallest, largest and mean finite value of the elements it covers, so a
/// single spike survives downsampling in `min`/`max` while `mean` gives the heatmap's colour.
/// Bucket `b` of `n` over `len` elements (or rows, or columns) covers `[b*len/n, (b+1)*len/n)`.
/// A bucket with no finite element is `null` in all three lists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionPreview {
    /// Buckets down: 1 for a 1-D region.
    pub rows: u32,
    /// Buckets across.
    pub cols: u32,
    /// The region's own rows and columns the buckets cover (`[1, count]` for 1-D).
    pub source_shape: [u64; 2],
    /// Row-major, `rows * cols` entries each.
    pub min: Vec<Option<f64>>,
    pub max: Vec<Option<f64>>,
    pub mean: Vec<Option<f64>>,
}

impl RegionPreview {
    /// Downsamples `bytes` read as `dtype` (as raw bytes when the length does not divide into
    /// elements). `shape` is the region's shape hint, outermost first; it is used only when the
    /// product of its dimensions equals the element count, otherwise the region is drawn as 1-D.
    pub fn of(bytes: &[u8], dtype: DType, shape: &[u64]) -> Option<RegionPreview> {
        let dtype = if bytes.len().is_multiple_of(dtype.size()) { dtype } else { DType::Bytes };
        let count = (bytes.len() / dtype.size()) as u64;
        if count == 0 {
            return None;
        }
        let product = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        let (src_rows, src_cols) = match (shape.len(), product) {
            (2.., Some(p)) if p == count && shape[shape.len() - 1] > 0 => {
                let cols = shape[shape.len() - 1];
                (count / cols, cols)
            }
            _ => (1, count),
        };
        let (rows, cols) = if src_rows == 1 {
            (1, src_cols.min(PREVIEW_POINTS as u64))
        } else {
            (src_rows.min(PREVIEW_GRID as u64), src_cols.min(PREVIEW_GRID as u64))
        };
        let cells = (rows * cols) as usize;
        let mut min = vec![f64::INFINITY; cells];
        let mut max = vec![f64::NEG_INFINITY; cells];
        let mut sum = vec![0.0f64; cells];
        let mut finite = vec![0u64; cells];
        // Bucket b of n over len covers [b*len/n, (b+1)*len/n).
        let span = |b: u64, len: u64, n: u64| {
            let at = |b: u64| ((b as u128 * len as u128) / n as u128) as u64;
            at(b)..at(b + 1)
        };
        for bucket_row in 0..rows {
            for r in span(bucket_row, src_rows, rows) {
                for bucket_col in 0..cols {
                    let cell = (bucket_row * cols + bucket_col) as usize;
                    for c in span(bucket_col, src_cols, cols) {
                        let v = element(bytes, dtype, (r * src_cols + c) as usize);
                        if v.is_finite() {
                            min[cell] = min[cell].min(v);
                            max[cell] = max[cell].max(v);
                            sum[cell] += v;
                            finite[cell] += 1;
                        }
                    }
                }
            }
        }
        let some = |cell: usize, v: f64| (finite[cell] > 0 && v.is_finite()).then_some(v);
        Some(RegionPreview {
            rows: rows as u32,
            cols: cols as u32,
            source_shape: [src_rows, src_cols],
            min: (0..cells).map(|i| some(i, min[i])).collect(),
            max: (0..cells).map(|i| some(i, max[i])).collect(),
            mean: (0..cells).map(|i| some(i, sum[i] / finite[i].max(1) as f64)).collect(),
        })
    }
}

/// The verdict of comparing the final regions with the archive's expected bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// True only when at least one region was checked and every one passed.
    pub passed: bool,
    /// `exact`, `within` (every region passed, some only within tolerance), `failed`, or
    /// `nothing_to_check` (the archive holds no expected state: not a pass).
    #[serde(default = "CheckState::unknown")]
    pub state: CheckState,
    pub regions: Vec<RegionCheckReport>,
    /// Whole replays judged together (more than one: `--determinism`).
    #[serde(default = "one")]
    pub replays: u32,
}

fn one() -> u32 {
    1
}

pub use crate::check::{CheckState, StretchCheck};

impl CheckState {
    /// What a report from before states existed means: its `passed` alone.
    fn unknown() -> CheckState {
        CheckState::Failed
    }

    /// What a stored session's fields say of its check: a finished session with a check and no
    /// verdict had nothing to check; a failed one is known; a pass does not say exact or within.
    pub fn of_stored(check: bool, state: SessionState, passed: Option<bool>) -> Option<CheckState> {
        match (check, state, passed) {
            (true, SessionState::Finished, None) => Some(CheckState::NothingToCheck),
            (true, SessionState::Finished, Some(false)) => Some(CheckState::Failed),
            _ => None,
        }
    }
}

/// The verdict for one region that has expected bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionCheckReport {
    pub region: u32,
    pub name: String,
    pub passed: bool,
    /// The tolerance it was judged by: `exact`, `rtol 1e-5 atol 1e-6`, `at most 0.1000% differing`.
    pub tolerance: String,
    /// Elements compared.
    pub count: u64,
    /// Elements outside the tolerance.
    pub mismatches: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_abs_error: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rel_error: Option<f64>,
    /// The first element outside the tolerance, with what was found and what was expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_mismatch: Option<Mismatch>,
    /// The verdict in one line, for people.
    pub detail: String,
    /// `exact`, `within` or `differ`: the worst of its stretches.
    #[serde(default = "differ")]
    pub outcome: crate::check::Outcome,
    /// Whether replays of the same archive disagreed with each other somewhere in it.
    #[serde(default)]
    pub nondeterministic: bool,
    /// The verdict per stretch of one element type (`shared::check`).
    #[serde(default)]
    pub stretches: Vec<StretchCheck>,
}

fn differ() -> crate::check::Outcome {
    crate::check::Outcome::Differ
}

/// One element outside the tolerance; `null` values were NaN or infinite.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    pub index: u64,
    pub got: Option<f64>,
    pub want: Option<f64>,
}

/// What a viewer may send on a session's WebSocket (one JSON text message each).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    /// Cancel the session; `control` is the key `POST /api/sessions` returned.
    Cancel { control: String },
}

/// What the host answers one viewer alone on its WebSocket (never part of the shared log).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// The viewer's message was refused.
    Error { code: String, message: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_flattens_its_message_with_a_type_tag() {
        let e = Event { seq: 3, time_us: 7, message: SessionMessage::Queue { position: 2 } };
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json, serde_json::json!({"seq": 3, "time_us": 7, "type": "queue", "position": 2}));
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn finished_carries_the_check_object() {
        let msg = SessionMessage::Finished {
            check: Some(CheckReport { passed: false, state: CheckState::NothingToCheck, regions: vec![], replays: 1 }),
            total_ms: 1.5,
        };
        let json = serde_json::to_value(&msg).unwrap();
        assert_eq!(json["type"], "finished");
        assert_eq!(json["check"]["passed"], false);
        assert_eq!(json["check"]["state"], "nothing_to_check");
    }

    #[test]
    fn create_session_fills_defaults() {
        let req: CreateSession = serde_json::from_str(r#"{"archive": "ab"}"#).unwrap();
        assert_eq!((req.device.as_str(), req.iterations, req.check), ("cpu", 1, true));
    }

    fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
        values.into_iter().flat_map(f32::to_le_bytes).collect()
    }

    #[test]
    fn a_preview_of_a_long_line_keeps_a_single_spike() {
        let n = 100_000usize;
        let bytes = f32_bytes((0..n).map(|i| if i == 54_321 { 1000.0 } else { (i % 7) as f32 }));
        let p = RegionPreview::of(&bytes, DType::F32, &[]).unwrap();
        assert_eq!((p.rows, p.cols, p.source_shape), (1, PREVIEW_POINTS as u32, [1, n as u64]));
        assert_eq!(p.min.len(), PREVIEW_POINTS);
        let spike = 54_321 * PREVIEW_POINTS / n;
        assert_eq!(p.max[spike], Some(1000.0));
        assert!(p.max.iter().enumerate().all(|(i, m)| i == spike || *m == Some(6.0)));
        assert!(p.min.iter().all(|m| *m == Some(0.0)));
        let mean = p.mean[0].unwrap();
        assert!((mean - 3.0).abs() < 0.1, "mean of a bucket of 0..6 repeating: {mean}");
    }

    #[test]
    fn a_short_region_keeps_every_element_and_marks_non_finite_buckets_null() {
        let bytes = f32_bytes([1.0, f32::NAN, -2.5, f32::INFINITY]);
        let p = RegionPreview::of(&bytes, DType::F32, &[4]).unwrap();
        assert_eq!((p.rows, p.cols), (1, 4));
        assert_eq!(p.mean, vec![Some(1.0), None, Some(-2.5), None]);
        assert_eq!(p.min, p.max);
        assert!(RegionPreview::of(&[], DType::F32, &[]).is_none());
    }

    #[test]
    fn a_preview_of_a_grid_folds_leading_dimensions_into_rows() {
        // 2 x 100 x 300 elements: 200 rows of 300 columns, value = row index.
        let bytes = f32_bytes((0..200 * 300).map(|i| (i / 300) as f32));
        let p = RegionPreview::of(&bytes, DType::F32, &[2, 100, 300]).unwrap();
        assert_eq!((p.rows, p.cols, p.source_shape), (64, 64, [200, 300]));
        assert_eq!(p.mean.len(), 64 * 64);
        // Bucket row 1 covers source rows [200/64, 400/64) = 3..6.
        assert_eq!((p.min[64], p.max[64], p.mean[64 + 63]), (Some(3.0), Some(5.0), Some(4.0)));
        assert_eq!(p.max[64 * 64 - 1], Some(199.0));
        // A small grid keeps every cell.
        let small = RegionPreview::of(&[1, 2, 3, 4, 5, 6], DType::U8, &[2, 3]).unwrap();
        assert_eq!((small.rows, small.cols), (2, 3));
        assert_eq!(small.mean, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0].map(Some).to_vec());
    }

    #[test]
    fn a_shape_that_does_not_match_the_length_is_drawn_as_a_line() {
        let p = RegionPreview::of(&[0u8; 12], DType::U8, &[5, 5]).unwrap();
        assert_eq!((p.rows, p.cols, p.source_shape), (1, 12, [1, 12]));
        let overflowing = RegionPreview::of(&[0u8; 12], DType::U8, &[u64::MAX, 4]).unwrap();
        assert_eq!(overflowing.rows, 1);
        // A length that does not divide into f32s is read as bytes.
        assert_eq!(RegionPreview::of(&[0u8; 7], DType::F32, &[]).unwrap().cols, 7);
    }

    #[test]
    fn a_summary_without_a_preview_still_parses() {
        let json = serde_json::json!({"region": 0, "name": "x", "dtype": "f32", "shape": [], "count": 0,
            "nan_count": 0, "inf_count": 0, "histogram": [], "first": []});
        let s: RegionSummary = serde_json::from_value(json).unwrap();
        assert!(s.preview.is_none());
        assert!(!serde_json::to_string(&s).unwrap().contains("preview"));
    }

    #[test]
    fn cancelled_is_a_bare_type() {
        assert_eq!(serde_json::to_string(&SessionMessage::Cancelled).unwrap(), r#"{"type":"cancelled"}"#);
    }
}
