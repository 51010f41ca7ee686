//! Runs the real `recap serve` binary on port 0 and reads the URL it prints.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::recap_bin;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running host. Killed when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`, as the host printed it.
    pub url: String,
    pub data: PathBuf,
    /// Where the host's stderr (its log) goes.
    pub log: PathBuf,
}

impl Server {
    /// Starts `recap serve --addr 127.0.0.1:0 --data DATA ARGS...` and waits for its URL.
    pub fn start(data: &Path, args: &[&str]) -> Server {
        Self::start_at("127.0.0.1:0", data, args)
    }

    pub fn start_at(addr: &str, data: &Path, args: &[&str]) -> Server {
        Self::start_with(addr, data, args, None)
    }

    /// Like [`Server::start`], with the host's address space capped at `bytes` (`prlimit --as`), so
    /// that input which makes it allocate far beyond its needs kills it instead of passing unseen.
    /// glibc's per-thread malloc arenas each reserve 64 MiB of address space; two arenas keep the
    /// reservations, not the host's real needs, from filling the cap.
    pub fn start_capped(data: &Path, args: &[&str], bytes: u64) -> Server {
        Self::start_with("127.0.0.1:0", data, args, Some(bytes))
    }

    fn start_with(addr: &str, data: &Path, args: &[&str], cap: Option<u64>) -> Server {
        let log = data.with_extension(format!("log.{}", std::process::id()));
        let log_file = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("host log file");
        let mut command = match cap {
            Some(bytes) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--as={bytes}")).arg("--").arg(recap_bin()).env("MALLOC_ARENA_MAX", "2");
                c
            }
            None => Command::new(recap_bin()),
        };
        let mut child = command
            .args(["serve", "--addr", addr, "--data"])
            .arg(data)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .expect("starting recap serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.starts_with("http://") => line.trim().to_string(),
            other => {
                let _ = child.kill();
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("recap serve printed no URL ({other:?}); its log:\n{log}");
            }
        };
        Server { child, url: line, data: data.to_path_buf(), log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9`: no chance to clean up.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for a clean exit (at most 30 s); returns whether it exited with 0.
    pub fn stop(mut self) -> bool {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        for _ in 0..300 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// The host's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `ws://` URL for a path.
    pub fn ws(&self, path: &str) -> String {
        format!("ws://{}{path}", self.url.trim_start_matches("http://"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
