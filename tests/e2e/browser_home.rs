//! The home page in real headless Chromium against a real host: the lists use the window's width
//! and their rows are links, a duplicate upload says under which name its bytes are stored,
//! deleting asks in the row and waits for the answer, and a constant fill says what it is.
//! Beside them, the upload route over plain HTTP as `curl` uses it.

use std::time::Duration;

use anyhow::Result;
use recap_tests::browser::{self, Browser};
use recap_tests::server::Server;

use super::browser::{archives, click, seeded_host};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lists_are_links_a_duplicate_says_where_and_delete_asks() -> Result<()> {
    if !browser::available("the_lists_are_links_a_duplicate_says_where_and_delete_asks") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let host = seeded_host(dir.path())?;
    let stored = archives(&host.url).await?;
    let b = Browser::start().await?;
    b.client.set_window_size(1600, 900).await?;
    b.open(&host.url).await?;
    b.wait_for("#archive-list .row[data-archive-id]", Duration::from_secs(10)).await?;

    // Every archive's name is a real link to its page (a new tab, the keyboard), and the list
    // spans the window rather than a narrow column.
    let links = b
        .client
        .execute(
            "return [...document.querySelectorAll('#archive-list a.name')].map(a => a.getAttribute('href'))",
            vec![],
        )
        .await?;
    let links: Vec<String> = serde_json::from_value(links)?;
    assert_eq!(links.len(), stored.len());
    for a in &stored {
        assert!(links.contains(&format!("/archives/{}", a.id)), "{links:?}");
    }
    let widths: Vec<f64> = serde_json::from_value(
        b.client
            .execute(
                "return [document.querySelector('.table.archives').getBoundingClientRect().width, window.innerWidth]",
                vec![],
            )
            .await?,
    )?;
    assert!(widths[0] > widths[1] * 0.9, "the archive list is {} px of a {} px window", widths[0], widths[1]);
    // No header or time cut short.
    let cut = b
        .client
        .execute(
            "return [...document.querySelectorAll('.table .row.head > span, #archive-list .row > span:nth-child(6)')] \
             .filter(s => s.scrollWidth > s.clientWidth + 1).map(s => s.textContent)",
            vec![],
        )
        .await?;
    assert_eq!(cut, serde_json::json!([]), "cut labels");

    // The same bytes uploaded under another name: the page says under which name they are stored,
    // and the list shows the new name with the archive.
    let copy = dir.path().join("my-copy.recap");
    std::fs::copy(dir.path().join("seed/dag-8-chains.recap"), &copy)?;
    b.choose_file("#upload-input", &copy).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        let s = b.text("#status").await.unwrap_or_default();
        if s.contains("already stored") || std::time::Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        status.contains("already stored as dag-8-chains.recap")
            && status.contains("my-copy.recap is kept as another name of it"),
        "{status}"
    );

    // Delete asks in the row, in full, and waits for the answer however long it takes.
    b.open(&host.url).await?;
    let joined = stored.iter().find(|a| a.name == "dag-8-chains.recap").expect("seeded").id.clone();
    let aliases = format!("[data-archive-aliases='{joined}']");
    b.wait_for(&aliases, Duration::from_secs(10)).await?;
    assert_eq!(b.text(&aliases).await?, "also my-copy.recap");
    let victim = stored.iter().find(|a| a.name == "pipeline-300.recap").expect("seeded").id.clone();
    b.wait_for(&format!("[data-archive-delete='{victim}']"), Duration::from_secs(10)).await?;
    click(&b, &format!("[data-archive-delete='{victim}']")).await?;
    let confirm = format!("[data-archive-delete-confirm='{victim}']");
    b.wait_for(&confirm, Duration::from_secs(2)).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The confirm button is whole and on top where it is drawn: a click in its middle reaches it.
    let hit = b
        .client
        .execute(
            "const e = document.querySelector(arguments[0]); const r = e.getBoundingClientRect(); \
             const row = e.closest('.row').getBoundingClientRect(); \
             return document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2) === e \
               && r.right <= row.right && r.left >= row.left;",
            vec![confirm.clone().into()],
        )
        .await?;
    assert_eq!(hit.as_bool(), Some(true), "the confirm button is whole and clickable");
    click(&b, "[data-archive-delete-keep]").await?;
    b.wait_for(&format!("[data-archive-delete='{victim}']"), Duration::from_secs(2)).await?;
    assert!(archives(&host.url).await?.iter().any(|a| a.id == victim), "kept");
    click(&b, &format!("[data-archive-delete='{victim}']")).await?;
    click(&b, &confirm).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while archives(&host.url).await?.iter().any(|a| a.id == victim) {
        anyhow::ensure!(std::time::Instant::now() < deadline, "the archive was not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.screenshot("browser-home").await?;
    b.close().await
}

/// A 2-D region filled with an allocator's poison pattern: its plot says it is a fill.
fn write_poisoned(path: &std::path::Path) -> Result<()> {
    use shared::archive::*;
    let file = std::fs::File::create(path)?;
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(file))?;
    let mut decl = RegionDecl::new("poisoned", 128 * 128 * 4, DType::I32);
    decl.shape = vec![128, 128];
    let r = w.add_region(decl)?;
    w.set_initial_bytes(r, &vec![0xA5u8; 128 * 128 * 4])?;
    w.memset(MemsetOp { region: r, offset: 0, len: 4, width: 4, pattern: 0xA5A5_A5A5 })?;
    w.finish()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_region_says_it_is_a_fill() -> Result<()> {
    if !browser::available("a_poisoned_region_says_it_is_a_fill") {
        return Ok(());
    }
    let root = recap_tests::repo_root();
    let server = recap_tests::static_server::serve(&root.join("web"))?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("poisoned.recap");
    write_poisoned(&file)?;
    let b = Browser::start().await?;
    b.open(&server.url).await?;
    b.choose_file("#file-input", &file).await?;
    b.wait_for("#ops-rows .row", Duration::from_secs(10)).await?;
    click(&b, "#tabs [data-tab='regions']").await?;
    let note = b.wait_for("#region-detail .fill-note", Duration::from_secs(5)).await?.text().await?;
    assert_eq!(note, "every byte is 0xA5 (0xA5A5A5A5 in every word): a fill pattern, not computed values");
    // 128×128 elements in 128×128 cells: one per element, not block means.
    let caption = b.text("#region-detail .hm-caption").await?;
    assert!(caption.starts_with("one cell per element"), "{caption}");
    b.close().await
}

#[tokio::test]
async fn uploads_by_curl_are_named_by_query_or_header_and_a_duplicate_says_where() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let host = Server::start(&dir.path().join("data"), &[]);
    let file = dir.path().join("poisoned.recap");
    write_poisoned(&file)?;
    let bytes = std::fs::read(&file)?;
    let client = reqwest::Client::new();
    let post =
        |ct: &str| client.post(format!("{}/api/archives", host.url)).header("content-type", ct).body(bytes.clone());
    // What `curl --data-binary @FILE` sends by default: refused, with how to do it.
    let res = post("application/x-www-form-urlencoded").send().await?;
    assert_eq!(res.status().as_u16(), 415);
    let body: serde_json::Value = res.json().await?;
    let message = body["error"]["message"].as_str().or(body["message"].as_str()).unwrap_or_default().to_string();
    assert!(message.contains("curl -H 'Content-Type: application/octet-stream' --data-binary @FILE"), "{body}");
    // The name in a header, for clients that keep the URL fixed.
    let res = post("application/octet-stream").header("x-recap-name", "from-header.recap").send().await?;
    assert_eq!(res.status().as_u16(), 201);
    let info: serde_json::Value = res.json().await?;
    assert_eq!(info["name"], "from-header.recap");
    assert!(info.get("note").is_none(), "{info}");
    // The same bytes again, by query: stored once, and the answer says under which name.
    let res = client
        .post(format!("{}/api/archives?name=again.recap", host.url))
        .header("content-type", "application/octet-stream")
        .body(bytes.clone())
        .send()
        .await?;
    assert_eq!(res.status().as_u16(), 200);
    let info: serde_json::Value = res.json().await?;
    assert_eq!(info["name"], "from-header.recap");
    assert_eq!(
        info["note"],
        "already stored as from-header.recap: the same bytes were uploaded before; again.recap is kept as another name of it"
    );
    Ok(())
}
