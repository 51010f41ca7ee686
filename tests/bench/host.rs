//! Host benchmarks: `cargo bench -p recap-tests --bench host [-- upload|viewers|bursts] [--size-mib N] [--upload-rounds N] [--viewers N] [--rounds N]`.
//!
//! - `upload`: a 1 GiB archive posted by curl over loopback, in turn to the floor (a server that only
//!   writes what it receives to a file and fsyncs it), to a real `recap serve` on its embedded store,
//!   and to one whose blobs are in S3 (where the cluster's servers can start); `cp` and `cp` plus
//!   fsync of the same file beside them, and the host's resident memory sampled from
//!   `/proc/PID/status` during each upload.
//! - `viewers`: 50 WebSocket viewers on one session: every message must reach every viewer; the
//!   latency of each (receive time minus the host's `time_us` stamp) is reported as p50/p99/max.
//! - `bursts`: the host's resident memory, sampled every 5 ms, through ten bursts of 200 parallel
//!   62 KB uploads, then four parallel JSON requests of 240 MB and four of 60 MB: the peak, what is
//!   left a second after each burst, and what is left once the host has been idle for five seconds.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use recap_tests::server::Server;
use serde_json::Value;
use shared::archive::{ArchiveWriter, DType, MemsetOp, RegionDecl};
use tokio_tungstenite::tungstenite::Message;

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

/// The floor an upload is held to: a server that only writes what it receives to a file and
/// fsyncs it (no hashing, no validation), behind the same HTTP stack and loopback as the host. Its
/// address; it serves until the process ends.
async fn start_sink(dir: &Path) -> String {
    use axum::{body::Body, http::StatusCode, routing::post, Router};
    let target = dir.join("sink.bin");
    let app = Router::new().route(
        "/upload",
        post(move |body: Body| {
            let target = target.clone();
            async move {
                use tokio::io::AsyncWriteExt;
                let mut file = tokio::fs::File::create(&target).await.map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
                file.set_max_buf_size(4 << 20);
                let mut stream = body.into_data_stream();
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk.map_err(|_| StatusCode::BAD_REQUEST)?;
                    file.write_all(&chunk).await.map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
                }
                file.flush().await.map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
                file.sync_all().await.map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
                Ok::<_, StatusCode>(StatusCode::CREATED)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/upload")
}

/// Posts `file` to `url` with curl, streamed from the file (`-T`, without `Expect: 100-continue`):
/// the status and the seconds it took.
async fn curl_upload(file: &Path, url: &str) -> (u16, f64) {
    let t = Instant::now();
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .args(["-H", "content-type: application/octet-stream", "-H", "Expect:", "-T"])
        .arg(file)
        .arg(url)
        .output()
        .await
        .expect("running curl");
    let secs = t.elapsed().as_secs_f64();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0), secs)
}

/// Samples a process's resident memory every 10 ms until the returned flag is cleared; the thread
/// answers `(peak VmRSS, peak RssAnon)`.
fn sample_memory(pid: u32) -> (std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<(u64, u64)>) {
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = sampling.clone();
    let sampler = std::thread::spawn(move || {
        let (mut peak, mut peak_anon) = (0, 0);
        while flag.load(std::sync::atomic::Ordering::Relaxed) {
            let (rss, _, anon) = memory(pid);
            peak = peak.max(rss);
            peak_anon = peak_anon.max(anon);
            std::thread::sleep(Duration::from_millis(10));
        }
        (peak, peak_anon)
    });
    (sampling, sampler)
}

/// One upload of `src` to a real `recap serve` with `args`, through curl: seconds, and the host's
/// memory (RSS before, peak sampled, VmHWM, RssAnon peak).
async fn host_upload(dir: &Path, src: &Path, args: &[&str]) -> (f64, [u64; 4], Server) {
    let len = std::fs::metadata(src).unwrap().len();
    let max = (len + 1).to_string();
    let mut all = vec!["--max-upload", &max];
    all.extend_from_slice(args);
    let server = Server::start(dir, &all);
    let pid = server.pid();
    let (rss_before, _) = rss(pid);
    let (sampling, sampler) = sample_memory(pid);
    let (status, secs) = curl_upload(src, &format!("{}/api/archives?name=big", server.url)).await;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let (peak, anon_peak) = sampler.join().unwrap();
    let (_, hwm) = rss(pid);
    assert_eq!(status, 201, "upload refused; host log:\n{}", server.log_text());
    (secs, [rss_before, peak, hwm, anon_peak], server)
}

/// A 1 GiB upload, `rounds` times in turn: to the floor (curl to a server that only writes and
/// fsyncs), to the embedded host (files and SQLite), and, where the cluster's servers can start, to
/// a host whose blobs are in S3. `cp` and `cp` + fsync of the same file are printed beside them.
async fn bench_upload(size_mib: u64, rounds: u64) {
    let dir = tempfile::Builder::new().prefix("recap-bench-").tempdir_in(std::env::temp_dir()).unwrap();
    let src = dir.path().join("big.recap");
    let t = Instant::now();
    recap_tests::write_noise_archive(&src, size_mib << 20, 0x2545_f491_4f6c_dd1d);
    let len = std::fs::metadata(&src).unwrap().len();
    println!("upload: archive of {:.0} MiB written in {:.2}s", mib(len), t.elapsed().as_secs_f64());
    // Every side reads the source from the page cache: it was just written.

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
    println!(
        "upload: cp {cp:.2}s ({:.0} MiB/s); cp + fsync {cp_sync:.2}s ({:.0} MiB/s)",
        mib(len) / cp,
        mib(len) / cp_sync
    );

    let sink = start_sink(dir.path()).await;
    let backing = recap_tests::cluster::Backing::start(&dir.path().join("cluster"), "upload (S3 path)");
    let load =
        || std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split(' ').next().unwrap_or("").to_string();
    let (mut floors, mut hosts, mut s3s) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        let (status, floor) = curl_upload(&src, &sink).await;
        assert_eq!(status, 201);
        std::fs::remove_file(dir.path().join("sink.bin")).unwrap();
        floors.push(floor);
        println!(
            "upload: round {round}: floor (curl -> write + fsync) {floor:.2}s ({:.0} MiB/s; load {})",
            mib(len) / floor,
            load()
        );

        let data = dir.path().join(format!("data-{round}"));
        let (secs, [before, peak, hwm, anon], server) = host_upload(&data, &src, &[]).await;
        hosts.push(secs);
        println!(
            "upload: round {round}: embedded host {secs:.2}s ({:.0} MiB/s; load {}) = {:.2}x the floor; RSS {:.1} MiB before, peak {:.1} MiB (VmHWM {:.1}, RssAnon peak {:.1})",
            mib(len) / secs,
            load(),
            floor / secs,
            mib(before),
            mib(peak),
            mib(hwm),
            mib(anon)
        );
        for line in
            server.log_text().lines().filter(|l| l.contains("validated and synced") || l.contains("archive stored"))
        {
            println!("upload:   host log: {}", line.trim());
        }
        assert!(server.stop());
        std::fs::remove_dir_all(&data).unwrap();

        if let Some(backing) = &backing {
            let args = backing.args();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let data = dir.path().join(format!("s3-data-{round}"));
            let (secs, [_, peak, hwm, _], server) = host_upload(&data, &src, &args).await;
            s3s.push(secs);
            println!(
                "upload: round {round}: host on S3 (moto), PostgreSQL, NATS {secs:.2}s ({:.0} MiB/s; load {}) = {:.2}x the floor; RSS peak {:.1} MiB (VmHWM {:.1})",
                mib(len) / secs,
                load(),
                floor / secs,
                mib(peak),
                mib(hwm)
            );
            // The next round uploads the same bytes: delete them so that it is not a dedup hit.
            let client = reqwest::Client::new();
            let listed: Vec<Value> =
                client.get(format!("{}/api/archives", server.url)).send().await.unwrap().json().await.unwrap();
            for a in listed {
                client
                    .delete(format!("{}/api/archives/{}", server.url, a["id"].as_str().unwrap()))
                    .send()
                    .await
                    .unwrap();
            }
            assert!(server.stop());
            std::fs::remove_dir_all(&data).unwrap();
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (floor, host) = (mean(&floors), mean(&hosts));
    println!(
        "upload: mean of {rounds}: floor {floor:.2}s, embedded host {host:.2}s = {:.2}x the floor (best {:.2}s = {:.2}x the best floor; goal >= 0.8x)",
        floor / host,
        best(&hosts),
        best(&floors) / best(&hosts)
    );
    if !s3s.is_empty() {
        let s3 = mean(&s3s);
        println!("upload: mean of {rounds}: host on S3 {s3:.2}s = {:.2}x the floor", floor / s3);
    }
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
    w.set_initial(r, &mut recap_tests::Noise::new(len, 0x2545_f491_4f6c_dd1d ^ seed)).unwrap();
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
        bench_upload(arg(&args, "--size-mib").unwrap_or(1024), arg(&args, "--upload-rounds").unwrap_or(3)).await;
    }
    if all || which.contains(&"viewers") {
        bench_viewers(arg(&args, "--viewers").unwrap_or(50) as usize, arg(&args, "--iterations").unwrap_or(500) as u32)
            .await;
    }
    if all || which.contains(&"bursts") {
        bench_bursts(arg(&args, "--rounds").unwrap_or(10)).await;
    }
}
