//! Replay sessions: a queue and bounded workers per device, and a broadcast event log per session.
//!
//! The key design decision: a session's stream *is* its event log. Every message is appended to
//! the log under a lock and a `watch` counter is bumped; each viewer keeps its own cursor into the
//! log. So every viewer gets exactly the same sequence, a late joiner starts at 0 (history, then
//! live) with no gap and no duplicate, and a slow viewer never makes anyone lose a message (unlike
//! a bounded broadcast channel, which drops for laggards). Once a session ends its log is written to
//! the index in one transaction and it leaves memory; later viewers read it from there.
//!
//! Engines ([`Backend`]) do the replay itself in a blocking thread; this module only schedules,
//! records and cancels.

mod compare;
mod cpu;
mod kept;
mod process;
pub mod queue;
pub mod worker;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use shared::archive::Archive;
use shared::protocol::{
    CheckReport, CheckState, DeviceInfo, Event, SessionInfo, SessionKind, SessionMessage, SessionState,
};
use shared::replay::ReplayLimits;
use tokio::sync::{watch, Notify};

use crate::secrets::random_id;
use crate::store::{now_rfc3339, SessionRecord, Store, StoreError};

pub use compare::CompareSides;
pub use cpu::CpuBackend;
pub use kept::{kept_file, KEEP_BYTES};
pub use process::{backends as cuda_backends, run_worker, WorkerBackend, WorkerDevice, WorkerJob, WorkerLine};

/// What a backend is asked to do.
pub struct Job<'a> {
    pub archive: &'a Archive<'a>,
    /// The file `archive` was read from (for backends that replay in another process).
    pub archive_path: &'a std::path::Path,
    pub iterations: u32,
    pub check: bool,
    /// Replacement initial bytes of named bindings (sizes already checked against their regions).
    pub bindings: &'a [(String, Vec<u8>)],
    /// Set when the session is cancelled, runs out of time or the host shuts down; backends poll
    /// it between ops and pass it to kernels.
    pub cancel: &'a Arc<AtomicBool>,
    /// Most PTX instructions one iteration may execute on the CPU.
    pub budget: Option<u64>,
    /// What the archive may make a CPU replay allocate and launch.
    pub limits: ReplayLimits,
    /// Set for a `compare` session: replay one iteration on both sides instead.
    pub compare: Option<&'a CompareSides>,
    /// Where to keep region contents for download ([`kept::Keeper`]); nothing is kept without it.
    pub keep_dir: Option<&'a std::path::Path>,
    /// A CUDA session's submission mode (`shared::protocol::CUDA_MODES`; default `graph`).
    pub cuda_mode: Option<&'a str>,
    /// Whole replays judged together by the check (1 without `determinism`).
    pub replays: u32,
}

impl Job<'_> {
    /// Runs this job as a replay session on `replayer` (`shared::replay::run_session`): its
    /// iterations, the summaries of its outputs (kept for download) and its check. `failed` says
    /// what an error of the engine means for the session.
    pub fn run_replay<R: shared::replay::Replayer + ?Sized>(
        &self,
        replayer: &mut R,
        emit: &mut dyn FnMut(SessionMessage),
        failed: impl Fn(R::Error) -> RunError,
    ) -> Result<Option<CheckReport>, RunError> {
        use shared::replay::SessionError;
        let inputs = self.inputs();
        let mut keeper = kept::Keeper::new(self.keep_dir);
        let mut keep =
            |region, bytes: &[u8]| keeper.keep(&kept_file(region, None), bytes).map_err(shared::replay::KeepError::new);
        let clock = recap::clock::MonotonicClock::new();
        let cancelled = || self.cancel.load(Ordering::Relaxed);
        let run = shared::replay::run_session;
        let check = self
            .check
            .then(|| shared::replay::CheckRequest { replays: self.replays, ..shared::replay::CheckRequest::plain() });
        run(replayer, self.archive, self.iterations, &inputs, check.as_ref(), &clock, &cancelled, emit, &mut keep)
            .map_err(|e| match e {
                SessionError::Cancelled => RunError::Cancelled,
                SessionError::Replay(e) => failed(e),
                other => RunError::Failed(other.to_string()),
            })
    }

    /// The bound inputs, by region.
    pub fn inputs(&self) -> Vec<(shared::archive::RegionId, Vec<u8>)> {
        self.bindings
            .iter()
            .filter_map(|(name, bytes)| self.archive.binding(name).map(|b| (b.region, bytes.clone())))
            .collect()
    }
}

impl Job<'_> {
    /// Runs a `compare` job; `None` for a replay, which the backend runs itself.
    fn run_compare(&self, emit: &mut dyn FnMut(SessionMessage)) -> Option<Result<Option<CheckReport>, RunError>> {
        self.compare.map(|sides| compare::run(self, sides, emit))
    }
}

/// What a session may use: the host's defaults and the most a request may ask for.
#[derive(Clone, Debug)]
pub struct SessionLimits {
    /// What an archive may make a CPU replay allocate and launch.
    pub replay: ReplayLimits,
    /// Instruction budget of one CPU iteration when a request names none.
    pub default_budget: u64,
    /// The largest budget a request may ask for.
    pub max_budget: u64,
    /// Wall-clock seconds of a session when a request names none.
    pub default_time_limit_s: u64,
    /// The longest a request may ask for.
    pub max_time_limit_s: u64,
}

impl Default for SessionLimits {
    /// A budget of 10^11 instructions per iteration (minutes of interpretation, a large matmul
    /// many times over) and ten minutes of wall clock: an endless kernel cannot hold the CPU for
    /// long, and real work rarely needs more (a request may ask for up to 10^13 and an hour).
    fn default() -> Self {
        SessionLimits {
            replay: ReplayLimits::default(),
            default_budget: 100_000_000_000,
            max_budget: 10_000_000_000_000,
            default_time_limit_s: 600,
            max_time_limit_s: 3600,
        }
    }
}

impl SessionLimits {
    /// The budget and time limit a request gets: its own within the maximums, else the defaults.
    fn settle(&self, budget: Option<u64>, time_limit_s: Option<u64>) -> Result<(u64, u64), SessionError> {
        let budget = budget.unwrap_or(self.default_budget);
        if budget == 0 || budget > self.max_budget {
            return Err(SessionError::BadRequest(format!(
                "budget must be between 1 and this host's maximum of {} instructions per iteration, got {budget}",
                self.max_budget
            )));
        }
        let time = time_limit_s.unwrap_or(self.default_time_limit_s);
        if time == 0 || time > self.max_time_limit_s {
            return Err(SessionError::BadRequest(format!(
                "time_limit_s must be between 1 and this host's maximum of {} seconds, got {time}",
                self.max_time_limit_s
            )));
        }
        Ok((budget, time))
    }
}

/// Why a run did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cancelled")]
    Cancelled,
    #[error("{0}")]
    Failed(String),
}

/// A replay backend for one device.
pub trait Backend: Send + Sync + 'static {
    /// `cpu`, `cuda:0`, ...
    fn id(&self) -> String;
    fn kind(&self) -> &'static str;
    fn name(&self) -> String;
    /// Sessions it runs at once.
    fn concurrency(&self) -> u32 {
        1
    }
    /// Replays `job`, emitting iteration times, op timings and region summaries as it goes;
    /// returns the check report when `job.check` asked for one. Runs in a blocking thread.
    fn run(&self, job: &Job<'_>, emit: &mut dyn FnMut(SessionMessage)) -> Result<Option<CheckReport>, RunError>;
}

/// Upper bound on `iterations` of one session.
pub const MAX_ITERATIONS: u32 = 100_000;

/// Errors of session requests, mapped to HTTP answers by the server.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no archive with id {0}")]
    UnknownArchive(String),
    #[error("no session with id {0}")]
    UnknownSession(String),
    #[error("archive {0} was deleted before the session ran")]
    ArchiveDeleted(String),
    #[error("unknown device {0:?}; GET /api/devices lists this host's devices")]
    UnknownDevice(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("the control key does not match this session")]
    Forbidden,
    #[error("{0}")]
    Store(#[from] StoreError),
}

pub(crate) fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

fn key_hash(key: &str) -> String {
    blake3::hash(key.as_bytes()).to_hex().to_string()
}

#[derive(Default)]
struct Log {
    /// Each event serialised once, shared by every viewer.
    lines: Vec<Arc<str>>,
    events: Vec<Event>,
    ended: bool,
}

impl Log {
    /// A log that continues one kept in the index.
    fn resume(events: Vec<Event>) -> Log {
        let lines = events.iter().map(|e| Arc::from(serde_json::to_string(e).expect("events serialise"))).collect();
        Log { lines, events, ended: false }
    }
}

/// A session that is queued or running (or has just ended and is being written down).
pub struct Live {
    info: Mutex<SessionInfo>,
    log: Mutex<Log>,
    len: watch::Sender<usize>,
    cancel: Arc<AtomicBool>,
    control_hash: String,
    bindings: Vec<(String, Vec<u8>)>,
    queue_position: AtomicU32,
}

impl Live {
    fn new(info: SessionInfo, control_hash: String, bindings: Vec<(String, Vec<u8>)>, log: Log) -> Live {
        let len = log.lines.len();
        Live {
            info: Mutex::new(info),
            log: Mutex::new(log),
            len: watch::Sender::new(len),
            cancel: Arc::new(AtomicBool::new(false)),
            control_hash,
            bindings,
            queue_position: AtomicU32::new(u32::MAX),
        }
    }

    fn push(&self, message: SessionMessage) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if log.ended {
            return;
        }
        let event = Event { seq: log.events.len() as u64, time_us: now_us(), message };
        let line: Arc<str> = serde_json::to_string(&event).expect("events serialise").into();
        log.ended = event.message.terminal_state().is_some();
        log.lines.push(line);
        log.events.push(event);
        let n = log.lines.len();
        drop(log);
        self.len.send_replace(n);
    }

    pub fn info(&self) -> SessionInfo {
        self.info.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A viewer's position in a session's stream.
pub enum Subscription {
    /// A session in memory: follow it live.
    Live { live: Arc<Live>, changed: watch::Receiver<usize>, cursor: usize },
    /// An ended session read back from the index: its whole log.
    Ended(std::vec::IntoIter<Arc<str>>),
    /// A session of the cluster's queue, followed in its log there.
    Remote(tokio::sync::mpsc::Receiver<Arc<str>>),
}

impl Subscription {
    /// The next messages (JSON text); empty when the stream has ended.
    pub async fn next_batch(&mut self) -> Vec<Arc<str>> {
        match self {
            Subscription::Ended(rest) => rest.collect(),
            Subscription::Remote(lines) => {
                let mut batch = Vec::new();
                if let Some(line) = lines.recv().await {
                    batch.push(line);
                    while let Ok(line) = lines.try_recv() {
                        batch.push(line);
                    }
                }
                batch
            }
            Subscription::Live { live, changed, cursor } => loop {
                changed.borrow_and_update();
                let (batch, ended) = {
                    let log = live.log.lock().unwrap_or_else(|e| e.into_inner());
                    (log.lines[*cursor..].to_vec(), log.ended)
                };
                *cursor += batch.len();
                if !batch.is_empty() || ended {
                    return batch;
                }
                if changed.changed().await.is_err() {
                    return Vec::new();
                }
            },
        }
    }
}

/// One backend and the sessions queued for it.
struct DeviceQueue {
    backend: Arc<dyn Backend>,
    queue: Mutex<VecDeque<Arc<Live>>>,
    running: AtomicU32,
    wake: Notify,
}

impl DeviceQueue {
    /// Tells every queued session its position when it changed.
    fn announce_positions(&self) {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        for (i, live) in queue.iter().enumerate() {
            let pos = i as u32;
            if live.queue_position.swap(pos, Ordering::SeqCst) != pos {
                live.push(SessionMessage::Queue { position: pos });
            }
        }
    }

    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            id: self.backend.id(),
            kind: self.backend.kind().into(),
            name: self.backend.name(),
            concurrency: self.backend.concurrency(),
            running: self.running.load(Ordering::SeqCst),
            queued: self.queue.lock().unwrap_or_else(|e| e.into_inner()).len() as u32,
            workers: Vec::new(),
        }
    }
}

/// All sessions of this host.
pub struct Sessions {
    store: Arc<Store>,
    limits: SessionLimits,
    devices: Vec<Arc<DeviceQueue>>,
    live: Mutex<HashMap<String, Arc<Live>>>,
    stopping: AtomicBool,
    /// With `--queue`: sessions are jobs for the cluster's workers instead of this host's devices.
    cluster: Option<Arc<queue::Cluster>>,
}

/// Why a session that was running when the host was killed or crashed is failed after a restart.
/// It is not run again by itself: it may be what brought the host down (a GPU hang, the memory
/// it took), and re-running it unattended at every start could keep the host down.
const INTERRUPTED: &str = "the host stopped while this session was running (it was killed or crashed, not shut \
down cleanly); its results are lost: start a new session to run it again";

/// What viewers are told when a clean shutdown leaves a session for the next start.
const STOPPING_QUEUED: &str = "the host is stopping: this session stays queued and runs when the host starts again";
const STOPPING_RUNNING: &str =
    "the host is stopping: this session was interrupted and runs again from the start when the host starts again";
/// What a session left queued says when the host has started again.
const RESUMED: &str = "the host started again: this session is queued again";

impl Sessions {
    /// Starts the workers of each backend. Sessions a previous run of the host left queued
    /// (a clean shutdown also leaves the running ones queued) are queued again, oldest first; one
    /// still recorded as running was cut off by a kill or a crash and is marked failed.
    pub fn start(
        store: Arc<Store>,
        backends: Vec<Arc<dyn Backend>>,
        limits: SessionLimits,
    ) -> Result<Arc<Sessions>, StoreError> {
        let devices = backends
            .into_iter()
            .map(|backend| {
                Arc::new(DeviceQueue {
                    backend,
                    queue: Default::default(),
                    running: AtomicU32::new(0),
                    wake: Notify::new(),
                })
            })
            .collect::<Vec<_>>();
        let sessions = Arc::new(Sessions {
            store,
            limits,
            devices,
            live: Default::default(),
            stopping: AtomicBool::new(false),
            cluster: None,
        });
        for record in sessions.store.index.unfinished()? {
            sessions.resume(record)?;
        }
        for device in &sessions.devices {
            device.announce_positions();
            for _ in 0..device.backend.concurrency().max(1) {
                tokio::spawn(Arc::clone(&sessions).worker(Arc::clone(device)));
            }
        }
        Ok(sessions)
    }

    /// Sessions as jobs on the cluster's queue, run by `recap worker` processes: this host runs
    /// none itself, and finds nothing to resume at start (the queue keeps the waiting ones).
    pub fn start_cluster(store: Arc<Store>, cluster: Arc<queue::Cluster>, limits: SessionLimits) -> Arc<Sessions> {
        Arc::new(Sessions {
            store,
            limits,
            devices: Vec::new(),
            live: Default::default(),
            stopping: AtomicBool::new(false),
            cluster: Some(cluster),
        })
    }

    /// Queues again (or fails) a session found unfinished in the index at start.
    fn resume(&self, record: SessionRecord) -> Result<(), StoreError> {
        let SessionRecord { mut info, control_hash } = record;
        let mut log = Log::resume(self.store.index.events(&info.id)?);
        let device = self.queue_device(&info);
        let failure = match (info.state, device) {
            (SessionState::Running, _) => Some(INTERRUPTED.to_string()),
            (_, None) => Some(format!("device {} is not on this host since its restart", info.device)),
            _ => None,
        };
        if let Some(error) = failure {
            tracing::warn!(session = info.id, "marked failed at start: {error}");
            info.state = SessionState::Failed;
            info.ended_at = Some(now_rfc3339());
            info.error = Some(error.clone());
            for message in [SessionMessage::state(SessionState::Failed), SessionMessage::Failed { error }] {
                log.events.push(Event { seq: log.events.len() as u64, time_us: now_us(), message });
            }
            return self.store.index.save_session(&info, &log.events);
        }
        let device = device.expect("checked above");
        let bindings = self.store.index.bindings(&info.id)?;
        tracing::info!(session = info.id, device = info.device, "queued again");
        let live = Arc::new(Live::new(info.clone(), control_hash, bindings, log));
        live.push(SessionMessage::State { state: SessionState::Queued, note: Some(RESUMED.into()) });
        self.live.lock().unwrap_or_else(|e| e.into_inner()).insert(info.id, Arc::clone(&live));
        device.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(live);
        Ok(())
    }

    pub fn devices(&self) -> Vec<DeviceInfo> {
        match &self.cluster {
            Some(cluster) => cluster.devices(),
            None => self.devices.iter().map(|d| d.info()).collect(),
        }
    }

    /// The id of the device a request names, if there is one (`cuda`: the first CUDA device).
    fn known_device(&self, id: &str) -> Option<String> {
        match &self.cluster {
            Some(cluster) => cluster.device(id),
            None => self.device(id).map(|d| d.backend.id()),
        }
    }

    /// The id of the device whose queue a session waits in ([`Sessions::queue_device`]).
    fn queue_device_id(&self, info: &SessionInfo) -> Option<String> {
        match info.kind {
            SessionKind::Replay => self.known_device(&info.device),
            SessionKind::Compare => {
                let sides = [Some(info.device.as_str()), info.compare_with.as_deref()];
                match sides.into_iter().flatten().find(|s| s.starts_with("cuda")) {
                    Some(gpu) => self.known_device(gpu),
                    None => self.known_device("cpu"),
                }
            }
        }
    }

    fn device(&self, id: &str) -> Option<&Arc<DeviceQueue>> {
        let wanted = if id == "cuda" { self.devices.iter().find(|d| d.backend.kind() == "cuda") } else { None };
        wanted.or_else(|| self.devices.iter().find(|d| d.backend.id() == id))
    }

    /// The device whose queue a session waits in: its device for a replay; for a comparison, the
    /// GPU of a side that is one (the scarcer of the two), else the CPU.
    fn queue_device(&self, info: &SessionInfo) -> Option<&Arc<DeviceQueue>> {
        match info.kind {
            SessionKind::Replay => self.device(&info.device),
            SessionKind::Compare => {
                let sides = [Some(info.device.as_str()), info.compare_with.as_deref()];
                match sides.into_iter().flatten().find(|s| s.starts_with("cuda")) {
                    Some(gpu) => self.device(gpu),
                    None => self.device("cpu"),
                }
            }
        }
    }

    /// Whether archive `other` can be replayed op by op beside `archive`.
    fn check_against(&self, archive: &shared::protocol::ArchiveInfo, other: &str) -> Result<(), SessionError> {
        let other_info =
            self.store.index.archive(other)?.ok_or_else(|| SessionError::UnknownArchive(other.to_string()))?;
        let (map, other_map) = (self.store.map(archive)?, self.store.map(&other_info)?);
        let parsed = Archive::open(&map).map_err(StoreError::from)?;
        let other_parsed = Archive::open(&other_map).map_err(StoreError::from)?;
        recap::compare::same_shape(&parsed, &other_parsed).map_err(|e| {
            SessionError::BadRequest(format!(
                "archive {other} cannot be compared op by op with archive {}: {e}",
                archive.id
            ))
        })
    }

    /// The sides of a comparison request, as the host names them, checked against its devices.
    fn compare_sides(&self, req: &shared::protocol::CreateSession) -> Result<(String, String), SessionError> {
        use recap::device::DeviceSpec;
        let Some(with) = &req.compare_with else {
            return Err(SessionError::BadRequest(
                "a compare session names its second device in compare_with (cpu, interp, jit, jit-scalar, cuda or cuda:N)".into(),
            ));
        };
        let mut named = Vec::new();
        for given in [&req.device, with] {
            let side = given
                .parse::<DeviceSpec>()
                .map_err(|e| SessionError::BadRequest(e.to_string()))?
                .engine_or(shared::ptx::Engine::Jit);
            if let DeviceSpec::Cuda(n) = side {
                let id = if given == "cuda" { self.known_device("cuda") } else { Some(format!("cuda:{n}")) };
                match id.filter(|id| self.known_device(id).is_some()) {
                    Some(id) => named.push(id),
                    None => return Err(SessionError::UnknownDevice(given.clone())),
                }
            } else {
                named.push(side.to_string());
            }
        }
        if named.iter().all(|n| n.starts_with("cuda")) {
            return Err(SessionError::BadRequest(recap::compare::CompareError::TwoGpus.to_string()));
        }
        // One engine against itself can only agree, so such a session would report an agreement that
        // says nothing; against another archive the same engine is a fair comparison of the two.
        if req.compare_against.is_none() && named[0] == named[1] {
            return Err(SessionError::BadRequest(format!(
                "device {:?} and compare_with {:?} are the same engine ({}): a compare needs two different \
                 engines, e.g. interp and jit",
                req.device, with, named[0]
            )));
        }
        let b = named.pop().expect("two sides");
        Ok((named.pop().expect("two sides"), b))
    }

    /// Queues a new session; returns its info and its control key.
    pub fn create(&self, req: shared::protocol::CreateSession) -> Result<(SessionInfo, String), SessionError> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(SessionError::BadRequest("the host is shutting down".into()));
        }
        let archive =
            self.store.index.archive(&req.archive)?.ok_or_else(|| SessionError::UnknownArchive(req.archive.clone()))?;
        let (device_name, compare_with) = match req.kind {
            SessionKind::Replay => {
                if req.compare_with.is_some() || req.compare_all || req.compare_against.is_some() {
                    return Err(SessionError::BadRequest(
                        "compare_with, compare_all and compare_against belong to sessions of kind \"compare\"".into(),
                    ));
                }
                let device =
                    self.known_device(&req.device).ok_or_else(|| SessionError::UnknownDevice(req.device.clone()))?;
                (device, None)
            }
            SessionKind::Compare => {
                if req.iterations != 1 {
                    return Err(SessionError::BadRequest(format!(
                        "a compare session runs one iteration on each side, got iterations {}",
                        req.iterations
                    )));
                }
                let (a, b) = self.compare_sides(&req)?;
                if let Some(other) = &req.compare_against {
                    self.check_against(&archive, other)?;
                }
                (a, Some(b))
            }
        };
        if req.iterations == 0 || req.iterations > MAX_ITERATIONS {
            return Err(SessionError::BadRequest(format!(
                "iterations must be between 1 and {MAX_ITERATIONS}, got {}",
                req.iterations
            )));
        }
        let (budget, time_limit_s) = self.limits.settle(req.budget, req.time_limit_s)?;
        if let Some(mode) = &req.cuda_mode {
            if !shared::protocol::CUDA_MODES.contains(&mode.as_str()) {
                return Err(SessionError::BadRequest(format!(
                    "cuda_mode must be one of {}, got {mode:?}",
                    shared::protocol::CUDA_MODES.join(", ")
                )));
            }
            if req.kind != SessionKind::Replay || !device_name.starts_with("cuda") {
                return Err(SessionError::BadRequest("cuda_mode applies to replay sessions on a CUDA device".into()));
            }
        }
        if let Some(n) = req.determinism {
            if !(2..=shared::protocol::MAX_DETERMINISM).contains(&n) || !req.check || req.kind != SessionKind::Replay {
                return Err(SessionError::BadRequest(format!(
                    "determinism is the number of whole replays a checked replay session judges together, 2 to {}, \
                     got {n}{}",
                    shared::protocol::MAX_DETERMINISM,
                    if req.kind != SessionKind::Replay || !req.check {
                        " on a session that checks nothing"
                    } else {
                        ""
                    }
                )));
            }
        }
        let bindings = self.decode_bindings(&archive, &req.bindings)?;
        let control = random_id();
        let info = SessionInfo {
            id: random_id(),
            archive_name: Some(archive.name.clone()),
            archive: archive.id.clone(),
            device: device_name,
            iterations: req.iterations,
            // A comparison judges the two sides against each other, not the expected bytes.
            check: req.check && req.kind == SessionKind::Replay,
            state: SessionState::Queued,
            created_at: now_rfc3339(),
            ended_at: None,
            passed: None,
            check_state: None,
            error: None,
            budget: Some(budget),
            time_limit_s: Some(time_limit_s),
            kind: req.kind,
            compare_with,
            compare_all: req.compare_all,
            compare_against: req.compare_against.clone(),
            cuda_mode: req.cuda_mode.clone(),
            determinism: req.determinism,
        };
        let record = SessionRecord { info: info.clone(), control_hash: key_hash(&control) };
        if let Some(cluster) = &self.cluster {
            let device = self.queue_device_id(&info).ok_or_else(|| SessionError::UnknownDevice(req.device.clone()))?;
            self.enqueue(cluster, &archive, record, &bindings, &device)?;
            return Ok((info, control));
        }
        let device = self.queue_device(&info).ok_or_else(|| SessionError::UnknownDevice(req.device.clone()))?;
        self.store.index.put_session(&record, &bindings)?;
        let live = Arc::new(Live::new(info.clone(), record.control_hash, bindings, Log::default()));
        live.push(SessionMessage::state(SessionState::Queued));
        self.live.lock().unwrap_or_else(|e| e.into_inner()).insert(info.id.clone(), Arc::clone(&live));
        device.queue.lock().unwrap_or_else(|e| e.into_inner()).push_back(live);
        device.announce_positions();
        device.wake.notify_one();
        Ok((info, control))
    }

    /// Puts a new session in the index and on the cluster's queue: its `queued` message first,
    /// then its job. A session whose job could not be queued is recorded as failed.
    fn enqueue(
        &self,
        cluster: &queue::Cluster,
        archive: &shared::protocol::ArchiveInfo,
        record: SessionRecord,
        bindings: &[(String, Vec<u8>)],
        device: &str,
    ) -> Result<(), SessionError> {
        use base64::Engine as _;
        let info = record.info.clone();
        let against_hash = match &info.compare_against {
            Some(other) => {
                Some(self.store.index.archive(other)?.ok_or_else(|| SessionError::UnknownArchive(other.clone()))?.hash)
            }
            None => None,
        };
        let job = queue::QueuedJob {
            session: info.clone(),
            archive_hash: archive.hash.clone(),
            against_hash,
            bindings: bindings
                .iter()
                .map(|(name, bytes)| (name.clone(), base64::engine::general_purpose::STANDARD.encode(bytes)))
                .collect(),
            limits: (&self.limits).into(),
        };
        self.store.index.put_session(&record, bindings)?;
        let handle = tokio::runtime::Handle::current();
        let queued = handle.block_on(async {
            cluster.queue.publish_event(&info.id, SessionMessage::state(SessionState::Queued)).await?;
            cluster.queue.enqueue(device, &job).await
        });
        if let Err(e) = queued {
            let mut failed = info.clone();
            failed.state = SessionState::Failed;
            failed.ended_at = Some(now_rfc3339());
            failed.error = Some(e.to_string());
            let events: Vec<Event> =
                [SessionMessage::state(SessionState::Failed), SessionMessage::Failed { error: e.to_string() }]
                    .into_iter()
                    .enumerate()
                    .map(|(i, message)| Event { seq: i as u64, time_us: now_us(), message })
                    .collect();
            if let Err(saved) = self.store.index.save_session(&failed, &events) {
                tracing::error!(session = info.id, "recording a session that could not be queued: {saved}");
            }
            return Err(e.into());
        }
        Ok(())
    }

    fn decode_bindings(
        &self,
        archive: &shared::protocol::ArchiveInfo,
        given: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<(String, Vec<u8>)>, SessionError> {
        use base64::Engine as _;
        if given.is_empty() {
            return Ok(Vec::new());
        }
        let map = self.store.map(archive)?;
        let parsed = Archive::open(&map).map_err(StoreError::from)?;
        let mut out = Vec::new();
        for (name, b64) in given {
            let binding = parsed
                .binding(name)
                .ok_or_else(|| SessionError::BadRequest(format!("the archive has no binding named {name:?}")))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| SessionError::BadRequest(format!("binding {name:?} is not valid base64: {e}")))?;
            let size = parsed.region(binding.region).size;
            if bytes.len() as u64 != size {
                return Err(SessionError::BadRequest(format!(
                    "binding {name:?} has {} bytes but its region holds {size}",
                    bytes.len()
                )));
            }
            out.push((name.clone(), bytes));
        }
        Ok(out)
    }

    pub fn info(&self, id: &str) -> Result<SessionInfo, SessionError> {
        if let Some(live) = self.live.lock().unwrap_or_else(|e| e.into_inner()).get(id) {
            return Ok(live.info());
        }
        Ok(self.store.index.session(id)?.ok_or_else(|| SessionError::UnknownSession(id.into()))?.info)
    }

    /// The newest sessions (at most `limit`), only those of `archive` when given.
    pub fn list(&self, limit: usize, archive: Option<&str>) -> Result<Vec<SessionInfo>, SessionError> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = self.store.index.sessions(limit, archive)?;
        for s in &mut out {
            if let Some(l) = live.get(&s.id) {
                *s = l.info();
            }
        }
        Ok(out)
    }

    /// Follows a session's stream from its first event.
    pub fn subscribe(&self, id: &str) -> Result<Subscription, SessionError> {
        if let Some(cluster) = &self.cluster {
            let record = self.store.index.session(id)?.ok_or_else(|| SessionError::UnknownSession(id.into()))?;
            if !record.info.state.is_terminal() {
                let handle = tokio::runtime::Handle::current();
                return Ok(Subscription::Remote(handle.block_on(cluster.queue.follow(id))?));
            }
        }
        if let Some(live) = self.live.lock().unwrap_or_else(|e| e.into_inner()).get(id) {
            return Ok(Subscription::Live { live: Arc::clone(live), changed: live.len.subscribe(), cursor: 0 });
        }
        if self.store.index.session(id)?.is_none() {
            return Err(SessionError::UnknownSession(id.into()));
        }
        let lines = self
            .store
            .index
            .events(id)?
            .iter()
            .map(|e| Arc::from(serde_json::to_string(e).expect("events serialise")))
            .collect::<Vec<_>>();
        Ok(Subscription::Ended(lines.into_iter()))
    }

    /// Cancels a session for whoever holds its control key.
    pub fn cancel(&self, id: &str, control: &str) -> Result<SessionInfo, SessionError> {
        if let Some(cluster) = &self.cluster {
            let record = self.store.index.session(id)?.ok_or_else(|| SessionError::UnknownSession(id.into()))?;
            if !keys_match(&record.control_hash, control) {
                return Err(SessionError::Forbidden);
            }
            let mut info = record.info;
            if info.state.is_terminal() {
                return Ok(info);
            }
            let handle = tokio::runtime::Handle::current();
            handle.block_on(async {
                // A worker running it ends it; one still waiting is ended here, and the worker that
                // takes its job later finds it ended.
                if !cluster.queue.cancel(id).await? {
                    for message in [SessionMessage::state(SessionState::Cancelled), SessionMessage::Cancelled] {
                        cluster.queue.publish_event(id, message).await?;
                    }
                }
                Ok::<_, StoreError>(())
            })?;
            info.state = SessionState::Cancelled;
            return Ok(info);
        }
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned();
        let Some(live) = live else {
            let record = self.store.index.session(id)?.ok_or_else(|| SessionError::UnknownSession(id.into()))?;
            if !keys_match(&record.control_hash, control) {
                return Err(SessionError::Forbidden);
            }
            return Ok(record.info);
        };
        if !keys_match(&live.control_hash, control) {
            return Err(SessionError::Forbidden);
        }
        live.cancel.store(true, Ordering::SeqCst);
        self.dequeue(&live, SessionMessage::Cancelled);
        Ok(live.info())
    }

    /// Ends a session that is still waiting in its queue with `message`; running ones notice
    /// their cancel flag instead.
    fn dequeue(&self, live: &Arc<Live>, message: SessionMessage) {
        let id = live.info().id;
        for device in &self.devices {
            let removed = {
                let mut queue = device.queue.lock().unwrap_or_else(|e| e.into_inner());
                let before = queue.len();
                queue.retain(|l| !Arc::ptr_eq(l, live));
                before != queue.len()
            };
            if removed {
                self.end(&id, live, message);
                device.announce_positions();
                return;
            }
        }
    }

    /// Stops taking sessions and leaves every unfinished one for the next start: queued ones stay
    /// queued, running ones are cancelled and queued again (they run from the start). Waits until
    /// every session is written down.
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for device in &self.devices {
            let queued: Vec<Arc<Live>> = device.queue.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
            for live in queued {
                self.suspend(&live, false);
            }
            device.wake.notify_waiters();
        }
        let running: Vec<Arc<Live>> = self.live.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        for live in &running {
            live.cancel.store(true, Ordering::SeqCst);
        }
        while !self.live.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Writes a session down as queued for the next start and lets it leave memory. The log kept is
    /// its queue history (for one that was running, what came before it started), then a state
    /// message saying why; viewers still connected see that message before the host closes.
    fn suspend(&self, live: &Live, was_running: bool) {
        let note = if was_running { STOPPING_RUNNING } else { STOPPING_QUEUED };
        let message = SessionMessage::State { state: SessionState::Queued, note: Some(note.into()) };
        let info = {
            let mut info = live.info.lock().unwrap_or_else(|e| e.into_inner());
            info.state = SessionState::Queued;
            info.clone()
        };
        let mut kept: Vec<Event> = {
            let log = live.log.lock().unwrap_or_else(|e| e.into_inner());
            let began = log
                .events
                .iter()
                .position(|e| matches!(e.message, SessionMessage::State { state: SessionState::Running, .. }))
                .unwrap_or(log.events.len());
            log.events[..began].to_vec()
        };
        kept.push(Event { seq: kept.len() as u64, time_us: now_us(), message: message.clone() });
        live.push(message);
        if let Err(e) = self.store.index.save_session(&info, &kept) {
            tracing::error!(session = info.id, "recording the session for the next start: {e}");
        }
        tracing::info!(session = info.id, was_running, "left queued for the next start");
        self.live.lock().unwrap_or_else(|e| e.into_inner()).remove(&info.id);
    }

    async fn worker(self: Arc<Self>, device: Arc<DeviceQueue>) {
        loop {
            let next = if self.stopping.load(Ordering::SeqCst) {
                None
            } else {
                device.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
            };
            let Some(live) = next else {
                if self.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let notified = device.wake.notified();
                if device.queue.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
                    notified.await;
                }
                continue;
            };
            device.running.fetch_add(1, Ordering::SeqCst);
            device.announce_positions();
            let sessions = Arc::clone(&self);
            let backend = Arc::clone(&device.backend);
            let task = tokio::task::spawn_blocking(move || sessions.run(backend, live));
            if let Err(e) = task.await {
                tracing::error!("a replay thread panicked: {e}");
            }
            device.running.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Runs one session to its end (blocking).
    fn run(&self, backend: Arc<dyn Backend>, live: Arc<Live>) {
        let id = live.info().id;
        if live.cancel.load(Ordering::SeqCst) {
            if self.stopping.load(Ordering::SeqCst) {
                self.suspend(&live, false);
            } else {
                self.end(&id, &live, SessionMessage::Cancelled);
            }
            return;
        }
        self.set_state(&live, SessionState::Running);
        let info = live.info();
        let end = match self.archive_files(&info) {
            Ok((archive, against)) => {
                let run = SessionRun {
                    info: &info,
                    archive: &archive,
                    against,
                    bindings: &live.bindings,
                    cancel: &live.cancel,
                    keep_dir: self.store.session_dir(&info.id),
                    limits: &self.limits,
                };
                run_session(backend.as_ref(), &run, &mut |m| live.push(m))
            }
            Err(error) => RunEnd::Failed(error.to_string()),
        };
        let message = match end {
            RunEnd::Finished { check, total_ms } => SessionMessage::Finished { check, total_ms },
            RunEnd::Cancelled if self.stopping.load(Ordering::SeqCst) => {
                self.suspend(&live, true);
                return;
            }
            RunEnd::Cancelled => SessionMessage::Cancelled,
            RunEnd::Failed(error) => SessionMessage::Failed { error },
        };
        self.end(&id, &live, message);
    }

    /// The local files of a session's archive (and of the one it is compared against), found
    /// through the index.
    fn archive_files(
        &self,
        info: &SessionInfo,
    ) -> Result<(std::path::PathBuf, Option<std::path::PathBuf>), SessionError> {
        let file = |id: &str| -> Result<std::path::PathBuf, SessionError> {
            let archive = self.store.index.archive(id)?.ok_or_else(|| SessionError::ArchiveDeleted(id.to_string()))?;
            Ok(self.store.blobs.local_path(&archive.hash)?)
        };
        let archive = file(&info.archive)?;
        let against = info.compare_against.as_deref().map(file).transpose()?;
        Ok((archive, against))
    }

    fn set_state(&self, live: &Live, state: SessionState) {
        let info = {
            let mut info = live.info.lock().unwrap_or_else(|e| e.into_inner());
            info.state = state;
            info.clone()
        };
        live.push(SessionMessage::state(state));
        if let Err(e) = self.store.index.update_session(&info) {
            tracing::error!(session = info.id, "recording the session's state: {e}");
        }
    }

    /// Records the terminal message, writes the log down and lets the session leave memory.
    fn end(&self, id: &str, live: &Live, message: SessionMessage) {
        let state = message.terminal_state().expect("a terminal message");
        let info = {
            let mut info = live.info.lock().unwrap_or_else(|e| e.into_inner());
            let log = live.log.lock().unwrap_or_else(|e| e.into_inner());
            settle_outcome(&mut info, &message, &log.events);
            info.clone()
        };
        live.push(SessionMessage::state(state));
        live.push(message);
        let events = live.log.lock().unwrap_or_else(|e| e.into_inner()).events.clone();
        if let Err(e) = self.store.index.save_session(&info, &events) {
            tracing::error!(session = id, "recording the session's results: {e}");
        }
        tracing::info!(session = id, state = state.name(), "session ended");
        self.live.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }
}

/// Records a session's end in its info: state, time, and whether it passed (a check's verdict, or
/// for a comparison whether its sides agree) or its error.
pub(crate) fn settle_outcome(info: &mut SessionInfo, message: &SessionMessage, events: &[Event]) {
    let Some(state) = message.terminal_state() else { return };
    info.state = state;
    info.ended_at = Some(now_rfc3339());
    match message {
        SessionMessage::Finished { check: Some(check), .. } => {
            // Nothing to check is no pass: `passed` stays absent and the state says why.
            info.passed = (check.state != CheckState::NothingToCheck).then_some(check.passed);
            info.check_state = Some(check.state);
        }
        SessionMessage::Finished { check: None, .. } => {
            // A comparison passes when its two sides agree.
            info.passed = events.iter().rev().find_map(|e| match &e.message {
                SessionMessage::Compare { verdict } => Some(verdict.agree),
                _ => None,
            });
        }
        SessionMessage::Failed { error } => info.error = Some(error.clone()),
        _ => {}
    }
}

/// One session to run, whoever queued it (this host's queues, or a `recap worker` that took it
/// from the cluster's queue).
pub struct SessionRun<'a> {
    pub info: &'a SessionInfo,
    /// The archive's local file.
    pub archive: &'a std::path::Path,
    /// The local file of the archive a comparison replays on its second side.
    pub against: Option<std::path::PathBuf>,
    pub bindings: &'a [(String, Vec<u8>)],
    pub cancel: &'a Arc<AtomicBool>,
    /// Where the session keeps region contents for download (emptied first).
    pub keep_dir: std::path::PathBuf,
    pub limits: &'a SessionLimits,
}

/// How a run ended.
#[derive(Debug)]
pub enum RunEnd {
    Finished {
        check: Option<CheckReport>,
        total_ms: f64,
    },
    Failed(String),
    /// Its cancel flag was set (by a viewer, or by a host or worker that is stopping).
    Cancelled,
}

/// Runs one session on `backend` (blocking): its archive opened, `started`, the backend's replay
/// (`Job::run_replay` or a comparison) under the session's time limit, region contents kept for
/// download. The one runner of every session, on a host's own devices or on a worker's.
pub fn run_session(backend: &dyn Backend, run: &SessionRun<'_>, emit: &mut dyn FnMut(SessionMessage)) -> RunEnd {
    let started = Instant::now();
    let time_limit_s = run.info.time_limit_s.unwrap_or(run.limits.default_time_limit_s);
    let watchdog = Watchdog::start(std::time::Duration::from_secs(time_limit_s), run.cancel.clone());
    let outcome = replay_session(backend, run, emit);
    let timed_out = watchdog.stop();
    let total_ms = started.elapsed().as_secs_f64() * 1e3;
    match outcome {
        Err(_) if timed_out => RunEnd::Failed(format!(
            "stopped after {time_limit_s} s: the session's time limit (`time_limit_s`; this host allows at most {} s)",
            run.limits.max_time_limit_s
        )),
        Ok(check) => RunEnd::Finished { check, total_ms },
        Err(RunError::Cancelled) => RunEnd::Cancelled,
        Err(RunError::Failed(error)) => RunEnd::Failed(error),
    }
}

fn replay_session(
    backend: &dyn Backend,
    run: &SessionRun<'_>,
    emit: &mut dyn FnMut(SessionMessage),
) -> Result<Option<CheckReport>, RunError> {
    let info = run.info;
    let map = recap::mapped::MappedFile::open(run.archive)
        .map_err(|e| RunError::Failed(format!("opening archive {}: {e}", info.archive)))?;
    let parsed = Archive::open(&map).map_err(|e| RunError::Failed(format!("archive {}: {e}", info.archive)))?;
    emit(SessionMessage::Started {
        device: info.device.clone(),
        iterations: info.iterations,
        ops: parsed.op_count() as u64,
        regions: parsed.region_count() as u64,
    });
    let compare = (info.kind == SessionKind::Compare).then(|| CompareSides {
        a: info.device.clone(),
        b: info.compare_with.clone().unwrap_or_default(),
        all: info.compare_all,
        against: run.against.clone(),
    });
    // A session run again (after a restart, or on another worker) starts with nothing kept.
    let _ = std::fs::remove_dir_all(&run.keep_dir);
    let keep_dir = match std::fs::create_dir_all(&run.keep_dir) {
        Ok(()) => Some(run.keep_dir.clone()),
        Err(e) => {
            tracing::warn!(
                session = info.id,
                "no region contents kept for download: creating {}: {e}",
                run.keep_dir.display()
            );
            None
        }
    };
    let job = Job {
        archive: &parsed,
        archive_path: run.archive,
        iterations: info.iterations,
        check: info.check,
        bindings: run.bindings,
        cancel: run.cancel,
        budget: Some(info.budget.unwrap_or(run.limits.default_budget)),
        limits: run.limits.replay,
        compare: compare.as_ref(),
        keep_dir: keep_dir.as_deref(),
        cuda_mode: info.cuda_mode.as_deref(),
        replays: info.determinism.unwrap_or(1),
    };
    let outcome = backend.run(&job, emit);
    if outcome.is_err() {
        if let Some(dir) = &keep_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    outcome
}

/// Sets a session's cancel flag when its time is up, unless stopped first.
struct Watchdog {
    stop: std::sync::mpsc::Sender<()>,
    fired: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Watchdog {
    fn start(limit: std::time::Duration, cancel: Arc<AtomicBool>) -> Watchdog {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let flag = fired.clone();
        let thread = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(limit) {
                flag.store(true, Ordering::SeqCst);
                cancel.store(true, Ordering::SeqCst);
            }
        });
        Watchdog { stop, fired, thread }
    }

    /// Stops watching; whether the time ran out first.
    fn stop(self) -> bool {
        let _ = self.stop.send(());
        let _ = self.thread.join();
        self.fired.load(Ordering::SeqCst)
    }
}

/// Compares a presented key with a stored hash in constant time.
fn keys_match(stored_hash: &str, presented: &str) -> bool {
    let presented = key_hash(presented);
    stored_hash.len() == presented.len()
        && stored_hash.bytes().zip(presented.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}
