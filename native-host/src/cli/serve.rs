//! `recap serve`: the host.

use std::path::PathBuf;

use recap::server::{Config, DEFAULT_MAX_UPLOAD};

/// Start the host: stores archives, runs replays, serves the web viewer.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address to listen on; port 0 picks a free one. Beyond loopback an access token is required.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// Data folder (created if missing): archives, the index, session results.
    #[arg(long, default_value = "data")]
    pub data: PathBuf,
    /// Access token every API call must present; generated and printed when binding beyond loopback.
    #[arg(long, env = "RECAP_TOKEN")]
    pub token: Option<String>,
    /// The viewer's folder (default: `web/` here, else the repository's `web/`).
    #[arg(long)]
    pub web: Option<PathBuf>,
    /// Import every *.recap in this folder at start (already stored ones are skipped).
    #[arg(long)]
    pub seed: Option<PathBuf>,
    /// Largest accepted upload, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_UPLOAD)]
    pub max_upload: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    keep_freed_memory();
    init_logging();
    let config = Config {
        addr: args.addr,
        data: args.data,
        token: args.token,
        web: args.web,
        seed: args.seed,
        max_upload: args.max_upload,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(recap::server::serve(config))
}

/// Lets glibc keep freed memory for reuse instead of handing it back to the kernel at once.
///
/// Why: an upload passes socket buffers of about 400 KiB through queues to other threads. With
/// glibc's defaults, freeing them at the top of a thread's heap returns the pages to the kernel and
/// the next buffers fault in freshly zeroed ones: about a tenth of the host's CPU time during a
/// 1 GiB upload. Up to 64 MiB free per heap is now kept before trimming; allocations of 8 MiB and
/// more still get mappings of their own (so the validator's lazily zeroed skeleton stays lazy).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() {
    // SAFETY: mallopt only sets allocator parameters; it runs before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 8 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

/// Logs to stderr (stdout carries only the URL), filtered by `RUST_LOG` (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tower_http=warn"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
       .with_env_filter(filter).try_init();
}
