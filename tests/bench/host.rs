//! Host benchmarks: `cargo bench -p recap-tests --bench host [-- upload|viewers] [--size-mib N] [--viewers N]`.
//!
//! - `upload`: a 1 GiB archive uploaded over loopback to a real `recap serve`, against `cp` of the
//!   same file (and `cp` plus fsync, which is what the host does), with the host's resident memory
//!   sampled from `/proc/PID/status` during the upload.
//! - `viewers`: 50 WebSocket viewers on one session: every message must reach every viewer; the
//!   latency of each (receive time minus the host's `time_us` stamp) is reported as p50/p99/max.
//! - `bursts`: the host's resident memory, sampled every 5 ms, through ten bursts of 200 parallel
//!   62 KB uploads, then four parallel JSON requests of 240 MB and four of 60 MB: the peak, what is
//!   left a second after each burst, and what is left once the host has been idle for five seconds.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use recap_tests::server::Server;
use serde_json::Value;
use shared::archive::{ArchiveWriter, DType, MemsetOp, RegionDecl};
use tokio_tungstenite::tungstenite::Message;

/// Incompressible bytes without holding them: xorshift64 as a `Read`.
struct Noise {
    state: u64,
    left: u64,
}

impl Read for Noise {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize / 8 * 8;
        let n = if n == 0 { (buf.len() as u64).min(self.left) as usize } else { n };
        for chunk in buf[..n].chunks_mut(8) {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            let b = self.state.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
        self.left -= n as u64;
        Ok(n)
    }
}

fn write_archive(path: &Path, size: u64) {
    let file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut w = ArchiveWriter::new(file).unwrap();
    let r = w.add_region(RegionDecl::new("payload", size, DType::U8)).unwrap();
    w.set_initial(r, &mut Noise { state: 0x2545_f491_4f6c_dd1d, left: size }).unwrap();
    w.memset(MemsetOp { region: r, offset: 0, len: 8, width: 8, pattern: 7 }).unwrap();
    w.finish().unwrap();
}

/// `(VmRSS, VmHWM)` of a process in bytes.
fn rss(pid: u32) -> (u64, u64) {
    let (rss, hwm, _) = memory(pid);
    (rss, hwm)
}

/// `(VmRSS, VmHWM, RssAnon)` of a process in bytes: RssAnon leaves out file pages (the memory map
/// of the archive being validated), which the kernel can drop at any time.
fn memory(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"), field("RssAnon:"))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

async fn bench_upload(size_mib: u64) {
    let dir = tempfile::Builder::new().prefix("recap-bench-").tempdir_in(std::env::temp_dir()).unwrap();
    let src = dir.path().join("big.recap");
    let t = Instant::now();
    write_archive(&src, size_mib << 20);
    let len = std::fs::metadata(&src).unwrap().len();
    println!("upload: archive of {:.0} MiB written in {:.2}s", mib(len), t.elapsed().as_secs_f64());
    // Both sides read the source from the page cache: it was just written.

    let dst = dir.path().join("copy.recap");
    let t = Instant::now();
    let status = std::process::Command::new("cp").arg(&src).arg(&dst).status().unwrap();
    assert!(status.success());
    let cp = t.elapsed().as_secs_f64();
    std::fs::remove_file(&dst).unwrap();
    let t = Instant::now();
    let status = std::process::Command::new("cp").arg(&src).arg(&dst).status().unwrap();
    assert!(status.success());
    std::fs::File::open(&dst).unwrap().sync_all().unwrap();
    let cp_sync = t.elapsed().as_secs_f64();
    std::fs::remove_file(&dst).unwrap();

    let server = Server::start(&dir.path().join("data"), &["--max-upload", &(len + 1).to_string()]);
    let pid = server.pid();
    let (rss_before, _) = rss(pid);
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            let (mut peak, mut peak_anon) = (0, 0);
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                let (rss, _, anon) = memory(pid);
                peak = peak.max(rss);
                peak_anon = peak_anon.max(anon);
                std::thread::sleep(Duration::from_millis(10));
            }
            (peak, peak_anon)
        })
    };
    let file = tokio::fs::File::open(&src).await.unwrap();
    let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
    let t = Instant::now();
    let res = reqwest::Client::new()
        .post(format!("{}/api/archives?name=big", server.url))
        .header("content-type", "application/octet-stream")
        .header("Content-Length", len)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let upload = t.elapsed().as_secs_f64();
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let (sampled_peak, anon_peak) = sampler.join().unwrap();
    let (_, hwm) = rss(pid);
    assert_eq!(status, 201, "{}", res.text().await.unwrap_or_default());
    println!(
        "upload: cp {cp:.2}s ({:.0} MiB/s); cp + fsync {cp_sync:.2}s ({:.0} MiB/s)",
        mib(len) / cp,
        mib(len) / cp_sync
    );
    println!(
        "upload: host {upload:.2}s ({:.0} MiB/s, incl. hashing, full validation, fsync, rename; load {}) = {:.2}x cp, {:.2}x cp + fsync",
        mib(len) / upload,
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        cp / upload,
        cp_sync / upload
    );
    println!(
        "upload: host RSS {:.1} MiB before, {:.1} MiB peak sampled every 10 ms, VmHWM {:.1} MiB; anonymous (RssAnon) peak {:.1} MiB",
        mib(rss_before),
        mib(sampled_peak),
        mib(hwm),
        mib(anon_peak)
    );
    for line in server.log_text().lines().filter(|l| l.contains("validated and synced") || l.contains("archive stored"))
    {
        println!("upload: host log: {}", line.trim());
    }
    assert!(server.stop());
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

async fn bench_viewers(viewers: usize, iterations: u32) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let r = w.add_region(RegionDecl::new("x", 4096, DType::F32)).unwrap();
    w.memset(MemsetOp { region: r, offset: 0, len: 4096, width: 4, pattern: 0x3f80_0000 }).unwrap();
    let bytes = w.finish().unwrap().into_inner();
    let a: Value = client
        .post(format!("{}/api/archives?name=v", server.url))
        .header("content-type", "application/octet-stream")
        .body(bytes)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();

    // A long session holds the device so that the measured one waits while every viewer connects.
    let session = |iterations: u32| {
        let (client, url, id) = (client.clone(), server.url.clone(), a["id"].clone());
        async move {
            let v: Value = client
                .post(format!("{url}/api/sessions"))
                .json(&serde_json::json!({"archive": id, "iterations": iterations, "check": false}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v
        }
    };
    let blocker = session(100_000).await;
    let measured = session(iterations).await;
    let ws_url = server.ws(&format!("/api/sessions/{}/ws", measured["id"].as_str().unwrap()));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(viewers);
    let mut tasks = Vec::new();
    for _ in 0..viewers {
        let (ws_url, ready_tx) = (ws_url.clone(), ready_tx.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
            let _ = ready_tx.send(()).await;
            let mut seqs = Vec::new();
            let mut latencies = Vec::new();
            while let Some(Ok(msg)) = ws.next().await {
                if let Message::Text(t) = msg {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap();
                    let at = now_us();
                    seqs.push(v["seq"].as_u64().unwrap());
                    latencies.push(at.saturating_sub(v["time_us"].as_u64().unwrap()));
                }
            }
            (seqs, latencies)
        }));
    }
    for _ in 0..viewers {
        ready_rx.recv().await.unwrap();
    }
    let t = Instant::now();
    let cancel = client
        .post(format!("{}/api/sessions/{}/cancel", server.url, blocker["id"].as_str().unwrap()))
        .header("X-Recap-Control", blocker["control"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status().as_u16(), 200);
    let mut all = Vec::new();
    let mut counts = Vec::new();
    for task in tasks {
        let (seqs, latencies) = task.await.unwrap();
        counts.push(seqs.len());
        assert!(seqs.iter().enumerate().all(|(i, s)| *s == i as u64), "a viewer missed or reordered messages");
        // The first messages (queued, positions) predate the connection: history, not live.
        all.extend(latencies.into_iter().skip(3));
    }
    let wall = t.elapsed().as_secs_f64();
    assert!(counts.iter().all(|c| *c == counts[0]), "viewers got different counts: {counts:?}");
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() - 1) as f64 * p) as usize] as f64 / 1e3;
    println!("viewers: {viewers} viewers x {} messages each, all delivered in order, in {wall:.2}s", counts[0]);
    println!(
        "viewers: latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} live samples)",
        pct(0.5),
        pct(0.99),
        pct(1.0),
        all.len()
    );
    assert!(server.stop());
}

/// A small valid archive of `len` incompressible bytes (each `seed` gives other bytes, so other ids).
fn small_archive(len: u64, seed: u64) -> Vec<u8> {
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let r = w.add_region(RegionDecl::new("payload", len, DType::U8)).unwrap();
    w.set_initial(r, &mut Noise { state: 0x2545_f491_4f6c_dd1d ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), left: len })
        .unwrap();
    w.memset(MemsetOp { region: r, offset: 0, len: 8, width: 8, pattern: 7 }).unwrap();
    w.finish().unwrap().into_inner()
}

async fn bench_bursts(rounds: u64) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let pid = server.pid();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (idle, _) = rss(pid);
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(idle));
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss(pid).0, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    println!("bursts: idle host RSS {:.1} MiB", mib(idle));
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let mut first_id = None;
    for round in 0..rounds {
        let t = Instant::now();
        let uploads = (0..200u64).map(|i| {
            let (client, url) = (client.clone(), server.url.clone());
            let bytes = small_archive(62_000, round * 1000 + i);
            tokio::spawn(async move {
                let res = client
                    .post(format!("{url}/api/archives?name=b"))
                    .header("content-type", "application/octet-stream")
                    .body(bytes)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status().as_u16(), 201);
                res.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string()
            })
        });
        let ids = futures_util::future::join_all(uploads).await;
        first_id.get_or_insert_with(|| ids[0].as_ref().unwrap().clone());
        let took = t.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        println!(
            "bursts: round {}: 200 uploads of 62 KB in {took:.2}s; peak so far {:.1} MiB, {:.1} MiB a second after",
            round + 1,
            mib(peak.load(std::sync::atomic::Ordering::Relaxed)),
            mib(rss(pid).0)
        );
    }
    let archive = first_id.unwrap();
    for mb in [240u64, 60] {
        let t = Instant::now();
        let requests = (0..4).map(|_| {
            let (client, url, archive) = (client.clone(), server.url.clone(), archive.clone());
            tokio::spawn(async move {
                // A binding of the wrong size: the host must read and parse it all before it can say so.
                let payload = "A".repeat((mb << 20) as usize);
                let body = format!("{{\"archive\":\"{archive}\",\"bindings\":{{\"payload\":\"{payload}\"}}}}");
                drop(payload);
                let res = client
                    .post(format!("{url}/api/sessions"))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                // Over the host's limit the answer comes before the body is read, and the host
                // closes the connection: the client may see the close before the answer.
                match res {
                    Ok(res) => res.status().as_u16().to_string(),
                    Err(e) if e.is_request() => "closed".to_string(),
                    Err(e) => panic!("{e}"),
                }
            })
        });
        let statuses: Vec<String> =
            futures_util::future::join_all(requests).await.into_iter().map(Result::unwrap).collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        println!(
            "bursts: 4 parallel JSON requests of {mb} MB answered {statuses:?} in {:.2}s; peak so far {:.1} MiB, {:.1} MiB a second after",
            t.elapsed().as_secs_f64(),
            mib(peak.load(std::sync::atomic::Ordering::Relaxed)),
            mib(rss(pid).0)
        );
    }
    // The host gives memory back once requests have stopped for a few seconds.
    tokio::time::sleep(Duration::from_secs(5)).await;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let (now, hwm) = rss(pid);
    println!(
        "bursts: peak {:.1} MiB (VmHWM {:.1} MiB), idle after {:.1} MiB",
        mib(peak.load(std::sync::atomic::Ordering::Relaxed)),
        mib(hwm),
        mib(now)
    );
    assert!(server.stop());
}

fn arg(args: &[String], name: &str) -> Option<u64> {
    args.windows(2).find(|w| w[0] == name).and_then(|w| w[1].parse().ok())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which: Vec<&str> =
        args.iter().map(String::as_str).filter(|a| ["upload", "viewers", "bursts"].contains(a)).collect();
    let all = which.is_empty();
    if all || which.contains(&"upload") {
        bench_upload(arg(&args, "--size-mib").unwrap_or(1024)).await;
    }
    if all || which.contains(&"viewers") {
        bench_viewers(arg(&args, "--viewers").unwrap_or(50) as usize, arg(&args, "--iterations").unwrap_or(500) as u32)
            .await;
    }
    if all || which.contains(&"bursts") {
        bench_bursts(arg(&args, "--rounds").unwrap_or(10)).await;
    }
}
