//! The host under attack: foreign pages, rebinding names, archives that ask for too much, endless
//! kernels, sessions whose worker dies. The real `recap serve` on port 0, real HTTP and WebSocket
//! clients; every refusal is checked by what it answers and by what it did not do.

use std::time::{Duration, Instant};

use recap_tests::server::Server;
use serde_json::Value;
use shared::archive::*;

use super::host::{archive, collect_stream, get_json, new_session, upload, ws_status};

const EVIL: &str = "http://evil.example";

fn port_of(url: &str) -> &str {
    url.rsplit(':').next().unwrap()
}

async fn archive_count(client: &reqwest::Client, url: &str) -> usize {
    let (_, list) = get_json(client, &format!("{url}/api/archives")).await;
    list.as_array().unwrap().len()
}

pub(crate) async fn error_of(res: reqwest::Response) -> (u16, String, String) {
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap_or_else(|e| panic!("a {status} answer without a JSON body: {e}"));
    (
        status,
        body["error"]["code"].as_str().unwrap_or("").into(),
        body["error"]["message"].as_str().unwrap_or("").into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_other_sites_cannot_upload_or_start_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let url = &server.url;
    let bytes = archive(2000, 1);

    // A simple cross-site request: text/plain, no preflight, answer unread by the page.
    let res =
        client.post(format!("{url}/api/archives?name=x")).header("content-type", "text/plain").body(bytes.clone());
    let (status, code, message) = error_of(res.send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (415, "unsupported_media_type"), "{message}");
    assert!(message.contains("application/octet-stream"), "{message}");
    // The right type from a foreign page.
    let res = client
        .post(format!("{url}/api/archives?name=x"))
        .header("content-type", "application/octet-stream")
        .header("origin", EVIL)
        .body(bytes.clone());
    let (status, code, message) = error_of(res.send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (403, "foreign_origin"), "{message}");
    assert!(message.contains("evil.example"), "{message}");
    // Fetch metadata says cross-site though no Origin came.
    let res = client
        .post(format!("{url}/api/archives?name=x"))
        .header("content-type", "application/octet-stream")
        .header("sec-fetch-site", "cross-site")
        .body(bytes.clone());
    assert_eq!(error_of(res.send().await.unwrap()).await.0, 403);
    assert_eq!(archive_count(&client, url).await, 0, "nothing refused was stored");

    // The page this host serves uploads as before.
    let res = client
        .post(format!("{url}/api/archives?name=x"))
        .header("content-type", "application/octet-stream")
        .header("origin", url.as_str())
        .header("sec-fetch-site", "same-origin")
        .body(bytes.clone());
    let res = res.send().await.unwrap();
    assert_eq!(res.status().as_u16(), 201);
    let a: Value = res.json().await.unwrap();

    // Sessions: JSON only, and never from a foreign page.
    let body = serde_json::json!({"archive": a["id"]}).to_string();
    let res = client.post(format!("{url}/api/sessions")).header("content-type", "text/plain").body(body.clone());
    let (status, code, _) = error_of(res.send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (415, "unsupported_media_type"));
    let res = client
        .post(format!("{url}/api/sessions"))
        .header("content-type", "application/json")
        .header("origin", EVIL)
        .body(body.clone());
    assert_eq!(error_of(res.send().await.unwrap()).await.1, "foreign_origin");
    let (_, sessions) = get_json(&client, &format!("{url}/api/sessions")).await;
    assert_eq!(sessions, serde_json::json!([]), "no refused session was queued");
    let res = client
        .post(format!("{url}/api/sessions"))
        .header("content-type", "application/json")
        .header("origin", url.as_str());
    assert_eq!(res.body(body).send().await.unwrap().status().as_u16(), 201);

    // Cancelling and deleting are state changes too.
    let res = client.delete(format!("{url}/api/archives/{}", a["id"].as_str().unwrap())).header("origin", EVIL);
    assert_eq!(res.send().await.unwrap().status().as_u16(), 403);
    assert_eq!(archive_count(&client, url).await, 1);

    // Preflights are refused with a reason unless the origin was allowed.
    let res = client
        .request(reqwest::Method::OPTIONS, format!("{url}/api/sessions"))
        .header("origin", EVIL)
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(res.headers().get("access-control-allow-origin").is_none());
    assert_eq!(error_of(res).await.1, "foreign_origin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_origins_get_cors_and_configured_names_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = "https://viewer.team.example";
    let server =
        Server::start(&dir.path().join("data"), &["--allow-origin", allowed, "--allow-host", "recap.team.internal"]);
    let client = reqwest::Client::new();
    let url = &server.url;

    let res = client
        .request(reqwest::Method::OPTIONS, format!("{url}/api/archives"))
        .header("origin", allowed)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 204);
    assert_eq!(res.headers()["access-control-allow-origin"], allowed);
    assert!(res.headers()["access-control-allow-methods"].to_str().unwrap().contains("POST"));
    assert!(res.headers()["access-control-allow-headers"].to_str().unwrap().contains("content-type"));

    let res = client
        .post(format!("{url}/api/archives?name=x"))
        .header("content-type", "application/octet-stream")
        .header("origin", allowed)
        .body(archive(1000, 2))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
    assert_eq!(res.headers()["access-control-allow-origin"], allowed);
    let res = client.get(format!("{url}/api/archives")).header("origin", EVIL).send().await.unwrap();
    assert!(res.headers().get("access-control-allow-origin").is_none(), "no CORS for other origins");

    let port = port_of(url);
    let res =
        client.get(format!("{url}/api/archives")).header("host", format!("recap.team.internal:{port}")).send().await;
    assert_eq!(res.unwrap().status().as_u16(), 200);
    let res = client.get(format!("{url}/api/archives")).header("host", format!("localhost:{port}")).send().await;
    assert_eq!(res.unwrap().status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebinding_name_gets_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let url = &server.url;
    let (_, a) = upload(&client, url, "a", archive(1000, 3)).await;
    let session = new_session(&client, url, serde_json::json!({"archive": a["id"]})).await;
    let rebound = format!("evil.example:{}", port_of(url));

    // The page, the API and a state change, all same-origin as far as the attacker's browser knows.
    for path in ["/", "/api/archives", &format!("/api/archives/{}/raw", a["id"].as_str().unwrap())] {
        let res = client.get(format!("{url}{path}")).header("host", &rebound).send().await.unwrap();
        let (status, code, message) = error_of(res).await;
        assert_eq!((status, code.as_str()), (403, "foreign_host"), "{path}: {message}");
        assert!(message.contains("--allow-host"), "{message}");
    }
    let res = client
        .post(format!("{url}/api/sessions"))
        .header("host", &rebound)
        .header("origin", format!("http://{rebound}"))
        .json(&serde_json::json!({"archive": a["id"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 403);

    // The WebSocket too.
    let ws = server.ws(&format!("/api/sessions/{}/ws", session["id"].as_str().unwrap()));
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(ws.as_str()).unwrap();
    req.headers_mut().insert("host", rebound.parse().unwrap());
    req.headers_mut().insert("origin", format!("http://{rebound}").parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => assert_eq!(res.status().as_u16(), 403),
        other => panic!("a rebound WebSocket was not refused: {:?}", other.map(|(_, r)| r.status())),
    }
    assert_eq!(ws_status(&ws, Some(url)).await, 101, "the host's own page still connects");
}

/// An archive of one memset over a region that declares `size` bytes (nothing of it stored).
pub(crate) fn declared_region(size: u64) -> Vec<u8> {
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let r = w.add_region(RegionDecl::new("huge", size, DType::U8)).unwrap();
    w.memset(MemsetOp { region: r, offset: 0, len: 4, width: 4, pattern: 7 }).unwrap();
    w.finish().unwrap().into_inner()
}

/// `n` regions of `size` bytes each, one memset over each.
fn many_regions(n: u32, size: u64) -> Vec<u8> {
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    for i in 0..n {
        let r = w.add_region(RegionDecl::new(format!("r{i}"), size, DType::U8)).unwrap();
        w.memset(MemsetOp { region: r, offset: 0, len: 4, width: 4, pattern: 1 }).unwrap();
    }
    w.finish().unwrap().into_inner()
}

const SPIN: &str =
    ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry spin()\n{\n$L_top:\n\tbra.uni $L_top;\n}\n";

pub(crate) fn spin_archive() -> Vec<u8> {
    let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    let m = w.add_module("spin", SPIN).unwrap();
    let k = w.add_kernel(m, "spin", vec![]).unwrap();
    w.launch(LaunchDecl {
        kernel: k,
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_bytes: 0,
        params: vec![],
        relocs: vec![],
    })
    .unwrap();
    w.finish().unwrap().into_inner()
}

/// The last message of a session's stream, after waiting for it to end.
async fn outcome(server: &Server, session: &Value) -> Value {
    let ws = server.ws(&format!("/api/sessions/{}/ws", session["id"].as_str().unwrap()));
    collect_stream(&ws).await.pop().expect("a session ends with a message")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archives_that_ask_for_too_much_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let url = &server.url;

    // 2 GiB declared in a file of a few hundred bytes.
    let small = declared_region(2 << 30);
    assert!(small.len() < 2000, "{}", small.len());
    let (_, big) = upload(&client, url, "big", small).await;
    let session = new_session(&client, url, serde_json::json!({"archive": big["id"]})).await;
    let last = outcome(&server, &session).await;
    let error = last["error"].as_str().unwrap_or_else(|| panic!("{last}"));
    assert!(
        error.contains("region \"huge\"") && error.contains("2147483648") && error.contains("--max-region-bytes"),
        "{error}"
    );

    // 5,000 regions of 1 MiB.
    let (_, many) = upload(&client, url, "many", many_regions(5000, 1 << 20)).await;
    let session = new_session(&client, url, serde_json::json!({"archive": many["id"]})).await;
    let error = outcome(&server, &session).await["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("number of regions") && error.contains("5000") && error.contains("--max-regions"),
        "{error}"
    );

    // The host goes on, and a sound archive still runs.
    let (_, ok) = upload(&client, url, "ok", archive(1 << 16, 4)).await;
    let session = new_session(&client, url, serde_json::json!({"archive": ok["id"]})).await;
    assert_eq!(outcome(&server, &session).await["type"], "finished");
    assert_eq!(archive_count(&client, url).await, 3, "nothing stored was lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_tighter_limits_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--max-total-bytes", "1MiB"]);
    let client = reqwest::Client::new();
    let (_, a) = upload(&client, &server.url, "a", many_regions(3, 512 << 10)).await;
    let session = new_session(&client, &server.url, serde_json::json!({"archive": a["id"]})).await;
    let error = outcome(&server, &session).await["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("all regions together") && error.contains("1572864") && error.contains("1048576"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_kernels_end_by_budget_or_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        Server::start(&dir.path().join("data"), &["--max-session-time-limit", "60", "--session-time-limit", "30"]);
    let client = reqwest::Client::new();
    let url = &server.url;
    let (_, spin) = upload(&client, url, "spin", spin_archive()).await;

    let session = new_session(&client, url, serde_json::json!({"archive": spin["id"], "budget": 100000})).await;
    let error = outcome(&server, &session).await["error"].as_str().unwrap().to_string();
    assert!(error.contains("budget of 100000"), "{error}");

    // No budget small enough to stop it: the clock does.
    let started = Instant::now();
    let session = new_session(
        &client,
        url,
        serde_json::json!({"archive": spin["id"], "budget": 10_000_000_000_000u64, "time_limit_s": 2}),
    )
    .await;
    let last = outcome(&server, &session).await;
    let error = last["error"].as_str().unwrap_or_else(|| panic!("{last}"));
    assert!(error.contains("stopped after 2 s") && error.contains("time limit"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    let (_, info) = get_json(&client, &format!("{url}/api/sessions/{}", session["id"].as_str().unwrap())).await;
    assert_eq!((info["state"].as_str(), info["time_limit_s"].as_u64()), (Some("failed"), Some(2)));

    // Asking for more than the host allows, or for a setting that does not exist.
    for (body, needle) in [
        (serde_json::json!({"archive": spin["id"], "time_limit_s": 61}), "maximum of 60 seconds"),
        (serde_json::json!({"archive": spin["id"], "budget": 0}), "budget"),
        (serde_json::json!({"archive": spin["id"], "iterationz": 5}), "iterationz"),
    ] {
        let res = client.post(format!("{url}/api/sessions")).json(&body).send().await.unwrap();
        let (status, code, message) = error_of(res).await;
        assert_eq!((status, code.as_str()), (400, "bad_request"), "{message}");
        assert!(message.contains(needle), "{message}");
    }
    // Compiling the kernel to native code wrote nothing of Cranelift's into the host's log.
    let log = server.log_text();
    assert!(!log.contains("cranelift") && log.len() < 32 << 10, "{} bytes of log:\n{log:.2000}", log.len());
}

/// The pids of `parent`'s children.
fn children(parent: u32) -> Vec<u32> {
    let Ok(out) = std::process::Command::new("pgrep").args(["-P", &parent.to_string()]).output() else { return vec![] };
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_session_runs_in_a_worker_whose_death_ends_only_that_session() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let url = &server.url;
    let (_, spin) = upload(&client, url, "spin", spin_archive()).await;
    let session = new_session(&client, url, serde_json::json!({"archive": spin["id"]})).await;

    let deadline = Instant::now() + Duration::from_secs(30);
    let worker = loop {
        if let Some(&pid) = children(server.pid()).first() {
            break pid;
        }
        assert!(Instant::now() < deadline, "no worker process appeared for the CPU session");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // What an allocation failure or the out-of-memory killer does to the process replaying.
    std::process::Command::new("kill").args(["-9", &worker.to_string()]).status().unwrap();
    let last = outcome(&server, &session).await;
    let error = last["error"].as_str().unwrap_or_else(|| panic!("{last}"));
    assert!(error.contains("replay worker for cpu ended"), "{error}");

    let (status, _) = get_json(&client, &format!("{url}/api/devices")).await;
    assert_eq!(status, 200, "the host keeps serving");
    let (_, ok) = upload(&client, url, "ok", archive(4096, 5)).await;
    let session = new_session(&client, url, serde_json::json!({"archive": ok["id"], "iterations": 3})).await;
    assert_eq!(outcome(&server, &session).await["type"], "finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_json_and_downloads_revalidate() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let url = &server.url;

    let res = client
        .post(format!("{url}/api/archives?name=a&name=b"))
        .header("content-type", "application/octet-stream")
        .body(archive(1000, 6))
        .send()
        .await
        .unwrap();
    let (status, code, message) = error_of(res).await;
    assert_eq!((status, code.as_str()), (400, "bad_request"), "{message}");
    assert!(message.contains("name"), "{message}");

    let res = client.put(format!("{url}/api/archives")).send().await.unwrap();
    let allow = res.headers().get("allow").map(|v| v.to_str().unwrap().to_string());
    let (status, code, _) = error_of(res).await;
    assert_eq!((status, code.as_str()), (405, "method_not_allowed"));
    assert!(allow.is_some_and(|a| a.contains("POST")));

    let res = client.post(format!("{url}/api/sessions")).header("content-type", "application/json").body("{nope");
    assert_eq!(error_of(res.send().await.unwrap()).await.0, 400);

    let (_, a) = upload(&client, url, "Schrödinger \"cat\".recap", archive(3000, 7)).await;
    let raw = format!("{url}/api/archives/{}/raw", a["id"].as_str().unwrap());
    let res = client.get(&raw).send().await.unwrap();
    let etag = res.headers()["etag"].to_str().unwrap().to_string();
    let disposition = res.headers()["content-disposition"].to_str().unwrap().to_string();
    assert_eq!(
        disposition,
        "attachment; filename=\"Schr_dinger__cat_.recap\"; filename*=UTF-8''Schr%C3%B6dinger%20%22cat%22.recap"
    );
    let res = client.get(&raw).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 304);
    assert!(res.bytes().await.unwrap().is_empty());
    let res = client.get(&raw).header("if-none-match", "\"something-else\"").send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
}

/// Every text message of a session's WebSocket, exactly as sent.
async fn raw_stream(ws_url: &str) -> Vec<String> {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url).await.expect("WebSocket opens");
    let mut out = Vec::new();
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_secs(60), ws.next()).await {
        match msg {
            Ok(Message::Text(t)) => out.push(t.as_str().to_string()),
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_joiners_get_the_very_bytes_live_viewers_got() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let client = reqwest::Client::new();
    let (_, a) = upload(&client, &server.url, "a", archive(1 << 16, 8)).await;
    let session = new_session(&client, &server.url, serde_json::json!({"archive": a["id"], "iterations": 300})).await;
    let ws = server.ws(&format!("/api/sessions/{}/ws", session["id"].as_str().unwrap()));
    let live = raw_stream(&ws).await;
    assert!(live.len() > 300, "{}", live.len());
    assert!(live.iter().any(|l| l.contains("time_ms")), "the log carries float timings");
    let late = raw_stream(&ws).await;
    assert_eq!(late.len(), live.len());
    for (i, (a, b)) in live.iter().zip(&late).enumerate() {
        assert_eq!(a, b, "message {i} differs");
    }
}
