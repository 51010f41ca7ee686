//! `recap serve`: the host.

use std::path::PathBuf;

use recap_host::server::{Config, DEFAULT_MAX_UPLOAD};
use recap_host::sessions::SessionLimits;

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
    /// A host name (or NAME:PORT) this host answers to besides its IP addresses and localhost, such
    /// as the name a reverse proxy or a team's DNS gives it; repeatable. Requests naming any other
    /// host are refused (DNS rebinding).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// An origin (`https://viewer.example:8443`) whose pages may call the API from the browser;
    /// repeatable. Pages this host serves always may.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// Keep archives in an S3-compatible object store instead of the data folder:
    /// `s3://BUCKET[/PREFIX]?endpoint=URL&region=R` (credentials from AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY, or `access_key_id=`/`secret_access_key=` in the query;
    /// `cache_gib=N` bounds the local cache of archives fetched for replays, 20 by default).
    #[arg(long, value_name = "URL", env = "RECAP_BLOBS")]
    pub blobs: Option<String>,
    /// Keep the index of archives and sessions in PostgreSQL instead of SQLite in the data folder:
    /// `postgres://USER[:PASSWORD]@HOST:PORT/DB`.
    #[arg(long, value_name = "URL", env = "RECAP_INDEX")]
    pub index: Option<String>,
    /// Run sessions as jobs on NATS JetStream (`nats://HOST:PORT`), taken by `recap worker`
    /// processes on any machine, instead of on this host's devices; any number of hosts sharing
    /// the same --blobs, --index and --queue serve the same archives and sessions.
    #[arg(long, value_name = "URL", env = "RECAP_QUEUE")]
    pub queue: Option<String>,
    #[command(flatten)]
    pub limits: super::limits::LimitArgs,
    /// Instruction budget of one CPU iteration for sessions that ask for none.
    #[arg(long, default_value_t = SessionLimits::default().default_budget)]
    pub default_budget: u64,
    /// The largest budget a session may ask for.
    #[arg(long, default_value_t = SessionLimits::default().max_budget)]
    pub max_budget: u64,
    /// Seconds a session may run when it asks for no limit of its own.
    #[arg(long, default_value_t = SessionLimits::default().default_time_limit_s)]
    pub session_time_limit: u64,
    /// The longest time limit (seconds) a session may ask for.
    #[arg(long, default_value_t = SessionLimits::default().max_time_limit_s)]
    pub max_session_time_limit: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.default_budget > args.max_budget || args.session_time_limit > args.max_session_time_limit {
        anyhow::bail!(
            "--default-budget and --session-time-limit must not be over --max-budget and --max-session-time-limit"
        );
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    keep_freed_memory();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    trim_when_idle();
    init_logging();
    let config = Config {
        addr: args.addr,
        data: args.data,
        token: args.token,
        web: args.web,
        seed: args.seed,
        max_upload: args.max_upload,
        allow_hosts: args.allow_hosts,
        allow_origins: args.allow_origins,
        session_limits: SessionLimits {
            replay: args.limits.limits(),
            default_budget: args.default_budget,
            max_budget: args.max_budget,
            default_time_limit_s: args.session_time_limit,
            max_time_limit_s: args.max_session_time_limit,
        },
        // This executable is `recap`: its `session-worker` command runs each session.
        worker: std::env::current_exe().ok(),
        blobs: args.blobs,
        index: args.index,
        queue: args.queue,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(recap_host::server::serve(config))
}

/// Lets glibc keep some freed memory for reuse, but not without bound.
///
/// Why: an upload passes socket buffers of about 400 KiB through queues to other threads. With
/// glibc's defaults, freeing them at the top of a thread's heap returns the pages to the kernel and
/// the next buffers fault in freshly zeroed ones: about a tenth of the host's CPU time during a
/// 1 GiB upload. Up to 16 MiB free per heap is now kept before trimming, in at most four heaps (glibc
/// would otherwise make up to eight per core, each keeping its own free memory, so the host's
/// resident memory after a burst of requests would be many times what it needs at rest).
/// Allocations of 8 MiB and more still get mappings of their own (so the validator's lazily zeroed
/// skeleton stays lazy).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn keep_freed_memory() {
    // SAFETY: mallopt only sets allocator parameters; it runs before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 8 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 16 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 4);
    }
}

/// Gives the memory a burst of requests left in glibc's heaps back to the system once the burst is
/// over: [`keep_freed_memory`] keeps freed memory for the next request of a burst (where returning
/// and re-faulting pages costs CPU), so after one the host would stay at its peak. Once requests
/// have ended and none has ended for two seconds, the heaps are trimmed, once per quiet spell.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_when_idle() {
    const QUIET: std::time::Duration = std::time::Duration::from_secs(2);
    let spawned = std::thread::Builder::new().name("idle-trim".into()).spawn(|| {
        let (mut seen, mut trimmed) = (0, 0);
        loop {
            std::thread::sleep(QUIET);
            let now = recap_host::server::bodies_done();
            if now == seen && now != trimmed {
                // SAFETY: malloc_trim only returns free memory of the allocator's heaps.
                unsafe { libc::malloc_trim(0) };
                trimmed = now;
            }
            seen = now;
        }
    });
    if let Err(e) = spawned {
        eprintln!("warning: memory will not be returned after bursts of requests: {e}");
    }
}

/// Libraries whose `info` and `debug` records are for their own developers (Cranelift writes each
/// function's IR): warnings only, unless `RUST_LOG` names them.
const QUIET_LIBRARIES: &str =
    "tower_http=warn,cranelift_codegen=warn,cranelift_jit=warn,cranelift_frontend=warn,cranelift_module=warn,regalloc2=warn";

/// The log filter: `RUST_LOG` (default `info`) with [`QUIET_LIBRARIES`] quiet unless it names them.
fn log_filter(env: Option<&str>) -> String {
    match env.map(str::trim).filter(|e| !e.is_empty()) {
        None => format!("info,{QUIET_LIBRARIES}"),
        Some(e) if e.contains("cranelift") || e.contains("regalloc") || e.contains("tower_http") => e.to_string(),
        Some(e) => format!("{e},{QUIET_LIBRARIES}"),
    }
}

/// Logs to stderr (stdout carries only the URL), filtered by [`log_filter`].
pub fn init_logging() {
    let env = std::env::var("RUST_LOG").ok();
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(env.as_deref()))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_filter(None)));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn library_chatter_stays_quiet_unless_asked_for() {
        assert!(log_filter(None).starts_with("info,") && log_filter(None).contains("cranelift_codegen=warn"));
        assert!(
            log_filter(Some("debug")).starts_with("debug,") && log_filter(Some("debug")).contains("cranelift_jit=warn")
        );
        assert_eq!(log_filter(Some("cranelift_codegen=debug")), "cranelift_codegen=debug");
    }
}
