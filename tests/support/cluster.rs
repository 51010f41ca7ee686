//! A cluster of recap hosts for the tests: real PostgreSQL, NATS JetStream and S3 servers on
//! loopback ([`crate::services`]), `recap serve` replicas sharing them and `recap worker`
//! processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use crate::recap_bin;
use crate::server::Server;
use crate::services::{self, Service, Tools};

/// The servers' programs, installed first the way `cargo xtask cluster` does unless
/// `RECAP_NO_INSTALL` is set (`cargo xtask test --no-install`); `Err` says what is missing, for the
/// skip message.
pub fn tools() -> Result<Tools, String> {
    static TOOLS: OnceLock<Result<Tools, String>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let root = crate::repo_root();
            if let Ok(tools) = services::find_tools(&root) {
                return Ok(tools);
            }
            if std::env::var_os("RECAP_NO_INSTALL").is_none() {
                if let Err(e) = services::install_tools(&root) {
                    eprintln!("cluster: {e}");
                }
            }
            services::find_tools(&root)
        })
        .clone()
}

/// PostgreSQL, NATS and an S3 server, each with its data in `dir`.
pub struct Backing {
    pub pg: Service,
    pub nats: Service,
    pub s3: Service,
    pub dir: PathBuf,
}

impl Backing {
    /// Starts the three servers, or says why the test is skipped (`None`).
    pub fn start(dir: &Path, test: &str) -> Option<Backing> {
        let tools = match tools() {
            Ok(tools) => tools,
            Err(missing) => {
                eprintln!(
                    "SKIPPED {test}: the cluster tests need {missing}; `cargo xtask test` (without --no-install) or `cargo xtask cluster` installs them"
                );
                return None;
            }
        };
        let (pg, nats, s3) = std::thread::scope(|scope| {
            let pg = scope.spawn(|| services::postgres(&tools, &dir.join("postgres")));
            let nats = scope.spawn(|| services::nats(&tools, &dir.join("nats")));
            let s3 = scope.spawn(|| services::s3(&tools, &dir.join("s3")));
            (pg.join().unwrap(), nats.join().unwrap(), s3.join().unwrap())
        });
        let (pg, nats, s3) = (pg.expect("postgres starts"), nats.expect("nats-server starts"), s3.expect("S3 starts"));
        Some(Backing { pg, nats, s3, dir: dir.to_path_buf() })
    }

    /// `recap serve` arguments that put a replica on these servers.
    pub fn args(&self) -> Vec<String> {
        ["--blobs", &self.s3.url, "--index", &self.pg.url, "--queue", &self.nats.url].map(String::from).to_vec()
    }

    /// Starts replica `n` (data folder `replica-N` in `dir`).
    pub fn replica(&self, n: usize) -> Server {
        let args = self.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start(&self.dir.join(format!("replica-{n}")), &args)
    }

    /// Starts CPU worker `n`, giving up a job after `ack_wait_s` without a sign of life.
    pub fn worker(&self, n: usize, ack_wait_s: u64) -> Worker {
        let data = self.dir.join(format!("worker-{n}"));
        let log = self.dir.join(format!("worker-{n}.log"));
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("worker log");
        let child = Command::new(recap_bin())
            .args(["worker", "--queue", &self.nats.url, "--blobs", &self.s3.url, "--device", "cpu"])
            .args(["--ack-wait", &ack_wait_s.to_string(), "--name", &format!("worker-{n}"), "--data"])
            .arg(&data)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("starting recap worker");
        Worker { child: Some(child), log, name: format!("worker-{n}") }
    }
}

/// A `recap worker` process, killed when dropped.
pub struct Worker {
    child: Option<Child>,
    pub log: PathBuf,
    pub name: String,
}

impl Worker {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}
