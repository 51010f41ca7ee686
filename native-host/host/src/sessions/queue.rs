//! Sessions as jobs on NATS JetStream (`recap serve --queue nats://...`): what replicas of the host
//! and `recap worker` processes say to each other.
//!
//! The key design decision: a session's event log lives in a JetStream stream, one subject per
//! session (`recap.events.<id>`), and every party only appends to it: the replica that created the
//! session (`queued`), the worker that runs it (everything up to its end), a replica cancelling it
//! while it waits. A message's place in its subject is its `seq`, so every viewer of every replica
//! numbers the same log the same way: a viewer reads the subject from its first message (history,
//! then live, through an ordered consumer) and stops after the terminal message. Replicas share one
//! durable consumer over all events (`recorder`): whichever replica gets a session's state change
//! records it in the index, and at its end writes the whole log there, as a single host does; a
//! message is acknowledged only once recorded, so an index that is away delays the record and
//! loses nothing.
//!
//! Jobs are a work-queue stream (`recap.jobs.<device>`), one durable pull consumer per device
//! shared by every worker that has it: each job goes to one worker. A worker keeps its job's
//! acknowledgement alive while it runs (progress every third of the ack wait); a worker killed
//! mid-session stops doing so, and after the ack wait JetStream delivers the job again to another
//! worker, which runs the session again from the start after a note to its viewers. Workers say
//! they are alive and what devices they have on `recap.workers.<name>` every
//! [`HEARTBEAT`]; a replica forgets one not heard from for [`WORKER_EXPIRY`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use shared::protocol::{DeviceInfo, Event, SessionInfo, SessionMessage};

use crate::store::{Store, StoreError};

/// The stream of jobs (work queue).
pub const JOBS: &str = "RECAP_JOBS";
/// The stream of every session's messages.
pub const EVENTS: &str = "RECAP_EVENTS";
/// How long the event stream keeps a session's messages (the index keeps them for good).
const EVENTS_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often a worker says it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// A worker not heard from for this long is gone.
pub const WORKER_EXPIRY: Duration = Duration::from_secs(7);
/// How long a request to NATS may take before the queue counts as unreachable.
const TIMEOUT: Duration = Duration::from_secs(3);
/// Most times a job runs: one whose workers keep dying (the session may be what kills them) fails
/// instead of taking worker after worker down.
pub const MAX_RUNS: i64 = 3;

/// What viewers are told when a session runs again because its worker stopped.
pub const REDELIVERED: &str =
    "the worker running this session stopped before it ended (it was killed or lost): the session runs again from the start";
/// What viewers are told when a worker stopping cleanly hands its session back.
pub const WORKER_STOPPING: &str =
    "the worker running this session is stopping: the session is queued again and runs from the start on another worker";

/// The subject token of a device (`cuda:0` as `cuda-0`).
fn token(device: &str) -> String {
    device.replace([':', '.', '*', '>', ' '], "-")
}

pub fn jobs_subject(device: &str) -> String {
    format!("recap.jobs.{}", token(device))
}

pub fn events_subject(session: &str) -> String {
    format!("recap.events.{session}")
}

pub fn cancel_subject(session: &str) -> String {
    format!("recap.cancel.{session}")
}

pub fn heartbeat_subject(worker: &str) -> String {
    format!("recap.workers.{}", token(worker))
}

/// The durable consumer of a device's jobs, shared by every worker that has the device.
pub fn jobs_consumer(device: &str) -> String {
    format!("jobs-{}", token(device))
}

/// A job: a session and everything a worker needs to run it without the index.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QueuedJob {
    pub session: SessionInfo,
    /// The archive's blake3 hash (its key in the blob store).
    pub archive_hash: String,
    /// For a comparison against another archive: that archive's hash.
    #[serde(default)]
    pub against_hash: Option<String>,
    /// Replacement initial bytes of named bindings, base64.
    #[serde(default)]
    pub bindings: Vec<(String, String)>,
    /// What the archive may make a CPU replay allocate and launch, and the session defaults of
    /// the replica that queued it.
    pub limits: JobLimits,
}

/// The host's session limits a job carries to its worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobLimits {
    pub replay: shared::replay::ReplayLimits,
    pub default_budget: u64,
    pub max_budget: u64,
    pub default_time_limit_s: u64,
    pub max_time_limit_s: u64,
}

impl From<&super::SessionLimits> for JobLimits {
    fn from(l: &super::SessionLimits) -> Self {
        JobLimits {
            replay: l.replay,
            default_budget: l.default_budget,
            max_budget: l.max_budget,
            default_time_limit_s: l.default_time_limit_s,
            max_time_limit_s: l.max_time_limit_s,
        }
    }
}

impl From<&JobLimits> for super::SessionLimits {
    fn from(l: &JobLimits) -> Self {
        super::SessionLimits {
            replay: l.replay,
            default_budget: l.default_budget,
            max_budget: l.max_budget,
            default_time_limit_s: l.default_time_limit_s,
            max_time_limit_s: l.max_time_limit_s,
        }
    }
}

/// What a worker says about itself every [`HEARTBEAT`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Unique per worker process: `HOST/PID`, or its `--name`.
    pub worker: String,
    pub devices: Vec<WorkerDeviceInfo>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerDeviceInfo {
    pub id: String,
    pub kind: String,
    pub name: String,
    /// Sessions it is running now (0 or 1).
    pub running: u32,
}

/// A connection to NATS with the streams recap uses.
#[derive(Clone)]
pub struct Queue {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    /// The URL without credentials, for messages.
    pub name: String,
}

impl Queue {
    /// Connects to `url` (`nats://HOST:PORT`) and makes sure the streams exist. Reconnects by
    /// itself when the server goes away and comes back.
    pub async fn connect(url: &str) -> Result<Queue, StoreError> {
        let name = crate::secrets::redact(url);
        let client = async_nats::ConnectOptions::new()
            .name("recap")
            .connection_timeout(TIMEOUT)
            .request_timeout(Some(TIMEOUT))
            .max_reconnects(None)
            .reconnect_delay_callback(|attempts| Duration::from_millis((attempts as u64 * 200).min(2000)))
            .connect(url)
            .await
            .map_err(|e| unreachable(&name, e))?;
        let mut js = jetstream::new(client.clone());
        js.set_timeout(TIMEOUT);
        let queue = Queue { client, js, name };
        queue
            .js
            .get_or_create_stream(stream::Config {
                name: JOBS.into(),
                subjects: vec!["recap.jobs.>".into()],
                retention: stream::RetentionPolicy::WorkQueue,
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .map_err(|e| queue.error("creating the jobs stream", e))?;
        queue
            .js
            .get_or_create_stream(stream::Config {
                name: EVENTS.into(),
                subjects: vec!["recap.events.>".into()],
                retention: stream::RetentionPolicy::Limits,
                storage: stream::StorageType::File,
                max_age: EVENTS_MAX_AGE,
                allow_direct: true,
                ..Default::default()
            })
            .await
            .map_err(|e| queue.error("creating the events stream", e))?;
        Ok(queue)
    }

    /// The error of `doing` something: the queue counts as unreachable while the client is not
    /// connected or a request timed out.
    pub fn error(&self, doing: &str, e: impl std::fmt::Display) -> StoreError {
        let message = e.to_string();
        let disconnected = self.client.connection_state() != async_nats::connection::State::Connected;
        let unreachable = disconnected || message.contains("timed out") || message.contains("no responders");
        StoreError::Backend {
            what: if unreachable {
                format!("queue {} unreachable while {doing}", self.name)
            } else {
                format!("queue {} while {doing}", self.name)
            },
            message,
            unreachable,
        }
    }

    fn check_connected(&self, doing: &str) -> Result<(), StoreError> {
        if self.client.connection_state() == async_nats::connection::State::Connected {
            Ok(())
        } else {
            Err(self.error(doing, "not connected"))
        }
    }

    /// Appends `message` to a session's log (waits for JetStream to store it).
    pub async fn publish_event(&self, session: &str, message: SessionMessage) -> Result<(), StoreError> {
        self.check_connected("recording a session message")?;
        let event = Event { seq: 0, time_us: super::now_us(), message };
        let payload = serde_json::to_vec(&event).expect("events serialise");
        let ack = self
            .js
            .publish(events_subject(session), payload.into())
            .await
            .map_err(|e| self.error("recording a session message", e))?;
        ack.await.map_err(|e| self.error("recording a session message", e))?;
        Ok(())
    }

    /// Queues a job for its device.
    pub async fn enqueue(&self, device: &str, job: &QueuedJob) -> Result<(), StoreError> {
        self.check_connected("queueing a session")?;
        let payload = serde_json::to_vec(job).expect("jobs serialise");
        let max = self.client.server_info().max_payload;
        if max > 0 && payload.len() > max {
            return Err(StoreError::Config(format!(
                "the session's job is {} bytes, over the {max} bytes the queue {} takes in a message (its bindings are too large: put large inputs in the archive itself)",
                payload.len(),
                self.name
            )));
        }
        let ack = self
            .js
            .publish(jobs_subject(device), payload.into())
            .await
            .map_err(|e| self.error("queueing a session", e))?;
        ack.await.map_err(|e| self.error("queueing a session", e))?;
        Ok(())
    }

    /// The last message of a session's log, if it has one.
    pub async fn last_event(&self, session: &str) -> Result<Option<Event>, StoreError> {
        let stream = self.js.get_stream_no_info(EVENTS).await.map_err(|e| self.error("reading a session's log", e))?;
        match stream.get_last_raw_message_by_subject(&events_subject(session)).await {
            Ok(raw) => Ok(serde_json::from_slice(&raw.payload).ok()),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(self.error("reading a session's log", e)),
        }
    }

    /// Follows a session's log from its first message: the lines viewers get (numbered by their
    /// place in the log), ending after the terminal message.
    pub async fn follow(&self, session: &str) -> Result<tokio::sync::mpsc::Receiver<Arc<str>>, StoreError> {
        let mut messages = self.ordered(session, "following a session").await?;
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let name = self.name.clone();
        let session = session.to_string();
        tokio::spawn(async move {
            let mut seq = 0u64;
            while let Some(message) = messages.next().await {
                let message = match message {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(session, queue = name, "following a session's log: {e}");
                        return;
                    }
                };
                let Ok(mut event) = serde_json::from_slice::<Event>(&message.payload) else { continue };
                event.seq = seq;
                seq += 1;
                let ended = event.message.terminal_state().is_some();
                let line: Arc<str> = serde_json::to_string(&event).expect("events serialise").into();
                if tx.send(line).await.is_err() || ended {
                    return;
                }
            }
        });
        Ok(rx)
    }

    /// A session's log up to (and with) the message stored as `last` in the stream, numbered.
    pub async fn history(&self, session: &str, last: u64) -> Result<Vec<Event>, StoreError> {
        let mut messages = self.ordered(session, "reading a session's log").await?;
        let mut out = Vec::new();
        loop {
            let next = tokio::time::timeout(TIMEOUT, messages.next())
                .await
                .map_err(|_| self.error("reading a session's log", "timed out"))?;
            let Some(message) = next else { break };
            let message = message.map_err(|e| self.error("reading a session's log", e))?;
            let sequence = message.info().map(|i| i.stream_sequence).unwrap_or(0);
            if let Ok(mut event) = serde_json::from_slice::<Event>(&message.payload) {
                event.seq = out.len() as u64;
                out.push(event);
            }
            if sequence >= last {
                break;
            }
        }
        Ok(out)
    }

    async fn ordered(&self, session: &str, doing: &str) -> Result<consumer::pull::Ordered, StoreError> {
        self.check_connected(doing)?;
        let stream = self.js.get_stream_no_info(EVENTS).await.map_err(|e| self.error(doing, e))?;
        let consumer = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: events_subject(session),
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| self.error(doing, e))?;
        consumer.messages().await.map_err(|e| self.error(doing, e))
    }

    /// Asks the worker running a session to cancel it; `false` when no worker runs it (it waits
    /// in the queue).
    pub async fn cancel(&self, session: &str) -> Result<bool, StoreError> {
        self.check_connected("cancelling a session")?;
        match self.client.request(cancel_subject(session), "cancel".into()).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == async_nats::client::RequestErrorKind::NoResponders => Ok(false),
            Err(e) if e.kind() == async_nats::client::RequestErrorKind::TimedOut => Ok(false),
            Err(e) => Err(self.error("cancelling a session", e)),
        }
    }
}

fn unreachable(name: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend { what: format!("queue {name} unreachable"), message: e.to_string(), unreachable: true }
}

/// A replica's side of the cluster: the queue, the workers it has heard of, the recorder.
pub struct Cluster {
    pub queue: Queue,
    workers: Mutex<HashMap<String, (Heartbeat, Instant)>>,
    /// Jobs waiting per device, as last counted.
    waiting: Mutex<HashMap<String, u32>>,
}

impl Cluster {
    /// Connects and starts the replica's background tasks: listening to heartbeats, counting
    /// waiting jobs, and recording sessions in `store`'s index.
    pub async fn start(url: &str, store: Arc<Store>) -> Result<Arc<Cluster>, StoreError> {
        let queue = Queue::connect(url).await?;
        let cluster = Arc::new(Cluster { queue, workers: Default::default(), waiting: Default::default() });
        let beats = cluster
            .queue
            .client
            .subscribe("recap.workers.*")
            .await
            .map_err(|e| cluster.queue.error("listening to workers", e))?;
        tokio::spawn(listen(Arc::downgrade(&cluster), beats));
        tokio::spawn(count_waiting(Arc::downgrade(&cluster)));
        tokio::spawn(record(cluster.queue.clone(), store));
        Ok(cluster)
    }

    /// The workers heard from lately.
    fn live_workers(&self) -> Vec<Heartbeat> {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        workers.retain(|_, (_, seen)| seen.elapsed() < WORKER_EXPIRY);
        let mut out: Vec<Heartbeat> = workers.values().map(|(b, _)| b.clone()).collect();
        out.sort_by(|a, b| a.worker.cmp(&b.worker));
        out
    }

    /// Every device some live worker has, with the workers that have it; `cpu` is always there
    /// (its sessions wait for a CPU worker).
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let mut devices: Vec<DeviceInfo> = Vec::new();
        for beat in self.live_workers() {
            for d in beat.devices {
                let i = match devices.iter().position(|x| x.id == d.id) {
                    Some(i) => i,
                    None => {
                        devices.push(DeviceInfo {
                            id: d.id.clone(),
                            kind: d.kind.clone(),
                            name: d.name.clone(),
                            concurrency: 0,
                            running: 0,
                            queued: 0,
                            workers: Vec::new(),
                        });
                        devices.len() - 1
                    }
                };
                devices[i].concurrency += 1;
                devices[i].running += d.running;
                devices[i].workers.push(beat.worker.clone());
            }
        }
        if !devices.iter().any(|d| d.id == "cpu") {
            devices.push(DeviceInfo {
                id: "cpu".into(),
                kind: "cpu".into(),
                name: "CPU (no worker yet)".into(),
                concurrency: 0,
                running: 0,
                queued: 0,
                workers: Vec::new(),
            });
        }
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        for d in &mut devices {
            d.queued = waiting.get(&d.id).copied().unwrap_or(0);
        }
        devices.sort_by(|a, b| (a.kind != "cpu", &a.id).cmp(&(b.kind != "cpu", &b.id)));
        devices
    }

    /// The device a request names, as workers call it: `cuda` is the first CUDA device a worker
    /// has; `cpu` is always known.
    pub fn device(&self, id: &str) -> Option<String> {
        let devices = self.devices();
        if id == "cuda" {
            return devices.iter().find(|d| d.kind == "cuda").map(|d| d.id.clone());
        }
        devices.iter().find(|d| d.id == id).map(|d| d.id.clone())
    }
}

async fn listen(cluster: std::sync::Weak<Cluster>, mut beats: async_nats::Subscriber) {
    while let Some(message) = beats.next().await {
        let Some(cluster) = cluster.upgrade() else { return };
        if let Ok(beat) = serde_json::from_slice::<Heartbeat>(&message.payload) {
            cluster
                .workers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(beat.worker.clone(), (beat, Instant::now()));
        }
    }
}

/// Counts the jobs waiting for each known device, every heartbeat.
async fn count_waiting(cluster: std::sync::Weak<Cluster>) {
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        let Some(cluster) = cluster.upgrade() else { return };
        let Ok(stream) = cluster.queue.js.get_stream_no_info(JOBS).await else { continue };
        let ids: Vec<String> = cluster.devices().into_iter().map(|d| d.id).collect();
        let mut counted = HashMap::new();
        for id in ids {
            if let Ok(info) = stream.consumer_info(jobs_consumer(&id)).await {
                counted.insert(id, info.num_pending as u32);
            }
        }
        *cluster.waiting.lock().unwrap_or_else(|e| e.into_inner()) = counted;
    }
}

/// The name of the durable consumer through which replicas record sessions in the index.
const RECORDER: &str = "recorder";

/// Records every session's state changes and, at its end, its whole log in the index. Shared by
/// all replicas (each message goes to one of them); a message is acknowledged once recorded and
/// comes back later when the index could not take it.
async fn record(queue: Queue, store: Arc<Store>) {
    loop {
        if let Err(e) = record_from(&queue, &store).await {
            tracing::warn!("recording sessions from {}: {e}; trying again", queue.name);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn record_from(queue: &Queue, store: &Arc<Store>) -> Result<(), StoreError> {
    let stream = queue.js.get_stream_no_info(EVENTS).await.map_err(|e| queue.error("recording sessions", e))?;
    let consumer: consumer::PullConsumer = stream
        .get_or_create_consumer(
            RECORDER,
            consumer::pull::Config {
                durable_name: Some(RECORDER.into()),
                filter_subject: "recap.events.>".into(),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| queue.error("recording sessions", e))?;
    let mut messages = consumer.messages().await.map_err(|e| queue.error("recording sessions", e))?;
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| queue.error("recording sessions", e))?;
        let Some(session) = message.subject.as_str().strip_prefix("recap.events.").map(str::to_string) else {
            let _ = message.ack().await;
            continue;
        };
        let sequence = message.info().map(|i| i.stream_sequence).unwrap_or(0);
        let Ok(event) = serde_json::from_slice::<Event>(&message.payload) else {
            let _ = message.ack().await;
            continue;
        };
        match record_one(queue, store, &session, event, sequence).await {
            Ok(()) => {
                let _ = message.ack().await;
            }
            Err(e) => {
                tracing::warn!(session, "recording a session message: {e}; trying again");
                let _ = message.ack_with(jetstream::AckKind::Nak(Some(Duration::from_secs(1)))).await;
            }
        }
    }
    Ok(())
}

async fn record_one(
    queue: &Queue,
    store: &Arc<Store>,
    session: &str,
    event: Event,
    sequence: u64,
) -> Result<(), StoreError> {
    let index = store.index.clone();
    let id = session.to_string();
    let Some(record) = tokio::task::spawn_blocking(move || index.session(&id)).await.expect("no panic")? else {
        return Ok(());
    };
    let mut info = record.info;
    if info.state.is_terminal() {
        return Ok(());
    }
    let index = store.index.clone();
    match &event.message {
        SessionMessage::State { state, .. } if !state.is_terminal() && *state != info.state => {
            info.state = *state;
            tokio::task::spawn_blocking(move || index.update_session(&info)).await.expect("no panic")
        }
        message if message.terminal_state().is_some() => {
            let events = queue.history(session, sequence).await?;
            super::settle_outcome(&mut info, &event.message, &events);
            tokio::task::spawn_blocking(move || index.save_session(&info, &events)).await.expect("no panic")
        }
        _ => Ok(()),
    }
}
