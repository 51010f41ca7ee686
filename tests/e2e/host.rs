//! The host: the real `recap serve` on port 0, driven with real HTTP and WebSocket clients.

use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use recap_tests::server::Server;
use serde_json::Value;
use shared::archive::{ArchiveWriter, DType, MemsetOp, RegionDecl};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// A valid archive whose one region holds `len` pseudo-random (incompressible) bytes from `seed`.
pub(crate) fn archive(len: usize, seed: u64) -> Vec<u8> {
    let data = recap_tests::noise(len, seed);
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let r = w.add_region(RegionDecl::new("x", len as u64, DType::U8)).unwrap();
    w.set_initial_bytes(r, &data).unwrap();
    w.memset(MemsetOp { region: r, offset: 0, len: 4, width: 4, pattern: seed }).unwrap();
    w.finish().unwrap().into_inner()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

pub(crate) async fn upload(client: &reqwest::Client, url: &str, name: &str, bytes: Vec<u8>) -> (u16, Value) {
    let res = client
        .post(format!("{url}/api/archives?name={name}"))
        .header("content-type", "application/octet-stream")
        .body(bytes)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

pub(crate) async fn get_json(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let res = client.get(url).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

/// Every text message of a session's WebSocket until the host closes it.
pub(crate) async fn collect_stream(ws_url: &str) -> Vec<Value> {
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url).await.expect("WebSocket opens");
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next()).await.expect("session stream ends in time");
        match msg {
            Some(Ok(Message::Text(t))) => out.push(serde_json::from_str(t.as_str()).unwrap()),
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("WebSocket error: {e}"),
        }
    }
    out
}

pub(crate) async fn new_session(client: &reqwest::Client, url: &str, body: Value) -> Value {
    let res = client.post(format!("{url}/api/sessions")).json(&body).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 201);
    res.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archives_upload_list_download_with_ranges_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let bytes = archive(100_000, 1);

    let (status, a) = upload(&client, &server.url, "first.recap", bytes.clone()).await;
    assert_eq!(status, 201, "{a}");
    assert_eq!(a["name"], "first.recap");
    assert_eq!(a["size"], bytes.len() as u64);
    assert_eq!(a["hash"], blake3::hash(&bytes).to_hex().as_str());
    assert_eq!((a["ops"].as_u64(), a["kernels"].as_u64(), a["regions"].as_u64()), (Some(1), Some(0), Some(1)));
    let id = a["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 32);

    let (status, list) = get_json(&client, &format!("{}/api/archives", server.url)).await;
    assert_eq!(status, 200);
    assert_eq!(list, serde_json::json!([a.clone()]));
    let (status, one) = get_json(&client, &format!("{}/api/archives/{id}", server.url)).await;
    assert_eq!((status, &one), (200, &a));

    let raw = client.get(format!("{}/api/archives/{id}/raw", server.url)).send().await.unwrap();
    assert_eq!(raw.status().as_u16(), 200);
    assert_eq!(raw.bytes().await.unwrap().as_ref(), &bytes[..]);
    let part = client
        .get(format!("{}/api/archives/{id}/raw", server.url))
        .header("Range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status().as_u16(), 206);
    assert_eq!(part.headers()["content-range"].to_str().unwrap(), format!("bytes 1000-1999/{}", bytes.len()));
    assert_eq!(part.bytes().await.unwrap().as_ref(), &bytes[1000..2000]);

    let del = client.delete(format!("{}/api/archives/{id}", server.url)).send().await.unwrap();
    assert_eq!(del.status().as_u16(), 204);
    let (status, err) = get_json(&client, &format!("{}/api/archives/{id}", server.url)).await;
    assert_eq!(status, 404);
    assert_eq!(err["error"]["code"], "not_found");
    let del = client.delete(format!("{}/api/archives/{id}", server.url)).send().await.unwrap();
    assert_eq!(del.status().as_u16(), 404);
    assert!(files_in(&server.data.join("blobs")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_truncated_and_oversized_uploads_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--max-upload", "65536"]);
    let client = reqwest::Client::new();

    let (status, err) = upload(
        &client,
        &server.url,
        "junk",
        b"definitely not an archive: a plain text file that is longer than any archive header".to_vec(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["code"], "invalid_archive");
    assert!(err["error"]["message"].as_str().unwrap().contains("magic"), "{err}");

    let good = archive(20_000, 2);
    let (status, err) = upload(&client, &server.url, "cut", good[..good.len() / 2].to_vec()).await;
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["code"], "invalid_archive");

    let mut flipped = good.clone();
    let last = flipped.len() - 100;
    flipped[last] ^= 0x40;
    let (status, err) = upload(&client, &server.url, "flipped", flipped).await;
    assert_eq!(status, 400, "{err}");

    let (status, err) = upload(&client, &server.url, "empty", Vec::new()).await;
    assert_eq!(status, 400, "{err}");

    // Too large, declared (Content-Length) or found while streaming: always the 413 answer, never a
    // reset connection, even while the client is still sending megabytes.
    let big = archive(4 << 20, 3);
    for round in 0..3 {
        let res = client
            .post(format!("{}/api/archives?name=big", server.url))
            .header("content-type", "application/octet-stream")
            .body(big.clone())
            .send()
            .await;
        let res = res.unwrap_or_else(|e| panic!("round {round}: declared too large: {e:?}"));
        assert_eq!(res.status().as_u16(), 413);
        assert_eq!(res.headers()["connection"], "close");
        let err: Value = res.json().await.unwrap();
        assert_eq!(err["error"]["code"], "too_large");
        assert!(err["error"]["message"].as_str().unwrap().contains("65536"), "{err}");

        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = big.chunks(8192).map(|c| Ok(c.to_vec())).collect();
        let res = client
            .post(format!("{}/api/archives?name=big", server.url))
            .header("content-type", "application/octet-stream")
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)))
            .send()
            .await;
        let res = res.unwrap_or_else(|e| panic!("round {round}: streamed too large: {e:?}"));
        assert_eq!(res.status().as_u16(), 413);
        let err: Value = res.json().await.unwrap();
        assert_eq!(err["error"]["code"], "too_large");
    }

    let (_, list) = get_json(&client, &format!("{}/api/archives", server.url)).await;
    assert_eq!(list, serde_json::json!([]));
    assert!(files_in(&server.data.join("blobs")).is_empty());
    assert!(files_in(&server.data.join("tmp")).is_empty(), "{:?}", files_in(&server.data.join("tmp")));

    let (status, _) = upload(&client, &server.url, "good", good).await;
    assert_eq!(status, 201);
}

/// Uploads are checked while they arrive and written in large aligned blocks: damage late in the
/// blobs (in the last block, just before the tables) is refused with the validator's reason and
/// leaves nothing behind, and an archive whose length is no multiple of the block size comes back
/// byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_uploads_are_checked_to_their_last_byte() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let good = archive((9 << 20) + 12_345, 11);
    // One region, so the blobs section is its one blob, right after the 64-byte header.
    let stored = shared::archive::Archive::open(&good).unwrap().regions().next().unwrap().initial.unwrap().stored_len();
    let blobs_end = 64 + stored as usize;
    for (what, at) in
        [("early in the blobs", 100), ("late in the blobs", blobs_end - 10), ("in the tables", good.len() - 100)]
    {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        let (status, err) = upload(&client, &server.url, "bad", bad.clone()).await;
        assert_eq!(status, 400, "{what}: {err}");
        assert_eq!(err["error"]["code"], "invalid_archive", "{what}: {err}");
        let want = shared::archive::validate_reader(&mut std::io::Cursor::new(&bad)).unwrap_err().to_string();
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(&want), "{what}: {message} does not give the validator's reason: {want}");
        assert!(files_in(&server.data.join("tmp")).is_empty(), "{what}: {:?}", files_in(&server.data.join("tmp")));
        assert!(files_in(&server.data.join("blobs")).is_empty(), "{what}");
    }
    let (_, list) = get_json(&client, &format!("{}/api/archives", server.url)).await;
    assert_eq!(list, serde_json::json!([]));

    let (status, a) = upload(&client, &server.url, "good", good.clone()).await;
    assert_eq!(status, 201, "{a}");
    assert_eq!(a["hash"], blake3::hash(&good).to_hex().as_str());
    let raw =
        client.get(format!("{}/api/archives/{}/raw", server.url, a["id"].as_str().unwrap())).send().await.unwrap();
    assert_eq!(raw.bytes().await.unwrap().as_ref(), &good[..]);
    assert!(files_in(&server.data.join("tmp")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_bytes_uploaded_concurrently_are_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let bytes = archive(2 << 20, 4);
    let uploads = (0..6).map(|i| {
        let (client, url, bytes) = (client.clone(), server.url.clone(), bytes.clone());
        tokio::spawn(async move { upload(&client, &url, &format!("copy{i}"), bytes).await })
    });
    let results: Vec<(u16, Value)> =
        futures_util::future::join_all(uploads).await.into_iter().map(Result::unwrap).collect();
    let created = results.iter().filter(|(s, _)| *s == 201).count();
    assert_eq!(created, 1, "{results:?}");
    assert!(results.iter().all(|(s, a)| (*s == 200 || *s == 201) && a["id"] == results[0].1["id"]));
    let (_, list) = get_json(&client, &format!("{}/api/archives", server.url)).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(files_in(&server.data.join("blobs")).len(), 1);
    assert!(files_in(&server.data.join("tmp")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_get_identical_streams_and_late_joiners_get_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let (_, a) = upload(&client, &server.url, "a", archive(10_000, 5)).await;
    let created = new_session(&client, &server.url, serde_json::json!({"archive": a["id"], "iterations": 3})).await;
    let id = created["id"].as_str().unwrap();
    assert_eq!(id.len(), 32);
    assert!(created["url"].as_str().unwrap().ends_with(&format!("/sessions/{id}")));
    let ws = server.ws(&format!("/api/sessions/{id}/ws"));
    let (one, two) = tokio::join!(collect_stream(&ws), collect_stream(&ws));
    assert!(!one.is_empty());
    assert_eq!(one, two);
    for (i, m) in one.iter().enumerate() {
        assert_eq!(m["seq"].as_u64(), Some(i as u64), "{m}");
    }
    assert_eq!(one[0]["type"], "state");
    assert_eq!(one[0]["state"], "queued");
    let last = one.last().unwrap();
    assert!(["finished", "failed", "cancelled"].contains(&last["type"].as_str().unwrap()), "{last}");

    let late = collect_stream(&ws).await;
    assert_eq!(late, one);
    let (status, info) = get_json(&client, &format!("{}/api/sessions/{id}", server.url)).await;
    assert_eq!(status, 200);
    assert_eq!(info["state"], last["type"], "a terminal message is named after the state it ends in");

    let (status, err) = get_json(&client, &format!("{}/api/sessions/{}", server.url, "0".repeat(32))).await;
    assert_eq!((status, &err["error"]["code"]), (404, &Value::from("not_found")));
    let res = client
        .post(format!("{}/api/sessions", server.url))
        .json(&serde_json::json!({"archive": a["id"], "device": "tpu"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archives_and_sessions_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let client = reqwest::Client::new();
    let bytes = archive(50_000, 6);
    let (_, a) = upload(&client, &server.url, "keep", bytes.clone()).await;
    let created = new_session(&client, &server.url, serde_json::json!({"archive": a["id"]})).await;
    let id = created["id"].as_str().unwrap();
    let stream = collect_stream(&server.ws(&format!("/api/sessions/{id}/ws"))).await;
    let (_, info) = get_json(&client, &format!("{}/api/sessions/{id}", server.url)).await;
    assert!(server.stop(), "the host exits cleanly on SIGTERM");

    let server = Server::start(&data, &[]);
    let (_, list) = get_json(&client, &format!("{}/api/archives", server.url)).await;
    assert_eq!(list, serde_json::json!([a.clone()]));
    let raw =
        client.get(format!("{}/api/archives/{}/raw", server.url, a["id"].as_str().unwrap())).send().await.unwrap();
    assert_eq!(raw.bytes().await.unwrap().as_ref(), &bytes[..]);
    let (_, again) = get_json(&client, &format!("{}/api/sessions/{id}", server.url)).await;
    assert_eq!(again, info);
    assert_eq!(collect_stream(&server.ws(&format!("/api/sessions/{id}/ws"))).await, stream);
}

/// The same bytes uploaded under other names: one archive, each new name kept as its alias (the
/// answer says which archive the upload joined and that its name was added), listed across a
/// restart, and gone with the archive. `args` picks the index (`--index postgres://...` or none).
async fn duplicate_uploads_become_aliases(data: &Path, args: &[&str]) {
    let server = Server::start(data, args);
    let client = reqwest::Client::new();
    let bytes = archive(40_000, 11);
    let (status, first) = upload(&client, &server.url, "first.recap", bytes.clone()).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["aliases"], serde_json::json!([]));
    let (status, joined) = upload(&client, &server.url, "mine.recap", bytes.clone()).await;
    assert_eq!(status, 200, "{joined}");
    assert_eq!((&joined["id"], &joined["name"]), (&first["id"], &first["name"]), "it joins the stored archive");
    assert_eq!(joined["alias_added"], "mine.recap");
    assert_eq!(joined["aliases"], serde_json::json!(["mine.recap"]));
    assert_eq!(
        joined["note"],
        "already stored as first.recap: the same bytes were uploaded before; mine.recap is kept as another name of it"
    );
    // A name it already has adds nothing, and says so.
    let (_, again) = upload(&client, &server.url, "mine.recap", bytes.clone()).await;
    assert!(again.get("alias_added").is_none(), "{again}");
    assert_eq!(again["note"], "already stored as first.recap: the same bytes were uploaded before, also as mine.recap");
    let (_, same) = upload(&client, &server.url, "first.recap", bytes.clone()).await;
    assert_eq!(same["note"], "already stored as first.recap: the same bytes were uploaded before");
    upload(&client, &server.url, "theirs.recap", bytes.clone()).await;
    let (status, other) = upload(&client, &server.url, "other.recap", archive(1_000, 12)).await;
    assert_eq!(status, 201, "{other}");
    assert!(server.stop(), "the host exits cleanly on SIGTERM");

    let server = Server::start(data, args);
    let (_, list) = get_json(&client, &format!("{}/api/archives", server.url)).await;
    let names: Vec<(&str, &Value)> =
        list.as_array().unwrap().iter().map(|a| (a["name"].as_str().unwrap(), &a["aliases"])).collect();
    let kept = serde_json::json!(["mine.recap", "theirs.recap"]);
    assert_eq!(names, vec![("other.recap", &serde_json::json!([])), ("first.recap", &kept)], "{list}");
    let id = first["id"].as_str().unwrap();
    let (_, one) = get_json(&client, &format!("{}/api/archives/{id}", server.url)).await;
    assert_eq!(one["aliases"], kept);

    let del = client.delete(format!("{}/api/archives/{id}", server.url)).send().await.unwrap();
    assert_eq!(del.status().as_u16(), 204);
    let (status, back) = upload(&client, &server.url, "mine.recap", bytes).await;
    assert_eq!(status, 201, "{back}");
    assert_eq!((&back["name"], &back["aliases"]), (&serde_json::json!("mine.recap"), &serde_json::json!([])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_uploads_become_aliases_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    duplicate_uploads_become_aliases(&dir.path().join("data"), &[]).await;
}

/// The same on a real PostgreSQL index; skipped, saying why, where PostgreSQL is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_uploads_become_aliases_in_postgres() {
    let tools = match recap_tests::cluster::tools() {
        Ok(tools) => tools,
        Err(missing) => {
            eprintln!("SKIPPED duplicate_uploads_become_aliases_in_postgres: it needs {missing}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let pg = recap_tests::services::postgres(&tools, &dir.path().join("postgres")).expect("postgres starts");
    duplicate_uploads_become_aliases(&dir.path().join("data"), &["--index", &pg.url]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_an_upload_leaves_no_partial_archive_and_loses_no_finished_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let client = reqwest::Client::new();
    let kept = archive(300_000, 7);
    let (status, a) = upload(&client, &server.url, "kept", kept.clone()).await;
    assert_eq!(status, 201);

    // A second upload sends its first 6 MiB, then stalls until the host is killed (the host writes
    // in blocks of 4 MiB, so at least one is on the disk by then).
    let partial = archive(8 << 20, 8);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let body = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let url = format!("{}/api/archives?name=partial", server.url);
    let pending = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .post(url)
                .header("content-type", "application/octet-stream")
                .body(reqwest::Body::wrap_stream(body))
                .send()
                .await
        }
    });
    tx.send(Ok(partial[..6 << 20].to_vec())).await.unwrap();
    let tmp = data.join("tmp");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !files_in(&tmp).iter().any(|f| std::fs::metadata(tmp.join(f)).map(|m| m.len() > 0).unwrap_or(false)) {
        assert!(std::time::Instant::now() < deadline, "the upload never reached the disk");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill9();
    assert!(pending.await.unwrap().is_err(), "the stalled upload cannot have succeeded");
    drop(tx);

    let server = Server::start(&data, &[]);
    let (_, list) = get_json(&client, &format!("{}/api/archives", server.url)).await;
    assert_eq!(list, serde_json::json!([a.clone()]));
    assert_eq!(files_in(&data.join("blobs")), vec![format!("{}.recap", a["hash"].as_str().unwrap())]);
    assert!(files_in(&tmp).is_empty(), "{:?}", files_in(&tmp));
    let raw =
        client.get(format!("{}/api/archives/{}/raw", server.url, a["id"].as_str().unwrap())).send().await.unwrap();
    assert_eq!(raw.bytes().await.unwrap().as_ref(), &kept[..]);
}

pub(crate) async fn ws_status(url: &str, origin: Option<&str>) -> u16 {
    let mut req = url.into_client_request().unwrap();
    if let Some(o) = origin {
        req.headers_mut().insert("Origin", o.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((mut ws, res)) => {
            let _ = ws.close(None).await;
            res.status().as_u16()
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => res.status().as_u16(),
        Err(e) => panic!("WebSocket to {url}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_and_the_websocket_origin_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--token", "s3cret-token"]);
    let client = reqwest::Client::new();
    let list = format!("{}/api/archives", server.url);

    let (status, err) = get_json(&client, &list).await;
    assert_eq!((status, &err["error"]["code"]), (401, &Value::from("unauthorized")));
    let res = client.get(&list).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let res = client.get(&list).bearer_auth("s3cret-token").send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let res = client.get(format!("{list}?token=s3cret-token")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let res = client
        .post(format!("{list}?name=x"))
        .header("content-type", "application/octet-stream")
        .body(archive(1000, 9))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401, "uploads need the token too");
    assert_eq!(client.get(&server.url).send().await.unwrap().status().as_u16(), 200, "pages need no token");

    let res = client
        .post(format!("{list}?name=x"))
        .bearer_auth("s3cret-token")
        .header("content-type", "application/octet-stream")
        .body(archive(1000, 9))
        .send()
        .await
        .unwrap();
    let a: Value = res.json().await.unwrap();
    let res = client
        .post(format!("{}/api/sessions", server.url))
        .bearer_auth("s3cret-token")
        .json(&serde_json::json!({"archive": a["id"]}))
        .send()
        .await
        .unwrap();
    let created: Value = res.json().await.unwrap();
    let id = created["id"].as_str().unwrap();
    let link = created["url"].as_str().unwrap();
    assert!(!link.contains("s3cret-token"), "share links never carry the access token: {link}");
    let view = link.split("token=").nth(1).expect("share links carry the view-only token").to_string();
    assert_eq!(view.len(), 32);

    // The view-only token reads: the session, its archive, its stream.
    let res = client.get(format!("{}/api/sessions/{id}", server.url)).bearer_auth(&view).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let res = client
        .get(format!("{}/api/archives/{}/raw?token={view}", server.url, a["id"].as_str().unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    // ... and nothing else: no upload, no new session, no cancel, no delete.
    let res = client
        .post(format!("{list}?name=y"))
        .bearer_auth(&view)
        .header("content-type", "application/octet-stream")
        .body(archive(1000, 10))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 403);
    assert_eq!(res.json::<Value>().await.unwrap()["error"]["code"], "view_only");
    let res = client
        .post(format!("{}/api/sessions", server.url))
        .bearer_auth(&view)
        .json(&serde_json::json!({"archive": a["id"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 403);
    let res = client.delete(format!("{list}/{}?token={view}", a["id"].as_str().unwrap())).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 403);
    // The scheme is case-insensitive (RFC 7235).
    let res = client.get(&list).header("Authorization", "bearer s3cret-token").send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let res = client.get(&list).header("Authorization", "BEARER s3cret-token").send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);

    let ws = server.ws(&format!("/api/sessions/{id}/ws"));
    assert_eq!(ws_status(&ws, None).await, 401);
    let with_token = format!("{ws}?token=s3cret-token");
    assert_eq!(ws_status(&with_token, Some("http://evil.example")).await, 403);
    assert_eq!(ws_status(&with_token, Some(&server.url)).await, 101);
    assert_eq!(ws_status(&with_token, None).await, 101);
    assert_eq!(ws_status(&format!("{ws}?token={view}"), Some(&server.url)).await, 101, "share links follow the stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_beyond_loopback_generates_and_requires_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_at("0.0.0.0:0", &dir.path().join("data"), &[]);
    let port = server.url.rsplit(':').next().unwrap().to_string();
    let log = server.log_text();
    let token = log
        .lines()
        .find_map(|l| l.split("API access token: ").nth(1))
        .unwrap_or_else(|| panic!("no token printed:\n{log}"))
        .trim()
        .to_string();
    assert_eq!(token.len(), 32);
    let client = reqwest::Client::new();
    let list = format!("http://127.0.0.1:{port}/api/archives");
    assert_eq!(client.get(&list).send().await.unwrap().status().as_u16(), 401);
    assert_eq!(client.get(&list).bearer_auth(&token).send().await.unwrap().status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_sessions_know_their_position_and_only_the_control_key_cancels() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let (_, a) = upload(&client, &server.url, "a", archive(4096, 10)).await;
    // A long session holds the CPU; the second waits behind it.
    let long = new_session(&client, &server.url, serde_json::json!({"archive": a["id"], "iterations": 100000})).await;
    let queued = new_session(&client, &server.url, serde_json::json!({"archive": a["id"]})).await;
    let cancel_url = |s: &Value| format!("{}/api/sessions/{}/cancel", server.url, s["id"].as_str().unwrap());

    let res = client.post(cancel_url(&long)).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 403);
    let res = client.post(cancel_url(&long)).header("X-Recap-Control", "0".repeat(32)).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 403);

    // A viewer with control rights cancels over its WebSocket.
    let (mut ws, _) =
        tokio_tungstenite::connect_async(server.ws(&format!("/api/sessions/{}/ws", long["id"].as_str().unwrap())))
            .await
            .unwrap();
    let cancel = serde_json::json!({"type": "cancel", "control": long["control"]}).to_string();
    futures_util::SinkExt::send(&mut ws, Message::Text(cancel.into())).await.unwrap();
    let mut last = Value::Null;
    while let Some(Ok(msg)) = tokio::time::timeout(Duration::from_secs(60), ws.next()).await.unwrap() {
        if let Message::Text(t) = msg {
            last = serde_json::from_str(t.as_str()).unwrap();
        }
    }
    assert_eq!(last["type"], "cancelled", "{last}");

    let stream = collect_stream(&server.ws(&format!("/api/sessions/{}/ws", queued["id"].as_str().unwrap()))).await;
    assert!(stream.iter().any(|m| m["type"] == "queue" && m["position"] == 0), "{stream:?}");
    assert_eq!(stream.last().unwrap()["type"], "finished", "{stream:?}");
    let (_, info) = get_json(&client, &format!("{}/api/sessions/{}", server.url, long["id"].as_str().unwrap())).await;
    assert_eq!(info["state"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn region_summaries_carry_a_downsampled_preview_that_keeps_spikes() {
    // 200 rows x 300 columns of f32 (value = row index); the archive's one op writes a spike of
    // 1e6 at row 150, column 250 during the replay.
    let (rows, cols) = (200u64, 300u64);
    let data: Vec<u8> = (0..rows * cols).flat_map(|i| ((i / cols) as f32).to_le_bytes()).collect();
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let grid = w
        .add_region(RegionDecl { shape: vec![rows, cols], ..RegionDecl::new("grid", rows * cols * 4, DType::F32) })
        .unwrap();
    w.set_initial_bytes(grid, &data).unwrap();
    let spike = 1e6f32.to_bits() as u64;
    w.memset(MemsetOp { region: grid, offset: (150 * cols + 250) * 4, len: 4, width: 4, pattern: spike }).unwrap();
    let line = w.add_region(RegionDecl::new("line", 5000 * 4, DType::F32)).unwrap();
    w.set_initial_bytes(line, &(0..5000u32).flat_map(|i| (i as f32).to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let bytes = w.finish().unwrap().into_inner();

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let (status, a) = upload(&client, &server.url, "grid", bytes).await;
    assert_eq!(status, 201, "{a}");
    let created = new_session(&client, &server.url, serde_json::json!({"archive": a["id"], "check": false})).await;
    let stream = collect_stream(&server.ws(&format!("/api/sessions/{}/ws", created["id"].as_str().unwrap()))).await;
    assert_eq!(stream.last().unwrap()["type"], "finished", "{stream:?}");
    let summary = |name: &str| {
        stream
            .iter()
            .find(|m| m["type"] == "region" && m["summary"]["name"] == name)
            .unwrap_or_else(|| panic!("no summary of {name}: {stream:?}"))["summary"]
            .clone()
    };

    let p = &summary("grid")["preview"];
    assert_eq!((p["rows"].as_u64(), p["cols"].as_u64()), (Some(64), Some(64)), "{p}");
    assert_eq!(p["source_shape"], serde_json::json!([200, 300]));
    // Row 150 falls in bucket row 150*64/200 = 48, column 250 in bucket column 250*64/300 = 53.
    let spike_cell = 48 * 64 + 53;
    let maxes: Vec<f64> = p["max"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(maxes.len(), 64 * 64);
    assert_eq!(maxes[spike_cell], 1e6);
    assert!(maxes.iter().enumerate().all(|(i, &m)| i == spike_cell || m < 200.0), "only one cell holds the spike");
    assert_eq!(p["min"][0], 0.0);
    assert_eq!(p["max"][64 * 64 - 1], 199.0);

    let p = &summary("line")["preview"];
    assert_eq!((p["rows"].as_u64(), p["cols"].as_u64()), (Some(1), Some(1024)), "{p}");
    assert_eq!((p["min"][0].as_f64(), p["max"][1023].as_f64()), (Some(0.0), Some(4999.0)));
}

/// The sessions list filtered by archive, and a session that outlives its archive: listed under the
/// archive's name, its log and its kept regions (named by the log) still served; a token in the
/// query works for downloads as it does for every other GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_list_by_archive_and_outlive_their_archive() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--token", "tok"]);
    let mut auth = reqwest::header::HeaderMap::new();
    auth.insert("authorization", "Bearer tok".parse().unwrap());
    let client = reqwest::Client::builder().default_headers(auth).build().unwrap();
    let url = &server.url;
    let (_, a) = upload(&client, url, "first.recap", archive(4096, 11)).await;
    let (_, b) = upload(&client, url, "second.recap", archive(4096, 12)).await;
    let (a_id, b_id) = (a["id"].as_str().unwrap(), b["id"].as_str().unwrap());
    let sa = new_session(&client, url, serde_json::json!({"archive": a_id, "iterations": 2})).await;
    let sb = new_session(&client, url, serde_json::json!({"archive": b_id})).await;
    let sa = sa["id"].as_str().unwrap();
    for id in [sa, sb["id"].as_str().unwrap()] {
        let stream = collect_stream(&server.ws(&format!("/api/sessions/{id}/ws?token=tok"))).await;
        assert_eq!(stream.last().unwrap()["type"], "finished", "{stream:?}");
    }

    let (status, all) = get_json(&client, &format!("{url}/api/sessions")).await;
    assert_eq!((status, all.as_array().unwrap().len()), (200, 2), "{all}");
    let (_, only_a) = get_json(&client, &format!("{url}/api/sessions?archive={a_id}")).await;
    let only_a = only_a.as_array().unwrap().clone();
    assert_eq!(only_a.len(), 1, "{only_a:?}");
    assert_eq!((only_a[0]["id"].as_str(), only_a[0]["archive_name"].as_str()), (Some(sa), Some("first.recap")));
    let (status, err) = get_json(&client, &format!("{url}/api/sessions?archive={a_id}&state=x")).await;
    assert_eq!((status, err["error"]["code"].as_str()), (400, Some("bad_request")), "{err}");

    // A download link carries the token in its query, as the viewer's links do.
    let region = format!("{url}/api/sessions/{sa}/regions/x?token=tok");
    let before = reqwest::get(&region).await.unwrap();
    assert_eq!(before.status().as_u16(), 200);
    let before = before.bytes().await.unwrap();
    assert_eq!(&before[1..6], b"NUMPY");
    let initial =
        reqwest::get(format!("{url}/api/archives/{a_id}/regions/x?contents=initial&token=tok")).await.unwrap();
    assert_eq!(initial.status().as_u16(), 200, "archive regions take the token in the query too");

    let res = client.delete(format!("{url}/api/archives/{a_id}")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 204);
    let (_, only_a) = get_json(&client, &format!("{url}/api/sessions?archive={a_id}")).await;
    assert_eq!(only_a[0]["archive_name"], "first.recap", "{only_a}");
    let (status, info) = get_json(&client, &format!("{url}/api/sessions/{sa}")).await;
    // The archive holds no expected state: nothing to check is its own state, not a pass.
    assert_eq!((status, info["state"].as_str(), info["passed"].as_bool()), (200, Some("finished"), None));
    for name in ["x", "x.npy", "0"] {
        let after = reqwest::get(format!("{url}/api/sessions/{sa}/regions/{name}?token=tok")).await.unwrap();
        assert_eq!(after.status().as_u16(), 200, "{name}");
        assert_eq!(after.bytes().await.unwrap(), before, "{name}: the same file without the archive");
    }
    let (status, err) = get_json(&client, &format!("{url}/api/sessions/{sa}/regions/nope")).await;
    assert_eq!(status, 404, "{err}");
    assert!(err["error"]["message"].as_str().unwrap().contains("was deleted"), "{err}");
    let stream = collect_stream(&server.ws(&format!("/api/sessions/{sa}/ws?token=tok"))).await;
    assert!(stream.iter().any(|m| m["type"] == "region"), "the log is whole: {stream:?}");
}

/// Runs `recap session-worker` with `job` on its stdin; returns its stdout lines as JSON.
fn session_worker(job: &str) -> Vec<Value> {
    use std::io::Write;
    let mut child = std::process::Command::new(recap_tests::recap_bin())
        .arg("session-worker")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(job.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the worker exits cleanly after reporting: {out:?}");
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_session_worker_reports_bad_jobs_and_a_missing_device_as_one_failed_line() {
    let lines = session_worker("not json");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["worker"], "failed");
    assert!(lines[0]["error"].as_str().unwrap().starts_with("reading the replay job"), "{lines:?}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.recap");
    std::fs::write(&file, archive(4096, 1)).unwrap();
    let job = |ordinal: usize| {
        serde_json::json!({"archive": file, "device": {"cuda": ordinal}, "iterations": 1, "check": true, "bindings": []}).to_string()
    };
    let lines = session_worker(&job(99));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["worker"], "failed");
    let error = lines[0]["error"].as_str().unwrap();
    assert!(error.contains("no CUDA driver") || error.contains("no CUDA device 99"), "{error}");

    std::fs::write(&file, [b"not an archive, and longer than the 64-byte header of one".as_slice(); 2].concat())
        .unwrap();
    let lines = session_worker(&job(0));
    assert!(lines[0]["error"].as_str().unwrap().contains("magic"), "{lines:?}");
}

/// Every message of a finished session's stream, checked to end as `want`.
async fn run_session(client: &reqwest::Client, server: &Server, body: Value, want: &str) -> Vec<Value> {
    let created = new_session(client, &server.url, body).await;
    let stream = collect_stream(&server.ws(&format!("/api/sessions/{}/ws", created["id"].as_str().unwrap()))).await;
    assert_eq!(stream.last().unwrap()["type"], want, "{stream:#?}");
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a CUDA GPU"]
async fn cuda_sessions_run_in_workers_and_survive_a_gpu_fault() {
    let test = "cuda_sessions_run_in_workers_and_survive_a_gpu_fault";
    match recap::cuda::Device::open(0) {
        Ok(device) => println!("{test}: on {} (sm_{})", device.name, device.sm),
        Err(e @ (recap::cuda::OpenError::NoDriver | recap::cuda::OpenError::NoDevice { .. })) => {
            println!("skipping GPU test {test}: {e}");
            return;
        }
        Err(e) => panic!("CUDA driver present but unusable: {e}"),
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let (_, devices) = get_json(&client, &format!("{}/api/devices", server.url)).await;
    assert!(devices.as_array().unwrap().iter().any(|d| d["id"] == "cuda:0"), "{devices}");

    let case = recap_tests::corpus_cases().into_iter().next().expect("a corpus case");
    let good = std::fs::read(crate::gpu::import_case(&case, dir.path())).unwrap();
    let (status, good) = upload(&client, &server.url, "good", good).await;
    assert_eq!(status, 201, "{good}");
    let (status, bad) = upload(&client, &server.url, "fault", crate::gpu::fault_archive()).await;
    assert_eq!(status, 201, "{bad}");
    let session = |archive: &Value| serde_json::json!({"archive": archive["id"], "device": "cuda", "iterations": 3, "check": true});

    let first = run_session(&client, &server, session(&good), "finished").await;
    let finished = first.last().unwrap();
    println!(
        "{test}: {} on cuda:0: check passed = {}, total {} ms",
        case.display(),
        finished["check"]["passed"],
        finished["total_ms"]
    );
    assert_eq!(finished["check"]["passed"], true, "{finished}");
    assert_eq!(first.iter().filter(|m| m["type"] == "iteration").count(), 3);
    assert!(first.iter().any(|m| m["type"] == "region" && m["summary"]["preview"].is_object()), "{first:#?}");

    let faulted = run_session(&client, &server, session(&bad), "failed").await;
    let error = faulted.last().unwrap()["error"].as_str().unwrap().to_string();
    println!("{test}: faulting archive: {error}");
    assert!(error.contains("op 1") && error.contains("poke"), "the error names the op: {error}");

    let again = run_session(&client, &server, session(&good), "finished").await;
    assert_eq!(again.last().unwrap()["check"]["passed"], true, "{again:#?}");
    println!("{test}: the next session on cuda:0 passed its check");

    // The other submission modes, as a session setting.
    for mode in ["graph-pdl", "graph-pdl-wait", "graph-plain", "stream"] {
        let mut body = session(&good);
        body["cuda_mode"] = mode.into();
        let done = run_session(&client, &server, body, "finished").await;
        assert_eq!(done.last().unwrap()["check"]["passed"], true, "{mode}: {done:#?}");
    }
}

/// One launch of a kernel that never returns: a session on it runs until cancelled or stopped.
fn spin_archive() -> Vec<u8> {
    use shared::archive::LaunchDecl;
    let ptx =
        ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry spin()\n{\n$L_top:\n\tbra.uni $L_top;\n}\n";
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("spin", ptx).unwrap();
    let k = w.add_kernel(m, "spin", vec![]).unwrap();
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

/// A region bound as input `x` (zeros unless bound), whose first word a memset sets to 7; its
/// expected bytes are `1, 2, 3, 4` with that memset applied, so the check passes only when the
/// session was given `x = 1, 2, 3, 4`.
fn bound_archive() -> (Vec<u8>, String) {
    use base64::Engine as _;
    let given: Vec<u8> = [1u32, 2, 3, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut expected = given.clone();
    expected[..4].copy_from_slice(&7u32.to_le_bytes());
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let r = w.add_region(RegionDecl::new("x", 16, DType::U32)).unwrap();
    w.set_initial_bytes(r, &[0u8; 16]).unwrap();
    w.set_expected_bytes(r, &expected, shared::archive::Tolerance::Exact).unwrap();
    w.add_binding("x", r, shared::archive::Direction::In).unwrap();
    w.memset(MemsetOp { region: r, offset: 0, len: 4, width: 4, pattern: 7 }).unwrap();
    (w.finish().unwrap().into_inner(), base64::engine::general_purpose::STANDARD.encode(&given))
}

async fn wait_for_state(client: &reqwest::Client, server: &Server, id: &str, want: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, info) = get_json(client, &format!("{}/api/sessions/{id}", server.url)).await;
        if info["state"] == want {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "session {id} never reached {want}: {info}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_sessions_run_after_a_restart_and_a_session_cut_off_by_kill_9_fails() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let client = reqwest::Client::new();
    let server = Server::start(&data, &[]);
    let (_, spin) = upload(&client, &server.url, "spin", spin_archive()).await;
    let (bytes, given) = bound_archive();
    let (_, bound) = upload(&client, &server.url, "bound", bytes).await;
    // The CPU runs one session at a time: the two checked sessions wait behind the endless one.
    let long = new_session(&client, &server.url, serde_json::json!({"archive": spin["id"], "check": false})).await;
    let long_id = long["id"].as_str().unwrap().to_string();
    wait_for_state(&client, &server, &long_id, "running").await;
    let with =
        new_session(&client, &server.url, serde_json::json!({"archive": bound["id"], "bindings": {"x": given}})).await;
    let without = new_session(&client, &server.url, serde_json::json!({"archive": bound["id"]})).await;
    assert!(server.stop(), "the host exits cleanly on SIGTERM");

    // A clean stop leaves all three queued, the interrupted one first again.
    let server = Server::start(&data, &[]);
    let (_, list) = get_json(&client, &format!("{}/api/sessions", server.url)).await;
    assert!(list.as_array().unwrap().iter().all(|s| s["state"] == "queued" || s["state"] == "running"), "{list}");
    wait_for_state(&client, &server, &long_id, "running").await;
    let (_, info) = get_json(&client, &format!("{}/api/sessions/{}", server.url, with["id"].as_str().unwrap())).await;
    assert_eq!(info["state"], "queued", "{info}");
    let late =
        new_session(&client, &server.url, serde_json::json!({"archive": bound["id"], "bindings": {"x": given}})).await;
    server.kill9();

    // After a kill the session that was running is failed with the reason; the queued ones run.
    let server = Server::start(&data, &[]);
    let ws = |s: &Value| server.ws(&format!("/api/sessions/{}/ws", s["id"].as_str().unwrap()));
    let long_stream = collect_stream(&ws(&long)).await;
    let notes: Vec<&str> = long_stream.iter().filter_map(|m| m["note"].as_str()).collect();
    assert!(notes.iter().any(|n| n.contains("interrupted and runs again")), "{long_stream:#?}");
    let last = long_stream.last().unwrap();
    assert_eq!(last["type"], "failed", "{long_stream:#?}");
    assert!(last["error"].as_str().unwrap().contains("stopped while this session was running"), "{last}");
    for (i, m) in long_stream.iter().enumerate() {
        assert_eq!(m["seq"].as_u64(), Some(i as u64), "{long_stream:#?}");
    }
    for (session, passed) in [(&with, true), (&without, false), (&late, true)] {
        let stream = collect_stream(&ws(session)).await;
        let last = stream.last().unwrap();
        assert_eq!(last["type"], "finished", "{stream:#?}");
        assert_eq!(last["check"]["passed"], passed, "{stream:#?}");
        assert!(
            stream
                .iter()
                .any(|m| m["type"] == "state" && m["note"].as_str().is_some_and(|n| n.contains("queued again"))),
            "{stream:#?}"
        );
        for (i, m) in stream.iter().enumerate() {
            assert_eq!(m["seq"].as_u64(), Some(i as u64), "{stream:#?}");
        }
    }
    let (_, info) = get_json(&client, &format!("{}/api/sessions/{}", server.url, with["id"].as_str().unwrap())).await;
    assert_eq!((&info["state"], &info["passed"]), (&Value::from("finished"), &Value::from(true)), "{info}");
}

/// The binary carries the viewer: copied alone into an empty folder and started there (no `web/`
/// anywhere above it), it serves the page, its script and its wasm, and the page's routes.
#[tokio::test]
async fn an_installed_binary_serves_the_whole_viewer_from_an_empty_folder() {
    let built = recap_tests::repo_root().join("web/pkg/recap_viewer_bg.wasm");
    if !built.is_file() {
        println!("skipping: the viewer is not built (cargo xtask wasm), so no binary can carry it");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("recap");
    std::fs::copy(recap_tests::recap_bin(), &bin).unwrap();
    let data = home.path().join("data");
    let mut child = std::process::Command::new(&bin)
        .args(["serve", "--addr", "127.0.0.1:0", "--data"])
        .arg(&data)
        .current_dir(home.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let url = line.trim().to_string();
    assert!(url.starts_with("http://"), "{line}");
    let client = reqwest::Client::new();
    let get = |path: &str| {
        let client = client.clone();
        let url = format!("{url}{path}");
        async move {
            let res = client.get(&url).send().await.unwrap();
            let kind = res.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
            (res.status().as_u16(), kind, res.bytes().await.unwrap().to_vec())
        }
    };
    let (status, kind, page) = get("/").await;
    assert_eq!((status, kind.as_str()), (200, "text/html; charset=utf-8"));
    assert_eq!(page, std::fs::read(recap_tests::repo_root().join("web/index.html")).unwrap());
    let (status, kind, wasm) = get("/pkg/recap_viewer_bg.wasm").await;
    assert_eq!((status, kind.as_str()), (200, "application/wasm"));
    assert_eq!(wasm, std::fs::read(&built).unwrap(), "the wasm the binary carries is the one built");
    let (status, kind, _) = get("/main.js").await;
    assert_eq!((status, kind.as_str()), (200, "text/javascript; charset=utf-8"));
    assert_eq!(get("/archives/0123abcd").await.2, page, "client-side routes get the page");
    assert_eq!(get("/no-such-file.js").await.0, 404);
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compare_of_an_engine_with_itself_is_refused_naming_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let (_, a) = upload(&client, &server.url, "one.recap", archive(4096, 21)).await;
    let id = a["id"].as_str().unwrap();
    // `cpu` runs native code, so `cpu` and `cpu:jit` (and `jit`) are one engine.
    for (device, with) in [("cpu", "cpu:jit"), ("jit", "cpu"), ("interp", "cpu:interp")] {
        let body = serde_json::json!({"archive": id, "kind": "compare", "device": device, "compare_with": with});
        let res = client.post(format!("{}/api/sessions", server.url)).json(&body).send().await.unwrap();
        let status = res.status().as_u16();
        let err: Value = res.json().await.unwrap();
        let msg = err["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(status, 400, "{device} vs {with}: {err}");
        assert!(
            msg.contains(&format!("{device:?}")) && msg.contains(&format!("{with:?}")) && msg.contains("same engine"),
            "names both sides: {msg}"
        );
    }
    let (_, sessions) = get_json(&client, &format!("{}/api/sessions", server.url)).await;
    assert_eq!(sessions.as_array().unwrap().len(), 0, "nothing queued: {sessions}");
    // Two engines still compare.
    let created = new_session(
        &client,
        &server.url,
        serde_json::json!({"archive": id, "kind": "compare", "device": "interp", "compare_with": "cpu"}),
    )
    .await;
    let stream = collect_stream(&server.ws(&format!("/api/sessions/{}/ws", created["id"].as_str().unwrap()))).await;
    assert_eq!(stream.last().unwrap()["type"], "finished", "{stream:?}");
}
