//! `recap worker`: a process that takes sessions from the cluster's queue for the devices it has,
//! runs them through [`super::run_session`] on the same backends a host uses (each session in a
//! `recap session-worker` process of its own), and sends their messages back over NATS
//! ([`super::queue`] describes the subjects and the redelivery of a job whose worker died).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, AckKind};
use futures_util::StreamExt;
use shared::protocol::{SessionMessage, SessionState};
use tokio_util::sync::CancellationToken;

use super::queue::{self, Heartbeat, Queue, QueuedJob, WorkerDeviceInfo};
use super::{run_session, Backend, RunEnd, SessionLimits, SessionRun};
use crate::store::{BlobStore, FsBlobStore, S3BlobStore, StoreError};

/// How `recap worker` was asked to run.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// `nats://HOST:PORT`.
    pub queue: String,
    /// Where archives are: an `s3://` URL, or `None` for the `blobs/` of `data` (a worker beside
    /// a host that keeps its archives in files).
    pub blobs: Option<String>,
    /// This worker's folder: its cache of archives, the region contents its sessions keep.
    pub data: PathBuf,
    /// The devices to take jobs for: `cpu`, `cuda:N`.
    pub devices: Vec<String>,
    /// The `recap` executable, whose `session-worker` runs each session.
    pub exe: PathBuf,
    /// How long a job may go without a sign of life before it is given to another worker.
    pub ack_wait: Duration,
    /// This worker's name in `/api/devices` (default: `HOST/PID`).
    pub name: Option<String>,
}

/// One device of this worker and whether it is busy.
struct DeviceSlot {
    backend: Arc<dyn Backend>,
    running: AtomicU32,
}

/// Runs until Ctrl-C or SIGTERM; a session running then is handed back to the queue.
pub async fn run(config: WorkerConfig, stop: CancellationToken) -> Result<(), StoreError> {
    let queue = Queue::connect(&config.queue).await?;
    let blobs: Arc<dyn BlobStore> = match &config.blobs {
        Some(url) => {
            let (url, data, handle) = (url.clone(), config.data.clone(), tokio::runtime::Handle::current());
            Arc::new(
                tokio::task::spawn_blocking(move || S3BlobStore::open(&url, &data, handle)).await.expect("no panic")?,
            )
        }
        None => Arc::new(FsBlobStore::at(&config.data)),
    };
    let mut slots = Vec::new();
    for id in &config.devices {
        let backend = find_backend(&config.exe, id)?;
        slots.push(Arc::new(DeviceSlot { backend, running: AtomicU32::new(0) }));
    }
    let worker = config.name.clone().unwrap_or_else(|| format!("{}/{}", hostname(), std::process::id()));
    tracing::info!(worker, queue = queue.name, devices = ?config.devices, "worker ready");
    let beats = tokio::spawn(heartbeats(queue.clone(), worker.clone(), slots.clone(), stop.clone()));
    let mut tasks = Vec::new();
    for slot in slots {
        let (queue, blobs, config, stop) = (queue.clone(), blobs.clone(), config.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                if stop.is_cancelled() {
                    return;
                }
                if let Err(e) = take_jobs(&queue, &blobs, &config, &slot, &stop).await {
                    tracing::warn!(device = slot.backend.id(), "taking jobs: {e}; trying again");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = stop.cancelled() => return,
                    }
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    beats.abort();
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into())
}

/// The backend of a device this machine has: `cpu`, or a CUDA device the driver reports.
fn find_backend(exe: &std::path::Path, id: &str) -> Result<Arc<dyn Backend>, StoreError> {
    if id == "cpu" {
        return Ok(Arc::new(super::WorkerBackend::cpu(exe)));
    }
    let found = super::cuda_backends(exe).into_iter().find(|b| b.id() == id || (id == "cuda" && b.kind() == "cuda"));
    found.ok_or_else(|| {
        StoreError::Config(format!(
            "--device {id}: no such device on this machine (cpu, or cuda:N for a GPU the driver reports)"
        ))
    })
}

async fn heartbeats(queue: Queue, worker: String, slots: Vec<Arc<DeviceSlot>>, stop: CancellationToken) {
    let subject = queue::heartbeat_subject(&worker);
    loop {
        let beat = Heartbeat {
            worker: worker.clone(),
            devices: slots
                .iter()
                .map(|s| WorkerDeviceInfo {
                    id: s.backend.id(),
                    kind: s.backend.kind().into(),
                    name: s.backend.name(),
                    running: s.running.load(Ordering::SeqCst),
                })
                .collect(),
        };
        let _ = queue.client.publish(subject.clone(), serde_json::to_vec(&beat).expect("serialises").into()).await;
        tokio::select! {
            _ = tokio::time::sleep(queue::HEARTBEAT) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Takes this device's jobs one at a time until stopped or the queue fails.
async fn take_jobs(
    queue: &Queue,
    blobs: &Arc<dyn BlobStore>,
    config: &WorkerConfig,
    slot: &Arc<DeviceSlot>,
    stop: &CancellationToken,
) -> Result<(), StoreError> {
    let device = slot.backend.id();
    let stream = queue.js.get_stream_no_info(queue::JOBS).await.map_err(|e| queue.error("taking jobs", e))?;
    let name = queue::jobs_consumer(&device);
    let consumer: consumer::PullConsumer = stream
        .get_or_create_consumer(
            &name,
            consumer::pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: queue::jobs_subject(&device),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: config.ack_wait,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| queue.error("taking jobs", e))?;
    while !stop.is_cancelled() {
        let mut batch = consumer
            .batch()
            .max_messages(1)
            .expires(Duration::from_secs(5))
            .messages()
            .await
            .map_err(|e| queue.error("taking jobs", e))?;
        let next = tokio::select! {
            next = batch.next() => next,
            _ = stop.cancelled() => return Ok(()),
        };
        let Some(message) = next else { continue };
        let message = message.map_err(|e| queue.error("taking jobs", e))?;
        slot.running.fetch_add(1, Ordering::SeqCst);
        let result = run_job(queue, blobs, config, slot.backend.clone(), message, stop).await;
        slot.running.fetch_sub(1, Ordering::SeqCst);
        result?;
    }
    Ok(())
}

/// Runs one job to its end and acknowledges it (or hands it back when the worker is stopping).
async fn run_job(
    queue: &Queue,
    blobs: &Arc<dyn BlobStore>,
    config: &WorkerConfig,
    backend: Arc<dyn Backend>,
    message: jetstream::Message,
    stop: &CancellationToken,
) -> Result<(), StoreError> {
    let job: QueuedJob = match serde_json::from_slice(&message.payload) {
        Ok(job) => job,
        Err(e) => {
            tracing::error!("a job that is not one: {e}; dropped");
            let _ = message.ack_with(AckKind::Term).await;
            return Ok(());
        }
    };
    let id = job.session.id.clone();
    let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
    // Ended while it waited (cancelled), or ended by a worker that died before acknowledging.
    if queue.last_event(&id).await?.is_some_and(|e| e.message.terminal_state().is_some()) {
        let _ = message.double_ack().await;
        return Ok(());
    }
    if delivered > queue::MAX_RUNS {
        let error = format!(
            "the session's worker stopped {} times while running it (killed or lost); it is not run again: start a new session to retry",
            delivered - 1
        );
        for m in [SessionMessage::state(SessionState::Failed), SessionMessage::Failed { error }] {
            queue.publish_event(&id, m).await?;
        }
        let _ = message.double_ack().await;
        return Ok(());
    }
    if delivered > 1 {
        let note = SessionMessage::State { state: SessionState::Queued, note: Some(queue::REDELIVERED.into()) };
        queue.publish_event(&id, note).await?;
    }
    tracing::info!(session = id, device = backend.id(), delivered, "running a session");

    let cancel = Arc::new(AtomicBool::new(false));
    let done = CancellationToken::new();
    // Keeps the job ours while it runs.
    let message = Arc::new(message);
    let progress = {
        let (message, done, every) = (message.clone(), done.clone(), config.ack_wait / 3);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => { let _ = message.ack_with(AckKind::Progress).await; }
                    _ = done.cancelled() => return,
                }
            }
        })
    };
    // A viewer's cancel, through any replica.
    let mut cancels =
        queue.client.subscribe(queue::cancel_subject(&id)).await.map_err(|e| queue.error("running a session", e))?;
    let cancelling = {
        let (client, cancel, done) = (queue.client.clone(), cancel.clone(), done.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    request = cancels.next() => {
                        let Some(request) = request else { return };
                        cancel.store(true, Ordering::SeqCst);
                        if let Some(reply) = request.reply {
                            let _ = client.publish(reply, "cancelling".into()).await;
                        }
                    }
                    _ = done.cancelled() => return,
                }
            }
        })
    };
    let stopping = {
        let (cancel, stop, done) = (cancel.clone(), stop.clone(), done.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => cancel.store(true, Ordering::SeqCst),
                _ = done.cancelled() => {}
            }
        })
    };
    // Messages go out in order from one task while the replay runs on a blocking thread.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<SessionMessage>();
    let publisher = {
        let (queue, id) = (queue.clone(), id.clone());
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                let mut wait = Duration::from_millis(100);
                // A queue that is away for a moment delays the messages; they are not lost.
                while let Err(e) = queue.publish_event(&id, m.clone()).await {
                    tracing::warn!(session = id, "sending a session message: {e}; trying again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
            }
        })
    };
    let _ = tx.send(SessionMessage::state(SessionState::Running));
    let end = {
        let (blobs, data, tx, cancel) = (blobs.clone(), config.data.clone(), tx.clone(), cancel.clone());
        tokio::task::spawn_blocking(move || {
            let files = (|| -> Result<_, StoreError> {
                let archive = blobs.local_path(&job.archive_hash)?;
                let against = job.against_hash.as_deref().map(|h| blobs.local_path(h)).transpose()?;
                Ok((archive, against))
            })();
            let (archive, against) = match files {
                Ok(files) => files,
                Err(e) => return RunEnd::Failed(format!("fetching archive {}: {e}", job.session.archive)),
            };
            let bindings = match decode(&job.bindings) {
                Ok(b) => b,
                Err(e) => return RunEnd::Failed(e.to_string()),
            };
            let limits: SessionLimits = (&job.limits).into();
            let keep_dir = data.join("sessions").join(&job.session.id);
            let run = SessionRun {
                info: &job.session,
                archive: &archive,
                against,
                bindings: &bindings,
                cancel: &cancel,
                keep_dir: keep_dir.clone(),
                limits: &limits,
            };
            let end = run_session(backend.as_ref(), &run, &mut |m| {
                let _ = tx.send(m);
            });
            if matches!(end, RunEnd::Finished { .. }) {
                share_kept(blobs.as_ref(), &job.session.id, &keep_dir);
            }
            end
        })
        .await
        .unwrap_or_else(|e| RunEnd::Failed(format!("the worker's replay thread failed: {e}")))
    };
    let handed_back = matches!(end, RunEnd::Cancelled) && stop.is_cancelled();
    let last = match end {
        RunEnd::Finished { check, total_ms } => vec![SessionMessage::Finished { check, total_ms }],
        RunEnd::Cancelled if handed_back => {
            vec![SessionMessage::State { state: SessionState::Queued, note: Some(queue::WORKER_STOPPING.into()) }]
        }
        RunEnd::Cancelled => vec![SessionMessage::Cancelled],
        RunEnd::Failed(error) => vec![SessionMessage::Failed { error }],
    };
    for m in last {
        if let Some(state) = m.terminal_state() {
            let _ = tx.send(SessionMessage::state(state));
        }
        let _ = tx.send(m);
    }
    drop(tx);
    let _ = publisher.await;
    done.cancel();
    let _ = tokio::join!(progress, cancelling, stopping);
    if handed_back {
        let _ = message.ack_with(AckKind::Nak(None)).await;
        tracing::info!(session = id, "handed back to the queue");
    } else {
        let _ = message.double_ack().await;
        tracing::info!(session = id, "session ended");
    }
    Ok(())
}

/// Puts the region contents a finished session kept where the replicas serve them from (a remote
/// blob store), and lets the local copies go.
fn share_kept(blobs: &dyn BlobStore, session: &str, dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut shared = true;
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let put = std::fs::read(entry.path())
            .map_err(|e| e.to_string())
            .and_then(|bytes| blobs.put_kept(session, &file, bytes).map_err(|e| e.to_string()));
        match put {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(session, file, "region contents not shared: {e}");
                shared = false;
            }
        }
    }
    if shared {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A job's binding whose contents are not base64.
#[derive(Debug, thiserror::Error)]
#[error("binding {name:?} is not valid base64: {source}")]
struct BadBinding {
    name: String,
    source: base64::DecodeError,
}

fn decode(bindings: &[(String, String)]) -> Result<Vec<(String, Vec<u8>)>, BadBinding> {
    use base64::Engine as _;
    bindings
        .iter()
        .map(|(name, text)| {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map(|bytes| (name.clone(), bytes))
                .map_err(|source| BadBinding { name: name.clone(), source })
        })
        .collect()
}
