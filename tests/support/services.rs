//! The servers a cluster of recap hosts runs on, started on loopback for the tests and for `cargo
//! xtask cluster` (which includes this file, so both start them the same way): PostgreSQL 15
//! (Debian's binaries, as an unprivileged user when running as root), `nats-server -js` (Debian's
//! package) and moto's S3 server (PyPI, in a virtual environment under `target/cluster/`).
//!
//! Only the standard library: xtask builds this file too.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's PostgreSQL 15 binaries.
pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
/// The unprivileged user PostgreSQL runs as when we are root (it refuses to run as root).
pub const PG_USER: &str = "recap-pg";
/// The S3 bucket the cluster keeps archives in.
pub const BUCKET: &str = "recap";

/// Where the servers' programs are.
#[derive(Clone, Debug)]
pub struct Tools {
    pub pg_bin: PathBuf,
    pub nats: PathBuf,
    pub moto: PathBuf,
}

/// The virtual environment moto is installed into.
pub fn venv(root: &Path) -> PathBuf {
    root.join("target/cluster/venv")
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The servers' programs, or what is missing (and how `cargo xtask cluster` or `cargo xtask test`
/// installs it).
pub fn find_tools(root: &Path) -> Result<Tools, String> {
    let mut missing = Vec::new();
    let pg_bin = PathBuf::from(PG_BIN);
    if !pg_bin.join("postgres").is_file() {
        missing.push(format!("PostgreSQL 15 ({PG_BIN}; Debian's postgresql-15)"));
    }
    let nats = on_path("nats-server");
    if nats.is_none() {
        missing.push("nats-server (Debian's nats-server)".to_string());
    }
    let moto = Some(venv(root).join("bin/moto_server")).filter(|p| p.is_file()).or_else(|| on_path("moto_server"));
    if moto.is_none() {
        missing.push(format!("moto_server (PyPI's moto[server], in {})", venv(root).display()));
    }
    if !missing.is_empty() {
        return Err(missing.join(", "));
    }
    Ok(Tools { pg_bin, nats: nats.unwrap(), moto: moto.unwrap() })
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false)
}

fn status(cmd: &mut Command) -> Result<(), String> {
    eprintln!("cluster: {cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{cmd:?} failed with {s}")),
        Err(e) => Err(format!("starting {cmd:?}: {e}")),
    }
}

/// Installs what is missing: Debian's postgresql-15 and nats-server with apt-get (as root), moto's
/// S3 server with pip into a virtual environment under `target/cluster/`. Says what it installs
/// and why before it does.
pub fn install_tools(root: &Path) -> Result<(), String> {
    let pg = Path::new(PG_BIN).join("postgres").is_file();
    let nats = on_path("nats-server").is_some();
    let mut packages = Vec::new();
    if !pg {
        packages.push("postgresql-15");
    }
    if !nats {
        packages.push("nats-server");
    }
    if !packages.is_empty() {
        if !is_root() || Command::new("apt-get").arg("--version").output().is_err() {
            return Err(format!(
                "{} missing and cannot be installed here (needs root and apt-get)",
                packages.join(", ")
            ));
        }
        eprintln!(
            "cluster: installing Debian's {} with apt-get: the cluster keeps its index in PostgreSQL and queues sessions on NATS JetStream",
            packages.join(" and ")
        );
        status(Command::new("apt-get").args(["update", "-qq"]))?;
        status(
            Command::new("apt-get")
                .args(["install", "-y", "-qq"])
                .args(&packages)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
    }
    let moto = venv(root).join("bin/moto_server");
    if !moto.is_file() {
        eprintln!(
            "cluster: installing moto[server] from PyPI into {}: an S3-compatible server for the archives",
            venv(root).display()
        );
        let python = on_path("python3").ok_or("python3 is needed for moto's S3 server")?;
        status(Command::new(&python).args(["-m", "venv"]).arg(venv(root)))?;
        status(Command::new(venv(root).join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "moto[server]",
        ]))?;
    }
    Ok(())
}

/// A port free on loopback now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// A server process, stopped when dropped.
pub struct Service {
    pub name: &'static str,
    pub port: u16,
    /// What clients connect to (`postgres://...`, `nats://...`, `s3://...`).
    pub url: String,
    pub log: PathBuf,
    child: Option<Child>,
    start: Box<dyn Fn() -> Result<Child, String> + Send>,
    ready: fn(&Service) -> bool,
    /// The signal that stops it cleanly and quickly.
    signal: &'static str,
}

impl Service {
    fn launch(
        name: &'static str,
        port: u16,
        url: String,
        log: PathBuf,
        start: Box<dyn Fn() -> Result<Child, String> + Send>,
        ready: fn(&Service) -> bool,
    ) -> Result<Service, String> {
        let signal = if name == "postgres" { "-INT" } else { "-TERM" };
        let mut service = Service { name, port, url, log, child: None, start, ready, signal };
        service.begin()?;
        Ok(service)
    }

    fn begin(&mut self) -> Result<(), String> {
        self.child = Some((self.start)()?);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(format!("{} exited at start ({status}); its log:\n{}", self.name, self.log_text()));
            }
            if (self.ready)(self) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("{} did not become ready in 60 s; its log:\n{}", self.name, self.log_text()))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Stops the server (SIGTERM, for PostgreSQL its fast shutdown, then SIGKILL after 10 s) and
    /// waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(self.signal).arg(child.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port with the same data.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.begin()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop();
    }
}

fn log_file(path: &Path) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn log_has(service: &Service, text: &str) -> bool {
    service.log_text().contains(text)
}

/// PostgreSQL in `dir` (created with initdb the first time), on a free port, as [`PG_USER`] when we
/// are root. Tuned for tests: no fsync.
pub fn postgres(tools: &Tools, dir: &Path) -> Result<Service, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let data = dir.join("pgdata");
    let root = is_root();
    if root {
        let exists = || Command::new("id").arg(PG_USER).output().is_ok_and(|o| o.status.success());
        if !exists() {
            eprintln!("cluster: creating the system user {PG_USER}: PostgreSQL does not run as root");
            let mut useradd = Command::new("useradd");
            useradd.args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER]);
            // Another test may have made it meanwhile.
            if let Err(e) = status(&mut useradd) {
                if !exists() {
                    return Err(e);
                }
            }
        }
        // The user must reach the folder: a folder above it without o+x (a test's private
        // temporary folder) gets it.
        for d in dir.ancestors() {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(meta) = std::fs::metadata(d) {
                let mode = meta.permissions().mode();
                if mode & 0o001 == 0 {
                    let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode | 0o001));
                }
            }
        }
        status(Command::new("chown").arg("-R").arg(format!("{PG_USER}:")).arg(dir))?;
    }
    let as_pg = |program: PathBuf| -> Command {
        if root {
            let mut c = Command::new("runuser");
            c.args(["-u", PG_USER, "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    };
    if !data.join("PG_VERSION").is_file() {
        let mut init = as_pg(tools.pg_bin.join("initdb"));
        init.arg("-D").arg(&data).args(["-A", "trust", "-U", "recap", "-E", "UTF8", "--locale=C", "--no-sync"]);
        init.stdout(Stdio::null());
        status(&mut init)?;
    }
    let port = free_port();
    let log = dir.join("postgres.log");
    let _ = std::fs::remove_file(&log);
    let (bin, data2, log2) = (tools.pg_bin.join("postgres"), data.clone(), log.clone());
    let start = move || -> Result<Child, String> {
        let out = log_file(&log2)?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        // setpriv executes postgres itself (runuser would stay between), so signals reach it.
        let mut cmd = if root {
            let mut c = Command::new("setpriv");
            c.args([&format!("--reuid={PG_USER}"), &format!("--regid={PG_USER}"), "--clear-groups", "--"]).arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        cmd.arg("-D")
            .arg(&data2)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting postgres: {e}"))
    };
    Service::launch(
        "postgres",
        port,
        format!("postgres://recap@127.0.0.1:{port}/postgres"),
        log,
        Box::new(start),
        |s| {
            log_has(s, "database system is ready to accept connections")
                && TcpStream::connect(("127.0.0.1", s.port)).is_ok()
        },
    )
}

/// `nats-server -js` with its JetStream store in `dir`, on a free port.
pub fn nats(tools: &Tools, dir: &Path) -> Result<Service, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let port = free_port();
    let log = dir.join("nats.log");
    let _ = std::fs::remove_file(&log);
    let (bin, store, log2) = (tools.nats.clone(), dir.join("jetstream"), log.clone());
    let start = move || -> Result<Child, String> {
        let out = log_file(&log2)?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        Command::new(&bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting nats-server: {e}"))
    };
    Service::launch("nats-server", port, format!("nats://127.0.0.1:{port}"), log, Box::new(start), |s| {
        log_has(s, "Server is ready") && TcpStream::connect(("127.0.0.1", s.port)).is_ok()
    })
}

/// moto's S3 server on a free port, with the bucket [`BUCKET`] created. Its URL carries the
/// endpoint and moto's test credentials.
pub fn s3(tools: &Tools, dir: &Path) -> Result<Service, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let port = free_port();
    let log = dir.join("s3.log");
    let _ = std::fs::remove_file(&log);
    let (bin, log2) = (tools.moto.clone(), log.clone());
    let start = move || -> Result<Child, String> {
        let out = log_file(&log2)?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting moto_server: {e}"))
    };
    let service = Service::launch(
        "s3",
        port,
        format!(
            "s3://{BUCKET}?endpoint=http://127.0.0.1:{port}&region=us-east-1&access_key_id=test&secret_access_key=test"
        ),
        log,
        Box::new(start),
        |s| http(s.port, "GET", "/").is_ok(),
    )?;
    http(port, "PUT", &format!("/{BUCKET}")).map_err(|e| format!("creating bucket {BUCKET}: {e}"))?;
    Ok(service)
}

/// One plain HTTP/1.1 request to loopback; the status line's code when it is 2xx.
fn http(port: u16, method: &str, path: &str) -> Result<u16, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).map_err(|e| e.to_string())?;
    let code: u16 = String::from_utf8_lossy(&head[9..12]).parse().map_err(|_| "not HTTP".to_string())?;
    if (200..300).contains(&code) {
        Ok(code)
    } else {
        Err(format!("HTTP {code}"))
    }
}
