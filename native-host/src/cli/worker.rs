//! `recap worker`: takes replay sessions from a cluster's queue (hosts started with `recap serve
//! --queue`) and runs them on this machine's devices.

use std::path::PathBuf;

use anyhow::Context;
use recap_host::sessions::worker::{run as run_worker, WorkerConfig};

/// Run the sessions of a cluster's queue on this machine's devices
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue the hosts put sessions on: `nats://HOST:PORT`.
    #[arg(long, value_name = "URL", env = "RECAP_QUEUE")]
    pub queue: String,
    /// A device to take sessions for: `cpu` or `cuda:N`; repeatable.
    #[arg(long = "device", value_name = "DEVICE", required = true)]
    pub devices: Vec<String>,
    /// Where the hosts keep archives: the same `s3://...` URL as their --blobs; without it, the
    /// `blobs/` of --data (a worker beside a host that keeps archives in its data folder).
    #[arg(long, value_name = "URL", env = "RECAP_BLOBS")]
    pub blobs: Option<String>,
    /// This worker's folder: its cache of archives and what its sessions keep.
    #[arg(long, default_value = "worker-data")]
    pub data: PathBuf,
    /// Seconds a session may go without a sign of life from this worker before the queue gives
    /// it to another worker (the worker signals every third of it while it runs).
    #[arg(long, default_value_t = 30)]
    pub ack_wait: u64,
    /// This worker's name in /api/devices (default HOST/PID).
    #[arg(long)]
    pub name: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    super::serve::init_logging();
    anyhow::ensure!(args.ack_wait >= 3, "--ack-wait must be at least 3 seconds, got {}", args.ack_wait);
    std::fs::create_dir_all(&args.data).with_context(|| format!("creating worker folder {}", args.data.display()))?;
    let config = WorkerConfig {
        queue: args.queue,
        blobs: args.blobs,
        data: args.data,
        devices: args.devices,
        exe: std::env::current_exe().context("finding this executable for its session workers")?,
        ack_wait: std::time::Duration::from_secs(args.ack_wait),
        name: args.name,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let stop = tokio_util::sync::CancellationToken::new();
        let stopping = stop.clone();
        tokio::spawn(async move {
            let ctrl_c = tokio::signal::ctrl_c();
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
            tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
            tracing::info!("stopping: a running session goes back to the queue");
            stopping.cancel();
        });
        run_worker(config, stop).await
    })?;
    Ok(())
}
