//! The host: an axum server over the [`Store`] and [`Sessions`], plus the viewer's static files.
//!
//! The key design decision: the server is a thin HTTP skin. Storage sits behind the store's
//! traits and replay behind the sessions' engines, so handlers only translate requests and errors;
//! blocking work (SQLite, fsync, validation, replay) always runs on blocking threads, never on the
//! async workers that move bytes.

mod access;
mod archives;
mod error;
mod regions;
mod sessions;
mod web;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::sessions::{Backend, Sessions};
use crate::store::Store;

pub use error::ApiError;
pub use sessions::MAX_CLIENT_MESSAGE;

/// Requests whose bodies the host read (uploads and JSON requests), counted as they end, whatever
/// their outcome: what `recap serve` watches to give memory back once a burst is over.
static BODIES_DONE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many requests with bodies have ended since the host started.
pub fn bodies_done() -> u64 {
    BODIES_DONE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts a request with a body as ended when dropped.
pub(crate) struct BodyDone;

impl Drop for BodyDone {
    fn drop(&mut self) {
        BODIES_DONE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Default upload limit: 4 GiB.
pub const DEFAULT_MAX_UPLOAD: u64 = 4 << 30;
/// Largest JSON request body (a session request with base64 bindings).
pub const MAX_JSON_BODY: usize = 64 << 20;
/// Uploads streamed to disk at once; later ones wait (their bodies stay in the socket) so that a
/// burst of uploads cannot grow the host's memory without bound.
pub const CONCURRENT_UPLOADS: usize = 4;
/// JSON request bytes held at once, over all requests; a request waits for its share before its
/// body is read. Parsing and decoding a body takes about three times its size.
pub const JSON_BYTES_IN_FLIGHT: usize = 64 << 20;

/// How `recap serve` was asked to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub addr: String,
    pub data: PathBuf,
    /// Required for every API call when set.
    pub token: Option<String>,
    pub web: Option<PathBuf>,
    pub seed: Option<PathBuf>,
    pub max_upload: u64,
    /// Host names (optionally `NAME:PORT`) this host answers to besides its addresses (`--allow-host`).
    pub allow_hosts: Vec<String>,
    /// Origins of pages elsewhere that may call the API (`--allow-origin`).
    pub allow_origins: Vec<String>,
    /// What a session may use, and its defaults.
    pub session_limits: crate::sessions::SessionLimits,
    /// The `recap` executable whose `session-worker` runs each session in a process of its own
    /// (and `cuda-probe` finds a faulting op); `None` runs CPU sessions inside the host and
    /// turns CUDA sessions off.
    pub worker: Option<PathBuf>,
    /// Where archives are kept: an `s3://` URL; `None`: files in `data`.
    pub blobs: Option<String>,
    /// Where the index is: a `postgres://` URL; `None`: SQLite in `data`.
    pub index: Option<String>,
    /// A `nats://` URL: sessions become jobs for `recap worker` processes; `None`: this host runs
    /// them on its own devices.
    pub queue: Option<String>,
}

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    pub sessions: Arc<Sessions>,
    pub config: Arc<Settings>,
    /// Cancelled when the host begins to shut down: WebSockets close on it.
    pub shutdown: CancellationToken,
}

/// The settings handlers need, resolved at start.
pub struct Settings {
    /// Token, view token, allowed hosts and origins.
    pub access: access::Access,
    pub max_upload: u64,
    /// `HOST:PORT` as printed, for links when a request carries no `Host`.
    pub authority: String,
    /// Permits for uploads in progress ([`CONCURRENT_UPLOADS`]).
    pub uploads: tokio::sync::Semaphore,
    /// Permits for JSON request bodies, one per KiB ([`JSON_BYTES_IN_FLIGHT`]).
    pub json_kib: tokio::sync::Semaphore,
    /// The data folder as given and as resolved: error answers name paths inside it relative to it.
    pub data_paths: Vec<String>,
    /// What a replay may be asked for: Warp captures over it are refused at conversion.
    pub replay_limits: shared::replay::ReplayLimits,
}

/// The data folder's spellings an error message may hold (as given, absolute, resolved), longest
/// first so that a longer one is replaced before a prefix of it.
fn data_paths(data: &std::path::Path) -> Vec<String> {
    let mut paths = vec![data.display().to_string()];
    paths.extend(std::path::absolute(data).ok().map(|p| p.display().to_string()));
    paths.extend(data.canonicalize().ok().map(|p| p.display().to_string()));
    paths.retain(|p| !p.is_empty() && p != "." && p != "/");
    paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
    paths.dedup();
    paths
}

/// The API routes, all behind the token check.
fn api(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/archives", post(archives::upload).get(archives::list).layer(DefaultBodyLimit::disable()))
        .route("/archives/{id}", get(archives::get).delete(archives::delete))
        .route("/archives/{id}/raw", get(archives::raw))
        .route(
            "/archives/{id}/regions/{name}",
            get(regions::archive_region)
                .layer(axum::middleware::from_fn_with_state(state.clone(), access::region_reads)),
        )
        .route("/devices", get(sessions::devices))
        .route("/sessions", post(sessions::create).get(sessions::list))
        .route("/sessions/{id}", get(sessions::get))
        .route("/sessions/{id}/cancel", post(sessions::cancel))
        .route("/sessions/{id}/ws", get(sessions::websocket))
        .route(
            "/sessions/{id}/regions/{name}",
            get(regions::session_region)
                .layer(axum::middleware::from_fn_with_state(state.clone(), access::region_reads)),
        )
        .fallback(|| async { ApiError::not_found("no such API endpoint; docs/API.md lists them") })
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(axum::middleware::from_fn_with_state(state.clone(), access::require_token))
        .layer(axum::middleware::from_fn_with_state(state.clone(), access::cross_origin))
        .layer(axum::middleware::from_fn_with_state(state, access::json_errors))
}

/// The whole application: `/api`, the viewer's files, and its client-side routes.
pub fn router(state: AppState, viewer: web::Viewer) -> Router {
    let mut app = Router::new().nest("/api", api(state.clone()));
    match viewer {
        web::Viewer::Dir(dir) => {
            let index = tower_http::services::ServeFile::new(dir.join("index.html"));
            app = app
                .route_service("/archives/{id}", index.clone())
                .route_service("/sessions/{id}", index)
                .fallback_service(tower_http::services::ServeDir::new(dir));
        }
        web::Viewer::Embedded => app = app.fallback(web::embedded),
        web::Viewer::Missing => app = app.fallback(web::not_built),
    }
    app.layer(axum::middleware::from_fn_with_state(state.clone(), access::check_host))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

/// The engines of this machine: the CPU always, and every CUDA device found, each replaying in
/// worker processes of `worker` (`recap session-worker`) so that no session can take the host
/// down. Without a worker executable the CPU replays in the host itself.
pub fn backends(worker: Option<&std::path::Path>) -> Vec<Arc<dyn Backend>> {
    match worker {
        Some(exe) => {
            let mut engines: Vec<Arc<dyn Backend>> = vec![Arc::new(crate::sessions::WorkerBackend::cpu(exe))];
            engines.extend(crate::sessions::cuda_backends(exe));
            engines
        }
        None => {
            tracing::warn!("no worker executable: CPU sessions run inside the host, CUDA sessions are off");
            vec![Arc::new(crate::sessions::CpuBackend::new())]
        }
    }
}

/// Imports every `*.recap` in `dir` (sorted by name); invalid ones are logged and skipped.
fn seed(store: &Store, dir: &std::path::Path, limit: u64) -> anyhow::Result<()> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading seed folder {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "recap") && p.is_file())
        .collect();
    files.sort();
    for path in files {
        match store.import_file(&path, None, limit) {
            Ok(done) if done.created => tracing::info!(id = done.archive.id, path = %path.display(), "seeded"),
            Ok(done) => tracing::debug!(id = done.archive.id, path = %path.display(), "already stored"),
            Err(e) => tracing::warn!(path = %path.display(), "not seeded: {e}"),
        }
    }
    Ok(())
}

/// Resolves when the process is asked to stop (Ctrl-C or SIGTERM).
async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

/// How long in-flight requests get to finish after a stop signal.
const DRAIN: Duration = Duration::from_secs(30);

/// Runs the host until Ctrl-C or SIGTERM. Prints `http://HOST:PORT` on stdout once listening.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let (data, blobs, index) = (config.data.clone(), config.blobs.clone(), config.index.clone());
    let store = tokio::task::spawn_blocking(move || Store::open(&data, blobs.as_deref(), index.as_deref()))
        .await?
        .with_context(|| format!("opening the store (data folder {})", config.data.display()))?;
    let store = Arc::new(store);
    if let Some(dir) = &config.seed {
        let (store, dir, limit) = (store.clone(), dir.clone(), config.max_upload);
        tokio::task::spawn_blocking(move || seed(&store, &dir, limit)).await??;
    }
    let sessions = match &config.queue {
        Some(url) => {
            let cluster = crate::sessions::queue::Cluster::start(url, store.clone()).await?;
            tracing::info!(queue = cluster.queue.name, "sessions run on the cluster's workers");
            Sessions::start_cluster(store.clone(), cluster, config.session_limits.clone())
        }
        None => {
            let (store, worker, limits) = (store.clone(), config.worker.clone(), config.session_limits.clone());
            tokio::task::spawn_blocking(move || Sessions::start(store, backends(worker.as_deref()), limits)).await??
        }
    };

    let listener =
        tokio::net::TcpListener::bind(&config.addr).await.with_context(|| format!("binding {}", config.addr))?;
    let local: SocketAddr = listener.local_addr()?;
    let token = match config.token.clone() {
        Some(t) if t.is_empty() => anyhow::bail!("--token must not be empty"),
        Some(t) => Some(t),
        None if local.ip().is_loopback() => None,
        None => {
            let t = crate::secrets::random_id();
            eprintln!("recap: {local} is reachable beyond this machine; API access token: {t}");
            Some(t)
        }
    };
    let viewer = web::Viewer::find(config.web.as_deref());
    match &viewer {
        web::Viewer::Dir(dir) if dir.join("index.html").is_file() => {
            tracing::info!(web = %dir.display(), "serving the viewer")
        }
        web::Viewer::Dir(dir) => tracing::warn!(web = %dir.display(), "no index.html in the web folder"),
        web::Viewer::Embedded => tracing::info!("serving the viewer built into this binary"),
        web::Viewer::Missing => {
            tracing::warn!("this binary has no viewer and no web/ folder was found; run `cargo xtask wasm`; the API works without it")
        }
    }
    let shutdown = CancellationToken::new();
    let state = AppState {
        store,
        sessions: sessions.clone(),
        config: Arc::new(Settings {
            access: access::Access::new(local, &config.allow_hosts, &config.allow_origins, token),
            max_upload: config.max_upload,
            authority: local.to_string(),
            uploads: tokio::sync::Semaphore::new(CONCURRENT_UPLOADS),
            json_kib: tokio::sync::Semaphore::new(JSON_BYTES_IN_FLIGHT >> 10),
            data_paths: data_paths(&config.data),
            replay_limits: config.session_limits.replay,
        }),
        shutdown: shutdown.clone(),
    };
    let app = router(state, viewer);

    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "http://{local}")?;
    stdout.flush()?;
    drop(stdout);
    tracing::info!(addr = %local, data = %config.data.display(), "listening");

    let stopping = shutdown.clone();
    let graceful = async move {
        stop_signal().await;
        tracing::info!("stopping: finishing requests, cancelling replays");
        stopping.cancel();
        sessions.shutdown().await;
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(graceful);
    tokio::select! {
        result = server => result.context("serving HTTP")?,
        _ = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN).await } => {
            tracing::warn!("requests still open after {}s; stopping anyway", DRAIN.as_secs());
        }
    }
    tracing::info!("stopped");
    Ok(())
}
