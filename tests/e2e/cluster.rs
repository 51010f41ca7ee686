//! Past one machine: `recap serve` replicas on a real S3 server (moto), PostgreSQL and NATS
//! JetStream, with `recap worker` processes running the sessions, all started here on loopback.
//! Skipped, saying why, where the servers' programs are missing and cannot be installed.

use std::time::Duration;

use futures_util::StreamExt;
use recap_tests::cluster::Backing;
use serde_json::Value;
use shared::archive::{ArchiveWriter, DType, LaunchDecl, RegionDecl, Tolerance};
use tokio_tungstenite::tungstenite::Message;

use crate::host::{archive, collect_stream, get_json, new_session, upload};

/// A launch that counts to `count` in a loop (a few milliseconds of work per iteration, whichever
/// CPU engine runs it), and a region whose expected bytes are its initial ones, so the check passes.
fn counting_archive(count: u32) -> Vec<u8> {
    let ptx = format!(
        ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry count()\n{{\n\t.reg .u32 %r<2>;\n\t.reg .pred %p<2>;\n\tmov.u32 %r0, 0;\n$L_top:\n\tadd.u32 %r0, %r0, 1;\n\tsetp.lt.u32 %p0, %r0, {count};\n\t@%p0 bra.uni $L_top;\n\tret;\n}}\n"
    );
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("count", &ptx).unwrap();
    let k = w.add_kernel(m, "count", vec![]).unwrap();
    let r = w.add_region(RegionDecl::new("x", 16, DType::U8)).unwrap();
    w.set_initial_bytes(r, &[3u8; 16]).unwrap();
    w.set_expected_bytes(r, &[3u8; 16], Tolerance::Exact).unwrap();
    w.launch(LaunchDecl {
        kernel: k,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: 0,
        params: vec![],
        relocs: vec![],
    })
    .unwrap();
    w.finish().unwrap().into_inner()
}

/// What a bucket of the S3 server holds under `prefix`, and the multipart uploads in progress.
async fn bucket_contents(client: &reqwest::Client, s3_port: u16, prefix: &str) -> (Vec<String>, usize) {
    let base = format!("http://127.0.0.1:{s3_port}/{}", recap_tests::services::BUCKET);
    let listing = client.get(format!("{base}?list-type=2&prefix={prefix}")).send().await.unwrap().text().await.unwrap();
    let keys = listing.split("<Key>").skip(1).filter_map(|k| k.split("</Key>").next()).map(str::to_string).collect();
    let uploads = client.get(format!("{base}?uploads")).send().await.unwrap().text().await.unwrap();
    (keys, uploads.matches("<Upload>").count())
}

/// Polls `url` until `done` says its JSON is what the test waits for (at most `secs`).
async fn wait_for(client: &reqwest::Client, url: &str, secs: u64, done: impl Fn(u16, &Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let res = client.get(url).send().await;
        if let Ok(res) = res {
            let status = res.status().as_u16();
            let body: Value = res.json().await.unwrap_or(Value::Null);
            if done(status, &body) {
                return body;
            }
            assert!(tokio::time::Instant::now() < deadline, "{url} never got there; last {status} {body}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the replica at `url` lists a live worker with the CPU.
async fn wait_for_workers(client: &reqwest::Client, url: &str, n: usize) {
    wait_for(client, &format!("{url}/api/devices"), 30, |s, v| {
        s == 200
            && v.as_array().is_some_and(|d| {
                d.iter().any(|d| d["id"] == "cpu" && d["workers"].as_array().is_some_and(|w| w.len() >= n))
            })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_upload_through_one_replica_downloads_through_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let Some(backing) = Backing::start(dir.path(), "cluster_upload_through_one_replica_downloads_through_the_other")
    else {
        return;
    };
    let (a, b) = (backing.replica(1), backing.replica(2));
    let client = reqwest::Client::new();
    // Over three multipart parts, so the streamed upload is more than one part.
    let bytes = archive(20 << 20, 7);
    let (status, stored) = upload(&client, &a.url, "big.recap", bytes.clone()).await;
    assert_eq!(status, 201, "{stored}");
    let id = stored["id"].as_str().unwrap().to_string();
    let hash = stored["hash"].as_str().unwrap().to_string();

    let (status, listed) = get_json(&client, &format!("{}/api/archives", b.url)).await;
    assert_eq!(status, 200);
    assert_eq!(listed, serde_json::json!([stored.clone()]));
    let raw = client.get(format!("{}/api/archives/{id}/raw", b.url)).send().await.unwrap();
    assert_eq!(raw.status().as_u16(), 200);
    assert_eq!(raw.headers()["etag"].to_str().unwrap(), format!("\"{hash}\""));
    assert!(raw.bytes().await.unwrap().as_ref() == &bytes[..], "the other replica serves the same bytes");
    // Replica 2 never held the archive: the range comes from the object store.
    let part = client
        .get(format!("{}/api/archives/{id}/raw", b.url))
        .header("Range", "bytes=9000000-9000999")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status().as_u16(), 206);
    assert_eq!(part.headers()["content-range"].to_str().unwrap(), format!("bytes 9000000-9000999/{}", bytes.len()));
    assert!(part.bytes().await.unwrap().as_ref() == &bytes[9_000_000..9_001_000]);
    // The same bytes through the other replica: stored once.
    let (status, again) = upload(&client, &b.url, "again.recap", bytes.clone()).await;
    assert_eq!((status, &again["id"]), (200, &stored["id"]));

    // An invalid upload (truncated) leaves nothing listed and no upload in progress.
    let (status, err) = upload(&client, &b.url, "bad.recap", bytes[..bytes.len() - 100].to_vec()).await;
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["code"], "invalid_archive");
    let (_, listed) = get_json(&client, &format!("{}/api/archives", a.url)).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    let (keys, uploads) = bucket_contents(&client, backing.s3.port, "").await;
    assert_eq!(keys, vec![format!("blobs/{hash}.recap")], "only the stored archive is in the bucket");
    assert_eq!(uploads, 0, "the refused upload's multipart upload was aborted");

    // Deleted through one replica: gone from both and from the bucket.
    let del = client.delete(format!("{}/api/archives/{id}", b.url)).send().await.unwrap();
    assert_eq!(del.status().as_u16(), 204);
    let (status, _) = get_json(&client, &format!("{}/api/archives/{id}", a.url)).await;
    assert_eq!(status, 404);
    assert!(bucket_contents(&client, backing.s3.port, "blobs/").await.0.is_empty());
}

/// A 1 GiB archive posted to a replica streams into S3 part by part: the replica never holds it
/// (its peak resident memory stays a small fraction of the archive), the archive is listed only once
/// complete, and the other replica serves its last bytes from the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_1_gib_upload_streams_into_s3_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let Some(backing) = Backing::start(dir.path(), "cluster_a_1_gib_upload_streams_into_s3_in_bounded_memory") else {
        return;
    };
    let src = dir.path().join("big.recap");
    recap_tests::write_noise_archive(&src, 1 << 30, 11);
    let len = std::fs::metadata(&src).unwrap().len();
    let (a, b) = (backing.replica(1), backing.replica(2));
    let client = reqwest::Client::new();
    let file = tokio::fs::File::open(&src).await.unwrap();
    let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
    let res = client
        .post(format!("{}/api/archives?name=big", a.url))
        .header("content-type", "application/octet-stream")
        .header("Content-Length", len)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let stored: Value = res.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 201, "{stored}\n{}", a.log_text());
    assert_eq!(stored["size"].as_u64(), Some(len), "{stored}");
    // VmHWM is the process's peak resident memory over its whole life.
    let status = std::fs::read_to_string(format!("/proc/{}/status", a.pid())).unwrap();
    let hwm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc/PID/status");
    assert!(hwm_kib < 256 << 10, "the replica peaked at {} MiB for a 1 GiB upload", hwm_kib >> 10);

    let (_, listed) = get_json(&client, &format!("{}/api/archives", b.url)).await;
    assert_eq!(listed, serde_json::json!([stored.clone()]));
    let tail = client
        .get(format!("{}/api/archives/{}/raw", b.url, stored["id"].as_str().unwrap()))
        .header("Range", format!("bytes={}-{}", len - 4096, len - 1))
        .send()
        .await
        .unwrap();
    assert_eq!(tail.status().as_u16(), 206);
    let mut want = vec![0u8; 4096];
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(&src).unwrap();
        f.seek(SeekFrom::Start(len - 4096)).unwrap();
        f.read_exact(&mut want).unwrap();
    }
    assert!(tail.bytes().await.unwrap().as_ref() == &want[..], "the other replica serves the archive's last bytes");
    let (_, uploads) = bucket_contents(&client, backing.s3.port, "").await;
    assert_eq!(uploads, 0, "no multipart upload left open");
}

/// A replica killed (`kill -9`) in the middle of an upload: nothing is listed anywhere, the other
/// replica takes the same bytes whole, and the bucket holds only the stored archive (the killed
/// replica's multipart upload stays open, invisible, until the bucket's lifecycle rule ends it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replica_killed_mid_upload_lists_nothing_half_done() {
    let dir = tempfile::tempdir().unwrap();
    let Some(backing) = Backing::start(dir.path(), "cluster_replica_killed_mid_upload_lists_nothing_half_done") else {
        return;
    };
    let (a, b) = (backing.replica(1), backing.replica(2));
    let client = reqwest::Client::new();
    let bytes = archive(24 << 20, 5);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(2);
    let body = reqwest::Body::wrap_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    }));
    let sending = tokio::spawn(
        client
            .post(format!("{}/api/archives?name=cut.recap", a.url))
            .header("content-type", "application/octet-stream")
            .header("Content-Length", bytes.len())
            .body(body)
            .send(),
    );
    // Half the archive, then the replica dies while its multipart upload is open.
    for chunk in bytes[..12 << 20].chunks(1 << 20) {
        tx.send(Ok(chunk.to_vec())).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while bucket_contents(&client, backing.s3.port, "").await.1 == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the upload never reached the bucket");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.kill9();
    drop(tx);
    let cut = sending.await.unwrap();
    assert!(cut.is_err() || !cut.unwrap().status().is_success(), "a cut upload is never stored");

    let (status, listed) = get_json(&client, &format!("{}/api/archives", b.url)).await;
    assert_eq!((status, listed), (200, serde_json::json!([])), "nothing half-uploaded is listed");
    let (keys, open_uploads) = bucket_contents(&client, backing.s3.port, "").await;
    assert!(keys.is_empty(), "no object was written: {keys:?}");
    assert_eq!(open_uploads, 1, "the killed replica's multipart upload");
    let (status, stored) = upload(&client, &b.url, "whole.recap", bytes).await;
    assert_eq!(status, 201, "{stored}");
    let (keys, _) = bucket_contents(&client, backing.s3.port, "").await;
    assert_eq!(keys, vec![format!("blobs/{}.recap", stored["hash"].as_str().unwrap())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_session_started_on_one_replica_is_watched_from_both() {
    let dir = tempfile::tempdir().unwrap();
    let Some(backing) = Backing::start(dir.path(), "cluster_session_started_on_one_replica_is_watched_from_both")
    else {
        return;
    };
    let (a, b) = (backing.replica(1), backing.replica(2));
    let _worker = backing.worker(1, 10);
    let client = reqwest::Client::new();
    wait_for_workers(&client, &b.url, 1).await;
    let (status, stored) = upload(&client, &a.url, "count.recap", counting_archive(100_000)).await;
    assert_eq!(status, 201, "{stored}");
    let created =
        new_session(&client, &a.url, serde_json::json!({"archive": stored["id"], "iterations": 3, "check": true}))
            .await;
    let id = created["id"].as_str().unwrap().to_string();
    assert!(created["url"].as_str().unwrap().starts_with(&a.url));
    let path = format!("/api/sessions/{id}/ws");
    let (ws_a, ws_b) = (a.ws(&path), b.ws(&path));
    let (on_a, on_b) = tokio::join!(collect_stream(&ws_a), collect_stream(&ws_b));
    assert_eq!(on_a, on_b, "both replicas' viewers get the same messages");
    let seqs: Vec<u64> = on_a.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..on_a.len() as u64).collect::<Vec<_>>());
    let kinds: Vec<&str> = on_a.iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"state"));
    assert_eq!(kinds.last(), Some(&"finished"), "{on_a:#?}");
    assert_eq!(kinds.iter().filter(|k| **k == "iteration").count(), 3);
    assert_eq!(on_a.last().unwrap()["check"]["passed"], true);

    // Recorded in the index: every replica says it finished, and a late viewer gets the same log.
    let info =
        wait_for(&client, &format!("{}/api/sessions/{id}", b.url), 30, |s, v| s == 200 && v["state"] == "finished")
            .await;
    assert_eq!(info["passed"], true);
    assert_eq!(collect_stream(&b.ws(&path)).await, on_a);
    // What the worker kept of the output region, through either replica.
    for replica in [&a, &b] {
        let npy = client.get(format!("{}/api/sessions/{id}/regions/x", replica.url)).send().await.unwrap();
        assert_eq!(npy.status().as_u16(), 200);
        let npy = npy.bytes().await.unwrap();
        assert!(npy.starts_with(b"\x93NUMPY") && npy.ends_with(&[3u8; 16]), "{npy:?}");
    }
    let (_, list) = get_json(&client, &format!("{}/api/sessions", a.url)).await;
    assert_eq!(list[0]["id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_worker_and_replica_killed_mid_session_run_it_again_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let test = "cluster_worker_and_replica_killed_mid_session_run_it_again_with_a_note";
    let Some(backing) = Backing::start(dir.path(), test) else {
        return;
    };
    let (a, b) = (backing.replica(1), backing.replica(2));
    let mut workers = [backing.worker(1, 3), backing.worker(2, 3)];
    let client = reqwest::Client::new();
    wait_for_workers(&client, &a.url, 2).await;
    let (_, stored) = upload(&client, &a.url, "count.recap", counting_archive(2_000_000)).await;
    let created =
        new_session(&client, &a.url, serde_json::json!({"archive": stored["id"], "iterations": 60, "check": true}))
            .await;
    let id = created["id"].as_str().unwrap().to_string();
    let path = format!("/api/sessions/{id}/ws");

    // A viewer on the replica the session was started on, until that replica dies.
    let (mut ws, _) = tokio_tungstenite::connect_async(a.ws(&path)).await.unwrap();
    let mut seen_on_a = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut killed = None;
    let mut replica = Some(a);
    loop {
        let next = tokio::time::timeout_at(deadline, ws.next()).await.expect("the session gets under way in time");
        let message: Value = match next {
            Some(Ok(Message::Text(t))) => serde_json::from_str(t.as_str()).unwrap(),
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => continue,
        };
        // Once it is well under way: kill -9 the worker running it, and the replica.
        if killed.is_none() && message["type"] == "iteration" && message["index"] == 2 {
            let running = workers.iter().position(|w| w.log_text().contains(&id)).expect("a worker took the session");
            workers[running].kill9();
            killed = Some(running);
            replica.take().unwrap().kill9();
        }
        seen_on_a.push(message);
    }
    let killed = killed.expect("the session ran long enough to kill its worker mid-way");

    // The viewer reconnects to the other replica and gets the whole log, from the start.
    let seen = collect_stream(&b.ws(&path)).await;
    assert_eq!(seen[..seen_on_a.len()], seen_on_a[..], "the other replica's log begins with what the viewer saw");
    let note = seen
        .iter()
        .position(|m| {
            m["type"] == "state" && m["note"].as_str().is_some_and(|n| n.contains("runs again from the start"))
        })
        .unwrap_or_else(|| panic!("no note that it runs again: {seen:#?}"));
    let after: Vec<&Value> = seen[note..].iter().collect();
    assert!(after.iter().any(|m| m["type"] == "started"), "it started again after the note");
    assert_eq!(after.iter().filter(|m| m["type"] == "iteration").count(), 60, "the whole run again");
    assert_eq!(seen.last().unwrap()["type"], "finished");
    assert_eq!(seen.last().unwrap()["check"]["passed"], true);
    let other = 1 - killed;
    assert!(workers[other].log_text().contains(&id), "the other worker ran it again");
    let info =
        wait_for(&client, &format!("{}/api/sessions/{id}", b.url), 30, |s, v| s == 200 && v["state"] == "finished")
            .await;
    assert_eq!(info["passed"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_index_queue_and_object_store_outages_are_api_errors_then_recover() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut backing) =
        Backing::start(dir.path(), "cluster_index_queue_and_object_store_outages_are_api_errors_then_recover")
    else {
        return;
    };
    let a = backing.replica(1);
    let _worker = backing.worker(1, 10);
    let client = reqwest::Client::new();
    let (status, stored) = upload(&client, &a.url, "count.recap", counting_archive(1000)).await;
    assert_eq!(status, 201);
    let session = serde_json::json!({"archive": stored["id"], "iterations": 1, "check": true});

    // PostgreSQL away: the API says the index is unreachable, then works again once it is back.
    backing.pg.stop();
    let (status, err) = get_json(&client, &format!("{}/api/archives", a.url)).await;
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "unavailable");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("index postgres://") && message.contains("unreachable"), "{message}");
    backing.pg.restart().unwrap();
    let listed = wait_for(&client, &format!("{}/api/archives", a.url), 30, |s, _| s == 200).await;
    assert_eq!(listed[0]["id"], stored["id"]);

    // NATS away: a new session cannot be queued, and the API says why.
    backing.nats.stop();
    let res = client.post(format!("{}/api/sessions", a.url)).json(&session).send().await.unwrap();
    let status = res.status().as_u16();
    let err: Value = res.json().await.unwrap();
    assert_eq!(status, 503, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("queue nats://") && message.contains("unreachable"), "{message}");
    backing.nats.restart().unwrap();
    // Back: sessions queue and run again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let created = loop {
        let res = client.post(format!("{}/api/sessions", a.url)).json(&session).send().await.unwrap();
        if res.status().as_u16() == 201 {
            break res.json::<Value>().await.unwrap();
        }
        assert!(tokio::time::Instant::now() < deadline, "sessions never queue again: {}", res.text().await.unwrap());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let stream = collect_stream(&a.ws(&format!("/api/sessions/{}/ws", created["id"].as_str().unwrap()))).await;
    assert_eq!(stream.last().unwrap()["type"], "finished", "{stream:#?}");

    // The object store away: an upload is refused naming it, and nothing is listed; once it is back
    // (moto keeps nothing across a restart, so the bucket is made again), uploads are stored again.
    backing.s3.stop();
    let (status, err) = upload(&client, &a.url, "away.recap", archive(1 << 20, 21)).await;
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "unavailable");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("blob store s3://") && message.contains("unreachable"), "{message}");
    // (The host answered before reading the whole body, so it closes that connection: the next
    // request may meet the closed socket and is retried.)
    let listed = wait_for(&client, &format!("{}/api/archives", a.url), 10, |s, _| s == 200).await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "the refused upload is not listed: {listed}");
    backing.s3.restart().unwrap();
    let bucket = format!("http://127.0.0.1:{}/{}", backing.s3.port, recap_tests::services::BUCKET);
    assert!(client.put(bucket).send().await.unwrap().status().is_success());
    let (status, stored) = upload(&client, &a.url, "back.recap", archive(1 << 20, 21)).await;
    assert_eq!(status, 201, "{stored}");
}
