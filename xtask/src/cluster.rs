//! `cargo xtask cluster`: recap past one machine, all on loopback: PostgreSQL (the index), NATS
//! JetStream (the queue of sessions), an S3-compatible server (the archives), two `recap serve`
//! replicas sharing them and two CPU workers. Prints the URLs; Ctrl-C stops everything.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

#[path = "../../tests/support/services.rs"]
mod services;

/// Installs the servers' programs when missing (what `cargo xtask test` also does for the
/// cluster tests); a failure is reported, not fatal, since those tests then say they skip.
pub fn ensure_tools(root: &Path) -> Result<()> {
    if services::find_tools(root).is_err() {
        if let Err(e) = services::install_tools(root) {
            eprintln!("xtask: {e}; the cluster tests will be skipped");
        }
    }
    Ok(())
}

pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let no_install = args.iter().any(|a| a == "--no-install");
    let release = !args.iter().any(|a| a == "--debug");
    if !no_install {
        services::install_tools(root).map_err(|e| anyhow!(e))?;
    }
    let tools = services::find_tools(root).map_err(|e| anyhow!("missing: {e} (run without --no-install)"))?;
    super::build_wasm(root, release)?;
    let mut cmd = super::cargo();
    cmd.args(["build", "-p", "recap-cli", "--bin", "recap"]);
    if release {
        cmd.arg("--release");
    }
    super::run(cmd)?;
    let target = super::target_dir(root);
    let recap = target.join(if release { "release" } else { "debug" }).join("recap");
    let dir = target.join("cluster");
    std::fs::create_dir_all(&dir)?;

    let pg = services::postgres(&tools, &dir.join("postgres")).map_err(|e| anyhow!(e))?;
    let nats = services::nats(&tools, &dir.join("nats")).map_err(|e| anyhow!(e))?;
    let s3 = services::s3(&tools, &dir.join("s3")).map_err(|e| anyhow!(e))?;
    let stores = ["--blobs", &s3.url, "--index", &pg.url, "--queue", &nats.url];

    let mut children: Vec<(String, Child)> = Vec::new();
    let mut urls = Vec::new();
    for n in 1..=2 {
        let data = dir.join(format!("replica-{n}"));
        let log = std::fs::File::create(dir.join(format!("replica-{n}.log")))?;
        let mut child = Command::new(&recap)
            .args(["serve", "--addr", "127.0.0.1:0", "--data"])
            .arg(&data)
            .args(stores)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", recap.display()))?;
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().expect("piped")), &mut line)?;
        if !line.starts_with("http://") {
            anyhow::bail!("replica {n} did not start; see {}", dir.join(format!("replica-{n}.log")).display());
        }
        urls.push(line.trim().to_string());
        children.push((format!("replica {n}"), child));
    }
    for n in 1..=2 {
        let log = std::fs::File::create(dir.join(format!("worker-{n}.log")))?;
        let child = Command::new(&recap)
            .args(["worker", "--queue", &nats.url, "--blobs", &s3.url, "--device", "cpu", "--name"])
            .arg(format!("worker-{n}"))
            .arg("--data")
            .arg(dir.join(format!("worker-{n}")))
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()?;
        children.push((format!("worker {n}"), child));
    }
    println!("recap cluster on loopback (logs in {}):", dir.display());
    for (n, url) in urls.iter().enumerate() {
        println!("  replica {}: {url}", n + 1);
    }
    println!("  index:  {}", pg.url);
    println!("  queue:  {}", nats.url);
    println!("  blobs:  {}", s3.url);
    println!("  workers: 2 on cpu");
    println!("Ctrl-C stops them all.");

    // Ctrl-C reaches every process of the terminal's group; wait for them, then stop the servers
    // (dropping them) once the replicas and workers are gone.
    loop {
        let mut ended = None;
        for (name, child) in &mut children {
            if let Ok(Some(status)) = child.try_wait() {
                ended = Some(format!("{name} exited ({status})"));
            }
        }
        if let Some(why) = ended {
            eprintln!("xtask: {why}; stopping the cluster");
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for (_, child) in &mut children {
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    }
    for (_, child) in &mut children {
        let _ = child.wait();
    }
    drop((pg, nats, s3));
    Ok(())
}
